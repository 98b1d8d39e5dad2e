/* Spatial parallelism: the tasks of fused-halo groups (one exchange for a chain
 * of windowed ops; see hyfi_fgroup in spatial_impl.h). */
#include "spatial_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- fused emission */



/* Op j's input on tile q (what its kernel reads) and that input's gradient. */
static starpu_data_handle_t fg_in(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    if (j == 0) return fg->op[0]->tn->buf[e->m * e->g->pl->P + q];
    return fg_padded(fg, j, q) ? fg->pbuf[FGK(j, q)] : fg->val[FGK(j - 1, q)];
}
static starpu_data_handle_t fg_out(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    return j == fg->n - 1 ? TILE(fg->op[j]->out, q) : fg->val[FGK(j, q)];
}
static starpu_data_handle_t fg_dout(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    return j == fg->n - 1 ? TGRAD(fg->op[j]->out, q) : fg->grad[FGK(j, q)];
}

/* Kernel arguments of op j on tile q: shapes of its regions. */
static hyfi_task_args fg_args(const emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    const node *nd = fg->op[j];
    hyfi_task_args a = hyfi_node_args(nd, e->M);
    const int ho = fg_rows(fg, j, q), wo = fg_cols(fg, j, q);
    int hi, wi, ph = 0, pw = 0;
    if (j == 0) {
        hi = nd->tn->buf_h[q], wi = nd->tn->buf_w[q];
    } else if (fg_padded(fg, j, q)) {
        hi = fg_rows(fg, j - 1, q) + fg->pt[j][q] + fg->pb[j][q];
        wi = fg_cols(fg, j - 1, q) + fg->pl[j][q] + fg->pr[j][q];
    } else {
        hi = fg_rows(fg, j - 1, q), wi = fg_cols(fg, j - 1, q);
    }
    /* max pools and average pools without the padding: kernel padding before */
    if ((nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL) && !nd->tn->explicit_pad)
        ph = fg->pt[j][q], pw = fg->pl[j][q];
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv.h = hi, a.u.conv.w = wi, a.u.conv.ho = ho, a.u.conv.wo = wo;
        a.u.conv.ph = a.u.conv.pw = 0;
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
        a.u.pool.h = hi, a.u.pool.w = wi, a.u.pool.ho = ho, a.u.pool.wo = wo;
        a.u.pool.ph = ph, a.u.pool.pw = pw;
        break;
    case OP_BATCHNORM:
        a.u.bn.h = ho, a.u.bn.w = wo;
        break;
    case OP_RELU:
        a.u.elt.count = (size_t)(nd->out->dims[0] / e->M) * nd->out->dims[1] * ho * wo;
        break;
    default:
        break;
    }
    return a;
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

