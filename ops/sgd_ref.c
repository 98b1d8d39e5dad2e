/* sgd_ref.c: reference (specification) of the PyTorch SGD step with momentum
 * and weight decay (no dampening, no Nesterov), element by element in double:
 *   g' = g + wd * w
 *   v  = momentum * v + g'      (v = g' when momentum == 0; v may then be NULL)
 *   w  = w - lr * v
 * With v starting at zero this matches PyTorch's first step (buf = g').
 * norms (2), when not NULL: sum of g^2, sum of the new w^2. */
#include "kernels.h"

/* w (count) and v (count) updated in place, norms (2) or NULL, g (count) */
int hyfi_sgd_update_ref(float *w, float *v, float *norms, const float *g, const hyfi_sgd_args *a)
{
    double gg = 0, ww = 0;
    for (size_t i = 0; i < a->count; i++) {
        double gd = (double)g[i] + (double)a->weight_decay * (double)w[i];
        double vel = gd;
        if (a->momentum != 0.0f) vel = (double)a->momentum * (double)v[i] + gd;
        if (v) v[i] = (float)vel;
        w[i] = (float)((double)w[i] - (double)a->lr * vel);
        gg += (double)g[i] * (double)g[i];
        ww += (double)w[i] * (double)w[i];
    }
    if (norms) norms[0] = (float)gg, norms[1] = (float)ww;
    return 0;
}
