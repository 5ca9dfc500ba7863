"""A minimal GGUF v3 writer and reader (Python stdlib only).

Enough of the format for sift's loader (engine/gguf.c): scalar, string and array metadata, and
tensors of type F32 or F16 whose data the caller hands over as little-endian bytes. The reader also
sizes BF16, Q8_0 and Q4_0 tensors (handing their raw bytes over, undecoded), so that it can open
any model sift runs; tools/butler/teacher.py dequantizes them.

Layout written: "GGUF", version 3 (u32), tensor count (u64), metadata count (u64), the metadata
(key string, value type u32, value), the tensor infos (name, n_dims u32, dims u64 each with the
row length first, type u32, data offset u64 relative to the data section), zero padding up to the
alignment, then the tensor data, each tensor starting at a multiple of the alignment. Strings are
a u64 byte count then UTF-8 bytes. The key general.alignment (u32) is always written.
"""

import array
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32

# Metadata value types.
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY, T_U64, T_I64, T_F64 = range(13)
_SCALAR_FMT = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
               T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}

# Tensor types (ggml's ids) and their bytes per element.
GGML_F32, GGML_F16 = 0, 1
_ELEM_BYTES = {GGML_F32: 4, GGML_F16: 2}
# Types the reader can size, as (elements per block, bytes per block): ggml's Q4_0 is an f16 scale
# and 16 bytes of nibbles per 32 values, Q8_0 an f16 scale and 32 int8.
GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 2, 8, 30
READ_BLOCKS = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_BF16: (1, 2), GGML_Q8_0: (32, 34), GGML_Q4_0: (32, 18)}
TYPE_NAMES = {GGML_F32: "F32", GGML_F16: "F16", GGML_BF16: "BF16", GGML_Q8_0: "Q8_0", GGML_Q4_0: "Q4_0"}


def tensor_nbytes(dims, ggml_type):
    """Bytes of a tensor's data in the file (rows of a block type are whole blocks)."""
    if ggml_type not in READ_BLOCKS:
        raise ValueError("tensor type %d is not one sift runs" % ggml_type)
    per_block, block_bytes = READ_BLOCKS[ggml_type]
    n = 1
    for d in dims:
        n *= d
    if dims and dims[0] % per_block:
        raise ValueError("rows of %d values do not fill %s blocks of %d" % (dims[0], TYPE_NAMES[ggml_type], per_block))
    return n // per_block * block_bytes


def _str_bytes(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _pad(n, alignment):
    return (alignment - n % alignment) % alignment


class GGUFWriter:
    """Collects metadata and tensors, then writes them with write(path)."""

    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self.alignment = alignment
        self._kv = []  # (key, type, encoded value)
        self._keys = set()
        self._tensors = []  # (name, dims, ggml_type, data bytes)
        self.add_u32("general.alignment", alignment)

    # ---- metadata -------------------------------------------------------------------------------
    def _add(self, key, vtype, payload):
        if key in self._keys:
            raise ValueError("metadata key %r added twice" % key)
        self._keys.add(key)
        self._kv.append((key, vtype, payload))

    def add_u32(self, key, v):
        self._add(key, T_U32, struct.pack("<I", v))

    def add_i32(self, key, v):
        self._add(key, T_I32, struct.pack("<i", v))

    def add_f32(self, key, v):
        self._add(key, T_F32, struct.pack("<f", v))

    def add_bool(self, key, v):
        self._add(key, T_BOOL, struct.pack("<?", bool(v)))

    def add_string(self, key, v):
        self._add(key, T_STRING, _str_bytes(v))

    def add_array(self, key, elem_type, values):
        """An array of scalars (elem_type one of the T_* scalar types) or of strings (T_STRING)."""
        head = struct.pack("<IQ", elem_type, len(values))
        if elem_type == T_STRING:
            body = b"".join(_str_bytes(v) for v in values)
        else:
            fmt = _SCALAR_FMT[elem_type]
            body = struct.pack("<%d%s" % (len(values), fmt[1]), *values)
        self._add(key, T_ARRAY, head + body)

    def add_value(self, key, vtype, value, elem_type=None):
        """Any metadata value by its GGUF type (elem_type for arrays): what copying a file needs."""
        if vtype == T_STRING:
            self.add_string(key, value)
        elif vtype == T_ARRAY:
            self.add_array(key, elem_type, value)
        else:
            self._add(key, vtype, struct.pack(_SCALAR_FMT[vtype], value))

    # ---- tensors --------------------------------------------------------------------------------
    def add_tensor(self, name, dims, ggml_type, data):
        """dims in GGUF order: the row length (the fastest-varying index) first. A PyTorch tensor of
        shape (out, in) in row-major order has GGUF dims [in, out]. F32 and F16 for what this
        project makes; BF16, Q8_0 and Q4_0 bytes are taken as they are (for copying a model)."""
        if ggml_type not in READ_BLOCKS:
            raise ValueError("tensor %s: type %d not supported by this writer" % (name, ggml_type))
        if len(data) != tensor_nbytes(dims, ggml_type):
            raise ValueError("tensor %s: %d bytes for dims %s of type %d" % (name, len(data), dims, ggml_type))
        if any(t[0] == name for t in self._tensors):
            raise ValueError("tensor %r added twice" % name)
        self._tensors.append((name, list(dims), ggml_type, bytes(data)))

    # ---- output ---------------------------------------------------------------------------------
    def write(self, path):
        out = bytearray()
        out += GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self._tensors), len(self._kv))
        for key, vtype, payload in self._kv:
            out += _str_bytes(key) + struct.pack("<I", vtype) + payload
        offset = 0
        for name, dims, ggml_type, data in self._tensors:
            out += _str_bytes(name) + struct.pack("<I", len(dims))
            out += struct.pack("<%dQ" % len(dims), *dims)
            out += struct.pack("<IQ", ggml_type, offset)
            offset += len(data) + _pad(len(data), self.alignment)
        out += b"\0" * _pad(len(out), self.alignment)
        for _, _, _, data in self._tensors:
            out += data + b"\0" * _pad(len(data), self.alignment)
        with open(path, "wb") as f:
            f.write(out)
        return len(out)


