/* hyfi-train --dry-run: the graph's ops, shapes, parameters and FLOPs, without
 * compiling or training (train_run.h). */
#include "models.h"
#include "train_run.h"
#include "env_config.h"

#include <hyfi.h>

#include <stdio.h>
#include <string.h>

/* --dry-run: build the model on a CPU-only context (no data is read beyond
 * the geometry), print one line per op and the totals, exit 0 without
 * compiling. FLOPs and activation bytes are per image (the op's values for the
 * batch divided by B). Returns the exit status. */
int train_dry_run(const train_options *o, int C, int H, int W, int K)
{
    const int B = o->batch_size;
    char err[1024], what[200];
    hyfi_ctx *ctx = NULL;
    hyfi_graph *g = NULL;
    hyfi_status st;
    int rc = 1;
    hyfi_ctx_config cc = {.device = HYFI_DEVICE_CPU, .ncpus = 1, .mpi = 0,
                          .verbose = o->verbose};
    hyfi_env_ctx_config(&cc);
    if ((st = hyfi_ctx_create(&cc, &ctx)) != HYFI_OK) {
        lib_fail("starting the engine (hyfi_ctx_create)", st, NULL);
        return 1;
    }
    if ((st = hyfi_graph_create(ctx, o->seed, &g)) != HYFI_OK) {
        lib_fail("hyfi_graph_create", st, NULL);
        goto done;
    }
    hyfi_tensor *x = hyfi_input(g, "image", B, C, H, W);
    hyfi_tensor *y = hyfi_labels(g, "label", B);
    hyfi_tensor *logits = hyfi_model_build(g, &o->mc, x, err, sizeof err);
    if (!logits) {
        fprintf(stderr, "hyfi-train: %s\n", err);
        goto done;
    }
    hyfi_softmax_cross_entropy(g, "loss", logits, y);
    if ((st = hyfi_graph_status(g)) != HYFI_OK) {
        lib_fail("building the loss", st, g);
        goto done;
    }
    model_describe(&o->mc, what, sizeof what);
    printf("hyfi-train: dry run: %s on %dx%dx%d images, %d classes, batch %d\n", what, C, H, W,
           K, B);
    printf("%5s  %-40s %-22s %-22s %12s %16s  %s\n", "op", "name", "kind", "output (N,C,H,W)",
           "params", "FLOPs/image", "layer");
    const int nops = hyfi_graph_op_count(g);
    size_t params = 0, act = 0;
    double flops = 0;
    for (int i = 0; i < nops; i++) {
        hyfi_op_info oi;
        if ((st = hyfi_graph_op_info(g, i, &oi)) != HYFI_OK) {
            lib_fail("hyfi_graph_op_info", st, g);
            goto done;
        }
        char shape[64];
        snprintf(shape, sizeof shape, "(%d,%d,%d,%d)", oi.out_dims[0], oi.out_dims[1],
                 oi.out_dims[2], oi.out_dims[3]);
        printf("%5d  %-40s %-22s %-22s %12zu %16.0f  %d %s\n", i, oi.name, oi.kind, shape,
               oi.params, oi.flops / B, oi.layer, oi.layer_name);
        params += oi.params;
        flops += oi.flops / B;
        /* bf16 stores every activation in 2 bytes but the loss's
         * (docs/architecture.md, "Mixed precision") */
        const int wide = o->precision != HYFI_PRECISION_BF16 ||
                         !strcmp(oi.kind, "softmax_cross_entropy");
        act += wide ? oi.act_bytes : oi.act_bytes / 2;
    }
    const double act_img = (double)act / B;
    printf("ops: %d\n", nops);
    printf("layers: %d (the units of --balance)\n", hyfi_layer_count(g));
    printf("parameters: %zu (%.3f M)\n", params, (double)params / 1e6);
    printf("forward FLOPs per image: %.0f (%.3f GFLOPs; the backward costs about twice that)\n",
           flops, flops / 1e9);
    printf("activation memory per image: %.0f bytes (%.2f MiB; sum of the op outputs, %s; "
           "x %d images: %.1f MiB)\n",
           act_img, act_img / (1 << 20),
           o->precision == HYFI_PRECISION_BF16 ? "bf16 storage" : "float32", B,
           (double)act / (1 << 20));
    if (params != hyfi_param_numel(g))
        fprintf(stderr, "hyfi-train: warning: op parameters %zu differ from the graph's %zu\n",
                params, hyfi_param_numel(g));
    rc = 0;
done:
    if (g) hyfi_graph_destroy(g);
    hyfi_ctx_destroy(ctx);
    return rc;
}

