/* StarPU codelets of the conv2d family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* y, x, w[, b] */
HYFI_CODELET(conv2d_forward, t->u.conv.has_bias ? "wrrr" : "wrr", HYFI_F(0), HYFI_F(1), HYFI_F(2),
             t->u.conv.has_bias ? HYFI_F(3) : NULL, &t->u.conv)
/* dx, dy, w */
HYFI_CODELET(conv2d_backward_data, "wrr", HYFI_F(0), HYFI_F(1), HYFI_F(2), &t->u.conv, t->acc)
/* dw[, db], dy, x */
HYFI_CODELET(conv2d_backward_weight, t->u.conv.has_bias ? "wwrr" : "wrr",
             HYFI_F(0), t->u.conv.has_bias ? HYFI_F(1) : NULL,
             HYFI_F(t->u.conv.has_bias ? 2 : 1), HYFI_F(t->u.conv.has_bias ? 3 : 2), &t->u.conv,
             t->acc)
