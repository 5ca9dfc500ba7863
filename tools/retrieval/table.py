#!/usr/bin/env python3
"""The selection table: `sift eval` on every task of ruler_tasks.py, per policy, budget and length.

For each task it writes the held-out test set (ruler_tasks.test_set: the same files as train.py
writes for the same --seed, lengths and samples), runs one `sift eval --retrieval FILE --json
--plot TASK.svg` over all policies and budgets (each sample prefilled once, every policy decoded
from the same prefill), and collects the results:

    OUT/table.json    every result line of sift eval (policy, budget, length, samples, answers,
                      accuracy), per task, with the command, model, date and commit; and for each
                      policy the gap to the oracle at the same budget (oracle minus policy, points)
    OUT/TASK.svg      sift eval's chart: accuracy on all the lengths against the budget, one line
                      per policy, dense flat (the title names the task)
    OUT/tests/        the test sets
    stdout            one Markdown table per task: accuracy (%) per policy and budget, all lengths

With --chunk N, each task's samples run N at a time (sift eval --skip, --samples), each run's
results kept in table.json as it ends and merged (answers summed, accuracy over all of them), so a
run stopped by a time limit keeps its finished chunks and --resume runs only the rest; no charts
then.

Stdlib only; needs the sift binary. Example (the full table, on a GPU machine):

    python3 tools/retrieval/table.py --sift build/tools/sift --model M.gguf --predictor P.butler.gguf \\
        --out OUT

and a quick look on the CPU (two lengths, two budgets, a few samples):

    python3 tools/retrieval/table.py --sift build/tools/sift --model tools/retrieval/model/retrieval.gguf \\
        --predictor tools/butler/predictors/retrieval.butler.gguf --backend cpu \\
        --lengths 1024,2048 --samples 3 --budgets 16,64 --out /tmp/table
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ruler_tasks  # noqa: E402

POLICIES = "dense,oracle,tokenselect,butler,quest,h2o,snapkv,streaming"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sift", required=True, help="the sift binary")
    ap.add_argument("--model", required=True, help="the retrieval model (GGUF)")
    ap.add_argument("--predictor", help="TokenButler's predictor for the model (butler runs only with one)")
    ap.add_argument("--out", required=True, help="folder for table.json, the charts and the test sets")
    ap.add_argument("--tasks", default="all", help="comma-separated tasks of ruler_tasks.py, or all (default)")
    ap.add_argument("--policies", default=POLICIES, help="sift eval's policies (default %s; butler left out "
                                                         "without --predictor)" % POLICIES)
    ap.add_argument("--budgets", default="16,32,64,128,256", help="budgets k (default 16,32,64,128,256)")
    ap.add_argument("--lengths", default="4096,8192,16384", help="sample lengths in tokens, BOS included")
    ap.add_argument("--samples", type=int, default=16, help="samples per length (default 16)")
    ap.add_argument("--seed", type=int, default=1, help="the test sets' seed, as train.py's --seed (default 1)")
    ap.add_argument("--backend", help="sift eval's --backend (default: its own choice)")
    ap.add_argument("--threads", help="sift eval's -t")
    ap.add_argument("--jobs", type=int, default=1,
                    help="tasks evaluated at once, one sift eval each (default 1)")
    ap.add_argument("--chunk", type=int, default=0,
                    help="samples per sift eval run (its --skip and --samples), each run's results kept in "
                         "table.json as soon as it ends, so that a run cut off loses only the chunk under way; "
                         "no charts then (default 0: all samples in one run, with its chart)")
    ap.add_argument("--resume", action="store_true",
                    help="with --chunk: keep the chunks that OUT/table.json holds from an earlier run of the same "
                         "settings and run only the others")
    ap.add_argument("--sink", type=int, default=4)
    ap.add_argument("--window", type=int, default=64)
    a = ap.parse_args(argv)
    policies = [p for p in a.policies.split(",") if p]
    if "butler" in policies and not a.predictor:
        if a.policies != POLICIES:
            ap.error("butler needs --predictor")
        policies.remove("butler")
    a.policy_list = policies
    try:
        a.task_list = ruler_tasks.parse_names(a.tasks)
    except ValueError as e:
        ap.error(str(e))
    a.length_list = [int(x) for x in a.lengths.split(",") if x]
    if a.chunk < 0 or (a.resume and not a.chunk):
        ap.error("--chunk must be positive, and --resume needs it")
    return a


def commit_of(path):
    """The git commit of the folder holding path, or None."""
    try:
        out = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(path)), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def run_eval(a, name, test_path, svg_path, skip=0, samples=0):
    """One sift eval over all policies and budgets of a task (samples [skip, skip + samples) of each
    length where samples > 0; a chart where svg_path is given): its JSON result lines and wall time."""
    cmd = [a.sift, "eval", "-m", a.model, "--retrieval", test_path, "--policies", ",".join(a.policy_list),
           "--budgets", a.budgets, "--sink", str(a.sink), "--window", str(a.window), "--json"]
    if svg_path:
        cmd += ["--plot", svg_path]
    if samples:
        cmd += ["--skip", str(skip), "--samples", str(samples)]
    if a.predictor and "butler" in a.policy_list:
        cmd += ["--predictor", a.predictor]
    if a.backend:
        cmd += ["--backend", a.backend]
    if a.threads:
        cmd += ["-t", a.threads]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit("table.py: %s failed (exit %d):\n%s" % (" ".join(cmd), proc.returncode, proc.stderr))
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not rows:
        raise SystemExit("table.py: %s printed no results" % " ".join(cmd))
    return cmd, rows, wall


SUMMED = ("samples", "answers", "sel_cache_hits", "sel_cache_steps", "warm_hits", "warm_misses")


def merge_rows(chunks):
    """The result lines of several sift eval runs over disjoint samples, as one run's: counts summed,
    accuracy over all the answers (each run's correct answers are its accuracy times its answers,
    printed to 4 decimals: exact below 5000 answers a run)."""
    merged, order = {}, []
    for rows in chunks:
        for r in rows:
            key = (r["policy"], r["budget"], r["length"])
            m = merged.get(key)
            if m is None:
                m = merged[key] = dict(r, correct=0, **{f: 0 for f in SUMMED if f in r})
                order.append(key)
            for f in SUMMED:
                if f in r:
                    m[f] += r[f]
            if r["accuracy"] is not None:
                m["correct"] += round(r["accuracy"] * r["answers"])
    out = []
    for key in order:
        m = merged.pop(key)
        m["accuracy"] = round(m.pop("correct") / m["answers"], 4) if m["answers"] else None
        out.append(m)
    return out


def run_chunks(a, name, test_path, done, save):
    """A task's samples in chunks of a.chunk, one sift eval each, skipping those in done (skip ->
    chunk record); save(name, chunk records) after each. Returns the records in order."""
    records = dict(done)
    for skip in range(0, a.samples, a.chunk):
        if skip not in records:
            n = min(a.chunk, a.samples - skip)
            cmd, rows, wall = run_eval(a, name, test_path, None, skip, n)
            records[skip] = {"skip": skip, "samples": n, "sift_eval": " ".join(cmd), "wall_s": round(wall, 1),
                             "results": rows}
            save(name, [records[k] for k in sorted(records)])
    return [records[k] for k in sorted(records)]


def retitle_svg(path, name, lengths):
    """Names the task and the lengths in the chart's title (sift eval's title names neither)."""
    with open(path, encoding="utf-8") as f:
        svg = f.read()
    old = ">sift eval: accuracy"
    if old in svg:
        tokens = "%d tokens" % lengths[0] if len(lengths) == 1 else "%s tokens" % ", ".join(map(str, lengths))
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg.replace(old, ">%s, %s: accuracy" % (name, tokens), 1))


def summarize(rows):
    """Accuracy over all lengths (answers-weighted, as the chart) per (policy, budget), and the gap to
    the oracle per (policy, budget, length) in points."""
    overall = {}
    for r in rows:
        c, n = overall.get((r["policy"], r["budget"]), (0.0, 0))
        if r["accuracy"] is not None:
            overall[(r["policy"], r["budget"])] = (c + r["accuracy"] * r["answers"], n + r["answers"])
    acc = {k: c / n for k, (c, n) in overall.items() if n}
    oracle = {(r["budget"], r["length"]): r["accuracy"] for r in rows if r["policy"] == "oracle"}
    gaps = []
    for r in rows:
        o = oracle.get((r["budget"], r["length"]))
        if r["policy"] not in ("dense", "oracle") and o is not None and r["accuracy"] is not None:
            gaps.append({"policy": r["policy"], "budget": r["budget"], "length": r["length"],
                         "gap_to_oracle_points": round(100.0 * (o - r["accuracy"]), 2)})
    return acc, gaps


def markdown(name, a, acc, budgets):
    lines = ["%s (%s tokens, %d samples each; accuracy on the answer characters, %%)" % (
        name, ", ".join(map(str, a.length_list)), a.samples), "",
        "| policy | " + " | ".join("k = %d" % k for k in budgets) + " |",
        "|---|" + "---:|" * len(budgets)]
    for p in a.policy_list:
        if p == "dense":
            cells = ["%.1f" % (100 * acc[(p, 0)])] * len(budgets) if (p, 0) in acc else ["-"] * len(budgets)
        else:
            cells = ["%.1f" % (100 * acc[(p, k)]) if (p, k) in acc else "-" for k in budgets]
        lines.append("| %s | %s |" % (p, " | ".join(cells)))
    return "\n".join(lines)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    test_dir = os.path.join(a.out, "tests")
    paths = ruler_tasks.write_test_sets(test_dir, a.task_list, a.seed, a.length_list, a.samples)
    budgets = [int(x) for x in a.budgets.split(",") if x]
    table = {"command": " ".join([os.path.basename(sys.executable), "tools/retrieval/table.py"] + (argv or sys.argv[1:])),
             "date": datetime.date.today().isoformat(), "commit": commit_of(__file__), "model": a.model,
             "predictor": a.predictor, "backend": a.backend, "sink": a.sink, "window": a.window,
             "budgets": budgets, "lengths": a.length_list, "samples_per_length": a.samples, "seed": a.seed,
             "tasks": {}}
    svgs = {name: os.path.join(a.out, "%s.svg" % name) for name in a.task_list}
    table_path = os.path.join(a.out, "table.json")
    lock = threading.Lock()

    def write_table(name=None, entry=None):  # after each task or chunk: a run cut off keeps those done
        # under the lock with the dump: with --jobs and --chunk, tasks' threads add their entries
        # while another thread's dump walks the dict
        with lock, open(table_path, "w") as f:
            if name is not None:
                table["tasks"][name] = entry
            json.dump(table, f, indent=1)

    def save_chunks(name, records):
        rows = merge_rows([c["results"] for c in records])
        write_table(name, {"test_set": paths[name], "chunk": a.chunk, "chunks": records,
                           "samples_done": sum(c["samples"] for c in records),
                           "wall_s": round(sum(c["wall_s"] for c in records), 1), "results": rows,
                           "gaps": summarize(rows)[1]})

    done = {name: {} for name in a.task_list}
    if a.resume and os.path.exists(table_path):
        with open(table_path) as f:
            old = json.load(f)
        same = all(old.get(k) == table[k] for k in ("model", "predictor", "budgets", "lengths", "samples_per_length",
                                                   "seed", "sink", "window"))
        for name, t in (old.get("tasks") or {}).items():
            if same and name in done and t.get("chunk") == a.chunk:
                done[name] = {c["skip"]: c for c in t.get("chunks", [])}
                table["tasks"][name] = t
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        if a.chunk:
            runs = {name: pool.submit(run_chunks, a, name, paths[name], done[name], save_chunks) for name in a.task_list}
        else:
            runs = {name: pool.submit(run_eval, a, name, paths[name], svgs[name]) for name in a.task_list}
        for name in a.task_list:  # reported in the tasks' order, each as soon as it and those before it end
            if a.chunk:
                records = runs[name].result()
                save_chunks(name, records)
                rows, wall, chart = table["tasks"][name]["results"], table["tasks"][name]["wall_s"], "none: --chunk"
            else:
                cmd, rows, wall = runs[name].result()
                retitle_svg(svgs[name], name, a.length_list)
                write_table(name, {"test_set": paths[name], "sift_eval": " ".join(cmd), "wall_s": round(wall, 1),
                                   "results": rows, "gaps": summarize(rows)[1]})
                chart = svgs[name]
            print(markdown(name, a, summarize(rows)[0], budgets) + "\n", flush=True)
            print("(%s: %.0f s; chart %s)\n" % (name, wall, chart), file=sys.stderr, flush=True)
    table["tasks"] = {name: table["tasks"][name] for name in a.task_list if name in table["tasks"]}
    write_table()
    print("table.py: wrote %s and %d charts" % (table_path, 0 if a.chunk else len(a.task_list)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
