/* TokenButler in sessions, on every available backend, over the retrieval model the repository
 * ships: predictor files (a valid one, one from before the fingerprint over blocks, and ones that
 * do not belong to the model: each refused with a message naming why), butler with S + W + k >= N
 * equal to dense, the first decode step after prefill selecting (no dense step), the prediction
 * interval's counts of selecting and reusing steps, the interval
 * decided by the query (at thresholds -1 and 1 the fixed intervals, logits and counts), and
 * neighbour fetch and the interval changing what is attended. The predictor files are written here, in the
 * trainer's format (tools/butler). Then the predictors the repository ships (tools/butler/predictors)
 * load for their base models, and are refused for a copy of the base that differs only past the
 * first 64 bytes of each tensor (stories260K's skipped where ../shared is absent). */
#include "sift.h"

#include "backend_filter.h"
#include "gguf_builder.h"
#include "test_files.h"
#include "report.h"
#include "predictor.h" /* sift_model_fingerprint: the file must name the model's */

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h" /* the tensors' places in a base model's file, to change it past their first 64 bytes */

#define check(ok, bname, what, value) test_check_value((ok), (bname), (value), "%s", (what))

typedef enum {
    FILE_OK,
    FILE_WRONG_LAYERS,
    FILE_WRONG_FINGERPRINT,
    FILE_WRONG_ARCH,
    FILE_MISSING_TENSOR,
    FILE_WRONG_SHAPE,
    FILE_WRONG_BLOCKS, /* base_fingerprint right, base_fingerprint_blocks wrong */
    FILE_NO_BLOCKS     /* without base_fingerprint_blocks, as files were before it: valid */
} file_kind;

typedef struct {
    char name[64];
    int n_dims;
    uint64_t dims[3]; /* innermost first */
} tinfo;

/* A predictor file for the model (d' = 16, P = 4, hidden 32), with one thing wrong as `kind` says. */
static bool write_predictor(const char *path, sift_model *m, const sift_model_info *mi, file_kind kind)
{
    const int dk = 16, stride = 4, hidden = 32, L = mi->n_layers, e = mi->n_embd, hq = mi->n_heads, hkv = mi->n_kv_heads,
              d = mi->head_dim;
    const int n_prod = (L - 2) / stride + 1;
    tinfo t[64];
    int n = 0;
    for (int i = 0; i < n_prod; i++) {
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.norm.weight", i), t[n].n_dims = 1, t[n].dims[0] = (uint64_t)e, n++;
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.norm.bias", i), t[n].n_dims = 1, t[n].dims[0] = (uint64_t)e, n++;
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.fc1.weight", i), t[n].n_dims = 2;
        t[n].dims[0] = (uint64_t)e, t[n].dims[1] = (uint64_t)hidden, n++;
        snprintf(t[n].name, sizeof t[n].name, "butler.%d.fc2.weight", i), t[n].n_dims = 2;
        t[n].dims[0] = (uint64_t)hidden, t[n].dims[1] = (uint64_t)(stride * hq * dk), n++;
    }
    for (int l = 1; l < L; l++) {
        snprintf(t[n].name, sizeof t[n].name, "butler.key.%d.weight", l), t[n].n_dims = 3;
        t[n].dims[0] = (uint64_t)d, t[n].dims[1] = (uint64_t)dk, t[n].dims[2] = (uint64_t)hkv, n++;
    }
    if (kind == FILE_MISSING_TENSOR) n--;
    if (kind == FILE_WRONG_SHAPE) t[2].dims[1] = (uint64_t)hidden + 1;
    char fp[17], fp_blocks[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)(sift_model_fingerprint(m) ^ (kind == FILE_WRONG_FINGERPRINT)));
    snprintf(fp_blocks, sizeof fp_blocks, "%016llx",
             (unsigned long long)(sift_model_fingerprint_blocks(m) ^ (kind == FILE_WRONG_BLOCKS)));
    gguf_builder b = {0};
    gb_header(&b, (uint64_t)n, kind == FILE_NO_BLOCKS ? 11 : 12);
    gb_kv_str(&b, "general.architecture", kind == FILE_WRONG_ARCH ? "llama" : "sift-butler");
    gb_kv_u32(&b, "sift-butler.block_count", (uint32_t)(L + (kind == FILE_WRONG_LAYERS)));
    gb_kv_u32(&b, "sift-butler.embedding_length", (uint32_t)e);
    gb_kv_u32(&b, "sift-butler.attention.head_count", (uint32_t)hq);
    gb_kv_u32(&b, "sift-butler.attention.head_count_kv", (uint32_t)hkv);
    gb_kv_u32(&b, "sift-butler.attention.key_length", (uint32_t)d);
    gb_kv_u32(&b, "sift-butler.key_dim", (uint32_t)dk);
    gb_kv_u32(&b, "sift-butler.producer_stride", (uint32_t)stride);
    gb_kv_u32(&b, "sift-butler.hidden_length", (uint32_t)hidden);
    gb_kv_f32(&b, "sift-butler.layer_norm_epsilon", 1e-5f);
    gb_kv_str(&b, "sift-butler.base_fingerprint", fp);
    if (kind != FILE_NO_BLOCKS) gb_kv_str(&b, "sift-butler.base_fingerprint_blocks", fp_blocks);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t elems = 1;
        for (int k = 0; k < t[i].n_dims; k++) elems *= t[i].dims[k];
        gb_tensor_info(&b, t[i].name, (uint32_t)t[i].n_dims, t[i].dims, 0 /* F32 */, off);
        off += (elems * 4 + 31) / 32 * 32;
    }
    gb_align(&b, 32);
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        uint64_t elems = 1;
        for (int k = 0; k < t[i].n_dims; k++) elems *= t[i].dims[k];
        const bool norm_w = strstr(t[i].name, "norm.weight") != NULL;
        for (uint64_t j = 0; j < elems; j++) {
            x = x * 1664525u + 1013904223u;
            gb_f32(&b, norm_w ? 1.0f : ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.5f);
        }
        gb_align(&b, 32);
    }
    FILE *f = fopen(path, "wb");
    const bool ok = f && fwrite(b.data, 1, b.len, f) == b.len;
    if (f) fclose(f);
    gb_free(&b);
    return ok;
}

