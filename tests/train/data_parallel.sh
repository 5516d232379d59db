#!/bin/sh
# --data-parallel and --nodes on CPU devices, in one process and across
# processes started by mpirun (Open MPI): every layout of the same step
# (-batch, --microbatches) gives the same losses and checkpoint, byte for
# byte, as one replica.
#   - samples/mlp.mp and samples/gpt.mp (AdamW), 8 micro-batches a step,
#     against one replica (--data-parallel=1: the gradient sum as the
#     same tree): 2 replicas in one process, of one device and of two (a
#     pipeline each); 2 processes of one device and of two; 4 processes
#     of one device; 2 processes of 2 replicas of one device;
#   - samples/cnn_bn.mp (BatchNorm) over 2 processes and as 2 replicas in
#     one, samples/resnet.mp as 2 replicas in one: the losses and weights
#     equal (each replica keeps its own running statistics:
#     docs/distributed.md);
#   - 2 replicas, each a pipeline across 2 of 4 processes (--data-parallel=2
#     --nodes=4), in the layouts above and on a data file;
#   - one pipeline across 2 or 4 processes (--data-parallel=1 --nodes=K;
#     GPipe, 1F1B, interleaved, zero-bubble): the copies between stages
#     of two processes over MPI, rank 0 gathering the checkpoint; the
#     losses and checkpoint of one process, byte for byte;
#   - a run resumed on 2 processes (2 replicas, and a pipeline across 2)
#     from a 1-process checkpoint, and one resumed on 1 process from a
#     2-process checkpoint, end on the 1-process checkpoint;
#   - SIGTERM to mpirun: every process stops after the same step, rank 0
#     saves, and the run resumes from it bit for bit;
#   - a trainer started on the wrong number of processes says so in one
#     line; a killed process stops the others within 30 s, the others
#     naming the step they were in;
#   - the MLP on 2 processes of 2 replicas against PyTorch, within
#     compare_train.py's tolerance; on the rows of a data file, 2 processes
#     of 2 replicas and a pipeline across 2 (evaluating too) give one
#     process's bits;
#   - --clip-norm over replicas in one process and across processes;
#   - --zero=1 (the optimizer state sharded) on 2 and 4 processes, over
#     replicas in one process and 2 processes of 2 replicas, resumed
#     both ways; --dump=memory shows the state halved;
#   - --data-parallel=auto plans 1 and 2 replicas and keeps the faster;
#   - layouts this version does not build are refused in one line; the
#     grid of GPUs is drawn with --dump.
# Usage: data_parallel.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
. "$here/build_trainer.sh"   # build NAME
run() {   # NP TRAINER FLAGS...: NP 0 runs it alone
    local np=$1 exe=$2
    shift 2
    if [ "$np" = 0 ]; then
        ./$exe --synthetic --seed 5 "$@" 2>$exe.log || { cat $exe.log; exit 1; }
    else
        mpirun -np $np ./$exe --synthetic --seed 5 "$@" 2>$exe.log ||
            { cat $exe.log; exit 1; }
    fi
}
compile() {   # NAME MODEL FLAGS...
    local out=$1 src=$2
    shift 2
    "$mpcc" "$src" "$@" -o $out.c 2>$out.mpcc || { cat $out.mpcc; exit 1; }
    build $out
}
# NAME MODEL FLAGS...: the layouts, each against one process
layouts() {
    name=$1 model=$2
    shift 2
    compile $name-1 "$model" -cpus 1 --data-parallel=1 "$@"
    run 0 $name-1 --steps 4 --loss-log $name-1.txt --save $name-1.safetensors
    for layout in "1 2 2" "1 4 2" "2 1 2" "2 2 2" "4 1 4" "2 2 4" "4 1 2"; do
        set -- $layout "$@"
        np=$1 cpus=$2 dp=$3
        shift 3
        what="$np process(es) of -cpus $cpus, $dp replicas"
        compile $name-$np-$cpus-$dp "$model" -cpus $cpus --data-parallel=$dp --nodes=$np "$@"
        run $([ $np = 1 ] && echo 0 || echo $np) $name-$np-$cpus-$dp --steps 4 \
            --loss-log $name-$np-$cpus-$dp.txt --save $name-$np-$cpus-$dp.safetensors
        cmp $name-1.txt $name-$np-$cpus-$dp.txt || { echo "FAIL: $name: $what: other losses"; exit 1; }
        cmp $name-1.safetensors $name-$np-$cpus-$dp.safetensors ||
            { echo "FAIL: $name: $what: another checkpoint"; exit 1; }
        echo "data_parallel: $name: $what: the losses ($(tr '\n' ' ' <$name-1.txt)) and" \
            "checkpoint of one replica, byte for byte"
    done
}
layouts mlp "$samples/mlp.mp" -batch 64 --microbatches=8
# --devices names one process's devices, as -cpus N does
compile mlp-devices "$samples/mlp.mp" --devices=cpu:0,cpu:1 --data-parallel=2 --nodes=2 \
    -batch 64 --microbatches=8
