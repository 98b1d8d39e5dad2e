/* Op definitions (see opdef.h): per op kind, its FLOPs, its kernel arguments
 * for a view and its tasks over views. The only file that names an op's
 * codelets. */
#include "opdef.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------ typed insertion */

/* The task just pushed runs on place pl (-1: the event's). */
static void at(program *P, int pl)
{
    if (pl >= 0) P->t[P->n - 1].place = pl;
}

static int gout_acc(const hyfi_gout *g) { return g->written ? *g->written : 0; }

/* An activation-gradient buffer: W for its first writer, RW after. */
static void ins_gout(program *P, const hyfi_gout *g)
{
    hyfi_prog_buf(P, g->h, gout_acc(g) ? STARPU_RW : STARPU_W);
}

static void gout_done(const hyfi_gout *g)
{
    if (g->written) *g->written = 1;
    if (g->t) g->t->gwritten = 1;
}

/* Mode and acc flag of a parameter gradient; the zero fill it may need runs
 * on place pl. */
static int gsum_mode(emit_ctx *e, const hyfi_gsum *g, int pl, enum starpu_data_access_mode *mode,
                     int *acc)
{
    const int from = e->P->n;
    g->p->gwritten = 1;
    if (hyfi_grad_sum_mode(e, g->h, g->written, g->p->numel, g->p->name, mode, acc)) return -1;
    for (int k = from; k < e->P->n; k++) at(e->P, pl);
    return 0;
}

void hyfi_view_task_name(char *out, size_t len, const hyfi_opview *v, const char *pass,
                         const emit_ctx *e)
{
    char p2[48];
    if (v->tile >= 0) {
        snprintf(p2, sizeof p2, "%s.t%d", pass, v->tile);
        pass = p2;
    }
    hyfi_task_name(out, len, v->nd, pass, e);
}

/* Push task `cl` for view v, named after its pass; its FLOPs: the op's, for
 * the share of the output the view computes (a backward task costs about
 * what the forward does). */
static int push(emit_ctx *e, const hyfi_opview *v, struct starpu_codelet *cl, const char *pass,
                const hyfi_task_args *a)
{
    char nm[64];
    hyfi_view_task_name(nm, sizeof nm, v, pass, e);
    if (hyfi_prog_push(e->P, PT_TASK, cl, nm, a)) return -1;
    const hyfi_tensor *y = v->nd->out;
    const double share = y->dims[1] > 0 && y->numel
                             ? (double)v->n * y->dims[1] * (v->hw > 0 ? v->hw : 1) / (double)y->numel
                             : 0.0;
    e->P->t[e->P->n - 1].flops = hyfi_op_flops(v->nd) * share;
    return 0;
}
#define PUSH(cl, pass, a)                                                                   \
    do {                                                                                    \
        if (push(e, v, (cl), (pass), (a))) return -1;                                       \
    } while (0)

/* ------------------------------------------------------- shapes, FLOPs */

const char *const hyfi_op_names[OP_COUNT] = {
    [OP_CONV2D] = "conv2d", [OP_BATCHNORM] = "batchnorm", [OP_RELU] = "relu",
    [OP_MAXPOOL] = "maxpool", [OP_AVGPOOL] = "avgpool", [OP_GAP] = "global_avgpool",
    [OP_ADD] = "add", [OP_CONCAT] = "concat", [OP_FC] = "fc", [OP_XENT] = "softmax_cross_entropy",
};
_Static_assert(sizeof hyfi_op_names / sizeof *hyfi_op_names == OP_COUNT, "op name table");


double hyfi_op_flops(const node *nd)
{
    const hyfi_tensor *y = nd->out;
    double out = (double)y->numel;
    switch (nd->op) {
    case OP_CONV2D: {
        const hyfi_conv2d_args *a = &nd->a.conv;
        double macs = out * (double)(a->c_in / a->groups) * a->kh * a->kw;
        return 2.0 * macs + (a->has_bias ? out : 0.0);
    }
    case OP_FC:
        return 2.0 * (double)nd->a.fc.n * nd->a.fc.in * nd->a.fc.out +
               (nd->a.fc.has_bias ? out : 0.0);
    case OP_BATCHNORM:
        return 8.0 * out; /* statistics (2 passes) and the affine normalisation */
    case OP_MAXPOOL:
    case OP_AVGPOOL:
        return out * nd->a.pool.kh * nd->a.pool.kw;
    case OP_GAP:
        return (double)nd->in[0]->numel;
    case OP_XENT:
        return 4.0 * (double)nd->in[0]->numel;
    case OP_RELU:
    case OP_ADD:
        return out;
    case OP_CONCAT:
    case OP_COUNT:
        return 0.0;
    }
    return 0.0;
}

