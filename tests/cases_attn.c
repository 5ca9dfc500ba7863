/* The attention builder's graphs (sift_attn_graph), as the session runs them: dense, TokenSelect
 * (both votes, the Selection Cache over several steps), streaming, the caller's lists, length
 * extrapolation, prefill chunks dense and sparse, and TokenButler's (the fixed interval's reuse,
 * and the reuse decided on the device by its predicted query). Each backend against the CPU
 * reference. */
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
    sift_attn_config cfg = sift_attn_config_default();
    cfg.n_q_heads = c->hq;
    cfg.n_kv_heads = c->hkv;
    cfg.head_dim = c->d;
    cfg.sel = sel;
    cfg.vote = c->vote;
    cfg.mode = c->mode;
    cfg.extrapolate = c->extrapolate ? &rope : NULL;
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

/* ---- TokenButler: the butler scorer's graphs --------------------------------------------------- */

typedef struct {
    int hq, hkv, d, dk;
    int64_t n, sink, window, budget;
    bool neighbors; /* neighbour fetch */
    bool paged;     /* K, V and the projected keys through one shuffled page table */
} butler_case;

enum { BUTLER_PAGE = 64 };

/* A tensor [Hkv][rows][d] as the case keeps it: plain, or a paged view of a pool whose pages are
 * the table's (shuffled) ones. *pool and *table are what to free besides the view. */
static sift_status place_kv(sift_context *ctx, const butler_case *c, const host_tensor *h, sift_tensor **view,
                            sift_tensor **pool, sift_tensor **table)
{
    *pool = *table = NULL;
    if (!c->paged) return upload(ctx, h, view);
    const int64_t rows = h->shape[1], pages = (rows + BUTLER_PAGE - 1) / BUTLER_PAGE, d = h->shape[2];
    const int64_t pool_pages = pages + 2, hkv = h->shape[0];
    const size_t elt = sift_dtype_size(h->dtype);
    int32_t *map = malloc((size_t)pages * sizeof *map);
    unsigned char *bytes = calloc((size_t)(hkv * pool_pages * BUTLER_PAGE * d), elt);
    if (!map || !bytes) exit(2);
    for (int64_t p = 0; p < pages; p++) map[p] = (int32_t)(pool_pages - 1 - p); /* reversed; pages 0 and 1 unused */
    const unsigned char *src = h->h ? (const unsigned char *)h->h : (const unsigned char *)h->f;
    for (int64_t g = 0; g < hkv; g++)
        for (int64_t j = 0; j < rows; j++)
            memcpy(bytes + ((g * pool_pages * BUTLER_PAGE) + map[j / BUTLER_PAGE] * BUTLER_PAGE + j % BUTLER_PAGE) * d * elt,
                   src + (g * rows + j) * d * elt, (size_t)d * elt);
    sift_status s = sift_tensor_create(ctx, h->dtype, 3, (int64_t[]){hkv, pool_pages * BUTLER_PAGE, d}, pool);
    if (s == SIFT_OK) s = sift_tensor_write(*pool, 0, bytes, (size_t)(hkv * pool_pages * BUTLER_PAGE * d) * elt);
    if (s == SIFT_OK) s = sift_tensor_create(ctx, SIFT_I32, 1, &pages, table);
    if (s == SIFT_OK) s = sift_tensor_write(*table, 0, map, (size_t)pages * sizeof *map);
    if (s == SIFT_OK) s = sift_tensor_paged_view(*pool, *table, BUTLER_PAGE, view);
    free(map);
    free(bytes);
    return s;
}

/* Runs one selecting step (lists kept), then STEPS - 1 steps that reuse the kept lists, the
 * query moving; out[step][Hq][D]. With dense set, the dense graph instead (same queries). */
