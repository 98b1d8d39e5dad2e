/* hyfi — train deep CNNs as StarPU task graphs.
 *
 * A worked example: a small CNN trained with SGD on 28x28 grey images. It is
 * complete: tests/meson.build compiles the lines between the markers and runs
 * them, so it stays true.
 *
 * [example]
 *     #include <hyfi.h>
 *     #include <stdio.h>
 *
 *     // images: steps x 64 images of 1x28x28 floats; labels: steps x 64 class ids.
 *     int train(const float *images, const int32_t *labels, int steps)
 *     {
 *         hyfi_ctx_config cc = hyfi_ctx_config_default(); // what NULL would give:
 *         cc.verbose = 1;                                  // change fields from there
 *         hyfi_ctx *ctx;
 *         if (hyfi_ctx_create(&cc, &ctx) != HYFI_OK) {
 *             fprintf(stderr, "%s\n", hyfi_last_error());
 *             return 1;
 *         }
 *         hyfi_graph *g;
 *         hyfi_graph_create(ctx, 42, &g);                    // 42: parameter seed
 *
 *         // Build: every builder takes (graph, name, inputs..., params) and returns
 *         // a tensor. Errors are sticky: check hyfi_graph_status() once at the end.
 *         hyfi_tensor *x = hyfi_input(g, "image", 64, 1, 28, 28); // NCHW float32
 *         hyfi_tensor *y = hyfi_labels(g, "label", 64);           // int32 class ids
 *         hyfi_tensor *h = hyfi_conv2d(g, "conv1", x, (hyfi_conv2d_params){
 *             .out_channels = 16, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1});
 *         h = hyfi_batchnorm(g, "bn1", h, (hyfi_batchnorm_params){0}); // momentum 0.1, eps 1e-5
 *         h = hyfi_relu(g, "relu1", h);
 *         h = hyfi_maxpool(g, "pool1", h, (hyfi_pool_params){.kernel_h = 2, .kernel_w = 2});
 *         h = hyfi_global_avgpool(g, "gap", h);
 *         h = hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = 10, .bias = true});
 *         hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", h, y);
 *
 *         // Compile: derive the backward pass, register every tensor with StarPU.
 *         hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f};
 *         if (hyfi_graph_status(g) != HYFI_OK || hyfi_graph_compile(g, loss, &tc) != HYFI_OK) {
 *             fprintf(stderr, "%s\n", hyfi_graph_error(g));
 *             return 1;
 *         }
 *         for (int step = 0; step < steps; step++) {
 *             float l;
 *             hyfi_set_input(g, x, images + (size_t)step * 64 * 784, 64 * 784);
 *             hyfi_set_labels(g, y, labels + (size_t)step * 64, 64);
 *             if (hyfi_train_step(g, &l) != HYFI_OK) {      // forward, backward, SGD
 *                 fprintf(stderr, "%s\n", hyfi_last_error());
 *                 return 1;
 *             }
 *             printf("step %d loss %.4f\n", step, l);
 *         }
 *         float logits[64 * 10];
 *         hyfi_infer(g, NULL);                               // eval-mode forward
 *         hyfi_tensor_read(g, hyfi_tensor_find(g, "fc"), logits, 64 * 10);
 *         hyfi_status s = hyfi_save_params(g, "model.hyfi"); // atomic write
 *         hyfi_graph_destroy(g);
 *         hyfi_ctx_destroy(ctx);
 *         return s == HYFI_OK ? 0 : 1;
 *     }
 * [/example]
 *
 * Every call returns a hyfi_status; on failure a readable message naming the
 * problem and the fix is available from hyfi_last_error() (per thread), and for
 * graph calls also from hyfi_graph_error(). The library never exits or aborts on
 * user error (it ends the process in three places only, all faults, not user
 * errors: the MPI watchdog, hyfi_ctx_config.watchdog_s, off by default;
 * hyfi_launch_config's timeout; and an MPI_Finalize that has not returned
 * though every rank finished its work).
 * Arguments: the object first (ctx, graph), inputs, then outputs last
 * (pointers the call fills); an array before its count. hyfi_ctx_config and
 * hyfi_train_config have a *_default() function, and a NULL config means it; a
 * zeroed hyfi_plan_config is the default plan.
 *
 * Tensors are float32 in NCHW order (labels: int32, one per image). A tensor
 * handle belongs to its graph and lives until hyfi_graph_destroy().
 */
#ifndef HYFI_H
#define HYFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* FILE: hyfi_trace_summarize */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ status codes */
typedef enum hyfi_status {
    HYFI_OK = 0,
    HYFI_ERR_ARG,         /* an argument is invalid (NULL, negative size, unknown name) */
    HYFI_ERR_SHAPE,       /* tensor shapes do not fit the op */
    HYFI_ERR_STATE,       /* the call is not valid now (e.g. building after compile) */
    HYFI_ERR_NOMEM,       /* out of memory */
    HYFI_ERR_IO,          /* a file is missing, unreadable, corrupt or cannot be written */
    HYFI_ERR_RUNTIME,     /* StarPU, MPI or a kernel failed while running */
    HYFI_ERR_UNSUPPORTED, /* asked for something this build or machine lacks (e.g. CUDA) */
    HYFI_ERR_DATA,        /* bad data: a label out of range, a non-finite loss */
    HYFI_ERR_MISMATCH     /* the MPI ranks disagree: they built different graphs, plans or
                             training settings, or were started with different arguments
                             (every rank must run the same program: SPMD) */
} hyfi_status;

