#!/usr/bin/python3
"""Dropout in the generated trainer: the mask's statistics, forward and
backward using the same mask, determinism per --seed, and inference mode.

Model: y = Dropout(P, ratio r, training_mode 1) + x, with P a (n,)
initializer, x a (B, n) input fed with zeros, MSE against zero labels. Then
loss = mean_i (keep_i * s * P_i)^2 with s = 1/(1-r), and one SGD step with
learning rate L moves P_i to P_i * (1 - 2 L s^2 / n) exactly where the mask
kept element i and leaves it unchanged elsewhere. So the checkpoint shows
the backward pass's mask, and the logged loss must be what the forward pass
computed with that same mask.

Run:  dropout.py MPCC WORKDIR
"""
import os
import subprocess
import sys
sys.dont_write_bytecode = True
from build_line import libraries  # noqa: E402

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N, B, RATIO, LR = 20000, 2, 0.3, 64.0


def die(msg):
    sys.stderr.write("dropout: FAILED: %s\n" % msg)
    sys.exit(1)


def run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        die("%s exited %d:\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r.stderr


def make_model(path, p0):
    nodes = [
        helper.make_node("Dropout", ["P", "ratio", "training"], ["d"], name="drop"),
        helper.make_node("Add", ["d", "x"], ["y"], name="add"),
    ]
    inits = [numpy_helper.from_array(p0, "P"),
             numpy_helper.from_array(np.array(RATIO, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "training")]
    g = helper.make_graph(nodes, "dropout", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def load_ckpt(path):
    """The tensor P of a safetensors checkpoint (header parsed by hand:
    the reference must not depend on mpcc's reader)."""
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    b, e = head["P"]["data_offsets"]
    return np.frombuffer(data[b:e], np.float32)


def train(work, seed, tag, extra=()):
    log = os.path.join(work, "loss_%s.txt" % tag)
    ck = os.path.join(work, "ck_%s.safetensors" % tag)
    err = run(["./train", "--data", "x.npy", "--labels", "y.npy", "--steps", "1",
               "--seed", str(seed), "--loss-log", log, "--save", ck] + list(extra), work)
    with open(log) as f:
        loss = float(f.read().split()[-1])
    return loss, load_ckpt(ck), err


def main():
    mpcc, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(0)
    p0 = rng.uniform(0.5, 1.5, size=N).astype(np.float32)
    make_model(os.path.join(work, "model.onnx"), p0)
    np.save(os.path.join(work, "x.npy"), np.zeros((B, N), np.float32))
    np.save(os.path.join(work, "y.npy"), np.zeros((B, N), np.float32))
    run([mpcc, "model.onnx", "-cpus", "1", "-batch", str(B), "--loss=mse",
         "--optimizer=sgd", "--lr=%g" % LR, "-o", "train.c"], work)
    run(["cc", "-O2", "-Wall", "-Werror", "train.c", "-o", "train",
         *libraries(os.path.join(work, "train.c"))], work)

    s = np.float32(1.0) / (np.float32(1.0) - np.float32(RATIO))
    loss, p1, _ = train(work, 0, "a")
    kept = p1 != p0
    frac = kept.mean()
    sigma = np.sqrt(RATIO * (1 - RATIO) / N)
    print("kept %.4f of %d elements (expected %.2f +- %.4f)" % (frac, N, 1 - RATIO, sigma))
    if abs(frac - (1 - RATIO)) > 4 * sigma:
        die("kept fraction %.4f is more than 4 sigma from %.2f" % (frac, 1 - RATIO))

    # backward: kept elements moved by exactly the factor, the others not at all
    want = p0.astype(np.float64) * (1 - 2 * LR * float(s) ** 2 / N)
    err = np.max(np.abs(p1[kept] - want[kept]) / np.abs(want[kept]))
    print("update of kept elements: max rel err %.3g" % err)
    if err > 1e-5:
        die("kept elements are not scaled by 1/(1-ratio) in the gradient (%.3g)" % err)

    # forward used the same mask: the loss from the mask the backward showed
    ref = float(np.mean(np.where(kept, (p0.astype(np.float64) * float(s)) ** 2, 0.0)))
    print("loss %.9g, from the backward's mask %.9g" % (loss, ref))
    if abs(loss - ref) > 1e-5 * ref:
        die("the forward's mask is not the backward's (loss %.9g vs %.9g)" % (loss, ref))

    # determinism per seed; another seed, another mask
    loss_b, p1_b, _ = train(work, 0, "b")
    if loss_b != loss or not np.array_equal(p1_b, p1):
        die("two runs with --seed 0 differ")
    _, p1_c, _ = train(work, 1, "c")
    overlap = np.mean((p1_c != p0) == kept)
    print("--seed 1 agrees with --seed 0 on %.4f of the mask (independent: %.2f)"
          % (overlap, (1 - RATIO) ** 2 + RATIO ** 2))
    if overlap > 0.7:
        die("--seed 1 gives nearly the same mask as --seed 0")

    # inference mode (evaluation): Dropout is the identity, loss = mean(P^2)
    _, p1_e, err = train(work, 0, "e", ["--eval-data", "x.npy", "--eval-labels", "y.npy"])
    line = [ln for ln in err.splitlines() if ln.startswith("eval")]
    if not line:
        die("no eval line in the trainer's output:\n" + err)
    got = float(line[-1].split("loss")[1].split()[0])
    ref = float(np.mean(p1_e.astype(np.float64) ** 2))
    print("eval loss %.7g, mean(P^2) after the step %.7g" % (got, ref))
    if abs(got - ref) > 1e-5 * ref:
        die("Dropout is not the identity in evaluation (%.7g vs %.7g)" % (got, ref))
    print("dropout: ok")


if __name__ == "__main__":
    main()
