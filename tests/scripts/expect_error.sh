#!/bin/sh
# Runs a command that must fail the way a user error does in mpcc:
# exit status 1, exactly one line on stderr, containing EXPECTED, and no
# sanitizer report. Usage: expect_error.sh EXPECTED -- command args...
set -u
expected=$1
shift
[ "$1" = "--" ] && shift
err=$(mktemp)
"$@" >/dev/null 2>"$err"
rc=$?
lines=$(wc -l <"$err")
status=0
if [ "$rc" -ne 1 ]; then
    echo "FAIL: exit status $rc, expected 1"; status=1
fi
if [ "$lines" -ne 1 ]; then
    echo "FAIL: $lines lines on stderr, expected exactly 1"; status=1
fi
if ! grep -qF -- "$expected" "$err"; then
    echo "FAIL: stderr does not contain: $expected"; status=1
fi
if grep -qE 'Sanitizer|runtime error:|internal error' "$err"; then
    echo "FAIL: sanitizer report or internal error"; status=1
fi
echo "--- stderr:"; cat "$err"
rm -f "$err"
exit $status
