/* The tokenizers:
 *  1. stories260K's SentencePiece vocabulary (../shared/models) encodes every string of
 *     ../shared/refvec/tokenizer.jsonl and prompts.jsonl to exactly the ids llama2.c produced
 *     (BOS first), and decodes them back to the text (skipped, saying so, where ../shared is absent);
 *  2. the Llama 3 and Qwen2 pre-tokenizers split test strings exactly as their regular
 *     expressions do (the expected pieces are the matches of the reference patterns, computed
 *     with Python's `regex` module);
 *  3. byte-level BPE on a small vocabulary written here: GPT-2's byte symbols, merge order,
 *     contractions, digit groups, control and user-defined tokens, round trips of any bytes;
 *  4. SentencePiece on a small vocabulary written here: score order, ties, byte fallback, <unk>;
 *  5. special tokens spelled in text, both kinds: split out with parse_special (adjacent, at the
 *     start and the end, longest first, a partial one left as text), text without it, user-defined
 *     tokens always; the end-of-generation ids;
 *  6. chat templates: each format's exact text for a two-turn conversation with a system prompt,
 *     and recognition by markers (sift_chat_format, sift_chat_template_name).
 *
 *   sift-tokenizer-test <shared dir> */
#include "gguf.h"
#include "gguf_builder.h"
#include "report.h"
#include "sift.h"
#include "tokenizer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Only a failing check prints, with its line: the passing ones would say nothing. */
#define LINE_STR(n) #n
#define LINE_OF(n) LINE_STR(n)
#define CHECK(cond, ...) test_require((cond), "host", "line " LINE_OF(__LINE__) ": " __VA_ARGS__)

/* Encodes text and compares with want[n_want]; then decodes and compares with the text. */
static void check_round_trip(const sift_tokenizer *t, const char *what, const char *text, size_t len, bool bos,
                             const int32_t *want, size_t n_want)
{
    const size_t cap = sift_tokenizer_max_tokens(len);
    int32_t *ids = malloc(cap * sizeof *ids);
    size_t n = 0;
    sift_status s = sift_tokenizer_encode(t, text, len, bos, ids, cap, &n);
    CHECK(s == SIFT_OK, "%s: encode: %s", what, sift_last_error());
    if (s != SIFT_OK) {
        free(ids);
        return;
    }
    if (want) {
        bool same = n == n_want && memcmp(ids, want, n * sizeof *ids) == 0;
        CHECK(same, "%s: %zu ids, expected %zu", what, n, n_want);
        if (!same) {
            printf("   got:     ");
            for (size_t i = 0; i < n; i++) printf(" %d", (int)ids[i]);
            printf("\n   expected:");
            for (size_t i = 0; i < n_want; i++) printf(" %d", (int)want[i]);
            printf("\n");
        }
    }
    size_t need = 0;
    char probe[1];
    s = sift_tokenizer_decode(t, ids, n, probe, 0, &need);
    CHECK(need == len && (s == SIFT_OK) == (len == 0), "%s: decode needs %zu bytes for a text of %zu (%s)", what, need,
          len, sift_status_name(s));
    char *buf = malloc(need + 1);
    size_t got = 0;
    s = sift_tokenizer_decode(t, ids, n, buf, need, &got);
    CHECK(s == SIFT_OK && got == len && memcmp(buf, text, len) == 0, "%s: decodes to '%.*s'", what, (int)got, buf);
    free(buf);
    free(ids);
}

/* ---- 1. stories260K against llama2.c ------------------------------------------------------------ */

/* The value of "key" in a one-line JSON object: a pointer just past the colon, or NULL. */
static const char *json_field(const char *line, const char *key)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = strstr(line, pattern);
    return p ? p + strlen(pattern) : NULL;
}

static size_t put_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xe0 | (cp >> 12)), out[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
               out[2] = (char)(0x80 | (cp & 0x3f)), 3;
    out[0] = (char)(0xf0 | (cp >> 18)), out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

/* Decodes the JSON string at p (at its opening quote) into out; its length, or -1 if malformed. */
static long json_string(const char *p, char *out, size_t cap)
{
    if (*p++ != '"') return -1;
    size_t n = 0;
    while (*p && *p != '"') {
        if (n + 4 >= cap) return -1;
        if (*p != '\\') {
            out[n++] = *p++;
            continue;
        }
        p++;
        uint32_t cp;
        switch (*p) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case '"': case '\\': case '/': out[n++] = *p; break;
        case 'u':
            if (hex4(p + 1, &cp)) return -1;
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
                uint32_t lo;
                if (p[1] != '\\' || p[2] != 'u' || hex4(p + 3, &lo) || lo < 0xdc00 || lo > 0xdfff) return -1;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                p += 6;
            }
            n += put_utf8(cp, out + n);
            break;
        default: return -1;
        }
        p++;
    }
    return *p == '"' ? (long)n : -1;
}

/* Parses the JSON integer array at p into ids[cap]; the count, or -1. */
static long json_ints(const char *p, int32_t *ids, size_t cap)
{
    if (*p++ != '[') return -1;
    size_t n = 0;
    while (*p && *p != ']') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || n == cap) return -1;
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return *p == ']' ? (long)n : -1;
}

