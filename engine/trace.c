/* Traces: StarPU's FxT recording (hyfi_ctx_config.trace_dir), merged with
 * starpu_fxt_tool, then summarised and drawn by hyfi.
 *
 * While tracing, compile notes every handle's StarPU-MPI tag, owner, name and
 * traffic category (hyfi_handles.tsv) and every op's stage and the plan's
 * shape (hyfi_ops.tsv, hyfi_plan.tsv), so that the summary can split the
 * transfers of comms.rec (which name tags) into halo / batch-norm statistics
 * / pipeline / all-reduce, and the tasks of tasks.rec (which name ops) into
 * places. The summary reads tasks.rec and comms.rec (GNU recutils records:
 * "Key: value" lines, records separated by blank lines; times in ms). */
#include "internal.h"

#include <errno.h>
#include <dirent.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

extern char **environ;

/* ------------------------------------------------------------- recording */

static const char *handle_category(hyfi_graph *g, const char *name)
{
    if (strstr(name, ".halo")) return "halo";
    if (strstr(name, ".stats.tile") || strstr(name, ".dstats")) return "bnstats";
    if (!strncmp(name, "bucket", 6) || strstr(name, ".chunk") || strstr(name, ".momentum") ||
        strstr(name, ".start"))
        return "allreduce";
    for (int i = 0; i < g->ntensors; i++) {
        const hyfi_tensor *t = g->tensors[i];
        const size_t n = strlen(t->name);
        if (strncmp(name, t->name, n) || (name[n] && name[n] != '.' && name[n] != '[')) continue;
        if (t->kind == T_PARAM || t->kind == T_STATE) return "allreduce";
        if (t->kind == T_INPUT || t->kind == T_LABELS) return "input";
        if (t == g->loss) return "loss";
    }
    return "pipeline";
}

void hyfi_trace_note_handle(hyfi_graph *g, starpu_data_handle_t h, int64_t tag, int owner,
                            const char *name)
{
    (void)h;
    hyfi_ctx *c = g->ctx;
    if (c->rank != 0) return;
    if (!c->trace_handles) {
        char path[4200];
        snprintf(path, sizeof path, "%s/hyfi_handles.tsv", c->trace_dir);
        c->trace_handles = fopen(path, "w");
        if (!c->trace_handles) return; /* the summary then names no categories */
        fputs("tag\towner\tcategory\tname\n", c->trace_handles);
    }
    fprintf(c->trace_handles, "%lld\t%d\t%s\t%s\n", (long long)tag, owner,
            handle_category(g, name), name);
}

void hyfi_trace_note_plan(hyfi_graph *g)
{
    hyfi_ctx *c = g->ctx;
    if (c->rank != 0) return;
    if (c->trace_handles) fflush(c->trace_handles);
    char path[4200];
    snprintf(path, sizeof path, "%s/hyfi_ops.tsv", c->trace_dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("op\tkind\tstage\n", f);
    for (int i = 0; i < g->nnodes; i++)
        fprintf(f, "%s\t%s\t%d\n", g->nodes[i].name, hyfi_op_names[g->nodes[i].op],
                g->nodes[i].stage);
    fclose(f);
    snprintf(path, sizeof path, "%s/hyfi_plan.tsv", c->trace_dir);
    if (!(f = fopen(path, "w"))) return;
    const hyfi_plan *pl = g->pl;
    fprintf(f, "ranks\t%d\nstages\t%d\nmicrobatches\t%d\nreplicas\t%d\nper_replica\t%d\n"
               "tiled_stages\t%d\ntiles\t%d\n",
            c->nranks, pl->nstages, pl->nmb, pl->nrep, pl->mbr, pl->K, pl->P);
    fclose(f);
}

/* ---------------------------------------------------------------- merge */

hyfi_status hyfi_trace_merge(const char *dir, int nranks)
{
    if (!dir || nranks < 1)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_trace_merge: no folder or %d ranks", nranks);
    char raw[4096];
    snprintf(raw, sizeof raw, "%s/raw", dir);
    char **files = calloc((size_t)nranks, sizeof *files);
    if (!files) return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_merge: out of memory");
    DIR *d = opendir(raw);
    if (!d) {
        free(files);
        return hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: %s: %s (was the run traced into %s?)",
                         raw, strerror(errno), dir);
    }
    /* prof_file_<user>_<rank> */
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "prof_file_", 10)) continue;
        const char *us = strrchr(e->d_name, '_');
        char *end;
        long r = strtol(us + 1, &end, 10);
        if (*end || r < 0 || r >= nranks || files[r]) continue;
        size_t n = strlen(raw) + strlen(e->d_name) + 2;
        if ((files[r] = malloc(n))) snprintf(files[r], n, "%s/%s", raw, e->d_name);
    }
    closedir(d);
    hyfi_status st = HYFI_OK;
    for (int r = 0; r < nranks && st == HYFI_OK; r++)
        if (!files[r])
            st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: no trace file of rank %d in %s (the "
                                        "run had %d ranks?)", r, raw, nranks);
    char tool[4200];
    snprintf(tool, sizeof tool, "%s/starpu_fxt_tool", HYFI_STARPU_BINDIR);
    if (access(tool, X_OK)) snprintf(tool, sizeof tool, "starpu_fxt_tool");
    char **argv = calloc((size_t)(2 * nranks + 4), sizeof *argv);
    if (st == HYFI_OK && !argv) st = hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_merge: out of memory");
    if (st == HYFI_OK) {
        int k = 0;
        argv[k++] = tool;
        for (int r = 0; r < nranks; r++) argv[k++] = "-i", argv[k++] = files[r];
        argv[k++] = "-d";
        argv[k++] = (char *)dir;
        argv[k] = NULL;
        char log[4200];
        snprintf(log, sizeof log, "%s/fxt_tool.log", dir);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        pid_t pid;
        int rc = posix_spawnp(&pid, tool, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        int ws = 0;
        if (rc)
            st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: cannot run %s (%s); put StarPU's bin "
                                        "folder in PATH", tool, strerror(rc));
        else if (waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws))
            st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: starpu_fxt_tool failed (see %s)", log);
        else {
            char p[4200];
            snprintf(p, sizeof p, "%s/paje.trace", dir);
            if (access(p, R_OK))
                st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: starpu_fxt_tool wrote no %s "
                                            "(see %s)", p, log);
        }
    }
    for (int r = 0; r < nranks; r++) free(files[r]);
    free(files);
    free(argv);
    return st;
}

