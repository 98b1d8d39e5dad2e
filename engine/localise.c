/* Local copies of what every tile reads, and flushes after reading the
 * tiles' partial sums: so that a rank keeps only its own tiles' tasks.
 *
 * A scoped rank keeps a task of another rank when the task touches data the
 * rank owns or data its own tasks touch (share.c, mark_skips): StarPU-MPI must
 * see it to send what it owns, and to forget a copy it received once the
 * data changes. In a tiled stage that rule made the rank that owns the
 * stage's weights keep every tile's tasks (each reads the weights, a
 * micro-batch's batch-norm statistics and totals), and the rank that sums
 * the tiles' partial sums keep every task that writes one; each such task
 * names its tile's data, which the rank then registered (keyed.c): 72% of
 * the handles on the first rank of AmoebaNet-D at 8,192² in 64 tiles on 4
 * ranks. This pass over a scoped rank's programs, before anything reads them
 * (memory check, traffic walk, skip marks), changes two things:
 *   - a tile's task on rank r that reads a parameter, a state or a saved
 *     tensor (batch-norm statistics), a tiled batch norm's totals or a fused
 *     group's zero totals owned by another rank reads a copy on r instead
 *     (key HK_LCOPY, owned by r), made by a copy task on r before the first
 *     such read after each write of the original (program order), after
 *     which r forgets the copy of the original it received (PT_FLUSH);
 *   - after a task reads a tile's partial sum (weight and bias gradient
 *     parts, batch-norm statistics parts) owned by another rank, the reader
 *     and the owner forget the copy (PT_FLUSH), as after the collectives
 *     (share.c); mark_skips then leaves these sums out of its rule, so the
 *     reader need not see their writers.
 * The values are the same (a copy is exact); the traffic is the same data,
 * once per rank and write as StarPU-MPI's cache sent it before. */
#include "emit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* (source entry, rank) -> its copy */
typedef struct {
    int src, rank;
    hyfi_ref copy;     /* the copy (0: none, the task reads the original) */
    unsigned version;  /* the source's version it holds (UINT32_MAX: none) */
} copy_rec;

typedef struct {
    hyfi_graph *g;
    unsigned *version;   /* per handle-table entry: writes so far in the program */
    int nversion;        /* the entries before the pass (not the copies) */
    unsigned char *seen; /* per entry, over the programs: 1 read elsewhere and flushed
                            after, 2 touched elsewhere otherwise */
    copy_rec *c;
    size_t cmask, nc;
} lstate;

enum { SRC_NO, SRC_COPY, SRC_FLUSH };

/* What a read of entry i by another rank's tile task calls for. */
static int source_kind(const hyfi_graph *g, int i)
{
    unsigned gs;
    int cat;
    hyfi_key k;
    if (hyfi_key_of_tag(g->cc->htab[i].tag, &gs, &cat, &k)) return SRC_NO;
    switch (k.role) {
    case HK_VALUE: {
        const hyfi_tensor *t = k.obj < (uint32_t)g->ntensors ? g->tensors[k.obj] : NULL;
        return t && (t->kind == T_PARAM || t->kind == T_STATE || t->kind == T_SAVED) &&
                       !t->is_int && hyfi_tensor_elem(g, t) == sizeof(float) &&
                       !hyfi_tensor_bf16(g, t)
                   ? SRC_COPY
                   : SRC_NO;
    }
    case HK_BN_TOT: case HK_F_ZTOT:
        return SRC_COPY;
    case HK_WPART: case HK_BPART: case HK_BN_PART: case HK_BN_BWPART: case HK_BN_PACK:
    case HK_BN_BWPACK:
        return SRC_FLUSH;
    default:
        return SRC_NO;
    }
}

/* The copy of entry src on rank r, registered at its first use; NULL when
 * its key does not fit a tag (the task then reads the original) or out of
 * memory (*oom). */
