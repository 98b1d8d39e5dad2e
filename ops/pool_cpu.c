/* pool_cpu.c: CPU pooling.
 *   max forward: oneDNN pooling_max, forward_inference (no workspace: the
 *     backward recomputes the argmax from x).
 *   max backward: own loop with the reference's tie rule (first maximum in
 *     row-major window order, padding never chosen), so that the CPU, CUDA and
 *     reference paths route gradients identically.
 *   avg forward / backward: oneDNN pooling_avg_include_padding or
 *     pooling_avg_exclude_padding (count_include_pad 1 / 0); for acc == 1 the
 *     backward writes to per-thread scratch and adds.
 *   global average pooling: own loops.
 * Padding: ph / pw on the low side; the high side gets whatever makes the
 * floor output size exact, (Ho-1)*sh + kh - H - ph, which may be negative (the
 * last rows / columns are then not covered by any window). The formulas are
 * those of pool_ref.c.
 */
#include "kernels.h"
#include "dnnl_common.h"

#include <math.h>
#include <string.h>

#define POOL_TRY(call)                                                          \
    do {                                                                        \
        dnnl_status_t st_ = (call);                                             \
        if (st_ != dnnl_success) {                                              \
            rc = -(int)st_ - 1;                                                 \
            goto done;                                                          \
        }                                                                       \
    } while (0)
#define POOL_TRY_INT(call)                                                      \
    do {                                                                        \
        if ((rc = (call)) != 0) goto done;                                      \
    } while (0)

/* Descriptors of x (N,C,H,W) and y (N,C,Ho,Wo), and the pooling geometry. */
typedef struct {
    dnnl_memory_desc_t src, dst;
    dnnl_dims_t strides, kernel, pad_l, pad_r;
} pool_geom;

static int pool_geom_init(pool_geom *g, const hyfi_pool_args *a)
{
    dnnl_dim_t ds[4] = {a->n, a->c, a->h, a->w};
    dnnl_dim_t dd[4] = {a->n, a->c, a->ho, a->wo};
    int rc = hyfi_dnnl_md(&g->src, 4, ds, dnnl_nchw);
    if (rc == 0) rc = hyfi_dnnl_md(&g->dst, 4, dd, dnnl_nchw);
    g->strides[0] = a->sh;
    g->strides[1] = a->sw;
    g->kernel[0] = a->kh;
    g->kernel[1] = a->kw;
    g->pad_l[0] = a->ph;
    g->pad_l[1] = a->pw;
    g->pad_r[0] = (dnnl_dim_t)(a->ho - 1) * a->sh + a->kh - a->h - a->ph;
    g->pad_r[1] = (dnnl_dim_t)(a->wo - 1) * a->sw + a->kw - a->w - a->pw;
    return rc;
}

static int pool_fwd_pd(dnnl_primitive_desc_t *pd, const pool_geom *g, dnnl_alg_kind_t alg,
                       dnnl_prop_kind_t prop)
{
    dnnl_engine_t e = hyfi_dnnl_engine();
    if (!e) return -1;
    dnnl_pooling_desc_t d;
    HYFI_DNNL_CHECK(dnnl_pooling_forward_desc_init(&d, prop, alg, &g->src, &g->dst, g->strides,
                                                   g->kernel, g->pad_l, g->pad_r));
    HYFI_DNNL_CHECK(dnnl_primitive_desc_create(pd, &d, NULL, e, NULL));
    return 0;
}

static dnnl_alg_kind_t avg_alg(const hyfi_pool_args *a)
{
    return a->count_include_pad ? dnnl_pooling_avg_include_padding
                                : dnnl_pooling_avg_exclude_padding;
}

