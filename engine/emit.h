/* Emitting tasks into programs and registering their data: shared by the
 * lowerings (through opdef.h and spatial_impl.h), the compile driver, the
 * registrar and the files that register or rewrite handles (handles.c,
 * keyed.c, reduce.c, buckets.c, localise.c, share.c, program.c, traffic.c,
 * grad_forward.c). */
#ifndef HYFI_ENGINE_EMIT_H
#define HYFI_ENGINE_EMIT_H

#include "keys.h"
#include "internal.h"

#include <stdio.h>

/* Where and how the tasks being emitted run: micro-batch m of a stage event. */
typedef struct emit_ctx_s {
    hyfi_graph *g;
    program *P;
    int m, M;                            /* micro-batch m of the step's M (all replicas) */
    int rep;                             /* the replica of m */
    int stage;
    int place;                           /* the event's default place */
    int prio;
    enum starpu_data_access_mode token_mode; /* 1F1B: R for forwards, RW|COMMUTE backwards */
    /* Re-materialisation: the forward being emitted re-runs a segment before its
     * backward (batch norm normalises with the saved batch statistics and
     * computes no statistics, running ones untouched) */
    int recompute;
    /* A scoped rank's tiles far from its own (hyfi_sp_tile), of replica
     * far_key - 1 (0: not worked out yet), and their distance: twice the
     * halo's reach, plus 1 (0: not worked out yet). */
    int far_key, far_dist;
    unsigned char far[HYFI_MAX_TILES];
} emit_ctx;

#define TASK(cl, nm, args)                                                                  \
    do {                                                                                    \
        if (hyfi_prog_push(P, PT_TASK, (cl), (nm), (args))) return -1;                     \
    } while (0)
/* Replica e->rep's copy of a parameter or state tensor, its gradient and flag. */
#define PH(t) TH(t, e->rep)
#define PGH(t) TGH(t, e->rep)
#define PGW(t) TGWP(t, e->rep)
#define R(h) hyfi_prog_buf(P, (h), STARPU_R)
#define W(h) hyfi_prog_buf(P, (h), STARPU_W)
#define RW(h) hyfi_prog_buf(P, (h), STARPU_RW)
/* The place of the task just pushed (default: the event's). */
#define ON_PLACE(pl) (P->t[P->n - 1].place = (pl))

int hyfi_prog_push(program *p, prog_kind kind, struct starpu_codelet *cl, const char *name,
                   const hyfi_task_args *args);
void hyfi_prog_buf(program *p, hyfi_ref h, enum starpu_data_access_mode mode);
/* a's bytes for a task of codelet cl in p's pool (NULL a: zeros); NULL when
 * out of memory */
hyfi_task_args *hyfi_args_intern(program *p, const struct starpu_codelet *cl,
                                 const hyfi_task_args *a);
void hyfi_prog_task_buf(program *p, prog_task *t, hyfi_ref h, enum starpu_data_access_mode mode);
void hyfi_unreg(starpu_data_handle_t *h); /* (a StarPU handle) */
int hyfi_host_alloc(float **p, size_t n);
/* Free what hyfi_host_alloc gave (the same n). NULL is fine. */
void hyfi_host_free(float *p, size_t n);
/* keyed.c. Register a vector handle: home in host memory (ptr) on the owning rank,
 * lazy elsewhere or when ptr is NULL; known to StarPU-MPI in MPI runs; entered
 * in the handle table with its owner, category and lifetime (released after
 * the backward of micro-batch m on stage rstage, or HYFI_KEEP). Named
 * name+suffix, with "[m]" when nm > 1. cat: a hyfi_hcat, with HYFI_HCAT_BF16
 * for a handle of bf16 values (hyfi_tensor_hflags). key: what it is (keys.h),
 * which gives its StarPU-MPI tag, and under which the lowerings find it
 * (hyfi_kref). Returns its reference (its entry + 1): 0 where this rank does
 * not register the key (hyfi_key_wanted) or on failure (cc->htab_oom set). */
hyfi_ref hyfi_reg(hyfi_graph *g, hyfi_key key, float *ptr, size_t n, size_t elem, int owner,
                  int cat, int rstage, const char *name, const char *suffix, int m, int nm);
/* Whether the replicas' running statistics are combined packed per stage
 * (reduce.c; hyfi_plan_config.pack_stats): with more than 4 replicas unless
 * the configuration says. */
#define HYFI_STATS_GROUP 16 /* statistics per packed group */
#define HYFI_SLICES_GROUP 32 /* parts per grouped copy task (reduce.c; within the 72 buffers bf16 staging takes) */
/* Whether copies between a packed buffer and its parts share tasks
 * (reduce.c, pack_slices / unpack_slices): without CUDA workers, and not in a
 * simulation (whose models know copy_slice). */
