/* Plans with more than 12 replicas compile and train the single-place step.
 *
 *   test_replicas_many                  one process: the reference, then the plans
 *   test_replicas_many ref FILE         one process: writes the reference
 *   mpiexec -n N test_replicas_many check FILE
 *                                       the plans on N ranks against FILE
 *
 * ResNet v1-8 (CIFAR head) on 8x8 images, global batch 24, 3 steps of SGD (lr
 * 0.05, momentum 0.9, weight decay 5e-4) on seeded synthetic batches. The
 * reference: one place, 24 micro-batches of one image. The plans cut the same
 * 24 images into 24 replicas of one micro-batch each:
 *   - 24 data-parallel replicas, ring all-reduce (R x R chunks per bucket);
 *   - 24 data-parallel replicas, tree all-reduce;
 *   - GEMS MAST (2 mirrored copies, 2 stages) x 12 data-parallel groups.
 * 24 is not a power of two: the running-statistics combine (a tree of
 * pairwise merges, engine/reduce.c) and the tree all-reduce meet uneven
 * blocks. Compared after 3 steps: the losses, every parameter gradient of step
 * 3, every parameter and running statistic, within float32 round-off (the
 * replicas add their gradients and merge their running statistics in another
 * order than the single place): |got - want| <= 1e-5 + 1e-4 |want| (losses
 * 1e-6 + 1e-5 |want|); the running statistics (merged over the replicas
 * after every step) like the weights: without the merge, replica 0's would be
 * those of its one image per step, far outside that. Plans beyond HYFI_MAX_REPLICAS are refused with a message naming the
 * fix. */
#include "hyfi.h"
#include "tu_env.h"
#include "models.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 3
#define BATCH 24
#define IMAGE 8

typedef struct {
    float loss[STEPS];
    size_t ngrad, nweight, nstat; /* weight: parameters, then running statistics (nstat) */
    float *grad, *weight;
} run_result;

static model_config resnet8(void)
{
    model_config r = model_config_default();
    r.kind = MODEL_RESNET;
    r.depth = 8;
    r.resnet_version = 1;
    r.num_classes = 10;
    return r;
}

static void batch_data(int step, float *x, int32_t *y)
{
    uint64_t st = 2000 + (uint64_t)step;
    tu_fill(x, (size_t)BATCH * 3 * IMAGE * IMAGE, &st, -1.f, 1.f);
    for (int i = 0; i < BATCH; i++) y[i] = tu_randint(&st, 0, 9);
}

static void free_result(run_result *r)
{
    free(r->grad);
    free(r->weight);
    r->grad = r->weight = NULL;
}

