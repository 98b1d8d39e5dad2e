#!/usr/bin/python3
"""PyTorch twins of hyfi-train's models (apps/models.h describes them).

Every model here is built module for module like apps/models.c builds it with
hyfi's builders, so that parameter counts, output shapes and convolution
FLOPs can be compared:

  - cnn: the small CNN of `--model cnn`;
  - ResNet v1, ImageNet family (depths 18, 34, 50, 101, 152): torchvision's
    resnet18..resnet152 themselves (conv1 replaced when the input does not
    have 3 channels);
  - ResNet v1, CIFAR family (6n+2), ResNet v2 CIFAR (9n+2, Keras/MPI4DL
    layout) and v2 ImageNet (pre-activation): own definitions;
  - AmoebaNet-D (L, F): own definition, op for op like apps/models.c (which
    follows torchgpipe's benchmark with the differences listed in
    apps/models.h), with torchgpipe's module names.

Module names are those of hyfi's exported files (model_export_name in
apps/models.c; torchvision's for the ImageNet v1 family), so that a file of
`hyfi-train --save` loads into the twin with a strict load_state_dict
(tests/torch_export.py checks it).

Run it with Debian's python3 (/usr/bin/python3, package python3-torch):

  bench/torch_models.py --count --model resnet --depth 50 --num-classes 1000
  bench/torch_models.py --count --model amoebanet --num-layers 6 --num-filters 64
  bench/torch_models.py --forward --flops --model amoebanet --num-layers 6 \
      --num-filters 64 --image-size 128

--count prints the number of trainable parameters (one integer on a line of
its own with --quiet); --forward runs a batch of 2 zero images through the
model in eval mode and prints the logits' shape; --flops prints the forward
FLOPs per image of the convolutions and the fully connected layer
(2 per multiply-add, plus the bias adds), the same convention as hyfi's
hyfi_op_info.flops for those op kinds.

  bench/torch_models.py --compare build/apps/hyfi-train

runs every config of COMPARE_CONFIGS through `hyfi-train --dry-run` and the
twin and fails unless the parameter counts and the conv + fc FLOPs per image
agree (the meson test 'models_torch', which skips without PyTorch).
"""
import argparse
import sys
from collections import OrderedDict

import torch
from torch import nn

IMAGENET_DEPTHS = {
    18: (False, [2, 2, 2, 2]),
    34: (False, [3, 4, 6, 3]),
    50: (True, [3, 4, 6, 3]),
    101: (True, [3, 4, 23, 3]),
    152: (True, [3, 8, 36, 3]),
}


def conv(cin, cout, k, stride=1, kh=None, kw=None, sh=None, sw=None):
    kh = k if kh is None else kh
    kw = k if kw is None else kw
    sh = stride if sh is None else sh
    sw = stride if sw is None else sw
    return nn.Conv2d(cin, cout, (kh, kw), (sh, sw), (kh // 2, kw // 2), bias=False)


class Classifier(nn.Module):
    def __init__(self, cin, classes):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(x), 1))


# ----------------------------------------------------------------- cnn
class CNN(nn.Module):
    """conv<i>, bn<i>, relu<i>, pool<i> (i = 1, 2), conv3, bn3, relu3, gap, fc:
    hyfi's op names."""

    def __init__(self, classes, channels):
        super().__init__()
        cin = channels
        for i, cout in enumerate([32, 64, 128], 1):
            setattr(self, f"conv{i}", conv(cin, cout, 3))
            setattr(self, f"bn{i}", nn.BatchNorm2d(cout))
            setattr(self, f"relu{i}", nn.ReLU())
            if i < 3:
                setattr(self, f"pool{i}", nn.MaxPool2d(2))
            cin = cout
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        for i in (1, 2, 3):
            x = getattr(self, f"relu{i}")(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x)))
            if i < 3:
                x = getattr(self, f"pool{i}")(x)
        return self.fc(torch.flatten(self.gap(x), 1))


def cnn(classes, channels):
    return CNN(classes, channels)


# ----------------------------------------------------------------- ResNet v1
class BasicV1(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, width, 3, stride), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv(width, width, 3), nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(conv(cin, width, 1, stride), nn.BatchNorm2d(width))

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        sc = x if self.downsample is None else self.downsample(x)
        return self.relu(y + sc)


