#!/usr/bin/env python3
"""Writes the hand-made GGUF files of the regression corpus, and small valid seeds for the fuzzer.

    python3 make_corpus.py            # broken files into this folder, their expected errors into expected.txt
    python3 make_corpus.py --seeds D  # valid files into D (tests/fuzz/run.sh seeds the fuzzer with them)

Each broken file is a small valid model with one thing wrong, so that the error it must produce
comes from that one thing. The files are committed; this script says how each was made.
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: '<B', I8: '<b', U16: '<H', I16: '<h', U32: '<I', I32: '<i', F32: '<f', BOOL: '<?',
          U64: '<Q', I64: '<q', F64: '<d'}
F32_T, F16_T, Q4_0_T, Q8_0_T, BF16_T = 0, 1, 2, 8, 30


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack('<Q', len(b)) + b


def value(t, v):
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors, version=3, alignment=32, magic=b'GGUF', n_kv=None, n_tensors=None, pad=True):
    """kvs: [(key, type, value)]; tensors: [(name, dims, type, data bytes)] laid out in order.
    Returns (bytes, [tensor info offsets]) so callers can patch fields."""
    out = bytearray(magic + struct.pack('<IQQ', version, len(tensors) if n_tensors is None else n_tensors,
                                        len(kvs) if n_kv is None else n_kv))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack('<I', t) + value(t, v)
    offset, infos = 0, []
    for name, dims, t, data in tensors:
        infos.append(len(out))
        out += gstr(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        out += struct.pack('<IQ', t, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    if pad or tensors:
        out += b'\0' * (-len(out) % alignment)
    for _, _, _, data in tensors:
        out += data + b'\0' * (-len(data) % alignment)
    return bytes(out), infos


TOKENS = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)] + ['\u2581', 'a', 'b', '\u2581a', 'ab']
TYPES = [2, 3, 3] + [6] * 256 + [1] * 5


def model_kvs(arch='llama', tokens=TOKENS, types=TYPES):
    n = len(tokens)
    return [('general.architecture', STRING, arch),
            ('general.name', STRING, 'corpus'),
            (arch + '.context_length', U32, 64),
            (arch + '.embedding_length', U32, 32),
            (arch + '.block_count', U32, 1),
            (arch + '.feed_forward_length', U32, 64),
            (arch + '.attention.head_count', U32, 4),
            (arch + '.attention.head_count_kv', U32, 2),
            (arch + '.rope.dimension_count', U32, 8),
            (arch + '.rope.freq_base', F32, 10000.0),
            (arch + '.attention.layer_norm_rms_epsilon', F32, 1e-5),
            ('tokenizer.ggml.model', STRING, 'llama'),
            ('tokenizer.ggml.tokens', ARRAY, (STRING, tokens)),
            ('tokenizer.ggml.scores', ARRAY, (F32, [-float(i) for i in range(n)])),
            ('tokenizer.ggml.token_type', ARRAY, (I32, types)),
            ('tokenizer.ggml.bos_token_id', U32, 1),
            ('tokenizer.ggml.eos_token_id', U32, 2),
            ('tokenizer.ggml.unknown_token_id', U32, 0)]


def model_tensors(n=len(TOKENS)):
    f16_one = struct.pack('<H', 0x3c00)
    return [('token_embd.weight', [32, n], F32_T, struct.pack('<f', 0.5) * (32 * n)),
            ('output_norm.weight', [32], F32_T, struct.pack('<f', 1.0) * 32),
            ('blk.0.attn_q.weight', [32, 32], F16_T, f16_one * (32 * 32)),
            ('blk.0.attn_k.weight', [32, 16], BF16_T, struct.pack('<H', 0x3f80) * (32 * 16)),
            ('blk.0.attn_v.weight', [32, 16], Q8_0_T, (f16_one + bytes(range(32))) * 16),
            ('blk.0.ffn_up.weight', [32, 64], Q4_0_T, (f16_one + bytes(range(0, 256, 16))) * 64)]


def all_value_types():
    return [('t.u8', U8, 200), ('t.i8', I8, -100), ('t.u16', U16, 60000), ('t.i16', I16, -30000),
            ('t.u32', U32, 4000000000), ('t.i32', I32, -2000000000), ('t.f32', F32, 1.5), ('t.bool', BOOL, True),
            ('t.str', STRING, 'h\u00e9llo'), ('t.u64', U64, 2 ** 63), ('t.i64', I64, -2 ** 62), ('t.f64', F64, 0.25),
            ('t.arr_i32', ARRAY, (I32, [1, -2, 3])), ('t.arr_f32', ARRAY, (F32, [0.5, -1.0])),
            ('t.arr_str', ARRAY, (STRING, ['x', '', 'yz'])), ('t.arr_empty', ARRAY, (U8, []))]


def valid():
    return gguf(model_kvs() + all_value_types(), model_tensors())[0]


def gpt2_symbols():
    """GPT-2's byte -> printable code point map."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    shifted, out = 0, {}
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + shifted)
            shifted += 1
    return out