hyfi_task_args hyfi_node_args(const node *nd, int M)
{
    hyfi_task_args a = {0};
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv = nd->a.conv;
        a.u.conv.n /= M;
        a.prec = nd->out->g->train.precision; /* bf16 weights (HYFI_W) */
        break;
    case OP_BATCHNORM:
        a.u.bn = nd->a.bn;
        a.u.bn.n /= M;
        a.blk = nd->out->blk; /* x, y, dx, dy (layout.c) */
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        a.u.pool = nd->a.pool;
        a.u.pool.n /= M;
        break;
    case OP_FC:
        a.u.fc = nd->a.fc;
        a.u.fc.n /= M;
        a.prec = nd->out->g->train.precision;
        break;
    case OP_XENT:
        a.u.xent = nd->a.xent;
        a.u.xent.n /= M;
        a.u.xent.scale = 1.0f / (float)a.u.xent.n; /* the mean over the micro-batch */
        break;
    case OP_RELU:
    case OP_ADD:
        a.u.elt.count = nd->out->numel / (size_t)M;
        break;
    case OP_CONCAT:
    case OP_COUNT:
        break;
    }
    return a;
}

int hyfi_op_windowed(const node *nd) { return nd->op == OP_CONV2D || nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL; }

void hyfi_op_window(const node *nd, int axis, int *k, int *s, int *p)
{
    *k = 1, *s = 1, *p = 0;
    if (nd->op == OP_CONV2D) {
        const hyfi_conv2d_args *c = &nd->a.conv;
        *k = axis ? c->kw : c->kh, *s = axis ? c->sw : c->sh, *p = axis ? c->pw : c->ph;
    } else if (nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL) {
        const hyfi_pool_args *c = &nd->a.pool;
        *k = axis ? c->kw : c->kh, *s = axis ? c->sw : c->sh, *p = axis ? c->pw : c->ph;
    }
}

int hyfi_op_tileable(const node *nd)
{
    return nd->op != OP_GAP && nd->op != OP_FC && nd->op != OP_XENT;
}

int hyfi_op_sums_weights_over_tiles(const node *nd) { return nd->op == OP_CONV2D; }

int hyfi_op_fusable(const node *nd)
{
    return (hyfi_op_windowed(nd) || hyfi_op_batch_statistics(nd) || nd->op == OP_RELU) &&
           nd->nin == 1;
}

int hyfi_op_writes_dx(const node *nd, int i)
{
    return i == 0 && (nd->op == OP_BATCHNORM || nd->op == OP_XENT);
}

int hyfi_op_param_grads(const node *nd) { return nd->op != OP_XENT; }

uint64_t hyfi_op_hash(uint64_t h, const node *nd)
{
    switch (nd->op) {
    case OP_CONV2D: return hyfi_hash_bytes(h, &nd->a.conv, sizeof nd->a.conv);
    case OP_BATCHNORM: return hyfi_hash_bytes(h, &nd->a.bn, sizeof nd->a.bn);
    case OP_MAXPOOL:
    case OP_AVGPOOL: return hyfi_hash_bytes(h, &nd->a.pool, sizeof nd->a.pool);
    case OP_FC: return hyfi_hash_bytes(h, &nd->a.fc, sizeof nd->a.fc);
    case OP_XENT: return hyfi_hash_bytes(h, &nd->a.xent, sizeof nd->a.xent);
    default: return h;
    }
}

int hyfi_op_batch_statistics(const node *nd) { return nd->op == OP_BATCHNORM; }

int hyfi_op_zero_padded(const node *nd)
{
    return nd->op == OP_CONV2D || (nd->op == OP_AVGPOOL && nd->a.pool.count_include_pad);
}

void hyfi_op_view_args(hyfi_opview *v, int M, int hi, int wi, int ho, int wo, int ph, int pw)
{
    const node *nd = v->nd;
    hyfi_task_args a = hyfi_node_args(nd, M);
    v->n = nd->out->dims[0] / M;
    v->hw = ho * wo;
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv.h = hi, a.u.conv.w = wi, a.u.conv.ho = ho, a.u.conv.wo = wo;
        a.u.conv.ph = ph, a.u.conv.pw = pw;
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
    case OP_ADD:
        a.u.elt.count = (size_t)v->n * nd->out->dims[1] * ho * wo;
        break;
    default:
        break;
    }
    v->a = a;
}

