/* bntile_cpu.c: batch normalisation over tiles on the CPU, channels split over
 * the calling worker's OpenMP threads, SIMD sums in float per row block and in
 * double across blocks (as batchnorm_cpu.c). Same semantics as bntile_ref.c. */
#include "kernels.h"

#include <math.h>

#define HYFI_BNT_BLOCK 4096

int hyfi_bn_stats_cpu(double *part, const float *x, const hyfi_batchnorm_args *a)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double m = (double)N * (double)hw;
    const long nc = (long)C;
#pragma omp parallel for schedule(static)
    for (long ci = 0; ci < nc; ci++) {
        const size_t c = (size_t)ci;
        double s = 0, s2 = 0;
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw; /* x (N,C,H,W) */
            for (size_t i0 = 0; i0 < hw; i0 += HYFI_BNT_BLOCK) {
                const size_t i1 = i0 + HYFI_BNT_BLOCK < hw ? i0 + HYFI_BNT_BLOCK : hw;
                float b = 0;
#pragma omp simd reduction(+ : b)
                for (size_t i = i0; i < i1; i++) b += xp[i];
                s += b;
            }
        }
        const double mean = m > 0 ? s / m : 0;
        const float mf = (float)mean;
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;
            for (size_t i0 = 0; i0 < hw; i0 += HYFI_BNT_BLOCK) {
                const size_t i1 = i0 + HYFI_BNT_BLOCK < hw ? i0 + HYFI_BNT_BLOCK : hw;
                float b = 0;
#pragma omp simd reduction(+ : b)
                for (size_t i = i0; i < i1; i++) {
                    const float d = xp[i] - mf;
                    b += d * d;
                }
                s2 += b;
            }
        }
        /* M2 about the float mean, corrected to the exact mean */
        const double dm = (double)mf - mean;
        part[c] = mean;
        part[C + c] = s2 - m * dm * dm;
    }
    return 0;
}

int hyfi_bn_combine_cpu(float *mean, float *var, float *run_mean, float *run_var,
                        const double *const *parts, const hyfi_bn_combine_args *a)
{
    return hyfi_bn_combine_ref(mean, var, run_mean, run_var, parts, a); /* O(C * tiles) */
}

int hyfi_bn_bwd_stats_cpu(double *part, const float *dy, const float *x, const float *mean,
                          const hyfi_batchnorm_args *a)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const long nc = (long)C;
#pragma omp parallel for schedule(static)
    for (long ci = 0; ci < nc; ci++) {
        const size_t c = (size_t)ci;
        const float mu = mean[c];
        double sdy = 0, sdyx = 0;
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;   /* x (N,C,H,W) */
            const float *dyp = dy + (n * C + c) * hw; /* dy (N,C,H,W) */
            for (size_t i0 = 0; i0 < hw; i0 += HYFI_BNT_BLOCK) {
                const size_t i1 = i0 + HYFI_BNT_BLOCK < hw ? i0 + HYFI_BNT_BLOCK : hw;
                float p = 0, q = 0;
#pragma omp simd reduction(+ : p, q)
                for (size_t i = i0; i < i1; i++) {
                    p += dyp[i];
                    q += dyp[i] * (xp[i] - mu);
                }
                sdy += p;
                sdyx += q;
            }
        }
        part[c] = sdy;
        part[C + c] = sdyx;
    }
    return 0;
}

int hyfi_bn_bwd_combine_cpu(float *tot, float *dgamma, float *dbeta, const double *const *parts,
                            const float *var, const hyfi_bn_combine_args *a, int acc)
{
    return hyfi_bn_bwd_combine_ref(tot, dgamma, dbeta, parts, var, a, acc); /* O(C * tiles) */
}

int hyfi_bn_bwd_apply_cpu(float *dx, const float *dy, const float *x, const float *gamma,
                          const float *mean, const float *var, const float *tot, double total,
                          const hyfi_batchnorm_args *a, int acc)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double M = total;
    const long nc = (long)C;
#pragma omp parallel for schedule(static)
    for (long ci = 0; ci < nc; ci++) {
        const size_t c = (size_t)ci;
        const float mu = mean[c];
        const double invstd = 1.0 / sqrt((double)var[c] + (double)a->eps);
        const double sdy = tot[c], dg = (double)tot[C + c] * invstd;
        /* dx = k (M dy - sdy - xhat dg) = A dy + B (x - mean) + D, as batchnorm_cpu.c */
        const double k = gamma[c] * invstd / M;
        const float A = (float)(k * M), B = (float)(-k * invstd * dg), D = (float)(-k * sdy);
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;
            const float *dyp = dy + (n * C + c) * hw;
            float *dxp = dx + (n * C + c) * hw; /* dx (N,C,H,W) */
            if (acc & HYFI_BN_ACC_DX) {
#pragma omp simd
                for (size_t i = 0; i < hw; i++) dxp[i] += A * dyp[i] + B * (xp[i] - mu) + D;
            } else {
#pragma omp simd
                for (size_t i = 0; i < hw; i++) dxp[i] = A * dyp[i] + B * (xp[i] - mu) + D;
            }
        }
    }
    return 0;
}
