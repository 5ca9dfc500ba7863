/* Sessions over the paged KV cache, on every available backend, for each model given:
 *   - paging is invisible: pages of 16 tokens give the logits of one page as large as the context;
 *   - the pool: a full pool is SIFT_E_LIMIT, and the session works again after a rewind frees pages;
 *   - several sequences: a batched decode step gives each sequence the logits it gets alone;
 *     synthetic contexts fill one sequence each;
 *   - rewind: rewinding and feeding the same tokens again gives the same logits;
 *   - the Selection Cache: theta 1 never reuses; theta -1 reuses at every full step after the
 *     first (hits = (steps - 1) x layers); its output is that of the first step's top-k with
 *     the window moving on;
 *   - sparse prefill with a budget that keeps everything equals dense prefill; with a small budget
 *     its logits stay finite and close (reported);
 *   - length extrapolation keeping every token equals dense (keys rotated by rank = by position),
 *     and runs past the cache's rotary range with finite logits;
 *   - every policy decodes with finite logits on every backend;
 *   - eval_mode's attention-quality measure counts the steps it measures, none while turned off,
 *     without changing the logits;
 *   - cancellation: should_stop, asked before each prefill chunk and decode step, ends the call
 *     with SIFT_E_CANCELLED keeping the chunks done; feeding the rest gives the logits of a call
 *     never stopped; a stopped decode step or generate call changes nothing;
 *   - running ahead (the next decode step's graph built while a step runs; on the first model)
 *     gives the logits of steps built one by one (SIFT_STEP_AHEAD=0), over page boundaries, a
 *     rewind, batched steps whose sequences change, TokenButler's interval (fixed, and decided by
 *     the query) and the Selection Cache; most steps run the graph built ahead for them, and none
 *     with SIFT_STEP_AHEAD=0;
 *   - the per-op profile of decode steps counts each op's nodes as the forward pass makes them,
 *     and stops counting when turned off; the per-stage profile names each stage of the step
 *     (qkv, attention, logits, ...) with its nodes, and adds up by op to the per-op profile.
 * Each backend's logits are compared with the CPU's (NMSE <= 1e-3: f16 cache, other arithmetic).
 * Usage: sift-session-test MODEL.gguf... (a missing model file is skipped with a message). */
#include "sift.h"
#include "sift_testing.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h" /* nmse, all_finite, the check counters */
#include "backend_filter.h"

/* A check of a model on a backend, with the value it measured. */
#define check(ok, model, backend, what, value) test_check_value((ok), (backend), (value), "%s: %s", (model), (what))

typedef struct {
    sift_model *m;
    sift_model_info info;
    const char *name, *bname;
    int32_t toks[700];
} model_run;

/* The scenarios' outputs, kept to compare backends with the CPU. */
enum { OUT_PAGED, OUT_BATCH0, OUT_BATCH1, OUT_BATCH2, OUT_CACHE, OUT_SPARSE, OUT_COUNT };
static const char *const out_names[OUT_COUNT] = {"paged decode", "batched decode, sequence 2", "batched decode, sequence 0",
                                                 "batched decode, sequence 1", "Selection Cache theta -1", "sparse prefill k=24"};

static sift_session_config base_config(int64_t n_ctx)
{
    sift_session_config c = sift_session_config_default();
    c.n_ctx = n_ctx;
    c.chunk = 64;
    c.page_size = 16;
    c.sink = 4, c.window = 16, c.budget = 24;
    c.sel_cache = SIFT_SEL_CACHE_OFF;
    return c;
}

/* Prefills tokens [first, first + n_prompt) in one eval, then decodes `steps` more one by one;
 * the logits of the last token into out. */
static sift_status run(const model_run *t, const sift_session_config *cfg, int first, int n_prompt, int steps, float *out,
                       sift_session **keep)
{
    sift_session *s = NULL;
    sift_status st = sift_session_create(t->m, cfg, &s);
    if (st == SIFT_OK) st = sift_session_eval(s, t->toks + first, (size_t)n_prompt, out);
    for (int i = 0; i < steps && st == SIFT_OK; i++) st = sift_session_eval(s, &t->toks[first + n_prompt + i], 1, out);
    if (keep && st == SIFT_OK) *keep = s;
    else sift_session_destroy(s);
    return st;
}

#define NV ((size_t)t->info.n_vocab)
#define RUN_OK(call, what)                                                                                             \
    do {                                                                                                               \
        sift_status st_ = (call);                                                                                      \
        if (st_ != SIFT_OK) {                                                                                          \
            char msg_[300];                                                                                            \
            snprintf(msg_, sizeof msg_, "%s: %s", what, sift_last_error());                                           \
            check(false, t->name, t->bname, msg_, 0);                                                                  \
            goto out;                                                                                                  \
        }                                                                                                              \
    } while (0)

