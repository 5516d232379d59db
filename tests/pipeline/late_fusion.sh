#!/bin/sh
# Seed 001, compiled: the late-fusion sample with its placement hints
# (branch 1 on cpu:0, branch 2 and the classifier on cpu:1) trains on 2 CPU
# devices to the same losses and weights, bit for bit, as the same model
# without hints on one device; and mpcc honours the hints (each branch's
# convolutions on the device its hint names).
# Usage: late_fusion.sh MPCC SAMPLE WORKDIR
set -eu
mpcc=$1 sample=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OPENBLAS_NUM_THREADS=1
sed 's/ *@[a-z]*[0-9]*\((*[0-9]*)\)*//g' "$sample" > plain.mp
opts="-batch 16 --microbatches=2 --lr=0.05 --momentum=0.9"
"$mpcc" "$sample" -cpus 2 --schedule=1f1b $opts -o two.c 2>/dev/null
"$mpcc" plain.mp -cpus 1 $opts -o one.c 2>/dev/null
for t in one two; do
    cc -O2 -Wall -Werror $t.c -o $t $(sed -n 's/^ \* build: .* -o train //p' $t.c)
    ./$t --synthetic --steps 3 --save $t.safetensors --loss-log $t.losses >/dev/null 2>&1
done
cmp one.losses two.losses
# the checkpoints differ only in the model hash (another .mp file): compare tensors
/usr/bin/python3 - <<'PY'
from safetensors.numpy import load_file
a, b = load_file("one.safetensors"), load_file("two.safetensors")
assert a.keys() == b.keys()
for k in a:
    assert (a[k] == b[k]).all() and a[k].tobytes() == b[k].tobytes(), k
print(f"{len(a)} tensors identical")
PY
"$mpcc" "$sample" -cpus 2 --schedule=1f1b $opts --dump=partition-dot >dot 2>/dev/null
grep -q 'resnet_1/.*(stage 0, cpu:0)' dot
! grep -q 'resnet_1/.*cpu:1)' dot
grep -q 'resnet_2/.*(stage 1, cpu:1)' dot
! grep -q 'resnet_2/.*cpu:0)' dot
echo "late fusion: hints honoured, 2 devices = 1 device"
