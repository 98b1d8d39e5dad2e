/* Gradient forwarding (engine/compile.c): an add whose input has no other
 * consumer hands that input's producer its own output gradient instead of a
 * copy. And the convolution + add fusion (engine/layout.c): a convolution
 * whose output only an add reads writes the add's output itself. The step
 * must be bit for bit the one with the copies and the separate adds
 * (hyfi_plan_config.no_grad_forwarding and no_fuse_conv_add), in float32 and in bf16
 * (where the fused convolution rounds its result before adding). A residual
 * block's input, which the add and the block's first op both read, takes the
 * add's output gradient buffer as its own (the other consumer adds into it):
 * its gradient read back equals the copying run's, and the gradients that
 * buffer held before (the add's, the tensors forwarded to it) are refused with
 * HYFI_ERR_STATE naming no_grad_forwarding (ResNet v1-8, one place: the stem's
 * ReLU and layer1.0's add).
 *
 * ResNet v1-8 and v2-11 (CIFAR style) at 16x16, batch 4, and AmoebaNet-D
 * (3 layers, 8 filters) at 32x32, batch 2, train 2 steps under each plan twice
 * in one process: with no_grad_forwarding (every add's backward copies dy) and
 * with the default. Plans: one place; 2 stages x 2 micro-batches (GPipe and
 * 1F1B); 2 micro-batches with stage re-materialisation; layer
 * re-materialisation (where forwarding is off). Compared bitwise: the losses,
 * every parameter gradient and weight after step 2, and the gradient of the
 * first residual block's add input (hyfi_grad_read: read through the alias)
 * and of the add itself (one place). Micro-batches sum their parameter
 * gradients in micro-batch order (deterministic), so that the runs can be
 * compared bit for bit. Checked from the task records: the default run has
 * fewer tasks per step than the copying one, except under layer
 * re-materialisation, where both have the same. */
#include "hyfi.h"
#include "tu_env.h"
#include "models.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 2

/* A tensor whose gradient run() tries to read after the steps (NULL: none),
 * and what that read answered */
static const char *g_probe;
static hyfi_status g_probe_status;
static char g_probe_err[512];

typedef struct {
    float loss[STEPS];
    float *grad, *weight, *gin, *gadd;
    size_t ngrad, nact;
    size_t ntasks; /* tasks of the last step */
} result;

static int g_bf16; /* the run's precision: bf16 */
static bool g_copying; /* the reference: no gradient forwarding, no conv + add fusion */

static hyfi_graph *build(hyfi_ctx *ctx, const model_config *mc, int image, int batch,
                         const hyfi_plan_config *plan)
{
    hyfi_graph *g;
    char err[512] = "";
    hyfi_graph_create(ctx, 7, &g);
    hyfi_tensor *x = hyfi_input(g, "image", batch, 3, image, image);
    hyfi_tensor *y = hyfi_labels(g, "label", batch);
    hyfi_tensor *logits = hyfi_model_build(g, mc, x, err, sizeof err);
    hyfi_tensor *loss = logits ? hyfi_softmax_cross_entropy(g, "loss", logits, y) : NULL;
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f,
                            .precision = g_bf16 ? HYFI_PRECISION_BF16 : HYFI_PRECISION_FP32};
    hyfi_plan_config pc = *plan;
    pc.no_grad_forwarding = pc.no_fuse_conv_add = g_copying;
    if (!loss || hyfi_graph_set_plan(g, &pc) != HYFI_OK ||
        hyfi_graph_compile(g, loss, &tc) != HYFI_OK) {
        printf("build/compile failed: %s %s\n", err, hyfi_graph_error(g));
        hyfi_graph_destroy(g);
        return NULL;
    }
    return g;
}


static int read_grad(hyfi_graph *g, const char *name, float **out, size_t *n)
{
    hyfi_tensor *t = hyfi_tensor_find(g, name);
    if (!t) {
        printf("no tensor %s\n", name);
        return -1;
    }
    *n = hyfi_tensor_numel(t);
    *out = malloc(*n * sizeof(float));
    if (!*out || hyfi_grad_read(g, t, *out, *n) != HYFI_OK) {
        printf("hyfi_grad_read(%s): %s\n", name, hyfi_last_error());
        return -1;
    }
    return 0;
}