static int check_refvec_file(const sift_tokenizer *t, const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return 0;
    static char line[1 << 16], text[1 << 14];
    static int32_t want[4096];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        const char *tf = json_field(line, "text"), *idf = json_field(line, "ids");
        if (!tf || !idf) continue;
        long len = json_string(tf, text, sizeof text);
        long n = json_ints(idf, want, sizeof want / sizeof want[0]);
        CHECK(len >= 0 && n >= 1, "%s: unreadable line: %.60s", path, line);
        if (len < 0 || n < 1) continue;
        char what[96];
        snprintf(what, sizeof what, "%s '%.40s'", strrchr(path, '/') + 1, text);
        check_round_trip(t, what, text, (size_t)len, want[0] == sift_tokenizer_bos(t), want, (size_t)n);
        cases++;
    }
    fclose(f);
    return cases;
}

static void test_stories(const char *shared)
{
    test_case_begin("stories", "host");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    FILE *f = fopen(path, "rb");
    if (!f) {
        test_note("host", "stories260K tokenizer skipped: %s not found (the shared folder beside the checkout is absent)", path);
        return;
    }
    fclose(f);
    sift_gguf *g = NULL;
    sift_tokenizer *t = NULL;
    CHECK(sift_gguf_open_file(path, &g) == SIFT_OK, "open: %s", sift_last_error());
    if (!g) return;
    CHECK(sift_tokenizer_create(g, &t) == SIFT_OK, "tokenizer: %s", sift_last_error());
    sift_gguf_close(g); /* the tokenizer keeps its own copy */
    if (!t) return;
    CHECK(sift_tokenizer_get_kind(t) == SIFT_TOKENIZER_SPM && sift_tokenizer_vocab_size(t) == 512 &&
              sift_tokenizer_bos(t) == 1 && sift_tokenizer_eos(t) == 2 && sift_tokenizer_unk(t) == 0 &&
              sift_tokenizer_adds_bos(t),
          "stories260K vocabulary facts");
    char buf[8];
    size_t len = 0;
    CHECK(sift_tokenizer_token_bytes(t, 13, buf, sizeof buf, &len) == SIFT_OK && len == 1 && buf[0] == '\n',
          "<0x0A> is a newline");
    CHECK(sift_tokenizer_token_bytes(t, 1, buf, sizeof buf, &len) == SIFT_OK && len == 0, "BOS decodes to nothing");
    CHECK(sift_tokenizer_token_bytes(t, 410, buf, sizeof buf, &len) == SIFT_OK && len == 1 && buf[0] == ' ',
          "token 410 is a space");
    CHECK(sift_tokenizer_token_bytes(t, 512, buf, sizeof buf, &len) == SIFT_E_INVALID, "id 512 out of range");
    snprintf(path, sizeof path, "%s/refvec/tokenizer.jsonl", shared);
    int cases = check_refvec_file(t, path);
    snprintf(path, sizeof path, "%s/refvec/prompts.jsonl", shared);
    cases += check_refvec_file(t, path);
    CHECK(cases == 15, "%d reference strings, expected 12 + 3", cases);
    sift_tokenizer_destroy(t);
}

/* ---- 2. pre-tokenizer splits ---------------------------------------------------------------------- */

