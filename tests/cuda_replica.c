/* cuda_replica.c: CUDA replica kernels vs the CPU path: slice copies (into
 * and out of a vector) and the running-statistics combine for R = 2..4
 * replicas. Called by tests/test_cuda_ops.c when a GPU exists; returns the
 * number of failures. */
#include "cuda_testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cuda_test_replica(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_replica")) return 1;
    int fails = 0;
    char name[96];
    const size_t n = 100003;
    float *src = tu_alloc(n), *dst = tu_alloc(n);
    tu_fill(src, n, seed, -1.f, 1.f);
    tu_fill(dst, n, seed, -1.f, 1.f);
    float *d_src = tu_cuda_upload(src, n), *d_dst = tu_cuda_upload(dst, n);
    const hyfi_slice_args cuts[] = {{50001, 0, 50002}, {50002, 50001, 0}, {0, 7, 3}};
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        hyfi_copy_slice_cpu(dst, src, &cuts[k]);
        int rc = hyfi_copy_slice_cuda(&env, d_dst, d_src, &cuts[k]);
        snprintf(name, sizeof name, "copy_slice cuda/cpu %zu from %zu to %zu", cuts[k].count,
                 cuts[k].src_off, cuts[k].dst_off);
        fails += tu_cuda_check(name, rc, d_dst, dst, n, env.stream);
    }
    cudaFree(d_src), cudaFree(d_dst);
    free(src), free(dst);
    const size_t c = 4099;
    for (int R = 2; R <= 4; R++) {
        float *x = tu_alloc(c), *r0 = tu_alloc(c), *reps = tu_alloc(c * (size_t)R);
        tu_fill(x, c, seed, 0.f, 2.f);
        tu_fill(r0, c, seed, 0.f, 2.f);
        tu_fill(reps, c * (size_t)R, seed, 0.f, 2.f);
        float *d_x = tu_cuda_upload(x, c), *d_r0 = tu_cuda_upload(r0, c);
        float *d_reps = tu_cuda_upload(reps, c * (size_t)R);
        const float *h_r[HYFI_RCOMB_MAX], *d_r[HYFI_RCOMB_MAX];
        for (int k = 0; k < R - 1; k++) h_r[k] = reps + (size_t)k * c, d_r[k] = d_reps + (size_t)k * c;
        hyfi_rcomb_args a = {.count = c, .nrep = R, .decay = pow(0.9, 2)};
        hyfi_running_combine_cpu(x, r0, h_r, &a);
        int rc = hyfi_running_combine_cuda(&env, d_x, d_r0, d_r, &a);
        snprintf(name, sizeof name, "running_combine cuda/cpu R=%d", R);
        fails += tu_cuda_check(name, rc, d_x, x, c, env.stream);
        cudaFree(d_x), cudaFree(d_r0), cudaFree(d_reps);
        free(x), free(r0), free(reps);
    }
    tu_cuda_close(&env, stream);
    return fails;
}
