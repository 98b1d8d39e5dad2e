/* hyfi data module: loaders (idx, CIFAR-10, synthetic, folders of PNG/JPEG
 * images decoded on demand), on-the-fly channel conversion + bilinear resize +
 * normalisation, seeded shuffling, batch extraction and a double-buffered
 * prefetch thread. See data.h for the conventions; this file only implements
 * them. No StarPU, no exit(): libpng's and libjpeg's errors come back through
 * setjmp/longjmp. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* stat, pthreads */
#endif
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#include <jpeglib.h> /* after stdio.h: it uses FILE */
#include <jerror.h>  /* JWRN_* codes */
#include <png.h>

#define MAX_SIDE 16384           /* largest accepted image height/width */
#define MAX_CHANNELS 4096        /* largest accepted channel count */
#define IDX_CLASSES 10
#define CIFAR_SIDE 32
#define CIFAR_RECORD (1 + 3 * CIFAR_SIDE * CIFAR_SIDE) /* 3073 bytes */
#define CIFAR_CLASSES 10
#define FOLDER_MAX_DEPTH 16                     /* nested subfolders of a class folder */
#define FOLDER_MAX_PIXELS ((uint64_t)1 << 26)   /* largest image a folder may hold */

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
static const char FOLDER_HINT[] =
    "pass --datapath DIR, a directory with one subfolder of .png/.jpg/.jpeg images per class "
    "(DIR/CLASS/IMAGE.png), optionally split into DIR/train/CLASS and DIR/val/CLASS";

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

static int folder_layout(const char *dir, char **train, char **test);