/* Train `plan` for STEPS steps into res. Returns 0, or -1 (message printed). */
static int run_plan(hyfi_ctx *ctx, const hyfi_plan_config *plan, run_result *res)
{
    hyfi_graph *g;
    char err[512] = "";
    const model_config mc = resnet8();
    memset(res, 0, sizeof *res);
    hyfi_graph_create(ctx, 7, &g);
    hyfi_tensor *x = hyfi_input(g, "image", BATCH, 3, IMAGE, IMAGE);
    hyfi_tensor *y = hyfi_labels(g, "label", BATCH);
    hyfi_tensor *logits = hyfi_model_build(g, &mc, x, err, sizeof err);
    hyfi_tensor *loss = logits ? hyfi_softmax_cross_entropy(g, "loss", logits, y) : NULL;
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f};
    if (!loss || hyfi_graph_set_plan(g, plan) != HYFI_OK ||
        hyfi_graph_compile(g, loss, &tc) != HYFI_OK) {
        printf("build/compile failed: %s %s\n", err, hyfi_graph_error(g));
        hyfi_graph_destroy(g);
        return -1;
    }
    const size_t nx = (size_t)BATCH * 3 * IMAGE * IMAGE;
    float *xb = malloc(nx * sizeof *xb);
    int32_t *yb = malloc(BATCH * sizeof *yb);
    int rc = !xb || !yb ? -1 : 0;
    for (int s = 0; s < STEPS && !rc; s++) {
        batch_data(s, xb, yb);
        if (hyfi_set_input(g, x, xb, nx) != HYFI_OK ||
            hyfi_set_labels(g, y, yb, BATCH) != HYFI_OK ||
            hyfi_train_step(g, &res->loss[s]) != HYFI_OK) {
            printf("step %d failed: %s\n", s + 1, hyfi_last_error());
            rc = -1;
        }
    }
    free(xb);
    free(yb);
    res->ngrad = hyfi_param_numel(g);
    for (int i = 0; i < hyfi_graph_op_count(g); i++) {
        hyfi_op_info oi;
        hyfi_graph_op_info(g, i, &oi);
        if (strcmp(oi.kind, "batchnorm") == 0) res->nstat += 2 * (size_t)oi.out_dims[1];
    }
    res->nweight = res->ngrad + res->nstat;
    res->grad = malloc(res->ngrad * sizeof(float));
    res->weight = malloc(res->nweight * sizeof(float));
    if (!res->grad || !res->weight) rc = -1;
    size_t off = 0;
    for (int i = 0; i < hyfi_param_count(g) && !rc; i++) {
        hyfi_tensor *p = hyfi_param(g, i);
        const size_t n = hyfi_tensor_numel(p);
        if (hyfi_grad_read(g, p, res->grad + off, n) != HYFI_OK ||
            hyfi_tensor_read(g, p, res->weight + off, n) != HYFI_OK) {
            printf("reading %s failed: %s\n", hyfi_tensor_name(p), hyfi_last_error());
            rc = -1;
        }
        off += n;
    }
    for (int i = 0; i < hyfi_graph_op_count(g) && !rc; i++) {
        hyfi_op_info oi;
        hyfi_graph_op_info(g, i, &oi);
        if (strcmp(oi.kind, "batchnorm") != 0) continue;
        for (int k = 0; k < 2 && !rc; k++) {
            char nm[256];
            snprintf(nm, sizeof nm, "%s.%s", oi.name, k ? "running_var" : "running_mean");
            hyfi_tensor *t = hyfi_tensor_find(g, nm);
            if (!t || hyfi_tensor_read(g, t, res->weight + off, hyfi_tensor_numel(t)) != HYFI_OK) {
                printf("reading %s failed\n", nm);
                rc = -1;
                break;
            }
            off += hyfi_tensor_numel(t);
        }
    }
    hyfi_graph_destroy(g);
    if (rc) free_result(res);
    return rc;
}

static int save_ref(const char *path, const run_result *r)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = fwrite(r->loss, sizeof r->loss, 1, f) == 1 &&
                   fwrite(&r->ngrad, sizeof r->ngrad, 1, f) == 1 &&
                   fwrite(&r->nweight, sizeof r->nweight, 1, f) == 1 &&
                   fwrite(&r->nstat, sizeof r->nstat, 1, f) == 1 &&
                   fwrite(r->grad, sizeof(float), r->ngrad, f) == r->ngrad &&
                   fwrite(r->weight, sizeof(float), r->nweight, f) == r->nweight;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int load_ref(const char *path, run_result *r)
{
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int ok = fread(r->loss, sizeof r->loss, 1, f) == 1 &&
             fread(&r->ngrad, sizeof r->ngrad, 1, f) == 1 &&
             fread(&r->nweight, sizeof r->nweight, 1, f) == 1 &&
             fread(&r->nstat, sizeof r->nstat, 1, f) == 1 && r->ngrad < (1u << 26) &&
             r->nweight < (1u << 26);
    if (ok) {
        r->grad = malloc(r->ngrad * sizeof(float));
        r->weight = malloc(r->nweight * sizeof(float));
        ok = r->grad && r->weight && fread(r->grad, sizeof(float), r->ngrad, f) == r->ngrad &&
             fread(r->weight, sizeof(float), r->nweight, f) == r->nweight;
    }
    fclose(f);
    if (!ok) free_result(r);
    return ok ? 0 : -1;
}

static const struct {
    const char *name;
    hyfi_plan_config plan;
} PLANS[] = {
    {"24 data-parallel replicas, ring",
     {.data_parallel = 24, .allreduce = HYFI_ALLREDUCE_RING}},
    {"24 data-parallel replicas, tree",
     {.data_parallel = 24, .allreduce = HYFI_ALLREDUCE_TREE}},
    {"GEMS MAST x 12 data-parallel (24 replicas, 2 stages)",
     {.stages = 2, .gems = HYFI_GEMS_MAST, .data_parallel = 12}},
    /* the running statistics merged one by one, not packed (engine/reduce.c):
     * the same floats as the packed plan above it (PACKED_PAIR) */
    {"24 data-parallel replicas, tree, statistics one by one",
     {.data_parallel = 24, .allreduce = HYFI_ALLREDUCE_TREE, .pack_stats = -1}},
};
/* plans that must agree bitwise: packed (the default at 24 replicas) and not */
#define PACKED_PAIR_A 1
#define PACKED_PAIR_B 3
#define NPLANS ((int)(sizeof PLANS / sizeof *PLANS))

