/* Spatial parallelism: the tasks of tiled ops (halo exchange, the op on its
 * tiles, batch norm over tiles), gathers to untiled stages and releases. See
 * spatial_impl.h for the scheme. */
#include "spatial_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- emitting */


static void tile_grad_out(emit_ctx *e, hyfi_tensor *x, int q)
{
    program *P = e->P;
    hyfi_prog_buf(P, TGRAD(x, q), TGWF(x, q) ? STARPU_RW : STARPU_W);
}

static void tile_grad_done(emit_ctx *e, hyfi_tensor *x, int q)
{
    TGWF(x, q) = 1;
    x->gwritten = 1;
}

int hyfi_sp_place(const emit_ctx *e, const hyfi_tensor *x, int q)
{
    return place_of(e->g->pl, e->rep, x->tl->stage, q);
}

void hyfi_sp_task_name(char *out, size_t len, const node *nd, const char *pass, int q, const emit_ctx *e)
{
    char p2[48];
    snprintf(p2, sizeof p2, "%s.t%d", pass, q);
    hyfi_task_name(out, len, nd, p2, e);
}

/* A tile's op input: its assembled buffer (after packing and assembling) or
 * the tile itself. */
int hyfi_sp_assemble(emit_ctx *e, const node *nd, int q, starpu_data_handle_t *in)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->pl->P;
    char nm[64];
    if (!tn->use_buf[q]) {
        *in = TILE(x, q);
        return 0;
    }
    /* pack the neighbours' strips, each on its owner's place */
    for (int k = 1; k < tn->npieces[q]; k++) {
        const hyfi_piece *p = &tn->piece[q][k];
        const int u = tn->from[q][k];
        hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = p->h, .dst_w = p->w, .npieces = 1}};
        a.u.tile.p[0] = (hyfi_piece){.src_h = p->src_h, .src_w = p->src_w, .src_y = p->src_y,
                                     .src_x = p->src_x, .dst_y = 0, .dst_x = 0, .h = p->h,
                                     .w = p->w};
        snprintf(nm, sizeof nm, "%.30s.halo%d_%d", nd->name, u, q);
        TASK(&hyfi_cl_tile_assemble, nm, &a);
        W(tn->strip[((size_t)e->m * Pt + q) * NP + k]), R(TILE(x, u));
        ON_PLACE(hyfi_sp_place(e, x, u));
    }
    hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = tn->buf_h[q], .dst_w = tn->buf_w[q],
                                   .npieces = tn->npieces[q], .zero_fill = tn->explicit_pad}};
    for (int k = 0; k < tn->npieces[q]; k++) {
        a.u.tile.p[k] = tn->piece[q][k];
        if (k > 0) { /* a strip is the whole of its handle */
            a.u.tile.p[k].src_h = tn->piece[q][k].h;
            a.u.tile.p[k].src_w = tn->piece[q][k].w;
            a.u.tile.p[k].src_y = a.u.tile.p[k].src_x = 0;
        }
    }
    hyfi_sp_task_name(nm, sizeof nm, nd, "assemble", q, e);
    TASK(&hyfi_cl_tile_assemble, nm, &a);
    W(tn->buf[e->m * Pt + q]), R(TILE(x, q));
    for (int k = 1; k < tn->npieces[q]; k++) R(tn->strip[((size_t)e->m * Pt + q) * NP + k]);
    ON_PLACE(hyfi_sp_place(e, x, q));
    *in = tn->buf[e->m * Pt + q];
    return 0;
}

/* Shapes of the op on tile q: input (buffer or tile) and output tile. */
static int in_h(const node *nd, int q)
{
    const hyfi_tnode *tn = nd->tn;
    return tn && tn->windowed && tn->use_buf[q] ? tn->buf_h[q] : tile_h(nd->in[0]->tl, q);
}
static int in_w(const node *nd, int q)
{
    const hyfi_tnode *tn = nd->tn;
    return tn && tn->windowed && tn->use_buf[q] ? tn->buf_w[q] : tile_w(nd->in[0]->tl, q);
}

