/* Spatial parallelism: handles of the tiles, assembled buffers, halo strips and
 * partial sums (registration and release). See spatial_impl.h. */
#include "spatial_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---------------------------------------------------------- registration */



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
                    if (j < fg->n - 1) {
                        snprintf(sfx, sizeof sfx, ".ext.tile%d", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_F_VAL, i, k, HYFI_REP(pl, m)), NULL, on,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, nd->out, HC_PIPELINE),
                                 fg->op[0]->stage, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".ext.tile%d.grad", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_F_GRAD, i, k, HYFI_REP(pl, m)), NULL, on,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, nd->out, HC_PIPELINE),
                                 fg->op[0]->stage, nd->name, sfx, m, M);
                    }
                    if (fg_padded(fg, j, q)) {
                        const size_t pn = (size_t)n * Ci *
                                          (fg_rows(fg, j - 1, q) + fg->pt[j][q] + fg->pb[j][q]) *
                                          (fg_cols(fg, j - 1, q) + fg->pl[j][q] + fg->pr[j][q]);
                        snprintf(sfx, sizeof sfx, ".in.tile%d", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_F_PBUF, i, k, HYFI_REP(pl, m)), NULL, pn,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, nd->in[0], HC_PIPELINE),
                                 fg->op[0]->stage, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".in.tile%d.grad", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_F_DPBUF, i, k, HYFI_REP(pl, m)), NULL, pn,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, nd->in[0], HC_PIPELINE),
                                 fg->op[0]->stage, nd->name, sfx, m, M);
                    }
                    if (hyfi_op_batch_statistics(nd) && fg_bn_extended(fg, j, q)) {
                        const size_t own = hyfi_tile_numel(nd->out, q);
                        snprintf(sfx, sizeof sfx, ".own_x.tile%d", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_F_XO, i, k, HYFI_REP(pl, m)), NULL, own,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, nd->out, HC_PIPELINE),
                                 fg->op[0]->stage, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".own_dy.tile%d", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_F_DYO, i, k, HYFI_REP(pl, m)), NULL, own,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, nd->out, HC_PIPELINE),
                                 fg->op[0]->stage, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".own_dx.tile%d", q);
                        hyfi_reg(g, HYFI_KEY_R(HK_F_DXO, i, k, HYFI_REP(pl, m)), NULL, own,
                                 sizeof(float), rq, hyfi_tensor_hflags(g, nd->out, HC_PIPELINE),
                                 fg->op[0]->stage, nd->name, sfx, m, M);
                    }
                }
        }
    }
    return 0;
}



int hyfi_spatial_register(hyfi_graph *g)
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
                    starpu_data_handle_t wp = hyfi_reg(g, HYFI_KEY_R(HK_WPART, i, k, k / P), NULL,
                                                       nd->p[0]->numel, sizeof(float), rq,
                                                       HC_ALLREDUCE, HYFI_KEEP, nd->p[0]->name, sfx,
                                                       0, 1),
                                         bp = NULL;
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