/* The files that do not belong to the model: each refused, with the reason in the message. */
static void bad_files(sift_model *m, const sift_model_info *mi, const char *bname, const char *dir)
{
    static const struct {
        file_kind kind;
        const char *says;
    } cases[] = {
        {FILE_WRONG_LAYERS, "block_count"},   {FILE_WRONG_FINGERPRINT, "another model"},
        {FILE_WRONG_ARCH, "not a TokenButler"}, {FILE_MISSING_TENSOR, "is missing"},
        {FILE_WRONG_SHAPE, "butler.0.fc1.weight"}, {FILE_WRONG_BLOCKS, "differ past their first 64 bytes"},
    };
    char path[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/bad-predictor-%d.gguf", dir, (int)cases[i].kind);
        if (!write_predictor(path, m, mi, cases[i].kind)) {
            check(false, bname, "writing a predictor file", 0);
            continue;
        }
        sift_predictor *p = NULL;
        const sift_status s = sift_predictor_load(m, path, &p);
        char what[160];
        snprintf(what, sizeof what, "refused, naming '%s': %.60s", cases[i].says, sift_last_error());
        check(s != SIFT_OK && !p && strstr(sift_last_error(), cases[i].says) != NULL, bname, what, (double)s);
        sift_predictor_destroy(p);
        remove(path);
    }
}

/* A session of the model with the predictor under `policy`, the prompt prefilled, then `steps`
 * decode steps; the last logits into out, the interval's counts into *steps_full, *reused. With
 * reuse in [-1, 1] the interval is decided by the query at that threshold (at most `interval`). */
