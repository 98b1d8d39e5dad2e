/* The death notice of MPI runs: which rank died.
 *
 * When a rank is killed (kill -9, the kernel's out-of-memory killer) or
 * crashes, MPICH's mpiexec (Hydra) ends the other ranks at once with SIGKILL,
 * so no rank can say anything, and Hydra's own message names the process id
 * and the host ("BAD TERMINATION ... PID 26349 RUNNING AT node"), not the
 * rank. So each rank forks, before MPI is initialised, a small child that
 * waits on a pipe: the rank sends it its rank once it knows it, and a quit
 * byte when it ends in order (hyfi_ctx_destroy, exit(), the watchdog's abort).
 * When the pipe closes without the quit byte, the rank has died without
 * ending in order, and the child reports
 *   hyfi: rank 1 of 2 (pid 26349 on node) died without shutting down ...
 * on the rank's stderr. It runs in its own process group, since mpiexec
 * signals the group of the first rank to die too.
 *
 * Which death was the first. The other ranks on the host die too, a few tens
 * of milliseconds later (mpiexec kills them), and one may even die before the
 * first one's pipe has closed: a rank whose MPI library touches the dead
 * peer's memory (UCX's shared-memory copy) aborts at once. So the children do
 * not simply speak first come, first served. Each one, when its rank dies,
 * notes the time and the state of the sibling ranks (the other children of
 * the launcher's proxy: alive, exiting, or already a zombie or gone), and
 * whether its rank crashed (a fatal signal caught here: abort, segmentation
 * fault, ...). The first child binds an abstract socket named after the
 * proxy and collects the others' records for a short while (up to 2 s while
 * a sibling that a record saw dying has not reported: the first child to
 * speak can be a consequence, since a killed rank's large address space may
 * take longer to tear down than its peer takes to abort); then it names
 * one death: a crash that happened while a sibling was already dying is a
 * consequence and is left out; of the rest, the death that saw the fewest
 * siblings gone, then the fewest exiting, then the earliest. Across several
 * hosts each host's first child speaks for its host.
 *
 * The child calls only async-signal-safe functions (the process may have
 * threads when it forks), holds no descriptor but the pipe, stderr and its
 * socket (not the PMI socket, whose closing tells Hydra that the rank is
 * gone), and costs one idle process per rank. HYFI_DEATH_NOTICE=0 turns it
 * off. */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define QUIT '\0'      /* the messages hold no NUL */
#define ARM 'A'        /* "A<rank> <nranks> <pid> <host>\n" */
#define SIBLINGS 'S'   /* "S<pid> <pid> ...\n": the other ranks on this host */
#define CRASH 'C'      /* 'C' and the signal number as one byte */
#define MAX_SIB 255    /* siblings watched */
#define HOST_MAX 64
#define PF_EXITING 0x4 /* /proc/<pid>/stat's flags: the process is exiting */
#define WINDOW_MS 300  /* the collector waits this long after the last record */
#define WINDOW_MAX_MS 2000

enum { ALIVE, EXITING, GONE };

/* One rank's death, as its child saw it (sent to the collector as is). */
typedef struct {
    int64_t t_ns; /* CLOCK_MONOTONIC when the pipe closed */
    int32_t pid, rank, nranks, sig, nsib;
    char host[HOST_MAX];
    int32_t sib[MAX_SIB];
    uint8_t state[MAX_SIB];
} death;

