/* hyfi models: the networks of hyfi-train, built with the public builders of
 * hyfi.h only (conv2d, batchnorm, relu, pools, add, concat, fc). bench/
 * torch_models.py holds PyTorch twins of every model here, layer for layer,
 * and tests/test_models.c checks that the parameter counts agree.
 *
 * hyfi_model_build() appends a model to a graph after the input x (N,C,H,W)
 * and returns the logits (N, num_classes, 1, 1), named "fc". The caller adds
 * the labels and the loss. Every convolution that batch norm follows, and
 * every ResNet and AmoebaNet convolution, has no bias; the classifier (fc)
 * has one. Batch norm uses momentum 0.1, eps 1e-5 (PyTorch's defaults).
 *
 * cnn: conv3x3(32)-bn-relu-maxpool2, conv3x3(64)-bn-relu-maxpool2,
 *      conv3x3(128)-bn-relu, global average pool, fc. Images >= 4x4.
 *
 * resnet (--depth D, --resnet-version 1|2, --resnet-style auto|cifar|imagenet)
 *   Which family a depth selects (style auto, the default):
 *     D in {18, 34, 50, 101, 152}  ImageNet family (both versions), whatever
 *                                  the image size;
 *     any other D                  CIFAR family: D = 6n+2 (v1, n >= 1:
 *                                  8, 14, 20, 32, 44, 56, 110, 164, ...) or
 *                                  D = 9n+2 (v2, n >= 1: 11, 20, 29, 56,
 *                                  110, 164, 1001, ...); other depths are
 *                                  refused with the valid ones.
 *   style cifar forces the CIFAR family (e.g. the CIFAR v1-50, n = 8, or
 *   MPI4DL's v2-101, n = 11); style imagenet forces the ImageNet family
 *   (only the five depths above).
 *
 *   CIFAR v1 (He et al. 2015, sec. 4.2; 6n+2 layers): conv3x3(16)-bn-relu;
 *     three stages of n basic blocks with 16, 32, 64 filters (stride 2 in
 *     the first block of stages 2 and 3); block = conv3x3(stride)-bn-relu-
 *     conv3x3-bn, plus the shortcut (identity, or a projection 1x1
 *     conv(stride) + bn where the shape changes; the Keras example's and
 *     MPI4DL's projection has no bn and their convolutions have biases), then
 *     relu; global average pool, fc. ResNet-20: 272,474 parameters with 10
 *     classes. Images >= 4.
 *   CIFAR v2 (pre-activation bottleneck, He et al. 2016, as in the Keras
 *     example / MPI4DL's get_resnet_v2; 9n+2 layers): conv3x3(16)-bn-relu;
 *     three stages of n bottleneck blocks, 16->64, 64->128, 128->256 (the
 *     bottleneck width is the stage's input width 16, 64, 128; stride 2 on
 *     the first 1x1 conv of stages 2 and 3); block = [bn-relu] conv1x1 -
 *     bn-relu-conv3x3 - bn-relu-conv1x1, plus the shortcut (identity, or a 1x1
 *     conv(stride) without bn on the block input in every stage's first
 *     block), no relu after the sum; the very first block has no leading
 *     bn-relu (the stem's follows); then bn-relu, global average pool, fc.
 *     These are Keras's widths (bottlenecks of 16, 64, 128), wider than He et
 *     al.'s 16, 32, 64: v2-110 has 3,291,610 parameters with 10 classes,
 *     v2-164 4,925,530, v2-1001 30,251,290. Unlike Keras and MPI4DL, the
 *     convolutions have no bias, and the pool is global (theirs is an 8x8
 *     average pool: the same at 32x32). Images >= 4.
 *   ImageNet v1 = torchvision's resnet18/34/50/101/152 (v1.5: stride on the
 *     3x3 conv of bottlenecks): conv7x7/2(64)-bn-relu-maxpool3x3/2, stages of
 *     [2,2,2,2] / [3,4,6,3] basic blocks (18/34) or [3,4,6,3] / [3,4,23,3] /
 *     [3,8,36,3] bottlenecks (50/101/152) of width 64, 128, 256, 512
 *     (expansion 4 for bottlenecks), projection 1x1 conv + bn; global average
 *     pool, fc. Parameter counts equal torchvision's exactly (3 input
 *     channels, 1000 classes: 11,689,512 / 21,797,672 / 25,557,032 /
 *     44,549,160 / 60,192,808). Images >= 32 (downsampling by 32).
 *   ImageNet v2 = the pre-activation ResNet of He et al. 2016 on the same
 *     stem, stages and widths as v1: blocks [bn-relu] conv3x3(stride) -
 *     bn-relu-conv3x3 (basic) or [bn-relu] conv1x1 - bn-relu-conv3x3(stride) -
 *     bn-relu-conv1x1 (bottleneck), shortcut identity or a 1x1 conv(stride)
 *     without bn on the block input, no relu after the sum, no leading
 *     bn-relu in the first block (the stem's bn-relu-maxpool precedes it);
 *     then bn-relu, global average pool, fc. Images >= 32.
 *
 * amoebanet (--num-layers L, divisible by 3; --num-filters F, a multiple of 4)
 *   AmoebaNet-D (Real et al. 2019) with the genotype and layout of the GPipe
 *   implementation in TensorFlow that torchgpipe's benchmark (and MPI4DL) use:
 *   stem = relu-conv3x3/2(F/4)-bn; two reduction cells (stem2, stem3);
 *   L/3 normal cells; a reduction cell; L/3 normal cells; a reduction cell;
 *   L/3 normal cells; global average pool; fc. Cell widths: F/2 and F for
 *   the stem cells, F, 2F, 4F for the three groups of normal cells (and the
 *   reduction cell that opens the group). A cell takes the outputs of the two
 *   previous cells (prev, prev_prev): prev -> relu-conv1x1-bn to the cell
 *   width; prev_prev -> a factorized reduction (relu, two 1x1/2 convs to half
 *   the width each, concatenated, bn) when the previous cell was a reduction,
 *   else relu-conv1x1-bn when its width differs, else as is. These two are
 *   states 0 and 1; each of five nodes adds two ops applied to earlier states:
 *     normal:    2 = conv1x1(1) + maxpool3x3(1)      3 = id(1) + conv1x7_7x1(0)
 *                4 = conv1x1(0) + conv1x7_7x1(0)      5 = maxpool3x3(2) + id(2)
 *                6 = avgpool3x3(1) + conv1x1(5)       output: concat(0, 3, 4, 6)
 *     reduction: 2 = maxpool2x2/2(0) + maxpool3x3/2(0) 3 = id(2) + conv3x3/2(1)
 *                4 = conv1x7_7x1(2) + maxpool3x3(2)    5 = id(3) + maxpool2x2/2(1)
 *                6 = avgpool3x3(2) + conv1x1(3)        output: concat(4, 5, 6)
 *   (ops on states 0 and 1 of a reduction cell have stride 2). conv1x1 =
 *   relu-conv1x1-bn; conv3x3 = relu-conv1x1(c/4)-bn-relu-conv3x3(c/4)-bn-relu-
 *   conv1x1(c)-bn; conv1x7_7x1 = relu-conv1x1(c/4)-bn-relu-conv1x7(c/4)-bn-
 *   relu-conv7x1(c/4)-bn-relu-conv1x1(c)-bn (a stride of 2 is split over the
 *   1x7 (width) and 7x1 (height)); 3x3 pools have padding 1, average pools do
 *   not count the padding. The AmoebaNet-D genotype has no separable
 *   convolutions (those belong to AmoebaNet-A/B).
 *   Differences from torchgpipe's code, none of which changes a parameter
 *   count (the cells' wiring is TensorFlow's genotype, as torchgpipe's and
 *   MPI4DL's): maxpool3x3 is a max pool (torchgpipe builds an average pool there,
 *   a known slip); the factorized reduction applies both 1x1/2 convs to the
 *   same pixels (MPI4DL's variant: hyfi has no slicing op for torchgpipe's
 *   one-pixel shift); maxpool2x2/2 pads a side of odd length by one (ceil
 *   behaviour, so that every image size >= 32 works, e.g. 48 and 96, where
 *   torchgpipe fails); the classifier pools globally (MPI4DL) instead of a
 *   fixed 7x7 window; ReLUs that several ops apply to the same state are
 *   computed once. With 1000 classes AmoebaNet-D(18, 208) has 81,505,540
 *   parameters and (18, 416) 319,024,120 (GPipe's table 1: 82M and 318M).
 *   Images >= 32 (downsampling by 32). MPI4DL's defaults L = 18, F = 416 are
 *   that 312M-parameter model (10 classes): fine for --dry-run, very slow to
 *   train on CPUs; try --num-layers 6 --num-filters 64 (2.7M) there.
 *
 * Layers (hyfi_layer_begin, the units of --balance and of stage partitioning):
 * cnn: conv1, conv2, conv3 (each with its bn, relu, pool), head; ResNet: stem,
 * one per residual block ("layer2.3"), head (final bn-relu of v2, pool, fc,
 * and the loss the caller adds); AmoebaNet: stem1, one per cell, head.
 *
 * Op names follow torchvision where there is a counterpart ("conv1",
 * "layer2.0.downsample.conv", "fc") and torchgpipe's module names for
 * AmoebaNet ("stem2", "cell1_normal3", "cell2_reduction", ...).
 */
