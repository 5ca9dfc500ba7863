#!/usr/bin/env bash
# The sift command line: exit codes and messages of run, logits, chat, eval, demo, bench-attn,
# bench-decode and devices on the CPU (devices' Vulkan figures, plain and under
# SIFT_VULKAN_PROFILE=small, where a Vulkan device is present); their JSON is read back.
# usage: cli_test.sh SIFT_BINARY SHARED_DIR RETRIEVAL_MODEL PROJECT_VERSION [CHAT_LLAMA3 CHAT_CHATML CHAT_LLAMA2]
# (the chat models: sift-gen-model --chat llama3|chatml|llama2; the chat checks need them)
# The checks that need ../shared's stories260K are skipped (exit 77 after the others) where it is absent.
set -u
SIFT=$1 SHARED=$2 RMODEL=$3 VERSION=$4
CHAT_LLAMA3=${5:-} CHAT_CHATML=${6:-} CHAT_LLAMA2=${7:-}
M=$SHARED/models/stories260K.gguf
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0 checks=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# Time limits are multiplied by SIFT_TEST_TIMEOUT_SCALE (the sanitizer job sets it: instrumented
# code on two cores runs several times slower).
scale=${SIFT_TEST_TIMEOUT_SCALE:-1}
# sift ARGS...: runs the binary (30 s at most), output in $T/out and $T/err, exit status in $rc
sift() { timeout $((30 * scale)) "$SIFT" "$@" >"$T/out" 2>"$T/err"; rc=$?; }
# the same for the demo, whose 4K-token prompt takes seconds (150 s at most)
sift_slow() { timeout $((150 * scale)) "$SIFT" "$@" >"$T/out" 2>"$T/err"; rc=$?; }
expect_rc() { checks=$((checks + 1)); [ "$rc" -eq "$1" ] || fail "$2: exit $rc, want $1; stderr: $(head -c 600 "$T/err")"; }
# expect_in FILE TEXT WHAT: FILE ($T/out or $T/err) contains TEXT (fixed string)
expect_in() { checks=$((checks + 1)); grep -qF -- "$2" "$T/$1" || fail "$3: $1 lacks '$2'; it has: $(head -c 600 "$T/$1")"; }
expect_not_in() { checks=$((checks + 1)); ! grep -qF -- "$2" "$T/$1" || fail "$3: $1 has '$2'"; }
expect_eq() { checks=$((checks + 1)); [ "$1" = "$2" ] || fail "$3: '$1', want '$2'"; }
# every line of stderr that starts with "sift <cmd>:" says something after it
no_empty_message() { checks=$((checks + 1)); ! grep -qE '^sift [a-z-]+: *$' "$T/err" || fail "$1: an empty error message"; }
# expect_json WHAT: every line of $T/out is JSON and every number in it finite (Python's reader also
# takes NaN and Infinity, which JSON has not: refused here); skipped with a message without python3
expect_json() {
    if ! command -v python3 >/dev/null; then
        echo "SKIP: no python3: the JSON of $1 is not validated"
        return
    fi
    checks=$((checks + 1))
    python3 -c 'import json, sys
def refuse(c): raise ValueError("not a JSON number: " + c)
[json.loads(l, parse_constant=refuse) for l in sys.stdin if l.strip()]' <"$T/out" ||
        fail "$1: not valid JSON: $(head -c 600 "$T/out")"
}

# ---- without a model ---------------------------------------------------------------------------
sift --version
expect_rc 0 "--version"
expect_eq "$(cat "$T/out")" "sift $VERSION" "--version"
sift --help
expect_in out "--version" "sift --help lists --version"
sift run --help
expect_rc 0 "run --help"
for flag in "-f, --file FILE" "-1: a random seed" "a power of two from 1 to 2^20" "when the context is full" "--context-shift" "--keep N"; do
    expect_in out "$flag" "run --help"
done

# the options table: every command's --help is generated from it, with that command's defaults;
# an option of another command is refused
for c in run chat logits eval demo bench-attn bench-decode; do
    sift $c --help
    expect_rc 0 "$c --help"
    expect_in out "  --backend B        cpu, vulkan or cuda" "$c --help lists --backend"
done
sift eval --help
expect_in out "  --sink S           first tokens always attended (default 4)" "eval --help: eval's S"
sift run --help
expect_in out "  --sink S           first tokens always attended (default 128)" "run --help: run's S"
sift logits --help
expect_in out "temperature; 0 is greedy (default 0)" "logits --help: greedy"
expect_not_in out "--context-shift" "logits --help: no --context-shift"
sift chat --help
expect_in out "the most tokens per reply (default -1: until the end of the turn)" "chat --help: -n"
sift bench-decode --help
expect_in out "(default -1: every step after the first reuses" "bench-decode --help: --sel-cache"
expect_in out "contexts, each timed in every mode (default 8192,32768,131072)" "bench-decode --help: --ctx"
sift eval --context-shift
expect_rc 2 "eval --context-shift"
expect_in err "sift eval: unknown option '--context-shift' (see --help)" "eval --context-shift"
sift devices --help
expect_rc 0 "devices --help"
expect_in out "  --json " "devices --help"

# the automatic backend: never a CPU emulation of a GPU (lavapipe), whatever else is present
sift devices --json
expect_rc 0 "devices --json"
if command -v python3 >/dev/null; then
    checks=$((checks + 1))
    python3 - "$T/out" <<'PY' || fail "devices --json: $(cat "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
by = {b["backend"]: b for b in d["backends"]}
choice = by[d["choice"]]
assert choice["available"] and not choice["emulated"], "chose an unavailable or emulated device"
if by["cuda"]["available"]: assert d["choice"] == "cuda"
elif by["vulkan"]["available"] and not by["vulkan"]["emulated"]: assert d["choice"] == "vulkan"
else: assert d["choice"] == "cpu"
PY
fi
sift devices
expect_in out "automatic choice: " "devices names its choice"

# sift devices --profiles: the four Vulkan device profiles (whether or not this build has Vulkan)
sift devices --profiles
expect_rc 0 "devices --profiles"
expect_eq "$(grep -vE '^ |^SIFT_VULKAN_PROFILE=' "$T/out" | tr '\n' ' ')" "amd intel-xe small nvidia " "devices --profiles: the names"
expect_eq "$(grep -c '^  stands for: .' "$T/out")" 4 "devices --profiles: what each stands for"
expect_in out "  limits:     subgroup: the device's; 32 KiB shared memory; workgroups of at most 256; buffer range 128 MiB" \
    "devices --profiles: the small profile's limits"
