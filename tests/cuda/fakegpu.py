#!/usr/bin/env python3
"""fakegpu.py — runs whole generated CUDA trainers without a GPU, on the
GPUs of tests/cuda/fakegpu.c (host memory, lazily and randomly ordered
streams, runtime/kernels.cu compiled for the host), and compares their
losses and final weights, bit for bit, with the CPU trainer of the same
model, batch and micro-batch count.

  fakegpu.py build SRC CC CXX CUDA_HOME LIBDIR
      compiles the fake runtime, the fake cuDNN (fakecudnn.c) and the host
      kernels into LIBDIR
  fakegpu.py run SRC MPCC CC CUDA_HOME LIBDIR WORK MODEL GPU_OPTIONS -- CPU_OPTIONS
      GPU_OPTIONS (e.g. "-batch 8 -gpus 2") name CUDA devices, possibly with
      CPU ones; the trainer runs under three stream orders ($FAKEGPU_SEED),
      on as many GPUs as it names or on $FAKEGPU_COUNT ($FAKEGPU_NOPEER=1:
      without peer access between them, fakegpu.c); $FAKEGPU_CFLAGS (split
      as a shell would) are added to the CUDA trainer's build line, e.g.
      "-DMPRT_CU_STAGE_BYTES=256" for staged copies of many chunks. A
      trainer across processes (--nodes=K) runs as its header says (mpirun
      -np K), the processes sharing K times the GPUs, its NCCL made of MPI
      (fakenccl.c)
  fakegpu.py evaluate SRC MPCC CC CUDA_HOME LIBDIR WORK MODEL GPU_OPTIONS -- CPU_OPTIONS
      as run, then both trainers train 2 steps on a data file of 37 rows
      (random, of the model's input and label shapes) and evaluate it
      (--eval-data, its last micro-batch padded): the evaluations' lines
      the same, byte for byte
  fakegpu.py oom MPCC CC LIBDIR WORK MODEL GPU_OPTIONS
      runs the CUDA trainer on fake GPUs one byte short of the largest
      arena ($FAKEGPU_MEMORY): it must exit 1 with the out-of-memory line
  fakegpu.py offload SRC MPCC CC CUDA_HOME LIBDIR WORK MODEL GPU_OPTIONS -- CPU_OPTIONS
      GPU_OPTIONS with --offload=KIND: the plan with --offload=none
      must need more of the GPU than the plan with it; on a GPU whose memory
      lies between the two (a profile file's memory for mpcc, $FAKEGPU_MEMORY
      for the trainer), mpcc must refuse --offload=none, plan with offload
      by default (--offload=auto, with its note; --recompute=none, so that
      it does not recompute instead), and the trainer of the
      plan with it must train as `run` checks
  fakegpu.py nccl_gpus MPCC CC LIBDIR WORK MODEL GPU_OPTIONS
      GPU_OPTIONS with --nodes=2: the 2 processes started by mpirun on one
      machine with the GPUs of one: one line that says so, exit 1
  fakegpu.py nvrtc_error MPCC CC LIBDIR WORK MODEL GPU_OPTIONS
      the same trainer when NVRTC fails ($FAKEGPU_NVRTC_LOG): NVRTC's log,
      then one error line, exit 1
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulate  # noqa: E402

STEPS = 3
SEEDS = (1, 2, 3)


def run(cmd, env=None, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    if r.returncode != 0:
        sys.exit("fakegpu: %s: exit %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout,
                                                 r.stderr))
    return r


def build(src, cc, cxx, cuda, lib):
    src, lib = os.path.abspath(src), os.path.abspath(lib)
    os.makedirs(lib, exist_ok=True)
    here = os.path.join(src, "tests", "cuda")
    with open(os.path.join(src, "runtime", "kernels.cu")) as f:
        table, n = emulate.thunks(f.read())
    dev = os.path.join(lib, "kernels_host.cpp")
    with open(dev, "w") as f:
        f.write('#include "%s"\n#include "%s"\n\n%s' % (
            os.path.join(here, "emulate_device.h"), os.path.join(src, "runtime", "kernels.cu"),
            table))
    inc = os.path.join(cuda, "include")
    run([cxx, "-std=c++17", "-O1", "-w", "-c", dev, "-o", os.path.join(lib, "kernels_host.o")])
    kernels = os.path.join(src, "runtime", "kernels.cu")   # the source NVRTC must get
    opcodes = os.path.join(src, "runtime", "opcodes.h")    # and its header
    run([cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I", inc,
         "-DFAKEGPU_KERNELS=%s" % json.dumps(kernels),
         "-DFAKEGPU_OPCODES=%s" % json.dumps(opcodes), "-c",
         os.path.join(here, "fakegpu.c"), "-o", os.path.join(lib, "fakegpu.o")])
    run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-deprecated-declarations",
         "-I", os.path.join(src, "runtime"), "-I", inc, "-c", os.path.join(here, "fakecudnn.c"),
         "-o", os.path.join(lib, "fakecudnn.o")])
    if shutil.which("mpicc"):   # NCCL over MPI, for trainers across processes
        run(["mpicc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", inc, "-c",
             os.path.join(here, "fakenccl.c"), "-o", os.path.join(lib, "fakenccl.o")])
    print("fakegpu: the fake CUDA runtime and %d host kernels built in %s" % (n, lib))


def tensors(path):
    """A safetensors file's tensors: name -> raw bytes."""
    from safetensors.numpy import load_file
    return {k: v.tobytes() for k, v in load_file(path).items()}


