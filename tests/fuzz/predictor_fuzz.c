/* libFuzzer harness for TokenButler predictor files (engine/predictor.c), against a base model
 * (SIFT_FUZZ_MODEL, which tests/fuzz/run.sh sets), loaded once on the CPU backend. An input whose first byte is even is a whole predictor file. One whose first byte
 * is odd edits a valid predictor for the model, built at start (its fingerprints right, small
 * weights): then come edits of 4 bytes of offset (little-endian, modulo the file's size), a count
 * byte and that many bytes written there; an offset of 0xffffffff cuts the file at the count
 * times 256 bytes instead. The fingerprints stay right under most edits, so the loader's checks of
 * shapes and types, and predictors with any weights (NaN, infinities), are reached. A load must
 * succeed or fail with a message; a predictor that loads runs a short TokenButler session (a
 * prefill and decode steps), which must finish or fail with a message. Build and run with
 * tests/fuzz/run.sh. */
#include "../gguf_builder.h"
#include "predictor.h" /* the model's fingerprints, which a valid file names */
#include "sift.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sift_context *ctx;
static sift_model *model;
static sift_model_info info;
static gguf_builder valid;  /* a predictor file for the model */
static char path[64];       /* where each input is written for sift_predictor_load */

static void require_message(sift_status s)
{
    if (s != SIFT_OK && sift_last_error()[0] == '\0') __builtin_trap();
}

/* A predictor for the model as tools/butler writes one: d' = 8, producers every 4 layers, 8 wide. */
static void build_valid(void)
{
    const int dk = 8, stride = 4, hidden = 8, L = info.n_layers, e = info.n_embd, hq = info.n_heads, hkv = info.n_kv_heads,
              d = info.head_dim, n_prod = (L - 2) / stride + 1;
    struct {
        char name[48];
        uint32_t n_dims;
        uint64_t dims[3];
    } t[64];
    int n = 0;
    for (int i = 0; i < n_prod && n + 4 <= 64; i++) {
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.norm.weight", i), t[n].n_dims = 1, t[n].dims[0] = (uint64_t)e, n++;
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.norm.bias", i), t[n].n_dims = 1, t[n].dims[0] = (uint64_t)e, n++;
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.fc1.weight", i), t[n].n_dims = 2;
        t[n].dims[0] = (uint64_t)e, t[n].dims[1] = (uint64_t)hidden, n++;
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.fc2.weight", i), t[n].n_dims = 2;
        t[n].dims[0] = (uint64_t)hidden, t[n].dims[1] = (uint64_t)(stride * hq * dk), n++;
    }
    for (int l = 1; l < L && n < 64; l++) {
        snprintf(t[n].name, sizeof t[n].name, "butler.key.%d.weight", l), t[n].n_dims = 3;
        t[n].dims[0] = (uint64_t)d, t[n].dims[1] = (uint64_t)dk, t[n].dims[2] = (uint64_t)hkv, n++;
    }
    char fp[17], fp_blocks[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)sift_model_fingerprint(model));
    snprintf(fp_blocks, sizeof fp_blocks, "%016llx", (unsigned long long)sift_model_fingerprint_blocks(model));
    gguf_builder *b = &valid;
    gb_header(b, (uint64_t)n, 12);
    gb_kv_str(b, "general.architecture", "sift-butler");
    gb_kv_u32(b, "sift-butler.block_count", (uint32_t)L);
    gb_kv_u32(b, "sift-butler.embedding_length", (uint32_t)e);
    gb_kv_u32(b, "sift-butler.attention.head_count", (uint32_t)hq);
    gb_kv_u32(b, "sift-butler.attention.head_count_kv", (uint32_t)hkv);
    gb_kv_u32(b, "sift-butler.attention.key_length", (uint32_t)d);
    gb_kv_u32(b, "sift-butler.key_dim", (uint32_t)dk);
    gb_kv_u32(b, "sift-butler.producer_stride", (uint32_t)stride);
    gb_kv_u32(b, "sift-butler.hidden_length", (uint32_t)hidden);
    gb_kv_f32(b, "sift-butler.layer_norm_epsilon", 1e-5f);
    gb_kv_str(b, "sift-butler.base_fingerprint", fp);
    gb_kv_str(b, "sift-butler.base_fingerprint_blocks", fp_blocks);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t elems = 1;
        for (uint32_t k = 0; k < t[i].n_dims; k++) elems *= t[i].dims[k];
        gb_tensor_info(b, t[i].name, t[i].n_dims, t[i].dims, 0 /* F32 */, off);
        off += (elems * 4 + 31) / 32 * 32;
    }
    gb_align(b, 32);
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        uint64_t elems = 1;
        for (uint32_t k = 0; k < t[i].n_dims; k++) elems *= t[i].dims[k];
        for (uint64_t j = 0; j < elems; j++) {
            x = x * 1664525u + 1013904223u;
            gb_f32(b, strstr(t[i].name, "norm.weight") ? 1.0f : ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.5f);
        }
        gb_align(b, 32);
    }
}

