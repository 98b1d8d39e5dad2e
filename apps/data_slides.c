/* hyfi data module: slides data sets, large images in the folder layout read
 * region by region (see data.h). data_folder.c lists the files and labels;
 * this file names the files it takes, reads their headers and makes a
 * normalised region of one image with data_region.c's readers. */
#include "data_impl.h"
#include "data_region.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool hd_slides_ext(const char *ext)
{
    static const char *const exts[] = {"png", "tif", "tiff", "svs", "ndpi", "vms",
                                       "vmu", "scn", "mrxs", "svslide", "bif"};
    for (size_t k = 0; k < sizeof exts / sizeof exts[0]; k++)
        if (strcasecmp(ext, exts[k]) == 0) return true;
    return false;
}

int hd_slides_header(const char *path, hd_img_info *ii, char *err, size_t errlen)
{
    hyfi_region_reader *r;
    int rc = hyfi_region_open(path, HYFI_REGION_AUTO, &r, err, errlen);
    if (rc) return rc;
    *ii = (hd_img_info){.w = hyfi_region_width(r), .h = hyfi_region_height(r),
                        .c = hyfi_region_channels(r)};
    hyfi_region_close(r);
    return 0;
}

int hd_slides_region(const hyfi_dataset *ds, size_t i, int y0, int x0, int h, int w, float *out,
                     char *err, size_t errlen)
{
    const char *path = ds->paths + ds->path_off[i];
    hyfi_region_reader *r;
    int rc = hyfi_region_open(path, HYFI_REGION_AUTO, &r, err, errlen);
    if (rc) return rc;
    const int c = hyfi_region_channels(r);
    const size_t hw = (size_t)h * w;
    float *raw = NULL;
    if (hyfi_region_width(r) != ds->w || hyfi_region_height(r) != ds->h ||
        !hd_channels_supported(c, ds->oc)) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "slides: %s is now %dx%d with %d "
                     "channels, not the %dx%d of the data set; load it again", path,
                     hyfi_region_width(r), hyfi_region_height(r), c, ds->w, ds->h);
        goto done;
    }
    if (c == ds->oc) {
        rc = hyfi_region_read(r, x0, y0, w, h, out, err, errlen);
    } else { /* 1 -> N, 3 -> 1: as the folder kind converts */
        if (!(raw = malloc((size_t)c * hw * sizeof *raw))) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "slides: %s: out of memory for a "
                         "%dx%d region", path, w, h);
            goto done;
        }
        if (!(rc = hyfi_region_read(r, x0, y0, w, h, raw, err, errlen)))
            hyfi_convert_channels(raw, c, hw, out, ds->oc);
    }
    if (rc) goto done;
    for (int k = 0; k < ds->oc; k++) {
        const float sc = ds->oscale[k], bi = ds->obias[k];
        float *o = out + k * hw;
        for (size_t j = 0; j < hw; j++) o[j] = o[j] * sc + bi;
    }
done:
    free(raw);
    hyfi_region_close(r);
    return rc;
}