def bpe_valid():
    """A qwen2 model with a small byte-level BPE vocabulary."""
    sym = gpt2_symbols()
    tokens = [sym[b] for b in range(256)] + ['\u0120t', 'he', '\u0120the', 'in', '12', '<|endoftext|>']
    types = [1] * 261 + [3]
    merges = ['\u0120 t', 'h e', '\u0120t he', 'i n', '1 2']
    kvs = model_kvs('qwen2', tokens, types)
    kvs = [kv for kv in kvs if not kv[0].startswith('tokenizer.ggml.')]
    kvs += [('tokenizer.ggml.model', STRING, 'gpt2'), ('tokenizer.ggml.pre', STRING, 'qwen2'),
            ('tokenizer.ggml.tokens', ARRAY, (STRING, tokens)), ('tokenizer.ggml.token_type', ARRAY, (I32, types)),
            ('tokenizer.ggml.merges', ARRAY, (STRING, merges)), ('tokenizer.ggml.eos_token_id', U32, 261)]
    return gguf(kvs, model_tensors(len(tokens)))[0]


def patch(data, offset, fmt, v):
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, v)
    return bytes(b)


SMALL_TOKENS = ['<unk>', '<s>', '</s>', '\u2581', 'a', 'b', '\u2581a', 'ab']
SMALL_TYPES = [2, 3, 3, 1, 1, 1, 1, 1]


