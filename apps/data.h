/* hyfi data module: image classification data sets for the hyfi apps.
 *
 * Plain C11 + zlib + libpng + libjpeg + pthreads; no StarPU and no dependency
 * on hyfi.h, so it can be tested (tests/test_data*.c) and reused on its own.
 *
 * A hyfi_dataset holds N labelled images. Images come out of it as float32 in
 * C x H x W order (one image) or N x C x H x W (a batch), normalised per
 * channel as
 *
 *     out = (x / 255 - mean[c]) / std[c]        x: the raw 0..255 pixel value
 *
 * with these constants (the usual ones of the torchvision recipes):
 *
 *     fashion-mnist  mean 0.2860                     std 0.3530
 *     mnist          mean 0.1307                     std 0.3081
 *     cifar10        mean (0.4914, 0.4822, 0.4465)   std (0.2470, 0.2435, 0.2616)
 *     synthetic      mean 0.5 (every channel)        std 0.5   (values in [-1, 1])
 *
 * Loaders:
 *   - idx (MNIST, Fashion-MNIST): <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte,
 *     plain or gzipped (NAME is tried first, then NAME.gz). Magic numbers,
 *     dimensions, image/label counts, truncation, trailing bytes and the label
 *     range (0..9) are checked.
 *   - CIFAR-10 binary version: <dir>/data_batch_1..5.bin (train) and
 *     <dir>/test_batch.bin (test), each a sequence of 3073-byte records (1 label
 *     byte, then 3072 pixel bytes: 1024 red, 1024 green, 1024 blue, row-major
 *     32x32). <dir>/cifar-10-batches-bin/ is tried when <dir> has no batches.
 *   - synthetic, after MPI4DL's use of torchvision FakeData: image i and its
 *     label depend only on (seed, i): a splitmix64 stream seeded from them gives
 *     the label (uniform in 0..classes-1) and then uniform raw bytes 0..255 for
 *     every pixel. Images are generated on demand (no memory is held for them),
 *     so any count and size work. There is no test split of synthetic data.
 *   - folder (torchvision's ImageFolder, MPI4DL's app 1): <dir> holds one
 *     subfolder per class; class ids are the subfolder names sorted bytewise
 *     (strcmp: "Zebra" < "apple"). A class folder holds PNG and JPEG images
 *     (.png, .jpg, .jpeg, any case), also in nested subfolders (a folder's files
 *     in bytewise name order, then its subfolders', recursively, at most 16
 *     deep); other files are ignored, and so are entries whose name starts with
 *     '.'. A class folder without images, or a <dir> without class folders, is
 *     an error naming it. Splits: when <dir> has both train/ and val/ (or, without
 *     val/, test/) subfolders they are the train and test splits, and the test
 *     split's class folders must be classes of train/ (ids are train/'s, so a
 *     test split may lack classes); otherwise <dir> is the train split and there
 *     is no test split (hyfi_data_has_test_split says which).
 *     The file's content decides the decoder (PNG signature or JPEG SOI marker),
 *     not its extension. PNG (libpng): 1/2/4/8/16-bit grey, grey+alpha,
 *     palette, RGB, RGBA, interlaced or not; alpha and palette transparency are
 *     dropped, no gamma correction; 16-bit samples keep their precision (raw
 *     value x/65535 instead of x/255). JPEG (libjpeg): greyscale and YCbCr/RGB,
 *     baseline or progressive; CMYK/YCCK is refused naming the file. A grey
 *     image has 1 channel, every other one 3; the split's native channel count
 *     is 3 when it has any 3-channel image, else 1 (grey images are then
 *     replicated), and its native height x width is that of its first image.
 *     Every image is converted from its own size to the output geometry (steps
 *     2-4 below), so a split may mix sizes. Normalisation: the ImageNet
 *     constants of the torchvision recipes, mean (0.485, 0.456, 0.406), std
 *     (0.229, 0.224, 0.225); a 1-channel split gets their BT.601
 *     luminance-weighted values (mean 0.4590, std 0.2256; see step 4).
 *     Decoding is lazy: loading lists the files and reads only each file's
 *     header (size, colour type: a file that is no PNG/JPEG, a truncated header,
 *     an image over 2^26 pixels or a CMYK JPEG fail the load naming the file);
 *     pixels are decoded when an image is asked for, i.e. per batch in the
 *     prefetch thread, which overlaps it with training like a DataLoader worker.
 *     Why lazy: the output size is only known after loading (set_output), the
 *     module already produces synthetic images on demand in that thread, and
 *     images may be large (512x512 histology tiles): the dataset holds only the
 *     paths and labels (about 100 bytes an image, far below N x C x S x S) and
 *     each caller (thread) one decoded image at a time. The cost is that a file
 *     corrupt past its header (truncated data, CRC error, bad Huffman code,
 *     premature end of a JPEG) is found when first read: hyfi_dataset_image_err,
 *     hyfi_dataset_batch_err and the prefetcher (hyfi_prefetch_error) return
 *     HYFI_DATA_ERR_FORMAT with a message naming the file. libpng and libjpeg
 *     errors are caught with setjmp/longjmp (their default handlers exit or
 *     abort) and their warnings are silenced, except libjpeg's corrupt-data
 *     ones (premature end, bad Huffman/arithmetic code, lost sync), which are
 *     errors: libjpeg would otherwise fill the rest of the image with grey.
 *   - slides: large images (1,024^2 to whole-slide 100,000^2) for spatially
 *     tiled training, in the folder layout above (class subfolders, optional
 *     train/ + val/ or test/), taking .png, .tif/.tiff and the whole-slide
 *     formats of OpenSlide (.svs, .ndpi, .vms, .vmu, .scn, .mrxs, .svslide,
 *     .bif). Each image is read region by region (data_region.h: libpng row by
 *     row, libtiff strips or tiles, OpenSlide level 0), never whole unless the
 *     whole image is asked for: hyfi_dataset_region gives any rectangle.
 *     Loading reads each file's header only. Every image of a split must have
 *     the same size, which is the output size: slides are not resized
 *     (set_output refuses another size). Channels and normalisation are the
 *     folder kind's (grey or RGB, alpha dropped, ImageNet constants, 16-bit
 *     samples x/65535), so a PNG gives bitwise the floats of the folder kind.
 *     scripts/make_slides.py makes such a data set from real tissue images.
 *
 * Output geometry: hyfi_dataset_set_output() asks for another channel count
 * and/or image size; every later image/batch is converted on the fly:
 *   1. raw bytes -> x/255 at the native geometry;
 *   2. channels: C -> C unchanged; 1 -> N by replication; 3 -> 1 by ITU-R BT.601
 *      luminance 0.299 R + 0.587 G + 0.114 B (what PIL's convert("L") does);
 *      other pairs are refused;
 *   3. size: bilinear resize with half-pixel centres (PyTorch's
 *      interpolate(mode="bilinear", align_corners=False) without antialiasing,
 *      OpenCV's INTER_LINEAR): source coordinate (d + 0.5) * in/out - 0.5,
 *      clamped to the image; the same size is an exact copy;
 *   4. normalisation with the output channels' constants: replicated ones for
 *      1 -> N, and for 3 -> 1 the luminance-weighted means and stds (the std of
 *      the luminance is approximated by the weighted stds, exact for perfectly
 *      correlated channels).
 *   Folder images start from their own channel count (1 or 3) and size, raw
 *   value x/255 (x/65535 for 16-bit PNG): conversion then resize when the
 *   output has as many or fewer channels, resize then replication when it has
 *   more (the same values: both steps are linear, one per pixel, the other per
 *   channel), so a caller holds one image at its file's size as floats.
 *
 * Shuffling: hyfi_dataset_permutation(seed, epoch) is Fisher-Yates driven by a
 * splitmix64 generator seeded with seed + epoch (unbiased bounded draws), so a
 * run is reproducible and each epoch has its own order.
 *
 * Batches: row r of a batch starting at position `start` of a permutation is
 * image perm[(start + r) mod N]; batches wrap around the end so every batch is
 * full. An epoch is ceil(N / B) batches starting at 0, B, 2B, ...; its last
 * batch is completed with the first images of the same permutation.
 *
 * Prefetcher: a pthread fills one of two batch buffers while the caller uses
 * the other (double buffering); hyfi_prefetch_next() hands out the next batch
 * and gives the previous one back to the thread. For a folder data set that
 * thread also decodes the batch's files; a file it cannot decode ends the run
 * of batches with hyfi_prefetch_error() naming it.
 *
 * Errors: every function that can fail returns 0 or a negative HYFI_DATA_ERR_*
 * code and, where it takes `char *err, size_t errlen`, writes a message that
 * names the file, the problem and the fix (err may be NULL). Nothing here exits
 * or aborts.
 *
 * Thread safety: a dataset is read-only after its output geometry is set;
 * hyfi_dataset_image/batch may be called from several threads at once.
 */
