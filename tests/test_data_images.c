/* Unit tests of the data module's image folders (apps/data_image.c,
 * apps/data_folder.c): PNG and JPEG files written here with libpng/libjpeg,
 * their decoded values, class ids, output geometry, splits (train/ with val/
 * or test/), the prefetcher over decoded images, and missing, empty and
 * corrupt files.
 * Links apps/data*.c and tests/testutil.c only (no StarPU). Files are written
 * into a fresh directory under $TMPDIR (default /tmp) and removed at the end. */
#ifndef _GNU_SOURCE
#define _XOPEN_SOURCE 700 /* symlink */
#endif
#include "data.h"
#include "data_testutil.h"
#include "testutil.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h> /* after stdio.h */
#include <png.h>
#include <setjmp.h>

/* Writers (libpng, libjpeg) with setjmp error handling, so a failed write is
 * a test failure rather than an exit. */
static int write_png(const char *path, int w, int h, int ctype, int depth, int interlace,
                     const unsigned char *rows, const png_color *pal, int npal,
                     const png_byte *trns, int ntrns)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        fclose(f);
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, ctype,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (pal) png_set_PLTE(png, info, pal, npal);
    if (trns) png_set_tRNS(png, info, trns, ntrns, NULL);
    png_write_info(png, info);
    const size_t rb = png_get_rowbytes(png, info);
    const int passes = png_set_interlace_handling(png);
    for (int p = 0; p < passes; p++)
        for (int y = 0; y < h; y++) png_write_row(png, rows + (size_t)y * rb);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return fclose(f) == 0 ? 0 : -1;
}

typedef struct test_jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} test_jerr;

static void test_jpeg_error_exit(j_common_ptr ci) { longjmp(((test_jerr *)ci->err)->jb, 1); }

/* Quality 100, no chroma subsampling: the decoded values stay close. */
static int write_jpeg(const char *path, int w, int h, int comps, const unsigned char *pix)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    static struct jpeg_compress_struct ci; /* static: well defined after the longjmp */
    static test_jerr je;
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = test_jpeg_error_exit;
    if (setjmp(je.jb)) {
        jpeg_destroy_compress(&ci);
        fclose(f);
        return -1;
    }
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = comps;
    ci.in_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 100, TRUE);
    for (int k = 0; k < ci.num_components; k++)
        ci.comp_info[k].h_samp_factor = ci.comp_info[k].v_samp_factor = 1;
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)ci.next_scanline * w * comps);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return fclose(f) == 0 ? 0 : -1;
}

/* Copy the first `keep` bytes of src to dst (keep < 0: all but -keep). */
static int copy_prefix(const char *src, const char *dst, long keep)
{
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (keep < 0) keep += (long)n;
    if (keep < 0 || (size_t)keep > n) return -1;
    return write_bytes(dst, buf, (size_t)keep, false);
}

/* mkdir -p of dir/rel's parent folders, then dir/rel. */
static char *file_in(const char *dir, const char *rel)
{
    char *p = mkpath(dir, rel);
    for (char *q = p + strlen(dir) + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(p, 0755);
            *q = '/';
        }
    return p;
}

static void write_text(const char *dir, const char *rel, const char *text)
{
    char *p = file_in(dir, rel);
    write_bytes(p, text, strlen(text), false);
    free(p);
}

/* One test image: where it goes and what the decoder must give. */
enum { FH = 5, FW = 6, ZH = 7, ZW = 9, NFOLDER = 8 };
typedef struct timg {
    const char *rel;
    int label;
    int h, w, c;       /* kept channels: 1 grey, 3 colour */
    bool jpeg;
    float want[3 * ZH * ZW]; /* (c, h, w) in 0..1 */
} timg;

/* A grey 1-channel image written as 8-bit grey PNG (1 byte a pixel). */
static void put_grey(unsigned char *px, float *want, int h, int w, int (*f)(int, int))
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            px[y * w + x] = (unsigned char)f(y, x);
            want[y * w + x] = (float)f(y, x) / 255.0f;
        }
}

static int g_a(int y, int x) { return (y * FW + x) * 8 + 3; }
static int g_r(int y, int x) { return 40 + 10 * y + 12 * x; }