#ifndef HYFI_APPS_MODELS_H
#define HYFI_APPS_MODELS_H

#include <hyfi.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum model_kind {
    MODEL_CNN = 0,
    MODEL_RESNET,
    MODEL_AMOEBANET
} model_kind;

typedef enum resnet_style {
    RESNET_STYLE_AUTO = 0, /* by depth: 18/34/50/101/152 ImageNet, others CIFAR */
    RESNET_STYLE_CIFAR,
    RESNET_STYLE_IMAGENET
} resnet_style;

typedef struct model_config {
    model_kind kind;
    int num_classes;          /* >= 1 */
    /* resnet */
    int resnet_version;       /* 1 or 2 */
    int depth;
    resnet_style style;
    /* amoebanet */
    int num_layers;           /* L: a positive multiple of 3 */
    int num_filters;          /* F: a positive multiple of 4 */
} model_config;

/* Defaults of hyfi-train: cnn, 10 classes, ResNet v1 depth 20 (style auto),
 * AmoebaNet-D L = 18, F = 416 (MPI4DL's). */
#define MODEL_DEFAULT_RESNET_VERSION 1
#define MODEL_DEFAULT_DEPTH 20
#define MODEL_DEFAULT_NUM_LAYERS 18
#define MODEL_DEFAULT_NUM_FILTERS 416
#define MODEL_MAX_DEPTH 10001
#define MODEL_MAX_NUM_LAYERS 3000
#define MODEL_MAX_NUM_FILTERS 65536
model_config model_config_default(void);

