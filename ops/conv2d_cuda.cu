// conv2d_cuda.cu: CUDA path of the 2-D convolution on cuDNN 9's legacy API
// (cross-correlation, float, NCHW / KCRS, groups through
// cudnnSetConvolutionGroupCount; depthwise is groups == Cin).
//
//   forward          cudnnConvolutionForward (beta 0), then cudnnAddTensor for the bias
//   backward data    cudnnConvolutionBackwardData, beta = acc
//   backward weights cudnnConvolutionBackwardFilter, beta = acc, and
//                    cudnnConvolutionBackwardBias for the bias gradient, beta = acc
//
// Algorithms: per shape, the fastest that cudnnFind*Algorithm measures (once,
// cached; hyfi_kernel_config.cudnn_find -1, hyfi-train's HYFI_CUDNN_FIND=0: the
// cudnnGet*Algorithm_v7 heuristics' order) that
// is supported, is not a tensor-core (TF32) one, and whose workspace the
// worker can get from hyfi_cuda_workspace (at most CONV_WS_CAP bytes). The
// convolution descriptor uses CUDNN_FMA_MATH: on Ampere and later
// CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores for float, which would
// not match the CPU path; FMA_MATH is what PyTorch sets when TF32 is off.
//
// Descriptors are created per call (host-only, cheap) and destroyed by RAII.
// Everything is enqueued on env->stream (the cuDNN handle is bound to it).
#include "cuda_common.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

// Largest workspace an algorithm may ask for; bigger ones are skipped.
constexpr size_t CONV_WS_CAP = size_t(1) << 30;

struct ConvDescs {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;

    ConvDescs() = default;
    ConvDescs(const ConvDescs &) = delete;
    ConvDescs &operator=(const ConvDescs &) = delete;
    ~ConvDescs()
    {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (b) cudnnDestroyTensorDescriptor(b);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }

    // x (N,Cin,H,W), y (N,Cout,Ho,Wo), w (Cout,Cin/G,KH,KW), b (1,Cout,1,1) when with_bias.
    int init(const hyfi_conv2d_args *a, bool with_bias)
    {
        HYFI_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
        HYFI_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                    a->n, a->c_in, a->h, a->w));
        HYFI_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
        HYFI_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                    a->n, a->c_out, a->ho, a->wo));
        HYFI_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
        HYFI_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                    a->c_out, a->c_in / a->groups, a->kh,
                                                    a->kw));
        HYFI_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
        HYFI_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, a->ph, a->pw, a->sh, a->sw, 1, 1,
                                                         CUDNN_CROSS_CORRELATION,
                                                         CUDNN_DATA_FLOAT));
        HYFI_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, a->groups));
        HYFI_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
        if (with_bias) {
            HYFI_CUDNN_CHECK(cudnnCreateTensorDescriptor(&b));
            HYFI_CUDNN_CHECK(cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                        1, a->c_out, 1, 1));
        }
        // The output size cuDNN derives must be the one the caller allocated.
        int n, c, h, wd;
        HYFI_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd));
        if (n != a->n || c != a->c_out || h != a->ho || wd != a->wo)
            return -2000 - (int)CUDNN_STATUS_BAD_PARAM;
        return 0;
    }
};

bool not_tensor_op(cudnnMathType_t m)
{
    return m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Workspace of `bytes` for this worker; false when it cannot be had. A failed
// cudaMalloc leaves an error that cudaGetLastError would report later: clear it.
bool get_workspace(hyfi_cuda_env *env, size_t bytes, void **ws)
{
    *ws = nullptr;
    if (bytes == 0) return true;
    if (bytes > CONV_WS_CAP) return false;
    void *p = hyfi_cuda_workspace(env, bytes);
    if (!p) {
        (void)cudaGetLastError();
        return false;
    }
    *ws = p;
    return true;
}

const int NO_ALGO = -2000 - (int)CUDNN_STATUS_NOT_SUPPORTED;

// ------------------------------------------------------------ algorithm cache
// One choice per (direction, device, shape), shared by the workers. The first
// call of a shape benchmarks cuDNN's algorithms (cudnnFind*Algorithm, on
// memory cuDNN allocates itself, so the task's buffers are not touched) and
// keeps the fastest that is not a tensor-core one and whose workspace the
// worker can get; cudnn_find -1 (HYFI_CUDNN_FIND=0), or a Find that fails (e.g. out of
// memory), falls back to the heuristics' order. Measured on an H100: asking the
// heuristics at every task (the former code) kept the GPU waiting for the host,
// 3-6x slower training; cached, Find's choice beats the heuristics' first by 4%
// on ResNet-50 and 38% on AmoebaNet-D (docs/results.md, "CUDA").
enum Dir { FWD, BWD_DATA, BWD_FILTER };
struct AlgoKey {
    int dir, dev, n, ci, h, w, co, ho, wo, kh, kw, ph, pw, sh, sw, g;
};
struct AlgoChoice {
    AlgoKey key;
    int algo;
    size_t bytes;
};
std::mutex cache_mu;
std::vector<AlgoChoice> cache;

AlgoKey make_key(Dir dir, const hyfi_conv2d_args *a)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) (void)cudaGetLastError();
    const AlgoKey k = {dir,      dev,   a->n,  a->c_in, a->h,  a->w,  a->c_out, a->ho,
                       a->wo,    a->kh, a->kw, a->ph,   a->pw, a->sh, a->sw,    a->groups};
    return k;
}