#ifndef HYFI_APPS_DATA_H
#define HYFI_APPS_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ status codes */
enum {
    HYFI_DATA_OK = 0,
    HYFI_DATA_END = 1,               /* hyfi_prefetch_next: all requested batches given */
    HYFI_DATA_ERR_ARG = -1,          /* invalid argument (NULL, size out of range, ...) */
    HYFI_DATA_ERR_NOTFOUND = -2,     /* a file does not exist */
    HYFI_DATA_ERR_IO = -3,           /* a file exists but cannot be read */
    HYFI_DATA_ERR_FORMAT = -4,       /* corrupt: magic, dimensions, truncation, labels */
    HYFI_DATA_ERR_NOMEM = -5,        /* out of memory */
    HYFI_DATA_ERR_UNSUPPORTED = -6,  /* not implemented (odd conversions, CMYK JPEG) */
    HYFI_DATA_ERR_THREAD = -7        /* pthread creation failed */
};

/* Short name of a status code ("HYFI_DATA_ERR_FORMAT"). */
const char *hyfi_data_status_name(int status);

typedef enum hyfi_data_kind {
    HYFI_DATA_SYNTHETIC = 0,
    HYFI_DATA_FASHION_MNIST,
    HYFI_DATA_MNIST,
    HYFI_DATA_CIFAR10,
    HYFI_DATA_FOLDER,     /* folder of class folders of PNG/JPEG images */
    HYFI_DATA_SLIDES      /* folder of class folders of large PNG/TIFF/whole-slide images,
                             read region by region */
} hyfi_data_kind;

