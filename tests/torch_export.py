"""The 'torch_export' test: safetensors files between hyfi and PyTorch.

  tests/torch_export.py HYFI_TRAIN TORCH_LOGITS

1. names: for every model family, the names hyfi exports (model_export_name,
   listed by TORCH_LOGITS --names) are exactly the state_dict keys of the
   PyTorch counterpart (torchvision's resnetN for the ImageNet v1 family, the
   twins of bench/torch_models.py otherwise), with the same numbers of values;
2. hyfi -> PyTorch: hyfi-train trains ResNet-50 (64x64) and AmoebaNet-D(3, 8)
   for 2 steps and saves them (--save); torchvision's resnet50 and the
   AmoebaNet twin load the files strictly, and their logits on a batch equal
   hyfi's (TORCH_LOGITS loads the same file), in eval and training mode;
   num_batches_tracked holds the steps; TORCH_LOGITS --save writes back
   exactly the values it loaded; with --save-precision bf16 (ResNet-18) every
   float tensor is BF16, PyTorch's own rounding of the F32 export of the same
   run, and loads strictly into the bfloat16 model;
3. PyTorch -> hyfi: torchvision's resnet18 and resnet50 and the AmoebaNet twin,
   randomly initialised, with running statistics from a few training-mode
   forwards, saved with safetensors.torch.save_file, give hyfi the logits
   PyTorch computes; hyfi-train --load takes the resnet18 file, and a
   ResNet-34 refuses it naming a tensor.
Logits agree when |hyfi - torch64| <= ATOL + RTOL * max |torch64| + SLACK *
max |torch32 - torch64| everywhere (PyTorch's logits in float64 and float32;
see compare_logits); the largest differences are printed.
Needs torch, torchvision and safetensors (tests/torch_export.sh skips without).
"""
import argparse
import copy
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision
from safetensors.torch import load_file, save_file

