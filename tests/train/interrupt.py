#!/usr/bin/python3
"""Checkpoints that survive interruption (docs/trainer.md, "Stopping and
checkpoints"), on an MLP big enough (46 MB a checkpoint) that a save takes
a while. The reference for every checkpoint is the uninterrupted run:
training is deterministic, so a run stopped at step S and resumed must give
the very bytes of one that ran straight through.

  - --save-every N --keep K: the series' names, the step in each file's
    metadata, only the K newest left, each equal to a run of that many steps;
  - SIGTERM and SIGINT: the step in flight finishes and is saved, one line
    names the step and the file, exit status 0; resuming from it continues
    bit for bit; without --save the file is named after the program;
  - a second signal during the save ends the trainer at once, by the signal,
    with no checkpoint of that step and the earlier ones intact;
  - kill -9 in the middle of a save (its .tmp file caught on disk): the
    previous checkpoint is intact and resumes bit for bit, and no more than
    N steps are lost.

Usage: interrupt.py MPCC WORKDIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"


def die(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def build(mpcc, work):
    shutil.rmtree(work, ignore_errors=True)   # no reference left from another trainer
    subprocess.run([PY, os.path.join(HERE, "ref_train.py"), "--model", "mlp",
                    "--mlp-sizes", "784,2048,2048,10", "--steps", "2", "--batch", "8",
                    "--lr", "0.01", "--out", work], check=True, stdout=subprocess.DEVNULL)
    os.chdir(work)
    subprocess.run([mpcc, "model.onnx", "-cpus", "1", "-batch", "8", "--lr=0.01",
                    "--momentum=0.9", "-o", "train.c"], check=True,
                   stderr=subprocess.DEVNULL)
    line = [l for l in open("train.c") if l.startswith(" * build:  ")][0]
    subprocess.run(line[len(" * build:  "):].split(), check=True)


def train(*args, check=True):
    r = subprocess.run(["./train", "--data", "x.npy", "--labels", "y.npy"] + list(args),
                       stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        die("./train %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def same(a, b):
    if open(a, "rb").read() != open(b, "rb").read():
        die("%s and %s differ" % (a, b))


def step_of(path):
    """The step in a checkpoint's __metadata__ (read as the safetensors
    format defines it: an 8-byte header length, then the JSON header)."""
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return int(json.loads(f.read(n))["__metadata__"]["step"])


def reference(steps):
    """The checkpoint of an uninterrupted run of `steps` steps."""
    path = "ref%d.safetensors" % steps
    if not os.path.exists(path):
        train("--steps", str(steps), "--save", path)
    return path


def start(*args):
    return subprocess.Popen(["./train", "--data", "x.npy", "--labels", "y.npy",
                             "--log-every", "1"] + list(args),
                            stderr=subprocess.PIPE, text=True)


def wait_for_step(p, at_least):
    """Reads progress lines until step `at_least` is done."""
    for line in p.stderr:
        m = re.match(r"step (\d+)/", line)
        if m and int(m.group(1)) >= at_least:
            return
    die("the trainer ended before step %d" % at_least)


def check_series():
    print("--- --save-every 5 --keep 2 over 23 steps")
    for f in os.listdir("."):
        if f.startswith("ck."):
            os.remove(f)
    train("--steps", "23", "--save-every", "5", "--keep", "2", "--save", "ck.safetensors")
    left = sorted(f for f in os.listdir(".") if f.startswith("ck."))
    want = ["ck.safetensors", "ck.step15.safetensors", "ck.step20.safetensors"]
    if left != want:
        die("files %s, expected %s" % (left, want))
    for f, s in (("ck.step15.safetensors", 15), ("ck.step20.safetensors", 20),
                 ("ck.safetensors", 23)):
        if step_of(f) != s:
            die("%s holds step %d, expected %d" % (f, step_of(f), s))
        same(f, reference(s))
    print("ok: the two newest kept, each the checkpoint of a run of that many steps")


def check_signal(sig, save_args, stem):
    name = signal.Signals(sig).name
    print("--- %s after step 6 %s" % (name, " ".join(save_args) or "(no --save)"))
    p = start("--steps", "100000", *save_args)
    wait_for_step(p, 6)
    p.send_signal(sig)
    rest = p.stderr.read()
    p.wait()
    if p.returncode != 0:
        die("exit status %d after %s, expected 0:\n%s" % (p.returncode, name, rest))
    last = rest.strip().splitlines()[-1]
    m = re.match(r"train: stopped by %s after step (\d+) of 100000; saved (\S+) \(continue "
                 r"with --resume \S+ --steps (\d+)\)$" % name, last)
    if not m:
        die("the last line is not the stop line: %r" % last)
    step, path = int(m.group(1)), m.group(2)
    if path != "%s.step%d.safetensors" % (stem, step) or int(m.group(3)) != 100000 - step:
        die("unexpected file or steps left in %r" % last)
    if step_of(path) != step:
        die("%s holds step %d, expected %d" % (path, step_of(path), step))
    same(path, reference(step))
    train("--resume", path, "--steps", "4", "--save", "resumed.safetensors")
    same("resumed.safetensors", reference(step + 4))
    print("ok: %r; the checkpoint is a %d-step run's, and 4 more steps from it are "
          "a %d-step run's" % (last, step, step + 4))
    os.remove(path)


def second_signal_once():
    """One try: the second SIGTERM once the stop's checkpoint is being
    written. Returns what happened, or None when the save ended before the
    second signal was sent (then try again)."""
    p = start("--steps", "100000", "--resume", "two.step4.safetensors", "--save-every", "1000",
              "--save", "two.safetensors")
    wait_for_step(p, 6)
    p.send_signal(signal.SIGTERM)
    tmp, deadline = None, time.time() + 30
    while tmp is None and time.time() < deadline and p.poll() is None:
        tmp = next((f for f in os.listdir(".") if re.match(r"two\.step\d+\.safetensors\.tmp$", f)),
                   None)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    rest = p.stderr.read()
    p.wait()
    done = tmp and os.path.exists(tmp[:-len(".tmp")])
    if (p.returncode == 0 and "stopped by" in rest) or (p.returncode == -signal.SIGTERM and done):
        for f in os.listdir("."):   # the save ended before the second signal came
            if re.match(r"two\.step([5-9]|\d\d+)\.safetensors$", f):
                os.remove(f)
        return None
    return p.returncode, rest, tmp, time.time() - t0


def check_second_signal():
    print("--- a second SIGTERM while the first one's checkpoint is written")
    train("--steps", "4", "--save-every", "2", "--save", "two.safetensors")
    for attempt in range(1, 41):
        got = second_signal_once()
        if got:
            break
    else:
        die("40 tries all saved before the second signal was sent")
    rc, rest, tmp, took = got
    if tmp is None:
        die("no save of the stop's checkpoint seen")
    if rc != -signal.SIGTERM:
        die("exit status %d, expected death by SIGTERM:\n%s" % (rc, rest))
    if "stopped by" in rest or os.path.exists(tmp[:-len(".tmp")]):
        die("the trainer finished its save after the second signal:\n%s" % rest)
    for s in (2, 4):
        same("two.step%d.safetensors" % s, reference(s))
    print("ok (attempt %d): ended by SIGTERM %.2f s after the second signal, in the middle "
          "of writing %s; the earlier checkpoints are intact" % (attempt, took, tmp))


def check_kill9():
    print("--- kill -9 in the middle of a save")
    for attempt in range(1, 41):
        for f in os.listdir("."):
            if f.startswith("k9."):
                os.remove(f)
        p = start("--steps", "100000", "--save-every", "2", "--save", "k9.safetensors")
        wait_for_step(p, 4)
        tmp = None
        deadline = time.time() + 30
        while tmp is None and time.time() < deadline:
            for f in os.listdir("."):
                if f.startswith("k9.") and f.endswith(".tmp"):
                    tmp = f
                    break
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        if tmp is None:
            die("no save seen in 30 s")
        if not os.path.exists(tmp):
            continue   # the save ended between the look and the kill: again
        caught = int(re.match(r"k9\.step(\d+)\.safetensors\.tmp$", tmp).group(1))
        done = sorted(int(re.match(r"k9\.step(\d+)", f).group(1)) for f in os.listdir(".")
                      if re.match(r"k9\.step\d+\.safetensors$", f))
        if not done or done[-1] != caught - 2:
            die("killed while saving step %d, the newest complete checkpoint is %s, "
                "expected step %d" % (caught, done[-1] if done else None, caught - 2))
        newest = "k9.step%d.safetensors" % done[-1]
        same(newest, reference(done[-1]))
        train("--resume", newest, "--steps", "3", "--save", "resumed.safetensors")
        same("resumed.safetensors", reference(done[-1] + 3))
        written = os.path.getsize(tmp)
        os.remove(tmp)
        print("ok (attempt %d): killed while %s was written (%d bytes of it on disk); %s "
              "is intact and resumes bit for bit; lost: the steps after %d"
              % (attempt, tmp, written, newest, done[-1]))
        return
    die("40 kills all missed the save")


def main():
    mpcc, work = sys.argv[1:3]
    build(os.path.abspath(mpcc), work)
    check_series()
    check_signal(signal.SIGTERM, ["--save", "ck.safetensors"], "ck")
    check_signal(signal.SIGINT, ["--save-every", "1000", "--save", "ck.safetensors"], "ck")
    check_signal(signal.SIGTERM, [], "train")
    check_second_signal()
    check_kill9()
    print("interrupt: all passed")


if __name__ == "__main__":
    main()
