#!/bin/sh
# Outputs named /dev/null (or any device or pipe) are
# written in place: mpcc's -o, --trace and the trainer's --save, --trace,
# --plot and --profile. Written through PATH.tmp and renamed, as regular
# files are, they would replace the device (as root) with a regular file.
# Usage: dev_null.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work"
device() {   # WHAT: /dev/null must still be the character device, with nothing beside it
    [ -c /dev/null ] || { echo "FAIL: $1 left /dev/null a $(stat -c %F /dev/null)"; exit 1; }
    for f in /dev/null.tmp /dev/null.weights.safetensors; do
        [ ! -e $f ] || { echo "FAIL: $1 wrote $f"; exit 1; }
    done
}
device "the machine before the test"
"$mpcc" "$samples/mlp.mp" -cpus 2 -batch 16 --microbatches=4 --trace=/dev/null -o /dev/null
device "mpcc -o /dev/null --trace=/dev/null"
"$mpcc" "$samples/mlp.mp" -cpus 2 -batch 16 --microbatches=4 -o train.c 2>mpcc.log
build=$(sed -n 's/^ \* build: *//p' train.c)
$build
./train --synthetic --steps 2 --save /dev/null --trace /dev/null --plot /dev/null \
    --profile /dev/null 2>train.log || { cat train.log; exit 1; }
grep -q '^saved /dev/null$' train.log || { cat train.log; exit 1; }
device "the trainer's --save, --trace, --plot and --profile /dev/null"
echo "dev_null: mpcc and the trainer wrote their outputs to /dev/null in place; it is still" \
    "the character device"
