/* test_train_eta: hyfi-train's ETA (apps/train_eta.c) on made-up step and
 * test batch times, no StarPU:
 *   - the steps slow down 3x mid-run (another job starts), then speed up
 *     again: ETA_RUN steps after each change the ETA is the new speed's time
 *     left within 10%, and at every step it lies between the old and the new
 *     speed's (no overshoot);
 *   - steady times with +-10% noise, and steps that alternate 1 s and 2 s:
 *     the mean, not a jump after each step;
 *   - the first step (StarPU's start) left out; a resumed run's steps before
 *     its first not counted; the evaluation's third of a step added;
 *   - unmeasured, infinite and NaN rates, the last step, a step past the
 *     end: never negative, never NaN;
 *   - the evaluation's ETA: the estimate before its third batch, then its own
 *     batches' time, following a slow-down the same way. */
#include "train_eta.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

static int fails;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAILED (line %d): ", __LINE__);                                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

#define N 60
#define B 8.0

/* a deterministic noise in [-1, 1] */
static double noise(unsigned *state)
{
    *state = *state * 1103515245u + 12345u;
    return (double)((*state >> 8) % 2001u) / 1000.0 - 1.0;
}

/* The steps of `secs` (step 0 slow: StarPU's start): after each, the ETA
 * against the time the current speed leaves. */
static void speed_changes(void)
{
    double rates[N], secs[N];
    for (int s = 0; s < N; s++) {
        secs[s] = s == 0 ? 30.0 : s < 20 ? 1.0 : s < 40 ? 3.0 : 1.0;
        rates[s] = B / secs[s];
    }
    int followed_slow = -1, followed_fast = -1;
    for (int s = 0; s < N; s++) {
        const double eta = eta_after_step(rates, B, 0, s, N, 0);
        const double left = (double)(N - s - 1);
        CHECK(isfinite(eta) && eta >= 0, "step %d: ETA %g", s + 1, eta);
        if (s == 0) { /* the first step alone: its own time */
            CHECK(fabs(eta - 30.0 * left) < 1e-9, "step 1: ETA %g, want %g", eta, 30 * left);
            continue;
        }
        /* never outside the old and the new speed's (the first step left out) */
        CHECK(eta >= 1.0 * left - 1e-9 && eta <= 3.0 * left + 1e-9, "step %d: ETA %g out of [%g, %g]",
              s + 1, eta, left, 3 * left);
        if (s < 20) CHECK(fabs(eta - left) < 1e-9, "step %d: ETA %g, want %g", s + 1, eta, left);
        const double want = secs[s] * left;
        const bool near = fabs(eta - want) <= 0.1 * want + 1e-9;
        if (s >= 20 && s < 40 && near && followed_slow < 0) followed_slow = s - 19;
        if (s >= 40 && near && followed_fast < 0) followed_fast = s - 39;
        if ((s >= 20 + ETA_RUN - 1 && s < 40) || s >= 40 + ETA_RUN - 1)
            CHECK(near, "step %d (%d at the new speed): ETA %g, want %g within 10%%", s + 1,
                  s < 40 ? s - 19 : s - 39, eta, want);
    }
    printf("slow-down 1 s -> 3 s per step: the ETA follows after %d steps; speed-up 3 s -> 1 s: "
           "after %d (ETA_RUN %d, window %d)\n", followed_slow, followed_fast, ETA_RUN, ETA_WINDOW);
}

/* Noise and alternation: the window's mean. */
static void steady(void)
{
    double rates[N];
    unsigned st = 12345;
    for (int s = 0; s < N; s++) rates[s] = B / (s == 0 ? 20.0 : 1.0 + 0.1 * noise(&st));
    for (int s = 1; s < N - 1; s++) {
        const double t = eta_step_time(rates, B, 0, s);
        CHECK(t > 0.9 && t < 1.1, "noisy step %d: step time %g, want 1 +- 10%%", s + 1, t);
    }
    for (int s = 0; s < N; s++) rates[s] = B / (s == 0 ? 20.0 : s % 2 ? 1.0 : 2.0);
    for (int s = ETA_WINDOW; s < N - 1; s++) {
        const double t = eta_step_time(rates, B, 0, s);
        CHECK(fabs(t - 1.5) < 0.11, "alternating step %d: step time %g, want 1.5 +- 0.1", s + 1, t);
    }
}

