/* StarPU codelets of the batch-norm family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* With the activations (and only they) stored as bf16, the bf16 kernels
 * (batchnorm_cpu_bf16.c: bitwise the staged float32 ones, in place). */
#define U16(i) HYFI_U16(i)

/* y, mean, var, run_mean, run_var, x, gamma, beta; bf16: y, x */
HYFI_CODELET_NATIVE(batchnorm_forward_train, "wwwwwrrr", hyfi_ops_bf16_mask(buffers) == 0x21u,
                    hyfi_batchnorm_forward_train_bf16(U16(0), HYFI_F(1), HYFI_F(2), HYFI_F(3),
                                                      HYFI_F(4), U16(5), HYFI_F(6), HYFI_F(7),
                                                      &t->u.bn, t->blk),
                    HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), HYFI_F(4), HYFI_F(5), HYFI_F(6),
                    HYFI_F(7), &t->u.bn, t->blk)
/* y, x, gamma, beta, run_mean, run_var; bf16: y, x */
HYFI_CODELET_NATIVE(batchnorm_forward_eval, "wrrrrr", hyfi_ops_bf16_mask(buffers) == 0x3u,
                    hyfi_batchnorm_forward_eval_bf16(U16(0), U16(1), HYFI_F(2), HYFI_F(3),
                                                     HYFI_F(4), HYFI_F(5), &t->u.bn, t->blk),
                    HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), HYFI_F(4), HYFI_F(5), &t->u.bn,
                    t->blk)
/* dx, dgamma, dbeta, dy, x, gamma, mean, var, and y (the output) with a fused
 * ReLU; bf16: dx, dy, x (and y) */
HYFI_CODELET_NATIVE(batchnorm_backward, t->u.bn.relu ? "wwwrrrrrr" : "wwwrrrrr",
                    hyfi_ops_bf16_mask(buffers) == (t->u.bn.relu ? 0x119u : 0x19u),
                    hyfi_batchnorm_backward_bf16(U16(0), HYFI_F(1), HYFI_F(2), U16(3), U16(4),
                                                 HYFI_F(5), t->u.bn.relu ? U16(8) : NULL,
                                                 HYFI_F(6), HYFI_F(7), &t->u.bn, t->acc,
                                                 t->blk),
                    HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), HYFI_F(4), HYFI_F(5),
                    t->u.bn.relu ? HYFI_F(8) : NULL, HYFI_F(6), HYFI_F(7), &t->u.bn, t->acc,
                    t->blk)