static hyfi_task_args tile_args(const emit_ctx *e, const node *nd, int q)
{
    hyfi_task_args a = hyfi_node_args(nd, e->M);
    const hyfi_tiles *yt = nd->out->tl;
    const int ho = tile_h(yt, q), wo = tile_w(yt, q);
    const hyfi_tnode *tn = nd->tn;
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv.h = in_h(nd, q);
        a.u.conv.w = in_w(nd, q);
        a.u.conv.ho = ho;
        a.u.conv.wo = wo;
        a.u.conv.ph = a.u.conv.pw = 0; /* zeros are in the buffer */
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
        a.u.pool.h = in_h(nd, q);
        a.u.pool.w = in_w(nd, q);
        a.u.pool.ho = ho;
        a.u.pool.wo = wo;
        if (tn->explicit_pad) {
            a.u.pool.ph = a.u.pool.pw = 0;
        } else { /* the image border's padding before; clipping after */
            a.u.pool.ph = tn->rs[q / yt->cols].pad_before;
            a.u.pool.pw = tn->cs[q % yt->cols].pad_before;
        }
        break;
    case OP_BATCHNORM:
        a.u.bn.h = ho;
        a.u.bn.w = wo;
        break;
    case OP_RELU:
    case OP_ADD:
        a.u.elt.count = hyfi_tile_numel(nd->out, q);
        break;
    default:
        break;
    }
    return a;
}

int hyfi_spatial_forward(emit_ctx *e, const node *nd, int training)
{
    if (nd->tn && nd->tn->fg) /* the group is emitted with its first op */
        return nd->tn->fg_pos == 0 ? hyfi_sp_fused_forward(e, nd->tn->fg, training) : 0;
    program *P = e->P;
    const int Pt = e->g->pl->P;
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    char nm[64];
    if (nd->op == OP_BATCHNORM && training) {
        const hyfi_tnode *tn = nd->tn;
        hyfi_bn_combine_args ca = {.c = x->dims[1], .nparts = Pt, .eps = nd->a.bn.eps,
                                   .momentum = nd->a.bn.momentum};
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_task_args s = {.u.bnt = {.bn = a.u.bn}};
            ca.count[q] = (double)a.u.bn.n * a.u.bn.h * a.u.bn.w;
            hyfi_sp_task_name(nm, sizeof nm, nd, "stats", q, e);
            TASK(&hyfi_cl_bn_stats, nm, &s);
            W(tn->part[e->m * Pt + q]), R(TILE(x, q));
            ON_PLACE(hyfi_sp_place(e, x, q));
        }
        hyfi_task_args c = {.u.bnc = ca};
        hyfi_task_name(nm, sizeof nm, nd, "combine", e);
        TASK(&hyfi_cl_bn_combine, nm, &c);
        W(TH(nd->s[0], e->m)), W(TH(nd->s[1], e->m)), RW(PH(nd->p[2])), RW(PH(nd->p[3]));
        for (int q = 0; q < Pt; q++) R(tn->part[e->m * Pt + q]);
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_sp_task_name(nm, sizeof nm, nd, "fwd", q, e);
            TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
            W(TILE(y, q)), R(TILE(x, q)), R(PH(nd->p[0])), R(PH(nd->p[1]));
            R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
            ON_PLACE(hyfi_sp_place(e, y, q));
        }
        return 0;
    }
    for (int q = 0; q < Pt; q++) {
        hyfi_task_args a = tile_args(e, nd, q);
        hyfi_sp_task_name(nm, sizeof nm, nd, "fwd", q, e);
        switch (nd->op) {
        case OP_CONV2D: {
            starpu_data_handle_t in;
            if (hyfi_sp_assemble(e, nd, q, &in)) return -1;
            TASK(&hyfi_cl_conv2d_forward, nm, &a);
            W(TILE(y, q)), R(in), R(PH(nd->p[0]));
            if (nd->p[1]) R(PH(nd->p[1]));
            break;
        }
        case OP_MAXPOOL:
        case OP_AVGPOOL: {
            starpu_data_handle_t in;
            if (hyfi_sp_assemble(e, nd, q, &in)) return -1;
            TASK(nd->op == OP_MAXPOOL ? &hyfi_cl_maxpool_forward : &hyfi_cl_avgpool_forward, nm,
                 &a);
            W(TILE(y, q)), R(in);
            break;
        }
        case OP_BATCHNORM: /* eval mode: running statistics */
            TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
            W(TILE(y, q)), R(TILE(x, q)), R(PH(nd->p[0])), R(PH(nd->p[1]));
            R(PH(nd->p[2])), R(PH(nd->p[3]));
            break;
        case OP_RELU:
            TASK(&hyfi_cl_relu_forward, nm, &a);
            W(TILE(y, q)), R(TILE(x, q));
            break;
        case OP_ADD:
            TASK(&hyfi_cl_add_forward, nm, &a);
            W(TILE(y, q)), R(TILE(nd->in[0], q)), R(TILE(nd->in[1], q));
            break;
        case OP_CONCAT: {
            int off = 0;
            const int hw = tile_h(y->tl, q) * tile_w(y->tl, q);
            for (int i = 0; i < nd->nin; i++) {
                hyfi_tensor *xi = nd->in[i];
                a.u.concat = (hyfi_concat_args){.n = y->dims[0] / e->M, .hw = hw,
                                                .c_part = xi->dims[1], .c_offset = off,
                                                .c_total = y->dims[1]};
                char pass[16];
                snprintf(pass, sizeof pass, "fwd%d", i);
                hyfi_sp_task_name(nm, sizeof nm, nd, pass, q, e);
                TASK(&hyfi_cl_concat_forward, nm, &a);
                hyfi_prog_buf(P, TILE(y, q), i == 0 ? STARPU_W : STARPU_RW);
                R(TILE(xi, q));
                ON_PLACE(hyfi_sp_place(e, y, q));
                off += xi->dims[1];
            }
            continue;
        }
        default:
            return -1;
        }
        ON_PLACE(hyfi_sp_place(e, y, q));
    }
    return 0;
}

