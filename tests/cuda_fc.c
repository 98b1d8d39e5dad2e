/* cuda_fc.c: CUDA fully connected layer (cuBLAS + own bias kernels) vs the CPU
 * path: in = 1, out = 10, odd batches, with and without bias; forward, and the
 * backwards with acc 0 and 1. Called by tests/test_cuda_ops.c when a GPU
 * exists; returns the number of failures. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fcc_case(hyfi_cuda_env *env, const hyfi_fc_args *a, uint64_t *seed)
{
    int fails = 0;
    char name[160], s[64];
    snprintf(s, sizeof s, "N=%d in=%d out=%d bias=%d", a->n, a->in, a->out, a->has_bias);
    size_t nx = (size_t)a->n * a->in, nw = (size_t)a->out * a->in, ny = (size_t)a->n * a->out;
    size_t nb = (size_t)a->out;
    float *x = tu_alloc(nx), *w = tu_alloc(nw), *b = tu_alloc(nb), *dy = tu_alloc(ny);
    float *bx = tu_alloc(nx), *bw = tu_alloc(nw), *bb = tu_alloc(nb);
    float *wx = tu_alloc(nx), *ww = tu_alloc(nw), *wb = tu_alloc(nb), *wy = tu_alloc(ny);
    tu_fill(x, nx, seed, -1.0f, 1.0f);
    tu_fill(w, nw, seed, -1.0f, 1.0f);
    tu_fill(b, nb, seed, -1.0f, 1.0f);
    tu_fill(dy, ny, seed, -1.0f, 1.0f);
    tu_fill(bx, nx, seed, -1.0f, 1.0f);
    tu_fill(bw, nw, seed, -1.0f, 1.0f);
    tu_fill(bb, nb, seed, -1.0f, 1.0f);
    const float *hb = a->has_bias ? b : NULL;
    float *d_x = tu_cuda_upload(x, nx), *d_w = tu_cuda_upload(w, nw);
    float *d_b = tu_cuda_upload(b, nb), *d_dy = tu_cuda_upload(dy, ny);
    float *d_y = tu_cuda_upload(wy, ny), *d_dx = tu_cuda_upload(bx, nx);
    float *d_dw = tu_cuda_upload(bw, nw), *d_db = tu_cuda_upload(bb, nb);
    if (!d_x || !d_w || !d_b || !d_dy || !d_y || !d_dx || !d_dw || !d_db) {
        tu_check(1, "cuda_fc: cudaMalloc");
        fails++;
        goto out;
    }

    hyfi_fc_forward_cpu(wy, x, w, hb, a);
    snprintf(name, sizeof name, "fc_forward cuda/cpu %s", s);
    fails += tu_cuda_check(name, hyfi_fc_forward_cuda(env, d_y, d_x, d_w, hb ? d_b : NULL, a),
                           d_y, wy, ny, env->stream);

    for (int acc = 0; acc <= 1; acc++) {
        memcpy(wx, bx, nx * sizeof(float));
        hyfi_fc_backward_data_cpu(wx, dy, w, a, acc);
        tu_cuda_copy_in(d_dx, bx, nx);
        snprintf(name, sizeof name, "fc_backward_data cuda/cpu %s acc=%d", s, acc);
        fails += tu_cuda_check(name, hyfi_fc_backward_data_cuda(env, d_dx, d_dy, d_w, a, acc),
                               d_dx, wx, nx, env->stream);

        memcpy(ww, bw, nw * sizeof(float));
        memcpy(wb, bb, nb * sizeof(float));
        hyfi_fc_backward_weight_cpu(ww, a->has_bias ? wb : NULL, dy, x, a, acc);
        tu_cuda_copy_in(d_dw, bw, nw);
        tu_cuda_copy_in(d_db, bb, nb);
        int rc = hyfi_fc_backward_weight_cuda(env, d_dw, a->has_bias ? d_db : NULL, d_dy, d_x, a,
                                              acc);
        snprintf(name, sizeof name, "fc_backward_weight dw cuda/cpu %s acc=%d", s, acc);
        fails += tu_cuda_check(name, rc, d_dw, ww, nw, env->stream);
        snprintf(name, sizeof name, "fc_backward_weight db cuda/cpu %s acc=%d", s, acc);
        fails += tu_cuda_check(name, rc, d_db, wb, nb, env->stream);
    }

out:
    cudaFree(d_x); cudaFree(d_w); cudaFree(d_b); cudaFree(d_dy); cudaFree(d_y);
    cudaFree(d_dx); cudaFree(d_dw); cudaFree(d_db);
    free(x); free(w); free(b); free(dy); free(bx); free(bw); free(bb);
    free(wx); free(ww); free(wb); free(wy);
    return fails;
}

int cuda_test_fc(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_fc")) return 1;
    static const hyfi_fc_args shapes[] = {
        {1, 1, 10, 1}, {7, 1, 10, 0}, {3, 3 * 7 * 5, 10, 1}, {7, 17, 3, 1},
        {33, 128, 20, 0}, {129, 1000, 37, 1},
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        fails += fcc_case(&env, &shapes[i], seed);
    tu_cuda_close(&env, stream);
    return fails;
}
