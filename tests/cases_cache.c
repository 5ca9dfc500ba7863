/* The "cache" suite: paged K/V and the ops that save work between steps (SPEC §3, §4, §6, §7)
 * against the CPU reference, and cases with known answers on every backend (paging is invisible;
 * a predicate skips; the Selection Cache reuses exactly when it should; a sparse prefill over
 * every earlier position is causal attention; keys rotated by list rank). */
#include "registry.h"

static float attn_scale(int d) { return 1.0f / sqrtf((float)d); }
static double attn_bound(sift_dtype kv) { return kv == SIFT_F16 ? 5e-4 : 1e-7; }

/* Reads a whole tensor (f32 or i32) into a new buffer of n 4-byte words. */
static void *read_all(sift_tensor *t, size_t *n)
{
    *n = sift_tensor_nbytes(t) / 4;
    void *p = malloc(*n * 4 + 4);
    if (p && sift_tensor_read(t, 0, p, *n * 4) != SIFT_OK) {
        free(p);
        p = NULL;
    }
    return p;
}

/* ---- paged K/V: the same logical cache laid out contiguously and in shuffled pages ------------ */

/* Where the paged cache's pages live (KV offload, sift_tensor_paged_view_pools): one pool, or the
 * pool's first half of the pages on the device and the rest in a host pool (sift_tensor_create_host)
 * for K and V, or for V alone (K in one pool). */
enum { POOLS_ONE, POOLS_KV, POOLS_V };
#define RETURN_IF_FAILED(call)                                                                                         \
    do {                                                                                                               \
        const sift_status s_ = (call);                                                                                 \
        if (s_ != SIFT_OK) return s_;                                                                                  \
    } while (0)
static const char *const pools_names[3] = {"", " pools=K+V", " pools=V"};

typedef struct {
    int hq, hkv, d;
    sift_dtype kv;
    int64_t n, page; /* logical rows, page size */
    int t;           /* causal queries and kv_write rows, at positions n - t .. n - 1 */
    int pools;       /* POOLS_* */
} paged_case;

typedef struct {
    host_tensor q1, qt, k, v, pool_k, pool_v, pages, idx, rows; /* rows: kv_write source [T][Hkv][D] */
    int64_t pool_rows;
} paged_inputs;

/* The pool holds the logical rows in shuffled pages plus spare pages of other values, so a
 * backend that ignores the page table reads wrong numbers. */
static void make_paged(const paged_case *c, paged_inputs *in)
{
    memset(in, 0, sizeof *in);
    const int64_t lp = (c->n + c->page - 1) / c->page, pp = lp + 3;
    in->pool_rows = pp * c->page;
    in->q1 = host_random(SIFT_F32, 2, (int64_t[]){c->hq, c->d}, 1.0f);
    in->qt = host_random(SIFT_F32, 3, (int64_t[]){c->t, c->hq, c->d}, 1.0f);
    in->rows = host_random(SIFT_F32, 3, (int64_t[]){c->t, c->hkv, c->d}, 1.0f);
    in->k = host_random(c->kv, 3, (int64_t[]){c->hkv, lp * c->page, c->d}, 1.0f);
    in->v = host_random(c->kv, 3, (int64_t[]){c->hkv, lp * c->page, c->d}, 1.0f);
    in->pool_k = host_random(c->kv, 3, (int64_t[]){c->hkv, in->pool_rows, c->d}, 3.0f);
    in->pool_v = host_random(c->kv, 3, (int64_t[]){c->hkv, in->pool_rows, c->d}, 3.0f);
    in->pages = host_new(SIFT_I32, 1, (int64_t[]){lp});
    int64_t *perm = malloc((size_t)pp * sizeof *perm);
    for (int64_t i = 0; i < pp; i++) perm[i] = i;
    for (int64_t i = pp - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next() % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (int64_t p = 0; p < lp; p++) in->pages.i[p] = (int32_t)perm[p];
    free(perm);
    for (int which = 0; which < 2; which++) {
        const host_tensor *src = which ? &in->v : &in->k;
        host_tensor *dst = which ? &in->pool_v : &in->pool_k;
        for (int64_t h = 0; h < c->hkv; h++)
            for (int64_t j = 0; j < lp * c->page; j++) {
                const int64_t phys = (int64_t)in->pages.i[j / c->page] * c->page + j % c->page;
                const size_t s = (size_t)((h * lp * c->page + j) * c->d), dd = (size_t)((h * in->pool_rows + phys) * c->d);
                memcpy(dst->f + dd, src->f + s, (size_t)c->d * sizeof(float));
                if (dst->h) memcpy(dst->h + dd, src->h + s, (size_t)c->d * sizeof(uint16_t));
            }
    }
    /* a gather list: ascending random positions */
    const int64_t len = c->n < 300 ? c->n : 300;
    in->idx = host_new(SIFT_I32, 2, (int64_t[]){1, len});
    int64_t o = 0;
    for (int64_t j = 0; j < c->n && o < len; j++)
        if ((int64_t)(rng_next() % (uint64_t)(c->n - j)) < len - o) in->idx.i[o++] = (int32_t)j;
}

static void free_paged(paged_inputs *in)
{
    host_tensor *all[] = {&in->q1, &in->qt, &in->k, &in->v, &in->pool_k, &in->pool_v, &in->pages, &in->idx, &in->rows};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) host_free(all[i]);
}

