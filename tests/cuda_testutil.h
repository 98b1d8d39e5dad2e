/* Helpers shared by the CUDA kernel tests (tests/cuda_*.c): device copies of
 * host arrays, the check "kernel status, stream, copy back, compare with the
 * CPU result", and the stream + hyfi_cuda_env every family runs on. Checks are
 * counted with tu_check, like the rest of testutil.h. */
#ifndef HYFI_TESTS_CUDA_TESTUTIL_H
#define HYFI_TESTS_CUDA_TESTUTIL_H

#include "kernels_cuda.h"
#include "testutil.h"

#include <stddef.h>

/* Device copy of `n` host floats / of `bytes` host bytes (NULL on failure;
 * n == 0 still allocates one element, so that the pointer is not NULL). */
float *tu_cuda_upload(const float *h, size_t n);
void *tu_cuda_upload_bytes(const void *h, size_t bytes);
/* Device array of `n` zeros (NULL on failure). */
float *tu_cuda_zeros(size_t n);
/* Overwrite an existing device array with `n` host floats; 0 on success. */
int tu_cuda_copy_in(float *d, const float *h, size_t n);

/* One check: `rc` (the kernel's status) must be 0, stream `s` must
 * synchronise, the `n` floats at device `d` must copy back and match `want`
 * within `tol` (TU_TOL_CUDA_VS_CPU for tu_cuda_check). Prints the verdict,
 * counts it with tu_check; returns 0 on pass, 1 on failure. */
int tu_cuda_check_tol(const char *name, int rc, const float *d, const float *want, size_t n,
                      cudaStream_t s, tu_tol tol);
int tu_cuda_check(const char *name, int rc, const float *d, const float *want, size_t n,
                  cudaStream_t s);

/* Create a stream and the cuDNN/cuBLAS handles bound to it. On failure counts
 * "<who>: stream" or "<who>: env" as a failed check, releases what it made and
 * returns 1; 0 on success. tu_cuda_close releases both. */
int tu_cuda_open(hyfi_cuda_env *env, cudaStream_t *s, const char *who);
void tu_cuda_close(hyfi_cuda_env *env, cudaStream_t s);

#endif
