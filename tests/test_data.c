/* Unit tests of the data module's data set formats (apps/data*.c): idx files
 * (plain and gzipped), CIFAR-10 batches and synthetic data with their values
 * and error messages, and the real Fashion-MNIST when Debian's
 * dataset-fashion-mnist is installed. Image folders are in test_data_images.c,
 * shuffling, batches, resize and the prefetcher in test_data_prefetch.c.
 * Links apps/data*.c and tests/testutil.c only (no StarPU). Files are written
 * into a fresh directory under $TMPDIR (default /tmp) and removed at the end. */
#ifndef _GNU_SOURCE
#define _XOPEN_SOURCE 700 /* truncate */
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
#include <zlib.h>

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
    char root[512];
    if (data_test_root(root, sizeof root)) return 1;
    test_idx_values(root, false);
    test_idx_values(root, true);
    test_idx_plain_first(root);
    test_idx_errors(root);
    test_cifar(root);
    test_synthetic();
    test_real_fashion();
    data_test_cleanup(root);
    return tu_finish();
}
