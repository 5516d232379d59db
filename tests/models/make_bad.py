#!/usr/bin/python3
"""Write deliberately broken (and some valid-but-odd) ONNX files for the
compiler's error tests.

All cases start from a small valid model: input "x" f32[2,4] -> MatMul with
initializer "W" f32[4,3] -> Relu -> output "y" f32[2,3].  One file per case is
written to OUTDIR, plus OUTDIR/MANIFEST.tsv with `filename<TAB>description`;
descriptions of the cases the compiler must ACCEPT start with "VALID:".
Some cases also write a small side file (small.bin, external_ok.bin).

Run:  /usr/bin/python3 tests/models/make_bad.py OUTDIR
"""
import argparse
import os
import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

W_VALUES = (np.arange(12, dtype=np.float32) + 0.5).reshape(4, 3)
FLOAT = TensorProto.FLOAT


def W_tensor(name="W"):
    return numpy_helper.from_array(W_VALUES, name)


def make_model(nodes, inputs=None, outputs=None, inits=None, opsets=None,
               name="bad"):
    """ModelProto from parts; missing parts are those of the base model."""
    graph = helper.make_graph(
        nodes, name,
        inputs if inputs is not None else
        [helper.make_tensor_value_info("x", FLOAT, [2, 4])],
        outputs if outputs is not None else
        [helper.make_tensor_value_info("y", FLOAT, [2, 3])],
        initializer=inits if inits is not None else [W_tensor()])
    return helper.make_model(
        graph, opset_imports=opsets or [helper.make_opsetid("", 13)],
        producer_name="mpcc-make_bad")


def base_model():
    return make_model([helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
                       helper.make_node("Relu", ["m"], ["y"], name="relu")])


def set_external(tensor, location, offset=None, length=None):
    """Turn tensor into an external-data reference (its bytes are dropped)."""
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset),
                       ("length", length)):
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)


def renamed_model(mid, w, out, node_prefix):
    """Base model with odd value/node names; graph input stays "x"."""
    return make_model(
        [helper.make_node("MatMul", ["x", w], [mid], name=node_prefix + "mm"),
         helper.make_node("Relu", [mid], [out], name=node_prefix + "relu")],
        outputs=[helper.make_tensor_value_info(out, FLOAT, [2, 3])],
        inits=[W_tensor(w)])