int hyfi_data_has_test_split(hyfi_data_kind kind, const char *dir)
{
    switch (kind) {
    case HYFI_DATA_SYNTHETIC: return 0;
    case HYFI_DATA_FOLDER: {
        char *train = NULL, *test = NULL;
        if (!dir || folder_layout(dir, &train, &test)) return 0;
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
struct hyfi_dataset {
    char name[48];              /* "fashion-mnist/train" */
    hyfi_data_kind kind;
    size_t n;
    int c, h, w;                /* native geometry */
    int oc, oh, ow;             /* output geometry */
    int num_classes;
    uint8_t *pixels;            /* (n, c, h, w) raw bytes; NULL for synthetic and folder */
    char *paths;                /* folder: the n file paths, NUL-terminated, one after another */
    size_t *path_off;           /* folder: (n) offset of path i in paths */
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
    /* folder images, grown to the largest one met: */
    uint8_t *dec;           /* the decoded file: rows of w * nc samples of 1 or 2 bytes */
    size_t dec_cap;
    void *rows;             /* png_bytep[h] into dec */
    size_t rows_cap;
    float *fa, *fb;         /* (c, h, w) x/255 or x/65535; after conversion or resize */
    size_t fa_cap, fb_cap;
    char msg[256];          /* libpng's or libjpeg's message, set before the longjmp */
    struct jpeg_decompress_struct jci; /* here, not on the stack of the setjmp caller */
    struct {
        struct jpeg_error_mgr pub;
        jmp_buf jb;
    } jerr;
} scratch;

_Static_assert(JMSG_LENGTH_MAX <= 256, "scratch.msg holds a libjpeg message");

static void scratch_free(scratch *s)
{
    free(s->raw);
    free(s->a);
    free(s->b);
    free(s->dec);
    free(s->rows);
    free(s->fa);
    free(s->fb);
    memset(s, 0, sizeof *s);
}

static int scratch_init(scratch *s, const hyfi_dataset *ds)
{
    memset(s, 0, sizeof *s);
    if (ds->kind == HYFI_DATA_FOLDER) return 0; /* sizes vary: grown on demand */
    size_t chw = (size_t)ds->c * ds->h * ds->w, ohw = (size_t)ds->oc * ds->h * ds->w;
    s->raw = malloc(chw ? chw : 1);
    s->a = malloc(chw * sizeof(float));
    s->b = malloc(ohw * sizeof(float));
    if (!s->raw || !s->a || !s->b) {
        scratch_free(s);
        return HYFI_DATA_ERR_NOMEM;
    }
    return 0;
}

/* *buf holds at least `need` bytes (its old content is dropped). */
static int grow(void *buf, size_t *cap, size_t need)
{
    void **p = buf;
    if (need <= *cap) return 0;
    free(*p);
    *cap = 0;
    if (!(*p = malloc(need))) return HYFI_DATA_ERR_NOMEM;
    *cap = need;
    return 0;
}

/* -------------------------------------------------- folder: PNG/JPEG decode */
/* A file's geometry, and after a full decode the layout of scratch.dec. */
typedef struct img_info {
    int w, h;
    int c;   /* channels kept: 1 (grey) or 3 (colour) */
    int nc;  /* samples per pixel in dec (alpha included) */
    int bps; /* bytes per sample in dec: 1, or 2 (big-endian 16-bit PNG) */
} img_info;

static int check_size(const char *path, const char *fmt, uint32_t w, uint32_t h, char *err,
                      size_t errlen)
{
    if (w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE ||
        (uint64_t)w * h > FOLDER_MAX_PIXELS)
        return fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                    "folder: %s: a %ux%u %s image; sides must be 1..%d and the image at most "
                    "2^26 pixels: downscale it or remove it",
                    path, w, h, fmt, MAX_SIDE);
    return 0;
}

static void png_error_fn(png_structp png, png_const_charp msg)
{
    scratch *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warning_fn(png_structp png, png_const_charp msg)
{
    (void)png; /* ancillary-chunk trouble (bad CRC, odd iCCP): libpng goes on */
    (void)msg;
}

static int png_decode(const char *path, FILE *f, bool header_only, img_info *ii, scratch *s,
                      char *err, size_t errlen)
{
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, png_error_fn,
                                             png_warning_fn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory for libpng", path);
    }
    /* png and info are not changed after this point, so they survive the longjmp. */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                    "folder: %s: corrupt or truncated PNG (libpng: %s%s); replace the file or "
                    "remove it from the data set",
                    path, s->msg,
                    strcmp(s->msg, "Read Error") == 0 ? ": the file ends too early" : "");
    }
    png_init_io(png, f);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int ctype = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    int rc = check_size(path, "PNG", w, h, err, errlen);
    if (rc || header_only) {
        ii->w = (int)w;
        ii->h = (int)h;
        ii->c = (ctype & PNG_COLOR_MASK_COLOR) ? 3 : 1; /* palette has the colour bit */
        png_destroy_read_struct(&png, &info, NULL);
        return rc;
    }
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    /* Whatever alpha the transforms left (tRNS expanded or not) is skipped in
     * dec_to_float: 1-2 samples a pixel are grey(+alpha), 3-4 RGB(+alpha). */
    const int nc = png_get_channels(png, info), bps = png_get_bit_depth(png, info) == 16 ? 2 : 1;
    const size_t rowbytes = png_get_rowbytes(png, info);
    if (nc < 1 || nc > 4 || rowbytes < (size_t)w * nc * bps ||
        grow(&s->dec, &s->dec_cap, rowbytes * h) ||
        grow(&s->rows, &s->rows_cap, (size_t)h * sizeof(png_bytep))) {
        png_destroy_read_struct(&png, &info, NULL);
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                    "folder: %s: out of memory for a %ux%u PNG image", path, w, h);
    }
    png_bytep *rows = s->rows;
    for (png_uint_32 y = 0; y < h; y++) rows[y] = s->dec + (size_t)y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL); /* the rest of the file up to IEND: catches truncation */
    png_destroy_read_struct(&png, &info, NULL);
    /* dec_to_float reads rows w * nc * bps bytes apart: compact them if padded */
    if (rowbytes != (size_t)w * nc * bps)
        for (png_uint_32 y = 1; y < h; y++)
            memmove(s->dec + (size_t)y * w * nc * bps, s->dec + (size_t)y * rowbytes,
                    (size_t)w * nc * bps);
    *ii = (img_info){.w = (int)w, .h = (int)h, .c = nc <= 2 ? 1 : 3, .nc = nc, .bps = bps};
    return 0;
}

