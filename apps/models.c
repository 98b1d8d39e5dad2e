/* hyfi models: cnn, ResNet v1/v2 (CIFAR and ImageNet families), AmoebaNet-D.
 * The structures are described in models.h; bench/torch_models.py mirrors
 * them in PyTorch. */
#include "models.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define NAME_LEN 120 /* below hyfi's limit of 126 characters per op name */

/* ------------------------------------------------------------ names */
static const char *const KIND_NAMES[] = {"cnn", "resnet", "amoebanet"};
static const char *const STYLE_NAMES[] = {"auto", "cifar", "imagenet"};

model_config model_config_default(void)
{
    return (model_config){.kind = MODEL_CNN, .num_classes = 10,
                          .resnet_version = MODEL_DEFAULT_RESNET_VERSION,
                          .depth = MODEL_DEFAULT_DEPTH, .style = RESNET_STYLE_AUTO,
                          .num_layers = MODEL_DEFAULT_NUM_LAYERS,
                          .num_filters = MODEL_DEFAULT_NUM_FILTERS};
}

int model_kind_from_name(const char *name, model_kind *kind)
{
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, KIND_NAMES[i])) {
            *kind = (model_kind)i;
            return 0;
        }
    return -1;
}

const char *model_kind_name(model_kind kind)
{
    return (unsigned)kind < 3 ? KIND_NAMES[kind] : "?";
}

int resnet_style_from_name(const char *name, resnet_style *style)
{
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, STYLE_NAMES[i])) {
            *style = (resnet_style)i;
            return 0;
        }
    return -1;
}

const char *resnet_style_name(resnet_style style)
{
    return (unsigned)style < 3 ? STYLE_NAMES[style] : "?";
}

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------ ResNet tables */
typedef struct imagenet_resnet {
    int depth;
    bool bottleneck;
    int blocks[4];
} imagenet_resnet;

static const imagenet_resnet IMAGENET_RESNETS[] = {
    {18, false, {2, 2, 2, 2}},
    {34, false, {3, 4, 6, 3}},
    {50, true, {3, 4, 6, 3}},
    {101, true, {3, 4, 23, 3}},
    {152, true, {3, 8, 36, 3}},
};
#define N_IMAGENET (int)(sizeof IMAGENET_RESNETS / sizeof IMAGENET_RESNETS[0])

static const imagenet_resnet *imagenet_spec(int depth)
{
    for (int i = 0; i < N_IMAGENET; i++)
        if (IMAGENET_RESNETS[i].depth == depth) return &IMAGENET_RESNETS[i];
    return NULL;
}

int model_resnet_is_imagenet(const model_config *c)
{
    if (c->style == RESNET_STYLE_IMAGENET) return 1;
    if (c->style == RESNET_STYLE_CIFAR) return 0;
    return imagenet_spec(c->depth) != NULL;
}

/* Blocks per stage of a CIFAR ResNet (n), or 0 when the depth does not fit. */
static int cifar_blocks(int version, int depth)
{
    int per = version == 1 ? 6 : 9;
    if (depth < per + 2 || (depth - 2) % per) return 0;
    return (depth - 2) / per;
}

int model_min_image_size(const model_config *c)
{
    switch (c->kind) {
    case MODEL_CNN:
        return 4;
    case MODEL_RESNET:
        return model_resnet_is_imagenet(c) ? 32 : 4;
    case MODEL_AMOEBANET:
        return 32;
    }
    return 1;
}

/* ------------------------------------------------------------ checks */
static const char *depth_hint(int version)
{
    return version == 1 ? "6n+2 (8, 14, 20, 32, 44, 56, 110, 164, ...)"
                        : "9n+2 (11, 20, 29, 56, 110, 164, 1001, ...)";
}

