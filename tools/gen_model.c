/* sift-gen-model: writes a random-weight GGUF model of a given shape (llama or qwen2 architecture),
 * for cross-backend tests and speed runs at shapes no test model has (Llama-3.1-8B: --preset 8b).
 * Weights are uniform with variance 1/fan-in, so activations stay of order one through the layers;
 * the tokenizer is a SentencePiece vocabulary of byte tokens and filler pieces. Matrices are written
 * in the chosen type (f32, f16, q8_0, q4_0, q4_k, q5_k, q6_k, with ggml's block layouts, or q4_k_m:
 * q6_k for the output projection and for half of the layers' attn_v and ffn_down, q4_k for the rest,
 * as llama.cpp's Q4_K_M mixes them); norms and biases in f32. The K-quants are quantized plainly
 * (each sub-block's range split evenly), not with llama.cpp's error-minimizing search.
 * --chat FORMAT makes the file a chat model's: its template (tokenizer.chat_template) and the
 * special tokens that format spells, in the vocabulary kind such models have (GPT-2 byte-level BPE
 * without merges for llama3 and chatml, so that every byte of text is one token; SentencePiece
 * for llama2). Rows are made on every core, each thread at its rows' place in the one random
 * stream, so a file depends on its options alone. */
#include "sift.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *arch;
    int layers, embd, ff, heads, kv_heads, head_dim, vocab, ctx;
    float rope_base;
    sift_dtype type;
    uint64_t seed;
    bool q4_k_m; /* type is Q4_K, with Q6_K where Q4_K_M puts it */
} shape;

/* The weights' stream: xorshift64, one draw per value, row after row, tensor after tensor. */
static uint64_t xorshift(uint64_t x)
{
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
}
static uint32_t next_u32(uint64_t *st)
{
    *st = xorshift(*st);
    return (uint32_t)(*st >> 32);
}
static float uniform_pm1(uint64_t *st) { return (float)(int32_t)next_u32(st) * (1.0f / 2147483648.0f); } /* [-1, 1) */

/* xorshift's step is linear over GF(2), so the state n draws on is M^n x: jump_pow[k] is M^(2^k),
 * a 64 x 64 bit matrix by columns (column j: the image of bit j). With it, threads writing rows
 * in parallel each start at their row's place in the one stream, and the file is the same as a
 * single thread's. */
static uint64_t jump_pow[64][64];
static uint64_t mat_apply(const uint64_t m[64], uint64_t x)
{
    uint64_t y = 0;
    for (int j = 0; j < 64; j++)
        if (x >> j & 1) y ^= m[j];
    return y;
}
static void jump_init(void)
{
    for (int j = 0; j < 64; j++) jump_pow[0][j] = xorshift(1ull << j);
    for (int k = 1; k < 64; k++)
        for (int j = 0; j < 64; j++) jump_pow[k][j] = mat_apply(jump_pow[k - 1], jump_pow[k - 1][j]);
}
static uint64_t skip_draws(uint64_t st, uint64_t n)
{
    for (int k = 0; k < 64; k++)
        if (n >> k & 1) st = mat_apply(jump_pow[k], st);
    return st;
}

/* ---- little-endian writers ------------------------------------------------------------------ */

static FILE *out;
static bool write_failed;
static void put(const void *p, size_t n)
{
    if (fwrite(p, 1, n, out) != n) write_failed = true;
}
static void put_u32(uint32_t v) { put(&v, 4); } /* x86-64 and arm64 hosts are little-endian */
static void put_u64(uint64_t v) { put(&v, 8); }
static void put_str(const char *s)
{
    put_u64(strlen(s));
    put(s, strlen(s));
}

enum { T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7, T_STRING = 8, T_ARRAY = 9 };

static void kv_u32(const char *key, uint32_t v)
{
    put_str(key);
    put_u32(T_U32);
    put_u32(v);
}
static void kv_f32(const char *key, float v)
{
    put_str(key);
    put_u32(T_F32);
    put(&v, 4);
}
static void kv_str(const char *key, const char *v)
{
    put_str(key);
    put_u32(T_STRING);
    put_str(v);
}
static void kv_bool(const char *key, bool v)
{
    put_str(key);
    put_u32(T_BOOL);
    const uint8_t b = v;
    put(&b, 1);
}
static void array_header(const char *key, uint32_t type, uint64_t n)
{
    put_str(key);
    put_u32(T_ARRAY);
    put_u32(type);
    put_u64(n);
}

