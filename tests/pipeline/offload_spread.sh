#!/bin/sh
# --offload=auto when nothing fits: samples/gpt.mp as 4 stages on one GPU
# (interleaved, one micro-batch) with a GPU smaller than the fastest
# partition needs, with or without offload, but larger than what the
# partition spreading memory evenly needs with offload. --offload=none must
# be refused in one line; the default must offload, fall back to
# --objective=memory, say both in notes, and plan within the GPU.
# Usage: offload_spread.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
# priced as a step issued op by op (--cuda-graph=off): the launch costs the
# sizes below were chosen for
flags="-batch 48 --microbatches=1 -gpus 1 --schedule=interleaved --virtual-stages=4 --cuda-graph=off"
arena() {   # the memory plan of cuda:0 with these flags
    # shellcheck disable=SC2086
    "$mpcc" "$samples/gpt.mp" $flags "$@" -o plan.c 2>/dev/null
    sed -n 's/^ \* cuda:0 .*memory plan \([0-9]*\) bytes.*/\1/p' plan.c
}
fast=$(arena --offload=none) fast_off=$(arena --offload=activations)
even_off=$(arena --offload=activations --objective=memory)
least=$fast
[ "$fast_off" -lt "$least" ] && least=$fast_off
if [ "$even_off" -ge "$least" ]; then
    echo "FAIL: spread with offload $even_off bytes, not below the fastest partition's $least"
    exit 1
fi
memory=$(( (even_off + least) / 2 ))
echo "memory = $memory" >small.profile
# shellcheck disable=SC2086
if "$mpcc" "$samples/gpt.mp" $flags --offload=none --profile=small.profile -o none.c 2>none.err; then
    echo "FAIL: --offload=none planned on a GPU of $memory bytes"; exit 1
fi
[ "$(wc -l <none.err)" = 1 ] && grep -q "error: .*memory plan needs" none.err ||
    { echo "FAIL: --offload=none: want one error line:"; cat none.err; exit 1; }
# shellcheck disable=SC2086
"$mpcc" "$samples/gpt.mp" $flags --profile=small.profile -o auto.c 2>auto.err ||
    { echo "FAIL: the default did not plan on a GPU of $memory bytes:"; cat auto.err; exit 1; }
grep -q "note: no plan fits without offload; --offload=auto" auto.err &&
    grep -q "planned with --objective=memory" auto.err &&
    grep -q "cuda:0 *offload: [1-9]" auto.err ||
    { echo "FAIL: the notes and the offload line are missing:"; cat auto.err; exit 1; }
got=$(sed -n 's/^ \* cuda:0 .*memory plan \([0-9]*\) bytes.*/\1/p' auto.c)
[ "$got" -le "$memory" ] || { echo "FAIL: planned $got bytes on a GPU of $memory"; exit 1; }
echo "offload_spread: fastest partition $fast bytes ($fast_off with offload), spread with" \
    "offload $even_off; on a GPU of $memory the default plans $got bytes"
