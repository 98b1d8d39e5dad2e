/* hyfi-train's time-left estimates (apps/train_eta.c): plain arithmetic on
 * measured times, apart from the display (apps/train_progress.c) so that a
 * test can feed them made-up times (tests/test_train_eta.c).
 *
 * A step's (or a test batch's) time from now on is the mean of the last
 * ETA_WINDOW ones, so that the noise of a shared machine averages out. When
 * the load changes (another job starts or ends), the last ETA_RUN or more
 * all lie ETA_SHIFT times above, or as far below, the mean of the window's
 * earlier ones: the mean is then taken over those alone, so that the ETA
 * follows the new speed after ETA_RUN steps instead of the whole window.
 * A pattern that alternates (a slow step, a quick one) is no such change. */
#ifndef HYFI_APPS_TRAIN_ETA_H
#define HYFI_APPS_TRAIN_ETA_H

#include <stddef.h>

#define ETA_WINDOW 10
#define ETA_RUN 3
#define ETA_SHIFT 1.25

/* The mean of the n times t[0..n-1] (oldest first; only the last ETA_WINDOW
 * count), from the change of speed on when the last ones show one. Times not
 * finite or below 0 are left out. 0: none. */
double eta_recent_mean(const double *t, size_t n);

/* A training step's time (s) after step s (0-based) is done: rates[k] is
 * step k's images/s (0: not measured), batch the images of a step; steps
 * before `first` (done before --resume) are not this process's, and its
 * first step is left out once there are others (it includes StarPU's
 * start). 0: none yet. */
double eta_step_time(const double *rates, double batch, long long first, long long s);

/* Seconds left after step s (0-based) of total is done: the steps after it
 * at eta_step_time, then eval_nb test batches at a third of a step each
 * (one forward instead of forward, backward and update). Never negative;
 * 0 for s >= total (rates holds total entries). */
double eta_after_step(const double *rates, double batch, long long first, long long s,
                      long long total, size_t eval_nb);

/* The evaluation's clock: the ends of its last batches. A test batch's time
 * is measured from its second batch on (the first fills the prefetch), once
 * ETA_EVAL_MEASURED batches are done; until then `est` (the estimate from
 * the training steps; 0: none, then the mean so far). */
#define ETA_EVAL_MEASURED 3
typedef struct eta_eval {
    double t0;                      /* the evaluation's start */
    double est;                     /* a test batch's time as estimated before any ran (s) */
    double end[ETA_WINDOW + 1];     /* the last batches' ends, by batch % size */
} eta_eval;

void eta_eval_start(eta_eval *e, double t0, double est);
/* Batch k (0-based) ended at t: a test batch's time from now on (s). */
double eta_eval_batch(eta_eval *e, size_t k, double t);

#endif