/* Part i of a concatenation: channels [off, off + C_i) of y. */
static hyfi_task_args concat_args(const hyfi_opview *v, int i, int off)
{
    const node *nd = v->nd;
    hyfi_task_args a = v->a;
    a.u.concat = (hyfi_concat_args){.n = v->n, .hw = v->hw, .c_part = nd->in[i]->dims[1],
                                    .c_offset = off, .c_total = nd->out->dims[1]};
    return a;
}

/* --------------------------------------------------------------- forward */

int hyfi_op_forward(emit_ctx *e, const hyfi_opview *v)
{
    program *P = e->P;
    const node *nd = v->nd;
    const hyfi_task_args *a = &v->a;
    switch (nd->op) {
    case OP_CONV2D:
        if (nd->add_out) { /* y = conv(x) + r, the add fused (layout.c) */
            PUSH(&hyfi_cl_conv2d_forward_add, "fwd", a);
            W(v->y), R(v->x[0]), R(v->x[1]), R(v->p[0]);
            if (nd->p[1]) R(v->p[1]);
            break;
        }
        /* fall through */
    case OP_FC:
        PUSH(nd->op == OP_CONV2D ? &hyfi_cl_conv2d_forward : &hyfi_cl_fc_forward, "fwd", a);
        W(v->y), R(v->x[0]), R(v->p[0]);
        if (nd->p[1]) R(v->p[1]);
        break;
    case OP_BATCHNORM:
        if (v->batch_stats) {
            PUSH(&hyfi_cl_batchnorm_forward_train, "fwd", a);
            W(v->y), W(v->s[0]), W(v->s[1]);
            hyfi_prog_buf(P, v->p[2], v->scratch_stats ? STARPU_W : STARPU_RW);
            hyfi_prog_buf(P, v->p[3], v->scratch_stats ? STARPU_W : STARPU_RW);
            R(v->x[0]), R(v->p[0]), R(v->p[1]);
        } else {
            PUSH(&hyfi_cl_batchnorm_forward_eval, "fwd", a);
            W(v->y), R(v->x[0]), R(v->p[0]), R(v->p[1]), R(v->stat[0]), R(v->stat[1]);
        }
        break;
    case OP_RELU:
        if (nd->fused) return 0; /* the batch norm's task wrote y */
        PUSH(&hyfi_cl_relu_forward, "fwd", a);
        W(v->y), R(v->x[0]);
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        PUSH(nd->op == OP_MAXPOOL   ? &hyfi_cl_maxpool_forward
             : nd->op == OP_AVGPOOL ? &hyfi_cl_avgpool_forward
                                    : &hyfi_cl_gap_forward,
             "fwd", a);
        W(v->y), R(v->x[0]);
        break;
    case OP_ADD:
        if (nd->fused) return 0; /* the convolution's task wrote y */
        PUSH(&hyfi_cl_add_forward, "fwd", a);
        W(v->y), R(v->x[0]), R(v->x[1]);
        break;
    case OP_CONCAT:
        for (int i = 0, off = 0; i < nd->nin; off += nd->in[i]->dims[1], i++) {
            hyfi_task_args ai = concat_args(v, i, off);
            char pass[16];
            snprintf(pass, sizeof pass, "fwd%d", i);
            PUSH(&hyfi_cl_concat_forward, pass, &ai);
            hyfi_prog_buf(P, v->y, i == 0 ? STARPU_W : STARPU_RW);
            R(v->x[i]);
            at(P, v->place);
        }
        return 0;
    case OP_XENT:
        PUSH(&hyfi_cl_xent_forward, "fwd", a);
        W(v->y), W(v->s[0]), R(v->x[0]), R(v->x[1]);
        break;
    case OP_COUNT:
        return 0;
    }
    at(P, v->place);
    return 0;
}

/* -------------------------------------------------------------- backward */