run 2 mlp-devices --steps 4 --loss-log mlp-devices.txt --save mlp-devices.safetensors
cmp mlp-1.txt mlp-devices.txt && cmp mlp-1.safetensors mlp-devices.safetensors ||
    { echo "FAIL: --devices=cpu:0,cpu:1 with --data-parallel=2 --nodes=2: not one replica's bits"; exit 1; }
layouts gpt "$samples/gpt.mp" -batch 16 --microbatches=8 --optimizer=adamw --schedule=gpipe

# one pipeline across processes (--data-parallel=1 --nodes=K): the copies
# between stages of two processes over MPI, every schedule
for layout in "2 1 gpipe" "2 2 1f1b" "4 1 interleaved" "2 2 zb"; do
    set -- $layout
    tag=gpt-pipe-$1-$2-$3
    compile $tag "$samples/gpt.mp" -cpus $2 --data-parallel=1 --nodes=$1 -batch 16 \
        --microbatches=8 --optimizer=adamw --schedule=$3
    grep -q "mprt_recv(" $tag.c || { echo "FAIL: $tag.c receives nothing from another process"; exit 1; }
    run $1 $tag --steps 4 --loss-log $tag.txt --save $tag.safetensors
    cmp gpt-1.txt $tag.txt || { echo "FAIL: $tag: other losses"; exit 1; }
    cmp gpt-1.safetensors $tag.safetensors || { echo "FAIL: $tag: another checkpoint"; exit 1; }
    echo "data_parallel: gpt: one $3 pipeline across $1 processes of $2 device(s): the losses" \
        "and checkpoint (gathered by rank 0) of one process, byte for byte"
done
# --clip-norm: the norm of the gradients summed over every replica (each
# stage's sum comes after its last backward, before the norms; under zero
# bubble after its last weight gradients); every layout gives one replica's
# bits, and the clipping is on (the losses are not those without it)
noclip="-batch 16 --microbatches=8 --optimizer=adamw --lr=0.001"
clip="$noclip --clip-norm=0.5"
compile clip-1 "$samples/gpt.mp" -cpus 1 --data-parallel=1 $clip
run 0 clip-1 --steps 4 --loss-log clip-1.txt --save clip-1.safetensors
compile noclip "$samples/gpt.mp" -cpus 1 --data-parallel=1 $noclip
run 0 noclip --steps 4 --loss-log noclip.txt
if cmp -s clip-1.txt noclip.txt; then echo "FAIL: --clip-norm=0.5 clipped nothing"; exit 1; fi
for layout in "1 4 2 zb" "2 2 2 1f1b" "2 2 4 zb" "2 2 1 zb" "4 1 2 1f1b"; do
    set -- $layout
    tag=clip-$1-$2-$3-$4
    compile $tag "$samples/gpt.mp" -cpus $2 --data-parallel=$3 --nodes=$1 --schedule=$4 $clip \
        --bucket-mb=0.01
    run $([ $1 = 1 ] && echo 0 || echo $1) $tag --steps 4 --loss-log $tag.txt \
        --save $tag.safetensors
    cmp clip-1.txt $tag.txt && cmp clip-1.safetensors $tag.safetensors ||
        { echo "FAIL: --clip-norm on $1 process(es) of -cpus $2, $3 replicas, $4"; exit 1; }
done
echo "data_parallel: --clip-norm over 2 replicas in one process (zero bubble), 2 processes" \
    "and 2 processes of 2, the gradients summed in buckets of 0.01 MB, a pipeline across 2" \
    "processes (each adds the other's norms) and 2 replicas each across 2 of 4: one replica's losses" \
    "($(tr '\n' ' ' <clip-1.txt)) and checkpoint, byte for byte"

