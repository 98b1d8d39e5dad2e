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

/* Copies between one packed buffer and consecutive parts of it, in one task
 * (CPU only, engine/reduce.c: an all-reduce bucket and its gradients, a group
 * of running statistics; one task per part before, each a task's own cost
 * for a few floats). pack_slices: buf (W or RW), part 0 .. n-1 (R);
 * unpack_slices: part 0 .. n-1 (W), buf (R): outputs first. Part i is buf's
 * slice at t->u.slice.dst_off (pack) or src_off (unpack) plus the earlier
 * parts' counts, of its own count; each is hyfi_copy_slice_cpu's copy. bf16
 * buffers are staged as elsewhere. */
static struct starpu_perfmodel pack_slices_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_pack_slices",
    .footprint = hyfi_ops_footprint,
};
static struct starpu_perfmodel unpack_slices_model = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "hyfi_unpack_slices",
    .footprint = hyfi_ops_footprint,
};

static void slices_cpu(void *stored[], const hyfi_task_args *t, int unpack)
{
#ifndef STARPU_SIMGRID
    const char *op = unpack ? "unpack_slices" : "pack_slices";
    struct starpu_task *task = starpu_task_get_current();
    const unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
    const unsigned bi = unpack ? nb - 1 : 0; /* the packed buffer */
    size_t off = unpack ? t->u.slice.src_off : t->u.slice.dst_off, end = off;
    for (unsigned i = 0; i < nb; i++)
        if (i != bi) end += STARPU_VECTOR_GET_NX(stored[i]);
    if (nb < 2 || end > STARPU_VECTOR_GET_NX(stored[bi])) { /* an engine bug */
        hyfi_ops_report(op, -1);
        return;
    }
    const int cores = hyfi_ops_cores_take();
    void **buffers = hyfi_ops_stage_in(stored, op);
    for (unsigned i = 0; buffers && i < nb; i++) {
        if (i == bi) continue;
        hyfi_slice_args a = {.count = STARPU_VECTOR_GET_NX(buffers[i])};
        if (unpack) {
            a.src_off = off;
            hyfi_ops_report(op, hyfi_copy_slice_cpu(HYFI_F(i), HYFI_F(bi), &a));
        } else {
            a.dst_off = off;
            hyfi_ops_report(op, hyfi_copy_slice_cpu(HYFI_F(bi), HYFI_F(i), &a));
        }
        off += a.count;
    }
    if (buffers) hyfi_ops_stage_out(stored, buffers);
    hyfi_ops_cores_give(cores);
#else
    (void)stored, (void)t, (void)unpack;
#endif
}

static void pack_slices_cpu_func(void *buffers[], void *cl_arg)
{
    slices_cpu(buffers, cl_arg, 0);
}

static void unpack_slices_cpu_func(void *buffers[], void *cl_arg)
{
    slices_cpu(buffers, cl_arg, 1);
}

struct starpu_codelet hyfi_cl_pack_slices = {
    .cpu_funcs = {pack_slices_cpu_func},
    .cpu_funcs_name = {"pack_slices_cpu_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &pack_slices_model,
    .name = "hyfi_pack_slices",
};

struct starpu_codelet hyfi_cl_unpack_slices = {
    .cpu_funcs = {unpack_slices_cpu_func},
    .cpu_funcs_name = {"unpack_slices_cpu_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &unpack_slices_model,
    .name = "hyfi_unpack_slices",
};
