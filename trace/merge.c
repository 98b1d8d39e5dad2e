/* hyfi_trace_merge: StarPU's starpu_fxt_tool merges the ranks' raw FxT files
 * (dir/raw/prof_file_<user>_<rank>) into dir: paje.trace, tasks.rec,
 * comms.rec, data.rec, dag.dot, trace.html, ... (its output in
 * dir/fxt_tool.log).
 *
 * Neither StarPU's FxT (writing the raw files at the end of the run) nor
 * starpu_fxt_tool reports a failed write: a file cut short merges into a
 * short trace without a word. So before and after the tool runs, a file at
 * exactly the file size limit or a full file system is taken for the failed
 * write it means (trace/fileio.c), and reported as such. */
#include "tooling.h"

#include "hyfi_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *const FN = "hyfi_trace_merge";

static hyfi_status nomem(void) { return hyfi_fail(HYFI_ERR_NOMEM, "%s: out of memory", FN); }

/* What hyfi noted while the run compiled could not be written. */
static hyfi_status check_notes(const char *dir)
{
    const char *file = NULL;
    const int e = hyfi_trace_note_error(dir, &file);
    if (!e) return HYFI_OK;
    char path[4200], cause[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    hyfi_tt_cause(path, e, cause, sizeof cause);
    return hyfi_fail(HYFI_ERR_IO, "%s: writing %s failed during the run: %s, then record the run "
                                  "again", FN, path, cause);
}

/* files[r]: dir/raw/prof_file_<user>_<r>, for every rank. */
static hyfi_status find_raw_files(const char *dir, const char *raw, int nranks, char **files)
{
    DIR *d = opendir(raw);
    if (!d) {
        if (errno == ENOENT)
            return hyfi_fail(HYFI_ERR_IO, "%s: %s: %s (was the run traced into %s?)", FN, raw,
                             strerror(errno), dir);
        return hyfi_tt_read_failed(FN, raw, errno);
    }
    hyfi_status st = HYFI_OK;
    struct dirent *e;
    while (st == HYFI_OK && (errno = 0, e = readdir(d))) {
        if (strncmp(e->d_name, "prof_file_", 10)) continue;
        const char *us = strrchr(e->d_name, '_');
        char *end;
        long r = strtol(us + 1, &end, 10);
        if (*end || r < 0 || r >= nranks || files[r]) continue;
        size_t n = strlen(raw) + strlen(e->d_name) + 2;
        if (!(files[r] = malloc(n))) st = nomem();
        else snprintf(files[r], n, "%s/%s", raw, e->d_name);
    }
    if (st == HYFI_OK && errno) st = hyfi_tt_read_failed(FN, raw, errno);
    closedir(d);
    for (int r = 0; r < nranks && st == HYFI_OK; r++)
        if (!files[r]) {
            char cause[256] = "the run had fewer ranks?";
            if (hyfi_tt_write_cause(raw) == ENOSPC) hyfi_tt_cause(raw, ENOSPC, cause, sizeof cause);
            st = hyfi_fail(HYFI_ERR_IO, "%s: no trace file of rank %d in %s (%s)", FN, r, raw, cause);
        }
    return st;
}

/* The raw files StarPU wrote at the end of the run, cut short? */
static hyfi_status check_raw_files(const char *dir, char **files, int nranks)
{
    for (int r = 0; r < nranks; r++)
        if (hyfi_tt_write_cause(files[r]) == EFBIG) {
            char cause[256];
            hyfi_tt_cause(files[r], EFBIG, cause, sizeof cause);
            return hyfi_fail(HYFI_ERR_IO, "%s: writing %s failed at the end of the run: %s, then "
                                          "record the run again", FN, files[r], cause);
        }
    if (hyfi_tt_write_cause(dir) == ENOSPC)
        return hyfi_fail(HYFI_ERR_IO, "%s: the file system of %s is full (%lld kB left: %s): the "
                                      "ranks' trace files in %s/raw may be cut short and the merge "
                                      "cannot write; free space or choose another folder, and "
                                      "record the run again", FN, dir,
                         hyfi_tt_space_left(dir) / 1024, strerror(ENOSPC), dir);
    return HYFI_OK;
}

/* After starpu_fxt_tool: a file of dir at the size limit, or dir's file
 * system full, means one of its writes failed. */
static hyfi_status check_outputs(const char *dir)
{
    static const char *const first[] = {"paje.trace", "tasks.rec", "comms.rec"};
    char path[4200];
    for (size_t i = 0; i < sizeof first / sizeof *first; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, first[i]);
        if (hyfi_tt_write_cause(path) == EFBIG) return hyfi_tt_write_failed(FN, path, EFBIG);
    }
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && hyfi_tt_write_cause(path) == EFBIG) {
            closedir(d);
            return hyfi_tt_write_failed(FN, path, EFBIG);
        }
    }
    if (d) closedir(d);
    if (hyfi_tt_write_cause(dir) == ENOSPC) {
        snprintf(path, sizeof path, "%s/paje.trace, tasks.rec, ...", dir);
        return hyfi_tt_write_failed(FN, path, ENOSPC);
    }
    return HYFI_OK;
}