# the sums on the communication streams: --dump=schedule draws each
# device's comm row and lists its buckets (one function each in train.c).
# The last micro-batch's weight gradients run in parts, and each sum waits
# for the part that finishes its bucket (run_step's waits say which): in
# the predicted trace and the one the trainer measures, each sum is on its
# device's comm thread after that part and before every update
# (--clip-norm); in the prediction some start before their stage's last
# part has ended. --gantt-from draws the measured one.
"$mpcc" "$samples/gpt.mp" -cpus 4 --data-parallel=2 --schedule=zb $clip --bucket-mb=0.01 \
    --dump=schedule --trace=sums-predicted.json -o sums-schedule.txt 2>sums.mpcc ||
    { cat sums.mpcc; exit 1; }
grep -q '^cpu:1 *comm *|[.]*S' sums-schedule.txt ||
    { cat sums-schedule.txt; echo "FAIL: --dump=schedule draws no sums on cpu:1's comm row"; exit 1; }
listed=$(grep -A2 '^# sums over the replicas' sums-schedule.txt | grep -o ' S[0-9]*\.[0-9]* ' | wc -l)
defined=$(grep -c '^static void s[0-9]*_sum[0-9]*(int mb)' clip-1-4-2-zb.c)
[ "$listed" = "$defined" ] && [ "$listed" -gt 2 ] ||
    { echo "FAIL: --dump=schedule lists $listed buckets, train.c sums $defined"; exit 1; }
run 0 clip-1-4-2-zb --steps 2 --trace sums-measured.json
/usr/bin/python3 - clip-1-4-2-zb.c sums-predicted.json sums-measured.json <<'EOF'
import json, re, sys
after, part = {}, {}   # each sum's part, by the waits of its comm stream before it
for line in open(sys.argv[1]):
    m = re.match(r"\s*mprt_wait_event\((CPU\d+_COMM), EV_S(\d+)_WGRAD_MB3_PART(\d+)\);", line)
    if m:
        part[m.group(1)] = "wgrad s%s mb3 part %s" % (m.group(2), m.group(3))
    m = re.match(r"\s*mprt_launch\((CPU\d+_COMM), s(\d+)_sum(\d+),", line)
    if m:
        after["sum s%s b%s" % (m.group(2), m.group(3))] = part[m.group(1)]
assert len(after) > 2 and len(set(after.values())) > 2, after
for path in sys.argv[2:]:
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    end = lambda e: e["ts"] + e["dur"] - 0.002   # both rounded to 0.001 us
    at = {e["name"]: e for e in ev}
    sums = [e for e in ev if re.fullmatch(r"sum s\d+ b\d+", e["name"])]
    assert len(sums) == len(after), (path, len(sums), "sums")
    early = 0
    for e in sums:
        s = e["name"].split()[1]
        assert e["tid"] == 3, (path, e["name"], "not on the comm stream")
        assert e["ts"] >= end(at[after[e["name"]]]), (path, e["name"], "before its gradients")
        parts = [x for x in ev if x["name"].startswith("wgrad %s mb3 part " % s)]
        early += e["ts"] < max(end(x) for x in parts)
        for u in (x for x in ev if x["name"].startswith("update ")):
            assert u["ts"] >= end(e), (path, u["name"], "before", e["name"])
    assert early or "measured" in path, (path, "no sum overlaps the last weight gradients")
    print("data_parallel: %s: %d sums on the comm streams, each after the part of the last "
          "weight gradients that finishes it and before every update; %d start while their "
          "stage's last weight gradients still run" % (path, len(sums), early))
EOF
"$mpcc" --gantt-from=sums-measured.json -o sums.svg 2>sums-gantt.err || { cat sums-gantt.err; exit 1; }
grep -q 'data-kind="sum"' sums.svg || { echo "FAIL: --gantt-from draws no sums"; exit 1; }
grep -q '^ \* processes: 2, one pipeline across them, 1 device(s) each: run as mpirun -np 2' \
    gpt-pipe-2-1-gpipe.c || { echo "FAIL: gpt-pipe-2-1-gpipe.c's head says nothing of processes"; exit 1; }

# the head names the replicas and how to start them; the plan is one replica's
grep -q '^ \* replicas: 2, 1 per process: run as mpirun -np 2 ./train' gpt-2-2-2.c ||
    { echo "FAIL: the head of gpt-2-2-2.c does not say how to start it"; exit 1; }
grep -q '^ \* batch: *16 over 2 replicas (--data-parallel), each 8 in 4 micro-batch(es) of 2' \
    gpt-2-2-2.c || { echo "FAIL: the head of gpt-2-2-2.c does not split the batch"; exit 1; }

# against PyTorch (tests/train/ref_train.py, the MLP, 4 steps of 8
# micro-batches, SGD with momentum): 2 processes of 2 replicas each, within
# the tolerance of compare_train.py
/usr/bin/python3 "$here/ref_train.py" --out ref --model mlp --steps 4 --batch 32 --lr 0.1 \
    --momentum 0.9 --microbatches 8 >/dev/null