static bool run_butler(const backend *b, const butler_case *c, const host_tensor *q, const host_tensor *qp,
                       const host_tensor *k, const host_tensor *v, const host_tensor *kp, bool dense, float *out,
                       int32_t *lists, const char *cname)
{
    const char *bname = sift_backend_kind_name(b->kind);
    const sift_select_params sel = {.n_ctx = c->n, .sink = c->sink, .window = c->window, .budget = c->budget};
    const int64_t chosen = c->budget < sift_select_candidates(&sel) ? c->budget : sift_select_candidates(&sel);
    const int64_t count = sift_select_count(&sel) + (c->neighbors ? chosen : 0);
    sift_tensor *qt = NULL, *qpt = NULL, *kt = NULL, *vt = NULL, *kpt = NULL, *o = NULL, *kept = NULL;
    sift_tensor *pools[3] = {0}, *tables[3] = {0};
    sift_graph *g[2] = {0};
    bool ok = false;
    const size_t n_out = (size_t)c->hq * (size_t)c->d;
    CHECK_OK(upload(b->ctx, &q[0], &qt), cname, bname);
    CHECK_OK(upload(b->ctx, &qp[0], &qpt), cname, bname);
    CHECK_OK(place_kv(b->ctx, c, k, &kt, &pools[0], &tables[0]), cname, bname);
    CHECK_OK(place_kv(b->ctx, c, v, &vt, &pools[1], &tables[1]), cname, bname);
    CHECK_OK(place_kv(b->ctx, c, kp, &kpt, &pools[2], &tables[2]), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->d}, &o), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){c->hkv, count}, &kept), cname, bname);
    sift_attn_config cfg = sift_attn_config_default();
    cfg.n_q_heads = c->hq;
    cfg.n_kv_heads = c->hkv;
    cfg.head_dim = c->d;
    cfg.sel = sel;
    cfg.mode = dense ? SIFT_ATTN_DENSE : SIFT_ATTN_SELECT;
    cfg.scorer = SIFT_SCORER_BUTLER;
    cfg.score_q = qpt;
    cfg.score_k = kpt;
    cfg.neighbor_fetch = c->neighbors;
    cfg.sel_indices = kept;
    CHECK_OK(sift_attn_graph(b->ctx, &cfg, qt, kt, vt, o, &g[0], NULL), cname, bname);
    cfg.reuse = 1;
    CHECK_OK(sift_attn_graph(b->ctx, &cfg, qt, kt, vt, o, &g[1], NULL), cname, bname);
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(sift_tensor_write(qt, 0, q[s].f, q[s].n * 4), cname, bname);
        CHECK_OK(sift_tensor_write(qpt, 0, qp[s].f, qp[s].n * 4), cname, bname);
        CHECK_OK(sift_graph_compute(g[s == 0 ? 0 : 1]), cname, bname);
        CHECK_OK(sift_tensor_read(o, 0, out + (size_t)s * n_out, n_out * 4), cname, bname);
    }
    if (lists && !dense) CHECK_OK(sift_tensor_read(kept, 0, lists, (size_t)(c->hkv * count) * 4), cname, bname);
    ok = true;
out:
    sift_graph_destroy(g[0]);
    sift_graph_destroy(g[1]);
    sift_tensor_destroy(qt), sift_tensor_destroy(qpt), sift_tensor_destroy(kt), sift_tensor_destroy(vt);
    sift_tensor_destroy(kpt), sift_tensor_destroy(o), sift_tensor_destroy(kept);
    for (int i = 0; i < 3; i++) sift_tensor_destroy(pools[i]), sift_tensor_destroy(tables[i]);
    return ok;
}

/* Each backend against the CPU, index lists compared exactly (planted projected keys keep the
 * top k well apart); with S + W + k >= N, the butler graph equals the dense one on every backend. */
