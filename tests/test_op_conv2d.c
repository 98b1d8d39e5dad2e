/* test_op_conv2d.c: the conv2d kernels (forward, backward data, backward
 * weights with bias) of the CPU path against the naive reference on a set of
 * shapes (odd sizes, 1x7 / 7x1, strides, padding, groups, depthwise, with and
 * without bias), the reference backwards against finite differences of the
 * reference forward, and acc = 1 accumulation on both paths. */
#include "dnnl_common.h"
#include "kernels.h"
#include "../apps/env_config.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hyfi_conv2d_args mk(int n, int cin, int h, int w, int cout, int kh, int kw, int sh,
                           int sw, int ph, int pw, int groups, int has_bias)
{
    hyfi_conv2d_args a = {.n = n, .c_in = cin, .h = h, .w = w, .c_out = cout,
                          .kh = kh, .kw = kw, .sh = sh, .sw = sw, .ph = ph, .pw = pw,
                          .groups = groups, .has_bias = has_bias};
    a.ho = hyfi_conv_out_size(h, kh, sh, ph);
    a.wo = hyfi_conv_out_size(w, kw, sw, pw);
    return a;
}

static size_t x_count(const hyfi_conv2d_args *a) { return (size_t)a->n * a->c_in * a->h * a->w; }
static size_t y_count(const hyfi_conv2d_args *a)
{
    return (size_t)a->n * a->c_out * a->ho * a->wo;
}
static size_t w_count(const hyfi_conv2d_args *a)
{
    return (size_t)a->c_out * (a->c_in / a->groups) * a->kh * a->kw;
}

static void describe(char *buf, size_t len, const hyfi_conv2d_args *a)
{
    snprintf(buf, len, "N%d C%d %dx%d -> C%d k%dx%d s%d,%d p%d,%d g%d%s", a->n, a->c_in, a->h,
             a->w, a->c_out, a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->groups,
             a->has_bias ? " bias" : "");
}

/* Finite differences: loss = dot(forward_ref(x, w, b), r). */
typedef struct {
    const hyfi_conv2d_args *a;
    float *x, *w, *b, *y;
    const float *r;
} fd_ctx;

static double fd_loss(void *p)
{
    fd_ctx *c = p;
    hyfi_conv2d_forward_ref(c->y, c->x, c->w, c->b, c->a);
    return tu_dot(c->y, c->r, y_count(c->a));
}

static void name(char *buf, size_t len, const char *what, const char *shape)
{
    snprintf(buf, len, "%s [%s]", what, shape);
}

/* amp: data range [-amp, amp]; the larger cases use 0.5 so that the float
 * rounding of their long sums stays well inside the absolute tolerance. */