static const struct {
    sift_bpe_pre pre;
    const char *text;
    size_t n;
    size_t ends[16];
} splits[] = {
    {SIFT_BPE_PRE_LLAMA3, "Hello world", 2, {5, 11}},
    {SIFT_BPE_PRE_LLAMA3, "I'm you're WE'LL it's they'VE she'd", 12, {1, 3, 7, 10, 13, 16, 19, 21, 26, 29, 33, 35}},
    {SIFT_BPE_PRE_LLAMA3, "12345 1234567", 6, {3, 5, 6, 9, 12, 13}},
    {SIFT_BPE_PRE_LLAMA3, "a  b   c", 5, {1, 2, 4, 6, 8}},
    {SIFT_BPE_PRE_LLAMA3, "hello!!! ...world", 4, {5, 8, 12, 17}},
    {SIFT_BPE_PRE_LLAMA3, "x\x0a\x0ay", 3, {1, 3, 4}},
    {SIFT_BPE_PRE_LLAMA3, "line \x0a  next", 4, {4, 6, 7, 12}},
    {SIFT_BPE_PRE_LLAMA3, "trailing   ", 2, {8, 11}},
    {SIFT_BPE_PRE_LLAMA3, "  leading", 2, {1, 9}},
    {SIFT_BPE_PRE_LLAMA3, "tab\x09here", 2, {3, 8}},
    {SIFT_BPE_PRE_LLAMA3, "\xe2\x82\xac" "100 caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4", 8, {3, 6, 12, 19, 29, 30, 36, 38}},
    {SIFT_BPE_PRE_LLAMA3, "don't 'hello $$$abc", 6, {3, 5, 7, 12, 16, 19}},
    {SIFT_BPE_PRE_LLAMA3, "\x3f\x0d\x0ax", 2, {3, 4}},
    {SIFT_BPE_PRE_LLAMA3, " \x09\x0a \x0d\x0a\x09z", 2, {6, 8}},
    {SIFT_BPE_PRE_LLAMA3, "a,b.c", 3, {1, 3, 5}},
    {SIFT_BPE_PRE_LLAMA3, "(x) [y] {z}!\x0a", 8, {2, 3, 5, 6, 7, 9, 10, 13}},
    {SIFT_BPE_PRE_LLAMA3, "\xc2\xbd\xc2\xb2 3\xc2\xbd", 3, {4, 5, 8}},
    {SIFT_BPE_PRE_LLAMA3, "e\xcc\x81t\xc3\xa9", 2, {1, 6}},
    {SIFT_BPE_PRE_LLAMA3, "''s ' s", 4, {2, 3, 5, 7}},
    {SIFT_BPE_PRE_LLAMA3, "x \xc2\xa0y\xe3\x80\x80z", 4, {1, 2, 5, 9}},
    {SIFT_BPE_PRE_LLAMA3, "emoji \xf0\x9f\x8d\x95\xf0\x9f\x8d\x95 ok", 3, {5, 14, 17}},
    {SIFT_BPE_PRE_LLAMA3, "  ", 1, {2}},
    {SIFT_BPE_PRE_LLAMA3, "\x0a", 1, {1}},
    {SIFT_BPE_PRE_LLAMA3, "A1B22C333D4444", 9, {1, 2, 3, 5, 6, 9, 10, 13, 14}},
    {SIFT_BPE_PRE_QWEN2, "Hello world", 2, {5, 11}},
    {SIFT_BPE_PRE_QWEN2, "I'm you're WE'LL it's they'VE she'd", 12, {1, 3, 7, 10, 13, 16, 19, 21, 26, 29, 33, 35}},
    {SIFT_BPE_PRE_QWEN2, "12345 1234567", 13, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
    {SIFT_BPE_PRE_QWEN2, "a  b   c", 5, {1, 2, 4, 6, 8}},
    {SIFT_BPE_PRE_QWEN2, "hello!!! ...world", 4, {5, 8, 12, 17}},
    {SIFT_BPE_PRE_QWEN2, "x\x0a\x0ay", 3, {1, 3, 4}},
    {SIFT_BPE_PRE_QWEN2, "line \x0a  next", 4, {4, 6, 7, 12}},
    {SIFT_BPE_PRE_QWEN2, "trailing   ", 2, {8, 11}},
    {SIFT_BPE_PRE_QWEN2, "  leading", 2, {1, 9}},
    {SIFT_BPE_PRE_QWEN2, "tab\x09here", 2, {3, 8}},
    {SIFT_BPE_PRE_QWEN2, "\xe2\x82\xac" "100 caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4", 12, {3, 4, 5, 6, 12, 19, 29, 30, 32, 34, 36, 38}},
    {SIFT_BPE_PRE_QWEN2, "don't 'hello $$$abc", 6, {3, 5, 7, 12, 16, 19}},
    {SIFT_BPE_PRE_QWEN2, "\x3f\x0d\x0ax", 2, {3, 4}},
    {SIFT_BPE_PRE_QWEN2, " \x09\x0a \x0d\x0a\x09z", 2, {6, 8}},
    {SIFT_BPE_PRE_QWEN2, "a,b.c", 3, {1, 3, 5}},
    {SIFT_BPE_PRE_QWEN2, "(x) [y] {z}!\x0a", 8, {2, 3, 5, 6, 7, 9, 10, 13}},
    {SIFT_BPE_PRE_QWEN2, "\xc2\xbd\xc2\xb2 3\xc2\xbd", 5, {2, 4, 5, 6, 8}},
    {SIFT_BPE_PRE_QWEN2, "e\xcc\x81t\xc3\xa9", 2, {1, 6}},
    {SIFT_BPE_PRE_QWEN2, "''s ' s", 4, {2, 3, 5, 7}},
    {SIFT_BPE_PRE_QWEN2, "x \xc2\xa0y\xe3\x80\x80z", 4, {1, 2, 5, 9}},
    {SIFT_BPE_PRE_QWEN2, "emoji \xf0\x9f\x8d\x95\xf0\x9f\x8d\x95 ok", 3, {5, 14, 17}},
    {SIFT_BPE_PRE_QWEN2, "  ", 1, {2}},
    {SIFT_BPE_PRE_QWEN2, "\x0a", 1, {1}},
    {SIFT_BPE_PRE_QWEN2, "A1B22C333D4444", 14, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}},
};

