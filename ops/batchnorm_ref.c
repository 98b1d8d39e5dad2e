/* batchnorm_ref.c: naive reference of batch normalisation (the specification
 * and the test oracle of the batchnorm family).
 *
 * Per channel c, over the M = N*H*W values of x[:, c, :, :]:
 *   training forward: mean = sum(x)/M, var = sum((x-mean)^2)/M (biased),
 *     y = gamma * (x - mean) / sqrt(var + eps) + beta; mean and var are saved;
 *     run_mean = (1-m)*run_mean + m*mean,
 *     run_var  = (1-m)*run_var  + m*var*M/(M-1)  (unbiased; factor 1 when M == 1).
 *   eval forward: the same normalisation with run_mean / run_var.
 *   backward of the training forward, with xhat = (x-mean)*invstd,
 *     invstd = 1/sqrt(var+eps):
 *     dbeta = sum(dy), dgamma = sum(dy*xhat),
 *     dx = gamma*invstd/M * (M*dy - dbeta - xhat*dgamma).
 * Sums are accumulated in double.
 * With a->relu (batch norm and the ReLU after it as one op, CPU only): the
 * forwards write y = max(0, bn(x)); the backward takes that y and first masks
 * dy where y <= 0 (ReLU's backward).
 */
#include "kernels.h"

#include <math.h>

int hyfi_batchnorm_forward_train_ref(float *y, float *mean, float *var, float *run_mean,
                                     float *run_var, const float *x, const float *gamma,
                                     const float *beta, const hyfi_batchnorm_args *a)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double M = (double)N * (double)hw;
    const double unbias = M > 1.0 ? M / (M - 1.0) : 1.0;
    const double mom = a->momentum;
    for (size_t c = 0; c < C; c++) {
        double s = 0;
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;           /* x (N,C,H,W) */
            for (size_t i = 0; i < hw; i++) s += xp[i];
        }
        const double mu = s / M;
        double ss = 0;
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;
            for (size_t i = 0; i < hw; i++) {
                double d = xp[i] - mu;
                ss += d * d;
            }
        }
        const double v = ss / M;
        const double invstd = 1.0 / sqrt(v + (double)a->eps);
        const double g = gamma[c], b = beta[c];
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;
            float *yp = y + (n * C + c) * hw;                 /* y (N,C,H,W) */
            for (size_t i = 0; i < hw; i++) {
                const float v = (float)(g * (xp[i] - mu) * invstd + b);
                yp[i] = a->relu && !(v > 0.0f) ? 0.0f : v;
            }
        }
        mean[c] = (float)mu;
        var[c] = (float)v;
        run_mean[c] = (float)((1.0 - mom) * run_mean[c] + mom * mu);
        run_var[c] = (float)((1.0 - mom) * run_var[c] + mom * v * unbias);
    }
    return 0;
}

int hyfi_batchnorm_forward_eval_ref(float *y, const float *x, const float *gamma,
                                    const float *beta, const float *run_mean,
                                    const float *run_var, const hyfi_batchnorm_args *a)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    for (size_t c = 0; c < C; c++) {
        const double mu = run_mean[c];
        const double invstd = 1.0 / sqrt((double)run_var[c] + (double)a->eps);
        const double g = gamma[c], b = beta[c];
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;           /* x (N,C,H,W) */
            float *yp = y + (n * C + c) * hw;                 /* y (N,C,H,W) */
            for (size_t i = 0; i < hw; i++) {
                const float v = (float)(g * (xp[i] - mu) * invstd + b);
                yp[i] = a->relu && !(v > 0.0f) ? 0.0f : v;
            }
        }
    }
    return 0;
}

int hyfi_batchnorm_backward_ref(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, const float *y,
                                const float *mean, const float *var, const hyfi_batchnorm_args *a,
                                int acc)
{
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double M = (double)N * (double)hw;
    for (size_t c = 0; c < C; c++) {
        const double mu = mean[c];
        const double invstd = 1.0 / sqrt((double)var[c] + (double)a->eps);
        double sdy = 0, sdyx = 0;
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;           /* x (N,C,H,W) */
            const float *dyp = dy + (n * C + c) * hw;         /* dy (N,C,H,W) */
            const float *yp = a->relu ? y + (n * C + c) * hw : dyp; /* y (N,C,H,W) */
            for (size_t i = 0; i < hw; i++) {
                const float g = a->relu && !(yp[i] > 0.0f) ? 0.0f : dyp[i];
                sdy += g;
                sdyx += g * ((xp[i] - mu) * invstd);
            }
        }
        const double k = gamma[c] * invstd / M;
        for (size_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * hw;
            const float *dyp = dy + (n * C + c) * hw;
            const float *yp = a->relu ? y + (n * C + c) * hw : dyp;
            float *dxp = dx + (n * C + c) * hw;               /* dx (N,C,H,W) */
            for (size_t i = 0; i < hw; i++) {
                const float d = a->relu && !(yp[i] > 0.0f) ? 0.0f : dyp[i];
                double xhat = (xp[i] - mu) * invstd;
                double g = k * (M * d - sdy - xhat * sdyx);
                dxp[i] = (float)((acc & HYFI_BN_ACC_DX) ? dxp[i] + g : g);
            }
        }
        dgamma[c] = (acc & HYFI_BN_ACC_PARAMS) ? dgamma[c] + (float)sdyx : (float)sdyx;
        dbeta[c] = (acc & HYFI_BN_ACC_PARAMS) ? dbeta[c] + (float)sdy : (float)sdy;
    }
    return 0;
}
