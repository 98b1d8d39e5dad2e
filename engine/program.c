/* Programs: flat lists of tasks in sequentially consistent order (see
 * internal.h), and the helpers every lowering uses to append to them: task
 * names, placement and priority, releases, the summing mode of a gradient
 * over micro-batches. Calls nothing else in the engine. */
#include "emit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const hyfi_hcat_names[HC_COUNT] = {
    [HC_PIPELINE] = "pipeline", [HC_INPUT] = "input", [HC_LOSS] = "loss",
    [HC_HALO] = "halo", [HC_BNSTATS] = "bnstats", [HC_ALLREDUCE] = "allreduce",
};
_Static_assert(sizeof hyfi_hcat_names / sizeof *hyfi_hcat_names == HC_COUNT, "category names");

const hyfi_handle_info hyfi_handle_infos[HC_COUNT][2] = {
    [HC_PIPELINE] = {{"pipeline", HC_PIPELINE, 0}, {"pipeline", HC_PIPELINE, 1}},
    [HC_INPUT] = {{"input", HC_INPUT, 0}, {"input", HC_INPUT, 1}},
    [HC_LOSS] = {{"loss", HC_LOSS, 0}, {"loss", HC_LOSS, 1}},
    [HC_HALO] = {{"halo", HC_HALO, 0}, {"halo", HC_HALO, 1}},
    [HC_BNSTATS] = {{"bnstats", HC_BNSTATS, 0}, {"bnstats", HC_BNSTATS, 1}},
    [HC_ALLREDUCE] = {{"allreduce", HC_ALLREDUCE, 0}, {"allreduce", HC_ALLREDUCE, 1}},
};

/* Out of memory at task `name` of p: recorded for the compile's message. */
static int nomem(program *p, const char *name)
{
    if (!p->nomem) snprintf(p->nomem_at, sizeof p->nomem_at, "%.47s", name);
    p->nomem = 1;
    return -1;
}

/* The arguments of a program's tasks, each (codelet, bytes) stored once: the
 * tasks of a tiled stage repeat a few hundred argument blocks over a hundred
 * thousand tasks (AmoebaNet-D at 8,192² in 64 tiles: 891 distinct blocks of
 * 552 bytes for 89,547 tasks kept on a rank). The blocks live until the
 * program is freed; StarPU reads them in place (STARPU_CL_ARGS_NFREE), so
 * no task may change its block, with one exception: hyfi_set_lr writes the
 * same rate into every SGD update's (blocks are shared only between tasks of
 * the same codelet). */
typedef struct {
    const struct starpu_codelet *cl;
    hyfi_task_args a;
} pooled_args;

struct hyfi_args_pool {
    pooled_args **slot; /* open addressing on (codelet, bytes) */
    size_t mask, n;
    pooled_args **block; /* allocation blocks of ARGS_BLOCK entries */
    size_t nblock, used; /* entries used in the last block */
};
#define ARGS_BLOCK 256

static uint64_t args_hash(const struct starpu_codelet *cl, const hyfi_task_args *a)
{
    return hyfi_hash_bytes((uint64_t)(uintptr_t)cl * UINT64_C(0x9E3779B97F4A7C15), a, sizeof *a);
}

static pooled_args **pool_at(struct hyfi_args_pool *s, const struct starpu_codelet *cl,
                             const hyfi_task_args *a, uint64_t hash)
{
    size_t i = (size_t)hash & s->mask;
    while (s->slot[i] && (s->slot[i]->cl != cl || memcmp(&s->slot[i]->a, a, sizeof *a)))
        i = (i + 1) & s->mask;
    return &s->slot[i];
}

static int pool_grow(struct hyfi_args_pool *s)
{
    const size_t nc = s->slot ? 2 * (s->mask + 1) : 1024;
    pooled_args **t = calloc(nc, sizeof *t);
    if (!t) return -1;
    struct hyfi_args_pool g = {.slot = t, .mask = nc - 1};
    for (size_t i = 0; s->slot && i <= s->mask; i++)
        if (s->slot[i]) *pool_at(&g, s->slot[i]->cl, &s->slot[i]->a,
                                 args_hash(s->slot[i]->cl, &s->slot[i]->a)) = s->slot[i];
    free(s->slot);
    s->slot = t;
    s->mask = nc - 1;
    return 0;
}

hyfi_task_args *hyfi_args_intern(program *p, const struct starpu_codelet *cl,
                                 const hyfi_task_args *a)
{
    static const hyfi_task_args zero;
    if (!a) a = &zero;
    if (!p->pool && !(p->pool = calloc(1, sizeof *p->pool))) return NULL;
    struct hyfi_args_pool *s = p->pool;
    if (2 * (s->n + 1) > (s->slot ? s->mask + 1 : 0) && pool_grow(s)) return NULL;
    pooled_args **e = pool_at(s, cl, a, args_hash(cl, a));
    if (*e) return &(*e)->a;
    if (!s->nblock || s->used == ARGS_BLOCK) {
        pooled_args **b = realloc(s->block, (s->nblock + 1) * sizeof *b);
        if (!b) return NULL;
        s->block = b;
        if (!(b[s->nblock] = malloc(ARGS_BLOCK * sizeof **b))) return NULL;
        s->nblock++;
        s->used = 0;
    }
    pooled_args *n = &s->block[s->nblock - 1][s->used++];
    n->cl = cl;
    n->a = *a;
    *e = n;
    s->n++;
    return &n->a;
}

