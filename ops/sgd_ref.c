/* sgd_ref.c: reference (specification) of the PyTorch SGD step with momentum
 * and weight decay (no dampening, no Nesterov), element by element in double:
 *   g' = g + wd * w
 *   v  = momentum * v + g'      (v = g' when momentum == 0; v may then be NULL)
 *   w  = w - lr * v
 * With v starting at zero this matches PyTorch's first step (buf = g'). */
#include "kernels.h"

/* w (count) and v (count) updated in place, g (count) */
int hyfi_sgd_update_ref(float *w, float *v, const float *g, const hyfi_sgd_args *a)
{
    for (size_t i = 0; i < a->count; i++) {
        double gd = (double)g[i] + (double)a->weight_decay * (double)w[i];
        double vel = gd;
        if (a->momentum != 0.0f) vel = (double)a->momentum * (double)v[i] + gd;
        if (v) v[i] = (float)vel;
        w[i] = (float)((double)w[i] - (double)a->lr * vel);
    }
    return 0;
}
