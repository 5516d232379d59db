#!/bin/sh
# Data-parallel scaling on CPU devices (tests/bench/README.md, "Data
# parallelism"): the same step (samples/resnet.mp, batch 32 in 8
# micro-batches) trained by
#   one   one replica on one CPU device, with every core (the plain trainer);
#   here  2 replicas in one process, one CPU device each (-cpus 2
#         --data-parallel=2);
#   procs 2 processes of one replica on one CPU device (-cpus 1
#         --data-parallel=2 --nodes=2), under mpirun;
# and checks that the three end on the same checkpoint before timing them.
# It builds the trainers in WORKDIR and prints the commands to time.
# Usage: bench_data_parallel.sh MPCC WORKDIR [STEPS]
set -eu
mpcc=$(realpath "$1") work=$2 steps=${3:-10}
samples=$(cd "$(dirname "$0")/../../samples" && pwd)
mkdir -p "$work"
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
flags="-batch 32 --microbatches=8 --lr=0.05"
"$mpcc" "$samples/resnet.mp" -cpus 1 --data-parallel=1 $flags -o one.c 2>/dev/null
"$mpcc" "$samples/resnet.mp" -cpus 2 --data-parallel=2 $flags -o here.c 2>/dev/null
"$mpcc" "$samples/resnet.mp" -cpus 1 --data-parallel=2 --nodes=2 $flags -o procs.c 2>/dev/null
for t in one here procs; do
    cc=$(sed -n 's/^ \* build: *\([a-z]*\) .*/\1/p' $t.c)
    libs=$(sed -n 's/^ \* build: .* -o train \(.*\)/\1/p' $t.c)
    $cc -O2 -fno-trapping-math -ffp-contract=off $t.c -o $t $libs
done
# the same bits at one thread a device (oneDNN and OpenBLAS may round
# otherwise on other thread counts: docs/trainer.md)
OPENBLAS_NUM_THREADS=1 ./one --synthetic --steps 2 --save one.safetensors 2>/dev/null
OPENBLAS_NUM_THREADS=1 ./here --synthetic --steps 2 --save here.safetensors 2>/dev/null
OPENBLAS_NUM_THREADS=1 mpirun -np 2 ./procs --synthetic --steps 2 --save procs.safetensors \
    2>/dev/null
/usr/bin/python3 - <<'EOF'
from safetensors.numpy import load_file
a = load_file("one.safetensors")
for other in ("here", "procs"):
    b = load_file(other + ".safetensors")
    for k in a:
        if not k.endswith(("running_mean", "running_var")):
            assert (a[k] == b[k]).all(), other + ": " + k
print("the three trainers end step 2 on the same weights")
EOF
echo "time these, $steps steps each, in turn (every core used: one device of 2 threads,"
echo "2 devices of 1, 2 processes of 1 core each):"
echo "  one:   $work/one --synthetic --steps $steps"
echo "  here:  $work/here --synthetic --steps $steps"
echo "  procs: mpirun -np 2 -x MPRT_CORES=1 $work/procs --synthetic --steps $steps"
