/* conv2d_cpu.c: CPU path of the 2-D convolution on oneDNN (forward, backward
 * data, backward weights with the bias gradient).
 *
 * The primitive descriptors are created with format "any" for the activations
 * and the weights, so that oneDNN picks its fastest (blocked) layouts, as
 * PyTorch's oneDNN path does, and the direct algorithm, or Winograd for the
 * 3x3 shapes where it is faster (see "algorithm choice" below); convolutions
 * with few output pixels run as GEMMs of hyfi's own ("GEMMs of our own"). The
 * user buffers are plain NCHW / OIHW (GOIHW when grouped: (G, Cout/G, Cin/G,
 * KH, KW), the same bytes as (Cout, Cin/G, KH, KW)); an input whose chosen layout differs is reordered
 * into a per-thread scratch buffer (hyfi_cpu_scratch), an output is computed in
 * scratch and reordered back. acc == 1 outputs are always computed in scratch
 * and added to the user buffer by a reorder with a sum post-op (plain C add as
 * a fallback). The bias stays plain (dnnl_x).
 *
 * Scratch slots used within one call: 0, 1, 2, 3 (one per tensor argument);
 * slot 0 again for the accumulation fallback once the primitive has run.
 *
 * Exception: 1x1 convolutions of stride 1 keep the activations in plain NCHW
 * (oneDNN then runs them as a GEMM, "gemm:jit"): the blocked 1x1 kernels are
 * faster per call, but the reorders around them cost more. On ResNet-110 v2
 * (two 1x1 of three convolutions) the reorders were 37% of oneDNN's time;
 * plain 1x1 cut its total by 21% and raised images/s 12% (AmoebaNet-D 15%),
 * docs/bench-cpu.md. hyfi_kernel_config.conv_plain -1 (always blocked), 1
 * (always plain) or 0 (the default) chooses, for measurements and tests.
 *
 * Blocked activations (src_blk / dst_blk > 0, hyfi_conv2d_args): x, dx and y,
 * dy are already in nChw8c / nChw16c (the engine keeps them so between
 * convolutions, batch norms and element-wise ops), and the primitive is made
 * for exactly that layout: no reorder of the activations at all.
 *
 * Blocked weights (wei_blk > 0): w and dw are in OIhw8i8o / OIhw16i16o, the
 * layout oneDNN's forward and backward-weights kernels pick on blocked
 * activations, so they use w and write dw as they are; only the direct
 * backward data (which wants OIhw16o16i, or IOhw16o16i for 1x1) still reorders
 * w (the Winograd one reads it as it is).
 */
#include "kernels.h"
#include "dnnl_common.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Inside the functions below: on failure set rc and jump to `out`. */
#define CK_DNNL(call)                                                           \
    do {                                                                        \
        dnnl_status_t st_ = (call);                                             \
        if (st_ != dnnl_success) {                                              \
            rc = -(int)st_ - 1;                                                 \
            goto out;                                                           \
        }                                                                       \
    } while (0)
#define CK(call)                                                                \
    do {                                                                        \
        rc = (call);                                                            \
        if (rc != 0) goto out;                                                  \
    } while (0)

/* Plain user descriptors, "any" descriptors and geometry of one convolution. */
typedef struct {
    dnnl_memory_desc_t src, wei, bia, dst;       /* plain: nchw, (g)oihw, x, nchw */
    dnnl_memory_desc_t src_any, wei_any, dst_any;
    dnnl_dims_t strides, pad_l, pad_r;
} conv_desc;

/* The oneDNN tag of an activation layout (0: plain NCHW). */
static dnnl_format_tag_t blk_tag(int blk)
{
    return blk == 0 ? dnnl_nchw : blk == 8 ? dnnl_nChw8c : blk == 16 ? dnnl_nChw16c
                                                                    : dnnl_format_tag_undef;
}

