#!/usr/bin/env python3
"""Which tensors two checkpoints of the same trainer hold with other bits.

usage: ckpt_diff.py A.safetensors B.safetensors

Two runs of one trainer on the same data should write the same bytes. This
lists every tensor whose bits differ (its largest absolute difference and
how many elements differ) in the checkpoint's order, and the count of those
that are the same; exit status 0 when every tensor is the same."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from compare_train import read_safetensors  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    a, b = read_safetensors(sys.argv[1]), read_safetensors(sys.argv[2])
    same, differ = 0, 0
    for name in a:
        if name not in b:
            print("%s: only in %s" % (name, sys.argv[1]))
            differ += 1
            continue
        x, y = a[name][1], b[name][1]
        if x is None or y is None or x.shape != y.shape:
            print("%s: not comparable" % name)
            differ += 1
            continue
        ne = x.view(np.uint8).reshape(x.size, -1) != y.view(np.uint8).reshape(y.size, -1)
        ne = ne.any(axis=1) if ne.ndim > 1 else ne
        if not ne.any():
            same += 1
            continue
        differ += 1
        d = np.abs(x.astype(np.float64) - y.astype(np.float64)).max() \
            if x.dtype.kind == "f" else float("nan")
        print("%s %s: %d of %d elements differ, at most %.3g" % (name, list(x.shape),
                                                             int(ne.sum()), x.size, d))
    print("%d tensors the same, %d differ" % (same, differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
