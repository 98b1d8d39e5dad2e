/* StarPU codelets of the elementwise family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* Every buffer bf16-stored: the bf16 kernels (eltwise_cpu_bf16.c), bitwise the
 * staged float32 ones in one pass. */
/* y, x */
HYFI_CODELET_NATIVE(relu_forward, "wr", hyfi_ops_all_bf16(buffers),
                    hyfi_relu_forward_bf16(HYFI_U16(0), HYFI_U16(1), t->u.elt.count),
                    HYFI_F(0), HYFI_F(1), t->u.elt.count)
/* dx, dy, y */
HYFI_CODELET_NATIVE(relu_backward, "wrr", hyfi_ops_all_bf16(buffers),
                    hyfi_relu_backward_bf16(HYFI_U16(0), HYFI_U16(1), HYFI_U16(2),
                                            t->u.elt.count, t->acc),
                    HYFI_F(0), HYFI_F(1), HYFI_F(2), t->u.elt.count, t->acc)
/* y, a, b */
HYFI_CODELET_NATIVE(add_forward, "wrr", hyfi_ops_all_bf16(buffers),
                    hyfi_add_forward_bf16(HYFI_U16(0), HYFI_U16(1), HYFI_U16(2), t->u.elt.count),
                    HYFI_F(0), HYFI_F(1), HYFI_F(2), t->u.elt.count)
/* dst, src */
HYFI_CODELET_NATIVE(accumulate, "wr", hyfi_ops_all_bf16(buffers),
                    hyfi_accumulate_bf16(HYFI_U16(0), HYFI_U16(1), t->u.elt.count, t->acc),
                    HYFI_F(0), HYFI_F(1), t->u.elt.count, t->acc)
/* dst */
HYFI_CODELET_NATIVE(fill, "w", hyfi_ops_all_bf16(buffers),
                    hyfi_fill_bf16(HYFI_U16(0), t->u.elt.value, t->u.elt.count),
                    HYFI_F(0), t->u.elt.value, t->u.elt.count)

/* dst, src_0 .. src_(nsrc-1): accumulate's chain in one task, dst = src_0
 * (dst += src_0 with acc), then dst += src_k in order: the same floats as a
 * chain of accumulate tasks, without a task per source (the step's health
 * sums: two floats per parameter). */
static struct starpu_perfmodel accumulate_n_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_accumulate_n",
    .footprint = hyfi_ops_footprint,
};

static void accumulate_n_cpu_func(void *stored[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!hyfi_ops_buffers_ok(stored, "accumulate_n", "w", t->u.elt.nsrc, 'r', "")) return;
    if (t->u.elt.nsrc <= 64 && hyfi_ops_all_bf16(stored)) {
        /* every buffer bf16-stored: one pass, bitwise the staged chain */
        const uint16_t *src[64];
        for (int k = 0; k < t->u.elt.nsrc; k++)
            src[k] = (const uint16_t *)STARPU_VECTOR_GET_PTR(stored[1 + k]);
        HYFI_REPORT("accumulate_n",
                    hyfi_accumulate_n_bf16((uint16_t *)STARPU_VECTOR_GET_PTR(stored[0]), src,
                                           t->u.elt.nsrc, t->u.elt.count, t->acc));
        return;
    }
    void **buffers = hyfi_ops_stage_in(stored, "accumulate_n"); /* bf16 storage: float32 */
    if (!buffers) return;
    for (int k = 0; k < t->u.elt.nsrc; k++)
        HYFI_REPORT("accumulate_n", hyfi_accumulate_cpu(HYFI_F(0), HYFI_F(1 + k),
                                                        t->u.elt.count, t->acc || k > 0));
    hyfi_ops_stage_out(stored, buffers);
}

#if HYFI_HAVE_CUDA
static void accumulate_n_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!hyfi_ops_buffers_ok(buffers, "accumulate_n", "w", t->u.elt.nsrc, 'r', "")) return;
    for (int k = 0; k < t->u.elt.nsrc; k++)
        hyfi_ops_report("accumulate_n",
                        hyfi_accumulate_cuda(hyfi_ops_cuda_env(), HYFI_F(0), HYFI_F(1 + k),
                                             t->u.elt.count, t->acc || k > 0));
}
#endif

