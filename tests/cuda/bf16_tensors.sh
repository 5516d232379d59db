#!/bin/sh
# Under --precision=bf16 a GPU's matrix products run on bf16 tensors
# (runtime/cuda_ops.c's mprt_cu_gemm_bf16, mprt_cu_bmm_bf16): in the CUDA
# trainers of the MLP and GPT samples every Gemm and MatMul is one of them,
# none reads a float32 copy (no mprt_cu_bf16_round: the parameters are
# narrowed into bf16 scratch, the bf16 activations read as they are), while
# the CPU trainer of the MLP computes on float32 copies. In the GPT's, the
# attention's Softmax and its gradient, the bias gradients' sums and the
# loss's gradient of the scores are the bf16 twins, and no
# Transpose moves a float32 copy of bf16 values (the one of the float32
# logits moves float32). In the ResNet sample's, the convolutions' data
# and filter gradients run on bf16 tensors (its convolutions have a bias,
# so the forward ones read float32 copies), and so do its batch norms;
# each filter gradient is written as bf16 and widened into its float32
# value, which the CPU trainer computes on float32 copies and rounds.
# Their numbers are the CPU's, bit for bit, on the fake GPUs
# (cuda.fakegpu.*_bf16).
# The exported GPT's MatMuls read their weights transposed in place
# (graph/transposed.c) and sum each weight's gradient over the batch in
# one GEMM (A transposed, K over the batch too), into the float32
# gradient: on bf16 tensors too. Its attention adds the causal mask in
# the softmax's kernel (simplify.c's SoftmaxBias): the bf16 twin's.
# Usage: bf16_tensors.sh MPCC SAMPLES_DIR WORKDIR GPT_ONNX
set -eu
mpcc=$1 samples=$2 work=$3 gpt_onnx=$4
mkdir -p "$work"
calls() {   # the count of the step's calls to $2 in the program $1
    grep -c "^    $2(" "$1" || true
}
check() {   # model options...
    sample=$(basename "$1")
    "$mpcc" "$@" --precision=bf16 -o "$work/$sample.c" 2>/dev/null
    f32=$(($(calls "$work/$sample.c" mprt_cu_gemm) + $(calls "$work/$sample.c" mprt_cu_bmm)))
    b16=$(($(calls "$work/$sample.c" mprt_cu_gemm_bf16) + $(calls "$work/$sample.c" mprt_cu_bmm_bf16)))
    rounded=$(calls "$work/$sample.c" mprt_cu_bf16_round)
    echo "$sample: $b16 products on bf16 tensors, $f32 on float32 copies, $rounded rounded copies"
    [ "$b16" -gt 0 ] && [ "$f32" -eq 0 ] && [ "$rounded" -eq 0 ] ||
        { echo "FAIL: $sample: a product on float32 copies"; exit 1; }
}
check "$samples/mlp.mp" -batch 64 -gpus 1
check "$samples/gpt.mp" -batch 4 -gpus 2
check "$gpt_onnx" -batch 4 -gpus 1 --class-axis=-1
gpt=$work/gpt.mp.c
soft=$(($(calls "$gpt" mprt_cu_softmax) + $(calls "$gpt" mprt_cu_softmax_grad)))
soft16=$(($(calls "$gpt" mprt_cu_softmax_bf16) + $(calls "$gpt" mprt_cu_softmax_grad_bf16)))
sums=$(calls "$gpt" mprt_cu_sum_to) sums16=$(calls "$gpt" mprt_cu_sum_to_bf16)
loss16=$(calls "$gpt" mprt_cu_sce_lse_grad_bf16)
moves=$(grep -c "^    mprt_cu_strided(2, " "$gpt" || true)
wide=$(grep -c "^    mprt_cu_strided(4, .*(W[0-9]* + " "$gpt" || true)   # on a float32 copy
echo "gpt.mp: softmax $soft16 on bf16 tensors, $soft on float32 copies;" \
    "sums $sums16 of bf16, $sums of float32; loss gradients $loss16 into bf16;" \
    "transposes $moves of bf16, $wide of float32 copies"