/* libjpeg's corrupt-data warnings: libjpeg goes on and fills what is missing
 * with grey; here they are errors (other warnings are ignored). */
static bool jpeg_warning_is_fatal(int code)
{
    return code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
           code == JWRN_ARITH_BAD_CODE || code == JWRN_MUST_RESYNC ||
           code == JWRN_NOT_SEQUENTIAL;
}

static void jpeg_error_exit_fn(j_common_ptr ci)
{
    scratch *s = (scratch *)((char *)ci->err - offsetof(scratch, jerr.pub));
    (*ci->err->format_message)(ci, s->msg);
    longjmp(s->jerr.jb, 1);
}

static void jpeg_emit_message_fn(j_common_ptr ci, int level)
{
    if (level >= 0) return; /* trace messages */
    if (jpeg_warning_is_fatal(ci->err->msg_code)) jpeg_error_exit_fn(ci);
    ci->err->num_warnings++;
}

static void jpeg_output_message_fn(j_common_ptr ci) { (void)ci; }

static int jpeg_decode(const char *path, FILE *f, bool header_only, img_info *ii, scratch *s,
                       char *err, size_t errlen)
{
    /* The decompressor lives in *s (not in this frame) so that it is well
     * defined after the longjmp. */
    struct jpeg_decompress_struct *ci = &s->jci;
    ci->err = jpeg_std_error(&s->jerr.pub);
    s->jerr.pub.error_exit = jpeg_error_exit_fn;
    s->jerr.pub.emit_message = jpeg_emit_message_fn;
    s->jerr.pub.output_message = jpeg_output_message_fn;
    ci->mem = NULL; /* jpeg_destroy_decompress is a no-op until jpeg_create_decompress */
    if (setjmp(s->jerr.jb)) {
        jpeg_destroy_decompress(ci);
        return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                    "folder: %s: corrupt or truncated JPEG (libjpeg: %s); replace the file or "
                    "remove it from the data set",
                    path, s->msg);
    }
    jpeg_create_decompress(ci);
    jpeg_stdio_src(ci, f);
    (void)jpeg_read_header(ci, TRUE);
    int c;
    if (ci->num_components == 1) {
        ci->out_color_space = JCS_GRAYSCALE;
        c = 1;
    } else if (ci->num_components == 3 &&
               (ci->jpeg_color_space == JCS_YCbCr || ci->jpeg_color_space == JCS_RGB)) {
        ci->out_color_space = JCS_RGB;
        c = 3;
    } else {
        int nco = ci->num_components;
        jpeg_destroy_decompress(ci);
        return fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                    "folder: %s: a %d-component JPEG (CMYK or YCCK); only greyscale and RGB JPEGs "
                    "are read: convert it to RGB or remove it",
                    path, nco);
    }
    const uint32_t w = ci->image_width, h = ci->image_height;
    int rc = check_size(path, "JPEG", w, h, err, errlen);
    if (rc || header_only) {
        *ii = (img_info){.w = (int)w, .h = (int)h, .c = c, .nc = c, .bps = 1};
        jpeg_destroy_decompress(ci);
        return rc;
    }
    (void)jpeg_start_decompress(ci);
    const size_t stride = (size_t)ci->output_width * (size_t)ci->output_components;
    if (ci->output_width != w || ci->output_height != h || ci->output_components != c ||
        grow(&s->dec, &s->dec_cap, stride * h)) {
        jpeg_destroy_decompress(ci);
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                    "folder: %s: out of memory for a %ux%u JPEG image", path, w, h);
    }
    while (ci->output_scanline < ci->output_height) {
        JSAMPROW row = s->dec + (size_t)ci->output_scanline * stride;
        (void)jpeg_read_scanlines(ci, &row, 1);
    }
    (void)jpeg_finish_decompress(ci);
    jpeg_destroy_decompress(ci);
    *ii = (img_info){.w = (int)w, .h = (int)h, .c = c, .nc = c, .bps = 1};
    return 0;
}

