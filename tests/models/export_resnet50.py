#!/usr/bin/python3
"""Export an untrained torchvision ResNet-50 to ONNX in training mode.

The model (torch.manual_seed(0), weights=None) is exported with
TrainingMode.TRAINING and no constant folding, so BatchNormalization stays in
its training form.  Input "input" (batch,3,size,size), output "logits"; the
batch dimension is symbolic ("batch").  Also writes OUT.torch.txt with the
output shapes from a real PyTorch forward pass (format of --dump=shapes).

Run:  /usr/bin/python3 tests/models/export_resnet50.py --out /tmp/r50.onnx \
          [--batch 2] [--size 64] [--opset 13] [--classes 1000]
"""
import argparse
import os
import sys
import time
import warnings

import torch
import torchvision

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_export import onnx_export  # noqa: E402
from ref_shapes import write_torch_shapes  # noqa: E402

# torch.onnx warns at length about BN buffer updates dropped in training mode.
warnings.filterwarnings("ignore", category=UserWarning)


def export_training(model, x, out, opset, in_name, out_name):
    """Reference forward pass + training-mode export; BN buffers are restored
    after each step so the exported running stats are the initial ones."""
    model.train()
    buffers = {k: v.clone() for k, v in model.named_buffers()}

    def restore():
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])

    with torch.no_grad():
        y = model(x)
    restore()
    write_torch_shapes(out + ".torch.txt", [(out_name, y)])
    onnx_export(model, (x,), out, opset_version=opset,
                training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False,
                input_names=[in_name], output_names=[out_name],
                dynamic_axes={in_name: {0: "batch"},
                              out_name: {0: "batch"}})
    restore()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--classes", type=int, default=1000)
    args = ap.parse_args()

    t0 = time.time()
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None, num_classes=args.classes)
    x = torch.randn(args.batch, 3, args.size, args.size)
    export_training(model, x, args.out, args.opset, "input", "logits")
    print("wrote %s (%d bytes) in %.1fs" % (args.out, os.path.getsize(args.out),
                                            time.time() - t0))


if __name__ == "__main__":
    main()
