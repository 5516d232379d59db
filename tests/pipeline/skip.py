#!/usr/bin/python3
"""Skip connections are sent straight to their reader, and the predicted
trace is valid Chrome trace JSON.

A chain x -> gemm0 -> relu0 -> gemm1 -> relu1 -> gemm2 -> add(., relu0) cut
into 3 stages after relu0 and relu1 (--split): relu0's output must go from
cpu:0 to stage 2 directly (a copy on cpu:0's stream), never through cpu:1.
The same model on 1 and 3 devices trains to bit-identical weights. The
--trace file (predicted by mpcc, measured by ./train) must load as JSON with one process per device, complete events
for every action and flow arrows for copies.

    /usr/bin/python3 tests/pipeline/skip.py MPCC WORKDIR
"""
import json
import os
import re
import subprocess
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from build_line import libraries  # noqa: E402

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(path):
    rng = np.random.default_rng(1)
    nodes, inits, x = [], [], "input"
    for i in range(3):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((16, 16)) * 0.3).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Gemm", [x, f"w{i}"], [f"g{i}"], name=f"gemm{i}"))
        if i < 2:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [f"relu{i}_out"], name=f"relu{i}"))
            x = f"relu{i}_out"
    nodes.append(helper.make_node("Add", ["g2", "relu0_out"], ["out"], name="skip_add"))
    graph = helper.make_graph(
        nodes, "skip", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def run(cmd, cwd):
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))


def build_and_train(mpcc, work, name, *args):
    run([mpcc, "skip.onnx", "-batch", "8", "--microbatches=2", *args, "-o", f"{name}.c"], work)
    run(["cc", "-O2", "-Wall", "-Werror", f"{name}.c", "-o", name,
         *libraries(os.path.join(work, f"{name}.c"))], work)
    run([f"./{name}", "--data", "x.npy", "--labels", "y.npy", "--steps", "3",
         "--save", f"{name}.safetensors"], work)
    with open(os.path.join(work, f"{name}.c")) as f:
        return f.read()


def check_trace(path, ndev):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    pids = {e["pid"] for e in events if e.get("ph") == "X"}
    runs = [e for e in events if e.get("ph") == "X" and e["cat"] == "compute"]
    starts = [e for e in events if e.get("ph") == "s"]
    ends = [e for e in events if e.get("ph") == "f"]
    names = [e for e in events if e.get("name") == "process_name"]
    assert pids == set(range(ndev)), pids
    assert len(names) == ndev
    assert len(runs) == ndev * 0 + 3 * (2 * 2 + 1), len(runs)   # F and B per mb, one update
    assert starts and len(starts) == len(ends)
    assert all(e["dur"] > 0 for e in runs)


def main():
    mpcc, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model(os.path.join(work, "skip.onnx"))
    rng = np.random.default_rng(2)
    np.save(os.path.join(work, "x.npy"), rng.standard_normal((24, 16)).astype(np.float32))
    np.save(os.path.join(work, "y.npy"), rng.integers(0, 16, 24).astype(np.int64))
    one = build_and_train(mpcc, work, "one", "-cpus", "1")
    three = build_and_train(mpcc, work, "three", "-cpus", "3", "--schedule=1f1b",
                            "--split=relu0,relu1", "--trace=sched.json")
    copies = re.findall(r"mprt_memcpy_async\(.*/\* (cpu:\d) (send|send-back): "
                        r"'relu0_out' mb (\d) to stage (\d) \*/", three)
    direct = {(dev, stage) for dev, kind, mb, stage in copies if kind == "send"}
    assert direct == {("cpu:0", "1"), ("cpu:0", "2")}, direct
    assert "relu0_out" not in "".join(re.findall(r"/\* cpu:1 send: '([^']*)'", three))
    with open(os.path.join(work, "one.safetensors"), "rb") as a, \
            open(os.path.join(work, "three.safetensors"), "rb") as b:
        assert a.read() == b.read(), "3 devices differ from 1"
    check_trace(os.path.join(work, "sched.json"), 3)
    run(["./three", "--data", "x.npy", "--labels", "y.npy", "--steps", "2", "--trace",
         "run.json"], work)
    check_trace(os.path.join(work, "run.json"), 3)   # the measured timeline, same format
    print("relu0_out goes from cpu:0 to stages 1 and 2 directly; 3 devices = 1 device; "
          "trace ok")


if __name__ == "__main__":
    main()
