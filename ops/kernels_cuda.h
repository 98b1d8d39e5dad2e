/* CUDA path of every op family: the same functions as ops/kernels.h with the
 * suffix _cuda, on device pointers, enqueued on env->stream without
 * synchronising (StarPU's asynchronous CUDA codelets wait on the stream).
 *
 * cuDNN and cuBLAS handles belong to one CUDA worker and are bound to its
 * stream; the engine creates them once per worker and passes them in `env`.
 * Return 0 on success, a negative value when a CUDA/cuDNN/cuBLAS call fails.
 */
#ifndef HYFI_OPS_KERNELS_CUDA_H
#define HYFI_OPS_KERNELS_CUDA_H

#include "kernels.h"
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    void *workspace;          /* per-worker scratch, grown by hyfi_cuda_workspace */
    size_t workspace_size;
} hyfi_cuda_env;

/* Device scratch of at least `bytes` for this worker (NULL on failure). Grows
 * the worker's buffer after synchronising its stream; never shrinks. */
void *hyfi_cuda_workspace(hyfi_cuda_env *env, size_t bytes);
/* Create / destroy the handles of the calling CUDA worker, bound to `stream`. */
int hyfi_cuda_env_init(hyfi_cuda_env *env, cudaStream_t stream);
void hyfi_cuda_env_fini(hyfi_cuda_env *env);

int hyfi_conv2d_forward_cuda(hyfi_cuda_env *env, float *y, const float *x, const float *w,
                             const float *b, const hyfi_conv2d_args *a);
int hyfi_conv2d_backward_data_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                   const float *w, const hyfi_conv2d_args *a, int acc);
int hyfi_conv2d_backward_weight_cuda(hyfi_cuda_env *env, float *dw, float *db,
                                     const float *dy, const float *x,
                                     const hyfi_conv2d_args *a, int acc);

int hyfi_batchnorm_forward_train_cuda(hyfi_cuda_env *env, float *y, float *mean, float *var,
                                      float *run_mean, float *run_var, const float *x,
                                      const float *gamma, const float *beta,
                                      const hyfi_batchnorm_args *a, int blk);
int hyfi_batchnorm_forward_eval_cuda(hyfi_cuda_env *env, float *y, const float *x,
                                     const float *gamma, const float *beta,
                                     const float *run_mean, const float *run_var,
                                     const hyfi_batchnorm_args *a, int blk);
int hyfi_batchnorm_backward_cuda(hyfi_cuda_env *env, float *dx, float *dgamma, float *dbeta,
                                 const float *dy, const float *x, const float *gamma,
                                 const float *y, const float *mean, const float *var,
                                 const hyfi_batchnorm_args *a, int acc, int blk);

int hyfi_relu_forward_cuda(hyfi_cuda_env *env, float *y, const float *x, size_t count);
int hyfi_relu_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy, const float *y,
                            size_t count, int acc);
int hyfi_add_forward_cuda(hyfi_cuda_env *env, float *y, const float *a, const float *b,
                          size_t count);
int hyfi_accumulate_cuda(hyfi_cuda_env *env, float *dst, const float *src, size_t count,
                         int acc);
int hyfi_fill_cuda(hyfi_cuda_env *env, float *dst, float value, size_t count);

int hyfi_maxpool_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                              const hyfi_pool_args *a);
int hyfi_maxpool_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy, const float *x,
                               const hyfi_pool_args *a, int acc);
int hyfi_avgpool_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                              const hyfi_pool_args *a);
int hyfi_avgpool_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                               const hyfi_pool_args *a, int acc);
int hyfi_gap_forward_cuda(hyfi_cuda_env *env, float *y, const float *x, const hyfi_pool_args *a);
int hyfi_gap_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                           const hyfi_pool_args *a, int acc);

int hyfi_concat_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                             const hyfi_concat_args *a);
int hyfi_concat_backward_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                              const hyfi_concat_args *a, int acc);

int hyfi_fc_forward_cuda(hyfi_cuda_env *env, float *y, const float *x, const float *w,
                         const float *b, const hyfi_fc_args *a);
int hyfi_fc_backward_data_cuda(hyfi_cuda_env *env, float *dx, const float *dy, const float *w,
                               const hyfi_fc_args *a, int acc);
int hyfi_fc_backward_weight_cuda(hyfi_cuda_env *env, float *dw, float *db, const float *dy,
                                 const float *x, const hyfi_fc_args *a, int acc);

int hyfi_xent_forward_cuda(hyfi_cuda_env *env, float *loss, float *prob, const float *logits,
                           const int32_t *labels, const hyfi_xent_args *a);
int hyfi_xent_backward_cuda(hyfi_cuda_env *env, float *dlogits, const float *prob,
                            const int32_t *labels, const float *dloss,
                            const hyfi_xent_args *a, int acc);

int hyfi_copy_slice_cuda(hyfi_cuda_env *env, float *dst, const float *src,
                         const hyfi_slice_args *a);
/* r: R - 1 device pointers; at most HYFI_RCOMB_MAX of them. */
int hyfi_running_combine_cuda(hyfi_cuda_env *env, float *x, const float *r0,
                              const float *const *r, const hyfi_rcomb_args *a);
int hyfi_sgd_update_cuda(hyfi_cuda_env *env, float *w, float *v, float *norms, const float *g,
                         const hyfi_sgd_args *a);

int hyfi_tile_assemble_cuda(hyfi_cuda_env *env, float *dst, const float *const *src,
                            const hyfi_tile_args *a);
int hyfi_tile_scatter_cuda(hyfi_cuda_env *env, float *const *dst, const float *src,
                           const hyfi_tile_args *a, unsigned acc_mask);

int hyfi_bn_stats_cuda(hyfi_cuda_env *env, double *part, const float *x,
                       const hyfi_batchnorm_args *a);
int hyfi_bn_combine_cuda(hyfi_cuda_env *env, float *mean, float *var, float *run_mean,
                         float *run_var, const double *const *parts,
                         const hyfi_bn_combine_args *a);
int hyfi_bn_bwd_stats_cuda(hyfi_cuda_env *env, double *part, const float *dy, const float *x,
                           const float *mean, const hyfi_batchnorm_args *a);
int hyfi_bn_bwd_combine_cuda(hyfi_cuda_env *env, float *tot, float *dgamma, float *dbeta,
                             const double *const *parts, const float *var,
                             const hyfi_bn_combine_args *a, int acc);
int hyfi_bn_bwd_apply_cuda(hyfi_cuda_env *env, float *dx, const float *dy, const float *x,
                           const float *gamma, const float *mean, const float *var,
                           const float *tot, double total, const hyfi_batchnorm_args *a,
                           int acc);

#ifdef __cplusplus
}
#endif
#endif
