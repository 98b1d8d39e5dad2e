/* Helper of the 'torch_export' test (tests/torch_export.py): one model of
 * apps/models.c on a CPU context, with the tensor names it exports under.
 *
 *   torch_logits MODEL-FLAGS --names
 *       prints "hyfi-name export-name numel" for every parameter and running
 *       statistic (the graph is built, not compiled);
 *   torch_logits MODEL-FLAGS --batch N [--load F] [--input X --output Y]
 *                [--train-mode] [--save G]
 *       compiles the model for N images, loads F (hyfi_load_safetensors with
 *       model_export_name), runs hyfi_infer on X (raw float32, N x C x H x W;
 *       --train-mode: hyfi_forward in training mode, batch norm with the
 *       batch's statistics) and writes the logits to Y (raw float32, N x
 *       classes); --save writes the model back (hyfi_save_safetensors, the
 *       same names; after --train-mode with the updated running statistics).
 *
 * MODEL-FLAGS are hyfi-train's: --model, --depth, --resnet-version,
 * --resnet-style, --num-layers, --num-filters, --num-classes, --channels,
 * --image-size. Exit status 0, 1 on a failure (with a message), 2 on bad flags. */
#include "tu_env.h"
#include "models.h"

#include <hyfi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    model_config model;
    int channels, size, batch;
    bool names, train_mode;
    const char *load, *input, *output, *save;
} options;

static int usage(const char *msg, const char *arg)
{
    fprintf(stderr, "torch_logits: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 2;
}

static int parse_int(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > 1 << 30) return -1;
    *out = (int)v;
    return 0;
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){.model = model_config_default(), .channels = 3, .size = 32, .batch = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--names") || !strcmp(a, "--train-mode")) {
            *(!strcmp(a, "--names") ? &o->names : &o->train_mode) = true;
            continue;
        }
        if (i + 1 >= argc) return usage("missing value after", a);
        const char *v = argv[++i];
        int *num = !strcmp(a, "--depth")          ? &o->model.depth
                   : !strcmp(a, "--resnet-version") ? &o->model.resnet_version
                   : !strcmp(a, "--num-layers")     ? &o->model.num_layers
                   : !strcmp(a, "--num-filters")    ? &o->model.num_filters
                   : !strcmp(a, "--num-classes")    ? &o->model.num_classes
                   : !strcmp(a, "--channels")       ? &o->channels
                   : !strcmp(a, "--image-size")     ? &o->size
                   : !strcmp(a, "--batch")          ? &o->batch
                                                    : NULL;
        if (num) {
            if (parse_int(v, num)) return usage("not a number", v);
        } else if (!strcmp(a, "--model")) {
            if (model_kind_from_name(v, &o->model.kind)) return usage("unknown model", v);
        } else if (!strcmp(a, "--resnet-style")) {
            if (resnet_style_from_name(v, &o->model.style)) return usage("unknown style", v);
        } else if (!strcmp(a, "--load")) {
            o->load = v;
        } else if (!strcmp(a, "--input")) {
            o->input = v;
        } else if (!strcmp(a, "--output")) {
            o->output = v;
        } else if (!strcmp(a, "--save")) {
            o->save = v;
        } else {
            return usage("unknown flag", a);
        }
    }
    if (!o->input != !o->output) return usage("--input and --output go together", NULL);
    return 0;
}

static int print_name(const model_config *c, const hyfi_tensor *t)
{
    char out[256];
    if (model_export_name(c, hyfi_tensor_name(t), out, sizeof out)) {
        fprintf(stderr, "torch_logits: no export name for %s\n", hyfi_tensor_name(t));
        return 1;
    }
    printf("%s %s %zu\n", hyfi_tensor_name(t), out, hyfi_tensor_numel(t));
    return 0;
}

/* Every parameter, then the running statistics of every batch norm. */
static int list_names(hyfi_graph *g, const model_config *c)
{
    int bad = 0;
    for (int i = 0; i < hyfi_param_count(g); i++) bad |= print_name(c, hyfi_param(g, i));
    for (int i = 0; i < hyfi_graph_op_count(g); i++) {
        hyfi_op_info oi;
        if (hyfi_graph_op_info(g, i, &oi) != HYFI_OK || strcmp(oi.kind, "batchnorm")) continue;
        for (int k = 0; k < 2; k++) {
            char name[256];
            snprintf(name, sizeof name, "%s.%s", oi.name, k ? "running_var" : "running_mean");
            hyfi_tensor *t = hyfi_tensor_find(g, name);
            if (!t) {
                fprintf(stderr, "torch_logits: batch norm %s has no %s\n", oi.name, name);
                bad = 1;
                continue;
            }
            bad |= print_name(c, t);
        }
    }
    return bad;
}