enum { PG_SCORE, PG_DENSE, PG_GATHER, PG_CAUSAL, PG_WRITE, PG_COUNT };
static const char *const pg_names[PG_COUNT] = {"score", "dense", "gather", "causal", "kv_write"};

/* Rows [row0, row0 + rows) of every KV head of the pool h [Hkv][R][D], uploaded into a tensor of
 * their own, in host memory (sift_tensor_create_host) or on the device. */
static sift_status upload_rows(sift_context *ctx, const host_tensor *h, int64_t row0, int64_t rows, bool host,
                               sift_tensor **out)
{
    const int64_t hkv = h->shape[0], pr = h->shape[1], d = h->shape[2], shape[3] = {hkv, rows, d};
    const size_t elt = h->dtype == SIFT_F16 ? 2 : 4;
    sift_status s = host ? sift_tensor_create_host(ctx, h->dtype, 3, shape, out) : sift_tensor_create(ctx, h->dtype, 3, shape, out);
    for (int64_t g = 0; g < hkv && s == SIFT_OK; g++) {
        const size_t from = (size_t)((g * pr + row0) * d);
        const void *src = elt == 2 ? (const void *)(h->h + from) : (const void *)(h->f + from);
        s = sift_tensor_write(*out, (size_t)(g * rows * d) * elt, src, (size_t)(rows * d) * elt);
    }
    return s;
}

/* The paged view of one of the case's pools (K or V), and the tensors holding its pages: dev (and
 * host where this pool is split: its first half of the pages on the device). */
static sift_status pool_view(sift_context *ctx, const paged_case *c, const host_tensor *pool, bool split,
                             const sift_tensor *pages, sift_tensor **dev, sift_tensor **host, sift_tensor **view)
{
    const int64_t rows = pool->shape[1], dev_rows = rows / c->page / 2 * c->page;
    if (!split) {
        RETURN_IF_FAILED(upload(ctx, pool, dev));
        return sift_tensor_paged_view(*dev, pages, c->page, view);
    }
    RETURN_IF_FAILED(upload_rows(ctx, pool, 0, dev_rows, false, dev));
    RETURN_IF_FAILED(upload_rows(ctx, pool, dev_rows, rows - dev_rows, true, host));
    if (!sift_tensor_in_host_memory(*host) || sift_tensor_in_host_memory(*dev)) return SIFT_E_INVALID;
    return sift_tensor_paged_view_pools(*dev, *host, pages, c->page, view);
}

/* Runs the five ops over the cache, paged or contiguous; out[op] gets each result (kv_write: the
 * logical rows written, read back through the layout). */
