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
        hyfi_unreg(&g->cc->htab[i].h); /* (NULL: never registered, keyed.c) */
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
        if (e->rstage < 0 || !hyfi_entry_live(e)) continue;
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
        if (e->rstage >= 0 && hyfi_entry_live(e))
            g->cc->rel_idx[fill[e->rstage * M + e->rmb]++] = i;
    }
    free(fill);
    return 0;
}

int hyfi_emit_releases(hyfi_graph *g, program *P, int s, int m)
{
    const int k = s * g->cc->pl->nmb + m;
    for (int j = g->cc->rel_first[k]; j < g->cc->rel_first[k + 1]; j++) {
        const int i = g->cc->rel_idx[j];
        if (hyfi_emit_release(P, (hyfi_ref)i + 1, g->cc->htab[i].owner)) return -1;
    }
    return 0;
}

int hyfi_handle_owner(const hyfi_graph *g, const hyfi_tensor *t, int k)
{
    const int per_mb = t->kind == T_INPUT || t->kind == T_LABELS || t->kind == T_ACT ||
                       t->kind == T_SAVED;
    return hyfi_trank(g, t, per_mb ? HYFI_REP(g->cc->pl, k) : k);
}

/* Registers handle k of t (if not yet) as the registration that was skipped
 * would have, with the same key. */
hyfi_ref hyfi_handle_need(hyfi_graph *g, hyfi_tensor *t, int grad, int tile, int k)
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
    const hyfi_ref r = hyfi_kref(g->cc, key.role, key.obj, key.idx);
    if ((r && g->cc->htab[r - 1].h) || !g->ctx->mpi) return r;
    return hyfi_reg(g, key, NULL, n, t->is_int ? sizeof(int32_t) : sizeof(float), owner, cat,
                    HYFI_KEEP, t->name, sfx, tile ? k / pl->P : k, pl->nmb);
}
