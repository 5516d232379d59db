"""Runs mpcc's forward pass against the ONNX backend conformance suite.

For every test folder under DATA/{node,pytorch-converted,pytorch-operator,
simple}/ (Debian's libonnx-testdata: model.onnx and test_data_set_*/ with
input_N.pb and output_N.pb), a test is *attempted* when mpcc has a CPU
forward kernel for every op that is left once shapes are fixed and constants
folded (`mpcc --infer --check`, so the op table decides, never a list kept
here) and the skip file does not list it. An attempted test is compiled with
`mpcc --infer` (--shapes from the stored inputs, so every dimension is
static), built with the build line the generated file states (at -O1), run
on every data set and compared with the stored outputs:
|got - expected| <= atol + rtol * |expected| (default rtol 1e-5, atol 1e-6),
exact for integer and bool outputs, NaN where NaN is expected.

    /usr/bin/python3 tests/conformance/run.py run MPCC [--skip FILE] [--results FILE]
                                                   [--jobs 2] [--only REGEX] [--verbose]
    /usr/bin/python3 tests/conformance/run.py table RESULTS   # docs/conformance.md

The skip file has one test per line, `suite/test  reason`, or
`suite/test  tol=RTOL,ATOL  reason` to compare that test with other
tolerances; every line needs its reason. `run` exits 1 when an attempted test
fails (mpcc, the C compiler or the program fails, or an output differs) and
prints passed/attempted/total per suite folder.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

SUITES = ["node", "pytorch-converted", "pytorch-operator", "simple"]
DATA = "/usr/share/libonnx-testdata/data"
RTOL, ATOL = 1e-5, 1e-6
STATUSES = ["pass", "fail", "skip", "unsupported"]


class Failure(Exception):
    """A test that failed: the message is its one-line reason."""


# ---- what mpcc supports, from its op table ----

def op_table(mpcc):
    """(ops with a CPU forward kernel, ops folded at compile time)."""
    out = subprocess.run([mpcc, "--list-ops"], capture_output=True, text=True, check=True)
    cpu, fold = set(), set()
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not line.startswith("| ") or cells[0] in ("op", "---"):
            continue
        if cells[4] == "yes":
            cpu.add(cells[0])
        if cells[3] == "yes":
            fold.add(cells[0])
    if not cpu:
        raise SystemExit("run.py: `%s --list-ops` lists no op with a CPU forward kernel" % mpcc)
    return cpu, fold


def model_ops(graph):
    """Op types of the graph and its subgraphs; other domains as domain.op."""
    ops = set()
    for node in graph.node:
        ops.add(node.op_type if node.domain in ("", "ai.onnx") else
                "%s.%s" % (node.domain, node.op_type))
        for attr in node.attribute:
            for g in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
                ops |= model_ops(g)
    return ops


# ---- the skip file ----

def load_skips(path):
    """{key: (reason, tol or None)}; tol is (rtol, atol)."""
    skips = {}
    if not path:
        return skips
    with open(path) as f:
        for num, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            key, rest = parts[0], parts[1].strip() if len(parts) > 1 else ""
            tol = None
            m = re.match(r"tol=([^,\s]+),(\S+)\s*(.*)$", rest)
            if m:
                tol = (float(m.group(1)), float(m.group(2)))
                rest = m.group(3).strip()
            if not rest:
                raise SystemExit("%s:%d: '%s' needs a reason" % (path, num, key))
            if key in skips:
                raise SystemExit("%s:%d: '%s' is listed twice" % (path, num, key))
            skips[key] = (rest, tol)
    return skips


# ---- one test ----

def read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def graph_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def data_sets(test_dir):
    return sorted(d for d in os.listdir(test_dir)
                  if d.startswith("test_data_set_") and os.path.isdir(os.path.join(test_dir, d)))


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def run(cmd, cwd, what):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        err = [l for l in (p.stderr + p.stdout).splitlines() if "error" in l]
        line = first_line("\n".join(err) or p.stderr or p.stdout)
        if p.returncode < 0:
            line = "killed by signal %d %s" % (-p.returncode, line)
        raise Failure("%s: %s" % (what, line or "exit status %d" % p.returncode))
    return p


def shapes_arg(inputs, arrays):
    """--shapes for the inputs whose names it can carry."""
    items = []
    for inp, a in zip(inputs, arrays):
        if "," in inp.name or ":" in inp.name:
            continue
        items.append("%s:%s" % (inp.name, "x".join(str(d) for d in a.shape)))
    return ["--shapes=" + ",".join(items)] if items else []


def missing_ops(check_stdout):
    """The op types `mpcc --check` lists as missing something."""
    ops = []
    for line in check_stdout.splitlines():
        m = re.match(r"\s+(\S+)\s+\d+ nodes?\s+missing:", line)
        if m:
            ops.append(m.group(1))
    return ops


def compare(name, got, exp, tol):
    rtol, atol = tol
    if got.dtype != exp.dtype:
        raise Failure("output '%s': dtype %s, expected %s" % (name, got.dtype, exp.dtype))
    if got.shape != exp.shape:
        raise Failure("output '%s': shape %s, expected %s" % (name, got.shape, exp.shape))
    if exp.dtype.kind in "fc":
        g, e = got.astype(np.float64), exp.astype(np.float64)
        nan = np.isnan(e)
        ok = np.where(nan, np.isnan(g), (g == e) | (np.abs(g - e) <= atol + rtol * np.abs(e)))
    else:
        ok = got == exp
    if not np.all(ok):
        bad = np.argwhere(~np.asarray(ok))
        i = tuple(bad[0])
        raise Failure("output '%s': %d of %d elements differ, first at %s: %r, expected %r"
                      % (name, len(bad), exp.size, list(i), got[i].item(), exp[i].item()))


def build(mpcc, model_path, shapes, work):
    run([mpcc, model_path, "--infer", *shapes, "-o", "infer.c"], work, "mpcc --infer")
    with open(os.path.join(work, "infer.c")) as f:
        head = f.read(4096)
    m = re.search(r"^ \* build:\s+(.*)$", head, re.M)
    if not m:
        raise Failure("infer.c states no build line")
    cmd = ["-O1" if w == "-O2" else w for w in m.group(1).split()]
    run(cmd, work, "cc")


def attempt(mpcc, test_dir, model, work, tol):
    """Compiles and runs the test; raises Failure. Returns the data sets run."""
    model_path = os.path.join(test_dir, "model.onnx")
    inputs = graph_inputs(model)
    built = None
    sets = data_sets(test_dir)
    for ds in sets:
        d = os.path.join(test_dir, ds)
        arrays = [read_tensor(os.path.join(d, "input_%d.pb" % k)) for k in range(len(inputs))]
        shapes = shapes_arg(inputs, arrays)
        if shapes != built:
            build(mpcc, model_path, shapes, work)
            built = shapes
        cmd = ["./infer"]
        for k, (inp, a) in enumerate(zip(inputs, arrays)):
            np.save(os.path.join(work, "in%d.npy" % k), a)
            cmd += ["--input", "%s=in%d.npy" % (inp.name, k)]
        outputs = model.graph.output
        for k, out in enumerate(outputs):
            cmd += ["--output", "%s=out%d.npy" % (out.name, k)]
        run(cmd, work, "./infer (%s)" % ds)
        for k, out in enumerate(outputs):
            exp_path = os.path.join(d, "output_%d.pb" % k)
            if os.path.exists(exp_path):
                compare(out.name, np.load(os.path.join(work, "out%d.npy" % k)),
                        read_tensor(exp_path), tol)
    return len(sets)


def classify(mpcc, cpu, fold, suite, name, test_dir, skips):
    """(status, reason, missing ops) of one test."""
    key = "%s/%s" % (suite, name)
    model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    ops = model_ops(model.graph) - {"Constant"}
    never = sorted(ops - cpu - fold)
    if never:   # no kernel and not foldable: nothing to ask mpcc
        return "unsupported", "", never
    inputs = graph_inputs(model)
    sets = data_sets(test_dir)
    if not sets:
        return "unsupported", "no test data", []
    for inp in inputs:
        if inp.type.WhichOneof("value") != "tensor_type":
            return "unsupported", "an input that is not a tensor", []
    work = tempfile.mkdtemp(prefix="conf-")
    try:
        d = os.path.join(test_dir, sets[0])
        try:
            arrays = [read_tensor(os.path.join(d, "input_%d.pb" % k))
                      for k in range(len(inputs))]
        except (OSError, ValueError, TypeError) as e:
            return "unsupported", "inputs numpy cannot hold (%s)" % first_line(str(e)), []
        p = subprocess.run([mpcc, os.path.join(test_dir, "model.onnx"), "--infer", "--check",
                            *shapes_arg(inputs, arrays)], capture_output=True, text=True,
                           cwd=work, timeout=300)
        missing = missing_ops(p.stdout)
        if p.returncode != 0 and not missing and "error" in p.stderr:
            # mpcc stopped before listing (shapes could not be inferred): the ops
            # without a CPU kernel, if any, are what it lacks
            missing = sorted(ops - cpu)
        if missing:
            return "unsupported", "", missing
        if key in skips:
            return "skip", skips[key][0], []
        tol = skips[key][1] if key in skips else None
        try:
            if p.returncode != 0:
                raise Failure("mpcc --infer --check: " + first_line(p.stderr))
            attempt(mpcc, test_dir, model, work, tol or (RTOL, ATOL))
        except Failure as e:
            return "fail", str(e), []
        except subprocess.TimeoutExpired as e:
            return "fail", "timed out: %s" % " ".join(e.cmd[:2]), []
        return "pass", "", []
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- the whole suite ----

def all_tests(data):
    for suite in SUITES:
        root = os.path.join(data, suite)
        for name in sorted(os.listdir(root)):
            if os.path.isfile(os.path.join(root, name, "model.onnx")):
                yield suite, name, os.path.join(root, name)


def cmd_run(args):
    args.mpcc = os.path.abspath(args.mpcc)
    cpu, fold = op_table(args.mpcc)
    skips = load_skips(args.skip)
    tests = list(all_tests(args.data))
    known = {"%s/%s" % (s, n) for s, n, _ in tests}
    stale = sorted(set(skips) - known)
    if stale:
        raise SystemExit("run.py: %s lists tests the suite does not have: %s"
                         % (args.skip, ", ".join(stale)))
    chosen = [t for t in tests if not args.only or re.search(args.only, "%s/%s" % t[:2])]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(classify, args.mpcc, cpu, fold, s, n, d, skips): (s, n)
                   for s, n, d in chosen}
        for fut in concurrent.futures.as_completed(futures):
            s, n = futures[fut]
            status, reason, missing = fut.result()
            key = "%s/%s" % (s, n)
            if status == "pass" and key in skips and skips[key][1]:
                reason = "tol=%g,%g: %s" % (skips[key][1] + (skips[key][0],))
            results[key] = {"status": status, "reason": reason, "missing": missing}
            if args.verbose or status == "fail":
                print("%-11s %s %s" % (status.upper() if status == "fail" else status, key,
                                       reason or ", ".join(missing)), flush=True)
    if args.results:
        os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
        with open(args.results, "w") as f:
            json.dump({"results": dict(sorted(results.items()))}, f, indent=1, sort_keys=True)
            f.write("\n")
    failed = 0
    for suite, c in counts(results).items():
        print("%-18s %4d passed / %4d attempted / %4d total  (%d failed, %d skipped, "
              "%d unsupported)" % (suite, c["pass"], c["attempted"], c["total"], c["fail"],
                                   c["skip"], c["unsupported"]))
        failed += c["fail"]
    print("%d failed" % failed)
    return 1 if failed else 0


def counts(results):
    out = {}
    for suite in SUITES:
        c = {s: 0 for s in STATUSES}
        for key, r in results.items():
            if key.split("/", 1)[0] == suite:
                c[r["status"]] += 1
        c["attempted"] = c["pass"] + c["fail"]
        c["total"] = sum(c[s] for s in STATUSES)
        if c["total"]:
            out[suite] = c
    return out


# ---- docs/conformance.md ----

def cmd_table(args):
    with open(args.results) as f:
        results = json.load(f)["results"]
    w = sys.stdout.write
    w("# ONNX conformance: forward outputs\n\n"
      "Generated by `tests/conformance/run.py` (`cmake --build build --target "
      "conformance_md`); do not edit. The CTest `conformance.forward` runs the suite "
      "and `docs.conformance_md` checks this file against its results.\n\n"
      "Every test of Debian's `libonnx-testdata` (the ONNX backend test suite) is "
      "compiled with `mpcc --infer` when mpcc has a CPU forward kernel for every op "
      "left after shapes are fixed and constants folded; the program runs on every "
      "stored data set and its outputs must match the stored ones within 1e-5 "
      "relative and 1e-6 absolute (exact for integers and bools). *Attempted* is "
      "passed plus failed; skipped tests are listed with their reason in "
      "`tests/conformance/skip.txt`; *unsupported* names the ops without a CPU "
      "forward kernel.\n\n"
      "| suite | passed | attempted | total | skipped | unsupported |\n"
      "|---|---|---|---|---|---|\n")
    allc = counts(results)
    for suite, c in allc.items():
        w("| %s | %d | %d | %d | %d | %d |\n" % (suite, c["pass"], c["attempted"], c["total"],
                                                 c["skip"], c["unsupported"]))
    w("| all | %d | %d | %d | %d | %d |\n" % tuple(
        sum(c[k] for c in allc.values())
        for k in ("pass", "attempted", "total", "skip", "unsupported")))
    for suite in allc:
        w("\n## %s\n\n| test | result | reason |\n|---|---|---|\n" % suite)
        for key, r in sorted(results.items()):
            s, name = key.split("/", 1)
            if s != suite:
                continue
            reason = r["reason"]
            if r["status"] == "unsupported" and r["missing"]:
                reason = "no CPU kernel: " + ", ".join(r["missing"])
            w("| %s | %s | %s |\n" % (name, r["status"], reason.replace("|", "\\|")))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the suite")
    r.add_argument("mpcc")
    r.add_argument("--data", default=DATA)
    r.add_argument("--skip", default=os.path.join(os.path.dirname(__file__), "skip.txt"))
    r.add_argument("--results", help="write every test's result as JSON")
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--only", help="only tests whose suite/name matches this regex")
    r.add_argument("--verbose", action="store_true")
    t = sub.add_parser("table", help="docs/conformance.md from a results file")
    t.add_argument("results")
    args = ap.parse_args()
    return cmd_run(args) if args.cmd == "run" else cmd_table(args)


if __name__ == "__main__":
    sys.exit(main())
