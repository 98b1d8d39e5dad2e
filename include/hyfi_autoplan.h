/* hyfi_autoplan.h: automatic plans. Part of hyfi.h, which includes it at its
 * end: include <hyfi.h>, not this file.
 *
 * hyfi_plan_search enumerates the plans of a built graph on a machine
 * (spatial tiles and their slicing, stages and their balance, micro-batches
 * and schedule, GEMS, data-parallel replicas, re-materialisation), keeps those
 * the engine's own plan and memory estimate accept on that machine, and ranks
 * them by a predicted step time (engine/plan_model.c; the model and its blind
 * spots: docs/user-guide.md, "Automatic plans"). It compiles nothing and
 * starts no task: a machine of 256 GPUs is planned on a laptop. */
#ifndef HYFI_AUTOPLAN_H
#define HYFI_AUTOPLAN_H

#ifndef HYFI_H
#error "include <hyfi.h>: hyfi_autoplan.h is a part of it"
#endif

typedef enum hyfi_machine_device {
    HYFI_MACHINE_CPU = 0, /* CPU ranks: every place of a rank shares its cores */
    HYFI_MACHINE_V100,    /* GPUs: each place of a rank on a GPU of its own */
    HYFI_MACHINE_H100
} hyfi_machine_device;

/* The machine a plan is for. Zeros take the defaults named; a value that
 * cannot describe a machine is refused (HYFI_ERR_ARG, naming the field, the
 * hyfi-train flag and the fix). */
typedef struct hyfi_machine {
    int ranks;                /* MPI ranks (>= 1) */
    hyfi_machine_device device;
    int places_per_rank;      /* GPUs: the GPUs of a rank (each place of a GEMS copy on
                                 one); CPU: the most places the search puts on a rank.
                                 0: 4 GPUs, 8 CPU places */
    int ranks_per_node;       /* ranks of one node (they share its fast links); 0: 1 for
                                 GPUs, every rank for CPUs (one host) */
    int cores_per_rank;       /* CPU: a rank's cores; the CPU fits are of 2 cores and
                                 are scaled by 2 / cores. 0: 2 */
    double place_mem_bytes;   /* GPUs: memory of one GPU. 0: the device's (16 GB V100,
                                 80 GB H100) */
    double rank_mem_bytes;    /* host memory one rank may use (all its places' data);
                                 0: not checked */
    const char *model_file;   /* analytic fits, lines 'SYMBOL cpu|cuda A B C' (microseconds
                                 = A + B x flops + C x bytes; perfmodels/analytic-*.txt),
                                 the device's kind of line; NULL: built in (the CPU's
                                 from perfmodels/analytic-epyc2-r1.txt, the GPUs' from
                                 their figures) */
    double link_gbs, link_us; /* between nodes: GB/s (1e9 bytes/s) and latency per
                                 message; 0: 25 GB/s, 5 us for GPUs, this host's
                                 StarPU-MPI ping-pong (8 GB/s, 22 us) for CPUs */
    double node_gbs, node_us; /* between places or ranks of one node; 0: NVLink (75 GB/s
                                 V100, 450 GB/s H100, 5 us), or the CPU link above */
    double task_us;           /* run-time cost of every task, added to the fits; < 0: 0;
                                 0: 20 us for CPUs, 10 us for GPUs */
} hyfi_machine;

/* Fields of hyfi_plan_search_config.fixed that constrain the search. */
enum {
    HYFI_FIX_STAGES = 1 << 0,         /* stages */
    HYFI_FIX_BALANCE = 1 << 1,        /* balance (with stages) */
    HYFI_FIX_PARTS = 1 << 2,          /* parts */
    HYFI_FIX_SCHEDULE = 1 << 3,       /* schedule */
    HYFI_FIX_SPATIAL_STAGES = 1 << 4, /* spatial_stages (0: no tiles) */
    HYFI_FIX_SPATIAL_PARTS = 1 << 5,  /* spatial_parts (where tiled) */
    HYFI_FIX_SLICE = 1 << 6,          /* slice (where tiled) */
    HYFI_FIX_GEMS = 1 << 7,           /* gems and replications */
    HYFI_FIX_DATA_PARALLEL = 1 << 8,  /* data_parallel */
    HYFI_FIX_RECOMPUTE = 1 << 9       /* recompute */
};

