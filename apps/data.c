/* hyfi data module: loaders (idx, CIFAR-10, synthetic), on-the-fly channel
 * conversion + bilinear resize + normalisation, seeded shuffling, batch
 * extraction and a double-buffered prefetch thread. See data.h for the
 * conventions; this file only implements them. No StarPU, no exit(). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* stat, pthreads */
#endif
#include "data.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define MAX_SIDE 16384           /* largest accepted image height/width */
#define MAX_CHANNELS 4096        /* largest accepted channel count */
#define IDX_CLASSES 10
#define CIFAR_SIDE 32
#define CIFAR_RECORD (1 + 3 * CIFAR_SIDE * CIFAR_SIDE) /* 3073 bytes */
#define CIFAR_CLASSES 10

static const char FASHION_HINT[] =
    "install Debian's dataset-fashion-mnist (files in " HYFI_FASHION_MNIST_DEFAULT_DIR
    ") or pass --datapath DIR";
static const char MNIST_HINT[] =
    "MNIST has no default location: pass --datapath DIR, a directory with "
    "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
    "t10k-labels-idx1-ubyte (each plain or .gz)";
static const char CIFAR_HINT[] =
    "pass --datapath DIR, the cifar-10-batches-bin directory of the CIFAR-10 binary "
    "version (cifar-10-binary.tar.gz), or its parent";

/* ------------------------------------------------------------------ errors */
__attribute__((format(printf, 4, 5)))
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *hyfi_data_status_name(int status)
{
    switch (status) {
    case HYFI_DATA_OK: return "HYFI_DATA_OK";
    case HYFI_DATA_END: return "HYFI_DATA_END";
    case HYFI_DATA_ERR_ARG: return "HYFI_DATA_ERR_ARG";
    case HYFI_DATA_ERR_NOTFOUND: return "HYFI_DATA_ERR_NOTFOUND";
    case HYFI_DATA_ERR_IO: return "HYFI_DATA_ERR_IO";
    case HYFI_DATA_ERR_FORMAT: return "HYFI_DATA_ERR_FORMAT";
    case HYFI_DATA_ERR_NOMEM: return "HYFI_DATA_ERR_NOMEM";
    case HYFI_DATA_ERR_UNSUPPORTED: return "HYFI_DATA_ERR_UNSUPPORTED";
    case HYFI_DATA_ERR_THREAD: return "HYFI_DATA_ERR_THREAD";
    default: return "HYFI_DATA_ERR_UNKNOWN";
    }
}

/* ------------------------------------------------------------------- kinds */
static const struct {
    const char *name;
    hyfi_data_kind kind;
} KIND_NAMES[] = {
    {"synthetic", HYFI_DATA_SYNTHETIC},
    {"fashion-mnist", HYFI_DATA_FASHION_MNIST},
    {"mnist", HYFI_DATA_MNIST},
    {"cifar10", HYFI_DATA_CIFAR10},
    {"folder", HYFI_DATA_FOLDER},
};

int hyfi_data_kind_from_name(const char *name, hyfi_data_kind *kind)
{
    if (!name || !kind) return -1;
    for (size_t i = 0; i < sizeof KIND_NAMES / sizeof KIND_NAMES[0]; i++)
        if (strcmp(name, KIND_NAMES[i].name) == 0) {
            *kind = KIND_NAMES[i].kind;
            return 0;
        }
    return -1;
}

const char *hyfi_data_kind_name(hyfi_data_kind kind)
{
    for (size_t i = 0; i < sizeof KIND_NAMES / sizeof KIND_NAMES[0]; i++)
        if (KIND_NAMES[i].kind == kind) return KIND_NAMES[i].name;
    return "unknown";
}

const char *hyfi_data_default_dir(hyfi_data_kind kind)
{
    return kind == HYFI_DATA_FASHION_MNIST ? HYFI_FASHION_MNIST_DEFAULT_DIR : NULL;
}

/* --------------------------------------------------------------- splitmix64 */
static uint64_t sm_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t sm_next(uint64_t *s)
{
    *s += 0x9E3779B97F4A7C15ull;
    return sm_mix(*s);
}

/* Uniform in 0..bound-1 (bound >= 1) without modulo bias: draws below
 * 2^64 mod bound are rejected. */
static uint64_t sm_bounded(uint64_t *s, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound;
    for (;;) {
        uint64_t r = sm_next(s);
        if (r >= threshold) return r % bound;
    }
}

/* Start state of synthetic image i: a bijective mix so that neighbouring
 * images do not get shifted copies of one stream. */