static void pool_free(struct hyfi_args_pool *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->nblock; i++) free(s->block[i]);
    free(s->block);
    free(s->slot);
    free(s);
}

int hyfi_prog_push(program *p, prog_kind kind, struct starpu_codelet *cl, const char *name,
                   const hyfi_task_args *args)
{
    if (p->overflow || p->nomem) return -1;
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 64;
        prog_task *t = realloc(p->t, (size_t)nc * sizeof *t);
        if (!t) return nomem(p, name);
        p->t = t;
        p->cap = nc;
    }
    hyfi_task_args *a = NULL; /* (only tasks carry arguments) */
    if (kind == PT_TASK && !(a = hyfi_args_intern(p, cl, args))) return nomem(p, name);
    prog_task *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    t->place = -1;
    t->kind = kind;
    t->cl = cl;
    t->worker = -1;
    t->args = a;
    t->far = (unsigned char)(kind == PT_TASK && p->far_now);
    snprintf(t->name, sizeof t->name, "%s", name);
    return 0;
}

/* Append a buffer to task t of p; past HYFI_MAX_TASK_BUFFERS p->overflow is
 * set (the compile fails, naming the limit), out of memory p->nomem. */
void hyfi_prog_task_buf(program *p, prog_task *t, hyfi_ref h, enum starpu_data_access_mode mode)
{
    if (t->nbuf == HYFI_MAX_TASK_BUFFERS) {
        p->overflow = 1;
        return;
    }
    /* full at HYFI_TASK_INLINE_BUFFERS and at every power of two above it */
    const int n = t->nbuf;
    if (n >= HYFI_TASK_INLINE_BUFFERS && !(n & (n - 1))) {
        const int nc = 2 * n < HYFI_MAX_TASK_BUFFERS ? 2 * n : HYFI_MAX_TASK_BUFFERS;
        prog_buf *x = realloc(t->xbuf, (size_t)nc * sizeof *x);
        if (!x) {
            nomem(p, t->name);
            return;
        }
        if (!t->xbuf) memcpy(x, t->ibuf, sizeof t->ibuf);
        t->xbuf = x;
    }
    prog_buf *b = prog_bufs(t);
    b[t->nbuf].ref = h;
    b[t->nbuf].mode = mode;
    t->nbuf++;
}

void hyfi_prog_buf(program *p, hyfi_ref h, enum starpu_data_access_mode mode)
{
    hyfi_prog_task_buf(p, &p->t[p->n - 1], h, mode);
}

static void program_free(program *p)
{
    for (int k = 0; k < p->n; k++) free(p->t[k].xbuf);
    free(p->t);
    pool_free(p->pool);
    free(p->skip);
    memset(p, 0, sizeof *p);
}

void hyfi_programs_free(hyfi_graph *g)
{
    program_free(&g->cc->train_prog);
    program_free(&g->cc->infer_prog);
    program_free(&g->cc->fwd_train_prog);
}

void hyfi_task_name(char *out, size_t len, const node *nd, const char *pass, const emit_ctx *e)
{
    if (e->M > 1) snprintf(out, len, "%s.%s.mb%d", nd->name, pass, e->m);
    else snprintf(out, len, "%s.%s", nd->name, pass);
}

/* The mode (and acc flag) of a parameter gradient output: written once per step
 * with one micro-batch; with several, zeroed by a fill task before the first
 * contribution and summed by a StarPU reduction (contributions accumulate into
 * per-worker copies that StarPU adds up when the update reads the gradient), or
 * with `deterministic` accumulated in emission order, which is micro-batch
 * order under both schedules. */
int hyfi_grad_sum_mode(emit_ctx *e, hyfi_ref h, unsigned char *written, size_t numel,
                       const char *name, enum starpu_data_access_mode *mode, int *acc)
{
    program *P = e->P;
    if (e->g->cc->pl->mbr == 1) {
        *mode = STARPU_W;
        *acc = 0;
    } else if (e->g->plan_cfg.deterministic) {
        /* micro-batch order: the first contribution writes, the next ones add */
        *acc = *written;
        *mode = *acc ? STARPU_RW : STARPU_W;
    } else {
        *acc = 1;
        if (!*written) {
            char nm[HYFI_NAME_MAX + 16];
            snprintf(nm, sizeof nm, "%.50s.zero_grad", name);
            hyfi_task_args a = {.u.elt = {.count = numel, .value = 0.0f}};
            TASK(&hyfi_cl_fill, nm, &a);
            W(h);
        }
        *mode = STARPU_REDUX;
    }
    *written = 1;
    return 0;
}

int hyfi_emit_release(program *P, hyfi_ref h, int owner)
{
    if (hyfi_prog_push(P, PT_RELEASE, NULL, "release", NULL)) return -1;
    P->t[P->n - 1].rank = owner;
    hyfi_prog_buf(P, h, STARPU_W);
    return 0;
}

int hyfi_emit_drop(emit_ctx *e, hyfi_ref h)
{
    return h ? hyfi_emit_release(e->P, h, hyfi_ref_rank(e->g, h)) : 0;
}

int hyfi_clamp_prio(int p)
{
    const int lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
    return p < lo ? lo : p > hi ? hi : p;
}

/* The last task pushed runs on `place` with priority prio. */
void hyfi_on_place(hyfi_graph *g, program *P, int place, int prio)
{
    prog_task *t = &P->t[P->n - 1];
    t->place = place;
    t->rank = g->cc->pl->place_rank[place];
    t->worker = g->cc->pl->place_worker[place];
    t->prio = prio;
}
