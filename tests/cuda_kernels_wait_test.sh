#!/usr/bin/env bash
# Every CUDA kernel must begin with grid_dep_enter() (cuda/common.cuh): by default (SIFT_CUDA_PDL=0 turns it off) launches
# are programmatic on sm_90 and later, so a kernel that reads or writes memory before that wait races the kernel before
# it, on the GPU only, and nowhere the emulator or the CPU tests can see. This reads the sources:
# the line after each __global__ function's opening brace.
# usage: cuda_kernels_wait_test.sh CUDA_SOURCE_DIR
set -u
dir=${1:?usage: $0 CUDA_SOURCE_DIR}
kernels=0 bad=0
for f in "$dir"/*.cu "$dir"/*.cuh; do
  [ -f "$f" ] || continue
  out=$(awk '
    /^[[:space:]]*\/\// { next }
    /__global__/ { want = 1; name = $0; line = FNR; next_is_body = 0 }
    want && /^\{[[:space:]]*$/ { want = 0; next_is_body = 1; next }
    next_is_body {
      n++
      if ($0 !~ /^[[:space:]]*grid_dep_enter\(\);[[:space:]]*$/) { printf "BAD %s:%d: %s\n", FILENAME, line, name; b++ }
      next_is_body = 0
    }
    END { printf "COUNT %d %d\n", n, b }' "$f")
  echo "$out" | grep '^BAD' | sed 's/^BAD /kernel without grid_dep_enter() first: /'
  set -- $(echo "$out" | grep '^COUNT')
  kernels=$((kernels + $2)) bad=$((bad + $3))
done
echo "$kernels CUDA kernels checked, $bad without grid_dep_enter() as their first statement"
[ "$kernels" -gt 0 ] || { echo "no kernels found under $dir"; exit 1; }
[ "$bad" -eq 0 ]
