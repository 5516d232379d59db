#!/usr/bin/python3
"""Writes small valid training models as seeds for the ONNX fuzz target.

Each is a few kilobytes and a few dozen nodes at most, so the fuzzer starts
from models that get through import and shape inference to the training
graph, the pipeline plan and code generation (tests/fuzz/harness.c) rather
than dying in the importer. Weights come from a fixed seed: the files are
the same on every run.

Usage: tests/fuzz/make_seeds.py OUT_DIR     (then merge them into the corpus:
    fuzz_onnx -merge=1 tests/fuzz/corpus OUT_DIR)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)


def weight(name, *shape):
    return numpy_helper.from_array(
        (RNG.standard_normal(shape) * 0.1).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model(name, nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="mpcc-fuzz-seeds")
    onnx.checker.check_model(m)
    return m


def f32(name, *dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))


def mlp():
    """Gemm, Relu, Gemm: the smallest classifier."""
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1, name="fc2"),
    ]
    return model("mlp", nodes, [f32("x", "batch", 16)], [f32("y", "batch", 4)],
                 [weight("w1", 12, 16), weight("b1", 12), weight("w2", 4, 12),
                  weight("b2", 4)])


def cnn_bn():
    """Conv, BatchNormalization in training mode, Relu, MaxPool, Flatten, Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "wc", "bc"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "g", "b", "mean", "var"],
                         ["n", "mean_out", "var_out"], training_mode=1, name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc"),
    ]
    inits = [weight("wc", 4, 3, 3, 3), weight("bc", 4),
             numpy_helper.from_array(np.ones(4, np.float32), "g"), weight("b", 4),
             numpy_helper.from_array(np.zeros(4, np.float32), "mean"),
             numpy_helper.from_array(np.ones(4, np.float32), "var"),
             weight("wf", 5, 4 * 3 * 3), weight("bf", 5)]
    return model("cnn_bn", nodes, [f32("x", "batch", 3, 6, 6)], [f32("y", "batch", 5)],
                 inits, opset=15)


def attention():
    """One head of self-attention: MatMul, Transpose, Mul, Softmax, a residual
    Add, LayerNormalization, Reshape and a Gemm head; the batch fixed at 2
    (the export's), which mpcc re-batches."""
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="kt"),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale"),
        helper.make_node("Softmax", ["ss"], ["a"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["a", "v"], ["o"], name="attend"),
        helper.make_node("Add", ["o", "x"], ["res"], name="residual"),
        helper.make_node("LayerNormalization", ["res", "ln_g", "ln_b"], ["ln"], axis=-1,
                         name="ln"),
        helper.make_node("Reshape", ["ln", "shape"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "wo", "bo"], ["y"], transB=1, name="head"),
    ]
    inits = [weight("wq", 8, 8), weight("wk", 8, 8), weight("wv", 8, 8),
             numpy_helper.from_array(np.array(8 ** -0.5, np.float32), "scale"),
             numpy_helper.from_array(np.ones(8, np.float32), "ln_g"), weight("ln_b", 8),
             ints("shape", [2, 32]), weight("wo", 3, 32), weight("bo", 3)]
    return model("attention", nodes, [f32("x", 2, 4, 8)], [f32("y", 2, 3)], inits)


def embedding():
    """Gather from an embedding table by integer ids, ReduceMean, Tanh, Gemm."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], axis=0, name="embed"),
        helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0, name="mean"),
        helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
        helper.make_node("Gemm", ["t", "w", "b"], ["y"], transB=1, name="fc"),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 5])
    return model("embedding", nodes, [ids], [f32("y", "batch", 6)],
                 [weight("table", 10, 8), weight("w", 6, 8), weight("b", 6)], opset=13)


def branches():
    """Two branches joined by Concat, Sigmoid and Mul gating, Slice, a skip."""
    nodes = [
        helper.make_node("MatMul", ["x", "wa"], ["a"], name="a"),
        helper.make_node("MatMul", ["x", "wb"], ["b"], name="b"),
        helper.make_node("Sigmoid", ["b"], ["sb"], name="gate"),
        helper.make_node("Mul", ["a", "sb"], ["ab"], name="gated"),
        helper.make_node("Concat", ["ab", "x"], ["c"], axis=1, name="concat"),
        helper.make_node("Slice", ["c", "starts", "ends", "axes"], ["s"], name="slice"),
        helper.make_node("Add", ["s", "a"], ["sa"], name="skip"),
        helper.make_node("MatMul", ["sa", "wo"], ["y"], name="out"),
    ]
    inits = [weight("wa", 8, 8), weight("wb", 8, 8), ints("starts", [2]), ints("ends", [10]),
             ints("axes", [1]), weight("wo", 8, 3)]
    return model("branches", nodes, [f32("x", "batch", 8)], [f32("y", "batch", 3)], inits)


def shared_weight():
    """A weight read by two forward nodes (y = W W^T), the graph input
    unused: the pipeline refinement once cut between the two readers
    (tests/fuzz/regressions/shared_weight_cut)."""
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0], name="t"),
        helper.make_node("MatMul", ["w", "wt"], ["y"], name="mm"),
    ]
    return model("shared_weight", nodes, [f32("x", 4, 10)], [f32("y", 8, 8)],
                 [weight("w", 8, 10)])


def gradient_passthrough():
    """A weight added by Add, which passes the gradient of its output on
    unchanged: the weight's gradient comes from the next node's backward
    (Neg). Stages once cut between the two, so the weight lived on the
    later stage and was sent back per micro-batch into one slot: the
    schedule deadlocked (tests/fuzz/regressions/gradient_passthrough_cut)."""
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"], name="add"),
        helper.make_node("Neg", ["a"], ["y"], name="neg"),
    ]
    return model("gradient_passthrough", nodes, [f32("x", 2, 4)], [f32("y", 2, 4)],
                 [weight("w", 2, 4)])


def empty_dim():
    """A Softmax over an empty slice, joined back by Concat: the cost model
    once divided by the empty dimension and gave the partitioner a NaN
    time (tests/fuzz/regressions/empty_dim_cost)."""
    nodes = [
        helper.make_node("Slice", ["x", "zero", "zero", "one"], ["e"], name="empty"),
        helper.make_node("Softmax", ["e"], ["s"], axis=-1, name="softmax"),
        helper.make_node("Concat", ["s", "x"], ["c"], axis=1, name="concat"),
        helper.make_node("Gemm", ["c", "w", "b"], ["y"], transB=1, name="fc"),
    ]
    return model("empty_dim", nodes, [f32("x", "batch", 3)], [f32("y", "batch", 2)],
                 [ints("zero", [0]), ints("one", [1]), weight("w", 2, 3), weight("b", 2)])


SEEDS = [mlp, cnn_bn, attention, embedding, branches, shared_weight, gradient_passthrough,
         empty_dim]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for make in SEEDS:
        path = os.path.join(sys.argv[1], f"seed_{make.__name__}.onnx")
        onnx.save(make(), path)
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
