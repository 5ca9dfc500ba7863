/* libFuzzer harness: every input is parsed as a GGUF file from memory; whatever opens is then
 * walked through every accessor, the hyper-parameter reader, row dequantization and, where the
 * metadata describes one, the tokenizer (encode and decode). A parse must either succeed or fail
 * with a message; sanitizers catch everything else. Build and run with tests/fuzz/run.sh. */
#include "gguf.h"
#include "quant.h"
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* A failure without a message is a bug too. */
static void require_message(sift_status s)
{
    if (s != SIFT_OK && sift_last_error()[0] == '\0') __builtin_trap();
}

static char key_buf[256];

/* The metadata API wants NUL-terminated keys: keys with a NUL inside or very long are skipped. */
static const char *key_of(const sift_gguf_kv *kv)
{
    if (kv->key.len >= sizeof key_buf || memchr(kv->key.ptr, 0, (size_t)kv->key.len)) return NULL;
    memcpy(key_buf, kv->key.ptr, (size_t)kv->key.len);
    key_buf[kv->key.len] = 0;
    return key_buf;
}

static void walk_metadata(const sift_gguf *g)
{
    for (uint64_t i = 0; i < sift_gguf_kv_count(g); i++) {
        const char *key = key_of(sift_gguf_kv_at(g, i));
        if (!key) continue;
        uint32_t u32;
        int32_t i32;
        uint64_t u64, count;
        float f;
        bool b;
        sift_gguf_str str;
        sift_gguf_value_type elem;
        const sift_gguf_str *strs;
        require_message(sift_gguf_get_u32(g, key, &u32));
        require_message(sift_gguf_get_i32(g, key, &i32));
        require_message(sift_gguf_get_u64(g, key, &u64));
        require_message(sift_gguf_get_f32(g, key, &f));
        require_message(sift_gguf_get_bool(g, key, &b));
        require_message(sift_gguf_get_string(g, key, &str));
        if (sift_gguf_get_string_array(g, key, &strs, &count) == SIFT_OK && count > 0) {
            volatile char sink = 0;
            for (uint64_t j = 0; j < count; j++)
                if (strs[j].len) sink ^= strs[j].ptr[strs[j].len - 1];
            (void)sink;
        }
        if (sift_gguf_get_array(g, key, &elem, &count) == SIFT_OK && count < (1u << 20)) {
            void *dst = malloc((size_t)(count ? count : 1) * 4);
            if (dst) {
                require_message(sift_gguf_copy_f32_array(g, key, dst, count));
                require_message(sift_gguf_copy_i32_array(g, key, dst, count));
                free(dst);
            }
        }
    }
}

static void walk_tensors(const sift_gguf *g)
{
    for (uint64_t i = 0; i < sift_gguf_tensor_count(g) && i < 64; i++) {
        const sift_gguf_tensor *t = sift_gguf_tensor_at(g, i);
        if (t->dims[0] == 0 || t->dims[0] > (1u << 16) || t->n_elements == 0) continue;
        float *row = malloc((size_t)t->dims[0] * sizeof *row);
        if (!row) continue;
        const uint64_t rows = t->n_elements / t->dims[0];
        require_message(sift_dequant_row(t, 0, row));
        require_message(sift_dequant_row(t, rows - 1, row));
        if (sift_dequant_row(t, rows, row) == SIFT_OK) __builtin_trap(); /* past the end must fail */
        free(row);
    }
}

static void walk_tokenizer(const sift_gguf *g, const uint8_t *data, size_t size)
{
    sift_tokenizer *t;
    sift_status s = sift_tokenizer_create(g, &t);
    require_message(s);
    if (s != SIFT_OK) return;
    /* Fixed texts covering each pre-tokenizer branch, then a slice of the input as text. */
    static const char *const texts[] = {"", " ", "Hello world", "  two  spaces\n\n tab\tend ",
                                        "I'm 12345 'S 're \xe2\x80\x99 caf\xc3\xa9 \xf0\x9f\x8d\x95!",
                                        "\xff\xfe\xc3 broken \x80 utf8 \xe2\x82"};
    const size_t n_texts = sizeof texts / sizeof texts[0];
    for (size_t k = 0; k <= n_texts; k++) {
        const char *text = k < n_texts ? texts[k] : (const char *)data;
        const size_t len = k < n_texts ? strlen(text) : (size < 256 ? size : 256);
        const size_t cap = sift_tokenizer_max_tokens(len);
        int32_t *ids = malloc(cap * sizeof *ids);
        if (!ids) break;
        size_t n = 0;
        s = sift_tokenizer_encode(t, text, len, sift_tokenizer_bos(t) >= 0, ids, cap, &n);
        require_message(s);
        if (s == SIFT_OK) {
            size_t need = 0;
            char small[8];
            s = sift_tokenizer_decode(t, ids, n, small, sizeof small, &need);
            require_message(s);
            char *buf = malloc(need + 1);
            if (buf) {
                size_t got = 0;
                if (sift_tokenizer_decode(t, ids, n, buf, need, &got) != SIFT_OK || got != need) __builtin_trap();
                free(buf);
            }
            for (size_t j = 0; j < n; j++) {
                size_t blen;
                require_message(sift_tokenizer_token_bytes(t, ids[j], small, sizeof small, &blen));
            }
        }
        free(ids);
    }
    sift_tokenizer_destroy(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sift_gguf *g = NULL;
    sift_status s = sift_gguf_open_memory(data, size, "fuzz", &g);
    require_message(s);
    if (s != SIFT_OK) return 0;
    walk_metadata(g);
    walk_tensors(g);
    sift_gguf_hparams hp;
    require_message(sift_gguf_read_hparams(g, &hp));
    walk_tokenizer(g, data, size);
    sift_gguf_close(g);
    return 0;
}
