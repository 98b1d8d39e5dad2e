/* StarPU glue shared by the codelet files (ops/<op>_codelet.c) and the engine.
 *
 * Every hyfi codelet takes vector buffers (float32, or int32 for labels) in
 * the order of its kernel's pointer arguments (outputs first) and one
 * hyfi_task_args as cl_arg. A codelet function only unpacks buffers and calls
 * the kernel of its path; a failing kernel is recorded with hyfi_ops_report and
 * surfaced by the engine after the step (a codelet cannot return an error to
 * StarPU).
 *
 * Buffer lists. Each codelet declares its list as a signature, one letter per
 * buffer: 'w' written, 'r' read (see hyfi_ops_buffers_ok). StarPU's own check
 * (a codelet's .nbuffers and .modes) fits one codelet only, sgd_update, whose
 * four buffers and modes never change; the others keep
 * STARPU_VARIABLE_NBUFFERS because
 *   - the number of buffers varies: an optional bias (conv2d, fc), the pieces
 *     of a tile (tile_*, bn_*combine), the replicas (running_combine), and in
 *     1F1B plans every task of a stage event gets the stage's pipeline token
 *     as one more, last buffer (engine/compile.c, finish_tasks);
 *   - the mode of a written buffer is chosen per task: a gradient output is
 *     W for its first writer and RW after it, a summed parameter gradient
 *     STARPU_REDUX (or W/RW when deterministic), a concat or gather output W
 *     then RW, the token R (forward) or RW|COMMUTE (backward). Fixed .modes
 *     would make StarPU abort on the first task with another mode.
 * So every codelet function checks its task's buffers against its signature
 * before running the kernel (hyfi_ops_buffers_ok): a mismatch, always an
 * engine bug, is reported as a failed kernel instead of a kernel reading the
 * wrong buffers. tests/test_codelets.c checks the table of signatures.
 */
#ifndef HYFI_OPS_CODELET_COMMON_H
#define HYFI_OPS_CODELET_COMMON_H

#include "hyfi_config.h"
#include "kernels.h"
#include <starpu.h>

#if HYFI_HAVE_CUDA
#include "kernels_cuda.h"
#endif

/* The argument block of every hyfi task. */
typedef struct {
    int acc;                  /* gradient outputs accumulate (see kernels.h) */
    /* Batch norm: the layout of its activations (0 plain NCHW, else the
     * channel block; see hyfi_conv2d_args). It was the padding before the
     * union, zeroed by every initializer: a task's footprint
     * (hyfi_ops_footprint) hashes these bytes, so plain tasks keep theirs. */
    int blk;
    union {
        hyfi_conv2d_args conv;
        hyfi_batchnorm_args bn;
        hyfi_pool_args pool;
        hyfi_concat_args concat;
        hyfi_fc_args fc;
        hyfi_xent_args xent;
        hyfi_sgd_args sgd;
        hyfi_slice_args slice;        /* copy_slice */
        hyfi_rcomb_args rcomb;        /* running_combine */
        hyfi_tile_args tile;          /* tile_assemble / tile_scatter (acc: the mask) */
        hyfi_bn_combine_args bnc;     /* bn_combine, bn_bwd_combine */
        struct {
            hyfi_batchnorm_args bn;   /* the tile's shape */
            double total;             /* elements per channel over all tiles */
        } bnt;                        /* bn_stats, bn_bwd_stats, bn_bwd_apply */
        struct {
            size_t count;
            float value;
            int nsrc;                 /* accumulate_n: source buffers */
        } elt;
    } u;
    /* Precision of the op (HYFI_PRECISION_*): 1 bf16, where convolutions and
     * fully connected layers take their weights and bias rounded to bf16
     * (HYFI_W). After the union, past the bytes a footprint hashes while they
     * are zero (hyfi_ops_footprint): fp32 tasks keep their calibrated models. */
    int prec;
} hyfi_task_args;

/* What the engine attaches to every handle (starpu_data_set_user_data): its
 * category's name (traces, the traffic model) and whether it holds bf16
 * values in float32 words (bf16 runs: activations and their gradients), which
 * every task that writes it rounds after its kernel (hyfi_ops_round_outputs). */
typedef struct hyfi_handle_info {
    const char *name;
    int cat;
    int bf16;
} hyfi_handle_info;
/* The engine registered a bf16 handle (until the process ends: a flag read
 * before looking at any task's buffers, so fp32 runs pay nothing). */
