/* The registrar's enumeration: every key of a compiled graph's plan, in one
 * pass and a fixed order, registered through hyfi_reg (engine/keyed.c), which
 * decides from the key alone whether this rank registers it, its tag and its
 * entry in the handle table:
 *   - each tensor's values (per micro-batch, or per replica for parameters
 *     and state), gradients, momentum and health sums; the partial gradients
 *     of activations consumed by other stages; the replicas' saved running
 *     statistics; the health sums per rank; the backward's seed; 1F1B tokens;
 *   - spatial parallelism: the tiles of tiled tensors, a tiled node's
 *     assembled input, halo strips, per-tile weight-gradient parts and
 *     batch-norm statistics parts and packets, fused-halo groups' regions;
 *   - re-materialisation: the places' fences and the re-run batch norms'
 *     scratch statistics;
 *   - the step's end (buckets.c): the packed statistics' groups, the
 *     all-reduce's buckets and ring chunks;
 * then the release index (handles.c). Nothing here keeps a handle: the
 * lowerings find each piece again by its key (keyed.h).
 *
 * Memory: inputs, labels, parameters, state and momentum live in host memory
 * that StarPU manages (starpu_malloc_flags, pinned when there are GPUs);
 * activations, gradients and saved tensors are registered without a home and
 * allocated by StarPU wherever a task needs them. */
#include "spatial_impl.h"

#include <starpu_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Simulation: what StarPU allocates in main memory by itself (copies of
 * data registered without a home, StarPU-MPI's receive buffers) is folded
 * too; without this each simulated rank held about what the real rank holds.
 * Called before the first registration (the flags apply to later
 * allocations). */
static void fold_starpu_ram(void)
{
#ifdef STARPU_SIMGRID
    for (unsigned nd = 0; nd < starpu_memory_nodes_get_count(); nd++)
        if (starpu_node_get_kind(nd) == STARPU_CPU_RAM)
            starpu_malloc_on_node_set_default_flags(nd, STARPU_MALLOC_PINNED | STARPU_MALLOC_COUNT |
                                                            STARPU_MALLOC_SIMULATION_FOLDED);
#endif
}