static void paging(const model_run *t, float *outs)
{
    float *a = malloc(3 * NV * sizeof(float)), *b = a + NV, *rows = NULL;
    sift_session *s = NULL;
    sift_session_config one_page = base_config(256), paged = base_config(256);
    one_page.page_size = 256;
    RUN_OK(run(t, &one_page, 0, 100, 20, a, NULL), "one page");
    RUN_OK(run(t, &paged, 0, 100, 20, b, NULL), "pages of 16");
    check(nmse(a, b, NV) == 0.0, t->name, t->bname, "pages of 16 = one page of 256 (120 tokens, 20 decode steps)", nmse(a, b, NV));
    memcpy(outs + OUT_PAGED * NV, b, NV * sizeof(float));

    /* three sequences of different lengths share the pool, then five batched decode steps */
    sift_session_config multi = base_config(256);
    multi.n_seq = 3;
    RUN_OK(sift_session_create(t->m, &multi, &s), "three sequences");
    const int lens[3] = {40, 75, 9}, seqs[3] = {2, 0, 1};
    for (int q = 0; q < 3; q++) RUN_OK(sift_session_eval_seq(s, q, t->toks + 100 * q, (size_t)lens[q], NULL), "prefill");
    rows = malloc(3 * NV * sizeof(float));
    for (int step = 0; step < 5; step++) {
        int32_t tk[3];
        for (int i = 0; i < 3; i++) tk[i] = t->toks[100 * seqs[i] + lens[seqs[i]] + step];
        RUN_OK(sift_session_decode_batch(s, 3, seqs, tk, rows), "batched decode");
    }
    check(sift_session_seq_pos(s, 1) == lens[1] + 5, t->name, t->bname, "sequence 1 position after 5 batched steps",
          (double)sift_session_seq_pos(s, 1));
    for (int i = 0; i < 3; i++) {
        const int q = seqs[i];
        sift_session_config cfg = base_config(256);
        RUN_OK(run(t, &cfg, 100 * q, lens[q], 5, a, NULL), "alone");
        char what[96];
        snprintf(what, sizeof what, "batched step, sequence %d = the sequence alone", q);
        const double e = nmse(a, rows + (size_t)i * NV, NV);
        /* exact on the CPU; a GPU's matmul over 3 rows may round differently from its 1-row kernel */
        check(e <= 1e-6, t->name, t->bname, what, e);
        memcpy(outs + (OUT_BATCH0 + i) * NV, rows + (size_t)i * NV, NV * sizeof(float));
    }
    sift_session_destroy(s);
    s = NULL;

    /* a pool of 5 pages of 16: 48 + 48 tokens do not fit; after a rewind frees pages they do */
    sift_session_config pool = base_config(128);
    pool.n_seq = 2;
    pool.pool_tokens = 80;
    RUN_OK(sift_session_create(t->m, &pool, &s), "small pool");
    RUN_OK(sift_session_eval_seq(s, 0, t->toks, 48, NULL), "48 tokens");
    sift_status st = sift_session_eval_seq(s, 1, t->toks, 48, NULL);
    check(st == SIFT_E_LIMIT, t->name, t->bname, "a full pool refuses with SIFT_E_LIMIT", (double)st);
    check(sift_session_seq_pos(s, 1) == 0, t->name, t->bname, "the refused sequence did not move", (double)sift_session_seq_pos(s, 1));
    RUN_OK(sift_session_rewind(s, 0, 16), "rewind to 16");
    RUN_OK(sift_session_eval_seq(s, 1, t->toks, 48, a), "48 tokens after the rewind");
    RUN_OK(sift_session_eval_seq(s, 0, t->toks + 16, 16, b), "sequence 0 again");
    RUN_OK(run(t, &paged, 0, 32, 0, rows, NULL), "32 tokens alone");
    /* close to exact on the CPU; a GPU may take another kernel for 16 rows (a batched step's
     * matrix-vector products) than for 32 (prefill's tiles), which rounds differently */
    const double rewind_bound = strcmp(t->bname, "cpu") == 0 ? 1e-10 : 1e-6;
    check(nmse(rows, b, NV) <= rewind_bound, t->name, t->bname, "rewind to 16, the same 16 tokens again = never rewound",
          nmse(rows, b, NV));
    RUN_OK(run(t, &paged, 0, 48, 0, rows, NULL), "48 tokens alone");
    check(nmse(rows, a, NV) <= 1e-10, t->name, t->bname, "the other sequence, in pages freed by the rewind = alone", nmse(rows, a, NV));
out:
    sift_session_destroy(s);
    free(rows);
    free(a);
}

static void sel_cache(const model_run *t, float *outs)
{
    float *a = malloc(2 * NV * sizeof(float)), *b = a + NV;
    sift_session *s = NULL;
    const int n_layers = t->info.n_layers, prompt = 100, steps = 12;
    /* theta 1: checks run, nothing is reused; the output equals selection without the cache */
    sift_session_config c1 = base_config(256);
    c1.policy = SIFT_POLICY_TOKENSELECT;
    c1.sel_cache = 1.0f;
    RUN_OK(run(t, &c1, 0, prompt, steps, a, &s), "theta 1");
    int64_t hits = -1, n = -1;
    RUN_OK(sift_session_sel_cache_stats(s, -1, &hits, &n), "stats");
    check(hits == 0 && n == (int64_t)steps * n_layers, t->name, t->bname, "theta 1: no reuse in 12 steps x layers", (double)hits);
    sift_session_destroy(s);
    s = NULL;
    sift_session_config off = c1;
    off.sel_cache = SIFT_SEL_CACHE_OFF;
    RUN_OK(run(t, &off, 0, prompt, steps, b, &s), "cache off");
    check(nmse(b, a, NV) == 0.0, t->name, t->bname, "theta 1 = no Selection Cache", nmse(b, a, NV));
    RUN_OK(sift_session_sel_cache_stats(s, -1, &hits, &n), "stats");
    check(hits == 0 && n == 0, t->name, t->bname, "cache off: no counters", (double)n);
    sift_session_destroy(s);
    s = NULL;
    /* theta -1: every full step after the first reuses, in every layer */
    sift_session_config cm = c1;
    cm.sel_cache = -1.0f;
    RUN_OK(run(t, &cm, 0, prompt, steps, a, &s), "theta -1");
    RUN_OK(sift_session_sel_cache_stats(s, -1, &hits, &n), "stats");
    check(hits == (int64_t)(steps - 1) * n_layers && n == (int64_t)steps * n_layers, t->name, t->bname,
          "theta -1: hits = (12 - 1) x layers", (double)hits);
    int64_t h0 = -1, n0 = -1;
    RUN_OK(sift_session_sel_cache_stats(s, 0, &h0, &n0), "layer 0 stats");
    check(h0 == steps - 1 && n0 == steps, t->name, t->bname, "theta -1: layer 0 hits 11 of 12", (double)h0);
    memcpy(outs + OUT_CACHE * NV, a, NV * sizeof(float));
    check(nmse(b, a, NV) > 0.0, t->name, t->bname, "theta -1 differs from fresh selection (sets were reused)", nmse(b, a, NV));
out:
    sift_session_destroy(s);
    free(a);
}

