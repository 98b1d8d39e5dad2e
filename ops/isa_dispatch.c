/* isa_dispatch.c: the public names of the element-wise and batch-norm kernels, each
 * calling its x86-64-v4 (AVX-512) build where the CPU and the OS have it,
 * else its baseline build (ops/isa.h says why). The choice is made once per
 * process (the element-wise builds give the same bits; batch norm's sums follow
 * the vector width). Compiled only where meson builds
 * the two variants (x86-64 with a compiler that knows x86-64-v4). */
#include "kernels.h"

#include <pthread.h>
#include <stdint.h>

/* name, parameters, arguments (every one returns int) */
#define HYFI_ISA_FUNCS(X)                                                                        \
    X(hyfi_bf16_round_cpu, (float *x, size_t count), (x, count))                                 \
    X(hyfi_bf16_round_serial, (float *x, size_t count), (x, count))                              \
    X(hyfi_bf16_round_copy_cpu, (float *out, const float *x, size_t count), (out, x, count))     \
    X(hyfi_bf16_to_f32_cpu, (float *out, const uint16_t *in, size_t count), (out, in, count))    \
    X(hyfi_f32_to_bf16_cpu, (uint16_t *out, const float *in, size_t count), (out, in, count))    \
    X(hyfi_bf16_to_f32_serial, (float *out, const uint16_t *in, size_t count), (out, in, count)) \
    X(hyfi_f32_to_bf16_serial, (uint16_t *out, const float *in, size_t count), (out, in, count)) \
    X(hyfi_relu_forward_cpu, (float *y, const float *x, size_t count), (y, x, count))            \
    X(hyfi_relu_backward_cpu, (float *dx, const float *dy, const float *y, size_t count, int acc), \
      (dx, dy, y, count, acc))                                                                   \
    X(hyfi_add_forward_cpu, (float *y, const float *a, const float *b, size_t count),            \
      (y, a, b, count))                                                                          \
    X(hyfi_accumulate_cpu, (float *dst, const float *src, size_t count, int acc),                \
      (dst, src, count, acc))                                                                    \
    X(hyfi_fill_cpu, (float *dst, float value, size_t count), (dst, value, count))               \
    X(hyfi_relu_forward_bf16, (uint16_t *y, const uint16_t *x, size_t count), (y, x, count))     \
    X(hyfi_relu_backward_bf16,                                                                   \
      (uint16_t *dx, const uint16_t *dy, const uint16_t *y, size_t count, int acc),              \
      (dx, dy, y, count, acc))                                                                   \
    X(hyfi_add_forward_bf16, (uint16_t *y, const uint16_t *a, const uint16_t *b, size_t count),  \
      (y, a, b, count))                                                                          \
    X(hyfi_accumulate_bf16, (uint16_t *dst, const uint16_t *src, size_t count, int acc),         \
      (dst, src, count, acc))                                                                    \
    X(hyfi_accumulate_f32_bf16, (uint16_t *dst, const float *src, size_t count),                 \
      (dst, src, count))                                                                         \
    X(hyfi_accumulate_n_bf16,                                                                    \
      (uint16_t *dst, const uint16_t *const *src, int nsrc, size_t count, int acc),              \
      (dst, src, nsrc, count, acc))                                                              \
    X(hyfi_fill_bf16, (uint16_t *dst, float value, size_t count), (dst, value, count))           \
    X(hyfi_maxpool_forward_bf16, (uint16_t *y, const uint16_t *x, const hyfi_pool_args *a),      \
      (y, x, a))                                                                                 \
    X(hyfi_avgpool_forward_bf16, (uint16_t *y, const uint16_t *x, const hyfi_pool_args *a),      \
      (y, x, a))                                                                                 \
    X(hyfi_gap_forward_bf16, (uint16_t *y, const uint16_t *x, const hyfi_pool_args *a),          \
      (y, x, a))                                                                                 \
    X(hyfi_maxpool_backward_bf16,                                                                \
      (uint16_t *dx, const uint16_t *dy, const uint16_t *x, const hyfi_pool_args *a, int acc),   \
      (dx, dy, x, a, acc))                                                                       \
    X(hyfi_avgpool_backward_bf16,                                                                \
      (uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a, int acc), (dx, dy, a, acc))    \
    X(hyfi_gap_backward_bf16, (uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a, int acc), \
      (dx, dy, a, acc))                                                                          \
    BN(X, _cpu, float)                                                                            \
    BN(X, _bf16, uint16_t)

/* batch norm on float32 (_cpu) and bf16 (_bf16) storage */
#define BN(X, sfx, T)                                                                             \
    X(hyfi_batchnorm_forward_train##sfx,                                                         \
      (T * y, float *mean, float *var, float *run_mean, float *run_var, const T *x,              \
       const float *gamma, const float *beta, const hyfi_batchnorm_args *a, int blk),            \
      (y, mean, var, run_mean, run_var, x, gamma, beta, a, blk))                                 \
    X(hyfi_batchnorm_forward_eval##sfx,                                                          \
      (T * y, const T *x, const float *gamma, const float *beta, const float *run_mean,          \
       const float *run_var, const hyfi_batchnorm_args *a, int blk),                             \
      (y, x, gamma, beta, run_mean, run_var, a, blk))                                            \
    X(hyfi_batchnorm_backward##sfx,                                                              \
      (T * dx, float *dgamma, float *dbeta, const T *dy, const T *x, const float *gamma,         \
       const T *y, const float *mean, const float *var, const hyfi_batchnorm_args *a, int acc,   \
       int blk),                                                                                 \
      (dx, dgamma, dbeta, dy, x, gamma, y, mean, var, a, acc, blk))

/* whether this CPU and its OS run x86-64-v4 code (AVX-512 F, BW, CD, DQ, VL) */
static int g_v4;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    __builtin_cpu_init();
    g_v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}

static int v4(void)
{
    pthread_once(&g_once, detect);
    return g_v4;
}

int hyfi_isa_avx512(void) { return v4(); }

#define HYFI_ISA_DISPATCH(name, params, args)                                                    \
    int name##_base params;                                                                      \
    int name##_v4 params;                                                                        \
    int name params { return v4() ? name##_v4 args : name##_base args; }
HYFI_ISA_FUNCS(HYFI_ISA_DISPATCH)
