/* hyfi-train's checkpoint folder (naming, finding the newest, pruning) and its
 * stop signals; see checkpoints.h. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoints.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "step-"
#define SUFFIX ".safetensors"

void ckpt_path(const char *dir, long long step, char *out, size_t len)
{
    snprintf(out, len, "%s/" PREFIX "%08lld" SUFFIX, dir, step);
}

/* The steps of a checkpoint's name, or -1 when the name is not one. */
static long long name_step(const char *name)
{
    const size_t pl = strlen(PREFIX), sl = strlen(SUFFIX), n = strlen(name);
    if (n <= pl + sl || strncmp(name, PREFIX, pl) || strcmp(name + n - sl, SUFFIX)) return -1;
    long long v = 0;
    for (size_t i = pl; i < n - sl; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (1LL << 56)) return -1;
        v = 10 * v + (name[i] - '0');
    }
    return v;
}

int ckpt_prepare_dir(const char *dir, char *err, size_t errlen)
{
    char *p = strdup(dir);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* mkdir -p */
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c) continue;
        const char keep = *c;
        *c = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "--checkpoint-dir %s: cannot create %s: %s", dir, p,
                     strerror(errno));
            free(p);
            return -1;
        }
        *c = keep;
        if (!keep) break;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--checkpoint-dir %s is not a folder", dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "--checkpoint-dir %s: cannot create files in it: %s", dir,
                 strerror(errno));
        return -1;
    }
    return 0;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Newest first. */
static int cmp_ll_desc(const void *a, const void *b) { return cmp_ll(b, a); }

/* The steps of dir's checkpoints, newest first (*steps malloc'd, *n of them);
 * -1 when dir cannot be listed. */
static int list_steps(const char *dir, long long **steps, size_t *n)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const long long s = name_step(e->d_name);
        if (s < 0) continue;
        if (*n == cap) {
            long long *ns = realloc(*steps, (cap = cap ? 2 * cap : 16) * sizeof *ns);
            if (!ns) break;
            *steps = ns;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n) qsort(*steps, *n, sizeof **steps, cmp_ll_desc);
    return 0;
}

int ckpt_candidates(const char *path, char ***out, int *count, char *err, size_t errlen)
{
    *out = NULL;
    *count = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "--resume %s: %s; give a checkpoint folder or file", path,
                 strerror(errno));
        return -1;
    }
    long long *steps = NULL;
    size_t n = 0;
    if (S_ISDIR(st.st_mode)) {
        if (list_steps(path, &steps, &n)) {
            snprintf(err, errlen, "--resume %s: cannot list it: %s", path, strerror(errno));
            return -1;
        }
        if (!n) {
            free(steps);
            snprintf(err, errlen, "--resume %s: no checkpoint (" PREFIX "N" SUFFIX ") in it; "
                                  "start without --resume, or point it at the folder a run "
                                  "wrote with --checkpoint-dir", path);
            return -1;
        }
    }
    const size_t files = n ? n : 1;
    char **list = calloc(files, sizeof *list);
    for (size_t i = 0; list && i < files; i++) {
        char p[4096];
        if (n) ckpt_path(path, steps[i], p, sizeof p);
        else snprintf(p, sizeof p, "%s", path);
        if (!(list[i] = strdup(p))) {
            ckpt_candidates_free(list, (int)i);
            list = NULL;
        }
    }
    free(steps);
    if (!list) {
        snprintf(err, errlen, "--resume %s: out of memory", path);
        return -1;
    }
    *out = list;
    *count = (int)files;
    return 0;
}

void ckpt_candidates_free(char **list, int n)
{
    for (int i = 0; list && i < n; i++) free(list[i]);
    free(list);
}

long long ckpt_name_step(const char *path)
{
    const char *base = strrchr(path, '/');
    return name_step(base ? base + 1 : path);
}

int ckpt_prune(const char *dir, int keep)
{
    if (keep <= 0) return 0;
    long long *steps = NULL;
    size_t n = 0;
    if (list_steps(dir, &steps, &n)) return 0;
    int removed = 0;
    for (size_t i = (size_t)keep; i < n; i++) { /* newest first: the oldest beyond keep */
        char p[4096];
        ckpt_path(dir, steps[i], p, sizeof p);
        removed += unlink(p) == 0;
    }
    free(steps);
    return removed;
}

/* ------------------------------------------------------------------ signals */
static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
    if (g_stop) {
        static const char msg[] = "hyfi-train: second signal: exiting now, without a "
                                  "checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
    g_stop = sig;
}

void stop_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int stop_requested(void) { return (int)g_stop; }
