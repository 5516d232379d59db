#!/usr/bin/python3
"""Compare a generated trainer's output with a ref_train.py reference.

REF_DIR is a directory written by tests/train/ref_train.py (losses.npy,
final.npz).  LOSSES_TXT holds the trainer's loss of each step, one float per
line in step order (blank lines and lines starting with '#' are skipped).
CKPT is a safetensors file that must hold every reference tensor (every
state_dict entry but num_batches_tracked) under its state_dict name, as F32
with the reference shape; other tensors in it are ignored.

Checks: the number of losses equals the reference's K and every loss has
|a-b| <= rtol_loss*|b|; every tensor has |a-b| <= atol_w + rtol_w*|b|
elementwise (NaN/Inf fail).  Per tensor it prints the worst absolute error,
the worst relative error |a-b|/|b| and the worst "err" = |a-b|/(|b| +
atol_w/rtol_w), a relative error with |b| floored at atol_w/rtol_w: a tensor
passes exactly when its err <= rtol_w.  The last line is

  compare_train: K losses, T tensors, worst loss rel err X, worst weight err Y: ok|FAILED

with Y the worst err over all tensors.  Exit status 1 on any failure.

Run:  /usr/bin/python3 tests/train/compare_train.py REF_DIR LOSSES_TXT \\
          CKPT.safetensors [--rtol-loss 1e-4] [--rtol-w 1e-3] [--atol-w 1e-5]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
             "I64": np.int64, "I32": np.int32, "I16": np.int16,
             "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """name -> (dtype string, numpy array or None when the dtype is unknown).
    Format: u64 little-endian header length, JSON header {name: {dtype,
    shape, data_offsets: [begin, end)} relative to the end of the header},
    then the data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("%s: header length %d past the end of the file"
                         % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], [int(d) for d in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        if not 0 <= begin <= end <= len(data):
            raise ValueError("%s: tensor %s: data_offsets [%d, %d) outside "
                             "the %d data bytes" % (path, name, begin, end,
                                                    len(data)))
        np_dt = ST_DTYPES.get(dt)
        if np_dt is None:
            out[name] = (dt, None)
            continue
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * np.dtype(np_dt).itemsize:
            raise ValueError("%s: tensor %s: %d bytes for %s %s"
                             % (path, name, end - begin, dt, shape))
        arr = np.frombuffer(data[begin:end], dtype=np.dtype(np_dt)
                            .newbyteorder("<")).reshape(shape)
        out[name] = (dt, arr)
    return out


def read_losses(path):
    losses = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            try:
                losses.append(float(s))
            except ValueError:
                raise ValueError("%s:%d: not a float: %r" % (path, lineno, s))
    return np.array(losses, np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref_dir")
    ap.add_argument("losses_txt")
    ap.add_argument("ckpt")
    ap.add_argument("--rtol-loss", type=float, default=1e-4)
    ap.add_argument("--rtol-w", type=float, default=1e-3)
    ap.add_argument("--atol-w", type=float, default=1e-5)
    ap.add_argument("--atol-tensor", action="append", default=[], metavar="NAME=ATOL",
                    help="a looser absolute tolerance for one tensor (say why where "
                    "the test is registered)")
    args = ap.parse_args()
    atol_for = {}
    for item in args.atol_tensor:
        name, _, val = item.rpartition("=")
        atol_for[name] = float(val)
    if args.rtol_w <= 0 or args.atol_w < 0 or args.rtol_loss < 0:
        ap.error("want --rtol-w > 0, --atol-w >= 0, --rtol-loss >= 0")

    ref_losses = np.load(os.path.join(args.ref_dir, "losses.npy"))
    with np.load(os.path.join(args.ref_dir, "final.npz")) as z:
        ref = {k: z[k] for k in z.files}
    try:
        losses = read_losses(args.losses_txt)
        ckpt = read_safetensors(args.ckpt)
    except (OSError, ValueError) as e:
        print("compare_train: error: %s" % e)
        print("compare_train: %d losses, %d tensors, worst loss rel err nan, "
              "worst weight err nan: FAILED" % (len(ref_losses), len(ref)))
        return 1

    failed = False
    # ---- losses
    K = len(ref_losses)
    worst_loss = 0.0
    if len(losses) != K:
        print("losses: %s has %d values, the reference has %d steps"
              % (args.losses_txt, len(losses), K))
        failed = True
    for i in range(min(K, len(losses))):
        a, b = losses[i], ref_losses[i]
        rel = abs(a - b) / abs(b) if b != 0 else abs(a - b)
        if not np.isfinite(rel):
            rel = np.inf
        bad = not rel <= args.rtol_loss
        worst_loss = max(worst_loss, rel)
        failed |= bad
        print("loss step %d: %.9g ref %.9g rel err %.3g%s"
              % (i, a, b, rel, "  FAIL" if bad else ""))

    # ---- tensors
    worst_w, worst_name, nbad = 0.0, None, 0
    for name in sorted(ref):
        b = ref[name].astype(np.float64)
        if name not in ckpt:
            print("%s: MISSING from %s" % (name, args.ckpt))
            failed, nbad = True, nbad + 1
            continue
        dt, arr = ckpt[name]
        if dt != "F32" or arr is None:
            print("%s: dtype %s, want F32  FAIL" % (name, dt))
            failed, nbad = True, nbad + 1
            continue
        if tuple(arr.shape) != b.shape:
            print("%s: shape %s, reference %s  FAIL"
                  % (name, list(arr.shape), list(b.shape)))
            failed, nbad = True, nbad + 1
            continue
        a = arr.astype(np.float64)
        if b.size == 0:
            print("%s %s: empty  ok" % (name, list(b.shape)))
            continue
        atol = atol_for.get(name, args.atol_w)
        d = np.abs(a - b)
        d[~np.isfinite(a)] = np.inf
        nz = b != 0
        rel = float(np.max(d[nz] / np.abs(b[nz]))) if nz.any() else 0.0
        err = d / (atol / args.rtol_w + np.abs(b))
        i = int(np.argmax(err))
        e = float(err.flat[i])
        nfail = int(np.count_nonzero(~(d <= atol + args.rtol_w * np.abs(b))))
        if e > worst_w or worst_name is None:
            worst_w, worst_name = e, name
        if nfail:
            failed, nbad = True, nbad + 1
        print("%s %s: max abs err %.3g, max rel err %.3g, err %.3g at %s "
              "(%.9g vs ref %.9g)%s"
              % (name, list(b.shape), float(np.max(d)), rel, e,
                 list(np.unravel_index(i, b.shape)), a.flat[i], b.flat[i],
                 "  FAIL (%d of %d elements)" % (nfail, b.size)
                 if nfail else ""))
    extra = sorted(set(ckpt) - set(ref))
    if extra:
        print("(%d checkpoint tensors not in the reference, ignored: %s%s)"
              % (len(extra), ", ".join(extra[:8]),
                 ", ..." if len(extra) > 8 else ""))
    if nbad:
        print("%d of %d tensors FAILED (tolerance |a-b| <= %g + %g*|b|)"
              % (nbad, len(ref), args.atol_w, args.rtol_w))
    if worst_name is not None and np.isfinite(worst_w):
        print("worst tensor: %s" % worst_name)
    print("compare_train: %d losses, %d tensors, worst loss rel err %.3g, "
          "worst weight err %.3g: %s"
          % (K, len(ref), worst_loss, worst_w, "FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
