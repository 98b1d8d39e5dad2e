/* test_op_conv2d_bf16.c: the CPU convolution on bf16 storage with oneDNN's
 * bf16 primitives (ops/conv2d_cpu_bf16.c) against the reference fed the same
 * bf16-rounded operands, for plain and blocked activations, 3x3 / 1x1 /
 * strided / grouped / depthwise / 7x7 shapes, every direction, with and
 * without accumulation.
 *
 * Tolerances, derived: a bf16 x bf16 product is exact in float32, so the
 * primitive and the reference compute the same sums up to their order (float32
 * round-off, TU_TOL_CPU_VS_REF's 1e-4 relative on sums of a few hundred
 * terms). The forward and the backward data then round their result to bf16:
 * two results a round-off apart can land on neighbouring bf16 values, one unit
 * apart; a unit is 2^-8 to 2^-7 of the value (8 significant bits: just above
 * a power of two, 2^-7; measured up to 0.0075). So y and dx within one
 * bf16 unit plus the sums' round-off: |got - want| <= 2^-7 |want| + 1e-4
 * |want| + 1e-5, with want the reference rounded to bf16 (with accumulation:
 * round(dx + result), the same rule). The weight gradients stay
 * float32: TU_TOL_CPU_VS_REF, as the float32 path. */
#include "kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tu_tol TOL_BF16 = {"bf16-vs-ref", 1.0 / 128 + 1e-4, 1e-5};

static size_t x_count(const hyfi_conv2d_args *a) { return (size_t)a->n * a->c_in * a->h * a->w; }
static size_t y_count(const hyfi_conv2d_args *a) { return (size_t)a->n * a->c_out * a->ho * a->wo; }
static size_t w_count(const hyfi_conv2d_args *a)
{
    return (size_t)a->c_out * (a->c_in / a->groups) * a->kh * a->kw;
}

static float *al(size_t count) { return aligned_alloc(64, (count * 4 + 63) / 64 * 64); }
static uint16_t *al16(size_t count) { return aligned_alloc(64, (count * 2 + 63) / 64 * 64); }

/* v (count): random in [lo, hi], rounded to bf16 */
static void fill_bf16(float *v, size_t n, uint64_t *seed, float lo, float hi)
{
    tu_fill(v, n, seed, lo, hi);
    hyfi_bf16_round_ref(v, n);
}

static void widen(float *out, const uint16_t *in, size_t n) { hyfi_bf16_to_f32_ref(out, in, n); }

/* Shape a in layout blk (weights blocked alike where ungrouped), and r the
 * same in plain layouts (the reference's); 0 where blk does not divide the
 * channels. */
static int in_layout(hyfi_conv2d_args *a, hyfi_conv2d_args *r, int blk)
{
    a->src_blk = a->dst_blk = blk;
    a->wei_blk = blk && a->groups == 1 ? blk : 0;
    if (blk && (a->c_in % blk || a->c_out % blk)) return 0;
    *r = *a;
    r->src_blk = r->dst_blk = r->wei_blk = 0;
    return 1;
}

