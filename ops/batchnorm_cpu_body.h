/* batchnorm_cpu_body.h: the CPU batch normalisation of batchnorm_cpu.c,
 * written once over the activations' storage type. Included by
 * batchnorm_cpu.c (float32 storage) and batchnorm_cpu_bf16.c (bf16 storage),
 * each defining before the include:
 *   BN_T             the element type of x, y, dx, dy (float or uint16_t)
 *   BN_LD(v)         an element as float (exact)
 *   BN_ST(f)         a float as an element (bf16: rounded to nearest even)
 *   BN_STN(p, v, B)  B floats v as elements at p (BN_ST each)
 *   BN_LDN(v, p, B)  B elements at p as floats v (BN_LD each)
 *   BN_VIEW_DECL(b)  declares scratch b for BN_VIEW
 *   BN_VIEW(b, p, n) n elements from p as a const float * (p itself for float
 *                    storage; widened into b, at most HYFI_BN_BLOCK, for bf16)
 *   BN_NAME(op)      the public name of op (forward_train, forward_eval,
 *                    backward)
 * The statistics, scales and parameter gradients are float32 in both; every
 * sum runs over the same float values in the same order, so the bf16 kernels
 * give bit for bit what staging the buffers in float32 around the float
 * kernels gives (tests/test_op_convert.c). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#define HYFI_BN_BLOCK 4096
/* The blocked layouts' per-lane loops, inlined into callers where B is a
 * literal (8 or 16), so that the lanes are vector code: with B a variable they
 * ran at 60% of the float32 kernels' speed on bf16 storage (2-core EPYC,
 * 32x16x32x32 in nChw16c, forward 0.092 against 0.056 ms). Per lane the sums
 * run in the same order either way: the same bits. */
#define BN_LANES static inline __attribute__((always_inline))
#define HYFI_BN_MAXB 16 /* largest channel block */

/* ------------------------------------------------------- blocked layouts */
/* y = (x - mu) * scale + shift over image n of channel block cb, per lane j.
 * y, x (N, C/B, H, W, B). */
BN_LANES void block_affine_b(BN_T *y, const BN_T *x, size_t CB, size_t hw, int B, size_t n,
                         size_t cb, const float *coef, int relu)
{
    const BN_T *xp = x + (n * CB + cb) * hw * B;
    BN_T *yp = y + (n * CB + cb) * hw * B;
    float mu[HYFI_BN_MAXB], scale[HYFI_BN_MAXB], shift[HYFI_BN_MAXB]; /* coef (3, B) */
    for (int j = 0; j < B; j++) mu[j] = coef[j], scale[j] = coef[B + j], shift[j] = coef[2 * B + j];
    for (size_t i = 0; i < hw; i++) {
        float v[HYFI_BN_MAXB], xv[HYFI_BN_MAXB];
        BN_LDN(xv, xp + i * B, B);
        if (relu) {
#pragma omp simd
            for (int j = 0; j < B; j++) {
                const float t = (xv[j] - mu[j]) * scale[j] + shift[j];
                v[j] = t > 0.0f ? t : 0.0f;
            }
        } else {
#pragma omp simd
            for (int j = 0; j < B; j++) v[j] = (xv[j] - mu[j]) * scale[j] + shift[j];
        }
        BN_STN(yp + i * B, v, B);
    }
}

/* block_affine with B a literal (8 or 16): its lane loops vector code */
static void block_affine(BN_T *y, const BN_T *x, size_t CB, size_t hw, int B, size_t n,
                         size_t cb, const float *coef, int relu)
{
    if (B == 16) block_affine_b(y, x, CB, hw, 16, n, cb, coef, relu);
    else if (B == 8) block_affine_b(y, x, CB, hw, 8, n, cb, coef, relu);
    else block_affine_b(y, x, CB, hw, B, n, cb, coef, relu);
}

