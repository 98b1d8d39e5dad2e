/* hyfi data module: region readers for PNG (libpng, row by row), TIFF
 * (libtiff, only the strips or tiles that meet the region) and whole-slide
 * images (OpenSlide). See data_region.h. */
#include "data_region.h"
#include "data_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openslide.h>
#include <png.h>
#include <tiffio.h>

#define REGION_MAX_SIDE (1 << 20)   /* whole-slide images reach 100,000^2 and more */
#define SLIDE_BAND_PIXELS (1 << 22) /* OpenSlide reads in bands of at most 16 MiB of ARGB */

struct hyfi_region_reader {
    hyfi_region_format format;
    char *path;
    int w, h, c;
    char what[64];
};

int hyfi_region_width(const hyfi_region_reader *r) { return r->w; }
int hyfi_region_height(const hyfi_region_reader *r) { return r->h; }
int hyfi_region_channels(const hyfi_region_reader *r) { return r->c; }
const char *hyfi_region_describe(const hyfi_region_reader *r) { return r->what; }

void hyfi_region_close(hyfi_region_reader *r)
{
    if (!r) return;
    free(r->path);
    free(r);
}

/* Samples of one row (nc per pixel, bps bytes each, 16-bit big-endian for
 * PNG, native for TIFF), columns [x0, x0 + w), to channel planes of out
 * (c, plane) at offset o: the first c samples of each pixel. */
static void row_to_float(const uint8_t *row, int nc, int bps, int big_endian, int x0, int w,
                         int c, float *out, size_t plane, size_t o)
{
    if (bps == 1) {
        const float inv = 1.0f / 255.0f;
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                out[k * plane + o + x] = (float)row[(size_t)(x0 + x) * nc + k] * inv;
    } else {
        const float inv = 1.0f / 65535.0f;
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                const uint8_t *q = row + 2 * ((size_t)(x0 + x) * nc + k);
                unsigned v;
                if (big_endian) v = (unsigned)q[0] << 8 | q[1];
                else {
                    uint16_t u;
                    memcpy(&u, q, 2);
                    v = u;
                }
                out[k * plane + o + x] = (float)v * inv;
            }
    }
}

/* --------------------------------------------------------------------- PNG */
typedef struct {
    char msg[256];
} png_err;

static void rpng_error(png_structp png, png_const_charp msg)
{
    png_err *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void rpng_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* Header only (out NULL) or the region into out. The transforms are those of
 * data_image.c's decoder, so the samples are the same. */
static int png_region(hyfi_region_reader *r, int x0, int y0, int w, int h, float *out,
                      char *err, size_t errlen)
{
    FILE *f = fopen(r->path, "rb");
    if (!f)
        return hd_fail(err, errlen, errno == ENOENT ? HYFI_DATA_ERR_NOTFOUND : HYFI_DATA_ERR_IO,
                       "region: %s: cannot open: %s", r->path, strerror(errno));
    png_err pe = {""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &pe, rpng_error,
                                             rpng_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* buffers live in a struct the longjmp does not clobber */
    struct {
        uint8_t *row;
        uint8_t *whole;
        png_bytep *rows;
    } volatile b = {NULL, NULL, NULL};
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        fclose(f);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "region: %s: out of memory for libpng",
                       r->path);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        fclose(f);
        free(b.row);
        free(b.whole);
        free(b.rows);
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                       "region: %s: corrupt or truncated PNG (libpng: %s); replace the file",
                       r->path, pe.msg);
    }
    png_init_io(png, f);
    png_read_info(png, info);
    const png_uint_32 W = png_get_image_width(png, info), H = png_get_image_height(png, info);
    const int ctype = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    int rc = 0;
    if (!out) {
        r->w = (int)W;
        r->h = (int)H;
        r->c = (ctype & PNG_COLOR_MASK_COLOR) ? 3 : 1;
        snprintf(r->what, sizeof r->what, "png%s",
                 png_get_interlace_type(png, info) != PNG_INTERLACE_NONE ? " (interlaced)" : "");
        goto done;
    }
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int nc = png_get_channels(png, info), bps = png_get_bit_depth(png, info) == 16 ? 2 : 1;
    const size_t rowbytes = png_get_rowbytes(png, info);
    const size_t plane = (size_t)w * h;
    if ((int)W != r->w || (int)H != r->h || (nc <= 2 ? 1 : 3) != r->c) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: the file changed since it "
                     "was opened (now %ux%u, %d samples); load the data set again", r->path, W, H,
                     nc);
        goto done;
    }
    if (passes > 1) { /* Adam7: the whole image, then the region */
        b.whole = malloc(rowbytes * H);
        b.rows = malloc(H * sizeof *b.rows);
        if (!b.whole || !b.rows) goto nomem;
        for (png_uint_32 y = 0; y < H; y++) b.rows[y] = b.whole + (size_t)y * rowbytes;
        png_read_image(png, b.rows);
        for (int y = 0; y < h; y++)
            row_to_float(b.rows[y0 + y], nc, bps, 1, x0, w, r->c, out, plane, (size_t)y * w);
    } else { /* row by row down to the region's last row */
        b.row = malloc(rowbytes);
        if (!b.row) goto nomem;
        for (int y = 0; y < y0 + h; y++) {
            png_read_row(png, b.row, NULL);
            if (y >= y0)
                row_to_float(b.row, nc, bps, 1, x0, w, r->c, out, plane, (size_t)(y - y0) * w);
        }
    }
    goto done;
