/* pool_cpu.c: CPU pooling, own loops on plain NCHW planes.
 *   oneDNN 2.6 pools plain NCHW memory with its simple_nchw implementation,
 *   measured here at 45-70 ms for a 2x2 max pool of 64x32x28x28, against about
 *   1 ms for a plain loop; its fast kernels need blocked layouts, which the
 *   rest of the graph does not use. So every pooling pass is a loop:
 *   max forward, max backward (the reference's tie rule: first maximum in
 *   row-major window order, padding never chosen, so CPU, CUDA and reference
 *   route gradients identically), average forward / backward (divisor kh*kw
 *   with count_include_pad, else the in-image positions), global average.
 * Windows follow pool_ref.c: padding ph / pw on the low side, floor output size.
 * Every loop also runs on oneDNN's blocked layouts (hyfi_pool_args.blk), where
 * the engine keeps a pool's tensors between blocked convolutions (layout.c).
 */
#if defined(__GNUC__) && !defined(__clang__)
/* -O3 for these loops at the build's -O2: GCC 12 then unrolls the blocked
 * loops' B lanes (the per-lane maxima and argmaxes stay in vector registers):
 * a blocked 2x2 max-pool backward of 64x32x28x28 took 8.3 ms at -O2 (also
 * with tree-vectorize alone), 1.9 ms so (NCHW loop: 3.2-3.6 ms), one thread. */
#pragma GCC optimize("O3")
#endif

#include "kernels.h"
#include "pool_window.h"

#include <math.h>
#include <string.h>

/* Below this many input elements one thread pools (fork/join costs more);
 * above, the planes (NCHW) or groups (blocked) are split over the calling
 * worker's OpenMP threads (core lending). Each is its own: the results do not
 * depend on the threads. */
static inline int pool_par(const hyfi_pool_args *a)
{
    return (long)a->n * a->c * a->h * a->w >= (1L << 16);
}

/* Own loops: oneDNN 2.6 pools plain NCHW with its reference-like simple_nchw
 * implementation, measured at 45-70 ms for a 2x2 max pool of 64x32x28x28
 * against about 1 ms for this loop. */
static int pool_forward(float *y, const float *x, const hyfi_pool_args *a, int is_max)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    const size_t ohw = (size_t)a->ho * a->wo;
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw; /* x (N,C,H,W) */
        float *yp = y + p * ohw;      /* y (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++) {
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1, full;
                pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
                float r;
                if (is_max) {
                    r = -INFINITY;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            const float v = xp[(size_t)ih * a->w + iw];
                            r = v > r ? v : r;
                        }
                } else {
                    float s = 0;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) s += xp[(size_t)ih * a->w + iw];
                    const int cnt = a->count_include_pad ? full : (h1 - h0) * (w1 - w0);
                    r = cnt > 0 ? s / (float)cnt : 0.0f;
                }
                yp[(size_t)oh * a->wo + ow] = r;
            }
        }
    }
    return 0;
}

/* Blocked layouts (a->blk = B, 8 or 16; see hyfi_conv2d_args): x and y are
 * (N, C/B, H, W, B), and the B channels of a block are the SIMD lanes of
 * every loop below (contiguous; B is a literal in each call of the inline
 * group functions, also inside the OpenMP regions, so the lane loops are
 * vector code). Per lane the arithmetic is the NCHW loops' own, in the same
 * window order (so the same maximum, the same first-maximum tie rule, the
 * same float sums): both layouts give identical results. Groups (an image's
 * block of B channels) are independent: they are split over the calling
 * worker's OpenMP threads (core lending) from 64K elements on. */
#define BLK_INLINE static inline __attribute__((always_inline))

/* One group: y (Ho, Wo, B), x (H, W, B) */
BLK_INLINE void pool_forward_group(float *yp, const float *xp, const hyfi_pool_args *a,
                                   int is_max, const size_t B)
{
    for (int oh = 0; oh < a->ho; oh++)
        for (int ow = 0; ow < a->wo; ow++) {
            int h0, h1, w0, w1, full;
            pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
            float r[16];
            float *out = yp + ((size_t)oh * a->wo + ow) * B;
            if (is_max) {
                for (size_t j = 0; j < B; j++) r[j] = -INFINITY;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) {
                        const float *v = xp + ((size_t)ih * a->w + iw) * B;
                        for (size_t j = 0; j < B; j++) r[j] = v[j] > r[j] ? v[j] : r[j];
                    }
                for (size_t j = 0; j < B; j++) out[j] = r[j];
            } else {
                for (size_t j = 0; j < B; j++) r[j] = 0;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) {
                        const float *v = xp + ((size_t)ih * a->w + iw) * B;
                        for (size_t j = 0; j < B; j++) r[j] += v[j];
                    }
                const int cnt = a->count_include_pad ? full : (h1 - h0) * (w1 - w0);
                for (size_t j = 0; j < B; j++) out[j] = cnt > 0 ? r[j] / (float)cnt : 0.0f;
            }
        }
}