/* Backward of a windowed op's input on tile q: the buffer gradient scattered
 * into the tile's own gradient and the strip gradients (W), then the strips
 * added into the neighbours' tile gradients (after all tiles' own parts). */
int hyfi_sp_unassemble(emit_ctx *e, const node *nd, int q)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->pl->P;
    char nm[64];
    hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = tn->buf_h[q], .dst_w = tn->buf_w[q],
                                   .npieces = tn->npieces[q]}};
    for (int k = 0; k < tn->npieces[q]; k++) {
        a.u.tile.p[k] = tn->piece[q][k];
        if (k > 0) {
            a.u.tile.p[k].src_h = tn->piece[q][k].h;
            a.u.tile.p[k].src_w = tn->piece[q][k].w;
            a.u.tile.p[k].src_y = a.u.tile.p[k].src_x = 0;
        }
    }
    a.acc = TGWF(x, q) ? 1 : 0; /* bit 0: the own tile; strips are fresh */
    hyfi_sp_task_name(nm, sizeof nm, nd, "unassemble", q, e);
    TASK(&hyfi_cl_tile_scatter, nm, &a);
    tile_grad_out(e, x, q);
    for (int k = 1; k < tn->npieces[q]; k++) W(tn->dstrip[((size_t)e->m * Pt + q) * NP + k]);
    R(tn->dbuf[e->m * Pt + q]);
    ON_PLACE(hyfi_sp_place(e, x, q));
    tile_grad_done(e, x, q);
    return 0;
}

int hyfi_sp_halo_return(emit_ctx *e, const node *nd, int q)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->pl->P;
    char nm[64];
    for (int k = 1; k < tn->npieces[q]; k++) {
        const hyfi_piece *p = &tn->piece[q][k];
        const int u = tn->from[q][k];
        /* strip (the whole handle) added into tile u at the piece's source rectangle */
        hyfi_task_args a = {.acc = 1, .u.tile = {.n = n, .c = C, .dst_h = p->h, .dst_w = p->w,
                                                 .npieces = 1}};
        a.u.tile.p[0] = (hyfi_piece){.src_h = p->src_h, .src_w = p->src_w, .src_y = p->src_y,
                                     .src_x = p->src_x, .dst_y = 0, .dst_x = 0, .h = p->h,
                                     .w = p->w};
        snprintf(nm, sizeof nm, "%.30s.halo%d_%d.back", nd->name, q, u);
        TASK(&hyfi_cl_tile_scatter, nm, &a);
        RW(TGRAD(x, u)), R(tn->dstrip[((size_t)e->m * Pt + q) * NP + k]);
        ON_PLACE(hyfi_sp_place(e, x, u));
    }
    return 0;
}