/* The sums of a blocked pass are taken per (channel block, image) pair, in
 * double across the row blocks, and added over the images in order, so that
 * they do not depend on how the pairs are shared among threads. With at
 * least as many channel blocks as threads, each thread takes whole blocks
 * (both passes over a block while it is in cache); with fewer (ResNets'
 * first stage: one block of 16 channels, which ran on one thread) the threads
 * share the pairs of each pass. part: (CB, N, 2, B) doubles. */
extern int omp_get_max_threads(void);

static double *blk_parts(size_t CB, size_t N, int B)
{
    return malloc(CB * N * 2 * (size_t)B * sizeof(double));
}

/* part (2, B) of pair (cb, n): sums of x - k and (x - k)^2, k = x[0, cb, 0, 0] */
BN_LANES void fwd_pair_sums_b(double *part, const BN_T *x, size_t CB, size_t hw, int B, size_t n,
                          size_t cb)
{
    float k[HYFI_BN_MAXB];
    for (int j = 0; j < B; j++) k[j] = BN_LD(x[cb * hw * B + j]); /* x[0, c0 + j, 0, 0] */
    const BN_T *xp = x + (n * CB + cb) * hw * B;
    double s1[HYFI_BN_MAXB] = {0}, s2[HYFI_BN_MAXB] = {0};
    for (size_t i0 = 0; i0 < hw; i0 += HYFI_BN_BLOCK) {
        const size_t i1 = i0 + HYFI_BN_BLOCK < hw ? i0 + HYFI_BN_BLOCK : hw;
        float fa[HYFI_BN_MAXB] = {0}, fb[HYFI_BN_MAXB] = {0};
        for (size_t i = i0; i < i1; i++) {
            float xv[HYFI_BN_MAXB];
            BN_LDN(xv, xp + i * B, B);
#pragma omp simd
            for (int j = 0; j < B; j++) {
                const float d = xv[j] - k[j];
                fa[j] += d;
                fb[j] += d * d;
            }
        }
        for (int j = 0; j < B; j++) s1[j] += fa[j], s2[j] += fb[j];
    }
    for (int j = 0; j < B; j++) part[j] = s1[j], part[B + j] = s2[j];
}

/* fwd_pair_sums with B a literal (8 or 16): its lane loops vector code */
static void fwd_pair_sums(double *part, const BN_T *x, size_t CB, size_t hw, int B, size_t n,
                          size_t cb)
{
    if (B == 16) fwd_pair_sums_b(part, x, CB, hw, 16, n, cb);
    else if (B == 8) fwd_pair_sums_b(part, x, CB, hw, 8, n, cb);
    else fwd_pair_sums_b(part, x, CB, hw, B, n, cb);
}

/* Block cb's statistics from its pairs' sums: coef (3, B) = mu, scale, shift,
 * and the saved and running statistics. */
static void fwd_block_coef(float *coef, const double *part, size_t cb, size_t N, int B,
                           const BN_T *x, size_t hw, float *mean, float *var, float *run_mean,
                           float *run_var, const float *gamma, const float *beta,
                           const hyfi_batchnorm_args *a)
{
    const double M = (double)N * (double)hw;
    const double unbias = M > 1.0 ? M / (M - 1.0) : 1.0;
    const double mom = a->momentum;
    for (int j = 0; j < B; j++) {
        const size_t c = cb * (size_t)B + (size_t)j;
        double t1 = 0, t2 = 0;
        for (size_t n = 0; n < N; n++) {
            t1 += part[(cb * N + n) * 2 * B + j];
            t2 += part[((cb * N + n) * 2 + 1) * B + j];
        }
        const double d = t1 / M;
        double v = t2 / M - d * d;
        if (v < 0) v = 0;
        const double m = BN_LD(x[cb * hw * B + j]) + d;
        const double invstd = 1.0 / sqrt(v + (double)a->eps);
        coef[j] = (float)m;
        coef[B + j] = (float)(gamma[c] * invstd);
        coef[2 * B + j] = beta[c];
        mean[c] = (float)m;
        var[c] = (float)v;
        run_mean[c] = (float)((1.0 - mom) * run_mean[c] + mom * m);
        run_var[c] = (float)((1.0 - mom) * run_var[c] + mom * v * unbias);
    }
}