bool cache_get(const AlgoKey &k, int *algo, size_t *bytes)
{
    std::lock_guard<std::mutex> lock(cache_mu);
    for (const AlgoChoice &c : cache)
        if (!memcmp(&c.key, &k, sizeof k)) {
            *algo = c.algo;
            *bytes = c.bytes;
            return true;
        }
    return false;
}

void cache_put(const AlgoKey &k, int algo, size_t bytes)
{
    std::lock_guard<std::mutex> lock(cache_mu);
    cache.push_back({k, algo, bytes});
}

bool use_find() { return hyfi_kernel_settings.cudnn_find >= 0; }

// The first usable entry of perf[0..n): a supported, non-tensor-core algorithm
// whose workspace (wsize(algo)) the worker can get.
template <class Perf, class WsFn>
bool first_usable(hyfi_cuda_env *env, const Perf *perf, int n, WsFn wsize, int *algo,
                  void **ws, size_t *bytes)
{
    for (int i = 0; i < n; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || !not_tensor_op(perf[i].mathType)) continue;
        size_t sz = 0;
        if (!wsize(perf[i].algo, &sz)) continue;
        if (!get_workspace(env, sz, ws)) continue;
        *algo = (int)perf[i].algo;
        *bytes = sz;
        return true;
    }
    return false;
}

// The cached algorithm, else Find's fastest, else the heuristics' first.
template <class Perf, int COUNT, class FindFn, class HeurFn, class WsFn>
int pick(hyfi_cuda_env *env, Dir dir, const hyfi_conv2d_args *a, FindFn find, HeurFn heur,
         WsFn wsize, int *algo, void **ws, size_t *bytes)
{
    const AlgoKey k = make_key(dir, a);
    const bool cached = cache_get(k, algo, bytes);
    if (cached && get_workspace(env, *bytes, ws)) return 0;
    Perf perf[COUNT];
    int n = 0;
    if (cached) {
        // its workspace cannot be had now: the heuristics' first that fits, this time only
        HYFI_CUDNN_CHECK(heur(COUNT, &n, perf));
        return first_usable(env, perf, n, wsize, algo, ws, bytes) ? 0 : NO_ALGO;
    }
    if (use_find() && find(COUNT, &n, perf) == CUDNN_STATUS_SUCCESS &&
        first_usable(env, perf, n, wsize, algo, ws, bytes)) {
        cache_put(k, *algo, *bytes);
        return 0;
    }
    (void)cudaGetLastError(); // a failed Find's allocation
    n = 0;
    HYFI_CUDNN_CHECK(heur(COUNT, &n, perf));
    if (!first_usable(env, perf, n, wsize, algo, ws, bytes)) return NO_ALGO;
    cache_put(k, *algo, *bytes);
    return 0;
}

int pick_fwd(hyfi_cuda_env *env, const ConvDescs &d, const hyfi_conv2d_args *a,
             cudnnConvolutionFwdAlgo_t *algo, void **ws, size_t *bytes)
{
    int al = 0;
    const int rc = pick<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        env, FWD, a,
        [&](int c, int *n, cudnnConvolutionFwdAlgoPerf_t *p) {
            return cudnnFindConvolutionForwardAlgorithm(env->cudnn, d.x, d.w, d.conv, d.y, c, n,
                                                        p);
        },
        [&](int c, int *n, cudnnConvolutionFwdAlgoPerf_t *p) {
            return cudnnGetConvolutionForwardAlgorithm_v7(env->cudnn, d.x, d.w, d.conv, d.y, c,
                                                          n, p);
        },
        [&](cudnnConvolutionFwdAlgo_t al2, size_t *sz) {
            return cudnnGetConvolutionForwardWorkspaceSize(env->cudnn, d.x, d.w, d.conv, d.y,
                                                           al2, sz) == CUDNN_STATUS_SUCCESS;
        },
        &al, ws, bytes);
    *algo = (cudnnConvolutionFwdAlgo_t)al;
    return rc;
}

int pick_bwd_data(hyfi_cuda_env *env, const ConvDescs &d, const hyfi_conv2d_args *a,
                  cudnnConvolutionBwdDataAlgo_t *algo, void **ws, size_t *bytes)
{
    int al = 0;
    const int rc = pick<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        env, BWD_DATA, a,
        [&](int c, int *n, cudnnConvolutionBwdDataAlgoPerf_t *p) {
            return cudnnFindConvolutionBackwardDataAlgorithm(env->cudnn, d.w, d.y, d.conv, d.x,
                                                             c, n, p);
        },
        [&](int c, int *n, cudnnConvolutionBwdDataAlgoPerf_t *p) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(env->cudnn, d.w, d.y, d.conv, d.x,
                                                               c, n, p);
        },
        [&](cudnnConvolutionBwdDataAlgo_t al2, size_t *sz) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(env->cudnn, d.w, d.y, d.conv,
                                                                d.x, al2, sz) ==
                   CUDNN_STATUS_SUCCESS;
        },
        &al, ws, bytes);
    *algo = (cudnnConvolutionBwdDataAlgo_t)al;
    return rc;
}

