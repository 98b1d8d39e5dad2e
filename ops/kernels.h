/* Kernel interface of every op family: argument structs and the functions of
 * the three paths that implement them.
 *
 *   <op>_<pass>_ref   naive loops, the specification and the test oracle (ops/<op>_ref.c)
 *   <op>_<pass>_cpu   CPU implementation, oneDNN where it has the primitive (ops/<op>_cpu.c)
 *   <op>_<pass>_cuda  cuDNN / cuBLAS / own kernels on a stream (ops/<op>_cuda.cu,
 *                     declared in ops/kernels_cuda.h)
 *
 * Kernels know nothing of StarPU or of the graph. Conventions (llm.c style):
 * outputs first, then inputs, then the argument struct; gradients are
 * d-prefixed; every tensor is dense float32 in NCHW order unless said; the
 * comment beside each argument gives its shape.
 *
 * Accumulation: every gradient output has a flag `acc`. acc == 0 overwrites the
 * output, acc == 1 adds to what is there (dx += ...). The engine uses it when a
 * tensor feeds several ops (residual adds) and to sum weight gradients over
 * micro-batches and tiles.
 *
 * The _ref and _cpu functions return 0 on success and a negative value when a
 * library call fails (oneDNN status); they never exit. Shapes are validated by
 * the graph builder before a kernel is ever called.
 *
 * Numerical contracts shared by all paths (so that a forward on one path and
 * its backward on another agree):
 *   - batch norm saves the batch mean and the *biased* batch variance per
 *     channel; running statistics are updated with the unbiased variance,
 *     running = (1 - momentum) * running + momentum * batch (PyTorch).
 *   - max pooling routes the gradient of a window to the first maximum in
 *     row-major window order; padded positions are -inf and never chosen.
 *   - average pooling divides by the full window (count_include_pad = 1) or by
 *     the number of in-image positions (count_include_pad = 0).
 *   - softmax cross-entropy: loss = mean over the batch of -log softmax(z)[label];
 *     it saves the probabilities; the backward is scale * (p - onehot(label)).
 */
#ifndef HYFI_OPS_KERNELS_H
#define HYFI_OPS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Process-wide choices of the kernels, for measurements and tests (each 0 is
 * the measured default). Set before kernels run: hyfi_ctx_create does, from
 * hyfi_ctx_config; the op tests from their environment. */
typedef struct hyfi_kernel_config {
    int conv_algo;  /* CPU convolutions: 0 auto, 1 oneDNN's direct algorithm, 2 Winograd
                       wherever oneDNN has it, 3 auto with hyfi's GEMM weight gradient
                       wherever possible (conv2d_cpu.c) */
    int conv_plain; /* unblocked CPU convolutions: 0 plain NCHW for 1x1 stride 1, blocked
                       for the rest; 1 always plain; -1 always blocked */
    int bf16_conv;  /* bf16 CPU convolutions: 0 by CPU, 1 oneDNN's bf16 primitives,
                       -1 float32 kernels on staged copies (conv2d_cpu_bf16.c) */
    int dnnl_cache; /* 0: the oneDNN primitives cached per thread; -1: made per call */
    int cudnn_find; /* 0: cuDNN's algorithms measured (cudnnFind); -1: the heuristics' */
} hyfi_kernel_config;
void hyfi_kernel_configure(const hyfi_kernel_config *c); /* NULL: the defaults */
extern hyfi_kernel_config hyfi_kernel_settings;

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ conv2d */
typedef struct {
    int n, c_in, h, w;        /* input  (N, Cin, H, W) */
    int c_out, ho, wo;        /* output (N, Cout, Ho, Wo) */
    int kh, kw;               /* kernel */
    int sh, sw;               /* stride */
    int ph, pw;               /* zero padding, same on both sides of an axis */
    int groups;               /* Cin and Cout divisible by it; Cin == groups is depthwise */
    int has_bias;
    /* CPU only: the layout of x and dx (src_blk) and of y and dy (dst_blk):
     * 0 plain NCHW, B = 8 or 16 oneDNN's blocked nChw8c / nChw16c, element
     * (n, c, h, w) at ((n C/B + c/B) H W + h W + w) B + c % B (C a multiple of
     * B). The engine decides: hyfi_layout_plan.
     * wei_blk: the layout of w and dw (G == 1 only): 0 plain OIHW, B = 8 or 16
     * oneDNN's OIhw8i8o / OIhw16i16o, element (o, i, kh, kw) at
     * ((o/B I/B + i/B) KH KW + kh KW + kw) B B + (i % B) B + o % B (Cout and Cin
     * multiples of B): the layout oneDNN's forward and backward-weights kernels
     * use, so neither reorders the weights. */
    int src_blk, dst_blk, wei_blk;
} hyfi_conv2d_args;