SRC = os.environ.get("HYFI_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "bench"))
import torch_models  # noqa: E402

RTOL, ATOL, SLACK = 2e-5, 1e-6, 4
BATCH = 4
STEPS = 2  # hyfi-train's steps before --save

# Configs of the names check (hyfi-train's flags).
NAME_CONFIGS = [
    "--model cnn --image-size 28",
    "--model resnet --depth 18 --num-classes 1000 --image-size 64",
    "--model resnet --depth 50 --num-classes 1000 --image-size 64",
    "--model resnet --depth 8 --image-size 16",
    "--model resnet --depth 20 --image-size 32",
    "--model resnet --depth 11 --resnet-version 2 --image-size 32",
    "--model resnet --depth 18 --resnet-version 2 --num-classes 1000 --image-size 64",
    "--model resnet --depth 50 --resnet-version 2 --num-classes 1000 --image-size 64",
    "--model amoebanet --num-layers 3 --num-filters 8 --image-size 32",
    "--model amoebanet --num-layers 6 --num-filters 64 --image-size 32",
]

failures = []


def check(ok, what):
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def run(cmd):
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: exit {out.returncode}\n"
                           f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


def model_args(flags):
    """hyfi-train's model flags as the namespace torch_models.build takes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--resnet-version", type=int, default=1)
    ap.add_argument("--resnet-style", default="auto")
    ap.add_argument("--num-layers", type=int, default=18)
    ap.add_argument("--num-filters", type=int, default=416)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--channels", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=32)
    return ap.parse_args(flags)


# ------------------------------------------------------------------ names
def check_names(torch_logits, cfg):
    flags = cfg.split()
    lines = run([torch_logits, *flags, "--names"]).split()
    exported = {lines[i + 1]: int(lines[i + 2]) for i in range(0, len(lines), 3)}
    # hyfi_save_safetensors adds <bn>.num_batches_tracked beside each running_mean
    for k in list(exported):
        if k.endswith(".running_mean"):
            exported[k[:-len("running_mean")] + "num_batches_tracked"] = 1
    sd = torch_models.build(model_args(flags)).state_dict()
    want = {k: v.numel() for k, v in sd.items()}
    missing, extra = sorted(set(want) - set(exported)), sorted(set(exported) - set(want))
    sizes = [k for k in set(want) & set(exported) if want[k] != exported[k]]
    check(not missing and not extra and not sizes and len(lines) % 3 == 0,
          f"names {cfg}: {len(exported)} tensors"
          + (f"; not exported: {missing[:4]}" if missing else "")
          + (f"; not in PyTorch: {extra[:4]}" if extra else "")
          + (f"; sizes differ: {sizes[:4]}" if sizes else ""))


# ------------------------------------------------------------------ logits
def compare_logits(what, hyfi, model, x, train_mode=False):
    """hyfi's logits against PyTorch's in float64: |hyfi - torch64| <= ATOL +
    RTOL * max |torch64| + SLACK * (PyTorch's own float32 error, max |torch32 -
    torch64|) everywhere. Float32 errors of sums over many layers scale with
    the values summed, not with each logit; batch norm over few values (the
    training mode at 1x1 pixels) amplifies them, PyTorch's as much as hyfi's."""
    y32 = torch_logits_of(model, x, train_mode)
    y64 = torch_logits_of(copy.deepcopy(model).double(), x.double(), train_mode)
    scale = float(np.abs(y64).max())
    e32 = float(np.abs(y32 - y64).max())
    d = float(np.abs(hyfi - y64).max())
    tol = ATOL + RTOL * scale + SLACK * e32
    check(d <= tol,
          f"{what}{', training mode' if train_mode else ''}: logits {tuple(y64.shape)}, "
          f"max |torch| {scale:.4g}, max |hyfi - torch64| {d:.3g} = {d / max(scale, 1e-30):.2g}"
          f" max |torch| (torch32: {e32 / max(scale, 1e-30):.2g}; tolerance {tol:.3g})")


def torch_logits_of(model, x, train_mode=False):
    model.train(train_mode)
    with torch.no_grad():
        y = model(x).numpy()
    model.eval()
    return y


def hyfi_logits_of(torch_logits, flags, path, x, tmp, save=None, train_mode=False):
    xin, yout = os.path.join(tmp, "x.f32"), os.path.join(tmp, "y.f32")
    x.numpy().astype("<f4").tofile(xin)
    cmd = [torch_logits, *flags, "--batch", x.shape[0], "--load", path, "--input", xin,
           "--output", yout]
    run(cmd + (["--save", save] if save else []) + (["--train-mode"] if train_mode else []))
    return np.fromfile(yout, dtype="<f4").reshape(x.shape[0], -1)


def randomise(model, x, seed):
    """Random batch-norm scales and shifts, a classifier 20 times its initial
    size (logits of a few units, not tenths), running statistics from three
    training-mode forwards of x-like batches."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            elif isinstance(m, torch.nn.Linear):
                m.weight.mul_(20)
        model.train()
        for _ in range(3):
            model(torch.randn(x.shape, generator=g) + 0.5)
    model.eval()


def same_tensors(what, a, b):
    """Every tensor of a (but num_batches_tracked) equal in b."""
    keys = [k for k in a if not k.endswith("num_batches_tracked")]
    bad = [k for k in keys
           if k not in b or a[k].shape != b[k].shape or not torch.equal(a[k], b[k])]
    check(not bad and set(a) == set(b),
          f"{what}: {len(keys)} tensors written back bit for bit"
          + (f"; differ: {bad[:4]}" if bad else ""))


def hyfi_to_torch(hyfi_train, torch_logits, tmp, cfg, twin):
    """hyfi-train --save, a strict load into PyTorch, the same logits there as in hyfi."""
    flags = cfg.split()
    path = os.path.join(tmp, "hyfi.safetensors")
    run([hyfi_train, *flags, "--dataset", "synthetic", "--batch-size", "4", "--steps", STEPS,
         "--device", "cpu", "--print-freq", "1", "--save", path])
    sd = load_file(path)
    args = model_args(flags)
    model = twin(args)
    if not strict_load(model, sd, f"hyfi-train {cfg} --save",
                       f"{type(model).__name__} ({len(sd)} tensors)"):
        return
    nbt = [v for k, v in sd.items() if k.endswith("num_batches_tracked")]
    check(bool(nbt) and all(v.dtype == torch.int64 and v.dim() == 0 and int(v) == STEPS
                            for v in nbt),
          f"{cfg}: {len(nbt)} num_batches_tracked, int64 scalars equal to the {STEPS} steps")
    x = torch.randn(BATCH, args.channels, args.image_size, args.image_size,
                    generator=torch.Generator().manual_seed(11))
    back = os.path.join(tmp, "back.safetensors")
    hy = hyfi_logits_of(torch_logits, flags, path, x, tmp, save=back)
    compare_logits(f"hyfi -> torch {cfg}", hy, model, x)
    same_tensors(f"{cfg}: load + save", sd, load_file(back))
    # after 2 steps the running statistics are far from the batches' (eval
    # logits are huge): the training-mode forward checks every weight too
    hy = hyfi_logits_of(torch_logits, flags, path, x, tmp, train_mode=True)
    compare_logits(f"hyfi -> torch {cfg}", hy, model, x, train_mode=True)


def strict_load(model, sd, what, into):
    """model.load_state_dict(sd, strict=True), checked: "<what>: strict
    load_state_dict into <into>", or the error. Whether it loaded."""
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        check(False, f"{what}: strict load_state_dict: {e}")
        return False
    check(True, f"{what}: strict load_state_dict into {into}")
    return True


def hyfi_to_torch_bf16(hyfi_train, tmp, cfg, twin):
    """--save-precision bf16: every float tensor BF16, equal to PyTorch's own
    rounding (.to(torch.bfloat16)) of the F32 file of the same (deterministic)
    run, and a strict load into the twin converted to bfloat16."""
    flags = cfg.split() + ["--dataset", "synthetic", "--batch-size", "4", "--steps", STEPS,
                           "--device", "cpu", "--print-freq", "1"]
    p32, p16 = os.path.join(tmp, "f32.safetensors"), os.path.join(tmp, "bf16.safetensors")
    run([hyfi_train, *flags, "--save", p32])
    run([hyfi_train, *flags, "--save", p16, "--save-precision", "bf16"])
    a, b = load_file(p32), load_file(p16)
    floats = [k for k in a if a[k].is_floating_point()]
    bad = [k for k in floats if b[k].dtype != torch.bfloat16 or
           not torch.equal(a[k].to(torch.bfloat16), b[k])]
    check(floats and not bad and set(a) == set(b),
          f"{cfg} --save-precision bf16: {len(floats)} tensors BF16, each PyTorch's rounding "
          f"of the F32 export" + (f"; differ: {bad[:4]}" if bad else ""))
    model = twin(model_args(cfg.split())).to(torch.bfloat16)
    strict_load(model, b, f"{cfg} --save-precision bf16",
                f"the bfloat16 {type(model).__name__}")


def torch_to_hyfi(torch_logits, tmp, cfg, model, seed):
    """A PyTorch model's state_dict, saved by safetensors, evaluated by hyfi."""
    flags = cfg.split()
    args = model_args(flags)
    x = torch.randn(BATCH, args.channels, args.image_size, args.image_size,
                    generator=torch.Generator().manual_seed(seed))
    randomise(model, x, seed)
    path = os.path.join(tmp, "torch.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    hy = hyfi_logits_of(torch_logits, flags, path, x, tmp)
    compare_logits(f"torch -> hyfi {cfg}", hy, model, x)
    return path


def torch_to_hyfi_train(hyfi_train, torch_logits, tmp, cfg, wrong_cfg):
    """hyfi-train --load takes a torchvision file; a model it does not fit is
    refused naming a tensor (a strict load)."""
    path = torch_to_hyfi(torch_logits, tmp, cfg, torchvision.models.resnet18(num_classes=7), 1)
    out = run([hyfi_train, *cfg.split(), "--dataset", "synthetic", "--batch-size", "2",
               "--steps", "1", "--device", "cpu", "--load", path])
    check("loaded" in out, f"hyfi-train {cfg} --load (torchvision's file) --steps 1")
    bad = subprocess.run([str(torch_logits), *wrong_cfg.split(), "--batch", "2", "--load", path],
                         capture_output=True, text=True)
    msg = bad.stderr.strip().splitlines()[-1] if bad.stderr.strip() else ""
    check(bad.returncode == 1 and "layer" in msg,
          f"resnet18's file into {wrong_cfg}: refused (exit {bad.returncode}): {msg}")


def main():
    hyfi_train, torch_logits = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for cfg in NAME_CONFIGS:
        check_names(torch_logits, cfg)
    with tempfile.TemporaryDirectory(prefix="hyfi-torch-export-") as tmp:
        steps = [
            lambda: hyfi_to_torch(
                hyfi_train, torch_logits, tmp,
                "--model resnet --depth 50 --num-classes 5 --image-size 64",
                lambda a: torchvision.models.resnet50(num_classes=a.num_classes)),
            lambda: hyfi_to_torch(
                hyfi_train, torch_logits, tmp,
                "--model amoebanet --num-layers 3 --num-filters 8 --num-classes 5 "
                "--image-size 32",
                torch_models.build),
            lambda: hyfi_to_torch_bf16(
                hyfi_train, tmp, "--model resnet --depth 18 --num-classes 5 --image-size 32",
                lambda a: torchvision.models.resnet18(num_classes=a.num_classes)),
            lambda: torch_to_hyfi_train(
                hyfi_train, torch_logits, tmp,
                "--model resnet --depth 18 --num-classes 7 --image-size 64",
                "--model resnet --depth 34 --num-classes 7 --image-size 64"),
            lambda: torch_to_hyfi(
                torch_logits, tmp, "--model resnet --depth 50 --num-classes 7 --image-size 64",
                torchvision.models.resnet50(num_classes=7), 2),
            lambda: torch_to_hyfi(
                torch_logits, tmp,
                "--model amoebanet --num-layers 6 --num-filters 64 --num-classes 7 "
                "--image-size 32",
                torch_models.AmoebaNetD(6, 64, 7, 3), 3),
        ]
        for step in steps:
            try:
                step()
            except RuntimeError as e:
                check(False, str(e))
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