static uint64_t synth_state(uint64_t seed, size_t i)
{
    return sm_mix(sm_mix(seed ^ 0x5DEECE66Dull) ^ (uint64_t)i);
}

/* ----------------------------------------------------------------- dataset */
struct hyfi_dataset {
    char name[48];              /* "fashion-mnist/train" */
    hyfi_data_kind kind;
    size_t n;
    int c, h, w;                /* native geometry */
    int oc, oh, ow;             /* output geometry */
    int num_classes;
    uint8_t *pixels;            /* (n, c, h, w) raw bytes; NULL for synthetic */
    int32_t *labels;            /* (n) */
    uint64_t seed;              /* synthetic */
    float *mean, *std;          /* (c) native constants */
    float *oscale, *obias;      /* (oc) out = v * oscale + obias, v = x/255 after conversion */
};

/* A new dataset with labels allocated (pixels are the loader's business). */
static int ds_new(hyfi_data_kind kind, hyfi_data_split split, size_t n, int c, int h, int w,
                  int num_classes, const float *mean, const float *std, hyfi_dataset **out,
                  char *err, size_t errlen)
{
    hyfi_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) goto nomem;
    snprintf(ds->name, sizeof ds->name, "%s/%s", hyfi_data_kind_name(kind),
             split == HYFI_SPLIT_TRAIN ? "train" : "test");
    ds->kind = kind;
    ds->n = n;
    ds->c = ds->oc = c;
    ds->h = ds->oh = h;
    ds->w = ds->ow = w;
    ds->num_classes = num_classes;
    ds->labels = malloc((n ? n : 1) * sizeof *ds->labels);
    ds->mean = malloc((size_t)c * sizeof(float));
    ds->std = malloc((size_t)c * sizeof(float));
    ds->oscale = malloc((size_t)c * sizeof(float));
    ds->obias = malloc((size_t)c * sizeof(float));
    if (!ds->labels || !ds->mean || !ds->std || !ds->oscale || !ds->obias) goto nomem;
    for (int k = 0; k < c; k++) {
        ds->mean[k] = mean[k];
        ds->std[k] = std[k];
        ds->oscale[k] = 1.0f / std[k];
        ds->obias[k] = -mean[k] / std[k];
    }
    *out = ds;
    return 0;
nomem:
    hyfi_dataset_free(ds);
    return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory for %zu images",
                hyfi_data_kind_name(kind), n);
}

void hyfi_dataset_free(hyfi_dataset *ds)
{
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    free(ds->mean);
    free(ds->std);
    free(ds->oscale);
    free(ds->obias);
    free(ds);
}

const char *hyfi_dataset_name(const hyfi_dataset *ds) { return ds->name; }
size_t hyfi_dataset_size(const hyfi_dataset *ds) { return ds->n; }
int hyfi_dataset_num_classes(const hyfi_dataset *ds) { return ds->num_classes; }
int hyfi_dataset_channels(const hyfi_dataset *ds) { return ds->oc; }
int hyfi_dataset_height(const hyfi_dataset *ds) { return ds->oh; }
int hyfi_dataset_width(const hyfi_dataset *ds) { return ds->ow; }
int hyfi_dataset_native_channels(const hyfi_dataset *ds) { return ds->c; }
int hyfi_dataset_native_height(const hyfi_dataset *ds) { return ds->h; }
int hyfi_dataset_native_width(const hyfi_dataset *ds) { return ds->w; }
const int32_t *hyfi_dataset_labels(const hyfi_dataset *ds) { return ds->labels; }

size_t hyfi_dataset_image_numel(const hyfi_dataset *ds)
{
    return (size_t)ds->oc * (size_t)ds->oh * (size_t)ds->ow;
}

float hyfi_dataset_mean(const hyfi_dataset *ds, int c)
{
    return (c >= 0 && c < ds->oc) ? -ds->obias[c] / ds->oscale[c] : 0.0f;
}

float hyfi_dataset_std(const hyfi_dataset *ds, int c)
{
    return (c >= 0 && c < ds->oc) ? 1.0f / ds->oscale[c] : 0.0f;
}

int32_t hyfi_dataset_label(const hyfi_dataset *ds, size_t i)
{
    return i < ds->n ? ds->labels[i] : -1;
}

/* BT.601 luminance weights (PIL's convert("L")). */
static const float LUMA[3] = {0.299f, 0.587f, 0.114f};

static bool channels_supported(int c, int oc)
{
    return c == oc || c == 1 || (c == 3 && oc == 1);
}

