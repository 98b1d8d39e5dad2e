/* The start-up of MPI programs (hyfi_launch_begin, hyfi_launch_agree,
 * hyfi_launch_end): what happens before a context exists.
 *
 * A program's own start-up (its arguments, its input files, its output
 * folders) comes before hyfi_ctx_create, and under mpiexec a rank that stops
 * there leaves the others waiting forever: in MPI's start (MPI_Init waits for
 * every rank of the job), or in the first collective call, where the
 * context's watchdog is not running yet. So:
 *
 *   - hyfi_launch_begin, first thing in main: the death notice's child is
 *     forked (sentinel.c: before MPI, which must not see a fork), the process
 *     is tied to its launcher (PR_SET_PDEATHSIG: when mpiexec's proxy ends,
 *     the kernel kills this process even if it is stopped, so no rank is left
 *     behind), and MPI starts under a timer: a rank that is not started, or
 *     stops before its own MPI_Init, would hold every other one there.
 *   - hyfi_launch_agree, once the rank's own start-up is done or has failed:
 *     every rank sends rank 0 its outcome and settings (agree.c's payload),
 *     rank 0 judges (agree.c's verdict) and answers; waits are non-blocking
 *     MPI calls polled against the time limit, past which the rank names who
 *     is missing and ends the job (MPI_Abort).
 *   - On a failed verdict every rank finalises MPI here (all of them got it),
 *     so the program just returns; on success the context created next takes
 *     MPI over (ctx.c: hyfi_launch_take) and finalises it at its destroy.
 *
 * MPI is called here only from the thread that calls these functions, before
 * StarPU-MPI (whose progression thread owns MPI afterwards) exists. In a
 * simulation build the ranks are SMPI's and StarPU starts MPI: these calls
 * only return the local outcome. */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#undef SEED /* SimGrid's mpi.h (simulation build) defines it */

#define LAUNCH_TAG 0x4c48 /* "LH": MPI tags of the start-up agreement */
/* Ranks other than 0 wait this much longer for rank 0's verdict than rank 0
 * waits for them, so that the rank that knows who is missing speaks first. */
#define LATE_GRACE_S 5

static struct {
    int begun;       /* hyfi_launch_begin ran under MPI */
    int inited;      /* and started MPI (not the application) */
    int taken;       /* a context took MPI over */
    int agreed;      /* hyfi_launch_agree ran */
    int peers;       /* every rank gathered the death notices' addresses */
    int rank, nranks;
    int timeout_s;
    atomic_int exit_status; /* hyfi_launch_exit_status */
    hyfi_log_fn log;        /* hyfi_launch_config.log */
    void *log_user;
} g_launch;

hyfi_launch_config hyfi_launch_config_default(void)
{
    return (hyfi_launch_config){.mpi = -1, .timeout_s = 120, .end_with_launcher = 1};
}

