/* Unit tests of the data module's batching (apps/data*.c): shuffling
 * (permutations), batches, bilinear resize and channel conversion (alone and
 * through a data set's output geometry), and the prefetcher.
 * Links apps/data*.c and tests/testutil.c only (no StarPU). Files are written
 * into a fresh directory under $TMPDIR (default /tmp) and removed at the end. */
#include "data.h"
#include "data_testutil.h"
#include "testutil.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_permutation(const size_t *p, size_t n)
{
    char *seen = calloc(n ? n : 1, 1);
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= n || seen[p[i]]) ok = false;
        else seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void)
{
    enum { P = 1000 };
    size_t *a = malloc(P * sizeof *a), *b = malloc(P * sizeof *b), *c = malloc(P * sizeof *c);
    hyfi_dataset_permutation(42, 0, P, a);
    hyfi_dataset_permutation(42, 0, P, b);
    hyfi_dataset_permutation(42, 1, P, c);
    check(is_permutation(a, P) && is_permutation(c, P), "permutation: is a permutation");
    check(memcmp(a, b, P * sizeof *a) == 0, "permutation: deterministic for (seed, epoch)");
    size_t same = 0, fixed = 0;
    for (size_t i = 0; i < P; i++) {
        same += a[i] == c[i];
        fixed += a[i] == i;
    }
    check(same < 20 && fixed < 20, "permutation: epochs differ and the order is shuffled");
    /* seed + epoch is the generator's seed */
    hyfi_dataset_permutation(43, 0, P, b);
    check(memcmp(b, c, P * sizeof *b) == 0, "permutation: seeded with seed + epoch");
    /* uniformity on 3 elements: all 6 orders appear about equally */
    int count[6] = {0};
    for (uint64_t s = 0; s < 6000; s++) {
        size_t p3[3];
        hyfi_dataset_permutation(s * 1000003u, 0, 3, p3);
        count[p3[0] * 2 + (p3[1] > p3[2])]++;
    }
    bool uni = true;
    for (int k = 0; k < 6; k++) uni &= count[k] > 850 && count[k] < 1150;
    check(uni, "permutation: the 6 orders of 3 elements about equally likely");
    size_t one = 99;
    hyfi_dataset_permutation(1, 2, 1, &one);
    check(one == 0, "permutation: n = 1");
    check(hyfi_data_steps_per_epoch(60000, 64) == 938 && hyfi_data_steps_per_epoch(64, 64) == 1 &&
              hyfi_data_steps_per_epoch(0, 64) == 0,
          "steps per epoch = ceil(N / B)");
    free(a);
    free(b);
    free(c);
}

static void test_batch(void)
{
    char err[ERRLEN] = "";
    hyfi_dataset *ds = NULL;
    hyfi_dataset_synthetic(2, 3, 4, 5, 7, 9, &ds, err, sizeof err);
    enum { B = 5, E = 2 * 3 * 4 };
    float x[B * E], img[E];
    int32_t y[B];
    size_t perm[7];
    hyfi_dataset_permutation(5, 0, 7, perm);
    /* start 5 of 7: rows are perm[5], perm[6], perm[0], perm[1], perm[2] */
    int rc = hyfi_dataset_batch(ds, perm, 5, B, x, y);
    bool ok = rc == 0;
    for (int r = 0; r < B && ok; r++) {
        size_t idx = perm[(5 + r) % 7];
        hyfi_dataset_image(ds, idx, img);
        ok = memcmp(x + r * E, img, sizeof img) == 0 && y[r] == hyfi_dataset_label(ds, idx);
    }
    check(ok, "batch: rows follow the permutation and wrap around the end");
    rc = hyfi_dataset_batch(ds, NULL, 3, B, x, NULL);
    hyfi_dataset_image(ds, 3, img);
    ok = rc == 0 && memcmp(x, img, sizeof img) == 0;
    hyfi_dataset_image(ds, 0, img);
    ok &= memcmp(x + 4 * E, img, sizeof img) == 0;
    check(ok, "batch: perm NULL is the identity; y may be NULL");
    check(hyfi_dataset_batch(ds, NULL, 0, 0, x, y) == HYFI_DATA_ERR_ARG, "batch: B = 0 refused");
    hyfi_dataset_free(ds);
}

