#!/usr/bin/python3
"""Reference value shapes from ONNX's own shape inference.

Loads MODEL.onnx without its external data, fixes the graph input dimensions
given with --shapes, runs onnx.shape_inference.infer_shapes(data_prop=True) and
writes one line per value (graph inputs, initializers, value_info, graph
outputs) whose element type and every dimension are known:

    <dtype> [d0,d1,...] "<name>"        e.g.   f32 [2,1000] "logits"

This is the same format as the compiler's --dump=shapes, so the two can be
compared with tests/compare_shapes.py.  The line-format helpers here are also
imported by the export_*.py scripts in this directory.

Run:  /usr/bin/python3 tests/models/ref_shapes.py MODEL.onnx OUT.txt \
          [--shapes input:2x3x64x64,other:4x5]
"""
import argparse
import sys

# ONNX TensorProto.DataType value -> short dtype name used in the shape dumps.
ONNX_DTYPES = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32",
               7: "i64", 9: "bool", 10: "f16", 11: "f64", 12: "u32",
               13: "u64", 16: "bf16"}

# str(torch.dtype) -> short dtype name (kept as strings: no torch import here).
TORCH_DTYPES = {"torch.float32": "f32", "torch.float64": "f64",
                "torch.float16": "f16", "torch.bfloat16": "bf16",
                "torch.int8": "i8", "torch.int16": "i16", "torch.int32": "i32",
                "torch.int64": "i64", "torch.uint8": "u8", "torch.bool": "bool"}


def quote_name(name):
    """Double-quoted name as bytes; C escapes for \\, \" and control chars."""
    out = bytearray(b'"')
    for b in name.encode("utf-8", "surrogateescape"):
        if b == 0x5C:
            out += b"\\\\"
        elif b == 0x22:
            out += b'\\"'
        elif b == 0x0A:
            out += b"\\n"
        elif b == 0x09:
            out += b"\\t"
        elif b == 0x0D:
            out += b"\\r"
        elif b < 0x20 or b == 0x7F:
            out += b"\\x%02x" % b
        else:
            out.append(b)
    out += b'"'
    return bytes(out)


def format_line(dtype, dims, name):
    """One dump line (bytes, with trailing newline)."""
    dims_txt = ",".join(str(int(d)) for d in dims)
    return ("%s [%s] " % (dtype, dims_txt)).encode() + quote_name(name) + b"\n"


def write_torch_shapes(path, named_tensors):
    """Write the shapes of (name, torch.Tensor) pairs as computed by PyTorch."""
    with open(path, "wb") as f:
        for name, t in named_tensors:
            f.write(format_line(TORCH_DTYPES[str(t.dtype)], tuple(t.shape), name))


def parse_shapes_arg(text):
    """'a:2x3,b:4' -> {'a': [2, 3], 'b': [4]} ('b:' or 'b:scalar' = rank 0)."""
    result = {}
    for item in filter(None, text.split(",")):
        name, _, dims = item.rpartition(":")
        if not name:
            raise ValueError("bad --shapes item %r (want name:2x3x4)" % item)
        dims = dims.strip()
        result[name] = [] if dims in ("", "scalar") else \
            [int(d) for d in dims.split("x")]
    return result


def override_inputs(graph, shapes):
    """Set graph input dims; symbolic dims fixed this way are substituted
    everywhere else in the graph's declared types too."""
    inputs = {vi.name: vi for vi in graph.input}
    params = {}
    for name, dims in shapes.items():
        if name not in inputs:
            sys.exit("ref_shapes: no graph input named %r (have: %s)"
                     % (name, ", ".join(sorted(inputs))))
        shape = inputs[name].type.tensor_type.shape
        old = list(shape.dim)
        if len(old) == len(dims):
            for d, v in zip(old, dims):
                if d.HasField("dim_param"):
                    params.setdefault(d.dim_param, v)
        shape.Clear()
        for v in dims:
            shape.dim.add().dim_value = v
    if params:
        for vi in list(graph.output) + list(graph.value_info):
            if not vi.type.HasField("tensor_type"):
                continue
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in params:
                    d.dim_value = params[d.dim_param]


def known_tensor_type(vi):
    """(dtype, dims) if the ValueInfoProto's type is fully known, else None."""
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if tt.elem_type not in ONNX_DTYPES or not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(d.dim_value)
    return ONNX_DTYPES[tt.elem_type], dims


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--shapes", default="",
                    help="graph input dims, e.g. input:2x3x64x64,mask:2x32")
    args = ap.parse_args()

    import onnx
    model = onnx.load(args.model, load_external_data=False)
    override_inputs(model.graph, parse_shapes_arg(args.shapes))
    model = onnx.shape_inference.infer_shapes(model, check_type=False,
                                              strict_mode=False, data_prop=True)
    g = model.graph
    seen = set()
    lines = []

    def add(name, known):
        if name in seen or known is None:
            return
        seen.add(name)
        lines.append(format_line(known[0], known[1], name))

    for vi in g.input:
        add(vi.name, known_tensor_type(vi))
    for t in g.initializer:
        if t.data_type in ONNX_DTYPES and all(d >= 0 for d in t.dims):
            add(t.name, (ONNX_DTYPES[t.data_type], list(t.dims)))
    for vi in list(g.value_info) + list(g.output):
        add(vi.name, known_tensor_type(vi))
    with open(args.out, "wb") as f:
        f.writelines(lines)
    print("ref_shapes: %d values with known shapes written to %s"
          % (len(lines), args.out))


if __name__ == "__main__":
    main()