int hyfi_dataset_set_output(hyfi_dataset *ds, int channels, int height, int width, char *err,
                            size_t errlen)
{
    if (!ds) return fail(err, errlen, HYFI_DATA_ERR_ARG, "set_output: dataset is NULL");
    if (channels < 1 || channels > MAX_CHANNELS || height < 1 || height > MAX_SIDE ||
        width < 1 || width > MAX_SIDE)
        return fail(err, errlen, HYFI_DATA_ERR_ARG,
                    "%s: output geometry %dx%dx%d is out of range; channels must be 1..%d and "
                    "height/width 1..%d",
                    ds->name, channels, height, width, MAX_CHANNELS, MAX_SIDE);
    if (!channels_supported(ds->c, channels))
        return fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                    "%s: cannot convert %d-channel images to %d channels; supported: the same "
                    "count, 1 -> N (replication) and 3 -> 1 (luminance)",
                    ds->name, ds->c, channels);
    float *sc = malloc((size_t)channels * sizeof(float));
    float *bi = malloc((size_t)channels * sizeof(float));
    if (!sc || !bi) {
        free(sc);
        free(bi);
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory", ds->name);
    }
    for (int k = 0; k < channels; k++) {
        float m, s;
        if (ds->c == channels) {
            m = ds->mean[k];
            s = ds->std[k];
        } else if (ds->c == 1) {
            m = ds->mean[0];
            s = ds->std[0];
        } else { /* 3 -> 1 */
            m = LUMA[0] * ds->mean[0] + LUMA[1] * ds->mean[1] + LUMA[2] * ds->mean[2];
            s = LUMA[0] * ds->std[0] + LUMA[1] * ds->std[1] + LUMA[2] * ds->std[2];
        }
        sc[k] = 1.0f / s;
        bi[k] = -m / s;
    }
    free(ds->oscale);
    free(ds->obias);
    ds->oscale = sc;
    ds->obias = bi;
    ds->oc = channels;
    ds->oh = height;
    ds->ow = width;
    return 0;
}

/* ------------------------------------------------------------- conversions */
void hyfi_resize_bilinear(const float *src, int channels, int height, int width, float *dst,
                          int out_height, int out_width)
{
    const double sy = (double)height / out_height, sx = (double)width / out_width;
    for (int c = 0; c < channels; c++) {
        const float *in = src + (size_t)c * height * width;  /* (H, W) */
        float *o = dst + (size_t)c * out_height * out_width; /* (OH, OW) */
        for (int oy = 0; oy < out_height; oy++) {
            double fy = (oy + 0.5) * sy - 0.5;
            if (fy < 0) fy = 0;
            if (fy > height - 1) fy = height - 1;
            int y0 = (int)fy, y1 = y0 + (y0 < height - 1);
            float wy = (float)(fy - y0);
            const float *r0 = in + (size_t)y0 * width, *r1 = in + (size_t)y1 * width;
            for (int ox = 0; ox < out_width; ox++) {
                double fx = (ox + 0.5) * sx - 0.5;
                if (fx < 0) fx = 0;
                if (fx > width - 1) fx = width - 1;
                int x0 = (int)fx, x1 = x0 + (x0 < width - 1);
                float wx = (float)(fx - x0);
                float top = r0[x0] + wx * (r0[x1] - r0[x0]);
                float bot = r1[x0] + wx * (r1[x1] - r1[x0]);
                o[(size_t)oy * out_width + ox] = top + wy * (bot - top);
            }
        }
    }
}

int hyfi_convert_channels(const float *src, int channels, size_t hw, float *dst,
                          int out_channels)
{
    if (channels < 1 || out_channels < 1 || !channels_supported(channels, out_channels))
        return HYFI_DATA_ERR_UNSUPPORTED;
    if (channels == out_channels) {
        memcpy(dst, src, (size_t)channels * hw * sizeof(float));
    } else if (channels == 1) {
        for (int k = 0; k < out_channels; k++) memcpy(dst + k * hw, src, hw * sizeof(float));
    } else { /* 3 -> 1 */
        const float *r = src, *g = src + hw, *b = src + 2 * hw;
        for (size_t i = 0; i < hw; i++) dst[i] = LUMA[0] * r[i] + LUMA[1] * g[i] + LUMA[2] * b[i];
    }
    return 0;
}

/* Per-call working memory of the image pipeline. */
typedef struct scratch {
    uint8_t *raw; /* (c, h, w) synthetic bytes */
    float *a;     /* (c, h, w) x/255 */
    float *b;     /* (oc, h, w) after the channel conversion */
} scratch;