int hyfi_launched_by_mpiexec(void)
{
    static const char *vars[] = {"PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                                 "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

#ifndef STARPU_SIMGRID /* the simulation's start-up takes neither */
/* This process's rank from the launcher's environment (before MPI runs). */
static long env_rank(void)
{
    static const char *vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return atol(getenv(vars[i]));
    return -1;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif

int hyfi_launch_peers_done(void) { return g_launch.peers; }

void hyfi_launch_exit_status(int status) { atomic_store(&g_launch.exit_status, status); }

int hyfi_launch_take(void)
{
    if (!g_launch.inited || g_launch.taken) return 0;
    g_launch.taken = 1;
    return 1;
}

#ifdef STARPU_SIMGRID
void hyfi_mpi_finalize_timed(int limit_s, int rank, int nranks, hyfi_log_fn log, void *log_user)
{
    (void)limit_s, (void)rank, (void)nranks, (void)log, (void)log_user;
    MPI_Finalize();
}

hyfi_status hyfi_launch_begin(const hyfi_launch_config *cfg, int *rank, int *nranks)
{
    (void)cfg;
    if (rank) *rank = 0;
    if (nranks) *nranks = 1;
    return HYFI_OK;
}
#else
/* ------------------------------------------------------ MPI_Init, timed */
/* A thread that ends the process when MPI_Init has not returned in time:
 * MPI_Init waits for every rank of the job, and a rank that never calls it
 * (not started, stopped, or a program that exited first) holds it forever. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done, limit_s;
    int finalize;         /* 0: MPI_Init's timer; 1: MPI_Finalize's */
    int rank, nranks;     /* MPI_Finalize's */
    hyfi_log_fn log;      /* where the line goes (hyfi_logf) */
    void *log_user;
} init_timer;

/* MPI_Finalize's timer fired: every rank had passed the barrier before it, so
 * the job's work is done and only MPI's own shutdown hangs (MPICH ch4:ucx
 * with UCX over TCP: a rank closing its connections waits for a peer that
 * already left for the launcher's final barrier and no longer answers). */
static void finalize_fired(const init_timer *t)
{
    hyfi_logf(t->log, t->log_user, HYFI_LOG_ERROR,
              "rank %d of %d: MPI_Finalize has not returned after %d s, though every rank had "
              "finished its work (a hang inside MPI's own shutdown, known of UCX over TCP); "
              "ending this rank with status %d (what the program would have done after "
              "MPI_Finalize is skipped). The limit is the smaller of %d s and "
              "hyfi_ctx_config.watchdog_s or hyfi_launch_config.timeout_s (hyfi-train: "
              "--watchdog SECONDS)",
              t->rank, t->nranks, t->limit_s, atomic_load(&g_launch.exit_status),
              HYFI_FINALIZE_MAX_S);
    hyfi_sentinel_ending(); /* not a death: the work is done */
    _exit(atomic_load(&g_launch.exit_status));
}

static void *init_timer_main(void *arg)
{
    init_timer *t = arg;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += t->limit_s;
    pthread_mutex_lock(&t->lock);
    int rc = 0;
    while (!t->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->cond, &t->lock, &until);
    const int fire = !t->done;
    pthread_mutex_unlock(&t->lock);
    if (fire && t->finalize) finalize_fired(t);
    if (fire) {
        const long r = env_rank();
        char who[32] = "a rank";
        if (r >= 0) snprintf(who, sizeof who, "rank %ld", r);
        hyfi_logf(t->log, t->log_user, HYFI_LOG_ERROR,
                  "%s: start-up: MPI's start (MPI_Init) has waited %d s for the other ranks "
                  "of the job: a rank was not started, stopped, hangs, or ran a program that "
                  "ended before starting MPI; ending this rank (the launcher then ends the "
                  "others). The limit is hyfi_launch_config.timeout_s (hyfi-train: --watchdog "
                  "SECONDS or HYFI_WATCHDOG_S; 0: off)", who, t->limit_s);
        hyfi_sentinel_ending(); /* this line says it all */
        _exit(1);
    }
    return NULL;
}

void hyfi_mpi_finalize_timed(int limit_s, int rank, int nranks, hyfi_log_fn log, void *log_user)
{
    /* a normal MPI_Finalize takes well under a second, thousands of ranks a
     * few: the hang should not cost a long watchdog's full limit */
    if (limit_s > HYFI_FINALIZE_MAX_S) limit_s = HYFI_FINALIZE_MAX_S;
    init_timer t = {.limit_s = limit_s, .finalize = 1, .rank = rank, .nranks = nranks,
                    .log = log, .log_user = log_user};
    pthread_t th;
    int timed = 0;
    if (limit_s > 0 && nranks > 1) {
        pthread_mutex_init(&t.lock, NULL);
        pthread_cond_init(&t.cond, NULL);
        timed = pthread_create(&th, NULL, init_timer_main, &t) == 0;
    }
    MPI_Finalize();
    if (!timed) return;
    pthread_mutex_lock(&t.lock);
    t.done = 1;
    pthread_cond_signal(&t.cond);
    pthread_mutex_unlock(&t.lock);
    pthread_join(th, NULL);
    pthread_cond_destroy(&t.cond);
    pthread_mutex_destroy(&t.lock);
}

hyfi_status hyfi_launch_begin(const hyfi_launch_config *cfg_in, int *rank, int *nranks)
{
    const hyfi_launch_config cfg = cfg_in ? *cfg_in : hyfi_launch_config_default();
    if (rank) *rank = 0;
    if (nranks) *nranks = 1;
    if (g_launch.begun)
        return hyfi_fail(HYFI_ERR_STATE, "hyfi_launch_begin: called twice; once per process");
    if (cfg.timeout_s < 0)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_launch_begin: timeout_s %d must be >= 0 (0: none)",
                         cfg.timeout_s);
    g_launch.log = cfg.log, g_launch.log_user = cfg.log_user;
    const int mpi = cfg.mpi >= 0 ? cfg.mpi : hyfi_launched_by_mpiexec();
    if (!mpi) return HYFI_OK;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return hyfi_fail(HYFI_ERR_STATE, "hyfi_launch_begin: MPI has been finalised in this "
                                         "process and cannot start again");
    if (cfg.end_with_launcher) {
        /* killed with the launcher's proxy (SIGKILL works on a stopped process);
         * a parent already gone (re-parented) leaves nothing to tie to */
        const pid_t parent = getppid();
        if (parent > 1) {
            prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
            if (getppid() != parent) _exit(1); /* it ended meanwhile: so does the job */
        }
    }
    if (!inited) {
        /* the death notice's child, before MPI (sentinel.c), when asked */
        if (cfg.death_notice) hyfi_sentinel_start();
        init_timer t = {.limit_s = cfg.timeout_s, .log = cfg.log, .log_user = cfg.log_user};
        pthread_t th;
        int timed = 0;
        if (cfg.timeout_s > 0) {
            pthread_mutex_init(&t.lock, NULL);
            pthread_cond_init(&t.cond, NULL);
            timed = pthread_create(&th, NULL, init_timer_main, &t) == 0;
        }
        int prov = 0;
        const int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov);
        if (timed) {
            pthread_mutex_lock(&t.lock);
            t.done = 1;
            pthread_cond_signal(&t.cond);
            pthread_mutex_unlock(&t.lock);
            pthread_join(th, NULL);
        }
        if (cfg.timeout_s > 0) {
            pthread_cond_destroy(&t.cond);
            pthread_mutex_destroy(&t.lock);
        }
        if (rc != MPI_SUCCESS) {
            hyfi_sentinel_stop();
            return hyfi_fail(HYFI_ERR_RUNTIME, "hyfi_launch_begin: MPI_Init_thread failed (%d)",
                             rc);
        }
        g_launch.inited = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_launch.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_launch.nranks);
    g_launch.begun = 1;
    g_launch.timeout_s = cfg.timeout_s;
    if (g_launch.nranks > 1) {
        hyfi_sentinel_arm(g_launch.rank, g_launch.nranks);
        /* every rank's child learns where the others' are (a death on one
         * node is then named once, for the whole job) */
        uint64_t mine[HYFI_SENTINEL_ENTRY];
        hyfi_sentinel_local(mine);
        static uint64_t spare[64 * HYFI_SENTINEL_ENTRY]; /* (out of memory, small jobs) */
        uint64_t *table = calloc((size_t)g_launch.nranks, sizeof mine);
        uint64_t *use = table ? table : g_launch.nranks <= 64 ? spare : NULL;
        if (use) {
            /* every rank has a table, or (out of memory, a large job) none does */
            if (MPI_Allgather(mine, HYFI_SENTINEL_ENTRY, MPI_UINT64_T, use, HYFI_SENTINEL_ENTRY,
                              MPI_UINT64_T, MPI_COMM_WORLD) == MPI_SUCCESS && use[0])
                hyfi_sentinel_peers(use, g_launch.nranks);
        }
        g_launch.peers = 1; /* (on every rank alike: whatever its notice) */
        free(table);
    } else {
        hyfi_sentinel_stop();
    }
    if (rank) *rank = g_launch.rank;
    if (nranks) *nranks = g_launch.nranks;
    return HYFI_OK;
}
#endif

