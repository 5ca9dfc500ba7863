"""The TokenButler predictor (SPEC.md section 5): the model, its distillation loss, attention recall,
and its GGUF file (written and checked here; sift's C loader reads the same layout).

Shapes. The base has L layers, E = n_embd, Hq query and Hkv KV heads of D dims. Producers are the
layers p = 0, P, 2P, ... with p + 1 < L; producer p serves the consumer layers p + 1 ..
min(p + P, L - 1), consumer l sitting in slot s = l - p - 1 of p's output. The predictor at producer
i (layer i * P) reads the residual stream leaving that layer (the input of layer i * P + 1; the stream
entering layer 0 is the bare token embedding, blind to the context):

    LayerNorm(E, weight and bias) -> Linear(E -> hidden, no bias) -> SiLU -> Linear(hidden -> P * Hq * d')

and output index (s * Hq + h) * d' + a is q'[l][h][a] for l = p + 1 + s. Each consumer layer l >= 1
has a key projection W[l] [Hkv][d'][D] applied to the model's roped keys, kp[l][g][j] = W[l][g] @
k[l][g][j], and the student's scores are s'[h][j] = q'[l][h] . kp[l][g(h)][j] / sqrt(d') with
g(h) = h // (Hq / Hkv). Layer 0 has no prediction: sift attends it densely.

The file (GGUF v3, general.architecture "sift-butler"):
    u32  sift-butler.block_count, .embedding_length, .attention.head_count, .attention.head_count_kv,
         .attention.key_length, .key_dim, .producer_stride, .hidden_length
    f32  sift-butler.layer_norm_epsilon
    str  sift-butler.base_fingerprint and .base_fingerprint_blocks (teacher.fingerprint and
         .fingerprint_blocks of the base GGUF: fingerprint.py), sift-butler.training (a one-line
         summary, optional), general.name (optional)
    tensors, all F32 (all F16 with f16=True), row-major shapes (GGUF dims are these reversed):
         butler.{i}.norm.weight [E], butler.{i}.norm.bias [E], butler.{i}.fc1.weight [hidden][E],
         butler.{i}.fc2.weight [P*Hq*d'][hidden] for i = 0 .. n_producers - 1;
         butler.key.{l}.weight [Hkv][d'][D] for l = 1 .. L - 1.
"""

import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retrieval"))
import gguf_writer  # noqa: E402

ARCH = "sift-butler"
NEG = -1e30  # masked scores: finite, so that 0 * log q stays 0 where the teacher has no mass


def producer_layers(n_layer, stride):
    return [p for p in range(0, n_layer, stride) if p + 1 < n_layer]


def consumer_layers(p, n_layer, stride):
    return list(range(p + 1, min(p + stride, n_layer - 1) + 1))


class Butler(nn.Module):
    """The predictors of every producer and the key projections of every consumer layer."""

    def __init__(self, n_layer, n_embd, n_head, n_head_kv, head_dim, key_dim=16, stride=4, hidden=512, eps=1e-5):
        super().__init__()
        self.cfg = dict(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                        key_dim=key_dim, stride=stride, hidden=hidden, eps=eps)
        self.producers = producer_layers(n_layer, stride)
        if not self.producers:
            raise ValueError("a base of %d layer(s) has no consumer layer: nothing to predict" % n_layer)
        out = stride * n_head * key_dim
        self.norm = nn.ModuleList(nn.LayerNorm(n_embd, eps=eps) for _ in self.producers)
        self.fc1 = nn.ModuleList(nn.Linear(n_embd, hidden, bias=False) for _ in self.producers)
        self.fc2 = nn.ModuleList(nn.Linear(hidden, out, bias=False) for _ in self.producers)
        # key[l - 1] is W[l]. A random start of the keys' scale (1/sqrt(D) per entry keeps |kp| ~ |k|).
        self.key = nn.Parameter(torch.randn(n_layer - 1, n_head_kv, key_dim, head_dim) / math.sqrt(head_dim))

    def consumers(self, i):
        return consumer_layers(self.producers[i], self.cfg["n_layer"], self.cfg["stride"])

    def queries(self, i, x):
        """x [..., E] (the input of producer i's layer) -> q' [..., P, Hq, d'] for its consumer slots."""
        c = self.cfg
        h = self.fc2[i](F.silu(self.fc1[i](self.norm[i](x.float()))))
        return h.view(*x.shape[:-1], c["stride"], c["n_head"], c["key_dim"])

    def keys(self, l, k):
        """k [B, Hkv, T, D] roped keys of layer l -> kp [B, Hkv, T, d']."""
        return torch.matmul(k.float(), self.key[l - 1].transpose(-1, -2))

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    # -- the file ------------------------------------------------------------------------------------

    def gguf_tensors(self):
        """name -> (row-major numpy float32 array), in file order."""
        out = {}
        for i in range(len(self.producers)):
            out["butler.%d.norm.weight" % i] = self.norm[i].weight
            out["butler.%d.norm.bias" % i] = self.norm[i].bias
            out["butler.%d.fc1.weight" % i] = self.fc1[i].weight
            out["butler.%d.fc2.weight" % i] = self.fc2[i].weight
        for l in range(1, self.cfg["n_layer"]):
            out["butler.key.%d.weight" % l] = self.key[l - 1]
        return {k: v.detach().float().cpu().numpy() for k, v in out.items()}

    def write(self, path, fingerprint, fingerprint_blocks, name=None, training=None, f16=False, extra=None):
        """Writes the predictor GGUF; returns its size. fingerprint, fingerprint_blocks: the base's
        (teacher.Teacher's). extra: more (key, kind, value) metadata, kind one of 'u32', 'f32', 'str'."""
        c = self.cfg
        w = gguf_writer.GGUFWriter()
        w.add_string("general.architecture", ARCH)
        if name:
            w.add_string("general.name", name)
        a = ARCH + "."
        for key, v in (("block_count", c["n_layer"]), ("embedding_length", c["n_embd"]),
                       ("attention.head_count", c["n_head"]), ("attention.head_count_kv", c["n_head_kv"]),
                       ("attention.key_length", c["head_dim"]), ("key_dim", c["key_dim"]),
                       ("producer_stride", c["stride"]), ("hidden_length", c["hidden"])):
            w.add_u32(a + key, int(v))
        w.add_f32(a + "layer_norm_epsilon", float(c["eps"]))
        w.add_string(a + "base_fingerprint", fingerprint)
        w.add_string(a + "base_fingerprint_blocks", fingerprint_blocks)
        if training:
            w.add_string(a + "training", " ".join(training.split()))  # one line
        for key, kind, v in extra or ():
            {"u32": w.add_u32, "f32": w.add_f32, "str": w.add_string}[kind](key, v)
        for tname, arr in self.gguf_tensors().items():
            dims = list(reversed(arr.shape))
            if f16:
                w.add_tensor(tname, dims, gguf_writer.GGML_F16, arr.astype("<f2").tobytes())
            else:
                w.add_tensor(tname, dims, gguf_writer.GGML_F32, arr.astype("<f4").tobytes())
        return w.write(path)


