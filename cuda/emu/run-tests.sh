#!/usr/bin/env bash
# Runs sift's CUDA backend without a GPU: builds libsift with backends/cuda and the kernels of
# cuda/ compiled for the CPU emulator (cuda/emu/emu.h), and runs the project's tests against it
# (the "cuda" backend of those tests is then the emulator). For checking kernel logic, tails,
# races between pipeline stages and warp-collective misuse where no GPU is at hand; speed means
# nothing here.
#
#   cuda/emu/run-tests.sh [conformance|badinput|extra|cache|model|models|session|all]     (default: all)
#
# cache: paged K/V, predicated nodes and the ops of SPEC §4, §6, §7 (cuda/emu/extra_cache.c, and
# tests/conformance_cache.c where it exists); model: the transformer ops (tests/conformance_model.c,
# cuda/emu/extra_model.c); models: whole
# models across backends layer by layer (tests/model_backends.c on ../shared's stories260K and
# small generated ones; slow, not part of all); session: tests/session_test.c (paged pool, sequences,
# rewind, Selection Cache, sparse prefill, extrapolation, policies) on stories260K and a generated
# GQA model (slow, not part of all).
#
# Environment: SIFT_CONFORMANCE_MAX_N (default 255 here), SIFT_EMU_SEED (thread order),
# SIFT_EMU_CPASYNC=late|early, SIFT_EMU_SMS (multiprocessors, default 4), SIFT_EMU_SMEM_PER_SM
# (233472 = H100/H200; 102400 = sm_86/89, 2-stage pipeline), SIFT_EMU_BUILD (build folder).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${SIFT_EMU_BUILD:-/tmp/sift-emu-build}
what=${1:-all}
mkdir -p "$out/obj"
cuda_inc=$(cd "$out" && nvcc --dryrun -v -c probe.cu 2>&1 | sed -n 's/^#\$ INCLUDES="-I\([^"]*\)".*/\1/p' | head -1)
[ -n "$cuda_inc" ] || cuda_inc=/usr/local/cuda/include
cflags=(-std=c11 -O2 -g -Wall -Wextra -D_POSIX_C_SOURCE=200809L -DSIFT_HAVE_CUDA "-I$root/include" "-I$root/engine"
        "-I$root" -isystem "$cuda_inc")
cxxflags=(-std=c++17 -O2 -g -Wall -Wextra -Wno-unknown-pragmas -DSIFT_CUDA_EMU "-I$root/cuda" -isystem "$cuda_inc")
objs=()
for f in "$root"/engine/*.c "$root"/backends/cpu/*.c "$root"/backends/cuda/cuda_backend.c; do
  o="$out/obj/$(basename "${f%.c}").o"; cc "${cflags[@]}" -c "$f" -o "$o"; objs+=("$o")
done
for f in "$root"/cuda/*.cu "$root"/cuda/emu/emu_runtime.cpp; do
  o="$out/obj/$(basename "$f").o"; g++ "${cxxflags[@]}" -x c++ -c "$f" -o "$o" & objs+=("$o")
done
wait
rm -f "$out/libsift-emu.a" && ar rcs "$out/libsift-emu.a" "${objs[@]}"
# The tests as tests/meson.build builds them: conformance tests with testutil.c, the others alone.
util=()
if [ -f "$root/tests/testutil.c" ]; then
  cc "${cflags[@]}" -c "$root/tests/testutil.c" -o "$out/obj/testutil.o"; util=("$out/obj/testutil.o")
fi
for t in "$root/tests/conformance.c" "$root/tests/conformance_model.c" "$root/tests/conformance_cache.c" \
         "$root/tests/badinput.c" "$root/cuda/emu/extra.c" "$root/cuda/emu/extra_cache.c" "$root/cuda/emu/extra_model.c" \
         "$root/tests/model_backends.c" "$root/tests/model_test.c" "$root/tests/session_test.c" "$root/tools/gen_model.c"; do
  [ -f "$t" ] || continue
  n=$(basename "${t%.c}")
  extra=()
  case $n in conformance*) extra=("${util[@]}") ;; esac
  src=$t
  if [ "$n" = conformance_cache ]; then # its 70000-row paged case takes hours on the emulator: 7000 here
    sed 's/SIFT_F16, 70000, 256, 3}/SIFT_F16, 7000, 256, 3}/' "$t" > "$out/obj/conformance_cache.c"
    src=$out/obj/conformance_cache.c
  fi
  cc "${cflags[@]}" -I"$root/tests" -c "$src" -o "$out/obj/test-$n.o"
  g++ -o "$out/$n" "$out/obj/test-$n.o" "${extra[@]}" "$out/libsift-emu.a" -lm
done
export SIFT_CONFORMANCE_MAX_N=${SIFT_CONFORMANCE_MAX_N:-255}
rc=0
if [ "$what" = all ] || [ "$what" = badinput ]; then
  "$out/badinput" > "$out/badinput.txt" 2>&1 || rc=1
  echo "badinput: $(tail -1 "$out/badinput.txt")"
fi
if [ "$what" = all ] || [ "$what" = extra ]; then
  "$out/extra" > "$out/extra.txt" 2>&1 || rc=1
  grep -E "FAIL|extra:" "$out/extra.txt"
fi
if [ "$what" = all ] || [ "$what" = cache ]; then
  "$out/extra_cache" > "$out/extra_cache.txt" 2>&1 || rc=1
  grep -E "FAIL|extra-cache:" "$out/extra_cache.txt"
  if [ -x "$out/conformance_cache" ]; then
    SIFT_EXPECT_BACKENDS=cpu,cuda "$out/conformance_cache" > "$out/conformance_cache.txt" 2>&1 || rc=1
    grep -E "^backend|FAIL|summary" "$out/conformance_cache.txt" | head -60
  fi
fi
if [ "$what" = all ] || [ "$what" = conformance ]; then
  SIFT_EXPECT_BACKENDS=cpu,cuda "$out/conformance" > "$out/conformance.txt" 2>&1 || rc=1
  grep -E "^backend|FAIL|summary" "$out/conformance.txt" | head -60
fi
if [ "$what" = all ] || [ "$what" = model ]; then
  SIFT_EXPECT_BACKENDS=cpu,cuda "$out/conformance_model" > "$out/conformance_model.txt" 2>&1 || rc=1
  grep -E "^backend|FAIL|summary" "$out/conformance_model.txt" | head -60
  "$out/extra_model" > "$out/extra_model.txt" 2>&1 || rc=1
  grep -E "FAIL|extra-model:" "$out/extra_model.txt"
fi
if [ "$what" = models ]; then
  models=("$root/../shared/models/stories260K.gguf")
  for m in "tiny f32" "tiny q4_0" "gqa q8_0" "d128 f16" "qwen2 q4_0" "qwen2 f32"; do
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
exit $rc
