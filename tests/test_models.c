/* Tests of apps/models.c: every model config is built on a graph without
 * compiling and checked against the parameter counts of its PyTorch twin
 * (bench/torch_models.py; torchvision's own models for the ImageNet ResNet v1
 * depths), the logits' shape (N, classes, 1, 1), the spatial size reaching
 * the classifier at odd image sizes, the op summaries, the error messages of
 * bad configs and the names of exported tensors. Then two tiny models are
 * compiled and trained for 2 steps (ResNet v1-8 at 16x16, AmoebaNet-D(3, 8)
 * at 32x32, batch 2): losses finite.
 *
 * The expected counts were printed by
 *   /usr/bin/python3 bench/torch_models.py --count --quiet <the same flags>
 * tests/models_vs_torch.sh repeats the comparison live when PyTorch is there. */
#include "tu_env.h"
#include "models.h"
#include "testutil.h"

#include <hyfi.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRLEN 1024

static void check(bool ok, const char *fmt_name)
{
    printf("%-4s %s\n", ok ? "ok" : "FAIL", fmt_name);
    tu_check(!ok, fmt_name);
}

static model_config resnet_cfg(int depth, int version, int classes)
{
    model_config c = model_config_default();
    c.kind = MODEL_RESNET;
    c.depth = depth;
    c.resnet_version = version;
    c.num_classes = classes;
    return c;
}

static model_config amoeba_cfg(int layers, int filters, int classes)
{
    model_config c = model_config_default();
    c.kind = MODEL_AMOEBANET;
    c.num_layers = layers;
    c.num_filters = filters;
    c.num_classes = classes;
    return c;
}

typedef struct {
    size_t params;     /* hyfi_param_numel */
    size_t op_params;  /* sum of hyfi_op_info.params */
    double flops;      /* forward FLOPs per image, all ops */
    double conv_fc_flops;
    size_t act_bytes;  /* per image */
    int ops;
    int logits[4];
    int feat[4];       /* input of the global average pool */
} built;

/* Build c on a fresh graph for n x ch x h x w images; 0 on success. */
static int build(hyfi_ctx *ctx, const model_config *c, int n, int ch, int h, int w, built *b,
                 char *err)
{
    memset(b, 0, sizeof *b);
    err[0] = 0;
    hyfi_graph *g;
    if (hyfi_graph_create(ctx, 1, &g) != HYFI_OK) {
        snprintf(err, ERRLEN, "hyfi_graph_create: %s", hyfi_last_error());
        return -1;
    }
    hyfi_tensor *x = hyfi_input(g, "image", n, ch, h, w);
    hyfi_tensor *logits = hyfi_model_build(g, c, x, err, ERRLEN);
    int rc = -1;
    if (logits) {
        rc = 0;
        hyfi_tensor_shape(logits, b->logits);
        b->params = hyfi_param_numel(g);
        b->ops = hyfi_graph_op_count(g);
        for (int i = 0; i < b->ops; i++) {
            hyfi_op_info oi;
            if (hyfi_graph_op_info(g, i, &oi) != HYFI_OK) {
                rc = -1;
                break;
            }
            b->op_params += oi.params;
            b->flops += oi.flops / n;
            if (!strcmp(oi.kind, "conv2d") || !strcmp(oi.kind, "fc"))
                b->conv_fc_flops += oi.flops / n;
            b->act_bytes += oi.act_bytes / (size_t)n;
        }
        hyfi_tensor *gap = hyfi_tensor_find(g, "avgpool");
        if (!gap) gap = hyfi_tensor_find(g, "gap");
        /* the op before the pool produced its input (models build in order) */
        for (int i = 1; gap && i < b->ops; i++) {
            hyfi_op_info oi, prev;
            hyfi_graph_op_info(g, i, &oi);
            if (!strcmp(oi.name, hyfi_tensor_name(gap))) {
                hyfi_graph_op_info(g, i - 1, &prev);
                memcpy(b->feat, prev.out_dims, sizeof b->feat);
            }
        }
    }
    hyfi_graph_destroy(g);
    return rc;
}

