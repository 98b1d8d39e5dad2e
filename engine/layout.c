/* Activation layouts: which tensors live in oneDNN's channel-blocked layout
 * (nChw8c / nChw16c, ops/layout_ref.c) between tasks.
 *
 * oneDNN's convolutions run on blocked activations; on plain NCHW tensors
 * every call reorders its input in and its output out (and the backward
 * both gradients): 116 activation reorders per step of ResNet-50 at 128x128,
 * 8 with this (docs/bench-cpu.md). So an activation whose every producer and
 * consumer can work on the blocked layout is kept in it: the convolutions
 * (input and output each on its own), batch norm, ReLU, add, max and average
 * pooling (input and output alike), channel concatenation (its parts and its
 * output alike: with every part's channels a multiple of the block, a part is
 * one contiguous run per sample in nChw16c as in NCHW, c_part H W values at
 * c_offset H W, so ops/concat_cpu.c is the same copy) and global average
 * pooling (its input; its (N, C) output is the same in both layouts). Batch
 * norm, ReLU, add, the pools and concatenation tie their tensors together; a
 * class of tied tensors is blocked only if all of its tensors qualify: 4-D
 * with C a multiple of the block, produced by one of those ops (not a graph
 * input), read only by them, and outside the tiled stages of a spatial plan
 * (tiles, halos and gathers slice NCHW rows). The rest stays NCHW, so the
 * reorders happen only at those edges (fully connected layers, the stem's
 * input, tiles, channel counts off the block).
 *
 * Only for CPU-only runs: the CUDA kernels take NCHW, and a task may run on
 * either kind of worker. Ranks agree on the decision (every rank keeps the
 * same tensors blocked, whatever crosses between them), and it does not
 * depend on stages, micro-batches or replicas, so every such plan computes
 * what the one-place run computes, bit for bit as before.
 * hyfi_plan_config.plain_layouts (HYFI_BLOCKED=0 in hyfi-train) turns it off.
 * The simulation build keeps NCHW (its calibrated models are of the
 * plain kernels). hyfi_tensor_read and hyfi_grad_read return NCHW.
 *
 * Weights: a convolution that runs oneDNN's blocked kernels (not the plain
 * 1x1 GEMM) with Cin and Cout multiples of the block keeps its weights, their
 * gradient and momentum in OIhw16i16o (OIhw8i8o), the layout of oneDNN's
 * forward and backward-weights kernels: before, each step reordered every
 * such weight three times (in for the forward and the backward data, the
 * weight gradient out), 85 of ResNet-50's 266 ms of oneDNN time per step at
 * 64x64; now only the backward data's remain (17 ms). The optimizer, the all-reduce and the micro-batch sums are
 * element-wise, so only the edges convert (hyfi_layout_convert): the
 * initialisation, hyfi_tensor_write/read, hyfi_grad_read, checkpoints and
 * saved models, which stay OIHW on disk. hyfi_plan_config.plain_weights
 * (HYFI_BLOCKED_WEIGHTS=0 in hyfi-train) turns this part off. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static int find(int *up, int i)
{
    while (up[i] != i) i = up[i] = up[up[i]];
    return i;
}

static void join(int *up, int a, int b)
{
    a = find(up, a), b = find(up, b);
    if (a != b) up[a] = b;
}

/* Whether op `nd` can read and write blocked activations (the global pool:
 * read; its output is NCHW). */
static int takes_blocked(const node *nd)
{
    return nd->op == OP_CONV2D || nd->op == OP_BATCHNORM || nd->op == OP_RELU ||
           nd->op == OP_ADD || nd->op == OP_GAP || nd->op == OP_MAXPOOL ||
           nd->op == OP_AVGPOOL || nd->op == OP_CONCAT;
}

/* Whether op `nd` keeps its inputs and output in one layout. */
static int ties(const node *nd)
{
    return nd->op == OP_BATCHNORM || nd->op == OP_RELU || nd->op == OP_ADD ||
           nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL || nd->op == OP_CONCAT;
}