static void test_splits(void)
{
    test_case_begin("splits", "host");
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        size_t ends[64], n = 0;
        const size_t len = strlen(splits[i].text);
        sift_status s = sift_bpe_split(splits[i].pre, splits[i].text, len, ends, 64, &n);
        bool same = s == SIFT_OK && n == splits[i].n && memcmp(ends, splits[i].ends, n * sizeof ends[0]) == 0;
        CHECK(same, "split %zu (%s) '%s'", i, splits[i].pre == SIFT_BPE_PRE_LLAMA3 ? "llama3" : "qwen2", splits[i].text);
        if (!same && s == SIFT_OK) {
            printf("   got:");
            for (size_t j = 0; j < n; j++) printf(" %zu", ends[j]);
            printf("\n");
        }
    }
    /* Bytes that are not UTF-8 stay pieces of their own kind ("other"), and the split covers them. */
    size_t ends[16], n = 0;
    CHECK(sift_bpe_split(SIFT_BPE_PRE_LLAMA3, "a\xff\xfe b\xc3", 6, ends, 16, &n) == SIFT_OK && n == 4 && ends[0] == 1 &&
              ends[1] == 3 && ends[2] == 5 && ends[3] == 6,
          "invalid UTF-8 split: %zu pieces", n);
    CHECK(sift_bpe_split(SIFT_BPE_PRE_LLAMA3, "a b c", 5, ends, 2, &n) == SIFT_E_INVALID, "split into too few ends");
    CHECK(sift_bpe_split(SIFT_BPE_PRE_NONE, "a", 1, ends, 2, &n) == SIFT_E_INVALID, "split without a pre-tokenizer");
}

/* ---- 3. byte-level BPE on a made-up vocabulary ---------------------------------------------------- */

/* GPT-2's symbol for each byte, as UTF-8. */
static void byte_symbol(int b, char out[4])
{
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    int shifted = 0;
    for (int x = 0; x < b; x++) shifted += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    out[put_utf8(printable ? (uint32_t)b : 256u + (uint32_t)shifted, out)] = 0;
}

/* Tokens 0..255 are the byte symbols (id = byte), then extra[] in order. */
static sift_tokenizer *bpe_tokenizer(const char *pre, const char *const *extra, const int32_t *extra_types, size_t n_extra,
                                     const char *const *merges, size_t n_merges, bool bos)
{
    static char symbols[256][4];
    const char *tokens[512];
    int32_t types[512];
    for (int b = 0; b < 256; b++) {
        byte_symbol(b, symbols[b]);
        tokens[b] = symbols[b];
        types[b] = 1;
    }
    for (size_t i = 0; i < n_extra; i++) {
        tokens[256 + i] = extra[i];
        types[256 + i] = extra_types ? extra_types[i] : 1;
    }
    gguf_builder b = {0};
    gb_header(&b, 0, 5 + (bos ? 2 : 0));
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", pre);
    gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, 256 + n_extra);
    gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, 256 + n_extra);
    gb_kv_strs(&b, "tokenizer.ggml.merges", merges, n_merges);
    if (bos) {
        gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", 256);
        gb_kv_bool(&b, "tokenizer.ggml.add_bos_token", 1);
    }
    sift_gguf *g = NULL;
    sift_tokenizer *t = NULL;
    if (sift_gguf_open_memory(b.data, b.len, "bpe", &g) == SIFT_OK) {
        if (sift_tokenizer_create(g, &t) != SIFT_OK) t = NULL;
        sift_gguf_close(g);
    }
    CHECK(t != NULL, "BPE tokenizer: %s", sift_last_error());
    gb_free(&b);
    return t;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)
#define TEXT(s) s, sizeof(s) - 1

