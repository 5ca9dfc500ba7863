"""The frozen base model (the teacher) read from a GGUF that sift runs, and its forward in torch.

What sift computes for archs llama, qwen2 and mistral (engine/gguf.c, engine/model.c,
engine/forward.c), written out here so that the predictor learns the attention sift will see:

- the hyperparameters from the '<arch>.*' keys with sift's defaults (head_count_kv = head_count,
  key_length = n_embd / head_count, rope.dimension_count = key_length, rope.freq_base = 10000);
- weights of type F32, F16, BF16, Q8_0 or Q4_0, dequantized to f32 in numpy exactly as
  engine/quant.c does (Q8_0: an f16 scale then 32 int8 per block; Q4_0: an f16 scale then 16 bytes,
  value = (nibble - 8) * scale, the low nibbles being the block's first 16 values);
- RMSNorm, then Q/K/V (with qwen2's biases where the file has them), RoPE over the first
  rope.dimension_count dims of each head: adjacent pairs (2i, 2i+1) for llama and mistral (GGUF's
  llama Q/K rows are already permuted for that), NEOX pairs (i, i + n_rot/2) for qwen2; pair i turns
  by pos * base^(-2i/n_rot) / factor[i], the factors from a rope_freqs.weight tensor, or from
  linear or llama3 rope scaling keys; causal attention with query head h reading KV head
  h // (Hq / Hkv) at scale 1/sqrt(D); SwiGLU; the output tied to token_embd when output.weight is
  absent.

Teacher.forward returns, per layer asked for, the residual stream entering the layer and the roped
queries and keys (the keys are what sift writes to the KV cache).

Also here: the base-model fingerprints the predictor file carries (fingerprint.py), and
check_against_sift, which compares the teacher's logits with `sift logits`.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retrieval"))
import gguf_writer  # noqa: E402  (the project's GGUF reader)
from fingerprint import fingerprint, fingerprint_blocks  # noqa: E402  (the base's, for the predictor file)

ARCHS = ("llama", "qwen2", "mistral")


# ---- dequantization -----------------------------------------------------------------------------

def dequantize(dims, ggml_type, data):
    """A GGUF tensor's values as a float32 numpy array of row-major shape reversed(dims) (GGUF dims
    list the row length first)."""
    n = 1
    for d in dims:
        n *= d
    buf = np.frombuffer(data, dtype=np.uint8)
    if ggml_type == gguf_writer.GGML_F32:
        out = buf.view("<f4").astype(np.float32)
    elif ggml_type == gguf_writer.GGML_F16:
        out = buf.view("<f2").astype(np.float32)
    elif ggml_type == gguf_writer.GGML_BF16:
        out = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
    elif ggml_type == gguf_writer.GGML_Q8_0:
        blocks = buf.reshape(-1, 34)
        scale = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [n_blocks, 1]
        q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
        out = (q * scale).reshape(-1)
    elif ggml_type == gguf_writer.GGML_Q4_0:
        blocks = buf.reshape(-1, 18)
        scale = blocks[:, :2].copy().view("<f2").astype(np.float32)
        qs = blocks[:, 2:]
        lo = (qs & 0x0F).astype(np.int8) - 8  # values 0..15 of the block
        hi = (qs >> 4).astype(np.int8) - 8    # values 16..31
        out = (np.concatenate([lo, hi], axis=1).astype(np.float32) * scale).reshape(-1)
    else:
        raise ValueError("tensor type %d is not one sift runs (F32, F16, BF16, Q8_0, Q4_0)" % ggml_type)
    if out.size != n:
        raise ValueError("tensor of dims %s has %d values" % (dims, out.size))
    return out.reshape(list(reversed(dims)))


# ---- the base model's file ----------------------------------------------------------------------

def _uniform_u32(meta, key, default=None):
    """A u32 key that some converters write per layer (an array whose entries agree, as sift needs)."""
    if key not in meta:
        if default is None:
            raise ValueError("metadata key %s is missing" % key)
        return default
    v = meta[key]
    if isinstance(v, list):
        if not v or any(x != v[0] for x in v):
            raise ValueError("%s differs between layers, which sift does not run" % key)
        v = v[0]
    return int(v)


def read_config(g):
    """The hyperparameters sift reads (engine/gguf.c sift_gguf_read_hparams) as a dict."""
    meta = g.metadata
    arch = meta.get("general.architecture")
    if arch not in ARCHS:
        raise ValueError("architecture %r is not one sift runs (%s)" % (arch, ", ".join(ARCHS)))
    a = arch + "."
    c = {"arch": arch}
    c["n_embd"] = _uniform_u32(meta, a + "embedding_length")
    c["n_layer"] = _uniform_u32(meta, a + "block_count")
    c["n_ff"] = _uniform_u32(meta, a + "feed_forward_length")
    c["n_head"] = _uniform_u32(meta, a + "attention.head_count")
    c["n_head_kv"] = _uniform_u32(meta, a + "attention.head_count_kv", c["n_head"])
    c["n_ctx"] = _uniform_u32(meta, a + "context_length")
    c["rms_eps"] = float(meta[a + "attention.layer_norm_rms_epsilon"])
    c["rope_base"] = float(meta.get(a + "rope.freq_base", 10000.0))
    c["head_dim"] = _uniform_u32(meta, a + "attention.key_length", c["n_embd"] // c["n_head"])
    c["rope_dim"] = _uniform_u32(meta, a + "rope.dimension_count", c["head_dim"])
    if c["n_head"] % c["n_head_kv"]:
        raise ValueError("%d heads are not a multiple of %d KV heads" % (c["n_head"], c["n_head_kv"]))
    scaling = meta.get(a + "rope.scaling.type")
    factor = 1.0
    if scaling is None and a + "rope.scale_linear" in meta:
        scaling, factor = "linear", float(meta[a + "rope.scale_linear"])
    scaling = scaling or "none"
    if scaling not in ("none", "linear", "llama3"):
        raise ValueError("rope scaling %r is not supported (sift runs none, linear, llama3)" % scaling)
    c["rope_scaling"] = scaling
    c["rope_factor"] = float(meta.get(a + "rope.scaling.factor", factor))
    c["rope_low_freq_factor"] = float(meta.get(a + "rope.scaling.low_freq_factor", 1.0))
    c["rope_high_freq_factor"] = float(meta.get(a + "rope.scaling.high_freq_factor", 4.0))
    c["rope_original_ctx"] = _uniform_u32(meta, a + "rope.scaling.original_context_length", 0)
    c["rope_neox"] = arch == "qwen2"  # engine/model.c: qwen2 rotates (i, i + n_rot/2)
    emb = g.tensors["token_embd.weight"][0]
    c["n_vocab"] = emb[1]
    return c


def rope_freqs(c):
    """float32 [n_rot/2] of pair i's angle per position, base^(-2i/n_rot) / factor[i], computed in
    float32 as sift does (engine/ops_model.c sift_rope_freqs, engine/model.c make_rope_factors)."""
    half = c["rope_dim"] // 2
    i = np.arange(half, dtype=np.float32)
    freq = np.power(np.float32(c["rope_base"]), np.float32(-2.0) * i / np.float32(c["rope_dim"])).astype(np.float32)
    if c.get("rope_freqs_tensor") is not None:
        factors = c["rope_freqs_tensor"].astype(np.float32)
    elif c["rope_scaling"] == "none":
        factors = np.ones(half, dtype=np.float32)
    else:
        factors = np.full(half, c["rope_factor"], dtype=np.float32)
        if c["rope_scaling"] == "llama3" and c["rope_original_ctx"] > 0:
            orig, lo, hi, fac = (np.float32(c["rope_original_ctx"]), np.float32(c["rope_low_freq_factor"]),
                                 np.float32(c["rope_high_freq_factor"]), np.float32(c["rope_factor"]))
            for k in range(half):
                wavelen = np.float32(6.28318531) / freq[k]
                if wavelen < orig / hi:
                    factors[k] = 1.0
                elif wavelen <= orig / lo:
                    smooth = (orig / wavelen - lo) / (hi - lo)
                    factors[k] = np.float32(1.0) / ((np.float32(1.0) - smooth) / fac + smooth)
    return freq, factors


class Teacher:
    """The base model's weights on a device and its forward. Nothing here is trained.

    dtype: the weights' and activations' type (float32, or bfloat16 for big models on a GPU); norms,
    RoPE and softmax run in float32 whatever it is."""

    def __init__(self, path, device="cpu", dtype=torch.float32):
        self.path = path
        g = gguf_writer.GGUFFile(path, use_mmap=True)
        self.file = g
        self.fingerprint = fingerprint(g)
        self.fingerprint_blocks = fingerprint_blocks(g)
        c = read_config(g)
        if "rope_freqs.weight" in g.tensors:
            c["rope_freqs_tensor"] = dequantize(*g.tensors["rope_freqs.weight"])
        self.cfg = c
        self.device = torch.device(device)
        self.dtype = dtype
        self.n_params = 0
        self.w = {}
        for name, (dims, ggml_type, data) in g.tensors.items():
            arr = dequantize(dims, ggml_type, data)
            self.n_params += arr.size  # every tensor of the file, as sift counts the base for the overhead
            if name == "rope_freqs.weight":
                continue
            t = torch.from_numpy(np.ascontiguousarray(arr))
            # vectors (norms, biases) stay f32 as in sift; matrices take the compute type
            self.w[name] = t.to(self.device, dtype=torch.float32 if t.dim() == 1 else dtype)
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]
        freq, factors = rope_freqs(c)
        self.rope_freq = torch.from_numpy(freq).to(self.device)
        self.rope_factors = torch.from_numpy(factors).to(self.device)
        self.n_rep = c["n_head"] // c["n_head_kv"]

    # -- pieces --------------------------------------------------------------------------------------

    def _rms(self, x, weight):
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_eps"]) * weight

    def _linear(self, x, name, bias=None):
        y = F.linear(x.to(self.dtype), self.w[name])
        if bias is not None and bias in self.w:
            y = y + self.w[bias].to(y.dtype)
        return y

    def rope(self, x, pos0=0):
        """x [B, H, T, D] -> roped float32 copy, token t at position pos0 + t."""
        c = self.cfg
        t, n_rot = x.shape[2], c["rope_dim"]
        half = n_rot // 2
        pos = torch.arange(pos0, pos0 + t, device=x.device, dtype=torch.float32)
        theta = pos[:, None] * self.rope_freq[None, :] / self.rope_factors[None, :]  # [T, half], f32 as sift's
        cos, sin = theta.cos(), theta.sin()
        x = x.float()
        rot, rest = x[..., :n_rot], x[..., n_rot:]
        if c["rope_neox"]:
            a, b = rot[..., :half], rot[..., half:]
            out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
        else:
            pairs = rot.reshape(*rot.shape[:-1], half, 2)
            a, b = pairs[..., 0], pairs[..., 1]
            out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).reshape(rot.shape)
        return torch.cat([out, rest], dim=-1) if rest.shape[-1] else out

    def attention(self, q, k, v):
        """Causal attention, q [B, Hq, T, D], k and v [B, Hkv, T, D] -> [B, Hq, T, D] at scale 1/sqrt(D)."""
        k = k.repeat_interleave(self.n_rep, dim=1)
        v = v.repeat_interleave(self.n_rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):  # torch 2.x: flash / memory-efficient kernels
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # torch 1.x: explicit softmax over blocks of query rows, each against the keys up to its
        # last row only (the causal half), blocks of ~4M scores so that they stay in cache-sized
        # pieces and [T, T] never exists whole
        b, h, t, d = q.shape
        out = torch.empty_like(q)
        block = max(16, (1 << 22) // max(1, b * h * t))
        kt, vf = k.float().transpose(-1, -2), v.float()
        for r0 in range(0, t, block):
            r1 = min(t, r0 + block)
            s = torch.matmul(q[:, :, r0:r1].float(), kt[..., :r1]) / math.sqrt(d)
            mask = torch.arange(r1, device=q.device)[None, :] > torch.arange(r0, r1, device=q.device)[:, None]
            s = s.masked_fill(mask, float("-inf"))
            out[:, :, r0:r1] = torch.matmul(torch.softmax(s, dim=-1), vf[:, :, :r1]).to(out.dtype)
        return out

    # -- the forward ---------------------------------------------------------------------------------

    def _qkv(self, l, x, pos0=0):
        """Layer l's roped queries [B, Hq, T, D], roped keys and values [B, Hkv, T, D] (float32) of
        the residual stream x [B, T, E] at positions pos0 ..."""
        c, p = self.cfg, "blk.%d." % l
        b, t = x.shape[:2]
        hq, hkv, d = c["n_head"], c["n_head_kv"], c["head_dim"]
        xn = self._rms(x, self.w[p + "attn_norm.weight"])
        q = self._linear(xn, p + "attn_q.weight", p + "attn_q.bias").view(b, t, hq, d).transpose(1, 2)
        k = self._linear(xn, p + "attn_k.weight", p + "attn_k.bias").view(b, t, hkv, d).transpose(1, 2)
        v = self._linear(xn, p + "attn_v.weight", p + "attn_v.bias").view(b, t, hkv, d).transpose(1, 2)
        return self.rope(q, pos0), self.rope(k, pos0), v.float()

    def _rest(self, l, x, att):
        """The rest of layer l once its attention att [B, Hq, T, D] is known: the output projection
        into the residual stream x [B, T, E], then the SwiGLU feed-forward. Returns the new x."""
        p = "blk.%d." % l
        b, _, t, _ = att.shape
        x = x + self._linear(att.transpose(1, 2).reshape(b, t, -1), p + "attn_output.weight").float()
        xn = self._rms(x, self.w[p + "ffn_norm.weight"])
        h = F.silu(self._linear(xn, p + "ffn_gate.weight").float()) * self._linear(xn, p + "ffn_up.weight").float()
        return x + self._linear(h, p + "ffn_down.weight").float()

    def _logits(self, x):
        return self._linear(self._rms(x, self.w["output_norm.weight"]), "output.weight").float()

    @torch.no_grad()
    def forward(self, ids, want_x=(), want_qk=(), logits=False, rows=None):
        """ids: long [B, T] (BOS first, as sift feeds a prompt).

        want_x: layers whose input (the residual stream entering the layer, before its attention
        RMSNorm) to return, float32 [B, T, E]. want_qk: layers whose roped queries and keys to
        return, float32 [B, Hq, T, D] and [B, Hkv, T, D]. logits: also the logits [B, T, vocab]
        ("last": those of the last position only, [B, 1, vocab]).
        rows: long [B, R] positions: x and q are then returned at those rows only ([B, R, E] and
        [B, Hq, R, D]; the keys stay whole), all the distillation needs, which saves memory on long
        sequences. The layers after the last one asked about are not run unless logits are wanted.
        Returns a dict with 'x' {l: ...}, 'q' {l: ...}, 'k' {l: ...} and maybe 'logits'."""
        c = self.cfg
        b = ids.shape[0]
        want_x, want_qk = set(want_x), set(want_qk)
        last = c["n_layer"] - 1 if logits else max(list(want_x) + list(want_qk) + [0])
        out = {"x": {}, "q": {}, "k": {}}
        x = self.w["token_embd.weight"][ids].float()
        for l in range(last + 1):
            if l in want_x:
                out["x"][l] = x if rows is None else x[torch.arange(b, device=x.device)[:, None], rows]
            q, k, v = self._qkv(l, x)
            if l in want_qk:
                out["k"][l] = k
                idx = None if rows is None else rows[:, None, :, None].expand(-1, q.shape[1], -1, q.shape[3])
                out["q"][l] = q if rows is None else q.gather(2, idx)
            if l == last and not logits:
                break  # the last layer's queries and keys are all that was asked of it
            att = self.attention(q.to(self.dtype), k.to(self.dtype), v.to(self.dtype))
            x = self._rest(l, x, att)
        if logits:
            out["logits"] = self._logits(x[:, -1:] if logits == "last" else x)
        return out

    @torch.no_grad()
    def sample(self, n_seq, n_tokens, bos, rng, temperature=1.0, banned=(), batch=64, log=None):
        """n_seq sequences of n_tokens token ids (BOS first) sampled from the model itself at the given
        temperature, as long [n_seq, n_tokens] on the CPU, decoding with a KV cache (one token per
        step, as sift does). banned: token ids never sampled (EOS, say, so that the text runs on).
        rng: a torch.Generator on the CPU (the draws are made there, so the same on any device)."""
        c = self.cfg
        hkv, d, n_rep = c["n_head_kv"], c["head_dim"], self.n_rep
        seqs = []
        for s0 in range(0, n_seq, batch):
            nb = min(batch, n_seq - s0)
            ids = torch.full((nb, n_tokens), bos, dtype=torch.long)
            kc = [torch.zeros(nb, hkv, n_tokens, d, device=self.device) for _ in range(c["n_layer"])]
            vc = [torch.zeros(nb, hkv, n_tokens, d, device=self.device) for _ in range(c["n_layer"])]
            for pos in range(n_tokens - 1):
                x = self.w["token_embd.weight"][ids[:, pos:pos + 1].to(self.device)].float()  # [B, 1, E]
                for l in range(c["n_layer"]):
                    q, k, v = self._qkv(l, x, pos)
                    kc[l][:, :, pos:pos + 1], vc[l][:, :, pos:pos + 1] = k, v
                    # the one query against the cache [0, pos]: KV head g serves query heads g*n_rep ...
                    qg = q.view(nb, hkv, n_rep, d)
                    s = torch.matmul(qg, kc[l][:, :, :pos + 1].transpose(-1, -2)) / math.sqrt(d)
                    att = torch.matmul(torch.softmax(s, dim=-1), vc[l][:, :, :pos + 1])  # [B, Hkv, n_rep, D]
                    x = self._rest(l, x, att.reshape(nb, hkv * n_rep, 1, d))
                lg = self._logits(x)[:, -1].float().cpu()
                for tok in banned:
                    lg[:, tok] = float("-inf")
                probs = torch.softmax(lg / max(temperature, 1e-6), dim=-1)
                ids[:, pos + 1] = torch.multinomial(probs, 1, generator=rng)[:, 0]
            seqs.append(ids)
            if log:
                log("sampled %d of %d sequences of %d tokens from the base model" % (s0 + nb, n_seq, n_tokens))
        return torch.cat(seqs, dim=0)


# ---- the teacher against sift ---------------------------------------------------------------------

def sift_logits(sift, model, prompt, threads=None):
    """Runs `sift logits` on the CPU backend with an f32 KV cache: (token ids, logits [T, vocab])."""
    cmd = [sift, "logits", "-m", model, "-p", prompt, "-n", "0", "--kv", "f32", "--backend", "cpu"]
    if threads:
        cmd += ["-t", str(threads)]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if res.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), res.returncode, res.stderr.strip()))
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    return [r["token"] for r in rows], np.array([r["logits"] for r in rows], dtype=np.float64)


def check_against_sift(sift, model, prompt, tol=1e-3, log=print):
    """The teacher's logits (f32, CPU) against sift's for the prompt (sift tokenizes it and feeds it
    token by token, decode steps with dense attention). Passes when max |diff| <= tol * max(1,
    max |logit|). Returns (ok, max_diff, scale)."""
    ids, want = sift_logits(sift, model, prompt)
    teacher = Teacher(model, device="cpu", dtype=torch.float32)
    got = teacher.forward(torch.tensor([ids]), logits=True)["logits"][0].double().numpy()
    diff = float(np.abs(got - want).max())
    scale = float(np.abs(want).max())
    ok = diff <= tol * max(1.0, scale)
    argmax_same = int((got.argmax(-1) == want.argmax(-1)).sum())
    log("teacher vs sift: %s (%s, %d layers, %d/%d heads of %d): %d tokens, max |logit diff| %.3g, logits up to "
        "%.3g (relative %.2g), argmax equal at %d/%d -> %s" % (
            os.path.basename(model), teacher.cfg["arch"], teacher.cfg["n_layer"], teacher.cfg["n_head"],
            teacher.cfg["n_head_kv"], teacher.cfg["head_dim"], len(ids), diff, scale, diff / max(1.0, scale),
            argmax_same, len(ids), "ok" if ok else "FAILED"))
    return ok, diff, scale


# ---- variants of a model, to check the teacher's less common paths against sift -------------------

def _bf16_bytes(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()  # round to nearest even


def _q8_0_bytes(a):
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 32)
    d = np.abs(x).max(axis=1, keepdims=True) / 127.0
    q = np.where(d > 0, np.round(x / np.where(d > 0, d, 1)), 0).astype(np.int8)
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def _q4_0_bytes(a):
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 32)
    big = x[np.arange(x.shape[0]), np.abs(x).argmax(axis=1)][:, None]  # the signed value of largest |x|
    d = big / -8.0
    inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0)
    q = np.clip(np.trunc(x * inv + 8.5), 0, 15).astype(np.uint8)
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def copy_gguf(src, path, meta=None, rename_arch=None, convert=None, add_tensors=()):
    """Writes a copy of the GGUFFile src: meta {key: (type, value)} overrides or adds keys (after the
    arch rename: '<arch>.' keys move to '<rename_arch>.'); convert(name, dims, type, data) -> (type,
    bytes) may re-encode a tensor; add_tensors: (name, dims, type, bytes) appended."""
    w = gguf_writer.GGUFWriter(alignment=src.metadata.get("general.alignment", gguf_writer.DEFAULT_ALIGNMENT))
    old = src.metadata["general.architecture"]
    meta = dict(meta or {})
    for key, v in src.metadata.items():
        if key == "general.alignment":
            continue
        vtype = src.types[key]
        if rename_arch:
            if key == "general.architecture":
                v = rename_arch
            elif key.startswith(old + "."):
                key = rename_arch + key[len(old):]
        if key in meta:
            vtype, v = meta.pop(key)
        w.add_value(key, vtype, v, src.array_types.get(key))
    for key, (vtype, v) in meta.items():
        w.add_value(key, vtype, v)
    for name, (dims, ggml_type, data) in src.tensors.items():
        if convert:
            ggml_type, data = convert(name, dims, ggml_type, data)
        w.add_tensor(name, dims, ggml_type, data)
    for t in add_tensors:
        w.add_tensor(*t)
    return w.write(path)


def make_variants(base_path, out_dir, seed=0):
    """Copies of an F32 llama-arch GGUF that take the teacher down every path sift has: BF16, Q8_0
    and Q4_0 weights, arch mistral, arch qwen2 (NEOX RoPE) with Q/K/V biases, llama3 and linear rope
    scaling, a rope_freqs.weight tensor, RoPE over half the head. Returns [(label, path)]."""
    src = gguf_writer.GGUFFile(base_path)
    c = read_config(src)
    if c["arch"] != "llama" or any(t != gguf_writer.GGML_F32 for _, t, _ in src.tensors.values()):
        raise ValueError("variants are made from an all-F32 llama GGUF (stories260K, say)")
    rng = np.random.RandomState(seed)
    a = "llama."
    U32, F32, STR = gguf_writer.T_U32, gguf_writer.T_F32, gguf_writer.T_STRING

    def recode(fn, blocks):
        def convert(name, dims, ggml_type, data):
            if len(dims) != 2 or dims[0] % blocks:
                return ggml_type, data
            return fn.__ggml_type__, fn(dequantize(dims, ggml_type, data))
        return convert

    _bf16_bytes.__ggml_type__ = gguf_writer.GGML_BF16
    _q8_0_bytes.__ggml_type__ = gguf_writer.GGML_Q8_0
    _q4_0_bytes.__ggml_type__ = gguf_writer.GGML_Q4_0
    half = c["rope_dim"] // 2
    biases = []
    for l in range(c["n_layer"]):
        for t, n in (("q", c["n_head"]), ("k", c["n_head_kv"]), ("v", c["n_head_kv"])):
            vals = (rng.randn(n * c["head_dim"]) * 0.3).astype("<f4")
            biases.append(("blk.%d.attn_%s.bias" % (l, t), [n * c["head_dim"]], gguf_writer.GGML_F32, vals.tobytes()))
    factors = np.array([1.0, 2.5, 4.0, 8.0] * half, dtype="<f4")[:half]
    specs = [
        ("bf16", dict(convert=recode(_bf16_bytes, 1))),
        ("q8_0", dict(convert=recode(_q8_0_bytes, 32))),
        ("q4_0", dict(convert=recode(_q4_0_bytes, 32))),
        ("mistral", dict(rename_arch="mistral")),
        ("qwen2 (NEOX RoPE, Q/K/V biases)", dict(rename_arch="qwen2", add_tensors=biases)),
        ("llama3 rope scaling", dict(meta={a + "rope.scaling.type": (STR, "llama3"), a + "rope.scaling.factor": (F32, 8.0),
                                           a + "rope.scaling.original_context_length": (U32, 16),
                                           a + "rope.scaling.low_freq_factor": (F32, 1.0),
                                           a + "rope.scaling.high_freq_factor": (F32, 4.0)})),
        ("linear rope scaling", dict(meta={a + "rope.scaling.type": (STR, "linear"), a + "rope.scaling.factor": (F32, 4.0)})),
        ("rope_freqs tensor", dict(add_tensors=[("rope_freqs.weight", [half], gguf_writer.GGML_F32, factors.tobytes())])),
        ("rope over half the head", dict(meta={a + "rope.dimension_count": (U32, c["rope_dim"] // 2)})),
    ]
    out = []
    for i, (label, kw) in enumerate(specs):
        path = os.path.join(out_dir, "variant-%d.gguf" % i)
        copy_gguf(src, path, **kw)
        out.append((label, path))
    return out