[ "$soft16" -gt 0 ] && [ "$soft" -eq 0 ] && [ "$moves" -gt 0 ] && [ "$wide" -eq 0 ] &&
    [ "$sums16" -gt 0 ] && [ "$sums" -eq 0 ] && [ "$loss16" -eq 1 ] ||
    { echo "FAIL: gpt.mp: a softmax, a sum or a transpose on float32 copies"; exit 1; }
onnx=$work/$(basename "$gpt_onnx").c
biased=$(calls "$onnx" mprt_cu_softmax_bias) biased16=$(calls "$onnx" mprt_cu_softmax_bias_bf16)
echo "$(basename "$gpt_onnx"): masked softmax $biased16 on bf16 tensors, $biased on float32 copies"
[ "$biased16" -gt 0 ] && [ "$biased" -eq 0 ] ||
    { echo "FAIL: $(basename "$gpt_onnx"): a masked softmax on float32 copies"; exit 1; }
"$mpcc" "$samples/mlp.mp" -batch 64 -cpus 1 --precision=bf16 -o "$work/mlp_cpu.c" 2>/dev/null
cpu=$(calls "$work/mlp_cpu.c" mprt_gemm) widened=$(calls "$work/mlp_cpu.c" mprt_bf16_widen)
echo "mlp.mp on a CPU device: $cpu products, $widened widened copies"
[ "$cpu" -gt 0 ] && [ "$widened" -gt 0 ] || { echo "FAIL: the CPU's products"; exit 1; }
"$mpcc" "$samples/resnet.mp" -batch 8 -gpus 1 --precision=bf16 -o "$work/resnet.c" 2>/dev/null
convs=$(($(calls "$work/resnet.c" mprt_cu_conv_bf16) + $(calls "$work/resnet.c" mprt_cu_conv_grad_x_bf16)))
bn16=$(($(calls "$work/resnet.c" mprt_cu_bn_train_bf16) + $(calls "$work/resnet.c" mprt_cu_bn_grad_bf16)))
bn=$(($(calls "$work/resnet.c" mprt_cu_bn_train) + $(calls "$work/resnet.c" mprt_cu_bn_grad)))
echo "resnet.mp: $convs convolutions on bf16 tensors; batch norms $bn16 on bf16, $bn on float32"
[ "$convs" -gt 0 ] && [ "$bn16" -gt 0 ] && [ "$bn" -eq 0 ] ||
    { echo "FAIL: resnet.mp: a convolution or a batch norm on float32 copies"; exit 1; }
# the filter gradients: each on bf16 tensors, then widened (the line after)
dw16=$(calls "$work/resnet.c" mprt_cu_conv_grad_w_bf16) dw=$(calls "$work/resnet.c" mprt_cu_conv_grad_w)
widened=$(grep -A1 "^    mprt_cu_conv_grad_w_bf16(" "$work/resnet.c" | grep -c "^    mprt_cu_bf16_widen(" || true)
"$mpcc" "$samples/resnet.mp" -batch 8 -cpus 1 --precision=bf16 --cpu-kernels=builtin \
    -o "$work/resnet_cpu.c" 2>/dev/null
dwc=$(calls "$work/resnet_cpu.c" mprt_conv_grad_w)
rounded=$(grep -A1 "^    mprt_conv_grad_w(" "$work/resnet_cpu.c" | grep -c "^    mprt_bf16_round(" || true)
echo "resnet.mp: filter gradients $dw16 on bf16 tensors ($widened widened), $dw on float32;" \
    "on a CPU device $dwc, $rounded rounded"
[ "$dw16" -gt 0 ] && [ "$dw" -eq 0 ] && [ "$widened" -eq "$dw16" ] && [ "$dwc" -eq "$dw16" ] &&
    [ "$rounded" -eq "$dwc" ] ||
    { echo "FAIL: resnet.mp: a filter gradient on float32 copies, or not rounded"; exit 1; }
echo "bf16_tensors: ok"