/* ---- the vocabulary ------------------------------------------------------------------------- */

/* A chat format's file: its template (short, but with the markers that name the format) and the
 * special tokens it spells, BOS and EOS first. */
typedef struct chat_vocab {
    const char *name, *pre, *template_source;
    const char *specials[5];
    int n_specials;
    bool add_bos;
} chat_vocab;

static const chat_vocab chat_vocabs[] = {
    {"llama3", "llama-bpe",
     "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
     "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt "
     "%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}",
     {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, 5, true},
    {"chatml", "qwen2",
     "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' "
     "}}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}",
     {"<|endoftext|>", "<|im_end|>", "<|im_start|>"}, 3, false},
    {"llama2", NULL,
     "{%- for message in messages %}{%- if message['role'] == 'system' %}{{- '<<SYS>>\n' + message['content'] + "
     "'\n<</SYS>>\n\n' }}{%- elif message['role'] == 'user' %}{{- '[INST] ' + message['content'] + ' [/INST]' }}{%- "
     "else %}{{- message['content'] + eos_token }}{%- endif %}{%- endfor %}",
     {"<s>", "</s>"}, 2, true},
};

/* GPT-2's symbol for byte b, as UTF-8: printable bytes stand for themselves, the others are
 * 256 + their rank among the unprintable ones. */
static void gpt2_symbol(int b, char out[4])
{
    int shifted = 0;
    for (int x = 0; x < b; x++) shifted += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const unsigned cp = printable ? (unsigned)b : 256u + (unsigned)shifted;
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

/* How many tokenizer.* keys write_tokenizer writes. */
static int tokenizer_kv_count(const chat_vocab *chat) { return !chat ? 6 : chat->pre ? 9 : 7; }

/* The tokenizer.* keys. SentencePiece: <unk>, <s>, </s>, the 256 byte tokens, then filler pieces.
 * GPT-2 BPE: the 256 byte symbols, the format's special tokens, then filler tokens; no merges. */
static void write_tokenizer(int vocab, const chat_vocab *chat)
{
    if (!chat || !chat->pre) {
        kv_str("tokenizer.ggml.model", "llama");
        array_header("tokenizer.ggml.tokens", T_STRING, (uint64_t)vocab);
        for (int i = 0; i < vocab; i++) {
            char piece[32];
            if (i < 3) snprintf(piece, sizeof piece, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            else if (i < 259) snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
            else snprintf(piece, sizeof piece, "\xe2\x96\x81tok%d", i);
            put_str(piece);
        }
        array_header("tokenizer.ggml.scores", T_F32, (uint64_t)vocab);
        for (int i = 0; i < vocab; i++) {
            float score = i < 259 ? 0.0f : -(float)i;
            put(&score, 4);
        }
        array_header("tokenizer.ggml.token_type", T_I32, (uint64_t)vocab);
        for (int i = 0; i < vocab; i++) put_u32(i == 0 ? 2u : i < 3 ? 3u : i < 259 ? 6u : 1u);
        kv_u32("tokenizer.ggml.bos_token_id", 1);
        kv_u32("tokenizer.ggml.eos_token_id", 2);
        if (chat) kv_str("tokenizer.chat_template", chat->template_source);
        return;
    }
    kv_str("tokenizer.ggml.model", "gpt2");
    kv_str("tokenizer.ggml.pre", chat->pre);
    array_header("tokenizer.ggml.tokens", T_STRING, (uint64_t)vocab);
    for (int i = 0; i < vocab; i++) {
        char piece[32];
        if (i < 256) gpt2_symbol(i, piece);
        else if (i < 256 + chat->n_specials) snprintf(piece, sizeof piece, "%s", chat->specials[i - 256]);
        else snprintf(piece, sizeof piece, "tok%d", i);
        put_str(piece);
    }
    array_header("tokenizer.ggml.token_type", T_I32, (uint64_t)vocab);
    for (int i = 0; i < vocab; i++) put_u32(i >= 256 && i < 256 + chat->n_specials ? 3u : 1u);
    array_header("tokenizer.ggml.merges", T_STRING, 0);
    kv_u32("tokenizer.ggml.bos_token_id", 256);
    kv_u32("tokenizer.ggml.eos_token_id", 257);
    kv_bool("tokenizer.ggml.add_bos_token", chat->add_bos);
    kv_str("tokenizer.chat_template", chat->template_source);
}

/* ---- the tensors ---------------------------------------------------------------------------- */

typedef struct {
    char name[64];
    int64_t rows, cols; /* rows = 1 for vectors */
    bool vector;
    sift_dtype type;
    float scale;        /* uniform in [-scale, scale); vectors: 1 + that */
    uint64_t offset;
} tensor;

static int ggml_type(sift_dtype t)
{
    switch (t) {
    case SIFT_F16: return 1;
    case SIFT_Q4_0: return 2;
    case SIFT_Q8_0: return 8;
    case SIFT_Q4_K: return 12;
    case SIFT_Q5_K: return 13;
    case SIFT_Q6_K: return 14;
    default: return 0;
    }
}

static uint64_t tensor_bytes(const tensor *t) { return (uint64_t)t->rows * sift_dtype_row_bytes(t->type, t->cols); }

/* Rows are made in memory (a thread's share of a batch of rows), then written in order. */
typedef struct {
    unsigned char *p;
} cursor;
static void emit(cursor *o, const void *p, size_t n)
{
    memcpy(o->p, p, n);
    o->p += n;
}

static void write_half(cursor *o, float x)
{
    uint16_t h;
    sift_f32_to_f16(&h, &x, 1);
    emit(o, &h, 2);
}

/* Q4_K (qbits 4) or Q5_K (5) of 256 values x: each sub-block j of 32 gets the scale (hi - lo) /
 * (2^qbits - 1) and the min -lo of its range [lo, hi] (lo <= 0), both as 6-bit multiples of the
 * super-block's f16 d and dmin; q = round((x + min) / scale). quant.h has the layout. */
static void write_q45_k(cursor *o, const float *x, int qbits)
{
    const int qmax = (1 << qbits) - 1;
    float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = 0.0f;
        for (int l = 0; l < 32; l++) lo = fminf(lo, x[32 * j + l]), hi = fmaxf(hi, x[32 * j + l]);
        scale[j] = (hi - lo) / (float)qmax;
        min[j] = -lo;
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, min[j]);
    }
    uint16_t dh[2];
    const float dm[2] = {max_scale / 63.0f, max_min / 63.0f};
    sift_f32_to_f16(dh, dm, 2);
    float d, dmin;
    sift_f16_to_f32(&d, &dh[0], 1);
    sift_f16_to_f32(&dmin, &dh[1], 1);
    int sc[8], m[8];
    uint8_t q[256];
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0.0f ? (int)fminf(roundf(scale[j] / d), 63.0f) : 0;
        m[j] = dmin > 0.0f ? (int)fminf(roundf(min[j] / dmin), 63.0f) : 0;
        const float s = d * (float)sc[j], mn = dmin * (float)m[j];
        for (int l = 0; l < 32; l++) {
            const float v = s > 0.0f ? roundf((x[32 * j + l] + mn) / s) : 0.0f;
            q[32 * j + l] = (uint8_t)fminf(fmaxf(v, 0.0f), (float)qmax);
        }
    }
    /* scales: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scale) and 4-7 (min); 4-7 split into
     * low 4 bits (bytes 8-11: scale low nibble, min high nibble) and top 2 bits (bytes 0-7's top) */
    uint8_t packed[12];
    for (int j = 0; j < 4; j++) {
        packed[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        packed[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        packed[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    emit(o, dh, 4);
    emit(o, packed, 12);
    if (qbits == 5) { /* bit j of byte l: the fifth bit of value l of sub-block j */
        uint8_t qh[32] = {0};
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++) qh[l] |= (uint8_t)(((q[32 * j + l] >> 4) & 1) << j);
        emit(o, qh, 32);
    }
    uint8_t qs[128]; /* byte 32c + l: sub-block 2c's value l (low nibble), 2c + 1's (high) */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
    emit(o, qs, 128);
}

/* Q6_K of 256 values x: each sub-block of 16 gets the scale max|x| / 31 as an int8 multiple of the
 * super-block's f16 d; q = round(x / scale) + 32 in [0, 63]. quant.h has the layout. */
static void write_q6_k(cursor *o, const float *x)
{
    float scale[16], max_scale = 0.0f;
    for (int j = 0; j < 16; j++) {
        float amax = 0.0f;
        for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[16 * j + l]));
        scale[j] = amax / 31.0f;
        max_scale = fmaxf(max_scale, scale[j]);
    }
    uint16_t dh;
    const float d0 = max_scale / 127.0f;
    sift_f32_to_f16(&dh, &d0, 1);
    float d;
    sift_f16_to_f32(&d, &dh, 1);
    int8_t sc[16];
    uint8_t q[256];
    for (int j = 0; j < 16; j++) {
        sc[j] = (int8_t)(d > 0.0f ? fminf(roundf(scale[j] / d), 127.0f) : 0.0f);
        const float s = d * (float)sc[j];
        for (int l = 0; l < 16; l++) {
            const float v = s > 0.0f ? roundf(x[16 * j + l] / s) : 0.0f;
            q[16 * j + l] = (uint8_t)(fminf(fmaxf(v, -32.0f), 31.0f) + 32.0f);
        }
    }
    /* value 128h + 32g + l: low nibble in ql[64h + 32(g & 1) + l] (g < 2 low, else high nibble), top
     * two bits in bits 2g of qh[32h + l] */
    uint8_t ql[128] = {0}, qh[64] = {0};
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const uint8_t v = q[128 * h + 32 * g + l];
                ql[64 * h + 32 * (g & 1) + l] |= (uint8_t)((v & 15) << (4 * (g >> 1)));
                qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * g));
            }
    emit(o, ql, 128);
    emit(o, qh, 64);
    emit(o, sc, 16);
    emit(o, &dh, 2);
}