/* Short name of a status ("HYFI_ERR_SHAPE"). */
const char *hyfi_status_name(hyfi_status s);
/* Message of the last failed call on this thread ("" if none). */
const char *hyfi_last_error(void);
/* Library version string. */
const char *hyfi_version(void);

/* ----------------------------------------------------------------- context */
typedef struct hyfi_ctx hyfi_ctx;

typedef enum hyfi_device {
    HYFI_DEVICE_AUTO = 0, /* CPU workers plus every CUDA GPU there is */
    HYFI_DEVICE_CPU,      /* CPU workers only */
    HYFI_DEVICE_CUDA      /* CUDA workers required (fails clearly without a GPU); kernels run
                             on the GPUs, CPU workers only where an op has no CUDA path */
} hyfi_device;

/* The library's messages that are not errors of a call (those are the calls'
 * statuses and hyfi_last_error()): what -v asks for, warnings about a plan,
 * and the last line before a rank ends a stuck job. */
typedef enum {
    HYFI_LOG_ERROR = 0, /* the job is being ended (watchdog, start-up time limit) */
    HYFI_LOG_WARNING,
    HYFI_LOG_INFO       /* with verbose */
} hyfi_log_level;
/* One message: a line without the newline. May be called from a thread of
 * the library (the watchdog's, MPI's time limits) just before the job ends. */
typedef void (*hyfi_log_fn)(void *user, hyfi_log_level level, const char *msg);

