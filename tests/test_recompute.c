/* Re-materialisation and the memory limit at the API level, in one process:
 *
 *   - an unknown recompute mode is refused by hyfi_graph_set_plan;
 *   - a small network with layers (stem, a residual block, a pool/concat block,
 *     the head), trained 2 steps with recompute stage and layer under plans of
 *     one place, 2 stages x 2 micro-batches (1F1B) and 2 x 4 (GPipe,
 *     deterministic): losses, every gradient and weight bitwise those without
 *     recompute; the estimate of activations lower with recompute where it can
 *     be (layer on one place; stage with 4 micro-batches in flight);
 *   - after a layer-recompute step an activation that its layer alone read is
 *     released (reading it is refused), one that leaves its layer is readable
 *     and equal; eval-mode inference afterwards gives the same logits;
 *   - hyfi_ctx_config.mem_limit_mb: a plan above the limit is refused naming
 *     --recompute and --swap-dir; with swap_dir it compiles and trains to the
 *     same losses as without a limit; the environment is left as it was; a
 *     swap size under StarPU's minimum is refused.
 * One thread per kernel and no core lending (HYFI_CPU_THREADS=1,
 * HYFI_LEND_MIN_BYTES=0, set here for tu_ctx_env), so that round-off does not depend on timing
 * and runs compare bit for bit. */
#include "hyfi.h"
#include "tu_env.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define B 8
#define HW 16
#define CLASSES 5

typedef struct {
    hyfi_graph *g;
    hyfi_tensor *x, *y, *loss, *logits, *stem, *inner;
} net;

static int build(hyfi_ctx *ctx, net *n, int batch, int hw)
{
    hyfi_graph *g;
    if (hyfi_graph_create(ctx, 11, &g) != HYFI_OK) return -1;
    n->g = g;
    const hyfi_conv2d_params c3 = {.out_channels = 8, .kernel_h = 3, .kernel_w = 3, .pad_h = 1,
                                   .pad_w = 1};
    n->x = hyfi_input(g, "image", batch, 3, hw, hw);
    n->y = hyfi_labels(g, "label", batch);
    hyfi_layer_begin(g, "stem");
    hyfi_tensor *h = hyfi_conv2d(g, "conv0", n->x, c3);
    h = hyfi_batchnorm(g, "bn0", h, (hyfi_batchnorm_params){0});
    n->stem = h = hyfi_relu(g, "relu0", h);
    hyfi_layer_begin(g, "block1");
    hyfi_tensor *r = hyfi_conv2d(g, "b1.conv1", h, c3);
    r = hyfi_batchnorm(g, "b1.bn1", r, (hyfi_batchnorm_params){0});
    n->inner = r = hyfi_relu(g, "b1.relu1", r);
    r = hyfi_conv2d(g, "b1.conv2", r, c3);
    r = hyfi_batchnorm(g, "b1.bn2", r, (hyfi_batchnorm_params){0});
    h = hyfi_relu(g, "b1.relu", hyfi_add(g, "b1.add", r, h));
    hyfi_layer_begin(g, "block2");
    const hyfi_pool_params pool = {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
    hyfi_tensor *p = hyfi_maxpool(g, "b2.pool", h, pool);
    hyfi_tensor *q = hyfi_conv2d(g, "b2.conv", p, c3);
    q = hyfi_relu(g, "b2.relu", hyfi_batchnorm(g, "b2.bn", q, (hyfi_batchnorm_params){0}));
    hyfi_tensor *cat[2] = {p, q};
    h = hyfi_concat(g, "b2.cat", cat, 2);
    hyfi_layer_begin(g, "head");
    n->logits = hyfi_fc(g, "fc", hyfi_global_avgpool(g, "gap", h),
                        (hyfi_fc_params){.out_features = CLASSES, .bias = true});
    n->loss = hyfi_softmax_cross_entropy(g, "loss", n->logits, n->y);
    if (hyfi_graph_status(g) != HYFI_OK) {
        printf("build: %s\n", hyfi_graph_error(g));
        return -1;
    }
    return 0;
}

static void batch(const net *n, int step, float *x, int32_t *y, int batch, int hw)
{
    uint64_t st = 100 + (uint64_t)step;
    tu_fill(x, (size_t)batch * 3 * hw * hw, &st, -1.f, 1.f);
    for (int i = 0; i < batch; i++) y[i] = tu_randint(&st, 0, CLASSES - 1);
    (void)n;
}

typedef struct {
    float loss[2];
    float *grad, *weight, logits[B * CLASSES], stem[B * 8 * HW * HW];
    size_t ngrad;
    int inner_read;    /* status of reading the inner activation after the steps */
    size_t act_bytes;  /* stage 0's estimate */
} result;

static int train(hyfi_ctx *ctx, const hyfi_plan_config *plan, int bsz, int hw, int steps,
                 result *r, char *err, size_t elen)
{
    net n;
    memset(r, 0, sizeof *r);
    if (build(ctx, &n, bsz, hw)) return -1;
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f};
    hyfi_status st;
    if ((st = hyfi_graph_set_plan(n.g, plan)) != HYFI_OK ||
        (st = hyfi_graph_compile(n.g, n.loss, &tc)) != HYFI_OK) {
        snprintf(err, elen, "%s", hyfi_graph_error(n.g));
        hyfi_graph_destroy(n.g);
        return -2;
    }
    hyfi_stage_info si;
    hyfi_plan_stage(n.g, 0, &si);
    r->act_bytes = si.act_bytes;
    float *x = tu_alloc((size_t)bsz * 3 * hw * hw);
    int32_t *y = malloc((size_t)bsz * sizeof *y);
    int rc = 0;
    for (int s = 0; s < steps && !rc; s++) {
        batch(&n, s, x, y, bsz, hw);
        if (hyfi_set_input(n.g, n.x, x, (size_t)bsz * 3 * hw * hw) != HYFI_OK ||
            hyfi_set_labels(n.g, n.y, y, (size_t)bsz) != HYFI_OK ||
            hyfi_train_step(n.g, &r->loss[s]) != HYFI_OK) {
            snprintf(err, elen, "step %d: %s", s + 1, hyfi_last_error());
            rc = -1;
        }
    }
    r->ngrad = hyfi_param_numel(n.g);
    r->grad = tu_alloc(r->ngrad);
    r->weight = tu_alloc(r->ngrad);
    for (int i = 0, off = 0; i < hyfi_param_count(n.g) && !rc; i++) {
        hyfi_tensor *p = hyfi_param(n.g, i);
        const size_t k = hyfi_tensor_numel(p);
        rc |= hyfi_grad_read(n.g, p, r->grad + off, k) != HYFI_OK;
        rc |= hyfi_tensor_read(n.g, p, r->weight + off, k) != HYFI_OK;
        off += (int)k;
    }
    if (!rc && bsz == B && hw == HW && (plan->stages <= 1 && plan->parts <= 1)) {
        /* a trivial plan keeps what leaves a layer readable; a dropped inner one is not */
        float *tmp = tu_alloc(hyfi_tensor_numel(n.inner));
        r->inner_read = hyfi_tensor_read(n.g, n.inner, tmp, hyfi_tensor_numel(n.inner));
        free(tmp);
        if (hyfi_tensor_read(n.g, n.stem, r->stem, hyfi_tensor_numel(n.stem)) != HYFI_OK)
            memset(r->stem, 0, sizeof r->stem);
        rc |= hyfi_infer(n.g, NULL) != HYFI_OK;
        rc |= hyfi_tensor_read(n.g, n.logits, r->logits, B * CLASSES) != HYFI_OK;
        if (rc) snprintf(err, elen, "reading after the steps: %s", hyfi_last_error());
    }
    free(x);
    free(y);
    hyfi_graph_destroy(n.g);
    return rc;
}

