/* Handles: every tensor's StarPU handles (values, gradients, momentum,
 * health sums; per micro-batch or per replica), partial gradients, the
 * loss seed, 1F1B tokens; registration (with StarPU-MPI owners and tags) and
 * release; the task programs' storage.
 *
 * Memory: inputs, labels, parameters, state and momentum live in host memory
 * that StarPU manages (starpu_malloc_flags, pinned when there are GPUs); activations,
 * gradients and saved tensors are registered without a home and allocated by
 * StarPU wherever a task needs them.
 */
#include "emit.h"

#include <starpu_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>




void hyfi_unreg(starpu_data_handle_t *h)
{
    if (*h) {
        starpu_data_unregister(*h);
        *h = NULL;
    }
}

/* What held the handles (unregistered by the table first) and the host
 * memory of inputs, parameters, state and momentum. */
void hyfi_handles_free(hyfi_graph *g)
{
    const int M = g->cc->pl ? g->cc->pl->nmb : 1;
    hyfi_handles_unregister(g);
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        const int per_rep = t->kind == T_PARAM || t->kind == T_STATE;
        const size_t hosts = (size_t)t->nhost * (per_rep ? t->numel : t->mb_numel);
        t->nh = 0;
        t->gparts = 0;
        hyfi_host_free(t->host, hosts);
        hyfi_host_free(t->ghost, hosts);
        hyfi_host_free(t->mhost, hosts);
        t->host = t->ghost = t->mhost = NULL;
    }
    for (int b = 0; b < g->cc->nbuckets; b++) free(g->cc->buckets[b].params);
    free(g->cc->buckets);
    g->cc->buckets = NULL;
    g->cc->nbuckets = 0;
    for (int i = 0; i < g->cc->nsgroups; i++) {
        free(g->cc->sgroups[i].t);
    }
    free(g->cc->sgroups);
    g->cc->sgroups = NULL;
    g->cc->nsgroups = 0;
    hyfi_host_free(g->cc->dloss_host, (size_t)M);
    g->cc->dloss_host = NULL;
    free(g->cc->loss_sum);
    g->cc->loss_sum = NULL;
    g->cc->nhealth = 0;
    hyfi_host_free(g->cc->token_host, (size_t)g->cc->ntokens);
    g->cc->token_host = NULL;
    g->cc->ntokens = 0;
}

/* Host copies hyfi registers as a handle's home (parameters, gradients and
 * momentum of their owner, whole inputs, small bookkeeping tensors) are counted
 * in StarPU's memory use (STARPU_MALLOC_COUNT): under a limit, StarPU evicts
 * other data for them, so the limit covers them as the plan's estimate does.
 * In a simulation build they are folded (STARPU_MALLOC_SIMULATION_FOLDED):
 * SimGrid maps one shared file over the whole buffer, so it costs no real
 * memory and reads back garbage. Nothing in a simulation needs the values:
 * no kernel runs, and what hyfi writes here (initial parameters, data, the
 * loss seed) is only read back as losses, health sums and checkpoints, which
 * a simulation does not compute anyway (docs/simulation.md). */
#ifdef STARPU_SIMGRID
#define HOST_FLAGS (STARPU_MALLOC_PINNED | STARPU_MALLOC_COUNT | STARPU_MALLOC_SIMULATION_FOLDED)
#else
#define HOST_FLAGS (STARPU_MALLOC_PINNED | STARPU_MALLOC_COUNT)
#endif

int hyfi_host_alloc(float **p, size_t n)
{
    return starpu_malloc_flags((void **)p, (n ? n : 1) * sizeof(float), HOST_FLAGS) == 0 ? 0
                                                                                         : -1;
}

void hyfi_host_free(float *p, size_t n)
{
    if (p) starpu_free_flags(p, (n ? n : 1) * sizeof(float), HOST_FLAGS);
}

