/* Engine internals: the logical graph (tensors and nodes), the compiled
 * programs (lists of tasks over StarPU handles) and error plumbing.
 *
 * Data flow: builders (graph.c) append nodes and tensors; hyfi_graph_compile
 * (compile.c) derives the backward pass through each op's definition (opdef.c)
 * and lowers the graph to three programs — train (forward, backward, SGD), infer
 * (eval-mode forward) and fwd_train (the train program's forward alone) — each
 * a flat, sequentially consistent list of tasks;
 * run.c submits a program as StarPU tasks and waits.
 */
#ifndef HYFI_ENGINE_INTERNAL_H
#define HYFI_ENGINE_INTERNAL_H

#include "hyfi.h"
#include "codelet_common.h"
#include "errors.h"
#include "kmap.h"

#include <starpu.h>
#include <starpu_mpi.h>
#include <stdarg.h>

/* Replicas (GEMS copies x data-parallel groups) of a plan. No task reads more
 * than a few replicas' buffers (the running-statistics combine is a tree of
 * pairwise merges, the all-reduce a ring or tree of pairs: engine/reduce.c) and
 * every array indexed by replica is allocated, so the bound only keeps the
 * plan's products (places, micro-batches, ring chunks: R x R per bucket) in
 * int range and refuses an obviously mistyped count. */
#define HYFI_MAX_REPLICAS 4096
/* Buffers of one task. The widest tasks read one buffer per tile besides a
 * few fixed ones (the tiled batch-norm combine: 4 + one partial sum per tile),
 * plus the pipeline token and the recompute fence; no task reads more than
 * three replicas' buffers. A task that would need more is a compile error
 * (program.overflow), never a silent overwrite. */
#define HYFI_MAX_TASK_BUFFERS (HYFI_MAX_TILES + 8)
/* HYFI_ALLREDUCE_AUTO: ring for a bucket whose chunks (bytes / replicas) reach
 * this, tree otherwise: the ring's 2 (R - 1) steps pay only when bandwidth-bound. */
#define HYFI_RING_MIN_CHUNK (1024 * 1024)
/* Default all-reduce bucket (hyfi_plan_config.bucket_kib 0). */
#define HYFI_BUCKET_KIB 256

/* Handle categories: what a handle's transfers are (the trace summary's and
 * the traffic model's split). */
typedef enum {
    HC_PIPELINE,   /* activations and their gradients between stages, tokens, health */
    HC_INPUT,      /* images and labels */
    HC_LOSS,       /* the loss and its seed */
    HC_HALO,       /* halo strips between tiles and their gradients */
    HC_BNSTATS,    /* batch-norm statistics over tiles */
    HC_ALLREDUCE,  /* parameters, state, their gradients, momentum; all-reduce buckets */
    HC_COUNT
} hyfi_hcat;
extern const char *const hyfi_hcat_names[HC_COUNT];
/* Or'ed into hyfi_reg's category: the handle holds bf16 values (bf16 runs:
 * activations, their gradients, inputs, and the buffers between their
 * tiles). With HYFI_HCAT_BF16S it stores them as bf16 (2-byte elements:
 * activations), which the CPU codelets stage in float32 around their kernels
 * (ops: hyfi_ops_stage_in/out) and hyfi_handle_read/write convert; without,
 * in float32 words (inputs, whose host buffers are float32), rounded by every
 * task that writes them (hyfi_ops_round_outputs) and by hyfi_handle_write. */
#define HYFI_HCAT_BF16 0x100
#define HYFI_HCAT_BF16S 0x200
/* What a handle's StarPU user data points to (ops/codelet_common.h's
 * hyfi_handle_info): [category][bf16]. */
extern const hyfi_handle_info hyfi_handle_infos[HC_COUNT][2];
/* The handle table: every piece of data a compiled graph names on this rank
 * (hyfi_reg), under its key (keyed.c's key map), with its handle, owner,
 * category and lifetime, so that looking up, releasing and unregistering are
 * loops over it or lookups in it. */
#define HYFI_KEEP (-1) /* rstage of a handle kept as long as the graph is compiled */
/* A piece of data as the compile and the programs name it: its entry in the
 * handle table + 1 (0: none on this rank). keyed.h: hyfi_kref (from its
 * key), hyfi_ref_h (its StarPU handle), hyfi_ref_rank, _bytes, _cat. */
typedef uint32_t hyfi_ref;
typedef struct {
    /* the StarPU handle: NULL while not registered on this rank (deferred,
     * dropped by hyfi_handles_resolve, or unregistered) */
    starpu_data_handle_t h;
    size_t bytes;
    int owner;
    hyfi_hcat cat;
    /* Lifetime: dropped (invalidated, and flushed from StarPU-MPI's cache)
     * once micro-batch rmb's backward is done on stage rstage; HYFI_KEEP: kept. */
    int rstage, rmb;
    int64_t tag;   /* its StarPU-MPI tag, from its key */
    int defer;     /* a deferred registration: its index in cc->dtab (keyed.c), else -1 */
    int flushread; /* read elsewhere only before a flush (localise.c): its writers need not
                      be seen by its readers (share.c, mark_skips) */
} hyfi_hentry;

/* An all-reduce bucket: gradients of one stage packed per replica. */
typedef struct hyfi_bucket {
    int stage;
    int nparams;
    hyfi_tensor **params;        /* in packing order (the backward's) */
    size_t numel;
    int ring; /* its all-reduce is the ring: chunk keys HK_ARC [k * nrep + c] */
    /* its packed gradient per replica: key HK_BUCKET (hyfi_bucket_h; one
     * parameter: that parameter's own gradient) */
} hyfi_bucket;
/* Replicas' running statistics combined packed (reduce.c): a stage's
 * batch norms of one momentum, their running means and variances side by
 * side in one buffer per replica. */
