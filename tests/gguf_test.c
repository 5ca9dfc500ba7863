/* The GGUF reader, checked three ways:
 *  1. every file of the broken-file corpus (tests/gguf_corpus) fails to open with a message that
 *     names the file and the problem (expected.txt lists a fragment for the hand-made ones), from
 *     disk and from memory alike;
 *  2. files written here with every metadata type and every tensor type read back exactly, and
 *     their hyper-parameters are derived as documented;
 *  3. the real stories260K model in ../shared/models opens with its known shape (skipped, saying
 *     so, where ../shared is absent).
 *
 *   sift-gguf-test <corpus dir> <shared dir> */
#include "gguf.h"
#include "gguf_builder.h"
#include "report.h"
#include "quant.h"
#include "test_files.h"

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Only a failing check prints, with its line: the passing ones would say nothing. */
#define LINE_STR(n) #n
#define LINE_OF(n) LINE_STR(n)
#define CHECK(cond, ...) test_require((cond), "host", "line " LINE_OF(__LINE__) ": " __VA_ARGS__)

/* ---- 1. the broken-file corpus ------------------------------------------------------------------ */

/* The fragment expected.txt gives for name, or NULL. */
static const char *expected_fragment(char *expected, const char *name)
{
    if (!expected) return NULL;
    const size_t n = strlen(name);
    for (char *line = expected; line && *line;) {
        char *end = strchr(line, '\n');
        if (strncmp(line, name, n) == 0 && line[n] == '\t') {
            if (end) *end = 0;
            static char frag[256];
            snprintf(frag, sizeof frag, "%s", line + n + 1);
            if (end) *end = '\n';
            return frag;
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_corpus(const char *dir)
{
    test_case_begin("corpus", "host");
    char path[4096];
    snprintf(path, sizeof path, "%s/expected.txt", dir);
    size_t expected_size = 0;
    char *expected = (char *)test_read_file(path, &expected_size);
    CHECK(expected != NULL, "cannot read %s", path);
    if (expected) {
        char *e = realloc(expected, expected_size + 1);
        if (e) expected = e, expected[expected_size] = 0;
    }

    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open the corpus folder %s", dir);
    if (!d) {
        free(expected);
        return;
    }
    char *names[1024];
    int n_names = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n_names < 1024;) {
        size_t n = strlen(e->d_name);
        if (n > 5 && strcmp(e->d_name + n - 5, ".gguf") == 0) names[n_names++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n_names, sizeof names[0], compare_names);
    CHECK(n_names >= 40, "only %d files in the corpus %s", n_names, dir);

    int with_fragment = 0;
    for (int i = 0; i < n_names; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        sift_gguf *g = NULL;
        sift_status s = sift_gguf_open_file(path, &g);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sift_last_error());
        CHECK(s != SIFT_OK && g == NULL, "%s opened (it must fail)", names[i]);
        if (s == SIFT_OK) {
            sift_gguf_close(g);
            continue;
        }
        test_note("host", "%s: %s: %s", names[i], sift_status_name(s), msg);
        CHECK(strstr(msg, names[i]) != NULL, "%s: the message does not name the file", names[i]);
        const char *frag = expected_fragment(expected, names[i]);
        if (frag) {
            with_fragment++;
            CHECK(strstr(msg, frag) != NULL, "%s: message lacks '%s'", names[i], frag);
        }
        /* The same bytes from memory: the same verdict. */
        size_t size = 0;
        uint8_t *data = test_read_file(path, &size);
        CHECK(data != NULL || size == 0, "cannot read %s", path);
        sift_status sm = sift_gguf_open_memory(data, size, path, &g);
        CHECK(sm == s && g == NULL, "%s: from memory %s, from the file %s", names[i], sift_status_name(sm),
              sift_status_name(s));
        CHECK(strcmp(sift_last_error(), msg) == 0, "%s: from memory '%s'", names[i], sift_last_error());
        if (sm == SIFT_OK) sift_gguf_close(g);
        free(data);
    }
    CHECK(with_fragment >= 40, "only %d corpus files have an expected message", with_fragment);
    for (int i = 0; i < n_names; i++) free(names[i]);
    free(expected);
}

/* ---- 2. files written here ----------------------------------------------------------------------- */

static const uint16_t f16_values[8] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x8000, 0x3555, 0x0400, 0xbc00};
static const float f16_expect[8] = {1.0f, -2.5f, 65504.0f, 0x1p-24f, -0.0f, 0.333251953125f, 0x1p-14f, -1.0f};

/* A file with every metadata type and one tensor of each type; alignment 32 or another. */
static void build_all_types(gguf_builder *b, uint32_t alignment)
{
    const int n_kv = 17 + (alignment != 32);
    gb_header(b, 5, (uint64_t)n_kv);
    if (alignment != 32) gb_kv_u32(b, "general.alignment", alignment);
    gb_key(b, "t.u8", GB_U8), gb_le(b, 200, 1);
    gb_key(b, "t.i8", GB_I8), gb_le(b, (uint8_t)-100, 1);
    gb_key(b, "t.u16", GB_U16), gb_le(b, 60000, 2);
    gb_key(b, "t.i16", GB_I16), gb_le(b, (uint16_t)-30000, 2);
    gb_kv_u32(b, "t.u32", 4000000000u);
    gb_key(b, "t.i32", GB_I32), gb_u32(b, (uint32_t)-2000000000);
    gb_kv_f32(b, "t.f32", 1.5f);
    gb_kv_bool(b, "t.bool", 1);
    gb_kv_str(b, "t.str", "h\xc3\xa9llo");
    gb_key(b, "t.u64", GB_U64), gb_u64(b, 1ull << 63);
    gb_key(b, "t.i64", GB_I64), gb_u64(b, (uint64_t)-(1ll << 40));
    gb_key(b, "t.f64", GB_F64), gb_u64(b, 0x3fd0000000000000ull); /* 0.25 */
    const int32_t ints[3] = {1, -2, 3};
    gb_kv_i32s(b, "t.arr_i32", ints, 3);
    const float floats[2] = {0.5f, -1.0f};
    gb_kv_f32s(b, "t.arr_f32", floats, 2);
    const char *const strs[3] = {"x", "", "yz"};
    gb_kv_strs(b, "t.arr_str", strs, 3);
    gb_key(b, "t.arr_u8", GB_ARRAY), gb_u32(b, GB_U8), gb_u64(b, 2), gb_le(b, 7, 1), gb_le(b, 255, 1);
    gb_key(b, "t.arr_empty", GB_ARRAY), gb_u32(b, GB_U32), gb_u64(b, 0);

    /* Tensors, each padded to the alignment: f32 [4][2], f16 [8], bf16 [4], q8_0 [32][2], q4_0 [32]. */
    const uint64_t d_f32[2] = {4, 2}, d_f16[1] = {8}, d_bf16[1] = {4}, d_q8[2] = {32, 2}, d_q4[1] = {32};
    const uint64_t sizes[5] = {32, 16, 8, 68, 18};
    uint64_t off[5], at = 0;
    for (int i = 0; i < 5; i++) {
        off[i] = at;
        at += (sizes[i] + alignment - 1) / alignment * alignment;
    }
    gb_tensor_info(b, "f32", 2, d_f32, 0, off[0]);
    gb_tensor_info(b, "f16", 1, d_f16, 1, off[1]);
    gb_tensor_info(b, "bf16", 1, d_bf16, 30, off[2]);
    gb_tensor_info(b, "q8_0", 2, d_q8, 8, off[3]);
    gb_tensor_info(b, "q4_0", 1, d_q4, 2, off[4]);
    gb_align(b, alignment);
    for (int i = 0; i < 8; i++) gb_f32(b, (float)i - 3.5f);
    gb_align(b, alignment);
    for (int i = 0; i < 8; i++) gb_le(b, f16_values[i], 2);
    gb_align(b, alignment);
    const uint16_t bf16[4] = {0x3f80, 0xc040, 0x4049, 0x0000}; /* 1, -3, 3.140625, 0 */
    for (int i = 0; i < 4; i++) gb_le(b, bf16[i], 2);
    gb_align(b, alignment);
    for (int blk = 0; blk < 2; blk++) { /* d = 0.5 then -2; q = i - 16 */
        gb_le(b, blk == 0 ? 0x3800 : 0xc000, 2);
        for (int i = 0; i < 32; i++) gb_le(b, (uint8_t)(int8_t)(i - 16), 1);
    }
    gb_align(b, alignment);
    gb_le(b, 0x4000, 2); /* d = 2; byte j: low nibble j, high nibble 15 - j */
    for (int j = 0; j < 16; j++) gb_le(b, (uint64_t)(j | ((15 - j) << 4)), 1);
    gb_align(b, alignment);
}

static void test_all_types(uint32_t alignment)
{
    test_case_begin("all_types", "host");
    gguf_builder b = {0};
    build_all_types(&b, alignment);
    sift_gguf *g = NULL;
    sift_status s = sift_gguf_open_memory(b.data, b.len, "all-types", &g);
    CHECK(s == SIFT_OK, "all-types (alignment %u) does not open: %s", alignment, sift_last_error());
    if (s != SIFT_OK) {
        gb_free(&b);
        return;
    }
    CHECK(sift_gguf_version(g) == 3 && sift_gguf_alignment(g) == alignment, "version/alignment %u/%u",
          sift_gguf_version(g), sift_gguf_alignment(g));
    CHECK(sift_gguf_data_offset(g) % alignment == 0, "data section at %llu", (unsigned long long)sift_gguf_data_offset(g));
    CHECK(sift_gguf_kv_count(g) == 17u + (alignment != 32), "%llu keys", (unsigned long long)sift_gguf_kv_count(g));

    uint32_t u32 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    float f = 0;
    bool bo = false;
    sift_gguf_str str;
    CHECK(sift_gguf_get_u32(g, "t.u8", &u32) == SIFT_OK && u32 == 200, "u8 as u32: %u", u32);
    CHECK(sift_gguf_get_i32(g, "t.i8", &i32) == SIFT_OK && i32 == -100, "i8 as i32: %d", i32);
    CHECK(sift_gguf_get_u32(g, "t.i8", &u32) == SIFT_E_INVALID, "a negative i8 read as u32");
    CHECK(sift_gguf_get_u32(g, "t.u16", &u32) == SIFT_OK && u32 == 60000, "u16");
    CHECK(sift_gguf_get_i32(g, "t.i16", &i32) == SIFT_OK && i32 == -30000, "i16");
    CHECK(sift_gguf_get_u32(g, "t.u32", &u32) == SIFT_OK && u32 == 4000000000u, "u32");
    CHECK(sift_gguf_get_i32(g, "t.u32", &i32) == SIFT_E_INVALID, "4e9 read as i32");
    CHECK(strstr(sift_last_error(), "t.u32") && strstr(sift_last_error(), "does not fit i32"), "range message: %s",
          sift_last_error());
    CHECK(sift_gguf_get_i32(g, "t.i32", &i32) == SIFT_OK && i32 == -2000000000, "i32");
    CHECK(sift_gguf_get_u64(g, "t.u64", &u64) == SIFT_OK && u64 == 1ull << 63, "u64");
    CHECK(sift_gguf_get_u32(g, "t.u64", &u32) == SIFT_E_INVALID, "2^63 read as u32");
    CHECK(sift_gguf_get_u64(g, "t.i64", &u64) == SIFT_E_INVALID, "a negative i64 read as u64");
    CHECK(sift_gguf_get_f32(g, "t.f32", &f) == SIFT_OK && f == 1.5f, "f32");
    CHECK(sift_gguf_get_f32(g, "t.f64", &f) == SIFT_OK && f == 0.25f, "f64 as f32");
    CHECK(sift_gguf_get_bool(g, "t.bool", &bo) == SIFT_OK && bo, "bool");
    CHECK(sift_gguf_get_string(g, "t.str", &str) == SIFT_OK && str.len == 6 && memcmp(str.ptr, "h\xc3\xa9llo", 6) == 0,
          "string");
    CHECK(sift_gguf_string_is(g, "t.str", "h\xc3\xa9llo") && !sift_gguf_string_is(g, "t.str", "hello") &&
              !sift_gguf_string_is(g, "t.u8", "200"),
          "string_is");
    /* Wrong types and missing keys. */
    CHECK(sift_gguf_get_string(g, "t.u32", &str) == SIFT_E_DTYPE, "u32 read as string");
    CHECK(strstr(sift_last_error(), "'t.u32' is u32, expected string") != NULL, "type message: %s", sift_last_error());
    CHECK(sift_gguf_get_u32(g, "t.str", &u32) == SIFT_E_DTYPE, "string read as u32");
    CHECK(sift_gguf_get_f32(g, "t.u32", &f) == SIFT_E_DTYPE, "u32 read as f32");
    CHECK(sift_gguf_get_bool(g, "t.u8", &bo) == SIFT_E_DTYPE, "u8 read as bool");
    CHECK(sift_gguf_get_u32(g, "t.arr_i32", &u32) == SIFT_E_DTYPE, "array read as u32");
    CHECK(sift_gguf_get_u32(g, "no.such.key", &u32) == SIFT_E_INVALID, "missing key");
    CHECK(strstr(sift_last_error(), "'no.such.key' is missing") != NULL, "missing message: %s", sift_last_error());
    CHECK(!sift_gguf_has(g, "no.such.key") && sift_gguf_has(g, "t.bool") && sift_gguf_find(g, "t") == NULL, "has/find");

    /* Arrays. */
    sift_gguf_value_type elem;
    uint64_t count = 0;
    CHECK(sift_gguf_get_array(g, "t.arr_i32", &elem, &count) == SIFT_OK && elem == SIFT_GGUF_I32 && count == 3, "array info");
    int32_t iv[3] = {0};
    CHECK(sift_gguf_copy_i32_array(g, "t.arr_i32", iv, 3) == SIFT_OK && iv[0] == 1 && iv[1] == -2 && iv[2] == 3, "i32 array");
    CHECK(sift_gguf_copy_i32_array(g, "t.arr_i32", iv, 2) == SIFT_E_SHAPE, "i32 array of the wrong length");
    CHECK(sift_gguf_copy_i32_array(g, "t.arr_u8", iv, 2) == SIFT_OK && iv[0] == 7 && iv[1] == 255, "u8 array as i32");
    CHECK(sift_gguf_copy_i32_array(g, "t.arr_f32", iv, 2) == SIFT_E_DTYPE, "f32 array as i32");
    float fv[2] = {0};
    CHECK(sift_gguf_copy_f32_array(g, "t.arr_f32", fv, 2) == SIFT_OK && fv[0] == 0.5f && fv[1] == -1.0f, "f32 array");
    CHECK(sift_gguf_copy_f32_array(g, "t.arr_i32", fv, 3) == SIFT_E_DTYPE, "i32 array as f32");
    const sift_gguf_str *sv = NULL;
    CHECK(sift_gguf_get_string_array(g, "t.arr_str", &sv, &count) == SIFT_OK && count == 3 && sv[0].len == 1 &&
              sv[0].ptr[0] == 'x' && sv[1].len == 0 && sv[2].len == 2 && memcmp(sv[2].ptr, "yz", 2) == 0,
          "string array");
    CHECK(sift_gguf_get_string_array(g, "t.arr_i32", &sv, &count) == SIFT_E_DTYPE, "i32 array as strings");
    CHECK(sift_gguf_get_array(g, "t.arr_empty", &elem, &count) == SIFT_OK && count == 0, "empty array");
    CHECK(sift_gguf_copy_i32_array(g, "t.arr_empty", iv, 0) == SIFT_OK, "empty array copy");
    CHECK(sift_gguf_get_array(g, "t.u8", &elem, &count) == SIFT_E_DTYPE, "scalar as array");

    /* Tensors. */
    CHECK(sift_gguf_tensor_count(g) == 5, "%llu tensors", (unsigned long long)sift_gguf_tensor_count(g));
    CHECK(sift_gguf_find_tensor(g, "nope") == NULL, "missing tensor found");
    const sift_gguf_tensor *t;
    float row[64];
    t = sift_gguf_find_tensor(g, "f32");
    CHECK(t && t->type == SIFT_GGUF_TENSOR_F32 && t->n_dims == 2 && t->dims[0] == 4 && t->dims[1] == 2 &&
              t->dims[2] == 1 && t->n_elements == 8 && t->nbytes == 32,
          "f32 tensor info");
    if (t) {
        CHECK(((const uint8_t *)t->data - b.data) % alignment == 0, "f32 data not aligned");
        CHECK(sift_dequant_row(t, 1, row) == SIFT_OK && row[0] == 0.5f && row[3] == 3.5f, "f32 row 1: %g %g",
              (double)row[0], (double)row[3]);
        CHECK(sift_dequant_row(t, 2, row) == SIFT_E_INVALID, "row past the end");
    }
    t = sift_gguf_find_tensor(g, "f16");
    CHECK(t && t->type == SIFT_GGUF_TENSOR_F16 && t->nbytes == 16, "f16 tensor info");
    if (t && sift_dequant_row(t, 0, row) == SIFT_OK)
        for (int i = 0; i < 8; i++)
            CHECK(row[i] == f16_expect[i] && signbit(row[i]) == signbit(f16_expect[i]), "f16[%d] = %g, expected %g", i,
                  (double)row[i], (double)f16_expect[i]);
    t = sift_gguf_find_tensor(g, "bf16");
    CHECK(t && t->type == SIFT_GGUF_TENSOR_BF16 && t->nbytes == 8, "bf16 tensor info");
    if (t && sift_dequant_row(t, 0, row) == SIFT_OK)
        CHECK(row[0] == 1.0f && row[1] == -3.0f && row[2] == 3.140625f && row[3] == 0.0f, "bf16 values %g %g %g %g",
              (double)row[0], (double)row[1], (double)row[2], (double)row[3]);
    t = sift_gguf_find_tensor(g, "q8_0");
    CHECK(t && t->type == SIFT_GGUF_TENSOR_Q8_0 && t->nbytes == 68 && t->n_elements == 64, "q8_0 tensor info");
    if (t) {
        bool ok = sift_dequant_row(t, 0, row) == SIFT_OK;
        for (int i = 0; i < 32 && ok; i++) ok = row[i] == 0.5f * (float)(i - 16);
        CHECK(ok, "q8_0 row 0");
        ok = sift_dequant_row(t, 1, row) == SIFT_OK;
        for (int i = 0; i < 32 && ok; i++) ok = row[i] == -2.0f * (float)(i - 16);
        CHECK(ok, "q8_0 row 1");
    }
    t = sift_gguf_find_tensor(g, "q4_0");
    CHECK(t && t->type == SIFT_GGUF_TENSOR_Q4_0 && t->nbytes == 18, "q4_0 tensor info");
    if (t) {
        bool ok = sift_dequant_row(t, 0, row) == SIFT_OK;
        /* Elements 0..15 are the low nibbles (j), 16..31 the high ones (15 - j). */
        for (int j = 0; j < 16 && ok; j++) ok = row[j] == 2.0f * (float)(j - 8) && row[j + 16] == 2.0f * (float)(7 - j);
        CHECK(ok, "q4_0 values (low nibbles first)");
    }
    sift_gguf_close(g);

    /* Every strict prefix of a valid file is refused cleanly. */
    int refused = 0;
    for (size_t n = 0; n < b.len; n++) {
        if (sift_gguf_open_memory(b.data, n, "prefix", &g) == SIFT_OK) {
            /* Only the padding after the last tensor may go: its data must still be whole. */
            if (n < sift_gguf_data_offset(g)) CHECK(0, "a prefix of %zu bytes opened", n);
            sift_gguf_close(g);
        } else {
            refused++;
        }
    }
    CHECK(refused > 0, "no prefix refused");
    gb_free(&b);
}

/* Model metadata for hyper-parameter tests: each extra key is written after the standard ones. */
typedef struct extra_key {
    const char *key;
    int type; /* GB_U32, GB_F32, GB_STRING */
    uint32_t u;
    float f;
    const char *s;
} extra_key;

static sift_status open_model(const char *arch, const extra_key *extra, int n_extra, bool output, bool q_bias,
                              gguf_builder *b, sift_gguf **g)
{
    char key[128];
    const int n_tensors = 1 + output + q_bias;
    gb_header(b, (uint64_t)n_tensors, 9 + (uint64_t)n_extra);
    gb_kv_str(b, "general.architecture", arch);
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gb_kv_u32(b, AK("context_length"), 4096);
    gb_kv_u32(b, AK("embedding_length"), 64);
    gb_kv_u32(b, AK("block_count"), 2);
    gb_kv_u32(b, AK("feed_forward_length"), 160);
    gb_kv_u32(b, AK("attention.head_count"), 8);
    gb_kv_u32(b, AK("attention.head_count_kv"), 2);
    gb_kv_f32(b, AK("attention.layer_norm_rms_epsilon"), 1e-6f);
    gb_kv_u32(b, AK("vocab_size"), 16);
#undef AK
    for (int i = 0; i < n_extra; i++) {
        if (extra[i].type == GB_U32) gb_kv_u32(b, extra[i].key, extra[i].u);
        else if (extra[i].type == GB_F32) gb_kv_f32(b, extra[i].key, extra[i].f);
        else gb_kv_str(b, extra[i].key, extra[i].s);
    }
    const uint64_t embd[2] = {64, 16}, bias[1] = {64};
    gb_tensor_info(b, "token_embd.weight", 2, embd, 1, 0);
    if (output) gb_tensor_info(b, "output.weight", 2, embd, 1, 2048);
    if (q_bias) gb_tensor_info(b, "blk.0.attn_q.bias", 1, bias, 0, 4096);
    gb_align(b, 32);
    static const uint8_t zeros[4096 + 256] = {0};
    gb_bytes(b, zeros, 2048u * (unsigned)(1 + output) + (q_bias ? 256u : 0u));
    return sift_gguf_open_memory(b->data, b->len, arch, g);
}

static void test_hparams(void)
{
    test_case_begin("hparams", "host");
    gguf_builder b = {0};
    sift_gguf *g = NULL;
    sift_gguf_hparams hp;
    CHECK(open_model("llama", NULL, 0, false, false, &b, &g) == SIFT_OK, "llama model: %s", sift_last_error());
    if (g) {
        CHECK(sift_gguf_read_hparams(g, &hp) == SIFT_OK, "llama hparams: %s", sift_last_error());
        CHECK(hp.arch == SIFT_GGUF_ARCH_LLAMA && strcmp(hp.arch_name, "llama") == 0 && hp.n_vocab == 16 &&
                  hp.n_embd == 64 && hp.n_layer == 2 && hp.n_ff == 160 && hp.n_head == 8 && hp.n_head_kv == 2 &&
                  hp.head_dim == 8 && hp.rope_dim == 8 && hp.n_ctx_train == 4096 && hp.rope_freq_base == 10000.0f &&
                  hp.rms_eps == 1e-6f && hp.tied_output && !hp.has_qkv_bias && !hp.has_rope_freqs &&
                  hp.rope_scaling == SIFT_GGUF_ROPE_SCALING_NONE && hp.rope_scaling_factor == 1.0f,
              "llama defaults");
        sift_gguf_close(g);
    }
    gb_free(&b);

    /* Llama 3.1's rope scaling, an explicit head size and rope dimension, a separate output. */
    const extra_key llama3[] = {{"llama.rope.freq_base", GB_F32, 0, 500000.0f, NULL},
                                {"llama.rope.scaling.type", GB_STRING, 0, 0, "llama3"},
                                {"llama.rope.scaling.factor", GB_F32, 0, 8.0f, NULL},
                                {"llama.rope.scaling.low_freq_factor", GB_F32, 0, 1.0f, NULL},
                                {"llama.rope.scaling.high_freq_factor", GB_F32, 0, 4.0f, NULL},
                                {"llama.rope.scaling.original_context_length", GB_U32, 8192, 0, NULL},
                                {"llama.attention.key_length", GB_U32, 16, 0, NULL},
                                {"llama.rope.dimension_count", GB_U32, 12, 0, NULL}};
    CHECK(open_model("llama", llama3, 8, true, false, &b, &g) == SIFT_OK, "llama3 model: %s", sift_last_error());
    if (g) {
        CHECK(sift_gguf_read_hparams(g, &hp) == SIFT_OK, "llama3 hparams: %s", sift_last_error());
        CHECK(hp.rope_scaling == SIFT_GGUF_ROPE_SCALING_LLAMA3 && hp.rope_scaling_factor == 8.0f &&
                  hp.rope_low_freq_factor == 1.0f && hp.rope_high_freq_factor == 4.0f && hp.rope_original_ctx == 8192 &&
                  hp.rope_freq_base == 500000.0f && hp.head_dim == 16 && hp.rope_dim == 12 && !hp.tied_output,
              "llama3 scaling");
        sift_gguf_close(g);
    }
    gb_free(&b);

    CHECK(open_model("qwen2", NULL, 0, true, true, &b, &g) == SIFT_OK, "qwen2 model: %s", sift_last_error());
    if (g) {
        CHECK(sift_gguf_read_hparams(g, &hp) == SIFT_OK && hp.arch == SIFT_GGUF_ARCH_QWEN2 && hp.has_qkv_bias &&
                  !hp.tied_output,
              "qwen2: %s", sift_last_error());
        sift_gguf_close(g);
    }
    gb_free(&b);
    CHECK(open_model("mistral", NULL, 0, false, false, &b, &g) == SIFT_OK, "mistral model: %s", sift_last_error());
    if (g) {
        CHECK(sift_gguf_read_hparams(g, &hp) == SIFT_OK && hp.arch == SIFT_GGUF_ARCH_MISTRAL, "mistral: %s",
              sift_last_error());
        sift_gguf_close(g);
    }
    gb_free(&b);

    /* Refusals, each naming its cause. */
    const struct {
        const char *arch;
        extra_key extra;
        const char *fragment;
    } bad[] = {
        {"gemma2", {"x", GB_U32, 0, 0, NULL}, "architecture 'gemma2' is not one sift runs"},
        {"llama", {"llama.rope.scaling.type", GB_STRING, 0, 0, "longrope"}, "'longrope' is not a rope scaling"},
        {"llama", {"llama.attention.key_length", GB_U32, 0, 0, NULL}, "key_length = 0"},
        {"llama", {"llama.rope.dimension_count", GB_U32, 10, 0, NULL}, "rope dimension 10"},
        {"llama", {"llama.attention.value_length", GB_U32, 4, 0, NULL}, "value heads of 4"},
        {"llama", {"llama.rope.freq_base", GB_F32, 0, -1.0f, NULL}, "freq_base"},
        {"llama", {"llama.rope.scaling.type", GB_STRING, 0, 0, "linear"}, NULL}, /* accepted: factor defaults to 1 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sift_status s = open_model(bad[i].arch, &bad[i].extra, 1, false, false, &b, &g);
        CHECK(s == SIFT_OK, "bad[%zu] does not open: %s", i, sift_last_error());
        if (g) {
            s = sift_gguf_read_hparams(g, &hp);
            if (bad[i].fragment)
                CHECK(s != SIFT_OK && strstr(sift_last_error(), bad[i].fragment), "bad[%zu]: %s (%s)", i,
                      sift_status_name(s), sift_last_error());
            else
                CHECK(s == SIFT_OK && hp.rope_scaling == SIFT_GGUF_ROPE_SCALING_LINEAR, "bad[%zu]: %s", i,
                      sift_last_error());
            sift_gguf_close(g);
        }
        gb_free(&b);
    }
    /* A model without an architecture. */
    gb_header(&b, 0, 0);
    CHECK(sift_gguf_open_memory(b.data, b.len, "empty", &g) == SIFT_OK, "empty model: %s", sift_last_error());
    if (g) {
        CHECK(sift_gguf_read_hparams(g, &hp) == SIFT_E_INVALID && strstr(sift_last_error(), "general.architecture"),
              "no architecture: %s", sift_last_error());
        sift_gguf_close(g);
    }
    gb_free(&b);
}

/* Byte sizes at the edge of int64, mostly in pairs: the largest shape that fits opens, one step past it is
 * refused with SIFT_E_INVALID and a message naming the tensor. Empty tensors (a zero dimension)
 * carry the huge shapes: they need no data, yet a reader still forms their strides. */
static void test_size_limits(void)
{
    test_case_begin("size_limits", "host");
    const uint64_t big = 1ull << 61;
    const struct {
        uint32_t n_dims;
        uint64_t dims[4];
        uint32_t type;
        bool opens;
        const char *fragment;
    } cases[] = {
        /* The fuzzer's shape: 2^62 F32 elements, 2^64 bytes, 0 in u64. */
        {2, {32, 1ull << 57}, 0, false, "tensor 'x': byte size overflows at dimension 1"},
        {3, {32, 0, (1ull << 56) - 1}, 0, true, NULL},   /* 2^63 - 128 bytes */
        {3, {32, 0, 1ull << 56}, 0, false, "tensor 'x': byte size overflows at dimension 2"},
        {2, {big - 1, 0}, 0, true, NULL},                 /* rows of 2^63 - 4 bytes */
        {2, {big, 0}, 0, false, "tensor 'x': byte size overflows: a row"},
        {3, {32, 0, (1ull << 58) - 1}, 2, true, NULL},    /* Q4_0: 18 bytes a block of 32 */
        {3, {32, 0, 1ull << 62}, 0, false, "tensor 'x': element count overflows at dimension 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gguf_builder b = {0};
        gb_header(&b, 1, 0);
        gb_tensor_info(&b, "x", cases[i].n_dims, cases[i].dims, cases[i].type, 0);
        gb_align(&b, 32);
        sift_gguf *g = NULL;
        sift_status s = sift_gguf_open_memory(b.data, b.len, "limits", &g);
        if (cases[i].opens) {
            CHECK(s == SIFT_OK, "limits[%zu] does not open: %s", i, sift_last_error());
            const sift_gguf_tensor *t = g ? sift_gguf_find_tensor(g, "x") : NULL;
            CHECK(t && t->n_elements == 0 && t->nbytes == 0, "limits[%zu]: an empty tensor", i);
            float row[1];
            if (t) CHECK(sift_dequant_row(t, 0, row) == SIFT_E_INVALID, "limits[%zu]: a row of an empty tensor", i);
        } else {
            CHECK(s == SIFT_E_INVALID && g == NULL && strstr(sift_last_error(), cases[i].fragment),
                  "limits[%zu]: %s: %s", i, sift_status_name(s), sift_last_error());
        }
        sift_gguf_close(g);
        gb_free(&b);
    }
}

static void test_arguments(void)
{
    test_case_begin("arguments", "host");
    sift_gguf *g = (sift_gguf *)&g;
    CHECK(sift_gguf_open_memory(NULL, 0, NULL, &g) == SIFT_E_INVALID && g == NULL, "empty buffer");
    CHECK(strstr(sift_last_error(), "<memory>") != NULL, "memory label: %s", sift_last_error());
    CHECK(sift_gguf_open_memory("GGUF", 4, "x", NULL) == SIFT_E_INVALID, "NULL out");
    CHECK(sift_gguf_open_file(NULL, &g) == SIFT_E_INVALID, "NULL path");
    CHECK(sift_gguf_open_file("/nonexistent/model.gguf", &g) == SIFT_E_INVALID &&
              strstr(sift_last_error(), "/nonexistent/model.gguf: cannot open"),
          "missing file: %s", sift_last_error());
    CHECK(sift_gguf_open_file("/", &g) == SIFT_E_INVALID && strstr(sift_last_error(), "not a regular file"),
          "directory: %s", sift_last_error());
    sift_gguf_close(NULL);
}

/* ---- K-quants and versions ---------------------------------------------------------------------- */

/* Packs eight 6-bit scales and mins into Q4_K/Q5_K's 12 bytes: the first four of each in the low 6
 * bits of bytes 0-3 (scales) and 4-7 (mins); the last four's low 4 bits in bytes 8-11 (scale low,
 * min high nibble), their top 2 bits in the top bits of bytes 0-3 (scales) and 4-7 (mins). */
static void pack_k_scales(const int sc[8], const int m[8], uint8_t out[12])
{
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* One super-block of each K-quant, with values in closed form, read back through sift_dequant_row;
 * a row that is not a whole super-block is refused. */
static void test_kquants(void)
{
    test_case_begin("kquants", "host");
    const int sc[8] = {1, 7, 20, 33, 17, 40, 63, 48}, mn[8] = {5, 0, 63, 16, 31, 47, 2, 60};
    uint8_t scales[12];
    pack_k_scales(sc, mn, scales);
    const uint64_t dims[1] = {256};
    gguf_builder b = {0};
    gb_header(&b, 3, 0);
    gb_tensor_info(&b, "q4_k", 1, dims, 12, 0);
    gb_tensor_info(&b, "q5_k", 1, dims, 13, 160);
    gb_tensor_info(&b, "q6_k", 1, dims, 14, 352);
    gb_align(&b, 32);
    /* Q4_K: d = 0.5, dmin = 0.25; qs byte i: low nibble i & 15, high nibble (3i + 1) & 15. */
    gb_le(&b, 0x3800, 2), gb_le(&b, 0x3400, 2), gb_bytes(&b, scales, 12);
    for (int i = 0; i < 128; i++) gb_le(&b, (uint64_t)((i & 15) | (((3 * i + 1) & 15) << 4)), 1);
    gb_align(&b, 32);
    /* Q5_K: d = 2, dmin = -1; qh byte l = 37 l + 11 (mod 256); qs as Q4_K's. */
    gb_le(&b, 0x4000, 2), gb_le(&b, 0xbc00, 2), gb_bytes(&b, scales, 12);
    for (int l = 0; l < 32; l++) gb_le(&b, (uint64_t)((37 * l + 11) & 255), 1);
    for (int i = 0; i < 128; i++) gb_le(&b, (uint64_t)((i & 15) | (((3 * i + 1) & 15) << 4)), 1);
    gb_align(&b, 32);
    /* Q6_K: ql byte i = 5i + 3, qh byte i = 29i + 7 (mod 256), scales s = 9 k - 70, d = 0.125. */
    for (int i = 0; i < 128; i++) gb_le(&b, (uint64_t)((5 * i + 3) & 255), 1);
    for (int i = 0; i < 64; i++) gb_le(&b, (uint64_t)((29 * i + 7) & 255), 1);
    for (int k = 0; k < 16; k++) gb_le(&b, (uint64_t)(uint8_t)(int8_t)(9 * k - 70), 1);
    gb_le(&b, 0x3000, 2);
    gb_align(&b, 32);

    sift_gguf *g = NULL;
    sift_status s = sift_gguf_open_memory(b.data, b.len, "kquants", &g);
    CHECK(s == SIFT_OK, "kquants does not open: %s", sift_last_error());
    float row[256];
    const sift_gguf_tensor *t = g ? sift_gguf_find_tensor(g, "q4_k") : NULL;
    CHECK(t && t->type == SIFT_GGUF_TENSOR_Q4_K && t->nbytes == 144, "q4_k tensor info");
    if (t && sift_dequant_row(t, 0, row) == SIFT_OK) {
        int bad = -1;
        for (int v = 0; v < 256 && bad < 0; v++) { /* value 64c + 32h + l: byte 32c + l, nibble h */
            const int j = v / 32, byte = 32 * (j / 2) + v % 32;
            const int q = (j & 1) ? (3 * byte + 1) & 15 : byte & 15;
            if (row[v] != 0.5f * (float)sc[j] * (float)q - 0.25f * (float)mn[j]) bad = v;
        }
        CHECK(bad < 0, "q4_k value %d = %g", bad, bad < 0 ? 0.0 : (double)row[bad]);
    }
    t = g ? sift_gguf_find_tensor(g, "q5_k") : NULL;
    CHECK(t && t->type == SIFT_GGUF_TENSOR_Q5_K && t->nbytes == 176, "q5_k tensor info");
    if (t && sift_dequant_row(t, 0, row) == SIFT_OK) {
        int bad = -1;
        for (int v = 0; v < 256 && bad < 0; v++) {
            const int j = v / 32, l = v % 32, byte = 32 * (j / 2) + l;
            const int q = ((j & 1) ? (3 * byte + 1) & 15 : byte & 15) + 16 * ((((37 * l + 11) & 255) >> j) & 1);
            if (row[v] != 2.0f * (float)sc[j] * (float)q + (float)mn[j]) bad = v;
        }
        CHECK(bad < 0, "q5_k value %d = %g", bad, bad < 0 ? 0.0 : (double)row[bad]);
    }
    t = g ? sift_gguf_find_tensor(g, "q6_k") : NULL;
    CHECK(t && t->type == SIFT_GGUF_TENSOR_Q6_K && t->nbytes == 210, "q6_k tensor info");
    if (t && sift_dequant_row(t, 0, row) == SIFT_OK) {
        int bad = -1;
        for (int v = 0; v < 256 && bad < 0; v++) { /* half h, group g of 32, l */
            const int h = v / 128, grp = v % 128 / 32, l = v % 32;
            const int ql = (5 * (64 * h + 32 * (grp & 1) + l) + 3) & 255, qh = (29 * (32 * h + l) + 7) & 255;
            const int q = ((grp < 2 ? ql & 15 : ql >> 4) | (((qh >> (2 * grp)) & 3) << 4)) - 32;
            const int scale = 9 * (8 * h + 2 * grp + l / 16) - 70;
            if (row[v] != 0.125f * (float)scale * (float)q) bad = v;
        }
        CHECK(bad < 0, "q6_k value %d = %g", bad, bad < 0 ? 0.0 : (double)row[bad]);
    }
    sift_gguf_close(g);
    gb_free(&b);

    /* Rows of 128 values are half a super-block. */
    gguf_builder p = {0};
    gb_header(&p, 1, 0);
    gb_tensor_info(&p, "half", 1, (const uint64_t[]){128}, 14, 0);
    gb_align(&p, 32);
    for (int i = 0; i < 210; i++) gb_le(&p, 0, 1);
    g = NULL;
    s = sift_gguf_open_memory(p.data, p.len, "half-block", &g);
    CHECK(s == SIFT_E_INVALID && !g && strstr(sift_last_error(), "not whole Q6_K blocks of 256"), "half a Q6_K block: %s",
          sift_last_error());
    sift_gguf_close(g);
    gb_free(&p);
}

/* Version 2 files open as version 3's (the same layout); 1 and unknown versions are refused. */
static void test_versions(void)
{
    test_case_begin("versions", "host");
    for (uint32_t version = 1; version <= 4; version++) {
        gguf_builder b = {0};
        gb_header_version(&b, version, 1, 1);
        gb_kv_str(&b, "general.name", "v");
        gb_tensor_info(&b, "w", 2, (const uint64_t[]){4, 2}, 0, 0);
        gb_align(&b, 32);
        for (int i = 0; i < 8; i++) gb_f32(&b, (float)i);
        sift_gguf *g = NULL;
        const sift_status s = sift_gguf_open_memory(b.data, b.len, "versions", &g);
        if (version == 2 || version == 3) {
            CHECK(s == SIFT_OK && sift_gguf_version(g) == version, "version %u does not open: %s", version, sift_last_error());
            const sift_gguf_tensor *t = g ? sift_gguf_find_tensor(g, "w") : NULL;
            float row[4] = {0};
            CHECK(t && sift_dequant_row(t, 1, row) == SIFT_OK && row[0] == 4.0f && row[3] == 7.0f &&
                      sift_gguf_string_is(g, "general.name", "v"),
                  "version %u contents", version);
        } else {
            char want[32];
            snprintf(want, sizeof want, "GGUF version %u", version);
            CHECK(s == SIFT_E_INVALID && !g && strstr(sift_last_error(), want) && strstr(sift_last_error(), "versions 2 and 3"),
                  "version %u: %s", version, sift_last_error());
        }
        sift_gguf_close(g);
        gb_free(&b);
    }
}

/* ---- 3. stories260K ---------------------------------------------------------------------------------- */

static void test_stories(const char *shared)
{
    test_case_begin("stories", "host");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    FILE *f = fopen(path, "rb");
    if (!f) {
        test_note("host", "stories260K skipped: %s not found (the shared folder beside the checkout is absent)", path);
        return;
    }
    fclose(f);
    sift_gguf *g = NULL;
    sift_status s = sift_gguf_open_file(path, &g);
    CHECK(s == SIFT_OK, "stories260K does not open: %s", sift_last_error());
    if (s != SIFT_OK) return;
    sift_gguf_hparams hp;
    s = sift_gguf_read_hparams(g, &hp);
    CHECK(s == SIFT_OK, "stories260K hparams: %s", sift_last_error());
    CHECK(hp.arch == SIFT_GGUF_ARCH_LLAMA, "arch %s", hp.arch_name);
    CHECK(hp.n_embd == 64 && hp.n_layer == 5 && hp.n_head == 8 && hp.n_head_kv == 4 && hp.n_vocab == 512 &&
              hp.n_ff == 172 && hp.head_dim == 8 && hp.rope_dim == 8,
          "shape: embd %u layers %u heads %u/%u vocab %u ff %u head %u rope %u", hp.n_embd, hp.n_layer, hp.n_head,
          hp.n_head_kv, hp.n_vocab, hp.n_ff, hp.head_dim, hp.rope_dim);
    CHECK(fabsf(hp.rms_eps - 1e-5f) < 1e-9f, "eps %g", (double)hp.rms_eps);
    CHECK(hp.n_ctx_train == 2048 && hp.rope_freq_base == 10000.0f, "ctx %u base %g", hp.n_ctx_train,
          (double)hp.rope_freq_base);
    CHECK(sift_gguf_tensor_count(g) == 3 + 9 * 5, "%llu tensors", (unsigned long long)sift_gguf_tensor_count(g));
    bool all_f32 = true;
    for (uint64_t i = 0; i < sift_gguf_tensor_count(g); i++) all_f32 &= sift_gguf_tensor_at(g, i)->type == SIFT_GGUF_TENSOR_F32;
    CHECK(all_f32, "a tensor is not F32");
    /* The output projection is tied to the embedding in the model, but this file carries it as a
     * separate output.weight holding the same bytes; hparams reports the file (tied_output false). */
    const sift_gguf_tensor *embd = sift_gguf_find_tensor(g, "token_embd.weight");
    const sift_gguf_tensor *out = sift_gguf_find_tensor(g, "output.weight");
    CHECK(embd && out && !hp.tied_output, "output.weight: the file has one");
    if (embd && out)
        CHECK(embd->nbytes == out->nbytes && memcmp(embd->data, out->data, (size_t)embd->nbytes) == 0,
              "output.weight differs from token_embd.weight");
    const sift_gguf_tensor *wq = sift_gguf_find_tensor(g, "blk.4.attn_k.weight");
    CHECK(wq && wq->n_dims == 2 && wq->dims[0] == 64 && wq->dims[1] == 32, "blk.4.attn_k.weight shape");
    if (embd) {
        float row[64];
        CHECK(sift_dequant_row(embd, 511, row) == SIFT_OK &&
                  memcmp(row, (const float *)embd->data + 511 * 64, sizeof row) == 0,
              "embedding row 511");
    }
    sift_gguf_close(g);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <corpus dir> <shared dir>\n", argv[0]);
        return 2;
    }
    test_arguments();
    test_corpus(argv[1]);
    test_all_types(32);
    test_all_types(64);
    test_hparams();
    test_size_limits();
    test_kquants();
    test_versions();
    test_stories(argv[2]);
    return test_summary("gguf", "host");
}
