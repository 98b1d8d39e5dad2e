/* StarPU codelets of the spatial-tile families: rectangle copies (assemble,
 * scatter) and batch norm over tiles. Buffers in kernel order with the
 * variable-length pointer lists last (assemble, combines) or first (scatter);
 * see codelet_common.h. Hand-written because the pointer lists do not fit
 * HYFI_CODELET; each function checks its buffers first (BUFFERS_OK). */
#include "codelet_common.h"

/* Buffer i as doubles (partial statistics). */
#define HYFI_D(i) ((double *)STARPU_VECTOR_GET_PTR(buffers[i]))

#define TILE_MODEL(op)                                                            \
    static struct starpu_perfmodel op##_model = {                                \
        .type = STARPU_HISTORY_BASED,                                            \
        .symbol = "hyfi_" #op,                                                   \
        .footprint = hyfi_ops_footprint,                                         \
    }

#if HYFI_HAVE_CUDA
#define TILE_CODELET(op)                                                          \
    struct starpu_codelet hyfi_cl_##op = {                                       \
        .cpu_funcs = {op##_cpu_func},                                            \
        .cpu_funcs_name = {#op "_cpu_func"},                                     \
        .cuda_funcs = {op##_cuda_func},                                          \
        .cuda_flags = {STARPU_CUDA_ASYNC},                                       \
        .nbuffers = STARPU_VARIABLE_NBUFFERS,                                    \
        .model = &op##_model,                                                    \
        .name = "hyfi_" #op,                                                     \
    }
#else
#define TILE_CODELET(op)                                                          \
    struct starpu_codelet hyfi_cl_##op = {                                       \
        .cpu_funcs = {op##_cpu_func},                                            \
        .cpu_funcs_name = {#op "_cpu_func"},                                     \
        HYFI_SIM_CUDA                                                            \
        .nbuffers = STARPU_VARIABLE_NBUFFERS,                                    \
        .model = &op##_model,                                                    \
        .name = "hyfi_" #op,                                                     \
    }
#endif

/* The task's buffers against the codelet's signature (see hyfi_ops_buffers_ok). */
#define BUFFERS_OK(op, head, n, rep, tail) hyfi_ops_buffers_ok(buffers, #op, head, n, rep, tail)

/* The CPU path of a task with the worker's cores (see core lending), its
 * bf16-stored buffers staged in float32 (hyfi_ops_stage_in): between
 * STAGED_BEGIN and STAGED_END `buffers` are the staged ones. */
#define STAGED_BEGIN(name)                                                        \
    {                                                                            \
        const int cores_ = hyfi_ops_cores_take();                                \
        void **stored_ = buffers;                                                \
        buffers = hyfi_ops_stage_in(stored_, name);                              \
        if (buffers) {
#define STAGED_END()                                                              \
            hyfi_ops_stage_out(stored_, buffers);                                \
        }                                                                        \
        buffers = stored_;                                                       \
        hyfi_ops_cores_give(cores_);                                             \
    }
/* Run `call` so. */
#define ON_CPU(name, call) STAGED_BEGIN(name) HYFI_REPORT(name, call); STAGED_END()

/* ------------------------------------------------------ assemble, scatter */
/* dst, src[0 .. npieces) */
static void tile_assemble_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(tile_assemble, "w", t->u.tile.npieces, 'r', "")) return;
    STAGED_BEGIN("tile_assemble")
    const float *src[HYFI_TILE_MAX_PIECES];
    for (int i = 0; i < t->u.tile.npieces; i++) src[i] = HYFI_F(1 + i);
    HYFI_REPORT("tile_assemble", hyfi_tile_assemble_cpu(HYFI_F(0), src, &t->u.tile));
    STAGED_END()
}

/* dst[0 .. npieces), src */
static void tile_scatter_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(tile_scatter, "", t->u.tile.npieces, 'w', "r")) return;
    STAGED_BEGIN("tile_scatter")
    float *dst[HYFI_TILE_MAX_PIECES];
    const int k = t->u.tile.npieces;
    for (int i = 0; i < k; i++) dst[i] = HYFI_F(i);
    HYFI_REPORT("tile_scatter",
                hyfi_tile_scatter_cpu(dst, HYFI_F(k), &t->u.tile, (unsigned)t->acc));
    STAGED_END()
}

