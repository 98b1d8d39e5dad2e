/* keyed.h: deferred registrations (keyed.c) and the tiles' local copies
 * (localise.c): what the compile asks of a handle that may not be registered
 * yet. Included by internal.h. */
#ifndef HYFI_ENGINE_KEYED_H
#define HYFI_ENGINE_KEYED_H

#include <stdint.h>

#include "keys.h"

/* The key map (kmap.h): a compiled graph's keys on this rank, each with its
 * handle-table entry (-1: none here: a key this rank does not register, or
 * one that only carries a flag) and a compile-time flag. Every piece of data
 * is found by its key: the graph's structs hold no handles. */
/* Key (role, obj, idx)'s handle-table entry, -1 when none. */
int hyfi_kent(const hyfi_compiled *cc, hyfi_role role, uint64_t obj, uint64_t idx);
/* Its handle on this rank: NULL when this rank does not register it (a
 * deferred placeholder until the compile resolves it). */
static inline starpu_data_handle_t hyfi_kh(const hyfi_compiled *cc, hyfi_role role, uint64_t obj,
                                           uint64_t idx)
{
    const int e = hyfi_kent(cc, role, obj, idx);
    return e >= 0 ? cc->htab[e].h : NULL;
}
/* The key's flag (0 when never set), and its byte, made if needed (out of
 * memory: a byte of the map's own, with cc->htab_oom set, so that the
 * compile fails). */
unsigned char hyfi_kflag(const hyfi_compiled *cc, hyfi_role role, uint64_t obj, uint64_t idx);
unsigned char *hyfi_kflag_at(hyfi_compiled *cc, hyfi_role role, uint64_t obj, uint64_t idx);

/* After compile: t has gradient handles (HK_GRAD; the loss's: the seed's),
 * and a momentum (HK_MOMENTUM). */
static inline int hyfi_tensor_has_grad(const hyfi_tensor *t)
{
    return t->nh > 0 &&
           ((t->kind == T_INPUT && !t->is_int) || t->kind == T_PARAM || t->kind == T_ACT);
}
static inline int hyfi_tensor_has_momentum(const hyfi_tensor *t)
{
    return t->nh > 0 && t->kind == T_PARAM;
}
/* A tensor's handles by key: value k (a micro-batch of batch tensors, a
 * replica of the others; shared tensors have one), its gradient (the loss's:
 * the backward's seed) and the gradient's flag. */
static inline starpu_data_handle_t hyfi_tgrad(const hyfi_tensor *t, int k)
{
    const hyfi_compiled *cc = t->g->cc;
    return t == t->g->loss ? hyfi_kh(cc, HK_DLOSS, 0, (uint64_t)k)
                           : hyfi_kh(cc, HK_GRAD, (uint64_t)t->id, (uint64_t)k);
}
#define HYFI_TK(t, m) ((uint64_t)((t)->nh > 1 ? (m) : 0))
#define TH(t, m) hyfi_kh((t)->g->cc, HK_VALUE, (uint64_t)(t)->id, HYFI_TK(t, m))
#define TGH(t, m) hyfi_tgrad((t), (int)HYFI_TK(t, m))
#define TGW(t, m) hyfi_kflag((t)->g->cc, HK_GRAD, (uint64_t)(t)->id, HYFI_TK(t, m))
#define TGWP(t, m) hyfi_kflag_at((t)->g->cc, HK_GRAD, (uint64_t)(t)->id, HYFI_TK(t, m))
/* The same by role: a parameter's momentum or norms, a state's saved copy
 * (replica k), an activation's partial gradient (stage * nh + m). */
#define TK(t, role, k) hyfi_kh((t)->g->cc, (role), (uint64_t)(t)->id, (uint64_t)(k))
/* A tensor's tile (k = m P + q) and its gradient. */
#define TTILE(t, k) TK(t, HK_TILE, k)
#define TTGRAD(t, k) TK(t, HK_TILE_GRAD, k)

/* A deferred registration (keyed.c): until a kept task names it, a handle of
 * a tile, halo strip, assembled buffer, partial sum or fused region of a
 * scoped rank is the odd value (its handle-table index << 4 | 1), and this is
 * what registering it takes. */
