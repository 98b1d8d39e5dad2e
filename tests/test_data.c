/* Unit tests of the data module (apps/data*.c): idx files (plain and gzipped),
 * CIFAR-10 batches and synthetic data with their values and error messages,
 * shuffling, batches, resize and channel conversion, the prefetcher, image
 * folders (PNG and JPEG files written here with libpng/libjpeg: values, class
 * ids, splits, corrupt files), and the real Fashion-MNIST when Debian's
 * dataset-fashion-mnist is installed.
 * Links apps/data*.c and tests/testutil.c only (no StarPU). Files are written
 * into a fresh directory under $TMPDIR (default /tmp) and removed at the end. */
#ifndef _GNU_SOURCE
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, truncate */
#endif
#include "data.h"
#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <jpeglib.h> /* after stdio.h */
#include <png.h>
#include <setjmp.h>

#define ERRLEN 1024

/* ---------------------------------------------------------------- helpers */
static void check(bool ok, const char *name)
{
    printf("%-4s %s\n", ok ? "ok" : "FAIL", name);
    tu_check(!ok, name);
}

/* The message names `what` (a path or a word); prints it either way. */
static void check_msg(int rc, int want_rc, const char *err, const char *what, const char *what2,
                      const char *name)
{
    bool ok = rc == want_rc && strstr(err, what) && (!what2 || strstr(err, what2));
    printf("%-4s %s: rc %s (want %s): \"%s\"\n", ok ? "ok" : "FAIL", name,
           hyfi_data_status_name(rc), hyfi_data_status_name(want_rc), err);
    tu_check(!ok, name);
}

static int write_bytes(const char *path, const void *data, size_t n, bool gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) return -1;
        int w = n ? gzwrite(f, data, (unsigned)n) : 0;
        return (gzclose(f) == Z_OK && (size_t)w == n) ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* idx3 image file bytes: header + n*rows*cols pixels; *len gets the size. */
static unsigned char *idx3(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols,
                           const unsigned char *pix, size_t *len)
{
    *len = 16 + (size_t)n * rows * cols;
    unsigned char *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    memcpy(b + 16, pix, (size_t)n * rows * cols);
    return b;
}

static unsigned char *idx1(uint32_t magic, uint32_t n, const unsigned char *lab, size_t *len)
{
    *len = 8 + (size_t)n;
    unsigned char *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    memcpy(b + 8, lab, n);
    return b;
}

/* A directory with the four idx files of a tiny set: train N images of R x C,
 * test NT images. Pixel k of image i is (i*37 + k*11) mod 256, label i mod 10. */
enum { N = 13, NT = 4, R = 3, C = 5 };

static unsigned char pix_of(int i, int k) { return (unsigned char)((i * 37 + k * 11) % 256); }

static void write_idx_set(const char *dir, bool gz)
{
    unsigned char pix[N * R * C], lab[N];
    for (int i = 0; i < N; i++) {
        lab[i] = (unsigned char)(i % 10);
        for (int k = 0; k < R * C; k++) pix[i * R * C + k] = pix_of(i, k);
    }
    const char *ext = gz ? ".gz" : "";
    char p[512];
    size_t len;
    unsigned char *b;
    b = idx3(0x803, N, R, C, pix, &len);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
    b = idx1(0x801, N, lab, &len);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
    b = idx3(0x803, NT, R, C, pix, &len);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
    b = idx1(0x801, NT, lab, &len);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
}

static char *subdir(const char *root, const char *name)
{
    size_t n = strlen(root) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        exit(99);
    }
    snprintf(p, n, "%s/%s", root, name);
    mkdir(p, 0755);
    return p;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* ------------------------------------------------------------------- tests */
