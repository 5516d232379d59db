#!/bin/sh
# The CPU devices share the cores as the plan says (runtime/stream.c): one
# thread each, and the rest in proportion to each device's predicted busy
# seconds, the trainer's cpu_shares table (largest remainders rounded
# up). A plan whose second stage holds nearly all the work (the GPT sample
# cut after its embeddings) on MPRT_CORES cores: the trainer's `memory
# plan` line must give the counts worked out here from the table; with
# OPENBLAS_NUM_THREADS set every device gets OpenBLAS's count instead.
# Usage: cpu_shares.sh MPCC SAMPLES_DIR WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
mkdir -p "$work" && cd "$work"
"$mpcc" "$samples/gpt.mp" -cpus 2 -batch 8 --schedule=gpipe --split=Add_3 -o train.c 2>plan.txt
$(sed -n 's/^ \* build:  //p' train.c)
shares=$(sed -n 's/^static const double cpu_shares\[\] = {\(.*\)};$/\1/p' train.c)
[ -n "$shares" ] || { echo "no cpu_shares table in train.c"; exit 1; }

threads() {   # the counts the memory plan line reports, one line
    env -u OPENBLAS_NUM_THREADS "$@" ./train --synthetic --steps 1 2>&1 >/dev/null |
        sed -n 's/^memory plan:.*cpu:0 [0-9.]* MB (\([0-9]*\) threads*) cpu:1 [0-9.]* MB (\([0-9]*\) threads*).*/\1 \2/p'
}

expect() {   # cores -> the counts by the rule
    /usr/bin/python3 - "$1" "$shares" <<'PY'
import sys
cores = int(sys.argv[1]); w = [float(x) for x in sys.argv[2].split(",")]
rest = max(cores - len(w), 0); q = [rest * x / sum(w) for x in w]
t = [1 + int(x) for x in q]; left = [x - int(x) for x in q]
for _ in range(rest - sum(int(x) for x in q)):
    k = max(range(len(w)), key=lambda i: (left[i], -i)); t[k] += 1; left[k] = -1
print(" ".join(map(str, t)))
PY
}

for cores in 2 7 16; do
    got=$(threads MPRT_CORES=$cores) want=$(expect $cores)
    echo "MPRT_CORES=$cores: shares $shares, threads $got (expected $want)"
    [ "$got" = "$want" ] || { echo "FAIL: the split is not the plan's"; exit 1; }
done
case $(expect 16) in 1\ 15) ;; *) echo "FAIL: the busy stage should get 15 of 16 cores"; exit 1 ;; esac
got=$(env OPENBLAS_NUM_THREADS=1 ./train --synthetic --steps 1 2>&1 >/dev/null | grep -c "cpu:0 [0-9.]* MB (1 thread) cpu:1 [0-9.]* MB (1 thread)")
[ "$got" = 1 ] || { echo "FAIL: OPENBLAS_NUM_THREADS=1 should give each device one thread"; exit 1; }
echo "ok"
