/* conv2d_cpu_bf16.c: the CPU convolution on bf16 storage with oneDNN's bf16
 * primitives (mixed precision, kernels.h "bfloat16"), for CPUs where they beat
 * the float32 ones (measured per CPU: hyfi_conv2d_cpu_bf16_faster).
 *
 * Storage: activations x, y and their gradients dx, dy are bf16 (the high
 * halves of float32s) in the layouts of conv2d_cpu.c (plain NCHW, or nChw8c /
 * nChw16c by src_blk / dst_blk); the weights w, the bias and the weight and
 * bias gradients dw, db are float32 (the master copy, in OIHW or OIhw16i16o by
 * wei_blk). The primitives take bf16 sources and weights (the float32 weights
 * reordered to bf16, rounding to nearest even: the HYFI_W rounding), multiply
 * exactly and accumulate in float32; the forward writes y rounded to bf16, the
 * backward data dx (in float32 when it accumulates: dx = round(dx + result)),
 * the backward weights dw and db in float32. Up to the order of the sums this
 * is the float32 path on bf16-rounded operands (tests/test_op_conv2d_bf16.c).
 * Direct algorithm only (no Winograd, no GEMMs of our own); a shape whose only
 * bf16 primitive is oneDNN's reference kernel is left to the float32 path
 * (hyfi_conv2d_cpu_bf16 answers 0 for it).
 *
 * Scratch slots within one call: 0 to 3, as conv2d_cpu.c. */
#include "kernels.h"
#include "dnnl_common.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                \
    do {                                                                        \
        rc = (call);                                                            \
        if (rc != 0) goto out;                                                  \
    } while (0)

enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS };

static dnnl_format_tag_t act_tag(int blk)
{
    return blk == 0 ? dnnl_nchw : blk == 8 ? dnnl_nChw8c : blk == 16 ? dnnl_nChw16c
                                                                    : dnnl_format_tag_undef;
}

static int md(dnnl_memory_desc_t *m, int nd, const dnnl_dim_t *dims, dnnl_data_type_t dt,
              dnnl_format_tag_t tag)
{
    return dnnl_memory_desc_init_by_tag(m, nd, dims, dt, tag) == dnnl_success ? 0 : -1;
}

typedef struct {
    dnnl_memory_desc_t src, dst, wei, bia;            /* user: bf16, bf16, f32, f32 */
    dnnl_memory_desc_t src_any, dst_any, wei_any; /* primitive: bf16 */
    dnnl_memory_desc_t dwei_any;                  /* the weights' gradient: float32 */
    dnnl_memory_desc_t dsrc_f32;                      /* dx in float32, dx's layout (acc) */
    dnnl_dims_t strides, pad;
} bdesc;