static void scratch_free(scratch *s)
{
    free(s->raw);
    free(s->a);
    free(s->b);
    memset(s, 0, sizeof *s);
}

static int scratch_init(scratch *s, const hyfi_dataset *ds)
{
    size_t chw = (size_t)ds->c * ds->h * ds->w, ohw = (size_t)ds->oc * ds->h * ds->w;
    memset(s, 0, sizeof *s);
    s->raw = malloc(chw ? chw : 1);
    s->a = malloc(chw * sizeof(float));
    s->b = malloc(ohw * sizeof(float));
    if (!s->raw || !s->a || !s->b) {
        scratch_free(s);
        return HYFI_DATA_ERR_NOMEM;
    }
    return 0;
}

/* Synthetic image i: the first draw of its stream is the label, the next ones
 * give 8 raw bytes each. */
static void synth_fill(const hyfi_dataset *ds, size_t i, uint8_t *raw)
{
    size_t chw = (size_t)ds->c * ds->h * ds->w;
    uint64_t st = synth_state(ds->seed, i);
    (void)sm_bounded(&st, (uint64_t)ds->num_classes); /* the label */
    size_t k = 0;
    while (k < chw) {
        uint64_t r = sm_next(&st);
        for (int j = 0; j < 8 && k < chw; j++, k++) raw[k] = (uint8_t)(r >> (8 * j));
    }
}

/* Image i at the output geometry, normalised: out (oc, oh, ow). */
static void image_into(const hyfi_dataset *ds, size_t i, float *out, scratch *s)
{
    const size_t hw = (size_t)ds->h * ds->w, chw = (size_t)ds->c * hw;
    const uint8_t *raw = ds->pixels ? ds->pixels + i * chw : s->raw;
    if (!ds->pixels) synth_fill(ds, i, s->raw);
    const float inv255 = 1.0f / 255.0f;
    if (ds->oc == ds->c && ds->oh == ds->h && ds->ow == ds->w) { /* fast path */
        for (int c = 0; c < ds->c; c++) {
            const float sc = ds->oscale[c] * inv255, bi = ds->obias[c];
            const uint8_t *r = raw + c * hw;
            float *o = out + c * hw;
            for (size_t k = 0; k < hw; k++) o[k] = (float)r[k] * sc + bi;
        }
        return;
    }
    for (size_t k = 0; k < chw; k++) s->a[k] = (float)raw[k] * inv255;
    const float *src = s->a;
    if (ds->oc != ds->c) {
        hyfi_convert_channels(s->a, ds->c, hw, s->b, ds->oc); /* checked in set_output */
        src = s->b;
    }
    const size_t ohw = (size_t)ds->oh * ds->ow;
    if (ds->oh != ds->h || ds->ow != ds->w)
        hyfi_resize_bilinear(src, ds->oc, ds->h, ds->w, out, ds->oh, ds->ow);
    else
        memcpy(out, src, (size_t)ds->oc * ohw * sizeof(float));
    for (int c = 0; c < ds->oc; c++) {
        const float sc = ds->oscale[c], bi = ds->obias[c];
        float *o = out + c * ohw;
        for (size_t k = 0; k < ohw; k++) o[k] = o[k] * sc + bi;
    }
}

int hyfi_dataset_image(const hyfi_dataset *ds, size_t i, float *out)
{
    if (!ds || !out || i >= ds->n) return HYFI_DATA_ERR_ARG;
    scratch s;
    if (scratch_init(&s, ds)) return HYFI_DATA_ERR_NOMEM;
    image_into(ds, i, out, &s);
    scratch_free(&s);
    return 0;
}

static int batch_into(const hyfi_dataset *ds, const size_t *perm, size_t start, int B, float *x,
                      int32_t *y, scratch *s)
{
    const size_t numel = hyfi_dataset_image_numel(ds);
    for (int r = 0; r < B; r++) {
        size_t pos = (start + (size_t)r) % ds->n;
        size_t idx = perm ? perm[pos] : pos;
        if (idx >= ds->n) return HYFI_DATA_ERR_ARG;
        image_into(ds, idx, x + (size_t)r * numel, s);
        if (y) y[r] = ds->labels[idx];
    }
    return 0;
}

int hyfi_dataset_batch(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                       float *x, int32_t *y)
{
    if (!ds || !x || B < 1 || ds->n == 0) return HYFI_DATA_ERR_ARG;
    scratch s;
    if (scratch_init(&s, ds)) return HYFI_DATA_ERR_NOMEM;
    int rc = batch_into(ds, perm, start, B, x, y, &s);
    scratch_free(&s);
    return rc;
}

