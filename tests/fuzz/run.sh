#!/usr/bin/env bash
# Builds the fuzzers with clang (libFuzzer + AddressSanitizer + UBSan) and runs each in turn.
#
#   tests/fuzz/run.sh [SECONDS] [libFuzzer options...]      (default 60 s per fuzzer)
#   SIFT_FUZZ_TARGETS="gguf tokenizer"                       (which ones; default all four)
#
#   gguf       any bytes as a GGUF file: parse, every accessor, hyper-parameters, dequantization,
#              and the tokenizer the metadata describes
#   tokenizer  any bytes as text for four made-up tokenizers: encode, decode back exactly
#   predictor  any bytes as a TokenButler predictor file, or edits of a valid one, for a base model
#              (../shared's stories260K, else the retrieval model): load, and a short session
#   chat       any bytes as a chat template and messages: name, format, sizes, buffers too small
#
# Needs clang and libFuzzer: apt-get install -y clang libclang-rt-14-dev (Debian 12).
# Works in build-fuzz/ (SIFT_FUZZ_DIR overrides): the binaries, seeds written by
# tests/gguf_corpus/make_corpus.py, the growing corpora, and crash-* files for anything found.
# A GGUF input that crashed belongs, once fixed, in tests/gguf_corpus/ (the gguf test opens them all).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-60}
shift || true
work=${SIFT_FUZZ_DIR:-$root/build-fuzz}
targets=${SIFT_FUZZ_TARGETS:-gguf tokenizer predictor chat}
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cc" ]; then echo "run.sh: clang not found (apt-get install -y clang libclang-rt-14-dev)" >&2; exit 1; fi
mkdir -p "$work/seeds" "$work/crashes" "$work/seeds-predictor" "$work/seeds-chat"
python3 "$root/tests/gguf_corpus/make_corpus.py" --seeds "$work/seeds"
# the predictor fuzzer's base model: stories260K where ../shared has it (its sessions take
# milliseconds), else the retrieval model the repository ships (about a second a session)
export SIFT_FUZZ_MODEL="$root/../shared/models/stories260K.gguf"
[ -f "$SIFT_FUZZ_MODEL" ] || SIFT_FUZZ_MODEL="$root/tools/retrieval/model/retrieval.gguf"
# the valid predictor unedited; a conversation in each template sift writes
printf '\001' >"$work/seeds-predictor/valid"
for t in chatml llama3 llama2 llama2-sys llama2-sys-bos llama2-sys-strip; do
    printf '\001%s\000\000 Be brief. \000\001\000Hello\000\002\000Hi!\000\001\000  Bye ' "$t" >"$work/seeds-chat/$t"
done

# The engine and the CPU backend (what libsift links without GPU backends), instrumented, compiled
# once for every target, a file per core at a time. The CPU backend's kernels get the sanitizers
# but no coverage: the fuzzers explore the inputs the engine reads, and the kernels' counted loops
# would only slow the predictor fuzzer's sessions tenfold.
cflags=(-std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -fno-sanitize-recover=undefined
        -I"$root/include" -I"$root/engine")
mkdir -p "$work/obj"
export cc work
printf '%s\n' "$root"/engine/*.c "$root"/backends/cpu/*.c |
    xargs -P "$(nproc)" -I{} sh -c 'f={}; o="$work/obj/$(basename "$(dirname "$f")")_$(basename "$f" .c).o";
        case "$f" in */backends/cpu/*) cov="";; *) cov="fuzzer-no-link,";; esac
        "$cc" "$@" -fsanitize=${cov}address,undefined -c "$f" -o "$o"' sh "${cflags[@]}"
status=0
for target in $targets; do
    mkdir -p "$work/corpus-$target"
    "$cc" "${cflags[@]}" -fsanitize=fuzzer,address,undefined \
        "$root/tests/fuzz/${target}_fuzz.c" "$work"/obj/*.o -lm -lpthread -o "$work/${target}_fuzz"
    seeds=()
    [ "$target" = gguf ] && seeds=("$work/seeds" "$root/tests/gguf_corpus")
    [ "$target" = predictor ] && seeds=("$work/seeds-predictor")
    [ "$target" = chat ] && seeds=("$work/seeds-chat")
    # The first folder receives new inputs; the others seed it.
    "$work/${target}_fuzz" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$work/crashes/$target-" "$@" "$work/corpus-$target" "${seeds[@]}" || status=$?
done
exit $status