static bool run_paged(const backend *b, const paged_case *c, const paged_inputs *in, bool paged, const char *cname,
                      float *out[PG_COUNT], size_t nout[PG_COUNT])
{
    const char *bname = sift_backend_kind_name(b->kind);
    sift_tensor *q1 = NULL, *qt = NULL, *kc = NULL, *vc = NULL, *pages = NULL, *kview = NULL, *vview = NULL, *idx = NULL;
    sift_tensor *kh = NULL, *vh = NULL; /* the host pools (two pools) */
    sift_tensor *rows = NULL, *o_score = NULL, *o_dense = NULL, *o_gather = NULL, *o_causal = NULL;
    sift_graph *g = NULL;
    bool ok = false;
    const float scale = attn_scale(c->d);
    const int64_t pos0 = c->n - c->t;
    CHECK_OK(upload(b->ctx, &in->q1, &q1), cname, bname);
    CHECK_OK(upload(b->ctx, &in->qt, &qt), cname, bname);
    CHECK_OK(upload(b->ctx, &in->idx, &idx), cname, bname);
    CHECK_OK(upload(b->ctx, &in->rows, &rows), cname, bname);
    if (paged && c->pools != POOLS_ONE) { /* the shuffle must have put logical pages in both pools */
        const int64_t dev_pages = in->pool_rows / c->page / 2, lp = in->pages.n;
        int64_t on_host = 0;
        for (int64_t p = 0; p < lp; p++) on_host += in->pages.i[p] >= dev_pages;
        if (on_host == 0 || on_host == lp) {
            fail(cname, bname, "the case's pages are all in one pool");
            goto out;
        }
    }
    if (paged) {
        CHECK_OK(upload(b->ctx, &in->pages, &pages), cname, bname);
        CHECK_OK(pool_view(b->ctx, c, &in->pool_k, c->pools == POOLS_KV, pages, &kc, &kh, &kview), cname, bname);
        CHECK_OK(pool_view(b->ctx, c, &in->pool_v, c->pools != POOLS_ONE, pages, &vc, &vh, &vview), cname, bname);
    } else {
        CHECK_OK(upload(b->ctx, &in->k, &kc), cname, bname);
        CHECK_OK(upload(b->ctx, &in->v, &vc), cname, bname);
        kview = kc;
        vview = vc;
    }
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->n - 1}, &o_score), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->d}, &o_dense), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->d}, &o_gather), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 3, (int64_t[]){c->t, c->hq, c->d}, &o_causal), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    CHECK_OK(sift_op_score(g, q1, kview, 1, c->n, scale, o_score), cname, bname);
    CHECK_OK(sift_op_dense_attend(g, q1, kview, vview, c->n, scale, o_dense), cname, bname);
    CHECK_OK(sift_op_gather_attend(g, q1, kview, vview, idx, scale, o_gather), cname, bname);
    /* overwrite the last T rows, then attend causally over them */
    CHECK_OK(sift_op_kv_write(g, rows, pos0, kview), cname, bname);
    CHECK_OK(sift_op_causal_attend(g, qt, kview, vview, pos0, scale, o_causal), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    sift_tensor *outs[4] = {o_score, o_dense, o_gather, o_causal};
    for (int i = 0; i < 4; i++) {
        out[i] = read_all(outs[i], &nout[i]);
        if (!out[i]) {
            fail(cname, bname, "read failed");
            goto out;
        }
    }
    /* the written rows, as the layout places them */
    nout[PG_WRITE] = (size_t)(c->t * c->hkv * c->d);
    out[PG_WRITE] = malloc(nout[PG_WRITE] * sizeof(float));
    const size_t elt = c->kv == SIFT_F16 ? 2 : 4;
    for (int64_t t = 0; t < c->t; t++)
        for (int64_t h = 0; h < c->hkv; h++) {
            const int64_t j = pos0 + t;
            int64_t phys = paged ? (int64_t)in->pages.i[j / c->page] * c->page + j % c->page : j;
            const sift_tensor *holder = kc; /* a row past the device pool's lies in the host pool */
            if (kh && phys >= sift_tensor_dim(kc, 1)) phys -= sift_tensor_dim(kc, 1), holder = kh;
            unsigned char raw[512];
            CHECK_OK(sift_tensor_read(holder, (size_t)((h * sift_tensor_dim(holder, 1) + phys) * c->d) * elt, raw,
                                      (size_t)c->d * elt),
                     cname, bname);
            float *dst = out[PG_WRITE] + (t * c->hkv + h) * c->d;
            if (elt == 2) sift_f16_to_f32(dst, (const uint16_t *)raw, (size_t)c->d);
            else memcpy(dst, raw, (size_t)c->d * 4);
        }
    ok = true;
out:
    sift_graph_destroy(g);
    if (paged) {
        sift_tensor_destroy(kview);
        sift_tensor_destroy(vview);
    }
    sift_tensor *all[] = {q1, qt, kc, vc, kh, vh, pages, idx, rows, o_score, o_dense, o_gather, o_causal};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sift_tensor_destroy(all[i]);
    return ok;
}

static void paged_check(const conf_case *cc, const backend *rb, const backend *dut)
{
    const paged_case *c = cc->params;
    const char *cname = cc->name;
    paged_inputs in;
    make_paged(c, &in);
    float *ref[PG_COUNT] = {0}, *flat[PG_COUNT] = {0};
    size_t nref[PG_COUNT], nflat[PG_COUNT];
    if (!run_paged(rb, c, &in, true, cname, ref, nref)) goto out;
    if (dut == rb) { /* on the reference, paging changes no bit */
        if (!run_paged(rb, c, &in, false, cname, flat, nflat)) goto out;
        for (int op = 0; op < PG_COUNT; op++) {
            char name[224];
            snprintf(name, sizeof name, "%s %s paged=flat", cname, pg_names[op]);
            compare_floats(name, "cpu", flat[op], ref[op], nref[op], 0.0);
        }
    } else {
        float *got[PG_COUNT] = {0};
        size_t ngot[PG_COUNT];
        const char *bname = sift_backend_kind_name(dut->kind);
        if (run_paged(dut, c, &in, true, cname, got, ngot))
            for (int op = 0; op < PG_COUNT; op++) {
                char name[224];
                snprintf(name, sizeof name, "%s %s", cname, pg_names[op]);
                const double bound = op == PG_SCORE || op == PG_WRITE ? 1e-7 : attn_bound(c->kv);
                compare_floats(name, bname, ref[op], got[op], nref[op], bound);
            }
        for (int op = 0; op < PG_COUNT; op++) free(got[op]);
    }
out:
    for (int op = 0; op < PG_COUNT; op++) {
        free(ref[op]);
        free(flat[op]);
    }
    free_paged(&in);
}

