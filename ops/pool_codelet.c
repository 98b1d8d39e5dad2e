/* StarPU codelets of the pooling family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* y, x */
HYFI_CODELET(maxpool_forward, "wr", HYFI_F(0), HYFI_F(1), &t->u.pool)
/* dx, dy, x */
HYFI_CODELET(maxpool_backward, "wrr", HYFI_F(0), HYFI_F(1), HYFI_F(2), &t->u.pool, t->acc)
/* y, x */
HYFI_CODELET(avgpool_forward, "wr", HYFI_F(0), HYFI_F(1), &t->u.pool)
/* dx, dy */
HYFI_CODELET(avgpool_backward, "wr", HYFI_F(0), HYFI_F(1), &t->u.pool, t->acc)
/* y, x */
HYFI_CODELET(gap_forward, "wr", HYFI_F(0), HYFI_F(1), &t->u.pool)
/* dx, dy */
HYFI_CODELET(gap_backward, "wr", HYFI_F(0), HYFI_F(1), &t->u.pool, t->acc)
