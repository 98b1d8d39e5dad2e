#!/usr/bin/python3
"""PyTorch side of bench/highres.sh: train batch-1 steps of a model on large
images (a --dataset slides folder: CLASS/slide.tif) under a memory budget,
with or without torch.utils.checkpoint (re-materialisation per block / cell).

The budget counts the memory the training needs above the model's: resident
memory minus that after building the model and the optimizer (PyTorch's
libraries alone take a few hundred MB, hyfi's budget is StarPU's data). A
thread samples the resident memory every 10 ms; a run that goes over the
budget prints "over the budget" and exits with status 3: that is its result.
At the end it prints "peak above the model X MB". Per step it appends
{"step", "loss", "images_per_sec"} to --metrics, as hyfi-train does.

The images are decoded whole (Pillow), as a PyTorch user would, scaled to
[0, 1] and normalised with ImageNet's constants as hyfi-train does.
Models: torchvision's ResNet-50 (hyfi's resnet depth 50) or the AmoebaNet-D
twin of bench/torch_models.py. Run with Debian's python3-torch: /usr/bin/python3.
"""
import argparse
import json
import os
import sys
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_models  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class Budget(threading.Thread):
    """Stops the process when resident memory goes `budget` MB above `base`."""

    def __init__(self, base, budget):
        super().__init__(daemon=True)
        self.base, self.budget, self.peak = base, budget, 0.0

    def run(self):
        while True:
            above = rss_mb() - self.base
            self.peak = max(self.peak, above)
            if above > self.budget:
                print("over the budget: %.0f MB above the model's (budget %d MB)"
                      % (above, self.budget), flush=True)
                os._exit(3)
            time.sleep(0.01)


def slides(path):
    """[(file, label)] of a slides folder (class folders in name order)."""
    classes = sorted(d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d)))
    out = []
    for k, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(path, c))):
            out.append((os.path.join(path, c, f), k))
    return out, len(classes)


def load(path):
    import numpy as np
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None
    with Image.open(path) as im:
        a = np.asarray(im.convert("RGB"), dtype=np.float32)
    x = torch.from_numpy(a).permute(2, 0, 1).div_(255.0)
    for c in range(3):
        x[c].sub_(MEAN[c]).div_(STD[c])
    return x.unsqueeze(0)


def blocks(model):
    """The model as a list of callables whose composition is its forward."""
    if isinstance(model, nn.Sequential):  # the AmoebaNet-D twin: stems, cells, classify
        return list(model.children())
    stem = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
    out = [stem]
    for i in range(1, 5):
        out += list(getattr(model, f"layer{i}").children())
    out.append(lambda x: model.fc(torch.flatten(model.avgpool(x), 1)))
    return out


def forward(parts, x, ckpt):
    for i, m in enumerate(parts):
        last = i == len(parts) - 1
        if not ckpt or last:
            x = m(x)
        elif isinstance(x, tuple):
            x = checkpoint(lambda *a, m=m: m(tuple(a)), *x, use_reentrant=False)
        else:
            x = checkpoint(m, x, use_reentrant=False)
    return x


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="resnet")
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--num-layers", type=int, default=6)
    p.add_argument("--num-filters", type=int, default=64)
    p.add_argument("--datapath", required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--budget-mb", type=float, default=1024)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--metrics")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(42)
    files, k = slides(a.datapath)
    if a.model == "resnet":
        model = torch_models.resnet_imagenet_v1(a.depth, k, 3)
    else:
        model = torch_models.AmoebaNetD(a.num_layers, a.num_filters, k, 3)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    parts = blocks(model)
    base = rss_mb()
    watch = Budget(base, a.budget_mb)
    watch.start()
    print("torch %s, %d threads, %s%s, %d files, model resident %.0f MB, budget %.0f MB"
          % (torch.__version__, a.threads, a.model, " + checkpoint" if a.checkpoint else "",
             len(files), base, a.budget_mb), flush=True)
    met = open(a.metrics, "w", buffering=1) if a.metrics else None
    for s in range(a.steps):
        f, y = files[s % len(files)]
        t0 = time.perf_counter()
        x = load(f)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(parts, x, a.checkpoint), torch.tensor([y]))
        loss.backward()
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        del x
        print("step %d loss %.4f %.1f s/image" % (s + 1, lv, dt), flush=True)
        if met:
            met.write(json.dumps({"step": s + 1, "loss": lv, "images_per_sec": 1 / dt}) + "\n")
    time.sleep(0.02)
    print("peak above the model %.0f MB" % watch.peak, flush=True)


if __name__ == "__main__":
    main()
