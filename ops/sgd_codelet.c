/* StarPU codelets of the SGD family: buffers in kernel order (outputs first); see codelet_common.h. */
#include "codelet_common.h"

/* w, v (momentum buffer), norms (2: sum of g^2, sum of the new w^2), g. The
 * one codelet whose buffers never vary (the update is emitted after the
 * pipeline events, without a token): StarPU checks them at submission. */
HYFI_CODELET_FUNCS(sgd_update, "wwwr", HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), &t->u.sgd)
HYFI_CODELET_STRUCT(sgd_update, .nbuffers = 4,
                    .modes = {STARPU_RW, STARPU_RW, STARPU_W, STARPU_R})

/* Groups of parameters in one task (CPU only, engine/compile.c): buffers w, v,
 * norms, g of each parameter in turn (4 k buffers), each updated as
 * sgd_update does, its count its own vector's. ResNet-110's 332 parameters
 * (a batch norm's gamma and beta are 16 floats) had one task each: the
 * tasks' own costs were most of the update's time. */
static struct starpu_perfmodel sgd_update_n_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_sgd_update_n",
    .footprint = hyfi_ops_footprint,
};

static void sgd_update_n_cpu_func(void *buffers[], void *cl_arg)
{
#ifndef STARPU_SIMGRID
    const hyfi_task_args *t = cl_arg;
    struct starpu_task *task = starpu_task_get_current();
    const unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
    if (nb == 0 || nb % 4) {
        hyfi_ops_report("sgd_update_n", -1);
        return;
    }
    const int cores = hyfi_ops_cores_take();
    for (unsigned i = 0; i < nb; i += 4) {
        hyfi_sgd_args a = t->u.sgd;
        a.count = STARPU_VECTOR_GET_NX(buffers[i]);
        if (STARPU_VECTOR_GET_NX(buffers[i + 1]) != a.count ||
            STARPU_VECTOR_GET_NX(buffers[i + 3]) != a.count ||
            STARPU_VECTOR_GET_NX(buffers[i + 2]) != 2) {
            hyfi_ops_report("sgd_update_n", -1);
            break;
        }
        hyfi_ops_report("sgd_update_n", hyfi_sgd_update_cpu(HYFI_F(i), HYFI_F(i + 1),
                                                            HYFI_F(i + 2), HYFI_F(i + 3), &a));
    }
    hyfi_ops_cores_give(cores);
#else
    (void)buffers, (void)cl_arg;
#endif
}

struct starpu_codelet hyfi_cl_sgd_update_n = {
    .cpu_funcs = {sgd_update_n_cpu_func},
    .cpu_funcs_name = {"sgd_update_n_cpu_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sgd_update_n_model,
    .name = "hyfi_sgd_update_n",
};
