#!/bin/sh
# Runs two command lines and requires identical stdout and exit status 0.
# Usage: same_output.sh "CMD1" "CMD2"
set -eu
a=$(mktemp) b=$(mktemp)
trap 'rm -f "$a" "$b"' EXIT
sh -c "$1" >"$a"
sh -c "$2" >"$b"
if ! cmp -s "$a" "$b"; then
    echo "FAIL: outputs differ"; diff "$a" "$b" | head -20; exit 1
fi
echo "same output ($(wc -l <"$a") lines)"
