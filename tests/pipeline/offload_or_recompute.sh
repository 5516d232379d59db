#!/bin/sh
# When no plan fits, offload and recomputation are weighed against each
# other: samples/gpt.mp at batch 64 under GPipe with 8 micro-batches on one
# GPU of 4 MB (it needs 6.0 MB as it is). On a fast host link the default
# offloads (the fewest activations with which it fits) and says what
# recomputing would cost; on a link of 100 MB/s it recomputes, faster, and
# says what offloading would cost; with --recompute=none given it must
# offload all the same. Each plan is within the GPU and its predicted step
# is the faster of the two the notes give.
# Usage: offload_or_recompute.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
# priced as a step issued op by op (--cuda-graph=off): the launch costs the
# sizes and links below were chosen for
flags="-gpus 1 -batch 64 --microbatches=8 --schedule=gpipe --cuda-graph=off"
printf 'memory = 4e6\n' >fast.profile
printf 'memory = 4e6\nhost_bandwidth = 1e8\n' >slow.profile
plan() {   # NAME FLAGS...: NAME.err, the predicted step and memory plan checked
    name=$1
    shift
    # shellcheck disable=SC2086
    "$mpcc" "$samples/gpt.mp" $flags "$@" -o $name.c 2>$name.err || { cat $name.err; exit 1; }
    bytes=$(sed -n 's/^ \* cuda:0 .*memory plan \([0-9]*\) bytes.*/\1/p' $name.c)
    [ "$bytes" -le 4000000 ] || { echo "FAIL: $name: $bytes bytes on a GPU of 4 MB"; exit 1; }
}
step() { sed -n 's/.*predicted step \([0-9.e-]*\) s.*/\1/p' "$1.err"; }
other() { sed -n "s/.*$2 .*would take \\([0-9.e-]*\\) s a step.*/\\1/p" "$1.err"; }
faster() {   # NAME OTHER-STEP: the plan's step is below the other's
    awk -v a="$(step $1)" -v b="$2" 'BEGIN { exit !(a < b) }' ||
        { echo "FAIL: $1: $(step $1) s chosen against ${2:-nothing}"; cat $1.err; exit 1; }
}
plan fast --profile=fast.profile
grep -q 'note: no plan fits without offload; --offload=auto keeps [0-9]* of' fast.err ||
    { echo "FAIL: fast link: the default does not offload"; cat fast.err; exit 1; }
faster fast "$(other fast 'recomputing the stages over memory instead')"
plan slow --profile=slow.profile
grep -q 'recomputing the stages over memory (--recompute=auto) is faster than offload' slow.err ||
    { echo "FAIL: slow link: the default does not recompute"; cat slow.err; exit 1; }
faster slow "$(other slow 'offloading instead')"
plan given --profile=slow.profile --recompute=none
grep -q 'keeps [0-9]* of' given.err && ! grep -q 'recomput' given.err ||
    { echo "FAIL: --recompute=none given: want offload alone"; cat given.err; exit 1; }
echo "offload_or_recompute: fast link: offload $(step fast) s against recomputation" \
    "$(other fast 'recomputing the stages over memory instead') s; slow link: recomputation" \
    "$(step slow) s against offload $(other slow 'offloading instead') s"
