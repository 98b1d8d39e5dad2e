/* cuda_batchnorm.c: CUDA batch normalisation (own kernels) vs the CPU path
 * (oneDNN): training forward (y, saved mean and biased variance, running
 * statistics updated on the device), eval forward, backward with acc 0 and 1,
 * on odd shapes, batch 1 and 3, 1x1 spatial, a large M, and M == 1.
 * Called by tests/test_cuda_ops.c when a GPU exists; returns the number of
 * failures. */
#include "cuda_testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cuda_test_batchnorm(uint64_t *seed);

/* tu_cuda_check_tol, named "<what> cuda/cpu <shape>". */
static int bnc_check(const char *what, const char *shp, int rc, const float *d,
                     const float *want, size_t n, cudaStream_t s, tu_tol tol)
{
    char name[160];
    snprintf(name, sizeof name, "%s cuda/cpu %s", what, shp);
    return tu_cuda_check_tol(name, rc, d, want, n, s, tol);
}

static int bnc_case(hyfi_cuda_env *env, int n, int c, int h, int w, uint64_t *seed)
{
    hyfi_batchnorm_args a = {n, c, h, w, 1e-5f, 0.1f, 0};
    const size_t cnt = (size_t)n * c * h * w, C = (size_t)c;
    const double M = (double)n * h * w;
    char shp[64];
    snprintf(shp, sizeof shp, "%dx%dx%dx%d", n, c, h, w);
    /* dgamma / dbeta are sums of M terms that largely cancel: float32 summation
     * error grows like sqrt(M), whatever the size of the result. */
    tu_tol tsum = TU_TOL_CUDA_VS_CPU;
    tsum.what = "cuda-vs-cpu, atol*sqrt(M)";
    tsum.atol *= M > 1 ? sqrt(M) : 1.0;
    const tu_tol tol = TU_TOL_CUDA_VS_CPU;

    float *x = tu_alloc(cnt), *dy = tu_alloc(cnt), *g = tu_alloc(C), *b = tu_alloc(C);
    float *rm0 = tu_alloc(C), *rv0 = tu_alloc(C), *rm = tu_alloc(C), *rv = tu_alloc(C);
    float *y = tu_alloc(cnt), *mean = tu_alloc(C), *var = tu_alloc(C), *ye = tu_alloc(cnt);
    float *dx = tu_alloc(cnt), *dg = tu_alloc(C), *db = tu_alloc(C);
    float *dx0 = tu_alloc(cnt), *dg0 = tu_alloc(C), *db0 = tu_alloc(C);
    float *dxa = tu_alloc(cnt), *dga = tu_alloc(C), *dba = tu_alloc(C);
    for (int bi = 0; bi < n; bi++)
        for (int ci = 0; ci < c; ci++) {
            float *p = x + ((size_t)bi * c + ci) * h * w;
            for (int i = 0; i < h * w; i++)
                p[i] = 0.2f * (float)ci - 0.3f + tu_uniform(seed, -1.f, 1.f);
        }
    tu_fill(dy, cnt, seed, -1.f, 1.f);
    tu_fill(g, C, seed, 0.5f, 1.5f);
    tu_fill(b, C, seed, -0.5f, 0.5f);
    tu_fill(rm0, C, seed, -0.2f, 0.2f);
    tu_fill(rv0, C, seed, 0.5f, 1.5f);
    tu_fill(dx0, cnt, seed, -1.f, 1.f);
    tu_fill(dg0, C, seed, -1.f, 1.f);
    tu_fill(db0, C, seed, -1.f, 1.f);

    /* CPU results. */
    memcpy(rm, rm0, C * sizeof(float));
    memcpy(rv, rv0, C * sizeof(float));
    int rc = hyfi_batchnorm_forward_train_cpu(y, mean, var, rm, rv, x, g, b, &a, 0);
    rc |= hyfi_batchnorm_forward_eval_cpu(ye, x, g, b, rm, rv, &a, 0);
    rc |= hyfi_batchnorm_backward_cpu(dx, dg, db, dy, x, g, b, mean, var, &a, 0, 0);
    memcpy(dxa, dx0, cnt * sizeof(float));
    memcpy(dga, dg0, C * sizeof(float));
    memcpy(dba, db0, C * sizeof(float));
    rc |= hyfi_batchnorm_backward_cpu(dxa, dga, dba, dy, x, g, b, mean, var, &a,
                                      HYFI_BN_ACC_DX | HYFI_BN_ACC_PARAMS, 0);
    int fails = 0;
    if (rc != 0) {
        printf("FAIL batchnorm cpu path %s: rc %d\n", shp, rc);
        tu_check(1, "cuda_batchnorm: cpu path");
        fails++;
    }

    float *d_x = tu_cuda_upload(x, cnt), *d_dy = tu_cuda_upload(dy, cnt);
    float *d_g = tu_cuda_upload(g, C), *d_b = tu_cuda_upload(b, C);
    float *d_rm = tu_cuda_upload(rm0, C), *d_rv = tu_cuda_upload(rv0, C);
    float *d_rmc = tu_cuda_upload(rm, C), *d_rvc = tu_cuda_upload(rv, C);
    float *d_meanc = tu_cuda_upload(mean, C), *d_varc = tu_cuda_upload(var, C);
    float *d_y = tu_cuda_upload(dx0, cnt), *d_mean = tu_cuda_upload(dg0, C);
    float *d_var = tu_cuda_upload(db0, C), *d_dx = tu_cuda_upload(dx0, cnt);
    float *d_dg = tu_cuda_upload(dg0, C), *d_db = tu_cuda_upload(db0, C);
    if (!d_x || !d_dy || !d_g || !d_b || !d_rm || !d_rv || !d_rmc || !d_rvc || !d_meanc ||
        !d_varc || !d_y || !d_mean || !d_var || !d_dx || !d_dg || !d_db) {
        tu_check(1, "cuda_batchnorm: cudaMalloc");
        fails++;
        goto out;
    }

    rc = hyfi_batchnorm_forward_train_cuda(env, d_y, d_mean, d_var, d_rm, d_rv, d_x, d_g, d_b,
                                           &a, 0);
    fails += bnc_check("bn fwd_train y", shp, rc, d_y, y, cnt, env->stream, tol);
    fails += bnc_check("bn fwd_train mean", shp, rc, d_mean, mean, C, env->stream, tol);
    fails += bnc_check("bn fwd_train var", shp, rc, d_var, var, C, env->stream, tol);
    fails += bnc_check("bn fwd_train run_mean", shp, rc, d_rm, rm, C, env->stream, tol);
    fails += bnc_check("bn fwd_train run_var", shp, rc, d_rv, rv, C, env->stream, tol);

    /* Eval with the CPU's updated running statistics. */
    rc = hyfi_batchnorm_forward_eval_cuda(env, d_y, d_x, d_g, d_b, d_rmc, d_rvc, &a, 0);
    fails += bnc_check("bn fwd_eval y", shp, rc, d_y, ye, cnt, env->stream, tol);

    /* Backward from the CPU's saved statistics, acc = 0 then acc = 1. */
    rc = hyfi_batchnorm_backward_cuda(env, d_dx, d_dg, d_db, d_dy, d_x, d_g, d_b, d_meanc, d_varc,
                                      &a, 0, 0);
    fails += bnc_check("bn bwd dx", shp, rc, d_dx, dx, cnt, env->stream, tol);
    fails += bnc_check("bn bwd dgamma", shp, rc, d_dg, dg, C, env->stream, tsum);
    fails += bnc_check("bn bwd dbeta", shp, rc, d_db, db, C, env->stream, tsum);
    if (tu_cuda_copy_in(d_dx, dx0, cnt) || tu_cuda_copy_in(d_dg, dg0, C) ||
        tu_cuda_copy_in(d_db, db0, C)) {
        tu_check(1, "cuda_batchnorm: cudaMemcpy");
        fails++;
        goto out;
    }
    rc = hyfi_batchnorm_backward_cuda(env, d_dx, d_dg, d_db, d_dy, d_x, d_g, d_b, d_meanc, d_varc,
                                      &a, HYFI_BN_ACC_DX | HYFI_BN_ACC_PARAMS, 0);
    fails += bnc_check("bn bwd acc dx", shp, rc, d_dx, dxa, cnt, env->stream, tol);
    fails += bnc_check("bn bwd acc dgamma", shp, rc, d_dg, dga, C, env->stream, tsum);
    fails += bnc_check("bn bwd acc dbeta", shp, rc, d_db, dba, C, env->stream, tsum);

out:
    cudaFree(d_x); cudaFree(d_dy); cudaFree(d_g); cudaFree(d_b); cudaFree(d_rm);
    cudaFree(d_rv); cudaFree(d_rmc); cudaFree(d_rvc); cudaFree(d_meanc); cudaFree(d_varc);
    cudaFree(d_y); cudaFree(d_mean); cudaFree(d_var); cudaFree(d_dx); cudaFree(d_dg);
    cudaFree(d_db);
    free(x); free(dy); free(g); free(b); free(rm0); free(rv0); free(rm); free(rv);
    free(y); free(mean); free(var); free(ye); free(dx); free(dg); free(db);
    free(dx0); free(dg0); free(db0); free(dxa); free(dga); free(dba);
    return fails;
}

int cuda_test_batchnorm(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_batchnorm")) return 1;
    int fails = 0;
    fails += bnc_case(&env, 2, 3, 5, 7, seed);
    fails += bnc_case(&env, 1, 5, 7, 5, seed);
    fails += bnc_case(&env, 3, 4, 1, 1, seed);
    fails += bnc_case(&env, 1, 3, 2, 1, seed);
    fails += bnc_case(&env, 1, 2, 1, 1, seed); /* M == 1: variance 0, unbiased factor 1 */
    fails += bnc_case(&env, 3, 7, 9, 9, seed);
    fails += bnc_case(&env, 8, 32, 14, 14, seed);
    fails += bnc_case(&env, 16, 5, 28, 28, seed);
    tu_cuda_close(&env, stream);
    return fails;
}
