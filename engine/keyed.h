/* keyed.h: the keyed data space: a piece of data's key (keys.h) gives its
 * reference (hyfi_ref: its handle-table entry), which the lowerings and the
 * programs hold, and from which its owner, size, category and StarPU handle
 * are read; deferred registrations (keyed.c) and the tiles' local copies
 * (localise.c). Included by internal.h. */
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
/* Its reference (internal.h: hyfi_ref): 0 when this rank does not register it. */
static inline hyfi_ref hyfi_kref(const hyfi_compiled *cc, hyfi_role role, uint64_t obj,
                                 uint64_t idx)
{
    return (hyfi_ref)(hyfi_kent(cc, role, obj, idx) + 1);
}
/* What a reference's entry says: its StarPU handle (NULL: not registered
 * here, or not yet: deferred), owning rank (-1 for none), bytes, category. */
static inline starpu_data_handle_t hyfi_ref_h(const hyfi_compiled *cc, hyfi_ref r)
{
    return r ? cc->htab[r - 1].h : NULL;
}
static inline int hyfi_ref_rank(const hyfi_graph *g, hyfi_ref r)
{
    return r ? g->cc->htab[r - 1].owner : -1;
}
static inline size_t hyfi_ref_bytes(const hyfi_graph *g, hyfi_ref r)
{
    return r ? g->cc->htab[r - 1].bytes : 0;
}
static inline hyfi_hcat hyfi_ref_cat(const hyfi_graph *g, hyfi_ref r)
{
    return r ? g->cc->htab[r - 1].cat : HC_PIPELINE;
}
/* An entry registered here, or deferred (keyed.c). */
static inline int hyfi_entry_live(const hyfi_hentry *e) { return e->h || e->defer >= 0; }
/* A deferred registration not yet made (keyed.c). */
static inline int hyfi_ref_deferred(const hyfi_graph *g, hyfi_ref r)
{
    return r && g->cc->htab[r - 1].defer >= 0 && !g->cc->htab[r - 1].h;
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
static inline hyfi_ref hyfi_tgrad(const hyfi_tensor *t, int k)
{
    const hyfi_compiled *cc = t->g->cc;
    return t == t->g->loss ? hyfi_kref(cc, HK_DLOSS, 0, (uint64_t)k)
                           : hyfi_kref(cc, HK_GRAD, (uint64_t)t->id, (uint64_t)k);
}
#define HYFI_TK(t, m) ((uint64_t)((t)->nh > 1 ? (m) : 0))
#define TH(t, m) hyfi_kref((t)->g->cc, HK_VALUE, (uint64_t)(t)->id, HYFI_TK(t, m))
#define TGH(t, m) hyfi_tgrad((t), (int)HYFI_TK(t, m))
#define TGW(t, m) hyfi_kflag((t)->g->cc, HK_GRAD, (uint64_t)(t)->id, HYFI_TK(t, m))
#define TGWP(t, m) hyfi_kflag_at((t)->g->cc, HK_GRAD, (uint64_t)(t)->id, HYFI_TK(t, m))
/* The same by role: a parameter's momentum or norms, a state's saved copy
 * (replica k), an activation's partial gradient (stage * nh + m). */
#define TK(t, role, k) hyfi_kref((t)->g->cc, (role), (uint64_t)(t)->id, (uint64_t)(k))
/* A tensor's tile (k = m P + q) and its gradient. */
#define TTILE(t, k) TK(t, HK_TILE, k)
#define TTGRAD(t, k) TK(t, HK_TILE_GRAD, k)

/* A deferred registration (keyed.c): until a kept task names it, a handle of
 * a tile, halo strip, assembled buffer, partial sum or fused region of a
 * scoped rank is only its handle-table entry (no StarPU handle), and this is
 * what registering it takes. */
typedef struct hyfi_hdefer {
    float *ptr;
    size_t n, elem;
    int bf16, redux, m, nm;
    const char *name;  /* a tensor's or node's name (lives as long as the graph) */
    char sfx[32];
} hyfi_hdefer;
/* The data task t holds at once: the sum of its buffers' bytes. */
static inline size_t hyfi_task_bytes(const hyfi_graph *g, const prog_task *t)
{
    size_t b = 0;
    for (int i = 0; i < t->nbuf; i++) b += hyfi_ref_bytes(g, prog_cbufs(t)[i].ref);
    return b;
}
/* StarPU's reduction (hyfi_cl_redux_add/zero) on r's handle, now or when
 * registered. */
void hyfi_handle_set_redux(hyfi_graph *g, hyfi_ref r);
/* After the programs hold only this rank's tasks: register the deferred
 * handles those tasks name and those this rank owns, drop the rest (their
 * handles stay NULL, their releases and flushes leave the programs). 0, or
 * -1 when out of memory. */
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
