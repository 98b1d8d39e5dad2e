/* cuda_xent.c: CUDA softmax cross-entropy vs the CPU path: K = 10, 3 and
 * 1000, N = 1, 7 and 300, and a batch with bad labels (skipped; the CUDA
 * forward cannot return -2); loss, probabilities, and the backward with acc 0
 * and 1. Called by tests/test_cuda_ops.c when a GPU exists; returns the number
 * of failures. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int xc_case(hyfi_cuda_env *env, int n, int k, int bad_labels, uint64_t *seed)
{
    int fails = 0;
    char name[128], s[64];
    hyfi_xent_args a = {n, k, 1.0f / (float)n};
    snprintf(s, sizeof s, "N=%d K=%d%s", n, k, bad_labels ? " bad labels" : "");
    size_t nz = (size_t)n * k;
    float *z = tu_alloc(nz), *p = tu_alloc(nz), *base = tu_alloc(nz), *want = tu_alloc(nz);
    int32_t *labels = calloc((size_t)n, sizeof(int32_t));
    if (!labels) exit(99);
    tu_fill(z, nz, seed, -3.0f, 3.0f);
    tu_fill(base, nz, seed, -1.0f, 1.0f);
    for (int i = 0; i < n; i++) labels[i] = tu_randint(seed, 0, k - 1);
    if (bad_labels) {
        labels[0] = k;
        if (n > 3) labels[3] = -5;
    }
    float dloss = 0.7f, loss;
    hyfi_xent_forward_cpu(&loss, p, z, labels, &a);

    float *d_z = tu_cuda_upload(z, nz), *d_p = tu_cuda_upload(base, nz);
    float *d_g = tu_cuda_upload(base, nz), *d_dloss = tu_cuda_upload(&dloss, 1);
    float *d_loss = tu_cuda_upload(&dloss, 1);
    int32_t *d_labels = tu_cuda_upload_bytes(labels, (size_t)n * sizeof(int32_t));
    if (!d_z || !d_p || !d_g || !d_dloss || !d_loss || !d_labels) {
        tu_check(1, "cuda_xent: cudaMalloc");
        fails++;
        goto out;
    }
    int rc = hyfi_xent_forward_cuda(env, d_loss, d_p, d_z, d_labels, &a);
    snprintf(name, sizeof name, "xent_forward loss cuda/cpu %s", s);
    fails += tu_cuda_check(name, rc, d_loss, &loss, 1, env->stream);
    snprintf(name, sizeof name, "xent_forward prob cuda/cpu %s", s);
    fails += tu_cuda_check(name, rc, d_p, p, nz, env->stream);

    /* Backward from the CPU probabilities, so that only the backward is tested. */
    tu_cuda_copy_in(d_p, p, nz);
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(want, base, nz * sizeof(float));
        hyfi_xent_backward_cpu(want, p, labels, &dloss, &a, acc);
        tu_cuda_copy_in(d_g, base, nz);
        snprintf(name, sizeof name, "xent_backward cuda/cpu %s acc=%d", s, acc);
        rc = hyfi_xent_backward_cuda(env, d_g, d_p, d_labels, d_dloss, &a, acc);
        fails += tu_cuda_check(name, rc, d_g, want, nz, env->stream);
    }
out:
    cudaFree(d_z); cudaFree(d_p); cudaFree(d_g); cudaFree(d_dloss); cudaFree(d_loss);
    cudaFree(d_labels);
    free(z); free(p); free(base); free(want); free(labels);
    return fails;
}

int cuda_test_xent(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_xent")) return 1;
    int fails = 0;
    fails += xc_case(&env, 1, 10, 0, seed);
    fails += xc_case(&env, 7, 10, 0, seed);
    fails += xc_case(&env, 1, 3, 0, seed);
    fails += xc_case(&env, 7, 3, 0, seed);
    fails += xc_case(&env, 300, 1000, 0, seed);
    fails += xc_case(&env, 7, 10, 1, seed);
    tu_cuda_close(&env, stream);
    return fails;
}
