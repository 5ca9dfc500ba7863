#!/usr/bin/env bash
# SIFT_TEST_BACKENDS (tests/backend_filter.h) through two test programs: a backend left out is
# skipped with the message, one listed runs, a name that is no backend stops the program. The
# lines read are tests/report.h's: a check's ends with its backend and ok, a note's (a skip) has
# no case name before the backend.
# usage: backend_filter_test.sh SIFT_BADINPUT SIFT_CONFORMANCE
set -u
BADINPUT=$1 CONFORMANCE=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
check() { checks=$((checks + 1)); if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

SIFT_TEST_BACKENDS=cpu "$BADINPUT" >"$T/cpu" 2>&1
rc=$?
check "badinput, cpu only: exit 0" '[ $rc -eq 0 ]'
check "badinput, cpu only: vulkan skipped" 'grep -qE "^ +vulkan +skipped: not in SIFT_TEST_BACKENDS" "$T/cpu"'
check "badinput, cpu only: cuda skipped" 'grep -qE "^ +cuda +skipped: not in SIFT_TEST_BACKENDS" "$T/cpu"'
check "badinput, cpu only: the cpu checks ran" '[ "$(grep -cE " cpu +ok$" "$T/cpu")" -ge 10 ]'
check "badinput, cpu only: the summary names cpu alone, 4 cases" 'grep -qE "^summary: suite badinput, backend cpu: 4 cases" "$T/cpu"'
SIFT_TEST_BACKENDS=cuda "$BADINPUT" >"$T/cuda" 2>&1
check "badinput, cuda only: cpu skipped" 'grep -qE "^ +cpu +skipped: not in SIFT_TEST_BACKENDS" "$T/cuda"'
check "badinput, cuda only: no cpu check ran" '! grep -qE " cpu +ok$" "$T/cuda"'
check "badinput, cuda only: no skipped backend in the summary" '! grep -qE "^summary: .*backend [^:]*(api|cpu)" "$T/cuda"'
SIFT_TEST_BACKENDS=cpu,vulkna "$BADINPUT" >"$T/typo" 2>&1
rc=$?
check "badinput, a misspelt backend: exit 2" '[ $rc -eq 2 ]'
check "badinput, a misspelt backend: the message" 'grep -qF "'"'"'vulkna'"'"' is not a backend (cpu, vulkan, cuda)" "$T/typo"'
SIFT_TEST_BACKENDS=cpu "$CONFORMANCE" --backend vulkan --suite ops >"$T/conf" 2>&1
rc=$?
check "conformance --backend vulkan, cpu only: skipped (77)" '[ $rc -eq 77 ] && grep -q "skipped: not in SIFT_TEST_BACKENDS" "$T/conf"'
echo "$((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
