#!/usr/bin/python3
"""PyTorch CPU reference for tests/bench/bench_train.sh: the median time of
one training step (forward, cross-entropy, backward, SGD momentum 0.9 lr
0.01) of the benchmark model, after 5 warm-up steps; with bf16, each
forward under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's CPU
mixed precision, against mpcc --precision=bf16).

Run:  torch_step.py mlp|cnn|gpt|seq2seq|resnet50 STEPS THREADS [bf16]
"""
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))


def model_and_batch(name):
    if name == "mlp":
        m = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
        return m, torch.randn(256, 784), torch.randint(0, 10, (256,))
    if name == "cnn":   # tests/train/ref_train.py's cnn
        m = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
        return m, torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    if name == "resnet50":   # tests/bench/gpu_models.py's, 64x64
        import torchvision
        m = torchvision.models.resnet50(weights=None, num_classes=10)
        return m, torch.randn(32, 3, 64, 64), torch.randint(0, 10, (32,))
    if name == "seq2seq":   # tests/train/ref_train.py's LSTM encoder-decoder
        sys.path.insert(0, os.path.join(HERE, "..", "train"))
        import ref_train
        return ref_train.Seq2Seq(), torch.randint(0, 100, (32, 20)), torch.randint(0, 10, (32,))
    import export_gpt
    m = export_gpt.GPT(512, 256, 4, 4, 128)
    return m, torch.randint(0, 512, (8, 128)), torch.randint(0, 512, (8, 128))


def main():
    name, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    amp = len(sys.argv) > 4 and sys.argv[4] == "bf16"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m, x, y = model_and_batch(name)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    times = []
    for i in range(steps + 5):
        t = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            out = m(x)
        out = out.float()
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)) \
            if out.dim() == 3 else F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        if i >= 5:
            times.append(time.perf_counter() - t)
    print("%.6f" % statistics.median(times))


if __name__ == "__main__":
    main()
