#!/usr/bin/env python3
"""The retrieval tasks (tools/retrieval/ruler_tasks.py) and, given a sift binary, the table's wiring
(tools/retrieval/table.py running `sift eval`). Stdlib only.

usage: retrieval_tasks_test.py SOURCE_ROOT [SIFT]

Generators: exact lengths, deterministic test sets per seed, recall's test set byte-equal to the
shipped one, every answer present in its context (an independent reading of the text gives the
continuation), and each task's own property (near-duplicate keys one character apart, values in
order and spread, several keys per query, chains of two or three records, a most frequent word
1.5 times as frequent as the next); the checker rejects corrupted samples. Table: on the shipped
model, CPU backend, 512-token samples: a result for every task, policy, budget and length, dense
and the oracle right on recall where streaming loses answers, and a chart per task; in chunks of
samples (--chunk) the same results merged, and --resume runs only the chunks a cut-off run lacks."""

import collections
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
SIFT = sys.argv[2] if len(sys.argv) > 2 else None
sys.path.insert(0, os.path.join(ROOT, "tools", "retrieval"))
import ruler_tasks as R  # noqa: E402
import task  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def hamming(a, b):
    return sum(x != y for x, y in zip(a, b))


# ---- every task: lengths, syntax, answers, determinism ------------------------------------------

for name in R.NAMES:
    lo = R.min_chars(name)
    # a task joins the training curriculum (which starts at 39 characters) once its samples fit
    check(lo <= 48, "%s: shortest sample %d characters (the curriculum starts at 39)" % (name, lo))
    try:
        R.GENERATORS[name](random.Random(0), lo - 1)
        check(False, "%s: a sample of %d characters, below its minimum %d" % (name, lo - 1, lo))
    except ValueError:
        pass
    rng = random.Random("test-" + name)
    for n_chars in (lo, 100, 1000, 4095):
        for _ in range(3):
            text, offsets = R.GENERATORS[name](rng, n_chars)
            check(len(text) == n_chars, "%s: %d characters asked, %d made" % (name, n_chars, len(text)))
            check(all(c in task.CHAR_TO_ID for c in text), "%s: a character outside the vocabulary" % name)
            check(len(offsets) % 3 == 0 and offsets, "%s: answers in parts of three characters" % name)
            try:
                R.check_sample(text, offsets)
            except ValueError as e:
                check(False, "%s at %d: %s" % (name, n_chars, e))
    a = R.test_set(name, 1, [300, 600], 2)
    check(a == R.test_set(name, 1, [300, 600], 2), "%s: test set not deterministic" % name)
    check(a != R.test_set(name, 2, [300, 600], 2), "%s: test set the same for another seed" % name)
    check([n for n, _, _ in a] == [300, 300, 600, 600] and all(len(t) == n - 1 for n, t, _ in a),
          "%s: test set lengths" % name)

# recall's test set: the one the shipped model was evaluated on, byte for byte
with tempfile.TemporaryDirectory() as tmp:
    paths = R.write_test_sets(tmp, R.NAMES, 1, [4096, 8192, 16384], 16)
    with open(paths["recall"], "rb") as f, open(os.path.join(ROOT, "tools/retrieval/model/retrieval_test.txt"), "rb") as g:
        check(f.read() == g.read(), "recall: test set differs from tools/retrieval/model/retrieval_test.txt")
    for name, path in paths.items():
        check(R.test_file_task(path) == name, "%s: the file's header names %s" % (name, R.test_file_task(path)))
        samples = task.read_test_set(path)
        check(len(samples) == 48, "%s: %d samples read back" % (name, len(samples)))
        for text, offsets in samples:
            R.check_sample(text, offsets)

# the checker is not vacuous: a wrong answer digit, shifted offsets and a query before a record fail
text, offsets = R.multivalue_sample(random.Random(5), 2000)
bad = text[:offsets[4]] + str((int(text[offsets[4]]) + 1) % 10) + text[offsets[4] + 1:]
for t, o, what in ((bad, offsets, "a changed answer digit"), (text, [x + 1 for x in offsets], "shifted offsets"),
                   ("?ABC:123;#ABC:123;", [5, 6, 7], "a query before its record")):
    try:
        R.check_sample(t, o)
        check(False, "check_sample accepted %s" % what)
    except ValueError:
        pass

# ---- each task's own property, on its 4K and 16K test samples ---------------------------------


def records_of(p):
    d = collections.defaultdict(list)
    for pos, k, x in p["records"]:
        d[k].append((pos, x))
    return d


for n_tokens, text, offsets in R.test_set("multikey", 1, [4096, 16384], 4):
    p = R.parse(text)
    keys = set(k for _, k, _ in p["records"])
    recs = records_of(p)
    for _, (k,), _ in p["queries"]:
        near = [o for o in keys if hamming(o, k) == 1]
        check(len(near) >= 3, "multikey: %s has %d keys one character apart" % (k, len(near)))
        check(all(recs[o][0][1] != recs[k][0][1] for o in near), "multikey: a near duplicate of %s has its value" % k)