static void butler_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const butler_case *c = cc->params;
    const int64_t ncap = c->n, group = c->hq / c->hkv;
    host_tensor q[STEPS], qp[STEPS];
    q[0] = host_random(SIFT_F32, 2, (int64_t[]){c->hq, c->d}, 1.0f);
    qp[0] = host_random(SIFT_F32, 2, (int64_t[]){c->hq, c->dk}, 1.0f);
    for (int s = 1; s < STEPS; s++) {
        q[s] = host_new(SIFT_F32, 2, q[0].shape);
        qp[s] = host_new(SIFT_F32, 2, qp[0].shape);
        for (size_t j = 0; j < q[s].n; j++) q[s].f[j] = q[s - 1].f[j] + 0.05f * rng_normal();
        for (size_t j = 0; j < qp[s].n; j++) qp[s].f[j] = qp[s - 1].f[j] + 0.05f * rng_normal();
    }
    host_tensor k = host_random(SIFT_F16, 3, (int64_t[]){c->hkv, ncap, c->d}, 1.0f);
    host_tensor v = host_random(SIFT_F16, 3, (int64_t[]){c->hkv, ncap, c->d}, 1.0f);
    host_tensor kp = host_random(SIFT_F16, 3, (int64_t[]){c->hkv, ncap, c->dk}, 0.25f);
    /* planted: every fourth candidate (pairs of neighbours among them) points along its group's mean q' */
    for (int64_t i = 0; i < c->budget && c->sink + 4 * i < c->n - c->window; i++)
        for (int64_t g = 0; g < c->hkv; g++) {
            float *row = kp.f + (g * ncap + c->sink + 4 * i) * c->dk;
            for (int64_t e = 0; e < c->dk; e++) {
                float m = 0.0f;
                for (int64_t h = g * group; h < (g + 1) * group; h++) m += qp[0].f[h * c->dk + e];
                row[e] = fminf(fmaxf(roundf(m / (float)group * 256.0f), -2047.0f), 2047.0f) / 256.0f;
            }
        }
    sift_f32_to_f16(kp.h, kp.f, kp.n);
    const sift_select_params sel = {.n_ctx = c->n, .sink = c->sink, .window = c->window, .budget = c->budget};
    const int64_t cand = sift_select_candidates(&sel), chosen = c->budget < cand ? c->budget : cand;
    const size_t n_out = (size_t)c->hq * (size_t)c->d, n_idx = (size_t)(c->hkv * (sift_select_count(&sel) + (c->neighbors ? chosen : 0)));
    float *want = calloc(n_out * STEPS, 4), *got = calloc(n_out * STEPS, 4);
    int32_t *iw = calloc(n_idx + 1, 4), *ig = calloc(n_idx + 1, 4);
    if (!want || !got || !iw || !ig) exit(2);
    const bool fits = c->sink + c->window + c->budget >= c->n;
    if (run_butler(ref, c, q, qp, &k, &v, &kp, false, want, iw, cc->name)) {
        if (fits) { /* on the backend under test: butler == dense */
            if (run_butler(dut, c, q, qp, &k, &v, &kp, false, got, NULL, cc->name)) {
                float *dense = calloc(n_out * STEPS, 4);
                if (!dense) exit(2);
                if (run_butler(dut, c, q, qp, &k, &v, &kp, true, dense, NULL, cc->name))
                    compare_floats(cc->name, sift_backend_kind_name(dut->kind), dense, got, n_out * STEPS, 1e-7);
                free(dense);
            }
        } else if (dut == ref) {
            check_reference_finite(cc->name, want, n_out * STEPS);
        } else if (run_butler(dut, c, q, qp, &k, &v, &kp, false, got, ig, cc->name)) {
            const char *bname = sift_backend_kind_name(dut->kind);
            size_t differ = 0;
            for (size_t i = 0; i < n_idx; i++) differ += iw[i] != ig[i];
            report(cc->name, bname, "idx-diff", (double)differ, 0, differ == 0);
            compare_floats(cc->name, bname, want, got, n_out * STEPS, 1e-6);
        }
    }
    free(want), free(got), free(iw), free(ig);
    for (int s = 0; s < STEPS; s++) host_free(&q[s]), host_free(&qp[s]);
    host_free(&k), host_free(&v), host_free(&kp);
}

/* ---- TokenButler, the interval decided by the query -------------------------------------------- */

/* How one step of a schedule runs: the graphs of the fixed interval (select, reuse the kept lists),
 * or the check on q' deciding on the device (at theta 0.9, or at 1: a selection the interval forces). */
enum { AUTO_SELECT, AUTO_REUSE, AUTO_CHECK, AUTO_FORCED, AUTO_GRAPHS };
enum { AUTO_STEPS = 4 };

/* q'[s] of the steps: 0 random; 1 = 0 plus 1% noise (cos about 0.9999); 2 a new random one (cos
 * about 0); 3 = 2. Projected keys planted along each group's mean of q'0 (every fourth candidate)
 * and of q'2 (every fourth from the second): a selection at step 2 chooses others than step 0's. */
