/* Automatic plans (hyfi_plan_search, include/hyfi_autoplan.h): every plan of
 * a graph on a machine, within the caller's constraints, predicted by
 * plan_model.c and checked with the engine's own plan and memory estimate
 * (plan.c's hyfi_plan_estimate: the same function a compile runs).
 *
 * The search, by enumeration with pruning:
 *   1. structures: data-parallel groups D (dividing the ranks, or divided by
 *      them) x GEMS copies (none, MAST) x tiles P and slicing (2 to 64; square
 *      grids for 4, 16, 64) x tiled stages K (1 to max_spatial_stages) x
 *      stages S, whose places fit the machine: at least one per rank; on GPUs
 *      at most one per GPU and copy, and more than half of the GPUs used (each
 *      unless a stage or tile count is fixed); on CPUs at most places_per_rank
 *      per rank. The balance: hyfi_balance_by_cost over the layers' predicted
 *      times, a tiled stage's layers at 1/P of theirs (twice re-balanced);
 *      for tiles, where that one is over the memory without recompute, also a
 *      balance for memory: the tiled stages hold every layer that can be tiled
 *      but one per untiled stage (balance_tiled).
 *      Each structure is built once (one micro-batch) for its places on the
 *      ranks and its tiles' geometry; one the engine refuses (tiles too small,
 *      an untileable op in a tiled stage, too few places) is dropped;
 *   2. for each: micro-batches M (divisors of a replica's batch, up to 64) x
 *      schedule (GPipe, 1F1B; the model times them alike, 1F1B holds less) x
 *      recompute (none, stage, layer), predicted (hyfi_pmodel_step);
 *   3. in order of predicted time, each plan is built with the engine's
 *      estimate and kept if every GPU's places (or every rank's, on CPUs) fit
 *      the machine's memory; a recompute mode is kept only where the modes
 *      that recompute less do not fit (they are faster). The first `top` kept
 *      are the answer.
 * The graph is left as it came: its plan, loss and precision restored, the
 * estimate's plan freed. */
#include "plan_model.h"
#include "balance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *hyfi_plan_limit_name(hyfi_plan_limit l)
{
    static const char *const n[] = {"compute", "bubble", "imbalance", "communication",
                                    "all-reduce", "task overhead", "memory"};
    return (unsigned)l < sizeof n / sizeof *n ? n[l] : "?";
}

/* A predicted plan: its settings (balance: an offset into the search's pool). */
typedef struct {
    hyfi_plan_config cfg;
    int bal;
    int sid;                  /* its structure (step 1) */
    pm_step t;
} cand;

typedef struct {
    hyfi_graph *g;
    const hyfi_plan_search_config *sc;
    hyfi_pmodel pm;
    int B, nl, R;
    cand *c;
    long nc, capc;
    int *pool;
    long npool, cappool;
    double *cost, *cost2;
    int *counts;
    long invalid;
    double least;             /* the smallest estimate over the memory, and its plan */
    hyfi_plan_config least_cfg;
    int tmax;                 /* layers before the first one an op of which needs whole
                                 images (the most a tiled stage can start with) */
    int nsid;                 /* structures */
    double *scratch;          /* memory()'s: R x (2 + places per rank) */
    int *over;                /* per structure, schedule and recompute mode: the most
                                 micro-batches found over the memory (fewer hold more) */
} search;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fixed(const search *s, unsigned f) { return (s->sc->fix & f) != 0; }

/* g->plan_cfg := cfg and its plan estimated on the machine's ranks. */
static hyfi_status build(search *s, const hyfi_plan_config *cfg)
{
    s->g->plan_cfg = *cfg;
    return hyfi_plan_estimate(s->g, s->R);
}

/* Room for S more entries in the pool: 0, or -1 out of memory. */
static int pool_room(search *s, int S)
{
    if (s->npool + S <= s->cappool) return 0;
    long nc = s->cappool ? 2 * s->cappool : 4096;
    while (nc < s->npool + S) nc *= 2;
    int *p = realloc(s->pool, (size_t)nc * sizeof *p);
    if (!p) return -1;
    s->pool = p, s->cappool = nc;
    return 0;
}