/* One row of cols values in the tensor's type, the next cols draws of the stream st. */
static void write_row(const tensor *t, float *buf, uint64_t *st, cursor *o)
{
    for (int64_t i = 0; i < t->cols; i++) buf[i] = (t->vector ? 1.0f : 0.0f) + t->scale * uniform_pm1(st);
    if (t->type == SIFT_F32) {
        emit(o, buf, (size_t)t->cols * 4);
    } else if (t->type == SIFT_F16) {
        uint16_t h[256];
        for (int64_t i = 0; i < t->cols; i += 256) {
            const int64_t n = t->cols - i < 256 ? t->cols - i : 256;
            sift_f32_to_f16(h, buf + i, (size_t)n);
            emit(o, h, (size_t)n * 2);
        }
    } else if (t->type == SIFT_Q4_K || t->type == SIFT_Q5_K || t->type == SIFT_Q6_K) {
        for (int64_t b = 0; b < t->cols; b += 256) {
            if (t->type == SIFT_Q6_K) write_q6_k(o, buf + b);
            else write_q45_k(o, buf + b, t->type == SIFT_Q5_K ? 5 : 4);
        }
    } else {
        for (int64_t b = 0; b < t->cols; b += 32) {
            const float *x = buf + b;
            if (t->type == SIFT_Q8_0) { /* d = max|x| / 127, q = round(x / d) */
                float amax = 0.0f;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
                const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                int8_t q[32];
                for (int i = 0; i < 32; i++) q[i] = (int8_t)roundf(x[i] * id);
                write_half(o, d);
                emit(o, q, 32);
            } else { /* Q4_0: d = (signed max-magnitude value) / -8, q = clamp(x / d + 8.5) */
                float max = 0.0f;
                for (int i = 0; i < 32; i++)
                    if (fabsf(x[i]) > fabsf(max)) max = x[i];
                const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
                uint8_t qs[16];
                for (int i = 0; i < 16; i++) {
                    int lo = (int)(x[i] * id + 8.5f), hi = (int)(x[i + 16] * id + 8.5f);
                    lo = lo > 15 ? 15 : lo < 0 ? 0 : lo;
                    hi = hi > 15 ? 15 : hi < 0 ? 0 : hi;
                    qs[i] = (uint8_t)(lo | (hi << 4));
                }
                write_half(o, d);
                emit(o, qs, 16);
            }
        }
    }
}