U32_KEYS = ("block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
            "attention.key_length", "key_dim", "producer_stride", "hidden_length")


def read_file(path):
    """(config dict, fingerprint, metadata, tensors name -> float32 numpy row-major) of a predictor
    file, checking the format strictly: the architecture, every key with its type, the exact set of
    tensors, their dims and types. Raises ValueError on anything off."""
    g = gguf_writer.GGUFFile(path)
    meta, types = g.metadata, g.types
    if meta.get("general.architecture") != ARCH:
        raise ValueError("%s: general.architecture is %r, not %r" % (path, meta.get("general.architecture"), ARCH))
    a = ARCH + "."
    cfg = {}
    for key in U32_KEYS:
        if types.get(a + key) != gguf_writer.T_U32:
            raise ValueError("%s: %s%s missing or not a u32" % (path, a, key))
    if types.get(a + "layer_norm_epsilon") != gguf_writer.T_F32:
        raise ValueError("%s: %slayer_norm_epsilon missing or not an f32" % (path, a))
    fp = meta.get(a + "base_fingerprint")
    if types.get(a + "base_fingerprint") != gguf_writer.T_STRING or not (
            len(fp) == 16 and all(ch in "0123456789abcdef" for ch in fp)):
        raise ValueError("%s: %sbase_fingerprint missing or not 16 lowercase hex digits" % (path, a))
    fp_blocks = meta.get(a + "base_fingerprint_blocks")  # absent from files written before it existed
    if a + "base_fingerprint_blocks" in meta and (types[a + "base_fingerprint_blocks"] != gguf_writer.T_STRING or not (
            len(fp_blocks) == 16 and all(ch in "0123456789abcdef" for ch in fp_blocks))):
        raise ValueError("%s: %sbase_fingerprint_blocks is not 16 lowercase hex digits" % (path, a))
    for key in ("general.name", a + "training"):
        if key in meta and types[key] != gguf_writer.T_STRING:
            raise ValueError("%s: %s is not a string" % (path, key))
    L, E, hq, hkv, d, dk, P, hidden = (meta[a + k] for k in U32_KEYS)
    cfg = dict(n_layer=L, n_embd=E, n_head=hq, n_head_kv=hkv, head_dim=d, key_dim=dk, stride=P, hidden=hidden,
               eps=meta[a + "layer_norm_epsilon"])
    if L < 2 or P < 1 or hkv < 1 or hq % hkv:
        raise ValueError("%s: impossible shape (L %d, P %d, Hq %d, Hkv %d)" % (path, L, P, hq, hkv))
    want = {}
    for i, _ in enumerate(producer_layers(L, P)):
        want["butler.%d.norm.weight" % i] = [E]
        want["butler.%d.norm.bias" % i] = [E]
        want["butler.%d.fc1.weight" % i] = [E, hidden]
        want["butler.%d.fc2.weight" % i] = [hidden, P * hq * dk]
    for l in range(1, L):
        want["butler.key.%d.weight" % l] = [d, dk, hkv]
    if set(g.tensors) != set(want):
        raise ValueError("%s: tensors differ from the format: missing %s, unexpected %s" % (
            path, sorted(set(want) - set(g.tensors)), sorted(set(g.tensors) - set(want))))
    tensor_types = set(t for _, t, _ in g.tensors.values())
    if not (tensor_types <= {gguf_writer.GGML_F32} or tensor_types <= {gguf_writer.GGML_F16}):
        raise ValueError("%s: tensors must be all F32 or all F16" % path)
    tensors = {}
    for name, (dims, ggml_type, data) in g.tensors.items():
        if dims != want[name]:
            raise ValueError("%s: tensor %s has dims %s, expected %s" % (path, name, dims, want[name]))
        dt = "<f4" if ggml_type == gguf_writer.GGML_F32 else "<f2"
        tensors[name] = np.frombuffer(data, dtype=dt).astype(np.float32).reshape(list(reversed(dims)))
    return cfg, fp, meta, tensors