static int check_plans(hyfi_ctx *ctx, const run_result *want)
{
    const int rank = hyfi_ctx_rank(ctx), R = hyfi_ctx_nranks(ctx);
    int failed = 0;
    run_result keep[2];
    memset(keep, 0, sizeof keep);
    for (int k = 0; k < NPLANS; k++) {
        char what[160];
        snprintf(what, sizeof what, "%s on %d rank%s: the single-place step", PLANS[k].name, R,
                 R > 1 ? "s" : "");
        run_result got;
        if (run_plan(ctx, &PLANS[k].plan, &got)) {
            tu_check(1, what);
            failed++;
            continue;
        }
        double wl = 0, wg = 0, ww = 0, ws = 0;
        int bad = got.ngrad != want->ngrad || got.nweight != want->nweight;
        if (!bad) {
            const size_t np = got.ngrad;
            bad += tu_count_outside("loss", got.loss, want->loss, STEPS, 1e-6, 1e-5, &wl);
            bad += tu_count_outside("grad", got.grad, want->grad, np, 1e-5, 1e-4, &wg);
            bad += tu_count_outside("weight", got.weight, want->weight, np, 1e-5, 1e-4, &ww);
            bad += tu_count_outside("running", got.weight + np, want->weight + np, got.nstat,
                                    1e-5, 1e-4, &ws);
        }
        if (rank == 0)
            printf("%s: losses %.6f .. %.6f (reference %.6f .. %.6f); worst |diff| loss %.2g, "
                   "grad %.2g, weight %.2g, running statistics %.2g%s\n",
                   what, got.loss[0], got.loss[STEPS - 1], want->loss[0], want->loss[STEPS - 1],
                   wl, wg, ww, ws, bad ? " MISMATCH" : "");
        tu_check(bad, what);
        failed += bad != 0;
        if (k == PACKED_PAIR_A || k == PACKED_PAIR_B) keep[k == PACKED_PAIR_B] = got;
        else free_result(&got);
    }
    /* packed and one-by-one running statistics: bit for bit */
    if (keep[0].weight && keep[1].weight) {
        const run_result *a = &keep[0], *b = &keep[1];
        const int same = a->ngrad == b->ngrad && a->nweight == b->nweight &&
                         !memcmp(a->loss, b->loss, sizeof a->loss) &&
                         !memcmp(a->grad, b->grad, a->ngrad * sizeof(float)) &&
                         !memcmp(a->weight, b->weight, a->nweight * sizeof(float));
        if (rank == 0)
            printf("running statistics packed and one by one (24 replicas, tree): %s\n",
                   same ? "bitwise equal" : "DIFFERENT");
        tu_check(!same, "running statistics packed and one by one: bitwise equal");
        failed += !same;
    }
    free_result(&keep[0]);
    free_result(&keep[1]);
    return failed;
}

/* A branch off the loss's path (a convolution and a batch norm whose output
 * the loss does not read) under replicas: its parameters receive no gradient,
 * so no bucket holds them (engine/buckets.c decides it from the graph before
 * the lowerings, and the compile checks it against the gradients the
 * backward wrote), and SGD leaves them alone, as PyTorch does; the trained
 * parameters move. */
