#!/usr/bin/python3
"""`mpcc export --dtype=bf16` and `--dtype=fp32` on a trained float32 MLP.

Runs `mpcc export MODEL CKPT -o OUT_DIR/f32.onnx` (the model's own types),
then with --dtype=bf16 and --dtype=fp32, and checks:
  - each exits 0 with nothing on stderr; onnx.checker (full_check) accepts
    the bf16 model;
  - --dtype=fp32 of a float32 model writes the default export's bytes;
  - every weight of the default export is, in the bf16 one, a BFLOAT16
    initializer NAME_bf16 of the same dims whose bits are PyTorch's rounding
    of the checkpoint's float32 tensor (torch.Tensor.to(torch.bfloat16)),
    and NAME is no initializer any more;
  - the bf16 model's first nodes are one Cast(NAME_bf16) -> NAME, to FLOAT,
    per weight, and the rest are the default export's nodes, unchanged;
    inputs, outputs, opsets and metadata unchanged;
  - the file is at most 0.55x the float32 one (the weights are its bytes);
  - on 32 rows of x, the bf16 graph (numpy) gives the logits of PyTorch's
    MLP whose weights are the checkpoint's rounded by PyTorch to bf16.

Run:  /usr/bin/python3 tests/export/check_bf16.py MPCC MODEL CKPT OUT_DIR x.npy
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_export as ce  # noqa: E402  (its checks, safetensors reader, evaluator)


def export(mpcc, model, ckpt, out, *flags):
    p = subprocess.run([mpcc, "export", model, ckpt, "-o", out, *flags], capture_output=True,
                       text=True)
    ce.check(p.returncode == 0 and p.stderr == "",
             "mpcc export %s exits 0 with no message (status %d, stderr %r)"
             % (" ".join(flags) or "(model's types)", p.returncode, p.stderr))
    if p.returncode != 0:
        sys.exit(1)
    return open(out, "rb").read()


def torch_bf16_bits(a):
    return torch.from_numpy(np.array(a, np.float32)).to(torch.bfloat16).view(torch.int16) \
        .numpy().view(np.uint16)


def check_weights(f32, b16, ckpt):
    weights = [t.name for t in f32.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    got = {t.name: t for t in b16.graph.initializer}
    ce.check(len(weights) == 4 and not any(w in got for w in weights),
             "the %d weights are no initializers under their own names" % len(weights))
    for w in weights:
        t = got.get(w + "_bf16")
        if t is None:
            ce.check(False, "%s_bf16 is an initializer" % w)
            continue
        bits = np.frombuffer(t.raw_data, np.uint16)
        ce.check(t.data_type == onnx.TensorProto.BFLOAT16 and list(t.dims) == list(ckpt[w].shape)
                 and np.array_equal(bits, torch_bf16_bits(ckpt[w]).ravel()),
                 "%s_bf16 is BFLOAT16 %s, PyTorch's rounding of the checkpoint's %s"
                 % (w, list(t.dims), w))
    return weights


def check_graph(f32, b16, weights):
    casts = b16.graph.node[:len(weights)]
    want = {w: ([w + "_bf16"], [w]) for w in weights}
    ok = all(n.op_type == "Cast" and (list(n.input), list(n.output)) == want.get(n.output[0])
             and onnx.helper.get_attribute_value(n.attribute[0]) == onnx.TensorProto.FLOAT
             for n in casts) and len({n.output[0] for n in casts}) == len(weights)
    ce.check(ok, "the first %d nodes cast each NAME_bf16 to FLOAT NAME" % len(weights))
    rest = [n.SerializeToString() for n in b16.graph.node[len(weights):]]
    ce.check(rest == [n.SerializeToString() for n in f32.graph.node],
             "then the default export's %d nodes, unchanged" % len(f32.graph.node))
    same = all(getattr(b16.graph, f) == getattr(f32.graph, f) for f in ("input", "output")) and \
        b16.opset_import == f32.opset_import and b16.metadata_props == f32.metadata_props
    ce.check(same, "inputs, outputs, opsets and metadata unchanged")


def check_forward(b16, ckpt, weights, x_path):
    x = np.load(x_path)[:32].astype(np.float32)
    rounded = {w: torch.from_numpy(np.array(ckpt[w], np.float32)).to(torch.bfloat16).float()
               .numpy() for w in weights}
    want = ce.torch_logits([784, 256, 10], rounded, x)
    got = ce.evaluate(b16, x)
    ce.check(got.shape == want.shape and np.allclose(got, want, atol=1e-4, rtol=1e-3),
             "the bf16 graph (numpy) gives the logits of PyTorch's MLP with its weights "
             "rounded to bf16 (max abs err %.3g)" % float(np.abs(got - want).max()))


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__.strip().splitlines()[-1])
    mpcc, model, ckpt_path, out, x_path = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    p32, p16, pfp = (os.path.join(out, n) for n in ("f32.onnx", "bf16.onnx", "fp32.onnx"))
    raw32 = export(mpcc, model, ckpt_path, p32)
    raw16 = export(mpcc, model, ckpt_path, p16, "--dtype=bf16")
    rawfp = export(mpcc, model, ckpt_path, pfp, "--dtype", "fp32")
    ce.check(rawfp == raw32, "--dtype=fp32 of a float32 model is the default export")
    try:
        onnx.checker.check_model(onnx.load(p16), full_check=True)
        ce.check(True, "onnx.checker.check_model accepts %s" % p16)
    except Exception as e:  # the checker raises several kinds
        ce.check(False, "onnx.checker.check_model: %s" % e)
    f32, b16 = onnx.load_from_string(raw32), onnx.load_from_string(raw16)
    ckpt = ce.read_st(ckpt_path)
    weights = check_weights(f32, b16, ckpt)
    check_graph(f32, b16, weights)
    ce.check(len(raw16) <= 0.55 * len(raw32),
             "the bf16 file is %d bytes, %.3fx the float32 one's %d (at most 0.55x)"
             % (len(raw16), len(raw16) / len(raw32), len(raw32)))
    check_forward(b16, ckpt, weights, x_path)
    print("check_bf16: %s" % ("FAILED: %d checks" % len(ce.failures) if ce.failures else "ok"))
    return 1 if ce.failures else 0


if __name__ == "__main__":
    sys.exit(main())