static void test_bpe(void)
{
    test_case_begin("bpe", "host");
    /* "Ġ" is the space's symbol, "Ċ" the newline's. */
    static const char *const extra[] = {"<|begin_of_text|>", "\xc4\xa0t", "he", "\xc4\xa0the", "12", "123", "'s",
                                        "\xc4\xa0\xc4\xa0", "ab", "bc", "<tool>"};
    static const int32_t extra_types[] = {3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4};
    /* ids:                                 256                  257    258   259        260   261    262   263  264  265  266 */
    static const char *const merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "1 2", "12 3", "' s", "\xc4\xa0 \xc4\xa0",
                                         "a b", "b c"};
    sift_tokenizer *t = bpe_tokenizer("llama-bpe", extra, extra_types, 11, merges, 9, true);
    if (!t) return;
    CHECK(sift_tokenizer_get_kind(t) == SIFT_TOKENIZER_BPE && sift_tokenizer_pre(t) == SIFT_BPE_PRE_LLAMA3 &&
              sift_tokenizer_bos(t) == 256 && sift_tokenizer_adds_bos(t) && sift_tokenizer_eos(t) == -1,
          "BPE facts");
    /* Merges in rank order: "Ġ t" before "h e" before "Ġt he". */
    check_round_trip(t, "the", TEXT(" the"), false, IDS(259));
    check_round_trip(t, "the", TEXT("the the"), true, IDS(256, 't', 258, 259));
    /* "a b" (rank 7) before "b c" (rank 8). */
    check_round_trip(t, "abc", TEXT("abc"), false, IDS(264, 'c'));
    /* Llama 3 digits: "12345" is "123" + "45". */
    check_round_trip(t, "digits", TEXT("12345"), false, IDS(261, '4', '5'));
    /* Contractions are pieces of their own: "it's" = "it" + "'s". */
    check_round_trip(t, "contraction", TEXT("it's"), false, IDS('i', 't', 262));
    /* Whitespace runs: "a   b" = "a" + "ĠĠ" + "Ġb" ("Ġ b" is no merge). */
    check_round_trip(t, "spaces", TEXT("a   b"), false, IDS('a', 263, ' ', 'b'));
    /* Byte symbols: a newline is byte 10's symbol (id 10); UTF-8 and bytes that are not UTF-8. */
    check_round_trip(t, "newline", TEXT("\n"), false, IDS(10));
    check_round_trip(t, "utf8", TEXT("\xc3\xa9\xad"), false, IDS(0xc3, 0xa9, 0xad));
    check_round_trip(t, "not utf8", TEXT("\xff\xfe\x80 x\xc3"), false, NULL, 0);
    /* Control tokens are never made from text, and decode to nothing. */
    check_round_trip(t, "control", TEXT("<|begin_of_text|>"), false, NULL, 0);
    {
        int32_t ids[64];
        size_t n = 0;
        CHECK(sift_tokenizer_encode(t, TEXT("<|begin_of_text|>"), false, ids, 64, &n) == SIFT_OK && n > 1, "control text");
        char buf[16];
        size_t len = 9;
        CHECK(sift_tokenizer_token_bytes(t, 256, buf, sizeof buf, &len) == SIFT_OK && len == 0, "control decodes to nothing");
        /* User-defined tokens decode as written (not as byte symbols). */
        CHECK(sift_tokenizer_token_bytes(t, 266, buf, sizeof buf, &len) == SIFT_OK && len == 6 &&
                  memcmp(buf, "<tool>", 6) == 0,
              "user-defined token text");
        CHECK(sift_tokenizer_token_bytes(t, 259, buf, 2, &len) == SIFT_E_INVALID && len == 4, "token bytes: small buffer");
        CHECK(sift_tokenizer_encode(t, TEXT("abcabc"), false, ids, 3, &n) == SIFT_E_INVALID, "encode: small output");
        const int32_t bad[2] = {1, 9999};
        CHECK(sift_tokenizer_decode(t, bad, 2, buf, sizeof buf, &len) == SIFT_E_INVALID, "decode: id out of range");
    }
    sift_tokenizer_destroy(t);

    /* Qwen2: single digits, so "12" never merges. Without a BOS token, add_bos fails. */
    t = bpe_tokenizer("qwen2", extra, extra_types, 11, merges, 9, false);
    if (!t) return;
    check_round_trip(t, "qwen2 digits", TEXT("12345"), false, IDS('1', '2', '3', '4', '5'));
    check_round_trip(t, "qwen2 the", TEXT("the"), false, IDS('t', 258));
    {
        int32_t ids[8];
        size_t n;
        CHECK(sift_tokenizer_encode(t, TEXT("x"), true, ids, 8, &n) == SIFT_E_INVALID && strstr(sift_last_error(), "BOS"),
              "add_bos without BOS: %s", sift_last_error());
        CHECK(!sift_tokenizer_adds_bos(t), "BPE does not add BOS by default");
    }
    sift_tokenizer_destroy(t);

    /* Swapped merge ranks change the result: "b c" first gives "a" + "bc". */
    static const char *const swapped[] = {"b c", "a b"};
    t = bpe_tokenizer("llama3", extra, extra_types, 11, swapped, 2, false);
    if (t) check_round_trip(t, "swapped ranks", TEXT("abc"), false, IDS('a', 265));
    sift_tokenizer_destroy(t);
}

/* ---- 4. SentencePiece on a made-up vocabulary ------------------------------------------------------ */

static sift_tokenizer *spm_tokenizer(bool byte_fallback, bool space_prefix)
{
    /* 0 <unk>, 1 <s>, 2 </s>, then pieces with scores; bytes last when present. */
    static const char *const pieces[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "c", "ab", "bc", "abc",
                                         "\xe2\x96\x81" "a", "x", "y", "xy", "yx"};
    static const float piece_scores[] = {0, 0, 0, -1, -2, -2, -2, -5, -4, -3, -1, -2, -2, -6, -6};
    const size_t n_pieces = sizeof pieces / sizeof pieces[0];
    const char *tokens[300];
    float scores[300];
    int32_t types[300];
    static char byte_names[256][8];
    size_t n = 0;
    for (size_t i = 0; i < n_pieces; i++, n++) {
        tokens[n] = pieces[i];
        scores[n] = piece_scores[i];
        types[n] = i == 0 ? 2 : i < 3 ? 3 : 1;
    }
    if (byte_fallback)
        for (int b = 0; b < 256; b++, n++) {
            snprintf(byte_names[b], sizeof byte_names[b], "<0x%02X>", b);
            tokens[n] = byte_names[b];
            scores[n] = 0;
            types[n] = 6;
        }
    gguf_builder gb = {0};
    gb_header(&gb, 0, 7);
    gb_kv_str(&gb, "tokenizer.ggml.model", "llama");
    gb_kv_strs(&gb, "tokenizer.ggml.tokens", tokens, n);
    gb_kv_f32s(&gb, "tokenizer.ggml.scores", scores, n);
    gb_kv_i32s(&gb, "tokenizer.ggml.token_type", types, n);
    gb_kv_u32(&gb, "tokenizer.ggml.bos_token_id", 1);
    gb_kv_u32(&gb, "tokenizer.ggml.unknown_token_id", 0);
    gb_kv_bool(&gb, "tokenizer.ggml.add_space_prefix", space_prefix);
    sift_gguf *g = NULL;
    sift_tokenizer *t = NULL;
    if (sift_gguf_open_memory(gb.data, gb.len, "spm", &g) == SIFT_OK) {
        if (sift_tokenizer_create(g, &t) != SIFT_OK) t = NULL;
        sift_gguf_close(g);
    }
    CHECK(t != NULL, "SentencePiece tokenizer: %s", sift_last_error());
    gb_free(&gb);
    return t;
}

