#!/bin/sh
# The cost model and --cuda-graph: on GPUs a step captured as one graph
# pays graph_overhead a kernel instead of the launch overhead, so the
# predicted step of a launch-bound model (the MLP sample at batch 8) is
# shorter than with --cuda-graph=off; a step that is not captured
# (--clip-norm, whose factor the host computes inside the step) is priced
# as off; a profile file's graph_overhead is what the captured step pays.
# Usage: cuda_graph.sh MPCC SAMPLE.mp WORKDIR
set -eu
mpcc=$1 model=$2 work=$3
mkdir -p "$work"
step() {   # the predicted step in seconds, from the compile report
    "$mpcc" "$model" -gpus 1 -batch 8 --dump=partition "$@" 2>&1 >/dev/null |
        sed -n 's/.*predicted step \([0-9.e+-]*\) s.*/\1/p'
}
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }' || { echo "FAIL: not $1 < $2"; exit 1; }; }
on=$(step) off=$(step --cuda-graph=off)
clip=$(step --clip-norm=1) clip_off=$(step --clip-norm=1 --cuda-graph=off)
echo "graph: $on s, off: $off s; --clip-norm: $clip s, off: $clip_off s"
less "$on" "$off"
[ -n "$clip" ] && [ "$clip" = "$clip_off" ] || { echo "FAIL: a step with --clip-norm priced as captured"; exit 1; }
printf 'flops = 1e13\nbandwidth = 1e12\noverhead = 5e-6\ngraph_overhead = 5e-6\n' >"$work/same.txt"
s=$(step --profile="$work/same.txt") soff=$(step --profile="$work/same.txt" --cuda-graph=off)
echo "profile, graph_overhead = overhead: $s s and $soff s"
[ -n "$s" ] && [ "$s" = "$soff" ] || { echo "FAIL: graph_overhead is not what the graph pays"; exit 1; }
echo "cuda_graph: ok"
