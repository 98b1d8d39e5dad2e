/* hyfi data module, private: what the files of the module share (the
 * dataset struct, the per-call scratch memory of the image pipeline, the
 * error helper and the functions one file calls in another). Not installed,
 * not for the apps: they use data.h. Every shared name starts with hd_.
 *
 *   data_common.c    the error helper, names, the dataset object, accessors,
 *                    output geometry, channel conversion and resize (calls
 *                    no other file of the module)
 *   data.c           images and batches, synthetic data, shuffling,
 *                    hyfi_dataset_open (calls the loaders below)
 *   data_idx.c       MNIST / Fashion-MNIST idx files, plain or gzipped
 *   data_cifar.c     CIFAR-10 binary batches
 *   data_image.c     PNG/JPEG decoding, scratch buffers, a folder image at
 *                    the output geometry
 *   data_folder.c    image-folder data sets: directory listing, layout, loader
 *                    (also of slides data sets, which share the layout:
 *                    hyfi_dataset_load_slides)
 *   data_slides.c    slides data sets: large PNG/TIFF/whole-slide images read
 *                    region by region (data_region.c's readers)
 *   data_region.c    the region readers (data_region.h)
 *   data_prefetch.c  the prefetch thread */
#ifndef HYFI_APPS_DATA_IMPL_H
#define HYFI_APPS_DATA_IMPL_H

#include "data.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h> /* after stdio.h: it uses FILE */

#define HD_MAX_SIDE 32768        /* largest accepted image height/width */
#define HD_MAX_CHANNELS 4096     /* largest accepted channel count */

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

/* ------------------------------------------------------------------ errors */
/* Write the message to err (when err is not NULL) and return code. */
__attribute__((format(printf, 4, 5)))
int hd_fail(char *err, size_t errlen, int code, const char *fmt, ...);

/* ----------------------------------------------------------------- dataset */
/* A new dataset with labels allocated (pixels are the loader's business). */
int hd_dataset_new(hyfi_data_kind kind, hyfi_data_split split, size_t n, int c, int h, int w,
                   int num_classes, const float *mean, const float *std, hyfi_dataset **out,
                   char *err, size_t errlen);

/* BT.601 luminance weights (PIL's convert("L")). */
extern const float hd_luma[3];

/* Whether c-channel images can become oc-channel ones: the same count,
 * 1 -> N, 3 -> 1. */
bool hd_channels_supported(int c, int oc);

/* Per-call working memory of the image pipeline. */
typedef struct hd_scratch {
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
} hd_scratch;

_Static_assert(JMSG_LENGTH_MAX <= 256, "scratch.msg holds a libjpeg message");

/* Empty scratch for images of ds (folder data sets: grown on demand);
 * HYFI_DATA_ERR_NOMEM when out of memory. */
int hd_scratch_init(hd_scratch *s, const hyfi_dataset *ds);
void hd_scratch_free(hd_scratch *s);

/* ------------------------------------------------------- folder images */
/* A file's geometry, and after a full decode the layout of scratch.dec. */
typedef struct hd_img_info {
    int w, h;
    int c;   /* channels kept: 1 (grey) or 3 (colour) */
    int nc;  /* samples per pixel in dec (alpha included) */
    int bps; /* bytes per sample in dec: 1, or 2 (big-endian 16-bit PNG) */
} hd_img_info;

/* Open `path` and read its header (header_only) or the whole image into
 * s->dec. The signature picks the decoder, whatever the extension. */
int hd_image_read(const char *path, bool header_only, hd_img_info *ii, hd_scratch *s, char *err,
                  size_t errlen);
/* Folder image i at the output geometry, not yet normalised: out (oc, oh, ow). */
int hd_folder_image_into(const hyfi_dataset *ds, size_t i, float *out, hd_scratch *s,
                         char *err, size_t errlen);
/* dir/train + dir/val (else dir/test) when both are directories, else dir and
 * no test split. *train and *test (or NULL) are malloc'd; dir loses trailing
 * slashes. */
int hd_folder_layout(const char *dir, char **train, char **test);

/* ------------------------------------------------------------ slides */
/* The file extensions of slides data sets (case-insensitive), for messages. */
#define HD_SLIDES_EXTS ".png, .tif, .tiff, .svs, .ndpi, .vms, .vmu, .scn, .mrxs, .svslide or " \
                       ".bif files"
/* True when ext (without the dot) is one of them. */
bool hd_slides_ext(const char *ext);
/* A slide's geometry (ii->w, h, c; nc and bps unset). */
int hd_slides_header(const char *path, hd_img_info *ii, char *err, size_t errlen);
/* Folder-layout loader of kind HYFI_DATA_FOLDER or HYFI_DATA_SLIDES (data_folder.c). */
int hd_load_folder_kind(const char *dir, hyfi_data_split split, hyfi_data_kind kind,
                        hyfi_dataset **out, char *err, size_t errlen);
/* Rows [y0, y0 + h), columns [x0, x0 + w) of slide i, normalised, at the
 * output channels: out (oc, h, w). */
int hd_slides_region(const hyfi_dataset *ds, size_t i, int y0, int x0, int h, int w, float *out,
                     char *err, size_t errlen);

/* --------------------------------------------------------------- batches */
/* Rows of a batch (see hyfi_dataset_batch) with the caller's scratch. */
int hd_batch_into(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                  const unsigned char *rows, float *x,
                  int32_t *y, hd_scratch *s, char *err, size_t errlen);

#endif
