"""The gradient check cases: one entry per case, the ONNX node(s) under test
and the same function in PyTorch.  gradcheck.py turns each entry into a tiny
model and checks mpcc's gradients against PyTorch autograd.

A case (see Case below):

  name    the CTest name is gradcheck.<name>
  op      the ONNX op under test (gradcheck.coverage wants one case for every
          op with a gradient in compiler/ops.def)
  nodes   the graph, as onnx.helper nodes; the last node's first output (or
          `out`) is the op's result.  gradcheck.py appends Add(result, x), x
          being the graph input (zeros, shaped like the result, first
          dimension the batch), and mpcc puts the loss on that Add
  inits   initializers: float arrays are the trainable parameters, integer
          and bool arrays are constants (Reshape shapes, Gather indices,
          Where conditions).  Each value is a generator called with the
          case's numpy Generator (seeded from the case name)
  consts  values of Constant nodes, placed in `nodes` as Const(output name,
          consts key): float inputs that are not parameters, such as Resize
          scales or Dropout's ratio; also generators
  torch   the same function: torch(t) with t.NAME a float64 tensor for every
          initializer and constant (parameters require grad; integer ones
          int64, bool ones bool).  Returns the result, or (result, {name:
          new value}) for state the op updates (BatchNorm running stats)
  stats   float initializers that are state, not parameters: mpcc must not
          train them, and their value after the step is compared with the one
          torch returns
  loss    "mse" (default: --loss=mse against random float labels),
          "cross_entropy" (--loss=cross_entropy, int64 `labels`,
          --ignore-index=`ignore_index`), or "model" (the nodes end in the
          model's own SoftmaxCrossEntropyLoss: the graph inputs are "x",
          shaped like the initializer `x_like`, and "labels"; the graph
          output is "loss"; torch returns the loss)
  class_axis, flags, needs   for "cross_entropy": the output's class axis
          (mpcc --class-axis, default 1); more mpcc flags; ops mpcc adds to
          the model for these flags (the case waits for their gradients too)
  rtol, atol_rel   tolerance overrides, with a `note` saying why
  opset   the model's opset (default 17): attributes that became inputs, or
          ops newer than 17.  An opset newer than the installed onnx package
          knows is not run through its checker (gradcheck.table says so)

Adding an op is adding entries here.  A case is registered with CTest once
every op its model uses has OPF_GRAD (or OPF_NOGRAD: comparisons and ArgMax,
whose bool or index outputs carry no gradient) in compiler/ops.def.
"""
import numpy as np
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper


class Case:
    def __init__(self, name, op, nodes, inits, torch, consts=None, stats=(),
                 loss="mse", labels=None, ignore_index=-100, x_like=None,
                 out=None, class_axis=1, flags=(), needs=(), rtol=None,
                 atol_rel=None, note="", opset=17):
        self.name, self.op, self.nodes = name, op, nodes
        self.inits, self.consts = inits, consts or {}
        self.torch, self.stats = torch, tuple(stats)
        self.loss, self.labels, self.ignore_index = loss, labels, ignore_index
        self.x_like = x_like
        self.class_axis, self.flags, self.needs = class_axis, list(flags), tuple(needs)
        self.out = out or nodes[-1].output[0]
        self.rtol, self.atol_rel, self.note = rtol, atol_rel, note
        self.opset = opset


def N(op, inputs, outputs=("y",), **attrs):
    """One ONNX node; its name is its first output."""
    return helper.make_node(op, list(inputs), list(outputs), name=outputs[0], **attrs)


def Const(name, value_name):
    """A Constant node whose tensor is the case's consts[value_name]."""
    return ("Constant", name, value_name)


# ---- initial values: generators of float32 (or int64/bool) arrays ----

def randn(*shape):
    return lambda r: r.standard_normal(shape).astype(np.float32)


def away(*shape, lo=0.2):
    """|v| in [lo, 1.2]: away from zero (Relu's kink, a divisor)."""
    def gen(r):
        mag = r.uniform(lo, lo + 1.0, shape)
        return (np.where(r.random(shape) < 0.5, -mag, mag)).astype(np.float32)
    return gen


def pos(*shape, lo=0.5, hi=2.0):
    return lambda r: r.uniform(lo, hi, shape).astype(np.float32)


def distinct(*shape):
    """A shuffled ramp in [-1, 1): no two values tie (MaxPool's argmax)."""
    def gen(r):
        n = int(np.prod(shape))
        return ((r.permutation(n) + r.uniform(0.1, 0.9, n)) * (2.0 / n) - 1.0) \
            .reshape(shape).astype(np.float32)
    return gen


def spread(*shape, scale=3.0):
    """Normal values times `scale`: both sides of an activation's corners."""
    return lambda r: (r.standard_normal(shape) * scale).astype(np.float32)


def ints(*values, shape=None):
    a = np.array(values, dtype=np.int64)
    return lambda r: a.reshape(shape) if shape else a


def bools(*values, shape):
    a = np.array(values, dtype=np.bool_).reshape(shape)
    return lambda r: a


def scalar(v, dtype=np.float32):
    a = np.array(v, dtype=dtype)
    return lambda r: a


def labels_with(n_classes, shape, ignore=None, every=4):
    """Class ids in [0, n_classes); every `every`-th one is `ignore`."""
    def gen(r):
        y = r.integers(0, n_classes, shape).astype(np.int64)
        if ignore is not None:
            y.reshape(-1)[::every] = ignore
        return y
    return gen


# ---- torch helpers ----

def rnn_weights(t, hidden, gates, op, directions=1):
    """PyTorch's flat weights of a recurrent layer from the ONNX W, R, B:
    per direction w_ih, w_hh, b_ih, b_hh, the gates reordered from ONNX's
    (LSTM i o f c, GRU z r h) to PyTorch's (i f g o, r z n)."""
    order = {"LSTM": [0, 2, 3, 1], "GRU": [1, 0, 2], "RNN": [0]}[op]

    def reorder(m):
        return torch.cat([m[k * hidden:(k + 1) * hidden] for k in order])
    out = []
    for d in range(directions):
        b = t.B[d]
        out += [reorder(t.W[d]), reorder(t.R[d]), reorder(b[:gates * hidden]),
                reorder(b[gates * hidden:])]
    return out


def bn(t, momentum=0.9, eps=1e-5):
    """ONNX BatchNormalization in training mode (running statistics move by
    ONNX's momentum, torch's is 1 - momentum; variance unbiased as in torch)."""
    rm, rv = t.mean.detach().clone(), t.var.detach().clone()
    y = F.batch_norm(t.X, rm, rv, t.scale, t.B, training=True,
                     momentum=1.0 - momentum, eps=eps)
    return y, {"mean": rm, "var": rv}


def conv(t, stride=1, pads=(0, 0, 0, 0), dilation=1, groups=1):
    """ONNX Conv: pads are (top, left, bottom, right)."""
    x = F.pad(t.X, (pads[1], pads[3], pads[0], pads[2]))
    return F.conv2d(x, t.W, getattr(t, "B", None), stride=stride,
                    dilation=dilation, groups=groups)


def asymmetric_linear(x, oh, ow):
    """ONNX's linear Resize with the asymmetric transform (and Upsample's):
    output (i, j) samples input (i * H / oh, j * W / ow), clamped at the
    border; grid_sample with align_corners=True addresses pixel centres."""
    h, w = x.shape[2], x.shape[3]
    ys = torch.arange(oh, dtype=x.dtype) * h / oh
    xs = torch.arange(ow, dtype=x.dtype) * w / ow
    gy = ys / (h - 1) * 2 - 1
    gx = xs / (w - 1) * 2 - 1
    grid = torch.stack(torch.meshgrid(gy, gx, indexing="ij")[::-1], -1)
    grid = grid.unsqueeze(0).expand(x.shape[0], oh, ow, 2)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border",
                         align_corners=True)


def topk_stable(w, k, dim, largest):
    """ONNX TopK's values plus its indices (as numbers) through torch's
    stable sort: equal values keep their index order."""
    s = torch.sort(w, dim=dim, descending=largest, stable=True)
    return (s.values.narrow(dim, 0, k) + s.indices.narrow(dim, 0, k).to(w.dtype))


def one_hot_ref(indices, depth, values, axis):
    """ONNX OneHot through torch's one_hot: a negative index counts from
    depth, one outside [-depth, depth) gives a line of values[0]; the depth
    dimension moved to `axis` of the output."""
    i = torch.where(indices < 0, indices + depth, indices)
    inside = (i >= 0) & (i < depth)
    hot = F.one_hot(torch.where(inside, i, torch.zeros_like(i)), depth) * inside[..., None]
    y = values[0] + (values[1] - values[0]) * hot.to(values.dtype)
    return torch.movedim(y, -1, axis)


def bn_node(**attrs):
    return N("BatchNormalization", ["X", "scale", "B", "mean", "var"],
             ["y", "running_mean", "running_var"], training_mode=1, **attrs)


# ---- the table ----