typedef struct hyfi_ctx_config {
    hyfi_device device;
    int ncpus;            /* CPU workers; <= 0: StarPU's choice (one per free core) */
    int ncuda;            /* CUDA workers; < 0: every GPU */
    int mpi;              /* 1: StarPU-MPI (run under mpiexec); 0: single process;
                             -1 (or config NULL): StarPU-MPI when launched by mpiexec */
    const char *scheduler;/* StarPU scheduler; NULL: "dmdas" with CUDA workers, "prio" (one
                             central queue ordered by priority) on CPUs only */
    int cpu_threads;      /* threads of one CPU kernel (oneDNN); <= 0: cores / CPU workers */
    int bind_workers;     /* 1: pin StarPU workers to cores; 0: let the OS place them (faster
                             when the application's own threads share the cores); the
                             environment variable STARPU_WORKERS_NOBIND, if set, wins */
    int verbose;          /* 1: print the workers found */
    int comm_stats;       /* 1: count the bytes sent to each rank (hyfi_ctx_comm_bytes;
                             StarPU-MPI also prints them at shutdown) */
    const char *trace_dir;/* non-NULL: record a StarPU FxT trace on every rank into
                             trace_dir/raw (created), with hyfi's names of handles and
                             ops beside it; after hyfi_ctx_destroy, rank 0 merges and
                             summarises it (hyfi_trace_merge, hyfi_trace_summarize).
                             NULL: no tracing and no cost */
    const char *trace_events;/* with trace_dir: the categories StarPU's FxT records, as in
                             its STARPU_FXT_EVENTS ("TASK|USER|MPI": what hyfi's summary
                             reads; "TASK|USER" on one process), set for this context's
                             initialisation; StarPU keeps the first context's choice for
                             the process. NULL: all (StarPU's default) */
    int watchdog_s;       /* MPI runs of 2 or more ranks: > 0 ends the whole job when this
                             rank has waited inside a hyfi call for watchdog_s seconds
                             without any task completing on it (a peer rank was stopped or
                             died, or the run hangs): one line on stderr names the rank,
                             the seconds and the likely cause, then MPI_Abort (error code 1)
                             makes mpiexec end every rank. One of the three places the
                             library ends the process (top of this file): it is a fault,
                             not a user error, and a blocked
                             StarPU-MPI wait cannot be cancelled to return one. Set it
                             above the longest time a rank can wait for the others' work
                             (about one stage's share of a step). It also bounds
                             hyfi_ctx_destroy's MPI_Finalize, which starts once every rank
                             has finished (a barrier): past watchdog_s seconds (30 at
                             most) there, a line on stderr and the exit status of
                             hyfi_launch_exit_status, 0 by default (MPI's own shutdown
                             hangs with UCX over TCP at times; the work is done).
                             0: off (the default);
                             hyfi-train: --watchdog, 120 s by default */
    /* Memory of this process (each MPI rank: all its places together). */
    int mem_limit_mb;     /* > 0: StarPU's limit on the data it allocates in main memory
                             (STARPU_LIMIT_CPU_MEM, MB; set for this process, overriding
                             the environment); hyfi_graph_compile refuses a plan whose
                             estimate per rank is above it (StarPU would wait for memory
                             forever), naming the fixes with their estimates, unless
                             swap_dir is set. 0: STARPU_LIMIT_CPU_MEM if set, else none */
    const char *swap_dir; /* non-NULL: out-of-core. A StarPU disk memory node in this
                             folder (created if missing; unistd files): with a memory limit,
                             StarPU evicts data above it to the disk instead of waiting
                             (slower, not failing), and compile accepts plans above the
                             limit. NULL: none */
    int swap_mb;          /* the most StarPU puts in swap_dir (>= 16); 0: 90% of the free
                             space of its file system */
    /* CPU cores: hyfi-train sets these from the variables in brackets. */
    long lend_min_bytes;  /* a CPU kernel with a buffer of at least this many bytes also
                             takes the cores of idle CPU workers (ops/codelet_common.h);
                             0: the default (any kernel); < 0: no lending
                             (HYFI_LEND_MIN_BYTES=0) */
    bool no_submit_cap;   /* kernels that start while a step is being submitted keep all
                             their threads (HYFI_SUBMIT_CAP=0; for measurements) */
    int submit_window;    /* > 0: a program's tasks are submitted at most this many ahead of
                             those this rank has finished (the submitting thread waits for
                             half of them before going on), so StarPU holds that many task
                             records at a time instead of a whole step's (about 3 KB each:
                             tens of thousands per step and rank with many tiles). The
                             scheduler then sees fewer ready tasks. 0: a whole program at
                             once (the default; hyfi-train: --submit-window) */
    int phys_mem_mb;      /* > 0: the memory of this node the plan's checks assume,
                             instead of the physical memory or the cgroup's limit
                             (HYFI_PHYS_MEM_MB; a node with memory reserved for others) */
    bool death_notice;    /* MPI runs: fork, before MPI starts, a small watcher process
                             that names this rank on stderr if it dies without shutting
                             down, with handlers of fatal signals and an atexit hook (the
                             library's only process-wide changes beyond StarPU's and MPI's);
                             off by default; hyfi-train turns it on (HYFI_DEATH_NOTICE=0:
                             off). Where hyfi_launch_begin started MPI, its config's
                             field decides */
    /* The kernels, for measurements (each 0: the measured default; process-wide,
     * set by hyfi_ctx_create; hyfi-train: the variables in brackets). */
    int conv_algo;        /* CPU convolutions: 1 oneDNN's direct algorithm, 2 Winograd
                             wherever oneDNN has it, 3 hyfi's GEMM weight gradient
                             wherever possible (HYFI_CONV_ALGO=direct|winograd|gemm) */
    int conv_plain;       /* unblocked CPU convolutions: 1 always plain NCHW, -1 always
                             blocked; 0: plain for 1x1 stride 1 (HYFI_CONV_PLAIN=1 / 0) */
    int bf16_conv;        /* bf16 CPU convolutions: 1 oneDNN's bf16 primitives, -1 float32
                             on staged copies; 0: by CPU (HYFI_BF16_CONV=native|staged) */
    bool no_dnnl_cache;   /* oneDNN primitives made at every call (HYFI_DNNL_CACHE=0) */
    bool no_cudnn_find;   /* cuDNN's heuristics' first algorithm instead of measuring
                             (HYFI_CUDNN_FIND=0) */
    /* Simulation builds only (docs/simulation.md); ignored by a real build. */
    const char *sim_analytic; /* a file of analytic task costs, lines "SYMBOL cpu|cuda
                                 A B C" (microseconds = A + B flops + C bytes), for the
                                 footprints StarPU has no calibrated mean of; NULL: none
                                 (HYFI_SIM_ANALYTIC) */
    double sim_task_us;       /* microseconds added to every simulated task, the
                                 runtime's own cost per task; >= 0 (HYFI_SIM_TASK_US) */
    hyfi_log_fn log;      /* where the context's messages go; NULL: stderr, each line
                             "hyfi: " (warnings "hyfi: warning: ") + the message */
    void *log_user;       /* log's first argument */
} hyfi_ctx_config;

/* The default configuration, what cfg NULL means: device AUTO, ncpus -1 and
 * ncuda -1 (StarPU's choice of CPU workers, every GPU), mpi -1 (StarPU-MPI when
 * launched by mpiexec), every other field 0 or NULL. Start from it and change
 * fields. A zeroed hyfi_ctx_config is still accepted and means what its fields
 * say, as before; it differs from the default in ncuda 0 (no CUDA worker) and
 * mpi 0 (a single process, even under mpiexec). */
hyfi_ctx_config hyfi_ctx_config_default(void);
/* Initialise StarPU (and StarPU-MPI when asked); cfg NULL: the default.
 * StarPU holds one initialisation per process and MPI cannot be initialised
 * again once finalised, so a context is a per-process singleton: while one
 * exists, hyfi_ctx_create fails with HYFI_ERR_STATE (*ctx NULL), as does an
 * MPI context after an MPI context was destroyed; a context without MPI may be
 * created again after hyfi_ctx_destroy. */
hyfi_status hyfi_ctx_create(const hyfi_ctx_config *cfg, hyfi_ctx **ctx);
/* Wait for all tasks, shut StarPU(-MPI) down, free the context. NULL is fine. */
void hyfi_ctx_destroy(hyfi_ctx *ctx);
int hyfi_ctx_rank(const hyfi_ctx *ctx);       /* MPI rank, 0 without MPI */
int hyfi_ctx_nranks(const hyfi_ctx *ctx);     /* MPI size, 1 without MPI */
int hyfi_ctx_ncpu_workers(const hyfi_ctx *ctx);
int hyfi_ctx_ncuda_workers(const hyfi_ctx *ctx);