/* Simulation: what StarPU allocates in main memory by itself (copies of
 * data registered without a home, StarPU-MPI's receive buffers) is folded
 * too; without this each simulated rank held about what the real rank holds.
 * Called before the first registration (the flags apply to later
 * allocations). */
static void fold_starpu_ram(void)
{
#ifdef STARPU_SIMGRID
    for (unsigned nd = 0; nd < starpu_memory_nodes_get_count(); nd++)
        if (starpu_node_get_kind(nd) == STARPU_CPU_RAM)
            starpu_malloc_on_node_set_default_flags(nd, STARPU_MALLOC_PINNED | STARPU_MALLOC_COUNT |
                                                            STARPU_MALLOC_SIMULATION_FOLDED);
#endif
}


hyfi_hcat hyfi_tensor_hcat(const hyfi_graph *g, const hyfi_tensor *t)
{
    if (t->kind == T_PARAM || t->kind == T_STATE) return HC_ALLREDUCE;
    if (t->kind == T_INPUT || t->kind == T_LABELS) return HC_INPUT;
    return t == g->loss ? HC_LOSS : HC_PIPELINE;
}

int hyfi_tensor_hflags(const hyfi_graph *g, const hyfi_tensor *t, int base)
{
    return (base >= 0 ? base : (int)hyfi_tensor_hcat(g, t)) |
           (hyfi_tensor_bf16(g, t) ? HYFI_HCAT_BF16 : 0) |
           (hyfi_tensor_elem(g, t) == sizeof(uint16_t) ? HYFI_HCAT_BF16S : 0);
}

int hyfi_handle_bf16(starpu_data_handle_t h)
{
    const hyfi_handle_info *p = h ? starpu_data_get_user_data(h) : NULL;
    return p && p->bf16;
}

void hyfi_handles_unregister(hyfi_graph *g)
{
    for (int i = g->cc->nhtab - 1; i >= 0; i--) {
        starpu_data_handle_t *h = &g->cc->htab[i].h;
        if (HYFI_HDEFERRED(*h)) *h = NULL; /* never registered (keyed.c) */
        else hyfi_unreg(h);
    }
    free(g->cc->htab);
    hyfi_kmap_free(&g->cc->kmap);
    hyfi_defer_free(g->cc);
    free(g->cc->rel_first);
    free(g->cc->rel_idx);
    g->cc->htab = NULL;
    g->cc->rel_first = g->cc->rel_idx = NULL;
    g->cc->nhtab = g->cc->caphtab = 0;
}

int hyfi_release_stage(const hyfi_graph *g, const hyfi_tensor *t)
{
    if (t == g->loss || t == hyfi_loss_logits(g) || (t->kind != T_ACT && t->kind != T_SAVED))
        return HYFI_KEEP;
    return t->stage;
}

int hyfi_tiles_release_stage(const hyfi_tensor *t)
{
    return t->kind == T_INPUT ? HYFI_KEEP : t->tl->stage;
}

/* The table's released entries grouped by (stage, micro-batch) in
 * registration order: a counting sort, so that each group is one slice. */
int hyfi_release_index(hyfi_graph *g)
{
    const int M = g->cc->pl->nmb, keys = g->cc->pl->nstages * M;
    g->cc->rel_first = calloc((size_t)keys + 1, sizeof *g->cc->rel_first);
    if (!g->cc->rel_first) return -1;
    int n = 0;
    for (int i = 0; i < g->cc->nhtab; i++) {
        const hyfi_hentry *e = &g->cc->htab[i];
        if (e->rstage < 0 || !e->h) continue;
        g->cc->rel_first[e->rstage * M + e->rmb + 1]++;
        n++;
    }
    for (int k = 0; k < keys; k++) g->cc->rel_first[k + 1] += g->cc->rel_first[k];
    g->cc->rel_idx = malloc((size_t)(n ? n : 1) * sizeof *g->cc->rel_idx);
    int *fill = malloc((size_t)(keys ? keys : 1) * sizeof *fill);
    if (!g->cc->rel_idx || !fill) {
        free(fill);
        return -1;
    }
    memcpy(fill, g->cc->rel_first, (size_t)keys * sizeof *fill);
    for (int i = 0; i < g->cc->nhtab; i++) {
        const hyfi_hentry *e = &g->cc->htab[i];
        if (e->rstage >= 0 && e->h) g->cc->rel_idx[fill[e->rstage * M + e->rmb]++] = i;
    }
    free(fill);
    return 0;
}

