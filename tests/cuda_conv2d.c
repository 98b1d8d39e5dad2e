/* cuda_conv2d.c: the conv2d CUDA kernels (cuDNN) against the CPU kernels on a
 * few shapes (odd sizes, 1x7 / 7x1, stride 2, groups, depthwise, bias or not),
 * forward, backward data and backward weights with acc = 0 and acc = 1.
 * Called by tests/test_cuda_ops.c when a GPU exists; returns the number of
 * failed checks. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cuda_test_conv2d(uint64_t *seed);

static hyfi_conv2d_args cc_mk(int n, int cin, int h, int w, int cout, int kh, int kw, int sh,
                              int sw, int ph, int pw, int groups, int has_bias)
{
    hyfi_conv2d_args a = {.n = n, .c_in = cin, .h = h, .w = w, .c_out = cout,
                          .kh = kh, .kw = kw, .sh = sh, .sw = sw, .ph = ph, .pw = pw,
                          .groups = groups, .has_bias = has_bias};
    a.ho = hyfi_conv_out_size(h, kh, sh, ph);
    a.wo = hyfi_conv_out_size(w, kw, sw, pw);
    return a;
}

/* One check of a device result against the CPU one, named "<what> [<shape>]". */
static int cc_check(int rc, const char *what, const char *shape, const float *d,
                    const float *want, size_t n, cudaStream_t s)
{
    char nm[256];
    snprintf(nm, sizeof nm, "%s [%s]", what, shape);
    return tu_cuda_check(nm, rc, d, want, n, s);
}

static int cc_shape(hyfi_cuda_env *env, const hyfi_conv2d_args *a, float amp, uint64_t *seed)
{
    char shp[128];
    snprintf(shp, sizeof shp, "N%d C%d %dx%d -> C%d k%dx%d s%d,%d p%d,%d g%d%s", a->n, a->c_in,
             a->h, a->w, a->c_out, a->kh, a->kw, a->sh, a->sw, a->ph, a->pw, a->groups,
             a->has_bias ? " bias" : "");
    const size_t nx = (size_t)a->n * a->c_in * a->h * a->w;
    const size_t ny = (size_t)a->n * a->c_out * a->ho * a->wo;
    const size_t nw = (size_t)a->c_out * (a->c_in / a->groups) * a->kh * a->kw;
    const size_t nb = (size_t)a->c_out;
    int fails = 0;

    float *x = tu_alloc(nx), *w = tu_alloc(nw), *b = tu_alloc(nb), *dy = tu_alloc(ny);
    float *dx0 = tu_alloc(nx), *dw0 = tu_alloc(nw), *db0 = tu_alloc(nb);
    float *y_cpu = tu_alloc(ny), *dx_cpu = tu_alloc(nx), *dxa_cpu = tu_alloc(nx);
    float *dw_cpu = tu_alloc(nw), *dwa_cpu = tu_alloc(nw), *db_cpu = tu_alloc(nb),
          *dba_cpu = tu_alloc(nb);
    tu_fill(x, nx, seed, -amp, amp);
    tu_fill(w, nw, seed, -amp, amp);
    tu_fill(b, nb, seed, -amp, amp);
    tu_fill(dy, ny, seed, -amp, amp);
    tu_fill(dx0, nx, seed, -1.f, 1.f); /* accumulation bases */
    tu_fill(dw0, nw, seed, -1.f, 1.f);
    tu_fill(db0, nb, seed, -1.f, 1.f);
    const float *bp = a->has_bias ? b : NULL;

    /* CPU results */
    int crc = hyfi_conv2d_forward_cpu(y_cpu, x, w, bp, a);
    crc |= hyfi_conv2d_backward_data_cpu(dx_cpu, dy, w, a, 0);
    memcpy(dxa_cpu, dx0, nx * sizeof(float));
    crc |= hyfi_conv2d_backward_data_cpu(dxa_cpu, dy, w, a, 1);
    crc |= hyfi_conv2d_backward_weight_cpu(dw_cpu, a->has_bias ? db_cpu : NULL, dy, x, a, 0);
    memcpy(dwa_cpu, dw0, nw * sizeof(float));
    memcpy(dba_cpu, db0, nb * sizeof(float));
    crc |= hyfi_conv2d_backward_weight_cpu(dwa_cpu, a->has_bias ? dba_cpu : NULL, dy, x, a, 1);
    if (crc) {
        printf("FAIL conv2d cpu kernels [%s]\n", shp);
        tu_check(1, "conv2d cpu kernels");
        fails++;
    }

    /* device buffers: inputs, and outputs pre-filled (NaN pattern for acc = 0,
     * so that they must be overwritten; the base for acc = 1) */
    float *d_x = tu_cuda_upload(x, nx), *d_w = tu_cuda_upload(w, nw);
    float *d_b = tu_cuda_upload(b, nb), *d_dy = tu_cuda_upload(dy, ny), *d_y = tu_cuda_zeros(ny);
    float *d_dx = tu_cuda_upload(dx0, nx), *d_dxa = tu_cuda_upload(dx0, nx);
    float *d_dw = tu_cuda_upload(dw0, nw), *d_dwa = tu_cuda_upload(dw0, nw);
    float *d_db = tu_cuda_upload(db0, nb), *d_dba = tu_cuda_upload(db0, nb);
    int have_all = d_x && d_w && d_b && d_dy && d_y && d_dx && d_dxa && d_dw && d_dwa && d_db &&
                   d_dba;
    if (!have_all) {
        printf("FAIL conv2d device allocation [%s]\n", shp);
        tu_check(1, "conv2d device allocation");
        fails++;
    } else {
        cudaMemset(d_y, 0xff, ny * sizeof(float));
        cudaMemset(d_dx, 0xff, nx * sizeof(float));
        cudaMemset(d_dw, 0xff, nw * sizeof(float));
        cudaMemset(d_db, 0xff, nb * sizeof(float));
        int r_fwd = hyfi_conv2d_forward_cuda(env, d_y, d_x, d_w, a->has_bias ? d_b : NULL, a);
        int r_bd0 = hyfi_conv2d_backward_data_cuda(env, d_dx, d_dy, d_w, a, 0);
        int r_bd1 = hyfi_conv2d_backward_data_cuda(env, d_dxa, d_dy, d_w, a, 1);
        int r_bw0 = hyfi_conv2d_backward_weight_cuda(env, d_dw, a->has_bias ? d_db : NULL, d_dy,
                                                     d_x, a, 0);
        int r_bw1 = hyfi_conv2d_backward_weight_cuda(env, d_dwa, a->has_bias ? d_dba : NULL,
                                                     d_dy, d_x, a, 1);
        cudaStream_t st = env->stream;
        fails += cc_check(r_fwd, "conv2d forward cuda", shp, d_y, y_cpu, ny, st);
        fails += cc_check(r_bd0, "conv2d backward_data cuda", shp, d_dx, dx_cpu, nx, st);
        fails += cc_check(r_bd1, "conv2d backward_data cuda acc=1", shp, d_dxa, dxa_cpu, nx, st);
        fails += cc_check(r_bw0, "conv2d backward_weight dw cuda", shp, d_dw, dw_cpu, nw, st);
        fails += cc_check(r_bw1, "conv2d backward_weight dw cuda acc=1", shp, d_dwa, dwa_cpu, nw,
                          st);
        if (a->has_bias) {
            fails += cc_check(r_bw0, "conv2d backward_weight db cuda", shp, d_db, db_cpu, nb, st);
            fails += cc_check(r_bw1, "conv2d backward_weight db cuda acc=1", shp, d_dba, dba_cpu,
                              nb, st);
        }
    }

    cudaFree(d_x); cudaFree(d_w); cudaFree(d_b); cudaFree(d_dy); cudaFree(d_y);
    cudaFree(d_dx); cudaFree(d_dxa); cudaFree(d_dw); cudaFree(d_dwa);
    cudaFree(d_db); cudaFree(d_dba);
    free(x); free(w); free(b); free(dy); free(dx0); free(dw0); free(db0);
    free(y_cpu); free(dx_cpu); free(dxa_cpu); free(dw_cpu); free(dwa_cpu); free(db_cpu);
    free(dba_cpu);
    return fails;
}