typedef struct hyfi_hdefer {
    float *ptr;
    size_t n, elem;
    int bf16, redux, m, nm;
    const char *name;  /* a tensor's or node's name (lives as long as the graph) */
    char sfx[32];
} hyfi_hdefer;
#define HYFI_HDEFERRED(h) (((uintptr_t)(h)&1u) != 0)
#define HYFI_HDEFER_VALUE(i) ((starpu_data_handle_t)(((uintptr_t)(i) << 4) | 1u))
#define HYFI_HDEFER_INDEX(h) ((int)((uintptr_t)(h) >> 4))

/* keyed.c: deferred registrations (see there). A handle's owning rank,
 * bytes and category, registered or deferred. */
static inline int hyfi_handle_rank(const hyfi_graph *g, starpu_data_handle_t h)
{
    if (!h) return -1;
    if (HYFI_HDEFERRED(h)) return g->cc->htab[HYFI_HDEFER_INDEX(h)].owner;
    return starpu_mpi_data_get_rank(h);
}
static inline size_t hyfi_handle_bytes(const hyfi_graph *g, starpu_data_handle_t h)
{
    if (!h) return 0;
    if (HYFI_HDEFERRED(h)) {
        const hyfi_hdefer *d = &g->cc->dtab[g->cc->htab[HYFI_HDEFER_INDEX(h)].defer];
        return d->n * d->elem;
    }
    return starpu_data_get_size(h);
}
/* The data task t holds at once: the sum of its buffers' bytes. */
static inline size_t hyfi_task_bytes(const hyfi_graph *g, const prog_task *t)
{
    size_t b = 0;
    for (int i = 0; i < t->nbuf; i++) b += hyfi_handle_bytes(g, prog_cbufs(t)[i].handle);
    return b;
}
static inline hyfi_hcat hyfi_handle_cat(const hyfi_graph *g, starpu_data_handle_t h)
{
    if (HYFI_HDEFERRED(h)) return g->cc->htab[HYFI_HDEFER_INDEX(h)].cat;
    const hyfi_handle_info *p = h ? starpu_data_get_user_data(h) : NULL;
    return p ? (hyfi_hcat)p->cat : HC_PIPELINE;
}
/* Handle -> its index in the handle table (a deferred placeholder carries
 * its own), by open addressing over the registered handles; -1 for a handle
 * not in the table. keyed.c. */
typedef struct {
    starpu_data_handle_t *h;
    int *idx;
    size_t mask;
} hyfi_hindex;
int hyfi_hindex_build(hyfi_hindex *x, const hyfi_compiled *cc); /* 0, -1: out of memory */
int hyfi_hindex_of(const hyfi_hindex *x, starpu_data_handle_t h);
void hyfi_hindex_free(hyfi_hindex *x);
/* StarPU's reduction (hyfi_cl_redux_add/zero) on h, now or when registered. */
void hyfi_handle_set_redux(hyfi_graph *g, starpu_data_handle_t h);
/* After the programs hold only this rank's tasks: register the deferred
 * handles those tasks name and those this rank owns, drop the rest (their
 * slots NULL, their releases and flushes out of the programs). 0, or -1 when
 * out of memory. */
int hyfi_handles_resolve(hyfi_graph *g);
void hyfi_defer_free(hyfi_compiled *cc);
/* Under StarPU-MPI's fake size (ctx->fake_ranks: one process stands for one
 * rank of a larger run), before program p runs: give the handles its tasks on
 * this rank read, which another rank would have sent, a zeroed copy here,
 * since StarPU-MPI makes no transfer in that mode (and a release drops the
 * copies at each step's end). Lets one rank of a plan far larger than the
 * host run its own share of the steps (its submission time,
 * bench/submit_cost.sh --fake), on values that mean nothing. */
void hyfi_fake_fill(hyfi_graph *g, const program *p);
/* localise.c: a scoped rank's tiles read local copies of what every tile
 * reads, and readers of the tiles' partial sums flush them (see there). 0, or
 * -1 when out of memory. */
int hyfi_programs_localise(hyfi_graph *g);

#endif