static int conv_desc_init(conv_desc *d, const hyfi_conv2d_args *a)
{
    const int G = a->groups;
    dnnl_dims_t sdims = {a->n, a->c_in, a->h, a->w};
    dnnl_dims_t ddims = {a->n, a->c_out, a->ho, a->wo};
    dnnl_dims_t bdims = {a->c_out};
    dnnl_dims_t wdims = {a->c_out, a->c_in, a->kh, a->kw};
    dnnl_dims_t gdims = {G, a->c_out / G, a->c_in / G, a->kh, a->kw};
    int rc;
    const dnnl_format_tag_t stag = blk_tag(a->src_blk), dtag = blk_tag(a->dst_blk);
    if (stag == dnnl_format_tag_undef || dtag == dnnl_format_tag_undef) return -1;
    if ((rc = hyfi_dnnl_md(&d->src, 4, sdims, stag))) return rc;
    if ((rc = hyfi_dnnl_md(&d->dst, 4, ddims, dtag))) return rc;
    if ((rc = hyfi_dnnl_md(&d->bia, 1, bdims, dnnl_x))) return rc;
    if (G == 1) {
        const dnnl_format_tag_t wtag = a->wei_blk == 0    ? dnnl_oihw
                                       : a->wei_blk == 8  ? dnnl_OIhw8i8o
                                       : a->wei_blk == 16 ? dnnl_OIhw16i16o
                                                          : dnnl_format_tag_undef;
        if (wtag == dnnl_format_tag_undef) return -1;
        if ((rc = hyfi_dnnl_md(&d->wei, 4, wdims, wtag))) return rc;
        if ((rc = hyfi_dnnl_md(&d->wei_any, 4, wdims, dnnl_format_tag_any))) return rc;
    } else {
        if (a->wei_blk) return -1;
        if ((rc = hyfi_dnnl_md(&d->wei, 5, gdims, dnnl_goihw))) return rc;
        if ((rc = hyfi_dnnl_md(&d->wei_any, 5, gdims, dnnl_format_tag_any))) return rc;
    }
    /* Activation layouts: "any" (blocked, reordered from and to NCHW around
     * every call), or plain NCHW. See the header comment. */
    const int cp = hyfi_kernel_settings.conv_plain;
    const int plain = cp < 0 ? 0 : cp > 0 ? 1 : 2;
    /* plain 1x1 only where neither side is blocked: a primitive on one plain
     * and one blocked side is oneDNN's reference kernel (100x slower) */
    const int pl = !a->src_blk && !a->dst_blk &&
                   (plain == 1 ||
                    (plain == 2 && a->kh == 1 && a->kw == 1 && a->sh == 1 && a->sw == 1));
    const dnnl_format_tag_t sany = a->src_blk ? stag : pl ? dnnl_nchw : dnnl_format_tag_any;
    const dnnl_format_tag_t dany = a->dst_blk ? dtag : pl ? dnnl_nchw : dnnl_format_tag_any;
    if ((rc = hyfi_dnnl_md(&d->src_any, 4, sdims, sany))) return rc;
    if ((rc = hyfi_dnnl_md(&d->dst_any, 4, ddims, dany))) return rc;
    d->strides[0] = a->sh;
    d->strides[1] = a->sw;
    /* Symmetric padding; oneDNN checks (in - k + pl + pr) / s + 1 == out with
     * integer division, so pr = pl is valid for every floor-mode output size. */
    d->pad_l[0] = d->pad_r[0] = a->ph;
    d->pad_l[1] = d->pad_r[1] = a->pw;
    return 0;
}

/* ------------------------------------------------------ algorithm choice
 *
 * oneDNN's Winograd F(4x4, 3x3) convolutions (jit_wino_4x3, AVX-512 only) take
 * the same blocked layouts as the direct ones (nChw16c, OIhw16i16o; its
 * backward data reads the forward weights as they are, without the reorder the
 * direct one needs) and do about 2.25x fewer multiplications, paid for by input,
 * weight and output transforms per 4x4 output tile. Measured on this project's
 * 2-core AVX-512 Xeon, one thread (docs/bench-cpu.md, "Winograd"): Winograd
 * takes 0.5-0.75x the direct time once there are enough tiles
 * (T = N ceil(Ho/4) ceil(Wo/4) >= 64) and channels (>= 32); with few tiles
 * (ResNet-18's 4x4 and 2x2 layers at batch 8: T = 8-32) the transforms dominate
 * and it takes 1.1-2.6x. The backward weights gains from T >= 32 on. So
 *   forward, backward data: Cin, Cout >= 32 and T >= 64;
 *   backward weights:       Cin, Cout >= 16 and T >= 32;
 * for 3x3 kernels of stride 1 and padding 0 or 1 with Cin, Cout multiples of
 * 16, blocked activations, and G == 1, on AVX-512. The choice depends on the shape only, so every run
 * of a shape (every place, plan and micro-batch of the same size) computes it
 * the same way. Its round-off differs from the direct algorithm's (the
 * transforms add and subtract before the products): the op tests bound it
 * against the double-precision reference (tests/test_op_conv2d.c).
 * hyfi_kernel_config.conv_algo 1 (hyfi-train: HYFI_CONV_ALGO=direct) turns it
 * off, 2 (=winograd) takes it wherever oneDNN has it (tests), 0 is the default
 * rule. A shape oneDNN declines runs direct. */
enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS };

/* 0 direct, 1 Winograd wherever possible, 2 auto, 3 auto with the GEMM weight
 * gradient wherever possible */
static int conv_algo_env(void)
{
    static const int mode[] = {2, 0, 1, 3}; /* hyfi_kernel_config.conv_algo's */
    const int c = hyfi_kernel_settings.conv_algo;
    return c >= 0 && c <= 3 ? mode[c] : 2;
}

/* Whether this CPU has oneDNN's Winograd kernels (AVX-512), asked once: a
 * shape oneDNN declines would cost a failed primitive descriptor per call. */
static int cpu_has_winograd(void)
{
    static int has = -1;
    if (has < 0) has = dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core;
    return has;
}

static dnnl_alg_kind_t conv_alg(const hyfi_conv2d_args *a, int dir)
{
    const int mode = conv_algo_env();
    /* the shapes oneDNN's jit_wino_4x3 takes (padding 0 or 1 measured) */
    const int eligible = a->groups == 1 && a->kh == 3 && a->kw == 3 && a->sh == 1 &&
                         a->sw == 1 && a->ph <= 1 && a->pw <= 1 && a->c_in % 16 == 0 &&
                         a->c_out % 16 == 0 && a->src_blk == 16 && a->dst_blk == 16 &&
                         cpu_has_winograd();
    if (mode == 0 || !eligible) return dnnl_convolution_direct;
    if (mode == 1) return dnnl_convolution_winograd;
    /* mode 2 or 3: the rule */
    const long tiles = (long)a->n * ((a->ho + 3) / 4) * ((a->wo + 3) / 4);
    const int cmin = a->c_in < a->c_out ? a->c_in : a->c_out;
    const int wino = dir == DIR_BWD_WEIGHTS ? cmin >= 16 && tiles >= 32 : cmin >= 32 && tiles >= 64;
    return wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
}

/* Forward-training primitive descriptor (also the hint of the backward ones). */
static int fwd_pd_create(dnnl_primitive_desc_t *pd, const conv_desc *d, int with_bias,
                         dnnl_alg_kind_t alg)
{
    dnnl_convolution_desc_t cd;
    HYFI_DNNL_CHECK(dnnl_convolution_forward_desc_init(
        &cd, dnnl_forward_training, alg, &d->src_any, &d->wei_any,
        with_bias ? &d->bia : NULL, &d->dst_any, d->strides, d->pad_l, d->pad_r));
    HYFI_DNNL_CHECK(
        dnnl_primitive_desc_create(pd, &cd, hyfi_dnnl_attr(), hyfi_dnnl_engine(), NULL));
    return 0;
}

/* The primitive descriptor of direction dir (DIR_*) with algorithm alg, and
 * for the backward ones their forward hint (*fpd, NULL for DIR_FWD). */
static int dir_pd_create(dnnl_primitive_desc_t *pd, dnnl_primitive_desc_t *fpd,
                         const conv_desc *d, int with_bias, int dir, dnnl_alg_kind_t alg)
{
    *pd = *fpd = NULL;
    if (dir == DIR_FWD) return fwd_pd_create(pd, d, with_bias, alg);
    dnnl_primitive_desc_t f = NULL;
    int rc = fwd_pd_create(&f, d, with_bias, alg);
    if (rc) return rc;
    dnnl_convolution_desc_t cd;
    dnnl_status_t st =
        dir == DIR_BWD_DATA
            ? dnnl_convolution_backward_data_desc_init(&cd, alg, &d->src_any, &d->wei_any,
                                                       &d->dst_any, d->strides, d->pad_l,
                                                       d->pad_r)
            : dnnl_convolution_backward_weights_desc_init(
                  &cd, alg, &d->src_any, &d->wei_any, with_bias ? &d->bia : NULL, &d->dst_any,
                  d->strides, d->pad_l, d->pad_r);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(pd, &cd, hyfi_dnnl_attr(), hyfi_dnnl_engine(), f);
    if (st != dnnl_success) {
        dnnl_primitive_desc_destroy(f);
        return -(int)st - 1;
    }
    *fpd = f;
    return 0;
}

/* Whether the buffers suit the Winograd kernels: they load and store aligned
 * 64-byte vectors (a misaligned buffer crashes them). The engine's buffers all
 * are (StarPU allocates on 64 bytes, engine/ctx.c); the kernels' other callers
 * get the direct algorithm for a misaligned one. */
static int aligned64(const void *p, const void *q, const void *r)
{
    return !(((uintptr_t)p | (uintptr_t)q | (uintptr_t)r) & 63);
}