int hyfi_emit_releases(hyfi_graph *g, program *P, int s, int m)
{
    const int k = s * g->cc->pl->nmb + m;
    for (int j = g->cc->rel_first[k]; j < g->cc->rel_first[k + 1]; j++) {
        const hyfi_hentry *e = &g->cc->htab[g->cc->rel_idx[j]];
        if (hyfi_emit_release(P, e->h, e->owner)) return -1;
    }
    return 0;
}

static struct starpu_codelet *redux_cl(void) { return &hyfi_cl_redux_add; }
static struct starpu_codelet *redux_init_cl(void) { return &hyfi_cl_redux_zero; }


int hyfi_handle_owner(const hyfi_graph *g, const hyfi_tensor *t, int k)
{
    const int per_mb = t->kind == T_INPUT || t->kind == T_LABELS || t->kind == T_ACT ||
                       t->kind == T_SAVED;
    return hyfi_trank(g, t, per_mb ? HYFI_REP(g->cc->pl, k) : k);
}

/* Registers handle k of t (if not yet) as the registration that was skipped
 * would have, with the same key. */
starpu_data_handle_t hyfi_handle_need(hyfi_graph *g, hyfi_tensor *t, int grad, int tile, int k)
{
    hyfi_key key;
    size_t n;
    int owner;
    const int cat = hyfi_tensor_hflags(g, t, -1);
    char sfx[48];
    const hyfi_plan *pl = g->cc->pl;
    if (tile) {
        const int P = pl->P, q = k % P;
        key = HYFI_KEY(grad ? HK_TILE_GRAD : HK_TILE, t->id, k);
        n = hyfi_tile_numel(t, q);
        owner = hyfi_tile_rank(g, t->tl, q, HYFI_REP(pl, k / P));
        snprintf(sfx, sizeof sfx, ".tile%d%s", q, grad ? ".grad" : "");
    } else {
        key = HYFI_KEY(grad ? HK_GRAD : HK_VALUE, t->id, k);
        n = t->mb_numel;
        owner = hyfi_handle_owner(g, t, k);
        snprintf(sfx, sizeof sfx, "%s", grad ? ".grad" : "");
    }
    starpu_data_handle_t h = hyfi_kh(g->cc, key.role, key.obj, key.idx);
    if (h || !g->ctx->mpi) return h;
    h = hyfi_reg(g, key, NULL, n, t->is_int ? sizeof(int32_t) : sizeof(float), owner, cat,
                 HYFI_KEEP, t->name, sfx, tile ? k / pl->P : k, pl->nmb);
    free(g->cc->howner); /* rebuilt with the new entry when next needed */
    g->cc->howner = NULL;
    return h;
}

