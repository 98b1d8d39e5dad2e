/* fc_ref.c: reference (specification) of the fully connected layer
 * y = x w^T + b, with x (N,in) (an (N,C,H,W) tensor read as (N, C*H*W)),
 * w (out,in), b (out); and its backwards dx = dy w, dw = dy^T x,
 * db = sum over the batch of dy. Sums run in double. */
#include "kernels.h"

/* y (N,out) = x (N,in) w^T (out,in) + b (out) or no bias when b is NULL */
int hyfi_fc_forward_ref(float *y, const float *x, const float *w, const float *b,
                        const hyfi_fc_args *a)
{
    for (int n = 0; n < a->n; n++)
        for (int o = 0; o < a->out; o++) {
            double s = b ? (double)b[o] : 0.0;
            for (int i = 0; i < a->in; i++)
                s += (double)x[(size_t)n * a->in + i] * (double)w[(size_t)o * a->in + i];
            y[(size_t)n * a->out + o] = (float)s;
        }
    return 0;
}

/* dx (N,in) (+)= dy (N,out) w (out,in) */
int hyfi_fc_backward_data_ref(float *dx, const float *dy, const float *w,
                              const hyfi_fc_args *a, int acc)
{
    for (int n = 0; n < a->n; n++)
        for (int i = 0; i < a->in; i++) {
            double s = 0.0;
            for (int o = 0; o < a->out; o++)
                s += (double)dy[(size_t)n * a->out + o] * (double)w[(size_t)o * a->in + i];
            size_t k = (size_t)n * a->in + i;
            dx[k] = acc ? (float)((double)dx[k] + s) : (float)s;
        }
    return 0;
}

/* dw (out,in) (+)= dy^T (out,N) x (N,in); db (out) (+)= sum_n dy (N,out), skipped when NULL */
int hyfi_fc_backward_weight_ref(float *dw, float *db, const float *dy, const float *x,
                                const hyfi_fc_args *a, int acc)
{
    for (int o = 0; o < a->out; o++) {
        for (int i = 0; i < a->in; i++) {
            double s = 0.0;
            for (int n = 0; n < a->n; n++)
                s += (double)dy[(size_t)n * a->out + o] * (double)x[(size_t)n * a->in + i];
            size_t k = (size_t)o * a->in + i;
            dw[k] = acc ? (float)((double)dw[k] + s) : (float)s;
        }
        if (db) {
            double s = 0.0;
            for (int n = 0; n < a->n; n++) s += (double)dy[(size_t)n * a->out + o];
            db[o] = acc ? (float)((double)db[o] + s) : (float)s;
        }
    }
    return 0;
}
