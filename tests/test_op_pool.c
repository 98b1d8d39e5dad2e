/* test_op_pool.c: pooling kernels (max, average with count_include_pad 0/1,
 * global average).
 *   (1) CPU vs reference, forward and backward, on odd shapes: 3x3 s2 p1 on
 *       7x9 and 15x15, 2x2 s2 p0 on 8x8 and 7x7, 3x3 s1 p1 (AmoebaNet), 3x3 s2
 *       p0, 3x3 s3 p1, asymmetric 3x2 s(2,1) p(1,0), global average on 5x3, 7x7,
 *       1x1; batch 1 and 3, odd channels;
 *   (2) reference backwards vs finite differences of the reference forwards
 *       (loss = dot(y, r)); max pooling on distinct values (no ties within eps);
 *   (3) acc = 1 accumulates on the reference and CPU paths;
 *   (4) the max-pool tie rule: all-equal windows and all-negative padded
 *       windows give the gradient to the first in-image maximum, CPU == ref
 *       exactly on heavily tied data;
 *   (5) max and average pooling on blocked layouts equal the NCHW loops exactly
 *       (global average pooling: against the reference).
 */
#include "kernels.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TU_TOL_EXACT ((tu_tol){"exact", 0.0, 0.0})

typedef struct {
    int n, c, h, w, kh, kw, sh, sw, ph, pw;
} pcase;

static const pcase g_cases[] = {
    {3, 5, 7, 9, 3, 3, 2, 2, 1, 1},    {1, 3, 15, 15, 3, 3, 2, 2, 1, 1},
    {2, 4, 8, 8, 2, 2, 2, 2, 0, 0},    {3, 3, 7, 7, 2, 2, 2, 2, 0, 0},
    {1, 5, 7, 5, 3, 3, 1, 1, 1, 1},    {2, 3, 9, 9, 3, 3, 2, 2, 0, 0},
    {2, 16, 14, 14, 3, 3, 1, 1, 1, 1}, {1, 2, 6, 5, 3, 3, 3, 3, 1, 1},
    {1, 2, 9, 11, 3, 2, 2, 1, 1, 0},
    {2, 32, 33, 33, 3, 3, 2, 2, 1, 1}, /* above 64K elements: the planes split over threads */
};

static hyfi_pool_args make_args(pcase p, int cip)
{
    hyfi_pool_args a = {p.n, p.c, p.h, p.w, 0, 0, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, cip, 0};
    a.ho = (p.h + 2 * p.ph - p.kh) / p.sh + 1;
    a.wo = (p.w + 2 * p.pw - p.kw) / p.sw + 1;
    return a;
}

static void name_of(char *buf, size_t len, const char *what, const hyfi_pool_args *a)
{
    snprintf(buf, len, "%s %dx%dx%dx%d k%dx%d s%dx%d p%dx%d", what, a->n, a->c, a->h, a->w,
             a->kh, a->kw, a->sh, a->sw, a->ph, a->pw);
}

/* Distinct values: a random permutation of (i - n/2) * step, i < n. */
static void fill_distinct(float *x, size_t n, float step, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) x[i] = ((float)i - (float)(n / 2)) * step;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(tu_next(seed) % (i + 1));
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

/* ---------------------------------------------------------------- FD ctx */
typedef struct {
    hyfi_pool_args a;
    int kind; /* 0 max, 1 avg, 2 gap */
    float *x, *y, *r;
    size_t ny;
} fd_ctx;

static double fd_loss(void *p)
{
    fd_ctx *c = p;
    if (c->kind == 0) hyfi_maxpool_forward_ref(c->y, c->x, &c->a);
    else if (c->kind == 1) hyfi_avgpool_forward_ref(c->y, c->x, &c->a);
    else hyfi_gap_forward_ref(c->y, c->x, &c->a);
    return tu_dot(c->y, c->r, c->ny);
}