/* Layers per stage: fixed, or balanced by predicted time (tiled stages'
 * layers at 1/P, with a tenth for their halos). Returns an offset into the
 * pool, -1 out of memory. */
static long balance(search *s, int S, int K, int P)
{
    if (pool_room(s, S)) return -1;
    int *out = s->pool + s->npool;
    if (fixed(s, HYFI_FIX_BALANCE) && s->sc->fixed.balance) {
        memcpy(out, s->sc->fixed.balance, (size_t)S * sizeof *out);
    } else {
        if (hyfi_balance_by_cost(s->cost, s->nl, S, out)) return -1;
        for (int pass = 0; pass < 2 && K > 0; pass++) {
            int tiled = 0;
            for (int k = 0; k < K; k++) tiled += out[k];
            for (int l = 0; l < s->nl; l++) s->cost2[l] = l < tiled ? s->cost[l] * 1.1 / P : s->cost[l];
            if (hyfi_balance_by_cost(s->cost2, s->nl, S, out)) return -1;
        }
    }
    const long at = s->npool;
    s->npool += S;
    return at;
}

/* The other balance of a tiled structure, for memory: its K tiled stages
 * take the longest prefix of layers that can be tiled (leaving one layer to
 * each untiled stage), each part balanced by cost. A tiled stage holds 1/P of
 * its layers' activations a place; the balance by time leaves the first
 * untiled stage the large activations of the layers that tiling made cheap.
 * Returns an offset into the pool, -2 where it is the balance at `bal`, -1
 * out of memory. */
static long balance_tiled(search *s, int S, int K, long bal)
{
    const int T = s->tmax < s->nl - (S - K) ? s->tmax : s->nl - (S - K);
    if (K < 1 || T < K || fixed(s, HYFI_FIX_BALANCE)) return -2;
    int tiled = 0;
    for (int k = 0; k < K; k++) tiled += s->pool[bal + k];
    if (tiled >= T) return -2;
    if (pool_room(s, S)) return -1;
    int *out = s->pool + s->npool;
    if (hyfi_balance_by_cost(s->cost, T, K, out) ||
        hyfi_balance_by_cost(s->cost + T, s->nl - T, S - K, out + K))
        return -2;
    const long at = s->npool;
    s->npool += S;
    return at;
}

static int push(search *s, const cand *c)
{
    if (s->nc == s->capc) {
        const long nc = s->capc ? 2 * s->capc : 1024;
        cand *p = realloc(s->c, (size_t)nc * sizeof *p);
        if (!p) return -1;
        s->c = p, s->capc = nc;
    }
    s->c[s->nc++] = *c;
    return 0;
}

/* Step 2 for one structure (built, in g->cc->pl). */
static int predict(search *s, const hyfi_plan_config *base, long bal)
{
    hyfi_pstruct ps;
    if (hyfi_pstruct_make(s->g, &s->pm, &ps)) return -1;
    const int Br = s->B / ps.nrep;
    for (int M = 1; M <= Br && M <= 64; M++) {
        const int fp = s->sc->fixed.parts > 1 ? s->sc->fixed.parts : 1;
        if (Br % M || (fixed(s, HYFI_FIX_PARTS) && M != fp)) continue;
        pm_step t[3];
        for (int rc = 0; rc < 3; rc++) hyfi_pmodel_step(&ps, &s->pm, M, rc, &t[rc]);
        for (int sch = 0; sch < 2; sch++) {
            if (fixed(s, HYFI_FIX_SCHEDULE) ? (int)s->sc->fixed.schedule != sch : sch && M == 1)
                continue;
            for (int rc = 0; rc < 3; rc++) {
                if (fixed(s, HYFI_FIX_RECOMPUTE) && (int)s->sc->fixed.recompute != rc) continue;
                cand c = {.cfg = *base, .bal = (int)bal, .sid = s->nsid, .t = t[rc]};
                c.cfg.parts = M;
                c.cfg.schedule = (hyfi_schedule)sch;
                c.cfg.recompute = (hyfi_recompute)rc;
                if (push(s, &c)) {
                    hyfi_pstruct_free(&ps);
                    return -1;
                }
            }
        }
    }
    hyfi_pstruct_free(&ps);
    s->nsid++;
    return 0;
}

