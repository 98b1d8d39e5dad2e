/* The death notice's child (sentinel.c forks it): it outlives its rank and,
 * when the rank dies without ending in order, takes part in naming the
 * job's first death, whichever node it is on.
 *
 * While the rank lives, the child reads the pipe (its rank, its siblings on
 * this host, its peers: every rank's child's UDP port and addresses) and
 * listens on its UDP socket: a peer child sends every other child its death
 * record as soon as its rank dies. When its own rank dies (the pipe closes
 * without the quit byte), the child samples the moment (the time and the
 * state of the sibling ranks on its host: alive, exiting, or already a
 * zombie or gone) and notes which deaths it had heard of before; it sends
 * its record to every peer, collects the others' for a short while (300 ms
 * after the last one, at most 2 s), and decides which death came first:
 *
 *   - a death whose child had already heard of another (not itself a
 *     consequence) is a consequence: the launcher's clean-up (mpiexec ends
 *     every rank once one has died, on every node) or an MPI library
 *     aborting on a lost peer; so is a crash while a sibling on its host was
 *     already dying, and every death after a rank that ended the job itself
 *     (the watchdog: its own line says why);
 *   - of the rest, the one that saw the fewest siblings gone, then the
 *     fewest exiting, then the earliest (CLOCK_REALTIME: comparable across
 *     nodes as far as their clocks agree).
 *
 * The child whose own rank is that death prints the line; the others stay
 * quiet. A rank that dies before it knows its peers (during MPI's start)
 * falls back to this host alone: the first child to bind an abstract socket
 * named after the launcher's proxy collects its siblings' records.
 *
 * The child calls only async-signal-safe functions (the process may have had
 * threads when it forked) and holds no descriptor but the pipe, stderr and
 * its sockets. */
#include "sentinel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define PF_EXITING 0x4 /* /proc/<pid>/stat's flags: the process is exiting */
#define WINDOW_MS 300  /* records are collected this long after the last one */
#define WINDOW_MAX_MS 2000
#define MAX_RECORDS 256

/* The child's state (statics: no allocation in a forked child). */
static sent_death g_all[MAX_RECORDS]; /* g_all[0]: this rank's death */
static int g_nall = 1;
static unsigned char g_received[MAX_RECORDS]; /* arrived before this rank died */
static sent_peer g_peers[SENT_MAX_PEERS];
static int g_npeers;
static uint64_t g_job;
static int g_sent; /* this death's record has gone to the peers */

/* ------------------------------------------------ async-signal-safe helpers */
static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static long parse_long(const char **p)
{
    long v = 0;
    while (**p == ' ') (*p)++;
    while (**p >= '0' && **p <= '9') v = v * 10 + (*(*p)++ - '0');
    return v;
}