static void remove_file(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *model_path = getenv("SIFT_FUZZ_MODEL");
    if (!model_path) {
        fprintf(stderr, "predictor_fuzz: SIFT_FUZZ_MODEL names no model (tests/fuzz/run.sh sets it)\n");
        __builtin_trap();
    }
    sift_context_config cc = sift_context_config_default();
    cc.threads = 1;
    if (sift_context_create_with(&cc, &ctx) != SIFT_OK || sift_model_load(ctx, model_path, &model) != SIFT_OK) {
        fprintf(stderr, "predictor_fuzz: %s: %s\n", model_path, sift_last_error());
        __builtin_trap();
    }
    sift_model_get_info(model, &info);
    build_valid();
    snprintf(path, sizeof path, "/tmp/sift-predictor-fuzz-%ld.gguf", (long)getpid());
    atexit(remove_file);
    return 0;
}

/* The file an input stands for (see the top of this file), in a buffer of its own. */
static uint8_t *file_of(const uint8_t *data, size_t size, size_t *len)
{
    if (!(data[0] & 1)) {
        uint8_t *f = malloc(size);
        if (f) memcpy(f, data + 1, size - 1);
        *len = size - 1;
        return f;
    }
    uint8_t *f = malloc(valid.len);
    if (!f) return NULL;
    memcpy(f, valid.data, valid.len);
    *len = valid.len;
    for (size_t at = 1; at + 5 <= size;) {
        const uint32_t off = (uint32_t)data[at] | (uint32_t)data[at + 1] << 8 | (uint32_t)data[at + 2] << 16 |
                             (uint32_t)data[at + 3] << 24;
        const size_t count = data[at + 4];
        at += 5;
        if (off == 0xffffffffu) {
            if (count * 256 < *len) *len = count * 256;
            continue;
        }
        for (size_t i = 0; i < count && at < size && *len > 0; i++, at++) f[(off + i) % *len] = data[at];
    }
    return f;
}

/* A prefill and a few TokenButler decode steps with predictor p (tiny budget: every step selects). */
static void run_session(const sift_predictor *p)
{
    sift_session_config sc = sift_session_config_default();
    sc.n_ctx = 32;
    sc.chunk = 8;
    sc.policy = SIFT_POLICY_BUTLER;
    sc.predictor = p;
    sc.sink = 1;
    sc.window = 2;
    sc.budget = 4;
    sc.neighbor_fetch = 1;
    sift_session *s = NULL;
    sift_status st = sift_session_create(model, &sc, &s);
    require_message(st);
    int32_t ids[16];
    for (int i = 0; i < 16; i++) ids[i] = (int32_t)(1 + (i * 37) % (info.n_vocab - 1));
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    if (st == SIFT_OK && logits) st = sift_session_eval(s, ids, 12, logits);
    for (int i = 12; st == SIFT_OK && logits && i < 16; i++) st = sift_session_eval(s, &ids[i], 1, logits);
    require_message(st);
    free(logits);
    sift_session_destroy(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t len = 0;
    uint8_t *file = file_of(data, size, &len);
    if (!file) return 0;
    FILE *f = fopen(path, "wb");
    const bool written = f && fwrite(file, 1, len, f) == len;
    if (f) fclose(f);
    free(file);
    if (!written) return 0;
    sift_predictor *p = NULL;
    const sift_status s = sift_predictor_load(model, path, &p);
    require_message(s);
    if (s == SIFT_OK) {
        sift_predictor_info pi;
        sift_predictor_get_info(p, &pi);
        if (pi.key_dim < 8 || pi.producer_stride < 1 || pi.hidden < 1 || pi.bytes == 0) __builtin_trap();
        run_session(p);
    }
    sift_predictor_destroy(p);
    return 0;
}
