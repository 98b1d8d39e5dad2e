/* sgd_cpu.c: CPU path of the PyTorch SGD step (see sgd_ref.c), a plain
 * vectorised loop in float:
 *   g' = g + wd * w;  v = momentum * v + g' (v = g' when momentum == 0,
 *   v may then be NULL);  w -= lr * v. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include "kernels.h"

/* w (count) and v (count) updated in place, g (count) */
int hyfi_sgd_update_cpu(float *w, float *v, const float *g, const hyfi_sgd_args *a)
{
    const size_t n = a->count;
    const float lr = a->lr, mom = a->momentum, wd = a->weight_decay;
    if (mom != 0.0f) {
        for (size_t i = 0; i < n; i++) {
            float vel = mom * v[i] + (g[i] + wd * w[i]);
            v[i] = vel;
            w[i] -= lr * vel;
        }
    } else if (v) {
        for (size_t i = 0; i < n; i++) {
            float vel = g[i] + wd * w[i];
            v[i] = vel;
            w[i] -= lr * vel;
        }
    } else {
        for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
    }
    return 0;
}