/* ---- predicated nodes --------------------------------------------------------------------------- */

/* score, vote and select run under a predicate that is set, then one that is clear: the first
 * set of outputs keeps its fill, the second is computed. */
static float *predicate_on(const backend *b, const float *ref_scores, const char *cname)
{
    const char *bname = sift_backend_kind_name(b->kind);
    const int hq = 4, hkv = 2, d = 64, n = 100;
    sift_tensor *q = NULL, *k = NULL, *flag = NULL, *sc[2] = {0}, *vo[2] = {0}, *ix[2] = {0};
    sift_graph *g = NULL;
    float *got = NULL, *scores = NULL;
    int32_t *idx = NULL;
    rng_seed_from(cname); /* the same inputs on the reference and the backend under test */
    host_tensor hq_ = host_random(SIFT_F32, 2, (int64_t[]){hq, d}, 1.0f);
    host_tensor hk = host_random(SIFT_F16, 3, (int64_t[]){hkv, n, d}, 1.0f);
    const sift_select_params sel = {.n_ctx = n, .sink = 2, .window = 8, .budget = 10};
    const int64_t cand = sift_select_candidates(&sel), cnt = sift_select_count(&sel);
    CHECK_OK(upload(b->ctx, &hq_, &q), cname, bname);
    CHECK_OK(upload(b->ctx, &hk, &k), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 1, (int64_t[]){2}, &flag), cname, bname);
    CHECK_OK(sift_tensor_write(flag, 0, (float[]){1.0f, 0.0f}, 8), cname, bname);
    float *fill = malloc((size_t)(hq * cand) * 4);
    for (int64_t i = 0; i < hq * cand; i++) fill[i] = -5.0f;
    for (int i = 0; i < 2; i++) {
        CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){hq, cand}, &sc[i]), cname, bname);
        CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){1, cand}, &vo[i]), cname, bname);
        CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){1, cnt}, &ix[i]), cname, bname);
        CHECK_OK(sift_tensor_write(sc[i], 0, fill, (size_t)(hq * cand) * 4), cname, bname);
        CHECK_OK(sift_tensor_write(vo[i], 0, fill, (size_t)cand * 4), cname, bname);
        CHECK_OK(sift_tensor_write(ix[i], 0, fill, (size_t)cnt * 4), cname, bname);
    }
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(sift_graph_skip_if(g, flag, i), cname, bname);
        CHECK_OK(sift_op_score(g, q, k, sel.sink, sel.sink + cand, attn_scale(d), sc[i]), cname, bname);
        CHECK_OK(sift_op_vote(g, SIFT_VOTE_SOFTMAX_SUM, sc[i], vo[i]), cname, bname);
        CHECK_OK(sift_op_select(g, vo[i], &sel, ix[i]), cname, bname);
    }
    CHECK_OK(sift_graph_skip_if(g, NULL, 0), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    got = malloc((size_t)(hq * cand) * 4);
    idx = malloc((size_t)cnt * 4);
    bool kept = true;
    CHECK_OK(sift_tensor_read(sc[0], 0, got, (size_t)(hq * cand) * 4), cname, bname);
    for (int64_t i = 0; i < hq * cand; i++) kept = kept && got[i] == -5.0f;
    CHECK_OK(sift_tensor_read(vo[0], 0, got, (size_t)cand * 4), cname, bname);
    for (int64_t i = 0; i < cand; i++) kept = kept && got[i] == -5.0f;
    CHECK_OK(sift_tensor_read(ix[0], 0, idx, (size_t)cnt * 4), cname, bname);
    for (int64_t i = 0; i < cnt; i++) kept = kept && ((float *)idx)[i] == -5.0f;
    report(cname, bname, "skipped-kept", kept ? 0.0 : 1.0, 0.0, kept);
    CHECK_OK(sift_tensor_read(sc[1], 0, got, (size_t)(hq * cand) * 4), cname, bname);
    if (ref_scores) compare_floats("skip_if  scores under a clear flag", bname, ref_scores, got, (size_t)(hq * cand), 1e-7);
    CHECK_OK(sift_tensor_read(ix[1], 0, idx, (size_t)cnt * 4), cname, bname);
    bool sorted = true;
    for (int64_t i = 0; i < cnt; i++) sorted = sorted && idx[i] >= 0 && idx[i] < n && (i == 0 || idx[i] > idx[i - 1]);
    report("skip_if  select under a clear flag", bname, "ascending", sorted ? 0.0 : 1.0, 0.0, sorted);
    free(fill);
    scores = got;
    got = NULL;
out:
    free(got);
    free(idx);
    sift_graph_destroy(g);
    sift_tensor *all[] = {q, k, flag, sc[0], sc[1], vo[0], vo[1], ix[0], ix[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sift_tensor_destroy(all[i]);
    host_free(&hq_);
    host_free(&hk);
    return scores; /* the computed scores, for the CPU's to be the reference */
}

static void predicate_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    float *ref_scores = dut == ref ? NULL : predicate_on(ref, NULL, cc->name);
    free(predicate_on(dut, ref_scores, cc->name));
    free(ref_scores);
}

/* ---- the Selection Cache decision ----------------------------------------------------------------- */

/* Steps of a known sequence: the query and whether the step is a full selection. With theta 0.9:
 * q0 miss (nothing cached); q0 + 1% noise hits; a new random q2 misses; 2 * q2 hits (cos 1);
 * -q2 misses (cos -1); a step that is not full misses and invalidates; then q4 again misses
 * (invalid) and q4 + noise hits. Expected reuse flags per theta. */
enum { SC_STEPS = 8, SC_HQ = 4, SC_D = 32 };
static const int sc_full[SC_STEPS] = {1, 1, 1, 1, 1, 0, 1, 1};
static const int sc_expect_09[SC_STEPS] = {0, 1, 0, 1, 0, 0, 0, 1};

static void sel_cache_queries(float q[SC_STEPS][SC_HQ * SC_D])
{
    uint64_t saved = rng_state;
    rng_state = 4242;
    for (int i = 0; i < SC_HQ * SC_D; i++) {
        q[0][i] = rng_normal();
        q[1][i] = q[0][i] + 0.01f * rng_normal();
        q[2][i] = rng_normal();
        q[3][i] = 2.0f * q[2][i];
        q[4][i] = -q[2][i];
        q[5][i] = q[4][i];
        q[6][i] = q[4][i];
        q[7][i] = q[4][i] + 0.01f * rng_normal();
    }
    rng_state = saved;
}

typedef struct {
    float theta;
    int expect[SC_STEPS], hits;
} sel_cache_case;

static void sel_cache_on(const conf_case *cc, const backend *ref, const backend *b)
{
    (void)ref;
    const sel_cache_case *sc = cc->params;
    const float theta = sc->theta;
    const int *expect = sc->expect, hits_expected = sc->hits;
    const char *cname = cc->name;
    const char *bname = sift_backend_kind_name(b->kind);
    static float q[SC_STEPS][SC_HQ * SC_D];
    sel_cache_queries(q);
    const int64_t qn = SC_HQ * SC_D, sn = qn + SIFT_SEL_CACHE_EXTRA;
    sift_tensor *qt = NULL, *state = NULL;
    float *st = calloc((size_t)sn, sizeof *st);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){SC_HQ, SC_D}, &qt), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 1, &sn, &state), cname, bname);
    CHECK_OK(sift_tensor_write(state, 0, st, (size_t)sn * 4), cname, bname);
    int wrong = 0;
    for (int step = 0; step < SC_STEPS; step++) {
        sift_graph *g = NULL;
        CHECK_OK(sift_tensor_write(qt, 0, q[step], (size_t)qn * 4), cname, bname);
        CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
        sift_status s = sift_op_sel_cache_check(g, qt, theta, sc_full[step], state);
        if (s == SIFT_OK) s = compute_checked(g);
        sift_graph_destroy(g);
        CHECK_OK(s, cname, bname);
        CHECK_OK(sift_tensor_read(state, 0, st, (size_t)sn * 4), cname, bname);
        const bool reuse = st[qn + SIFT_SEL_CACHE_REUSE] != 0.0f;
        if (reuse != (expect[step] != 0)) wrong++;
        /* q_ref: the query of the last miss, copied exactly */
        int last_miss = step;
        while (last_miss > 0 && expect[last_miss]) last_miss--;
        if (memcmp(st, q[last_miss], (size_t)qn * 4) != 0) wrong++;
    }
    int full_steps = 0;
    for (int i = 0; i < SC_STEPS; i++) full_steps += sc_full[i];
    report(cname, bname, "wrong-steps", wrong, 0.0, wrong == 0);
    const bool counts = st[qn + SIFT_SEL_CACHE_HITS] == (float)hits_expected && st[qn + SIFT_SEL_CACHE_STEPS] == (float)full_steps;
    report(cname, bname, "hits", st[qn + SIFT_SEL_CACHE_HITS], hits_expected, counts);
