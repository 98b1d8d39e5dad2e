/* cuda_sgd.c: CUDA SGD step vs the CPU path over 3 steps (fresh gradients
 * each step) with momentum 0 and 0.9, weight decay 0 and 5e-4, sizes 1, 17
 * and 1000003, and momentum 0 with v == NULL. Called by tests/test_cuda_ops.c
 * when a GPU exists; returns the number of failures. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sc_case(hyfi_cuda_env *env, size_t n, float mom, float wd, int null_v, uint64_t *seed)
{
    int fails = 0;
    char name[128];
    hyfi_sgd_args a = {n, 0.05f, mom, wd};
    float *w = tu_alloc(n), *v = tu_alloc(n), *g = tu_alloc(n); /* v starts at zero */
    tu_fill(w, n, seed, -1.0f, 1.0f);
    float *d_w = tu_cuda_upload(w, n), *d_v = tu_cuda_upload(v, n), *d_g = tu_cuda_zeros(n),
          *d_n = tu_cuda_zeros(2);
    if (!d_w || !d_v || !d_g || !d_n) {
        tu_check(1, "cuda_sgd: cudaMalloc");
        fails++;
        goto out;
    }
    for (int step = 1; step <= 3; step++) {
        tu_fill(g, n, seed, -1.0f, 1.0f);
        tu_cuda_copy_in(d_g, g, n);
        float nrm[2];
        hyfi_sgd_update_cpu(w, null_v ? NULL : v, nrm, g, &a);
        int rc = hyfi_sgd_update_cuda(env, d_w, null_v ? NULL : d_v, d_n, d_g, &a);
        snprintf(name, sizeof name, "sgd norms cuda/cpu n=%zu mom=%g wd=%g step %d", n,
                 (double)mom, (double)wd, step);
        fails += tu_cuda_check(name, rc, d_n, nrm, 2, env->stream);
        snprintf(name, sizeof name, "sgd w cuda/cpu n=%zu mom=%g wd=%g%s step %d", n,
                 (double)mom, (double)wd, null_v ? " v=NULL" : "", step);
        fails += tu_cuda_check(name, rc, d_w, w, n, env->stream);
        if (!null_v) {
            snprintf(name, sizeof name, "sgd v cuda/cpu n=%zu mom=%g wd=%g step %d", n,
                     (double)mom, (double)wd, step);
            fails += tu_cuda_check(name, rc, d_v, v, n, env->stream);
        }
    }
out:
    cudaFree(d_w); cudaFree(d_v); cudaFree(d_g); cudaFree(d_n);
    free(w); free(v); free(g);
    return fails;
}

int cuda_test_sgd(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_sgd")) return 1;
    static const size_t sizes[] = {1, 17, 1000003};
    static const float moms[] = {0.0f, 0.9f}, wds[] = {0.0f, 5e-4f};
    int fails = 0;
    for (size_t s = 0; s < 3; s++)
        for (int m = 0; m < 2; m++)
            for (int d = 0; d < 2; d++) fails += sc_case(&env, sizes[s], moms[m], wds[d], 0, seed);
    fails += sc_case(&env, 17, 0.0f, 5e-4f, 1, seed);
    tu_cuda_close(&env, stream);
    return fails;
}
