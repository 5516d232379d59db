#!/usr/bin/env python3
"""check_cuda_ops.py — every kernel the code generator can call on a CPU
device has a CUDA twin of the same type, kernels.cu's parameter structs
are runtime/kernel.h's, and the CUDA runtime compiles and links.

  check_cuda_ops.py SOURCE_DIR CC CUDA_HOME WORK_DIR

The kernels are the names compiler/emit/codegen.c hands kernel() (and
float_kernel() and row_kernel(), should they name one): every string literal among the
arguments, so kernel(cg, log ? "log_softmax" : "softmax") gives both; a
literal built with a format (such as "%ssoftmax") must be listed in EXPAND.
A CPU kernel that codegen.c names directly ("mprt_reduce_max") is checked
as well, and listed: on a CUDA device it would run the CPU's code, so it
must go through kernel().

For each kernel a C file asserts
__builtin_types_compatible_p(typeof(mprt_X), typeof(mprt_cu_X)) after
including the runtime's .c files in the CUDA trainer's order, read from
codegen.c's runtime_sources (mprt.c, npy.c, safetensors.c, state.c,
timeline.c, cuda.c, cuda_ops.c, program.c, data.c, checkpoint.c, plot.c,
train.c today; each includes its headers), with the CPU kernels (pool.c, cpu.c,
cpu_move.c, cpu_math.c) before cuda.c, where the CPU trainer has them
after timeline.c. It also asserts that
mprt_cu_check_faults is void(void). It is compiled with
-std=c11 -Wall -Wextra -Werror and linked (never run) against cuDNN,
cuBLAS, cudart, NVRTC and the driver; -lopenblas only because cpu.c is in
it (the CUDA trainer has no BLAS).

The structs passed by value must be kernel.h's: struct Conv, Pool,
Resize, EwStep and EwChain have MprtConv's, MprtPool's, MprtResize's,
MprtEwStep's and MprtEwChain's fields, names and types, in order. The op
codes and limits of both files are runtime/opcodes.h's, written once; so
that they stay so, neither file may spell out a code or a limit of the
other: no enum of kernels.cu names a kernel.h code less MPRT_, and no
macro MPRT_X is defined in both.
"""
import os
import re
import subprocess
import sys

# Format-built kernel names and what they expand to.
EXPAND = {"%ssoftmax": ["softmax", "log_softmax"],
          "%ssoftmax_grad": ["softmax_grad", "log_softmax_grad"],
          "gather%s": ["gather", "gather_grad"]}
CPU_FILES = ["pool.c", "cpu.c", "cpu_move.c", "cpu_math.c"]
STRUCTS = {"Conv": "MprtConv", "Pool": "MprtPool", "Resize": "MprtResize",
           "EwStep": "MprtEwStep", "EwChain": "MprtEwChain"}
CU_TYPES = {"i64": "long", "u64": "uint64_t", "u8": "uint8_t", "EwStep": "MprtEwStep"}


def fail(msg):
    sys.exit("check_cuda_ops: " + msg)


def call_args(text, start):
    """The text of a call's arguments: text[start] is just after '('."""
    depth, i = 1, start
    while depth:
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1)
            while text[i - 1] == "\\":
                i = text.index('"', i + 1)
        depth += c == "("
        depth -= c == ")"
        i += 1
    return text[start:i - 1]


def emitted_kernels(codegen, cpu_kernels):
    names, direct = set(), set()
    for m in re.finditer(r"\b(?:float_|row_)?kernel\(cg,", codegen):
        for lit in re.findall(r'"([^"\n]*)"', call_args(codegen, m.end())):
            if "%" in lit:
                if lit not in EXPAND:
                    fail(f'codegen.c builds the kernel name "{lit}": add its expansions to EXPAND')
                names.update(EXPAND[lit])
            elif re.fullmatch(r"[a-z][a-z0-9_]*", lit):
                names.add(lit)
            else:
                fail(f'codegen.c hands kernel() "{lit}", which is not a kernel name')
    for m in re.finditer(r'"[^"\n]*?\bmprt_([a-z0-9_]+)\b', codegen):
        if m.group(1) in cpu_kernels and m.group(1) not in names:
            direct.add(m.group(1))
    return sorted(names | direct), sorted(direct)


def runtime_order(codegen):
    """The CUDA trainer's runtime .c files as codegen.c's runtime_sources
    lists them, with the CPU kernels inserted before cuda.c (after
    timeline.c, where the CPU trainer has them)."""
    def files(name):
        m = re.search(r"static const char \*%s\[\] = \{(.*?)\};" % name, codegen, re.S)
        if not m:
            fail(f"codegen.c's runtime_sources has no list {name}[]")
        return [re.sub(r"_(c|h)$", r".\1", f) for f in re.findall(r'"([a-z_]+)"', m.group(1))]
    cuda, cpu = files("cuda"), files("cpu")
    if "cuda.c" not in cuda or any(f not in cpu for f in CPU_FILES):
        fail("codegen.c's runtime_sources lists are not as this test expects: %s, %s" % (cuda, cpu))
    at = cuda.index("cuda.c")
    return cuda[:at] + CPU_FILES + cuda[at:]