/* x, y (N, C/B, H, W, B) */
static int bn_forward_train_blk(BN_T *y, float *mean, float *var, float *run_mean,
                                float *run_var, const BN_T *x, const float *gamma,
                                const float *beta, const hyfi_batchnorm_args *a, int B)
{
    const size_t hw = (size_t)a->h * a->w, N = (size_t)a->n, CB = (size_t)a->c / (size_t)B;
    if (B > HYFI_BN_MAXB || a->c % B) return -1;
    double *part = blk_parts(CB, N, B);
    float *coef = malloc(3 * CB * (size_t)B * sizeof(float)); /* (CB, 3, B) */
    if (!part || !coef) {
        free(part), free(coef);
        return -1;
    }
    if (CB >= (size_t)omp_get_max_threads()) {
        const long ncb = (long)CB;
#pragma omp parallel for schedule(static)
        for (long cbi = 0; cbi < ncb; cbi++) {
            const size_t cb = (size_t)cbi;
            for (size_t n = 0; n < N; n++)
                fwd_pair_sums(part + (cb * N + n) * 2 * B, x, CB, hw, B, n, cb);
            fwd_block_coef(coef + 3 * cb * B, part, cb, N, B, x, hw, mean, var, run_mean,
                           run_var, gamma, beta, a);
            for (size_t n = 0; n < N; n++)
                block_affine(y, x, CB, hw, B, n, cb, coef + 3 * cb * B, a->relu);
        }
    } else {
        const long npair = (long)(CB * N);
#pragma omp parallel for schedule(static)
        for (long pi = 0; pi < npair; pi++)
            fwd_pair_sums(part + (size_t)pi * 2 * B, x, CB, hw, B, (size_t)pi % N,
                          (size_t)pi / N);
        for (size_t cb = 0; cb < CB; cb++)
            fwd_block_coef(coef + 3 * cb * B, part, cb, N, B, x, hw, mean, var, run_mean,
                           run_var, gamma, beta, a);
#pragma omp parallel for schedule(static)
        for (long pi = 0; pi < npair; pi++) {
            const size_t cb = (size_t)pi / N;
            block_affine(y, x, CB, hw, B, (size_t)pi % N, cb, coef + 3 * cb * B, a->relu);
        }
    }
    free(part), free(coef);
    return 0;
}

static int bn_forward_eval_blk(BN_T *y, const BN_T *x, const float *gamma, const float *beta,
                               const float *run_mean, const float *run_var,
                               const hyfi_batchnorm_args *a, int B)
{
    const size_t hw = (size_t)a->h * a->w, N = (size_t)a->n, CB = (size_t)a->c / (size_t)B;
    if (B > HYFI_BN_MAXB || a->c % B) return -1;
    float *coef = malloc(3 * CB * (size_t)B * sizeof(float));
    if (!coef) return -1;
    for (size_t cb = 0; cb < CB; cb++) {
        float *mu = coef + 3 * cb * B, *scale = mu + B, *shift = scale + B;
        for (int j = 0; j < B; j++) {
            const size_t c = cb * (size_t)B + (size_t)j;
            mu[j] = run_mean[c];
            const double invstd = 1.0 / sqrt((double)run_var[c] + (double)a->eps);
            scale[j] = (float)(gamma[c] * invstd);
            shift[j] = beta[c];
        }
    }
    const long npair = (long)(CB * N);
#pragma omp parallel for schedule(static)
    for (long pi = 0; pi < npair; pi++) {
        const size_t cb = (size_t)pi / N;
        block_affine(y, x, CB, hw, B, (size_t)pi % N, cb, coef + 3 * cb * B, a->relu);
    }
    free(coef);
    return 0;
}