/* Check a configuration as hyfi_ctx_create would, without starting anything:
 * the fields' ranges, CUDA asked for where this build or node has none, the
 * swap folder (created if missing, writable, room), the trace folder
 * (created). HYFI_OK, or the status and message hyfi_ctx_create would give.
 * Under MPI a program calls it during its start-up, before hyfi_launch_agree,
 * so that a node that cannot run the context stops every rank at once. */
hyfi_status hyfi_ctx_config_check(const hyfi_ctx_config *cfg);

/* MPI runs: collective calls, and the start-up of MPI programs before any
 * context (hyfi_launch_*). */
#include "hyfi_mpi.h"

/* ------------------------------------------------------------------- graph */
typedef struct hyfi_graph hyfi_graph;
typedef struct hyfi_tensor hyfi_tensor;

/* A new, empty graph. `seed` makes parameter initialisation deterministic: a
 * parameter's initial values depend only on the seed and its name. */
hyfi_status hyfi_graph_create(hyfi_ctx *ctx, uint64_t seed, hyfi_graph **g);
void hyfi_graph_destroy(hyfi_graph *g);
/* Sticky builder status: the first error of any builder call, HYFI_OK if none. */
hyfi_status hyfi_graph_status(const hyfi_graph *g);
const char *hyfi_graph_error(const hyfi_graph *g);

/* Builders. `name` must be unique in the graph (NULL: a generated name). On an
 * error, or when an input is NULL, a builder records the error and returns NULL. */

/* An input batch (N,C,H,W), written with hyfi_set_input before each step. */
hyfi_tensor *hyfi_input(hyfi_graph *g, const char *name, int n, int c, int h, int w);
/* Class labels (N) as int32, written with hyfi_set_labels. */
hyfi_tensor *hyfi_labels(hyfi_graph *g, const char *name, int n);

typedef struct hyfi_conv2d_params {
    int out_channels;
    int kernel_h, kernel_w;
    int stride_h, stride_w; /* 0 means 1 */
    int pad_h, pad_w;       /* zero padding on each side */
    int groups;             /* 0 means 1; in_channels for depthwise */
    bool bias;
} hyfi_conv2d_params;
/* Parameters "<name>.weight" (Cout, Cin/groups, KH, KW), He-normal (fan-in) init,
 * and "<name>.bias" (Cout), zero init, when p.bias. */
hyfi_tensor *hyfi_conv2d(hyfi_graph *g, const char *name, hyfi_tensor *x,
                         hyfi_conv2d_params p);

typedef struct hyfi_batchnorm_params {
    float momentum; /* of the running statistics; 0 means 0.1 */
    float eps;      /* added to the variance; 0 means 1e-5 */
} hyfi_batchnorm_params;
/* Batch normalisation over (N,H,W) per channel: batch statistics in training,
 * running statistics in hyfi_infer; (hyfi_batchnorm_params){0}: PyTorch's
 * defaults. Parameters "<name>.gamma" (ones), "<name>.beta" (zeros) and state
 * "<name>.running_mean", "<name>.running_var". */
hyfi_tensor *hyfi_batchnorm(hyfi_graph *g, const char *name, hyfi_tensor *x,
                            hyfi_batchnorm_params p);
hyfi_tensor *hyfi_relu(hyfi_graph *g, const char *name, hyfi_tensor *x);

typedef struct hyfi_pool_params {
    int kernel_h, kernel_w;
    int stride_h, stride_w; /* 0 means the kernel size */
    int pad_h, pad_w;
    bool count_include_pad; /* average pooling: divide by the whole window */
} hyfi_pool_params;
hyfi_tensor *hyfi_maxpool(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_pool_params p);
hyfi_tensor *hyfi_avgpool(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_pool_params p);
/* (N,C,H,W) -> (N,C,1,1) */
hyfi_tensor *hyfi_global_avgpool(hyfi_graph *g, const char *name, hyfi_tensor *x);
/* Elementwise sum of two tensors of the same shape. */
hyfi_tensor *hyfi_add(hyfi_graph *g, const char *name, hyfi_tensor *a, hyfi_tensor *b);
/* Concatenation along channels of `count` tensors with equal N, H, W. */
hyfi_tensor *hyfi_concat(hyfi_graph *g, const char *name, hyfi_tensor *const *xs, int count);
typedef struct hyfi_fc_params {
    int out_features;
    bool bias;
} hyfi_fc_params;
/* Fully connected layer on x flattened to (N, C*H*W) -> (N, out, 1, 1). Parameters
 * "<name>.weight" (out, C*H*W) and "<name>.bias" (out, when p.bias), uniform
 * ±1/sqrt(fan-in). */
hyfi_tensor *hyfi_fc(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_fc_params p);
/* Mean over the batch of the softmax cross-entropy of logits (N,K,1,1) against
 * labels (N); a scalar tensor (1,1,1,1). */
hyfi_tensor *hyfi_softmax_cross_entropy(hyfi_graph *g, const char *name, hyfi_tensor *logits,
                                        hyfi_tensor *labels);