int hyfi_conv2d_cpu_winograd(const hyfi_conv2d_args *a, int dir)
{
    static const int dirs[3] = {DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS};
    if (dir < 0 || dir > 2 || hyfi_conv2d_cpu_gemm(a, dir) ||
        conv_alg(a, dirs[dir]) != dnnl_convolution_winograd)
        return 0;
    conv_desc d;
    dnnl_primitive_desc_t pd, fpd;
    if (conv_desc_init(&d, a) ||
        dir_pd_create(&pd, &fpd, &d, dir != 1 && a->has_bias, dirs[dir],
                      dnnl_convolution_winograd))
        return 0;
    dnnl_primitive_desc_destroy(pd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    return 1;
}

/* dir_pd_create with the algorithm conv_alg chooses, falling back to the
 * direct one where oneDNN has no Winograd kernel for the shape or a buffer is
 * not aligned for it (p, q, r: the call's three tensors). */
static int conv_pd_create(dnnl_primitive_desc_t *pd, dnnl_primitive_desc_t *fpd,
                          const conv_desc *d, const hyfi_conv2d_args *a, int with_bias, int dir,
                          const void *p, const void *q, const void *r)
{
    const dnnl_alg_kind_t alg = aligned64(p, q, r) ? conv_alg(a, dir) : dnnl_convolution_direct;
    if (alg != dnnl_convolution_direct && dir_pd_create(pd, fpd, d, with_bias, dir, alg) == 0)
        return 0;
    return dir_pd_create(pd, fpd, d, with_bias, dir, dnnl_convolution_direct);
}

/* The thread's cached primitive (dnnl_common.h) of direction dir for the
 * call's shape, made by conv_pd_create on a miss: *out, or a negative rc. The
 * key holds what conv_pd_create's choice depends on: the shape arguments and
 * whether the buffers are aligned. */
static int conv_prim(const hyfi_dnnl_prim **out, const conv_desc *d, const hyfi_conv2d_args *a,
                     int with_bias, int dir, const void *p, const void *q, const void *r)
{
    struct {
        char tag[8];
        hyfi_conv2d_args a;
        int with_bias, dir, aligned;
    } key;
    memset(&key, 0, sizeof key);
    memcpy(key.tag, "conv2d", 7);
    key.a = *a;
    key.with_bias = with_bias;
    key.dir = dir;
    key.aligned = aligned64(p, q, r);
    if ((*out = hyfi_dnnl_cache_find(&key, sizeof key))) return 0;
    dnnl_primitive_desc_t pd, fpd;
    const int rc = conv_pd_create(&pd, &fpd, d, a, with_bias, dir, p, q, r);
    if (rc) return rc;
    return (*out = hyfi_dnnl_cache_add(&key, sizeof key, pd, fpd)) ? 0 : -1;
}

/* ------------------------------------------------------ GEMMs of our own
 *
 * With few output pixels per batch (K = N·Ho·Wo: ResNets' last stage at 64²
 * images, 2x2 at batch 8) oneDNN's convolution kernels run far below the
 * machine's speed (ResNet-50's 512→512 3x3 at 2x2: weight gradient 1.7-3.0
 * ms, backward data 1.0 ms plus 0.9 ms to reorder the weights), while the
 * same sums as GEMMs are fast. So for blocked activations and weights (16),
 * one group, and K <= 64, the CPU path computes the convolution itself:
 *   colT (K, M), M = Cin·KH·KW: for each output pixel kk = (n, oh, ow), the
 *     16 channels of input block ib under kernel tap (kh, kw) at column
 *     ((ib·KH + kh)·KW + kw)·16, 0 in the padding (64-byte copies out of
 *     nChw16c);
 *   g (Cout/16, K, 16): y's or dy's blocks gathered per output block ob;
 *   w[ob], the OIhw16i16o block of ob, is an (M, 16) matrix;
 *   forward:          g[ob] = colT · w[ob], then bias and scatter into y;
 *   weight gradient:  dw[ob] = colTᵀ · g[ob], written in place (acc: beta 1);
 *   backward data:    dcolT = sum over ob of g[ob] · w[ob]ᵀ, then each dx
 *                     pixel adds up its taps (col2im).
 * Each GEMM runs on one thread (the output blocks, or for the backward data
 * a range of input blocks, are shared among the threads), so the results do
 * not depend on the thread count (checked bitwise by tests/test_op_conv2d.c).
 * Measured (2 threads; docs/bench-cpu.md): weight gradient at K = 32 and 64
 * 0.4-0.6x oneDNN's time, at K = 128 1.1-1.6x, hence the bound; backward data
 * of the 3x3 at K = 32 0.7x (no weight reorder), of 1x1 alike; the forward
 * alike or slower (one narrow GEMM per output block), so the default rule
 * takes the two backward directions only. conv_algo 3 (HYFI_CONV_ALGO=gemm)
 * takes all three wherever the layouts allow (tests), 1 and 2 (=direct,
 * =winograd) never. */
#define GEMM_MAX_K 64

int hyfi_conv2d_cpu_gemm(const hyfi_conv2d_args *a, int dir)
{
    const int mode = conv_algo_env();
    const int eligible = a->groups == 1 && a->src_blk == 16 && a->dst_blk == 16 &&
                         a->wei_blk == 16 && a->c_in % 16 == 0 && a->c_out % 16 == 0;
    if (dir < 0 || dir > 2 || !eligible || mode == 0 || mode == 1) return 0;
    /* the forward's GEMMs (K x 16 x Cin·KH·KW each) were no faster than
     * oneDNN's kernel: only where forced */
    return mode == 3 || (dir > 0 && (long)a->n * a->ho * a->wo <= GEMM_MAX_K);
}

extern int omp_get_max_threads(void);

/* colT (K, M) from x (N, Cin/16, H, W, 16); see above */
static void im2col_t(float *colT, const float *x, const hyfi_conv2d_args *a)
{
    const int IB = a->c_in / 16, H = a->h, W = a->w, Ho = a->ho, Wo = a->wo;
    const int KH = a->kh, KW = a->kw, P = Ho * Wo, K = a->n * P;
    const size_t M = (size_t)IB * KH * KW * 16;
#pragma omp parallel for schedule(static)
    for (int kk = 0; kk < K; kk++) {
        const int n = kk / P, oh = kk % P / Wo, ow = kk % Wo;
        float *row = colT + (size_t)kk * M;
        for (int ib = 0; ib < IB; ib++)
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    float *d = row + (((size_t)ib * KH + kh) * KW + kw) * 16;
                    const int ih = oh * a->sh + kh - a->ph, iw = ow * a->sw + kw - a->pw;
                    if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                        memset(d, 0, 16 * sizeof *d);
                    else
                        memcpy(d, x + (((size_t)n * IB + ib) * H * W + (size_t)ih * W + iw) * 16,
                               16 * sizeof *d);
                }
    }
}

