/* test_op_batchnorm.c: batch normalisation kernels.
 *   (1) CPU (oneDNN) vs reference: training forward (y, saved mean and biased
 *       variance, running statistics), eval forward, backward, on several
 *       shapes (odd sizes, batch 1 and 3, 1x1 spatial);
 *   (2) reference backward vs finite differences of the reference training
 *       forward (loss = dot(y, r)) for dx, dgamma and dbeta;
 *   (3) the acc bits (dx, dgamma/dbeta) accumulate on the reference and CPU paths;
 *   plus M = N*H*W == 1 (no division by zero in the unbiased factor).
 */
#include "kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, c, h, w;
} shape;

static const shape g_shapes[] = {
    {2, 3, 5, 7}, {1, 5, 7, 5}, {3, 4, 1, 1}, {1, 3, 2, 1}, {3, 7, 9, 9}, {4, 16, 8, 8},
    {1, 1, 15, 15}, {8, 32, 14, 14},
};

static hyfi_batchnorm_args make_args(shape s)
{
    hyfi_batchnorm_args a = {s.n, s.c, s.h, s.w, 1e-5f, 0.1f, 0};
    return a;
}

static void name_of(char *buf, size_t len, const char *what, shape s)
{
    snprintf(buf, len, "%s %dx%dx%dx%d", what, s.n, s.c, s.h, s.w);
}