for n_tokens, text, offsets in R.test_set("multivalue", 1, [4096, 16384], 4):
    p = R.parse(text)
    recs = records_of(p)
    hay = p["queries"][0][0]
    for _, (k,), _ in p["queries"]:
        pos = [q for q, _ in recs[k]]
        check(len(pos) == 4, "multivalue: %s has %d values at %d tokens" % (k, len(pos), n_tokens))
        # value i in the i-th quarter of the haystack, give or take a record
        check(all(abs(q - i * hay / len(pos)) < hay / len(pos) + 2 * R.RECORD_LEN for i, q in enumerate(pos)),
              "multivalue: values of %s not spread over the haystack: %s of %d" % (k, pos, hay))
        check(min(b - a for a, b in zip(pos, pos[1:])) >= R.RECORD_LEN, "multivalue: values of %s overlap" % k)
    check(len(recs) > len(p["queries"]), "multivalue: no distractor records")

for n_tokens, text, offsets in R.test_set("multiquery", 1, [4096, 16384], 4):
    p = R.parse(text)
    asked = [k for _, ks, _ in p["queries"] for k in ks]
    check(all(len(ks) == 4 for _, ks, _ in p["queries"]), "multiquery: a query without four keys")
    check(len(set(asked)) == len(asked), "multiquery: a key asked twice")
    check(len(p["queries"]) >= 3, "multiquery: %d queries at %d tokens" % (len(p["queries"]), n_tokens))

hops_seen = collections.Counter()
for n_tokens, text, offsets in R.test_set("vartrack", 1, [4096, 16384], 4):
    p = R.parse(text)
    recs = records_of(p)
    on_chains = 0
    for _, (k,), _ in p["queries"]:
        hops, x, places = 1, recs[k][0][1], [recs[k][0][0]]
        while not x.isdigit():
            places.append(recs[x][0][0])
            x = recs[x][0][1]
            hops += 1
        hops_seen[hops] += 1
        on_chains += hops
        check(hops in (2, 3), "vartrack: a chain of %d records asked" % hops)
        check(min(abs(a - b) for a in places for b in places if a != b) >= R.RECORD_LEN,
              "vartrack: records of a chain overlap")
    check(len(p["records"]) > on_chains, "vartrack: no distractor chains")
check(hops_seen[2] > 0 and hops_seen[3] > 0, "vartrack: chains of two and three records both asked: %s" % hops_seen)

for n_tokens, text, offsets in R.test_set("aggregate", 1, [4096, 16384], 4):
    p = R.parse(text)
    counts = sorted(collections.Counter(w for _, w in p["words"]).values(), reverse=True)
    check(len(counts) >= 10, "aggregate: %d words at %d tokens" % (len(counts), n_tokens))
    check(counts[0] >= 1.5 * counts[1], "aggregate: counts %s: the most frequent not 1.5 times the next" % counts[:3])
    check(len(p["queries"]) == 1 and text[offsets[0]:offsets[-1] + 1] == max(
        set(w for _, w in p["words"]), key=lambda w: sum(1 for _, v in p["words"] if v == w)),
        "aggregate: the answer is not the most frequent word")

for n_tokens, text, offsets in R.test_set("frequent", 1, [4096, 16384], 4):
    p = R.parse(text)
    counts = collections.Counter(w for _, w in p["words"])
    ranked = sorted(counts.values(), reverse=True)
    check(len(ranked) >= 10, "frequent: %d words at %d tokens" % (len(ranked), n_tokens))
    check(all(ranked[i] >= 1.5 * ranked[i + 1] for i in range(3)),
          "frequent: counts %s: each of the three most frequent not 1.5 times the next" % ranked[:4])
    answer = text[offsets[0]:offsets[-1] + 1].split(".")
    check(len(p["queries"]) == 1 and text[p["queries"][0][0]:p["queries"][0][0] + 3] == "?.:" and
          [counts[w] for w in answer] == ranked[:3], "frequent: the answer %s is not the three most frequent" % answer)

print("generators: %s" % ("ok" if not failures else "%d failures" % len(failures)))

# ---- the table through sift eval ---------------------------------------------------------------

