#!/usr/bin/env python3
"""Fit analytic task-time models to StarPU's calibrated history models.

For every hyfi codelet and device kind (cpu, cuda) with measured footprints
in SAMPLING/codelets/45/<symbol>.<MACHINE>, fits

    microseconds = A + B * flops + C * bytes

(flops: the task's STARPU_FLOPS; bytes: the sum of its buffers' sizes, the
history's "size" column) by least squares on relative errors, each footprint
weighted by its sample count, coefficients kept >= 0. Prints the coefficient
lines that HYFI_SIM_ANALYTIC reads (docs/simulation.md) and, on stderr, the
fit error per codelet: the time-weighted mean |relative error| over the
measured footprints, in-sample and leave-one-out (each footprint predicted by
a fit without it: the error to expect for a shape never measured).

  bench/fit_perfmodels.py SAMPLING MACHINE > coefficients.txt
  bench/fit_perfmodels.py --gpu NAME TFLOPS GBPS [EFF_FLOPS EFF_BYTES LAUNCH_US] >> coefficients.txt

--gpu writes cuda lines from a GPU's figures instead, for a device never
calibrated here (no GPU measurements yet): A = LAUNCH_US (default 10: StarPU
task plus kernel launch), B = 1 / (EFF_FLOPS x peak FP32 flops) for the
compute-bound codelets (convolutions, fc; default efficiency 0.6),
C = 1 / (EFF_BYTES x memory bandwidth) for all (default 0.7). hyfi's cuDNN
convolutions use FMA math (no TF32 tensor cores), so the peak is the plain
FP32 one: V100-SXM2 15.7 TFLOP/s, 900 GB/s; H100-SXM5 67 TFLOP/s, 3350 GB/s.
"""
import glob
import itertools
import os
import sys


def read_history(path):
    """{device kind: [(bytes, flops, mean_us, n)]} of one history model file."""
    out, dev, body = {}, None, False
    for line in open(path):
        if line.startswith("# Model for "):
            arch = line[len("# Model for "):]
            dev = "cuda" if arch.startswith("cuda") else "cpu" if arch.startswith("cpu") else None
            body = False
        elif line.startswith("# hash"):
            body = True
        elif body and dev and not line.startswith("#"):
            f = line.split()
            if len(f) == 8:
                size, flops, mean, n = float(f[1]), float(f[2]), float(f[3]), int(f[7])
                if n > 0 and mean > 0:
                    out.setdefault(dev, []).append((size, flops, mean, n))
            else:
                body = False
    return out


def solve(rows, cols):
    """Weighted least squares on relative error with coefficients >= 0: the
    best of the fits over subsets of the columns (3 columns: 7 subsets)."""
    best = None
    for k in range(1, len(cols) + 1):
        for sub in itertools.combinations(cols, k):
            coef = lsq(rows, sub)
            if coef is None or any(v < 0 for v in coef.values()):
                continue
            err = sum(w * ((pred(coef, x) - t) / t) ** 2 for x, t, w in rows)
            if best is None or err < best[0]:
                best = (err, coef)
    return best[1] if best else {"a": 0.0}


def feat(x, c):
    return 1.0 if c == "a" else x[0] if c == "b" else x[1]


def lsq(rows, cols):
    n = len(cols)
    M = [[0.0] * n for _ in range(n)]
    v = [0.0] * n
    for x, t, w in rows:
        f = [feat(x, c) / t for c in cols]  # relative: divide the row by t
        for i in range(n):
            v[i] += w * f[i]
            for j in range(n):
                M[i][j] += w * f[i] * f[j]
    # Gaussian elimination with partial pivoting
    A = [M[i] + [v[i]] for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(A[r][i]))
        if abs(A[p][i]) < 1e-300:
            return None
        A[i], A[p] = A[p], A[i]
        for r in range(n):
            if r != i:
                q = A[r][i] / A[i][i]
                A[r] = [a - q * b for a, b in zip(A[r], A[i])]
    try:
        return {c: A[i][n] / A[i][i] for i, c in enumerate(cols)}
    except ZeroDivisionError:  # singular: e.g. all footprints of equal size
        return None


def pred(coef, x):
    return coef.get("a", 0.0) + coef.get("b", 0.0) * x[0] + coef.get("c", 0.0) * x[1]


