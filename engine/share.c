/* A rank's share of the plan (MPI): which replicas it builds and which
 * replicas' pieces of data it registers (hyfi_scope_init; the rule per key:
 * keyed.c, hyfi_key_wanted), which
 * collectives' tasks it keeps (hyfi_collective_done), which tasks of the
 * programs it submits (mark_skips), the others dropped after the compile,
 * and its counts (hyfi_graph_rank_stats).
 *
 * Scoped compile: what one rank of an MPI run builds and registers.
 * StarPU-MPI's sequential task flow lets a rank submit only the tasks that
 * concern it (mark_skips, below). Building the whole step's programs and
 * registering every handle of the plan on every rank still costs memory and
 * time in the size of the whole plan: with R data-parallel replicas every rank
 * held R copies of every handle. A scoped rank instead
 *   - builds the per-replica part of the step (forward, backward, releases,
 *     the tiles' weight sums, SGD) only for the replicas with a place on it
 *     (rep_mine: another replica's tasks touch only that replica's handles,
 *     which live on other ranks);
 *   - registers the per-micro-batch handles of those replicas, and the
 *     per-replica handles of those replicas and, where the collectives read
 *     them (running statistics, buckets, a gradient that is a bucket of its
 *     own: reduce.c registers those), of the replicas they exchange with
 *     (rep_want: the tree's partners of replica k, k + 2^j while 2^(j+1)
 *     divides k, then k - 2^j once; ring neighbours; replica 0); a
 *     parameter's value, gradient, momentum and norms of its own replicas and
 *     replica 0 only (hyfi_key_wanted); so that one rank of ResNet-56's
 *     2,048-rank plan registers 7,751 handles, as many as at 16 ranks (19,402
 *     before either); a handle's tag comes from its key (keys.h), the same on
 *     every rank whatever it skips;
 *   - keeps a collective's task (combine of running statistics, all-reduce,
 *     health sums) only where it runs on the rank or touches a handle the rank
 *     owns (hyfi_collective_done).
 * What makes the last rule safe: after a collective task reads a handle owned
 * by another rank, the reader and the owner flush that handle (PT_FLUSH), so
 * no rank keeps a received copy whose later writers it does not see (mark_skips'
 * reason to submit them). A handle read outside the programs that a rank did
 * not register (hyfi_tensor_read of another replica's micro-batches) is
 * registered when read (hyfi_handle_need, handles.c), with its key.
 *
 * A single-process run, and an MPI run with hyfi_plan_config.submit_all, build
 * everything on every rank as before (the flushes are in every MPI build). */
#include "emit.h"

#include <starpu_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hyfi_scope_init(hyfi_graph *g)
{
    hyfi_compiled *cc = g->cc;
    const hyfi_plan *pl = cc->pl;
    const int R = pl->nrep, me = g->ctx->rank;
    cc->submit_all = g->plan_cfg.submit_all;
    cc->rep_mine = calloc((size_t)R, 1);
    cc->rep_want = calloc((size_t)R, 1);
    if (!cc->rep_mine || !cc->rep_want) return -1;
    int any = 0;
    for (int q = 0; q < pl->nplaces; q++)
        if (pl->place_rank[q] == me) cc->rep_mine[q / pl->nplaces1] = 1, any = 1;
    cc->scoped = g->ctx->mpi && g->ctx->nranks > 1 && any && !cc->submit_all;
    /* (the combine's packed layout has no CUDA implementation yet) */
    cc->bn_pack = cc->scoped && g->ctx->ncuda == 0;
    if (!cc->scoped) {
        memset(cc->rep_mine, 1, (size_t)R);
        memset(cc->rep_want, 1, (size_t)R);
        return 0;
    }
    /* partners in the collectives: tree (k with k + d, d = 1, 2, 4, ...; k a
     * multiple of 2d) and ring (k - 1, k + 1); replica 0 everywhere (read by
     * hyfi_tensor_read, checkpoints and the health check) */
    cc->rep_want[0] = 1;
    for (int k = 0; k < R; k++) {
        if (!cc->rep_mine[k]) continue;
        cc->rep_want[k] = 1;
        cc->rep_want[(k + 1) % R] = cc->rep_want[(k + R - 1) % R] = 1;
        /* the tree's pairs (base, base + d) with k in them: k = base while
         * 2d divides k (its partner k + d), then once k = base + d (d is k's
         * lowest set bit; partner k - d) */
        for (int d = 1; d < R; d *= 2) {
            if (k % (2 * d) == 0) {
                if (k + d < R) cc->rep_want[k + d] = 1;
            } else {
                cc->rep_want[k - d] = 1;
                break;
            }
        }
    }
    return 0;
}

