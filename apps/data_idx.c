/* hyfi data module: MNIST and Fashion-MNIST idx files, plain or gzipped
 * (read through zlib either way): magic numbers, dimensions, counts,
 * truncation, trailing bytes and the label range are checked. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* stat */
#endif
#include "data_impl.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_CLASSES 10

static const char FASHION_HINT[] =
    "install Debian's dataset-fashion-mnist (files in " HYFI_FASHION_MNIST_DEFAULT_DIR
    ") or pass --datapath DIR";
static const char MNIST_HINT[] =
    "MNIST has no default location: pass --datapath DIR, a directory with "
    "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
    "t10k-labels-idx1-ubyte (each plain or .gz)";

/* --------------------------------------------------------------------- idx */
static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* An open idx file: plain or gzipped, read through zlib either way. */
typedef struct idx_file {
    gzFile f;
    char path[4096];
} idx_file;

/* Open <dir>/<base>, else <dir>/<base>.gz. */
static int idx_open(const char *dsname, const char *dir, const char *base, const char *hint,
                    idx_file *xf, char *err, size_t errlen)
{
    struct stat st;
    xf->f = NULL;
    int found = 0;
    for (int gz = 0; gz < 2 && !found; gz++) {
        int n = snprintf(xf->path, sizeof xf->path, "%s/%s%s", dir, base, gz ? ".gz" : "");
        if (n < 0 || (size_t)n >= sizeof xf->path)
            return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "%s: %s/%s: path too long", dsname, dir,
                           base);
        if (stat(xf->path, &st) == 0) found = 1;
    }
    if (!found)
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                       "%s: %s/%s.gz: not found (nor %s/%s); "
                       "%s", dsname, dir, base, dir, base, hint);
    if (S_ISDIR(st.st_mode))
        return hd_fail(err, errlen, HYFI_DATA_ERR_IO,
                       "%s: %s: is a directory, expected an idx file; %s", dsname, xf->path, hint);
    errno = 0;
    xf->f = gzopen(xf->path, "rb");
    if (!xf->f)
        return hd_fail(err, errlen, HYFI_DATA_ERR_IO, "%s: %s: cannot open: %s; check permissions",
                       dsname, xf->path, errno ? strerror(errno) : "out of memory");
    gzbuffer(xf->f, 1 << 17);
    return 0;
}

static void idx_close(idx_file *xf)
{
    if (xf->f) gzclose_r(xf->f);
    xf->f = NULL;
}

/* zlib's message without the "path: " prefix gzerror puts in front. */
static const char *zmessage(const idx_file *xf, const char *zmsg)
{
    size_t n = strlen(xf->path);
    if (!zmsg) return "zlib error";
    if (strncmp(zmsg, xf->path, n) == 0 && zmsg[n] == ':' && zmsg[n + 1] == ' ') return zmsg + n + 2;
    return zmsg;
}

static bool is_gz(const idx_file *xf)
{
    size_t n = strlen(xf->path);
    return n > 3 && strcmp(xf->path + n - 3, ".gz") == 0;
}

/* Read exactly n bytes. Returns 0, or an error naming the file: `what` says
 * what was being read ("header", "pixel data"). */
static int idx_read(const char *dsname, idx_file *xf, void *buf, size_t n, const char *what,
                    char *err, size_t errlen)
{
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got > (1u << 30) ? (1u << 30) : n - got;
        int r = gzread(xf->f, (unsigned char *)buf + got, (unsigned)chunk);
        if (r > 0) got += (size_t)r;
        if (r <= 0 || (size_t)r < chunk) break;
    }
    int zerr = Z_OK;
    const char *zmsg = gzerror(xf->f, &zerr);
    if (zerr != Z_OK && zerr != Z_BUF_ERROR)
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                       "%s: %s: corrupt gzip data while reading the %s (%s); re-download the file",
                       dsname, xf->path, what, zmessage(xf, zmsg));
    if (got < n)
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                       "%s: %s: truncated: the %s needs %zu bytes, the file has only %zu%s; "
                       "re-download the file",
                       dsname, xf->path, what, n, got, is_gz(xf) ? " once decompressed" : "");
    return 0;
}

/* After the data: no trailing bytes and a complete gzip stream. */
static int idx_check_end(const char *dsname, idx_file *xf, size_t expected, char *err,
                         size_t errlen)
{
    unsigned char extra[64];
    int r = gzread(xf->f, extra, sizeof extra);
    int zerr = Z_OK;
    const char *zmsg = gzerror(xf->f, &zerr);
    if (zerr != Z_OK)
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                       "%s: %s: %s at the end of the data (%s); re-download the file", dsname,
                       xf->path,
                       zerr == Z_BUF_ERROR ? "truncated gzip stream" : "corrupt gzip data",
                       zmessage(xf, zmsg));
    if (r > 0)
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                       "%s: %s: trailing bytes after the %zu bytes the header announces; the "
                       "header "
                       "or the file is corrupt, re-download it",
                       dsname, xf->path, expected);
    return 0;
}

