#!/usr/bin/python3
"""Compare a generated trainer's evaluations with a ref_train.py reference.

EVAL_JSON is the eval.json that ref_train.py --eval-rows wrote: PyTorch's
model.eval() loss, correct and count on the held-out rows after the steps it
lists.  LOG holds the trainer's standard error; its evaluation lines read

  eval step S: loss L  accuracy A (CORRECT/COUNT)  on N rows of FILE

Checks: the trainer evaluated after exactly the reference's steps (those
after step S with --after S: a run resumed from step S), in order;
every loss has |a-b| <= rtol*|b|; correct and count are equal.  The last line
is "compare_eval: E evaluations, worst loss rel err X: ok|FAILED"; exit
status 1 on any failure.

Run:  /usr/bin/python3 tests/train/compare_eval.py EVAL_JSON LOG [--rtol 1e-4]
          [--after S]
"""
import argparse
import json
import re
import sys

LINE = re.compile(r"^eval step (\d+): loss (\S+)  accuracy \S+ \((\d+)/(\d+)\)"
                  r"  on (\d+) rows of ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("eval_json")
    ap.add_argument("log")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--after", type=int, default=0)
    args = ap.parse_args()
    with open(args.eval_json) as f:
        ref = json.load(f)
    ref["evals"] = [r for r in ref["evals"] if r["step"] > args.after]
    got = []
    with open(args.log) as f:
        for line in f:
            m = LINE.match(line)
            if m:
                got.append({"step": int(m.group(1)), "loss": float(m.group(2)),
                            "correct": int(m.group(3)), "count": int(m.group(4)),
                            "rows": int(m.group(5))})
    failed = False
    if [g["step"] for g in got] != [r["step"] for r in ref["evals"]]:
        print("steps evaluated: %s, the reference's: %s"
              % ([g["step"] for g in got], [r["step"] for r in ref["evals"]]))
        failed = True
    worst = 0.0
    for g, r in zip(got, ref["evals"]):
        rel = abs(g["loss"] - r["loss"]) / abs(r["loss"])
        worst = max(worst, rel)
        bad = not rel <= args.rtol or g["correct"] != r["correct"] \
            or g["count"] != r["count"] or g["rows"] != ref["rows"]
        failed |= bad
        print("eval step %d: loss %.9g ref %.9g rel err %.3g, correct %d/%d "
              "ref %d/%d, %d rows ref %d%s"
              % (g["step"], g["loss"], r["loss"], rel, g["correct"], g["count"],
                 r["correct"], r["count"], g["rows"], ref["rows"],
                 "  FAIL" if bad else ""))
    print("compare_eval: %d evaluations, worst loss rel err %.3g: %s"
          % (len(got), worst, "FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