/* Register every tensor; allocate and initialise what lives in host memory. */
static hyfi_status register_tensors(hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    const int M = pl->nmb, me = g->ctx->rank, NR = pl->nrep;
    fold_starpu_ram();
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        const int per_mb =
            t->kind == T_INPUT || t->kind == T_LABELS || t->kind == T_ACT || t->kind == T_SAVED;
        t->nh = per_mb ? M : NR;
        t->mb_numel = per_mb && t->batched ? t->numel / (size_t)M : t->numel;
        /* A StarPU vector holds at most 2^32-1 elements. A tensor that lives in its
         * tiles only (no untiled op reads it) is used through its tiles' handles; one
         * whose whole micro-batch is above that (ResNet-50's conv1 at 32,768²: 2^34)
         * gets no whole-tensor handles, and its tiles are held to the limit instead. */
        const int tiles_only = t->tl && !t->tl->full;
        const int no_whole = tiles_only && t->mb_numel > UINT32_MAX;
        size_t too_big = no_whole ? 0 : t->mb_numel;
        for (int q = 0; no_whole && q < pl->P; q++)
            if (hyfi_tile_numel(t, q) > too_big) too_big = hyfi_tile_numel(t, q);
        if (too_big > UINT32_MAX)
            return hyfi_graph_fail(g, HYFI_ERR_SHAPE,
                                   "tensor \"%s\" has %zu elements per "
                                   "micro-batch%s; at most 2^32-1 per tensor "
                                   "(use more --parts, spatial parallelism or "
                                   "a smaller batch)",
                                   t->name, too_big, no_whole ? " in a tile" : "");
        /* this rank owns some handle of t; of a parameter or state, nown replicas' */
        int nown = 0;
        for (int k = 0; k < NR; k++) nown += hyfi_trank(g, t, k) == me;
        int own = nown > 0;
        const size_t elem = t->is_int ? sizeof(int32_t) : sizeof(float);
        const int rs = hyfi_release_stage(g, t);
        switch (t->kind) {
        case T_INPUT:
        case T_LABELS:
            /* a tiled input that no untiled op reads lives in its tiles only: no host
             * copy of the whole batch (16,384^2 RGB is 3 GiB an image) */
            if (t->tl && !t->tl->full) own = 0;
            /* host memory for the micro-batches this rank owns only, not the
             * whole global batch */
            t->nhost = 0;
            for (int m = 0; own && m < M; m++) t->nhost += hyfi_handle_owner(g, t, m) == me;
            if (t->nhost) {
                const size_t n = (size_t)t->nhost * t->mb_numel;
                if (hyfi_host_alloc(&t->host, n)) goto oom;
                memset(t->host, 0, n * 4);
            }
            for (int m = 0, j = 0; m < M && !no_whole; m++) {
                const int r = hyfi_handle_owner(g, t, m), mine = t->nhost && r == me;
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, m, HYFI_REP(pl, m)),
                         mine ? t->host + (size_t)j * t->mb_numel : NULL, t->mb_numel, elem, r,
                         hyfi_tensor_hflags(g, t, -1), HYFI_KEEP, t->name, "", m, M);
                j += mine;
            }
            if (!t->is_int) {
                for (int m = 0; m < M && !no_whole; m++) {
                    hyfi_reg(g, HYFI_KEY_R(HK_GRAD, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                             elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hflags(g, t, -1),
                             HYFI_KEEP, t->name, ".grad", m, M);
                }
            }
            break;
        case T_PARAM:
            /* one copy per replica, all initialised alike */
            /* host memory for the replicas this rank owns only (the others' copies
             * come from their ranks): memory and initialisation per rank do not
             * grow with the data-parallel groups */
            t->nhost = nown;
            if (own) {
                const size_t n = (size_t)nown * t->numel;
                if (hyfi_host_alloc(&t->host, n) || hyfi_host_alloc(&t->ghost, n) ||
                    hyfi_host_alloc(&t->mhost, n))
                    goto oom;
                for (int j = 0; j < nown; j++) {
                    hyfi_param_init(t->host + (size_t)j * t->numel, t, g->seed);
                    /* drawn in OIHW order: the same values in either layout */
                    if (hyfi_layout_convert(t, t->host + (size_t)j * t->numel, 0)) goto oom;
                }
                memset(t->ghost, 0, n * 4);
                memset(t->mhost, 0, n * 4);
            }
            for (int k = 0, j = 0; k < NR; k++) {
                const int r = hyfi_trank(g, t, k);
                const size_t o = (size_t)j * t->numel;
                const int mine = r == me;
                j += mine;
                /* only the replica's own tasks and the reads of replica 0
                 * (hyfi_tensor_read, checkpoints, health) touch these; the
                 * all-reduce's partners read a gradient where it is a bucket
                 * of its own, registered there (reduce.c) */
                const hyfi_ref gh =
                    hyfi_reg(g, HYFI_KEY_R(HK_GRAD, t->id, k, k), mine ? t->ghost + o : NULL,
                             t->numel, elem, r, HC_ALLREDUCE, HYFI_KEEP, t->name, ".grad", k, NR);
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, k, k), mine ? t->host + o : NULL, t->numel,
                         elem, r, HC_ALLREDUCE, HYFI_KEEP, t->name, "", k, NR);
                hyfi_reg(g, HYFI_KEY_R(HK_MOMENTUM, t->id, k, k), mine ? t->mhost + o : NULL,
                         t->numel, elem, r, HC_ALLREDUCE, HYFI_KEEP, t->name, ".momentum", k, NR);
                hyfi_reg(g, HYFI_KEY_R(HK_NORMS, t->id, k, k), NULL, 2, sizeof(float), r,
                         HC_ALLREDUCE, HYFI_KEEP, t->name, ".norms", k, NR);
                /* Summed over micro-batches by a StarPU reduction. */
                if (pl->mbr > 1 && !g->plan_cfg.deterministic) hyfi_handle_set_redux(g, gh);
            }
            break;
        case T_STATE:
            t->nhost = nown;
            if (own) {
                if (hyfi_host_alloc(&t->host, (size_t)nown * t->numel)) goto oom;
                for (int j = 0; j < nown; j++)
                    hyfi_param_init(t->host + (size_t)j * t->numel, t, g->seed);
            }
            for (int k = 0, j = 0; k < NR; k++) {
                const int r = hyfi_trank(g, t, k), mine = r == me;
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, k, k),
                         mine ? t->host + (size_t)j * t->numel : NULL, t->numel, elem, r,
                         HC_ALLREDUCE, HYFI_KEEP, t->name, "", k, NR);
                j += mine;
            }
            break;
        case T_ACT:
            /* the loss too: its owner reads it, the ranks sum (loss_value) */
            for (int m = 0; m < M && !no_whole; m++) {
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                         elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hflags(g, t, -1), rs,
                         t->name, "", m, M);
            }
            if (t != g->loss) {
                for (int m = 0; m < M && !no_whole; m++) {
                    hyfi_reg(g, HYFI_KEY_R(HK_GRAD, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                             elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hflags(g, t, -1), rs,
                             t->name, ".grad", m, M);
                }
            }
            break;
        case T_SAVED:
            for (int m = 0; m < M && !no_whole; m++) {
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                         elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hcat(g, t), rs, t->name, "",
                         m, M);
            }
            break;
        }
    }
    /* Partial gradients of activations consumed by other stages. */
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        for (int k = 0; k < nd->nin; k++) {
            hyfi_tensor *t = nd->in[k];
            if (t->kind != T_ACT || !t->requires_grad || nd->stage == t->stage) continue;
            t->gparts = 1;
            int done = 0; /* by an earlier consumer on this stage (scoped: some m is) */
            for (int m = 0; m < M && !done; m++)
                done =
                    hyfi_kent(g->cc, HK_PARTIAL, (uint64_t)t->id, (uint64_t)nd->stage * M + m) >= 0;
            if (done) continue;
            char sfx[32];
            snprintf(sfx, sizeof sfx, ".grad.stage%d", nd->stage);
            for (int m = 0; m < M; m++) {
                hyfi_reg(
                    g, HYFI_KEY_R(HK_PARTIAL, t->id, (size_t)nd->stage * M + m, HYFI_REP(pl, m)),
                    NULL, t->mb_numel, sizeof(float),
                    hyfi_stage_rank(pl, HYFI_REP(pl, m), nd->stage), hyfi_tensor_hflags(g, t, -1),
                    hyfi_release_stage(g, t), t->name, sfx, m, M);
            }
        }
    }
    /* Replicas: saved running statistics (packed instead: reduce.c,
     * hyfi_stats_register). */
    for (int i = 0; NR > 1 && !hyfi_stats_packed(g) && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->kind != T_STATE) continue;
        for (int k = 0; k < NR; k++) {
            hyfi_reg(g, HYFI_KEY_R(HK_RSAVE, t->id, k, k), NULL, t->numel, sizeof(float),
                     hyfi_trank(g, t, k), HC_ALLREDUCE, HYFI_KEEP, t->name, ".start", k, NR);
        }
    }
    /* The health sums of a step: one per rank that holds a parameter of
     * replica 0 (reduce.c adds up replica 0's norms), on every rank (the
     * first one's is broadcast); none for the other ranks, so that their
     * number does not grow with the replicas. */
    g->cc->nhealth = g->ctx->nranks;
    unsigned char *hrank = calloc((size_t)g->cc->nhealth, 1);
    if (!hrank) goto oom;
    for (int i = 0; i < g->nparams; i++) {
        const int r = hyfi_trank(g, g->params[i], 0);
        if (r >= 0 && r < g->cc->nhealth) hrank[r] = 1;
    }
    for (int r = 0; r < g->cc->nhealth; r++)
        if (hrank[r])
            hyfi_reg(g, HYFI_KEY(HK_HEALTH, 0, r), NULL, 2, sizeof(float), r, HC_PIPELINE,
                     HYFI_KEEP, "health", "", r, g->cc->nhealth);
    free(hrank);
    /* The seed of the backward: d(mean over the batch)/d(micro-batch loss) = 1/M. */
    if (hyfi_host_alloc(&g->cc->dloss_host, (size_t)M)) goto oom;
    g->cc->loss_sum = malloc(2 * (size_t)M * sizeof *g->cc->loss_sum);
    if (!g->cc->loss_sum) goto oom;
    for (int m = 0; m < M; m++) {
        g->cc->dloss_host[m] = 1.0f / (float)M;
        hyfi_reg(g, HYFI_KEY_R(HK_DLOSS, 0, m, HYFI_REP(pl, m)), g->cc->dloss_host + m, 1,
                 sizeof(float), hyfi_handle_owner(g, g->loss, m), HC_LOSS, HYFI_KEEP, g->loss->name,
                 ".grad", m, M);
    }
    /* 1F1B: per stage, one token per activation slot (compile.c: the event loop of build_train and
     * its token buffers). */
    if (pl->schedule == HYFI_SCHEDULE_1F1B && pl->mbr > 1) {
        for (int q = 0; q < pl->nplaces; q++) g->cc->ntokens += pl->inflight[pl->place_stage[q]];
        if (hyfi_host_alloc(&g->cc->token_host, (size_t)g->cc->ntokens)) goto oom;
        memset(g->cc->token_host, 0, (size_t)g->cc->ntokens * sizeof(float));
        for (int q = 0, k = 0; q < pl->nplaces; q++)
            for (int j = 0; j < pl->inflight[pl->place_stage[q]]; j++, k++) {
                char nm[48];
                snprintf(nm, sizeof nm, "place%d.token", q);
                hyfi_reg(g, HYFI_KEY_R(HK_TOKEN, 0, k, q / pl->nplaces1), g->cc->token_host + k, 1,
                         sizeof(float), pl->place_rank[q], HC_PIPELINE, HYFI_KEEP, nm, "", j, 2);
            }
    }
    return HYFI_OK;
