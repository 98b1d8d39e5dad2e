/* The end of a train step, across replicas and ranks: saving and combining
 * batch norm's running statistics over replicas, all-reducing the gradients
 * (ring or tree, in the buckets buckets.c formed), the SGD updates, and adding
 * up the step's health sums. */
#include "emit.h"

#include <starpu_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Running statistics. A batch norm's running statistic follows
 *     r <- a r + m s_j   (a = 1 - momentum, s_j: the statistic of micro-batch j)
 * over the step's micro-batches in order. Replica k applies it to its own
 * micro-batches [k B, (k+1) B) from the common start r0 (saved at the start
 * of the step by every replica: they start it equal), giving r_k; with
 * c = a^B, the one-place value after all of them is then exactly
 *     x_0 = r_0,  x_k = c x_(k-1) + (r_k - c r0),  r = x_(R-1),
 * i.e. x_(R-1) = f_(R-1)(... f_1(r_0)) with the affine maps f_k(x) = c x +
 * (r_k - c r0). Affine maps compose associatively, so the combine is a tree:
 * Y(lo, hi), the value of the recurrence over replicas [lo, hi) started from
 * r_lo, merges with the next block's Y(hi, hi + L) as
 *     Y(lo, hi + L) = c^L (Y(lo, hi) - r0) + Y(hi, hi + L)
 * (expand Y(hi, hi + L) and the maps of [hi, hi + L)), which is the combine
 * kernel with one other replica and decay c^L. Up: for d = 1, 2, 4, ...,
 * replica k (k a multiple of 2d) merges block [k + d, k + 2d) into its block
 * [k, k + d) in place; replica 0 then holds r. Down: the value copied back
 * along the same tree. Every task reads at most 3 buffers, the depth is
 * 2 log2 R, and replica k's copy is read only by replicas k - d; linear, so
 * equal up to round-off (R = 2: the operations of the sequential recurrence;
 * larger R rounds each merge to float). */
/* Packed, when hyfi_stats_packed (more than 4 replicas; 2 or more where the
 * copies are grouped, emit_slices): the running
 * statistics of a stage's batch norms of one momentum, in groups of
 * HYFI_STATS_GROUP, are copied side by side into one buffer per group and replica
 * (at the step's start, the saved r0, and at its end, the values), the tree
 * merges and copies those buffers, and each replica copies the merged values
 * back: 2 tasks per tree level and group instead of 2 per level and
 * statistic (ResNet-56: 114 statistics, so at 64 replicas, 6 levels, 6
 * merges per group of 16 instead of 6 per statistic), for 3 copies per statistic
 * and replica (the save, as before, the pack, the unpack). Every float is
 * merged as before, in the same order: the same results. */
/* Copies between replica k's packed buffer buf and n consecutive parts of it
 * (part j: handle h[j], count[j] floats, named name[j]), into it (pack: the
 * first copy writes it whole, W, then RW) or out of it (unpack), on place
 * `place`. Without CUDA workers, one pack_slices / unpack_slices task per
 * HYFI_SLICES_GROUP parts (the same copies: ResNet-56 had 346 pack and 346 unpack
 * tasks a step for 2 replicas, each a task's cost for a few floats); with
 * them, or in a simulation (whose models know copy_slice), one copy_slice
 * task per part. Task names: the part's (the first of a group's), `what`
 * (".allreduce.pack", ".unpack", ...), the replica. */
static int emit_slices(hyfi_graph *g, program *P, hyfi_ref buf, int n, const hyfi_ref *h,
                       const size_t *count, const char *const *name, int unpack, const char *what,
                       int k, int place)
{
    const int prio = hyfi_clamp_prio(g->cc->pl->nticks + 1);
    const int group = hyfi_slices_grouped(g) ? HYFI_SLICES_GROUP : 1;
    char nm[128];
    size_t off = 0;
    for (int j = 0; j < n;) {
        const int m = n - j < group ? n - j : group;
        hyfi_task_args a = {.u.slice = {.count = count[j]}};
        if (unpack) a.u.slice.src_off = off;
        else a.u.slice.dst_off = off;
        snprintf(nm, sizeof nm, "%.40s%s%s.r%d", name[j], what, m > 1 ? "_n" : "", k);
        if (m == 1) {
            TASK(&hyfi_cl_copy_slice, nm, &a);
            if (unpack) W(h[j]), R(buf);
            else hyfi_prog_buf(P, buf, j ? STARPU_RW : STARPU_W), R(h[j]);
        } else {
            a.u.slice.count = 0; /* (each part's own) */
            TASK(unpack ? &hyfi_cl_unpack_slices : &hyfi_cl_pack_slices, nm, &a);
            if (!unpack) hyfi_prog_buf(P, buf, j ? STARPU_RW : STARPU_W);
            for (int i = j; i < j + m; i++) hyfi_prog_buf(P, h[i], unpack ? STARPU_W : STARPU_R);
            if (unpack) R(buf);
        }
        hyfi_on_place(g, P, place, prio);
        if (hyfi_collective_done(g, P)) return -1;
        for (int i = j; i < j + m; i++) off += count[i];
        j += m;
    }
    return 0;
}