typedef struct hyfi_sgroup {
    int stage;
    double a;          /* 1 - momentum */
    int n;             /* state tensors */
    struct hyfi_tensor **t; /* in node order: a batch norm's mean, then its variance,
                               side by side in the packed buffers */
    size_t numel;           /* packed per replica: keys HK_SVAL, at the step's start HK_SSAVE */
} hyfi_sgroup;
#define HYFI_NAME_MAX 128

typedef enum {
    T_INPUT,   /* images, written by the user each step */
    T_LABELS,  /* int32 labels */
    T_PARAM,   /* trainable; has a gradient and a momentum buffer */
    T_STATE,   /* running statistics: saved with the parameters, not trained */
    T_ACT,     /* an op's output */
    T_SAVED    /* forward results kept for the backward (batch stats, probabilities) */
} tensor_kind;

typedef enum {
    INIT_ZERO,
    INIT_ONE,
    INIT_HE_NORMAL,  /* N(0, sqrt(2 / fan_in)) */
    INIT_UNIFORM     /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
} init_kind;

struct hyfi_tensor {
    hyfi_graph *g;
    int id;
    char *name;
    int dims[4];
    size_t numel;
    tensor_kind kind;
    int is_int;           /* labels */
    int batched;          /* the first dimension is the batch (cut into micro-batches) */
    int requires_grad;    /* a gradient flows into it (params and what depends on them) */
    int producer;         /* node index, -1 for inputs/params/state */
    init_kind init;
    int fan_in;

    int blk;              /* layout between tasks: 0 NCHW / OIHW, else the channel block
                             of nChw8c / nChw16c (activations) or of OIhw8i8o /
                             OIhw16i16o (convolution weights, their gradient and
                             momentum), layout.c */
    /* plan */
    int stage;            /* the stage whose place owns the tensor (engine/plan.c) */
    int rank;             /* MPI rank of that place */

    /* after compile. Its handles are in the handle table under its keys
     * (TH, TGH: HK_VALUE, HK_GRAD, HK_MOMENTUM, HK_NORMS, HK_PARTIAL,
     * HK_RSAVE with obj = id). Batch tensors (inputs, labels, activations, saved
     * tensors) have one handle per micro-batch: nh = M; for inputs, labels,
     * activations and probabilities handle m holds batch rows [m N/M, (m+1) N/M)
     * (mb_numel elements); batch-norm statistics are per micro-batch, not
     * sliced. Parameters and state have one handle per replica (nh = the
     * plan's nrep; handle k on replica k's place of the tensor's stage; their
     * host memory holds the nhost copies this rank owns, in replica order). */
    int nh, nhost;
    size_t mb_numel;
    float *host;          /* host memory for inputs, labels, params, state (StarPU-allocated,
                             on the owning rank only) */
    float *ghost;         /* gradient host memory (params) */
    /* compile-time, per gradient handle: a backward task already wrote the
     * gradient, the next one accumulates (TGW: the key map's flag) */
    int gwritten;         /* some gradient of the tensor was written (readable after a step) */
    int released;         /* activation handles are invalidated after their backward */
    /* compile-time: the gradient is exactly that of galias (an add's output,
     * grad_forward.c, "Gradient forwarding"); its own gh are never written and
     * whoever reads the gradient reads galias's handles. NULL: its own. */
    struct hyfi_tensor *galias;
    int gclob;            /* compile-time: its gradient handles (or galias's) hold another
                             tensor's gradient after the step (grad_forward.c): not readable */
    int fused;            /* a batch norm's output whose ReLU is fused into it, or a
                             convolution's whose add is (layout.c): never made;
                             hyfi_tensor_read / hyfi_grad_read refuse it */
    /* Partial gradients: a stage other than the tensor's own that consumes it
     * sums its contributions into its own handle (HK_PARTIAL, index
     * stage * nh + m), which the owning stage adds into its gradient m at the
     * start of its backward: one transfer per consuming stage instead of a
     * round trip per contribution. */
    int gparts;            /* some stage other than its own consumes it (partial gradients) */
    struct hyfi_tiles *tl; /* spatial tiles, NULL for untiled tensors */
    float *mhost;          /* momentum (params): handles HK_MOMENTUM */
    /* params: nh health sums of the SGD step (HK_NORMS, 2 floats: sum of g^2,
     * sum of the new w^2), added up over the parameters into the health sums.
     * Replicas: the running statistic at the start of the step (state,
     * HK_RSAVE unless packed), one copy per replica on the replica's place
     * (the replicas start a step equal, so each combine reads its own: no
     * rank reads another's). */
};

/* Spatial tiles of a tensor (geometry: engine/spatial_plan.c; keys: register.c). */
typedef struct hyfi_tiles {
    int stage;            /* the tiled stage whose places hold the tiles */
    int rows, cols;       /* grid */
    int rcut[HYFI_MAX_TILES + 1], ccut[HYFI_MAX_TILES + 1]; /* cut points (H, W) */
    /* handles HK_TILE, HK_TILE_GRAD [m * P + t], t = r * cols + c */
    int full;             /* untiled ops read it too: t->h / t->gh are the whole-tensor view,
                             gathered from the tiles on the place of t->stage */
} hyfi_tiles;

