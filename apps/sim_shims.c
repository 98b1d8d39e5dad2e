/* Simulation build only: see sim_shims.h (not included here: this file
 * uses the real functions). */
#include <starpu.h>
#include <stdio.h>
#include <time.h>

extern FILE *hyfi_sim_out;
int hyfi_sim_clock_gettime(clockid_t clock, struct timespec *ts);
FILE *hyfi_sim_freopen(const char *path, const char *mode, FILE *stream);
int hyfi_sim_puts(const char *s);

FILE *hyfi_sim_out;

__attribute__((constructor)) static void sim_out_init(void)
{
    hyfi_sim_out = stdout;
}

int hyfi_sim_clock_gettime(clockid_t clock, struct timespec *ts)
{
    (void)clock;
    const double us = starpu_timing_now();
    ts->tv_sec = (time_t)(us / 1e6);
    ts->tv_nsec = (long)((us - (double)ts->tv_sec * 1e6) * 1e3);
    return 0;
}

FILE *hyfi_sim_freopen(const char *path, const char *mode, FILE *stream)
{
    if (stream != hyfi_sim_out) return freopen(path, mode, stream);
    FILE *f = fopen(path, mode);
    if (!f) return NULL;
    if (hyfi_sim_out != stdout) fclose(hyfi_sim_out);
    hyfi_sim_out = f;
    return f;
}

int hyfi_sim_puts(const char *s)
{
    return fputs(s, hyfi_sim_out) < 0 || fputc('\n', hyfi_sim_out) == EOF ? EOF : 1;
}