static atomic_int g_fd = -1; /* the pipe's write end, -1: no child */
static pid_t g_child = -1;
static int g_atexit;
static const int g_fatal[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
#define NFATAL ((int)(sizeof g_fatal / sizeof g_fatal[0]))
static struct sigaction g_old[NFATAL];
static int g_hooked;

/* exit() is an end in order: the program printed its own message, if any. */
static void quit_at_exit(void) { hyfi_sentinel_quiet(); }

static void put(int fd, const char *s, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* ------------------------------------------------ async-signal-safe helpers */
static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static long parse_long(const char **p)
{
    long v = 0;
    while (**p == ' ') (*p)++;
    while (**p >= '0' && **p <= '9') v = v * 10 + (*(*p)++ - '0');
    return v;
}

static size_t fmt_long(char *b, long v)
{
    char t[24];
    size_t n = 0, k = 0;
    if (v < 0) b[k++] = '-', v = -v;
    do t[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (n) b[k++] = t[--n];
    return k;
}

static size_t cat(char *b, size_t at, size_t cap, const char *s)
{
    while (*s && at + 1 < cap) b[at++] = *s++;
    return at;
}

static size_t cat_long(char *b, size_t at, size_t cap, long v)
{
    char t[24];
    const size_t n = fmt_long(t, v);
    t[n] = 0;
    return cat(b, at, cap, t);
}

/* The state of process pid from /proc/<pid>/stat: gone (or a zombie), exiting, alive. */
static int proc_state(pid_t pid)
{
    char path[40] = "/proc/";
    size_t k = 6 + fmt_long(path + 6, pid);
    memcpy(path + k, "/stat", 6);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return GONE;
    char b[1024];
    ssize_t n;
    do n = read(fd, b, sizeof b - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) return GONE;
    b[n] = 0;
    const char *p = strrchr(b, ')'); /* after the command's name: " S ppid ..." */
    if (!p || p[1] != ' ') return GONE;
    const char st = p[2];
    if (st == 'Z' || st == 'X' || st == 'x') return GONE;
    p += 3;
    for (int field = 4; field < 9 && p; field++) p = strchr(p + 1, ' '); /* to field 9 */
    if (!p) return ALIVE;
    p++;
    const long flags = parse_long(&p);
    return (flags & PF_EXITING) ? EXITING : ALIVE;
}

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGABRT: return "SIGABRT (abort)";
    case SIGSEGV: return "SIGSEGV (segmentation fault)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGFPE: return "SIGFPE (arithmetic error)";
    case SIGILL: return "SIGILL (illegal instruction)";
    default: return "a fatal signal";
    }
}

/* The line naming death d. */
static void report(const death *d, const char *early, size_t nearly)
{
    if (d->rank < 0) {
        put(2, early, nearly);
        return;
    }
    char b[512];
    size_t k = cat(b, 0, sizeof b, "hyfi: rank ");
    k = cat_long(b, k, sizeof b, d->rank);
    k = cat(b, k, sizeof b, " of ");
    k = cat_long(b, k, sizeof b, d->nranks);
    k = cat(b, k, sizeof b, " (pid ");
    k = cat_long(b, k, sizeof b, d->pid);
    k = cat(b, k, sizeof b, " on ");
    k = cat(b, k, sizeof b, d->host);
    k = cat(b, k, sizeof b, ") died without shutting down: ");
    if (d->sig) {
        k = cat(b, k, sizeof b, "it crashed with ");
        k = cat(b, k, sizeof b, sig_name(d->sig));
    } else {
        k = cat(b, k, sizeof b, "killed by a signal (kill -9, the out-of-memory killer)");
    }
    k = cat(b, k, sizeof b, "; mpiexec ends the other ranks\n");
    put(2, b, k);
}

/* Whether death d is a consequence of another: a crash while a sibling was
 * already exiting or gone (MPI libraries abort on a lost peer). */
static int consequence(const death *d)
{
    if (!d->sig) return 0;
    for (int i = 0; i < d->nsib; i++)
        if (d->state[i] != ALIVE) return 1;
    return 0;
}

/* Whether pid is among the deaths left out as consequences. */
static int left_out(const death *all, int n, const unsigned char *cons, int32_t pid)
{
    for (int i = 0; i < n; i++)
        if (cons[i] && all[i].pid == pid) return 1;
    return 0;
}

/* The first death among n: see the file's comment. */
static int first_of(const death *all, int n)
{
    unsigned char cons[64];
    int any = 0;
    for (int i = 0; i < n; i++) any |= !(cons[i] = (unsigned char)consequence(&all[i]));
    int best = -1, bg = 0, be = 0;
    for (int i = 0; i < n; i++) {
        if (any && cons[i]) continue;
        int gone = 0, exiting = 0;
        for (int j = 0; j < all[i].nsib; j++) {
            if (left_out(all, n, cons, all[i].sib[j])) continue;
            gone += all[i].state[j] == GONE;
            exiting += all[i].state[j] == EXITING;
        }
        if (best < 0 || gone < bg || (gone == bg && exiting < be) ||
            (gone == bg && exiting == be && all[i].t_ns < all[best].t_ns))
            best = i, bg = gone, be = exiting;
    }
    return best;
}

/* Whether a record among n saw a sibling dying (exiting or gone) whose own
 * record has not come yet: the death that set it all off may be that one
 * (a killed rank whose large address space takes a while to tear down, while
 * a peer that read its memory has already aborted and reported). */
static int awaiting(const death *all, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < all[i].nsib; j++) {
            if (all[i].state[j] == ALIVE) continue;
            int have = 0;
            for (int k = 0; k < n && !have; k++) have = all[k].pid == all[i].sib[j];
            if (!have) return 1;
        }
    return 0;
}

/* Collect the other children's records while they come (and while a dying
 * sibling's record is still missing), then name the first. */