/* Copies between each statistic of sg and replica k's packed buffer buf:
 * into it (pack) or out of it (unpack). */
static int stats_copy(hyfi_graph *g, program *P, const hyfi_sgroup *sg, int k, hyfi_ref buf,
                      int unpack, const char *what)
{
    const hyfi_plan *pl = g->cc->pl;
    hyfi_ref h[2 * HYFI_STATS_GROUP];
    size_t count[2 * HYFI_STATS_GROUP];
    const char *name[2 * HYFI_STATS_GROUP];
    if (sg->n > 2 * HYFI_STATS_GROUP) return -1;
    for (int j = 0; j < sg->n; j++) {
        const hyfi_tensor *t = sg->t[j];
        h[j] = TH(t, k), count[j] = t->numel, name[j] = t->name;
    }
    return emit_slices(g, P, buf, sg->n, h, count, name, unpack, what, k,
                       HYFI_PLACE(pl, k, pl->stage_place0[sg->stage]));
}

/* The merge tree of one running statistic (or a packed group of them) over
 * the replicas: val[0 .. R) the replicas' values (n floats each), save their
 * values at the step's start, a = 1 - momentum, on stage `stage`'s first place
 * of each replica; tasks named name.combine.rA.rB and name.copy.rB.rA. Up:
 * replica k merges block [k + d, k + 2d) into its own; down: the value copied
 * back along the same tree. */
static int emit_stats_tree(hyfi_graph *g, program *P, const char *name, hyfi_kfam val,
                           hyfi_kfam save, size_t n, double a, int stage)
{
    const hyfi_plan *pl = g->cc->pl;
    const unsigned char *want = g->cc->rep_want;
    const int R = pl->nrep, prio = hyfi_clamp_prio(pl->nticks + 1);
    int top = 1;
    while (top * 2 < R) top *= 2;
    char nm[96];
    for (int d = 1; d < R; d *= 2)
        for (int k = 0; k + d < R; k += 2 * d) {
            if (!want[k] && !want[k + d]) continue; /* concerns neither (share.c) */
            const int len = R - (k + d) < d ? R - (k + d) : d; /* block k + d */
            hyfi_task_args c = {.u.rcomb = {.count = n, .nrep = 2,
                                            .decay = pow(a, (double)pl->mbr * len)}};
            snprintf(nm, sizeof nm, "%.40s.combine.r%d.r%d", name, k, k + d);
            TASK(&hyfi_cl_running_combine, nm, &c);
            RW(KFH(g, val, k)), R(KFH(g, save, k)), R(KFH(g, val, k + d));
            hyfi_on_place(g, P, HYFI_PLACE(pl, k, pl->stage_place0[stage]), prio);
            if (hyfi_collective_done(g, P)) return -1;
        }
    for (int d = top; d >= 1; d /= 2)
        for (int k = 0; k + d < R; k += 2 * d) {
            if (!want[k] && !want[k + d]) continue;
            hyfi_task_args c = {.acc = 0, .u.elt.count = n};
            snprintf(nm, sizeof nm, "%.40s.copy.r%d.r%d", name, k + d, k);
            TASK(&hyfi_cl_accumulate, nm, &c);
            W(KFH(g, val, k + d)), R(KFH(g, val, k));
            hyfi_on_place(g, P, HYFI_PLACE(pl, k + d, pl->stage_place0[stage]), prio);
            if (hyfi_collective_done(g, P)) return -1;
        }
    return 0;
}