/* (1) and (3): CPU vs reference, accumulation on both paths. */
static void test_cpu_vs_ref(shape s, uint64_t *seed)
{
    hyfi_batchnorm_args a = make_args(s);
    const size_t cnt = (size_t)s.n * s.c * s.h * s.w, C = (size_t)s.c;
    float *x = tu_alloc(cnt), *dy = tu_alloc(cnt), *g = tu_alloc(C), *b = tu_alloc(C);
    float *y_r = tu_alloc(cnt), *y_c = tu_alloc(cnt);
    float *mean_r = tu_alloc(C), *var_r = tu_alloc(C), *mean_c = tu_alloc(C), *var_c = tu_alloc(C);
    float *rm_r = tu_alloc(C), *rv_r = tu_alloc(C), *rm_c = tu_alloc(C), *rv_c = tu_alloc(C);
    float *dx_r = tu_alloc(cnt), *dx_c = tu_alloc(cnt), *dg_r = tu_alloc(C), *dg_c = tu_alloc(C);
    float *db_r = tu_alloc(C), *db_c = tu_alloc(C);
    float *dx0 = tu_alloc(cnt), *dg0 = tu_alloc(C), *db0 = tu_alloc(C);
    float *dx_a = tu_alloc(cnt), *dg_a = tu_alloc(C), *db_a = tu_alloc(C);
    float *want = tu_alloc(cnt);
    char nm[128];

    /* Per-channel offsets and scales so that the channels differ; the last of
     * four or more has a mean 60 standard deviations from 0, against
     * statistics that cancel (E[x^2] - E[x]^2 in float). */
    for (int n = 0; n < s.n; n++)
        for (int c = 0; c < s.c; c++) {
            float off = (float)c * 0.3f - 0.5f, sc = 0.5f + 0.1f * (float)c;
            if (c == s.c - 1 && s.c >= 4) off = 30.f;
            float *p = x + ((size_t)n * s.c + c) * s.h * s.w;
            for (int i = 0; i < s.h * s.w; i++) p[i] = off + sc * tu_uniform(seed, -1.f, 1.f);
        }
    tu_fill(dy, cnt, seed, -1.f, 1.f);
    tu_fill(g, C, seed, 0.5f, 1.5f);
    tu_fill(b, C, seed, -0.5f, 0.5f);
    tu_fill(rm_r, C, seed, -0.2f, 0.2f);
    tu_fill(rv_r, C, seed, 0.5f, 1.5f);
    memcpy(rm_c, rm_r, C * sizeof(float));
    memcpy(rv_c, rv_r, C * sizeof(float));

    /* Training forward. */
    int rc = hyfi_batchnorm_forward_train_ref(y_r, mean_r, var_r, rm_r, rv_r, x, g, b, &a);
    rc |= hyfi_batchnorm_forward_train_cpu(y_c, mean_c, var_c, rm_c, rv_c, x, g, b, &a, 0);
    tu_check(rc != 0, "batchnorm forward_train return codes");
    name_of(nm, sizeof nm, "bn fwd_train y", s);
    tu_check(tu_compare(nm, y_c, y_r, cnt, TU_TOL_CPU_VS_REF), nm);
    name_of(nm, sizeof nm, "bn fwd_train mean", s);
    tu_check(tu_compare(nm, mean_c, mean_r, C, TU_TOL_CPU_VS_REF), nm);
    name_of(nm, sizeof nm, "bn fwd_train var", s);
    tu_check(tu_compare(nm, var_c, var_r, C, TU_TOL_CPU_VS_REF), nm);
    name_of(nm, sizeof nm, "bn fwd_train run_mean", s);
    tu_check(tu_compare(nm, rm_c, rm_r, C, TU_TOL_CPU_VS_REF), nm);
    name_of(nm, sizeof nm, "bn fwd_train run_var", s);
    tu_check(tu_compare(nm, rv_c, rv_r, C, TU_TOL_CPU_VS_REF), nm);

    /* Eval forward with the (updated) running statistics. */
    rc = hyfi_batchnorm_forward_eval_ref(y_r, x, g, b, rm_r, rv_r, &a);
    rc |= hyfi_batchnorm_forward_eval_cpu(y_c, x, g, b, rm_r, rv_r, &a, 0);
    tu_check(rc != 0, "batchnorm forward_eval return codes");
    name_of(nm, sizeof nm, "bn fwd_eval y", s);
    tu_check(tu_compare(nm, y_c, y_r, cnt, TU_TOL_CPU_VS_REF), nm);

    /* Backward with the reference's saved statistics. */
    rc = hyfi_batchnorm_backward_ref(dx_r, dg_r, db_r, dy, x, g, b, mean_r, var_r, &a, 0);
    rc |= hyfi_batchnorm_backward_cpu(dx_c, dg_c, db_c, dy, x, g, b, mean_r, var_r, &a, 0, 0);
    tu_check(rc != 0, "batchnorm backward return codes");
    name_of(nm, sizeof nm, "bn bwd dx", s);
    tu_check(tu_compare(nm, dx_c, dx_r, cnt, TU_TOL_CPU_VS_REF), nm);
    /* dgamma and dbeta are sums of M = N*H*W terms of size O(1) that largely cancel:
     * float32 accumulation leaves an absolute error that grows like sqrt(M) times
     * the rounding unit, independent of the (possibly tiny) result, so the
     * absolute tolerance of these two is scaled by sqrt(M). */
    tu_tol tsum = TU_TOL_CPU_VS_REF;
    const double M = (double)s.n * s.h * s.w;
    tsum.what = "cpu-vs-ref, atol*sqrt(M)";
    tsum.atol *= M > 1 ? sqrt(M) : 1.0;
    name_of(nm, sizeof nm, "bn bwd dgamma", s);
    tu_check(tu_compare(nm, dg_c, dg_r, C, tsum), nm);
    name_of(nm, sizeof nm, "bn bwd dbeta", s);
    tu_check(tu_compare(nm, db_c, db_r, C, tsum), nm);

    /* acc bits on both paths: an accumulated output = previous content + the
     * acc = 0 result; a fresh one = the acc = 0 result. Both bits, and the
     * parameters alone (micro-batches sum dgamma/dbeta while dx starts fresh). */
    tu_fill(dx0, cnt, seed, -1.f, 1.f);
    tu_fill(dg0, C, seed, -1.f, 1.f);
    tu_fill(db0, C, seed, -1.f, 1.f);
    for (int mode = 0; mode < 2; mode++) {
        const int acc = mode == 0 ? HYFI_BN_ACC_DX | HYFI_BN_ACC_PARAMS : HYFI_BN_ACC_PARAMS;
        for (int path = 0; path < 2; path++) {
            memcpy(dx_a, dx0, cnt * sizeof(float));
            memcpy(dg_a, dg0, C * sizeof(float));
            memcpy(db_a, db0, C * sizeof(float));
            rc = path ? hyfi_batchnorm_backward_cpu(dx_a, dg_a, db_a, dy, x, g, b, mean_r, var_r,
                                                    &a,
                                                    acc, 0)
                      : hyfi_batchnorm_backward_ref(dx_a, dg_a, db_a, dy, x, g, b, mean_r, var_r,
                                                    &a,
                                                    acc);
            tu_check(rc != 0, "batchnorm backward acc return code");
            const float *base_dx = path ? dx_c : dx_r, *base_dg = path ? dg_c : dg_r;
            const float *base_db = path ? db_c : db_r;
            const float kx = (acc & HYFI_BN_ACC_DX) ? 1.f : 0.f;
            for (size_t i = 0; i < cnt; i++) want[i] = kx * dx0[i] + base_dx[i];
            name_of(nm, sizeof nm, path ? "bn bwd acc cpu dx" : "bn bwd acc ref dx", s);
            tu_check(tu_compare(nm, dx_a, want, cnt, TU_TOL_CPU_VS_REF), nm);
            for (size_t i = 0; i < C; i++) want[i] = dg0[i] + base_dg[i];
            name_of(nm, sizeof nm, path ? "bn bwd acc cpu dgamma" : "bn bwd acc ref dgamma", s);
            tu_check(tu_compare(nm, dg_a, want, C, TU_TOL_CPU_VS_REF), nm);
            for (size_t i = 0; i < C; i++) want[i] = db0[i] + base_db[i];
            name_of(nm, sizeof nm, path ? "bn bwd acc cpu dbeta" : "bn bwd acc ref dbeta", s);
            tu_check(tu_compare(nm, db_a, want, C, TU_TOL_CPU_VS_REF), nm);
        }
    }

    free(x); free(dy); free(g); free(b); free(y_r); free(y_c);
    free(mean_r); free(var_r); free(mean_c); free(var_c);
    free(rm_r); free(rv_r); free(rm_c); free(rv_c);
    free(dx_r); free(dx_c); free(dg_r); free(dg_c); free(db_r); free(db_c);
    free(dx0); free(dg0); free(db0); free(dx_a); free(dg_a); free(db_a); free(want);
}