static void prefill_and_extrapolation(const model_run *t, float *outs)
{
    float *a = malloc(2 * NV * sizeof(float)), *b = a + NV;
    sift_session_config dense = base_config(512), sparse = base_config(512);
    dense.chunk = sparse.chunk = 32;
    sparse.policy = SIFT_POLICY_TOKENSELECT;
    sparse.sparse_prefill = 1;
    sparse.budget = 512; /* keeps everything */
    RUN_OK(run(t, &dense, 0, 300, 0, a, NULL), "dense prefill");
    RUN_OK(run(t, &sparse, 0, 300, 0, b, NULL), "sparse prefill, k large");
    check(nmse(a, b, NV) <= 1e-12, t->name, t->bname, "sparse prefill keeping every token = dense prefill", nmse(a, b, NV));
    sparse.budget = 24;
    RUN_OK(run(t, &sparse, 0, 300, 0, b, NULL), "sparse prefill, k 24");
    check(nmse(a, b, NV) < 1.0, t->name, t->bname, "sparse prefill S4 W16 k24: logits near dense (NMSE)", nmse(a, b, NV));
    memcpy(outs + OUT_SPARSE * NV, b, NV * sizeof(float));

    /* every token selected: positions by rank are the positions, so extrapolation = dense */
    sift_session_config d32 = base_config(640), x = base_config(640);
    d32.kv_type = x.kv_type = SIFT_F32;
    x.policy = SIFT_POLICY_TOKENSELECT;
    x.extrapolate = 1;
    x.budget = 640;
    RUN_OK(run(t, &d32, 0, 100, 3, a, NULL), "dense, f32 cache");
    RUN_OK(run(t, &x, 0, 100, 3, b, NULL), "extrapolation keeping every token");
    check(nmse(a, b, NV) <= 1e-6, t->name, t->bname, "extrapolation keeping every token = dense (f32 cache)", nmse(a, b, NV));
    x.budget = 24;
    /* extrapolation prefills token by token (600 tokens took lavapipe 40-50 s a model): 300 */
    RUN_OK(run(t, &x, 0, 300, 4, b, NULL), "extrapolation, 304 tokens");
    check(all_finite(b, NV), t->name, t->bname, "extrapolation over 304 tokens: finite logits", 0.0);
    x.policy = SIFT_POLICY_STREAMING;
    RUN_OK(run(t, &x, 0, 100, 4, b, NULL), "extrapolation, streaming");
    check(all_finite(b, NV), t->name, t->bname, "extrapolation with streaming: finite logits", 0.0);
    sift_session_config bad = x;
    bad.policy = SIFT_POLICY_H2O;
    sift_session *s = NULL;
    const sift_status st = sift_session_create(t->m, &bad, &s);
    check(st == SIFT_E_UNSUPPORTED && !s, t->name, t->bname, "extrapolation with h2o: SIFT_E_UNSUPPORTED", (double)st);
out:
    free(a);
}

static void policies(const model_run *t)
{
    float *a = malloc(NV * sizeof(float));
    sift_predictor *pred = NULL; /* butler's: random weights, what it selects does not matter here */
    for (int p = 0; p < SIFT_POLICY_COUNT; p++) {
        sift_session_config c = base_config(256);
        c.policy = (sift_policy)p;
        char what[96];
        snprintf(what, sizeof what, "policy %s: 80 + 10 steps, finite logits", sift_policy_name((sift_policy)p));
        if (p == SIFT_POLICY_BUTLER) {
            RUN_OK(sift_predictor_random(t->m, 16, 3, &pred), "a random predictor");
            c.predictor = pred;
            c.predict_interval = 2;
            c.neighbor_fetch = 1;
        }
        RUN_OK(run(t, &c, 0, 80, 10, a, NULL), what);
        check(all_finite(a, NV), t->name, t->bname, what, 0.0);
    }
out:
    sift_predictor_destroy(pred);
    free(a);
}

/* eval_mode's attention-quality measure: each decode step adds layers x query heads measures while
 * on, none while off, and the logits are the same either way; outside eval_mode it cannot be
 * turned on. */