static int emit_stats_save_packed(hyfi_graph *g, program *P)
{
    const int R = g->cc->pl->nrep;
    for (int gi = 0; gi < g->cc->nsgroups; gi++) {
        const hyfi_sgroup *sg = &g->cc->sgroups[gi];
        for (int k = 0; k < R; k++)
            if (g->cc->rep_want[k] &&
                stats_copy(g, P, sg, k, hyfi_kref(g->cc, HK_SSAVE, (uint64_t)gi, (uint64_t)k), 0,
                           ".save"))
                return -1;
    }
    return 0;
}

static int emit_stats_combine_packed(hyfi_graph *g, program *P)
{
    const unsigned char *want = g->cc->rep_want;
    const int R = g->cc->pl->nrep;
    for (int gi = 0; gi < g->cc->nsgroups; gi++) {
        const hyfi_sgroup *sg = &g->cc->sgroups[gi];
        char name[48];
        snprintf(name, sizeof name, "running_stats.stage%d", sg->stage);
        const hyfi_kfam val = {HK_SVAL, (uint64_t)gi};
        for (int k = 0; k < R; k++)
            if (want[k] && stats_copy(g, P, sg, k, KFH(g, val, k), 0, ".pack")) return -1;
        if (emit_stats_tree(g, P, name, val, (hyfi_kfam){HK_SSAVE, (uint64_t)gi}, sg->numel, sg->a,
                            sg->stage))
            return -1;
        for (int k = 0; k < R; k++)
            if (want[k] && stats_copy(g, P, sg, k, KFH(g, val, k), 1, ".unpack")) return -1;
    }
    return 0;
}

int hyfi_emit_state_save(hyfi_graph *g, program *P)
{
    const hyfi_plan *pl = g->cc->pl;
    if (pl->nrep < 2) return 0;
    if (g->cc->sgroups) return emit_stats_save_packed(g, P);
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->kind != T_STATE) continue; /* (saved copies: not packed, below) */
        for (int k = 0; k < pl->nrep; k++) {
            if (!g->cc->rep_want[k]) continue;
            hyfi_task_args a = {.acc = 0, .u.elt.count = t->numel};
            char nm[64];
            snprintf(nm, sizeof nm, "%.44s.save.r%d", t->name, k);
            TASK(&hyfi_cl_accumulate, nm, &a);
            W(TK(t, HK_RSAVE, k)), R(TH(t, k));
            hyfi_on_place(g, P, HYFI_PLACE(pl, k, pl->stage_place0[t->stage]),
                          hyfi_clamp_prio(pl->nticks + 1));
            if (hyfi_collective_done(g, P)) return -1;
        }
    }
    return 0;
}

int hyfi_emit_state_combine(hyfi_graph *g, program *P)
{
    if (g->cc->pl->nrep < 2) return 0;
    if (g->cc->sgroups) return emit_stats_combine_packed(g, P);
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (!hyfi_op_batch_statistics(nd)) continue;
        for (int j = 2; j < 4; j++) {
            const hyfi_tensor *t = nd->p[j];
            if (emit_stats_tree(g, P, t->name, (hyfi_kfam){HK_VALUE, (uint64_t)t->id},
                                (hyfi_kfam){HK_RSAVE, (uint64_t)t->id}, t->numel,
                                1.0 - (double)nd->a.bn.momentum, t->stage))
                return -1;
        }
    }
    return 0;
}

/* All-reduce (sum) of every parameter gradient over the replicas, as tasks:
 * each replica's gradient is complete when its last micro-batch's backward
 * (and, on tiled stages, the sum over tiles) has run, and StarPU starts these
 * tasks then: the gradients of the last layers travel while the first layers
 * still run their backward. Every replica ends with the same floats.
 *   ring: gradient k split into R chunks C[k][c]; reduce-scatter: R-1 steps,
 *         replica k adds replica k-1's chunk (k-1-s) mod R into its own; then
 *         replica k holds chunk (k+1) mod R summed; all-gather: R-1 steps,
 *         replica k copies chunk (k-s) mod R from replica k-1; join.
 *   tree: binomial reduce into replica 0 (replica k adds k+d for d = 1, 2,
 *         4, ...), then the sum copied back down the same tree. */
/* One all-reduce of bucket bi over its replicas' packed gradients (n floats
 * each, on stage `stage`'s first place of every replica); with the ring over
 * its R x R chunks (HK_ARC), else by the tree. */