/* dy where the fused ReLU's output y let it through; both are loaded first (a
 * load under the condition would keep the loop scalar, with a branch on a
 * random mask: 15x slower, measured) */
static inline float bn_masked(float dy, float y) { return y > 0.0f ? dy : 0.0f; }

/* part (2, B) of pair (cb, n): sums of dy' and dy' (x - mean), dy' = dy masked
 * by the fused ReLU's y > 0 */
BN_LANES void bwd_pair_sums_b(double *part, const BN_T *dy, const BN_T *x, const BN_T *y,
                          const float *mean, size_t CB, size_t hw, int B, size_t n, size_t cb,
                          int relu)
{
    float mu[HYFI_BN_MAXB];
    for (int j = 0; j < B; j++) mu[j] = mean[cb * (size_t)B + (size_t)j];
    double sdy[HYFI_BN_MAXB] = {0}, sdyx[HYFI_BN_MAXB] = {0};
    const BN_T *xp = x + (n * CB + cb) * hw * B;
    const BN_T *dyp = dy + (n * CB + cb) * hw * B;
    const BN_T *yp = relu ? y + (n * CB + cb) * hw * B : dyp;
    for (size_t i0 = 0; i0 < hw; i0 += HYFI_BN_BLOCK) {
        const size_t i1 = i0 + HYFI_BN_BLOCK < hw ? i0 + HYFI_BN_BLOCK : hw;
        float p[HYFI_BN_MAXB] = {0}, q[HYFI_BN_MAXB] = {0};
        for (size_t i = i0; i < i1; i++) {
            float xv[HYFI_BN_MAXB], gv[HYFI_BN_MAXB], yv[HYFI_BN_MAXB];
            BN_LDN(xv, xp + i * B, B);
            BN_LDN(gv, dyp + i * B, B);
            if (relu) {
                BN_LDN(yv, yp + i * B, B);
#pragma omp simd
                for (int j = 0; j < B; j++) {
                    const float g = bn_masked(gv[j], yv[j]);
                    p[j] += g;
                    q[j] += g * (xv[j] - mu[j]);
                }
            } else {
#pragma omp simd
                for (int j = 0; j < B; j++) {
                    const float g = gv[j];
                    p[j] += g;
                    q[j] += g * (xv[j] - mu[j]);
                }
            }
        }
        for (int j = 0; j < B; j++) sdy[j] += p[j], sdyx[j] += q[j];
    }
    for (int j = 0; j < B; j++) part[j] = sdy[j], part[B + j] = sdyx[j];
}

/* bwd_pair_sums with B a literal (8 or 16): its lane loops vector code */
static void bwd_pair_sums(double *part, const BN_T *dy, const BN_T *x, const BN_T *y,
                          const float *mean, size_t CB, size_t hw, int B, size_t n, size_t cb,
                          int relu)
{
    if (B == 16) bwd_pair_sums_b(part, dy, x, y, mean, CB, hw, 16, n, cb, relu);
    else if (B == 8) bwd_pair_sums_b(part, dy, x, y, mean, CB, hw, 8, n, cb, relu);
    else bwd_pair_sums_b(part, dy, x, y, mean, CB, hw, B, n, cb, relu);
}

/* Block cb's coefficients from its pairs' sums: coef (4, B) = mean, A, Bc, D
 * (dx = A dy' + Bc (x - mean) + D), and dgamma, dbeta. */