int model_check(const model_config *c, int channels, int height, int width, char *err,
                size_t errlen)
{
    if (!c) return fail(err, errlen, "model config is NULL");
    if ((unsigned)c->kind > MODEL_AMOEBANET)
        return fail(err, errlen, "unknown model kind %d; valid: cnn, resnet, amoebanet",
                    (int)c->kind);
    if (c->num_classes < 1)
        return fail(err, errlen, "%d classes: the classifier needs at least one",
                    c->num_classes);
    if (channels < 1 || height < 1 || width < 1)
        return fail(err, errlen, "input of %dx%dx%d: channels and sizes must be positive",
                    channels, height, width);
    if (c->kind == MODEL_RESNET) {
        if (c->resnet_version != 1 && c->resnet_version != 2)
            return fail(err, errlen, "ResNet version %d is not known; valid: 1 (post-activation), "
                                     "2 (pre-activation)", c->resnet_version);
        if ((unsigned)c->style > RESNET_STYLE_IMAGENET)
            return fail(err, errlen, "ResNet style %d is not known; valid: auto, cifar, imagenet",
                        (int)c->style);
        if (c->depth < 1 || c->depth > MODEL_MAX_DEPTH)
            return fail(err, errlen, "ResNet depth %d is out of range 1..%d", c->depth,
                        MODEL_MAX_DEPTH);
        if (model_resnet_is_imagenet(c)) {
            if (!imagenet_spec(c->depth))
                return fail(err, errlen, "ResNet depth %d has no ImageNet-family layout; valid "
                                         "with --resnet-style imagenet: 18, 34, 50, 101, 152 "
                                         "(or --resnet-style cifar/auto for %s depths)",
                            c->depth, depth_hint(c->resnet_version));
        } else if (!cifar_blocks(c->resnet_version, c->depth)) {
            bool other = cifar_blocks(3 - c->resnet_version, c->depth) != 0;
            return fail(err, errlen, "ResNet depth %d is not valid for the CIFAR-family ResNet "
                                     "v%d: use a depth of %s, or one of the ImageNet depths 18, "
                                     "34, 50, 101, 152%s%s",
                        c->depth, c->resnet_version, depth_hint(c->resnet_version),
                        c->style == RESNET_STYLE_CIFAR ? " with --resnet-style auto or imagenet"
                                                       : "",
                        other ? (c->resnet_version == 1 ? "; depth fits --resnet-version 2"
                                                        : "; depth fits --resnet-version 1")
                              : "");
        }
    } else if (c->kind == MODEL_AMOEBANET) {
        if (c->num_layers < 3 || c->num_layers % 3 || c->num_layers > MODEL_MAX_NUM_LAYERS)
            return fail(err, errlen, "AmoebaNet-D --num-layers %d is not valid: it must be a "
                                     "multiple of 3 in 3..%d (L/3 normal cells in each of the "
                                     "three groups), e.g. 6, 18, 36",
                        c->num_layers, MODEL_MAX_NUM_LAYERS);
        if (c->num_filters < 4 || c->num_filters % 4 || c->num_filters > MODEL_MAX_NUM_FILTERS)
            return fail(err, errlen, "AmoebaNet-D --num-filters %d is not valid: it must be a "
                                     "multiple of 4 in 4..%d (the stem has F/4 filters), e.g. "
                                     "64, 256, 416",
                        c->num_filters, MODEL_MAX_NUM_FILTERS);
    }
    int min = model_min_image_size(c);
    if (height < min || width < min) {
        char what[160];
        model_describe(c, what, sizeof what);
        return fail(err, errlen, "images of %dx%d are too small for %s, which downsamples by "
                                 "%d: use images of at least %dx%d (--image-size %d)",
                    height, width, what, min, min, min, min);
    }
    return 0;
}

void model_describe(const model_config *c, char *buf, size_t len)
{
    switch (c->kind) {
    case MODEL_CNN:
        snprintf(buf, len, "cnn (3 conv-bn-relu stages, 2 max-pools)");
        return;
    case MODEL_RESNET: {
        const imagenet_resnet *s = imagenet_spec(c->depth);
        if (model_resnet_is_imagenet(c) && s) {
            snprintf(buf, len, "resnet-%d v%d (ImageNet family, %s blocks [%d,%d,%d,%d]%s)",
                     c->depth, c->resnet_version, s->bottleneck ? "bottleneck" : "basic",
                     s->blocks[0], s->blocks[1], s->blocks[2], s->blocks[3],
                     c->resnet_version == 1 ? ", torchvision layout" : ", pre-activation");
        } else {
            int n = cifar_blocks(c->resnet_version, c->depth);
            snprintf(buf, len, "resnet-%d v%d (CIFAR family, %d %s blocks per stage)", c->depth,
                     c->resnet_version, n,
                     c->resnet_version == 1 ? "basic" : "pre-activation bottleneck");
        }
        return;
    }
    case MODEL_AMOEBANET:
        snprintf(buf, len, "amoebanet-d (L=%d, F=%d: %d normal cells per group)", c->num_layers,
                 c->num_filters, c->num_layers / 3);
        return;
    }
    snprintf(buf, len, "?");
}

/* ------------------------------------------------------------ helpers */
/* Op names: "<prefix>.<suffix>" formatted into a static-size buffer. */
typedef struct {
    char s[NAME_LEN + 8];
} name_t;

__attribute__((format(printf, 1, 2)))
static name_t nm(const char *fmt, ...)
{
    name_t n;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n.s, sizeof n.s, fmt, ap);
    va_end(ap);
    return n;
}

static int dim(const hyfi_tensor *t, int i)
{
    int d[4];
    hyfi_tensor_shape(t, d);
    return d[i];
}

