/* xent_cpu.c: CPU path of softmax cross-entropy, plain C (oneDNN's softmax
 * would not give the loss): per row the max, the exponentials in float (one
 * pass, stored in prob), their sum, then a scale; the loss sums the per-row
 * -log p in double. Same contract as xent_ref.c (bad labels: -2 from the
 * forward, zero gradient in the backward). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include "kernels.h"

#include <math.h>

/* loss (1), prob (N,K), logits (N,K), labels (N) */
int hyfi_xent_forward_cpu(float *loss, float *prob, const float *logits,
                          const int32_t *labels, const hyfi_xent_args *a)
{
    int rc = 0, k = a->k;
    double total = 0.0;
    for (int n = 0; n < a->n; n++) {
        const float *z = logits + (size_t)n * k;
        float *p = prob + (size_t)n * k;
        float m = z[0];
        for (int c = 1; c < k; c++) m = z[c] > m ? z[c] : m;
        float s = 0.0f;
        for (int c = 0; c < k; c++) {
            float e = expf(z[c] - m);
            p[c] = e;
            s += e;
        }
        float inv = 1.0f / s;
        for (int c = 0; c < k; c++) p[c] *= inv;
        int32_t l = labels[n];
        if (l < 0 || l >= k) {
            rc = -2;
            continue;
        }
        total += (double)logf(s) - (double)(z[l] - m); /* -log p[l] */
    }
    loss[0] = (float)(total * (double)a->scale);
    return rc;
}

/* dlogits (N,K) (+)= scale * dloss[0] * (prob (N,K) - onehot(labels (N))) */
int hyfi_xent_backward_cpu(float *dlogits, const float *prob, const int32_t *labels,
                           const float *dloss, const hyfi_xent_args *a, int acc)
{
    int k = a->k;
    float s = a->scale * dloss[0];
    for (int n = 0; n < a->n; n++) {
        float *d = dlogits + (size_t)n * k;
        const float *p = prob + (size_t)n * k;
        int32_t l = labels[n];
        if (l < 0 || l >= k) {
            if (!acc)
                for (int c = 0; c < k; c++) d[c] = 0.0f;
            continue;
        }
        if (acc) {
            for (int c = 0; c < k; c++) d[c] += s * (p[c] - (c == l ? 1.0f : 0.0f));
        } else {
            for (int c = 0; c < k; c++) d[c] = s * (p[c] - (c == l ? 1.0f : 0.0f));
        }
    }
    return 0;
}
