/* batchnorm_cpu.c: CPU batch normalisation with oneDNN (2.6 C API).
 *
 * Training forward: batch_normalization forward_training with
 * dnnl_use_scale | dnnl_use_shift on plain NCHW; oneDNN writes the batch mean
 * and the biased batch variance, and a small loop then updates the running
 * statistics with the unbiased variance (PyTorch momentum rule; factor 1 when
 * M = N*H*W == 1). Eval forward: forward_inference with dnnl_use_global_stats.
 * Backward: dnnl_backward with scale/shift (dx, dgamma, dbeta); for acc == 1 the
 * results go to per-thread scratch and are added to the outputs.
 * The formulas are those of batchnorm_ref.c.
 */
#include "kernels.h"
#include "dnnl_common.h"

#include <stddef.h>

/* Jump to the cleanup label of the enclosing function on a oneDNN failure. */
#define BN_TRY(call)                                                            \
    do {                                                                        \
        dnnl_status_t st_ = (call);                                             \
        if (st_ != dnnl_success) {                                              \
            rc = -(int)st_ - 1;                                                 \
            goto done;                                                          \
        }                                                                       \
    } while (0)
#define BN_TRY_INT(call)                                                        \
    do {                                                                        \
        if ((rc = (call)) != 0) goto done;                                      \
    } while (0)

enum { BN_SRC, BN_DST, BN_MEAN, BN_VAR, BN_SCALE, BN_SHIFT, BN_DDST, BN_DSRC, BN_DSCALE,
       BN_DSHIFT, BN_NMEM };

/* Descriptors of the data (N,C,H,W) and of a per-channel vector (C). */
static int bn_mds(dnnl_memory_desc_t *data, dnnl_memory_desc_t *chan,
                  const hyfi_batchnorm_args *a)
{
    dnnl_dim_t d4[4] = {a->n, a->c, a->h, a->w};
    dnnl_dim_t d1[1] = {a->c};
    int rc = hyfi_dnnl_md(data, 4, d4, dnnl_nchw);
    if (rc == 0) rc = hyfi_dnnl_md(chan, 1, d1, dnnl_x);
    return rc;
}

/* Forward primitive descriptor (training or inference). */
static int bn_fwd_pd(dnnl_primitive_desc_t *pd, const dnnl_memory_desc_t *data,
                     const hyfi_batchnorm_args *a, int train)
{
    dnnl_engine_t e = hyfi_dnnl_engine();
    if (!e) return -1;
    dnnl_batch_normalization_desc_t d;
    unsigned flags = dnnl_use_scale | dnnl_use_shift | (train ? 0u : dnnl_use_global_stats);
    HYFI_DNNL_CHECK(dnnl_batch_normalization_forward_desc_init(
        &d, train ? dnnl_forward_training : dnnl_forward_inference, data, a->eps, flags));
    HYFI_DNNL_CHECK(dnnl_primitive_desc_create(pd, &d, NULL, e, NULL));
    return 0;
}

static void bn_free(dnnl_memory_t *m, int n, dnnl_primitive_desc_t pd1, dnnl_primitive_desc_t pd2)
{
    for (int i = 0; i < n; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    if (pd1) dnnl_primitive_desc_destroy(pd1);
    if (pd2) dnnl_primitive_desc_destroy(pd2);
}

int hyfi_batchnorm_forward_train_cpu(float *y, float *mean, float *var, float *run_mean,
                                     float *run_var, const float *x, const float *gamma,
                                     const float *beta, const hyfi_batchnorm_args *a)
{
    dnnl_memory_t m[BN_NMEM] = {0};
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t data, chan;
    int rc;
    BN_TRY_INT(bn_mds(&data, &chan, a));
    BN_TRY_INT(bn_fwd_pd(&pd, &data, a, 1));
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SRC], &data, (void *)x));      /* x (N,C,H,W) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_DST], &data, y));              /* y (N,C,H,W) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_MEAN], &chan, mean));          /* mean (C) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_VAR], &chan, var));            /* var (C), biased */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SCALE], &chan, (void *)gamma)); /* gamma (C) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SHIFT], &chan, (void *)beta));  /* beta (C) */
    {
        dnnl_exec_arg_t args[6] = {
            {DNNL_ARG_SRC, m[BN_SRC]},     {DNNL_ARG_DST, m[BN_DST]},
            {DNNL_ARG_MEAN, m[BN_MEAN]},   {DNNL_ARG_VARIANCE, m[BN_VAR]},
            {DNNL_ARG_SCALE, m[BN_SCALE]}, {DNNL_ARG_SHIFT, m[BN_SHIFT]}};
        BN_TRY_INT(hyfi_dnnl_run(pd, 6, args));
    }
    {
        /* Running statistics: run_mean (C), run_var (C), unbiased variance. */
        const double M = (double)a->n * (double)a->h * (double)a->w;
        const float unbias = M > 1.0 ? (float)(M / (M - 1.0)) : 1.0f;
        const float mom = a->momentum, keep = 1.0f - a->momentum;
        for (int c = 0; c < a->c; c++) {
            run_mean[c] = keep * run_mean[c] + mom * mean[c];
            run_var[c] = keep * run_var[c] + mom * (var[c] * unbias);
        }
    }
    rc = 0;
