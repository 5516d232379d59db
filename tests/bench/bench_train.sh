#!/bin/sh
# Benchmark: the generated CPU trainer's step time against PyTorch CPU on the
# same model, batch, optimizer (SGD lr 0.01 momentum 0.9) and thread count,
# measured in one run, alternating.
#   tests/bench/bench_train.sh [mlp|cnn|gpt|seq2seq|resnet50] [BUILD_DIR] [WORK_DIR]
# Models: mlp: MLP 784-1024-1024-10, batch 256; cnn: tests/train/ref_train.py's
# CNN (2 conv+BN+ReLU+pool, linear), batch 64, 32x32; gpt:
# tests/models/export_gpt.py with d 256, 4 layers, 4 heads, T 128, vocabulary
# 512, batch 8; seq2seq: tests/train/ref_train.py's LSTM encoder-decoder,
# batch 32, 20 tokens; resnet50: torchvision ResNet-50, batch 32, 64x64
# (tests/bench/gpu_models.py). mpcc's figure: the time of a run of 3 + N steps minus that
# of a run of 3 steps, divided by N (start-up, loading and the first touch of
# the arena cancel out); PyTorch's: the median of N steps after 5 warm-up
# steps (tests/bench/torch_step.py). Each side is measured twice, the best
# of the two kept. THREADS (default 2) sets both sides' thread count;
# MPCC_ARGS is added to mpcc's options (--cpu-kernels=builtin); with
# --precision=bf16 in it, PyTorch runs under torch.autocast's CPU bf16.
set -eu
model=${1:-mlp}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$root/build}
work=${3:-/tmp/mpcc-bench/train}/$model
threads=${THREADS:-2}
export PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
rm -rf "$work" && mkdir -p "$work" && cd "$work"
case $model in
mlp)
    steps=${STEPS:-50}
    /usr/bin/python3 "$root/tests/train/ref_train.py" --model mlp --mlp-sizes 784,1024,1024,10 \
        --batch 256 --steps 1 --lr 0.01 --momentum 0.9 --out . >/dev/null
    "$build/mpcc" model.onnx ${MPCC_ARGS:-} -cpus 1 -batch 256 --lr=0.01 --momentum=0.9 -o train.c
    desc="MLP 784-1024-1024-10, batch 256" ;;
cnn)
    steps=${STEPS:-50}
    /usr/bin/python3 "$root/tests/train/ref_train.py" --model cnn --batch 64 --steps 1 \
        --lr 0.01 --momentum 0.9 --out . >/dev/null
    "$build/mpcc" model.onnx ${MPCC_ARGS:-} -cpus 1 -batch 64 --lr=0.01 --momentum=0.9 -o train.c
    desc="CNN conv16-BN-pool-conv32-BN-pool-linear, batch 64, 3x32x32" ;;
gpt)
    steps=${STEPS:-10}
    /usr/bin/python3 "$root/tests/models/export_gpt.py" --out model.onnx --vocab 512 --d 256 \
        --heads 4 --layers 4 --T 128 --batch 8 >/dev/null
    "$build/mpcc" model.onnx ${MPCC_ARGS:-} -cpus 1 -batch 8 --class-axis=-1 --lr=0.01 --momentum=0.9 -o train.c
    desc="GPT d 256, 4 layers, 4 heads, T 128, vocabulary 512, batch 8" ;;
seq2seq)
    steps=${STEPS:-30}
    /usr/bin/python3 "$root/tests/train/ref_train.py" --model seq2seq --batch 32 --steps 1 \
        --lr 0.01 --momentum 0.9 --out . >/dev/null
    "$build/mpcc" model.onnx ${MPCC_ARGS:-} -cpus 1 -batch 32 --lr=0.01 --momentum=0.9 -o train.c
    desc="encoder-decoder: Embedding 100x32, LSTM 32-64, LSTM 64-64, Linear, mean, Linear; T 20, batch 32" ;;
resnet50)
    steps=${STEPS:-5}
    /usr/bin/python3 "$root/tests/bench/gpu_models.py" resnet50 --out . --size 64 >/dev/null
    "$build/mpcc" model.onnx ${MPCC_ARGS:-} -cpus 1 -batch 32 --lr=0.01 --momentum=0.9 -o train.c
    desc="ResNet-50 (torchvision), batch 32, 3x64x64" ;;
*) echo "bench_train.sh: unknown model '$model' (mlp, cnn, gpt, seq2seq or resnet50)" >&2; exit 2 ;;
esac
$(sed -n 's/^ \* build:  //p' train.c)
mpcc_step() {   # (time of 3 + N steps - time of 3 steps) / N: start-up cancels out
    t0=$(date +%s%N)
    ./train --synthetic --steps 3 --log-every 1000 2>/dev/null
    t1=$(date +%s%N)
    ./train --synthetic --steps $((steps + 3)) --log-every 100000 2>/dev/null
    t2=$(date +%s%N)
    echo "scale=6; (($t2 - $t1) - ($t1 - $t0)) / 1000000000 / $steps" | bc
}
amp=   # mpcc --precision=bf16 against PyTorch's CPU autocast in bf16
case " ${MPCC_ARGS:-} " in *" --precision=bf16 "*) amp=bf16 ;; esac
torch_step() {
    /usr/bin/python3 "$root/tests/bench/torch_step.py" "$model" "$steps" "$threads" $amp
}
m1=$(mpcc_step); p1=$(torch_step); m2=$(mpcc_step); p2=$(torch_step)
m=$(printf '%s\n%s\n' "$m1" "$m2" | sort -n | head -1)
p=$(printf '%s\n%s\n' "$p1" "$p2" | sort -n | head -1)
echo "machine: $(getconf _NPROCESSORS_ONLN) cores; $threads threads; $desc; SGD momentum"
echo "  mpcc trainer   $m s/step   (runs: $m1 $m2)"
echo "  PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')  $p s/step   (runs: $p1 $p2)"
echo "  ratio mpcc/PyTorch: $(echo "scale=3; $m / $p" | bc)"
