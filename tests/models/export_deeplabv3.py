#!/usr/bin/python3
"""Export an untrained torchvision DeepLabV3 (ResNet-50/101 backbone) to ONNX.

Training-mode export (BatchNormalization and Dropout kept, no constant
folding) of deeplabv3_resnet50/101(weights=None, weights_backbone=None,
aux_loss=False), wrapped so the only output is the 'out' tensor.  Input
"input" (batch,3,size,size), output "out", batch symbolic ("batch").  The
F.interpolate calls give Shape/Gather/.../Resize subgraphs.  Also writes
OUT.torch.txt with the output shapes from a real PyTorch forward pass.
Batch must be >= 2: BatchNorm in training mode after the ASPP pooling branch
sees one value per channel otherwise.

Run:  /usr/bin/python3 tests/models/export_deeplabv3.py --out /tmp/dl.onnx \
          [--batch 2] [--size 64] [--opset 13] [--backbone resnet50|resnet101] \
          [--classes 21]
"""
import argparse
import os
import sys
import time

import torch
from torchvision.models import segmentation

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_resnet50 import export_training  # noqa: E402


class OutOnly(torch.nn.Module):
    """Return only the 'out' entry of the segmentation model's result dict."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--backbone", choices=["resnet50", "resnet101"],
                    default="resnet50")
    ap.add_argument("--classes", type=int, default=21)
    args = ap.parse_args()
    if args.batch < 2:
        ap.error("--batch must be >= 2 (training-mode BatchNorm in ASPP pooling)")

    t0 = time.time()
    torch.manual_seed(0)
    build = getattr(segmentation, "deeplabv3_" + args.backbone)
    model = OutOnly(build(weights=None, weights_backbone=None, aux_loss=False,
                          num_classes=args.classes))
    x = torch.randn(args.batch, 3, args.size, args.size)
    export_training(model, x, args.out, args.opset, "input", "out")
    print("wrote %s (%d bytes) in %.1fs" % (args.out, os.path.getsize(args.out),
                                            time.time() - t0))


if __name__ == "__main__":
    main()