static int run(hyfi_ctx *ctx, const model_config *mc, int image, int batch,
               const hyfi_plan_config *plan, const char *in_name, const char *add_name,
               result *r)
{
    memset(r, 0, sizeof *r);
    hyfi_graph *g = build(ctx, mc, image, batch, plan);
    if (!g) return -1;
    hyfi_tensor *x = hyfi_tensor_find(g, "image"), *y = hyfi_tensor_find(g, "label");
    const size_t nx = (size_t)batch * 3 * image * image;
    float *xb = malloc(nx * sizeof *xb);
    int32_t *yb = malloc((size_t)batch * sizeof *yb);
    int rc = !xb || !yb;
    for (int s = 0; s < STEPS && !rc; s++) {
        uint64_t st = 900 + (uint64_t)s;
        tu_fill(xb, nx, &st, -1.f, 1.f);
        for (int i = 0; i < batch; i++) yb[i] = tu_randint(&st, 0, mc->num_classes - 1);
        if (s == STEPS - 1) hyfi_ctx_set_task_records(ctx, true);
        if (hyfi_set_input(g, x, xb, nx) != HYFI_OK ||
            hyfi_set_labels(g, y, yb, (size_t)batch) != HYFI_OK ||
            hyfi_train_step(g, &r->loss[s]) != HYFI_OK) {
            printf("step %d failed: %s\n", s + 1, hyfi_last_error());
            rc = -1;
        }
    }
    r->ntasks = hyfi_ctx_task_records(ctx, NULL, 0);
    hyfi_ctx_set_task_records(ctx, false);
    free(xb);
    free(yb);
    /* one stage and one micro-batch keep the activations' gradients */
    const int keeps = (!plan->stages || plan->stages == 1) && (!plan->parts || plan->parts == 1) &&
                      plan->recompute == HYFI_RECOMPUTE_NONE;
    size_t n2 = 0;
    if (!rc && keeps && in_name[0] &&
        (read_grad(g, in_name, &r->gin, &r->nact) ||
         (add_name[0] && (read_grad(g, add_name, &r->gadd, &n2) || n2 != r->nact))))
        rc = -1;
    hyfi_tensor *pt = !rc && g_probe ? hyfi_tensor_find(g, g_probe) : NULL;
    if (pt) {
        float *buf = malloc(hyfi_tensor_numel(pt) * sizeof *buf);
        g_probe_status = buf ? hyfi_grad_read(g, pt, buf, hyfi_tensor_numel(pt)) : HYFI_ERR_NOMEM;
        snprintf(g_probe_err, sizeof g_probe_err, "%s", hyfi_last_error());
        free(buf);
    }
    r->ngrad = hyfi_param_numel(g);
    r->grad = malloc(r->ngrad * sizeof(float));
    r->weight = malloc(r->ngrad * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < hyfi_param_count(g) && !rc; i++) {
        hyfi_tensor *p = hyfi_param(g, i);
        const size_t n = hyfi_tensor_numel(p);
        if (hyfi_grad_read(g, p, r->grad + off, n) != HYFI_OK ||
            hyfi_tensor_read(g, p, r->weight + off, n) != HYFI_OK)
            rc = -1;
        off += n;
    }
    hyfi_graph_destroy(g);
    return rc;
}

static void free_result(result *r) { free(r->grad), free(r->weight), free(r->gin), free(r->gadd); }

static int same(const char *what, const float *a, const float *b, size_t n)
{
    const int ok = n == 0 || (a && b && memcmp(a, b, n * sizeof(float)) == 0);
    if (!ok) printf("FAIL %s differs\n", what);
    return ok;
}

/* ResNet v1-8, one place, 2 steps: the stem's ReLU (read by layer1.0's first
 * convolution and its add) has the copying run's gradient bit for bit; the
 * gradient of layer1.0's add is refused (its buffer went on to the ReLU's)
 * with the switch named, and read with no_grad_forwarding. */
static int shared_input(hyfi_ctx *ctx)
{
    model_config mc = model_config_default();
    mc.kind = MODEL_RESNET, mc.num_classes = 10, mc.depth = 8, mc.resnet_version = 1;
    const hyfi_plan_config plan = {.stages = 1};
    result copy, alias;
    g_bf16 = 0;
    g_copying = true;
    int rc = run(ctx, &mc, 16, 4, &plan, "relu", "layer1.0.add", &copy);
    g_copying = false;
    /* the default: read the ReLU's gradient, then try the add's */
    g_probe = "layer1.0.add";
    g_probe_status = HYFI_OK;
    rc |= run(ctx, &mc, 16, 4, &plan, "relu", "", &alias);
    g_probe = NULL;
    int ok = !rc && same("block input gradient", alias.gin, copy.gin, copy.nact) &&
             alias.ntasks < copy.ntasks;
    const int refused = g_probe_status == HYFI_ERR_STATE && strstr(g_probe_err, "no_grad_forwarding");
    printf("%s ResNet v1-8, one place: the stem ReLU's gradient as copied (%zu tasks per step, "
           "copying %zu); layer1.0.add's refused%s%s\n", ok && refused ? "ok  " : "FAIL",
           alias.ntasks, copy.ntasks, refused ? ": " : "", refused ? g_probe_err : "");
    free_result(&copy), free_result(&alias);
    return !(ok && refused);
}