# ---- attention rows -----------------------------------------------------------------------------

def pick_rows(b, t, max_rows, gen, device):
    """[B, R] query positions per sequence (SPEC section 5): up to max_rows drawn without
    replacement from the last half [t // 2, t - 1), then the last token t - 1, sorted."""
    lo = t // 2
    n = max(0, t - 1 - lo)
    r = min(max_rows, n)
    if r < n:
        pick = torch.rand(b, n, generator=gen).argsort(dim=1)[:, :r] + lo
    else:
        pick = torch.arange(lo, t - 1).expand(b, n)
    rows = torch.cat([pick, torch.full((b, 1), t - 1, dtype=torch.long)], dim=1)
    return rows.sort(dim=1).values.to(device)


def row_scores(q, k, rows, scale):
    """Masked causal scores of the rows: q [B, Hq, R, d] at positions rows [B, R], k [B, Hkv, T, d]
    -> [B, Hq, R, T] float32, query head h against KV head h // (Hq / Hkv), NEG where j > row."""
    b, hq, r, d = q.shape
    hkv, t = k.shape[1], k.shape[2]
    s = torch.matmul(q.float().reshape(b, hkv, (hq // hkv) * r, d), k.float().transpose(-1, -2)) * scale
    s = s.view(b, hq, r, t)
    mask = torch.arange(t, device=q.device)[None, None, :] > rows[:, :, None]  # [B, R, T]
    return s.masked_fill(mask[:, None], NEG)


def distill_terms(teacher_scores, student_scores):
    """Per row (teacher rows softmax p, student log-softmax log q): cross-entropy -sum p log q and the
    teacher's entropy (so KL = CE - H), both [B, H, R]."""
    p = torch.softmax(teacher_scores, dim=-1)
    logq = torch.log_softmax(student_scores, dim=-1)
    ce = -(p * logq).sum(-1)
    logp = torch.log_softmax(teacher_scores, dim=-1)
    ent = -(p * logp).sum(-1)  # NEG entries: p = 0 exactly, logp finite -> 0
    return ce, ent


@torch.no_grad()
def recall(teacher_scores, student_scores, n_kv, ks):
    """Attention recall of the rows: for each k, the mean over heads and rows of the teacher mass
    inside (a) the student's top-k of that head, (b) the top-k of the student's per-KV-head max over
    its query heads (the list sift selects), (c) the teacher's own top-k (the best any selector of k
    tokens can do). Returns {k: (student, student_kvmax, oracle)} as sums with the row count, for
    averaging over batches: {k: [sum_a, sum_b, sum_c]}, count."""
    p = torch.softmax(teacher_scores, dim=-1)
    b, hq, r, t = p.shape
    g = hq // n_kv
    kv = student_scores.view(b, n_kv, g, r, t).max(dim=2).values  # [B, Hkv, R, T]
    pg = p.view(b, n_kv, g, r, t)
    out = {}
    for k in ks:
        kk = min(k, t)
        a = p.gather(-1, student_scores.topk(kk, dim=-1).indices).sum(-1)
        idx = kv.topk(kk, dim=-1).indices[:, :, None].expand(b, n_kv, g, r, kk)
        bb = pg.gather(-1, idx).sum(-1)
        c = p.topk(kk, dim=-1).values.sum(-1)
        out[k] = [a.sum().item(), bb.sum().item(), c.sum().item()]
    return out, p.numel() // t


def layer_rows(butler, l, q_student, q_teacher, k_teacher, rows, head_dim):
    """Teacher and student scores of consumer layer l at the rows: q_student [B, R, Hq, d'],
    q_teacher [B, Hq, R, D] (roped), k_teacher [B, Hkv, T, D] (roped)."""
    dk = butler.cfg["key_dim"]
    with torch.no_grad():
        ts = row_scores(q_teacher, k_teacher, rows, 1.0 / math.sqrt(head_dim))
    ss = row_scores(q_student.permute(0, 2, 1, 3), butler.keys(l, k_teacher), rows, 1.0 / math.sqrt(dk))
    return ts, ss
