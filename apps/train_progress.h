/* hyfi-train's progress display and summary (apps/train_progress.c).
 *
 * Progress goes to stderr, from rank 0 only, as plain lines (no carriage
 * returns: the same in a terminal and in a CI log):
 *   step S loss L images/s R accuracy A (S of N, ETA 1:02)
 * every --print-freq steps, the first and the last, and whenever
 * --print-secs seconds passed since the last line; a step or an evaluation
 * batch that runs longer than --print-secs gets a line of its own
 *   ... step S running for 45 s (S of N, ETA 12:30)
 * from a small thread (not in a simulation build: its clock is simulated).
 * (A: the top-1 accuracy of the step's own batch, from the logits its forward
 * made; not in a simulation). The evaluation prints its batches done,
 * running accuracy and ETA every tenth of the test split or --print-secs
 * seconds. The ETA is the time left for the training steps (the mean of the
 * last steps, from a change of speed on: apps/train_eta.h) plus, when a test
 * split follows, its batches at a third of a step each (one forward instead
 * of forward, backward and update), an estimate until the evaluation runs:
 * from its third batch on, the evaluation's ETA is its own batches' time,
 * measured the same way over the last ones (the first left out), so that it
 * follows the machine's load.
 *
 * The summary is a block on stdout at the end; each rank's peak memory line
 * (stderr) only with -v. The --metrics lines are apps/train_metrics.h's. */
#ifndef HYFI_APPS_TRAIN_PROGRESS_H
#define HYFI_APPS_TRAIN_PROGRESS_H

#include "train_run.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Before the first step (after the setup lines): the evaluation's size, and
 * on rank 0 the thread of long steps. 0, or 1 (the reason printed). */
int progress_begin(run *r);
/* Stops the thread; frees. Safe without progress_begin. */
void progress_end(run *r);

/* Step s (0-based) starts; step s is done with loss l and its batch's
 * accuracy acc (NAN: none; r->rates[s] set): its line when due, and MPI4DL's
 * line with --print-mpi4dl. */
void progress_step_start(run *r, long long s);
void progress_step_done(run *r, long long s, float l, double acc);

/* The evaluation of nb batches starts; batch k (0-based) is done with
 * `correct` of `counted` images right so far; it ended (secs: its time). */
void progress_eval_start(run *r, size_t nb);
void progress_eval_batch(run *r, size_t k, size_t nb, size_t correct, size_t counted);
void progress_eval_done(run *r, size_t nb, double secs);

/* The summary block (stdout), with -v this rank's peak memory (stderr), and
 * the --metrics summary line. */
void progress_summary(run *r);

/* A duration as "42 s", "4:05" or "1:02:03". */
void progress_fmt_secs(double s, char *buf, size_t len);

/* A JSON number, or null when not finite / not applicable. */
void json_num(FILE *f, bool have, double v);

#endif