static int bdesc_init(bdesc *d, const hyfi_conv2d_args *a)
{
    const int G = a->groups;
    dnnl_dims_t sdims = {a->n, a->c_in, a->h, a->w}, ddims = {a->n, a->c_out, a->ho, a->wo};
    dnnl_dims_t bdims = {a->c_out};
    dnnl_dims_t wdims = {a->c_out, a->c_in, a->kh, a->kw};
    dnnl_dims_t gdims = {G, a->c_out / G, a->c_in / G, a->kh, a->kw};
    const dnnl_format_tag_t st = act_tag(a->src_blk), dt = act_tag(a->dst_blk);
    if (st == dnnl_format_tag_undef || dt == dnnl_format_tag_undef) return -1;
    if (md(&d->src, 4, sdims, dnnl_bf16, st) || md(&d->dst, 4, ddims, dnnl_bf16, dt) ||
        md(&d->dsrc_f32, 4, sdims, dnnl_f32, st) || md(&d->bia, 1, bdims, dnnl_f32, dnnl_x))
        return -1;
    if (G == 1) {
        const dnnl_format_tag_t wt = a->wei_blk == 0    ? dnnl_oihw
                                     : a->wei_blk == 8  ? dnnl_OIhw8i8o
                                     : a->wei_blk == 16 ? dnnl_OIhw16i16o
                                                        : dnnl_format_tag_undef;
        if (wt == dnnl_format_tag_undef || md(&d->wei, 4, wdims, dnnl_f32, wt) ||
            md(&d->wei_any, 4, wdims, dnnl_bf16, dnnl_format_tag_any) ||
            md(&d->dwei_any, 4, wdims, dnnl_f32, dnnl_format_tag_any))
            return -1;
    } else {
        if (a->wei_blk || md(&d->wei, 5, gdims, dnnl_f32, dnnl_goihw) ||
            md(&d->wei_any, 5, gdims, dnnl_bf16, dnnl_format_tag_any) ||
            md(&d->dwei_any, 5, gdims, dnnl_f32, dnnl_format_tag_any))
            return -1;
    }
    /* blocked activations as they are; plain ones reordered to oneDNN's choice */
    if (md(&d->src_any, 4, sdims, dnnl_bf16, a->src_blk ? st : dnnl_format_tag_any) ||
        md(&d->dst_any, 4, ddims, dnnl_bf16, a->dst_blk ? dt : dnnl_format_tag_any))
        return -1;
    d->strides[0] = a->sh, d->strides[1] = a->sw;
    d->pad[0] = a->ph, d->pad[1] = a->pw;
    return 0;
}

/* The scratch caps: of oneDNN's kernel choice (pick_pd) and of a call before
 * it runs in pieces (below); hyfi_conv2d_cpu_bf16_set_scratch_cap */
#define PAD_CAP_DEFAULT ((size_t)32 << 20)
static size_t g_pad_cap = PAD_CAP_DEFAULT, g_pick_cap = PAD_CAP_DEFAULT;

static size_t pd_pad_bytes(const_dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *m = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return m ? dnnl_memory_desc_get_size(m) : 0;
}

/* Whether a primitive descriptor is one of oneDNN's fast kernels (not "ref"). */
static int pd_fast(const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (!pd || dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) !=
                   dnnl_success || !impl)
        return 0;
    return strstr(impl, "ref") == NULL;
}

/* The primitive descriptor of op cd: oneDNN's first choice, unless its
 * scratchpad passes the cap and a later fast kernel's does not. oneDNN's bf16
 * 1x1 kernels book a float32 buffer of the whole result (256 MB for a
 * 16 -> 32 convolution at 1,024², 2 threads), its direct bf16 kernel none, at
 * the same speed within ~15% (docs/results.md). Which kernel follows the
 * shape, the thread count and the cap alone, so every process running a shape
 * runs the same one. */
static int pick_pd(dnnl_primitive_desc_t *pd, const void *cd, const_dnnl_primitive_desc_t hint)
{
    dnnl_primitive_desc_iterator_t it;
    *pd = NULL;
    HYFI_DNNL_CHECK(dnnl_primitive_desc_iterator_create(&it, (const_dnnl_op_desc_t)cd,
                                                        hyfi_dnnl_attr(), hyfi_dnnl_engine(),
                                                        hint));
    dnnl_primitive_desc_t first = dnnl_primitive_desc_iterator_fetch(it);
    if (first && !(pd_fast(first) && pd_pad_bytes(first) <= g_pick_cap)) {
        while (dnnl_primitive_desc_iterator_next(it) == dnnl_success) {
            dnnl_primitive_desc_t q = dnnl_primitive_desc_iterator_fetch(it);
            if (q && pd_fast(q) && pd_pad_bytes(q) <= g_pick_cap) {
                dnnl_primitive_desc_destroy(first);
                first = q;
                break;
            }
            if (q) dnnl_primitive_desc_destroy(q);
        }
    }
    dnnl_primitive_desc_iterator_destroy(it);
    *pd = first;
    return first ? 0 : -1;
}