/* ------------------------------------------------------------- reading */

typedef struct {
    char name[96], model[48], job[24];
    int rank, worker;
    double submit, start, end; /* ms; start < 0: not a timed task */
    char *deps;                /* "0_2 0_3" or NULL */
    int hyfi;                  /* a hyfi codelet */
    int step;
} trec;

typedef struct {
    int src, dst;
    long long tag;
    size_t size;
    double send, recv;
    char sjob[24], rjob[24];
    int cat;
} crec;

enum { CAT_HALO, CAT_BNSTATS, CAT_PIPELINE, CAT_ALLREDUCE, CAT_LOSS, CAT_INPUT, CAT_OTHER, NCAT };
static const char *const CAT_NAMES[NCAT] = {"halo", "bnstats", "pipeline", "allreduce",
                                            "loss", "input", "other"};

static int cat_of(const char *s)
{
    for (int c = 0; c < NCAT; c++)
        if (!strcmp(s, CAT_NAMES[c])) return c;
    return CAT_OTHER;
}

/* Kinds of compute, by codelet (and all-reduce by task name). */
enum { K_CONV, K_BN, K_RELU, K_POOL, K_ELT, K_CONCAT, K_FC, K_XENT, K_SGD, K_TILE, K_ALLRED,
       K_OTHER, NKIND };
static const char *const KIND_NAMES[NKIND] = {"conv2d", "batchnorm", "relu", "pool",
                                              "eltwise", "concat", "fc", "loss", "sgd",
                                              "tiles", "allreduce", "other"};
static const char *const KIND_COLOR[NKIND] = {"#4e79a7", "#f28e2b", "#b6992d", "#59a14f",
                                              "#8cd17d", "#86bcb6", "#e15759", "#ff9d9a",
                                              "#79706e", "#d37295", "#9467bd", "#bab0ac"};
static const char *const CAT_COLOR[NCAT] = {"#d62728", "#e377c2", "#1f77b4", "#9467bd",
                                            "#7f7f7f", "#2ca02c", "#bcbd22"};

static int kind_of(const trec *t)
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

/* Read a recutils file record by record: cb(fields, values, n, arg). */
typedef void (*rec_cb)(char **k, char **v, int n, void *arg);
static int read_rec(const char *path, rec_cb cb, void *arg)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    char *k[64], *v[64];
    int n = 0;
    for (;;) {
        ssize_t len = getline(&line, &cap, f);
        if (len <= 1) { /* blank line or EOF: end of record */
            if (n) cb(k, v, n, arg);
            for (int i = 0; i < n; i++) free(k[i]), free(v[i]);
            n = 0;
            if (len < 0) break;
            continue;
        }
        if (line[len - 1] == '\n') line[--len] = 0;
        char *c = strstr(line, ": ");
        if (!c || n == 64) continue;
        *c = 0;
        k[n] = strdup(line);
        v[n] = strdup(c + 2);
        n++;
    }
    free(line);
    fclose(f);
    return 0;
}