static void run(hyfi_conv2d_args a, int blk, uint64_t *seed)
{
    hyfi_conv2d_args r;
    if (!in_layout(&a, &r, blk)) return;
    const size_t nx = x_count(&a), ny = y_count(&a), nw = w_count(&a);
    const int hwi = a.h * a.w, hwo = a.ho * a.wo, kk = a.kh * a.kw;
    float *x = al(nx), *w = al(nw), *wk = al(nw), *b = al((size_t)a.c_out), *dy = al(ny);
    float *yr = al(ny), *tmp = al(nx > ny ? nx : ny), *plain = al(nx > ny ? nx : ny);
    float *dxr = al(nx), *dwr = al(nw), *dwk = al(nw), *dwp = al(nw), *dbr = al((size_t)a.c_out);
    float *dbk = al((size_t)a.c_out);
    uint16_t *xb = al16(nx), *dyb = al16(ny), *yb = al16(ny), *dxb = al16(nx);
    fill_bf16(x, nx, seed, -1.f, 1.f);
    fill_bf16(w, nw, seed, -0.5f, 0.5f); /* the weights as the kernel rounds them */
    fill_bf16(b, (size_t)a.c_out, seed, -0.5f, 0.5f);
    fill_bf16(dy, ny, seed, -1.f, 1.f);
    hyfi_layout_wei_to_blocked(wk, w, a.c_out, a.c_in / a.groups, kk, a.wei_blk);
    hyfi_layout_to_blocked(tmp, x, a.n, a.c_in, hwi, blk);
    hyfi_f32_to_bf16_ref(xb, tmp, nx);
    hyfi_layout_to_blocked(tmp, dy, a.n, a.c_out, hwo, blk);
    hyfi_f32_to_bf16_ref(dyb, tmp, ny);
    char nm[200];
    snprintf(nm, sizeof nm, "%dx%dx%dx%d -> %d k%dx%d s%d g%d%s blk %d", a.n, a.c_in, a.h, a.w,
             a.c_out, a.kh, a.kw, a.sh, a.groups, a.has_bias ? " bias" : "", blk);
    char what[260];
    /* forward */
    int rc = hyfi_conv2d_forward_ref(yr, x, w, a.has_bias ? b : NULL, &r);
    hyfi_bf16_round_ref(yr, ny);
    rc |= hyfi_conv2d_forward_cpu_bf16(yb, xb, wk, a.has_bias ? b : NULL, &a);
    widen(tmp, yb, ny);
    hyfi_layout_to_plain(plain, tmp, a.n, a.c_out, hwo, blk);
    snprintf(what, sizeof what, "bf16 conv fwd %s", nm);
    tu_check(rc != 0 || tu_compare(what, plain, yr, ny, TOL_BF16), what);
    /* backward data, overwriting and accumulating */
    for (int acc = 0; acc < 2; acc++) {
        fill_bf16(dxr, nx, seed, -1.f, 1.f);
        hyfi_layout_to_blocked(tmp, dxr, a.n, a.c_in, hwi, blk);
        hyfi_f32_to_bf16_ref(dxb, tmp, nx);
        rc = hyfi_conv2d_backward_data_ref(dxr, dy, w, &r, acc);
        hyfi_bf16_round_ref(dxr, nx);
        rc |= hyfi_conv2d_backward_data_cpu_bf16(dxb, dyb, wk, &a, acc);
        widen(tmp, dxb, nx);
        hyfi_layout_to_plain(plain, tmp, a.n, a.c_in, hwi, blk);
        snprintf(what, sizeof what, "bf16 conv bwd data (acc %d) %s", acc, nm);
        tu_check(rc != 0 || tu_compare(what, plain, dxr, nx, TOL_BF16), what);
    }
    /* backward weights (float32 gradients) */
    for (int acc = 0; acc < 2; acc++) {
        tu_fill(dwr, nw, seed, -1.f, 1.f);
        tu_fill(dbr, (size_t)a.c_out, seed, -1.f, 1.f);
        memcpy(dbk, dbr, (size_t)a.c_out * sizeof *dbr);
        hyfi_layout_wei_to_blocked(dwk, dwr, a.c_out, a.c_in / a.groups, kk, a.wei_blk);
        rc = hyfi_conv2d_backward_weight_ref(dwr, a.has_bias ? dbr : NULL, dy, x, &r, acc) |
             hyfi_conv2d_backward_weight_cpu_bf16(dwk, a.has_bias ? dbk : NULL, dyb, xb, &a, acc);
        hyfi_layout_wei_to_plain(dwp, dwk, a.c_out, a.c_in / a.groups, kk, a.wei_blk);
        snprintf(what, sizeof what, "bf16 conv bwd weight (acc %d) %s", acc, nm);
        tu_check(rc != 0 || tu_compare(what, dwp, dwr, nw, TU_TOL_CPU_VS_REF), what);
        if (a.has_bias) {
            snprintf(what, sizeof what, "bf16 conv bwd bias (acc %d) %s", acc, nm);
            tu_check(tu_compare(what, dbk, dbr, (size_t)a.c_out, TU_TOL_CPU_VS_REF), what);
        }
    }
    free(x), free(w), free(wk), free(b), free(dy), free(yr), free(tmp), free(plain);
    free(dxr), free(dwr), free(dwk), free(dwp), free(dbr), free(dbk);
    free(xb), free(dyb), free(yb), free(dxb);
}

/* A call in pieces (hyfi_conv2d_cpu_bf16_set_scratch_cap: 1 byte, every
 * piece one image and the smallest channel blocks) gives the whole call's
 * bits, forward and backward data, overwriting and accumulating; strided
 * forwards within one bf16 unit. */
