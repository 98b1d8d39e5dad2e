/* cuda_testutil.c: see cuda_testutil.h. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>

void *tu_cuda_upload_bytes(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : sizeof(float)) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

float *tu_cuda_upload(const float *h, size_t n)
{
    return tu_cuda_upload_bytes(h, n * sizeof(float));
}

float *tu_cuda_zeros(size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)) != cudaSuccess) return NULL;
    if (cudaMemset(d, 0, (n ? n : 1) * sizeof(float)) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

int tu_cuda_copy_in(float *d, const float *h, size_t n)
{
    return cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess;
}

int tu_cuda_check_tol(const char *name, int rc, const float *d, const float *want, size_t n,
                      cudaStream_t s, tu_tol tol)
{
    float *got = tu_alloc(n);
    cudaError_t e = cudaSuccess;
    int bad = rc != 0;
    if (!bad) {
        e = cudaStreamSynchronize(s);
        if (e == cudaSuccess) e = cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost);
        bad = e != cudaSuccess;
    }
    if (bad) printf("FAIL %s: rc %d / CUDA: %s\n", name, rc, cudaGetErrorString(e));
    else bad = tu_compare(name, got, want, n, tol);
    tu_check(bad, name);
    free(got);
    return bad;
}

int tu_cuda_check(const char *name, int rc, const float *d, const float *want, size_t n,
                  cudaStream_t s)
{
    return tu_cuda_check_tol(name, rc, d, want, n, s, TU_TOL_CUDA_VS_CPU);
}

int tu_cuda_open(hyfi_cuda_env *env, cudaStream_t *s, const char *who)
{
    char name[128];
    if (cudaStreamCreate(s) != cudaSuccess) {
        snprintf(name, sizeof name, "%s: stream", who);
        tu_check(1, name);
        return 1;
    }
    if (hyfi_cuda_env_init(env, *s) != 0) {
        snprintf(name, sizeof name, "%s: env", who);
        tu_check(1, name);
        tu_cuda_close(env, *s);
        return 1;
    }
    return 0;
}

void tu_cuda_close(hyfi_cuda_env *env, cudaStream_t s)
{
    hyfi_cuda_env_fini(env);
    cudaStreamDestroy(s);
}