static void test_shape(const hyfi_conv2d_args *a, int do_fd, float amp, uint64_t *seed)
{
    char shp[128], nm[256];
    describe(shp, sizeof shp, a);
    const size_t nx = x_count(a), ny = y_count(a), nw = w_count(a), nb = (size_t)a->c_out;
    float *x = tu_alloc(nx), *w = tu_alloc(nw), *b = tu_alloc(nb), *dy = tu_alloc(ny);
    float *y_ref = tu_alloc(ny), *y_cpu = tu_alloc(ny);
    float *dx_ref = tu_alloc(nx), *dx_cpu = tu_alloc(nx), *dx_base = tu_alloc(nx);
    float *dw_ref = tu_alloc(nw), *dw_cpu = tu_alloc(nw), *dw_base = tu_alloc(nw);
    float *db_ref = tu_alloc(nb), *db_cpu = tu_alloc(nb), *db_base = tu_alloc(nb);
    float *want = tu_alloc(nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny));
    tu_fill(x, nx, seed, -amp, amp);
    tu_fill(w, nw, seed, -amp, amp);
    tu_fill(b, nb, seed, -amp, amp);
    tu_fill(dy, ny, seed, -amp, amp);
    tu_fill(dx_base, nx, seed, -1.f, 1.f);
    tu_fill(dw_base, nw, seed, -1.f, 1.f);
    tu_fill(db_base, nb, seed, -1.f, 1.f);
    float *bp = a->has_bias ? b : NULL, *dbr = a->has_bias ? db_ref : NULL;
    float *dbc = a->has_bias ? db_cpu : NULL;
    int rc;

    /* forward */
    hyfi_conv2d_forward_ref(y_ref, x, w, bp, a);
    rc = hyfi_conv2d_forward_cpu(y_cpu, x, w, bp, a);
    name(nm, sizeof nm, "forward cpu", shp);
    tu_check(rc != 0 || tu_compare(nm, y_cpu, y_ref, ny, TU_TOL_CPU_VS_REF), nm);

    /* backward data, acc = 0 then acc = 1 */
    hyfi_conv2d_backward_data_ref(dx_ref, dy, w, a, 0);
    for (size_t i = 0; i < nx; i++) dx_cpu[i] = 1e30f; /* must be overwritten */
    rc = hyfi_conv2d_backward_data_cpu(dx_cpu, dy, w, a, 0);
    name(nm, sizeof nm, "backward_data cpu", shp);
    tu_check(rc != 0 || tu_compare(nm, dx_cpu, dx_ref, nx, TU_TOL_CPU_VS_REF), nm);
    for (size_t i = 0; i < nx; i++) want[i] = dx_base[i] + dx_ref[i];
    memcpy(dx_ref, dx_base, nx * sizeof(float));
    memcpy(dx_cpu, dx_base, nx * sizeof(float));
    hyfi_conv2d_backward_data_ref(dx_ref, dy, w, a, 1);
    rc = hyfi_conv2d_backward_data_cpu(dx_cpu, dy, w, a, 1);
    name(nm, sizeof nm, "backward_data ref acc=1", shp);
    tu_check(tu_compare(nm, dx_ref, want, nx, TU_TOL_CPU_VS_REF), nm);
    name(nm, sizeof nm, "backward_data cpu acc=1", shp);
    tu_check(rc != 0 || tu_compare(nm, dx_cpu, dx_ref, nx, TU_TOL_CPU_VS_REF), nm);

    /* backward weights (+ bias), acc = 0 then acc = 1 */
    hyfi_conv2d_backward_weight_ref(dw_ref, dbr, dy, x, a, 0);
    for (size_t i = 0; i < nw; i++) dw_cpu[i] = 1e30f;
    for (size_t i = 0; i < nb; i++) db_cpu[i] = 1e30f;
    rc = hyfi_conv2d_backward_weight_cpu(dw_cpu, dbc, dy, x, a, 0);
    name(nm, sizeof nm, "backward_weight dw cpu", shp);
    tu_check(rc != 0 || tu_compare(nm, dw_cpu, dw_ref, nw, TU_TOL_CPU_VS_REF), nm);
    if (a->has_bias) {
        name(nm, sizeof nm, "backward_weight db cpu", shp);
        tu_check(rc != 0 || tu_compare(nm, db_cpu, db_ref, nb, TU_TOL_CPU_VS_REF), nm);
    }
    for (size_t i = 0; i < nw; i++) want[i] = dw_base[i] + dw_ref[i];
    memcpy(dw_ref, dw_base, nw * sizeof(float));
    memcpy(dw_cpu, dw_base, nw * sizeof(float));
    float *db_want = tu_alloc(nb);
    for (size_t i = 0; i < nb; i++) db_want[i] = db_base[i] + db_ref[i];
    memcpy(db_ref, db_base, nb * sizeof(float));
    memcpy(db_cpu, db_base, nb * sizeof(float));
    hyfi_conv2d_backward_weight_ref(dw_ref, dbr, dy, x, a, 1);
    rc = hyfi_conv2d_backward_weight_cpu(dw_cpu, dbc, dy, x, a, 1);
    name(nm, sizeof nm, "backward_weight dw ref acc=1", shp);
    tu_check(tu_compare(nm, dw_ref, want, nw, TU_TOL_CPU_VS_REF), nm);
    name(nm, sizeof nm, "backward_weight dw cpu acc=1", shp);
    tu_check(rc != 0 || tu_compare(nm, dw_cpu, dw_ref, nw, TU_TOL_CPU_VS_REF), nm);
    if (a->has_bias) {
        name(nm, sizeof nm, "backward_weight db ref acc=1", shp);
        tu_check(tu_compare(nm, db_ref, db_want, nb, TU_TOL_CPU_VS_REF), nm);
        name(nm, sizeof nm, "backward_weight db cpu acc=1", shp);
        tu_check(rc != 0 || tu_compare(nm, db_cpu, db_ref, nb, TU_TOL_CPU_VS_REF), nm);
    }
    free(db_want);

    /* finite differences of the reference: loss = dot(y, r), so dL/dy = r */
    if (do_fd) {
        float *r = dy, *ytmp = tu_alloc(ny);
        fd_ctx c = {a, x, w, bp, ytmp, r};
        const float eps = 1e-2f;
        hyfi_conv2d_backward_data_ref(dx_ref, r, w, a, 0);
        hyfi_conv2d_backward_weight_ref(dw_ref, dbr, r, x, a, 0);
        name(nm, sizeof nm, "fd dx", shp);
        tu_check(tu_grad_check(nm, x, nx, dx_ref, fd_loss, &c, 64, eps, TU_TOL_FD, seed), nm);
        name(nm, sizeof nm, "fd dw", shp);
        tu_check(tu_grad_check(nm, w, nw, dw_ref, fd_loss, &c, 64, eps, TU_TOL_FD, seed), nm);
        if (a->has_bias) {
            name(nm, sizeof nm, "fd db", shp);
            tu_check(tu_grad_check(nm, b, nb, db_ref, fd_loss, &c, -1, eps, TU_TOL_FD, seed),
                     nm);
        }
        free(ytmp);
    }

    free(x); free(w); free(b); free(dy);
    free(y_ref); free(y_cpu);
    free(dx_ref); free(dx_cpu); free(dx_base);
    free(dw_ref); free(dw_cpu); free(dw_base);
    free(db_ref); free(db_cpu); free(db_base);
    free(want);
}

