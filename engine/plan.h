/* plan.h: the parallel plan (plan.c; its traffic prediction: traffic.c),
 * a part of internal.h, which includes it after the graph's types. */
#ifndef HYFI_ENGINE_PLAN_H
#define HYFI_ENGINE_PLAN_H

/* plan.c: the parallel plan. */
typedef struct hyfi_plan {
    int nlayers;
    int *layer_of_node;    /* per node */
    int *layer_stage;      /* per layer */
    int nstages, nmb;      /* S stages, M micro-batches */
    /* places: stage s < K (tiled) has P places, one per tile (place s*P + t);
     * stage s >= K one (place K*P + s - K): nplaces1 places per replica.
     * Replicas (GEMS copies x data-parallel groups): replica k has places
     * [k * nplaces1, (k+1) * nplaces1) and micro-batches [k * mbr, (k+1) * mbr)
     * of the step's nmb = nrep * mbr. */
    int K, P, grid_rows, grid_cols;
    int nplaces, nplaces1;
    int nrep, copies, groups, mbr;
    int *place_rank, *place_worker, *place_stage;
    int *stage_place0;     /* first place of each stage in replica 0 (its parameters,
                              statistics) */
    int batch;             /* N: the batch of every batch tensor */
    hyfi_schedule schedule;
    int *stage_rank;       /* stage -> MPI rank of its first place (replica 0) */
    int *stage_worker;     /* stage -> pinned worker of its first place, or -1 (replica 0) */
    int *inflight;         /* per stage: micro-batches alive at once */
    struct hyfi_pipe_event *events;
    int nevents, nticks;
    int trivial;           /* one stage, one micro-batch: the plain single-place program */
    int one_cpu_worker;    /* every task on one CPU worker owning every core (plan.c) */
    /* estimates per stage */
    double *stage_flops;   /* forward FLOPs of the whole batch */
    size_t *stage_params, *stage_param_bytes, *stage_act_bytes;
    /* the activation estimate of each stage under each recompute mode:
     * [mode * nstages + s] (stage_act_bytes: the plan's own mode) */
    size_t *stage_act_mode;
    /* Re-materialisation (hyfi_plan_config.recompute): per node its segment
     * (its stage, or its layer) and whether it is re-run before the segment's
     * backward; per tensor (by id) whether its values are dropped after the
     * segment's forward (an activation read only inside its segment, not the
     * loss, not gathered whole). All zero without recompute. */
    hyfi_recompute recompute;
    int *rc_seg;
    unsigned char *rc_rerun, *rc_drop;
    /* The traffic prediction (traffic.c) of this rank's own pairs: out[r] bytes
     * it sends to rank r per train step, in[r] bytes rank r sends to it, and
     * their halo-strip parts; 4 R values, never R x R (2 x 67 MB at 2,048
     * ranks had been the largest per-rank term after StarPU's handles).
     * pred_total / pred_halo_total: the sums over all ranks' rows. */
    size_t *pred_out, *pred_in, *pred_halo_out, *pred_halo_in;
    size_t pred_total, pred_halo_total;
    size_t halo_volume;    /* halo bytes between tiles on different ranks per step, from
                              the tile geometry alone */
} hyfi_plan;
hyfi_status hyfi_plan_build(hyfi_graph *g);
/* The plan of g->plan_cfg on nranks ranks (any count, not this run's) as
 * hyfi_plan_build makes it, with its estimates, in g->cc->pl: nothing pinned
 * to workers, the cores not split, the memory not checked (the automatic
 * plans: plan_search.c). g->cc must be set; hyfi_plan_free frees it. */
hyfi_status hyfi_plan_estimate(hyfi_graph *g, int nranks);
/* The memory estimate of place q, and of rank r (all its places; *worst: the
 * first stage it holds), in bytes. */
double hyfi_plan_place_bytes(const hyfi_plan *pl, int q);
double hyfi_plan_rank_need(const hyfi_plan *pl, int r, int *worst);
/* The place whose devices place q runs on: q itself for copy 0 of a
 * data-parallel group (and even GEMS copies' places map back to it), the
 * mirrored stage's place of copy 0 for an odd GEMS copy (hyfi_copy_place). A
 * place is its own home exactly when it needs a device of its own. */
int hyfi_place_home(const hyfi_plan *pl, int q);
/* Host memory the ranks of one node can use (physical, or the cgroup's
 * limit; hyfi_ctx_config.phys_mem_mb overrides it), 0 when unknown. */
double hyfi_host_memory_bytes(const hyfi_ctx *ctx);

/* Replica rep's copy of place q of replica 0; the replica of micro-batch m. */
#define HYFI_PLACE(pl, rep, q) ((rep) * (pl)->nplaces1 + (q))
#define HYFI_REP(pl, m) ((m) / (pl)->mbr)
/* Rank and pinned worker of stage s's first place in replica rep. */
static inline int hyfi_stage_rank(const hyfi_plan *pl, int rep, int s)
{
    return pl->place_rank[HYFI_PLACE(pl, rep, pl->stage_place0[s])];
}
static inline int hyfi_stage_worker(const hyfi_plan *pl, int rep, int s)
{
    return pl->place_worker[HYFI_PLACE(pl, rep, pl->stage_place0[s])];
}
/* Rank that owns replica rep's copy of t (its handles of that replica). */
static inline int hyfi_trank(const hyfi_graph *g, const hyfi_tensor *t, int rep)
{
    return hyfi_stage_rank(g->cc->pl, rep, t->stage);
}
void hyfi_plan_free(hyfi_graph *g);
/* Bytes this rank sends to and receives from each other rank in one train
 * step, by walking the train program with StarPU-MPI's owner-computes and
 * cache rules (and the totals over all ranks). */
void hyfi_plan_predict_comm(hyfi_graph *g);

#endif
