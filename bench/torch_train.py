#!/usr/bin/python3
"""PyTorch side of hyfi's CPU benchmark (bench/cpu_vs_pytorch.sh).

Trains one model config on synthetic data and prints its throughput as one
JSON line:
  {"model": ..., "batch_size": B, "image_size": S, "threads": T,
   "warmup": W, "steps": N, "median_images_per_sec": ..,
   "mean_images_per_sec": .., ...}

It mirrors hyfi-train --dataset synthetic: a pool of 10 x batch-size random
3-channel images (uint8 noise scaled to [0,1] and normalised) with random
labels, cycled batch by batch; SGD with momentum and weight decay (the same
lr, momentum 0.9, weight decay 5e-4 as hyfi-train's defaults), softmax
cross-entropy. A step's images/s is B divided by the wall time since the end
of the previous step (batch pick, forward, backward, update, and reading the
loss, as hyfi-train reads it); W warm-up steps are run first and not counted,
then N measured steps.

Models come from bench/torch_models.py (PyTorch twins of apps/models.c, built
from the same config as hyfi-train's --model/--depth/... flags). The cnn twin
is also defined here, so that this script runs without torch_models.py.

Run with a Python that sees PyTorch: Debian's /usr/bin/python3 (python3-torch),
or the virtual environment with PyPI's newest PyTorch that the bench makes;
--compile trains torch.compile(model) instead of the eager model; --autocast bf16
runs the forward and the loss under torch.autocast(bfloat16).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class Cnn(nn.Module):
    """hyfi-train --model cnn: conv3x3(32)-bn-relu-maxpool2, conv3x3(64)-bn-
    relu-maxpool2, conv3x3(128)-bn-relu, global average pool, fc. The
    convolutions have no bias (batch norm follows), fc has one."""

    def __init__(self, in_channels=3, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(128)
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def build_model(args):
    """The model of args (hyfi-train's flags) and where it came from."""
    if args.model == "cnn" and not args.use_torch_models:
        return Cnn(3, args.num_classes), "inline cnn twin"
    try:
        import torch_models  # bench/torch_models.py
    except ImportError as e:
        if args.model == "cnn":
            return Cnn(3, args.num_classes), "inline cnn twin"
        sys.exit("torch_train.py: --model %s needs bench/torch_models.py (%s)" % (args.model, e))
    # torch_models.build() takes its own command line's namespace.
    cfg = types.SimpleNamespace(
        model=args.model, num_classes=args.num_classes, channels=3,
        image_size=args.image_size, resnet_version=args.resnet_version, depth=args.depth,
        resnet_style=args.resnet_style, num_layers=args.num_layers,
        num_filters=args.num_filters)
    return torch_models.build(cfg), "bench/torch_models.py"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="cnn", choices=["cnn", "resnet", "amoebanet"])
    p.add_argument("--resnet-version", type=int, default=1, choices=[1, 2])
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--resnet-style", default="auto", choices=["auto", "cifar", "imagenet"])
    p.add_argument("--num-layers", type=int, default=18)
    p.add_argument("--num-filters", type=int, default=416)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=50, help="measured steps N [50]")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps W, not counted [5]")
    p.add_argument("--lr", "--learning-rate", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads [2]")
    p.add_argument("--pool", type=int, default=10,
                   help="synthetic batches cycled through (hyfi: 10 x batch) [10]")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--channels-last", action="store_true",
                   help="model and data in torch.channels_last (NHWC) memory format")
    p.add_argument("--autocast", choices=["bf16"],
                   help="mixed precision: forward and loss under torch.autocast(bfloat16) "
                        "(PyTorch's CPU/GPU AMP; master weights and the update stay float32)")
    p.add_argument("--compile", action="store_true",
                   help="train torch.compile(model) (TorchInductor; the first warm-up steps "
                        "compile)")
    p.add_argument("--use-torch-models", action="store_true",
                   help="take the cnn from bench/torch_models.py too")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where to train; cuda: model and the synthetic pool on the GPU, each "
                        "step ends with loss.item() (a synchronisation, as in hyfi) [cpu]")
    p.add_argument("--tf32", action="store_true",
                   help="cuda: let cuDNN use TF32 for float32 convolutions (PyTorch's own "
                        "default); without it both sides compute in full float32, as hyfi does")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="cuda: torch.backends.cudnn.benchmark = True (autotuned algorithms)")
    p.add_argument("--profile", metavar="FILE",
                   help="after the run, profile 3 more steps with torch.profiler and write "
                        "the op table to FILE")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("torch_train.py: --device cuda, but PyTorch sees no GPU")
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
    model, source = build_model(args)
    model.train()
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device=dev, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay)
    if args.compile:
        model = torch.compile(model)
    loss_fn = nn.CrossEntropyLoss()

    B, S = args.batch_size, args.image_size
    g = torch.Generator().manual_seed(args.seed)
    # hyfi's synthetic images: uint8 noise / 255, normalised per channel
    # (mean 0.5, std 0.25 here; the values do not change the speed).
    xs = [((torch.randint(0, 256, (B, 3, S, S), generator=g, dtype=torch.uint8).float() / 255.0
            - 0.5) / 0.25).to(dev).contiguous(memory_format=fmt) for _ in range(args.pool)]
    ys = [torch.randint(0, args.num_classes, (B,), generator=g).to(dev) for _ in range(args.pool)]

    def step(i):
        x, y = xs[i % args.pool], ys[i % args.pool]
        opt.zero_grad(set_to_none=True)
        if args.autocast:
            with torch.autocast(device_type=args.device, dtype=torch.bfloat16):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    rates, losses = [], []
    t_prev = time.perf_counter()
    for i in range(args.warmup + args.steps):
        losses.append(step(i))
        t = time.perf_counter()
        if i >= args.warmup:
            rates.append(B / (t - t_prev))
        t_prev = t

    out = {
        "model": args.model, "source": source,
        "resnet_version": args.resnet_version if args.model == "resnet" else None,
        "depth": args.depth if args.model == "resnet" else None,
        "num_layers": args.num_layers if args.model == "amoebanet" else None,
        "num_filters": args.num_filters if args.model == "amoebanet" else None,
        "parameters": sum(p.numel() for p in model.parameters()),
        "batch_size": B, "image_size": S, "num_classes": args.num_classes,
        "threads": torch.get_num_threads(), "channels_last": args.channels_last,
        "compiled": args.compile, "autocast": args.autocast,
        "warmup": args.warmup, "steps": args.steps,
        "median_images_per_sec": statistics.median(rates) if rates else None,
        "mean_images_per_sec": statistics.fmean(rates) if rates else None,
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "tf32": args.tf32 if args.device == "cuda" else None,
        "cudnn_benchmark": args.cudnn_benchmark if args.device == "cuda" else None,
        "peak_gpu_memory_mb": (torch.cuda.max_memory_allocated() / 2**20
                               if args.device == "cuda" else None),
        "torch": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
        "python": platform.python_version(),
    }
    if args.profile:
        from torch.profiler import profile, ProfilerActivity
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
        with profile(activities=acts) as prof:
            for i in range(3):
                step(i)
        with open(args.profile, "w") as f:
            f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