void hyfi_ops_bf16_used(void);
/* After a task's CPU kernel: round to bf16, in place, every buffer it wrote
 * (modes with W) whose handle holds bf16 values in float32 words. */
void hyfi_ops_round_outputs(void *buffers[]);
/* bf16 storage (a vector of 2-byte elements): the kernels read and write
 * float32, so around a CPU kernel each such buffer is staged in a float32
 * scratch of the calling thread. _in returns the buffers the kernel is to
 * see (buffers itself when none is bf16-stored; NULL when out of memory,
 * the failure recorded): copies of the vector interfaces, the staged ones
 * pointing at their scratch, filled by widening what the task reads (modes
 * with R). _out narrows every staged buffer the task wrote (modes with W)
 * back into its own storage, rounding to nearest even, and rounds the
 * float32-stored bf16 buffers (hyfi_ops_round_outputs). */
void **hyfi_ops_stage_in(void *buffers[], const char *codelet);
void hyfi_ops_stage_out(void *buffers[], void **staged);
/* Buffer i of the running task rounded to bf16 into a scratch of this thread
 * (slot 0 or 1: a weight and a bias), valid until the thread's next call
 * with that slot; NULL when out of memory (the caller's kernel then fails). */
const float *hyfi_ops_bf16_view(void *buffers[], int i, int slot);
/* Buffer i of the running task as bf16 storage: the buffer itself when it is
 * stored as bf16; a float32-stored buffer whose handle holds bf16 values (the
 * input images) narrowed, exactly, into the thread's staging slot of buffer i
 * (the bf16 kernels read it while nothing is staged); NULL otherwise or when
 * out of memory. hyfi_ops_is_u16 says, without converting, whether it would
 * answer non-NULL (memory aside). */
const uint16_t *hyfi_ops_u16_view(void *buffers[], int i);
int hyfi_ops_is_u16(void *buffers[], int i);
/* A weight or bias operand of a convolution or fully connected layer: rounded
 * to bf16 in bf16 tasks (t->prec), else the buffer itself. CUDA workers never
 * run a bf16 task (hyfi_graph_compile refuses bf16 with CUDA workers), so on
 * their path it is always the buffer itself. */
#define HYFI_W(i, slot) ((t)->prec ? hyfi_ops_bf16_view(buffers, i, slot) : HYFI_F(i))

/* Record a kernel failure (rc != 0) of codelet `name`; the first one is kept. */
void hyfi_ops_report(const char *name, int rc);
/* Move the recorded failure, if any, into msg; returns 1 if there was one. */
int hyfi_ops_take_error(char *msg, size_t len);

/* Per-CUDA-worker environment (handles on the worker's stream). */
int hyfi_ops_init(void);   /* after starpu_init: handles on every CUDA worker */
void hyfi_ops_fini(void);  /* before starpu_shutdown */
#if HYFI_HAVE_CUDA
hyfi_cuda_env *hyfi_ops_cuda_env(void);
#endif

/* Check the running task's buffers against a codelet's signature: `head`,
 * then n times `rep`, then `tail` (letters 'w': written, any mode with W or
 * REDUX; 'r': read, R alone), optionally followed by the 1F1B pipeline token
 * (one float, R or RW|COMMUTE). Returns 1 if they match (or outside a task);
 * else records the failure with hyfi_ops_report's first-failure rule and
 * returns 0: the codelet then skips its kernel. */
int hyfi_ops_buffers_ok(void *buffers[], const char *codelet, const char *head, int n, char rep,
                        const char *tail);

/* Perf-model footprint: the buffer sizes and the argument block, so that two
 * convolutions with equal sizes but other kernels are calibrated apart. */
uint32_t hyfi_ops_footprint(struct starpu_task *task);

/* CUDA devices visible to this process (0 without CUDA), before starpu_init. */
int hyfi_ops_cuda_devices(void);

/* CPU cores of this process, lent between CPU workers.
 *
 * Each CPU worker owns `per_worker` cores (its OpenMP threads). A CPU codelet
 * takes its worker's cores (waiting while they are lent out) and, when no
 * other task is ready to run and the task has a buffer of at least
 * `lend_min_bytes`, also the cores of the idle workers: a chain of dependent
 * layers then runs each large kernel on every core instead of one, while
 * branches and small kernels keep one worker each. The lent cores return when
 * the kernel ends; a worker that gets a task while its cores are lent waits
 * for them (at most one kernel). lend_min_bytes 0: no lending. A call while
 * kernels hold cores waits until they have given them back.
 * Measured on 2 cores: docs/bench-cpu.md. */