typedef enum {
    OP_CONV2D,
    OP_BATCHNORM,
    OP_RELU,
    OP_MAXPOOL,
    OP_AVGPOOL,
    OP_GAP,
    OP_ADD,
    OP_CONCAT,
    OP_FC,
    OP_XENT,
    OP_COUNT
} op_kind;

typedef struct {
    op_kind op;
    char *name;
    int nin;
    hyfi_tensor **in;     /* activation inputs (xent: logits, labels) */
    hyfi_tensor *out;
    hyfi_tensor *p[4];    /* conv/fc: weight, bias; bn: gamma, beta, running mean, running var */
    hyfi_tensor *s[2];    /* saved: bn mean, var; xent prob */
    int layer;            /* hyfi_layer_begin's layer, -1 before the first call */
    int stage;            /* plan: stage (layer partition) of the op */
    struct hyfi_tnode *tn;/* spatial: per-tile geometry and handles (tiled stages) */
    hyfi_tensor *relu_out;/* batch norm with the ReLU after it fused (layout.c): the ReLU's
                             output, which this op's tasks write and whose gradient they
                             read; NULL otherwise */
    int fused;            /* a ReLU fused into the batch norm before it, or an add into
                             the convolution before it (add_out): no forward tasks */
    hyfi_tensor *add_out; /* convolution with the residual add after it fused (layout.c):
                             the add's output, which this op's forward writes and whose
                             gradient its backward reads; NULL otherwise */
    hyfi_tensor *add_res; /* with add_out: the add's other input, read by the forward */
    union {
        hyfi_conv2d_args conv;
        hyfi_batchnorm_args bn;
        hyfi_pool_args pool;
        hyfi_fc_args fc;
        hyfi_xent_args xent;
    } a;
} node;

/* What an op kind is, without StarPU (opdef.c; its tasks: opdef.h). */
extern const char *const hyfi_op_names[OP_COUNT];
/* Forward FLOPs of an op for its whole batch (multiply-add = 2). */
double hyfi_op_flops(const node *nd);
/* ctx.c: after a compile, note how far the process grew without StarPU's data (its
 * handles, the task programs, the graph). */
void hyfi_note_compiled_memory(hyfi_ctx *ctx);
/* plan_info.c: the places of rank r (0 before compile). */
int hyfi_plan_rank_places(const hyfi_graph *g, int r);
/* plan.c: the plan's memory estimate for rank r (bytes; 0 before compile). */
double hyfi_plan_rank_bytes(const hyfi_graph *g, int r);
/* opdef.c: the op reads a window of its input (conv, pools other than the global one). */
int hyfi_op_windowed(const node *nd);
/* The op normalises with statistics of the whole batch (batch norm). */
int hyfi_op_batch_statistics(const node *nd);
/* The op's zero padding is part of its input (conv, average pool counting it). */
int hyfi_op_zero_padded(const node *nd);
/* Which activations and convolution weights stay in oneDNN's blocked layouts
 * (layout.c): sets t->blk and the layouts in the convolutions' and pools'
 * arguments. After the plan. */
hyfi_status hyfi_layout_plan(hyfi_graph *g);
/* Which batch norms take the ReLU after them into their own tasks, and which
 * convolutions the residual add after them (layout.c): sets node.relu_out /
 * node.add_out / node.add_res / node.fused, the args' relu flag and
 * tensor.fused. After the plan. */
hyfi_status hyfi_fuse_plan(hyfi_graph *g);
/* A whole copy of t (t->numel floats, in place): from the layout t lives in
 * between tasks to plain NCHW / OIHW (to_plain), or back. -1: out of memory. */
int hyfi_layout_convert(const hyfi_tensor *t, float *buf, int to_plain);
/* The same between two buffers (dst != src): no allocation. */
void hyfi_layout_copy(const hyfi_tensor *t, float *dst, const float *src, int to_plain);
/* The window along an axis (0: rows): kernel, stride, padding; 1, 1, 0 for
 * ops that read no window. */
void hyfi_op_window(const node *nd, int axis, int *k, int *s, int *p);
/* The op can run on spatial tiles (not the heads: global pooling, fc, loss). */
int hyfi_op_tileable(const node *nd);
/* On tiles, the op's weight gradients are per tile, summed before the update. */
int hyfi_op_sums_weights_over_tiles(const node *nd);
/* A fused-halo region may hold the op (one input; windowed, batch statistics
 * or element-wise). */
int hyfi_op_fusable(const node *nd);
/* The whole-tensor backward writes input i's gradient even when no one needs
 * it (batch norm's x: computed with dγ, dβ; the loss's logits). */
int hyfi_op_writes_dx(const node *nd, int i);
/* The op's p[] are trainable parameters with gradients (the loss keeps
 * saved tensors there). */
int hyfi_op_param_grads(const node *nd);
/* h updated with the op's arguments (the ranks compare graphs by hash). */
uint64_t hyfi_op_hash(uint64_t h, const node *nd);

typedef enum {
    PT_TASK,       /* a codelet over buffers */
    PT_RELEASE,    /* buf[0]: drop its contents everywhere (invalidate on the owner, flush
                      the copies other ranks received) */
    PT_BCAST,      /* buf[0]: send it from its owner to every rank */
    PT_FLUSH,      /* buf[0]: on rank `rank` (the reader) and the owner, forget the copy the
                      reader received (StarPU-MPI's cache; see hyfi_collective_done) */
} prog_kind;

/* A task's buffers: up to HYFI_TASK_INLINE_BUFFERS in the task itself (96% of
 * tasks), the wider ones (a tiled batch-norm combine: a partial sum per tile)
 * in an array of their own, xbuf, grown by doubling. Read them with prog_bufs().
 * A buffer names its data by reference (the handle-table entry), not by StarPU
 * handle: owners, sizes and categories are the table's; the submission takes
 * the handles from there (run.c). */