def broken():
    """(name, bytes, a fragment the error message must contain)."""
    kvs, tensors = model_kvs(tokens=SMALL_TOKENS, types=SMALL_TYPES), model_tensors(len(SMALL_TOKENS))
    good, infos = gguf(kvs, tensors)
    header_end = 24
    first_key_len_at = header_end
    yield 'empty', b'', 'truncated'
    yield 'truncated_magic', b'GG', 'truncated'
    yield 'bad_magic', b'GGUX' + good[4:], 'not a GGUF file'
    yield 'ggml_magic', b'lmgg' + good[4:], 'not a GGUF file'
    yield 'version_1', patch(good, 4, '<I', 1), 'version 1'
    yield 'version_4', patch(good, 4, '<I', 4), 'version 4'
    yield 'big_endian', patch(good, 4, '>I', 3), 'big-endian'
    yield 'truncated_header', good[:20], 'truncated'
    yield 'truncated_in_kv', good[:good.index(b'tokenizer.ggml.tokens') + 10], 'past the end'
    yield 'truncated_in_tensor_infos', good[:infos[4] + 5], 'truncated'
    yield 'truncated_data', good[:len(good) - 100], 'run past the end'
    yield 'huge_kv_count', patch(good, 16, '<Q', 2 ** 60), 'metadata entries'
    yield 'huge_tensor_count', patch(good, 8, '<Q', 2 ** 60), 'tensors'
    yield 'kv_count_past_end', patch(good, 16, '<Q', len(kvs) + 1), 'past the end'
    yield 'key_length_past_eof', patch(good, first_key_len_at, '<Q', 2 ** 63), 'past the end'
    yield 'key_length_max', patch(good, first_key_len_at, '<Q', 2 ** 64 - 1), 'past the end'
    yield 'string_value_past_eof', gguf([('general.architecture', STRING, 'llama')], [], pad=False)[0][:-3], 'past the end'
    one = gguf([('k', U8, 1)], [], pad=False)[0]
    yield 'unknown_value_type', patch(one, len(one) - 5, '<I', 13), 'unknown value type 13'
    arr = gguf([('a', ARRAY, (U32, [1, 2, 3]))], [], pad=False)[0]
    at = arr.index(struct.pack('<IQ', U32, 3))
    yield 'array_count_huge', patch(arr, at + 4, '<Q', 2 ** 62), 'claims'
    yield 'array_count_past_eof', patch(arr, at + 4, '<Q', 4), 'claims'
    yield 'array_unknown_elem_type', patch(arr, at, '<I', 99), 'unknown element type 99'
    yield 'array_of_arrays', patch(arr, at, '<I', ARRAY), 'array of arrays'
    sarr = gguf([('s', ARRAY, (STRING, ['ab', 'cd']))], [], pad=False)[0]
    yield 'string_array_elem_past_eof', sarr[:-1], 'past the end'
    sat = sarr.index(b'\x02' + b'\0' * 7 + b'ab')
    yield 'string_array_elem_len_huge', patch(sarr, sat, '<Q', 2 ** 63 + 5), 'past the end'
    yield 'duplicate_key', gguf([('k', U8, 1), ('k', U8, 2)], [])[0], "appears twice"
    yield 'duplicate_tensor', gguf([], [('t', [32], F32_T, bytes(128)), ('t', [32], F32_T, bytes(128))])[0], 'appears twice'
    t0 = infos[0]
    name_len = len('token_embd.weight')
    dims_at = t0 + 8 + name_len + 4
    type_at = dims_at + 16
    off_at = type_at + 4
    yield 'tensor_offset_past_eof', patch(good, off_at, '<Q', 2 ** 40), 'run past the end'
    yield 'tensor_offset_wraps', patch(good, off_at, '<Q', 2 ** 64 - 32), 'run past the end'
    yield 'tensor_offset_misaligned', patch(good, off_at, '<Q', 4), 'not a multiple of the alignment'
    yield 'tensor_overlap', patch(good, infos[1] + 8 + len('output_norm.weight') + 4 + 8 + 4, '<Q', 32), 'overlap'
    yield 'tensor_unknown_type', patch(good, type_at, '<I', 1000), 'id 1000'
    yield 'tensor_q2_k', patch(good, type_at, '<I', 10), 'Q2_K (id 10)'
    yield 'tensor_q4_k_partial_row', patch(good, type_at, '<I', 12), 'not whole Q4_K blocks of 256'
    yield 'tensor_too_many_dims', patch(good, t0 + 8 + name_len, '<I', 5), '5 dimensions'
    yield 'tensor_dims_overflow', patch(patch(good, dims_at, '<Q', 2 ** 32), dims_at + 8, '<Q', 2 ** 32), 'overflows'
    yield 'tensor_dim_huge', patch(good, dims_at, '<Q', 2 ** 63), 'overflows'
    yield 'tensor_size_past_eof', patch(good, dims_at + 8, '<Q', 2 ** 40), 'run past the end'
    # Byte sizes that overflow while the element count fits. [32, 2^57] F32 is 2^62 elements, whose
    # 2^64 bytes wrap to 0 in u64 (the shape of fuzz_f32_size_overflow.gguf, the fuzzer's find).
    yield 'tensor_bytes_overflow', patch(good, dims_at + 8, '<Q', 2 ** 57), \
        "tensor 'token_embd.weight': byte size overflows at dimension 1"
    # Q8_0's 34 bytes a block of 32 take [32, 2^58 - 1] past 2^63 bytes but not past 2^64: the bound is int64's.
    yield 'tensor_q8_0_bytes_past_int64', gguf([], [('q', [32, 2 ** 58 - 1], Q8_0_T, b'')])[0], \
        "tensor 'q': byte size overflows at dimension 1"
    # Empty tensors (a zero dimension) whose other dimensions still overflow the strides a reader forms.
    yield 'tensor_empty_row_bytes_overflow', gguf([], [('r', [2 ** 62, 0], F32_T, b'')])[0], \
        "tensor 'r': byte size overflows: a row"
    yield 'tensor_empty_bytes_overflow', gguf([], [('e', [32, 0, 2 ** 57], F32_T, b'')])[0], \
        "tensor 'e': byte size overflows at dimension 2"
    yield 'tensor_empty_count_overflow', gguf([], [('e', [32, 0, 2 ** 62], F32_T, b'')])[0], \
        "tensor 'e': element count overflows at dimension 2"
    yield 'tensor_partial_block', gguf([], [('q', [33], Q8_0_T, bytes(68))])[0], 'not whole Q8_0 blocks'
    yield 'alignment_zero', gguf([('general.alignment', U32, 0)], [])[0], 'not a power of two'
    yield 'alignment_not_pow2', gguf([('general.alignment', U32, 48)], [])[0], 'not a power of two'
    yield 'alignment_string', gguf([('general.alignment', STRING, '32')], [])[0], 'expected an integer'
    yield 'alignment_huge_data_past_eof', gguf([('general.alignment', U32, 2 ** 31)], [('t', [32], F32_T, bytes(128))],
                                             alignment=32)[0], 'past the end'
    yield 'tensor_name_past_eof', patch(good, t0, '<Q', 2 ** 50), 'past the end'


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if len(sys.argv) == 3 and sys.argv[1] == '--seeds':
        os.makedirs(sys.argv[2], exist_ok=True)
        with open(os.path.join(sys.argv[2], 'valid.gguf'), 'wb') as f:
            f.write(valid())
        with open(os.path.join(sys.argv[2], 'bpe.gguf'), 'wb') as f:
            f.write(bpe_valid())
        with open(os.path.join(sys.argv[2], 'minimal.gguf'), 'wb') as f:
            f.write(gguf(all_value_types(), [('t', [32], Q4_0_T, bytes(18))])[0])
        return
    lines = []
    # Files the fuzzer found (fuzz_*.gguf) are kept with their lines; only the hand-made ones are rewritten.
    expected_path = os.path.join(here, 'expected.txt')
    if os.path.exists(expected_path):
        with open(expected_path) as f:
            found = [line for line in f if line.startswith('fuzz_')]
    else:
        found = []
    for name, data, fragment in broken():
        with open(os.path.join(here, name + '.gguf'), 'wb') as f:
            f.write(data)
        lines.append('%s.gguf\t%s\n' % (name, fragment))
    with open(os.path.join(here, 'expected.txt'), 'w') as f:
        f.write('# file<TAB>a fragment its error message must contain (written by make_corpus.py)\n')
        f.writelines(lines + found)


if __name__ == '__main__':
    main()
