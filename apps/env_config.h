/* env_config.h: hyfi-train's environment variables as the library's
 * configuration (env_config.c); the tests' programs use it too. */
#ifndef HYFI_ENV_CONFIG_H
#define HYFI_ENV_CONFIG_H

#include <hyfi.h>

#include <stdbool.h>

/* The plan's graph-rewrite switches from HYFI_BLOCKED, HYFI_BLOCKED_WEIGHTS,
 * HYFI_FUSE_BN_RELU, HYFI_FUSE_CONV_ADD, HYFI_GRAD_ALIAS (=0: off),
 * HYFI_SUBMIT_ALL (=1: on), HYFI_ONE_CPU_WORKER and HYFI_DUMP_PROGRAMS, where
 * set. */
void hyfi_env_plan_config(hyfi_plan_config *p);
/* The context's: HYFI_CPU_THREADS, HYFI_LEND_MIN_BYTES (=0: no lending),
 * HYFI_SUBMIT_CAP (=0: off), HYFI_PHYS_MEM_MB, and the kernels'
 * HYFI_CONV_ALGO, HYFI_CONV_PLAIN, HYFI_BF16_CONV, HYFI_DNNL_CACHE,
 * HYFI_CUDNN_FIND, and the simulation's HYFI_SIM_ANALYTIC (sim_analytic) and
 * HYFI_SIM_TASK_US (sim_task_us; not a number: NAN, which hyfi_ctx_create
 * refuses), where set. */
void hyfi_env_ctx_config(hyfi_ctx_config *c);
/* The death notice (hyfi_launch_config.death_notice): on, unless
 * HYFI_DEATH_NOTICE=0. */
bool hyfi_env_death_notice(void);

#endif
