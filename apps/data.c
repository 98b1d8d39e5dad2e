/* hyfi data module: what works on any kind of data set and calls the
 * loaders: images and batches, synthetic data, seeded shuffling and steps
 * per epoch, and the dispatch of hyfi_dataset_open to the loaders
 * (data_idx.c, data_cifar.c, data_folder.c, data_slides.c). The dataset
 * object, names and conversions that the loaders use are in data_common.c. See data.h for the conventions and data_impl.h for the
 * module's files. No StarPU, no exit(). */
#include "data_impl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
