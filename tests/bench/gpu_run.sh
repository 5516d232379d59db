#!/bin/bash
# Checks and benchmarks of the generated CUDA trainer on a GPU machine, in
# phases, each sized to take well under 10 minutes on one H100
# (tests/bench/README.md, "A run on a GPU machine"):
#
#   gpu_run.sh pack       on the build machine: copy the mpcc binary, the
#                             libprotobuf-c it needs, OpenBLAS and oneDNN
#                             (libraries and headers, for the CPU trainers)
#                             into .gpu/, the libraries gzipped
#   gpu_run.sh check      loss curves over 20 steps of the CNN, ResNet-50
#                             and a small GPT-style model: the CUDA trainer on
#                             -gpus 1 and -gpus 2 (and -gpus 2 with every
#                             copy staged through host memory,
#                             -DMPRT_CU_STAGE_ALL; -gpus 1 --tf32; -gpus 1
#                             as 4 stages with activations and weights
#                             offloaded to pinned host memory; -gpus 1
#                             --cuda-graph=off; --precision=bf16 on -cpus 1,
#                             -gpus 1 and -gpus 2) against
#                             the CPU trainer on -cpus 1 and -cpus 2, same
#                             data, weights and micro-batches; PyTorch float32
#                             and float64 as the yardstick
#   gpu_run.sh bench [resnet50|gpt]
#                             step time of the CUDA trainer against PyTorch
#                             eager on the same GPU, fp32, TF32, bf16 (against
#                             PyTorch AMP) and fp32 with the step issued op by
#                             op (--cuda-graph=off): ResNet-50 batch 128 at
#                             224x224, GPT-2-small size
#   gpu_run.sh timeline   a 2-device 1F1B step of ResNet-50 on -gpus 2:
#                             the measured timeline (./train --trace) next to
#                             mpcc's predicted one (mpcc --trace)
#   gpu_run.sh probe      ResNet-50 trained twice on -gpus 1 (the check's
#                             settings), its checkpoints compared tensor by
#                             tensor after each of 2 steps; bench's ResNet-50
#                             and GPT-2-small timed node by node (./train
#                             --profile), summed by kind of node. PROBE
#                             picks the parts (default "gpt repro resnet50"),
#                             PROBE_PRECISION the profiles' precision (fp32,
#                             the default; tf32 or bf16)
#
# Several phases may follow one another: `gpu_run.sh check timeline`.
# Environment:
#   MPCC       the mpcc binary (default build/mpcc)
#   MPCC_LIBS  a folder put first on LD_LIBRARY_PATH (the libprotobuf-c mpcc
#              needs); its OpenBLAS and oneDNN (pack) are used when the
#              system has none
#   PYTHON     default python3 if it imports torch, else /usr/bin/python3
#   OUT        the results folder (default /tmp/mpcc-gpu): per phase a
#              Markdown table PHASE.md, the console log PHASE.log and the raw
#              logs, losses and traces in PHASE-logs.tar.gz
#   WORK       models, trainers and checkpoints (default /tmp/mpcc-gpu-work)
#   BENCH_SECONDS  bench: about how many seconds of mpcc's steps each of its
#              timed runs holds (default 15)
#   BENCH_PRECISIONS  bench: which rows, in order (default "fp32 tf32 bf16
#              fp32-nograph"; bf16-nondet is bf16 with MPRT_CU_DETERMINISTIC=0);
#              "bf16 bf16-nondet fp32 fp32-nograph" measures the bf16
#              and CUDA-graph targets first in a short GPU window
#   SMALL=1    every size shrunk, so that check and a bench dry run finish in
#              minutes on a 2-core machine without a GPU
#   CUDA_DIRS  where to look for the CUDA toolkit (default $CUDA_HOME,
#              /usr/local/cuda, then the NVIDIA wheels next to PyTorch)
# Without a GPU (nvidia-smi missing or failing) the CUDA trainers are still
# generated, built and started; they exit 2, reported as "no GPU".
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/bench
small=${SMALL:-0}
res=${OUT:-/tmp/mpcc-gpu}
work=${WORK:-/tmp/mpcc-gpu-work}
mkdir -p "$res" "$work"
res=$(cd "$res" && pwd) work=$(cd "$work" && pwd)
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export MPCC_CACHE=$work/nvrtc-cache   # the trainers' compiled kernels, once per machine
rm -f "$work/cuda-timed-out"

abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
mpcc=$(abspath "${MPCC:-build/mpcc}")
[ -x "$mpcc" ] || [ -z "${MPCC:-}" ] || { echo "gpu_run.sh: $mpcc is not an executable" >&2; exit 1; }
[ -x "$mpcc" ] || mpcc=$root/build/mpcc
libs=
if [ -n "${MPCC_LIBS:-}" ]; then
    libs=$(abspath "$MPCC_LIBS")
    export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # pack compresses the libraries (a third of the bytes to copy to a GPU
    # machine): unpacked once, beside the .gz
    for f in "$libs"/*.gz; do
        [ -f "$f" ] && [ ! -f "${f%.gz}" ] && gunzip -k "$f"
    done
fi
if [ -n "${PYTHON:-}" ]; then py=$PYTHON
elif python3 -c 'import torch' >/dev/null 2>&1; then py=python3
else py=/usr/bin/python3
fi
cc=cc
command -v cc >/dev/null 2>&1 || cc=gcc

# ---- the machine ----

gpu=0
probe_gpu() {
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >"$work/nvidia-smi.txt" 2>&1 &&
        grep -q '^GPU' "$work/nvidia-smi.txt"; then
        gpu=1
        gpu_name=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
            head -1)
    else
        gpu=0 gpu_name="none"
        echo "no GPU (nvidia-smi missing or failing): the CUDA trainers are generated, built and" \
            "started, and exit 2 (\"no GPU\"); the CPU runs go on"
    fi
}

# The CPU trainers' BLAS: the system's OpenBLAS, else the one pack copied.
blas=
probe_blas() {
    local t=$work/probe
    mkdir -p "$t"
    printf '%s\n' '#include <cblas.h>' 'int main(void) { float a = 2, b = 3, c = 0;' \
        '  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1,' \
        '              0.0f, &c, 1);' '  return c != 6; }' >"$t/blas.c"
    if $cc "$t/blas.c" -o "$t/blas" -lopenblas >"$t/blas.log" 2>&1 && "$t/blas"; then
        blas=-lopenblas
    elif [ -n "$libs" ] && $cc "$t/blas.c" -o "$t/blas" -I"$libs/include" -L"$libs" \
        -l:libopenblas.so.0 -Wl,-rpath,"$libs" >>"$t/blas.log" 2>&1 && "$t/blas"; then
        blas="-I$libs/include -L$libs -l:libopenblas.so.0 -Wl,-rpath,$libs"
    else
        blas=
        echo "no OpenBLAS (cblas.h and -lopenblas), on the system or in MPCC_LIBS: the CPU" \
            "trainers cannot be built (see $t/blas.log; gpu_run.sh pack copies it)"
    fi
}

# The CPU trainers' oneDNN (convolutions): the system's, else the one pack
# copied (whatever its soname there).
dnnl=
probe_dnnl() {
    local t=$work/probe f
    mkdir -p "$t"
    printf '%s\n' '#include <dnnl.h>' \
        'int main(void) { return dnnl_version()->major < 1; }' >"$t/dnnl.c"
    if $cc "$t/dnnl.c" -o "$t/dnnl" -ldnnl >"$t/dnnl.log" 2>&1 && "$t/dnnl"; then
        dnnl=-ldnnl
        return
    fi
    f=$(ls "$libs"/libdnnl.so.[0-9]* 2>/dev/null | grep -v "\.gz$" | head -1)
    if [ -n "$libs" ] && [ -n "$f" ] && $cc "$t/dnnl.c" -o "$t/dnnl" -I"$libs/include" -L"$libs" \
        -l:"${f##*/}" -Wl,-rpath,"$libs" >>"$t/dnnl.log" 2>&1 && "$t/dnnl"; then
        dnnl="-I$libs/include -L$libs -l:${f##*/} -Wl,-rpath,$libs"
    else
        dnnl=
        echo "no oneDNN (dnnl.h and -ldnnl), on the system or in MPCC_LIBS: the CPU trainers" \
            "cannot be built (see $t/dnnl.log; gpu_run.sh pack copies it)"
    fi
}

# The CUDA toolkit: each header and library found in the first of CUDA_DIRS
# that has it. Libraries present only with a version suffix (the NVIDIA
# wheels' libcudnn.so.9) get an unversioned link in $work/cuda-lib.
cuda_paths='' cuda_where='' cuda_ld=''
probe_cuda() {
    local dirs=${CUDA_DIRS:-}
    if [ -z "$dirs" ]; then
        dirs="${CUDA_HOME:-} /usr/local/cuda $("$py" -c 'import os, nvidia
print(" ".join(os.path.join(p, d) for p in nvidia.__path__ for d in sorted(os.listdir(p))))' \
            2>/dev/null)"
    fi
    local links=$work/cuda-lib incs="" rpaths="" missing="" h l d ld f
    rm -rf "$links" && mkdir -p "$links"
    for h in cuda_runtime.h cublas_v2.h cudnn.h nvrtc.h; do
        f=
        for d in $dirs; do
            [ -f "$d/include/$h" ] && { f=$d/include; break; }
        done
        if [ -z "$f" ]; then missing="$missing $h"
        else case " $incs " in *" -I$f "*) ;; *) incs="$incs -I$f" ;; esac
        fi
    done
    for l in cudart cublas nvrtc cudnn; do
        f=
        for d in $dirs; do
            for ld in "$d/lib64" "$d/lib"; do
                f=$(ls "$ld/lib$l.so" "$ld/lib$l.so."[0-9]* 2>/dev/null | head -1)
                [ -n "$f" ] && break 2
            done
        done
        if [ -z "$f" ]; then missing="$missing lib$l.so"; continue; fi
        ln -sf "$f" "$links/lib$l.so"
        case ":$rpaths:" in *":$ld:"*) ;; *) rpaths=${rpaths:+$rpaths:}$ld ;; esac
    done
    if [ -n "$missing" ]; then
        echo "no CUDA toolkit: not found in $dirs:$missing; the CUDA trainers cannot be built"
        return
    fi
    cuda_paths="$incs -L$links -Wl,-rpath,${rpaths//:/ -Wl,-rpath,}"
    # for the trainers only (the libraries they load in turn: cuBLASLt, the
    # parts of cuDNN, NVRTC's builtins), not for PyTorch, which has its own
    cuda_ld=$rpaths${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    local t=$work/probe
    mkdir -p "$t"
    printf '%s\n' '#include <stdio.h>' '#include <cuda_runtime.h>' '#include <cublas_v2.h>' \
        '#include <cudnn.h>' '#include <nvrtc.h>' \
        'int main(void) { int rt = 0, a = 0, b = 0; cudaRuntimeGetVersion(&rt);' \
        '  nvrtcVersion(&a, &b); cublasHandle_t h = 0; (void)h;' \
        '  printf("CUDA runtime %d, cuDNN %zu, NVRTC %d.%d", rt, cudnnGetVersion(), a, b);' \
        '  return 0; }' >"$t/cuda.c"
    if $cc "$t/cuda.c" -o "$t/cuda" $cuda_paths -lcudnn -lcublas -lnvrtc -lcudart \
        >"$t/cuda.log" 2>&1; then
        cuda_where="$(LD_LIBRARY_PATH=$cuda_ld "$t/cuda" 2>>"$t/cuda.log"), from ${rpaths//:/ and }"
    else
        echo "the CUDA toolkit found ($cuda_paths) does not link: see $t/cuda.log"
        cuda_paths=
    fi
}

machine() {
    probe_gpu
    probe_blas
    probe_dnnl
    probe_cuda
    echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo) GB; GPU: $gpu_name"
    echo "mpcc: $mpcc ($("$mpcc" --version 2>&1 | head -1))"
    echo "PyTorch: $py, $("$py" -c 'import torch; print(torch.__version__, "CUDA" if
