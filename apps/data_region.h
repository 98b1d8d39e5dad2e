/* hyfi data module: reading a rectangle of a large image without decoding the
 * rest of it (region readers), for inputs tiled over ranks: each rank reads
 * only the rows and columns of its tiles (hyfi_input_regions in hyfi.h).
 *
 *   PNG (libpng), not interlaced: rows are decoded one at a time up to the
 *     region's bottom row and only the region's columns are kept, so memory is
 *     one row plus the region; the rows above the region are decoded and
 *     dropped (a PNG stream cannot be entered in the middle). An interlaced
 *     (Adam7) PNG cannot be read row by row: it is decoded whole (a message on
 *     open would be wrong for small files, so it is documented here only).
 *   TIFF (libtiff), striped or tiled, one plane of 8- or 16-bit grey or RGB
 *     samples (extra samples such as alpha are skipped), any compression
 *     libtiff decodes (none, LZW, deflate, JPEG: YCbCr comes out as RGB):
 *     only the strips (TIFFReadEncodedStrip) or tiles (TIFFReadEncodedTile)
 *     that meet the region are read, each into one strip/tile buffer.
 *   Whole-slide images through OpenSlide (Aperio .svs, Hamamatsu .ndpi/.vms,
 *     Leica .scn, MIRAX .mrxs, Philips-free formats OpenSlide 3.4 reads, and
 *     tiled generic TIFF): openslide_read_region at level 0 in bands of rows;
 *     its premultiplied ARGB is composited over white (value + 255 - alpha:
 *     transparent pixels outside the scanned area become white, opaque ones
 *     keep their colour exactly).
 *
 * Samples come out as floats x/255 (x/65535 for 16-bit PNG and TIFF), the
 * same floats as the folder data set's decoder (data_image.c) gives for the
 * same pixels, so normalising them equals the whole-image path bitwise.
 *
 * No StarPU, no hyfi.h, nothing exits; errors return a negative
 * HYFI_DATA_ERR_* code (data.h) and a message naming the file. A reader holds
 * only the path and the geometry: every read opens the file, so one reader
 * may be used by several threads at once. */
#ifndef HYFI_APPS_DATA_REGION_H
#define HYFI_APPS_DATA_REGION_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hyfi_region_format {
    HYFI_REGION_AUTO = 0,    /* open: by content (below) */
    HYFI_REGION_PNG,
    HYFI_REGION_TIFF,        /* libtiff: striped or tiled */
    HYFI_REGION_OPENSLIDE
} hyfi_region_format;

typedef struct hyfi_region_reader hyfi_region_reader;

/* Open `path` and read its geometry. AUTO: a PNG signature is PNG; a file
 * OpenSlide recognises as a vendor format (openslide_detect_vendor, other
 * than generic-tiff) is OpenSlide; any other TIFF is TIFF. A given format is
 * used as is (e.g. OpenSlide for a tiled generic TIFF). */
int hyfi_region_open(const char *path, hyfi_region_format format, hyfi_region_reader **out,
                     char *err, size_t errlen);
void hyfi_region_close(hyfi_region_reader *r); /* NULL is fine */

int hyfi_region_width(const hyfi_region_reader *r);
int hyfi_region_height(const hyfi_region_reader *r);
int hyfi_region_channels(const hyfi_region_reader *r); /* 1 (grey) or 3 (colour) */
/* "png", "tiff-striped", "tiff-tiled", "openslide (aperio)", ... */
const char *hyfi_region_describe(const hyfi_region_reader *r);

/* Rows [y0, y0 + h) and columns [x0, x0 + w) (inside the image) as floats
 * x/255 (x/65535): out (channels, h, w). */
int hyfi_region_read(const hyfi_region_reader *r, int x0, int y0, int w, int h, float *out,
                     char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
