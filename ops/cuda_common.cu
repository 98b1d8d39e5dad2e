// Per-worker CUDA environment: cuDNN and cuBLAS handles bound to the worker's
// stream, and a scratch buffer that grows on demand. See kernels_cuda.h.
#include "cuda_common.h"

extern "C" int hyfi_cuda_env_init(hyfi_cuda_env *env, cudaStream_t stream)
{
    env->stream = stream;
    env->workspace = nullptr;
    env->workspace_size = 0;
    env->cudnn = nullptr;
    env->cublas = nullptr;
    HYFI_CUDNN_CHECK(cudnnCreate(&env->cudnn));
    HYFI_CUDNN_CHECK(cudnnSetStream(env->cudnn, stream));
    HYFI_CUBLAS_CHECK(cublasCreate(&env->cublas));
    HYFI_CUBLAS_CHECK(cublasSetStream(env->cublas, stream));
    return 0;
}

extern "C" void hyfi_cuda_env_fini(hyfi_cuda_env *env)
{
    if (env->workspace) {
        cudaStreamSynchronize(env->stream);
        cudaFree(env->workspace);
    }
    if (env->cudnn) cudnnDestroy(env->cudnn);
    if (env->cublas) cublasDestroy(env->cublas);
    env->workspace = nullptr;
    env->workspace_size = 0;
    env->cudnn = nullptr;
    env->cublas = nullptr;
}

extern "C" void *hyfi_cuda_workspace(hyfi_cuda_env *env, size_t bytes)
{
    if (bytes <= env->workspace_size) return env->workspace;
    if (env->workspace) {
        if (cudaStreamSynchronize(env->stream) != cudaSuccess) return nullptr;
        cudaFree(env->workspace);
        env->workspace = nullptr;
        env->workspace_size = 0;
    }
    size_t want = bytes + bytes / 4; // headroom so that shapes growing a little do not reallocate
    if (cudaMalloc(&env->workspace, want) != cudaSuccess) {
        env->workspace = nullptr;
        return nullptr;
    }
    env->workspace_size = want;
    return env->workspace;
}
