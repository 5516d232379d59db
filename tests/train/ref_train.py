#!/usr/bin/python3
"""PyTorch reference run for a generated trainer (train.c).

Builds one of the test models (torch.manual_seed(seed)), exports it with its
initial weights to DIR/model.onnx in training mode (opset 17, input "input",
output "logits", symbolic batch axis "batch", no constant folding), makes a
synthetic data set with numpy.random.default_rng(seed), trains K steps in
train() mode and writes what a C test needs to check a trainer against it:

  model.onnx    the model with its initial weights; the initializer names are
                the state_dict keys (checked here: the script fails otherwise)
  x.npy         inputs, N = K*B rows: float32, or int64 tokens (N,T) for gpt
                and bert (bert: token 0 is padding, and rows are padded)
  y.npy         int64 class labels (N,), or next-token labels (N,T) for gpt,
                or pixel labels (N,H,W) for deeplabv3 and unet;
                step i uses rows i*B .. i*B+B-1 in file order
  losses.npy    float64 [K]: step i's mean cross-entropy loss, computed BEFORE
                step i's update (mean over micro-batches when M > 1)
  grad_norms.npy float64 [K]: step i's total gradient 2-norm (before clipping)
  losses_autocast.npy (--autocast-check) float64 [K]: the same training from
                the same weights with each forward under
                torch.autocast("cpu", dtype=torch.bfloat16)
  final.npz     every state_dict entry after K steps (parameters and buffers,
                no num_batches_tracked), float32, keyed by state_dict name
                (with --export-batch: a weight torch's constant folding
                renamed is under its initializer name, transposed as there)
  config.json   all the settings used (optimizer class and arguments, ...)
  xe.npy, ye.npy, eval.json   with --eval-rows (see below)

One step: for each of the M micro-batches (B/M consecutive rows) the mean CE
loss is computed and (loss / M).backward() accumulates the gradients; then
clip_grad_norm_ (with --clip-norm), optimizer.step(), zero_grad().  BatchNorm
uses per-micro-batch statistics and updates its running stats once per
micro-batch (momentum 0.1), as GPipe does.

Run:  /usr/bin/python3 tests/train/ref_train.py --model MODEL --out DIR
          [--steps K] [--batch B] [--microbatches M]
          [--optimizer sgd|adamw] [--lr F] [--momentum F] [--nesterov]
          [--weight-decay F] [--betas F,F] [--eps F] [--clip-norm F]
          [--seed S] [--mlp-sizes 784,256,10] [--zero-init-residual]
          [--export-batch B0]
          [--fp64-check] [--rows N] [--shuffle-seed S]
          [--eval-rows N [--eval-every N] [--eval-ignored K]]
          [--flat-logits] [--tokens]

The row order (--rows, --shuffle-seed) is the generated trainer's: the steps
read one stream of rows, epoch after epoch; position p is row p mod N of epoch
p // N, in file order, or with --shuffle-seed S (the trainer's --shuffle
--seed S) in the epoch's permutation (shuffle_perm below: Fisher-Yates driven
by SplitMix64, reimplemented from docs/trainer.md).  --rows N writes N rows
(default K*B, one epoch); a batch that crosses the end of an epoch takes its
last rows from the next one.

--eval-rows N also draws N held-out rows (make_data for N_train + N rows; the
training rows are the first N_train) into xe.npy/ye.npy and writes eval.json:
the mean cross-entropy and the accuracy (argmax over the classes) of
model.eval() under torch.no_grad() on them after the last step and, with
--eval-every N, after every N-th step (a fresh run from the same seed up to
that step).  --eval-ignored K sets the label of every K-th held-out row
(0, K, 2K, ...) to the ignore_index (-100, or the model's), which neither
counts.

--export-batch B0 exports the model the way torch.onnx.export(model, x,
path) does by default: x of B0 rows, no dynamic axes (the batch is fixed at
B0 in the model), torch's constant folding on.  The reference still trains
at --batch: mpcc has to re-batch the model.

MODEL: mlp, cnn, cnn3d, unet, bert (written here), gpt (tests/models/export_gpt.py),
resnet18, resnet50, deeplabv3, mobilenetv2, vgg11bn, efficientnet_b0 (torchvision; the
"torch" string in config.json says how each is set up for small inputs).

gpt only: --flat-logits makes the model return its logits flattened to
(B*T, V), batch-major, as nanoGPT does (logits.view(-1, V)), while y.npy keeps
the labels (N,T).  --tokens draws one stream of tokens t instead of windows:
t = rng.integers(0, V, size=N*T+1), and row k is the window x = t[kT:kT+T],
y = t[kT+1:kT+T+1], as the trainer's --tokens makes them (docs/trainer.md);
it also writes the stream as tokens.npy (int32) and tokens.bin (raw
little-endian uint16), and with --eval-rows E the held-out windows'
stream t[N*T : (N+E)*T+1] as tokens_eval.npy.

--fp64-check retrains in float64 and stores in config.json how far the
float32 reference is from it: no float32 trainer can be expected to match more
closely.  ResNet-50 with its default init at 32x32, B=4 is chaotic (gradient
norm ~3e4; float32 and float64 disagree by percent after one SGD step); use
--zero-init-residual --lr 0.01 for a reproducible reference.  The same holds
for MobileNetV2 and EfficientNet-B0 (--zero-init-residual zeroes the last
BatchNorm of their residual blocks), whose last BatchNorms also need more than
a few values per channel: 64x64 images, micro-batches of 8.  Nor can the
check see an activation within rounding error of a kink (ReLU, ReLU6): float32
and float64 PyTorch may agree on its side while another float32 order of
operations puts it on the other.  AdamW turns the rounding noise of
gradients that are exactly zero in exact arithmetic (a conv bias before
BatchNorm, the key part of in_proj_bias) into +-lr updates.
"""
import argparse
import collections
import json
import os
import sys
import time
import warnings

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
from onnx_export import onnx_export  # noqa: E402

# torch.onnx warns at length about BN buffer updates dropped in training mode.
warnings.filterwarnings("ignore", category=UserWarning)

OPSET = 17
IN_NAME, OUT_NAME = "input", "logits"
IMAGE = (3, 32, 32)
IMAGE64 = (3, 64, 64)   # mobilenetv2, efficientnet_b0: 2x2 after stride 32
VOLUME = (1, 8, 16, 16)  # cnn3d: one channel, 8 x 16 x 16 voxels (or frames)
GPT_CFG = dict(vocab=128, d=32, heads=2, layers=2, T=16)
SEG_CFG = dict(classes=5, image=[3, 32, 32], ignore_index=255, ignore_every=7)
# bert: token 0 is padding, token 1 the [CLS] token every row starts with;
# row lengths are drawn from [min_len, T], the rest is padding.
BERT_CFG = dict(vocab=64, d=32, heads=2, layers=2, T=16, classes=4, min_len=5)
# per-model defaults: steps, batch
DEFAULTS = {"mlp": (5, 32), "cnn": (5, 16), "cnn3d": (4, 8), "resnet50": (2, 4), "resnet18": (2, 4),
            "gpt": (5, 4),
            "deeplabv3": (2, 4), "mobilenetv2": (2, 8), "vgg11bn": (3, 4),
            "unet": (3, 4), "efficientnet_b0": (3, 8), "bert": (3, 8),
            "seq2seq": (4, 8), "bigru": (4, 8), "lstm_lm": (4, 4), "rnn": (4, 8)}
