#!/usr/bin/env python3
"""check_cuda_ops.py — every kernel the code generator can call on a CPU
device has a CUDA twin with the same type, and runtime/cuda_ops.c compiles
with the runtime and links against cudart, cuBLAS, cuDNN and the driver.

  check_cuda_ops.py SOURCE_DIR CC CUDA_HOME WORK_DIR

The kernels are the mprt_X( calls in compiler/codegen.c's emitted text, less
the trainer's own functions (streams, events, --clip-norm). For each, a C
file asserts __builtin_types_compatible_p(typeof(mprt_X), typeof(mprt_cu_X))
after pasting mprt.h, cpu.c, cpu_move.c, cpu_math.c, a stub of cuda.c and
cuda_ops.c in the generated trainer's order; it is compiled with -std=c11
-Wall -Wextra -Werror and linked (never run)."""
import os
import re
import subprocess
import sys

NOT_KERNELS = {"launch", "memcpy_async", "record_event", "wait_event", "sync", "train_main",
               "sq_norm", "clip_scale", "st_save"}
EXPAND = {"%ssoftmax": ["softmax", "log_softmax"], "%ssoftmax_grad": ["softmax_grad", "log_softmax_grad"],
          "gather%s": ["gather", "gather_grad"]}
RUNTIME = ["mprt.c", "npy.c", "safetensors.c", "cpu.c", "cpu_move.c", "cpu_math.c"]


def emitted_kernels(codegen):
    names = set()
    for m in re.finditer(r'"[^"\n]*?\bmprt_([a-z0-9_%]+)\(', codegen):
        name = m.group(1)
        if name.startswith("cu_"):
            continue   # a CUDA twin itself, once the generator emits them
        if "%" in name:
            if name not in EXPAND:
                sys.exit(f"check_cuda_ops: codegen.c emits mprt_{name}(: add its expansions")
            names.update(EXPAND[name])
        elif name not in NOT_KERNELS:
            names.add(name)
    return sorted(names)


def main():
    src, cc, cuda, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(src, "compiler", "codegen.c")) as f:
        kernels = emitted_kernels(f.read())
    with open(os.path.join(src, "runtime", "cuda_ops.c")) as f:
        ops = f.read()
    missing = [k for k in kernels if not re.search(r"\bmprt_cu_%s\(" % k, ops)]
    if missing:
        sys.exit("check_cuda_ops: runtime/cuda_ops.c lacks " +
                 ", ".join("mprt_cu_" + k for k in missing))
    rt = os.path.join(src, "runtime")
    lines = ["#define _DEFAULT_SOURCE", "#define _POSIX_C_SOURCE 200809L", '#include "mprt.h"']
    lines += ['#include "%s"' % os.path.join(rt, f) for f in RUNTIME]
    lines += ['#include "%s"' % os.path.join(src, "tests", "cuda", "cuda_stub.h"),
              '#include "%s"' % os.path.join(rt, "cuda_ops.c")]
    for k in kernels:
        lines.append("_Static_assert(__builtin_types_compatible_p(__typeof__(mprt_%s), "
                     "__typeof__(mprt_cu_%s)), \"mprt_cu_%s differs from mprt_%s\");" % (k, k, k, k))
    lines.append("int main(void)\n{\n    void (*volatile used[])(void) = {")
    lines += ["        (void (*)(void))mprt_cu_%s," % k for k in kernels + ["accumulate", "check_faults"]]
    lines.append("    };\n    (void)used;\n    return 0;\n}")
    tu = os.path.join(work, "cuda_ops_check.c")
    with open(tu, "w") as f:
        f.write("\n".join(lines) + "\n")
    inc, lib = os.path.join(cuda, "include"), os.path.join(cuda, "lib64")
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I", rt, "-I", inc, tu,
           "-o", os.path.join(work, "cuda_ops_check"), "-L", lib, "-L", os.path.join(lib, "stubs"),
           "-lcudnn", "-lcublas", "-lcudart", "-lcuda", "-lopenblas", "-lm", "-pthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("check_cuda_ops: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    print("check_cuda_ops: %d kernels, each with a CUDA twin of the same type; "
          "cuda_ops.c compiles and links" % len(kernels))


if __name__ == "__main__":
    main()