/* ---------------------------------------------------------------- training */
/* Arithmetic precision of training. */
typedef enum hyfi_precision {
    HYFI_PRECISION_FP32 = 0, /* float32 throughout */
    HYFI_PRECISION_BF16      /* mixed: activations and their gradients hold bfloat16 values,
                                stored in 2 bytes (rounded to nearest even as each task
                                writes them; inputs, float32 buffers, rounded as they are
                                set), convolutions and fully connected layers
                                take bf16 weights and bias and accumulate in float32;
                                master weights, their gradients, momentum, the SGD update,
                                batch-norm statistics and parameters, and the loss stay
                                float32. No loss scaling: bf16 has float32's exponent
                                range, so gradients do not underflow where float32's would
                                not. CPU workers only for now (the CUDA path's bf16 kernels
                                come with the GPU throughput work) */
} hyfi_precision;

typedef struct hyfi_train_config {
    float lr;             /* SGD learning rate */
    float momentum;       /* 0: plain SGD */
    float weight_decay;   /* L2, added to the gradient as in PyTorch's SGD */
    hyfi_precision precision; /* HYFI_PRECISION_FP32 (0, the default) or _BF16 */
} hyfi_train_config;

/* The default training settings, what cfg NULL means: lr 0.01, no momentum,
 * no weight decay. A zeroed hyfi_train_config is not the default: its lr 0 is
 * refused by hyfi_graph_compile (HYFI_ERR_ARG), as before. */
hyfi_train_config hyfi_train_config_default(void);

/* Finish the graph: derive the backward pass from `loss`, initialise the
 * parameters, register every tensor with StarPU. No builder calls after this.
 * cfg NULL: hyfi_train_config_default(). */
hyfi_status hyfi_graph_compile(hyfi_graph *g, hyfi_tensor *loss, const hyfi_train_config *cfg);
hyfi_status hyfi_set_lr(hyfi_graph *g, float lr);

/* Copy a batch in. count must equal the tensor's number of elements. */
hyfi_status hyfi_set_input(hyfi_graph *g, hyfi_tensor *t, const float *data, size_t count);
hyfi_status hyfi_set_labels(hyfi_graph *g, hyfi_tensor *t, const int32_t *labels, size_t count);

/* ------------------------------------------------------------ region input */
/* Inputs too large for one rank (8,192^2 to 100,000^2-pixel images): instead
 * of the whole batch on every rank (hyfi_set_input), each rank writes only the
 * regions it owns, read straight from the files by the caller.
 *
 * An input's data lives in handles, one per micro-batch, and, where the plan
 * tiles the input's stage spatially, one per (micro-batch, tile); each handle
 * is owned by one rank. A region names one handle's part of the batch:
 * images [first, first + count) of the whole batch (the graph's batch rows,
 * every replica's included), all `channels`, rows [y0, y0 + h) and columns
 * [x0, x0 + w) of each image. A tile's region is exactly its own pixels: the
 * halos that its convolutions and pools need from the neighbouring tiles are
 * exchanged by the engine (tasks between the tiles' places), so no rank
 * reads another's pixels. An untiled input has whole-image regions (tile -1),
 * one per micro-batch; a tiled input read by an untiled op as well has both.
 *
 * Normalised floats in a region's buffer are laid out (count, channels, h, w)
 * and must equal the corresponding part of what hyfi_set_input would get. */
typedef struct hyfi_input_region {
    int micro_batch;   /* the handle's micro-batch (of every replica: 0..parts x replicas-1) */
    int first, count;  /* images [first, first + count) of the batch */
    int channels;      /* every channel of the input */
    int y0, x0, h, w;  /* rows [y0, y0 + h), columns [x0, x0 + w) */
    int tile;          /* tile index (row-major over the tile grid), -1: whole images */
} hyfi_input_region;

/* After compile: the regions of input t that THIS rank owns (without MPI:
 * all of them), in the order hyfi_set_input_fn fills them. Writes up to cap
 * of them to out (out may be NULL with cap 0) and their number to *count, so
 * a caller can ask for the count first. The list is the same for every call
 * of a compiled graph (a reader may open its files and plan its reads once). */
hyfi_status hyfi_input_regions(hyfi_graph *g, const hyfi_tensor *t, hyfi_input_region *out,
                               int cap, int *count);

/* Fill one region: write its (count, channels, h, w) floats to out (the
 * handle's own memory: nothing is copied afterwards) and return 0, or return
 * non-zero for a failure (e.g. a file that cannot be read; the fill function
 * reports its own message). */
typedef int (*hyfi_input_fill_fn)(void *user, const hyfi_input_region *r, float *out);

/* Write input t region by region: collective (every rank calls it, like
 * hyfi_set_input, in place of it); calls fill once per region this rank owns
 * (hyfi_input_regions), in that order, on the calling thread. After a fill
 * fails, no more are called. Every rank returns the same status:
 * HYFI_ERR_DATA, naming the tensor and the region, when fill failed on some
 * rank; HYFI_ERR_ARG for a NULL fill or a tensor that is no input. */
hyfi_status hyfi_set_input_fn(hyfi_graph *g, hyfi_tensor *t, hyfi_input_fill_fn fill, void *user);