static int emit_allreduce_one(hyfi_graph *g, program *P, const char *name, int bi, int ring,
                              size_t n, int stage)
{
    const hyfi_plan *pl = g->cc->pl;
    const int R = pl->nrep, prio = hyfi_clamp_prio(pl->nticks + 1);
    const unsigned char *want = g->cc->rep_want;
    char nm[128];
#define DONE()                                                                             \
    do {                                                                                   \
        if (hyfi_collective_done(g, P)) return -1;                                         \
    } while (0)
#define RPLACE(k) HYFI_PLACE(pl, (k), pl->stage_place0[stage])
#define BH(k) hyfi_bucket_h(g, bi, (k))
    if (!ring) { /* tree */
        int top = 1;
        while (top * 2 < R) top *= 2;
        for (int d = 1; d < R; d *= 2)
            for (int k = 0; k + d < R; k += 2 * d) {
                if (!want[k] && !want[k + d]) continue;
                hyfi_task_args a = {.acc = 1, .u.elt.count = n};
                snprintf(nm, sizeof nm, "%.36s.allreduce.add.r%d.r%d", name, k, k + d);
                TASK(&hyfi_cl_accumulate, nm, &a);
                RW(BH(k)), R(BH(k + d));
                hyfi_on_place(g, P, RPLACE(k), prio);
                DONE();
            }
        for (int d = top; d >= 1; d /= 2)
            for (int k = 0; k + d < R; k += 2 * d) {
                if (!want[k] && !want[k + d]) continue;
                hyfi_task_args a = {.acc = 0, .u.elt.count = n};
                snprintf(nm, sizeof nm, "%.36s.allreduce.copy.r%d.r%d", name, k + d, k);
                TASK(&hyfi_cl_accumulate, nm, &a);
                W(BH(k + d)), R(BH(k));
                hyfi_on_place(g, P, RPLACE(k + d), prio);
                DONE();
            }
        return 0;
    }
#define CH(k, c) hyfi_kref(g->cc, HK_ARC, (uint64_t)bi, (uint64_t)(k)*R + (uint64_t)(c))
#define CN(c) (hyfi_chunk_lo(n, R, (c) + 1) - hyfi_chunk_lo(n, R, (c)))
    for (int k = 0; k < R; k++)
        for (int c = 0; c < R && want[k]; c++) {
            hyfi_task_args a = {.u.slice = {.count = CN(c), .src_off = hyfi_chunk_lo(n, R, c)}};
            snprintf(nm, sizeof nm, "%.36s.allreduce.split.r%d.c%d", name, k, c);
            TASK(&hyfi_cl_copy_slice, nm, &a);
            W(CH(k, c)), R(BH(k));
            hyfi_on_place(g, P, RPLACE(k), prio);
            DONE();
        }
    for (int st = 0; st < R - 1; st++)
        for (int k = 0; k < R; k++) {
            const int c = ((k - 1 - st) % R + R) % R, from = (k + R - 1) % R;
            if (!want[k] && !want[from]) continue;
            hyfi_task_args a = {.acc = 1, .u.elt.count = CN(c)};
            snprintf(nm, sizeof nm, "%.36s.allreduce.rs%d.r%d.c%d", name, st, k, c);
            TASK(&hyfi_cl_accumulate, nm, &a);
            RW(CH(k, c)), R(CH(from, c));
            hyfi_on_place(g, P, RPLACE(k), prio);
            DONE();
        }
    for (int st = 0; st < R - 1; st++)
        for (int k = 0; k < R; k++) {
            const int c = ((k - st) % R + R) % R, from = (k + R - 1) % R;
            if (!want[k] && !want[from]) continue;
            hyfi_task_args a = {.acc = 0, .u.elt.count = CN(c)};
            snprintf(nm, sizeof nm, "%.36s.allreduce.ag%d.r%d.c%d", name, st, k, c);
            TASK(&hyfi_cl_accumulate, nm, &a);
            W(CH(k, c)), R(CH(from, c));
            hyfi_on_place(g, P, RPLACE(k), prio);
            DONE();
        }
    for (int k = 0; k < R; k++)
        for (int c = 0; c < R && want[k]; c++) {
            hyfi_task_args a = {.u.slice = {.count = CN(c), .dst_off = hyfi_chunk_lo(n, R, c)}};
            snprintf(nm, sizeof nm, "%.36s.allreduce.join.r%d.c%d", name, k, c);
            TASK(&hyfi_cl_copy_slice, nm, &a);
            RW(BH(k)), R(CH(k, c));
            hyfi_on_place(g, P, RPLACE(k), prio);
            DONE();
        }
#undef CN
#undef CH
#undef BH
#undef RPLACE
#undef DONE
    return 0;
}

