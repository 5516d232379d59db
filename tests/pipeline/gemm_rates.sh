#!/bin/sh
# CPU devices price GEMMs at the rates of the GEMM the trainer will call: a
# profile file's matrix_flops, gemm_bandwidth and call_overhead are oneDNN's
# (the default, --cpu-kernels=onednn), its blas_* ones OpenBLAS's
# (--cpu-kernels=builtin). The MLP sample's step (batch 4096: its
# products are compute-bound) is predicted longer under builtin when
# OpenBLAS is the slower; the same either way from a file without blas_*
# (it means one GEMM); and the calibration of this machine writes both sets.
# Usage: gemm_rates.sh MPCC SAMPLE.mp WORKDIR
set -eu
mpcc=$1 model=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
step() {   # the predicted step in seconds, from the compile report
    "$mpcc" "$model" -cpus 1 -batch 4096 --dump=partition "$@" 2>&1 >/dev/null |
        sed -n 's/.*predicted step \([0-9.e+-]*\) s.*/\1/p'
}
less() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }' || { echo "FAIL: not $1 < $2"; exit 1; }; }
common='flops = 1e10\nbandwidth = 1e10\ncall_overhead = 1e-7\ngemm_bandwidth = 1e11\n'
printf "${common}matrix_flops = 1e11\nblas_matrix_flops = 2e10\nblas_call_overhead = 1e-7\n" \
    >"$work/two.txt"
printf "${common}matrix_flops = 1e11\n" >"$work/one.txt"
o=$(step --profile="$work/two.txt" --cpu-kernels=onednn)
b=$(step --profile="$work/two.txt" --cpu-kernels=builtin)
o1=$(step --profile="$work/one.txt" --cpu-kernels=onednn)
b1=$(step --profile="$work/one.txt" --cpu-kernels=builtin)
echo "two GEMMs: onednn $o s, builtin $b s; one GEMM: onednn $o1 s, builtin $b1 s"
[ -n "$o" ] && [ -n "$b" ] || { echo "FAIL: no predicted step"; exit 1; }
less "$o" "$b"
[ "$o" = "$o1" ] || { echo "FAIL: blas_* changed oneDNN's price"; exit 1; }
[ "$o1" = "$b1" ] || { echo "FAIL: a file without blas_* priced two GEMMs"; exit 1; }
# the calibration: every key of both GEMMs, positive
env -u MPCC_CPU_PROFILE XDG_CACHE_HOME="$work/cache" "$mpcc" "$model" -cpus 1 -batch 64 \
    -o "$work/t.c" 2>/dev/null
f=$(ls "$work"/cache/mpcc/cpu-*.profile)
for k in matrix_flops gemm_bandwidth call_overhead blas_matrix_flops blas_gemm_bandwidth \
         blas_call_overhead; do
    v=$(sed -n "s/^$k = //p" "$f")
    awk -v v="$v" 'BEGIN { exit !(v > 0) }' || { echo "FAIL: $k = '$v' in $f"; exit 1; }
done
grep '^matrix_flops\|^blas_matrix_flops' "$f"
echo "gemm_rates: ok"
