#!/usr/bin/python3
"""Inputs for the `mpcc export` tests, made from a trained MLP's folder.

TRAIN_DIR is the work folder of the test train.mlp_sgd_momentum (model.onnx,
ckpt.safetensors from the generated trainer, final.npz from PyTorch). Written
into OUT_DIR:

  nohash.safetensors        the checkpoint without model_sha256 (for the
                            variants of the model below, whose files differ)
  reshape.onnx              the MLP behind a Reshape whose target shape is an
                            int64 initializer, which must come out unchanged;
                            it and 0.bias are stored as int64_data/float_data
  ext/ext.onnx (+ .data)    reshape.onnx with every initializer (flat_shape
                            too) in external data, which export writes inline
  huge/huge.onnx (+ .data)  the MLP plus a 2.1 GB int64 initializer in a
                            sparse external file: too large to write inline
  no_weights.onnx           a Reshape with an int64 initializer and no weights
  opset12.onnx              the MLP importing opset 12: no Cast to bfloat16
  weight_input.onnx         the MLP with 0.weight a graph input too (an
                            initializer as a default, as IR version 3 wrote)
  truncated.safetensors     the checkpoint's first half
  corrupt.safetensors       the checkpoint with its JSON header garbled
  other_shapes.safetensors  a checkpoint of an MLP with 128 hidden units
  other_names.safetensors   the weights under other names (fc1.weight, ...)
  missing_weight.safetensors  the checkpoint without 2.bias
  other_hash.safetensors    the right tensors, another model's model_sha256
  wrong_dtype.safetensors   0.bias as float64

Safetensors files are read and written here directly (u64 header length,
JSON header, data), so the tests need no package beyond numpy and onnx.

Run:  /usr/bin/python3 tests/export/make_inputs.py TRAIN_DIR OUT_DIR
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

ST_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
ST_NAMES = {np.dtype(v): k for k, v in ST_DTYPES.items()}


def read_st(path):
    """(metadata dict, {name: array}) in header order."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        tensors[name] = np.frombuffer(data[b:e], ST_DTYPES[info["dtype"]]).reshape(
            info["shape"])
    return meta, tensors


def write_st(path, meta, tensors):
    header, chunks, at = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        raw = a.tobytes()
        header[name] = {"dtype": ST_NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def typed(t):
    """t with its values in the typed field (float_data, int64_data) instead
    of raw_data, as some exporters write them."""
    a = numpy_helper.to_array(t)
    return helper.make_tensor(t.name, t.data_type, a.shape, a.flatten().tolist())


def reshape_model(model):
    """The model with Reshape(input, shape) in front of its first node; the
    shape and 0.bias are stored in typed fields."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    x = g.input[0].name
    for i, t in enumerate(g.initializer):
        if t.name == "0.bias":
            g.initializer[i].CopyFrom(typed(t))
    shape = typed(numpy_helper.from_array(np.array([-1, 784], np.int64), "flat_shape"))
    g.initializer.append(shape)
    for node in g.node:
        for i, name in enumerate(node.input):
            if name == x:
                node.input[i] = "flat"
    g.node.insert(0, helper.make_node("Reshape", [x, "flat_shape"], ["flat"],
                                      name="/flatten/Reshape"))
    onnx.checker.check_model(m)
    return m


def no_weights_model(path):
    """A Reshape and its int64 shape: initializers, but no weights."""
    shape = numpy_helper.from_array(np.array([-1], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "no_weights",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [6])], [shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save_model(m, path)


def external_model(model, folder, name):
    """model with every initializer, flat_shape too, in one external file."""
    os.makedirs(folder, exist_ok=True)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:   # only raw_data goes to external data
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
    path = os.path.join(folder, name)
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=name + ".data", size_threshold=0)
    return path


def huge_model(model, folder):
    """A 2.1 GB int64 initializer in a sparse external file: nothing reads it
    before export finds the result too large."""
    os.makedirs(folder, exist_ok=True)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    count = 262500000                       # 2.1e9 bytes of int64
    t = onnx.TensorProto(name="huge_table", data_type=onnx.TensorProto.INT64,
                         dims=[count], data_location=onnx.TensorProto.EXTERNAL)
    for k, v in (("location", "huge.data"), ("offset", "0"), ("length", str(count * 8))):
        e = t.external_data.add()
        e.key, e.value = k, v
    m.graph.initializer.append(t)
    with open(os.path.join(folder, "huge.data"), "wb") as f:
        f.truncate(count * 8)
    onnx.save_model(m, os.path.join(folder, "huge.onnx"))


def opset12_model(model, path):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 12
    onnx.checker.check_model(m)
    onnx.save_model(m, path)


def weight_input_model(model, path):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    w = next(t for t in m.graph.initializer if t.name == "0.weight")
    m.graph.input.append(helper.make_tensor_value_info(w.name, w.data_type, list(w.dims)))
    onnx.checker.check_model(m)
    onnx.save_model(m, path)


def bad_checkpoints(ckpt, out):
    meta, t = read_st(ckpt)
    blob = open(ckpt, "rb").read()
    open(os.path.join(out, "truncated.safetensors"), "wb").write(blob[: len(blob) // 2])
    (n,) = struct.unpack("<Q", blob[:8])
    bad = bytearray(blob)
    bad[8 + n // 2: 8 + n // 2 + 8] = b"!!!!!!!!"
    open(os.path.join(out, "corrupt.safetensors"), "wb").write(bytes(bad))

    other = dict(meta, model_sha256="0" * 64)
    shapes = {k: (v[:128] if k.startswith("0.") else v[:, :128] if k.startswith("2.weight")
                  else v) for k, v in t.items()}
    write_st(os.path.join(out, "other_shapes.safetensors"), other, shapes)
    renamed = {k.replace("0.", "fc1.").replace("2.", "fc2."): v for k, v in t.items()}
    write_st(os.path.join(out, "other_names.safetensors"), other, renamed)
    write_st(os.path.join(out, "missing_weight.safetensors"), meta,
             {k: v for k, v in t.items() if not k.startswith("2.bias")})
    write_st(os.path.join(out, "other_hash.safetensors"), other, t)
    write_st(os.path.join(out, "wrong_dtype.safetensors"), meta,
             {k: (v.astype(np.float64) if k == "0.bias" else v) for k, v in t.items()})
    write_st(os.path.join(out, "nohash.safetensors"),
             {k: v for k, v in meta.items() if k != "model_sha256"}, t)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    train_dir, out = sys.argv[1:]
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    model = onnx.load(os.path.join(train_dir, "model.onnx"))
    bad_checkpoints(os.path.join(train_dir, "ckpt.safetensors"), out)
    r = reshape_model(model)
    onnx.save_model(r, os.path.join(out, "reshape.onnx"))
    external_model(r, os.path.join(out, "ext"), "ext.onnx")
    huge_model(model, os.path.join(out, "huge"))
    no_weights_model(os.path.join(out, "no_weights.onnx"))
    opset12_model(model, os.path.join(out, "opset12.onnx"))
    weight_input_model(model, os.path.join(out, "weight_input.onnx"))
    print("make_inputs: wrote %s" % out)


if __name__ == "__main__":
    main()
