/* StarPU codelets of the pooling family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* Every buffer bf16-stored: the bf16 kernels (pool_cpu_bf16.c), bitwise the
 * staged float32 ones with one unit's scratch per thread. */
#define ALL16 hyfi_ops_all_bf16(buffers)
#define U16(i) HYFI_U16(i)
/* y, x */
HYFI_CODELET_NATIVE(maxpool_forward, "wr", ALL16,
                    hyfi_maxpool_forward_bf16(U16(0), U16(1), &t->u.pool), HYFI_F(0), HYFI_F(1),
                    &t->u.pool)
/* dx, dy, x */
HYFI_CODELET_NATIVE(maxpool_backward, "wrr", ALL16,
                    hyfi_maxpool_backward_bf16(U16(0), U16(1), U16(2), &t->u.pool, t->acc),
                    HYFI_F(0), HYFI_F(1), HYFI_F(2), &t->u.pool, t->acc)
/* y, x */
HYFI_CODELET_NATIVE(avgpool_forward, "wr", ALL16,
                    hyfi_avgpool_forward_bf16(U16(0), U16(1), &t->u.pool), HYFI_F(0), HYFI_F(1),
                    &t->u.pool)
/* dx, dy */
HYFI_CODELET_NATIVE(avgpool_backward, "wr", ALL16,
                    hyfi_avgpool_backward_bf16(U16(0), U16(1), &t->u.pool, t->acc), HYFI_F(0),
                    HYFI_F(1), &t->u.pool, t->acc)
/* y, x */
HYFI_CODELET_NATIVE(gap_forward, "wr", ALL16, hyfi_gap_forward_bf16(U16(0), U16(1), &t->u.pool),
                    HYFI_F(0), HYFI_F(1), &t->u.pool)
/* dx, dy */
HYFI_CODELET_NATIVE(gap_backward, "wr", ALL16,
                    hyfi_gap_backward_bf16(U16(0), U16(1), &t->u.pool, t->acc), HYFI_F(0),
                    HYFI_F(1), &t->u.pool, t->acc)
