/* The attention builder's graphs (sift_attn_graph), as the session runs them: dense, TokenSelect
 * (both votes, the Selection Cache over several steps), streaming, the caller's lists, length
 * extrapolation, and prefill chunks dense and sparse. Each backend against the CPU reference. */
#include "registry.h"

typedef struct {
    sift_attn_mode mode;
    sift_vote_mode vote;
    int hq, hkv, d;
    sift_dtype kv;
    int64_t n, sink, window, budget; /* decode: N; prefill: the positions before the chunk */
    int64_t tokens;                  /* 0: a decode step; T: a prefill chunk of T queries */
    bool cache;                      /* the Selection Cache, theta -1: the first step selects, the rest reuse */
    bool extrapolate;
} attn_case;

enum { STEPS = 3 }; /* decode steps per case; the query moves a little between them */

typedef struct {
    host_tensor q[STEPS], k, v, lists;
} attn_inputs;

static sift_select_params sel_of(const attn_case *c)
{
    return (sift_select_params){.n_ctx = c->n, .sink = c->sink, .window = c->window, .budget = c->budget};
}

/* Sorted distinct positions per KV head: the sink, `chosen` random candidates, the window (as a
 * host policy writes them). */
static void random_lists(const attn_case *c, host_tensor *h)
{
    const sift_select_params sel = sel_of(c);
    const int64_t count = sift_select_count(&sel), cand = sift_select_candidates(&sel);
    const int64_t sink = c->sink < c->n ? c->sink : c->n, chosen = c->budget < cand ? c->budget : cand;
    const int64_t win_begin = c->n - c->window > sink ? c->n - c->window : sink;
    *h = host_new(SIFT_I32, 2, (int64_t[]){c->hkv, count});
    for (int64_t l = 0; l < c->hkv; l++) {
        int32_t *out = h->i + l * count;
        int64_t o = 0, left = chosen;
        for (int64_t j = 0; j < sink; j++) out[o++] = (int32_t)j;
        for (int64_t j = 0; j < cand; j++) /* selection sampling: exactly `chosen`, ascending */
            if ((double)rng_uniform() * (double)(cand - j) < (double)left) out[o++] = (int32_t)(c->sink + j), left--;
        for (int64_t j = win_begin; j < c->n; j++) out[o++] = (int32_t)j;
    }
}

/* k candidates (every fifth from S on) get keys along their group's mean query, so that the top k
 * stand well apart from the rest: the backends' votes, summed in different orders, then pick the
 * same set, and the outputs compare to f32 rounding. Values stay exact in f16 (multiples of 1/256). */
static void plant_keys(const attn_case *c, attn_inputs *in)
{
    const int64_t ncap = c->n + c->tokens, group = c->hq / c->hkv;
    const sift_select_params sel = sel_of(c);
    const int64_t cand = sift_select_candidates(&sel);
    const float *q = in->q[0].f; /* a prefill chunk: its first row */
    for (int64_t i = 0; i < c->budget && 5 * i < cand; i++) {
        const int64_t pos = c->sink + 5 * i;
        for (int64_t g = 0; g < c->hkv; g++) {
            float *row = in->k.f + (g * ncap + pos) * c->d;
            for (int64_t e = 0; e < c->d; e++) {
                float m = 0.0f;
                for (int64_t h = g * group; h < (g + 1) * group; h++) m += q[h * c->d + e];
                row[e] = fminf(fmaxf(roundf(m / (float)group * 0.5f * 256.0f), -2047.0f), 2047.0f) / 256.0f;
            }
        }
    }
    if (in->k.h) sift_f32_to_f16(in->k.h, in->k.f, in->k.n);
}

static void make_attn_inputs(const attn_case *c, attn_inputs *in)
{
    memset(in, 0, sizeof *in);
    const int64_t ncap = c->n + c->tokens;
    const int64_t qshape[3] = {c->tokens, c->hq, c->d}, kvshape[3] = {c->hkv, ncap, c->d};
    in->q[0] = c->tokens ? host_random(SIFT_F32, 3, qshape, 1.0f) : host_random(SIFT_F32, 2, qshape + 1, 1.0f);
    for (int s = 1; s < STEPS; s++) {
        in->q[s] = host_new(SIFT_F32, in->q[0].ndim, in->q[0].shape);
        for (size_t j = 0; j < in->q[s].n; j++) in->q[s].f[j] = in->q[s - 1].f[j] + 0.05f * rng_normal();
    }
    in->k = host_random(c->kv, 3, kvshape, 1.0f);
    in->v = host_random(c->kv, 3, kvshape, 1.0f);
    plant_keys(c, in);
    if (c->mode == SIFT_ATTN_LISTS) random_lists(c, &in->lists);
}