static void test_resize_and_channels(const char *root)
{
    /* 1-D checks of the half-pixel bilinear rule */
    float in2[2] = {0, 1}, out4[4];
    hyfi_resize_bilinear(in2, 1, 1, 2, out4, 1, 4);
    float want4[4] = {0, 0.25f, 0.75f, 1};
    check(tu_compare("resize 1x2 -> 1x4 (half-pixel centres)", out4, want4, 4,
                     TU_TOL_CPU_VS_REF) == 0,
          "resize: upscale values");
    float in4[4] = {0, 1, 2, 3}, out2[2];
    hyfi_resize_bilinear(in4, 1, 4, 1, out2, 2, 1);
    float want2[2] = {0.5f, 2.5f};
    check(tu_compare("resize 4x1 -> 2x1 (averages pairs)", out2, want2, 2, TU_TOL_CPU_VS_REF) == 0,
          "resize: downscale values");
    /* 2-D: a bilinear function a + b*y + c*x is reproduced exactly inside */
    enum { H = 6, W = 5, OH = 11, OW = 9 };
    float src[2 * H * W], dst[2 * OH * OW], want[2 * OH * OW];
    for (int c = 0; c < 2; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) src[(c * H + y) * W + x] = c * 10.0f + 0.5f * y - 0.25f * x;
    hyfi_resize_bilinear(src, 2, H, W, dst, OH, OW);
    for (int c = 0; c < 2; c++)
        for (int y = 0; y < OH; y++)
            for (int x = 0; x < OW; x++) {
                double fy = fmin(fmax((y + 0.5) * H / OH - 0.5, 0), H - 1);
                double fx = fmin(fmax((x + 0.5) * W / OW - 0.5, 0), W - 1);
                want[(c * OH + y) * OW + x] = (float)(c * 10.0 + 0.5 * fy - 0.25 * fx);
            }
    check(tu_compare("resize 2x6x5 -> 2x11x9 of a linear ramp", dst, want, 2 * OH * OW,
                     TU_TOL_CPU_VS_REF) == 0,
          "resize: 2-D linear ramp, per channel");
    float same[2 * H * W];
    hyfi_resize_bilinear(src, 2, H, W, same, H, W);
    check(memcmp(same, src, sizeof src) == 0, "resize: same size is an exact copy");

    /* channels */
    float g[4] = {0.1f, 0.2f, 0.3f, 0.4f}, rgb[12];
    check(hyfi_convert_channels(g, 1, 4, rgb, 3) == 0 && memcmp(rgb, g, sizeof g) == 0 &&
              memcmp(rgb + 4, g, sizeof g) == 0 && memcmp(rgb + 8, g, sizeof g) == 0,
          "channels: 1 -> 3 replicates");
    /* (3, hw = 2): R = {1, 0}, G = {0, 1}, B = {0, 0}: pixel 0 red, pixel 1 green */
    float rgb2[6] = {1, 0, 0, 1, 0, 0}, lum[2];
    check(hyfi_convert_channels(rgb2, 3, 2, lum, 1) == 0 && fabsf(lum[0] - 0.299f) < 1e-6f &&
              fabsf(lum[1] - 0.587f) < 1e-6f,
          "channels: 3 -> 1 is BT.601 luminance");
    check(hyfi_convert_channels(rgb2, 2, 3, rgb, 3) == HYFI_DATA_ERR_UNSUPPORTED,
          "channels: 2 -> 3 refused");

    /* through a dataset: Fashion-style 1x3x5 -> 3x6x10 equals the manual pipeline */
    char *dir = subdir(root, "idx_resize");
    write_idx_set(dir, true);
    char err[ERRLEN] = "";
    hyfi_dataset *ds = NULL;
    int rc = hyfi_dataset_load_idx(HYFI_DATA_FASHION_MNIST, dir, HYFI_SPLIT_TRAIN, &ds, err,
                                   sizeof err);
    rc |= hyfi_dataset_set_output(ds, 3, 6, 10, err, sizeof err);
    bool ok = rc == 0 && hyfi_dataset_channels(ds) == 3 && hyfi_dataset_height(ds) == 6 &&
              hyfi_dataset_width(ds) == 10 && hyfi_dataset_native_height(ds) == R &&
              hyfi_dataset_image_numel(ds) == 180 &&
              fabsf(hyfi_dataset_mean(ds, 2) - 0.2860f) < 1e-6f &&
              fabsf(hyfi_dataset_std(ds, 1) - 0.3530f) < 1e-6f;
    check(ok, "dataset: set_output 3x6x10 geometry and replicated constants");
    if (ok) {
        float raw[R * C], up[6 * 10], got[180], exp[180];
        for (int k = 0; k < R * C; k++) raw[k] = pix_of(4, k) / 255.0f;
        hyfi_resize_bilinear(raw, 1, R, C, up, 6, 10);
        for (int c = 0; c < 3; c++)
            for (int k = 0; k < 60; k++) exp[c * 60 + k] = (up[k] - 0.2860f) / 0.3530f;
        hyfi_dataset_image(ds, 4, got);
        check(tu_compare("dataset image 4 at 3x6x10 vs manual pipeline", got, exp, 180,
                         TU_TOL_CPU_VS_REF) == 0,
              "dataset: 1 -> 3 channels + bilinear resize + normalisation");
    }
    rc = hyfi_dataset_set_output(ds, 2, 6, 10, err, sizeof err);
    check(rc == 0, "dataset: 1 -> 2 channels allowed (replication)");
    rc = hyfi_dataset_set_output(ds, 1, 0, 10, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "out of range", NULL, "dataset: zero height refused");
    hyfi_dataset_free(ds);
    free(dir);

    /* 3 -> 1 on CIFAR-like synthetic data */
    hyfi_dataset *s3 = NULL;
    hyfi_dataset_synthetic(3, 4, 4, 10, 3, 7, &s3, err, sizeof err);
    rc = hyfi_dataset_set_output(s3, 1, 4, 4, err, sizeof err);
    float v3[48], v1[16];
    hyfi_dataset_synthetic(3, 4, 4, 10, 3, 7, &ds, err, sizeof err);
    hyfi_dataset_image(ds, 1, v3);
    hyfi_dataset_image(s3, 1, v1);
    float exp1[16];
    for (int k = 0; k < 16; k++) {
        /* back to x/255, luminance, normalise with mean 0.5, std 0.5 */
        float r = v3[k] * 0.5f + 0.5f, gg = v3[16 + k] * 0.5f + 0.5f, bb = v3[32 + k] * 0.5f + 0.5f;
        exp1[k] = ((0.299f * r + 0.587f * gg + 0.114f * bb) - 0.5f) / 0.5f;
    }
    check(rc == 0 && tu_compare("synthetic 3 -> 1 luminance", v1, exp1, 16, TU_TOL_CPU_VS_REF) == 0,
          "dataset: 3 -> 1 luminance then normalisation");
    rc = hyfi_dataset_set_output(s3, 2, 4, 4, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_UNSUPPORTED, err, "3 -> 1", NULL, "dataset: 3 -> 2 refused");
    hyfi_dataset_free(ds);
    hyfi_dataset_free(s3);
}

