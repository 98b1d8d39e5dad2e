/* StarPU codelets of the conv2d family: buffers in kernel order (outputs first); see codelet_common.h.
 * In bf16 tasks the weight and bias are read rounded to bf16 (HYFI_W); the
 * backward of the weights reads bf16 activations and writes float32. Where the
 * activations are stored as bf16 and oneDNN's bf16 primitives beat its float32
 * ones on this CPU (hyfi_conv2d_cpu_bf16), the CPU functions run those on the
 * stored buffers (ops/conv2d_cpu_bf16.c); otherwise the float32 kernels on
 * staged copies (hyfi_ops_stage_in), as every codelet. */
#include "codelet_common.h"

#ifndef STARPU_SIMGRID
/* Whether direction dir of this task runs on the bf16 primitives: a bf16 task
 * whose activation buffer ia is stored as bf16 and whose ib is bf16 or holds bf16 values in float32 words (the images, read through a
 * narrowed copy: hyfi_ops_u16_view). */
static int native(void *buffers[], const hyfi_task_args *t, int dir, int ia, int ib)
{
    return t->prec && STARPU_VECTOR_GET_ELEMSIZE(buffers[ia]) == sizeof(uint16_t) &&
           hyfi_ops_is_u16(buffers, ib) && hyfi_conv2d_cpu_bf16(&t->u.conv, dir, t->acc);
}
#endif

/* y, x, w[, b] */
HYFI_CODELET_NATIVE(conv2d_forward, t->u.conv.has_bias ? "wrrr" : "wrr",
             native(buffers, t, 0, 0, 1),
             hyfi_conv2d_forward_cpu_bf16(HYFI_U16(0), hyfi_ops_u16_view(buffers, 1), HYFI_F(2),
                                          t->u.conv.has_bias ? HYFI_F(3) : NULL, &t->u.conv),
             HYFI_F(0), HYFI_F(1), HYFI_W(2, 0), t->u.conv.has_bias ? HYFI_W(3, 1) : NULL,
             &t->u.conv)
/* y, x, r, w[, b]: y = conv(x, w, b) + r, the residual add fused after the
 * convolution (engine/layout.c). CPU only: the engine fuses only where no
 * CUDA worker runs. Staged in a bf16 task, the convolution's result is
 * rounded before r is added, as the two tasks apart would store it. */
static struct starpu_perfmodel conv2d_forward_add_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_conv2d_forward_add",
    .footprint = hyfi_ops_footprint,
};
HYFI_CODELET_NATIVE_CPU_FUNC_(conv2d_forward_add, t->u.conv.has_bias ? "wrrrr" : "wrrr",
             native(buffers, t, 0, 0, 1) &&
                 STARPU_VECTOR_GET_ELEMSIZE(buffers[2]) == sizeof(uint16_t),
             hyfi_conv2d_forward_add_cpu_bf16(HYFI_U16(0), hyfi_ops_u16_view(buffers, 1),
                                              HYFI_U16(2), HYFI_F(3),
                                              t->u.conv.has_bias ? HYFI_F(4) : NULL, &t->u.conv),
             HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_W(3, 0), t->u.conv.has_bias ? HYFI_W(4, 1) : NULL,
             &t->u.conv, t->prec)
struct starpu_codelet hyfi_cl_conv2d_forward_add = {
    .cpu_funcs = {conv2d_forward_add_cpu_func},
    .cpu_funcs_name = {"conv2d_forward_add_cpu_func"},
    .model = &conv2d_forward_add_model,
    .name = "hyfi_conv2d_forward_add",
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
};
/* dx, dy, w */
HYFI_CODELET_NATIVE(conv2d_backward_data, "wrr", native(buffers, t, 1, 0, 1),
             hyfi_conv2d_backward_data_cpu_bf16(HYFI_U16(0), HYFI_U16(1), HYFI_F(2), &t->u.conv,
                                                t->acc),
             HYFI_F(0), HYFI_F(1), HYFI_W(2, 0), &t->u.conv, t->acc)
/* dw[, db], dy, x */
HYFI_CODELET_NATIVE(conv2d_backward_weight, t->u.conv.has_bias ? "wwrr" : "wrr",
             native(buffers, t, 2, t->u.conv.has_bias ? 2 : 1, t->u.conv.has_bias ? 3 : 2),
             hyfi_conv2d_backward_weight_cpu_bf16(
                 HYFI_F(0), t->u.conv.has_bias ? HYFI_F(1) : NULL,
                 HYFI_U16(t->u.conv.has_bias ? 2 : 1),
                 hyfi_ops_u16_view(buffers, t->u.conv.has_bias ? 3 : 2),
                 &t->u.conv, t->acc),
             HYFI_F(0), t->u.conv.has_bias ? HYFI_F(1) : NULL,
             HYFI_F(t->u.conv.has_bias ? 2 : 1), HYFI_F(t->u.conv.has_bias ? 3 : 2), &t->u.conv,
             t->acc)