static void test_spm(void)
{
    test_case_begin("spm", "host");
    sift_tokenizer *t = spm_tokenizer(true, true);
    if (!t) return;
    /* "abc" is a piece, but merges go pair by pair: "bc" (-4) beats "ab" (-5), then "a"+"bc" is
     * no piece: "▁a" (-1) merged first anyway. */
    check_round_trip(t, "spm abc", TEXT("abc"), true, IDS(1, 10, 8));
    /* Equal scores ("xy" and "yx", -6): the leftmost pair merges first. */
    check_round_trip(t, "spm tie", TEXT("xyx"), false, IDS(3, 13, 11));
    /* Byte fallback: "é" has no piece: its two bytes; a space inside the text is "▁". */
    check_round_trip(t, "spm bytes", TEXT("\xc3\xa9 c"), false, IDS(3, 15 + 0xc3, 15 + 0xa9, 3, 6));
    check_round_trip(t, "spm empty", TEXT(""), true, IDS(1));
    check_round_trip(t, "spm text <s>", TEXT("<s>"), false, IDS(3, 15 + '<', 15 + 's', 15 + '>'));
    sift_tokenizer_destroy(t);

    /* Without the prefix, and without byte tokens: an unknown character is one <unk>. */
    t = spm_tokenizer(false, false);
    if (!t) return;
    int32_t ids[16];
    size_t n = 0;
    CHECK(sift_tokenizer_encode(t, TEXT("a\xc3\xa9" "b"), false, ids, 16, &n) == SIFT_OK && n == 3 && ids[0] == 4 &&
              ids[1] == 0 && ids[2] == 5,
          "spm <unk>: %zu ids", n);
    check_round_trip(t, "spm no prefix", TEXT("ab"), false, IDS(7));
    check_round_trip(t, "spm no prefix, a space", TEXT(" ab"), false, IDS(10, 5));
    sift_tokenizer_destroy(t);
}

/* ---- 5. special tokens spelled in text --------------------------------------------------------- */

/* Encodes text with or without parse_special and compares with want[n_want]. */
static void check_special(const sift_tokenizer *t, const char *what, const char *text, size_t len, bool bos,
                          bool parse_special, const int32_t *want, size_t n_want)
{
    const size_t cap = sift_tokenizer_max_tokens(len);
    int32_t *ids = malloc(cap * sizeof *ids);
    size_t n = 0;
    sift_status s = sift_tokenizer_encode_special(t, text, len, bos, parse_special, ids, cap, &n);
    bool same = s == SIFT_OK && n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0); /* want may be NULL */
    CHECK(same, "%s (%s): %s, %zu ids, expected %zu", what, parse_special ? "parsed" : "as text", sift_status_name(s), n,
          n_want);
    if (!same) {
        printf("   got:     ");
        for (size_t i = 0; i < n; i++) printf(" %d", (int)ids[i]);
        printf("\n   expected:");
        for (size_t i = 0; i < n_want; i++) printf(" %d", (int)want[i]);
        printf("\n");
    }
    free(ids);
}