static int fwd_pd(dnnl_primitive_desc_t *pd, const bdesc *d, int with_bias)
{
    dnnl_convolution_desc_t cd;
    HYFI_DNNL_CHECK(dnnl_convolution_forward_desc_init(
        &cd, dnnl_forward_training, dnnl_convolution_direct, &d->src_any, &d->wei_any,
        with_bias ? &d->bia : NULL, &d->dst_any, d->strides, d->pad, d->pad));
    return pick_pd(pd, &cd, NULL);
}

/* The primitive of direction dir (and its forward hint), dx in float32 when acc. */
static int dir_pd(dnnl_primitive_desc_t *pd, dnnl_primitive_desc_t *hint, const bdesc *d,
                  int with_bias, int dir, int acc)
{
    *pd = *hint = NULL;
    if (dir == DIR_FWD) return fwd_pd(pd, d, with_bias);
    dnnl_primitive_desc_t f = NULL;
    int rc = fwd_pd(&f, d, with_bias);
    if (rc) return rc;
    dnnl_convolution_desc_t cd;
    dnnl_memory_desc_t dsrc;
    if (dir == DIR_BWD_DATA) {
        dsrc = d->src_any;
        if (acc) dsrc.data_type = dnnl_f32;
    }
    dnnl_status_t s =
        dir == DIR_BWD_DATA
            ? dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &dsrc,
                                                       &d->wei_any, &d->dst_any, d->strides,
                                                       d->pad, d->pad)
            : dnnl_convolution_backward_weights_desc_init(
                  &cd, dnnl_convolution_direct, &d->src_any, &d->dwei_any,
                  with_bias ? &d->bia : NULL, &d->dst_any, d->strides, d->pad, d->pad);
    if (s != dnnl_success || (rc = pick_pd(pd, &cd, f)) != 0) {
        dnnl_primitive_desc_destroy(f);
        return s != dnnl_success ? -(int)s - 1 : rc;
    }
    *hint = f;
    return 0;
}

/* The memory descriptor the primitive wants for `what` (index i). */
static const dnnl_memory_desc_t *qmd(const hyfi_dnnl_prim *p, dnnl_query_t what, int i)
{
    return dnnl_primitive_desc_query_md(p->pd, what, i);
}

static const hyfi_dnnl_prim *prim(const bdesc *d, const hyfi_conv2d_args *a, int with_bias,
                                  int dir, int acc)
{
    struct {
        char tag[8];
        hyfi_conv2d_args a;
        int with_bias, dir, acc;
        size_t cap;
    } key;
    memset(&key, 0, sizeof key);
    memcpy(key.tag, "cbf16", 6);
    key.a = *a;
    key.with_bias = with_bias, key.dir = dir, key.acc = dir == DIR_BWD_DATA && acc;
    key.cap = g_pick_cap;
    const hyfi_dnnl_prim *p = hyfi_dnnl_cache_find(&key, sizeof key);
    if (p) return p;
    dnnl_primitive_desc_t pd, hint;
    if (dir_pd(&pd, &hint, d, with_bias, dir, key.acc)) return NULL;
    return hyfi_dnnl_cache_add(&key, sizeof key, pd, hint);
}


/* -------------------------------------------------- which path, per CPU */
static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether oneDNN's bf16 convolution beats its float32 one on this CPU: a 3x3
 * 64 -> 64 convolution at 28x28, batch 4, timed both ways (best of 5, after a
 * warm-up) with the calling thread's OpenMP threads. */