/* Register every tensor; allocate and initialise what lives in host memory. */
hyfi_status hyfi_register_tensors(hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    const int M = pl->nmb, me = g->ctx->rank, NR = pl->nrep;
    fold_starpu_ram();
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        const int per_mb = t->kind == T_INPUT || t->kind == T_LABELS || t->kind == T_ACT ||
                           t->kind == T_SAVED;
        t->nh = per_mb ? M : NR;
        t->mb_numel = per_mb && t->batched ? t->numel / (size_t)M : t->numel;
        /* A StarPU vector holds at most 2^32-1 elements. A tensor that lives in its
         * tiles only (no untiled op reads it) is used through its tiles' handles; one
         * whose whole micro-batch is above that (ResNet-50's conv1 at 32,768²: 2^34)
         * gets no whole-tensor handles, and its tiles are held to the limit instead. */
        const int tiles_only = t->tl && !t->tl->full;
        const int no_whole = tiles_only && t->mb_numel > UINT32_MAX;
        size_t too_big = no_whole ? 0 : t->mb_numel;
        for (int q = 0; no_whole && q < pl->P; q++)
            if (hyfi_tile_numel(t, q) > too_big) too_big = hyfi_tile_numel(t, q);
        if (too_big > UINT32_MAX)
            return hyfi_graph_fail(g, HYFI_ERR_SHAPE,
                                   "tensor \"%s\" has %zu elements per "
                                   "micro-batch%s; at most 2^32-1 per tensor "
                                   "(use more --parts, spatial parallelism or "
                                   "a smaller batch)",
                                   t->name, too_big, no_whole ? " in a tile" : "");
        /* this rank owns some handle of t; of a parameter or state, nown replicas' */
        int nown = 0;
        for (int k = 0; k < NR; k++) nown += hyfi_trank(g, t, k) == me;
        int own = nown > 0;
        const size_t elem = t->is_int ? sizeof(int32_t) : sizeof(float);
        const int rs = hyfi_release_stage(g, t);
        switch (t->kind) {
        case T_INPUT:
        case T_LABELS:
            /* a tiled input that no untiled op reads lives in its tiles only: no host
             * copy of the whole batch (16,384^2 RGB is 3 GiB an image) */
            if (t->tl && !t->tl->full) own = 0;
            /* host memory for the micro-batches this rank owns only, not the
             * whole global batch */
            t->nhost = 0;
            for (int m = 0; own && m < M; m++) t->nhost += hyfi_handle_owner(g, t, m) == me;
            if (t->nhost) {
                const size_t n = (size_t)t->nhost * t->mb_numel;
                if (hyfi_host_alloc(&t->host, n)) goto oom;
                memset(t->host, 0, n * 4);
            }
            for (int m = 0, j = 0; m < M && !no_whole; m++) {
                const int r = hyfi_handle_owner(g, t, m), mine = t->nhost && r == me;
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, m, HYFI_REP(pl, m)),
                         mine ? t->host + (size_t)j * t->mb_numel : NULL, t->mb_numel, elem, r,
                         hyfi_tensor_hflags(g, t, -1), HYFI_KEEP, t->name, "", m, M);
                j += mine;
            }
            if (!t->is_int) {
                for (int m = 0; m < M && !no_whole; m++) {
                    hyfi_reg(g, HYFI_KEY_R(HK_GRAD, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                             elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hflags(g, t, -1),
                             HYFI_KEEP, t->name, ".grad", m, M);
                }
            }
            break;
        case T_PARAM:
            /* one copy per replica, all initialised alike */
            /* host memory for the replicas this rank owns only (the others' copies
             * come from their ranks): memory and initialisation per rank do not
             * grow with the data-parallel groups */
            t->nhost = nown;
            if (own) {
                const size_t n = (size_t)nown * t->numel;
                if (hyfi_host_alloc(&t->host, n) || hyfi_host_alloc(&t->ghost, n) ||
                    hyfi_host_alloc(&t->mhost, n))
                    goto oom;
                for (int j = 0; j < nown; j++) {
                    hyfi_param_init(t->host + (size_t)j * t->numel, t, g->seed);
                    /* drawn in OIHW order: the same values in either layout */
                    if (hyfi_layout_convert(t, t->host + (size_t)j * t->numel, 0)) goto oom;
                }
                memset(t->ghost, 0, n * 4);
                memset(t->mhost, 0, n * 4);
            }
            for (int k = 0, j = 0; k < NR; k++) {
                const int r = hyfi_trank(g, t, k);
                const size_t o = (size_t)j * t->numel;
                const int mine = r == me;
                j += mine;
                /* only the replica's own tasks and the reads of replica 0
                 * (hyfi_tensor_read, checkpoints, health) touch these; the
                 * all-reduce's partners read a gradient where it is a bucket
                 * of its own, registered there (reduce.c) */
                starpu_data_handle_t gh =
                    hyfi_reg(g, HYFI_KEY_R(HK_GRAD, t->id, k, k), mine ? t->ghost + o : NULL,
                             t->numel, elem, r, HC_ALLREDUCE, HYFI_KEEP, t->name, ".grad", k, NR);
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, k, k), mine ? t->host + o : NULL, t->numel,
                         elem, r, HC_ALLREDUCE, HYFI_KEEP, t->name, "", k, NR);
                hyfi_reg(g, HYFI_KEY_R(HK_MOMENTUM, t->id, k, k), mine ? t->mhost + o : NULL,
                         t->numel, elem, r, HC_ALLREDUCE, HYFI_KEEP, t->name, ".momentum", k, NR);
                hyfi_reg(g, HYFI_KEY_R(HK_NORMS, t->id, k, k), NULL, 2, sizeof(float), r,
                         HC_ALLREDUCE, HYFI_KEEP, t->name, ".norms", k, NR);
                /* Summed over micro-batches by a StarPU reduction. */
                if (pl->mbr > 1 && !g->plan_cfg.deterministic && gh)
                    starpu_data_set_reduction_methods(gh, redux_cl(), redux_init_cl());
            }
            break;
        case T_STATE:
            t->nhost = nown;
            if (own) {
                if (hyfi_host_alloc(&t->host, (size_t)nown * t->numel)) goto oom;
                for (int j = 0; j < nown; j++)
                    hyfi_param_init(t->host + (size_t)j * t->numel, t, g->seed);
            }
            for (int k = 0, j = 0; k < NR; k++) {
                const int r = hyfi_trank(g, t, k), mine = r == me;
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, k, k),
                         mine ? t->host + (size_t)j * t->numel : NULL, t->numel, elem, r,
                         HC_ALLREDUCE, HYFI_KEEP, t->name, "", k, NR);
                j += mine;
            }
            break;
        case T_ACT:
            /* the loss too: its owner reads it, the ranks sum (loss_value) */
            for (int m = 0; m < M && !no_whole; m++) {
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                         elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hflags(g, t, -1), rs,
                         t->name, "", m, M);
            }
            if (t != g->loss) {
                for (int m = 0; m < M && !no_whole; m++) {
                    hyfi_reg(g, HYFI_KEY_R(HK_GRAD, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                             elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hflags(g, t, -1), rs,
                             t->name, ".grad", m, M);
                }
            }
            break;
        case T_SAVED:
            for (int m = 0; m < M && !no_whole; m++) {
                hyfi_reg(g, HYFI_KEY_R(HK_VALUE, t->id, m, HYFI_REP(pl, m)), NULL, t->mb_numel,
                         elem, hyfi_handle_owner(g, t, m), hyfi_tensor_hcat(g, t), rs, t->name, "",
                         m, M);
            }
            break;
        }
    }
    /* Partial gradients of activations consumed by other stages. */
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        for (int k = 0; k < nd->nin; k++) {
            hyfi_tensor *t = nd->in[k];
            if (t->kind != T_ACT || !t->requires_grad || nd->stage == t->stage) continue;
            t->gparts = 1;
            int done = 0; /* by an earlier consumer on this stage (scoped: some m is) */
            for (int m = 0; m < M && !done; m++)
                done =
                    hyfi_kent(g->cc, HK_PARTIAL, (uint64_t)t->id, (uint64_t)nd->stage * M + m) >= 0;
            if (done) continue;
            char sfx[32];
            snprintf(sfx, sizeof sfx, ".grad.stage%d", nd->stage);
            for (int m = 0; m < M; m++) {
                hyfi_reg(
                    g, HYFI_KEY_R(HK_PARTIAL, t->id, (size_t)nd->stage * M + m, HYFI_REP(pl, m)),
                    NULL, t->mb_numel, sizeof(float),
                    hyfi_stage_rank(pl, HYFI_REP(pl, m), nd->stage), hyfi_tensor_hflags(g, t, -1),
                    hyfi_release_stage(g, t), t->name, sfx, m, M);
            }
        }
    }
    /* Replicas: saved running statistics (packed instead: reduce.c,
     * hyfi_stats_register). */
    for (int i = 0; NR > 1 && !hyfi_stats_packed(g) && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->kind != T_STATE) continue;
        for (int k = 0; k < NR; k++) {
            hyfi_reg(g, HYFI_KEY_R(HK_RSAVE, t->id, k, k), NULL, t->numel, sizeof(float),
                     hyfi_trank(g, t, k), HC_ALLREDUCE, HYFI_KEEP, t->name, ".start", k, NR);
        }
    }
    /* The health sums of a step: one per rank that holds a parameter of
     * replica 0 (reduce.c adds up replica 0's norms), on every rank (the
     * first one's is broadcast); none for the other ranks, so that their
     * number does not grow with the replicas. */
    g->cc->nhealth = g->ctx->nranks;
    unsigned char *hrank = calloc((size_t)g->cc->nhealth, 1);
    if (!hrank) goto oom;
    for (int i = 0; i < g->nparams; i++) {
        const int r = hyfi_trank(g, g->params[i], 0);
        if (r >= 0 && r < g->cc->nhealth) hrank[r] = 1;
    }
    for (int r = 0; r < g->cc->nhealth; r++)
        if (hrank[r])
            hyfi_reg(g, HYFI_KEY(HK_HEALTH, 0, r), NULL, 2, sizeof(float), r, HC_PIPELINE,
                     HYFI_KEEP, "health", "", r, g->cc->nhealth);
    free(hrank);
    /* The seed of the backward: d(mean over the batch)/d(micro-batch loss) = 1/M. */
    if (hyfi_host_alloc(&g->cc->dloss_host, (size_t)M)) goto oom;
    g->cc->loss_sum = malloc(2 * (size_t)M * sizeof *g->cc->loss_sum);
    if (!g->cc->loss_sum) goto oom;
    for (int m = 0; m < M; m++) {
        g->cc->dloss_host[m] = 1.0f / (float)M;
        hyfi_reg(g, HYFI_KEY_R(HK_DLOSS, 0, m, HYFI_REP(pl, m)), g->cc->dloss_host + m, 1,
                 sizeof(float), hyfi_handle_owner(g, g->loss, m), HC_LOSS, HYFI_KEEP, g->loss->name,
                 ".grad", m, M);
    }
    /* 1F1B: per stage, one token per activation slot (compile.c: the event loop of build_train and its token buffers). */
    if (pl->schedule == HYFI_SCHEDULE_1F1B && pl->mbr > 1) {
        for (int q = 0; q < pl->nplaces; q++) g->cc->ntokens += pl->inflight[pl->place_stage[q]];
        if (hyfi_host_alloc(&g->cc->token_host, (size_t)g->cc->ntokens)) goto oom;
        memset(g->cc->token_host, 0, (size_t)g->cc->ntokens * sizeof(float));
        for (int q = 0, k = 0; q < pl->nplaces; q++)
            for (int j = 0; j < pl->inflight[pl->place_stage[q]]; j++, k++) {
                char nm[48];
                snprintf(nm, sizeof nm, "place%d.token", q);
                hyfi_reg(g, HYFI_KEY_R(HK_TOKEN, 0, k, q / pl->nplaces1), g->cc->token_host + k, 1,
                         sizeof(float), pl->place_rank[q], HC_PIPELINE, HYFI_KEEP, nm, "", j, 2);
            }
    }
    return HYFI_OK;
oom:
    return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of host memory registering the tensors "
                                              "(%d tensors); use a smaller batch or model",
                           g->ntensors);
}
