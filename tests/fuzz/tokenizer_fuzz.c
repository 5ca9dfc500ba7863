/* libFuzzer harness for encoding: the input's first byte picks a tokenizer built once from a
 * made-up vocabulary (SentencePiece with byte fallback, with and without the dummy prefix; byte-level
 * BPE with the Llama 3 or the Qwen2 pre-tokenizer), the rest is the text. Whatever the bytes, the
 * encoding must succeed within sift_tokenizer_max_tokens, give ids inside the vocabulary, and
 * decode back to exactly the text; the pre-tokenizer's pieces must tile the text. Build and run
 * with tests/fuzz/run.sh. */
#include "../gguf_builder.h"
#include "gguf.h"
#include "tokenizer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define N_TOKENIZERS 4
static sift_tokenizer *tokenizers[N_TOKENIZERS];

static size_t put_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) return out[0] = (char)cp, 1;
    return out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), 2;
}

static sift_tokenizer *from_builder(gguf_builder *b)
{
    sift_gguf *g = NULL;
    sift_tokenizer *t = NULL;
    if (sift_gguf_open_memory(b->data, b->len, "fuzz-vocab", &g) != SIFT_OK) __builtin_trap();
    if (sift_tokenizer_create(g, &t) != SIFT_OK) __builtin_trap();
    sift_gguf_close(g);
    gb_free(b);
    return t;
}

/* Pieces that merge often in English-like and digit-heavy text, in rank (and score) order. */
static const char *const words[] = {"th", "he", "in", "er", "an", "the", "ing", "12", "123", "00", "'s", "ll",
                                    "on", "at", "en", "and", "is", "it", "re", "or"};
#define N_WORDS (sizeof words / sizeof words[0])

static sift_tokenizer *make_spm(bool prefix)
{
    const char *tokens[3 + 256 + 256 + N_WORDS];
    float scores[3 + 256 + 256 + N_WORDS];
    int32_t types[3 + 256 + 256 + N_WORDS];
    static char names[256][8], chars[256][4], spaced[N_WORDS][16];
    size_t n = 0;
    tokens[n] = "<unk>", scores[n] = 0, types[n++] = 2;
    tokens[n] = "<s>", scores[n] = 0, types[n++] = 3;
    tokens[n] = "</s>", scores[n] = 0, types[n++] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        tokens[n] = names[b], scores[n] = 0, types[n++] = 6;
    }
    for (int c = 32; c < 127; c++) { /* printable ASCII, the space as "▁" */
        if (c == ' ') memcpy(chars[c], "\xe2\x96\x81", 4);
        else chars[c][0] = (char)c, chars[c][1] = 0;
        tokens[n] = chars[c], scores[n] = -100, types[n++] = 1;
    }
    for (size_t i = 0; i < N_WORDS; i++) {
        tokens[n] = words[i], scores[n] = -(float)i, types[n++] = 1;
        snprintf(spaced[i], sizeof spaced[i], "\xe2\x96\x81%s", words[i]);
        tokens[n] = spaced[i], scores[n] = -(float)i - 0.5f, types[n++] = 1;
    }
    gguf_builder b = {0};
    gb_header(&b, 0, 6);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, n);
    gb_kv_f32s(&b, "tokenizer.ggml.scores", scores, n);
    gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, n);
    gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    gb_kv_bool(&b, "tokenizer.ggml.add_space_prefix", prefix);
    return from_builder(&b);
}

static sift_tokenizer *make_bpe(const char *pre)
{
    const char *tokens[256 + 2 * N_WORDS], *merges[2 * N_WORDS];
    int32_t types[256 + 2 * N_WORDS];
    static char symbols[256][4], merged[2 * N_WORDS][16], merge_strs[2 * N_WORDS][24];
    size_t n = 0, n_merges = 0;
    for (int b = 0, shifted = 0; b < 256; b++) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        symbols[b][put_utf8(printable ? (uint32_t)b : 256u + (uint32_t)shifted++, symbols[b])] = 0;
        tokens[n] = symbols[b], types[n++] = 1;
    }
    /* Each word as a merge of its first character with the rest (when the rest is a token too)
     * or character by character for two-letter words; and each word after a space ("Ġ"). */
    for (size_t i = 0; i < N_WORDS; i++) {
        const char *w = words[i];
        const size_t len = strlen(w);
        if (len == 2) snprintf(merge_strs[n_merges], sizeof merge_strs[0], "%c %c", w[0], w[1]);
        else snprintf(merge_strs[n_merges], sizeof merge_strs[0], "%.2s %s", w, w + 2);
        merges[n_merges] = merge_strs[n_merges], n_merges++;
        tokens[n] = w, types[n++] = 1;
    }
    for (size_t i = 0; i < N_WORDS; i++) {
        snprintf(merged[i], sizeof merged[i], "\xc4\xa0%s", words[i]);
        snprintf(merge_strs[n_merges], sizeof merge_strs[0], "\xc4\xa0 %s", words[i]);
        merges[n_merges] = merge_strs[n_merges], n_merges++;
        tokens[n] = merged[i], types[n++] = 1;
    }
    gguf_builder b = {0};
    gb_header(&b, 0, 5);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", pre);
    gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, n);
    gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, n);
    gb_kv_strs(&b, "tokenizer.ggml.merges", merges, n_merges);
    return from_builder(&b);
}

static bool contains_lower_block(const char *s, size_t len)
{
    for (size_t i = 0; i + 3 <= len; i++)
        if (memcmp(s + i, "\xe2\x96\x81", 3) == 0) return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tokenizers[0]) {
        tokenizers[0] = make_spm(true);
        tokenizers[1] = make_spm(false);
        tokenizers[2] = make_bpe("llama-bpe");
        tokenizers[3] = make_bpe("qwen2");
    }
    if (size == 0) return 0;
    const sift_tokenizer *t = tokenizers[data[0] % N_TOKENIZERS];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    const size_t cap = sift_tokenizer_max_tokens(len);
    int32_t *ids = malloc(cap * sizeof *ids);
    char *back = malloc(len + 1);
    size_t n = 0, got = 0;
    if (!ids || !back) __builtin_trap();
    if (sift_tokenizer_encode(t, text, len, sift_tokenizer_bos(t) >= 0, ids, cap, &n) != SIFT_OK) __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= sift_tokenizer_vocab_size(t)) __builtin_trap();
    /* SentencePiece cannot tell a "▁" in the text from a space: such texts decode with spaces. */
    const bool exact = sift_tokenizer_get_kind(t) == SIFT_TOKENIZER_BPE || !contains_lower_block(text, len);
    const sift_status decoded = sift_tokenizer_decode(t, ids, n, back, len, &got);
    if (exact && (decoded != SIFT_OK || got != len || memcmp(back, text, len) != 0)) __builtin_trap();

    if (sift_tokenizer_get_kind(t) == SIFT_TOKENIZER_BPE) {
        size_t *ends = malloc((len + 1) * sizeof *ends), pieces = 0;
        if (!ends || sift_bpe_split(sift_tokenizer_pre(t), text, len, ends, len + 1, &pieces) != SIFT_OK) __builtin_trap();
        for (size_t i = 0; i < pieces; i++)
            if (ends[i] <= (i ? ends[i - 1] : 0)) __builtin_trap(); /* empty or backwards */
        if (len && (pieces == 0 || ends[pieces - 1] != len)) __builtin_trap();
        free(ends);
    }
    free(ids);
    free(back);
    return 0;
}