def f32_bytes(values):
    """Little-endian f32 bytes of a flat sequence of numbers."""
    a = array.array("f", values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def f16_bytes(values):
    """Little-endian IEEE half bytes of a flat sequence of numbers (round to nearest even)."""
    values = list(values)
    return struct.pack("<%de" % len(values), *values)


# ---- reader (for checks: the trainer reads its own export back, the tests read what they wrote) ----

class GGUFFile:
    """A parsed GGUF file: .metadata (key -> Python value), .tensors (name -> (dims, type, bytes)),
    in the order of the file's tensor-info table.

    use_mmap: map the file instead of reading it, the tensors' data then being memoryviews into the
    map (no copy: what a multi-GB model needs); they stay valid while this object lives."""

    def __init__(self, path, use_mmap=False):
        if use_mmap:
            import mmap
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.raw = memoryview(self._map)
        else:
            with open(path, "rb") as f:
                self.raw = f.read()
        self.pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise ValueError("%s: not a GGUF file" % path)
        version, n_tensors, n_kv = self._unpack("<IQQ")
        if version != GGUF_VERSION:
            raise ValueError("%s: GGUF version %d" % (path, version))
        self.metadata = {}
        self.types = {}
        self.array_types = {}  # key -> element type, for the arrays
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = self._unpack("<I")
            self.types[key] = vtype
            if vtype == T_ARRAY:
                self.array_types[key] = struct.unpack("<I", bytes(self.raw[self.pos:self.pos + 4]))[0]
            self.metadata[key] = self._value(vtype)
        alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            dims = list(self._unpack("<%dQ" % n_dims))
            ggml_type, offset = self._unpack("<IQ")
            infos.append((name, dims, ggml_type, offset))
        data_start = self.pos + _pad(self.pos, alignment)
        self.tensors = {}
        for name, dims, ggml_type, offset in infos:
            if offset % alignment:
                raise ValueError("tensor %s: offset %d not aligned" % (name, offset))
            start = data_start + offset
            end = start + tensor_nbytes(dims, ggml_type)
            if end > len(self.raw):
                raise ValueError("tensor %s runs past the end of the file" % name)
            self.tensors[name] = (dims, ggml_type, self.raw[start:end])

    def _take(self, n):
        b = bytes(self.raw[self.pos:self.pos + n])
        if len(b) != n:
            raise ValueError("truncated GGUF")
        self.pos += n
        return b

    def _unpack(self, fmt):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))

    def _string(self):
        (n,) = self._unpack("<Q")
        return self._take(n).decode("utf-8")

    def _value(self, vtype):
        if vtype == T_STRING:
            return self._string()
        if vtype == T_ARRAY:
            elem_type, count = self._unpack("<IQ")
            return [self._value(elem_type) for _ in range(count)]
        (v,) = self._unpack(_SCALAR_FMT[vtype])
        return v

    def tensor_values(self, name):
        """A tensor's elements as a flat list of Python floats (row-major, row length = dims[0]).
        F32 and F16 only."""
        dims, ggml_type, data = self.tensors[name]
        if ggml_type not in _ELEM_BYTES:
            raise ValueError("tensor %s: tensor_values reads F32 and F16 only, not %s" % (name, TYPE_NAMES[ggml_type]))
        n = len(data) // _ELEM_BYTES[ggml_type]
        return list(struct.unpack("<%d%s" % (n, "f" if ggml_type == GGML_F32 else "e"), data))


