/* Read one region of an image with the region readers (apps/data_region.h)
 * and print what it cost this process: its peak resident memory (ru_maxrss)
 * and the bytes it read from files (rchar of /proc/self/io), so that
 * tests/data_region.sh can compare a quarter against the whole image.
 * usage: region_rss PATH png|tiff|openslide X0 Y0 W H
 * prints: maxrss_kib=N rchar=N */
#include "data_region.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long long rchar(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    long long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %lld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: region_rss PATH png|tiff|openslide X0 Y0 W H\n");
        return 2;
    }
    const hyfi_region_format fmt = !strcmp(argv[2], "png")    ? HYFI_REGION_PNG
                                   : !strcmp(argv[2], "tiff") ? HYFI_REGION_TIFF
                                                              : HYFI_REGION_OPENSLIDE;
    const int x0 = atoi(argv[3]), y0 = atoi(argv[4]), w = atoi(argv[5]), h = atoi(argv[6]);
    char err[1024];
    hyfi_region_reader *r;
    const long long before = rchar();
    if (hyfi_region_open(argv[1], fmt, &r, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    float *out = malloc((size_t)hyfi_region_channels(r) * w * h * sizeof *out);
    if (!out || hyfi_region_read(r, x0, y0, w, h, out, err, sizeof err)) {
        fprintf(stderr, "%s\n", out ? err : "out of memory");
        return 1;
    }
    double sum = 0; /* use the values */
    for (size_t i = 0; i < (size_t)hyfi_region_channels(r) * w * h; i += 4099) sum += out[i];
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("maxrss_kib=%ld rchar=%lld checksum=%.3f\n", ru.ru_maxrss, rchar() - before, sum);
    free(out);
    hyfi_region_close(r);
    return 0;
}