int hyfi_spatial_backward(emit_ctx *e, const node *nd)
{
    if (nd->tn && nd->tn->fg) /* the group is emitted with its last op */
        return nd->tn->fg_pos == nd->tn->fg->n - 1 ? hyfi_sp_fused_backward(e, nd->tn->fg) : 0;
    program *P = e->P;
    const int Pt = e->g->pl->P;
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    const hyfi_tnode *tn = nd->tn;
    char nm[64];
    switch (nd->op) {
    case OP_CONV2D:
    case OP_MAXPOOL:
    case OP_AVGPOOL: {
        const int data = x->requires_grad;
        for (int q = 0; q < Pt && data; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            const int direct = !tn->use_buf[q];
            a.acc = direct ? TGWF(x, q) : 0;
            hyfi_sp_task_name(nm, sizeof nm, nd, nd->op == OP_CONV2D ? "bwd_data" : "bwd", q, e);
            TASK(nd->op == OP_CONV2D    ? &hyfi_cl_conv2d_backward_data
                 : nd->op == OP_MAXPOOL ? &hyfi_cl_maxpool_backward
                                        : &hyfi_cl_avgpool_backward,
                 nm, &a);
            if (direct) tile_grad_out(e, x, q);
            else W(tn->dbuf[e->m * Pt + q]);
            R(TGRAD(y, q));
            if (nd->op == OP_CONV2D) R(PH(nd->p[0]));
            if (nd->op == OP_MAXPOOL) R(direct ? TILE(x, q) : tn->buf[e->m * Pt + q]);
            ON_PLACE(hyfi_sp_place(e, x, q));
            if (direct) tile_grad_done(e, x, q);
            else if (hyfi_sp_unassemble(e, nd, q)) return -1;
        }
        for (int q = 0; q < Pt && data; q++)
            if (tn->use_buf[q] && hyfi_sp_halo_return(e, nd, q)) return -1;
        if (nd->op != OP_CONV2D) return 0;
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            enum starpu_data_access_mode mw, mb = STARPU_W;
            int accw;
            unsigned char wf = nd->tn->wpw[e->rep * Pt + q], bf = nd->tn->wpw[e->rep * Pt + q];
            if (hyfi_grad_sum_mode(e, tn->wpart[e->rep * Pt + q], &wf, nd->p[0]->numel, nd->p[0]->name, &mw,
                                   &accw))
                return -1;
            if (nd->p[1]) {
                int accb;
                if (hyfi_grad_sum_mode(e, tn->bpart[e->rep * Pt + q], &bf, nd->p[1]->numel, nd->p[1]->name,
                                       &mb, &accb))
                    return -1;
            }
            /* the fill tasks go to the tile's place too */
            for (int k = P->n - 1; k >= 0 && P->t[k].place < 0 && P->t[k].cl == &hyfi_cl_fill; k--)
                P->t[k].place = hyfi_sp_place(e, y, q);
            nd->tn->wpw[e->rep * Pt + q] = 1;
            nd->p[0]->gwritten = 1;
            if (nd->p[1]) nd->p[1]->gwritten = 1;
            a.acc = accw;
            hyfi_sp_task_name(nm, sizeof nm, nd, "bwd_weight", q, e);
            TASK(&hyfi_cl_conv2d_backward_weight, nm, &a);
            hyfi_prog_buf(P, tn->wpart[e->rep * Pt + q], mw);
            if (nd->p[1]) hyfi_prog_buf(P, tn->bpart[e->rep * Pt + q], mb);
            R(TGRAD(y, q)), R(tn->use_buf[q] ? tn->buf[e->m * Pt + q] : TILE(x, q));
            ON_PLACE(hyfi_sp_place(e, y, q));
        }
        return 0;
    }
    case OP_BATCHNORM: {
        hyfi_bn_combine_args ca = {.c = x->dims[1], .nparts = Pt, .eps = nd->a.bn.eps,
                                   .momentum = nd->a.bn.momentum};
        double total = 0;
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_task_args s = {.u.bnt = {.bn = a.u.bn}};
            ca.count[q] = (double)a.u.bn.n * a.u.bn.h * a.u.bn.w;
            total += ca.count[q];
            hyfi_sp_task_name(nm, sizeof nm, nd, "bwd_stats", q, e);
            TASK(&hyfi_cl_bn_bwd_stats, nm, &s);
            W(tn->bwpart[e->m * Pt + q]), R(TGRAD(y, q)), R(TILE(x, q)), R(TH(nd->s[0], e->m));
            ON_PLACE(hyfi_sp_place(e, x, q));
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
        for (int q = 0; q < Pt && x->requires_grad; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_task_args s = {.acc = TGWF(x, q) ? HYFI_BN_ACC_DX : 0,
                                .u.bnt = {.bn = a.u.bn, .total = total}};
            hyfi_sp_task_name(nm, sizeof nm, nd, "bwd", q, e);
            TASK(&hyfi_cl_bn_bwd_apply, nm, &s);
            tile_grad_out(e, x, q);
            R(TGRAD(y, q)), R(TILE(x, q)), R(PH(nd->p[0])), R(TH(nd->s[0], e->m));
            R(TH(nd->s[1], e->m)), R(tn->tot[e->m]);
            ON_PLACE(hyfi_sp_place(e, x, q));
            tile_grad_done(e, x, q);
        }
        return 0;
    }
    case OP_RELU:
        for (int q = 0; q < Pt && x->requires_grad; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            a.acc = TGWF(x, q);
            hyfi_sp_task_name(nm, sizeof nm, nd, "bwd", q, e);
            TASK(&hyfi_cl_relu_backward, nm, &a);
            tile_grad_out(e, x, q);
            R(TGRAD(y, q)), R(TILE(y, q));
            ON_PLACE(hyfi_sp_place(e, x, q));
            tile_grad_done(e, x, q);
        }
        return 0;
    case OP_ADD:
        for (int i = 0; i < 2; i++) {
            hyfi_tensor *xi = nd->in[i];
            for (int q = 0; q < Pt && xi->requires_grad; q++) {
                hyfi_task_args a = {.acc = TGWF(xi, q), .u.elt.count = hyfi_tile_numel(xi, q)};
                char pass[16];
                snprintf(pass, sizeof pass, "bwd%d", i);
                hyfi_sp_task_name(nm, sizeof nm, nd, pass, q, e);
                TASK(&hyfi_cl_accumulate, nm, &a);
                tile_grad_out(e, xi, q);
                R(TGRAD(y, q));
                ON_PLACE(hyfi_sp_place(e, xi, q));
                tile_grad_done(e, xi, q);
            }
        }
        return 0;
    case OP_CONCAT: {
        int off = 0;
        for (int i = 0; i < nd->nin; i++) {
            hyfi_tensor *xi = nd->in[i];
            for (int q = 0; q < Pt && xi->requires_grad; q++) {
                hyfi_task_args a = {.acc = TGWF(xi, q)};
                a.u.concat = (hyfi_concat_args){.n = y->dims[0] / e->M,
                                                .hw = tile_h(y->tl, q) * tile_w(y->tl, q),
                                                .c_part = xi->dims[1], .c_offset = off,
                                                .c_total = y->dims[1]};
                char pass[16];
                snprintf(pass, sizeof pass, "bwd%d", i);
                hyfi_sp_task_name(nm, sizeof nm, nd, pass, q, e);
                TASK(&hyfi_cl_concat_backward, nm, &a);
                tile_grad_out(e, xi, q);
                R(TGRAD(y, q));
                ON_PLACE(hyfi_sp_place(e, xi, q));
                tile_grad_done(e, xi, q);
            }
            off += xi->dims[1];
        }
        return 0;
    }
    default:
        return -1;
    }
}