/* The GEMM paths' scratch: the (K, M) matrix (slot 0) and the gathered output
 * blocks g (Cout/16, K, 16) (slot 1); -1 when out of memory. */
static int gemm_scratch(const hyfi_conv2d_args *a, float **colT, float **g)
{
    const size_t K = (size_t)a->n * a->ho * a->wo, M = (size_t)a->c_in * a->kh * a->kw;
    *colT = hyfi_cpu_scratch(0, K * M);
    *g = hyfi_cpu_scratch(1, K * (size_t)a->c_out);
    return *colT && *g ? 0 : -1;
}

/* g (OB, N·P, 16) from t (N, OB, P, 16), or back (to_t) */
static void blocks_gather(float *g, float *t, int N, int OB, int P, int to_t)
{
    const size_t len = (size_t)P * 16 * sizeof *g;
    for (int ob = 0; ob < OB; ob++)
        for (int n = 0; n < N; n++) {
            float *gp = g + ((size_t)ob * N + n) * P * 16, *tp = t + ((size_t)n * OB + ob) * P * 16;
            if (to_t) memcpy(tp, gp, len);
            else memcpy(gp, tp, len);
        }
}

/* y (N, Cout/16, Ho, Wo, 16), x (N, Cin/16, H, W, 16), w (Cout/16, M, 16), b or NULL */
static int fwd_gemm(float *y, const float *x, const float *w, const float *b,
                    const hyfi_conv2d_args *a)
{
    const int N = a->n, OB = a->c_out / 16, P = a->ho * a->wo, K = N * P;
    const size_t M = (size_t)a->c_in * a->kh * a->kw;
    float *colT, *g;
    if (gemm_scratch(a, &colT, &g)) return -1;
    im2col_t(colT, x, a);
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (int ob = 0; ob < OB; ob++) {
        float *gb = g + (size_t)ob * K * 16;
        bad |= dnnl_sgemm('N', 'N', K, 16, (dnnl_dim_t)M, 1.0f, colT, (dnnl_dim_t)M,
                          w + (size_t)ob * M * 16, 16, 0.0f, gb, 16) != dnnl_success;
        if (b)
            for (int kk = 0; kk < K; kk++)
                for (int o = 0; o < 16; o++) gb[(size_t)kk * 16 + o] += b[ob * 16 + o];
    }
    blocks_gather(g, y, N, OB, P, 1);
    return bad ? -1 : 0;
}