class ResNet(nn.Module):
    """A ResNet named like torchvision's (conv1, bn1, relu, [maxpool],
    layer1..layer<stages>, [bn_final, relu_final for v2], avgpool, fc), which
    are hyfi's op names: hyfi's exported files (model_export_name in
    apps/models.c) load into it strictly."""

    def __init__(self, channels, stem_width, stem_kernel, stem_stride, maxpool, stages,
                 final_bn, cout, classes):
        super().__init__()
        self.conv1 = conv(channels, stem_width, stem_kernel, stem_stride)
        self.bn1 = nn.BatchNorm2d(stem_width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1) if maxpool else nn.Identity()
        self.stages = len(stages)
        for i, blocks in enumerate(stages, 1):
            setattr(self, f"layer{i}", nn.Sequential(*blocks))
        if final_bn:
            self.bn_final, self.relu_final = nn.BatchNorm2d(cout), nn.ReLU()
        else:
            self.bn_final = self.relu_final = nn.Identity()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cout, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, self.stages + 1):
            x = getattr(self, f"layer{i}")(x)
        x = self.relu_final(self.bn_final(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet_cifar_v1(depth, classes, channels):
    n = (depth - 2) // 6
    stages = []
    cin = 16
    for s in range(3):
        blocks = []
        for b in range(n):
            blocks.append(BasicV1(cin, 16 << s, 2 if s > 0 and b == 0 else 1))
            cin = 16 << s
        stages.append(blocks)
    return ResNet(channels, 16, 3, 1, False, stages, False, cin, classes)


def resnet_imagenet_v1(depth, classes, channels):
    import torchvision
    m = getattr(torchvision.models, f"resnet{depth}")(num_classes=classes)
    if channels != 3:
        m.conv1 = nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
    return m


# ----------------------------------------------------------------- ResNet v2
class PreActV2(nn.Module):
    """Pre-activation block, module names as hyfi's ops: [bn0-relu0] conv1 -
    bn1-relu1-conv2 [- bn2-relu2-conv3] + shortcut (identity, or downsample =
    nn.Sequential(1x1 conv), no bn, on the raw input, named like torchvision's
    downsample.0); no relu after the sum."""

    def forward(self, x):
        y = self.relu0(self.bn0(x))
        y = self.conv2(self.relu1(self.bn1(self.conv1(y))))
        if self.conv3 is not None:
            y = self.conv3(self.relu2(self.bn2(y)))
        return y + (x if self.downsample is None else self.downsample(x))

    def _pre(self, cin, pre):
        if pre:
            self.bn0, self.relu0 = nn.BatchNorm2d(cin), nn.ReLU()
        else:
            self.bn0 = self.relu0 = nn.Identity()


class BottleneckV2(PreActV2):
    """[bn-relu] conv1x1(width, s1) - bn-relu-conv3x3(width, s2) -
    bn-relu-conv1x1(cout) + shortcut (identity or 1x1 conv(s1*s2))."""

    def __init__(self, cin, width, cout, s1, s2, pre, project):
        super().__init__()
        self._pre(cin, pre)
        self.conv1, self.bn1, self.relu1 = conv(cin, width, 1, s1), nn.BatchNorm2d(width), nn.ReLU()
        self.conv2, self.bn2 = conv(width, width, 3, s2), nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU()
        self.conv3 = conv(width, cout, 1)
        self.downsample = nn.Sequential(conv(cin, cout, 1, s1 * s2)) if project else None


class BasicV2(PreActV2):
    def __init__(self, cin, width, stride, pre):
        super().__init__()
        self._pre(cin, pre)
        self.conv1, self.bn1, self.relu1 = (conv(cin, width, 3, stride), nn.BatchNorm2d(width),
                                            nn.ReLU())
        self.conv2 = conv(width, width, 3)
        self.conv3 = None
        project = stride != 1 or cin != width
        self.downsample = nn.Sequential(conv(cin, width, 1, stride)) if project else None


def resnet_cifar_v2(depth, classes, channels):
    n = (depth - 2) // 9
    stages = []
    fin = cin = 16
    for s in range(3):
        fout = 4 * fin if s == 0 else 2 * fin
        blocks = []
        for b in range(n):
            stride = 2 if s > 0 and b == 0 else 1
            blocks.append(BottleneckV2(cin, fin, fout, stride, 1, not (s == 0 and b == 0),
                                       b == 0))
            cin = fout
        stages.append(blocks)
        fin = fout
    return ResNet(channels, 16, 3, 1, False, stages, True, cin, classes)


def resnet_imagenet_v2(depth, classes, channels):
    bottleneck, blocks = IMAGENET_DEPTHS[depth]
    exp = 4 if bottleneck else 1
    stages = []
    cin = 64
    for s in range(4):
        width = 64 << s
        stage = []
        for b in range(blocks[s]):
            stride = 2 if s > 0 and b == 0 else 1
            pre = not (s == 0 and b == 0)
            if bottleneck:
                project = stride != 1 or cin != width * exp
                stage.append(BottleneckV2(cin, width, width * exp, 1, stride, pre, project))
            else:
                stage.append(BasicV2(cin, width, stride, pre))
            cin = width * exp
        stages.append(stage)
    return ResNet(channels, 64, 7, 2, True, stages, True, cin, classes)


def resnet(depth, version, style, classes, channels):
    imagenet = style == "imagenet" or (style == "auto" and depth in IMAGENET_DEPTHS)
    if imagenet:
        if depth not in IMAGENET_DEPTHS:
            raise ValueError(f"depth {depth} has no ImageNet layout")
        return (resnet_imagenet_v1 if version == 1 else resnet_imagenet_v2)(depth, classes,
                                                                            channels)
    per = 6 if version == 1 else 9
    if depth < per + 2 or (depth - 2) % per:
        raise ValueError(f"depth {depth} is not {per}n+2")
    return (resnet_cifar_v1 if version == 1 else resnet_cifar_v2)(depth, classes, channels)


# ----------------------------------------------------------------- AmoebaNet-D
# Module names are those of torchgpipe's benchmark model (kakaobrain/torchgpipe,
# benchmarks/models/amoebanet), so that state_dicts move between the two and
# hyfi's exported files (model_export_name in apps/models.c) load into either
# strictly: an nn.Sequential of stem1 (relu, conv, bn), the cells stem2,
# stem3, cell1_normal1.., cell2_reduction, cell3_normal1.., cell4_reduction,
# cell5_normal1.. and classify (pool, fc); a cell has reduce1 and reduce2
# (nn.Sequential(ReLU, Conv2d, BatchNorm2d), a FactorizedReduce (relu, conv1,
# conv2, bn) or an identity) and `operations`, a ModuleList of Operation
# wrappers whose `module` is the op: a flat nn.Sequential of (ReLU, Conv2d,
# BatchNorm2d) triples for the convolutions (parameters at 1, 2, 4, 5, ...),
# a FactorizedReduce for `none` with stride 2, a pool or an identity.
# Where this twin differs from torchgpipe (none of it changes a name or a
# shape): the differences apps/models.h lists (a max pool for max_pool_3x3, FactorizedReduce's two
# convolutions on the same pixels, ceil-padded 2x2 max pools, a global average
# pool in classify), and the ReLU that starts an op is
# computed once per state by the cell (the op's slot 0 is an nn.Identity), as
# hyfi does.
def relu_conv_bn(cin, cout, kh=1, kw=1, sh=1, sw=1, relu=True):
    """ReLU (nn.Identity with relu=False: the input is already through one),
    conv, bn; slots 0, 1, 2 as torchgpipe's relu_conv_bn."""
    return nn.Sequential(nn.ReLU() if relu else nn.Identity(),
                         conv(cin, cout, None, kh=kh, kw=kw, sh=sh, sw=sw),
                         nn.BatchNorm2d(cout))


class FactorizedReduce(nn.Module):
    """relu, two 1x1/2 convs to cout/2 each on the same pixels (MPI4DL's
    variant), concat, bn. `relu=False`: the input is already through a relu."""

    def __init__(self, cin, cout, relu=True):
        super().__init__()
        self.relu = nn.ReLU() if relu else nn.Identity()
        self.conv1 = conv(cin, cout // 2, 1, 2)
        self.conv2 = conv(cin, cout // 2, 1, 2)
        self.bn = nn.BatchNorm2d(cout // 2 * 2)

    def forward(self, x):
        x = self.relu(x)
        return self.bn(torch.cat([self.conv1(x), self.conv2(x)], 1))


class MaxPool2x2(nn.Module):
    """2x2/stride pool; with stride 2 an odd side is padded by one (ceil)."""

    def __init__(self, stride):
        super().__init__()
        self.stride = stride

    def forward(self, x):
        ph = x.shape[2] % 2 if self.stride == 2 else 0
        pw = x.shape[3] % 2 if self.stride == 2 else 0
        return nn.functional.max_pool2d(x, 2, self.stride, (ph, pw))


class Operation(nn.Module):
    """torchgpipe's wrapper of an op: the op is `module`."""

    def __init__(self, name, module):
        super().__init__()
        self.name = name
        self.module = module

    def forward(self, x):
        return self.module(x)


# Ops whose first module is a relu get the relu'd state from the cell (one
# relu per state, shared), so they are built without their own.
RELU_FIRST = {"conv_1x1", "conv_3x3", "conv_1x7_7x1"}


def seq(*triples):
    """Flatten relu_conv_bn triples into one nn.Sequential (torchgpipe's layout)."""
    return nn.Sequential(*[m for t in triples for m in t])


def make_op(name, c, stride):
    if name == "conv_1x1":
        m = relu_conv_bn(c, c, 1, 1, stride, stride, relu=False)
    elif name == "conv_3x3":
        m = seq(relu_conv_bn(c, c // 4, relu=False),
                relu_conv_bn(c // 4, c // 4, 3, 3, stride, stride),
                relu_conv_bn(c // 4, c))
    elif name == "conv_1x7_7x1":
        m = seq(relu_conv_bn(c, c // 4, relu=False),
                relu_conv_bn(c // 4, c // 4, 1, 7, 1, stride),
                relu_conv_bn(c // 4, c // 4, 7, 1, stride, 1),
                relu_conv_bn(c // 4, c))
    elif name == "max_pool_3x3":
        m = nn.MaxPool2d(3, stride, 1)
    elif name == "avg_pool_3x3":
        m = nn.AvgPool2d(3, stride, 1, count_include_pad=False)
    elif name == "max_pool_2x2":
        m = MaxPool2x2(stride)
    elif name == "none":
        m = nn.Identity() if stride == 1 else FactorizedReduce(c, c, relu=False)
    else:
        raise ValueError(name)
    return Operation(name, m)


# (state, op) pairs as torchgpipe's genotype.py (TensorFlow's amoeba_net_d);
# state 0 is reduce1(prev), state 1 reduce2(prev_prev).
NORMAL_OPS = [(1, "conv_1x1"), (1, "max_pool_3x3"), (1, "none"), (0, "conv_1x7_7x1"),
              (0, "conv_1x1"), (0, "conv_1x7_7x1"), (2, "max_pool_3x3"), (2, "none"),
              (1, "avg_pool_3x3"), (5, "conv_1x1")]
NORMAL_CONCAT = [0, 3, 4, 6]
REDUCTION_OPS = [(0, "max_pool_2x2"), (0, "max_pool_3x3"), (2, "none"), (1, "conv_3x3"),
                 (2, "conv_1x7_7x1"), (2, "max_pool_3x3"), (3, "none"), (1, "max_pool_2x2"),
                 (2, "avg_pool_3x3"), (3, "conv_1x1")]
REDUCTION_CONCAT = [4, 5, 6]


def op_needs_relu(name, stride):
    return name in RELU_FIRST or (name == "none" and stride != 1)


class Cell(nn.Module):
    """Takes (prev, prev_prev) and returns (output, prev), torchgpipe's
    convention, so that cells chain in an nn.Sequential."""

    def __init__(self, c_prev_prev, c_prev, c, reduction, reduction_prev):
        super().__init__()
        self.reduce1 = relu_conv_bn(c_prev, c)
        if reduction_prev:
            self.reduce2 = FactorizedReduce(c_prev_prev, c)
        elif c_prev_prev != c:
            self.reduce2 = relu_conv_bn(c_prev_prev, c)
        else:
            self.reduce2 = nn.Identity()
        spec = REDUCTION_OPS if reduction else NORMAL_OPS
        self.concat = REDUCTION_CONCAT if reduction else NORMAL_CONCAT
        self.indices = [i for i, _ in spec]
        self.relu_first = []
        self.operations = nn.ModuleList()
        for i, name in spec:
            stride = 2 if reduction and i < 2 else 1
            self.operations.append(make_op(name, c, stride))
            self.relu_first.append(op_needs_relu(name, stride))
        self.channels_out = c * len(self.concat)

    def forward(self, states):
        prev, prev_prev = states if isinstance(states, tuple) else (states, states)
        states = [self.reduce1(prev), self.reduce2(prev_prev)]
        relus = {}
        for k in range(0, len(self.operations), 2):
            hs = []
            for j in (k, k + 1):
                i = self.indices[j]
                h = states[i]
                if self.relu_first[j]:
                    if i not in relus:
                        relus[i] = torch.relu(h)
                    h = relus[i]
                hs.append(self.operations[j](h))
            states.append(hs[0] + hs[1])
        return torch.cat([states[i] for i in self.concat], 1), prev


class Stem(nn.Module):
    def __init__(self, channels, ch):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv = conv(channels, ch, 3, 2)
        self.bn = nn.BatchNorm2d(ch)

    def forward(self, x):
        return self.bn(self.conv(self.relu(x)))


class Classify(Classifier):
    """Takes the last cell's (output, prev)."""

    def forward(self, states):
        return super().forward(states[0])


def AmoebaNetD(num_layers, num_filters, classes, channels):
    if num_layers % 3 or num_layers < 3:
        raise ValueError("num_layers must be a positive multiple of 3")
    if num_filters % 4 or num_filters < 4:
        raise ValueError("num_filters must be a positive multiple of 4")
    repeat = num_layers // 3
    ch = num_filters // 4
    layers = OrderedDict(stem1=Stem(channels, ch))
    c_pp = c_p = ch
    red_prev = False

    def add(name, c, reduction):
        nonlocal c_pp, c_p, red_prev
        cell = Cell(c_pp, c_p, c, reduction, red_prev)
        layers[name] = cell
        c_pp, c_p, red_prev = c_p, cell.channels_out, reduction

    ch *= 2
    add("stem2", ch, True)
    ch *= 2
    add("stem3", ch, True)
    for grp in range(3):
        if grp > 0:
            ch *= 2
            add(f"cell{2 * grp}_reduction", ch, True)
        for i in range(repeat):
            add(f"cell{2 * grp + 1}_normal{i + 1}", ch, False)
    layers["classify"] = Classify(c_p, classes)
    return nn.Sequential(layers)


# ----------------------------------------------------------------- compare
# Configs of --compare: hyfi-train flags, which this script takes as well.
COMPARE_CONFIGS = [
    "--model cnn --image-size 28",
    "--model resnet --depth 18 --num-classes 1000 --image-size 224",
    "--model resnet --depth 34 --num-classes 1000 --image-size 224",
    "--model resnet --depth 50 --num-classes 1000 --image-size 224",
    "--model resnet --depth 101 --num-classes 1000 --image-size 224",
    "--model resnet --depth 152 --num-classes 1000 --image-size 224",
    "--model resnet --depth 18 --image-size 64",
    "--model resnet --depth 18 --resnet-version 2 --num-classes 1000 --image-size 64",
    "--model resnet --depth 50 --resnet-version 2 --num-classes 1000 --image-size 64",
    "--model resnet --depth 8 --image-size 16",
    "--model resnet --depth 20 --image-size 32",
    "--model resnet --depth 56 --image-size 32",
    "--model resnet --depth 110 --image-size 32",
    "--model resnet --depth 164 --image-size 32",
    "--model resnet --depth 50 --resnet-style cifar --image-size 32",
    "--model resnet --depth 20 --resnet-version 2 --image-size 32",
    "--model resnet --depth 56 --resnet-version 2 --image-size 32",
    "--model resnet --depth 110 --resnet-version 2 --image-size 32",
    "--model resnet --depth 164 --resnet-version 2 --image-size 32",
    "--model resnet --depth 1001 --resnet-version 2 --image-size 32",
    "--model resnet --depth 101 --resnet-version 2 --resnet-style cifar --image-size 32",
    "--model amoebanet --num-layers 3 --num-filters 8 --image-size 32",
    "--model amoebanet --num-layers 6 --num-filters 64 --image-size 32",
    "--model amoebanet --num-layers 6 --num-filters 64 --image-size 48",
    "--model amoebanet --num-layers 6 --num-filters 64 --image-size 96",
    "--model amoebanet --num-layers 6 --num-filters 64 --image-size 128",
    "--model amoebanet --num-layers 18 --num-filters 208 --num-classes 1000 --image-size 224",
]


def hyfi_dry_run(hyfi_train, flags):
    """Parameters and conv + fc FLOPs per image from `hyfi-train --dry-run`."""
    import subprocess
    out = subprocess.run([hyfi_train, "--dry-run", "--batch-size", "2"] + flags,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"hyfi-train --dry-run {' '.join(flags)}: exit {out.returncode}: "
                           f"{out.stderr.strip()}")
    params, flops = None, 0.0
    for line in out.stdout.splitlines():
        f = line.split()
        if line.startswith("parameters:"):
            params = int(f[1])
        elif len(f) >= 6 and f[0].isdigit() and f[2] in ("conv2d", "fc"):
            flops += float(f[5])
    return params, flops


def compare(hyfi_train, parser):
    """Every config of COMPARE_CONFIGS through hyfi-train --dry-run and the
    twin: parameter counts and conv + fc FLOPs per image must be equal."""
    bad = 0
    print(f"{'config':<84} {'hyfi':>11} {'pytorch':>11} {'flops':>8}")
    for cfg in COMPARE_CONFIGS:
        flags = cfg.split()
        args = parser.parse_args(flags)
        try:
            hp, hf = hyfi_dry_run(hyfi_train, flags)
        except RuntimeError as e:
            print(f"FAIL {e}")
            bad += 1
            continue
        model = build(args)
        tp = count_params(model)
        tf = conv_fc_flops(model, args.channels, args.image_size)
        ok = hp == tp and abs(hf - tf) <= 0.5
        bad += not ok
        print(f"{cfg:<84} {hp:>11} {tp:>11} {'same' if abs(hf - tf) <= 0.5 else 'DIFFER':>8}"
              f"{'' if ok else '   FAIL (flops %.0f vs %.0f)' % (hf, tf)}", flush=True)
    print(f"{len(COMPARE_CONFIGS) - bad} passed, {bad} failed")
    return 1 if bad else 0


# ----------------------------------------------------------------- CLI
def build(args):
    if args.model == "cnn":
        return cnn(args.num_classes, args.channels)
    if args.model == "resnet":
        return resnet(args.depth, args.resnet_version, args.resnet_style, args.num_classes,
                      args.channels)
    return AmoebaNetD(args.num_layers, args.num_filters, args.num_classes, args.channels)


def count_params(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def conv_fc_flops(model, channels, size):
    """Forward FLOPs per image of Conv2d and Linear modules (one image)."""
    total = [0]

    def hook(mod, inp, out):
        n = out.numel()
        if isinstance(mod, nn.Conv2d):
            macs = n * (mod.in_channels // mod.groups) * mod.kernel_size[0] * mod.kernel_size[1]
        else:
            macs = n * mod.in_features
        total[0] += 2 * macs + (n if mod.bias is not None else 0)

    hs = [m.register_forward_hook(hook) for m in model.modules()
          if isinstance(m, (nn.Conv2d, nn.Linear))]
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, channels, size, size))
    for h in hs:
        h.remove()
    return total[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["cnn", "resnet", "amoebanet"], default="cnn")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--resnet-version", type=int, choices=[1, 2], default=1)
    ap.add_argument("--resnet-style", choices=["auto", "cifar", "imagenet"], default="auto")
    ap.add_argument("--num-layers", type=int, default=18)
    ap.add_argument("--num-filters", type=int, default=416)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--count", action="store_true", help="print the parameter count")
    ap.add_argument("--forward", action="store_true", help="print the logits' shape")
    ap.add_argument("--flops", action="store_true",
                    help="print conv + fc forward FLOPs per image")
    ap.add_argument("--quiet", action="store_true", help="numbers only")
    ap.add_argument("--compare", metavar="HYFI_TRAIN",
                    help="run every config of COMPARE_CONFIGS through HYFI_TRAIN --dry-run and "
                         "the twin; exit 1 unless parameters and conv+fc FLOPs agree")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.compare:
        return compare(args.compare, ap)
    model = build(args)
    if args.count or not (args.forward or args.flops):
        n = count_params(model)
        print(n if args.quiet else f"parameters {n}")
    if args.forward:
        model.eval()
        with torch.no_grad():
            y = model(torch.zeros(2, args.channels, args.image_size, args.image_size))
        print(("%d %d" if args.quiet else "logits %d x %d") % tuple(y.shape))
    if args.flops:
        f = conv_fc_flops(model, args.channels, args.image_size)
        print(f if args.quiet else f"conv_fc_flops_per_image {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
