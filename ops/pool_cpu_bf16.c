/* pool_cpu_bf16.c: pooling on bf16 storage (kernels.h "bfloat16"): x, y, dx, dy
 * bf16, read and written in place. Per value the arithmetic is pool_cpu.c's
 * on the widened values, in the same window order, the result rounded to
 * nearest even once: bitwise what staging the whole buffers in float32 gives
 * (tests/test_op_convert.c), with no float32 copy of an activation.
 *   - Forward: a maximum of bf16 values is one of them; an average sums in
 *     float32 as pool_cpu.c does. No buffer.
 *   - Backward: a dx value may collect the gradients of several windows
 *     (overlapping max or average windows), summed in float32 and rounded
 *     once. dx is built in bands of rows in a float32 buffer of 256 KB per
 *     thread: a band takes, in pool_cpu.c's order (output rows, then
 *     columns), the windows that reach it, so each value sums the same terms
 *     in the same order as over the whole plane. A max window's first
 *     maximum is found over the whole window, in or out of the band.
 * (Staging one channel plane or block at a time in float32 had cost 144 MB
 * per thread for a block of 16 channels at 1,024².)
 * Units: an image's channel plane (NCHW, B = 1) or its block of B channels
 * (nChw8c / nChw16c); B is a literal in each call of the inline unit
 * functions, so the lane loops are vector code. Units split over the worker's
 * OpenMP threads as pool_cpu.c splits planes; the results do not depend on
 * the threads. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "kernels.h"
#include "isa.h"
#include "bf16_inline.h"
#include "pool_window.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define UNIT_INLINE static inline __attribute__((always_inline))
#define BAND_FLOATS ((size_t)1 << 16)

enum { MAX_FWD, AVG_FWD, GAP_FWD, MAX_BWD, AVG_BWD, GAP_BWD };

/* One unit's forward: y (Ho, Wo, B), x (H, W, B) */
UNIT_INLINE void fwd_unit(uint16_t *yp, const uint16_t *xp, const hyfi_pool_args *a, int is_max,
                          const size_t B)
{
    for (int oh = 0; oh < a->ho; oh++)
        for (int ow = 0; ow < a->wo; ow++) {
            int h0, h1, w0, w1, full;
            pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
            float r[16];
            uint16_t *out = yp + ((size_t)oh * a->wo + ow) * B;
            if (is_max) {
                for (size_t j = 0; j < B; j++) r[j] = -INFINITY;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) {
                        const uint16_t *v = xp + ((size_t)ih * a->w + iw) * B;
                        for (size_t j = 0; j < B; j++) {
                            const float f = hyfi_bf16_widen(v[j]);
                            r[j] = f > r[j] ? f : r[j];
                        }
                    }
                for (size_t j = 0; j < B; j++) out[j] = hyfi_bf16_narrow(r[j]);
            } else {
                for (size_t j = 0; j < B; j++) r[j] = 0;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) {
                        const uint16_t *v = xp + ((size_t)ih * a->w + iw) * B;
                        for (size_t j = 0; j < B; j++) r[j] += hyfi_bf16_widen(v[j]);
                    }
                const int cnt = a->count_include_pad ? full : (h1 - h0) * (w1 - w0);
                for (size_t j = 0; j < B; j++)
                    out[j] = hyfi_bf16_narrow(cnt > 0 ? r[j] / (float)cnt : 0.0f);
            }
        }
}

/* One unit's max or average backward: dx (H, W, B) (overwritten, or added to
 * when acc), dy (Ho, Wo, B), x (H, W, B) (max only); band: BAND_FLOATS floats,
 * or one row (W B) if that is more */
