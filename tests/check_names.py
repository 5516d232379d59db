"""Checks that odd names from a model survive mpcc's dumps exactly.

Runs `mpcc --dump=shapes` and `--dump=ir` on MODEL and requires: the set of
value names in the shapes dump (read back through their escapes) equals the
model's own value names as onnx reads them; the IR dump has one line per
record (every line starts with a record keyword or ';'), so no name broke a
line; and every node of the model appears once.

    /usr/bin/python3 tests/check_names.py MPCC MODEL
"""
import ast
import subprocess
import sys

import onnx


def main():
    mpcc, path = sys.argv[1], sys.argv[2]
    model = onnx.load(path, load_external_data=False)
    g = model.graph
    want = {v.name for v in g.input} | {i.name for i in g.initializer}
    for n in g.node:
        want |= {o for o in n.output if o}
    shapes = subprocess.run([mpcc, path, "--dump=shapes"], capture_output=True,
                            text=True, check=True).stdout
    got = set()
    for line in shapes.splitlines():
        got.add(ast.literal_eval(line.split("] ", 1)[1]))
    ir = subprocess.run([mpcc, path, "--dump=ir"], capture_output=True, text=True,
                        check=True).stdout
    keywords = ("; ", "input  ", "param  ", "const  ", "node   ", "output ")
    bad = [l for l in ir.splitlines() if not l.startswith(keywords)]
    nodes = [l for l in ir.splitlines() if l.startswith("node   ")]
    ok = True
    if got != want:
        print("names differ: only in model %r, only in mpcc %r" % (want - got, got - want))
        ok = False
    if bad:
        print("lines broken by a name: %r" % bad)
        ok = False
    if len(nodes) != len([n for n in g.node if n.op_type != "Constant"]):
        print("expected %d node lines, got %d" % (len(g.node), len(nodes)))
        ok = False
    print("check_names: %s, %d names, %d node lines" % ("ok" if ok else "FAILED",
                                                       len(want), len(nodes)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