static int measure(double *t_bf16, double *t_f32)
{
    const hyfi_conv2d_args a = {.n = 4, .c_in = 64, .h = 28, .w = 28, .c_out = 64, .ho = 28,
                                .wo = 28, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1,
                                .groups = 1, .src_blk = 16, .dst_blk = 16, .wei_blk = 16};
    const size_t nx = (size_t)4 * 64 * 28 * 28, nw = (size_t)64 * 64 * 9;
    float *x = calloc(nx, sizeof *x), *y = calloc(nx, sizeof *y), *w = calloc(nw, sizeof *w);
    uint16_t *xb = calloc(nx, sizeof *xb), *yb = calloc(nx, sizeof *yb);
    int rc = -1;
    if (x && y && w && xb && yb) {
        for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
        for (size_t i = 0; i < nw; i++) w[i] = (float)((i * 5) % 11) * 0.01f - 0.05f;
        hyfi_f32_to_bf16_serial(xb, x, nx);
        *t_bf16 = *t_f32 = 1e9;
        rc = 0;
        for (int r = 0; r < 6 && !rc; r++) {
            double t0 = mono();
            rc = hyfi_conv2d_forward_cpu_bf16(yb, xb, w, NULL, &a);
            const double tb = mono() - t0;
            t0 = mono();
            if (!rc) rc = hyfi_conv2d_forward_cpu(y, x, w, NULL, &a);
            const double tf = mono() - t0;
            if (r > 0 && tb < *t_bf16) *t_bf16 = tb;
            if (r > 0 && tf < *t_f32) *t_f32 = tf;
        }
    }
    free(x), free(y), free(w), free(xb), free(yb);
    return rc;
}

/* The choice per CPU, from measurements (docs/results.md), not timed at run
 * time: a timing near the threshold could choose differently in two
 * processes, and the two paths round differently (the sums' order), so a
 * resumed run or another rank would not be bitwise the same run. oneDNN's
 * bf16 kernels where they were measured faster: AMD CPUs with avx512_bf16
 * (EPYC: 0.25 ms against 0.50 ms float32, 2026-11-27) and CPUs with AMX
 * tiles; not Intel's avx512_bf16 without AMX (a Xeon: 21.6 ms against
 * 12.1 ms). */
static int choose(void)
{
    if (hyfi_kernel_settings.bf16_conv > 0) return 1;
    if (hyfi_kernel_settings.bf16_conv < 0) return 0;
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (isa >= dnnl_cpu_isa_avx512_core_amx) return 1;
    if (isa < dnnl_cpu_isa_avx512_core_bf16) return 0;
    unsigned a = 0, b = 0, c = 0, d = 0;
    char vendor[13] = "";
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
        vendor[12] = 0;
    }
    return !strcmp(vendor, "AuthenticAMD");
}

static int g_choice = -1;
static pthread_once_t g_choice_once = PTHREAD_ONCE_INIT;
static void choice_init(void) { g_choice = choose(); }

int hyfi_conv2d_cpu_bf16_faster(double *t_bf16, double *t_f32)
{
    pthread_once(&g_choice_once, choice_init);
    if (t_bf16 && t_f32 && measure(t_bf16, t_f32) != 0) *t_bf16 = *t_f32 = 0;
    return g_choice;
}

int hyfi_conv2d_cpu_bf16(const hyfi_conv2d_args *a, int dir, int acc)
{
    static const int dirs[3] = {DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS};
    if (dir < 0 || dir > 2 || !hyfi_conv2d_cpu_bf16_faster(NULL, NULL)) return 0;
    bdesc d;
    if (bdesc_init(&d, a)) return 0;
    const hyfi_dnnl_prim *p = prim(&d, a, dir != 1 && a->has_bias, dirs[dir], acc);
    return p && pd_fast(p->pd);
}

/* ------------------------------------------------------------ pieces */
/* oneDNN's bf16 1x1 kernels (jit_bf16_1x1) book a float32 store buffer of
 * the whole result per thread: at 2,048² ResNet-50's 64 -> 256 convolution
 * at 512² asked 512 MB of scratchpad on 2 threads for a 32 MB input. Where
 * oneDNN has another fast kernel within the kernel cap, pick_pd takes it;
 * else a call whose scratch would exceed the cap (32 MB) runs in pieces:
 * images (any layout:
 * the batch is outermost), then, for one image, channel blocks of the
 * result (the forward's output channels, the backward data's input channels:
 * contiguous for one image in every activation layout, the weights read
 * through a sub-memory). The reduction runs over channels that are not
 * split, so the pieces give the whole call's bits, except oneDNN's strided
 * 1x1 forward, whose sums are blocked by the output channels: one bf16 unit
 * apart at most (tests/test_op_conv2d_bf16.c). Which pieces follows the shape
 * and the thread count alone, so every process and plan running a shape
 * runs the same pieces. */