"$mpcc" ref/model.onnx -cpus 2 --data-parallel=4 --nodes=2 -batch 32 --microbatches=8 \
    --lr=0.1 --momentum=0.9 -o mlp-ref.c 2>mlp-ref.mpcc || { cat mlp-ref.mpcc; exit 1; }
build mlp-ref
mpirun -np 2 ./mlp-ref --data ref/x.npy --labels ref/y.npy --steps 4 --loss-log mlp-ref.txt \
    --save mlp-ref.safetensors 2>mlp-ref.log || { cat mlp-ref.log; exit 1; }
/usr/bin/python3 "$here/compare_train.py" ref mlp-ref.txt mlp-ref.safetensors >mlp-ref.cmp ||
    { cat mlp-ref.cmp; exit 1; }
tail -1 mlp-ref.cmp
echo "data_parallel: the MLP on 2 processes of 2 replicas against PyTorch: within tolerance"

# the same rows of a data file (more rows than a batch, so each replica
# reads rows of its own) on one process, 2 processes of 2 replicas and a
# pipeline across 2: the same losses and checkpoint, byte for byte, and the
# same evaluations (each process runs its stages, rank 0 adds the scores)
ev="--data ref/x.npy --labels ref/y.npy --steps 4 --eval-data ref/x.npy --eval-labels ref/y.npy --eval-every 2"
compile mlp-one ref/model.onnx -cpus 1 --data-parallel=1 -batch 32 --microbatches=8 --lr=0.1 \
    --momentum=0.9
./mlp-one $ev --loss-log mlp-one.txt --save mlp-one.safetensors 2>mlp-one.log ||
    { cat mlp-one.log; exit 1; }
cmp mlp-one.txt mlp-ref.txt && cmp mlp-one.safetensors mlp-ref.safetensors ||
    { echo "FAIL: the MLP on 2 processes of 2 replicas: not one process's numbers"; exit 1; }
compile mlp-pipe ref/model.onnx -cpus 1 --data-parallel=1 --nodes=2 -batch 32 --microbatches=8 \
    --lr=0.1 --momentum=0.9
mpirun -np 2 ./mlp-pipe $ev --loss-log mlp-pipe.txt --save mlp-pipe.safetensors 2>mlp-pipe.log ||
    { cat mlp-pipe.log; exit 1; }
cmp mlp-one.txt mlp-pipe.txt && cmp mlp-one.safetensors mlp-pipe.safetensors ||
    { echo "FAIL: the MLP as a pipeline across 2 processes: not one process's numbers"; exit 1; }
compile mlp-span ref/model.onnx -cpus 1 --data-parallel=2 --nodes=4 -batch 32 --microbatches=8 \
    --lr=0.1 --momentum=0.9
mpirun -np 4 ./mlp-span $ev --loss-log mlp-span.txt --save mlp-span.safetensors \
    --check-replicas 2 2>mlp-span.log || { cat mlp-span.log; exit 1; }
cmp mlp-one.txt mlp-span.txt && cmp mlp-one.safetensors mlp-span.safetensors ||
    { echo "FAIL: the MLP as 2 replicas each across 2 processes: not one process's numbers"; exit 1; }
grep -q 'replicas compared every 2 steps (--check-replicas): the 2 hold the same weights' \
    mlp-span.log || { cat mlp-span.log; exit 1; }
grep '^eval step' mlp-one.log >mlp-one.eval
for t in pipe span; do
    grep '^eval step' mlp-$t.log >mlp-$t.eval
    [ "$(wc -l <mlp-one.eval)" -eq 2 ] && cmp mlp-one.eval mlp-$t.eval ||
        { cat mlp-one.eval mlp-$t.eval; echo "FAIL: other evaluations across processes"; exit 1; }
done
echo "data_parallel: the MLP on a data file: 2 processes of 2 replicas, a pipeline across 2" \
    "and 2 replicas each across 2 of 4 processes give one process's losses and checkpoint," \
    "and evaluations: $(tail -1 mlp-pipe.eval)"

# --data-parallel=auto: every layout of 2 devices into replicas planned,
# the fastest predicted kept and the others named; it trains to the same bits
"$mpcc" "$samples/gpt.mp" -cpus 2 -batch 16 --microbatches=8 --optimizer=adamw \
    --schedule=gpipe --data-parallel=auto -o gpt-auto.c 2>gpt-auto.mpcc || { cat gpt-auto.mpcc; exit 1; }