oom:
    return hyfi_graph_fail(g, HYFI_ERR_NOMEM,
                           "out of host memory registering the tensors "
                           "(%d tensors); use a smaller batch or model",
                           g->ntensors);
}

static int fused_register(hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    const int M = pl->nmb, P = pl->P, R = pl->nrep;
    char sfx[48];
    for (int i = 0; i < g->nnodes; i++) {
        const hyfi_tnode *tn0 = g->nodes[i].tn;
        if (!tn0 || !tn0->fg || tn0->fg_pos != 0) continue;
        hyfi_fgroup *fg = tn0->fg;
        for (int j = 0; j < fg->n; j++) {
            const node *nd = fg->op[j];
            const int n = nd->out->dims[0] / M, Co = nd->out->dims[1], Ci = nd->in[0]->dims[1];
            if (hyfi_op_batch_statistics(nd)) {
                /* one per replica, on its stage's rank: the readers' replica */
                fg->ztot_n[j] = 2 * (size_t)Co * R;
                if (hyfi_host_alloc(&fg->ztot_host[j], fg->ztot_n[j])) return -1;
                memset(fg->ztot_host[j], 0, fg->ztot_n[j] * sizeof(float));
                for (int r = 0; r < R; r++) {
                    hyfi_reg(g, HYFI_KEY_R(HK_F_ZTOT, i, (size_t)j * R + r, r),
                             fg->ztot_host[j] + 2 * (size_t)Co * r, 2 * (size_t)Co, sizeof(float),
                             hyfi_stage_rank(pl, r, nd->stage), HC_BNSTATS, HYFI_KEEP, nd->name,
                             ".zero_dstats", r, R);
                }
            }
            for (int m = 0; m < M; m++)
                for (int q = 0; q < P; q++) {
                    const size_t k = ((size_t)j * M + m) * P + q;
                    const int rq = hyfi_tile_rank(g, nd->out->tl, q, HYFI_REP(pl, m));
                    const size_t on = (size_t)n * Co * fg_rows(fg, j, q) * fg_cols(fg, j, q);
                    /* a region of op j's, of tile q and micro-batch m (FGREG) */
#define FGREG(role, n_, t_, fmt)                                                           \
    do {                                                                                   \
        snprintf(sfx, sizeof sfx, fmt, q);                                                 \
        hyfi_reg(g, HYFI_KEY_R(role, i, k, HYFI_REP(pl, m)), NULL, (n_), sizeof(float), rq,  \
                 hyfi_tensor_hflags(g, (t_), HC_PIPELINE), fg->op[0]->stage, nd->name, sfx,  \
                 m, M);                                                                    \
    } while (0)
                    if (j < fg->n - 1) {
                        FGREG(HK_F_VAL, on, nd->out, ".ext.tile%d");
                        FGREG(HK_F_GRAD, on, nd->out, ".ext.tile%d.grad");
                    }
                    if (fg_padded(fg, j, q)) {
                        const size_t pn = (size_t)n * Ci *
                                          (fg_rows(fg, j - 1, q) + fg->pt[j][q] + fg->pb[j][q]) *
                                          (fg_cols(fg, j - 1, q) + fg->pl[j][q] + fg->pr[j][q]);
                        FGREG(HK_F_PBUF, pn, nd->in[0], ".in.tile%d");
                        FGREG(HK_F_DPBUF, pn, nd->in[0], ".in.tile%d.grad");
                    }
                    if (hyfi_op_batch_statistics(nd) && fg_bn_extended(fg, j, q)) {
                        const size_t own = hyfi_tile_numel(nd->out, q);
                        FGREG(HK_F_XO, own, nd->out, ".own_x.tile%d");
                        FGREG(HK_F_DYO, own, nd->out, ".own_dy.tile%d");
                        FGREG(HK_F_DXO, own, nd->out, ".own_dx.tile%d");
                    }
#undef FGREG
                }
        }
    }
    return 0;
}

