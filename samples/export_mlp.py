#!/usr/bin/python3
"""Export a small MLP (784-256-10, ReLU) to ONNX as a quick compiler sample.

Input "x" f32 (batch,784) with a symbolic batch, output "logits" (batch,10).
Exported with do_constant_folding=False at opset 17 (the default); takes a
second or two.

Run:  /usr/bin/python3 samples/export_mlp.py --out samples/mlp.onnx \
          [--batch 2] [--opset 17]
"""
import argparse

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=2,
                    help="batch size of the example input used for tracing")
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    x = torch.randn(args.batch, 784)
    torch.onnx.export(model, (x,), args.out, opset_version=args.opset,
                      do_constant_folding=False,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    print("wrote", args.out)


if __name__ == "__main__":
    main()
