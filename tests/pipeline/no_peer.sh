#!/bin/sh
# A profile file's peer_access = 0: copies between two GPUs are priced as
# staged through host memory (two host-link latencies, the host link's
# bandwidth), so the plan is the one of a peer link with those figures, and
# not the one of the default peer link.
# Usage: no_peer.sh MPCC MODEL WORKDIR
set -u
mpcc=$1 model=$2 work=$3
mkdir -p "$work"
host='host_bandwidth = 1e9
host_latency = 1e-5'
printf '%s\npeer_access = 0\n' "$host" >"$work/staged.profile"
printf '%s\npeer_bandwidth = 1e9\npeer_latency = 2e-5\n' "$host" >"$work/as_staged.profile"
printf '%s\n' "$host" >"$work/peer.profile"
plan() {
    "$mpcc" "$model" -batch 8 -gpus 2 --schedule=1f1b --microbatches=4 \
        --profile="$work/$1.profile" --dump=schedule 2>/dev/null
}
status=0
plan staged >"$work/staged.txt" && plan as_staged >"$work/as_staged.txt" &&
    plan peer >"$work/peer.txt" || { echo "FAIL: mpcc failed"; exit 1; }
grep -m1 predicted "$work/staged.txt"
grep -m1 predicted "$work/peer.txt"
if ! cmp -s "$work/staged.txt" "$work/as_staged.txt"; then
    echo "FAIL: peer_access = 0 is not priced as two host-link hops"
    diff "$work/staged.txt" "$work/as_staged.txt" | head -5
    status=1
fi
if cmp -s "$work/staged.txt" "$work/peer.txt"; then
    echo "FAIL: peer_access = 0 changes nothing"; status=1
fi
printf 'peer_access = 2\n' >"$work/bad.profile"
"$(dirname "$0")/../scripts/expect_error.sh" "line 1: peer_access is 1 (the default) or 0" -- \
    "$mpcc" "$model" -batch 8 -gpus 2 --profile="$work/bad.profile" --dump=schedule >/dev/null ||
    { echo "FAIL: a bad peer_access is not a one-line error"; status=1; }
exit $status