/* Output size of one axis: (in + 2p - k) / s + 1. */
int hyfi_conv_out_size(int in, int k, int s, int p);

/* bf16 storage (kernels.h "bfloat16"; ops/conv2d_cpu_bf16.c): activations
 * and their gradients bf16 (uint16_t: the high halves of float32s) in the
 * layouts of the float32 calls, weights and their gradients float32; oneDNN's
 * bf16 primitives, accumulating in float32. Whether to use them for direction
 * dir (0 forward, 1 backward data, 2 backward weights) of this convolution:
 * oneDNN has a fast (not reference) bf16 kernel for it and beats its float32
 * one on this CPU (hyfi_conv2d_cpu_bf16_faster: by CPU, from measurements
 * recorded per CPU, the same in every process on it, or
 * hyfi_kernel_config.bf16_conv, hyfi-train's HYFI_BF16_CONV=native|staged;
 * given both pointers, it also times a 3x3
 * 64->64 convolution both ways, for the record). */
int hyfi_conv2d_cpu_bf16(const hyfi_conv2d_args *a, int dir, int acc);
int hyfi_conv2d_cpu_bf16_faster(double *t_bf16, double *t_f32);
/* y (N,Cout,Ho,Wo) bf16, x (N,Cin,H,W) bf16, w (Cout,Cin/G,KH,KW), b (Cout) or NULL */
int hyfi_conv2d_forward_cpu_bf16(uint16_t *y, const uint16_t *x, const float *w, const float *b,
                                 const hyfi_conv2d_args *a);
/* The convolution with the residual add after it fused (engine/layout.c):
 * y = conv(x, w, b) + r, r (N,Cout,Ho,Wo) in y's layout and storage. The
 * convolution's result is rounded to bf16 before r is added (the bf16 call,
 * and the float32 one with round_mid in a bf16 task, whose staged y is
 * rounded once more afterwards): bitwise the two ops apart. */
int hyfi_conv2d_forward_add_cpu_bf16(uint16_t *y, const uint16_t *x, const uint16_t *r,
                                     const float *w, const float *b, const hyfi_conv2d_args *a);
/* dx (N,Cin,H,W) bf16, dy (N,Cout,Ho,Wo) bf16, w (Cout,Cin/G,KH,KW) */
int hyfi_conv2d_backward_data_cpu_bf16(uint16_t *dx, const uint16_t *dy, const float *w,
                                       const hyfi_conv2d_args *a, int acc);
/* The scratch caps (default 32 MB each). kernel: oneDNN's first choice of
 * kernel gives way to a later fast one whose scratchpad is within it (its
 * bf16 1x1 kernels book a float32 buffer of the whole result; its direct
 * kernel none). pieces: the most scratch one call of the two above may take
 * (oneDNN's scratchpad, and an accumulating backward data's float32 result):
 * a larger call runs in pieces (images, then channel blocks of its result)
 * that give the same bits (strided forwards: within a bf16 unit). 0: the
 * default. For tests; not thread-safe. */
void hyfi_conv2d_cpu_bf16_set_scratch_cap(size_t pieces, size_t kernel);
/* oneDNN's scratchpad in bytes of the kernel a call of direction dir (0
 * forward, 1 backward data, 2 backward weights) of shape a runs */
size_t hyfi_conv2d_cpu_bf16_scratch(const hyfi_conv2d_args *a, int dir);
/* dw (Cout,Cin/G,KH,KW), db (Cout) or NULL: float32; dy, x bf16 */
int hyfi_conv2d_backward_weight_cpu_bf16(float *dw, float *db, const uint16_t *dy,
                                         const uint16_t *x, const hyfi_conv2d_args *a, int acc);

/* y (N,Cout,Ho,Wo), x (N,Cin,H,W), w (Cout,Cin/G,KH,KW), b (Cout) or NULL */
int hyfi_conv2d_forward_ref(float *y, const float *x, const float *w, const float *b,
                            const hyfi_conv2d_args *a);
/* y = conv(x, w, b) + r; r (N,Cout,Ho,Wo) */
int hyfi_conv2d_forward_add_ref(float *y, const float *x, const float *r, const float *w,
                                const float *b, const hyfi_conv2d_args *a);