/* Blocked activations (src_blk / dst_blk, ops/layout_ref.c): the CPU path on
 * x, dy in the given layouts against the reference on NCHW, outputs brought
 * back to NCHW; backward data also accumulated. Both sides blocked, and each
 * alone (a plain edge: the stem's input, a pool's output). wb: the weights
 * and their gradient in OIhw{wb}i{wb}o (wei_blk), the gradient also
 * accumulated. */
extern int omp_get_max_threads(void);

/* count floats on 64 bytes, as the engine's buffers (Winograd needs them) */
static float *al(size_t count) { return aligned_alloc(64, (count * 4 + 63) / 64 * 64); }

static void test_blocked(hyfi_conv2d_args a, int sb, int db, int wb, uint64_t *seed)
{
    a.src_blk = sb, a.dst_blk = db, a.wei_blk = wb;
    hyfi_conv2d_args r = a;
    r.src_blk = r.dst_blk = r.wei_blk = 0;
    const size_t nx = x_count(&a), ny = y_count(&a), nw = w_count(&a);
    const int hwi = a.h * a.w, hwo = a.ho * a.wo;
    float *x = al(nx), *xb = al(nx), *w = al(nw), *b = al((size_t)a.c_out);
    float *dy = al(ny), *dyb = al(ny), *yr = al(ny), *yb = al(ny);
    float *yp = al(nx > ny ? nx : ny), *dxr = al(nx), *dxb = al(nx);
    float *dwr = al(nw), *dwb = al(nw), *dbr = al((size_t)a.c_out);
    float *dbb = al((size_t)a.c_out), *wk = al(nw), *dwk = al(nw);
    const int kk = a.kh * a.kw;
    tu_fill(x, nx, seed, -1.f, 1.f);
    tu_fill(w, nw, seed, -0.5f, 0.5f);
    hyfi_layout_wei_to_blocked(wk, w, a.c_out, a.c_in, kk, wb);
    tu_fill(b, (size_t)a.c_out, seed, -0.5f, 0.5f);
    tu_fill(dy, ny, seed, -1.f, 1.f);
    hyfi_layout_to_blocked(xb, x, a.n, a.c_in, hwi, sb);
    hyfi_layout_to_blocked(dyb, dy, a.n, a.c_out, hwo, db);
    char shp[160], nm[224];
    describe(shp, sizeof shp, &a);
    if (wb) snprintf(shp + strlen(shp), sizeof shp - strlen(shp), " w%d", wb);
    tu_tol tol[3]; /* per direction: Winograd's round-off where it runs */
    for (int dir = 0; dir < 3; dir++) {
        const int wg = hyfi_conv2d_cpu_winograd(&a, dir);
        tol[dir] = wg ? TU_TOL_WINOGRAD : TU_TOL_CPU_VS_REF;
        if (wg)
            snprintf(shp + strlen(shp), sizeof shp - strlen(shp), " %s", dir == 0 ? "Wf"
                                                                   : dir == 1 ? "Wd" : "Ww");
        if (hyfi_conv2d_cpu_gemm(&a, dir))
            snprintf(shp + strlen(shp), sizeof shp - strlen(shp), " %s", dir == 0 ? "Gf"
                                                                   : dir == 1 ? "Gd" : "Gw");
    }
    int rc = hyfi_conv2d_forward_ref(yr, x, w, b, &r) | hyfi_conv2d_forward_cpu(yb, xb, wk, b, &a);
    hyfi_layout_to_plain(yp, yb, a.n, a.c_out, hwo, db);
    snprintf(nm, sizeof nm, "conv blocked %d->%d fwd %s", sb, db, shp);
    tu_check(rc != 0 || tu_compare(nm, yp, yr, ny, tol[0]), nm);
    for (int acc = 0; acc < 2; acc++) {
        tu_fill(dxr, nx, seed, -1.f, 1.f);
        hyfi_layout_to_blocked(dxb, dxr, a.n, a.c_in, hwi, sb);
        rc = hyfi_conv2d_backward_data_ref(dxr, dy, w, &r, acc) |
             hyfi_conv2d_backward_data_cpu(dxb, dyb, wk, &a, acc);
        hyfi_layout_to_plain(yp, dxb, a.n, a.c_in, hwi, sb);
        snprintf(nm, sizeof nm, "conv blocked %d->%d bwd data (acc %d) %s", sb, db, acc, shp);
        tu_check(rc != 0 || tu_compare(nm, yp, dxr, nx, tol[1]), nm);
    }
    for (int acc = 0; acc < (wb ? 2 : 1); acc++) {
        tu_fill(dwr, nw, seed, -1.f, 1.f);
        tu_fill(dbr, (size_t)a.c_out, seed, -1.f, 1.f);
        memcpy(dbb, dbr, (size_t)a.c_out * 4);
        hyfi_layout_wei_to_blocked(dwk, dwr, a.c_out, a.c_in, kk, wb);
        rc = hyfi_conv2d_backward_weight_ref(dwr, dbr, dy, x, &r, acc) |
             hyfi_conv2d_backward_weight_cpu(dwk, dbb, dyb, xb, &a, acc);
        hyfi_layout_wei_to_plain(dwb, dwk, a.c_out, a.c_in, kk, wb);
        snprintf(nm, sizeof nm, "conv blocked %d->%d bwd weight (acc %d) %s", sb, db, acc, shp);
        tu_check(rc != 0 || tu_compare(nm, dwb, dwr, nw, tol[2]), nm);
        snprintf(nm, sizeof nm, "conv blocked %d->%d bwd bias (acc %d) %s", sb, db, acc, shp);
        if (a.has_bias)
            tu_check(tu_compare(nm, dbb, dbr, (size_t)a.c_out, TU_TOL_CPU_VS_REF), nm);
    }
    free(x), free(xb), free(w), free(b), free(dy), free(dyb), free(yr), free(yb), free(yp);
    free(dxr), free(dxb), free(dwr), free(dwb), free(dbr), free(dbb), free(wk), free(dwk);
}

