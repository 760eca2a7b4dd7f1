#!/usr/bin/env bash
# Passes `go test -v` output through and ends with one line counting the
# tests: "N passed, N failed, N skipped". Exits non-zero if any failed or
# if go test itself failed (read from PIPESTATUS by the caller's shell
# through the FAIL lines).
set -uo pipefail
pass=0 fail=0 skip=0 failed_pkg=0
while IFS= read -r line; do
	printf '%s\n' "$line"
	case "$line" in
	"--- PASS"*) pass=$((pass + 1)) ;;
	"--- FAIL"*) fail=$((fail + 1)) ;;
	"--- SKIP"*) skip=$((skip + 1)) ;;
	"FAIL"*) failed_pkg=1 ;;
	esac
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$failed_pkg" -eq 0 ]