static void quality_measure(const model_run *t)
{
    float *on = malloc(2 * NV * sizeof(float)), *off = on + NV;
    sift_session *s = NULL;
    sift_session_config c = base_config(256);
    c.eval_mode = 1;
    double recall, err;
    int64_t n0, n1, n2;
    RUN_OK(run(t, &c, 0, 80, 3, on, &s), "eval_mode, 80 + 3 steps measured");
    RUN_OK(sift_session_attention_quality(s, &recall, &err, &n0), "quality");
    const int64_t per_step = (int64_t)t->info.n_layers * t->info.n_heads;
    check(n0 == 3 * per_step, t->name, t->bname, "eval_mode: 3 measured steps count layers x heads each", (double)n0);
    RUN_OK(sift_session_rewind(s, 0, 80), "rewind");
    RUN_OK(sift_session_set_attention_quality(s, 0), "measure off");
    for (int i = 0; i < 3; i++) RUN_OK(sift_session_eval(s, &t->toks[80 + i], 1, off), "a step unmeasured");
    RUN_OK(sift_session_attention_quality(s, &recall, &err, &n1), "quality");
    check(n1 == n0, t->name, t->bname, "eval_mode, measure off: 3 steps add no measure", (double)(n1 - n0));
    check(nmse(on, off, NV) == 0.0, t->name, t->bname, "eval_mode: the same logits measured or not", nmse(on, off, NV));
    RUN_OK(sift_session_set_attention_quality(s, 1), "measure on");
    RUN_OK(sift_session_eval(s, &t->toks[83], 1, off), "a step measured again");
    RUN_OK(sift_session_attention_quality(s, &recall, &err, &n2), "quality");
    check(n2 == n1 + per_step, t->name, t->bname, "eval_mode, measure on again: one step's measures", (double)(n2 - n1));
    sift_session_destroy(s);
    s = NULL;
    c.eval_mode = 0;
    RUN_OK(run(t, &c, 0, 8, 0, on, &s), "a session without eval_mode");
    check(sift_session_set_attention_quality(s, 1) == SIFT_E_INVALID, t->name, t->bname,
          "the measure cannot be turned on outside eval_mode", 0.0);
out:
    sift_session_destroy(s);
    free(on);
}

/* should_stop's state: it answers "stop" at its stop_at-th call (0: never). */
typedef struct {
    int calls, stop_at;
} stopper;
static int stop_when(void *user)
{
    stopper *st = user;
    return ++st->calls == st->stop_at;
}

static void cancelling(const model_run *t)
{
    float *a = malloc(2 * NV * sizeof(float)), *b = a + NV;
    sift_session *s = NULL;
    stopper stop = {0};
    sift_session_config c = base_config(256);
    RUN_OK(run(t, &c, 0, 200, 2, a, NULL), "never stopped: 200 tokens and 2 steps");
    c.should_stop = stop_when;
    c.should_stop_user = &stop;
    stop.stop_at = 3; /* chunks of 64: the third chunk, at 128 */
    RUN_OK(sift_session_create(t->m, &c, &s), "session");
    sift_status st = sift_session_eval(s, t->toks, 200, b);
    check(st == SIFT_E_CANCELLED && stop.calls == 3 && sift_session_pos(s) == 128, t->name, t->bname,
          "stopped before the third prefill chunk: SIFT_E_CANCELLED at position 128", (double)sift_session_pos(s));
    stop.stop_at = 0;
    RUN_OK(sift_session_eval(s, t->toks + 128, 72, NULL), "the rest of the prompt");
    stop = (stopper){.stop_at = 1};
    st = sift_session_eval(s, t->toks + 200, 1, b);
    check(st == SIFT_E_CANCELLED && sift_session_pos(s) == 200, t->name, t->bname,
          "a stopped decode step: SIFT_E_CANCELLED, the position unchanged", (double)sift_session_pos(s));
    stop.stop_at = 0;
    RUN_OK(sift_session_eval(s, t->toks + 200, 1, NULL), "decode step 1");
    RUN_OK(sift_session_eval(s, t->toks + 201, 1, b), "decode step 2");
    /* the same chunks and steps as the call never stopped, in the same kernels */
    check(nmse(a, b, NV) == 0.0, t->name, t->bname, "stopped, then fed the rest: the logits of a call never stopped",
          nmse(a, b, NV));
    sift_generate_config g = sift_generate_config_default();
    g.max_tokens = 8;
    g.add_bos = 0;
    int32_t prompt_ids[16];
    size_t n_prompt = 0;
    RUN_OK(sift_model_tokenize(t->m, " Once", 5, 0, prompt_ids, 16, &n_prompt), "the prompt's tokens");
    int64_t n_gen = -1;
    stop = (stopper){.stop_at = 3}; /* the prompt's one chunk, then the first step, then stop */
    const int64_t before = sift_session_pos(s);
    st = sift_session_generate(s, " Once", 5, &g, &n_gen, NULL);
    check(st == SIFT_E_CANCELLED && sift_session_pos(s) == before + (int64_t)n_prompt + 1, t->name, t->bname,
          "generate stopped by should_stop: SIFT_E_CANCELLED, the prompt and one step kept", (double)(sift_session_pos(s) - before));
out:
    sift_session_destroy(s);
    free(a);
}

/* One workload, every step's logits appended to out (rows of NV): two sequences in pages of 16;
 * sequence 0 prefills 20 tokens and decodes 40 alone (crossing pages), is rewound to 30 and decodes
 * 8 again; sequence 1 prefills 12; then 6 batched steps of both, 4 with their order swapped, and 5
 * of sequence 1 alone. *n_ahead: the steps that ran a graph built ahead. */