/* The residual add fused into the convolution (engine/layout.c): y = conv(x)
 * + r bitwise the convolution then hyfi_add_forward_cpu, and within the
 * float32 tolerance of the reference, in layout blk (the GEMM path where
 * N·Ho·Wo is small). */
static void test_fused_add(hyfi_conv2d_args a, int blk, uint64_t *seed)
{
    a.src_blk = a.dst_blk = blk;
    a.wei_blk = blk;
    hyfi_conv2d_args r = a;
    r.src_blk = r.dst_blk = r.wei_blk = 0;
    const size_t nx = x_count(&a), ny = y_count(&a), nw = w_count(&a);
    const int hwi = a.h * a.w, hwo = a.ho * a.wo, kk = a.kh * a.kw;
    float *x = al(nx), *xk = al(nx), *w = al(nw), *wk = al(nw), *b = al((size_t)a.c_out);
    float *res = al(ny), *rk = al(ny), *ya = al(ny), *yf = al(ny), *yr = al(ny), *yp = al(ny);
    tu_fill(x, nx, seed, -1.f, 1.f);
    tu_fill(w, nw, seed, -0.5f, 0.5f);
    tu_fill(b, (size_t)a.c_out, seed, -0.5f, 0.5f);
    tu_fill(res, ny, seed, -1.f, 1.f);
    hyfi_layout_wei_to_blocked(wk, w, a.c_out, a.c_in, kk, blk);
    hyfi_layout_to_blocked(xk, x, a.n, a.c_in, hwi, blk);
    hyfi_layout_to_blocked(rk, res, a.n, a.c_out, hwo, blk);
    const float *bias = a.has_bias ? b : NULL;
    char shp[160], nm[224];
    describe(shp, sizeof shp, &a);
    int rc = hyfi_conv2d_forward_cpu(ya, xk, wk, bias, &a) | hyfi_add_forward_cpu(ya, ya, rk, ny);
    rc |= hyfi_conv2d_forward_add_cpu(yf, xk, rk, wk, bias, &a, 0);
    snprintf(nm, sizeof nm, "conv + add fused = apart %s blk %d", shp, blk);
    printf("%-4s %s\n", rc || memcmp(ya, yf, ny * sizeof *ya) ? "FAIL" : "ok", nm);
    tu_check(rc != 0 || memcmp(ya, yf, ny * sizeof *ya) != 0, nm);
    rc = hyfi_conv2d_forward_add_ref(yr, x, res, w, bias, &r);
    hyfi_layout_to_plain(yp, yf, a.n, a.c_out, hwo, blk);
    snprintf(nm, sizeof nm, "conv + add fused vs ref %s blk %d", shp, blk);
    tu_check(rc != 0 || tu_compare(nm, yp, yr, ny, TU_TOL_CPU_VS_REF), nm);
    free(x), free(xk), free(w), free(wk), free(b), free(res), free(rk), free(ya), free(yf);
    free(yr), free(yp);
}