/* y (N, C/B, Ho, Wo, B), x (N, C/B, H, W, B) */
static void pool_forward_blk(float *y, const float *x, const hyfi_pool_args *a, int is_max)
{
    const size_t B = (size_t)a->blk, groups = (size_t)a->n * (size_t)(a->c / a->blk);
    const size_t hw = (size_t)a->h * a->w, ohw = (size_t)a->ho * a->wo;
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < groups; p++) {
        if (B == 16) pool_forward_group(y + p * ohw * 16, x + p * hw * 16, a, is_max, 16);
        else pool_forward_group(y + p * ohw * 8, x + p * hw * 8, a, is_max, 8);
    }
}

/* One group of the max-pool backward: dx (H, W, B) (zeroed here unless acc),
 * dy (Ho, Wo, B), x (H, W, B); per lane the first maximum of the window gets
 * the gradient, as in the NCHW loop. */
BLK_INLINE void maxpool_backward_group(float *dxp, const float *dyp, const float *xp,
                                       const hyfi_pool_args *a, int acc, const size_t B)
{
    const int W = a->w;
    if (!acc) memset(dxp, 0, (size_t)a->h * W * B * sizeof(float));
    for (int oh = 0; oh < a->ho; oh++) {
        for (int ow = 0; ow < a->wo; ow++) {
            int h0, h1, w0, w1, full;
            pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
            float m[16];
            int arg[16];
            for (size_t j = 0; j < B; j++) m[j] = -INFINITY, arg[j] = -1;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    const float *v = xp + ((size_t)ih * W + iw) * B;
                    const int pos = ih * W + iw;
                    for (size_t j = 0; j < B; j++) {
                        const int gt = v[j] > m[j];
                        m[j] = gt ? v[j] : m[j];
                        arg[j] = gt ? pos : arg[j];
                    }
                }
            const float *g = dyp + ((size_t)oh * a->wo + ow) * B;
            for (size_t j = 0; j < B; j++)
                if (arg[j] >= 0) dxp[(size_t)arg[j] * B + j] += g[j];
        }
    }
}

/* dx (N, C/B, H, W, B), dy (N, C/B, Ho, Wo, B), x (N, C/B, H, W, B) */
static void maxpool_backward_blk(float *dx, const float *dy, const float *x,
                                 const hyfi_pool_args *a, int acc)
{
    const size_t B = (size_t)a->blk, groups = (size_t)a->n * (size_t)(a->c / a->blk);
    const size_t hw = (size_t)a->h * a->w, ohw = (size_t)a->ho * a->wo;
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < groups; p++) {
        if (B == 16)
            maxpool_backward_group(dx + p * hw * 16, dy + p * ohw * 16, x + p * hw * 16, a, acc,
                                   16);
        else
            maxpool_backward_group(dx + p * hw * 8, dy + p * ohw * 8, x + p * hw * 8, a, acc, 8);
    }
}

/* One group: dx (H, W, B) (zeroed here unless acc), dy (Ho, Wo, B) */
BLK_INLINE void avgpool_backward_group(float *dxp, const float *dyp, const hyfi_pool_args *a,
                                       int acc, const size_t B)
{
    if (!acc) memset(dxp, 0, (size_t)a->h * a->w * B * sizeof(float));
    for (int oh = 0; oh < a->ho; oh++)
        for (int ow = 0; ow < a->wo; ow++) {
            int h0, h1, w0, w1, full;
            pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
            const int cnt = a->count_include_pad ? full : (h1 - h0) * (w1 - w0);
            if (cnt <= 0) continue;
            float g[16];
            for (size_t j = 0; j < B; j++)
                g[j] = dyp[((size_t)oh * a->wo + ow) * B + j] / (float)cnt;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    float *d = dxp + ((size_t)ih * a->w + iw) * B;
                    for (size_t j = 0; j < B; j++) d[j] += g[j];
                }
        }
}

/* dx (N, C/B, H, W, B), dy (N, C/B, Ho, Wo, B) */
static void avgpool_backward_blk(float *dx, const float *dy, const hyfi_pool_args *a, int acc)
{
    const size_t B = (size_t)a->blk, groups = (size_t)a->n * (size_t)(a->c / a->blk);
    const size_t hw = (size_t)a->h * a->w, ohw = (size_t)a->ho * a->wo;
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < groups; p++) {
        if (B == 16) avgpool_backward_group(dx + p * hw * 16, dy + p * ohw * 16, a, acc, 16);
        else avgpool_backward_group(dx + p * hw * 8, dy + p * ohw * 8, a, acc, 8);
    }
}

/* 0: a->blk is a layout these loops take (none, or 8 / 16 dividing C) */
static int blk_check(const hyfi_pool_args *a)
{
    return a->blk > 1 && ((a->blk != 8 && a->blk != 16) || a->c % a->blk) ? -1 : 0;
}