typedef struct {
    trec *t;
    size_t n, cap;
} tvec;
typedef struct {
    crec *c;
    size_t n, cap;
} cvec;

static void task_cb(char **k, char **v, int n, void *arg)
{
    tvec *tv = arg;
    trec t = {.rank = 0, .worker = -1, .start = -1, .end = -1, .step = -1};
    for (int i = 0; i < n; i++) {
        if (!strcmp(k[i], "Name")) snprintf(t.name, sizeof t.name, "%s", v[i]);
        else if (!strcmp(k[i], "Model")) snprintf(t.model, sizeof t.model, "%s", v[i]);
        else if (!strcmp(k[i], "JobId")) snprintf(t.job, sizeof t.job, "%s", v[i]);
        else if (!strcmp(k[i], "MPIRank")) t.rank = atoi(v[i]) < 0 ? 0 : atoi(v[i]); /* -1: no MPI */
        else if (!strcmp(k[i], "WorkerId")) t.worker = atoi(v[i]);
        else if (!strcmp(k[i], "SubmitTime")) t.submit = atof(v[i]);
        else if (!strcmp(k[i], "StartTime")) t.start = atof(v[i]);
        else if (!strcmp(k[i], "EndTime")) t.end = atof(v[i]);
        else if (!strcmp(k[i], "DependsOn")) t.deps = strdup(v[i]);
    }
    if (t.worker < -1) t.worker = -1;
    if (!t.job[0]) {
        free(t.deps);
        return;
    }
    t.hyfi = !strncmp(t.model, "hyfi_", 5) && t.start >= 0 && t.end >= t.start && t.worker >= 0;
    if (tv->n == tv->cap) {
        size_t nc = tv->cap ? 2 * tv->cap : 4096;
        trec *p = realloc(tv->t, nc * sizeof *p);
        if (!p) {
            free(t.deps);
            return;
        }
        tv->t = p, tv->cap = nc;
    }
    tv->t[tv->n++] = t;
}

static void comm_cb(char **k, char **v, int n, void *arg)
{
    cvec *cv = arg;
    crec c = {.cat = CAT_OTHER};
    int have = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(k[i], "Src")) c.src = atoi(v[i]), have |= 1;
        else if (!strcmp(k[i], "Dst")) c.dst = atoi(v[i]), have |= 2;
        else if (!strcmp(k[i], "Tag")) c.tag = atoll(v[i]);
        else if (!strcmp(k[i], "Size")) c.size = (size_t)atoll(v[i]);
        else if (!strcmp(k[i], "SendTime")) c.send = atof(v[i]);
        else if (!strcmp(k[i], "RecvTime")) c.recv = atof(v[i]);
        else if (!strcmp(k[i], "SendJobId")) snprintf(c.sjob, sizeof c.sjob, "%s", v[i]);
        else if (!strcmp(k[i], "RecvJobId")) snprintf(c.rjob, sizeof c.rjob, "%s", v[i]);
    }
    if (have != 3) return;
    if (cv->n == cv->cap) {
        size_t nc = cv->cap ? 2 * cv->cap : 1024;
        crec *p = realloc(cv->c, nc * sizeof *p);
        if (!p) return;
        cv->c = p, cv->cap = nc;
    }
    cv->c[cv->n++] = c;
}

/* hyfi_handles.tsv: tag -> category (tags are small consecutive integers). */
static int *read_categories(const char *dir, long long *ntags)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/hyfi_handles.tsv", dir);
    FILE *f = fopen(path, "r");
    *ntags = 0;
    if (!f) return NULL;
    int *cat = NULL;
    long long cap = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        long long tag;
        int owner;
        char c[32];
        if (sscanf(line, "%lld\t%d\t%31s", &tag, &owner, c) != 3 || tag < 0) continue;
        if (tag >= cap) {
            long long nc = cap ? cap : 1024;
            while (nc <= tag) nc *= 2;
            int *p = realloc(cat, (size_t)nc * sizeof *p);
            if (!p) break;
            for (long long i = cap; i < nc; i++) p[i] = CAT_OTHER;
            cat = p, cap = nc;
        }
        cat[tag] = cat_of(c);
        if (tag + 1 > *ntags) *ntags = tag + 1;
    }
    fclose(f);
    return cat;
}

/* hyfi_ops.tsv: op names -> stage; hyfi_plan.tsv: the plan's shape. */
typedef struct {
    char **op;
    int *stage;
    int nops;
    int nrep, mbr, stages, tiles, ranks;
} planinfo;

