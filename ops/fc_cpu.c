/* fc_cpu.c: CPU path of the fully connected layer with oneDNN inner product
 * on plain 2-D memories: x/dx (N,in) as nc, w/dw (out,in) as oi, b/db (out) as
 * x, y/dy (N,out) as nc. An (N,C,H,W) input is the same memory read as
 * (N, C*H*W). Inner product cannot accumulate into its backward outputs, so
 * with acc == 1 they are computed into hyfi_cpu_scratch() and added. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include "dnnl_common.h"
#include "kernels.h"

#include <stddef.h>

/* The plain descriptors of one fc shape. */
typedef struct {
    dnnl_memory_desc_t src, wei, bias, dst;
} fc_mds;

static int fc_make_mds(fc_mds *m, const hyfi_fc_args *a)
{
    dnnl_dim_t sd[2] = {a->n, a->in}, wd[2] = {a->out, a->in}, bd[1] = {a->out};
    dnnl_dim_t dd[2] = {a->n, a->out};
    int rc = hyfi_dnnl_md(&m->src, 2, sd, dnnl_nc);
    if (!rc) rc = hyfi_dnnl_md(&m->wei, 2, wd, dnnl_oi);
    if (!rc) rc = hyfi_dnnl_md(&m->bias, 1, bd, dnnl_x);
    if (!rc) rc = hyfi_dnnl_md(&m->dst, 2, dd, dnnl_nc);
    return rc;
}

/* Forward-training primitive descriptor: the primitive of the forward and the
 * hint of the backwards. */
static int fc_fwd_pd(dnnl_primitive_desc_t *pd, const fc_mds *m, int with_bias)
{
    dnnl_engine_t eng = hyfi_dnnl_engine();
    if (!eng) return -1;
    dnnl_inner_product_desc_t d;
    HYFI_DNNL_CHECK(dnnl_inner_product_forward_desc_init(&d, dnnl_forward_training, &m->src,
                                                         &m->wei, with_bias ? &m->bias : NULL,
                                                         &m->dst));
    HYFI_DNNL_CHECK(dnnl_primitive_desc_create(pd, &d, hyfi_dnnl_attr(), eng, NULL));
    return 0;
}

/* Wrap up to 4 user pointers in memories, run, destroy the memories. */
static int fc_run(const_dnnl_primitive_desc_t pd, int nargs, const int *kinds,
                  const dnnl_memory_desc_t *const *mds, void *const *ptrs)
{
    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
    dnnl_exec_arg_t args[4];
    int rc = 0;
    for (int i = 0; i < nargs && !rc; i++) {
        rc = hyfi_dnnl_mem(&mem[i], mds[i], ptrs[i]);
        args[i].arg = kinds[i];
        args[i].memory = mem[i];
    }
    if (!rc) rc = hyfi_dnnl_run(pd, nargs, args);
    for (int i = 0; i < nargs; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    return rc;
}

static void fc_add(float *dst, const float *src, size_t count)
{
    for (size_t i = 0; i < count; i++) dst[i] += src[i];
}

/* y (N,out) = x (N,in) w^T (out,in) + b (out) or no bias when b is NULL */
int hyfi_fc_forward_cpu(float *y, const float *x, const float *w, const float *b,
                        const hyfi_fc_args *a)
{
    fc_mds m;
    int rc = fc_make_mds(&m, a);
    if (rc) return rc;
    dnnl_primitive_desc_t pd;
    rc = fc_fwd_pd(&pd, &m, b != NULL);
    if (rc) return rc;
    int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[4] = {&m.src, &m.wei, &m.dst, &m.bias};
    void *ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
    rc = fc_run(pd, b ? 4 : 3, kinds, mds, ptrs);
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

/* dx (N,in) (+)= dy (N,out) w (out,in) */
int hyfi_fc_backward_data_cpu(float *dx, const float *dy, const float *w,
                              const hyfi_fc_args *a, int acc)
{
    size_t count = (size_t)a->n * a->in;
    float *out = dx;
    if (acc && !(out = hyfi_cpu_scratch(0, count))) return -1;
    fc_mds m;
    int rc = fc_make_mds(&m, a);
    if (rc) return rc;
    dnnl_primitive_desc_t hint, pd;
    rc = fc_fwd_pd(&hint, &m, 0);
    if (rc) return rc;
    dnnl_inner_product_desc_t d;
    dnnl_status_t st = dnnl_inner_product_backward_data_desc_init(&d, &m.src, &m.wei, &m.dst);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &d, hyfi_dnnl_attr(), hyfi_dnnl_engine(), hint);
    dnnl_primitive_desc_destroy(hint);
    if (st != dnnl_success) return -(int)st - 1;
    int kinds[3] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    const dnnl_memory_desc_t *mds[3] = {&m.dst, &m.wei, &m.src};
    void *ptrs[3] = {(void *)dy, (void *)w, out};
    rc = fc_run(pd, 3, kinds, mds, ptrs);
    dnnl_primitive_desc_destroy(pd);
    if (!rc && acc) fc_add(dx, out, count);
    return rc;
}

/* dw (out,in) (+)= dy^T x; db (out) (+)= sum_n dy, skipped when NULL;
 * dy (N,out), x (N,in) */
int hyfi_fc_backward_weight_cpu(float *dw, float *db, const float *dy, const float *x,
                                const hyfi_fc_args *a, int acc)
{
    size_t wcount = (size_t)a->out * a->in;
    float *wout = dw, *bout = db;
    if (acc) {
        if (!(wout = hyfi_cpu_scratch(0, wcount))) return -1;
        if (db && !(bout = hyfi_cpu_scratch(1, (size_t)a->out))) return -1;
    }
    fc_mds m;
    int rc = fc_make_mds(&m, a);
    if (rc) return rc;
    dnnl_primitive_desc_t hint, pd;
    rc = fc_fwd_pd(&hint, &m, db != NULL);
    if (rc) return rc;
    dnnl_inner_product_desc_t d;
    dnnl_status_t st = dnnl_inner_product_backward_weights_desc_init(
        &d, &m.src, &m.wei, db ? &m.bias : NULL, &m.dst);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &d, hyfi_dnnl_attr(), hyfi_dnnl_engine(), hint);
    dnnl_primitive_desc_destroy(hint);
    if (st != dnnl_success) return -(int)st - 1;
    int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS};
    const dnnl_memory_desc_t *mds[4] = {&m.src, &m.dst, &m.wei, &m.bias};
    void *ptrs[4] = {(void *)x, (void *)dy, wout, bout};
    rc = fc_run(pd, db ? 4 : 3, kinds, mds, ptrs);
    dnnl_primitive_desc_destroy(pd);
    if (!rc && acc) {
        fc_add(dw, wout, wcount);
        if (db) fc_add(db, bout, (size_t)a->out);
    }
    return rc;
}