/usr/bin/python3 - <<'EOF'
import re
line = next(l for l in open("gpt-auto.mpcc") if "--data-parallel=auto chose" in l)
chosen = int(re.search(r"chose (\d+) replica", line).group(1))
tried = {int(r): float(t) for r, t in re.findall(r"(\d+): ([0-9.e-]+) s", line)}
assert sorted(tried) == [1, 2], line
assert tried[chosen] == min(tried.values()), line
EOF
build gpt-auto
run 0 gpt-auto --steps 4 --save gpt-auto.safetensors
cmp gpt-1.safetensors gpt-auto.safetensors
echo "data_parallel: $(grep -o 'data-parallel=auto chose.*' gpt-auto.mpcc); the checkpoint of one" \
    "replica, byte for byte"

# --dump=partition: the grid of processes, replicas and devices, and the
# sums over the replicas, which the predicted step counts
"$mpcc" "$samples/gpt.mp" -cpus 2 -batch 16 --microbatches=8 --nodes=2 --dump=partition \
    >grid.txt 2>/dev/null
grep -q '^#   rank 1: replica 1, micro-batches 4 .. 7 of the step, on cpu:0 cpu:1$' grid.txt ||
    { cat grid.txt; echo "FAIL: --dump=partition shows no replica grid"; exit 1; }
grep -q '^# gradient sums over the replicas, after each stage.s last gradients: stage 0 ' grid.txt ||
    { cat grid.txt; exit 1; }
"$mpcc" "$samples/gpt.mp" -cpus 2 -batch 8 --microbatches=4 --data-parallel=1 \
    --dump=partition >one.txt 2>/dev/null
step() { sed -n 's/^# predicted: step \([0-9.]*\) ms.*/\1/p' "$1"; }
/usr/bin/python3 -c "import sys; sys.exit(not float('$(step grid.txt)') > float('$(step one.txt)'))" ||
    { echo "FAIL: 2 replicas predict $(step grid.txt) ms, one replica alone $(step one.txt) ms"; exit 1; }
echo "data_parallel: --dump=partition: the replica grid; the step predicted $(step grid.txt) ms" \
    "with the sums, $(step one.txt) ms for one replica alone"

# resuming across layouts: 1 process onto 2, and 2 onto 1
run 0 gpt-1 --steps 2 --save one-2.safetensors
run 2 gpt-2-1-2 --resume one-2.safetensors --steps 2 --save two-4.safetensors
cmp gpt-1.safetensors two-4.safetensors
run 2 gpt-pipe-2-1-gpipe --resume one-2.safetensors --steps 2 --save pipe-4.safetensors
cmp gpt-1.safetensors pipe-4.safetensors
run 2 gpt-2-1-2 --steps 2 --save two-2.safetensors
run 0 gpt-1 --resume two-2.safetensors --steps 2 --save one-4.safetensors
cmp gpt-1.safetensors one-4.safetensors
echo "data_parallel: gpt: resumed from 1 process onto 2 replicas and onto a pipeline across 2," \
    "and from 2 onto 1, byte for byte"

# --zero=1: each replica keeps and updates its share of the optimizer state
# (AdamW's two moments), the gradients reduce-scattered and the weights
# all-gathered; rank 0 gathers the state into the checkpoint. The same bits
# as one process: replicas R over K processes of -cpus N (zero bubble on 2
# devices each; 2 replicas in one process; 2 processes of 2), and resumed
# from one process and back; --dump=memory halves the state.
for layout in "2 2 1 gpipe" "4 4 2 zb" "2 1 2 1f1b" "4 2 2 zb"; do
    set -- $layout
    tag=gpt-zero-$1-$2-$3-$4
    compile $tag "$samples/gpt.mp" -cpus $3 --data-parallel=$1 --nodes=$2 --zero=1 \
        --schedule=$4 -batch 16 --microbatches=8 --optimizer=adamw
    grep -q 'mprt_shard(' $tag.c || { echo "FAIL: $tag.c updates no shard"; exit 1; }
    run $([ $2 = 1 ] && echo 0 || echo $2) $tag --steps 4 --loss-log $tag.txt \
        --save $tag.safetensors
    cmp gpt-1.txt $tag.txt && cmp gpt-1.safetensors $tag.safetensors ||
        { echo "FAIL: --zero=1, $1 replicas on $2 process(es) of $3 device(s): not one" \
            "process's bits"; exit 1; }