static int same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void exactness(hyfi_ctx *ctx)
{
    static const hyfi_plan_config plans[] = {
        {.stages = 1},
        {.stages = 2, .parts = 2, .schedule = HYFI_SCHEDULE_1F1B},
        {.stages = 2, .parts = 4, .deterministic = true},
    };
    static const char *const mode[] = {"none", "stage", "layer"};
    char err[600], what[160];
    for (size_t k = 0; k < sizeof plans / sizeof *plans; k++) {
        result base, got;
        hyfi_plan_config p = plans[k];
        if (train(ctx, &p, B, HW, 2, &base, err, sizeof err)) {
            printf("plan %zu without recompute: %s\n", k, err);
            tu_check(1, "plan without recompute trains");
            continue;
        }
        for (int m = HYFI_RECOMPUTE_STAGE; m <= HYFI_RECOMPUTE_LAYER; m++) {
            p.recompute = (hyfi_recompute)m;
            snprintf(what, sizeof what, "S=%d M=%d recompute %s", p.stages, p.parts ? p.parts : 1,
                     mode[m]);
            if (train(ctx, &p, B, HW, 2, &got, err, sizeof err)) {
                printf("%s: %s\n", what, err);
                tu_check(1, what);
                continue;
            }
            const int eq = same(got.loss, base.loss, sizeof got.loss) &&
                           same(got.grad, base.grad, got.ngrad * sizeof(float)) &&
                           same(got.weight, base.weight, got.ngrad * sizeof(float));
            printf("%s: losses %.7f %.7f, %s the plan without; activations ~%zu bytes (%zu "
                   "without)\n", what, (double)got.loss[0], (double)got.loss[1],
                   eq ? "bitwise" : "DIFFERENT from", got.act_bytes, base.act_bytes);
            tu_check(!eq, what);
            if (k == 0) {
                /* one place: what leaves a layer stays readable; inference unchanged */
                snprintf(what + strlen(what), sizeof what - strlen(what), ": reads, inference");
                tu_check(!same(got.stem, base.stem, sizeof got.stem) ||
                             !same(got.logits, base.logits, sizeof got.logits), what);
                if (m == HYFI_RECOMPUTE_LAYER) {
                    tu_check(got.inner_read == HYFI_OK || base.inner_read != HYFI_OK,
                             "recompute layer: a dropped activation is released, reading it "
                             "is refused");
                    tu_check(!(got.act_bytes < base.act_bytes),
                             "recompute layer on one place: a lower estimate");
                }
            }
            if (k == 2 && m == HYFI_RECOMPUTE_STAGE)
                tu_check(!(got.act_bytes < base.act_bytes),
                         "recompute stage, 4 micro-batches in flight: a lower estimate");
            free(got.grad);
            free(got.weight);
        }
        free(base.grad);
        free(base.weight);
    }
    hyfi_graph *g;
    hyfi_graph_create(ctx, 1, &g);
    tu_check(hyfi_graph_set_plan(g, &(hyfi_plan_config){.recompute = (hyfi_recompute)9}) !=
                 HYFI_ERR_ARG, "unknown recompute mode refused");
    hyfi_graph_destroy(g);
}