def typed_fields_model():
    """Initializers in float_data/int64_data/int32_data/double_data mixed
    with raw_data, and a Constant holding int64_data feeding Reshape."""
    W = helper.make_tensor("W", FLOAT, [4, 3], W_VALUES.ravel().tolist())
    b = numpy_helper.from_array(np.array([0.25, -1.0, 2.0], np.float32), "b")
    d = helper.make_tensor("d", TensorProto.DOUBLE, [2], [0.5, -0.5])
    idx = helper.make_tensor("idx", TensorProto.INT32, [2], [1, 0])
    shape_back = helper.make_tensor("shape_back", TensorProto.INT64, [2], [2, 3])
    assert W.float_data and d.double_data and idx.int32_data and \
        shape_back.int64_data and b.raw_data
    shape_c = helper.make_tensor("shape_c", TensorProto.INT64, [2], [3, 2])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["m"]),                  # [2,3]
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Constant", [], ["shape"], value=shape_c),
        helper.make_node("Reshape", ["r", "shape"], ["rs"]),            # [3,2]
        helper.make_node("Cast", ["rs"], ["rs64"], to=TensorProto.DOUBLE),
        helper.make_node("Add", ["rs64", "d"], ["sum64"]),
        helper.make_node("Cast", ["sum64"], ["s"], to=FLOAT),
        helper.make_node("Gather", ["s", "idx"], ["g"], axis=1),        # [3,2]
        helper.make_node("Reshape", ["g", "shape_back"], ["y"]),        # [2,3]
    ]
    return make_model(nodes, inits=[W, b, d, idx, shape_back])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    args = ap.parse_args()
    out = args.outdir
    os.makedirs(out, exist_ok=True)
    manifest = []

    def write(fname, data, desc):
        if isinstance(data, onnx.ModelProto):
            data = data.SerializeToString()
        with open(os.path.join(out, fname), "wb") as f:
            f.write(data)
        manifest.append((fname, desc))

    def node_list():
        return [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm")]

    relu_y = helper.make_node("Relu", ["m"], ["y"], name="relu")

    write("empty.onnx", b"", "zero-byte file")
    write("random.onnx", random.Random(1234).getrandbits(8 * 4096)
          .to_bytes(4096, "little"), "4096 random bytes (fixed seed)")

    good = base_model().SerializeToString()
    raw = W_VALUES.tobytes()
    at = good.find(raw)
    assert at > 0 and good.count(raw) == 1
    write("truncated.onnx", good[:at + len(raw) // 2],
          "valid model cut in the middle of W's raw_data")

    m = base_model()
    m.graph.initializer[0].raw_data = raw[:40]
    write("initializer_size_mismatch.onnx", m,
          "W dims [4,3] (48 bytes) but raw_data has 40 bytes")

    m = base_model()
    m.graph.initializer[0].dims[:] = [4, -3]
    write("negative_dim.onnx", m, "initializer W has dims [4,-3]")

    m = base_model()
    m.graph.initializer[0].dims[:] = [1 << 40, 1 << 40]
    write("overflow_dims.onnx", m,
          "initializer W dims [2^40,2^40]: element count overflows int64; "
          "48 bytes of raw_data")

    m = base_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    write("input_negative_dim.onnx", m, "graph input x has dim_value -1")

    write("cycle.onnx", make_model(node_list() + [
        helper.make_node("Add", ["m", "b2"], ["a2"], name="add"),
        helper.make_node("Relu", ["a2"], ["b2"], name="relu"),
        helper.make_node("Identity", ["b2"], ["y"], name="id")]),
        "cycle: node add consumes b2 from relu, relu consumes a2 from add")

    write("dangling_input.onnx", make_model(node_list() + [
        helper.make_node("Add", ["m", "ghost"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu")]),
        "node input 'ghost' is not produced by any node, not a graph input "
        "and not an initializer")

    write("duplicate_names.onnx", make_model(node_list() + [
        helper.make_node("Relu", ["m"], ["h"], name="relu"),
        helper.make_node("Sigmoid", ["m"], ["h"], name="sigmoid"),
        helper.make_node("Identity", ["h"], ["y"], name="id")]),
        "two nodes (Relu, Sigmoid) both produce output 'h'")

    W2 = numpy_helper.from_array(-W_VALUES, "W")
    write("duplicate_initializer.onnx",
          make_model(node_list() + [relu_y], inits=[W_tensor(), W2]),
          "two initializers named W")

    write("unknown_domain.onnx", make_model(node_list() + [
        helper.make_node("FancyOp", ["m"], ["h"], name="fancy",
                         domain="com.example.nonexistent"),
        helper.make_node("Relu", ["h"], ["y"], name="relu")],
        opsets=[helper.make_opsetid("", 13),
                helper.make_opsetid("com.example.nonexistent", 1)]),
        "node FancyOp in opset domain com.example.nonexistent")

    write("unknown_op.onnx", make_model(node_list() + [
        helper.make_node("NoSuchOp", ["m"], ["y"], name="nosuch")]),
        "node NoSuchOp in the default ONNX domain")

    write("output_unproduced.onnx", make_model(
        node_list() + [relu_y],
        outputs=[helper.make_tensor_value_info("y", FLOAT, [2, 3]),
                 helper.make_tensor_value_info("z", FLOAT, [2, 3])]),
        "graph output z is produced by no node")

    for fname, loc, offset, length, desc in (
            ("external_escape.onnx", "../../etc/passwd", 0, 48,
             "W external data location '../../etc/passwd' (escapes the "
             "model directory)"),
            ("external_absolute.onnx", "/etc/passwd", 0, 48,
             "W external data location is the absolute path /etc/passwd"),
            ("external_missing.onnx", "nope.bin", 0, 48,
             "W external data file nope.bin does not exist"),
            ("external_out_of_range.onnx", "small.bin", 8, 48,
             "W external data offset 8 length 48 in the 16-byte small.bin"),
            ("external_offset_past_end.onnx", "small.bin", 4096, None,
             "W external data offset 4096 (no length) in the 16-byte "
             "small.bin")):
        m = base_model()
        set_external(m.graph.initializer[0], loc, offset, length)
        write(fname, m, desc)
    with open(os.path.join(out, "small.bin"), "wb") as f:
        f.write(bytes(range(16)))
    if os.path.exists(os.path.join(out, "nope.bin")):
        os.remove(os.path.join(out, "nope.bin"))

    write("names_comment.onnx",
          renamed_model("m*/ /*x", "W/*init*/", "y*/", "node/* */"),
          "VALID: node and value names contain '*/' and '/*'")
    write("names_quote.onnx",
          renamed_model('m"q"', 'W\\x', 'y"\\', 'node"\\'),
          "VALID: node and value names contain '\"' and '\\'")
    write("names_newline.onnx",
          renamed_model("m\nn", "W\r\nw", "y\r", "node\n"),
          "VALID: node and value names contain '\\n' and '\\r'")

    m = base_model()
    m.ClearField("graph")
    write("no_graph.onnx", m, "ModelProto without a graph")

    stats = [numpy_helper.from_array(np.full(3, v, np.float32), n)
             for n, v in (("scale", 1.0), ("bias", 0.0), ("mean", 0.0), ("var", 1.0))]
    write("inference_bn.onnx",
          make_model(node_list() + [helper.make_node(
              "BatchNormalization", ["m", "scale", "bias", "mean", "var"], ["y"],
              name="bn")], inits=[W_tensor()] + stats,
              opsets=[helper.make_opsetid("", 15)]),
          "VALID for inference: BatchNormalization in inference form (one output, "
          "no training_mode), as torch.onnx.export writes it in eval mode; "
          "training it is an error that says how to export")

    write("typed_fields.onnx", typed_fields_model(),
          "VALID: initializers in float_data/int64_data/int32_data/"
          "double_data mixed with raw_data; Constant with int64_data feeds "
          "Reshape")

    m = base_model()
    m.graph.input.append(helper.make_tensor_value_info("W", FLOAT, [4, 3]))
    write("graph_input_initializer.onnx", m,
          "VALID: W is also listed as a graph input "
          "(keep_initializers_as_inputs style)")

    m = base_model()
    set_external(m.graph.initializer[0], "external_ok.bin", 16, len(raw))
    with open(os.path.join(out, "external_ok.bin"), "wb") as f:
        f.write(b"JUNKJUNKJUNKJUNK" + raw)
    write("external_ok.onnx", m,
          "VALID: W in external_ok.bin at offset 16, length 48 (16 junk "
          "bytes first)")

    for fname, attrs, w_shape, desc in (
            ("lstm_activation.onnx", dict(activations=["Sigmoid", "Affine", "Tanh"]),
             [1, 8, 4], "LSTM with an Affine activation, which mpcc does not lower"),
            ("lstm_w_shape.onnx", {}, [1, 12, 4],
             "LSTM hidden_size 2 whose W has 12 rows, not 4 * 2"),
            ("lstm_direction.onnx", dict(direction="sideways"), [1, 8, 4],
             "LSTM whose direction is neither forward, reverse nor bidirectional")):
        h = 2
        write(fname, make_model(
            [helper.make_node("LSTM", ["x", "W", "R"], ["", "y"], name="lstm",
                              hidden_size=h, **attrs)],
            inputs=[helper.make_tensor_value_info("x", FLOAT, [3, 2, 4])],
            outputs=[helper.make_tensor_value_info("y", FLOAT, [1, 2, h])],
            inits=[numpy_helper.from_array(np.ones(w_shape, np.float32), "W"),
                   numpy_helper.from_array(np.ones([1, 4 * h, h], np.float32), "R")],
            opsets=[helper.make_opsetid("", 14)]), desc)

    write("reduce_l2_int.onnx", make_model(
        [helper.make_node("ReduceL2", ["x"], ["y"], name="norm", axes=[1])],
        inputs=[helper.make_tensor_value_info("x", TensorProto.INT64, [2, 4])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.INT64, [2, 1])], inits=[]),
        "ReduceL2 of int64 data, which ONNX allows and mpcc's floating-point "
        "lowering (Mul, ReduceSum, Sqrt) cannot compute")
    write("depth_to_space_channels.onnx", make_model(
        [helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2)],
        inputs=[helper.make_tensor_value_info("x", FLOAT, [1, 6, 2, 2])],
        outputs=[helper.make_tensor_value_info("y", FLOAT, [1, 1, 4, 4])], inits=[]),
        "DepthToSpace of 6 channels in blocks of 2 x 2")

    def conv_model(node, x_shape, w_shape):
        w = numpy_helper.from_array(np.full(w_shape, 0.5, np.float32), "w")
        return make_model([node], inputs=[helper.make_tensor_value_info("x", FLOAT, x_shape)],
                          outputs=[helper.make_tensor_value_info("y", FLOAT, None)],
                          inits=[w], opsets=[helper.make_opsetid("", 17)])

    write("conv_auto_pad.onnx", conv_model(
        helper.make_node("Conv", ["x", "w"], ["y"], name="conv", auto_pad="SAME"),
        [2, 1, 5, 5, 5], [2, 1, 3, 3, 3]),
        "Conv3d with auto_pad 'SAME', which ONNX does not define")
    # GatherElements, ScatterElements, GatherND, ScatterND on m = x @ W (f32[2,3])
    def on_m(fname, node, consts, desc, opset=13):
        inits = [W_tensor()] + [numpy_helper.from_array(v, k) for k, v in consts.items()]
        write(fname, make_model(
            [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"), node],
            inits=inits, opsets=[helper.make_opsetid("", opset)]), desc)

    i64 = np.int64
    on_m("gather_elements_rank.onnx",
         helper.make_node("GatherElements", ["m", "idx"], ["y"], name="ge"),
         dict(idx=np.zeros(2, i64)), "GatherElements with indices of rank 1 on data of rank 2")
    on_m("gather_elements_index.onnx",
         helper.make_node("GatherElements", ["m", "idx"], ["y"], name="ge", axis=1),
         dict(idx=np.array([[0, 3], [1, 2]], i64)),
         "GatherElements with a constant index 3 along a dimension of 3")
    on_m("gather_elements_wide.onnx",
         helper.make_node("GatherElements", ["m", "idx"], ["y"], name="ge", axis=0),
         dict(idx=np.zeros((2, 4), i64)),
         "GatherElements with indices longer than the data off the axis")
    on_m("gather_elements_float_indices.onnx",
         helper.make_node("GatherElements", ["m", "idx"], ["y"], name="ge"),
         dict(idx=np.zeros((2, 3), np.float32)), "GatherElements with float indices")
    on_m("scatter_elements_updates.onnx",
         helper.make_node("ScatterElements", ["m", "idx", "u"], ["y"], name="se"),
         dict(idx=np.zeros((2, 3), i64), u=np.ones((2, 2), np.float32)),
         "ScatterElements whose updates are not shaped like its indices")
    on_m("scatter_elements_reduction.onnx",
         helper.make_node("ScatterElements", ["m", "idx", "u"], ["y"], name="se",
                          reduction="avg"),
         dict(idx=np.zeros((1, 3), i64), u=np.ones((1, 3), np.float32)),
         "ScatterElements with reduction 'avg', which ONNX does not have", opset=16)
    on_m("scatter_elements_mul_trained.onnx",
         helper.make_node("ScatterElements", ["m", "idx", "u"], ["y"], name="se",
                          reduction="mul"),
         dict(idx=np.array([[0, 1, 0]], i64), u=np.ones((1, 3), np.float32)),
         "ScatterElements with reduction 'mul' on data that depends on a weight", opset=16)
    on_m("scatter_nd_index_depth.onnx",
         helper.make_node("ScatterND", ["m", "idx", "u"], ["y"], name="snd"),
         dict(idx=np.zeros((1, 3), i64), u=np.ones(1, np.float32)),
         "ScatterND whose index rows name 3 dimensions of data of rank 2")
    on_m("gather_nd_batch_dims.onnx",
         helper.make_node("GatherND", ["m", "idx"], ["y"], name="gnd", batch_dims=2),
         dict(idx=np.zeros((2, 1), i64)), "GatherND with batch_dims 2 on indices of rank 2")
    # TopK, OneHot and Trilu: K, depth and k must be constants (static
    # shapes; a diagonal fixed in the kernel call), in range.
    def one_node(fname, node, inputs, y, desc, inits=(), opset=13):
        write(fname, make_model([node], inputs=inputs, inits=list(inits),
                                outputs=[helper.make_tensor_value_info("y", *y)],
                                opsets=[helper.make_opsetid("", opset)]), desc)

    x24 = helper.make_tensor_value_info("x", FLOAT, [2, 4])
    K = helper.make_tensor_value_info("k", TensorProto.INT64, [1])
    topk = helper.make_node("TopK", ["x", "k"], ["y", "i"], name="topk", axis=1)
    one_node("topk_k_input.onnx", topk, [x24, K], (FLOAT, [2, 2]),
             "TopK whose K is a graph input (the conformance tests' form)")
    one_node("topk_k_too_large.onnx", topk, [x24], (FLOAT, [2, 5]),
             "TopK's K 5 along an axis of 4",
             inits=[numpy_helper.from_array(np.array([5], np.int64), "k")])
    one_node("topk_axis.onnx",
             helper.make_node("TopK", ["x", "k"], ["y", "i"], name="topk", axis=-3),
             [x24], (FLOAT, [2, 2]), "TopK's axis -3 on a rank-2 input",
             inits=[numpy_helper.from_array(np.array([2], np.int64), "k")])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [3])
    depth = numpy_helper.from_array(np.array(10, np.int64), "depth")
    values = numpy_helper.from_array(np.array([0, 1], np.int64), "values")
    onehot = helper.make_node("OneHot", ["idx", "depth", "values"], ["y"], name="onehot")
    one_node("onehot_depth_input.onnx", onehot,
             [idx, helper.make_tensor_value_info("depth", TensorProto.INT64, [])],
             (TensorProto.INT64, [3, 10]), "OneHot whose depth is a graph input",
             inits=[values])
    one_node("onehot_values_shape.onnx", onehot, [idx], (TensorProto.INT64, [3, 10]),
             "OneHot with three values, not (off, on)",
             inits=[depth, numpy_helper.from_array(np.array([0, 1, 2], np.int64), "values")])
    one_node("onehot_axis.onnx",
             helper.make_node("OneHot", ["idx", "depth", "values"], ["y"], name="onehot",
                              axis=2),
             [idx], (TensorProto.INT64, [3, 10]), "OneHot's axis 2 for rank-1 indices",
             inits=[depth, values])
    trilu = helper.make_node("Trilu", ["x", "k"], ["y"], name="trilu", upper=0)
    one_node("trilu_k_input.onnx", trilu,
             [x24, helper.make_tensor_value_info("k", TensorProto.INT64, [])],
             (FLOAT, [2, 4]), "Trilu whose k is a graph input", opset=14)
    one_node("trilu_rank1.onnx", helper.make_node("Trilu", ["x"], ["y"], name="trilu"),
             [helper.make_tensor_value_info("x", FLOAT, [4])], (FLOAT, [4]),
             "Trilu of a vector", opset=14)

    with open(os.path.join(out, "MANIFEST.tsv"), "w") as f:
        for fname, desc in manifest:
            f.write("%s\t%s\n" % (fname, desc))
    print("make_bad: %d cases written to %s" % (len(manifest), out))


if __name__ == "__main__":
    main()