static void check_dead_branch(hyfi_ctx *ctx, const hyfi_plan_config *plan, const char *what)
{
    hyfi_graph *g;
    hyfi_graph_create(ctx, 7, &g);
    hyfi_tensor *x = hyfi_input(g, "image", 8, 3, IMAGE, IMAGE);
    hyfi_tensor *y = hyfi_labels(g, "label", 8);
    const hyfi_conv2d_params cp = {.out_channels = 4, .kernel_h = 3, .kernel_w = 3,
                                   .pad_h = 1, .pad_w = 1, .bias = true};
    hyfi_tensor *dead = hyfi_conv2d(g, "dead", x, cp);
    hyfi_batchnorm(g, "dead_bn", dead, (hyfi_batchnorm_params){0});
    hyfi_tensor *h = hyfi_relu(g, "relu", hyfi_conv2d(g, "conv", x, cp));
    h = hyfi_fc(g, "fc", hyfi_global_avgpool(g, "gap", h),
                (hyfi_fc_params){.out_features = 10, .bias = true});
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", h, y);
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f};
    int bad = hyfi_graph_status(g) != HYFI_OK || hyfi_graph_set_plan(g, plan) != HYFI_OK ||
              hyfi_graph_compile(g, loss, &tc) != HYFI_OK;
    if (bad) printf("%s: %s\n", what, hyfi_graph_error(g));
    float before[2][108], after[2][108], xb[8 * 3 * IMAGE * IMAGE], l = 0;
    int32_t yb[8];
    uint64_t st = 99;
    tu_fill(xb, sizeof xb / sizeof *xb, &st, -1.f, 1.f);
    for (int i = 0; i < 8; i++) yb[i] = tu_randint(&st, 0, 9);
    hyfi_tensor *w[2] = {NULL, NULL};
    for (int i = 0; i < hyfi_param_count(g) && !bad; i++) {
        const char *n = hyfi_tensor_name(hyfi_param(g, i));
        if (!strcmp(n, "dead.weight")) w[0] = hyfi_param(g, i);
        if (!strcmp(n, "conv.weight")) w[1] = hyfi_param(g, i);
    }
    bad = bad || !w[0] || !w[1];
    for (int k = 0; k < 2 && !bad; k++) bad = hyfi_tensor_read(g, w[k], before[k], 108) != HYFI_OK;
    bad = bad || hyfi_set_input(g, x, xb, sizeof xb / sizeof *xb) != HYFI_OK ||
          hyfi_set_labels(g, y, yb, 8) != HYFI_OK || hyfi_train_step(g, &l) != HYFI_OK;
    for (int k = 0; k < 2 && !bad; k++) bad = hyfi_tensor_read(g, w[k], after[k], 108) != HYFI_OK;
    const int dead_same = !bad && !memcmp(before[0], after[0], sizeof before[0]);
    const int live_moved = !bad && memcmp(before[1], after[1], sizeof before[1]) != 0;
    if (hyfi_ctx_rank(ctx) == 0)
        printf("%s, a branch off the loss's path: %s; its weights %s, the trained ones %s\n",
               what, bad ? hyfi_last_error() : "compiled and trained",
               dead_same ? "unchanged" : "CHANGED", live_moved ? "moved" : "DID NOT MOVE");
    tu_check(bad || !dead_same || !live_moved, what);
    hyfi_graph_destroy(g);
}

/* Too many replicas: refused at hyfi_graph_set_plan with the fix. */
static void check_refused(hyfi_ctx *ctx)
{
    hyfi_graph *g;
    hyfi_graph_create(ctx, 7, &g);
    const hyfi_status st = hyfi_graph_set_plan(g, &(hyfi_plan_config){.data_parallel = 5000});
    const char *msg = hyfi_graph_error(g);
    printf("5000 replicas: %s\n", msg ? msg : "(no message)");
    tu_check(st != HYFI_ERR_ARG || !msg || !strstr(msg, "at most 4096"),
             "5000 replicas refused, naming the bound");
    hyfi_graph_destroy(g);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "all";
    const int mpi = !strcmp(mode, "check");
    if (strcmp(mode, "all") && (argc < 3 || (strcmp(mode, "ref") && !mpi))) {
        fprintf(stderr, "usage: %s [ref FILE | check FILE]\n", argv[0]);
        return 2;
    }
    hyfi_ctx_config cfg = {.device = HYFI_DEVICE_CPU, .mpi = mpi};
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    run_result ref;
    int rc = 0;
    if (mpi) {
        if (load_ref(argv[2], &ref)) {
            printf("cannot read the reference %s (run 'ref' first)\n", argv[2]);
            tu_check(1, "reference");
            rc = 1;
        }
    } else if (run_plan(ctx, &(hyfi_plan_config){.parts = BATCH}, &ref)) {
        tu_check(1, "single-place reference");
        rc = 1;
    } else {
        if (!strcmp(mode, "ref") && save_ref(argv[2], &ref)) {
            printf("cannot write %s\n", argv[2]);
            tu_check(1, "reference written");
        }
    }
    if (!rc && strcmp(mode, "ref")) {
        check_plans(ctx, &ref);
        if (hyfi_ctx_rank(ctx) == 0 && !mpi) check_refused(ctx);
        check_dead_branch(ctx, &(hyfi_plan_config){.data_parallel = 4}, "4 replicas");
        check_dead_branch(ctx, &(hyfi_plan_config){.stages = 2, .gems = HYFI_GEMS_MAST,
                                                   .data_parallel = 2},
                          "GEMS x 2 replicas, 2 stages");
    }
    if (!rc) free_result(&ref);
    hyfi_ctx_destroy(ctx);
    return tu_finish();
}