torch.cuda.is_available() else "no CUDA")' 2>&1 | tail -1)"
    echo "CUDA toolkit: ${cuda_where:-none}"
    echo "OpenBLAS: ${blas:-none}"
    echo "oneDNN: ${dnnl:-none}"
}

# ---- trainers ----

# make_trainer DIR MODEL MPCC_FLAGS...: writes DIR/train.c and builds
# DIR/train with the build line from its header, the CUDA toolkit's and
# OpenBLAS's paths as found here; on failure DIR/status says why.
make_trainer() {
    local dir=$1 model=$2 line
    shift 2
    rm -rf "$dir" && mkdir -p "$dir"
    if ! "$mpcc" "$model" "$@" -o "$dir/train.c" >"$dir/mpcc.log" 2>&1; then
        echo "mpcc failed" >"$dir/status"
        return 1
    fi
    line=$(sed -n 's/^ \* build:    //p' "$dir/train.c")
    case $line in
    *-lcudart*)
        [ -n "$cuda_paths" ] || { echo "no CUDA toolkit" >"$dir/status"; return 1; }
        line=${line/-I\/usr\/local\/cuda\/include -L\/usr\/local\/cuda\/lib64 -Wl,-rpath,\/usr\/local\/cuda\/lib64/$cuda_paths} ;;
    *)
        [ -n "$blas" ] || { echo "no OpenBLAS" >"$dir/status"; return 1; }
        line=${line/-lopenblas/$blas}
        case $line in *-ldnnl*)
            [ -n "$dnnl" ] || { echo "no oneDNN" >"$dir/status"; return 1; }
            line=${line/-ldnnl/$dnnl} ;;
        esac ;;
    esac
    line="$cc${line#cc} ${TRAINER_CFLAGS:-}"
    echo "$line" >"$dir/build.log"
    if ! (cd "$dir" && eval "$line") >>"$dir/build.log" 2>&1; then
        echo "build failed" >"$dir/status"
        return 1
    fi
    echo built >"$dir/status"
}

# run_trainer RUN_DIR BINARY SECONDS ARGS...: runs BINARY ARGS in RUN_DIR
# (created), output in RUN_DIR/run.log; RUN_DIR/status: ok, no GPU,
# timed out or failed (exit N).
# After a CUDA trainer has timed out, the CUDA trainers that follow are not
# started (a hung GPU would take each to its limit, and the phase past its
# time).
run_trainer() {
    local dir=$1 bin=$2 limit=$3 rc cuda=0
    shift 3
    mkdir -p "$dir"
    if [ "$(cat "$(dirname "$bin")/status" 2>/dev/null)" != built ]; then
        cat "$(dirname "$bin")/status" >"$dir/status" 2>/dev/null || echo "not built" >"$dir/status"
        return 1
    fi
    grep -q -- -lcudart "$(dirname "$bin")/build.log" && cuda=1
    if [ $cuda = 1 ] && [ -f "$work/cuda-timed-out" ]; then
        echo "not run: $(cat "$work/cuda-timed-out") timed out" >"$dir/status"
        return 1
    fi
    (cd "$dir" && LD_LIBRARY_PATH=${cuda_ld:-${LD_LIBRARY_PATH:-}} timeout "$limit" "$bin" "$@") \
        >"$dir/run.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then echo ok
    elif [ $rc = 2 ] && grep -q 'no CUDA device' "$dir/run.log"; then echo "no GPU"
    elif [ $rc = 124 ]; then
        echo "timed out (${limit} s)"
        [ $cuda = 0 ] || echo "${dir#"$work"/}" >"$work/cuda-timed-out"
    else echo "failed (exit $rc: $(tail -1 "$dir/run.log" | cut -c1-120))"
    fi >"$dir/status"
    [ $rc = 0 ]
}

# pack_logs DIR NAME: the raw logs under $work/DIR into OUT/NAME-logs.tar.gz
# (no binaries, models, data or checkpoints).
pack_logs() {
    (cd "$work" && find "$1" -type f \( -name '*.log' -o -name '*.txt' -o -name '*.json' \
        -o -name status \) -print0 | tar --null -czf "$res/$2-logs.tar.gz" -T -)
}

# ---- check: loss curves, CUDA against CPU ----

