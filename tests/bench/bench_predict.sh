#!/bin/sh
# Predicted against measured (tests/bench/README.md, "The cost model against
# this machine"): for ResNet-50 (64x64, batch 32), the GPT of bench_train.sh
# and its CNN, on 1 and 2 CPU devices with one BLAS thread each, mpcc's
# predicted step and per-device busy time (from `mpcc --trace`) next to the
# trainer's measured ones (the step from (3 + N steps) - (3 steps), the busy
# times from `./train --trace` of the last step), and the error of each.
# Usage: bench_predict.sh [BUILD_DIR] [WORK_DIR] [MODELS...]
#   (MPCC_CPU_PROFILE unset: the calibrated profile of this machine)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=${2:-/tmp/mpcc-bench/predict}
shift 2 2>/dev/null || shift $#
models=${*:-resnet50 gpt cnn}
mpcc=$build/mpcc
export PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$work"
now() { date +%s%N; }

setup() {   # model -> model.onnx and the mpcc flags in $flags, the steps in $steps
    case $1 in
    resnet50)
        [ -f model.onnx ] || /usr/bin/python3 "$root/tests/bench/gpu_models.py" resnet50 \
            --out . --size 64 --classes 10 >/dev/null
        flags="-batch 32" steps=4 ;;
    gpt)
        [ -f model.onnx ] || /usr/bin/python3 "$root/tests/models/export_gpt.py" --out model.onnx \
            --vocab 512 --d 256 --heads 4 --layers 4 --T 128 --batch 8 >/dev/null
        flags="-batch 8 --class-axis=-1" steps=10 ;;
    cnn)
        [ -f model.onnx ] || /usr/bin/python3 "$root/tests/train/ref_train.py" --model cnn \
            --batch 64 --steps 1 --out . >/dev/null
        flags="-batch 64" steps=40 ;;
    esac
}

step_time() {   # binary: seconds per step, the best of three measurements
    best=
    for r in 1 2 3; do
        t0=$(now); ./"$1" --synthetic --steps 3 >/dev/null 2>&1; t1=$(now)
        ./"$1" --synthetic --steps $((steps + 3)) >/dev/null 2>&1; t2=$(now)
        t=$(echo "scale=6; (($t2 - $t1) - ($t1 - $t0)) / 1000000000 / $steps" | bc)
        best=$(echo "$best $t" | tr ' ' '\n' | grep . | sort -n | head -1)
    done
    echo "$best"
}

busy() {   # trace.json device -> busy ms
    /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
pid = {e["pid"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"
       and e["args"]["name"] == sys.argv[2]}
print("%.1f" % (sum(e["dur"] for e in ev if e.get("ph") == "X" and e["pid"] in pid
                    and e.get("cat") == "compute") / 1000))
PY
}

err() { echo "scale=1; 100 * ($1 - $2) / $2" | bc; }

echo "| model | devices | predicted step | measured step | error | device | predicted busy | measured busy | error |"
echo "|---|---|---|---|---|---|---|---|---|"
for model in $models; do
    mkdir -p "$work/$model" && cd "$work/$model"
    setup "$model"
    for n in 1 2; do
        # shellcheck disable=SC2086
        "$mpcc" model.onnx -cpus $n $flags --trace=pred$n.json -o t$n.c 2>plan$n.txt
        $(sed -n 's/^ \* build:  //p' t$n.c | sed "s/-o train/-o t$n/")
        ./t$n --synthetic --steps 3 --trace run$n.json >/dev/null 2>&1
        pred=$(sed -n 's/.*predicted step \([0-9.e+-]*\) s.*/\1/p' plan$n.txt)
        meas=$(step_time t$n)
        for d in $(seq 0 $((n - 1))); do
            pb=$(busy pred$n.json cpu:$d) mb=$(busy run$n.json cpu:$d)
            if [ "$d" = 0 ]; then
                echo "| $model | $n | $pred s | $meas s | $(err "$pred" "$meas")% | cpu:$d | $pb ms | $mb ms | $(err "$pb" "$mb")% |"
            else
                echo "| | | | | | cpu:$d | $pb ms | $mb ms | $(err "$pb" "$mb")% |"
            fi
        done
    done
    cd - >/dev/null
done
