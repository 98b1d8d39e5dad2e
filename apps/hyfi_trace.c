/* hyfi-trace: merge and summarise a trace recorded with hyfi-train --trace
 * (or hyfi_ctx_config.trace_dir) again, e.g. on another machine:
 *
 *   hyfi-trace DIR            merge DIR/raw (if DIR/paje.trace is missing: not
 *                             merged yet, or the merge failed) and write
 *                             DIR/summary.json and DIR/timeline.svg, printing
 *                             the summary
 *
 * Exit status: 0 success, 1 failure (the message says which), 2 bad usage. */
#include "hyfi.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr, "usage: hyfi-trace DIR (a folder written by "
                                             "hyfi-train --trace DIR)\n");
        return argc == 2 ? 0 : 2;
    }
    const char *dir = argv[1];
    struct stat sb;
    const int bad = stat(dir, &sb) ? errno : S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
    if (bad) {
        fprintf(stderr, "hyfi-trace: %s: %s; give a folder written by hyfi-train --trace\n", dir,
                strerror(bad));
        return 1;
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/paje.trace", dir);
    if (access(p, F_OK)) {
        /* not merged yet (or the merge failed): ranks = the raw files there */
        snprintf(p, sizeof p, "%s/raw", dir);
        DIR *d = opendir(p);
        if (!d && errno != ENOENT) {
            fprintf(stderr, "hyfi-trace: cannot read %s: %s\n", p, strerror(errno));
            return 1;
        }
        int n = 0;
        struct dirent *e;
        while (d && (errno = 0, e = readdir(d))) n += !strncmp(e->d_name, "prof_file_", 10);
        if (d && errno) {
            fprintf(stderr, "hyfi-trace: reading %s failed: %s\n", p, strerror(errno));
            closedir(d);
            return 1;
        }
        if (d) closedir(d);
        if (!n) {
            fprintf(stderr, "hyfi-trace: %s has neither paje.trace nor raw/prof_file_*: not a "
                            "trace folder of hyfi-train --trace\n", dir);
            return 1;
        }
        if (hyfi_trace_merge(dir, n) != HYFI_OK) {
            fprintf(stderr, "hyfi-trace: %s\n", hyfi_last_error());
            return 1;
        }
    }
    if (hyfi_trace_summarize(dir, stdout) != HYFI_OK) {
        fprintf(stderr, "hyfi-trace: %s\n", hyfi_last_error());
        return 1;
    }
    return 0;
}