#define HYFI_TASK_INLINE_BUFFERS 8
typedef struct {
    hyfi_ref ref;
    enum starpu_data_access_mode mode;
} prog_buf;
typedef struct {
    prog_kind kind;
    struct starpu_codelet *cl;
    int nbuf;
    unsigned char far; /* emitted for a tile far from this rank's own (compile.c trims it) */
    prog_buf ibuf[HYFI_TASK_INLINE_BUFFERS];
    prog_buf *xbuf;       /* all nbuf buffers once they outgrow ibuf, else NULL */
    hyfi_task_args *args; /* PT_TASK: its arguments, shared with every task of the same codelet
                             and bytes (the program's pool owns them), else NULL */
    int place;            /* the place that runs it (-1: the event's) */
    int rank;             /* MPI rank that runs it (the rank of its place) */
    int worker;           /* a worker to pin the task to, -1: any */
    int prio;             /* StarPU priority */
    double flops;         /* the kernel's floating-point operations (STARPU_FLOPS), 0: not counted */
    char name[64];
} prog_task;

static inline prog_buf *prog_bufs(prog_task *t) { return t->xbuf ? t->xbuf : t->ibuf; }
static inline const prog_buf *prog_cbufs(const prog_task *t) { return t->xbuf ? t->xbuf : t->ibuf; }

typedef struct {
    prog_task *t;
    int n, cap;
    int overflow; /* a task was given more than HYFI_MAX_TASK_BUFFERS buffers */
    int nomem;    /* out of memory appending a task or its buffers: at task nomem_at */
    char nomem_at[48];
    int missing;  /* a kept task names a handle this rank did not register (share.c) */
    unsigned char *skip; /* MPI: 1 where this rank need not submit task i (share.c), or NULL */
    int built;    /* tasks built before those this rank never submits were dropped (share.c) */
    int far_now, trimmed; /* pushing a far tile's tasks (hyfi_sp_tile); those dropped */
    struct hyfi_args_pool *pool; /* the tasks' arguments, each (codelet, bytes) once (program.c) */
} program;

struct hyfi_ctx {
    int rank, nranks;
    int local_ranks;      /* ranks mpiexec started on this node (MPI_LOCALNRANKS), 0: unknown */
    unsigned ngraphs;     /* graphs created: the next one's serial (keys.h) */
    int fake_ranks;       /* StarPU-MPI's fake size: this process alone stands for rank
                           * `rank` of `nranks` (no collectives; keyed.c: hyfi_fake_fill) */
    int comm_stats;       /* StarPU-MPI counts the bytes sent */
    int mpi;
    int ncpu, ncuda;
    int *cuda_worker;     /* ncuda: StarPU worker of CUDA device k (-1: none) */
    double *cuda_mem;     /* ncuda: bytes of device k's memory, 0: unknown */
    int cpu_threads;
    int cores;            /* cores of this process (the node's, shared among its ranks) */
    int cpu_threads_set;  /* cpu_threads from the config */
    size_t lend_min_bytes;/* core lending (hyfi_ctx_config.lend_min_bytes), 0: off */
    int submit_cap;       /* kernels run a thread fewer while a program is submitted (run.c) */
    int submit_window;    /* hyfi_ctx_config.submit_window (run.c) */
    int verbose;
    int phys_mem_mb;      /* hyfi_ctx_config.phys_mem_mb */
    hyfi_log_fn log;      /* hyfi_ctx_config.log (NULL: stderr) and its argument */
    void *log_user;
    int records;          /* hyfi_ctx_set_task_records */
    struct hyfi_records *rec; /* the records (records.c), NULL before the first */
    long programs_run;    /* traces: programs submitted (hyfi_trace_mark_program) */
    char *trace_dir;      /* FxT tracing on (hyfi_ctx_config.trace_dir), else NULL */
    int own_mpi;          /* MPI initialised (and finalised) by the context */
    FILE *trace_handles;  /* rank 0, tracing: hyfi_handles.tsv being written */
    int trace_err;        /* rank 0, tracing: errno of the first failed note, or 0 */
    char trace_err_file[32]; /* and its file (hyfi_handles.tsv, ...) */
    int64_t agree_seq;    /* agreements between the ranks so far (agree.c: their tags) */
    struct hyfi_watchdog *wd; /* MPI runs with a watchdog (hyfi_ctx_config.watchdog_s) */
    int finalize_limit_s; /* own_mpi: MPI_Finalize's limit (watchdog_s; 0: none) */
    long mem_limit_mb;    /* StarPU's main-memory limit of this process (MB), 0: none */
    int swap_node;        /* the out-of-core disk memory node (swap_dir), -1: none */
    long swap_mb;         /* its size (MB) */
    double start_rss_mb;  /* resident memory once StarPU was initialised */
    double graph_rss_mb;  /* the largest growth of resident memory over a compile, without
                             StarPU's counted data (hyfi_note_compiled_memory) */
};

struct hyfi_graph {
    hyfi_ctx *ctx;
    uint64_t seed;
    unsigned serial;       /* the context's graphs in creation order: its keys' tags (keys.h) */
    hyfi_tensor **tensors;
    int ntensors, cap_tensors;
    node *nodes;
    int nnodes, cap_nodes;
    hyfi_tensor **params;  /* trainable, creation order */
    int nparams, cap_params;

    /* layers: hyfi_layer_begin; none: one layer per op */
    char **layer_names;
    int nlayers, cap_layers;