def train(work, name, build_cmd, env, extra=(), launch=()):
    """Builds work/name.c and trains STEPS synthetic steps (started by
    launch, e.g. mpirun -np 2): the losses and the final weights."""
    run(build_cmd, cwd=work)
    exe = os.path.join(work, name)
    losses, ckpt = exe + ".losses", exe + ".safetensors"
    r = run(list(launch) + [exe, "--synthetic", "--seed", "7", "--steps", str(STEPS),
                            "--loss-log", losses, "--save", ckpt] + list(extra), env=env, cwd=work)
    with open(losses) as f:
        return f.read().split(), tensors(ckpt), r.stderr


MPIRUN_ENV = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                  OMPI_MCA_rmaps_base_oversubscribe="1")


def launcher(gpu_c):
    """How the header of a trainer says to start it: [] or mpirun -np K."""
    with open(gpu_c) as f:
        np = re.search(r"run as mpirun -np (\d+) \./train", f.read())
    return ["mpirun", "-np", np.group(1)] if np else []


def generate(mpcc, model, options, out):
    run([mpcc, model] + options + ["-o", out])
    with open(out) as f:
        return re.search(r"^ \* build: +(.*)$", f.read(), re.M).group(1).split()


def fake_build(line, cc, lib, opts):
    """The trainer's own build line, the CUDA libraries replaced by the fakes."""
    if "-lcudart" not in line:
        sys.exit("fakegpu: %s is not a CUDA trainer" % " ".join(opts))
    fake = [a for a in line if a not in ("-lcudnn", "-lcublas", "-lnvrtc", "-lcudart", "-lnccl")]
    fake = [cc if a == "cc" else a for a in fake]
    fake[fake.index("-o") + 1] = "gpu"
    fake += ["-Wall", "-Werror", os.path.join(lib, "fakegpu.o"),
             os.path.join(lib, "fakecudnn.o"), os.path.join(lib, "kernels_host.o"),
             "-lopenblas", "-lstdc++", "-lm"]
    if "-lnccl" in line:   # across processes: NCCL made of MPI (fakenccl.c)
        fake.append(os.path.join(lib, "fakenccl.o"))
    return fake + shlex.split(os.environ.get("FAKEGPU_CFLAGS", ""))


