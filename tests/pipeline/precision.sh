#!/bin/sh
# GPU profiles price matrix work at the precision in effect, and a step
# captured as one CUDA graph at graph_overhead a kernel (below): --tf32 lowers
# the predicted step of the MLP sample (batch 4096: its products are
# compute-bound) on h100-sxm and a100, the H100 beats the A100 in every
# precision, and a profile file whose tf32_flops equals its matrix_flops
# predicts the same step with and without --tf32 (so the flag acts through
# tf32_flops, not elsewhere). Under bf16 a GEMM runs at the bf16 rate on
# bf16 tensors, the chain kernel reads and writes the Relu's bf16 values
# itself and the bias gradient (a SumTo) sums its bf16 dy itself (half the
# bytes); every operand staged through float32 scratch around any other
# kernel is a pass of its own (graph/precision.c): the MLP's Gemm, Relu and
# SumTo and the CNN sample's first MaxPool and first bias gradient (bf16
# twins) cost less than under fp32, the GPT sample's first LayerNorm (its
# input the embedding's float32 rows, its bf16 output narrowed after a
# float32 kernel) more.
# Usage: precision.sh MPCC SAMPLE.mp WORKDIR
set -eu
mpcc=$1 model=$2 work=$3
mkdir -p "$work"
step() {   # the predicted step in seconds at batch 4096 (or $batch), from the compile report
    "$mpcc" "$model" -gpus 1 -batch "${batch:-4096}" --dump=partition "$@" 2>&1 >/dev/null |
        sed -n 's/.*predicted step \([0-9.e+-]*\) s.*/\1/p'
}
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }' || { echo "FAIL: not $1 < $2"; exit 1; }; }
h=$(step --profile=h100-sxm) ht=$(step --profile=h100-sxm --tf32)
a=$(step --profile=a100) at=$(step --profile=a100 --tf32)
hb=$(step --profile=h100-sxm --precision=bf16) ab=$(step --profile=a100 --precision=bf16)
echo "h100-sxm: fp32 $h s, tf32 $ht s, bf16 $hb s; a100: fp32 $a s, tf32 $at s, bf16 $ab s"
less "$ht" "$h" && less "$at" "$a" && less "$h" "$a" && less "$ht" "$at"
less "$hb" "$ab"
printf 'flops = 1e13\nmatrix_flops = 2e13\ntf32_flops = 2e13\nbandwidth = 1e12\n' >"$work/same.txt"
printf 'flops = 1e13\nmatrix_flops = 2e13\ntf32_flops = 8e13\nbandwidth = 1e12\n' >"$work/fast.txt"
s=$(step --profile="$work/same.txt") st=$(step --profile="$work/same.txt" --tf32)
f=$(step --profile="$work/fast.txt") ft=$(step --profile="$work/fast.txt" --tf32)
echo "file, tf32 = fp32: $s s and $st s; file, tf32 4x: $f s and $ft s"
[ -n "$s" ] && [ "$s" = "$st" ] && [ "$s" = "$f" ] || { echo "FAIL: tf32 = fp32 changed the step"; exit 1; }
less "$ft" "$f"
mlp_ms() {   # the MLP's node $1's predicted ms on h100-sxm under the precision $2
    "$mpcc" "$model" -gpus 1 -batch 4096 --profile=h100-sxm --precision="$2" --dump=costs \
        2>/dev/null | awk -v n="'$1'" '$NF == n { print $7 }'
}
g32=$(mlp_ms fc1/Gemm_0 fp32) g16=$(mlp_ms fc1/Gemm_0 bf16)
r32=$(mlp_ms Relu_1 fp32) r16=$(mlp_ms Relu_1 bf16)
s32=$(mlp_ms fc1/Gemm_0/dC fp32) s16=$(mlp_ms fc1/Gemm_0/dC bf16)
cnn_ms() {   # the CNN sample's node $1's predicted ms on h100-sxm under the precision $2
    "$mpcc" "$(dirname "$model")/cnn_bn.mp" -gpus 1 -batch 256 --profile=h100-sxm \
        --precision="$2" --dump=costs 2>/dev/null | awk -v n="'$1'" '$NF == n { print $7 }'
}
p32=$(cnn_ms block1/MaxPool_3 fp32) p16=$(cnn_ms block1/MaxPool_3 bf16)
b32=$(cnn_ms block1.conv/Conv_0/dB fp32) b16=$(cnn_ms block1.conv/Conv_0/dB bf16)
ln_ms() {   # the GPT sample's first LayerNorm's predicted ms on h100-sxm under the precision $1
    "$mpcc" "$(dirname "$model")/gpt.mp" -gpus 1 -batch 256 --profile=h100-sxm \
        --precision="$1" --dump=costs 2>/dev/null |
        awk '$NF == "'"'blocks.0.ln1/LayerNormalization_4'"'" { print $7 }'
}
l32=$(ln_ms fp32) l16=$(ln_ms bf16)
echo "h100-sxm, batch 4096: Gemm fp32 $g32 ms, bf16 $g16 ms; Relu fp32 $r32 ms, bf16 $r16 ms;" \
    "SumTo fp32 $s32 ms, bf16 $s16 ms; at batch 256 the CNN's MaxPool fp32 $p32 ms, bf16 $p16 ms," \
    "its first bias gradient fp32 $b32 ms, bf16 $b16 ms; the GPT's first LayerNorm fp32 $l32 ms," \
    "bf16 $l16 ms"
