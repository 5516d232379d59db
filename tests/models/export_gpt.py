#!/usr/bin/python3
"""Export a small (or, for benchmarks, very large) GPT-style decoder to ONNX.

Token + position nn.Embedding, `layers` pre-LayerNorm blocks (causal
nn.MultiheadAttention, batch_first, then a 4*d GELU MLP, both residual), final
LayerNorm and a linear head to the vocabulary.  Positions come from
torch.arange(T) (exported as a Constant) and the causal mask is computed in
forward with torch.triu on a (T,T) -inf tensor, exported as Trilu on a
Constant (see the comment in GPT.forward).  Input "tokens" int64
(batch,T) with a symbolic batch, output "logits".  Training-mode export, no
constant folding.  Also writes OUT.torch.txt with the output shapes from a real
PyTorch forward pass.

With --external the weights go to ONE external-data file OUT.data next to
OUT (tensors of >= 1024 bytes, 64-byte aligned offsets).  Models over 2 GB
need --external: torch then writes one file per tensor into a scratch
directory next to OUT, and those files are streamed into OUT.data, so the
weights are never held twice in memory.

Run:  /usr/bin/python3 tests/models/export_gpt.py --out /tmp/gpt.onnx \
          [--vocab 512] [--d 64] [--heads 4] [--layers 2] [--T 32] \
          [--batch 2] [--opset 17] [--external] [--fixed-batch]   (opset >= 14: Trilu)
With --fixed-batch the model is exported as torch.onnx.export(model, x,
path) writes it by default: the batch fixed at --batch rows, torch's
constant folding on (its Reshape targets then hold the batch).

Big:  ... --out /tmp/big/gpt.onnx --vocab 50304 --d 1536 --layers 16 --external
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings

import torch
from torch import nn

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_export import onnx_export  # noqa: E402
from ref_shapes import write_torch_shapes  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)

ALIGN = 64
SIZE_THRESHOLD = 1024


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, heads, layers, T):
        super().__init__()
        self.T = T
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(T, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        T = self.T  # a Python int: arange/full/triu become constant subgraphs
        x = self.tok(tokens) + self.pos(torch.arange(T, device=tokens.device))
        # torch.full((T, T), -inf) would be folded to a plain Constant by the
        # TorchScript constant propagation that runs in every export; new_full
        # on an activation is the same tensor but survives as
        # ConstantOfShape -> Trilu.
        mask = torch.triu(x.new_full((T, T), float("-inf")), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def copy_range(src, dst, offset, length, chunk=64 << 20):
    with open(src, "rb") as f:
        f.seek(offset)
        while length > 0:
            buf = f.read(min(chunk, length))
            if not buf:
                raise IOError("%s: unexpected end of file" % src)
            dst.write(buf)
            length -= len(buf)


def to_one_data_file(model, src_dir, out):
    """Move every initializer's and Constant attribute's data (inline raw_data
    >= SIZE_THRESHOLD bytes, or external data that torch wrote to src_dir)
    into OUT.data."""
    import onnx
    tensors = list(model.graph.initializer) + [
        a.t for n in model.graph.node for a in n.attribute
        if a.type == onnx.AttributeProto.TENSOR]
    loc = os.path.basename(out) + ".data"
    with open(os.path.join(os.path.dirname(os.path.abspath(out)), loc),
              "wb") as dst:
        for t in tensors:
            pad = -dst.tell() % ALIGN
            if t.data_location == onnx.TensorProto.EXTERNAL:
                info = {e.key: e.value for e in t.external_data}
                src = os.path.join(src_dir, info["location"])
                offset = int(info.get("offset", 0))
                length = int(info.get("length", os.path.getsize(src) - offset))
                dst.write(b"\0" * pad)
                start = dst.tell()
                copy_range(src, dst, offset, length)
            elif t.HasField("raw_data") and len(t.raw_data) >= SIZE_THRESHOLD:
                dst.write(b"\0" * pad)
                start, length = dst.tell(), len(t.raw_data)
                dst.write(t.raw_data)
                t.ClearField("raw_data")
            else:
                continue
            del t.external_data[:]
            for k, v in (("location", loc), ("offset", start),
                         ("length", length)):
                e = t.external_data.add()
                e.key, e.value = k, str(v)
            t.data_location = onnx.TensorProto.EXTERNAL
    onnx.save_model(model, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--T", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--fixed-batch", action="store_true",
                    help="export as torch.onnx.export does by default: the "
                    "batch fixed at --batch, constant folding on")
    ap.add_argument("--external", action="store_true",
                    help="store weights in one external data file OUT.data")
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if args.opset < 14:
        ap.error("--opset must be >= 14 (torch.triu exports as Trilu)")

    t0 = time.time()
    torch.manual_seed(0)
    model = GPT(args.vocab, args.d, args.heads, args.layers, args.T).train()
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print("parameters: %.1f M (%.2f GB)" % (nbytes / 4e6, nbytes / 1e9))
    if nbytes >= (2 << 30) - (64 << 20) and not args.external:
        ap.error("weights near/over 2 GB: protobuf cannot hold them, "
                 "use --external")
    tokens = torch.randint(args.vocab, (args.batch, args.T))
    with torch.no_grad():
        logits = model(tokens)
    write_torch_shapes(args.out + ".torch.txt", [("logits", logits)])
    del logits

    opts = dict(opset_version=args.opset,
                training=torch.onnx.TrainingMode.TRAINING,
                do_constant_folding=False,
                input_names=["tokens"], output_names=["logits"],
                dynamic_axes={"tokens": {0: "batch"}, "logits": {0: "batch"}})
    if args.fixed_batch:
        del opts["do_constant_folding"], opts["dynamic_axes"]
    if not args.external:
        onnx_export(model, (tokens,), args.out, **opts)
    else:
        import onnx
        out_dir = os.path.dirname(os.path.abspath(args.out))
        tmp = tempfile.mkdtemp(prefix=".export_gpt.", dir=out_dir)
        try:
            tmp_model = os.path.join(tmp, "model.onnx")
            onnx_export(model, (tokens,), tmp_model, **opts)
            del model
            proto = onnx.load(tmp_model, load_external_data=False)
            to_one_data_file(proto, tmp, args.out)
        finally:
            shutil.rmtree(tmp)
    print("wrote %s (%d bytes%s) in %.1fs" % (
        args.out, os.path.getsize(args.out),
        " + %d bytes of data" % os.path.getsize(args.out + ".data")
        if args.external else "", time.time() - t0))


if __name__ == "__main__":
    main()