/* The variants meson runs this test in: HYFI_CONV_PLAIN=0|1 and
 * HYFI_CONV_ALGO=winograd|direct|gemm, read as hyfi-train reads them
 * (apps/env_config.c), as hyfi_kernel_config (the library reads no
 * environment). */
static void kernels_from_env(void)
{
    hyfi_ctx_config cc = {0};
    hyfi_env_ctx_config(&cc);
    hyfi_kernel_configure(
        &(hyfi_kernel_config){.conv_algo = cc.conv_algo, .conv_plain = cc.conv_plain});
}

int main(void)
{
    uint64_t seed = 0xC0417D2024ull;
    kernels_from_env();

    /* output size helper */
    int os_ok = hyfi_conv_out_size(9, 3, 1, 1) == 9 && hyfi_conv_out_size(7, 3, 2, 1) == 4 &&
                hyfi_conv_out_size(8, 1, 2, 0) == 4 && hyfi_conv_out_size(13, 7, 2, 3) == 7 &&
                hyfi_conv_out_size(224, 7, 2, 3) == 112 && hyfi_conv_out_size(5, 5, 2, 2) == 3;
    printf("%-4s hyfi_conv_out_size\n", os_ok ? "ok" : "FAIL");
    tu_check(!os_ok, "hyfi_conv_out_size");

    /* n cin h w cout kh kw sh sw ph pw groups bias; finite differences; data range */
    const struct { hyfi_conv2d_args a; int fd; float amp; } cases[] = {
        {mk(2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1), 1, 1.f},
        {mk(2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1, 1, 0), 0, 1.f},
        {mk(1, 4, 8, 8, 6, 1, 7, 1, 1, 0, 3, 1, 1), 1, 1.f},
        {mk(1, 4, 8, 8, 6, 7, 1, 1, 1, 3, 0, 1, 0), 1, 1.f},
        {mk(3, 6, 11, 10, 6, 3, 3, 2, 2, 1, 1, 6, 1), 1, 1.f},   /* depthwise */
        {mk(2, 4, 7, 5, 8, 5, 5, 2, 2, 2, 2, 2, 0), 1, 1.f},     /* groups = 2 */
        {mk(2, 4, 7, 5, 8, 5, 5, 2, 2, 2, 2, 2, 1), 0, 1.f},
        {mk(2, 8, 9, 9, 16, 1, 1, 2, 2, 0, 0, 1, 0), 1, 1.f},    /* 1x1 stride 2 */
        {mk(2, 6, 5, 7, 4, 1, 1, 1, 1, 0, 0, 2, 1), 1, 1.f},     /* 1x1 stride 1, groups 2 */
        {mk(1, 3, 13, 13, 8, 7, 7, 2, 2, 3, 3, 1, 1), 1, 1.f},   /* stem-like 7x7 s2 p3 */
        {mk(3, 5, 7, 5, 7, 3, 3, 2, 2, 0, 0, 1, 1), 1, 1.f},     /* odd, stride 2, no padding */
        {mk(1, 3, 6, 9, 4, 2, 3, 1, 2, 1, 0, 1, 1), 1, 1.f},     /* even kernel, mixed strides */
        /* larger channel counts so that oneDNN picks blocked layouts */
        {mk(2, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1), 0, 0.5f},
        {mk(2, 32, 15, 15, 32, 3, 3, 2, 2, 1, 1, 32, 1), 0, 0.5f}, /* depthwise */
        {mk(2, 48, 10, 10, 24, 3, 3, 2, 2, 1, 1, 3, 0), 0, 0.5f},  /* groups = 3, 16 per group */
        {mk(1, 64, 8, 8, 128, 1, 1, 1, 1, 0, 0, 1, 0), 0, 0.5f},
        {mk(2, 16, 9, 9, 16, 1, 7, 1, 1, 0, 3, 1, 1), 0, 0.5f},
        {mk(2, 16, 9, 9, 24, 7, 1, 1, 1, 3, 0, 1, 0), 0, 0.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_shape(&cases[i].a, cases[i].fd, cases[i].amp, &seed);
    /* blocked layouts: 3x3, 1x1 (stride 1 and 2), 7x7 stem-like with a plain input */
    const hyfi_conv2d_args blk_cases[] = {
        mk(2, 32, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1), mk(2, 16, 8, 8, 32, 1, 1, 1, 1, 0, 0, 1, 0),
        mk(2, 16, 9, 9, 32, 1, 1, 2, 2, 0, 0, 1, 0), mk(1, 32, 10, 10, 32, 3, 3, 2, 2, 1, 1, 1, 1),
        /* few output pixels (N·Ho·Wo <= 64): the weight gradient by GEMM in
         * OIhw16i16o (ops/conv2d_cpu.c), with a bias and padding on every side */
        mk(4, 32, 2, 2, 48, 3, 3, 1, 1, 1, 1, 1, 1), mk(2, 16, 4, 3, 32, 3, 3, 2, 2, 1, 1, 1, 0),
        mk(3, 48, 2, 2, 32, 1, 1, 1, 1, 0, 0, 1, 0),
    };
    for (size_t i = 0; i < sizeof blk_cases / sizeof blk_cases[0]; i++)
        for (int B = 8; B <= 16; B += 8)
            for (int wb = 0; wb <= B; wb += B) { /* weights OIHW, then blocked */
                test_blocked(blk_cases[i], B, B, wb, &seed);
                test_blocked(blk_cases[i], 0, B, wb, &seed);
                test_blocked(blk_cases[i], B, 0, wb, &seed);
                test_blocked(blk_cases[i], 0, 0, wb, &seed); /* NCHW, oneDNN's kernels */
            }
    test_blocked(mk(2, 3, 13, 13, 16, 7, 7, 2, 2, 3, 3, 1, 1), 0, 16, 0, &seed);
    for (int B = 0; B <= 16; B += 16) {
        test_fused_add(mk(2, 32, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1), B, &seed);
        test_fused_add(mk(2, 16, 8, 8, 64, 1, 1, 1, 1, 0, 0, 1, 0), B, &seed);
        test_fused_add(mk(4, 32, 2, 2, 32, 3, 3, 1, 1, 1, 1, 1, 0), B, &seed); /* GEMMs */
    }
    {
        /* where the default rule takes GEMMs: at N·Ho·Wo = 16, not at 162
         * (HYFI_CONV_ALGO=direct or winograd: never, =gemm: both) */
        hyfi_conv2d_args few = mk(4, 32, 2, 2, 48, 3, 3, 1, 1, 1, 1, 1, 1);
        hyfi_conv2d_args many = mk(2, 32, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1);
        few.src_blk = few.dst_blk = few.wei_blk = many.src_blk = many.dst_blk = 16;
        many.wei_blk = 16;
        const char *algo = getenv("HYFI_CONV_ALGO");
        const int gemm = algo && !strcmp(algo, "gemm"), none = algo && (!strcmp(algo, "direct") ||
                                                                        !strcmp(algo, "winograd"));
        int f = 0, m = 0;
        for (int dir = 0; dir < 3; dir++)
            f += hyfi_conv2d_cpu_gemm(&few, dir), m += hyfi_conv2d_cpu_gemm(&many, dir);
        /* the default: the backward directions; forced: all three */
        const int ok = f == (none ? 0 : gemm ? 3 : 2) && m == 3 * gemm;
        printf("%-4s GEMM directions: %d of 3 at N*Ho*Wo = 16, %d at 162\n", ok ? "ok" : "FAIL",
               f, m);
        tu_check(!ok, "GEMM convolution rule");
        /* the same bits on 1 and 2 threads (each GEMM runs on one thread; not
         * so oneDNN's kernels, which the other algorithm settings take) */
        few.n = 8; /* K = 32, the 2x2 stage of ResNets at batch 8 */
        const size_t nx = x_count(&few), ny = y_count(&few), nw = w_count(&few);
        float *x = al(nx), *w = al(nw), *dy = al(ny), *b = al(48), *out[2][4];
        tu_fill(x, nx, &seed, -1.f, 1.f);
        tu_fill(w, nw, &seed, -0.5f, 0.5f);
        tu_fill(dy, ny, &seed, -1.f, 1.f);
        tu_fill(b, 48, &seed, -0.5f, 0.5f);
        int rc = 0;
        const int threads0 = omp_get_max_threads();
        for (int t = 0; t < 2; t++) {
            hyfi_cpu_set_threads(t + 1);
            out[t][0] = al(ny), out[t][1] = al(nx), out[t][2] = al(nw), out[t][3] = al(48);
            rc |= hyfi_conv2d_forward_cpu(out[t][0], x, w, b, &few);
            rc |= hyfi_conv2d_backward_data_cpu(out[t][1], dy, w, &few, 0);
            rc |= hyfi_conv2d_backward_weight_cpu(out[t][2], out[t][3], dy, x, &few, 0);
        }
        hyfi_cpu_set_threads(threads0);
        const int same = none || (!rc && (!gemm || !memcmp(out[0][0], out[1][0], ny * 4)) &&
                                  !memcmp(out[0][1], out[1][1], nx * 4) &&
                                  !memcmp(out[0][2], out[1][2], nw * 4) &&
                                  !memcmp(out[0][3], out[1][3], 48 * 4));
        printf("%-4s convolution N8 32->48 2x2, %s: the same bits on 1 and 2 threads%s\n",
               same ? "ok" : "FAIL", gemm ? "all directions" : "backward",
               none ? " (not checked: oneDNN's kernels)" : "");
        tu_check(!same, "thread-count independence");
        for (int t = 0; t < 2; t++)
            for (int k = 0; k < 4; k++) free(out[t][k]);
        free(x), free(w), free(dy), free(b);
    }
    /* 3x3 stride 1 with enough 4x4 output tiles (4 * 4 * 4 = 64) and channels
     * that the default rule takes oneDNN's Winograd algorithm where the CPU has
     * it (AVX-512), in every direction (HYFI_CONV_ALGO=direct: the direct
     * one); odd sizes (15x13: partial tiles), and Cin != Cout */
    {
        const hyfi_conv2d_args wa = mk(4, 32, 15, 13, 48, 3, 3, 1, 1, 1, 1, 1, 1);
        hyfi_conv2d_args q = wa;
        q.src_blk = q.dst_blk = q.wei_blk = 16;
        const char *algo = getenv("HYFI_CONV_ALGO");
        if (algo && !strcmp(algo, "winograd")) {
            int have = 0;
            for (int dir = 0; dir < 3; dir++) have += hyfi_conv2d_cpu_winograd(&q, dir);
            printf("%-4s Winograd forced: %d of 3 directions on a 3x3 stride-1 convolution\n",
                   have == 3 || have == 0 ? "ok" : "FAIL", have);
            tu_check(have != 3 && have != 0, "Winograd in all directions or none");
        }
        for (int wb = 0; wb <= 16; wb += 16) test_blocked(wa, 16, 16, wb, &seed);
    }
    /* the weight layout itself: (o, i, kh, kw) of a 32x48x3x3 at
     * ((o/16 * 3 + i/16) * 9 + kh * 3 + kw) * 256 + (i % 16) * 16 + o % 16 */
    {
        const int O = 32, I = 48, K = 9;
        float *p = malloc((size_t)O * I * K * 4), *q = malloc((size_t)O * I * K * 4);
        float *back = malloc((size_t)O * I * K * 4);
        for (int i = 0; i < O * I * K; i++) p[i] = (float)i;
        hyfi_layout_wei_to_blocked(q, p, O, I, K, 16);
        hyfi_layout_wei_to_plain(back, q, O, I, K, 16);
        int bad = memcmp(back, p, (size_t)O * I * K * 4) != 0;
        for (int o = 0; o < O; o++)
            for (int i = 0; i < I; i++)
                for (int k = 0; k < K; k++)
                    bad |= q[((o / 16 * 3 + i / 16) * 9 + k) * 256 + i % 16 * 16 + o % 16] !=
                           p[(o * I + i) * K + k];
        printf("%-4s weight layout OIhw16i16o: positions and round trip\n", bad ? "FAIL" : "ok");
        tu_check(bad, "weight layout OIhw16i16o");
        free(p), free(q), free(back);
    }
    return tu_finish();
}
