/* Task records (hyfi_ctx_set_task_records): a callback per task copies its
 * name, worker and StarPU's profiling times into a growing array. The
 * callback runs on the worker that ran the task, right after it; a mutex
 * guards the array (one append per task, next to kernels of micro- to
 * milliseconds). */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static hyfi_task_record *g_rec;
static size_t g_n, g_cap;

void hyfi_record_task(void *arg)
{
    (void)arg;
    struct starpu_task *task = starpu_task_get_current();
    if (!task) return;
    hyfi_task_record r = {.worker = -1};
    snprintf(r.name, sizeof r.name, "%s", task->name ? task->name : "?");
    struct starpu_profiling_task_info *pi = task->profiling_info;
    if (pi) {
        r.worker = pi->workerid;
        r.start_us = starpu_timing_timespec_to_us(&pi->start_time);
        r.end_us = starpu_timing_timespec_to_us(&pi->end_time);
    }
    pthread_mutex_lock(&g_lock);
    if (g_n == g_cap) {
        const size_t nc = g_cap ? 2 * g_cap : 4096;
        hyfi_task_record *p = realloc(g_rec, nc * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&g_lock);
            return; /* out of memory: the record is dropped, the run goes on */
        }
        g_rec = p;
        g_cap = nc;
    }
    g_rec[g_n++] = r;
    pthread_mutex_unlock(&g_lock);
}

/* Traces: a marker task submitted at the start of every program run, so
 * that the summary can cut the trace into steps by submission time (tasks of
 * program k are submitted after its marker and before the next). It runs
 * nowhere. */
static struct starpu_codelet mark_cl = {
    .where = STARPU_NOWHERE,
    .nbuffers = 0,
    .name = "hyfi_mark",
};

void hyfi_trace_mark_program(hyfi_ctx *ctx)
{
    static long count;
    char name[48];
    snprintf(name, sizeof name, "hyfi.program.%ld", count++);
    (void)ctx;
    starpu_task_insert(&mark_cl, STARPU_NAME, name, 0);
}

void hyfi_records_free(void)
{
    pthread_mutex_lock(&g_lock);
    free(g_rec);
    g_rec = NULL;
    g_n = g_cap = 0;
    pthread_mutex_unlock(&g_lock);
}

hyfi_status hyfi_ctx_set_task_records(hyfi_ctx *ctx, bool on)
{
    if (!ctx) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_set_task_records: ctx is NULL");
    starpu_task_wait_for_all();
    if (on) {
        pthread_mutex_lock(&g_lock);
        g_n = 0;
        pthread_mutex_unlock(&g_lock);
    }
    starpu_profiling_status_set(on ? STARPU_PROFILING_ENABLE : STARPU_PROFILING_DISABLE);
    ctx->records = on;
    return HYFI_OK;
}

size_t hyfi_ctx_task_records(const hyfi_ctx *ctx, hyfi_task_record *out, size_t cap)
{
    if (!ctx) return 0;
    pthread_mutex_lock(&g_lock);
    const size_t n = g_n;
    if (out && cap) memcpy(out, g_rec, (n < cap ? n : cap) * sizeof *out);
    pthread_mutex_unlock(&g_lock);
    return n;
}
