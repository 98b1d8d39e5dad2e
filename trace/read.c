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

static void task_cb(char **k, char **v, int n, void *arg)
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
        else if (!strcmp(k[i], "DependsOn")) t.deps = strdup(v[i]);
    }
    if (t.worker < -1) t.worker = -1;
    if (!t.job[0]) {
        free(t.deps);
        return;
    }
    t.hyfi = !strncmp(t.model, "hyfi_", 5) && t.start >= 0 && t.end >= t.start && t.worker >= 0;
    if (d->n == d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 4096;
        trec *p = realloc(d->t, nc * sizeof *p);
        if (!p) {
            free(t.deps);
            return;
        }
        d->t = p, d->cap = nc;
    }
    d->t[d->n++] = t;
}

static void comm_cb(char **k, char **v, int n, void *arg)
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
    if (have != 3) return;
    if (d->nc == d->ccap) {
        size_t nc = d->ccap ? 2 * d->ccap : 1024;
        crec *p = realloc(d->c, nc * sizeof *p);
        if (!p) return;
        d->c = p, d->ccap = nc;
    }
    d->c[d->nc++] = c;
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

int hyfi_tt_job_cmp(const void *x, const void *y)
{
    return strcmp(((const trec *)x)->job, ((const trec *)y)->job);
}

hyfi_status hyfi_tt_read(const char *dir, trace_data *d)
{
    memset(d, 0, sizeof *d);
    char path[4200];
    snprintf(path, sizeof path, "%s/tasks.rec", dir);
    if (read_rec(path, task_cb, d))
        return hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: cannot read %s (%s); merge the "
                                      "trace first (hyfi_trace_merge)", path, strerror(errno));
    snprintf(path, sizeof path, "%s/comms.rec", dir);
    read_rec(path, comm_cb, d); /* absent in one-process runs */
    long long ntags = 0;
    int *cats = read_categories(dir, &ntags);
    read_plan(dir, &d->pi);
    for (size_t i = 0; i < d->nc; i++)
        d->c[i].cat = cats && d->c[i].tag >= 0 && d->c[i].tag < ntags ? cats[d->c[i].tag] : CAT_OTHER;
    free(cats);
    qsort(d->t, d->n, sizeof *d->t, hyfi_tt_job_cmp);
    return HYFI_OK;
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
