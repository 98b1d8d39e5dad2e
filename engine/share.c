/* A rank's share of the step (MPI): which tasks of the programs it submits
 * (mark_skips), the others dropped after the compile, and its counts
 * (hyfi_graph_rank_stats). */
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* An open-addressing set of handles. */
typedef struct {
    starpu_data_handle_t *slot;
    size_t mask;
} handle_set;

static size_t hs_at(const handle_set *s, starpu_data_handle_t h)
{
    size_t i = (size_t)(((uintptr_t)h >> 4) * UINT64_C(0x9E3779B97F4A7C15)) & s->mask;
    while (s->slot[i] && s->slot[i] != h) i = (i + 1) & s->mask;
    return i;
}

/* Which tasks of the graph's programs this rank need not submit (StarPU-MPI's
 * sequential task flow does not need every rank to see every task). A rank
 * submits a task that runs on it, or that accesses a handle it owns (it sends
 * the data, or receives what is written back), or a handle that some task
 * running on it accesses in any of the graph's programs (it may hold a
 * received copy in StarPU-MPI's cache, which a write elsewhere must
 * invalidate; the programs repeat, so "any" covers the steps before and
 * after). Every other task moves no data to or from this rank and changes
 * nothing it holds. Copies received outside the programs (tensor reads,
 * gathers, the loss's broadcast) are flushed after use (hyfi_handle_read), so
 * no stale copy stays behind. The submission cost per rank then follows its
 * own share of the graph, not the whole graph. It runs once, at the end of the
 * compile, and the tasks it marks are dropped from the programs
 * (hyfi_programs_drop_skipped). hyfi_plan_config.submit_all submits everything, as
 * before. */
static int mark_skips(hyfi_graph *g)
{
    const int me = g->ctx->rank;
    program *ps[3] = {&g->cc->train_prog, &g->cc->infer_prog, &g->cc->fwd_train_prog};
    size_t nb = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ps[k]->n; i++) nb += (size_t)ps[k]->t[i].nbuf;
    handle_set s = {0};
    size_t cap = 16;
    while (cap < 2 * nb + 2) cap <<= 1;
    if (!(s.slot = calloc(cap, sizeof *s.slot))) return -1;
    s.mask = cap - 1;
    /* the handles read elsewhere only before a flush (localise.c: flushread):
     * no copy of them stays, so their writers need not be seen by their readers */
    hyfi_hindex ix = {0};
    if (hyfi_hindex_build(&ix, g->cc)) {
        free(s.slot);
        return -1;
    }
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ps[k]->n; i++) {
            const prog_task *t = &ps[k]->t[i];
            if (t->kind != PT_TASK || t->rank != me) continue;
            for (int b = 0; b < t->nbuf; b++) {
                starpu_data_handle_t h = prog_cbufs(t)[b].handle;
                const int e = hyfi_hindex_of(&ix, h);
                if (e >= 0 && g->cc->htab[e].flushread) continue;
                s.slot[hs_at(&s, h)] = h;
            }
        }
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        program *p = ps[k];
        free(p->skip);
        if (!(p->skip = calloc((size_t)p->n + 1, 1))) {
            rc = -1;
            break;
        }
        for (int i = 0; i < p->n; i++) {
            const prog_task *t = &p->t[i];
            if (t->kind != PT_TASK || t->rank == me) continue;
            int mine = 0;
            for (int b = 0; b < t->nbuf && !mine; b++) {
                starpu_data_handle_t h = prog_cbufs(t)[b].handle;
                mine = hyfi_handle_rank(g, h) == me || s.slot[hs_at(&s, h)] == h;
            }
            p->skip[i] = (unsigned char)!mine;
        }
    }
    free(s.slot);
    hyfi_hindex_free(&ix);
    if (rc)
        for (int k = 0; k < 3; k++) free(ps[k]->skip), ps[k]->skip = NULL;
    if (!rc && g->ctx->verbose) {
        int n = 0, sub = 0;
        for (int i = 0; i < ps[0]->n; i++)
            if (ps[0]->t[i].kind == PT_TASK) n++, sub += !ps[0]->skip[i];
        hyfi_ctx_log(g->ctx, HYFI_LOG_INFO, "rank %d submits %d of the %d tasks of a training step",
                     me, sub, n);
    }
    return rc;
}

/* Drop from p the tasks marked skipped (their buffers freed), keeping the
 * order of the others; every task left is submitted. */
static void drop_skipped(program *p)
{
    int j = 0, tasks = 0;
    for (int i = 0; i < p->n; i++) {
        tasks += p->t[i].kind == PT_TASK;
        if (p->skip && p->skip[i]) {
            free(p->t[i].xbuf);
            free(p->t[i].args);
            continue;
        }
        if (j != i) p->t[j] = p->t[i];
        j++;
    }
    p->built = tasks;
    p->n = j;
    prog_task *t = realloc(p->t, (size_t)(j ? j : 1) * sizeof *p->t);
    if (t) p->t = t, p->cap = j ? j : 1;
    if (p->skip) memset(p->skip, 0, (size_t)p->n + 1);
}

/* MPI: the programs' skip marks, made once (mark_skips) unless submit_all
 * asks for every task. 1 when marked, 0 when not (one process, or submit
 * all), -1 when out of memory. */
int hyfi_skips_ready(hyfi_graph *g)
{
    if (!g->ctx->mpi || g->cc->submit_all) return 0;
    if (!g->cc->train_prog.skip && mark_skips(g)) return -1;
    return 1;
}

int hyfi_programs_drop_skipped(hyfi_graph *g)
{
    const int rc = hyfi_skips_ready(g);
    if (rc <= 0) return rc;
    drop_skipped(&g->cc->train_prog);
    drop_skipped(&g->cc->infer_prog);
    drop_skipped(&g->cc->fwd_train_prog);
    return 0;
}

hyfi_status hyfi_graph_rank_stats(hyfi_graph *g, hyfi_rank_stats *out)
{
    if (!g || !out) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_rank_stats: g or out is NULL");
    hyfi_status s = hyfi_need_compiled(g, "hyfi_graph_rank_stats");
    if (s != HYFI_OK) return s;
    memset(out, 0, sizeof *out);
    const program *P = &g->cc->train_prog;
    if (hyfi_skips_ready(g) < 0)
        return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory preparing a program");
    out->rank = g->ctx->rank;
    out->nranks = g->ctx->nranks;
    out->handles = g->cc->nreg;
    size_t most = 0;
    for (int i = 0; i < P->n; i++) {
        const prog_task *t = &P->t[i];
        if (t->kind != PT_TASK) continue;
        out->tasks_built++;
        out->tasks_submitted += !(P->skip && P->skip[i]);
        if (t->rank != out->rank) continue;
        const size_t b = hyfi_task_bytes(g, t);
        if (b > most) most = b;
    }
    if (P->built) out->tasks_built = P->built; /* before the others' were dropped */
    out->largest_task_mb = (double)most / 1e6;
    out->graph_mb = g->ctx->graph_rss_mb;
    return HYFI_OK;
}
