/* Spatial-tile kernels (ops/tile_*.c, ops/bntile_*.c), without StarPU:
 *   (1) assemble and scatter: CPU against the reference on random pieces,
 *       zero fill and accumulation masks, odd sizes;
 *   (2) batch norm over tiles: a random batch cut into a grid of tiles (2x2,
 *       1x3, 3x1, uneven), statistics per tile, combined, applied per tile,
 *       and the backward in three steps, against the untiled reference batch
 *       norm (mean, variance, running statistics, y, dx, dgamma, dbeta), on the
 *       reference and the CPU paths, with the acc bits. */
#include "kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_pieces(uint64_t *seed)
{
    for (int trial = 0; trial < 40; trial++) {
        hyfi_tile_args a = {.n = tu_randint(seed, 1, 3), .c = tu_randint(seed, 1, 5),
                            .dst_h = tu_randint(seed, 3, 17), .dst_w = tu_randint(seed, 3, 17),
                            .npieces = tu_randint(seed, 1, HYFI_TILE_MAX_PIECES),
                            .zero_fill = trial % 2};
        const size_t planes = (size_t)a.n * a.c, dn = planes * a.dst_h * a.dst_w;
        float *src[HYFI_TILE_MAX_PIECES], *d_ref[HYFI_TILE_MAX_PIECES], *d_cpu[HYFI_TILE_MAX_PIECES];
        size_t sn[HYFI_TILE_MAX_PIECES];
        for (int i = 0; i < a.npieces; i++) {
            hyfi_piece *p = &a.p[i];
            p->h = tu_randint(seed, 1, a.dst_h);
            p->w = tu_randint(seed, 1, a.dst_w);
            p->dst_y = tu_randint(seed, 0, a.dst_h - p->h);
            p->dst_x = tu_randint(seed, 0, a.dst_w - p->w);
            p->src_h = p->h + tu_randint(seed, 0, 4);
            p->src_w = p->w + tu_randint(seed, 0, 4);
            p->src_y = tu_randint(seed, 0, p->src_h - p->h);
            p->src_x = tu_randint(seed, 0, p->src_w - p->w);
            sn[i] = planes * p->src_h * p->src_w;
            src[i] = tu_alloc(sn[i]);
            d_ref[i] = tu_alloc(sn[i]);
            d_cpu[i] = tu_alloc(sn[i]);
            tu_fill(src[i], sn[i], seed, -1.f, 1.f);
            tu_fill(d_ref[i], sn[i], seed, -1.f, 1.f);
            memcpy(d_cpu[i], d_ref[i], sn[i] * sizeof(float));
        }
        float *r = tu_alloc(dn), *c = tu_alloc(dn);
        tu_fill(r, dn, seed, -1.f, 1.f);
        memcpy(c, r, dn * sizeof(float));
        int rc = hyfi_tile_assemble_ref(r, (const float *const *)src, &a);
        rc |= hyfi_tile_assemble_cpu(c, (const float *const *)src, &a);
        tu_check(rc || tu_compare("tile assemble", c, r, dn, (tu_tol){"exact", 0, 0}), "tile assemble");
        const unsigned mask = (unsigned)tu_randint(seed, 0, (1 << a.npieces) - 1);
        rc = hyfi_tile_scatter_ref(d_ref, r, &a, mask);
        rc |= hyfi_tile_scatter_cpu(d_cpu, r, &a, mask);
        for (int i = 0; i < a.npieces; i++) {
            tu_check(rc || tu_compare("tile scatter", d_cpu[i], d_ref[i], sn[i], (tu_tol){"exact", 0, 0}),
                     "tile scatter");
            free(src[i]);
            free(d_ref[i]);
            free(d_cpu[i]);
        }
        free(r);
        free(c);
    }
}

/* Cut x (N,C,H,W) into a rows x cols grid at the given cut points: tiles[t]. */
static void cut_tiles(float **tiles, const float *x, int N, int C, int H, int W, int rows,
                      int cols, const int *rc, const int *cc)
{
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < cols; q++) {
            hyfi_tile_args a = {.n = N, .c = C, .dst_h = rc[r + 1] - rc[r],
                                .dst_w = cc[q + 1] - cc[q], .npieces = 1};
            a.p[0] = (hyfi_piece){.src_h = H, .src_w = W, .src_y = rc[r], .src_x = cc[q],
                                  .dst_y = 0, .dst_x = 0, .h = a.dst_h, .w = a.dst_w};
            hyfi_tile_assemble_ref(tiles[r * cols + q], &x, &a);
        }
}