void hyfi_scope_free(hyfi_compiled *cc)
{
    free(cc->rep_mine);
    free(cc->rep_want);
    cc->rep_mine = cc->rep_want = NULL;
}

/* The owner of a piece of data, -1 for none. */
static int owner_of(const hyfi_graph *g, hyfi_ref r)
{
    return g->ctx->mpi ? hyfi_ref_rank(g, r) : -1;
}

int hyfi_collective_done(hyfi_graph *g, program *P)
{
    if (P->overflow || !g->ctx->mpi || g->ctx->nranks < 2) return 0;
    prog_task *t = &P->t[P->n - 1];
    const int me = g->ctx->rank;
    int mine = !g->cc->scoped || t->rank == me;
    for (int b = 0; b < t->nbuf && !mine; b++) mine = owner_of(g, prog_cbufs(t)[b].ref) == me;
    if (!mine) {
        free(t->xbuf);
        P->n--;
        return 0;
    }
    const int n = t->nbuf, runner = t->rank;
    hyfi_ref read[HYFI_MAX_TASK_BUFFERS];
    int nr = 0;
    for (int b = 0; b < n; b++) {
        const prog_buf *d = &prog_cbufs(&P->t[P->n - 1])[b];
        if (!d->ref) { /* the compile's message names it */
            snprintf(g->cc->missing_task, sizeof g->cc->missing_task, "%s (buffer %d)",
                     t->name, b);
            P->missing = 1;
            return -1;
        }
        if (d->mode == STARPU_R && owner_of(g, d->ref) != runner) read[nr++] = d->ref;
    }
    for (int i = 0; i < nr; i++) {
        if (hyfi_prog_push(P, PT_FLUSH, NULL, "flush", NULL)) return -1;
        P->t[P->n - 1].rank = runner;
        hyfi_prog_buf(P, read[i], STARPU_R);
    }
    return 0;
}

int hyfi_scope_check(hyfi_graph *g, const program *P)
{
    for (int i = 0; i < P->n; i++) {
        const prog_task *t = &P->t[i];
        for (int b = 0; b < t->nbuf; b++)
            if (!prog_cbufs(t)[b].ref) { /* the compile's message names it */
                snprintf(g->cc->missing_task, sizeof g->cc->missing_task, "%s (buffer %d)",
                         t->name, b);
                return -1;
            }
    }
    return 0;
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
    /* used[e]: some task running here touches entry e (none: a task naming
     * no data here, which the compile refuses, counts as this rank's) */
    unsigned char *used = calloc((size_t)g->cc->nhtab + 1, 1);
    if (!used) return -1;
    /* the handles read elsewhere only before a flush (localise.c: flushread):
     * no copy of them stays, so their writers need not be seen by their readers */
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ps[k]->n; i++) {
            const prog_task *t = &ps[k]->t[i];
            if (t->kind != PT_TASK || t->rank != me) continue;
            for (int b = 0; b < t->nbuf; b++) {
                const hyfi_ref r = prog_cbufs(t)[b].ref;
                if (r && !g->cc->htab[r - 1].flushread) used[r - 1] = 1;
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
                const hyfi_ref r = prog_cbufs(t)[b].ref;
                mine = !r || hyfi_ref_rank(g, r) == me || used[r - 1];
            }
            p->skip[i] = (unsigned char)!mine;
        }
    }
    free(used);
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
    out->tasks_far = P->trimmed;
    out->largest_task_mb = (double)most / 1e6;
    out->graph_mb = g->ctx->graph_rss_mb;
    return HYFI_OK;
}
