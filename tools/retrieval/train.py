#!/usr/bin/env python3
"""Train a small Llama on long-range associative recall and export it as GGUF for sift.

The task (task.py): a haystack of random filler with '#KEY:VAL;' records scattered through it,
then '?KEY:VAL;' queries for some of the keys; the loss is on the queried VAL characters. The
training follows SPEC.md section 11: a length curriculum gated on training accuracy (start at a few
dozen tokens with two records, grow the length 1.25x each time the recall accuracy of a check
window passes 0.9), with a quarter of each batch "repeat" samples (X then X again) while the
sequences are short, to teach copying first. Half of the batches (--mix-frac) revisit a shorter
length, log-uniform in [length / 8, length], so that 4K and 8K stay as good as the frontier.
With --tasks, the samples come from a mixture of ruler_tasks.py's tasks (recall among them): the
gate then asks for the tasks' mean accuracy to pass --gate and for each task's to pass --gate-floor,
so that one task the model is slow to learn (vartrack's two or three hops) holds the others back
only while it is far behind.

The model is the Llama that sift runs as GGUF arch 'llama': RMSNorm, RoPE rotating adjacent pairs
(2i, 2i+1) (the Meta / llama2.c convention; sift applies it to unpermuted Q/K rows), GQA with query
head h reading KV head h // (heads / kv_heads), SwiGLU, no biases, untied output.

Everything goes to --out: checkpoint.pt (model, optimizer, curriculum, RNG), retrieval.gguf,
retrieval_test.txt (and TASK_test.txt per other task), retrieval_eval.json, reference_logits.json
and train.log. Training stops after --time-budget seconds from the start of the command (default
480, for a 10-minute limit) and then saves, exports and evaluates; --resume continues from a
checkpoint. See README.md.
"""

import time

T_START = time.time()  # the time budget counts from here, torch's import included

import argparse
import io
import json
import math
import os
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_writer  # noqa: E402
import ruler_tasks  # noqa: E402
import task  # noqa: E402

FULL_MODEL = dict(dim=256, n_layers=6, n_heads=8, n_kv_heads=4, head_dim=32,
                  ffn_dim=704,  # ~688 as in SPEC §11, rounded to a multiple of 64 so Q8_0/Q4_0 blocks fit rows
                  rope_base=100000.0,  # long wavelengths for a 16K context
                  norm_eps=1e-5, context_length=16384)
SMOKE_MODEL = dict(FULL_MODEL, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=64)

CHECKPOINT = "checkpoint.pt"
GGUF_NAME = "retrieval.gguf"
EVAL_NAME = "retrieval_eval.json"
REFERENCE_NAME = "reference_logits.json"
LOG_NAME = "train.log"


# ---- the model ----------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # In f32 whatever autocast does: sift computes norms in f32 too.
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()


