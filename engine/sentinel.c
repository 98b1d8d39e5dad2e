/* The death notice of MPI runs: which rank died first, on whichever node.
 *
 * When a rank is killed (kill -9, the kernel's out-of-memory killer) or
 * crashes, MPICH's mpiexec (Hydra) ends the other ranks at once with SIGKILL,
 * so no rank can say anything, and Hydra's own message names the process id
 * and the host ("BAD TERMINATION ... PID 26349 RUNNING AT node"), not the
 * rank. So each rank forks, before MPI is initialised, a small child that
 * waits on a pipe: the rank sends it its rank once it knows it, the other
 * ranks on its host (its siblings under the launcher's proxy), every rank's
 * child's UDP port and addresses (hyfi_sentinel_local / _peers: exchanged
 * once MPI runs), and a quit byte when it ends in order (hyfi_ctx_destroy,
 * exit(), hyfi_launch_agree's verdict). When the pipe closes without the
 * quit byte, the rank has died without ending in order, and the children of
 * the job together name its first death (sentinel_child.c says how):
 *   hyfi: rank 1 of 2 (pid 26349 on node) died without shutting down ...
 * on the first dead rank's stderr. A rank that ends the job itself (the
 * watchdog, the start-up's time limits) says so first (hyfi_sentinel_ending),
 * so that the deaths that follow are not reported. The children run in their
 * own process groups, since mpiexec signals the group of the first rank to
 * die too.
 *
 * Cost: one idle process and one UDP socket per rank; nothing per step.
 * It starts only where hyfi_ctx_config.death_notice or
 * hyfi_launch_config.death_notice asks (hyfi-train: unless HYFI_DEATH_NOTICE=0). */
#include "internal.h"
#include "sentinel.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_fd = -1; /* the pipe's write end, -1: no child */
static pid_t g_child = -1;
static int g_atexit;
static int g_port;              /* the child's UDP port, 0: none */
static const int g_fatal[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
#define NFATAL ((int)(sizeof g_fatal / sizeof g_fatal[0]))
static struct sigaction g_old[NFATAL];
static int g_hooked;

/* exit() is an end in order: the program printed its own message, if any. */
static void quit_at_exit(void) { hyfi_sentinel_quiet(); }

void hyfi_sentinel_start(void)
{
    if (atomic_load(&g_fd) >= 0) return;
    /* the line for a rank that dies before it knows its rank */
    char early[160];
    const int ne = snprintf(early, sizeof early,
                            "hyfi: a rank (pid %ld) died during MPI's start, "
                            "before it knew its rank: killed by a signal or crashed\n", (long)getpid());
    /* the claim's name: the parent's pid and start time (field 22 of its stat) */
    struct sockaddr_un claim = {.sun_family = AF_UNIX};
    unsigned long long start = 0;
    char path[64], stat[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)getppid());
    FILE *f = fopen(path, "r");
    if (f) {
        const size_t r = fread(stat, 1, sizeof stat - 1, f);
        stat[r] = 0;
        fclose(f);
        const char *p = strrchr(stat, ')'); /* after the command's name */
        for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
        if (p) start = strtoull(p + 1, NULL, 10);
    }
    const int nc = snprintf(claim.sun_path + 1, sizeof claim.sun_path - 1,
                            "hyfi-death-%ld-%llu", (long)getppid(), start);
    const socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)nc);
    long maxfd = sysconf(_SC_OPEN_MAX);
    if (maxfd <= 0 || maxfd > 65536) maxfd = 65536;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return; /* no notice: not worth failing the run */
    /* the child's socket for the other ranks' records (any address, a free port) */
    int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t alen = sizeof any;
    if (udp >= 0 && (bind(udp, (struct sockaddr *)&any, sizeof any) != 0 ||
                     getsockname(udp, (struct sockaddr *)&any, &alen) != 0)) {
        close(udp);
        udp = -1;
    }
    g_port = udp >= 0 ? ntohs(any.sin_port) : 0;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        if (udp >= 0) close(udp);
        g_port = 0;
        return;
    }
    if (pid == 0)
        hyfi_sentinel_child(p[0], udp, (int)maxfd, early, ne > 0 ? (size_t)ne : 0, &claim, len);
    close(p[0]);
    if (udp >= 0) close(udp);
    g_child = pid;
    atomic_store(&g_fd, p[1]);
    if (!g_atexit) g_atexit = atexit(quit_at_exit) == 0;
}

/* A fatal signal: tell the child which, then let the earlier handler (or the
 * default action) have it. */
static void on_fatal(int sig)
{
    const int fd = atomic_load(&g_fd);
    if (fd >= 0) {
        const char m[2] = {SENT_CRASH, (char)sig};
        hyfi_sentinel_put(fd, m, sizeof m);
    }
    for (int i = 0; i < NFATAL; i++)
        if (g_fatal[i] == sig) sigaction(sig, &g_old[i], NULL);
    raise(sig); /* delivered on return, under the earlier action */
}

/* The other ranks on this host: the other children of this process's parent
 * (the launcher's proxy), appended to msg as "S<pid> ...\n". */
