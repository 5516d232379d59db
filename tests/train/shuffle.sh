#!/bin/sh
# --shuffle, against PyTorch. ref_train.py --rows N --shuffle-seed S trains
# PyTorch on N rows in the order docs/trainer.md defines for --shuffle
# --seed S (epoch after epoch, batches crossing epoch ends); the trainer runs
# with TRAIN_ARGS (--shuffle --seed S) for STEPS steps. Checks:
#  - every step's loss and every final tensor match PyTorch's (run.sh), so
#    the trainer read the same rows in the same steps;
#  - the same seed gives the same checkpoint, byte for byte;
#  - a run stopped after SPLIT steps (mid-epoch) and resumed gives the same
#    checkpoint as the uninterrupted run;
#  - another seed, and file order (no --shuffle), give other checkpoints.
# Usage: shuffle.sh MPCC WORKDIR "REF_ARGS" "MPCC_ARGS" "TRAIN_ARGS" STEPS SPLIT
set -eu
mpcc=$1 work=$2 ref_args=$3 mpcc_args=$4 train_args=$5 steps=$6 split=$7
here=$(cd "$(dirname "$0")" && pwd)
"$here/run.sh" "$mpcc" "$work" "$ref_args --steps $steps" "$mpcc_args" "$train_args --steps $steps"
cd "$work"
t() { ./train --data x.npy --labels y.npy $train_args "$@" 2>/dev/null; }

echo "--- the same seed, the same checkpoint"
t --steps "$steps" --save again.safetensors
cmp ckpt.safetensors again.safetensors

echo "--- stopped after step $split and resumed: the same checkpoint"
t --steps "$split" --save part.safetensors
t --steps $((steps - split)) --resume part.safetensors --save resumed.safetensors
cmp ckpt.safetensors resumed.safetensors

echo "--- another seed, and file order, train differently"
t --steps "$steps" --seed 1000003 --save seed2.safetensors
./train --data x.npy --labels y.npy --steps "$steps" --save fileorder.safetensors 2>/dev/null
for f in seed2 fileorder; do
    if cmp -s ckpt.safetensors $f.safetensors; then
        echo "FAIL: $f.safetensors equals the shuffled run's checkpoint"
        exit 1
    fi
done
echo "shuffle: all passed"
