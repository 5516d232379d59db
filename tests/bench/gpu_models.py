#!/usr/bin/python3
"""Models, data and PyTorch reference losses for tests/bench/gpu_run.sh.

Exports one model to DIR/model.onnx in training mode (TorchScript exporter,
opset 17, no constant folding, symbolic batch axis), and with --rows N
writes N rows of data next to it (DIR/x.npy, DIR/y.npy) from
numpy.random.default_rng(--seed), which the trainers read with --data and
--labels: step i uses rows i*B .. i*B+B-1.

Models (torch.manual_seed(--seed) right before building each):
  cnn       tests/train/ref_train.py's CNN (conv16-BN-ReLU-pool,
            conv32-BN-ReLU-pool, linear), 3x32x32, 10 classes
  resnet50  torchvision.models.resnet50(weights=None, num_classes=--classes,
            zero_init_residual=--zero-init-residual), 3x--size x--size; the
            default init at small images and batches is chaotic (see
            tests/train/ref_train.py), zero_init_residual is not
  gpt       tests/models/export_gpt.py's GPT(--vocab, --d, --heads,
            --layers, --T); input "tokens" (B,T), labels the next tokens

With --ref K it also trains a copy of the model
(same initial weights) with PyTorch for K steps on those rows, as the
trainer reads them (step i: positions i*B .. i*B+B-1, modulo the rows; M = --microbatches micro-batches per step, each its own
BatchNorm statistics, (loss/M).backward(), SGD --lr --momentum), once in
float32 and once in float64, and writes each step's loss before its update,
one per line, to DIR/torch32.txt and DIR/torch64.txt. The float64 run is
the exact-arithmetic yardstick; it runs on the GPU when there is one
(float32 there with TF32 off).

Run:  gpu_models.py MODEL --out DIR [--batch B] [--rows N] [--ref K] ...
"""
import argparse
import os
import sys
import time
import warnings

sys.dont_write_bytecode = True
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
from export_resnet50 import export_training  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)


def build(args):
    """(model, input name, example input shape after the batch axis)."""
    torch.manual_seed(args.seed)
    if args.model == "cnn":
        m = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
        return m, "input", (3, 32, 32)
    if args.model == "resnet50":
        import torchvision
        m = torchvision.models.resnet50(weights=None, num_classes=args.classes,
                                        zero_init_residual=args.zero_init_residual)
        return m, "input", (3, args.size, args.size)
    import export_gpt
    m = export_gpt.GPT(args.vocab, args.d, args.heads, args.layers, args.T)
    return m, "tokens", (args.T,)


def make_data(args, n):
    rng = np.random.default_rng(args.seed)
    if args.model == "gpt":
        seq = rng.integers(0, args.vocab, size=(n, args.T + 1), dtype=np.int64)
        return np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])
    shape = (3, 32, 32) if args.model == "cnn" else (3, args.size, args.size)
    classes = 10 if args.model == "cnn" else args.classes
    x = rng.standard_normal(size=(n,) + shape, dtype=np.float32)
    y = rng.integers(0, classes, size=(n,), dtype=np.int64)
    return x, y


def ce(out, y):
    if out.dim() == 3:   # (B,T,V): classes last (mpcc --class-axis=-1)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return F.cross_entropy(out, y)


def train(model, x, y, args, steps, dtype, dev):
    """Each step's loss before its update, as the generated trainer logs it."""
    model = model.to(dev, dtype).train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    B, M = args.batch, args.microbatches
    mb = B // M
    losses = []
    for s in range(steps):
        total = 0.0
        for j in range(M):
            rows = (s * B + j * mb + np.arange(mb)) % len(x)   # the trainer wraps too
            xb = torch.from_numpy(x[rows]).to(dev)
            if xb.is_floating_point():
                xb = xb.to(dtype)
            loss = ce(model(xb), torch.from_numpy(y[rows]).to(dev))
            (loss / M).backward()
            total += loss.item()
        opt.step()
        opt.zero_grad()
        losses.append(total / M)
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=("cnn", "resnet50", "gpt"))
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--batch", type=int, default=8, help="B of the data and --ref")
    ap.add_argument("--rows", type=int, default=0, help="rows of data to write (0: none)")
    ap.add_argument("--ref", type=int, default=0, metavar="K",
                    help="PyTorch float32 and float64 losses of K steps")
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=64, help="resnet50: image size")
    ap.add_argument("--classes", type=int, default=10, help="resnet50: classes")
    ap.add_argument("--zero-init-residual", action="store_true", help="resnet50")
    ap.add_argument("--vocab", type=int, default=512, help="gpt")
    ap.add_argument("--d", type=int, default=64, help="gpt")
    ap.add_argument("--heads", type=int, default=4, help="gpt")
    ap.add_argument("--layers", type=int, default=2, help="gpt")
    ap.add_argument("--T", type=int, default=32, help="gpt")
    args = ap.parse_args()
    if args.ref and not args.rows:
        ap.error("--ref needs --rows")
    if args.batch % args.microbatches:
        ap.error("--batch must be a multiple of --microbatches")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    model, in_name, shape = build(args)
    nparam = sum(p.numel() for p in model.parameters())
    if args.model == "gpt":
        example = torch.randint(0, args.vocab, (2,) + shape)
    else:
        example = torch.randn((2,) + shape)
    path = os.path.join(args.out, "model.onnx")
    export_training(model, example, path, 17, in_name, "logits")
    print("%s: %.3g M parameters, wrote %s (%d bytes) in %.1f s"
          % (args.model, nparam / 1e6, path, os.path.getsize(path), time.time() - t0))
    if not args.rows:
        return
    x, y = make_data(args, args.rows)
    np.save(os.path.join(args.out, "x.npy"), x)
    np.save(os.path.join(args.out, "y.npy"), y)
    if not args.ref:
        return
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import copy
    for name, dtype in (("torch32.txt", torch.float32), ("torch64.txt", torch.float64)):
        t1 = time.time()
        losses = train(copy.deepcopy(model), x, y, args, args.ref, dtype, dev)
        with open(os.path.join(args.out, name), "w") as f:
            f.write("".join("%.17g\n" % v for v in losses))
        print("  PyTorch %s on %s, %d steps: %.1f s, losses %.6f .. %.6f"
              % (str(dtype).replace("torch.", ""), dev, args.ref, time.time() - t1,
                 losses[0], losses[-1]))


if __name__ == "__main__":
    main()