/* How starpu_fxt_tool ended (ws: waitpid's status). */
static hyfi_status tool_status(const char *dir, int ws, const char *log)
{
    if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGXFSZ) {
        const hyfi_status st = check_outputs(dir);
        if (st != HYFI_OK) return st;
        char p[4200];
        snprintf(p, sizeof p, "%s/paje.trace, tasks.rec, ...", dir);
        return hyfi_tt_write_failed(FN, p, EFBIG);
    }
    if (WIFSIGNALED(ws))
        return hyfi_fail(HYFI_ERR_IO, "%s: starpu_fxt_tool was killed by signal %d (%s; see %s)", FN,
                         WTERMSIG(ws), strsignal(WTERMSIG(ws)), log);
    const hyfi_status st = check_outputs(dir);
    if (st != HYFI_OK) return st;
    if (WEXITSTATUS(ws))
        return hyfi_fail(HYFI_ERR_IO, "%s: starpu_fxt_tool failed (exit status %d; see %s)", FN,
                         WEXITSTATUS(ws), log);
    static const char *const need[] = {"paje.trace", "tasks.rec"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, need[i]);
        if (access(p, R_OK))
            return hyfi_fail(HYFI_ERR_IO, "%s: starpu_fxt_tool wrote no %s (see %s)", FN, p, log);
    }
    return HYFI_OK;
}

/* starpu_fxt_tool -i <file> ... -d dir, its output in dir/fxt_tool.log. */
static hyfi_status run_fxt_tool(const char *dir, char **files, int nranks)
{
    char tool[4200], log[4200];
    snprintf(tool, sizeof tool, "%s/starpu_fxt_tool", HYFI_STARPU_BINDIR);
    if (access(tool, X_OK)) snprintf(tool, sizeof tool, "starpu_fxt_tool");
    snprintf(log, sizeof log, "%s/fxt_tool.log", dir);
    char **argv = calloc((size_t)(2 * nranks + 4), sizeof *argv);
    if (!argv) return nomem();
    int k = 0;
    argv[k++] = tool;
    for (int r = 0; r < nranks; r++) argv[k++] = "-i", argv[k++] = files[r];
    argv[k++] = "-d";
    argv[k++] = (char *)dir;
    argv[k] = NULL;
    const int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(argv);
        return hyfi_tt_write_failed(FN, log, errno);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, 1);
    posix_spawn_file_actions_adddup2(&fa, fd, 2);
    pid_t pid;
    const int rc = posix_spawnp(&pid, tool, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd);
    free(argv);
    if (rc)
        return hyfi_fail(HYFI_ERR_IO, "%s: cannot run %s (%s); put StarPU's bin folder in PATH", FN,
                         tool, strerror(rc));
    int ws = 0;
    if (waitpid(pid, &ws, 0) < 0)
        return hyfi_fail(HYFI_ERR_IO, "%s: waiting for starpu_fxt_tool: %s", FN, strerror(errno));
    return tool_status(dir, ws, log);
}

hyfi_status hyfi_trace_merge(const char *dir, int nranks)
{
    if (!dir || nranks < 1)
        return hyfi_fail(HYFI_ERR_ARG, "%s: no folder or %d ranks", FN, nranks);
    hyfi_status st = check_notes(dir);
    if (st != HYFI_OK) return st;
    char raw[4096];
    snprintf(raw, sizeof raw, "%s/raw", dir);
    char **files = calloc((size_t)nranks, sizeof *files);
    if (!files) return nomem();
    st = find_raw_files(dir, raw, nranks, files);
    if (st == HYFI_OK) st = check_raw_files(dir, files, nranks);
    if (st == HYFI_OK && (st = run_fxt_tool(dir, files, nranks)) != HYFI_OK) {
        /* no paje.trace: hyfi-trace DIR merges again */
        char p[4200];
        snprintf(p, sizeof p, "%s/paje.trace", dir);
        unlink(p);
    }
    for (int r = 0; r < nranks; r++) free(files[r]);
    free(files);
    return st;
}