static int ceil_div_pow2(int x, int times)
{
    while (times-- > 0) x = (x + 1) / 2;
    return x;
}

/* ------------------------------------------------------------ counts */
typedef struct {
    const char *what;
    model_config c;
    int size;          /* image side */
    size_t want;       /* PyTorch twin's parameter count */
    double want_conv_fc_flops; /* twin's conv + fc FLOPs per image; 0: not checked */
} count_case;

static void test_counts(hyfi_ctx *ctx)
{
    const count_case cases[] = {
        /* torchvision resnet18..152, 1000 classes */
        {"resnet-18 v1 (torchvision)", resnet_cfg(18, 1, 1000), 224, 11689512, 3628147688.0},
        {"resnet-34 v1 (torchvision)", resnet_cfg(34, 1, 1000), 224, 21797672, 7327523816.0},
        {"resnet-50 v1 (torchvision)", resnet_cfg(50, 1, 1000), 224, 25557032, 8178369512.0},
        {"resnet-101 v1 (torchvision)", resnet_cfg(101, 1, 1000), 224, 44549160, 15602811880.0},
        {"resnet-152 v1 (torchvision)", resnet_cfg(152, 1, 1000), 224, 60192808, 23027254248.0},
        /* ImageNet pre-activation */
        {"resnet-18 v2 (pre-activation)", resnet_cfg(18, 2, 1000), 64, 11687720, 297116648.0},
        {"resnet-50 v2 (pre-activation)", resnet_cfg(50, 2, 1000), 64, 25549352, 671384552.0},
        {"resnet-152 v2 (pre-activation)", resnet_cfg(152, 2, 1000), 64, 60185128, 0},
        /* CIFAR family, 10 classes */
        {"resnet-8 v1 (CIFAR)", resnet_cfg(8, 1, 10), 32, 78042, 25003274.0},
        {"resnet-20 v1 (CIFAR)", resnet_cfg(20, 1, 10), 32, 272474, 81626378.0},
        {"resnet-56 v1 (CIFAR)", resnet_cfg(56, 1, 10), 32, 855770, 0},
        {"resnet-110 v1 (CIFAR)", resnet_cfg(110, 1, 10), 32, 1730714, 0},
        {"resnet-164 v1 (CIFAR)", resnet_cfg(164, 1, 10), 32, 2605658, 0},
        {"resnet-20 v2 (CIFAR)", resnet_cfg(20, 2, 10), 32, 568410, 0},
        {"resnet-56 v2 (CIFAR)", resnet_cfg(56, 2, 10), 32, 1657690, 0},
        {"resnet-110 v2 (CIFAR)", resnet_cfg(110, 2, 10), 32, 3291610, 766874634.0},
        {"resnet-164 v2 (CIFAR)", resnet_cfg(164, 2, 10), 32, 4925530, 0},
        {"resnet-1001 v2 (CIFAR)", resnet_cfg(1001, 2, 10), 32, 30251290, 0},
        /* AmoebaNet-D */
        {"amoebanet-d(6,64) 32x32", amoeba_cfg(6, 64, 10), 32, 2686346, 17248266.0},
        {"amoebanet-d(6,64) 128x128", amoeba_cfg(6, 64, 10), 128, 2686346, 275664906.0},
        {"amoebanet-d(6,64) 48x48", amoeba_cfg(6, 64, 10), 48, 2686346, 44904458.0},
        {"amoebanet-d(6,64) 96x96", amoeba_cfg(6, 64, 10), 96, 2686346, 155070474.0},
        {"amoebanet-d(3,8)", amoeba_cfg(3, 8, 10), 32, 26749, 209418.0},
        {"amoebanet-d(18,208) 1000 classes (GPipe: 82M)", amoeba_cfg(18, 208, 1000), 224,
         81505540, 0},
        {"resnet-18 v1, 10 classes, 64x64", resnet_cfg(18, 1, 10), 64, 11181642, 296101898.0},
        {"cnn", model_config_default(), 28, 94762, 15808010.0},
    };
    char err[ERRLEN], name[ERRLEN + 256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const count_case *k = &cases[i];
        built b;
        int rc = build(ctx, &k->c, 2, 3, k->size, k->size, &b, err);
        if (rc) {
            snprintf(name, sizeof name, "%s: build failed: %s", k->what, err);
            check(false, name);
            continue;
        }
        printf("     %s at %dx%d: %zu parameters, %d ops, %.4g FLOPs/image (conv+fc %.10g), "
               "%.2f MiB activations/image\n",
               k->what, k->size, k->size, b.params, b.ops, b.flops, b.conv_fc_flops,
               (double)b.act_bytes / (1 << 20));
        if (k->want) {
            snprintf(name, sizeof name, "%s: %zu parameters (PyTorch: %zu)", k->what, b.params,
                     k->want);
            check(b.params == k->want, name);
        }
        snprintf(name, sizeof name, "%s: op summaries sum to the parameters (%zu)", k->what,
                 b.op_params);
        check(b.op_params == b.params, name);
        if (k->want_conv_fc_flops > 0) {
            snprintf(name, sizeof name, "%s: conv+fc FLOPs/image %.10g (PyTorch: %.10g)",
                     k->what, b.conv_fc_flops, k->want_conv_fc_flops);
            check(fabs(b.conv_fc_flops - k->want_conv_fc_flops) < 0.5, name);
        }
        snprintf(name, sizeof name, "%s: logits (%d,%d,%d,%d)", k->what, b.logits[0],
                 b.logits[1], b.logits[2], b.logits[3]);
        check(b.logits[0] == 2 && b.logits[1] == k->c.num_classes && b.logits[2] == 1 &&
                  b.logits[3] == 1,
              name);
    }
}

