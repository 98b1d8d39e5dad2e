/* cuda_tile.c: CUDA tile kernels vs the CPU path: assemble (with and without
 * zero fill) and scatter (with an accumulation mask) of 3 pieces; batch norm
 * over a 2x2 grid of tiles (stats, combine, backward stats, combine, apply with
 * the acc bits). Called by tests/test_cuda_ops.c when a GPU exists; returns the
 * number of failures. */
#include "cuda_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tile_pieces(hyfi_cuda_env *env, uint64_t *seed)
{
    int fails = 0;
    hyfi_tile_args a = {.n = 2, .c = 3, .dst_h = 11, .dst_w = 9, .npieces = 3};
    const size_t planes = 6, dn = planes * 11 * 9;
    float *src[3], *d_src[3], *dst[3], *d_dst[3];
    size_t sn[3];
    for (int i = 0; i < 3; i++) {
        a.p[i] = (hyfi_piece){.src_h = 7 + i, .src_w = 6, .src_y = i, .src_x = 1,
                              .dst_y = 3 * i, .dst_x = i, .h = 3, .w = 5};
        sn[i] = planes * a.p[i].src_h * a.p[i].src_w;
        src[i] = tu_alloc(sn[i]);
        dst[i] = tu_alloc(sn[i]);
        tu_fill(src[i], sn[i], seed, -1.f, 1.f);
        tu_fill(dst[i], sn[i], seed, -1.f, 1.f);
        d_src[i] = tu_cuda_upload(src[i], sn[i]);
        d_dst[i] = tu_cuda_upload(dst[i], sn[i]);
    }
    float *big = tu_alloc(dn);
    for (int zf = 0; zf <= 1; zf++) {
        a.zero_fill = zf;
        tu_fill(big, dn, seed, -1.f, 1.f);
        float *d_big = tu_cuda_upload(big, dn);
        hyfi_tile_assemble_cpu(big, (const float *const *)src, &a);
        fails += tu_cuda_check(zf ? "tile_assemble zero fill cuda/cpu" : "tile_assemble cuda/cpu",
                               hyfi_tile_assemble_cuda(env, d_big, (const float *const *)d_src, &a),
                               d_big, big, dn, env->stream);
        cudaFree(d_big);
    }
    float *d_big = tu_cuda_upload(big, dn);
    hyfi_tile_scatter_cpu(dst, big, &a, 5u);
    int rc = hyfi_tile_scatter_cuda(env, d_dst, d_big, &a, 5u);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "tile_scatter cuda/cpu piece %d", i);
        fails += tu_cuda_check(name, rc, d_dst[i], dst[i], sn[i], env->stream);
        cudaFree(d_src[i]);
        cudaFree(d_dst[i]);
        free(src[i]);
        free(dst[i]);
    }
    cudaFree(d_big);
    free(big);
    return fails;
}