/* dx (N, Cin/16, H, W, 16), dy (N, Cout/16, Ho, Wo, 16), w (Cout/16, M, 16) */
static int bwdd_gemm(float *dx, const float *dy, const float *w, const hyfi_conv2d_args *a,
                     int acc)
{
    const int N = a->n, IB = a->c_in / 16, OB = a->c_out / 16, H = a->h, W = a->w;
    const int Ho = a->ho, Wo = a->wo, KH = a->kh, KW = a->kw, P = Ho * Wo, K = N * P;
    const int cols = KH * KW * 16; /* columns of dcolT per input block */
    const size_t M = (size_t)IB * cols;
    float *dcolT, *g;
    if (gemm_scratch(a, &dcolT, &g)) return -1;
    blocks_gather(g, (float *)dy, N, OB, P, 0);
    int nt = omp_get_max_threads();
    nt = nt < 1 ? 1 : nt > IB ? IB : nt;
    int bad = 0;
    /* thread t: the columns of input blocks [IB t / nt, IB (t+1) / nt), summed
     * over the output blocks in order */
#pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(| : bad)
    for (int t = 0; t < nt; t++) {
        const int ib0 = IB * t / nt, ib1 = IB * (t + 1) / nt;
        if (ib1 == ib0) continue;
        for (int ob = 0; ob < OB; ob++)
            bad |= dnnl_sgemm('N', 'T', K, (dnnl_dim_t)(ib1 - ib0) * cols, 16, 1.0f,
                              g + (size_t)ob * K * 16, 16,
                              w + ((size_t)ob * M + (size_t)ib0 * cols) * 16, 16,
                              ob ? 1.0f : 0.0f, dcolT + (size_t)ib0 * cols, (dnnl_dim_t)M) !=
                   dnnl_success;
    }
    /* col2im: every dx pixel adds its taps in (oh, ow, kh, kw) order */
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < N; n++)
        for (int ib = 0; ib < IB; ib++) {
            float *d = dx + ((size_t)n * IB + ib) * H * W * 16;
            if (!acc) memset(d, 0, (size_t)H * W * 16 * sizeof *d);
            for (int oh = 0; oh < Ho; oh++)
                for (int ow = 0; ow < Wo; ow++) {
                    const float *row = dcolT + ((size_t)(n * Ho + oh) * Wo + ow) * M +
                                       (size_t)ib * cols;
                    for (int kh = 0; kh < KH; kh++)
                        for (int kw = 0; kw < KW; kw++) {
                            const int ih = oh * a->sh + kh - a->ph, iw = ow * a->sw + kw - a->pw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            float *dp = d + ((size_t)ih * W + iw) * 16;
                            const float *sp = row + (kh * KW + kw) * 16;
                            for (int i = 0; i < 16; i++) dp[i] += sp[i];
                        }
                }
        }
    return bad ? -1 : 0;
}

/* dw (Cout/16, M, 16), db (Cout) or NULL, dy (N, Cout/16, Ho, Wo, 16),
 * x (N, Cin/16, H, W, 16) */
static int bwdw_gemm(float *dw, float *db, const float *dy, const float *x,
                     const hyfi_conv2d_args *a, int acc)
{
    const int N = a->n, OB = a->c_out / 16, P = a->ho * a->wo, K = N * P;
    const size_t M = (size_t)a->c_in * a->kh * a->kw;
    float *colT, *g;
    if (gemm_scratch(a, &colT, &g)) return -1;
    im2col_t(colT, x, a);
    blocks_gather(g, (float *)dy, N, OB, P, 0);
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (int ob = 0; ob < OB; ob++)
        bad |= dnnl_sgemm('T', 'N', (dnnl_dim_t)M, 16, K, 1.0f, colT, (dnnl_dim_t)M,
                          g + (size_t)ob * K * 16, 16, acc ? 1.0f : 0.0f,
                          dw + (size_t)ob * M * 16, 16) != dnnl_success;
    if (db)
        for (int ob = 0; ob < OB; ob++)
            for (int o = 0; o < 16; o++) {
                float sum = 0;
                for (int kk = 0; kk < K; kk++) sum += g[((size_t)ob * K + kk) * 16 + o];
                db[ob * 16 + o] = acc ? db[ob * 16 + o] + sum : sum;
            }
    return bad ? -1 : 0;
}