/* The tiles, tiled nodes' buffers, strips and partial sums, fused groups. */
static int spatial_register(hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    if (pl->K == 0) return 0;
    const int M = pl->nmb, P = pl->P;
    char sfx[48];
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        hyfi_tiles *tl = t->tl;
        if (!tl) continue;
        const int trs = hyfi_tiles_release_stage(t);
        for (int m = 0; m < M; m++)
            for (int q = 0; q < P; q++) {
                const size_t n = hyfi_tile_numel(t, q);
                snprintf(sfx, sizeof sfx, ".tile%d", q);
                hyfi_reg(g, HYFI_KEY_R(HK_TILE, t->id, m * P + q, HYFI_REP(pl, m)), NULL, n,
                         sizeof(float), hyfi_tile_rank(g, tl, q, HYFI_REP(pl, m)),
                         hyfi_tensor_hflags(g, t, -1), trs, t->name, sfx, m, M);
                if (t->kind == T_ACT && t->requires_grad) {
                    snprintf(sfx, sizeof sfx, ".tile%d.grad", q);
                    hyfi_reg(g, HYFI_KEY_R(HK_TILE_GRAD, t->id, m * P + q, HYFI_REP(pl, m)), NULL,
                             n, sizeof(float), hyfi_tile_rank(g, tl, q, HYFI_REP(pl, m)),
                             hyfi_tensor_hflags(g, t, -1), trs, t->name, sfx, m, M);
                }
            }
    }
    for (int i = 0; i < g->nnodes; i++) {
        node *nd = &g->nodes[i];
        hyfi_tnode *tn = nd->tn;
        if (!tn) continue;
        const hyfi_tensor *x = nd->in[0];
        const int n = x->dims[0] / M, C = x->dims[1];
        if (tn->windowed) {
            for (int m = 0; m < M; m++)
                for (int q = 0; q < P; q++) {
                    const int rq = hyfi_tile_rank(g, x->tl, q, HYFI_REP(pl, m));
                    if (!tn->use_buf[q]) continue;
                    const size_t bn = (size_t)n * C * tn->buf_h[q] * tn->buf_w[q];
                    snprintf(sfx, sizeof sfx, ".in.tile%d", q);
                    hyfi_reg(g, HYFI_KEY_R(HK_TBUF, i, m * P + q, HYFI_REP(pl, m)), NULL, bn,
                             sizeof(float), rq, hyfi_tensor_hflags(g, x, HC_PIPELINE), nd->stage,
                             nd->name, sfx, m, M);
                    if (x->requires_grad) {
                        snprintf(sfx, sizeof sfx, ".in.tile%d.grad", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_TDBUF, i, m * P + q, HYFI_REP(pl, m)), NULL, bn,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, x, HC_PIPELINE),
                                 nd->stage, nd->name, sfx, m, M);
                    }
                    for (int k = 1; k < tn->npieces[q]; k++) {
                        const hyfi_piece *p = &tn->piece[q][k];
                        const int ru = hyfi_tile_rank(g, x->tl, tn->from[q][k], HYFI_REP(pl, m));
                        const size_t sn = (size_t)n * C * p->h * p->w;
                        const size_t j = ((size_t)m * P + q) * NP + k;
                        snprintf(sfx, sizeof sfx, ".halo%d_%d", tn->from[q][k], q);
                        hyfi_reg(g, HYFI_KEY_R(HK_STRIP, i, j, HYFI_REP(pl, m)), NULL, sn,
                                 sizeof(float), ru, hyfi_tensor_hflags(g, x, HC_HALO), nd->stage,
                                 nd->name, sfx, m, M);
                        if (x->requires_grad) {
                            snprintf(sfx, sizeof sfx, ".halo%d_%d.grad", tn->from[q][k], q);
                            hyfi_reg(g, HYFI_KEY_R(HK_DSTRIP, i, j, HYFI_REP(pl, m)), NULL, sn,
                                     sizeof(float), rq, hyfi_tensor_hflags(g, x, HC_HALO),
                                     nd->stage, nd->name, sfx, m, M);
                        }
                    }
                }
            if (hyfi_op_sums_weights_over_tiles(nd)) {
                const int NR = pl->nrep;
                for (int k = 0; k < P * NR; k++) {
                    const int q = k % P, rq = hyfi_tile_rank(g, nd->out->tl, q, k / P);
                    if (NR > 1) snprintf(sfx, sizeof sfx, ".grad.r%d.tile%d", k / P, q);
                    else snprintf(sfx, sizeof sfx, ".grad.tile%d", q);
                    hyfi_ref wp = hyfi_reg(g, HYFI_KEY_R(HK_WPART, i, k, k / P), NULL,
                                           nd->p[0]->numel, sizeof(float), rq, HC_ALLREDUCE,
                                           HYFI_KEEP, nd->p[0]->name, sfx, 0, 1),
                             bp = 0;
                    if (nd->p[1])
                        bp = hyfi_reg(g, HYFI_KEY_R(HK_BPART, i, k, k / P), NULL, nd->p[1]->numel,
                                      sizeof(float), rq, HC_ALLREDUCE, HYFI_KEEP, nd->p[1]->name,
                                      sfx, 0, 1);
                    if (pl->mbr > 1 && !g->plan_cfg.deterministic && wp) {
                        hyfi_handle_set_redux(g, wp);
                        if (nd->p[1]) hyfi_handle_set_redux(g, bp);
                    }
                }
            }
        } else if (hyfi_op_batch_statistics(nd)) {
            for (int m = 0; m < M; m++) {
                int len[HYFI_MAX_TILES];
                hyfi_sp_bn_packets(g, x, HYFI_REP(pl, m), len);
                for (int q = 0; q < P; q++) {
                    if (len[q] > 1) { /* 2C doubles a tile */
                        const int rq = hyfi_tile_rank(g, x->tl, q, HYFI_REP(pl, m));
                        const size_t pn = 4 * (size_t)C * (size_t)len[q];
                        snprintf(sfx, sizeof sfx, ".stats.pack%d", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_BN_PACK, i, m * P + q, HYFI_REP(pl, m)), NULL, pn,
                                 sizeof(float), rq, HC_BNSTATS, nd->stage, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".dstats.pack%d", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_BN_BWPACK, i, m * P + q, HYFI_REP(pl, m)), NULL,
                                 pn, sizeof(float), rq, HC_BNSTATS, nd->stage, nd->name, sfx, m, M);
                    }
                    const int rq = hyfi_tile_rank(g, x->tl, q, HYFI_REP(pl, m));
                    snprintf(sfx, sizeof sfx, ".stats.tile%d", q);
                    /* 2C doubles */
                    hyfi_reg(g, HYFI_KEY_R(HK_BN_PART, i, m * P + q, HYFI_REP(pl, m)), NULL,
                             4 * (size_t)C, sizeof(float), rq, HC_BNSTATS, nd->stage, nd->name, sfx,
                             m, M);
                    snprintf(sfx, sizeof sfx, ".dstats.tile%d", q);
                    hyfi_reg(g, HYFI_KEY_R(HK_BN_BWPART, i, m * P + q, HYFI_REP(pl, m)), NULL,
                             4 * (size_t)C, sizeof(float), rq, HC_BNSTATS, nd->stage, nd->name, sfx,
                             m, M);
                }
                hyfi_reg(g, HYFI_KEY_R(HK_BN_TOT, i, m, HYFI_REP(pl, m)), NULL, 2 * (size_t)C,
                         sizeof(float), hyfi_stage_rank(pl, HYFI_REP(pl, m), nd->stage), HC_BNSTATS,
                         nd->stage, nd->name, ".dstats", m, M);
            }
        }
    }
    return fused_register(g);
}

