#!/bin/sh
# One bad DSL program: mpcc must exit with status 1 and print exactly
# bad/NAME.expect on stderr (file:line:col, message, source line, caret),
# nothing else (so no sanitizer report either). The command line is
# "NAME.mp -batch 2 --dump=ir", or bad/NAME.args when that file exists.
# Usage: expect.sh MPCC NAME        (run from anywhere)
# To see what mpcc prints now: expect.sh MPCC NAME --show
set -u
mpcc=$1 name=$2
cd "$(dirname "$0")/bad"
args="-batch 2 --dump=ir"
[ -f "$name.args" ] && args=$(cat "$name.args")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2086
"$mpcc" "$name.mp" $args >/dev/null 2>"$out"
rc=$?
if [ "${3:-}" = --show ]; then
    cat "$out"
    exit 0
fi
if [ $rc -ne 1 ]; then
    echo "expect.sh: $name.mp: exit status $rc, want 1; stderr:"
    cat "$out"
    exit 1
fi
if ! diff -u "$name.expect" "$out"; then
    echo "expect.sh: $name.mp: the diagnostics differ from $name.expect (above)"
    exit 1
fi
echo "expect.sh: $name.mp: ok"