out:
    free(st);
    sift_tensor_destroy(qt);
    sift_tensor_destroy(state);
}

/* ---- fill_range, mean_rows ---------------------------------------------------------------------- */

static void fill_and_mean_on(const conf_case *cc, const backend *ref, const backend *b)
{
    (void)ref;
    const float *ref_mean = NULL;
    const char *cname = cc->name;
    const char *bname = sift_backend_kind_name(b->kind);
    sift_tensor *ix = NULL, *x = NULL, *m = NULL;
    sift_graph *g = NULL;
    int32_t buf[150];
    float mean[72];
    for (int i = 0; i < 150; i++) buf[i] = -7;
    uint64_t saved = rng_state;
    rng_state = 99;
    host_tensor hx = host_random(SIFT_F32, 2, (int64_t[]){37, 72}, 1.0f);
    rng_state = saved;
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){3, 50}, &ix), cname, bname);
    CHECK_OK(sift_tensor_write(ix, 0, buf, sizeof buf), cname, bname);
    CHECK_OK(upload(b->ctx, &hx, &x), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){1, 72}, &m), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    CHECK_OK(sift_op_fill_range(g, 20, 1000, ix), cname, bname);
    CHECK_OK(sift_op_mean_rows(g, x, m), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    CHECK_OK(sift_tensor_read(ix, 0, buf, sizeof buf), cname, bname);
    int wrong = 0;
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < 50; i++) wrong += buf[l * 50 + i] != (i < 20 ? -7 : 1000 + i - 20);
    report(cname, bname, "wrong", wrong, 0.0, wrong == 0);
    CHECK_OK(sift_tensor_read(m, 0, mean, sizeof mean), cname, bname);
    /* the reference: the mean in double */
    float want[72];
    for (int i = 0; i < 72; i++) {
        double s = 0.0;
        for (int t = 0; t < 37; t++) s += hx.f[t * 72 + i];
        want[i] = (float)(s / 37.0);
    }
    compare_floats("mean_rows [37][72]", bname, ref_mean ? ref_mean : want, mean, 72, 1e-7);
