#!/usr/bin/env bash
# Runs sift's CUDA backend without a GPU: builds libsift with backends/cuda and the kernels of
# cuda/ compiled for the CPU emulator (cuda/emu/emu.h), and runs the project's tests against it
# (the "cuda" backend of those tests is then the emulator). For checking kernel logic, tails,
# races between pipeline stages and warp-collective misuse where no GPU is at hand; speed means
# nothing here.
#
#   cuda/emu/run-tests.sh [ops|model|cache|badinput|models|session|offload|all]     (default: all)
#
# ops, model, cache: the conformance registry's suites (tests/cases_*.c, built into one
# sift-conformance as tests/meson.build builds it) run with --backend cuda, the emulator under test
# against the CPU reference; model and cache also run cuda/emu/extra_model.c and extra_cache.c, the
# emulator's own cases (reported as the registry's are, through tests/report.h). badinput: tests/badinput.c. models: whole models across
# backends layer by layer (tests/model_backends.c on ../shared's stories260K and small generated
# ones; slow, not part of all); session: tests/session_test.c (paged pool, sequences, rewind,
# Selection Cache, sparse prefill, extrapolation, policies) on stories260K and a generated GQA
# model (slow, not part of all); offload: tests/offload_test.c (KV offload equals resident, bit
# for bit) on stories260K and a generated D = 128 model (not part of all).
#
# Environment: SIFT_CONFORMANCE_MAX_N (default 255 here), SIFT_CONFORMANCE_MAX_ROWS (largest paged
# cache, default 7000 here: 70000 rows take hours), SIFT_EMU_SEED (thread order),
# SIFT_EMU_CPASYNC=late|early, SIFT_EMU_SMS (multiprocessors, default 4), SIFT_EMU_SMEM_PER_SM
# (233472 = H100/H200; 102400 = sm_86/89, 2-stage pipeline), SIFT_EMU_BUILD (build folder).
#
# Meson runs `all` as the test suite cuda-emu, which a plain `meson test` leaves out
# (tests/meson.build). Exit status: 0 passed, 1 a failure, 77 (skipped) where the emulator cannot
# be built here: no C++ compiler, or no CUDA runtime headers (nvcc's, or /usr/local/cuda's).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${SIFT_EMU_BUILD:-/tmp/sift-emu-build}
what=${1:-all}
mkdir -p "$out/obj"
cuda_inc=
if command -v nvcc >/dev/null; then
  cuda_inc=$(cd "$out" && nvcc --dryrun -v -c probe.cu 2>&1 | sed -n 's/^#\$ INCLUDES="-I\([^"]*\)".*/\1/p' | head -1 || true)
fi
[ -n "$cuda_inc" ] || cuda_inc=/usr/local/cuda/include
if ! command -v g++ >/dev/null || [ ! -f "$cuda_inc/cuda_runtime_api.h" ]; then
  echo "cuda-emu: skipped: the emulator needs g++ and the CUDA runtime headers (cuda_runtime_api.h, not in $cuda_inc)"
  exit 77
fi
cflags=(-std=c11 -O2 -g -Wall -Wextra -D_POSIX_C_SOURCE=200809L -DSIFT_HAVE_CUDA "-I$root/include" "-I$root/engine"
        "-I$root" -isystem "$cuda_inc")
