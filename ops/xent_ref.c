/* xent_ref.c: reference (specification) of softmax cross-entropy.
 * Forward, per row n of logits (N,K): p = softmax(z) computed stably (the row
 * max subtracted, the sum of exponentials in double), and
 * loss[0] = scale * sum_n -log p[n, label_n] (double accumulation). A label
 * outside [0,K) contributes nothing and makes the forward return -2 (its
 * probabilities are still written). Backward:
 * dlogits = scale * dloss[0] * (p - onehot(label)); rows with a bad label get
 * a zero gradient. */
#include "kernels.h"

#include <math.h>

/* loss (1), prob (N,K), logits (N,K), labels (N) */
int hyfi_xent_forward_ref(float *loss, float *prob, const float *logits,
                          const int32_t *labels, const hyfi_xent_args *a)
{
    int rc = 0;
    double total = 0.0;
    for (int n = 0; n < a->n; n++) {
        const float *z = logits + (size_t)n * a->k;
        float *p = prob + (size_t)n * a->k;
        double m = z[0];
        for (int c = 1; c < a->k; c++)
            if (z[c] > m) m = z[c];
        double s = 0.0;
        for (int c = 0; c < a->k; c++) s += exp((double)z[c] - m);
        double lse = m + log(s); /* log sum exp z */
        for (int c = 0; c < a->k; c++) p[c] = (float)exp((double)z[c] - lse);
        int32_t l = labels[n];
        if (l < 0 || l >= a->k) {
            rc = -2;
            continue;
        }
        total += lse - (double)z[l]; /* -log p[l] */
    }
    loss[0] = (float)(total * (double)a->scale);
    return rc;
}

/* dlogits (N,K) (+)= scale * dloss[0] * (prob (N,K) - onehot(labels (N))) */
int hyfi_xent_backward_ref(float *dlogits, const float *prob, const int32_t *labels,
                           const float *dloss, const hyfi_xent_args *a, int acc)
{
    double s = (double)a->scale * (double)dloss[0];
    for (int n = 0; n < a->n; n++) {
        int32_t l = labels[n];
        int bad = l < 0 || l >= a->k;
        for (int c = 0; c < a->k; c++) {
            size_t i = (size_t)n * a->k + c;
            double g = bad ? 0.0 : s * ((double)prob[i] - (c == l ? 1.0 : 0.0));
            dlogits[i] = acc ? (float)((double)dlogits[i] + g) : (float)g;
        }
    }
    return 0;
}