static copy_rec *copy_of(lstate *s, int src, int r, int *oom)
{
    hyfi_compiled *cc = s->g->cc;
    size_t i = ((size_t)src * 0x9E3779B97F4A7C15ull + (size_t)r * 0xC2B2AE3D27D4EB4Full) &
               s->cmask;
    while (s->c[i].src >= 0 && (s->c[i].src != src || s->c[i].rank != r))
        i = (i + 1) & s->cmask;
    if (s->c[i].src >= 0) return s->c[i].copy ? &s->c[i] : NULL;
    if (2 * (s->nc + 1) > s->cmask + 1) { /* grow, then look again */
        const size_t cap = 2 * (s->cmask + 1);
        copy_rec *n = malloc(cap * sizeof *n);
        if (!n) return *oom = 1, NULL;
        for (size_t j = 0; j < cap; j++) n[j].src = -1;
        for (size_t j = 0; j <= s->cmask; j++) {
            if (s->c[j].src < 0) continue;
            size_t k = ((size_t)s->c[j].src * 0x9E3779B97F4A7C15ull +
                        (size_t)s->c[j].rank * 0xC2B2AE3D27D4EB4Full) & (cap - 1);
            while (n[k].src >= 0) k = (k + 1) & (cap - 1);
            n[k] = s->c[j];
        }
        free(s->c);
        s->c = n;
        s->cmask = cap - 1;
        return copy_of(s, src, r, oom);
    }
    copy_rec *c = &s->c[i];
    *c = (copy_rec){.src = src, .rank = r, .copy = 0, .version = UINT32_MAX};
    s->nc++;
    /* the key: the original's, with the rank folded into the index */
    unsigned gs;
    int cat;
    hyfi_key k;
    hyfi_key_of_tag(cc->htab[src].tag, &gs, &cat, &k);
    const int kind = k.role == HK_VALUE ? 0 : k.role == HK_BN_TOT ? 1 : 2;
    const uint64_t idx = ((k.idx * (uint64_t)s->g->ctx->nranks + (uint64_t)r) << 2) | (uint64_t)kind;
    const hyfi_key key = HYFI_KEY(HK_LCOPY, k.obj, idx);
    if (hyfi_key_tag(s->g->serial, (int)cc->htab[src].cat, key) < 0) return NULL;
    const size_t bytes = cc->htab[src].bytes;
    const char *name = k.role == HK_VALUE ? s->g->tensors[k.obj]->name : s->g->nodes[k.obj].name;
    char sfx[32];
    if (k.role == HK_VALUE) snprintf(sfx, sizeof sfx, "[%u].on_rank%d", (unsigned)k.idx, r);
    else snprintf(sfx, sizeof sfx, ".tot[%u].on_rank%d", (unsigned)k.idx, r);
    c->copy = hyfi_reg(s->g, key, NULL, bytes / sizeof(float), sizeof(float), r,
                    (int)cc->htab[src].cat, HYFI_KEEP, name, sfx, 0, 1);
    if (cc->htab_oom || !c->copy) return *oom = 1, NULL;
    return c;
}

/* The entries localising adds to a program (copies, flushes), each with its
 * place: before (2 i) or after (2 i + 1) the program's entry i, in order. */
typedef struct {
    prog_task *t;
    int *at;
    int n, cap;
} tlist;

static prog_task *tpush(tlist *l, int at)
{
    if (l->n == l->cap) {
        const int nc = l->cap ? 2 * l->cap : 256;
        prog_task *t = realloc(l->t, (size_t)nc * sizeof *t);
        if (t) l->t = t;
        int *a = realloc(l->at, (size_t)nc * sizeof *a);
        if (a) l->at = a;
        if (!t || !a) return NULL;
        l->cap = nc;
    }
    l->at[l->n] = at;
    prog_task *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    return t;
}

static prog_task *flush_after(tlist *l, int at, hyfi_ref h, int rank)
{
    prog_task *f = tpush(l, at);
    if (!f) return NULL;
    f->kind = PT_FLUSH;
    f->place = f->worker = -1;
    f->rank = rank;
    snprintf(f->name, sizeof f->name, "flush");
    f->ibuf[0] = (prog_buf){.ref = h, .mode = STARPU_R};
    f->nbuf = 1;
    return f;
}

/* Localise p in place: its tasks' reads are redirected where they stand, and
 * the entries added are kept aside (a few percent of p) and merged in at the
 * end, from the back, so that a tiled stage's program exists once (not as a
 * list and its copy) at the compile's peak. */
