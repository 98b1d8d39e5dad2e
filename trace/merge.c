/* hyfi_trace_merge: StarPU's starpu_fxt_tool merges the ranks' raw FxT files
 * (dir/raw/prof_file_<user>_<rank>) into dir: paje.trace, tasks.rec,
 * comms.rec, data.rec, dag.dot, trace.html, ... (its output in
 * dir/fxt_tool.log). */
#include "tooling.h"

#include "hyfi_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

hyfi_status hyfi_trace_merge(const char *dir, int nranks)
{
    if (!dir || nranks < 1)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_trace_merge: no folder or %d ranks", nranks);
    char raw[4096];
    snprintf(raw, sizeof raw, "%s/raw", dir);
    char **files = calloc((size_t)nranks, sizeof *files);
    if (!files) return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_merge: out of memory");
    DIR *d = opendir(raw);
    if (!d) {
        free(files);
        return hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: %s: %s (was the run traced into %s?)",
                         raw, strerror(errno), dir);
    }
    /* prof_file_<user>_<rank> */
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "prof_file_", 10)) continue;
        const char *us = strrchr(e->d_name, '_');
        char *end;
        long r = strtol(us + 1, &end, 10);
        if (*end || r < 0 || r >= nranks || files[r]) continue;
        size_t n = strlen(raw) + strlen(e->d_name) + 2;
        if ((files[r] = malloc(n))) snprintf(files[r], n, "%s/%s", raw, e->d_name);
    }
    closedir(d);
    hyfi_status st = HYFI_OK;
    for (int r = 0; r < nranks && st == HYFI_OK; r++)
        if (!files[r])
            st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: no trace file of rank %d in %s (the "
                                        "run had %d ranks?)", r, raw, nranks);
    char tool[4200];
    snprintf(tool, sizeof tool, "%s/starpu_fxt_tool", HYFI_STARPU_BINDIR);
    if (access(tool, X_OK)) snprintf(tool, sizeof tool, "starpu_fxt_tool");
    char **argv = calloc((size_t)(2 * nranks + 4), sizeof *argv);
    if (st == HYFI_OK && !argv) st = hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_merge: out of memory");
    if (st == HYFI_OK) {
        int k = 0;
        argv[k++] = tool;
        for (int r = 0; r < nranks; r++) argv[k++] = "-i", argv[k++] = files[r];
        argv[k++] = "-d";
        argv[k++] = (char *)dir;
        argv[k] = NULL;
        char log[4200];
        snprintf(log, sizeof log, "%s/fxt_tool.log", dir);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        pid_t pid;
        int rc = posix_spawnp(&pid, tool, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        int ws = 0;
        if (rc)
            st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: cannot run %s (%s); put StarPU's bin "
                                        "folder in PATH", tool, strerror(rc));
        else if (waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws))
            st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: starpu_fxt_tool failed (see %s)", log);
        else {
            char p[4200];
            snprintf(p, sizeof p, "%s/paje.trace", dir);
            if (access(p, R_OK))
                st = hyfi_fail(HYFI_ERR_IO, "hyfi_trace_merge: starpu_fxt_tool wrote no %s "
                                            "(see %s)", p, log);
        }
    }
    for (int r = 0; r < nranks; r++) free(files[r]);
    free(files);
    free(argv);
    return st;
}