/* The data set of test_folder: classes Zebra (0), cat (1), dog (2) in bytewise
 * order, eight images of every supported kind, and files to be ignored. */
static bool write_folder_set(const char *dir, timg *im)
{
    bool ok = true;
    unsigned char px[4 * 2 * ZH * ZW];
    char *p;
    memset(im, 0, NFOLDER * sizeof *im);
    /* 0: Zebra/z.png, RGB 8-bit, 7x9 (the first image: the native size) */
    im[0] = (timg){.rel = "Zebra/z.png", .label = 0, .h = ZH, .w = ZW, .c = 3};
    for (int y = 0; y < ZH; y++)
        for (int x = 0; x < ZW; x++)
            for (int c = 0; c < 3; c++) {
                int v = (c * 80 + y * 20 + x * 9) % 256;
                px[(y * ZW + x) * 3 + c] = (unsigned char)v;
                im[0].want[(c * ZH + y) * ZW + x] = v / 255.0f;
            }
    p = file_in(dir, im[0].rel);
    ok &= write_png(p, ZW, ZH, PNG_COLOR_TYPE_RGB, 8, 0, px, NULL, 0, NULL, 0) == 0;
    free(p);
    /* 1: cat/a.png, grey 8-bit */
    im[1] = (timg){.rel = "cat/a.png", .label = 1, .h = FH, .w = FW, .c = 1};
    put_grey(px, im[1].want, FH, FW, g_a);
    p = file_in(dir, im[1].rel);
    ok &= write_png(p, FW, FH, PNG_COLOR_TYPE_GRAY, 8, 0, px, NULL, 0, NULL, 0) == 0;
    free(p);
    /* 2: cat/b.PNG, RGB 16-bit (big-endian samples) */
    im[2] = (timg){.rel = "cat/b.PNG", .label = 1, .h = FH, .w = FW, .c = 3};
    for (int y = 0; y < FH; y++)
        for (int x = 0; x < FW; x++)
            for (int c = 0; c < 3; c++) {
                int v = (c * 20000 + y * 3001 + x * 1234 + 17) % 65536;
                unsigned char *q = px + 2 * ((y * FW + x) * 3 + c);
                q[0] = (unsigned char)(v >> 8);
                q[1] = (unsigned char)v;
                im[2].want[(c * FH + y) * FW + x] = v / 65535.0f;
            }
    p = file_in(dir, im[2].rel);
    ok &= write_png(p, FW, FH, PNG_COLOR_TYPE_RGB, 16, 0, px, NULL, 0, NULL, 0) == 0;
    free(p);
    /* 3: cat/sub/c.png, grey + alpha 8-bit, in a nested folder */
    im[3] = (timg){.rel = "cat/sub/c.png", .label = 1, .h = FH, .w = FW, .c = 1};
    for (int k = 0; k < FH * FW; k++) {
        px[2 * k] = (unsigned char)(220 - 7 * k);
        px[2 * k + 1] = (unsigned char)(k * 37);
        im[3].want[k] = (220 - 7 * k) / 255.0f;
    }
    p = file_in(dir, im[3].rel);
    ok &= write_png(p, FW, FH, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, px, NULL, 0, NULL, 0) == 0;
    free(p);
    /* 4: dog/p.png, 4-bit palette with transparency, interlaced */
    static const png_color PAL[8] = {{255, 0, 0},     {0, 255, 0},     {0, 0, 255},
                                     {10, 20, 30},    {200, 100, 50},  {0, 0, 0},
                                     {255, 255, 255}, {128, 64, 32}};
    static const png_byte TRNS[3] = {0, 128, 255};
    im[4] = (timg){.rel = "dog/p.png", .label = 2, .h = FH, .w = FW, .c = 3};
    const int rb4 = (FW * 4 + 7) / 8;
    memset(px, 0, (size_t)rb4 * FH);
    for (int y = 0; y < FH; y++)
        for (int x = 0; x < FW; x++) {
            int idx = (y + 2 * x) % 8;
            px[y * rb4 + x / 2] |= (unsigned char)(x % 2 ? idx : idx << 4);
            const unsigned char rgb[3] = {PAL[idx].red, PAL[idx].green, PAL[idx].blue};
            for (int c = 0; c < 3; c++) im[4].want[(c * FH + y) * FW + x] = rgb[c] / 255.0f;
        }
    p = file_in(dir, im[4].rel);
    ok &= write_png(p, FW, FH, PNG_COLOR_TYPE_PALETTE, 4, 1, px, PAL, 8, TRNS, 3) == 0;
    free(p);
    /* 5: dog/q.png, RGBA 8-bit (alpha dropped) */
    im[5] = (timg){.rel = "dog/q.png", .label = 2, .h = FH, .w = FW, .c = 3};
    for (int y = 0; y < FH; y++)
        for (int x = 0; x < FW; x++) {
            for (int c = 0; c < 3; c++) {
                int v = (c * 50 + y * 31 + x * 17) % 256;
                px[(y * FW + x) * 4 + c] = (unsigned char)v;
                im[5].want[(c * FH + y) * FW + x] = v / 255.0f;
            }
            px[(y * FW + x) * 4 + 3] = (unsigned char)((y * FW + x) * 9);
        }
    p = file_in(dir, im[5].rel);
    ok &= write_png(p, FW, FH, PNG_COLOR_TYPE_RGB_ALPHA, 8, 0, px, NULL, 0, NULL, 0) == 0;
    free(p);
    /* 6: dog/r.jpg, greyscale JPEG */
    im[6] = (timg){.rel = "dog/r.jpg", .label = 2, .h = FH, .w = FW, .c = 1, .jpeg = true};
    put_grey(px, im[6].want, FH, FW, g_r);
    p = file_in(dir, im[6].rel);
    ok &= write_jpeg(p, FW, FH, 1, px) == 0;
    free(p);
    /* 7: dog/s.JPEG, RGB JPEG */
    im[7] = (timg){.rel = "dog/s.JPEG", .label = 2, .h = FH, .w = FW, .c = 3, .jpeg = true};
    for (int y = 0; y < FH; y++)
        for (int x = 0; x < FW; x++) {
            const int v[3] = {50 + 10 * y + 8 * x, 200 - 9 * y - 5 * x, 100 + 3 * (x + y)};
            for (int c = 0; c < 3; c++) {
                px[(y * FW + x) * 3 + c] = (unsigned char)v[c];
                im[7].want[(c * FH + y) * FW + x] = v[c] / 255.0f;
            }
        }
    p = file_in(dir, im[7].rel);
    ok &= write_jpeg(p, FW, FH, 3, px) == 0;
    free(p);
    /* ignored: other files, hidden files and folders, files next to the classes */
    write_text(dir, "cat/notes.txt", "not an image\n");
    write_text(dir, "cat/.hidden.png", "hidden, not read\n");
    write_text(dir, "dog/image.png.bak", "not an image\n");
    write_text(dir, "readme.txt", "a file next to the class folders\n");
    write_text(dir, ".cache/x.txt", "a hidden folder is not a class\n");
    /* dangling symbolic links (stat fails with ENOENT): ignored, no read error */
    char *l1 = mkpath(dir, "gone"), *l2 = mkpath(dir, "dog/gone.png");
    ok &= symlink("nowhere", l1) == 0 && symlink("nowhere.png", l2) == 0;
    free(l1);
    free(l2);
    return ok;
}

