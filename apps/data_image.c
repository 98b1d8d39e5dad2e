/* hyfi data module: PNG and JPEG files of folder data sets. The per-call
 * scratch memory of the image pipeline, header and full decoding with libpng
 * and libjpeg (their errors come back through setjmp/longjmp, their default
 * handlers would exit or abort), decoded samples to floats, and one folder
 * image converted to the output geometry. */
#include "data_impl.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h> /* JWRN_* codes */
#include <png.h>

#define FOLDER_MAX_PIXELS ((uint64_t)1 << 26)   /* largest image a folder may hold */

/* ----------------------------------------------------------------- scratch */
void hd_scratch_free(hd_scratch *s)
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

int hd_scratch_init(hd_scratch *s, const hyfi_dataset *ds)
{
    memset(s, 0, sizeof *s);
    if (ds->kind == HYFI_DATA_FOLDER || ds->kind == HYFI_DATA_SLIDES)
        return 0; /* folder: sizes vary, grown on demand; slides: read region by region */
    size_t chw = (size_t)ds->c * ds->h * ds->w, ohw = (size_t)ds->oc * ds->h * ds->w;
    s->raw = malloc(chw ? chw : 1);
    s->a = malloc(chw * sizeof(float));
    s->b = malloc(ohw * sizeof(float));
    if (!s->raw || !s->a || !s->b) {
        hd_scratch_free(s);
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
static int check_size(const char *path, const char *fmt, uint32_t w, uint32_t h, char *err,
                      size_t errlen)
{
    if (w == 0 || h == 0 || w > HD_MAX_SIDE || h > HD_MAX_SIDE ||
        (uint64_t)w * h > FOLDER_MAX_PIXELS)
        return hd_fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                       "folder: %s: a %ux%u %s image; sides must be 1..%d and the image at most "
                       "2^26 pixels: downscale it or remove it",
                       path, w, h, fmt, HD_MAX_SIDE);
    return 0;
}

static void png_error_fn(png_structp png, png_const_charp msg)
{
    hd_scratch *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warning_fn(png_structp png, png_const_charp msg)
{
    (void)png; /* ancillary-chunk trouble (bad CRC, odd iCCP): libpng goes on */
    (void)msg;
}

static int png_decode(const char *path, FILE *f, bool header_only, hd_img_info *ii, hd_scratch *s,
                      char *err, size_t errlen)
{
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, png_error_fn,
                                             png_warning_fn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory for libpng",
                       path);
    }
    /* png and info are not changed after this point, so they survive the longjmp. */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
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
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM,
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
    *ii = (hd_img_info){.w = (int)w, .h = (int)h, .c = nc <= 2 ? 1 : 3, .nc = nc, .bps = bps};
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
    hd_scratch *s = (hd_scratch *)((char *)ci->err - offsetof(hd_scratch, jerr.pub));
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

static int jpeg_decode(const char *path, FILE *f, bool header_only, hd_img_info *ii, hd_scratch *s,
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
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
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
        return hd_fail(err, errlen, HYFI_DATA_ERR_UNSUPPORTED,
                       "folder: %s: a %d-component JPEG (CMYK or YCCK); only greyscale and RGB "
                       "JPEGs "
                       "are read: convert it to RGB or remove it",
                       path, nco);
    }
    const uint32_t w = ci->image_width, h = ci->image_height;
    int rc = check_size(path, "JPEG", w, h, err, errlen);
    if (rc || header_only) {
        *ii = (hd_img_info){.w = (int)w, .h = (int)h, .c = c, .nc = c, .bps = 1};
        jpeg_destroy_decompress(ci);
        return rc;
    }
    (void)jpeg_start_decompress(ci);
    const size_t stride = (size_t)ci->output_width * (size_t)ci->output_components;
    if (ci->output_width != w || ci->output_height != h || ci->output_components != c ||
        grow(&s->dec, &s->dec_cap, stride * h)) {
        jpeg_destroy_decompress(ci);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                       "folder: %s: out of memory for a %ux%u JPEG image", path, w, h);
    }
    while (ci->output_scanline < ci->output_height) {
        JSAMPROW row = s->dec + (size_t)ci->output_scanline * stride;
        (void)jpeg_read_scanlines(ci, &row, 1);
    }
    (void)jpeg_finish_decompress(ci);
    jpeg_destroy_decompress(ci);
    *ii = (hd_img_info){.w = (int)w, .h = (int)h, .c = c, .nc = c, .bps = 1};
    return 0;
}

