/* The engine on CUDA workers against the engine on CPU workers: the same
 * network (every op) trained for 3 steps in each place gives the same losses,
 * gradients and weights within the CUDA tolerance. Exits 77 (skipped) when
 * StarPU finds no CUDA worker. */
#include "hyfi.h"
#include "tu_env.h"
#include "testnet.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 3

typedef struct {
    float loss[STEPS];
    int np;
    size_t *count;
    float **w, **g;
    char **name;
} run_result;

static int run(hyfi_device dev, run_result *r)
{
    hyfi_ctx_config cfg = hyfi_ctx_config_default(); /* every GPU */
    cfg.device = dev;
    cfg.mpi = 0;
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    hyfi_status s = hyfi_ctx_create(&cfg, &ctx);
    if (s == HYFI_ERR_UNSUPPORTED && dev == HYFI_DEVICE_CUDA) {
        printf("skip: %s\n", hyfi_last_error());
        return 77;
    }
    if (s != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    testnet n;
    if (testnet_build(ctx, &n, 0)) return 1;
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f};
    if (hyfi_graph_compile(n.g, n.loss, &tc) != HYFI_OK) {
        printf("compile: %s\n", hyfi_last_error());
        return 1;
    }
    for (int i = 0; i < STEPS; i++) {
        testnet_batch(&n, 100 + (uint64_t)i);
        if (hyfi_train_step(n.g, &r->loss[i]) != HYFI_OK) {
            printf("step %d on %s: %s\n", i, dev == HYFI_DEVICE_CUDA ? "cuda" : "cpu",
                   hyfi_last_error());
            return 1;
        }
    }
    r->np = hyfi_param_count(n.g);
    r->count = calloc((size_t)r->np, sizeof *r->count);
    r->w = calloc((size_t)r->np, sizeof *r->w);
    r->g = calloc((size_t)r->np, sizeof *r->g);
    r->name = calloc((size_t)r->np, sizeof *r->name);
    for (int i = 0; i < r->np; i++) {
        hyfi_tensor *p = hyfi_param(n.g, i);
        r->count[i] = hyfi_tensor_numel(p);
        r->w[i] = tu_alloc(r->count[i]);
        r->g[i] = tu_alloc(r->count[i]);
        r->name[i] = strdup(hyfi_tensor_name(p));
        hyfi_tensor_read(n.g, p, r->w[i], r->count[i]);
        hyfi_grad_read(n.g, p, r->g[i], r->count[i]);
    }
    hyfi_graph_destroy(n.g);
    hyfi_ctx_destroy(ctx);
    return 0;
}

int main(void)
{
    run_result gpu = {0}, cpu = {0};
    int rc = run(HYFI_DEVICE_CUDA, &gpu);
    if (rc) return rc;
    rc = run(HYFI_DEVICE_CPU, &cpu);
    if (rc) return rc;
    tu_check(tu_compare("losses over 3 steps", gpu.loss, cpu.loss, STEPS, TU_TOL_CUDA_VS_CPU),
             "losses");
    for (int i = 0; i < cpu.np; i++) {
        char nm[200];
        snprintf(nm, sizeof nm, "grad %s after 3 steps", cpu.name[i]);
        tu_check(tu_compare(nm, gpu.g[i], cpu.g[i], cpu.count[i], TU_TOL_CUDA_VS_CPU), nm);
        snprintf(nm, sizeof nm, "weight %s after 3 steps", cpu.name[i]);
        tu_check(tu_compare(nm, gpu.w[i], cpu.w[i], cpu.count[i], TU_TOL_CUDA_VS_CPU), nm);
    }
    return tu_finish();
}