/* "cnn" | "resnet" | "amoebanet" <-> kind; from_name returns 0, or -1 for an
 * unknown name. */
int model_kind_from_name(const char *name, model_kind *kind);
const char *model_kind_name(model_kind kind);
/* "auto" | "cifar" | "imagenet" <-> style (0 or -1 as above). */
int resnet_style_from_name(const char *name, resnet_style *style);
const char *resnet_style_name(resnet_style style);

/* Whether a ResNet config resolves to the ImageNet family (style and depth;
 * meaningful once model_check() passes). */
int model_resnet_is_imagenet(const model_config *c);

/* Smallest image side the model takes (its total downsampling): cnn 4,
 * CIFAR ResNets 4, ImageNet ResNets 32, AmoebaNet 32. */
int model_min_image_size(const model_config *c);

/* Check a config against an input of channels x height x width: 0, or -1
 * with a message in err naming the problem and the fix (err may be NULL). */
int model_check(const model_config *c, int channels, int height, int width, char *err,
                size_t errlen);

/* One line describing the resolved model, e.g. "resnet-50 v1 (ImageNet
 * family, bottleneck blocks [3,4,6,3], torchvision layout)". */
void model_describe(const model_config *c, char *buf, size_t len);
/* Append the model to g after x (N,C,H,W); returns the logits (N, classes,
 * 1, 1), or NULL with a message in err (a bad config, checked first with
 * model_check, or a builder error of the graph). */
hyfi_tensor *hyfi_model_build(hyfi_graph *g, const model_config *c, hyfi_tensor *x, char *err,
                              size_t errlen);

/* The name hyfi tensor `name` of model c (a parameter or a running
 * statistic: "layer1.0.downsample.conv.weight", "bn1.running_mean",
 * "fc.weight") has in an exported model (hyfi_save_safetensors), so that the
 * file loads strictly into the model's PyTorch counterpart:
 *   - every model: a batch norm's gamma and beta are "weight" and "bias";
 *   - ResNets: a projection shortcut "<block>.downsample.conv" / ".bn" is
 *     "<block>.downsample.0" / ".1": torchvision's state_dict keys for the
 *     ImageNet v1 family (resnet18 ... resnet152), and those of the twins in
 *     bench/torch_models.py for the CIFAR families and ImageNet v2;
 *   - cnn: hyfi's names (the twin's modules are named alike);
 *   - AmoebaNet-D: torchgpipe's benchmark model (benchmarks/models/amoebanet)
 *     and the twin: "fc" is "classify.fc"; "<cell>.reduce1.conv" / ".bn" are
 *     "<cell>.reduce1.1" / ".2" (nn.Sequential(ReLU, Conv2d, BatchNorm2d)),
 *     likewise reduce2 when it is a relu-conv-bn (a factorized reduction
 *     keeps conv1, conv2, bn); "<cell>.op<j>.<op>.conv<k>" / ".bn<k>" (k = 1
 *     when hyfi has no index) are "<cell>.operations.<j>.module.<3k-2>" /
 *     ".<3k-1>", and a factorized reduction op "<cell>.op<j>.none.conv1" is
 *     "<cell>.operations.<j>.module.conv1"; "stem1" keeps its names.
 * Any other name passes through (with gamma/beta renamed). Returns 0 with the
 * name in out, or -1 when out (len bytes) is too small or an argument is
 * NULL; never 1 (no tensor is left out). Loading needs no inverse:
 * hyfi_load_safetensors looks each tensor up under this name. */
int model_export_name(const model_config *c, const char *name, char *out, size_t len);
/* model_export_name as a hyfi_export_options.rename callback, with the
 * (const model_config *) as user. */
int model_export_rename(const char *name, char *out, size_t len, void *config);

#ifdef __cplusplus
}
#endif
#endif