/* ------------------------------------------------------------ shapes */
static void test_shapes(hyfi_ctx *ctx)
{
    const struct {
        const char *what;
        model_config c;
        int halvings; /* stride-2 steps before the classifier */
    } models[] = {
        {"amoebanet-d(3,16)", amoeba_cfg(3, 16, 7), 5},
        {"resnet-18 v1", resnet_cfg(18, 1, 7), 5},
        {"resnet-50 v2", resnet_cfg(50, 2, 7), 5},
        {"resnet-20 v1", resnet_cfg(20, 1, 7), 2},
        {"resnet-11 v2", resnet_cfg(11, 2, 7), 2},
        {"cnn", model_config_default(), 2},
    };
    const int sizes[][2] = {{32, 32}, {48, 48}, {96, 96}, {33, 33}, {65, 47}, {224, 224},
                            {100, 36}};
    char err[ERRLEN], name[ERRLEN + 256];
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        model_config c = models[m].c;
        if (c.kind == MODEL_CNN) c.num_classes = 7;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int h = sizes[s][0], w = sizes[s][1];
            built b;
            int rc = build(ctx, &c, 3, 3, h, w, &b, err);
            int fh = c.kind == MODEL_CNN ? h / 4 : ceil_div_pow2(h, models[m].halvings);
            int fw = c.kind == MODEL_CNN ? w / 4 : ceil_div_pow2(w, models[m].halvings);
            snprintf(name, sizeof name, "%s at %dx%d: logits (%d,%d,%d,%d), features %dx%d "
                     "(want %dx%d)%s%s", models[m].what, h, w, b.logits[0], b.logits[1],
                     b.logits[2], b.logits[3], b.feat[2], b.feat[3], fh, fw, rc ? ": " : "",
                     rc ? err : "");
            check(rc == 0 && b.logits[0] == 3 && b.logits[1] == 7 && b.logits[2] == 1 &&
                      b.logits[3] == 1 && b.feat[2] == fh && b.feat[3] == fw,
                  name);
        }
    }
    /* one input channel (Fashion-MNIST) and 1 class still build */
    model_config c = resnet_cfg(20, 1, 1);
    built b;
    int rc = build(ctx, &c, 1, 1, 28, 28, &b, err);
    check(rc == 0 && b.logits[1] == 1, "resnet-20 v1 on 1x28x28 with 1 class builds");
}

