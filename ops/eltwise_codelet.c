/* StarPU codelets of the elementwise family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* y, x */
HYFI_CODELET(relu_forward, HYFI_F(0), HYFI_F(1), t->u.elt.count)
/* dx, dy, y */
HYFI_CODELET(relu_backward, HYFI_F(0), HYFI_F(1), HYFI_F(2), t->u.elt.count, t->acc)
/* y, a, b */
HYFI_CODELET(add_forward, HYFI_F(0), HYFI_F(1), HYFI_F(2), t->u.elt.count)
/* dst, src */
HYFI_CODELET(accumulate, HYFI_F(0), HYFI_F(1), t->u.elt.count, t->acc)
/* dst */
HYFI_CODELET(fill, HYFI_F(0), t->u.elt.value, t->u.elt.count)
