#!/bin/sh
# --cpu-kernels on the CNN sample: with onednn every convolution and max
# pooling of the trainer calls oneDNN (runtime/cpu_dnnl.c), its GEMMs are oneDNN's
# (MPRT_DNNL_GEMM: the program calls dnnl_sgemm) and its build line, in the
# head, links -ldnnl; with builtin none does and the line does not, so it
# builds without oneDNN. Both build with -Wall -Werror and train 3 steps to
# the same losses within 1e-5 of the first; oneDNN on 2 devices gives its
# 1-device losses and weights bit for bit.
# Usage: cpu_kernels.sh MPCC SAMPLE WORKDIR
set -eu
mpcc=$1 sample=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OPENBLAS_NUM_THREADS=1
opts="-batch 16 --microbatches=2 --lr=0.05 --momentum=0.9"
build() {   # NAME: with the libraries its head names
    cc -O2 -Wall -Wextra -Werror $1.c -o $1 $(sed -n 's/^ \* build: .* -o train //p' $1.c)
    ./$1 --synthetic --steps 3 --save $1.safetensors --loss-log $1.losses >/dev/null 2>&1
}
"$mpcc" "$sample" -cpus 1 $opts --cpu-kernels=onednn -o onednn.c 2>/dev/null
"$mpcc" "$sample" -cpus 2 $opts --cpu-kernels=onednn -o onednn2.c 2>/dev/null
"$mpcc" "$sample" -cpus 1 $opts --cpu-kernels=builtin -o builtin.c 2>/dev/null
grep -q '^ \* build: .* -ldnnl ' onednn.c
grep -q '^ \* oneDNN: ' onednn.c
convs=$(grep -c '^    mprt_conv\(_grad_[xw]\)*(&(MprtConv)' builtin.c)
dnnl=$(grep -c '^    mprt_dnnl_conv\(_grad_[xw]\)*([0-9]' onednn.c)
[ "$dnnl" -eq "$convs" ] && [ "$convs" -gt 0 ] ||
    { echo "onednn.c calls oneDNN $dnnl times for builtin.c's $convs convolutions"; exit 1; }
! grep -q '^    mprt_conv\(_grad_[xw]\)*(&(MprtConv)' onednn.c
pools=$(grep -c '^    mprt_maxpool(&(MprtPool)' builtin.c)
dnnl_pools=$(grep -c '^    mprt_dnnl_maxpool([0-9]' onednn.c)
[ "$dnnl_pools" -eq "$pools" ] && [ "$pools" -gt 0 ] ||
    { echo "onednn.c pools through oneDNN $dnnl_pools times for builtin.c's $pools"; exit 1; }
! grep -q '^    mprt_maxpool(&(MprtPool)' onednn.c
! grep -q 'mprt_dnnl\|ldnnl\|oneDNN: ' builtin.c
grep -q '^#define MPRT_DNNL_GEMM 1' onednn.c
! grep -q '^#define MPRT_DNNL_GEMM' builtin.c
for t in onednn onednn2 builtin; do build $t; done
nm -D --undefined-only onednn | grep -q ' dnnl_sgemm$'
! nm -D --undefined-only builtin | grep -q dnnl
cmp onednn.losses onednn2.losses
/usr/bin/python3 - <<'PY'
from safetensors.numpy import load_file
a, b = load_file("onednn.safetensors"), load_file("onednn2.safetensors")
assert a.keys() == b.keys()
for k in a:
    assert a[k].tobytes() == b[k].tobytes(), k
x = [float(s) for s in open("onednn.losses").read().split()]
y = [float(s) for s in open("builtin.losses").read().split()]
assert len(x) == len(y) == 3, (x, y)
# within 1e-5 of the first loss: the loss falls 400-fold in 3 steps, and
# the last one's rounding is still the logits' (of the first loss's size)
for p, q in zip(x, y):
    assert abs(p - q) <= 1e-5 * abs(y[0]), (x, y)
print(f"oneDNN: {len(a)} tensors identical on 1 and 2 devices; losses {x}, builtin {y}")
PY
echo "cpu kernels: $convs convolutions through oneDNN, none in the builtin trainer"
