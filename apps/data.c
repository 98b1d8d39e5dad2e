/* hyfi data module: the dataset object and what works on any kind of data
 * set: status and kind names, accessors, the output geometry (channel
 * conversion + bilinear resize + normalisation), images and batches,
 * synthetic data, seeded shuffling and steps per epoch, and the dispatch of
 * hyfi_dataset_open to the loaders (data_idx.c, data_cifar.c,
 * data_folder.c, data_slides.c). See data.h for the conventions and data_impl.h for the
 * module's files. No StarPU, no exit(). */
#include "data_impl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ errors */
int hd_fail(char *err, size_t errlen, int code, const char *fmt, ...)
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
    {"slides", HYFI_DATA_SLIDES},
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

int hyfi_data_has_test_split(hyfi_data_kind kind, const char *dir)
{
    switch (kind) {
    case HYFI_DATA_SYNTHETIC: return 0;
    case HYFI_DATA_FOLDER:
    case HYFI_DATA_SLIDES: {
        char *train = NULL, *test = NULL;
        if (!dir || hd_folder_layout(dir, &train, &test)) return 0;
        int has = test != NULL;
        free(train);
        free(test);
        return has;
    }
    default: return 1;
    }
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
int hd_dataset_new(hyfi_data_kind kind, hyfi_data_split split, size_t n, int c, int h, int w,
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
    return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory for %zu images",
                   hyfi_data_kind_name(kind), n);
}

void hyfi_dataset_free(hyfi_dataset *ds)
{
    if (!ds) return;
    free(ds->pixels);
    free(ds->paths);
    free(ds->path_off);
    free(ds->labels);
    free(ds->mean);
    free(ds->std);
    free(ds->oscale);
    free(ds->obias);
    free(ds);
}

const char *hyfi_dataset_name(const hyfi_dataset *ds) { return ds->name; }
size_t hyfi_dataset_size(const hyfi_dataset *ds) { return ds->n; }

/* FNV-1a, 64 bits: byte by byte for small things, on 4 lanes of 64-bit words
 * for pixel arrays (tens of MB: about 4x faster). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv_words(uint64_t h, const unsigned char *b, size_t n)
{
    uint64_t lane[4] = {h, h ^ 1, h ^ 2, h ^ 3};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * (size_t)k, sizeof w);
            lane[k] = (lane[k] ^ w) * 0x100000001b3ull;
        }
    h = fnv(h, lane, sizeof lane);
    return fnv(h, b + i, n - i);
}

uint64_t hyfi_dataset_fingerprint(const hyfi_dataset *ds)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const int64_t geo[6] = {ds->kind, (int64_t)ds->n, ds->c, ds->h, ds->w, ds->num_classes};
    h = fnv(h, geo, sizeof geo);
    h = fnv_words(h, (const unsigned char *)ds->labels, ds->n * sizeof *ds->labels);
    if (ds->pixels)
        h = fnv_words(h, ds->pixels, ds->n * (size_t)ds->c * (size_t)ds->h * (size_t)ds->w);
    if (ds->kind == HYFI_DATA_SYNTHETIC) h = fnv(h, &ds->seed, sizeof ds->seed);
    if (ds->paths && ds->path_off && ds->n > 0) {
        /* the paths' common prefix (the data set's folder, up to a '/') */
        const char *p0 = ds->paths + ds->path_off[0];
        size_t common = strlen(p0);
        for (size_t i = 1; i < ds->n && common; i++) {
            const char *p = ds->paths + ds->path_off[i];
            size_t k = 0;
            while (k < common && p[k] == p0[k]) k++;
            common = k;
        }
        while (common && p0[common - 1] != '/') common--;
        for (size_t i = 0; i < ds->n; i++) {
            const char *p = ds->paths + ds->path_off[i];
            h = fnv(h, p + common, strlen(p + common) + 1);
            struct stat st;
            const int64_t size = stat(p, &st) == 0 ? (int64_t)st.st_size : -1;
            h = fnv(h, &size, sizeof size);
        }
    }
    return h;
}
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
const float hd_luma[3] = {0.299f, 0.587f, 0.114f};

bool hd_channels_supported(int c, int oc)
{
    return c == oc || c == 1 || (c == 3 && oc == 1);
}