nomem:
    rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "region: %s: out of memory for a row of a "
                 "%ux%u PNG", r->path, W, H);
done:
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
    free(b.row);
    free(b.whole);
    free(b.rows);
    return rc;
}

/* -------------------------------------------------------------------- TIFF */
typedef struct {
    char msg[256];
} tiff_err;

static int tiff_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif;
    tiff_err *e = user;
    if (!e->msg[0]) { /* the first error is the cause */
        int n = snprintf(e->msg, sizeof e->msg, "%s: ", module ? module : "libtiff");
        if (n > 0 && (size_t)n < sizeof e->msg) vsnprintf(e->msg + n, sizeof e->msg - n, fmt, ap);
    }
    return 1;
}

static int tiff_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
    (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
    return 1;
}

static TIFF *tiff_open(const char *path, tiff_err *te)
{
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o) return NULL;
    TIFFOpenOptionsSetErrorHandlerExtR(o, tiff_error, te);
    TIFFOpenOptionsSetWarningHandlerExtR(o, tiff_warning, te);
    /* "m": read(), not mmap: a rank's reads are its strips or tiles, visibly (rchar) */
    TIFF *tif = TIFFOpenExt(path, "rm", o);
    TIFFOpenOptionsFree(o);
    return tif;
}

/* The layout of the samples, checked: nc samples of bps bytes per pixel. */
static int tiff_layout(hyfi_region_reader *r, TIFF *tif, int *nc, int *bps, char *err,
                       size_t errlen)
{
    uint32_t W = 0, H = 0;
    uint16_t spp = 1, bits = 8, photo = PHOTOMETRIC_MINISBLACK, planar = PLANARCONFIG_CONTIG,
             comp = COMPRESSION_NONE, fmt = SAMPLEFORMAT_UINT;
    TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &W);
    TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &H);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo)) photo = PHOTOMETRIC_MINISBLACK;
    if (photo == PHOTOMETRIC_YCBCR && comp == COMPRESSION_JPEG) {
        TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB); /* libjpeg converts */
        photo = PHOTOMETRIC_RGB;
    }
    const int grey = photo == PHOTOMETRIC_MINISBLACK, rgb = photo == PHOTOMETRIC_RGB;
    if (W == 0 || H == 0 || W > REGION_MAX_SIDE || H > REGION_MAX_SIDE || (bits != 8 &&
        bits != 16) || fmt != SAMPLEFORMAT_UINT || planar != PLANARCONFIG_CONTIG ||
        !(grey || rgb) || spp < (rgb ? 3 : 1))
        return hd_fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                       "region: %s: a %ux%u TIFF of %u %u-bit samples per pixel (photometric "
                       "%u, planar configuration %u, sample format %u); region reading takes "
                       "8- or 16-bit unsigned grey (min-is-black) or RGB samples in one plane, "
                       "sides up to %d: convert it (e.g. tiffcp -p contig, vips tiffsave)",
                       r->path, W, H, spp, bits, photo, planar, fmt, REGION_MAX_SIDE);
    r->w = (int)W;
    r->h = (int)H;
    r->c = rgb ? 3 : 1;
    *nc = spp;
    *bps = bits / 8;
    return 0;
}

