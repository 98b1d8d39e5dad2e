/* pool_ref.c: naive reference of the pooling family (the specification and the
 * test oracle).
 *
 * Window of output (oh, ow): rows oh*sh - ph + [0, kh), columns ow*sw - pw + [0, kw);
 * positions outside the image are padding.
 *   max pooling: y = max over the in-image positions (padding is -inf and never
 *     chosen; a window made only of padding gives -inf and no gradient). The
 *     backward recomputes the argmax from x: the first maximum in row-major
 *     window order (strictly greater replaces), and routes dy to it.
 *   average pooling: y = sum over the in-image positions / divisor, divisor =
 *     kh*kw (count_include_pad = 1) or the number of in-image positions
 *     (count_include_pad = 0); the backward spreads dy / divisor over the window.
 *   global average pooling: y (N,C) = mean of x over H*W; dx = dy / (H*W).
 * Sums are accumulated in double.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* Clipped window bounds of output (oh, ow); the window is [h0, h1) x [w0, w1). */
static void win(const hyfi_pool_args *a, int oh, int ow, int *h0, int *h1, int *w0, int *w1)
{
    int hs = oh * a->sh - a->ph, ws = ow * a->sw - a->pw;
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = hs + a->kh > a->h ? a->h : hs + a->kh;
    *w1 = ws + a->kw > a->w ? a->w : ws + a->kw;
}

int hyfi_maxpool_forward_ref(float *y, const float *x, const hyfi_pool_args *a)
{
    const size_t planes = (size_t)a->n * a->c;
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * a->h * a->w;          /* x (N,C,H,W) */
        float *yp = y + p * a->ho * a->wo;              /* y (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++)
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1;
                win(a, oh, ow, &h0, &h1, &w0, &w1);
                float m = -INFINITY;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++)
                        if (xp[ih * a->w + iw] > m) m = xp[ih * a->w + iw];
                yp[oh * a->wo + ow] = m;
            }
    }
    return 0;
}

int hyfi_maxpool_backward_ref(float *dx, const float *dy, const float *x,
                              const hyfi_pool_args *a, int acc)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    if (!acc) memset(dx, 0, planes * hw * sizeof(float));
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw;                   /* x (N,C,H,W) */
        float *dxp = dx + p * hw;                       /* dx (N,C,H,W) */
        const float *dyp = dy + p * a->ho * a->wo;      /* dy (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++)
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1;
                win(a, oh, ow, &h0, &h1, &w0, &w1);
                float m = -INFINITY;
                int arg = -1;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++)
                        if (xp[ih * a->w + iw] > m) {
                            m = xp[ih * a->w + iw];
                            arg = ih * a->w + iw;
                        }
                if (arg >= 0) dxp[arg] += dyp[oh * a->wo + ow];
            }
    }
    return 0;
}

/* Divisor of the window of output (oh, ow). */
static int avg_div(const hyfi_pool_args *a, int h0, int h1, int w0, int w1)
{
    return a->count_include_pad ? a->kh * a->kw : (h1 - h0) * (w1 - w0);
}

int hyfi_avgpool_forward_ref(float *y, const float *x, const hyfi_pool_args *a)
{
    const size_t planes = (size_t)a->n * a->c;
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * a->h * a->w;          /* x (N,C,H,W) */
        float *yp = y + p * a->ho * a->wo;              /* y (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++)
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1;
                win(a, oh, ow, &h0, &h1, &w0, &w1);
                double s = 0;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) s += xp[ih * a->w + iw];
                int d = avg_div(a, h0, h1, w0, w1);
                yp[oh * a->wo + ow] = d > 0 ? (float)(s / d) : 0.0f;
            }
    }
    return 0;
}

int hyfi_avgpool_backward_ref(float *dx, const float *dy, const hyfi_pool_args *a, int acc)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    if (!acc) memset(dx, 0, planes * hw * sizeof(float));
    for (size_t p = 0; p < planes; p++) {
        float *dxp = dx + p * hw;                       /* dx (N,C,H,W) */
        const float *dyp = dy + p * a->ho * a->wo;      /* dy (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++)
            for (int ow = 0; ow < a->wo; ow++) {
                int h0, h1, w0, w1;
                win(a, oh, ow, &h0, &h1, &w0, &w1);
                int d = avg_div(a, h0, h1, w0, w1);
                if (d <= 0) continue;
                double g = (double)dyp[oh * a->wo + ow] / d;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++)
                        dxp[ih * a->w + iw] = (float)(dxp[ih * a->w + iw] + g);
            }
    }
    return 0;
}

int hyfi_gap_forward_ref(float *y, const float *x, const hyfi_pool_args *a)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    for (size_t p = 0; p < planes; p++) {
        double s = 0;
        for (size_t i = 0; i < hw; i++) s += x[p * hw + i];  /* x (N,C,H,W) */
        y[p] = (float)(s / (double)hw);                      /* y (N,C) */
    }
    return 0;
}

int hyfi_gap_backward_ref(float *dx, const float *dy, const hyfi_pool_args *a, int acc)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    for (size_t p = 0; p < planes; p++) {
        double g = (double)dy[p] / (double)hw;               /* dy (N,C) */
        for (size_t i = 0; i < hw; i++) {                    /* dx (N,C,H,W) */
            float *d = dx + p * hw + i;
            *d = (float)(acc ? *d + g : g);
        }
    }
    return 0;
}