typedef struct hyfi_plan_search_config {
    hyfi_plan_config fixed;   /* the values of the fields `fix` names; its other
                                 settings (deterministic, fused_layers, allreduce,
                                 bucket_kib, the rewrites) go into every candidate */
    unsigned fix;             /* HYFI_FIX_* */
    hyfi_precision precision; /* of the training (bf16 halves the activations) */
    int top;                  /* candidates returned; <= 0: 10 */
    int max_spatial_stages;   /* tiled stages tried; <= 0: 2 */
} hyfi_plan_search_config;

/* What limits a plan most (beyond its compute). */
typedef enum hyfi_plan_limit {
    HYFI_LIMIT_COMPUTE = 0,   /* the devices' kernels: nothing else is large */
    HYFI_LIMIT_BUBBLE,        /* the pipeline's fill and drain */
    HYFI_LIMIT_IMBALANCE,     /* a stage (or a device holding several places) slower than
                                 the others */
    HYFI_LIMIT_COMM,          /* activations between stages, halos, batch-norm statistics
                                 over tiles, on the critical path */
    HYFI_LIMIT_ALLREDUCE,     /* the gradients' all-reduce left after the backward */
    HYFI_LIMIT_OVERHEAD,      /* per-task costs: many small tasks */
    HYFI_LIMIT_MEMORY         /* over the memory of a place or rank (pruned) */
} hyfi_plan_limit;
const char *hyfi_plan_limit_name(hyfi_plan_limit l);

typedef struct hyfi_plan_candidate {
    hyfi_plan_config plan;    /* plan.balance: the candidate's own array (stages entries) */
    double images_per_s;      /* predicted */
    double step_s;            /* predicted step time */
    /* the step's parts, seconds: the busiest device's kernels (with their per-task
     * costs), of which per-task costs; the pipeline's fill and drain; stages
     * slower than the mean; communication on the critical path; the all-reduce
     * left after the backward */
    double compute_s, overhead_s, bubble_s, imbalance_s, comm_s, allreduce_s;
    double place_bytes;       /* the engine's estimate, the largest place (GPUs: the
                                 largest GPU's places) */
    double rank_bytes;        /* the largest rank's */
    double mem_limit_bytes;   /* what it was held to (GPU or rank memory), 0: none */
    hyfi_plan_limit limit;
    char why[200];            /* the limit in words, with its share of the step */
} hyfi_plan_candidate;

typedef struct hyfi_plan_search_result {
    int n;                    /* candidates, best first */
    hyfi_plan_candidate *c;
    int npruned;              /* the fastest predicted plans refused for memory (at most
                                 `top`), fastest first */
    hyfi_plan_candidate *pruned;
    long enumerated;          /* plans predicted */
    long built;               /* of those, plans built with the engine's estimate */
    long invalid;             /* refused by the engine (tiles, layers, ranks) */
    long over_memory;         /* refused for memory */
    double seconds;           /* the search's time */
} hyfi_plan_search_result;

/* The machine this context runs on: its ranks (StarPU-MPI's size, fake ones
 * included), CUDA workers (GPUs: H100 fits unless the caller sets another
 * device) or cores per rank, the memory limit (hyfi_ctx_config.mem_limit_mb)
 * or the node's memory shared by its ranks, the GPUs' memory. */
hyfi_status hyfi_machine_from_ctx(const hyfi_ctx *ctx, hyfi_machine *m);

/* Plans for graph g (built, not compiled; its batch is the global batch) and
 * loss (the output of hyfi_softmax_cross_entropy) on machine m, ranked by
 * predicted images/s. *out: free with hyfi_plan_search_free. HYFI_ERR_ARG for a
 * bad machine or constraint, HYFI_ERR_NOMEM where no plan fits (the message
 * says the closest and what to change), HYFI_ERR_ARG where none is valid. The
 * graph is left as it was (its plan included). */
hyfi_status hyfi_plan_search(hyfi_graph *g, hyfi_tensor *loss, const hyfi_machine *m,
                             const hyfi_plan_search_config *cfg,
                             hyfi_plan_search_result **out);
void hyfi_plan_search_free(hyfi_plan_search_result *r);

#endif