void hyfi_conv2d_cpu_bf16_set_scratch_cap(size_t pieces, size_t kernel)
{
    g_pad_cap = pieces ? pieces : PAD_CAP_DEFAULT;
    g_pick_cap = kernel ? kernel : PAD_CAP_DEFAULT;
}

size_t hyfi_conv2d_cpu_bf16_scratch(const hyfi_conv2d_args *a, int dir)
{
    static const int dirs[3] = {DIR_FWD, DIR_BWD_DATA, DIR_BWD_WEIGHTS};
    bdesc d;
    if (dir < 0 || dir > 2 || bdesc_init(&d, a)) return 0;
    const hyfi_dnnl_prim *p = prim(&d, a, dir != 1 && a->has_bias, dirs[dir], 0);
    return p ? pd_pad_bytes(p->pd) : 0;
}


typedef struct {
    int n0, nn; /* images */
    int c0, nc; /* channels of the result, all of them: c0 0, nc C */
} piece;

/* The pieces of a call over n images whose result has C channels in blocks of
 * blk (0: plain) and whose whole scratch (oneDNN's scratchpad, and the
 * float32 result of an accumulating backward data) is pad bytes: images per
 * piece, channel pieces per image (k: C / k a multiple of the blocks). */
static void split(int n, int C, int blk, int wei_blk, int groups, size_t pad, int *nn, int *k)
{
    *nn = n, *k = 1;
    if (pad <= g_pad_cap) return;
    const size_t per_image = (pad + (size_t)n - 1) / (size_t)n;
    const size_t fit = g_pad_cap / (per_image ? per_image : 1);
    *nn = fit >= (size_t)n ? n : fit < 1 ? 1 : (int)fit;
    if (*nn > 1 || per_image <= g_pad_cap || groups != 1) return;
    int unit = blk > wei_blk ? blk : wei_blk;
    if (unit < 16 && C % 16 == 0) unit = 16;
    if (unit < 1) unit = 1;
    const int blocks = C / unit;
    const size_t want = (per_image + g_pad_cap - 1) / g_pad_cap;
    for (int d = 2; d <= blocks; d++)
        if (blocks % d == 0 && (size_t)d >= want) {
            *k = d;
            return;
        }
    *k = blocks > 1 ? blocks : 1;
}

/* ----------------------------------------------------------- the calls */
/* The float32 values of `prim` (a result in the primitive's layout `want`)
 * in layout `md`: its own buffer when the two agree, else reordered into
 * scratch slot `slot` (*flat, which the caller destroys). NULL on failure. */
static const float *f32_view(dnnl_memory_t prim, const dnnl_memory_desc_t *want,
                             const dnnl_memory_desc_t *md, int slot, dnnl_memory_t *flat)
{
    void *h = NULL;
    if (dnnl_memory_desc_equal(want, md))
        return dnnl_memory_get_data_handle(prim, &h) == dnnl_success ? h : NULL;
    if (hyfi_dnnl_scratch_mem(flat, md, slot) || hyfi_dnnl_reorder(prim, *flat) ||
        dnnl_memory_get_data_handle(*flat, &h) != dnnl_success)
        return NULL;
    return h;
}

/* y (N,Cout,Ho,Wo) bf16, x (N,Cin,H,W) bf16, w (Cout,Cin/G,KH,KW), b (Cout) or NULL:
 * one piece, a its shape, d and p its descriptors and primitive (the weights
 * a sub-memory at oc0 of the whole call's) */