void hyfi_launch_end(void)
{
#ifndef STARPU_SIMGRID
    if (!g_launch.inited || g_launch.taken) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        /* every rank's last messages delivered before any closes its
         * connections (UCX over TCP otherwise waits in MPI_Finalize for a peer
         * that already left it) */
        MPI_Barrier(MPI_COMM_WORLD);
        hyfi_mpi_finalize_timed(g_launch.timeout_s, g_launch.rank, g_launch.nranks, g_launch.log,
                                g_launch.log_user);
    }
    g_launch.taken = 1;
    hyfi_sentinel_stop();
#endif
}

#ifndef STARPU_SIMGRID
/* ------------------------------------------------------ the agreement */
/* End the job: the time is up while waiting for `missing` (their ranks in
 * order, n of them; rank 0 knows them all, the others only rank 0). */
static _Noreturn void give_up(const int *missing, int n, double waited)
{
    char ranks[160] = "";
    size_t used = 0;
    for (int i = 0; i < n && used + 16 < sizeof ranks; i++) {
        if (i == 8) {
            snprintf(ranks + used, sizeof ranks - used, " and %d more", n - i);
            break;
        }
        const int w = snprintf(ranks + used, sizeof ranks - used, "%s%d", i ? ", " : "",
                               missing[i]);
        if (w > 0) used += (size_t)w;
    }
    hyfi_logf(g_launch.log, g_launch.log_user, HYFI_LOG_ERROR,
              "rank %d of %d: start-up: %s %s %s not reached the check that the ranks "
              "started alike %.0f s after this rank did: %s still opening %s data, %s stopped "
              "(SIGSTOP, a debugger) or %s; ranks started with different arguments or another "
              "program (a rank that took another path through its start-up) are a likely "
              "cause. Ending every rank (MPI_Abort). The limit is hyfi_launch_config.timeout_s "
              "(hyfi-train: --watchdog SECONDS or HYFI_WATCHDOG_S); raise it if a rank "
              "legitimately needs that much longer to start",
              g_launch.rank, g_launch.nranks, n > 1 ? "ranks" : "rank", ranks,
              n > 1 ? "have" : "has", waited, n > 1 ? "they are" : "it is",
              n > 1 ? "their" : "its", n > 1 ? "were" : "was", n > 1 ? "hang" : "hangs");
    nanosleep(&(struct timespec){0, 500000000L}, NULL); /* let mpiexec forward the line */
    hyfi_sentinel_ending();
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* Poll n requests until all are done or limit_s (0: none) has passed;
 * missing[] gets the peers (peer[i]) still pending, and the call ends the job. */
static void wait_all(MPI_Request *req, const int *peer, int n, int limit_s)
{
    const double t0 = mono_s();
    long sleep_ns = 100000;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < n; i++) {
            int one = 1;
            if (req[i] != MPI_REQUEST_NULL) MPI_Test(&req[i], &one, MPI_STATUS_IGNORE);
            pending += !one;
        }
        if (!pending) return;
        const double waited = mono_s() - t0;
        if (limit_s > 0 && waited >= limit_s) {
            int *missing = malloc((size_t)n * sizeof *missing), m = 0;
            for (int i = 0; missing && i < n; i++)
                if (req[i] != MPI_REQUEST_NULL) missing[m++] = peer[i];
            give_up(missing ? missing : peer, missing ? m : n, waited);
        }
        nanosleep(&(struct timespec){0, sleep_ns}, NULL);
        if (sleep_ns < 10000000) sleep_ns *= 2;
    }
}