/* Whether a data-parallel count, GEMS copies, tiles and stages make places
 * that fit the machine (see the top). */
static int places_fit(const search *s, int D, int copies, int nplaces1, int free_shape)
{
    const int R = s->R, G = s->pm.places_per_rank;
    const int Rg = D <= R ? R / D : 1;
    if (nplaces1 < Rg) return 0;
    const long per_rank = ((long)nplaces1 * D + R - 1) / R; /* places of one copy on a rank */
    if (s->pm.gpu)
        return per_rank <= G && (!free_shape || 2L * nplaces1 * D > (long)R * G);
    return per_rank * copies <= G;
}

static int square(int p)
{
    int r = 1;
    while ((r + 1) * (r + 1) <= p) r++;
    return r * r == p;
}

static void memory(const search *s, int rc, double *place, double *rank);

/* Whether a place's (GPU's) and a rank's estimates fit the machine. */
static int fits_mem(const search *s, double place, double rank)
{
    return (!s->pm.gpu || place <= s->pm.place_mem) &&
           (s->pm.rank_mem <= 0 || rank <= s->pm.rank_mem);
}

/* Step 1: every structure, each predicted (step 2). */
static hyfi_status enumerate(search *s)
{
    const hyfi_plan_config *fx = &s->sc->fixed;
    const int R = s->R, Kmax = s->sc->max_spatial_stages > 0 ? s->sc->max_spatial_stages : 2;
    const long devices = (long)R * s->pm.places_per_rank;
    const int free_shape = !fixed(s, HYFI_FIX_STAGES) && !fixed(s, HYFI_FIX_SPATIAL_STAGES) &&
                           !fixed(s, HYFI_FIX_SPATIAL_PARTS);
    /* tiles: 1 required, 0 none, -1 either; the tile counts tried */
    const int fparts = fixed(s, HYFI_FIX_SPATIAL_PARTS), fstages = fixed(s, HYFI_FIX_SPATIAL_STAGES);
    const int tiles = fstages ? fx->spatial_stages > 0
                      : fparts ? (fx->spatial_parts > 1 ? 1 : 0) : -1;
    int plist[8] = {1}, np = 1;
    if (fparts && fx->spatial_parts > 1) plist[np++] = fx->spatial_parts;
    else if (!fparts)
        for (int p = 2; p <= 64; p *= 2) plist[np++] = p;
    for (int D = 1; D <= s->B && D <= devices; D++) {
        if (fixed(s, HYFI_FIX_DATA_PARALLEL) ? D != (fx->data_parallel > 1 ? fx->data_parallel : 1)
                                             : s->B % D || (R % D && D % R))
            continue;
        for (int gm = 0; gm < 2; gm++) {
            hyfi_gems gems = gm ? HYFI_GEMS_MAST : HYFI_GEMS_NONE;
            int reps = 0;
            if (fixed(s, HYFI_FIX_GEMS)) {
                if (gm) break;
                gems = fx->gems, reps = fx->replications;
            }
            const int copies = gems == HYFI_GEMS_NONE ? 1 : gems == HYFI_GEMS_MAST ? 2
                                                      : 2 * (reps > 1 ? reps : 1);
            if (s->B % (D * copies)) continue;
            hyfi_pmodel_layer_costs(s->g, &s->pm, (double)s->B / (D * copies), s->cost);
            for (int pi = 0; pi < np; pi++) {
                const int P = plist[pi];
                if (P == 1 ? tiles == 1 : tiles == 0) continue;
                const int k0 = P > 1 ? 1 : 0, k1 = P > 1 ? Kmax : 0;
                for (int K = k0; K <= k1; K++) {
                    if (P > 1 && fixed(s, HYFI_FIX_SPATIAL_STAGES) && K != fx->spatial_stages)
                        continue;
                    for (int S = K + 1; S <= s->nl; S++) {
                        if ((fixed(s, HYFI_FIX_STAGES) && S != (fx->stages > 1 ? fx->stages : 1)) ||
                            !places_fit(s, D, copies, K * P + S - K, free_shape))
                            continue;
                        const long bal0 = balance(s, S, K, P);
                        if (bal0 < 0) return hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
                        const long bal1 = P > 1 ? balance_tiled(s, S, K, bal0) : -2;
                        if (bal1 == -1) return hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
                        int built = 0, over = 0;
                        /* each balance x slicing; the one for memory only where the
                         * balance by time is over the memory without recompute */
                        const int nsl = P > 1 ? 3 : 1;
                        for (int v = 0; v < (bal1 >= 0 ? 2 : 1) * nsl; v++) {
                            const int sl = v % nsl;
                            const long bal = v >= nsl ? bal1 : bal0;
                            if (v >= nsl && built && !over) break;
                            if (P > 1 && ((fixed(s, HYFI_FIX_SLICE) && sl != (int)fx->slice) ||
                                          (sl == HYFI_SLICE_SQUARE && !square(P))))
                                continue;
                            hyfi_plan_config c = *fx;
                            c.stages = S, c.parts = 1, c.schedule = HYFI_SCHEDULE_GPIPE;
                            c.spatial_stages = K, c.spatial_parts = P;
                            c.slice = P > 1 ? (hyfi_slice_method)sl : HYFI_SLICE_SQUARE;
                            c.gems = gems, c.replications = reps, c.data_parallel = D;
                            c.recompute = HYFI_RECOMPUTE_NONE;
                            c.balance = s->pool + bal;
                            if (build(s, &c) != HYFI_OK) {
                                s->invalid++;
                                continue;
                            }
                            built = 1;
                            if (v < nsl) {
                                double place, rank;
                                memory(s, HYFI_RECOMPUTE_NONE, &place, &rank);
                                over |= !fits_mem(s, place, rank);
                            }
                            if (predict(s, &c, bal))
                                return hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
                            hyfi_plan_free(s->g);
                        }
                        if (!built) s->npool = bal0;
                    }
                }
            }
        }
    }
    return HYFI_OK;
}

