#!/bin/sh
# A reshape of an activation that stays on its stage's compute stream takes
# its input's buffer (compiler/parallel/plan.c): the test GPT's trainer on
# one CPU device moves no reshape's bytes (each such node's line says
# "in place"), while cut between its attention's value reshapes and their
# reader (--split) the two that a copy sends to the next stage, and their
# gradients, copy as before. The two trainers give the same losses, bit
# for bit, and --dump=costs prices a reshape in place at nothing.
# Usage: reshape_in_place.sh MPCC GPT_ONNX WORKDIR
set -eu
mpcc=$1 model=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
count() {   # file, pattern
    grep -c "$2" "$1" || true
}
"$mpcc" "$model" -cpus 1 -batch 2 -o one.c 2>/dev/null
"$mpcc" "$model" -cpus 2 -batch 2 --split=/blocks.0/attn/Reshape_2 -o two.c 2>/dev/null
for t in one two; do
    echo "$t: $(count $t.c 'in place: its input') in place, $(count $t.c '^    mprt_copy(') copies"
    build=$(sed -n 's/^ \* build: *//p' "$t.c" | sed "s/-o train/-o $t/")
    $build -Wall -Werror
    OPENBLAS_NUM_THREADS=1 "./$t" --synthetic --steps 3 --loss-log "$t.losses" >/dev/null 2>&1
done
cmp one.losses two.losses && echo "the same losses"
"$mpcc" "$model" -cpus 1 -batch 2 --dump=costs 2>/dev/null |
    awk '$(NF-1) == "Reshape" { n++; if ($7 + 0 != 0) bad++ }
         END { printf "%d reshapes, %d priced\n", n, bad }'