static void bwd_block_coef(float *coef, const double *part, size_t cb, size_t N, size_t hw, int B,
                           float *dgamma, float *dbeta, const float *gamma, const float *mean,
                           const float *var, const hyfi_batchnorm_args *a, int acc)
{
    const double M = (double)N * (double)hw;
    for (int j = 0; j < B; j++) {
        const size_t c = cb * (size_t)B + (size_t)j;
        double sdy = 0, sdyx = 0;
        for (size_t n = 0; n < N; n++) {
            sdy += part[(cb * N + n) * 2 * B + j];
            sdyx += part[((cb * N + n) * 2 + 1) * B + j];
        }
        const double invstd = 1.0 / sqrt((double)var[c] + (double)a->eps);
        const double dg = sdyx * invstd;
        const double k = gamma[c] * invstd / M;
        coef[j] = mean[c];
        coef[B + j] = (float)(k * M);
        coef[2 * B + j] = (float)(-k * invstd * dg);
        coef[3 * B + j] = (float)(-k * sdy);
        dgamma[c] = (acc & HYFI_BN_ACC_PARAMS) ? dgamma[c] + (float)dg : (float)dg;
        dbeta[c] = (acc & HYFI_BN_ACC_PARAMS) ? dbeta[c] + (float)sdy : (float)sdy;
    }
}

/* dx of pair (cb, n) from coef (4, B) */
BN_LANES void bwd_pair_dx_b(BN_T *dx, const BN_T *dy, const BN_T *x, const BN_T *y,
                        const float *coef, size_t CB, size_t hw, int B, size_t n, size_t cb,
                        int relu, int add)
{
    float mu[HYFI_BN_MAXB], A[HYFI_BN_MAXB], Bc[HYFI_BN_MAXB], D[HYFI_BN_MAXB];
    for (int j = 0; j < B; j++)
        mu[j] = coef[j], A[j] = coef[B + j], Bc[j] = coef[2 * B + j], D[j] = coef[3 * B + j];
    const BN_T *xp = x + (n * CB + cb) * hw * B;
    const BN_T *dyp = dy + (n * CB + cb) * hw * B;
    const BN_T *yp = relu ? y + (n * CB + cb) * hw * B : dyp;
    BN_T *dxp = dx + (n * CB + cb) * hw * B;
    for (size_t i = 0; i < hw; i++) {
        const BN_T *xi = xp + i * B, *dyi = dyp + i * B, *yi = yp + i * B;
        BN_T *dxi = dxp + i * B;
        float o[HYFI_BN_MAXB], xv[HYFI_BN_MAXB], gv[HYFI_BN_MAXB], yv[HYFI_BN_MAXB],
            dv[HYFI_BN_MAXB];
        BN_LDN(xv, xi, B);
        BN_LDN(gv, dyi, B);
        if (relu) BN_LDN(yv, yi, B);
        if (add) BN_LDN(dv, dxi, B);
        if (relu) {
#pragma omp simd
            for (int j = 0; j < B; j++) {
                const float v = A[j] * bn_masked(gv[j], yv[j]) + Bc[j] * (xv[j] - mu[j]) + D[j];
                o[j] = add ? dv[j] + v : v;
            }
        } else if (add) {
#pragma omp simd
            for (int j = 0; j < B; j++)
                o[j] = dv[j] + (A[j] * gv[j] + Bc[j] * (xv[j] - mu[j]) + D[j]);
        } else {
#pragma omp simd
            for (int j = 0; j < B; j++) o[j] = A[j] * gv[j] + Bc[j] * (xv[j] - mu[j]) + D[j];
        }
        BN_STN(dxi, o, B);
    }
}

/* bwd_pair_dx with B a literal (8 or 16): its lane loops vector code */
static void bwd_pair_dx(BN_T *dx, const BN_T *dy, const BN_T *x, const BN_T *y,
                        const float *coef, size_t CB, size_t hw, int B, size_t n, size_t cb,
                        int relu, int add)
{
    if (B == 16) bwd_pair_dx_b(dx, dy, x, y, coef, CB, hw, 16, n, cb, relu, add);
    else if (B == 8) bwd_pair_dx_b(dx, dy, x, y, coef, CB, hw, 8, n, cb, relu, add);
    else bwd_pair_dx_b(dx, dy, x, y, coef, CB, hw, B, n, cb, relu, add);
}

