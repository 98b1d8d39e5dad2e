/* cuda_concat.c: CUDA channel concatenation vs the CPU path: 3 parts with odd
 * channel counts, batch 1 and 3, odd H*W; forward (other channels untouched)
 * and backward with acc 0 and 1. Called by tests/test_cuda_ops.c when a GPU
 * exists; returns the number of failures. */
#include "kernels_cuda.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *cc_upload(const float *h, size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* Synchronise the stream and compare a device array with `want`; 1 on failure. */
static int cc_check(const char *name, int rc, const float *d, const float *want, size_t n,
                    cudaStream_t s)
{
    float *got = tu_alloc(n);
    int bad = rc != 0 || cudaStreamSynchronize(s) != cudaSuccess ||
              cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess;
    if (bad) printf("FAIL %s: rc %d / CUDA error\n", name, rc);
    else bad = tu_compare(name, got, want, n, TU_TOL_CUDA_VS_CPU);
    tu_check(bad, name);
    free(got);
    return bad;
}

static int cc_case(hyfi_cuda_env *env, int n, int hw, const int parts[3], uint64_t *seed)
{
    int fails = 0, c_total = parts[0] + parts[1] + parts[2];
    char name[128];
    size_t ny = (size_t)n * c_total * hw;
    float *y = tu_alloc(ny), *dy = tu_alloc(ny);
    tu_fill(y, ny, seed, -1.0f, 1.0f);
    tu_fill(dy, ny, seed, -1.0f, 1.0f);
    float *d_y = cc_upload(y, ny), *d_dy = cc_upload(dy, ny);
    int off = 0;
    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = {n, hw, parts[i], off, c_total};
        off += parts[i];
        size_t nx = (size_t)n * a.c_part * hw;
        float *x = tu_alloc(nx), *base = tu_alloc(nx), *want = tu_alloc(nx);
        tu_fill(x, nx, seed, -1.0f, 1.0f);
        tu_fill(base, nx, seed, -1.0f, 1.0f);
        float *d_x = cc_upload(x, nx), *d_dx = cc_upload(base, nx);
        if (!d_y || !d_dy || !d_x || !d_dx) {
            tu_check(1, "cuda_concat: cudaMalloc");
            fails++;
        } else {
            hyfi_concat_forward_cpu(y, x, &a);
            snprintf(name, sizeof name, "concat_forward cuda/cpu N=%d hw=%d part %d", n, hw, i + 1);
            fails += cc_check(name, hyfi_concat_forward_cuda(env, d_y, d_x, &a), d_y, y, ny,
                              env->stream);
            for (int acc = 0; acc <= 1; acc++) {
                memcpy(want, base, nx * sizeof(float));
                hyfi_concat_backward_cpu(want, dy, &a, acc);
                cudaMemcpy(d_dx, base, nx * sizeof(float), cudaMemcpyHostToDevice);
                snprintf(name, sizeof name, "concat_backward cuda/cpu N=%d hw=%d part %d acc=%d",
                         n, hw, i + 1, acc);
                fails += cc_check(name, hyfi_concat_backward_cuda(env, d_dx, d_dy, &a, acc), d_dx,
                                  want, nx, env->stream);
            }
        }
        cudaFree(d_x);
        cudaFree(d_dx);
        free(x); free(base); free(want);
    }
    cudaFree(d_y);
    cudaFree(d_dy);
    free(y); free(dy);
    return fails;
}

int cuda_test_concat(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        tu_check(1, "cuda_concat: stream");
        return 1;
    }
    if (hyfi_cuda_env_init(&env, stream) != 0) {
        tu_check(1, "cuda_concat: env");
        hyfi_cuda_env_fini(&env);
        cudaStreamDestroy(stream);
        return 1;
    }
    static const int parts_a[3] = {3, 5, 1}, parts_b[3] = {1, 7, 3};
    int fails = 0;
    fails += cc_case(&env, 1, 35, parts_a, seed);
    fails += cc_case(&env, 3, 35, parts_b, seed);
    fails += cc_case(&env, 3, 1, parts_a, seed);
    fails += cc_case(&env, 5, 1001, parts_b, seed);
    hyfi_cuda_env_fini(&env);
    cudaStreamDestroy(stream);
    return fails;
}