SYMBOLS = ["conv2d_forward", "conv2d_backward_data", "conv2d_backward_weight",
           "batchnorm_forward_train", "batchnorm_forward_eval", "batchnorm_backward",
           "relu_forward", "relu_backward", "add_forward", "accumulate", "fill",
           "maxpool_forward", "maxpool_backward", "avgpool_forward", "avgpool_backward",
           "gap_forward", "gap_backward", "concat_forward", "concat_backward", "fc_forward",
           "fc_backward_data", "fc_backward_weight", "xent_forward", "xent_backward",
           "sgd_update", "copy_slice", "running_combine", "tile_assemble", "tile_scatter",
           "bn_stats", "bn_combine", "bn_bwd_stats", "bn_bwd_combine", "bn_bwd_apply",
           "redux_zero", "redux_add", "accumulate_n", "sgd_update_n"]


def gpu_lines(argv):
    name, tflops, gbps = argv[0], float(argv[1]), float(argv[2])
    eff_f = float(argv[3]) if len(argv) > 3 else 0.6
    eff_b = float(argv[4]) if len(argv) > 4 else 0.7
    launch = float(argv[5]) if len(argv) > 5 else 10.0
    print("# %s: %.1f TFLOP/s FP32 x %.2f, %.0f GB/s x %.2f, %.1f us per task "
          "(figures, not measurements)" % (name, tflops, eff_f, gbps, eff_b, launch))
    b = 1e6 / (eff_f * tflops * 1e12)
    c = 1e6 / (eff_b * gbps * 1e9)
    for sym in SYMBOLS:
        compute = sym.startswith("conv2d") or sym.startswith("fc_")
        print("hyfi_%s cuda %.6g %.6g %.6g" % (sym, launch, b if compute else 0.0, c))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--gpu":
        if len(sys.argv) < 5:
            sys.exit(__doc__)
        return gpu_lines(sys.argv[2:])
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sampling, machine = sys.argv[1], sys.argv[2]
    files = sorted(glob.glob(os.path.join(sampling, "codelets", "45", "hyfi_*." + machine)))
    if not files:
        sys.exit("no hyfi models of machine %s in %s/codelets/45" % (machine, sampling))
    print("# analytic models fitted to the calibrated models of machine %s" % machine)
    print("# symbol device A_us B_us_per_flop C_us_per_byte   (bench/fit_perfmodels.py)")
    tot_w = tot_in = tot_loo = 0.0
    report = []
    for path in files:
        sym = os.path.basename(path)[: -len(machine) - 1]
        for dev, pts in sorted(read_history(path).items()):
            rows = [((fl, size), mean, n) for size, fl, mean, n in pts]
            cols = ["a", "b", "c"] if any(r[0][0] > 0 for r in rows) else ["a", "c"]
            coef = solve(rows, cols)
            print("%s %s %.6g %.6g %.6g" % (sym, dev, coef.get("a", 0.0), coef.get("b", 0.0),
                                            coef.get("c", 0.0)))
            # time-weighted errors: each footprint by its share of the measured time
            wsum = sum(t * n for _, t, n in rows)
            e_in = sum(t * n * abs(pred(coef, x) - t) / t for x, t, n in rows) / wsum
            if len(rows) > 1:
                e_loo = 0.0
                for i, (x, t, n) in enumerate(rows):
                    c2 = solve(rows[:i] + rows[i + 1:], cols)
                    e_loo += t * n * abs(pred(c2, x) - t) / t
                e_loo /= wsum
            else:
                e_loo = float("nan")
            report.append((sym, dev, len(rows), wsum / 1e6, e_in, e_loo))
            tot_w += wsum
            tot_in += e_in * wsum
            if e_loo == e_loo:
                tot_loo += e_loo * wsum
    sys.stderr.write("| codelet | device | footprints | measured s | fit error | leave-one-out |\n")
    sys.stderr.write("|---|---|---|---|---|---|\n")
    for sym, dev, k, s, ei, el in sorted(report, key=lambda r: -r[3]):
        sys.stderr.write("| %s | %s | %d | %.2f | %.0f%% | %s |\n" % (
            sym, dev, k, s, 100 * ei, "-" if el != el else "%.0f%%" % (100 * el)))
    sys.stderr.write("| all (time-weighted) | | | %.2f | %.0f%% | %.0f%% |\n" % (
        tot_w / 1e6, 100 * tot_in / tot_w, 100 * tot_loo / tot_w))


if __name__ == "__main__":
    main()