static void collect(int s, death *all, const char *early, size_t nearly)
{
    int n = 1;
    const int64_t start = now_ns();
    int64_t last = start;
    while (n < 64) {
        const int64_t t = now_ns();
        int64_t wait_ms = (last + (int64_t)WINDOW_MS * 1000000 - t) / 1000000;
        const int64_t cap = (start + (int64_t)WINDOW_MAX_MS * 1000000 - t) / 1000000;
        if (awaiting(all, n) || cap < wait_ms) wait_ms = cap;
        if (wait_ms <= 0) break;
        struct pollfd pf = {.fd = s, .events = POLLIN};
        const int r = poll(&pf, 1, (int)wait_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        const ssize_t got = recv(s, &all[n], sizeof all[n], 0);
        if (got == (ssize_t)sizeof all[n]) n++, last = now_ns();
    }
    report(&all[first_of(all, n)], early, nearly);
}

/* What the rank told so far (its rank, its siblings, a crash) into d;
 * whether a crash is among it. */
static int crash_told(char *buf, size_t n, death *d)
{
    d->nsib = 0;
    d->sig = 0;
    buf[n] = 0;
    for (const char *p = buf; p < buf + n;) {
        const char kind = *p++;
        if (kind == ARM) {
            d->rank = (int32_t)parse_long(&p);
            d->nranks = (int32_t)parse_long(&p);
            d->pid = (int32_t)parse_long(&p);
            if (*p == ' ') p++;
            size_t h = 0;
            while (*p && *p != '\n' && h + 1 < HOST_MAX) d->host[h++] = *p++;
            d->host[h] = 0;
        } else if (kind == SIBLINGS) {
            while (*p == ' ') p++;
            while (*p >= '0' && *p <= '9' && d->nsib < MAX_SIB) {
                d->sib[d->nsib++] = (int32_t)parse_long(&p);
                while (*p == ' ') p++;
            }
        } else if (kind == CRASH) {
            if (p < buf + n) d->sig = (unsigned char)*p++;
            continue;
        }
        while (p < buf + n && *p != '\n') p++;
        if (p < buf + n) p++;
    }
    return d->sig != 0;
}

/* The moment of death: the time and the siblings' states. */
static void sample(death *d)
{
    d->t_ns = now_ns();
    for (int i = 0; i < d->nsib; i++) d->state[i] = (uint8_t)proc_state(d->sib[i]);
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
    static char buf[8192];
    static death all[64];
    size_t n = 0;
    int quit = 0, crashed = 0;
    death *d = &all[0];
    d->rank = -1;
    for (;;) {
        char c[512];
        const ssize_t r = read(rfd, c, sizeof c);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) {
            if (c[i] == QUIT) quit = 1;
            else if (n < sizeof buf - 1) buf[n++] = c[i];
        }
        if (quit) break;
        /* A crash is the moment of death: its handler wrote the signal first
         * thing, while a slow handler (a back trace) may outlive the siblings. */
        if (!crashed && crash_told(buf, n, d)) {
            crashed = 1;
            sample(d);
        }
    }
    if (quit) _exit(0);
    if (!crashed) {
        crash_told(buf, n, d);
        sample(d);
    }
    const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && bind(s, (const struct sockaddr *)claim, len) == 0) {
        collect(s, all, early, nearly);
    } else if (s >= 0) {
        /* a sibling collects: send it this death and go */
        close(2);
        ssize_t w;
        do w = sendto(s, d, sizeof *d, 0, (const struct sockaddr *)claim, len);
        while (w < 0 && errno == EINTR);
        _exit(0);
    } else {
        report(d, early, nearly);
    }
    close(2); /* mpiexec waits for the ranks' output to close */
    /* hold the claim while the last siblings' children come */
    struct timespec t = {1, 0};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
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

/* A fatal signal: tell the child which, then let the earlier handler (or the
 * default action) have it. */
static void on_fatal(int sig)
{
    const int fd = atomic_load(&g_fd);
    if (fd >= 0) {
        const char m[2] = {CRASH, (char)sig};
        put(fd, m, sizeof m);
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
    msg[n++] = SIBLINGS;
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
        while (count < MAX_SIB && fscanf(f, "%ld", &pid) == 1) {
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
    char host[HOST_MAX] = "?";
    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '\n') *c = '?';
    char msg[4096];
    int n = snprintf(msg, sizeof msg, "%c%d %d %ld %s\n", ARM, rank, nranks, (long)getpid(),
                     host);
    if (n < 0 || n >= (int)sizeof msg) return;
    n = siblings(msg, n, (int)sizeof msg);
    put(fd, msg, (size_t)n);
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
    const char q = QUIT;
    put(fd, &q, 1);
}

void hyfi_sentinel_stop(void)
{
    const int fd = atomic_exchange(&g_fd, -1);
    if (fd < 0) return;
    if (g_hooked) {
        for (int i = 0; i < NFATAL; i++) sigaction(g_fatal[i], &g_old[i], NULL);
        g_hooked = 0;
    }
    const char q = QUIT;
    put(fd, &q, 1);
    close(fd);
    if (g_child > 0)
        while (waitpid(g_child, NULL, 0) < 0 && errno == EINTR) {}
    g_child = -1;
}