CASES = [
    # -- Gemm: Y = alpha op(A) op(B) + beta C, C broadcast to (M, N)
    Case("Gemm_no_bias", "Gemm", [N("Gemm", ["A", "B"])],
         dict(A=randn(4, 3), B=randn(3, 5)),
         lambda t: t.A @ t.B),
    Case("Gemm_linear_row_bias", "Gemm", [N("Gemm", ["A", "W", "C"], transB=1)],
         dict(A=randn(4, 3), W=randn(5, 3), C=randn(5)),
         lambda t: t.A @ t.W.T + t.C),
    Case("Gemm_transA_alpha_beta", "Gemm",
         [N("Gemm", ["A", "B", "C"], transA=1, alpha=0.5, beta=2.0)],
         dict(A=randn(3, 4), B=randn(3, 5), C=randn(4, 5)),
         lambda t: 0.5 * (t.A.T @ t.B) + 2.0 * t.C),
    Case("Gemm_transA_transB_column_bias", "Gemm",
         [N("Gemm", ["A", "B", "C"], transA=1, transB=1, beta=-0.75)],
         dict(A=randn(3, 4), B=randn(5, 3), C=randn(4, 1)),
         lambda t: t.A.T @ t.B.T - 0.75 * t.C),
    Case("Gemm_scalar_bias", "Gemm", [N("Gemm", ["A", "B", "C"], alpha=-1.5)],
         dict(A=randn(4, 3), B=randn(3, 5), C=randn(1)),
         lambda t: -1.5 * (t.A @ t.B) + t.C),

    # -- Add / Sub with broadcasting (numpy rules)
    Case("Add_same_shape", "Add", [N("Add", ["A", "B"])],
         dict(A=randn(2, 3, 4), B=randn(2, 3, 4)),
         lambda t: t.A + t.B),
    Case("Add_broadcast_both", "Add", [N("Add", ["A", "B"])],
         dict(A=randn(2, 1, 4), B=randn(3, 1)),
         lambda t: t.A + t.B),
    Case("Add_shared_operand", "Add", [N("Add", ["W", "W"])],
         dict(W=randn(3, 4)),
         lambda t: t.W + t.W),
    Case("Sub_broadcast_right", "Sub", [N("Sub", ["A", "B"])],
         dict(A=randn(2, 3, 4), B=randn(4)),
         lambda t: t.A - t.B),
    Case("Sub_broadcast_left", "Sub", [N("Sub", ["A", "B"])],
         dict(A=randn(3, 1), B=randn(2, 1, 4)),
         lambda t: t.A - t.B),

    # -- Relu (values away from the kink at 0)
    Case("Relu", "Relu", [N("Relu", ["W"])],
         dict(W=away(4, 5)),
         lambda t: torch.relu(t.W)),

    # -- Conv (2-D): X and W (and B) are parameters, so dX, dW, dB are checked
    Case("Conv_basic", "Conv", [N("Conv", ["X", "W"], kernel_shape=[3, 3])],
         dict(X=randn(2, 3, 5, 5), W=randn(4, 3, 3, 3)),
         lambda t: conv(t)),
    Case("Conv_stride_pad_bias", "Conv",
         [N("Conv", ["X", "W", "B"], strides=[2, 2], pads=[1, 1, 1, 1])],
         dict(X=randn(2, 3, 6, 6), W=randn(4, 3, 3, 3), B=randn(4)),
         lambda t: conv(t, stride=2, pads=(1, 1, 1, 1))),
    Case("Conv_dilation_asymmetric_pads", "Conv",
         [N("Conv", ["X", "W", "B"], dilations=[2, 1], pads=[1, 0, 2, 1],
            strides=[1, 2])],
         dict(X=randn(2, 2, 7, 6), W=randn(3, 2, 3, 2), B=randn(3)),
         lambda t: conv(t, stride=(1, 2), pads=(1, 0, 2, 1), dilation=(2, 1))),
    Case("Conv_groups", "Conv",
         [N("Conv", ["X", "W", "B"], group=2, pads=[1, 1, 1, 1])],
         dict(X=randn(2, 4, 5, 5), W=randn(6, 2, 3, 3), B=randn(6)),
         lambda t: conv(t, pads=(1, 1, 1, 1), groups=2)),
    Case("Conv_depthwise_strided", "Conv",
         [N("Conv", ["X", "W"], group=3, strides=[1, 2], pads=[1, 1, 1, 1])],
         dict(X=randn(2, 3, 5, 6), W=randn(3, 1, 3, 3)),
         lambda t: conv(t, stride=(1, 2), pads=(1, 1, 1, 1), groups=3)),
    Case("Conv_1x1", "Conv", [N("Conv", ["X", "W", "B"])],
         dict(X=randn(2, 3, 3, 4), W=randn(5, 3, 1, 1), B=randn(5)),
         lambda t: conv(t)),
    Case("Conv_auto_pad_same_upper", "Conv",
         [N("Conv", ["X", "W"], auto_pad="SAME_UPPER", strides=[2, 2])],
         dict(X=randn(2, 2, 6, 6), W=randn(3, 2, 3, 3)),
         lambda t: conv(t, stride=2, pads=(0, 0, 1, 1))),

    # -- BatchNormalization in training mode: Y, running_mean, running_var
    Case("BatchNormalization_training_4d", "BatchNormalization", [bn_node()],
         dict(X=randn(4, 3, 2, 2), scale=randn(3), B=randn(3), mean=randn(3),
              var=pos(3)),
         lambda t: bn(t), stats=("mean", "var")),
    Case("BatchNormalization_training_2d_momentum_eps", "BatchNormalization",
         [bn_node(momentum=0.7, epsilon=1e-3)],
         dict(X=randn(6, 4), scale=randn(4), B=randn(4), mean=randn(4), var=pos(4)),
         lambda t: bn(t, momentum=0.7, eps=1e-3), stats=("mean", "var")),

    # -- MaxPool (distinct values: no ties), GlobalAveragePool
    Case("MaxPool_2x2", "MaxPool",
         [N("MaxPool", ["X"], kernel_shape=[2, 2], strides=[2, 2])],
         dict(X=distinct(2, 2, 6, 6)),
         lambda t: F.max_pool2d(t.X, 2, 2)),
    Case("MaxPool_3x3_overlap_pads", "MaxPool",
         [N("MaxPool", ["X"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
         dict(X=distinct(2, 2, 5, 6)),
         lambda t: F.max_pool2d(t.X, 3, 2, padding=1)),
    Case("MaxPool_dilation", "MaxPool",
         [N("MaxPool", ["X"], kernel_shape=[2, 2], dilations=[2, 2], strides=[1, 1])],
         dict(X=distinct(2, 2, 5, 5)),
         lambda t: F.max_pool2d(t.X, 2, 1, dilation=2)),
    Case("MaxPool_ceil_mode", "MaxPool",
         [N("MaxPool", ["X"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
         dict(X=distinct(2, 2, 5, 5)),
         lambda t: F.max_pool2d(t.X, 2, 2, ceil_mode=True)),
    Case("GlobalAveragePool", "GlobalAveragePool", [N("GlobalAveragePool", ["X"])],
         dict(X=randn(2, 3, 4, 5)),
         lambda t: t.X.mean(dim=(2, 3), keepdim=True)),

    # -- shape ops: the gradient is dY reshaped back
    Case("Reshape_minus_one", "Reshape", [N("Reshape", ["W", "shape"])],
         dict(W=randn(2, 3, 4), shape=ints(2, -1)),
         lambda t: t.W.reshape(2, 12)),
    Case("Reshape_zero_copies_dim", "Reshape", [N("Reshape", ["W", "shape"])],
         dict(W=randn(2, 3, 4), shape=ints(0, 4, 3)),
         lambda t: t.W.reshape(2, 4, 3)),
    Case("Flatten_axis1", "Flatten", [N("Flatten", ["W"])],
         dict(W=randn(2, 3, 2, 2)),
         lambda t: t.W.reshape(2, 12)),
    Case("Flatten_axis2", "Flatten", [N("Flatten", ["W"], axis=2)],
         dict(W=randn(2, 3, 2, 2)),
         lambda t: t.W.reshape(6, 4)),
    Case("Squeeze_axes", "Squeeze", [N("Squeeze", ["W", "axes"])],
         dict(W=randn(2, 1, 3, 1), axes=ints(1, -1)),
         lambda t: t.W.reshape(2, 3)),
    Case("Squeeze_all_ones", "Squeeze", [N("Squeeze", ["W"])],
         dict(W=randn(3, 1, 4, 1)),
         lambda t: t.W.reshape(3, 4)),
    Case("Unsqueeze", "Unsqueeze", [N("Unsqueeze", ["W", "axes"])],
         dict(W=randn(2, 3), axes=ints(1, -1)),
         lambda t: t.W.reshape(2, 1, 3, 1)),
    Case("Identity", "Identity", [N("Identity", ["W"])],
         dict(W=randn(3, 4)),
         lambda t: t.W),

    # -- losses
    Case("MseLoss", "MseLoss", [], dict(W=randn(4, 5)), lambda t: t.W, out="W",
         note="the loss itself: the model is Add(W, x), the loss mse"),
    Case("SoftmaxCrossEntropyLoss_ignore_index", "SoftmaxCrossEntropyLoss",
         [N("Add", ["W", "x"], ["s"]),
          N("SoftmaxCrossEntropyLoss", ["s", "labels"], ["loss"], ignore_index=1)],
         dict(W=randn(6, 4)),
         lambda t: F.cross_entropy(t.W + t.x, t.labels, ignore_index=1),
         loss="model", x_like="W", labels=labels_with(4, (6,), ignore=1, every=3)),
    Case("SoftmaxCrossEntropyLoss_spatial", "SoftmaxCrossEntropyLoss",
         [N("Add", ["W", "x"], ["s"]),
          N("SoftmaxCrossEntropyLoss", ["s", "labels"], ["loss", "log_prob"],
            ignore_index=-1)],
         dict(W=randn(3, 4, 5)),
         lambda t: F.cross_entropy(t.W + t.x, t.labels, ignore_index=-1),
         loss="model", x_like="W", labels=labels_with(4, (3, 5), ignore=-1, every=4)),
    Case("CrossEntropy_loss_option", "SoftmaxCrossEntropyLoss",
         [N("Identity", ["W"])], dict(W=randn(5, 3)),
         lambda t: t.W, loss="cross_entropy", ignore_index=2,
         labels=labels_with(3, (5,), ignore=2, every=2),
         note="mpcc adds the loss (--loss=cross_entropy --ignore-index=2)"),
    Case("CrossEntropy_class_axis_last", "SoftmaxCrossEntropyLoss",
         [N("Identity", ["W"])], dict(W=randn(2, 3, 4)),
         lambda t: t.W, loss="cross_entropy", class_axis=-1, flags=["--class-axis=-1"],
         needs=["Transpose"], labels=labels_with(4, (2, 3), ignore=-100, every=5),
         note="a (B,T,V) output: mpcc transposes the classes to axis 1"),
    Case("NegativeLogLikelihoodLoss_ignore_index", "NegativeLogLikelihoodLoss",
         [N("Add", ["W", "x"], ["s"]),
          N("NegativeLogLikelihoodLoss", ["s", "labels"], ["loss"], ignore_index=0)],
         dict(W=randn(6, 4)),
         lambda t: F.nll_loss(t.W + t.x, t.labels, ignore_index=0),
         loss="model", x_like="W", labels=labels_with(4, (6,), ignore=0, every=4)),
    Case("NegativeLogLikelihoodLoss_spatial_LogSoftmax", "NegativeLogLikelihoodLoss",
         [N("Add", ["W", "x"], ["s"]), N("LogSoftmax", ["s"], ["lp"], axis=1),
          N("NegativeLogLikelihoodLoss", ["lp", "labels"], ["loss"])],
         dict(W=randn(3, 4, 5)),
         lambda t: F.nll_loss(torch.log_softmax(t.W + t.x, 1), t.labels),
         loss="model", x_like="W", labels=labels_with(4, (3, 5), ignore=-100, every=6),
         note="cross-entropy as PyTorch exports it"),

    # ---- ops whose gradients are being added: registered once ops.def says so
    Case("MatMul_2d", "MatMul", [N("MatMul", ["A", "B"])],
         dict(A=randn(3, 4), B=randn(4, 5)),
         lambda t: t.A @ t.B),
    Case("MatMul_batched_broadcast_rhs", "MatMul", [N("MatMul", ["A", "B"])],
         dict(A=randn(2, 3, 4), B=randn(4, 5)),
         lambda t: torch.matmul(t.A, t.B)),
    Case("MatMul_batched_broadcast_both", "MatMul", [N("MatMul", ["A", "B"])],
         dict(A=randn(2, 1, 3, 4), B=randn(3, 4, 2)),
         lambda t: torch.matmul(t.A, t.B)),
    # a Transpose of the last two dims is read in place (transposed.c)
    Case("MatMul_transposed_weight", "MatMul",
         [N("Transpose", ["W"], ["Wt"]), N("MatMul", ["A", "Wt"])],
         dict(A=randn(2, 3, 4), W=randn(5, 4)),
         lambda t: torch.matmul(t.A, t.W.t())),
    Case("MatMul_transposed_lhs", "MatMul",
         [N("Transpose", ["A"], ["At"], perm=[0, 2, 1]), N("MatMul", ["At", "B"])],
         dict(A=randn(2, 4, 3), B=randn(2, 4, 5)),
         lambda t: torch.matmul(t.A.transpose(1, 2), t.B)),
    Case("MatMul_transposed_both_broadcast", "MatMul",
         [N("Transpose", ["A"], ["At"], perm=[0, 1, 3, 2]),
          N("Transpose", ["B"], ["Bt"], perm=[0, 2, 1]), N("MatMul", ["At", "Bt"])],
         dict(A=randn(2, 1, 4, 3), B=randn(3, 2, 4)),
         lambda t: torch.matmul(t.A.transpose(2, 3), t.B.transpose(1, 2))),
    Case("MatMul_vector_lhs", "MatMul", [N("MatMul", ["v", "B"])],
         dict(v=randn(4), B=randn(4, 5)),
         lambda t: torch.matmul(t.v, t.B)),
    Case("MatMul_vector_rhs", "MatMul", [N("MatMul", ["A", "v"])],
         dict(A=randn(2, 3, 4), v=randn(4)),
         lambda t: torch.matmul(t.A, t.v)),
    Case("Mul_broadcast", "Mul", [N("Mul", ["A", "B"])],
         dict(A=randn(2, 3, 4), B=randn(3, 1)),
         lambda t: t.A * t.B),
    Case("Mul_shared_operand", "Mul", [N("Mul", ["W", "W"])],
         dict(W=randn(3, 4)),
         lambda t: t.W * t.W),
    Case("Div_broadcast", "Div", [N("Div", ["A", "B"])],
         dict(A=randn(2, 3, 4), B=away(4, lo=0.5)),
         lambda t: t.A / t.B),
    Case("Div_broadcast_numerator", "Div", [N("Div", ["A", "B"])],
         dict(A=randn(3, 1), B=away(2, 3, 4, lo=0.5)),
         lambda t: t.A / t.B),
    Case("Pow_both_trainable", "Pow", [N("Pow", ["X", "Y"])],
         dict(X=pos(3, 4), Y=randn(4)),
         lambda t: torch.pow(t.X, t.Y)),
    Case("Pow_constant_square", "Pow",
         [Const("two", "two"), N("Pow", ["X", "two"])],
         dict(X=randn(3, 4)), lambda t: t.X ** 2, consts=dict(two=scalar(2.0))),
    Case("Pow_constant_cube_negative_base", "Pow",
         [Const("three", "three"), N("Pow", ["X", "three"])],
         dict(X=randn(3, 4)), lambda t: t.X ** 3, consts=dict(three=scalar(3.0))),
    Case("Sqrt", "Sqrt", [N("Sqrt", ["X"])], dict(X=pos(3, 4)),
         lambda t: torch.sqrt(t.X)),
    Case("Abs", "Abs", [N("Abs", ["X"])], dict(X=away(3, 4)),
         lambda t: torch.abs(t.X)),
    Case("Neg", "Neg", [N("Neg", ["X"])], dict(X=randn(3, 4)),
         lambda t: -t.X),
    Case("Exp", "Exp", [N("Exp", ["X"])], dict(X=randn(3, 4)),
         lambda t: torch.exp(t.X)),
    Case("Log", "Log", [N("Log", ["X"])], dict(X=pos(3, 4)),
         lambda t: torch.log(t.X)),
    Case("Reciprocal", "Reciprocal", [N("Reciprocal", ["X"])], dict(X=away(3, 4, lo=0.5)),
         lambda t: 1.0 / t.X),
    Case("Sigmoid", "Sigmoid", [N("Sigmoid", ["X"])], dict(X=randn(3, 4)),
         lambda t: torch.sigmoid(t.X)),
    Case("Erf", "Erf", [N("Erf", ["X"])], dict(X=randn(3, 4)),
         lambda t: torch.erf(t.X)),
    Case("Tanh", "Tanh", [N("Tanh", ["X"])], dict(X=randn(3, 4)),
         lambda t: torch.tanh(t.X)),
    Case("Softmax_last_axis", "Softmax", [N("Softmax", ["X"])],
         dict(X=randn(3, 5)), lambda t: torch.softmax(t.X, dim=-1)),
    Case("LogSoftmax_last_axis", "LogSoftmax", [N("LogSoftmax", ["X"])],
         dict(X=randn(3, 5)), lambda t: torch.log_softmax(t.X, dim=-1)),
    Case("LogSoftmax_axis1", "LogSoftmax", [N("LogSoftmax", ["X"], axis=1)],
         dict(X=randn(2, 3, 4)), lambda t: torch.log_softmax(t.X, dim=1)),
    Case("Softmax_axis1", "Softmax", [N("Softmax", ["X"], axis=1)],
         dict(X=randn(2, 3, 4)), lambda t: torch.softmax(t.X, dim=1)),
    Case("Softmax_masked", "Softmax",
         [Const("mask", "mask"), N("Add", ["X", "mask"], ["s"]), N("Softmax", ["s"])],
         dict(X=randn(2, 3, 4, 4)), lambda t: torch.softmax(t.X + t.mask, dim=-1),
         consts=dict(mask=lambda r: np.triu(np.full((4, 4), -np.inf, np.float32), 1)),
         note="a causal mask added to attention's scores: one SoftmaxBias (simplify.c)"),
    Case("Softmax_masked_first", "Softmax",
         [Const("mask", "mask"), N("Add", ["mask", "X"], ["s"]), N("Softmax", ["s"], axis=2)],
         dict(X=randn(2, 4, 3)), lambda t: torch.softmax(t.mask + t.X, dim=2),
         consts=dict(mask=lambda r: r.standard_normal((1, 4, 3)).astype(np.float32)),
         note="the constant first, its leading 1 broadcast: one SoftmaxBias"),
    Case("Softmax_bias_trainable", "Softmax",
         [N("Add", ["X", "B"], ["s"]), N("Softmax", ["s"])],
         dict(X=randn(2, 3, 4), B=randn(3, 4)), lambda t: torch.softmax(t.X + t.B, dim=-1),
         note="a trainable bias has a gradient: the Add stays"),
    Case("Softmax_bias_other_axis", "Softmax",
         [Const("c", "c"), N("Add", ["X", "c"], ["s"]), N("Softmax", ["s"], axis=1)],
         dict(X=randn(2, 3, 4)), lambda t: torch.softmax(t.X + t.c, dim=1),
         consts=dict(c=lambda r: r.standard_normal((3, 4)).astype(np.float32)),
         note="a softmax over another axis than the last: the Add stays"),
    Case("LayerNormalization_last_axis", "LayerNormalization",
         [N("LayerNormalization", ["X", "scale", "B"], epsilon=1e-5)],
         dict(X=randn(2, 3, 4), scale=randn(4), B=randn(4)),
         lambda t: F.layer_norm(t.X, (4,), t.scale, t.B, eps=1e-5)),
    Case("LayerNormalization_axis1_no_bias", "LayerNormalization",
         [N("LayerNormalization", ["X", "scale"], axis=1, epsilon=1e-3)],
         dict(X=randn(2, 3, 4), scale=randn(3, 4)),
         lambda t: F.layer_norm(t.X, (3, 4), t.scale, None, eps=1e-3)),
    Case("Transpose_perm", "Transpose", [N("Transpose", ["W"], perm=[1, 0, 2])],
         dict(W=randn(2, 3, 4)), lambda t: t.W.permute(1, 0, 2)),
    Case("Transpose_default_reverses", "Transpose", [N("Transpose", ["W"])],
         dict(W=randn(2, 3, 4)), lambda t: t.W.permute(2, 1, 0)),
    Case("Slice_axes_steps", "Slice",
         [N("Slice", ["W", "starts", "ends", "axes", "steps"])],
         dict(W=randn(4, 6), starts=ints(1, 0), ends=ints(3, 6), axes=ints(0, 1),
              steps=ints(1, 2)),
         lambda t: t.W[1:3, 0:6:2]),
    Case("Slice_negative_step", "Slice",
         [N("Slice", ["W", "starts", "ends", "axes", "steps"])],
         dict(W=randn(3, 5), starts=ints(4), ends=ints(0), axes=ints(1), steps=ints(-2)),
         lambda t: t.W[:, [4, 2]]),
    Case("Slice_negative_start_clamped_end", "Slice",
         [N("Slice", ["W", "starts", "ends"])],
         dict(W=randn(5, 4), starts=ints(-3), ends=ints(1000)),
         lambda t: t.W[-3:]),
    Case("Slice_parts", "Slice",
         [N("Slice", ["W", "s4", "e7", "ax1"], ["c"]), N("Slice", ["W", "s0", "e1", "ax1"], ["a"]),
          N("Slice", ["W", "e1", "s4", "ax1"], ["b"]), N("Mul", ["a", "b"], ["m"]),
          N("Mul", ["m", "c"])],
         dict(W=randn(2, 7, 3), s0=ints(0), e1=ints(1), s4=ints(4), e7=ints(7), ax1=ints(1)),
         lambda t: t.W[:, 0:1] * t.W[:, 1:4] * t.W[:, 4:7],
         note="three Slices that part W along axis 1 become one Split (simplify.c)"),
    Case("Split_sizes", "Split",
         [N("Split", ["W", "split"], ["a", "b", "c"], axis=1),
          N("Gemm", ["a", "Ma"], ["ga"]), N("Gemm", ["b", "Mb"], ["gb"]),
          N("Add", ["ga", "gb"], ["s"]), N("Sub", ["s", "c"])],
         dict(W=randn(4, 6), split=ints(1, 2, 3), Ma=randn(1, 3), Mb=randn(2, 3)),
         lambda t: (lambda a, b, c: a @ t.Ma + b @ t.Mb - c)(*t.W.split([1, 2, 3], 1)),
         note="each output reaches the loss through a different path"),
    Case("Split_equal", "Split",
         [N("Split", ["W"], ["a", "b"]), N("Sub", ["a", "b"])],
         dict(W=randn(4, 3)),
         lambda t: t.W[:2] - t.W[2:]),
    Case("Concat_axis1", "Concat", [N("Concat", ["A", "B", "C"], axis=1)],
         dict(A=randn(2, 3), B=randn(2, 1), C=randn(2, 2)),
         lambda t: torch.cat([t.A, t.B, t.C], 1)),
    Case("Concat_axis0_negative", "Concat", [N("Concat", ["A", "B"], axis=-2)],
         dict(A=randn(1, 3), B=randn(2, 3)),
         lambda t: torch.cat([t.A, t.B], 0)),
    Case("Gather_embedding_repeats", "Gather", [N("Gather", ["W", "idx"])],
         dict(W=randn(5, 3), idx=ints(0, 2, 2, 4, 1, 2, 0, 3, shape=(2, 4))),
         lambda t: t.W[t.idx]),
    Case("Gather_axis1_negative_index", "Gather", [N("Gather", ["W", "idx"], axis=1)],
         dict(W=randn(3, 5), idx=ints(-1, 1, 4)),
         lambda t: t.W[:, t.idx]),
    # -- GatherElements and GatherND (the indices int64 or int32, negative ones
    #    counted from the end, repeats adding up in the data's gradient), and the
    #    scatters: none (dy zeroed where updates were written) and add
    Case("GatherElements_axis1_negative_repeats", "GatherElements",
         [N("GatherElements", ["W", "idx"], axis=1)],
         dict(W=randn(3, 4), idx=ints(0, -1, 3, 3, 1, 2, -4, 0, 0, 1, -2, 1, 1, 3, 2,
                                      shape=(3, 5))),
         lambda t: torch.gather(t.W, 1, t.idx % 4)),
    Case("GatherElements_axis0_int32_narrower", "GatherElements",
         [N("GatherElements", ["W", "idx"], axis=-3)],
         dict(W=randn(4, 3, 2),
              idx=lambda r: np.array([3, 0, -1, 2, 1, 1, 0, 0, -3, 2, 3, 1],
                                     dtype=np.int32).reshape(6, 1, 2)),
         lambda t: torch.gather(t.W, 0, t.idx % 4),
         note="indices narrower than the data off the axis, as torch.gather allows"),
    Case("ScatterElements_none_axis1", "ScatterElements",
         [N("ScatterElements", ["W", "idx", "U"], axis=1)],
         dict(W=randn(3, 5), idx=ints(4, 0, -4, 2, 3, -1, shape=(3, 2)), U=randn(3, 2)),
         lambda t: torch.scatter(t.W, 1, t.idx % 5, t.U),
         note="no index repeats within a line: which update wins is left open (ONNX, torch)"),
    Case("ScatterElements_add_repeats_axis0", "ScatterElements",
         [N("ScatterElements", ["W", "idx", "U"], axis=0, reduction="add")],
         dict(W=randn(4, 3), idx=ints(1, 0, -1, 1, 3, 3, -3, 0, 2, 0, 2, 1, 1, -4, 3,
                                      shape=(5, 3)),
              U=randn(5, 3)),
         lambda t: torch.scatter_add(t.W, 0, t.idx % 4, t.U)),
    Case("Scatter_opset10", "Scatter", [N("Scatter", ["W", "idx", "U"], axis=0)],
         dict(W=randn(3, 4), idx=ints(2, 0, 1, 2, 0, 2, 0, 1, shape=(2, 4)), U=randn(2, 4)),
         lambda t: torch.scatter(t.W, 0, t.idx, t.U), opset=10),
    Case("GatherND_pairs_repeats", "GatherND", [N("GatherND", ["W", "idx"])],
         dict(W=randn(3, 4, 2), idx=ints(0, 1, 2, -1, 0, 1, -3, 3, 1, 0, shape=(5, 2))),
         lambda t: t.W[t.idx[:, 0], t.idx[:, 1]]),
    Case("GatherND_batch_dims1", "GatherND", [N("GatherND", ["W", "idx"], batch_dims=1)],
         dict(W=randn(2, 3, 4), idx=ints(2, 2, -1, 0, 1, 0, shape=(2, 3, 1))),
         lambda t: torch.stack([t.W[b][t.idx[b, :, 0]] for b in range(2)])),
    Case("ScatterND_none_rows", "ScatterND", [N("ScatterND", ["W", "idx", "U"])],
         dict(W=randn(4, 3), idx=ints(3, -4, shape=(2, 1)), U=randn(2, 3)),
         lambda t: t.W.index_put((t.idx[:, 0],), t.U),
         note="no index repeats: which update wins is left open (ONNX, torch)"),
    Case("ScatterND_add_repeats_elements", "ScatterND",
         [N("ScatterND", ["W", "idx", "U"], reduction="add")],
         dict(W=randn(3, 4, 2), idx=ints(0, 1, 2, -1, 0, 1, -3, 3, 2, 3, shape=(5, 2)),
              U=randn(5, 2)),
         lambda t: t.W.index_put((t.idx[:, 0], t.idx[:, 1]), t.U, accumulate=True)),
    Case("Where_broadcast", "Where", [N("Where", ["cond", "A", "B"])],
         dict(cond=bools(1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, shape=(3, 4)),
              A=randn(3, 4), B=randn(1, 4)),
         lambda t: torch.where(t.cond, t.A, t.B)),
    Case("Cast_float_to_float", "Cast", [N("Cast", ["W"], to=TensorProto.FLOAT)],
         dict(W=randn(3, 4)), lambda t: t.W),
    Case("CastLike_to_float64_and_back", "CastLike",
         [Const("like64", "like64"), Const("like32", "like32"),
          N("CastLike", ["W", "like64"], ["d"]), N("CastLike", ["d", "like32"])],
         dict(W=randn(3, 4)), lambda t: t.W,
         consts=dict(like64=lambda r: np.zeros(2, np.float64),
                     like32=lambda r: np.zeros(2, np.float32)),
         note="mpcc computes float64 in float32 (front/float32.c): the cast is exact"),
    Case("Resize_linear_half_pixel_sizes", "Resize",
         [N("Resize", ["X", "", "", "sizes"], mode="linear",
            coordinate_transformation_mode="half_pixel")],
         dict(X=randn(2, 2, 3, 3), sizes=ints(2, 2, 6, 5)),
         lambda t: F.interpolate(t.X, size=(6, 5), mode="bilinear", align_corners=False)),
    Case("Resize_nearest_scales", "Resize",
         [Const("scales", "scales"),
          N("Resize", ["X", "", "scales"], mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
         dict(X=randn(2, 2, 2, 3)),
         lambda t: F.interpolate(t.X, scale_factor=2, mode="nearest"),
         consts=dict(scales=lambda r: np.array([1, 1, 2, 2], np.float32))),
    Case("Dropout_ratio_zero_training", "Dropout",
         [Const("ratio", "ratio"), Const("training", "training"),
          N("Dropout", ["X", "ratio", "training"])],
         dict(X=randn(3, 4)), lambda t: t.X,
         consts=dict(ratio=scalar(0.0), training=scalar(True, np.bool_))),
    Case("Dropout_inference", "Dropout", [N("Dropout", ["X"])],
         dict(X=randn(3, 4)), lambda t: t.X),

    # -- activations with attributes (values on both sides of every corner)
    Case("HardSigmoid_default", "HardSigmoid", [N("HardSigmoid", ["X"])],
         dict(X=spread(4, 5)), lambda t: torch.clamp(0.2 * t.X + 0.5, 0, 1)),
    Case("HardSigmoid_torch_alpha", "HardSigmoid",
         [N("HardSigmoid", ["X"], alpha=1.0 / 6, beta=0.5)],
         dict(X=spread(4, 5, scale=4.0)), lambda t: F.hardsigmoid(t.X),
         note="F.hardsigmoid exports as HardSigmoid(alpha=1/6)"),
    Case("HardSwish", "HardSwish", [N("HardSwish", ["X"])],
         dict(X=spread(4, 5, scale=4.0)), lambda t: F.hardswish(t.X)),
    Case("LeakyRelu_default", "LeakyRelu", [N("LeakyRelu", ["X"])],
         dict(X=away(4, 5)), lambda t: F.leaky_relu(t.X, 0.01)),
    Case("LeakyRelu_alpha", "LeakyRelu", [N("LeakyRelu", ["X"], alpha=0.2)],
         dict(X=away(4, 5)), lambda t: F.leaky_relu(t.X, 0.2)),
    Case("Elu_default", "Elu", [N("Elu", ["X"])],
         dict(X=spread(4, 5, scale=1.5)), lambda t: F.elu(t.X)),
    Case("Elu_alpha", "Elu", [N("Elu", ["X"], alpha=0.5)],
         dict(X=spread(4, 5, scale=1.5)), lambda t: F.elu(t.X, alpha=0.5)),
    Case("Selu_default", "Selu", [N("Selu", ["X"])],
         dict(X=spread(4, 5, scale=1.5)), lambda t: F.selu(t.X)),
    Case("Selu_alpha_gamma", "Selu", [N("Selu", ["X"], alpha=2.0, gamma=0.5)],
         dict(X=spread(4, 5, scale=1.5)),
         lambda t: 0.5 * torch.where(t.X > 0, t.X, 2.0 * torch.expm1(t.X))),
    Case("Softplus", "Softplus", [N("Softplus", ["X"])],
         dict(X=spread(4, 5, scale=8.0)), lambda t: F.softplus(t.X)),
    Case("Gelu_erf", "Gelu", [N("Gelu", ["X"])],
         dict(X=spread(4, 5, scale=2.0)), lambda t: F.gelu(t.X), opset=20),
    Case("Gelu_tanh", "Gelu", [N("Gelu", ["X"], approximate="tanh")],
         dict(X=spread(4, 5, scale=2.0)), lambda t: F.gelu(t.X, approximate="tanh"),
         opset=20),
    Case("Gelu_erf_decomposed", "Erf",
         [Const("sqrt2", "sqrt2"), Const("one", "one"), Const("half", "half"),
          N("Div", ["X", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]),
          N("Add", ["e", "one"], ["a"]), N("Mul", ["X", "a"], ["m"]),
          N("Mul", ["m", "half"])],
         dict(X=spread(4, 5, scale=2.0)), lambda t: F.gelu(t.X),
         consts=dict(sqrt2=scalar(2 ** 0.5), one=scalar(1.0), half=scalar(0.5)),
         note="nn.GELU as PyTorch exports it before opset 20"),
    Case("Gelu_erf_decomposed_half_first", "Erf",
         [Const("rsqrt2", "rsqrt2"), Const("one", "one"), Const("half", "half"),
          N("Mul", ["rsqrt2", "X"], ["d"]), N("Erf", ["d"], ["e"]),
          N("Add", ["one", "e"], ["a"]), N("Mul", ["X", "half"], ["h"]),
          N("Mul", ["a", "h"])],
         dict(X=spread(4, 5, scale=2.0)), lambda t: F.gelu(t.X),
         consts=dict(rsqrt2=scalar(0.5 ** 0.5), one=scalar(1.0), half=scalar(0.5)),
         note="0.5 * x * (1 + erf(x / sqrt 2)) written the other way round"),
    Case("Gelu_erf_decomposed_shared", "Erf",
         [Const("sqrt2", "sqrt2"), Const("one", "one"), Const("half", "half"),
          N("Div", ["X", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]),
          N("Add", ["e", "one"], ["a"]), N("Mul", ["X", "a"], ["m"]),
          N("Mul", ["m", "half"], ["g"]), N("Mul", ["g", "e"])],
         dict(X=spread(4, 5, scale=2.0)),
         lambda t: F.gelu(t.X) * torch.erf(t.X / 2 ** 0.5),
         consts=dict(sqrt2=scalar(2 ** 0.5), one=scalar(1.0), half=scalar(0.5)),
         note="the erf is read again after the GELU: the five nodes stay as they are"),
    Case("Mul_by_ones_broadcast", "Mul",
         [Const("ones", "ones"), N("Mul", ["X", "ones"])],
         dict(X=randn(2, 1, 4)), lambda t: t.X * torch.ones(2, 3, 4, dtype=torch.float64),
         consts=dict(ones=lambda r: np.ones((2, 3, 4), np.float32)),
         note="ones that broadcast x to a larger shape: the product stays"),
    Case("Mul_by_one", "Mul",
         [Const("ones", "ones"), Const("one", "one"), N("Mul", ["X", "ones"], ["m"]),
          N("Div", ["m", "one"], ["q"]), N("Mul", ["q", "X"])],
         dict(X=randn(2, 3, 4)), lambda t: (t.X * 1.0 / 1.0) * t.X,
         consts=dict(ones=lambda r: np.ones((3, 1), np.float32), one=scalar(1.0)),
         note="x * 1 and x / 1 go (simplify.c): the gradient passes through"),
    Case("Clip_relu6_inputs", "Clip",
         [Const("lo", "lo"), Const("hi", "hi"), N("Clip", ["X", "lo", "hi"])],
         dict(X=spread(4, 5, scale=5.0)), lambda t: F.relu6(t.X),
         consts=dict(lo=scalar(0.0), hi=scalar(6.0)),
         note="F.relu6 exports as Clip(min=0, max=6) with the bounds as inputs"),
    Case("Clip_max_only", "Clip",
         [Const("hi", "hi"), N("Clip", ["X", "", "hi"])],
         dict(X=randn(4, 5)), lambda t: torch.clamp(t.X, max=0.3),
         consts=dict(hi=scalar(0.3))),
    Case("Clip_no_bounds", "Clip", [N("Clip", ["X"])],
         dict(X=randn(4, 5)), lambda t: t.X),
    Case("Clip_attributes_opset6", "Clip", [N("Clip", ["X"], min=-0.5, max=0.25)],
         dict(X=randn(4, 5)), lambda t: torch.clamp(t.X, -0.5, 0.25), opset=6),

    # -- variadic elementwise ops with broadcasting, PRelu
    Case("Min_two_broadcast", "Min", [N("Min", ["A", "B"])],
         dict(A=distinct(2, 3, 4), B=distinct(3, 1)),
         lambda t: torch.minimum(t.A, t.B)),
    Case("Max_three_broadcast", "Max", [N("Max", ["A", "B", "C"])],
         dict(A=distinct(2, 3, 4), B=distinct(4), C=distinct(3, 1)),
         lambda t: torch.maximum(torch.maximum(t.A, t.B), t.C)),
    Case("Max_shared_operand_ties", "Max", [N("Max", ["W", "W"])],
         dict(W=randn(3, 4)), lambda t: torch.maximum(t.W, t.W),
         note="every element ties: each operand gets half, as torch.maximum"),
    Case("Max_constant_zero", "Max",
         [Const("zero", "zero"), N("Max", ["X", "zero"])],
         dict(X=away(3, 4)), lambda t: torch.maximum(t.X, t.zero),
         consts=dict(zero=scalar(0.0))),
    Case("Min_single_input", "Min", [N("Min", ["X"])],
         dict(X=randn(3, 4)), lambda t: t.X),
    Case("Mean_three_broadcast", "Mean", [N("Mean", ["A", "B", "C"])],
         dict(A=randn(2, 3, 4), B=randn(4), C=randn(3, 1)),
         lambda t: (t.A + t.B + t.C) / 3),
    Case("Sum_broadcast", "Sum", [N("Sum", ["A", "B"])],
         dict(A=randn(2, 3, 4), B=randn(3, 1)),
         lambda t: t.A + t.B),
    Case("PRelu_channel_slope", "PRelu", [N("PRelu", ["X", "slope"])],
         dict(X=away(2, 3, 4, 4), slope=randn(3, 1, 1)),
         lambda t: torch.where(t.X > 0, t.X, t.X * t.slope),
         note="nn.PReLU(3) exports its slope as (3, 1, 1)"),
    Case("PRelu_scalar_slope", "PRelu", [N("PRelu", ["X", "slope"])],
         dict(X=away(3, 5), slope=randn(1)),
         lambda t: F.prelu(t.X, t.slope)),

    # -- comparisons and logic (bool masks, no gradient of their own) feeding Where
    Case("Less_mask_Where", "Less",
         [N("Less", ["A", "B"], ["m"]), N("Where", ["m", "A", "B"])],
         dict(A=distinct(3, 4), B=distinct(3, 4)),
         lambda t: torch.where(t.A < t.B, t.A, t.B)),
    Case("Greater_broadcast_mask_Where", "Greater",
         [N("Greater", ["A", "B"], ["m"]), N("Where", ["m", "A", "B"])],
         dict(A=distinct(3, 4), B=distinct(4)),
         lambda t: torch.where(t.A > t.B, t.A, t.B)),
    Case("LessOrEqual_GreaterOrEqual_And", "And",
         [N("LessOrEqual", ["A", "B"], ["le"]), N("GreaterOrEqual", ["A", "C"], ["ge"]),
          N("And", ["le", "ge"], ["m"]), N("Sum", ["B", "C"], ["bc"]),
          N("Where", ["m", "A", "bc"])],
         dict(A=distinct(3, 4), B=distinct(3, 1), C=distinct(4)),
         lambda t: torch.where((t.A <= t.B) & (t.A >= t.C), t.A, t.B + t.C)),
    Case("Not_Or_Xor_masks", "Not",
         [N("Less", ["A", "B"], ["lt"]), N("Greater", ["A", "C"], ["gt"]),
          N("Or", ["lt", "gt"], ["o"]), N("Xor", ["lt", "gt"], ["xo"]),
          N("Not", ["xo"], ["nx"]), N("Where", ["o", "A", "B"], ["w"]),
          N("Where", ["nx", "w", "C"])],
         dict(A=distinct(3, 4), B=distinct(3, 4), C=distinct(3, 4)),
         lambda t: torch.where(~((t.A < t.B) ^ (t.A > t.C)),
                               torch.where((t.A < t.B) | (t.A > t.C), t.A, t.B), t.C)),
    Case("Equal_int64_mask_Where", "Equal",
         [N("Cast", ["A"], ["ai"], to=TensorProto.INT64), N("Equal", ["ai", "k"], ["m"]),
          N("Where", ["m", "A", "B"])],
         dict(A=spread(4, 5, scale=1.5), B=randn(4, 5), k=ints(0)),
         lambda t: torch.where(t.A.to(torch.int64) == t.k, t.A, t.B),
         note="int64 operands: Cast truncates toward zero, as torch's to(int64)"),
    # -- ArgMax and ArgMin (int64 indices, no gradient of their own) of a parameter,
    #    choosing what Gather reads of it: training goes through the Gather alone
    Case("ArgMax_Gather_columns", "ArgMax",
         [N("ArgMax", ["W"], ["i"], axis=1, keepdims=0), N("Gather", ["W", "i"], axis=1)],
         dict(W=distinct(3, 5)),
         lambda t: t.W[:, torch.argmax(t.W, 1)]),
    Case("ArgMin_last_index_Gather", "ArgMin",
         [Const("A", "A"), N("ArgMin", ["A"], ["i"], axis=0, keepdims=0, select_last_index=1),
          N("Gather", ["B", "i"])],
         dict(B=randn(4, 3)),
         lambda t: t.B[(t.A.shape[0] - 1) - torch.argmin(torch.flip(t.A, [0]), 0)],
         consts=dict(A=lambda r: np.round(r.standard_normal((4, 6))).astype(np.float32)),
         note="A rounded to integers: its minima tie, and the last of them is chosen"),

    # -- reductions: axes as an attribute (opset 17) or an input (ReduceSum 13,
    #    the others 18), keepdims, noop_with_empty_axes
    Case("ReduceSum_axes_input_keepdims", "ReduceSum", [N("ReduceSum", ["X", "axes"])],
         dict(X=randn(2, 3, 4), axes=ints(1)),
         lambda t: t.X.sum(1, keepdim=True)),
    Case("ReduceSum_two_axes_keepdims0", "ReduceSum",
         [N("ReduceSum", ["X", "axes"], keepdims=0)],
         dict(X=randn(2, 3, 4), axes=ints(0, -1)),
         lambda t: t.X.sum((0, 2))),
    Case("ReduceSum_all", "ReduceSum", [N("ReduceSum", ["X"])],
         dict(X=randn(2, 3, 4)), lambda t: t.X.sum().reshape(1, 1, 1)),
    Case("ReduceSum_noop_empty_axes", "ReduceSum",
         [N("ReduceSum", ["X"], noop_with_empty_axes=1)],
         dict(X=randn(2, 3)), lambda t: t.X),
    Case("ReduceMean_axes_attribute", "ReduceMean", [N("ReduceMean", ["X"], axes=[-1])],
         dict(X=randn(2, 3, 4)), lambda t: t.X.mean(-1, keepdim=True)),
    Case("ReduceMean_two_axes_keepdims0", "ReduceMean",
         [N("ReduceMean", ["X"], axes=[1, 2], keepdims=0)],
         dict(X=randn(2, 3, 4)), lambda t: t.X.mean((1, 2))),
    Case("ReduceMean_axes_input_opset18", "ReduceMean", [N("ReduceMean", ["X", "axes"])],
         dict(X=randn(3, 4, 2), axes=ints(0, 2)),
         lambda t: t.X.mean((0, 2), keepdim=True), opset=18),
    Case("ReduceMax_axis_keepdims0", "ReduceMax", [N("ReduceMax", ["X"], axes=[1], keepdims=0)],
         dict(X=distinct(2, 5, 3)), lambda t: t.X.amax(1)),
    Case("ReduceMax_ties", "ReduceMax", [N("ReduceMax", ["X"], axes=[1])],
         dict(X=lambda r: np.round(r.standard_normal((3, 6)) * 1.5).astype(np.float32)),
         lambda t: t.X.amax(1, keepdim=True),
         note="values rounded to integers: maxima tie, and amax shares the gradient"),
    Case("ReduceMin_axes_input_opset18", "ReduceMin", [N("ReduceMin", ["X", "axes"])],
         dict(X=distinct(2, 3, 4), axes=ints(0, 2)),
         lambda t: t.X.amin((0, 2), keepdim=True), opset=18),
    Case("ReduceMin_axis_keepdims0", "ReduceMin",
         [N("ReduceMin", ["X"], axes=[-1], keepdims=0)],
         dict(X=distinct(3, 4)), lambda t: t.X.amin(-1)),

    # -- CumSum: the axis a constant input (int64 or int32); its gradient is
    #    CumSum of dy the other way, exclusive as the forward
    Case("CumSum_axis1", "CumSum", [N("CumSum", ["W", "axis"])],
         dict(W=randn(2, 5, 3), axis=scalar(1, np.int64)),
         lambda t: torch.cumsum(t.W, 1)),
    Case("CumSum_exclusive_last_axis", "CumSum", [N("CumSum", ["W", "axis"], exclusive=1)],
         dict(W=randn(3, 6), axis=scalar(-1, np.int64)),
         lambda t: F.pad(torch.cumsum(t.W, -1)[:, :-1], (1, 0))),
    Case("CumSum_reverse_axis0_int32", "CumSum", [N("CumSum", ["W", "axis"], reverse=1)],
         dict(W=randn(4, 3), axis=scalar(0, np.int32)),
         lambda t: torch.flip(torch.cumsum(torch.flip(t.W, [0]), 0), [0])),
    Case("CumSum_reverse_exclusive", "CumSum",
         [N("CumSum", ["W", "axis"], exclusive=1, reverse=1)],
         dict(W=randn(2, 7), axis=scalar(1, np.int64)),
         lambda t: F.pad(torch.flip(torch.cumsum(torch.flip(t.W, [1]), 1), [1])[:, 1:], (0, 1))),

    # -- TopK: K a constant input (opset 10+) or the attribute k (before); the
    #    gradient reaches W through Values (distinct values: no ties)
    Case("TopK_largest_axis1", "TopK", [N("TopK", ["W", "K"], ["y", "i"], axis=1)],
         dict(W=distinct(3, 6), K=ints(3)),
         lambda t: torch.topk(t.W, 3, dim=1).values),
    Case("TopK_smallest_negative_axis", "TopK",
         [N("TopK", ["W", "K"], ["y", "i"], axis=-3, largest=0)],
         dict(W=distinct(5, 2, 3), K=ints(2)),
         lambda t: torch.topk(t.W, 2, dim=0, largest=False).values),
    Case("TopK_values_plus_indices", "TopK",
         [N("TopK", ["W", "K"], ["v", "i"]), N("Cast", ["i"], ["c"], to=TensorProto.FLOAT),
          N("Add", ["v", "c"])],
         dict(W=distinct(4, 7), K=ints(7)),
         lambda t: torch.topk(t.W, 7).values + torch.topk(t.W, 7).indices.double(),
         note="the Indices output read as numbers: K the whole axis, a full sort"),
    Case("TopK_ties_lower_index_first", "TopK",
         [N("TopK", ["W", "K"], ["v", "i"], axis=0), N("Cast", ["i"], ["c"], to=TensorProto.FLOAT),
          N("Add", ["v", "c"])],
         dict(W=lambda r: np.round(r.standard_normal((6, 4))).astype(np.float32), K=ints(4)),
         lambda t: topk_stable(t.W, 4, 0, True),
         note="W rounded to integers: ties, which go to the lower index (ONNX's rule), "
              "so dW lands where torch's stable sort puts them"),
    Case("TopK_smallest_ties", "TopK",
         [N("TopK", ["W", "K"], ["v", "i"], largest=0),
          N("Cast", ["i"], ["c"], to=TensorProto.FLOAT), N("Add", ["v", "c"])],
         dict(W=lambda r: np.round(r.standard_normal((3, 8))).astype(np.float32), K=ints(5)),
         lambda t: topk_stable(t.W, 5, -1, False),
         note="W rounded to integers: ties to the lower index"),
    Case("TopK_attribute_k_opset9", "TopK", [N("TopK", ["W"], ["y", "i"], k=2)],
         dict(W=distinct(3, 5)),
         lambda t: torch.topk(t.W, 2).values, opset=9),

    # -- OneHot: depth a constant; values (off, on) trained, the indices (negative
    #    ones count from depth, those out of range give an all-off line) not
    Case("OneHot_values_axis1", "OneHot",
         [N("OneHot", ["I", "depth", "V"], axis=1)],
         dict(V=randn(2), I=ints(0, 3, -1, 4, -5, 2, 9, -7, shape=(2, 4)),
              depth=scalar(5, np.int64)),
         lambda t: one_hot_ref(t.I, 5, t.V, 1)),
    Case("OneHot_float_indices_last_axis", "OneHot",
         [Const("I", "I"), N("OneHot", ["I", "depth", "V"])],
         dict(V=randn(2), depth=scalar(4, np.int64)),
         lambda t: one_hot_ref(torch.trunc(t.I).long(), 4, t.V, -1),
         consts=dict(I=lambda r: np.array([[1.7, -2.2, 3.9], [4.0, -0.5, -4.9]], np.float32)),
         note="float indices truncated toward zero, as ONNX casts them to int64"),

    # -- Trilu: the upper or lower triangle of the last two dimensions, k a constant
    Case("Trilu_upper", "Trilu", [N("Trilu", ["W"])],
         dict(W=randn(2, 4, 5)), lambda t: torch.triu(t.W)),
    Case("Trilu_lower_k_negative", "Trilu", [N("Trilu", ["W", "k"], upper=0)],
         dict(W=randn(3, 5, 4), k=scalar(-1, np.int64)), lambda t: torch.tril(t.W, -1)),
    Case("Trilu_upper_k_positive", "Trilu", [N("Trilu", ["W", "k"], upper=1)],
         dict(W=randn(4, 6), k=scalar(2, np.int64)), lambda t: torch.triu(t.W, 2)),

    # -- Expand and Tile
    Case("Expand_rank_and_size", "Expand", [N("Expand", ["X", "shape"])],
         dict(X=randn(3, 1), shape=ints(2, 1, 4)),
         lambda t: t.X.expand(2, 3, 4)),
    Case("Tile_two_dims", "Tile", [N("Tile", ["X", "reps"])],
         dict(X=randn(2, 1, 3), reps=ints(2, 3, 1)),
         lambda t: t.X.repeat(2, 3, 1)),
    Case("Tile_last_dim", "Tile", [N("Tile", ["X", "reps"])],
         dict(X=randn(2, 3), reps=ints(1, 2)),
         lambda t: t.X.repeat(1, 2)),

    # -- Pad: pads (begins, then ends) and the constant as inputs (opset 11+),
    #    as attributes before; F.pad lists (begin, end) from the last dim
    Case("Pad_constant_value", "Pad",
         [Const("v", "v"), N("Pad", ["X", "pads", "v"])],
         dict(X=randn(2, 3, 4), pads=ints(0, 1, 2, 0, 2, 1)),
         lambda t: F.pad(t.X, (2, 1, 1, 2), value=0.5), consts=dict(v=scalar(0.5))),
    Case("Pad_reflect", "Pad", [N("Pad", ["X", "pads"], mode="reflect")],
         dict(X=randn(2, 2, 4, 5), pads=ints(0, 0, 2, 1, 0, 0, 3, 4)),
         lambda t: F.pad(t.X, (1, 4, 2, 3), mode="reflect")),
    Case("Pad_edge", "Pad", [N("Pad", ["X", "pads"], mode="edge")],
         dict(X=randn(2, 2, 3, 4), pads=ints(0, 0, 1, 2, 0, 0, 3, 1)),
         lambda t: F.pad(t.X, (2, 1, 1, 3), mode="replicate")),
    Case("Pad_negative_crops", "Pad", [N("Pad", ["X", "pads"])],
         dict(X=randn(2, 5, 4), pads=ints(0, -1, 2, 0, -2, -1)),
         lambda t: F.pad(t.X, (2, -1, -1, -2))),
    Case("Pad_attributes_opset2", "Pad",
         [N("Pad", ["X"], pads=[0, 2, 0, 1], value=-1.5)],
         dict(X=randn(3, 4)), lambda t: F.pad(t.X, (2, 1), value=-1.5), opset=2),
    Case("Pad_axes_input_opset18", "Pad",
         [N("Pad", ["X", "pads", "", "axes"], mode="reflect")],
         dict(X=randn(2, 3, 4), pads=ints(1, 2, 1, 0), axes=ints(-1, 1)),
         lambda t: F.pad(t.X, (1, 1, 2, 0), mode="reflect"), opset=18),

    # -- AveragePool (2-D): pads, count_include_pad, ceil_mode
    Case("AveragePool_2x2", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[2, 2], strides=[2, 2])],
         dict(X=randn(2, 2, 4, 6)), lambda t: F.avg_pool2d(t.X, 2, 2)),
    Case("AveragePool_pads_exclude", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
         dict(X=randn(2, 2, 5, 6)),
         lambda t: F.avg_pool2d(t.X, 3, 2, 1, count_include_pad=False)),
    Case("AveragePool_pads_include", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
            count_include_pad=1)],
         dict(X=randn(2, 2, 5, 6)),
         lambda t: F.avg_pool2d(t.X, 3, 2, 1, count_include_pad=True)),
    Case("AveragePool_ceil_mode", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 0],
            ceil_mode=1, count_include_pad=1)],
         dict(X=randn(2, 2, 6, 5)),
         lambda t: F.avg_pool2d(t.X, (3, 2), 2, (1, 0), ceil_mode=True,
                                count_include_pad=True)),
    Case("AveragePool_ceil_mode_exclude", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
         dict(X=randn(2, 2, 5, 5)),
         lambda t: F.avg_pool2d(t.X, 2, 2, ceil_mode=True, count_include_pad=False)),
    Case("AveragePool_asymmetric_pads", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[2, 3], pads=[0, 1, 1, 0],
            count_include_pad=1)],
         dict(X=randn(2, 2, 4, 5)),
         lambda t: F.avg_pool2d(F.pad(t.X, (1, 0, 0, 1)), (2, 3), 1)),

    # -- ConvTranspose (2-D): X, W (C_in, C_out/group, kh, kw) and B are parameters
    Case("ConvTranspose_basic", "ConvTranspose", [N("ConvTranspose", ["X", "W"])],
         dict(X=randn(2, 3, 4, 4), W=randn(3, 2, 3, 3)),
         lambda t: F.conv_transpose2d(t.X, t.W)),
    Case("ConvTranspose_stride2_output_padding_bias", "ConvTranspose",
         [N("ConvTranspose", ["X", "W", "B"], strides=[2, 2], pads=[1, 1, 1, 1],
            output_padding=[1, 1])],
         dict(X=randn(2, 3, 3, 4), W=randn(3, 2, 3, 3), B=randn(2)),
         lambda t: F.conv_transpose2d(t.X, t.W, t.B, stride=2, padding=1, output_padding=1)),
    Case("ConvTranspose_groups_dilation", "ConvTranspose",
         [N("ConvTranspose", ["X", "W", "B"], group=2, dilations=[2, 1], strides=[1, 2])],
         dict(X=randn(2, 4, 3, 3), W=randn(4, 3, 3, 2), B=randn(6)),
         lambda t: F.conv_transpose2d(t.X, t.W, t.B, stride=(1, 2), groups=2,
                                      dilation=(2, 1))),
    Case("ConvTranspose_asymmetric_pads", "ConvTranspose",
         [N("ConvTranspose", ["X", "W"], strides=[2, 2], pads=[1, 0, 0, 1])],
         dict(X=randn(2, 2, 3, 3), W=randn(2, 3, 2, 3)),
         lambda t: F.conv_transpose2d(t.X, t.W, stride=2)[:, :, 1:, :-1],
         note="pads cut the full output: 1 row at the top, 1 column at the right"),

    # -- 3-D (video, volumes): Conv, ConvTranspose, MaxPool, AveragePool,
    #    BatchNormalization and GlobalAveragePool over (N, C, D, H, W)
    Case("Conv3d_bias", "Conv", [N("Conv", ["X", "W", "B"], kernel_shape=[3, 3, 3])],
         dict(X=randn(2, 2, 4, 5, 5), W=randn(3, 2, 3, 3, 3), B=randn(3)),
         lambda t: F.conv3d(t.X, t.W, t.B)),
    Case("Conv3d_stride_pad_dilation", "Conv",
         [N("Conv", ["X", "W", "B"], strides=[2, 1, 2], pads=[1, 0, 1, 1, 0, 1],
            dilations=[1, 2, 1])],
         dict(X=randn(2, 2, 5, 6, 5), W=randn(3, 2, 3, 2, 3), B=randn(3)),
         lambda t: F.conv3d(t.X, t.W, t.B, stride=(2, 1, 2), padding=(1, 0, 1),
                            dilation=(1, 2, 1))),
    Case("Conv3d_groups_asymmetric_pads", "Conv",
         [N("Conv", ["X", "W"], group=2, pads=[1, 0, 1, 0, 1, 1])],
         dict(X=randn(2, 4, 4, 4, 5), W=randn(4, 2, 2, 3, 3)),
         lambda t: F.conv3d(F.pad(t.X, (1, 1, 0, 1, 1, 0)), t.W, groups=2),
         note="pads (d, h, w begins, then ends); F.pad takes (w, h, d) pairs"),
    Case("Conv3d_auto_pad_same_upper", "Conv",
         [N("Conv", ["X", "W"], auto_pad="SAME_UPPER", strides=[2, 2, 2])],
         dict(X=randn(2, 2, 5, 6, 6), W=randn(3, 2, 3, 3, 3)),
         lambda t: F.conv3d(F.pad(t.X, (0, 1, 0, 1, 1, 1)), t.W, stride=2)),
    Case("ConvTranspose3d_stride_pads_output_padding", "ConvTranspose",
         [N("ConvTranspose", ["X", "W", "B"], strides=[2, 1, 2], pads=[1, 0, 1, 1, 0, 1],
            output_padding=[1, 0, 1])],
         dict(X=randn(2, 3, 3, 3, 4), W=randn(3, 2, 3, 3, 2), B=randn(2)),
         lambda t: F.conv_transpose3d(t.X, t.W, t.B, stride=(2, 1, 2), padding=(1, 0, 1),
                                      output_padding=(1, 0, 1))),
    Case("ConvTranspose3d_groups_dilation", "ConvTranspose",
         [N("ConvTranspose", ["X", "W"], group=2, dilations=[1, 2, 1])],
         dict(X=randn(2, 4, 3, 3, 3), W=randn(4, 1, 2, 2, 2)),
         lambda t: F.conv_transpose3d(t.X, t.W, groups=2, dilation=(1, 2, 1))),
    Case("MaxPool3d_2x2x2", "MaxPool",
         [N("MaxPool", ["X"], kernel_shape=[2, 2, 2], strides=[2, 2, 2])],
         dict(X=distinct(2, 2, 4, 6, 6)),
         lambda t: F.max_pool3d(t.X, 2, 2)),
    Case("MaxPool3d_overlap_pads", "MaxPool",
         [N("MaxPool", ["X"], kernel_shape=[3, 3, 3], strides=[2, 2, 2],
            pads=[1, 1, 1, 1, 1, 1])],
         dict(X=distinct(2, 2, 5, 6, 5)),
         lambda t: F.max_pool3d(t.X, 3, 2, padding=1)),
    Case("MaxPool3d_dilation_ceil_mode", "MaxPool",
         [N("MaxPool", ["X"], kernel_shape=[2, 2, 2], dilations=[2, 1, 1],
            strides=[1, 2, 2], ceil_mode=1)],
         dict(X=distinct(2, 2, 5, 5, 5)),
         lambda t: F.max_pool3d(t.X, 2, (1, 2, 2), dilation=(2, 1, 1), ceil_mode=True)),
    Case("AveragePool3d_2x2x2", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[2, 2, 2], strides=[2, 2, 2])],
         dict(X=randn(2, 2, 4, 4, 6)), lambda t: F.avg_pool3d(t.X, 2, 2)),
    Case("AveragePool3d_pads_exclude", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[3, 3, 3], strides=[2, 2, 2],
            pads=[1, 1, 1, 1, 1, 1])],
         dict(X=randn(2, 2, 5, 4, 5)),
         lambda t: F.avg_pool3d(t.X, 3, 2, 1, count_include_pad=False)),
    Case("AveragePool3d_pads_include_ceil_mode", "AveragePool",
         [N("AveragePool", ["X"], kernel_shape=[3, 2, 3], strides=[2, 2, 2],
            pads=[1, 0, 1, 1, 0, 1], ceil_mode=1, count_include_pad=1)],
         dict(X=randn(2, 2, 6, 5, 6)),
         lambda t: F.avg_pool3d(t.X, (3, 2, 3), 2, (1, 0, 1), ceil_mode=True,
                                count_include_pad=True)),
    Case("BatchNormalization_training_5d", "BatchNormalization", [bn_node()],
         dict(X=randn(4, 3, 2, 3, 2), scale=randn(3), B=randn(3), mean=randn(3),
              var=pos(3)),
         lambda t: bn(t), stats=("mean", "var")),
    Case("GlobalAveragePool_5d", "GlobalAveragePool", [N("GlobalAveragePool", ["X"])],
         dict(X=randn(2, 3, 2, 3, 4)),
         lambda t: t.X.mean(dim=(2, 3, 4), keepdim=True)),
    Case("GlobalMaxPool_4d", "GlobalMaxPool", [N("GlobalMaxPool", ["X"])],
         dict(X=distinct(2, 3, 4, 5)),
         lambda t: F.adaptive_max_pool2d(t.X, 1)),
    Case("GlobalMaxPool_5d", "GlobalMaxPool", [N("GlobalMaxPool", ["X"])],
         dict(X=distinct(2, 3, 2, 3, 4)),
         lambda t: F.adaptive_max_pool3d(t.X, 1)),

    # -- InstanceNormalization
    Case("InstanceNormalization_4d", "InstanceNormalization",
         [N("InstanceNormalization", ["X", "scale", "B"])],
         dict(X=randn(2, 3, 4, 5), scale=randn(3), B=randn(3)),
         lambda t: F.instance_norm(t.X, weight=t.scale, bias=t.B, eps=1e-5)),
    Case("InstanceNormalization_3d_epsilon", "InstanceNormalization",
         [N("InstanceNormalization", ["X", "scale", "B"], epsilon=1e-3)],
         dict(X=randn(2, 4, 6), scale=randn(4), B=randn(4)),
         lambda t: F.instance_norm(t.X, weight=t.scale, bias=t.B, eps=1e-3)),
    Case("GroupNorm_as_exported", "InstanceNormalization",
         [N("Reshape", ["X", "grouped"], ["xg"]),
          N("InstanceNormalization", ["xg", "s", "b"], ["ng"]),
          N("Reshape", ["ng", "back"], ["n"]), N("Mul", ["n", "gamma"], ["m"]),
          N("Add", ["m", "beta"])],
         dict(X=randn(2, 4, 3, 3), grouped=ints(0, 2, -1), s=randn(2), b=randn(2),
              back=ints(2, 4, 3, 3), gamma=randn(4, 1, 1), beta=randn(4, 1, 1)),
         lambda t: F.instance_norm(t.X.reshape(2, 2, -1), weight=t.s, bias=t.b)
         .reshape(2, 4, 3, 3) * t.gamma + t.beta,
         note="nn.GroupNorm(2, 4) as PyTorch exports it before opset 18"),

    # -- Resize: each coordinate_transformation_mode PyTorch exports; Upsample
    Case("Resize_linear_align_corners", "Resize",
         [N("Resize", ["X", "", "", "sizes"], mode="linear",
            coordinate_transformation_mode="align_corners")],
         dict(X=randn(2, 2, 3, 4), sizes=ints(2, 2, 5, 7)),
         lambda t: F.interpolate(t.X, size=(5, 7), mode="bilinear", align_corners=True)),
    Case("Resize_linear_pytorch_half_pixel_down", "Resize",
         [Const("scales", "scales"),
          N("Resize", ["X", "", "scales"], mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel")],
         dict(X=randn(2, 2, 6, 4)),
         lambda t: F.interpolate(t.X, scale_factor=0.5, mode="bilinear", align_corners=False),
         consts=dict(scales=lambda r: np.array([1, 1, 0.5, 0.5], np.float32))),
    Case("Resize_linear_asymmetric", "Resize",
         [N("Resize", ["X", "", "", "sizes"], mode="linear",
            coordinate_transformation_mode="asymmetric")],
         dict(X=randn(2, 2, 3, 4), sizes=ints(2, 2, 5, 7)),
         lambda t: asymmetric_linear(t.X, 5, 7),
         note="no PyTorch mode samples at out/scale: grid_sample at those points"),
    Case("Resize_nearest_sizes_non_integer", "Resize",
         [N("Resize", ["X", "", "", "sizes"], mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
         dict(X=randn(2, 2, 3, 4), sizes=ints(2, 2, 5, 7)),
         lambda t: F.interpolate(t.X, size=(5, 7), mode="nearest")),
    Case("Resize_nearest_exact", "Resize",
         [N("Resize", ["X", "", "", "sizes"], mode="nearest",
            coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil")],
         dict(X=randn(2, 2, 3, 4), sizes=ints(2, 2, 5, 7)),
         lambda t: F.interpolate(t.X, size=(5, 7), mode="nearest-exact")),
    Case("Upsample_nearest_opset9", "Upsample",
         [Const("scales", "scales"), N("Upsample", ["X", "scales"])],
         dict(X=randn(2, 2, 3, 2)),
         lambda t: F.interpolate(t.X, scale_factor=(2, 3), mode="nearest"),
         consts=dict(scales=lambda r: np.array([1, 1, 2, 3], np.float32)), opset=9),
    Case("Upsample_linear_opset9", "Upsample",
         [Const("scales", "scales"), N("Upsample", ["X", "scales"], mode="linear")],
         dict(X=randn(2, 2, 3, 4)),
         lambda t: asymmetric_linear(t.X, 6, 8),
         consts=dict(scales=lambda r: np.array([1, 1, 2, 2], np.float32)), opset=9,
         note="Upsample samples at out/scale: grid_sample at those points"),
    Case("Upsample_scales_attribute_opset7", "Upsample",
         [N("Upsample", ["X"], scales=[1.0, 1.0, 2.0, 2.0])],
         dict(X=randn(2, 2, 2, 3)),
         lambda t: F.interpolate(t.X, scale_factor=2, mode="nearest"), opset=7),

    # -- LSTM, GRU and RNN, lowered into per-step MatMuls and gates
    #    (front/rnn.c), against PyTorch's own recurrent kernels (what
    #    nn.LSTM, nn.GRU and nn.RNN call) given the ONNX weights with the
    #    gates reordered
    Case("LSTM_bias_initial_state", "LSTM",
         [N("LSTM", ["X", "W", "R", "B", "", "H0", "C0"], ("Y", "Y_h", "Y_c"), hidden_size=4)],
         dict(X=randn(5, 2, 3), W=randn(1, 16, 3), R=randn(1, 16, 4), B=randn(1, 32),
              H0=randn(1, 2, 4), C0=randn(1, 2, 4)),
         lambda t: torch._VF.lstm(t.X, (t.H0, t.C0), rnn_weights(t, 4, 4, "LSTM"), True, 1,
                                  0.0, True, False, False)[0].unsqueeze(1)),
    Case("LSTM_bidirectional_batch_first_cell", "LSTM",
         [N("LSTM", ["X", "W", "R", "B"], ("Y", "Y_h", "Y_c"), hidden_size=3,
            direction="bidirectional", layout=1)],
         dict(X=randn(2, 4, 3), W=randn(2, 12, 3), R=randn(2, 12, 3), B=randn(2, 24)),
         lambda t: torch._VF.lstm(t.X, (torch.zeros(2, 2, 3, dtype=t.X.dtype),) * 2,
                                  rnn_weights(t, 3, 4, "LSTM", 2), True, 1, 0.0, True, True,
                                  True)[2].transpose(0, 1), out="Y_c"),
    Case("GRU_reverse", "GRU",
         [N("GRU", ["X", "W", "R", "B", "", "H0"], ("Y", "Y_h"), hidden_size=4,
            direction="reverse", linear_before_reset=1)],
         dict(X=randn(5, 2, 3), W=randn(1, 12, 3), R=randn(1, 12, 4), B=randn(1, 24),
              H0=randn(1, 2, 4)),
         lambda t: torch._VF.gru(t.X.flip(0), t.H0, rnn_weights(t, 4, 3, "GRU"), True, 1, 0.0,
                                 True, False, False)[0].flip(0).unsqueeze(1)),
    Case("RNN_relu_last_state", "RNN",
         [N("RNN", ["X", "W", "R", "B"], ("Y", "Y_h"), hidden_size=4, activations=["Relu"])],
         dict(X=randn(5, 2, 3), W=randn(1, 4, 3), R=randn(1, 4, 4), B=randn(1, 8)),
         lambda t: torch._VF.rnn_relu(t.X, torch.zeros(1, 2, 4, dtype=t.X.dtype),
                                      rnn_weights(t, 4, 1, "RNN"), True, 1, 0.0, True, False,
                                      False)[1], out="Y_h"),

    # -- Einsum, lowered to ReduceSum, Transpose, Reshape and MatMul
    Case("Einsum_batched_matmul", "Einsum", [N("Einsum", ["A", "B"], equation="bij,bjk->bik")],
         dict(A=randn(2, 3, 4), B=randn(2, 4, 5)),
         lambda t: torch.einsum("bij,bjk->bik", t.A, t.B)),
    Case("Einsum_attention_scores", "Einsum",
         [N("Einsum", ["Q", "K"], equation="bhqd,bhkd->bhqk")],
         dict(Q=randn(2, 2, 3, 4), K=randn(2, 2, 5, 4)),
         lambda t: torch.einsum("bhqd,bhkd->bhqk", t.Q, t.K)),
    Case("Einsum_attention_values_transposed_out", "Einsum",
         [N("Einsum", ["P", "V"], equation="bhqk,bhkd->bqhd")],
         dict(P=randn(2, 2, 3, 5), V=randn(2, 2, 5, 4)),
         lambda t: torch.einsum("bhqk,bhkd->bqhd", t.P, t.V)),
    Case("Einsum_broadcast_weight", "Einsum",
         [N("Einsum", ["X", "W"], equation="btc, cd -> btd")],
         dict(X=randn(2, 3, 4), W=randn(4, 5)),
         lambda t: torch.einsum("btc,cd->btd", t.X, t.W)),
    Case("Einsum_row_dot", "Einsum", [N("Einsum", ["A", "B"], equation="bi,bi->b")],
         dict(A=randn(3, 4), B=randn(3, 4)),
         lambda t: torch.einsum("bi,bi->b", t.A, t.B)),
    Case("Einsum_outer_product", "Einsum", [N("Einsum", ["A", "B"], equation="i,j->ij")],
         dict(A=randn(3), B=randn(4)),
         lambda t: torch.einsum("i,j->ij", t.A, t.B)),
    Case("Einsum_sum_only_in_one_operand", "Einsum",
         [N("Einsum", ["A", "B"], equation="bij,bjk->bk")],
         dict(A=randn(2, 3, 4), B=randn(2, 4, 5)),
         lambda t: torch.einsum("bij,bjk->bk", t.A, t.B)),
    Case("Einsum_implicit_output", "Einsum", [N("Einsum", ["A", "B"], equation="ij,jk")],
         dict(A=randn(3, 4), B=randn(4, 5)),
         lambda t: torch.einsum("ij,jk", t.A, t.B)),
    Case("Einsum_transpose", "Einsum", [N("Einsum", ["X"], equation="ijk->kij")],
         dict(X=randn(2, 3, 4)), lambda t: torch.einsum("ijk->kij", t.X)),
    Case("Einsum_sum_axis", "Einsum", [N("Einsum", ["X"], equation="bij->bj")],
         dict(X=randn(2, 3, 4)), lambda t: torch.einsum("bij->bj", t.X)),

    # -- the compositions ONNX defines (front/composite.c): the norms and
    #    log-sums as Abs, Mul, ReduceSum, Sqrt, Log, Exp and ReduceMax, and
    #    DepthToSpace and SpaceToDepth as Reshape, Transpose, Reshape
    Case("ReduceL1_axis", "ReduceL1", [N("ReduceL1", ["X"], axes=[1])],
         dict(X=away(2, 3, 4)), lambda t: torch.norm(t.X, p=1, dim=1, keepdim=True),
         note="values away from zero: Abs's kink"),
    Case("ReduceL1_axes_input_keepdims0_opset18", "ReduceL1",
         [N("ReduceL1", ["X", "axes"], keepdims=0)],
         dict(X=away(3, 2, 4), axes=ints(-1, 0)),
         lambda t: torch.norm(t.X, p=1, dim=(0, 2)), opset=18),
    Case("ReduceL2_axis_keepdims0", "ReduceL2", [N("ReduceL2", ["X"], axes=[-1], keepdims=0)],
         dict(X=randn(3, 5)), lambda t: torch.norm(t.X, p=2, dim=-1)),
    Case("ReduceL2_all", "ReduceL2", [N("ReduceL2", ["X"])],
         dict(X=randn(2, 3, 4)), lambda t: torch.norm(t.X, p=2).reshape(1, 1, 1)),
    Case("ReduceSumSquare_two_axes", "ReduceSumSquare",
         [N("ReduceSumSquare", ["X"], axes=[0, 2])],
         dict(X=randn(2, 3, 4)), lambda t: torch.sum(t.X * t.X, (0, 2), keepdim=True)),
    Case("ReduceSumSquare_noop_empty_axes_opset18", "ReduceSumSquare",
         [N("ReduceSumSquare", ["X"], noop_with_empty_axes=1)],
         dict(X=randn(3, 4)), lambda t: t.X * t.X, opset=18,
         note="no axes and noop_with_empty_axes: the square, nothing summed"),
    Case("ReduceLogSum_two_axes_keepdims0", "ReduceLogSum",
         [N("ReduceLogSum", ["X"], axes=[1, 2], keepdims=0)],
         dict(X=pos(2, 3, 4)), lambda t: torch.log(torch.sum(t.X, (1, 2)))),
    Case("ReduceLogSumExp_axis", "ReduceLogSumExp", [N("ReduceLogSumExp", ["X"], axes=[1])],
         dict(X=spread(2, 5, 3)), lambda t: torch.logsumexp(t.X, 1, keepdim=True)),
    Case("ReduceLogSumExp_large_keepdims0", "ReduceLogSumExp",
         [N("ReduceLogSumExp", ["X"], axes=[-1], keepdims=0)],
         dict(X=spread(4, 6, scale=60.0)), lambda t: torch.logsumexp(t.X, -1),
         note="values near +-100: exp of them overflows float32 unless the maximum goes first"),
    Case("ReduceLogSumExp_ties", "ReduceLogSumExp", [N("ReduceLogSumExp", ["X"], axes=[1])],
         dict(X=lambda r: np.round(r.standard_normal((3, 6)) * 1.5).astype(np.float32)),
         lambda t: torch.logsumexp(t.X, 1, keepdim=True),
         note="maxima tie: ReduceMax's share of the gradient cancels whichever it takes"),
    Case("ReduceLogSumExp_axes_input_opset18", "ReduceLogSumExp",
         [N("ReduceLogSumExp", ["X", "axes"])],
         dict(X=spread(2, 3, 4), axes=ints(0, 2)),
         lambda t: torch.logsumexp(t.X, (0, 2), keepdim=True), opset=18),
    Case("DepthToSpace_CRD", "DepthToSpace",
         [N("DepthToSpace", ["X"], blocksize=2, mode="CRD")],
         dict(X=randn(2, 12, 2, 3)), lambda t: F.pixel_shuffle(t.X, 2)),
    Case("DepthToSpace_DCR", "DepthToSpace", [N("DepthToSpace", ["X"], blocksize=2)],
         dict(X=randn(2, 12, 2, 3)),
         lambda t: t.X.reshape(2, 2, 2, 3, 2, 3).permute(0, 3, 4, 1, 5, 2).reshape(2, 3, 4, 6),
         note="the default mode, as the ONNX specification writes it"),
    Case("DepthToSpace_DCR_blocksize3", "DepthToSpace",
         [N("DepthToSpace", ["X"], blocksize=3, mode="DCR")],
         dict(X=randn(2, 18, 2, 2)),
         lambda t: F.pixel_shuffle(t.X.reshape(2, 9, 2, 2, 2).transpose(1, 2).reshape(2, 18, 2, 2),
                                   3),
         note="DCR is pixel_shuffle (CRD) of the channels regrouped block-major"),
    Case("SpaceToDepth", "SpaceToDepth", [N("SpaceToDepth", ["X"], blocksize=2)],
         dict(X=randn(2, 3, 4, 6)),
         lambda t: F.pixel_unshuffle(t.X, 2).reshape(2, 3, 4, 2, 3).transpose(1, 2)
         .reshape(2, 12, 2, 3),
         note="ONNX orders the channels block-major (the inverse of DCR); pixel_unshuffle "
              "channel-major (the inverse of CRD)"),
]
