/* StarPU codelets of the fully-connected family: buffers in kernel order (outputs first); see codelet_common.h.
 * In bf16 tasks the weight and bias are read rounded to bf16 (HYFI_W); the
 * backward of the weights reads bf16 activations and writes float32. */
#include "codelet_common.h"

/* y, x, w[, b] */
HYFI_CODELET(fc_forward, t->u.fc.has_bias ? "wrrr" : "wrr", HYFI_F(0), HYFI_F(1),
             HYFI_W(2, 0), t->u.fc.has_bias ? HYFI_W(3, 1) : NULL, &t->u.fc)
/* dx, dy, w */
HYFI_CODELET(fc_backward_data, "wrr", HYFI_F(0), HYFI_F(1), HYFI_W(2, 0), &t->u.fc, t->acc)
/* dw[, db], dy, x */
HYFI_CODELET(fc_backward_weight, t->u.fc.has_bias ? "wwrr" : "wrr",
             HYFI_F(0), t->u.fc.has_bias ? HYFI_F(1) : NULL,
             HYFI_F(t->u.fc.has_bias ? 2 : 1), HYFI_F(t->u.fc.has_bias ? 3 : 2), &t->u.fc,
             t->acc)