/* want (c, h, w) -> (oc, FH, FW) through the documented pipeline, normalised
 * with ds's constants. */
static void folder_expect(const hyfi_dataset *ds, const timg *t, int oc, float *out)
{
    float conv[3 * ZH * ZW], tmp[3 * ZH * ZW];
    const size_t hw = (size_t)t->h * t->w, ohw = (size_t)FH * FW;
    if (oc <= t->c) {
        const float *src = t->want;
        if (oc != t->c) {
            hyfi_convert_channels(t->want, t->c, hw, conv, oc);
            src = conv;
        }
        if (t->h == FH && t->w == FW)
            memcpy(tmp, src, (size_t)oc * ohw * sizeof(float));
        else
            hyfi_resize_bilinear(src, oc, t->h, t->w, tmp, FH, FW);
    } else {
        hyfi_resize_bilinear(t->want, t->c, t->h, t->w, conv, FH, FW);
        hyfi_convert_channels(conv, t->c, ohw, tmp, oc);
    }
    for (int c = 0; c < oc; c++)
        for (size_t k = 0; k < ohw; k++)
            out[c * ohw + k] =
                (tmp[c * ohw + k] - hyfi_dataset_mean(ds, c)) / hyfi_dataset_std(ds, c);
}

static void test_folder(const char *root)
{
    char err[ERRLEN] = "", name[256];
    char *dir = subdir(root, "folder_flat");
    static timg im[NFOLDER];
    check(write_folder_set(dir, im), "folder: write 6 PNGs and 2 JPEGs with libpng/libjpeg");
    hyfi_dataset *ds = NULL;
    int rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    if (rc) printf("     error: %s\n", err);
    check(rc == 0 && ds, "folder: load the train split");
    if (!ds) {
        free(dir);
        return;
    }
    bool ok = hyfi_dataset_size(ds) == NFOLDER && hyfi_dataset_num_classes(ds) == 3 &&
              hyfi_dataset_native_channels(ds) == 3 && hyfi_dataset_native_height(ds) == ZH &&
              hyfi_dataset_native_width(ds) == ZW &&
              strcmp(hyfi_dataset_name(ds), "folder/train") == 0;
    snprintf(name, sizeof name,
             "folder: %d images (hidden, .txt, .bak, dangling links ignored), 3 classes, "
             "native 3x%dx%d (colour present, first image's size)",
             NFOLDER, ZH, ZW);
    check(ok, name);
    ok = true;
    for (int i = 0; i < NFOLDER; i++) ok &= hyfi_dataset_label(ds, (size_t)i) == im[i].label;
    check(ok, "folder: class ids bytewise (Zebra 0, cat 1, dog 2), files in order, nested "
              "subfolder after the files");
    static const float MEAN[3] = {0.485f, 0.456f, 0.406f}, STD[3] = {0.229f, 0.224f, 0.225f};
    ok = true;
    for (int c = 0; c < 3; c++)
        ok &= fabsf(hyfi_dataset_mean(ds, c) - MEAN[c]) < 1e-6f &&
              fabsf(hyfi_dataset_std(ds, c) - STD[c]) < 1e-6f;
    check(ok, "folder: ImageNet mean/std for a colour set");

    /* output 3 x 5 x 6: the size of all but the first image */
    rc = hyfi_dataset_set_output(ds, 3, FH, FW, err, sizeof err);
    check(rc == 0, "folder: set_output 3x5x6");
    float got[3 * FH * FW], want[3 * FH * FW];
    for (int i = 0; i < NFOLDER; i++) {
        rc = hyfi_dataset_image_err(ds, (size_t)i, got, err, sizeof err);
        folder_expect(ds, &im[i], 3, want);
        float maxerr = 0, maxraw = 0;
        for (int k = 0; k < 3 * FH * FW; k++) {
            maxerr = fmaxf(maxerr, fabsf(got[k] - want[k]));
            maxraw = fmaxf(maxraw, fabsf(got[k] - want[k]) * STD[k / (FH * FW)] * 255.0f);
        }
        if (im[i].jpeg) {
            /* JPEG is lossy: within 3 of 255 at quality 100 without subsampling */
            snprintf(name, sizeof name, "folder: %s -> 3x5x6 within 3/255 (max err %.2f/255)",
                     im[i].rel, (double)maxraw);
            ok = rc == 0 && maxraw <= 3.0f;
        } else {
            snprintf(name, sizeof name, "folder: %s -> 3x5x6 exact%s (max err %g)", im[i].rel,
                     im[i].h != FH ? " after bilinear resize 7x9 -> 5x6" :
                     im[i].c == 1 ? " (grey replicated)" : "", (double)maxerr);
            ok = rc == 0 && maxerr < 1e-5f;
        }
        if (rc) printf("     error: %s\n", err);
        check(ok, name);
    }

    /* output 1 x 5 x 6: grey stays, colour becomes luminance */
    rc = hyfi_dataset_set_output(ds, 1, FH, FW, err, sizeof err);
    ok = rc == 0 && fabsf(hyfi_dataset_mean(ds, 0) - 0.458971f) < 1e-5f;
    for (int i = 0; i < NFOLDER && ok; i++) {
        if (im[i].jpeg) continue;
        ok = hyfi_dataset_image(ds, (size_t)i, got) == 0;
        folder_expect(ds, &im[i], 1, want);
        for (int k = 0; k < FH * FW; k++) ok &= fabsf(got[k] - want[k]) < 1e-5f;
    }
    check(ok, "folder: set_output 1x5x6: luminance of colour PNGs, grey PNGs as they are");

    /* the prefetcher decodes in its thread: the same batches as direct calls */
    hyfi_dataset_set_output(ds, 3, 8, 8, err, sizeof err);
    enum { FB = 3 };
    const size_t E = hyfi_dataset_image_numel(ds);
    float *bx = malloc(FB * E * sizeof(float));
    int32_t by[FB];
    size_t perm[NFOLDER];
    hyfi_prefetch_config cfg = {.batch = FB, .seed = 9, .shuffle = 1, .num_steps = 7};
    hyfi_prefetch *p = NULL;
    rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
    ok = rc == 0;
    int n = 0;
    hyfi_batch b;
    while (ok && (rc = hyfi_prefetch_next(p, &b)) == 0) {
        hyfi_dataset_permutation(9, b.epoch, NFOLDER, perm);
        ok = hyfi_dataset_batch(ds, perm, b.start, FB, bx, by) == 0 &&
             memcmp(b.x, bx, FB * E * sizeof(float)) == 0 && memcmp(b.y, by, sizeof by) == 0;
        n++;
    }
    check(ok && n == 7 && rc == HYFI_DATA_END && hyfi_prefetch_error(p)[0] == '\0',
          "folder: prefetch (shuffled, 3x8x8) equals direct batches, no error");
    hyfi_prefetch_stop(p);
    free(bx);

    /* no split in a flat folder */
    check(hyfi_data_has_test_split(HYFI_DATA_FOLDER, dir) == 0,
          "folder: a flat folder has no test split");
    hyfi_dataset *t = NULL;
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TEST, &t, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_NOTFOUND, err, dir, "no test split",
              "folder: asking a flat folder for its test split");
    /* through hyfi_dataset_open */
    hyfi_data_spec spec = {.kind = HYFI_DATA_FOLDER, .split = HYFI_SPLIT_TRAIN, .dir = dir};
    rc = hyfi_dataset_open(&spec, &t, err, sizeof err);
    check(rc == 0 && hyfi_dataset_size(t) == NFOLDER, "folder: hyfi_dataset_open dispatches");
    hyfi_dataset_free(t);
    hyfi_dataset_free(ds);
    free(dir);
}