static int bn_backward_blk(BN_T *dx, float *dgamma, float *dbeta, const BN_T *dy,
                           const BN_T *x, const float *gamma, const BN_T *y,
                           const float *mean, const float *var, const hyfi_batchnorm_args *a,
                           int acc, int B)
{
    const size_t hw = (size_t)a->h * a->w, N = (size_t)a->n, CB = (size_t)a->c / (size_t)B;
    if (B > HYFI_BN_MAXB || a->c % B) return -1;
    double *part = blk_parts(CB, N, B);
    float *coef = malloc(4 * CB * (size_t)B * sizeof(float)); /* (CB, 4, B) */
    if (!part || !coef) {
        free(part), free(coef);
        return -1;
    }
    const int add = (acc & HYFI_BN_ACC_DX) != 0, relu = a->relu;
    if (CB >= (size_t)omp_get_max_threads()) {
        const long ncb = (long)CB;
#pragma omp parallel for schedule(static)
        for (long cbi = 0; cbi < ncb; cbi++) {
            const size_t cb = (size_t)cbi;
            for (size_t n = 0; n < N; n++)
                bwd_pair_sums(part + (cb * N + n) * 2 * B, dy, x, y, mean, CB, hw, B, n, cb,
                              relu);
            bwd_block_coef(coef + 4 * cb * B, part, cb, N, hw, B, dgamma, dbeta, gamma, mean,
                           var, a, acc);
            for (size_t n = 0; n < N; n++)
                bwd_pair_dx(dx, dy, x, y, coef + 4 * cb * B, CB, hw, B, n, cb, relu, add);
        }
    } else {
        const long npair = (long)(CB * N);
#pragma omp parallel for schedule(static)
        for (long pi = 0; pi < npair; pi++)
            bwd_pair_sums(part + (size_t)pi * 2 * B, dy, x, y, mean, CB, hw, B, (size_t)pi % N,
                          (size_t)pi / N, relu);
        for (size_t cb = 0; cb < CB; cb++)
            bwd_block_coef(coef + 4 * cb * B, part, cb, N, hw, B, dgamma, dbeta, gamma, mean,
                           var, a, acc);
#pragma omp parallel for schedule(static)
        for (long pi = 0; pi < npair; pi++) {
            const size_t cb = (size_t)pi / N;
            bwd_pair_dx(dx, dy, x, y, coef + 4 * cb * B, CB, hw, B, (size_t)pi % N, cb, relu,
                        add);
        }
    }
    free(part), free(coef);
    return 0;
}

/* Sums over one channel: s1 = sum(x - k), s2 = sum((x - k)^2).
 * x (N,C,H,W), channel c. */
static void chan_moments(const BN_T *x, size_t N, size_t C, size_t hw, size_t c, float k,
                         double *s1_out, double *s2_out)
{
    double s1 = 0, s2 = 0;
    for (size_t n = 0; n < N; n++) {
        const BN_T *xp = x + (n * C + c) * hw;
        for (size_t i0 = 0; i0 < hw; i0 += HYFI_BN_BLOCK) {
            const size_t i1 = i0 + HYFI_BN_BLOCK < hw ? i0 + HYFI_BN_BLOCK : hw;
            BN_VIEW_DECL(xb);
            const float *xv = BN_VIEW(xb, xp + i0, i1 - i0);
            float a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
            for (size_t i = 0; i < i1 - i0; i++) {
                const float d = xv[i] - k;
                a += d;
                b += d * d;
            }
            s1 += a;
            s2 += b;
        }
    }
    *s1_out = s1;
    *s2_out = s2;
}

/* y = (x - mu) * scale + shift over one channel (x - mu rather than a folded
 * shift, which would cancel when |mean| >> std). y, x (N,C,H,W). */
static void chan_affine(BN_T *y, const BN_T *x, size_t N, size_t C, size_t hw, size_t c,
                        float mu, float scale, float shift, int relu)
{
    for (size_t n = 0; n < N; n++) {
        const BN_T *xp = x + (n * C + c) * hw;
        BN_T *yp = y + (n * C + c) * hw;
        if (relu) {
#pragma omp simd
            for (size_t i = 0; i < hw; i++) {
                const float v = (BN_LD(xp[i]) - mu) * scale + shift;
                yp[i] = BN_ST(v > 0.0f ? v : 0.0f);
            }
        } else {
#pragma omp simd
            for (size_t i = 0; i < hw; i++) yp[i] = BN_ST((BN_LD(xp[i]) - mu) * scale + shift);
        }
    }
}

