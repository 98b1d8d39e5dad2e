// fc_cuda.cu: CUDA path of the fully connected layer: cuBLAS SGEMM for the
// three products, own kernels for the bias add and the bias gradient.
//
// Row-major through column-major cuBLAS: a row-major (R, C) matrix M is, to
// cuBLAS, the column-major (C, R) matrix M^T with leading dimension C. So each
// row-major product Z = P Q is computed as the column-major Z^T = Q^T P^T,
// i.e. the operands swap places and every leading dimension is the row-major
// row length:
//   forward      y (N,out) = x (N,in) w^T        ->  y^T (out,N) = w (out,in) . x^T
//                  sgemm(T, N, m=out, n=N,  k=in,  A=w  lda=in, B=x  ldb=in,  C=y  ldc=out)
//                  (w's buffer is col-major (in,out) = w^T, transposed back by op T)
//   data         dx (N,in) = dy (N,out) w (out,in) ->  dx^T (in,N) = w^T . dy^T
//                  sgemm(N, N, m=in,  n=N,  k=out, A=w  lda=in, B=dy ldb=out, C=dx ldc=in)
//   weight       dw (out,in) = dy^T x              ->  dw^T (in,out) = x^T (in,N) . dy (N,out)
//                  sgemm(N, T, m=in,  n=out, k=N,  A=x  lda=in, B=dy ldb=out, C=dw ldc=in)
// beta = acc accumulates (beta = 0 never reads C, so garbage/NaN there is fine).
// Math mode is the handle's default (no TF32), alpha/beta are host scalars.
// db (out) = sum_n dy[n, o]: one thread per output feature, summing down the
// batch in a fixed order (deterministic, coalesced across threads).
#include "cuda_common.h"

// y (N,out) += b (out) broadcast over rows
static __global__ void hyfi_fc_bias_kernel(float *y, const float *b, size_t total, int out)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += b[i % (size_t)out];
}

// db (out) (+)= sum over n of dy (N,out)
static __global__ void hyfi_fc_db_kernel(float *db, const float *dy, int n, int out, int acc)
{
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < out; o += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int r = 0; r < n; r++) s += dy[(size_t)r * out + o];
        db[o] = acc ? db[o] + s : s;
    }
}

extern "C" int hyfi_fc_forward_cuda(hyfi_cuda_env *env, float *y, const float *x, const float *w,
                                    const float *b, const hyfi_fc_args *a)
{
    if (a->n == 0 || a->out == 0) return 0;
    size_t total = (size_t)a->n * a->out;
    if (a->in == 0) { // empty product: y = b (or 0)
        HYFI_CUDA_CHECK(cudaMemsetAsync(y, 0, total * sizeof(float), env->stream));
    } else {
        const float one = 1.0f, zero = 0.0f;
        HYFI_CUBLAS_CHECK(cublasSetStream(env->cublas, env->stream));
        HYFI_CUBLAS_CHECK(cublasSgemm(env->cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->out, a->n, a->in,
                                      &one, w, a->in, x, a->in, &zero, y, a->out));
    }
    if (b) {
        hyfi_fc_bias_kernel<<<hyfi_cuda_blocks(total), HYFI_CUDA_THREADS, 0, env->stream>>>(
            y, b, total, a->out);
        HYFI_CUDA_LAUNCHED();
    }
    return 0;
}

extern "C" int hyfi_fc_backward_data_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                          const float *w, const hyfi_fc_args *a, int acc)
{
    if (a->n == 0 || a->in == 0) return 0;
    if (a->out == 0) {
        if (!acc)
            HYFI_CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)a->n * a->in * sizeof(float),
                                            env->stream));
        return 0;
    }
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    HYFI_CUBLAS_CHECK(cublasSetStream(env->cublas, env->stream));
    HYFI_CUBLAS_CHECK(cublasSgemm(env->cublas, CUBLAS_OP_N, CUBLAS_OP_N, a->in, a->n, a->out,
                                  &one, w, a->in, dy, a->out, &beta, dx, a->in));
    return 0;
}

extern "C" int hyfi_fc_backward_weight_cuda(hyfi_cuda_env *env, float *dw, float *db,
                                            const float *dy, const float *x,
                                            const hyfi_fc_args *a, int acc)
{
    if (a->out == 0) return 0;
    if (a->in > 0) {
        if (a->n == 0) {
            if (!acc)
                HYFI_CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)a->out * a->in * sizeof(float),
                                                env->stream));
        } else {
            const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
            HYFI_CUBLAS_CHECK(cublasSetStream(env->cublas, env->stream));
            HYFI_CUBLAS_CHECK(cublasSgemm(env->cublas, CUBLAS_OP_N, CUBLAS_OP_T, a->in, a->out,
                                          a->n, &one, x, a->in, dy, a->out, &beta, dw, a->in));
        }
    }
    if (db) {
        hyfi_fc_db_kernel<<<hyfi_cuda_blocks((size_t)a->out), HYFI_CUDA_THREADS, 0,
                            env->stream>>>(db, dy, a->n, a->out, acc);
        HYFI_CUDA_LAUNCHED();
    }
    return 0;
}