/* A resumed run, the evaluation's share, and bad rates. */
static void edges(void)
{
    double rates[N] = {0};
    for (int s = 30; s < N; s++) rates[s] = B / (s == 30 ? 9.0 : 2.0);
    /* resumed at step 31: its first step (9 s) alone, then without it */
    CHECK(fabs(eta_step_time(rates, B, 30, 30) - 9.0) < 1e-9, "resumed: first step");
    CHECK(fabs(eta_step_time(rates, B, 30, 31) - 2.0) < 1e-9, "resumed: second step");
    CHECK(eta_step_time(rates, B, 30, 29) == 0, "before the first step: no time");
    /* 10 test batches at a third of a 2 s step, after step 35 of 60 */
    const double eta = eta_after_step(rates, B, 30, 35, N, 10);
    CHECK(fabs(eta - (2.0 * 24 + 2.0 / 3 * 10)) < 1e-9, "evaluation share: ETA %g", eta);
    CHECK(eta_after_step(rates, B, 30, N - 1, N, 0) == 0, "after the last step: ETA not 0");
    CHECK(eta_after_step(rates, B, 30, N + 5, N, 0) == 0, "past the end: ETA not 0");
    /* unmeasured, infinite, NaN rates */
    double bad[12] = {0, 8, INFINITY, NAN, 0, -1, 8, 8, NAN, 8, 0, INFINITY};
    for (int s = 0; s < 12; s++) {
        const double e = eta_after_step(bad, B, 0, s, 12, 3);
        CHECK(isfinite(e) && e >= 0, "bad rates, step %d: ETA %g", s + 1, e);
    }
    const double none[3] = {0, 0, 0};
    CHECK(eta_after_step(none, B, 0, 1, 3, 0) == 0, "no rates: ETA not 0");
    const double odd[4] = {NAN, -2, INFINITY, 1};
    CHECK(eta_recent_mean(odd, 4) == 1, "recent mean of NaN, -2, inf, 1: %g",
          eta_recent_mean(odd, 4));
    CHECK(eta_recent_mean(odd, 0) == 0, "recent mean of nothing");
}

/* The evaluation: batch 0 fills the prefetch (5 s), then 0.1 s per batch,
 * 0.3 s from batch 20 on. */
static void evaluation(void)
{
    eta_eval e;
    eta_eval_start(&e, 100.0, 0.5);
    double t = 100.0;
    int followed = -1;
    for (size_t k = 0; k < 40; k++) {
        const double d = k == 0 ? 5.0 : k < 20 ? 0.1 : 0.3;
        t += d;
        const double per = eta_eval_batch(&e, k, t);
        CHECK(isfinite(per) && per >= 0, "eval batch %zu: %g", k + 1, per);
        if (k + 1 < ETA_EVAL_MEASURED) {
            CHECK(per == 0.5, "eval batch %zu: %g, want the estimate 0.5", k + 1, per);
        } else if (k < 20) {
            CHECK(fabs(per - 0.1) < 1e-9, "eval batch %zu: %g, want 0.1 (batch 1 left out)",
                  k + 1, per);
        } else {
            const bool near = fabs(per - 0.3) <= 0.03 + 1e-9;
            if (near && followed < 0) followed = (int)k - 19;
            if (k >= 20 + ETA_RUN - 1) CHECK(near, "eval batch %zu: %g, want 0.3", k + 1, per);
        }
    }
    printf("evaluation 0.1 s -> 0.3 s per batch: the ETA follows after %d batches\n", followed);
    /* no estimate: the first batch's own time, then the measure */
    eta_eval_start(&e, 0.0, 0);
    CHECK(eta_eval_batch(&e, 0, 2.0) == 2.0, "eval without an estimate: the first batch");
    CHECK(fabs(eta_eval_batch(&e, 1, 2.5) - 0.5) < 1e-9, "eval without an estimate: batch 2");
}

int main(void)
{
    speed_changes();
    steady();
    edges();
    evaluation();
    if (fails) {
        fprintf(stderr, "test_train_eta: %d failed\n", fails);
        return 1;
    }
    printf("test_train_eta: ok\n");
    return 0;
}
