#!/bin/sh
# --offload on CPU devices: the trainer gives the same losses and
# checkpoint, byte for byte, as without offload, with less memory on the
# device.
#   - activations: what a stage keeps for its backward pass waits in the
#     host arena; samples/resnet.mp on one CPU device and samples/gpt.mp on
#     two, under GPipe with 8 micro-batches, 3 steps each.
#   - weights and all: the parameters and AdamW's state live in the host
#     arena and come in for the actions that use them; a wider GPT
#     (samples/gpt.mp at width 128, 4 layers) as 4 stages on one CPU
#     device. Besides the losses and checkpoint: a run resumed from the
#     plain trainer's checkpoint of step 2 (loaded into host memory) ends
#     on the plain trainer's checkpoint of step 3, and evaluation (which
#     brings each stage's weights in) reports the plain trainer's numbers.
# The heads of the offloading trainers name a host arena and what it
# holds; their arenas are smaller than the plain ones'.
# Usage: offload.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
arena() { sed -n 's/^ \* cpu:0 .*memory plan \([0-9]*\) bytes.*/\1/p' "$1"; }
build() {   # NAME: NAME.c into NAME
    libs=$(cd "$here" && /usr/bin/python3 -c "import build_line; print(' '.join(build_line.libraries('$work/$1.c')))")
    cc -O2 -fno-trapping-math -ffp-contract=off $1.c -o $1 $libs
}
train() {   # TRAINER TRAINER-FLAGS...
    exe=$1
    shift
    OPENBLAS_NUM_THREADS=1 ./$exe --synthetic --seed 3 "$@" 2>$exe.log ||
        { cat $exe.log; exit 1; }
}
check() {   # NAME MODEL KINDS FLAGS...
    name=$1 model=$2 kinds=$3
    shift 3
    for o in none $kinds; do
        "$mpcc" "$model" "$@" --offload=$o -o $name-$o.c
        build $name-$o
        train $name-$o --steps 3 --save $name-$o.safetensors --loss-log $name-$o.txt
    done
    for o in $kinds; do
        case $o in
        activations) holds='offloaded activations' ;;
        weights) holds='offloaded weights' ;;
        all) holds='offloaded activations and weights' ;;
        esac
        grep -q "host arena [0-9]* bytes ($holds)" $name-$o.c ||
            { echo "FAIL: $name: the --offload=$o trainer's head names no host arena of $holds"; exit 1; }
        grep -q '+ [0-9.]* MB host (offloaded)' $name-$o.log ||
            { echo "FAIL: $name: the trainer's memory plan line names no host arena"; exit 1; }
        plain=$(arena $name-none.c) less=$(arena $name-$o.c)
        [ "$less" -lt "$plain" ] ||
            { echo "FAIL: $name: cpu:0 needs $less bytes with --offload=$o, $plain without"; exit 1; }
        cmp $name-none.txt $name-$o.txt
        cmp $name-none.safetensors $name-$o.safetensors
        echo "offload: $name --offload=$o: cpu:0 $less bytes against $plain; the losses" \
            "($(tr '\n' ' ' <$name-none.txt)) and checkpoint byte for byte"
    done
}
check resnet "$samples/resnet.mp" activations -cpus 1 -batch 8 --microbatches=8 \
    --schedule=gpipe --lr=0.05
check gpt "$samples/gpt.mp" activations -cpus 2 -batch 8 --microbatches=8 --schedule=gpipe

sed -e 's/^D = 32 /D = 128/' -e 's/^L = 2 /L = 4 /' -e 's/^H = 2 /H = 4 /' \
    "$samples/gpt.mp" >wide.mp
check wide wide.mp "weights all" -cpus 1 -batch 4 --microbatches=2 --optimizer=adamw \
    --schedule=interleaved --virtual-stages=4
# resuming: a checkpoint loads into host memory
train wide-none --steps 2 --save wide-2.safetensors
train wide-weights --resume wide-2.safetensors --steps 1 --save wide-resumed.safetensors
cmp wide-none.safetensors wide-resumed.safetensors
# evaluation brings each stage's weights in before its forward
/usr/bin/python3 -c "
import numpy as np
np.save('tokens.npy', np.random.RandomState(0).randint(0, 128, size=2000).astype(np.int64))"
for o in none weights all; do
    train wide-$o --steps 4 --eval-tokens tokens.npy --eval-every 2
    grep '^eval step' wide-$o.log >wide-$o.eval
done
[ "$(wc -l <wide-none.eval)" -eq 2 ] || { echo "FAIL: wide: no evaluation lines"; exit 1; }
cmp wide-none.eval wide-weights.eval
cmp wide-none.eval wide-all.eval
echo "offload: wide: resumed onto host memory byte for byte; evaluation: $(tail -1 wide-none.eval)"
# pictures: the trainer's trace and mpcc's prediction, with their copies to
# host memory and back, draw (--gantt-from)
train wide-all --steps 2 --trace wide-run.json
"$mpcc" wide.mp -cpus 1 -batch 4 --microbatches=2 --optimizer=adamw --schedule=interleaved \
    --virtual-stages=4 --offload=all --trace=wide-pred.json -o /dev/null 2>/dev/null
for t in run pred; do
    "$mpcc" --gantt-from=wide-$t.json -o wide-$t.svg 2>wide-$t.err || { cat wide-$t.err; exit 1; }
    copies=$(grep -c 'data-kind="copy"' wide-$t.svg)
    want=$(grep -c '"name":"\(offload\|fetch\|weight\) ' wide-$t.json)
    [ "$want" -gt 0 ] && [ "$copies" -ge "$want" ] ||
        { echo "FAIL: wide-$t.svg draws $copies copies of the trace's $want to host and back"; exit 1; }
done
echo "offload: wide: the run's and the prediction's pictures draw their copies to host memory and back"
