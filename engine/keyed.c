/* The registrar and the key map: every piece of data a compiled graph names
 * is found by its key (keys.h: role, object, index). hyfi_reg enters it in
 * the graph's handle table and the key map (none twice) and registers it
 * with StarPU (and StarPU-MPI), at once or, for a scoped rank's tile-family
 * handles, deferred. The lowerings find it again by its key (hyfi_kref, TH,
 * TGH, ...) as a reference to its entry (hyfi_ref), which is what the
 * programs' tasks hold; its owner, size and category are the entry's, and its
 * StarPU handle too once registered. The graph's structs hold no handles.
 *
 * Deferred registration: a scoped rank registers the handles of tiles, halo
 * strips, assembled buffers, per-tile partial sums and fused regions only
 * where its own tasks name them, or where it owns them.
 *
 * A rank of a tiled stage builds the whole stage's tasks (every tile's), and
 * only at the end of the compile does it know which of them it keeps
 * (share.c, mark_skips: those that run on it, or touch data it owns or that
 * its own tasks touch). Registering every tile's handles with StarPU on every
 * rank cost about 7 KB per handle (StarPU built with 16 memory nodes; 3 KB
 * with the 8 of scripts/setup.sh) whether the rank ever used them or not
 * (124,109 handles on each of 4 ranks for AmoebaNet-D at 8,192² in 64
 * tiles). So hyfi_reg, while compiling such a rank, enters these pieces in
 * the handle table with everything their registration needs (the key's tag,
 * the owner, the size, the name) but no StarPU handle. What the compile asks
 * of a piece of data before the programs are final (its owner, its bytes,
 * its category: the traffic prediction, the memory check, the skip marks) is
 * the table's, registered or not. hyfi_handles_resolve then registers, as the
 * owner (home node) or as a reader (-1), the handles named by the tasks the
 * rank kept and the ones it owns, with the tags they would have had, and
 * forgets the others: their entries keep no handle, as for a key the rank
 * does not register (hyfi_key_wanted), and a later read of one
 * (hyfi_tensor_read of another rank's tile) registers it then into its entry
 * (hyfi_handle_need). No StarPU call is needed to decide any of it. */
#include "emit.h"

#include <starpu_mpi.h>
#include <stdlib.h>
#include <string.h>

static int key_deferred(int role)
{
    switch (role) {
    case HK_TILE: case HK_TILE_GRAD: case HK_TBUF: case HK_TDBUF: case HK_STRIP:
    case HK_DSTRIP: case HK_WPART: case HK_BPART: case HK_BN_PART: case HK_BN_BWPART:
    case HK_BN_TOT: case HK_F_VAL: case HK_F_GRAD: case HK_F_PBUF: case HK_F_DPBUF:
    case HK_F_XO: case HK_F_DYO: case HK_F_DXO: case HK_LCOPY: case HK_BN_PACK:
    case HK_BN_BWPACK:
        return 1;
    default:
        return 0;
    }
}

