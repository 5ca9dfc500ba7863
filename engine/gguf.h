/* GGUF v2 and v3 reader (engine-internal): the file format of llama.cpp models.
 *
 * A file is opened by mapping it read-only (or read in place from a caller's buffer); the parse
 * checks every length, count, offset and size against the bytes that exist before it touches
 * them, so a malformed file is an error naming the problem, never an out-of-bounds read. Nothing
 * is copied: strings and tensor data point into the mapping and live as long as the handle.
 *
 * Layout (all little-endian): "GGUF", u32 version (2 or 3: the same layout; version 1, with u32
 * counts and lengths, is refused), u64 tensor count, u64 metadata count;
 * metadata key/value pairs (key: u64 length + bytes; u32 value type; value); tensor infos (name,
 * u32 n_dims, u64 dims[n_dims] innermost first, u32 type, u64 offset into the data section);
 * padding to general.alignment (default 32); the data section, each tensor at an aligned offset.
 *
 * Errors: SIFT_E_INVALID for a file that is malformed or cannot be read (the message names the
 * field and the numbers), SIFT_E_DTYPE for a tensor type sift does not read, SIFT_E_NOMEM when the
 * host is out of memory. Accessors return SIFT_E_INVALID for a missing key or a value out of the
 * result's range, SIFT_E_DTYPE for a key of another type, SIFT_E_SHAPE for an array of another
 * length than asked. */
#ifndef SIFT_GGUF_H
#define SIFT_GGUF_H

#include "sift.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIFT_GGUF_VERSION 3
#define SIFT_GGUF_MIN_VERSION 2
#define SIFT_GGUF_DEFAULT_ALIGNMENT 32
#define SIFT_GGUF_MAX_DIMS 4 /* ggml's GGML_MAX_DIMS */

/* A string inside the file: not NUL-terminated (print with "%.*s"). */
typedef struct sift_gguf_str {
    const char *ptr;
    uint64_t len;
} sift_gguf_str;

/* s made safe for a message, in printable ASCII: other bytes (control, DEL, non-ASCII) and
 * backslashes as \xNN, cut with "..." to fit cap bytes (NUL included). Returns buf. */
const char *sift_gguf_str_shown(sift_gguf_str s, char *buf, size_t cap);

/* Metadata value types, numbered as in the file. */
typedef enum sift_gguf_value_type {
    SIFT_GGUF_U8 = 0,
    SIFT_GGUF_I8 = 1,
    SIFT_GGUF_U16 = 2,
    SIFT_GGUF_I16 = 3,
    SIFT_GGUF_U32 = 4,
    SIFT_GGUF_I32 = 5,
    SIFT_GGUF_F32 = 6,
    SIFT_GGUF_BOOL = 7,
    SIFT_GGUF_STRING = 8,
    SIFT_GGUF_ARRAY = 9,
    SIFT_GGUF_U64 = 10,
    SIFT_GGUF_I64 = 11,
    SIFT_GGUF_F64 = 12,
    SIFT_GGUF_VALUE_TYPE_COUNT
} sift_gguf_value_type;

/* Tensor types sift reads, numbered as ggml's ggml_type (the other ids are refused at open). */
typedef enum sift_gguf_tensor_type {
    SIFT_GGUF_TENSOR_F32 = 0,
    SIFT_GGUF_TENSOR_F16 = 1,
    SIFT_GGUF_TENSOR_Q4_0 = 2,
    SIFT_GGUF_TENSOR_Q8_0 = 8,
    SIFT_GGUF_TENSOR_Q4_K = 12,
    SIFT_GGUF_TENSOR_Q5_K = 13,
    SIFT_GGUF_TENSOR_Q6_K = 14,
    SIFT_GGUF_TENSOR_BF16 = 30
} sift_gguf_tensor_type;

