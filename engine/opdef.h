/* Op definitions: every op kind described once — its FLOPs, its kernel
 * arguments for a view of given shape, and the tasks of its forward and
 * backward over abstract views (y, x, w, b, statistics, saved tensors, dy,
 * dx, dw, db). A lowering (whole tensors and micro-batches in compile.c, tiles
 * in spatial.c, fused-halo regions in spatial_fused.c) decides only which
 * handle each view is, its shape and the place that runs each task; it never
 * names a codelet of an op.
 *
 * Gradient outputs carry their own bookkeeping, as Chameleon's INSERT_TASK_*
 * helpers decide access mode and accumulate flag together:
 *   hyfi_gout  an activation gradient: the first task writing it overwrites
 *              (W, acc 0), the next ones add (RW, acc 1); or a fresh buffer
 *              that one task writes (no flag: W, acc 0)
 *   hyfi_gsum  a parameter gradient summed over micro-batches
 *              (hyfi_grad_sum_mode: W, ordered accumulation or a reduction)
 */
#ifndef HYFI_ENGINE_OPDEF_H
#define HYFI_ENGINE_OPDEF_H

#include "emit.h"

/* Inputs of one op (concat is the only op with more than two). */
#define HYFI_OP_MAX_IN 32

typedef struct hyfi_gout {
    hyfi_ref h;              /* NULL: no gradient wanted */
    unsigned char *written;  /* compile-time flag of h, NULL: a fresh buffer (always W) */
    hyfi_tensor *t;          /* whose gradient it is (t->gwritten), or NULL */
} hyfi_gout;

typedef struct hyfi_gsum {
    hyfi_ref h;
    unsigned char *written;  /* compile-time flag of h */
    hyfi_tensor *p;          /* the parameter */
} hyfi_gsum;

typedef struct hyfi_opview {
    const node *nd;
    hyfi_task_args a;        /* the kernel's arguments for this view (hyfi_op_view_args) */
    int n, hw;               /* batch rows and output H*W of the view */
    int tile;                /* -1: whole tensors, else the tile (task names: .t<tile>) */
    int place;               /* forward and parameter-gradient tasks; -1: the event's */
    int dplace[HYFI_OP_MAX_IN]; /* the data-gradient task of input i; -1: the event's */
    hyfi_ref y;
    hyfi_ref x[HYFI_OP_MAX_IN]; /* xent: logits, labels */
    hyfi_ref p[4];              /* conv, fc: weight, bias; bn: gamma, beta, running mean, var */
    hyfi_ref s[2];              /* saved: bn batch mean, var; xent probabilities */
    /* batch norm forward: 1 computes the batch statistics into s[] (and the
     * running ones); 0 normalises with stat[] (running or given statistics) */
    int batch_stats;
    /* with batch_stats: s[] and p[2], p[3] are scratch handles the task only
     * writes (re-materialisation: the same kernel on the same x gives the same
     * y; the saved and running statistics stay untouched) */
    int scratch_stats;
    hyfi_ref stat[2];
    hyfi_ref dy;
    hyfi_gout dx[HYFI_OP_MAX_IN];
    hyfi_gsum dp[2];         /* conv, fc: weight, bias; bn: gamma, beta */
} hyfi_opview;

/* The op's arguments for one micro-batch of M: the batch dimension divided. */
hyfi_task_args hyfi_node_args(const node *nd, int M);
/* A view of the op on part of its tensors: input hi x wi, output ho x wo, the
 * padding the kernel applies (windowed ops). Fills v->a, v->n, v->hw. */
void hyfi_op_view_args(hyfi_opview *v, int M, int hi, int wi, int ho, int wo, int ph, int pw);

/* The tasks. Forward: the op on the view. Backward, data: the gradient of
 * every input whose dx view is wanted. Backward, parameters: the parameter
 * gradients (batch norm computes them with dx in one task: its data part does
 * everything, its parameter part nothing). */
int hyfi_op_forward(emit_ctx *e, const hyfi_opview *v);
int hyfi_op_backward_data(emit_ctx *e, const hyfi_opview *v);
int hyfi_op_backward_params(emit_ctx *e, const hyfi_opview *v);

/* Batch norm over parts (tiles): statistics of each part, combined into the
 * batch's, then each part normalised with them (hyfi_op_forward with
 * batch_stats 0); backward the same in three steps. The tiles lowering puts
 * these around the op. The combines read the nparts tiles' parts from nbufs
 * buffers: one per tile, or packets of the parts of consecutive tiles
 * (spatial_bn.c), in tile order. */
int hyfi_bn_part_stats(emit_ctx *e, const hyfi_opview *v, hyfi_ref part);
int hyfi_bn_combine(emit_ctx *e, const node *nd, const double *count, int nparts, hyfi_ref mean,
                    hyfi_ref var, hyfi_ref rmean, hyfi_ref rvar, const hyfi_ref *bufs, int nbufs);
int hyfi_bn_part_bwd_stats(emit_ctx *e, const hyfi_opview *v, hyfi_ref part);
int hyfi_bn_bwd_combine(emit_ctx *e, const hyfi_opview *v, const double *count, int nparts,
                        hyfi_ref tot, const hyfi_ref *bufs, int nbufs);
int hyfi_bn_part_bwd_apply(emit_ctx *e, const hyfi_opview *v, double total, hyfi_ref tot,
                           const char *pass);

/* Task names: "<op>.<pass>[.t<tile>][.mb<m>]". */
void hyfi_view_task_name(char *out, size_t len, const hyfi_opview *v, const char *pass,
                         const emit_ctx *e);

#endif
