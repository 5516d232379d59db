#!/usr/bin/python3
"""Summarise pipeline timelines in Chrome trace format: the predicted step
that `mpcc --trace FILE` writes and the measured one of `./train --trace
FILE` (docs/pipeline.md). Prints one Markdown table with a row per trace
and device.

Both files hold a process per device (named by a "process_name" metadata
event), a thread per stream (0 compute, 1 send, 2 send-back) and a complete
("X") event per action, "cat" "compute" or "copy". Per device:

  busy    the sum of the durations of its compute actions (as mpcc's
          simulator counts it)
  copies  the sum of the durations of the copies it sends
  step    the time from the first action's start to the last action's end,
          over every device (for mpcc's prediction, the simulated step time
          its "step" marker carries, when later)
  bubble  1 - (busy of every device) / (devices x step), mpcc's definition

Run:  trace_summary.py LABEL=FILE [LABEL=FILE ...]
"""
import json
import sys


def summarise(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names, busy, copies, count = {}, {}, {}, {}
    start, end, marker = None, None, 0.0
    for e in events:
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        elif ph == "X":
            pid, ts, dur = e["pid"], float(e["ts"]), float(e["dur"])
            start = ts if start is None else min(start, ts)
            end = ts + dur if end is None else max(end, ts + dur)
            if e.get("cat") == "copy":
                copies[pid] = copies.get(pid, 0.0) + dur
            else:
                busy[pid] = busy.get(pid, 0.0) + dur
                count[pid] = count.get(pid, 0) + 1
        elif ph == "i" and e.get("name") == "step":
            marker = float(e["ts"])
    if start is None:
        raise SystemExit("trace_summary: %s: no actions in the trace" % path)
    step = max(end - start, marker - start if marker else 0.0)
    devs = sorted(set(names) | set(busy) | set(copies))
    total = sum(busy.get(d, 0.0) for d in devs)
    bubble = 1 - total / (len(devs) * step) if step > 0 else 0.0
    return [(names.get(d, str(d)), busy.get(d, 0.0), copies.get(d, 0.0), count.get(d, 0))
            for d in devs], step, bubble


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        raise SystemExit("usage: trace_summary.py LABEL=FILE [LABEL=FILE ...]")
    print("| timeline | device | compute actions | busy (ms) | busy / step | copies sent (ms)"
          " | step (ms) | bubble |")
    print("|---|---|---|---|---|---|---|---|")
    for arg in sys.argv[1:]:
        label, path = arg.split("=", 1)
        devs, step, bubble = summarise(path)
        for i, (name, busy, copies, n) in enumerate(devs):
            print("| %s | %s | %d | %.3f | %.0f%% | %.3f | %s | %s |"
                  % (label if i == 0 else "", name, n, busy / 1e3,
                     100 * busy / step if step else 0, copies / 1e3,
                     "%.3f" % (step / 1e3) if i == 0 else "",
                     "%.1f%%" % (100 * bubble) if i == 0 else ""))


if __name__ == "__main__":
    main()