/* A grey PNG of 4x4 with every pixel v. */
static void grey_png(const char *dir, const char *rel, int v)
{
    unsigned char px[16];
    memset(px, v, sizeof px);
    char *p = file_in(dir, rel);
    write_png(p, 4, 4, PNG_COLOR_TYPE_GRAY, 8, 0, px, NULL, 0, NULL, 0);
    free(p);
}

static void test_folder_splits(const char *root)
{
    char err[ERRLEN] = "";
    /* train/ + val/: val's classes map to train's ids; grey set: 1 channel */
    char *dir = subdir(root, "folder_split");
    grey_png(dir, "train/ant/1.png", 10);
    grey_png(dir, "train/bee/2.png", 20);
    grey_png(dir, "train/bee/3.png", 30);
    grey_png(dir, "val/bee/4.png", 40);
    grey_png(dir, "test/ant/5.png", 50); /* val/ wins over test/ */
    write_text(dir, "README", "a file at the top\n");
    hyfi_dataset *tr = NULL, *te = NULL;
    int rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &tr, err, sizeof err);
    if (rc) printf("     error: %s\n", err);
    rc |= hyfi_dataset_load_folder(dir, HYFI_SPLIT_TEST, &te, err, sizeof err);
    if (rc) printf("     error: %s\n", err);
    bool ok = rc == 0 && hyfi_data_has_test_split(HYFI_DATA_FOLDER, dir) == 1 &&
              hyfi_dataset_size(tr) == 3 && hyfi_dataset_size(te) == 1 &&
              hyfi_dataset_num_classes(tr) == 2 && hyfi_dataset_num_classes(te) == 2 &&
              hyfi_dataset_label(tr, 0) == 0 && hyfi_dataset_label(tr, 2) == 1 &&
              hyfi_dataset_label(te, 0) == 1 && strcmp(hyfi_dataset_name(te), "folder/test") == 0;
    check(ok, "folder split: train/ + val/ detected, val's bee is train's class 1");
    ok = rc == 0 && hyfi_dataset_channels(tr) == 1 &&
         fabsf(hyfi_dataset_mean(tr, 0) - 0.458971f) < 1e-5f &&
         fabsf(hyfi_dataset_std(tr, 0) - 0.225609f) < 1e-5f;
    float v[16] = {0};
    ok &= rc == 0 && hyfi_dataset_image(te, 0, v) == 0 &&
          fabsf(v[5] - (40 / 255.0f - 0.458971f) / 0.225609f) < 1e-4f;
    check(ok, "folder split: a grey-only set has 1 channel and luminance-weighted constants");
    hyfi_dataset_free(tr);
    hyfi_dataset_free(te);
    tr = te = NULL;
    free(dir);

    /* train/ + test/ (no val/) */
    dir = subdir(root, "folder_split_test");
    grey_png(dir, "train/a/1.png", 1);
    grey_png(dir, "train/b/1.png", 2);
    grey_png(dir, "test/a/1.png", 3);
    grey_png(dir, "test/b/1.png", 4);
    hyfi_data_spec spec = {.kind = HYFI_DATA_FOLDER, .split = HYFI_SPLIT_TEST, .dir = dir};
    rc = hyfi_dataset_open(&spec, &te, err, sizeof err);
    check(rc == 0 && hyfi_data_has_test_split(HYFI_DATA_FOLDER, dir) &&
              hyfi_dataset_size(te) == 2 && hyfi_dataset_label(te, 1) == 1,
          "folder split: train/ + test/ when there is no val/");
    hyfi_dataset_free(te);
    te = NULL;
    free(dir);

    /* only train/: no split, train is a class */
    dir = subdir(root, "folder_train_only");
    grey_png(dir, "train/x.png", 1);
    grey_png(dir, "other/y.png", 2);
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &tr, err, sizeof err);
    check(rc == 0 && hyfi_data_has_test_split(HYFI_DATA_FOLDER, dir) == 0 &&
              hyfi_dataset_num_classes(tr) == 2 && hyfi_dataset_size(tr) == 2,
          "folder split: train/ without val/ or test/ is just a class");
    hyfi_dataset_free(tr);
    tr = NULL;
    free(dir);

    /* a test class unknown to train */
    dir = subdir(root, "folder_split_bad");
    grey_png(dir, "train/a/1.png", 1);
    grey_png(dir, "val/zzz/1.png", 1);
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TEST, &te, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, "val/zzz", "not a class",
              "folder split: a val class missing from train");
    free(dir);
}

