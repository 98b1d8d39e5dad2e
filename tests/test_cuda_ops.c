/* CUDA kernels of every op family against the CPU kernels, on the first GPU.
 * Exits 77 (skipped) when no CUDA device is usable. */
#include "kernels_cuda.h"
#include "testutil.h"

#include <stdio.h>

int cuda_test_conv2d(uint64_t *seed);
int cuda_test_batchnorm(uint64_t *seed);
int cuda_test_pool(uint64_t *seed);
int cuda_test_eltwise(uint64_t *seed);
int cuda_test_concat(uint64_t *seed);
int cuda_test_fc(uint64_t *seed);
int cuda_test_xent(uint64_t *seed);
int cuda_test_sgd(uint64_t *seed);
int cuda_test_tile(uint64_t *seed);
int cuda_test_replica(uint64_t *seed);

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("skip: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    uint64_t seed = 2024;
    int failures = 0;
    failures += cuda_test_conv2d(&seed);
    failures += cuda_test_batchnorm(&seed);
    failures += cuda_test_pool(&seed);
    failures += cuda_test_eltwise(&seed);
    failures += cuda_test_concat(&seed);
    failures += cuda_test_tile(&seed);
    failures += cuda_test_fc(&seed);
    failures += cuda_test_xent(&seed);
    failures += cuda_test_sgd(&seed);
    failures += cuda_test_replica(&seed);
    printf("%d CUDA comparisons failed\n", failures);
    int rc = tu_finish();
    return failures ? 1 : rc;
}