/* One kind (0 max, 1 avg, 2 gap) on one geometry: CPU vs ref, acc, FD. */
static void test_kind(const hyfi_pool_args *a, int kind, uint64_t *seed)
{
    const size_t nx = (size_t)a->n * a->c * a->h * a->w;
    const size_t ny = (size_t)a->n * a->c * a->ho * a->wo;
    const char *kn = kind == 0 ? "maxpool" : kind == 1 ? (a->count_include_pad ? "avgpool cip1"
                                                                                : "avgpool cip0")
                                           : "gap";
    float *x = tu_alloc(nx), *dy = tu_alloc(ny), *y_r = tu_alloc(ny), *y_c = tu_alloc(ny);
    float *dx_r = tu_alloc(nx), *dx_c = tu_alloc(nx), *dx0 = tu_alloc(nx), *dx_a = tu_alloc(nx);
    float *want = tu_alloc(nx);
    char nm[160], what[64];
    int rc;

    if (kind == 0) /* distinct within each plane (windows never cross planes) */
        for (size_t q = 0; q < (size_t)a->n * a->c; q++)
            fill_distinct(x + q * a->h * a->w, (size_t)a->h * a->w, 0.01f, seed);
    else tu_fill(x, nx, seed, -1.f, 1.f);
    tu_fill(dy, ny, seed, -1.f, 1.f);
    tu_fill(dx0, nx, seed, -1.f, 1.f);

    /* forward */
    if (kind == 0) rc = hyfi_maxpool_forward_ref(y_r, x, a) | hyfi_maxpool_forward_cpu(y_c, x, a);
    else if (kind == 1)
        rc = hyfi_avgpool_forward_ref(y_r, x, a) | hyfi_avgpool_forward_cpu(y_c, x, a);
    else rc = hyfi_gap_forward_ref(y_r, x, a) | hyfi_gap_forward_cpu(y_c, x, a);
    snprintf(what, sizeof what, "%s fwd", kn);
    name_of(nm, sizeof nm, what, a);
    if (rc) printf("FAIL %s: rc %d\n", nm, rc);
    tu_check(rc != 0 || tu_compare(nm, y_c, y_r, ny, TU_TOL_CPU_VS_REF), nm);

    /* backward, acc = 0 and 1 on both paths */
    for (int path = 0; path < 2; path++) {
        for (int acc = 0; acc < 2; acc++) {
            float *out = acc ? dx_a : (path ? dx_c : dx_r);
            if (acc) memcpy(dx_a, dx0, nx * sizeof(float));
            if (kind == 0)
                rc = path ? hyfi_maxpool_backward_cpu(out, dy, x, a, acc)
                          : hyfi_maxpool_backward_ref(out, dy, x, a, acc);
            else if (kind == 1)
                rc = path ? hyfi_avgpool_backward_cpu(out, dy, a, acc)
                          : hyfi_avgpool_backward_ref(out, dy, a, acc);
            else
                rc = path ? hyfi_gap_backward_cpu(out, dy, a, acc)
                          : hyfi_gap_backward_ref(out, dy, a, acc);
            if (!acc && path == 1) {
                snprintf(what, sizeof what, "%s bwd", kn);
                name_of(nm, sizeof nm, what, a);
                if (rc) printf("FAIL %s: rc %d\n", nm, rc);
                /* max backward: same loop, same tie rule -> identical */
                tu_check(rc != 0 || tu_compare(nm, dx_c, dx_r, nx,
                                               kind == 0 ? TU_TOL_EXACT : TU_TOL_CPU_VS_REF),
                         nm);
            } else if (acc) {
                const float *base = path ? dx_c : dx_r;
                for (size_t i = 0; i < nx; i++) want[i] = dx0[i] + base[i];
                snprintf(what, sizeof what, "%s bwd acc %s", kn, path ? "cpu" : "ref");
                name_of(nm, sizeof nm, what, a);
                if (rc) printf("FAIL %s: rc %d\n", nm, rc);
                tu_check(rc != 0 || tu_compare(nm, dx_a, want, nx, TU_TOL_CPU_VS_REF), nm);
            } else if (rc) {
                tu_check(1, "pool ref backward rc");
            }
        }
    }

    /* finite differences of the reference (dy = r) */
    {
        fd_ctx c = {*a, kind, x, y_r, dy, ny};
        if (kind == 0) hyfi_maxpool_backward_ref(dx_r, dy, x, a, 0);
        else if (kind == 1) hyfi_avgpool_backward_ref(dx_r, dy, a, 0);
        else hyfi_gap_backward_ref(dx_r, dy, a, 0);
        /* max: values 0.01 apart, eps 2e-3 keeps every argmax; avg/gap are linear */
        float eps = kind == 0 ? 2e-3f : 1e-2f;
        snprintf(what, sizeof what, "%s fd dx", kn);
        name_of(nm, sizeof nm, what, a);
        tu_check(tu_grad_check(nm, x, nx, dx_r, fd_loss, &c, 300, eps, TU_TOL_FD, seed), nm);
    }
    free(x); free(dy); free(y_r); free(y_c); free(dx_r); free(dx_c); free(dx0); free(dx_a);
    free(want);
}

