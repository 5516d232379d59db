#!/usr/bin/python3
"""Compare two value-shape dumps (reference vs. the compiler's --dump=shapes).

Each file has lines  `<dtype> [d0,d1,...] "<name>"`  (blank lines and lines
starting with '#' are ignored; the quoted name is read with ast.literal_eval).
For every name in both files the dtype and dims must be equal.  Prints one
line per mismatch and a final summary line

    compare_shapes: N compared, M mismatched, K only-in-ref, J only-in-actual

Exit status 1 if anything mismatched, if a --require name is missing from
ACTUAL or mismatched, or if fewer than --min-compared values were compared;
2 on unreadable input; else 0.

Run:  /usr/bin/python3 tests/compare_shapes.py REF.txt ACTUAL.txt \
          [--require logits --require input] [--min-compared 10]
"""
import argparse
import ast
import re
import sys

LINE = re.compile(r'^(\w+) \[(-?\d+(?:,-?\d+)*)?\] (".*")$')


def parse(path):
    """{name: (dtype, dims tuple)}; exits with status 2 on a malformed line."""
    values = {}
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip() or line.startswith("#"):
                continue
            m = LINE.match(line)
            try:
                name = ast.literal_eval(m.group(3)) if m else None
            except (ValueError, SyntaxError):
                name = None
            if not isinstance(name, str):
                sys.stderr.write("compare_shapes: %s:%d: bad line: %r\n"
                                 % (path, lineno, line))
                sys.exit(2)
            dims = tuple(int(d) for d in m.group(2).split(",")) \
                if m.group(2) else ()
            entry = (m.group(1), dims)
            if name in values and values[name] != entry:
                sys.stderr.write("compare_shapes: %s:%d: %s listed twice with "
                                 "different shapes\n" % (path, lineno,
                                                         show_name(name)))
                sys.exit(2)
            values[name] = entry
    return values


def show_name(name):
    """Name quoted the way the dump files write it."""
    esc = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t",
           "\r": "\\r"}
    return '"%s"' % "".join(
        esc.get(c) or ("\\x%02x" % ord(c) if ord(c) < 0x20 or c == "\x7f"
                       else c) for c in name)


def show(entry):
    return "%s [%s]" % (entry[0], ",".join(map(str, entry[1])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref")
    ap.add_argument("actual")
    ap.add_argument("--require", action="append", default=[], metavar="NAME",
                    help="name that must be in ACTUAL and match (repeatable)")
    ap.add_argument("--min-compared", type=int, default=0, metavar="N")
    args = ap.parse_args()
    sys.stdout.reconfigure(errors="backslashreplace")

    ref, actual = parse(args.ref), parse(args.actual)
    common = [n for n in ref if n in actual]
    bad = 0
    for name in common:
        if ref[name] != actual[name]:
            bad += 1
            print("mismatch %s: ref %s, actual %s"
                  % (show_name(name), show(ref[name]), show(actual[name])))
    failed = bad > 0
    for name in args.require:
        if name not in actual:
            print("required %s: missing from actual" % show_name(name))
            failed = True
        elif name in ref and ref[name] != actual[name]:
            failed = True  # already printed as a mismatch
    if len(common) < args.min_compared:
        print("only %d compared, fewer than --min-compared %d"
              % (len(common), args.min_compared))
        failed = True
    print("compare_shapes: %d compared, %d mismatched, %d only-in-ref, "
          "%d only-in-actual" % (len(common), bad, len(ref) - len(common),
                                 len(actual) - len(common)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