/* --------------------------------------------------------------- shuffling */
void hyfi_dataset_permutation(uint64_t seed, uint64_t epoch, size_t n, size_t *perm)
{
    for (size_t i = 0; i < n; i++) perm[i] = i;
    uint64_t st = seed + epoch;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)sm_bounded(&st, (uint64_t)i);
        size_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

size_t hyfi_data_steps_per_epoch(size_t n, int batch)
{
    if (n == 0 || batch < 1) return 0;
    return (n + (size_t)batch - 1) / (size_t)batch;
}

/* --------------------------------------------------------------- synthetic */
int hyfi_dataset_synthetic(int channels, int height, int width, int num_classes, size_t count,
                           uint64_t seed, hyfi_dataset **out, char *err, size_t errlen)
{
    if (!out) return fail(err, errlen, HYFI_DATA_ERR_ARG, "synthetic: out is NULL");
    *out = NULL;
    if (channels < 1 || channels > MAX_CHANNELS || height < 1 || height > MAX_SIDE ||
        width < 1 || width > MAX_SIDE)
        return fail(err, errlen, HYFI_DATA_ERR_ARG,
                    "synthetic: image geometry %dx%dx%d is out of range; channels must be "
                    "1..%d and height/width 1..%d (--image-size)",
                    channels, height, width, MAX_CHANNELS, MAX_SIDE);
    if (num_classes < 2)
        return fail(err, errlen, HYFI_DATA_ERR_ARG,
                    "synthetic: %d classes; need at least 2 (--num-classes)", num_classes);
    if (count < 1 || count > ((size_t)1 << 40))
        return fail(err, errlen, HYFI_DATA_ERR_ARG,
                    "synthetic: %zu images; need 1..2^40", count);
    float *mean = malloc((size_t)channels * sizeof(float)),
          *std = malloc((size_t)channels * sizeof(float));
    if (!mean || !std) {
        free(mean);
        free(std);
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "synthetic: out of memory");
    }
    for (int c = 0; c < channels; c++) mean[c] = std[c] = 0.5f;
    hyfi_dataset *ds = NULL;
    int rc = ds_new(HYFI_DATA_SYNTHETIC, HYFI_SPLIT_TRAIN, count, channels, height, width,
                    num_classes, mean, std, &ds, err, errlen);
    free(mean);
    free(std);
    if (rc) return rc;
    ds->seed = seed;
    for (size_t i = 0; i < count; i++) {
        uint64_t st = synth_state(seed, i);
        ds->labels[i] = (int32_t)sm_bounded(&st, (uint64_t)num_classes);
    }
    *out = ds;
    return 0;
}

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
            return fail(err, errlen, HYFI_DATA_ERR_ARG, "%s: %s/%s: path too long", dsname, dir,
                        base);
        if (stat(xf->path, &st) == 0) found = 1;
    }
    if (!found)
        return fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                    "%s: %s/%s.gz: not found (nor %s/%s); %s", dsname, dir, base, dir, base, hint);
    if (S_ISDIR(st.st_mode))
        return fail(err, errlen, HYFI_DATA_ERR_IO,
                    "%s: %s: is a directory, expected an idx file; %s", dsname, xf->path, hint);
    errno = 0;
    xf->f = gzopen(xf->path, "rb");
    if (!xf->f)
        return fail(err, errlen, HYFI_DATA_ERR_IO, "%s: %s: cannot open: %s; check permissions",
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
        return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                    "%s: %s: corrupt gzip data while reading the %s (%s); re-download the file",
                    dsname, xf->path, what, zmessage(xf, zmsg));
    if (got < n)
        return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
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
        return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                    "%s: %s: %s at the end of the data (%s); re-download the file", dsname,
                    xf->path, zerr == Z_BUF_ERROR ? "truncated gzip stream" : "corrupt gzip data",
                    zmessage(xf, zmsg));
    if (r > 0)
        return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                    "%s: %s: trailing bytes after the %zu bytes the header announces; the header "
                    "or the file is corrupt, re-download it",
                    dsname, xf->path, expected);
    return 0;
}