phase_check() {
    local steps=${STEPS:-20} m dir flags o b lr args w=$work/check
    # per model: gpu_models.py's options (B, lr, size); the data is 4
    # batches, read over and over, so that the loss falls
    local -A opts
    if [ "$small" = 1 ]; then
        opts=([cnn]="--batch 16 --lr 0.003"
              [resnet50]="--batch 8 --lr 0.001 --size 32 --classes 10 --zero-init-residual"
              [gpt]="--batch 8 --lr 0.2 --vocab 128 --d 32 --heads 2 --layers 2 --T 16")
    else
        opts=([cnn]="--batch 32 --lr 0.003"
              [resnet50]="--batch 8 --lr 0.001 --size 224 --classes 10 --zero-init-residual"
              [gpt]="--batch 8 --lr 0.2 --vocab 512 --d 256 --heads 4 --layers 4 --T 128")
    fi
    rm -rf "$w" && mkdir -p "$w"
    local models="cnn resnet50 gpt" settings=""
    for m in $models; do
        dir=$w/$m o=${opts[$m]}
        b=$(echo "$o" | sed 's/.*--batch \([0-9]*\).*/\1/')
        lr=$(echo "$o" | sed 's/.*--lr \([0-9.]*\).*/\1/')
        echo "== check $m: $o, 2 micro-batches, SGD momentum 0.9, $steps steps"
        "$py" "$here/gpu_models.py" $m --out "$dir" $o --microbatches 2 --rows $((4 * b)) \
            --ref "$steps" >"$dir.export.log" 2>&1 || { echo "export failed: $(tail -1 "$dir.export.log")"; continue; }
        cat "$dir.export.log"
        settings="$settings- $m: \`gpu_models.py $m $o --microbatches 2 --rows $((4 * b))\`, $steps steps"$'\n'
        flags="-batch $b --microbatches=2 --schedule=1f1b --lr=$lr --momentum=0.9"
        [ $m = gpt ] && flags="$flags --class-axis=-1"
        make_trainer "$dir/cpu1" "$dir/model.onnx" -cpus 1 $flags
        make_trainer "$dir/cpu2" "$dir/model.onnx" -cpus 2 $flags
        make_trainer "$dir/gpu1" "$dir/model.onnx" -gpus 1 $flags
        make_trainer "$dir/gpu2" "$dir/model.onnx" -gpus 2 $flags
        TRAINER_CFLAGS=-DMPRT_CU_STAGE_ALL make_trainer "$dir/gpu2staged" "$dir/model.onnx" -gpus 2 $flags
        make_trainer "$dir/gpu1tf32" "$dir/model.onnx" -gpus 1 --tf32 $flags
        make_trainer "$dir/gpu1nograph" "$dir/model.onnx" -gpus 1 --cuda-graph=off $flags
        make_trainer "$dir/cpu1bf16" "$dir/model.onnx" -cpus 1 --precision=bf16 $flags
        make_trainer "$dir/gpu1bf16" "$dir/model.onnx" -gpus 1 --precision=bf16 $flags
        make_trainer "$dir/gpu2bf16" "$dir/model.onnx" -gpus 2 --precision=bf16 $flags
        make_trainer "$dir/gpu1offload" "$dir/model.onnx" -gpus 1 --offload=all \
            ${flags/--schedule=1f1b/--schedule=interleaved --virtual-stages=4}
        args="--data $dir/x.npy --labels $dir/y.npy --steps $steps --log-every 1 --loss-log losses.txt --save ckpt.safetensors"
        # CPU runs in the background, one BLAS thread each (bit for bit
        # reproducible), while the GPU runs one after the other
        OPENBLAS_NUM_THREADS=1 run_trainer "$dir/run-cpu1" "$dir/cpu1/train" 420 $args &
        OPENBLAS_NUM_THREADS=1 run_trainer "$dir/run-cpu2" "$dir/cpu2/train" 420 $args &
        OPENBLAS_NUM_THREADS=1 run_trainer "$dir/run-cpu1bf16" "$dir/cpu1bf16/train" 420 $args &
    done
    for m in $models; do
        dir=$w/$m
        [ -f "$dir/x.npy" ] || continue
        args="--data $dir/x.npy --labels $dir/y.npy --steps $steps --log-every 1 --loss-log losses.txt --save ckpt.safetensors"
        run_trainer "$dir/run-gpu1" "$dir/gpu1/train" 120 $args
        run_trainer "$dir/run-gpu1-again" "$dir/gpu1/train" 120 $args
        run_trainer "$dir/run-gpu2" "$dir/gpu2/train" 120 $args
        run_trainer "$dir/run-gpu2staged" "$dir/gpu2staged/train" 120 $args
        run_trainer "$dir/run-gpu1tf32" "$dir/gpu1tf32/train" 120 $args
        run_trainer "$dir/run-gpu1offload" "$dir/gpu1offload/train" 120 $args
        run_trainer "$dir/run-gpu1nograph" "$dir/gpu1nograph/train" 120 $args
        run_trainer "$dir/run-gpu1bf16" "$dir/gpu1bf16/train" 120 $args
        run_trainer "$dir/run-gpu2bf16" "$dir/gpu2bf16/train" 120 $args
        echo "$m: -gpus 1 $(cat "$dir/run-gpu1/status"), -gpus 2 $(cat "$dir/run-gpu2/status")," \
            "-gpus 1 --tf32 $(cat "$dir/run-gpu1tf32/status")," \
            "-gpus 1 --offload=all $(cat "$dir/run-gpu1offload/status")," \
            "--cuda-graph=off $(cat "$dir/run-gpu1nograph/status")," \
            "bf16 $(cat "$dir/run-gpu1bf16/status")"
    done
    wait
    {
        echo "### Loss curves: the CUDA trainer against the CPU trainer"
        echo
        echo "$(date -u +%Y-%m-%d), $(nproc) cores, GPU: $gpu_name; $("$mpcc" --version 2>&1 | head -1);" \
            "PyTorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)."
        echo "Every trainer of a model: the same model.onnx and data (4 batches of rows, step i reads" \
            "batch i mod 4), 2 micro-batches (--microbatches=2 --schedule=1f1b), SGD momentum 0.9;" \
            "CPU runs with OPENBLAS_NUM_THREADS=1. Differences are against \`-cpus 1\` (a GPU's bf16 runs: against \`-cpus 1 --precision=bf16\`). The models" \
            "(tests/bench/gpu_models.py):"
        echo
        printf '%s' "$settings"
        echo
        "$py" "$here/loss_table.py" --header
        for m in $models; do
            dir=$w/$m
            [ -f "$dir/x.npy" ] || continue
            "$py" "$here/loss_table.py" "$m" "$dir" "-cpus 1=$dir/run-cpu1" "-cpus 2=$dir/run-cpu2" \
                "-gpus 1=$dir/run-gpu1" "-gpus 1, again=$dir/run-gpu1-again" "-gpus 2=$dir/run-gpu2" \
                "-gpus 2, copies staged=$dir/run-gpu2staged" \
                "-gpus 1 --tf32=$dir/run-gpu1tf32" \
                "-gpus 1, 4 stages, all offloaded=$dir/run-gpu1offload" \
                "-gpus 1 --cuda-graph=off=$dir/run-gpu1nograph" \
                "-cpus 1 --precision=bf16=$dir/run-cpu1bf16" \
                "-gpus 1 --precision=bf16=$dir/run-gpu1bf16" \
                "-gpus 2 --precision=bf16=$dir/run-gpu2bf16" 2>>"$w/tolerance.log"
        done
        echo
        echo "| model | F: float32 from float64 (max rel) | tolerance max(1e-4, 4F) |"
        echo "|---|---|---|"
        cat "$w"/*/tolerance.txt 2>/dev/null | awk '{printf "| %s | %s | %s |\n", $1, $2, $3}'
        echo
        echo "F is the largest relative distance, over the steps, of the CPU trainer's and" \
            "PyTorch's float32 losses from PyTorch's float64 ones (same weights and rows;" \
            "tests/bench/loss_table.py). A float32 run is within tolerance when its step-1 loss" \
            "(the forward pass alone) is within 1e-5 of the CPU's and every step within" \
            "max(1e-4, 4F). \"same bits as\": losses and final checkpoint identical, byte for byte."
    } >"$res/check.md"
    pack_logs check check
    cat "$res/check.md"
}

# ---- bench: step time against PyTorch eager ----

# mpcc_step DIR N: (time of 3+N steps - time of 3 steps) / N, in seconds,
# as tests/bench/bench_train.sh measures it; nothing when the trainer fails,
# or when the N steps took no time past the start-up's noise (a tiny model
# on a short BENCH_SECONDS: the difference can come out negative).
mpcc_step() {
    local dir=$1 n=$2 t0 t1 t2 d
    t0=$(date +%s%N)
    run_trainer "$dir/run3" "$dir/train" 300 --synthetic --steps 3 --log-every 1000 || return 0
    t1=$(date +%s%N)
    run_trainer "$dir/run3+N" "$dir/train" 300 --synthetic --steps $((n + 3)) \
        --log-every 100000 || return 0
    t2=$(date +%s%N)
    d=$(calc "(($t2 - $t1) - ($t1 - $t0)) / 1e9 / $n" %.6f)
    if [ "$(calc "($d > 0)" %d)" = 1 ]; then
        echo "$d"
    else
        echo "gpu_run.sh: $dir: $n steps took no longer than 3 to time; not counted" \
            "(raise BENCH_SECONDS)" >&2
    fi
}

# calc EXPR FORMAT: EXPR (numbers, + - * / and parentheses, int()) by awk
calc() { awk "BEGIN { printf \"$2\n\", $1 }"; }

min2() { printf '%s\n%s\n' "$1" "$2" | sed '/^$/d' | sort -g | head -1; }

# bench_model resnet50|gpt: appends its two rows (fp32, tf32) to $rows
bench_model() {
    local m=$1 dir=$work/bench/$1 b opts flags="" desc nmax
    if [ $m = resnet50 ]; then
        if [ "$small" = 1 ]; then b=4 opts="--size 32 --classes 10" nmax=20 desc="ResNet-50, 32x32, 10 classes"
        else b=128 opts="--size 224 --classes 1000" nmax=20 desc="ResNet-50, 224x224"
        fi
    else
        if [ "$small" = 1 ]; then
            b=4 opts="--vocab 512 --d 64 --heads 4 --layers 2 --T 32" nmax=20
            desc="GPT, vocab 512, d 64, 2 layers, 4 heads, T 32"
        else
            b=4 opts="--vocab 50304 --d 768 --heads 12 --layers 12 --T 1024" nmax=10
            desc="GPT-2-small size: vocab 50304, d 768, 12 layers, 12 heads, T 1024"
        fi
        flags=--class-axis=-1
    fi
    nmax_all="${nmax_all:+$nmax_all, }$nmax for $m"
    echo "== bench $m: batch $b, $opts"
    rm -rf "$dir" && mkdir -p "$dir"
    "$py" "$here/gpu_models.py" $m --out "$dir" $opts >"$dir/export.log" 2>&1 ||
        { echo "export failed: $(tail -1 "$dir/export.log")"; return; }
    cat "$dir/export.log"
    local prec tf m1 m2 p1 p2 n mb pb st mcol mps pcol pps ratio tdir note ok t3
    # fp32, tf32, bf16 (against PyTorch AMP), and fp32 issued op by op
    # (--cuda-graph=off: the captured step's gain)
    for prec in ${BENCH_PRECISIONS:-fp32 tf32 bf16 fp32-nograph}; do
        tf="" mp="" pt="" det=1
        case $prec in
        fp32) ;;
        tf32) tf=--tf32 mp=--tf32 pt=--tf32 ;;
        bf16) mp=--precision=bf16 pt=--bf16 ;;
        bf16-nondet) mp=--precision=bf16 pt=--bf16 det=0 ;;
        fp32-nograph) mp=--cuda-graph=off ;;
        *) echo "gpu_run.sh: BENCH_PRECISIONS: unknown row '$prec' (fp32, tf32, bf16," \
               "bf16-nondet, fp32-nograph)" >&2
           continue ;;
        esac
        # bf16-nondet: cuDNN's first-ranked algorithms, deterministic or not
        # (as PyTorch's, whose cudnn.deterministic is off)
        export MPRT_CU_DETERMINISTIC=$det
        make_trainer "$dir/$prec" "$dir/model.onnx" -gpus 1 -batch $b --microbatches=1 \
            --lr=0.01 --momentum=0.9 $flags $mp
        grep -m1 'memory plan' "$dir/$prec/mpcc.log"
        # a first run compiles the NVRTC kernels into the cache, reads the
        # weights into the page cache, and gives the step count N: about
        # 15 s of steps from its own figure (which counts the first step, so
        # N comes out low rather than high), between 3 and nmax
        n=$nmax tdir=$dir/$prec note=""
        # (MPRT_CU_ALGOS: the cuDNN algorithms chosen, into its run.log)
        if ! MPRT_CU_ALGOS=1 run_trainer "$dir/$prec-warm" "$tdir/train" 240 --synthetic --steps 3; then
            st=$(cat "$dir/$prec-warm/status")
            echo "$m $prec: the CUDA trainer: $st"
            if [ "$st" = "no GPU" ] && [ -n "$blas" ]; then
                # a dry run: the same steps timed on one CPU device instead
                tdir=$dir/$prec-cpu note=" (no GPU: -cpus 1)"
                make_trainer "$tdir" "$dir/model.onnx" -cpus 1 -batch $b --microbatches=1 \
                    --lr=0.01 --momentum=0.9 $flags ${mp:+$(case $prec in bf16*) echo $mp ;; esac)}
                run_trainer "$dir/$prec-warm" "$tdir/train" 240 --synthetic --steps 3
            fi
        fi
        m1="" m2="" ok=0 t3=""
        if [ "$(cat "$dir/$prec-warm/status")" = ok ]; then
            ok=1
            t3=$(sed -n 's/^trained 3 steps in \([0-9.]*\) s.*/\1/p' "$dir/$prec-warm/run.log")
            n=$(calc "int(${BENCH_SECONDS:-15} * 3 / $t3)" %d)
            [ "$n" -le "$nmax" ] || n=$nmax
            [ "$n" -ge 3 ] || n=3
            if [ "$(calc "($t3 > 15)" %d)" = 1 ]; then
                # over 5 s a step: the 4 runs of two measurements would take
                # minutes; the warm run's own mean is the figure
                ok=0 m1=$(calc "$t3 / 3" %.6f) note="$note (one 3-step run's mean)"
            fi
        fi
        # alternating: mpcc, PyTorch, mpcc, PyTorch; the better of each two
        [ $ok = 1 ] && m1=$(mpcc_step "$tdir" "$n")
        p1=$(timeout 300 "$py" "$here/torch_cuda.py" $m $nmax --batch $b $pt $opts 2>>"$dir/torch-$prec.log")
        [ $ok = 1 ] && m2=$(mpcc_step "$tdir" "$n")
        p2=$(timeout 300 "$py" "$here/torch_cuda.py" $m $nmax --batch $b $pt $opts 2>>"$dir/torch-$prec.log")
        mb=$(min2 "$m1" "$m2") pb=$(min2 "$p1" "$p2")
        st=$(cat "$dir/$prec-warm/status" 2>/dev/null || cat "$dir/$prec/status")
        echo "$m $prec: mpcc ${m1:-$st} ${m2:-} s/step (N=$n); PyTorch ${p1:-failed} ${p2:-}" \
            "s/step (N=$nmax): $(tail -1 "$dir/torch-$prec.log")"
        mcol=$st mps="" pcol=failed pps="" ratio=""
        [ -n "$mb" ] && mcol=$(calc "$mb" %.4f)$note mps=$(calc "$b / $mb" %.1f)
        [ -n "$pb" ] && pcol=$(calc "$pb" %.4f) pps=$(calc "$b / $pb" %.1f)
        [ -n "$mb" ] && [ -n "$pb" ] && ratio=$(calc "$mb / $pb" %.3f)
        grep -q 'no GPU' "$dir/torch-$prec.log" && pcol="$pcol (on the CPU)"
        rows="$rows| $desc | $b | $prec | $mcol | $mps | $pcol | $pps | $ratio |"$'\n'
    done
    unset MPRT_CU_DETERMINISTIC
}

phase_bench() {
    local which=$1 m rows="" nmax_all=""
    mkdir -p "$work/bench"
    for m in resnet50 gpt; do
        [ "$which" = all ] || [ "$which" = $m ] && bench_model $m
    done
    {
        echo "### Training step: the CUDA trainer against PyTorch eager, one GPU"
        echo
        echo "$(date -u +%Y-%m-%d), GPU: $gpu_name; $("$mpcc" --version 2>&1 | head -1);" \
            "PyTorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)."
        echo "SGD lr 0.01 momentum 0.9, cross-entropy, one batch of synthetic data reused every" \
            "step on both sides; fp32: TF32 off on both sides; tf32: mpcc --tf32, PyTorch" \
            "allow_tf32 for matmul and cuDNN; bf16: mpcc --precision=bf16, PyTorch eager AMP" \
            "(torch.autocast bf16 around the forward); bf16-nondet: the same with" \
            "MPRT_CU_DETERMINISTIC=0 (cuDNN's first-ranked algorithms, deterministic or not," \
            "as PyTorch's; the other mpcc rows take its deterministic ones first);" \
            "fp32-nograph: mpcc --cuda-graph=off" \
            "(the step issued op by op; the other mpcc rows replay it as one CUDA graph)" \
            "against PyTorch fp32. mpcc: (time of 3+N steps - time of 3 steps) / N," \
            "N for about 15 s of steps, at most N'; PyTorch: the median of N' synchronized steps" \
            "after 5 warm-up steps (tests/bench/torch_cuda.py); N' = $nmax_all. Measured" \
            "alternating, the better of two each."
        echo
        echo "| model | batch | precision | mpcc s/step | mpcc samples/s | PyTorch s/step | PyTorch samples/s | ratio mpcc/PyTorch |"
        echo "|---|---|---|---|---|---|---|---|"
        printf '%s' "$rows"
    } >"$res/$name.md"
    pack_logs bench "$name"
    cat "$res/$name.md"
}

# ---- timeline: a 2-device 1F1B step, measured against predicted ----

# timeline_runs NAME DEVICES LABEL: the trainer of $flags on DEVICES (-gpus 2
# or -cpus 2) in $w/NAME: mpcc's predicted step, the measured one
# (./train --trace), and the plan again, cut at the same place, with the
# per-node times that ./train --profile measured (mpcc --measured); each
# trace found is added to $traces as "LABEL, what=FILE".
timeline_runs() {
    local name=$1 devices=$2 label=$3 d=$w/$1 split
    mkdir -p "$d"
    make_trainer "$d/trainer" "$w/model.onnx" $devices $flags --trace "$d/predicted.json"
    [ -f "$d/predicted.json" ] && traces+=("$label, predicted=$d/predicted.json")
    "$mpcc" "$w/model.onnx" $devices $flags --dump=partition >"$d/partition.txt" 2>&1
    cat "$d/partition.txt"
    run_trainer "$d/run" "$d/trainer/train" 120 --synthetic --steps $steps --trace run.json
    echo "$label, ./train --trace: $(cat "$d/run/status")"
    [ -f "$d/run/run.json" ] && traces+=("$label, measured=$d/run/run.json")
    run_trainer "$d/prof" "$d/trainer/train" 120 --synthetic --steps 3 --profile prof.json
    echo "$label, ./train --profile: $(cat "$d/prof/status")"
    [ -f "$d/prof/prof.json" ] || return 0
    split=$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 {print $NF}' "$d/partition.txt" | sed '$d' | paste -sd, -)
    if "$mpcc" "$w/model.onnx" $devices $flags --split="$split" --measured="$d/prof/prof.json" \
        --dump=schedule --trace="$d/predicted-measured.json" >"$d/predicted-measured.log" 2>&1; then
        traces+=("$label, predicted from --profile=$d/predicted-measured.json")
    else
        echo "$label, mpcc --measured: failed: $(tail -1 "$d/predicted-measured.log")"
    fi
}

phase_timeline() {
    local w=$work/timeline b size steps=5 traces=() cut
    if [ "$small" = 1 ]; then b=8 size=32; else b=64 size=224; fi
    local flags="-batch $b --microbatches=4 --schedule=1f1b --lr=0.01 --momentum=0.9"
    rm -rf "$w" && mkdir -p "$w"
    echo "== timeline: ResNet-50 ${size}x$size, batch $b, -gpus 2 (one GPU), 1F1B, 4 micro-batches"
    "$py" "$here/gpu_models.py" resnet50 --out "$w" --size $size --classes 1000 >"$w/export.log" 2>&1 ||
        { echo "export failed: $(tail -1 "$w/export.log")"; return; }
    timeline_runs gpu2 "-gpus 2" "-gpus 2"
    cut=$(awk '$1 == 0 && NF >= 12 {print $NF}' "$w/gpu2/partition.txt")
    if [ $gpu = 0 ] && [ -n "$blas" ]; then
        # no GPU: the same on two CPU devices, to exercise the summary
        OPENBLAS_NUM_THREADS=1 timeline_runs cpu2 "-cpus 2" "-cpus 2 (no GPU)"
    fi
    {
        echo "### Timeline of one step: ResNet-50 on two logical CUDA devices"
        echo
        echo "$(date -u +%Y-%m-%d), GPU: $gpu_name; $("$mpcc" --version 2>&1 | head -1)."
        echo "ResNet-50 ${size}x$size, batch $b, 4 micro-batches, 1F1B on -gpus 2, cut after" \
            "${cut:-?}. Both logical devices share one GPU: the measured step runs both stages on" \
            "one GPU, the prediction assumes two. Predicted: mpcc --trace, with the default" \
            "h100-sxm profile, and again with the per-node times of ./train --profile" \
            "(--measured, same cut); measured: the last of $steps steps (./train --trace). Busy:" \
            "the sum of a device's compute actions; bubble: 1 - busy of all devices / (devices x" \
            "step) (tests/bench/trace_summary.py)."
        echo
        "$py" "$here/trace_summary.py" "${traces[@]}"
    } >"$res/timeline.md"
    pack_logs timeline timeline
    cat "$res/timeline.md"
}

# ---- probe: whether two runs give the same bits, and where a step goes ----

# probe_repro: ResNet-50 as check trains it (batch 8, 2 micro-batches, 1F1B)
# on -gpus 1, twice, 2 steps, a checkpoint after each; the tensors whose
# bits differ between the two runs (tests/bench/ckpt_diff.py) after step 1
# point at the backward node that is not reproducible. MPRT_CU_ALGOS=1
# writes the cuDNN algorithms chosen into each run.log.
probe_repro() {
    local d=$w/repro size=224 dev="-gpus 1" r s
    [ "$small" = 1 ] && size=32
    mkdir -p "$d"
    echo "== probe: ResNet-50 ${size}x$size, batch 8, run twice"
    "$py" "$here/gpu_models.py" resnet50 --out "$d" --batch 8 --lr 0.001 --size $size --classes 10 \
        --zero-init-residual --microbatches 2 --rows 32 >"$d/export.log" 2>&1 ||
        { echo "export failed: $(tail -1 "$d/export.log")"; return; }
    [ $gpu = 1 ] || dev="-cpus 1"   # no GPU: the same on a CPU device, to exercise the script
    make_trainer "$d/trainer" "$d/model.onnx" $dev -batch 8 --microbatches=2 --schedule=1f1b \
        --lr=0.001 --momentum=0.9
    for r in a b; do
        MPRT_CU_ALGOS=1 run_trainer "$d/run-$r" "$d/trainer/train" 120 --data "$d/x.npy" \
            --labels "$d/y.npy" --steps 2 --save-every 1 --save ckpt.safetensors
        echo "run $r ($dev): $(cat "$d/run-$r/status")"
    done
    {
        echo "#### Two runs of ResNet-50 ($dev, batch 8, 2 micro-batches): checkpoints compared"
        for s in 1 2; do
            echo
            echo "After step $s:"
            echo
            echo '```'
            "$py" "$here/ckpt_diff.py" "$d/run-a/ckpt.step$s.safetensors" \
                "$d/run-b/ckpt.step$s.safetensors" 2>&1 | tail -40
            echo '```'
        done
        echo
        echo "Convolution algorithms (MPRT_CU_ALGOS=1) and atomics:"
        echo
        echo '```'
        grep -E '^(conv|maxpool)' "$d/run-a/run.log" | sort | uniq | head -80
        echo '```'
    } >>"$res/probe.md"
}

# probe_profile MODEL: ./train --profile of bench's ResNet-50 or GPT on
# -gpus 1, in $PROBE_PRECISION (default fp32), one micro-batch, summed by
# kind of node (tests/bench/profile_summary.py).
probe_profile() {
    local m=$1 d=$w/$1 b opts flags="" dev="-gpus 1" prec=${PROBE_PRECISION:-fp32} p
    if [ $m = resnet50 ]; then
        b=128 opts="--size 224 --classes 1000"
        [ "$small" = 1 ] && b=4 opts="--size 32 --classes 10"
    else
        b=4 opts="--vocab 50304 --d 768 --heads 12 --layers 12 --T 1024" flags=--class-axis=-1
        [ "$small" = 1 ] && opts="--vocab 512 --d 64 --heads 4 --layers 2 --T 32"
    fi
    case $prec in
    fp32) p="" ;;
    tf32) p=--tf32 ;;
    bf16) p=--precision=bf16 ;;
    *) echo "gpu_run.sh: PROBE_PRECISION=$prec is not fp32, tf32 or bf16" >&2; return ;;
    esac
    mkdir -p "$d"
    echo "== probe: per-node profile of $m, batch $b, $opts, $prec"
    "$py" "$here/gpu_models.py" $m --out "$d" $opts >"$d/export.log" 2>&1 ||
        { echo "export failed: $(tail -1 "$d/export.log")"; return; }
    [ $gpu = 1 ] || dev="-cpus 1"
    make_trainer "$d/trainer" "$d/model.onnx" $dev -batch $b --microbatches=1 --lr=0.01 \
        --momentum=0.9 $flags $p
    MPRT_CU_ALGOS=1 run_trainer "$d/prof" "$d/trainer/train" 240 --synthetic --steps 3 \
        --profile prof.json
    echo "$m, ./train --profile ($dev): $(cat "$d/prof/status")"
    {
        echo
        echo "#### Per-node profile: $m ($dev, batch $b, $opts, one micro-batch, $prec)"
        echo
        grep -m1 'trained 3 steps' "$d/prof/run.log"
        echo
        if [ -f "$d/prof/prof.json" ]; then "$py" "$here/profile_summary.py" "$d/prof/prof.json"
        else echo "no profile: $(cat "$d/prof/status")"
        fi
    } >>"$res/probe.md"
}

