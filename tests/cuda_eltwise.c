/* cuda_eltwise.c: CUDA element-wise kernels vs the CPU path, sizes 1, 17 and
 * 1000003, acc 0 and 1. Called by tests/test_cuda_ops.c when a GPU exists;
 * returns the number of failures. */
#include "kernels_cuda.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Device copy of a host array (NULL on failure). */
static float *elt_upload(const float *h, size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* Wait for the stream, copy back; nonzero on any CUDA error. */
static int elt_download(float *h, const float *d, size_t n, cudaStream_t s)
{
    if (cudaStreamSynchronize(s) != cudaSuccess) return 1;
    return cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess;
}

static int elt_one_size(hyfi_cuda_env *env, size_t n, uint64_t *seed)
{
    int fails = 0;
    char name[96];
    float *x = tu_alloc(n), *b = tu_alloc(n), *base = tu_alloc(n), *y = tu_alloc(n);
    float *want = tu_alloc(n), *got = tu_alloc(n);
    tu_fill(x, n, seed, -1.0f, 1.0f);
    tu_fill(b, n, seed, -1.0f, 1.0f);
    tu_fill(base, n, seed, -1.0f, 1.0f);
    hyfi_relu_forward_cpu(y, x, n);
    float *dx = elt_upload(x, n), *db = elt_upload(b, n), *dy = elt_upload(y, n);
    float *dout = elt_upload(base, n);
    if (!dx || !db || !dy || !dout) {
        tu_check(1, "cuda_eltwise: cudaMalloc");
        fails++;
        goto out;
    }

#define ELT_CHECK(label, rc_expr)                                                   \
    do {                                                                            \
        int rc_ = (rc_expr);                                                        \
        int bad_ = rc_ != 0 || elt_download(got, dout, n, env->stream);             \
        snprintf(name, sizeof name, "%s cuda/cpu n=%zu", label, n);                 \
        if (bad_) printf("FAIL %s: rc %d\n", name, rc_);                            \
        else bad_ = tu_compare(name, got, want, n, TU_TOL_CUDA_VS_CPU);             \
        tu_check(bad_, name);                                                       \
        fails += bad_;                                                              \
    } while (0)

    /* relu forward */
    hyfi_relu_forward_cpu(want, x, n);
    ELT_CHECK("relu_forward", hyfi_relu_forward_cuda(env, dout, dx, n));

    /* relu backward (dy = b, y = relu(x)), acc 0 and 1 */
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(want, base, n * sizeof(float));
        hyfi_relu_backward_cpu(want, b, y, n, acc);
        cudaMemcpy(dout, base, n * sizeof(float), cudaMemcpyHostToDevice);
        ELT_CHECK(acc ? "relu_backward acc=1" : "relu_backward acc=0",
                  hyfi_relu_backward_cuda(env, dout, db, dy, n, acc));
    }

    /* add */
    hyfi_add_forward_cpu(want, x, b, n);
    ELT_CHECK("add_forward", hyfi_add_forward_cuda(env, dout, dx, db, n));

    /* accumulate, acc 0 and 1 */
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(want, base, n * sizeof(float));
        hyfi_accumulate_cpu(want, x, n, acc);
        cudaMemcpy(dout, base, n * sizeof(float), cudaMemcpyHostToDevice);
        ELT_CHECK(acc ? "accumulate acc=1" : "accumulate acc=0",
                  hyfi_accumulate_cuda(env, dout, dx, n, acc));
    }

    /* fill */
    hyfi_fill_cpu(want, 0.625f, n);
    ELT_CHECK("fill", hyfi_fill_cuda(env, dout, 0.625f, n));
#undef ELT_CHECK

out:
    cudaFree(dx);
    cudaFree(db);
    cudaFree(dy);
    cudaFree(dout);
    free(x); free(b); free(base); free(y); free(want); free(got);
    return fails;
}

int cuda_test_eltwise(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (cudaStreamCreate(&stream) != cudaSuccess) {
        tu_check(1, "cuda_eltwise: stream");
        return 1;
    }
    if (hyfi_cuda_env_init(&env, stream) != 0) {
        tu_check(1, "cuda_eltwise: env");
        hyfi_cuda_env_fini(&env);
        cudaStreamDestroy(stream);
        return 1;
    }
    static const size_t sizes[] = {1, 17, 1000003};
    int fails = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        fails += elt_one_size(&env, sizes[s], seed);
    hyfi_cuda_env_fini(&env);
    cudaStreamDestroy(stream);
    return fails;
}
