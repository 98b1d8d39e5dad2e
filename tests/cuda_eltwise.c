/* cuda_eltwise.c: CUDA element-wise kernels vs the CPU path, sizes 1, 17 and
 * 1000003, acc 0 and 1. Called by tests/test_cuda_ops.c when a GPU exists;
 * returns the number of failures. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tu_cuda_check of the output `dout`, named "<label> cuda/cpu n=<n>". */
static int elt_check(const char *label, int rc, const float *dout, const float *want, size_t n,
                     cudaStream_t s)
{
    char name[96];
    snprintf(name, sizeof name, "%s cuda/cpu n=%zu", label, n);
    return tu_cuda_check(name, rc, dout, want, n, s);
}

static int elt_one_size(hyfi_cuda_env *env, size_t n, uint64_t *seed)
{
    int fails = 0;
    float *x = tu_alloc(n), *b = tu_alloc(n), *base = tu_alloc(n), *y = tu_alloc(n);
    float *want = tu_alloc(n);
    tu_fill(x, n, seed, -1.0f, 1.0f);
    tu_fill(b, n, seed, -1.0f, 1.0f);
    tu_fill(base, n, seed, -1.0f, 1.0f);
    hyfi_relu_forward_cpu(y, x, n);
    float *dx = tu_cuda_upload(x, n), *db = tu_cuda_upload(b, n), *dy = tu_cuda_upload(y, n);
    float *dout = tu_cuda_upload(base, n);
    if (!dx || !db || !dy || !dout) {
        tu_check(1, "cuda_eltwise: cudaMalloc");
        fails++;
        goto out;
    }

#define ELT_CHECK(label, rc_expr) \
    (fails += elt_check(label, (rc_expr), dout, want, n, env->stream))

    /* relu forward */
    hyfi_relu_forward_cpu(want, x, n);
    ELT_CHECK("relu_forward", hyfi_relu_forward_cuda(env, dout, dx, n));

    /* relu backward (dy = b, y = relu(x)), acc 0 and 1 */
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(want, base, n * sizeof(float));
        hyfi_relu_backward_cpu(want, b, y, n, acc);
        tu_cuda_copy_in(dout, base, n);
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
        tu_cuda_copy_in(dout, base, n);
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
    free(x); free(b); free(base); free(y); free(want);
    return fails;
}

int cuda_test_eltwise(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_eltwise")) return 1;
    static const size_t sizes[] = {1, 17, 1000003};
    int fails = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        fails += elt_one_size(&env, sizes[s], seed);
    tu_cuda_close(&env, stream);
    return fails;
}
