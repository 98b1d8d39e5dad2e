/* Recording a trace: while a traced run (hyfi_ctx_config.trace_dir) compiles,
 * rank 0 notes every handle's StarPU-MPI tag, owner, name and traffic
 * category (hyfi_handles.tsv) and every op's stage and the plan's shape
 * (hyfi_ops.tsv, hyfi_plan.tsv), so that the summary can split the transfers
 * of comms.rec (which name tags) into halo / batch-norm statistics / pipeline
 * / all-reduce, and the tasks of tasks.rec (which name ops) into places.
 *
 * StarPU's FxT records the run itself (engine/ctx.c sets it up, with the
 * categories of hyfi_ctx_config.trace_events); hyfi_ctx_trace_record pauses
 * and resumes it (a window of steps), and hyfi_ctx_trace_steps_done numbers
 * a resumed run's programs on from its checkpoint. Merging and summarising a
 * trace is tooling outside the engine (trace/). */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- recording */


/* The first failure to write the notes (rank 0): the summary would then
 * name no categories or places, so hyfi_trace_merge reports it. */
static void note_failed(hyfi_ctx *c, const char *file, int e)
{
    if (c->trace_err) return;
    c->trace_err = e ? e : EIO;
    snprintf(c->trace_err_file, sizeof c->trace_err_file, "%s", file);
}

static FILE *open_note(hyfi_ctx *c, const char *file)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", c->trace_dir, file);
    FILE *f = fopen(path, "w");
    if (!f) note_failed(c, file, errno);
    return f;
}

static void close_note(hyfi_ctx *c, FILE *f, const char *file)
{
    if (fclose(f)) note_failed(c, file, errno);
}

void hyfi_trace_note_handle(hyfi_graph *g, int64_t tag, int owner, hyfi_hcat cat,
                            const char *name)
{
    hyfi_ctx *c = g->ctx;
    if (c->rank != 0 || c->trace_err) return;
    if (!c->trace_handles) {
        if (!(c->trace_handles = open_note(c, "hyfi_handles.tsv"))) return;
        if (fputs("tag\towner\tcategory\tname\n", c->trace_handles) == EOF)
            note_failed(c, "hyfi_handles.tsv", errno);
    }
    if (fprintf(c->trace_handles, "%lld\t%d\t%s\t%s\n", (long long)tag, owner,
                hyfi_hcat_names[cat], name) < 0)
        note_failed(c, "hyfi_handles.tsv", errno);
}

void hyfi_trace_note_plan(hyfi_graph *g)
{
    hyfi_ctx *c = g->ctx;
    if (c->rank != 0 || c->trace_err) return;
    if (c->trace_handles && fflush(c->trace_handles)) note_failed(c, "hyfi_handles.tsv", errno);
    FILE *f = open_note(c, "hyfi_ops.tsv");
    if (!f) return;
    if (fputs("op\tkind\tstage\n", f) == EOF) note_failed(c, "hyfi_ops.tsv", errno);
    for (int i = 0; i < g->nnodes; i++)
        if (fprintf(f, "%s\t%s\t%d\n", g->nodes[i].name, hyfi_op_names[g->nodes[i].op],
                    g->nodes[i].stage) < 0)
            note_failed(c, "hyfi_ops.tsv", errno);
    close_note(c, f, "hyfi_ops.tsv");
    if (!(f = open_note(c, "hyfi_plan.tsv"))) return;
    const hyfi_plan *pl = g->cc->pl;
    if (fprintf(f, "ranks\t%d\nstages\t%d\nmicrobatches\t%d\nreplicas\t%d\nper_replica\t%d\n"
                   "tiled_stages\t%d\ntiles\t%d\n",
                c->nranks, pl->nstages, pl->nmb, pl->nrep, pl->mbr, pl->K, pl->P) < 0)
        note_failed(c, "hyfi_plan.tsv", errno);
    close_note(c, f, "hyfi_plan.tsv");
}

/* The last traced context's note failure, for hyfi_trace_merge (which runs
 * after hyfi_ctx_destroy, on rank 0). */
static char g_failed_dir[4096];
static char g_failed_file[32];
static int g_failed_err;

void hyfi_trace_finish(hyfi_ctx *c)
{
    if (c->trace_handles && fclose(c->trace_handles)) note_failed(c, "hyfi_handles.tsv", errno);
    c->trace_handles = NULL;
    if (!c->trace_dir || c->rank != 0) return;
    snprintf(g_failed_dir, sizeof g_failed_dir, "%s", c->trace_dir);
    snprintf(g_failed_file, sizeof g_failed_file, "%s", c->trace_err_file);
    g_failed_err = c->trace_err;
}

hyfi_status hyfi_ctx_trace_record(hyfi_ctx *ctx, bool on)
{
    if (!ctx || !ctx->trace_dir)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_trace_record: the context is not traced "
                                       "(hyfi_ctx_config.trace_dir is NULL)");
#ifdef STARPU_USE_FXT
    if (on) starpu_fxt_start_profiling();
    else starpu_fxt_stop_profiling();
#endif
    return HYFI_OK;
}

hyfi_status hyfi_ctx_trace_steps_done(hyfi_ctx *ctx, long long steps)
{
    if (!ctx || !ctx->trace_dir)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_trace_steps_done: the context is not traced "
                                       "(hyfi_ctx_config.trace_dir is NULL)");
    if (steps < 0 || steps > LONG_MAX - 1)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_trace_steps_done: %lld steps", steps);
    ctx->programs_run = (long)steps;
    return HYFI_OK;
}

int hyfi_trace_note_error(const char *dir, const char **file)
{
    if (!g_failed_err || !dir || strcmp(dir, g_failed_dir)) return 0;
    *file = g_failed_file;
    return g_failed_err;
}
