/* Checked file I/O for the trace tooling: writers that keep the first error,
 * readers that tell a read error from the end of a file, and why a file
 * that some program wrote (StarPU's FxT, starpu_fxt_tool) stopped short: a
 * full file system or the file size limit. Errors name the file, the cause
 * and what to do. */
#include "tooling.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* ------------------------------------------------------------- writers */

hyfi_status hyfi_tt_open(tt_writer *w, const char *fn, const char *path)
{
    memset(w, 0, sizeof *w);
    w->fn = fn;
    snprintf(w->path, sizeof w->path, "%s", path);
    if (!(w->f = fopen(path, "w"))) return hyfi_tt_write_failed(fn, path, errno);
    w->own = 1;
    return HYFI_OK;
}

void hyfi_tt_wrap(tt_writer *w, FILE *f, const char *fn, const char *what)
{
    memset(w, 0, sizeof *w);
    w->fn = fn;
    snprintf(w->path, sizeof w->path, "%s", what);
    w->f = f;
}

void hyfi_tt_printf(tt_writer *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (vfprintf(w->f, fmt, ap) < 0 && !w->err) w->err = errno ? errno : EIO;
    va_end(ap);
}

void hyfi_tt_puts(tt_writer *w, const char *s)
{
    if (fputs(s, w->f) == EOF && !w->err) w->err = errno ? errno : EIO;
}

void hyfi_tt_putc(tt_writer *w, int c)
{
    if (fputc(c, w->f) == EOF && !w->err) w->err = errno ? errno : EIO;
}

hyfi_status hyfi_tt_close(tt_writer *w)
{
    int e = w->err;
    if (w->own) {
        if (fclose(w->f) && !e) e = errno ? errno : EIO;
    } else if (fflush(w->f) && !e) {
        e = errno ? errno : EIO;
    }
    w->f = NULL;
    if (!e) return HYFI_OK;
    if (w->own) return hyfi_tt_write_failed(w->fn, w->path, e);
    char cause[256];
    hyfi_tt_cause(NULL, e, cause, sizeof cause);
    return hyfi_fail(HYFI_ERR_IO, "%s: writing %s failed: %s", w->fn, w->path, cause);
}

/* ------------------------------------------------------------- causes */

/* The folder part of path ("." if none). */
static void folder_of(const char *path, char *dir, size_t len)
{
    snprintf(dir, len, "%s", path);
    char *s = strrchr(dir, '/');
    if (!s) snprintf(dir, len, ".");
    else if (s == dir) s[1] = 0;
    else *s = 0;
}

long long hyfi_tt_space_left(const char *path)
{
    char dir[4200];
    struct stat sb;
    if (stat(path, &sb) || !S_ISDIR(sb.st_mode)) folder_of(path, dir, sizeof dir);
    else snprintf(dir, sizeof dir, "%s", path);
    struct statvfs v;
    if (statvfs(dir, &v)) return -1;
    /* root may write into the blocks and inodes kept for it */
    const int root = geteuid() == 0;
    const unsigned long long blocks = root ? v.f_bfree : v.f_bavail;
    const unsigned long long inodes = root ? v.f_ffree : v.f_favail;
    if (v.f_files > 0 && inodes == 0) return 0;
    return (long long)(blocks * (unsigned long long)(v.f_frsize ? v.f_frsize : v.f_bsize));
}

long long hyfi_tt_size_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) || rl.rlim_cur == RLIM_INFINITY) return -1;
    return (long long)rl.rlim_cur;
}

int hyfi_tt_write_cause(const char *path)
{
    struct stat sb;
    const long long lim = hyfi_tt_size_limit();
    /* a write stops exactly at the limit: a file of that size was cut there */
    if (lim >= 0 && !stat(path, &sb) && S_ISREG(sb.st_mode) && (long long)sb.st_size == lim)
        return EFBIG;
    const long long left = hyfi_tt_space_left(path);
    if (left >= 0 && left < HYFI_TT_FULL_BYTES) return ENOSPC;
    return 0;
}

void hyfi_tt_cause(const char *path, int e, char *buf, size_t len)
{
    char l[64] = "";
    if (!path) {
        snprintf(buf, len, "%s", strerror(e));
    } else if (e == EFBIG) {
        const long long lim = hyfi_tt_size_limit();
        if (lim >= 0) snprintf(l, sizeof l, " of %lld bytes", lim);
        snprintf(buf, len, "%s: it reached the file size limit%s (ulimit -f); raise the limit "
                           "(ulimit -f unlimited)", strerror(e), l);
    } else if (e == EDQUOT) {
        snprintf(buf, len, "%s; free space within your quota or choose another folder", strerror(e));
    } else if (e == ENOSPC) {
        const long long left = hyfi_tt_space_left(path);
        if (left >= 0) snprintf(l, sizeof l, " (%lld kB left)", left / 1024);
        snprintf(buf, len, "%s: its file system is full%s; free space or choose another folder",
                 strerror(e), l);
    } else {
        snprintf(buf, len, "%s; choose a writable folder", strerror(e));
    }
}

hyfi_status hyfi_tt_write_failed(const char *fn, const char *path, int e)
{
    char cause[256];
    hyfi_tt_cause(path, e, cause, sizeof cause);
    return hyfi_fail(HYFI_ERR_IO, "%s: writing %s failed: %s", fn, path, cause);
}

hyfi_status hyfi_tt_read_failed(const char *fn, const char *path, int e)
{
    if (e == EACCES || e == EPERM)
        return hyfi_fail(HYFI_ERR_IO, "%s: cannot read %s: %s; make it readable", fn, path,
                         strerror(e));
    char dir[4200];
    folder_of(path, dir, sizeof dir);
    return hyfi_fail(HYFI_ERR_IO, "%s: reading %s failed: %s; merge the trace again (remove "
                                  "%s/paje.trace, then hyfi-trace %s)", fn, path, strerror(e), dir,
                     dir);
}