int cuda_test_conv2d(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_conv2d")) return 1;
    /* n cin h w cout kh kw sh sw ph pw groups bias; data range */
    const struct { hyfi_conv2d_args a; float amp; } cases[] = {
        {cc_mk(2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1), 1.f},
        {cc_mk(1, 4, 8, 8, 6, 1, 7, 1, 1, 0, 3, 1, 1), 1.f},
        {cc_mk(1, 4, 8, 8, 6, 7, 1, 1, 1, 3, 0, 1, 0), 1.f},
        {cc_mk(3, 6, 11, 10, 6, 3, 3, 2, 2, 1, 1, 6, 1), 1.f},   /* depthwise */
        {cc_mk(2, 4, 7, 5, 8, 5, 5, 2, 2, 2, 2, 2, 0), 1.f},     /* groups = 2 */
        {cc_mk(2, 8, 9, 9, 16, 1, 1, 2, 2, 0, 0, 1, 0), 1.f},    /* 1x1 stride 2 */
        {cc_mk(1, 3, 13, 13, 8, 7, 7, 2, 2, 3, 3, 1, 1), 1.f},   /* 7x7 s2 p3 */
        {cc_mk(3, 5, 7, 5, 7, 3, 3, 2, 2, 0, 0, 1, 1), 1.f},
        /* network-sized layers */
        {cc_mk(4, 64, 28, 28, 128, 3, 3, 2, 2, 1, 1, 1, 0), 0.5f},
        {cc_mk(4, 96, 28, 28, 96, 3, 3, 1, 1, 1, 1, 96, 0), 0.5f}, /* depthwise */
        {cc_mk(4, 64, 17, 17, 96, 1, 7, 1, 1, 0, 3, 1, 1), 0.5f},
        {cc_mk(4, 64, 17, 17, 64, 7, 1, 1, 1, 3, 0, 1, 0), 0.5f},
        {cc_mk(2, 3, 64, 64, 32, 7, 7, 2, 2, 3, 3, 1, 1), 0.5f},
        {cc_mk(4, 128, 14, 14, 128, 3, 3, 1, 1, 1, 1, 4, 1), 0.5f}, /* groups = 4 */
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        fails += cc_shape(&env, &cases[i].a, cases[i].amp, seed);
    tu_cuda_close(&env, stream);
    return fails;
}