done
for layout in "2 gpt-zero-2-2-1-gpipe" "0 gpt-zero-2-1-2-1f1b" "2 gpt-zero-4-2-2-zb"; do
    set -- $layout
    run $1 $2 --resume one-2.safetensors --steps 2 --save zero-4.safetensors
    cmp gpt-1.safetensors zero-4.safetensors || { echo "FAIL: $2 resumed from 1 process"; exit 1; }
    run $1 $2 --steps 2 --save zero-2.safetensors
    run 0 gpt-1 --resume zero-2.safetensors --steps 2 --save one-4z.safetensors
    cmp gpt-1.safetensors one-4z.safetensors || { echo "FAIL: resumed from $2 on 1"; exit 1; }
done
state() {   # the optimizer state of cpu:0 in MB, from --dump=memory with FLAGS
    "$mpcc" "$samples/gpt.mp" -cpus 1 --data-parallel=2 --nodes=2 -batch 16 --microbatches=8 \
        --optimizer=adamw "$@" --dump=memory 2>/dev/null |
        sed -n '/^cpu:0/,/arena/s/^  optimizer state *\([0-9.]*\) MB.*/\1/p'
}
# with --clip-norm, the sums come whole to every process (their norms are
# then one process's), the update and state still each process's share
compile clip-zero "$samples/gpt.mp" -cpus 2 --data-parallel=2 --nodes=2 --zero=1 $clip \
    --schedule=zb --bucket-mb=0.01
grep -q 'mprt_shard(' clip-zero.c || { echo "FAIL: clip-zero.c updates no shard"; exit 1; }
run 2 clip-zero --steps 4 --loss-log clip-zero.txt --save clip-zero.safetensors
cmp clip-1.txt clip-zero.txt && cmp clip-1.safetensors clip-zero.safetensors ||
    { echo "FAIL: --zero=1 --clip-norm on 2 processes: not one process's bits"; exit 1; }
compile clip-zero-here "$samples/gpt.mp" -cpus 2 --data-parallel=4 --nodes=2 --zero=1 $clip \
    --schedule=1f1b --bucket-mb=0.01
run 2 clip-zero-here --steps 4 --loss-log clip-zero-here.txt --save clip-zero-here.safetensors
cmp clip-1.txt clip-zero-here.txt && cmp clip-1.safetensors clip-zero-here.safetensors ||
    { echo "FAIL: --zero=1 --clip-norm on 2 processes of 2 replicas: not one process's bits"; exit 1; }
whole=$(state --zero=0) part=$(state --zero=1)
/usr/bin/python3 -c "import sys; sys.exit(not (0.45 < $part / $whole < 0.55))" ||
    { echo "FAIL: --dump=memory: the state is $part MB with --zero=1, $whole MB without"; exit 1; }
echo "data_parallel: --zero=1 on 2 and 4 processes, 2 replicas in one process and 2 processes of 2, and" \
    "with --clip-norm: one process's losses and checkpoint (the" \
    "state gathered), byte for byte, resumed both ways; cpu:0's optimizer state $whole MB ->" \
    "$part MB"

# BatchNorm (convolutions and max pooling through oneDNN where mpcc was
# built with it, each replica in a process with primitives of its own):
# the same losses and weights; running statistics are each replica's.
# cnn_bn.mp over 2 processes and as 2 replicas of 2 devices in one;
# resnet.mp as 2 replicas in one process.
bn_check() {   # NAME MODEL LAYOUT-FLAGS -- COMMON FLAGS...
    local tag=$1 src=$2 layout=$3
    shift 3
    compile $tag-1 "$src" -cpus 1 --data-parallel=1 "$@"
    compile $tag-x "$src" $layout "$@"
    run 0 $tag-1 --steps 3 --loss-log $tag-1.txt --save $tag-1.safetensors
    case "$layout" in
    *--nodes=2*) run 2 $tag-x --steps 3 --loss-log $tag-x.txt --save $tag-x.safetensors ;;
    *) run 0 $tag-x --steps 3 --loss-log $tag-x.txt --save $tag-x.safetensors ;;
    esac
    cmp $tag-1.txt $tag-x.txt || { echo "FAIL: $tag: $layout: other losses"; exit 1; }
    TAG=$tag LAYOUT="$layout" /usr/bin/python3 - <<'EOF'
import os
from safetensors.numpy import load_file
tag = os.environ["TAG"]
a, b = load_file(tag + "-1.safetensors"), load_file(tag + "-x.safetensors")
assert a.keys() == b.keys()
stats = [k for k in a if k.endswith(("running_mean", "running_var"))]
assert stats, tag + " has no running statistics"
for k in a:
    if k not in stats and not k.endswith("num_batches_tracked"):
        assert (a[k] == b[k]).all(), k + " differs"
