"""The synthetic long-range associative-recall task and its character vocabulary (stdlib only).

A recall sample is a haystack of random filler "words" with key->value records scattered through
it, followed by queries for some of those keys:

    kdq.zpfe.#QXB:381;wuhd.ae.ot#JRA:907;mmvxq.y ... .ks?JRA:907;?QXB:381;

Records are '#KEY:VAL;' (KEY: 3 uppercase letters, VAL: 3 digits), queries are '?KEY:VAL;'. The
model is scored on the VAL characters of the queries: the first digit can only come from the
record, which lies anywhere in the haystack, so a model that reads the whole context (or a KV
selector that keeps the right tokens) recalls it and one that loses the record cannot. The
alphabets of filler, keys and values are disjoint, and no character is a space, so the
SentencePiece-style tokenizer sift reads from the GGUF maps every character to exactly one token.

A repeat sample is random text X followed by X again, scored on the second copy: it teaches
copying (induction heads) first, which the recall task then builds on (SPEC.md section 11).

Lengths: a sample of n_chars characters is n_chars + 1 tokens, since sift (and training) put BOS
first. Token position p (BOS at 0) predicts character p of the text, so the logits that predict
the character at text offset o are those of token position o.

Run `python3 task.py --help` for a small command line (print samples, self-check, compare sift's
logits with the reference the exporter writes).
"""

import argparse
import json
import random
import sys

FILLER_CHARS = "abcdefghijklmnopqrstuvwxyz"
KEY_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
VAL_CHARS = "0123456789"
PUNCT_CHARS = ".#:;?"  # word separator, record start, key/value separator, record end, query start
ALPHABET = FILLER_CHARS + KEY_CHARS + VAL_CHARS + PUNCT_CHARS

# The vocabulary: three special tokens, then one token per character of the alphabet.
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
TOKENS = SPECIAL_TOKENS + list(ALPHABET)
VOCAB_SIZE = len(TOKENS)
CHAR_TO_ID = {c: i for i, c in enumerate(TOKENS) if i >= len(SPECIAL_TOKENS)}

# GGUF token types (llama.cpp's enum, which sift reads): normal text, unknown, control.
TOKEN_TYPE_NORMAL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL = 1, 2, 3
TOKEN_TYPES = [TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL, TOKEN_TYPE_CONTROL] + [TOKEN_TYPE_NORMAL] * len(ALPHABET)

RECORD_LEN = 9  # '#KEY:VAL;' and '?KEY:VAL;' alike
KEY_LEN = 3
VAL_LEN = 3
N_KEYS = len(KEY_CHARS) ** KEY_LEN
VAL_OFFSET_IN_QUERY = 1 + KEY_LEN + 1  # '?' KEY ':' then the value

# A 256-entry byte -> filler character table for bytes.translate: 208 = 26 * 8 byte values map to
# the letters (8 each), the other 48 to '.', so a word separator comes with probability 3/16 and
# words average about 4 letters. Generating filler from random bytes keeps the generator at C
# speed, which matters: training draws ~64K characters per step.
_FILLER_TABLE = bytes((FILLER_CHARS[b % 26] if b < 208 else ".").encode("ascii")[0] for b in range(256))


def encode(text):
    """Token ids of text without BOS (one per character); raises KeyError on a character outside the
    alphabet."""
    return [CHAR_TO_ID[c] for c in text]


def byte_to_id_table():
    """A 256-entry list mapping each ASCII byte of the alphabet to its token id (others to <unk>), for
    converting a whole batch of text with one table lookup."""
    table = [UNK_ID] * 256
    for c, i in CHAR_TO_ID.items():
        table[ord(c)] = i
    return table


def _random_bytes(rng, n):
    # Random.randbytes exists from Python 3.9 only; this is what it does.
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n > 0 else b""


def filler(rng, n):
    """n characters of random lowercase words separated by '.'."""
    return _random_bytes(rng, n).translate(_FILLER_TABLE).decode("ascii")


def key_string(k):
    """The 3-letter key of index k in [0, 26^3)."""
    chars = []
    for _ in range(KEY_LEN):
        k, r = divmod(k, len(KEY_CHARS))
        chars.append(KEY_CHARS[r])
    return "".join(chars)