def rope_tables(head_dim, base, n_pos):
    """cos and sin [n_pos, head_dim / 2] of the angle pos * base^(-2i / head_dim) of pair i."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """x [B, T, H, D]: rotates each adjacent pair (x[2i], x[2i+1]) by the angle of pair i at the
    token's position, as sift does for arch 'llama' (cpu_rope, SIFT_ROPE_ADJACENT). In f32."""
    b, t, h, d = x.shape
    x = x.float().view(b, t, h, d // 2, 2)
    x0, x1 = x[..., 0], x[..., 1]
    c, s = cos[:t][None, :, None, :], sin[:t][None, :, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).view(b, t, h, d)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
        dim = cfg["dim"]
        self.wq = nn.Linear(dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # [B, heads, T, D], one dtype for SDPA (bf16 under autocast, f32 otherwise).
        q, k, v = (y.transpose(1, 2).to(v.dtype) for y in (q, k, v))
        group = self.n_heads // self.n_kv_heads
        if group > 1:  # query head h reads KV head h // group (HF repeat_kv; sift's g(h) = floor(h / G))
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(D), as sift
        else:  # torch 1.x (Debian's, for the CPU smoke run): the same attention written out
            s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(self.head_dim)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            o = (torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v.float()).to(v.dtype)
        return self.wo(o.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w_gate = nn.Linear(cfg["dim"], cfg["ffn_dim"], bias=False)
        self.w_up = nn.Linear(cfg["dim"], cfg["ffn_dim"], bias=False)
        self.w_down = nn.Linear(cfg["ffn_dim"], cfg["dim"], bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.ffn = FeedForward(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)  # the residual stream stays f32
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = dict(cfg)
        self.tok_embd = nn.Embedding(task.VOCAB_SIZE, cfg["dim"])
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layers"]))
        self.norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.output = nn.Linear(cfg["dim"], task.VOCAB_SIZE, bias=False)
        cos, sin = rope_tables(cfg["head_dim"], cfg["rope_base"], cfg["context_length"])
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # GPT-2 style init: N(0, 0.02), the projections into the residual stream scaled down by depth.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg["n_layers"]) if name.endswith(("wo.weight", "w_down.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def hidden(self, ids):
        """The final-norm hidden states [B, T, dim] (f32) of token ids [B, T]."""
        if ids.shape[1] > self.rope_cos.shape[0]:
            raise ValueError("sequence of %d tokens is longer than the RoPE table (%d)" % (ids.shape[1], self.rope_cos.shape[0]))
        x = self.tok_embd(ids).float()
        for layer in self.layers:
            x = layer(x, self.rope_cos, self.rope_sin)
        return self.norm(x)

    def forward(self, ids):
        return self.output(self.hidden(ids))


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ---- batches ------------------------------------------------------------------------------------

class Batcher:
    """Builds training batches on the CPU from the tasks' samples (task.py, ruler_tasks.py): token ids
    [B, L] (BOS first) and the flat indices (b * L + offset) of the positions scored, split into
    answer and repeat positions, with the task (index into `tasks`) of each answer position and the
    answer positions' loss weights (each task present weighs the same, whatever its number of
    answer characters). The logits at token position `offset` predict the text character at
    `offset`, i.e. token offset + 1, so the target of flat index i is ids.view(-1)[i + 1].
    With one task, a sample's task costs no draw from rng (the recall model's stream as it was)."""

    def __init__(self, rng, tasks, weights):
        self.rng = rng
        self.tasks, self.weights = list(tasks), list(weights)
        self.min_chars = [ruler_tasks.min_chars(t) for t in self.tasks]
        self.lut = torch.tensor(task.byte_to_id_table(), dtype=torch.long)

    def batch(self, length, batch_size, n_repeat):
        n_chars = length - 1
        fit = [i for i, m in enumerate(self.min_chars) if m <= n_chars]  # the tasks this length holds
        fit_weights = [self.weights[i] for i in fit]
        texts, answer_idx, answer_task, repeat_idx = [], [], [], []
        for b in range(batch_size):
            if b < n_repeat:
                text, offsets = task.repeat_sample(self.rng, n_chars)
                repeat_idx.extend(b * length + o for o in offsets)
            else:
                t = fit[0] if len(self.tasks) == 1 else self.rng.choices(fit, weights=fit_weights)[0]
                text, offsets = ruler_tasks.GENERATORS[self.tasks[t]](self.rng, n_chars)
                answer_idx.extend(b * length + o for o in offsets)
                answer_task.extend([t] * len(offsets))
            texts.append(text)
        chars = torch.frombuffer(bytearray("".join(texts).encode("ascii")), dtype=torch.uint8)
        ids = torch.empty(batch_size, length, dtype=torch.long)
        ids[:, 0] = task.BOS_ID
        ids[:, 1:] = self.lut[chars.long()].view(batch_size, n_chars)
        per_task = [0] * len(self.tasks)
        for t in answer_task:
            per_task[t] += 1
        present = sum(1 for c in per_task if c)
        weights = [1.0 / (per_task[t] * present) for t in answer_task]
        return (ids, torch.tensor(answer_idx, dtype=torch.long), torch.tensor(repeat_idx, dtype=torch.long),
                torch.tensor(answer_task, dtype=torch.long), torch.tensor(weights, dtype=torch.float32))


def scored_logits(model, ids, idx):
    """Logits (f32) and targets at the flat positions idx: only those rows go through the output layer."""
    h = model.hidden(ids)
    h = h.reshape(-1, h.shape[-1])[idx]
    return model.output(h).float(), ids.reshape(-1)[idx + 1]


# ---- checkpoints and logging -------------------------------------------------------------------

class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def __call__(self, msg):
        print(msg, flush=True)
        self.f.write(msg + "\n")
        self.f.flush()


# The checkpoint is written in parts of at most 15 MiB (checkpoint.pt.0, checkpoint.pt.1, ...), so
# that it can travel through transfers that limit the size of one file (a GPU machine's output
# folder, say). With the Adam moments stored in bf16 it is ~36 MB for the 4.5M-parameter model:
# three parts. --resume takes the name without the part number.
CHECKPOINT_PART_BYTES = 15 << 20
MOMENT_KEYS = ("exp_avg", "exp_avg_sq")


def save_checkpoint(path, model, opt, state, rng):
    # bf16 moments: a third less to carry, and resumes fine. New dicts: state_dict() hands out the
    # optimizer's live per-parameter dicts, which must keep their f32 tensors.
    packed = opt.state_dict()
    opt_state = {"param_groups": packed["param_groups"],
                 "state": {i: {k: (v.to(torch.bfloat16) if k in MOMENT_KEYS else v) for k, v in st.items()}
                           for i, st in packed["state"].items()}}
    buf = io.BytesIO()
    torch.save({"version": 1, "model_cfg": model.cfg, "model": model.state_dict(), "optimizer": opt_state,
                "state": state, "rng": rng.getstate()}, buf)
    data = buf.getvalue()
    parts = [data[i:i + CHECKPOINT_PART_BYTES] for i in range(0, len(data), CHECKPOINT_PART_BYTES)]
    for i, part in enumerate(parts):  # all parts written first, then renamed: a kill mid-write
        with open("%s.%d.tmp" % (path, i), "wb") as f:  # leaves the previous checkpoint whole
            f.write(part)
    for i in range(len(parts)):
        os.replace("%s.%d.tmp" % (path, i), "%s.%d" % (path, i))
    i = len(parts)
    while os.path.exists("%s.%d" % (path, i)):  # parts of an older, larger checkpoint
        os.remove("%s.%d" % (path, i))
        i += 1
    return len(parts), len(data)


def load_checkpoint(path):
    """path: the checkpoint's name (DIR/checkpoint.pt: its parts .0, .1, ... are read), a directory
    holding checkpoint.pt parts, or one whole file."""
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT)
    if os.path.isfile(path):
        with open(path, "rb") as f:
            data = f.read()
    else:
        chunks = []
        while os.path.exists("%s.%d" % (path, len(chunks))):
            with open("%s.%d" % (path, len(chunks)), "rb") as f:
                chunks.append(f.read())
        if not chunks:
            raise SystemExit("--resume: neither %s nor %s.0 exists" % (path, path))
        data = b"".join(chunks)
    ckpt = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    for st in ckpt["optimizer"]["state"].values():
        for k in MOMENT_KEYS:
            if k in st:
                st[k] = st[k].float()
    return ckpt


def make_optimizer(model, args, device):
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "tok_embd" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "tok_embd" not in n)]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(groups, fused=True, **kw)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, **kw)