/* Convolution without bias: kernel kh x kw, stride sh x sw, padding ph x pw. */
static hyfi_tensor *conv(hyfi_graph *g, const char *name, hyfi_tensor *x, int cout, int kh,
                         int kw, int sh, int sw, int ph, int pw)
{
    return hyfi_conv2d(g, name, x,
                       (hyfi_conv2d_params){.out_channels = cout, .kernel_h = kh, .kernel_w = kw,
                                            .stride_h = sh, .stride_w = sw, .pad_h = ph,
                                            .pad_w = pw});
}

/* Square k x k convolution, stride s, padding k/2, no bias. */
static hyfi_tensor *convk(hyfi_graph *g, const char *name, hyfi_tensor *x, int cout, int k, int s)
{
    return conv(g, name, x, cout, k, k, s, s, k / 2, k / 2);
}

static hyfi_tensor *bn(hyfi_graph *g, const char *name, hyfi_tensor *x)
{
    return hyfi_batchnorm(g, name, x, (hyfi_batchnorm_params){0});
}

/* The head: global average pool and fc (in the layer "head", begun by the
 * caller where more ops belong to it). */
static hyfi_tensor *classifier(hyfi_graph *g, hyfi_tensor *h, int classes)
{
    h = hyfi_global_avgpool(g, "avgpool", h);
    return hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = classes, .bias = true});
}

/* ------------------------------------------------------------ cnn */
static hyfi_tensor *build_cnn(hyfi_graph *g, const model_config *c, hyfi_tensor *x)
{
    static const struct {
        const char *conv, *bn, *relu, *pool;
        int out;
    } STAGES[3] = {
        {"conv1", "bn1", "relu1", "pool1", 32},
        {"conv2", "bn2", "relu2", "pool2", 64},
        {"conv3", "bn3", "relu3", NULL, 128},
    };
    hyfi_tensor *h = x;
    for (int s = 0; s < 3; s++) {
        hyfi_layer_begin(g, STAGES[s].conv);
        h = convk(g, STAGES[s].conv, h, STAGES[s].out, 3, 1);
        h = bn(g, STAGES[s].bn, h);
        h = hyfi_relu(g, STAGES[s].relu, h);
        if (STAGES[s].pool)
            h = hyfi_maxpool(g, STAGES[s].pool, h, (hyfi_pool_params){.kernel_h = 2, .kernel_w = 2});
    }
    /* "gap" (not "avgpool") keeps the op names of the first hyfi-train. */
    hyfi_layer_begin(g, "head");
    h = hyfi_global_avgpool(g, "gap", h);
    return hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = c->num_classes, .bias = true});
}

/* ------------------------------------------------------------ ResNet v1 */
/* Basic block (torchvision BasicBlock / CIFAR v1 block). */
static hyfi_tensor *v1_basic(hyfi_graph *g, const char *p, hyfi_tensor *x, int width, int stride)
{
    hyfi_tensor *y = convk(g, nm("%s.conv1", p).s, x, width, 3, stride);
    y = bn(g, nm("%s.bn1", p).s, y);
    y = hyfi_relu(g, nm("%s.relu1", p).s, y);
    y = convk(g, nm("%s.conv2", p).s, y, width, 3, 1);
    y = bn(g, nm("%s.bn2", p).s, y);
    hyfi_tensor *sc = x;
    if (x && (stride != 1 || dim(x, 1) != width)) {
        sc = convk(g, nm("%s.downsample.conv", p).s, x, width, 1, stride);
        sc = bn(g, nm("%s.downsample.bn", p).s, sc);
    }
    y = hyfi_add(g, nm("%s.add", p).s, y, sc);
    return hyfi_relu(g, nm("%s.relu", p).s, y);
}

/* Bottleneck (torchvision v1.5: stride on the 3x3). */
static hyfi_tensor *v1_bottleneck(hyfi_graph *g, const char *p, hyfi_tensor *x, int width,
                                  int stride)
{
    hyfi_tensor *y = convk(g, nm("%s.conv1", p).s, x, width, 1, 1);
    y = bn(g, nm("%s.bn1", p).s, y);
    y = hyfi_relu(g, nm("%s.relu1", p).s, y);
    y = convk(g, nm("%s.conv2", p).s, y, width, 3, stride);
    y = bn(g, nm("%s.bn2", p).s, y);
    y = hyfi_relu(g, nm("%s.relu2", p).s, y);
    y = convk(g, nm("%s.conv3", p).s, y, 4 * width, 1, 1);
    y = bn(g, nm("%s.bn3", p).s, y);
    hyfi_tensor *sc = x;
    if (x && (stride != 1 || dim(x, 1) != 4 * width)) {
        sc = convk(g, nm("%s.downsample.conv", p).s, x, 4 * width, 1, stride);
        sc = bn(g, nm("%s.downsample.bn", p).s, sc);
    }
    y = hyfi_add(g, nm("%s.add", p).s, y, sc);
    return hyfi_relu(g, nm("%s.relu", p).s, y);
}