/* Predicted time in steps of 1% (closer than the model can tell), then the
 * fewer places (the simpler plan: fewer tasks and handles than the model
 * counts), then the fewer micro-batches. */
static long time_key(double step) { return step > 0 ? lround(log(step) / log(1.01)) : 0; }

static int nplaces(const hyfi_plan_config *p)
{
    const int S = p->stages > 1 ? p->stages : 1, K = p->spatial_stages;
    const int copies = p->gems == HYFI_GEMS_NONE ? 1 : p->gems == HYFI_GEMS_MAST ? 2
                       : 2 * (p->replications > 1 ? p->replications : 1);
    return (K * (p->spatial_parts > 1 ? p->spatial_parts : 1) + S - K) * copies *
           (p->data_parallel > 1 ? p->data_parallel : 1);
}

static int by_step(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    const long kx = time_key(x->t.step), ky = time_key(y->t.step);
    if (kx != ky) return (kx > ky) - (kx < ky);
    const int px = nplaces(&x->cfg), py = nplaces(&y->cfg);
    if (px != py) return (px > py) - (px < py);
    if (x->cfg.parts != y->cfg.parts) return (x->cfg.parts > y->cfg.parts) - (x->cfg.parts < y->cfg.parts);
    return (x->t.step > y->t.step) - (x->t.step < y->t.step);
}