out:
    sift_graph_destroy(g);
    sift_tensor_destroy(ix);
    sift_tensor_destroy(x);
    sift_tensor_destroy(m);
    host_free(&hx);
}

/* ---- gather_attend_rope and causal_attend_sparse ----------------------------------------------------- */

typedef struct {
    int hq, hkv, d, n_rot;
    sift_dtype kv;
    sift_rope_mode mode;
    int64_t n, len; /* cache rows, list length (gather) or listed positions before pos0 (sparse) */
    int t;          /* sparse: queries */
    int lists;
    int op;         /* 0: gather_attend_rope; 1: causal_attend_sparse */
} attn2_case;

/* op 0: gather_attend_rope; op 1: causal_attend_sparse. variant 0: the op over the case's list;
 * variant 1: the op's definition (op 0: plain gather over keys rotated to their rank on the host;
 * op 1: causal_attend); variant 2 (op 1): the op over a list of every earlier position, which
 * must equal variant 1. */
static float *run_attn2(const backend *b, const attn2_case *c, int op, int variant, size_t *nout, const char *cname)
{
    const char *bname = sift_backend_kind_name(b->kind);
    uint64_t saved = rng_state;
    rng_state = 1000 + (uint64_t)c->n * 7 + (uint64_t)c->d + (uint64_t)op;
    const int64_t qshape1[2] = {c->hq, c->d}, qshape3[3] = {c->t, c->hq, c->d};
    host_tensor q = host_random(SIFT_F32, op ? 3 : 2, op ? qshape3 : qshape1, 1.0f);
    host_tensor k = host_random(c->kv, 3, (int64_t[]){c->hkv, c->n, c->d}, 1.0f);
    host_tensor v = host_random(c->kv, 3, (int64_t[]){c->hkv, c->n, c->d}, 1.0f);
    const int64_t pos0 = c->n - c->t;
    const int64_t limit = op == 1 ? pos0 : c->n;
    const int64_t list_len = variant == 2 ? pos0 : c->len;
    host_tensor idx = host_new(SIFT_I32, 2, (int64_t[]){c->lists, list_len});
    for (int l = 0; l < c->lists; l++) {
        int64_t o = 0;
        for (int64_t j = 0; j < limit && o < list_len; j++)
            if ((int64_t)(rng_next() % (uint64_t)(limit - j)) < list_len - o) idx.i[l * list_len + o++] = (int32_t)j;
    }
    rng_state = saved;
    const sift_rope_params rope = {.n_rot = c->n_rot, .base = 10000.0f, .mode = c->mode};
    if (op == 0 && variant == 1) /* rotate each listed key to its rank, in f32 (lists 1, f32 only) */
        for (int64_t h = 0; h < c->hkv; h++)
            for (int64_t i = 0; i < list_len; i++) {
                float *row = k.f + (h * c->n + idx.i[i]) * c->d;
                for (int p = 0; p < c->n_rot / 2; p++) {
                    const float freq = powf(rope.base, -2.0f * (float)p / (float)rope.n_rot);
                    const float th = (float)i * freq, cs = cosf(th), sn = sinf(th);
                    const int a = rope.mode == SIFT_ROPE_ADJACENT ? 2 * p : p;
                    const int bb = rope.mode == SIFT_ROPE_ADJACENT ? 2 * p + 1 : p + c->n_rot / 2;
                    const float xa = row[a], xb = row[bb];
                    row[a] = xa * cs - xb * sn;
                    row[bb] = xa * sn + xb * cs;
                }
            }
    sift_tensor *tq = NULL, *tk = NULL, *tv = NULL, *ti = NULL, *to = NULL;
    sift_graph *g = NULL;
    float *res = NULL;
    CHECK_OK(upload(b->ctx, &q, &tq), cname, bname);
    CHECK_OK(upload(b->ctx, &k, &tk), cname, bname);
    CHECK_OK(upload(b->ctx, &v, &tv), cname, bname);
    CHECK_OK(upload(b->ctx, &idx, &ti), cname, bname);
    if (op == 0) CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, qshape1, &to), cname, bname);
    else CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 3, qshape3, &to), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    const float scale = attn_scale(c->d);
    if (op == 0 && variant == 1) CHECK_OK(sift_op_gather_attend(g, tq, tk, tv, ti, scale, to), cname, bname);
    else if (op == 0) CHECK_OK(sift_op_gather_attend_rope(g, tq, tk, tv, ti, scale, &rope, to), cname, bname);
    else if (variant == 1) CHECK_OK(sift_op_causal_attend(g, tq, tk, tv, pos0, scale, to), cname, bname);
    else CHECK_OK(sift_op_causal_attend_sparse(g, tq, tk, tv, ti, pos0, scale, to), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    res = read_all(to, nout);
out:
    sift_graph_destroy(g);
    sift_tensor *all[] = {tq, tk, tv, ti, to};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sift_tensor_destroy(all[i]);
    host_free(&q);
    host_free(&k);
    host_free(&v);
    host_free(&idx);
    return res;
}