/* Gather the tiles of x into its whole-tensor view (on the event's place). */
int hyfi_spatial_gather(emit_ctx *e, hyfi_tensor *x)
{
    program *P = e->P;
    const hyfi_tiles *tl = x->tl;
    const int Pt = e->g->pl->P, n = x->dims[0] / e->M, C = x->dims[1];
    char nm[64];
    for (int q0 = 0; q0 < Pt; q0 += NP) {
        const int cnt = Pt - q0 < NP ? Pt - q0 : NP;
        hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = x->dims[2], .dst_w = x->dims[3],
                                       .npieces = cnt}};
        for (int k = 0; k < cnt; k++) {
            const int q = q0 + k, th = tile_h(tl, q), tw = tile_w(tl, q);
            a.u.tile.p[k] = (hyfi_piece){.src_h = th, .src_w = tw, .dst_y = tl->rcut[q / tl->cols],
                                         .dst_x = tl->ccut[q % tl->cols], .h = th, .w = tw};
        }
        snprintf(nm, sizeof nm, "%.40s.gather", x->name);
        TASK(&hyfi_cl_tile_assemble, nm, &a);
        hyfi_prog_buf(P, TH(x, e->m), q0 == 0 ? STARPU_W : STARPU_RW);
        for (int k = 0; k < cnt; k++) R(TILE(x, q0 + k));
    }
    return 0;
}