/* user += reorder(prim): a reorder with a sum post-op; when oneDNN has none
 * for this pair of layouts, reorder into plain scratch (slot fb_slot) and add. */
static int reorder_add(dnnl_memory_t prim, dnnl_memory_t user, int fb_slot)
{
    const dnnl_memory_desc_t *smd, *dmd;
    HYFI_DNNL_CHECK(dnnl_memory_get_memory_desc(prim, &smd));
    HYFI_DNNL_CHECK(dnnl_memory_get_memory_desc(user, &dmd));
    dnnl_engine_t e = hyfi_dnnl_engine();
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_t tmp = NULL;
    int rc = 0;
    CK_DNNL(dnnl_primitive_attr_create(&attr));
    CK_DNNL(dnnl_post_ops_create(&po));
    CK_DNNL(dnnl_post_ops_append_sum(po, 1.0f));
    CK_DNNL(dnnl_primitive_attr_set_post_ops(attr, po));
    CK_DNNL(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (dnnl_reorder_primitive_desc_create(&pd, smd, e, dmd, e, attr) == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, prim}, {DNNL_ARG_TO, user}};
        rc = hyfi_dnnl_run(pd, 2, args);
    } else {
        pd = NULL;
        void *sp, *dp;
        CK_DNNL(dnnl_memory_get_data_handle(user, &dp));
        if (dnnl_memory_desc_equal(smd, dmd)) {
            CK_DNNL(dnnl_memory_get_data_handle(prim, &sp));
        } else {
            CK(hyfi_dnnl_scratch_mem(&tmp, dmd, fb_slot));
            CK(hyfi_dnnl_reorder(prim, tmp));
            CK_DNNL(dnnl_memory_get_data_handle(tmp, &sp));
        }
        float *dst = dp;
        const float *src = sp;
        size_t count = dnnl_memory_desc_get_size(dmd) / sizeof(float);
        for (size_t i = 0; i < count; i++) dst[i] += src[i];
    }
out:
    if (tmp) dnnl_memory_destroy(tmp);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return rc;
}

/* Bring an output computed in scratch back to the user buffer (add if acc). */
static int arg_out_finish(hyfi_dnnl_arg *t, int acc, int fb_slot)
{
    if (t->prim == t->user) return 0;
    return acc ? reorder_add(t->prim, t->user, fb_slot) : hyfi_dnnl_reorder(t->prim, t->user);
}

/* y (N,Cout,Ho,Wo), x (N,Cin,H,W), w (Cout,Cin/G,KH,KW), b (Cout) or NULL */
int hyfi_conv2d_forward_cpu(float *y, const float *x, const float *w, const float *b,
                            const hyfi_conv2d_args *a)
{
    const int with_bias = a->has_bias && b;
    conv_desc d;
    const hyfi_dnnl_prim *cp = NULL;
    dnnl_primitive_desc_t pd;
    hyfi_dnnl_arg src = {0}, wei = {0}, bia = {0}, dst = {0};
    int rc;
    if (hyfi_conv2d_cpu_gemm(a, 0)) return fwd_gemm(y, x, w, with_bias ? b : NULL, a);
    hyfi_dnnl_cache_trim();
    CK(conv_desc_init(&d, a));
    CK(conv_prim(&cp, &d, a, with_bias, DIR_FWD, y, x, w));
    pd = cp->pd;
    CK(hyfi_dnnl_arg_in(&src, &d.src, x, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), 0));
    CK(hyfi_dnnl_arg_in(&wei, &d.wei, w, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), 1));
    CK(hyfi_dnnl_arg_out(&dst, &d.dst, y, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), 2, 0));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src.prim},
                               {DNNL_ARG_WEIGHTS, wei.prim},
                               {DNNL_ARG_DST, dst.prim},
                               {DNNL_ARG_BIAS, NULL}};
    if (with_bias) {
        CK(hyfi_dnnl_arg_in(&bia, &d.bia, b, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1),
                  3));
        args[3].memory = bia.prim;
    }
    CK(hyfi_dnnl_exec(cp, with_bias ? 4 : 3, args));
    CK(arg_out_finish(&dst, 0, 0));
out:
    hyfi_dnnl_arg_free(&src);
    hyfi_dnnl_arg_free(&wei);
    hyfi_dnnl_arg_free(&bia);
    hyfi_dnnl_arg_free(&dst);
    return rc;
}

/* y = conv(x, w, b) + r (the residual add fused after the convolution);
 * r (N,Cout,Ho,Wo) in y's layout; round_mid: in a bf16 task on staged
 * buffers, the convolution's result rounded to bf16 first, as the two tasks
 * apart would store it */