/* The exchange: every payload to rank 0, its verdict back. */
static void exchange(const hyfi_agree_spec *sp, hyfi_agree_payload *mine,
                     hyfi_agree_payload *all, hyfi_agree_verdict *v)
{
    const int me = g_launch.rank, R = g_launch.nranks;
    const int limit = g_launch.timeout_s;
    if (R < 2) return;
    MPI_Request *req = malloc((size_t)R * sizeof *req);
    int *peer = malloc((size_t)R * sizeof *peer);
    if (!req || !peer) { /* cannot poll: block (the others still get an answer) */
        free(req);
        free(peer);
        if (me == 0) {
            all[0] = *mine;
            for (int r = 1; r < R; r++)
                MPI_Recv(&all[r], sizeof *all, MPI_BYTE, r, LAUNCH_TAG, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            hyfi_agree_judge(sp, all, R, v);
            for (int r = 1; r < R; r++)
                MPI_Send(v, sizeof *v, MPI_BYTE, r, LAUNCH_TAG + 1, MPI_COMM_WORLD);
        } else {
            MPI_Send(mine, sizeof *mine, MPI_BYTE, 0, LAUNCH_TAG, MPI_COMM_WORLD);
            MPI_Recv(v, sizeof *v, MPI_BYTE, 0, LAUNCH_TAG + 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        }
        return;
    }
    if (me == 0) {
        all[0] = *mine;
        for (int r = 1; r < R; r++) {
            peer[r - 1] = r;
            MPI_Irecv(&all[r], sizeof *all, MPI_BYTE, r, LAUNCH_TAG, MPI_COMM_WORLD,
                      &req[r - 1]);
        }
        wait_all(req, peer, R - 1, limit);
        hyfi_agree_judge(sp, all, R, v);
        for (int r = 1; r < R; r++)
            MPI_Isend(v, sizeof *v, MPI_BYTE, r, LAUNCH_TAG + 1, MPI_COMM_WORLD, &req[r - 1]);
        wait_all(req, peer, R - 1, limit);
    } else {
        peer[0] = peer[1] = 0;
        MPI_Isend(mine, sizeof *mine, MPI_BYTE, 0, LAUNCH_TAG, MPI_COMM_WORLD, &req[0]);
        MPI_Irecv(v, sizeof *v, MPI_BYTE, 0, LAUNCH_TAG + 1, MPI_COMM_WORLD, &req[1]);
        wait_all(req, peer, 2, limit > 0 ? limit + LATE_GRACE_S : 0);
    }
    free(req);
    free(peer);
}
#endif

hyfi_status hyfi_launch_agree(hyfi_status local, const char *msg, const char *what,
                              const hyfi_setting *settings, int n, bool *alike)
{
    if (alike) *alike = false;
    char own[512];
    snprintf(own, sizeof own, "%s", msg ? msg : local != HYFI_OK ? hyfi_last_error() : "");
    if (n < 0 || n > HYFI_AGREE_MAX || (n > 0 && !settings)) {
        /* still take part, so that the other ranks do not wait for this one */
        if (local == HYFI_OK) {
            local = HYFI_ERR_ARG;
            snprintf(own, sizeof own, "hyfi_launch_agree: %d settings%s; give 0 to %d", n,
                     n > 0 && !settings ? " but the array is NULL" : "", HYFI_AGREE_MAX);
        }
        n = 0;
    }
    if (g_launch.agreed && local == HYFI_OK) {
        local = HYFI_ERR_STATE;
        snprintf(own, sizeof own, "hyfi_launch_agree: called twice; once per process");
    }
    g_launch.agreed = 1;
#ifdef STARPU_SIMGRID
    (void)what;
    (void)settings;
    return local == HYFI_OK ? HYFI_OK : hyfi_fail(local, "%s", own);
#else
    if (!g_launch.begun || g_launch.nranks < 2) {
        if (local != HYFI_OK) hyfi_launch_end(); /* one rank: MPI is its alone */
        return local == HYFI_OK ? HYFI_OK : hyfi_fail(local, "%s", own);
    }
    const char *names[HYFI_AGREE_MAX], *values[HYFI_AGREE_MAX];
    uint64_t hashes[HYFI_AGREE_MAX];
    for (int i = 0; i < n; i++) {
        names[i] = settings[i].name ? settings[i].name : "?";
        values[i] = settings[i].value;
        hashes[i] = settings[i].hash;
    }
    if (!what || !*what) what = "arguments";
    char intro[160], fix[160];
    snprintf(intro, sizeof intro, "the ranks were started with different %s", what);
    snprintf(fix, sizeof fix, "start every rank with the same %s", what);
    const hyfi_agree_spec sp = {intro, fix, names, values, hashes, n};
    hyfi_agree_payload *mine = calloc(1, sizeof *mine);
    hyfi_agree_payload *all =
        g_launch.rank == 0 ? calloc((size_t)g_launch.nranks, sizeof *all) : NULL;
    hyfi_agree_verdict v = {HYFI_OK, -1, 0, 0, ""};
    if (!mine || (g_launch.rank == 0 && !all)) {
        /* no payload to send: the others' time limit ends the job */
        free(mine);
        free(all);
        return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_launch_agree: out of memory");
    }
    hyfi_agree_fill(mine, local, own, &sp);
    exchange(&sp, mine, all, &v);
    free(mine);
    free(all);
    if (local == HYFI_OK && v.status == HYFI_OK) return HYFI_OK;
    /* every rank has the verdict: all of them end here, and MPI with them */
    hyfi_launch_exit_status(1);
    hyfi_launch_end();
    if (alike) *alike = v.alike != 0;
    if (local != HYFI_OK) return hyfi_fail(local, "%s", own);
    return hyfi_fail((hyfi_status)v.status, "%s", v.msg);
#endif
}