def failing_trainer(args, **fake_env):
    """Builds the CUDA trainer of MODEL GPU_OPTIONS on the fakes; runs it
    with fake_env (fn(arenas) -> value, or a value); returns the device
    arenas of its header and the run."""
    mpcc, cc, lib, work, model = args[:5]
    opts = args[5:]
    shutil.rmtree(work, ignore_errors=True)   # no cached kernels
    os.makedirs(work)
    gpu_c = os.path.join(work, "gpu.c")
    fake = fake_build(generate(mpcc, model, opts, gpu_c), cc, lib, opts)
    with open(gpu_c) as f:
        arenas = {d: int(n) for d, n in
                  re.findall(r"^ \* (cuda:\d+) +stages [^;]*; memory plan (\d+) bytes", f.read(),
                             re.M)}
    if not arenas:
        sys.exit("FAIL: no cuda device's memory plan in the header of %s" % gpu_c)
    run(fake, cwd=work)
    env = dict(os.environ, FAKEGPU_COUNT=str(len(arenas)),
               MPCC_CACHE=os.path.join(work, "cache"), OPENBLAS_NUM_THREADS="1", **MPIRUN_ENV)
    env.update({k: str(v(arenas) if callable(v) else v) for k, v in fake_env.items()})
    r = subprocess.run(launcher(gpu_c) + [os.path.join(work, "gpu"), "--synthetic", "--steps",
                                          "1"], env=env, cwd=work, capture_output=True, text=True)
    print(r.stderr)
    return arenas, r


def main_nvrtc_error(args):
    """NVRTC fails: its log, then one error line, exit 1."""
    log = "runtime/kernels.cu(42): error: fakegpu: a compile error"
    _, r = failing_trainer(args, FAKEGPU_NVRTC_LOG=log)
    if r.returncode != 1 or log not in r.stderr.splitlines() or not re.search(
            r"^train: error: NVRTC could not compile the kernels for sm_\d+ \(the log above "
            r"names the lines of runtime/kernels.cu\)$", r.stderr, re.M):
        sys.exit("FAIL: exit %d; want 1, NVRTC's log and the error line" % r.returncode)
    print("fakegpu: an NVRTC error: its log with the line, one error line, exit 1")


def main_old_gpu(args):
    """A bf16 trainer on a GPU of compute capability 7.0 (no bf16 tensor
    cores): one line naming the device and what to do, exit 2, before any
    step; on 8.0 the same trainer runs its step."""
    _, r = failing_trainer(args, FAKEGPU_ARCH=70)
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    if r.returncode != 2 or len(errors) != 1 or not re.match(
            r"^train: error: cuda:0 is GPU 0, of compute capability 7\.0; this trainer was "
            r"compiled with mpcc --precision=bf16, .*compile it with --precision=fp32",
            errors[0]) or "step 1" in r.stderr:
        sys.exit("FAIL: exit %d, %d error line(s); want 2 and the compute capability line"
                 % (r.returncode, len(errors)))
    _, r = failing_trainer(args, FAKEGPU_ARCH=80)
    if r.returncode != 0 or "step 1" not in r.stderr:
        sys.exit("FAIL: on compute capability 8.0 the bf16 trainer exits %d" % r.returncode)
    print("fakegpu: a bf16 trainer on compute capability 7.0: one line, exit 2; on 8.0 it trains")


def main_oom(args):
    """A GPU one byte short of its arena: one line naming the device, the
    planned peak, what is free, and what to try; exit 1."""
    # the largest arena fails, the others fit
    arenas, r = failing_trainer(args, FAKEGPU_MEMORY=lambda a: max(a.values()) - 1)
    limit = max(arenas.values()) - 1
    errors = [ln for ln in r.stderr.splitlines() if "error" in ln]
    m = re.search(r"^train: error: out of memory on (cuda:\d+) \(GPU \d+\): .* needs "
                  r"([0-9.]+) MB \(the memory plan's peak\) and ([0-9.]+) MB of ([0-9.]+) MB "
                  r"are free; try mpcc --recompute=auto, .*--dump=memory", r.stderr, re.M)
    if r.returncode != 1 or len(errors) != 1 or not m:
        sys.exit("FAIL: exit %d, %d error line(s), want 1 and the out-of-memory line"
                 % (r.returncode, len(errors)))
    dev, need, free, total = m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))
    want = arenas[dev] / 1e6
    if arenas[dev] != max(arenas.values()):
        sys.exit("FAIL: %s failed, but its arena fits" % dev)
    if abs(need - want) > 0.05 or abs(total - limit / 1e6) > 0.05 or free > total:
        sys.exit("FAIL: %s needs %.1f MB of %.1f MB (free %.1f); the plan says %.1f MB of %.1f"
                 % (dev, need, total, free, want, limit / 1e6))
    print("fakegpu: %s one byte short: the error names %s, its %.1f MB and the flags to try"
          % (dev, dev, need))