static void auto_inputs(const butler_case *c, host_tensor *q, host_tensor *qp, host_tensor *k, host_tensor *v, host_tensor *kp)
{
    const int64_t group = c->hq / c->hkv;
    q[0] = host_random(SIFT_F32, 2, (int64_t[]){c->hq, c->d}, 1.0f);
    qp[0] = host_random(SIFT_F32, 2, (int64_t[]){c->hq, c->dk}, 1.0f);
    qp[2] = host_random(SIFT_F32, 2, (int64_t[]){c->hq, c->dk}, 1.0f);
    for (int s = 1; s < AUTO_STEPS; s++) {
        q[s] = host_random(SIFT_F32, 2, q[0].shape, 1.0f);
        if (s == 2) continue;
        qp[s] = host_new(SIFT_F32, 2, qp[0].shape);
        for (size_t j = 0; j < qp[s].n; j++) qp[s].f[j] = qp[s - 1].f[j] + (s == 1 ? 0.01f * rng_normal() : 0.0f);
    }
    *k = host_random(SIFT_F16, 3, (int64_t[]){c->hkv, c->n, c->d}, 1.0f);
    *v = host_random(SIFT_F16, 3, (int64_t[]){c->hkv, c->n, c->d}, 1.0f);
    *kp = host_random(SIFT_F16, 3, (int64_t[]){c->hkv, c->n, c->dk}, 0.25f);
    for (int which = 0; which < 2; which++)
        for (int64_t i = 0; i < c->budget && c->sink + 4 * i + 2 * which < c->n - c->window; i++)
            for (int64_t g = 0; g < c->hkv; g++) {
                float *row = kp->f + (g * c->n + c->sink + 4 * i + 2 * which) * c->dk;
                const float *qs = qp[which ? 2 : 0].f;
                for (int64_t e = 0; e < c->dk; e++) {
                    float m = 0.0f;
                    for (int64_t h = g * group; h < (g + 1) * group; h++) m += qs[h * c->dk + e];
                    row[e] = fminf(fmaxf(roundf(m / (float)group * 256.0f), -2047.0f), 2047.0f) / 256.0f;
                }
            }
    sift_f32_to_f16(kp->h, kp->f, kp->n);
}

/* Runs the steps of `plan` on b over fresh kept lists and state: out[step][Hq][D], the lists after
 * the last step, and (when flags is not NULL) the REUSE flag after each step and the state's HITS
 * and STEPS. */