/* (4) tie rule. */
static void test_ties(uint64_t *seed)
{
    /* All-equal 2x2 window: the gradient goes to the first position. */
    {
        hyfi_pool_args a = {1, 1, 2, 2, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0};
        float x[4] = {1, 1, 1, 1}, dy[1] = {3}, dx[4], want[4] = {3, 0, 0, 0};
        for (int path = 0; path < 2; path++) {
            int rc = path ? hyfi_maxpool_backward_cpu(dx, dy, x, &a, 0)
                          : hyfi_maxpool_backward_ref(dx, dy, x, &a, 0);
            const char *nm = path ? "maxpool tie all-equal cpu" : "maxpool tie all-equal ref";
            tu_check(rc != 0 || tu_compare(nm, dx, want, 4, TU_TOL_EXACT), nm);
        }
    }
    /* All -5 with padding 1, 3x3 s2 on 3x3: padding (-inf) never wins, each
     * window routes to its first in-image position. */
    {
        hyfi_pool_args a = {1, 1, 3, 3, 2, 2, 3, 3, 2, 2, 1, 1, 0, 0};
        float x[9], dy[4] = {1, 2, 3, 4}, dx[9], y[4];
        float want[9] = {1, 2, 0, 3, 4, 0, 0, 0, 0}, wy[4] = {-5, -5, -5, -5};
        for (int i = 0; i < 9; i++) x[i] = -5;
        for (int path = 0; path < 2; path++) {
            int rc = path ? hyfi_maxpool_backward_cpu(dx, dy, x, &a, 0)
                          : hyfi_maxpool_backward_ref(dx, dy, x, &a, 0);
            rc |= path ? hyfi_maxpool_forward_cpu(y, x, &a) : hyfi_maxpool_forward_ref(y, x, &a);
            const char *nm = path ? "maxpool tie padded cpu dx" : "maxpool tie padded ref dx";
            tu_check(rc != 0 || tu_compare(nm, dx, want, 9, TU_TOL_EXACT), nm);
            nm = path ? "maxpool tie padded cpu y" : "maxpool tie padded ref y";
            tu_check(tu_compare(nm, y, wy, 4, TU_TOL_EXACT), nm);
        }
    }
    /* Heavily tied random data (values in {-1, 0, 1}): CPU == ref exactly. */
    for (size_t k = 0; k < sizeof g_cases / sizeof g_cases[0]; k++) {
        hyfi_pool_args a = make_args(g_cases[k], 0);
        size_t nx = (size_t)a.n * a.c * a.h * a.w, ny = (size_t)a.n * a.c * a.ho * a.wo;
        float *x = tu_alloc(nx), *dy = tu_alloc(ny), *dr = tu_alloc(nx), *dc = tu_alloc(nx);
        for (size_t i = 0; i < nx; i++) x[i] = (float)tu_randint(seed, -1, 1);
        tu_fill(dy, ny, seed, -1.f, 1.f);
        int rc = hyfi_maxpool_backward_ref(dr, dy, x, &a, 0);
        rc |= hyfi_maxpool_backward_cpu(dc, dy, x, &a, 0);
        char nm[160];
        name_of(nm, sizeof nm, "maxpool ties bwd", &a);
        tu_check(rc != 0 || tu_compare(nm, dc, dr, nx, TU_TOL_EXACT), nm);
        free(x); free(dy); free(dr); free(dc);
    }
}

/* (5) Max and average pooling on blocked layouts (nChw8c / nChw16c): the
 * blocked loops against the NCHW loops, exactly (per lane the same window
 * order): forward, backward, backward accumulated; max on tied data too. */
