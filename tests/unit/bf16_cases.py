#!/usr/bin/python3
"""bf16_cases.py OUT — float32 values and PyTorch's bfloat16 of each, for
test_bf16: OUT holds n records of (uint32 float32 bits, uint16 bf16 bits,
uint16 0), little-endian. The values: random bits over every exponent,
exact ties between two bf16 values (even and odd below), one unit either
side of a tie, subnormals, signed zeros, infinities, the largest floats
(which round to infinity) and NaNs."""
import struct
import sys

import numpy as np
import torch

rng = np.random.default_rng(5)
bits = [int(b) for b in rng.integers(0, 1 << 32, 30000, dtype=np.uint64)]
for hi in [int(h) for h in rng.integers(0, 1 << 16, 3000)]:
    base = hi << 16
    bits += [base | 0x8000, (base | 0x8000) - 1, (base | 0x8000) + 1, base]
bits += [0, 0x80000000, 1, 0x80000001, 0x007fffff, 0x00008000, 0x00018000,
         0x7f800000, 0xff800000, 0x7f7fffff, 0xff7fffff, 0x7f7f8000,
         0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff]
x = np.array(bits, np.uint32).view(np.float32)
b = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy()
b = b.view(np.uint16)
with open(sys.argv[1], "wb") as f:
    for xi, bi in zip(np.array(bits, np.uint32), b):
        f.write(struct.pack("<IHH", int(xi), int(bi), 0))
print("bf16_cases: %d values" % len(bits))
