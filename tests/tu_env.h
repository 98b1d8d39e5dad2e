/* tu_env.h: the environment variables the test scripts set (as hyfi-train
 * reads them, apps/train_env.c), applied to a test's context configuration.
 * The library reads no environment of its own for these. */
#ifndef HYFI_TU_ENV_H
#define HYFI_TU_ENV_H

#include "hyfi.h"

#include <stdlib.h>
#include <string.h>

/* HYFI_CPU_THREADS (threads per CPU kernel), HYFI_LEND_MIN_BYTES (=0: no core
 * lending), HYFI_SUBMIT_CAP (=0: off), HYFI_PHYS_MEM_MB, HYFI_CONV_ALGO,
 * HYFI_BF16_CONV and HYFI_CUDNN_FIND (=0), where set. */
static inline void tu_ctx_env(hyfi_ctx_config *c)
{
    const char *v = getenv("HYFI_CPU_THREADS");
    if (v && atoi(v) > 0) c->cpu_threads = atoi(v);
    v = getenv("HYFI_LEND_MIN_BYTES");
    if (v && *v) c->lend_min_bytes = atol(v) > 0 ? atol(v) : -1;
    v = getenv("HYFI_SUBMIT_CAP");
    if (v && !strcmp(v, "0")) c->no_submit_cap = true;
    v = getenv("HYFI_PHYS_MEM_MB");
    if (v && atoi(v) > 0) c->phys_mem_mb = atoi(v);
    v = getenv("HYFI_CONV_ALGO");
    if (v && *v)
        c->conv_algo = !strcmp(v, "direct")     ? 1
                       : !strcmp(v, "winograd") ? 2
                       : !strcmp(v, "gemm")     ? 3
                                                : 0;
    v = getenv("HYFI_BF16_CONV");
    if (v && *v) c->bf16_conv = !strcmp(v, "native") ? 1 : !strcmp(v, "staged") ? -1 : 0;
    v = getenv("HYFI_CUDNN_FIND");
    if (v && !strcmp(v, "0")) c->no_cudnn_find = true;
}

#endif