int hyfi_conv2d_forward_add_cpu(float *y, const float *x, const float *r, const float *w,
                                const float *b, const hyfi_conv2d_args *a, int round_mid)
{
    int rc = hyfi_conv2d_forward_cpu(y, x, w, b, a);
    if (rc) return rc;
    const size_t count = (size_t)a->n * a->c_out * a->ho * a->wo;
    if (round_mid && (rc = hyfi_bf16_round_cpu(y, count)) != 0) return rc;
    return hyfi_add_forward_cpu(y, y, r, count);
}

/* dx (N,Cin,H,W), dy (N,Cout,Ho,Wo), w (Cout,Cin/G,KH,KW) */
int hyfi_conv2d_backward_data_cpu(float *dx, const float *dy, const float *w,
                                  const hyfi_conv2d_args *a, int acc)
{
    conv_desc d;
    const hyfi_dnnl_prim *cp = NULL;
    dnnl_primitive_desc_t pd;
    hyfi_dnnl_arg ddst = {0}, wei = {0}, dsrc = {0};
    int rc;
    if (hyfi_conv2d_cpu_gemm(a, 1)) return bwdd_gemm(dx, dy, w, a, acc);
    hyfi_dnnl_cache_trim();
    CK(conv_desc_init(&d, a));
    CK(conv_prim(&cp, &d, a, 0, DIR_BWD_DATA, dx, dy, w));
    pd = cp->pd;
    CK(hyfi_dnnl_arg_in(&ddst, &d.dst, dy, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0),
              0));
    CK(hyfi_dnnl_arg_in(&wei, &d.wei, w, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), 1));
    CK(hyfi_dnnl_arg_out(&dsrc, &d.src, dx, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0),
               2, acc));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, ddst.prim},
                               {DNNL_ARG_WEIGHTS, wei.prim},
                               {DNNL_ARG_DIFF_SRC, dsrc.prim}};
    CK(hyfi_dnnl_exec(cp, 3, args));
    CK(arg_out_finish(&dsrc, acc, 0));
out:
    hyfi_dnnl_arg_free(&ddst);
    hyfi_dnnl_arg_free(&wei);
    hyfi_dnnl_arg_free(&dsrc);
    return rc;
}

/* dw (Cout,Cin/G,KH,KW), db (Cout) or NULL, dy (N,Cout,Ho,Wo), x (N,Cin,H,W) */
int hyfi_conv2d_backward_weight_cpu(float *dw, float *db, const float *dy, const float *x,
                                    const hyfi_conv2d_args *a, int acc)
{
    const int with_bias = a->has_bias && db;
    conv_desc d;
    const hyfi_dnnl_prim *cp = NULL;
    dnnl_primitive_desc_t pd;
    hyfi_dnnl_arg src = {0}, ddst = {0}, dwei = {0}, dbia = {0};
    int rc;
    if (hyfi_conv2d_cpu_gemm(a, 2)) return bwdw_gemm(dw, with_bias ? db : NULL, dy, x, a, acc);
    hyfi_dnnl_cache_trim();
    CK(conv_desc_init(&d, a));
    CK(conv_prim(&cp, &d, a, with_bias, DIR_BWD_WEIGHTS, dw, dy, x));
    pd = cp->pd;
    CK(hyfi_dnnl_arg_in(&src, &d.src, x, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), 0));
    CK(hyfi_dnnl_arg_in(&ddst, &d.dst, dy, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0),
              1));
    CK(hyfi_dnnl_arg_out(&dwei, &d.wei, dw,
               dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0), 2, acc));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src.prim},
                               {DNNL_ARG_DIFF_DST, ddst.prim},
                               {DNNL_ARG_DIFF_WEIGHTS, dwei.prim},
                               {DNNL_ARG_DIFF_BIAS, NULL}};
    if (with_bias) {
        CK(hyfi_dnnl_arg_out(&dbia, &d.bia, db,
                   dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 1), 3, acc));
        args[3].memory = dbia.prim;
    }
    CK(hyfi_dnnl_exec(cp, with_bias ? 4 : 3, args));
    /* The inputs are consumed: slots 0 and 1 are free for the add fallback. */
    CK(arg_out_finish(&dwei, acc, 0));
    if (with_bias) CK(arg_out_finish(&dbia, acc, 1));
out:
    hyfi_dnnl_arg_free(&src);
    hyfi_dnnl_arg_free(&ddst);
    hyfi_dnnl_arg_free(&dwei);
    hyfi_dnnl_arg_free(&dbia);
    return rc;
}