/* Open `path` and read its header (header_only) or the whole image into
 * s->dec. The signature picks the decoder, whatever the extension. */
static int image_read(const char *path, bool header_only, img_info *ii, scratch *s, char *err,
                      size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, errlen, errno == ENOENT ? HYFI_DATA_ERR_NOTFOUND : HYFI_DATA_ERR_IO,
                    "folder: %s: cannot open: %s; check that the file still exists and is "
                    "readable",
                    path, strerror(errno));
    unsigned char sig[8];
    size_t got = fread(sig, 1, sizeof sig, f);
    int rc;
    if (ferror(f) || fseek(f, 0, SEEK_SET) != 0)
        rc = fail(err, errlen, HYFI_DATA_ERR_IO, "folder: %s: read error: %s; check the file",
                  path, strerror(errno));
    else if (got == 8 && png_sig_cmp(sig, 0, 8) == 0)
        rc = png_decode(path, f, header_only, ii, s, err, errlen);
    else if (got >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF)
        rc = jpeg_decode(path, f, header_only, ii, s, err, errlen);
    else
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                  "folder: %s: %s, not a PNG or JPEG image (read by content, not by extension); "
                  "replace the file, or remove or rename it so that it does not end in .png, "
                  ".jpg or .jpeg",
                  path, got == 0 ? "an empty file" : got < 8 ? "a file of a few bytes"
                                                             : "an unknown signature");
    fclose(f);
    return rc;
}

/* s->dec -> dst (c, h, w) in 0..1, alpha skipped. */
static void dec_to_float(const scratch *s, const img_info *ii, float *dst)
{
    const size_t hw = (size_t)ii->w * ii->h;
    const uint8_t *d = s->dec;
    if (ii->bps == 1) {
        const float inv = 1.0f / 255.0f;
        for (size_t p = 0; p < hw; p++)
            for (int k = 0; k < ii->c; k++) dst[k * hw + p] = (float)d[p * ii->nc + k] * inv;
    } else {
        const float inv = 1.0f / 65535.0f;
        for (size_t p = 0; p < hw; p++)
            for (int k = 0; k < ii->c; k++) {
                const uint8_t *q = d + 2 * (p * ii->nc + k);
                dst[k * hw + p] = (float)((unsigned)q[0] << 8 | q[1]) * inv;
            }
    }
}