static int defer_add(hyfi_compiled *cc, float *ptr, size_t n, size_t elem, int bf16,
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

/* ------------------------------------------------------------ the key map */

int hyfi_kent(const hyfi_compiled *cc, hyfi_role role, uint64_t obj, uint64_t idx)
{
    const hyfi_kcell *c = hyfi_kmap_find(&cc->kmap, role, obj, idx);
    return c ? c->ent : -1;
}

unsigned char hyfi_kflag(const hyfi_compiled *cc, hyfi_role role, uint64_t obj, uint64_t idx)
{
    const hyfi_kcell *c = hyfi_kmap_find(&cc->kmap, role, obj, idx);
    return c ? c->flag : 0;
}

unsigned char *hyfi_kflag_at(hyfi_compiled *cc, hyfi_role role, uint64_t obj, uint64_t idx)
{
    hyfi_kcell *c = hyfi_kmap_cell(&cc->kmap, role, obj, idx);
    if (!c) { /* the compile fails (htab_oom) */
        cc->htab_oom = 1;
        return &cc->kspare;
    }
    return &c->flag;
}

/* Who registers replica k's pieces of a role: the ranks where k is mine
 * (its tasks run there: the default); where k is wanted (also a collective's
 * partner: running statistics, their saved copies, the buckets and ring
 * chunks); where k is mine or k is replica 0 (a parameter's value, gradient,
 * momentum and norms: only the replica's own tasks and the reads of replica
 * 0 touch them). A function of the key and the plan. */
enum { SCOPE_MINE, SCOPE_WANT, SCOPE_MINE0 };

static int key_scope(const hyfi_graph *g, hyfi_key key)
{
    switch (key.role) {
    case HK_VALUE:
    case HK_GRAD:
        if (key.obj >= (uint32_t)g->ntensors) return SCOPE_MINE;
        switch (g->tensors[key.obj]->kind) {
        case T_PARAM: return SCOPE_MINE0;
        case T_STATE: return SCOPE_WANT;
        default: return SCOPE_MINE;
        }
    case HK_MOMENTUM:
    case HK_NORMS: return SCOPE_MINE0;
    case HK_RSAVE:
    case HK_SVAL:
    case HK_SSAVE:
    case HK_BUCKET:
    case HK_ARC: return SCOPE_WANT;
    default: return SCOPE_MINE;
    }
}

int hyfi_key_wanted(const hyfi_graph *g, hyfi_key key)
{
    const hyfi_compiled *cc = g->cc;
    if (key.rep < 0 || !cc->rep_mine) return 1;
    switch (key_scope(g, key)) {
    case SCOPE_MINE: return cc->rep_mine[key.rep];
    case SCOPE_MINE0: return cc->rep_mine[key.rep] || key.rep == 0;
    default: return cc->rep_want[key.rep];
    }
}

/* The StarPU side of a registration: the handle in *h, with its home in host
 * memory (ptr) on the owning rank, lazily allocated elsewhere (and everywhere
 * when ptr is NULL); its category and bf16 flag as user data; its name; known
 * to StarPU-MPI with its owner and tag in MPI runs. */
static void reg_starpu(hyfi_graph *g, starpu_data_handle_t *h, int64_t tag, float *ptr,
                       size_t n, size_t elem, int owner, hyfi_hcat cat, int bf16,
                       const char *name, const char *suffix, int m, int nm)
{
    if (ptr && owner == g->ctx->rank)
        starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)ptr, (uint32_t)n, elem);
    else
        starpu_vector_data_register(h, -1, 0, (uint32_t)n, elem);
    g->cc->nreg++;
    starpu_data_set_user_data(*h, (void *)&hyfi_handle_infos[cat][bf16]);
    if (bf16) hyfi_ops_bf16_used();
    char buf[HYFI_NAME_MAX + 32];
    if (nm > 1) snprintf(buf, sizeof buf, "%s%s[%d]", name, suffix, m);
    else snprintf(buf, sizeof buf, "%s%s", name, suffix);
    starpu_data_set_name(*h, buf);
    if (g->ctx->mpi) starpu_mpi_data_register(*h, tag, owner);
    if (g->ctx->trace_dir) hyfi_trace_note_handle(g, tag, owner, cat, buf);
}

/* Register one vector handle (reg_starpu), or, on a scoped rank's compile,
 * defer it, and enter it in the graph's handle table (its owner, size,
 * category, lifetime and tag) under its key. A key whose entry was dropped
 * (not registered here: hyfi_handles_resolve) is registered into that entry. */
hyfi_ref hyfi_reg(hyfi_graph *g, hyfi_key key, float *ptr, size_t n, size_t elem, int owner,
                  int flags, int rstage, const char *name, const char *suffix, int m, int nm)
{
    hyfi_compiled *cc = g->cc;
    const hyfi_hcat cat = (hyfi_hcat)(flags & ~(HYFI_HCAT_BF16 | HYFI_HCAT_BF16S));
    const int bf16 = (flags & HYFI_HCAT_BF16) && elem == sizeof(float);
    if (bf16 && (flags & HYFI_HCAT_BF16S) && !ptr) elem = sizeof(uint16_t);
    if (!hyfi_key_wanted(g, key)) return 0; /* scoped compile: not on this rank */
    /* the tag, a function of the key alone; no key twice in a graph */
    const int64_t tag = hyfi_key_tag(g->serial, (int)cat, key);
    hyfi_kcell *c = tag < 0 ? NULL : hyfi_kmap_cell(&cc->kmap, key.role, key.obj, key.idx);
    if (tag < 0 || (c && c->ent >= 0 && (cc->htab[c->ent].h || cc->htab[c->ent].defer >= 0))) {
        if (!cc->key_err) cc->key_err = tag < 0 ? -1 : tag;
        cc->htab_oom = 1;
        return 0;
    }
    if (!c) {
        cc->htab_oom = 1;
        return 0;
    }
    int ei = c->ent;
    if (ei < 0) {
        if (cc->nhtab == cc->caphtab) {
            const int nc = cc->caphtab ? 2 * cc->caphtab : 1024;
            hyfi_hentry *t = realloc(cc->htab, (size_t)nc * sizeof *t);
            if (!t) { /* hyfi_graph_compile fails with HYFI_ERR_NOMEM */
                cc->htab_oom = 1;
                return 0;
            }
            cc->htab = t;
            cc->caphtab = nc;
        }
        ei = c->ent = cc->nhtab++;
    }
    hyfi_hentry *e = &cc->htab[ei];
    *e = (hyfi_hentry){.bytes = n * elem,
                       .owner = owner,
                       .cat = cat,
                       .rstage = rstage,
                       .rmb = m,
                       .tag = tag,
                       .defer = -1};
    if (cc->defer_on && key_deferred(key.role)) {
        const int d = defer_add(cc, ptr, n, elem, bf16, name, suffix, m, nm);
        if (d < 0) {
            cc->htab_oom = 1;
            return 0;
        }
        e->defer = d;
        return (hyfi_ref)ei + 1;
    }
    reg_starpu(g, &e->h, tag, ptr, n, elem, owner, cat, bf16, name, suffix, m, nm);
    return (hyfi_ref)ei + 1;
}

