#!/usr/bin/env python3
"""emulate.py — runs runtime/cuda_ops.c's twins against the CPU kernels on
the host, without a GPU: runtime/kernels.cu is compiled as C++ after
emulate_device.h (one thread per block), each kernel gets a thunk that
unpacks a launch's argument array, and cuda_ops.c runs after
emulate_host.h (in place of cuda.c: mprt_cu_launch calls the thunk) with
the runtime and the CPU kernels; emulate_main.c compares the results bit
for bit.

  emulate.py SOURCE_DIR CC CXX CUDA_HOME WORK_DIR
"""
import os
import re
import subprocess
import sys

RUNTIME = ["mprt.h", "mprt.c", "npy.c", "safetensors.c", "state.c", "kernel.h", "timeline.c",
           "pool.c", "cpu.c", "cpu_move.c", "cpu_math.c"]


def thunks(kernels_cu):
    """A C++ function per kernel calling it with *(T *)args[i], the table
    mprt_emu_kernel looks names up in, and each kernel's argument sizes
    (mprt_emu_kernel_sizes, for a launch that copies its arguments)."""
    out, table = [], []
    # a kernel's name may follow an attribute macro (kernels.cu's CHANNEL_BLOCK)
    kernel = r'extern "C" __global__ void\s+(?:[A-Z_]+\s+)?mprt_k_([a-z0-9_]+)\(([^)]*)\)'
    for m in re.finditer(kernel, kernels_cu):
        name, params = m.group(1), [p.strip() for p in m.group(2).split(",") if p.strip()]
        args, sizes = [], []
        for i, p in enumerate(params):
            t = re.match(r"(.*?)\b[A-Za-z_][A-Za-z0-9_]*$", " ".join(p.split())).group(1).strip()
            args.append("*(%s *)a[%d]" % (t, i))
            sizes.append("sizeof(%s)" % t)
        out.append("static void thunk_%s(void **a)\n{\n    mprt_k_%s(%s);\n}\n"
                   % (name, name, ", ".join(args)))
        table.append('    {"%s", thunk_%s, %d, {%s}},' % (name, name, len(sizes),
                                                         ", ".join(sizes) or "0"))
    out.append("static const struct {\n    const char *name;\n    void (*fn)(void **);\n"
               "    int nargs;\n    size_t sizes[24];\n} thunks[] = {\n%s\n};\n"
               % "\n".join(table))
    out.append('extern "C" void (*mprt_emu_kernel(const char *name))(void **)\n{\n'
               "    for (size_t i = 0; i < sizeof thunks / sizeof *thunks; i++)\n"
               "        if (strcmp(thunks[i].name, name) == 0)\n"
               "            return thunks[i].fn;\n    return NULL;\n}\n")
    out.append('extern "C" int mprt_emu_kernel_sizes(const char *name, size_t *sizes)\n{\n'
               "    for (size_t i = 0; i < sizeof thunks / sizeof *thunks; i++)\n"
               "        if (strcmp(thunks[i].name, name) == 0) {\n"
               "            memcpy(sizes, thunks[i].sizes, sizeof thunks[i].sizes);\n"
               "            return thunks[i].nargs;\n        }\n    return -1;\n}\n")
    return "\n".join(out), len(table)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("emulate: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def main():
    src, cc, cxx, cuda, work = sys.argv[1:6]
    os.makedirs(work, exist_ok=True)
    rt, here = os.path.join(src, "runtime"), os.path.join(src, "tests", "cuda")
    kernels = os.path.join(src, "runtime", "kernels.cu")
    with open(kernels) as f:
        table, n = thunks(f.read())
    dev = os.path.join(work, "kernels_host.cpp")
    with open(dev, "w") as f:
        f.write('#include "%s"\n#include "%s"\n\n%s' % (os.path.join(here, "emulate_device.h"),
                                                        kernels, table))
    host = os.path.join(work, "emulate.c")
    with open(host, "w") as f:
        f.write("#define _DEFAULT_SOURCE\n#define _POSIX_C_SOURCE 200809L\n")
        for name in RUNTIME:
            f.write('#include "%s"\n' % os.path.join(rt, name))
        for name in [os.path.join(here, "emulate_host.h"), os.path.join(rt, "cuda_ops.c"),
                     os.path.join(here, "emulate_main.c")]:
            f.write('#include "%s"\n' % name)
    inc, lib = os.path.join(cuda, "include"), os.path.join(cuda, "lib64")
    obj_dev, obj_host = os.path.join(work, "kernels_host.o"), os.path.join(work, "emulate.o")
    exe = os.path.join(work, "emulate")
    # kernels.cu is CUDA C++ written for NVRTC: on the host, its unused
    # parameters and the like are no concern of this test.
    run([cxx, "-std=c++17", "-O1", "-w", "-c", dev, "-o", obj_dev])
    # The CPU kernels at -O2, as trainers build them (vectorised loops included).
    run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I", rt, "-I", inc, "-c", host,
         "-o", obj_host])
    run([cxx, obj_host, obj_dev, "-o", exe, "-L", lib,
         "-lcudnn", "-lcublas", "-lopenblas", "-lm", "-pthread"])
    r = subprocess.run([exe], capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    print("emulate: %d kernels of kernels.cu compiled for the host" % n)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