# ---- export -------------------------------------------------------------------------------------

def tensor_bytes(t, dtype):
    """Little-endian bytes of a tensor in dtype (row-major), without needing numpy."""
    t = t.detach().to(device="cpu", dtype=dtype).contiguous().reshape(-1)
    try:
        return t.numpy().tobytes()
    except Exception:  # numpy absent: go through a list of bytes (a few MB, about a second)
        return bytes(t.view(torch.uint8).tolist())


def gguf_tensors(model):
    """GGUF name -> torch tensor. A torch Linear weight is [out, in] row-major, which is GGUF dims
    [in, out] (row length first): the bytes go out as they are, no transpose."""
    t = {"token_embd.weight": model.tok_embd.weight, "output_norm.weight": model.norm.weight,
         "output.weight": model.output.weight}
    for l, blk in enumerate(model.layers):
        p = "blk.%d." % l
        t[p + "attn_norm.weight"] = blk.attn_norm.weight
        t[p + "attn_q.weight"] = blk.attn.wq.weight
        t[p + "attn_k.weight"] = blk.attn.wk.weight
        t[p + "attn_v.weight"] = blk.attn.wv.weight
        t[p + "attn_output.weight"] = blk.attn.wo.weight
        t[p + "ffn_norm.weight"] = blk.ffn_norm.weight
        t[p + "ffn_gate.weight"] = blk.ffn.w_gate.weight
        t[p + "ffn_up.weight"] = blk.ffn.w_up.weight
        t[p + "ffn_down.weight"] = blk.ffn.w_down.weight
    return t


def export_gguf(model, path, name):
    assert sys.byteorder == "little"
    tensors = gguf_tensors(model)
    data = {}
    for gname, dims in gguf_writer.llama_tensor_shapes(model.cfg, task.VOCAB_SIZE):
        w = tensors[gname]
        assert list(w.shape) == list(reversed(dims)), (gname, tuple(w.shape), dims)
        data[gname] = tensor_bytes(w, torch.float32 if w.dim() == 1 else torch.float16)
    return gguf_writer.write_llama_gguf(path, model.cfg, data, name=name)


