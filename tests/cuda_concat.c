/* cuda_concat.c: CUDA channel concatenation vs the CPU path: 3 parts with odd
 * channel counts, batch 1 and 3, odd H*W; forward (other channels untouched)
 * and backward with acc 0 and 1. Called by tests/test_cuda_ops.c when a GPU
 * exists; returns the number of failures. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cc_case(hyfi_cuda_env *env, int n, int hw, const int parts[3], uint64_t *seed)
{
    int fails = 0, c_total = parts[0] + parts[1] + parts[2];
    char name[128];
    size_t ny = (size_t)n * c_total * hw;
    float *y = tu_alloc(ny), *dy = tu_alloc(ny);
    tu_fill(y, ny, seed, -1.0f, 1.0f);
    tu_fill(dy, ny, seed, -1.0f, 1.0f);
    float *d_y = tu_cuda_upload(y, ny), *d_dy = tu_cuda_upload(dy, ny);
    int off = 0;
    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = {n, hw, parts[i], off, c_total};
        off += parts[i];
        size_t nx = (size_t)n * a.c_part * hw;
        float *x = tu_alloc(nx), *base = tu_alloc(nx), *want = tu_alloc(nx);
        tu_fill(x, nx, seed, -1.0f, 1.0f);
        tu_fill(base, nx, seed, -1.0f, 1.0f);
        float *d_x = tu_cuda_upload(x, nx), *d_dx = tu_cuda_upload(base, nx);
        if (!d_y || !d_dy || !d_x || !d_dx) {
            tu_check(1, "cuda_concat: cudaMalloc");
            fails++;
        } else {
            hyfi_concat_forward_cpu(y, x, &a);
            snprintf(name, sizeof name, "concat_forward cuda/cpu N=%d hw=%d part %d", n, hw, i + 1);
            fails += tu_cuda_check(name, hyfi_concat_forward_cuda(env, d_y, d_x, &a), d_y, y,
                                   ny, env->stream);
            for (int acc = 0; acc <= 1; acc++) {
                memcpy(want, base, nx * sizeof(float));
                hyfi_concat_backward_cpu(want, dy, &a, acc);
                tu_cuda_copy_in(d_dx, base, nx);
                snprintf(name, sizeof name, "concat_backward cuda/cpu N=%d hw=%d part %d acc=%d",
                         n, hw, i + 1, acc);
                fails += tu_cuda_check(name, hyfi_concat_backward_cuda(env, d_dx, d_dy, &a, acc),
                                       d_dx, want, nx, env->stream);
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
    if (tu_cuda_open(&env, &stream, "cuda_concat")) return 1;
    static const int parts_a[3] = {3, 5, 1}, parts_b[3] = {1, 7, 3};
    int fails = 0;
    fails += cc_case(&env, 1, 35, parts_a, seed);
    fails += cc_case(&env, 3, 35, parts_b, seed);
    fails += cc_case(&env, 3, 1, parts_a, seed);
    fails += cc_case(&env, 5, 1001, parts_b, seed);
    tu_cuda_close(&env, stream);
    return fails;
}