/* The memory limit: refused without swap, trained with it (the same losses). */
static void memory_limit(void)
{
    const int bsz = 4, hw = 96;
    char err[600];
    result free_run, r;
    hyfi_ctx *ctx;
    hyfi_ctx_config cc = hyfi_ctx_config_default();
    cc.device = HYFI_DEVICE_CPU, cc.mpi = 0;
    tu_ctx_env(&cc);
    if (hyfi_ctx_create(&cc, &ctx) != HYFI_OK) {
        tu_check(1, hyfi_last_error());
        return;
    }
    const int ok = train(ctx, &(hyfi_plan_config){0}, bsz, hw, 2, &free_run, err, sizeof err) == 0;
    hyfi_ctx_destroy(ctx);
    tu_check(!ok, "the run without a limit");
    if (!ok) return;
    /* a limit of two thirds of the estimate: above the largest task's buffers */
    const int limit = (int)(free_run.act_bytes / 1500000);
    printf("memory: estimate %.1f MB, limit %d MB\n", free_run.act_bytes / 1e6, limit);
    const char *before = getenv("STARPU_LIMIT_CPU_MEM");
    char *saved = before ? strdup(before) : NULL;
    cc.mem_limit_mb = limit;
    tu_ctx_env(&cc);
    if (hyfi_ctx_create(&cc, &ctx) == HYFI_OK) {
        const int rc = train(ctx, &(hyfi_plan_config){0}, bsz, hw, 1, &r, err, sizeof err);
        printf("limit %d MB without swap: %s\n", limit, rc == -2 ? err : "compiled");
        tu_check(rc != -2 || !strstr(err, "--recompute layer") || !strstr(err, "--swap-dir"),
                 "above the limit without swap: refused naming recompute and swap");
        if (rc == 0) free(r.grad), free(r.weight);
        hyfi_ctx_destroy(ctx);
    } else {
        tu_check(1, hyfi_last_error());
    }
    const char *after = getenv("STARPU_LIMIT_CPU_MEM");
    tu_check(!(saved ? after && !strcmp(after, saved) : !after),
             "the environment's STARPU_LIMIT_CPU_MEM is left as it was");
    free(saved);
    char dir[] = "/tmp/hyfi_swap_XXXXXX";
    if (!mkdtemp(dir)) {
        tu_check(1, "mkdtemp");
        free(free_run.grad), free(free_run.weight);
        return;
    }
    cc.swap_dir = dir;
    cc.swap_mb = 8;
    tu_ctx_env(&cc);
    tu_check(hyfi_ctx_create(&cc, &ctx) != HYFI_ERR_ARG, "a swap under 16 MB refused");
    cc.swap_mb = 64;
    tu_ctx_env(&cc);
    if (hyfi_ctx_create(&cc, &ctx) == HYFI_OK) {
        const int rc = train(ctx, &(hyfi_plan_config){0}, bsz, hw, 2, &r, err, sizeof err);
        if (rc) printf("limit %d MB with swap: %s\n", limit, err);
        const int eq = rc == 0 && same(r.loss, free_run.loss, sizeof r.loss) &&
                       same(r.grad, free_run.grad, r.ngrad * sizeof(float));
        printf("limit %d MB with swap in %s: losses %.7f %.7f, %s the run without a limit\n",
               limit, dir, (double)r.loss[0], (double)r.loss[1], eq ? "bitwise" : "NOT");
        tu_check(!eq, "above the limit with swap: trains, bitwise the run without a limit");
        if (rc == 0) free(r.grad), free(r.weight);
        hyfi_ctx_destroy(ctx);
    } else {
        tu_check(1, hyfi_last_error());
    }
    rmdir(dir);
    free(free_run.grad);
    free(free_run.weight);
}

int main(void)
{
    /* every context of the test (tu_ctx_env) */
    setenv("HYFI_CPU_THREADS", "1", 1);
    setenv("HYFI_LEND_MIN_BYTES", "0", 1);
    hyfi_ctx_config cc = hyfi_ctx_config_default();
    cc.device = HYFI_DEVICE_CPU, cc.mpi = 0;
    hyfi_ctx *ctx;
    tu_ctx_env(&cc);
    if (hyfi_ctx_create(&cc, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    exactness(ctx);
    hyfi_ctx_destroy(ctx);
    memory_limit();
    return tu_finish();
}
