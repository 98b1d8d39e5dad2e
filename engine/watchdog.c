/* The watchdog of MPI runs (hyfi_ctx_config.watchdog_s).
 *
 * When a peer rank is stopped (SIGSTOP, a debugger) or dies without MPI
 * noticing, the other ranks wait in StarPU(-MPI) for data that never comes:
 * forever, since a blocked starpu_mpi_wait_for_all or data acquire cannot be
 * cancelled, so no call can return an error. A thread per process watches
 * instead: while the rank waits inside a hyfi call (hyfi_wait_begin ..
 * hyfi_wait_end: program runs, reads and writes of tensors, agreements, the
 * shutdown) it samples, once a second, whether anything moved: a task
 * completed or was submitted (starpu_task_nsubmitted changes), a CPU kernel
 * is running, or a wait began or ended. After watchdog_s seconds without any
 * of these it prints one line naming the rank, the seconds and the likely
 * cause and calls MPI_Abort, which makes mpiexec end every rank. With the
 * launch's time limit and the MPI_Finalize timer (launch.c), one of the three
 * places the library ends the process: a fault it cannot return from, not a
 * user error.
 *
 * Cost: the thread sleeps between samples; a wait adds two atomic operations
 * at its start and its end; nothing per task. */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct hyfi_watchdog {
    int rank, nranks;
    int limit_s;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;                        /* under lock */
    atomic_int depth;                /* nested waits in progress */
    atomic_uint epoch;               /* bumped at every wait's start and end */
    _Atomic(const char *) what;      /* the outermost wait */
    hyfi_log_fn log;                 /* the context's (hyfi_ctx_config.log) */
    void *log_user;
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fire(struct hyfi_watchdog *wd, double waited)
{
    const char *what = atomic_load(&wd->what);
    /* an agreement waits for a rank to reach the same call: one that took
     * another path through the program (other arguments) never does */
    const int agree = what && !strcmp(what, HYFI_WAIT_AGREE);
    hyfi_logf(wd->log, wd->log_user, HYFI_LOG_ERROR,
              "rank %d of %d: watchdog: no progress for %.0f s in %s: %s. %s; ending every "
              "rank (MPI_Abort). The limit is hyfi_ctx_config.watchdog_s (hyfi-train: --watchdog "
              "SECONDS or HYFI_WATCHDOG_S; 0: off); raise it if a rank legitimately waits that "
              "long for another's work",
              wd->rank, wd->nranks, waited, what ? what : "a hyfi call",
              agree ? "another rank has not reached it"
                    : "no task has completed on this rank while it waits for the others",
              agree ? "A peer rank was probably stopped (SIGSTOP, a debugger) or died, or the "
                      "ranks took different paths through the program (started with different "
                      "arguments, e.g. --save or --checkpoint-dir given to some ranks only)"
                    : "A peer rank was probably stopped (SIGSTOP, a debugger) or died, or the "
                      "run hangs");
    /* let mpiexec forward the line before it tears the job down */
    nanosleep(&(struct timespec){0, 500000000L}, NULL);
    hyfi_sentinel_ending(); /* this line says it all: the deaths that follow are not news */
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1); /* MPI_Abort does not return */
}

static void *watchdog_main(void *arg)
{
    struct hyfi_watchdog *wd = arg;
    /* sample often enough to fire within about 1 s of the limit */
    const double period = wd->limit_s >= 4 ? 1.0 : wd->limit_s / 4.0;
    unsigned last_epoch = atomic_load(&wd->epoch);
    int last_sub = -1;
    double since = mono_s();
    pthread_mutex_lock(&wd->lock);
    while (!wd->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        const long ns = until.tv_nsec + (long)(period * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&wd->cond, &wd->lock, &until);
        if (wd->stop) break;
        const double now = mono_s();
        const unsigned e = atomic_load(&wd->epoch);
        const int sub = starpu_task_nsubmitted();
        if (atomic_load(&wd->depth) == 0 || e != last_epoch || sub != last_sub ||
            hyfi_ops_cores_busy() > 0) {
            since = now;
            last_epoch = e;
            last_sub = sub;
            continue;
        }
        if (now - since >= wd->limit_s) fire(wd, now - since);
    }
    pthread_mutex_unlock(&wd->lock);
    return NULL;
}

hyfi_status hyfi_watchdog_start(hyfi_ctx *ctx, int limit_s)
{
    struct hyfi_watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_ctx_create: out of memory (watchdog)");
    wd->rank = ctx->rank;
    wd->nranks = ctx->nranks;
    wd->limit_s = limit_s;
    wd->log = ctx->log, wd->log_user = ctx->log_user;
    atomic_init(&wd->depth, 0);
    atomic_init(&wd->epoch, 0);
    atomic_init(&wd->what, NULL);
    pthread_mutex_init(&wd->lock, NULL);
    pthread_cond_init(&wd->cond, NULL);
    if (pthread_create(&wd->thread, NULL, watchdog_main, wd) != 0) {
        pthread_cond_destroy(&wd->cond);
        pthread_mutex_destroy(&wd->lock);
        free(wd);
        return hyfi_fail(HYFI_ERR_RUNTIME, "hyfi_ctx_create: cannot start the watchdog thread; "
                                           "set watchdog_s = 0 to run without it");
    }
    ctx->wd = wd;
    return HYFI_OK;
}

void hyfi_watchdog_stop(hyfi_ctx *ctx)
{
    struct hyfi_watchdog *wd = ctx->wd;
    if (!wd) return;
    pthread_mutex_lock(&wd->lock);
    wd->stop = 1;
    pthread_cond_signal(&wd->cond);
    pthread_mutex_unlock(&wd->lock);
    pthread_join(wd->thread, NULL);
    pthread_cond_destroy(&wd->cond);
    pthread_mutex_destroy(&wd->lock);
    free(wd);
    ctx->wd = NULL;
}

void hyfi_wait_begin(hyfi_ctx *ctx, const char *what)
{
    struct hyfi_watchdog *wd = ctx ? ctx->wd : NULL;
    if (!wd) return;
    if (atomic_fetch_add(&wd->depth, 1) == 0) atomic_store(&wd->what, what);
    atomic_fetch_add(&wd->epoch, 1);
}

void hyfi_wait_end(hyfi_ctx *ctx)
{
    struct hyfi_watchdog *wd = ctx ? ctx->wd : NULL;
    if (!wd) return;
    atomic_fetch_sub(&wd->depth, 1);
    atomic_fetch_add(&wd->epoch, 1);
}