void hyfi_defer_free(hyfi_compiled *cc)
{
    free(cc->dtab);
    cc->dtab = NULL;
    cc->ndtab = cc->capdtab = 0;
}

void hyfi_handle_set_redux(hyfi_graph *g, hyfi_ref r)
{
    if (!r) return;
    hyfi_hentry *e = &g->cc->htab[r - 1];
    if (e->h) starpu_data_set_reduction_methods(e->h, &hyfi_cl_redux_add, &hyfi_cl_redux_zero);
    else if (e->defer >= 0) g->cc->dtab[e->defer].redux = 1;
}

/* Handle-table entry i registered now if it was deferred. */
static void resolve(hyfi_graph *g, int i)
{
    hyfi_hentry *e = &g->cc->htab[i];
    if (e->h || e->defer < 0) return;
    const hyfi_hdefer *d = &g->cc->dtab[e->defer];
    reg_starpu(g, &e->h, e->tag, d->ptr, d->n, d->elem, e->owner, e->cat, d->bf16, d->name, d->sfx,
               d->m, d->nm);
    if (d->redux) hyfi_handle_set_redux(g, (hyfi_ref)i + 1);
}

int hyfi_handles_resolve(hyfi_graph *g)
{
    hyfi_compiled *cc = g->cc;
    cc->defer_on = 0;
    if (!cc->ndtab) return 0;
    /* what this rank owns: its share, whatever reads it later */
    for (int i = 0; i < cc->nhtab; i++)
        if (cc->htab[i].owner == g->ctx->rank) resolve(g, i);
    program *ps[3] = {&cc->train_prog, &cc->infer_prog, &cc->fwd_train_prog};
    /* what its tasks name */
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ps[k]->n; i++) {
            prog_task *t = &ps[k]->t[i];
            if (t->kind != PT_TASK) continue;
            const prog_buf *b = prog_cbufs(t);
            for (int j = 0; j < t->nbuf; j++)
                if (b[j].ref) resolve(g, (int)b[j].ref - 1);
        }
    /* releases, flushes and broadcasts of a handle this rank never registers go */
    for (int k = 0; k < 3; k++) {
        program *p = ps[k];
        int n = 0;
        for (int i = 0; i < p->n; i++) {
            prog_task *t = &p->t[i];
            const prog_buf *b = prog_cbufs(t);
            int gone = 0;
            for (int j = 0; j < t->nbuf; j++) gone |= hyfi_ref_deferred(g, b[j].ref);
            if (gone) {
                free(t->xbuf);
                continue;
            }
            if (n != i) p->t[n] = *t;
            n++;
        }
        p->n = n;
        prog_task *shrunk = realloc(p->t, (size_t)(n ? n : 1) * sizeof *p->t);
        if (shrunk) p->t = shrunk, p->cap = n ? n : 1;
    }
    /* the others: not registered here (a later read registers one into its
     * entry: hyfi_handle_need) */
    for (int i = 0; i < cc->nhtab; i++) cc->htab[i].defer = -1;
    hyfi_defer_free(cc);
    return 0;
}

/* Whether h has memory on some node: whether a task or a copy ever touched it
 * (its own host memory, when registered with it, counts). */
static int touched(starpu_data_handle_t h)
{
    const unsigned nn = starpu_memory_nodes_get_count();
    for (unsigned n = 0; n < nn; n++)
        if (starpu_data_test_if_allocated_on_node(h, n)) return 1;
    return 0;
}

/* The handles that p's tasks on this rank read: those another rank owns, and
 * the rank's own that nothing here ever touched (another rank's task writes
 * them), each once. */
void hyfi_fake_fill(hyfi_graph *g, const program *p)
{
    hyfi_compiled *cc = g->cc;
    const int me = g->ctx->rank;
    if (!g->ctx->fake_ranks) return;
    unsigned char *seen = calloc((size_t)cc->nhtab + 1, 1);
    if (!seen) return;
    for (int i = 0; i < p->n; i++) {
        const prog_task *t = &p->t[i];
        if (t->kind != PT_TASK || t->rank != me || (p->skip && p->skip[i])) continue;
        const prog_buf *bufs = prog_cbufs(t);
        for (int b = 0; b < t->nbuf; b++) {
            const hyfi_ref r = (bufs[b].mode & STARPU_R) ? bufs[b].ref : 0;
            if (!r || seen[r - 1]) continue;
            seen[r - 1] = 1;
            starpu_data_handle_t h = cc->htab[r - 1].h;
            if (!h || (cc->htab[r - 1].owner == me && touched(h))) continue;
            if (starpu_data_acquire(h, STARPU_W)) continue;
            void *ptr = starpu_data_get_local_ptr(h);
            if (ptr) memset(ptr, 0, (size_t)starpu_vector_get_nx(h) * starpu_vector_get_elemsize(h));
            starpu_data_release(h);
        }
    }
    free(seen);
}