static sift_status decode_run(sift_model *m, const sift_predictor *p, sift_policy policy, int64_t sink, int64_t window,
                              int64_t budget, int interval, bool neighbors, float reuse, const int32_t *toks, int n_prompt,
                              int steps, int n_vocab, float *out, int64_t *steps_full, int64_t *reused)
{
    sift_session_config c = sift_session_config_default();
    c.n_ctx = 2048;
    c.policy = policy;
    c.sink = sink, c.window = window, c.budget = budget;
    c.predictor = p;
    c.predict_interval = interval;
    c.neighbor_fetch = neighbors;
    c.page_size = 64;
    sift_session *s = NULL;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    sift_status st = logits ? sift_session_create(m, &c, &s) : SIFT_E_NOMEM;
    if (st == SIFT_OK && reuse <= 1.0f) st = sift_session_set_butler_reuse(s, reuse);
    if (st == SIFT_OK) st = sift_session_eval(s, toks, (size_t)n_prompt, logits);
    for (int i = 0; st == SIFT_OK && i < steps; i++) {
        int32_t best = 0;
        for (int v = 1; v < n_vocab; v++) best = logits[v] > logits[best] ? v : best;
        st = sift_session_eval(s, &best, 1, logits);
    }
    if (st == SIFT_OK) memcpy(out, logits, (size_t)n_vocab * sizeof *out);
    if (st == SIFT_OK) st = sift_session_sel_cache_stats(s, -1, reused, steps_full);
    sift_session_destroy(s);
    free(logits);
    return st;
}

