/* The statistics of a merged trace, in phases: extent (ranks, workers, span),
 * steps (which program each task belongs to), compute times (per worker, op
 * kind, place; each step's span), transfers by category, overlap of
 * transfers with compute, and the critical path of the last step. */
#include "tooling.h"

#include <stdlib.h>
#include <string.h>

const char *const hyfi_tt_kind_names[NKIND] = {"conv2d", "batchnorm", "relu", "pool",
                                               "eltwise", "concat", "fc", "loss", "sgd",
                                               "tiles", "allreduce", "other"};

int hyfi_tt_kind_of(const trec *t)
{
    const char *m = t->model + (strncmp(t->model, "hyfi_", 5) ? 0 : 5);
    if (strstr(t->name, ".allreduce.") || !strcmp(m, "running_combine") || strstr(t->name, ".combine") ||
        strstr(t->name, ".copy.r") || strstr(t->name, ".save"))
        return K_ALLRED;
    if (!strncmp(m, "conv2d", 6)) return K_CONV;
    if (!strncmp(m, "batchnorm", 9)) return K_BN;
    if (!strncmp(m, "relu", 4)) return K_RELU;
    if (strstr(m, "pool") || !strncmp(m, "gap", 3)) return K_POOL;
    if (!strncmp(m, "add", 3) || !strcmp(m, "accumulate") || !strcmp(m, "fill") ||
        !strncmp(m, "redux", 5))
        return K_ELT;
    if (!strncmp(m, "concat", 6)) return K_CONCAT;
    if (!strncmp(m, "fc", 2)) return K_FC;
    if (!strncmp(m, "xent", 4)) return K_XENT;
    if (!strncmp(m, "sgd", 3)) return K_SGD;
    if (!strncmp(m, "tile", 4) || !strncmp(m, "bn_", 3)) return K_TILE;
    return K_OTHER;
}

/* ------------------------------------------------------------- places */

/* The stage of a task by the longest op name that prefixes its name. */
static int task_stage(const planinfo *pi, const char *name)
{
    size_t best = 0;
    int st = -1;
    for (int i = 0; i < pi->nops; i++) {
        const size_t n = strlen(pi->op[i]);
        if (n > best && !strncmp(name, pi->op[i], n) && name[n] == '.') best = n, st = pi->stage[i];
    }
    return st;
}

/* Replica of a task: ".mb<m>" (micro-batch) or ".r<k>" (per-replica tasks). */
static int task_replica(const planinfo *pi, const char *name)
{
    const char *p = strstr(name, ".mb");
    if (p && p[3] >= '0' && p[3] <= '9') return atoi(p + 3) / (pi->mbr > 0 ? pi->mbr : 1);
    for (p = name; (p = strstr(p, ".r")); p += 2)
        if (p[2] >= '0' && p[2] <= '9') return atoi(p + 2);
    return 0;
}

static int task_tile(const char *name)
{
    for (const char *p = name; (p = strstr(p, ".t")); p += 2)
        if (p[2] >= '0' && p[2] <= '9') return atoi(p + 2);
    return -1;
}

/* ---------------------------------------------------------- intervals */

typedef struct {
    double a, b;
} span;