def gguf_weights(path):
    """The tensors of a GGUF file as f64 torch tensors, shaped [rows, row length] (or [n])."""
    g = gguf_writer.GGUFFile(path)
    out = {}
    for name, (dims, ggml_type, data) in g.tensors.items():
        dt = torch.float16 if ggml_type == gguf_writer.GGML_F16 else torch.float32
        t = torch.frombuffer(bytearray(data), dtype=dt).double()
        out[name] = t.view(dims[1], dims[0]) if len(dims) == 2 else t
    return g.metadata, out


def reference_forward(meta, w, ids):
    """Logits [T, vocab] of one sequence, written independently of the training model from the GGUF's
    own tensors and metadata, in f64: RoPE as Meta's complex multiplication of adjacent pairs, GQA by
    an explicit h // group loop, causal softmax by a mask. What sift should compute."""
    a = "llama."
    n_layers, n_heads, n_kv = meta[a + "block_count"], meta[a + "attention.head_count"], meta[a + "attention.head_count_kv"]
    d, base, eps = meta[a + "rope.dimension_count"], meta[a + "rope.freq_base"], meta[a + "attention.layer_norm_rms_epsilon"]
    t = len(ids)

    def rms(x, g):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(torch.ones(t, d // 2, dtype=torch.float64), torch.outer(torch.arange(t, dtype=torch.float64), freqs))

    def rope(x):  # [T, H, D]
        xc = torch.view_as_complex(x.reshape(t, x.shape[1], d // 2, 2).contiguous())
        return torch.view_as_real(xc * rot[:, None, :]).reshape(t, x.shape[1], d)

    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    x = w["token_embd.weight"][torch.tensor(ids)]
    for l in range(n_layers):
        p = "blk.%d." % l
        xn = rms(x, w[p + "attn_norm.weight"])
        q = rope((xn @ w[p + "attn_q.weight"].T).view(t, n_heads, d))
        k = rope((xn @ w[p + "attn_k.weight"].T).view(t, n_kv, d))
        v = (xn @ w[p + "attn_v.weight"].T).view(t, n_kv, d)
        heads = []
        for h in range(n_heads):
            g = h // (n_heads // n_kv)
            s = (q[:, h] @ k[:, g].T) / math.sqrt(d)
            heads.append(torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v[:, g])
        x = x + torch.cat(heads, dim=-1) @ w[p + "attn_output.weight"].T
        xn = rms(x, w[p + "ffn_norm.weight"])
        x = x + (F.silu(xn @ w[p + "ffn_gate.weight"].T) * (xn @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    return rms(x, w["output_norm.weight"]) @ w["output.weight"].T


def check_export(model, gguf_path, out_dir, log):
    """Reads the GGUF back, checks every tensor is the model's (rounded to f16), runs the independent
    f64 forward on a short recall prompt, compares with the training model's f32 forward, and writes
    reference_logits.json for comparing sift (task.py compare-logits)."""
    meta, w = gguf_weights(gguf_path)
    for name, p in gguf_tensors(model).items():
        want = p.detach().cpu().to(torch.float16 if p.dim() == 2 else torch.float32).double()
        if not torch.equal(w[name], want):
            raise RuntimeError("export check: tensor %s differs from the model's" % name)
    text, _ = task.recall_sample(random.Random("sift-retrieval-reference"), 63)
    ids = [task.BOS_ID] + task.encode(text)
    ref = reference_forward(meta, w, ids)
    device = next(model.parameters()).device
    with torch.no_grad():
        mine = model(torch.tensor([ids], device=device)).double().cpu()[0]
    diff = (mine - ref).abs().max().item()
    scale = ref.abs().max().item()
    log("export check: %d tensors match; training model vs independent f64 forward of the GGUF: max |logit diff| "
        "%.4f (logits up to %.2f; f16 weights)" % (len(w), diff, scale))
    if diff > 0.02 * max(1.0, scale) + 0.05:
        raise RuntimeError("export check: the GGUF's forward differs from the training model (%.4f)" % diff)
    with open(os.path.join(out_dir, REFERENCE_NAME), "w") as f:
        json.dump({"prompt": text, "token_ids": ids, "argmax": ref.argmax(-1).tolist(),
                   "logits": [[round(v, 5) for v in row] for row in ref.tolist()]}, f)


# ---- evaluation ---------------------------------------------------------------------------------

@torch.no_grad()
def evaluate(model, samples, device, use_bf16, eval_tokens):
    """Teacher-forced held-out answers with dense attention, per length: accuracy of the answer
    characters, of whole parts (three characters: a value, a word) and of their first character
    (the one only the context gives). Every task's answers come in parts of three characters;
    "queries" counts the parts (recall: one per query)."""
    lut = torch.tensor(task.byte_to_id_table(), dtype=torch.long)
    results = {}
    for n_tokens in sorted(set(s[0] for s in samples)):
        group = [s for s in samples if s[0] == n_tokens]
        per_batch = max(1, eval_tokens // n_tokens)
        hits = []  # one bool per answer character, in order
        for i in range(0, len(group), per_batch):
            chunk = group[i:i + per_batch]
            chars = torch.frombuffer(bytearray("".join(s[1] for s in chunk).encode("ascii")), dtype=torch.uint8)
            ids = torch.empty(len(chunk), n_tokens, dtype=torch.long)
            ids[:, 0] = task.BOS_ID
            ids[:, 1:] = lut[chars.long()].view(len(chunk), n_tokens - 1)
            idx = torch.tensor([b * n_tokens + o for b, s in enumerate(chunk) for o in s[2]], dtype=torch.long)
            ids, idx = ids.to(device), idx.to(device)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits, targets = scored_logits(model, ids, idx)
            hits.extend((logits.argmax(-1) == targets).tolist())
        vals = [all(hits[j:j + task.VAL_LEN]) for j in range(0, len(hits), task.VAL_LEN)]
        first = hits[0::task.VAL_LEN]
        results[n_tokens] = {"samples": len(group), "queries": len(vals), "char_acc": sum(hits) / len(hits),
                             "value_acc": sum(vals) / len(vals), "first_digit_acc": sum(first) / len(first)}
    return results


# ---- main ---------------------------------------------------------------------------------------

def parse_tasks(spec):
    """--tasks: 'all' or 'name[:weight],...' -> (names, weights)."""
    if spec == "all":
        return list(ruler_tasks.NAMES), [1.0] * len(ruler_tasks.NAMES)
    names, weights = [], []
    for item in spec.split(","):
        name, _, weight = item.partition(":")
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            w = -1.0
        if name not in ruler_tasks.GENERATORS or name in names or not w > 0:
            raise SystemExit("--tasks: bad item '%s' (tasks: %s; weights > 0)" % (item, ", ".join(ruler_tasks.NAMES)))
        names.append(name)
        weights.append(w)
    return names, weights


def load_gguf_into(model, path):
    """The model's weights from a GGUF of the same config (F16 matrices, F32 norms)."""
    _, w = gguf_weights(path)
    for name, p in gguf_tensors(model).items():
        if name not in w or tuple(w[name].shape) != tuple(p.shape):
            raise SystemExit("--init-gguf %s: tensor %s is %s, the model's is %s (another model config?)" % (
                path, name, tuple(w[name].shape) if name in w else "absent", tuple(p.shape)))
        with torch.no_grad():
            p.copy_(w[name].to(p.dtype))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for the checkpoint, GGUF, test set and logs")
    ap.add_argument("--resume", help="checkpoint to continue from (model, optimizer, curriculum): DIR/checkpoint.pt "
                                     "(read from its parts checkpoint.pt.0, .1, ...) or DIR")
    ap.add_argument("--time-budget", type=float, default=480.0,
                    help="seconds from the start of this command after which training stops and the run saves, "
                         "exports and evaluates (default 480)")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps in this command (0: no limit)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny config on the CPU: dim 32, 2 layers, 20 steps, short sequences; every code path")
    ap.add_argument("--device", help="default: cuda if available (cpu with --smoke)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tasks",
                    help="the training mixture: comma-separated tasks of ruler_tasks.py, each with an optional "
                         ":WEIGHT (default 1; a sample's task is drawn in proportion among those its length holds), "
                         "or all (every task, weight 1); default: the checkpoint's with --resume, else recall (the "
                         "shipped model's recipe). One test set per task is written and evaluated")
    ap.add_argument("--init-gguf", help="start from the weights of this GGUF (written by this script with the same "
                                        "model config), with a fresh optimizer and curriculum; not with --resume")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=200, help="steps of linear learning-rate warmup")
    ap.add_argument("--tokens-per-batch", type=int, default=65536)
    ap.add_argument("--max-batch", type=int, default=512, help="at most this many sequences per batch")
    ap.add_argument("--start-len", type=int, default=40, help="first curriculum length in tokens (BOS included)")
    ap.add_argument("--max-len", type=int, default=16384, help="last curriculum length in tokens")
    ap.add_argument("--grow", type=float, default=1.25, help="length factor per curriculum stage")
    ap.add_argument("--gate", type=float, default=0.9,
                    help="training answer accuracy that moves to the next length (with --tasks: the tasks' mean)")
    ap.add_argument("--gate-floor", type=float, default=0.8,
                    help="with --tasks, the accuracy each task must also reach to move on")
    ap.add_argument("--check-every", type=int, default=20, help="steps per accuracy window of the gate")
    ap.add_argument("--mix-frac", type=float, default=0.5,
                    help="share of batches at a length drawn log-uniformly from [curriculum length / 8, curriculum "
                         "length], so that shorter contexts are not forgotten (the gate counts only the others)")
    ap.add_argument("--cooldown", type=float, default=0.0,
                    help="seconds at the end of the time budget over which the learning rate falls linearly to "
                         "a tenth (0: constant; use it on the last command)")
    ap.add_argument("--repeat-frac", type=float, default=0.25, help="share of repeat samples while short")
    ap.add_argument("--repeat-until", type=int, default=1024, help="no repeat samples from this length on")
    ap.add_argument("--log-every", type=int, default=20, help="steps per log line (the accuracies shown are the last gate window's)")
    ap.add_argument("--ckpt-every", type=float, default=60.0, help="seconds between checkpoints")
    ap.add_argument("--test-lengths", default="4096,8192,16384",
                    help="token counts of the test samples (BOS included: the texts are one character shorter)")
    ap.add_argument("--test-samples", type=int, default=16, help="test samples per length")
    ap.add_argument("--eval-tokens", type=int, default=65536, help="tokens per evaluation batch")
    ap.add_argument("--no-eval", action="store_true", help="write the test set but skip the PyTorch evaluation")
    args = ap.parse_args(argv)
    if args.smoke:  # a tiny run that touches every path: growth, repeat samples, checkpoints, export, eval
        given = set(a.split("=")[0] for a in argv if a.startswith("--"))
        smoke = {"--steps": ("steps", 20), "--tokens-per-batch": ("tokens_per_batch", 1024),
                 "--max-batch": ("max_batch", 16), "--max-len": ("max_len", 128), "--gate": ("gate", -1.0),
                 "--check-every": ("check_every", 3), "--log-every": ("log_every", 5), "--warmup": ("warmup", 5),
                 "--ckpt-every": ("ckpt_every", 0.0), "--test-lengths": ("test_lengths", "128,256"),
                 "--test-samples": ("test_samples", 2), "--repeat-until": ("repeat_until", 64),
                 "--device": ("device", "cpu")}
        for flag, (attr, value) in smoke.items():
            if flag not in given:
                setattr(args, attr, value)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, LOG_NAME))
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    use_bf16 = device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(args.seed)
    if args.resume and args.init_gguf:
        raise SystemExit("--init-gguf starts a new training; --resume continues one: give one of them")

    ckpt = None
    if args.resume:
        ckpt = load_checkpoint(args.resume)
        cfg = ckpt["model_cfg"]
        if args.tasks is None:  # the mixture goes on as it was (checkpoints without one: recall)
            args.tasks = ckpt["state"].get("tasks", "recall")
    else:
        cfg = dict(SMOKE_MODEL if args.smoke else FULL_MODEL)
    if args.max_len > cfg["context_length"]:
        raise SystemExit("--max-len %d exceeds the model's context %d" % (args.max_len, cfg["context_length"]))
    args.tasks = args.tasks or "recall"
    tasks, task_weights = parse_tasks(args.tasks)
    shortest = min(ruler_tasks.min_chars(t) for t in tasks)
    if args.start_len - 1 < shortest:
        raise SystemExit("--start-len must be at least %d" % (shortest + 1))
    model = Llama(cfg).to(device)
    opt = make_optimizer(model, args, device)
    rng = random.Random("sift-retrieval-train-%d" % args.seed)
    state = {"step": 0, "length": args.start_len, "train_seconds": 0.0, "tokens": 0, "growth": []}
    if args.init_gguf:
        load_gguf_into(model, args.init_gguf)
        log("initialised from %s" % args.init_gguf)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        state.update(ckpt["state"])
        rng.setstate(ckpt["rng"])
        state["length"] = min(state["length"], args.max_len)
    if tasks != ["recall"]:
        state["tasks"] = args.tasks  # (recall's checkpoints stay as they were)
        log("resumed %s: step %d, length %d, %.0f s trained" % (args.resume, state["step"], state["length"],
                                                                state["train_seconds"]))
    log("model: %s, %.2fM parameters; device %s%s; torch %s" % (
        json.dumps(cfg), count_params(model) / 1e6, device, " (bf16 autocast)" if use_bf16 else "", torch.__version__))
    log("args: %s" % json.dumps(vars(args)))

    ckpt_path = os.path.join(args.out, CHECKPOINT)
    batcher = Batcher(rng, tasks, task_weights)
    steps_here = 0
    last_ckpt = time.time()
    run_start = time.time()
    # Gate window, on the device: answer hits and total, first-digit hits and total, repeat hits and
    # total; and per task, answer hits and total.
    window = torch.zeros(6, device=device)
    task_window = torch.zeros(2, len(tasks), device=device)
    last_by_task = []  # (task, accuracy) of the last gate window, for the log of a mixture
    log_loss, log_steps, log_tokens, log_t = torch.zeros((), device=device), 0, 0, time.time()
    last_acc, last_first, last_rep = (float("nan"),) * 3  # the last gate window's accuracies, for the log
    model.train()
    while True:
        if time.time() - T_START >= args.time_budget or (args.steps and steps_here >= args.steps):
            break
        frontier = state["length"]
        # A mixed batch revisits shorter lengths; only batches at the frontier feed the gate.
        at_frontier = rng.random() >= args.mix_frac
        if at_frontier:
            length = frontier
        else:
            low = max(args.start_len, frontier // 8)
            length = int(round(math.exp(rng.uniform(math.log(low), math.log(frontier)))))
        batch_size = max(1, min(args.max_batch, args.tokens_per_batch // length))
        n_repeat = min(batch_size - 1, round(batch_size * args.repeat_frac)) if length < args.repeat_until else 0
        ids, recall_idx, repeat_idx, task_idx, answer_w = batcher.batch(length, batch_size, n_repeat)
        ids = ids.to(device, non_blocking=True)
        recall_idx = recall_idx.to(device, non_blocking=True)
        task_idx = task_idx.to(device, non_blocking=True)
        answer_w = answer_w.to(device, non_blocking=True)
        repeat_idx = repeat_idx.to(device, non_blocking=True)

        lr = args.lr * min(1.0, (state["step"] + 1) / max(1, args.warmup))
        left = args.time_budget - (time.time() - T_START)
        if args.cooldown > 0 and left < args.cooldown:
            lr *= max(0.1, left / args.cooldown)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
            h = model.hidden(ids)
            h = h.reshape(-1, h.shape[-1])
            flat = ids.reshape(-1)
            # Recall and repeat losses are averaged separately: a repeat sample scores hundreds of
            # characters, a recall sample a few dozen, and recall must not drown. In a mixture each
            # task's answers are averaged apart too, and the tasks weigh the same.
            logits_r = model.output(h[recall_idx]).float()
            targets_r = flat[recall_idx + 1]
            if len(tasks) == 1:
                loss = F.cross_entropy(logits_r, targets_r)
            else:
                loss = (F.cross_entropy(logits_r, targets_r, reduction="none") * answer_w).sum()
            if n_repeat:
                logits_p = model.output(h[repeat_idx]).float()
                targets_p = flat[repeat_idx + 1]
                loss = loss + F.cross_entropy(logits_p, targets_p)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

        # Statistics stay on the device (no sync per step: the CPU builds the next batch meanwhile).
        with torch.no_grad():
            if at_frontier:
                hit = logits_r.argmax(-1) == targets_r
                window[0] += hit.sum()
                window[1] += hit.numel()
                # Each query scores its VAL_LEN characters in a row: every third is a first digit,
                # the one only the record gives (the others can be copied from the record once found).
                window[2] += hit[0::task.VAL_LEN].sum()
                window[3] += hit[0::task.VAL_LEN].numel()
                task_window[0].index_add_(0, task_idx, hit.float())
                task_window[1].index_add_(0, task_idx, torch.ones_like(hit, dtype=torch.float32))
                if n_repeat:
                    window[4] += (logits_p.argmax(-1) == targets_p).sum()
                    window[5] += targets_p.numel()
            log_loss += loss.detach()
        state["step"] += 1
        state["tokens"] += batch_size * length
        steps_here += 1
        log_steps += 1
        log_tokens += batch_size * length

        if state["step"] % args.check_every == 0:  # the curriculum gate, on this window's answer accuracy
            w = window.tolist()
            window.zero_()
            hits, totals = task_window.tolist()
            task_window.zero_()
            last_acc = w[0] / w[1] if w[1] else float("nan")
            last_first = w[2] / w[3] if w[3] else float("nan")
            last_rep = w[4] / w[5] if w[5] else float("nan")
            # The mean of the tasks the window saw passes --gate and each passes --gate-floor (one task:
            # its accuracy against --gate, the recall gate as it was; the floor is below the gate).
            last_by_task = [(t, h / n) for t, h, n in zip(tasks, hits, totals) if n]
            accs = [a for _, a in last_by_task]
            gate_acc = sum(accs) / len(accs) if accs else float("nan")
            passed = accs and gate_acc >= args.gate and min(accs) >= min(args.gate, args.gate_floor)
            if w[1] and passed and frontier < args.max_len:
                new = min(args.max_len, max(frontier + 1, int(round(frontier * args.grow))))
                state["length"] = new
                trained = state["train_seconds"] + time.time() - run_start
                state["growth"].append([state["step"], new, round(trained, 1)])
                log("curriculum: step %d, %s %.3f >= %.2f at length %d -> length %d (%.0f s trained)" % (
                    state["step"], "recall acc" if len(tasks) == 1 else "mean task acc", gate_acc, args.gate, frontier,
                    new, trained))
        if state["step"] % args.log_every == 0:
            now = time.time()
            by_task = "" if len(tasks) == 1 else " | by task %s" % " ".join("%s %.3f" % ta for ta in last_by_task)
            log("step %d | len %d (this batch %d x %d, %d repeat) | loss %.4f | %s acc %.3f (first digit %.3f) | "
                "repeat acc %.3f | lr %.2e | %.2fM tok/s | %.1f s (trained %.0f s in all)%s" % (
                    state["step"], frontier, batch_size, length, n_repeat, log_loss.item() / max(1, log_steps),
                    "recall" if len(tasks) == 1 else "answer", last_acc,
                    last_first, last_rep, lr, log_tokens / max(1e-9, now - log_t) / 1e6, now - T_START,
                    state["train_seconds"] + now - run_start, by_task))
            log_loss.zero_()
            log_steps, log_tokens, log_t = 0, 0, now
        if time.time() - last_ckpt >= args.ckpt_every and state["step"] % args.check_every == 0:
            state_now = dict(state, train_seconds=state["train_seconds"] + time.time() - run_start)
            save_checkpoint(ckpt_path, model, opt, state_now, rng)
            last_ckpt = time.time()

    state["train_seconds"] += time.time() - run_start
    n_parts, n_bytes = save_checkpoint(ckpt_path, model, opt, state, rng)
    log("training stopped: step %d (%d here), length %d, %.0f s trained in all, %.2f G tokens; checkpoint %s.0..%d "
        "(%.1f MB)" % (state["step"], steps_here, state["length"], state["train_seconds"], state["tokens"] / 1e9,
                       ckpt_path, n_parts - 1, n_bytes / 1e6))

    model.eval()
    gguf_path = os.path.join(args.out, GGUF_NAME)
    size = export_gguf(model, gguf_path, "sift-retrieval-%s" % ("smoke" if args.smoke else "4m" if tasks == ["recall"]
                                                               else "tasks-4m"))
    log("wrote %s (%.2f MB)" % (gguf_path, size / 1e6))
    check_export(model, gguf_path, args.out, log)

    lengths = [int(x) for x in args.test_lengths.split(",") if x]
    results, written = {}, [CHECKPOINT + ".*", GGUF_NAME]
    for name in tasks:  # one held-out test set per task (recall's is retrieval_test.txt, as it was)
        samples = ruler_tasks.test_set(name, args.seed, lengths, args.test_samples)
        test_name = ruler_tasks.test_file_name(name)
        test_path = os.path.join(args.out, test_name)
        ruler_tasks.write_test_set(test_path, name, samples)
        written.append(test_name)
        log("wrote %s: %d samples at %s tokens (texts one character shorter: sift adds BOS)" % (
            test_path, len(samples), lengths))
        if not args.no_eval:
            results[name] = evaluate(model, samples, device, use_bf16, args.eval_tokens)
            for n, r in results[name].items():
                log("eval %s%5d tokens: %d samples, %d queries: char acc %.3f | value acc %.3f | first digit acc %.3f" % (
                    "" if len(tasks) == 1 else "%-10s " % name, n, r["samples"], r["queries"], r["char_acc"], r["value_acc"],
                    r["first_digit_acc"]))
    if not args.no_eval:
        report = {"step": state["step"], "train_length": state["length"], "attention": "dense (PyTorch SDPA)"}
        if "recall" in results:
            report["results"] = {str(k): v for k, v in results["recall"].items()}
        if len(tasks) > 1:
            report["tasks"] = {name: {str(k): v for k, v in res.items()} for name, res in results.items()}
        with open(os.path.join(args.out, EVAL_NAME), "w") as f:
            json.dump(report, f, indent=1)
        written.append(EVAL_NAME)
    written += [REFERENCE_NAME, LOG_NAME]
    log("done in %.1f s: %s" % (time.time() - T_START, ", ".join(os.path.join(args.out, n) for n in written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