int hyfi_dataset_load_idx(hyfi_data_kind kind, const char *dir, hyfi_data_split split,
                          hyfi_dataset **out, char *err, size_t errlen)
{
    if (!out) return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "idx: out is NULL");
    *out = NULL;
    if (kind != HYFI_DATA_MNIST && kind != HYFI_DATA_FASHION_MNIST)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                       "idx: data set kind %s is not mnist or fashion-mnist",
                       hyfi_data_kind_name(kind));
    const char *dsname = hyfi_data_kind_name(kind);
    const char *hint = kind == HYFI_DATA_MNIST ? MNIST_HINT : FASHION_HINT;
    if (!dir) dir = hyfi_data_default_dir(kind);
    if (!dir)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "%s: no directory given; %s", dsname,
                       hint);
    const char *pre = split == HYFI_SPLIT_TRAIN ? "train" : "t10k";
    char ibase[64], lbase[64];
    snprintf(ibase, sizeof ibase, "%s-images-idx3-ubyte", pre);
    snprintf(lbase, sizeof lbase, "%s-labels-idx1-ubyte", pre);

    idx_file fi = {0}, fl = {0};
    hyfi_dataset *ds = NULL;
    uint8_t *lab = NULL;
    int rc;
    if ((rc = idx_open(dsname, dir, ibase, hint, &fi, err, errlen))) goto done;
    if ((rc = idx_open(dsname, dir, lbase, hint, &fl, err, errlen))) goto done;

    /* Headers: images  magic 0x00000803, count, rows, cols (big-endian u32);
     *          labels  magic 0x00000801, count. */
    unsigned char ih[16], lh[8];
    if ((rc = idx_read(dsname, &fi, ih, sizeof ih, "16-byte idx3 header", err, errlen))) goto done;
    if ((rc = idx_read(dsname, &fl, lh, sizeof lh, "8-byte idx1 header", err, errlen))) goto done;
    uint32_t imagic = be32(ih), n = be32(ih + 4), rows = be32(ih + 8), cols = be32(ih + 12);
    uint32_t lmagic = be32(lh), nl = be32(lh + 4);
    if (imagic != 0x00000803u) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                     "%s: %s: bad magic number 0x%08x, expected 0x00000803 (idx3, unsigned "
                     "bytes)%s; "
                     "the file is corrupt or not an idx image file, re-download it",
                     dsname, fi.path, imagic,
                     imagic == 0x00000801u ? ": this is a label file" : "");
        goto done;
    }
    if (lmagic != 0x00000801u) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                     "%s: %s: bad magic number 0x%08x, expected 0x00000801 (idx1, unsigned "
                     "bytes)%s; "
                     "the file is corrupt or not an idx label file, re-download it",
                     dsname, fl.path, lmagic,
                     lmagic == 0x00000803u ? ": this is an image file" : "");
        goto done;
    }
    if (n == 0 || n > (1u << 28) || rows == 0 || rows > HD_MAX_SIDE || cols == 0 ||
        cols > HD_MAX_SIDE) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                     "%s: %s: implausible header: %u images of %ux%u pixels (want 1..2^28 images, "
                     "sides 1..%d); the file is corrupt, re-download it",
                     dsname, fi.path, n, rows, cols, HD_MAX_SIDE);
        goto done;
    }
    if (n != nl) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                     "%s: %s has %u images but %s has %u labels; the two files belong to different "
                     "sets, re-download them",
                     dsname, fi.path, n, fl.path, nl);
        goto done;
    }
    float mean = kind == HYFI_DATA_MNIST ? 0.1307f : 0.2860f;
    float std = kind == HYFI_DATA_MNIST ? 0.3081f : 0.3530f;
    if ((rc = hd_dataset_new(kind, split, n, 1, (int)rows, (int)cols, IDX_CLASSES, &mean, &std,
                             &ds, err, errlen)))
        goto done;
    size_t npix = (size_t)n * rows * cols;
    ds->pixels = malloc(npix);
    lab = malloc(n);
    if (!ds->pixels || !lab) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: %s: out of memory for %zu bytes",
                     dsname, fi.path, npix);
        goto done;
    }
    if ((rc = idx_read(dsname, &fi, ds->pixels, npix, "pixel data", err, errlen))) goto done;
    if ((rc = idx_check_end(dsname, &fi, npix, err, errlen))) goto done;
    if ((rc = idx_read(dsname, &fl, lab, n, "label data", err, errlen))) goto done;
    if ((rc = idx_check_end(dsname, &fl, n, err, errlen))) goto done;
    for (uint32_t i = 0; i < n; i++) {
        if (lab[i] >= IDX_CLASSES) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                         "%s: %s: label %u of image %u is outside 0..%d; the file is corrupt, "
                         "re-download it",
                         dsname, fl.path, lab[i], i, IDX_CLASSES - 1);
            goto done;
        }
        ds->labels[i] = lab[i];
    }
    *out = ds;
    ds = NULL;
    rc = 0;
done:
    idx_close(&fi);
    idx_close(&fl);
    free(lab);
    hyfi_dataset_free(ds);
    return rc;
}