/* One training step: forward (batch-norm in training mode), backward, SGD
 * update, as StarPU tasks; waits for them. *loss (may be NULL) gets the loss.
 * HYFI_ERR_DATA when the loss, a gradient or an updated weight is not finite
 * (NaN or infinity: bad input data or a learning rate that diverges); the
 * message names the first such parameter. The update has then been applied:
 * the weights are corrupted, reload saved ones before training on. Every
 * rank returns the same status. */
hyfi_status hyfi_train_step(hyfi_graph *g, float *loss);
/* L2 norms over every trained parameter of the last hyfi_train_step's
 * gradient (as given to SGD, before weight decay) and of the weights after its
 * update (replica 0's), from sums taken inside the SGD tasks. Either pointer
 * may be NULL. HYFI_ERR_STATE before the first step. */
hyfi_status hyfi_train_norms(hyfi_graph *g, double *grad_norm, double *weight_norm);
/* Forward only, batch norm with running statistics; no update. *loss may be NULL. */
hyfi_status hyfi_infer(hyfi_graph *g, float *loss);
/* Forward only; training = true normalises with batch statistics (and updates
 * the running ones) exactly as hyfi_train_step's forward does, without the
 * backward or the update (loss evaluations, finite differences). */
hyfi_status hyfi_forward(hyfi_graph *g, bool training, float *loss);

/* ----------------------------------------------------------------- layers */
/* Start a new layer: the ops built after this call belong to it, until the
 * next call. Layers are the units of a plan's balance (layers per stage) and
 * of its automatic partitioning. Ops built before the first call form one
 * layer of their own; a graph without any call has one layer per op. The
 * models of hyfi-train make a layer of the stem, each residual block or cell,
 * and the head. */
hyfi_status hyfi_layer_begin(hyfi_graph *g, const char *name);
int hyfi_layer_count(const hyfi_graph *g);

/* ------------------------------------------------------------------ plans */
/* A plan says where and in which pieces the training step runs: the layers
 * are cut into `stages` contiguous stages (layer parallelism), each on its own
 * place, and the batch into `parts` micro-batches that flow through the stages
 * (pipeline parallelism). Places are spread over the MPI ranks in contiguous
 * blocks (place s on rank s * ranks / stages), so any plan runs in one process
 * as well as on 2 or more ranks (at most one rank per stage); a rank with a
 * CUDA worker per place it holds runs each of its stages on its own GPU (with
 * GEMS, per place of copy 0: the other copies' places run on the GPUs of copy
 * 0's places they sit like).
 *
 * Semantics: a micro-batch is a batch of its own for batch normalisation
 * (statistics per micro-batch, as in GPipe and MPI4DL); the loss is the mean
 * over the whole batch; parameter gradients are summed over the micro-batches
 * (StarPU reductions) before the one SGD update of the step. So every plan with
 * the same `parts` computes the same step as the one-stage, one-process run
 * with that `parts`, to float32 round-off (bitwise with `deterministic`).
 *
 * In an MPI run every rank builds the same graph and plan and makes the same
 * calls (hyfi_set_input, hyfi_train_step, reads, saves): the data of a tensor
 * is only kept by the rank that owns it, and reads bring it to every rank. */
typedef enum hyfi_schedule {
    HYFI_SCHEDULE_GPIPE = 0, /* all forwards, then all backwards */
    HYFI_SCHEDULE_1F1B = 1   /* one forward, one backward: at most S - s micro-batches'
                                activations alive on stage s */
} hyfi_schedule;

typedef enum hyfi_slice_method {
    HYFI_SLICE_SQUARE = 0,  /* sqrt(P) x sqrt(P) tiles */
    HYFI_SLICE_VERTICAL,    /* P vertical strips (the width is cut) */
    HYFI_SLICE_HORIZONTAL   /* P horizontal strips (the height is cut) */
} hyfi_slice_method;

typedef enum hyfi_gems {
    HYFI_GEMS_NONE = 0,
    HYFI_GEMS_MAST,         /* two copies of the model: copy 1 mirrored (stage i on the place
                               of copy 0's stage S-1-i) */
    HYFI_GEMS_MASTER        /* 2 x `replications` copies, alternately mirrored */
} hyfi_gems;

typedef enum hyfi_allreduce {
    HYFI_ALLREDUCE_AUTO = 0, /* ring where a bucket's chunks (bytes / replicas) reach 1 MiB
                                (large --bucket-kib), else tree */
    HYFI_ALLREDUCE_RING,     /* reduce-scatter + all-gather over chunks: 2 steps of n/R */
    HYFI_ALLREDUCE_TREE      /* binomial-tree reduce to replica 0, then broadcast back */
} hyfi_allreduce;

/* Re-materialisation (activation checkpointing, as GPipe / torchgpipe and
 * DeepSpeed do): the forward of a segment keeps only what leaves it (tensors
 * other segments read, the loss) and the saved tensors (batch-norm batch
 * statistics, softmax probabilities); the activations inside it are dropped
 * (their StarPU buffers invalidated) as soon as the segment's forward has run.
 * The backward first re-runs the segment's forward from its kept inputs (batch
 * norm normalising with the saved statistics, running statistics untouched),
 * then its backward: the step is bitwise the one without recompute, for about
 * one more forward of compute. */