static double max_abs_diff(const float *a, const float *b, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static void run_backend(sift_context *ctx, const char *bname, const char *model_path, const char *dir)
{
    sift_model *m = NULL;
    if (sift_model_load(ctx, model_path, &m) != SIFT_OK) {
        check(false, bname, sift_last_error(), 0);
        return;
    }
    sift_model_info mi;
    sift_model_get_info(m, &mi);
    char path[512];
    snprintf(path, sizeof path, "%s/predictor-test.gguf", dir);
    sift_predictor *p = NULL;
    bool wrote = write_predictor(path, m, &mi, FILE_OK);
    sift_status s = wrote ? sift_predictor_load(m, path, &p) : SIFT_E_INVALID;
    check(s == SIFT_OK, bname, s == SIFT_OK ? "a predictor file for this model loads" : sift_last_error(), (double)s);
    remove(path);
    sift_predictor *old = NULL;
    const sift_status s_old = write_predictor(path, m, &mi, FILE_NO_BLOCKS) ? sift_predictor_load(m, path, &old) : SIFT_E_INVALID;
    check(s_old == SIFT_OK, bname, s_old == SIFT_OK ? "one without base_fingerprint_blocks (older) loads" : sift_last_error(),
          (double)s_old);
    sift_predictor_destroy(old);
    remove(path);
    bad_files(m, &mi, bname, dir);
    if (!p) {
        sift_model_destroy(m);
        return;
    }
    sift_predictor_info pi;
    sift_predictor_get_info(p, &pi);
    check(pi.key_dim == 16 && pi.producer_stride == 4 && pi.n_producers == (mi.n_layers - 2) / 4 + 1 && pi.overhead > 0 &&
              pi.overhead < 0.05,
          bname, "the predictor's facts (d', P, producers, overhead)", pi.overhead);

    /* a prompt 3x what a selection keeps (S + W + k = 84 at k = 64): long enough that selecting
     * changes the logits, short enough that lavapipe prefills it a dozen times in a minute */
    enum { N_PROMPT = 256 };
    const int n_prompt = N_PROMPT, steps = 13, nv = mi.n_vocab;
    int32_t toks[N_PROMPT];
    for (int i = 0; i < n_prompt; i++) toks[i] = i == 0 && mi.bos >= 0 ? mi.bos : 3 + (int32_t)((i * 7919u) % (uint32_t)(nv - 3));
    float *dense = malloc((size_t)nv * 4), *got = malloc((size_t)nv * 4), *other = malloc((size_t)nv * 4);
    int64_t full = 0, reused = 0;
    /* everything fits (S + W + k >= N): butler, with neighbour fetch and an interval, is dense */
    s = decode_run(m, p, SIFT_POLICY_DENSE, 4, 16, 2000, 1, false, SIFT_SEL_CACHE_OFF, toks, n_prompt, steps, nv, dense, &full, &reused);
    if (s == SIFT_OK) s = decode_run(m, p, SIFT_POLICY_BUTLER, 4, 16, 2000, 4, true, SIFT_SEL_CACHE_OFF, toks, n_prompt, steps, nv, got, &full, &reused);
    check(s == SIFT_OK && max_abs_diff(dense, got, nv) <= 1e-4, bname, "butler with S + W + k >= N equals dense (max |diff|)",
          s == SIFT_OK ? max_abs_diff(dense, got, nv) : -1.0);
    /* the first step after prefill selects, from the projected keys the prefill wrote: a full
     * step of every layer but 0, and logits other than dense's at that step */
    float *first_dense = malloc((size_t)nv * 4);
    if (s == SIFT_OK && first_dense)
        s = decode_run(m, p, SIFT_POLICY_DENSE, 4, 16, 64, 1, false, SIFT_SEL_CACHE_OFF, toks, n_prompt, 1, nv, first_dense, &full, &reused);
    if (s == SIFT_OK && first_dense) {
        s = decode_run(m, p, SIFT_POLICY_BUTLER, 4, 16, 64, 4, false, SIFT_SEL_CACHE_OFF, toks, n_prompt, 1, nv, got, &full, &reused);
        const double diff = s == SIFT_OK ? max_abs_diff(first_dense, got, nv) : -1.0;
        char what[160];
        snprintf(what, sizeof what, "the first step selects: %lld full layer-steps (want %d), %lld reused, max |diff| from dense",
                 (long long)full, mi.n_layers - 1, (long long)reused);
        check(s == SIFT_OK && full == mi.n_layers - 1 && reused == 0 && diff > 1e-3, bname, what, diff);
    }
    free(first_dense);
    /* the interval: the first step selects, and of the steps after it every I-th from step 1; the rest reuse */
    const int intervals[3] = {1, 4, 16};
    /* each fixed interval's logits and counts, which the interval decided by the query is held to below */
    float *by_interval = malloc(3 * (size_t)nv * 4);
    int64_t full_by[3] = {0}, reused_by[3] = {0};
    if (!by_interval) s = SIFT_E_NOMEM;
    for (int i = 0; i < 3 && s == SIFT_OK; i++) {
        const int I = intervals[i];
        s = decode_run(m, p, SIFT_POLICY_BUTLER, 4, 16, 64, I, false, SIFT_SEL_CACHE_OFF, toks, n_prompt, steps, nv,
                       by_interval + (size_t)i * nv, &full, &reused);
        full_by[i] = full, reused_by[i] = reused;
        const int64_t after_first = steps - 1, want_full = (int64_t)steps * (mi.n_layers - 1),
                      want_reused = (int64_t)(after_first - (after_first + I - 1) / I) * (mi.n_layers - 1);
        char what[128];
        snprintf(what, sizeof what, "interval %d: %lld full steps, %lld reused (want %lld, %lld)", I, (long long)full,
                 (long long)reused, (long long)want_full, (long long)want_reused);
        check(s == SIFT_OK && full == want_full && reused == want_reused, bname, what, (double)reused);
        if (I == 1) memcpy(other, by_interval, (size_t)nv * 4);
    }
    /* the interval decided by the query: at threshold -1 every check reuses, so at most 4 it is the
     * fixed interval 4; at 1 none does, the fixed interval 1; in between its reuse lies between */
    const float thresholds[3] = {-1.0f, 1.0f, 0.9f};
    const int longest[3] = {4, 4, 16};
    const int held_to[3] = {1, 0, 2}; /* the fixed interval each is held to, as its place in intervals[] */
    for (int i = 0; i < 3 && s == SIFT_OK; i++) {
        const int fi = held_to[i], fixed_interval = intervals[fi];
        const float *fixed = by_interval + (size_t)fi * nv;
        const int64_t full_fixed = full_by[fi], reused_fixed = reused_by[fi];
        s = decode_run(m, p, SIFT_POLICY_BUTLER, 4, 16, 64, longest[i], false, thresholds[i], toks, n_prompt, steps, nv, got,
                       &full, &reused);
        char what[160];
        const double diff = s == SIFT_OK ? max_abs_diff(fixed, got, nv) : -1.0;
        if (i < 2) {
            snprintf(what, sizeof what, "decided by q' at %g, at most %d: = interval %d (max |diff|; %lld of %lld reused, want %lld of %lld)",
                     (double)thresholds[i], longest[i], fixed_interval, (long long)reused, (long long)full,
                     (long long)reused_fixed, (long long)full_fixed);
            check(s == SIFT_OK && diff <= (strcmp(bname, "cpu") == 0 ? 0.0 : 1e-5) && full == full_fixed && reused == reused_fixed,
                  bname, what, diff);
        } else {
            snprintf(what, sizeof what, "decided by q' at 0.9, at most 16: %lld of %lld layer-steps reused (0 .. %lld)",
                     (long long)reused, (long long)full, (long long)reused_fixed);
            check(s == SIFT_OK && full == full_fixed && reused >= 0 && reused <= reused_fixed, bname, what, (double)reused);
        }
    }
    free(by_interval);
    /* not with neighbour fetch: its lists are made after the select a reuse skips */
    if (s == SIFT_OK) {
        sift_session_config c = sift_session_config_default();
        c.n_ctx = 256;
        c.policy = SIFT_POLICY_BUTLER;
        c.predictor = p;
        c.neighbor_fetch = 1;
        sift_session *nf = NULL;
        sift_status e = sift_session_create(m, &c, &nf);
        if (e == SIFT_OK) e = sift_session_set_butler_reuse(nf, 0.9f);
        check(e == SIFT_E_UNSUPPORTED && strstr(sift_last_error(), "neighbour fetch"), bname,
              "the interval decided by the query with neighbour fetch: SIFT_E_UNSUPPORTED", (double)e);
        sift_session_destroy(nf);
    }
    /* a real selection attends less than dense; neighbour fetch attends more: both change the logits */
    check(s == SIFT_OK && max_abs_diff(dense, other, nv) > 1e-3, bname, "butler at k = 64 differs from dense (max |diff|)",
          max_abs_diff(dense, other, nv));
    if (s == SIFT_OK) s = decode_run(m, p, SIFT_POLICY_BUTLER, 4, 16, 64, 1, true, SIFT_SEL_CACHE_OFF, toks, n_prompt, steps, nv, got, &full, &reused);
    check(s == SIFT_OK && max_abs_diff(got, other, nv) > 0, bname, "neighbour fetch changes what is attended (max |diff|)",
          max_abs_diff(got, other, nv));
    if (s != SIFT_OK) check(false, bname, sift_last_error(), (double)s);
    /* butler without a predictor is refused */
    sift_session_config c = sift_session_config_default();
    c.policy = SIFT_POLICY_BUTLER;
    sift_session *none = NULL;
    s = sift_session_create(m, &c, &none);
    check(s != SIFT_OK && strstr(sift_last_error(), "predictor") != NULL, bname, "butler without a predictor is refused", (double)s);
    sift_session_destroy(none);
    free(dense), free(got), free(other);
    sift_predictor_destroy(p);
    sift_model_destroy(m);
}

/* A copy of the model file at base with the sign of every f32 and f16 past the first 64 bytes of
 * each tensor flipped, written to out: the same first 64 bytes of every tensor, so the same
 * base_fingerprint, and another model. */
static bool write_changed_copy(const char *base, const char *out)
{
    size_t size = 0;
    uint8_t *buf = test_read_file(base, &size);
    sift_gguf *g = NULL;
    bool ok = buf && size > 0 && sift_gguf_open_memory(buf, size, base, &g) == SIFT_OK;
    for (uint64_t i = 0; ok && i < sift_gguf_tensor_count(g); i++) {
        const sift_gguf_tensor *t = sift_gguf_tensor_at(g, i);
        const uint64_t elem = t->type == SIFT_GGUF_TENSOR_F32 ? 4 : t->type == SIFT_GGUF_TENSOR_F16 ? 2 : 0;
        const uint64_t at = sift_gguf_data_offset(g) + t->offset;
        for (uint64_t b = 64; elem && b + elem <= t->nbytes; b += elem) buf[at + b + elem - 1] ^= 0x80; /* little-endian: the sign */
    }
    sift_gguf_close(g);
    FILE *o = ok ? fopen(out, "wb") : NULL;
    ok = o && fwrite(buf, 1, size, o) == size;
    if (o) ok = fclose(o) == 0 && ok;
    free(buf);
    return ok;
}

/* The predictor the repository ships for the base model: it loads for the base, and is refused for
 * a copy that differs only past the first 64 bytes of each tensor (which base_fingerprint alone
 * took for the base). */
static void shipped_predictor(sift_context *ctx, const char *base, const char *predictor, const char *dir)
{
    const char *name = strrchr(predictor, '/') ? strrchr(predictor, '/') + 1 : predictor;
    char what[200], changed[512];
    snprintf(changed, sizeof changed, "%s/changed-base.gguf", dir);
    sift_model *m = NULL, *other = NULL;
    sift_predictor *p = NULL;
    sift_status s = sift_model_load(ctx, base, &m);
    if (s == SIFT_OK) s = sift_predictor_load(m, predictor, &p);
    snprintf(what, sizeof what, "%s loads for its base", name);
    check(s == SIFT_OK, "cpu", s == SIFT_OK ? what : sift_last_error(), (double)s);
    sift_predictor_destroy(p);
    p = NULL;
    const bool wrote = m && write_changed_copy(base, changed);
    check(wrote, "cpu", "a copy of the base with every value past 64 bytes of a tensor negated", 0);
    if (wrote && sift_model_load(ctx, changed, &other) == SIFT_OK) {
        check(sift_model_fingerprint(other) == sift_model_fingerprint(m) &&
                  sift_model_fingerprint_blocks(other) != sift_model_fingerprint_blocks(m),
              "cpu", "  the copy: base_fingerprint the base's, the fingerprint over blocks not", 0);
        s = sift_predictor_load(other, predictor, &p);
        snprintf(what, sizeof what, "%s is refused for the copy (differs past 64 bytes)", name);
        check(s == SIFT_E_INVALID && !p && strstr(sift_last_error(), "differ past their first 64 bytes"), "cpu", what, (double)s);
    } else if (wrote) {
        check(false, "cpu", sift_last_error(), 0);
    }
    remove(changed);
    sift_predictor_destroy(p);
    sift_model_destroy(other);
    sift_model_destroy(m);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: sift-butler-test MODEL.gguf SCRATCH_DIR PREDICTORS_DIR SHARED_DIR [TASKS_MODEL.gguf]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int kind = 0; kind < SIFT_BACKEND_COUNT; kind++) {
        sift_context *ctx = NULL;
        const char *bname = sift_backend_kind_name((sift_backend_kind)kind);
        const char *excluded = test_backend_excluded((sift_backend_kind)kind);
        if (excluded || sift_context_create((sift_backend_kind)kind, &ctx) != SIFT_OK) {
            test_note(bname, "skipped: %s", excluded ? excluded : sift_last_error());
            continue;
        }
        test_case_begin("retrieval model and predictors", bname);
        run_backend(ctx, bname, argv[1], argv[2]);
        test_context_done(ctx);
    }
    /* the fingerprints are the host's: the CPU checks the shipped predictors */
    sift_context *cpu = NULL;
    char predictor[512], stories[512];
    if (!test_backend_excluded(SIFT_BACKEND_CPU) && sift_context_create(SIFT_BACKEND_CPU, &cpu) == SIFT_OK) {
        test_case_begin("shipped predictors", "cpu");
        snprintf(predictor, sizeof predictor, "%s/retrieval.butler.gguf", argv[3]);
        shipped_predictor(cpu, argv[1], predictor, argv[2]);
        if (argc > 5) { /* the model of the harder tasks and its predictor */
            snprintf(predictor, sizeof predictor, "%s/retrieval-tasks.butler.gguf", argv[3]);
            shipped_predictor(cpu, argv[5], predictor, argv[2]);
        }
        snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", argv[4]);
        snprintf(predictor, sizeof predictor, "%s/stories260K.butler.gguf", argv[3]);
        FILE *f = fopen(stories, "rb");
        if (f) {
            fclose(f);
            shipped_predictor(cpu, stories, predictor, argv[2]);
        } else {
            test_note("cpu", "skipped: %s is absent: stories260K's predictor not checked", stories);
        }
        test_context_done(cpu);
    }
    return test_summary("butler", NULL);
}