def main_nccl_gpus(args):
    """Processes of N GPUs each on a machine with fewer than all of them
    need: one line that says so and what to do, exit 1, before NCCL."""
    arenas, r = failing_trainer(args)   # as many GPUs as one process has
    want = (r"^train: error: 2 processes of %d GPU\(s\) each on a machine with %d GPU\(s\); "
            r"NCCL needs a GPU of its own for each: start one process per machine \(mpirun "
            r"--map-by ppr:1:node\), or compile for fewer GPUs" % (len(arenas), len(arenas)))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("train:") or "fake" in ln]
    if r.returncode != 1 or len(lines) != 1 or not re.search(want, lines[0]):
        sys.exit("FAIL: exit %d, lines %s; want 1 and the line of too few GPUs"
                 % (r.returncode, lines))
    print("fakegpu: 2 processes of %d GPUs on %d: %s" % (len(arenas), len(arenas), lines[0]))


def plan_arena(mpcc, model, opts, out):
    """The largest CUDA device arena in the header of the trainer of opts."""
    generate(mpcc, model, opts, out)
    with open(out) as f:
        found = [int(n) for n in re.findall(r"^ \* cuda:\d+ +stages [^;]*; memory plan (\d+) bytes",
                                            f.read(), re.M)]
    if not found:
        sys.exit("FAIL: no cuda device's memory plan in the header of %s" % out)
    return max(found)


def main_offload(args):
    """A model that does not fit the GPU without --offload trains with it."""
    src, mpcc, cc, cuda, lib, work, model = args[:7]
    sep = args.index("--")
    gpu_opts = args[7:sep]
    default = [o for o in gpu_opts if not o.startswith("--offload")]
    if default == gpu_opts:
        sys.exit("fakegpu: offload wants --offload=... among the GPU options")
    if not any(o.startswith("--recompute") for o in default):
        default.append("--recompute=none")   # else the default may recompute instead
    plain = default + ["--offload=none"]
    os.makedirs(work, exist_ok=True)
    need = plan_arena(mpcc, model, plain, os.path.join(work, "plain.c"))
    less = plan_arena(mpcc, model, gpu_opts, os.path.join(work, "offload.c"))
    if less >= need:
        sys.exit("FAIL: with offload the plan needs %d bytes, without it %d" % (less, need))
    memory = (less + need) // 2
    profile = os.path.join(work, "small_gpu.profile")
    with open(profile, "w") as f:
        f.write("memory = %d   # between the plans with and without offload\n" % memory)
    r = subprocess.run([mpcc, model] + plain + ["--profile=" + profile, "-o",
                                                 os.path.join(work, "refused.c")],
                       capture_output=True, text=True)
    if r.returncode != 1 or "error" not in r.stderr or "memory" not in r.stderr:
        sys.exit("FAIL: a GPU of %d bytes and no offload: exit %d, want 1 and the memory "
                 "error\n%s" % (memory, r.returncode, r.stderr))
    out = os.path.join(work, "auto.c")
    r = subprocess.run([mpcc, model] + default + ["--profile=" + profile, "-o", out],
                       capture_output=True, text=True)
    if r.returncode != 0 or "--offload=auto keeps" not in r.stderr:
        sys.exit("FAIL: a GPU of %d bytes and the default --offload=auto: exit %d, want 0 "
                 "and the note that it offloads\n%s" % (memory, r.returncode, r.stderr))
    if plan_arena(mpcc, model, default + ["--profile=" + profile], out) > memory:
        sys.exit("FAIL: --offload=auto planned more than the GPU's %d bytes" % memory)
    os.environ["FAKEGPU_MEMORY"] = str(memory)
    args = args[:7] + gpu_opts + ["--profile=" + profile] + args[sep:]
    main_run(args)
    print("fakegpu: plans of %d bytes without offload, %d with; on a GPU of %d bytes mpcc "
          "refuses --offload=none, offloads by default, and the trainer trains bit for bit"
          % (need, less, memory))


