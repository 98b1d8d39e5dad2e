/* Unit tests of the data module (apps/data.c): idx files (plain and gzipped),
 * CIFAR-10 batches and synthetic data with their values and error messages,
 * shuffling, batches, resize and channel conversion, the prefetcher, and the
 * real Fashion-MNIST when Debian's dataset-fashion-mnist is installed.
 * Links apps/data.c and tests/testutil.c only (no StarPU). Files are written
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
    spec = (hyfi_data_spec){.kind = HYFI_DATA_FOLDER, .dir = "/tmp"};
    rc = hyfi_dataset_open(&spec, &d, err, sizeof err);
    check_msg(rc, HYFI_DATA_ERR_UNSUPPORTED, err, "not supported yet", NULL,
              "folder: clear not-supported error");
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
    test_real_fashion();
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tu_finish();
}