/* Rows [r0, r1) of a tensor, into rows * row_bytes bytes at out, the stream at row r0 in st. */
typedef struct {
    const tensor *t;
    int64_t r0, r1;
    uint64_t st;
    float *buf; /* cols floats */
    unsigned char *out;
} row_job;

static void *run_rows(void *arg)
{
    row_job *j = arg;
    cursor o = {j->out};
    for (int64_t r = j->r0; r < j->r1; r++) write_row(j->t, j->buf, &j->st, &o);
    return NULL;
}

/* Writes tensor t, the stream at its first value in *st (left after its last), with up to
 * n_jobs threads over batches of rows of at most `cap` bytes in batch. */
static void write_tensor(const tensor *t, uint64_t *st, row_job *jobs, int n_jobs, unsigned char *batch, size_t cap)
{
    const size_t row_bytes = sift_dtype_row_bytes(t->type, t->cols);
    int64_t per_batch = (int64_t)(cap / row_bytes);
    if (per_batch < 1) per_batch = 1;
    for (int64_t b0 = 0; b0 < t->rows && !write_failed; b0 += per_batch) {
        const int64_t b1 = t->rows - b0 < per_batch ? t->rows : b0 + per_batch;
        /* small batches on this thread: starting threads would cost more */
        const int64_t values = (b1 - b0) * t->cols;
        int n = values < (1 << 20) ? 1 : n_jobs;
        if (n > b1 - b0) n = (int)(b1 - b0);
        pthread_t tid[64];
        bool started[64] = {false};
        for (int w = 0; w < n; w++) {
            row_job *j = &jobs[w];
            j->t = t;
            j->r0 = b0 + (b1 - b0) * w / n;
            j->r1 = b0 + (b1 - b0) * (w + 1) / n;
            j->st = skip_draws(*st, (uint64_t)((j->r0 - b0) * t->cols));
            j->out = batch + (size_t)(j->r0 - b0) * row_bytes;
            if (w > 0) started[w] = pthread_create(&tid[w], NULL, run_rows, j) == 0;
        }
        run_rows(&jobs[0]);
        for (int w = 1; w < n; w++) {
            if (started[w]) pthread_join(tid[w], NULL);
            else run_rows(&jobs[w]); /* no thread to be had: here, in turn */
        }
        *st = jobs[n - 1].st;
        put(batch, (size_t)(b1 - b0) * row_bytes);
    }
}

