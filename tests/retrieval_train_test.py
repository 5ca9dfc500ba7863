#!/usr/bin/env python3
"""The retrieval model's trainer (tools/retrieval/train.py) on the CPU in its smoke configuration:
the recall recipe, then a mixture of every task started from that model's GGUF, then its resume.
Exit 77 (skipped) where this python cannot import torch.

usage: retrieval_train_test.py SOURCE_ROOT

Checks: the files each run writes; a model initialised from a GGUF and not trained exports the same
tensors and scores the same recall answers as the model it came from; a mixture trains, logs each
task's accuracy, writes and evaluates one valid test set per task; a GGUF of another model config,
an unknown task and --init-gguf with --resume are refused."""

import json
import os
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError:
    print("torch not importable: skipped")
    sys.exit(77)

ROOT = sys.argv[1]
TRAIN = os.path.join(ROOT, "tools", "retrieval", "train.py")
sys.path.insert(0, os.path.join(ROOT, "tools", "retrieval"))
import gguf_writer  # noqa: E402
import ruler_tasks  # noqa: E402
import task  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def train(*args):
    proc = subprocess.run([sys.executable, TRAIN, "--smoke"] + list(args), capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def load(path):
    with open(path) as f:
        return json.load(f)


with tempfile.TemporaryDirectory() as tmp:
    a, b, c = (os.path.join(tmp, x) for x in "abc")

    rc, out = train("--out", a)
    check(rc == 0, "recall smoke run: exit %d\n%s" % (rc, out[-3000:]))
    for name in ("checkpoint.pt.0", "retrieval.gguf", "retrieval_test.txt", "retrieval_eval.json",
                 "reference_logits.json", "train.log"):
        check(os.path.exists(os.path.join(a, name)), "recall smoke run: no %s" % name)
    ev_a = load(os.path.join(a, "retrieval_eval.json"))
    check(set(ev_a["results"]) == {"128", "256"} and "tasks" not in ev_a, "recall smoke run: eval %s" % ev_a)
    check(gguf_writer.GGUFFile(os.path.join(a, "retrieval.gguf")).metadata["general.name"] == "sift-retrieval-smoke",
          "recall smoke run: model name")

    # initialised from a's GGUF, no training: the same weights, the same recall answers
    rc, out = train("--out", b, "--tasks", "all", "--init-gguf", os.path.join(a, "retrieval.gguf"), "--time-budget", "0")
    check(rc == 0, "init run: exit %d\n%s" % (rc, out[-3000:]))
    check("initialised from" in out, "init run: no 'initialised from' line")
    ta = gguf_writer.GGUFFile(os.path.join(a, "retrieval.gguf")).tensors
    tb = gguf_writer.GGUFFile(os.path.join(b, "retrieval.gguf")).tensors
    check(ta.keys() == tb.keys() and all(ta[k][2] == tb[k][2] for k in ta), "init run: tensors differ from the GGUF's")
    ev_b = load(os.path.join(b, "retrieval_eval.json"))
    check(ev_b.get("results") == ev_a["results"], "init run: recall eval %s, the GGUF's model %s" % (
        ev_b.get("results"), ev_a["results"]))
    check(set(ev_b.get("tasks", {})) == set(ruler_tasks.NAMES), "init run: tasks evaluated %s" % list(ev_b.get("tasks", {})))

    # a mixture that trains: every task logged, tested and evaluated
    rc, out = train("--out", c, "--tasks", "all", "--init-gguf", os.path.join(a, "retrieval.gguf"), "--steps", "12")
    check(rc == 0, "mixture run: exit %d\n%s" % (rc, out[-3000:]))
    step_lines = [l for l in out.splitlines() if l.startswith("step ")]
    check(step_lines and all("| by task " in l for l in step_lines), "mixture run: step lines without per-task accuracy")
    ev_c = load(os.path.join(c, "retrieval_eval.json"))
    for name in ruler_tasks.NAMES:
        res = ev_c.get("tasks", {}).get(name, {})
        check(set(res) == {"128", "256"} and all(0.0 <= r["char_acc"] <= 1.0 and r["samples"] == 2 for r in res.values()),
              "mixture run: %s eval %s" % (name, res))
        path = os.path.join(c, ruler_tasks.test_file_name(name))
        samples = task.read_test_set(path)
        check(len(samples) == 4 and ruler_tasks.test_file_task(path) == name, "mixture run: %s test set" % name)
        for text, offsets in samples:
            ruler_tasks.check_sample(text, offsets)
    check(gguf_writer.GGUFFile(os.path.join(c, "retrieval.gguf")).metadata["general.name"] == "sift-retrieval-smoke",
          "mixture run: model name")

    # resumed without --tasks: the checkpoint's mixture goes on
    rc, out = train("--out", c, "--resume", os.path.join(c, "checkpoint.pt"), "--steps", "3", "--no-eval")
    check(rc == 0 and "resumed" in out and [l for l in out.splitlines() if l.startswith("step 15 ") and "| by task " in l],
          "mixture resume: exit %d\n%s" % (rc, out[-3000:]))

    # refusals
    shipped = os.path.join(ROOT, "tools", "retrieval", "model", "retrieval.gguf")
    for args, what, msg in (
            (["--init-gguf", shipped], "a GGUF of another config", "another model config"),
            (["--tasks", "recall,nosuch"], "an unknown task", "--tasks: bad item"),
            (["--tasks", "recall:0"], "a zero weight", "--tasks: bad item"),
            (["--init-gguf", shipped, "--resume", os.path.join(c, "checkpoint.pt")], "--init-gguf with --resume",
             "give one of them")):
        rc, out = train("--out", os.path.join(tmp, "refused"), *args)
        check(rc != 0 and msg in out, "%s: exit %d, output %s" % (what, rc, out[-500:]))

print("retrieval trainer: %s" % ("ok" if not failures else "%d failures" % len(failures)))
sys.exit(1 if failures else 0)