/* Folder image i at the output geometry, not yet normalised: out (oc, oh, ow). */
static int folder_image_into(const hyfi_dataset *ds, size_t i, float *out, scratch *s, char *err,
                             size_t errlen)
{
    const char *path = ds->paths + ds->path_off[i];
    img_info ii;
    int rc = image_read(path, false, &ii, s, err, errlen);
    if (rc) return rc;
    const size_t hw = (size_t)ii.w * ii.h, ohw = (size_t)ds->oh * ds->ow;
    const bool same = ii.h == ds->oh && ii.w == ds->ow;
    if (grow(&s->fa, &s->fa_cap, (size_t)ii.c * hw * sizeof(float)))
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory for a %dx%d image",
                    path, ii.w, ii.h);
    dec_to_float(s, &ii, s->fa);
    if (!channels_supported(ii.c, ds->oc))
        return fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                    "folder: %s: a %d-channel image cannot become %d channels; the file changed "
                    "since the data set was loaded: load it again",
                    path, ii.c, ds->oc);
    if (ds->oc <= ii.c) { /* the same count or 3 -> 1: convert at the file's size, then resize */
        const float *src = s->fa;
        if (ds->oc != ii.c) {
            if (grow(&s->fb, &s->fb_cap, (size_t)ds->oc * hw * sizeof(float)))
                return fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                            "folder: %s: out of memory for a %dx%d image", path, ii.w, ii.h);
            hyfi_convert_channels(s->fa, ii.c, hw, s->fb, ds->oc);
            src = s->fb;
        }
        if (same)
            memcpy(out, src, (size_t)ds->oc * ohw * sizeof(float));
        else
            hyfi_resize_bilinear(src, ds->oc, ii.h, ii.w, out, ds->oh, ds->ow);
    } else { /* 1 -> N: resize the one channel, then replicate it */
        const float *src = s->fa;
        if (!same) {
            if (grow(&s->fb, &s->fb_cap, (size_t)ii.c * ohw * sizeof(float)))
                return fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                            "folder: %s: out of memory for a %dx%d image", path, ds->oh, ds->ow);
            hyfi_resize_bilinear(s->fa, ii.c, ii.h, ii.w, s->fb, ds->oh, ds->ow);
            src = s->fb;
        }
        hyfi_convert_channels(src, ii.c, ohw, out, ds->oc);
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
static int image_into(const hyfi_dataset *ds, size_t i, float *out, scratch *s, char *err,
                      size_t errlen)
{
    if (ds->kind == HYFI_DATA_FOLDER) {
        int rc = folder_image_into(ds, i, out, s, err, errlen);
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
        return fail(err, errlen, HYFI_DATA_ERR_ARG, "image: %s: no image %zu (NULL dataset or "
                    "output, or index past the %zu images)", ds ? ds->name : "(null)", i,
                    ds ? ds->n : 0);
    scratch s;
    if (scratch_init(&s, ds))
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory", ds->name);
    int rc = image_into(ds, i, out, &s, err, errlen);
    scratch_free(&s);
    return rc;
}

int hyfi_dataset_image(const hyfi_dataset *ds, size_t i, float *out)
{
    return hyfi_dataset_image_err(ds, i, out, NULL, 0);
}

static int batch_into(const hyfi_dataset *ds, const size_t *perm, size_t start, int B, float *x,
                      int32_t *y, scratch *s, char *err, size_t errlen)
{
    const size_t numel = hyfi_dataset_image_numel(ds);
    for (int r = 0; r < B; r++) {
        size_t pos = (start + (size_t)r) % ds->n;
        size_t idx = perm ? perm[pos] : pos;
        if (idx >= ds->n)
            return fail(err, errlen, HYFI_DATA_ERR_ARG,
                        "batch: %s: permutation entry %zu is %zu, past the %zu images", ds->name,
                        pos, idx, ds->n);
        int rc = image_into(ds, idx, x + (size_t)r * numel, s, err, errlen);
        if (rc) return rc;
        if (y) y[r] = ds->labels[idx];
    }
    return 0;
}

int hyfi_dataset_batch_err(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                           float *x, int32_t *y, char *err, size_t errlen)
{
    if (!ds || !x || B < 1 || ds->n == 0)
        return fail(err, errlen, HYFI_DATA_ERR_ARG,
                    "batch: NULL dataset or output, batch size %d < 1, or an empty data set", B);
    scratch s;
    if (scratch_init(&s, ds))
        return fail(err, errlen, HYFI_DATA_ERR_NOMEM, "%s: out of memory", ds->name);
    int rc = batch_into(ds, perm, start, B, x, y, &s, err, errlen);
    scratch_free(&s);
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

/* ------------------------------------------------------------------ folder */
/* A growable list of malloc'd strings. */
typedef struct strlist {
    char **v;
    size_t n, cap;
} strlist;

static void sl_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Append a copy of a, or of "a/b" when b is not NULL. */
static int sl_push(strlist *l, const char *a, const char *b)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) return HYFI_DATA_ERR_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    size_t n = strlen(a) + (b ? strlen(b) + 1 : 0) + 1;
    char *p = malloc(n);
    if (!p) return HYFI_DATA_ERR_NOMEM;
    if (b)
        snprintf(p, n, "%s/%s", a, b);
    else
        memcpy(p, a, n);
    l->v[l->n++] = p;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

enum { PATH_NONE = 0, PATH_DIR, PATH_FILE, PATH_OTHER };

/* What path is, following symbolic links. */
static int path_kind(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return PATH_NONE;
    return S_ISDIR(st.st_mode) ? PATH_DIR : S_ISREG(st.st_mode) ? PATH_FILE : PATH_OTHER;
}

static int path_kind2(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) return PATH_NONE;
    snprintf(p, n, "%s/%s", dir, name);
    int k = path_kind(p);
    free(p);
    return k;
}