sift devices --profiles --json
expect_rc 0 "devices --profiles --json"
expect_json "devices --profiles --json"
if command -v python3 >/dev/null; then
    checks=$((checks + 1))
    python3 - "$T/out" <<'PY' || fail "devices --profiles --json: $(cat "$T/out")"
import json, sys
p = json.load(open(sys.argv[1]))["profiles"]
assert [x["name"] for x in p] == ["amd", "intel-xe", "small", "nvidia"], p
assert all(x["describes"] and x["limits"] for x in p), p
PY
fi
# each Vulkan device with what sift uses of it; SIFT_VULKAN_PROFILE=small narrows the figures to the
# small profile's (backends/vulkan/README.md: 256 invocations, 2^27 bytes a buffer, no 16-bit
# storage, no timestamps), where a Vulkan device is present
if "$SIFT" devices --json 2>/dev/null | grep -q '"backend": "vulkan", "available": true'; then
    sift devices
    checks=$((checks + 1))
    grep -qE '^          subgroup [0-9]+ \(the device runs [0-9]+ \.\. [0-9]+\), [0-9]+ KiB shared memory, workgroups of up to [0-9]+, buffer range ' "$T/out" ||
        fail "devices: a Vulkan device's figures: $(cat "$T/out")"
    expect_not_in out "(SIFT_VULKAN_PROFILE)" "devices: no profile without SIFT_VULKAN_PROFILE"
    SIFT_VULKAN_PROFILE=small sift devices
    expect_rc 0 "SIFT_VULKAN_PROFILE=small devices"
    expect_in out ", workgroups of up to 256, buffer range 128 MiB" "SIFT_VULKAN_PROFILE=small devices: the small profile's limits"
    expect_in out "          f16 stored as f32, no timestamps, " "SIFT_VULKAN_PROFILE=small devices: its features off"
    expect_in out "; profile small (SIFT_VULKAN_PROFILE)" "SIFT_VULKAN_PROFILE=small devices: the profile named"
    SIFT_VULKAN_PROFILE=small sift devices --json
    expect_json "SIFT_VULKAN_PROFILE=small devices --json"
    if command -v python3 >/dev/null; then
        checks=$((checks + 1))
        python3 - "$T/out" <<'PY' || fail "SIFT_VULKAN_PROFILE=small devices --json: $(cat "$T/out")"
import json, sys
d = json.load(open(sys.argv[1]))
vk = [b for b in d["backends"] if b["backend"] == "vulkan"][0]
dev = [x for x in vk["devices"] if x["default"]][0]
assert dev["usable"] and dev["profile"] == "small", dev
assert dev["max_workgroup_size"] == 256 and dev["max_buffer_range"] == 1 << 27 and dev["shared_memory_bytes"] <= 32768, dev
assert not dev["features"]["f16_storage"] and not dev["features"]["timestamps"], dev
assert dev["subgroup_min"] <= dev["subgroup_size"] <= dev["subgroup_max"], dev
PY
    fi
else
    echo "SKIP: no Vulkan device: sift devices' Vulkan figures and SIFT_VULKAN_PROFILE=small are not checked"
fi

# bench-attn on the CPU: the stages a Selection Cache hit skips take 0 us; no inf in JSON or table
sift bench-attn --backend cpu --ctx 2048 --budget 128 --sink 16 --window 64 --heads 4/2 --dim 64 --repeat 1 --json
expect_rc 0 "bench-attn --json"
expect_not_in out "inf" "bench-attn --json"
expect_not_in out "nan" "bench-attn --json"
expect_in out '"op": "score", "us": 0.000, "bytes": ' "bench-attn --json: a skipped stage"
expect_in out '"gbps": null}' "bench-attn --json: null bandwidth at 0 us"
if command -v python3 >/dev/null; then
    checks=$((checks + 1))
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/out" || fail "bench-attn --json is not JSON"
fi
# the default shapes at a small context: every figure finite or null
sift bench-attn --backend cpu --ctx 4096 --repeat 2 --json
expect_rc 0 "bench-attn --ctx 4096 --json"
expect_json "bench-attn --ctx 4096 --json"
sift bench-attn --backend cpu --ctx 2048 --budget 128 --sink 16 --window 64 --heads 4/2 --dim 64 --repeat 1
expect_rc 0 "bench-attn"
expect_not_in out "inf" "bench-attn table"
checks=$((checks + 1))
grep -qE '^cached +score +0\.0 +- ' "$T/out" || fail "bench-attn table: '-' for a stage at 0 us: $(cat "$T/out")"