static void attn2_check(const conf_case *cc, const backend *rb, const backend *dut)
{
    const attn2_case *c = cc->params;
    const int op = c->op;
    const char *cname = cc->name;
    size_t nref = 0;
    float *ref = run_attn2(rb, c, op, 0, &nref, cname);
    if (!ref) return;
    if (dut == rb) {
        check_reference_finite(cname, ref, nref);
    } else {
        if (!all_finite(ref, nref)) fail(cname, "cpu", "NaN or Inf in the reference output");
        size_t n = 0;
        float *got = run_attn2(dut, c, op, 0, &n, cname);
        if (got) compare_floats(cname, sift_backend_kind_name(dut->kind), ref, got, nref,
                                op == 0 && c->kv == SIFT_F32 ? 1e-6 : attn_bound(c->kv));
        free(got);
    }
    /* the definition, on the backend under test: the same numbers up to rounding */
    const bool has_definition = op == 1 || (c->lists == 1 && c->kv == SIFT_F32);
    if (has_definition) {
        const backend *b = dut;
        char name[224];
        snprintf(name, sizeof name, "%s %s", cname, op ? "all earlier = causal" : "= gather of rotated keys");
        size_t n1 = 0, n2 = 0;
        float *def = run_attn2(b, c, op, 1, &n1, name);
        float *alt = op == 1 ? run_attn2(b, c, op, 2, &n2, name) : run_attn2(b, c, op, 0, &n2, name);
        if (def && alt) compare_floats(name, sift_backend_kind_name(b->kind), def, alt, n1, op ? attn_bound(c->kv) : 1e-6);
        free(def);
        free(alt);
    }
    free(ref);
}

static void add_edge_cases(void) {}