UNIT_INLINE void bwd_unit(uint16_t *dxp, const uint16_t *dyp, const uint16_t *xp,
                          const hyfi_pool_args *a, int is_max, int acc, float *band,
                          const size_t B)
{
    const int W = a->w;
    const size_t row = (size_t)W * B;
    const int rows = row >= BAND_FLOATS ? 1 : (int)(BAND_FLOATS / row);
    for (int r0 = 0; r0 < a->h; r0 += rows) {
        const int r1 = r0 + rows < a->h ? r0 + rows : a->h;
        const size_t nb = (size_t)(r1 - r0) * row;
        uint16_t *dxb = dxp + (size_t)r0 * row;
        if (acc)
            for (size_t i = 0; i < nb; i++) band[i] = hyfi_bf16_widen(dxb[i]);
        else
            memset(band, 0, nb * sizeof(float));
        /* the output rows whose windows reach rows [r0, r1) */
        const int t = r0 + a->ph - a->kh;
        const int oh0 = t < 0 ? 0 : t / a->sh + 1;
        const int oh_end = (r1 - 1 + a->ph) / a->sh + 1;
        const int oh1 = oh_end < a->ho ? oh_end : a->ho;
        for (int oh = oh0; oh < oh1; oh++)
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1, full;
                pool_window(a, oh, ow, &h0, &h1, &w0, &w1, &full);
                const uint16_t *g = dyp + ((size_t)oh * a->wo + ow) * B;
                if (is_max) {
                    float m[16];
                    int arg[16];
                    for (size_t j = 0; j < B; j++) m[j] = -INFINITY, arg[j] = -1;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            const uint16_t *v = xp + ((size_t)ih * W + iw) * B;
                            const int pos = ih * W + iw;
                            for (size_t j = 0; j < B; j++) {
                                const float f = hyfi_bf16_widen(v[j]);
                                const int gt = f > m[j];
                                m[j] = gt ? f : m[j];
                                arg[j] = gt ? pos : arg[j];
                            }
                        }
                    const int lo = r0 * W, hi = r1 * W;
                    for (size_t j = 0; j < B; j++)
                        if (arg[j] >= lo && arg[j] < hi)
                            band[(size_t)(arg[j] - lo) * B + j] += hyfi_bf16_widen(g[j]);
                } else {
                    const int cnt = a->count_include_pad ? full : (h1 - h0) * (w1 - w0);
                    if (cnt <= 0) continue;
                    float gv[16];
                    for (size_t j = 0; j < B; j++) gv[j] = hyfi_bf16_widen(g[j]) / (float)cnt;
                    const int ha = h0 > r0 ? h0 : r0, hb = h1 < r1 ? h1 : r1;
                    for (int ih = ha; ih < hb; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            float *d = band + ((size_t)(ih - r0) * W + iw) * B;
                            for (size_t j = 0; j < B; j++) d[j] += gv[j];
                        }
                }
            }
        for (size_t i = 0; i < nb; i++) dxb[i] = hyfi_bf16_narrow(band[i]);
    }
}

/* fwd: out = y, in = x. bwd: out = dx, in = dy, x = the forward's input (max
 * pooling only). Not global average pooling. */
static int pool_bf16(int op, uint16_t *out, const uint16_t *in, const uint16_t *x,
                     const hyfi_pool_args *a, int acc)
{
    const size_t B = a->blk > 1 ? (size_t)a->blk : 1;
    if (a->blk > 1 && ((a->blk != 8 && a->blk != 16) || a->c % a->blk)) return -1;
    const int bwd = op >= MAX_BWD, is_max = op == MAX_FWD || op == MAX_BWD;
    const size_t units = (size_t)a->n * (size_t)(a->c / (int)B);
    const size_t big = (size_t)a->h * a->w * B, small = (size_t)a->ho * a->wo * B;
    const size_t row = (size_t)a->w * B;
    const int par = (long)a->n * a->c * a->h * a->w >= (1L << 16) && units > 1;
    int bad = 0;
#pragma omp parallel if (par) reduction(| : bad)
    {
        float *band = bwd ? malloc((row > BAND_FLOATS ? row : BAND_FLOATS) * sizeof(float)) : NULL;
        if (bwd && !band) bad = 1;
#pragma omp for schedule(static)
        for (size_t u = 0; u < units; u++) {
            if (!bwd) {
                if (B == 16) fwd_unit(out + u * small, in + u * big, a, is_max, 16);
                else if (B == 8) fwd_unit(out + u * small, in + u * big, a, is_max, 8);
                else fwd_unit(out + u * small, in + u * big, a, is_max, 1);
            } else if (band) {
                const uint16_t *xu = is_max ? x + u * big : NULL;
                if (B == 16) bwd_unit(out + u * big, in + u * small, xu, a, is_max, acc, band, 16);
                else if (B == 8) bwd_unit(out + u * big, in + u * small, xu, a, is_max, acc, band, 8);
                else bwd_unit(out + u * big, in + u * small, xu, a, is_max, acc, band, 1);
            }
        }
        free(band);
    }
    return bad ? -1 : 0;
}