static int fwd_piece(uint16_t *y, const uint16_t *x, const float *w, const float *b,
                     const hyfi_conv2d_args *a, const bdesc *d, const hyfi_dnnl_prim *p, int oc0)
{
    const int with_bias = a->has_bias && b;
    hyfi_dnnl_arg src = {0}, wei = {0}, bia = {0}, dst = {0};
    int rc;
    CK(hyfi_dnnl_arg_in(&src, &d->src, x, qmd(p, dnnl_query_src_md, 0), 0));
    CK(hyfi_dnnl_arg_in(&wei, &d->wei, w, qmd(p, dnnl_query_weights_md, 0), 1));
    CK(hyfi_dnnl_arg_out(&dst, &d->dst, y, qmd(p, dnnl_query_dst_md, 0), 2, 0));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src.prim}, {DNNL_ARG_WEIGHTS, wei.prim},
                               {DNNL_ARG_DST, dst.prim}, {DNNL_ARG_BIAS, NULL}};
    if (with_bias) {
        CK(hyfi_dnnl_arg_in(&bia, &d->bia, b + oc0, qmd(p, dnnl_query_weights_md, 1), 3));
        args[3].memory = bia.prim;
    }
    CK(hyfi_dnnl_exec(p, with_bias ? 4 : 3, args));
    if (dst.prim != dst.user) CK(hyfi_dnnl_reorder(dst.prim, dst.user));
out:
    hyfi_dnnl_arg_free(&src), hyfi_dnnl_arg_free(&wei), hyfi_dnnl_arg_free(&bia);
    hyfi_dnnl_arg_free(&dst);
    return rc;
}

/* dx (N,Cin,H,W) bf16, dy (N,Cout,Ho,Wo) bf16, w (Cout,Cin/G,KH,KW): one
 * piece, as fwd_piece */
static int bwdd_piece(uint16_t *dx, const uint16_t *dy, const float *w,
                      const hyfi_conv2d_args *a, int acc, const bdesc *d,
                      const hyfi_dnnl_prim *p)
{
    hyfi_dnnl_arg ddst = {0}, wei = {0}, dsrc = {0};
    dnnl_memory_t flat = NULL;
    int rc;
    CK(hyfi_dnnl_arg_in(&ddst, &d->dst, dy, qmd(p, dnnl_query_diff_dst_md, 0), 0));
    CK(hyfi_dnnl_arg_in(&wei, &d->wei, w, qmd(p, dnnl_query_weights_md, 0), 1));
    /* accumulating, the result in float32 (the primitive's layout) */
    const dnnl_memory_desc_t *want = qmd(p, dnnl_query_diff_src_md, 0);
    CK(hyfi_dnnl_arg_out(&dsrc, &d->src, dx, want, 2, acc));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, ddst.prim}, {DNNL_ARG_WEIGHTS, wei.prim},
                               {DNNL_ARG_DIFF_SRC, dsrc.prim}};
    CK(hyfi_dnnl_exec(p, 3, args));
    if (!acc) {
        if (dsrc.prim != dsrc.user) CK(hyfi_dnnl_reorder(dsrc.prim, dsrc.user));
    } else {
        const float *r = f32_view(dsrc.prim, want, &d->dsrc_f32, 0, &flat); /* dy is consumed */
        if (!r) CK(-1);
        /* one rounding: the staged path's widen, add, narrow */
        CK(hyfi_accumulate_f32_bf16(dx, r, (size_t)a->n * a->c_in * a->h * a->w));
    }
out:
    if (flat) dnnl_memory_destroy(flat);
    hyfi_dnnl_arg_free(&ddst), hyfi_dnnl_arg_free(&wei), hyfi_dnnl_arg_free(&dsrc);
    return rc;
}

/* A call in its pieces (split): dir DIR_FWD writes out = y from in = x, its
 * output channels split; DIR_BWD_DATA out = dx from in = dy, its input
 * channels split. d and p: the whole call's descriptors and primitive;
 * scratch: its scratch. */