print("data_parallel: %s: %s: the losses and every weight and optimizer state of one "
      "replica, byte for byte (%d running statistics are replica 0's)"
      % (tag, os.environ["LAYOUT"], len(stats)))
EOF
}
bn_check bn "$samples/cnn_bn.mp" "-cpus 1 --data-parallel=2 --nodes=2" -batch 16 --microbatches=4
# a pipeline across processes: one replica, so the running statistics too
compile bnp "$samples/cnn_bn.mp" -cpus 1 --data-parallel=1 --nodes=2 -batch 16 --microbatches=4
run 2 bnp --steps 3 --loss-log bnp.txt --save bnp.safetensors
cmp bn-1.txt bnp.txt && cmp bn-1.safetensors bnp.safetensors ||
    { echo "FAIL: cnn_bn: a pipeline across 2 processes: another checkpoint"; exit 1; }
echo "data_parallel: cnn_bn: a pipeline across 2 processes: the losses and whole checkpoint" \
    "(running statistics too) of one process, byte for byte"
bn_check bnh "$samples/cnn_bn.mp" "-cpus 4 --data-parallel=2" -batch 16 --microbatches=4
bn_check resnet "$samples/resnet.mp" "-cpus 2 --data-parallel=2" -batch 8 --microbatches=4 --lr=0.05

# --check-replicas: the same weights pass (BatchNorm's running statistics,
# each replica's own, are not compared); a process started with another
# --lr drifts, and every process stops after the first step compared
run 2 bn-x --steps 4 --check-replicas 2
grep -q 'replicas compared every 2 steps (--check-replicas): the 2 hold the same weights' \
    bn-x.log || { cat bn-x.log; exit 1; }
if mpirun -np 1 ./gpt-2-1-2 --synthetic --steps 6 --check-replicas 2 : \
          -np 1 ./gpt-2-1-2 --synthetic --steps 6 --check-replicas 2 --lr 0.002 2>drift.log; then
    echo "FAIL: replicas trained with other learning rates passed --check-replicas"; exit 1
fi
grep -q 'error: after step 2 the weights of replica 1 (rank 1) differ from replica 0.s' \
    drift.log || { cat drift.log; exit 1; }
echo "data_parallel: --check-replicas: $(grep -m1 'after step' drift.log)"

# --profile across processes: every rank times its nodes, rank 0 writes its own
run 2 bn-x --steps 2 --profile bn-x.prof.json
/usr/bin/python3 -c "import json, sys; sys.exit(not any(n['calls'] > 0 for n in json.load(open('bn-x.prof.json'))['nodes']))" ||
    { echo "FAIL: --profile across 2 processes timed no node"; cat bn-x.log; exit 1; }
echo "data_parallel: --profile across 2 processes: rank 0 wrote its nodes' times"

# SIGTERM: every process finishes the same step; rank 0 saves; it resumes.
# Signalled, mpirun stops reading the processes' output and passes SIGTERM
# on a second later: a process logging every step would fill its pipe and
# block before it (so --log-every 50).
mpirun -np 2 ./gpt-2-1-2 --synthetic --seed 5 --steps 100000 --log-every 50 \
    --save stop.safetensors 2>stop.log &
launcher=$!
for i in $(seq 1 300); do
    grep -q '^step 100/' stop.log 2>/dev/null && break
    sleep 0.1
done
kill -TERM $launcher
wait $launcher || true   # the processes exit 0; mpirun, signalled itself, exits 1
grep -q 'stopped by SIGTERM after step [0-9]*' stop.log || { cat stop.log; exit 1; }
[ "$(grep -c 'stopped by' stop.log)" -eq 1 ] || { cat stop.log; echo "FAIL: more than one rank reported the stop"; exit 1; }
step=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\) .*/\1/p' stop.log)
saved=$(sed -n 's/.*; saved \([^ ]*\) (continue.*/\1/p' stop.log)
run 0 gpt-1 --steps "$step" --save straight.safetensors
cmp straight.safetensors "$saved"
echo "data_parallel: SIGTERM to mpirun: both processes stopped after step $step; rank 0 saved" \
    "$saved, the one-process run's checkpoint of step $step byte for byte"

# the wrong number of processes: one line
if mpirun -np 3 ./gpt-2-1-2 --synthetic --steps 1 2>wrong.log >/dev/null; then
    echo "FAIL: a 2-process trainer ran on 3"; exit 1