/* Re-materialisation: the places' fences (without 1F1B tokens) and the
 * scratch statistics of the untiled batch norms that are re-run
 * (key HK_RC_BN), one set per replica on its place. */
static int register_recompute(hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    if (!pl->recompute) return 0;
    if (!g->cc->ntokens) {
        if (hyfi_host_alloc(&g->cc->rc_fence_host, (size_t)pl->nplaces)) return -1;
        memset(g->cc->rc_fence_host, 0, (size_t)pl->nplaces * sizeof(float));
        for (int q = 0; q < pl->nplaces; q++) {
            char nm[48];
            snprintf(nm, sizeof nm, "place%d.recompute_fence", q);
            hyfi_reg(g, HYFI_KEY_R(HK_RC_FENCE, 0, q, q / pl->nplaces1), g->cc->rc_fence_host + q,
                     1, sizeof(float), pl->place_rank[q], HC_PIPELINE, HYFI_KEEP, nm, "", 0, 1);
        }
    }
    static const char *const sfx[4] = {".rerun_mean", ".rerun_var", ".rerun_rmean", ".rerun_rvar"};
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (!pl->rc_rerun[i] || !hyfi_op_batch_statistics(nd) || hyfi_spatial_tiled(g, nd))
            continue;
        for (int r = 0; r < pl->nrep; r++)
            for (int k = 0; k < 4; k++) {
                hyfi_reg(g, HYFI_KEY_R(HK_RC_BN, i, (size_t)r * 4 + k, r), NULL,
                         (size_t)nd->out->dims[1], sizeof(float), hyfi_stage_rank(pl, r, nd->stage),
                         HC_BNSTATS, HYFI_KEEP, nd->name, sfx[k], r, pl->nrep);
            }
    }
    return g->cc->htab_oom ? -1 : 0;
}

hyfi_status hyfi_register_plan(hyfi_graph *g, int *key_failed)
{
    *key_failed = 0;
    const hyfi_status s = register_tensors(g);
    if (s != HYFI_OK) return s;
    if (g->cc->htab_oom || spatial_register(g) || g->cc->htab_oom || register_recompute(g) ||
        hyfi_stats_register(g) || hyfi_buckets_register(g) || hyfi_release_index(g)) {
        *key_failed = 1;
        return HYFI_ERR_NOMEM;
    }
    return HYFI_OK;
}

/* The host memory of the fused groups' zero totals (their handles:
 * unregistered with the handle table before). */
void hyfi_spatial_handles_free(hyfi_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        hyfi_tnode *tn = g->nodes[i].tn;
        if (!tn) continue;
        hyfi_fgroup *fg = tn->fg;
        if (!fg || tn->fg_pos != 0) continue;
        for (int j = 0; j < fg->n; j++) {
            hyfi_host_free(fg->ztot_host[j], fg->ztot_n[j]);
            fg->ztot_host[j] = NULL;
        }
    }
}