done:
    bn_free(m, BN_NMEM, pd, NULL);
    return rc;
}

int hyfi_batchnorm_forward_eval_cpu(float *y, const float *x, const float *gamma,
                                    const float *beta, const float *run_mean,
                                    const float *run_var, const hyfi_batchnorm_args *a)
{
    dnnl_memory_t m[BN_NMEM] = {0};
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t data, chan;
    int rc;
    BN_TRY_INT(bn_mds(&data, &chan, a));
    BN_TRY_INT(bn_fwd_pd(&pd, &data, a, 0));
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SRC], &data, (void *)x));          /* x (N,C,H,W) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_DST], &data, y));                  /* y (N,C,H,W) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_MEAN], &chan, (void *)run_mean));  /* run_mean (C) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_VAR], &chan, (void *)run_var));    /* run_var (C) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SCALE], &chan, (void *)gamma));    /* gamma (C) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SHIFT], &chan, (void *)beta));     /* beta (C) */
    {
        dnnl_exec_arg_t args[6] = {
            {DNNL_ARG_SRC, m[BN_SRC]},     {DNNL_ARG_DST, m[BN_DST]},
            {DNNL_ARG_MEAN, m[BN_MEAN]},   {DNNL_ARG_VARIANCE, m[BN_VAR]},
            {DNNL_ARG_SCALE, m[BN_SCALE]}, {DNNL_ARG_SHIFT, m[BN_SHIFT]}};
        BN_TRY_INT(hyfi_dnnl_run(pd, 6, args));
    }
    rc = 0;
done:
    bn_free(m, BN_NMEM, pd, NULL);
    return rc;
}

int hyfi_batchnorm_backward_cpu(float *dx, float *dgamma, float *dbeta, const float *dy,
                                const float *x, const float *gamma, const float *mean,
                                const float *var, const hyfi_batchnorm_args *a, int acc)
{
    dnnl_memory_t m[BN_NMEM] = {0};
    dnnl_primitive_desc_t fpd = NULL, bpd = NULL;
    dnnl_memory_desc_t data, chan;
    const size_t count = (size_t)a->n * a->c * a->h * a->w;
    const size_t C = (size_t)a->c;
    float *odx = dx, *odg = dgamma, *odb = dbeta;
    int rc;
    if (acc) {
        odx = hyfi_cpu_scratch(0, count);
        odg = hyfi_cpu_scratch(1, C);
        odb = hyfi_cpu_scratch(2, C);
        if (!odx || !odg || !odb) return -1;
    }
    BN_TRY_INT(bn_mds(&data, &chan, a));
    BN_TRY_INT(bn_fwd_pd(&fpd, &data, a, 1)); /* hint for the backward */
    {
        dnnl_engine_t e = hyfi_dnnl_engine();
        dnnl_batch_normalization_desc_t d;
        BN_TRY(dnnl_batch_normalization_backward_desc_init(
            &d, dnnl_backward, &data, &data, a->eps, dnnl_use_scale | dnnl_use_shift));
        BN_TRY(dnnl_primitive_desc_create(&bpd, &d, NULL, e, fpd));
    }
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SRC], &data, (void *)x));       /* x (N,C,H,W) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_DDST], &data, (void *)dy));     /* dy (N,C,H,W) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_DSRC], &data, odx));            /* dx (N,C,H,W) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_MEAN], &chan, (void *)mean));   /* mean (C) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_VAR], &chan, (void *)var));     /* var (C), biased */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SCALE], &chan, (void *)gamma)); /* gamma (C) */
    /* oneDNN 2.6 demands a SHIFT input for the backward with dnnl_use_shift although
     * the gradients do not depend on beta: hand it gamma's (read-only) storage. */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_SHIFT], &chan, (void *)gamma));
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_DSCALE], &chan, odg));          /* dgamma (C) */
    BN_TRY_INT(hyfi_dnnl_mem(&m[BN_DSHIFT], &chan, odb));          /* dbeta (C) */
    {
        dnnl_exec_arg_t args[9] = {{DNNL_ARG_SHIFT, m[BN_SHIFT]},
            {DNNL_ARG_SRC, m[BN_SRC]},           {DNNL_ARG_DIFF_DST, m[BN_DDST]},
            {DNNL_ARG_MEAN, m[BN_MEAN]},         {DNNL_ARG_VARIANCE, m[BN_VAR]},
            {DNNL_ARG_SCALE, m[BN_SCALE]},       {DNNL_ARG_DIFF_SRC, m[BN_DSRC]},
            {DNNL_ARG_DIFF_SCALE, m[BN_DSCALE]}, {DNNL_ARG_DIFF_SHIFT, m[BN_DSHIFT]}};
        BN_TRY_INT(hyfi_dnnl_run(bpd, 9, args));
    }
    if (acc) {
        for (size_t i = 0; i < count; i++) dx[i] += odx[i];
        for (size_t c = 0; c < C; c++) {
            dgamma[c] += odg[c];
            dbeta[c] += odb[c];
        }
    }
    rc = 0;
done:
    bn_free(m, BN_NMEM, fpd, bpd);
    return rc;
}
