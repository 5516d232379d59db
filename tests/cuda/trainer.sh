#!/bin/sh
# One model's CUDA trainer, generated, built and started: mpcc writes it
# (the options include -gpus N), it builds with the build line mpcc printed
# in its header plus -Wall -Werror (plain cc, no nvcc) and links against
# cudart, cuBLAS, cuDNN and NVRTC (and, across processes, with mpicc and
# NCCL, started by mpirun as its header says). Then it runs two synthetic
# steps: on a machine without an NVIDIA driver it must say so in one line
# and exit 2; with one it must train (or, with fewer GPUs than its
# processes need, say so in one line and exit 1).
# Usage: trainer.sh MPCC WORKDIR MODEL [mpcc options...]
set -eu
mpcc=$1 work=$2 model=$3
shift 3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
case $model in
*.mp) sed 's/@cpu\([0-9]\)/@gpu\1/g' "$model" > model.mp; model=model.mp ;;
esac
"$mpcc" "$model" "$@" -o train.c 2>mpcc.log
build=$(sed -n 's/^ \* build: *//p' train.c)
case $build in
*-lcudart*) ;;
*) echo "FAIL: the header's build line is not a CUDA one: $build"; exit 1 ;;
esac
case " $* $build " in
*--devices=*cpu*-lopenblas*) ;;
*--devices=*cpu*) echo "FAIL: a trainer with CPU devices does not link a BLAS: $build"; exit 1 ;;
esac
case " $* " in
*" --tf32 "*) grep -q 'mprt_cu_tf32 = 1;' train.c || { echo "FAIL: --tf32 not passed to the trainer"; exit 1; } ;;
*) grep -q 'mprt_cu_tf32 = 0;' train.c || { echo "FAIL: TF32 on without --tf32"; exit 1; } ;;
esac
if [ "${CUDA_TRAINER_NVTX:-}" = 1 ]; then   # NVTX ranges (its headers are not -pedantic clean)
    echo "build: $build -Wall -Werror -DMPCC_NVTX"
    $build -Wall -Werror -DMPCC_NVTX || { echo "FAIL: the -DMPCC_NVTX build"; exit 1; }
    nm train | grep -q nvtxRangePushA || { echo "FAIL: -DMPCC_NVTX pushes no NVTX range"; exit 1; }
fi
echo "build: $build -Wall -Werror -pedantic"
$build -Wall -Werror -pedantic
# across processes (--nodes=K): mpicc, NCCL, started as the header says
np=$(sed -n 's/^ \* \(replicas\|processes\): .*run as mpirun -np \([0-9]*\) .*/\2/p' train.c)
launch=
if [ -n "$np" ]; then
    case $build in
    mpicc\ *-lnccl*) ;;
    *) echo "FAIL: a trainer across processes not built with mpicc and NCCL: $build"; exit 1 ;;
    esac
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    launch="mpirun -np $np"
fi
status=0
$launch ./train --synthetic --steps 2 >out.txt 2>err.txt || status=$?
if [ -n "$np" ]; then   # mpirun's own lines left out; each process's first
    grep '^train:' err.txt | sort -u >train-err.txt
    mv train-err.txt err.txt
fi
# each process's GPUs: those of process 0 where a pipeline spans processes
per=$(grep -c '^ \* cuda:[0-9]* .*; process 0' train.c) || per=$(grep -c '^ \* cuda:[0-9]* ' train.c)
gpus_needed=$(( ${np:-1} * per ))
if [ -e /proc/driver/nvidia/version ] && [ -n "$np" ] &&
   [ "$(nvidia-smi -L | grep -c '^GPU')" -lt "$gpus_needed" ]; then
    if [ $status -ne 1 ] || ! grep -q 'NCCL needs a GPU of its own for each' err.txt; then
        echo "FAIL: $np processes on too few GPUs must say so and exit 1; exit $status:"
        cat err.txt
        exit 1
    fi
    echo "on $(nvidia-smi -L | grep -c '^GPU') GPU(s), fewer than $gpus_needed: $(cat err.txt)"
    exit 0
fi
if [ -e /proc/driver/nvidia/version ]; then
    if [ $status -ne 0 ]; then
        echo "FAIL: the trainer failed on this GPU machine (exit $status):"
        cat err.txt
        exit 1
    fi
    echo "trained 2 steps on the GPU"
    exit 0
fi
if [ $status -ne 2 ] || [ "$(wc -l <err.txt)" -ne 1 ] || ! grep -q "no CUDA device" err.txt; then
    echo "FAIL: without a GPU the trainer must print one line and exit 2; it exited $status:"
    cat err.txt
    exit 1
fi
echo "built and linked; without a GPU: exit 2, $(cat err.txt)"