# --plot: an SVG document with a polyline per series (each stage of the selection step and each
# graph's total), points at both contexts; a list of contexts prints one JSON line each
# expect_svg FILE POLYLINES POINTS WHAT: FILE is one <svg> element with POLYLINES polylines of
# POINTS points each
expect_svg() {
    checks=$((checks + 1))
    if [ ! -s "$1" ]; then fail "$4: no file $1"; return; fi
    [ "$(head -c 4 "$1")" = "<svg" ] && [ "$(tail -n 1 "$1")" = "</svg>" ] || fail "$4: not an <svg> ... </svg> document"
    checks=$((checks + 1))
    [ "$(grep -c '<polyline ' "$1")" -eq "$2" ] || fail "$4: $(grep -c '<polyline ' "$1") polylines, want $2"
    checks=$((checks + 1))
    [ "$(grep '<polyline ' "$1" | sed 's/.*points="\([^"]*\)".*/\1/' | awk '{print NF}' | sort -u)" = "$3" ] ||
        fail "$4: polylines of other than $3 points"
    if command -v python3 >/dev/null; then
        checks=$((checks + 1))
        python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$1" || fail "$4: not well-formed XML"
    fi
}
sift bench-attn --backend cpu --ctx 1024,2048 --budget 128 --sink 16 --window 64 --heads 4/2 --dim 64 --repeat 1 --plot "$T/attn.svg"
expect_rc 0 "bench-attn --ctx 1024,2048 --plot"
expect_svg "$T/attn.svg" 10 2 "bench-attn --plot" # 4 select stages, 6 graphs' totals
expect_in err "plot written to $T/attn.svg" "bench-attn --plot"
expect_eq "$(grep -c '^N=' "$T/out")" 2 "bench-attn --ctx 1024,2048: a table per context"
sift bench-attn --backend cpu --ctx 1024,2048 --budget 128 --sink 16 --window 64 --heads 4/2 --dim 64 --repeat 1 --json
expect_json "bench-attn --ctx 1024,2048 --json"
expect_eq "$(grep -c '"ctx": ' "$T/out")" 2 "bench-attn --ctx 1024,2048 --json: a line per context"
sift bench-attn --backend cpu --ctx 1024 --repeat 1 --plot "$T/absent/attn.svg"
expect_rc 1 "bench-attn --plot into a missing folder"
expect_in err "sift bench-attn: cannot write the plot $T/absent/attn.svg: " "bench-attn --plot into a missing folder"
sift bench-attn --backend cpu --ctx 1024,x
expect_rc 2 "bench-attn --ctx 1024,x"

# ---- sift eval on the retrieval model (in the source tree) -------------------------------------
# 17 samples of 17 lengths (19 .. 35 tokens with BOS), one record and its query each; and a second
# sample of the first length
{
    echo "# cli test: 18 samples"
    for i in $(seq 0 16); do
        dots=$(printf '%*s' "$i" '' | tr ' ' '.')
        echo "#ABC:123;${dots}?ABC:123;"
        echo "$((14 + i)) $((15 + i)) $((16 + i))"
    done
    echo "#XYZ:456;?XYZ:456;"
    echo "14 15 16"
} >"$T/r.txt"
E=(eval -m "$RMODEL" --backend cpu --retrieval "$T/r.txt" --sink 1 --window 2)
sift "${E[@]}" --policies dense,streaming --budgets 2,4
expect_rc 0 "eval, 17 lengths"
header=$(grep -E '^policy +budget' "$T/out")
expect_eq "$(echo "$header" | wc -w)" "$((2 + 17 + 1))" "eval, 17 lengths: columns of the header"
expect_in out " 35       all" "eval, 17 lengths: the 17th length, 35"
expect_eq "$(grep -c '^dense ' "$T/out")" 1 "eval: the dense row once"
expect_eq "$(grep -c '^streaming ' "$T/out")" 2 "eval: a streaming row per budget"
# --plot: a polyline per policy, dense flat over both budgets
sift "${E[@]}" --policies dense,streaming,tokenselect --budgets 2,4 --length 19 --plot "$T/eval.svg"
expect_rc 0 "eval --plot"
expect_svg "$T/eval.svg" 3 2 "eval --plot"
checks=$((checks + 1))
grep -q '>streaming</text>' "$T/eval.svg" || fail "eval --plot: no legend entry for streaming"
# --skip 1: only the second sample of length 19 is left
sift "${E[@]}" --policies dense --skip 1
expect_rc 0 "eval --skip 1, 17 lengths"
expect_in err "sample 1 of 1 done" "eval --skip 1"
expect_eq "$(grep -E '^policy +budget' "$T/out" | wc -w)" 4 "eval --skip 1: one length column"
# 17 budgets: 17 rows
sift "${E[@]}" --policies dense,streaming --budgets 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 --length 19
expect_rc 0 "eval, 17 budgets"
expect_eq "$(grep -c '^streaming ' "$T/out")" 17 "eval, 17 budgets: rows"
expect_in out "streaming                  17 " "eval, 17 budgets: the 17th"
# --length matching no sample
sift "${E[@]}" --policies dense,streaming --budgets 2 --length 99
expect_rc 1 "eval --length 99"
expect_in err "no samples to run in $T/r.txt of length 99 (sample lengths present, in tokens with BOS: 19 20" "eval --length 99"
expect_not_in out "%" "eval --length 99: no accuracy table"
sift "${E[@]}" --policies dense --skip 5
expect_rc 1 "eval --skip 5"
expect_in err "after --skip 5" "eval --skip 5"

# TokenButler's options: a missing predictor, a bad interval, a file that is no predictor
RB=(run -m "$RMODEL" --backend cpu -p "#ABC:123;" -n 2)
sift "${RB[@]}" --policy butler
expect_rc 2 "run --policy butler without --predictor"
expect_in err "sift run: the butler policy needs --predictor FILE" "run --policy butler without --predictor"
sift "${RB[@]}" --policy butler --predictor random --predict-interval 0
expect_rc 2 "run --predict-interval 0"
expect_in err "--predict-interval needs a number of steps in 1 .. 1024" "run --predict-interval 0"
sift "${RB[@]}" --policy butler --predictor "$RMODEL"
expect_rc 1 "run --predictor (a model, not a predictor)"
expect_in err "not a TokenButler predictor" "run --predictor (a model, not a predictor)"
no_empty_message "run --predictor (a model)"
sift "${RB[@]}" --policy butler --predictor random --predict-interval 4 --neighbor-fetch --sink 1 --window 2 --budget 2
expect_rc 0 "run --policy butler --predictor random"
expect_in err "its keys take" "run --predictor: the banner reports the projected keys' memory"
sift eval -m "$RMODEL" --backend cpu --retrieval "$T/r.txt" --sink 1 --window 2 --budgets 2 --length 19 --policies butler:i4:nf
expect_rc 2 "eval butler without --predictor"
expect_in err "the butler policy needs --predictor FILE" "eval butler without --predictor"
sift eval -m "$RMODEL" --backend cpu --retrieval "$T/r.txt" --sink 1 --window 2 --budgets 2 --length 19 --predictor random --policies butler,butler:i4:nf
expect_rc 0 "eval --predictor random"
expect_in out "butler:i4:nf " "eval: the variant's row"
# the interval decided by the query: run's option, eval's variants, and what does not go with it
sift "${RB[@]}" -n 12 --policy butler --predictor random --predict-interval auto --sink 1 --window 2 --budget 2
expect_rc 0 "run --predict-interval auto"
expect_in err "lists reused (decided by the query)" "run --predict-interval auto: the reuse line"
sift "${RB[@]}" --policy butler --predictor random --predict-interval auto --neighbor-fetch
expect_rc 1 "run --predict-interval auto --neighbor-fetch"
expect_in err "neighbour fetch with the interval decided by the query" "run --predict-interval auto --neighbor-fetch"
sift "${RB[@]}" --policy butler --predictor random --predict-interval auto --predict-threshold 1.5
expect_rc 2 "run --predict-threshold 1.5"
expect_in err "--predict-threshold needs a threshold in [-1, 1]" "run --predict-threshold 1.5"
sift eval -m "$RMODEL" --backend cpu --retrieval "$T/r.txt" --sink 1 --window 2 --budgets 2 --length 19 --predictor random --policies butler:auto,butler:auto:t0.5:i8
expect_rc 0 "eval butler:auto"
expect_in out "butler:auto " "eval: butler:auto's row"
expect_in out "butler:auto:t0.5:i8 " "eval: butler:auto:t0.5:i8's row"
expect_in out "(steps reusing lists" "eval: butler:auto's reuse rate"
for bad in butler:auto:nf butler:t0.5 butler:auto:t2; do
    sift eval -m "$RMODEL" --backend cpu --retrieval "$T/r.txt" --length 19 --predictor random --policies "$bad"
    expect_rc 2 "eval --policies $bad"
done
# tokenize: one id per character of the retrieval model's vocabulary, BOS first
printf '#ABC:1;' > "$T/tok.txt"
sift tokenize -m "$RMODEL" -f "$T/tok.txt"
expect_rc 0 "tokenize"
expect_eq "$(wc -w < "$T/out")" 8 "tokenize: BOS and 7 characters"
sift tokenize -m "$RMODEL" -f "$T/tok.txt" --no-bos
expect_eq "$(wc -w < "$T/out")" 7 "tokenize --no-bos"
# a file past 256 MiB (an endless /dev/zero) is refused with the limit, not read until memory runs out
sift tokenize -m "$RMODEL" -f /dev/zero
expect_rc 1 "tokenize -f /dev/zero"
expect_in err "sift tokenize: cannot read '/dev/zero': larger than the 256 MiB sift reads" "tokenize -f /dev/zero"
sift run -m "$RMODEL" --backend cpu -f /dev/zero
expect_rc 1 "run -f /dev/zero"
expect_in err "sift run: cannot read the prompt file /dev/zero: larger than the 256 MiB sift reads" "run -f /dev/zero"
sift eval -m "$RMODEL" --backend cpu --text /dev/zero
expect_rc 1 "eval --text /dev/zero"
expect_in err "sift eval: cannot read /dev/zero: larger than the 256 MiB sift reads" "eval --text /dev/zero"

# ---- sift demo: the retrieval model and its test set, found through the source tree -------------
# Under the sanitizers (SIFT_TEST_TIMEOUT_SCALE above 1) the demo's 4K-token prompt takes two
# minutes: the plain run checks it, and the evals above run its evaluation code (tools/eval_runs.c)
if [ "$scale" -gt 1 ]; then
    echo "SKIP: sift demo under SIFT_TEST_TIMEOUT_SCALE=$scale (the sanitizer job): checked in the plain run"
else
    sift_slow demo --samples 1 --backend cpu
    expect_rc 0 "demo --samples 1"
    expect_in out "1 sample of 4096 tokens" "demo: one sample of the shortest length"
    expect_in out "expected answers, sample 1: 785 048 957 354 968 871 363" "demo: the first sample's answers"
    for p in dense tokenselect butler quest streaming; do
        checks=$((checks + 1))
        grep -qE "^$p +[0-9? ]+ +[0-9]+\.[0-9]% +[0-9]+\.[0-9] KiB +[0-9]+\.[0-9] t/s\$" "$T/out" || fail "demo: no accuracy line for $p: $(cat "$T/out")"
    done
    checks=$((checks + 1))
    grep -qE '^dense +785 048 957 354 968 871 363 +100\.0% +2048\.0 KiB' "$T/out" || fail "demo: dense answers, accuracy, 2 MiB per layer: $(grep '^dense' "$T/out")"
    # S + k + W = 324 rows of K and V, 4 KV heads x 32 dims in f16: 162 KiB
    expect_in out "162.0 KiB" "demo: streaming's KV bytes"
fi
sift demo --samples 0
expect_rc 2 "demo --samples 0"
expect_in err "--samples needs a valid value" "demo --samples 0: message"
sift demo --bogus
expect_rc 2 "demo: unknown option"

# ---- sift chat on generated chat models ----------------------------------------------------------
# Their GPT-2 vocabularies have no merges: a byte of text is a token, a special token one, so each
# turn's new tokens are counted here by hand.
if [ -n "$CHAT_LLAMA3" ]; then
    sift chat --help
    expect_rc 0 "chat --help"
    expect_in out "--chat-template T" "chat --help"
    expect_in out "--kv-offload SIZE" "chat --help lists --kv-offload"
    # turn 1: BOS + system (1+6+1+2+9+1) + user (1+4+1+2+2+1) + the reply's header (1+9+1+2) = 45;
    # turn 2: <|eot_id|> closing the reply + user (1+4+1+2+12+1) + header (13) = 35, the reply's
    # tokens already cached; the empty line is skipped
    printf 'hi\n\nhow are you?\n' >"$T/chat.txt"
    sift chat -m "$CHAT_LLAMA3" --backend cpu -n 5 --system "Be terse." --temp 0 <"$T/chat.txt"
    expect_rc 0 "chat llama3"
    expect_in err "template llama3 (from the model)" "chat llama3: the template recognised"
    expect_in err "turn 1: 45 new tokens evaluated, 5 generated (-n); 50 of 4096 in the context" "chat llama3: turn 1"
    expect_in err "turn 2: 35 new tokens evaluated, 5 generated (-n); 90 of 4096 in the context" "chat llama3: turn 2"
    expect_not_in err "turn 3" "chat llama3: two lines, two turns"
    expect_eq "$(wc -l <"$T/out")" 2 "chat llama3: a line per reply"
    first=$(cat "$T/out")
    # the same through sift run -cnv (-p is the system prompt there)
    sift run -cnv -m "$CHAT_LLAMA3" --backend cpu -n 5 -p "Be terse." --temp 0 <"$T/chat.txt"
    expect_rc 0 "run -cnv"
    expect_eq "$(cat "$T/out")" "$first" "run -cnv: the replies of sift chat"
    # --seed -1 as in sift run: a random seed, printed, that repeats the chat
    sift chat -m "$CHAT_LLAMA3" --backend cpu -n 8 --seed -1 <"$T/chat.txt"
    expect_rc 0 "chat --seed -1"
    seed=$(sed -n 's/^sift chat: seed \([0-9]*\) (random.*/\1/p' "$T/err")
    random_replies=$(cat "$T/out")
    sift chat -m "$CHAT_LLAMA3" --backend cpu -n 8 --seed "${seed:-x}" <"$T/chat.txt"
    expect_eq "$(cat "$T/out")" "$random_replies" "chat --seed <the printed seed>"
    # KV offload: one device page of 256 tokens (the sink's), the rest of the pool on the host;
    # replies of up to 150 tokens take the conversation past that page, into a host page, and the
    # replies are the resident chat's
    sift chat -m "$CHAT_LLAMA3" --backend cpu -n 150 --system "Be terse." --temp 0 <"$T/chat.txt"
    resident=$(cat "$T/out")
    sift chat -m "$CHAT_LLAMA3" --backend cpu -n 150 --system "Be terse." --temp 0 --kv-offload 256 <"$T/chat.txt"
    expect_rc 0 "chat --kv-offload"
    expect_eq "$(cat "$T/out")" "$resident" "chat --kv-offload: the replies of the resident chat"
    on_host=$(sed -n 's/^sift chat: KV offload: .*, host pool .* pages*, \([0-9]*\) in use).*/\1/p' "$T/err")
    [ "${on_host:-0}" -gt 0 ] || fail "chat --kv-offload: no host page in use: $(grep offload "$T/err")"
    # the pools line: the one device page in the singular, the other counts in the plural; sizes in
    # MB of 10^6 bytes (a page: 256 tokens x 2 layers x K and V x 8 KV heads x 32 dims x 2 bytes)
    expect_in err "sift chat: KV offload: device pool 0.52 MB (1 page of 256 tokens, 1 in use), host pool 7.86 MB (15 pages, 1 in use); 0 pages moved to the host" \
        "chat --kv-offload: the pools line"
    # the context fills during turn 2's prompt: the chat stops cleanly
    sift chat -m "$CHAT_LLAMA3" --backend cpu -n 5 --system "Be terse." -c 60 <"$T/chat.txt"
    expect_rc 0 "chat, context full"
    expect_in err "turn 1: 45 new tokens evaluated, 5 generated (-n)" "chat, context full: turn 1"
    expect_in err "context full: turn 2's 35 tokens do not fit after 50 of 60" "chat, context full: turn 2"
    # and during a reply without -n
    sift chat -m "$CHAT_LLAMA3" --backend cpu --system "Be terse." -c 48 <"$T/chat.txt"
    expect_rc 0 "chat, context full in a reply"
    expect_in err "turn 1: 45 new tokens evaluated, 4 generated (context full); 48 of 48" "chat, context full in a reply"
    expect_not_in err "turn 2" "chat, context full in a reply: no second turn"
    # ChatML: no BOS; turn 1: (1+7+1+1) + (1+10) = 21; turn 2: <|im_end|> \n + (1+8+1+1) + 11 = 24
    printf 'hi\nbye\n' | { sift chat -m "$CHAT_CHATML" --backend cpu -n 3; }
    expect_rc 0 "chat chatml"
    expect_in err "template chatml (from the model)" "chat chatml"
    expect_in err "turn 1: 21 new tokens evaluated, 3 generated (-n)" "chat chatml: turn 1"
    expect_in err "turn 2: 24 new tokens evaluated, 3 generated (-n)" "chat chatml: turn 2"
    # the llama3 model under ChatML's template, by name: its vocabulary lacks ChatML's tokens, so
    # they are text: BOS + 12 + 7 + 10 + 1 + 12 + 10 = 53
    printf 'hi\nbye\n' | { sift chat -m "$CHAT_LLAMA3" --chat-template chatml --backend cpu -n 3; }
    expect_rc 0 "chat --chat-template chatml"
    expect_in err "template chatml (--chat-template)" "chat --chat-template"
    expect_in err "turn 1: 53 new tokens evaluated" "chat --chat-template chatml: its markers as text"
    # SentencePiece and the [INST] template
    printf 'hi\nbye\n' | { sift chat -m "$CHAT_LLAMA2" --backend cpu -n 2 --system S; }
    expect_rc 0 "chat llama2"
    expect_in err "template llama2-sys (from the model)" "chat llama2"
    expect_in err "turn 2: " "chat llama2: two turns"
    # a context whose KV cache alone (2 layers x K and V x 8 heads x 32 x 2 bytes = 2 KiB a token:
    # 4 TiB) exceeds any host's memory: refused by the estimate before anything loads, with the figures
    for c in run logits chat; do
        sift $c -m "$CHAT_LLAMA3" --backend cpu --ctx 2147483392 -p hi -n 1 </dev/null
        expect_rc 1 "$c --ctx 2147483392"
        expect_in err "sift $c: a context of 2147483392 tokens needs " "$c --ctx 2147483392: the message"
        expect_in err " MiB on CPU (" "$c --ctx 2147483392: the device"
        expect_in err "(weights 6, KV 4194304, scratch " "$c --ctx 2147483392: the weights' and the KV's MiB"
        expect_in err "MiB free; use a smaller --ctx" "$c --ctx 2147483392: the free memory and the advice"
        expect_eq "$(wc -c <"$T/out")" 0 "$c --ctx 2147483392: nothing generated"
    done
    # the library's messages: warnings always, INFO under -v, as "sift: LEVEL: message"
    sift run -m "$CHAT_LLAMA3" --backend cpu -p hi -n 1
    expect_not_in err "sift: info: " "run: no INFO without -v"
    sift run -v -m "$CHAT_LLAMA3" --backend cpu -p hi -n 1
    expect_rc 0 "run -v"
    expect_in err "sift: info: model $CHAT_LLAMA3: llama, 2 layers" "run -v: the library's INFO message of the load"
    # a vocabulary of single characters: "Once upon a time" is 26 tokens, more than its 16 bytes + 8
    sift run -m "$CHAT_LLAMA2" --backend cpu -p "Once upon a time" -n 2 --temp 0
    expect_rc 0 "run: a prompt of more tokens than bytes"
    expect_in err "prefill 26 tokens" "run: a prompt of more tokens than bytes"
    # refusals: no template, an unknown one, no model
    sift chat -m "$CHAT_LLAMA3" --chat-template gemma --backend cpu </dev/null
    expect_rc 2 "chat --chat-template gemma"
    expect_in err "--chat-template 'gemma' is no format sift knows" "chat --chat-template gemma"
    if [ -f "$M" ]; then
        sift chat -m "$M" --backend cpu </dev/null
        expect_rc 1 "chat without a template"
        expect_in err "has no chat template (tokenizer.chat_template); name its format with --chat-template" "chat without a template"
    fi
    sift chat </dev/null
    expect_rc 2 "chat without a model"
    # a message (line) past 4 MiB, here an endless one, ends the chat with the limit
    sift chat -m "$CHAT_CHATML" --backend cpu -n 3 </dev/zero
    expect_rc 1 "chat </dev/zero"
    expect_in err "sift chat: a message (line of input) longer than 4 MiB; the chat ends" "chat </dev/zero"
    { printf 'hi\n'; head -c $((5 << 20)) /dev/zero | tr '\0' a; printf '\nbye\n'; } >"$T/long.txt"
    sift chat -m "$CHAT_CHATML" --backend cpu -n 3 <"$T/long.txt"
    expect_rc 1 "chat, a 5 MiB message"
    expect_in err "turn 1: 21 new tokens evaluated, 3 generated (-n)" "chat, a 5 MiB message: the turn before it"
    expect_in err "longer than 4 MiB; the chat ends" "chat, a 5 MiB message"
    # sift tokenize --special: the control token is one id (260); without it, its 10 bytes
    printf 'a<|eot_id|>' >"$T/special.txt"
    sift tokenize -m "$CHAT_LLAMA3" -f "$T/special.txt" --special
    expect_eq "$(cat "$T/out")" "256 97 260" "tokenize --special"
    sift tokenize -m "$CHAT_LLAMA3" -f "$T/special.txt" --no-bos
    expect_eq "$(cat "$T/out")" "97 60 124 101 111 116 95 105 100 124 62" "tokenize: a control token as text"
    no_empty_message "chat"
else
    echo "SKIP: no chat models given: sift chat checks not run"
fi

# ---- stories260K ---------------------------------------------------------------------------------
if [ ! -f "$M" ]; then
    echo "checks passed: $((checks - fails)) of $checks"
    [ "$fails" -eq 0 ] || exit 1
    echo "SKIP: $M is absent: sift run checks not run"
    exit 77
fi
R=(run -m "$M" --backend cpu)

# -t: the CPU backend's threads change nothing in the output
sift "${R[@]}" -p "Once upon a time" -n 24 --temp 0 -t 1
one=$(cat "$T/out")
sift "${R[@]}" -p "Once upon a time" -n 24 --temp 0 -t 3
expect_rc 0 "run -t 3"
expect_eq "$(cat "$T/out")" "$one" "run: -t 3 gives the text of -t 1"
sift "${R[@]}" -p "Once" -t 0
expect_rc 2 "run -t 0"
expect_in err "-t needs a thread count in 1 .. 4096" "run -t 0"

# running out of context: a clean stop with the count, the flag and the speed line
sift "${R[@]}" -n 100 --ctx 16 --temp 0
expect_rc 0 "run, context full"
expect_in err "sift run: context full: stopped after 16 generated tokens of 100 (the context holds 16 tokens, 1 of them the prompt); raise it with -c/--ctx" "run, context full"
expect_in err "; decode 16 tokens in " "run, context full: the speed line"
# one token each way: the speed line in the singular
sift "${R[@]}" -n 1 --ctx 16 --temp 0
expect_rc 0 "run -n 1"
expect_in err ": prefill 1 token in " "run -n 1: the prompt's one token"
expect_in err "; decode 1 token in " "run -n 1: one decoded token"
# --context-shift: 200 tokens in a context of 64 (5 of them the prompt): each shift keeps BOS,
# drops 31 of the other 63 and re-evaluates 32 and the new token, so 5 shifts of 33 tokens
CS=(-p "Once upon a time" --ctx 64 -n 200 --temp 0)
sift "${R[@]}" "${CS[@]}"
expect_rc 0 "run --ctx 64 -n 200"
expect_in err "context full: stopped after 60 generated tokens of 200" "run --ctx 64 -n 200: without --context-shift"
expect_in err "let --context-shift drop old tokens" "run --ctx 64 -n 200: the hint"
unshifted=$(cat "$T/out")
sift "${R[@]}" "${CS[@]}" --context-shift
expect_rc 0 "run --context-shift"
expect_not_in err "context full" "run --context-shift"
expect_in err "; decode 200 tokens in " "run --context-shift: 200 tokens"
expect_in err "sift run: context shifted 5 times (kept the first 1 tokens, re-evaluated 165;" "run --context-shift: the shifts"
shifted=$(cat "$T/out")
expect_eq "${shifted:0:${#unshifted}}" "$unshifted" "run --context-shift: the text up to the first shift"
checks=$((checks + 1))
[ "${#shifted}" -gt $((2 * ${#unshifted})) ] || fail "run --context-shift: ${#shifted} characters of text, not more than twice the ${#unshifted} without"
# --keep 3: BOS and 3 prompt tokens kept; each shift drops 30 of 60 and re-evaluates 31
sift "${R[@]}" "${CS[@]}" --context-shift --keep 3
expect_in err "context shifted 5 times (kept the first 4 tokens, re-evaluated 155;" "run --context-shift --keep 3"
# a prompt that --keep -1 keeps whole leaves nothing to drop
sift "${R[@]}" -p "$(printf 'Once upon a time %.0s' 1 2 3 4 5)" --ctx 23 --context-shift --keep -1
expect_rc 1 "run --context-shift --keep -1, a long prompt"
expect_in err "sift run: --context-shift keeps 22 tokens, which leaves nothing to drop in a context of 23 tokens" "run --keep -1"
sift "${R[@]}" --keep -2
expect_rc 2 "run --keep -2"
# 2,000 tokens with extrapolation through 63 shifts: under the sanitizer job's LeakSanitizer, any
# leak of a step, a rewind or a re-evaluation fails this exit status
sift "${R[@]}" -p "Once upon a time" --ctx 64 -n 2000 --temp 0 -t 2 --context-shift --extrapolate --policy tokenselect
expect_rc 0 "run -n 2000 --extrapolate --context-shift"
expect_in err "; decode 2000 tokens in " "run -n 2000 --extrapolate --context-shift"
expect_in err "context shifted 63 times" "run -n 2000 --extrapolate --context-shift: the shifts"
# Vulkan (lavapipe in CI): a warm-up, rewound, compiles the kernels before prefill is timed; the
# text is the one without it
if [[ ",${SIFT_TEST_BACKENDS:-vulkan}," != *,vulkan,* ]]; then
    echo "SKIP: vulkan is not in SIFT_TEST_BACKENDS: the warm-up is not checked"
elif "$SIFT" devices --json 2>/dev/null | grep -q '"backend": "vulkan", "available": true'; then
    sift run -m "$M" --backend vulkan -p "Once upon a time" -n 8 --temp 0 --no-warmup
    expect_rc 0 "run --backend vulkan --no-warmup"
    expect_not_in err "setup" "run --no-warmup"
    cold=$(cat "$T/out")
    sift run -m "$M" --backend vulkan -p "Once upon a time" -n 8 --temp 0
    expect_rc 0 "run --backend vulkan"
    expect_in err "sift run: setup " "run --backend vulkan: the setup line"
    expect_in err "(a warm-up of 6 tokens, rewound," "run --backend vulkan: the warm-up's tokens"
    expect_eq "$(cat "$T/out")" "$cold" "run --backend vulkan: the text of --no-warmup"
else
    echo "SKIP: no Vulkan device: the warm-up is not checked"
fi
sift "${R[@]}" -p "Once upon a time" -n 4
expect_not_in err "setup" "run --backend cpu: no warm-up"
# -n far beyond the context: sized by the context, not by -n
sift "${R[@]}" -n 99999999999 --ctx 16 --temp 0
expect_rc 0 "run -n 99999999999 --ctx 16"
expect_in err "stopped after 16 generated tokens of 99999999999" "run -n 99999999999 --ctx 16"
no_empty_message "run -n 99999999999 --ctx 16"
sift logits -m "$M" --backend cpu -n 99999999999 --ctx 4
expect_rc 0 "logits -n 99999999999 --ctx 4"
expect_eq "$(wc -l <"$T/out")" 4 "logits --ctx 4: forward passes"
expect_in err "context full (4 tokens): stopped after 3 greedy steps of 99999999999" "logits --ctx 4"
# a prompt longer than the context: no echo, a hint; the same with extrapolation
P="Once upon a time there was a little girl who loved to play in the park"
for x in "" "--extrapolate --policy tokenselect"; do
    # shellcheck disable=SC2086
    sift "${R[@]}" -p "$P" --ctx 8 $x
    expect_rc 1 "run, prompt over the context $x"
    expect_in err "sift run: the prompt is 24 tokens, more than the context of 8 tokens; raise it with -c/--ctx" "run, prompt over the context $x"
    expect_eq "$(wc -c <"$T/out")" 0 "run, prompt over the context $x: nothing echoed"
done
# an error the engine reports has its message
sift "${R[@]}" -m "$T/none.gguf"
expect_rc 1 "run, missing model"
expect_in err "$T/none.gguf" "run, missing model"
no_empty_message "run, missing model"

# tokenselect on a small context: the defaults scaled (only those not given), selection runs
sift "${R[@]}" --policy tokenselect --ctx 512 -n 400 --temp 0
expect_rc 0 "run tokenselect --ctx 512"
expect_in err "warning: S=128 W=512 k=2048 cover the whole context of 512 tokens, so tokenselect would select nothing; using S=8 W=32 k=128" "run tokenselect --ctx 512"
expect_in err "policy tokenselect (S=8 W=32 k=128)" "run tokenselect --ctx 512: the banner"
expect_in err "sift run: Selection Cache hits " "run tokenselect --ctx 512: the hit rate"
sift "${R[@]}" --policy tokenselect --ctx 512 -n 4 --budget 100
expect_in err "using S=8 W=32 k=100" "run tokenselect --budget 100"
sift "${R[@]}" --policy tokenselect --ctx 512 -n 4 --sink 4 --window 16 --budget 64
expect_rc 0 "run tokenselect, S W k given"
expect_not_in err "warning" "run tokenselect, S W k given"
sift "${R[@]}" --policy tokenselect --ctx 512 -n 4 --sink 400 --window 100 --budget 64
expect_in err "warning: S + W + k = 564 >= the context of 512 tokens" "run tokenselect, S W k too large"

# KV offload: the same text as the resident run (greedy; 86 tokens, most of their pages on the host),
# the pools reported; bad sizes refused
sift "${R[@]}" -p "Once upon a time" -n 80 --temp 0 --ctx 512 --page-size 16 --policy tokenselect --sink 4 --window 16 --budget 32
expect_rc 0 "run, resident"
cp "$T/out" "$T/resident.txt"
for off in 48 "48 --kv-offload-v-only" 20K; do
    sift "${R[@]}" -p "Once upon a time" -n 80 --temp 0 --ctx 512 --page-size 16 --policy tokenselect --sink 4 --window 16 \
        --budget 32 --kv-offload $off
    expect_rc 0 "run --kv-offload $off"
    expect_eq "$(cat "$T/out")" "$(cat "$T/resident.txt")" "run --kv-offload $off: the resident run's text"
    expect_in err "sift run: KV offload: device pool " "run --kv-offload $off: the pools"
    checks=$((checks + 1))
    moved=$(sed -n 's/.*; \([0-9]*\) pages* moved to the host$/\1/p' "$T/err" | tail -1)
    [ "${moved:-0}" -gt 0 ] || fail "run --kv-offload $off: no page moved to the host: $(grep offload "$T/err")"
done
sift "${R[@]}" -p "Once upon a time" -n 4 --ctx 512 --page-size 16 --kv-offload 48
expect_in err "(3 pages of 16 tokens" "run --kv-offload 48: 3 device pages of 16 tokens"
for bad in 0 -5 12Q 1.5G x; do
    sift "${R[@]}" -p "x" -n 1 --kv-offload "$bad"
    expect_rc 2 "run --kv-offload $bad"
    expect_in err "--kv-offload needs tokens (65536) or bytes" "run --kv-offload $bad: the message"
done
sift "${R[@]}" -p "x" -n 1 --kv-offload-v-only
expect_rc 1 "run --kv-offload-v-only alone"
expect_in err "--kv-offload-v-only needs --kv-offload SIZE" "run --kv-offload-v-only alone: the message"
sift bench-decode -m "$M" --backend cpu --ctx 1000 --steps 2 --sink 8 --window 32 --budget 64 --kv-offload 300 \
    --attn dense,select --json
expect_rc 0 "bench-decode --kv-offload --attn dense,select --json"
expect_json "bench-decode --kv-offload --json"
if command -v python3 >/dev/null; then
    checks=$((checks + 1))
    python3 - "$T/out" <<'PY' || fail "bench-decode --kv-offload --json: $(head -c 900 "$T/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert rows[0]["kv_offload"] == "300" and rows[0]["host_link_gbps"] is None, rows[0]
assert [r["attn"] for r in rows[1:]] == ["dense", "select"], rows
for r in rows[1:]:
    assert r["kv_host_bytes"] > 0 and r["kv_device_bytes"] > 0, r
PY
fi
sift bench-decode -m "$M" --backend cpu --ctx 256 --attn dense,sparse
expect_rc 2 "bench-decode --attn with a mode that is none"

# bench-decode: two sequences decoded together, a per-stage profile of each mode
BD=(bench-decode -m "$M" --backend cpu --ctx 256 --steps 2 --sink 8 --window 32 --budget 64 --batch 2 --profile)
sift "${BD[@]}"
expect_rc 0 "bench-decode --batch 2 --profile"
expect_in out "batch 2 (tokens/s = 2 / step time)" "bench-decode --batch 2: the banner"
expect_in out "device time, summed" "bench-decode --profile: the summed device time"
expect_in out "untimed step, wall clock (median)" "bench-decode --profile: the wall time beside it"
layers=$(sed -n 's/.*, \([0-9]*\) layers, .*/\1/p' "$T/out")
checks=$((checks + 2))
# a step of 2 rows: Q, K and V are 3 products per layer (fused only for one row), the logits one
grep -qE "^ +qkv: matmul +$((3 * ${layers:-0}))\.0 " "$T/out" || fail "bench-decode --profile: $((3 * ${layers:-0})) qkv matmuls per step: $(grep matmul "$T/out")"
grep -qE "^ +logits: matmul +1\.0 " "$T/out" || fail "bench-decode --profile: 1 logits matmul per step: $(grep matmul "$T/out")"
sift "${BD[@]}" --json
expect_rc 0 "bench-decode --batch 2 --profile --json"
expect_json "bench-decode --json"
if command -v python3 >/dev/null; then
    checks=$((checks + 1))
    python3 - "$T/out" "${layers:-0}" <<'PY' || fail "bench-decode --json: $(head -c 900 "$T/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [r["attn"] for r in rows] == ["dense", "select", "cached"], [r["attn"] for r in rows]
for r in rows:
    assert r["batch"] == 2 and r["ctx"] == 256, r
    assert abs(r["tokens_per_s"] - 2e3 / r["ms_per_step"]) <= 0.01 * r["tokens_per_s"], r  # 2 tokens a step
    # a row per stage and op; a dense step's matmuls: Q, K, V, the output projection, gate, up and
    # down per layer, the logits
    matmuls = sum(p["nodes_per_step"] for p in r["profile"] if p["op"] == "matmul")
    assert r["profile_steps"] == 4 and matmuls == 7 * int(sys.argv[2]) + 1, r
    stages = {(p["stage"], p["op"]) for p in r["profile"]}
    assert {("qkv", "matmul"), ("logits", "matmul"), ("attn_norm", "rmsnorm")} <= stages, stages
    assert any(s == "attention" for s, _ in stages), stages
    times = [p["us_per_step"] for p in r["profile"]]
    assert times == sorted(times, reverse=True), times
    assert abs(sum(times) - r["profile_us_per_step"]) <= 0.01 * r["profile_us_per_step"] + 0.01, r
PY
fi
sift bench-decode -m "$M" --backend cpu --batch 0
expect_rc 2 "bench-decode --batch 0"
expect_in err "sift bench-decode: --batch needs a valid value, not '0'" "bench-decode --batch 0"
sift bench-decode -m "$M" --backend cpu --ctx 256,1x
expect_rc 2 "bench-decode --ctx 256,1x"
expect_in err "sift bench-decode: --ctx needs up to 64 comma-separated contexts in tokens (1 .. 2^31 - 1), not '256,1x'" "bench-decode --ctx 256,1x"
expect_eq "$(wc -c <"$T/out")" 0 "bench-decode --ctx 256,1x: refused before any run"

# flag checks
sift "${R[@]}" --page-size 0
expect_rc 2 "run --page-size 0"
expect_in err "sift run: --page-size needs a power of two from 1 to 1048576 (tokens per KV page), not '0'" "run --page-size 0"
sift "${R[@]}" --page-size 48
expect_rc 2 "run --page-size 48"
sift "${R[@]}" --page-size 16 -n 2
expect_rc 0 "run --page-size 16"
expect_in err "pages of 16)" "run --page-size 16: the banner"
sift "${R[@]}" --policy nonsense
expect_rc 2 "run --policy nonsense"
expect_in err "--policy needs one of dense, tokenselect (or select), streaming, h2o, snapkv, quest, oracle, butler; not 'nonsense'" "run --policy nonsense"
sift "${R[@]}" --budget -1 -n 2
expect_rc 0 "run --budget -1 (dense)"
sift "${R[@]}" --budget -1 --policy streaming -n 2
expect_rc 2 "run --budget -1 --policy streaming"
expect_in err "sift run: --budget needs a number of tokens >= 0, not -1" "run --budget -1 --policy streaming"
# S, W and k beyond what a session takes are refused one by one, before S + W + k is summed
sift "${R[@]}" --policy tokenselect --sink 4611686018427387904 --window 4611686018427387904 --budget 4611686018427387904 -n 2
expect_rc 2 "run --sink, --window, --budget 2^62"
expect_in err "sift run: --sink needs a number of tokens <= 2147483647, not 4611686018427387904" "run --sink 2^62"
sift "${R[@]}" --policy tokenselect --budget 2147483648 -n 2
expect_rc 2 "run --budget 2^31"
expect_in err "sift run: --budget needs a number of tokens <= 2147483647, not 2147483648" "run --budget 2^31"

# --seed -1: a random seed, printed; that seed repeats the run
sift "${R[@]}" -n 24 --seed -1 --temp 1
expect_rc 0 "run --seed -1"
seed1=$(sed -n 's/^sift run: seed \([0-9]*\) (random.*/\1/p' "$T/err")
text1=$(cat "$T/out")
sift "${R[@]}" -n 24 --seed -1 --temp 1
seed2=$(sed -n 's/^sift run: seed \([0-9]*\) (random.*/\1/p' "$T/err")
checks=$((checks + 1))
[ -n "$seed1" ] && [ -n "$seed2" ] && [ "$seed1" != "$seed2" ] || fail "run --seed -1: seeds '$seed1' and '$seed2'"
sift "${R[@]}" -n 24 --seed "$seed1" --temp 1
expect_eq "$(cat "$T/out")" "$text1" "run --seed <the printed seed>"
sift "${R[@]}" --seed -2
expect_rc 2 "run --seed -2"

# -f FILE: the same as -p with the file's text
printf 'Once upon a time' >"$T/prompt.txt"
sift "${R[@]}" -n 12 --temp 0 -p "Once upon a time"
text_p=$(cat "$T/out")
sift "${R[@]}" -n 12 --temp 0 -f "$T/prompt.txt"
expect_rc 0 "run -f"
expect_eq "$(cat "$T/out")" "$text_p" "run -f: the text of -p"
expect_in err "prefill 5 tokens" "run -f: the prompt's tokens"
sift "${R[@]}" --file "$T/absent.txt"
expect_rc 1 "run --file absent"
expect_in err "sift run: cannot read the prompt file $T/absent.txt: " "run --file absent"
sift "${R[@]}" -f "$T/prompt.txt" -p x
expect_rc 2 "run -f and -p"

# an empty prompt on a vocabulary without BOS has no token to start from: refused, where sampling
# would read logits never written (the model: stories260K with its BOS key renamed, same length)
LC_ALL=C sed 's/tokenizer\.ggml\.bos_token_id/tokenizer.ggml.bos_token_no/' "$M" >"$T/no_bos.gguf"
sift run -m "$T/no_bos.gguf" --backend cpu -p "Once" -n 3 --temp 0
expect_rc 0 "run without BOS, a prompt"
sift run -m "$T/no_bos.gguf" --backend cpu -p "" -n 3 --temp 0
expect_rc 1 "run without BOS, an empty prompt"
expect_in err "sift run: the prompt has no tokens (it is empty and the model's vocabulary has no BOS token" "run without BOS, an empty prompt"
expect_eq "$(cat "$T/out")" "" "run without BOS, an empty prompt: no text"
sift logits -m "$T/no_bos.gguf" --backend cpu -p ""
expect_rc 1 "logits without BOS, an empty prompt"
expect_in err "sift logits: the prompt has no tokens" "logits without BOS, an empty prompt"

echo "checks passed: $((checks - fails)) of $checks"
[ "$fails" -eq 0 ]