phase_probe() {
    local w=$work/probe m
    rm -rf "$w" && mkdir -p "$w"
    {
        echo "### Probe: reproducibility and per-node times"
        echo
        echo "$(date -u +%Y-%m-%d), GPU: $gpu_name; $("$mpcc" --version 2>&1 | head -1)."
        echo
    } >"$res/probe.md"
    for m in ${PROBE:-gpt repro resnet50}; do
        case $m in repro) probe_repro ;; *) probe_profile $m ;; esac
    done
    pack_logs probe probe
    cat "$res/probe.md"
}

# ---- pack: what a GPU machine needs from this one ----

phase_pack() {
    local dest=$root/.gpu f
    rm -rf "$dest" && mkdir -p "$dest/include"
    cp "$mpcc" "$dest/mpcc"
    f=$(ldd "$mpcc" | awk '/libprotobuf-c/ {print $3}')
    [ -n "$f" ] && cp -L "$f" "$dest/"
    f=$(echo 'int main(void){return 0;}' | $cc -x c - -o /dev/null -lopenblas -Wl,--trace 2>/dev/null |
        grep -m1 'libopenblas' | sed 's/^-lopenblas (\(.*\))$/\1/')
    [ -n "$f" ] && [ -f "$f" ] || f=$(ldconfig -p | awk '/libopenblas.so.0 / {print $NF; exit}')
    if [ -n "$f" ]; then
        cp -L "$f" "$dest/libopenblas.so.0"
        # its own libraries beyond the C library (libgfortran, libquadmath)
        ldd "$dest/libopenblas.so.0" | awk '/=> \// && !/libc\.so|libm\.so|libpthread|ld-linux|libgcc_s|libdl/ {print $3}' |
            while read -r dep; do cp -L "$dep" "$dest/"; done
        echo '#include <cblas.h>' | $cc -x c -M - 2>/dev/null | tr ' \\' '\n\n' |
            grep -E 'cblas|openblas' | while read -r h; do cp -L "$h" "$dest/include/"; done
    fi
    f=$(echo 'int main(void){return 0;}' | $cc -x c - -o /dev/null -ldnnl -Wl,--trace 2>/dev/null |
        grep -m1 'libdnnl' | sed 's/^-ldnnl (\(.*\))$/\1/')
    if [ -n "$f" ] && [ -f "$f" ]; then
        # under its soname (libdnnl.so.2 or .3), with the libraries it needs
        # beyond the C library (libgomp, libstdc++, the OpenCL loader)
        cp -L "$f" "$dest/$(objdump -p "$f" | awk '/SONAME/ {print $2}')"
        ldd "$f" | awk '/=> \// && !/libc\.so|libm\.so|libpthread|ld-linux|libgcc_s|libdl/ {print $3}' |
            while read -r dep; do [ -f "$dest/${dep##*/}" ] || cp -L "$dep" "$dest/"; done
        # its headers (dnnl.h, dnnl_debug.h, ...: the trainers include
        # several), each in its folder
        local inc=$(echo '#include <dnnl.h>' | $cc -x c -M - 2>/dev/null | tr ' \\' '\n\n' |
            grep -m1 '/dnnl\.h$')
        inc=${inc%/dnnl.h}
        (cd "$inc" && find . -maxdepth 1 -name 'dnnl*.h' && find oneapi/dnnl -name '*.h' -o -name '*.hpp') |
            while read -r h; do
                mkdir -p "$dest/include/$(dirname "$h")"
                cp -L "$inc/$h" "$dest/include/$h"
            done
    fi
    gzip -9 "$dest"/lib*.so*
    git -C "$root" check-ignore -q .gpu/mpcc ||
        echo "warning: .gpu/ is not ignored by git here; carried folders must be ignored"
    ls -la "$dest" "$dest/include"
    echo "packed into $dest: $(du -sh "$dest" | cut -f1)"
}

