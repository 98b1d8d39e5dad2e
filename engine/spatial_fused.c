/* Spatial parallelism: the tasks of fused-halo groups (one exchange for a chain
 * of windowed ops; see hyfi_fgroup in spatial_impl.h). */
#include "spatial_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- fused emission */



/* Op j's input on tile q (what its kernel reads) and that input's gradient. */
static hyfi_ref fg_in(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    if (j == 0) return TNH(fg->op[0]->tn, HK_TBUF, (size_t)e->m * e->g->cc->pl->P + q);
    return fg_padded(fg, j, q) ? FGH(fg, HK_F_PBUF, FGK(j, q)) : FGH(fg, HK_F_VAL, FGK(j - 1, q));
}
static hyfi_ref fg_out(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    return j == fg->n - 1 ? TILE(fg->op[j]->out, q) : FGH(fg, HK_F_VAL, FGK(j, q));
}
static hyfi_ref fg_dout(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    return j == fg->n - 1 ? TGRAD(fg->op[j]->out, q) : FGH(fg, HK_F_GRAD, FGK(j, q));
}

/* One-piece copy between a region tensor (n, C, rh, rw) and a sub-rectangle. */
static hyfi_tile_args fg_rect(int n, int C, int dh, int dw, int sh, int sw, int sy, int sx,
                              int dy, int dx, int h, int w)
{
    hyfi_tile_args t = {.n = n, .c = C, .dst_h = dh, .dst_w = dw, .npieces = 1};
    t.p[0] = (hyfi_piece){.src_h = sh, .src_w = sw, .src_y = sy, .src_x = sx, .dst_y = dy,
                          .dst_x = dx, .h = h, .w = w};
    return t;
}

/* The view of op j of the group on tile q: its region's input, output and
 * gradients (data gradients into fresh buffers: the region's, the padded
 * copy's or the assembled buffer's), everything on the tile's place. */
static void fused_view(emit_ctx *e, const hyfi_fgroup *fg, int j, int q, int training,
                       hyfi_opview *v)
{
    const node *nd = fg->op[j];
    const hyfi_tnode *tn = nd->tn;
    const int Pt = e->g->cc->pl->P;
    memset(v, 0, sizeof *v);
    v->nd = nd;
    v->tile = q;
    v->place = v->dplace[0] = hyfi_sp_place(e, nd->out, q);
    int hi, wi, ph = 0, pw = 0;
    if (j == 0) {
        hi = tn->buf_h[q], wi = tn->buf_w[q];
    } else if (fg_padded(fg, j, q)) {
        hi = fg_rows(fg, j - 1, q) + fg->pt[j][q] + fg->pb[j][q];
        wi = fg_cols(fg, j - 1, q) + fg->pl[j][q] + fg->pr[j][q];
    } else {
        hi = fg_rows(fg, j - 1, q), wi = fg_cols(fg, j - 1, q);
    }
    /* max pools and average pools without the padding: kernel padding before */
    if (hyfi_op_windowed(nd) && !tn->explicit_pad) ph = fg->pt[j][q], pw = fg->pl[j][q];
    hyfi_op_view_args(v, e->M, hi, wi, fg_rows(fg, j, q), fg_cols(fg, j, q), ph, pw);
    v->x[0] = fg_in(e, fg, j, q);
    v->y = fg_out(e, fg, j, q);
    v->dy = fg_dout(e, fg, j, q);
    v->dx[0].h = j == 0                ? TNH(tn, HK_TDBUF, e->m * Pt + q)
                 : fg_padded(fg, j, q) ? FGH(fg, HK_F_DPBUF, FGK(j, q))
                                       : FGH(fg, HK_F_GRAD, FGK(j - 1, q));
    hyfi_sp_view_params(e, nd, q, training, v);
}

/* A copy task of the group on tile q's place. */
static int fg_copy(emit_ctx *e, const node *nd, int q, struct starpu_codelet *cl, const char *pass,
                   hyfi_tile_args t, int acc, hyfi_ref dst, enum starpu_data_access_mode mode,
                   hyfi_ref src)
{
    program *P = e->P;
    char nm[64];
    hyfi_task_args c;
    memset(&c, 0, sizeof c);
    c.acc = acc;
    c.u.tile = t;
    hyfi_sp_task_name(nm, sizeof nm, nd, pass, q, e);
    TASK(cl, nm, &c);
    hyfi_prog_buf(P, dst, mode);
    R(src);
    ON_PLACE(hyfi_sp_place(e, nd->out, q));
    return 0;
}

