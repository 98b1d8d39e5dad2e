/* StarPU codelets of the softmax cross-entropy family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* loss, prob, logits, labels (int32) */
HYFI_CODELET(xent_forward, "wwrr", HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_I(3), &t->u.xent)
/* dlogits, prob, labels (int32), dloss */
HYFI_CODELET(xent_backward, "wrrr", HYFI_F(0), HYFI_F(1), HYFI_I(2), HYFI_F(3), &t->u.xent, t->acc)