/* Forward through oneDNN: y (N,C,Ho,Wo), x (N,C,H,W). */
static int pool_forward(float *y, const float *x, const hyfi_pool_args *a, dnnl_alg_kind_t alg)
{
    pool_geom g;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    int rc;
    POOL_TRY_INT(pool_geom_init(&g, a));
    POOL_TRY_INT(pool_fwd_pd(&pd, &g, alg, dnnl_forward_inference));
    POOL_TRY_INT(hyfi_dnnl_mem(&ms, &g.src, (void *)x));
    POOL_TRY_INT(hyfi_dnnl_mem(&md, &g.dst, y));
    {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_DST, md}};
        POOL_TRY_INT(hyfi_dnnl_run(pd, 2, args));
    }
    rc = 0;
done:
    if (ms) dnnl_memory_destroy(ms);
    if (md) dnnl_memory_destroy(md);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return rc;
}

int hyfi_maxpool_forward_cpu(float *y, const float *x, const hyfi_pool_args *a)
{
    return pool_forward(y, x, a, dnnl_pooling_max);
}

int hyfi_avgpool_forward_cpu(float *y, const float *x, const hyfi_pool_args *a)
{
    return pool_forward(y, x, a, avg_alg(a));
}

int hyfi_maxpool_backward_cpu(float *dx, const float *dy, const float *x,
                              const hyfi_pool_args *a, int acc)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    const int W = a->w;
    if (!acc) memset(dx, 0, planes * hw * sizeof(float));
    for (size_t p = 0; p < planes; p++) {
        const float *xp = x + p * hw;                   /* x (N,C,H,W) */
        float *dxp = dx + p * hw;                       /* dx (N,C,H,W) */
        const float *dyp = dy + p * a->ho * a->wo;      /* dy (N,C,Ho,Wo) */
        for (int oh = 0; oh < a->ho; oh++) {
            const int hs = oh * a->sh - a->ph;
            const int h0 = hs < 0 ? 0 : hs, h1 = hs + a->kh > a->h ? a->h : hs + a->kh;
            for (int ow = 0; ow < a->wo; ow++) {
                const int ws = ow * a->sw - a->pw;
                const int w0 = ws < 0 ? 0 : ws, w1 = ws + a->kw > W ? W : ws + a->kw;
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
    const size_t count = (size_t)a->n * a->c * a->h * a->w;
    float *out = dx;
    if (acc) {
        out = hyfi_cpu_scratch(0, count);
        if (!out) return -1;
    }
    pool_geom g;
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    int rc;
    POOL_TRY_INT(pool_geom_init(&g, a));
    POOL_TRY_INT(pool_fwd_pd(&fpd, &g, avg_alg(a), dnnl_forward_training)); /* hint */
    {
        dnnl_engine_t e = hyfi_dnnl_engine();
        dnnl_pooling_desc_t d;
        POOL_TRY(dnnl_pooling_backward_desc_init(&d, avg_alg(a), &g.src, &g.dst, g.strides,
                                                 g.kernel, g.pad_l, g.pad_r));
        POOL_TRY(dnnl_primitive_desc_create(&bpd, &d, NULL, e, fpd));
    }
    POOL_TRY_INT(hyfi_dnnl_mem(&ms, &g.src, out));        /* dx (N,C,H,W) */
    POOL_TRY_INT(hyfi_dnnl_mem(&md, &g.dst, (void *)dy)); /* dy (N,C,Ho,Wo) */
    {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_DIFF_DST, md}, {DNNL_ARG_DIFF_SRC, ms}};
        POOL_TRY_INT(hyfi_dnnl_run(bpd, 2, args));
    }
    if (acc)
        for (size_t i = 0; i < count; i++) dx[i] += out[i];
    rc = 0;
done:
    if (ms) dnnl_memory_destroy(ms);
    if (md) dnnl_memory_destroy(md);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (bpd) dnnl_primitive_desc_destroy(bpd);
    return rc;
}

int hyfi_gap_forward_cpu(float *y, const float *x, const hyfi_pool_args *a)
{
    const size_t planes = (size_t)a->n * a->c, hw = (size_t)a->h * a->w;
    const double inv = 1.0 / (double)hw;
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