int hyfi_sp_fused_forward(emit_ctx *e, const hyfi_fgroup *fg, int training)
{
    program *P = e->P;
    const int Pt = e->g->pl->P;
    char nm[64];
    for (int j = 0; j < fg->n; j++) {
        const node *nd = fg->op[j];
        const int n = nd->out->dims[0] / e->M, C = nd->out->dims[1], Ci = nd->in[0]->dims[1];
        if (nd->op == OP_BATCHNORM && training) {
            const hyfi_tnode *tn = nd->tn;
            hyfi_bn_combine_args ca = {.c = C, .nparts = Pt, .eps = nd->a.bn.eps,
                                       .momentum = nd->a.bn.momentum};
            for (int q = 0; q < Pt; q++) {
                /* statistics over the own tile only */
                const hyfi_tiles *tl = nd->out->tl;
                hyfi_batchnorm_args own = nd->a.bn;
                own.n = n, own.h = tile_h(tl, q), own.w = tile_w(tl, q);
                ca.count[q] = (double)n * own.h * own.w;
                starpu_data_handle_t x = fg_in(e, fg, j, q);
                if (fg_bn_extended(fg, j, q)) {
                    hyfi_task_args c = {.u.tile = fg_rect(
                        n, C, own.h, own.w, fg_rows(fg, j, q), fg_cols(fg, j, q),
                        tl->rcut[q / tl->cols] - fg->r0[j][q], tl->ccut[q % tl->cols] - fg->c0[j][q],
                        0, 0, own.h, own.w)};
                    hyfi_sp_task_name(nm, sizeof nm, nd, "own", q, e);
                    TASK(&hyfi_cl_tile_assemble, nm, &c);
                    W(fg->xo[FGK(j, q)]), R(x);
                    ON_PLACE(hyfi_sp_place(e, nd->out, q));
                    x = fg->xo[FGK(j, q)];
                }
                hyfi_task_args s = {.u.bnt = {.bn = own}};
                hyfi_sp_task_name(nm, sizeof nm, nd, "stats", q, e);
                TASK(&hyfi_cl_bn_stats, nm, &s);
                W(tn->part[e->m * Pt + q]), R(x);
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
            }
            hyfi_task_args c = {.u.bnc = ca};
            hyfi_task_name(nm, sizeof nm, nd, "combine", e);
            TASK(&hyfi_cl_bn_combine, nm, &c);
            W(TH(nd->s[0], e->m)), W(TH(nd->s[1], e->m)), RW(PH(nd->p[2]));
            RW(PH(nd->p[3]));
            for (int q = 0; q < Pt; q++) R(tn->part[e->m * Pt + q]);
        }
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = fg_args(e, fg, j, q);
            if (j == 0) {
                starpu_data_handle_t in;
                if (hyfi_sp_assemble(e, nd, q, &in)) return -1;
            } else if (fg_padded(fg, j, q)) {
                const int rh = fg_rows(fg, j - 1, q), rw = fg_cols(fg, j - 1, q);
                hyfi_task_args c = {.u.tile = fg_rect(n, Ci, rh + fg->pt[j][q] + fg->pb[j][q],
                                                      rw + fg->pl[j][q] + fg->pr[j][q], rh, rw, 0, 0,
                                                      fg->pt[j][q], fg->pl[j][q], rh, rw)};
                c.u.tile.zero_fill = 1;
                hyfi_sp_task_name(nm, sizeof nm, nd, "pad", q, e);
                TASK(&hyfi_cl_tile_assemble, nm, &c);
                W(fg->pbuf[FGK(j, q)]), R(fg->val[FGK(j - 1, q)]);
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
            }
            starpu_data_handle_t in = fg_in(e, fg, j, q), out = fg_out(e, fg, j, q);
            hyfi_sp_task_name(nm, sizeof nm, nd, "fwd", q, e);
            switch (nd->op) {
            case OP_CONV2D:
                TASK(&hyfi_cl_conv2d_forward, nm, &a);
                W(out), R(in), R(PH(nd->p[0]));
                if (nd->p[1]) R(PH(nd->p[1]));
                break;
            case OP_MAXPOOL:
            case OP_AVGPOOL:
                TASK(nd->op == OP_MAXPOOL ? &hyfi_cl_maxpool_forward : &hyfi_cl_avgpool_forward,
                     nm, &a);
                W(out), R(in);
                break;
            case OP_BATCHNORM:
                TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
                W(out), R(in), R(PH(nd->p[0])), R(PH(nd->p[1]));
                if (training) R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
                else R(PH(nd->p[2])), R(PH(nd->p[3]));
                break;
            case OP_RELU:
                TASK(&hyfi_cl_relu_forward, nm, &a);
                W(out), R(in);
                break;
            default:
                return -1;
            }
            ON_PLACE(hyfi_sp_place(e, nd->out, q));
        }
    }
    return 0;
}