static void pieces(hyfi_conv2d_args a, int blk, uint64_t *seed)
{
    a.src_blk = a.dst_blk = blk;
    a.wei_blk = blk && a.groups == 1 ? blk : 0;
    if (blk && (a.c_in % blk || a.c_out % blk)) return;
    const size_t nx = x_count(&a), ny = y_count(&a), nw = w_count(&a);
    float *t = al(nx > ny ? nx : ny), *w = al(nw), *b = al((size_t)a.c_out);
    uint16_t *xb = al16(nx), *dyb = al16(ny), *y1 = al16(ny), *y2 = al16(ny);
    uint16_t *d1 = al16(nx), *d2 = al16(nx);
    tu_fill(t, nx, seed, -1.f, 1.f);
    hyfi_f32_to_bf16_ref(xb, t, nx);
    tu_fill(t, ny, seed, -1.f, 1.f);
    hyfi_f32_to_bf16_ref(dyb, t, ny);
    tu_fill(w, nw, seed, -0.5f, 0.5f);
    tu_fill(b, (size_t)a.c_out, seed, -0.5f, 0.5f);
    char nm[200];
    snprintf(nm, sizeof nm, "%dx%dx%dx%d -> %d k%d s%d g%d%s blk %d", a.n, a.c_in, a.h, a.w,
             a.c_out, a.kh, a.sh, a.groups, a.has_bias ? " bias" : "", blk);
    char what[260];
    int rc = hyfi_conv2d_forward_cpu_bf16(y1, xb, w, a.has_bias ? b : NULL, &a);
    hyfi_conv2d_cpu_bf16_set_scratch_cap(1, 0);
    rc |= hyfi_conv2d_forward_cpu_bf16(y2, xb, w, a.has_bias ? b : NULL, &a);
    hyfi_conv2d_cpu_bf16_set_scratch_cap(0, 0);
    if (a.sh == 1) {
        snprintf(what, sizeof what, "bf16 conv fwd in pieces, bitwise, %s", nm);
        tu_check(rc != 0 || memcmp(y1, y2, ny * 2) != 0, what);
    } else {
        /* oneDNN's strided 1x1 kernel blocks its sums by the output channels:
         * here the pieces may round one unit apart (bf16-vs-ref's bound) */
        float *f1 = al(ny), *f2 = al(ny);
        widen(f1, y1, ny), widen(f2, y2, ny);
        snprintf(what, sizeof what, "bf16 conv fwd in pieces, within a unit, %s", nm);
        tu_check(rc != 0 || tu_compare(what, f2, f1, ny, TOL_BF16), what);
        free(f1), free(f2);
    }
    for (int acc = 0; acc < 2; acc++) {
        tu_fill(t, nx, seed, -1.f, 1.f);
        hyfi_f32_to_bf16_ref(d1, t, nx);
        memcpy(d2, d1, nx * 2);
        rc = hyfi_conv2d_backward_data_cpu_bf16(d1, dyb, w, &a, acc);
        hyfi_conv2d_cpu_bf16_set_scratch_cap(1, 0);
        rc |= hyfi_conv2d_backward_data_cpu_bf16(d2, dyb, w, &a, acc);
        hyfi_conv2d_cpu_bf16_set_scratch_cap(0, 0);
        snprintf(what, sizeof what, "bf16 conv bwd data (acc %d) in pieces, bitwise, %s", acc, nm);
        tu_check(rc != 0 || memcmp(d1, d2, nx * 2) != 0, what);
    }
    free(t), free(w), free(b), free(xb), free(dyb), free(y1), free(y2), free(d1), free(d2);
}

/* A kernel cap below oneDNN's bf16 1x1 kernels' scratchpad (a float32
 * buffer of the whole result) picks its direct kernel, which takes none, and
 * the results still match the reference. */
static void kernel_choice(hyfi_conv2d_args a, uint64_t *seed)
{
    a.src_blk = a.dst_blk = a.wei_blk = 16;
    size_t before[2], after[2];
    for (int d = 0; d < 2; d++) before[d] = hyfi_conv2d_cpu_bf16_scratch(&a, d);
    hyfi_conv2d_cpu_bf16_set_scratch_cap(0, 1);
    for (int d = 0; d < 2; d++) after[d] = hyfi_conv2d_cpu_bf16_scratch(&a, d);
    char what[200];
    snprintf(what, sizeof what,
             "bf16 1x1 %d -> %d at %d²: scratchpad fwd %zu -> %zu, bwd data %zu -> %zu bytes",
             a.c_in, a.c_out, a.h, before[0], after[0], before[1], after[1]);
    printf("%s\n", what);
    tu_check(before[0] == 0 || before[1] == 0 || after[0] != 0 || after[1] != 0, what);
    run(a, 16, seed);
    hyfi_conv2d_cpu_bf16_set_scratch_cap(0, 0);
}

/* The residual add fused into the convolution (y = conv(x) + r; engine
 * layout.c): bitwise the convolution stored as bf16 and then the bf16 add,
 * on the native path and on the float32 one a bf16 task stages (round_mid,
 * then the output rounded as hyfi_ops_stage_out does); and within TOL_BF16
 * of the reference plus r. */
