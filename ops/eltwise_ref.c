/* eltwise_ref.c: reference (specification) of the element-wise ops —
 * relu forward/backward, add, accumulate and fill — as plain loops over
 * `count` floats. Every loop reads and writes index i only, so y == x (in
 * place) is allowed. */
#include "kernels.h"

/* y (count) = max(x, 0), x (count) */
int hyfi_relu_forward_ref(float *y, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}

/* dx (count) (+)= dy where y > 0 else 0; dy, y (count) */
int hyfi_relu_backward_ref(float *dx, const float *dy, const float *y, size_t count, int acc)
{
    for (size_t i = 0; i < count; i++) {
        float g = y[i] > 0.0f ? dy[i] : 0.0f;
        dx[i] = acc ? dx[i] + g : g;
    }
    return 0;
}

/* y (count) = a + b; a, b (count) */
int hyfi_add_forward_ref(float *y, const float *a, const float *b, size_t count)
{
    for (size_t i = 0; i < count; i++) y[i] = a[i] + b[i];
    return 0;
}

/* dst (count) = acc ? dst + src : src; src (count) */
int hyfi_accumulate_ref(float *dst, const float *src, size_t count, int acc)
{
    for (size_t i = 0; i < count; i++) dst[i] = acc ? dst[i] + src[i] : src[i];
    return 0;
}

/* dst (count) = value */
int hyfi_fill_ref(float *dst, float value, size_t count)
{
    for (size_t i = 0; i < count; i++) dst[i] = value;
    return 0;
}
