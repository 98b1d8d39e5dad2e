/* The death notice of MPI runs: which rank died.
 *
 * When a rank is killed (kill -9, the kernel's out-of-memory killer) or
 * crashes, MPICH's mpiexec (Hydra) ends the other ranks at once with SIGKILL,
 * so no rank can say anything, and Hydra's own message names the process id
 * and the host ("BAD TERMINATION ... PID 26349 RUNNING AT node"), not the
 * rank. So each rank forks, before MPI is initialised, a small child that
 * waits on a pipe: the rank sends it its line once it knows its rank, and a
 * quit byte when it ends in order (hyfi_ctx_destroy, exit(), the watchdog's
 * abort). When the pipe closes without the quit byte, the rank has died
 * without ending in order and the child prints
 *   hyfi: rank 1 of 2 (pid 26349 on node) died without shutting down ...
 * on the rank's stderr, then exits. It runs in its own process group, since
 * mpiexec signals the group of the first rank to die too, often before the
 * child has spoken. The ranks mpiexec ends after the first die the same way,
 * so only the first child on the host to see its rank die speaks: it claims
 * an abstract socket named after the launcher's proxy (the ranks' parent)
 * and holds it a few seconds; the others find it taken and stay silent.
 * (A survivor that its MPI library ends on its own, on the lost peer, before
 * mpiexec has seen the first death, may be named instead: as mpiexec does.)
 *
 * The child calls only async-signal-safe functions (the process may have
 * threads when it forks), holds no descriptor but the pipe and stderr (not
 * the PMI socket, whose closing tells Hydra that the rank is gone), and costs
 * one idle process per rank. HYFI_DEATH_NOTICE=0 turns it off. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define QUIT '\0' /* the messages hold no NUL */
#define MSG_MAX 480 /* one write below PIPE_BUF (512 at least): atomic */

static atomic_int g_fd = -1; /* the pipe's write end, -1: no child */
static pid_t g_child = -1;
static int g_atexit;

/* exit() is an end in order: the program printed its own message, if any. */
static void quit_at_exit(void) { hyfi_sentinel_quiet(); }

static void put(const char *s, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(2, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* The first death among the ranks of this job on this host: the first child
 * to bind the abstract socket `claim` (named after the ranks' parent, the
 * launcher's proxy, and its start time) holds it for a while; the others,
 * whose ranks mpiexec ends after it, find it taken and stay silent. */
static int first_death(const struct sockaddr_un *claim, socklen_t len)
{
    const int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return 1;
    if (bind(s, (const struct sockaddr *)claim, len) == 0) return 1; /* kept open */
    close(s);
    return 0;
}

static _Noreturn void child_main(int rfd, int maxfd, const char *early, size_t nearly,
                                 const struct sockaddr_un *claim, socklen_t len)
{
    /* only the pipe and stderr stay open */
    for (int fd = 0; fd < maxfd; fd++)
        if (fd != rfd && fd != 2) close(fd);
    prctl(PR_SET_NAME, "hyfi-sentinel", 0, 0, 0);
    /* Its own process group: when mpiexec ends the first rank to die it
     * signals that rank's group, which would take this child along before
     * it has spoken. */
    setpgid(0, 0);
    char buf[MSG_MAX + 2];
    size_t n = 0;
    int quit = 0;
    for (;;) {
        char c[MSG_MAX];
        const ssize_t r = read(rfd, c, sizeof c);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) {
            if (c[i] == QUIT) quit = 1;
            else if (n < sizeof buf) buf[n++] = c[i];
        }
        if (quit) break;
    }
    if (!quit && first_death(claim, len)) {
        if (n > 0) put(buf, n);
        else put(early, nearly);
        close(2); /* mpiexec waits for the ranks' output to close */
        /* hold the claim while mpiexec ends the other ranks here */
        struct timespec t = {3, 0};
        while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
    }
    _exit(0);
}

void hyfi_sentinel_start(void)
{
    if (atomic_load(&g_fd) >= 0) return;
    const char *e = getenv("HYFI_DEATH_NOTICE");
    if (e && !strcmp(e, "0")) return;
    /* the line for a rank that dies before it knows its rank */
    char early[160];
    const int ne = snprintf(early, sizeof early,
                            "hyfi: a rank (pid %ld) died during its start-up "
                            "(hyfi_ctx_create), killed by a signal or crashed\n", (long)getpid());
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
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return;
    }
    if (pid == 0) child_main(p[0], (int)maxfd, early, ne > 0 ? (size_t)ne : 0, &claim, len);
    close(p[0]);
    g_child = pid;
    atomic_store(&g_fd, p[1]);
    if (!g_atexit) g_atexit = atexit(quit_at_exit) == 0;
}

void hyfi_sentinel_arm(int rank, int nranks)
{
    const int fd = atomic_load(&g_fd);
    if (fd < 0) return;
    char host[64] = "?";
    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    host[sizeof host - 1] = 0;
    char msg[MSG_MAX];
    int n = snprintf(msg, sizeof msg,
                     "hyfi: rank %d of %d (pid %ld on %s) died without shutting down: killed "
                     "by a signal (kill -9, the out-of-memory killer) or crashed; mpiexec "
                     "ends the other ranks\n",
                     rank, nranks, (long)getpid(), host);
    if (n < 0) return;
    if (n >= (int)sizeof msg) n = (int)sizeof msg - 1, msg[n - 1] = '\n';
    ssize_t w;
    do w = write(fd, msg, (size_t)n);
    while (w < 0 && errno == EINTR);
}

void hyfi_sentinel_quiet(void)
{
    const int fd = atomic_load(&g_fd);
    if (fd < 0) return;
    const char q = QUIT;
    ssize_t w;
    do w = write(fd, &q, 1);
    while (w < 0 && errno == EINTR);
}

void hyfi_sentinel_stop(void)
{
    const int fd = atomic_exchange(&g_fd, -1);
    if (fd < 0) return;
    const char q = QUIT;
    ssize_t w;
    do w = write(fd, &q, 1);
    while (w < 0 && errno == EINTR);
    close(fd);
    if (g_child > 0)
        while (waitpid(g_child, NULL, 0) < 0 && errno == EINTR) {}
    g_child = -1;
}