# no phase: the comment at the top
[ $# -gt 0 ] || { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2; }
while [ $# -gt 0 ]; do
    phase=$1 name=$1 arg=""
    shift
    if [ "$phase" = bench ]; then
        arg=all
        case ${1:-} in resnet50 | gpt) arg=$1 name=bench-$1; shift ;; esac
    fi
    case $phase in
    pack) phase_pack ;;
    check | bench | timeline | probe)
        "$mpcc" --version >/dev/null 2>&1 || {
            echo "gpu_run.sh: cannot run $mpcc: $("$mpcc" --version 2>&1 | head -1)" \
                "(set MPCC, and MPCC_LIBS to the folder with its libprotobuf-c)" >&2
            exit 1
        }
        {
            echo "=== $name ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))${SMALL:+, SMALL=$small}"
            machine
            start=$(date +%s)
            case $phase in
            check) phase_check ;;
            bench) phase_bench "$arg" ;;
            timeline) phase_timeline ;;
            probe) phase_probe ;;
            esac
            echo "=== $name done in $(($(date +%s) - start)) s; results in $res"
        } 2>&1 | tee "$res/$name.log"
        ;;
    *) echo "gpu_run.sh: unknown phase '$phase' (pack, check, bench [resnet50|gpt], timeline, probe)" >&2
       exit 2 ;;
    esac
done