def enums(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return [[n.strip().split("=")[0].strip() for n in body.split(",") if n.strip()]
            for body in re.findall(r"\benum\s*\{([^}]*)\}", text)]


def fields(body, types):
    out = []
    for decl in re.sub(r"/\*.*?\*/", "", body, flags=re.S).split(";"):
        decl = decl.split()
        if not decl:
            continue
        t = types.get(decl[0], decl[0])
        out += [(t, n.strip()) for n in " ".join(decl[1:]).split(",")]
    return out


def defines(text):
    """The object-like macros MPRT_X of a file and their values."""
    return dict(re.findall(r"^#define (MPRT_[A-Z0-9_]+) (\S+)$", text, re.M))


def check_shared(kernel_h, kernels_cu):
    """kernels.cu's copies of kernel.h's parameter blocks, and no copies of
    its op codes or limits (those are opcodes.h's)."""
    host = {n[len("MPRT_"):] for e in enums(kernel_h) for n in e if n.startswith("MPRT_")}
    for e in enums(kernels_cu):
        if host & set(e):
            fail("kernels.cu's enum {%s} spells out kernel.h's codes: declare the enum "
                 "once, in runtime/opcodes.h's MPRT_OPCODES" % ", ".join(e))
    both = sorted(defines(kernel_h).keys() & defines(kernels_cu).keys())
    if both:
        fail("kernel.h and kernels.cu both define %s: define it once, in runtime/opcodes.h" %
             ", ".join(both))
    for cu, h in STRUCTS.items():
        m = re.search(r"\bstruct %s\s*\{(.*?)\};" % cu, kernels_cu, re.S)
        n = re.search(r"typedef struct %s\s*\{(.*?)\}\s*%s;" % (h, h), kernel_h, re.S)
        if not m or not n:
            fail(f"struct {cu} (kernels.cu) or {h} (kernel.h) is missing")
        a, b = fields(m.group(1), CU_TYPES), fields(n.group(1), {})
        if a != b:
            fail(f"kernels.cu's struct {cu} {a} is not kernel.h's {h} {b}")


def main():
    src, cc, cuda, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    rt = os.path.join(src, "runtime")

    def read(*p):
        with open(os.path.join(src, *p)) as f:
            return f.read()

    cpu_kernels = set()
    for f in CPU_FILES:
        cpu_kernels.update(re.findall(r"^MPRT_KERNEL [^(]*?\bmprt_([a-z0-9_]+)\(",
                                      read("runtime", f), re.M))
    codegen = read("compiler", "emit", "codegen.c")
    kernels, direct = emitted_kernels(codegen, cpu_kernels)
    order = runtime_order(codegen)
    unknown = [k for k in kernels if k not in cpu_kernels]
    if unknown:
        fail("codegen.c calls kernels no CPU file defines: " + ", ".join(unknown))
    ops = read("runtime", "cuda_ops.c")
    missing = [k for k in kernels if not re.search(r"\bmprt_cu_%s\(" % k, ops)]
    if missing:
        fail("runtime/cuda_ops.c lacks " + ", ".join("mprt_cu_" + k for k in missing))
    check_shared(read("runtime", "kernel.h"), read("runtime", "kernels.cu"))

    lines = ["#define _DEFAULT_SOURCE", "#define _POSIX_C_SOURCE 200809L"]
    lines += ['#include "%s"' % os.path.join(rt, f) for f in order]
    for k in kernels:
        lines.append("_Static_assert(__builtin_types_compatible_p(__typeof__(mprt_%s), "
                     "__typeof__(mprt_cu_%s)), \"mprt_cu_%s differs from mprt_%s\");" % (k, k, k, k))
    lines.append("_Static_assert(__builtin_types_compatible_p(__typeof__(mprt_cu_check_faults), "
                 "void(void)), \"the trainer calls mprt_cu_check_faults() after mprt_sync()\");")
    lines.append("int main(void)\n{\n    void (*volatile used[])(void) = {")
    lines += ["        (void (*)(void))mprt_cu_%s," % k for k in kernels + ["check_faults"]]
    lines.append("    };\n    (void)used;\n    return 0;\n}")
    tu = os.path.join(work, "cuda_ops_check.c")
    with open(tu, "w") as f:
        f.write("\n".join(lines) + "\n")
    inc, lib = os.path.join(cuda, "include"), os.path.join(cuda, "lib64")
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I", rt, "-I", inc, tu,
           "-o", os.path.join(work, "cuda_ops_check"), "-L", lib,
           "-lcudnn", "-lcublas", "-lnvrtc", "-lcudart", "-lopenblas", "-lm", "-pthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    print("check_cuda_ops: %d kernels, each with a CUDA twin of the same type; %d structs of "
          "kernels.cu match kernel.h; the CUDA trainer's runtime (%s) compiles and links" %
          (len(kernels), len(STRUCTS), " ".join(order)))
    if direct:
        fail("codegen.c names %s directly, not through kernel(): a CUDA stage would call the "
             "CPU kernel" % ", ".join("mprt_" + k for k in direct))


if __name__ == "__main__":
    main()