typedef struct sift_gguf_kv {
    sift_gguf_str key;
    sift_gguf_value_type type;
    /* Scalars: the value's bytes in the file (little-endian, unaligned). Strings: see str.
     * Arrays: the first element (for string arrays, use strs). */
    const uint8_t *data;
    sift_gguf_str str;          /* STRING */
    sift_gguf_value_type elem_type; /* ARRAY: the element type (never ARRAY: nesting is refused) */
    uint64_t count;             /* ARRAY: number of elements */
    const sift_gguf_str *strs;  /* ARRAY of STRING: count strings, indexed at open */
} sift_gguf_kv;

typedef struct sift_gguf_tensor {
    sift_gguf_str name;
    uint32_t n_dims;
    uint64_t dims[SIFT_GGUF_MAX_DIMS]; /* ggml order: dims[0] is the row (innermost); unused = 1 */
    sift_gguf_tensor_type type;
    uint64_t offset;      /* from the start of the data section, a multiple of the alignment */
    uint64_t n_elements;
    uint64_t nbytes;
    const void *data;     /* in the mapping; aligned as the file's alignment (mapped files) */
} sift_gguf_tensor;

typedef struct sift_gguf sift_gguf;

/* Maps path read-only and parses it. */
sift_status sift_gguf_open_file(const char *path, sift_gguf **out);
/* Maps size bytes of the regular file fd from offset on (size 0: to its end) read-only and
 * parses them; fd may be closed after the call. label names the source in messages (NULL:
 * "<file descriptor>"). */
sift_status sift_gguf_open_fd(int fd, uint64_t offset, uint64_t size, const char *label, sift_gguf **out);
/* Parses size bytes at data in place: the buffer must outlive the handle. label names the source
 * in error messages (NULL: "<memory>"). */
sift_status sift_gguf_open_memory(const void *data, size_t size, const char *label, sift_gguf **out);
void sift_gguf_close(sift_gguf *g);

uint32_t sift_gguf_version(const sift_gguf *g);
uint32_t sift_gguf_alignment(const sift_gguf *g);
/* The file's size, and where its data section starts in it. */
uint64_t sift_gguf_file_size(const sift_gguf *g);
uint64_t sift_gguf_data_offset(const sift_gguf *g);
/* The name given at open (the path, or the memory label). */
const char *sift_gguf_label(const sift_gguf *g);

/* ---- metadata -------------------------------------------------------------------------------- */

uint64_t sift_gguf_kv_count(const sift_gguf *g);
const sift_gguf_kv *sift_gguf_kv_at(const sift_gguf *g, uint64_t index);
/* NULL when key is absent. */
const sift_gguf_kv *sift_gguf_find(const sift_gguf *g, const char *key);
bool sift_gguf_has(const sift_gguf *g, const char *key);
const char *sift_gguf_value_type_name(sift_gguf_value_type t);

/* Typed getters. Integers are read from any integer type whose value fits the result (files
 * differ in the width they use for the same key); floats from F32 or F64; bools only from BOOL. */
sift_status sift_gguf_get_u32(const sift_gguf *g, const char *key, uint32_t *out);
sift_status sift_gguf_get_i32(const sift_gguf *g, const char *key, int32_t *out);
sift_status sift_gguf_get_u64(const sift_gguf *g, const char *key, uint64_t *out);
sift_status sift_gguf_get_f32(const sift_gguf *g, const char *key, float *out);
sift_status sift_gguf_get_bool(const sift_gguf *g, const char *key, bool *out);
sift_status sift_gguf_get_string(const sift_gguf *g, const char *key, sift_gguf_str *out);
/* True when key holds a STRING equal to s. */
bool sift_gguf_string_is(const sift_gguf *g, const char *key, const char *s);

/* An array's element type and count. */
sift_status sift_gguf_get_array(const sift_gguf *g, const char *key, sift_gguf_value_type *elem_type,
                                uint64_t *count);
/* The strings of an ARRAY of STRING (valid while g is open). */
sift_status sift_gguf_get_string_array(const sift_gguf *g, const char *key, const sift_gguf_str **strs,
                                       uint64_t *count);
