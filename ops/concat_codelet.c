/* StarPU codelets of the channel-concat family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* Both buffers bf16-stored: the bf16 kernels (concat_cpu.c), bitwise the
 * staged ones without widening the whole of y for each part. */
/* y (RW: other parts are written by other tasks), x */
HYFI_CODELET_NATIVE(concat_forward, "wr", hyfi_ops_all_bf16(buffers),
                    hyfi_concat_forward_bf16(HYFI_U16(0), HYFI_U16(1), &t->u.concat),
                    HYFI_F(0), HYFI_F(1), &t->u.concat)
/* dx, dy */
HYFI_CODELET_NATIVE(concat_backward, "wr", hyfi_ops_all_bf16(buffers),
                    hyfi_concat_backward_bf16(HYFI_U16(0), HYFI_U16(1), &t->u.concat, t->acc),
                    HYFI_F(0), HYFI_F(1), &t->u.concat, t->acc)
