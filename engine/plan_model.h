/* plan_model.h: the predicted step time of a plan on a machine (plan_model.c),
 * for the automatic plans (plan_search.c). */
#ifndef HYFI_ENGINE_PLAN_MODEL_H
#define HYFI_ENGINE_PLAN_MODEL_H

#include "internal.h"

/* The codelets the model times, each with an analytic fit. */
typedef enum {
    PM_CONV_F, PM_CONV_BD, PM_CONV_BW, PM_BN_F, PM_BN_B, PM_RELU_F, PM_RELU_B, PM_ADD_F,
    PM_MAXPOOL_F, PM_MAXPOOL_B, PM_AVGPOOL_F, PM_AVGPOOL_B, PM_GAP_F, PM_GAP_B, PM_CONCAT_F,
    PM_CONCAT_B, PM_FC_F, PM_FC_BD, PM_FC_BW, PM_XENT_F, PM_XENT_B, PM_SGD, PM_ACC,
    PM_BN_STATS, PM_BN_COMBINE, PM_BN_BWD_STATS, PM_BN_BWD_COMBINE, PM_BN_BWD_APPLY,
    PM_TILE_ASSEMBLE, PM_COPY_SLICE, PM_COUNT
} pm_codelet;

/* A machine as the model sees it: per codelet seconds = a + b x flops + c x
 * bytes on one device (the CPU fits scaled to the rank's cores), the links. */
typedef struct hyfi_pmodel {
    double a[PM_COUNT], b[PM_COUNT], c[PM_COUNT];
    int gpu;                  /* places on GPUs of their own; else a rank's places share
                                 its cores */
    int ranks, places_per_rank, ranks_per_node;
    double place_mem, rank_mem;   /* bytes, 0: not checked */
    double link_Bps, link_s;      /* between nodes */
    double node_Bps, node_s;      /* within a node */
    double task_s;                /* per task */
} hyfi_pmodel;

/* m checked and turned into the model (its fits read from m->model_file or
 * built in); HYFI_ERR_ARG naming the field and hyfi-train's flag, or
 * HYFI_ERR_IO for the file. */
hyfi_status hyfi_pmodel_init(hyfi_graph *g, const hyfi_machine *m, hyfi_pmodel *pm);

/* Seconds a + b x images per micro-batch. */
typedef struct pm_lin {
    double a, b;
} pm_lin;

/* The costs of a plan's structure (its stages, tiles and replicas on ranks),
 * from the plan built with one micro-batch (hyfi_plan_estimate), per
 * micro-batch of n images: what hyfi_pmodel_step needs for any number of
 * micro-batches, schedule and recompute. */
typedef struct hyfi_pstruct {
    int S, K, P, nrep, nplaces1, nplaces, ndev, batch;
    int *place_dev;           /* nplaces: the device that runs the place */
    pm_lin *fwd, *bwd;        /* nplaces1: replica 0's places' kernels per micro-batch */
    double *ntasks;           /* nplaces1: their tasks per micro-batch (forward and backward) */
    pm_lin *xf, *xb;          /* per stage: communication on its critical path per
                                 micro-batch: halos, batch-norm statistics over tiles,
                                 activations from the stage before (forward), gradients
                                 from the stage after (backward) */
    double *upd;              /* per stage: the update (SGD) of a replica, seconds */
    double *ar, *ar_bucket;   /* per stage: all-reduce of its gradients over the replicas,
                                 seconds, and of one bucket */
    double *acc;              /* per place of replica 0: summing its parameter gradients of
                                 one more micro-batch, seconds */
    double *red, *red_tasks;  /* per stage: the step's end across replicas on a replica's
                                 first place of the stage (reduce.c): the buckets' packing,
                                 ring or tree tasks, the running statistics' saves, packs
                                 and merges; seconds and tasks */
} hyfi_pstruct;

/* The structure of the plan in g->cc->pl (built with one micro-batch). 0, -1
 * out of memory. Free with hyfi_pstruct_free. */
int hyfi_pstruct_make(const hyfi_graph *g, const hyfi_pmodel *pm, hyfi_pstruct *ps);
void hyfi_pstruct_free(hyfi_pstruct *ps);

/* The cost of each layer of g for balancing: seconds of its forward and
 * backward on n images, untiled (cost[l]). */
void hyfi_pmodel_layer_costs(const hyfi_graph *g, const hyfi_pmodel *pm, double n, double *cost);

/* The predicted step of a structure with M micro-batches (schedule and
 * recompute as hyfi_plan_config's). */
typedef struct pm_step {
    double step, compute, overhead, bubble, imbalance, comm, allreduce;
} pm_step;
void hyfi_pmodel_step(const hyfi_pstruct *ps, const hyfi_pmodel *pm, int M, int recompute,
                      pm_step *out);

#endif