static sift_status ahead_workload(const model_run *t, const sift_session_config *cfg, float butler_reuse, float *out,
                                  int *rows, int64_t *n_ahead, int64_t reuse[2], sift_ahead_times *times)
{
    sift_session *s = NULL;
    sift_status st = sift_session_create(t->m, cfg, &s);
    if (st == SIFT_OK && butler_reuse <= 1.0f) st = sift_session_set_butler_reuse(s, butler_reuse);
    int r = 0;
    const int32_t *tk = t->toks;
    if (st == SIFT_OK) st = sift_session_eval_seq(s, 0, tk, 20, out + (size_t)r++ * NV);
    for (int i = 0; i < 40 && st == SIFT_OK; i++) st = sift_session_eval_seq(s, 0, tk + 20 + i, 1, out + (size_t)r++ * NV);
    if (st == SIFT_OK) st = sift_session_rewind(s, 0, 30);
    for (int i = 0; i < 8 && st == SIFT_OK; i++) st = sift_session_eval_seq(s, 0, tk + 200 + i, 1, out + (size_t)r++ * NV);
    if (st == SIFT_OK) st = sift_session_eval_seq(s, 1, tk + 300, 12, out + (size_t)r++ * NV);
    for (int i = 0; i < 10 && st == SIFT_OK; i++) {
        const int seqs[2] = {i < 6 ? 0 : 1, i < 6 ? 1 : 0};
        const int32_t two[2] = {tk[400 + i], tk[450 + i]};
        st = sift_session_decode_batch(s, 2, seqs, two, out + (size_t)r * NV);
        r += 2;
    }
    for (int i = 0; i < 5 && st == SIFT_OK; i++) st = sift_session_eval_seq(s, 1, tk + 500 + i, 1, out + (size_t)r++ * NV);
    *rows = r;
    *n_ahead = sift_session_steps_run_ahead(s);
    sift_session_ahead_times(s, times);
    if (st == SIFT_OK) st = sift_session_sel_cache_stats(s, -1, &reuse[0], &reuse[1]);
    sift_session_destroy(s);
    return st;
}

enum { AHEAD_ROWS = 1 + 40 + 8 + 1 + 20 + 5 };

static void running_ahead(const model_run *t)
{
    float *a = malloc(2 * AHEAD_ROWS * NV * sizeof(float)), *b = a + AHEAD_ROWS * NV;
    sift_predictor *pred = NULL;
    const char *const names[4] = {"dense", "tokenselect, Selection Cache 0.9", "butler, interval 2",
                                  "butler, decided by q' at 0.5, at most 4"};
    for (int p = 0; p < 4; p++) {
        sift_session_config c = base_config(128);
        c.n_seq = 2;
        if (p == 1) c.policy = SIFT_POLICY_TOKENSELECT, c.sel_cache = 0.9f;
        if (p >= 2) {
            if (!pred) RUN_OK(sift_predictor_random(t->m, 16, 3, &pred), "a random predictor");
            c.policy = SIFT_POLICY_BUTLER;
            c.predictor = pred;
            c.predict_interval = p == 2 ? 2 : 4;
        }
        const float butler_reuse = p == 3 ? 0.5f : SIFT_SEL_CACHE_OFF;
        int rows_a = 0, rows_b = 0;
        int64_t ahead_a = -1, ahead_b = -1;
        char what[120];
        setenv("SIFT_STEP_AHEAD", "0", 1);
        snprintf(what, sizeof what, "%s, steps built one by one", names[p]);
        int64_t reuse_a[2] = {0}, reuse_b[2] = {0};
        sift_ahead_times times_a, times_b;
        sift_status st = ahead_workload(t, &c, butler_reuse, a, &rows_a, &ahead_a, reuse_a, &times_a);
        unsetenv("SIFT_STEP_AHEAD");
        RUN_OK(st, what);
        snprintf(what, sizeof what, "%s, running ahead", names[p]);
        RUN_OK(ahead_workload(t, &c, butler_reuse, b, &rows_b, &ahead_b, reuse_b, &times_b), what);
        /* the same kernels on the same data: exact on the CPU; a GPU may replay a recording of
         * kernels it launched one by one, whose atomics may add in another order */
        const double e = nmse(a, b, (size_t)rows_a * NV), bound = strcmp(t->bname, "cpu") == 0 ? 0.0 : 1e-6;
        snprintf(what, sizeof what, "%s: running ahead = built one by one (%d steps' logits, NMSE)", names[p], rows_a);
        check(rows_a == AHEAD_ROWS && rows_b == rows_a && e <= bound, t->name, t->bname, what, e);
        snprintf(what, sizeof what, "%s: decode steps that ran the graph built ahead (of 63)", names[p]);
        check(ahead_b >= 55, t->name, t->bname, what, (double)ahead_b);
        snprintf(what, sizeof what, "%s: none with SIFT_STEP_AHEAD=0", names[p]);
        check(ahead_a == 0 && times_a.steps == 0 && times_a.build_us == 0.0, t->name, t->bname, what, (double)ahead_a);
        /* the next step's build is the engine's graph, the backend's plan and recording, and the
         * graph's creation around them: the two parts timed, and within the whole */
        snprintf(what, sizeof what, "%s: the build ahead's graph and prepare times within its whole (us)", names[p]);
        check(times_b.steps >= ahead_b && times_b.graph_us > 0.0 && times_b.prepare_us > 0.0 &&
                  times_b.graph_us + times_b.prepare_us <= times_b.build_us,
              t->name, t->bname, what, times_b.build_us);
        if (p == 3) { /* the device's decisions, the same either way */
            snprintf(what, sizeof what, "%s: %lld of %lld layer-steps reused, the same built one by one", names[p],
                     (long long)reuse_b[0], (long long)reuse_b[1]);
            check(reuse_a[0] == reuse_b[0] && reuse_a[1] == reuse_b[1] && reuse_b[1] > 0, t->name, t->bname, what,
                  (double)reuse_b[0]);
        }
    }
out:
    sift_predictor_destroy(pred);
    free(a);
}

