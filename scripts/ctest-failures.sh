#!/usr/bin/env bash
# After a failed ctest run: prints, last, what each failed test said where it failed (gtest's
# "Failure" lines and the lines after them, joined, at most 600 characters per test), read from
# ctest's own log (<build>/Testing/Temporary/LastTest.log). A CI log that keeps only its tail
# then still names the assertion and its message. Usage: scripts/ctest-failures.sh [build-dir]
set -uo pipefail
build=${1:-build}
log="$build/Testing/Temporary/LastTest.log"
failed="$build/Testing/Temporary/LastTestsFailed.log"
[ -f "$log" ] && [ -f "$failed" ] || exit 0
echo "== where the failed tests failed (from $log)"
while IFS=: read -r _ name; do
  [ -n "$name" ] || continue
  awk -v name="$name" '
    $0 ~ "^[0-9]+/[0-9]+ Test: " && substr($0, index($0, ": ") + 2) == name { inside = 1; next }
    inside && /^<end of output>/ { exit }
    inside && (/Failure$/ || /^[^ ]*:[0-9]+: Failure/) { keep = 6 }
    inside && keep > 0 { printf "%s | ", $0; keep--; next }
    inside && /^\[  FAILED  \]/ { printf "%s | ", $0 }
  ' "$log" | cut -c1-600 | awk -v name="$name" '{ print name ": " $0 }'  # (names may hold '/')
  echo
done < "$failed"
