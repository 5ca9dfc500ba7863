#!/usr/bin/env python3
"""The speed targets on a GPU machine, in one run: sift's bench-attn and bench-decode on each GPU
backend, PyTorch SDPA (torch_attn.py) and Hugging Face transformers (hf_decode.py) beside them,
then one table per target group with today's figure, the target and whether it holds.

    python3 tools/gpu_report.py --sift build/tools/sift --anchors DIR [--model M.gguf]

DIR holds torch_attn.py and hf_decode.py (the project's shared anchor scripts). The model is an
8B-shaped Q8_0 GGUF; without --model one is made with sift-gen-model beside the sift binary
(8.5 GB, a few minutes). Standard library only; the anchors need PyTorch and transformers.
Every figure comes from this one run, so the ratios compare like with like."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

LAYER_CTX = [32768, 131072, 1048576]
DECODE_CTX = [32768, 131072]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout):
    log(" ".join(cmd))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"  timed out after {timeout} s")
        return ""
    if p.returncode != 0:
        log(f"  exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def bench_attn(sift, backend, repeat):
    """{ctx: {graph: {"total": us, stage: us, ...}}}"""
    text = run([sift, "bench-attn", "--backend", backend, "--ctx", ",".join(map(str, LAYER_CTX)), "--repeat",
                str(repeat), "--json"], 900)
    res = {}
    for o in json_lines(text):
        graphs = {}
        for g in o.get("graphs", []):
            d = {"total": g.get("total_us")}
            for st in g.get("stages", []):
                d[st["op"]] = st.get("us")
            graphs[g["graph"]] = d
        res[o["ctx"]] = graphs
    return res


def bench_decode(sift, backend, model, ctx, batch, steps):
    """{(ctx, attn): tokens/s}"""
    text = run([sift, "bench-decode", "-m", model, "--backend", backend, "--ctx", ",".join(map(str, ctx)), "--batch",
                str(batch), "--steps", str(steps), "--json"], 1200)
    return {(o["ctx"], o["attn"]): o.get("tokens_per_s") for o in json_lines(text)}


def sdpa(anchors):
    text = run([sys.executable, os.path.join(anchors, "torch_attn.py")], 900)
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"SDPA\(\w+\) decode N=(\d+): ([\d.]+) us", text)}


def hf(anchors):
    text = run([sys.executable, os.path.join(anchors, "hf_decode.py"), ",".join(map(str, DECODE_CTX))], 1800)
    res = {}
    for m in re.finditer(r"HF (\w+) cache\s+N=(\d+): [\d.]+ ms/step = ([\d.]+) tok/s", text):
        res[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return res


def fmt(x, unit=""):
    """A figure: ratios (unit "x") with two decimals, the rest with one."""
    return "-" if x is None else f"{x:.2f}x" if unit == "x" else f"{x:.1f}{unit}"


def row(name, value, target, holds):
    state = "-" if holds is None else ("holds" if holds else "misses")
    print(f"| {name} | {value} | {target} | {state} |")


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sift", required=True, help="the sift binary (build/tools/sift)")
    ap.add_argument("--anchors", required=True, help="the folder with torch_attn.py and hf_decode.py")
    ap.add_argument("--model", help="an 8B-shaped Q8_0 GGUF (default: made with sift-gen-model)")
    ap.add_argument("--backends", default="cuda,vulkan", help="GPU backends to measure (default cuda,vulkan)")
    ap.add_argument("--repeat", type=int, default=50, help="bench-attn repeats (default 50)")
    ap.add_argument("--steps", type=int, default=6, help="bench-decode steps per context and mode (default 6)")
    ap.add_argument("--no-hf", action="store_true", help="leave out hf_decode.py (it takes minutes)")
    ap.add_argument("--no-batch", action="store_true", help="leave out the batched decode (batch 4 and 16)")
    ap.add_argument("--layer-ctx", default=",".join(map(str, LAYER_CTX)), help="bench-attn contexts")
    ap.add_argument("--decode-ctx", default=",".join(map(str, DECODE_CTX)), help="bench-decode contexts")
    a = ap.parse_args()
    LAYER_CTX[:] = [int(x) for x in a.layer_ctx.split(",")]
    DECODE_CTX[:] = [int(x) for x in a.decode_ctx.split(",")]
    backends = [b for b in a.backends.split(",") if b]
    model = a.model
    if not model:
        model = "/tmp/sift-llama8b-q8_0.gguf"
        if not os.path.exists(model):
            gen = os.path.join(os.path.dirname(a.sift), "sift-gen-model")
            run([gen, "--preset", "8b", "--type", "q8_0", "-o", model], 1800)

    sd = sdpa(a.anchors)
    attn = {b: bench_attn(a.sift, b, a.repeat) for b in backends}
    dec = {b: bench_decode(a.sift, b, model, DECODE_CTX, 1, a.steps) for b in backends}
    batched = {} if a.no_batch else {
        b: {n: bench_decode(a.sift, b, model, DECODE_CTX[:1], n, max(2, a.steps // 2)) for n in (4, 16)} for b in backends}
    hfr = {} if a.no_hf else hf(a.anchors)

    print(f"# sift speed targets ({time.strftime('%Y-%m-%d')}, one run)\n")
    print("## One layer (32/8 heads, D = 128, f16 K/V, S = 128, W = 512, k = 2048), us\n")
    print("| N | SDPA | " + " | ".join(f"{b} dense | {b} select | {b} cache hit" for b in backends) + " |")
    print("|---|---|" + "---|---|---|" * len(backends))
    for n in LAYER_CTX:
        cells = [fmt(sd.get(n))]
        for b in backends:
            cells += [fmt(get(attn[b], n, g, "total")) for g in ("dense", "select", "cached")]
        print(f"| {n // 1024}K | " + " | ".join(cells) + " |")
    print("\n| target | today | target | |\n|---|---|---|---|")
    for b in backends:
        for n in LAYER_CTX:
            r = ratio(sd.get(n), get(attn[b], n, "dense", "total"))
            row(f"{b} dense speed / SDPA's, {n // 1024}K", fmt(r, "x"), ">= 0.95x", None if r is None else r >= 0.95)
        for n, lim in ((131072, 0.70), (1048576, 0.55)):
            r = ratio(get(attn[b], n, "select", "total"), sd.get(n))
            row(f"{b} TokenSelect step / SDPA's time, {n // 1024}K", fmt(r, "x"), f"<= {lim:.2f}x", None if r is None else r <= lim)
        r = ratio(get(attn[b], 131072, "cached", "total"), sd.get(131072))
        row(f"{b} Selection Cache hit / SDPA's time, 128K", fmt(r, "x"), "<= 0.25x", None if r is None else r <= 0.25)
        t = get(attn[b], 1048576, "select", "select")
        row(f"{b} top-2048 of 1M candidates", fmt(t, " us"), "<= 30 us", None if t is None else t <= 30)
        for n in LAYER_CTX:
            r = ratio(get(attn[b], n, "select", "vote"), get(attn[b], n, "select", "score"))
            row(f"{b} vote / score, {n // 1024}K", fmt(r, "x"), "<= 0.15x", None if r is None else r <= 0.15)
    if "cuda" in backends and "vulkan" in backends:
        for n in LAYER_CTX:
            for g in ("dense", "select", "cached"):
                r = ratio(get(attn["vulkan"], n, g, "total"), get(attn["cuda"], n, g, "total"))
                row(f"Vulkan / CUDA time, {g}, {n // 1024}K", fmt(r, "x"), "<= 1.2x", None if r is None else r <= 1.2)

    print("\n## End to end, 8B-shaped Q8_0, tokens/s\n")
    modes = ("dense", "select", "cached")
    print("| backend | " + " | ".join(f"{n // 1024}K {m}" for n in DECODE_CTX for m in modes) + " |")
    print("|---|" + "---|" * (len(DECODE_CTX) * len(modes)))
    for b in backends:
        print(f"| {b} | " + " | ".join(fmt(dec[b].get((n, m))) for n in DECODE_CTX for m in modes) + " |")
    for kind in ("static", "dynamic"):
        if any((kind, n) in hfr for n in DECODE_CTX):
            print(f"| HF transformers ({kind} cache) | " +
                  " | ".join(fmt(hfr.get((kind, n))) if m == "dense" else "-" for n in DECODE_CTX for m in modes) + " |")
    print("\n| target | today | target | |\n|---|---|---|---|")
    if "cuda" in backends:
        for n, lim in ((32768, 200), (131072, 150)):
            v = dec["cuda"].get((n, "dense"))
            row(f"CUDA dense, {n // 1024}K", fmt(v), f">= {lim}", None if v is None else v >= lim)
    for b in backends:
        r = ratio(dec[b].get((131072, "cached")), dec[b].get((131072, "dense")))
        row(f"{b} Selection Cache / dense, 128K", fmt(r, "x"), ">= 1.3x", None if r is None else r >= 1.3)
    if "cuda" in backends and "vulkan" in backends:
        for n in DECODE_CTX:
            for m in modes:
                r = ratio(dec["vulkan"].get((n, m)), dec["cuda"].get((n, m)))
                row(f"Vulkan / CUDA, {m}, {n // 1024}K", fmt(r, "x"), ">= 0.85x", None if r is None else r >= 0.85)
    if not batched:
        return
    print(f"\n## Batched decode at {DECODE_CTX[0] // 1024}K, tokens/s\n")
    print("| backend | batch | dense | select | cached |\n|---|---|---|---|---|")
    for b in backends:
        for n in (4, 16):
            print(f"| {b} | {n} | " + " | ".join(fmt(batched[b][n].get((DECODE_CTX[0], m))) for m in modes) + " |")


if __name__ == "__main__":
    main()