    /* the parallel plan's settings (engine/plan.c) */
    hyfi_plan_config plan_cfg;
    int *plan_balance;     /* copy of plan_cfg.balance */
    hyfi_train_config train; /* hyfi_graph_compile's, hyfi_set_lr */

    hyfi_status status;    /* sticky builder status */
    char error[512];       /* message of the first builder error or the last failed call */

    hyfi_tensor *loss;     /* set by hyfi_graph_compile */
    /* What hyfi_graph_compile made; NULL before it (and after a failed one).
     * The tensors' handles (hyfi_tensor's compiled part) are in its table. */
    struct hyfi_compiled *cc;
};

/* The logits the loss reads (its softmax cross-entropy's first input), NULL
 * before the compile. Kept through a train step (B x K floats: what a caller
 * reads for the batch's accuracy): never released nor dropped by recompute. */
static inline const hyfi_tensor *hyfi_loss_logits(const hyfi_graph *g)
{
    const hyfi_tensor *l = g->loss;
    return l && l->producer >= 0 && g->nodes[l->producer].nin > 0 ? g->nodes[l->producer].in[0]
                                                                  : NULL;
}

/* Whether t's values (and its gradient, and the buffers between its tiles)
 * are bf16: a bf16 run's activations and input images, not the loss, the
 * batch-norm statistics or the probabilities (T_SAVED), nor parameters. */
static inline int hyfi_tensor_bf16(const hyfi_graph *g, const hyfi_tensor *t)
{
    return g->train.precision == HYFI_PRECISION_BF16 && !t->is_int &&
           ((t->kind == T_ACT && t != g->loss) || t->kind == T_INPUT);
}
/* The bytes of one element of t's handles as registered: 2 where it is
 * stored as bf16 (a bf16 run's activations; inputs keep float32 host
 * buffers), 4 otherwise. */
static inline size_t hyfi_tensor_elem(const hyfi_graph *g, const hyfi_tensor *t)
{
    return hyfi_tensor_bf16(g, t) && t->kind != T_INPUT ? sizeof(uint16_t) : sizeof(float);
}

/* The compiled state of a graph (compile.c makes it, hyfi_compiled_free frees
 * it): the plan, the programs, the handle table and the handles that belong
 * to no tensor, and what the last step left. */
typedef struct hyfi_compiled {
    struct hyfi_plan *pl;
    program train_prog, infer_prog, fwd_train_prog;
    hyfi_hentry *htab;     /* the handle table (filled by keyed.c's hyfi_reg; handles.c releases, unregisters) */
    int nhtab, caphtab, htab_oom;
    /* The key map (keyed.c): key -> handle-table entry, and a compile-time
     * flag per key (a gradient already written); open addressing. */
    hyfi_kmap kmap;
    unsigned char kspare;  /* hyfi_kflag_at's byte when out of memory */
    int64_t key_err;       /* a key that did not fit a tag (-1) or came twice (its tag) */
    struct hyfi_hdefer *dtab; /* deferred registrations (keyed.h), until the compile resolves them */
    int ndtab, capdtab;
    int defer_on;          /* hyfi_reg defers what keyed.c may (a scoped rank's compile) */
    long nreg;             /* handles registered with StarPU */
    int *rel_first, *rel_idx; /* released entries by (stage, micro-batch): hyfi_release_index */
    /* re-materialisation: per untiled batch norm re-run and replica, 4 scratch
     * handles (C floats) for the statistics its re-run computes again (key
     * HK_RC_BN, obj the node, index rep * 4 + k; compile.c).
     * Without 1F1B tokens: per place a one-float fence (HK_RC_FENCE) that
     * the backward tasks write (RW|COMMUTE) and the re-runs read (R), so that a
     * segment is re-run only once the backward emitted before it is done there
     * (compile.c) */
    float *rc_fence_host;  /* NULL: no fences */
    float *dloss_host;     /* constant 1/M per micro-batch: the seed of the backward pass */
    float *loss_sum;       /* 2 M: loss_value's slots and hyfi_ctx_sum_floats' receive buffer */
    /* the seed's handles: HK_DLOSS, per micro-batch (the loss's gradient, TGH) */
    /* 1F1B: per place, inflight slots (HK_TOKEN, 1 float each) */
    float *token_host;
    int ntokens;
    hyfi_bucket *buckets;  /* replicas: the all-reduce buckets */
    hyfi_sgroup *sgroups;  /* replicas: running statistics packed (NULL: tensor by tensor) */
    int nsgroups;
    int nbuckets;
    /* The health of a train step: per rank, the sums of its parameters'
     * (replica 0) SGD norms (HK_HEALTH, index the rank); health_root's ends
     * with the total and is sent to every rank. */
    int nhealth, health_root;
    /* Scoped compile (share.c): in an MPI run, a rank builds the per-replica
     * part of the programs, and registers the handles, only for the replicas
     * that have a place on it (rep_mine), plus the handles of the replicas its
     * replicas exchange with in the collectives (rep_want). */
    int scoped, submit_all; /* submit_all: hyfi_plan_config.submit_all */
    int bn_pack;            /* tiled batch norms combine rank-local packets (spatial_bn.c) */
    unsigned char *rep_mine, *rep_want;
    char missing_task[96]; /* a task that names a handle this rank did not register */
    double grad_norm, weight_norm; /* of the last train step (L2) */
    int stepped;           /* a train step has run: gradients are readable */
    int last_train;        /* the last program run was the train program */
} hyfi_compiled;

