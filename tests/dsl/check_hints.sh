#!/bin/sh
# The placement hints of samples/late_fusion.mp reach the right nodes:
# in --dump=ir every node of the first branch (resnet_1) and its input
# slice is @cpu:0, every node of the second branch (resnet_2), its slice,
# the Concat and the classifier (fc) @cpu:1, and the loss has no hint.
# Usage: check_hints.sh MPCC SAMPLES_DIR
set -eu
"$1" "$2/late_fusion.mp" -batch 2 --dump=ir | awk '
    /^node/ {
        name = $3; hint = ($NF ~ /^@/) ? $NF : "none"
        want = "?"
        if (name ~ /^.resnet_1[.\/]/ || name == "\x27Slice_0\x27") want = "@cpu:0"
        else if (name ~ /^.resnet_2[.\/]/ || name ~ /^.Slice_/ || name ~ /^.Concat_/ || name ~ /^.fc\//) want = "@cpu:1"
        else if (name ~ /^.SoftmaxCrossEntropyLoss_/) want = "none"
        n++
        if (hint != want) { print "check_hints: node " name " has " hint ", want " want; bad++ }
    }
    END {
        if (n < 30) { print "check_hints: only " n " nodes"; exit 1 }
        if (bad) exit 1
        print "check_hints: " n " nodes, hints as written"
    }'
