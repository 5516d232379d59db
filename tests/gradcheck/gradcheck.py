#!/usr/bin/python3
"""Per-op gradient checks: mpcc's backward pass against PyTorch autograd.

For one case of cases.py: build a tiny ONNX model (opset 17 unless the case says) whose float
operands are initializers, so mpcc trains them, followed by Add(result, x)
with x a graph input of zeros; compute the loss and the gradient of every
parameter in PyTorch (float64, same float32 values); compile the model with
mpcc (--optimizer=sgd --lr=1024 --momentum=0), build the trainer with the
line mpcc wrote plus -Wall -Werror, run one step and recover mpcc's gradient
as (w0 - w1) / 1024 (a power of two: the scaling is exact).  Each gradient
element must satisfy

    |g_mpcc - g_torch| <= atol + rtol*|g_torch| + spacing(w1)/1024

with rtol 1e-4 and atol 1e-5 * max|g_torch| of that parameter (per-case
overrides in cases.py), the last term being the rounding of the float32
update itself; the step-0 loss must match to 1e-5 relative, and state the op
updates (BatchNorm running statistics) to 1e-6 + 1e-5 relative.

Run:
  gradcheck.py run CASE --mpcc build/mpcc --work DIR   one case
  gradcheck.py ready compiler/ops.def   the cases whose ops all have OPF_GRAD
                                        (or OPF_NOGRAD: bool or index outputs)
                                        (CMake registers these), one a line
  gradcheck.py coverage compiler/ops.def   fail if an op with OPF_GRAD
                                           (not OPF_INTERNAL) has no case
  gradcheck.py table                    every case, ready or not: the model is
                                        valid ONNX, its inferred shape agrees
                                        with PyTorch's, every parameter has a
                                        gradient
  gradcheck.py list compiler/ops.def    every case and whether it is ready
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import types
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from cases import CASES  # noqa: E402
from compare_train import read_safetensors  # noqa: E402

LR = 1024.0
RTOL, ATOL_REL = 1e-4, 1e-5
LOSS_RTOL = 1e-5
STATE_RTOL, STATE_ATOL = 1e-5, 1e-6
RESERVED = ("x", "out", "labels", "loss")


# ---- the op table ----

def read_ops_def(path):
    """op name -> set of flags, from compiler/ops.def's OP(...) rows."""
    row = re.compile(r'^OP\(\s*\w+\s*,\s*"(\w+)"\s*,[^,]*,[^,]*,[^,]*,[^,]*,\s*([^)]*)\)')
    ops = {}
    with open(path) as f:
        for line in f:
            m = row.match(line)
            if m:
                ops[m.group(1)] = {s.strip() for s in m.group(2).split("|")}
    if not ops:
        raise SystemExit("gradcheck: %s: no OP(...) rows found" % path)
    return ops


def model_ops(case):
    """The ONNX ops the case's model uses (Constant nodes aside)."""
    ops = {n.op_type for n in case.nodes if not isinstance(n, tuple)} | set(case.needs)
    if case.loss != "model":
        ops.add("Add")
    return ops


def is_ready(case, ops):
    return all(ops.get(op, set()) & {"OPF_GRAD", "OPF_NOGRAD"} for op in model_ops(case))


# ---- building the case ----