/* The largest place's (GPU's) and rank's estimates under recompute mode rc. */
static void memory(const search *s, int rc, double *place, double *rank)
{
    hyfi_plan *pl = s->g->cc->pl;
    double *rk = s->scratch, *dv = rk + (size_t)s->R * 2;
    size_t *own = pl->stage_act_bytes;
    pl->stage_act_bytes = pl->stage_act_mode + (size_t)rc * pl->nstages;
    const int G = s->pm.gpu ? s->pm.places_per_rank : 1;
    int *seen = (int *)(rk + s->R); /* (scratch after the ranks' sums) */
    memset(rk, 0, (size_t)s->R * sizeof *rk);
    memset(dv, 0, (size_t)s->R * G * sizeof *dv);
    memset(seen, 0, (size_t)s->R * sizeof *seen);
    *place = *rank = 0;
    for (int q = 0; q < pl->nplaces; q++) {
        const int r = pl->place_rank[q];
        const double b = hyfi_plan_place_bytes(pl, q);
        rk[r] += b;
        const int d = r * G + seen[r]++ % G;
        dv[d] += b;
        if (dv[d] > *place) *place = dv[d];
        if (rk[r] > *rank) *rank = rk[r];
    }
    pl->stage_act_bytes = own;
}

/* The limit and its sentence. */
static void explain(hyfi_plan_candidate *c, int nrep)
{
    const double st = c->step_s > 0 ? c->step_s : 1;
    const double v[] = {c->bubble_s, c->imbalance_s, c->comm_s, c->allreduce_s, c->overhead_s};
    static const hyfi_plan_limit l[] = {HYFI_LIMIT_BUBBLE, HYFI_LIMIT_IMBALANCE, HYFI_LIMIT_COMM,
                                        HYFI_LIMIT_ALLREDUCE, HYFI_LIMIT_OVERHEAD};
    int best = -1;
    for (int i = 0; i < 5; i++)
        if (v[i] > 0.1 * st && (best < 0 || v[i] > v[best])) best = i;
    const int pct = best < 0 ? (int)(100 * c->compute_s / st + 0.5) : (int)(100 * v[best] / st + 0.5);
    c->limit = best < 0 ? HYFI_LIMIT_COMPUTE : l[best];
    const int S = c->plan.stages > 1 ? c->plan.stages : 1, M = c->plan.parts > 1 ? c->plan.parts : 1;
    switch (c->limit) {
    case HYFI_LIMIT_BUBBLE:
        snprintf(c->why, sizeof c->why, "pipeline bubble %d%% (%d stages, %d micro-batch%s)",
                 pct, S, M, M == 1 ? "" : "es");
        break;
    case HYFI_LIMIT_IMBALANCE:
        snprintf(c->why, sizeof c->why, "imbalance: busiest device %d%% above the mean", pct);
        break;
    case HYFI_LIMIT_COMM:
        snprintf(c->why, sizeof c->why, "communication %d%% (halos, BN statistics, stages)",
                 pct);
        break;
    case HYFI_LIMIT_ALLREDUCE:
        snprintf(c->why, sizeof c->why, "all-reduce after the backward %d%% (%d replicas)", pct,
                 nrep);
        break;
    case HYFI_LIMIT_OVERHEAD:
        snprintf(c->why, sizeof c->why, "per-task costs %d%% of the step", pct);
        break;
    default:
        snprintf(c->why, sizeof c->why, "compute: the busiest device's kernels %d%%", pct);
    }
}

static void fill(const search *s, const cand *k, hyfi_plan_candidate *c, double place,
                 double rank, double lim)
{
    memset(c, 0, sizeof *c);
    c->plan = k->cfg;
    c->step_s = k->t.step;
    c->images_per_s = k->t.step > 0 ? s->B / k->t.step : 0;
    c->compute_s = k->t.compute, c->overhead_s = k->t.overhead, c->bubble_s = k->t.bubble;
    c->imbalance_s = k->t.imbalance, c->comm_s = k->t.comm, c->allreduce_s = k->t.allreduce;
    c->place_bytes = place, c->rank_bytes = rank, c->mem_limit_bytes = lim;
    const int copies = k->cfg.gems == HYFI_GEMS_NONE ? 1 : k->cfg.gems == HYFI_GEMS_MAST ? 2
                       : 2 * (k->cfg.replications > 1 ? k->cfg.replications : 1);
    explain(c, copies * (k->cfg.data_parallel > 1 ? k->cfg.data_parallel : 1));
}