void hyfi_ops_cores_init(int ncpu_workers, int per_worker, size_t lend_min_bytes);
int hyfi_ops_cores_take(void); /* returns the cores taken, >= 1 */
/* give: also trims the thread's scratch (hyfi_cpu_scratch_trim), the task being over */
void hyfi_ops_cores_give(int n);
/* While on is 1, a kernel that starts runs one OpenMP thread fewer than the
 * cores it takes (at least one): the engine's thread submitting tasks needs a
 * core of them, and an OpenMP team with a thread waiting for a core stalls at
 * every barrier (a kernel took 2-5 ms instead of 0.5). Cores are still
 * counted as taken. */
void hyfi_ops_cores_submitting(int on);
/* Cores taken by CPU kernels running now (0: none is running). */
int hyfi_ops_cores_busy(void);

#define HYFI_F(i) ((float *)STARPU_VECTOR_GET_PTR(buffers[i]))
#define HYFI_I(i) ((int32_t *)STARPU_VECTOR_GET_PTR(buffers[i]))

/* HYFI_CODELET(op_pass, sig, kernel arguments...) defines the CPU (and CUDA)
 * function of codelet hyfi_cl_<op_pass>, calling hyfi_<op_pass>_cpu / _cuda
 * with the given arguments, where `t` is the task's hyfi_task_args and
 * HYFI_F(i) the i-th buffer; plus a history-based perf model with the symbol
 * hyfi_<op_pass>. `sig` is the buffer signature (an expression that may use
 * `t`, e.g. for an optional bias), checked before the kernel runs; the codelet
 * takes STARPU_VARIABLE_NBUFFERS. HYFI_CODELET_FUNCS and HYFI_CODELET_STRUCT
 * are its two halves, for a codelet with other fields (a fixed .nbuffers). */
#define HYFI_CODELET_FUNCS(op, sig, ...)                                          \
    static struct starpu_perfmodel op##_model = {                                \
        .type = STARPU_HISTORY_BASED,                                            \
        .symbol = "hyfi_" #op,                                                   \
        .footprint = hyfi_ops_footprint,                                         \
    };                                                                           \
    HYFI_CODELET_CPU_FUNC_(op, sig, __VA_ARGS__)                                 \
    HYFI_CODELET_CUDA_FUNC_(op, sig, __VA_ARGS__)

#ifdef STARPU_SIMGRID
/* Simulation build (StarPU on SimGrid, docs/simulation.md): StarPU never
 * calls a codelet's functions, it takes each task's duration from the
 * codelet's performance model. So no kernel is compiled in (no oneDNN, no
 * CUDA): the CPU function is empty and its address also stands for the CUDA
 * implementation (HYFI_SIM_CUDA), so that simulated GPUs (STARPU_NCUDA) may
 * run every codelet. */
#define HYFI_CODELET_CPU_FUNC_(op, sig, ...)                                      \
    static void op##_cpu_func(void *buffers[], void *cl_arg)                     \
    {                                                                            \
        (void)buffers;                                                           \
        (void)cl_arg;                                                            \
    }
void hyfi_ops_sim_nop(void *buffers[], void *cl_arg);
/* Before starpu_init, in a simulation: the file `analytic`
 * (hyfi_ctx_config.sim_analytic; hyfi-train: HYFI_SIM_ANALYTIC) gives every
 * codelet an analytic model for the footprints its calibrated history lacks:
 * microseconds = A + B * flops + C * bytes with the coefficients of its
 * lines 'SYMBOL cpu|cuda A B C' (bench/fit_perfmodels.py fits them);
 * task_us X (sim_task_us; HYFI_SIM_TASK_US) adds X microseconds to every task
 * (the runtime's own cost per task, which history models of kernels leave out). Either makes
 * the models per-arch cost functions (history first). 0, or -1 with the
 * reason in err. */