def generate(case):
    """The case's values, drawn from a generator seeded by its name."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    inits = {k: np.array(g(rng), order="C") for k, g in case.inits.items()}
    consts = {k: np.array(g(rng), order="C") for k, g in case.consts.items()}
    labels = case.labels(rng) if case.labels else None
    return rng, inits, consts, labels


def params_of(case, inits):
    return [k for k, v in inits.items() if v.dtype == np.float32 and k not in case.stats]


def torch_reference(case, rng, inits, consts, labels):
    """PyTorch in float64: the output, the targets, the loss, the gradient of
    every parameter and the new value of every stat."""
    t = types.SimpleNamespace()
    params = {}
    for k, v in list(inits.items()) + list(consts.items()):
        if v.dtype == np.bool_:
            tt = torch.from_numpy(v.copy())
        elif v.dtype.kind in "iu":
            tt = torch.from_numpy(v.astype(np.int64))
        else:
            tt = torch.from_numpy(v.astype(np.float64))
            if k in inits and k not in case.stats:
                tt.requires_grad_(True)
                params[k] = tt
        setattr(t, k, tt)
    if labels is not None:
        t.labels = torch.from_numpy(labels)
    if case.loss == "model":
        t.x = torch.zeros(inits[case.x_like].shape, dtype=torch.float64)
    r = case.torch(t)
    out, state = r if isinstance(r, tuple) else (r, {})
    y = None
    if case.loss == "mse":
        y = rng.standard_normal(tuple(out.shape)).astype(np.float32)
        loss = ((out - torch.from_numpy(y.astype(np.float64))) ** 2).mean()
    elif case.loss == "cross_entropy":
        loss = F.cross_entropy(out.movedim(case.class_axis, 1), t.labels,
                               ignore_index=case.ignore_index)
    else:
        loss = out
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    grads = {k: (np.zeros(inits[k].shape) if g is None else g.detach().numpy())
             for k, g in zip(params, grads)}
    return dict(out_shape=tuple(out.shape), y=y, loss=float(loss),
                grads=grads, state={k: v.detach().numpy() for k, v in state.items()})


def make_model(case, inits, consts, labels, out_shape):
    nodes = []
    for n in case.nodes:
        if isinstance(n, tuple):   # Const(name, value_name)
            _, name, value = n
            nodes.append(helper.make_node(
                "Constant", [], [name], name=name,
                value=numpy_helper.from_array(consts[value], name=name)))
        else:
            nodes.append(n)
    if case.loss == "model":
        xs = inits[case.x_like].shape
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                ["batch"] + list(xs[1:])),
                  helper.make_tensor_value_info("labels", TensorProto.INT64,
                                                ["batch"] + list(labels.shape[1:]))]
        outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    else:
        dims = ["batch"] + list(out_shape[1:])
        nodes.append(helper.make_node("Add", [case.out, "x"], ["out"], name="out"))
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
        outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, dims)]
    graph = helper.make_graph(
        nodes, "gradcheck_" + case.name, inputs, outputs,
        initializer=[numpy_helper.from_array(v, name=k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)],
                             producer_name="mpcc gradcheck", ir_version=8)


def prepare(case):
    rng, inits, consts, labels = generate(case)
    ref = torch_reference(case, rng, inits, consts, labels)
    model = make_model(case, inits, consts, labels, ref["out_shape"])
    return inits, labels, ref, model


# ---- checking mpcc ----

def run(cmd, cwd, case):
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=100)
    if p.stdout:
        sys.stdout.write(p.stdout)
    if p.returncode != 0:
        raise SystemExit("gradcheck: %s: FAILED (exit status %d): %s"
                         % (case.name, p.returncode, cmd[0]))


def batch_of(case, inits, ref):
    if case.loss == "model":
        return inits[case.x_like].shape[0]
    return ref["out_shape"][0]


def write_data(case, inits, labels, ref, work):
    if case.loss == "model":
        xs = inits[case.x_like].shape
    else:
        xs = ref["out_shape"]
    np.save(os.path.join(work, "x.npy"), np.zeros(xs, np.float32))
    np.save(os.path.join(work, "y.npy"), ref["y"] if case.loss == "mse" else labels)


def compare_grad(name, w0, w1, g_ref, rtol, atol_rel):
    """One parameter: prints a line, returns True when it passes."""
    g = (w0.astype(np.float64) - w1.astype(np.float64)) / LR
    scale = float(np.max(np.abs(g_ref))) if g_ref.size else 0.0
    atol = atol_rel * scale
    bound = atol + rtol * np.abs(g_ref) + np.spacing(np.abs(w1)).astype(np.float64) / LR
    d = np.abs(g - g_ref)
    d[~np.isfinite(g)] = np.inf
    bad = ~(d <= bound)
    err = d / bound
    i = int(np.argmax(err))
    idx = list(np.unravel_index(i, g_ref.shape)) if g_ref.ndim else []
    print("  d%-10s %-14s max|g| %.3g  worst %s: mpcc %.9g torch %.9g (|diff| %.3g, "
          "%.3g of the tolerance)%s"
          % (name, list(g_ref.shape), scale, idx, g.flat[i], g_ref.flat[i], d.flat[i],
             err.flat[i], "  FAIL (%d of %d elements)" % (bad.sum(), bad.size)
             if bad.any() else "  ok"))
    if scale == 0.0:
        print("  d%s: the reference gradient is zero everywhere; the case checks "
              "nothing" % name)
        return False
    return not bad.any()


def compare_state(name, w1, ref):
    d = np.abs(w1.astype(np.float64) - ref)
    bound = STATE_ATOL + STATE_RTOL * np.abs(ref)
    bad = ~(d <= bound)
    i = int(np.argmax(d / bound))
    print("  %-11s %-14s new value: worst %s: mpcc %.9g torch %.9g%s"
          % (name, list(ref.shape), list(np.unravel_index(i, ref.shape)), w1.flat[i],
             ref.flat[i], "  FAIL (%d of %d elements)" % (bad.sum(), bad.size)
             if bad.any() else "  ok"))
    return not bad.any()


def saved(ckpt, name, shape):
    """The checkpoint's float32 tensor `name` of `shape`, or None (reported)."""
    dt, a = ckpt.get(name, (None, None))
    if a is None or dt != "F32" or tuple(a.shape) != tuple(shape):
        print("  %-11s want F32 %s in the checkpoint, found %s  FAIL"
              % (name, list(shape), "nothing" if dt is None else "%s %s"
                 % (dt, list(a.shape) if a is not None else "?")))
        return None
    return a


