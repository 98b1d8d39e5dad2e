/* StarPU codelets of the SGD family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* w, v (momentum buffer), norms (2: sum of g^2, sum of the new w^2), g. The
 * one codelet whose buffers never vary (the update is emitted after the
 * pipeline events, without a token): StarPU checks them at submission. */
HYFI_CODELET_FUNCS(sgd_update, "wwwr", HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), &t->u.sgd)
HYFI_CODELET_STRUCT(sgd_update, .nbuffers = 4,
                    .modes = {STARPU_RW, STARPU_RW, STARPU_W, STARPU_R})