/* Gradients travel in buckets: the parameters of one stage, in the order the
 * backward completes them (last layers first), packed into one handle per
 * replica up to the bucket size, so that a few large messages replace many
 * small ones (batch-norm parameters are tens of floats). A bucket is packed as
 * its gradients complete (a chain of slice copies), all-reduced, and unpacked.
 * A bucket of one parameter is all-reduced in place. */
int hyfi_emit_allreduce(hyfi_graph *g, program *P)
{
    const hyfi_plan *pl = g->cc->pl;
    const int R = pl->nrep;
    if (R < 2) return 0;
    const unsigned char *want = g->cc->rep_want; /* share.c */
    /* a bucket's parts: their handles (of one replica), counts and names */
    hyfi_ref *ph = malloc((size_t)g->nparams * sizeof *ph);
    size_t *pc = malloc((size_t)g->nparams * sizeof *pc);
    const char **pn = malloc((size_t)g->nparams * sizeof *pn);
    int bad = !ph || !pc || !pn;
    for (int bi = 0; bi < g->cc->nbuckets && !bad; bi++) {
        hyfi_bucket *b = &g->cc->buckets[bi];
        char bname[HYFI_NAME_MAX];
        hyfi_bucket_name(b, bi, bname, sizeof bname);
        /* pack (and, after the all-reduce, unpack) */
        for (int j = 0; j < b->nparams; j++) pc[j] = b->params[j]->numel, pn[j] = b->params[j]->name;
        for (int k = 0; b->nparams > 1 && k < R && !bad; k++) {
            if (!want[k]) continue;
            for (int j = 0; j < b->nparams; j++) ph[j] = TGH(b->params[j], k);
            bad = emit_slices(g, P, hyfi_bucket_h(g, bi, k), b->nparams, ph, pc, pn, 0,
                              ".allreduce.pack", k, HYFI_PLACE(pl, k, pl->stage_place0[b->stage]));
        }
        bad = bad || emit_allreduce_one(g, P, bname, bi, b->ring, b->numel, b->stage);
        for (int k = 0; b->nparams > 1 && k < R && !bad; k++) {
            if (!want[k]) continue;
            for (int j = 0; j < b->nparams; j++) ph[j] = TGH(b->params[j], k);
            bad =
                emit_slices(g, P, hyfi_bucket_h(g, bi, k), b->nparams, ph, pc, pn, 1,
                            ".allreduce.unpack", k, HYFI_PLACE(pl, k, pl->stage_place0[b->stage]));
        }
    }
    free(ph), free(pc), free(pn);
    return bad ? -1 : 0;
}

/* Parameters per SGD task without CUDA workers (4 buffers each, within
 * HYFI_MAX_TASK_BUFFERS) */
#define SGD_GROUP 16

/* The SGD update of every parameter that received a gradient, per replica on
 * its stage's place. */
int hyfi_emit_sgd(hyfi_graph *g, program *P)
{
    const hyfi_plan *pl = g->cc->pl;
    /* Without CUDA workers, consecutive parameters of a stage share a task
     * (hyfi_cl_sgd_update_n, SGD_GROUP at most): the same updates, fewer tasks.
     * Not in a simulation, whose sampled performance models know sgd_update. */
    const int group = g->ctx->ncuda > 0 || HYFI_SIMULATION ? 1 : SGD_GROUP;
    for (int k = 0; k < pl->nrep; k++)
        for (int i = 0; i < g->nparams && g->cc->rep_mine[k];) {
            hyfi_tensor *p = g->params[i];
            if (!p->gwritten) { /* not on the loss's path: left alone, as PyTorch does */
                i++;
                continue;
            }
            int n = 1, end = i + 1;
            while (n < group && end < g->nparams &&
                   (!g->params[end]->gwritten || g->params[end]->stage == p->stage)) {
                n += g->params[end]->gwritten;
                end++;
            }
            hyfi_task_args a = {.u.sgd = {.count = p->numel, .lr = g->train.lr,
                                          .momentum = g->train.momentum,
                                          .weight_decay = g->train.weight_decay}};
            char nm[128];
            const char *sfx = n > 1 ? "sgd_n" : "sgd";
            if (pl->nrep > 1) snprintf(nm, sizeof nm, "%.40s.%s.r%d", p->name, sfx, k);
            else snprintf(nm, sizeof nm, "%.50s.%s", p->name, sfx);
            TASK(n > 1 ? &hyfi_cl_sgd_update_n : &hyfi_cl_sgd_update, nm, &a);
            for (int j = i; j < end; j++) {
                hyfi_tensor *q = g->params[j];
                if (!q->gwritten) continue;
                RW(TH(q, k)), RW(TK(q, HK_MOMENTUM, k));
                W(TK(q, HK_NORMS, k)), R(TGH(q, k));
            }
            hyfi_on_place(g, P, HYFI_PLACE(pl, k, pl->stage_place0[p->stage]), 0);
            i = end;
        }
    return 0;
}