/* Balance arrays of the result's candidates: one block each. */
static int own_balance(hyfi_plan_candidate *c)
{
    const int S = c->plan.stages > 1 ? c->plan.stages : 1;
    int *b = malloc((size_t)S * sizeof *b);
    if (!b) return -1;
    memcpy(b, c->plan.balance, (size_t)S * sizeof *b);
    c->plan.balance = b;
    return 0;
}

#define MAX_BUILDS 20000

/* c repeats one of list[0..n) but for its schedule or slicing, at the same
 * predicted time: not listed again. */
static int repeats(const cand *c, const hyfi_plan_candidate *list, int n)
{
    for (int i = 0; i < n; i++) {
        const hyfi_plan_config *a = &c->cfg, *b = &list[i].plan;
        if (a->stages == b->stages && a->spatial_stages == b->spatial_stages &&
            a->spatial_parts == b->spatial_parts && a->gems == b->gems &&
            a->replications == b->replications && a->data_parallel == b->data_parallel &&
            a->parts == b->parts && a->recompute == b->recompute &&
            time_key(c->t.step) == time_key(list[i].step_s))
            return 1;
    }
    return 0;
}

/* Step 3: validate in predicted order. */
static hyfi_status validate(search *s, hyfi_plan_search_result *res, int top)
{
    if (s->nc > 1) qsort(s->c, (size_t)s->nc, sizeof *s->c, by_step);
    res->c = calloc((size_t)top, sizeof *res->c);
    res->pruned = calloc((size_t)top, sizeof *res->pruned);
    if (!res->c || !res->pruned) return hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
    /* (at most MAX_BUILDS plans built: where none of them fits, the rest,
     * slower, hardly would) */
    for (long i = 0; i < s->nc && res->n < top && res->built < MAX_BUILDS; i++) {
        cand *k = &s->c[i];
        k->cfg.balance = s->pool + k->bal;
        const int sch = (int)k->cfg.schedule, M = k->cfg.parts, rc0 = (int)k->cfg.recompute;
        /* known over the memory: this structure with as many micro-batches or more, under
         * this schedule or 1F1B (which holds no more), and this recompute mode */
        int *ov = s->over + (size_t)k->sid * 6;
        if (ov[sch * 3 + rc0] >= M || ov[3 + rc0] >= M) {
            res->over_memory++;
            continue;
        }
        if (build(s, &k->cfg) != HYFI_OK) {
            res->invalid++;
            continue;
        }
        res->built++;
        const double lim = s->pm.gpu ? s->pm.place_mem : s->pm.rank_mem;
        double place[3], rank[3];
        int fits[3] = {0, 0, 0};
        for (int rc = 0; rc < 3; rc++) {
            memory(s, rc, &place[rc], &rank[rc]);
            fits[rc] = fits_mem(s, place[rc], rank[rc]);
        }
        hyfi_plan_free(s->g);
        for (int m = 0; m < 3; m++)
            if (!fits[m] && ov[sch * 3 + m] < M) ov[sch * 3 + m] = M;
        const int rc = rc0;
        int dominated = 0;
        for (int m = 0; m < rc && !fixed(s, HYFI_FIX_RECOMPUTE); m++) dominated |= fits[m];
        if (dominated) continue;
        hyfi_plan_candidate *c = fits[rc] ? &res->c[res->n] : NULL;
        if (fits[rc] && repeats(k, res->c, res->n)) continue;
        if (!fits[rc]) {
            res->over_memory++;
            const double need = s->pm.gpu ? place[rc] : rank[rc];
            if (s->least <= 0 || need < s->least) s->least = need, s->least_cfg = k->cfg;
            if (res->npruned >= top || repeats(k, res->pruned, res->npruned)) continue;
            c = &res->pruned[res->npruned];
        }
        fill(s, k, c, place[rc], rank[rc], lim);
        if (!fits[rc]) c->limit = HYFI_LIMIT_MEMORY;
        if (own_balance(c)) return hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
        if (fits[rc]) res->n++;
        else res->npruned++;
    }
    return HYFI_OK;
}