/* The whole-tensor gradient of x back into its tile gradients. */
int hyfi_spatial_gather_back(emit_ctx *e, hyfi_tensor *x)
{
    program *P = e->P;
    const hyfi_tiles *tl = x->tl;
    const int Pt = e->g->pl->P, n = x->dims[0] / e->M, C = x->dims[1];
    char nm[64];
    if (!x->requires_grad || !TGW(x, e->m)) return 0;
    for (int q0 = 0; q0 < Pt; q0 += NP) {
        const int cnt = Pt - q0 < NP ? Pt - q0 : NP;
        hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = x->dims[2], .dst_w = x->dims[3],
                                       .npieces = cnt}};
        for (int k = 0; k < cnt; k++) {
            const int q = q0 + k, th = tile_h(tl, q), tw = tile_w(tl, q);
            a.u.tile.p[k] = (hyfi_piece){.src_h = th, .src_w = tw, .dst_y = tl->rcut[q / tl->cols],
                                         .dst_x = tl->ccut[q % tl->cols], .h = th, .w = tw};
            if (TGWF(x, q)) a.acc |= 1 << k;
        }
        snprintf(nm, sizeof nm, "%.40s.scatter", x->name);
        TASK(&hyfi_cl_tile_scatter, nm, &a);
        for (int k = 0; k < cnt; k++) tile_grad_out(e, x, q0 + k);
        R(TGH(x, e->m));
        for (int k = 0; k < cnt; k++) tile_grad_done(e, x, q0 + k);
    }
    return 0;
}

/* Before the update: the tiles' weight gradients of tiled convolutions added
 * into the parameter gradients, on the stage's first place. */
int hyfi_spatial_param_sums(emit_ctx *e)
{
    program *P = e->P;
    hyfi_graph *g = e->g;
    const int Pt = g->pl->P;
    char nm[HYFI_NAME_MAX + 32];
    for (int r = 0; r < g->pl->nrep; r++)
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (!nd->tn || !nd->tn->wpart || !nd->tn->wpw[r * Pt]) continue;
        for (int k = 0; k < 2; k++) {
            hyfi_tensor *p = nd->p[k];
            if (!p) continue;
            starpu_data_handle_t *parts = (k ? nd->tn->bpart : nd->tn->wpart) + r * Pt;
            for (int q = 0; q < Pt; q++) {
                hyfi_task_args a = {.acc = q > 0, .u.elt.count = p->numel};
                snprintf(nm, sizeof nm, "%.50s.tile_sum%d", p->name, q);
                TASK(&hyfi_cl_accumulate, nm, &a);
                hyfi_prog_buf(P, p->gh[r], q ? STARPU_RW : STARPU_W);
                R(parts[q]);
                P->t[P->n - 1].place = HYFI_PLACE(g->pl, r, g->pl->stage_place0[nd->stage]);
                P->t[P->n - 1].rank = hyfi_stage_rank(g->pl, r, nd->stage);
                P->t[P->n - 1].worker = hyfi_stage_worker(g->pl, r, nd->stage);
            }
            p->gw[r] = 1;
        }
    }
    return 0;
}