/* errors.c: HYFI_OK when g is compiled, else the call's error (who: its name). */
hyfi_status hyfi_need_compiled(hyfi_graph *g, const char *who);
/* share.c: MPI: the programs' skip marks, made once, unless submit_all asks
 * for every task. 1 when marked, 0 when not (one process, or submit all), -1
 * when out of memory. */
int hyfi_skips_ready(hyfi_graph *g);
/* A message of the context (hyfi_ctx_config.log; errors.h's hyfi_logf). */
#define hyfi_ctx_log(ctx, level, ...) hyfi_logf((ctx)->log, (ctx)->log_user, (level), __VA_ARGS__)
/* errors.c (hyfi_fail: errors.h) */
/* Record a builder error on g (sticky: the first one is kept) and return s. */
hyfi_status hyfi_graph_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record the failure of a non-builder call on g (not sticky) and return s. */
hyfi_status hyfi_call_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* agree.c: make an outcome and settings common to every MPI rank (collective;
 * without MPI or on one rank it returns `local`). Each rank passes its own
 * status (and message) and n named settings; rank 0 judges: the lowest
 * failing rank's status ("rank k: <message>", or just the message when every
 * rank failed with the same status and message), else HYFI_ERR_MISMATCH when a
 * setting's hash differs ("<intro>: rank k differs from rank 0 in NAME (rank
 * k: VALUE; rank 0: VALUE)...; <fix>"), else HYFI_OK. A rank that failed
 * gets its own status and message back; msg (len bytes) gets the verdict's. */
#define HYFI_AGREE_MAX 64   /* settings per agreement */
#define HYFI_AGREE_VALUE 72 /* text of a value in the message (longer values: hashed whole) */
typedef struct hyfi_agree_spec {
    const char *intro;         /* "the ranks were started with different arguments" */
    const char *fix;           /* "start every rank with the same arguments" */
    const char *const *names;  /* n settings, the same on every rank */
    const char *const *values; /* their values as text: hashed and shown */
    const uint64_t *hashes;    /* NULL, or per setting 0 (the text is compared) or a hash of
                                  everything the setting stands for, compared instead of
                                  the text (which is then only shown) */
    int n;
} hyfi_agree_spec;
hyfi_status hyfi_agree(hyfi_ctx *ctx, hyfi_status local, const char *local_msg,
                       const hyfi_agree_spec *spec, char *msg, size_t len);
/* What each rank sends rank 0 in an agreement, and rank 0's verdict (fixed
 * sizes: every receive matches every send). Shared by the context's
 * agreements (agree.c, over StarPU-MPI) and the start-up's (launch.c, over
 * MPI before StarPU runs). */
typedef struct hyfi_agree_item {
    uint64_t hash;
    char value[HYFI_AGREE_VALUE]; /* text for the message (may be truncated) */
} hyfi_agree_item;
typedef struct hyfi_agree_payload {
    int32_t status;
    int32_t n;
    int32_t flag; /* hyfi_ctx_agree_any's */
    char msg[400];
    hyfi_agree_item item[HYFI_AGREE_MAX];
} hyfi_agree_payload;
typedef struct hyfi_agree_verdict {
    int32_t status;
    int32_t rank;  /* the failing rank named, -1: none (agreed, a mismatch, or all alike) */
    int32_t alike; /* every rank failed with the same status and message */
    int32_t any;   /* some rank's flag was set */
    char msg[512];
} hyfi_agree_verdict;
/* A rank's payload from its outcome and settings. */
void hyfi_agree_fill(hyfi_agree_payload *p, hyfi_status local, const char *local_msg,
                     const hyfi_agree_spec *sp);
/* Rank 0: the verdict from every rank's payload (all[0..nranks)). */
void hyfi_agree_judge(const hyfi_agree_spec *sp, const hyfi_agree_payload *all, int nranks,
                      hyfi_agree_verdict *v);

/* agree.c: rows[r * cols .. (r + 1) * cols) as rank r has it, on every rank
 * (collective; nothing without MPI or on one rank). */
void hyfi_ctx_share_rows(hyfi_ctx *ctx, size_t *rows, size_t cols);
/* agree.c: v[0..n) summed over the ranks, on every rank (collective; a
 * binomial tree of host messages, 2 (R - 1) in all); in[0..n): scratch. */
void hyfi_ctx_sum_floats(hyfi_ctx *ctx, float *v, float *in, int n);

/* io.c, shared with checkpoint.c. who: the API call named in messages. */
/* Write a file atomically (rank 0): fn writes the contents into f (returns 0
 * or an errno); then it is flushed, fsync'ed, renamed over path and the folder
 * synced (see io.c's comment). */
typedef int (*hyfi_io_writer)(FILE *f, void *arg);
hyfi_status hyfi_io_write_atomic(hyfi_graph *g, const char *who, const char *path,
                                 hyfi_io_writer fn, void *arg);
/* The whole file into *buf (malloc'd, *len bytes). */
hyfi_status hyfi_io_read_whole(hyfi_graph *g, const char *who, const char *path,
                               unsigned char **buf, size_t *len);
/* Bring handle h (owned anywhere) to rank 0 into host (NULL on rank 0: fetched
 * but not copied; the caller then fails the save). Every rank calls it, in the
 * same order. The copies complete in hyfi_io_gather_wait: all the handles of a
 * save are in flight at once (one blocking acquire each cost ~3 ms). */
typedef struct hyfi_io_batch hyfi_io_batch;
hyfi_io_batch *hyfi_io_batch_new(void); /* NULL: out of memory (gathers then block) */
void hyfi_io_gather(hyfi_graph *g, hyfi_io_batch *b, hyfi_ref h, void *host, size_t bytes);
void hyfi_io_gather_wait(hyfi_graph *g, hyfi_io_batch *b); /* and frees b */
/* agree.c: the status of a collective call made common to every rank (hyfi_agree);
 * root_only: only rank 0's counts (saving). */