struct starpu_codelet hyfi_cl_accumulate_n = {
    .cpu_funcs = {accumulate_n_cpu_func},
    .cpu_funcs_name = {"accumulate_n_cpu_func"},
#if HYFI_HAVE_CUDA
    .cuda_funcs = {accumulate_n_cuda_func},
    .cuda_flags = {STARPU_CUDA_ASYNC},
#else
    HYFI_SIM_CUDA
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &accumulate_n_model,
    .name = "hyfi_accumulate_n",
};

/* Reduction methods of parameter gradients summed over micro-batches
 * (starpu_data_set_reduction_methods): zero a per-worker copy, add one copy
 * into another. Fixed buffers, no argument block: the count is the vector's. */
static void redux_zero_cpu(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    HYFI_REPORT("redux_zero", hyfi_fill_cpu(HYFI_F(0), 0.0f, STARPU_VECTOR_GET_NX(buffers[0])));
}

static void redux_add_cpu(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    const int cores = hyfi_ops_cores_take();
    HYFI_REPORT("redux_add", hyfi_accumulate_cpu(HYFI_F(0), HYFI_F(1),
                                                 STARPU_VECTOR_GET_NX(buffers[0]), 1));
    hyfi_ops_round_outputs(buffers);
    hyfi_ops_cores_give(cores);
}

#if HYFI_HAVE_CUDA
static void redux_zero_cuda(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    hyfi_ops_report("redux_zero", hyfi_fill_cuda(hyfi_ops_cuda_env(), HYFI_F(0), 0.0f,
                                                 STARPU_VECTOR_GET_NX(buffers[0])));
}

static void redux_add_cuda(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    hyfi_ops_report("redux_add", hyfi_accumulate_cuda(hyfi_ops_cuda_env(), HYFI_F(0), HYFI_F(1),
                                                      STARPU_VECTOR_GET_NX(buffers[0]), 1));
}
#define HYFI_REDUX_CUDA(f) .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},
#elif defined(STARPU_SIMGRID)
/* Simulation: synchronous on simulated GPUs. StarPU runs these codelets only
 * in the reduction tasks it submits itself, and its simulation does not time
 * such internal jobs: it returns before queueing them, without marking the
 * job's slot of an asynchronous GPU pipeline finished, so the worker could
 * wait for it forever (SimGrid: "deadlock detected"). A synchronous job ends
 * at once, as on a CPU worker (docs/simulation.md). */
#define HYFI_REDUX_CUDA(f) .cuda_funcs = {hyfi_ops_sim_nop},
#else
#define HYFI_REDUX_CUDA(f) HYFI_SIM_CUDA
#endif

/* History-based models of their own: a simulation (docs/simulation.md) takes
 * every task's duration from its codelet's model. */
static struct starpu_perfmodel redux_zero_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_redux_zero",
};
static struct starpu_perfmodel redux_add_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_redux_add",
};

struct starpu_codelet hyfi_cl_redux_zero = {
    .cpu_funcs = {redux_zero_cpu},
    .cpu_funcs_name = {"redux_zero_cpu"},
    HYFI_REDUX_CUDA(redux_zero_cuda)
    .nbuffers = 1,
    .modes = {STARPU_W},
    .model = &redux_zero_model,
    .name = "hyfi_redux_zero",
};

struct starpu_codelet hyfi_cl_redux_add = {
    .cpu_funcs = {redux_add_cpu},
    .cpu_funcs_name = {"redux_add_cpu"},
    HYFI_REDUX_CUDA(redux_add_cuda)
    .nbuffers = 2,
    .modes = {STARPU_RW | STARPU_COMMUTE, STARPU_R},
    .model = &redux_add_model,
    .name = "hyfi_redux_add",
};
