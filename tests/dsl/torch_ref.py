#!/usr/bin/python3
"""PyTorch reference for a DSL model: runs its --emit-onnx file in PyTorch.

The ONNX graph that `mpcc model.mp --emit-onnx` wrote is interpreted node by
node with torch operations (autograd records them), its initializers are
the parameters (BatchNormalization's running statistics are buffers), and
the model's own SoftmaxCrossEntropyLoss is the loss. So PyTorch trains
exactly the DSL model, from the same initial weights, and writes what
tests/train/compare_train.py checks a generated trainer against:

  x.npy, y.npy   N = K*B rows: float32 standard normal inputs (or int64 ids
                 in [0, --int-high) for an integer input) and int64 labels in
                 [0, --classes), numpy.random.default_rng(--seed)
  losses.npy     float64 [K]: step i's loss before step i's update
  final.npz      every initializer after K steps, by name

One step: loss on rows i*B .. i*B+B-1, backward, torch.optim.SGD (lr,
momentum), zero_grad. BatchNorm updates its running statistics as ONNX says
(running = momentum * running + (1 - momentum) * batch statistic, the
variance unbiased, as PyTorch).

Run: /usr/bin/python3 tests/dsl/torch_ref.py model.onnx --out DIR --steps K
         --batch B --classes C [--int-high V] [--lr F] [--momentum F] [--seed S]
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import numpy_helper  # noqa: E402

DTYPES = {1: np.float32, 7: np.int64, 6: np.int32, 9: np.bool_, 11: np.float64}


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def pads2(p):
    if p[0] != p[2] or p[1] != p[3]:
        raise SystemExit("torch_ref: asymmetric pads %s" % p)
    return (p[0], p[1])


def recurrent(op, x, a):
    """ONNX LSTM or GRU (layout 1, one direction, as the DSL's lstm and gru
    write them) run by PyTorch's own kernels (torch._VF.lstm / gru, what
    nn.LSTM and nn.GRU call), their weights the ONNX ones with the gates
    reordered (ONNX LSTM i o f c -> PyTorch i f g o; GRU z r h -> r z n),
    so that autograd carries the gradients back to the ONNX initializers."""
    direction = a.get("direction", b"forward")
    if a.get("layout", 0) != 1 or direction not in (b"forward", "forward") or len(x) > 4:
        raise SystemExit("torch_ref: %s other than the DSL's (layout 1, forward, no "
                         "sequence_lens or initial state)" % op)
    if op == "GRU" and not a.get("linear_before_reset", 0):
        raise SystemExit("torch_ref: PyTorch's GRU has linear_before_reset=1")
    X, W, R = x[0], x[1][0], x[2][0]
    H = a["hidden_size"]
    gates, order = (4, [0, 2, 3, 1]) if op == "LSTM" else (3, [1, 0, 2])

    def torch_order(m):
        return torch.cat([m[k * H:(k + 1) * H] for k in order])
    weights = [torch_order(W), torch_order(R)]
    bias = len(x) > 3 and x[3] is not None
    if bias:
        weights += [torch_order(x[3][0][:gates * H]), torch_order(x[3][0][gates * H:])]
    h0 = torch.zeros(1, X.shape[0], H)
    if op == "LSTM":
        y = torch._VF.lstm(X, (h0, h0), weights, bias, 1, 0.0, True, False, True)[0]
    else:
        y = torch._VF.gru(X, h0, weights, bias, 1, 0.0, True, False, True)[0]
    return [y.unsqueeze(2)]   # ONNX's Y with layout 1: (N, T, directions, H)


def run_node(n, x, a, buffers):
    op = n.op_type
    if op == "Constant":
        return [torch.from_numpy(numpy_helper.to_array(a["value"]).copy())]
    if op == "Gemm":
        A, B = x[0], x[1]
        if a.get("transA", 0):
            A = A.t()
        if a.get("transB", 0):
            B = B.t()
        y = a.get("alpha", 1.0) * (A @ B)
        if len(x) > 2 and x[2] is not None:
            y = y + a.get("beta", 1.0) * x[2]
        return [y]
    if op == "MatMul":
        return [x[0] @ x[1]]
    if op in ("Add", "Sub", "Mul", "Div"):
        return [{"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
                 "Div": torch.div}[op](x[0], x[1])]
    if op == "Neg":
        return [-x[0]]
    if op == "Relu":
        return [F.relu(x[0])]
    if op == "Sigmoid":
        return [torch.sigmoid(x[0])]
    if op == "Tanh":
        return [torch.tanh(x[0])]
    if op == "Erf":
        return [torch.erf(x[0])]
    if op == "Sqrt":
        return [torch.sqrt(x[0])]
    if op == "Exp":
        return [torch.exp(x[0])]
    if op == "Conv":
        k = a["kernel_shape"]
        return [F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None,
                         stride=tuple(a.get("strides", [1] * len(k))),
                         padding=pads2(a.get("pads", [0] * 2 * len(k))),
                         dilation=tuple(a.get("dilations", [1] * len(k))),
                         groups=a.get("group", 1))]
    if op == "BatchNormalization":
        mom = a.get("momentum", 0.9)
        if not a.get("training_mode", 0):
            raise SystemExit("torch_ref: BatchNormalization in inference mode")
        rm, rv = buffers[n.input[3]], buffers[n.input[4]]
        y = F.batch_norm(x[0], rm, rv, x[1], x[2], training=True,
                         momentum=1 - mom, eps=a.get("epsilon", 1e-5))
        return [y, rm, rv]
    if op == "MaxPool":
        return [F.max_pool2d(x[0], tuple(a["kernel_shape"]),
                             stride=tuple(a.get("strides", a["kernel_shape"])),
                             padding=pads2(a.get("pads", [0, 0, 0, 0])))]
    if op == "GlobalAveragePool":
        return [x[0].mean(dim=tuple(range(2, x[0].dim())), keepdim=True)]
    if op == "Flatten":
        ax = a.get("axis", 1)
        return [x[0].reshape(int(np.prod(x[0].shape[:ax])), -1)]
    if op == "Concat":
        return [torch.cat(x, dim=a["axis"])]
    if op == "Slice":
        y = x[0]
        starts, ends = x[1].tolist(), x[2].tolist()
        axes = x[3].tolist() if len(x) > 3 and x[3] is not None else list(range(len(starts)))
        for s, e, ax in zip(starts, ends, axes):
            e = min(e, y.shape[ax])
            y = y.narrow(ax, s, e - s)
        return [y]
    if op == "Gather":
        return [torch.index_select(x[0], a.get("axis", 0), x[1].reshape(-1))
                .reshape(tuple(x[0].shape[:a.get("axis", 0)]) + tuple(x[1].shape)
                         + tuple(x[0].shape[a.get("axis", 0) + 1:]))]
    if op == "LayerNormalization":
        ax = a.get("axis", -1)
        shape = tuple(x[0].shape[ax:])
        return [F.layer_norm(x[0], shape, x[1], x[2] if len(x) > 2 else None,
                             eps=a.get("epsilon", 1e-5))]
    if op == "Reshape":
        shape = [int(v) for v in x[1].tolist()]
        shape = [x[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
        return [x[0].reshape(shape)]
    if op == "Transpose":
        return [x[0].permute(*a["perm"])]
    if op == "Softmax":
        return [F.softmax(x[0], dim=a.get("axis", -1))]
    if op == "ConstantOfShape":
        v = numpy_helper.to_array(a["value"]).reshape(-1)[0] if "value" in a else 0.0
        return [torch.full(tuple(int(d) for d in x[0].tolist()), float(v))]
    if op == "Trilu":
        k = int(x[1].reshape(-1)[0]) if len(x) > 1 else 0
        return [torch.triu(x[0], k) if a.get("upper", 1) else torch.tril(x[0], k)]
    if op == "TopK":
        r = torch.topk(x[0], int(x[1].reshape(-1)[0]), dim=a.get("axis", -1),
                       largest=bool(a.get("largest", 1)))
        return [r.values, r.indices]
    if op == "OneHot":
        depth, i = int(x[1].reshape(-1)[0]), x[0].long()
        i = torch.where(i < 0, i + depth, i)
        hot = F.one_hot(i, depth).to(x[2].dtype)
        y = x[2][0] + (x[2][1] - x[2][0]) * hot
        return [torch.movedim(y, -1, a.get("axis", -1))]
    if op == "Range":
        return [torch.arange(x[0].item(), x[1].item(), x[2].item(), dtype=x[0].dtype)]
    if op in ("LSTM", "GRU"):
        return recurrent(op, x, a)
    if op == "ReduceMean":
        return [x[0].mean(dim=tuple(a["axes"]), keepdim=bool(a.get("keepdims", 1)))]
    if op == "SoftmaxCrossEntropyLoss":
        return [F.cross_entropy(x[0], x[1], ignore_index=a.get("ignore_index", -100))]
    raise SystemExit("torch_ref: op %s is not interpreted" % op)


def forward(model, params, buffers, feeds):
    env = dict(feeds)
    env.update(params)
    env.update(buffers)
    for n in model.graph.node:
        x = [env[i] if i else None for i in n.input]
        while x and x[-1] is None:
            x.pop()
        outs = run_node(n, x, attrs(n), buffers)
        for name, v in zip(n.output, outs):
            if name:
                env[name] = v
    return env


def train(model, args, x, y, feed_of, autocast):
    """K steps from the model's initial weights; under torch.autocast("cpu",
    bfloat16) around each forward when `autocast`. Returns the parameters,
    the buffers and the step losses."""
    g = model.graph
    bn_stats = {n.input[k] for n in g.node if n.op_type == "BatchNormalization"
                for k in (3, 4)}
    params, buffers = {}, {}
    for init in g.initializer:
        v = torch.from_numpy(numpy_helper.to_array(init).copy())
        if init.name in bn_stats:
            buffers[init.name] = v
        else:
            params[init.name] = v.requires_grad_(True)
    opt = torch.optim.SGD(list(params.values()), lr=args.lr, momentum=args.momentum)
    losses = []
    data, labels, loss_name = feed_of
    for step in range(args.steps):
        lo = step * args.batch
        feeds = {data: torch.from_numpy(x[lo:lo + args.batch]),
                 labels: torch.from_numpy(y[lo:lo + args.batch])}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            env = forward(model, params, buffers, feeds)
        loss = env[loss_name].float()
        loss.backward()
        losses.append(float(loss))
        opt.step()
        opt.zero_grad()
        print("step %d loss %.9g%s" % (step, losses[-1], " (autocast)" if autocast else ""))
    return params, buffers, losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--classes", type=int, required=True)
    ap.add_argument("--int-high", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--autocast-check", action="store_true",
                    help="also train under torch.autocast('cpu', bfloat16) and save "
                         "its step losses (losses_autocast.npy)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = onnx.load(args.model)
    onnx.checker.check_model(model, full_check=True)
    g = model.graph
    loss_node = [n for n in g.node if n.op_type == "SoftmaxCrossEntropyLoss"]
    if not loss_node:
        raise SystemExit("torch_ref: the model has no SoftmaxCrossEntropyLoss")
    loss_node = loss_node[0]
    labels = loss_node.input[1]
    inputs = [i for i in g.input if i.name != labels]
    if len(inputs) != 1:
        raise SystemExit("torch_ref: want one data input and the labels")
    inp = [i for i in g.input if i.name == labels][0]
    N = args.steps * args.batch
    rng = np.random.default_rng(args.seed)

    def dims(vi):
        return [d.dim_value if d.HasField("dim_value") else N
                for d in vi.type.tensor_type.shape.dim]
    t = inputs[0].type.tensor_type.elem_type
    if DTYPES[t] == np.float32:
        x = rng.standard_normal(size=dims(inputs[0]), dtype=np.float32)
    else:
        x = rng.integers(0, args.int_high, size=dims(inputs[0]), dtype=np.int64)
    y = rng.integers(0, args.classes, size=dims(inp), dtype=np.int64)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "x.npy"), x)
    np.save(os.path.join(args.out, "y.npy"), y)

    feed_of = (inputs[0].name, labels, loss_node.output[0])
    params, buffers, losses = train(model, args, x, y, feed_of, False)
    np.save(os.path.join(args.out, "losses.npy"), np.array(losses, np.float64))
    if args.autocast_check:
        _, _, amp = train(model, args, x, y, feed_of, True)
        np.save(os.path.join(args.out, "losses_autocast.npy"), np.array(amp, np.float64))
    final = {k: v.detach().numpy() for k, v in list(params.items()) + list(buffers.items())}
    np.savez(os.path.join(args.out, "final.npz"), **final)


if __name__ == "__main__":
    main()