/* The reverse: tiles back into a whole tensor. */
static void join_tiles(float *x, float *const *tiles, int N, int C, int H, int W, int rows,
                       int cols, const int *rc, const int *cc)
{
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < cols; q++) {
            hyfi_tile_args a = {.n = N, .c = C, .dst_h = rc[r + 1] - rc[r],
                                .dst_w = cc[q + 1] - cc[q], .npieces = 1};
            a.p[0] = (hyfi_piece){.src_h = H, .src_w = W, .src_y = rc[r], .src_x = cc[q],
                                  .dst_y = 0, .dst_x = 0, .h = a.dst_h, .w = a.dst_w};
            hyfi_tile_scatter_ref(&x, tiles[r * cols + q], &a, 0);
        }
}

static void test_bn_tiles(int N, int C, int H, int W, int rows, int cols, const int *rc,
                          const int *cc, uint64_t *seed)
{
    const size_t cnt = (size_t)N * C * H * W;
    const int P = rows * cols;
    char nm[160];
    hyfi_batchnorm_args full = {.n = N, .c = C, .h = H, .w = W, .eps = 1e-5f, .momentum = 0.1f};
    float *x = tu_alloc(cnt), *dy = tu_alloc(cnt), *g = tu_alloc(C), *b = tu_alloc(C);
    tu_fill(x, cnt, seed, -1.f, 1.f);
    for (size_t i = 0; i < cnt; i++) x[i] = 3.f + 2.f * x[i]; /* away from zero mean */
    tu_fill(dy, cnt, seed, -1.f, 1.f);
    tu_fill(g, C, seed, 0.5f, 1.5f);
    tu_fill(b, C, seed, -0.5f, 0.5f);
    /* untiled reference */
    float *y = tu_alloc(cnt), *mean = tu_alloc(C), *var = tu_alloc(C), *rm = tu_alloc(C),
          *rv = tu_alloc(C), *dx = tu_alloc(cnt), *dg = tu_alloc(C), *db = tu_alloc(C);
    for (int c = 0; c < C; c++) rm[c] = 0.1f * c, rv[c] = 1.f + 0.1f * c;
    hyfi_batchnorm_forward_train_ref(y, mean, var, rm, rv, x, g, b, &full);
    hyfi_batchnorm_backward_ref(dx, dg, db, dy, x, g, NULL, mean, var, &full, 0);

    float *xt[HYFI_MAX_TILES], *dyt[HYFI_MAX_TILES], *yt[HYFI_MAX_TILES], *dxt[HYFI_MAX_TILES];
    double *part[HYFI_MAX_TILES];
    hyfi_batchnorm_args ta[HYFI_MAX_TILES];
    hyfi_bn_combine_args ca = {.c = C, .nparts = P, .eps = full.eps, .momentum = full.momentum};
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < cols; q++) {
            const int t = r * cols + q, th = rc[r + 1] - rc[r], tw = cc[q + 1] - cc[q];
            const size_t tn = (size_t)N * C * th * tw;
            ta[t] = full;
            ta[t].h = th;
            ta[t].w = tw;
            ca.count[t] = (double)N * th * tw;
            xt[t] = tu_alloc(tn);
            dyt[t] = tu_alloc(tn);
            yt[t] = tu_alloc(tn);
            dxt[t] = tu_alloc(tn);
            part[t] = malloc(2 * (size_t)C * sizeof(double));
        }
    cut_tiles(xt, x, N, C, H, W, rows, cols, rc, cc);
    cut_tiles(dyt, dy, N, C, H, W, rows, cols, rc, cc);
    const double total = (double)N * H * W;
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "cpu" : "ref";
        float *m2 = tu_alloc(C), *v2 = tu_alloc(C), *rm2 = tu_alloc(C), *rv2 = tu_alloc(C);
        float *tot = tu_alloc(2 * (size_t)C), *dg2 = tu_alloc(C), *db2 = tu_alloc(C);
        float *yj = tu_alloc(cnt), *dxj = tu_alloc(cnt);
        for (int c = 0; c < C; c++) rm2[c] = 0.1f * c, rv2[c] = 1.f + 0.1f * c;
        int rc_ = 0;
        for (int t = 0; t < P; t++)
            rc_ |= path ? hyfi_bn_stats_cpu(part[t], xt[t], &ta[t])
                        : hyfi_bn_stats_ref(part[t], xt[t], &ta[t]);
        rc_ |= path ? hyfi_bn_combine_cpu(m2, v2, rm2, rv2, (const double *const *)part, &ca)
                    : hyfi_bn_combine_ref(m2, v2, rm2, rv2, (const double *const *)part, &ca);
        for (int t = 0; t < P; t++)
            rc_ |= path ? hyfi_batchnorm_forward_eval_cpu(yt[t], xt[t], g, b, m2, v2, &ta[t], 0)
                        : hyfi_batchnorm_forward_eval_ref(yt[t], xt[t], g, b, m2, v2, &ta[t]);
        for (int t = 0; t < P; t++)
            rc_ |= path ? hyfi_bn_bwd_stats_cpu(part[t], dyt[t], xt[t], m2, &ta[t])
                        : hyfi_bn_bwd_stats_ref(part[t], dyt[t], xt[t], m2, &ta[t]);
        rc_ |= path ? hyfi_bn_bwd_combine_cpu(tot, dg2, db2, (const double *const *)part, v2, &ca, 0)
                    : hyfi_bn_bwd_combine_ref(tot, dg2, db2, (const double *const *)part, v2, &ca, 0);
        for (int t = 0; t < P; t++)
            rc_ |= path ? hyfi_bn_bwd_apply_cpu(dxt[t], dyt[t], xt[t], g, m2, v2, tot, total,
                                                &ta[t], 0)
                        : hyfi_bn_bwd_apply_ref(dxt[t], dyt[t], xt[t], g, m2, v2, tot, total,
                                                &ta[t], 0);
        tu_check(rc_, "bn tile kernels return 0");
        join_tiles(yj, yt, N, C, H, W, rows, cols, rc, cc);
        join_tiles(dxj, dxt, N, C, H, W, rows, cols, rc, cc);
        const tu_tol tol = TU_TOL_CPU_VS_REF;
        const double sq = sqrt(total);
        const tu_tol tsum = {tol.what, tol.rtol, tol.atol * sq};