static void usage(FILE *f)
{
    fputs("usage: sift-gen-model -o OUT.gguf [--preset NAME] [options]\n"
          "\n"
          "Writes a llama- or qwen2-architecture GGUF with random weights.\n"
          "\n"
          "presets: tiny (default: 2 layers, 256 wide, 8/8 heads of 32), gqa (4:1, head 64),\n"
          "         d128 (head 128), qwen2 (Q/K/V biases), 8b (Llama-3.1-8B's shapes: 32 layers,\n"
          "         4096 wide, 14336 hidden, 32/8 heads of 128, vocabulary 128256)\n"
          "options (override the preset):\n"
          "  --arch llama|qwen2  --layers L  --embd E  --ff F  --heads Hq/Hkv  --head-dim D\n"
          "  --vocab V  --ctx C  --type f32|f16|q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m (matrices)  --seed S\n"
          "  (K-quants need rows of multiples of 256: embd, ff and heads x head-dim)\n"
          "  --chat llama3|chatml|llama2  a chat model's vocabulary and template: GPT-2 byte-level BPE\n"
          "                     without merges (one token per byte of text) and Llama 3's or ChatML's\n"
          "                     special tokens, or SentencePiece and Llama 2's [INST] template\n",
          f);
}

static bool preset(const char *name, shape *s)
{
    const shape tiny = {"llama", 2, 256, 512, 8, 8, 32, 512, 4096, 10000.0f, SIFT_F32, 1, false};
    *s = tiny;
    if (!strcmp(name, "tiny")) return true;
    if (!strcmp(name, "gqa")) {
        s->heads = 8, s->kv_heads = 2, s->head_dim = 64, s->embd = 512;
        return true;
    }
    if (!strcmp(name, "d128")) {
        s->heads = 4, s->kv_heads = 2, s->head_dim = 128, s->embd = 512;
        return true;
    }
    if (!strcmp(name, "qwen2")) {
        s->arch = "qwen2", s->heads = 8, s->kv_heads = 2, s->head_dim = 64, s->embd = 512, s->rope_base = 1000000.0f;
        return true;
    }
    if (!strcmp(name, "8b")) {
        const shape b8 = {"llama", 32, 4096, 14336, 32, 8, 128, 128256, 131072, 500000.0f, SIFT_F16, 1, false};
        *s = b8;
        return true;
    }
    return false;
}

