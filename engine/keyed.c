/* Deferred registration: a scoped rank registers the handles of tiles, halo
 * strips, assembled buffers, per-tile partial sums and fused regions only
 * where its own tasks name them, or where it owns them.
 *
 * A rank of a tiled stage builds the whole stage's tasks (every tile's), and
 * only at the end of the compile does it know which of them it keeps
 * (run.c, mark_skips: those that run on it, or touch data it owns or that
 * its own tasks touch). Registering every tile's handles with StarPU on every
 * rank cost about 7 KB per handle whether the rank ever used them or not
 * (124,109 handles on each of 4 ranks for AmoebaNet-D at 8,192² in 64
 * tiles). So hyfi_reg, while compiling such a rank, enters these handles in
 * the handle table with everything their registration needs (the key's tag,
 * the owner, the size, the name) and gives the slot an odd placeholder value
 * (internal.h: HYFI_HDEFER_VALUE, the table index), which the lowerings store
 * in the programs like any handle. What the compile asks of a handle before
 * the programs are final (its owner, its bytes, its category: the traffic
 * prediction, the memory check, the skip marks) is answered from the table
 * here. hyfi_handles_resolve then registers, as the owner (home node) or as
 * a reader (-1), the handles named by the tasks the rank kept and the ones
 * it owns, with the tags they would have had, and forgets the others: their
 * slots become NULL, as for a registration scope.c skips, and a later read
 * of one (hyfi_tensor_read of another rank's tile) registers it then
 * (hyfi_handle_need). No StarPU call is needed to decide any of it. */
#include "emit.h"

#include <starpu_mpi.h>
#include <stdlib.h>
#include <string.h>

int hyfi_key_deferred(int role)
{
    switch (role) {
    case HK_TILE: case HK_TILE_GRAD: case HK_TBUF: case HK_TDBUF: case HK_STRIP:
    case HK_DSTRIP: case HK_WPART: case HK_BPART: case HK_BN_PART: case HK_BN_BWPART:
    case HK_BN_TOT: case HK_F_VAL: case HK_F_GRAD: case HK_F_PBUF: case HK_F_DPBUF:
    case HK_F_XO: case HK_F_DYO: case HK_F_DXO:
        return 1;
    default:
        return 0;
    }
}

int hyfi_defer_add(hyfi_compiled *cc, float *ptr, size_t n, size_t elem, int bf16,
                   const char *name, const char *suffix, int m, int nm)
{
    if (cc->ndtab == cc->capdtab) {
        const int nc = cc->capdtab ? 2 * cc->capdtab : 1024;
        hyfi_hdefer *d = realloc(cc->dtab, (size_t)nc * sizeof *d);
        if (!d) return -1;
        cc->dtab = d;
        cc->capdtab = nc;
    }
    hyfi_hdefer *d = &cc->dtab[cc->ndtab];
    *d = (hyfi_hdefer){.ptr = ptr, .n = n, .elem = elem, .bf16 = bf16, .m = m, .nm = nm,
                       .name = name};
    /* the suffixes are short (".halo12_13.grad"); a longer one is cut, which
     * changes only the name StarPU shows */
    snprintf(d->sfx, sizeof d->sfx, "%s", suffix);
    return cc->ndtab++;
}

void hyfi_defer_free(hyfi_compiled *cc)
{
    free(cc->dtab);
    cc->dtab = NULL;
    cc->ndtab = cc->capdtab = 0;
}

int hyfi_handle_rank(const hyfi_graph *g, starpu_data_handle_t h)
{
    if (!h) return -1;
    if (HYFI_HDEFERRED(h)) return g->cc->htab[HYFI_HDEFER_INDEX(h)].owner;
    return starpu_mpi_data_get_rank(h);
}

size_t hyfi_handle_bytes(const hyfi_graph *g, starpu_data_handle_t h)
{
    if (!h) return 0;
    if (HYFI_HDEFERRED(h)) {
        const hyfi_hdefer *d = &g->cc->dtab[g->cc->htab[HYFI_HDEFER_INDEX(h)].defer];
        return d->n * d->elem;
    }
    return starpu_data_get_size(h);
}