int hyfi_ops_sim_models(const char *analytic, double task_us, char *err, size_t len);
#define HYFI_SIM_CUDA .cuda_funcs = {hyfi_ops_sim_nop}, .cuda_flags = {STARPU_CUDA_ASYNC},
/* hyfi_ops_report(name, kernel call) of the hand-written codelet functions */
#define HYFI_REPORT(name, call) ((void)(name), (void)sizeof(call)) /* call not evaluated */
#else
/* The CPU function: the kernel on the stored buffers where `native` holds
 * (HYFI_CODELET_NATIVE's bf16 kernels), else hyfi_<op>_cpu on them, bf16
 * ones staged in float32 (hyfi_ops_stage_in / _out). */
#define HYFI_CODELET_NATIVE_CPU_FUNC_(op, sig, native, bf16_call, ...)            \
    static void op##_cpu_func(void *stored_[], void *cl_arg)                     \
    {                                                                            \
        const hyfi_task_args *t = cl_arg;                                        \
        (void)t;                                                                 \
        if (!hyfi_ops_buffers_ok(stored_, #op, (sig), 0, 0, "")) return;         \
        const int cores_ = hyfi_ops_cores_take();                                \
        void **buffers = stored_;                                                \
        if (native) {                                                            \
            hyfi_ops_report(#op, bf16_call);                                     \
        } else if ((buffers = hyfi_ops_stage_in(stored_, #op))) {                \
            hyfi_ops_report(#op, hyfi_##op##_cpu(__VA_ARGS__));                  \
            hyfi_ops_stage_out(stored_, buffers);                                \
        }                                                                        \
        hyfi_ops_cores_give(cores_);                                             \
    }
#define HYFI_CODELET_CPU_FUNC_(op, sig, ...)                                      \
    HYFI_CODELET_NATIVE_CPU_FUNC_(op, sig, 0, 0, __VA_ARGS__)
#define HYFI_SIM_CUDA
#define HYFI_REPORT(name, call) hyfi_ops_report(name, call)
#endif

#ifdef STARPU_SIMGRID
#define HYFI_CODELET_CUDA_FUNC_(op, sig, ...)
#define HYFI_CODELET_CUDA_FIELDS_(op) HYFI_SIM_CUDA
#elif HYFI_HAVE_CUDA
#define HYFI_CODELET_CUDA_FUNC_(op, sig, ...)                                     \
    static void op##_cuda_func(void *buffers[], void *cl_arg)                    \
    {                                                                            \
        const hyfi_task_args *t = cl_arg;                                        \
        (void)t;                                                                 \
        if (!hyfi_ops_buffers_ok(buffers, #op, (sig), 0, 0, "")) return;         \
        hyfi_ops_report(#op, hyfi_##op##_cuda(hyfi_ops_cuda_env(), __VA_ARGS__)); \
    }
#define HYFI_CODELET_CUDA_FIELDS_(op)                                             \
    .cuda_funcs = {op##_cuda_func}, .cuda_flags = {STARPU_CUDA_ASYNC},
#else
#define HYFI_CODELET_CUDA_FUNC_(op, sig, ...)
#define HYFI_CODELET_CUDA_FIELDS_(op)
#endif

/* The codelet hyfi_cl_<op> of HYFI_CODELET_FUNCS(op, ...), with the extra
 * fields given (.nbuffers, .modes). */
#define HYFI_CODELET_STRUCT(op, ...)                                              \
    struct starpu_codelet hyfi_cl_##op = {                                       \
        .cpu_funcs = {op##_cpu_func},                                            \
        .cpu_funcs_name = {#op "_cpu_func"},                                     \
        HYFI_CODELET_CUDA_FIELDS_(op)                                            \
        .model = &op##_model,                                                    \
        .name = "hyfi_" #op,                                                     \
        __VA_ARGS__                                                              \
    };

#define HYFI_CODELET(op, sig, ...)                                                \
    HYFI_CODELET_FUNCS(op, sig, __VA_ARGS__)                                     \
    HYFI_CODELET_STRUCT(op, .nbuffers = STARPU_VARIABLE_NBUFFERS)

/* HYFI_CODELET with a kernel of its own for bf16 storage: where `native` (an
 * expression over `buffers`, the stored ones, and `t`) holds, the CPU
 * function calls `bf16_call` on the stored buffers (HYFI_U16); otherwise the
 * float32 kernel on staged ones, as HYFI_CODELET. */
#define HYFI_U16(i) ((uint16_t *)STARPU_VECTOR_GET_PTR(buffers[i]))
/* Every buffer of the running task stored as bf16 (2-byte elements), but a
 * trailing pipeline token or recompute fence (one float). */
int hyfi_ops_all_bf16(void *buffers[]);
/* Bit i set where buffer i of the running task is stored as bf16 (0 while no
 * bf16 handle was ever made). */
unsigned hyfi_ops_bf16_mask(void *buffers[]);
#ifdef STARPU_SIMGRID
#define HYFI_CODELET_NATIVE_CPU_FUNC_(op, sig, native, bf16_call, ...)            \
    HYFI_CODELET_CPU_FUNC_(op, sig, __VA_ARGS__)
#endif
#define HYFI_CODELET_NATIVE(op, sig, native, bf16_call, ...)                      \
    static struct starpu_perfmodel op##_model = {                                \
        .type = STARPU_HISTORY_BASED,                                            \
        .symbol = "hyfi_" #op,                                                   \
        .footprint = hyfi_ops_footprint,                                         \
    };                                                                           \
    HYFI_CODELET_NATIVE_CPU_FUNC_(op, sig, native, bf16_call, __VA_ARGS__)       \
    HYFI_CODELET_CUDA_FUNC_(op, sig, __VA_ARGS__)                                \
    HYFI_CODELET_STRUCT(op, .nbuffers = STARPU_VARIABLE_NBUFFERS)

/* Every codelet, named after the kernel it calls. Buffers in kernel order. */
extern struct starpu_codelet hyfi_cl_conv2d_forward, hyfi_cl_conv2d_backward_data,
    hyfi_cl_conv2d_backward_weight;
/* CPU only: y = conv(x, w, b) + r (y, x, r, w[, b]), the fused residual add */
extern struct starpu_codelet hyfi_cl_conv2d_forward_add;
extern struct starpu_codelet hyfi_cl_batchnorm_forward_train, hyfi_cl_batchnorm_forward_eval,
    hyfi_cl_batchnorm_backward;
extern struct starpu_codelet hyfi_cl_relu_forward, hyfi_cl_relu_backward, hyfi_cl_add_forward,
    hyfi_cl_accumulate, hyfi_cl_accumulate_n, hyfi_cl_fill;
extern struct starpu_codelet hyfi_cl_maxpool_forward, hyfi_cl_maxpool_backward,
    hyfi_cl_avgpool_forward, hyfi_cl_avgpool_backward, hyfi_cl_gap_forward, hyfi_cl_gap_backward;
extern struct starpu_codelet hyfi_cl_concat_forward, hyfi_cl_concat_backward;
extern struct starpu_codelet hyfi_cl_fc_forward, hyfi_cl_fc_backward_data,
    hyfi_cl_fc_backward_weight;
extern struct starpu_codelet hyfi_cl_xent_forward, hyfi_cl_xent_backward;
extern struct starpu_codelet hyfi_cl_sgd_update;
extern struct starpu_codelet hyfi_cl_sgd_update_n; /* CPU only: groups of parameters */
/* Replicas: copy_slice (dst, src); running_combine (x, r0, r_1 .. r_(R-1)). */
extern struct starpu_codelet hyfi_cl_copy_slice, hyfi_cl_running_combine;
/* CPU only: a packed buffer and its consecutive parts (replica_codelet.c):
 * pack_slices (buf, part...), unpack_slices (part..., buf) */
extern struct starpu_codelet hyfi_cl_pack_slices, hyfi_cl_unpack_slices;
/* Spatial tiles: assemble (dst, src...), scatter (dst..., src); batch norm over
 * tiles: stats (part, x), combine (mean, var, run_mean, run_var, parts...),
 * bwd_stats (part, dy, x, mean), bwd_combine (tot, dgamma, dbeta, var,
 * parts...), bwd_apply (dx, dy, x, gamma, mean, var, tot). */
extern struct starpu_codelet hyfi_cl_tile_assemble, hyfi_cl_tile_scatter;
extern struct starpu_codelet hyfi_cl_bn_stats, hyfi_cl_bn_combine, hyfi_cl_bn_bwd_stats,
    hyfi_cl_bn_bwd_combine, hyfi_cl_bn_bwd_apply;
/* Reduction methods of summed gradients: W zero; RW += R. */
extern struct starpu_codelet hyfi_cl_redux_zero, hyfi_cl_redux_add;

#endif