static void read_plan(const char *dir, planinfo *pi)
{
    memset(pi, 0, sizeof *pi);
    pi->nrep = pi->mbr = pi->stages = pi->tiles = pi->ranks = 1;
    char path[4200], line[512];
    snprintf(path, sizeof path, "%s/hyfi_plan.tsv", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            char k[64];
            int v;
            if (sscanf(line, "%63s %d", k, &v) != 2) continue;
            if (!strcmp(k, "replicas")) pi->nrep = v;
            else if (!strcmp(k, "per_replica")) pi->mbr = v;
            else if (!strcmp(k, "stages")) pi->stages = v;
            else if (!strcmp(k, "tiles")) pi->tiles = v;
            else if (!strcmp(k, "ranks")) pi->ranks = v;
        }
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/hyfi_ops.tsv", dir);
    if (!(f = fopen(path, "r"))) return;
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        char op[256], kind[64];
        int st;
        if (sscanf(line, "%255s %63s %d", op, kind, &st) != 3) continue;
        if (pi->nops == cap) {
            cap = cap ? 2 * cap : 256;
            char **o = realloc(pi->op, (size_t)cap * sizeof *o);
            int *s = realloc(pi->stage, (size_t)cap * sizeof *s);
            if (o) pi->op = o;
            if (s) pi->stage = s;
            if (!o || !s) break;
        }
        pi->op[pi->nops] = strdup(op);
        pi->stage[pi->nops++] = st;
    }
    fclose(f);
}

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

/* ------------------------------------------------------------- summary */

static int job_cmp(const void *x, const void *y)
{
    return strcmp(((const trec *)x)->job, ((const trec *)y)->job);
}

static trec *find_job(trec *sorted, size_t n, const char *job)
{
    trec key;
    snprintf(key.job, sizeof key.job, "%s", job);
    return bsearch(&key, sorted, n, sizeof key, job_cmp);
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

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('"', f);
}

static void svg_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