int main(void)
{
    /* one CPU worker: no core lending, so every oneDNN call has the same threads
     * (their reductions, e.g. the weight gradients, depend on the thread count) */
    hyfi_ctx_config cfg = {.device = HYFI_DEVICE_CPU, .ncpus = 1, .mpi = 0};
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    struct {
        const char *name;
        model_kind kind;
        int version, depth, layers, filters, image, batch, bf16;
        const char *in, *add; /* an add input with no other consumer, and the add */
    } models[] = {
        /* layer1.0's add gives its buffer to the stem's ReLU (above): layer3.0's
         * pair is read */
        {"ResNet v1-8", MODEL_RESNET, 1, 8, 0, 0, 16, 4, 0, "layer3.0.bn2", "layer3.0.add"},
        /* conv3 is not fused (the shortcut's convolution comes after it): the
         * shortcut's is; each other block's conv3 is */
        {"ResNet v2-11", MODEL_RESNET, 2, 11, 0, 0, 16, 4, 0, "layer1.0.conv3", "layer1.0.add"},
        {"ResNet v2-20 bf16", MODEL_RESNET, 2, 20, 0, 0, 16, 4, 1, "layer1.0.conv3",
         "layer1.0.add"},
        {"AmoebaNet-D (3, 8)", MODEL_AMOEBANET, 1, 0, 3, 8, 32, 2, 0, NULL, NULL},
    };
    const hyfi_plan_config plans[] = {
        {.stages = 1},
        {.stages = 2, .parts = 2, .deterministic = true},
        {.stages = 2, .parts = 2, .schedule = HYFI_SCHEDULE_1F1B, .deterministic = true},
        {.parts = 2, .recompute = HYFI_RECOMPUTE_STAGE, .deterministic = true},
        {.recompute = HYFI_RECOMPUTE_LAYER},
    };
    const char *plan_names[] = {"one place", "2 stages x 2 micro-batches",
                                "2 stages x 2 micro-batches 1F1B",
                                "2 micro-batches, stage recompute", "layer recompute"};
    int fails = 0;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        model_config mc = model_config_default();
        mc.kind = models[mi].kind;
        mc.num_classes = 10;
        if (mc.kind == MODEL_RESNET) {
            mc.depth = models[mi].depth;
            mc.resnet_version = models[mi].version;
        } else {
            mc.num_layers = models[mi].layers;
            mc.num_filters = models[mi].filters;
        }
        for (size_t pi = 0; pi < sizeof plans / sizeof plans[0]; pi++) {
            result copy, alias;
            const char *in = models[mi].in, *add = models[mi].add;
            g_bf16 = models[mi].bf16;
            g_copying = true;
            int rc = run(ctx, &mc, models[mi].image, models[mi].batch, &plans[pi],
                         in ? in : "", add ? add : "", &copy);
            g_copying = false;
            rc |= run(ctx, &mc, models[mi].image, models[mi].batch, &plans[pi], in ? in : "",
                      add ? add : "", &alias);
            if (!in) copy.nact = alias.nact = 0; /* no named pair to read */
            int ok = !rc;
            if (ok) {
                for (int s = 0; s < STEPS; s++) ok &= same("loss", &alias.loss[s], &copy.loss[s], 1);
                ok &= copy.ngrad == alias.ngrad;
                ok &= same("gradients", alias.grad, copy.grad, copy.ngrad);
                ok &= same("weights", alias.weight, copy.weight, copy.ngrad);
                ok &= copy.nact == alias.nact;
                ok &= same("add input gradient", alias.gin, copy.gin, copy.nact);
                ok &= same("add input gradient = add gradient", alias.gin, alias.gadd, alias.nact);
                /* layer recompute forwards no gradient; ResNet v2 still fuses */
                const int layer = plans[pi].recompute == HYFI_RECOMPUTE_LAYER;
                const int fewer = layer && models[mi].version != 2
                                      ? alias.ntasks == copy.ntasks
                                      : alias.ntasks < copy.ntasks;
                if (!fewer) printf("FAIL tasks per step: %zu forwarded vs %zu copying\n",
                                   alias.ntasks, copy.ntasks);
                ok &= fewer;
            }
            printf("%s %s, %s: loss %.7f, %zu tasks per step (copying: %zu)\n",
                   ok ? "ok  " : "FAIL", models[mi].name, plan_names[pi], alias.loss[STEPS - 1],
                   alias.ntasks, copy.ntasks);
            fails += !ok;
            free_result(&copy);
            free_result(&alias);
        }
    }
    fails += shared_input(ctx);
    hyfi_ctx_destroy(ctx);
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails ? 1 : 0;
}