/* Batch norm op j in training: statistics over each tile's own part only. */
static int fused_bn_stats(emit_ctx *e, const hyfi_fgroup *fg, int j)
{
    const node *nd = fg->op[j];
    const hyfi_tnode *tn = nd->tn;
    const hyfi_tiles *tl = nd->out->tl;
    const int Pt = e->g->cc->pl->P, n = nd->out->dims[0] / e->M, C = nd->out->dims[1];
    double count[HYFI_MAX_TILES] = {0};
    hyfi_opview v = {0};
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
        const int oh = tile_h(tl, q), ow = tile_w(tl, q);
        fused_view(e, fg, j, q, 1, &v);
        hyfi_op_view_args(&v, e->M, oh, ow, oh, ow, 0, 0);
        count[q] = (double)n * oh * ow;
        if (fg_bn_extended(fg, j, q)) {
            hyfi_tile_args t = fg_rect(n, C, oh, ow, fg_rows(fg, j, q), fg_cols(fg, j, q),
                                       tl->rcut[q / tl->cols] - fg->r0[j][q],
                                       tl->ccut[q % tl->cols] - fg->c0[j][q], 0, 0, oh, ow);
            if (fg_copy(e, nd, q, &hyfi_cl_tile_assemble, "own", t, 0, FGH(fg, HK_F_XO, FGK(j, q)),
                        STARPU_W, v.x[0]))
                return -1;
            v.x[0] = FGH(fg, HK_F_XO, FGK(j, q));
        }
        if (hyfi_bn_part_stats(e, &v, TNH(tn, HK_BN_PART, e->m * Pt + q))) return -1;
    }
    hyfi_ref bufs[HYFI_MAX_TILES];
    const int nb = hyfi_sp_bn_pack(e, nd, 0, bufs);
    return nb < 0 ? -1
                  : hyfi_bn_combine(e, nd, count, Pt, v.s[0], v.s[1], v.p[2], v.p[3], bufs, nb);
}

int hyfi_sp_fused_forward(emit_ctx *e, const hyfi_fgroup *fg, int training)
{
    const int Pt = e->g->cc->pl->P;
    for (int j = 0; j < fg->n; j++) {
        const node *nd = fg->op[j];
        const int n = nd->out->dims[0] / e->M, Ci = nd->in[0]->dims[1];
        /* re-materialising: the saved statistics are the step's */
        if (hyfi_op_batch_statistics(nd) && training && !e->recompute && fused_bn_stats(e, fg, j))
            return -1;
        for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
            if (j == 0) {
                hyfi_ref in;
                if (hyfi_sp_assemble(e, nd, q, &in)) return -1;
            } else if (fg_padded(fg, j, q)) {
                const int rh = fg_rows(fg, j - 1, q), rw = fg_cols(fg, j - 1, q);
                hyfi_tile_args t = fg_rect(n, Ci, rh + fg->pt[j][q] + fg->pb[j][q],
                                           rw + fg->pl[j][q] + fg->pr[j][q], rh, rw, 0, 0,
                                           fg->pt[j][q], fg->pl[j][q], rh, rw);
                t.zero_fill = 1;
                if (fg_copy(e, nd, q, &hyfi_cl_tile_assemble, "pad", t, 0,
                            FGH(fg, HK_F_PBUF, FGK(j, q)), STARPU_W,
                            FGH(fg, HK_F_VAL, FGK(j - 1, q))))
                    return -1;
            }
            hyfi_opview v;
            fused_view(e, fg, j, q, training, &v);
            if (hyfi_op_forward(e, &v)) return -1;
        }
    }
    return 0;
}

/* Batch norm op j's backward: sums per tile over its region, combined; each
 * region's gradient with the dy terms only (zero totals) where the region is
 * wider than the own tile, and the full formula on the own tile over it. */