/* The entry of op in a profile of n entries (NULL when the op never ran). */
static const sift_op_time *profile_entry(const sift_op_time *prof, int n, const char *op)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(prof[i].op, op)) return &prof[i];
    return NULL;
}

/* The per-stage profile of the same 2 dense decode steps (ops: their per-op profile, n_ops
 * entries): each (stage, op) row the forward pass labels (engine/forward.c) with its node count,
 * nothing else, sorted by time, and the rows of each op adding up to its per-op entry. */
static void profiling_stages(const model_run *t, const sift_session *s, const sift_op_time *ops, int n_ops)
{
    enum { MAX_ROWS = 128 };
    sift_stage_time rows[MAX_ROWS], first[2];
    int n = -1, m = -1;
    int64_t steps = -1;
    const int64_t layers = t->info.n_layers;
    RUN_OK(sift_session_profile_stages(s, rows, MAX_ROWS, &n, &steps), "stage profile of 2 steps");
    check(steps == 2, t->name, t->bname, "stage profile: 2 steps profiled", (double)steps);
    /* the dense decode step of profiling()'s comment, stage by stage */
    const struct {
        const char *stage, *op;
        int64_t per_step;
    } want[] = {{"embed", "get_rows", 1},         {"attn_norm", "rmsnorm", layers}, {"qkv", "matmul", layers},
                {"rope", "rope", layers},         {"kv_write", "kv_write", 2 * layers}, {"attention", "dense_attend", layers},
                {"o", "matmul", layers},          {"ffn_norm", "rmsnorm", layers}, {"gate_up", "matmul", layers},
                {"swiglu", "swiglu", layers},     {"down", "matmul", layers},     {"final_norm", "rmsnorm", 1},
                {"logits", "matmul", 1}};
    const int n_want = (int)(sizeof want / sizeof want[0]);
    check(n == n_want, t->name, t->bname, "stage profile of dense decode: 13 (stage, op) rows", (double)n);
    for (int i = 0; i < n_want; i++) {
        const sift_stage_time *e = NULL;
        for (int j = 0; j < n && j < MAX_ROWS && !e; j++)
            if (!strcmp(rows[j].stage, want[i].stage) && !strcmp(rows[j].op, want[i].op)) e = &rows[j];
        char what[96];
        snprintf(what, sizeof what, "stage profile: %s (%s) nodes = 2 steps x %lld", want[i].stage, want[i].op,
                 (long long)want[i].per_step);
        check(e && e->nodes == 2 * want[i].per_step && e->bytes > 0.0 && e->us >= 0.0, t->name, t->bname, what,
              e ? (double)e->nodes : -1.0);
    }
    bool sorted = true;
    for (int i = 1; i < n && i < MAX_ROWS; i++) sorted = sorted && rows[i - 1].us >= rows[i].us;
    check(sorted, t->name, t->bname, "stage profile: sorted by time, descending", n > 0 ? rows[0].us : 0.0);
    for (int i = 0; i < n_ops; i++) { /* each op's stages add up to its entry */
        int64_t nodes = 0;
        double us = 0.0, bytes = 0.0;
        for (int j = 0; j < n && j < MAX_ROWS; j++)
            if (!strcmp(rows[j].op, ops[i].op)) nodes += rows[j].nodes, us += rows[j].us, bytes += rows[j].bytes;
        char what[96];
        snprintf(what, sizeof what, "stage profile: %s's stages add up to its per-op nodes, us, bytes", ops[i].op);
        check(nodes == ops[i].nodes && bytes == ops[i].bytes && fabs(us - ops[i].us) <= 1e-9 * ops[i].us + 1e-9, t->name,
              t->bname, what, (double)nodes);
    }
    RUN_OK(sift_session_profile_stages(s, first, 2, &m, NULL), "stage profile, room for 2");
    check(m == n && !memcmp(first, rows, sizeof first), t->name, t->bname, "stage profile, room for 2: the first 2, count of all",
          (double)m);
    check(sift_session_profile_stages(s, NULL, 4, &m, NULL) == SIFT_E_INVALID &&
              sift_session_profile_stages(NULL, NULL, 0, &m, NULL) == SIFT_E_INVALID &&
              sift_session_profile_stages(s, rows, MAX_ROWS, NULL, NULL) == SIFT_E_INVALID,
          t->name, t->bname, "stage profile: null arguments refused with SIFT_E_INVALID", 0.0);
out:
    return;
}

/* The per-op profile of dense decode steps: each op's node count follows from the forward pass
 * (engine/forward.c), times and bytes are positive, entries come longest first, and turning
 * profiling off stops the counting and keeps the profile. */