static int span_cmp(const void *x, const void *y)
{
    const span *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* Sort and merge in place; returns the count left. */
static size_t span_union(span *s, size_t n)
{
    if (!n) return 0;
    qsort(s, n, sizeof *s, span_cmp);
    size_t k = 0;
    for (size_t i = 1; i < n; i++) {
        if (s[i].a <= s[k].b) {
            if (s[i].b > s[k].b) s[k].b = s[i].b;
        } else {
            s[++k] = s[i];
        }
    }
    return k + 1;
}

static double span_len(const span *s, size_t n)
{
    double t = 0;
    for (size_t i = 0; i < n; i++) t += s[i].b - s[i].a;
    return t;
}

/* |A ∩ B| of two merged, sorted lists. */
static double span_inter(const span *a, size_t na, const span *b, size_t nb)
{
    double t = 0;
    size_t i = 0, j = 0;
    while (i < na && j < nb) {
        const double lo = a[i].a > b[j].a ? a[i].a : b[j].a;
        const double hi = a[i].b < b[j].b ? a[i].b : b[j].b;
        if (hi > lo) t += hi - lo;
        if (a[i].b < b[j].b) i++;
        else j++;
    }
    return t;
}

/* ------------------------------------------------------------- phases */

static hyfi_status nomem(void)
{
    return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_summarize: out of memory");
}

/* Ranks, workers, hyfi tasks and their span. */
static void find_extent(const trace_data *d, trace_stats *s)
{
    s->R = d->pi.ranks, s->W = 1;
    s->t0 = 1e300, s->t1 = -1e300;
    for (size_t i = 0; i < d->n; i++) {
        const trec *t = &d->t[i];
        if (t->rank + 1 > s->R) s->R = t->rank + 1;
        if (!t->hyfi) continue;
        s->nh++;
        if (t->worker + 1 > s->W) s->W = t->worker + 1;
        if (t->start < s->t0) s->t0 = t->start;
        if (t->end > s->t1) s->t1 = t->end;
    }
    s->span_all = s->t1 - s->t0;
}

/* Steps of one rank's tasks ord[0..m), sorted here by submit time (markers
 * before the tasks submitted at the same time); returns the rank's count. */
static int rank_steps(trec *t, size_t *ord, size_t m, int marks)
{
    for (size_t a = 1; a < m; a++)
        for (size_t b = a; b > 0; b--) {
            const trec *p = &t[ord[b - 1]], *q = &t[ord[b]];
            if (p->submit < q->submit || (p->submit == q->submit && (!q->hyfi || p->hyfi == q->hyfi)))
                break;
            size_t x = ord[b];
            ord[b] = ord[b - 1], ord[b - 1] = x;
        }
    int s = -1;
    double maxend = -1e300;
    for (size_t a = 0; a < m; a++) {
        trec *x = &t[ord[a]];
        if (!x->hyfi) { /* a marker */
            x->step = ++s;
            continue;
        }
        if (!marks && (s < 0 || x->submit > maxend)) s++;
        if (s < 0) s = 0;
        x->step = s;
        if (x->end > maxend) maxend = x->end;
    }
    return s + 1;
}

/* Steps: hyfi_program_run submits a marker task "hyfi.program.<k>" first
 * (when tracing), so per rank a task belongs to the program of the last
 * marker submitted before it. Without markers: a new program where a task
 * was submitted after every earlier one had ended. */
static hyfi_status assign_steps(trace_data *d, trace_stats *s)
{
    trec *t = d->t;
    const size_t n = d->n;
    size_t *ord = malloc(n * sizeof *ord);
    if (!ord) return nomem();
    s->nsteps = 0;
    for (int r = 0; r < s->R; r++) {
        size_t m = 0;
        int marks = 0;
        for (size_t i = 0; i < n; i++) {
            const int mk = !strncmp(t[i].name, "hyfi.program.", 13);
            marks += mk && t[i].rank == r;
            if (t[i].rank == r && (t[i].hyfi || mk)) ord[m++] = i;
        }
        const int k = rank_steps(t, ord, m, marks);
        if (k > s->nsteps) s->nsteps = k;
    }
    free(ord);
    /* each step's number (its marker's) and kind */
    s->slabel = malloc((size_t)s->nsteps * sizeof *s->slabel);
    s->strain = calloc((size_t)s->nsteps, 1);
    if (!s->slabel || !s->strain) return nomem();
    for (int k = 0; k < s->nsteps; k++) s->slabel[k] = k + 1;
    for (size_t i = 0; i < n; i++) {
        const trec *x = &t[i];
        if (x->step < 0 || x->step >= s->nsteps) continue;
        if (!x->hyfi && !strncmp(x->name, "hyfi.program.", 13))
            s->slabel[x->step] = atoi(x->name + 13) + 1;
        else if (x->hyfi && (hyfi_tt_kind_of(x) == K_SGD || strstr(x->name, ".bwd")))
            s->strain[x->step] = 1;
    }
    s->ls = s->nsteps - 1;
    for (int k = 0; k < s->nsteps; k++) s->ntrain += s->strain[k];
    for (int k = s->nsteps - 1; k >= 0 && s->ntrain; k--)
        if (s->strain[k]) {
            s->ls = k;
            break;
        }
    return HYFI_OK;
}

/* The place of a task: (replica, stage, tile); nplaces: unknown. */
static int place_of(const planinfo *pi, int nplaces, const char *name)
{
    const int stg = task_stage(pi, name), rep = task_replica(pi, name);
    const int tile = task_tile(name);
    int q = nplaces; /* unknown */
    if (stg >= 0 && rep < pi->nrep)
        q = (rep * pi->stages + stg) * (pi->tiles > 0 ? pi->tiles : 1) + (tile > 0 ? tile : 0);
    return q < nplaces ? q : nplaces;
}

/* Busy time per worker, compute per kind and per place, and the steps'
 * spans (ranks' clocks are aligned by starpu_fxt_tool only to a few ms: a
 * step's length is the longest of the ranks' own spans). */
static hyfi_status compute_times(const trace_data *d, trace_stats *s)
{
    const int R = s->R, W = s->W, nsteps = s->nsteps;
    const planinfo *pi = &d->pi;
    s->ntiles = pi->tiles > 0 ? pi->tiles : 1;
    s->nplaces = pi->nrep * pi->stages * s->ntiles;
    s->sa = malloc((size_t)nsteps * sizeof *s->sa);
    s->sb = malloc((size_t)nsteps * sizeof *s->sb);
    s->slen = calloc((size_t)nsteps, sizeof *s->slen);
    s->busy = calloc((size_t)R * W, sizeof *s->busy);
    s->bykind = calloc((size_t)R * NKIND, sizeof *s->bykind);
    s->byplace = calloc((size_t)s->nplaces + 1, sizeof *s->byplace);
    s->placekind = calloc(((size_t)s->nplaces + 1) * NKIND, sizeof *s->placekind);
    /* per rank: first start and last end of each step */
    double *ra = malloc((size_t)nsteps * R * sizeof *ra), *rb = malloc((size_t)nsteps * R * sizeof *rb);
    if (!s->sa || !s->sb || !s->slen || !s->busy || !s->bykind || !s->byplace || !s->placekind ||
        !ra || !rb) {
        free(ra), free(rb);
        return nomem();
    }
    for (int k = 0; k < nsteps; k++) s->sa[k] = 1e300, s->sb[k] = -1e300;
    for (int k = 0; k < nsteps * R; k++) ra[k] = 1e300, rb[k] = -1e300;
    for (size_t i = 0; i < d->n; i++) {
        const trec *x = &d->t[i];
        if (!x->hyfi) continue;
        const double dt = x->end - x->start;
        const int kind = hyfi_tt_kind_of(x);
        s->busy[x->rank * W + x->worker] += dt;
        s->bykind[x->rank * NKIND + kind] += dt;
        if (x->step >= 0) {
            if (x->start < s->sa[x->step]) s->sa[x->step] = x->start;
            if (x->end > s->sb[x->step]) s->sb[x->step] = x->end;
            const int k = x->step * R + x->rank;
            if (x->start < ra[k]) ra[k] = x->start;
            if (x->end > rb[k]) rb[k] = x->end;
        }
        const int q = place_of(pi, s->nplaces, x->name);
        s->byplace[q] += dt;
        s->placekind[(size_t)q * NKIND + kind] += dt;
    }
    for (int k = 0; k < nsteps * R; k++)
        if (rb[k] > ra[k] && rb[k] - ra[k] > s->slen[k / R]) s->slen[k / R] = rb[k] - ra[k];
    s->step_len = s->sb[s->ls] - s->sa[s->ls];
    free(ra), free(rb);
    return HYFI_OK;
}

/* Count, bytes and time in flight per category. */
static void transfer_totals(const trace_data *d, trace_stats *s)
{
    for (size_t i = 0; i < d->nc; i++) {
        const crec *c = &d->c[i];
        s->ccount[c->cat]++;
        s->cbytes[c->cat] += c->size;
        s->ctime[c->cat] += c->recv > c->send ? c->recv - c->send : 0;
    }
}

/* Overlap per receiving rank: |transfers ∩ compute| / |transfers|. */
static hyfi_status overlap(const trace_data *d, trace_stats *s)
{
    const trec *t = d->t;
    s->ov = calloc((size_t)s->R * 2, sizeof *s->ov);
    span *bs = malloc((s->nh + d->nc + 1) * sizeof *bs), *cs = malloc((d->nc + 1) * sizeof *cs);
    if (!s->ov || !bs || !cs) {
        free(bs), free(cs);
        return nomem();
    }
    for (int r = 0; r < s->R; r++) {
        size_t nb = 0, nc = 0;
        for (size_t i = 0; i < d->n; i++)
            if (t[i].hyfi && t[i].rank == r) bs[nb++] = (span){t[i].start, t[i].end};
        for (size_t i = 0; i < d->nc; i++)
            if (d->c[i].dst == r && d->c[i].recv > d->c[i].send)
                cs[nc++] = (span){d->c[i].send, d->c[i].recv};
        nb = span_union(bs, nb);
        nc = span_union(cs, nc);
        s->ov[2 * r] = span_len(cs, nc);
        s->ov[2 * r + 1] = span_inter(cs, nc, bs, nb);
    }
    free(bs), free(cs);
    return HYFI_OK;
}

static trec *find_job(trec *sorted, size_t n, const char *job)
{
    trec key;
    snprintf(key.job, sizeof key.job, "%s", job);
    return bsearch(&key, sorted, n, sizeof key, hyfi_tt_job_cmp);
}

/* When a job's effect was ready: its end (timed tasks) or, for untimed
 * internal jobs, the latest readiness of what it depends on (memoised in
 * ready[]; depth-limited). */
static double job_ready(trec *t, size_t n, double *ready, trec *j, int depth)
{
    const size_t i = (size_t)(j - t);
    if (ready[i] > -2) return ready[i];
    double r = j->start >= 0 ? j->end : j->submit;
    if (j->start < 0 && j->deps && depth < 64) {
        char *d = strdup(j->deps), *save = NULL;
        for (char *tok = d ? strtok_r(d, " ", &save) : NULL; tok; tok = strtok_r(NULL, " ", &save)) {
            trec *p = find_job(t, n, tok);
            if (p) {
                const double q = job_ready(t, n, ready, p, depth + 1);
                if (q > r) r = q;
            }
        }
        free(d);
    }
    ready[i] = r;
    return r;
}

/* The predecessor of cur that was ready last (a dependency, or the sender of
 * a message cur received), and when (*bt); NULL: none. */
static trec *last_ready_pred(const trace_data *d, double *ready, const trec *cur, double *bt)
{
    trec *t = d->t, *best = NULL;
    const size_t n = d->n;
    *bt = -1e300;
    if (cur->deps) {
        char *dp = strdup(cur->deps), *save = NULL;
        for (char *tok = dp ? strtok_r(dp, " ", &save) : NULL; tok; tok = strtok_r(NULL, " ", &save)) {
            trec *p = find_job(t, n, tok);
            if (!p) continue;
            const double q = job_ready(t, n, ready, p, 0);
            if (q > *bt) *bt = q, best = p;
        }
        free(dp);
    }
    for (size_t i = 0; i < d->nc; i++)
        if (!strcmp(d->c[i].rjob, cur->job)) {
            trec *p = find_job(t, n, d->c[i].sjob);
            if (p && d->c[i].recv > *bt) *bt = d->c[i].recv, best = p;
        }
    return best;
}

/* Critical path of the last training step: from its last task back through
 * the predecessor that was ready last, while within the step. */
static hyfi_status critical_path(const trace_data *d, trace_stats *s)
{
    trec *t = d->t;
    const size_t n = d->n;
    const int ls = s->ls;
    double *ready = malloc((n + 1) * sizeof *ready);
    s->cpath = malloc((n + 1) * sizeof *s->cpath);
    if (!ready || !s->cpath) {
        free(ready);
        return nomem();
    }
    for (size_t i = 0; i < n; i++) ready[i] = -3;
    trec *cur = NULL;
    for (size_t i = 0; i < n; i++)
        if (t[i].hyfi && t[i].step == ls && (!cur || t[i].end > cur->end)) cur = &t[i];
    while (cur && s->npath < n) {
        if (cur->hyfi) {
            s->cpath[s->npath++] = cur;
            s->path_compute += cur->end - cur->start;
        }
        double bt;
        trec *best = last_ready_pred(d, ready, cur, &bt);
        if (!best || bt < s->sa[ls] - 1e-9 || best == cur) break;
        cur = best;
    }
    free(ready);
    return HYFI_OK;
}

/* A trace without hyfi tasks: tasks.rec cut short where it was written (a
 * full file system, the file size limit), or not a trace of a hyfi run. */
static hyfi_status no_hyfi_task(const char *dir, const trace_data *d)
{
    char path[4200], cause[256];
    snprintf(path, sizeof path, "%s/tasks.rec", dir);
    const int e = hyfi_tt_write_cause(path);
    if (e) {
        hyfi_tt_cause(path, e, cause, sizeof cause);
        return hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: %s has no hyfi task: writing it was "
                                      "cut short: %s, then merge again (remove %s/paje.trace, then "
                                      "hyfi-trace %s)", path, cause, dir, dir);
    }
    return hyfi_fail(HYFI_ERR_DATA, "hyfi_trace_summarize: %s has no hyfi task (%zu tasks): not a "
                                    "trace of a hyfi run, or cut short while the run or the merge "
                                    "wrote it (a full disk, a file size limit); record the run again",
                     path, d->n);
}

hyfi_status hyfi_tt_stats(const char *dir, trace_data *d, trace_stats *s)
{
    memset(s, 0, sizeof *s);
    find_extent(d, s);
    if (!s->nh) return no_hyfi_task(dir, d);
    hyfi_status st = assign_steps(d, s);
    if (st == HYFI_OK) st = compute_times(d, s);
    if (st == HYFI_OK) transfer_totals(d, s);
    if (st == HYFI_OK) st = overlap(d, s);
    if (st == HYFI_OK) st = critical_path(d, s);
    return st;
}

void hyfi_tt_stats_free(trace_stats *s)
{
    free(s->sa), free(s->sb), free(s->slen), free(s->busy), free(s->bykind);
    free(s->byplace), free(s->placekind), free(s->ov), free(s->cpath);
    free(s->slabel), free(s->strain);
    memset(s, 0, sizeof *s);
}