/* Copies an array of exactly count numbers into dst, converting: f32 from F32 or F64 elements;
 * i32 from any integer elements whose values fit. */
sift_status sift_gguf_copy_f32_array(const sift_gguf *g, const char *key, float *dst, uint64_t count);
sift_status sift_gguf_copy_i32_array(const sift_gguf *g, const char *key, int32_t *dst, uint64_t count);

/* ---- tensors --------------------------------------------------------------------------------- */

uint64_t sift_gguf_tensor_count(const sift_gguf *g);
const sift_gguf_tensor *sift_gguf_tensor_at(const sift_gguf *g, uint64_t index);
/* NULL when no tensor has that name. */
const sift_gguf_tensor *sift_gguf_find_tensor(const sift_gguf *g, const char *name);
/* "F32", "F16", "Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "BF16"; ggml's names for the ids sift refuses; "unknown". */
const char *sift_gguf_tensor_type_name(uint32_t type);
/* Elements per block and bytes per block of a type sift reads (F32: 1 and 4); false otherwise. */
bool sift_gguf_tensor_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);

/* ---- model hyper-parameters ------------------------------------------------------------------ */

typedef enum sift_gguf_arch {
    SIFT_GGUF_ARCH_LLAMA = 0,
    SIFT_GGUF_ARCH_QWEN2,
    SIFT_GGUF_ARCH_MISTRAL
} sift_gguf_arch;

typedef enum sift_gguf_rope_scaling {
    SIFT_GGUF_ROPE_SCALING_NONE = 0,
    SIFT_GGUF_ROPE_SCALING_LINEAR,
    SIFT_GGUF_ROPE_SCALING_YARN,
    SIFT_GGUF_ROPE_SCALING_LLAMA3
} sift_gguf_rope_scaling;

typedef struct sift_gguf_hparams {
    sift_gguf_arch arch;
    char arch_name[16];
    uint32_t n_vocab;       /* {arch}.vocab_size, else the tokenizer's token count, else token_embd rows */
    uint32_t n_embd;        /* {arch}.embedding_length */
    uint32_t n_layer;       /* {arch}.block_count */
    uint32_t n_ff;          /* {arch}.feed_forward_length */
    uint32_t n_head;        /* {arch}.attention.head_count */
    uint32_t n_head_kv;     /* {arch}.attention.head_count_kv (default n_head) */
    uint32_t head_dim;      /* {arch}.attention.key_length (default n_embd / n_head) */
    uint32_t n_ctx_train;   /* {arch}.context_length */
    float rope_freq_base;   /* {arch}.rope.freq_base (default 10000) */
    uint32_t rope_dim;      /* {arch}.rope.dimension_count (default head_dim) */
    /* {arch}.rope.scaling.*: type (default none; "llama3" is Llama 3.1's frequency-dependent
     * scaling), factor (default 1), low/high_freq_factor (defaults 1 and 4, Llama 3.1's),
     * original_context_length (default 0: absent). llama.cpp's converter stores Llama 3.1's
     * per-dimension factors as the tensor rope_freqs.weight instead of these keys: see
     * has_rope_freqs. */
    sift_gguf_rope_scaling rope_scaling;
    float rope_scaling_factor;
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    uint32_t rope_original_ctx;
    bool has_rope_freqs;    /* a rope_freqs.weight tensor: per-dimension frequency divisors */
    float rms_eps;          /* {arch}.attention.layer_norm_rms_epsilon */
    bool tied_output;       /* no output.weight tensor: the output projection is token_embd.weight */
    bool has_qkv_bias;      /* blk.0.attn_q.bias exists (Qwen2) */
} sift_gguf_hparams;

/* Reads the hyper-parameters of an llama, qwen2 or mistral model and checks that they agree
 * (heads divide the embedding, KV heads divide heads, rope dimension <= head dimension, ...). */
sift_status sift_gguf_read_hparams(const sift_gguf *g, sift_gguf_hparams *hp);

#endif
