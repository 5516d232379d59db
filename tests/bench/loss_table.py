#!/usr/bin/python3
"""Compare the per-step losses of one model's trainer runs
(tests/bench/gpu_run.sh check) and print Markdown table rows.

Each run is a folder holding `status` (one line: "ok", "no GPU", "build
failed", ...), `losses.txt` (the trainer's --loss-log: step i's loss before
its update, one per line) and `ckpt.safetensors` (its --save after the last
step: weights, optimizer state, step). The first run is the reference (the
CPU trainer on 1 device); every other run is compared with it step by step:

  step-1 rel   |loss - ref| / |ref| at the first step: the forward pass alone,
               on identical weights and data
  max abs/rel  the largest |loss - ref| and |loss - ref| / |ref| over the steps
  same as      the earlier runs whose losses and checkpoint are identical to
               this one's, byte for byte (checkpoint: weights and optimizer
               state after the last step)

PyTorch's float32 and float64 losses of the same model, weights and rows
(torch32.txt and torch64.txt in the model's folder, from gpu_models.py --ref)
give the yardstick: F, the largest relative distance over the steps of a
float32 run (the CPU trainer's or PyTorch's) from the float64 one. Two
float32 runs that round differently each stay about F from the exact curve,
so about 2F from each other. A float32 run passes when its step-1 difference
is at most 1e-5 (the forward pass differs only in the order of its sums) and
its largest relative difference at most max(1e-4, 4F) (1e-4: what the CPU
trainer meets against PyTorch in tests/train; 4F: twice the 2F of rounding).
TF32 runs (label containing "tf32") are reported without a verdict. So are
bf16 runs (label containing "bf16"): the CPU's against the float32
reference (how far bf16 moves the curve), a GPU's against the CPU's bf16
run (label "-cpus 1 --precision=bf16"), the same precision plan on another
device.

Run:  loss_table.py MODEL_LABEL MODEL_DIR LABEL=RUN_DIR [LABEL=RUN_DIR ...]
"""
import filecmp
import os
import sys


def read_losses(path):
    try:
        with open(path) as f:
            return [float(v) for v in f.read().split()]
    except (OSError, ValueError):
        return None


def status_of(run):
    try:
        with open(os.path.join(run, "status")) as f:
            return f.read().strip() or "?"
    except OSError:
        return "not run"


def same(a, b):
    """Losses and checkpoint of runs a and b identical, byte for byte."""
    files = ("losses.txt", "ckpt.safetensors")
    return all(os.path.exists(os.path.join(r, f)) for r in (a, b) for f in files) and all(
        filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in files)


def rel(a, b):
    return abs(a - b) / abs(b) if b else abs(a - b)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__.split("Run:")[1].strip())
    model, mdir = sys.argv[1], sys.argv[2]
    runs = [a.rsplit("=", 1) for a in sys.argv[3:]]   # LABEL=DIR; a label may hold "="
    t32 = read_losses(os.path.join(mdir, "torch32.txt"))
    t64 = read_losses(os.path.join(mdir, "torch64.txt"))
    ref_label, ref_dir = runs[0]
    ref = read_losses(os.path.join(ref_dir, "losses.txt")) \
        if status_of(ref_dir) == "ok" else None

    floor = None
    if t64 and (t32 or ref):
        floor = max(rel(a, b) for other in (t32, ref) if other
                    for a, b in zip(other, t64))
    tol = max(1e-4, 4 * floor) if floor is not None else 1e-4

    cpu_bf16 = dict(runs).get("-cpus 1 --precision=bf16")
    bf16_ref = read_losses(os.path.join(cpu_bf16, "losses.txt")) \
        if cpu_bf16 and status_of(cpu_bf16) == "ok" else None

    rows = []
    entries = [(label, run, None) for label, run in runs]
    if t32:
        entries.append(("PyTorch float32", None, t32))
    if t64:
        entries.append(("PyTorch float64", None, t64))
    done = []
    for label, run, losses in entries:
        st = status_of(run) if run else "ok"
        if run:
            losses = read_losses(os.path.join(run, "losses.txt"))
        if st != "ok" or not losses:
            rows.append((label, st if st != "ok" else "no losses", "", "", "", "", "", ""))
            continue
        curve = "%.6f → %.6f" % (losses[0], losses[-1])
        twins = [lb for lb, r in done if same(run, r)] if run else []
        if run:
            done.append((label, run))
        if run == ref_dir or ref is None:
            rows.append((label, "ok", curve, "reference" if run == ref_dir else "", "", "", "",
                         ", ".join(twins)))
            continue
        against = ref
        if "bf16" in label and run != cpu_bf16 and bf16_ref:
            against = bf16_ref
        n = min(len(losses), len(against))
        d = [abs(losses[i] - against[i]) for i in range(n)]
        r = [rel(losses[i], against[i]) for i in range(n)]
        first, worst = r[0], max(r)
        if "tf32" in label:
            verdict = "(TF32: no tolerance)"
        elif "bf16" in label:
            verdict = "(bf16: to -cpus 1 bf16)" if against is bf16_ref else "(bf16: to fp32)"
        elif run is None:
            verdict = ""
        elif len(losses) != len(ref):
            verdict = "NO: %d steps, reference %d" % (len(losses), len(ref))
        else:
            verdict = "yes" if first <= 1e-5 and worst <= tol else "NO"
        rows.append((label, "ok", curve, "%.1e" % first, "%.1e" % max(d), "%.1e" % worst,
                     verdict, ", ".join(twins)))
    for i, row in enumerate(rows):
        print("| %s | %s |" % (model if i == 0 else "", " | ".join(row)))
    sys.stderr.write("%s: float32 distance from float64 F = %s, tolerance max(1e-4, 4F) = "
                     "%.1e\n" % (model, "%.1e" % floor if floor is not None else "n/a", tol))
    with open(os.path.join(mdir, "tolerance.txt"), "w") as f:
        f.write("%s %s %.3g\n" % (model, "%.3g" % floor if floor is not None else "n/a", tol))


def header():
    return ("| model | trainer | status | loss, step 1 → last | step-1 rel diff | max abs diff"
            " | max rel diff | within tolerance | same bits as |\n"
            "|---|---|---|---|---|---|---|---|---|")


if __name__ == "__main__":
    if sys.argv[1:] == ["--header"]:
        print(header())
    else:
        main()
