#!/usr/bin/env bash
# Builds the GGUF fuzzer with clang (libFuzzer + AddressSanitizer + UBSan) and runs it.
#
#   tests/fuzz/run.sh [SECONDS] [libFuzzer options...]      (default 60 s)
#
# Needs clang and libFuzzer: apt-get install -y clang libclang-rt-14-dev (Debian 12).
# Works in build-fuzz/ (SIFT_FUZZ_DIR overrides): the fuzzer binary, seeds written by
# tests/gguf_corpus/make_corpus.py, the growing corpus, and crash-* files for anything it finds.
# Inputs that crashed belong, once fixed, in tests/gguf_corpus/ (the gguf test opens them all).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-60}
shift || true
work=${SIFT_FUZZ_DIR:-$root/build-fuzz}
mkdir -p "$work/corpus" "$work/seeds" "$work/crashes"
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cc" ]; then echo "run.sh: clang not found (apt-get install -y clang libclang-rt-14-dev)" >&2; exit 1; fi

python3 "$root/tests/gguf_corpus/make_corpus.py" --seeds "$work/seeds"
# The engine's sources that the parser, dequantization and tokenizer need, instrumented.
"$cc" -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -Wall -Wextra \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$root/engine" \
    "$root/tests/fuzz/gguf_fuzz.c" "$root/engine/gguf.c" "$root/engine/quant.c" "$root/engine/strmap.c" \
    "$root/engine/tokenizer.c" "$root/engine/core.c" "$root/engine/graph.c" "$root/engine/attn_graph.c" \
    "$root/engine/backend_stubs.c" "$root/backends/cpu/cpu_backend.c" -lm -lpthread \
    -o "$work/gguf_fuzz"

# The first folder receives new inputs; the others seed it (the hand-made corpus included).
exec "$work/gguf_fuzz" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/crashes/" "$@" "$work/corpus" "$work/seeds" "$root/tests/gguf_corpus"