static void test_blocked(pcase p, int blk, int kind, int cip, int tied, uint64_t *seed)
{
    hyfi_pool_args a = make_args(p, cip), ab = a;
    ab.blk = blk;
    const size_t nx = (size_t)a.n * a.c * a.h * a.w, ny = (size_t)a.n * a.c * a.ho * a.wo;
    const int hw = a.h * a.w, ohw = a.ho * a.wo;
    float *x = tu_alloc(nx), *xb = tu_alloc(nx), *y = tu_alloc(ny), *yb = tu_alloc(ny);
    float *yp = tu_alloc(ny), *dy = tu_alloc(ny), *dyb = tu_alloc(ny), *dx = tu_alloc(nx);
    float *dxb = tu_alloc(nx), *dxp = tu_alloc(nx);
    if (tied)
        for (size_t i = 0; i < nx; i++) x[i] = (float)tu_randint(seed, -1, 1);
    else
        tu_fill(x, nx, seed, -1.f, 1.f);
    tu_fill(dy, ny, seed, -1.f, 1.f);
    hyfi_layout_to_blocked(xb, x, a.n, a.c, hw, blk);
    hyfi_layout_to_blocked(dyb, dy, a.n, a.c, ohw, blk);
    char what[96], nm[192];
    const char *kn = kind ? (cip ? "avgpool(cip)" : "avgpool") : tied ? "maxpool(tied)" : "maxpool";
    int rc = kind ? hyfi_avgpool_forward_cpu(y, x, &a) | hyfi_avgpool_forward_cpu(yb, xb, &ab)
                  : hyfi_maxpool_forward_cpu(y, x, &a) | hyfi_maxpool_forward_cpu(yb, xb, &ab);
    hyfi_layout_to_plain(yp, yb, a.n, a.c, ohw, blk);
    snprintf(what, sizeof what, "%s blocked %d fwd", kn, blk);
    name_of(nm, sizeof nm, what, &a);
    tu_check(rc != 0 || tu_compare(nm, yp, y, ny, TU_TOL_EXACT), nm);
    for (int acc = 0; acc < 2; acc++) {
        tu_fill(dx, nx, seed, -1.f, 1.f);
        hyfi_layout_to_blocked(dxb, dx, a.n, a.c, hw, blk);
        rc = kind ? hyfi_avgpool_backward_cpu(dx, dy, &a, acc) |
                        hyfi_avgpool_backward_cpu(dxb, dyb, &ab, acc)
                  : hyfi_maxpool_backward_cpu(dx, dy, x, &a, acc) |
                        hyfi_maxpool_backward_cpu(dxb, dyb, xb, &ab, acc);
        hyfi_layout_to_plain(dxp, dxb, a.n, a.c, hw, blk);
        snprintf(what, sizeof what, "%s blocked %d bwd (acc %d)", kn, blk, acc);
        name_of(nm, sizeof nm, what, &a);
        tu_check(rc != 0 || tu_compare(nm, dxp, dx, nx, TU_TOL_EXACT), nm);
    }
    free(x); free(xb); free(y); free(yb); free(yp); free(dy); free(dyb); free(dx); free(dxb);
    free(dxp);
}