def check_kernels(case, code, kernels):
    """--cpu-kernels=onednn: the convolutions call oneDNN and the build
    links it; builtin: neither."""
    calls = re.search(r"^    mprt_dnnl_conv\w*\(", code, re.M) is not None
    links = re.search(r"^ \* build: .*-ldnnl", code, re.M) is not None
    if (kernels == "onednn") != calls or calls != links:
        raise SystemExit("gradcheck: %s: --cpu-kernels=%s, yet train.c %s oneDNN and its "
                         "build line %s -ldnnl" % (case.name, kernels,
                                                   "calls" if calls else "does not call",
                                                   "has" if links else "lacks"))


def check_case(case, mpcc, work, kernels=None):
    os.makedirs(work, exist_ok=True)
    for f in ("train", "train.c", "ckpt.safetensors", "loss.txt"):
        if os.path.exists(os.path.join(work, f)):
            os.remove(os.path.join(work, f))
    inits, labels, ref, model = prepare(case)
    onnx.save(model, os.path.join(work, "model.onnx"))
    write_data(case, inits, labels, ref, work)

    cmd = [mpcc, "model.onnx", "-cpus", "1", "-batch", str(batch_of(case, inits, ref)),
           "--optimizer=sgd", "--lr=%g" % LR, "--momentum=0", "-o", "train.c"]
    if case.loss == "mse":
        cmd.append("--loss=mse")
    elif case.loss == "cross_entropy":
        cmd += ["--loss=cross_entropy", "--ignore-index=%d" % case.ignore_index]
    cmd += case.flags
    if kernels:
        cmd.append("--cpu-kernels=" + kernels)
    run(cmd, work, case)
    with open(os.path.join(work, "train.c")) as f:
        code = f.read()
    if kernels:
        check_kernels(case, code, kernels)
    m = re.search(r"^ \* build:  (.*)$", code, re.M)
    if not m:
        raise SystemExit("gradcheck: %s: train.c has no ' * build:' line" % case.name)
    run(shlex.split(m.group(1)) + ["-Wall", "-Werror"], work, case)
    run(["./train", "--data", "x.npy", "--labels", "y.npy", "--steps", "1",
         "--save", "ckpt.safetensors", "--loss-log", "loss.txt"], work, case)

    with open(os.path.join(work, "loss.txt")) as f:
        losses = [float(s) for s in f.read().split()]
    ckpt = read_safetensors(os.path.join(work, "ckpt.safetensors"))

    rtol = case.rtol if case.rtol is not None else RTOL
    atol_rel = case.atol_rel if case.atol_rel is not None else ATOL_REL
    print("gradcheck %s (%s)%s" % (case.name, case.op,
                                   ": " + case.note if case.note else ""))
    print("  tolerance per element: %g * max|g| + %g * |g| + spacing(w1)/%g"
          % (atol_rel, rtol, LR))
    ok = True
    loss = losses[0] if losses else float("nan")
    rel = abs(loss - ref["loss"]) / abs(ref["loss"])
    loss_ok = rel <= LOSS_RTOL
    print("  loss        mpcc %.9g torch %.9g (rel %.3g)%s"
          % (loss, ref["loss"], rel, "" if loss_ok else "  FAIL"))
    ok &= loss_ok
    for name in params_of(case, inits):
        w1 = saved(ckpt, name, inits[name].shape)
        ok &= w1 is not None and compare_grad(name, inits[name], w1, ref["grads"][name],
                                              rtol, atol_rel)
    for name in case.stats:
        w1 = saved(ckpt, name, inits[name].shape)
        ok &= w1 is not None and compare_state(name, w1, ref["state"][name])
    print("gradcheck %s: %s" % (case.name, "ok" if ok else "FAILED"))
    return ok


