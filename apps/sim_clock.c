/* Simulation build only (docs/simulation.md): hyfi-train's clock_gettime,
 * renamed to this function on its compile line, reads StarPU's simulated
 * clock, so that step times and images/s are the simulated ones. (SMPI's own
 * clock_gettime does not: hyfi-train runs in an actor StarPU creates, which
 * SMPI does not count as a rank, so it returns the host's time.) */
#include <starpu.h>
#include <time.h>

int hyfi_sim_clock_gettime(clockid_t clock, struct timespec *ts);

int hyfi_sim_clock_gettime(clockid_t clock, struct timespec *ts)
{
    (void)clock;
    const double us = starpu_timing_now();
    ts->tv_sec = (time_t)(us / 1e6);
    ts->tv_nsec = (long)((us - (double)ts->tv_sec * 1e6) * 1e3);
    return 0;
}
