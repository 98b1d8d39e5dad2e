/* Reading a merged trace: StarPU's tasks.rec and comms.rec (GNU recutils
 * records: "Key: value" lines, records separated by blank lines; times in ms)
 * and what hyfi noted while the run compiled (engine/trace.c):
 * hyfi_handles.tsv (tag -> traffic category), hyfi_ops.tsv (op -> stage) and
 * hyfi_plan.tsv (the plan's shape). */
#include "tooling.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

const char *const hyfi_tt_cat_names[NCAT] = {"halo", "bnstats", "pipeline", "allreduce",
                                             "loss", "input", "other"};

static int cat_of(const char *s)
{
    for (int c = 0; c < NCAT; c++)
        if (!strcmp(s, hyfi_tt_cat_names[c])) return c;
    return CAT_OTHER;
}

static const char *const FN = "hyfi_trace_summarize";

/* How reading path ended: e 0 (read), ENOENT (absent: an error unless
 * optional), ENOMEM, or another errno (a read error). */
static hyfi_status read_status(const char *path, int e, int optional)
{
    if (!e || (e == ENOENT && optional)) return HYFI_OK;
    if (e == ENOMEM) return hyfi_fail(HYFI_ERR_NOMEM, "%s: out of memory reading %s", FN, path);
    return hyfi_tt_read_failed(FN, path, e);
}

/* Read a recutils file record by record: cb(fields, values, n, arg), which
 * returns 0 or ENOMEM. Returns 0 or an errno (see read_status). */
typedef int (*rec_cb)(char **k, char **v, int n, void *arg);
static int read_rec(const char *path, rec_cb cb, void *arg)
{
    FILE *f = fopen(path, "r");
    if (!f) return errno;
    char *line = NULL;
    size_t cap = 0;
    char *k[64], *v[64];
    int n = 0, e = 0;
    for (;;) {
        errno = 0;
        ssize_t len = getline(&line, &cap, f);
        if (len < 0 && (ferror(f) || errno == ENOMEM)) e = errno ? errno : EIO;
        if (len > 1 && n < 64) { /* "Key: value" */
            if (line[len - 1] == '\n') line[--len] = 0;
            char *c = strstr(line, ": ");
            if (c) {
                *c = 0;
                k[n] = strdup(line);
                v[n] = strdup(c + 2);
                n++;
                if (!k[n - 1] || !v[n - 1]) e = ENOMEM;
            }
        }
        if (len <= 1 || e) { /* blank line or EOF: end of record */
            if (n && !e) e = cb(k, v, n, arg);
            for (int i = 0; i < n; i++) free(k[i]), free(v[i]);
            n = 0;
            if (len < 0 || e) break;
        }
    }
    free(line);
    fclose(f);
    return e;
}

static int task_cb(char **k, char **v, int n, void *arg)
{
    trace_data *d = arg;
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
        else if (!strcmp(k[i], "DependsOn") && !(t.deps = strdup(v[i]))) return ENOMEM;
    }
    if (t.worker < -1) t.worker = -1;
    if (!t.job[0]) {
        free(t.deps);
        return 0;
    }
    t.hyfi = !strncmp(t.model, "hyfi_", 5) && t.start >= 0 && t.end >= t.start && t.worker >= 0;
    if (d->n == d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 4096;
        trec *p = realloc(d->t, nc * sizeof *p);
        if (!p) {
            free(t.deps);
            return ENOMEM;
        }
        d->t = p, d->cap = nc;
    }
    d->t[d->n++] = t;
    return 0;
}

static int comm_cb(char **k, char **v, int n, void *arg)
{
    trace_data *d = arg;
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
    if (have != 3) return 0;
    if (d->nc == d->ccap) {
        size_t nc = d->ccap ? 2 * d->ccap : 1024;
        crec *p = realloc(d->c, nc * sizeof *p);
        if (!p) return ENOMEM;
        d->c = p, d->ccap = nc;
    }
    d->c[d->nc++] = c;
    return 0;
}

/* Read a text file line by line (lines of up to 511 characters; longer ones
 * come in pieces): cb(line, arg) returns 0 or ENOMEM. Returns 0 or an errno
 * (see read_status). */
static int read_lines(const char *path, int (*cb)(const char *line, void *arg), void *arg)
{
    FILE *f = fopen(path, "r");
    if (!f) return errno;
    char line[512];
    int e = 0;
    while (!e && fgets(line, sizeof line, f)) e = cb(line, arg);
    if (!e && ferror(f)) e = errno ? errno : EIO;
    fclose(f);
    return e;
}

/* hyfi_handles.tsv: tag -> category. The tags are packed from the data's
 * keys (engine/keys.h), not consecutive, and StarPU's trace keeps a message's
 * tag in 32 bits: the low 32 bits of a tag, which hold its category (every
 * tag with the same low word has the same one), as (tag, category) pairs,
 * sorted and searched. */
typedef struct {
    long long tag;
    int cat;
} tag_cat;

typedef struct {
    tag_cat *p;
    size_t n, cap;
} categories;

static int category_line(const char *line, void *arg)
{
    categories *c = arg;
    long long tag;
    int owner;
    char name[32];
    if (sscanf(line, "%lld\t%d\t%31s", &tag, &owner, name) != 3 || tag < 0) return 0;
    if (c->n == c->cap) {
        const size_t nc = c->cap ? 2 * c->cap : 1024;
        tag_cat *p = realloc(c->p, nc * sizeof *p);
        if (!p) return ENOMEM;
        c->p = p, c->cap = nc;
    }
    c->p[c->n++] = (tag_cat){tag & 0xffffffffLL, cat_of(name)};
    return 0;
}

