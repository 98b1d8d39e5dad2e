/* StarPU codelets of the replica family: buffers in kernel order (outputs
 * first); see codelet_common.h. running_combine is hand-written for its
 * variable list of replicas. */
#include "codelet_common.h"

/* dst, src */
HYFI_CODELET(copy_slice, "wr", HYFI_F(0), HYFI_F(1), &t->u.slice)

static struct starpu_perfmodel running_combine_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_running_combine",
    .footprint = hyfi_ops_footprint,
};

/* x, r0, r_1 .. r_(R-1) */
static void running_combine_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!hyfi_ops_buffers_ok(buffers, "running_combine", "wr", t->u.rcomb.nrep - 1, 'r', ""))
        return;
    const float *r[HYFI_RCOMB_MAX];
    for (int k = 1; k < t->u.rcomb.nrep && k <= HYFI_RCOMB_MAX; k++) r[k - 1] = HYFI_F(1 + k);
    HYFI_REPORT("running_combine",
                hyfi_running_combine_cpu(HYFI_F(0), HYFI_F(1), r, &t->u.rcomb));
}

#if HYFI_HAVE_CUDA
static void running_combine_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!hyfi_ops_buffers_ok(buffers, "running_combine", "wr", t->u.rcomb.nrep - 1, 'r', ""))
        return;
    const float *r[HYFI_RCOMB_MAX];
    for (int k = 1; k < t->u.rcomb.nrep && k <= HYFI_RCOMB_MAX; k++) r[k - 1] = HYFI_F(1 + k);
    hyfi_ops_report("running_combine", hyfi_running_combine_cuda(hyfi_ops_cuda_env(), HYFI_F(0),
                                                                 HYFI_F(1), r, &t->u.rcomb));
}
#endif

struct starpu_codelet hyfi_cl_running_combine = {
    .cpu_funcs = {running_combine_cpu_func},
    .cpu_funcs_name = {"running_combine_cpu_func"},
#if HYFI_HAVE_CUDA
    .cuda_funcs = {running_combine_cuda_func},
    .cuda_flags = {STARPU_CUDA_ASYNC},
#else
    HYFI_SIM_CUDA
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &running_combine_model,
    .name = "hyfi_running_combine",
};