static void test_idx_values(const char *root, bool gz)
{
    char name[128];
    char *dir = subdir(root, gz ? "idx_gz" : "idx_plain");
    write_idx_set(dir, gz);
    char err[ERRLEN] = "";
    hyfi_dataset *ds = NULL;
    int rc = hyfi_dataset_load_idx(HYFI_DATA_FASHION_MNIST, dir, HYFI_SPLIT_TRAIN, &ds, err,
                                   sizeof err);
    snprintf(name, sizeof name, "idx %s: load train", gz ? "gz" : "plain");
    if (rc) printf("     error: %s\n", err);
    check(rc == 0 && ds, name);
    if (!ds) {
        free(dir);
        return;
    }
    snprintf(name, sizeof name, "idx %s: N, C, H, W, classes, name", gz ? "gz" : "plain");
    check(hyfi_dataset_size(ds) == N && hyfi_dataset_channels(ds) == 1 &&
              hyfi_dataset_height(ds) == R && hyfi_dataset_width(ds) == C &&
              hyfi_dataset_num_classes(ds) == 10 &&
              strcmp(hyfi_dataset_name(ds), "fashion-mnist/train") == 0,
          name);
    float img[R * C], want[R * C];
    bool lab_ok = true;
    float maxerr = 0;
    for (int i = 0; i < N; i++) {
        hyfi_dataset_image(ds, (size_t)i, img);
        for (int k = 0; k < R * C; k++) {
            want[k] = (pix_of(i, k) / 255.0f - 0.2860f) / 0.3530f;
            maxerr = fmaxf(maxerr, fabsf(img[k] - want[k]));
        }
        lab_ok &= hyfi_dataset_label(ds, (size_t)i) == i % 10;
    }
    snprintf(name, sizeof name, "idx %s: pixels normalised with fashion-mnist mean/std (max err %g)",
             gz ? "gz" : "plain", maxerr);
    check(maxerr < 1e-5f, name);
    snprintf(name, sizeof name, "idx %s: labels", gz ? "gz" : "plain");
    check(lab_ok, name);
    hyfi_dataset_free(ds);

    rc = hyfi_dataset_load_idx(HYFI_DATA_MNIST, dir, HYFI_SPLIT_TEST, &ds, err, sizeof err);
    snprintf(name, sizeof name, "idx %s: load t10k as mnist (%d images, mnist constants)",
             gz ? "gz" : "plain", NT);
    bool ok = rc == 0 && hyfi_dataset_size(ds) == NT &&
              strcmp(hyfi_dataset_name(ds), "mnist/test") == 0;
    if (ok) {
        hyfi_dataset_image(ds, 2, img);
        ok = fabsf(img[3] - (pix_of(2, 3) / 255.0f - 0.1307f) / 0.3081f) < 1e-5f;
    }
    check(ok, name);
    hyfi_dataset_free(ds);
    free(dir);
}

/* Plain NAME wins over NAME.gz when both exist. */
static void test_idx_plain_first(const char *root)
{
    char *dir = subdir(root, "idx_both");
    write_idx_set(dir, true);
    /* plain files with different content: 2 images */
    unsigned char pix[2 * R * C] = {0}, lab[2] = {7, 3};
    size_t len;
    char p[512];
    unsigned char *b = idx3(0x803, 2, R, C, pix, &len);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    write_bytes(p, b, len, false);
    free(b);
    b = idx1(0x801, 2, lab, &len);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    write_bytes(p, b, len, false);
    free(b);
    char err[ERRLEN] = "";
    hyfi_dataset *ds = NULL;
    int rc = hyfi_dataset_load_idx(HYFI_DATA_FASHION_MNIST, dir, HYFI_SPLIT_TRAIN, &ds, err,
                                   sizeof err);
    check(rc == 0 && hyfi_dataset_size(ds) == 2 && hyfi_dataset_label(ds, 0) == 7,
          "idx: NAME is read before NAME.gz");
    hyfi_dataset_free(ds);
    free(dir);
}

/* Write one broken file into a copy of the tiny set and check the message. */
typedef struct {
    const char *what;
    const char *file;        /* which file is replaced */
    bool gz;
    int want_rc;
    const char *word;        /* a word the message must have */
} corrupt_case;