static void test_specials(void)
{
    test_case_begin("specials", "host");
    /* Byte-level BPE without merges: every byte of text is its own id (the byte's value). */
    static const char *const extra[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                        "<tool>", "<|eot", "<|unused|>"};
    static const int32_t extra_types[] = {3, 3, 3, 3, 4, 3, 5};
    /* ids:                                256                  257                    258               259   260    261      262 */
    sift_tokenizer *t = bpe_tokenizer("llama-bpe", extra, extra_types, 7, NULL, 0, true);
    if (!t) return;
    check_special(t, "llama 3 header", TEXT("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"),
                  false, true, IDS(256, 257, 'u', 's', 'e', 'r', 258, '\n', '\n', 'h', 'i', 259));
    check_special(t, "adjacent", TEXT("<|eot_id|><|eot_id|>"), false, true, IDS(259, 259));
    check_special(t, "BOS, then a special first", TEXT("<|eot_id|>a"), true, true, IDS(256, 259, 'a'));
    check_special(t, "a special last", TEXT("a <|eot_id|>"), false, true, IDS('a', ' ', 259));
    /* The longest special spelled at a position wins: "<|eot_id|>", not "<|eot" and the rest. */
    check_special(t, "longest first", TEXT("<|eot_id|><|eot|>"), false, true, IDS(259, 261, '|', '>'));
    /* A special cut short is text (or, here, the shorter special it starts with). */
    check_special(t, "partial", TEXT("<|end_header_id|"), false, true,
                  IDS('<', '|', 'e', 'n', 'd', '_', 'h', 'e', 'a', 'd', 'e', 'r', '_', 'i', 'd', '|'));
    check_special(t, "partial, a shorter special", TEXT("<|eot_id|"), false, true, IDS(261, '_', 'i', 'd', '|'));
    check_special(t, "partial at the end", TEXT("x<|eo"), false, true, IDS('x', '<', '|', 'e', 'o'));
    /* Without parse_special, control tokens are text; user-defined ones are ids either way; an
     * unused token never comes from text. */
    check_special(t, "control as text", TEXT("<|eot_id|>"), false, false, IDS('<', '|', 'e', 'o', 't', '_', 'i', 'd', '|', '>'));
    check_special(t, "user-defined, parsed", TEXT("a<tool>b"), false, true, IDS('a', 260, 'b'));
    check_special(t, "user-defined as text", TEXT("a<tool>b"), false, false, IDS('a', 260, 'b'));
    check_special(t, "unused", TEXT("<|unused|>"), false, true, IDS('<', '|', 'u', 'n', 'u', 's', 'e', 'd', '|', '>'));
    check_special(t, "empty", TEXT(""), false, true, NULL, 0);
    /* sift_tokenizer_encode does not parse them. */
    {
        int32_t ids[16];
        size_t n = 0;
        CHECK(sift_tokenizer_encode(t, TEXT("<|eot_id|>"), false, ids, 16, &n) == SIFT_OK && n == 10, "encode: %zu ids", n);
    }
    CHECK(sift_tokenizer_is_eog(t, 259) && !sift_tokenizer_is_eog(t, 256) && !sift_tokenizer_is_eog(t, 261) &&
              !sift_tokenizer_is_eog(t, 'a') && !sift_tokenizer_is_eog(t, -1),
          "end of generation: <|eot_id|> only");
    sift_tokenizer_destroy(t);

    /* SentencePiece: each piece of text after a special gets the leading "▁" (llama.cpp's rule):
     * "▁a" (10) where "a" (4) would be without it. */
    t = spm_tokenizer(true, true);
    if (!t) return;
    check_special(t, "spm <s>ab</s>", TEXT("<s>ab</s>"), false, true, IDS(1, 10, 5, 2));
    check_special(t, "spm BOS and <s>", TEXT("<s>a"), true, true, IDS(1, 1, 10));
    check_special(t, "spm between specials", TEXT("a</s>b"), false, true, IDS(10, 2, 3, 5));
    check_special(t, "spm <unk>", TEXT("<unk>"), false, true, IDS(0));
    check_special(t, "spm <s> as text", TEXT("<s>"), false, false, IDS(3, 15 + '<', 15 + 's', 15 + '>'));
    check_special(t, "spm partial", TEXT("</s"), false, true, IDS(3, 15 + '<', 15 + '/', 15 + 's'));
    CHECK(!sift_tokenizer_is_eog(t, 2), "spm: no EOS named, so no end of generation");
    sift_tokenizer_destroy(t);
}

/* ---- 6. chat templates --------------------------------------------------------------------------- */

static void check_format(const char *tmpl, const sift_chat_message *msgs, size_t n, int add_assistant, const char *want)
{
    size_t need = 0;
    CHECK(sift_chat_format(tmpl, msgs, n, add_assistant, NULL, 0, &need) == SIFT_E_INVALID && need == strlen(want),
          "%s: sizing call gives %zu bytes, want %zu", tmpl, need, strlen(want));
    char buf[1024];
    size_t len = 0;
    sift_status s = sift_chat_format(tmpl, msgs, n, add_assistant, buf, sizeof buf, &len);
    CHECK(s == SIFT_OK && len == strlen(want) && !strcmp(buf, want), "%s: %s\n   got:      '%s'\n   expected: '%s'", tmpl,
          sift_status_name(s), s == SIFT_OK ? buf : "", want);
    CHECK(sift_chat_format(tmpl, msgs, n, add_assistant, buf, strlen(want), &len) == SIFT_E_INVALID,
          "%s: no room for the NUL", tmpl);
}

