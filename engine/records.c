/* Task records (hyfi_ctx_set_task_records), per context: a callback per task
 * copies its name, worker and StarPU's profiling times into the context's
 * growing array. The callback runs on the worker that ran the task, right
 * after it, with the context as its argument; a mutex guards the array (one
 * append per task, next to kernels of micro- to milliseconds). */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct hyfi_records {
    pthread_mutex_t lock;
    hyfi_task_record *rec;
    size_t n, cap;
};

void hyfi_record_task(void *arg)
{
    hyfi_ctx *ctx = arg;
    struct hyfi_records *b = ctx ? ctx->rec : NULL;
    struct starpu_task *task = starpu_task_get_current();
    if (!task || !b) return;
    hyfi_task_record r = {.worker = -1};
    snprintf(r.name, sizeof r.name, "%s", task->name ? task->name : "?");
    struct starpu_profiling_task_info *pi = task->profiling_info;
    if (pi) {
        r.worker = pi->workerid;
        r.start_us = starpu_timing_timespec_to_us(&pi->start_time);
        r.end_us = starpu_timing_timespec_to_us(&pi->end_time);
    }
    pthread_mutex_lock(&b->lock);
    if (b->n == b->cap) {
        const size_t nc = b->cap ? 2 * b->cap : 4096;
        hyfi_task_record *p = realloc(b->rec, nc * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&b->lock);
            return; /* out of memory: the record is dropped, the run goes on */
        }
        b->rec = p;
        b->cap = nc;
    }
    b->rec[b->n++] = r;
    pthread_mutex_unlock(&b->lock);
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
    char name[48];
    snprintf(name, sizeof name, "hyfi.program.%ld", ctx->programs_run++);
    starpu_task_insert(&mark_cl, STARPU_NAME, name, 0);
}

void hyfi_records_free(hyfi_ctx *ctx)
{
    struct hyfi_records *b = ctx->rec;
    if (!b) return;
    pthread_mutex_destroy(&b->lock);
    free(b->rec);
    free(b);
    ctx->rec = NULL;
}

hyfi_status hyfi_ctx_set_task_records(hyfi_ctx *ctx, bool on)
{
    if (!ctx) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_set_task_records: ctx is NULL");
    starpu_task_wait_for_all();
    if (on && !ctx->rec) {
        struct hyfi_records *b = calloc(1, sizeof *b);
        if (!b)
            return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_ctx_set_task_records: out of memory");
        pthread_mutex_init(&b->lock, NULL);
        ctx->rec = b;
    }
    if (on) ctx->rec->n = 0; /* no task runs: every one submitted has ended */
    starpu_profiling_status_set(on ? STARPU_PROFILING_ENABLE : STARPU_PROFILING_DISABLE);
    ctx->records = on;
    return HYFI_OK;
}

size_t hyfi_ctx_task_records(const hyfi_ctx *ctx, hyfi_task_record *out, size_t cap)
{
    struct hyfi_records *b = ctx ? ctx->rec : NULL;
    if (!b) return 0;
    pthread_mutex_lock(&b->lock);
    const size_t n = b->n;
    if (out && cap) memcpy(out, b->rec, (n < cap ? n : cap) * sizeof *out);
    pthread_mutex_unlock(&b->lock);
    return n;
}