if SIFT:
    model = os.path.join(ROOT, "tools/retrieval/model/retrieval.gguf")
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, os.path.join(ROOT, "tools/retrieval/table.py"), "--sift", SIFT, "--model", model,
               "--backend", "cpu", "--tasks", "recall,vartrack", "--policies", "dense,oracle,streaming",
               "--budgets", "16,32", "--lengths", "512", "--samples", "2", "--jobs", "2", "--out", out]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        check(proc.returncode == 0, "table.py exit %d: %s" % (proc.returncode, proc.stderr[-2000:]))
        if proc.returncode == 0:
            with open(os.path.join(out, "table.json")) as f:
                table = json.load(f)
            # two tasks at once (--jobs 2), reported in the order given
            check(list(table["tasks"]) == ["recall", "vartrack"], "tasks in table.json: %s" % list(table["tasks"]))
            for name in ("recall", "vartrack"):
                rows = table["tasks"][name]["results"]
                got = sorted((r["policy"], r["budget"], r["length"]) for r in rows)
                want = sorted([("dense", 0, 512)] + [(p, k, 512) for p in ("oracle", "streaming") for k in (16, 32)])
                check(got == want, "%s: results %s" % (name, got))
                check(all(r["samples"] == 2 and r["answers"] > 0 for r in rows), "%s: samples or answers missing" % name)
                with open(os.path.join(out, name + ".svg")) as f:
                    svg = f.read()
                check(svg.startswith("<svg") and ">%s, 512 tokens: accuracy" % name in svg, "%s: chart title" % name)
            acc = {(r["policy"], r["budget"]): r["accuracy"] for r in table["tasks"]["recall"]["results"]}
            # the shipped model answers recall densely; the oracle keeps what it needs at k = 16;
            # sink and window alone lose records
            check(acc[("dense", 0)] == 1.0, "recall: dense accuracy %s at 512 tokens" % acc[("dense", 0)])
            check(acc[("oracle", 16)] == 1.0, "recall: oracle accuracy %s at k = 16" % acc[("oracle", 16)])
            check(acc[("streaming", 16)] < 0.8, "recall: streaming accuracy %s at k = 16" % acc[("streaming", 16)])
            gaps = {(g["policy"], g["budget"]): g["gap_to_oracle_points"] for g in table["tasks"]["recall"]["gaps"]}
            check(abs(gaps[("streaming", 16)] - 100 * (acc[("oracle", 16)] - acc[("streaming", 16)])) < 0.01,
                  "recall: gap to the oracle %s" % gaps)
        # in chunks of samples (--chunk), merged: the same results; --resume runs only the chunks missing
        chunked = os.path.join(out, "chunked")
        base = [sys.executable, os.path.join(ROOT, "tools/retrieval/table.py"), "--sift", SIFT, "--model", model,
                "--backend", "cpu", "--tasks", "recall", "--policies", "dense,oracle,streaming", "--budgets", "16,32",
                "--lengths", "512", "--samples", "3", "--chunk", "2", "--out", chunked]
        proc = subprocess.run(base, capture_output=True, text=True)
        check(proc.returncode == 0, "table.py --chunk exit %d: %s" % (proc.returncode, proc.stderr[-2000:]))
        if proc.returncode == 0:
            whole = subprocess.run([sys.executable, os.path.join(ROOT, "tools/retrieval/table.py"), "--sift", SIFT,
                                    "--model", model, "--backend", "cpu", "--tasks", "recall", "--policies",
                                    "dense,oracle,streaming", "--budgets", "16,32", "--lengths", "512", "--samples", "3",
                                    "--out", os.path.join(out, "whole")], capture_output=True, text=True)
            path = os.path.join(chunked, "table.json")

            def results(p):
                with open(p) as f:
                    t = json.load(f)["tasks"]["recall"]
                return t, sorted((r["policy"], r["budget"], r["samples"], r["answers"], r["accuracy"]) for r in t["results"])

            t, got = results(path)
            _, want = results(os.path.join(out, "whole", "table.json"))
            check(whole.returncode == 0 and got == want, "chunks of 2 of 3 samples merged: %s, in one run: %s" % (got, want))
            check([c["skip"] for c in t["chunks"]] == [0, 2] and t["samples_done"] == 3, "chunks %s" % t["chunks"])
            # a run cut off after its first chunk, resumed: only the second chunk runs again
            with open(path) as f:
                table = json.load(f)
            table["tasks"]["recall"]["chunks"] = table["tasks"]["recall"]["chunks"][:1]
            table["tasks"]["recall"]["chunks"][0]["wall_s"] = -1.0  # a mark: a chunk run again would not keep it
            with open(path, "w") as f:
                json.dump(table, f)
            proc = subprocess.run(base + ["--resume"], capture_output=True, text=True)
            t, got = results(path)
            check(proc.returncode == 0 and got == want, "resumed: %s" % got)
            check(t["chunks"][0]["wall_s"] == -1.0 and t["chunks"][1]["wall_s"] > 0 and len(t["chunks"]) == 2,
                  "resumed: the first chunk kept, the second run again")
    print("table: %s" % ("ok" if not failures else "see failures above"))

sys.exit(1 if failures else 0)