static int bn_tiles(hyfi_cuda_env *env, uint64_t *seed)
{
    int fails = 0;
    const int N = 2, C = 5, th = 4, tw = 6, P = 4;
    const size_t tn = (size_t)N * C * th * tw;
    hyfi_batchnorm_args ta = {.n = N, .c = C, .h = th, .w = tw, .eps = 1e-5f, .momentum = 0.1f};
    hyfi_bn_combine_args ca = {.c = C, .nparts = P, .eps = 1e-5f, .momentum = 0.1f};
    float *x[4], *dy[4], *d_x[4], *d_dy[4], *d_part[4];
    double *part[4];
    for (int t = 0; t < P; t++) {
        ca.count[t] = (double)N * th * tw;
        x[t] = tu_alloc(tn);
        dy[t] = tu_alloc(tn);
        part[t] = malloc(2 * C * sizeof(double));
        tu_fill(x[t], tn, seed, 1.f, 3.f);
        tu_fill(dy[t], tn, seed, -1.f, 1.f);
        d_x[t] = tu_cuda_upload(x[t], tn);
        d_dy[t] = tu_cuda_upload(dy[t], tn);
        d_part[t] = tu_cuda_upload((float *)part[t], 4 * C); /* 2C doubles */
    }
    float g[5], mean[5], var[5], rm[5], rv[5], tot[10], dg[5], db[5];
    tu_fill(g, C, seed, 0.5f, 1.5f);
    for (int c = 0; c < C; c++) rm[c] = 0.f, rv[c] = 1.f, dg[c] = db[c] = 0.5f;
    float *d_g = tu_cuda_upload(g, C), *d_mean = tu_cuda_upload(mean, C),
          *d_var = tu_cuda_upload(var, C), *d_rm = tu_cuda_upload(rm, C),
          *d_rv = tu_cuda_upload(rv, C), *d_tot = tu_cuda_upload(tot, 2 * C),
          *d_dg = tu_cuda_upload(dg, C), *d_db = tu_cuda_upload(db, C);
    for (int t = 0; t < P; t++) {
        /* parts are doubles: checked through the combine's outputs below */
        hyfi_bn_stats_cpu(part[t], x[t], &ta);
        if (hyfi_bn_stats_cuda(env, (double *)d_part[t], d_x[t], &ta)) fails++;
    }
    hyfi_bn_combine_cpu(mean, var, rm, rv, (const double *const *)part, &ca);
    fails += tu_cuda_check("bn_combine cuda/cpu mean",
                           hyfi_bn_combine_cuda(env, d_mean, d_var, d_rm, d_rv,
                                                (const double *const *)d_part, &ca),
                           d_mean, mean, C, env->stream);
    fails += tu_cuda_check("bn_combine cuda/cpu var", 0, d_var, var, C, env->stream);
    fails += tu_cuda_check("bn_combine cuda/cpu running var", 0, d_rv, rv, C, env->stream);
    for (int t = 0; t < P; t++) {
        hyfi_bn_bwd_stats_cpu(part[t], dy[t], x[t], mean, &ta);
        if (hyfi_bn_bwd_stats_cuda(env, (double *)d_part[t], d_dy[t], d_x[t], d_mean, &ta)) fails++;
    }
    hyfi_bn_bwd_combine_cpu(tot, dg, db, (const double *const *)part, var, &ca, HYFI_BN_ACC_PARAMS);
    fails += tu_cuda_check("bn_bwd_combine cuda/cpu dgamma",
                           hyfi_bn_bwd_combine_cuda(env, d_tot, d_dg, d_db,
                                                    (const double *const *)d_part, d_var, &ca,
                                                    HYFI_BN_ACC_PARAMS),
                           d_dg, dg, C, env->stream);
    fails += tu_cuda_check("bn_bwd_combine cuda/cpu dbeta", 0, d_db, db, C, env->stream);
    float *dx = tu_alloc(tn);
    tu_fill(dx, tn, seed, -1.f, 1.f);
    float *d_dx = tu_cuda_upload(dx, tn);
    hyfi_bn_bwd_apply_cpu(dx, dy[0], x[0], g, mean, var, tot, 4.0 * N * th * tw, &ta,
                          HYFI_BN_ACC_DX);
    fails += tu_cuda_check("bn_bwd_apply cuda/cpu acc",
                           hyfi_bn_bwd_apply_cuda(env, d_dx, d_dy[0], d_x[0], d_g, d_mean, d_var,
                                                  d_tot, 4.0 * N * th * tw, &ta, HYFI_BN_ACC_DX),
                           d_dx, dx, tn, env->stream);
    for (int t = 0; t < P; t++) {
        cudaFree(d_x[t]), cudaFree(d_dy[t]), cudaFree(d_part[t]);
        free(x[t]), free(dy[t]), free(part[t]);
    }
    cudaFree(d_g), cudaFree(d_mean), cudaFree(d_var), cudaFree(d_rm), cudaFree(d_rv);
    cudaFree(d_tot), cudaFree(d_dg), cudaFree(d_db), cudaFree(d_dx);
    free(dx);
    return fails;
}

int cuda_test_tile(uint64_t *seed)
{
    cudaStream_t stream;
    hyfi_cuda_env env;
    if (tu_cuda_open(&env, &stream, "cuda_tile")) return 1;
    int fails = tile_pieces(&env, seed) + bn_tiles(&env, seed);
    tu_cuda_close(&env, stream);
    return fails;
}