hyfi_status hyfi_trace_summarize(const char *dir, FILE *out)
{
    if (!dir) return hyfi_fail(HYFI_ERR_ARG, "hyfi_trace_summarize: no folder");
    char path[4200];
    tvec tv = {0};
    cvec cv = {0};
    snprintf(path, sizeof path, "%s/tasks.rec", dir);
    if (read_rec(path, task_cb, &tv))
        return hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: cannot read %s (%s); merge the "
                                      "trace first (hyfi_trace_merge)", path, strerror(errno));
    snprintf(path, sizeof path, "%s/comms.rec", dir);
    read_rec(path, comm_cb, &cv); /* absent in one-process runs */
    long long ntags = 0;
    int *cats = read_categories(dir, &ntags);
    planinfo pi;
    read_plan(dir, &pi);
    for (size_t i = 0; i < cv.n; i++)
        cv.c[i].cat = cats && cv.c[i].tag >= 0 && cv.c[i].tag < ntags ? cats[cv.c[i].tag] : CAT_OTHER;
    hyfi_status st = HYFI_OK;
    trec *t = tv.t;
    const size_t n = tv.n;
    qsort(t, n, sizeof *t, job_cmp);
    int R = pi.ranks, W = 1;
    double t0 = 1e300, t1 = -1e300;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].rank + 1 > R) R = t[i].rank + 1;
        if (!t[i].hyfi) continue;
        nh++;
        if (t[i].worker + 1 > W) W = t[i].worker + 1;
        if (t[i].start < t0) t0 = t[i].start;
        if (t[i].end > t1) t1 = t[i].end;
    }
    if (!nh) {
        st = hyfi_fail(HYFI_ERR_DATA, "hyfi_trace_summarize: %s/tasks.rec has no hyfi task", dir);
        goto done;
    }
    /* Steps: hyfi_program_run submits a marker task "hyfi.program.<k>" first
     * (when tracing), so per rank a task belongs to the program of the last
     * marker submitted before it. Without markers: a new program where a task
     * was submitted after every earlier one had ended. */
    int nsteps = 0;
    {
        size_t *ord = malloc(n * sizeof *ord);
        if (!ord) {
            st = hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_summarize: out of memory");
            goto done;
        }
        for (int r = 0; r < R; r++) {
            size_t m = 0;
            int marks = 0;
            for (size_t i = 0; i < n; i++) {
                const int mk = !strncmp(t[i].name, "hyfi.program.", 13);
                marks += mk && t[i].rank == r;
                if (t[i].rank == r && (t[i].hyfi || mk)) ord[m++] = i;
            }
            /* by submit time (markers before the tasks submitted at the same time) */
            for (size_t a = 1; a < m; a++)
                for (size_t b = a; b > 0; b--) {
                    const trec *p = &t[ord[b - 1]], *q = &t[ord[b]];
                    if (p->submit < q->submit ||
                        (p->submit == q->submit && (!q->hyfi || p->hyfi == q->hyfi)))
                        break;
                    size_t x = ord[b];
                    ord[b] = ord[b - 1], ord[b - 1] = x;
                }
            int s = -1;
            double maxend = -1e300;
            for (size_t a = 0; a < m; a++) {
                trec *x = &t[ord[a]];
                if (!x->hyfi) { /* a marker */
                    s++;
                    continue;
                }
                if (!marks && (s < 0 || x->submit > maxend)) s++;
                if (s < 0) s = 0;
                x->step = s;
                if (x->end > maxend) maxend = x->end;
            }
            if (s + 1 > nsteps) nsteps = s + 1;
        }
        free(ord);
    }
    /* programs with no hyfi task on any rank (none expected) stay empty */
    double *sa = malloc((size_t)nsteps * sizeof *sa), *sb = malloc((size_t)nsteps * sizeof *sb);
    /* per rank: first start and last end of each step (ranks' clocks are
     * aligned by starpu_fxt_tool only to a few ms: a step's length is the
     * longest of the ranks' own spans) */
    double *ra = malloc((size_t)nsteps * R * sizeof *ra), *rb = malloc((size_t)nsteps * R * sizeof *rb);
    /* per rank x worker busy; per rank x kind; per place */
    double *busy = calloc((size_t)R * W, sizeof *busy), *bykind = calloc((size_t)R * NKIND, sizeof *bykind);
    const int nplaces = pi.nrep * pi.stages * (pi.tiles > 0 ? pi.tiles : 1);
    double *byplace = calloc((size_t)nplaces + 1, sizeof *byplace);
    double *placekind = calloc(((size_t)nplaces + 1) * NKIND, sizeof *placekind);
    span *bs = malloc((nh + cv.n + 1) * sizeof *bs), *cs = malloc((cv.n + 1) * sizeof *cs);
    double *ready = malloc((n + 1) * sizeof *ready);
    if (!sa || !sb || !ra || !rb || !busy || !bykind || !byplace || !placekind || !bs || !cs || !ready) {
        st = hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_summarize: out of memory");
        goto free2;
    }
    for (int s = 0; s < nsteps; s++) sa[s] = 1e300, sb[s] = -1e300;
    for (int k = 0; k < nsteps * R; k++) ra[k] = 1e300, rb[k] = -1e300;
    for (size_t i = 0; i < n; i++) {
        const trec *x = &t[i];
        if (!x->hyfi) continue;
        const double d = x->end - x->start;
        busy[x->rank * W + x->worker] += d;
        bykind[x->rank * NKIND + kind_of(x)] += d;
        if (x->step >= 0) {
            if (x->start < sa[x->step]) sa[x->step] = x->start;
            if (x->end > sb[x->step]) sb[x->step] = x->end;
            const int k = x->step * R + x->rank;
            if (x->start < ra[k]) ra[k] = x->start;
            if (x->end > rb[k]) rb[k] = x->end;
        }
        const int stg = task_stage(&pi, x->name), rep = task_replica(&pi, x->name);
        const int tile = task_tile(x->name);
        int q = nplaces; /* unknown */
        if (stg >= 0 && rep < pi.nrep)
            q = (rep * pi.stages + stg) * (pi.tiles > 0 ? pi.tiles : 1) + (tile > 0 ? tile : 0);
        byplace[q < nplaces ? q : nplaces] += d;
        placekind[(size_t)(q < nplaces ? q : nplaces) * NKIND + kind_of(x)] += d;
    }
    /* transfers */
    size_t ccount[NCAT] = {0}, cbytes[NCAT] = {0};
    double ctime[NCAT] = {0};
    for (size_t i = 0; i < cv.n; i++) {
        const crec *c = &cv.c[i];
        ccount[c->cat]++;
        cbytes[c->cat] += c->size;
        ctime[c->cat] += c->recv > c->send ? c->recv - c->send : 0;
    }
    /* overlap per receiving rank: |transfers ∩ compute| / |transfers| */
    double *ov = calloc((size_t)R * 2, sizeof *ov);
    if (!ov) {
        st = hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_summarize: out of memory");
        goto free2;
    }
    for (int r = 0; r < R; r++) {
        size_t nb = 0, nc = 0;
        for (size_t i = 0; i < n; i++)
            if (t[i].hyfi && t[i].rank == r) bs[nb++] = (span){t[i].start, t[i].end};
        for (size_t i = 0; i < cv.n; i++)
            if (cv.c[i].dst == r && cv.c[i].recv > cv.c[i].send)
                cs[nc++] = (span){cv.c[i].send, cv.c[i].recv};
        nb = span_union(bs, nb);
        nc = span_union(cs, nc);
        ov[2 * r] = span_len(cs, nc);
        ov[2 * r + 1] = span_inter(cs, nc, bs, nb);
    }
    /* Critical path of the last step: from its last task back through the
     * predecessor (dependency, or the sender of a message it received) that
     * was ready last. */
    for (size_t i = 0; i < n; i++) ready[i] = -3;
    const int ls = nsteps - 1;
    trec *cur = NULL;
    for (size_t i = 0; i < n; i++)
        if (t[i].hyfi && t[i].step == ls && (!cur || t[i].end > cur->end)) cur = &t[i];
    trec **cpath = malloc((n + 1) * sizeof *cpath);
    size_t npath = 0;
    double path_compute = 0;
    while (cur && cpath && npath < n) {
        if (cur->hyfi) {
            cpath[npath++] = cur;
            path_compute += cur->end - cur->start;
        }
        trec *best = NULL;
        double bt = -1e300;
        if (cur->deps) {
            char *d = strdup(cur->deps), *save = NULL;
            for (char *tok = d ? strtok_r(d, " ", &save) : NULL; tok; tok = strtok_r(NULL, " ", &save)) {
                trec *p = find_job(t, n, tok);
                if (!p) continue;
                const double q = job_ready(t, n, ready, p, 0);
                if (q > bt) bt = q, best = p;
            }
            free(d);
        }
        for (size_t i = 0; i < cv.n; i++)
            if (!strcmp(cv.c[i].rjob, cur->job)) {
                trec *p = find_job(t, n, cv.c[i].sjob);
                if (p && cv.c[i].recv > bt) bt = cv.c[i].recv, best = p;
            }
        if (!best || bt < sa[ls] - 1e-9 || best == cur) break;
        cur = best;
    }
    const double span_all = t1 - t0, step_len = sb[ls] - sa[ls];
    double *slen = calloc((size_t)nsteps, sizeof *slen);
    for (int k = 0; slen && k < nsteps * R; k++)
        if (rb[k] > ra[k] && rb[k] - ra[k] > slen[k / R]) slen[k / R] = rb[k] - ra[k];

    /* ---- text */
    if (out) {
        fprintf(out, "trace %s: %d rank%s, %zu hyfi tasks, %.1f ms; %d program%s (steps)\n", dir,
                R, R > 1 ? "s" : "", nh, span_all, nsteps, nsteps > 1 ? "s" : "");
        for (int s = 0; s < nsteps && slen; s++)
            fprintf(out, "  step %d: %.1f ms (%.1f .. %.1f)\n", s + 1, slen[s], sa[s] - t0,
                    sb[s] - t0);
        for (int r = 0; r < R; r++) {
            fprintf(out, "  rank %d:", r);
            for (int w = 0; w < W; w++)
                if (busy[r * W + w] > 0)
                    fprintf(out, " worker %d busy %.1f ms idle %.1f ms;", w, busy[r * W + w],
                            span_all - busy[r * W + w]);
            fprintf(out, "\n    compute by kind:");
            for (int k = 0; k < NKIND; k++)
                if (bykind[r * NKIND + k] > 0)
                    fprintf(out, " %s %.1f", KIND_NAMES[k], bykind[r * NKIND + k]);
            fprintf(out, " ms\n");
            if (ov[2 * r] > 0)
                fprintf(out, "    transfers into rank %d: %.1f ms, computing meanwhile %.0f%%\n", r,
                        ov[2 * r], 100 * ov[2 * r + 1] / ov[2 * r]);
        }
        fprintf(out, "  compute per place (replica/stage/tile):");
        for (int q = 0; q < nplaces; q++)
            if (byplace[q] > 0) {
                const int tl = pi.tiles > 0 ? pi.tiles : 1;
                fprintf(out, " r%d/s%d/t%d %.1f", q / tl / pi.stages, q / tl % pi.stages, q % tl,
                        byplace[q]);
            }
        fprintf(out, " ms\n  transfers:");
        for (int c = 0; c < NCAT; c++)
            if (ccount[c])
                fprintf(out, " %s %zu msgs %.2f MB %.1f ms;", CAT_NAMES[c], ccount[c],
                        (double)cbytes[c] / 1e6, ctime[c]);
        fprintf(out, "%s\n", cv.n ? "" : " none (one process)");
        fprintf(out, "  critical path of step %d: %zu tasks, %.1f ms computing of %.1f ms\n", nsteps,
                npath, path_compute, step_len);
        for (size_t i = 0; i < npath && i < 8; i++)
            fprintf(out, "    %s (rank %d, %.2f ms)\n", cpath[npath - 1 - i]->name,
                    cpath[npath - 1 - i]->rank, cpath[npath - 1 - i]->end - cpath[npath - 1 - i]->start);
        if (npath > 8) fprintf(out, "    ... %zu more\n", npath - 8);
    }

    /* ---- JSON */
    snprintf(path, sizeof path, "%s/summary.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: cannot write %s: %s", path, strerror(errno));
    } else {
        fprintf(f, "{\n  \"ranks\": %d,\n  \"tasks\": %zu,\n  \"span_ms\": %.3f,\n  \"steps_ms\": [", R,
                nh, span_all);
        for (int s = 0; s < nsteps && slen; s++) fprintf(f, "%s%.3f", s ? ", " : "", slen[s]);
        fprintf(f, "],\n  \"per_rank\": [\n");
        for (int r = 0; r < R; r++) {
            fprintf(f, "    {\"rank\": %d, \"workers\": [", r);
            for (int w = 0, first = 1; w < W; w++)
                if (busy[r * W + w] > 0) {
                    fprintf(f, "%s{\"worker\": %d, \"busy_ms\": %.3f, \"idle_ms\": %.3f}", first ? "" : ", ",
                            w, busy[r * W + w], span_all - busy[r * W + w]);
                    first = 0;
                }
            fprintf(f, "], \"compute_ms\": {");
            for (int k = 0, first = 1; k < NKIND; k++)
                if (bykind[r * NKIND + k] > 0) {
                    fprintf(f, "%s\"%s\": %.3f", first ? "" : ", ", KIND_NAMES[k], bykind[r * NKIND + k]);
                    first = 0;
                }
            fprintf(f, "}, \"transfer_in_ms\": %.3f, \"transfer_overlap\": %.4f}%s\n", ov[2 * r],
                    ov[2 * r] > 0 ? ov[2 * r + 1] / ov[2 * r] : 0.0, r + 1 < R ? "," : "");
        }
        fprintf(f, "  ],\n  \"per_place\": [");
        for (int q = 0, first = 1; q < nplaces; q++)
            if (byplace[q] > 0) {
                const int tl = pi.tiles > 0 ? pi.tiles : 1;
                fprintf(f, "%s{\"replica\": %d, \"stage\": %d, \"tile\": %d, \"compute_ms\": %.3f, "
                           "\"by_kind_ms\": {",
                        first ? "" : ",\n    ", q / tl / pi.stages, q / tl % pi.stages, q % tl,
                        byplace[q]);
                for (int k = 0, fk = 1; k < NKIND; k++)
                    if (placekind[(size_t)q * NKIND + k] > 0) {
                        fprintf(f, "%s\"%s\": %.3f", fk ? "" : ", ", KIND_NAMES[k],
                                placekind[(size_t)q * NKIND + k]);
                        fk = 0;
                    }
                fputs("}}", f);
                first = 0;
            }
        fprintf(f, "],\n  \"transfers\": {");
        for (int c = 0, first = 1; c < NCAT; c++)
            if (ccount[c]) {
                fprintf(f, "%s\"%s\": {\"count\": %zu, \"bytes\": %zu, \"time_ms\": %.3f}",
                        first ? "" : ", ", CAT_NAMES[c], ccount[c], cbytes[c], ctime[c]);
                first = 0;
            }
        fprintf(f, "},\n  \"critical_path\": {\"step\": %d, \"step_ms\": %.3f, \"compute_ms\": %.3f, "
                   "\"tasks\": [", nsteps, step_len, path_compute);
        for (size_t i = 0; i < npath; i++) {
            fputs(i ? ", " : "", f);
            json_str(f, cpath[npath - 1 - i]->name);
        }
        fprintf(f, "]}\n}\n");
        if (fclose(f)) st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: writing %s failed", path);
    }

    /* ---- SVG timeline of the last step */
    snprintf(path, sizeof path, "%s/timeline.svg", dir);
    if (st == HYFI_OK && !(f = fopen(path, "w")))
        st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: cannot write %s: %s", path, strerror(errno));
    if (st == HYFI_OK) {
        /* lanes: (rank, worker) pairs that ran hyfi tasks in the step */
        int *lane = malloc((size_t)R * W * sizeof *lane);
        int nl = 0;
        for (int i = 0; lane && i < R * W; i++) lane[i] = -1;
        for (size_t i = 0; lane && i < n; i++)
            if (t[i].hyfi && t[i].step == ls) lane[t[i].rank * W + t[i].worker] = 0;
        for (int i = 0; lane && i < R * W; i++)
            if (!lane[i]) lane[i] = nl++;
        const double x0 = 150, wpx = 1400, lh = 46, y0 = 40;
        const double a = sa[ls], len = step_len > 0 ? step_len : 1;
        const double H = y0 + nl * lh + 90;
#define X(tm) (x0 + ((tm) - a) / len * wpx)
        fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                   "font-family=\"sans-serif\" font-size=\"10\">\n", x0 + wpx + 20, H);
        fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
        fprintf(f, "<text x=\"10\" y=\"18\" font-size=\"13\">hyfi trace: step %d of %d, %.1f ms, %d "
                   "rank%s (tasks by kind; lines: transfers between ranks by traffic kind)</text>\n",
                nsteps, nsteps, step_len, R, R > 1 ? "s" : "");
        for (int i = 0; lane && i < R * W; i++) {
            if (lane[i] < 0) continue;
            const double y = y0 + lane[i] * lh;
            fprintf(f, "<text x=\"8\" y=\"%.1f\">rank %d worker %d</text>\n", y + lh / 2, i / W, i % W);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\"/>\n",
                    x0, y + 4, wpx, lh - 8);
        }
        for (size_t i = 0; lane && i < n; i++) {
            const trec *x = &t[i];
            if (!x->hyfi || x->step != ls) continue;
            const double y = y0 + lane[x->rank * W + x->worker] * lh;
            const double xa = X(x->start), w = (x->end - x->start) / len * wpx;
            const int k = kind_of(x);
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                       "stroke=\"white\" stroke-width=\"0.3\"><title>",
                    xa, y + 6, w > 0.3 ? w : 0.3, lh - 12, KIND_COLOR[k]);
            svg_text(f, x->name);
            fprintf(f, " (%.3f ms)</title></rect>\n", x->end - x->start);
            if (w > 6.5 * (double)strlen(x->name) * 0.8) {
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"8\" fill=\"white\">", xa + 2,
                        y + lh / 2 + 3);
                svg_text(f, x->name);
                fputs("</text>\n", f);
            }
        }
        for (size_t i = 0; lane && i < cv.n; i++) {
            const crec *c = &cv.c[i];
            if (c->recv < a || c->send > sb[ls] || c->src >= R || c->dst >= R) continue;
            int ls0 = -1, ld0 = -1;
            for (int w = 0; w < W && (ls0 < 0 || ld0 < 0); w++) {
                if (ls0 < 0 && lane[c->src * W + w] >= 0) ls0 = lane[c->src * W + w];
                if (ld0 < 0 && lane[c->dst * W + w] >= 0) ld0 = lane[c->dst * W + w];
            }
            if (ls0 < 0 || ld0 < 0) continue;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"0.8\" opacity=\"0.7\"><title>%s, %zu bytes, rank %d to %d, "
                       "%.3f ms</title></line>\n",
                    X(c->send > a ? c->send : a), y0 + ls0 * lh + lh / 2, X(c->recv),
                    y0 + ld0 * lh + lh / 2, CAT_COLOR[c->cat], CAT_NAMES[c->cat], c->size, c->src,
                    c->dst, c->recv - c->send);
        }
        /* time axis and legend */
        const double ya = y0 + nl * lh + 8;
        for (int k = 0; k <= 10; k++)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%.1f ms</text>\n", x0 + wpx * k / 10 - 10,
                    ya + 10, len * k / 10);
        double lx = x0;
        for (int k = 0; k < NKIND; k++) {
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text "
                       "x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx, ya + 24, KIND_COLOR[k], lx + 13,
                    ya + 33, KIND_NAMES[k]);
            lx += 100;
        }
        lx = x0;
        for (int c = 0; c < NCAT; c++) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">%s transfer</text>\n",
                    lx, ya + 52, lx + 12, ya + 52, CAT_COLOR[c], lx + 15, ya + 56, CAT_NAMES[c]);
            lx += 150;
        }
#undef X
        fputs("</svg>\n", f);
        free(lane);
        if (fclose(f)) st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: writing %s failed", path);
    }
    free(cpath);
    free(ov);
    free(slen);
free2:
    free(sa), free(sb), free(ra), free(rb), free(busy), free(bykind), free(byplace), free(placekind), free(bs), free(cs), free(ready);
done:
    for (size_t i = 0; i < tv.n; i++) free(tv.t[i].deps);
    free(tv.t);
    free(cv.c);
    free(cats);
    for (int i = 0; i < pi.nops; i++) free(pi.op[i]);
    free(pi.op);
    free(pi.stage);
    return st;
}