less "$g16" "$g32" && less "$r16" "$r32" && less "$s16" "$s32" && less "$p16" "$p32" &&
    less "$b16" "$b32" && less "$l32" "$l16"

# Under bf16 the GEMMs, the convolutions (the bias added after) and their
# data gradients run on bf16 tensor cores (runtime/cuda_ops.c): with bf16
# 1000x TF32 and compute-bound nodes (bytes and launches free, so the
# staging passes cost nothing), the CNN sample's Gemm, its convolution and
# the convolution's data gradient cost less under bf16 than under fp32.
printf 'flops = 1e13\nmatrix_flops = 1e13\ntf32_flops = 1e13\nbf16_flops = 1e16\nbandwidth = 1e16\noverhead = 0\ngraph_overhead = 0\n' \
    >"$work/conv.txt"
node_ms() {   # node $1's predicted ms under the precision $2
    "$mpcc" "$(dirname "$model")/cnn_bn.mp" -gpus 1 -batch 256 --profile="$work/conv.txt" \
        --precision="$2" --dump=costs 2>/dev/null | awk -v n="'$1'" '$NF == n { print $7 }'
}
c32=$(node_ms block2.conv/Conv_4 fp32) c16=$(node_ms block2.conv/Conv_4 bf16)
d32=$(node_ms block2.conv/Conv_4/dX fp32) d16=$(node_ms block2.conv/Conv_4/dX bf16)
m32=$(node_ms fc/Gemm_9 fp32) m16=$(node_ms fc/Gemm_9 bf16)
echo "conv at fp32 $c32 ms, bf16 $c16 ms; its data gradient at fp32 $d32 ms, bf16 $d16 ms;" \
    "gemm at fp32 $m32 ms, bf16 $m16 ms"
less "$m16" "$m32" && less "$d16" "$d32" && less "$c16" "$c32"

# --cuda-graph: a step captured as one graph pays graph_overhead a kernel
# instead of the launch overhead, so the predicted step of a launch-bound
# model (batch 8) is shorter than with --cuda-graph=off, --clip-norm (whose
# factor each GPU computes inside the step) too; a step that is not captured
# (mixed CPU and GPU devices, whose CPU actions run on host threads) is
# priced as off; a profile file's graph_overhead is what the captured step
# pays; and the search chooses more micro-batches for the captured step.
batch=8
on=$(step) off=$(step --cuda-graph=off)
clip=$(step --clip-norm=1) clip_off=$(step --clip-norm=1 --cuda-graph=off)
echo "batch 8: graph $on s, off $off s; --clip-norm: $clip s, off $clip_off s"
less "$on" "$off" && less "$clip" "$clip_off"
mixed() {   # the GPU's predicted busy time in a step on a CPU device and a GPU
    "$mpcc" "$model" --devices=cpu,cuda:0 -batch 8 --dump=partition "$@" 2>&1 >/dev/null |
        sed -n 's/.*cuda:0 .*busy \([0-9.e+-]*\) s.*/\1/p'
}
m=$(mixed) m_off=$(mixed --cuda-graph=off)
echo "batch 8, cpu and cuda:0: the GPU busy $m s, off $m_off s"
[ -n "$m" ] && [ "$m" = "$m_off" ] || { echo "FAIL: a step not captured priced as captured"; exit 1; }
# With the launches cheaper, the search takes more, smaller micro-batches:
# the MLP at batch 4096 on 2 GPUs (h100-sxm) splits its batch more ways
# with the step captured than issued op by op.
count() {   # the micro-batch count the search chose
    "$mpcc" "$model" -gpus 2 -batch 4096 --dump=partition "$@" 2>&1 >/dev/null |
        sed -n 's/.* \([0-9]*\) micro-batch(es): predicted step.*/\1/p'
}
mg=$(count) moff=$(count --cuda-graph=off)
echo "batch 4096 on 2 GPUs: $mg micro-batches captured, $moff op by op"
[ -n "$mg" ] && [ -n "$moff" ] && [ "$mg" -gt "$moff" ] ||
    { echo "FAIL: the captured step's cheaper launches did not move the micro-batch choice"; exit 1; }
printf 'flops = 1e13\nbandwidth = 1e12\noverhead = 5e-6\ngraph_overhead = 5e-6\n' >"$work/graph.txt"
g=$(step --profile="$work/graph.txt") goff=$(step --profile="$work/graph.txt" --cuda-graph=off)
echo "profile, graph_overhead = overhead: $g s and $goff s"
[ -n "$g" ] && [ "$g" = "$goff" ] || { echo "FAIL: graph_overhead is not what the graph pays"; exit 1; }
echo "precision: ok"
