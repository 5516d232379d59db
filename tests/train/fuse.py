#!/usr/bin/python3
"""Fusion changes no number: a model compiled as mpcc writes it (chains of
elementwise nodes run as one kernel each) and with --no-fuse (one kernel
per node), on each layout, trains to the same losses and final weights bit
for bit (--synthetic data, one BLAS thread); with --infer, the forward-only
programs write the same outputs bit for bit. Each fused program must hold
at least one fused chain, and the --no-fuse one none. Under
--precision=bf16 each node of a chain rounds its value as its own kernel
stores it, so the numbers hold there too. The programs are
built with the line mpcc printed plus -Wall -Werror.

    /usr/bin/python3 tests/train/fuse.py MPCC WORKDIR MODEL "MPCC_ARGS" "TRAIN_ARGS" LAYOUT...

A LAYOUT is more mpcc options ("-cpus 1", "-cpus 2 --schedule=zb"), or
"--infer" for the forward-only program (its inputs: small random .npy).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np

ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")
CHAIN = "/* fused:"   # a chain of two nodes or more (under bf16 one node may be a chain)


def build(mpcc, model, opts, name):
    """mpcc, then the build line its header gives; the program's text."""
    subprocess.run([mpcc, model, *opts, "-o", name + ".c"], check=True, env=ENV,
                   stderr=subprocess.DEVNULL)
    with open(name + ".c") as f:
        text = f.read()
    line = re.search(r"^ \* build: +(.*)$", text, re.M).group(1)
    cmd = shlex.split(line)
    cmd[cmd.index("-o") + 1] = name
    subprocess.run(cmd + ["-Wall", "-Werror"], check=True)
    return text


def infer_inputs(mpcc, model, args):
    """A .npy of small random values for each graph input; the outputs."""
    ir = subprocess.run([mpcc, model, *args, "--dump=ir"], check=True, capture_output=True,
                        text=True, env=ENV).stdout
    rng = np.random.RandomState(0)
    inputs = []
    for name, dtype, dims in re.findall(r"^input +%(\S+) (\w+)\[([\d,]*)\]", ir, re.M):
        shape = [int(d) for d in dims.split(",") if d]
        if dtype == "f32":
            x = rng.standard_normal(shape).astype(np.float32)
        else:
            x = rng.randint(0, 4, shape).astype({"i64": np.int64, "i32": np.int32}[dtype])
        np.save(name + ".npy", x)
        inputs += ["--input", "%s=%s.npy" % (name, name)]
    return inputs, re.findall(r"^output +%(\S+)", ir, re.M)


def run(name, args, layout, train_args, inputs, outputs):
    """Runs the program; the files whose bytes must agree."""
    if layout == ["--infer"]:
        files = ["%s.%s.npy" % (name, o) for o in outputs]
        subprocess.run(["./" + name, *inputs] + sum(
            (["--output", "%s=%s" % (o, f)] for o, f in zip(outputs, files)), []),
            check=True, env=ENV, stdout=subprocess.DEVNULL)
        return files
    subprocess.run(["./" + name, "--synthetic", "--save", name + ".safetensors", "--loss-log",
                    name + ".losses", *train_args], check=True, env=ENV,
                   stdout=subprocess.DEVNULL)
    return [name + ".losses", name + ".safetensors"]


def same_files(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def check_layout(mpcc, model, args, train_args, layout, k):
    layout = shlex.split(layout)
    inputs, outputs = infer_inputs(mpcc, model, args) if layout == ["--infer"] else ([], [])
    fused = build(mpcc, model, args + layout, "fused%d" % k)
    unfused = build(mpcc, model, args + layout + ["--no-fuse"], "unfused%d" % k)
    if CHAIN not in fused or CHAIN in unfused:
        sys.exit("fuse.py: %s: expected fused chains with fusion and none with --no-fuse"
                 % " ".join(layout))
    a = run("fused%d" % k, args, layout, train_args, inputs, outputs)
    b = run("unfused%d" % k, args, layout, train_args, inputs, outputs)
    for x, y in zip(a, b):
        if not same_files(x, y):
            sys.exit("fuse.py: %s: %s and %s differ" % (" ".join(layout), x, y))
    summary = re.search(r"^ \* fused: +(.*)$", fused, re.M).group(1)
    print("same numbers with and without fusion, %s: %s" % (" ".join(layout), summary))


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    mpcc, work, model = (os.path.abspath(p) for p in sys.argv[1:4])
    args, train_args = shlex.split(sys.argv[4]), shlex.split(sys.argv[5])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chdir(work)
    for k, layout in enumerate(sys.argv[6:]):
        check_layout(mpcc, model, args, train_args, layout, k)


if __name__ == "__main__":
    main()
