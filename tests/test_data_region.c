/* Region readers (apps/data_region.c) and the slides data set against the
 * whole-image path, on mosaics made by scripts/make_slides.py (the same pixels
 * as PNG, striped TIFF and tiled TIFF; tests/data_region.sh makes them):
 *   - every region of a slides data set (tiles of 2x2, 4x1 and 1x4 grids,
 *     rectangles across strip and tile borders, single pixels, the whole
 *     image) equals, bitwise, that part of the folder data set's whole image
 *     (data_image.c's own libpng decoder) for PNG, striped TIFF and tiled TIFF;
 *   - OpenSlide's reads of the tiled TIFF (generic-tiff) equal libtiff's and
 *     libpng's raw samples bitwise;
 *   - a real Aperio slide (openslide-python's small.svs, when given): every
 *     region read equals that part of the whole slide read;
 *   - errors: a region outside the image, a file of another kind, a resize of
 *     slides, slides of different sizes in one split.
 * usage: test_data_region ROOT [SMALL_SVS]
 *   ROOT/{png,tiff,tiff-tiled}/CLASS/slide-*.{png,tif} */
#include "data.h"
#include "data_region.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hyfi_dataset *open_kind(hyfi_data_kind kind, const char *root, const char *fmt)
{
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, fmt);
    hyfi_data_spec spec = {.kind = kind, .split = HYFI_SPLIT_TRAIN, .dir = dir};
    hyfi_dataset *ds = NULL;
    if (hyfi_dataset_open(&spec, &ds, err, sizeof err)) printf("%s\n", err);
    return ds;
}