/* dx (N,Cin,H,W), dy (N,Cout,Ho,Wo), w (Cout,Cin/G,KH,KW) */
int hyfi_conv2d_backward_data_ref(float *dx, const float *dy, const float *w,
                                  const hyfi_conv2d_args *a, int acc);
/* dw (Cout,Cin/G,KH,KW), db (Cout) or NULL, dy (N,Cout,Ho,Wo), x (N,Cin,H,W) */
int hyfi_conv2d_backward_weight_ref(float *dw, float *db, const float *dy, const float *x,
                                    const hyfi_conv2d_args *a, int acc);

int hyfi_conv2d_forward_cpu(float *y, const float *x, const float *w, const float *b,
                            const hyfi_conv2d_args *a);
/* y = conv(x, w, b) + r (the fused residual add; r (N,Cout,Ho,Wo) in y's
 * layout); round_mid: the convolution's result rounded to bf16 first (a bf16
 * task on staged buffers) */
int hyfi_conv2d_forward_add_cpu(float *y, const float *x, const float *r, const float *w,
                                const float *b, const hyfi_conv2d_args *a, int round_mid);
int hyfi_conv2d_backward_data_cpu(float *dx, const float *dy, const float *w,
                                  const hyfi_conv2d_args *a, int acc);
int hyfi_conv2d_backward_weight_cpu(float *dw, float *db, const float *dy, const float *x,
                                    const hyfi_conv2d_args *a, int acc);
/* Whether the CPU path runs direction dir (0 forward, 1 backward data, 2
 * backward weights) of this convolution with oneDNN's Winograd algorithm
 * (given 64-byte aligned buffers; ops/conv2d_cpu.c, "algorithm choice"). */
int hyfi_conv2d_cpu_winograd(const hyfi_conv2d_args *a, int dir);
/* Whether the CPU path computes direction dir of this convolution as GEMMs of
 * its own instead of oneDNN's convolution (few output pixels:
 * ops/conv2d_cpu.c, "GEMMs of our own"). */
int hyfi_conv2d_cpu_gemm(const hyfi_conv2d_args *a, int dir);

/* ----------------------------------------------------------------- bfloat16 */
/* Mixed precision (hyfi_train_config.precision = HYFI_PRECISION_BF16): the
 * activations and their gradients hold bf16 values, and convolutions and
 * fully connected layers take bf16 weights (convert_ref.c says how a float32
 * rounds to bf16: to nearest, ties to even; NaN stays NaN). */
float hyfi_bf16_round1(float f);
/* x (count): each value replaced by its bf16 rounding */
int hyfi_bf16_round_ref(float *x, size_t count);
int hyfi_bf16_round_cpu(float *x, size_t count);
/* The same without OpenMP: for threads that are not StarPU workers */
int hyfi_bf16_round_serial(float *x, size_t count);
/* out (count) = bf16 rounding of x (count); out == x allowed */
int hyfi_bf16_round_copy_cpu(float *out, const float *x, size_t count);
/* Storage: a bf16 is the high half of its float32 (uint16_t). Widening
 * out (count) from in (count) is exact; narrowing rounds as above. _serial:
 * without OpenMP, for threads that are not StarPU workers. */
int hyfi_bf16_to_f32_ref(float *out, const uint16_t *in, size_t count);
int hyfi_f32_to_bf16_ref(uint16_t *out, const float *in, size_t count);
int hyfi_bf16_to_f32_cpu(float *out, const uint16_t *in, size_t count);
int hyfi_f32_to_bf16_cpu(uint16_t *out, const float *in, size_t count);
int hyfi_bf16_to_f32_serial(float *out, const uint16_t *in, size_t count);
int hyfi_f32_to_bf16_serial(uint16_t *out, const float *in, size_t count);
/* Whether the element-wise bf16 kernels run their AVX-512 build in this
 * process (ops/isa.h); 0 where there is none. */
int hyfi_isa_avx512(void);

/* --------------------------------------------------------------- batchnorm */
typedef struct {
    int n, c, h, w;           /* x and y (N, C, H, W) */
    float eps;                /* added to the variance, e.g. 1e-5 */
    float momentum;           /* running-statistics momentum, e.g. 0.1 */
    int relu;                 /* 1: fused ReLU (CPU only): y = max(0, bn(x)); the backward
                               * takes that y and masks dy by y > 0 */
} hyfi_batchnorm_args;

/* Training mode: normalise with batch statistics, save them, update running ones.
 * y (N,C,H,W), mean (C), var (C) biased batch variance, run_mean (C) and run_var (C)
 * updated in place, x (N,C,H,W), gamma (C), beta (C) */