typedef enum hyfi_data_split {
    HYFI_SPLIT_TRAIN = 0,
    HYFI_SPLIT_TEST
} hyfi_data_split;

/* Where Debian's dataset-fashion-mnist package puts the files. */
#define HYFI_FASHION_MNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/* "synthetic", "fashion-mnist", "mnist", "cifar10", "folder", "slides" <-> kind.
 * hyfi_data_kind_from_name returns 0 and sets *kind, or -1 for an unknown name. */
int hyfi_data_kind_from_name(const char *name, hyfi_data_kind *kind);
const char *hyfi_data_kind_name(hyfi_data_kind kind);
/* Default directory of a kind, or NULL when the caller must give one. */
const char *hyfi_data_default_dir(hyfi_data_kind kind);
/* 1 when the kind has a test split in `dir` (NULL: the default directory):
 * fashion-mnist, mnist and cifar10 always (a missing file is an error of the
 * open), synthetic never, folder and slides when dir has train/ and val/ or test/. */
int hyfi_data_has_test_split(hyfi_data_kind kind, const char *dir);

/* ----------------------------------------------------------------- dataset */
typedef struct hyfi_dataset hyfi_dataset;

/* MNIST or Fashion-MNIST from `dir` (NULL: the kind's default directory). */
int hyfi_dataset_load_idx(hyfi_data_kind kind, const char *dir, hyfi_data_split split,
                          hyfi_dataset **out, char *err, size_t errlen);
/* CIFAR-10 binary batches from `dir` (required). */
int hyfi_dataset_load_cifar10(const char *dir, hyfi_data_split split, hyfi_dataset **out,
                              char *err, size_t errlen);
/* A folder of class folders of PNG/JPEG images (see the file comment). The
 * test split fails with HYFI_DATA_ERR_NOTFOUND when dir has no train/ + val/
 * (or test/) subfolders. */
int hyfi_dataset_load_folder(const char *dir, hyfi_data_split split, hyfi_dataset **out,
                             char *err, size_t errlen);