/* ------------------------------------------------------------ ResNet v2 */
/* Pre-activation: bn-relu of x, or x itself when the stem's bn-relu precedes. */
static hyfi_tensor *preact(hyfi_graph *g, const char *p, hyfi_tensor *x, bool on)
{
    if (!on) return x;
    x = bn(g, nm("%s.bn0", p).s, x);
    return hyfi_relu(g, nm("%s.relu0", p).s, x);
}

/* Projection shortcut of v2: 1x1 conv(stride) without bn on the raw input. */
static hyfi_tensor *v2_shortcut(hyfi_graph *g, const char *p, hyfi_tensor *x, int cout,
                                int stride, bool project)
{
    if (!project) return x;
    return convk(g, nm("%s.downsample.conv", p).s, x, cout, 1, stride);
}

/* Pre-activation basic block (ImageNet v2-18/34). */
static hyfi_tensor *v2_basic(hyfi_graph *g, const char *p, hyfi_tensor *x, int width, int stride,
                             bool pre)
{
    hyfi_tensor *y = preact(g, p, x, pre);
    y = convk(g, nm("%s.conv1", p).s, y, width, 3, stride);
    y = bn(g, nm("%s.bn1", p).s, y);
    y = hyfi_relu(g, nm("%s.relu1", p).s, y);
    y = convk(g, nm("%s.conv2", p).s, y, width, 3, 1);
    bool project = x && (stride != 1 || dim(x, 1) != width);
    hyfi_tensor *sc = v2_shortcut(g, p, x, width, stride, project);
    return hyfi_add(g, nm("%s.add", p).s, y, sc);
}

/* Pre-activation bottleneck: conv1x1(width, s1) - conv3x3(width, s2) -
 * conv1x1(cout), stride s1 on the first 1x1 (CIFAR v2, Keras) or s2 on the
 * 3x3 (ImageNet v2). */
static hyfi_tensor *v2_bottleneck(hyfi_graph *g, const char *p, hyfi_tensor *x, int width,
                                  int cout, int s1, int s2, bool pre, bool project)
{
    hyfi_tensor *y = preact(g, p, x, pre);
    y = convk(g, nm("%s.conv1", p).s, y, width, 1, s1);
    y = bn(g, nm("%s.bn1", p).s, y);
    y = hyfi_relu(g, nm("%s.relu1", p).s, y);
    y = convk(g, nm("%s.conv2", p).s, y, width, 3, s2);
    y = bn(g, nm("%s.bn2", p).s, y);
    y = hyfi_relu(g, nm("%s.relu2", p).s, y);
    y = convk(g, nm("%s.conv3", p).s, y, cout, 1, 1);
    hyfi_tensor *sc = v2_shortcut(g, p, x, cout, s1 * s2, project);
    return hyfi_add(g, nm("%s.add", p).s, y, sc);
}

/* ------------------------------------------------------------ ResNets */
static hyfi_tensor *build_resnet_cifar(hyfi_graph *g, const model_config *c, hyfi_tensor *x)
{
    const int n = cifar_blocks(c->resnet_version, c->depth);
    hyfi_layer_begin(g, "stem");
    hyfi_tensor *h = convk(g, "conv1", x, 16, 3, 1);
    h = bn(g, "bn1", h);
    h = hyfi_relu(g, "relu", h);
    if (c->resnet_version == 1) {
        for (int s = 0; s < 3; s++)
            for (int b = 0; b < n; b++) {
                hyfi_layer_begin(g, nm("layer%d.%d", s + 1, b).s);
                h = v1_basic(g, nm("layer%d.%d", s + 1, b).s, h, 16 << s,
                             s > 0 && b == 0 ? 2 : 1);
            }
        hyfi_layer_begin(g, "head");
        return classifier(g, h, c->num_classes);
    }
    int fin = 16;
    for (int s = 0; s < 3; s++) {
        int fout = s == 0 ? 4 * fin : 2 * fin;
        for (int b = 0; b < n; b++) {
            int stride = s > 0 && b == 0 ? 2 : 1;
            hyfi_layer_begin(g, nm("layer%d.%d", s + 1, b).s);
            h = v2_bottleneck(g, nm("layer%d.%d", s + 1, b).s, h, fin, fout, stride, 1,
                              !(s == 0 && b == 0), b == 0);
        }
        fin = fout;
    }
    hyfi_layer_begin(g, "head");
    h = bn(g, "bn_final", h);
    h = hyfi_relu(g, "relu_final", h);
    return classifier(g, h, c->num_classes);
}