static int siblings(char *msg, int n, int cap)
{
    if (n + 2 >= cap) return n;
    msg[n++] = SENT_SIBLINGS;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%ld/task", (long)getppid());
    DIR *d = opendir(dir);
    int count = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char path[128];
        snprintf(path, sizeof path, "%s/%.20s/children", dir, de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long pid;
        while (count < SENT_MAX_SIB && fscanf(f, "%ld", &pid) == 1) {
            if (pid == (long)getpid() || pid == (long)g_child) continue;
            const int w = snprintf(msg + n, (size_t)(cap - n), " %ld", pid);
            if (w < 0 || n + w + 2 >= cap) break;
            n += w;
            count++;
        }
        fclose(f);
    }
    if (d) closedir(d);
    msg[n++] = '\n';
    return n;
}

void hyfi_sentinel_arm(int rank, int nranks)
{
    const int fd = atomic_load(&g_fd);
    if (fd < 0) return;
    char host[SENT_HOST_MAX] = "?";
    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '\n') *c = '?';
    char msg[4096];
    int n = snprintf(msg, sizeof msg, "%c%d %d %ld %s\n", SENT_ARM, rank, nranks, (long)getpid(),
                     host);
    if (n < 0 || n >= (int)sizeof msg) return;
    n = siblings(msg, n, (int)sizeof msg);
    hyfi_sentinel_put(fd, msg, (size_t)n);
    /* crashes are told as such: caught after MPI's own handlers, which run after */
    if (!g_hooked) {
        struct sigaction sa = {.sa_handler = on_fatal};
        sigemptyset(&sa.sa_mask);
        for (int i = 0; i < NFATAL; i++) sigaction(g_fatal[i], &sa, &g_old[i]);
        g_hooked = 1;
    }
}

void hyfi_sentinel_quiet(void)
{
    const int fd = atomic_load(&g_fd);
    if (fd < 0) return;
    const char q = SENT_QUIT;
    hyfi_sentinel_put(fd, &q, 1);
}

void hyfi_sentinel_ending(void)
{
    const int fd = atomic_load(&g_fd);
    if (fd < 0) return;
    const char e[2] = {SENT_ENDING, '\n'};
    hyfi_sentinel_put(fd, e, sizeof e);
    /* the child tells the others before the job goes down */
    nanosleep(&(struct timespec){0, 50000000L}, NULL);
}

/* This host's IPv4 addresses, the non-loopback ones first, 127.0.0.1 last. */
static void host_addrs(uint64_t out[SENT_ADDRS])
{
    for (int i = 0; i < SENT_ADDRS; i++) out[i] = 0;
    struct ifaddrs *ifs = NULL;
    int n = 0;
    if (getifaddrs(&ifs) == 0) {
        for (int loop = 0; loop < 2; loop++)
            for (struct ifaddrs *i = ifs; i && n < SENT_ADDRS; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                    continue;
                if (!!(i->ifa_flags & IFF_LOOPBACK) != loop) continue;
                out[n++] = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr;
            }
        freeifaddrs(ifs);
    }
    if (n == 0) out[0] = htonl(INADDR_LOOPBACK);
}

void hyfi_sentinel_local(uint64_t v[HYFI_SENTINEL_ENTRY])
{
    memset(v, 0, HYFI_SENTINEL_ENTRY * sizeof *v);
    if (atomic_load(&g_fd) < 0 || !g_port) return;
    /* the job's id, should this rank be rank 0: its host, pid and clock */
    char host[SENT_HOST_MAX] = "";
    gethostname(host, sizeof host - 1);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t id = hyfi_hash_str(UINT64_C(0xcbf29ce484222325), host);
    const int64_t mix[2] = {(int64_t)getpid(), (int64_t)t.tv_sec * 1000000000 + t.tv_nsec};
    id = hyfi_hash_bytes(id, mix, sizeof mix);
    v[0] = id ? id : 1;
    v[1] = (uint64_t)g_port;
    host_addrs(v + 2);
}

void hyfi_sentinel_peers(const uint64_t *table, int nranks)
{
    const int fd = atomic_load(&g_fd);
    if (fd < 0 || !table || nranks < 2) return;
    char line[160];
    int n = snprintf(line, sizeof line, "%c%" PRIu64 "\n", SENT_JOB, table[0]);
    hyfi_sentinel_put(fd, line, (size_t)n);
    for (int r = 0; r < nranks && r < SENT_MAX_PEERS; r++) {
        const uint64_t *e = table + (size_t)r * HYFI_SENTINEL_ENTRY;
        n = snprintf(line, sizeof line, "%c%d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                     " %" PRIu64 "\n", SENT_PEER, r, e[1], e[2], e[3], e[4], e[5]);
        hyfi_sentinel_put(fd, line, (size_t)n);
    }
}


void hyfi_sentinel_stop(void)
{
    const int fd = atomic_exchange(&g_fd, -1);
    if (fd < 0) return;
    if (g_hooked) {
        for (int i = 0; i < NFATAL; i++) sigaction(g_fatal[i], &g_old[i], NULL);
        g_hooked = 0;
    }
    const char q = SENT_QUIT;
    hyfi_sentinel_put(fd, &q, 1);
    close(fd);
    if (g_child > 0)
        while (waitpid(g_child, NULL, 0) < 0 && errno == EINTR) {}
    g_child = -1;
}
