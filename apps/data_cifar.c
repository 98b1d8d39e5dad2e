/* hyfi data module: CIFAR-10, binary version (data_batch_1..5.bin and
 * test_batch.bin, 3073-byte records), in the given directory or its
 * cifar-10-batches-bin subdirectory. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* stat */
#endif
#include "data_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CIFAR_SIDE 32
#define CIFAR_RECORD (1 + 3 * CIFAR_SIDE * CIFAR_SIDE) /* 3073 bytes */
#define CIFAR_CLASSES 10

static const char CIFAR_HINT[] =
    "pass --datapath DIR, the cifar-10-batches-bin directory of the CIFAR-10 binary "
    "version (cifar-10-binary.tar.gz), or its parent";

/* ---------------------------------------------------------------- CIFAR-10 */
static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int hyfi_dataset_load_cifar10(const char *dir, hyfi_data_split split, hyfi_dataset **out,
                              char *err, size_t errlen)
{
    static const char *const TRAIN[] = {"data_batch_1.bin", "data_batch_2.bin",
                                        "data_batch_3.bin", "data_batch_4.bin",
                                        "data_batch_5.bin"};
    static const char *const TEST[] = {"test_batch.bin"};
    if (!out) return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "cifar10: out is NULL");
    *out = NULL;
    if (!dir)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "cifar10: no directory given; %s",
                       CIFAR_HINT);
    const char *const *files = split == HYFI_SPLIT_TRAIN ? TRAIN : TEST;
    const int nfiles = split == HYFI_SPLIT_TRAIN ? 5 : 1;

    /* The batches are in dir or in dir/cifar-10-batches-bin. */
    char base[4096], path[4200];
    snprintf(base, sizeof base, "%s", dir);
    snprintf(path, sizeof path, "%s/%s", base, files[0]);
    if (!file_exists(path)) {
        char sub[4200];
        snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin/%s", dir, files[0]);
        if (!file_exists(sub))
            return hd_fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                           "cifar10: %s: not found (nor %s); %s", path, sub, CIFAR_HINT);
        snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    }

    /* First pass: sizes. Each file is a whole number of 3073-byte records. */
    size_t records[5], total = 0;
    for (int f = 0; f < nfiles; f++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", base, files[f]);
        if (stat(path, &st) != 0)
            return hd_fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                           "cifar10: %s: not found; the CIFAR-10 set is incomplete, %s", path,
                           CIFAR_HINT);
        if (!S_ISREG(st.st_mode))
            return hd_fail(err, errlen, HYFI_DATA_ERR_IO, "cifar10: %s: not a regular file; %s",
                           path, CIFAR_HINT);
        if (st.st_size == 0 || st.st_size % CIFAR_RECORD != 0)
            return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                           "cifar10: %s: %lld bytes is not a positive whole number of %d-byte "
                           "records (1 label byte + 3072 pixel bytes); the file is truncated or "
                           "not "
                           "a CIFAR-10 binary batch (CIFAR-100 records have 3074 bytes), "
                           "re-download it",
                           path, (long long)st.st_size, CIFAR_RECORD);
        records[f] = (size_t)st.st_size / CIFAR_RECORD;
        total += records[f];
    }

    static const float MEAN[3] = {0.4914f, 0.4822f, 0.4465f};
    static const float STD[3] = {0.2470f, 0.2435f, 0.2616f};
    hyfi_dataset *ds = NULL;
    int rc = hd_dataset_new(HYFI_DATA_CIFAR10, split, total, 3, CIFAR_SIDE, CIFAR_SIDE,
                            CIFAR_CLASSES, MEAN, STD, &ds, err, errlen);
    if (rc) return rc;
    const size_t chw = 3 * CIFAR_SIDE * CIFAR_SIDE;
    ds->pixels = malloc(total * chw);
    unsigned char *rec = malloc(CIFAR_RECORD * 1024);
    if (!ds->pixels || !rec) {
        free(rec);
        hyfi_dataset_free(ds);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "cifar10: out of memory for %zu images",
                       total);
    }
    /* Second pass: records -> labels and (3, 32, 32) pixel bytes. */
    size_t img = 0;
    for (int f = 0; f < nfiles && rc == 0; f++) {
        snprintf(path, sizeof path, "%s/%s", base, files[f]);
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_IO,
                         "cifar10: %s: cannot open: %s; check permissions", path, strerror(errno));
            break;
        }
        size_t left = records[f];
        while (left > 0 && rc == 0) {
            size_t want = left < 1024 ? left : 1024;
            size_t got = fread(rec, CIFAR_RECORD, want, fp);
            if (got != want) {
                rc = hd_fail(err, errlen, ferror(fp) ? HYFI_DATA_ERR_IO : HYFI_DATA_ERR_FORMAT,
                             "cifar10: %s: %s after %zu records; re-download the file", path,
                             ferror(fp) ? "read error"
                                        : "truncated (the file shrank while reading)",
                             records[f] - left + got);
                break;
            }
            for (size_t r = 0; r < got; r++, img++) {
                const unsigned char *p = rec + r * CIFAR_RECORD;
                if (p[0] >= CIFAR_CLASSES) {
                    rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                                 "cifar10: %s: label %u of record %zu is outside 0..%d; the file "
                                 "is "
                                 "corrupt or not a CIFAR-10 batch, re-download it",
                                 path, p[0], records[f] - left + r, CIFAR_CLASSES - 1);
                    break;
                }
                ds->labels[img] = p[0];
                memcpy(ds->pixels + img * chw, p + 1, chw);
            }
            left -= got;
        }
        fclose(fp);
    }
    free(rec);
    if (rc) {
        hyfi_dataset_free(ds);
        return rc;
    }
    *out = ds;
    return 0;
}