static inline int hyfi_slices_grouped(const hyfi_graph *g)
{
    return g->ctx->ncuda == 0 && !HYFI_SIMULATION;
}
/* Whether the running statistics are packed (hyfi_plan_config.pack_stats; by
 * default with more than 4 replicas, or with 2 or more where the copies into
 * the packed buffers are grouped: 3 tasks per group and replica then). */
static inline int hyfi_stats_packed_on(const hyfi_graph *g, int grouped)
{
    const int R = g->cc->pl->nrep, p = g->plan_cfg.pack_stats;
    return R > 1 && (p > 0 || (p == 0 && (grouped || R > 4)));
}
static inline int hyfi_stats_packed(const hyfi_graph *g)
{
    return hyfi_stats_packed_on(g, hyfi_slices_grouped(g));
}
/* buckets.c, before the lowerings: the packed running statistics' groups and
 * their handles (none unless hyfi_stats_packed); the all-reduce's buckets of
 * the parameters that receive a gradient (a pure function of the graph) and
 * their handles (replicas). 0, or -1 out of memory. After the lowerings,
 * hyfi_buckets_check: -1 if the parameters whose gradients the tasks wrote
 * are not the buckets' (a fault of the engine). */
int hyfi_stats_register(hyfi_graph *g);
int hyfi_buckets_register(hyfi_graph *g);
int hyfi_buckets_check(const hyfi_graph *g);
/* Bucket bi's handle name: its parameter's, or "bucketN" for several. */
static inline void hyfi_bucket_name(const hyfi_bucket *b, int bi, char *out, size_t len)
{
    if (b->nparams == 1) snprintf(out, len, "%s", b->params[0]->name);
    else snprintf(out, len, "bucket%d", bi);
}
/* Bucket bi's packed gradient of replica k: for a bucket of one parameter,
 * that parameter's own gradient. */
static inline hyfi_ref hyfi_bucket_h(const hyfi_graph *g, int bi, int k)
{
    const hyfi_bucket *b = &g->cc->buckets[bi];
    return b->nparams == 1 ? TGH(b->params[0], k)
                           : hyfi_kref(g->cc, HK_BUCKET, (uint64_t)bi, (uint64_t)k);
}
/* A family of keys: one role of one object, indexed by replica (the
 * collectives' operands). */
typedef struct {
    hyfi_role role;
    uint64_t obj;
} hyfi_kfam;
#define KFH(g, f, k) hyfi_kref((g)->cc, (f).role, (f).obj, (uint64_t)(k))
/* Scoped compile (share.c; hyfi_key_wanted: keyed.c). */
int hyfi_scope_init(hyfi_graph *g);
void hyfi_scope_free(hyfi_compiled *cc);
/* Whether this rank registers the piece named by key: every rank for a key
 * of no replica (rep -1); for replica k's, where k is mine (its tasks run
 * here), or wanted (also a collective's partner: running statistics,
 * buckets), or, for a parameter's value, gradient, momentum and norms, mine
 * or replica 0. Elsewhere hyfi_reg registers nothing (its key has no handle). */
int hyfi_key_wanted(const hyfi_graph *g, hyfi_key key);
/* After a collective's task: drop it where it does not concern this rank;
 * where it does, flush what it reads from another rank (PT_FLUSH). */
int hyfi_collective_done(hyfi_graph *g, program *P);
/* -1 (and a message) if a task of P names an unregistered handle. */
int hyfi_scope_check(hyfi_graph *g, const program *P);
/* The stage after whose backward a micro-batch's handles of t (and of its
 * partial gradients) are released; HYFI_KEEP for inputs, the loss and its
 * logits, parameters and state. */
int hyfi_release_stage(const hyfi_graph *g, const hyfi_tensor *t);
/* The same for the tiles of a tiled tensor t: its tiled stage, but the
 * input's tiles are kept (written before each step). */
int hyfi_tiles_release_stage(const hyfi_tensor *t);
/* Group the table's released entries by (stage, micro-batch), once every
 * per-micro-batch handle is registered. */
int hyfi_release_index(hyfi_graph *g);
/* Micro-batch m is done on stage s: release its handles there (each by its
 * owner), in registration order. */
int hyfi_emit_releases(hyfi_graph *g, program *P, int s, int m);
/* The category of a tensor's own handles (of any piece of data: hyfi_ref_cat). */
hyfi_hcat hyfi_tensor_hcat(const hyfi_graph *g, const hyfi_tensor *t);
/* hyfi_reg's category of t's own handles: hyfi_tensor_hcat, | HYFI_HCAT_BF16
 * where hyfi_tensor_bf16. base: another category (the halo's), or -1. */
