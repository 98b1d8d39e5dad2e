/* Recording a trace: while a traced run (hyfi_ctx_config.trace_dir) compiles,
 * rank 0 notes every handle's StarPU-MPI tag, owner, name and traffic
 * category (hyfi_handles.tsv) and every op's stage and the plan's shape
 * (hyfi_ops.tsv, hyfi_plan.tsv), so that the summary can split the transfers
 * of comms.rec (which name tags) into halo / batch-norm statistics / pipeline
 * / all-reduce, and the tasks of tasks.rec (which name ops) into places.
 *
 * StarPU's FxT records the run itself (engine/ctx.c sets it up); merging and
 * summarising a trace is tooling outside the engine (trace/). */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- recording */

static const char *handle_category(hyfi_graph *g, const char *name)
{
    if (strstr(name, ".halo")) return "halo";
    if (strstr(name, ".stats.tile") || strstr(name, ".dstats")) return "bnstats";
    if (!strncmp(name, "bucket", 6) || strstr(name, ".chunk") || strstr(name, ".momentum") ||
        strstr(name, ".start"))
        return "allreduce";
    for (int i = 0; i < g->ntensors; i++) {
        const hyfi_tensor *t = g->tensors[i];
        const size_t n = strlen(t->name);
        if (strncmp(name, t->name, n) || (name[n] && name[n] != '.' && name[n] != '[')) continue;
        if (t->kind == T_PARAM || t->kind == T_STATE) return "allreduce";
        if (t->kind == T_INPUT || t->kind == T_LABELS) return "input";
        if (t == g->loss) return "loss";
    }
    return "pipeline";
}

void hyfi_trace_note_handle(hyfi_graph *g, starpu_data_handle_t h, int64_t tag, int owner,
                            const char *name)
{
    (void)h;
    hyfi_ctx *c = g->ctx;
    if (c->rank != 0) return;
    if (!c->trace_handles) {
        char path[4200];
        snprintf(path, sizeof path, "%s/hyfi_handles.tsv", c->trace_dir);
        c->trace_handles = fopen(path, "w");
        if (!c->trace_handles) return; /* the summary then names no categories */
        fputs("tag\towner\tcategory\tname\n", c->trace_handles);
    }
    fprintf(c->trace_handles, "%lld\t%d\t%s\t%s\n", (long long)tag, owner,
            handle_category(g, name), name);
}

void hyfi_trace_note_plan(hyfi_graph *g)
{
    hyfi_ctx *c = g->ctx;
    if (c->rank != 0) return;
    if (c->trace_handles) fflush(c->trace_handles);
    char path[4200];
    snprintf(path, sizeof path, "%s/hyfi_ops.tsv", c->trace_dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("op\tkind\tstage\n", f);
    for (int i = 0; i < g->nnodes; i++)
        fprintf(f, "%s\t%s\t%d\n", g->nodes[i].name, hyfi_op_names[g->nodes[i].op],
                g->nodes[i].stage);
    fclose(f);
    snprintf(path, sizeof path, "%s/hyfi_plan.tsv", c->trace_dir);
    if (!(f = fopen(path, "w"))) return;
    const hyfi_plan *pl = g->pl;
    fprintf(f, "ranks\t%d\nstages\t%d\nmicrobatches\t%d\nreplicas\t%d\nper_replica\t%d\n"
               "tiled_stages\t%d\ntiles\t%d\n",
            c->nranks, pl->nstages, pl->nmb, pl->nrep, pl->mbr, pl->K, pl->P);
    fclose(f);
}