/* A folder of class folders of large images read region by region (see the
 * file comment); the test split as for hyfi_dataset_load_folder. */
int hyfi_dataset_load_slides(const char *dir, hyfi_data_split split, hyfi_dataset **out,
                             char *err, size_t errlen);
/* `count` synthetic images of channels x height x width with labels in
 * 0..num_classes-1, determined by `seed` (see the file comment). */
int hyfi_dataset_synthetic(int channels, int height, int width, int num_classes, size_t count,
                           uint64_t seed, hyfi_dataset **out, char *err, size_t errlen);

/* Everything needed to open a split of any kind. */
typedef struct hyfi_data_spec {
    hyfi_data_kind kind;
    hyfi_data_split split;
    const char *dir;        /* NULL: hyfi_data_default_dir(kind) */
    /* synthetic only: */
    int channels, height, width, num_classes;
    size_t count;
    uint64_t seed;
} hyfi_data_spec;
/* Dispatch on spec->kind. The synthetic kind has no test split (the call fails
 * with HYFI_DATA_ERR_ARG), nor has a folder without train/ + val/ (or test/)
 * (HYFI_DATA_ERR_NOTFOUND). */
int hyfi_dataset_open(const hyfi_data_spec *spec, hyfi_dataset **out, char *err, size_t errlen);

void hyfi_dataset_free(hyfi_dataset *ds); /* NULL is fine */

/* Ask for images of `channels` x `height` x `width` from now on (see the file
 * comment for the conversions). Fails with HYFI_DATA_ERR_UNSUPPORTED for a
 * channel conversion other than C->C, 1->N, 3->1, and HYFI_DATA_ERR_ARG for
 * sizes outside 1..32768. */
int hyfi_dataset_set_output(hyfi_dataset *ds, int channels, int height, int width, char *err,
                            size_t errlen);

const char *hyfi_dataset_name(const hyfi_dataset *ds); /* "fashion-mnist/train" */
size_t hyfi_dataset_size(const hyfi_dataset *ds);      /* N */
int hyfi_dataset_num_classes(const hyfi_dataset *ds);
/* Output geometry (after set_output), and the geometry of the files. */
int hyfi_dataset_channels(const hyfi_dataset *ds);
int hyfi_dataset_height(const hyfi_dataset *ds);
int hyfi_dataset_width(const hyfi_dataset *ds);
int hyfi_dataset_native_channels(const hyfi_dataset *ds);
int hyfi_dataset_native_height(const hyfi_dataset *ds);
int hyfi_dataset_native_width(const hyfi_dataset *ds);
/* Floats in one output image: channels * height * width. */
size_t hyfi_dataset_image_numel(const hyfi_dataset *ds);
/* Normalisation constants of output channel c. */
float hyfi_dataset_mean(const hyfi_dataset *ds, int c);
float hyfi_dataset_std(const hyfi_dataset *ds, int c);

/* A 64-bit fingerprint of the data set's contents, cheap next to loading it:
 * the kind, the size, the native geometry and the labels; the pixel bytes
 * where they are held in memory (idx, CIFAR-10); for folder and slides data
 * sets each file's path below the data set's folder (the part after the
 * paths' common prefix, so that two copies in different places agree) and
 * its size; the seed of synthetic data. Two ranks that loaded the same data
 * get the same fingerprint. */
uint64_t hyfi_dataset_fingerprint(const hyfi_dataset *ds);

/* Labels (N int32 values, 0..num_classes-1). */
const int32_t *hyfi_dataset_labels(const hyfi_dataset *ds);
int32_t hyfi_dataset_label(const hyfi_dataset *ds, size_t i);

/* Image i, normalised, at the output geometry: out has image_numel floats.
 * Folder images are decoded here and can fail (HYFI_DATA_ERR_FORMAT, _IO,
 * _NOTFOUND); the _err variant writes a message naming the file. */
int hyfi_dataset_image(const hyfi_dataset *ds, size_t i, float *out);
int hyfi_dataset_image_err(const hyfi_dataset *ds, size_t i, float *out, char *err,
                           size_t errlen);