void hyfi_plan_search_free(hyfi_plan_search_result *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) free((int *)r->c[i].plan.balance);
    for (int i = 0; i < r->npruned; i++) free((int *)r->pruned[i].plan.balance);
    free(r->c);
    free(r->pruned);
    free(r);
}

hyfi_status hyfi_machine_from_ctx(const hyfi_ctx *ctx, hyfi_machine *m)
{
    if (!ctx || !m) return hyfi_fail(HYFI_ERR_ARG, "hyfi_machine_from_ctx: NULL argument");
    memset(m, 0, sizeof *m);
    m->ranks = ctx->nranks;
    const int per_node = ctx->local_ranks > 0 ? ctx->local_ranks : 1;
    m->ranks_per_node = per_node;
    if (ctx->ncuda > 0) {
        m->device = HYFI_MACHINE_H100;
        m->places_per_rank = ctx->ncuda;
        m->place_mem_bytes = ctx->cuda_mem ? ctx->cuda_mem[0] : 0;
    } else {
        m->device = HYFI_MACHINE_CPU;
        m->cores_per_rank = ctx->cores;
    }
    m->rank_mem_bytes = ctx->mem_limit_mb > 0 ? (double)ctx->mem_limit_mb * 1e6
                                              : hyfi_host_memory_bytes(ctx) / per_node;
    return HYFI_OK;
}

/* The graph's batch: the first batched input's. */
static int graph_batch(const hyfi_graph *g)
{
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i]->kind == T_INPUT && g->tensors[i]->batched) return g->tensors[i]->dims[0];
    return 1;
}

