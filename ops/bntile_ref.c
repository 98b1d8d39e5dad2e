/* bntile_ref.c: reference batch normalisation over tiles (see kernels.h):
 * per-tile statistics, their combination (Chan, Golub and LeVeque's pairwise
 * update of count, mean and M2), and the backward in three steps. Sums in
 * double. */
#include "kernels.h"

#include <math.h>

int hyfi_bn_stats_ref(double *part, const float *x, const hyfi_batchnorm_args *a)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double m = (double)N * (double)hw;
    for (size_t c = 0; c < C; c++) {
        double s = 0, s2 = 0;
        for (size_t n = 0; n < N; n++)
            for (size_t i = 0; i < hw; i++) s += x[(n * C + c) * hw + i]; /* x (N,C,H,W) */
        const double mean = m > 0 ? s / m : 0;
        for (size_t n = 0; n < N; n++)
            for (size_t i = 0; i < hw; i++) {
                const double d = x[(n * C + c) * hw + i] - mean;
                s2 += d * d;
            }
        part[c] = mean;
        part[C + c] = s2;
    }
    return 0;
}

int hyfi_bn_combine_ref(float *mean, float *var, float *run_mean, float *run_var,
                        const double *const *parts, const hyfi_bn_combine_args *a)
{
    const int C = a->c;
    for (int c = 0; c < C; c++) {
        double n = 0, mu = 0, m2 = 0;
        for (int i = 0; i < a->nparts; i++) {
            const double ni = a->count[i], mi = parts[i][c], m2i = parts[i][C + c];
            if (ni <= 0) continue;
            const double nn = n + ni, d = mi - mu;
            mu += d * ni / nn;
            m2 += m2i + d * d * n * ni / nn;
            n = nn;
        }
        const double v = n > 0 ? m2 / n : 0;
        mean[c] = (float)mu;
        var[c] = (float)v;
        const double unbias = n > 1 ? n / (n - 1) : 1.0, mom = a->momentum;
        run_mean[c] = (float)((1.0 - mom) * run_mean[c] + mom * mu);
        run_var[c] = (float)((1.0 - mom) * run_var[c] + mom * v * unbias);
    }
    return 0;
}

int hyfi_bn_bwd_stats_ref(double *part, const float *dy, const float *x, const float *mean,
                          const hyfi_batchnorm_args *a)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    for (size_t c = 0; c < C; c++) {
        double sdy = 0, sdyx = 0;
        const double mu = mean[c];
        for (size_t n = 0; n < N; n++)
            for (size_t i = 0; i < hw; i++) {
                const size_t k = (n * C + c) * hw + i; /* dy, x (N,C,H,W) */
                sdy += dy[k];
                sdyx += dy[k] * (x[k] - mu);
            }
        part[c] = sdy;
        part[C + c] = sdyx;
    }
    return 0;
}

int hyfi_bn_bwd_combine_ref(float *tot, float *dgamma, float *dbeta, const double *const *parts,
                            const float *var, const hyfi_bn_combine_args *a, int acc)
{
    const int C = a->c;
    for (int c = 0; c < C; c++) {
        double sdy = 0, sdyx = 0;
        for (int i = 0; i < a->nparts; i++) {
            sdy += parts[i][c];
            sdyx += parts[i][C + c];
        }
        tot[c] = (float)sdy;
        tot[C + c] = (float)sdyx;
        const double invstd = 1.0 / sqrt((double)var[c] + (double)a->eps);
        const float dg = (float)(sdyx * invstd), db = (float)sdy;
        dgamma[c] = (acc & HYFI_BN_ACC_PARAMS) ? dgamma[c] + dg : dg;
        dbeta[c] = (acc & HYFI_BN_ACC_PARAMS) ? dbeta[c] + db : db;
    }
    return 0;
}

int hyfi_bn_bwd_apply_ref(float *dx, const float *dy, const float *x, const float *gamma,
                          const float *mean, const float *var, const float *tot, double total,
                          const hyfi_batchnorm_args *a, int acc)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double M = total;
    for (size_t c = 0; c < C; c++) {
        const double mu = mean[c], invstd = 1.0 / sqrt((double)var[c] + (double)a->eps);
        const double sdy = tot[c], sdxh = (double)tot[C + c] * invstd; /* sum(dy * xhat) */
        const double k = gamma[c] * invstd / M;
        for (size_t n = 0; n < N; n++)
            for (size_t i = 0; i < hw; i++) {
                const size_t j = (n * C + c) * hw + i; /* dx, dy, x (N,C,H,W) */
                const double xhat = (x[j] - mu) * invstd;
                const double g = k * (M * dy[j] - sdy - xhat * sdxh);
                dx[j] = (float)((acc & HYFI_BN_ACC_DX) ? dx[j] + g : g);
            }
    }
    return 0;
}