int hyfi_batchnorm_forward_train_ref(float *y, float *mean, float *var, float *run_mean,
                                     float *run_var, const float *x, const float *gamma,
                                     const float *beta, const hyfi_batchnorm_args *a);
/* Eval mode: normalise with the running statistics.
 * y (N,C,H,W), x (N,C,H,W), gamma, beta, run_mean, run_var (C) */
int hyfi_batchnorm_forward_eval_ref(float *y, const float *x, const float *gamma,
                                    const float *beta, const float *run_mean,
                                    const float *run_var, const hyfi_batchnorm_args *a);
/* Backward of the training-mode forward (batch statistics are functions of x).
 * dx (N,C,H,W), dgamma (C), dbeta (C), dy (N,C,H,W), x (N,C,H,W), gamma (C),
 * y (N,C,H,W): the fused forward's output, read only with relu (else may be
 * NULL), mean (C), var (C) as saved by the forward. acc is a bit mask: HYFI_BN_ACC_DX adds
 * into dx, HYFI_BN_ACC_PARAMS adds into dgamma and dbeta (micro-batches sum the
 * parameter gradients while dx starts fresh). */
#define HYFI_BN_ACC_DX 1
#define HYFI_BN_ACC_PARAMS 2
int hyfi_batchnorm_backward_ref(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, const float *y,
                                const float *mean, const float *var, const hyfi_batchnorm_args *a,
                                int acc);

/* The CPU and CUDA paths take `blk` last: the layout of x, y, dx and dy, 0
 * plain NCHW or a channel block B (CPU only; see hyfi_conv2d_args). */
int hyfi_batchnorm_forward_train_cpu(float *y, float *mean, float *var, float *run_mean,
                                     float *run_var, const float *x, const float *gamma,
                                     const float *beta, const hyfi_batchnorm_args *a, int blk);
int hyfi_batchnorm_forward_eval_cpu(float *y, const float *x, const float *gamma,
                                    const float *beta, const float *run_mean,
                                    const float *run_var, const hyfi_batchnorm_args *a, int blk);
int hyfi_batchnorm_backward_cpu(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, const float *y,
                                const float *mean, const float *var, const hyfi_batchnorm_args *a,
                                int acc, int blk);
/* The same on bf16 storage (batchnorm_cpu_bf16.c): x, y, dx, dy bf16 (uint16_t),
 * the rest float32; bitwise the float32 kernels on the widened values with
 * their outputs rounded to nearest even. */
int hyfi_batchnorm_forward_train_bf16(uint16_t *y, float *mean, float *var, float *run_mean,
                                      float *run_var, const uint16_t *x, const float *gamma,
                                      const float *beta, const hyfi_batchnorm_args *a, int blk);
int hyfi_batchnorm_forward_eval_bf16(uint16_t *y, const uint16_t *x, const float *gamma,
                                     const float *beta, const float *run_mean,
                                     const float *run_var, const hyfi_batchnorm_args *a, int blk);
int hyfi_batchnorm_backward_bf16(uint16_t *dx, float *dgamma, float *dbeta, const uint16_t *dy,
                                 const uint16_t *x, const float *gamma, const uint16_t *y,
                                 const float *mean, const float *var,
                                 const hyfi_batchnorm_args *a, int acc, int blk);

/* ---------------------------------------------------------------- eltwise */
/* y = max(x, 0); y, x (count) */
int hyfi_relu_forward_ref(float *y, const float *x, size_t count);
/* dx = dy where y > 0 else 0; dx, dy, y (count) */
int hyfi_relu_backward_ref(float *dx, const float *dy, const float *y, size_t count, int acc);
/* y = a + b; y, a, b (count) */
int hyfi_add_forward_ref(float *y, const float *a, const float *b, size_t count);
/* dst = dst * acc + src (the backward of add, identity and copies); dst, src (count) */
int hyfi_accumulate_ref(float *dst, const float *src, size_t count, int acc);
/* dst = value; dst (count) */
int hyfi_fill_ref(float *dst, float value, size_t count);

int hyfi_relu_forward_cpu(float *y, const float *x, size_t count);
int hyfi_relu_backward_cpu(float *dx, const float *dy, const float *y, size_t count, int acc);
int hyfi_add_forward_cpu(float *y, const float *a, const float *b, size_t count);
int hyfi_accumulate_cpu(float *dst, const float *src, size_t count, int acc);
int hyfi_fill_cpu(float *dst, float value, size_t count);
/* The same on bf16 storage (kernels.h "bfloat16"; eltwise_cpu_bf16.c): every
 * buffer bf16, each result rounded to nearest even, bitwise the float32 calls
 * on widened buffers with the results rounded. */