int hyfi_dataset_set_output(hyfi_dataset *ds, int channels, int height, int width, char *err,
                            size_t errlen)
{
    if (!ds) return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "set_output: dataset is NULL");
    if (channels < 1 || channels > HD_MAX_CHANNELS || height < 1 || height > HD_MAX_SIDE ||
        width < 1 || width > HD_MAX_SIDE)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                       "%s: output geometry %dx%dx%d is out of range; channels must be 1..%d and "
                       "height/width 1..%d",
                       ds->name, channels, height, width, HD_MAX_CHANNELS, HD_MAX_SIDE);
    if (ds->kind == HYFI_DATA_SLIDES && (height != ds->h || width != ds->w))
        return hd_fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                       "%s: the slides are %dx%d and are read region by region, not resized to "
                       "%dx%d; leave --image-size out or make slides of that size "
                       "(scripts/make_slides.py --size)",
                       ds->name, ds->w, ds->h, width, height);
    if (!hd_channels_supported(ds->c, channels))
        return hd_fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                       "%s: cannot convert %d-channel images to %d channels; supported: the same "
                       "count, 1 -> N (replication) and 3 -> 1 (luminance)",
                       ds->name, ds->c, channels);
    float *sc = malloc((size_t)channels * sizeof(float));
    float *bi = malloc((size_t)channels * sizeof(float));
    if (!sc || !bi) {
        free(sc);
        free(bi);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory", ds->name);
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
            m = hd_luma[0] * ds->mean[0] + hd_luma[1] * ds->mean[1] + hd_luma[2] * ds->mean[2];
            s = hd_luma[0] * ds->std[0] + hd_luma[1] * ds->std[1] + hd_luma[2] * ds->std[2];
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
    if (channels < 1 || out_channels < 1 || !hd_channels_supported(channels, out_channels))
        return HYFI_DATA_ERR_UNSUPPORTED;
    if (channels == out_channels) {
        memcpy(dst, src, (size_t)channels * hw * sizeof(float));
    } else if (channels == 1) {
        for (int k = 0; k < out_channels; k++) memcpy(dst + k * hw, src, hw * sizeof(float));
    } else { /* 3 -> 1 */
        const float *r = src, *g = src + hw, *b = src + 2 * hw;
        for (size_t i = 0; i < hw; i++)
            dst[i] = hd_luma[0] * r[i] + hd_luma[1] * g[i] + hd_luma[2] * b[i];
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

/* Image i at the output geometry, normalised: out (oc, oh, ow). Fails only for
 * folder images (the message names the file). */
static int image_into(const hyfi_dataset *ds, size_t i, float *out, hd_scratch *s, char *err,
                      size_t errlen)
{
    if (ds->kind == HYFI_DATA_SLIDES) /* normalised there */
        return hd_slides_region(ds, i, 0, 0, ds->oh, ds->ow, out, err, errlen);
    if (ds->kind == HYFI_DATA_FOLDER) {
        int rc = hd_folder_image_into(ds, i, out, s, err, errlen);
        if (rc) return rc;
    } else {
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
            return 0;
        }
        for (size_t k = 0; k < chw; k++) s->a[k] = (float)raw[k] * inv255;
        const float *src = s->a;
        if (ds->oc != ds->c) {
            hyfi_convert_channels(s->a, ds->c, hw, s->b, ds->oc); /* checked in set_output */
            src = s->b;
        }
        if (ds->oh != ds->h || ds->ow != ds->w)
            hyfi_resize_bilinear(src, ds->oc, ds->h, ds->w, out, ds->oh, ds->ow);
        else
            memcpy(out, src, (size_t)ds->oc * ds->oh * ds->ow * sizeof(float));
    }
    const size_t ohw = (size_t)ds->oh * ds->ow;
    for (int c = 0; c < ds->oc; c++) {
        const float sc = ds->oscale[c], bi = ds->obias[c];
        float *o = out + c * ohw;
        for (size_t k = 0; k < ohw; k++) o[k] = o[k] * sc + bi;
    }
    return 0;
}

int hyfi_dataset_image_err(const hyfi_dataset *ds, size_t i, float *out, char *err,
                           size_t errlen)
{
    if (!ds || !out || i >= ds->n)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "image: %s: no image %zu (NULL dataset or "
                       "output, or index past the %zu images)", ds ? ds->name : "(null)", i,
                       ds ? ds->n : 0);
    hd_scratch s;
    if (hd_scratch_init(&s, ds))
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory", ds->name);
    int rc = image_into(ds, i, out, &s, err, errlen);
    hd_scratch_free(&s);
    return rc;
}

int hyfi_dataset_image(const hyfi_dataset *ds, size_t i, float *out)
{
    return hyfi_dataset_image_err(ds, i, out, NULL, 0);
}

