#!/bin/sh
# Benchmark: `mpcc --dump=ir` wall time and peak RSS on big models, next to
# the same file read by onnx.load (Python protobuf), measured in one run.
#   tests/bench/bench_import.sh [BUILD_DIR] [WORK_DIR]
# Exports (once, into WORK_DIR, default /tmp/mpcc-bench): torchvision
# ResNet-50 in training mode (~100 MB, weights inline) and a GPT-style model
# with ~2.4 GB of external data (needs ~6 GB of memory and ~1 min to export).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=${2:-/tmp/mpcc-bench}
runs=${RUNS:-7}
py=/usr/bin/python3
mkdir -p "$work"
export PYTHONDONTWRITEBYTECODE=1
[ -f "$work/resnet50.onnx" ] || $py "$root/tests/models/export_resnet50.py" \
    --out "$work/resnet50.onnx" --size 224 >/dev/null
[ -f "$work/gpt_big/gpt.onnx" ] || { mkdir -p "$work/gpt_big"; $py "$root/tests/models/export_gpt.py" \
    --out "$work/gpt_big/gpt.onnx" --vocab 50304 --d 1536 --layers 16 --T 128 --external >/dev/null; }

# median of RUNS: prints "wall_s rss_kb" of the run with the median wall time
# (wall from date +%s%N around the command, peak RSS from /usr/bin/time)
measure() {
    rss=$(mktemp)
    for i in $(seq "$runs"); do
        t0=$(date +%s%N)
        /usr/bin/time -f "%M" -o "$rss" "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
        t1=$(date +%s%N)
        echo "$(echo "scale=3; ($t1 - $t0) / 1000000000" | bc) $(cat "$rss")"
    done | sort -n | sed -n "$(( (runs + 1) / 2 ))p"
    rm -f "$rss"
}

size_kb() { du -k --apparent-size "$1" | cut -f1; }

report() {  # name model data_bytes_file mpcc-flags...
    name=$1 model=$2 data=$3
    shift 3
    m=$(measure "$build/mpcc" "$model" --dump=ir "$@")
    p=$(measure $py -c "import onnx,sys; onnx.load(sys.argv[1], load_external_data=False)" "$model")
    set -- $m $p
    kb=$(size_kb "$data")
    echo "$name: file $((kb / 1024)) MB"
    echo "  mpcc --dump=ir      wall $1 s, peak RSS $(($2 / 1024)) MB ($(echo "scale=3; $2 / $kb" | bc)x the file)"
    echo "  onnx.load (peer)    wall $3 s, peak RSS $(($4 / 1024)) MB"
    echo "  ratio mpcc/peer     wall $(echo "scale=3; $1 / $3" | bc), RSS $(echo "scale=3; $2 / $4" | bc)"
}

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GB; median of $runs runs"
report "ResNet-50 (training export, weights inline)" "$work/resnet50.onnx" \
    "$work/resnet50.onnx" -batch 8
report "GPT-style (external data)" "$work/gpt_big/gpt.onnx" \
    "$work/gpt_big/gpt.onnx.data" -batch 8