int hyfi_relu_forward_bf16(uint16_t *y, const uint16_t *x, size_t count);
int hyfi_relu_backward_bf16(uint16_t *dx, const uint16_t *dy, const uint16_t *y, size_t count,
                            int acc);
int hyfi_add_forward_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, size_t count);
int hyfi_accumulate_bf16(uint16_t *dst, const uint16_t *src, size_t count, int acc);
/* dst (count) bf16 = round(dst + src), src (count) float32 */
int hyfi_accumulate_f32_bf16(uint16_t *dst, const float *src, size_t count);
/* dst (count) = round([dst +] src_0 + ... + src_(nsrc-1)) (dst added with acc):
 * the float32 sums in that order, one rounding (accumulate_n on widened
 * buffers) */
int hyfi_accumulate_n_bf16(uint16_t *dst, const uint16_t *const *src, int nsrc, size_t count,
                           int acc);
int hyfi_fill_bf16(uint16_t *dst, float value, size_t count);

/* ------------------------------------------------------------------- pool */
typedef struct {
    int n, c, h, w;           /* input (N, C, H, W) */
    int ho, wo;               /* output (N, C, Ho, Wo) */
    int kh, kw, sh, sw, ph, pw;
    int count_include_pad;    /* average pooling only */
    int blk;                  /* CPU only: the layout of x, y, dx and dy (0 NCHW, 8 or 16
                                 blocked; see hyfi_conv2d_args); global average
                                 pooling: of x and dx (its y (N, C) is the same
                                 either way) */
} hyfi_pool_args;

/* y (N,C,Ho,Wo), x (N,C,H,W) */
int hyfi_maxpool_forward_ref(float *y, const float *x, const hyfi_pool_args *a);
/* dx (N,C,H,W), dy (N,C,Ho,Wo), x (N,C,H,W): the argmax is recomputed from x */
int hyfi_maxpool_backward_ref(float *dx, const float *dy, const float *x,
                              const hyfi_pool_args *a, int acc);
/* y (N,C,Ho,Wo), x (N,C,H,W) */
int hyfi_avgpool_forward_ref(float *y, const float *x, const hyfi_pool_args *a);
/* dx (N,C,H,W), dy (N,C,Ho,Wo) */
int hyfi_avgpool_backward_ref(float *dx, const float *dy, const hyfi_pool_args *a, int acc);
/* Global average pooling: y (N,C) = mean over H*W of x (N,C,H,W); a->ho = a->wo = 1 */
int hyfi_gap_forward_ref(float *y, const float *x, const hyfi_pool_args *a);
/* dx (N,C,H,W) = dy (N,C) / (H*W) */
int hyfi_gap_backward_ref(float *dx, const float *dy, const hyfi_pool_args *a, int acc);

int hyfi_maxpool_forward_cpu(float *y, const float *x, const hyfi_pool_args *a);
int hyfi_maxpool_backward_cpu(float *dx, const float *dy, const float *x,
                              const hyfi_pool_args *a, int acc);
int hyfi_avgpool_forward_cpu(float *y, const float *x, const hyfi_pool_args *a);
int hyfi_avgpool_backward_cpu(float *dx, const float *dy, const hyfi_pool_args *a, int acc);
int hyfi_gap_forward_cpu(float *y, const float *x, const hyfi_pool_args *a);
int hyfi_gap_backward_cpu(float *dx, const float *dy, const hyfi_pool_args *a, int acc);
/* The same on bf16 storage (pool_cpu_bf16.c): every tensor bf16 (uint16_t);
 * bitwise the float32 kernels on the widened values, outputs rounded to
 * nearest even. */
int hyfi_maxpool_forward_bf16(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a);
int hyfi_maxpool_backward_bf16(uint16_t *dx, const uint16_t *dy, const uint16_t *x,
                               const hyfi_pool_args *a, int acc);
int hyfi_avgpool_forward_bf16(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a);
int hyfi_avgpool_backward_bf16(uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a,
                               int acc);
int hyfi_gap_forward_bf16(uint16_t *y, const uint16_t *x, const hyfi_pool_args *a);
int hyfi_gap_backward_bf16(uint16_t *dx, const uint16_t *dy, const hyfi_pool_args *a, int acc);

