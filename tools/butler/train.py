#!/usr/bin/env python3
"""Train sift's TokenButler predictor (SPEC.md section 5) for a frozen base model, and write it as GGUF.

The base is any GGUF that sift runs (llama, qwen2, mistral; F32, F16, BF16, Q8_0, Q4_0 weights),
read and run in torch by teacher.py. The predictor (butler.py) learns, from the residual stream
leaving every P-th layer, a d'-dimensional query per (consumer layer, query head), and per
consumer layer and KV head a projection of the real roped keys to d' dims, so that the student's
attention softmax(q'.kp / sqrt(d')) matches the model's own causal attention rows: the loss is the
cross-entropy between the two on a subsample of query rows (at most --max-rows from the last half
of each sequence, plus the last token), averaged over consumer layers and heads; AdamW with a
cosine learning-rate schedule. Held-out attention recall (teacher mass inside the student's top-k,
against the teacher's own top-k) is logged as it trains.

Data (one of):
  --text FILE     random windows of a text, tokenized by `SIFT tokenize` (needs --sift); each
                  window is BOS then --seq-len - 1 tokens; the last 5% of the text is held out
  --retrieval     tools/retrieval/task.py's recall samples (for its char-level retrieval model);
                  --retrieval-tasks draws each sample's task from ruler_tasks.py's instead
  --sample N      N sequences sampled from the base model itself (temperature --temperature), BOS
                  first; shorter lengths take their prefixes; --eval-seqs more are held out

Modes: --check-teacher SIFT compares the teacher's logits with `SIFT logits` (stories260K and the
retrieval model, plus copies of stories260K that exercise BF16/Q8_0/Q4_0 weights, the mistral and
qwen2 archs and every RoPE variant) and exits; --smoke runs that check and tiny trainings on the
CPU (about a minute), checks the files they write, and exits non-zero on failure (77: skipped).

Outputs: --out PRED.gguf, its log PRED.log (every line printed) and PRED.json (config and final
numbers). See README.md.
"""

import os
import sys
import time

T_START = time.time()
sys.dont_write_bytecode = True  # run from the source tree (the Meson test): leave no __pycache__ there
# One BLAS thread under torch's own: with OpenBLAS's threads on top of torch's, a small matrix
# product (a decode step's) took 30x longer on a two-core machine, for 10% on big ones.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

try:
    import numpy as np
    import torch
except ImportError as e:  # the Meson test skips where the Python stack is missing
    if "--smoke" in sys.argv:
        print("butler trainer smoke test skipped: cannot import torch and numpy (%s)" % e)
        sys.exit(77)
    raise

import argparse
import json
import math
import random
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "retrieval"))
import butler as bt  # noqa: E402
import task  # noqa: E402
import ruler_tasks  # noqa: E402
import teacher as tc  # noqa: E402

RETRIEVAL_MODEL = os.path.join(ROOT, "tools", "retrieval", "model", "retrieval.gguf")
STORY_PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


class Log:
    def __init__(self, path=None):
        self.f = open(path, "w", buffering=1) if path else None

    def __call__(self, msg):
        print(msg, flush=True)
        if self.f:
            self.f.write(msg + "\n")


# ---- data ---------------------------------------------------------------------------------------

