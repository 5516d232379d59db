#!/usr/bin/python3
"""make_io_fixtures.py — reference files for test_npy and test_safetensors,
written by numpy and by the official safetensors package, and the checks
that those libraries read back what the runtime wrote.

    make_io_fixtures.py OUTDIR                 write the fixtures
    make_io_fixtures.py --verify-npy OUTDIR    numpy reads every mprt_*.npy
    make_io_fixtures.py --verify-st OUTDIR     safetensors reads mprt_*.safetensors

Run with Debian's /usr/bin/python3 (it has numpy); safetensors comes from
PyPI: /usr/bin/python3 -m pip install --break-system-packages safetensors

Values follow value(i) = scale * i + offset over the flat index i; the C
tests hold the same table (GOOD_NPY in test_npy.c, ST_ALL in
test_safetensors.c)."""
import os
import sys

import numpy as np
from numpy.lib import format as npformat

try:
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError:
    sys.exit("make_io_fixtures.py: the safetensors package is missing; install it with\n"
             "  /usr/bin/python3 -m pip install --break-system-packages safetensors")


def ramp(dtype, shape, scale, offset):
    n = int(np.prod(shape, dtype=np.int64))
    return (np.arange(n, dtype=np.float64) * scale + offset).astype(dtype).reshape(shape)


# name -> array; the C table GOOD_NPY mirrors these.
GOOD_NPY = {
    "f32": ramp(np.float32, (2, 3, 4), 0.5, -3),
    "f64": ramp(np.float64, (5,), 0.25, -1),
    "i64": ramp(np.int64, (2, 3), 1000000007, -3000000000),
    "i32": ramp(np.int32, (3, 2), 7, -20),
    "i16": ramp(np.int16, (4,), 1000, -2000),
    "i8": ramp(np.int8, (4,), 50, -100),
    "u8": ramp(np.uint8, (4,), 85, 0),
    "bool": np.array([[True, False], [False, True]]),
    "f16": ramp(np.float16, (6,), 0.5, -1),
    "scalar": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "rank8": ramp(np.int32, (1, 2, 1, 2, 1, 2, 1, 2), 1, 0),
}
VERSIONED_NPY = {       # written with numpy.lib.format.write_array(version=...)
    "v2": ((2, 0), ramp(np.float32, (3,), 0.5, -3)),
    "v3": ((3, 0), ramp(np.float64, (2, 2), 0.25, -1)),
}

# name -> array; the C table ST_ALL mirrors these.
ST_ALL = {
    "f32": ramp(np.float32, (2, 3), 0.5, -3),
    "f64": ramp(np.float64, (4,), 0.25, -1),
    "f16": ramp(np.float16, (3,), 0.5, -1),
    "i64": ramp(np.int64, (2, 2), 1000000007, -3000000000),
    "i32": ramp(np.int32, (5,), 7, -20),
    "i16": ramp(np.int16, (3,), 1000, -2000),
    "i8": ramp(np.int8, (4,), 50, -100),
    "u8": ramp(np.uint8, (3,), 85, 0),
    "bool": np.array([[True, False], [False, True]]),
    "scalar": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 4), dtype=np.float32),
}
ST_ALL_META = {"format": "np", "step": "42"}

# Names an ONNX model may hold; test_safetensors.c looks each one up.
ST_ODD = {
    'quote"name': ramp(np.float32, (2,), 1, 0),
    "back\\slash": ramp(np.float32, (2,), 1, 2),
    "new\nline": ramp(np.float32, (2,), 1, 4),
    "tab\tand\x01ctl": ramp(np.float32, (2,), 1, 6),
    "*/ comment": ramp(np.float32, (2,), 1, 8),
    "layer1/conv.weight": ramp(np.float32, (2,), 1, 10),
    "caf\u00e9 \U0001d11e": ramp(np.float32, (2,), 1, 12),
}
ST_ODD_META = {"note": 'a "quoted" \\ value\nwith a newline', "unicode": "caf\u00e9 \U0001d11e",
               "empty": ""}


