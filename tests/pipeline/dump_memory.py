"""--dump=memory against the model file: the parameters row is the model's
float initializers (each buffer rounded up to 64 bytes), AdamW's state is
two of them, the gradient sums (micro-batches) one, and each device's rows
add up to the arena of the compile report's `memory plan` line.

Usage: dump_memory.py MPCC MODEL.onnx"""
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def round64(n):
    return (n + 63) // 64 * 64


def rows_of(text):
    """device -> {row: MB}, in the dump's order."""
    devices, cur = {}, None
    for line in text.splitlines():
        if re.match(r"^(cpu|cuda):\d+$", line):
            cur = devices.setdefault(line, {})
            continue
        m = re.match(r"^  (\S.*?) +([0-9.]+) MB", line)
        if cur is not None and m:
            cur[m.group(1)] = float(m.group(2))
    return devices


def main():
    mpcc, model = sys.argv[1:3]
    params = sum(round64(numpy_helper.to_array(t).nbytes)
                 for t in onnx.load(model).graph.initializer
                 if numpy_helper.to_array(t).dtype == np.float32)
    failures = 0
    for devs in (["-cpus", "1"], ["-cpus", "2", "--schedule=1f1b"]):
        cmd = [mpcc, model, "-batch", "32", "--microbatches=4", "--optimizer=adamw",
               "--dump=memory"] + devs
        r = subprocess.run(cmd, capture_output=True, text=True,
                           env={"MPCC_CPU_PROFILE": "1e10,1e10"})
        if r.returncode:
            sys.exit("FAIL: %s: %s" % (" ".join(cmd), r.stderr))
        print(" ".join(cmd[2:]))
        print(r.stdout)
        rows = rows_of(r.stdout)
        report = dict(re.findall(r"mpcc: +(\S+) +memory plan ([0-9.]+) MB", r.stderr))
        got = sum(d.get("parameters", 0) for d in rows.values())
        if not rows:
            sys.exit("FAIL: no device in the dump:\n" + r.stdout)
        # the dump prints MB to 2 decimals (each figure within 0.005), the
        # report to 1 (within 0.05)
        n = len(rows)
        checks = [
            ("parameters", got, params / 1e6, 0.005 * n),
            ("optimizer state", sum(d.get("optimizer state", 0) for d in rows.values()),
             2 * params / 1e6, 0.005 * n),
            ("gradient sums", sum(d.get("gradient sums", 0) for d in rows.values()),
             params / 1e6, 0.005 * n),
        ]
        for dev, d in rows.items():
            parts = [v for k, v in d.items() if k != "arena"]
            checks.append(("%s rows vs arena" % dev, sum(parts), d["arena"],
                           0.005 * (len(parts) + 1)))
            checks.append(("%s arena vs report" % dev, d["arena"], float(report[dev]), 0.055))
        if sorted(rows) != sorted(report):
            print("FAIL: devices %s, the report's %s" % (sorted(rows), sorted(report)))
            failures += 1
        for what, a, b, tol in checks:
            ok = abs(a - b) <= tol
            print("%-28s %10.2f  want %10.2f  %s" % (what, a, b, "ok" if ok else "FAIL"))
            failures += not ok
    sys.exit(1 if failures else 0)


main()
