#!/usr/bin/python3
"""Closing the loop: ./train --profile writes per-node times and
mpcc --measured plans with them.

Trains the MLP sample on 2 CPU devices with --profile, then plans again with
--measured: each stage's predicted forward, backward and update times in
--dump=partition must be the sums of the profile's times of that stage's
nodes (forward / backward / update phases), and a profile that is not the
trainer's is refused with a one-line error.

    /usr/bin/python3 tests/pipeline/measured.py MPCC MODEL WORKDIR
"""
import json
import os
import re
import subprocess
import sys


def main():
    mpcc, model, work = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    os.makedirs(work, exist_ok=True)
    common = [model, "-batch", "32", "--microbatches=4", "-cpus", "2", "--schedule=1f1b",
              "--split=/0/Gemm"]
    env = dict(os.environ, MPCC_CPU_PROFILE="2e10,1e10", OPENBLAS_NUM_THREADS="1")
    subprocess.run([mpcc, *common, "-o", "train.c"], cwd=work, env=env, check=True,
                   stderr=subprocess.DEVNULL)
    with open(os.path.join(work, "train.c")) as f:   # the libraries its head names
        libs = re.search(r"^ \* build: .* -o train (.*)$", f.read(), re.M).group(1).split()
    subprocess.run(["cc", "-O2", "train.c", "-o", "train", *libs], cwd=work, check=True)
    subprocess.run(["./train", "--synthetic", "--steps", "4", "--profile", "prof.json"],
                   cwd=work, env=env, check=True, stderr=subprocess.DEVNULL)
    with open(os.path.join(work, "prof.json")) as f:
        prof = json.load(f)
    times = {(n["name"], n["phase"]): n["seconds"] for n in prof["nodes"]}
    assert all(n["calls"] >= 3 for n in prof["nodes"]), "every node runs every step"
    # which stage each node is on: from the generated code's stage functions
    with open(os.path.join(work, "train.c")) as f:
        code = f.read()
    stage_of = {}
    for m in re.finditer(r"static void s(\d)_(forward|backward|update)\(int mb\)\n\{(.*?)\n\}",
                         code, re.S):
        for name in re.findall(r"/\* node '([^']*)' \(", m.group(3)):
            stage_of[(name, "forward" if m.group(2) == "forward" else "backward")] = int(m.group(1))
        for name in re.findall(r"/\* (update/[^ ]*) \*/", m.group(3)):
            stage_of[(name, "update")] = int(m.group(1))
    want = {}
    for (name, phase), sec in times.items():
        s = stage_of[(name, phase)]
        want[(s, phase)] = want.get((s, phase), 0) + sec
    out = subprocess.run([mpcc, *common, "--measured=prof.json", "--dump=partition"], cwd=work,
                         env=env, check=True, capture_output=True, text=True).stdout
    failures = 0
    for line in out.splitlines():
        f = line.split()
        if not f or not f[0].isdigit():
            continue
        s, fwd, bwd, upd = int(f[0]), float(f[5]), float(f[6]), float(f[7])
        for phase, got in (("forward", fwd), ("backward", bwd), ("update", upd)):
            exp = want.get((s, phase), 0) * 1e3
            ok = abs(got - exp) <= 0.0005 + 1e-3 * exp
            failures += not ok
            print(f"stage {s} {phase}: planned {got:.3f} ms, profile sums {exp:.4f} ms "
                  f"{'ok' if ok else 'FAIL'}")
    with open(os.path.join(work, "bad.json"), "w") as f:
        f.write('{"format": "something else", "nodes": []}')
    bad = subprocess.run([mpcc, *common, "--measured=bad.json", "--dump=partition"], cwd=work,
                         env=env, capture_output=True, text=True)
    ok = bad.returncode == 1 and "not a profile from ./train --profile" in bad.stderr \
        and len(bad.stderr.strip().splitlines()) == 1
    print("a foreign profile is refused:", "ok" if ok else "FAIL " + bad.stderr)
    failures += not ok
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