hyfi_status hyfi_layout_plan(hyfi_graph *g)
{
    int B = 0;
#ifndef STARPU_SIMGRID
    if (!g->plan_cfg.plain_layouts && g->ctx->ncuda == 0) B = hyfi_cpu_channel_block();
#endif
    /* every rank the same: none blocks if one cannot; 8 if one has only AVX2 */
    bool none = B == 0, eight = B == 8;
    if (g->ctx->mpi && g->ctx->nranks > 1) {
        hyfi_status s = hyfi_ctx_any(g->ctx, B == 0, &none);
        if (s == HYFI_OK) s = hyfi_ctx_any(g->ctx, B == 8, &eight);
        if (s != HYFI_OK) return s;
    }
    for (int i = 0; i < g->ntensors; i++) g->tensors[i]->blk = 0;
    if (none) return HYFI_OK;
    if (eight) B = 8;
    const int nt = g->ntensors;
    int *up = malloc((size_t)nt * sizeof *up);
    unsigned char *bad = calloc((size_t)nt, 1);
    if (!up || !bad) {
        free(up), free(bad);
        return HYFI_OK; /* plain NCHW: slower, never wrong */
    }
    for (int i = 0; i < nt; i++) {
        const hyfi_tensor *t = g->tensors[i];
        up[i] = i;
        bad[i] = t->kind != T_ACT || t->is_int || !t->batched || t->dims[1] % B ||
                 t->producer < 0;
    }
    for (int k = 0; k < g->nnodes; k++) {
        const node *nd = &g->nodes[k];
        const int ok = takes_blocked(nd) && !hyfi_spatial_tiled(g, nd);
        if (!ok || nd->op == OP_GAP) bad[nd->out->id] = 1;
        for (int i = 0; i < nd->nin; i++) {
            if (!ok) bad[nd->in[i]->id] = 1;
            if (ok && ties(nd)) join(up, nd->in[i]->id, nd->out->id);
        }
    }
    for (int i = 0; i < nt; i++)
        if (bad[i]) bad[find(up, i)] = 1;
    for (int i = 0; i < nt; i++) g->tensors[i]->blk = bad[find(up, i)] ? 0 : B;
    const int wblk = g->plan_cfg.plain_weights ? 0 : B;
    for (int k = 0; k < g->nnodes; k++) {
        node *nd = &g->nodes[k];
        if (nd->op == OP_CONV2D) {
            hyfi_conv2d_args *c = &nd->a.conv;
            c->src_blk = nd->in[0]->blk;
            c->dst_blk = nd->out->blk;
            /* Weights: blocked where oneDNN runs its blocked kernels, i.e. not
             * on the plain 1x1 GEMM path (conv2d_cpu.c: both sides NCHW) */
            const int gemm = !c->src_blk && !c->dst_blk && c->kh == 1 && c->kw == 1 &&
                             c->sh == 1 && c->sw == 1;
            hyfi_tensor *w = nd->p[0];
            w->blk = wblk && c->groups == 1 && c->c_in % wblk == 0 && c->c_out % wblk == 0 &&
                             !gemm && !hyfi_spatial_tiled(g, nd)
                         ? wblk
                         : 0;
            c->wei_blk = w->blk;
        } else if (nd->op == OP_GAP || nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL) {
            nd->a.pool.blk = nd->in[0]->blk; /* max / average: the output's too (tied) */
        }
    }
    free(up);
    free(bad);
    return HYFI_OK;
}

/* Convolution + residual add fusion. A convolution whose output only an add
 * reads writes the add's output itself, y = conv(x) + r (its codelet
 * hyfi_cl_conv2d_forward_add), and the add has no forward task; the
 * convolution's output is never made, its gradient is the add's output
 * gradient (as compile.c's gradient forwarding). One task and one buffer
 * fewer per residual block, r added while y is in cache (ResNet-110 v2: 36
 * adds a step). In bf16 the convolution's result is rounded before r is added,
 * so the values are those of the two ops bit for bit. With the conditions of
 * the batch norm's fusion below (CPU-only, one stage and one layer, untiled,
 * one layout), and r made before the convolution (its forward reads it) in
 * the same stage. hyfi_plan_config.no_fuse_conv_add
 * (HYFI_FUSE_CONV_ADD=0 in hyfi-train) turns it off. */
static int conv_add_on(hyfi_graph *g)
{
    /* its codelet has no CUDA function: no rank with CUDA workers fuses */
    const bool off = g->plan_cfg.no_fuse_conv_add || g->ctx->ncuda > 0;
    bool none = off;
    if (g->ctx->mpi && g->ctx->nranks > 1 && hyfi_ctx_any(g->ctx, off, &none) != HYFI_OK)
        return 0;
    return !none;
}

static void fuse_conv_add(hyfi_graph *g, const int *nread, const int *reader)
{
    for (int k = 0; k < g->nnodes; k++) {
        node *c = &g->nodes[k];
        if (c->op != OP_CONV2D) continue;
        hyfi_tensor *t = c->out;
        if (nread[t->id] != 1 || t == g->loss || t->fused) continue;
        node *ad = &g->nodes[reader[t->id]];
        if (ad->op != OP_ADD || ad->fused || ad->nin != 2 || ad->in[0] == ad->in[1]) continue;
        hyfi_tensor *r = ad->in[ad->in[0] == t ? 1 : 0];
        if (ad->stage != c->stage || ad->layer != c->layer || r->stage != c->stage ||
            r->producer >= k || hyfi_spatial_tiled(g, c) || hyfi_spatial_tiled(g, ad) ||
            ad->out->blk != t->blk || r->blk != t->blk || r->mb_numel != t->mb_numel)
            continue;
        c->add_out = ad->out;
        c->add_res = r;
        ad->fused = 1;
        t->fused = 1;
    }
}