# ---- the retrieval model's file -------------------------------------------------------------------

LAYER_TENSORS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]


def llama_tensor_shapes(cfg, vocab_size):
    """The GGUF name and dims (row length first) of every tensor of the model, in file order.
    cfg: dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim. 1-D tensors are the norms."""
    e, f = cfg["dim"], cfg["ffn_dim"]
    q, kv = cfg["n_heads"] * cfg["head_dim"], cfg["n_kv_heads"] * cfg["head_dim"]
    shapes = [("token_embd.weight", [e, vocab_size])]
    for l in range(cfg["n_layers"]):
        b = "blk.%d." % l
        shapes += [(b + "attn_norm.weight", [e]), (b + "attn_q.weight", [e, q]), (b + "attn_k.weight", [e, kv]),
                   (b + "attn_v.weight", [e, kv]), (b + "attn_output.weight", [q, e]), (b + "ffn_norm.weight", [e]),
                   (b + "ffn_gate.weight", [e, f]), (b + "ffn_up.weight", [e, f]), (b + "ffn_down.weight", [f, e])]
    shapes += [("output_norm.weight", [e]), ("output.weight", [e, vocab_size])]
    return shapes


def write_llama_gguf(path, cfg, tensor_data, name="sift-retrieval"):
    """Writes the model as GGUF arch 'llama' with the character tokenizer of task.py.

    cfg: dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, rope_base, norm_eps, context_length.
    tensor_data: name -> bytes, F32 for the 1-D norms and F16 for the matrices (see
    llama_tensor_shapes for names and dims). Q and K rows are in the order the model was trained
    with, RoPE rotating adjacent pairs (2i, 2i+1): the layout sift (like llama.cpp) expects for
    arch 'llama', so no permutation. Returns the file size."""
    import task  # the vocabulary

    w = GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", name)
    w.add_u32("general.file_type", 1)  # llama.cpp's "mostly F16"
    w.add_u32("llama.context_length", cfg["context_length"])
    w.add_u32("llama.embedding_length", cfg["dim"])
    w.add_u32("llama.block_count", cfg["n_layers"])
    w.add_u32("llama.feed_forward_length", cfg["ffn_dim"])
    w.add_u32("llama.attention.head_count", cfg["n_heads"])
    w.add_u32("llama.attention.head_count_kv", cfg["n_kv_heads"])
    w.add_u32("llama.attention.key_length", cfg["head_dim"])
    w.add_u32("llama.attention.value_length", cfg["head_dim"])
    w.add_u32("llama.rope.dimension_count", cfg["head_dim"])
    w.add_f32("llama.rope.freq_base", float(cfg["rope_base"]))
    w.add_f32("llama.attention.layer_norm_rms_epsilon", float(cfg["norm_eps"]))
    w.add_u32("llama.vocab_size", task.VOCAB_SIZE)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", T_STRING, task.TOKENS)
    w.add_array("tokenizer.ggml.scores", T_F32, [0.0] * task.VOCAB_SIZE)  # no merges: scores unused
    w.add_array("tokenizer.ggml.token_type", T_I32, task.TOKEN_TYPES)
    w.add_u32("tokenizer.ggml.bos_token_id", task.BOS_ID)
    w.add_u32("tokenizer.ggml.eos_token_id", task.EOS_ID)
    w.add_u32("tokenizer.ggml.unknown_token_id", task.UNK_ID)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    # No "▁" before the text: the first character must stay one token of its own.
    w.add_bool("tokenizer.ggml.add_space_prefix", False)
    for tname, dims in llama_tensor_shapes(cfg, task.VOCAB_SIZE):
        w.add_tensor(tname, dims, GGML_F32 if len(dims) == 1 else GGML_F16, tensor_data[tname])
    return w.write(path)