static hyfi_tensor *build_resnet_imagenet(hyfi_graph *g, const model_config *c, hyfi_tensor *x)
{
    const imagenet_resnet *spec = imagenet_spec(c->depth);
    const int exp = spec->bottleneck ? 4 : 1;
    hyfi_layer_begin(g, "stem");
    hyfi_tensor *h = convk(g, "conv1", x, 64, 7, 2);
    h = bn(g, "bn1", h);
    h = hyfi_relu(g, "relu", h);
    h = hyfi_maxpool(g, "maxpool", h,
                     (hyfi_pool_params){.kernel_h = 3, .kernel_w = 3, .stride_h = 2,
                                        .stride_w = 2, .pad_h = 1, .pad_w = 1});
    for (int s = 0; s < 4; s++) {
        const int width = 64 << s;
        for (int b = 0; b < spec->blocks[s]; b++) {
            const int stride = s > 0 && b == 0 ? 2 : 1;
            name_t p = nm("layer%d.%d", s + 1, b);
            hyfi_layer_begin(g, p.s);
            if (c->resnet_version == 1) {
                h = spec->bottleneck ? v1_bottleneck(g, p.s, h, width, stride)
                                     : v1_basic(g, p.s, h, width, stride);
            } else {
                const bool pre = !(s == 0 && b == 0);
                if (spec->bottleneck) {
                    bool project = h && (stride != 1 || dim(h, 1) != width * exp);
                    h = v2_bottleneck(g, p.s, h, width, width * exp, 1, stride, pre, project);
                } else {
                    h = v2_basic(g, p.s, h, width, stride, pre);
                }
            }
        }
    }
    hyfi_layer_begin(g, "head");
    if (c->resnet_version == 2) {
        h = bn(g, "bn_final", h);
        h = hyfi_relu(g, "relu_final", h);
    }
    return classifier(g, h, c->num_classes);
}

/* ------------------------------------------------------------ AmoebaNet-D */
typedef enum {
    OP_CONV_1X1,
    OP_CONV_3X3,
    OP_CONV_1X7_7X1,
    OP_MAX_POOL_3X3,
    OP_AVG_POOL_3X3,
    OP_MAX_POOL_2X2,
    OP_NONE
} amoeba_op;

static const char *const AMOEBA_OP_NAMES[] = {
    "conv_1x1", "conv_3x3", "conv_1x7_7x1", "max_pool_3x3", "avg_pool_3x3", "max_pool_2x2",
    "none"};

typedef struct {
    int state;
    amoeba_op op;
} amoeba_edge;

/* The genotype (ten (state, op) pairs: node k = pair 2k-4 + pair 2k-3) and
 * the states concatenated into the cell output: TensorFlow's amoeba_net_d
 * (hiddenstate_indices [1, 1, 1, 0, 0, 0, 2, 2, 1, 5] for the normal cell),
 * as torchgpipe and MPI4DL have it; state 0 is reduce1(prev), 1 reduce2(prev_prev). */
static const amoeba_edge NORMAL_OPS[10] = {
    {1, OP_CONV_1X1},     {1, OP_MAX_POOL_3X3}, /* node 2 */
    {1, OP_NONE},         {0, OP_CONV_1X7_7X1}, /* node 3 */
    {0, OP_CONV_1X1},     {0, OP_CONV_1X7_7X1}, /* node 4 */
    {2, OP_MAX_POOL_3X3}, {2, OP_NONE},         /* node 5 */
    {1, OP_AVG_POOL_3X3}, {5, OP_CONV_1X1},     /* node 6 */
};
static const int NORMAL_CONCAT[] = {0, 3, 4, 6};
static const amoeba_edge REDUCTION_OPS[10] = {
    {0, OP_MAX_POOL_2X2}, {0, OP_MAX_POOL_3X3}, /* node 2 */
    {2, OP_NONE},         {1, OP_CONV_3X3},     /* node 3 */
    {2, OP_CONV_1X7_7X1}, {2, OP_MAX_POOL_3X3}, /* node 4 */
    {3, OP_NONE},         {1, OP_MAX_POOL_2X2}, /* node 5 */
    {2, OP_AVG_POOL_3X3}, {3, OP_CONV_1X1},     /* node 6 */
};
static const int REDUCTION_CONCAT[] = {4, 5, 6};

/* relu-conv(kh x kw, stride sh x sw)-bn named <p>.relu<i>/.conv<i>/.bn<i>
 * (no index when i is 0); `r` is x already through a relu, or NULL. */