/* The names in dir that do not start with '.', sorted bytewise; with
 * `kind` != PATH_NONE only the entries of that kind. */
static int list_dir(const char *dir, int kind, strlist *names, char *err, size_t errlen)
{
    memset(names, 0, sizeof *names);
    DIR *d = opendir(dir);
    if (!d)
        return fail(err, errlen, errno == ENOENT ? HYFI_DATA_ERR_NOTFOUND : HYFI_DATA_ERR_IO,
                    "folder: %s: cannot open the directory: %s; check the path and permissions",
                    dir, strerror(errno));
    int rc = 0;
    for (;;) {
        errno = 0; /* readdir's only way to tell an error from the end */
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                rc = fail(err, errlen, HYFI_DATA_ERR_IO,
                          "folder: %s: cannot read the directory: %s", dir, strerror(errno));
            break;
        }
        if (e->d_name[0] == '.') continue;
        if (kind != PATH_NONE && path_kind2(dir, e->d_name) != kind) continue;
        if (sl_push(names, e->d_name, NULL)) {
            rc = fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory", dir);
            break;
        }
    }
    closedir(d);
    if (rc) {
        sl_free(names);
        return rc;
    }
    if (names->n) qsort(names->v, names->n, sizeof *names->v, cmp_str);
    return 0;
}

static bool has_image_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot + 1, "png") == 0 || strcasecmp(dot + 1, "jpg") == 0 ||
                   strcasecmp(dot + 1, "jpeg") == 0);
}

/* Append the image files under dir to files: its own in name order, then
 * those of its subfolders in name order, recursively. */
static int collect_images(const char *dir, int depth, strlist *files, char *err, size_t errlen)
{
    strlist names, subdirs = {0};
    int rc = list_dir(dir, PATH_NONE, &names, err, errlen);
    for (size_t k = 0; rc == 0 && k < names.n; k++) {
        int kind = path_kind2(dir, names.v[k]);
        if (kind == PATH_FILE && has_image_ext(names.v[k]))
            rc = sl_push(files, dir, names.v[k]);
        else if (kind == PATH_DIR)
            rc = sl_push(&subdirs, dir, names.v[k]);
        if (rc) rc = fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory", dir);
    }
    if (rc == 0 && subdirs.n && depth >= FOLDER_MAX_DEPTH)
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                  "folder: %s: subfolders nested more than %d deep (a symbolic link loop?); "
                  "flatten the class folder",
                  dir, FOLDER_MAX_DEPTH);
    for (size_t k = 0; rc == 0 && k < subdirs.n; k++)
        rc = collect_images(subdirs.v[k], depth + 1, files, err, errlen);
    sl_free(&names);
    sl_free(&subdirs);
    return rc;
}

/* dir/train + dir/val (else dir/test) when both are directories, else dir and
 * no test split. *train and *test (or NULL) are malloc'd; dir loses trailing
 * slashes. */
