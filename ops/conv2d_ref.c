/* conv2d_ref.c: naive reference of the 2-D convolution (cross-correlation, as
 * in PyTorch) with stride, symmetric zero padding, groups and an optional bias.
 * This file is the specification and the test oracle: plain loops over the
 * definition, every long sum accumulated in double.
 *
 *   y[n,co,oh,ow] = b[co] + sum_{ci<Cin/G, i<KH, j<KW}
 *                   w[co,ci,i,j] * x[n, g*Cin/G + ci, oh*sh - ph + i, ow*sw - pw + j]
 *   with g = co / (Cout/G) and x = 0 outside the image.
 *
 * The bias is used when a->has_bias and b != NULL; its gradient is written when
 * a->has_bias and db != NULL.
 */
#include "kernels.h"

#include <stddef.h>

int hyfi_conv_out_size(int in, int k, int s, int p)
{
    return (in + 2 * p - k) / s + 1;
}

/* Index helpers: x (N,Cin,H,W), y (N,Cout,Ho,Wo), w (Cout,Cin/G,KH,KW). */
static size_t x_at(const hyfi_conv2d_args *a, int n, int c, int h, int w)
{
    return (((size_t)n * a->c_in + c) * a->h + h) * a->w + w;
}
static size_t y_at(const hyfi_conv2d_args *a, int n, int c, int h, int w)
{
    return (((size_t)n * a->c_out + c) * a->ho + h) * a->wo + w;
}
static size_t w_at(const hyfi_conv2d_args *a, int co, int ci, int i, int j)
{
    return (((size_t)co * (a->c_in / a->groups) + ci) * a->kh + i) * a->kw + j;
}

/* y (N,Cout,Ho,Wo), x (N,Cin,H,W), w (Cout,Cin/G,KH,KW), b (Cout) or NULL */
int hyfi_conv2d_forward_ref(float *y, const float *x, const float *w, const float *b,
                            const hyfi_conv2d_args *a)
{
    const int cig = a->c_in / a->groups, cog = a->c_out / a->groups;
    for (int n = 0; n < a->n; n++)
        for (int co = 0; co < a->c_out; co++) {
            const int g = co / cog;
            for (int oh = 0; oh < a->ho; oh++)
                for (int ow = 0; ow < a->wo; ow++) {
                    double s = (a->has_bias && b) ? (double)b[co] : 0.0;
                    for (int ci = 0; ci < cig; ci++)
                        for (int i = 0; i < a->kh; i++) {
                            const int ih = oh * a->sh - a->ph + i;
                            if (ih < 0 || ih >= a->h) continue;
                            for (int j = 0; j < a->kw; j++) {
                                const int iw = ow * a->sw - a->pw + j;
                                if (iw < 0 || iw >= a->w) continue;
                                s += (double)w[w_at(a, co, ci, i, j)] *
                                     (double)x[x_at(a, n, g * cig + ci, ih, iw)];
                            }
                        }
                    y[y_at(a, n, co, oh, ow)] = (float)s;
                }
        }
    return 0;
}

/* y = conv(x, w, b) + r; r (N,Cout,Ho,Wo) in y's layout */
int hyfi_conv2d_forward_add_ref(float *y, const float *x, const float *r, const float *w,
                                const float *b, const hyfi_conv2d_args *a)
{
    int rc = hyfi_conv2d_forward_ref(y, x, w, b, a);
    if (rc) return rc;
    const size_t count = (size_t)a->n * a->c_out * a->ho * a->wo;
    for (size_t i = 0; i < count; i++) y[i] += r[i];
    return 0;
}

/* dx (N,Cin,H,W), dy (N,Cout,Ho,Wo), w (Cout,Cin/G,KH,KW).
 * dx[n,c,ih,iw] = sum over the outputs (co in c's group, oh, ow) whose window
 * covers (ih, iw) at kernel tap (i, j) = (ih - oh*sh + ph, iw - ow*sw + pw). */
int hyfi_conv2d_backward_data_ref(float *dx, const float *dy, const float *w,
                                  const hyfi_conv2d_args *a, int acc)
{
    const int cig = a->c_in / a->groups, cog = a->c_out / a->groups;
    for (int n = 0; n < a->n; n++)
        for (int c = 0; c < a->c_in; c++) {
            const int g = c / cig, ci = c % cig;
            for (int ih = 0; ih < a->h; ih++)
                for (int iw = 0; iw < a->w; iw++) {
                    double s = 0.0;
                    for (int co = g * cog; co < (g + 1) * cog; co++)
                        for (int oh = 0; oh < a->ho; oh++) {
                            const int i = ih - oh * a->sh + a->ph;
                            if (i < 0 || i >= a->kh) continue;
                            for (int ow = 0; ow < a->wo; ow++) {
                                const int j = iw - ow * a->sw + a->pw;
                                if (j < 0 || j >= a->kw) continue;
                                s += (double)dy[y_at(a, n, co, oh, ow)] *
                                     (double)w[w_at(a, co, ci, i, j)];
                            }
                        }
                    float *d = &dx[x_at(a, n, c, ih, iw)];
                    *d = acc ? *d + (float)s : (float)s;
                }
        }
    return 0;
}

/* dw (Cout,Cin/G,KH,KW), db (Cout) or NULL, dy (N,Cout,Ho,Wo), x (N,Cin,H,W).
 * dw[co,ci,i,j] = sum_{n,oh,ow} dy[n,co,oh,ow] * x[n, g*Cin/G+ci, oh*sh-ph+i, ow*sw-pw+j];
 * db[co] = sum_{n,oh,ow} dy[n,co,oh,ow]. */
int hyfi_conv2d_backward_weight_ref(float *dw, float *db, const float *dy, const float *x,
                                    const hyfi_conv2d_args *a, int acc)
{
    const int cig = a->c_in / a->groups, cog = a->c_out / a->groups;
    for (int co = 0; co < a->c_out; co++) {
        const int g = co / cog;
        for (int ci = 0; ci < cig; ci++)
            for (int i = 0; i < a->kh; i++)
                for (int j = 0; j < a->kw; j++) {
                    double s = 0.0;
                    for (int n = 0; n < a->n; n++)
                        for (int oh = 0; oh < a->ho; oh++) {
                            const int ih = oh * a->sh - a->ph + i;
                            if (ih < 0 || ih >= a->h) continue;
                            for (int ow = 0; ow < a->wo; ow++) {
                                const int iw = ow * a->sw - a->pw + j;
                                if (iw < 0 || iw >= a->w) continue;
                                s += (double)dy[y_at(a, n, co, oh, ow)] *
                                     (double)x[x_at(a, n, g * cig + ci, ih, iw)];
                            }
                        }
                    float *d = &dw[w_at(a, co, ci, i, j)];
                    *d = acc ? *d + (float)s : (float)s;
                }
        if (a->has_bias && db) {
            double s = 0.0;
            for (int n = 0; n < a->n; n++)
                for (int oh = 0; oh < a->ho; oh++)
                    for (int ow = 0; ow < a->wo; ow++) s += (double)dy[y_at(a, n, co, oh, ow)];
            db[co] = acc ? db[co] + (float)s : (float)s;
        }
    }
    return 0;
}