hyfi_hcat hyfi_handle_cat(const hyfi_graph *g, starpu_data_handle_t h)
{
    if (HYFI_HDEFERRED(h)) return g->cc->htab[HYFI_HDEFER_INDEX(h)].cat;
    return hyfi_handle_hcat(h);
}

void hyfi_handle_set_redux(hyfi_graph *g, starpu_data_handle_t h)
{
    if (!h) return;
    if (HYFI_HDEFERRED(h)) g->cc->dtab[g->cc->htab[HYFI_HDEFER_INDEX(h)].defer].redux = 1;
    else starpu_data_set_reduction_methods(h, &hyfi_cl_redux_add, &hyfi_cl_redux_zero);
}

/* Handle-table entry i registered now if it was deferred; its handle. */
static starpu_data_handle_t resolve(hyfi_graph *g, int i)
{
    hyfi_hentry *e = &g->cc->htab[i];
    if (HYFI_HDEFERRED(*e->slot)) {
        const hyfi_hdefer *d = &g->cc->dtab[e->defer];
        hyfi_reg_starpu(g, e->slot, e->tag, d->ptr, d->n, d->elem, e->owner, e->cat, d->bf16,
                        d->name, d->sfx, d->m, d->nm);
        if (d->redux)
            starpu_data_set_reduction_methods(*e->slot, &hyfi_cl_redux_add, &hyfi_cl_redux_zero);
    }
    return *e->slot;
}

int hyfi_handles_resolve(hyfi_graph *g)
{
    hyfi_compiled *cc = g->cc;
    cc->defer_on = 0;
    if (!cc->ndtab) return 0;
    /* what this rank owns: its share, whatever reads it later */
    for (int i = 0; i < cc->nhtab; i++)
        if (cc->htab[i].defer >= 0 && cc->htab[i].owner == g->ctx->rank) resolve(g, i);
    program *ps[3] = {&cc->train_prog, &cc->infer_prog, &cc->fwd_train_prog};
    /* what its tasks name */
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ps[k]->n; i++) {
            prog_task *t = &ps[k]->t[i];
            if (t->kind != PT_TASK) continue;
            struct starpu_data_descr *b = prog_bufs(t);
            for (int j = 0; j < t->nbuf; j++)
                if (HYFI_HDEFERRED(b[j].handle))
                    b[j].handle = resolve(g, HYFI_HDEFER_INDEX(b[j].handle));
        }
    /* releases, flushes and broadcasts of a handle this rank never registers go */
    for (int k = 0; k < 3; k++) {
        program *p = ps[k];
        int n = 0;
        for (int i = 0; i < p->n; i++) {
            prog_task *t = &p->t[i];
            struct starpu_data_descr *b = prog_bufs(t);
            int gone = 0;
            for (int j = 0; j < t->nbuf; j++)
                if (HYFI_HDEFERRED(b[j].handle)) {
                    b[j].handle = *cc->htab[HYFI_HDEFER_INDEX(b[j].handle)].slot;
                    gone |= HYFI_HDEFERRED(b[j].handle);
                }
            if (gone) {
                free(t->xbuf);
                continue;
            }
            if (n != i) p->t[n] = *t;
            n++;
        }
        p->n = n;
    }
    /* the others: not registered here (a later read registers one), and their
     * tags free again */
    free(cc->tagset);
    cc->tagset = NULL;
    cc->tagcap = cc->ntags = 0;
    for (int i = 0; i < cc->nhtab; i++) {
        hyfi_hentry *e = &cc->htab[i];
        if (HYFI_HDEFERRED(*e->slot)) *e->slot = NULL;
        if (*e->slot && hyfi_tag_enter(cc, e->tag)) return -1;
    }
    hyfi_defer_free(cc);
    free(cc->howner); /* (program.c: made from placeholders) */
    cc->howner = NULL;
    return 0;
}