/* Micro-batch m is done on tiled stage s: drop the tiles and halo handles. */
int hyfi_spatial_release(emit_ctx *e, int s)
{
    hyfi_graph *g = e->g;
    const int Pt = g->pl->P, m = e->m, rp = e->rep;
    program *P = e->P;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!t->tl || t->tl->stage != s || t->kind == T_INPUT) continue;
        t->released = 1;
        for (int q = 0; q < Pt; q++) {
            const int r = hyfi_tile_rank(g, t->tl, q, rp);
            if (hyfi_emit_release(P, t->tl->h[m * Pt + q], r)) return -1;
            if (t->tl->gh[m * Pt + q] && hyfi_emit_release(P, t->tl->gh[m * Pt + q], r)) return -1;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        const hyfi_tnode *tn = nd->tn;
        if (!tn || nd->stage != s) continue;
        for (int q = 0; q < Pt; q++) {
            const int r = hyfi_tile_rank(g, nd->in[0]->tl, q, rp);
            starpu_data_handle_t hs[] = {tn->buf ? tn->buf[m * Pt + q] : NULL,
                                         tn->dbuf ? tn->dbuf[m * Pt + q] : NULL,
                                         tn->part ? tn->part[m * Pt + q] : NULL,
                                         tn->bwpart ? tn->bwpart[m * Pt + q] : NULL};
            for (size_t k = 0; k < sizeof hs / sizeof *hs; k++)
                if (hs[k] && hyfi_emit_release(P, hs[k], r)) return -1;
            for (int k = 1; tn->strip && k < tn->npieces[q]; k++) {
                const size_t j = ((size_t)m * Pt + q) * NP + k;
                const int ru = hyfi_tile_rank(g, nd->in[0]->tl, tn->from[q][k], rp);
                if (tn->strip[j] && hyfi_emit_release(P, tn->strip[j], ru)) return -1;
                if (tn->dstrip[j] && hyfi_emit_release(P, tn->dstrip[j], r)) return -1;
            }
        }
        if (tn->tot && hyfi_emit_release(P, tn->tot[m], hyfi_stage_rank(g->pl, rp, nd->stage)))
            return -1;
        if (tn->fg && tn->fg_pos == 0) {
            const hyfi_fgroup *fg = tn->fg;
            for (int j = 0; j < fg->n; j++)
                for (int q = 0; q < Pt; q++) {
                    const size_t k = ((size_t)j * g->pl->nmb + m) * Pt + q;
                    const int r = hyfi_tile_rank(g, fg->op[j]->out->tl, q, rp);
                    starpu_data_handle_t hs[] = {fg->val[k], fg->grad[k], fg->pbuf[k],
                                                 fg->dpbuf[k], fg->xo[k], fg->dyo[k], fg->dxo[k]};
                    for (size_t a = 0; a < sizeof hs / sizeof *hs; a++)
                        if (hs[a] && hyfi_emit_release(P, hs[a], r)) return -1;
                }
        }
    }
    return 0;
}

/* Fused-halo groups and the halo strips exchanged per micro-batch (all
 * tiles, forward). */
void hyfi_spatial_halo_counts(const hyfi_graph *g, int *groups, int *fused_ops, int *strips)
{
    *groups = *fused_ops = *strips = 0;
    if (!g->pl || g->pl->K == 0) return;
    for (int i = 0; i < g->nnodes; i++) {
        const hyfi_tnode *tn = g->nodes[i].tn;
        if (!tn) continue;
        if (tn->fg && tn->fg_pos == 0) {
            (*groups)++;
            *fused_ops += tn->fg->n;
        }
        if (!tn->windowed || (tn->fg && tn->fg_pos > 0)) continue;
        for (int q = 0; q < g->pl->P; q++)
            if (tn->use_buf[q]) *strips += tn->npieces[q] - 1;
    }
}

/* Halo bytes per step between tiles on different ranks, from the geometry:
 * every strip forward and its gradient back. */
size_t hyfi_spatial_halo_volume(const hyfi_graph *g)
{
    const hyfi_plan *pl = g->pl;
    size_t b = 0;
    if (!pl || pl->K == 0) return 0;
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        const hyfi_tnode *tn = nd->tn;
        if (!tn || !tn->windowed || (tn->fg && tn->fg_pos > 0)) continue;
        const hyfi_tensor *x = nd->in[0];
        for (int r = 0; r < pl->nrep; r++)
        for (int q = 0; q < pl->P; q++) {
            if (!tn->use_buf[q]) continue;
            for (int k = 1; k < tn->npieces[q]; k++) {
                if (hyfi_tile_rank(g, x->tl, q, r) == hyfi_tile_rank(g, x->tl, tn->from[q][k], r))
                    continue;
                const size_t s = (size_t)(x->dims[0] / pl->nrep) * x->dims[1] * tn->piece[q][k].h *
                                 tn->piece[q][k].w * sizeof(float);
                b += x->requires_grad ? 2 * s : s;
            }
        }
    }
    return b;
}
