"""Harder long-context tasks beside task.py's recall, after RULER (stdlib only).

Every task writes its samples in recall's alphabet and test-set format (task.py), so that the
retrieval model's tokenizer reads them and `sift eval --retrieval` scores them unchanged: the
answer is the exact continuation of the text, and the answer offsets mark its characters (teacher
forced, one greedy comparison per character). All tasks share one reading of the text:

    #KEY:X;      a record: KEY (three uppercase letters) maps to X, three digits (a value) or three
                 uppercase letters (another key, whose record gives the value: a chain)
    #KEY;        an occurrence of the word KEY
    ?KEY:        answered by the right side of every record of KEY, in the order of the records,
                 a key among them followed by its own answer, separated by ':' and ended by ';'
                 (one record: '?KEY:VAL;' as in recall; a chain: '?K1:K2:VAL;', its walk)
    ?K1.K2.K3:   answered by the value of each key in turn, separated by '.', ended by ';'
    ?:           answered by the word that occurs most often, then ';'

The scored characters are the answer parts' (three per part: the digits of a value, the letters
of a key or of the word); separators are not scored. Queries follow every record. The tasks:

    recall      task.py's: distinct keys, one value each, '?KEY:VAL;' queries
    multikey    records in families of near-duplicate keys (each differs from the others of its
                family in one character, at the same place: QXA QXB QXC QXD); '?KEY:VAL;' queries
    multivalue  keys with several values, the i-th in the i-th of as many parts of the haystack,
                among single-valued distractors; '?KEY:V1:V2:V3:V4;' recalls them in order
    multiquery  one query asks for several keys, whose values follow one after another:
                '?K1.K2.K3.K4:V1.V2.V3.V4;' (the key of an answer part lies back in the query)
    vartrack    chains '#K1:K2;' ... '#K2:VAL;' (two or three records, in random order, far apart)
                among distractor chains; '?K1:K2:VAL;' walks the chain to its end, one record per
                answer part, as RULER's variable tracking lists a chain's variables (multi-hop: the
                selection must move from record to record within one answer)
    aggregate   many occurrences '#KEY;' of a dozen words; '?:KEY;' asks for the most frequent,
                which occurs 1.5 times as often as the next
    frequent    the same words; '?.:K1.K2.K3;' asks for the three most frequent, most frequent
                first, each 1.5 times as frequent as the next (RULER's frequent words extraction:
                one answer needs the counts of three words, so more of the context at once)

Each generator takes (rng, n_chars) and returns (text, answer_offsets) of exactly n_chars
characters (n_chars + 1 tokens with BOS). Sizes grow with the length like recall's. The held-out
test sets draw from their own seed stream per task ("sift-retrieval-test-TASK-SEED"; recall keeps
task.py's), never from a training stream.

`python3 ruler_tasks.py --help`: print samples, self-check, write and check test sets.
"""

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import task  # noqa: E402

KEY_LEN, VAL_LEN, RECORD_LEN = task.KEY_LEN, task.VAL_LEN, task.RECORD_LEN
WORD_LEN = 1 + KEY_LEN + 1  # '#KEY;'


def _value(rng):
    return "%03d" % rng.randrange(10 ** VAL_LEN)


def _keys(rng, n, used):
    """n distinct keys not in used (added to it)."""
    out = []
    while len(out) < n:
        k = task.key_string(rng.randrange(task.N_KEYS))
        if k not in used:
            used.add(k)
            out.append(k)
    return out


def _haystack(rng, items, n_chars):
    """The items (strings) in the given order at uniformly random, non-overlapping places in n_chars
    characters of filler: (text, start offsets of the items)."""
    free = n_chars - sum(len(s) for s in items)
    if free < 0:
        raise ValueError("%d characters cannot hold %d characters of records" % (n_chars, n_chars - free))
    cuts = sorted(rng.randrange(free + 1) for _ in items)
    fill = task.filler(rng, free)
    parts, starts, prev, pos = [], [], 0, 0
    for cut, item in zip(cuts, items):
        parts.append(fill[prev:cut])
        pos += cut - prev
        starts.append(pos)
        parts.append(item)
        pos += len(item)
        prev = cut
    parts.append(fill[prev:])
    return "".join(parts), starts