void cases_cache(const suite_options *o)
{
    char name[160];
    const int64_t big = o->max_rows < 70000 ? o->max_rows : 70000;
    const paged_case pcs[] = {
        {8, 8, 64, SIFT_F16, 1000, 16, 7, POOLS_ONE},     {32, 8, 128, SIFT_F16, 4096, 64, 33, POOLS_ONE},
        {28, 4, 128, SIFT_F32, 777, 1, 5, POOLS_ONE},     {8, 1, 64, SIFT_F32, 255, 256, 1, POOLS_ONE},
        {8, 4, 8, SIFT_F32, 300, 16, 20, POOLS_ONE},      {32, 8, 128, SIFT_F16, big, 256, 3, POOLS_ONE},
        /* pages of 8 rows, under the 16 rows of a tensor-core stage: every stage spans two pages */
        {32, 8, 128, SIFT_F16, 1500, 8, 6, POOLS_ONE},
        /* KV offload: pages in a device pool and a host pool */
        {8, 8, 64, SIFT_F16, 1000, 16, 7, POOLS_KV},      {32, 8, 128, SIFT_F16, 2000, 64, 9, POOLS_KV},
        {28, 4, 128, SIFT_F32, 777, 1, 5, POOLS_KV},      {8, 4, 8, SIFT_F32, 300, 16, 20, POOLS_V},
    };
    for (size_t i = 0; i < sizeof pcs / sizeof pcs[0]; i++) {
        const paged_case *c = &pcs[i];
        snprintf(name, sizeof name, "paged    N=%-7lld H=%d/%d D=%-3d %s P=%lld%s", (long long)c->n, c->hq, c->hkv, c->d,
                 sift_dtype_name(c->kv), (long long)c->page, pools_names[c->pools]);
        registry_add("cache", name, paged_check, NULL, c, sizeof *c);
    }
    registry_add("cache", "skip_if  score/vote/select under flags {1, 0}", predicate_check, NULL, NULL, 0);

    sel_cache_case sc[3] = {{.theta = 0.9f}, {.theta = 1.0f}, {.theta = -1.0f}};
    for (int i = 0, seen_full = 0; i < SC_STEPS; i++) {
        sc[0].expect[i] = sc_expect_09[i];
        sc[2].expect[i] = sc_full[i] && seen_full; /* theta -1: every full step after a valid one */
        seen_full = sc_full[i];                    /* a step that is not full invalidates */
        sc[0].hits += sc[0].expect[i];
        sc[2].hits += sc[2].expect[i];
    }
    for (int i = 0; i < 3; i++) { /* theta 1: never */
        snprintf(name, sizeof name, "sel_cache_check theta=%g, %d steps", (double)sc[i].theta, SC_STEPS);
        registry_add("cache", name, sel_cache_on, NULL, &sc[i], sizeof sc[i]);
    }
    registry_add("cache", "fill_range [3][50] from column 20, positions 1000..", fill_and_mean_on, NULL, NULL, 0);

    const attn2_case acs[] = {
        {8, 4, 64, 64, SIFT_F32, SIFT_ROPE_ADJACENT, 2000, 300, 0, 1, 0},
        {32, 8, 128, 128, SIFT_F16, SIFT_ROPE_NEOX, 5000, 1200, 0, 1, 0},
        {8, 8, 64, 32, SIFT_F32, SIFT_ROPE_NEOX, 700, 255, 0, 1, 0},
        {28, 4, 128, 64, SIFT_F16, SIFT_ROPE_ADJACENT, 3000, 600, 0, 4, 0},
        {8, 4, 8, 8, SIFT_F32, SIFT_ROPE_ADJACENT, 600, 100, 0, 1, 0},
        {8, 4, 64, 64, SIFT_F32, SIFT_ROPE_ADJACENT, 1500, 200, 300, 1, 1},
        /* 512 queries (a prefill chunk) over 1,088 earlier rows: its check of every earlier position
         * against causal_attend costs T x N x H x D, and at N = 4000 took two minutes on lavapipe */
        {32, 8, 128, 128, SIFT_F16, SIFT_ROPE_ADJACENT, 1600, 700, 512, 1, 1},
        {28, 4, 128, 128, SIFT_F16, SIFT_ROPE_ADJACENT, 2100, 300, 77, 4, 1},
        {8, 1, 64, 64, SIFT_F32, SIFT_ROPE_ADJACENT, 40, 0, 33, 1, 1},
    };
    for (size_t i = 0; i < sizeof acs / sizeof acs[0]; i++) {
        const attn2_case *c = &acs[i];
        snprintf(name, sizeof name, "%s N=%-6lld H=%d/%d D=%-3d %s n=%lld%s L=%d", c->op ? "sparse  " : "ropegath",
                 (long long)c->n, c->hq, c->hkv, c->d, sift_dtype_name(c->kv), (long long)c->len,
                 c->op ? "" : (c->mode == SIFT_ROPE_NEOX ? " neox" : " adj"), c->lists);
        registry_add("cache", name, attn2_check, NULL, c, sizeof *c);
    }
    add_edge_cases();
}