static void profiling(const model_run *t)
{
    enum { MAX_OPS = 64 };
    sift_op_time prof[MAX_OPS], again[MAX_OPS];
    sift_session *s = NULL;
    const sift_session_config c = base_config(256);
    const int64_t layers = t->info.n_layers;
    int n = -1, m = -1;
    int64_t steps = -1;
    RUN_OK(sift_session_create(t->m, &c, &s), "session");
    RUN_OK(sift_session_eval(s, t->toks, 80, NULL), "prefill (not profiled)");
    RUN_OK(sift_session_profile(s, prof, MAX_OPS, &n, &steps), "profile before profiling");
    check(n == 0 && steps == 0, t->name, t->bname, "profile before profiling: empty", (double)n);
    RUN_OK(sift_session_set_profiling(s, 1), "profiling on");
    RUN_OK(sift_session_eval(s, &t->toks[80], 1, NULL), "profiled step 1");
    RUN_OK(sift_session_profile(s, prof, MAX_OPS, &n, &steps), "profile of 1 step");
    const sift_op_time *mm = profile_entry(prof, n, "matmul");
    const double matmul_bytes_1 = mm ? mm->bytes : 0.0;
    RUN_OK(sift_session_eval(s, &t->toks[81], 1, NULL), "profiled step 2");
    RUN_OK(sift_session_profile(s, prof, MAX_OPS, &n, &steps), "profile of 2 steps");
    check(steps == 2, t->name, t->bname, "profile: 2 steps profiled", (double)steps);
    /* a dense decode step: the embedding; per layer 2 norms, Q/K/V (one product: the test models
     * have no biases, so their Q/K/V weights are one matrix), one RoPE of q and k together, 2
     * cache writes, the attention, the output projection and the MLP (gate and up as one
     * product, swiglu, down), the residuals added as those two products' bias (no add nodes);
     * the final norm and the logits */
    const struct {
        const char *op;
        int64_t per_step;
    } want[] = {{"matmul", 4 * layers + 1}, {"rmsnorm", 2 * layers + 1}, {"rope", layers}, {"kv_write", 2 * layers},
                {"dense_attend", layers},   {"swiglu", layers},          {"get_rows", 1}};
    const int n_want = (int)(sizeof want / sizeof want[0]);
    check(n == n_want, t->name, t->bname, "profile of dense decode: 7 ops", (double)n);
    for (int i = 0; i < n_want; i++) {
        const sift_op_time *e = profile_entry(prof, n, want[i].op);
        char what[96];
        snprintf(what, sizeof what, "profile: %s nodes = 2 steps x %lld", want[i].op, (long long)want[i].per_step);
        check(e && e->nodes == 2 * want[i].per_step, t->name, t->bname, what, e ? (double)e->nodes : -1.0);
        snprintf(what, sizeof what, "profile: %s bytes > 0, time >= 0", want[i].op);
        check(e && e->bytes > 0.0 && e->us >= 0.0, t->name, t->bname, what, e ? e->bytes : -1.0);
    }
    mm = profile_entry(prof, n, "matmul");
    if (!mm) goto out;
    check(mm->us > 0.0, t->name, t->bname, "profile: matmul device time > 0 us", mm->us);
    /* each matmul moves its f32 input and output rows and its weights: more than the rows alone.
     * The rows of a layer: Q/K/V read E and write Hq D + 2 Hkv D; the output projection reads
     * Hq D and writes E; gate and up read E and write 2 F; down reads F and writes E. The logits
     * read E and write the vocabulary. */
    const sift_model_info *in = &t->info;
    const double e = in->n_embd, f = in->n_ff, qd = (double)in->n_heads * in->head_dim, kvd = (double)in->n_kv_heads * in->head_dim;
    const double layer_rows = (e + qd + 2 * kvd) + (qd + e) + (e + 2 * f) + (f + e);
    const double row_bytes = 4.0 * ((double)layers * layer_rows + e + in->n_vocab);
    check(mm->bytes > 2.0 * row_bytes, t->name, t->bname, "profile: matmul bytes > 2 steps of its rows (+ weights)",
          mm->bytes / (2.0 * row_bytes));
    check(mm->bytes == 2.0 * matmul_bytes_1, t->name, t->bname, "profile: matmul bytes of 2 steps = 2 x 1 step",
          mm->bytes / matmul_bytes_1);
    bool sorted = true;
    for (int i = 1; i < n; i++) sorted = sorted && prof[i - 1].us >= prof[i].us;
    check(sorted, t->name, t->bname, "profile: sorted by time, descending", prof[0].us);
    RUN_OK(sift_session_profile(s, again, 2, &m, NULL), "profile, room for 2");
    check(m == n && !memcmp(again, prof, 2 * sizeof *prof), t->name, t->bname, "profile, room for 2: the first 2, count of all",
          (double)m);
    profiling_stages(t, s, prof, n);
    /* off: the next step is not counted, the profile stays */
    RUN_OK(sift_session_set_profiling(s, 0), "profiling off");
    RUN_OK(sift_session_eval(s, &t->toks[82], 1, NULL), "step after profiling");
    RUN_OK(sift_session_profile(s, again, MAX_OPS, &m, &steps), "profile after off");
    check(steps == 2 && m == n && !memcmp(again, prof, (size_t)n * sizeof *prof), t->name, t->bname,
          "profiling off: a step later, the same 2-step profile", (double)steps);
    RUN_OK(sift_session_set_profiling(s, 1), "profiling on again");
    RUN_OK(sift_session_profile(s, again, MAX_OPS, &m, &steps), "profile after on");
    check(steps == 0 && m == 0, t->name, t->bname, "profiling on again: a new, empty profile", (double)m);
    RUN_OK(sift_session_profile_stages(s, NULL, 0, &m, &steps), "stage profile after on");
    check(steps == 0 && m == 0, t->name, t->bname, "profiling on again: a new, empty stage profile", (double)m);
    check(sift_session_profile(s, NULL, 4, &m, NULL) == SIFT_E_INVALID && sift_session_profile(NULL, NULL, 0, &m, NULL) == SIFT_E_INVALID &&
              sift_session_set_profiling(NULL, 1) == SIFT_E_INVALID,
          t->name, t->bname, "profile: null arguments refused with SIFT_E_INVALID", 0.0);
out:
    sift_session_destroy(s);
}

