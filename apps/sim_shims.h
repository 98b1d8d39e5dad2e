/* Simulation build only (docs/simulation.md): included ahead of hyfi-train's
 * own files (-include on their compile line), nothing in them changes.
 *
 * - Clock: clock_gettime reads StarPU's simulated clock, so step times and
 *   images/s are the simulated ones. (SMPI's own clock_gettime would not:
 *   hyfi-train runs in an actor StarPU creates, which SMPI does not count as
 *   a rank, so it returns the host's time.)
 * - Standard output: all simulated ranks are threads of one process with one
 *   stdout. hyfi-train silences the other ranks with freopen(stdout); here
 *   that redirects only the rank's own stream (hyfi_sim_out: a global of the
 *   program, of which SMPI loads one copy per rank), which printf, puts and
 *   stdout stand for. */
#ifndef HYFI_APPS_SIM_SHIMS_H
#define HYFI_APPS_SIM_SHIMS_H

#include <stdio.h>
#include <time.h>

extern FILE *hyfi_sim_out;
int hyfi_sim_clock_gettime(clockid_t clock, struct timespec *ts);
FILE *hyfi_sim_freopen(const char *path, const char *mode, FILE *stream);
int hyfi_sim_puts(const char *s);

#define clock_gettime(c, t) hyfi_sim_clock_gettime(c, t)
#define freopen(p, m, s) hyfi_sim_freopen(p, m, s)
#define printf(...) fprintf(hyfi_sim_out, __VA_ARGS__)
#define puts(s) hyfi_sim_puts(s)
#undef stdout
#define stdout hyfi_sim_out

#endif