/* Rows [y0, y0 + h) and columns [x0, x0 + w) of image i, normalised, at the
 * output geometry: out (channels, h, w), equal to that part of
 * hyfi_dataset_image's output. Slides read only that rectangle of the file;
 * the other kinds make the whole image and copy the rectangle out. */
int hyfi_dataset_region(const hyfi_dataset *ds, size_t i, int y0, int x0, int h, int w,
                        float *out, char *err, size_t errlen);

/* A batch: x (B, C, H, W) at the output geometry, y (B) labels (y may be
 * NULL); row r is image perm[(start + r) mod N] (perm NULL: the identity).
 * Stops at the first image that fails (the _err variant says which). */
int hyfi_dataset_batch(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                       float *x, int32_t *y);
int hyfi_dataset_batch_err(const hyfi_dataset *ds, const size_t *perm, size_t start, int B,
                           float *x, int32_t *y, char *err, size_t errlen);

/* --------------------------------------------------------------- shuffling */
/* perm[0..n-1] := the permutation of epoch `epoch` for `seed` (Fisher-Yates,
 * splitmix64 seeded with seed + epoch). */
void hyfi_dataset_permutation(uint64_t seed, uint64_t epoch, size_t n, size_t *perm);
/* ceil(n / batch): batches in one epoch (0 when n or batch is 0). */
size_t hyfi_data_steps_per_epoch(size_t n, int batch);

/* ------------------------------------------------------------- conversions */
/* Bilinear resize with half-pixel centres (see the file comment) of every
 * channel: src (C, H, W) -> dst (C, OH, OW). src and dst must not overlap. */
void hyfi_resize_bilinear(const float *src, int channels, int height, int width, float *dst,
                          int out_height, int out_width);
/* Channel conversion of an image of hw pixels per channel: src (C, hw) ->
 * dst (OC, hw). C == OC copies, 1 -> OC replicates, 3 -> 1 is BT.601
 * luminance; any other pair returns HYFI_DATA_ERR_UNSUPPORTED. */
int hyfi_convert_channels(const float *src, int channels, size_t hw, float *dst,
                          int out_channels);

/* -------------------------------------------------------------- prefetcher */
typedef struct hyfi_prefetch hyfi_prefetch;

typedef struct hyfi_prefetch_config {
    int batch;            /* B > 0 */
    uint64_t seed;        /* shuffling seed */
    int shuffle;          /* 0: the identity order every epoch */
    uint64_t first_step;  /* global step to begin with (resuming) */
    uint64_t num_steps;   /* batches to produce; 0: until stopped */
    const unsigned char *rows; /* (batch) or NULL: decode only the rows r with
                                  rows[r] != 0, e.g. the images an MPI rank owns
                                  (the others stay zero; every row's label is
                                  set); copied at start */
} hyfi_prefetch_config;

/* One prepared batch; x and y stay valid until the next hyfi_prefetch_next or
 * hyfi_prefetch_stop. Batch `step` is batch (step mod steps_per_epoch) of
 * epoch (step / steps_per_epoch), starting at position start of that epoch's
 * permutation. */
typedef struct hyfi_batch {
    const float *x;       /* (B, C, H, W) */
    const int32_t *y;     /* (B) */
    int batch;            /* B */
    uint64_t step;
    uint64_t epoch;
    size_t start;
} hyfi_batch;

/* Start the thread; it begins preparing the first batch at once. The dataset
 * must outlive the prefetcher and not change while it runs. */
int hyfi_prefetch_start(const hyfi_dataset *ds, const hyfi_prefetch_config *cfg,
                        hyfi_prefetch **out, char *err, size_t errlen);
/* Wait for the next batch: 0 and *b filled; HYFI_DATA_END after num_steps
 * batches; a negative code if the thread failed (out of memory, a folder image
 * that cannot be decoded): hyfi_prefetch_error then says why. */
int hyfi_prefetch_next(hyfi_prefetch *p, hyfi_batch *b);
/* The message of the thread's failure, naming the file where there is one;
 * "" while it has not failed. Valid until hyfi_prefetch_stop. */
const char *hyfi_prefetch_error(hyfi_prefetch *p);
/* Stop and join the thread, free the buffers. NULL is fine. */
void hyfi_prefetch_stop(hyfi_prefetch *p);

#ifdef __cplusplus
}
#endif
#endif