typedef enum hyfi_recompute {
    HYFI_RECOMPUTE_NONE = 0, /* keep every activation until the stage's backward */
    HYFI_RECOMPUTE_STAGE,    /* segment: a stage, per micro-batch (GPipe's re-materialisation) */
    HYFI_RECOMPUTE_LAYER     /* segment: a layer (hyfi_layer_begin: a residual block, a cell),
                                recomputed and back-propagated one at a time, its activations
                                and their gradients dropped after its backward */
} hyfi_recompute;

typedef struct hyfi_plan_config {
    int stages;             /* layer partitions (MPI4DL's --split-size); <= 1: one */
    const int *balance;     /* layers per stage (`stages` entries, summing to the layer
                               count), or NULL: balanced by forward FLOPs plus output
                               bytes */
    int parts;              /* micro-batches per step (--parts); <= 1: one; must divide
                               the batch */
    hyfi_schedule schedule;
    bool deterministic;     /* sum the micro-batches' parameter gradients in micro-batch
                               order (a chain of accumulating tasks) instead of a StarPU
                               reduction (per-worker copies added in run-time order):
                               the same floats for every plan and run, given kernels
                               with fixed thread counts (hyfi_ctx_config.cpu_threads;
                               hyfi-train: HYFI_CPU_THREADS) */
    /* Spatial parallelism: the first `spatial_stages` stages (MPI4DL's
     * --spatial-size) work on `spatial_parts` tiles of each image
     * (--num-spatial-parts), cut by `slice` (--slice-method), each tile on its
     * own place. Halos are exchanged as boundary strips, batch norm uses the
     * statistics of the whole batch, and the tiles are gathered for the first
     * untiled stage: the step is the untiled one. 0 / <= 1: no tiling. */
    int spatial_stages;
    int spatial_parts;
    hyfi_slice_method slice;
    /* Fused halos (MPI4DL's --halo-d2 is 2): up to this many consecutive tiled
     * convolutions or pools needing halos share one wider halo exchange; the
     * ops between them compute a border that shrinks op by op, recomputing what
     * the neighbour computes. Chains stop at ops with several inputs (add,
     * concat) and at tensors with several consumers. <= 1: one exchange per op. */
    int fused_layers;
    /* Replicas: GEMS copies (bidirectional parallelism) times `data_parallel`
     * groups; each replica is the whole arrangement above (stages, tiles,
     * micro-batches) on its own places. The graph's batch is the global batch;
     * replica k takes its k-th slice (`parts` micro-batches of it), so the step
     * equals the one-place step with `parts` x replicas micro-batches. Each
     * parameter's gradient is all-reduced over the replicas by tasks (chunks
     * moved between ranks by StarPU-MPI) as soon as it is complete, then every
     * replica updates its own copy; running statistics are combined to what
     * the one-place run would have. Data-parallel groups take ranks/groups
     * ranks each; GEMS copies share their group's ranks. */
    hyfi_gems gems;
    int replications;       /* MASTER: pairs of copies (MPI4DL's --times); <= 1: one */
    int data_parallel;      /* data-parallel groups (--data-parallel); <= 1: one */
    hyfi_allreduce allreduce;
    int bucket_kib;         /* gradients of a stage travel packed in buckets of up to this
                               many KiB (in the order the backward completes them); 0: 256;
                               < 0: one all-reduce per parameter */
    int pack_stats;         /* replicas' batch-norm running statistics: combined packed,
                               16 to a buffer (1), or one by one (-1); 0: packed with more
                               than 4 replicas, where the tree has 3 levels or more (fewer
                               tasks: 2 per level and buffer instead of 2 per level and
                               statistic), and with 2 or more without CUDA workers (where a
                               task copies a whole group into or out of its buffer). The
                               same floats either way (hyfi-train: HYFI_PACK_STATS=1 / 0) */
    hyfi_recompute recompute; /* re-materialisation (--recompute), with every form above */
    /* Graph rewrites, each on by default (false) where it applies (CPU-only runs;
     * docs/architecture.md); none changes a result bit. Every rank must pass the
     * same. hyfi-train sets them from the variables named (docs/user-guide.md). */
    bool plain_layouts;     /* activations and weights NCHW / OIHW between tasks instead of
                               oneDNN's blocked layouts (HYFI_BLOCKED=0) */
    bool plain_weights;     /* only the weights OIHW (HYFI_BLOCKED_WEIGHTS=0) */
    bool no_fuse_bn_relu;   /* batch norm and the ReLU after it as two tasks
                               (HYFI_FUSE_BN_RELU=0): their outputs readable */
    bool no_fuse_conv_add;  /* a convolution and the residual add after it as two tasks
                               (HYFI_FUSE_CONV_ADD=0) */
    bool no_grad_forwarding;/* every add's backward copies its output gradient to its
                               inputs (HYFI_GRAD_ALIAS=0): every gradient readable */
    int one_cpu_worker;     /* a one-place chain on CPUs runs every task on one CPU worker
                               with all the cores (docs/architecture.md): 0 where it is
                               measured faster, 1 for any one-place plan, -1 never
                               (HYFI_ONE_CPU_WORKER=1 / =0) */
    const char *dump_programs; /* non-NULL: the compile appends its programs' listing to
                               this file (".rN" added per rank under MPI; tests;
                               HYFI_DUMP_PROGRAMS) */
    bool submit_all;        /* under MPI, every rank builds the whole step's tasks (StarPU-MPI
                               skips the others' at submission) instead of its share
                               (HYFI_SUBMIT_ALL=1; for measurements) */
} hyfi_plan_config;