def _tail(queries):
    """The queries' text, from a list of (prefix, answer parts, separator), each written prefix +
    parts joined by separator + ';', and the offsets (in that text) of the parts' characters."""
    tail, offsets, pos = [], [], 0
    for prefix, parts, sep in queries:
        pos += len(prefix)
        for i, p in enumerate(parts):
            pos += len(sep) if i else 0
            offsets.extend(range(pos, pos + len(p)))
            pos += len(p)
        pos += 1
        tail.append(prefix + sep.join(parts) + ";")
    return "".join(tail), offsets


def _finish(rng, n_chars, records, queries):
    """A sample of its records, placed in a random order, then its queries (as _tail takes them):
    (text, answer offsets)."""
    tail, offsets = _tail(queries)
    hay_chars = n_chars - len(tail)
    records = list(records)
    rng.shuffle(records)
    hay, _ = _haystack(rng, records, hay_chars)
    return hay + tail, [hay_chars + o for o in offsets]


# ---- the tasks ----------------------------------------------------------------------------------

FAMILY = 4  # near-duplicate keys per family (at least)


def multikey_sample(rng, n_chars):
    """Recall whose keys come in families that differ in one character (recall's record and query
    counts). Values within a family are distinct, so a neighbour's value is always wrong."""
    n_records, n_queries = task.counts_for_length(n_chars)
    n_families = max(1, n_records // FAMILY)  # of FAMILY keys, a few of one more (fewer in short samples)
    sizes = [n_records // n_families + (i < n_records % n_families) for i in range(n_families)]
    used, keyed = set(), []
    for size in sizes:
        while True:
            base = list(task.key_string(rng.randrange(task.N_KEYS)))
            at = rng.randrange(KEY_LEN)
            family = []
            for c in rng.sample(task.KEY_CHARS, size):
                base[at] = c
                family.append("".join(base))
            if not used.intersection(family):
                break
        used.update(family)
        vals = rng.sample(range(10 ** VAL_LEN), size)
        keyed.extend((k, "%03d" % v) for k, v in zip(family, vals))
    asked = rng.sample(keyed, n_queries)
    return _finish(rng, n_chars, ["#%s:%s;" % kv for kv in keyed], [("?%s:" % k, [v], "") for k, v in asked])


def multivalue_counts(n_chars):
    """(values per asked key, asked keys, single-valued distractor records): 2 values below 1K
    characters, 3 to 2K, then 4; one asked key per 1K (at most 16)."""
    n_values = max(2, min(4, 2 + n_chars // 1024))
    n_queries = max(1, min(16, n_chars // 1024))
    n_records = max(n_queries * n_values + 1, min(256, n_chars // 80))
    return n_values, n_queries, n_records - n_queries * n_values


def multivalue_sample(rng, n_chars):
    """Keys with several values: value i of each asked key lies in part i of the haystack (cut into
    as many parts as values), so that the values of a key are spread over the whole context."""
    n_values, n_queries, n_distract = multivalue_counts(n_chars)
    used = set()
    asked = _keys(rng, n_queries, used)
    vals = {k: [_value(rng) for _ in range(n_values)] for k in asked}
    distract = ["#%s:%s;" % (k, _value(rng)) for k in _keys(rng, n_distract, used)]
    tail, offsets = _tail([("?%s:" % k, vals[k], ":") for k in rng.sample(asked, n_queries)])
    hay_chars = n_chars - len(tail)
    # Part i: value i of every asked key and an even share of the distractors; the filler is
    # shared evenly too, so the parts are about equally long.
    parts = [["#%s:%s;" % (k, vals[k][i]) for k in asked] for i in range(n_values)]
    for j, d in enumerate(distract):
        parts[j % n_values].append(d)
    free = hay_chars - sum(len(s) for p in parts for s in p)
    if free < 0:
        raise ValueError("multivalue sample of %d characters is too short" % n_chars)
    hay = []
    for i, p in enumerate(parts):
        rng.shuffle(p)
        share = free // n_values + (1 if i < free % n_values else 0)
        hay.append(_haystack(rng, p, share + sum(len(s) for s in p))[0])
    return "".join(hay) + tail, [hay_chars + o for o in offsets]


def multiquery_counts(n_chars):
    """(keys per query, queries, records): 2 keys per query below 1K characters, 3 to 2K, then 4;
    one query per 1K (at most 8); records as recall's."""
    per_query = max(2, min(4, 2 + n_chars // 1024))
    n_queries = max(1, min(8, n_chars // 1024))
    n_records = max(n_queries * per_query + 1, min(256, n_chars // 80))
    return per_query, n_queries, n_records


def multiquery_sample(rng, n_chars):
    """Queries of several keys each: every key asked once, the answers one after another."""
    per_query, n_queries, n_records = multiquery_counts(n_chars)
    keys = _keys(rng, n_records, set())
    vals = {k: _value(rng) for k in keys}
    asked = rng.sample(keys, per_query * n_queries)
    queries = []
    for q in range(n_queries):
        ks = asked[q * per_query:(q + 1) * per_query]
        queries.append(("?" + ".".join(ks) + ":", [vals[k] for k in ks], "."))
    return _finish(rng, n_chars, ["#%s:%s;" % (k, vals[k]) for k in keys], queries)


def vartrack_counts(n_chars):
    """(asked chains, records in all): one asked chain per 512 characters (at most 16); records as
    recall's, at least three per asked chain and one more."""
    n_queries = max(1, min(16, n_chars // 512))
    n_records = max(3 * n_queries + 1, min(256, n_chars // 80))
    return n_queries, n_records


def _chain(keys, val):
    return ["#%s:%s;" % (keys[i], keys[i + 1]) for i in range(len(keys) - 1)] + ["#%s:%s;" % (keys[-1], val)]


def vartrack_sample(rng, n_chars):
    """Variable tracking: each asked chain has two or three records (two where the sample has no
    room for three), the distractor chains one to three; all records in a random order. A query
    '?K1:K2:K3:VAL;' is answered by the chain's walk: each part is the right side of the record of
    the key before it, so that one hop is asked per part (six layers did not learn two or three
    hops within one token: the gate window's accuracy stayed at 0.82-0.90 at 465 tokens)."""
    n_queries, n_records = vartrack_counts(n_chars)
    hops = [rng.choice((2, 3)) for _ in range(n_queries)]
    query_len = 1 + KEY_LEN + 1 + 3 * (VAL_LEN + 1)  # '?K1:K2:K3:VAL;', the longest
    room = (n_chars - query_len * n_queries) // RECORD_LEN  # records that fit beside the queries
    n_records = min(n_records, room)
    for i in range(n_queries):
        if sum(hops) + 1 > n_records and hops[i] == 3:
            hops[i] = 2
    if sum(hops) + 1 > n_records:
        raise ValueError("vartrack sample of %d characters is too short" % n_chars)
    distract_hops, left = [], n_records - sum(hops)
    while left > 0:
        h = min(left, rng.choice((1, 2, 3)))
        distract_hops.append(h)
        left -= h
    used, records, asked = set(), [], []
    for i, h in enumerate(hops + distract_hops):
        keys, val = _keys(rng, h, used), _value(rng)
        records.extend(_chain(keys, val))
        if i < n_queries:
            asked.append((keys[0], keys[1:] + [val]))
    return _finish(rng, n_chars, records, [("?%s:" % k, walk, ":") for k, walk in asked])


def aggregate_counts(n_chars):
    """(occurrences, words): one occurrence per 40 characters (3 to 400), a word per 8 of them
    (2 to 12)."""
    n_occ = max(3, min(400, n_chars // 40))
    return n_occ, max(2, min(12, n_occ // 8))


def _word_sample(rng, n_chars, n_occ, fixed, cap, n_words, query):
    """A sample of word occurrences '#KEY;': n_words words, the first len(fixed) occurring as often
    as fixed says, the others from 1 up to cap, grown one at a time at random until n_occ
    occurrences are placed or the draws run out (a sample may have fewer); then one query (prefix,
    n, separator) for the n most frequent words, in order."""
    counts = list(fixed) + [1] * (n_words - len(fixed))
    for _ in range(n_occ - sum(counts)):
        i = rng.randrange(len(fixed), n_words) if n_words > len(fixed) else None
        if i is None or counts[i] >= cap:
            continue  # full
        counts[i] += 1
    words = _keys(rng, n_words, set())
    occ = [w for w, c in zip(words, counts) for _ in range(c)]
    prefix, n, sep = query
    return _finish(rng, n_chars, ["#%s;" % w for w in occ], [(prefix, words[:n], sep)])


def aggregate_sample(rng, n_chars):
    """Word counts: the most frequent word a quarter of the occurrences (at least 2), the next
    2/3 as many (rounded down, at least 1), the others between 1 and that; one '?:' query."""
    n_occ, n_words = aggregate_counts(n_chars)
    top = max(2, n_occ // 4)
    second = max(1, 2 * top // 3)
    return _word_sample(rng, n_chars, n_occ, [top, second], second, n_words, ("?:", 1, ""))


TOP_WORDS = 3  # the words '?.:' asks for


def frequent_sample(rng, n_chars):
    """Word counts as aggregate's, but three ranked: the most frequent a quarter of the occurrences
    (at least 3), the next two each 2/3 of the one before (rounded down, at least 2 and 1), the
    others between 1 and 2/3 of the third (none where that is 0); one '?.:' query for the three,
    most frequent first."""
    n_occ, n_words = aggregate_counts(n_chars)
    counts = [max(TOP_WORDS, n_occ // 4)]
    for floor in range(TOP_WORDS - 1, 0, -1):
        counts.append(max(floor, 2 * counts[-1] // 3))
    cap = 2 * counts[-1] // 3  # the others' most
    n_words = max(TOP_WORDS, n_words) if cap >= 1 else TOP_WORDS
    return _word_sample(rng, n_chars, n_occ, counts, cap, n_words, ("?.:", TOP_WORDS, "."))


GENERATORS = {
    "recall": task.recall_sample,
    "multikey": multikey_sample,
    "multivalue": multivalue_sample,
    "multiquery": multiquery_sample,
    "vartrack": vartrack_sample,
    "aggregate": aggregate_sample,
    "frequent": frequent_sample,
}
NAMES = list(GENERATORS)


def min_chars(name):
    """The shortest sample the task makes (the training curriculum adds a task from this length)."""
    n = 1
    while True:
        try:
            GENERATORS[name](random.Random(0), n)
            return n
        except ValueError:
            n += 1


# ---- reading a sample back ----------------------------------------------------------------------

def parse(text):
    """The records, words and queries of a text: {'records': [(offset, key, x)], 'words':
    [(offset, word)], 'queries': [(offset, keys, answer offset)], 'top': {offset: n}} (keys: a
    list, empty for the word queries '?:' and '?.:', which ask for the n = 1 and TOP_WORDS most
    frequent words). Raises ValueError where the text is not in the tasks' syntax."""
    records, words, queries, top = [], [], [], {}
    i, n = 0, len(text)
    upper, digits = set(task.KEY_CHARS), set(task.VAL_CHARS)
    while i < n:
        c = text[i]
        if c == "#":
            key = text[i + 1:i + 1 + KEY_LEN]
            if len(key) != KEY_LEN or not set(key) <= upper:
                raise ValueError("bad key at %d" % i)
            j = i + 1 + KEY_LEN
            if text[j:j + 1] == ";":
                words.append((i, key))
                i = j + 1
            elif text[j:j + 1] == ":":
                x = text[j + 1:j + 1 + VAL_LEN]
                if len(x) != VAL_LEN or not (set(x) <= upper or set(x) <= digits):
                    raise ValueError("bad record value at %d" % i)
                if text[j + 1 + VAL_LEN:j + 2 + VAL_LEN] != ";":
                    raise ValueError("record at %d not closed" % i)
                records.append((i, key, x))
                i = j + 2 + VAL_LEN
            else:
                raise ValueError("bad record at %d" % i)
        elif c == "?":
            keys, j = [], i + 1
            if text[j:j + 2] == ".:":  # '?.:' the TOP_WORDS most frequent words
                top[i] = TOP_WORDS
                j += 1
            elif text[j:j + 1] == ":":
                top[i] = 1
            while text[j:j + 1] != ":":
                key = text[j:j + KEY_LEN]
                if len(key) != KEY_LEN or not set(key) <= upper:
                    raise ValueError("bad query key at %d" % j)
                keys.append(key)
                j += KEY_LEN
                if text[j:j + 1] == ".":
                    j += 1
            end = text.find(";", j)
            if end < 0:
                raise ValueError("query at %d not closed" % i)
            queries.append((i, keys, j + 1))
            i = end + 1
        elif c in task.FILLER_CHARS or c == ".":
            i += 1
        else:
            raise ValueError("character %r out of place at %d" % (c, i))
    return {"records": records, "words": words, "queries": queries, "top": top}


def resolve(records_of, key, seen=()):
    """The value a key's single record leads to, following keys (ValueError: none, several, a cycle)."""
    recs = records_of.get(key, [])
    if len(recs) != 1 or key in seen:
        raise ValueError("key %s: %d records%s" % (key, len(recs), ", cycle" if key in seen else ""))
    x = recs[0]
    return x if x.isdigit() else resolve(records_of, x, seen + (key,))


def walk(records_of, key, seen=()):
    """The answer parts of '?KEY:': the right side of every record of KEY in order, a key among them
    followed by its own walk (ValueError: no record, a cycle)."""
    recs = records_of.get(key, [])
    if not recs or key in seen:
        raise ValueError("key %s: %s" % (key, "a cycle" if key in seen else "no record"))
    parts = []
    for x in recs:
        parts.append(x)
        if not x.isdigit():
            parts.extend(walk(records_of, x, seen + (key,)))
    return parts


def expected(parsed):
    """Per query, the answer the shared reading gives: (answer offset, parts, separator)."""
    records_of = {}
    for _, k, x in parsed["records"]:
        records_of.setdefault(k, []).append(x)
    out = []
    for q, keys, at in parsed["queries"]:
        if not keys:  # '?:' and '?.:': the n most frequent words, each count above the next
            n = parsed["top"][q]
            counts = {}
            for _, w in parsed["words"]:
                counts[w] = counts.get(w, 0) + 1
            ranked = sorted(counts.items(), key=lambda kv: -kv[1]) + [(None, 0)]
            if len(ranked) <= n or any(ranked[i][1] == ranked[i + 1][1] for i in range(n)):
                raise ValueError("no %d most frequent words" % n)
            out.append((at, [w for w, _ in ranked[:n]], "." if n > 1 else ""))
        elif len(keys) == 1:
            out.append((at, walk(records_of, keys[0]), ":"))
        else:
            out.append((at, [resolve(records_of, k) for k in keys], "."))
    return out


def check_sample(text, offsets):
    """Checks a sample of any task: the alphabet, the syntax, every query after every record, each
    query's continuation equal to the answer the shared reading gives, and the answer offsets
    exactly those answers' characters. Returns the parsed sample."""
    if not all(c in task.CHAR_TO_ID for c in text):
        raise ValueError("character outside the alphabet")
    p = parse(text)
    last = max([o for o, _, _ in p["records"]] + [o for o, _ in p["words"]] + [-1])
    want = []
    for (q, _, _), (at, parts, sep) in zip(p["queries"], expected(p)):
        if q < last:
            raise ValueError("query at %d before a record" % q)
        answer = sep.join(parts) + ";"
        if text[at:at + len(answer)] != answer:
            raise ValueError("query at %d: continuation %r, expected %r" % (q, text[at:at + len(answer)], answer))
        pos = at
        for i, part in enumerate(parts):
            pos += len(sep) if i else 0
            want.extend(range(pos, pos + len(part)))
            pos += len(part)
    if list(offsets) != want:
        raise ValueError("answer offsets differ from the answers' characters")
    return p


# ---- test sets ----------------------------------------------------------------------------------

def test_set(name, seed, lengths, per_length):
    """Held-out samples of a task: a list of (n_tokens, text, offsets), n_tokens = len(text) + 1 (BOS)
    being one of lengths. Their own seed stream per task; recall's is task.test_set's."""
    if name == "recall":
        return task.test_set(seed, lengths, per_length)
    rng = random.Random("sift-retrieval-test-%s-%d" % (name, seed))
    gen = GENERATORS[name]
    out = []
    for n_tokens in lengths:
        for _ in range(per_length):
            text, offsets = gen(rng, n_tokens - 1)
            out.append((n_tokens, text, offsets))
    return out


def test_file_name(name):
    """recall's test set keeps the name train.py has always written."""
    return "retrieval_test.txt" if name == "recall" else "%s_test.txt" % name


def write_test_set(path, name, samples):
    """task.write_test_set's format; the header names the task (recall's file is unchanged)."""
    if name == "recall":
        return task.write_test_set(path, samples)
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(task.TEST_HEADER % len(samples) + "; task " + name + "\n")
        for _, text, offsets in samples:
            f.write(text + "\n")
            f.write(" ".join(str(o) for o in offsets) + "\n")


def test_file_task(path):
    """The task named in a test file's header ('recall' where none is)."""
    with open(path, encoding="ascii") as f:
        head = f.readline().rstrip("\n")
    return head.split("; task ", 1)[1] if "; task " in head else "recall"


def write_test_sets(out_dir, names, seed, lengths, per_length):
    """Every named task's test set into out_dir: {task: path}."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name in names:
        path = os.path.join(out_dir, test_file_name(name))
        write_test_set(path, name, test_set(name, seed, lengths, per_length))
        paths[name] = path
    return paths


def parse_names(s):
    """'all' or a comma-separated list of task names."""
    names = NAMES if s == "all" else [x for x in s.split(",") if x]
    bad = [x for x in names if x not in GENERATORS]
    if bad or not names:
        raise ValueError("unknown task %s (tasks: %s, or all)" % (",".join(bad) or "''", ", ".join(NAMES)))
    return names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sample", help="print a sample of a task and its answer offsets")
    p.add_argument("task", choices=NAMES)
    p.add_argument("n_chars", type=int)
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("check", help="check every task's samples at many lengths")
    p.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("write-test-sets", help="write held-out test sets (one file per task) into a folder")
    p.add_argument("out_dir")
    p.add_argument("--tasks", default="all", help="comma-separated task names, or all (default)")
    p.add_argument("--seed", type=int, default=1, help="as train.py's --seed (default 1)")
    p.add_argument("--lengths", default="4096,8192,16384", help="sample lengths in tokens, BOS included")
    p.add_argument("--samples", type=int, default=16, help="samples per length")
    p = sub.add_parser("check-test-set", help="check every sample of a test file, of any task")
    p.add_argument("path")
    a = ap.parse_args(argv)
    if a.cmd == "sample":
        text, offsets = GENERATORS[a.task](random.Random(a.seed), a.n_chars)
        print(text)
        print(" ".join(map(str, offsets)))
    elif a.cmd == "check":
        n = 0
        rng = random.Random(a.seed)
        for name in NAMES:
            lo = min_chars(name)
            for n_chars in [lo, lo + 1, 63, 100, 511, 1000, 2047, 4095, 8191, 16383]:
                text, offsets = GENERATORS[name](rng, max(lo, n_chars))
                assert len(text) == max(lo, n_chars)
                check_sample(text, offsets)
                n += len(offsets)
        print("ruler_tasks.py check: ok (%d tasks, %d answer characters checked)" % (len(NAMES), n))
    elif a.cmd == "write-test-sets":
        lengths = [int(x) for x in a.lengths.split(",") if x]
        for name, path in write_test_sets(a.out_dir, parse_names(a.tasks), a.seed, lengths, a.samples).items():
            print("%s: %s" % (name, path))
    elif a.cmd == "check-test-set":
        name = test_file_task(a.path)
        samples = task.read_test_set(a.path)
        n = sum(len(check_sample(t, o)["queries"]) for t, o in samples)
        print("%s: task %s, %d samples, %d queries, all valid; lengths %s" % (
            a.path, name, len(samples), n, sorted(set(len(t) for t, _ in samples))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