static void test_idx_errors(const char *root)
{
    char err[ERRLEN];
    hyfi_dataset *ds = NULL;
    int rc;

    /* missing directory / file */
    char *dir = subdir(root, "idx_missing");
    err[0] = 0;
    rc = hyfi_dataset_load_idx(HYFI_DATA_FASHION_MNIST, dir, HYFI_SPLIT_TRAIN, &ds, err,
                               sizeof err);
    char path[600];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    check_msg(rc, HYFI_DATA_ERR_NOTFOUND, err, path, "dataset-fashion-mnist",
              "idx: missing file named, with the Debian package and --datapath");
    check(strstr(err, "--datapath") != NULL && ds == NULL, "idx: missing file mentions --datapath");
    rc = hyfi_dataset_load_idx(HYFI_DATA_MNIST, dir, HYFI_SPLIT_TEST, &ds, err, sizeof err);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", dir);
    check_msg(rc, HYFI_DATA_ERR_NOTFOUND, err, path, "--datapath", "idx: mnist missing t10k file");
    rc = hyfi_dataset_load_idx(HYFI_DATA_MNIST, NULL, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "--datapath", NULL, "idx: mnist without a directory");
    free(dir);

    /* the labels file missing while the images exist */
    dir = subdir(root, "idx_nolabels");
    write_idx_set(dir, false);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte", dir);
    remove(path);
    rc = hyfi_dataset_load_idx(HYFI_DATA_FASHION_MNIST, dir, HYFI_SPLIT_TRAIN, &ds, err,
                               sizeof err);
    check_msg(rc, HYFI_DATA_ERR_NOTFOUND, err, path, NULL, "idx: missing labels file named");
    free(dir);

    unsigned char pix[N * R * C], lab[N];
    for (int i = 0; i < N * R * C; i++) pix[i] = (unsigned char)i;
    for (int i = 0; i < N; i++) lab[i] = (unsigned char)(i % 10);
    const corrupt_case cases[] = {
        {"bad image magic", "train-images-idx3-ubyte", false, HYFI_DATA_ERR_FORMAT, "magic"},
        {"label file as images", "train-images-idx3-ubyte", false, HYFI_DATA_ERR_FORMAT,
         "label file"},
        {"bad label magic", "train-labels-idx1-ubyte", true, HYFI_DATA_ERR_FORMAT, "magic"},
        {"truncated images (plain)", "train-images-idx3-ubyte", false, HYFI_DATA_ERR_FORMAT,
         "truncated"},
        {"truncated images (gz content)", "train-images-idx3-ubyte", true, HYFI_DATA_ERR_FORMAT,
         "truncated"},
        {"truncated header", "train-labels-idx1-ubyte", false, HYFI_DATA_ERR_FORMAT, "truncated"},
        {"count mismatch", "train-labels-idx1-ubyte", false, HYFI_DATA_ERR_FORMAT, "labels"},
        {"label out of range", "train-labels-idx1-ubyte", true, HYFI_DATA_ERR_FORMAT, "outside 0..9"},
        {"trailing bytes", "train-images-idx3-ubyte", false, HYFI_DATA_ERR_FORMAT, "trailing"},
        {"zero rows", "train-images-idx3-ubyte", false, HYFI_DATA_ERR_FORMAT, "implausible"},
        {"corrupt gzip stream", "train-images-idx3-ubyte", true, HYFI_DATA_ERR_FORMAT, "gzip"},
        {"cut gzip file", "train-images-idx3-ubyte", true, HYFI_DATA_ERR_FORMAT, "truncated"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const corrupt_case *cc = &cases[c];
        char sub[64];
        snprintf(sub, sizeof sub, "idx_bad%zu", c);
        dir = subdir(root, sub);
        write_idx_set(dir, false);
        char good[600];
        snprintf(good, sizeof good, "%s/%s", dir, cc->file);
        if (cc->gz) remove(good); /* the .gz replaces the plain file */
        snprintf(path, sizeof path, "%s/%s%s", dir, cc->file, cc->gz ? ".gz" : "");
        size_t len = 0;
        unsigned char *b = NULL;
        switch (c) {
        case 0: b = idx3(0x804, N, R, C, pix, &len); break;
        case 1: b = idx3(0x801, N, R, C, pix, &len); break;
        case 2: b = idx1(0x803, N, lab, &len); break;
        case 3: b = idx3(0x803, N, R, C, pix, &len); len -= 7; break;
        case 4: b = idx3(0x803, N, R, C, pix, &len); len -= R * C; break;
        case 5: b = idx1(0x801, N, lab, &len); len = 6; break;
        case 6: b = idx1(0x801, N - 1, lab, &len); break;
        case 7: {
            unsigned char bad[N];
            memcpy(bad, lab, N);
            bad[5] = 10;
            b = idx1(0x801, N, bad, &len);
            break;
        }
        case 8: {
            unsigned char big[N * R * C + 3] = {0};
            b = idx3(0x803, N, R, C, big, &len);
            b = realloc(b, len + 3);
            memset(b + len, 0, 3);
            len += 3;
            break;
        }
        case 9: b = idx3(0x803, N, 0, C, pix, &len); break;
        default: b = idx3(0x803, N, R, C, pix, &len); break;
        }
        if (c == 10 || c == 11) {
            /* gzip it ourselves, then damage the compressed bytes */
            uLongf clen = compressBound(len) + 64;
            unsigned char *z = malloc(clen);
            char tmp[640];
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            write_bytes(tmp, b, len, true);
            FILE *f = fopen(tmp, "rb");
            size_t zl = fread(z, 1, clen, f);
            fclose(f);
            remove(tmp);
            if (c == 10)
                for (size_t k = 12; k < zl - 8; k += 3) z[k] ^= 0x5a; /* garbage deflate data */
            else
                zl = zl / 2; /* cut the compressed file */
            write_bytes(path, z, zl, false);
            free(z);
        } else {
            write_bytes(path, b, len, cc->gz);
        }
        free(b);
        err[0] = 0;
        ds = NULL;
        rc = hyfi_dataset_load_idx(HYFI_DATA_FASHION_MNIST, dir, HYFI_SPLIT_TRAIN, &ds, err,
                                   sizeof err);
        char name[128];
        snprintf(name, sizeof name, "idx: %s names %s", cc->what, cc->file);
        check_msg(rc, cc->want_rc, err, path, cc->word, name);
        if (c == 6) { /* count mismatch names both files */
            snprintf(good, sizeof good, "%s/train-images-idx3-ubyte", dir);
            check(strstr(err, good) != NULL, "idx: count mismatch names the images file too");
        }
        check(ds == NULL, "idx: no dataset on error");
        hyfi_dataset_free(ds);
        free(dir);
    }
}

/* CIFAR-10: record r of batch file f has label (f*7 + r) % 10 and pixel k =
 * (f*31 + r*17 + k) % 256. */
static unsigned char cifar_pix(int f, int r, int k) { return (unsigned char)((f * 31 + r * 17 + k) % 256); }

static void write_cifar(const char *dir, const int *counts)
{
    static const char *const names[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                        "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
    for (int f = 0; f < 6; f++) {
        size_t len = (size_t)counts[f] * 3073;
        unsigned char *b = malloc(len ? len : 1);
        for (int r = 0; r < counts[f]; r++) {
            b[(size_t)r * 3073] = (unsigned char)((f * 7 + r) % 10);
            for (int k = 0; k < 3072; k++) b[(size_t)r * 3073 + 1 + k] = cifar_pix(f, r, k);
        }
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, names[f]);
        write_bytes(p, b, len, false);
        free(b);
    }
}

static void test_cifar(const char *root)
{
    static const int counts[6] = {2, 3, 1, 2, 4, 3};
    static const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, sd[3] = {0.2470f, 0.2435f, 0.2616f};
    char *top = subdir(root, "cifar");
    char *dir = subdir(top, "cifar-10-batches-bin");
    write_cifar(dir, counts);
    char err[ERRLEN] = "";
    hyfi_dataset *ds = NULL;
    /* the parent directory works too */
    int rc = hyfi_dataset_load_cifar10(top, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    if (rc) printf("     error: %s\n", err);
    check(rc == 0 && hyfi_dataset_size(ds) == 12 && hyfi_dataset_channels(ds) == 3 &&
              hyfi_dataset_height(ds) == 32 && hyfi_dataset_width(ds) == 32 &&
              hyfi_dataset_num_classes(ds) == 10,
          "cifar10: train = 5 batches (12 records), 3x32x32, via the parent directory");
    if (rc == 0) {
        float img[3072];
        float maxerr = 0;
        bool lab_ok = true;
        size_t i = 0;
        for (int f = 0; f < 5; f++)
            for (int r = 0; r < counts[f]; r++, i++) {
                hyfi_dataset_image(ds, i, img);
                for (int k = 0; k < 3072; k++) {
                    int c = k / 1024;
                    float want = (cifar_pix(f, r, k) / 255.0f - mean[c]) / sd[c];
                    maxerr = fmaxf(maxerr, fabsf(img[k] - want));
                }
                lab_ok &= hyfi_dataset_label(ds, i) == (f * 7 + r) % 10;
            }
        check(maxerr < 1e-5f, "cifar10: CHW pixels normalised per channel, in file order");
        check(lab_ok, "cifar10: labels in file order");
    }
    hyfi_dataset_free(ds);
    rc = hyfi_dataset_load_cifar10(dir, HYFI_SPLIT_TEST, &ds, err, sizeof err);
    check(rc == 0 && hyfi_dataset_size(ds) == 3 && hyfi_dataset_label(ds, 1) == (5 * 7 + 1) % 10 &&
              strcmp(hyfi_dataset_name(ds), "cifar10/test") == 0,
          "cifar10: test_batch.bin");
    hyfi_dataset_free(ds);

    /* errors */
    char path[700];
    snprintf(path, sizeof path, "%s/data_batch_3.bin", dir);
    truncate(path, 3073 * 1 - 5);
    rc = hyfi_dataset_load_cifar10(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, path, "3073", "cifar10: truncated batch named");
    remove(path);
    rc = hyfi_dataset_load_cifar10(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_NOTFOUND, err, path, NULL, "cifar10: missing batch 3 named");
    write_cifar(dir, counts);
    snprintf(path, sizeof path, "%s/data_batch_4.bin", dir);
    FILE *f = fopen(path, "r+b");
    fseek(f, 3073, SEEK_SET);
    fputc(10, f); /* label of record 1 */
    fclose(f);
    rc = hyfi_dataset_load_cifar10(dir, HYFI_SPLIT_TRAIN, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_FORMAT, err, path, "label 10", "cifar10: bad label named");
    char *empty = subdir(root, "cifar_empty");
    snprintf(path, sizeof path, "%s/test_batch.bin", empty);
    rc = hyfi_dataset_load_cifar10(empty, HYFI_SPLIT_TEST, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_NOTFOUND, err, path, "--datapath", "cifar10: missing directory");
    rc = hyfi_dataset_load_cifar10(NULL, HYFI_SPLIT_TEST, &ds, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "--datapath", NULL, "cifar10: no directory");
    free(empty);
    free(dir);
    free(top);
}

static void test_synthetic(void)
{
    char err[ERRLEN] = "";
    hyfi_dataset *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    int rc = hyfi_dataset_synthetic(3, 7, 5, 10, 20, 42, &a, err, sizeof err) |
             hyfi_dataset_synthetic(3, 7, 5, 10, 20, 42, &b, err, sizeof err) |
             hyfi_dataset_synthetic(3, 7, 5, 10, 50, 42, &c, err, sizeof err) |
             hyfi_dataset_synthetic(3, 7, 5, 10, 20, 43, &d, err, sizeof err);
    check(rc == 0, "synthetic: create");
    if (rc) goto out;
    float x1[105], x2[105], x3[105], x4[105];
    bool same = true, same_prefix = true, lab_range = true, differs = false;
    float lo = 1e9f, hi = -1e9f;
    int hist[10] = {0};
    for (size_t i = 0; i < 20; i++) {
        hyfi_dataset_image(a, i, x1);
        hyfi_dataset_image(b, i, x2);
        hyfi_dataset_image(c, i, x3);
        hyfi_dataset_image(d, i, x4);
        same &= memcmp(x1, x2, sizeof x1) == 0 && hyfi_dataset_label(a, i) == hyfi_dataset_label(b, i);
        same_prefix &= memcmp(x1, x3, sizeof x1) == 0 &&
                       hyfi_dataset_label(a, i) == hyfi_dataset_label(c, i);
        differs |= memcmp(x1, x4, sizeof x1) != 0;
        lab_range &= hyfi_dataset_label(a, i) >= 0 && hyfi_dataset_label(a, i) < 10;
        for (int k = 0; k < 105; k++) {
            lo = fminf(lo, x1[k]);
            hi = fmaxf(hi, x1[k]);
        }
    }
    for (size_t i = 0; i < 50; i++) hist[hyfi_dataset_label(c, i)]++;
    int used = 0;
    for (int k = 0; k < 10; k++) used += hist[k] > 0;
    check(same, "synthetic: same seed, same images and labels");
    check(same_prefix, "synthetic: image i does not depend on the count");
    check(differs, "synthetic: another seed, other images");
    check(lab_range && used >= 5, "synthetic: labels in 0..9 and spread");
    printf("     synthetic values in [%g, %g]\n", lo, hi);
    check(lo >= -1.0f && hi <= 1.0f && lo < -0.9f && hi > 0.9f,
          "synthetic: values cover [-1, 1] (mean 0.5 std 0.5)");
    hyfi_dataset_free(d);
    d = NULL;
    rc = hyfi_dataset_synthetic(3, 0, 5, 10, 20, 42, &d, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "--image-size", NULL, "synthetic: zero height refused");
    rc = hyfi_dataset_synthetic(3, 4, 5, 1, 20, 42, &d, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "--num-classes", NULL, "synthetic: one class refused");
    hyfi_data_spec spec = {.kind = HYFI_DATA_SYNTHETIC, .split = HYFI_SPLIT_TEST};
    rc = hyfi_dataset_open(&spec, &d, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "no test split", NULL, "synthetic: no test split");
    spec = (hyfi_data_spec){.kind = HYFI_DATA_SYNTHETIC, .channels = 1, .height = 4, .width = 4,
                            .num_classes = 3, .count = 9, .seed = 1};
    rc = hyfi_dataset_open(&spec, &d, err, sizeof err);
    check(rc == 0 && hyfi_dataset_size(d) == 9 && hyfi_dataset_num_classes(d) == 3,
          "synthetic: open through a spec");
    hyfi_dataset_free(d);
    d = NULL;
    spec = (hyfi_data_spec){.kind = HYFI_DATA_FOLDER, .dir = NULL};
    rc = hyfi_dataset_open(&spec, &d, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "no directory given", "--datapath",
              "folder: open without a directory says to pass --datapath");
out:
    hyfi_dataset_free(a);
    hyfi_dataset_free(b);
    hyfi_dataset_free(c);
    hyfi_dataset_free(d);
}

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
    cfg.batch = 0;
    rc = hyfi_prefetch_start(ds, &cfg, &p, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_ARG, err, "batch size", NULL, "prefetch: batch 0 refused");
    free(want);
    hyfi_dataset_free(ds);
}

/* ---------------------------------------------------------- image folders */
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

static char *mkpath(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        exit(99);
    }
    snprintf(p, n, "%s/%s", a, b);
    return p;
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

/* The real Fashion-MNIST of Debian's dataset-fashion-mnist, when installed. */
static void test_real_fashion(void)
{
    struct stat st;
    if (stat(HYFI_FASHION_MNIST_DEFAULT_DIR, &st) != 0) {
        printf("skip real fashion-mnist: %s not found (Debian package dataset-fashion-mnist)\n",
               HYFI_FASHION_MNIST_DEFAULT_DIR);
        return;
    }
    for (int split = 0; split < 2; split++) {
        char err[ERRLEN] = "", name[160];
        hyfi_dataset *ds = NULL;
        int rc = hyfi_dataset_load_idx(HYFI_DATA_FASHION_MNIST, NULL, (hyfi_data_split)split, &ds,
                                       err, sizeof err);
        size_t want_n = split ? 10000 : 60000;
        if (rc) printf("     error: %s\n", err);
        snprintf(name, sizeof name, "real fashion-mnist %s: %zu images of 1x28x28",
                 split ? "test" : "train", want_n);
        check(rc == 0 && hyfi_dataset_size(ds) == want_n && hyfi_dataset_channels(ds) == 1 &&
                  hyfi_dataset_height(ds) == 28 && hyfi_dataset_width(ds) == 28,
              name);
        if (rc) continue;
        size_t hist[10] = {0};
        for (size_t i = 0; i < want_n; i++) hist[hyfi_dataset_label(ds, i)]++;
        bool bal = true;
        for (int k = 0; k < 10; k++) bal &= hist[k] == want_n / 10;
        snprintf(name, sizeof name, "real fashion-mnist %s: %zu images per class",
                 split ? "test" : "train", want_n / 10);
        check(bal, name);
        /* the constants normalise the train split to mean ~0, std ~1 */
        double s = 0, s2 = 0;
        float img[784];
        for (size_t i = 0; i < want_n; i++) {
            hyfi_dataset_image(ds, i, img);
            for (int k = 0; k < 784; k++) {
                s += img[k];
                s2 += (double)img[k] * img[k];
            }
        }
        double cnt = (double)want_n * 784, mean = s / cnt, sd = sqrt(s2 / cnt - mean * mean);
        snprintf(name, sizeof name, "real fashion-mnist %s: normalised mean %.4f std %.4f",
                 split ? "test" : "train", mean, sd);
        check(fabs(mean) < 0.02 && fabs(sd - 1) < 0.02, name);
        hyfi_dataset_free(ds);
    }
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    char root[512];
    snprintf(root, sizeof root, "%s/hyfi_test_data_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_idx_values(root, false);
    test_idx_values(root, true);
    test_idx_plain_first(root);
    test_idx_errors(root);
    test_cifar(root);
    test_synthetic();
    test_permutation();
    test_batch();
    test_resize_and_channels(root);
    test_prefetch();
    test_folder(root);
    test_folder_splits(root);
    test_folder_errors(root);
    test_real_fashion();
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tu_finish();
}