int hyfi_sp_fused_backward(emit_ctx *e, const hyfi_fgroup *fg)
{
    program *P = e->P;
    const int Pt = e->g->pl->P;
    char nm[64];
    for (int j = fg->n - 1; j >= 0; j--) {
        const node *nd = fg->op[j];
        const hyfi_tnode *tn = nd->tn;
        const int n = nd->out->dims[0] / e->M, C = nd->out->dims[1], Ci = nd->in[0]->dims[1];
        hyfi_tensor *x0 = fg->op[0]->in[0];
        const int data = j > 0 || x0->requires_grad;
        /* where op j's input gradient goes: op j-1's region gradient, through the
         * padded copy's gradient when there is one; op 0: the buffer gradient */
        if (nd->op == OP_BATCHNORM) {
            hyfi_bn_combine_args ca = {.c = C, .nparts = Pt, .eps = nd->a.bn.eps,
                                       .momentum = nd->a.bn.momentum};
            double total = 0;
            for (int q = 0; q < Pt; q++) {
                hyfi_task_args a = fg_args(e, fg, j, q);
                const hyfi_tiles *tl = nd->out->tl;
                ca.count[q] = (double)n * tile_h(tl, q) * tile_w(tl, q);
                total += ca.count[q];
                hyfi_task_args s = {.u.bnt = {.bn = a.u.bn}};
                hyfi_sp_task_name(nm, sizeof nm, nd, "bwd_stats", q, e);
                TASK(&hyfi_cl_bn_bwd_stats, nm, &s);
                W(tn->bwpart[e->m * Pt + q]), R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
                R(TH(nd->s[0], e->m));
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
            }
            enum starpu_data_access_mode mg, mb;
            int accg, accb;
            nd->p[0]->gwritten = nd->p[1]->gwritten = 1;
            if (hyfi_grad_sum_mode(e, PGH(nd->p[0]), &PGW(nd->p[0]), nd->p[0]->numel,
                                   nd->p[0]->name, &mg, &accg) ||
                hyfi_grad_sum_mode(e, PGH(nd->p[1]), &PGW(nd->p[1]), nd->p[1]->numel,
                                   nd->p[1]->name, &mb, &accb))
                return -1;
            hyfi_task_args c = {.acc = accg ? HYFI_BN_ACC_PARAMS : 0, .u.bnc = ca};
            hyfi_task_name(nm, sizeof nm, nd, "bwd_combine", e);
            TASK(&hyfi_cl_bn_bwd_combine, nm, &c);
            W(tn->tot[e->m]);
            hyfi_prog_buf(P, PGH(nd->p[0]), mg);
            hyfi_prog_buf(P, PGH(nd->p[1]), mb);
            R(TH(nd->s[1], e->m));
            for (int q = 0; q < Pt; q++) R(tn->bwpart[e->m * Pt + q]);
            for (int q = 0; q < Pt; q++) {
                hyfi_task_args a = fg_args(e, fg, j, q);
                const int ext = fg_bn_extended(fg, j, q);
                hyfi_task_args s = {.u.bnt = {.bn = a.u.bn, .total = total}};
                /* extended: the dy part on the whole region (zero totals), then the
                 * full formula on the own tile over it */
                hyfi_sp_task_name(nm, sizeof nm, nd, "bwd", q, e);
                TASK(&hyfi_cl_bn_bwd_apply, nm, &s);
                W(fg->grad[FGK(j - 1, q)]), R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
                R(PH(nd->p[0])), R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
                R(ext ? fg->ztot[j] : tn->tot[e->m]);
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
                if (!ext) continue;
                const hyfi_tiles *tl = nd->out->tl;
                const int oh = tile_h(tl, q), ow = tile_w(tl, q), rh = fg_rows(fg, j, q),
                          rw = fg_cols(fg, j, q);
                const int oy = tl->rcut[q / tl->cols] - fg->r0[j][q],
                          ox = tl->ccut[q % tl->cols] - fg->c0[j][q];
                hyfi_task_args cp = {.u.tile = fg_rect(n, C, oh, ow, rh, rw, oy, ox, 0, 0, oh, ow)};
                hyfi_sp_task_name(nm, sizeof nm, nd, "own_dy", q, e);
                TASK(&hyfi_cl_tile_assemble, nm, &cp);
                W(fg->dyo[FGK(j, q)]), R(fg_dout(e, fg, j, q));
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
                hyfi_sp_task_name(nm, sizeof nm, nd, "own_x", q, e);
                TASK(&hyfi_cl_tile_assemble, nm, &cp);
                W(fg->xo[FGK(j, q)]), R(fg_in(e, fg, j, q));
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
                hyfi_task_args so = s;
                so.u.bnt.bn.h = oh, so.u.bnt.bn.w = ow;
                hyfi_sp_task_name(nm, sizeof nm, nd, "bwd_own", q, e);
                TASK(&hyfi_cl_bn_bwd_apply, nm, &so);
                W(fg->dxo[FGK(j, q)]), R(fg->dyo[FGK(j, q)]), R(fg->xo[FGK(j, q)]);
                R(PH(nd->p[0])), R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
                R(tn->tot[e->m]);
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
                hyfi_task_args sc = {.u.tile = fg_rect(n, C, oh, ow, rh, rw, oy, ox, 0, 0, oh, ow)};
                hyfi_sp_task_name(nm, sizeof nm, nd, "own_dx", q, e);
                TASK(&hyfi_cl_tile_scatter, nm, &sc);
                RW(fg->grad[FGK(j - 1, q)]), R(fg->dxo[FGK(j, q)]);
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
            }
            continue;
        }
        for (int q = 0; q < Pt && data; q++) {
            hyfi_task_args a = fg_args(e, fg, j, q);
            const int padded = fg_padded(fg, j, q);
            starpu_data_handle_t din = j == 0   ? tn->dbuf[e->m * Pt + q]
                                       : padded ? fg->dpbuf[FGK(j, q)]
                                                : fg->grad[FGK(j - 1, q)];
            hyfi_sp_task_name(nm, sizeof nm, nd, nd->op == OP_CONV2D ? "bwd_data" : "bwd", q, e);
            switch (nd->op) {
            case OP_CONV2D:
                TASK(&hyfi_cl_conv2d_backward_data, nm, &a);
                W(din), R(fg_dout(e, fg, j, q)), R(PH(nd->p[0]));
                break;
            case OP_MAXPOOL:
                TASK(&hyfi_cl_maxpool_backward, nm, &a);
                W(din), R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
                break;
            case OP_AVGPOOL:
                TASK(&hyfi_cl_avgpool_backward, nm, &a);
                W(din), R(fg_dout(e, fg, j, q));
                break;
            case OP_RELU:
                TASK(&hyfi_cl_relu_backward, nm, &a);
                W(din), R(fg_dout(e, fg, j, q)), R(fg_out(e, fg, j, q));
                break;
            default:
                return -1;
            }
            ON_PLACE(hyfi_sp_place(e, nd->out, q));
            if (j > 0 && padded) {
                const int rh = fg_rows(fg, j - 1, q), rw = fg_cols(fg, j - 1, q);
                hyfi_task_args c = {.u.tile = fg_rect(n, Ci, rh + fg->pt[j][q] + fg->pb[j][q],
                                                      rw + fg->pl[j][q] + fg->pr[j][q], rh, rw, 0, 0,
                                                      fg->pt[j][q], fg->pl[j][q], rh, rw)};
                hyfi_sp_task_name(nm, sizeof nm, nd, "unpad", q, e);
                TASK(&hyfi_cl_tile_scatter, nm, &c);
                W(fg->grad[FGK(j - 1, q)]), R(fg->dpbuf[FGK(j, q)]);
                ON_PLACE(hyfi_sp_place(e, nd->out, q));
            }
            if (j == 0 && hyfi_sp_unassemble(e, nd, q)) return -1;
        }
        for (int q = 0; q < Pt && j == 0 && data; q++)
            if (hyfi_sp_halo_return(e, nd, q)) return -1;
        if (nd->op != OP_CONV2D) continue;
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = fg_args(e, fg, j, q);
            enum starpu_data_access_mode mw, mb = STARPU_W;
            int accw;
            unsigned char wf = tn->wpw[e->rep * Pt + q], bf = tn->wpw[e->rep * Pt + q];
            if (hyfi_grad_sum_mode(e, tn->wpart[e->rep * Pt + q], &wf, nd->p[0]->numel, nd->p[0]->name, &mw,
                                   &accw))
                return -1;
            if (nd->p[1]) {
                int accb;
                if (hyfi_grad_sum_mode(e, tn->bpart[e->rep * Pt + q], &bf, nd->p[1]->numel, nd->p[1]->name,
                                       &mb, &accb))
                    return -1;
            }
            for (int k = P->n - 1; k >= 0 && P->t[k].place < 0 && P->t[k].cl == &hyfi_cl_fill; k--)
                P->t[k].place = hyfi_sp_place(e, nd->out, q);
            nd->tn->wpw[e->rep * Pt + q] = 1;
            nd->p[0]->gwritten = 1;
            if (nd->p[1]) nd->p[1]->gwritten = 1;
            a.acc = accw;
            hyfi_sp_task_name(nm, sizeof nm, nd, "bwd_weight", q, e);
            TASK(&hyfi_cl_conv2d_backward_weight, nm, &a);
            hyfi_prog_buf(P, tn->wpart[e->rep * Pt + q], mw);
            if (nd->p[1]) hyfi_prog_buf(P, tn->bpart[e->rep * Pt + q], mb);
            R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
            ON_PLACE(hyfi_sp_place(e, nd->out, q));
        }
    }
    return 0;
}