static void test_chat_format(void)
{
    test_case_begin("chat_format", "host");
    /* A system prompt, two user turns and the reply between them; the spaces around the first user
     * line show which formats trim. */
    static const sift_chat_message chat[] = {
        {"system", "You are terse."}, {"user", " Hi \n"}, {"assistant", "Hello."}, {"user", "Bye?"}};
    check_format("chatml", chat, 4, 1,
                 "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n"
                 "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye?<|im_end|>\n<|im_start|>assistant\n");
    check_format("chatml", chat, 2, 0, "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n Hi \n<|im_end|>\n");
    check_format("llama3", chat, 4, 1,
                 "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nBye?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_format("llama2", chat, 4, 1, "[INST] You are terse.\n Hi \n [/INST]Hello.</s>[INST] Bye? [/INST]");
    check_format("llama2-sys", chat, 4, 1,
                 "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\n Hi \n [/INST]Hello.</s>[INST] Bye? [/INST]");
    check_format("llama2-sys-bos", chat, 4, 1,
                 "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\n Hi \n [/INST]Hello.</s><s>[INST] Bye? [/INST]");
    check_format("llama2-sys-strip", chat, 4, 0,
                 "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST]Hello.</s>[INST] Bye? [/INST]");
    check_format("chatml", NULL, 0, 1, "<|im_start|>assistant\n");

    /* Recognition by markers, as template sources (shortened) spell them. */
    static const struct {
        const char *source, *name;
    } sources[] = {
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
         "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
         "chatml"},
        {"{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
         " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}",
         "llama3"},
        {"{% if messages[0]['role'] == 'system' %}<<SYS>>{% endif %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}",
         "llama2-sys-strip"},
        {"{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}<<SYS>>", "llama2-sys-bos"},
        {"{% for m in messages %}[INST] <<SYS>> {{ m['content'] }}{% endfor %}", "llama2-sys"},
        {"{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}", "llama2"},
        {"{{'<|im_start|>' + message['role'] + '<|im_sep|>'}}", NULL},   /* Phi-4 */
        {"[SYSTEM_PROMPT]{{ system }}[/SYSTEM_PROMPT][INST]", NULL},    /* Mistral */
        {"{% for m in messages %}<start_of_turn>{{ m['role'] }}{% endfor %}", NULL}, /* Gemma */
        {"<|start_header_id|>user", NULL},                                 /* half of Llama 3's markers */
        {"", NULL},
        {"llama3", "llama3"},
    };
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        const char *got = sift_chat_template_name(sources[i].source);
        CHECK(sources[i].name ? got && !strcmp(got, sources[i].name) : got == NULL, "template %zu: '%s', want '%s'", i,
              got ? got : "(none)", sources[i].name ? sources[i].name : "(none)");
    }
    CHECK(sift_chat_template_name(NULL) == NULL, "no template");

    char buf[64];
    size_t len = 7;
    CHECK(sift_chat_format("gemma", chat, 4, 1, buf, sizeof buf, &len) == SIFT_E_INVALID && len == 0 &&
              strstr(sift_last_error(), "'gemma' is no chat template sift knows"),
          "unknown template: %s", sift_last_error());
    CHECK(sift_chat_format(NULL, chat, 4, 1, buf, sizeof buf, &len) == SIFT_E_INVALID &&
              sift_chat_format("chatml", NULL, 1, 1, buf, sizeof buf, &len) == SIFT_E_INVALID &&
              sift_chat_format("chatml", chat, 4, 1, NULL, 8, &len) == SIFT_E_INVALID &&
              sift_chat_format("chatml", chat, 4, 1, buf, sizeof buf, NULL) == SIFT_E_INVALID,
          "chat format: null arguments");
    size_t n_ids = 0;
    int32_t ids[4];
    CHECK(sift_model_tokenize_special(NULL, "x", 1, 0, 1, ids, 4, &n_ids) == SIFT_E_INVALID &&
              !sift_model_token_is_eog(NULL, 0) && sift_model_chat_template(NULL) == NULL,
          "model calls without a model");
    const sift_chat_message no_role[] = {{NULL, "x"}};
    CHECK(sift_chat_format("chatml", no_role, 1, 1, buf, sizeof buf, &len) == SIFT_E_INVALID &&
              strstr(sift_last_error(), "message 0 has no role"),
          "a message without a role: %s", sift_last_error());
}

/* Metadata that names no tokenizer sift runs. */
static void test_refusals(void)
{
    test_case_begin("refusals", "host");
    static const struct {
        const char *model, *pre, *fragment;
    } cases[] = {{"bert", NULL, "'bert' is not one sift reads"},
                 {"gpt2", "deepseek-llm", "'deepseek-llm' is not a pre-tokenizer"},
                 {"gpt2", NULL, "pre-tokenizer"},
                 {"gpt2", "qwen2", "tokenizer.ggml.merges"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static const char *const tokens[2] = {"a", "b"};
        gguf_builder b = {0};
        gb_header(&b, 0, 2 + (cases[i].pre != NULL));
        gb_kv_str(&b, "tokenizer.ggml.model", cases[i].model);
        if (cases[i].pre) gb_kv_str(&b, "tokenizer.ggml.pre", cases[i].pre);
        gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, 2);
        sift_gguf *g = NULL;
        sift_tokenizer *t = NULL;
        CHECK(sift_gguf_open_memory(b.data, b.len, "refusal", &g) == SIFT_OK, "refusal %zu opens", i);
        if (g) {
            sift_status s = sift_tokenizer_create(g, &t);
            CHECK(s != SIFT_OK && t == NULL && strstr(sift_last_error(), cases[i].fragment), "refusal %zu: %s", i,
                  sift_last_error());
            sift_gguf_close(g);
        }
        gb_free(&b);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <shared dir>\n", argv[0]);
        return 2;
    }
    test_splits();
    test_bpe();
    test_spm();
    test_refusals();
    test_specials();
    test_chat_format();
    test_stories(argv[1]);
    return test_summary("tokenizer", "host");
}