static int run_pieces(int dir, uint16_t *out, const uint16_t *in, const float *w, const float *b,
                      const hyfi_conv2d_args *a, int acc, const bdesc *d,
                      const hyfi_dnnl_prim *p, size_t scratch)
{
    const int fwd = dir == DIR_FWD, C = fwd ? a->c_out : a->c_in;
    int nn, k;
    split(a->n, C, fwd ? a->dst_blk : a->src_blk, a->wei_blk, a->groups, scratch, &nn, &k);
    if (nn == a->n && k == 1)
        return fwd ? fwd_piece(out, in, w, b, a, d, p, 0) : bwdd_piece(out, in, w, a, acc, d, p);
    const size_t xs = (size_t)a->c_in * a->h * a->w, ys = (size_t)a->c_out * a->ho * a->wo;
    const size_t outs = fwd ? ys : xs, ins = fwd ? xs : ys;
    const size_t plane = fwd ? (size_t)a->ho * a->wo : (size_t)a->h * a->w;
    for (int n0 = 0; n0 < a->n; n0 += nn) {
        hyfi_conv2d_args q = *a;
        q.n = a->n - n0 < nn ? a->n - n0 : nn;
        *(fwd ? &q.c_out : &q.c_in) = C / k;
        for (int c = 0; c < k; c++) {
            const int c0 = c * (C / k);
            bdesc qd;
            if (bdesc_init(&qd, &q)) return -1;
            if (k > 1) {
                dnnl_dims_t dims = {q.c_out, q.c_in, q.kh, q.kw};
                dnnl_dims_t offs = {fwd ? c0 : 0, fwd ? 0 : c0, 0, 0};
                if (dnnl_memory_desc_init_submemory(&qd.wei, &d->wei, dims, offs) != dnnl_success)
                    return -1;
            }
            const hyfi_dnnl_prim *qp = prim(&qd, &q, fwd && q.has_bias && b, dir, acc);
            if (!qp) return -1;
            uint16_t *o = out + n0 * outs + (size_t)c0 * plane;
            const uint16_t *i = in + n0 * ins;
            const int rc = fwd ? fwd_piece(o, i, w, b, &q, &qd, qp, c0)
                               : bwdd_piece(o, i, w, &q, acc, &qd, qp);
            if (rc) return rc;
        }
    }
    return 0;
}

/* y (N,Cout,Ho,Wo) bf16, x (N,Cin,H,W) bf16, w (Cout,Cin/G,KH,KW), b (Cout) or NULL */
int hyfi_conv2d_forward_cpu_bf16(uint16_t *y, const uint16_t *x, const float *w, const float *b,
                                 const hyfi_conv2d_args *a)
{
    bdesc d;
    if (!y || !x || !w || bdesc_init(&d, a)) return -1;
    hyfi_dnnl_cache_trim();
    const hyfi_dnnl_prim *p = prim(&d, a, a->has_bias && b, DIR_FWD, 0);
    if (!p) return -1;
    return run_pieces(DIR_FWD, y, x, w, b, a, 0, &d, p, pd_pad_bytes(p->pd));
}

/* y = conv(x, w, b) + r, all bf16: the convolution's result rounded (stored)
 * before r is added, as the two tasks apart (kernels.h) */
int hyfi_conv2d_forward_add_cpu_bf16(uint16_t *y, const uint16_t *x, const uint16_t *r,
                                     const float *w, const float *b, const hyfi_conv2d_args *a)
{
    int rc = hyfi_conv2d_forward_cpu_bf16(y, x, w, b, a);
    if (rc) return rc;
    return hyfi_add_forward_bf16(y, y, r, (size_t)a->n * a->c_out * a->ho * a->wo);
}

/* dx (N,Cin,H,W) bf16, dy (N,Cout,Ho,Wo) bf16, w (Cout,Cin/G,KH,KW);
 * acc: dx = round(dx + result), the result in float32 */