int hyfi_op_backward_data(emit_ctx *e, const hyfi_opview *v)
{
    program *P = e->P;
    const node *nd = v->nd;
    hyfi_task_args a = v->a;
    const hyfi_gout *dx = &v->dx[0];
    switch (nd->op) {
    case OP_CONV2D:
    case OP_FC:
        if (!dx->h) return 0;
        a.acc = gout_acc(dx);
        PUSH(nd->op == OP_CONV2D ? &hyfi_cl_conv2d_backward_data : &hyfi_cl_fc_backward_data,
             "bwd_data", &a);
        ins_gout(P, dx), R(v->dy), R(v->p[0]);
        break;
    case OP_BATCHNORM: {
        /* One kernel writes dx, dgamma and dbeta; its acc bits say which add. */
        enum starpu_data_access_mode mg, mb;
        int accg, accb;
        if (gsum_mode(e, &v->dp[0], v->place, &mg, &accg) ||
            gsum_mode(e, &v->dp[1], v->place, &mb, &accb))
            return -1;
        a.acc = (gout_acc(dx) ? HYFI_BN_ACC_DX : 0) | (accg ? HYFI_BN_ACC_PARAMS : 0);
        PUSH(&hyfi_cl_batchnorm_backward, "bwd", &a);
        ins_gout(P, dx);
        hyfi_prog_buf(P, v->dp[0].h, mg);
        hyfi_prog_buf(P, v->dp[1].h, mb);
        R(v->dy), R(v->x[0]), R(v->p[0]), R(v->s[0]), R(v->s[1]);
        if (a.u.bn.relu) R(v->y); /* fused ReLU: its output, the mask of dy */
        break;
    }
    case OP_RELU:
        if (!dx->h || nd->fused) return 0; /* fused: the batch norm's backward masks dy */
        a.acc = gout_acc(dx);
        PUSH(&hyfi_cl_relu_backward, "bwd", &a);
        ins_gout(P, dx), R(v->dy), R(v->y);
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        if (!dx->h) return 0;
        a.acc = gout_acc(dx);
        PUSH(nd->op == OP_MAXPOOL   ? &hyfi_cl_maxpool_backward
             : nd->op == OP_AVGPOOL ? &hyfi_cl_avgpool_backward
                                    : &hyfi_cl_gap_backward,
             "bwd", &a);
        ins_gout(P, dx), R(v->dy);
        if (nd->op == OP_MAXPOOL) R(v->x[0]);
        break;
    case OP_ADD:
        /* dx_i += dy */
        for (int i = 0; i < 2; i++) {
            if (!v->dx[i].h) continue;
            hyfi_task_args ai = {.acc = gout_acc(&v->dx[i]), .u.elt.count = v->a.u.elt.count};
            char pass[16];
            snprintf(pass, sizeof pass, "bwd%d", i);
            PUSH(&hyfi_cl_accumulate, pass, &ai);
            ins_gout(P, &v->dx[i]), R(v->dy);
            at(P, v->dplace[i]);
            gout_done(&v->dx[i]);
        }
        return 0;
    case OP_CONCAT:
        for (int i = 0, off = 0; i < nd->nin; off += nd->in[i]->dims[1], i++) {
            if (!v->dx[i].h) continue;
            hyfi_task_args ai = concat_args(v, i, off);
            ai.acc = gout_acc(&v->dx[i]);
            char pass[16];
            snprintf(pass, sizeof pass, "bwd%d", i);
            PUSH(&hyfi_cl_concat_backward, pass, &ai);
            ins_gout(P, &v->dx[i]), R(v->dy);
            at(P, v->dplace[i]);
            gout_done(&v->dx[i]);
        }
        return 0;
    case OP_XENT:
        a.acc = gout_acc(dx);
        PUSH(&hyfi_cl_xent_backward, "bwd", &a);
        ins_gout(P, dx), R(v->s[0]), R(v->x[1]), R(v->dy);
        break;
    case OP_COUNT:
        return 0;
    }
    at(P, v->dplace[0]);
    gout_done(dx);
    return 0;
}

int hyfi_op_backward_params(emit_ctx *e, const hyfi_opview *v)
{
    program *P = e->P;
    const node *nd = v->nd;
    if (nd->op != OP_CONV2D && nd->op != OP_FC) return 0;
    enum starpu_data_access_mode mw, mb = STARPU_W;
    int accw, accb;
    if (gsum_mode(e, &v->dp[0], v->place, &mw, &accw)) return -1;
    if (nd->p[1] && gsum_mode(e, &v->dp[1], v->place, &mb, &accb)) return -1;
    hyfi_task_args a = v->a;
    a.acc = accw; /* weight and bias are always written together */
    PUSH(nd->op == OP_CONV2D ? &hyfi_cl_conv2d_backward_weight : &hyfi_cl_fc_backward_weight,
         "bwd_weight", &a);
    hyfi_prog_buf(P, v->dp[0].h, mw);
    if (nd->p[1]) hyfi_prog_buf(P, v->dp[1].h, mb);
    R(v->dy), R(v->x[0]);
    at(P, v->place);
    return 0;
}