static bool run_auto(const backend *b, const butler_case *c, const host_tensor *q, const host_tensor *qp,
                     const host_tensor *k, const host_tensor *v, const host_tensor *kp, const int *plan, float *out,
                     int32_t *lists, float *flags, float *counts, const char *cname)
{
    const char *bname = sift_backend_kind_name(b->kind);
    const sift_select_params sel = {.n_ctx = c->n, .sink = c->sink, .window = c->window, .budget = c->budget};
    const int64_t count = sift_select_count(&sel), qn = (int64_t)c->hq * c->dk, sn = qn + SIFT_SEL_CACHE_EXTRA;
    sift_tensor *qt = NULL, *qpt = NULL, *kt = NULL, *vt = NULL, *kpt = NULL, *o = NULL, *kept = NULL, *state = NULL;
    sift_graph *g[AUTO_GRAPHS] = {0};
    float *st = calloc((size_t)sn, sizeof *st);
    bool ok = false;
    const size_t n_out = (size_t)c->hq * (size_t)c->d;
    if (!st) exit(2);
    CHECK_OK(upload(b->ctx, &q[0], &qt), cname, bname);
    CHECK_OK(upload(b->ctx, &qp[0], &qpt), cname, bname);
    CHECK_OK(upload(b->ctx, k, &kt), cname, bname);
    CHECK_OK(upload(b->ctx, v, &vt), cname, bname);
    CHECK_OK(upload(b->ctx, kp, &kpt), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->d}, &o), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){c->hkv, count}, &kept), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 1, &sn, &state), cname, bname);
    CHECK_OK(sift_tensor_write(state, 0, st, (size_t)sn * 4), cname, bname);
    sift_attn_config cfg = sift_attn_config_default();
    cfg.n_q_heads = c->hq;
    cfg.n_kv_heads = c->hkv;
    cfg.head_dim = c->d;
    cfg.sel = sel;
    cfg.mode = SIFT_ATTN_SELECT;
    cfg.scorer = SIFT_SCORER_BUTLER;
    cfg.score_q = qpt;
    cfg.score_k = kpt;
    cfg.sel_indices = kept;
    for (int i = 0; i < AUTO_GRAPHS; i++) {
        cfg.reuse = i == AUTO_REUSE;
        cfg.sel_state = i >= AUTO_CHECK ? state : NULL;
        cfg.sel_cache = i == AUTO_CHECK ? 0.9f : i == AUTO_FORCED ? 1.0f : SIFT_SEL_CACHE_OFF;
        CHECK_OK(sift_attn_graph(b->ctx, &cfg, qt, kt, vt, o, &g[i], NULL), cname, bname);
    }
    for (int s = 0; s < AUTO_STEPS; s++) {
        CHECK_OK(sift_tensor_write(qt, 0, q[s].f, q[s].n * 4), cname, bname);
        CHECK_OK(sift_tensor_write(qpt, 0, qp[s].f, qp[s].n * 4), cname, bname);
        CHECK_OK(compute_checked(g[plan[s]]), cname, bname);
        CHECK_OK(sift_tensor_read(o, 0, out + (size_t)s * n_out, n_out * 4), cname, bname);
        CHECK_OK(sift_tensor_read(state, 0, st, (size_t)sn * 4), cname, bname);
        if (flags) flags[s] = st[qn + SIFT_SEL_CACHE_REUSE];
    }
    if (counts) counts[0] = st[qn + SIFT_SEL_CACHE_HITS], counts[1] = st[qn + SIFT_SEL_CACHE_STEPS];
    CHECK_OK(sift_tensor_read(kept, 0, lists, (size_t)(c->hkv * count) * 4), cname, bname);
    ok = true;
out:
    for (int i = 0; i < AUTO_GRAPHS; i++) sift_graph_destroy(g[i]);
    sift_tensor_destroy(qt), sift_tensor_destroy(qpt), sift_tensor_destroy(kt), sift_tensor_destroy(vt);
    sift_tensor_destroy(kpt), sift_tensor_destroy(o), sift_tensor_destroy(kept), sift_tensor_destroy(state);
    free(st);
    return ok;
}

/* On each backend: the steps decided on the device (check, check, check, forced) reuse where q'
 * stayed (step 1) and select where it moved (step 2) or the interval forces it (step 3), giving
 * exactly the outputs and lists of the fixed interval's graphs run as select, reuse, select,
 * select; a reuse at step 2 would have changed the output (so the comparison can fail). Then the
 * backend against the CPU. */
