/* StarPU codelets of the batch-norm family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* y, mean, var, run_mean, run_var, x, gamma, beta */
HYFI_CODELET(batchnorm_forward_train, "wwwwwrrr", HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3),
             HYFI_F(4), HYFI_F(5), HYFI_F(6), HYFI_F(7), &t->u.bn, t->blk)
/* y, x, gamma, beta, run_mean, run_var */
HYFI_CODELET(batchnorm_forward_eval, "wrrrrr", HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3),
             HYFI_F(4), HYFI_F(5), &t->u.bn, t->blk)
/* dx, dgamma, dbeta, dy, x, gamma, mean, var, and y (the output) with a fused ReLU */
HYFI_CODELET(batchnorm_backward, t->u.bn.relu ? "wwwrrrrrr" : "wwwrrrrr", HYFI_F(0), HYFI_F(1),
             HYFI_F(2), HYFI_F(3), HYFI_F(4), HYFI_F(5), t->u.bn.relu ? HYFI_F(8) : NULL,
             HYFI_F(6), HYFI_F(7), &t->u.bn, t->acc, t->blk)