int hyfi_dataset_region(const hyfi_dataset *ds, size_t i, int y0, int x0, int h, int w,
                        float *out, char *err, size_t errlen)
{
    if (!ds || !out || i >= ds->n || h < 1 || w < 1 || y0 < 0 || x0 < 0 || y0 > ds->oh - h ||
        x0 > ds->ow - w)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "region: %s: no image %zu or rows "
                       "%d..%d, columns %d..%d outside its %dx%d", ds ? ds->name : "(null)", i,
                       y0, y0 + h - 1, x0, x0 + w - 1, ds ? ds->ow : 0, ds ? ds->oh : 0);
    if (ds->kind == HYFI_DATA_SLIDES)
        return hd_slides_region(ds, i, y0, x0, h, w, out, err, errlen);
    /* other kinds: the whole image, then the rectangle */
    const size_t ohw = (size_t)ds->oh * ds->ow;
    float *whole = malloc(ds->oc * ohw * sizeof *whole);
    if (!whole) return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory", ds->name);
    int rc = hyfi_dataset_image_err(ds, i, whole, err, errlen);
    for (int c = 0; rc == 0 && c < ds->oc; c++)
        for (int y = 0; y < h; y++)
            memcpy(out + ((size_t)c * h + y) * w, whole + c * ohw + (size_t)(y0 + y) * ds->ow + x0,
                   (size_t)w * sizeof *out);
    free(whole);
    return rc;
}

int hd_batch_into(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                  const unsigned char *rows, float *x, int32_t *y, hd_scratch *s, char *err,
                  size_t errlen)
{
    const size_t numel = hyfi_dataset_image_numel(ds);
    for (int r = 0; r < B; r++) {
        size_t pos = (start + (size_t)r) % ds->n;
        size_t idx = perm ? perm[pos] : pos;
        if (idx >= ds->n)
            return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                           "batch: %s: permutation entry %zu is %zu, past the %zu images", ds->name,
                           pos, idx, ds->n);
        if (y) y[r] = ds->labels[idx];
        if (rows && !rows[r]) continue;
        int rc = image_into(ds, idx, x + (size_t)r * numel, s, err, errlen);
        if (rc) return rc;
    }
    return 0;
}

int hyfi_dataset_batch_err(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                           float *x, int32_t *y, char *err, size_t errlen)
{
    if (!ds || !x || B < 1 || ds->n == 0)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                       "batch: NULL dataset or output, batch size %d < 1, or an empty data set", B);
    hd_scratch s;
    if (hd_scratch_init(&s, ds))
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory", ds->name);
    int rc = hd_batch_into(ds, perm, start, B, NULL, x, y, &s, err, errlen);
    hd_scratch_free(&s);
    return rc;
}

int hyfi_dataset_batch(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                       float *x, int32_t *y)
{
    return hyfi_dataset_batch_err(ds, perm, start, B, x, y, NULL, 0);
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
    if (!out) return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "synthetic: out is NULL");
    *out = NULL;
    if (channels < 1 || channels > HD_MAX_CHANNELS || height < 1 || height > HD_MAX_SIDE ||
        width < 1 || width > HD_MAX_SIDE)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                       "synthetic: image geometry %dx%dx%d is out of range; channels must be "
                       "1..%d and height/width 1..%d (--image-size)",
                       channels, height, width, HD_MAX_CHANNELS, HD_MAX_SIDE);
    if (num_classes < 2)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                       "synthetic: %d classes; need at least 2 (--num-classes)", num_classes);
    if (count < 1 || count > ((size_t)1 << 40))
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                       "synthetic: %zu images; need 1..2^40", count);
    float *mean = malloc((size_t)channels * sizeof(float)),
          *std = malloc((size_t)channels * sizeof(float));
    if (!mean || !std) {
        free(mean);
        free(std);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "synthetic: out of memory");
    }
    for (int c = 0; c < channels; c++) mean[c] = std[c] = 0.5f;
    hyfi_dataset *ds = NULL;
    int rc = hd_dataset_new(HYFI_DATA_SYNTHETIC, HYFI_SPLIT_TRAIN, count, channels, height, width,
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

/* ---------------------------------------------------------------- dispatch */
int hyfi_dataset_open(const hyfi_data_spec *spec, hyfi_dataset **out, char *err, size_t errlen)
{
    if (!spec || !out) return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "open: spec or out is NULL");
    *out = NULL;
    switch (spec->kind) {
    case HYFI_DATA_SYNTHETIC:
        if (spec->split != HYFI_SPLIT_TRAIN)
            return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
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
        return hyfi_dataset_load_folder(spec->dir, spec->split, out, err, errlen);
    case HYFI_DATA_SLIDES:
        return hyfi_dataset_load_slides(spec->dir, spec->split, out, err, errlen);
    }
    return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "open: unknown data set kind %d",
                   (int)spec->kind);
}