static void butler_auto_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const butler_case *c = cc->params;
    const char *bname = sift_backend_kind_name(dut->kind);
    host_tensor q[AUTO_STEPS], qp[AUTO_STEPS], k, v, kp;
    auto_inputs(c, q, qp, &k, &v, &kp);
    const sift_select_params sel = {.n_ctx = c->n, .sink = c->sink, .window = c->window, .budget = c->budget};
    const size_t n_out = (size_t)c->hq * (size_t)c->d, n_idx = (size_t)(c->hkv * sift_select_count(&sel));
    static const int decided[AUTO_STEPS] = {AUTO_CHECK, AUTO_CHECK, AUTO_CHECK, AUTO_FORCED};
    static const int fixed[AUTO_STEPS] = {AUTO_SELECT, AUTO_REUSE, AUTO_SELECT, AUTO_SELECT};
    static const int stale[AUTO_STEPS] = {AUTO_SELECT, AUTO_REUSE, AUTO_REUSE, AUTO_REUSE};
    static const float want_flags[AUTO_STEPS] = {0, 1, 0, 0};
    float *got = calloc(n_out * AUTO_STEPS, 4), *want = calloc(n_out * AUTO_STEPS, 4), *kept = calloc(n_out * AUTO_STEPS, 4);
    int32_t *lg = calloc(n_idx + 1, 4), *lw = calloc(n_idx + 1, 4), *lc = calloc(n_idx + 1, 4);
    float flags[AUTO_STEPS] = {0}, counts[2] = {0};
    if (!got || !want || !kept || !lg || !lw || !lc) exit(2);
    if (run_auto(dut, c, q, qp, &k, &v, &kp, decided, got, lg, flags, counts, cc->name) &&
        run_auto(dut, c, q, qp, &k, &v, &kp, fixed, want, lw, NULL, NULL, cc->name) &&
        run_auto(dut, c, q, qp, &k, &v, &kp, stale, kept, lc, NULL, NULL, cc->name)) {
        int wrong = 0;
        for (int s = 0; s < AUTO_STEPS; s++) wrong += flags[s] != want_flags[s];
        report(cc->name, bname, "reuse flags != {0,1,0,0}", wrong, 0, wrong == 0);
        report(cc->name, bname, "hits (of 4 steps)", counts[0], 1, counts[0] == 1.0f && counts[1] == 4.0f);
        double differ = 0.0, moved = 0.0;
        for (size_t i = 0; i < n_out * AUTO_STEPS; i++) differ = fmax(differ, fabs((double)got[i] - (double)want[i]));
        for (size_t i = 0; i < n_idx; i++) differ += lg[i] != lw[i];
        for (size_t i = n_out * 2; i < n_out * 3; i++) moved = fmax(moved, fabs((double)kept[i] - (double)want[i]));
        report(cc->name, bname, "max |decided - fixed interval's steps|", differ, 0, differ == 0.0);
        report(cc->name, bname, "step 2 reused instead: max |diff| (> 1e-3)", moved, 1e-3, moved > 1e-3);
        if (dut != ref && run_auto(ref, c, q, qp, &k, &v, &kp, decided, want, lw, NULL, NULL, cc->name)) {
            size_t idx_diff = 0;
            for (size_t i = 0; i < n_idx; i++) idx_diff += lg[i] != lw[i];
            report(cc->name, bname, "idx-diff", (double)idx_diff, 0, idx_diff == 0);
            compare_floats(cc->name, bname, want, got, n_out * AUTO_STEPS, 1e-6);
        }
    }
    free(got), free(want), free(kept), free(lg), free(lw), free(lc);
    for (int s = 0; s < AUTO_STEPS; s++) host_free(&q[s]), host_free(&qp[s]);
    host_free(&k), host_free(&v), host_free(&kp);
}

static void add_butler(void)
{
    static const butler_case cs[] = {
        {8, 2, 64, 16, 700, 4, 32, 64, false, false},   {8, 2, 64, 16, 700, 4, 32, 64, true, false},
        {32, 8, 128, 16, 3000, 16, 64, 256, true, true}, {8, 1, 64, 8, 900, 4, 32, 100, false, true},
        {8, 2, 64, 16, 90, 4, 32, 64, false, false},    {8, 2, 64, 16, 90, 4, 32, 64, true, true},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const butler_case *c = &cs[i];
        char name[160];
        snprintf(name, sizeof name, "builder butler%s%s%s H=%d/%d D=%d d'=%d N=%lld S=%lld W=%lld k=%lld",
                 c->neighbors ? " + neighbours" : "", c->paged ? ", paged" : "",
                 c->sink + c->window + c->budget >= c->n ? " == dense" : ", reused", c->hq, c->hkv, c->d, c->dk,
                 (long long)c->n, (long long)c->sink, (long long)c->window, (long long)c->budget);
        registry_add("attn", name, butler_check, NULL, c, sizeof *c);
    }
    static const butler_case auto_cases[] = {{8, 2, 64, 16, 700, 4, 32, 64, false, false}, {32, 8, 128, 16, 3000, 16, 64, 256, false, false}};
    for (size_t i = 0; i < sizeof auto_cases / sizeof auto_cases[0]; i++) {
        const butler_case *c = &auto_cases[i];
        char name[160];
        snprintf(name, sizeof name, "builder butler, reuse decided by q' H=%d/%d D=%d d'=%d N=%lld S=%lld W=%lld k=%lld", c->hq,
                 c->hkv, c->d, c->dk, (long long)c->n, (long long)c->sink, (long long)c->window, (long long)c->budget);
        registry_add("attn", name, butler_auto_check, NULL, c, sizeof *c);
    }
}

void cases_attn(const suite_options *o)
{
    add_butler();
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