def parse_lengths(spec):
    """'N' or 'MIN:MAX' (tokens, BOS included) -> (min, max)."""
    parts = [int(x) for x in str(spec).split(":")]
    lo, hi = (parts[0], parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    if len(parts) > 2 or lo < 4 or hi < lo:
        raise SystemExit("--seq-len: N or MIN:MAX with 4 <= MIN <= MAX, not %r" % spec)
    return lo, hi


def draw_length(rng, lo, hi):
    """A length log-uniform in [lo, hi], a multiple of 64 when the range allows (fewer shapes for
    the GPU to plan for)."""
    if lo == hi:
        return lo
    n = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    if hi - lo >= 64:
        n = max(lo, min(hi, n // 64 * 64))
    return n


class TextData:
    """Random windows of a token stream: BOS, then length - 1 consecutive tokens."""

    def __init__(self, tokens, bos, eval_len, eval_seqs, log):
        self.bos = bos
        tokens = np.asarray(tokens, dtype=np.int64)
        held = max(len(tokens) // 20, eval_len - 1)
        if len(tokens) - held < eval_len:
            raise SystemExit("the text is %d tokens: too short for windows of %d (and a held-out part)" % (
                len(tokens), eval_len))
        self.train, self.held = tokens[:-held], tokens[-held:]
        log("text: %d tokens, %d for training, %d held out" % (len(tokens), len(self.train), len(self.held)))
        rng = np.random.RandomState(12345)
        self.eval = [self._window(self.held, eval_len, rng) for _ in range(eval_seqs)]

    def _window(self, toks, length, rng):
        o = rng.randint(0, len(toks) - (length - 1) + 1)
        return np.concatenate([[self.bos], toks[o:o + length - 1]])

    def batch(self, length, n, rng):
        if length - 1 > len(self.train):
            raise SystemExit("windows of %d tokens do not fit the %d training tokens" % (length, len(self.train)))
        return torch.from_numpy(np.stack([self._window(self.train, length, rng) for _ in range(n)]))


class RetrievalData:
    """Samples of the retrieval tasks (task.py's recall, or ruler_tasks.py's): BOS, then length - 1
    characters of haystack, records and queries; each sample's task drawn evenly from `tasks`."""

    def __init__(self, eval_len, eval_seqs, seed, tasks=("recall",)):
        self.lut = np.array(task.byte_to_id_table(), dtype=np.int64)
        self.tasks = list(tasks)
        r = random.Random("sift-butler-eval-%d" % seed)
        self.eval = [self._seq(r, eval_len) for _ in range(eval_seqs)]
        self.py_rng = random.Random("sift-butler-train-%d" % seed)

    def _seq(self, r, length):
        # one task: the same draws as before the mixture existed
        name = self.tasks[0] if len(self.tasks) == 1 else r.choice(self.tasks)
        text, _ = ruler_tasks.GENERATORS[name](r, length - 1)
        return np.concatenate([[task.BOS_ID], self.lut[np.frombuffer(text.encode("ascii"), dtype=np.uint8)]])

    def batch(self, length, n, rng):
        return torch.from_numpy(np.stack([self._seq(self.py_rng, length) for _ in range(n)]))


class SampledData:
    """A pool of sequences the base model sampled itself, BOS first; a batch of length n takes
    prefixes (so every sequence starts at BOS, as a prompt does)."""

    def __init__(self, pool, eval_len, eval_seqs):
        self.train = pool[:len(pool) - eval_seqs]
        self.eval = [s[:eval_len].numpy() for s in pool[len(pool) - eval_seqs:]]

    def batch(self, length, n, rng):
        idx = rng.randint(0, len(self.train), size=n)
        return self.train[torch.from_numpy(idx), :length].clone()


def tokenize(sift, model, path):
    """The token ids of a text file by `SIFT tokenize` (no BOS: the windows get their own)."""
    res = subprocess.run([sift, "tokenize", "-m", model, "-f", path, "--no-bos"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True)
    if res.returncode != 0:
        raise SystemExit("%s tokenize failed (%d): %s" % (sift, res.returncode, res.stderr.strip()))
    return [int(x) for x in res.stdout.split()]


def is_retrieval_vocab(t):
    return t.file.metadata.get("tokenizer.ggml.tokens") == task.TOKENS


# ---- one batch through teacher and student --------------------------------------------------------

def run_batch(teacher, model, ids, rows, train, ks=()):
    """Distils one batch: the teacher's forward (no grad), then per producer its queries and per
    consumer layer the two attention-row distributions. With train, gradients are accumulated
    layer by layer (each layer's [B, Hq, R, T] score tensors are freed before the next: the
    producer's queries are cut from the graph and their gradient handed back once, at the end).
    Returns (CE and the teacher's entropy, each the mean over consumer layers; the recall sums
    {k: [student, kv-max, oracle]} at ks and their row count; per layer [KL, recall and oracle at
    the first k])."""
    c = model.cfg
    consumers = [l for i in range(len(model.producers)) for l in model.consumers(i)]
    n_layers = len(consumers)
    t0 = time.time()
    # a producer reads the residual stream leaving its layer: the input of the layer after it
    out = teacher.forward(ids, want_x=[p + 1 for p in model.producers], want_qk=consumers, rows=rows)
    if ids.is_cuda:
        torch.cuda.synchronize()
    if train:
        run_batch.teacher_seconds += time.time() - t0
    ce_sum, ent_sum = 0.0, 0.0
    rec, rec_n = {k: [0.0, 0.0, 0.0] for k in ks}, 0
    per_layer = {}
    for i, p in enumerate(model.producers):
        with torch.set_grad_enabled(train):
            qa = model.queries(i, out["x"][p + 1])  # [B, R, P, Hq, d']
        qd = qa.detach().requires_grad_(train)
        for s, l in enumerate(model.consumers(i)):
            with torch.set_grad_enabled(train):
                ts, ss = bt.layer_rows(model, l, qd[:, :, s], out["q"][l], out["k"][l], rows, c["head_dim"])
                ce, ent = bt.distill_terms(ts, ss)
                loss = ce.mean()
            if train:
                (loss / n_layers).backward()
            ce_l, ent_l = loss.item(), ent.mean().item()
            ce_sum += ce_l
            ent_sum += ent_l
            per_layer[l] = [ce_l - ent_l]
            if ks:
                r, n = bt.recall(ts, ss.detach(), c["n_head_kv"], ks)
                for k in ks:
                    for j in range(3):
                        rec[k][j] += r[k][j]
                per_layer[l] += [r[ks[0]][0] / n, r[ks[0]][2] / n]
                rec_n += n
            del ts, ss, ce, ent, loss
        if train:
            qa.backward(qd.grad)
    return ce_sum / n_layers, ent_sum / n_layers, rec, rec_n, per_layer


run_batch.teacher_seconds = 0.0  # time in the teacher's forward during training steps, for the log


def evaluate(teacher, model, data, device, max_rows, tokens_per_batch, ks):
    """Held-out numbers over data.eval (fixed rows): CE, KL (= CE - teacher entropy), recall at ks
    (student per head, student with sift's per-KV-head max vote, the teacher's own top-k) and per
    layer (KL, recall and oracle at the first k)."""
    model.eval()
    gen = torch.Generator().manual_seed(777)
    seqs = data.eval
    t = len(seqs[0])
    per = max(1, tokens_per_batch // t)
    tot_ce = tot_ent = 0.0
    rec, rec_n, n_b, layers = {k: [0.0, 0.0, 0.0] for k in ks}, 0, 0, {}
    for b0 in range(0, len(seqs), per):
        ids = torch.from_numpy(np.stack(seqs[b0:b0 + per])).to(device)
        rows = bt.pick_rows(ids.shape[0], t, max_rows, gen, device)
        with torch.no_grad():
            ce, ent, r, n, pl = run_batch(teacher, model, ids, rows, False, ks)
        w = ids.shape[0]
        tot_ce += ce * w
        tot_ent += ent * w
        n_b += w
        for k in ks:
            for j in range(3):
                rec[k][j] += r[k][j]
        rec_n += n
        for l, v in pl.items():
            acc = layers.setdefault(l, [0.0] * len(v))
            for j in range(len(v)):
                acc[j] += v[j] * w
    model.train()
    res = {"ce": tot_ce / n_b, "kl": (tot_ce - tot_ent) / n_b, "len": t, "seqs": len(seqs),
           "recall": {k: [v / rec_n for v in rec[k]] for k in ks},
           "layers": {l: [x / n_b for x in v] for l, v in layers.items()}}
    return res


def eval_line(tag, res, ks):
    rec = " | ".join("recall@%d %.3f (kv-max %.3f, oracle %.3f)" % (k, *res["recall"][k]) for k in ks)
    return "%s: %d seqs x %d tokens: CE %.4f KL %.4f | %s" % (tag, res["seqs"], res["len"], res["ce"], res["kl"], rec)


# ---- training -----------------------------------------------------------------------------------

def make_optimizer(model, args, device):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(args, step, progress):
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    return args.lr * warm * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def pick_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def train(args, log):
    """One training run as the arguments say; returns a dict of results (also written as JSON)."""
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    np_rng = np.random.RandomState(args.seed)
    if device.type == "cpu":
        # Sharp softmax rows are full of subnormal floats, which x86 cores handle many times slower
        # (steps were seen to slow down threefold as training sharpened); they are far below
        # anything the loss can see.
        torch.set_flush_denormal(True)
        if args.threads:
            torch.set_num_threads(args.threads)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    t0 = time.time()
    # the teacher's compute type: f32 unless asked, or a big model on a GPU (bf16 halves its memory)
    probe = tc.gguf_writer.GGUFFile(args.model, use_mmap=True)
    n_base = sum(np.prod(d) for d, _, _ in probe.tensors.values())
    del probe
    tdtype = {"f32": torch.float32, "bf16": torch.bfloat16}.get(args.teacher_dtype)
    if tdtype is None:
        tdtype = torch.bfloat16 if device.type == "cuda" and n_base > 1e9 else torch.float32
    teacher = tc.Teacher(args.model, device=device, dtype=tdtype)
    c = teacher.cfg
    log("base: %s: %s, %d layers, n_embd %d, %d/%d heads of %d, rope %s%s, %.3fM parameters, fingerprint %s; "
        "teacher in %s on %s (%.1f s to load)" % (
            args.model, c["arch"], c["n_layer"], c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"],
            "neox" if c["rope_neox"] else "adjacent", "" if c["rope_scaling"] == "none" else " " + c["rope_scaling"],
            teacher.n_params / 1e6, teacher.fingerprint, str(tdtype).replace("torch.", ""), device, time.time() - t0))

    key_dim = args.key_dim or min(16, c["head_dim"])
    # what sift's loader (engine/predictor.c) takes
    if key_dim % 8 or key_dim > 128 or args.hidden > 65536 or not 1 <= args.stride <= c["n_layer"]:
        raise SystemExit("sift runs key dims that are multiples of 8 up to 128 (SIFT_MAX_HEAD_DIM), hidden widths up "
                         "to 65536 and strides 1..L (got %d, %d, %d)" % (key_dim, args.hidden, args.stride))
    model = bt.Butler(c["n_layer"], c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], key_dim=key_dim,
                      stride=args.stride, hidden=args.hidden, eps=1e-5).to(device)
    overhead = 100.0 * model.n_params() / teacher.n_params
    log("predictor: producers %s, stride %d, key dim %d, hidden %d: %d parameters = %.3f%% of the base's %d" % (
        model.producers, args.stride, key_dim, args.hidden, model.n_params(), overhead, teacher.n_params))

    lo, hi = parse_lengths(args.seq_len)
    eval_len = args.eval_len or hi
    if eval_len > c["n_ctx"] or hi > c["n_ctx"]:
        log("warning: sequences of up to %d tokens exceed the model's context of %d" % (max(hi, eval_len), c["n_ctx"]))
    t0 = time.time()
    if args.retrieval:
        if not is_retrieval_vocab(teacher):
            raise SystemExit("--retrieval needs a model with task.py's character vocabulary (tools/retrieval)")
        try:
            tasks = ruler_tasks.parse_names(args.retrieval_tasks)
        except ValueError as e:
            raise SystemExit("--retrieval-tasks: %s" % e)
        needed = max(ruler_tasks.min_chars(name) for name in tasks)  # the longest of the tasks' shortest samples
        if lo - 1 < needed:
            raise SystemExit("--retrieval needs --seq-len of at least %d" % (needed + 1))
        data = RetrievalData(eval_len, args.eval_seqs, args.seed, tasks)
        source = "retrieval samples (%s)" % ", ".join(tasks)
    elif args.text:
        if not args.sift:
            raise SystemExit("--text needs --sift (the sift binary that tokenizes it)")
        toks = tokenize(args.sift, args.model, args.text)
        data = TextData(toks, task_bos(teacher), eval_len, args.eval_seqs, log)
        source = "text %s (%d tokens)" % (os.path.basename(args.text), len(toks))
    elif args.sample:
        gen = torch.Generator().manual_seed(args.seed)
        meta = teacher.file.metadata
        eos = meta.get("tokenizer.ggml.eos_token_id")
        pool = teacher.sample(args.sample + args.eval_seqs, max(hi, eval_len), task_bos(teacher), gen,
                              temperature=args.temperature, banned=[eos] if eos is not None else [],
                              batch=args.sample_batch, log=log)
        data = SampledData(pool, eval_len, args.eval_seqs)
        source = "%d sequences sampled from the base (T=%.2g)" % (args.sample, args.temperature)
    else:
        raise SystemExit("give the data: --text FILE, --retrieval or --sample N")
    log("data: %s; training lengths %d..%d tokens, %d tokens per batch; eval %d x %d tokens (%.1f s to prepare)" % (
        source, lo, hi, args.tokens_per_batch, args.eval_seqs, eval_len, time.time() - t0))

    ks = [int(k) for k in args.recall_k.split(",") if k]
    opt = make_optimizer(model, args, device)
    first = evaluate(teacher, model, data, device, args.max_rows, args.tokens_per_batch, ks)
    log(eval_line("eval step 0", first, ks))

    gen = torch.Generator().manual_seed(args.seed + 1)
    py_rng = random.Random(args.seed)
    step, tokens, t_train = 0, 0, time.time()
    hist, log_ce, log_kl, log_n, log_tok, log_t = [], 0.0, 0.0, 0, 0, time.time()
    t_steps = 0.0
    last = first
    while True:
        elapsed = time.time() - t_train
        progress = max(step / args.steps if args.steps else 0.0, elapsed / args.time_budget if args.time_budget else 0.0)
        if progress >= 1.0:
            break
        length = draw_length(py_rng, lo, hi)
        n = max(1, args.tokens_per_batch // length)
        ids = data.batch(length, n, np_rng).to(device)
        rows = bt.pick_rows(n, length, args.max_rows, gen, device)
        lr = lr_at(args, step, progress)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        if step == 0:
            run_batch.teacher_seconds = 0.0
        ts = time.time()
        ce, ent, _, _, _ = run_batch(teacher, model, ids, rows, True)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t_steps += time.time() - ts
        step += 1
        tokens += n * length
        hist.append(ce - ent)
        log_ce, log_kl, log_n, log_tok = log_ce + ce, log_kl + ce - ent, log_n + 1, log_tok + n * length
        if step % args.log_every == 0:
            now = time.time()
            log("step %d | %d x %d | CE %.4f KL %.4f | lr %.2e | %.0f tok/s | %.1f s" % (
                step, n, length, log_ce / log_n, log_kl / log_n, lr, log_tok / max(1e-9, now - log_t), now - t_train))
            log_ce, log_kl, log_n, log_tok, log_t = 0.0, 0.0, 0, 0, now
        if args.eval_every and step % args.eval_every == 0:
            last = evaluate(teacher, model, data, device, args.max_rows, args.tokens_per_batch, ks)
            log(eval_line("eval step %d" % step, last, ks))
    train_s = time.time() - t_train
    if not (args.eval_every and step and step % args.eval_every == 0):  # else the loop just did it
        last = evaluate(teacher, model, data, device, args.max_rows, args.tokens_per_batch, ks)
        log(eval_line("final eval (step %d)" % step, last, ks))
    for l, v in sorted(last["layers"].items()):
        log("  layer %d: KL %.4f | recall@%d %.3f (oracle %.3f)" % (l, v[0], ks[0], v[1], v[2]))
    head = sum(hist[:max(1, len(hist) // 10)]) / max(1, len(hist[:max(1, len(hist) // 10)])) if hist else float("nan")
    tail = sum(hist[-max(1, len(hist) // 10):]) / max(1, len(hist[-max(1, len(hist) // 10):])) if hist else float("nan")
    log("trained %d steps, %.2fM tokens in %.1f s (%.0f tok/s; %.1f ms per step, %.0f%% of it the teacher's forward); "
        "training KL first tenth %.4f -> last tenth %.4f" % (
            step, tokens / 1e6, train_s, tokens / max(1e-9, train_s), 1e3 * t_steps / max(1, step),
            100.0 * run_batch.teacher_seconds / max(1e-9, t_steps), head, tail))

    r0 = last["recall"][ks[0]]
    summary = ("data %s, lengths %d-%d, %d steps (%.2fM tokens, %.0f s on %s), seed %d: held-out KL %.4f -> %.4f, "
               "recall@%d %.3f (oracle %.3f)" % (source, lo, hi, step, tokens / 1e6, train_s, device.type, args.seed,
                                                 first["kl"], last["kl"], ks[0], r0[0], r0[2]))
    size = model.write(args.out, teacher.fingerprint, teacher.fingerprint_blocks,
                       name="sift-butler for %s" % os.path.basename(args.model),
                       training=summary, f16=args.f16,
                       extra=[("sift-butler.parameter_count", "u32", model.n_params()),
                              ("sift-butler.overhead_percent", "f32", overhead)])
    check_written(args.out, model, teacher, args.f16)
    log("wrote %s (%.1f KB, %s; format checked): %s" % (args.out, size / 1e3, "F16" if args.f16 else "F32", summary))
    res = {"model": args.model, "out": args.out, "fingerprint": teacher.fingerprint,
           "fingerprint_blocks": teacher.fingerprint_blocks, "predictor": model.cfg,
           "parameters": model.n_params(), "base_parameters": teacher.n_params, "overhead_percent": overhead,
           "steps": step, "tokens": tokens, "train_seconds": train_s, "device": str(device),
           "first_eval": first, "final_eval": last, "train_kl_first_tenth": head, "train_kl_last_tenth": tail,
           "args": vars(args)}
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
    return res


def task_bos(teacher):
    bos = teacher.file.metadata.get("tokenizer.ggml.bos_token_id")
    if bos is None:
        raise SystemExit("the model has no tokenizer.ggml.bos_token_id")
    return int(bos)


def check_written(path, model, teacher, f16):
    """Reads the predictor file back and checks it against the model it came from: the format
    (butler.read_file), the config keys, the fingerprint, and every tensor's values."""
    cfg, fp, meta, tensors = bt.read_file(path)
    for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "key_dim", "stride", "hidden"):
        if cfg[k] != model.cfg[k]:
            raise RuntimeError("%s: %s is %s in the file, %s in the model" % (path, k, cfg[k], model.cfg[k]))
    if abs(cfg["eps"] - model.cfg["eps"]) > 1e-12:
        raise RuntimeError("%s: layer_norm_epsilon differs" % path)
    base = tc.gguf_writer.GGUFFile(teacher.path, use_mmap=True)
    if fp != teacher.fingerprint or fp != tc.fingerprint(base):
        raise RuntimeError("%s: base_fingerprint %s is not the base's %s" % (path, fp, teacher.fingerprint))
    fp_blocks = meta.get("sift-butler.base_fingerprint_blocks")
    if fp_blocks != teacher.fingerprint_blocks or fp_blocks != tc.fingerprint_blocks(base):
        raise RuntimeError("%s: base_fingerprint_blocks %s is not the base's %s" % (
            path, fp_blocks, teacher.fingerprint_blocks))
    for name, want in model.gguf_tensors().items():
        if f16:
            want = want.astype(np.float16).astype(np.float32)
        if tensors[name].shape != want.shape or not np.array_equal(tensors[name], want):
            raise RuntimeError("%s: tensor %s differs from the model's" % (path, name))


# ---- the teacher check and the smoke test --------------------------------------------------------

# Without spaces: sift's tokenize and logits commands size their id buffer for at most one token per
# byte (and a few more), which a vocabulary without a "▁" piece overruns (a space falls back to
# three byte tokens).
PLAIN_PROMPT = "Helloworld.thisisatestoftheteacher"


def check_teacher(sift, shared, log, tol=1e-3, extra=()):
    """The teacher's logits against `sift logits` on stories260K, the retrieval model, copies of
    stories260K that exercise the other weight types, archs and RoPE variants, and the extra model
    paths (prompted with PLAIN_PROMPT). Returns the number of failures (the worst relative
    difference is logged)."""
    failures, worst = 0, 0.0
    stories = os.path.join(shared, "models", "stories260K.gguf")
    models = []
    if os.path.exists(stories):
        models.append(("stories260K", stories, STORY_PROMPT))
    if os.path.exists(RETRIEVAL_MODEL):
        text, _ = task.recall_sample(random.Random("sift-butler-check"), 95)
        models.append(("retrieval", RETRIEVAL_MODEL, text))
    tmp = tempfile.mkdtemp(prefix="butler-variants-")
    try:
        if os.path.exists(stories):
            for label, path in tc.make_variants(stories, tmp):
                models.append(("stories260K as " + label, path, STORY_PROMPT))
        models += [(os.path.basename(m), m, PLAIN_PROMPT) for m in extra]
        for label, path, prompt in models:
            ok, diff, scale = tc.check_against_sift(sift, path, prompt, tol=tol, log=lambda m, lb=label: log(lb + ": " + m))
            worst = max(worst, diff / max(1.0, scale))
            failures += not ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log("teacher check: %d models, %d failed; worst max |logit diff| / max(1, max |logit|) = %.2g (limit %.0e)" % (
        len(models), failures, worst, tol))
    return failures if models else 1


WORDS = ("the a little big happy sad girl boy dog cat tree park ball sun day mom dad friend toy "
         "played ran saw liked wanted found said went jumped smiled looked gave").split()


def smoke_text(path, n_sentences, seed):
    """A made-up English text (TinyStories-like words), enough for a few windows."""
    r = random.Random(seed)
    out = []
    for i in range(n_sentences):
        words = [r.choice(WORDS) for _ in range(r.randint(4, 10))]
        out.append(("Once upon a time, " if i % 7 == 0 else "") + " ".join(words).capitalize() + ".")
    with open(path, "w") as f:
        f.write(" ".join(out) + "\n")


def check_scoring(path, log):
    """The scoring path against a known answer: a student whose queries are the teacher's own roped
    queries and whose key projection is the identity (d' = D) must give the teacher's attention
    rows: KL 0 and recall equal to the oracle's. Returns the number of failures."""
    teacher = tc.Teacher(path)
    c = teacher.cfg
    model = bt.Butler(c["n_layer"], c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], key_dim=c["head_dim"])
    with torch.no_grad():
        model.key.copy_(torch.eye(c["head_dim"]).expand_as(model.key))
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, c["n_vocab"], (2, 96), generator=gen)
    ids[:, 0] = task_bos(teacher)
    rows = bt.pick_rows(2, 96, 256, gen, "cpu")
    out = teacher.forward(ids, want_qk=range(1, c["n_layer"]), rows=rows)
    worst_kl, worst_gap, worst_p = 0.0, 0.0, 0.0
    group = c["n_head"] // c["n_head_kv"]
    for l in range(1, c["n_layer"]):
        q, k = out["q"][l], out["k"][l]
        ts, ss = bt.layer_rows(model, l, q.permute(0, 2, 1, 3), q, k, rows, c["head_dim"])
        # the teacher rows against a plain GQA softmax (KV heads repeated for their query heads)
        ref = torch.matmul(q, k.repeat_interleave(group, dim=1).transpose(-1, -2)) / math.sqrt(c["head_dim"])
        ref = ref.masked_fill(torch.arange(96)[None, None, None, :] > rows[:, None, :, None], float("-inf"))
        worst_p = max(worst_p, (torch.softmax(ref, -1) - torch.softmax(ts, -1)).abs().max().item())
        ce, ent = bt.distill_terms(ts, ss)
        worst_kl = max(worst_kl, abs((ce - ent).max().item()))
        r, n = bt.recall(ts, ss, c["n_head_kv"], [4, 16])
        worst_gap = max([worst_gap] + [abs(r[kk][0] - r[kk][2]) / n for kk in r])
    ok = worst_kl < 1e-4 and worst_gap < 1e-5 and worst_p < 1e-5
    log("scoring check (%s, exact queries, identity key projection): teacher rows vs plain GQA softmax %.2g, "
        "max KL %.2g, recall gap to the oracle %.2g -> %s" % (os.path.basename(path), worst_p, worst_kl, worst_gap,
                                                              "ok" if ok else "FAILED"))
    return 0 if ok else 1


def smoke(args, log):
    """Every path on a CPU in about a minute: the teacher check, then tiny trainings (stories260K on
    a generated text through `sift tokenize`, on its own samples, written F16; the retrieval model on
    recall samples), each file read back and checked, the held-out KL checked to fall."""
    if not os.path.isdir(args.shared) or not os.path.exists(os.path.join(args.shared, "models", "stories260K.gguf")):
        print("butler trainer smoke test skipped: %s/models/stories260K.gguf is absent" % args.shared)
        return 77
    if not args.sift or not os.access(args.sift, os.X_OK):
        print("butler smoke: --sift must name the built sift binary (got %r)" % args.sift)
        return 1
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="butler-smoke-")
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    failures = check_teacher(args.sift, args.shared, log)
    failures += check_scoring(os.path.join(args.shared, "models", "stories260K.gguf"), log)
    stories = os.path.join(args.shared, "models", "stories260K.gguf")
    text = os.path.join(out_dir, "smoke.txt")
    smoke_text(text, 900, args.seed)
    base = dict(vars(args), device="cpu", teacher_dtype="f32", stride=4, key_dim=0, weight_decay=0.01, warmup=5,
                max_rows=256, eval_every=0, log_every=10, recall_k="16,64", threads=0, time_budget=0.0,
                retrieval=False, text=None, sample=0, f16=False, temperature=1.0, sample_batch=16, eval_len=0)
    runs = [
        ("stories260K, text", dict(model=stories, text=text, seq_len="128", tokens_per_batch=1024, steps=60,
                                  hidden=128, lr=3e-3, eval_seqs=8)),
        ("stories260K, own samples, F16 file", dict(model=stories, sample=12, seq_len="32:64", tokens_per_batch=512,
                                                   steps=30, hidden=64, lr=3e-3, eval_seqs=4, f16=True)),
    ]
    if os.path.exists(RETRIEVAL_MODEL):
        runs.append(("retrieval model, recall samples", dict(model=RETRIEVAL_MODEL, retrieval=True, seq_len="192:320",
                                                            tokens_per_batch=1024, steps=40, hidden=128, lr=3e-3,
                                                            eval_seqs=4)))
    for i, (label, kw) in enumerate(runs):
        a = argparse.Namespace(**dict(base, **kw))
        a.out = os.path.join(out_dir, "smoke-%d.gguf" % i)
        log("---- smoke run %d: %s" % (i, label))
        try:
            res = train(a, log)
        except Exception as e:  # a failure of one run is reported, the others still run
            log("smoke run %d FAILED: %s: %s" % (i, type(e).__name__, e))
            failures += 1
            continue
        fell = res["final_eval"]["kl"] < res["first_eval"]["kl"] and res["train_kl_last_tenth"] < res["train_kl_first_tenth"]
        log("smoke run %d: held-out KL %.4f -> %.4f, training KL %.4f -> %.4f: %s" % (
            i, res["first_eval"]["kl"], res["final_eval"]["kl"], res["train_kl_first_tenth"],
            res["train_kl_last_tenth"], "falls" if fell else "DOES NOT FALL"))
        failures += not fell
    if not args.out_dir:
        shutil.rmtree(out_dir, ignore_errors=True)
    log("butler smoke: %d failure(s) in %.1f s" % (failures, time.time() - t0))
    return 1 if failures else 0


# ---- main ---------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", "-m", help="the base model GGUF (llama, qwen2 or mistral)")
    ap.add_argument("--out", "-o", help="the predictor GGUF to write (the log goes to OUT minus .gguf plus .log, "
                                        "the numbers to .json)")
    d = ap.add_argument_group("data (one of)")
    d.add_argument("--text", help="a text file; tokenized by `SIFT tokenize` (give --sift)")
    d.add_argument("--retrieval", action="store_true", help="tools/retrieval/task.py's recall samples (its char vocabulary)")
    d.add_argument("--retrieval-tasks", default="recall", metavar="TASKS",
                   help="--retrieval: the tasks of tools/retrieval/ruler_tasks.py drawn evenly per sample, "
                        "comma-separated or all (default recall)")
    d.add_argument("--sample", type=int, default=0, metavar="N",
                   help="N sequences sampled from the base itself (KV-cached decoding; --eval-seqs more held out)")
    d.add_argument("--temperature", type=float, default=1.0, help="--sample's temperature (default 1)")
    d.add_argument("--sample-batch", type=int, default=256, help="--sample: sequences generated at once (default 256)")
    d.add_argument("--sift", help="the sift binary (for --text, --check-teacher and --smoke)")
    d.add_argument("--seq-len", default="512",
                   help="training length in tokens, BOS included: N, or MIN:MAX drawn log-uniformly per batch "
                        "(multiples of 64) (default 512)")
    d.add_argument("--tokens-per-batch", type=int, default=32768,
                   help="tokens per batch; batch size = this // length (default 32768)")
    p = ap.add_argument_group("predictor")
    p.add_argument("--key-dim", type=int, default=0, help="d' (default: 16, or the head dim D when D < 16)")
    p.add_argument("--stride", type=int, default=4, help="producer stride P (default 4)")
    p.add_argument("--hidden", type=int, default=512, help="the predictor MLP's hidden width (default 512)")
    p.add_argument("--f16", action="store_true", help="write the tensors as F16 (default F32)")
    t = ap.add_argument_group("training")
    t.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: use --time-budget)")
    t.add_argument("--time-budget", type=float, default=0.0,
                   help="stop after this many seconds of training (evaluations included; 0: use --steps); the "
                        "cosine schedule runs over whichever of --steps and --time-budget ends first")
    t.add_argument("--lr", type=float, default=1e-3, help="AdamW peak learning rate (default 1e-3)")
    t.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay on matrices (default 0.01)")
    t.add_argument("--warmup", type=int, default=20, help="linear warmup steps before the cosine (default 20)")
    t.add_argument("--max-rows", type=int, default=256,
                   help="query rows per sequence drawn from its last half, the last token added (default 256)")
    t.add_argument("--seed", type=int, default=1, help="data, rows and initialisation (default 1)")
    t.add_argument("--device", default="auto", help="auto (cuda when available, else cpu), cpu, cuda, cuda:N")
    t.add_argument("--teacher-dtype", default="auto", choices=["auto", "f32", "bf16"],
                   help="the teacher's compute type (auto: bf16 for a base over 1G parameters on a GPU, else f32)")
    t.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: its default)")
    e = ap.add_argument_group("evaluation and logging")
    e.add_argument("--eval-seqs", type=int, default=8, help="held-out sequences (default 8)")
    e.add_argument("--eval-len", type=int, default=0, help="their length in tokens (default: the longest training length)")
    e.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: at the start and the end only)")
    e.add_argument("--recall-k", default="64,256", help="the k of the recall numbers (default 64,256)")
    e.add_argument("--log-every", type=int, default=20, help="steps per log line (default 20)")
    e.add_argument("--log", help="the log file (default: OUT with .log)")
    m = ap.add_argument_group("modes")
    m.add_argument("--check-teacher", metavar="SIFT",
                   help="compare the teacher's logits with `SIFT logits` on stories260K (and copies of it in every "
                        "weight type, arch and RoPE variant) and the retrieval model, and exit (1 on a mismatch)")
    m.add_argument("--check-model", action="append", default=[], metavar="GGUF",
                   help="--check-teacher: also check this model (repeatable), prompted without spaces")
    m.add_argument("--smoke", action="store_true",
                   help="the CPU smoke test (about a minute; needs --sift): the teacher check, tiny trainings, "
                        "their files checked; exit 0 ok, 1 failed, 77 skipped (no ../shared)")
    m.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"), help="the shared/ folder (default ../shared)")
    m.add_argument("--out-dir", help="--smoke: keep its files here (default: a temporary folder, removed)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        return smoke(args, Log())
    if args.check_teacher:
        return 1 if check_teacher(args.check_teacher, args.shared, Log(), extra=args.check_model) else 0
    if not args.model or not args.out:
        raise SystemExit("give --model BASE.gguf and --out PRED.gguf (see --help)")
    if not args.steps and not args.time_budget:
        raise SystemExit("give --steps N or --time-budget SECONDS")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    log = Log(args.log or os.path.splitext(args.out)[0] + ".log")
    log("sift butler trainer: torch %s, numpy %s; %s" % (torch.__version__, np.__version__, " ".join(sys.argv)))
    train(args, log)
    log("done in %.1f s" % (time.time() - T_START))
    return 0


if __name__ == "__main__":
    sys.exit(main())