hyfi_status hyfi_io_agree(hyfi_graph *g, hyfi_status st, int root_only);
/* In MPI runs, at hyfi_graph_compile: the compile's local outcome, the graph's
 * structure and shapes, the seed, the plan and the training settings (tc)
 * compared across the ranks; every rank returns the same status. */
hyfi_status hyfi_graph_agree(hyfi_graph *g, hyfi_status local, const char *local_msg,
                             const hyfi_train_config *tc);
/* Parameters and running statistics: what parameter files and checkpoints hold. */
static inline int hyfi_tensor_saved(const hyfi_tensor *t)
{
    return t->kind == T_PARAM || t->kind == T_STATE;
}
/* init.c: FNV-1a, 64 bits: start from h = 0xcbf29ce484222325. */
uint64_t hyfi_hash_bytes(uint64_t h, const void *p, size_t n);
uint64_t hyfi_hash_str(uint64_t h, const char *s);
/* A checksum of a byte stream at memory speed (files' checksums): FNV-1a on
 * 8 independent lanes of 64-bit words (a 64-byte block gives each lane one
 * word), then the lanes, the tail and the length through byte FNV-1a. Any
 * change of one word is always detected (each step is a bijection). The same
 * bytes give the same sum however they are split over _add calls. */
typedef struct {
    uint64_t lane[8];
    unsigned char buf[64];
    size_t nbuf;
    uint64_t total;
} hyfi_sum;
void hyfi_sum_init(hyfi_sum *s);
void hyfi_sum_add(hyfi_sum *s, const void *p, size_t n);
uint64_t hyfi_sum_end(const hyfi_sum *s);

/* watchdog.c: the watchdog of MPI runs (hyfi_ctx_config.watchdog_s). A rank
 * waits for the others between hyfi_wait_begin and hyfi_wait_end (nested
 * calls count once); the watchdog ends the job when it waits that long while
 * no task completes on it. Two atomic operations each; nothing without a
 * watchdog. `what` (a string literal) names the wait in the message. */
hyfi_status hyfi_watchdog_start(hyfi_ctx *ctx, int limit_s);
/* The wait of an agreement (hyfi_agree): a watchdog firing there names
 * mismatched arguments as a likely cause (a rank that took another path). */
#define HYFI_WAIT_AGREE "a check that the ranks agree"
void hyfi_watchdog_stop(hyfi_ctx *ctx);
void hyfi_wait_begin(hyfi_ctx *ctx, const char *what);
void hyfi_wait_end(hyfi_ctx *ctx);

/* handles.c: whether handle h holds bf16 values (HYFI_HCAT_BF16). */
int hyfi_handle_bf16(starpu_data_handle_t h);
/* Round x (n floats) to bf16 in place, on the calling thread (an application
 * thread: no OpenMP team of its own to spin on the workers' cores); the
 * reference in a simulation build, which has no CPU kernels. */
static inline void hyfi_round_bf16(float *x, size_t n)
{
#ifdef STARPU_SIMGRID
    hyfi_bf16_round_ref(x, n);
#else
    hyfi_bf16_round_serial(x, n);
#endif
}

/* bf16 storage to float32 and back (hyfi_handle_read/write), likewise. */
static inline void hyfi_bf16_widen(float *out, const uint16_t *in, size_t n)
{
#ifdef STARPU_SIMGRID
    hyfi_bf16_to_f32_ref(out, in, n);
#else
    hyfi_bf16_to_f32_serial(out, in, n);
#endif
}
static inline void hyfi_bf16_narrow(uint16_t *out, const float *in, size_t n)
{
#ifdef STARPU_SIMGRID
    hyfi_f32_to_bf16_ref(out, in, n);
#else
    hyfi_f32_to_bf16_serial(out, in, n);
#endif
}

/* launch.c: whether the process was launched by mpiexec (its environment). */
int hyfi_launched_by_mpiexec(void);
/* launch.c: MPI_Finalize, after a barrier of every rank: past limit_s seconds
 * (> 0, at most HYFI_FINALIZE_MAX_S; 2 or more ranks) a line on stderr and
 * _exit with hyfi_launch_exit_status's status, 0 by default (MPI's own
 * shutdown hangs; the work is done). */
#define HYFI_FINALIZE_MAX_S 30
void hyfi_mpi_finalize_timed(int limit_s, int rank, int nranks, hyfi_log_fn log, void *log_user);
/* launch.c: 1 once, when hyfi_launch_begin started MPI and no context has
 * taken it over yet: the caller (hyfi_ctx_create) then finalises it. */
int hyfi_launch_take(void);
/* launch.c: hyfi_launch_begin gathered the death notices' addresses (on every
 * rank alike, whether its notice runs or not). */
int hyfi_launch_peers_done(void);

/* sentinel.c: the death notice of MPI runs (one per process). _start forks
 * the child that prints the rank's line if the process dies without ending
 * in order (before MPI is initialised); _arm gives it the rank; _quiet tells
 * it that the process ends in order (exit() does too); _stop ends it. */
void hyfi_sentinel_start(void);
void hyfi_sentinel_arm(int rank, int nranks);
void hyfi_sentinel_quiet(void);
void hyfi_sentinel_stop(void);
/* The rank is about to end the job itself (the watchdog, a start-up time
 * limit; its own line says why): the children of the others do not report
 * the deaths that follow. */