/* Batch norm + ReLU fusion. A batch norm whose output only a ReLU reads runs
 * the ReLU in its own tasks (ops/batchnorm_cpu.c): the forward writes the
 * ReLU's output, the backward reads that output and its gradient and masks
 * the gradient by it, so the batch norm's own output and its gradient are
 * never made: 10 passes over the activations instead of 13, and two tasks
 * fewer per pair and micro-batch. The values are those of the two ops bit for
 * bit (tests/test_op_batchnorm.c), so fusing changes no result. Like the blocked layouts, only
 * for CPU-only runs (every rank), and only where both ops are in one stage
 * and one layer (so in one re-materialisation segment), untiled.
 * Every plan fuses the same pairs as its one-place run, so the plans still
 * compute what it computes, bit for bit where they did. The fused output is
 * not readable (hyfi_tensor_read, hyfi_grad_read: HYFI_ERR_STATE naming the
 * switch): hyfi_plan_config.no_fuse_bn_relu (HYFI_FUSE_BN_RELU=0 in hyfi-train)
 * turns fusion off. */
hyfi_status hyfi_fuse_plan(hyfi_graph *g)
{
    for (int k = 0; k < g->nnodes; k++) {
        node *nd = &g->nodes[k];
        nd->relu_out = nd->add_out = nd->add_res = NULL;
        nd->fused = 0;
        if (nd->op == OP_BATCHNORM) nd->a.bn.relu = 0;
    }
    for (int i = 0; i < g->ntensors; i++) g->tensors[i]->fused = 0;
    int can = 1;
#ifdef STARPU_SIMGRID
    can = 0; /* the calibrated models are of the separate kernels */
#endif
    if (g->plan_cfg.no_fuse_bn_relu || g->ctx->ncuda > 0) can = 0;
    bool none = !can;
    if (g->ctx->mpi && g->ctx->nranks > 1) {
        hyfi_status s = hyfi_ctx_any(g->ctx, !can, &none);
        if (s != HYFI_OK) return s;
    }
    if (none) return HYFI_OK;
    /* readers of each tensor: how many, and the last one */
    int *nread = calloc((size_t)g->ntensors, sizeof *nread);
    int *reader = calloc((size_t)g->ntensors, sizeof *reader);
    if (!nread || !reader) {
        free(nread), free(reader);
        return HYFI_OK; /* unfused: slower, never wrong */
    }
    for (int k = 0; k < g->nnodes; k++) {
        const node *nd = &g->nodes[k];
        for (int i = 0; i < nd->nin; i++) {
            nread[nd->in[i]->id]++;
            reader[nd->in[i]->id] = k;
        }
    }
    for (int k = 0; k < g->nnodes; k++) {
        node *bn = &g->nodes[k];
        if (bn->op != OP_BATCHNORM) continue;
        hyfi_tensor *t = bn->out;
        if (nread[t->id] != 1 || t == g->loss) continue;
        node *r = &g->nodes[reader[t->id]];
        /* one layer and one stage: one re-materialisation segment in either
         * mode, where the batch norm (its output read only there) is re-run
         * whenever the ReLU is; a re-run batch norm re-makes the ReLU's output,
         * the same values bit for bit, also where that output is kept */
        if (r->op != OP_RELU || r->stage != bn->stage || r->layer != bn->layer ||
            hyfi_spatial_tiled(g, bn) || hyfi_spatial_tiled(g, r) || r->out->blk != t->blk)
            continue;
        bn->relu_out = r->out;
        bn->a.bn.relu = 1;
        r->fused = 1;
        t->fused = 1;
    }
    if (conv_add_on(g)) fuse_conv_add(g, nread, reader);
    free(nread);
    free(reader);
    return HYFI_OK;
}

void hyfi_layout_copy(const hyfi_tensor *t, float *dst, const float *src, int to_plain)
{
    const int k = t->dims[2] * t->dims[3];
    if (!t->blk) {
        memcpy(dst, src, t->numel * sizeof *dst);
    } else if (t->kind == T_PARAM) { /* convolution weights (O, I, KH, KW) */
        if (to_plain) hyfi_layout_wei_to_plain(dst, src, t->dims[0], t->dims[1], k, t->blk);
        else hyfi_layout_wei_to_blocked(dst, src, t->dims[0], t->dims[1], k, t->blk);
    } else { /* activations (N, C, H, W) */
        if (to_plain) hyfi_layout_to_plain(dst, src, t->dims[0], t->dims[1], k, t->blk);
        else hyfi_layout_to_blocked(dst, src, t->dims[0], t->dims[1], k, t->blk);
    }
}

int hyfi_layout_convert(const hyfi_tensor *t, float *buf, int to_plain)
{
    if (!t->blk) return 0;
    float *tmp = malloc(t->numel * sizeof *tmp);
    if (!tmp) return -1;
    hyfi_layout_copy(t, tmp, buf, to_plain);
    memcpy(buf, tmp, t->numel * sizeof *tmp);
    free(tmp);
    return 0;
}