# ---- the table as a whole ----

def check_table():
    """Every case: unique CMake-safe name, valid ONNX whose inferred result
    shape is PyTorch's, a nonzero reference gradient for every parameter."""
    ok, seen = True, set()
    for case in CASES:
        problems = []
        if (not re.fullmatch(r"[A-Za-z0-9_]+", case.name) or case.name in seen
                or case.name in ("coverage", "table")):
            problems.append("the name is not unique, or not [A-Za-z0-9_]+, or is "
                            "the name of another gradcheck test")
        seen.add(case.name)
        try:
            inits, labels, ref, model = prepare(case)
            clash = set(inits) & set(RESERVED)
            if clash:
                problems.append("initializer names %s are reserved" % sorted(clash))
            if case.opset > onnx.defs.onnx_opset_version():
                print("%-44s opset %d is newer than this onnx package knows (%d): the "
                      "model is not checked" % (case.name, case.opset,
                                                onnx.defs.onnx_opset_version()))
                inferred = model
            else:
                onnx.checker.check_model(model, full_check=True)
                inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            shapes = {v.name: [d.dim_value if d.HasField("dim_value") else d.dim_param
                               for d in v.type.tensor_type.shape.dim]
                      for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
            if case.loss != "model" and case.out not in inits and inferred is not model:
                got = shapes.get(case.out)
                want = list(ref["out_shape"])
                if got is not None and len(got) == len(want):   # a dim ONNX leaves unknown
                    got = [w if isinstance(d, str) else d for d, w in zip(got, want)]
                if got != want:
                    problems.append("ONNX infers %s for '%s', PyTorch gives %s"
                                    % (got, case.out, list(ref["out_shape"])))
            for name, g in ref["grads"].items():
                if not np.any(g):
                    problems.append("PyTorch's gradient of '%s' is zero" % name)
            if not params_of(case, inits):
                problems.append("no parameters")
        except Exception as e:  # noqa: BLE001 (report every case)
            problems.append("%s: %s" % (type(e).__name__, e))
        print("%-44s %-26s %s" % (case.name, case.op,
                                  "; ".join(problems) if problems else "ok"))
        ok &= not problems
    print("gradcheck table: %d cases: %s" % (len(CASES), "ok" if ok else "FAILED"))
    return ok


def check_coverage(ops):
    tested = {c.op for c in CASES}
    missing = sorted(op for op, fl in ops.items()
                     if "OPF_GRAD" in fl and "OPF_INTERNAL" not in fl and op not in tested)
    for op in missing:
        print("gradcheck coverage: %s has a gradient (OPF_GRAD in ops.def) but no case "
              "in tests/gradcheck/cases.py; add one" % op)
    waiting = sorted({c.op for c in CASES if not is_ready(c, ops)})
    print("gradcheck coverage: %d ops with a gradient, %d untested; %d cases ready, "
          "%d waiting for a gradient (%s): %s"
          % (sum("OPF_GRAD" in fl and "OPF_INTERNAL" not in fl for fl in ops.values()),
             len(missing), sum(is_ready(c, ops) for c in CASES),
             sum(not is_ready(c, ops) for c in CASES), ", ".join(waiting) or "none",
             "FAILED" if missing else "ok"))
    return not missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("case")
    r.add_argument("--mpcc", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--cpu-kernels", choices=("onednn", "builtin"),
                   help="compile with it, and check train.c calls oneDNN or not")
    for name in ("ready", "coverage", "list"):
        sub.add_parser(name).add_argument("ops_def")
    sub.add_parser("table")
    args = ap.parse_args()
    torch.set_num_threads(1)

    if args.cmd == "run":
        by_name = {c.name: c for c in CASES}
        if args.case not in by_name:
            ap.error("no case '%s' in cases.py" % args.case)
        return 0 if check_case(by_name[args.case], os.path.abspath(args.mpcc),
                               os.path.abspath(args.work), args.cpu_kernels) else 1
    if args.cmd == "table":
        return 0 if check_table() else 1
    ops = read_ops_def(args.ops_def)
    if args.cmd == "coverage":
        return 0 if check_coverage(ops) else 1
    for c in CASES:
        if args.cmd == "ready" and is_ready(c, ops):
            print(c.name)
        elif args.cmd == "list":
            missing = sorted(op for op in model_ops(c)
                             if not ops.get(op, set()) & {"OPF_GRAD", "OPF_NOGRAD"})
            print("%-44s %-26s %s" % (c.name, c.op, "ready" if not missing else
                                      "waiting for " + ", ".join(missing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
