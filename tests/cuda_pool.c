/* cuda_pool.c: CUDA pooling (own kernels) vs the CPU path: max pooling
 * (random data and heavily tied data, to check the shared tie rule), average
 * pooling with count_include_pad 0 and 1, global average pooling; forwards and
 * backwards with acc 0 and 1 on odd shapes (3x3 s2 p1 on 7x9 and 15x15, 2x2 s2
 * p0 on 7x7, 3x3 s1 p1, asymmetric windows, a ResNet-sized 3x3 s2 p1).
 * Called by tests/test_cuda_ops.c when a GPU exists; returns the number of
 * failures. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cuda_test_pool(uint64_t *seed);

/* tu_cuda_check, named "<what> cuda/cpu <shape>". */
static int plc_check(const char *what, const char *shp, int rc, const float *d,
                     const float *want, size_t n, cudaStream_t s)
{
    char name[200];
    snprintf(name, sizeof name, "%s cuda/cpu %s", what, shp);
    return tu_cuda_check(name, rc, d, want, n, s);
}

/* kind: 0 max, 1 avg, 2 gap; tied: x in {-1, 0, 1}. */
static int plc_case(hyfi_cuda_env *env, const hyfi_pool_args *a, int kind, int tied,
                    uint64_t *seed)
{
    const size_t nx = (size_t)a->n * a->c * a->h * a->w;
    const size_t ny = (size_t)a->n * a->c * a->ho * a->wo;
    const char *kn = kind == 0 ? (tied ? "maxpool(tied)" : "maxpool")
                     : kind == 1 ? (a->count_include_pad ? "avgpool cip1" : "avgpool cip0")
                                 : "gap";
    char shp[96], what[64];
    snprintf(shp, sizeof shp, "%dx%dx%dx%d k%dx%d s%dx%d p%dx%d", a->n, a->c, a->h, a->w, a->kh,
             a->kw, a->sh, a->sw, a->ph, a->pw);
    float *x = tu_alloc(nx), *dy = tu_alloc(ny), *y = tu_alloc(ny), *dx = tu_alloc(nx);
    float *dx0 = tu_alloc(nx), *dxa = tu_alloc(nx);
    if (tied)
        for (size_t i = 0; i < nx; i++) x[i] = (float)tu_randint(seed, -1, 1);
    else
        tu_fill(x, nx, seed, -1.f, 1.f);
    tu_fill(dy, ny, seed, -1.f, 1.f);
    tu_fill(dx0, nx, seed, -1.f, 1.f);
    memcpy(dxa, dx0, nx * sizeof(float));
    int rc, fails = 0;
    if (kind == 0) {
        rc = hyfi_maxpool_forward_cpu(y, x, a);
        rc |= hyfi_maxpool_backward_cpu(dx, dy, x, a, 0);
        rc |= hyfi_maxpool_backward_cpu(dxa, dy, x, a, 1);
    } else if (kind == 1) {
        rc = hyfi_avgpool_forward_cpu(y, x, a);
        rc |= hyfi_avgpool_backward_cpu(dx, dy, a, 0);
        rc |= hyfi_avgpool_backward_cpu(dxa, dy, a, 1);
    } else {
        rc = hyfi_gap_forward_cpu(y, x, a);
        rc |= hyfi_gap_backward_cpu(dx, dy, a, 0);
        rc |= hyfi_gap_backward_cpu(dxa, dy, a, 1);
    }
    if (rc != 0) {
        printf("FAIL %s cpu path %s: rc %d\n", kn, shp, rc);
        tu_check(1, "cuda_pool: cpu path");
        fails++;
    }
    float *d_x = tu_cuda_upload(x, nx), *d_dy = tu_cuda_upload(dy, ny), *d_y = tu_cuda_zeros(ny);
    float *d_dx = tu_cuda_upload(dx0, nx);
    if (!d_x || !d_dy || !d_y || !d_dx) {
        tu_check(1, "cuda_pool: cudaMalloc");
        fails++;
        goto out;
    }
    rc = kind == 0   ? hyfi_maxpool_forward_cuda(env, d_y, d_x, a)
         : kind == 1 ? hyfi_avgpool_forward_cuda(env, d_y, d_x, a)
                     : hyfi_gap_forward_cuda(env, d_y, d_x, a);
    snprintf(what, sizeof what, "%s fwd", kn);
    fails += plc_check(what, shp, rc, d_y, y, ny, env->stream);
    for (int acc = 0; acc < 2; acc++) {
        /* acc = 0 must overwrite: start from dx0 in both cases */
        if (tu_cuda_copy_in(d_dx, dx0, nx)) {
            tu_check(1, "cuda_pool: cudaMemcpy");
            fails++;
            goto out;
        }
        rc = kind == 0   ? hyfi_maxpool_backward_cuda(env, d_dx, d_dy, d_x, a, acc)
             : kind == 1 ? hyfi_avgpool_backward_cuda(env, d_dx, d_dy, a, acc)
                         : hyfi_gap_backward_cuda(env, d_dx, d_dy, a, acc);
        snprintf(what, sizeof what, "%s bwd acc=%d", kn, acc);
        fails += plc_check(what, shp, rc, d_dx, acc ? dxa : dx, nx, env->stream);
    }
out:
    cudaFree(d_x);
    cudaFree(d_dy);
    cudaFree(d_y);
    cudaFree(d_dx);
    free(x); free(dy); free(y); free(dx); free(dx0); free(dxa);
    return fails;
}

int cuda_test_pool(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_pool")) return 1;
    /* n, c, h, w, kh, kw, sh, sw, ph, pw */
    static const int cases[][10] = {
        {3, 5, 7, 9, 3, 3, 2, 2, 1, 1},   {1, 3, 15, 15, 3, 3, 2, 2, 1, 1},
        {3, 3, 7, 7, 2, 2, 2, 2, 0, 0},   {2, 4, 8, 8, 2, 2, 2, 2, 0, 0},
        {1, 5, 7, 5, 3, 3, 1, 1, 1, 1},   {2, 3, 9, 9, 3, 3, 2, 2, 0, 0},
        {1, 2, 9, 11, 3, 2, 2, 1, 1, 0},  {1, 2, 6, 5, 3, 3, 3, 3, 1, 1},
        {8, 64, 56, 56, 3, 3, 2, 2, 1, 1},
    };
    int fails = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int *p = cases[k];
        hyfi_pool_args a = {p[0], p[1], p[2], p[3], 0, 0, p[4], p[5], p[6], p[7], p[8], p[9], 0, 0};
        a.ho = (a.h + 2 * a.ph - a.kh) / a.sh + 1;
        a.wo = (a.w + 2 * a.pw - a.kw) / a.sw + 1;
        fails += plc_case(&env, &a, 0, 0, seed);
        fails += plc_case(&env, &a, 0, 1, seed);
        fails += plc_case(&env, &a, 1, 0, seed);
        a.count_include_pad = 1;
        fails += plc_case(&env, &a, 1, 0, seed);
    }
    static const int gaps[][4] = {{2, 3, 5, 3}, {1, 4, 7, 7}, {3, 5, 1, 1}, {8, 512, 7, 7},
                                  {2, 3, 33, 17}};
    for (size_t k = 0; k < sizeof gaps / sizeof gaps[0]; k++) {
        const int *s = gaps[k];
        hyfi_pool_args a = {s[0], s[1], s[2], s[3], 1, 1, s[2], s[3], 1, 1, 0, 0, 0, 0};
        fails += plc_case(&env, &a, 2, 0, seed);
    }
    tu_cuda_close(&env, stream);
    return fails;
}