#define CMP(what, got, want, n, t)                                                         \
    do {                                                                                   \
        snprintf(nm, sizeof nm, "bn %dx%d tiles of (%d,%d,%d,%d) %s: %s", rows, cols, N, C, \
                 H, W, pn, what);                                                          \
        tu_check(tu_compare(nm, got, want, n, t), nm);                                     \
    } while (0)
        CMP("mean", m2, mean, C, tol);
        CMP("var", v2, var, C, tol);
        CMP("running mean", rm2, rm, C, tol);
        CMP("running var", rv2, rv, C, tol);
        CMP("y", yj, y, cnt, tol);
        CMP("dx", dxj, dx, cnt, tol);
        CMP("dgamma", dg2, dg, C, tsum);
        CMP("dbeta", db2, db, C, tsum);
        /* acc bits: parameters and dx added onto what is there */
        for (int c = 0; c < C; c++) dg2[c] = db2[c] = 1.f;
        hyfi_bn_bwd_combine_ref(tot, dg2, db2, (const double *const *)part, v2, &ca,
                                HYFI_BN_ACC_PARAMS);
        float *want = tu_alloc(C);
        for (int c = 0; c < C; c++) want[c] = 1.f + dg[c];
        CMP("dgamma acc", dg2, want, C, tsum);
        for (int t = 0; t < P; t++) {
            const size_t tn = (size_t)N * C * ta[t].h * ta[t].w;
            float *base = tu_alloc(tn);
            memcpy(base, dxt[t], tn * sizeof(float));
            for (size_t i = 0; i < tn; i++) dxt[t][i] = 1.f;
            path ? hyfi_bn_bwd_apply_cpu(dxt[t], dyt[t], xt[t], g, m2, v2, tot, total, &ta[t],
                                         HYFI_BN_ACC_DX)
                 : hyfi_bn_bwd_apply_ref(dxt[t], dyt[t], xt[t], g, m2, v2, tot, total, &ta[t],
                                         HYFI_BN_ACC_DX);
            for (size_t i = 0; i < tn; i++) base[i] += 1.f;
            CMP("dx acc", dxt[t], base, tn, tol);
            free(base);
        }
        free(want);
        free(m2), free(v2), free(rm2), free(rv2), free(tot), free(dg2), free(db2), free(yj);
        free(dxj);
    }
    for (int t = 0; t < P; t++) free(xt[t]), free(dyt[t]), free(yt[t]), free(dxt[t]), free(part[t]);
    free(x), free(dy), free(g), free(b), free(y), free(mean), free(var), free(rm), free(rv);
    free(dx), free(dg), free(db);
}

int main(void)
{
    uint64_t seed = 5;
    test_pieces(&seed);
    test_bn_tiles(2, 3, 8, 8, 2, 2, (int[]){0, 4, 8}, (int[]){0, 4, 8}, &seed);
    test_bn_tiles(3, 5, 7, 9, 1, 3, (int[]){0, 7}, (int[]){0, 3, 6, 9}, &seed);
    test_bn_tiles(2, 4, 9, 5, 3, 1, (int[]){0, 2, 6, 9}, (int[]){0, 5}, &seed); /* uneven */
    test_bn_tiles(4, 16, 16, 16, 4, 4, (int[]){0, 4, 8, 12, 16}, (int[]){0, 4, 8, 12, 16},
                  &seed);
    return tu_finish();
}