/* ----------------------------------------------------------------- concat */
/* Channel concatenation is done part by part: part i of y holds channels
 * [c_offset, c_offset + c_part) of y (N, c_total, H, W). */
typedef struct {
    int n, hw;                /* batch and H*W */
    int c_part, c_offset, c_total;
} hyfi_concat_args;

/* Copy x (N,c_part,H,W) into its channels of y (N,c_total,H,W); other channels untouched. */
int hyfi_concat_forward_ref(float *y, const float *x, const hyfi_concat_args *a);
/* dx (N,c_part,H,W) = its channels of dy (N,c_total,H,W) */
int hyfi_concat_backward_ref(float *dx, const float *dy, const hyfi_concat_args *a, int acc);
int hyfi_concat_forward_cpu(float *y, const float *x, const hyfi_concat_args *a);
int hyfi_concat_backward_cpu(float *dx, const float *dy, const hyfi_concat_args *a, int acc);
/* The same on bf16 storage (kernels.h "bfloat16"), bitwise the staged calls. */
int hyfi_concat_forward_bf16(uint16_t *y, const uint16_t *x, const hyfi_concat_args *a);
int hyfi_concat_backward_bf16(uint16_t *dx, const uint16_t *dy, const hyfi_concat_args *a,
                              int acc);

/* --------------------------------------------------------------------- fc */
typedef struct {
    int n;                    /* batch */
    int in, out;              /* features; x is (N, in) = (N, C*H*W) flattened */
    int has_bias;
} hyfi_fc_args;

/* y (N,out), x (N,in), w (out,in), b (out) or NULL */
int hyfi_fc_forward_ref(float *y, const float *x, const float *w, const float *b,
                        const hyfi_fc_args *a);
/* dx (N,in), dy (N,out), w (out,in) */
int hyfi_fc_backward_data_ref(float *dx, const float *dy, const float *w,
                              const hyfi_fc_args *a, int acc);
/* dw (out,in), db (out) or NULL, dy (N,out), x (N,in) */
int hyfi_fc_backward_weight_ref(float *dw, float *db, const float *dy, const float *x,
                                const hyfi_fc_args *a, int acc);
int hyfi_fc_forward_cpu(float *y, const float *x, const float *w, const float *b,
                        const hyfi_fc_args *a);
int hyfi_fc_backward_data_cpu(float *dx, const float *dy, const float *w,
                              const hyfi_fc_args *a, int acc);
int hyfi_fc_backward_weight_cpu(float *dw, float *db, const float *dy, const float *x,
                                const hyfi_fc_args *a, int acc);

/* ------------------------------------------------------------------- xent */
typedef struct {
    int n, k;                 /* batch, classes */
    float scale;              /* backward scale, 1/N for the batch mean; the engine may
                                 use 1/global_batch when the batch is split */
} hyfi_xent_args;

/* loss (1) = sum over the batch of -log softmax(z)[label] * scale,
 * prob (N,K) softmax(z), logits (N,K), labels (N) int32 in [0,K).
 * A label outside [0,K) contributes nothing and returns -2 (bad data). */
int hyfi_xent_forward_ref(float *loss, float *prob, const float *logits,
                          const int32_t *labels, const hyfi_xent_args *a);
/* dlogits (N,K) = scale * (prob - onehot(label)) * dloss, dloss (1) */
int hyfi_xent_backward_ref(float *dlogits, const float *prob, const int32_t *labels,
                           const float *dloss, const hyfi_xent_args *a, int acc);
int hyfi_xent_forward_cpu(float *loss, float *prob, const float *logits,
                          const int32_t *labels, const hyfi_xent_args *a);
int hyfi_xent_backward_cpu(float *dlogits, const float *prob, const int32_t *labels,
                           const float *dloss, const hyfi_xent_args *a, int acc);

/* -------------------------------------------------------------------- sgd */
typedef struct {
    size_t count;
    float lr, momentum, weight_decay;
} hyfi_sgd_args;

/* PyTorch SGD: g' = g + wd*w; v = momentum*v + g' (v = g' when momentum == 0);
 * w -= lr * v.  w, v, g (count).
 * norms (2), when not NULL: the step's health, written (not accumulated):
 * norms[0] = sum of g^2 (the gradient given), norms[1] = sum of w^2 after the
 * update, summed in double; a non-finite value in g or the new w makes its sum
 * non-finite. The engine adds them up over the parameters after every step. */