static void test_prefetch(void)
{
    char err[ERRLEN] = "";
    hyfi_dataset *ds = NULL;
    hyfi_dataset_synthetic(1, 5, 5, 10, 23, 11, &ds, err, sizeof err);
    hyfi_dataset_set_output(ds, 3, 8, 8, err, sizeof err);
    enum { B = 6 }; /* 23 images: 4 batches per epoch, the last wraps */
    const size_t E = hyfi_dataset_image_numel(ds);
    hyfi_prefetch_config cfg = {.batch = B, .seed = 5, .shuffle = 1, .first_step = 2, .num_steps = 9};
    hyfi_prefetch *p = NULL;
    int rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
    check(rc == 0, "prefetch: start");
    float *want = malloc(B * E * sizeof(float));
    int32_t wy[B];
    size_t perm[23];
    bool ok = rc == 0;
    int got = 0;
    hyfi_batch b;
    while (ok && (rc = hyfi_prefetch_next(p, &b)) == 0) {
        uint64_t step = 2 + (uint64_t)got;
        hyfi_dataset_permutation(5, step / 4, 23, perm);
        hyfi_dataset_batch(ds, perm, (step % 4) * B, B, want, wy);
        ok = b.step == step && b.epoch == step / 4 && b.start == (step % 4) * B && b.batch == B &&
             memcmp(b.x, want, B * E * sizeof(float)) == 0 && memcmp(b.y, wy, sizeof wy) == 0;
        got++;
    }
    check(ok && got == 9 && rc == HYFI_DATA_END,
          "prefetch: 9 batches from step 2 equal direct batches over 3 epochs, then END");
    check(hyfi_prefetch_next(p, &b) == HYFI_DATA_END, "prefetch: END again after the end");
    hyfi_prefetch_stop(p);

    /* unbounded, no shuffle, stopped early (no deadlock, no leak) */
    cfg = (hyfi_prefetch_config){.batch = B, .shuffle = 0};
    rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
    ok = rc == 0;
    for (int k = 0; k < 3 && ok; k++) {
        ok = hyfi_prefetch_next(p, &b) == 0;
        hyfi_dataset_batch(ds, NULL, (size_t)(k % 4) * B, B, want, wy);
        ok &= memcmp(b.x, want, B * E * sizeof(float)) == 0;
    }
    hyfi_prefetch_stop(p);
    check(ok, "prefetch: identity order, stopped while running");
    rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
    hyfi_prefetch_stop(p); /* stop before any next */
    check(rc == 0, "prefetch: stop right after start");

    /* only some rows decoded (an MPI rank's own images): those equal the
     * direct batch, the others stay zero, every label is set */
    unsigned char rows[B] = {1, 0, 0, 1, 0, 1};
    cfg = (hyfi_prefetch_config){.batch = B, .seed = 5, .shuffle = 1, .num_steps = 5,
                                 .rows = rows};
    rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
    rows[0] = 0; /* copied at start: no effect */
    ok = rc == 0;
    got = 0;
    while (ok && (rc = hyfi_prefetch_next(p, &b)) == 0) {
        hyfi_dataset_permutation(5, (uint64_t)got / 4, 23, perm);
        hyfi_dataset_batch(ds, perm, (size_t)(got % 4) * B, B, want, wy);
        for (int r = 0; r < B; r++) {
            const float *x = b.x + (size_t)r * E;
            if (r == 0 || r == 3 || r == 5) ok &= memcmp(x, want + (size_t)r * E, E * 4) == 0;
            else
                for (size_t k = 0; k < E; k++) ok &= x[k] == 0.0f;
        }
        ok &= memcmp(b.y, wy, sizeof wy) == 0;
        got++;
    }
    hyfi_prefetch_stop(p);
    check(ok && got == 5, "prefetch: only rows 0, 3, 5 decoded, the others zero, every label");

    cfg = (hyfi_prefetch_config){.batch = 0};
    rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "batch size", NULL, "prefetch: batch 0 refused");
    free(want);
    hyfi_dataset_free(ds);
}

int main(void)
{
    char root[512];
    if (data_test_root(root, sizeof root)) return 1;
    test_permutation();
    test_batch();
    test_resize_and_channels(root);
    test_prefetch();
    data_test_cleanup(root);
    return tu_finish();
}