fi
grep -q 'error: compiled for 2 processes (mpcc --nodes=2) but started as 3; run mpirun -np 2 ./train' \
    wrong.log || { cat wrong.log; exit 1; }
if ./gpt-2-1-2 --synthetic --steps 1 2>alone.log; then
    echo "FAIL: a 2-process trainer ran alone"; exit 1
fi
grep -q 'but started as 1' alone.log || { cat alone.log; exit 1; }
echo "data_parallel: started on 3 processes, or alone: $(grep -m1 'compiled for' wrong.log)"

# a killed process: the others stop within 30 s, one line naming the step
mpirun -np 2 ./gpt-2-1-2 --synthetic --steps 100000 --log-every 50 2>kill.log &
launcher=$!
for i in $(seq 1 300); do
    grep -q '^step 50/' kill.log 2>/dev/null && break
    sleep 0.1
done
victim=$(pgrep -f 'gpt-2-1-2 --synthetic --steps 100000' | grep -v "^$launcher\$" | tail -1)
kill -KILL "$victim"
for i in $(seq 1 300); do
    kill -0 $launcher 2>/dev/null || break
    sleep 0.1
done
if kill -0 $launcher 2>/dev/null; then
    kill -KILL $launcher; pkill -KILL -f 'gpt-2-1-2 --synthetic' || true
    echo "FAIL: 30 s after a process was killed, the run goes on"; exit 1
fi
if wait $launcher; then echo "FAIL: mpirun exited 0 after a process was killed"; exit 1; fi
grep -q 'exited on signal 9' kill.log || { cat kill.log; exit 1; }
grep -Eq '^train: rank [01]: stopped by mpirun during step [0-9]+ \(when a process fails' \
    kill.log || { cat kill.log; echo "FAIL: no line names the step"; exit 1; }
echo "data_parallel: kill -9 of one process: mpirun stopped the run in $i tenths of a second:" \
    "$(grep -m1 'exited on signal 9' kill.log | sed 's/^ *//'); $(grep -m1 'during step' kill.log)"

# what this version does not build: one line each, naming the way out
refuse() {   # WHAT FLAGS...
    what=$1
    shift
    if "$mpcc" "$samples/mlp.mp" "$@" -o refused.c 2>refused.err; then
        echo "FAIL: mpcc $*: compiled"; exit 1
    fi
    grep -q -e "$what" refused.err || { cat refused.err; exit 1; }
    [ "$(wc -l <refused.err)" -eq 1 ] || { cat refused.err; echo "FAIL: more than one line"; exit 1; }
}
refuse 'give a divisor or a multiple of 2' -cpus 1 -batch 12 --data-parallel=3 --nodes=2
refuse '--zero=1 shards the optimizer state over replicas: give --data-parallel=R' -cpus 2 \
    -batch 8 --zero=1
refuse 'that each hold whole stages' -cpus 1 -batch 8 --data-parallel=2 --nodes=4 --zero=1
refuse 'is built for CPU devices (-cpus N); on GPUs give a replica per process' -gpus 2 \
    -batch 8 --data-parallel=2 --zero=1
refuse 'replicas of CPU and CUDA devices mixed are not built; give -cpus N or -gpus N' \
    --devices=cpu,cuda:0 -batch 8 --data-parallel=2
refuse 'or give -gpus 2 (to pick GPUs, set CUDA_VISIBLE_DEVICES)' --devices=cuda:1,cuda:3 \
    -batch 8 --data-parallel=2
refuse 'need -cpus N with N a multiple of 2' -cpus 3 -batch 8 --data-parallel=2
refuse 'replicas in each process must be a power of two' -cpus 3 -batch 12 --microbatches=6 \
    --data-parallel=6 --nodes=2
refuse 'each replica needs a power of two of them' -cpus 1 -batch 12 --microbatches=6 \
    --data-parallel=2 --nodes=2
refuse 'does not split over 2 replicas' -cpus 1 -batch 7 --data-parallel=2 --nodes=2
# the grid of GPUs: 2 replicas of 2 GPUs in each of 2 processes
"$mpcc" "$samples/gpt.mp" -gpus 4 --data-parallel=4 --nodes=2 -batch 16 --microbatches=8 \
    --dump=partition >gpu-grid.txt 2>gpu-grid.err || { cat gpu-grid.err; exit 1; }
grep -q '^#   rank 1: replica 3, .* on cuda:2 cuda:3$' gpu-grid.txt || { cat gpu-grid.txt; exit 1; }
echo "data_parallel: the layouts not built are refused in one line each; --dump draws the grid"
