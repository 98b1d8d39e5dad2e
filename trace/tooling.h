/* Trace tooling (hyfi_trace_merge, hyfi_trace_summarize): what its files
 * share. Plain C, no StarPU: a merged trace is read from its folder
 * (read.c), turned into statistics (stats.c) and written as text
 * (summary.c), summary.json (json.c) and timeline.svg (svg.c); merge.c runs
 * StarPU's starpu_fxt_tool on the ranks' raw files.
 *
 * Recording the trace (the names and categories of handles and ops, while a
 * traced run compiles) is engine/trace.c, in the engine. */
#ifndef HYFI_TRACE_TOOLING_H
#define HYFI_TRACE_TOOLING_H

#include "errors.h"

#include <stddef.h>
#include <stdio.h>

/* A task of tasks.rec. */
typedef struct {
    char name[96], model[48], job[24];
    int rank, worker;
    double submit, start, end; /* ms; start < 0: not a timed task */
    char *deps;                /* "0_2 0_3" or NULL */
    int hyfi;                  /* a hyfi codelet */
    int step;
} trec;

/* A transfer of comms.rec. */
typedef struct {
    int src, dst;
    long long tag;
    size_t size;
    double send, recv;
    char sjob[24], rjob[24];
    int cat;
} crec;

/* Traffic categories of transfers (hyfi_handles.tsv). */
enum { CAT_HALO, CAT_BNSTATS, CAT_PIPELINE, CAT_ALLREDUCE, CAT_LOSS, CAT_INPUT, CAT_OTHER, NCAT };
extern const char *const hyfi_tt_cat_names[NCAT];

/* Kinds of compute, by codelet (and all-reduce by task name). */
enum { K_CONV, K_BN, K_RELU, K_POOL, K_ELT, K_CONCAT, K_FC, K_XENT, K_SGD, K_TILE, K_ALLRED,
       K_OTHER, NKIND };
extern const char *const hyfi_tt_kind_names[NKIND];
int hyfi_tt_kind_of(const trec *t);

/* hyfi_ops.tsv: op names -> stage; hyfi_plan.tsv: the plan's shape. */
typedef struct {
    char **op;
    int *stage;
    int nops;
    int nrep, mbr, stages, tiles, ranks;
} planinfo;

/* A merged trace, read from its folder (read.c). */
typedef struct {
    trec *t;      /* tasks, sorted by job id */
    size_t n, cap;
    crec *c;      /* transfers, with their categories */
    size_t nc, ccap;
    planinfo pi;
} trace_data;

/* Read dir/tasks.rec, comms.rec, hyfi_handles.tsv, hyfi_ops.tsv and
 * hyfi_plan.tsv into d (zeroed first; free it with hyfi_tt_data_free). */
hyfi_status hyfi_tt_read(const char *dir, trace_data *d);
void hyfi_tt_data_free(trace_data *d);
/* Order of trecs by job id (qsort, bsearch). */
int hyfi_tt_job_cmp(const void *x, const void *y);

/* The statistics of a trace (stats.c). Times in ms. */
typedef struct {
    int R, W;          /* ranks; workers per rank (the most any rank used) */
    size_t nh;         /* hyfi tasks */
    double t0, t1;     /* first start and last end of any hyfi task */
    double span_all;   /* t1 - t0 */
    int nsteps;        /* programs found (at least 1) */
    double *sa, *sb;   /* per step: first start and last end over all ranks */
    double *slen;      /* per step: the longest of the ranks' own spans */
    int *slabel;       /* per step: its program's number in the run (from 1; marker
                          "hyfi.program.<k>": k + 1), the step's when training
                          started the run (a window of --trace-steps: those) */
    unsigned char *strain; /* per step: a training step (it updates parameters), not an
                              evaluation batch */
    int ntrain;        /* training steps */
    int ls;            /* the last training step (the last program without any) */
    double step_len;   /* step ls: sb - sa */
    double *busy;      /* [rank * W + worker] */
    double *bykind;    /* [rank * NKIND + kind] */
    int nplaces;       /* replicas x stages x tiles; index nplaces: unknown */
    int ntiles;        /* tiles per stage (at least 1) */
    double *byplace;   /* [place], nplaces + 1 */
    double *placekind; /* [place * NKIND + kind] */
    size_t ccount[NCAT], cbytes[NCAT];
    double ctime[NCAT];
    double *ov;        /* [2 * rank]: transfer time into the rank; [2 * rank + 1]: of it computing */
    trec **cpath;      /* critical path of step ls, last task first */
    size_t npath;
    double path_compute;
} trace_stats;

/* Compute s from d (d's tasks get their steps). HYFI_ERR_DATA: no hyfi task. */
hyfi_status hyfi_tt_stats(const char *dir, trace_data *d, trace_stats *s);
void hyfi_tt_stats_free(trace_stats *s);

/* Checked writing (fileio.c): the first error is kept and hyfi_tt_close
 * reports it, naming fn (the API function), the file, the cause and the fix. */
typedef struct {
    FILE *f;
    const char *fn;
    char path[4200]; /* or what f is, e.g. "the summary's output stream" */
    int own;         /* opened here: closed by hyfi_tt_close */
    int err;         /* the first errno */
} tt_writer;
hyfi_status hyfi_tt_open(tt_writer *w, const char *fn, const char *path);
void hyfi_tt_wrap(tt_writer *w, FILE *f, const char *fn, const char *what);
void hyfi_tt_printf(tt_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hyfi_tt_puts(tt_writer *w, const char *s);
void hyfi_tt_putc(tt_writer *w, int c);
hyfi_status hyfi_tt_close(tt_writer *w);

/* Why a file another program wrote may have stopped short (fileio.c):
 * EFBIG: its size is exactly this process's file size limit (a write stops
 * there); ENOSPC: its file system has less than HYFI_TT_FULL_BYTES (or no
 * inode) left; 0: no sign of either. */
#define HYFI_TT_FULL_BYTES (16 * 1024)
int hyfi_tt_write_cause(const char *path);
long long hyfi_tt_space_left(const char *path); /* bytes; -1: unknown */
long long hyfi_tt_size_limit(void);             /* bytes; -1: none */
/* Why writing path (NULL: not a file) failed with errno e, and the fix, as text. */
void hyfi_tt_cause(const char *path, int e, char *buf, size_t len);
/* Fail with HYFI_ERR_IO: writing or reading path failed with errno e. */
hyfi_status hyfi_tt_write_failed(const char *fn, const char *path, int e);
hyfi_status hyfi_tt_read_failed(const char *fn, const char *path, int e);

/* Write dir/summary.json (json.c) and dir/timeline.svg (svg.c). */
hyfi_status hyfi_tt_write_json(const char *dir, const trace_data *d, const trace_stats *s);
hyfi_status hyfi_tt_write_svg(const char *dir, const trace_data *d, const trace_stats *s);

#endif