/* ------------------------------------------------------------ export names */
/* model_export_name on examples of every rule (tests/torch_export.py checks
 * whole models against PyTorch's state_dict keys when PyTorch is there). */
static void test_export_names(void)
{
    const model_config r50 = resnet_cfg(50, 1, 10), r20v2 = resnet_cfg(20, 2, 10);
    const model_config am = amoeba_cfg(6, 64, 10), cnn = model_config_default();
    const struct {
        const model_config *c;
        const char *name, *want;
    } cases[] = {
        {&r50, "conv1.weight", "conv1.weight"},
        {&r50, "bn1.gamma", "bn1.weight"},
        {&r50, "bn1.beta", "bn1.bias"},
        {&r50, "bn1.running_var", "bn1.running_var"},
        {&r50, "layer1.0.downsample.conv.weight", "layer1.0.downsample.0.weight"},
        {&r50, "layer4.0.downsample.bn.running_mean", "layer4.0.downsample.1.running_mean"},
        {&r50, "fc.weight", "fc.weight"},
        {&r20v2, "layer2.0.downsample.conv.weight", "layer2.0.downsample.0.weight"},
        {&r20v2, "bn_final.gamma", "bn_final.weight"},
        {&cnn, "bn3.beta", "bn3.bias"},
        {&am, "stem1.bn.gamma", "stem1.bn.weight"},
        {&am, "fc.bias", "classify.fc.bias"},
        {&am, "stem2.reduce1.conv.weight", "stem2.reduce1.1.weight"},
        {&am, "stem2.reduce2.bn.running_mean", "stem2.reduce2.2.running_mean"},
        {&am, "stem3.reduce2.bn.gamma", "stem3.reduce2.bn.weight"},
        {&am, "cell3_normal1.reduce2.conv2.weight", "cell3_normal1.reduce2.conv2.weight"},
        {&am, "cell3_normal2.reduce2.bn.beta", "cell3_normal2.reduce2.2.bias"},
        {&am, "cell1_normal2.op0.conv_1x1.conv.weight",
         "cell1_normal2.operations.0.module.1.weight"},
        {&am, "cell2_reduction.op3.conv_3x3.bn3.running_var",
         "cell2_reduction.operations.3.module.8.running_var"},
        {&am, "cell5_normal2.op5.conv_1x7_7x1.conv4.weight",
         "cell5_normal2.operations.5.module.10.weight"},
        {&am, "stem2.op2.none.bn.gamma", "stem2.operations.2.module.bn.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[128], what[400];
        int rc = model_export_name(cases[i].c, cases[i].name, out, sizeof out);
        snprintf(what, sizeof what, "export name of %s (%s): %s", cases[i].name,
                 model_kind_name(cases[i].c->kind), rc ? "error" : out);
        check(rc == 0 && !strcmp(out, cases[i].want), what);
    }
    char tiny[8];
    check(model_export_name(&r50, "layer1.0.conv1.weight", tiny, sizeof tiny) == -1 && !tiny[0],
          "export name too long for the buffer: -1, empty");
}

/* ------------------------------------------------------------ errors */
static void test_errors(hyfi_ctx *ctx)
{
    const struct {
        const char *what;
        model_config c;
        int size;
        const char *want1, *want2;
    } cases[] = {
        {"resnet v1 depth 19", resnet_cfg(19, 1, 10), 32, "depth 19", "6n+2"},
        {"resnet v2 depth 21", resnet_cfg(21, 2, 10), 32, "depth 21", "9n+2"},
        {"resnet v1 depth 1001", resnet_cfg(1001, 1, 10), 32, "6n+2", "--resnet-version 2"},
        {"resnet v1 depth 29 (fits v2)", resnet_cfg(29, 1, 10), 32, "6n+2",
         "--resnet-version 2"},
        {"resnet depth 0", resnet_cfg(0, 1, 10), 32, "depth 0", "out of range"},
        {"resnet version 3", resnet_cfg(20, 3, 10), 32, "version 3", "valid: 1"},
        {"resnet-50 at 16x16", resnet_cfg(50, 1, 10), 16, "too small", "--image-size 32"},
        {"resnet-20 at 2x2", resnet_cfg(20, 1, 10), 2, "too small", "--image-size 4"},
        {"amoebanet L=7", amoeba_cfg(7, 64, 10), 32, "--num-layers 7", "multiple of 3"},
        {"amoebanet L=0", amoeba_cfg(0, 64, 10), 32, "--num-layers 0", "multiple of 3"},
        {"amoebanet F=10", amoeba_cfg(6, 10, 10), 32, "--num-filters 10", "multiple of 4"},
        {"amoebanet at 31x31", amoeba_cfg(6, 64, 10), 31, "too small", "--image-size 32"},
        {"0 classes", resnet_cfg(20, 1, 0), 32, "0 classes", "at least one"},
    };
    char err[ERRLEN], name[ERRLEN + 128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        built b;
        int rc = build(ctx, &cases[i].c, 2, 3, cases[i].size, cases[i].size, &b, err);
        bool ok = rc != 0 && strstr(err, cases[i].want1) && strstr(err, cases[i].want2);
        snprintf(name, sizeof name, "%s refused: \"%s\"", cases[i].what, err);
        check(ok, name);
    }
    /* style imagenet with a CIFAR depth, style cifar with an ImageNet-only depth */
    model_config c = resnet_cfg(20, 1, 10);
    c.style = RESNET_STYLE_IMAGENET;
    built b;
    int rc = build(ctx, &c, 2, 3, 64, 64, &b, err);
    snprintf(name, sizeof name, "--resnet-style imagenet --depth 20 refused: \"%s\"", err);
    check(rc != 0 && strstr(err, "18, 34, 50, 101, 152"), name);
    c = resnet_cfg(18, 1, 10);
    c.style = RESNET_STYLE_CIFAR;
    rc = build(ctx, &c, 2, 3, 64, 64, &b, err);
    snprintf(name, sizeof name, "--resnet-style cifar --depth 18 refused: \"%s\"", err);
    check(rc != 0 && strstr(err, "6n+2"), name);
    /* style cifar reaches MPI4DL's v2-101 (n = 11) and the CIFAR v1-50 */
    c = resnet_cfg(101, 2, 10);
    c.style = RESNET_STYLE_CIFAR;
    rc = build(ctx, &c, 2, 3, 32, 32, &b, err);
    snprintf(name, sizeof name, "--resnet-style cifar --depth 101 v2: %zu parameters (PyTorch: "
             "3019290)%s%s", b.params, rc ? ": " : "", err);
    check(rc == 0 && b.params == 3019290, name);
    c = resnet_cfg(50, 1, 10);
    c.style = RESNET_STYLE_CIFAR;
    rc = build(ctx, &c, 2, 3, 32, 32, &b, err);
    snprintf(name, sizeof name, "--resnet-style cifar --depth 50 v1: %zu parameters (PyTorch: "
             "758554)%s%s", b.params, rc ? ": " : "", err);
    check(rc == 0 && b.params == 758554, name);

    /* NULL arguments and a graph that already failed */
    hyfi_graph *g;
    hyfi_graph_create(ctx, 1, &g);
    c = model_config_default();
    check(hyfi_model_build(g, &c, NULL, err, sizeof err) == NULL && strstr(err, "NULL"),
          "NULL input refused");
    hyfi_tensor *x = hyfi_input(g, "image", 2, 3, 32, 32);
    hyfi_input(g, "image", 2, 3, 32, 32); /* duplicate name: the graph fails */
    check(hyfi_model_build(g, &c, x, err, sizeof err) == NULL && strstr(err, "already"),
          "graph with an earlier error refused");
    hyfi_graph_destroy(g);
    /* a name clash inside the model is reported with the model's name */
    hyfi_graph_create(ctx, 1, &g);
    x = hyfi_input(g, "conv1", 2, 3, 32, 32);
    c = resnet_cfg(20, 1, 10);
    hyfi_tensor *l = hyfi_model_build(g, &c, x, err, sizeof err);
    snprintf(name, sizeof name, "builder error reported: \"%s\"", err);
    check(l == NULL && strstr(err, "resnet-20 v1") && strstr(err, "conv1"), name);
    hyfi_graph_destroy(g);
}

/* ------------------------------------------------------------ training */
static void train_two_steps(hyfi_ctx *ctx, const char *what, const model_config *c, int size)
{
    const int B = 2, C = 3;
    char err[ERRLEN], name[ERRLEN + 128];
    hyfi_graph *g;
    hyfi_graph_create(ctx, 7, &g);
    hyfi_tensor *x = hyfi_input(g, "image", B, C, size, size);
    hyfi_tensor *y = hyfi_labels(g, "label", B);
    hyfi_tensor *logits = hyfi_model_build(g, c, x, err, sizeof err);
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", logits, y);
    hyfi_train_config tc = {.lr = 0.01f, .momentum = 0.9f};
    if (!logits || !loss || hyfi_graph_compile(g, loss, &tc) != HYFI_OK) {
        snprintf(name, sizeof name, "%s: build/compile: %s %s", what, err, hyfi_graph_error(g));
        check(false, name);
        hyfi_graph_destroy(g);
        return;
    }
    size_t n = (size_t)B * C * size * size;
    float *img = tu_alloc(n);
    uint64_t st = 5;
    tu_fill(img, n, &st, -1, 1);
    int32_t lab[2] = {1, 3};
    float l[2] = {NAN, NAN};
    bool ok = true;
    for (int s = 0; s < 2 && ok; s++) {
        ok = hyfi_set_input(g, x, img, n) == HYFI_OK && hyfi_set_labels(g, y, lab, B) == HYFI_OK &&
             hyfi_train_step(g, &l[s]) == HYFI_OK;
    }
    snprintf(name, sizeof name, "%s: 2 training steps, losses %.4f %.4f%s%s", what, (double)l[0],
             (double)l[1], ok ? "" : ": ", ok ? "" : hyfi_last_error());
    check(ok && isfinite(l[0]) && isfinite(l[1]), name);
    free(img);
    hyfi_graph_destroy(g);
}

int main(void)
{
    hyfi_ctx *ctx;
    hyfi_ctx_config cc = {.device = HYFI_DEVICE_CPU, .mpi = 0, .ncpus = 2, .bind_workers = 0};
    tu_ctx_env(&cc);
    if (hyfi_ctx_create(&cc, &ctx) != HYFI_OK) {
        printf("hyfi_ctx_create: %s\n", hyfi_last_error());
        return 1;
    }
    test_counts(ctx);
    test_shapes(ctx);
    test_errors(ctx);
    test_export_names();
    model_config r8 = resnet_cfg(8, 1, 10);
    train_two_steps(ctx, "resnet-8 v1 (CIFAR) 16x16 batch 2", &r8, 16);
    model_config a = amoeba_cfg(3, 8, 10);
    train_two_steps(ctx, "amoebanet-d(3,8) 32x32 batch 2", &a, 32);
    hyfi_ctx_destroy(ctx);
    return tu_finish();
}