int main(void)
{
    uint64_t seed = getenv("TU_SEED") ? strtoull(getenv("TU_SEED"), NULL, 0) : 0x9001F00Dull;
    for (size_t k = 0; k < sizeof g_cases / sizeof g_cases[0]; k++) {
        hyfi_pool_args a = make_args(g_cases[k], 0);
        test_kind(&a, 0, &seed);
        test_kind(&a, 1, &seed);
        a.count_include_pad = 1;
        test_kind(&a, 1, &seed);
    }
    static const int gap_shapes[][4] = {{2, 3, 5, 3}, {1, 4, 7, 7}, {3, 5, 1, 1}, {3, 7, 8, 8}};
    for (size_t k = 0; k < sizeof gap_shapes / sizeof gap_shapes[0]; k++) {
        const int *s = gap_shapes[k];
        hyfi_pool_args a = {s[0], s[1], s[2], s[3], 1, 1, s[2], s[3], 1, 1, 0, 0, 0, 0};
        test_kind(&a, 2, &seed);
    }
    test_ties(&seed);
    /* global average pooling of a blocked x (nChw8c / nChw16c): y (N, C) as
     * from NCHW; dx back to NCHW; accumulated too */
    static const int gapb[][5] = {{2, 32, 5, 3, 16}, {3, 16, 1, 1, 16}, {2, 24, 4, 4, 8}};
    for (size_t k = 0; k < sizeof gapb / sizeof gapb[0]; k++) {
        const int *s = gapb[k];
        hyfi_pool_args a = {s[0], s[1], s[2], s[3], 1, 1, s[2], s[3], 1, 1, 0, 0, 0, 0};
        hyfi_pool_args ab = a;
        ab.blk = s[4];
        const size_t nx = (size_t)s[0] * s[1] * s[2] * s[3], ny = (size_t)s[0] * s[1];
        float *x = malloc(nx * 4), *xb = malloc(nx * 4), *yr = malloc(ny * 4);
        float *yb = malloc(ny * 4), *dy = malloc(ny * 4), *dxr = malloc(nx * 4);
        float *dxb = malloc(nx * 4), *dxp = malloc(nx * 4);
        tu_fill(x, nx, &seed, -1.f, 1.f);
        tu_fill(dy, ny, &seed, -1.f, 1.f);
        hyfi_layout_to_blocked(xb, x, s[0], s[1], s[2] * s[3], s[4]);
        char nm[96];
        snprintf(nm, sizeof nm, "global_avgpool blocked %d fwd %dx%dx%dx%d", s[4], s[0], s[1],
                 s[2], s[3]);
        int rc = hyfi_gap_forward_ref(yr, x, &a) | hyfi_gap_forward_cpu(yb, xb, &ab);
        tu_check(rc != 0 || tu_compare(nm, yb, yr, ny, TU_TOL_CPU_VS_REF), nm);
        for (int acc = 0; acc < 2; acc++) {
            tu_fill(dxr, nx, &seed, -1.f, 1.f);
            hyfi_layout_to_blocked(dxb, dxr, s[0], s[1], s[2] * s[3], s[4]);
            rc = hyfi_gap_backward_ref(dxr, dy, &a, acc) | hyfi_gap_backward_cpu(dxb, dy, &ab, acc);
            hyfi_layout_to_plain(dxp, dxb, s[0], s[1], s[2] * s[3], s[4]);
            snprintf(nm, sizeof nm, "global_avgpool blocked %d bwd (acc %d)", s[4], acc);
            tu_check(rc != 0 || tu_compare(nm, dxp, dxr, nx, TU_TOL_CPU_VS_REF), nm);
        }
        free(x), free(xb), free(yr), free(yb), free(dy), free(dxr), free(dxb), free(dxp);
    }
    /* blocked max and average pools: the geometries above with 16 and 24
     * channels (blocks of 16 and of 8), and ResNet's stem pool */
    static const pcase bcases[] = {
        {2, 16, 7, 9, 3, 3, 2, 2, 1, 1}, {1, 16, 8, 8, 2, 2, 2, 2, 0, 0},
        {2, 16, 7, 7, 2, 2, 2, 2, 0, 0}, {1, 16, 7, 5, 3, 3, 1, 1, 1, 1},
        {2, 16, 9, 9, 3, 3, 2, 2, 0, 0}, {1, 16, 6, 5, 3, 3, 3, 3, 1, 1},
        {1, 16, 9, 11, 3, 2, 2, 1, 1, 0}, {2, 64, 16, 16, 3, 3, 2, 2, 1, 1},
        {2, 64, 32, 32, 3, 3, 2, 2, 1, 1}, /* threads */
    };
    for (size_t k = 0; k < sizeof bcases / sizeof bcases[0]; k++)
        for (int blk = 8; blk <= 16; blk += 8) {
            pcase p = bcases[k];
            if (blk == 8) p.c += 8; /* 24: three blocks of 8 */
            test_blocked(p, blk, 0, 0, 0, &seed);
            test_blocked(p, blk, 0, 0, 1, &seed);
            test_blocked(p, blk, 1, 0, 0, &seed);
            test_blocked(p, blk, 1, 1, 0, &seed);
        }
    return tu_finish();
}
