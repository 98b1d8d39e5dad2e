/* hyfi data module, the part every loader uses (and that calls no loader):
 * error messages, status and kind names, the dataset object and its
 * accessors, the output geometry (channel conversion, bilinear resize,
 * normalisation). data.c dispatches to the loaders, which call this file;
 * see data_impl.h for the module's files. No StarPU, no exit(). */
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
