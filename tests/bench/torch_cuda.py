#!/usr/bin/python3
"""PyTorch eager reference for tests/bench/gpu_run.sh bench: the median
time of one CUDA-synchronized training step (forward, cross-entropy,
backward, SGD lr 0.01 momentum 0.9, zero_grad) after 5 warm-up steps, in
float32, or with --tf32 letting cuBLAS and cuDNN use TF32 tensor cores
(torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32;
without it both are off, so both sides compute in full float32), or with
--bf16 under PyTorch's automatic mixed precision: each forward inside
torch.autocast("cuda", dtype=torch.bfloat16), float32 weights and
optimizer (eager AMP, as mpcc --precision=bf16 is compared with).

The data is what the generated trainer's --synthetic makes: one batch of
inputs uniform in [-1, 1) (float) or 0/1 (token ids), labels 0/1, reused
every step. The models are the ones the script exports for mpcc, built the
same way (weights=None; the initial values do not change the time):

  resnet50  torchvision.models.resnet50(weights=None, num_classes=--classes),
            input (B, 3, --size, --size)
  gpt       tests/models/export_gpt.py's GPT(--vocab, --d, --heads, --layers,
            --T), input (B, T), token cross-entropy over (B*T, vocab)

Prints the median seconds per step on stdout; the device, the spread and
the peak memory on stderr. Without a GPU it runs on the CPU (a dry run of
the script; the figure is then not a GPU figure, and stderr says so).

Run:  torch_cuda.py resnet50|gpt STEPS --batch B [--tf32|--bf16] [model options]
"""
import argparse
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=("resnet50", "gpt"))
    ap.add_argument("steps", type=int, help="timed steps (after 5 warm-up steps)")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="autocast bf16 forward (AMP)")
    ap.add_argument("--size", type=int, default=224, help="resnet50: image size")
    ap.add_argument("--classes", type=int, default=1000, help="resnet50: classes")
    ap.add_argument("--vocab", type=int, default=50304, help="gpt")
    ap.add_argument("--d", type=int, default=768, help="gpt")
    ap.add_argument("--heads", type=int, default=12, help="gpt")
    ap.add_argument("--layers", type=int, default=12, help="gpt")
    ap.add_argument("--T", type=int, default=1024, help="gpt")
    args = ap.parse_args()

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = False   # as mpcc: heuristics, no timing search
    torch.manual_seed(0)
    B = args.batch
    gen = torch.Generator().manual_seed(0)
    if args.model == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(weights=None, num_classes=args.classes)
        x = torch.rand((B, 3, args.size, args.size), generator=gen) * 2 - 1
        y = torch.randint(0, 2, (B,), generator=gen)
    else:
        import export_gpt
        model = export_gpt.GPT(args.vocab, args.d, args.heads, args.layers, args.T)
        x = torch.randint(0, 2, (B, args.T), generator=gen)
        y = torch.randint(0, 2, (B, args.T), generator=gen)
    model = model.to(dev).train()
    x, y = x.to(dev), y.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times = []
    for i in range(args.steps + 5):
        sync()
        t = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
            out = model(x)
        out = out.float()
        if out.dim() == 3:
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        else:
            loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if i >= 5:
            times.append(time.perf_counter() - t)
    med = statistics.median(times)
    what = torch.cuda.get_device_name(0) if cuda else "CPU (no GPU: not a GPU figure)"
    peak = " peak memory %.1f GB," % (torch.cuda.max_memory_allocated() / 1e9) if cuda else ""
    sys.stderr.write("torch %s on %s, %s:%s median %.6f s of %d steps (min %.6f, max %.6f), "
                     "last loss %.4f\n" % (torch.__version__, what,
                                           "bf16 autocast" if args.bf16 else
                                           "tf32" if args.tf32 else "fp32", peak, med,
                                           len(times), min(times), max(times), loss.item()))
    print("%.6f" % med)


if __name__ == "__main__":
    main()