static void fused_add(hyfi_conv2d_args a, int blk, uint64_t *seed)
{
    hyfi_conv2d_args r;
    if (!in_layout(&a, &r, blk)) return;
    const size_t nx = x_count(&a), ny = y_count(&a), nw = w_count(&a);
    const int hwi = a.h * a.w, hwo = a.ho * a.wo, kk = a.kh * a.kw;
    float *x = al(nx), *w = al(nw), *wk = al(nw), *b = al((size_t)a.c_out), *res = al(ny);
    float *xk = al(nx), *rk = al(ny), *yf = al(ny), *ys = al(ny), *yr = al(ny), *tmp = al(ny);
    uint16_t *xb = al16(nx), *rb = al16(ny), *yb = al16(ny), *yab = al16(ny);
    fill_bf16(x, nx, seed, -1.f, 1.f);
    fill_bf16(w, nw, seed, -0.5f, 0.5f);
    fill_bf16(b, (size_t)a.c_out, seed, -0.5f, 0.5f);
    fill_bf16(res, ny, seed, -2.f, 2.f);
    hyfi_layout_wei_to_blocked(wk, w, a.c_out, a.c_in / a.groups, kk, a.wei_blk);
    hyfi_layout_to_blocked(xk, x, a.n, a.c_in, hwi, blk);
    hyfi_f32_to_bf16_ref(xb, xk, nx);
    hyfi_layout_to_blocked(rk, res, a.n, a.c_out, hwo, blk);
    hyfi_f32_to_bf16_ref(rb, rk, ny);
    const float *bias = a.has_bias ? b : NULL;
    char nm[200], what[260];
    snprintf(nm, sizeof nm, "%dx%dx%dx%d -> %d k%d s%d%s blk %d", a.n, a.c_in, a.h, a.w, a.c_out,
             a.kh, a.sh, a.has_bias ? " bias" : "", blk);
    /* apart: the convolution stored, then the add */
    int rc = hyfi_conv2d_forward_cpu_bf16(yb, xb, wk, bias, &a) |
             hyfi_add_forward_bf16(yb, yb, rb, ny);
    rc |= hyfi_conv2d_forward_add_cpu_bf16(yab, xb, rb, wk, bias, &a);
    snprintf(what, sizeof what, "bf16 conv + add fused = apart (native) %s", nm);
    tu_check(rc != 0 || memcmp(yb, yab, ny * sizeof *yb) != 0, what);
    /* staged: float32 kernels on the widened buffers */
    rc = hyfi_conv2d_forward_cpu(ys, xk, wk, bias, &a);
    hyfi_bf16_round_ref(ys, ny);
    rc |= hyfi_add_forward_ref(ys, ys, rk, ny);
    hyfi_bf16_round_ref(ys, ny);
    rc |= hyfi_conv2d_forward_add_cpu(yf, xk, rk, wk, bias, &a, 1);
    hyfi_bf16_round_ref(yf, ny);
    snprintf(what, sizeof what, "bf16 conv + add fused = apart (staged) %s", nm);
    tu_check(rc != 0 || memcmp(ys, yf, ny * sizeof *ys) != 0, what);
    /* against the reference: each of the two roundings (the convolution's,
     * the sum's) within a bf16 unit of its value, the convolution's sums
     * within their round-off: |got - want| <= 2^-7 (|c| + |want|) + 1e-4 |c| +
     * 1e-5 with c the reference convolution and want = round(c + r). A
     * relative bound on want alone fails where c and r cancel. */
    float *cr = al(ny);
    rc = hyfi_conv2d_forward_ref(cr, x, w, bias, &r);
    rc |= hyfi_conv2d_forward_add_ref(yr, x, res, w, bias, &r);
    hyfi_bf16_round_ref(yr, ny);
    widen(tmp, yab, ny);
    hyfi_layout_to_plain(yf, tmp, a.n, a.c_out, hwo, blk);
    double worst = 0;
    for (size_t i = 0; i < ny; i++) {
        const double c = fabs(cr[i]), want = yr[i];
        const double bound = (c + fabs(want)) / 128 + 1e-4 * c + 1e-5;
        const double e = fabs(yf[i] - want) / bound;
        if (!(e <= worst)) worst = e; /* NaN counts */
    }
    snprintf(what, sizeof what, "bf16 conv + add fused vs ref %s (worst %.2f of the bound)", nm,
             worst);
    tu_check(rc != 0 || !(worst <= 1.0), what);
    free(cr);
    free(x), free(w), free(wk), free(b), free(res), free(xk), free(rk), free(yf), free(ys);
    free(yr), free(tmp), free(xb), free(rb), free(yb), free(yab);
}