hyfi_status hyfi_plan_search(hyfi_graph *g, hyfi_tensor *loss, const hyfi_machine *m,
                             const hyfi_plan_search_config *cfg, hyfi_plan_search_result **out)
{
    if (!g || !out) return hyfi_fail(HYFI_ERR_ARG, "hyfi_plan_search: graph or out is NULL");
    *out = NULL;
    if (g->status != HYFI_OK)
        return hyfi_fail(g->status, "hyfi_plan_search: the graph has a builder error: %s",
                         g->error);
    if (g->cc)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_plan_search: the graph is compiled; "
                                                 "search before hyfi_graph_compile");
    if (!loss || loss->g != g || loss->producer < 0 || g->nodes[loss->producer].op != OP_XENT)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_plan_search: the loss must be the output "
                                               "of hyfi_softmax_cross_entropy in this graph");
    const hyfi_plan_search_config dflt = {0};
    if (!cfg) cfg = &dflt;
    if ((cfg->fix & HYFI_FIX_BALANCE) && (!(cfg->fix & HYFI_FIX_STAGES) || !cfg->fixed.balance))
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_plan_search: a fixed balance needs its "
                                               "stages fixed too (hyfi-train: --balance with "
                                               "--split-size)");
    search s = {.g = g, .sc = cfg, .B = graph_batch(g), .nl = hyfi_layer_count(g)};
    hyfi_status st = hyfi_pmodel_init(g, m, &s.pm);
    if (st != HYFI_OK) return st;
    s.R = s.pm.ranks;
    s.tmax = s.nl;
    for (int i = 0; i < g->nnodes; i++) {
        const int l = g->nlayers ? (g->nodes[i].layer < 0 ? 0 : g->nodes[i].layer) : i;
        if (!hyfi_op_tileable(&g->nodes[i]) && l < s.tmax) s.tmax = l;
    }
    const int top = cfg->top > 0 ? cfg->top : 10;
    hyfi_plan_search_result *res = calloc(1, sizeof *res);
    s.cost = malloc((size_t)s.nl * sizeof *s.cost);
    s.cost2 = malloc((size_t)s.nl * sizeof *s.cost2);
    const int G = s.pm.gpu ? s.pm.places_per_rank : 1;
    s.scratch = malloc((size_t)s.R * (2 + G) * sizeof *s.scratch);
    if (!res || !s.cost || !s.cost2 || !s.scratch) {
        free(res), free(s.cost), free(s.cost2), free(s.scratch);
        return hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
    }
    /* the graph as it came, restored at the end */
    const double t0 = now_s();
    const hyfi_plan_config keep_cfg = g->plan_cfg;
    hyfi_tensor *keep_loss = g->loss;
    const hyfi_precision keep_prec = g->train.precision;
    char keep_err[sizeof g->error];
    memcpy(keep_err, g->error, sizeof keep_err);
    g->loss = loss;
    g->train.precision = cfg->precision;
    g->cc = calloc(1, sizeof *g->cc);
    char last[512] = "";
    if (!g->cc) st = hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
    if (st == HYFI_OK) st = enumerate(&s);
    if (st == HYFI_OK) {
        snprintf(last, sizeof last, "%s", hyfi_last_error());
        s.over = calloc((size_t)(s.nsid ? s.nsid : 1) * 6, sizeof *s.over);
        st = s.over ? validate(&s, res, top) : hyfi_fail(HYFI_ERR_NOMEM, "out of memory searching plans");
    }
    res->enumerated = s.nc;
    res->invalid += s.invalid;
    if (g->cc) hyfi_plan_free(g);
    free(g->cc);
    g->cc = NULL;
    g->plan_cfg = keep_cfg;
    g->loss = keep_loss;
    g->train.precision = keep_prec;
    memcpy(g->error, keep_err, sizeof keep_err);
    free(s.c), free(s.pool), free(s.cost), free(s.cost2), free(s.over), free(s.scratch);
    res->seconds = now_s() - t0;
    if (st == HYFI_OK && res->n == 0) {
        if (res->npruned > 0) {
            const hyfi_plan_config *p = &s.least_cfg;
            const double lim = res->pruned[0].mem_limit_bytes;
            static const char *const rcn[] = {"none", "stage", "layer"};
            const hyfi_size_fmt f = hyfi_sizes_fmt((const double[]){s.least, lim}, 2, 0);
            st = hyfi_call_fail(g, HYFI_ERR_NOMEM,
                                "no plan of %ld fits the memory of %.*f %s per %s: the smallest "
                                "estimate built is %.*f %s (%d stages, %d tiles, %d micro-batches, "
                                "recompute %s); use more ranks or GPUs (--plan-ranks), a "
                                "smaller batch or image, bf16, or fewer fixed flags",
                                res->over_memory, HYFI_SIZE_ARGS(f, lim),
                                s.pm.gpu ? "GPU" : "rank", HYFI_SIZE_ARGS(f, s.least),
                                p->stages > 1 ? p->stages : 1,
                                p->spatial_stages ? p->spatial_parts : 1,
                                p->parts > 1 ? p->parts : 1, rcn[p->recompute % 3]);
            *out = res; /* the closest, for an explanation */
            return st;
        }
        st = hyfi_call_fail(g, HYFI_ERR_ARG,
                            "no plan of %d rank%s x %d place%s matches the fixed settings "
                            "(a plan needs fewer tiled stages than stages, at least one place "
                            "per rank and at most that many, a batch divisible by replicas x "
                            "micro-batches; %ld refused by the engine%s%s); fix fewer of them "
                            "or describe another machine", s.R, s.R == 1 ? "" : "s",
                            s.pm.places_per_rank, s.pm.places_per_rank == 1 ? "" : "s",
                            res->invalid, *last ? ", the last: " : "", last);
    }
    if (st != HYFI_OK) {
        hyfi_plan_search_free(res);
        return st;
    }
    *out = res;
    return HYFI_OK;
}
