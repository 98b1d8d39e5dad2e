/* StarPU codelets of the channel-concat family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* y (RW: other parts are written by other tasks), x */
HYFI_CODELET(concat_forward, "wr", HYFI_F(0), HYFI_F(1), &t->u.concat)
/* dx, dy */
HYFI_CODELET(concat_backward, "wr", HYFI_F(0), HYFI_F(1), &t->u.concat, t->acc)