static hyfi_conv2d_args shape(int n, int ci, int h, int co, int k, int s, int p, int g, int bias)
{
    hyfi_conv2d_args a = {.n = n, .c_in = ci, .h = h, .w = h, .c_out = co, .kh = k, .kw = k,
                          .sh = s, .sw = s, .ph = p, .pw = p, .groups = g, .has_bias = bias};
    a.ho = hyfi_conv_out_size(h, k, s, p);
    a.wo = hyfi_conv_out_size(h, k, s, p);
    return a;
}

int main(void)
{
    uint64_t seed = 0xbf16c0;
    /* oneDNN has bf16 convolutions from AVX-512 on (avx512_core; avx2_vnni_2 on
     * newer CPUs); without them hyfi's bf16 convolutions run on staged float32
     * copies (ops/conv2d_cpu_bf16.c: choose), which the precision suite covers,
     * and there is nothing here to test */
    {
        hyfi_conv2d_args p = shape(1, 16, 5, 16, 3, 1, 1, 1, 0);
        float *xf = al(x_count(&p)), *w = al(w_count(&p));
        uint16_t *x = al16(x_count(&p)), *y = al16(y_count(&p));
        int rc = !xf || !w || !x || !y;
        if (!rc) {
            fill_bf16(xf, x_count(&p), &seed, -1, 1);
            fill_bf16(w, w_count(&p), &seed, -1, 1);
            hyfi_f32_to_bf16_ref(x, xf, x_count(&p));
            rc = hyfi_conv2d_forward_cpu_bf16(y, x, w, NULL, &p);
        }
        free(xf), free(w), free(x), free(y);
        if (rc) {
            printf("this CPU: oneDNN makes no bf16 convolution (it needs AVX-512 or "
                   "AVX2-VNNI-2); hyfi's bf16 convolutions run on staged float32 copies "
                   "here: skipped\n");
            return 77;
        }
    }
    double tb = 0, tf = 0;
    const int native = hyfi_conv2d_cpu_bf16_faster(&tb, &tf);
    printf("this CPU: oneDNN's bf16 convolution %s (now: %.3f ms bf16, %.3f ms float32)\n",
           native ? "is used" : "is not used", 1e3 * tb, 1e3 * tf);
    const hyfi_conv2d_args cases[] = {
        shape(2, 32, 12, 32, 3, 1, 1, 1, 0),  shape(2, 32, 12, 64, 3, 2, 1, 1, 1),
        shape(2, 64, 8, 32, 1, 1, 0, 1, 0),   shape(2, 32, 9, 64, 1, 2, 0, 1, 0),
        shape(2, 3, 16, 16, 7, 2, 3, 1, 0),   shape(2, 32, 8, 32, 3, 1, 1, 32, 0),
        shape(2, 32, 8, 64, 3, 1, 1, 4, 1),   shape(1, 16, 5, 16, 3, 1, 1, 1, 1),
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run(cases[i], 0, &seed);
        run(cases[i], 16, &seed);
        run(cases[i], 8, &seed);
    }
    /* the fused residual add: a 3x3 and ResNet's 1x1 expansion, with bias */
    const hyfi_conv2d_args fa[] = {shape(2, 32, 12, 32, 3, 1, 1, 1, 0),
                                   shape(2, 16, 10, 64, 1, 1, 0, 1, 1)};
    for (size_t i = 0; i < sizeof fa / sizeof *fa; i++) {
        fused_add(fa[i], 16, &seed);
        fused_add(fa[i], 0, &seed);
    }
    /* pieces: ResNet's 1x1 expansions and reductions (stride 1 and 2), a 3x3
     * and a grouped one */
    const hyfi_conv2d_args big[] = {
        shape(3, 64, 24, 256, 1, 1, 0, 1, 0), shape(1, 256, 24, 64, 1, 1, 0, 1, 0),
        shape(2, 256, 24, 512, 1, 2, 0, 1, 0), shape(1, 256, 24, 512, 1, 2, 0, 1, 1), shape(1, 64, 20, 64, 3, 1, 1, 1, 0),
        shape(2, 32, 12, 64, 3, 1, 1, 4, 0),
    };
    if (native) kernel_choice(shape(1, 16, 64, 32, 1, 1, 0, 1, 0), &seed);
    if (native)
        for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
            pieces(big[i], 16, &seed);
            pieces(big[i], 8, &seed);
            pieces(big[i], 0, &seed);
        }
    return tu_finish();
}