# Recurrent models (tokens in, classes out, or next tokens for lstm_lm).
# seq2seq is the encoder-decoder of a user's story: Embedding + LSTM, LSTM +
# Linear, mean over time + Linear, trained with Adam.
RNN_CFG = {"seq2seq": dict(vocab=100, T=20, classes=10),
           "bigru": dict(vocab=64, T=12, classes=4),
           "lstm_lm": dict(vocab=64, T=16),
           "rnn": dict(features=8, T=10, classes=5)}
BN_MODELS = ("cnn", "cnn3d", "resnet50", "resnet18", "deeplabv3", "mobilenetv2", "vgg11bn",
             "unet", "efficientnet_b0")
SEG_MODELS = ("deeplabv3", "unet")
ZERO_INIT_MODELS = ("resnet50", "resnet18", "mobilenetv2", "efficientnet_b0")
SKIP_BUFFERS = ("num_batches_tracked",)


def die(msg):
    sys.stderr.write("ref_train: error: %s\n" % msg)
    sys.exit(1)


# --------------------------------------------------------------- models ----

def build_model(args):
    """Returns (model, model_config dict).  Called right after manual_seed."""
    if args.model == "mlp":
        sizes = args.mlp_sizes
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        return nn.Sequential(*layers), {
            "sizes": sizes, "classes": sizes[-1],
            "torch": "nn.Sequential(" + ", ".join(
                "Linear(%d,%d)%s" % (sizes[i], sizes[i + 1],
                                     ", ReLU()" if i < len(sizes) - 2 else "")
                for i in range(len(sizes) - 1)) + ")"}
    if args.model == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
        return model, {"image": list(IMAGE), "classes": 10,
                       "torch": "Conv(3,16,3,p1) BN ReLU MaxPool2 "
                                "Conv(16,32,3,p1) BN ReLU MaxPool2 Flatten "
                                "Linear(2048,10)"}
    if args.model == "cnn3d":
        model = nn.Sequential(
            nn.Conv3d(1, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(),
            nn.MaxPool3d(2),
            nn.Conv3d(8, 16, 3, padding=1), nn.BatchNorm3d(16), nn.ReLU(),
            nn.AvgPool3d(2),
            nn.Conv3d(16, 16, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
            nn.BatchNorm3d(16), nn.ReLU(),
            nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(16, 5))
        return model, {"image": list(VOLUME), "classes": 5,
                       "torch": "Conv3d(1,8,3,p1) BN3d ReLU MaxPool3d(2) "
                                "Conv3d(8,16,3,p1) BN3d ReLU AvgPool3d(2) "
                                "Conv3d(16,16,(1,3,3),s(1,2,2),p(0,1,1)) BN3d "
                                "ReLU AdaptiveAvgPool3d(1) Flatten Linear(16,5)"}
    if args.model in ("resnet50", "resnet18"):
        import torchvision
        zi = args.zero_init_residual
        build = getattr(torchvision.models, args.model)
        model = build(weights=None, num_classes=10, zero_init_residual=zi)
        return model, {"image": list(IMAGE if args.model == "resnet50" else IMAGE64),
                       "classes": 10, "zero_init_residual": zi,
                       "torch": "torchvision.models.%s(weights=None, num_classes=10%s)"
                                % (args.model, ", zero_init_residual=True" if zi else "")}
    if args.model == "gpt":
        import export_gpt  # tests/models/export_gpt.py: reuse its classes
        c = GPT_CFG
        cls = flat_gpt(export_gpt.GPT) if args.flat_logits else export_gpt.GPT
        model = cls(c["vocab"], c["d"], c["heads"], c["layers"], c["T"])
        return model, dict(c, classes=c["vocab"], flat_logits=args.flat_logits,
                           torch="tests/models/export_gpt.py GPT(vocab, d, "
                                 "heads, layers, T)%s" % (
                                     ", logits.reshape(-1, vocab)"
                                     if args.flat_logits else ""))
    if args.model == "deeplabv3":
        return build_deeplabv3(args)
    if args.model == "mobilenetv2":
        import torchvision
        from torchvision.models.mobilenetv2 import InvertedResidual
        model = torchvision.models.mobilenet_v2(weights=None, num_classes=10,
                                                width_mult=0.5, dropout=0.0)
        zi = zero_residual_bn(model, InvertedResidual,
                              lambda b: b.conv[-1], args)
        return model, {"image": list(IMAGE64), "classes": 10,
                       "zero_init_residual": zi,
                       "torch": "torchvision.models.mobilenet_v2(weights="
                                "None, num_classes=10, width_mult=0.5, "
                                "dropout=0.0)%s"
                                % ("; the last BatchNorm of every residual "
                                   "InvertedResidual starts at weight 0"
                                   if zi else "")}
    if args.model == "vgg11bn":
        return build_vgg11bn(args)
    if args.model == "unet":
        c = SEG_CFG
        return UNet(c["image"][0], c["classes"]), {
            "image": c["image"], "classes": c["classes"],
            "ignore_index": c["ignore_index"],
            "torch": "UNet(3, %d) of tests/train/ref_train.py: widths 8-16-32,"
                     " two MaxPool2 down, ConvTranspose2d(2, stride 2) and "
                     "bilinear Upsample up, skips by torch.cat" % c["classes"]}
    if args.model == "efficientnet_b0":
        import torchvision
        from torchvision.models.efficientnet import MBConv
        model = torchvision.models.efficientnet_b0(
            weights=None, num_classes=10, stochastic_depth_prob=0.0)
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        zi = zero_residual_bn(model, MBConv, lambda b: b.block[-1][1], args)
        return model, {"image": list(IMAGE64), "classes": 10,
                       "zero_init_residual": zi,
                       "torch": "torchvision.models.efficientnet_b0(weights="
                                "None, num_classes=10, stochastic_depth_prob="
                                "0.0); classifier Dropout p=0%s"
                                % ("; the last BatchNorm of every residual "
                                   "MBConv starts at weight 0" if zi else "")}
    if args.model in RNN_CFG:
        return build_recurrent(args.model)
    if args.model == "bert":
        c = BERT_CFG
        return BERT(c["vocab"], c["d"], c["heads"], c["layers"], c["T"],
                    c["classes"]), dict(
            c, torch="BERT(vocab, d, heads, layers, T, classes) of "
                     "tests/train/ref_train.py: nn.TransformerEncoder "
                     "(post-LayerNorm, GELU, dropout 0) with "
                     "src_key_padding_mask = (tokens == 0), classified from "
                     "the first token")
    raise AssertionError(args.model)


def zero_residual_bn(model, block_type, last_bn, args):
    """--zero-init-residual for the inverted-residual models: the last
    BatchNorm of every block with a skip connection starts at weight 0, so
    that each such block starts as the identity (as resnet50's
    zero_init_residual=True does for its Bottlenecks)."""
    if args.zero_init_residual:
        for b in model.modules():
            if isinstance(b, block_type) and b.use_res_connect:
                bn = last_bn(b)
                assert isinstance(bn, nn.BatchNorm2d), bn
                nn.init.zeros_(bn.weight)
    return args.zero_init_residual


def build_vgg11bn(args):
    """VGG-11 with BatchNorm at 32x32: torchvision's convolutional features
    end at 512x1x1 there, which its AdaptiveAvgPool2d((7, 7)) would copy 49
    times into a 25088-wide, 4096-wide classifier (120M weights for a 32x32
    image).  The pooling becomes AdaptiveAvgPool2d((1, 1)) and the
    classifier keeps its shape (Linear, ReLU, Dropout, Linear, ReLU, Dropout,
    Linear) at width 256, with Dropout p=0."""
    import torchvision
    model = torchvision.models.vgg11_bn(weights=None, num_classes=10)
    model.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    model.classifier = nn.Sequential(
        nn.Linear(512, 256), nn.ReLU(True), nn.Dropout(p=0.0),
        nn.Linear(256, 256), nn.ReLU(True), nn.Dropout(p=0.0),
        nn.Linear(256, 10))
    for m in model.classifier.modules():  # torchvision's VGG init
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.constant_(m.bias, 0)
    return model, {"image": list(IMAGE), "classes": 10,
                   "torch": "torchvision.models.vgg11_bn(weights=None, "
                            "num_classes=10) with avgpool = "
                            "AdaptiveAvgPool2d((1, 1)) and classifier = "
                            "Linear(512,256) ReLU Dropout(0) Linear(256,256) "
                            "ReLU Dropout(0) Linear(256,10) (normal(0, 0.01) "
                            "weights, zero biases, as torchvision inits it)"}


class DoubleConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Seq2Seq(nn.Module):
    """Embedding(100, 32) -> LSTM(32, 64) -> LSTM(64, 64) -> Linear(64, 32)
    -> mean over time -> Linear(32, 10), batch first."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(100, 32)
        self.encoder = nn.LSTM(32, 64, batch_first=True)
        self.decoder = nn.LSTM(64, 64, batch_first=True)
        self.linear = nn.Linear(64, 32)
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        h, _ = self.encoder(self.embedding(x))
        h, _ = self.decoder(h)
        return self.classifier(self.linear(h).mean(dim=1))


class BiGRU(nn.Module):
    """Embedding(64, 16) -> bidirectional GRU(16, 24) -> mean over time ->
    Linear(48, 4), batch first."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(64, 16)
        self.gru = nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(48, 4)

    def forward(self, x):
        h, _ = self.gru(self.embedding(x))
        return self.fc(h.mean(dim=1))


class LstmLM(nn.Module):
    """Embedding(64, 32) -> 2-layer LSTM(32, 32) -> Linear(32, 64): logits
    (B, T, V) for next-token labels (B, T)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(64, 32)
        self.lstm = nn.LSTM(32, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 64)

    def forward(self, x):
        h, _ = self.lstm(self.embedding(x))
        return self.head(h)


class TanhRNN(nn.Module):
    """RNN(8, 16) (tanh, time first) over x (B, T, 8) transposed; the last
    hidden state h_n -> Linear(16, 5)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(8, 16)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        _, h = self.rnn(x.transpose(0, 1))
        return self.fc(h[0])


def build_recurrent(name):
    c = RNN_CFG[name]
    model = {"seq2seq": Seq2Seq, "bigru": BiGRU, "lstm_lm": LstmLM, "rnn": TanhRNN}[name]()
    return model, dict(c, classes=c.get("classes", c.get("vocab")),
                       torch="%s of tests/train/ref_train.py: %s"
                             % (type(model).__name__, type(model).__doc__.strip()))


class UNet(nn.Module):
    """A small U-Net: two levels down (MaxPool2), a bottleneck, two levels
    up, each joined to its encoder level's output by a long skip (torch.cat
    along the channels).  The first up-sampling is a learned ConvTranspose2d,
    the second a bilinear nn.Upsample followed by a 1x1 convolution, so both
    kinds are exercised; a 1x1 convolution gives the per-pixel logits."""

    def __init__(self, cin, classes, w=8):
        super().__init__()
        self.enc1 = DoubleConv(cin, w)
        self.enc2 = DoubleConv(w, 2 * w)
        self.pool = nn.MaxPool2d(2)
        self.mid = DoubleConv(2 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = DoubleConv(4 * w, 2 * w)
        self.up1 = nn.Sequential(
            nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
            nn.Conv2d(2 * w, w, 1))
        self.dec1 = DoubleConv(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)


class BERT(nn.Module):
    """A BERT-style encoder: token + learned position embeddings, LayerNorm,
    nn.TransformerEncoder (post-LayerNorm layers, GELU, dropout 0) whose
    attention ignores the padding tokens (src_key_padding_mask = tokens ==
    0), and a linear classifier on the first ([CLS]) token's output."""

    def __init__(self, vocab, d, heads, layers, T, classes):
        super().__init__()
        self.T = T
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(T, d)
        self.ln = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                           activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers,
                                             enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.ln(self.tok(tokens) + self.pos(torch.arange(self.T)))
        h = self.encoder(x, src_key_padding_mask=tokens == 0)
        return self.head(h[:, 0])


def flat_gpt(base):
    """GPT returning logits.reshape(-1, V), as nanoGPT's training does; a
    subclass, so the state_dict keys stay the GPT's."""
    class FlatGPT(base):
        def forward(self, tokens):
            logits = super().forward(tokens)
            return logits.reshape(-1, logits.shape[-1])
    return FlatGPT


class SegOut(nn.Module):
    """torchvision's segmentation models return {"out": logits}; ONNX wants
    a tensor.  The state_dict keys gain the prefix "net."."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


def build_deeplabv3(args):
    """DeepLabV3-ResNet50 (dilated backbone, ASPP with its image-pooling
    branch, bilinear upsampling to the input).  The residual branches' last
    BatchNorm starts at zero (as resnet50(zero_init_residual=True)) and the
    ASPP Dropout(0.5) is set to p=0: its random mask cannot be reproduced
    outside PyTorch (mpcc's Dropout has its own tests)."""
    import torchvision
    from torchvision.models.resnet import Bottleneck
    c = SEG_CFG
    net = torchvision.models.segmentation.deeplabv3_resnet50(
        weights=None, weights_backbone=None, num_classes=c["classes"],
        aux_loss=False)
    for m in net.modules():
        if isinstance(m, Bottleneck):
            nn.init.zeros_(m.bn3.weight)
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return SegOut(net), {
        "image": c["image"], "classes": c["classes"],
        "ignore_index": c["ignore_index"],
        "torch": "SegOut(torchvision.models.segmentation.deeplabv3_resnet50("
                 "weights=None, weights_backbone=None, num_classes=%d, "
                 "aux_loss=False)); Bottleneck bn3.weight zeroed; Dropout "
                 "p=0" % c["classes"]}


def make_data(args, n, mcfg):
    """x, y as numpy arrays from numpy.random.default_rng(seed)."""
    rng = np.random.default_rng(args.seed)
    if args.model == "gpt" and args.tokens:
        T, V = GPT_CFG["T"], GPT_CFG["vocab"]
        t = rng.integers(0, V, size=n * T + 1, dtype=np.int64)
        args.token_stream = t
        x = np.stack([t[k * T:k * T + T] for k in range(n)])
        y = np.stack([t[k * T + 1:k * T + T + 1] for k in range(n)])
        desc = ("t = rng.integers(0, %d, size=N*%d+1, dtype=int64); x[k] = "
                "t[k*T:k*T+T], y[k] = t[k*T+1:k*T+T+1]" % (V, T))
        return x, y, desc
    if args.model == "gpt":
        T, V = GPT_CFG["T"], GPT_CFG["vocab"]
        seq = rng.integers(0, V, size=(n, T + 1), dtype=np.int64)
        desc = ("seq = rng.integers(0, %d, size=(N, %d), dtype=int64); "
                "x = seq[:, :T], y = seq[:, 1:]" % (V, T + 1))
        return (np.ascontiguousarray(seq[:, :T]),
                np.ascontiguousarray(seq[:, 1:]), desc)
    if args.model in RNN_CFG:
        c = RNN_CFG[args.model]
        if args.model == "rnn":
            x = rng.standard_normal(size=(n, c["T"], c["features"]), dtype=np.float32)
            xdesc = "x = rng.standard_normal(size=(N, %d, %d), dtype=float32)" % (
                c["T"], c["features"])
        else:
            x = rng.integers(0, c["vocab"], size=(n, c["T"] + 1), dtype=np.int64)
            xdesc = "seq = rng.integers(0, %d, size=(N, %d), dtype=int64); x = seq[:, :T]" % (
                c["vocab"], c["T"] + 1)
        if args.model == "lstm_lm":
            return (np.ascontiguousarray(x[:, :c["T"]]), np.ascontiguousarray(x[:, 1:]),
                    xdesc + ", y = seq[:, 1:]")
        y = rng.integers(0, c["classes"], size=(n,), dtype=np.int64)
        if args.model != "rnn":
            x = np.ascontiguousarray(x[:, :c["T"]])
        return x, y, xdesc + "; y = rng.integers(0, %d, size=(N,), dtype=int64)" % c["classes"]
    if args.model == "bert":
        c = BERT_CFG
        T = c["T"]
        x = rng.integers(2, c["vocab"], size=(n, T), dtype=np.int64)
        x[:, 0] = 1
        lengths = rng.integers(c["min_len"], T + 1, size=n)
        x[np.arange(T)[None, :] >= lengths[:, None]] = 0
        y = rng.integers(0, c["classes"], size=(n,), dtype=np.int64)
        desc = ("x = rng.integers(2, %d, size=(N, %d), dtype=int64); x[:, 0] "
                "= 1 ([CLS]); lengths = rng.integers(%d, %d, size=N); "
                "x[i, lengths[i]:] = 0 (padding); y = rng.integers(0, %d, "
                "size=(N,), dtype=int64)"
                % (c["vocab"], T, c["min_len"], T + 1, c["classes"]))
        return x, y, desc
    if args.model in SEG_MODELS:
        c = SEG_CFG
        x = rng.standard_normal(size=(n,) + tuple(c["image"]), dtype=np.float32)
        y = rng.integers(0, c["classes"], size=(n,) + tuple(c["image"][1:]),
                         dtype=np.int64)
        y.reshape(-1)[::c["ignore_every"]] = c["ignore_index"]
        desc = ("x = rng.standard_normal(size=(N,%s), dtype=float32); y = "
                "rng.integers(0, %d, size=(N,%s), dtype=int64); every %d-th "
                "label (flat order) set to %d, the ignore_index"
                % (",".join(map(str, c["image"])), c["classes"],
                   ",".join(map(str, c["image"][1:])), c["ignore_every"],
                   c["ignore_index"]))
        return x, y, desc
    shape = ((mcfg["sizes"][0],) if args.model == "mlp"
             else tuple(mcfg["image"]))
    x = rng.standard_normal(size=(n,) + shape, dtype=np.float32)
    y = rng.integers(0, mcfg["classes"], size=(n,), dtype=np.int64)
    desc = ("x = rng.standard_normal(size=(N,%s), dtype=float32); "
            "y = rng.integers(0, %d, size=(N,), dtype=int64)"
            % (",".join(map(str, shape)), mcfg["classes"]))
    return x, y, desc


def ce_loss(logits, y):
    """Mean cross-entropy; for gpt over all B*T token positions."""
    if logits.dim() == 2 and y.dim() == 2:  # gpt --flat-logits: (B*T, V)
        return F.cross_entropy(logits, y.reshape(-1))
    if logits.dim() == 3:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               y.reshape(-1))
    if logits.dim() == 4:  # deeplabv3, unet: per pixel, mean over labelled
        return F.cross_entropy(logits, y, ignore_index=SEG_CFG["ignore_index"])
    return F.cross_entropy(logits, y)


def reference_state(model):
    return collections.OrderedDict(
        (k, v.detach().clone()) for k, v in model.state_dict().items()
        if not k.endswith(SKIP_BUFFERS))


# --------------------------------------------------------------- export ----

def export_kw(fixed):
    """Symbolic batch, no constant folding; or (fixed) the batch of the
    traced input and torch's default constant folding, as
    torch.onnx.export(model, x, path) writes it."""
    if fixed:
        return {}
    return dict(do_constant_folding=False,
                dynamic_axes={IN_NAME: {0: "batch"}, OUT_NAME: {0: "batch"}})


def folded_names(state, inits, numpy_helper):
    """With constant folding torch renames some weights ('onnx::MatMul_12'
    is a Linear weight transposed; 'onnx::Add_3' an embedding gathered
    whole). Each state_dict entry missing by name is matched by value with
    an unclaimed initializer, as is or transposed: {entry: (name, T?)}."""
    free = {k: numpy_helper.to_array(t) for k, t in inits.items()
            if k not in state}
    out = {}
    for k, v in state.items():
        if k in inits:
            continue
        ref = v.numpy()
        for name, a in free.items():
            if a.shape == ref.shape and np.array_equal(a, ref):
                out[k] = (name, False)
            elif a.ndim == 2 and a.shape == ref.T.shape and \
                    np.array_equal(a, ref.T):
                out[k] = (name, True)
            else:
                continue
            del free[name]
            break
    return out


def round_to_half(model, x):
    """--export-dtype float16: the weights and data rounded to float16, so
    that PyTorch's float32 training starts where the float16 model does."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    return x.astype(np.float16).astype(np.float32)


def retype_model(path, dtype):
    """--export-dtype: every float32 initializer, input, output, Cast and
    Constant of the exported model in `dtype` instead."""
    import onnx
    from onnx import numpy_helper, TensorProto
    to = {"float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16}[dtype]
    m = onnx.load(path)
    g = m.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            a = numpy_helper.to_array(t).astype(dtype)
            g.initializer[i].CopyFrom(numpy_helper.from_array(a, t.name))
    for vi in list(g.input) + list(g.output):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = to
    del g.value_info[:]
    for node in g.node:
        for at in node.attribute:
            if node.op_type == "Cast" and at.name == "to" and at.i == TensorProto.FLOAT:
                at.i = to
            if at.type == onnx.AttributeProto.TENSOR and at.t.data_type == TensorProto.FLOAT:
                at.t.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(at.t).astype(dtype), at.t.name))
    onnx.checker.check_model(m)
    onnx.save(m, path)


def export_onnx(model, x, path, fixed=False):
    """Training-mode export.  Buffers (BN running stats) are saved and
    restored around the trace, so the model trains from its initial state.
    fixed: the batch of x, as torch.onnx.export writes it by default."""
    import onnx
    from onnx import numpy_helper

    model.train()
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    try:
        onnx_export(model, (x,), path, opset_version=OPSET,
                    training=torch.onnx.TrainingMode.TRAINING,
                    input_names=[IN_NAME], output_names=[OUT_NAME],
                    **export_kw(fixed))
    finally:
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])
    model.train()

    # The initializers must be the state_dict entries under their names, with
    # the initial values (the trace may have run BN forward on the buffers).
    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    inits = {t.name: t for t in proto.graph.initializer}
    state = reference_state(model)
    renamed = folded_names(state, inits, numpy_helper) if fixed else {}
    missing = [k for k in state if k not in inits and k not in renamed]
    if missing:
        die("%s: %d state_dict entr%s not found as ONNX initializer%s: %s\n"
            "  initializers not in state_dict: %s"
            % (path, len(missing), "y" if len(missing) == 1 else "ies",
               "" if len(missing) == 1 else "s", ", ".join(missing),
               ", ".join(sorted(set(inits) - set(state))) or "(none)"))
    patched, bad = [], []
    for k, v in state.items():
        if k in renamed:
            continue
        a = numpy_helper.to_array(inits[k])
        ref = v.numpy()
        if a.shape != ref.shape or a.dtype != ref.dtype:
            bad.append("%s: ONNX %s %s vs torch %s %s"
                       % (k, a.dtype, a.shape, ref.dtype, ref.shape))
        elif not np.array_equal(a, ref):
            if k in buffers:  # a BN buffer the trace updated: restore it
                inits[k].CopyFrom(numpy_helper.from_array(ref, k))
                patched.append(k)
            else:
                bad.append("%s: value differs from the initial parameter" % k)
    if bad:
        die("%s: initializers do not match the state_dict:\n  %s"
            % (path, "\n  ".join(bad)))
    if patched:
        onnx.save(proto, path)
    ins = [i.name for i in proto.graph.input]
    outs = [o.name for o in proto.graph.output]
    if ins != [IN_NAME] or outs[:1] != [OUT_NAME]:
        die("%s: graph inputs %s, outputs %s (want [%s] -> [%s, ...])"
            % (path, ins, outs, IN_NAME, OUT_NAME))
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    extra = sorted(set(inits) - set(state) -
                   set(name for name, _ in renamed.values()))
    return {"ops": dict(sorted(ops.items())), "graph_outputs": outs,
            "initializers": len(inits), "extra_initializers": extra,
            "patched_buffers": patched, "renamed": renamed}


# ---------------------------------------------------------------- train ----

def make_optimizer(args, params):
    if args.optimizer == "sgd":
        kw = dict(lr=args.lr, momentum=args.momentum, dampening=0.0,
                  nesterov=args.nesterov, weight_decay=args.weight_decay)
        return torch.optim.SGD(params, **kw), "torch.optim.SGD", kw
    kw = dict(lr=args.lr, betas=tuple(args.betas), eps=args.eps,
              weight_decay=args.weight_decay)
    return torch.optim.AdamW(params, **kw), "torch.optim.AdamW", kw


def train(args, model, x, y, autocast=False):
    params = list(model.parameters())
    opt, cls, kw = make_optimizer(args, params)
    B, M = args.batch, args.microbatches
    mb = B // M
    losses, norms = [], []
    model.train()
    opt.zero_grad()
    for step in range(args.steps):
        total = 0.0
        for j in range(M):
            lo = step * B + j * mb
            xb = torch.from_numpy(x[lo:lo + mb])
            yb = torch.from_numpy(y[lo:lo + mb])
            with torch.autocast("cpu", dtype=torch.bfloat16,
                                enabled=autocast):
                out = model(xb)
            loss = ce_loss(out.float(), yb)
            (loss / M).backward()
            total += loss.item()
        losses.append(total / M)
        if args.clip_norm is not None:
            norm = nn.utils.clip_grad_norm_(params, args.clip_norm)
        else:
            with torch.no_grad():
                norm = torch.norm(torch.stack(
                    [torch.norm(p.grad.detach(), 2) for p in params]), 2)
        norms.append(float(norm))
        opt.step()
        opt.zero_grad()
        print("step %d loss %.9g grad_norm %.6g" % (step, losses[-1],
                                                    norms[-1]))
    return np.array(losses, np.float64), np.array(norms, np.float64), cls, kw


def fp64_check(args, x, y, losses, state, rtol=1e-3, atol=1e-5):
    """Retrains from the same initial weights in float64; returns how far the
    float32 run is from it, in compare_train.py's measures."""
    import contextlib
    import io
    torch.manual_seed(args.seed)
    model, _ = build_model(args)
    model.double().train()
    x64 = x.astype(np.float64) if x.dtype == np.float32 else x
    with contextlib.redirect_stdout(io.StringIO()):
        l64, _, _, _ = train(args, model, x64, y)
    loss_err = float(np.max(np.abs(losses - l64) / np.abs(l64)))
    worst, where = 0.0, None
    for k, v in reference_state(model).items():
        b, a = v.numpy(), state[k].double().numpy()
        e = float(np.max(np.abs(a - b) / (atol / rtol + np.abs(b)))) \
            if b.size else 0.0
        if e > worst or where is None:
            worst, where = e, k
    print("fp64 check: float32 vs float64 reference: worst loss rel err "
          "%.3g, worst weight err %.3g (%s; |a-b|/(|b|+%g))"
          % (loss_err, worst, where, atol / rtol))
    return {"losses_fp64": l64.tolist(), "worst_loss_rel_err": loss_err,
            "worst_weight_err": worst, "worst_weight_tensor": where,
            "weight_err": "max |f32-f64| / (|f64| + %g)" % (atol / rtol)}


def autocast_check(args, x, y):
    """Retrains from the same initial weights under PyTorch's CPU mixed
    precision, torch.autocast("cpu", dtype=torch.bfloat16) around each
    forward; returns its step losses."""
    import contextlib
    import io
    torch.manual_seed(args.seed)
    model, _ = build_model(args)
    model.train()
    with contextlib.redirect_stdout(io.StringIO()):
        losses, _, _, _ = train(args, model, x, y, autocast=True)
    return losses


# ------------------------------------------------ row order, evaluation ----

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
IGNORE_INDEX = -100  # F.cross_entropy's and mpcc's default ignore_index


def splitmix64(state):
    """One SplitMix64 step: returns (new state, output)."""
    state = (state + GAMMA) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def shuffle_perm(seed, epoch, n):
    """The trainer's --shuffle order of epoch `epoch` over n rows
    (docs/trainer.md): Fisher-Yates from k = n-1 down to 1, swapping k with
    next() mod (k+1), next() being SplitMix64 started at the epoch-th output
    of SplitMix64 seeded with the seed."""
    _, state = splitmix64((seed + epoch * GAMMA) & MASK64)
    perm = list(range(n))
    for k in range(n - 1, 0, -1):
        state, r = splitmix64(state)
        j = r % (k + 1)
        perm[k], perm[j] = perm[j], perm[k]
    return perm


def row_stream(args, n):
    """Row index of each of the K*B positions the steps read."""
    perms = {}
    rows = []
    for p in range(args.steps * args.batch):
        epoch, k = divmod(p, n)
        if args.shuffle_seed is None:
            rows.append(k)
            continue
        if epoch not in perms:
            perm = shuffle_perm(args.shuffle_seed, epoch, n)
            assert sorted(perm) == list(range(n))
            if n > 3 and perm == list(range(n)):
                die("epoch %d's shuffled order is the file order" % epoch)
            perms[epoch] = perm
        rows.append(perms[epoch][k])
    return np.array(rows, np.int64)


def evaluate(model, xe, ye, ignore):
    """model.eval() loss and accuracy on the held-out rows, in one batch;
    labels equal to `ignore` (the ignore_index) count in neither."""
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(xe))
        y = torch.from_numpy(ye)
        if logits.dim() == 3:  # gpt: (N, T, V), classes last as in ce_loss
            logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
        elif logits.dim() == 2 and y.dim() == 2:  # gpt --flat-logits
            y = y.reshape(-1)
        loss = F.cross_entropy(logits, y, ignore_index=ignore).item()
        keep = y != ignore
        correct = int((logits.argmax(dim=1)[keep] == y[keep]).sum())
        count = int(keep.sum())
    model.train()
    return {"loss": loss, "correct": correct, "count": count,
            "accuracy": correct / count if count else None}


def eval_trace(args, model, xs, ys, xe, ye, ignore):
    """The evaluations the trainer makes with --eval-every E: after every
    E-th step (a fresh run from the same seed, stopped there) and after the
    last step (model, already trained)."""
    import contextlib
    import copy
    import io
    evals = []
    for step in range(args.eval_every or args.steps, args.steps,
                      args.eval_every or args.steps):
        sub = copy.copy(args)
        sub.steps = step
        torch.manual_seed(args.seed)
        fresh, _ = build_model(args)
        fresh.train()
        with contextlib.redirect_stdout(io.StringIO()):
            train(sub, fresh, xs, ys)
        evals.append(dict(step=step, **evaluate(fresh, xe, ye, ignore)))
    evals.append(dict(step=args.steps, **evaluate(model, xe, ye, ignore)))
    for e in evals:
        print("eval step %d: loss %.9g accuracy %s (%d/%d)"
              % (e["step"], e["loss"], e["accuracy"], e["correct"], e["count"]))
    return evals


# ----------------------------------------------------------------- main ----

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(DEFAULTS))
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--steps", type=int,
                    help="K (default per model: " + ", ".join(
                        "%s %d" % (m, d[0]) for m, d in DEFAULTS.items())
                    + ")")
    ap.add_argument("--batch", type=int,
                    help="B (default per model: " + ", ".join(
                        "%s %d" % (m, d[1]) for m, d in DEFAULTS.items())
                    + ")")
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    ap.add_argument("--lr", type=float,
                    help="default sgd 0.1, adamw 1e-3")
    ap.add_argument("--momentum", type=float, help="sgd (default 0.9)")
    ap.add_argument("--nesterov", action="store_true", help="sgd")
    ap.add_argument("--weight-decay", type=float,
                    help="default sgd 0, adamw 0.01")
    ap.add_argument("--betas", help="adamw, F,F (default 0.9,0.999)")
    ap.add_argument("--eps", type=float, help="adamw (default 1e-8)")
    ap.add_argument("--clip-norm", type=float,
                    help="clip_grad_norm_(params, F) before each step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--export-batch", type=int,
                    help="export as torch.onnx.export does by default: the "
                    "batch fixed at this many rows, constant folding on "
                    "(mpcc must re-batch it); final.npz then holds the "
                    "weights torch folded under their initializer names")
    ap.add_argument("--mlp-sizes", default="784,256,10",
                    help="mlp layer widths (e.g. 784,1024,1024,10)")
    ap.add_argument("--zero-init-residual", action="store_true",
                    help="resnet50: zero_init_residual=True; mobilenetv2, "
                         "efficientnet_b0: the same for their residual "
                         "blocks (the default inits are too ill-conditioned "
                         "at small images and batches for float32 results "
                         "to be reproducible; see --fp64-check)")
    ap.add_argument("--rows", type=int,
                    help="training rows in x.npy (default K*B); the steps "
                         "wrap around them epoch after epoch")
    ap.add_argument("--shuffle-seed", type=int,
                    help="read the rows in the order of the trainer's "
                         "--shuffle --seed S")
    ap.add_argument("--eval-rows", type=int,
                    help="also write N held-out rows (xe.npy, ye.npy) and "
                         "PyTorch's eval loss and accuracy on them (eval.json)")
    ap.add_argument("--eval-every", type=int,
                    help="eval.json also holds the evaluation after every "
                         "N-th step")
    ap.add_argument("--eval-ignored", type=int,
                    help="every K-th held-out row's labels are the "
                         "ignore_index (-100, or the model's)")
    ap.add_argument("--flat-logits", action="store_true",
                    help="gpt: logits flattened to (B*T, V), labels (N,T)")
    ap.add_argument("--gpt-T", type=int,
                    help="gpt: the context length (default %d); with "
                    "--export-batch, torch folds the (T,T) causal mask into "
                    "one constant of 4*T*T bytes" % GPT_CFG["T"])
    ap.add_argument("--tokens", action="store_true",
                    help="gpt: windows of one token stream (tokens.npy, "
                         "tokens.bin; tokens_eval.npy with --eval-rows)")
    ap.add_argument("--export-dtype", choices=("float64", "float16"),
                    help="the model file and x.npy in this type, as a model "
                         "exported after .double() or .half() is; PyTorch "
                         "trains in float32 (float16: from the weights and "
                         "data rounded to float16)")
    ap.add_argument("--autocast-check", action="store_true",
                    help="also train under torch.autocast('cpu', bfloat16) "
                         "and save its step losses (losses_autocast.npy)")
    ap.add_argument("--fp64-check", action="store_true",
                    help="also train in float64 and record how far the "
                         "float32 reference is from it (config.json "
                         "fp64_check): a bound on what any float32 trainer "
                         "can match")
    args = ap.parse_args()
    if args.gpt_T is not None:
        if args.model != "gpt" or args.gpt_T < 1:
            ap.error("--gpt-T is the gpt model's context length, >= 1")
        GPT_CFG["T"] = args.gpt_T

    steps, batch = DEFAULTS[args.model]
    args.steps = steps if args.steps is None else args.steps
    args.batch = batch if args.batch is None else args.batch
    if args.steps < 1 or args.batch < 1 or args.microbatches < 1:
        ap.error("--steps, --batch and --microbatches must be >= 1")
    if args.batch % args.microbatches:
        ap.error("--batch %d is not divisible by --microbatches %d"
                 % (args.batch, args.microbatches))
    if (args.model in BN_MODELS
            and args.batch // args.microbatches < 2):
        ap.error("BatchNorm in training mode needs >= 2 rows per "
                 "micro-batch (B/M = %d)" % (args.batch // args.microbatches))
    try:
        args.mlp_sizes = [int(s) for s in args.mlp_sizes.split(",")]
    except ValueError:
        ap.error("--mlp-sizes: want comma-separated integers")
    if len(args.mlp_sizes) < 2 or min(args.mlp_sizes) < 1:
        ap.error("--mlp-sizes: want at least two positive widths")
    if args.model != "mlp" and args.mlp_sizes != [784, 256, 10]:
        ap.error("--mlp-sizes is for --model mlp")
    if (args.flat_logits or args.tokens) and args.model != "gpt":
        ap.error("--flat-logits and --tokens are for --model gpt")
    if args.zero_init_residual and args.model not in ZERO_INIT_MODELS:
        ap.error("--zero-init-residual is for --model %s"
                 % "|".join(ZERO_INIT_MODELS))
    if args.rows is not None and args.rows < 1:
        ap.error("--rows must be >= 1")
    if args.eval_rows is not None and args.eval_rows < 1:
        ap.error("--eval-rows must be >= 1")
    if ((args.eval_every is not None or args.eval_ignored is not None)
            and args.eval_rows is None):
        ap.error("--eval-every and --eval-ignored need --eval-rows")
    if min(args.eval_every or 1, args.eval_ignored or 1) < 1:
        ap.error("--eval-every and --eval-ignored must be >= 1")

    if args.optimizer == "sgd":
        if args.betas is not None or args.eps is not None:
            ap.error("--betas/--eps are for --optimizer adamw")
        args.lr = 0.1 if args.lr is None else args.lr
        args.momentum = 0.9 if args.momentum is None else args.momentum
        args.weight_decay = (0.0 if args.weight_decay is None
                             else args.weight_decay)
        if args.nesterov and args.momentum <= 0:
            ap.error("--nesterov needs --momentum > 0")
    else:
        if args.momentum is not None or args.nesterov:
            ap.error("--momentum/--nesterov are for --optimizer sgd")
        args.lr = 1e-3 if args.lr is None else args.lr
        args.weight_decay = (0.01 if args.weight_decay is None
                             else args.weight_decay)
        args.eps = 1e-8 if args.eps is None else args.eps
        try:
            args.betas = ([0.9, 0.999] if args.betas is None
                          else [float(b) for b in args.betas.split(",")])
        except ValueError:
            args.betas = None
        if args.betas is None or len(args.betas) != 2:
            ap.error("--betas: want F,F")
    if args.clip_norm is not None and args.clip_norm <= 0:
        ap.error("--clip-norm must be > 0")
    return args


def save_tokens(args, n):
    """The stream of --tokens: the training windows' tokens t[:n*T+1] as
    int32 .npy and raw uint16 .bin, the held-out windows' as .npy."""
    T, t = GPT_CFG["T"], args.token_stream
    train = t[:n * T + 1]
    np.save(os.path.join(args.out, "tokens.npy"), train.astype(np.int32))
    train.astype("<u2").tofile(os.path.join(args.out, "tokens.bin"))
    if args.eval_rows:
        np.save(os.path.join(args.out, "tokens_eval.npy"), t[n * T:])


def main():
    args = parse_args()
    t0 = time.time()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)
    model, mcfg = build_model(args)
    model.train()
    n = args.steps * args.batch if args.rows is None else args.rows
    x, y, data_desc = make_data(args, n + (args.eval_rows or 0), mcfg)
    if args.export_dtype == "float16":
        x = round_to_half(model, x)
    ignore = mcfg.get("ignore_index", IGNORE_INDEX)
    if args.eval_rows:  # held-out rows: drawn after the training rows
        x, xe, y, ye = x[:n], x[n:], y[:n], y[n:].copy()
        if args.eval_ignored:
            ye[::args.eval_ignored] = ignore
    idx = row_stream(args, n)
    xs, ys = x[idx], y[idx]  # the rows of the steps, in step order

    onnx_path = os.path.join(args.out, "model.onnx")
    traced = args.export_batch or args.batch
    info = export_onnx(model, torch.from_numpy(xs[:traced]), onnx_path,
                       fixed=args.export_batch is not None)
    if args.export_dtype:
        retype_model(onnx_path, args.export_dtype)
    t_export = time.time() - t0
    print("exported %s: %d initializers (state_dict names: ok%s)"
          % (onnx_path, info["initializers"],
             "; restored traced BN buffers: %d" % len(info["patched_buffers"])
             if info["patched_buffers"] else ""))
    if info["extra_initializers"]:
        print("  initializers not in state_dict: %s"
              % ", ".join(info["extra_initializers"]))
    print("  graph outputs: %s" % ", ".join(info["graph_outputs"]))
    print("  ops: %s" % ", ".join("%s %d" % kv for kv in info["ops"].items()))

    t1 = time.time()
    losses, norms, opt_cls, opt_kw = train(args, model, xs, ys)
    t_train = time.time() - t1
    evals = eval_trace(args, model, xs, ys, xe, ye, ignore) \
        if args.eval_rows else None

    fp64 = fp64_check(args, xs, ys, losses, reference_state(model)) \
        if args.fp64_check else None

    np.save(os.path.join(args.out, "x.npy"),
            x.astype(args.export_dtype) if args.export_dtype else x)
    np.save(os.path.join(args.out, "y.npy"), y)
    if args.tokens:
        save_tokens(args, n)
    if args.eval_rows:
        np.save(os.path.join(args.out, "xe.npy"), np.ascontiguousarray(xe))
        np.save(os.path.join(args.out, "ye.npy"), ye)
        with open(os.path.join(args.out, "eval.json"), "w") as f:
            json.dump({"rows": args.eval_rows, "ignore_index": ignore,
                       "ignored_every": args.eval_ignored,
                       "mode": "model.eval(), torch.no_grad(), all rows in "
                               "one forward",
                       "loss": "F.cross_entropy(logits, y, ignore_index=%d) "
                               "(mean over the labels not ignored)" % ignore,
                       "accuracy": "argmax over the classes == label, over "
                                   "the labels not ignored",
                       "evals": evals}, f, indent=2)
            f.write("\n")
    np.save(os.path.join(args.out, "losses.npy"), losses)
    if args.autocast_check:
        np.save(os.path.join(args.out, "losses_autocast.npy"),
                autocast_check(args, xs, ys))
    np.save(os.path.join(args.out, "grad_norms.npy"), norms)
    final = {k: v.numpy().astype(np.float32)
             for k, v in reference_state(model).items()}
    for k, (name, transposed) in info["renamed"].items():  # as in the model
        v = final.pop(k)
        final[name] = np.ascontiguousarray(v.T) if transposed else v
    np.savez(os.path.join(args.out, "final.npz"), **final)

    B, M = args.batch, args.microbatches
    cfg = collections.OrderedDict()
    cfg["model"] = args.model
    cfg["model_config"] = mcfg
    cfg["steps"] = args.steps
    cfg["batch"] = B
    cfg["microbatches"] = M
    cfg["micro_batch_size"] = B // M
    cfg["seed"] = args.seed
    cfg["optimizer"] = args.optimizer
    cfg["lr"] = args.lr
    if args.optimizer == "sgd":
        cfg["momentum"] = args.momentum
        cfg["dampening"] = 0.0
        cfg["nesterov"] = args.nesterov
    else:
        cfg["betas"] = args.betas
        cfg["eps"] = args.eps
    cfg["weight_decay"] = args.weight_decay
    cfg["clip_norm"] = args.clip_norm
    cfg["torch_optimizer"] = {"class": opt_cls,
                              "args": dict(opt_kw, betas=list(opt_kw["betas"]))
                              if "betas" in opt_kw else opt_kw,
                              "params": "list(model.parameters())"}
    cfg["clip"] = (None if args.clip_norm is None else
                   "torch.nn.utils.clip_grad_norm_(params, %r, norm_type=2.0)"
                   " after the backward passes, before optimizer.step()"
                   % args.clip_norm)
    cfg["step"] = ("for each of the M micro-batches (B/M consecutive rows): "
                   "loss = mean cross-entropy; (loss / M).backward(); then "
                   "[clip]; optimizer.step(); optimizer.zero_grad()")
    cfg["loss"] = ("F.cross_entropy(logits.reshape(-1, %d), y.reshape(-1)) "
                   "(mean over B*T token positions)" % GPT_CFG["vocab"]
                   if args.model == "gpt" else
                   "F.cross_entropy(logits, y, ignore_index=%d) (mean over the "
                   "labelled pixels)" % SEG_CFG["ignore_index"]
                   if args.model in SEG_MODELS else
                   "F.cross_entropy(logits, y) (mean over the batch)")
    cfg["reported_loss"] = ("losses[i]: the loss of step i before its update,"
                            " mean over the M micro-batch losses")
    cfg["train_mode"] = ("model.train() throughout; no Dropout with p > 0 "
                         "in the model")
    if args.model in BN_MODELS:
        cfg["bn_momentum"] = 0.1
        cfg["bn_running_var_note"] = (
            "torch updates running_var with the UNBIASED batch variance "
            "(n/(n-1) * population var, n = rows*H*W per channel); the ONNX "
            "BatchNormalization-15 spec says population variance. The "
            "reference (final.npz) is torch's. Normalization itself uses the "
            "population variance in both. ONNX momentum attribute = 1 - 0.1.")
        cfg["grad_accumulation_note"] = (
            "BatchNorm normalizes with the statistics of each micro-batch "
            "(B/M rows) and updates running_mean/running_var (momentum 0.1, "
            "unbiased variance) once per micro-batch, i.e. M times per step, "
            "as GPipe does; with M>1 the result differs from one full-batch "
            "forward.")
    cfg["input"] = {"name": IN_NAME, "dtype": str(x.dtype),
                    "shape": ["batch"] + list(x.shape[1:])}
    cfg["output"] = OUT_NAME
    cfg["labels"] = {"dtype": str(y.dtype),
                     "shape": ["batch"] + list(y.shape[1:])}
    cfg["data"] = {"rows": n, "generator": "numpy.random.default_rng(%d)"
                   % args.seed, "recipe": data_desc,
                   "batch_rows": "step i uses rows i*B .. i*B+B-1; "
                                 "micro-batch j of it rows i*B+j*B/M .. "
                                 "i*B+(j+1)*B/M-1"}
    if args.rows is not None or args.shuffle_seed is not None:
        cfg["data"]["batch_rows"] = (
            "step i reads positions i*B .. i*B+B-1 of the row stream: "
            "position p is row p mod N of epoch p // N (N = %d), %s"
            % (n, "in file order" if args.shuffle_seed is None else
               "row shuffle_perm(%d, epoch, N)[p mod N] (the trainer's "
               "--shuffle --seed %d)" % (args.shuffle_seed, args.shuffle_seed)))
    if args.eval_rows:
        cfg["data"]["eval"] = ("xe.npy, ye.npy: %d held-out rows, drawn after "
                               "the training rows; eval.json" % args.eval_rows)
    cfg["init"] = "torch.manual_seed(%d) right before building the model" \
        % args.seed
    cfg["onnx"] = {"file": "model.onnx", "opset": OPSET,
                   "export": "torch.onnx.export(training=TrainingMode."
                             "TRAINING, do_constant_folding=False, "
                             "dynamic_axes batch)" if args.export_batch is None
                             else "torch.onnx.export(training=TrainingMode."
                             "TRAINING) of a batch of %d rows: the batch fixed"
                             ", torch's constant folding" % args.export_batch,
                   "renamed": {k: {"initializer": n, "transposed": t}
                               for k, (n, t) in info["renamed"].items()},
                   "ops": info["ops"], "graph_outputs": info["graph_outputs"],
                   "initializers": info["initializers"],
                   "extra_initializers": info["extra_initializers"]}
    cfg["files"] = {
        "x.npy": "inputs", "y.npy": "labels",
        "losses.npy": "float64 [K] step losses",
        "grad_norms.npy": "float64 [K] total grad 2-norm before clipping",
        "final.npz": "state_dict after K steps (no num_batches_tracked), "
                     "float32"}
    cfg["state_dict_entries"] = len(final)
    if fp64 is not None:
        cfg["fp64_check"] = fp64
    cfg["torch_version"] = torch.__version__
    cfg["torch_threads"] = 1
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    print("wrote %s: %d steps, %d state_dict entries; export %.1fs, "
          "train %.1fs, total %.1fs"
          % (args.out, args.steps, len(final), t_export, t_train,
             time.time() - t0))


if __name__ == "__main__":
    main()