cxxflags=(-std=c++17 -O2 -g -Wall -Wextra -Wno-unknown-pragmas -DSIFT_CUDA_EMU "-I$root/cuda" "-I$root/include" -isystem "$cuda_inc")
objs=()
for f in "$root"/engine/*.c "$root"/backends/cpu/*.c "$root"/backends/cuda/cuda_backend.c; do
  o="$out/obj/$(basename "${f%.c}").o"; cc "${cflags[@]}" -c "$f" -o "$o"; objs+=("$o")
done
for f in "$root"/cuda/*.cu "$root"/cuda/emu/emu_runtime.cpp; do
  o="$out/obj/$(basename "$f").o"; g++ "${cxxflags[@]}" -x c++ -c "$f" -o "$o" & objs+=("$o")
done
wait
rm -f "$out/libsift-emu.a" && ar rcs "$out/libsift-emu.a" "${objs[@]}"
# The tests as tests/meson.build builds them: the conformance registry in one binary, the others alone.
conf=()
for f in conformance cases_ops cases_model cases_cache cases_perf cases_attn testutil; do
  cc "${cflags[@]}" -I"$root/tests" -c "$root/tests/$f.c" -o "$out/obj/conf-$f.o"; conf+=("$out/obj/conf-$f.o")
done
g++ -o "$out/sift-conformance" "${conf[@]}" "$out/libsift-emu.a" -lm
for t in "$root/tests/badinput.c" "$root/cuda/emu/extra_cache.c" "$root/cuda/emu/extra_model.c" \
         "$root/tests/model_backends.c" "$root/tests/model_test.c" "$root/tests/session_test.c" "$root/tests/offload_test.c" \
         "$root/tools/gen_model.c"; do
  n=$(basename "${t%.c}")
  extra=()
  extra=("$out/obj/conf-testutil.o") # the reporting (tests/report.h)
  cc "${cflags[@]}" -I"$root/tests" -c "$t" -o "$out/obj/test-$n.o"
  g++ -o "$out/$n" "$out/obj/test-$n.o" "${extra[@]}" "$out/libsift-emu.a" -lm
done
export SIFT_CONFORMANCE_MAX_N=${SIFT_CONFORMANCE_MAX_N:-255}
export SIFT_CONFORMANCE_MAX_ROWS=${SIFT_CONFORMANCE_MAX_ROWS:-7000}
export SIFT_CUDA_SELECT_WARM=${SIFT_CUDA_SELECT_WARM:-1} # the warm top-k, off by default, as the conformance runs it
rc=0
if [ "$what" = all ] || [ "$what" = badinput ]; then
  "$out/badinput" > "$out/badinput.txt" 2>&1 || rc=1
  echo "badinput: $(tail -1 "$out/badinput.txt")"
fi
for suite in ops model cache attn; do
  [ "$what" = all ] || [ "$what" = $suite ] || continue
  SIFT_EXPECT_BACKENDS=cpu,cuda "$out/sift-conformance" --backend cuda --suite $suite > "$out/conformance-$suite.txt" 2>&1 || rc=1
  grep -E "^backend|FAIL|not supported|summary" "$out/conformance-$suite.txt" | head -60
  if [ $suite = model ] || [ $suite = cache ]; then
    "$out/extra_$suite" > "$out/extra_$suite.txt" 2>&1 || rc=1
    grep -E "FAIL|^summary" "$out/extra_$suite.txt"
  fi
done
if [ "$what" = models ]; then
  models=("$root/../shared/models/stories260K.gguf")
  for m in "tiny f32" "tiny q4_0" "gqa q8_0" "d128 f16" "qwen2 q4_0" "qwen2 f32" "tiny q4_k_m" "gqa q5_k"; do
    set -- $m
    "$out/gen_model" -o "$out/$1-$2.gguf" --preset "$1" --type "$2" > /dev/null && models+=("$out/$1-$2.gguf")
  done
  "$out/model_backends" "${models[@]}" > "$out/model_backends.txt" 2>&1 || rc=1
  grep -E "cuda|FAIL|summary" "$out/model_backends.txt"
  "$out/model_test" "$root/../shared" > "$out/model_test.txt" 2>&1 || rc=1
  grep -E "^cuda|FAIL|summary|skip" "$out/model_test.txt" | head -40
fi
if [ "$what" = session ]; then
  "$out/gen_model" -o "$out/gqa-q8_0.gguf" --preset gqa --type q8_0 > /dev/null
  "$out/session_test" "$root/../shared/models/stories260K.gguf" "$out/gqa-q8_0.gguf" > "$out/session_test.txt" 2>&1 || rc=1
  grep -E "cuda.*FAIL|FAIL|summary|skipped" "$out/session_test.txt" | head -40
fi
if [ "$what" = offload ]; then
  "$out/gen_model" -o "$out/d128-f16.gguf" --preset d128 --type f16 > /dev/null
  SIFT_TEST_BACKENDS=cuda "$out/offload_test" "$root/../shared/models/stories260K.gguf" "$out/d128-f16.gguf" \
    > "$out/offload_test.txt" 2>&1 || rc=1
  grep -E "FAIL|summary|skipped" "$out/offload_test.txt" | head -40
fi
exit $rc
