#!/bin/sh
# The measured loop and the 2-device speedup (tests/bench/README.md, "Two
# CPU devices and the measured loop"): ResNet-50 at 64x64, batch 32, one
# BLAS thread per device. Builds the 1-device trainer, the 2-device one as
# mpcc plans it, profiles the latter (./train --profile) and builds the
# 2-device trainer mpcc plans from that profile (--measured); then times
# the three, alternating, each the best of three measurements of
# ((3 + N steps) - (3 steps)) / N.
# Usage: bench_loop.sh [BUILD_DIR] [WORK_DIR]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=${2:-/tmp/mpcc-bench/loop}
mpcc=$build/mpcc
export PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$work" && cd "$work"
[ -f model.onnx ] || /usr/bin/python3 "$root/tests/bench/gpu_models.py" resnet50 --out . \
    --size 64 --classes 10 >/dev/null
build_one() {   # name, then mpcc options
    name=$1
    shift
    "$mpcc" model.onnx -batch 32 "$@" -o "$name.c" 2>"$name.plan"
    $(sed -n 's/^ \* build:  //p' "$name.c" | sed "s/-o train/-o $name/")
}
build_one one -cpus 1
build_one two -cpus 2
./two --synthetic --steps 3 --profile prof.json >/dev/null 2>&1
build_one loop -cpus 2 --measured=prof.json
step() {
    t0=$(date +%s%N); ./"$1" --synthetic --steps 3 >/dev/null 2>&1; t1=$(date +%s%N)
    ./"$1" --synthetic --steps 7 >/dev/null 2>&1; t2=$(date +%s%N)
    echo "scale=4; (($t2 - $t1) - ($t1 - $t0)) / 1000000000 / 4" | bc
}
best_one= best_two= best_loop=
for r in 1 2 3; do
    for b in one two loop; do
        t=$(step $b)
        eval "best_$b=\$(echo \"\$best_$b $t\" | tr ' ' '\\n' | grep . | sort -n | head -1)"
    done
done
plan() { sed -n 's/^mpcc: \(.*schedule.*\): predicted step \([^ ]*\) s.*/\1, predicted \2 s/p' "$1.plan"; }
echo "| trainer | plan | measured step | speedup over 1 device |"
echo "|---|---|---|---|"
echo "| 1 device | $(plan one) | $best_one s | 1 |"
echo "| 2 devices, as planned | $(plan two) | $best_two s | $(echo "scale=2; $best_one / $best_two" | bc) |"
echo "| 2 devices, after --measured | $(plan loop) | $best_loop s | $(echo "scale=2; $best_one / $best_loop" | bc) |"
