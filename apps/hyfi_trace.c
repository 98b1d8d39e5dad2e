/* hyfi-trace: merge and summarise a trace recorded with hyfi-train --trace
 * (or hyfi_ctx_config.trace_dir) again, e.g. on another machine:
 *
 *   hyfi-trace DIR            merge DIR/raw (if DIR/paje.trace is missing) and
 *                             write DIR/summary.json and DIR/timeline.svg,
 *                             printing the summary
 *
 * Exit status: 0 success, 1 failure (the message says which), 2 bad usage. */
#include "hyfi.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc == 2 ? stdout : stderr, "usage: hyfi-trace DIR (a folder written by "
                                             "hyfi-train --trace DIR)\n");
        return argc == 2 ? 0 : 2;
    }
    const char *dir = argv[1];
    char p[4096];
    snprintf(p, sizeof p, "%s/paje.trace", dir);
    if (access(p, R_OK)) {
        /* ranks: the raw files there */
        snprintf(p, sizeof p, "%s/raw", dir);
        DIR *d = opendir(p);
        int n = 0;
        for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, "prof_file_", 10);
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
