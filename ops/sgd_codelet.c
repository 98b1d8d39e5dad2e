/* StarPU codelets of the SGD family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* w, v (momentum buffer), norms (2: sum of g^2, sum of the new w^2), g */
HYFI_CODELET(sgd_update, HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), &t->u.sgd)