/* Set the plan of a graph before hyfi_graph_compile (default: one stage, one
 * micro-batch). Checked at compile, with messages naming the fix. Every field's
 * 0 is its default, so a zeroed hyfi_plan_config, like plan NULL, is the
 * default plan: it needs no _default() function. */
hyfi_status hyfi_graph_set_plan(hyfi_graph *g, const hyfi_plan_config *plan);

typedef struct hyfi_stage_info {
    int first_layer, nlayers;   /* layers [first_layer, first_layer + nlayers) */
    const char *first_layer_name, *last_layer_name;
    int rank;                   /* MPI rank of the stage's place */
    int worker;                 /* StarPU worker the stage is pinned to, -1: none */
    int inflight;               /* micro-batches whose activations are alive at once */
    int tiles;                  /* places (tiles) of a spatially tiled stage, else 1; its
                                   places follow each other on the ranks */
    size_t params;              /* trainable values */
    size_t param_bytes;         /* parameters, gradients and momentum */
    size_t act_bytes;           /* estimated peak of activations, their gradients and
                                   saved tensors */
    double flops;               /* forward FLOPs of one step */
} hyfi_stage_info;
/* After compile. */
int hyfi_plan_stage_count(const hyfi_graph *g);
int hyfi_plan_parts(const hyfi_graph *g);
hyfi_status hyfi_plan_stage(const hyfi_graph *g, int s, hyfi_stage_info *info);
/* Bytes that rank `from` sends to rank `to` in one training step, predicted
 * from the plan (activations forward, their gradients back, the loss). A rank
 * knows the pairs it is one of (its own sends and receives: 0 for the
 * others), so that its memory grows with the ranks, not their square;
 * hyfi_plan_describe prints the total over all ranks. */
size_t hyfi_plan_step_bytes(const hyfi_graph *g, int from, int to);
/* Of those, the halo strips between tiles (spatial parallelism), by the same
 * walk; and the halo bytes crossing ranks per step computed from the tile
 * geometry alone (strips forward, their gradients back). */
size_t hyfi_plan_step_halo_bytes(const hyfi_graph *g, int from, int to);
/* The totals over all pairs of ranks of the two above (each rank's own sends,
 * summed between the ranks at compile). */
size_t hyfi_plan_step_total_bytes(const hyfi_graph *g);
size_t hyfi_plan_step_total_halo_bytes(const hyfi_graph *g);
size_t hyfi_plan_halo_volume(const hyfi_graph *g);
/* The plan as text (one line per stage), snprintf-style: returns the length it
 * needs, writes at most len bytes. */
size_t hyfi_plan_describe(const hyfi_graph *g, char *buf, size_t len);
/* This process's memory against the bound the plan states, in MB of 2^20 bytes
 * (as StarPU's limits). The bound is the sum of
 *   - StarPU's data: limit_mb under a limit (which StarPU holds, with swap),
 *     else the plan's estimate data_mb;
 *   - the process as it was once the context was made (start_mb: the program,
 *     StarPU, MPI), and what compiling graphs added besides StarPU's data
 *     (graph_mb: StarPU's records of the handles, the task programs; with
 *     thousands of tiles' halo strips, hundreds of MB);
 *   - the kernels' scratch outside StarPU's data (scratch_mb: oneDNN's layout
 *     copies and scratchpads, per CPU worker about 5 x the largest activation
 *     tile it computes; measured);
 *   - a stated allowance for the rest (runtime_mb = 64 + 3% of the data + 32
 *     per place of the rank + 256 per CUDA worker: oneDNN's cached kernels, one
 *     set per tile shape, StarPU's task records, the heap's slack, cuDNN and
 *     cuBLAS loaded by the CUDA workers; docs/results.md measures it). */
typedef struct hyfi_memory_stats {
    double peak_mb;    /* resident memory at most so far (the kernel's high-water mark) */
    double start_mb;   /* resident memory when hyfi_ctx_create returned */
    double graph_mb;   /* the largest growth over a hyfi_graph_compile, less StarPU's data */
    double scratch_mb; /* the kernels' scratch at most so far (all CPU workers) */
    double limit_mb;   /* StarPU's memory limit of this process, 0: none */
    double data_mb;    /* the plan's estimate of this rank's data; 0 without graph */
    double runtime_mb; /* the allowance for the rest */
    double bound_mb;   /* the sum above */
} hyfi_memory_stats;
/* g: a compiled graph for data_mb, or NULL. */
hyfi_status hyfi_memory_stats_get(const hyfi_ctx *ctx, const hyfi_graph *g,
                                  hyfi_memory_stats *out);
/* Traces, task records, inspection, checkpoints and model files. */
#include "hyfi_files.h"
/* Automatic plans: the search over plans for a graph and a machine. */
#include "hyfi_autoplan.h"

#ifdef __cplusplus
}
#endif
#endif