/* (2) finite differences: loss = dot(y, r) of the reference training forward. */
typedef struct {
    hyfi_batchnorm_args a;
    float *x, *g, *b, *r, *y, *mean, *var, *rm, *rv;
    size_t cnt;
} fd_ctx;

static double fd_loss(void *p)
{
    fd_ctx *c = p;
    hyfi_batchnorm_forward_train_ref(c->y, c->mean, c->var, c->rm, c->rv, c->x, c->g, c->b,
                                     &c->a);
    return tu_dot(c->y, c->r, c->cnt);
}

/* x (N,C,H,W) for the finite differences: per channel, the M values are evenly
 * spaced over [-1.5, 1.5] in random order with a small jitter, so that even a
 * channel of 2 or 3 values has a variance far from 0 and the forward stays
 * close to linear over +-eps. */
static void spread_fill(float *x, shape s, uint64_t *seed)
{
    const int hw = s.h * s.w, M = s.n * hw;
    int *perm = malloc((size_t)M * sizeof *perm);
    if (!perm) exit(99);
    for (int c = 0; c < s.c; c++) {
        for (int i = 0; i < M; i++) perm[i] = i;
        for (int i = M - 1; i > 0; i--) {
            int j = tu_randint(seed, 0, i), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        const float step = 3.f / (float)M;
        for (int i = 0; i < M; i++) {
            float v = -1.5f + step * ((float)perm[i] + 0.5f) + tu_uniform(seed, -0.25f, 0.25f) * step;
            x[((size_t)(i / hw) * s.c + c) * hw + i % hw] = v;
        }
    }
    free(perm);
}

static void test_fd(shape s, uint64_t *seed)
{
    fd_ctx c;
    c.a = make_args(s);
    c.cnt = (size_t)s.n * s.c * s.h * s.w;
    const size_t C = (size_t)s.c;
    c.x = tu_alloc(c.cnt); c.r = tu_alloc(c.cnt); c.y = tu_alloc(c.cnt);
    c.g = tu_alloc(C); c.b = tu_alloc(C); c.mean = tu_alloc(C); c.var = tu_alloc(C);
    c.rm = tu_alloc(C); c.rv = tu_alloc(C);
    float *dx = tu_alloc(c.cnt), *dg = tu_alloc(C), *db = tu_alloc(C);
    char nm[128];
    spread_fill(c.x, s, seed);
    tu_fill(c.r, c.cnt, seed, -1.f, 1.f);
    tu_fill(c.g, C, seed, 0.5f, 1.5f);
    tu_fill(c.b, C, seed, -0.5f, 0.5f);
    fd_loss(&c);
    hyfi_batchnorm_backward_ref(dx, dg, db, c.r, c.x, c.g, c.b, c.mean, c.var, &c.a, 0);
    name_of(nm, sizeof nm, "bn fd dx", s);
    tu_check(tu_grad_check(nm, c.x, c.cnt, dx, fd_loss, &c, 64, 1e-2f, TU_TOL_FD, seed), nm);
    name_of(nm, sizeof nm, "bn fd dgamma", s);
    tu_check(tu_grad_check(nm, c.g, C, dg, fd_loss, &c, -1, 1e-2f, TU_TOL_FD, seed), nm);
    name_of(nm, sizeof nm, "bn fd dbeta", s);
    tu_check(tu_grad_check(nm, c.b, C, db, fd_loss, &c, -1, 1e-2f, TU_TOL_FD, seed), nm);
    free(c.x); free(c.r); free(c.y); free(c.g); free(c.b); free(c.mean); free(c.var);
    free(c.rm); free(c.rv); free(dx); free(dg); free(db);
}

/* M == 1: variance 0, unbiased factor 1; running stats stay finite on both paths. */
static void test_m1(void)
{
    hyfi_batchnorm_args a = {1, 2, 1, 1, 1e-5f, 0.1f, 0};
    float x[2] = {0.7f, -1.3f}, g[2] = {1.f, 2.f}, b[2] = {0.1f, -0.2f};
    for (int path = 0; path < 2; path++) {
        float y[2], mean[2], var[2], rm[2] = {0.5f, -0.5f}, rv[2] = {1.f, 2.f};
        int rc = path ? hyfi_batchnorm_forward_train_cpu(y, mean, var, rm, rv, x, g, b, &a, 0)
                      : hyfi_batchnorm_forward_train_ref(y, mean, var, rm, rv, x, g, b, &a);
        int bad = rc != 0;
        for (int c = 0; c < 2; c++) {
            float want_rm = 0.9f * (c ? -0.5f : 0.5f) + 0.1f * x[c];
            float want_rv = 0.9f * (c ? 2.f : 1.f);
            bad |= !isfinite(rm[c]) || !isfinite(rv[c]) || !isfinite(y[c]);
            bad |= fabsf(rm[c] - want_rm) > 1e-6f || fabsf(rv[c] - want_rv) > 1e-6f;
            bad |= fabsf(var[c]) > 1e-6f || fabsf(y[c] - b[c]) > 1e-5f;
        }
        printf("%-4s bn M==1 running stats %s\n", bad ? "FAIL" : "ok", path ? "cpu" : "ref");
        tu_check(bad, path ? "bn M==1 cpu" : "bn M==1 ref");
    }
}

/* Blocked layouts (nChw8c / nChw16c, ops/layout_ref.c): the CPU kernels on
 * blocked x and dy against the reference on plain ones, the outputs brought
 * back to NCHW; dx also accumulated. */
static void test_blocked(shape s, int B, uint64_t *seed)
{
    const size_t cnt = (size_t)s.n * s.c * s.h * s.w, C = (size_t)s.c;
    const int hw = s.h * s.w;
    hyfi_batchnorm_args a = {s.n, s.c, s.h, s.w, 1e-5f, 0.1f, 0};
    float *x = malloc(cnt * 4), *dy = malloc(cnt * 4), *xb = malloc(cnt * 4);
    float *dyb = malloc(cnt * 4), *yr = malloc(cnt * 4), *yb = malloc(cnt * 4);
    float *yp = malloc(cnt * 4), *dxr = malloc(cnt * 4), *dxb = malloc(cnt * 4);
    float *g = malloc(C * 4), *b = malloc(C * 4), *st[8], *dgr = malloc(C * 4);
    float *dbr = malloc(C * 4), *dgb = malloc(C * 4), *dbb = malloc(C * 4);
    for (int i = 0; i < 8; i++) st[i] = calloc(C, 4);
    tu_fill(x, cnt, seed, -1.f, 3.f);
    tu_fill(dy, cnt, seed, -1.f, 1.f);
    tu_fill(g, C, seed, 0.5f, 1.5f);
    tu_fill(b, C, seed, -0.5f, 0.5f);
    for (size_t i = 0; i < C; i++) st[3][i] = st[7][i] = 1.f; /* running variances */
    hyfi_layout_to_blocked(xb, x, s.n, s.c, hw, B);
    hyfi_layout_to_blocked(dyb, dy, s.n, s.c, hw, B);
    char nm[96];
    int rc = hyfi_batchnorm_forward_train_ref(yr, st[0], st[1], st[2], st[3], x, g, b, &a);
    rc |= hyfi_batchnorm_forward_train_cpu(yb, st[4], st[5], st[6], st[7], xb, g, b, &a, B);
    hyfi_layout_to_plain(yp, yb, s.n, s.c, hw, B);
    snprintf(nm, sizeof nm, "bn blocked %d fwd_train y %dx%dx%dx%d", B, s.n, s.c, s.h, s.w);
    tu_check(rc != 0 || tu_compare(nm, yp, yr, cnt, TU_TOL_CPU_VS_REF), nm);
    for (int k = 0; k < 4; k++) {
        snprintf(nm, sizeof nm, "bn blocked %d fwd_train statistic %d", B, k);
        tu_check(tu_compare(nm, st[4 + k], st[k], C, TU_TOL_CPU_VS_REF), nm);
    }
    rc = hyfi_batchnorm_forward_eval_ref(yr, x, g, b, st[2], st[3], &a);
    rc |= hyfi_batchnorm_forward_eval_cpu(yb, xb, g, b, st[2], st[3], &a, B);
    hyfi_layout_to_plain(yp, yb, s.n, s.c, hw, B);
    snprintf(nm, sizeof nm, "bn blocked %d fwd_eval y", B);
    tu_check(rc != 0 || tu_compare(nm, yp, yr, cnt, TU_TOL_CPU_VS_REF), nm);
    tu_tol tsum = TU_TOL_CPU_VS_REF;
    tsum.atol *= sqrt((double)s.n * hw);
    for (int acc = 0; acc < 2; acc++) {
        tu_fill(dxr, cnt, seed, -1.f, 1.f);
        hyfi_layout_to_blocked(dxb, dxr, s.n, s.c, hw, B);
        const int bits = acc ? HYFI_BN_ACC_DX : 0;
        rc = hyfi_batchnorm_backward_ref(dxr, dgr, dbr, dy, x, g, b, st[0], st[1], &a, bits);
        rc |= hyfi_batchnorm_backward_cpu(dxb, dgb, dbb, dyb, xb, g, b, st[0], st[1], &a, bits,
                                          B);
        hyfi_layout_to_plain(yp, dxb, s.n, s.c, hw, B);
        snprintf(nm, sizeof nm, "bn blocked %d bwd dx (acc %d)", B, acc);
        tu_check(rc != 0 || tu_compare(nm, yp, dxr, cnt, TU_TOL_CPU_VS_REF), nm);
        snprintf(nm, sizeof nm, "bn blocked %d bwd dgamma", B);
        tu_check(tu_compare(nm, dgb, dgr, C, tsum), nm);
        snprintf(nm, sizeof nm, "bn blocked %d bwd dbeta", B);
        tu_check(tu_compare(nm, dbb, dbr, C, tsum), nm);
    }
    /* a channel count that is not a multiple of the block is refused */
    hyfi_batchnorm_args odd = a;
    odd.c = B + 1;
    tu_check(hyfi_batchnorm_forward_eval_cpu(yb, xb, g, b, st[2], st[3], &odd, B) == 0,
             "bn blocked: C not a multiple of the block refused");
    free(x), free(dy), free(xb), free(dyb), free(yr), free(yb), free(yp), free(dxr), free(dxb);
    free(g), free(b), free(dgr), free(dbr), free(dgb), free(dbb);
    for (int i = 0; i < 8; i++) free(st[i]);
}

/* Batch norm with its ReLU fused (a.relu): on the CPU path (NCHW, B = 0, or
 * blocked), (1) the fused forward's output is the plain forward's followed by
 * ReLU, bit for bit; (2) the fused backward equals ReLU's backward followed
 * by the plain backward, bit for bit; (3) the forwards and
 * the backward match the reference's fused op; (4) dx also accumulated. */
static void test_relu(shape s, int B, uint64_t *seed)
{
    const size_t cnt = (size_t)s.n * s.c * s.h * s.w, C = (size_t)s.c;
    const int hw = s.h * s.w;
    hyfi_batchnorm_args a = {s.n, s.c, s.h, s.w, 1e-5f, 0.1f, 1}, plain = a;
    plain.relu = 0;
    float *x = malloc(cnt * 4), *dy = malloc(cnt * 4), *xk = malloc(cnt * 4);
    float *dyk = malloc(cnt * 4), *yk = malloc(cnt * 4), *yr = malloc(cnt * 4);
    float *t = malloc(cnt * 4), *dxk = malloc(cnt * 4), *dxc = malloc(cnt * 4);
    float *dxr = malloc(cnt * 4), *g = malloc(C * 4), *b = malloc(C * 4), *st[8];
    float *dg[3], *db[3];
    for (int i = 0; i < 8; i++) st[i] = calloc(C, 4);
    for (int i = 0; i < 3; i++) dg[i] = calloc(C, 4), db[i] = calloc(C, 4);
    tu_fill(x, cnt, seed, -1.f, 3.f);
    tu_fill(dy, cnt, seed, -1.f, 1.f);
    tu_fill(g, C, seed, 0.5f, 1.5f);
    tu_fill(b, C, seed, -0.5f, 0.5f);
    for (size_t i = 0; i < C; i++) st[3][i] = st[7][i] = 1.f;
    /* the CPU path's own layout: k = kernel's */
#define TO_K(dst, src)                                                         \
    (B ? hyfi_layout_to_blocked(dst, src, s.n, s.c, hw, B) : (void)memcpy(dst, src, cnt * 4))
#define TO_PLAIN(dst, src)                                                     \
    (B ? hyfi_layout_to_plain(dst, src, s.n, s.c, hw, B) : (void)memcpy(dst, src, cnt * 4))
    TO_K(xk, x);
    TO_K(dyk, dy);
    char nm[112];
    int rc = hyfi_batchnorm_forward_train_ref(yr, st[0], st[1], st[2], st[3], x, g, b, &a);
    rc |= hyfi_batchnorm_forward_train_cpu(yk, st[4], st[5], st[6], st[7], xk, g, b, &a, B);
    TO_PLAIN(t, yk);
    snprintf(nm, sizeof nm, "bn+relu B=%d fwd_train y %dx%dx%dx%d", B, s.n, s.c, s.h, s.w);
    tu_check(rc != 0 || tu_compare(nm, t, yr, cnt, TU_TOL_CPU_VS_REF), nm);
    int neg = 0;
    for (size_t i = 0; i < cnt; i++) neg += t[i] < 0.f;
    tu_check(neg != 0, "bn+relu: no negative output");
    {   /* the plain forward, then ReLU: the same bits */
        float *m2 = calloc(C, 4), *v2 = calloc(C, 4), *r2 = calloc(C, 4), *q2 = calloc(C, 4);
        for (size_t i = 0; i < C; i++) q2[i] = 1.f;
        rc = hyfi_batchnorm_forward_train_cpu(dxc, m2, v2, r2, q2, xk, g, b, &plain, B);
        rc |= hyfi_relu_forward_cpu(dxc, dxc, cnt);
        snprintf(nm, sizeof nm, "bn+relu B=%d fwd_train == bn fwd + relu fwd (bits)", B);
        const int same = rc == 0 && !memcmp(dxc, yk, cnt * 4) && !memcmp(m2, st[4], C * 4) &&
                         !memcmp(v2, st[5], C * 4);
        printf("%-4s %s\n", same ? "ok" : "FAIL", nm);
        tu_check(!same, nm);
        free(m2), free(v2), free(r2), free(q2);
    }
    for (int acc = 0; acc < 2; acc++) {
        const int bits = acc ? HYFI_BN_ACC_DX | HYFI_BN_ACC_PARAMS : 0;
        tu_fill(dxr, cnt, seed, -1.f, 1.f);
        TO_K(dxk, dxr);
        memcpy(dxc, dxk, cnt * 4);
        for (int i = 0; i < 3; i++) tu_fill(dg[i], C, seed, -1.f, 1.f);
        memcpy(dg[1], dg[0], C * 4), memcpy(dg[2], dg[0], C * 4);
        memcpy(db[0], dg[0], C * 4), memcpy(db[1], dg[0], C * 4), memcpy(db[2], dg[0], C * 4);
        /* fused */
        rc = hyfi_batchnorm_backward_cpu(dxk, dg[0], db[0], dyk, xk, g, yk, st[4], st[5], &a,
                                         bits, B);
        /* ReLU's backward on the fused forward's output, then the plain backward */
        rc |= hyfi_relu_backward_cpu(t, dyk, yk, cnt, 0);
        rc |= hyfi_batchnorm_backward_cpu(dxc, dg[1], db[1], t, xk, g, NULL, st[4], st[5], &plain,
                                          bits, B);
        snprintf(nm, sizeof nm, "bn+relu B=%d bwd: fused == relu bwd + bn bwd (acc %d)", B, acc);
        const int same = rc == 0 && !memcmp(dxk, dxc, cnt * 4) && !memcmp(dg[0], dg[1], C * 4) &&
                         !memcmp(db[0], db[1], C * 4);
        printf("%-4s %s\n", same ? "ok" : "FAIL", nm);
        tu_check(!same, nm);
        /* against the reference's fused op (its statistics) */
        rc = hyfi_batchnorm_backward_ref(dxr, dg[2], db[2], dy, x, g, yr, st[0], st[1], &a, bits);
        TO_PLAIN(t, dxk);
        snprintf(nm, sizeof nm, "bn+relu B=%d bwd dx vs ref (acc %d)", B, acc);
        tu_check(rc != 0 || tu_compare(nm, t, dxr, cnt, TU_TOL_CPU_VS_REF), nm);
        tu_tol tsum = TU_TOL_CPU_VS_REF;
        tsum.atol *= sqrt((double)s.n * hw);
        snprintf(nm, sizeof nm, "bn+relu B=%d bwd dgamma vs ref", B);
        tu_check(tu_compare(nm, dg[0], dg[2], C, tsum), nm);
        snprintf(nm, sizeof nm, "bn+relu B=%d bwd dbeta vs ref", B);
        tu_check(tu_compare(nm, db[0], db[2], C, tsum), nm);
    }
    rc = hyfi_batchnorm_forward_eval_ref(yr, x, g, b, st[2], st[3], &a);
    rc |= hyfi_batchnorm_forward_eval_cpu(yk, xk, g, b, st[2], st[3], &a, B);
    TO_PLAIN(t, yk);
    snprintf(nm, sizeof nm, "bn+relu B=%d fwd_eval y", B);
    tu_check(rc != 0 || tu_compare(nm, t, yr, cnt, TU_TOL_CPU_VS_REF), nm);
    tu_check(hyfi_batchnorm_backward_cpu(dxk, dg[0], db[0], dyk, xk, g, NULL, st[4], st[5], &a,
                                         0, B) == 0,
             "bn+relu: backward without y refused");
#undef TO_K
#undef TO_PLAIN
    free(x), free(dy), free(xk), free(dyk), free(yk), free(yr), free(t), free(dxk), free(dxc);
    free(dxr), free(g), free(b);
    for (int i = 0; i < 8; i++) free(st[i]);
    for (int i = 0; i < 3; i++) free(dg[i]), free(db[i]);
}

int main(void)
{
    uint64_t seed = getenv("TU_SEED") ? strtoull(getenv("TU_SEED"), NULL, 0) : 0x5EEDB47C4A11ull;
    for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; i++)
        test_cpu_vs_ref(g_shapes[i], &seed);
    const shape fd_shapes[] = {{2, 3, 5, 7}, {1, 2, 3, 1}, {3, 4, 1, 1}, {2, 2, 3, 3}};
    for (size_t i = 0; i < sizeof fd_shapes / sizeof fd_shapes[0]; i++)
        test_fd(fd_shapes[i], &seed);
    test_m1();
    const shape blk_shapes[] = {{2, 32, 5, 7}, {3, 16, 4, 4}, {4, 16, 1, 1}};
    for (size_t i = 0; i < sizeof blk_shapes / sizeof blk_shapes[0]; i++) {
        test_blocked(blk_shapes[i], 16, &seed);
        test_blocked(blk_shapes[i], 8, &seed);
    }
    const shape relu_shapes[] = {{2, 32, 5, 7}, {3, 16, 4, 4}, {4, 16, 1, 1}, {8, 32, 14, 14}};
    for (size_t i = 0; i < sizeof relu_shapes / sizeof relu_shapes[0]; i++)
        for (int B = 0; B <= 16; B += 8) test_relu(relu_shapes[i], B, &seed);
    return tu_finish();
}