int pick_bwd_filter(hyfi_cuda_env *env, const ConvDescs &d, const hyfi_conv2d_args *a,
                    cudnnConvolutionBwdFilterAlgo_t *algo, void **ws, size_t *bytes)
{
    int al = 0;
    const int rc =
        pick<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
            env, BWD_FILTER, a,
            [&](int c, int *n, cudnnConvolutionBwdFilterAlgoPerf_t *p) {
                return cudnnFindConvolutionBackwardFilterAlgorithm(env->cudnn, d.x, d.y, d.conv,
                                                                   d.w, c, n, p);
            },
            [&](int c, int *n, cudnnConvolutionBwdFilterAlgoPerf_t *p) {
                return cudnnGetConvolutionBackwardFilterAlgorithm_v7(env->cudnn, d.x, d.y,
                                                                     d.conv, d.w, c, n, p);
            },
            [&](cudnnConvolutionBwdFilterAlgo_t al2, size_t *sz) {
                return cudnnGetConvolutionBackwardFilterWorkspaceSize(env->cudnn, d.x, d.y,
                                                                      d.conv, d.w, al2, sz) ==
                       CUDNN_STATUS_SUCCESS;
            },
            &al, ws, bytes);
    *algo = (cudnnConvolutionBwdFilterAlgo_t)al;
    return rc;
}

} // namespace

// y (N,Cout,Ho,Wo), x (N,Cin,H,W), w (Cout,Cin/G,KH,KW), b (Cout) or NULL
extern "C" int hyfi_conv2d_forward_cuda(hyfi_cuda_env *env, float *y, const float *x,
                                        const float *w, const float *b,
                                        const hyfi_conv2d_args *a)
{
    const bool with_bias = a->has_bias && b;
    ConvDescs d;
    int rc = d.init(a, with_bias);
    if (rc) return rc;
    cudnnConvolutionFwdAlgo_t algo;
    void *ws;
    size_t bytes;
    if ((rc = pick_fwd(env, d, a, &algo, &ws, &bytes))) return rc;
    const float one = 1.0f, zero = 0.0f;
    HYFI_CUDNN_CHECK(cudnnConvolutionForward(env->cudnn, &one, d.x, x, d.w, w, d.conv, algo, ws,
                                             bytes, &zero, d.y, y));
    if (with_bias) HYFI_CUDNN_CHECK(cudnnAddTensor(env->cudnn, &one, d.b, b, &one, d.y, y));
    return 0;
}

// dx (N,Cin,H,W), dy (N,Cout,Ho,Wo), w (Cout,Cin/G,KH,KW)
extern "C" int hyfi_conv2d_backward_data_cuda(hyfi_cuda_env *env, float *dx, const float *dy,
                                              const float *w, const hyfi_conv2d_args *a,
                                              int acc)
{
    ConvDescs d;
    int rc = d.init(a, false);
    if (rc) return rc;
    cudnnConvolutionBwdDataAlgo_t algo;
    void *ws;
    size_t bytes;
    if ((rc = pick_bwd_data(env, d, a, &algo, &ws, &bytes))) return rc;
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    HYFI_CUDNN_CHECK(cudnnConvolutionBackwardData(env->cudnn, &one, d.w, w, d.y, dy, d.conv,
                                                  algo, ws, bytes, &beta, d.x, dx));
    return 0;
}

// dw (Cout,Cin/G,KH,KW), db (Cout) or NULL, dy (N,Cout,Ho,Wo), x (N,Cin,H,W)
extern "C" int hyfi_conv2d_backward_weight_cuda(hyfi_cuda_env *env, float *dw, float *db,
                                                const float *dy, const float *x,
                                                const hyfi_conv2d_args *a, int acc)
{
    const bool with_bias = a->has_bias && db;
    ConvDescs d;
    int rc = d.init(a, with_bias);
    if (rc) return rc;
    cudnnConvolutionBwdFilterAlgo_t algo;
    void *ws;
    size_t bytes;
    if ((rc = pick_bwd_filter(env, d, a, &algo, &ws, &bytes))) return rc;
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    HYFI_CUDNN_CHECK(cudnnConvolutionBackwardFilter(env->cudnn, &one, d.x, x, d.y, dy, d.conv,
                                                    algo, ws, bytes, &beta, d.w, dw));
    if (with_bias)
        HYFI_CUDNN_CHECK(cudnnConvolutionBackwardBias(env->cudnn, &one, d.y, dy, &beta, d.b, db));
    return 0;
}