static int read_file(const char *path, float *x, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t got = fread(x, sizeof *x, n, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != n || extra != EOF) {
        fprintf(stderr, "torch_logits: %s does not hold exactly %zu float32 values\n", path, n);
        return 1;
    }
    return 0;
}

static int write_file(const char *path, const float *y, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t put = fwrite(y, sizeof *y, n, f);
    if (fclose(f) || put != n) {
        fprintf(stderr, "torch_logits: writing %s failed\n", path);
        return 1;
    }
    return 0;
}

static int run(hyfi_ctx *ctx, const options *o)
{
    char err[512];
    hyfi_graph *g;
    if (hyfi_graph_create(ctx, 1, &g) != HYFI_OK) {
        fprintf(stderr, "torch_logits: hyfi_graph_create: %s\n", hyfi_last_error());
        return 1;
    }
    const int n = o->batch, k = o->model.num_classes;
    hyfi_tensor *x = hyfi_input(g, "image", n, o->channels, o->size, o->size);
    hyfi_tensor *y = hyfi_labels(g, "label", n);
    hyfi_tensor *logits = hyfi_model_build(g, &o->model, x, err, sizeof err);
    if (!logits) {
        fprintf(stderr, "torch_logits: %s\n", err);
        hyfi_graph_destroy(g);
        return 1;
    }
    if (o->names) {
        int rc = list_names(g, &o->model);
        hyfi_graph_destroy(g);
        return rc;
    }
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", logits, y);
    const size_t nx = (size_t)n * (size_t)o->channels * (size_t)o->size * (size_t)o->size;
    float *img = calloc(nx, sizeof *img), *out = calloc((size_t)n * (size_t)k, sizeof *out);
    int32_t *lab = calloc((size_t)n, sizeof *lab);
    hyfi_export_options eo = {.rename = model_export_rename, .user = (void *)&o->model};
    int rc = 1;
    if (!img || !out || !lab) {
        fprintf(stderr, "torch_logits: out of memory\n");
    } else if (hyfi_graph_compile(g, loss, NULL) != HYFI_OK) {
        fprintf(stderr, "torch_logits: compile: %s\n", hyfi_graph_error(g));
    } else if (o->load && hyfi_load_safetensors(g, o->load, &eo) != HYFI_OK) {
        fprintf(stderr, "torch_logits: loading %s: %s\n", o->load, hyfi_last_error());
    } else if (o->input &&
               (read_file(o->input, img, nx) || hyfi_set_input(g, x, img, nx) != HYFI_OK ||
                hyfi_set_labels(g, y, lab, (size_t)n) != HYFI_OK ||
                (o->train_mode ? hyfi_forward(g, true, NULL) : hyfi_infer(g, NULL)) != HYFI_OK ||
                hyfi_tensor_read(g, logits, out, (size_t)n * (size_t)k) != HYFI_OK ||
                write_file(o->output, out, (size_t)n * (size_t)k))) {
        fprintf(stderr, "torch_logits: inference failed: %s\n", hyfi_last_error());
    } else if (o->save && hyfi_save_safetensors(g, o->save, &eo) != HYFI_OK) {
        fprintf(stderr, "torch_logits: saving %s: %s\n", o->save, hyfi_last_error());
    } else {
        rc = 0;
    }
    free(img);
    free(out);
    free(lab);
    hyfi_graph_destroy(g);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    hyfi_ctx *ctx;
    hyfi_ctx_config cc = hyfi_ctx_config_default();
    cc.device = HYFI_DEVICE_CPU;
    cc.mpi = 0;
    cc.bind_workers = 0;
    tu_ctx_env(&cc);
    if (hyfi_ctx_create(&cc, &ctx) != HYFI_OK) {
        fprintf(stderr, "torch_logits: hyfi_ctx_create: %s\n", hyfi_last_error());
        return 1;
    }
    rc = run(ctx, &o);
    hyfi_ctx_destroy(ctx);
    return rc;
}