int hyfi_maxpool_forward_cpu(float *y, const float *x, const hyfi_pool_args *a)
{
    if (blk_check(a)) return -1;
    if (a->blk > 1) pool_forward_blk(y, x, a, 1);
    else return pool_forward(y, x, a, 1);
    return 0;
}

int hyfi_avgpool_forward_cpu(float *y, const float *x, const hyfi_pool_args *a)
{
    if (blk_check(a)) return -1;
    if (a->blk > 1) pool_forward_blk(y, x, a, 0);
    else return pool_forward(y, x, a, 0);
    return 0;
}

int hyfi_maxpool_backward_cpu(float *dx, const float *dy, const float *x,
                              const hyfi_pool_args *a, int acc)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    const int W = a->w;
    if (blk_check(a)) return -1;
    if (a->blk > 1) {
        maxpool_backward_blk(dx, dy, x, a, acc);
        return 0;
    }
    if (!acc) memset(dx, 0, planes * hw * sizeof(float));
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw;                   /* x (N,C,H,W) */
        float *dxp = dx + p * hw;                       /* dx (N,C,H,W) */
        const float *dyp = dy + p * a->ho * a->wo;      /* dy (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++) {
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1, full;
                pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
                float m = -INFINITY;
                int arg = -1;
                for (int ih = h0; ih < h1; ih++) {
                    const float *row = xp + (size_t)ih * W;
                    for (int iw = w0; iw < w1; iw++)
                        if (row[iw] > m) {
                            m = row[iw];
                            arg = ih * W + iw;
                        }
                }
                if (arg >= 0) dxp[arg] += dyp[oh * a->wo + ow];
            }
        }
    }
    return 0;
}

int hyfi_avgpool_backward_cpu(float *dx, const float *dy, const hyfi_pool_args *a, int acc)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    const size_t ohw = (size_t)a->ho * a->wo;
    if (blk_check(a)) return -1;
    if (a->blk > 1) {
        avgpool_backward_blk(dx, dy, a, acc);
        return 0;
    }
    if (!acc) memset(dx, 0, planes * hw * sizeof(float));
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < planes; p++) {
        float *dxp = dx + p * hw;        /* dx (N,C,H,W) */
        const float *dyp = dy + p * ohw; /* dy (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++) {
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1, full;
                pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
                const int cnt = a->count_include_pad ? full : (h1 - h0) * (w1 - w0);
                if (cnt <= 0) continue;
                const float g = dyp[(size_t)oh * a->wo + ow] / (float)cnt;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) dxp[(size_t)ih * a->w + iw] += g;
            }
        }
    }
    return 0;
}

int hyfi_gap_forward_cpu(float *y, const float *x, const hyfi_pool_args *a)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    const double inv = 1.0 / (double)hw;
    if (a->blk > 1) { /* x (N, C/B, H, W, B): y[n, cb B + j] */
        const size_t B = (size_t)a->blk;
        if (a->c % a->blk || B > 16) return -1;
#pragma omp parallel for schedule(static) if (pool_par(a))
        for (size_t p0 = 0; p0 < planes; p0 += B) {
            const float *xp = x + p0 * hw;
            double s[16] = {0};
            for (size_t i = 0; i < hw; i++)
                for (size_t j = 0; j < B; j++) s[j] += xp[i * B + j];
            for (size_t j = 0; j < B; j++) y[p0 + j] = (float)(s[j] * inv);
        }
        return 0;
    }
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw;                   /* x (N,C,H,W) */
        double s = 0;
        for (size_t i = 0; i < hw; i++) s += xp[i];
        y[p] = (float)(s * inv);                        /* y (N,C) */
    }
    return 0;
}

int hyfi_gap_backward_cpu(float *dx, const float *dy, const hyfi_pool_args *a, int acc)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    if (a->blk > 1) { /* dx (N, C/B, H, W, B) */
        const size_t B = (size_t)a->blk;
        if (a->c % a->blk || B > 16) return -1;
#pragma omp parallel for schedule(static) if (pool_par(a))
        for (size_t p0 = 0; p0 < planes; p0 += B) {
            float g[16];
            for (size_t j = 0; j < B; j++) g[j] = (float)((double)dy[p0 + j] / (double)hw);
            float *dxp = dx + p0 * hw;
            for (size_t i = 0; i < hw; i++)
                for (size_t j = 0; j < B; j++) dxp[i * B + j] = acc ? dxp[i * B + j] + g[j] : g[j];
        }
        return 0;
    }
#pragma omp parallel for schedule(static) if (pool_par(a))
    for (size_t p = 0; p < planes; p++) {
        const float g = (float)((double)dy[p] / (double)hw); /* dy (N,C) */
        float *dxp = dx + p * hw;                            /* dx (N,C,H,W) */
        if (acc)
            for (size_t i = 0; i < hw; i++) dxp[i] += g;
        else
            for (size_t i = 0; i < hw; i++) dxp[i] = g;
    }
    return 0;
}