static int folder_layout(const char *dir, char **train, char **test)
{
    *train = *test = NULL;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    char *base = malloc(n + 1);
    strlist cand = {0};
    if (!base) return HYFI_DATA_ERR_NOMEM;
    memcpy(base, dir, n);
    base[n] = '\0';
    if (sl_push(&cand, base, "train") || sl_push(&cand, base, "val") ||
        sl_push(&cand, base, "test")) {
        sl_free(&cand);
        free(base);
        return HYFI_DATA_ERR_NOMEM;
    }
    if (path_kind(cand.v[0]) == PATH_DIR) {
        int t = path_kind(cand.v[1]) == PATH_DIR ? 1 : path_kind(cand.v[2]) == PATH_DIR ? 2 : 0;
        if (t) {
            *train = cand.v[0];
            *test = cand.v[t];
            cand.v[0] = cand.v[t] = NULL;
            free(base);
            base = NULL;
        }
    }
    if (base) *train = base;
    sl_free(&cand);
    return 0;
}

int hyfi_dataset_load_folder(const char *dir, hyfi_data_split split, hyfi_dataset **out,
                             char *err, size_t errlen)
{
    if (!out) return fail(err, errlen, HYFI_DATA_ERR_ARG, "folder: out is NULL");
    *out = NULL;
    if (!dir || !*dir)
        return fail(err, errlen, HYFI_DATA_ERR_ARG, "folder: no directory given; %s", FOLDER_HINT);
    int kind = path_kind(dir);
    if (kind == PATH_NONE)
        return fail(err, errlen, HYFI_DATA_ERR_NOTFOUND, "folder: %s: not found (%s); %s", dir,
                    strerror(errno), FOLDER_HINT);
    if (kind != PATH_DIR)
        return fail(err, errlen, HYFI_DATA_ERR_ARG, "folder: %s: not a directory; %s", dir,
                    FOLDER_HINT);
    char *train_dir = NULL, *test_dir = NULL;
    strlist classes = {0}, sub = {0}, files = {0};
    int32_t *lab = NULL;
    size_t lab_cap = 0;
    hyfi_dataset *ds = NULL;
    scratch s;
    memset(&s, 0, sizeof s);
    int rc = folder_layout(dir, &train_dir, &test_dir);
    if (rc) {
        rc = fail(err, errlen, rc, "folder: %s: out of memory", dir);
        goto done;
    }
    if (split == HYFI_SPLIT_TEST && !test_dir) {
        rc = fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                  "folder: %s has no train/ and val/ (or test/) subfolders, so it has no test "
                  "split; add them (each with one subfolder per class) or train without one",
                  train_dir);
        goto done;
    }
    /* Classes: the subfolders of the train split, sorted bytewise. */
    if ((rc = list_dir(train_dir, PATH_DIR, &classes, err, errlen))) goto done;
    if (classes.n == 0) {
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                  "folder: %s: no class subfolders; put the images of each class in a subfolder "
                  "(%s/CLASS/IMAGE.png); %s",
                  train_dir, train_dir, FOLDER_HINT);
        goto done;
    }
    if (classes.n > (size_t)INT32_MAX) {
        rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT, "folder: %s: too many classes", train_dir);
        goto done;
    }
    const char *split_dir = split == HYFI_SPLIT_TRAIN ? train_dir : test_dir;
    const strlist *cls = &classes;
    if (split == HYFI_SPLIT_TEST) {
        if ((rc = list_dir(test_dir, PATH_DIR, &sub, err, errlen))) goto done;
        if (sub.n == 0) {
            rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                      "folder: %s: no class subfolders; put the test images of each class in a "
                      "subfolder named like the class folder in %s",
                      test_dir, train_dir);
            goto done;
        }
        cls = &sub;
    }
    /* Files of each class folder of the split, and their labels. */
    for (size_t k = 0; k < cls->n; k++) {
        const char *name = cls->v[k];
        char **hit = bsearch(&name, classes.v, classes.n, sizeof *classes.v, cmp_str);
        if (!hit) {
            rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                      "folder: %s/%s: class '%s' of the test split is not a class of %s; rename "
                      "or remove the folder, or add the class to the train split",
                      split_dir, name, name, train_dir);
            goto done;
        }
        const int32_t label = (int32_t)(hit - classes.v);
        const size_t before = files.n;
        size_t n = strlen(split_dir) + strlen(name) + 2;
        char *cdir = malloc(n);
        if (!cdir) {
            rc = fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory", split_dir);
            goto done;
        }
        snprintf(cdir, n, "%s/%s", split_dir, name);
        rc = collect_images(cdir, 0, &files, err, errlen);
        if (rc == 0 && files.n == before)
            rc = fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                      "folder: %s: empty class folder: no .png, .jpg or .jpeg images in it or "
                      "its subfolders; add images or remove the folder",
                      cdir);
        free(cdir);
        if (rc) goto done;
        if (files.n > lab_cap) {
            size_t cap = files.cap;
            int32_t *l = realloc(lab, cap * sizeof *l);
            if (!l) {
                rc = fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory", split_dir);
                goto done;
            }
            lab = l;
            lab_cap = cap;
        }
        for (size_t i = before; i < files.n; i++) lab[i] = label;
    }
    /* Headers: every file must be a readable PNG/JPEG of a sane size; the
     * split has 3 channels if any image has, and the first image's size. */
    int c = 1, h = 0, w = 0;
    size_t pool = 0;
    for (size_t i = 0; i < files.n; i++) {
        img_info ii;
        if ((rc = image_read(files.v[i], true, &ii, &s, err, errlen))) goto done;
        if (ii.c > c) c = ii.c;
        if (i == 0) {
            h = ii.h;
            w = ii.w;
        }
        pool += strlen(files.v[i]) + 1;
    }
    /* ImageNet constants; their BT.601 luminance-weighted values for grey. */
    float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    if (c == 1) {
        mean[0] = LUMA[0] * mean[0] + LUMA[1] * mean[1] + LUMA[2] * mean[2];
        std[0] = LUMA[0] * std[0] + LUMA[1] * std[1] + LUMA[2] * std[2];
    }
    if ((rc = ds_new(HYFI_DATA_FOLDER, split, files.n, c, h, w, (int)classes.n, mean, std, &ds,
                     err, errlen)))
        goto done;
    ds->paths = malloc(pool);
    ds->path_off = malloc(files.n * sizeof *ds->path_off);
    if (!ds->paths || !ds->path_off) {
        rc = fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory for %zu paths",
                  split_dir, files.n);
        goto done;
    }
    size_t off = 0;
    for (size_t i = 0; i < files.n; i++) {
        size_t n = strlen(files.v[i]) + 1;
        memcpy(ds->paths + off, files.v[i], n);
        ds->path_off[i] = off;
        ds->labels[i] = lab[i];
        off += n;
    }
    *out = ds;
    ds = NULL;
    rc = 0;
done:
    hyfi_dataset_free(ds);
    scratch_free(&s);
    sl_free(&classes);
    sl_free(&sub);
    sl_free(&files);
    free(lab);
    free(train_dir);
    free(test_dir);
    return rc;
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
        return hyfi_dataset_load_folder(spec->dir, spec->split, out, err, errlen);
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
    char errmsg[1024];          /* its message, written under mu with status */
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
        char msg[sizeof p->errmsg] = "";
        int rc = batch_into(p->ds, p->cfg.shuffle ? p->perm : NULL, start, B, sl->x, sl->y, &p->s,
                            msg, sizeof msg);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->status = rc;
            if (msg[0])
                snprintf(p->errmsg, sizeof p->errmsg, "%s", msg);
            else
                snprintf(p->errmsg, sizeof p->errmsg, "prefetch: %s: batch %" PRIu64 " failed: %s",
                         p->ds->name, step, hyfi_data_status_name(rc));
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

const char *hyfi_prefetch_error(hyfi_prefetch *p)
{
    if (!p) return "";
    pthread_mutex_lock(&p->mu); /* pairs with the thread's write of errmsg */
    const char *m = p->errmsg;
    pthread_mutex_unlock(&p->mu);
    return m;
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