int hyfi_dataset_load_idx(hyfi_data_kind kind, const char *dir, hyfi_data_split split,
                          hyfi_dataset **out, char *err, size_t errlen)
{
    if (!out) return fail(err, errlen, HYFI_DATA_ERR_ARG, "idx: out is NULL");
    *out = NULL;
    if (kind != HYFI_DATA_MNIST && kind != HYFI_DATA_FASHION_MNIST)
        return fail(err, errlen, HYFI_DATA_ERR_ARG,
                    "idx: data set kind %s is not mnist or fashion-mnist",
                    hyfi_data_kind_name(kind));
    const char *dsname = hyfi_data_kind_name(kind);
    const char *hint = kind == HYFI_DATA_MNIST ? MNIST_HINT : FASHION_HINT;
    if (!dir) dir = hyfi_data_default_dir(kind);
    if (!dir) return fail(err, errlen, HYFI_DATA_ERR_ARG, "%s: no directory given; %s", dsname, hint);
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
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                  "%s: %s: bad magic number 0x%08x, expected 0x00000803 (idx3, unsigned bytes)%s; "
                  "the file is corrupt or not an idx image file, re-download it",
                  dsname, fi.path, imagic,
                  imagic == 0x00000801u ? ": this is a label file" : "");
        goto done;
    }
    if (lmagic != 0x00000801u) {
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                  "%s: %s: bad magic number 0x%08x, expected 0x00000801 (idx1, unsigned bytes)%s; "
                  "the file is corrupt or not an idx label file, re-download it",
                  dsname, fl.path, lmagic,
                  lmagic == 0x00000803u ? ": this is an image file" : "");
        goto done;
    }
    if (n == 0 || n > (1u << 28) || rows == 0 || rows > MAX_SIDE || cols == 0 || cols > MAX_SIDE) {
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                  "%s: %s: implausible header: %u images of %ux%u pixels (want 1..2^28 images, "
                  "sides 1..%d); the file is corrupt, re-download it",
                  dsname, fi.path, n, rows, cols, MAX_SIDE);
        goto done;
    }
    if (n != nl) {
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                  "%s: %s has %u images but %s has %u labels; the two files belong to different "
                  "sets, re-download them",
                  dsname, fi.path, n, fl.path, nl);
        goto done;
    }
    float mean = kind == HYFI_DATA_MNIST ? 0.1307f : 0.2860f;
    float std = kind == HYFI_DATA_MNIST ? 0.3081f : 0.3530f;
    if ((rc = ds_new(kind, split, n, 1, (int)rows, (int)cols, IDX_CLASSES, &mean, &std, &ds, err,
                     errlen)))
        goto done;
    size_t npix = (size_t)n * rows * cols;
    ds->pixels = malloc(npix);
    lab = malloc(n);
    if (!ds->pixels || !lab) {
        rc = fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: %s: out of memory for %zu bytes", dsname,
                  fi.path, npix);
        goto done;
    }
    if ((rc = idx_read(dsname, &fi, ds->pixels, npix, "pixel data", err, errlen))) goto done;
    if ((rc = idx_check_end(dsname, &fi, npix, err, errlen))) goto done;
    if ((rc = idx_read(dsname, &fl, lab, n, "label data", err, errlen))) goto done;
    if ((rc = idx_check_end(dsname, &fl, n, err, errlen))) goto done;
    for (uint32_t i = 0; i < n; i++) {
        if (lab[i] >= IDX_CLASSES) {
            rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
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
    if (!out) return fail(err, errlen, HYFI_DATA_ERR_ARG, "cifar10: out is NULL");
    *out = NULL;
    if (!dir) return fail(err, errlen, HYFI_DATA_ERR_ARG, "cifar10: no directory given; %s", CIFAR_HINT);
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
            return fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                        "cifar10: %s: not found (nor %s); %s", path, sub, CIFAR_HINT);
        snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    }

    /* First pass: sizes. Each file is a whole number of 3073-byte records. */
    size_t records[5], total = 0;
    for (int f = 0; f < nfiles; f++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", base, files[f]);
        if (stat(path, &st) != 0)
            return fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                        "cifar10: %s: not found; the CIFAR-10 set is incomplete, %s", path,
                        CIFAR_HINT);
        if (!S_ISREG(st.st_mode))
            return fail(err, errlen, HYFI_DATA_ERR_IO, "cifar10: %s: not a regular file; %s",
                        path, CIFAR_HINT);
        if (st.st_size == 0 || st.st_size % CIFAR_RECORD != 0)
            return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                        "cifar10: %s: %lld bytes is not a positive whole number of %d-byte "
                        "records (1 label byte + 3072 pixel bytes); the file is truncated or not "
                        "a CIFAR-10 binary batch (CIFAR-100 records have 3074 bytes), re-download it",
                        path, (long long)st.st_size, CIFAR_RECORD);
        records[f] = (size_t)st.st_size / CIFAR_RECORD;
        total += records[f];
    }

    static const float MEAN[3] = {0.4914f, 0.4822f, 0.4465f};
    static const float STD[3] = {0.2470f, 0.2435f, 0.2616f};
    hyfi_dataset *ds = NULL;
    int rc = ds_new(HYFI_DATA_CIFAR10, split, total, 3, CIFAR_SIDE, CIFAR_SIDE, CIFAR_CLASSES,
                    MEAN, STD, &ds, err, errlen);
    if (rc) return rc;
    const size_t chw = 3 * CIFAR_SIDE * CIFAR_SIDE;
    ds->pixels = malloc(total * chw);
    unsigned char *rec = malloc(CIFAR_RECORD * 1024);
    if (!ds->pixels || !rec) {
        free(rec);
        hyfi_dataset_free(ds);
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "cifar10: out of memory for %zu images",
                    total);
    }
    /* Second pass: records -> labels and (3, 32, 32) pixel bytes. */
    size_t img = 0;
    for (int f = 0; f < nfiles && rc == 0; f++) {
        snprintf(path, sizeof path, "%s/%s", base, files[f]);
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            rc = fail(err, errlen, HYFI_DATA_ERR_IO, "cifar10: %s: cannot open: %s; check permissions",
                      path, strerror(errno));
            break;
        }
        size_t left = records[f];
        while (left > 0 && rc == 0) {
            size_t want = left < 1024 ? left : 1024;
            size_t got = fread(rec, CIFAR_RECORD, want, fp);
            if (got != want) {
                rc = fail(err, errlen, ferror(fp) ? HYFI_DATA_ERR_IO : HYFI_DATA_ERR_FORMAT,
                          "cifar10: %s: %s after %zu records; re-download the file", path,
                          ferror(fp) ? "read error" : "truncated (the file shrank while reading)",
                          records[f] - left + got);
                break;
            }
            for (size_t r = 0; r < got; r++, img++) {
                const unsigned char *p = rec + r * CIFAR_RECORD;
                if (p[0] >= CIFAR_CLASSES) {
                    rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                              "cifar10: %s: label %u of record %zu is outside 0..%d; the file is "
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

/* ---------------------------------------------------------------- dispatch */
int hyfi_dataset_open(const hyfi_data_spec *spec, hyfi_dataset **out, char *err, size_t errlen)
{
    if (!spec || !out) return fail(err, errlen, HYFI_DATA_ERR_ARG, "open: spec or out is NULL");
    *out = NULL;
    switch (spec->kind) {
    case HYFI_DATA_SYNTHETIC:
        if (spec->split != HYFI_SPLIT_TRAIN)
            return fail(err, errlen, HYFI_DATA_ERR_ARG,
                        "synthetic: there is no test split of synthetic data (its labels are "
                        "random); evaluate on a real data set");
        return hyfi_dataset_synthetic(spec->channels, spec->height, spec->width,
                                      spec->num_classes, spec->count, spec->seed, out, err, errlen);
    case HYFI_DATA_FASHION_MNIST:
    case HYFI_DATA_MNIST:
        return hyfi_dataset_load_idx(spec->kind, spec->dir, spec->split, out, err, errlen);
    case HYFI_DATA_CIFAR10:
        return hyfi_dataset_load_cifar10(spec->dir, spec->split, out, err, errlen);
    case HYFI_DATA_FOLDER:
        return fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                    "folder: data sets in folders of PNG/JPEG images are not supported yet; use "
                    "synthetic, fashion-mnist, mnist or cifar10");
    }
    return fail(err, errlen, HYFI_DATA_ERR_ARG, "open: unknown data set kind %d", (int)spec->kind);
}

/* -------------------------------------------------------------- prefetcher */
typedef struct pf_slot {
    float *x;       /* (B, C, H, W) */
    int32_t *y;     /* (B) */
    hyfi_batch info;
    int full;       /* filled and not yet given back by the consumer */
} pf_slot;

struct hyfi_prefetch {
    const hyfi_dataset *ds;
    hyfi_prefetch_config cfg;
    size_t spe;                 /* steps per epoch */
    size_t *perm;               /* (n) permutation of perm_epoch; NULL without shuffling */
    uint64_t perm_epoch;
    int have_perm;
    scratch s;                  /* producer's working memory */
    pf_slot slot[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_started;
    int stop;                   /* consumer asks the thread to finish */
    int done;                   /* thread finished: all batches produced, or failed */
    int status;                 /* thread's error, 0 if none */
    uint64_t consumed;          /* batches handed out */
    int held;                   /* the consumer holds slot (consumed - 1) % 2 */
};

static void *pf_main(void *arg)
{
    hyfi_prefetch *p = arg;
    const int B = p->cfg.batch;
    for (uint64_t k = 0;; k++) {
        if (p->cfg.num_steps && k >= p->cfg.num_steps) break;
        pf_slot *sl = &p->slot[k % 2];
        pthread_mutex_lock(&p->mu);
        while (sl->full && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        /* The slot is empty: the consumer does not touch it until it is full. */
        uint64_t step = p->cfg.first_step + k, epoch = step / p->spe;
        size_t start = (size_t)(step % p->spe) * (size_t)B;
        if (p->cfg.shuffle && (!p->have_perm || p->perm_epoch != epoch)) {
            hyfi_dataset_permutation(p->cfg.seed, epoch, p->ds->n, p->perm);
            p->perm_epoch = epoch;
            p->have_perm = 1;
        }
        int rc = batch_into(p->ds, p->cfg.shuffle ? p->perm : NULL, start, B, sl->x, sl->y, &p->s);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->status = rc;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        sl->info = (hyfi_batch){.x = sl->x, .y = sl->y, .batch = B, .step = step, .epoch = epoch,
                                .start = start};
        sl->full = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pf_free(hyfi_prefetch *p)
{
    for (int i = 0; i < 2; i++) {
        free(p->slot[i].x);
        free(p->slot[i].y);
    }
    free(p->perm);
    scratch_free(&p->s);
    free(p);
}

int hyfi_prefetch_start(const hyfi_dataset *ds, const hyfi_prefetch_config *cfg,
                        hyfi_prefetch **out, char *err, size_t errlen)
{
    if (!ds || !cfg || !out)
        return fail(err, errlen, HYFI_DATA_ERR_ARG, "prefetch: dataset, config or out is NULL");
    *out = NULL;
    if (cfg->batch < 1 || ds->n == 0)
        return fail(err, errlen, HYFI_DATA_ERR_ARG,
                    "prefetch: %s: batch size %d with %zu images; need a batch size >= 1 and a "
                    "non-empty data set",
                    ds->name, cfg->batch, ds->n);
    hyfi_prefetch *p = calloc(1, sizeof *p);
    if (!p) return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "prefetch: out of memory");
    p->ds = ds;
    p->cfg = *cfg;
    p->spe = hyfi_data_steps_per_epoch(ds->n, cfg->batch);
    size_t numel = hyfi_dataset_image_numel(ds) * (size_t)cfg->batch;
    int bad = scratch_init(&p->s, ds);
    for (int i = 0; i < 2; i++) {
        p->slot[i].x = malloc(numel * sizeof(float));
        p->slot[i].y = malloc((size_t)cfg->batch * sizeof(int32_t));
        bad |= !p->slot[i].x || !p->slot[i].y;
    }
    if (cfg->shuffle) {
        p->perm = malloc(ds->n * sizeof(size_t));
        bad |= !p->perm;
    }
    if (bad) {
        pf_free(p);
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                    "prefetch: %s: out of memory for two batches of %d images", ds->name,
                    cfg->batch);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int e = pthread_create(&p->thread, NULL, pf_main, p);
    if (e) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        pf_free(p);
        return fail(err, errlen, HYFI_DATA_ERR_THREAD, "prefetch: cannot start a thread: %s",
                    strerror(e));
    }
    p->thread_started = 1;
    *out = p;
    return 0;
}

int hyfi_prefetch_next(hyfi_prefetch *p, hyfi_batch *b)
{
    if (!p || !b) return HYFI_DATA_ERR_ARG;
    pthread_mutex_lock(&p->mu);
    if (p->held) { /* give the previous batch back */
        p->slot[(p->consumed - 1) % 2].full = 0;
        p->held = 0;
        pthread_cond_broadcast(&p->cv);
    }
    pf_slot *sl = &p->slot[p->consumed % 2];
    while (!sl->full && !p->done) pthread_cond_wait(&p->cv, &p->mu);
    int rc;
    if (sl->full) {
        *b = sl->info;
        p->consumed++;
        p->held = 1;
        rc = 0;
    } else {
        rc = p->status ? p->status : HYFI_DATA_END;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void hyfi_prefetch_stop(hyfi_prefetch *p)
{
    if (!p) return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pf_free(p);
}