static void free_attn_inputs(attn_inputs *in)
{
    for (int s = 0; s < STEPS; s++) host_free(&in->q[s]);
    host_free(&in->k);
    host_free(&in->v);
    host_free(&in->lists);
}

/* Runs the case's graph on b: out[step] for each step, and the Selection Cache's hits. */
static bool run_attn(const backend *b, const attn_case *c, const attn_inputs *in, float *out, size_t n_out, float *hits,
                     const char *cname)
{
    const char *bname = sift_backend_kind_name(b->kind);
    const int steps = c->tokens ? 1 : STEPS;
    const sift_select_params sel = sel_of(c);
    const int64_t lists = c->vote == SIFT_VOTE_KVHEAD_MAX ? c->hkv : 1, sn = (int64_t)c->hq * c->d + SIFT_SEL_CACHE_EXTRA;
    const sift_rope_params rope = {.n_rot = c->d, .base = 10000.0f, .mode = SIFT_ROPE_ADJACENT};
    sift_tensor *q = NULL, *k = NULL, *v = NULL, *o = NULL, *lt = NULL, *state = NULL, *kept = NULL;
    sift_graph *g = NULL;
    bool ok = false;
    CHECK_OK(upload(b->ctx, &in->q[0], &q), cname, bname);
    CHECK_OK(upload(b->ctx, &in->k, &k), cname, bname);
    CHECK_OK(upload(b->ctx, &in->v, &v), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, in->q[0].ndim, in->q[0].shape, &o), cname, bname);
    sift_attn_config cfg = {.n_q_heads = c->hq, .n_kv_heads = c->hkv, .head_dim = c->d, .sel = sel, .vote = c->vote,
                            .mode = c->mode, .extrapolate = c->extrapolate ? &rope : NULL};
    if (c->mode == SIFT_ATTN_LISTS) {
        CHECK_OK(upload(b->ctx, &in->lists, &lt), cname, bname);
        cfg.lists = lt;
    }
    if (c->cache) {
        float *zeros = calloc((size_t)sn, sizeof *zeros);
        if (!zeros) exit(2);
        sift_status s = sift_tensor_create(b->ctx, SIFT_F32, 1, &sn, &state);
        if (s == SIFT_OK) s = sift_tensor_write(state, 0, zeros, (size_t)sn * sizeof *zeros);
        free(zeros);
        CHECK_OK(s, cname, bname);
        CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){lists, sift_select_count(&sel)}, &kept), cname, bname);
        cfg.sel_cache = -1.0f;
        cfg.sel_state = state;
        cfg.sel_indices = kept;
    }
    CHECK_OK(sift_attn_graph(b->ctx, &cfg, q, k, v, o, &g, NULL), cname, bname);
    for (int s = 0; s < steps; s++) {
        CHECK_OK(sift_tensor_write(q, 0, in->q[s].f, in->q[s].n * 4), cname, bname);
        CHECK_OK(sift_graph_compute(g), cname, bname);
        CHECK_OK(sift_tensor_read(o, 0, out + (size_t)s * n_out, n_out * 4), cname, bname);
    }
    *hits = 0.0f;
    if (state) {
        float extra[SIFT_SEL_CACHE_EXTRA];
        CHECK_OK(sift_tensor_read(state, (size_t)(sn - SIFT_SEL_CACHE_EXTRA) * 4, extra, sizeof extra), cname, bname);
        *hits = extra[SIFT_SEL_CACHE_HITS];
    }
    ok = true;
out:
    sift_graph_destroy(g);
    sift_tensor_destroy(q);
    sift_tensor_destroy(k);
    sift_tensor_destroy(v);
    sift_tensor_destroy(o);
    sift_tensor_destroy(lt);
    sift_tensor_destroy(state);
    sift_tensor_destroy(kept);
    return ok;
}