int hyfi_sgd_update_ref(float *w, float *v, float *norms, const float *g, const hyfi_sgd_args *a);
int hyfi_sgd_update_cpu(float *w, float *v, float *norms, const float *g, const hyfi_sgd_args *a);

/* ---------------------------------------------------------------- replica */
/* Replicas (GEMS copies, data parallelism): the pieces of the gradient
 * all-reduce and of the running-statistics combine (engine/compile.c). */
typedef struct {
    size_t count;                 /* floats copied */
    size_t src_off, dst_off;      /* offsets into src and dst */
} hyfi_slice_args;

#define HYFI_RCOMB_MAX 15          /* replicas 1 .. R-1 of a combine */
typedef struct {
    size_t count;                 /* floats per statistic */
    int nrep;                     /* replicas R: r holds R - 1 pointers (replicas 1..R-1) */
    double decay;                 /* a^B: (1 - momentum) to the micro-batches per replica */
} hyfi_rcomb_args;

/* dst[dst_off + i] = src[src_off + i], i < count (a chunk out of / into a gradient). */
int hyfi_copy_slice_ref(float *dst, const float *src, const hyfi_slice_args *a);
int hyfi_copy_slice_cpu(float *dst, const float *src, const hyfi_slice_args *a);
/* Running statistics of R replicas that each applied r <- (1 - m) r + m s to B
 * micro-batches from the same r0 -> the value after all R x B in replica order:
 *   x = r_0 (in/out);  for k = 1 .. R-1:  x = decay x + (r_k - decay r0).
 * x, r0, r[k - 1] (count). */
int hyfi_running_combine_ref(float *x, const float *r0, const float *const *r,
                             const hyfi_rcomb_args *a);
int hyfi_running_combine_cpu(float *x, const float *r0, const float *const *r,
                             const hyfi_rcomb_args *a);

/* ------------------------------------------------------------------- tile */
/* Spatial tiles: rectangles copied between tensors of the same N and C.
 * Assembling a tile's padded input (its own rows plus the halo strips of its
 * neighbours, zeros at the image border), packing a boundary strip out of a
 * tile, gathering tiles into a whole tensor, and the reverse scatters of the
 * backward pass are all this one pair of kernels. */
#define HYFI_TILE_MAX_PIECES 9
typedef struct {
    int src_h, src_w;         /* spatial size of the piece's source (assemble) or
                                 destination (scatter) tensor */
    int src_y, src_x;         /* top-left corner of the rectangle in it */
    int dst_y, dst_x;         /* top-left corner in the assembled tensor */
    int h, w;                 /* rectangle */
} hyfi_piece;

typedef struct {
    int n, c;                 /* planes: N * C */
    int dst_h, dst_w;         /* spatial size of the assembled tensor */
    int npieces;              /* 1 .. HYFI_TILE_MAX_PIECES */
    int zero_fill;            /* assemble: zero the tensor first (border padding) */
    hyfi_piece p[HYFI_TILE_MAX_PIECES];
} hyfi_tile_args;

/* dst (N,C,dst_h,dst_w): zeroed when zero_fill, then every piece i copied from
 * src[i] (N,C,p[i].src_h,p[i].src_w). */
int hyfi_tile_assemble_ref(float *dst, const float *const *src, const hyfi_tile_args *a);
/* The reverse: piece i of src (N,C,dst_h,dst_w) written into dst[i]
 * (N,C,p[i].src_h,p[i].src_w), added where bit i of acc_mask is set; the rest
 * of dst[i] is left as it is. */
int hyfi_tile_scatter_ref(float *const *dst, const float *src, const hyfi_tile_args *a,
                          unsigned acc_mask);
int hyfi_tile_assemble_cpu(float *dst, const float *const *src, const hyfi_tile_args *a);
int hyfi_tile_scatter_cpu(float *const *dst, const float *src, const hyfi_tile_args *a,
                          unsigned acc_mask);

/* ----------------------------------------------------------------- bntile */
/* Batch normalisation over the tiles of a batch, exact: the statistics are
 * those of the whole batch, reduced from per-tile parts.
 *   forward:  bn_stats per tile -> bn_combine -> hyfi_batchnorm_forward_eval_*
 *             per tile with the batch mean and variance
 *   backward: bn_bwd_stats per tile -> bn_bwd_combine (dgamma, dbeta) ->
 *             bn_bwd_apply per tile
 * The formulas are those of batchnorm_ref.c with M = the count over all tiles. */