/* ------------------------------------------------------- batch norm tiles */
/* part, x */
static void bn_stats_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_stats, "wr", 0, 0, "")) return;
    ON_CPU("bn_stats", hyfi_bn_stats_cpu(HYFI_D(0), HYFI_F(1), &t->u.bnt.bn));
}

/* The tiles' parts (2C doubles each) from buffers first, first + 1, ...:
 * one per part, or packets of consecutive parts (hyfi_bn_combine_args);
 * 0, or -1 when the packets do not hold nparts parts. */
static int bn_parts(void *buffers[], int first, const hyfi_bn_combine_args *a,
                    const double **parts)
{
    if (!a->npackets) {
        for (int i = 0; i < a->nparts; i++) parts[i] = HYFI_D(first + i);
        return 0;
    }
    int i = 0;
    for (int k = 0; k < a->npackets; k++) {
        const size_t nx = STARPU_VECTOR_GET_NX(buffers[first + k]), per = 4 * (size_t)a->c;
        for (size_t j = 0; j < nx / per && i < a->nparts; j++)
            parts[i++] = HYFI_D(first + k) + j * 2 * (size_t)a->c;
    }
    return i == a->nparts ? 0 : -1;
}

#define NPARTBUFS(a) ((a).npackets ? (a).npackets : (a).nparts)

/* mean, var, run_mean, run_var, parts or packets... */
static void bn_combine_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_combine, "wwww", NPARTBUFS(t->u.bnc), 'r', "")) return;
    const double *parts[HYFI_MAX_TILES];
    if (bn_parts(buffers, 4, &t->u.bnc, parts)) {
        hyfi_ops_report("bn_combine", -1);
        return;
    }
    ON_CPU("bn_combine", hyfi_bn_combine_cpu(HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), parts,
                                             &t->u.bnc));
}

/* part, dy, x, mean */
static void bn_bwd_stats_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_bwd_stats, "wrrr", 0, 0, "")) return;
    ON_CPU("bn_bwd_stats", hyfi_bn_bwd_stats_cpu(HYFI_D(0), HYFI_F(1), HYFI_F(2), HYFI_F(3),
                                                 &t->u.bnt.bn));
}

/* tot, dgamma, dbeta, var, parts or packets... */
static void bn_bwd_combine_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_bwd_combine, "wwwr", NPARTBUFS(t->u.bnc), 'r', "")) return;
    const double *parts[HYFI_MAX_TILES];
    if (bn_parts(buffers, 4, &t->u.bnc, parts)) {
        hyfi_ops_report("bn_bwd_combine", -1);
        return;
    }
    ON_CPU("bn_bwd_combine", hyfi_bn_bwd_combine_cpu(HYFI_F(0), HYFI_F(1), HYFI_F(2), parts,
                                                     HYFI_F(3), &t->u.bnc, t->acc));
}

/* dx, dy, x, gamma, mean, var, tot */
static void bn_bwd_apply_cpu_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_bwd_apply, "wrrrrrr", 0, 0, "")) return;
    ON_CPU("bn_bwd_apply",
           hyfi_bn_bwd_apply_cpu(HYFI_F(0), HYFI_F(1), HYFI_F(2), HYFI_F(3), HYFI_F(4), HYFI_F(5),
                                 HYFI_F(6), t->u.bnt.total, &t->u.bnt.bn, t->acc));
}