def write_npy(outdir):
    for name, a in GOOD_NPY.items():
        np.save(os.path.join(outdir, name + ".npy"), a)
    for name, (version, a) in VERSIONED_NPY.items():
        with open(os.path.join(outdir, name + ".npy"), "wb") as f:
            npformat.write_array(f, a, version=version)

    def bad(name, a):
        path = os.path.join(outdir, "bad_" + name + ".npy")
        np.save(path, a)
        return path

    bad("fortran", np.asfortranarray(ramp(np.float32, (2, 3), 1, 0)))
    bad("bigendian", ramp(">f4", (4,), 1, 0))
    bad("complex", np.zeros(3, dtype=np.complex64))
    bad("u16", np.zeros(3, dtype=np.uint16))
    bad("unicode", np.array(["ab", "c"]))
    bad("structured", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))

    def edit(name, fn):
        path = bad(name, ramp(np.float32, (100,), 1, 0))
        with open(path, "rb") as f:
            data = bytearray(f.read())
        with open(path, "wb") as f:
            f.write(fn(data))

    edit("truncated", lambda d: d[:-50])
    edit("trailing", lambda d: d + b"\0\0\0\0")
    edit("hdrpast", lambda d: d[:8] + (60000).to_bytes(2, "little") + d[10:])
    edit("inheader", lambda d: d[:30])
    edit("short", lambda d: d[:7])
    edit("version", lambda d: d[:6] + b"\x04" + d[7:])
    edit("magic", lambda d: b"NOTNUMPY" + d[8:])


def write_st(outdir):
    save_file(ST_ALL, os.path.join(outdir, "st_all.safetensors"), metadata=ST_ALL_META)
    save_file(ST_ODD, os.path.join(outdir, "st_odd.safetensors"), metadata=ST_ODD_META)
    with open(os.path.join(outdir, "st_all.safetensors"), "rb") as f:
        data = f.read()
    with open(os.path.join(outdir, "bad_st_truncated.safetensors"), "wb") as f:
        f.write(data[:-3])
    try:        # numpy has no bfloat16: torch (Debian's python3-torch) writes it
        import torch
        from safetensors.torch import save_file as save_torch
        save_torch({"bf16": torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16)},
                   os.path.join(outdir, "st_bf16.safetensors"))
    except ImportError:
        print("make_io_fixtures.py: no torch, so no bfloat16 fixture")


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def verify_npy(outdir):
    names = sorted(f for f in os.listdir(outdir) if f.startswith("mprt_") and f.endswith(".npy"))
    bad = 0
    for name in names:
        path = os.path.join(outdir, name)
        ref = np.load(os.path.join(outdir, name[len("mprt_"):]))
        with open(path, "rb") as f:
            version = npformat.read_magic(f)
            npformat.read_array_header_1_0(f)
            aligned = f.tell() % 64 == 0
        got = np.load(path)
        ok = version == (1, 0) and aligned and same(got, ref)
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: version {version}, data at a 64-byte "
              f"boundary: {aligned}, {got.dtype} {got.shape}")
    if not names:
        print("verify-npy: no mprt_*.npy files; run test_npy first")
    print(f"verify-npy: {len(names) - bad} passed, {bad} failed")
    return 1 if bad or not names else 0


def verify_st(outdir):
    bad = checked = 0
    for ref_name, meta in (("st_all", ST_ALL_META), ("st_odd", ST_ODD_META)):
        path = os.path.join(outdir, "mprt_" + ref_name[3:] + ".safetensors")
        ref = load_file(os.path.join(outdir, ref_name + ".safetensors"))
        got = load_file(path)
        with safe_open(path, framework="np") as f:
            got_meta = f.metadata()
        ok = (sorted(got) == sorted(ref) and all(same(got[k], ref[k]) for k in ref)
              and got_meta == meta)
        checked += 1
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(path)}: {len(got)} tensors "
              f"{sorted(got)!r}, metadata {got_meta!r}")
    bf16 = os.path.join(outdir, "mprt_bf16.safetensors")
    if os.path.exists(bf16):
        import torch
        from safetensors.torch import load_file as load_torch
        got = load_torch(bf16)["bf16"]
        ok = got.dtype == torch.bfloat16 and got.tolist() == [1.0, -2.0, 0.5]
        checked += 1
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} mprt_bf16.safetensors: {got!r}")
    print(f"verify-st: {checked - bad} passed, {bad} failed")
    return 1 if bad else 0


def main(argv):
    if len(argv) == 3 and argv[1] == "--verify-npy":
        return verify_npy(argv[2])
    if len(argv) == 3 and argv[1] == "--verify-st":
        return verify_st(argv[2])
    if len(argv) != 2 or argv[1].startswith("-"):
        sys.exit(__doc__)
    os.makedirs(argv[1], exist_ok=True)
    write_npy(argv[1])
    write_st(argv[1])
    print(f"make_io_fixtures.py: fixtures in {argv[1]} (numpy {np.__version__}, "
          f"safetensors {safetensors.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