/* Global average pooling, forward: y (N, C) from x (NCHW or blocked); the sums
 * in double, as pool_cpu.c */
static int gap_fwd(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a)
{
    const size_t B = a->blk > 1 ? (size_t)a->blk : 1, hw = (size_t)a->h * a->w;
    if (a->c % (int)B || B > 16) return -1;
    const size_t units = (size_t)a->n * (size_t)(a->c / (int)B);
    const double inv = 1.0 / (double)hw;
#pragma omp parallel for schedule(static) if ((long)a->n * a->c * a->h * a->w >= (1L << 16))
    for (size_t u = 0; u < units; u++) {
        const uint16_t *xp = x + u * hw * B;
        double s[16] = {0};
        for (size_t i = 0; i < hw; i++)
            for (size_t j = 0; j < B; j++) s[j] += hyfi_bf16_widen(xp[i * B + j]);
        for (size_t j = 0; j < B; j++) y[u * B + j] = hyfi_bf16_narrow((float)(s[j] * inv));
    }
    return 0;
}

/* Global average pooling, backward: dx (NCHW or blocked) from dy (N, C) */
static int gap_bwd(uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a, int acc)
{
    const size_t B = a->blk > 1 ? (size_t)a->blk : 1, hw = (size_t)a->h * a->w;
    if (a->c % (int)B || B > 16) return -1;
    const size_t units = (size_t)a->n * (size_t)(a->c / (int)B);
#pragma omp parallel for schedule(static) if ((long)a->n * a->c * a->h * a->w >= (1L << 16))
    for (size_t u = 0; u < units; u++) {
        float g[16];
        for (size_t j = 0; j < B; j++)
            g[j] = (float)((double)hyfi_bf16_widen(dy[u * B + j]) / (double)hw);
        uint16_t *dxp = dx + u * hw * B;
        for (size_t i = 0; i < hw; i++)
            for (size_t j = 0; j < B; j++)
                dxp[i * B + j] = hyfi_bf16_narrow(acc ? hyfi_bf16_widen(dxp[i * B + j]) + g[j] : g[j]);
    }
    return 0;
}

int HYFI_ISA(hyfi_maxpool_forward_bf16)(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a)
{
    return pool_bf16(MAX_FWD, y, x, NULL, a, 0);
}

int HYFI_ISA(hyfi_avgpool_forward_bf16)(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a)
{
    return pool_bf16(AVG_FWD, y, x, NULL, a, 0);
}

int HYFI_ISA(hyfi_gap_forward_bf16)(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a)
{
    return gap_fwd(y, x, a);
}

int HYFI_ISA(hyfi_maxpool_backward_bf16)(uint16_t *dx, const uint16_t *dy, const uint16_t *x,
                                         const hyfi_pool_args *a, int acc)
{
    return pool_bf16(MAX_BWD, dx, dy, x, a, acc);
}

int HYFI_ISA(hyfi_avgpool_backward_bf16)(uint16_t *dx, const uint16_t *dy,
                                         const hyfi_pool_args *a, int acc)
{
    return pool_bf16(AVG_BWD, dx, dy, NULL, a, acc);
}

int HYFI_ISA(hyfi_gap_backward_bf16)(uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a,
                                     int acc)
{
    return gap_bwd(dx, dy, a, acc);
}