def main_run(args):
    src, mpcc, cc, cuda, lib, work, model = args[:7]
    sep = args.index("--")
    gpu_opts, cpu_opts = args[7:sep], args[sep + 1:]
    # The fake cuBLAS and cuDNN compute with OpenBLAS and the builtin
    # convolutions: the CPU trainer (and a mixed trainer's CPU stages) too
    for opts in (gpu_opts, cpu_opts):
        if not any(o.startswith("--cpu-kernels") for o in opts):
            opts.append("--cpu-kernels=builtin")
    os.makedirs(work, exist_ok=True)
    gpu_c, cpu_c = os.path.join(work, "gpu.c"), os.path.join(work, "cpu.c")
    fake = fake_build(generate(mpcc, model, gpu_opts, gpu_c), cc, lib, gpu_opts)
    cpu_line = generate(mpcc, model, cpu_opts, cpu_c)
    cpu_line[cpu_line.index("-o") + 1] = "cpu"
    cpu_line = [cc if a == "cc" else a for a in cpu_line]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", MPCC_CACHE=os.path.join(work, "cache"))
    gpus = re.findall(r"cuda:(\d+)", " ".join(gpu_opts))
    m = re.search(r"-gpus (\d+)", " ".join(gpu_opts))
    logical = int(m.group(1)) if m else len(gpus)
    if "FAKEGPU_COUNT" not in env:   # else fewer GPUs than logical devices: they share
        env["FAKEGPU_COUNT"] = str(int(m.group(1)) if m else max(int(g) for g in gpus) + 1)
    ref_losses, ref_w, _ = train(work, "cpu", cpu_line, env)
    trace, prof = os.path.join(work, "trace.json"), os.path.join(work, "prof.json")
    launch = launcher(gpu_c)   # a trainer across processes: mpirun
    np = launch[2] if launch else None
    if np:   # the processes share the machine's GPUs, each after the ones before (cuda.c)
        if "FAKEGPU_COUNT" not in os.environ:
            env["FAKEGPU_COUNT"] = str(int(env["FAKEGPU_COUNT"]) * int(np))
        env.update(MPIRUN_ENV)
    with open(gpu_c) as f:   # the step captured as one CUDA graph, unless the model says not
        graph_off = re.search(r'^    \.graph_why = "(.*)",$', f.read(), re.M)
    graph = "the step captured as one CUDA graph at step 2" if not graph_off else \
        "no CUDA graph: " + graph_off.group(1)
    for seed in SEEDS:   # the second run also writes --profile, the last --trace
        env["FAKEGPU_SEED"] = str(seed)
        extra = {SEEDS[1]: ["--profile", prof], SEEDS[-1]: ["--trace", trace]}.get(seed, [])
        losses, w, log = train(work, "gpu", fake if seed == SEEDS[0] else ["true"], env, extra,
                               launch)
        shared = int(env["FAKEGPU_COUNT"]) < logical
        if shared and "logical device(s) on %s GPU(s)" % env["FAKEGPU_COUNT"] not in log:
            sys.exit("FAIL: %d logical devices on %s GPU(s) without the warning:\n%s"
                     % (logical, env["FAKEGPU_COUNT"], log))
        staged = env.get("FAKEGPU_NOPEER") == "1" or "MPRT_CU_STAGE_ALL" in " ".join(fake)
        if staged != ("train: note: no peer access between cuda:0-cuda:1" in log):
            sys.exit("FAIL: staged copies %s, but the start-up note says otherwise:\n%s"
                     % ("expected" if staged else "not expected", log))
        said = "CUDA graph: the step is captured" in log if not graph_off else \
            "CUDA graph: off: " + graph_off.group(1) in log
        if not said:
            sys.exit("FAIL: the trainer does not say %s:\n%s" % (graph, log))
        if losses != ref_losses:
            sys.exit("FAIL: stream order %d: losses %s, the CPU trainer's %s\n%s"
                     % (seed, losses, ref_losses, log))
        if sorted(w) != sorted(ref_w):
            sys.exit("FAIL: the checkpoints hold different tensors: %s vs %s"
                     % (sorted(w), sorted(ref_w)))
        bad = [k for k in w if w[k] != ref_w[k]]
        if bad:
            sys.exit("FAIL: stream order %d: %d of %d tensors differ from the CPU trainer's, "
                     "e.g. %s" % (seed, len(bad), len(w), bad[0]))
    extra = int(env.get("FAKECUDNN_EXTRA_BYTES", "0"))
    # the convolutions wanted more than the scratch: the trainer's own
    # workspace (a few KB more may fit the scratch past a call's operands)
    if extra >= 1 << 20:
        got = [float(x) for x in re.findall(r"\+ ([0-9.]+) MB cuDNN workspace", log)]
        if not got or min(got) < extra / 1e6:
            sys.exit("FAIL: algorithms asking for %d bytes beyond the scratch, but the summary "
                     "names cuDNN workspaces of %s MB:\n%s" % (extra, got, log))
    with open(prof) as f:
        if not any(n["calls"] > 0 for n in json.load(f)["nodes"]):
            sys.exit("FAIL: --profile timed no node")
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    if not events or any(e["dur"] < 0 for e in events):
        sys.exit("FAIL: --trace: %d operations, durations %s" % (len(events),
                                                                   [e["dur"] for e in events]))
    print("fakegpu: %s: %s" % (" ".join(gpu_opts), graph))
    print("fakegpu: %s on %s%s GPU(s): %d steps under %d stream orders, losses %s and %d "
          "tensors bit for bit the CPU trainer's (%s)"
          % (" ".join(gpu_opts), "%s processes sharing " % np if np else "",
             env["FAKEGPU_COUNT"], STEPS, len(SEEDS),
             " ".join(ref_losses), len(ref_w), " ".join(cpu_opts)))
    return work, env, launch


