"""The base-model fingerprints a TokenButler predictor file carries (Python stdlib only), the same as
sift's loader computes them (engine/predictor.c), so that a predictor for another model is refused.

    fingerprint(g)          sift-butler.base_fingerprint: FNV-1a 64 over, for every tensor in the
                            order of the file's tensor-info table, its name's UTF-8 bytes then the
                            first min(64, nbytes) bytes of its data. Cheap, but blind past those bytes.
    fingerprint_blocks(g)   sift-butler.base_fingerprint_blocks: FNV-1a 64 over, for every tensor in
                            the same order, its name's UTF-8 bytes, its byte count (u64 little-endian)
                            and its data: all of it up to 4096 bytes, else 64 blocks of 64 bytes,
                            block b at floor(b * (nbytes - 64) / 63), so that blocks spread over the
                            whole tensor (4 KiB read per tensor, nothing beside a model's load).

Both are 16 lowercase hex digits. Run as a script, it writes base_fingerprint_blocks into predictor
files made before that key existed, after checking that their base_fingerprint is the base's:

    /usr/bin/python3 tools/butler/fingerprint.py --base BASE.gguf PRED.butler.gguf...

Everything else in the file stays as it was (the key goes right after base_fingerprint).
"""

import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retrieval"))
import gguf_writer  # noqa: E402  (the project's GGUF reader and writer)

FNV_OFFSET = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3
BLOCKS, BLOCK_BYTES = 64, 64
KEY = "sift-butler.base_fingerprint"
KEY_BLOCKS = "sift-butler.base_fingerprint_blocks"


def _fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def fingerprint(g):
    """sift-butler.base_fingerprint of the GGUF file g (gguf_writer.GGUFFile)."""
    h = FNV_OFFSET
    for name, (_, _, data) in g.tensors.items():
        h = _fnv1a(h, name.encode("utf-8") + bytes(data[:64]))
    return "%016x" % h


def fingerprint_blocks(g):
    """sift-butler.base_fingerprint_blocks of the GGUF file g (gguf_writer.GGUFFile)."""
    h = FNV_OFFSET
    for name, (_, _, data) in g.tensors.items():
        n = len(data)
        h = _fnv1a(h, name.encode("utf-8") + struct.pack("<Q", n))
        if n <= BLOCKS * BLOCK_BYTES:
            h = _fnv1a(h, bytes(data))
            continue
        for b in range(BLOCKS):
            at = b * (n - BLOCK_BYTES) // (BLOCKS - 1)
            h = _fnv1a(h, bytes(data[at:at + BLOCK_BYTES]))
    return "%016x" % h


def stamp(path, base_fp, base_fp_blocks):
    """Rewrites the predictor file at path with base_fingerprint_blocks (after base_fingerprint,
    replacing one already there), once its base_fingerprint is checked to be base_fp."""
    g = gguf_writer.GGUFFile(path)
    if g.metadata.get(KEY) != base_fp:
        raise ValueError("%s: %s is %r, not the base's %s: a predictor for another model" % (
            path, KEY, g.metadata.get(KEY), base_fp))
    w = gguf_writer.GGUFWriter(g.metadata.get("general.alignment", gguf_writer.DEFAULT_ALIGNMENT))
    for key, value in g.metadata.items():
        if key in ("general.alignment", KEY_BLOCKS):
            continue
        w.add_value(key, g.types[key], value, g.array_types.get(key))
        if key == KEY:
            w.add_string(KEY_BLOCKS, base_fp_blocks)
    for name, (dims, ggml_type, data) in g.tensors.items():
        w.add_tensor(name, dims, ggml_type, bytes(data))
    return w.write(path)


def main():
    ap = argparse.ArgumentParser(description="Writes sift-butler.base_fingerprint_blocks of BASE into predictor "
                                             "files trained for it.")
    ap.add_argument("--base", required=True, help="the base model's GGUF the predictors were trained for")
    ap.add_argument("predictors", nargs="+", help="predictor files (GGUF, general.architecture sift-butler)")
    args = ap.parse_args()
    base = gguf_writer.GGUFFile(args.base, use_mmap=True)
    fp, fp_blocks = fingerprint(base), fingerprint_blocks(base)
    for path in args.predictors:
        try:
            size = stamp(path, fp, fp_blocks)
        except (OSError, ValueError) as e:
            print("fingerprint.py: %s" % e, file=sys.stderr)
            return 1
        print("%s: %s %s, %s %s (%d bytes)" % (path, KEY, fp, KEY_BLOCKS, fp_blocks, size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