#if HYFI_HAVE_CUDA
static void tile_assemble_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(tile_assemble, "w", t->u.tile.npieces, 'r', "")) return;
    const float *src[HYFI_TILE_MAX_PIECES];
    for (int i = 0; i < t->u.tile.npieces; i++) src[i] = HYFI_F(1 + i);
    hyfi_ops_report("tile_assemble",
                    hyfi_tile_assemble_cuda(hyfi_ops_cuda_env(), HYFI_F(0), src, &t->u.tile));
}

static void tile_scatter_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(tile_scatter, "", t->u.tile.npieces, 'w', "r")) return;
    float *dst[HYFI_TILE_MAX_PIECES];
    const int k = t->u.tile.npieces;
    for (int i = 0; i < k; i++) dst[i] = HYFI_F(i);
    hyfi_ops_report("tile_scatter", hyfi_tile_scatter_cuda(hyfi_ops_cuda_env(), dst, HYFI_F(k),
                                                           &t->u.tile, (unsigned)t->acc));
}

static void bn_stats_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_stats, "wr", 0, 0, "")) return;
    hyfi_ops_report("bn_stats",
                    hyfi_bn_stats_cuda(hyfi_ops_cuda_env(), HYFI_D(0), HYFI_F(1), &t->u.bnt.bn));
}

static void bn_combine_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_combine, "wwww", t->u.bnc.nparts, 'r', "")) return;
    const double *parts[HYFI_MAX_TILES];
    for (int i = 0; i < t->u.bnc.nparts; i++) parts[i] = HYFI_D(4 + i);
    hyfi_ops_report("bn_combine", hyfi_bn_combine_cuda(hyfi_ops_cuda_env(), HYFI_F(0), HYFI_F(1),
                                                       HYFI_F(2), HYFI_F(3), parts, &t->u.bnc));
}

static void bn_bwd_stats_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_bwd_stats, "wrrr", 0, 0, "")) return;
    hyfi_ops_report("bn_bwd_stats",
                    hyfi_bn_bwd_stats_cuda(hyfi_ops_cuda_env(), HYFI_D(0), HYFI_F(1), HYFI_F(2),
                                           HYFI_F(3), &t->u.bnt.bn));
}

static void bn_bwd_combine_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_bwd_combine, "wwwr", t->u.bnc.nparts, 'r', "")) return;
    const double *parts[HYFI_MAX_TILES];
    for (int i = 0; i < t->u.bnc.nparts; i++) parts[i] = HYFI_D(4 + i);
    hyfi_ops_report("bn_bwd_combine",
                    hyfi_bn_bwd_combine_cuda(hyfi_ops_cuda_env(), HYFI_F(0), HYFI_F(1), HYFI_F(2),
                                             parts, HYFI_F(3), &t->u.bnc, t->acc));
}

static void bn_bwd_apply_cuda_func(void *buffers[], void *cl_arg)
{
    const hyfi_task_args *t = cl_arg;
    if (!BUFFERS_OK(bn_bwd_apply, "wrrrrrr", 0, 0, "")) return;
    hyfi_ops_report("bn_bwd_apply",
                    hyfi_bn_bwd_apply_cuda(hyfi_ops_cuda_env(), HYFI_F(0), HYFI_F(1), HYFI_F(2),
                                           HYFI_F(3), HYFI_F(4), HYFI_F(5), HYFI_F(6),
                                           t->u.bnt.total, &t->u.bnt.bn, t->acc));
}
#endif

TILE_MODEL(tile_assemble);
TILE_MODEL(tile_scatter);
TILE_MODEL(bn_stats);
TILE_MODEL(bn_combine);
TILE_MODEL(bn_bwd_stats);
TILE_MODEL(bn_bwd_combine);
TILE_MODEL(bn_bwd_apply);
TILE_CODELET(tile_assemble);
TILE_CODELET(tile_scatter);
TILE_CODELET(bn_stats);
TILE_CODELET(bn_combine);
TILE_CODELET(bn_bwd_stats);
TILE_CODELET(bn_bwd_combine);
TILE_CODELET(bn_bwd_apply);
