#!/usr/bin/python3
"""A default inference export trains as the model does, and exports back.

torch.onnx.export(model, x, path) with its defaults (inference mode, the
batch fixed at x's rows) keeps one of several initializers of equal value
and gives the other layers an Identity of it. This MLP has three such
(three zero biases, two equal weights). mpcc must train each as a weight of
its own, as PyTorch does, and `mpcc export` must write each back under its
own name, the Identity nodes gone.

Checks:
  - the export has the Identity nodes of weights (else the test proves
    nothing and fails);
  - mpcc compiles it at -batch 16 (re-batching the fixed batch of 1), and
    the trainer's 4 losses are PyTorch's (SGD, lr 0.1, momentum 0.9) within
    1e-5 relative;
  - `mpcc export` writes a model that passes onnx.checker, has no Identity
    node left, holds every state_dict entry as an initializer within 1e-5 +
    1e-4*|ref| of PyTorch's final weights, and whose Gemm/Relu graph,
    evaluated with numpy on 16 rows, gives the final PyTorch model's logits;
  - `mpcc export --dtype=bf16` stores each of those weights, the untied ones
    too, as NAME_bf16 in PyTorch's bf16 rounding of the checkpoint's, cast
    back to NAME, and its graph gives the logits of the final model with
    its weights so rounded.

Run:  /usr/bin/python3 tests/export/untied.py MPCC WORKDIR
"""
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from safetensors.numpy import load_file
from torch import nn

warnings.filterwarnings("ignore")
B, STEPS, LR, MOMENTUM = 16, 4, 0.1, 0.9


def model():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                      nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    with torch.no_grad():
        for layer in (m[0], m[2], m[4]):
            layer.bias.zero_()
        m[4].weight.copy_(m[2].weight)
    return m


def torch_train(m, x, y):
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for i in range(STEPS):
        xb, yb = torch.from_numpy(x[i * B:(i + 1) * B]), torch.from_numpy(y[i * B:(i + 1) * B])
        loss = nn.functional.cross_entropy(m(xb), yb)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return losses


def run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s exited %d:\n%s%s" % (cmd[0], r.returncode, r.stdout, r.stderr))
    return r


def numpy_forward(proto, x):
    """The exported graph: Gemm (transB=1) and Relu, in node order."""
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    vals = {proto.graph.input[0].name: x}
    for n in proto.graph.node:
        if n.op_type == "Gemm":
            a, w, b = (vals.get(i, inits.get(i)) for i in n.input)
            vals[n.output[0]] = a @ w.T + b
        elif n.op_type == "Relu":
            vals[n.output[0]] = np.maximum(vals[n.input[0]], 0)
        elif n.op_type == "Cast":   # a bf16 weight, which to_array gave as float32
            vals[n.output[0]] = inits[n.input[0]]
        else:
            sys.exit("FAIL: unexpected node %s in the exported model" % n.op_type)
    return vals[proto.graph.output[0].name]


def check_bf16(mpcc, work, m, ckpt, x):
    run([mpcc, "export", "model.onnx", "ckpt.safetensors", "--dtype=bf16", "-o",
         "trained_bf16.onnx"], work)
    out = onnx.load(os.path.join(work, "trained_bf16.onnx"))
    onnx.checker.check_model(out, full_check=True)
    inits = {t.name: t for t in out.graph.initializer}
    ok = True
    for k in m.state_dict():
        t = inits.get(k + "_bf16")
        want = torch.from_numpy(ckpt[k]).to(torch.bfloat16).view(torch.int16).numpy()
        good = k not in inits and t is not None and t.data_type == onnx.TensorProto.BFLOAT16 \
            and np.array_equal(np.frombuffer(t.raw_data, np.int16), want.ravel())
        ok &= good
        print("--dtype=bf16: %s_bf16 is PyTorch's bf16 rounding of %s: %s"
              % (k, k, "ok" if good else "FAIL"))
    r = model()
    r.load_state_dict({k: torch.from_numpy(ckpt[k]).to(torch.bfloat16).float()
                       for k in m.state_dict()})
    with torch.no_grad():
        want = r(torch.from_numpy(x)).numpy()
    err = float(np.max(np.abs(numpy_forward(out, x) - want)))
    print("forward of the bf16 export vs PyTorch's with bf16 weights: max abs err %.3g" % err)
    return ok and err <= 1e-4


def main():
    mpcc, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    m = model().eval()
    torch.onnx.export(m, torch.randn(1, 8), os.path.join(work, "model.onnx"))
    proto = onnx.load(os.path.join(work, "model.onnx"))
    inits = {t.name for t in proto.graph.initializer}
    shared = [n for n in proto.graph.node if n.op_type == "Identity" and n.input[0] in inits]
    if len(shared) < 2:
        sys.exit("FAIL: the export has %d Identity nodes of weights; this test needs some"
                 % len(shared))
    print("export: %d Identity nodes of weights: %s"
          % (len(shared), ", ".join("%s -> %s" % (n.input[0], n.output[0]) for n in shared)))

    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS * B, 8), dtype=np.float32)
    y = rng.integers(0, 4, size=STEPS * B, dtype=np.int64)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "y.npy"), y)
    m.train()
    ref_losses = torch_train(m, x, y)

    run([mpcc, "model.onnx", "-cpus", "1", "-batch", str(B), "--lr=%g" % LR,
         "--momentum=%g" % MOMENTUM, "-o", "train.c"], work)
    build = [ln for ln in open(os.path.join(work, "train.c")) if ln.startswith(" * build:  ")]
    run(["sh", "-c", build[0][len(" * build:  "):].strip() + " -Wall -Werror"], work)
    run(["./train", "--data", "x.npy", "--labels", "y.npy", "--steps", str(STEPS),
         "--save", "ckpt.safetensors", "--loss-log", "losses.txt"], work)
    losses = [float(s) for s in open(os.path.join(work, "losses.txt"))
              if s.strip() and not s.startswith("#")]
    failed = len(losses) != STEPS
    for i, (a, b) in enumerate(zip(losses, ref_losses)):
        bad = abs(a - b) > 1e-5 * abs(b)
        failed |= bad
        print("loss step %d: %.9g ref %.9g%s" % (i, a, b, "  FAIL" if bad else ""))

    run([mpcc, "export", "model.onnx", "ckpt.safetensors", "-o", "trained.onnx"], work)
    out = onnx.load(os.path.join(work, "trained.onnx"))
    onnx.checker.check_model(out, full_check=True)
    left = [n.name for n in out.graph.node if n.op_type == "Identity"]
    if left:
        print("FAIL: Identity nodes left in the exported model: %s" % left)
        failed = True
    got = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    ckpt = load_file(os.path.join(work, "ckpt.safetensors"))
    for k, v in m.state_dict().items():
        ref = v.numpy()
        a = got.get(k)
        ok = a is not None and a.shape == ref.shape and \
            np.all(np.abs(a - ref) <= 1e-5 + 1e-4 * np.abs(ref)) and np.array_equal(a, ckpt[k])
        failed |= not ok
        print("%s %s: %s" % (k, list(ref.shape), "ok" if ok else "FAIL"))
    with torch.no_grad():
        want = m(torch.from_numpy(x[:B])).numpy()
    err = float(np.max(np.abs(numpy_forward(out, x[:B]) - want)))
    failed |= not err <= 1e-4
    print("forward of the exported model vs PyTorch: max abs err %.3g" % err)
    failed |= not check_bf16(mpcc, work, m, ckpt, x[:B])
    print("untied: %s" % ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
