/* cuda_sgd.c: CUDA SGD step vs the CPU path over 3 steps (fresh gradients
 * each step) with momentum 0 and 0.9, weight decay 0 and 5e-4, sizes 1, 17
 * and 1000003, and momentum 0 with v == NULL. Called by tests/test_cuda_ops.c
 * when a GPU exists; returns the number of failures. */
#include "kernels_cuda.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Synchronise, copy back, compare with `want`; 1 on failure. */
static int sc_check(const char *name, int rc, const float *d, const float *want, size_t n,
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

static int sc_case(hyfi_cuda_env *env, size_t n, float mom, float wd, int null_v, uint64_t *seed)
{
    int fails = 0;
    char name[128];
    hyfi_sgd_args a = {n, 0.05f, mom, wd};
    float *w = tu_alloc(n), *v = tu_alloc(n), *g = tu_alloc(n); /* v starts at zero */
    float *d_w = NULL, *d_v = NULL, *d_g = NULL;
    tu_fill(w, n, seed, -1.0f, 1.0f);
    if (cudaMalloc((void **)&d_w, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&d_v, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&d_g, n * sizeof(float)) != cudaSuccess) {
        tu_check(1, "cuda_sgd: cudaMalloc");
        fails++;
        goto out;
    }
    cudaMemcpy(d_w, w, n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(d_v, v, n * sizeof(float), cudaMemcpyHostToDevice);
    for (int step = 1; step <= 3; step++) {
        tu_fill(g, n, seed, -1.0f, 1.0f);
        cudaMemcpy(d_g, g, n * sizeof(float), cudaMemcpyHostToDevice);
        hyfi_sgd_update_cpu(w, null_v ? NULL : v, g, &a);
        int rc = hyfi_sgd_update_cuda(env, d_w, null_v ? NULL : d_v, d_g, &a);
        snprintf(name, sizeof name, "sgd w cuda/cpu n=%zu mom=%g wd=%g%s step %d", n,
                 (double)mom, (double)wd, null_v ? " v=NULL" : "", step);
        fails += sc_check(name, rc, d_w, w, n, env->stream);
        if (!null_v) {
            snprintf(name, sizeof name, "sgd v cuda/cpu n=%zu mom=%g wd=%g step %d", n,
                     (double)mom, (double)wd, step);
            fails += sc_check(name, rc, d_v, v, n, env->stream);
        }
    }
out:
    cudaFree(d_w); cudaFree(d_v); cudaFree(d_g);
    free(w); free(v); free(g);
    return fails;
}

int cuda_test_sgd(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        tu_check(1, "cuda_sgd: stream");
        return 1;
    }
    if (hyfi_cuda_env_init(&env, stream) != 0) {
        tu_check(1, "cuda_sgd: env");
        hyfi_cuda_env_fini(&env);
        cudaStreamDestroy(stream);
        return 1;
    }
    static const size_t sizes[] = {1, 17, 1000003};
    static const float moms[] = {0.0f, 0.9f}, wds[] = {0.0f, 5e-4f};
    int fails = 0;
    for (size_t s = 0; s < 3; s++)
        for (int m = 0; m < 2; m++)
            for (int d = 0; d < 2; d++) fails += sc_case(&env, sizes[s], moms[m], wds[d], 0, seed);
    fails += sc_case(&env, 17, 0.0f, 5e-4f, 1, seed);
    hyfi_cuda_env_fini(&env);
    cudaStreamDestroy(stream);
    return fails;
}
