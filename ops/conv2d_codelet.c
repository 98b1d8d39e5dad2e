/* StarPU codelets of the conv2d family: buffers in kernel order (outputs first); see codelet_common.h.
 * In bf16 tasks the weight and bias are read rounded to bf16 (HYFI_W); the
 * backward of the weights reads bf16 activations and writes float32. Where the
 * activations are stored as bf16 and oneDNN's bf16 primitives beat its float32
 * ones on this CPU (hyfi_conv2d_cpu_bf16), the CPU functions run those on the
 * stored buffers (ops/conv2d_cpu_bf16.c); otherwise the float32 kernels on
 * staged copies (hyfi_ops_stage_in), as every codelet. */
#include "codelet_common.h"

#define HYFI_U16(i) ((uint16_t *)STARPU_VECTOR_GET_PTR(buffers[i]))

#ifndef STARPU_SIMGRID
/* Whether direction dir of this task runs on the bf16 primitives: a bf16 task
 * whose activation buffers ia and ib are stored as bf16. */
static int native(void *buffers[], const hyfi_task_args *t, int dir, int ia, int ib)
{
    return t->prec && STARPU_VECTOR_GET_ELEMSIZE(buffers[ia]) == sizeof(uint16_t) &&
           STARPU_VECTOR_GET_ELEMSIZE(buffers[ib]) == sizeof(uint16_t) &&
           hyfi_conv2d_cpu_bf16(&t->u.conv, dir, t->acc);
}

/* The CPU function of codelet op: the bf16 call when native(), else the
 * float32 kernel on staged buffers. */
#define CONV_CPU_FUNC(op, sig, dir, ia, ib, bf16_call, ...)                       \
    static void op##_cpu_func(void *stored_[], void *cl_arg)                     \
    {                                                                            \
        const hyfi_task_args *t = cl_arg;                                        \
        if (!hyfi_ops_buffers_ok(stored_, #op, (sig), 0, 0, "")) return;         \
        const int cores_ = hyfi_ops_cores_take();                                \
        if (native(stored_, t, dir, ia, ib)) {                                   \
            void **buffers = stored_;                                            \
            hyfi_ops_report(#op, bf16_call);                                     \
        } else {                                                                 \
            void **buffers = hyfi_ops_stage_in(stored_, #op);                    \
            if (buffers) {                                                       \
                hyfi_ops_report(#op, hyfi_##op##_cpu(__VA_ARGS__));              \
                hyfi_ops_stage_out(stored_, buffers);                            \
            }                                                                    \
        }                                                                        \
        hyfi_ops_cores_give(cores_);                                             \
    }
#else
#define CONV_CPU_FUNC(op, sig, dir, ia, ib, bf16_call, ...) HYFI_CODELET_CPU_FUNC_(op, sig, __VA_ARGS__)
#endif

#define CONV_CODELET(op, sig, dir, ia, ib, bf16_call, ...)                        \
    static struct starpu_perfmodel op##_model = {                                \
        .type = STARPU_HISTORY_BASED,                                            \
        .symbol = "hyfi_" #op,                                                   \
        .footprint = hyfi_ops_footprint,                                         \
    };                                                                           \
    CONV_CPU_FUNC(op, sig, dir, ia, ib, bf16_call, __VA_ARGS__)                  \
    HYFI_CODELET_CUDA_FUNC_(op, sig, __VA_ARGS__)                                \
    HYFI_CODELET_STRUCT(op, .nbuffers = STARPU_VARIABLE_NBUFFERS)

/* y, x, w[, b] */
CONV_CODELET(conv2d_forward, t->u.conv.has_bias ? "wrrr" : "wrr", 0, 0, 1,
             hyfi_conv2d_forward_cpu_bf16(HYFI_U16(0), HYFI_U16(1), HYFI_F(2),
                                          t->u.conv.has_bias ? HYFI_F(3) : NULL, &t->u.conv),
             HYFI_F(0), HYFI_F(1), HYFI_W(2, 0), t->u.conv.has_bias ? HYFI_W(3, 1) : NULL,
             &t->u.conv)
/* dx, dy, w */
CONV_CODELET(conv2d_backward_data, "wrr", 1, 0, 1,
             hyfi_conv2d_backward_data_cpu_bf16(HYFI_U16(0), HYFI_U16(1), HYFI_F(2), &t->u.conv,
                                                t->acc),
             HYFI_F(0), HYFI_F(1), HYFI_W(2, 0), &t->u.conv, t->acc)
/* dw[, db], dy, x */
CONV_CODELET(conv2d_backward_weight, t->u.conv.has_bias ? "wwrr" : "wrr", 2,
             t->u.conv.has_bias ? 2 : 1, t->u.conv.has_bias ? 3 : 2,
             hyfi_conv2d_backward_weight_cpu_bf16(
                 HYFI_F(0), t->u.conv.has_bias ? HYFI_F(1) : NULL,
                 HYFI_U16(t->u.conv.has_bias ? 2 : 1), HYFI_U16(t->u.conv.has_bias ? 3 : 2),
                 &t->u.conv, t->acc),
             HYFI_F(0), t->u.conv.has_bias ? HYFI_F(1) : NULL,
             HYFI_F(t->u.conv.has_bias ? 2 : 1), HYFI_F(t->u.conv.has_bias ? 3 : 2), &t->u.conv,
             t->acc)