static int tiff_region(hyfi_region_reader *r, int x0, int y0, int w, int h, float *out,
                       char *err, size_t errlen)
{
    tiff_err te = {""};
    TIFF *tif = tiff_open(r->path, &te);
    if (!tif)
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: not a readable TIFF "
                       "(libtiff: %s)", r->path, te.msg[0] ? te.msg : "cannot open");
    int nc = 0, bps = 0, rc;
    const int w0 = r->w, h0 = r->h, c0 = r->c;
    if ((rc = tiff_layout(r, tif, &nc, &bps, err, errlen))) goto done;
    const int tiled = TIFFIsTiled(tif);
    if (!out) {
        uint32_t tw = 0, th = 0, rps = 0;
        if (tiled) {
            TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
            TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
            snprintf(r->what, sizeof r->what, "tiff-tiled (%ux%u tiles)", tw, th);
        } else {
            TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
            snprintf(r->what, sizeof r->what, "tiff-striped (%u rows a strip)",
                     rps > (uint32_t)r->h ? (uint32_t)r->h : rps);
        }
        goto done;
    }
    if (r->w != w0 || r->h != h0 || r->c != c0) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: the file changed since it "
                     "was opened; load the data set again", r->path);
        goto done;
    }
    const size_t plane = (size_t)w * h, px = (size_t)nc * bps;
    if (tiled) {
        uint32_t tw = 0, th = 0;
        TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
        TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
        const tmsize_t tsize = TIFFTileSize(tif);
        uint8_t *buf = tw && th && tsize > 0 ? malloc((size_t)tsize) : NULL;
        if (!buf) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "region: %s: out of memory for a "
                         "%ux%u tile", r->path, tw, th);
            goto done;
        }
        for (uint32_t ty = (uint32_t)y0 / th * th; ty < (uint32_t)(y0 + h); ty += th)
            for (uint32_t tx = (uint32_t)x0 / tw * tw; tx < (uint32_t)(x0 + w); tx += tw) {
                if (TIFFReadEncodedTile(tif, TIFFComputeTile(tif, tx, ty, 0, 0), buf, tsize) <
                    0) {
                    rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: the tile at "
                                 "(%u, %u) cannot be read (libtiff: %s); replace the file",
                                 r->path, tx, ty, te.msg);
                    free(buf);
                    goto done;
                }
                /* the tile's part of the region: rows ya..yb, columns xa..xb (image) */
                const int ya = (int)ty > y0 ? (int)ty : y0;
                const int yb = (int)(ty + th) < y0 + h ? (int)(ty + th) : y0 + h;
                const int xa = (int)tx > x0 ? (int)tx : x0;
                const int xb = (int)(tx + tw) < x0 + w ? (int)(tx + tw) : x0 + w;
                for (int y = ya; y < yb; y++)
                    row_to_float(buf + (size_t)(y - (int)ty) * tw * px, nc, bps, 0,
                                 xa - (int)tx, xb - xa, r->c, out, plane,
                                 (size_t)(y - y0) * w + (size_t)(xa - x0));
            }
        free(buf);
    } else {
        uint32_t rps = 0;
        TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
        if (rps == 0 || rps > (uint32_t)r->h) rps = (uint32_t)r->h;
        const tmsize_t ssize = TIFFStripSize(tif);
        uint8_t *buf = ssize > 0 ? malloc((size_t)ssize) : NULL;
        if (!buf) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "region: %s: out of memory for a "
                         "strip of %u rows", r->path, rps);
            goto done;
        }
        for (uint32_t sy = (uint32_t)y0 / rps * rps; sy < (uint32_t)(y0 + h); sy += rps) {
            if (TIFFReadEncodedStrip(tif, TIFFComputeStrip(tif, sy, 0), buf, ssize) < 0) {
                rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: the strip at row "
                             "%u cannot be read (libtiff: %s); replace the file", r->path, sy,
                             te.msg);
                free(buf);
                goto done;
            }
            const int ya = (int)sy > y0 ? (int)sy : y0;
            const int yb = (int)(sy + rps) < y0 + h ? (int)(sy + rps) : y0 + h;
            for (int y = ya; y < yb; y++)
                row_to_float(buf + (size_t)(y - (int)sy) * r->w * px, nc, bps, 0, x0, w, r->c,
                             out, plane, (size_t)(y - y0) * w);
        }
        free(buf);
    }
done:
    TIFFClose(tif);
    return rc;
}