static void attn_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const attn_case *c = cc->params;
    attn_inputs in;
    make_attn_inputs(c, &in);
    const size_t n_out = in.q[0].n, total = n_out * STEPS;
    float *want = calloc(total, 4), *got = calloc(total, 4), want_hits = 0.0f, got_hits = 0.0f;
    if (!want || !got) exit(2);
    if (run_attn(ref, c, &in, want, n_out, &want_hits, cc->name)) {
        const int steps = c->tokens ? 1 : STEPS;
        if (c->cache) /* theta -1 with every step full: the first selects, every later one reuses */
            report(cc->name, "cpu", "cache hits", want_hits, steps - 1, want_hits == (float)(steps - 1));
        if (dut == ref) {
            check_reference_finite(cc->name, want, n_out * (size_t)steps);
        } else if (run_attn(dut, c, &in, got, n_out, &got_hits, cc->name)) {
            const char *bname = sift_backend_kind_name(dut->kind);
            compare_floats(cc->name, bname, want, got, n_out * (size_t)steps, 1e-6);
            if (c->cache) report(cc->name, bname, "cache hits", got_hits, want_hits, got_hits == want_hits);
        }
    }
    free(want);
    free(got);
    free_attn_inputs(&in);
}

static void add(const attn_case *c, const char *what)
{
    char name[160];
    snprintf(name, sizeof name, "builder %-26s H=%d/%d D=%d %s N=%lld S=%lld W=%lld k=%lld%s", what, c->hq, c->hkv, c->d,
             sift_dtype_name(c->kv), (long long)c->n, (long long)c->sink, (long long)c->window, (long long)c->budget,
             c->tokens ? " (prefill)" : "");
    registry_add("attn", name, attn_check, NULL, c, sizeof *c);
}

void cases_attn(const suite_options *o)
{
    (void)o;
    enum { SUM = SIFT_VOTE_SOFTMAX_SUM, MAX = SIFT_VOTE_KVHEAD_MAX };
    /* each a change of the base case: 8/2 heads, D 64, f16, N 700, S 4, W 32, k 64 */
    static const struct {
        const char *what;
        sift_attn_mode mode;
        int vote;
        sift_dtype kv;
        int64_t n, tokens;
        bool cache, extrapolate;
    } variants[] = {
        {"dense", SIFT_ATTN_DENSE, SUM, SIFT_F16, 700, 0, false, false},
        {"tokenselect", SIFT_ATTN_SELECT, SUM, SIFT_F16, 700, 0, false, false},
        {"tokenselect", SIFT_ATTN_SELECT, SUM, SIFT_F32, 700, 0, false, false},
        {"tokenselect, kv-head max", SIFT_ATTN_SELECT, MAX, SIFT_F16, 700, 0, false, false},
        {"tokenselect + selection cache", SIFT_ATTN_SELECT, SUM, SIFT_F16, 700, 0, true, false},
        {"kv-head max + selection cache", SIFT_ATTN_SELECT, MAX, SIFT_F16, 700, 0, true, false},
        {"streaming", SIFT_ATTN_STREAMING, SUM, SIFT_F16, 700, 0, false, false},
        {"streaming, all fits", SIFT_ATTN_STREAMING, SUM, SIFT_F16, 90, 0, false, false},
        {"lists", SIFT_ATTN_LISTS, SUM, SIFT_F16, 700, 0, false, false},
        {"tokenselect + extrapolation", SIFT_ATTN_SELECT, SUM, SIFT_F16, 700, 0, false, true},
        {"streaming + extrapolation", SIFT_ATTN_STREAMING, SUM, SIFT_F16, 700, 0, false, true},
        {"causal", SIFT_ATTN_DENSE, SUM, SIFT_F16, 700, 16, false, false},
        {"sparse", SIFT_ATTN_SELECT, SUM, SIFT_F16, 700, 16, false, false},
        {"sparse, few candidates (dense)", SIFT_ATTN_SELECT, SUM, SIFT_F16, 60, 16, false, false},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        const attn_case c = {.mode = variants[i].mode, .vote = (sift_vote_mode)variants[i].vote, .hq = 8, .hkv = 2, .d = 64,
                             .kv = variants[i].kv, .n = variants[i].n, .sink = 4, .window = 32, .budget = 64,
                             .tokens = variants[i].tokens, .cache = variants[i].cache, .extrapolate = variants[i].extrapolate};
        add(&c, variants[i].what);
    }
}
