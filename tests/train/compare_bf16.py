#!/usr/bin/python3
"""Compare a bf16 trainer's step losses with PyTorch's own mixed precision.

REF_DIR is written by tests/train/ref_train.py --autocast-check: losses.npy
(float32 PyTorch) and losses_autocast.npy (the same training from the same
weights under torch.autocast("cpu", dtype=torch.bfloat16)).  LOSSES_TXT is
the trainer's loss log, one loss per step.

The bound (docs/precision.md): at every step i, with f the float32 loss and
a autocast's,

    |mpcc_i - f_i| <= 3 |a_i - f_i| + 2e-3 |f_i|

and the run must be in bf16 at all: some step's loss is further from f than
1e-5 relative, where a float32 trainer stays within compare_train's 1e-4
and in practice within 1e-6.  The last line is

  compare_bf16: K losses, worst ratio R, furthest rel err E: ok|FAILED

with R the worst |mpcc - f| / bound over the steps.  Exit status 1 on any
failure.

Run:  /usr/bin/python3 tests/train/compare_bf16.py REF_DIR LOSSES_TXT
          [--times 3] [--rtol 2e-3]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_train import read_losses  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref_dir")
    ap.add_argument("losses_txt")
    ap.add_argument("--times", type=float, default=3.0)
    ap.add_argument("--rtol", type=float, default=2e-3)
    args = ap.parse_args()
    f = np.load(os.path.join(args.ref_dir, "losses.npy"))
    a = np.load(os.path.join(args.ref_dir, "losses_autocast.npy"))
    try:
        m = read_losses(args.losses_txt)
    except (OSError, ValueError) as e:
        print("compare_bf16: error: %s" % e)
        print("compare_bf16: %d losses, worst ratio nan, furthest rel err "
              "nan: FAILED" % len(f))
        return 1
    failed = len(m) != len(f)
    if failed:
        print("losses: %s has %d values, the reference has %d steps"
              % (args.losses_txt, len(m), len(f)))
    worst, furthest = 0.0, 0.0
    for i in range(min(len(m), len(f))):
        dist = abs(m[i] - f[i])
        bound = args.times * abs(a[i] - f[i]) + args.rtol * abs(f[i])
        ratio = dist / bound if np.isfinite(dist) else np.inf
        worst = max(worst, ratio)
        furthest = max(furthest, dist / abs(f[i]))
        bad = not ratio <= 1.0
        failed |= bad
        print("loss step %d: bf16 %.9g fp32 %.9g autocast %.9g: |bf16-fp32| "
              "%.3g, bound %.3g%s" % (i, m[i], f[i], a[i], dist, bound,
                                      "  FAIL" if bad else ""))
    if not furthest > 1e-5:
        print("the losses are float32's (furthest rel err %.3g <= 1e-5): "
              "the run is not in bf16" % furthest)
        failed = True
    print("compare_bf16: %d losses, worst ratio %.3g, furthest rel err %.3g: "
          "%s" % (len(m), worst, furthest, "FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
