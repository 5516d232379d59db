#!/bin/sh
# --offload=auto offloads only what the plan needs: a GPT of width 128 and
# 4 layers (samples/gpt.mp widened) as 4 stages on one CPU device, AdamW,
# with a device memory (a profile file) halfway between the plans with
# everything offloaded (--offload=all) and with nothing. The default must
# plan within that memory, say in its note that it keeps K of the N
# candidates with K < N, offload K (the report's lines add up), predict a
# step no slower than --offload=all's, and its trainer must give the plain
# trainer's losses and checkpoint byte for byte.
# Usage: offload_trim.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
here=$(cd "$(dirname "$0")/../train" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
sed -e 's/^D = 32 /D = 128/' -e 's/^L = 2 /L = 4 /' -e 's/^H = 2 /H = 4 /' \
    "$samples/gpt.mp" >wide.mp
flags="-cpus 1 -batch 4 --microbatches=2 --optimizer=adamw --schedule=interleaved --virtual-stages=4"
plan() {   # NAME FLAGS...: NAME.c, NAME.err
    name=$1
    shift
    # shellcheck disable=SC2086
    "$mpcc" wide.mp $flags "$@" -o $name.c 2>$name.err || { cat $name.err; exit 1; }
}
arena() { sed -n 's/^ \* cpu:0 .*memory plan \([0-9]*\) bytes.*/\1/p' "$1.c"; }
step() { sed -n 's/.*predicted step \([0-9.e-]*\) s.*/\1/p' "$1.err"; }
offloaded() {   # activations and weights the report names
    echo $(( $(sed -n 's/.*offload: \([0-9]*\) \(activation\|weight\).*/\1/p' "$1.err" |
                paste -sd+ -) ))
}
plan none --offload=none
plan all --offload=all
memory=$(( ($(arena none) + $(arena all)) / 2 ))
echo "memory = $memory" >half.profile
plan auto --profile=half.profile
plan all_half --offload=all --profile=half.profile
note=$(grep 'note: no plan fits without offload; --offload=auto keeps' auto.err) ||
    { echo "FAIL: no note of what --offload=auto keeps:"; cat auto.err; exit 1; }
kept=$(echo "$note" | sed -n 's/.*keeps \([0-9]*\) of the \([0-9]*\) .*/\1/p')
could=$(echo "$note" | sed -n 's/.*keeps \([0-9]*\) of the \([0-9]*\) .*/\2/p')
[ -n "$kept" ] && [ "$kept" -lt "$could" ] ||
    { echo "FAIL: --offload=auto kept all it could: $note"; exit 1; }
[ "$(offloaded auto)" = "$kept" ] ||
    { echo "FAIL: the report offloads $(offloaded auto), the note says $kept"; exit 1; }
[ "$(offloaded all_half)" = "$could" ] ||
    { echo "FAIL: --offload=all offloads $(offloaded all_half), the note says $could could"; exit 1; }
[ "$(arena auto)" -le "$memory" ] ||
    { echo "FAIL: --offload=auto planned $(arena auto) bytes on a device of $memory"; exit 1; }
awk -v a="$(step auto)" -v b="$(step all_half)" 'BEGIN { exit !(a <= b) }' ||
    { echo "FAIL: predicted step $(step auto) s with auto, $(step all_half) s with all"; exit 1; }
for t in none auto; do
    libs=$(cd "$here" && /usr/bin/python3 -c "import build_line; print(' '.join(build_line.libraries('$work/$t.c')))")
    cc -O2 -fno-trapping-math -ffp-contract=off $t.c -o $t $libs
    OPENBLAS_NUM_THREADS=1 ./$t --synthetic --seed 3 --steps 2 --save $t.safetensors \
        --loss-log $t.txt 2>$t.log || { cat $t.log; exit 1; }
done
cmp none.txt auto.txt
cmp none.safetensors auto.safetensors
echo "offload_trim: $memory bytes: auto offloads $kept of $could ($(arena auto) bytes," \
    "step $(step auto) s; all: $(arena all) bytes, $(step all_half) s); the losses and" \
    "checkpoint byte for byte"