def data_files(work, gpu_c, rows):
    """x.npy and y.npy of `rows` random rows, of the shapes and types of
    the trainer's input and labels, and the classes of its output (its
    buffer table: the classes first); integer inputs are tokens below
    that."""
    import numpy as np
    with open(gpu_c) as f:
        text = f.read()
    shape, dtype = {}, {}
    for kind in ("INPUT", "LABELS", "OUTPUT"):
        m = re.search(r'^    \{"[^"]*", MPRT_%s, MPRT_(\w+), \d+, \{([0-9, ]+)\}' % kind, text,
                      re.M)
        if not m:
            sys.exit("FAIL: no %s buffer in %s" % (kind.lower(), gpu_c))
        dtype[kind], shape[kind] = m.group(1), [int(n) for n in m.group(2).split(",")]
    classes = shape["OUTPUT"][1]
    rng = np.random.default_rng(5)
    if dtype["INPUT"] == "F32":
        x = rng.standard_normal([rows] + shape["INPUT"][1:]).astype(np.float32)
    else:
        x = rng.integers(0, classes, [rows] + shape["INPUT"][1:]).astype(np.int64)
    y = rng.integers(0, classes, [rows] + shape["LABELS"][1:]).astype(np.int64)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "y.npy"), y)


def main_evaluate(args):
    work, env, launch = main_run(args)
    data_files(work, os.path.join(work, "gpu.c"), 37)
    ev = ["--data", "x.npy", "--labels", "y.npy", "--steps", "2", "--eval-data", "x.npy",
          "--eval-labels", "y.npy", "--eval-every", "1"]
    lines = {}
    for name, pre in (("cpu", []), ("gpu", launch)):
        r = run(pre + [os.path.join(work, name)] + ev, env=env, cwd=work)
        lines[name] = [ln for ln in r.stderr.splitlines() if ln.startswith("eval step")]
    if len(lines["cpu"]) != 2 or lines["gpu"] != lines["cpu"]:
        sys.exit("FAIL: evaluations %s, the CPU trainer's %s" % (lines["gpu"], lines["cpu"]))
    print("fakegpu: the evaluations of 37 rows bit for bit the CPU trainer's: %s" % lines["gpu"][-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "build":
        build(*sys.argv[2:7])
    elif len(sys.argv) > 1 and sys.argv[1] == "run":
        main_run(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "evaluate":
        main_evaluate(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "offload":
        main_offload(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "old_gpu":
        main_old_gpu(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "oom":
        main_oom(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "nccl_gpus":
        main_nccl_gpus(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "nvrtc_error":
        main_nvrtc_error(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