static hyfi_tensor *relu_conv_bn(hyfi_graph *g, const char *p, int i, hyfi_tensor *x,
                                 hyfi_tensor *r, int cout, int kh, int kw, int sh, int sw)
{
    name_t idx = i ? nm("%d", i) : nm("%s", "");
    if (!r) r = hyfi_relu(g, nm("%s.relu%s", p, idx.s).s, x);
    hyfi_tensor *y = conv(g, nm("%s.conv%s", p, idx.s).s, r, cout, kh, kw, sh, sw, kh / 2, kw / 2);
    return bn(g, nm("%s.bn%s", p, idx.s).s, y);
}

/* Factorized reduction: relu, two 1x1/2 convs to cout/2 each, concat, bn. */
static hyfi_tensor *factorized_reduce(hyfi_graph *g, const char *p, hyfi_tensor *x,
                                      hyfi_tensor *r, int cout)
{
    if (!r) r = hyfi_relu(g, nm("%s.relu", p).s, x);
    hyfi_tensor *ys[2] = {convk(g, nm("%s.conv1", p).s, r, cout / 2, 1, 2),
                          convk(g, nm("%s.conv2", p).s, r, cout / 2, 1, 2)};
    hyfi_tensor *y = hyfi_concat(g, nm("%s.cat", p).s, ys, 2);
    return bn(g, nm("%s.bn", p).s, y);
}

/* One op of a cell on state x (relu(x) = *r, created on first use, shared by
 * the ops of the cell that start with a relu) with c channels. */
static hyfi_tensor *amoeba_apply(hyfi_graph *g, const char *p, amoeba_op op, hyfi_tensor *x,
                                 hyfi_tensor **r, const char *rname, int c, int stride)
{
    const bool relu_first = op == OP_CONV_1X1 || op == OP_CONV_3X3 || op == OP_CONV_1X7_7X1 ||
                            (op == OP_NONE && stride != 1);
    if (relu_first && !*r) *r = hyfi_relu(g, rname, x);
    switch (op) {
    case OP_CONV_1X1:
        return relu_conv_bn(g, p, 0, x, *r, c, 1, 1, stride, stride);
    case OP_CONV_3X3: {
        hyfi_tensor *y = relu_conv_bn(g, p, 1, x, *r, c / 4, 1, 1, 1, 1);
        y = relu_conv_bn(g, p, 2, y, NULL, c / 4, 3, 3, stride, stride);
        return relu_conv_bn(g, p, 3, y, NULL, c, 1, 1, 1, 1);
    }
    case OP_CONV_1X7_7X1: {
        hyfi_tensor *y = relu_conv_bn(g, p, 1, x, *r, c / 4, 1, 1, 1, 1);
        y = relu_conv_bn(g, p, 2, y, NULL, c / 4, 1, 7, 1, stride);
        y = relu_conv_bn(g, p, 3, y, NULL, c / 4, 7, 1, stride, 1);
        return relu_conv_bn(g, p, 4, y, NULL, c, 1, 1, 1, 1);
    }
    case OP_MAX_POOL_3X3:
        return hyfi_maxpool(g, nm("%s.pool", p).s, x,
                            (hyfi_pool_params){.kernel_h = 3, .kernel_w = 3, .stride_h = stride,
                                               .stride_w = stride, .pad_h = 1, .pad_w = 1});
    case OP_AVG_POOL_3X3:
        return hyfi_avgpool(g, nm("%s.pool", p).s, x,
                            (hyfi_pool_params){.kernel_h = 3, .kernel_w = 3, .stride_h = stride,
                                               .stride_w = stride, .pad_h = 1, .pad_w = 1,
                                               .count_include_pad = false});
    case OP_MAX_POOL_2X2: {
        /* pad an odd side by one: ceil(H / 2) outputs like the other stride-2
         * ops (each window keeps at least one image pixel) */
        int ph = x && stride == 2 ? dim(x, 2) % 2 : 0, pw = x && stride == 2 ? dim(x, 3) % 2 : 0;
        return hyfi_maxpool(g, nm("%s.pool", p).s, x,
                            (hyfi_pool_params){.kernel_h = 2, .kernel_w = 2, .stride_h = stride,
                                               .stride_w = stride, .pad_h = ph, .pad_w = pw});
    }
    case OP_NONE:
        return stride == 1 ? x : factorized_reduce(g, p, x, *r, c);
    }
    return NULL;
}

typedef struct {
    hyfi_tensor *prev, *prev_prev; /* outputs of the two previous cells */
    int c_prev, c_prev_prev;
    bool reduction_prev;
} amoeba_state;