static int localise(lstate *s, program *p)
{
    hyfi_compiled *cc = s->g->cc;
    memset(s->version, 0, (size_t)s->nversion * sizeof *s->version);
    for (size_t i = 0; i <= s->cmask; i++) s->c[i].version = UINT32_MAX;
    tlist add = {0};
    int oom = 0;
    for (int i = 0; i < p->n && !oom; i++) {
        prog_task *t = &p->t[i];
        prog_buf *b = prog_bufs(t);
        if (t->kind == PT_TASK) {
            int tile = 0;
            for (int j = 0; j < t->nbuf; j++) tile |= hyfi_ref_deferred(s->g, b[j].ref);
            for (int j = 0; tile && j < t->nbuf && !oom; j++) {
                if (b[j].mode != STARPU_R) continue;
                const int src = (int)b[j].ref - 1;
                if (src < 0 || src >= s->nversion || cc->htab[src].owner == t->rank ||
                    source_kind(s->g, src) != SRC_COPY)
                    continue;
                copy_rec *c = copy_of(s, src, t->rank, &oom);
                if (!c) continue;
                const hyfi_ref ch = c->copy;
                if (c->version != s->version[src]) {
                    prog_task *k = tpush(&add, 2 * i);
                    if (!k) {
                        oom = 1;
                        break;
                    }
                    k->kind = PT_TASK;
                    k->cl = &hyfi_cl_accumulate;
                    const hyfi_task_args ca = {.u.elt.count = cc->htab[src].bytes / sizeof(float)};
                    if (!(k->args = hyfi_args_intern(p, k->cl, &ca))) {
                        oom = 1;
                        break;
                    }
                    k->place = t->place, k->rank = t->rank, k->worker = t->worker;
                    k->prio = t->prio;
                    snprintf(k->name, sizeof k->name, "copy.rank%d", t->rank);
                    k->ibuf[0] = (prog_buf){.ref = ch, .mode = STARPU_W};
                    k->ibuf[1] = (prog_buf){.ref = b[j].ref, .mode = STARPU_R};
                    k->nbuf = 2;
                    c->version = s->version[src];
                    s->seen[src] |= 1;
                    if (!flush_after(&add, 2 * i, b[j].ref, t->rank)) oom = 1;
                }
                b[j].ref = ch;
            }
        }
        hyfi_ref fl[HYFI_MAX_TASK_BUFFERS];
        int nfl = 0;
        const int rank = t->rank;
        for (int j = 0; j < t->nbuf; j++) {
            const int src = (int)b[j].ref - 1;
            if (src < 0 || src >= s->nversion) continue;
            if (t->kind == PT_RELEASE ||
                (t->kind == PT_TASK && (b[j].mode & (STARPU_W | STARPU_REDUX))))
                s->version[src]++;
            if (t->kind != PT_TASK || cc->htab[src].owner == rank) continue;
            if (b[j].mode == STARPU_R && source_kind(s->g, src) == SRC_FLUSH) {
                s->seen[src] |= 1;
                fl[nfl++] = b[j].ref;
            } else {
                s->seen[src] |= 2;
            }
        }
        for (int j = 0; j < nfl && !oom; j++)
            if (!flush_after(&add, 2 * i + 1, fl[j], rank)) oom = 1;
    }
    const int n = p->n + add.n;
    prog_task *all = oom ? NULL : realloc(p->t, (size_t)(n ? n : 1) * sizeof *p->t);
    if (!all) {
        free(add.t);
        free(add.at);
        return -1;
    }
    /* merge from the back: entry i, with what goes after it and before it */
    int k = add.n - 1, j = n - 1;
    for (int i = p->n - 1; i >= 0; i--) {
        while (k >= 0 && add.at[k] == 2 * i + 1) all[j--] = add.t[k--];
        all[j--] = all[i];
        while (k >= 0 && add.at[k] == 2 * i) all[j--] = add.t[k--];
    }
    p->t = all;
    p->cap = n ? n : 1;
    p->n = n;
    free(add.t);
    free(add.at);
    return 0;
}

int hyfi_programs_localise(hyfi_graph *g)
{
    hyfi_compiled *cc = g->cc;
    if (!cc->scoped || !cc->defer_on) return 0;
    lstate s = {.g = g};
    s.nversion = cc->nhtab;
    s.version = calloc((size_t)cc->nhtab + 1, sizeof *s.version);
    s.seen = calloc((size_t)cc->nhtab + 1, 1);
    s.cmask = 255;
    s.c = malloc((s.cmask + 1) * sizeof *s.c);
    int rc = -1;
    if (s.version && s.seen && s.c) {
        for (size_t i = 0; i <= s.cmask; i++) s.c[i].src = -1;
        program *ps[3] = {&cc->train_prog, &cc->infer_prog, &cc->fwd_train_prog};
        rc = 0;
        for (int k = 0; k < 3 && !rc; k++) rc = localise(&s, ps[k]);
        /* read elsewhere only before a flush: mark_skips need not keep the
         * writers of these for their readers (share.c) */
        for (int i = 0; i < s.nversion; i++) cc->htab[i].flushread = s.seen[i] == 1;
    }
    free(s.version);
    free(s.seen);
    free(s.c);
    return rc;
}