static int tag_cat_cmp(const void *a, const void *b)
{
    const long long x = ((const tag_cat *)a)->tag, y = ((const tag_cat *)b)->tag;
    return x < y ? -1 : x > y;
}

static int category_of(const categories *c, long long tag)
{
    const tag_cat key = {tag, 0};
    const tag_cat *f = c->n ? bsearch(&key, c->p, c->n, sizeof *c->p, tag_cat_cmp) : NULL;
    return f ? f->cat : CAT_OTHER;
}

/* hyfi_plan.tsv: "key value" lines. */
static int plan_line(const char *line, void *arg)
{
    planinfo *pi = arg;
    char k[64];
    int v;
    if (sscanf(line, "%63s %d", k, &v) != 2) return 0;
    if (!strcmp(k, "replicas")) pi->nrep = v;
    else if (!strcmp(k, "per_replica")) pi->mbr = v;
    else if (!strcmp(k, "stages")) pi->stages = v;
    else if (!strcmp(k, "tiles")) pi->tiles = v;
    else if (!strcmp(k, "ranks")) pi->ranks = v;
    return 0;
}

/* hyfi_ops.tsv: "op kind stage" lines. */
typedef struct {
    planinfo *pi;
    int cap;
} ops_acc;

static int op_line(const char *line, void *arg)
{
    ops_acc *a = arg;
    planinfo *pi = a->pi;
    char op[256], kind[64];
    int st;
    if (sscanf(line, "%255s %63s %d", op, kind, &st) != 3) return 0;
    if (pi->nops == a->cap) {
        const int cap = a->cap ? 2 * a->cap : 256;
        char **o = realloc(pi->op, (size_t)cap * sizeof *o);
        if (o) pi->op = o;
        int *s = o ? realloc(pi->stage, (size_t)cap * sizeof *s) : NULL;
        if (s) pi->stage = s;
        if (!o || !s) return ENOMEM;
        a->cap = cap;
    }
    if (!(pi->op[pi->nops] = strdup(op))) return ENOMEM;
    pi->stage[pi->nops++] = st;
    return 0;
}

/* Read dir/name line by line (absent: nothing read). */
static hyfi_status read_tsv(const char *dir, const char *name, int (*cb)(const char *, void *),
                            void *arg)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return read_status(path, read_lines(path, cb, arg), 1);
}

/* A merged file exactly at this process's file size limit was cut there. */
static hyfi_status check_whole(const char *dir, const char *path)
{
    if (hyfi_tt_write_cause(path) != EFBIG) return HYFI_OK;
    char cause[256];
    hyfi_tt_cause(path, EFBIG, cause, sizeof cause);
    return hyfi_fail(HYFI_ERR_IO, "%s: %s is cut short: %s, then merge again (remove %s/paje.trace, "
                                  "then hyfi-trace %s)", FN, path, cause, dir, dir);
}

int hyfi_tt_job_cmp(const void *x, const void *y)
{
    return strcmp(((const trec *)x)->job, ((const trec *)y)->job);
}

hyfi_status hyfi_tt_read(const char *dir, trace_data *d)
{
    memset(d, 0, sizeof *d);
    planinfo *pi = &d->pi;
    pi->nrep = pi->mbr = pi->stages = pi->tiles = pi->ranks = 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/tasks.rec", dir);
    int e = read_rec(path, task_cb, d);
    if (e == ENOENT)
        return hyfi_fail(HYFI_ERR_IO, "%s: cannot read %s (%s); merge the trace first "
                                      "(hyfi_trace_merge)", FN, path, strerror(e));
    hyfi_status st = read_status(path, e, 0);
    if (st == HYFI_OK) st = check_whole(dir, path);
    snprintf(path, sizeof path, "%s/comms.rec", dir);
    if (st == HYFI_OK) st = read_status(path, read_rec(path, comm_cb, d), 1); /* absent: one process */
    if (st == HYFI_OK) st = check_whole(dir, path);
    categories cats = {0};
    ops_acc ops = {.pi = pi};
    /* absent: a trace recorded without hyfi's notes (no categories, one place) */
    if (st == HYFI_OK) st = read_tsv(dir, "hyfi_handles.tsv", category_line, &cats);
    if (st == HYFI_OK) st = read_tsv(dir, "hyfi_plan.tsv", plan_line, pi);
    if (st == HYFI_OK) st = read_tsv(dir, "hyfi_ops.tsv", op_line, &ops);
    if (cats.n) qsort(cats.p, cats.n, sizeof *cats.p, tag_cat_cmp);
    for (size_t i = 0; st == HYFI_OK && i < d->nc; i++)
        d->c[i].cat = category_of(&cats, d->c[i].tag & 0xffffffffLL);
    free(cats.p);
    if (st == HYFI_OK && d->n) qsort(d->t, d->n, sizeof *d->t, hyfi_tt_job_cmp);
    return st;
}

void hyfi_tt_data_free(trace_data *d)
{
    for (size_t i = 0; i < d->n; i++) free(d->t[i].deps);
    free(d->t);
    free(d->c);
    for (int i = 0; i < d->pi.nops; i++) free(d->pi.op[i]);
    free(d->pi.op);
    free(d->pi.stage);
    memset(d, 0, sizeof *d);
}