/* Open `path` and read its header (header_only) or the whole image into
 * s->dec. The signature picks the decoder, whatever the extension. */
int hd_image_read(const char *path, bool header_only, hd_img_info *ii, hd_scratch *s, char *err,
                  size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return hd_fail(err, errlen, errno == ENOENT ? HYFI_DATA_ERR_NOTFOUND : HYFI_DATA_ERR_IO,
                       "folder: %s: cannot open: %s; check that the file still exists and is "
                       "readable",
                       path, strerror(errno));
    unsigned char sig[8];
    size_t got = fread(sig, 1, sizeof sig, f);
    int rc;
    if (ferror(f) || fseek(f, 0, SEEK_SET) != 0)
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_IO, "folder: %s: read error: %s; check the file",
                     path, strerror(errno));
    else if (got == 8 && png_sig_cmp(sig, 0, 8) == 0)
        rc = png_decode(path, f, header_only, ii, s, err, errlen);
    else if (got >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF)
        rc = jpeg_decode(path, f, header_only, ii, s, err, errlen);
    else
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                     "folder: %s: %s, not a PNG or JPEG image (read by content, not by extension); "
                     "replace the file, or remove or rename it so that it does not end in .png, "
                     ".jpg or .jpeg",
                     path, got == 0 ? "an empty file" : got < 8 ? "a file of a few bytes"
                                                             : "an unknown signature");
    fclose(f);
    return rc;
}

/* s->dec -> dst (c, h, w) in 0..1, alpha skipped. */
static void dec_to_float(const hd_scratch *s, const hd_img_info *ii, float *dst)
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
int hd_folder_image_into(const hyfi_dataset *ds, size_t i, float *out, hd_scratch *s,
                         char *err, size_t errlen)
{
    const char *path = ds->paths + ds->path_off[i];
    hd_img_info ii;
    int rc = hd_image_read(path, false, &ii, s, err, errlen);
    if (rc) return rc;
    const size_t hw = (size_t)ii.w * ii.h, ohw = (size_t)ds->oh * ds->ow;
    const bool same = ii.h == ds->oh && ii.w == ds->ow;
    if (grow(&s->fa, &s->fa_cap, (size_t)ii.c * hw * sizeof(float)))
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                       "folder: %s: out of memory for a %dx%d image", path, ii.w, ii.h);
    dec_to_float(s, &ii, s->fa);
    if (!hd_channels_supported(ii.c, ds->oc))
        return hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                       "folder: %s: a %d-channel image cannot become %d channels; the file changed "
                       "since the data set was loaded: load it again",
                       path, ii.c, ds->oc);
    if (ds->oc <= ii.c) { /* the same count or 3 -> 1: convert at the file's size, then resize */
        const float *src = s->fa;
        if (ds->oc != ii.c) {
            if (grow(&s->fb, &s->fb_cap, (size_t)ds->oc * hw * sizeof(float)))
                return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM,
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
                return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                               "folder: %s: out of memory for a %dx%d image", path, ds->oh, ds->ow);
            hyfi_resize_bilinear(s->fa, ii.c, ii.h, ii.w, s->fb, ds->oh, ds->ow);
            src = s->fb;
        }
        hyfi_convert_channels(src, ii.c, ohw, out, ds->oc);
    }
    return 0;
}