int hyfi_conv2d_backward_data_cpu_bf16(uint16_t *dx, const uint16_t *dy, const float *w,
                                       const hyfi_conv2d_args *a, int acc)
{
    bdesc d;
    if (!dx || !dy || !w || bdesc_init(&d, a)) return -1;
    hyfi_dnnl_cache_trim();
    const hyfi_dnnl_prim *p = prim(&d, a, 0, DIR_BWD_DATA, acc);
    if (!p) return -1;
    /* accumulating, the float32 result is scratch too */
    const size_t wide = acc ? (size_t)a->n * a->c_in * a->h * a->w * sizeof(float) : 0;
    return run_pieces(DIR_BWD_DATA, dx, dy, w, NULL, a, acc, &d, p, pd_pad_bytes(p->pd) + wide);
}

/* dw (Cout,Cin/G,KH,KW), db (Cout) or NULL, float32; dy (N,Cout,Ho,Wo), x (N,Cin,H,W) bf16;
 * acc: the results go to scratch and are added (float32) */
int hyfi_conv2d_backward_weight_cpu_bf16(float *dw, float *db, const uint16_t *dy,
                                         const uint16_t *x, const hyfi_conv2d_args *a, int acc)
{
    const int with_bias = a->has_bias && db;
    bdesc d;
    hyfi_dnnl_arg src = {0}, ddst = {0}, dwei = {0}, dbia = {0};
    dnnl_memory_t flat = NULL, flatb = NULL;
    if (!dw || !dy || !x || bdesc_init(&d, a)) return -1;
    hyfi_dnnl_cache_trim();
    const hyfi_dnnl_prim *p = prim(&d, a, with_bias, DIR_BWD_WEIGHTS, 0);
    if (!p) return -1;
    int rc;
    CK(hyfi_dnnl_arg_in(&src, &d.src, x, qmd(p, dnnl_query_src_md, 0), 0));
    CK(hyfi_dnnl_arg_in(&ddst, &d.dst, dy, qmd(p, dnnl_query_diff_dst_md, 0), 1));
    const dnnl_memory_desc_t *wwant = qmd(p, dnnl_query_diff_weights_md, 0);
    const dnnl_memory_desc_t *bwant = qmd(p, dnnl_query_diff_weights_md, 1);
    CK(hyfi_dnnl_arg_out(&dwei, &d.wei, dw, wwant, 2, acc));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src.prim}, {DNNL_ARG_DIFF_DST, ddst.prim},
                               {DNNL_ARG_DIFF_WEIGHTS, dwei.prim}, {DNNL_ARG_DIFF_BIAS, NULL}};
    if (with_bias) {
        CK(hyfi_dnnl_arg_out(&dbia, &d.bia, db, bwant, 3, acc));
        args[3].memory = dbia.prim;
    }
    CK(hyfi_dnnl_exec(p, with_bias ? 4 : 3, args));
    if (acc) {
        /* dw += the result, in dw's layout (slot 0: x is consumed) */
        const float *r = f32_view(dwei.prim, wwant, &d.wei, 0, &flat);
        if (!r) CK(-1);
        const size_t n = dnnl_memory_desc_get_size(&d.wei) / sizeof(float);
        for (size_t i = 0; i < n; i++) dw[i] += r[i];
        if (with_bias) {
            const float *rb = f32_view(dbia.prim, bwant, &d.bia, 1, &flatb);
            if (!rb) CK(-1);
            for (int i = 0; i < a->c_out; i++) db[i] += rb[i];
        }
    } else {
        if (dwei.prim != dwei.user) CK(hyfi_dnnl_reorder(dwei.prim, dwei.user));
        if (with_bias && dbia.prim != dbia.user) CK(hyfi_dnnl_reorder(dbia.prim, dbia.user));
    }
out:
    if (flat) dnnl_memory_destroy(flat);
    if (flatb) dnnl_memory_destroy(flatb);
    hyfi_dnnl_arg_free(&src), hyfi_dnnl_arg_free(&ddst), hyfi_dnnl_arg_free(&dwei);
    hyfi_dnnl_arg_free(&dbia);
    return rc;
}