/* --------------------------------------------------------------- OpenSlide */
static int slide_region(hyfi_region_reader *r, int x0, int y0, int w, int h, float *out,
                        char *err, size_t errlen)
{
    openslide_t *os = openslide_open(r->path);
    const char *oe = os ? openslide_get_error(os) : "not a format OpenSlide reads";
    int rc = 0;
    if (!os || oe) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: OpenSlide cannot open it "
                     "(%s); check the file (openslide-show-properties)", r->path, oe);
        goto done;
    }
    int64_t W = 0, H = 0;
    openslide_get_level0_dimensions(os, &W, &H);
    if (!out) {
        if (W < 1 || H < 1 || W > REGION_MAX_SIDE || H > REGION_MAX_SIDE) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED, "region: %s: a %lldx%lld slide; "
                         "sides must be 1..%d", r->path, (long long)W, (long long)H,
                         REGION_MAX_SIDE);
            goto done;
        }
        const char *v = openslide_detect_vendor(r->path);
        r->w = (int)W;
        r->h = (int)H;
        r->c = 3;
        snprintf(r->what, sizeof r->what, "openslide (%s)", v ? v : "?");
        goto done;
    }
    const size_t plane = (size_t)w * h;
    int band = SLIDE_BAND_PIXELS / w;
    if (band < 1) band = 1;
    if (band > h) band = h;
    uint32_t *argb = malloc((size_t)band * w * sizeof *argb);
    if (!argb) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "region: %s: out of memory for %d rows",
                     r->path, band);
        goto done;
    }
    const float inv = 1.0f / 255.0f;
    for (int y = 0; y < h; y += band) {
        const int bh = y + band <= h ? band : h - y;
        openslide_read_region(os, argb, x0, y0 + y, 0, w, bh);
        if ((oe = openslide_get_error(os))) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: OpenSlide cannot read "
                         "rows %d..%d (%s); replace the file", r->path, y0 + y, y0 + y + bh - 1,
                         oe);
            break;
        }
        for (size_t i = 0; i < (size_t)bh * w; i++) {
            const uint32_t p = argb[i], a = p >> 24;
            /* premultiplied over white: c + (255 - a) */
            const size_t o = (size_t)y * w + i;
            out[o] = (float)(((p >> 16) & 255) + 255 - a) * inv;
            out[plane + o] = (float)(((p >> 8) & 255) + 255 - a) * inv;
            out[2 * plane + o] = (float)((p & 255) + 255 - a) * inv;
        }
    }
    free(argb);
done:
    if (os) openslide_close(os);
    return rc;
}

/* ------------------------------------------------------------------- API */
static int sig_is_tiff(const unsigned char *s, size_t n)
{
    return n >= 4 && ((s[0] == 'I' && s[1] == 'I' && (s[2] == 42 || s[2] == 43) && s[3] == 0) ||
                      (s[0] == 'M' && s[1] == 'M' && s[2] == 0 && (s[3] == 42 || s[3] == 43)));
}

int hyfi_region_open(const char *path, hyfi_region_format format, hyfi_region_reader **out,
                     char *err, size_t errlen)
{
    if (!out || !path)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "region: path or out is NULL");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return hd_fail(err, errlen, errno == ENOENT ? HYFI_DATA_ERR_NOTFOUND : HYFI_DATA_ERR_IO,
                       "region: %s: cannot open: %s", path, strerror(errno));
    unsigned char sig[8];
    const size_t got = fread(sig, 1, sizeof sig, f);
    fclose(f);
    if (format == HYFI_REGION_AUTO) {
        const char *v = NULL;
        if (got == 8 && png_sig_cmp(sig, 0, 8) == 0) format = HYFI_REGION_PNG;
        else if ((v = openslide_detect_vendor(path)) && strcmp(v, "generic-tiff") != 0)
            format = HYFI_REGION_OPENSLIDE;
        else if (sig_is_tiff(sig, got)) format = HYFI_REGION_TIFF;
        else
            return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "region: %s: neither PNG, TIFF "
                           "nor a whole-slide format OpenSlide knows; convert it (e.g. vips "
                           "tiffsave --tile)", path);
    }
    hyfi_region_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "region: %s: out of memory", path);
    }
    r->format = format;
    int rc = format == HYFI_REGION_PNG    ? png_region(r, 0, 0, 0, 0, NULL, err, errlen)
             : format == HYFI_REGION_TIFF ? tiff_region(r, 0, 0, 0, 0, NULL, err, errlen)
                                          : slide_region(r, 0, 0, 0, 0, NULL, err, errlen);
    if (rc == 0 && (r->w < 1 || r->h < 1 || r->w > REGION_MAX_SIDE || r->h > REGION_MAX_SIDE))
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED, "region: %s: a %dx%d image; sides "
                     "must be 1..%d", path, r->w, r->h, REGION_MAX_SIDE);
    if (rc) {
        hyfi_region_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

int hyfi_region_read(const hyfi_region_reader *r, int x0, int y0, int w, int h, float *out,
                     char *err, size_t errlen)
{
    if (!r || !out || w < 1 || h < 1 || x0 < 0 || y0 < 0 || x0 > r->w - w || y0 > r->h - h)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "region: %s: rows %d..%d, columns %d..%d "
                       "are not inside the %dx%d image", r ? r->path : "(null)", y0, y0 + h - 1,
                       x0, x0 + w - 1, r ? r->w : 0, r ? r->h : 0);
    hyfi_region_reader tmp = *r; /* the header fields are checked against the file again */
    switch (r->format) {
    case HYFI_REGION_PNG: return png_region(&tmp, x0, y0, w, h, out, err, errlen);
    case HYFI_REGION_TIFF: return tiff_region(&tmp, x0, y0, w, h, out, err, errlen);
    default: return slide_region(&tmp, x0, y0, w, h, out, err, errlen);
    }
}
