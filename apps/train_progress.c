/* hyfi-train's progress lines (stderr, rank 0), MPI4DL's step lines, and the
 * summary block at the end (train_progress.h says what they look like). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include "train_progress.h"
#include "train_eta.h"
#include "train_metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The thread of long steps exists only in the real build: a simulation's
 * clock is StarPU's simulated one, and its ranks are threads of one process. */
#ifndef HYFI_APPS_SIM_SHIMS_H
#define PROGRESS_THREAD 1
#endif

/* Rank 0's state: when the last line was printed, what is running. */
typedef struct train_progress {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int have_thread, quit;
    double t_line;       /* the last line's time (now_s) */
    double t_step_line;  /* the last step line's */
    int phase;           /* 0: none, 1: step `item` running, 2: evaluation batch `item` */
    long long item;      /* 0-based */
    double t_item;       /* when it started */
    double eta_at_start; /* the ETA when it started (s) */
    size_t eval_nb;      /* batches of the evaluation running */
    eta_eval eval;       /* the evaluation's clock */
    size_t eval_next;    /* the next batch count (1-based) with a line of its own */
} train_progress;

void json_num(FILE *f, bool have, double v)
{
    if (have && isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

void progress_fmt_secs(double s, char *buf, size_t len)
{
    if (!(s >= 0) || s > 1e9) s = 0;
    const long long t = (long long)(s + 0.5);
    if (s < 9.95) snprintf(buf, len, "%.1f s", s);
    else if (t < 60) snprintf(buf, len, "%lld s", t);
    else if (t < 3600) snprintf(buf, len, "%lld:%02lld", t / 60, t % 60);
    else snprintf(buf, len, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

/* A step's time (s) from now on, after step s (0-based) is done. */
static double step_time(const run *r, long long s)
{
    return eta_step_time(r->rates, r->B, r->first, s);
}

/* Seconds left after step s (0-based) is done. */
static double eta_after(const run *r, long long s)
{
    return eta_after_step(r->rates, r->B, r->first, s, r->total, r->eval_nb);
}

static void line_done(train_progress *p)
{
    p->t_line = now_s();
}

#ifdef PROGRESS_THREAD
/* Every second: a line when a step or an evaluation batch has run for
 * --print-secs since the last line. */
static void *progress_thread(void *arg)
{
    run *r = arg;
    train_progress *p = r->pg;
    pthread_mutex_lock(&p->mu);
    while (!p->quit) {
        /* (a tick of a second, shorter for a short --print-secs) */
        double tick = r->o.print_secs < 2 ? r->o.print_secs / 2 : 1;
        if (tick < 0.05) tick = 0.05;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const long long ns = ts.tv_nsec + (long long)(tick * 1e9);
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        const double t = now_s();
        if (p->quit || !p->phase || t - p->t_item < r->o.print_secs ||
            t - p->t_line < r->o.print_secs)
            continue;
        char run_s[32], eta[32];
        progress_fmt_secs(t - p->t_item, run_s, sizeof run_s);
        /* the ETA at its start, less the time it has run, as long as that lasts */
        const double left = p->eta_at_start - (t - p->t_item);
        progress_fmt_secs(left, eta, sizeof eta);
        if (p->phase == 1)
            fprintf(stderr, "... step %lld running for %s (%lld of %lld%s%s)\n", p->item + 1, run_s,
                    p->item + 1, r->total, left >= 0.5 ? ", ETA " : "", left >= 0.5 ? eta : "");
        else
            fprintf(stderr, "eval: batch %lld of %zu running for %s%s%s\n", p->item + 1,
                    p->eval_nb, run_s, left >= 0.5 ? ", ETA " : "", left >= 0.5 ? eta : "");
        fflush(stderr);
        line_done(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}
#endif

int progress_begin(run *r)
{
    if (r->test) {
        size_t nb = hyfi_data_steps_per_epoch(hyfi_dataset_size(r->test), r->B);
        if (r->o.eval_batches > 0 && (size_t)r->o.eval_batches < nb) nb = (size_t)r->o.eval_batches;
        r->eval_nb = nb;
    }
    if (!r->lead) return 0;
    train_progress *p = calloc(1, sizeof *p);
    if (!p) {
        report(false, "out of memory for the progress display");
        return 1;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->t_line = p->t_step_line = now_s();
    r->pg = p;
#ifdef PROGRESS_THREAD
    /* (without the thread, lines still come after each step or batch) */
    if (r->o.print_secs > 0 && pthread_create(&p->th, NULL, progress_thread, r) == 0)
        p->have_thread = 1;
#endif
    return 0;
}

void progress_end(run *r)
{
    train_progress *p = r->pg;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->have_thread) pthread_join(p->th, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    r->pg = NULL;
}

void progress_step_start(run *r, long long s)
{
    train_progress *p = r->pg;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->phase = 1;
    p->item = s;
    p->t_item = now_s();
    p->eta_at_start = s > r->first ? eta_after(r, s - 1) : 0;
    pthread_mutex_unlock(&p->mu);
}

void progress_step_done(run *r, long long s, float l, double acc)
{
    train_progress *p = r->pg;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->phase = 0;
    const double t = now_s();
    const bool due = (s + 1) % r->o.print_freq == 0 || s == r->first || s + 1 == r->total ||
                     (r->o.print_secs > 0 && t - p->t_step_line >= r->o.print_secs);
    if (due) {
        char eta[48] = "";
        const double left = eta_after(r, s);
        if (s > r->first && (s + 1 < r->total || r->eval_nb)) { /* (step 1: StarPU's start) */
            snprintf(eta, sizeof eta, ", ETA ");
            progress_fmt_secs(left, eta + 6, sizeof eta - 6);
        }
        char accs[32] = ""; /* the batch's accuracy (none in a simulation) */
        if (isfinite(acc)) snprintf(accs, sizeof accs, " accuracy %.4f", acc);
        fprintf(stderr, "step %lld loss %.4f images/s %.1f%s (%lld of %lld%s)\n", s + 1, (double)l,
                r->rates[s], accs, s + 1, r->total, eta);
        fflush(stderr);
        /* MPI4DL's line: its rank 0 divides --batch-size (one replica's) by the time */
        if (r->o.print_mpi4dl) {
            printf("Epoch: %lld images per sec:%f\n", s / (long long)r->spe, r->rates[s] / r->nrep);
            fflush(stdout);
        }
        line_done(p);
        p->t_step_line = p->t_line;
    }
    pthread_mutex_unlock(&p->mu);
}

void progress_eval_start(run *r, size_t nb)
{
    train_progress *p = r->pg;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->eval_nb = nb;
    eta_eval_start(&p->eval, now_s(), r->done > r->first ? step_time(r, r->done - 1) / 3 : 0);
    p->eval_next = nb >= 10 ? (nb + 9) / 10 : nb;
    p->phase = 2;
    p->item = 0;
    p->t_item = p->eval.t0;
    p->eta_at_start = p->eval.est * (double)nb;
    pthread_mutex_unlock(&p->mu);
}

void progress_eval_batch(run *r, size_t k, size_t nb, size_t correct, size_t counted)
{
    train_progress *p = r->pg;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    const double t = now_s(), per = eta_eval_batch(&p->eval, k, t);
    const bool last = k + 1 == nb;
    /* every tenth, unless the evaluation is short; every --print-secs */
    if (!last && ((k + 1 >= p->eval_next && t - p->t_line >= 2) ||
                  (r->o.print_secs > 0 && t - p->t_line >= r->o.print_secs))) {
        char eta[32];
        progress_fmt_secs(per * (double)(nb - k - 1), eta, sizeof eta);
        fprintf(stderr, "eval: %zu/%zu batches, accuracy %.4f, ETA %s\n", k + 1, nb,
                counted ? (double)correct / (double)counted : 0.0, eta);
        fflush(stderr);
        line_done(p);
        while (p->eval_next <= k + 1) p->eval_next += (nb + 9) / 10;
    }
    p->item = (long long)k + 1;
    p->t_item = t;
    p->eta_at_start = per * (double)(nb - k - 1);
    pthread_mutex_unlock(&p->mu);
}

void progress_eval_done(run *r, size_t nb, double secs)
{
    r->eval_s = secs;
    train_progress *p = r->pg;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->phase = 0;
    char took[32];
    progress_fmt_secs(secs, took, sizeof took);
    if (secs < 60) snprintf(took, sizeof took, "%.2f s", secs);
    fprintf(stderr, "eval: %zu/%zu batches, accuracy %.4f, done in %s\n", nb, nb,
            r->have_acc ? r->acc : 0, took);
    fflush(stderr);
    line_done(p);
    pthread_mutex_unlock(&p->mu);
}

/* "steps 6-10" or "step 6" (1-based, inclusive) */
static void steps_range(long long a, long long b, char *buf, size_t len)
{
    if (a == b) snprintf(buf, len, "step %lld", a);
    else snprintf(buf, len, "steps %lld-%lld", a, b);
}

void progress_summary(run *r)
{
    char a[64], b[64], t[32];
    const long long n = r->done - r->first;
    /* the steps and their time */
    if (r->o.eval_only) {
        printf("summary: evaluation only (--eval-only)\n");
    } else {
        progress_fmt_secs(r->train_s, t, sizeof t);
        if (r->train_s < 60) snprintf(t, sizeof t, "%.2f s", r->train_s);
        printf("summary: %lld steps in %s", n, t);
        if (r->first > 0 && n > 0) {
            steps_range(r->first + 1, r->done, a, sizeof a);
            printf(" (%s; %lld before --resume)", a, r->first);
        } else if (r->first > 0) {
            printf(" (all %lld done before --resume)", r->first);
        }
        printf("\n");
    }
    /* images/s: after the warm-up, or all steps of a short run */
    if (r->nmeas > 0) {
        steps_range(r->done - r->nmeas + 1, r->done, a, sizeof a);
        steps_range(r->first + 1, r->first + WARMUP_STEPS, b, sizeof b);
        printf("  images/s mean %.1f median %.1f over %s (%s: warm-up, not counted)\n", r->mean,
               r->median, a, b);
    } else if (n > 0) {
        printf("  images/s %.1f over all %lld step%s (warm-up included; more than %d steps give "
               "a measure)\n", (double)r->B * (double)n / (r->train_s > 0 ? r->train_s : 1), n,
               n > 1 ? "s" : "", WARMUP_STEPS);
    }
    /* the test split */
    if (r->have_acc) {
        progress_fmt_secs(r->eval_s, t, sizeof t);
        if (r->eval_s < 60) snprintf(t, sizeof t, "%.2f s", r->eval_s);
        printf("  test accuracy %.4f (%zu/%zu) in %s, %zu batches\n", r->acc, r->correct,
               r->counted, t, r->eval_nb);
    } else {
        printf("  test accuracy: none (%s)\n", r->test ? "no test images" : "no test split");
    }
    /* peak resident memory of this process (each rank: its places) against the
     * bound hyfi states for it */
    hyfi_memory_stats ms;
    const int have_rss = hyfi_memory_stats_get(r->ctx, r->g, &ms) == HYFI_OK && ms.peak_mb > 0;
    int d = 1; /* the decimals (1 to 6) that print the peak and the bound apart */
    for (; have_rss && d < 6 && ms.peak_mb != ms.bound_mb; d++) {
        char x[32], y[32];
        snprintf(x, sizeof x, "%.*f", d, ms.peak_mb);
        snprintf(y, sizeof y, "%.*f", d, ms.bound_mb);
        if (strcmp(x, y)) break;
    }
    if (have_rss && r->lead)
        printf("  memory: %s %.*f MB at its peak, %s the stated bound of %.*f MB%s\n",
               r->nranks > 1 ? "rank 0 used" : "used", d, ms.peak_mb,
               ms.peak_mb <= ms.bound_mb ? "within" : "ABOVE", d, ms.bound_mb,
               r->nranks > 1 ? " (-v: every rank's)" : "");
    fflush(stdout);
    if (have_rss && r->o.verbose)
        fprintf(stderr,
                "hyfi-train: rank %d peak memory %.*f MB, %s the stated bound %.*f MB (%s %.0f "
                "+ process at start %.0f + graph %.0f + kernel scratch %.0f + allowance %.0f)\n",
                hyfi_ctx_rank(r->ctx), d, ms.peak_mb,
                ms.peak_mb <= ms.bound_mb ? "within" : "ABOVE", d, ms.bound_mb,
                ms.limit_mb > 0 ? "StarPU's limit" : "data estimate",
                ms.limit_mb > 0 ? ms.limit_mb : ms.data_mb, ms.start_mb, ms.graph_mb,
                ms.scratch_mb, ms.runtime_mb);
    metrics_summary(r, have_rss, have_rss ? ms.peak_mb : 0);
}
