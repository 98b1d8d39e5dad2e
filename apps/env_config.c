/* env_config.c: the environment variables that hyfi-train (and the tests'
 * programs, tests/tu_env.h) map to the library's configuration. The library
 * reads no environment of its own for these (configuration as data); the
 * driver keeps the variables that scripts and the benches set, each naming
 * one field (docs/user-guide.md, "The C API"). */
#include "env_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "0" (or empty) is off; anything else on. unset: leave the field. */
static void flag(const char *name, bool *field, bool when_zero)
{
    const char *v = getenv(name);
    if (!v) return;
    const bool zero = !*v || !strcmp(v, "0");
    *field = zero ? when_zero : !when_zero;
}

void hyfi_env_plan_config(hyfi_plan_config *p)
{
    flag("HYFI_BLOCKED", &p->plain_layouts, true);       /* =0: plain layouts */
    flag("HYFI_BLOCKED_WEIGHTS", &p->plain_weights, true);
    flag("HYFI_FUSE_BN_RELU", &p->no_fuse_bn_relu, true);
    flag("HYFI_FUSE_CONV_ADD", &p->no_fuse_conv_add, true);
    flag("HYFI_GRAD_ALIAS", &p->no_grad_forwarding, true);
    flag("HYFI_SUBMIT_ALL", &p->submit_all, false);      /* =1: every rank everything */
    const char *ps = getenv("HYFI_PACK_STATS");           /* 1 packed, 0 one by one */
    if (ps && *ps) p->pack_stats = atoi(ps) ? 1 : -1;
    const char *v = getenv("HYFI_ONE_CPU_WORKER");
    if (v && *v) p->one_cpu_worker = atoi(v) ? 1 : -1;
    v = getenv("HYFI_DUMP_PROGRAMS");
    if (v && *v) p->dump_programs = v;
}

void hyfi_env_ctx_config(hyfi_ctx_config *c)
{
    const char *v = getenv("HYFI_CPU_THREADS");
    if (v && atoi(v) > 0) c->cpu_threads = atoi(v);
    v = getenv("HYFI_LEND_MIN_BYTES");
    if (v && *v) c->lend_min_bytes = atol(v) > 0 ? atol(v) : -1;
    bool cap_off = false;
    flag("HYFI_SUBMIT_CAP", &cap_off, true);
    c->no_submit_cap = c->no_submit_cap || cap_off;
    v = getenv("HYFI_PHYS_MEM_MB");
    if (v && atoi(v) > 0) c->phys_mem_mb = atoi(v);
    v = getenv("HYFI_CONV_ALGO");
    if (v && *v)
        c->conv_algo = !strcmp(v, "direct")     ? 1
                       : !strcmp(v, "winograd") ? 2
                       : !strcmp(v, "gemm")     ? 3
                                                : 0;
    v = getenv("HYFI_CONV_PLAIN");
    if (v && *v) c->conv_plain = !strcmp(v, "1") ? 1 : !strcmp(v, "0") ? -1 : 0;
    v = getenv("HYFI_BF16_CONV");
    if (v && *v) c->bf16_conv = !strcmp(v, "native") ? 1 : !strcmp(v, "staged") ? -1 : 0;
    flag("HYFI_DNNL_CACHE", &c->no_dnnl_cache, true);
    flag("HYFI_CUDNN_FIND", &c->no_cudnn_find, true);
    v = getenv("HYFI_SIM_ANALYTIC");
    if (v && *v) c->sim_analytic = v;
    v = getenv("HYFI_SIM_TASK_US");
    if (v && *v) { /* not a number: NAN, which hyfi_ctx_create refuses */
        char *end;
        c->sim_task_us = strtod(v, &end);
        if (*end) c->sim_task_us = NAN;
    }
}

bool hyfi_env_death_notice(void)
{
    bool on = true;
    flag("HYFI_DEATH_NOTICE", &on, false); /* =0: off */
    return on;
}
