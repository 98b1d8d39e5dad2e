/* hyfi-train's state shared by its phases: the start-up (apps/train_startup.c:
 * MPI's start, the command line, the data, the checkpoint to resume, the
 * output probes and the agreement of every rank on all of it) and the run
 * (apps/hyfi_train.c: engine, model, training, evaluation, summary). */
#ifndef HYFI_APPS_TRAIN_RUN_H
#define HYFI_APPS_TRAIN_RUN_H

#include "data.h"
#include "train_options.h"
#include "train_regions.h"

#include <hyfi.h>

#include <stdbool.h>
#include <stdio.h>

#define WARMUP_STEPS 5

/* What the phases share. */
typedef struct run {
    train_options o;
    hyfi_dataset *train, *test;
    int C, H, W, K;             /* output geometry of the images, classes */
    int nrep, B;                /* replicas; B: the global batch */
    size_t ntrain, numel, spe;  /* train images, floats per image, steps per epoch */
    long long total;            /* training steps */
    hyfi_ctx *ctx;
    hyfi_graph *g;
    hyfi_tensor *tx, *ty, *tlogits, *loss;
    hyfi_prefetch *pf;
    train_regions *tr;          /* slides: batches read region by region instead of pf */
    FILE *mf;                   /* --metrics, on rank 0 */
    int metrics_errno;          /* its first failed write, 0: none */
    double *rates;              /* (total) images/s of each step */
    float *logits_buf;          /* (B, K) */
    int lead, nranks;
    /* --resume, chosen at start-up (train_startup.c) */
    char resume_file[4096];     /* the newest valid checkpoint ("" without --resume) */
    char notes[2048];           /* what the resume rule decided, one line each (rank 0 prints) */
    /* long runs */
    long long first;            /* steps done before this process (--resume) */
    long long done;             /* steps done */
    long long saved_at;         /* steps of the last checkpoint written, -1: none */
    float loss0;                /* the run's first step's loss and gradient norm */
    double gnorm0;              /*   (divergence warnings; kept in checkpoints) */
    int nwarn;
    int stop_sig;               /* the signal that stopped the run, 0: none */
    bool stopped;               /* by a signal or --stop-at-step */
    /* progress (apps/train_progress.c) */
    struct train_progress *pg;  /* rank 0's line timing and thread of long steps */
    bool trace_paused;          /* --trace-steps: recording paused now */
    double train_s;             /* wall time of this process's steps (no checkpoints) */
    size_t eval_nb;             /* test batches of the evaluation (0: none) */
    double eval_s;              /* its wall time */
    /* results */
    long long nmeas;            /* steps after the warm-up */
    double mean, median;        /* their images/s */
    bool have_acc;
    double acc;
    size_t correct, counted;
} run;

/* This process's rank and the rank count (from hyfi_launch_begin). */
extern int g_rank, g_nranks;

/* An error. alike: every rank hits it alike; only rank 0 prints it. Otherwise
 * it is printed with the rank (in multi-rank runs). One write per message. */
void report(bool alike, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Statuses that follow from the flags (the model or the plan cannot work):
 * exit status 2. */
static inline bool config_error(hyfi_status s) { return s == HYFI_ERR_ARG || s == HYFI_ERR_SHAPE; }

/* A failed hyfi call, printed (once where every rank hits it alike); returns 1. */
int lib_fail(const char *what, hyfi_status s, const hyfi_graph *g);

/* The outcome of an agreement between the ranks (hyfi_launch_agree,
 * hyfi_ctx_agree) that failed, printed: a rank's own failure by that rank;
 * where all failed alike, once by rank 0; otherwise every other rank says
 * why it stops (jobs of more than 16 ranks: rank 0 only). The message is
 * hyfi_last_error(); own: this rank failed. */
void report_agreed(bool own, bool alike);

double now_s(void);

/* The start-up: returns 0 (go on: r->o, the data and its geometry are set,
 * every rank agreed), -1 (--help or --version printed: exit 0; --version
 * before MPI starts), or the exit status to end with (the reason printed; MPI
 * finalised). */
int train_startup(run *r, int argc, char **argv);

/* --dry-run (apps/train_dry_run.c): build the model on a CPU-only context,
 * print one line per op and the totals; the exit status. */
int train_dry_run(const train_options *o, int C, int H, int W, int K);

/* --plan auto (apps/train_autoplan.c), after the model is built: the plan
 * searched for it on this run's machine (or --plan-ranks' ...) set into r->o as
 * if typed (its line printed), or with --explain the best plans printed. 0 or
 * the exit status. */
int train_autoplan(run *r);

#endif