int hyfi_tensor_hflags(const hyfi_graph *g, const hyfi_tensor *t, int base);

/* Unregister every handle of the table (before freeing what held them). */
void hyfi_handles_unregister(hyfi_graph *g);
void hyfi_task_name(char *out, size_t len, const node *nd, const char *pass, const emit_ctx *e);
/* Mode and acc flag of a gradient summed over micro-batches (written: the
 * compile-time flag of the handle); may emit a zero fill first. */
int hyfi_grad_sum_mode(emit_ctx *e, hyfi_ref h, unsigned char *written, size_t numel,
                       const char *name, enum starpu_data_access_mode *mode, int *acc);
int hyfi_emit_release(program *P, hyfi_ref h, int owner);
/* Re-materialisation: drop the contents of registered handle h (NULL: none)
 * now, a release by its owner (found in the handle table). */
int hyfi_emit_drop(emit_ctx *e, hyfi_ref h);
/* spatial.c: drop what tiled node nd made in micro-batch e->m's forward (its
 * output's tiles, its assembled buffers and halo strips; a fused-halo group's
 * buffers with its last op), with their gradients when `grads`. */
int hyfi_spatial_drop(emit_ctx *e, const node *nd, int grads);

/* spatial_halo.c: tile q's tasks are emitted next when `more` (returned), none
 * of a tile otherwise; on a scoped rank they are marked far (prog_task.far)
 * when q is more than twice the halo's reach, in tiles, from every tile of
 * this rank: they touch only their tile's and its neighbours' data, which no
 * task of this rank touches. */
int hyfi_sp_tile(emit_ctx *e, int q, int more);
/* compile.c: drop the far tasks among P's from `from` on that this rank would
 * never submit (share.c's rule): so that it builds its own tiles' share of a
 * tiled stage, not the whole stage. */
void hyfi_trim_far(emit_ctx *e, int from);

/* spatial.c: tasks of tiled stages (see there). */
int hyfi_spatial_forward(emit_ctx *e, const node *nd, int training);
int hyfi_spatial_backward(emit_ctx *e, const node *nd);
int hyfi_spatial_gather(emit_ctx *e, hyfi_tensor *x);
int hyfi_spatial_gather_back(emit_ctx *e, hyfi_tensor *x);
int hyfi_spatial_param_sums(emit_ctx *e);


/* The all-reduce algorithm of a gradient of n floats over the replicas. */
static inline int hyfi_use_ring(const hyfi_graph *g, size_t n)
{
    const hyfi_allreduce a = g->plan_cfg.allreduce;
    if (a == HYFI_ALLREDUCE_RING) return n >= (size_t)g->cc->pl->nrep;
    if (a == HYFI_ALLREDUCE_TREE) return 0;
    const size_t R = (size_t)g->cc->pl->nrep;
    return n >= R && n * sizeof(float) / R >= HYFI_RING_MIN_CHUNK;
}

/* Chunk c of the ring: [c * n / R, (c+1) * n / R). */
static inline size_t hyfi_chunk_lo(size_t n, int R, int c) { return n * (size_t)c / (size_t)R; }

/* register.c: every key of the plan registered (see there), then the
 * release index. HYFI_OK; a tensor's failure (its message set); or, with
 * *key_failed set, a key that failed (out of memory, a key twice, a field
 * out of a tag's range: the caller names it). */
hyfi_status hyfi_register_plan(hyfi_graph *g, int *key_failed);
/* compile.c: the last task pushed runs on `place` with priority prio
 * (clamped to the scheduler's range by hyfi_clamp_prio). */
int hyfi_clamp_prio(int p);
void hyfi_on_place(hyfi_graph *g, program *P, int place, int prio);
/* grad_forward.c: can input i of add node nd take its gradient from y, the
 * tensor holding the add's output gradient (hyfi_grad_source)? Always for the
 * input of an add fused into its convolution. Marks the tensors whose
 * gradient is then no longer readable (gclob). */
int hyfi_add_grad_alias(const emit_ctx *e, const node *nd, int i, const hyfi_tensor *y);
/* reduce.c */
int hyfi_emit_state_save(hyfi_graph *g, program *P);
int hyfi_emit_state_combine(hyfi_graph *g, program *P);
int hyfi_emit_allreduce(hyfi_graph *g, program *P);
int hyfi_emit_sgd(hyfi_graph *g, program *P);
int hyfi_emit_health(hyfi_graph *g, program *P);

#endif