int BN_NAME(forward_train)(BN_T *y, float *mean, float *var, float *run_mean,
                                     float *run_var, const BN_T *x, const float *gamma,
                                     const float *beta, const hyfi_batchnorm_args *a, int blk)
{
    if (blk) return bn_forward_train_blk(y, mean, var, run_mean, run_var, x, gamma, beta, a, blk);
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double M = (double)N * (double)hw;
    const double unbias = M > 1.0 ? M / (M - 1.0) : 1.0;
    const double mom = a->momentum;
    const long nc = (long)C;
#pragma omp parallel for schedule(static)
    for (long ci = 0; ci < nc; ci++) {
        const size_t c = (size_t)ci;
        const float k = BN_LD(x[c * hw]); /* x[0, c, 0, 0] */
        double s1, s2;
        chan_moments(x, N, C, hw, c, k, &s1, &s2);
        const double d = s1 / M;
        double v = s2 / M - d * d;
        if (v < 0) v = 0;
        const double mu = k + d;
        const double invstd = 1.0 / sqrt(v + (double)a->eps);
        const double scale = gamma[c] * invstd;
        chan_affine(y, x, N, C, hw, c, (float)mu, (float)scale, beta[c], a->relu);
        mean[c] = (float)mu;
        var[c] = (float)v;
        run_mean[c] = (float)((1.0 - mom) * run_mean[c] + mom * mu);
        run_var[c] = (float)((1.0 - mom) * run_var[c] + mom * v * unbias);
    }
    return 0;
}

int BN_NAME(forward_eval)(BN_T *y, const BN_T *x, const float *gamma,
                                    const float *beta, const float *run_mean,
                                    const float *run_var, const hyfi_batchnorm_args *a, int blk)
{
    if (blk) return bn_forward_eval_blk(y, x, gamma, beta, run_mean, run_var, a, blk);
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const long nc = (long)C;
#pragma omp parallel for schedule(static)
    for (long ci = 0; ci < nc; ci++) {
        const size_t c = (size_t)ci;
        const double invstd = 1.0 / sqrt((double)run_var[c] + (double)a->eps);
        const double scale = gamma[c] * invstd;
        chan_affine(y, x, N, C, hw, c, run_mean[c], (float)scale, beta[c], a->relu);
    }
    return 0;
}

/* p = sum(d), q = sum(d * (x - mu)) over n values, as float. Not inlined, so
 * that the fused backward (d: the masked dy) and the plain one (d: dy) run the
 * same instructions and agree bit for bit with ReLU's backward + the plain one. */
__attribute__((noinline)) static void chan_block_sums(const float *d, const float *xp, size_t n,
                                                      float mu, float *p_out, float *q_out)
{
    float p = 0, q = 0;
#pragma omp simd reduction(+ : p, q)
    for (size_t i = 0; i < n; i++) {
        p += d[i];
        q += d[i] * (xp[i] - mu);
    }
    *p_out = p;
    *q_out = q;
}

