#!/bin/sh
# Benchmark: the generated CPU trainer's step time against PyTorch CPU on the
# same model, batch, optimizer and thread count, measured in one run.
#   tests/bench/bench_train.sh [BUILD_DIR] [WORK_DIR]
# Model: MLP 784-1024-1024-10, batch 256, SGD lr 0.01 momentum 0.9, 2 threads.
# mpcc's figure: total time of --steps N divided by N (after 5 warm-up steps,
# the trainer run twice); PyTorch's: median of N timed steps after warm-up.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=${2:-/tmp/mpcc-bench/train}
steps=${STEPS:-50}
threads=${THREADS:-2}
mkdir -p "$work"
export PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
/usr/bin/python3 "$root/tests/train/ref_train.py" --model mlp --mlp-sizes 784,1024,1024,10 \
    --batch 256 --steps 1 --lr 0.01 --momentum 0.9 --out "$work/mlp" >/dev/null
cd "$work/mlp"
"$build/mpcc" model.onnx -cpus 1 -batch 256 --lr=0.01 --momentum=0.9 -o train.c
cc -O2 train.c -o train -lopenblas -lm
mpcc_step() {
    ./train --synthetic --steps 5 --log-every 1000 2>/dev/null
    t0=$(date +%s%N)
    ./train --synthetic --steps "$steps" --log-every 100000 2>/dev/null
    t1=$(date +%s%N)
    echo "scale=6; ($t1 - $t0) / 1000000000 / $steps" | bc
}
torch_step() {
    /usr/bin/python3 - "$steps" "$threads" <<'PY'
import sys, time, statistics, torch
steps, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(256, 784); y = torch.randint(0, 10, (256,))
times = []
for i in range(steps + 5):
    t = time.perf_counter()
    opt.zero_grad(); loss = torch.nn.functional.cross_entropy(m(x), y); loss.backward(); opt.step()
    if i >= 5: times.append(time.perf_counter() - t)
print("%.6f" % statistics.median(times))
PY
}
m1=$(mpcc_step); p1=$(torch_step); m2=$(mpcc_step); p2=$(torch_step)   # alternating
m=$(printf '%s\n%s\n' "$m1" "$m2" | sort -n | head -1)
p=$(printf '%s\n%s\n' "$p1" "$p2" | sort -n | head -1)
echo "machine: $(nproc) cores; $threads threads; MLP 784-1024-1024-10, batch 256, SGD momentum"
echo "  mpcc trainer   $m s/step   (runs: $m1 $m2)"
echo "  PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')  $p s/step   (runs: $p1 $p2)"
echo "  ratio mpcc/PyTorch: $(echo "scale=3; $m / $p" | bc)"