/* One cell of `c` channels; updates st and returns the cell output. */
static hyfi_tensor *amoeba_cell(hyfi_graph *g, const char *p, amoeba_state *st, int c,
                                bool reduction)
{
    hyfi_tensor *s[7] = {NULL}, *r[7] = {NULL};
    hyfi_layer_begin(g, p);
    s[0] = relu_conv_bn(g, nm("%s.reduce1", p).s, 0, st->prev, NULL, c, 1, 1, 1, 1);
    if (st->reduction_prev)
        s[1] = factorized_reduce(g, nm("%s.reduce2", p).s, st->prev_prev, NULL, c);
    else if (st->c_prev_prev != c)
        s[1] = relu_conv_bn(g, nm("%s.reduce2", p).s, 0, st->prev_prev, NULL, c, 1, 1, 1, 1);
    else
        s[1] = st->prev_prev;
    const amoeba_edge *ops = reduction ? REDUCTION_OPS : NORMAL_OPS;
    for (int k = 2; k < 7; k++) {
        hyfi_tensor *h[2];
        for (int j = 0; j < 2; j++) {
            const amoeba_edge *e = &ops[2 * (k - 2) + j];
            const int stride = reduction && e->state < 2 ? 2 : 1;
            h[j] = amoeba_apply(g, nm("%s.op%d.%s", p, 2 * (k - 2) + j, AMOEBA_OP_NAMES[e->op]).s,
                                e->op, s[e->state], &r[e->state],
                                nm("%s.s%d.relu", p, e->state).s, c, stride);
        }
        s[k] = hyfi_add(g, nm("%s.node%d", p, k).s, h[0], h[1]);
    }
    const int *cat = reduction ? REDUCTION_CONCAT : NORMAL_CONCAT;
    const int ncat = reduction ? 3 : 4;
    hyfi_tensor *xs[4];
    for (int i = 0; i < ncat; i++) xs[i] = s[cat[i]];
    hyfi_tensor *out = hyfi_concat(g, nm("%s.concat", p).s, xs, ncat);
    st->prev_prev = st->prev;
    st->c_prev_prev = st->c_prev;
    st->prev = out;
    st->c_prev = c * ncat;
    st->reduction_prev = reduction;
    return out;
}

static hyfi_tensor *build_amoebanet(hyfi_graph *g, const model_config *c, hyfi_tensor *x)
{
    const int repeat = c->num_layers / 3;
    int ch = c->num_filters / 4;
    /* stem: relu-conv3x3/2-bn (the reference applies the relu to the image) */
    hyfi_layer_begin(g, "stem1");
    hyfi_tensor *h = hyfi_relu(g, "stem1.relu", x);
    h = convk(g, "stem1.conv", h, ch, 3, 2);
    h = bn(g, "stem1.bn", h);
    amoeba_state st = {.prev = h, .prev_prev = h, .c_prev = ch, .c_prev_prev = ch};
    ch *= 2;
    amoeba_cell(g, "stem2", &st, ch, true);
    ch *= 2;
    amoeba_cell(g, "stem3", &st, ch, true);
    for (int grp = 0; grp < 3; grp++) {
        if (grp > 0) {
            ch *= 2;
            amoeba_cell(g, nm("cell%d_reduction", 2 * grp).s, &st, ch, true);
        }
        for (int i = 0; i < repeat; i++)
            amoeba_cell(g, nm("cell%d_normal%d", 2 * grp + 1, i + 1).s, &st, ch, false);
    }
    hyfi_layer_begin(g, "head");
    return classifier(g, st.prev, c->num_classes);
}

/* ------------------------------------------------------------ entry */
hyfi_tensor *hyfi_model_build(hyfi_graph *g, const model_config *c, hyfi_tensor *x, char *err,
                              size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (!g || !x) {
        fail(err, errlen, "hyfi_model_build: %s is NULL", !g ? "the graph" : "the input tensor");
        return NULL;
    }
    if (hyfi_graph_status(g) != HYFI_OK) {
        fail(err, errlen, "hyfi_model_build: the graph already has an error: %s",
             hyfi_graph_error(g));
        return NULL;
    }
    int d[4];
    hyfi_tensor_shape(x, d);
    if (model_check(c, d[1], d[2], d[3], err, errlen)) return NULL;
    hyfi_tensor *logits = NULL;
    switch (c->kind) {
    case MODEL_CNN:
        logits = build_cnn(g, c, x);
        break;
    case MODEL_RESNET:
        logits = model_resnet_is_imagenet(c) ? build_resnet_imagenet(g, c, x)
                                             : build_resnet_cifar(g, c, x);
        break;
    case MODEL_AMOEBANET:
        logits = build_amoebanet(g, c, x);
        break;
    }
    if (hyfi_graph_status(g) != HYFI_OK || !logits) {
        char what[160];
        model_describe(c, what, sizeof what);
        fail(err, errlen, "building %s failed (%s): %s", what,
             hyfi_status_name(hyfi_graph_status(g)), hyfi_graph_error(g));
        return NULL;
    }
    return logits;
}

/* ------------------------------------------------------------ export names */
/* Output of model_export_name: pieces appended with overflow detection. */
typedef struct {
    char *s;
    size_t len, used;
    bool overflow;
} name_out;

