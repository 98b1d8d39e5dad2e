/* Scoped compile: what one rank of an MPI run builds and registers.
 *
 * StarPU-MPI's sequential task flow lets a rank submit only the tasks that
 * concern it (share.c, mark_skips). Building the whole step's programs and
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
 *     replica 0 only (HYFI_SCOPE_MINE0); so that one rank of ResNet-56's
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hyfi_scope_init(hyfi_graph *g)
{
    hyfi_compiled *cc = g->cc;
    const hyfi_plan *pl = cc->pl;
    const int R = pl->nrep, me = g->ctx->rank;
    cc->submit_all = g->plan_cfg.submit_all;
    cc->reg_rep = -1;
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

void hyfi_reg_scope(hyfi_graph *g, int rep, int level)
{
    g->cc->reg_rep = rep;
    g->cc->reg_level = level;
}

int hyfi_reg_wanted(const hyfi_graph *g)
{
    const hyfi_compiled *cc = g->cc;
    if (cc->reg_rep < 0 || !cc->rep_mine) return 1;
    switch (cc->reg_level) {
    case HYFI_SCOPE_MINE: return cc->rep_mine[cc->reg_rep];
    case HYFI_SCOPE_MINE0: return cc->rep_mine[cc->reg_rep] || cc->reg_rep == 0;
    default: return cc->rep_want[cc->reg_rep];
    }
}

/* The owner of a registered handle, -1 for none. */
static int owner_of(const hyfi_graph *g, starpu_data_handle_t h)
{
    return h && g->ctx->mpi ? hyfi_handle_rank(g, h) : -1;
}

int hyfi_collective_done(hyfi_graph *g, program *P)
{
    if (P->overflow || !g->ctx->mpi || g->ctx->nranks < 2) return 0;
    prog_task *t = &P->t[P->n - 1];
    const int me = g->ctx->rank;
    int mine = !g->cc->scoped || t->rank == me;
    for (int b = 0; b < t->nbuf && !mine; b++) mine = owner_of(g, prog_cbufs(t)[b].handle) == me;
    if (!mine) {
        free(t->xbuf);
        free(t->args);
        P->n--;
        return 0;
    }
    const int n = t->nbuf, runner = t->rank;
    starpu_data_handle_t read[HYFI_MAX_TASK_BUFFERS];
    int nr = 0;
    for (int b = 0; b < n; b++) {
        const struct starpu_data_descr *d = &prog_cbufs(&P->t[P->n - 1])[b];
        if (!d->handle) { /* the compile's message names it */
            snprintf(g->cc->missing_task, sizeof g->cc->missing_task, "%s (buffer %d)",
                     t->name, b);
            P->missing = 1;
            return -1;
        }
        if (d->mode == STARPU_R && owner_of(g, d->handle) != runner) read[nr++] = d->handle;
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
            if (!prog_cbufs(t)[b].handle) { /* the compile's message names it */
                snprintf(g->cc->missing_task, sizeof g->cc->missing_task, "%s (buffer %d)",
                         t->name, b);
                return -1;
            }
    }
    return 0;
}