static uint64_t parse_u64(const char **p)
{
    uint64_t v = 0;
    while (**p == ' ') (*p)++;
    while (**p >= '0' && **p <= '9') v = v * 10 + (uint64_t)(*(*p)++ - '0');
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

void hyfi_sentinel_put(int fd, const char *s, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* The state of process pid from /proc/<pid>/stat: gone (or a zombie), exiting, alive. */
static int proc_state(pid_t pid)
{
    char path[40] = "/proc/";
    size_t k = 6 + fmt_long(path + 6, pid);
    memcpy(path + k, "/stat", 6);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SENT_GONE;
    char b[1024];
    ssize_t n;
    do n = read(fd, b, sizeof b - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) return SENT_GONE;
    b[n] = 0;
    const char *p = strrchr(b, ')'); /* after the command's name: " S ppid ..." */
    if (!p || p[1] != ' ') return SENT_GONE;
    const char st = p[2];
    if (st == 'Z' || st == 'X' || st == 'x') return SENT_GONE;
    p += 3;
    for (int field = 4; field < 9 && p; field++) p = strchr(p + 1, ' '); /* to field 9 */
    if (!p) return SENT_ALIVE;
    p++;
    const long flags = parse_long(&p);
    return (flags & PF_EXITING) ? SENT_EXITING : SENT_ALIVE;
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
static void report(const sent_death *d, const char *early, size_t nearly)
{
    if (d->rank < 0) {
        hyfi_sentinel_put(2, early, nearly);
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
    if (d->sig > 0) {
        k = cat(b, k, sizeof b, "it crashed with ");
        k = cat(b, k, sizeof b, sig_name(d->sig));
    } else {
        k = cat(b, k, sizeof b, "killed by a signal (kill -9, the out-of-memory killer)");
    }
    k = cat(b, k, sizeof b, "; mpiexec ends the other ranks\n");
    hyfi_sentinel_put(2, b, k);
}

/* ------------------------------------------------------------- deciding */
/* A crash while a sibling was already exiting or gone (MPI libraries abort
 * on a lost peer). */
static int crash_consequence(const sent_death *d)
{
    if (d->sig <= 0) return 0;
    for (int i = 0; i < d->nsib; i++)
        if (d->state[i] != SENT_ALIVE) return 1;
    return 0;
}

static int find_rank(const sent_death *all, int n, int32_t rank)
{
    for (int i = 0; i < n; i++)
        if (all[i].rank == rank) return i;
    return -1;
}

/* cons[i]: death i follows from another (see the file's comment). */
static void consequences(const sent_death *all, int n, unsigned char *cons)
{
    for (int i = 0; i < n; i++) cons[i] = (unsigned char)(crash_consequence(&all[i]) || all[i].sig < 0);
    for (int i = 0; i < n; i++) {
        if (cons[i]) continue;
        for (int h = 0; h < all[i].nheard && h < SENT_MAX_HEARD; h++) {
            const int j = find_rank(all, n, all[i].heard[h]);
            if (j >= 0 && j != i && (all[j].sig < 0 || !crash_consequence(&all[j]))) cons[i] = 1;
        }
    }
}

/* Whether pid is among the deaths left out. */
static int left_out(const sent_death *all, int n, const unsigned char *cons, int32_t pid)
{
    for (int i = 0; i < n; i++)
        if (cons[i] && all[i].pid == pid) return 1;
    return 0;
}

/* The first death among n, or -1 when every one follows from a rank that
 * ended the job itself (its own line said why). */
static int first_of(const sent_death *all, int n)
{
    static unsigned char cons[MAX_RECORDS];
    consequences(all, n, cons);
    int any = 0, ender = 0;
    for (int i = 0; i < n; i++) {
        any |= !cons[i];
        ender |= all[i].sig < 0;
    }
    if (!any && ender) return -1;
    int best = -1, bg = 0, be = 0;
    for (int i = 0; i < n; i++) {
        if ((any && cons[i]) || all[i].sig < 0) continue;
        int gone = 0, exiting = 0;
        for (int j = 0; j < all[i].nsib; j++) {
            if (left_out(all, n, cons, all[i].sib[j])) continue;
            gone += all[i].state[j] == SENT_GONE;
            exiting += all[i].state[j] == SENT_EXITING;
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
static int awaiting(const sent_death *all, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < all[i].nsib; j++) {
            if (all[i].state[j] == SENT_ALIVE) continue;
            int have = 0;
            for (int k = 0; k < n && !have; k++) have = all[k].pid == all[i].sib[j];
            if (!have) return 1;
        }
    return 0;
}

/* ---------------------------------------------------------- the records */
/* A peer's record into the collection (once per rank). */
static void take(const sent_death *d, int before_death)
{
    if (d->magic != SENT_MAGIC || d->job != g_job || d->rank < 0 || d->rank == g_all[0].rank)
        return;
    if (d->nsib < 0 || d->nsib > SENT_MAX_SIB || d->nheard < 0) return;
    const int at = find_rank(g_all + 1, g_nall - 1, d->rank);
    if (at >= 0) {
        /* a rank's later record (its death after its "ending") replaces nothing */
        return;
    }
    if (g_nall >= MAX_RECORDS) return;
    g_received[g_nall] = (unsigned char)before_death;
    g_all[g_nall++] = *d;
}

static void receive(int udp, int before_death)
{
    for (;;) {
        sent_death d;
        const ssize_t got = recv(udp, &d, sizeof d, MSG_DONTWAIT);
        if (got < 0 && errno == EINTR) continue;
        if (got != (ssize_t)sizeof d) return;
        take(&d, before_death);
    }
}

/* Send record d to every peer but this rank. */
static void broadcast(int udp, const sent_death *d)
{
    for (int r = 0; r < g_npeers; r++) {
        if (r == g_all[0].rank || !g_peers[r].port) continue;
        for (int a = 0; a < SENT_ADDRS; a++) {
            if (!g_peers[r].addr[a]) continue;
            struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(g_peers[r].port)};
            to.sin_addr.s_addr = g_peers[r].addr[a];
            ssize_t w;
            do w = sendto(udp, d, sizeof *d, 0, (const struct sockaddr *)&to, sizeof to);
            while (w < 0 && errno == EINTR);
        }
    }
}

/* -------------------------------------------------------------- the pipe */
/* One line from the rank. */
static void line(const char *p, int udp)
{
    sent_death *d = &g_all[0];
    const char kind = *p++;
    if (kind == SENT_ARM) {
        d->rank = (int32_t)parse_long(&p);
        d->nranks = (int32_t)parse_long(&p);
        d->pid = (int32_t)parse_long(&p);
        if (*p == ' ') p++;
        size_t h = 0;
        while (*p && *p != '\n' && h + 1 < SENT_HOST_MAX) d->host[h++] = *p++;
        d->host[h] = 0;
    } else if (kind == SENT_SIBLINGS) {
        d->nsib = 0;
        while (*p == ' ') p++;
        while (*p >= '0' && *p <= '9' && d->nsib < SENT_MAX_SIB) {
            d->sib[d->nsib++] = (int32_t)parse_long(&p);
            while (*p == ' ') p++;
        }
    } else if (kind == SENT_JOB) {
        g_job = parse_u64(&p);
    } else if (kind == SENT_PEER) {
        const long r = parse_long(&p);
        if (r < 0 || r >= SENT_MAX_PEERS) return;
        g_peers[r].port = (uint16_t)parse_long(&p);
        for (int a = 0; a < SENT_ADDRS; a++) g_peers[r].addr[a] = (uint32_t)parse_u64(&p);
        if (r >= g_npeers) g_npeers = (int)r + 1;
    } else if (kind == SENT_ENDING && udp >= 0 && g_npeers > 0) {
        /* this rank ends the job: the deaths that follow are consequences */
        sent_death e = *d;
        e.magic = SENT_MAGIC;
        e.job = g_job;
        e.sig = -1;
        e.t_ns = now_ns();
        e.nheard = 0;
        broadcast(udp, &e);
    }
}

/* The moment of death: the time, the siblings' states, the deaths heard of. */
static void sample(sent_death *d)
{
    d->t_ns = now_ns();
    for (int i = 0; i < d->nsib; i++) d->state[i] = (uint8_t)proc_state(d->sib[i]);
    d->nheard = 0;
    for (int i = 1; i < g_nall && d->nheard < SENT_MAX_HEARD; i++)
        if (g_received[i]) d->heard[d->nheard++] = g_all[i].rank;
}

/* ------------------------------------------------------------ collecting */
/* How long to wait for more records, collecting since start, the last one
 * at last: WINDOW_MS after the last, at most WINDOW_MAX_MS in all, and that
 * at most while a sibling seen dying has not reported. */
static int64_t window_left(int64_t start, int64_t last)
{
    const int64_t t = mono_ms();
    int64_t wait_ms = last + WINDOW_MS - t;
    const int64_t cap = start + WINDOW_MAX_MS - t;
    if (awaiting(g_all, g_nall) || cap < wait_ms) wait_ms = cap;
    return wait_ms;
}

/* Across the job: send this death to every peer, collect theirs, and print
 * it if it is the first. */
static void collect_peers(int udp)
{
    if (!g_sent) broadcast(udp, &g_all[0]);
    g_sent = 1;
    const int64_t start = mono_ms();
    int64_t last = start;
    for (;;) {
        const int64_t wait_ms = window_left(start, last);
        if (wait_ms <= 0) break;
        struct pollfd pf = {.fd = udp, .events = POLLIN};
        const int r = poll(&pf, 1, (int)wait_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        const int before = g_nall;
        receive(udp, 0);
        if (g_nall > before) last = mono_ms();
    }
    if (first_of(g_all, g_nall) == 0) report(&g_all[0], "", 0);
}

/* This host only (the rank died before it knew its peers): the first child
 * to bind the abstract socket collects its siblings' records and names one. */
static void collect_host(const char *early, size_t nearly, const struct sockaddr_un *claim,
                         socklen_t len)
{
    const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        report(&g_all[0], early, nearly);
        return;
    }
    if (bind(s, (const struct sockaddr *)claim, len) != 0) {
        /* a sibling collects: send it this death and go */
        ssize_t w;
        do w = sendto(s, &g_all[0], sizeof g_all[0], 0, (const struct sockaddr *)claim, len);
        while (w < 0 && errno == EINTR);
        return;
    }
    g_nall = 1;
    const int64_t start = mono_ms();
    int64_t last = start;
    while (g_nall < MAX_RECORDS) {
        const int64_t wait_ms = window_left(start, last);
        if (wait_ms <= 0) break;
        struct pollfd pf = {.fd = s, .events = POLLIN};
        const int r = poll(&pf, 1, (int)wait_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        const ssize_t got = recv(s, &g_all[g_nall], sizeof g_all[0], 0);
        if (got == (ssize_t)sizeof g_all[0]) g_nall++, last = mono_ms();
    }
    const int first = first_of(g_all, g_nall);
    if (first >= 0) report(&g_all[first], early, nearly);
    close(2); /* mpiexec waits for the ranks' output to close */
    /* hold the claim while the last siblings' children come */
    struct timespec t = {1, 0};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

_Noreturn void hyfi_sentinel_child(int rfd, int udp, int maxfd, const char *early, size_t nearly,
                                   const struct sockaddr_un *claim, socklen_t len)
{
    /* only the pipe, the socket and stderr stay open */
    for (int fd = 0; fd < maxfd; fd++)
        if (fd != rfd && fd != 2 && fd != udp) close(fd);
    prctl(PR_SET_NAME, "hyfi-sentinel", 0, 0, 0);
    /* Its own process group: when mpiexec ends the first rank to die it
     * signals that rank's group, which would take this child along before
     * it has spoken. */
    setpgid(0, 0);
    sent_death *d = &g_all[0];
    d->magic = SENT_MAGIC;
    d->rank = -1;
    static char buf[4096];
    size_t n = 0;
    int quit = 0, crashed = 0, pending_crash = 0, ending = 0;
    for (;;) {
        struct pollfd pf[2] = {{.fd = rfd, .events = POLLIN}, {.fd = udp, .events = POLLIN}};
        const int pr = poll(pf, udp >= 0 ? 2 : 1, -1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) break;
        const int from_peers = udp >= 0 && (pf[1].revents & POLLIN);
        if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (from_peers) receive(udp, 1); /* heard of while this rank lives */
            continue;
        }
        char c[512];
        const ssize_t r = read(rfd, c, sizeof c);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* (records that came with the death: after it) */
        if (from_peers) receive(udp, 1);
        for (ssize_t i = 0; i < r && !quit; i++) {
            if (pending_crash) {
                /* A crash is the moment of death: its handler wrote the signal
                 * first thing, while a slow handler (a back trace) may outlive
                 * the siblings. */
                pending_crash = 0;
                if (!crashed) {
                    d->sig = (unsigned char)c[i];
                    crashed = 1;
                    sample(d);
                    /* told at once: the launcher ends the others as soon as
                     * the process is gone */
                    if (udp >= 0 && g_npeers > 0 && g_job && d->rank >= 0) {
                        d->job = g_job;
                        broadcast(udp, d);
                        g_sent = 1;
                    }
                }
            } else if (c[i] == SENT_QUIT) {
                quit = 1;
            } else if (n == 0 && c[i] == SENT_CRASH) {
                pending_crash = 1;
            } else if (c[i] == '\n') {
                buf[n] = 0;
                if (n && buf[0] == SENT_ENDING) ending = 1;
                if (n) line(buf, udp);
                n = 0;
            } else if (n < sizeof buf - 1) {
                buf[n++] = c[i];
            }
        }
        if (quit) break;
    }
    if (quit || ending) _exit(0);
    if (!crashed) sample(d);
    d->job = g_job;
    if (udp >= 0 && g_npeers > 0 && g_job && d->rank >= 0) {
        collect_peers(udp);
        close(2);
        _exit(0);
    }
    collect_host(early, nearly, claim, len);
    _exit(0);
}
