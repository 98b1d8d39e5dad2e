/* hyfi-train's time-left estimates (train_eta.h says how they follow the
 * machine's load). */
#include "train_eta.h"

#include <math.h>
#include <stdbool.h>

static double mean_of(const double *v, size_t a, size_t b) /* v[a..b-1], a < b */
{
    double sum = 0;
    for (size_t i = a; i < b; i++) sum += v[i];
    return sum / (double)(b - a);
}

double eta_recent_mean(const double *t, size_t n)
{
    if (n > ETA_WINDOW) {
        t += n - ETA_WINDOW;
        n = ETA_WINDOW;
    }
    double v[ETA_WINDOW];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(t[i]) && t[i] >= 0) v[m++] = t[i];
    if (!m) return 0;
    /* the longest run of last times (ETA_RUN or more, after at least one
     * other) all ETA_SHIFT times above, or below, the mean of those before */
    size_t from = 0;
    for (size_t j = 1; j + ETA_RUN <= m && !from; j++) {
        const double before = mean_of(v, 0, j);
        bool up = true, down = true;
        for (size_t k = j; k < m; k++) {
            up = up && v[k] > before * ETA_SHIFT;
            down = down && v[k] * ETA_SHIFT < before;
        }
        if (up || down) from = j;
    }
    return mean_of(v, from, m);
}

double eta_step_time(const double *rates, double batch, long long first, long long s)
{
    if (s < first) return 0;
    long long from = s - (ETA_WINDOW - 1) > first + 1 ? s - (ETA_WINDOW - 1) : first + 1;
    if (from > s) from = first; /* only the first step so far */
    double t[ETA_WINDOW];
    size_t n = 0;
    for (long long k = from; k <= s; k++)
        if (rates[k] > 0) t[n++] = batch / rates[k];
    return eta_recent_mean(t, n);
}

double eta_after_step(const double *rates, double batch, long long first, long long s,
                      long long total, size_t eval_nb)
{
    if (s >= total) return 0; /* (rates holds the run's total steps) */
    const double st = eta_step_time(rates, batch, first, s);
    const long long left = total - s - 1 > 0 ? total - s - 1 : 0;
    const double eta = st * (double)left + st / 3 * (double)eval_nb;
    return isfinite(eta) && eta > 0 ? eta : 0;
}

void eta_eval_start(eta_eval *e, double t0, double est)
{
    e->t0 = t0;
    e->est = isfinite(est) && est > 0 ? est : 0;
    for (size_t i = 0; i < ETA_WINDOW + 1; i++) e->end[i] = t0;
}

double eta_eval_batch(eta_eval *e, size_t k, double t)
{
    e->end[k % (ETA_WINDOW + 1)] = t;
    if (k + 1 < ETA_EVAL_MEASURED && e->est > 0) return e->est;
    if (k == 0) return t - e->t0 > 0 ? t - e->t0 : 0;
    /* batches k-w+1 .. k, each from the end of the one before */
    const size_t w = k < ETA_WINDOW ? k : ETA_WINDOW;
    double d[ETA_WINDOW];
    for (size_t i = 0; i < w; i++) {
        const size_t j = k - w + 1 + i;
        d[i] = e->end[j % (ETA_WINDOW + 1)] - e->end[(j - 1) % (ETA_WINDOW + 1)];
    }
    return eta_recent_mean(d, w);
}