/* Sources of one health task at most: a task per HEALTH_CHUNK parameters
 * instead of one per parameter (ResNet-50: 6 instead of 161 per step). */
#define HEALTH_CHUNK 32

/* The step's health: each rank adds up the SGD norms of its parameters
 * (replica 0; the replicas' updates are the same) in parameter order, on the
 * parameters' places, by accumulate_n tasks over runs of up to HEALTH_CHUNK
 * parameters of one place (the floats of a chain of accumulates); the first
 * rank with parameters adds the other ranks' sums and sends the total to
 * every rank, which reads it after the step (hyfi_train_step): 2 floats per
 * rank cross the network. */
/* Rank r's health sums (HK_HEALTH). */
#define HEALTH(r) hyfi_kref(g->cc, HK_HEALTH, 0, (uint64_t)(r))
int hyfi_emit_health(hyfi_graph *g, program *P)
{
    const hyfi_plan *pl = g->cc->pl;
    int root = -1, root_place = -1;
    for (int r = 0; r < g->cc->nhealth; r++) {
        int first = 1;
        for (int i = 0; i < g->nparams;) {
            hyfi_tensor *p = g->params[i];
            if (!p->gwritten || hyfi_trank(g, p, 0) != r) {
                i++;
                continue;
            }
            /* the run: parameters i.. of rank r on p's place, in order */
            const int place = pl->stage_place0[p->stage];
            hyfi_tensor *src[HEALTH_CHUNK];
            int n = 0;
            for (; i < g->nparams && n < HEALTH_CHUNK; i++) {
                hyfi_tensor *q = g->params[i];
                if (!q->gwritten || hyfi_trank(g, q, 0) != r) continue;
                if (pl->stage_place0[q->stage] != place) break;
                src[n++] = q;
            }
            hyfi_task_args a = {.acc = !first, .u.elt = {.count = 2, .nsrc = n}};
            char nm[96];
            snprintf(nm, sizeof nm, "health.%.50s", p->name);
            TASK(&hyfi_cl_accumulate_n, nm, &a);
            hyfi_prog_buf(P, HEALTH(r), first ? STARPU_W : STARPU_RW);
            for (int k = 0; k < n; k++) R(TK(src[k], HK_NORMS, 0));
            hyfi_on_place(g, P, place, 0);
            if (hyfi_collective_done(g, P)) return -1;
            if (first && root < 0) root = r, root_place = place;
            first = 0;
        }
        if (first || r == root) continue;
        /* rank r's sum complete: into the root's (ranks in order) */
        hyfi_task_args a = {.acc = 1, .u.elt.count = 2};
        char nm[48];
        snprintf(nm, sizeof nm, "health.rank%d", r);
        TASK(&hyfi_cl_accumulate, nm, &a);
        RW(HEALTH(root)), R(HEALTH(r));
        hyfi_on_place(g, P, root_place, 0);
        if (hyfi_collective_done(g, P)) return -1;
    }
    g->cc->health_root = root < 0 ? 0 : root;
    if (root < 0) return 0; /* no parameter is trained */
    if (g->ctx->nranks > 1) {
        if (hyfi_prog_push(P, PT_BCAST, NULL, "health.bcast", NULL)) return -1;
        P->t[P->n - 1].rank = root;
        hyfi_prog_buf(P, HEALTH(root), STARPU_R);
    }
    return 0;
}
