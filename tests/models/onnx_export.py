"""torch.onnx.export through the TorchScript exporter on every PyTorch
version.

PyTorch 2.x also has the dynamo exporter (torch.export), the default of
torch.onnx.export from 2.9 on; its graphs differ from the TorchScript
exporter's, which the export scripts here and mpcc's tests are written
against.  PyTorch 1.13 has no `dynamo` keyword, so it is passed (as False)
only where torch.onnx.export takes it.
"""
import inspect

import torch


def onnx_export(model, args, f, **kw):
    """torch.onnx.export(model, args, f, **kw) with dynamo=False where the
    keyword exists (an explicit dynamo=... in kw wins)."""
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kw.setdefault("dynamo", False)
    return torch.onnx.export(model, args, f, **kw)