/* The options into s, *path and *chat: -1 to go on, else the exit status (after the help or a
 * message). */
static int parse_args(int argc, char **argv, shape *s, const char **path, const chat_vocab **chat)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "sift-gen-model: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-o")) *path = v;
        else if (!strcmp(a, "--preset")) {
            if (!preset(v, s)) {
                fprintf(stderr, "sift-gen-model: unknown preset '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--arch")) s->arch = !strcmp(v, "qwen2") ? "qwen2" : "llama";
        else if (!strcmp(a, "--layers")) s->layers = atoi(v);
        else if (!strcmp(a, "--embd")) s->embd = atoi(v);
        else if (!strcmp(a, "--ff")) s->ff = atoi(v);
        else if (!strcmp(a, "--heads")) {
            if (sscanf(v, "%d/%d", &s->heads, &s->kv_heads) != 2) s->heads = 0;
        } else if (!strcmp(a, "--head-dim")) s->head_dim = atoi(v);
        else if (!strcmp(a, "--vocab")) s->vocab = atoi(v);
        else if (!strcmp(a, "--ctx")) s->ctx = atoi(v);
        else if (!strcmp(a, "--seed")) s->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--chat")) {
            for (size_t c = 0; c < sizeof chat_vocabs / sizeof chat_vocabs[0]; c++)
                if (!strcmp(v, chat_vocabs[c].name)) *chat = &chat_vocabs[c];
            if (!*chat) {
                fprintf(stderr, "sift-gen-model: unknown chat format '%s' (llama3, chatml, llama2)\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--type")) {
            static const struct {
                const char *name;
                sift_dtype type;
                bool mix;
            } types[] = {{"f32", SIFT_F32, false},  {"f16", SIFT_F16, false},  {"q8_0", SIFT_Q8_0, false},
                         {"q4_0", SIFT_Q4_0, false}, {"q4_k", SIFT_Q4_K, false}, {"q5_k", SIFT_Q5_K, false},
                         {"q6_k", SIFT_Q6_K, false}, {"q4_k_m", SIFT_Q4_K, true}};
            size_t ti = 0;
            while (ti < sizeof types / sizeof types[0] && strcmp(v, types[ti].name)) ti++;
            if (ti < sizeof types / sizeof types[0]) s->type = types[ti].type, s->q4_k_m = types[ti].mix;
            else {
                fprintf(stderr, "sift-gen-model: unknown type '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "sift-gen-model: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!*path) {
        usage(stderr);
        return 2;
    }
    if (s->layers < 1 || s->heads < 1 || s->kv_heads < 1 || s->heads % s->kv_heads || s->head_dim < 8 || s->head_dim % 8 ||
        s->vocab < 260 || s->embd < 32 || s->embd % 32 || s->ff < 32 || s->ff % 32 || s->ctx < 1 ||
        (s->heads * s->head_dim) % 32) {
        fprintf(stderr, "sift-gen-model: impossible shape (heads must divide, sizes multiples of 32, vocab >= 260)\n");
        return 2;
    }
    if (sift_dtype_block(s->type) == 256 && (s->embd % 256 || s->ff % 256 || (s->heads * s->head_dim) % 256)) {
        fprintf(stderr, "sift-gen-model: %s rows hold multiples of 256 values, so embd, ff and heads x head-dim must be too\n",
                sift_dtype_name(s->type));
        return 2;
    }
    return -1;
}

/* The model's tensors, each at its offset in the data (32-byte aligned); *total: the data's bytes. */
static tensor *tensor_list(shape s, int *n_out, uint64_t *total)
{
    const int per_layer = strcmp(s.arch, "qwen2") ? 9 : 12;
    const int n_tensors = 3 + s.layers * per_layer;
    tensor *ts = calloc((size_t)n_tensors, sizeof *ts);
    if (!ts) return NULL;
    int nt = 0;
    const int64_t qd = (int64_t)s.heads * s.head_dim, kvd = (int64_t)s.kv_heads * s.head_dim;
#define MAT(nm, r, c)                                                                                                  \
    ts[nt] = (tensor){.rows = (r), .cols = (c), .type = s.type, .scale = sqrtf(3.0f / (float)(c))};                    \
    snprintf(ts[nt++].name, 64, "%s", nm)
#define VEC(nm, n, sc)                                                                                                 \
    ts[nt] = (tensor){.rows = 1, .cols = (n), .vector = true, .type = SIFT_F32, .scale = (sc)};                        \
    snprintf(ts[nt++].name, 64, "%s", nm)
    MAT("token_embd.weight", s.vocab, s.embd);
    ts[nt - 1].scale = 1.0f;
    VEC("output_norm.weight", s.embd, 0.1f);
    MAT("output.weight", s.vocab, s.embd);
    if (s.q4_k_m) ts[nt - 1].type = SIFT_Q6_K;
    for (int l = 0; l < s.layers; l++) {
        char n[64];
#define LNAME(suffix) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), n)
        VEC(LNAME("attn_norm.weight"), s.embd, 0.1f);
        MAT(LNAME("attn_q.weight"), qd, s.embd);
        MAT(LNAME("attn_k.weight"), kvd, s.embd);
        MAT(LNAME("attn_v.weight"), kvd, s.embd);
        if (s.q4_k_m && l % 2 == 0) ts[nt - 1].type = SIFT_Q6_K;
        MAT(LNAME("attn_output.weight"), s.embd, qd);
        if (per_layer == 12) {
            VEC(LNAME("attn_q.bias"), qd, 0.5f);
            ts[nt - 1].vector = false, ts[nt - 1].rows = 1; /* a bias: values around 0, not 1 */
            VEC(LNAME("attn_k.bias"), kvd, 0.5f);
            ts[nt - 1].vector = false, ts[nt - 1].rows = 1;
            VEC(LNAME("attn_v.bias"), kvd, 0.5f);
            ts[nt - 1].vector = false, ts[nt - 1].rows = 1;
        }
        VEC(LNAME("ffn_norm.weight"), s.embd, 0.1f);
        MAT(LNAME("ffn_gate.weight"), s.ff, s.embd);
        MAT(LNAME("ffn_up.weight"), s.ff, s.embd);
        MAT(LNAME("ffn_down.weight"), s.embd, s.ff);
        if (s.q4_k_m && l % 2 == 0) ts[nt - 1].type = SIFT_Q6_K;
#undef LNAME
    }
    uint64_t offset = 0;
    for (int i = 0; i < nt; i++) {
        ts[i].offset = offset;
        offset += (tensor_bytes(&ts[i]) + 31) / 32 * 32;
    }

    *n_out = nt;
    *total = offset;
    return ts;
}

/* The header: the metadata (the shape, the tokenizer) and the tensors' names, shapes and offsets. */
static void write_header(shape s, const chat_vocab *chat, const tensor *ts, int nt)
{
    const int n_kv = 12 + tokenizer_kv_count(chat);
    put("GGUF", 4);
    put_u32(3);
    put_u64((uint64_t)nt);
    put_u64(n_kv);
    char key[96];
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", s.arch, suffix), key)
    kv_str("general.architecture", s.arch);
    kv_str("general.name", "sift random-weight model");
    kv_u32(AK("context_length"), (uint32_t)s.ctx);
    kv_u32(AK("embedding_length"), (uint32_t)s.embd);
    kv_u32(AK("block_count"), (uint32_t)s.layers);
    kv_u32(AK("feed_forward_length"), (uint32_t)s.ff);
    kv_u32(AK("attention.head_count"), (uint32_t)s.heads);
    kv_u32(AK("attention.head_count_kv"), (uint32_t)s.kv_heads);
    kv_u32(AK("attention.key_length"), (uint32_t)s.head_dim);
    kv_u32(AK("rope.dimension_count"), (uint32_t)s.head_dim);
    kv_f32(AK("rope.freq_base"), s.rope_base);
    kv_f32(AK("attention.layer_norm_rms_epsilon"), 1e-5f);
#undef AK
    write_tokenizer(s.vocab, chat);

    for (int i = 0; i < nt; i++) {
        put_str(ts[i].name);
        const bool is1d = ts[i].rows == 1 && (ts[i].vector || strstr(ts[i].name, ".bias"));
        put_u32(is1d ? 1 : 2);
        put_u64((uint64_t)ts[i].cols);
        if (!is1d) put_u64((uint64_t)ts[i].rows);
        put_u32((uint32_t)ggml_type(ts[i].type));
        put_u64(ts[i].offset);
    }
    long pos = ftell(out);
    static const char zeros[32] = {0};
    if (pos % 32) put(zeros, (size_t)(32 - pos % 32));
}

/* The tensors' data after the header, batches of rows made on every core; false where memory ran
 * out (with a message). */
static bool write_weights(const tensor *ts, int nt, uint64_t offset, uint64_t *rng)
{
    static const char zeros[32] = {0};
    uint64_t written = 0;
    jump_init();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int n_jobs = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    int64_t widest = 0;
    for (int i = 0; i < nt; i++) widest = ts[i].cols > widest ? ts[i].cols : widest;
    const size_t cap = (size_t)64 << 20; /* a batch of rows: 64 MiB, or one row if wider */
    row_job *jobs = calloc((size_t)n_jobs, sizeof *jobs);
    unsigned char *batch = malloc(cap + (size_t)widest * 4);
    for (int w = 0; jobs && w < n_jobs; w++) jobs[w].buf = malloc((size_t)widest * sizeof(float));
    bool have = jobs && batch;
    for (int w = 0; have && w < n_jobs; w++) have = jobs[w].buf != NULL;
    if (!have) {
        fprintf(stderr, "sift-gen-model: out of memory\n");
        return false;
    }
    for (int i = 0; i < nt && !write_failed; i++) {
        write_tensor(&ts[i], rng, jobs, n_jobs, batch, cap);
        const uint64_t bytes = tensor_bytes(&ts[i]);
        if (bytes % 32) put(zeros, (size_t)(32 - bytes % 32));
        written += bytes;
        if (offset > (1u << 30)) fprintf(stderr, "\rsift-gen-model: %.1f / %.1f GB", (double)written / 1e9, (double)offset / 1e9);
    }
    if (offset > (1u << 30)) fputc('\n', stderr);
    if (fclose(out) != 0) write_failed = true;
    for (int w = 0; w < n_jobs; w++) free(jobs[w].buf);
    free(jobs);
    free(batch);
    return true;
}

int main(int argc, char **argv)
{
    shape s;
    preset("tiny", &s);
    const char *path = NULL;
    const chat_vocab *chat = NULL;
    const int rc = parse_args(argc, argv, &s, &path, &chat);
    if (rc >= 0) return rc;
    uint64_t rng = s.seed * 0x9e3779b97f4a7c15ull + 12345;
    int nt = 0;
    uint64_t offset = 0;
    tensor *ts = tensor_list(s, &nt, &offset);
    if (!ts) return 1;
    out = fopen(path, "wb");
    if (!out) {
        perror(path);
        free(ts);
        return 1;
    }
    write_header(s, chat, ts, nt);
    const bool wrote = write_weights(ts, nt, offset, &rng);
    free(ts);
    if (!wrote) return 1;
    if (write_failed) {
        fprintf(stderr, "sift-gen-model: writing %s failed\n", path);
        return 1;
    }
    fprintf(stderr, "sift-gen-model: %s: %s, %d layers, %d wide, %d/%d heads of %d, %s matrices, %.1f MB\n", path, s.arch,
            s.layers, s.embd, s.heads, s.kv_heads, s.head_dim, s.q4_k_m ? "q4_k_m (q4_k and q6_k)" : sift_dtype_name(s.type),
            (double)offset / 1e6);
    return 0;
}

