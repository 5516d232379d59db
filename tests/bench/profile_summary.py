#!/usr/bin/env python3
"""Sums a trainer's per-node times (./train --profile FILE) by kind of node.

usage: profile_summary.py PROF.json [--top N]

A node's kind is its ONNX op, read from the exporter's name (/h.0/attn/
MatMul_1 is a MatMul), with the gradient's own suffix for mpcc's backward
nodes (/h.0/attn/MatMul_1/dA is "MatMul dA"); the optimizer's updates are
one kind. Each node's figure is its
mean seconds per call; the trainer was run with one micro-batch, so each
node ran once per step and the sums add up to the step. Prints a Markdown
table of the kinds, the longest first, then the N longest nodes."""
import argparse
import json
import re
import sys
from collections import defaultdict


def kind_of(name, phase):
    parts = [p for p in name.split("/") if p]
    if phase == "update":
        return "optimizer"
    if not parts:
        return name
    grad = ""
    if phase == "backward" and len(parts) > 1:
        grad = " " + parts.pop()
    op = re.sub(r"(_\d+)+$", "", parts[-1])
    return op + grad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    with open(a.profile) as f:
        prof = json.load(f)
    nodes = prof.get("nodes", [])
    if not nodes:
        sys.exit("%s: no nodes were timed" % a.profile)
    by_kind = defaultdict(lambda: [0.0, 0])
    by_phase = defaultdict(float)
    for n in nodes:
        k = by_kind[(kind_of(n["name"], n["phase"]), n["phase"])]
        k[0] += n["seconds"]
        k[1] += 1
        by_phase[n["phase"]] += n["seconds"]
    total = sum(by_phase.values())
    print("step %.1f ms: %s" % (1e3 * total, ", ".join(
        "%s %.1f ms" % (p, 1e3 * s) for p, s in sorted(by_phase.items()))))
    print()
    print("| kind | phase | nodes | ms / step | share |")
    print("|---|---|---|---|---|")
    for (kind, phase), (s, count) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        if s < 0.005 * total:
            continue
        print("| %s | %s | %d | %.2f | %.1f%% |" % (kind, phase, count, 1e3 * s, 100 * s / total))
    print()
    print("| node | phase | ms |")
    print("|---|---|---|")
    for n in sorted(nodes, key=lambda n: -n["seconds"])[:a.top]:
        print("| %s | %s | %.3f |" % (n["name"], n["phase"], 1e3 * n["seconds"]))


if __name__ == "__main__":
    main()
