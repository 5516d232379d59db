#!/bin/sh
# Compiles the compiler's sources as CMake lists them (BUILD_DIR/
# fuzz_sources.txt) once, with clang and the fuzz targets' sanitizers and
# coverage, into OUT_DIR/fuzz_core.a, two files at a time: compile.sh links
# the targets against it when FUZZ_CORE names it, instead of compiling the
# whole compiler again for each (CTest's fuzz.build_core).
# Usage: tests/fuzz/compile_core.sh BUILD_DIR OUT_DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
mkdir -p "$2/fuzz_core"
objs=$(cd "$2/fuzz_core" && pwd)
list=$build/fuzz_sources.txt
[ -f "$list" ] || { echo "$0: $list is missing: configure and build first" >&2; exit 1; }
rm -f "$objs"/*.o "$objs/../fuzz_core.a"
# each source to NAME_N.o (N: its line, so that equal names do not meet)
awk '{ n = split($0, p, "/"); sub(/\.c$/, "", p[n]); print $0 "\t" p[n] "_" NR ".o" }' "$list" |
    ROOT=$root BUILD=$build OBJS=$objs xargs -P 2 -L 1 sh -c '
        clang -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -O1 -g \
            -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
            -I"$ROOT/compiler" -I"$ROOT/runtime" -I"$ROOT/compiler/front/dsl" -I"$BUILD/dsl" \
            -I"$BUILD/onnxpb" $(pkg-config --cflags libprotobuf-c) -c "$0" -o "$OBJS/$1"'
ar rcs "$objs/../fuzz_core.a" "$objs"/*.o
echo "built $(cd "$objs/.." && pwd)/fuzz_core.a"
