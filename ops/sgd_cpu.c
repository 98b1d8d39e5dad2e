/* sgd_cpu.c: CPU path of the PyTorch SGD step (see sgd_ref.c), a plain
 * vectorised loop in float:
 *   g' = g + wd * w;  v = momentum * v + g' (v = g' when momentum == 0,
 *   v may then be NULL);  w -= lr * v.
 * The health sums (norms) are taken in blocks of LANES elements that the
 * compiler vectorises, added up in double per block. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include "kernels.h"

#define LANES 16

static void update(float *w, float *v, const float *g, size_t n, float lr, float mom, float wd)
{
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
}

/* w (count) and v (count) updated in place, norms (2) or NULL, g (count) */
int hyfi_sgd_update_cpu(float *w, float *v, float *norms, const float *g, const hyfi_sgd_args *a)
{
    const size_t n = a->count;
    const float lr = a->lr, mom = a->momentum, wd = a->weight_decay;
    if (!norms) {
        update(w, v, g, n, lr, mom, wd);
        return 0;
    }
    /* update a block (stays in cache), then its sums */
    double gg = 0, ww = 0;
    for (size_t b = 0; b < n; b += 4096) {
        const size_t m = n - b < 4096 ? n - b : 4096;
        update(w + b, v ? v + b : NULL, g + b, m, lr, mom, wd);
        float sg[LANES] = {0}, sw[LANES] = {0};
        size_t i = 0;
        for (; i + LANES <= m; i += LANES)
            for (int k = 0; k < LANES; k++) {
                sg[k] += g[b + i + k] * g[b + i + k];
                sw[k] += w[b + i + k] * w[b + i + k];
            }
        for (; i < m; i++) {
            sg[0] += g[b + i] * g[b + i];
            sw[0] += w[b + i] * w[b + i];
        }
        for (int k = 0; k < LANES; k++) gg += sg[k], ww += sw[k];
    }
    norms[0] = (float)gg;
    norms[1] = (float)ww;
    return 0;
}