/* the rectangles tried on an S x S image */
static int rects(int S, int r[][4])
{
    int n = 0;
    for (int k = 0; k < 4; k++) { /* 2x2 tiles */
        r[n][0] = k / 2 * S / 2, r[n][1] = k % 2 * S / 2, r[n][2] = S / 2, r[n][3] = S / 2;
        n++;
    }
    for (int k = 0; k < 4; k++) { /* 4 horizontal, 4 vertical strips */
        r[n][0] = k * S / 4, r[n][1] = 0, r[n][2] = S / 4, r[n][3] = S;
        n++;
        r[n][0] = 0, r[n][1] = k * S / 4, r[n][2] = S, r[n][3] = S / 4;
        n++;
    }
    const int odd[][4] = {{37, 61, 100, 90}, {15, 17, 3, 130}, {S - 1, S - 1, 1, 1},
                          {0, 0, 1, 1}, {63, 63, 2, 2}, {0, 0, S, S}};
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++) memcpy(r[n++], odd[k], sizeof odd[k]);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: test_data_region ROOT [SMALL_SVS]\n");
        return 2;
    }
    const char *root = argv[1];
    char err[1024], what[256];
    hyfi_dataset *ref = open_kind(HYFI_DATA_FOLDER, root, "png");
    const char *fmts[] = {"png", "tiff", "tiff-tiled"};
    hyfi_dataset *sl[3];
    for (int f = 0; f < 3; f++) sl[f] = open_kind(HYFI_DATA_SLIDES, root, fmts[f]);
    if (!ref || !sl[0] || !sl[1] || !sl[2]) {
        tu_check(1, "open the data sets");
        return tu_finish();
    }
    const int S = hyfi_dataset_height(ref), C = hyfi_dataset_channels(ref);
    const size_t N = hyfi_dataset_size(ref);
    printf("%zu images of %dx%dx%d; classes %d\n", N, C, S, S, hyfi_dataset_num_classes(ref));
    for (int f = 0; f < 3; f++) {
        snprintf(what, sizeof what, "slides %s: same images, size, channels and labels", fmts[f]);
        tu_check(hyfi_dataset_size(sl[f]) != N || hyfi_dataset_height(sl[f]) != S ||
                     hyfi_dataset_width(sl[f]) != S || hyfi_dataset_channels(sl[f]) != C ||
                     memcmp(hyfi_dataset_labels(sl[f]), hyfi_dataset_labels(ref),
                            N * sizeof(int32_t)),
                 what);
    }
    float *whole = tu_alloc((size_t)C * S * S), *reg = tu_alloc((size_t)C * S * S);
    float *raw[3];
    for (int f = 0; f < 3; f++) raw[f] = tu_alloc((size_t)C * S * S);
    int r[32][4];
    const int nr = rects(S, r);
    int bad[3] = {0, 0, 0}, tried = 0;
    for (size_t i = 0; i < N; i++) {
        if (hyfi_dataset_image_err(ref, i, whole, err, sizeof err)) {
            printf("%s\n", err);
            tu_check(1, "folder image");
            continue;
        }
        for (int k = 0; k < nr; k++) {
            const int y0 = r[k][0], x0 = r[k][1], h = r[k][2], w = r[k][3];
            tried++;
            for (int f = 0; f < 3; f++) {
                if (hyfi_dataset_region(sl[f], i, y0, x0, h, w, reg, err, sizeof err)) {
                    printf("%s\n", err);
                    bad[f]++;
                    continue;
                }
                for (int c = 0; c < C; c++)
                    for (int y = 0; y < h; y++)
                        if (memcmp(reg + ((size_t)c * h + y) * w,
                                   whole + ((size_t)c * S + y0 + y) * S + x0,
                                   (size_t)w * sizeof(float))) {
                            if (bad[f] < 3)
                                printf("%s image %zu region (%d,%d %dx%d) channel %d row %d "
                                       "differs\n", fmts[f], i, y0, x0, h, w, c, y);
                            bad[f]++;
                            c = C;
                            break;
                        }
            }
        }
    }
    for (int f = 0; f < 3; f++) {
        snprintf(what, sizeof what, "slides %s: %d regions bitwise equal to the folder kind's "
                 "whole image", fmts[f], tried);
        tu_check(bad[f] != 0, what);
    }

    /* OpenSlide (generic-tiff) vs libtiff vs libpng, raw samples */
    char path[3][1100];
    const char *ext[] = {"png", "tif", "tif"};
    for (int f = 0; f < 3; f++)
        snprintf(path[f], sizeof path[f], "%s/%s/1-dab-high/slide-0000.%s", root, fmts[f],
                 ext[f]);
    hyfi_region_reader *rp = NULL, *rt = NULL, *ro = NULL;
    int rc = hyfi_region_open(path[0], HYFI_REGION_AUTO, &rp, err, sizeof err) ||
             hyfi_region_open(path[2], HYFI_REGION_AUTO, &rt, err, sizeof err) ||
             hyfi_region_open(path[2], HYFI_REGION_OPENSLIDE, &ro, err, sizeof err);
    if (rc) printf("%s\n", err);
    tu_check(rc, "open one slide with libpng, libtiff and OpenSlide");
    if (!rc) {
        printf("readers: %s, %s, %s\n", hyfi_region_describe(rp), hyfi_region_describe(rt),
               hyfi_region_describe(ro));
        int obad = 0;
        for (int k = 0; k < nr; k++) {
            const int y0 = r[k][0], x0 = r[k][1], h = r[k][2], w = r[k][3];
            const size_t n = (size_t)3 * h * w * sizeof(float);
            if (hyfi_region_read(rp, x0, y0, w, h, raw[0], err, sizeof err) ||
                hyfi_region_read(rt, x0, y0, w, h, raw[1], err, sizeof err) ||
                hyfi_region_read(ro, x0, y0, w, h, raw[2], err, sizeof err)) {
                printf("%s\n", err);
                obad++;
            } else if (memcmp(raw[0], raw[1], n) || memcmp(raw[0], raw[2], n)) {
                obad++;
            }
        }
        snprintf(what, sizeof what, "OpenSlide, libtiff and libpng read %d regions alike", nr);
        tu_check(obad, what);
        /* errors */
        tu_check(hyfi_region_read(rp, S - 4, 0, 8, 8, raw[0], err, sizeof err) !=
                     HYFI_DATA_ERR_ARG, "a region past the right edge is refused");
        printf("message: %s\n", err);
    }
    hyfi_region_close(rp);
    hyfi_region_close(rt);
    hyfi_region_close(ro);
    {
        char bogus[1200];
        snprintf(bogus, sizeof bogus, "%s/not-an-image.tif", root);
        FILE *f = fopen(bogus, "w");
        if (f) {
            fputs("hello", f);
            fclose(f);
        }
        hyfi_region_reader *x = NULL;
        tu_check(hyfi_region_open(bogus, HYFI_REGION_AUTO, &x, err, sizeof err) !=
                     HYFI_DATA_ERR_FORMAT || x, "a text file named .tif is refused");
        printf("message: %s\n", err);
        remove(bogus);
    }
    tu_check(hyfi_dataset_set_output(sl[0], C, S / 2, S / 2, err, sizeof err) !=
                 HYFI_DATA_ERR_UNSUPPORTED, "slides are not resized");
    printf("message: %s\n", err);
    {
        char d[1200], err2[1024];
        snprintf(d, sizeof d, "%s/mixed", root);
        hyfi_data_spec spec = {.kind = HYFI_DATA_SLIDES, .split = HYFI_SPLIT_TRAIN, .dir = d};
        hyfi_dataset *ds = NULL;
        const int mrc = hyfi_dataset_open(&spec, &ds, err2, sizeof err2);
        tu_check(mrc != HYFI_DATA_ERR_FORMAT || !strstr(err2, "same size"),
                 "slides of two sizes in one split are refused");
        printf("message: %s\n", err2);
        hyfi_dataset_free(ds);
    }

    /* a real Aperio slide through OpenSlide: regions vs the whole */
    if (argc > 2) {
        hyfi_region_reader *sv = NULL;
        rc = hyfi_region_open(argv[2], HYFI_REGION_AUTO, &sv, err, sizeof err);
        if (rc) printf("%s\n", err);
        tu_check(rc || !strstr(hyfi_region_describe(sv), "aperio"), "small.svs opens as Aperio");
        if (!rc) {
            const int w = hyfi_region_width(sv), h = hyfi_region_height(sv);
            float *all = tu_alloc((size_t)3 * w * h), *part = tu_alloc((size_t)3 * w * h);
            int sbad = hyfi_region_read(sv, 0, 0, w, h, all, err, sizeof err) != 0, nonwhite = 0;
            for (size_t j = 0; j < (size_t)3 * w * h; j++) nonwhite += all[j] < 0.9f;
            for (int y0 = 0; y0 < h; y0 += 3)
                for (int x0 = 0; x0 < w; x0 += 5) {
                    const int rh = h - y0 < 7 ? h - y0 : 7, rw = w - x0 < 6 ? w - x0 : 6;
                    sbad += hyfi_region_read(sv, x0, y0, rw, rh, part, err, sizeof err) != 0;
                    for (int c = 0; c < 3; c++)
                        for (int y = 0; y < rh; y++)
                            sbad += memcmp(part + ((size_t)c * rh + y) * rw,
                                           all + ((size_t)c * h + y0 + y) * w + x0,
                                           (size_t)rw * sizeof(float)) != 0;
                }
            snprintf(what, sizeof what, "%s: %dx%d %s, regions equal the whole read (%d "
                     "samples of tissue below 0.9)", argv[2], w, h, hyfi_region_describe(sv),
                     nonwhite);
            printf("%s\n", what);
            tu_check(sbad || nonwhite == 0, what);
            free(all);
            free(part);
        }
        hyfi_region_close(sv);
    }
    for (int f = 0; f < 3; f++) {
        free(raw[f]);
        hyfi_dataset_free(sl[f]);
    }
    free(whole);
    free(reg);
    hyfi_dataset_free(ref);
    return tu_finish();
}