int BN_NAME(backward)(BN_T *dx, float *dgamma, float *dbeta, const BN_T *dy,
                                const BN_T *x, const float *gamma, const BN_T *y,
                                const float *mean, const float *var, const hyfi_batchnorm_args *a,
                                int acc, int blk)
{
    if (a->relu && !y) return -1;
    if (blk) return bn_backward_blk(dx, dgamma, dbeta, dy, x, gamma, y, mean, var, a, acc, blk);
    const size_t hw = (size_t)a->h * a->w, C = (size_t)a->c, N = (size_t)a->n;
    const double M = (double)N * (double)hw;
    const long nc = (long)C;
#pragma omp parallel for schedule(static)
    for (long ci = 0; ci < nc; ci++) {
        const size_t c = (size_t)ci;
        const float mu = mean[c];
        const double invstd = 1.0 / sqrt((double)var[c] + (double)a->eps);
        double sdy = 0, sdyx = 0; /* sum(dy), sum(dy * (x - mean)) */
        for (size_t n = 0; n < N; n++) {
            const BN_T *xp = x + (n * C + c) * hw;   /* x (N,C,H,W) */
            const BN_T *dyp = dy + (n * C + c) * hw; /* dy (N,C,H,W) */
            const BN_T *yp = a->relu ? y + (n * C + c) * hw : dyp; /* y (N,C,H,W) */
            for (size_t i0 = 0; i0 < hw; i0 += HYFI_BN_BLOCK) {
                const size_t i1 = i0 + HYFI_BN_BLOCK < hw ? i0 + HYFI_BN_BLOCK : hw;
                float p, q;
                BN_VIEW_DECL(xb);
                const float *xv = BN_VIEW(xb, xp + i0, i1 - i0);
                if (a->relu) {
                    /* the masked dy of this block, then the same sums as without
                     * fusion (one function: the same bits) */
                    float gbuf[HYFI_BN_BLOCK];
#pragma omp simd
                    for (size_t i = i0; i < i1; i++)
                        gbuf[i - i0] = bn_masked(BN_LD(dyp[i]), BN_LD(yp[i]));
                    chan_block_sums(gbuf, xv, i1 - i0, mu, &p, &q);
                } else {
                    BN_VIEW_DECL(db);
                    chan_block_sums(BN_VIEW(db, dyp + i0, i1 - i0), xv, i1 - i0, mu, &p, &q);
                }
                sdy += p;
                sdyx += q;
            }
        }
        const double dg = sdyx * invstd; /* sum(dy * xhat) */
        /* dx = k (M dy - sdy - xhat dg) = A dy + B (x - mean) + D */
        const double k = gamma[c] * invstd / M;
        const float A = (float)(k * M), B = (float)(-k * invstd * dg), D = (float)(-k * sdy);
        for (size_t n = 0; n < N; n++) {
            const BN_T *xp = x + (n * C + c) * hw;
            const BN_T *dyp = dy + (n * C + c) * hw;
            const BN_T *yp = a->relu ? y + (n * C + c) * hw : dyp;
            BN_T *dxp = dx + (n * C + c) * hw;       /* dx (N,C,H,W) */
            if (a->relu) {
                const int add = (acc & HYFI_BN_ACC_DX) != 0;
#pragma omp simd
                for (size_t i = 0; i < hw; i++) {
                    const float v =
                        A * bn_masked(BN_LD(dyp[i]), BN_LD(yp[i])) + B * (BN_LD(xp[i]) - mu) + D;
                    dxp[i] = BN_ST(add ? BN_LD(dxp[i]) + v : v);
                }
            } else if (acc & HYFI_BN_ACC_DX) {
#pragma omp simd
                for (size_t i = 0; i < hw; i++)
                    dxp[i] =
                        BN_ST(BN_LD(dxp[i]) + (A * BN_LD(dyp[i]) + B * (BN_LD(xp[i]) - mu) + D));
            } else {
#pragma omp simd
                for (size_t i = 0; i < hw; i++)
                    dxp[i] = BN_ST(A * BN_LD(dyp[i]) + B * (BN_LD(xp[i]) - mu) + D);
            }
        }
        /* Round before adding, so that accumulating k2 onto k1 gives the same
         * float as adding two separately written k1 and k2 (reductions). */
        dgamma[c] = (acc & HYFI_BN_ACC_PARAMS) ? dgamma[c] + (float)dg : (float)dg;
        dbeta[c] = (acc & HYFI_BN_ACC_PARAMS) ? dbeta[c] + (float)sdy : (float)sdy;
    }
    return 0;
}