/* ------------------------------------------------- batch norm over parts */

int hyfi_bn_part_stats(emit_ctx *e, const hyfi_opview *v, hyfi_ref part)
{
    program *P = e->P;
    hyfi_task_args s = {.u.bnt = {.bn = v->a.u.bn}};
    PUSH(&hyfi_cl_bn_stats, "stats", &s);
    W(part), R(v->x[0]);
    at(P, v->dplace[0]);
    return 0;
}

static hyfi_bn_combine_args combine_args(const node *nd, const double *count, int nparts,
                                         int nbufs)
{
    hyfi_bn_combine_args ca = {.c = nd->in[0]->dims[1], .nparts = nparts, .eps = nd->a.bn.eps,
                               .momentum = nd->a.bn.momentum,
                               .npackets = nbufs < nparts ? nbufs : 0};
    for (int q = 0; q < nparts; q++) ca.count[q] = count[q];
    return ca;
}

int hyfi_bn_combine(emit_ctx *e, const node *nd, const double *count, int nparts, hyfi_ref mean,
                    hyfi_ref var, hyfi_ref rmean, hyfi_ref rvar, const hyfi_ref *bufs, int nbufs)
{
    program *P = e->P;
    char nm[64];
    hyfi_task_args c = {.u.bnc = combine_args(nd, count, nparts, nbufs)};
    hyfi_task_name(nm, sizeof nm, nd, "combine", e);
    TASK(&hyfi_cl_bn_combine, nm, &c);
    W(mean), W(var), RW(rmean), RW(rvar);
    for (int q = 0; q < nbufs; q++) R(bufs[q]);
    return 0;
}

int hyfi_bn_part_bwd_stats(emit_ctx *e, const hyfi_opview *v, hyfi_ref part)
{
    program *P = e->P;
    hyfi_task_args s = {.u.bnt = {.bn = v->a.u.bn}};
    PUSH(&hyfi_cl_bn_bwd_stats, "bwd_stats", &s);
    W(part), R(v->dy), R(v->x[0]), R(v->s[0]);
    at(P, v->dplace[0]);
    return 0;
}

int hyfi_bn_bwd_combine(emit_ctx *e, const hyfi_opview *v, const double *count, int nparts,
                        hyfi_ref tot, const hyfi_ref *bufs, int nbufs)
{
    program *P = e->P;
    const node *nd = v->nd;
    char nm[64];
    enum starpu_data_access_mode mg, mb;
    int accg, accb;
    if (gsum_mode(e, &v->dp[0], -1, &mg, &accg) || gsum_mode(e, &v->dp[1], -1, &mb, &accb))
        return -1;
    hyfi_task_args c = {.acc = accg ? HYFI_BN_ACC_PARAMS : 0,
                        .u.bnc = combine_args(nd, count, nparts, nbufs)};
    hyfi_task_name(nm, sizeof nm, nd, "bwd_combine", e);
    TASK(&hyfi_cl_bn_bwd_combine, nm, &c);
    W(tot);
    hyfi_prog_buf(P, v->dp[0].h, mg);
    hyfi_prog_buf(P, v->dp[1].h, mb);
    R(v->s[1]);
    for (int q = 0; q < nbufs; q++) R(bufs[q]);
    return 0;
}

int hyfi_bn_part_bwd_apply(emit_ctx *e, const hyfi_opview *v, double total, hyfi_ref tot,
                           const char *pass)
{
    program *P = e->P;
    hyfi_task_args s = {.acc = gout_acc(&v->dx[0]) ? HYFI_BN_ACC_DX : 0,
                        .u.bnt = {.bn = v->a.u.bn, .total = total}};
    PUSH(&hyfi_cl_bn_bwd_apply, pass, &s);
    ins_gout(P, &v->dx[0]);
    R(v->dy), R(v->x[0]), R(v->p[0]), R(v->s[0]), R(v->s[1]), R(tot);
    at(P, v->dplace[0]);
    gout_done(&v->dx[0]);
    return 0;
}