static void test_folder_errors(const char *root)
{
    char err[ERRLEN] = "";
    hyfi_dataset *ds = NULL;
    int rc;
    char *dir, *bad;

    dir = mkpath(root, "folder_missing");
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_NOTFOUND, err, dir, "--datapath", "folder: missing directory");
    free(dir);
    rc = hyfi_dataset_load_folder(NULL, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "no directory", NULL, "folder: NULL directory");

    dir = subdir(root, "folder_noclass");
    grey_png(dir, "loose.png", 1);
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, dir, "no class subfolders",
              "folder: images but no class folder");
    free(dir);

    dir = subdir(root, "folder_emptyclass");
    grey_png(dir, "a/1.png", 1);
    write_text(dir, "b/notes.txt", "no images here\n");
    bad = mkpath(dir, "b");
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, bad, "empty class folder",
              "folder: class folder without images");
    free(bad);
    free(dir);

    dir = subdir(root, "folder_notimage");
    grey_png(dir, "a/1.png", 1);
    write_text(dir, "a/2.png", "this is text\n");
    bad = mkpath(dir, "a/2.png");
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, bad, "not a PNG or JPEG",
              "folder: a text file named .png");
    free(bad);
    free(dir);

    /* a larger noisy image so that the data spans some kilobytes */
    enum { NW = 40, NH = 30 };
    unsigned char px[NW * NH * 3];
    uint64_t st = 77;
    for (size_t k = 0; k < sizeof px; k++) px[k] = (unsigned char)tu_next(&st);
    dir = subdir(root, "folder_corrupt");
    char *good_png = file_in(dir, "a/good.png"), *good_jpg = file_in(dir, "a/good.jpg");
    write_png(good_png, NW, NH, PNG_COLOR_TYPE_RGB, 8, 0, px, NULL, 0, NULL, 0);
    write_jpeg(good_jpg, NW, NH, 3, px);

    /* truncated inside the header (IHDR): the load fails */
    char *d2 = subdir(root, "folder_png_hdr");
    bad = file_in(d2, "a/cut.png");
    copy_prefix(good_png, bad, 20);
    rc = hyfi_dataset_load_folder(d2, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, bad, "PNG", "folder: PNG truncated in its header");
    free(bad);
    free(d2);

    /* JPEG with garbage after the SOI marker: the load fails */
    d2 = subdir(root, "folder_jpg_hdr");
    bad = file_in(d2, "a/garbage.jpg");
    unsigned char junk[64] = {0xFF, 0xD8, 0xFF};
    for (size_t k = 3; k < sizeof junk; k++) junk[k] = (unsigned char)(k * 13);
    write_bytes(bad, junk, sizeof junk, false);
    rc = hyfi_dataset_load_folder(d2, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, bad, "JPEG", "folder: corrupt JPEG header");
    free(bad);
    free(d2);

    /* truncated in the pixel data: loads (headers fine), fails when decoded */
    char *cut_png = file_in(dir, "b/cut.png"), *cut_jpg = file_in(dir, "b/cut.jpg");
    copy_prefix(good_png, cut_png, -200);
    copy_prefix(good_jpg, cut_jpg, -300);
    rc = hyfi_dataset_load_folder(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    if (rc) printf("     error: %s\n", err);
    check(rc == 0 && hyfi_dataset_size(ds) == 4, "folder: data truncated past the header loads");
    if (ds) {
        /* order: a/good.jpg, a/good.png, b/cut.jpg, b/cut.png */
        float *img = malloc(hyfi_dataset_image_numel(ds) * sizeof(float));
        rc = hyfi_dataset_image_err(ds, 0, img, err, sizeof err);
        rc |= hyfi_dataset_image_err(ds, 1, img, err, sizeof err);
        check(rc == 0, "folder: the intact PNG and JPEG decode");
        rc = hyfi_dataset_image_err(ds, 3, img, err, sizeof err);
        check_msg(rc, HYFI_DATA_ERR_FORMAT, err, cut_png, "truncated",
                  "folder: PNG truncated in its data, named when decoded");
        rc = hyfi_dataset_image_err(ds, 2, img, err, sizeof err);
        check_msg(rc, HYFI_DATA_ERR_FORMAT, err, cut_jpg, "Premature end",
                  "folder: JPEG truncated in its data, named when decoded");
        check(hyfi_dataset_image(ds, 3, img) == HYFI_DATA_ERR_FORMAT,
              "folder: hyfi_dataset_image returns the code too");
        /* through the prefetcher: the code and the message come back */
        hyfi_prefetch_config cfg = {.batch = 4, .shuffle = 0, .num_steps = 3};
        hyfi_prefetch *p = NULL;
        hyfi_batch b;
        rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
        int prc = rc ? rc : hyfi_prefetch_next(p, &b);
        const char *msg = p ? hyfi_prefetch_error(p) : "";
        check_msg(prc, HYFI_DATA_ERR_FORMAT, msg, cut_jpg, "folder: ",
                  "folder: prefetcher reports the corrupt file");
        hyfi_prefetch_stop(p);
        free(img);
        hyfi_dataset_free(ds);
        ds = NULL;
    }
    free(cut_png);
    free(cut_jpg);
    free(good_png);
    free(good_jpg);
    free(dir);
}

int main(void)
{
    char root[512];
    if (data_test_root(root, sizeof root)) return 1;
    test_folder(root);
    test_folder_splits(root);
    test_folder_errors(root);
    data_test_cleanup(root);
    return tu_finish();
}