#define HYFI_MAX_TILES 64
typedef struct {
    int c;                    /* channels */
    int nparts;               /* tiles, 1 .. HYFI_MAX_TILES */
    float eps, momentum;
    double count[HYFI_MAX_TILES]; /* elements per channel of each tile: N * H_i * W_i */
    /* The codelets' buffers: 0, one per part; else this many packets, each
     * the parts of consecutive tiles side by side, in tile order (CPU only).
     * (After count: 0 leaves the footprints of unpacked tasks as they were.) */
    int npackets;
} hyfi_bn_combine_args;

/* part (2C doubles: partial sums stay in double, as the untiled kernel's sums,
 * so that totals that nearly cancel keep their precision): [0, C) the tile's
 * mean, [C, 2C) its M2 = sum of (x - mean)^2, per channel over (N, H, W);
 * x (N,C,H,W) of the tile (a->n, c, h, w). */
int hyfi_bn_stats_ref(double *part, const float *x, const hyfi_batchnorm_args *a);
/* mean (C), var (C, biased) of all tiles from parts[i] (2C) (Chan et al.'s
 * pairwise update); run_mean, run_var (C) updated as in the untiled forward
 * (unbiased variance of the total count). */
int hyfi_bn_combine_ref(float *mean, float *var, float *run_mean, float *run_var,
                        const double *const *parts, const hyfi_bn_combine_args *a);
/* part (2C doubles): [0, C) sum(dy), [C, 2C) sum(dy * (x - mean)) over the tile.
 * dy, x (N,C,H,W) of the tile, mean (C). */
int hyfi_bn_bwd_stats_ref(double *part, const float *dy, const float *x, const float *mean,
                          const hyfi_batchnorm_args *a);
/* tot (2C) = the sum of parts[i]; dgamma (C) (+)= tot[C + c] / sqrt(var + eps),
 * dbeta (C) (+)= tot[c] (added where acc has HYFI_BN_ACC_PARAMS). var (C). */
int hyfi_bn_bwd_combine_ref(float *tot, float *dgamma, float *dbeta, const double *const *parts,
                            const float *var, const hyfi_bn_combine_args *a, int acc);
/* dx (N,C,H,W) of the tile (+)= gamma invstd / M (M dy - tot0 - xhat tot1 invstd), with
 * M = total (all tiles); acc as HYFI_BN_ACC_DX. dy, x (N,C,H,W), gamma, mean,
 * var (C), tot (2C). */
int hyfi_bn_bwd_apply_ref(float *dx, const float *dy, const float *x, const float *gamma,
                          const float *mean, const float *var, const float *tot, double total,
                          const hyfi_batchnorm_args *a, int acc);
int hyfi_bn_stats_cpu(double *part, const float *x, const hyfi_batchnorm_args *a);
int hyfi_bn_combine_cpu(float *mean, float *var, float *run_mean, float *run_var,
                        const double *const *parts, const hyfi_bn_combine_args *a);
int hyfi_bn_bwd_stats_cpu(double *part, const float *dy, const float *x, const float *mean,
                          const hyfi_batchnorm_args *a);
int hyfi_bn_bwd_combine_cpu(float *tot, float *dgamma, float *dbeta, const double *const *parts,
                            const float *var, const hyfi_bn_combine_args *a, int acc);
int hyfi_bn_bwd_apply_cpu(float *dx, const float *dy, const float *x, const float *gamma,
                          const float *mean, const float *var, const float *tot, double total,
                          const hyfi_batchnorm_args *a, int acc);

/* ------------------------------------------------------------- layouts */
/* Copy x (N, C, H, W) between plain NCHW and the blocked layout of channel
 * block blk (see hyfi_conv2d_args; C a multiple of blk). blk 0 copies. */
void hyfi_layout_to_blocked(float *dst, const float *src, int n, int c, int hw, int blk);
void hyfi_layout_to_plain(float *dst, const float *src, int n, int c, int hw, int blk);
/* Convolution weights, plain OIHW <-> OIhw{B}i{B}o (see hyfi_conv2d_args.wei_blk;
 * o and i multiples of blk, k = KH KW). blk 0 copies. */
void hyfi_layout_wei_to_blocked(float *dst, const float *src, int o, int i, int k, int blk);
void hyfi_layout_wei_to_plain(float *dst, const float *src, int o, int i, int k, int blk);
/* The channel block of oneDNN's direct convolutions on this CPU: 16 with
 * AVX-512, 8 with AVX2, 0 (keep NCHW) otherwise. */
int hyfi_cpu_channel_block(void);

#ifdef __cplusplus
}
#endif
#endif