def counts_for_length(n_chars):
    """(records, queries) of a recall sample of n_chars characters: two records and one query at a
    few dozen characters (the curriculum's start), 51 records and 7 queries at 4K, 204 and 31 at 16K.
    There is always at least one record more than queries: with as many queries as records, the
    last query's answer is the one record not yet asked for, a shortcut a model takes instead of
    matching keys (seen: 2 records, 2 queries passed a 0.9 gate without key matching)."""
    n_queries = max(1, min(32, n_chars // 512))
    n_records = max(n_queries + 1, min(256, n_chars // 80))
    return n_records, n_queries


def min_recall_chars():
    n_records, n_queries = counts_for_length(0)
    return RECORD_LEN * (n_records + n_queries)


def recall_sample(rng, n_chars):
    """A recall sample of exactly n_chars characters: (text, answer_offsets), the offsets being the
    0-based positions of the queried value characters in text."""
    n_records, n_queries = counts_for_length(n_chars)
    query_chars = RECORD_LEN * n_queries
    hay_chars = n_chars - query_chars
    free = hay_chars - RECORD_LEN * n_records
    if free < 0:
        raise ValueError("recall sample of %d characters is too short (at least %d)" % (n_chars, min_recall_chars()))
    keys = [key_string(k) for k in rng.sample(range(N_KEYS), n_records)]  # distinct: no ambiguous query
    vals = ["%03d" % rng.randrange(10 ** VAL_LEN) for _ in range(n_records)]
    # Non-overlapping record positions, uniform over the haystack: sorted cut points in the filler.
    cuts = sorted(rng.randrange(free + 1) for _ in range(n_records))
    fill = filler(rng, free)
    parts = []
    prev = 0
    for i, cut in enumerate(cuts):
        parts.append(fill[prev:cut])
        parts.append("#" + keys[i] + ":" + vals[i] + ";")
        prev = cut
    parts.append(fill[prev:])
    # Queries: distinct records in a random order.
    offsets = []
    pos = hay_chars
    for i in rng.sample(range(n_records), n_queries):
        parts.append("?" + keys[i] + ":" + vals[i] + ";")
        offsets.extend(range(pos + VAL_OFFSET_IN_QUERY, pos + VAL_OFFSET_IN_QUERY + VAL_LEN))
        pos += RECORD_LEN
    text = "".join(parts)
    assert len(text) == n_chars
    return text, offsets


def repeat_sample(rng, n_chars):
    """Random text X, then X again: (text, loss_offsets) of exactly n_chars characters. The loss
    covers the second copy except its first character (nothing says where the copy starts)."""
    half = n_chars // 2
    pad = n_chars - 2 * half  # one leading character when n_chars is odd
    rnd = _random_bytes(rng, pad + half)
    chars = [ALPHABET[b % len(ALPHABET)] for b in rnd]
    lead, x = "".join(chars[:pad]), "".join(chars[pad:])
    text = lead + x + x
    start = pad + half
    return text, list(range(start + 1, start + half))


def test_set(seed, lengths, per_length):
    """Held-out recall samples for the test file: a list of (n_tokens, text, offsets), n_tokens =
    len(text) + 1 (BOS) being one of lengths. Independent of the training stream (its own RNG)."""
    rng = random.Random("sift-retrieval-test-%d" % seed)
    out = []
    for n_tokens in lengths:
        for _ in range(per_length):
            text, offsets = recall_sample(rng, n_tokens - 1)
            out.append((n_tokens, text, offsets))
    return out


TEST_HEADER = "# sift retrieval test set v1: %d samples; pairs of lines: text, then answer character offsets"


def write_test_set(path, samples):
    """The test file: a header line, then per sample its text and its answer offsets."""
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(TEST_HEADER % len(samples) + "\n")
        for _, text, offsets in samples:
            f.write(text + "\n")
            f.write(" ".join(str(o) for o in offsets) + "\n")


def read_test_set(path):
    """The samples of a test file as (text, offsets) pairs (the inverse of write_test_set)."""
    with open(path, encoding="ascii") as f:
        lines = f.read().split("\n")
    if not lines[0].startswith("# sift retrieval test set v1:"):
        raise ValueError("%s: not a sift retrieval test set" % path)
    body = [l for l in lines[1:] if l != ""]
    if len(body) % 2:
        raise ValueError("%s: odd number of lines after the header" % path)
    return [(body[i], [int(o) for o in body[i + 1].split()]) for i in range(0, len(body), 2)]


def check_sample(text, offsets):
    """Asserts the invariants a recall sample must have; returns the number of queries checked."""
    assert all(c in CHAR_TO_ID for c in text), "character outside the alphabet"
    assert " " not in text and "\n" not in text
    records = {}
    i = 0
    while True:
        i = text.find("#", i)
        if i < 0:
            break
        key, sep, val, end = text[i + 1:i + 4], text[i + 4], text[i + 5:i + 8], text[i + 8]
        assert all(c in KEY_CHARS for c in key) and sep == ":" and all(c in VAL_CHARS for c in val) and end == ";"
        assert key not in records, "duplicate key"
        records[key] = (i, val)
        i += RECORD_LEN
    assert len(offsets) % VAL_LEN == 0
    last_record = max(p for p, _ in records.values())
    for q in range(0, len(offsets), VAL_LEN):
        o = offsets[q]
        assert offsets[q:q + VAL_LEN] == list(range(o, o + VAL_LEN))
        start = o - VAL_OFFSET_IN_QUERY
        assert text[start] == "?" and text[start + 4] == ":" and text[start + 8] == ";"
        key, val = text[start + 1:start + 4], text[o:o + VAL_LEN]
        assert records[key][1] == val, "query answer differs from the record"
        assert start > last_record, "query before a record"
    return len(offsets) // VAL_LEN


def _self_check(seed):
    rng = random.Random(seed)
    n = 0
    for n_chars in [min_recall_chars(), 39, 40, 49, 63, 100, 511, 1000, 4095, 8191, 16383]:
        for _ in range(5):
            text, offsets = recall_sample(rng, n_chars)
            assert len(text) == n_chars
            n += check_sample(text, offsets)
            text, loss = repeat_sample(rng, n_chars)
            half = n_chars // 2
            assert len(text) == n_chars and text[-half:] == text[-2 * half:-half]
            assert all(text[o] == text[o - half] for o in loss)
    a = test_set(seed, [128, 256], 3)
    b = test_set(seed, [128, 256], 3)
    assert a == b, "test set not deterministic"
    assert VOCAB_SIZE == len(TOKENS) == len(TOKEN_TYPES) == 70
    assert len(set(ALPHABET)) == len(ALPHABET)
    print("task.py self-check: ok (%d queries checked, vocabulary of %d tokens)" % (n, VOCAB_SIZE))


def _compare_logits(ref_path, sift_path, tol):
    """Compares `sift logits` output (JSON lines) with the exporter's reference_logits.json."""
    with open(ref_path) as f:
        ref = json.load(f)
    with open(sift_path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    ids = ref["token_ids"]
    if [r["token"] for r in rows[:len(ids)]] != ids:
        print("token ids differ: sift %s, reference %s" % ([r["token"] for r in rows[:len(ids)]], ids))
        return 1
    worst, argmax_diff = 0.0, 0
    for p, r in enumerate(rows[:len(ids)]):
        want = ref["logits"][p]
        worst = max(worst, max(abs(a - b) for a, b in zip(r["logits"], want)))
        argmax_diff += r["argmax"] != ref["argmax"][p]
    print("%d positions: max |logit difference| %.4g, argmax differs at %d" % (len(ids), worst, argmax_diff))
    return 0 if worst <= tol else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sample", help="print a recall sample and its answer offsets")
    p.add_argument("n_chars", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", action="store_true", help="a repeat sample instead")
    p = sub.add_parser("check", help="self-check the generator")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("check-test-set", help="check every sample of a retrieval_test.txt")
    p.add_argument("path")
    p = sub.add_parser("compare-logits", help="compare `sift logits` JSON lines with reference_logits.json")
    p.add_argument("reference")
    p.add_argument("sift_jsonl")
    p.add_argument("--tol", type=float, default=0.1,
                   help="largest |logit difference| accepted (f16 KV cache: ~0.06 seen; --kv f32: ~1e-4)")
    a = ap.parse_args(argv)
    if a.cmd == "sample":
        rng = random.Random(a.seed)
        text, offsets = (repeat_sample if a.repeat else recall_sample)(rng, a.n_chars)
        print(text)
        print(" ".join(map(str, offsets)))
    elif a.cmd == "check":
        _self_check(a.seed)
    elif a.cmd == "check-test-set":
        samples = read_test_set(a.path)
        n = sum(check_sample(t, o) for t, o in samples)
        print("%s: %d samples, %d queries, all valid; lengths %s" % (a.path, len(samples), n,
                                                                     sorted(set(len(t) for t, _ in samples))))
    elif a.cmd == "compare-logits":
        return _compare_logits(a.reference, a.sift_jsonl, a.tol)
    return 0


if __name__ == "__main__":
    sys.exit(main())