/* Synthetic contexts per sequence (benchmarks of batched decode): each call moves only its
 * sequence, a batched step then decodes over them, and bad sequences or sizes are refused. */
static void synthetic(const model_run *t)
{
    float *rows = malloc(2 * NV * sizeof(float));
    sift_session *s = NULL;
    sift_session_config c = base_config(256);
    c.n_seq = 2;
    RUN_OK(sift_session_create(t->m, &c, &s), "two sequences");
    RUN_OK(sift_session_fill_synthetic_seq(s, 1, 100, 7), "100 synthetic tokens in sequence 1");
    RUN_OK(sift_session_fill_synthetic(s, 40, 8), "40 synthetic tokens in sequence 0");
    check(sift_session_seq_pos(s, 0) == 40 && sift_session_seq_pos(s, 1) == 100, t->name, t->bname,
          "synthetic fill: sequence 0 at 40, sequence 1 at 100", (double)sift_session_seq_pos(s, 1));
    const int seqs[2] = {0, 1};
    const int32_t tk[2] = {t->toks[1], t->toks[2]};
    RUN_OK(sift_session_decode_batch(s, 2, seqs, tk, rows), "batched step over synthetic contexts");
    check(all_finite(rows, 2 * NV) && sift_session_seq_pos(s, 1) == 101, t->name, t->bname,
          "batched step over synthetic contexts: finite logits, sequence 1 at 101", (double)sift_session_seq_pos(s, 1));
    const sift_status bad_seq = sift_session_fill_synthetic_seq(s, 2, 1, 7);
    const sift_status too_many = sift_session_fill_synthetic_seq(s, 1, 256, 7);
    check(bad_seq == SIFT_E_INVALID && too_many == SIFT_E_LIMIT && sift_session_seq_pos(s, 1) == 101, t->name, t->bname,
          "synthetic fill: no sequence 2 (SIFT_E_INVALID), 256 more do not fit (SIFT_E_LIMIT)", (double)too_many);
    /* a count of 2^63 or more (a caller's len - 1 with len 0) is refused before a token is read: an
     * invalid token right after the two valid ones would make a read of them SIFT_E_INVALID */
    const int32_t guarded[3] = {t->toks[1], t->toks[2], -1};
    const sift_status huge = sift_session_eval_seq(s, 1, guarded, SIZE_MAX, NULL);
    const sift_status half = sift_session_eval(s, guarded, (size_t)1 << 63, NULL);
    check(huge == SIFT_E_LIMIT && half == SIFT_E_LIMIT && sift_session_seq_pos(s, 0) == 41 && sift_session_seq_pos(s, 1) == 101,
          t->name, t->bname, "eval of SIZE_MAX and 2^63 tokens: SIFT_E_LIMIT, nothing read or fed", (double)huge);
out:
    sift_session_destroy(s);
    free(rows);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("SIFT_VULKAN_VALIDATION", "1", 0);
    int models = 0;
    for (int a = 1; a < argc; a++) {
        if (!test_model_exists(argv[a])) continue;
        models++;
        float *ref = NULL;
        const char *name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        for (int kind = 0; kind < SIFT_BACKEND_COUNT; kind++) {
            /* the CPU runs whatever SIFT_TEST_BACKENDS says: it is the others' reference */
            sift_context *ctx = test_context_open((sift_backend_kind)kind, name, kind == SIFT_BACKEND_CPU);
            if (!ctx) continue;
            model_run t = {.name = name, .bname = sift_backend_kind_name((sift_backend_kind)kind)};
            test_case_begin(name, t.bname);
            if (sift_model_load(ctx, argv[a], &t.m) != SIFT_OK) {
                check(false, name, t.bname, sift_last_error(), 0);
                test_context_done(ctx);
                continue;
            }
            sift_model_get_info(t.m, &t.info);
            for (int i = 0; i < 700; i++) t.toks[i] = i == 0 && t.info.bos >= 0 ? t.info.bos : 3 + (int32_t)((i * 7919u) % (uint32_t)(t.info.n_vocab - 3));
            float *outs = calloc((size_t)OUT_COUNT * (size_t)t.info.n_vocab, sizeof(float));
            paging(&t, outs);
            sel_cache(&t, outs);
            prefill_and_extrapolation(&t, outs);
            policies(&t);
            quality_measure(&t);
            cancelling(&t);
            /* building ahead is the engine's, whatever the model: the first model's 600 steps show it
             * (a second model's cost lavapipe a minute) */
            if (models == 1) running_ahead(&t);
            profiling(&t);
            synthetic(&t);
            if (kind == SIFT_BACKEND_CPU) {
                ref = outs;
            } else if (ref) {
                for (int o = 0; o < OUT_COUNT; o++) {
                    char what[96];
                    snprintf(what, sizeof what, "%s: logits vs cpu (NMSE)", out_names[o]);
                    const double e = nmse(ref + (size_t)o * t.info.n_vocab, outs + (size_t)o * t.info.n_vocab, (size_t)t.info.n_vocab);
                    check(e <= 1e-3, name, t.bname, what, e);
                }
                free(outs);
            } else {
                free(outs);
            }
            sift_model_destroy(t.m);
            test_context_done(ctx);
        }
        free(ref);
    }
    if (models == 0) test_note("", "skipped: no model found");
    return test_summary("session", NULL);
}