static int fused_bn_backward(emit_ctx *e, const hyfi_fgroup *fg, int j)
{
    const node *nd = fg->op[j];
    const hyfi_tnode *tn = nd->tn;
    const hyfi_tiles *tl = nd->out->tl;
    const int Pt = e->g->cc->pl->P, n = nd->out->dims[0] / e->M, C = nd->out->dims[1];
    double count[HYFI_MAX_TILES] = {0}, total = 0;
    hyfi_opview v = {0};
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
        fused_view(e, fg, j, q, 1, &v);
        count[q] = (double)n * tile_h(tl, q) * tile_w(tl, q);
        total += count[q];
        if (hyfi_bn_part_bwd_stats(e, &v, TNH(tn, HK_BN_BWPART, e->m * Pt + q))) return -1;
    }
    hyfi_ref bufs[HYFI_MAX_TILES];
    const int nb = hyfi_sp_bn_pack(e, nd, 1, bufs);
    if (nb < 0 || hyfi_bn_bwd_combine(e, &v, count, Pt, TNH(tn, HK_BN_TOT, e->m), bufs, nb))
        return -1;
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
        const int ext = fg_bn_extended(fg, j, q);
        fused_view(e, fg, j, q, 1, &v);
        hyfi_ref tot =
            ext ? FGH(fg, HK_F_ZTOT, j * e->g->cc->pl->nrep + e->rep) : TNH(tn, HK_BN_TOT, e->m);
        if (hyfi_bn_part_bwd_apply(e, &v, total, tot, "bwd")) return -1;
        if (!ext) continue;
        const int oh = tile_h(tl, q), ow = tile_w(tl, q), rh = fg_rows(fg, j, q),
                  rw = fg_cols(fg, j, q);
        const int oy = tl->rcut[q / tl->cols] - fg->r0[j][q],
                  ox = tl->ccut[q % tl->cols] - fg->c0[j][q];
        const hyfi_tile_args cp = fg_rect(n, C, oh, ow, rh, rw, oy, ox, 0, 0, oh, ow);
        if (fg_copy(e, nd, q, &hyfi_cl_tile_assemble, "own_dy", cp, 0, FGH(fg, HK_F_DYO, FGK(j, q)),
                    STARPU_W, v.dy) ||
            fg_copy(e, nd, q, &hyfi_cl_tile_assemble, "own_x", cp, 0, FGH(fg, HK_F_XO, FGK(j, q)),
                    STARPU_W, v.x[0]))
            return -1;
        hyfi_opview o = v;
        hyfi_op_view_args(&o, e->M, oh, ow, oh, ow, 0, 0);
        o.x[0] = FGH(fg, HK_F_XO, FGK(j, q)), o.dy = FGH(fg, HK_F_DYO, FGK(j, q));
        o.dx[0] = (hyfi_gout){FGH(fg, HK_F_DXO, FGK(j, q)), NULL, NULL};
        if (hyfi_bn_part_bwd_apply(e, &o, total, TNH(tn, HK_BN_TOT, e->m), "bwd_own") ||
            fg_copy(e, nd, q, &hyfi_cl_tile_scatter, "own_dx", cp, 0,
                    FGH(fg, HK_F_GRAD, FGK(j - 1, q)), STARPU_RW, FGH(fg, HK_F_DXO, FGK(j, q))))
            return -1;
    }
    return 0;
}

int hyfi_sp_fused_backward(emit_ctx *e, const hyfi_fgroup *fg)
{
    const int Pt = e->g->cc->pl->P;
    for (int j = fg->n - 1; j >= 0; j--) {
        const node *nd = fg->op[j];
        const int n = nd->out->dims[0] / e->M, Ci = nd->in[0]->dims[1];
        const int data = j > 0 || fg->op[0]->in[0]->requires_grad;
        if (hyfi_op_batch_statistics(nd)) {
            if (fused_bn_backward(e, fg, j)) return -1;
            continue;
        }
        hyfi_opview v;
        for (int q = 0; hyfi_sp_tile(e, q, q < Pt && data); q++) {
            fused_view(e, fg, j, q, 1, &v);
            if (hyfi_op_backward_data(e, &v)) return -1;
            if (j > 0 && fg_padded(fg, j, q)) {
                /* the padded copy's gradient back into op j-1's region */
                const int rh = fg_rows(fg, j - 1, q), rw = fg_cols(fg, j - 1, q);
                hyfi_tile_args t = fg_rect(n, Ci, rh + fg->pt[j][q] + fg->pb[j][q],
                                           rw + fg->pl[j][q] + fg->pr[j][q], rh, rw, 0, 0,
                                           fg->pt[j][q], fg->pl[j][q], rh, rw);
                if (fg_copy(e, nd, q, &hyfi_cl_tile_scatter, "unpad", t, 0,
                            FGH(fg, HK_F_GRAD, FGK(j - 1, q)), STARPU_W,
                            FGH(fg, HK_F_DPBUF, FGK(j, q))))
                    return -1;
            }
            if (j == 0 && hyfi_sp_unassemble(e, nd, q)) return -1;
        }
        for (int q = 0; hyfi_sp_tile(e, q, q < Pt && j == 0 && data); q++)
            if (hyfi_sp_halo_return(e, nd, q)) return -1;
        for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
            fused_view(e, fg, j, q, 1, &v);
            if (hyfi_op_backward_params(e, &v)) return -1;
        }
    }
    return 0;
}