__attribute__((format(printf, 2, 3)))
static void put(name_out *o, const char *fmt, ...)
{
    if (o->overflow) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->s + o->used, o->len - o->used, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= o->len - o->used)
        o->overflow = true;
    else
        o->used += (size_t)k;
}

/* "conv" -> 1, "bn" -> 2, "conv<k>" -> 3k-2, "bn<k>" -> 3k-1: the position of
 * a hyfi relu-conv-bn's conv or bn in torchgpipe's flat nn.Sequential of
 * (ReLU, Conv2d, BatchNorm2d) triples; -1 for anything else. */
static int amoeba_seq_index(const char *m)
{
    int base;
    if (!strncmp(m, "conv", 4)) {
        base = 1;
        m += 4;
    } else if (!strncmp(m, "bn", 2)) {
        base = 2;
        m += 2;
    } else {
        return -1;
    }
    if (!*m) return base;
    if (m[0] < '1' || m[0] > '9' || m[1]) return -1;
    return base + 3 * (m[0] - '1');
}

/* Whether cell `p` follows a reduction cell (its reduce2 is then a
 * factorized reduction): stem3 and the first normal cell of each group. */
static bool amoeba_after_reduction(const char *p)
{
    int grp, len = 0;
    if (!strcmp(p, "stem3")) return true;
    return sscanf(p, "cell%d_normal1%n", &grp, &len) == 1 && len > 0 && !p[len];
}

int model_export_name(const model_config *c, const char *name, char *out, size_t len)
{
    enum { MAX_PARTS = 16 };
    char buf[2 * NAME_LEN + 8];
    const char *t[MAX_PARTS];
    int n = 0;
    if (!c || !name || !out || !len) return -1;
    size_t nl = strlen(name);
    if (nl >= sizeof buf) return -1;
    memcpy(buf, name, nl + 1);
    for (char *p = buf; p; n++) {
        if (n == MAX_PARTS) return -1;
        t[n] = p;
        p = strchr(p, '.');
        if (p) *p++ = 0;
    }
    /* batch norm's scale and shift are PyTorch's weight and bias */
    if (n >= 2 && !strcmp(t[n - 1], "gamma")) t[n - 1] = "weight";
    if (n >= 2 && !strcmp(t[n - 1], "beta")) t[n - 1] = "bias";

    name_out o = {.s = out, .len = len};
    out[0] = 0;
    int first = 0;
    if (c->kind == MODEL_AMOEBANET && n == 2 && !strcmp(t[0], "fc")) {
        put(&o, "classify.");
    } else if (c->kind == MODEL_AMOEBANET && n == 4 &&
               (!strcmp(t[1], "reduce1") ||
                (!strcmp(t[1], "reduce2") && !amoeba_after_reduction(t[0]))) &&
               (!strcmp(t[2], "conv") || !strcmp(t[2], "bn"))) {
        /* relu_conv_bn: nn.Sequential(ReLU, Conv2d, BatchNorm2d); reduce2
         * after a reduction cell is a factorized reduction, whose names stay */
        put(&o, "%s.%s.%s.%s", t[0], t[1], !strcmp(t[2], "conv") ? "1" : "2", t[3]);
        first = n;
    } else if (c->kind == MODEL_AMOEBANET && n == 5 && !strncmp(t[1], "op", 2) &&
               t[1][2] >= '0' && t[1][2] <= '9') {
        /* <cell>.op<j>.<op>.<module>: Cell.operations[j], an Operation whose
         * .module is the op's nn.Sequential (convolutions) or, for `none`
         * with stride 2, a FactorizedReduce (conv1, conv2, bn, as in hyfi) */
        put(&o, "%s.operations.%s.module.", t[0], t[1] + 2);
        int k = strcmp(t[2], "none") ? amoeba_seq_index(t[3]) : -1;
        if (k > 0)
            put(&o, "%d.%s", k, t[4]);
        else
            put(&o, "%s.%s", t[3], t[4]);
        first = n;
    }
    for (int i = first; i < n; i++) {
        const char *p = t[i];
        /* the projection shortcut: nn.Sequential(conv, bn) as in torchvision */
        if (c->kind == MODEL_RESNET && i > 0 && i < n - 1 && !strcmp(t[i - 1], "downsample"))
            p = !strcmp(p, "conv") ? "0" : !strcmp(p, "bn") ? "1" : p;
        put(&o, "%s%s", i > first ? "." : "", p);
    }
    if (o.overflow) {
        out[0] = 0;
        return -1;
    }
    return 0;
}

int model_export_rename(const char *name, char *out, size_t len, void *config)
{
    return model_export_name((const model_config *)config, name, out, len);
}