void hyfi_sentinel_ending(void);
/* The peers of the job, so that the children of all ranks name one first
 * death across nodes: _local fills this rank's entry (job id, UDP port,
 * IPv4 addresses; zeros without a child), every rank gathers every entry
 * (rank r's at table[r * HYFI_SENTINEL_ENTRY]), and _peers hands the table
 * to the child. */
#define HYFI_SENTINEL_ENTRY 6
void hyfi_sentinel_local(uint64_t v[HYFI_SENTINEL_ENTRY]);
void hyfi_sentinel_peers(const uint64_t *table, int nranks);

/* graph.c */
void hyfi_tensor_free(hyfi_tensor *t);

/* compile.c: free what hyfi_graph_compile made (programs, handles, plan). */
void hyfi_compiled_free(hyfi_graph *g);
/* program.c, handles.c */
void hyfi_programs_free(hyfi_graph *g);
/* share.c: MPI, at the end of a compile: drop from the programs the tasks this rank
 * never submits (mark_skips). 0, or -1 when out of memory. */
int hyfi_programs_drop_skipped(hyfi_graph *g);
void hyfi_handles_free(hyfi_graph *g);

/* trace.c: names and categories of the handles and ops, for the summary. */
void hyfi_trace_note_handle(hyfi_graph *g, int64_t tag, int owner, hyfi_hcat cat,
                            const char *name);
void hyfi_trace_note_plan(hyfi_graph *g);
/* hyfi_ctx_destroy: close the notes; keep a failure for hyfi_trace_merge. */
void hyfi_trace_finish(hyfi_ctx *ctx);
/* records.c: a marker task (name "hyfi.program.<k>") at the start of a program. */
void hyfi_trace_mark_program(hyfi_ctx *ctx);

/* records.c: the per-task callback of hyfi_ctx_set_task_records. */
void hyfi_record_task(void *ctx);
void hyfi_records_free(hyfi_ctx *ctx);

/* run.c */
hyfi_status hyfi_program_run(hyfi_graph *g, program *p);
/* handles.c: a batch tensor's handle k (grad: of its gradient; tile: of its tiles,
 * k = m * P + q), registered now if it was not (a scoped rank's skipped ones,
 * share.c). */
hyfi_ref hyfi_handle_need(hyfi_graph *g, hyfi_tensor *t, int grad, int tile, int k);

/* run.c, collective in MPI runs (every rank calls them). read: copy a handle
 * out to host memory on rank `root` (-1: on every rank; host is only touched
 * there); write: copy host memory into a handle on its owner (other ranks drop
 * the copies they had received). */
void hyfi_handle_read(hyfi_graph *g, hyfi_ref h, int root, void *host, size_t bytes);
void hyfi_handle_write(hyfi_graph *g, hyfi_ref h, int owner, const void *host, size_t bytes);

#include "plan.h"
#include "keyed.h"

/* Owner of handle k of t (a micro-batch of batch tensors, a replica of the others). */
int hyfi_handle_owner(const hyfi_graph *g, const hyfi_tensor *t, int k);

/* Spatial parallelism: spatial_plan.c (the plan) and register.c (the keys). */
struct emit_ctx_s;
hyfi_status hyfi_spatial_plan_grid(hyfi_graph *g);   /* spatial_plan.c: K, P, grid */
hyfi_status hyfi_spatial_plan(hyfi_graph *g);        /* spatial_plan.c: geometry, owners */
void hyfi_spatial_handles_free(hyfi_graph *g);       /* register.c: the fused groups' host memory */
void hyfi_spatial_plan_free(hyfi_graph *g);    /* spatial_plan.c */
/* spatial_plan.c: halo bytes per step between tiles on different ranks; fused groups,
 * their ops and the strips exchanged per micro-batch (from the geometry). */
size_t hyfi_spatial_halo_volume(const hyfi_graph *g);
void hyfi_spatial_halo_counts(const hyfi_graph *g, int *groups, int *fused_ops, int *strips);
int hyfi_spatial_tiled(const hyfi_graph *g, const node *nd);
/* How many node inputs are t (a node reading t twice counts twice). Inline:
 * the planners below graph.c use it (scripts/check_layers.py). */
static inline int hyfi_tensor_consumers(const hyfi_graph *g, const hyfi_tensor *t)
{
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) c += g->nodes[i].in[k] == t;
    return c;
}
/* The tensor whose gradient handles hold t's gradient: t, or the add output its
 * gradient is forwarded from (hyfi_tensor.galias, grad_forward.c). */
static inline hyfi_tensor *hyfi_grad_source(hyfi_tensor *t)
{
    while (t->galias) t = t->galias;
    return t;
}
/* Re-materialisation of fused-halo groups (spatial_plan.c): a group is re-run
 * whole, when its last output is dropped and its ops lie in one segment;
 * else its last output is kept and none of its ops re-run. */
void hyfi_spatial_recompute_groups(const hyfi_graph *g, const int *seg, unsigned char *rerun,
                                   unsigned char *drop);
/* Rank of tile t of a tensor's tiles. */
int hyfi_tile_rank(const hyfi_graph *g, const hyfi_tiles *tl, int t, int rep);
size_t hyfi_tile_numel(const hyfi_tensor *x, int t); /* one micro-batch */

/* dump.c: with hyfi_plan_config.dump_programs, append the programs' listing there. */
void hyfi_programs_dump(const hyfi_graph *g);

/* init.c: deterministic parameter initialisation from (seed, name). */
void hyfi_param_init(float *dst, const hyfi_tensor *t, uint64_t seed);

#endif
