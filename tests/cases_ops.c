/* The "ops" suite: every attention op alone and the whole decode-attention graph against the CPU
 * reference over a matrix of shapes, dtypes and (S, W, k); the property select == dense when
 * S + W + k >= N; hand-made select and vote cases; and edge cases (unaligned K/V views, odd
 * head groups, gather lists with repeats in any order, select and vote over several blocks of
 * candidates, one graph computed several times). */
#include "registry.h"

/* Index lists must be ascending and in range; then equal as sets to the reference (both are
 * ascending, so element-wise). When `votes` is given, positions that differ are accepted where
 * their reference votes tie with the list's threshold within rel_tol (SPEC §10). */
static void compare_index_lists(const char *cname, const char *bname, const int32_t *ref, const int32_t *got,
                                int64_t lists, int64_t len, int64_t n_ctx, const float *votes, int64_t sink,
                                int64_t cand, int64_t budget, double rel_tol)
{
    int64_t differ = 0, untied = 0;
    for (int64_t l = 0; l < lists; l++) {
        const int32_t *r = ref + l * len, *g = got + l * len;
        for (int64_t j = 0; j < len; j++) {
            if (g[j] < 0 || g[j] >= n_ctx || (j > 0 && g[j] <= g[j - 1])) {
                fail(cname, bname, "index list not ascending, has duplicates or is out of range");
                return;
            }
        }
        /* symmetric difference of two ascending lists */
        int64_t a = 0, b = 0;
        float thr = 0.0f;
        if (votes && budget > 0 && cand > 0) { /* the reference's smallest chosen vote = the threshold */
            thr = INFINITY;
            for (int64_t j = 0; j < len; j++) {
                int64_t c = r[j] - sink;
                if (c >= 0 && c < cand) thr = fminf(thr, votes[l * cand + c]);
            }
        }
        while (a < len || b < len) {
            int32_t x;
            if (b >= len || (a < len && r[a] < g[b])) x = r[a++];
            else if (a >= len || g[b] < r[a]) x = g[b++];
            else {
                a++;
                b++;
                continue;
            }
            differ++;
            int64_t c = x - sink;
            bool tied = votes && c >= 0 && c < cand &&
                        fabsf(votes[l * cand + c] - thr) <= (float)rel_tol * fmaxf(fabsf(thr), 1e-30f);
            if (!tied) untied++;
        }
    }
    char metric[32];
    snprintf(metric, sizeof metric, "idx-diff");
    report(cname, bname, metric, (double)untied, 0.0, untied == 0);
    if (differ && !untied) printf("%-58s %-7s (%lld positions differ on votes tied within %.0e)\n", cname, bname,
                                  (long long)differ, rel_tol);
}

/* ---- one case, run on one backend ------------------------------------------------------------- */

typedef enum { OP_SCORE, OP_VOTE_SUM, OP_VOTE_MAX, OP_SELECT, OP_GATHER, OP_DENSE, OP_GRAPH, OP_SCORE_MAX } case_op;
static const char *const case_op_names[] = {"score", "vote-sum", "vote-max", "select", "gather", "dense", "graph", "score-max"};

typedef struct {
    case_op op;
    int hq, hkv, d;
    sift_dtype kv;
    sift_select_params sel;
    int lists;                /* gather: 1 or Hkv; graph: from vote mode */
    sift_vote_mode vote;      /* graph */
    bool ties;                /* select: votes drawn from a few values, to exercise the tie rule */
} test_case;

/* Everything a case needs on the host, made once per case and shared by all backends. */
typedef struct {
    host_tensor q, k, v, in2; /* in2: scores (vote), votes (select) or indices (gather) */
    int64_t begin, end;
} case_inputs;

typedef struct {
    float *f;    /* float output (score, vote, attention) */
    int32_t *i;  /* index output (select, graph) */
    size_t nf, ni;
    bool ok;
} case_outputs;

static void outputs_free(case_outputs *o)
{
    free(o->f);
    free(o->i);
    memset(o, 0, sizeof *o);
}

static float attn_scale(int d) { return 1.0f / sqrtf((float)d); }

static void describe(const test_case *c, char *buf, size_t len)
{
    snprintf(buf, len, "%-8s N=%-7lld H=%d/%d D=%-3d %s S=%lld W=%lld k=%lld L=%d", case_op_names[c->op],
             (long long)c->sel.n_ctx, c->hq, c->hkv, c->d, sift_dtype_name(c->kv), (long long)c->sel.sink,
             (long long)c->sel.window, (long long)c->sel.budget, c->lists);
}

/* K and V are the bulk of every case; consecutive cases of one shape share them (at a million
 * tokens, making them costs more than the cases). The cache owns them. */
static host_tensor kv_cache[2];
static host_tensor cached_kv(int which, sift_dtype dtype, const int64_t *shape)
{
    host_tensor *h = &kv_cache[which];
    if (!h->f || h->dtype != dtype || memcmp(h->shape, shape, 3 * sizeof *shape) != 0) {
        host_free(h);
        char key[96]; /* its own seed: the values do not depend on which case made them */
        snprintf(key, sizeof key, "kv %d %d %lld %lld %lld", which, (int)dtype, (long long)shape[0], (long long)shape[1],
                 (long long)shape[2]);
        const uint64_t saved = rng_state;
        rng_seed_from(key);
        *h = host_random(dtype, 3, shape, 1.0f);
        rng_state = saved;
    }
    return *h;
}

static void make_inputs(const test_case *c, case_inputs *in)
{
    memset(in, 0, sizeof *in);
    const int64_t n = c->sel.n_ctx;
    in->q = host_random(SIFT_F32, 2, (int64_t[]){c->hq, c->d}, 1.0f);
    if (c->op != OP_VOTE_SUM && c->op != OP_VOTE_MAX && c->op != OP_SELECT) {
        in->k = cached_kv(0, c->kv, (int64_t[]){c->hkv, n, c->d});
        if (c->op != OP_SCORE && c->op != OP_SCORE_MAX) in->v = cached_kv(1, c->kv, (int64_t[]){c->hkv, n, c->d});
    }
    const int64_t cand = sift_select_candidates(&c->sel);
    switch (c->op) {
    case OP_SCORE:
    case OP_SCORE_MAX:
        in->begin = c->sel.sink < n ? c->sel.sink : n;
        in->end = in->begin + cand;
        break;
    case OP_VOTE_SUM:
    case OP_VOTE_MAX: in->in2 = host_random(SIFT_F32, 2, (int64_t[]){c->hq, cand}, 3.0f); break;
    case OP_SELECT:
        in->in2 = host_random(SIFT_F32, 2, (int64_t[]){c->lists, cand}, 1.0f);
        if (c->ties)
            for (size_t j = 0; j < in->in2.n; j++) in->in2.f[j] = floorf(in->in2.f[j] * 2.0f) * 0.5f;
        break;
    case OP_GATHER: {
        /* each list: a random ascending subset of [0, N) of length about N/3 (at least 1) */
        int64_t len = n / 3 > 0 ? n / 3 : 1;
        if (len > 4096) len = 4096;
        in->in2 = host_new(SIFT_I32, 2, (int64_t[]){c->lists, len});
        for (int l = 0; l < c->lists; l++) {
            int64_t picked = 0;
            for (int64_t p = 0; p < n && picked < len; p++) {
                /* keep p with probability (needed / remaining): a uniform sorted sample */
                if ((double)rng_uniform() * (double)(n - p) < (double)(len - picked)) in->in2.i[l * len + picked++] = (int32_t)p;
            }
        }
        break;
    }
    default: break;
    }
}

static void inputs_free(case_inputs *in)
{
    host_free(&in->q);
    host_free(&in->in2);
}

/* Runs the case on one backend; outputs in host memory. */
static case_outputs run_case(const backend *b, const test_case *c, const case_inputs *in, const char *cname)
{
    case_outputs res = {0};
    const char *bname = sift_backend_kind_name(b->kind);
    sift_tensor *q = NULL, *k = NULL, *v = NULL, *in2 = NULL, *idx_graph = NULL;
    guarded outf = {0}, outi = {0};
    sift_graph *g = NULL;
    const float scale = attn_scale(c->d);
    const int64_t cand = sift_select_candidates(&c->sel), nsel = sift_select_count(&c->sel);
    sift_status st;

    CHECK_OK(upload(b->ctx, &in->q, &q), cname, bname);
    if (in->k.n || in->k.f) CHECK_OK(upload(b->ctx, &in->k, &k), cname, bname);
    if (in->v.n || in->v.f) CHECK_OK(upload(b->ctx, &in->v, &v), cname, bname);
    if (in->in2.f || in->in2.i) CHECK_OK(upload(b->ctx, &in->in2, &in2), cname, bname);

    switch (c->op) {
    case OP_SCORE:
        CHECK_OK(guarded_new(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, in->end - in->begin}, &outf), cname, bname);
        CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
        CHECK_OK(sift_op_score(g, q, k, in->begin, in->end, scale, outf.view), cname, bname);
        break;
    case OP_SCORE_MAX:
        CHECK_OK(guarded_new(b->ctx, SIFT_F32, 2, (int64_t[]){c->hkv, in->end - in->begin}, &outf), cname, bname);
        CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
        CHECK_OK(sift_op_score_max(g, q, k, in->begin, in->end, scale, outf.view), cname, bname);
        break;
    case OP_VOTE_SUM:
    case OP_VOTE_MAX: {
        const bool sum = c->op == OP_VOTE_SUM;
        CHECK_OK(guarded_new(b->ctx, SIFT_F32, 2, (int64_t[]){sum ? 1 : c->hkv, cand}, &outf), cname, bname);
        CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
        CHECK_OK(sift_op_vote(g, sum ? SIFT_VOTE_SOFTMAX_SUM : SIFT_VOTE_KVHEAD_MAX, in2, outf.view), cname, bname);
        break;
    }
    case OP_SELECT:
        CHECK_OK(guarded_new(b->ctx, SIFT_I32, 2, (int64_t[]){c->lists, nsel}, &outi), cname, bname);
        CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
        CHECK_OK(sift_op_select(g, in2, &c->sel, outi.view), cname, bname);
        break;
    case OP_GATHER:
        CHECK_OK(guarded_new(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->d}, &outf), cname, bname);
        CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
        CHECK_OK(sift_op_gather_attend(g, q, k, v, in2, scale, outf.view), cname, bname);
        break;
    case OP_DENSE:
        CHECK_OK(guarded_new(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->d}, &outf), cname, bname);
        CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
        CHECK_OK(sift_op_dense_attend(g, q, k, v, c->sel.n_ctx, scale, outf.view), cname, bname);
        break;
    case OP_GRAPH: {
        CHECK_OK(guarded_new(b->ctx, SIFT_F32, 2, (int64_t[]){c->hq, c->d}, &outf), cname, bname);
        sift_attn_config cfg = sift_attn_config_default();
        cfg.n_q_heads = c->hq;
        cfg.n_kv_heads = c->hkv;
        cfg.head_dim = c->d;
        cfg.sel = c->sel;
        cfg.vote = c->vote;
        cfg.mode = SIFT_ATTN_SELECT;
        CHECK_OK(sift_attn_graph(b->ctx, &cfg, q, k, v, outf.view, &g, &idx_graph), cname, bname);
        break;
    }
    }
    CHECK_OK(compute_checked(g), cname, bname);
    if (outf.view) {
        res.nf = outf.n;
        res.f = malloc((res.nf ? res.nf : 1) * 4);
        if (!guarded_read(&outf, res.f, &st)) {
            fail(cname, bname, st == SIFT_OK ? "guard region around the output was overwritten" : "read failed");
            goto out;
        }
    }
    if (outi.view) {
        res.ni = outi.n;
        res.i = malloc((res.ni ? res.ni : 1) * 4);
        if (!guarded_read(&outi, res.i, &st)) {
            fail(cname, bname, st == SIFT_OK ? "guard region around the indices was overwritten" : "read failed");
            goto out;
        }
    }
    if (idx_graph) {
        res.ni = (size_t)(sift_tensor_dim(idx_graph, 0) * sift_tensor_dim(idx_graph, 1));
        res.i = malloc((res.ni ? res.ni : 1) * 4);
        CHECK_OK(sift_tensor_read(idx_graph, 0, res.i, res.ni * 4), cname, bname);
    }
    res.ok = true;
out:
    sift_graph_destroy(g);
    guarded_free(&outf);
    guarded_free(&outi);
    sift_tensor_destroy(q);
    sift_tensor_destroy(k);
    sift_tensor_destroy(v);
    sift_tensor_destroy(in2);
    if (!res.ok) outputs_free(&res);
    return res;
}

/* Reference votes of a graph case, for judging index differences on near-ties. */
static float *reference_votes(const backend *cpu, const test_case *c, const case_inputs *in)
{
    const int64_t cand = sift_select_candidates(&c->sel);
    if (cand == 0) return NULL;
    test_case sc = *c;
    sc.op = OP_SCORE;
    case_inputs si = *in;
    si.begin = c->sel.sink;
    si.end = c->sel.sink + cand;
    case_outputs scores = run_case(cpu, &sc, &si, "reference scores");
    if (!scores.ok) return NULL;
    test_case vc = *c;
    vc.op = c->vote == SIFT_VOTE_SOFTMAX_SUM ? OP_VOTE_SUM : OP_VOTE_MAX;
    case_inputs vi = {0};
    vi.q = in->q;
    vi.in2 = (host_tensor){.dtype = SIFT_F32, .ndim = 2, .shape = {c->hq, cand}, .n = scores.nf, .f = scores.f};
    case_outputs votes = run_case(cpu, &vc, &vi, "reference votes");
    outputs_free(&scores);
    float *v = votes.f;
    votes.f = NULL;
    outputs_free(&votes);
    return v;
}

static double bound_for(const test_case *c)
{
    if (c->op == OP_SCORE || c->op == OP_SCORE_MAX || c->op == OP_VOTE_SUM || c->op == OP_VOTE_MAX)
        return 1e-7; /* exact f32 ops */
    return c->kv == SIFT_F16 ? 5e-4 : 1e-7;
}

static void ops_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const test_case *c = cc->params;
    const char *cname = cc->name;
    case_inputs in;
    make_inputs(c, &in);
    case_outputs want = run_case(ref, c, &in, cname);
    if (!want.ok) {
        inputs_free(&in);
        return;
    }
    const int64_t lists = c->op == OP_GRAPH ? (c->vote == SIFT_VOTE_KVHEAD_MAX ? c->hkv : 1) : c->lists;
    const int64_t cand = sift_select_candidates(&c->sel);
    if (dut == ref) { /* alone: the output is finite and the lists are valid */
        if (want.f) check_reference_finite(cname, want.f, want.nf);
        if (want.i) compare_index_lists(cname, "cpu", want.i, want.i, lists, (int64_t)want.ni / lists, c->sel.n_ctx, NULL,
                                        c->sel.sink, cand, c->sel.budget, 1e-4);
    } else {
        if (want.f && !all_finite(want.f, want.nf)) fail(cname, "cpu", "NaN or Inf in the reference output");
        const char *bname = sift_backend_kind_name(dut->kind);
        case_outputs got = run_case(dut, c, &in, cname);
        if (got.ok) {
            if (want.f) compare_floats(cname, bname, want.f, got.f, want.nf, bound_for(c));
            if (want.i) {
                float *votes = c->op == OP_GRAPH ? reference_votes(ref, c, &in) : NULL;
                compare_index_lists(cname, bname, want.i, got.i, lists, (int64_t)want.ni / lists, c->sel.n_ctx, votes,
                                    c->sel.sink, cand, c->sel.budget, 1e-4);
                free(votes);
            }
        }
        outputs_free(&got);
    }
    outputs_free(&want);
    inputs_free(&in);
}

/* SPEC §3: when S + W + k >= N the selected attention equals dense attention, on every backend. */
static void property_select_equals_dense(const conf_case *cc, const backend *ref, const backend *dut)
{
    (void)ref;
    const test_case *c = cc->params;
    const char *cname = cc->name;
    case_inputs in;
    make_inputs(c, &in);
    {
        const char *bname = sift_backend_kind_name(dut->kind);
        test_case dc = *c;
        dc.op = OP_DENSE;
        case_outputs sel = run_case(dut, c, &in, cname), dense = run_case(dut, &dc, &in, cname);
        if (sel.ok && dense.ok) {
            bool all = true;
            const int64_t lists = c->vote == SIFT_VOTE_KVHEAD_MAX ? c->hkv : 1;
            for (int64_t l = 0; l < lists; l++)
                for (int64_t j = 0; j < c->sel.n_ctx; j++) all = all && sel.i[l * c->sel.n_ctx + j] == j;
            if (!all || (int64_t)sel.ni != lists * c->sel.n_ctx) fail(cname, bname, "selection did not keep every token");
            else compare_floats(cname, bname, dense.f, sel.f, dense.nf, 1e-7);
        }
        outputs_free(&sel);
        outputs_free(&dense);
    }
    inputs_free(&in);
}

/* ---- hand-made cases: the reference itself against values worked out by hand ---------------- */

/* select: N = 20, S = 2, W = 3 over C = [2, 17), votes with ties (and a -0 equal to +0). */
typedef struct {
    int64_t k;
    int len;
    int32_t want[19];
} handmade_select_case;

static void handmade_select(const conf_case *cc, const backend *ref, const backend *b)
{
    (void)ref;
    static const float votes[15] = {0.1f, 0.5f, 0.2f, 0.5f, 0.0f, 0.3f, 0.5f, -0.0f,
                                    0.3f, 0.3f, 0.1f, 0.2f, 0.5f, 0.4f, 0.0f};
    const handmade_select_case *hc = cc->params;
    const int64_t k = hc->k;
    const int len = hc->len;
    const int32_t *want = hc->want;
    const char *bname = sift_backend_kind_name(b->kind), *cname = cc->name;
    sift_select_params p = {.n_ctx = 20, .sink = 2, .window = 3, .budget = k};
    sift_tensor *vt = NULL, *it = NULL;
    sift_graph *g = NULL;
    int32_t got[32] = {0};
    if (sift_select_count(&p) != len) {
        fail(cname, bname, "sift_select_count disagrees with the hand count");
        return;
    }
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){1, 15}, &vt), cname, bname);
    CHECK_OK(sift_tensor_write(vt, 0, votes, sizeof votes), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){1, len}, &it), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    CHECK_OK(sift_op_select(g, vt, &p, it), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    CHECK_OK(sift_tensor_read(it, 0, got, (size_t)len * 4), cname, bname);
    int wrong = 0;
    for (int j = 0; j < len; j++) wrong += got[j] != want[j];
    report(cname, bname, "wrong", wrong, 0, wrong == 0);
out:
    sift_graph_destroy(g);
    sift_tensor_destroy(vt);
    sift_tensor_destroy(it);
}

/* select where the range samples mislead: CUDA's select_top places its bins from 1024 evenly
 * spread candidates (at i * |C| / 1024) and counts every key below a floor taken from them in one
 * bin. Here those candidates hold the 1024 largest votes, so the floor lies above the k-th largest
 * key (fewer than k keys reach it) and the select must still come out exact: the top k are the
 * 1024 sampled candidates and the next k - 1024 by vote (votes fall with position off the samples),
 * ties to the lower position. */
static void select_misleading_samples(const conf_case *cc, const backend *ref, const backend *b)
{
    (void)ref;
    const char *bname = sift_backend_kind_name(b->kind), *cname = cc->name;
    enum { CAND = 20000, SAMPLES = 1024, K = 2048 };
    const sift_select_params p = {.n_ctx = CAND, .sink = 0, .window = 0, .budget = K};
    float *votes = malloc(CAND * sizeof *votes);
    bool *sampled = calloc(CAND, sizeof *sampled);
    int32_t *got = malloc(K * sizeof *got);
    sift_tensor *vt = NULL, *it = NULL;
    sift_graph *g = NULL;
    if (!votes || !sampled || !got) {
        fail(cname, bname, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < SAMPLES; i++) sampled[i * CAND / SAMPLES] = true;
    for (int j = 0; j < CAND; j++) votes[j] = sampled[j] ? 1000.0f + (float)j : 1.0f - (float)j / CAND;
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){1, CAND}, &vt), cname, bname);
    CHECK_OK(sift_tensor_write(vt, 0, votes, CAND * sizeof *votes), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){1, K}, &it), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    CHECK_OK(sift_op_select(g, vt, &p, it), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    CHECK_OK(sift_tensor_read(it, 0, got, K * sizeof *got), cname, bname);
    /* the list, ascending: every sampled position, and the first K - SAMPLES others */
    int wrong = 0, at = 0, others = 0;
    for (int j = 0; j < CAND && at < K; j++) {
        if (!sampled[j] && others >= K - SAMPLES) continue;
        others += !sampled[j];
        wrong += got[at++] != j;
    }
    report(cname, bname, "wrong", wrong, 0, wrong == 0 && at == K);
out:
    sift_graph_destroy(g);
    sift_tensor_destroy(vt);
    sift_tensor_destroy(it);
    free(votes);
    free(sampled);
    free(got);
}

/* vote: two heads over three candidates. Head 0 scores {0, ln 2, ln 3} -> {1/6, 2/6, 3/6};
 * head 1 scores {5, 5, 5} -> 1/3 each. Sum: {1/2, 2/3, 5/6}. Max over the two: {5, 5, 5}. */
static void handmade_vote(const conf_case *cc, const backend *ref, const backend *b)
{
    (void)ref;
    const char *bname = sift_backend_kind_name(b->kind), *cname = cc->name;
    const float s[6] = {0.0f, logf(2.0f), logf(3.0f), 5.0f, 5.0f, 5.0f};
    const float want_sum[3] = {0.5f, 2.0f / 3.0f, 5.0f / 6.0f};
    sift_tensor *st = NULL, *vs = NULL, *vm = NULL;
    sift_graph *g = NULL;
    float got_sum[3], got_max[3];
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){2, 3}, &st), cname, bname);
    CHECK_OK(sift_tensor_write(st, 0, s, sizeof s), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){1, 3}, &vs), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){1, 3}, &vm), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    CHECK_OK(sift_op_vote(g, SIFT_VOTE_SOFTMAX_SUM, st, vs), cname, bname);
    CHECK_OK(sift_op_vote(g, SIFT_VOTE_KVHEAD_MAX, st, vm), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    CHECK_OK(sift_tensor_read(vs, 0, got_sum, sizeof got_sum), cname, bname);
    CHECK_OK(sift_tensor_read(vm, 0, got_max, sizeof got_max), cname, bname);
    double err = 0.0;
    for (int j = 0; j < 3; j++) err = fmax(err, fabs(got_sum[j] - want_sum[j]) + fabs(got_max[j] - 5.0f));
    report(cname, bname, "max-err", err, 1e-6, err <= 1e-6);
out:
    sift_graph_destroy(g);
    sift_tensor_destroy(st);
    sift_tensor_destroy(vs);
    sift_tensor_destroy(vm);
}

/* select's warm start (sift_op_select_warm): whatever warm holds, the lists equal the CPU's plain
 * select. One graph runs several times over votes that change a little between runs, as a decode
 * step's do: cold (zeros), warm from the run before, and with the threshold forced above every
 * vote (too few collected) and to the lowest key (everything collected: more than a GPU backend
 * holds once |C| is large). A backend that starts warm counts every run as a hit or a miss, and a
 * run over the same votes as the run before must hit; one that selects in full leaves warm as it
 * is. The CPU never starts warm; CUDA does for several lists where SIFT_CUDA_SELECT_WARM=1, Vulkan
 * where SIFT_VULKAN_TUNE has select_warm=1 (tests/meson.build sets both). */
typedef struct {
    int lists;
    int64_t cand, k, sink, window;
    bool ties; /* votes from a few values: the tie rule at the threshold */
} warm_select_case;

enum { WARM_RUNS = 6 };

/* Run r's votes: one base draw, scaled and nudged a little more each run (ties stay ties). */
static void warm_votes(const warm_select_case *wc, const float *base, int run, float *v)
{
    const size_t n = (size_t)wc->lists * (size_t)wc->cand;
    for (size_t i = 0; i < n; i++) {
        const float drift = wc->ties ? 0.0f : 1e-3f * (float)run * (float)((i * 2654435761u >> 7) % 17) / 17.0f;
        v[i] = base[i] * (1.0f - 0.002f * (float)run) + drift;
    }
}

static void warm_select_check(const conf_case *cc, const backend *ref, const backend *b)
{
    const warm_select_case *wc = cc->params;
    const char *bname = sift_backend_kind_name(b->kind), *cname = cc->name;
    const char *tune = getenv("SIFT_VULKAN_TUNE"), *cuda_warm = getenv("SIFT_CUDA_SELECT_WARM");
    const bool starts_warm = (b->kind == SIFT_BACKEND_CUDA && wc->lists >= 2 && cuda_warm && !strcmp(cuda_warm, "1")) ||
                     (b->kind == SIFT_BACKEND_VULKAN && tune && strstr(tune, "select_warm=1"));
    const sift_select_params p = {.n_ctx = wc->sink + wc->cand + wc->window, .sink = wc->sink, .window = wc->window,
                                  .budget = wc->k};
    const int64_t len = sift_select_count(&p), lists = wc->lists;
    const size_t nv = (size_t)lists * (size_t)wc->cand, ni = (size_t)lists * (size_t)len;
    float *base = malloc(nv * sizeof *base), *v = malloc(nv * sizeof *v);
    int32_t *want = malloc(ni * sizeof *want), *got = malloc(ni * sizeof *got);
    sift_tensor *rv = NULL, *ri = NULL, *dv = NULL, *di = NULL, *dw = NULL;
    sift_graph *rg = NULL, *dg = NULL;
    int32_t warm[8 * SIFT_SELECT_WARM_WORDS] = {0};
    if (wc->lists > 8 || !base || !v || !want || !got) {
        fail(cname, bname, "more than 8 lists, or out of host memory");
        goto out;
    }
    rng_seed_from(cname);
    for (size_t i = 0; i < nv; i++) base[i] = wc->ties ? (float)(rng_next() % 7) * 0.25f : rng_normal();
    CHECK_OK(sift_tensor_create(ref->ctx, SIFT_F32, 2, (int64_t[]){lists, wc->cand}, &rv), cname, bname);
    CHECK_OK(sift_tensor_create(ref->ctx, SIFT_I32, 2, (int64_t[]){lists, len}, &ri), cname, bname);
    CHECK_OK(sift_graph_create(ref->ctx, &rg), cname, bname);
    CHECK_OK(sift_op_select(rg, rv, &p, ri), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 2, (int64_t[]){lists, wc->cand}, &dv), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){lists, len}, &di), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){lists, SIFT_SELECT_WARM_WORDS}, &dw), cname, bname);
    CHECK_OK(sift_tensor_write(dw, 0, warm, (size_t)lists * sizeof(int32_t) * SIFT_SELECT_WARM_WORDS), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &dg), cname, bname);
    CHECK_OK(sift_op_select_warm(dg, dv, dw, &p, di), cname, bname);
    int wrong = 0, bad_counts = 0;
    int64_t hits_before = 0;
    for (int run = 0; run < WARM_RUNS; run++) {
        /* runs 0-2 drift; run 3 repeats run 2's votes; run 4 forces a threshold above every vote;
         * run 5 the lowest key (every candidate collected) */
        warm_votes(wc, base, run < 3 ? run : 2, v);
        CHECK_OK(sift_tensor_write(rv, 0, v, nv * sizeof *v), cname, bname);
        CHECK_OK(sift_tensor_write(dv, 0, v, nv * sizeof *v), cname, bname);
        if (run >= 4) {
            CHECK_OK(sift_tensor_read(dw, 0, warm, (size_t)lists * sizeof(int32_t) * SIFT_SELECT_WARM_WORDS), cname, bname);
            for (int l = 0; l < lists; l++) {
                warm[l * SIFT_SELECT_WARM_WORDS + SIFT_SELECT_WARM_THRESHOLD] = run == 4 ? -1 /* key 0xffffffff */ : 0;
                warm[l * SIFT_SELECT_WARM_WORDS + SIFT_SELECT_WARM_VALID] = 1;
            }
            CHECK_OK(sift_tensor_write(dw, 0, warm, (size_t)lists * sizeof(int32_t) * SIFT_SELECT_WARM_WORDS), cname, bname);
        }
        CHECK_OK(compute_checked(rg), cname, bname);
        CHECK_OK(compute_checked(dg), cname, bname);
        CHECK_OK(sift_tensor_read(ri, 0, want, ni * sizeof *want), cname, bname);
        CHECK_OK(sift_tensor_read(di, 0, got, ni * sizeof *got), cname, bname);
        for (size_t i = 0; i < ni; i++) wrong += got[i] != want[i];
        CHECK_OK(sift_tensor_read(dw, 0, warm, (size_t)lists * sizeof(int32_t) * SIFT_SELECT_WARM_WORDS), cname, bname);
        int64_t hits = 0, misses = 0;
        for (int l = 0; l < lists; l++) {
            hits += warm[l * SIFT_SELECT_WARM_WORDS + SIFT_SELECT_WARM_HITS];
            misses += warm[l * SIFT_SELECT_WARM_WORDS + SIFT_SELECT_WARM_MISSES];
        }
        if (!starts_warm) { /* warm left alone (runs 4 and 5 wrote THRESHOLD and VALID only) */
            bad_counts += hits != 0 || misses != 0;
        } else {
            bad_counts += hits + misses != (int64_t)lists * (run + 1); /* every list's run counted once */
            if (run == 0) bad_counts += misses != lists;               /* cold */
            if (run == 3) bad_counts += hits != hits_before + lists;   /* the same votes again */
            if (run == 4) bad_counts += hits != hits_before;           /* nothing at or above the threshold */
        }
        hits_before = hits;
    }
    report(cname, bname, "wrong", wrong, 0, wrong == 0);
    report(cname, bname, "bad-counts", bad_counts, 0, bad_counts == 0);
out:
    sift_graph_destroy(rg);
    sift_graph_destroy(dg);
    sift_tensor_destroy(rv);
    sift_tensor_destroy(ri);
    sift_tensor_destroy(dv);
    sift_tensor_destroy(di);
    sift_tensor_destroy(dw);
    free(base);
    free(v);
    free(want);
    free(got);
}

static void add_warm_select_cases(int64_t max_n)
{
    static const warm_select_case ws[] = {
        {1, 5000, 64, 4, 16, true},     {8, 3000, 100, 0, 0, true},     {8, 20000, 256, 128, 64, false},
        {1, 30000, 1024, 4, 64, false}, {8, 30000, 512, 16, 64, true},  {1, 300000, 2048, 128, 512, false},
    };
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        if (ws[i].cand > max_n) continue;
        char name[128];
        snprintf(name, sizeof name, "select warm L=%d |C|=%lld k=%lld%s", ws[i].lists, (long long)ws[i].cand,
                 (long long)ws[i].k, ws[i].ties ? " ties" : "");
        registry_add("ops", name, warm_select_check, NULL, &ws[i], sizeof ws[i]);
    }
}

static void add_handmade(void)
{
    const handmade_select_case hs[] = {
        /* k = 4: the 0.5s at candidates 1, 3, 6, 12 -> positions 3, 5, 8, 14 */
        {4, 9, {0, 1, 3, 5, 8, 14, 17, 18, 19}},
        /* k = 6: then 0.4 (candidate 13 -> 15) and the first 0.3 by position (candidate 5 -> 7) */
        {6, 11, {0, 1, 3, 5, 7, 8, 14, 15, 17, 18, 19}},
        /* k = 7: then the second 0.3 (candidate 8 -> 10), not the third (candidate 9) */
        {7, 12, {0, 1, 3, 5, 7, 8, 10, 14, 15, 17, 18, 19}},
        /* k = 14: everything but the last of the three zeros (-0 at candidate 7 ties +0 at 4 and 14) */
        {14, 19, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 18, 19}},
    };
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "hand    select ties k=%lld", (long long)hs[i].k);
        registry_add("ops", name, handmade_select, NULL, &hs[i], sizeof hs[i]);
    }
    registry_add("ops", "hand    vote two heads", handmade_vote, NULL, NULL, 0);
    registry_add("ops", "hand    select |C|=20000 k=2048, the range samples the top", select_misleading_samples, NULL, NULL, 0);
}

static void add_case(const test_case *c)
{
    char name[128];
    describe(c, name, sizeof name);
    registry_add("ops", name, ops_check, NULL, c, sizeof *c);
}

static void add_property(const test_case *c)
{
    char name[128];
    describe(c, name, sizeof name);
    memcpy(name, "prop    ", 8);
    registry_add("ops", name, property_select_equals_dense, NULL, c, sizeof *c);
}

/* ---- the matrix -------------------------------------------------------------------------------- */

/* ---- edge cases ------------------------------------------------------------------------------ */

typedef struct {
    sift_tensor *parent, *view;
} placed;

/* A tensor at byte offset `off` inside a larger one (off = 0: a plain tensor). */
static placed place(sift_context *ctx, sift_dtype dt, int nd, const int64_t *shape, size_t off, const void *data)
{
    placed p = {0};
    size_t n = sift_dtype_size(dt);
    for (int i = 0; i < nd; i++) n *= (size_t)shape[i];
    if (off) {
        const int64_t total = (int64_t)((n + off) / sift_dtype_size(dt)) + 1;
        TRY(sift_tensor_create(ctx, dt, 1, &total, &p.parent));
        TRY(sift_tensor_view(p.parent, dt, nd, shape, off, &p.view));
    } else {
        TRY(sift_tensor_create(ctx, dt, nd, shape, &p.view));
    }
    if (data && n) TRY(sift_tensor_write(p.view, 0, data, n));
    return p;
}
static void unplace(placed *p)
{
    sift_tensor_destroy(p->view);
    sift_tensor_destroy(p->parent);
}

/* The reference's numbers against the backend's: named by the check, reported under the case's backend. */
static void check(const char *what, const float *ref, const float *got, size_t n, double bound)
{
    compare_floats(what, running_backend, ref, got, n, bound);
}

static void check_idx(const char *what, const int32_t *ref, const int32_t *got, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += ref[i] != got[i];
    report(what, running_backend, "wrong", (double)bad, 0.0, bad == 0);
}

/* One layer's inputs, the same on both contexts. */
typedef struct {
    int hq, hkv, d;
    int64_t ncap;
    sift_dtype dt;
    float *q;
    void *k, *v; /* in dt */
} layer;

static void *kv_data(sift_dtype dt, size_t n)
{
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = roundf((2.0f * rng_uniform() - 1.0f) * 2.0f * 256.0f) / 256.0f;
    if (dt == SIFT_F32) return f;
    uint16_t *h = malloc(n * 2);
    sift_f32_to_f16(h, f, n);
    free(f);
    return h;
}

static layer make_layer(int hq, int hkv, int d, int64_t ncap, sift_dtype dt)
{
    layer L = {hq, hkv, d, ncap, dt, malloc((size_t)hq * d * sizeof(float)), NULL, NULL};
    for (int i = 0; i < hq * d; i++) L.q[i] = (2.0f * rng_uniform() - 1.0f);
    const size_t n = (size_t)hkv * (size_t)ncap * (size_t)d;
    L.k = kv_data(dt, n);
    L.v = kv_data(dt, n);
    return L;
}

/* score, gather (given lists) and dense on one context; K/V placed at kv_off bytes. */
static void run_ops(sift_context *ctx, const layer *L, size_t kv_off, const int32_t *idx, int lists, int64_t len,
                    int64_t n_ctx, float *scores, float *gathered, float *dense)
{
    const int64_t qs[2] = {L->hq, L->d}, kvs[3] = {L->hkv, L->ncap, L->d};
    const int64_t ss[2] = {L->hq, n_ctx - 3}, is[2] = {lists, len};
    placed q = place(ctx, SIFT_F32, 2, qs, 0, L->q), k = place(ctx, L->dt, 3, kvs, kv_off, L->k),
           v = place(ctx, L->dt, 3, kvs, kv_off, L->v), ix = place(ctx, SIFT_I32, 2, is, 0, idx),
           sc = place(ctx, SIFT_F32, 2, ss, 4, NULL), o1 = place(ctx, SIFT_F32, 2, qs, 4, NULL),
           o2 = place(ctx, SIFT_F32, 2, qs, 0, NULL);
    sift_graph *g;
    TRY(sift_graph_create(ctx, &g));
    const float scale = 1.0f / sqrtf((float)L->d);
    TRY(sift_op_score(g, q.view, k.view, 3, n_ctx, scale, sc.view));
    TRY(sift_op_gather_attend(g, q.view, k.view, v.view, ix.view, scale, o1.view));
    TRY(sift_op_dense_attend(g, q.view, k.view, v.view, n_ctx, scale, o2.view));
    TRY(compute_checked(g));
    TRY(sift_tensor_read(sc.view, 0, scores, (size_t)L->hq * (size_t)(n_ctx - 3) * 4));
    TRY(sift_tensor_read(o1.view, 0, gathered, (size_t)L->hq * L->d * 4));
    TRY(sift_tensor_read(o2.view, 0, dense, (size_t)L->hq * L->d * 4));
    sift_graph_destroy(g);
    placed *all[] = {&q, &k, &v, &ix, &sc, &o1, &o2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) unplace(all[i]);
}

static void ops_case(sift_context *cpu, sift_context *dut, int hq, int hkv, int d, sift_dtype dt, int64_t n,
                     size_t kv_off, int lists)
{
    layer L = make_layer(hq, hkv, d, n + 5, dt);
    const int64_t len = 3 * n / 2 + 1; /* repeats and any order */
    int32_t *idx = malloc((size_t)lists * (size_t)len * sizeof *idx);
    for (int64_t i = 0; i < lists * len; i++) idx[i] = (int32_t)(rng_next() % (uint64_t)n);
    const size_t ns = (size_t)hq * (size_t)(n - 3), no = (size_t)hq * d;
    float *s0 = malloc(ns * 4), *s1 = malloc(ns * 4), *g0 = malloc(no * 4), *g1 = malloc(no * 4), *d0 = malloc(no * 4),
          *d1 = malloc(no * 4);
    run_ops(cpu, &L, kv_off, idx, lists, len, n, s0, g0, d0);
    run_ops(dut, &L, kv_off, idx, lists, len, n, s1, g1, d1);
    char name[160];
    const double b = dt == SIFT_F16 ? 5e-4 : 1e-7;
    snprintf(name, sizeof name, "score  H=%d/%d D=%d %s N=%lld kv_off=%zu", hq, hkv, d, sift_dtype_name(dt), (long long)n, kv_off);
    check(name, s0, s1, ns, 1e-7);
    snprintf(name, sizeof name, "gather H=%d/%d D=%d %s N=%lld kv_off=%zu lists=%d len=%lld", hq, hkv, d, sift_dtype_name(dt),
             (long long)n, kv_off, lists, (long long)len);
    check(name, g0, g1, no, b);
    snprintf(name, sizeof name, "dense  H=%d/%d D=%d %s N=%lld kv_off=%zu", hq, hkv, d, sift_dtype_name(dt), (long long)n, kv_off);
    check(name, d0, d1, no, b);
    free(idx), free(s0), free(s1), free(g0), free(g1), free(d0), free(d1);
    free(L.q), free(L.k), free(L.v);
}

/* The decode graph computed `runs` times (untimed, timed node by node and timed as one in turn): same
 * output each time, and a span that is a time. */
static void repeat_case(sift_context *cpu, sift_context *dut, int hq, int hkv, int64_t n, sift_vote_mode vote, int runs)
{
    const int d = 128;
    layer L = make_layer(hq, hkv, d, n, SIFT_F16);
    sift_attn_config cfg = sift_attn_config_default();
    cfg.n_q_heads = hq;
    cfg.n_kv_heads = hkv;
    cfg.head_dim = d;
    cfg.sel = (sift_select_params){n, 4, 16, 37};
    cfg.vote = vote;
    cfg.mode = SIFT_ATTN_SELECT;
    const int64_t lists = vote == SIFT_VOTE_KVHEAD_MAX ? hkv : 1, cnt = sift_select_count(&cfg.sel);
    float *ref = malloc((size_t)hq * d * 4), *got = malloc((size_t)hq * d * 4);
    int32_t *iref = malloc((size_t)(lists * cnt) * 4), *igot = malloc((size_t)(lists * cnt) * 4);
    sift_context *ctxs[2] = {cpu, dut};
    for (int c = 0; c < 2; c++) {
        const int64_t qs[2] = {hq, d}, kvs[3] = {hkv, n, d};
        placed q = place(ctxs[c], SIFT_F32, 2, qs, 0, L.q), k = place(ctxs[c], L.dt, 3, kvs, 0, L.k),
               v = place(ctxs[c], L.dt, 3, kvs, 0, L.v), o = place(ctxs[c], SIFT_F32, 2, qs, 0, NULL);
        sift_graph *g;
        sift_tensor *idx;
        TRY(sift_attn_graph(ctxs[c], &cfg, q.view, k.view, v.view, o.view, &g, &idx));
        for (int r = 0; r < (c ? runs : 1); r++) {
            double us[8], span = -1.0;
            if (r % 3 == 1) TRY(sift_graph_compute_timed(g, us));
            else if (r % 3 == 2) TRY(sift_graph_compute_span(g, &span));
            else TRY(compute_checked(g));
            if (r % 3 == 2) {
                char name[160];
                snprintf(name, sizeof name, "repeat run %d H=%d/%d N=%lld span (us)", r, hq, hkv, (long long)n);
                report(name, running_backend, "span-us", span, 0.0, span > 0.0 && span < 1e9);
            }
            float *dst = c ? got : ref;
            int32_t *idst = c ? igot : iref;
            TRY(sift_tensor_read(o.view, 0, dst, (size_t)hq * d * 4));
            TRY(sift_tensor_read(idx, 0, idst, (size_t)(lists * cnt) * 4));
            if (c) {
                char name[160];
                snprintf(name, sizeof name, "repeat run %d H=%d/%d N=%lld %s indices", r, hq, hkv, (long long)n,
                         vote == SIFT_VOTE_KVHEAD_MAX ? "kvhead-max" : "softmax-sum");
                check_idx(name, iref, igot, (size_t)(lists * cnt));
                snprintf(name, sizeof name, "repeat run %d H=%d/%d N=%lld output", r, hq, hkv, (long long)n);
                check(name, ref, got, (size_t)hq * d, 5e-4);
            }
        }
        sift_graph_destroy(g);
        unplace(&q), unplace(&k), unplace(&v), unplace(&o);
    }
    free(ref), free(got), free(iref), free(igot), free(L.q), free(L.k), free(L.v);
}

/* select alone on given votes: lists x cand, values drawn from few levels (ties), -0 among +0;
 * levels 0: a spike, three in four votes distinct floats within 1% above 1, the rest spread
 * over [0, 100). */
static void select_case(sift_context *cpu, sift_context *dut, int lists, int64_t cand, int64_t S, int64_t W,
                        int64_t k, int levels)
{
    const sift_select_params p = {cand + S + W, S, W, k};
    const int64_t cnt = sift_select_count(&p), vs[2] = {lists, cand}, is[2] = {lists, cnt};
    float *v = malloc((size_t)(lists * cand) * 4);
    for (int64_t i = 0; i < lists * cand; i++) {
        const uint64_t r = rng_next();
        if (levels == 0) {
            v[i] = (r & 3) ? 1.0f + (float)((r >> 2) % 60000) * 0x1p-23f : (float)((r >> 2) % 100000) * 1e-3f;
            continue;
        }
        const int lv = (int)((r >> 1) % (uint64_t)levels);
        v[i] = lv == 0 ? ((r & 1) ? -0.0f : 0.0f) : (float)(lv - levels / 2) * 0.125f;
    }
    int32_t *r[2];
    sift_context *ctxs[2] = {cpu, dut};
    for (int c = 0; c < 2; c++) {
        r[c] = malloc((size_t)(lists * cnt + 1) * 4);
        placed vt = place(ctxs[c], SIFT_F32, 2, vs, 0, v), ix = place(ctxs[c], SIFT_I32, 2, is, 4, NULL);
        sift_graph *g;
        TRY(sift_graph_create(ctxs[c], &g));
        TRY(sift_op_select(g, vt.view, &p, ix.view));
        TRY(compute_checked(g));
        TRY(compute_checked(g)); /* twice: the histograms carried between runs */
        if (lists * cnt > 0) TRY(sift_tensor_read(ix.view, 0, r[c], (size_t)(lists * cnt) * 4));
        sift_graph_destroy(g);
        unplace(&vt), unplace(&ix);
    }
    char name[160];
    snprintf(name, sizeof name, "select lists=%d |C|=%lld S=%lld W=%lld k=%lld levels=%d", lists, (long long)cand,
             (long long)S, (long long)W, (long long)k, levels);
    check_idx(name, r[0], r[1], (size_t)(lists * cnt));
    free(r[0]), free(r[1]), free(v);
}

/* vote alone over m scores (several partial blocks). */
static void vote_case(sift_context *cpu, sift_context *dut, int hq, int hkv, int64_t m, sift_vote_mode mode)
{
    const int64_t ss[2] = {hq, m}, lists = mode == SIFT_VOTE_KVHEAD_MAX ? hkv : 1, vs[2] = {lists, m};
    float *s = malloc((size_t)(hq * m) * 4), *r[2];
    for (int64_t i = 0; i < hq * m; i++) s[i] = 4.0f * (2.0f * rng_uniform() - 1.0f);
    sift_context *ctxs[2] = {cpu, dut};
    for (int c = 0; c < 2; c++) {
        r[c] = malloc((size_t)(lists * m) * 4);
        placed st = place(ctxs[c], SIFT_F32, 2, ss, 0, s), vt = place(ctxs[c], SIFT_F32, 2, vs, 8, NULL);
        sift_graph *g;
        TRY(sift_graph_create(ctxs[c], &g));
        TRY(sift_op_vote(g, mode, st.view, vt.view));
        TRY(compute_checked(g));
        TRY(sift_tensor_read(vt.view, 0, r[c], (size_t)(lists * m) * 4));
        sift_graph_destroy(g);
        unplace(&st), unplace(&vt);
    }
    char name[160];
    snprintf(name, sizeof name, "vote %s H=%d/%d M=%lld", mode == SIFT_VOTE_KVHEAD_MAX ? "kvhead-max" : "softmax-sum", hq,
             hkv, (long long)m);
    check(name, r[0], r[1], (size_t)(lists * m), 1e-7);
    free(r[0]), free(r[1]), free(s);
}

typedef enum { E_OPS, E_REPEAT, E_SELECT, E_VOTE } edge_kind;
typedef struct {
    edge_kind kind;
    int hq, hkv, d, lists, levels;
    sift_dtype dt;
    int64_t n, s, w, k;
    size_t kv_off;
    sift_vote_mode vote;
} edge_case;

static void edge_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const edge_case *e = cc->params;
    switch (e->kind) {
    case E_OPS: ops_case(ref->ctx, dut->ctx, e->hq, e->hkv, e->d, e->dt, e->n, e->kv_off, e->lists); break;
    case E_REPEAT: repeat_case(ref->ctx, dut->ctx, e->hq, e->hkv, e->n, e->vote, 6); break;
    case E_SELECT: select_case(ref->ctx, dut->ctx, e->lists, e->n, e->s, e->w, e->k, e->levels); break;
    case E_VOTE: vote_case(ref->ctx, dut->ctx, e->hq, e->hkv, e->n, e->vote); break;
    }
}

/* Edge cases (first written for the CUDA emulator; every backend runs them): K/V views at
 * offsets that are not 16-byte aligned, query-head groups larger than 8 and odd ones, one graph
 * computed several times (untimed and timed: graph replay, carried histograms), gather lists
 * with repeated and unsorted positions, select and vote over several blocks of candidates with
 * heavy ties and signed zeros, k at block boundaries. */
static void add_edge_cases(void)
{
    const edge_case es[] = {
        /* unaligned K/V views (2 and 4 bytes off), both dtypes and both D */
        {E_OPS, 8, 2, 128, 1, 0, SIFT_F16, 300, 0, 0, 0, 2, 0},
        {E_OPS, 8, 2, 64, 2, 0, SIFT_F16, 131, 0, 0, 0, 6, 0},
        {E_OPS, 4, 4, 128, 4, 0, SIFT_F32, 97, 0, 0, 0, 4, 0},
        {E_OPS, 6, 3, 64, 1, 0, SIFT_F32, 70, 0, 0, 0, 12, 0},
        /* head groups: 12 (8 + 4), 18 (8 + 8 + 2), 5 and 7 (padded to 8), 3 (padded to 4), 2, 1 */
        {E_OPS, 24, 2, 128, 2, 0, SIFT_F16, 200, 0, 0, 0, 0, 0},
        {E_OPS, 18, 1, 64, 1, 0, SIFT_F32, 77, 0, 0, 0, 0, 0},
        {E_OPS, 5, 1, 128, 1, 0, SIFT_F16, 150, 0, 0, 0, 0, 0},
        {E_OPS, 14, 2, 64, 2, 0, SIFT_F16, 90, 0, 0, 0, 0, 0},
        {E_OPS, 3, 1, 128, 1, 0, SIFT_F32, 66, 0, 0, 0, 0, 0},
        {E_OPS, 4, 2, 64, 2, 0, SIFT_F16, 40, 0, 0, 0, 0, 0},
        /* repeated runs of one graph, radix path (|C| > k) */
        {E_REPEAT, 8, 2, 128, 0, 0, SIFT_F16, 600, 0, 0, 0, 0, SIFT_VOTE_SOFTMAX_SUM},
        {E_REPEAT, 8, 2, 128, 0, 0, SIFT_F16, 600, 0, 0, 0, 0, SIFT_VOTE_KVHEAD_MAX},
        /* select and vote over several blocks of 4096 candidates (n: candidates) */
        {E_SELECT, 0, 0, 0, 1, 7, SIFT_F32, 4096 * 2 + 1, 3, 5, 4096, 0, 0},
        {E_SELECT, 0, 0, 0, 3, 3, SIFT_F32, 9000, 0, 0, 4095, 0, 0},
        {E_SELECT, 0, 0, 0, 2, 50, SIFT_F32, 12289, 128, 512, 12288, 0, 0},
        {E_SELECT, 0, 0, 0, 2, 2, SIFT_F32, 10000, 1, 1, 1, 0, 0},
        {E_SELECT, 0, 0, 0, 1, 1, SIFT_F32, 10000, 0, 7, 5000, 0, 0}, /* all equal: the first k by position */
        {E_SELECT, 0, 0, 0, 1, 1000, SIFT_F32, 20000, 4, 0, 2048, 0, 0},
        /* several lists side by side, blocks sized by the lists (the Vulkan planner's ~1024
         * workgroups in all): blocks of several batches of 8 items per invocation, one block per
         * list, ties across batches, k next to |C| */
        {E_SELECT, 0, 0, 0, 8, 1000, SIFT_F32, 300000, 128, 512, 2048, 0, 0},
        {E_SELECT, 0, 0, 0, 128, 7, SIFT_F32, 20000, 0, 3, 1000, 0, 0},
        {E_SELECT, 0, 0, 0, 1100, 50, SIFT_F32, 3000, 2, 2, 300, 0, 0},
        {E_SELECT, 0, 0, 0, 16, 2, SIFT_F32, 40000, 0, 0, 39999, 0, 0},
        {E_SELECT, 0, 0, 0, 5, 3, SIFT_F32, 70001, 1, 0, 35000, 0, 0},
        /* more than 65536 candidates near the k-th largest vote: all equal to it (one value; a
         * third of them) or a spike of close values */
        {E_SELECT, 0, 0, 0, 2, 1, SIFT_F32, 150000, 0, 0, 50000, 0, 0},
        {E_SELECT, 0, 0, 0, 1, 3, SIFT_F32, 400000, 2, 9, 1000, 0, 0},
        {E_SELECT, 0, 0, 0, 1, 0, SIFT_F32, 200000, 4, 4, 80000, 0, 0},
        {E_SELECT, 0, 0, 0, 2, 0, SIFT_F32, 100000, 0, 0, 2048, 0, 0},
        {E_VOTE, 8, 2, 0, 0, 0, SIFT_F32, 9001, 0, 0, 0, 0, SIFT_VOTE_SOFTMAX_SUM},
        {E_VOTE, 4, 4, 0, 0, 0, SIFT_F32, 4097, 0, 0, 0, 0, SIFT_VOTE_KVHEAD_MAX},
        {E_VOTE, 28, 4, 0, 0, 0, SIFT_F32, 12000, 0, 0, 0, 0, SIFT_VOTE_SOFTMAX_SUM},
    };
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++) {
        const edge_case *e = &es[i];
        char name[128];
        switch (e->kind) {
        case E_OPS:
            snprintf(name, sizeof name, "edge    score/gather/dense H=%d/%d D=%d %s N=%lld kv_off=%zu L=%d", e->hq, e->hkv,
                     e->d, sift_dtype_name(e->dt), (long long)e->n, e->kv_off, e->lists);
            break;
        case E_REPEAT:
            snprintf(name, sizeof name, "edge    graph run 6 times H=%d/%d N=%lld %s", e->hq, e->hkv, (long long)e->n,
                     e->vote == SIFT_VOTE_KVHEAD_MAX ? "kvhead-max" : "softmax-sum");
            break;
        case E_SELECT:
            snprintf(name, sizeof name, "edge    select L=%d |C|=%lld S=%lld W=%lld k=%lld levels=%d", e->lists,
                     (long long)e->n, (long long)e->s, (long long)e->w, (long long)e->k, e->levels);
            break;
        case E_VOTE:
            snprintf(name, sizeof name, "edge    vote %s H=%d/%d M=%lld",
                     e->vote == SIFT_VOTE_KVHEAD_MAX ? "kvhead-max" : "softmax-sum", e->hq, e->hkv, (long long)e->n);
            break;
        }
        registry_add("ops", name, edge_check, NULL, e, sizeof *e);
    }
}

/* ---- TokenButler's pieces: neighbour fetch, and gather lists with skipped entries ------------- */

/* neighbor_fetch on two hand-made lists, N = 20, S = 2, W = 3, k = 5 (candidates [2, 17)): a
 * neighbour already chosen, one past the candidates (the window's first position), new ones. */
static void handmade_neighbors(const conf_case *cc, const backend *ref, const backend *b)
{
    (void)ref;
    const char *bname = sift_backend_kind_name(b->kind), *cname = cc->name;
    const sift_select_params p = {.n_ctx = 20, .sink = 2, .window = 3, .budget = 5};
    static const int32_t in[2][10] = {{0, 1, 3, 4, 8, 15, 16, 17, 18, 19}, {0, 1, 2, 5, 6, 7, 10, 17, 18, 19}};
    static const int32_t want[2][15] = {{0, 1, 3, 4, 8, 15, 16, -1, 5, 9, -1, -1, 17, 18, 19},
                                        {0, 1, 2, 5, 6, 7, 10, 3, -1, -1, 8, 11, 17, 18, 19}};
    sift_tensor *it = NULL, *ot = NULL;
    sift_graph *g = NULL;
    int32_t got[2][15];
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){2, 10}, &it), cname, bname);
    CHECK_OK(sift_tensor_write(it, 0, in, sizeof in), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, (int64_t[]){2, 15}, &ot), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    CHECK_OK(sift_op_neighbor_fetch(g, it, &p, ot), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    CHECK_OK(sift_tensor_read(ot, 0, got, sizeof got), cname, bname);
    int wrong = 0;
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < 15; j++) wrong += got[l][j] != want[l][j];
    report(cname, bname, "wrong", wrong, 0, wrong == 0);
out:
    sift_graph_destroy(g);
    sift_tensor_destroy(it);
    sift_tensor_destroy(ot);
}

typedef struct {
    int lists;
    int64_t cand, s, w, k;
} neighbor_case;

/* select then neighbor_fetch over random votes of several blocks, against the CPU. */
static void neighbor_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const neighbor_case *e = cc->params;
    const sift_select_params p = {e->cand + e->s + e->w, e->s, e->w, e->k};
    const int64_t cnt = sift_select_count(&p), out_len = cnt + (e->k < e->cand ? e->k : e->cand);
    const int64_t vs[2] = {e->lists, e->cand}, is[2] = {e->lists, cnt}, os[2] = {e->lists, out_len};
    float *v = malloc((size_t)(e->lists * e->cand) * 4);
    /* runs of high votes, so that chosen positions often neighbour each other */
    for (int64_t i = 0; i < e->lists * e->cand; i++) v[i] = (i / 3) % 5 == 0 ? 1.0f + rng_uniform() : rng_uniform();
    int32_t *r[2];
    sift_context *ctxs[2] = {ref->ctx, dut->ctx};
    for (int c = 0; c < 2; c++) {
        r[c] = malloc((size_t)(e->lists * out_len + 1) * 4);
        placed vt = place(ctxs[c], SIFT_F32, 2, vs, 0, v), ix = place(ctxs[c], SIFT_I32, 2, is, 4, NULL);
        placed ox = place(ctxs[c], SIFT_I32, 2, os, 8, NULL);
        sift_graph *g;
        TRY(sift_graph_create(ctxs[c], &g));
        TRY(sift_op_select(g, vt.view, &p, ix.view));
        TRY(sift_op_neighbor_fetch(g, ix.view, &p, ox.view));
        TRY(compute_checked(g));
        TRY(sift_tensor_read(ox.view, 0, r[c], (size_t)(e->lists * out_len) * 4));
        sift_graph_destroy(g);
        unplace(&vt), unplace(&ix), unplace(&ox);
    }
    check_idx(cc->name, r[0], r[1], (size_t)(e->lists * out_len));
    free(r[0]), free(r[1]), free(v);
}

/* gather_attend over lists with entries of -1 (and past the cache) equals gather_attend over the
 * same lists without them, and the CPU's. */
static void skip_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    (void)cc;
    const int hq = 8, hkv = 2, d = 64;
    const int64_t n = 300, len = 40, kvs[3] = {hkv, n, d}, qs[2] = {hq, d};
    float *q = malloc((size_t)(hq * d) * 4), *k = malloc((size_t)(hkv * n * d) * 4), *v = malloc((size_t)(hkv * n * d) * 4);
    for (int64_t i = 0; i < hq * d; i++) q[i] = 2.0f * rng_uniform() - 1.0f;
    for (int64_t i = 0; i < hkv * n * d; i++) k[i] = 2.0f * rng_uniform() - 1.0f, v[i] = 2.0f * rng_uniform() - 1.0f;
    int32_t with[hkv][len], without[hkv][len];
    int64_t kept[hkv];
    for (int l = 0; l < hkv; l++) {
        kept[l] = 0;
        for (int64_t j = 0; j < len; j++) {
            const bool skip = j % 4 == 1 || j == len - 1;
            with[l][j] = skip ? (j % 8 == 1 ? (int32_t)n + 5 : -1) : (int32_t)((j * 7 + l * 13) % n);
            if (!skip) without[l][kept[l]++] = with[l][j];
        }
        for (int64_t j = kept[l]; j < len; j++) without[l][j] = without[l][j - kept[l]]; /* padding, not read */
    }
    float *r[3];
    const backend *runs[3] = {ref, dut, dut};
    for (int c = 0; c < 3; c++) {
        sift_context *ctx = runs[c]->ctx;
        r[c] = malloc((size_t)(hq * d) * 4);
        const int64_t ls[2] = {hkv, c < 2 ? len : kept[0]};
        int32_t *lists = malloc((size_t)(hkv * len) * 4);
        for (int l = 0; l < hkv; l++)
            memcpy(lists + l * ls[1], c < 2 ? with[l] : without[l], (size_t)ls[1] * 4);
        placed qt = place(ctx, SIFT_F32, 2, qs, 0, q), kt = place(ctx, SIFT_F32, 2 + 1, kvs, 0, k);
        placed vt = place(ctx, SIFT_F32, 3, kvs, 0, v), it = place(ctx, SIFT_I32, 2, ls, 0, lists);
        placed ot = place(ctx, SIFT_F32, 2, qs, 4, NULL);
        sift_graph *g;
        TRY(sift_graph_create(ctx, &g));
        TRY(sift_op_gather_attend(g, qt.view, kt.view, vt.view, it.view, 0.125f, ot.view));
        TRY(compute_checked(g));
        TRY(sift_tensor_read(ot.view, 0, r[c], (size_t)(hq * d) * 4));
        sift_graph_destroy(g);
        unplace(&qt), unplace(&kt), unplace(&vt), unplace(&it), unplace(&ot);
        free(lists);
    }
    if (kept[0] != kept[1]) fail(cc->name, running_backend, "the lists keep different counts");
    check("gather skips -1: against the CPU", r[0], r[1], (size_t)(hq * d), 1e-7);
    check("gather skips -1: against the list without them", r[2], r[1], (size_t)(hq * d), 1e-7);
    free(r[0]), free(r[1]), free(r[2]), free(q), free(k), free(v);
}

/* score_max equals score then vote(KVHEAD_MAX) on the backend under test, paged keys of d' = 16. */
static void score_max_property(const conf_case *cc, const backend *ref, const backend *dut)
{
    (void)ref;
    const int hq = 32, hkv = 8, d = 16;
    const int64_t n = 5000, page = 256, pages = (n + page - 1) / page, begin = 128, end = n - 512;
    const int64_t pool_shape[3] = {hkv, (pages + 3) * page, d}, qs[2] = {hq, d}, ps[1] = {pages};
    float *q = malloc((size_t)(hq * d) * 4);
    for (int64_t i = 0; i < hq * d; i++) q[i] = 2.0f * rng_uniform() - 1.0f;
    host_tensor pool = host_random(SIFT_F16, 3, pool_shape, 1.0f);
    int32_t table[64];
    for (int64_t p = 0; p < pages; p++) table[p] = (int32_t)((p * 5 + 2) % (pages + 3)); /* shuffled pages */
    sift_context *ctx = dut->ctx;
    const int64_t m = end - begin;
    float *r[2] = {malloc((size_t)(hkv * m) * 4), malloc((size_t)(hkv * m) * 4)};
    sift_tensor *qt = NULL, *pt = NULL, *tt = NULL, *kv = NULL, *sc = NULL, *u[2] = {0};
    sift_graph *g = NULL;
    TRY(upload(ctx, &pool, &pt));
    TRY(sift_tensor_create(ctx, SIFT_F32, 2, qs, &qt));
    TRY(sift_tensor_write(qt, 0, q, (size_t)(hq * d) * 4));
    TRY(sift_tensor_create(ctx, SIFT_I32, 1, ps, &tt));
    TRY(sift_tensor_write(tt, 0, table, (size_t)pages * 4));
    TRY(sift_tensor_paged_view(pt, tt, page, &kv));
    TRY(sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, m}, &sc));
    for (int i = 0; i < 2; i++) TRY(sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hkv, m}, &u[i]));
    TRY(sift_graph_create(ctx, &g));
    TRY(sift_op_score_max(g, qt, kv, begin, end, 0.25f, u[0]));
    TRY(sift_op_score(g, qt, kv, begin, end, 0.25f, sc));
    TRY(sift_op_vote(g, SIFT_VOTE_KVHEAD_MAX, sc, u[1]));
    TRY(compute_checked(g));
    for (int i = 0; i < 2; i++) TRY(sift_tensor_read(u[i], 0, r[i], (size_t)(hkv * m) * 4));
    check(cc->name, r[1], r[0], (size_t)(hkv * m), 1e-7);
    sift_graph_destroy(g);
    sift_tensor_destroy(kv), sift_tensor_destroy(u[0]), sift_tensor_destroy(u[1]), sift_tensor_destroy(sc);
    sift_tensor_destroy(tt), sift_tensor_destroy(pt), sift_tensor_destroy(qt);
    host_free(&pool);
    free(q), free(r[0]), free(r[1]);
}

/* score_max against the CPU on the shapes its kernels tell apart: short rows (D <= 32, one
 * invocation per row) and longer ones, groups from 1 to 32 heads, K placed at an offset that is not
 * 16-byte aligned, K paged (shuffled pages, one of them unmapped: its rows score 0), several
 * workgroups of positions with a partial last one, and under a predicate (set: the output keeps
 * its fill; clear: computed). */
typedef struct {
    int hq, hkv, d;
    sift_dtype dt;
    int64_t n, begin, end;
    size_t kv_off; /* K placed this many bytes into its storage */
    int64_t page;  /* > 0: K a paged view with pages of this many rows */
    bool skip;     /* run under a predicate, set then clear */
} smax_case;

static void smax_run(sift_context *ctx, const smax_case *e, const float *q, const host_tensor *k, bool flagged, float *out)
{
    const int64_t qs[2] = {e->hq, e->d}, us[2] = {e->hkv, e->end - e->begin};
    const size_t un = (size_t)(us[0] * us[1]);
    placed qt = place(ctx, SIFT_F32, 2, qs, 0, q), ut = place(ctx, SIFT_F32, 2, us, 4, NULL);
    sift_tensor *kv = NULL, *pool = NULL, *table = NULL, *flag = NULL;
    placed kp = {0};
    const size_t elt = sift_dtype_size(e->dt), row = (size_t)e->d * elt;
    if (e->page > 0) {
        /* pages in reverse order in a pool with two spare pages; page 1 of the view unmapped (-1) */
        const int64_t pages = (e->n + e->page - 1) / e->page, pool_pages = pages + 2;
        int32_t *map = malloc((size_t)pages * sizeof *map);
        unsigned char *bytes = calloc((size_t)(e->hkv * pool_pages * e->page), row);
        const unsigned char *src = k->h ? (const unsigned char *)k->h : (const unsigned char *)k->f;
        for (int64_t p = 0; p < pages; p++) map[p] = p == 1 ? -1 : (int32_t)(pool_pages - 1 - p);
        for (int64_t g = 0; g < e->hkv; g++)
            for (int64_t j = 0; j < e->n; j++)
                if (map[j / e->page] >= 0)
                    memcpy(bytes + ((size_t)(g * pool_pages + map[j / e->page]) * (size_t)e->page + (size_t)(j % e->page)) * row,
                           src + (size_t)(g * e->n + j) * row, row);
        TRY(sift_tensor_create(ctx, e->dt, 3, (int64_t[]){e->hkv, pool_pages * e->page, e->d}, &pool));
        TRY(sift_tensor_write(pool, 0, bytes, (size_t)(e->hkv * pool_pages * e->page) * row));
        TRY(sift_tensor_create(ctx, SIFT_I32, 1, &pages, &table));
        TRY(sift_tensor_write(table, 0, map, (size_t)pages * sizeof *map));
        TRY(sift_tensor_paged_view(pool, table, e->page, &kv));
        free(map), free(bytes);
    } else {
        kp = place(ctx, e->dt, 3, k->shape, e->kv_off, k->h ? (const void *)k->h : (const void *)k->f);
        kv = kp.view;
    }
    sift_graph *g;
    TRY(sift_graph_create(ctx, &g));
    if (e->skip) {
        float fill[2] = {1.0f, 0.0f};
        TRY(sift_tensor_create(ctx, SIFT_F32, 1, (int64_t[]){2}, &flag));
        TRY(sift_tensor_write(flag, 0, fill, sizeof fill));
        TRY(sift_graph_skip_if(g, flag, flagged ? 0 : 1));
        float *minus = malloc(un * 4);
        for (size_t i = 0; i < un; i++) minus[i] = -5.0f;
        TRY(sift_tensor_write(ut.view, 0, minus, un * 4));
        free(minus);
    }
    TRY(sift_op_score_max(g, qt.view, kv, e->begin, e->end, 1.0f / sqrtf((float)e->d), ut.view));
    TRY(compute_checked(g));
    TRY(compute_checked(g)); /* twice: a recording replayed */
    TRY(sift_tensor_read(ut.view, 0, out, un * 4));
    sift_graph_destroy(g);
    if (e->page > 0) sift_tensor_destroy(kv);
    sift_tensor_destroy(pool), sift_tensor_destroy(table), sift_tensor_destroy(flag);
    unplace(&kp), unplace(&qt), unplace(&ut);
}

static void smax_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const smax_case *e = cc->params;
    const size_t un = (size_t)(e->hkv * (e->end - e->begin));
    float *q = malloc((size_t)(e->hq * e->d) * 4), *r[2] = {malloc(un * 4 + 4), malloc(un * 4 + 4)};
    for (int64_t i = 0; i < e->hq * e->d; i++) q[i] = 2.0f * rng_uniform() - 1.0f;
    host_tensor k = host_random(e->dt, 3, (int64_t[]){e->hkv, e->n, e->d}, 1.0f);
    smax_run(ref->ctx, e, q, &k, false, r[0]);
    smax_run(dut->ctx, e, q, &k, false, r[1]);
    check(cc->name, r[0], r[1], un, 1e-7);
    if (e->skip) { /* the flag set: nothing written */
        smax_run(dut->ctx, e, q, &k, true, r[1]);
        size_t moved = 0;
        for (size_t i = 0; i < un; i++) moved += r[1][i] != -5.0f;
        report(cc->name, running_backend, "written under a set flag", (double)moved, 0.0, moved == 0);
    }
    host_free(&k);
    free(q), free(r[0]), free(r[1]);
}

static void add_smax_cases(void)
{
    const smax_case es[] = {
        /* TokenButler's shape: d' = 16 f16, G = 4, several workgroups, a partial last one */
        {32, 8, 16, SIFT_F16, 3000, 128, 3000 - 512, 0, 0, false},
        {32, 8, 16, SIFT_F16, 5000, 128, 5000 - 512, 0, 256, true}, /* paged, predicated */
        {8, 2, 8, SIFT_F16, 1000, 0, 1000, 0, 128, false},
        {8, 2, 8, SIFT_F32, 700, 3, 699, 4, 0, false},    /* unaligned view */
        {12, 4, 24, SIFT_F16, 999, 1, 998, 6, 0, false},  /* unaligned view, G = 3 */
        {24, 2, 32, SIFT_F16, 1500, 0, 1500, 0, 64, false}, /* G = 12 */
        {32, 1, 32, SIFT_F32, 600, 10, 590, 0, 0, false},  /* G = 32 */
        {4, 4, 32, SIFT_F32, 2049, 0, 2049, 0, 32, true},  /* G = 1, paged, predicated */
        {8, 8, 16, SIFT_F32, 257, 0, 257, 8, 0, false},
        /* longer rows (score.comp's path), for the same checks */
        {32, 8, 64, SIFT_F16, 1200, 5, 1100, 2, 0, false},
        {16, 4, 128, SIFT_F32, 900, 0, 900, 0, 128, true},
    };
    for (size_t i = 0; i < sizeof es / sizeof es[0]; i++) {
        const smax_case *e = &es[i];
        char name[160];
        snprintf(name, sizeof name, "score-max H=%d/%d D=%d %s N=%lld [%lld, %lld) kv_off=%zu page=%lld%s", e->hq, e->hkv,
                 e->d, sift_dtype_name(e->dt), (long long)e->n, (long long)e->begin, (long long)e->end, e->kv_off,
                 (long long)e->page, e->skip ? " predicated" : "");
        registry_add("ops", name, smax_check, NULL, e, sizeof *e);
    }
}

/* int8 projected keys: kv_write quantizes rows into an i8 cache (paged), score_max reads them.
 * Against the f32 cache of the same keys, each vote is within the quantization's bound:
 * |u8 - u32| <= scale * max_h sum_i |q[h][i]| * m / 254 (half a step of m / 127 per value); and
 * against the CPU's votes from the same i8 cache bytes (written by the CPU), NMSE 1e-7. */
static void int8_keys_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const int hq = 32, hkv = 8, d = 16;
    const int64_t n = 3000, page = 256, pages = (n + page - 1) / page, begin = 100, end = n - 200;
    const int64_t m = end - begin, qs[2] = {hq, d}, src_shape[3] = {n, hkv, d}, ps[1] = {pages};
    const float scale = 0.25f;
    float *q = malloc((size_t)(hq * d) * 4), *x = malloc((size_t)(n * hkv * d) * 4);
    for (int64_t i = 0; i < hq * d; i++) q[i] = 2.0f * rng_uniform() - 1.0f;
    for (int64_t i = 0; i < n * hkv * d; i++) x[i] = (2.0f * rng_uniform() - 1.0f) * (float)(1 + i % 7); /* rows of mixed range */
    int32_t table[16];
    for (int64_t p = 0; p < pages; p++) table[p] = (int32_t)(pages - 1 - p);
    float *u[3];
    const backend *runs[2] = {ref, dut};
    for (int c = 0; c < 2; c++) {
        sift_context *ctx = runs[c]->ctx;
        sift_tensor *qt = NULL, *xt = NULL, *tt = NULL, *p8 = NULL, *p32 = NULL, *v8 = NULL, *v32 = NULL, *u8 = NULL, *u32 = NULL;
        sift_graph *g = NULL;
        TRY(sift_tensor_create(ctx, SIFT_F32, 2, qs, &qt));
        TRY(sift_tensor_write(qt, 0, q, (size_t)(hq * d) * 4));
        TRY(sift_tensor_create(ctx, SIFT_F32, 3, src_shape, &xt));
        TRY(sift_tensor_write(xt, 0, x, (size_t)(n * hkv * d) * 4));
        TRY(sift_tensor_create(ctx, SIFT_I32, 1, ps, &tt));
        TRY(sift_tensor_write(tt, 0, table, (size_t)pages * 4));
        TRY(sift_tensor_create(ctx, SIFT_I8, 3, (int64_t[]){hkv, pages * page, d + 4}, &p8));
        TRY(sift_tensor_create(ctx, SIFT_F32, 3, (int64_t[]){hkv, pages * page, d}, &p32));
        TRY(sift_tensor_paged_view(p8, tt, page, &v8));
        TRY(sift_tensor_paged_view(p32, tt, page, &v32));
        TRY(sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hkv, m}, &u8));
        TRY(sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hkv, m}, &u32));
        TRY(sift_graph_create(ctx, &g));
        TRY(sift_op_kv_write(g, xt, 0, v8));
        TRY(sift_op_kv_write(g, xt, 0, v32));
        TRY(sift_op_score_max(g, qt, v8, begin, end, scale, u8));
        TRY(sift_op_score_max(g, qt, v32, begin, end, scale, u32));
        TRY(compute_checked(g));
        u[c] = malloc((size_t)(hkv * m) * 4);
        TRY(sift_tensor_read(u8, 0, u[c], (size_t)(hkv * m) * 4));
        if (c == 1) {
            u[2] = malloc((size_t)(hkv * m) * 4);
            TRY(sift_tensor_read(u32, 0, u[2], (size_t)(hkv * m) * 4));
        }
        sift_graph_destroy(g);
        sift_tensor_destroy(v8), sift_tensor_destroy(v32), sift_tensor_destroy(p8), sift_tensor_destroy(p32);
        sift_tensor_destroy(u8), sift_tensor_destroy(u32), sift_tensor_destroy(tt), sift_tensor_destroy(xt), sift_tensor_destroy(qt);
    }
    /* the bound, per KV head and position, from the f32 keys */
    double worst = 0.0;
    int over = 0;
    for (int64_t g = 0; g < hkv; g++)
        for (int64_t j = 0; j < m; j++) {
            const float *row = x + ((begin + j) * hkv + g) * d;
            float mx = 0.0f;
            for (int i = 0; i < d; i++) mx = fmaxf(mx, fabsf(row[i]));
            double qsum = 0.0;
            for (int h = (int)(g * (hq / hkv)); h < (g + 1) * (hq / hkv); h++) {
                double s = 0.0;
                for (int i = 0; i < d; i++) s += fabs(q[h * d + i]);
                qsum = fmax(qsum, s);
            }
            const double bound = scale * qsum * mx / 254.0 * 1.001 + 1e-6;
            const double diff = fabs((double)u[1][g * m + j] - (double)u[2][g * m + j]);
            worst = fmax(worst, diff / bound);
            over += diff > bound;
        }
    report(cc->name, running_backend, "over bound", (double)over, 0, over == 0);
    report(cc->name, running_backend, "worst/bound", worst, 1.0, worst <= 1.0);
    /* the backend's quantization may round a value the other way at a .5 tie (its division): the
     * votes then differ by one step of one value; NMSE over all of them stays tiny */
    check("int8 keys: votes against the CPU's", u[0], u[1], (size_t)(hkv * m), 1e-6);
    free(u[0]), free(u[1]), free(u[2]), free(q), free(x);
}

/* int8 keys over the shapes and layouts a backend may treat apart: D from 8 to 128 (and kv_write
 * alone for a D that is no multiple of 8), groups of 1 to 12 heads, MHA to MQA, paged caches with
 * small pages and an absent page, caches that are not paged, of lengths that are no multiple of 4,
 * and views at offsets that are no multiple of 16 or of 4; the rows written in two kv_writes, the
 * second at pos0 = n / 3. kv_write's bytes against the CPU's: every row's m the
 * same bits, its values within one step (a backend's division may round a .5 tie the other way);
 * score_max over the CPU's bytes and over the backend's own against the CPU's votes, NMSE 1e-6
 * (rows without a page vote 0 everywhere). */
typedef struct {
    int hq, hkv, d;
    int64_t n, page, begin, end; /* page 0: not paged */
    size_t offset;               /* not paged: the cache is a view this many bytes into a larger tensor */
} int8_case;

static void int8_layout_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const int8_case *c = cc->params;
    const int hq = c->hq, hkv = c->hkv, d = c->d;
    const int64_t n = c->n, t1 = n / 3, rb = d + 4, page = c->page, pages = page ? (n + page - 1) / page : 0;
    const int64_t rows = page ? (pages + 1) * page : n; /* a pool with one page more than the table names */
    const size_t bytes = (size_t)(hkv * rows * rb) + c->offset;
    const bool score = d % 8 == 0;
    const int64_t m = c->end - c->begin, src_shape[3] = {n, hkv, d}, cache_shape[3] = {hkv, rows, rb};
    const float scale = 0.125f;
    float *q = malloc((size_t)(hq * d) * 4), *x = malloc((size_t)(n * hkv * d) * 4);
    for (int64_t i = 0; i < hq * d; i++) q[i] = 2.0f * rng_uniform() - 1.0f;
    for (int64_t r = 0; r < n * hkv; r++) /* rows of mixed range, some all zero (m = 0) */
        for (int i = 0; i < d; i++) x[r * d + i] = r % 37 == 5 ? 0.0f : (2.0f * rng_uniform() - 1.0f) * (float)(1 + r % 5);
    int32_t table[256];
    for (int64_t p = 0; p < pages; p++) table[p] = (int32_t)(pages - p); /* reversed, physical page 0 unused */
    if (pages > 2) table[1] = -1;                                        /* and one page absent */
    unsigned char *b[2] = {calloc(bytes, 1), calloc(bytes, 1)};
    float *u[3] = {malloc((size_t)(hkv * (m ? m : 1)) * 4), malloc((size_t)(hkv * (m ? m : 1)) * 4),
                   malloc((size_t)(hkv * (m ? m : 1)) * 4)};
    const backend *runs[2] = {ref, dut};
    for (int k = 0; k < (dut == ref ? 1 : 2); k++) {
        sift_context *ctx = runs[k]->ctx;
        sift_tensor *qt = NULL, *xt = NULL, *x1 = NULL, *x2 = NULL, *tt = NULL, *store = NULL, *cache = NULL, *ut = NULL;
        sift_graph *g = NULL; /* x1, x2: xt's rows [0, t1) and [t1, n) */
        TRY(sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, d}, &qt));
        TRY(sift_tensor_write(qt, 0, q, (size_t)(hq * d) * 4));
        TRY(sift_tensor_create(ctx, SIFT_F32, 3, src_shape, &xt));
        TRY(sift_tensor_write(xt, 0, x, (size_t)(n * hkv * d) * 4));
        if (page) {
            TRY(sift_tensor_create(ctx, SIFT_I8, 3, cache_shape, &store));
            TRY(sift_tensor_create(ctx, SIFT_I32, 1, (int64_t[]){pages}, &tt));
            TRY(sift_tensor_write(tt, 0, table, (size_t)pages * 4));
            TRY(sift_tensor_paged_view(store, tt, page, &cache));
        } else {
            TRY(sift_tensor_create(ctx, SIFT_I8, 1, (int64_t[]){(int64_t)bytes}, &store));
            TRY(sift_tensor_view(store, SIFT_I8, 3, cache_shape, c->offset, &cache));
        }
        TRY(sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hkv, m}, &ut));
        TRY(sift_tensor_view(xt, SIFT_F32, 3, (int64_t[]){t1, hkv, d}, 0, &x1));
        TRY(sift_tensor_view(xt, SIFT_F32, 3, (int64_t[]){n - t1, hkv, d}, (size_t)(t1 * hkv * d) * 4, &x2));
        TRY(sift_graph_create(ctx, &g));
        TRY(sift_op_kv_write(g, x1, 0, cache));
        TRY(sift_op_kv_write(g, x2, t1, cache));
        if (score) TRY(sift_op_score_max(g, qt, cache, c->begin, c->end, scale, ut));
        const sift_status supported = sift_graph_check_supported(g);
        if (supported != SIFT_OK) { /* a layout this backend refuses: free what the case holds, then report it */
            sift_graph_destroy(g);
            sift_tensor_destroy(cache), sift_tensor_destroy(tt), sift_tensor_destroy(store), sift_tensor_destroy(ut);
            sift_tensor_destroy(x1), sift_tensor_destroy(x2), sift_tensor_destroy(xt), sift_tensor_destroy(qt);
            free(b[0]), free(b[1]), free(u[0]), free(u[1]), free(u[2]), free(q), free(x);
            TRY(supported);
        }
        TRY(compute_checked(g));
        TRY(sift_tensor_read(store, 0, b[k], bytes));
        if (score) TRY(sift_tensor_read(ut, 0, u[k], (size_t)(hkv * m) * 4));
        sift_graph_destroy(g);
        g = NULL;
        if (k == 1 && score) { /* score_max alone over the CPU's bytes */
            TRY(sift_tensor_write(store, 0, b[0], bytes));
            TRY(sift_graph_create(ctx, &g));
            TRY(sift_op_score_max(g, qt, cache, c->begin, c->end, scale, ut));
            TRY(compute_checked(g));
            TRY(sift_tensor_read(ut, 0, u[2], (size_t)(hkv * m) * 4));
            sift_graph_destroy(g);
        }
        sift_tensor_destroy(cache), sift_tensor_destroy(store), sift_tensor_destroy(ut), sift_tensor_destroy(tt);
        sift_tensor_destroy(x1), sift_tensor_destroy(x2), sift_tensor_destroy(xt), sift_tensor_destroy(qt);
    }
    if (dut == ref) {
        if (score) check_reference_finite(cc->name, u[0], (size_t)(hkv * m));
    } else {
        /* row by row: the values within one step, m the same bits; every other byte (the offset, the
         * rows without a page, the unused page) the same (zero) */
        int64_t off1 = 0, worse = 0, m_diff = 0, other = 0, values = 0;
        for (size_t i = 0; i < c->offset; i++) other += b[0][i] != b[1][i];
        for (int64_t h = 0; h < hkv; h++)
            for (int64_t r = 0; r < rows; r++) {
                const size_t at = c->offset + (size_t)((h * rows + r) * rb);
                for (int i = 0; i < d; i++) {
                    const int dq = abs((int)(int8_t)b[0][at + i] - (int)(int8_t)b[1][at + i]);
                    off1 += dq == 1;
                    worse += dq > 1;
                }
                m_diff += memcmp(b[0] + at + d, b[1] + at + d, 4) != 0;
                values += d;
            }
        report(cc->name, running_backend, "m differs", (double)(m_diff + other), 0, m_diff + other == 0);
        report(cc->name, running_backend, "q off >1", (double)worse, 0, worse == 0);
        report(cc->name, running_backend, "q off by 1", (double)off1, (double)values * 1e-3, (double)off1 <= (double)values * 1e-3);
        if (score) {
            char what[200];
            snprintf(what, sizeof what, "%s: votes, CPU's bytes", cc->name);
            check(what, u[0], u[2], (size_t)(hkv * m), 1e-6);
            snprintf(what, sizeof what, "%s: votes, own bytes", cc->name);
            check(what, u[0], u[1], (size_t)(hkv * m), 1e-6);
        }
    }
    free(b[0]), free(b[1]), free(u[0]), free(u[1]), free(u[2]), free(q), free(x);
}

static void add_butler_cases(void)
{
    registry_add("ops", "int8    kv_write into i8 rows, score_max over them (within the bound)", int8_keys_check, NULL, NULL, 0);
    const int8_case is[] = {
        {32, 8, 16, 2000, 16, 37, 1995, 0}, /* D = 16, G = 4, small pages, one absent */
        {28, 4, 16, 2500, 64, 0, 2500, 0},  /* G = 7 */
        {8, 8, 16, 1200, 256, 0, 1200, 0},  /* G = 1 */
        {2, 1, 16, 1001, 0, 3, 1001, 0},    /* G = 2, one KV head, a length that is no multiple of 4 */
        {12, 4, 16, 520, 0, 0, 520, 16},    /* G = 3, a view 16 bytes in */
        {8, 4, 16, 100, 0, 1, 99, 4},       /* a view 4 bytes in */
        {8, 8, 16, 300, 2, 1, 299, 0},      /* pages of 2 rows */
        {24, 2, 16, 500, 0, 10, 490, 0},    /* G = 12 */
        {12, 4, 8, 333, 0, 0, 333, 0},      /* D = 8, G = 3 */
        {4, 2, 24, 257, 0, 5, 250, 3},      /* D = 24, a view 3 bytes in */
        {16, 2, 128, 200, 32, 7, 200, 0},   /* D = 128, G = 8 */
        {8, 8, 64, 130, 0, 0, 130, 0},      /* D = 64, G = 1 */
        {32, 8, 16, 1000, 0, 0, 1000, 0},   /* the 8B model's shape, flat */
        {8, 8, 8, 700, 64, 3, 650, 0},      /* D = 8, MHA, paged */
        {12, 4, 24, 999, 0, 1, 998, 0},     /* D = 24, G = 3 */
        {32, 1, 32, 600, 128, 10, 590, 0},  /* D = 32, MQA, paged */
        {16, 4, 64, 513, 32, 0, 513, 0},    /* D = 64, G = 4, paged */
        {8, 2, 72, 300, 0, 7, 300, 0},      /* D = 72 */
        {32, 8, 128, 768, 256, 100, 768, 0}, /* D = 128, G = 4, paged */
        {4, 4, 120, 257, 0, 0, 257, 0},     /* D = 120, MHA */
        {4, 2, 5, 50, 0, 0, 50, 1},         /* kv_write alone, D = 5 */
        {4, 2, 40, 64, 0, 0, 64, 2},        /* D = 40, a view 2 bytes in */
    };
    for (size_t i = 0; i < sizeof is / sizeof is[0]; i++) {
        char name[128];
        char layout[32];
        if (is[i].page) snprintf(layout, sizeof layout, "P=%lld", (long long)is[i].page);
        else snprintf(layout, sizeof layout, "flat +%zu", is[i].offset);
        snprintf(name, sizeof name, "int8    H=%d/%d D=%d N=%lld %s [%lld, %lld)", is[i].hq, is[i].hkv, is[i].d,
                 (long long)is[i].n, layout, (long long)is[i].begin, (long long)is[i].end);
        registry_add("ops", name, int8_layout_check, NULL, &is[i], sizeof is[i]);
    }
    registry_add("ops", "prop    score_max == score + vote max, paged d'=16", score_max_property, NULL, NULL, 0);
    registry_add("ops", "hand    neighbor_fetch two lists", handmade_neighbors, NULL, NULL, 0);
    const neighbor_case ns[] = {{8, 9000, 128, 512, 2048}, {1, 700, 4, 16, 64}, {3, 50, 2, 3, 100}, {2, 4097, 0, 0, 4095}};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "neighbor_fetch L=%d |C|=%lld S=%lld W=%lld k=%lld", ns[i].lists, (long long)ns[i].cand,
                 (long long)ns[i].s, (long long)ns[i].w, (long long)ns[i].k);
        registry_add("ops", name, neighbor_check, NULL, &ns[i], sizeof ns[i]);
    }
    registry_add("ops", "gather  lists with skipped entries (-1, past the cache)", skip_check, NULL, NULL, 0);
}

/* ---- kv_gather: a selection's rows copied out of the cache ----------------------------------------- */

typedef struct {
    int hkv, d;
    sift_dtype dt;
    int64_t n;      /* logical rows (a paged cache: whole pages) */
    int64_t page;   /* 0: a flat cache */
    bool two_pools; /* the pool's later half of the pages in a host pool (KV offload) */
    int lists;      /* 1 (shared) or Hkv */
    int64_t count;  /* entries per list */
    size_t out_off; /* out starts this many bytes into a larger tensor */
    int64_t col0;   /* the entries go to out's columns [col0, col0 + count) (sift_op_kv_gather_at) */
    int64_t extra;  /* out's columns past col0 + count: out is [Hkv][col0 + count + extra][D] */
    int pred;       /* 0: no predicate; 1: a predicate not set (the copy runs); 2: set (out unchanged) */
} gather_case;

/* out's columns per KV head. */
static int64_t gather_out_count(const gather_case *c) { return c->col0 + c->count + c->extra; }

enum { GATHER_FILL = 0xa5, GATHER_TAIL = 64 }; /* out's surroundings hold GATHER_FILL: bytes written must be out's */

/* The bytes of n values of dt (f16: exact halves), all different enough that a row copied from
 * the wrong place differs. */
static unsigned char *gather_values(sift_dtype dt, size_t n)
{
    float *f = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) f[i] = 4.0f * (2.0f * rng_uniform() - 1.0f);
    if (dt == SIFT_F32) return (unsigned char *)f;
    uint16_t *h = malloc(n * 2 + 2);
    sift_f32_to_f16(h, f, n);
    free(f);
    return (unsigned char *)h;
}

/* Rows [row0, row0 + rows) of every KV head of pool [Hkv][pool_rows][D] in a tensor of their own. */
static sift_status gather_pool_part(sift_context *ctx, const gather_case *c, const unsigned char *pool, int64_t pool_rows,
                                    int64_t row0, int64_t rows, bool host, sift_tensor **out)
{
    const size_t row_bytes = (size_t)c->d * sift_dtype_size(c->dt);
    const int64_t shape[3] = {c->hkv, rows, c->d};
    sift_status s = host ? sift_tensor_create_host(ctx, c->dt, 3, shape, out) : sift_tensor_create(ctx, c->dt, 3, shape, out);
    for (int64_t g = 0; g < c->hkv && s == SIFT_OK; g++)
        s = sift_tensor_write(*out, (size_t)(g * rows) * row_bytes, pool + (size_t)(g * pool_rows + row0) * row_bytes,
                              (size_t)rows * row_bytes);
    return s;
}

/* kv_gather of the case on one backend: the bytes of out's parent (out_off, out, GATHER_TAIL), or NULL. */
static unsigned char *gather_run(const backend *b, const gather_case *c, const unsigned char *pool, int64_t pool_rows,
                                 const int32_t *table, int64_t lp, const int32_t *lists, const char *cname)
{
    const char *bname = sift_backend_kind_name(b->kind);
    const size_t elt = sift_dtype_size(c->dt), row_bytes = (size_t)c->d * elt;
    const int64_t ocount = gather_out_count(c);
    const size_t out_bytes = (size_t)(c->hkv * ocount) * row_bytes, all = c->out_off + out_bytes + GATHER_TAIL;
    const int64_t dev_rows = c->two_pools ? pool_rows / c->page / 2 * c->page : pool_rows;
    const int64_t ls[2] = {c->lists, c->count}, os[3] = {c->hkv, ocount, c->d}, parent_n = (int64_t)(all / elt), one = 1;
    const float flag_value = c->pred == 2 ? 1.0f : 0.0f;
    sift_tensor *dev = NULL, *host = NULL, *pages = NULL, *view = NULL, *it = NULL, *parent = NULL, *out = NULL, *flag = NULL;
    sift_graph *g = NULL;
    unsigned char *bytes = malloc(all), *got = NULL;
    memset(bytes, GATHER_FILL, all);
    CHECK_OK(gather_pool_part(b->ctx, c, pool, pool_rows, 0, dev_rows, false, &dev), cname, bname);
    if (c->two_pools) CHECK_OK(gather_pool_part(b->ctx, c, pool, pool_rows, dev_rows, pool_rows - dev_rows, true, &host), cname, bname);
    if (c->page) {
        CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 1, &lp, &pages), cname, bname);
        CHECK_OK(sift_tensor_write(pages, 0, table, (size_t)lp * 4), cname, bname);
        CHECK_OK(host ? sift_tensor_paged_view_pools(dev, host, pages, c->page, &view)
                      : sift_tensor_paged_view(dev, pages, c->page, &view),
                 cname, bname);
    }
    CHECK_OK(sift_tensor_create(b->ctx, SIFT_I32, 2, ls, &it), cname, bname);
    if (c->count) CHECK_OK(sift_tensor_write(it, 0, lists, (size_t)(c->lists * c->count) * 4), cname, bname);
    CHECK_OK(sift_tensor_create(b->ctx, c->dt, 1, &parent_n, &parent), cname, bname);
    CHECK_OK(sift_tensor_write(parent, 0, bytes, all), cname, bname);
    CHECK_OK(sift_tensor_view(parent, c->dt, 3, os, c->out_off, &out), cname, bname);
    CHECK_OK(sift_graph_create(b->ctx, &g), cname, bname);
    if (c->pred) {
        CHECK_OK(sift_tensor_create(b->ctx, SIFT_F32, 1, &one, &flag), cname, bname);
        CHECK_OK(sift_tensor_write(flag, 0, &flag_value, sizeof flag_value), cname, bname);
        CHECK_OK(sift_graph_skip_if(g, flag, 0), cname, bname);
    }
    if (c->col0 || c->extra) CHECK_OK(sift_op_kv_gather_at(g, view ? view : dev, it, c->col0, out), cname, bname);
    else CHECK_OK(sift_op_kv_gather(g, view ? view : dev, it, out), cname, bname);
    CHECK_OK(sift_graph_skip_if(g, NULL, 0), cname, bname);
    CHECK_OK(compute_checked(g), cname, bname);
    CHECK_OK(sift_tensor_read(parent, 0, bytes, all), cname, bname);
    got = bytes;
    bytes = NULL;
out:
    free(bytes);
    sift_graph_destroy(g);
    sift_tensor *held[] = {out, parent, it, view, pages, host, dev, flag};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) sift_tensor_destroy(held[i]);
    return got;
}

/* Rows of got's out that differ from want's (the columns not written included: they must still
 * hold GATHER_FILL), and bytes around out that are not GATHER_FILL. */
static void gather_compare(const char *cname, const gather_case *c, const unsigned char *want, const unsigned char *got)
{
    const size_t row_bytes = (size_t)c->d * sift_dtype_size(c->dt), rows = (size_t)(c->hkv * gather_out_count(c));
    int64_t wrong = 0, outside = 0;
    for (size_t r = 0; r < rows; r++)
        wrong += memcmp(want + c->out_off + r * row_bytes, got + c->out_off + r * row_bytes, row_bytes) != 0;
    for (size_t i = 0; i < c->out_off; i++) outside += got[i] != GATHER_FILL;
    for (size_t i = 0; i < GATHER_TAIL; i++) outside += got[c->out_off + rows * row_bytes + i] != GATHER_FILL;
    report(cname, running_backend, "rows wrong", (double)wrong, 0, wrong == 0);
    report(cname, running_backend, "bytes outside out", (double)outside, 0, outside == 0);
}

/* The pool holds the logical pages shuffled among spare pages of other values, one table entry is
 * -1 and one names a page past the pools; the lists hold -1, positions past the cache, repeats, in
 * any order. The CPU is held to the rows worked out here, every other backend to the CPU's bytes. */
static void kv_gather_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    const gather_case *c = cc->params;
    const size_t row_bytes = (size_t)c->d * sift_dtype_size(c->dt);
    const int64_t lp = c->page ? (c->n + c->page - 1) / c->page : 0, rows = c->page ? lp * c->page : c->n;
    const int64_t pp = c->page ? lp + 2 : 0, pool_rows = c->page ? pp * c->page : c->n;
    const int64_t dev_rows = c->two_pools ? pool_rows / c->page / 2 * c->page : pool_rows;
    unsigned char *pool = gather_values(c->dt, (size_t)(c->hkv * pool_rows * c->d));
    int32_t *table = malloc((size_t)(lp + 1) * 4), *lists = malloc((size_t)(c->lists * c->count + 1) * 4);
    int64_t *perm = malloc((size_t)(pp + 1) * sizeof *perm);
    for (int64_t i = 0; i < pp; i++) perm[i] = i;
    for (int64_t i = pp - 1; i > 0; i--) {
        const int64_t j = (int64_t)(rng_next() % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (int64_t p = 0; p < lp; p++) table[p] = (int32_t)perm[p];
    if (lp > 3) table[1] = -1, table[lp - 2] = (int32_t)(pp + 5);
    for (int64_t e = 0; e < c->lists * c->count; e++) {
        const uint64_t r = rng_next() % 16;
        lists[e] = r == 0 ? -1 : r == 1 ? (int32_t)(rows + (int64_t)(rng_next() % 3)) : r == 2 ? INT32_MAX
                                                                                        : (int32_t)(rng_next() % (uint64_t)rows);
    }
    /* the rows expected, and where they came from */
    const int64_t ocount = gather_out_count(c);
    const size_t all = c->out_off + (size_t)(c->hkv * ocount) * row_bytes + GATHER_TAIL;
    unsigned char *want = malloc(all), *r0 = NULL, *r1 = NULL;
    memset(want, GATHER_FILL, all);
    int64_t from_dev = 0, from_host = 0, zero = 0;
    for (int64_t g = 0; g < c->hkv; g++)
        for (int64_t i = 0; i < c->count; i++) {
            const int64_t j = lists[(c->lists == 1 ? 0 : g) * c->count + i];
            int64_t phys = j >= 0 && j < rows ? j : -1;
            if (phys >= 0 && c->page) {
                const int64_t page = table[j / c->page];
                phys = page >= 0 && page < pp ? page * c->page + j % c->page : -1;
            }
            /* a set predicate leaves out as it was: GATHER_FILL */
            unsigned char *dst = want + c->out_off + (size_t)(g * ocount + c->col0 + i) * row_bytes;
            if (phys < 0) {
                if (c->pred != 2) memset(dst, 0, row_bytes);
                zero++;
                continue;
            }
            if (c->pred != 2) memcpy(dst, pool + (size_t)(g * pool_rows + phys) * row_bytes, row_bytes);
            if (phys < dev_rows) from_dev++;
            else from_host++;
        }
    if (c->count >= 30 && (zero == 0 || from_dev == 0 || (c->two_pools && from_host == 0)))
        fail(cc->name, running_backend, "the lists reach neither absent rows nor both pools");
    r0 = gather_run(ref, c, pool, pool_rows, table, lp, lists, cc->name);
    if (r0 && dut == ref) gather_compare(cc->name, c, want, r0);
    if (r0 && dut != ref && (r1 = gather_run(dut, c, pool, pool_rows, table, lp, lists, cc->name)))
        gather_compare(cc->name, c, r0, r1);
    free(r0), free(r1), free(want), free(perm), free(lists), free(table), free(pool);
}

/* What the constructor refuses, and the bytes it reports. */
static void kv_gather_refusals(const conf_case *cc, const backend *ref, const backend *dut)
{
    (void)ref;
    sift_context *ctx = dut->ctx;
    sift_tensor *kv = NULL, *k8 = NULL, *idx = NULL, *idx3 = NULL, *idxf = NULL, *out = NULL, *out16 = NULL, *outs = NULL;
    sift_tensor *outl = NULL;
    sift_graph *g = NULL, *g2 = NULL;
    TRY(sift_tensor_create(ctx, SIFT_F32, 3, (int64_t[]){2, 40, 16}, &kv));
    TRY(sift_tensor_create(ctx, SIFT_I8, 3, (int64_t[]){2, 40, 20}, &k8));
    TRY(sift_tensor_create(ctx, SIFT_I32, 2, (int64_t[]){2, 9}, &idx));
    TRY(sift_tensor_create(ctx, SIFT_I32, 2, (int64_t[]){3, 9}, &idx3));
    TRY(sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){2, 9}, &idxf));
    TRY(sift_tensor_create(ctx, SIFT_F32, 3, (int64_t[]){2, 9, 16}, &out));
    TRY(sift_tensor_create(ctx, SIFT_F16, 3, (int64_t[]){2, 9, 16}, &out16));
    TRY(sift_tensor_create(ctx, SIFT_F32, 3, (int64_t[]){2, 8, 16}, &outs));
    TRY(sift_tensor_create(ctx, SIFT_F32, 3, (int64_t[]){2, 12, 16}, &outl));
    TRY(sift_graph_create(ctx, &g));
    TRY(sift_graph_create(ctx, &g2));
    const struct {
        const char *what;
        sift_status got, want;
    } r[] = {
        {"an i8 cache", sift_op_kv_gather(g, k8, idx, out), SIFT_E_UNSUPPORTED},
        {"out of another type", sift_op_kv_gather(g, kv, idx, out16), SIFT_E_DTYPE},
        {"out of another shape", sift_op_kv_gather(g, kv, idx, outs), SIFT_E_SHAPE},
        {"3 lists for 2 KV heads", sift_op_kv_gather(g, kv, idx3, out), SIFT_E_SHAPE},
        {"f32 indices", sift_op_kv_gather(g, kv, idxf, out), SIFT_E_DTYPE},
        {"no cache", sift_op_kv_gather(g, NULL, idx, out), SIFT_E_INVALID},
        {"a longer out at col0 0", sift_op_kv_gather(g, kv, idx, outl), SIFT_E_SHAPE},
        {"col0 + n past out", sift_op_kv_gather_at(g, kv, idx, 4, outl), SIFT_E_SHAPE},
        {"a negative col0", sift_op_kv_gather_at(g, kv, idx, -1, outl), SIFT_E_SHAPE},
        {"valid", sift_op_kv_gather(g, kv, idx, out), SIFT_OK},
        {"valid at col0 3 of 12", sift_op_kv_gather_at(g2, kv, idx, 3, outl), SIFT_OK},
    };
    int wrong = 0;
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (r[i].got != r[i].want) {
            wrong++;
            printf("%-58s %-7s %s: %s, expected %s\n", cc->name, running_backend, r[i].what, sift_status_name(r[i].got),
                   sift_status_name(r[i].want));
        }
    report(cc->name, running_backend, "wrong status", wrong, 0, wrong == 0);
    /* the lists once, and the rows read and written: 2 x 9 x 16 f32 */
    const double bytes = sift_graph_node_count(g) == 1 ? sift_graph_node_bytes(g, 0) : -1.0;
    report(cc->name, running_backend, "bytes", bytes, 2 * 9 * 4 + 2.0 * (2 * 9 * 16 * 4), bytes == 2 * 9 * 4 + 2.0 * (2 * 9 * 16 * 4));
    /* into a longer out: only the 9 rows written count, not out's 12 */
    const double bytes_at = sift_graph_node_count(g2) == 1 ? sift_graph_node_bytes(g2, 0) : -1.0;
    report(cc->name, running_backend, "bytes at col0", bytes_at, 2 * 9 * 4 + 2.0 * (2 * 9 * 16 * 4),
           bytes_at == 2 * 9 * 4 + 2.0 * (2 * 9 * 16 * 4));
    sift_graph_destroy(g);
    sift_graph_destroy(g2);
    sift_tensor *held[] = {kv, k8, idx, idx3, idxf, out, out16, outs, outl};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) sift_tensor_destroy(held[i]);
}

static void add_kv_gather_cases(void)
{
    registry_add("ops", "kv_gather refusals and bytes", kv_gather_refusals, NULL, NULL, 0);
    static const gather_case gs[] = {
        {2, 64, SIFT_F16, 1000, 16, false, 2, 300, 0, 0, 0, 0},    /* one pool, a list per KV head */
        {8, 128, SIFT_F16, 4096, 256, true, 8, 777, 0, 0, 0, 0},   /* two pools, the 8B model's KV heads */
        {4, 8, SIFT_F32, 300, 4, true, 1, 37, 0, 0, 0, 0},         /* a shared list, D = 8, pages of 4 rows */
        {1, 16, SIFT_F16, 50, 0, false, 1, 65, 0, 0, 0, 0},        /* flat, d' = 16 */
        {8, 128, SIFT_F32, 2000, 64, true, 8, 1, 0, 0, 0, 0},      /* one entry */
        {4, 40, SIFT_F32, 700, 0, false, 4, 1000, 4, 0, 0, 0},     /* flat, more entries than rows, out 4 bytes in */
        {2, 72, SIFT_F16, 513, 32, true, 2, 129, 4, 0, 0, 0},      /* D = 72, out 4 bytes in */
        {2, 24, SIFT_F16, 100, 8, false, 1, 50, 2, 0, 0, 0},       /* out 2 bytes in: no whole 32-bit words */
        {4, 64, SIFT_F16, 300, 16, true, 4, 0, 0, 0, 0, 0},        /* empty lists */
        {8, 32, SIFT_F16, 3000, 128, true, 8, 2049, 16, 0, 0, 0},  /* out 16 bytes in */
        {2, 128, SIFT_F32, 9000, 64, true, 2, 8300, 0, 0, 0, 0},   /* more units than one grid covers */
        /* into columns [col0, col0 + n) of a longer out (TokenButler's staged window), the rest untouched */
        {2, 64, SIFT_F16, 1000, 16, true, 1, 16, 0, 28, 0, 0},   /* a shared list to the last columns */
        {8, 128, SIFT_F16, 4096, 256, true, 8, 300, 16, 44, 5, 0}, /* columns in the middle, out 16 bytes in */
        {4, 40, SIFT_F32, 700, 0, false, 4, 33, 4, 7, 11, 0},    /* flat, D = 40 (words), out 4 bytes in */
        {2, 24, SIFT_F16, 100, 8, false, 1, 20, 2, 3, 1, 0},     /* out 2 bytes in: no whole 32-bit words */
        /* predicated (sift_graph_skip_if): set, out keeps what it held; not set, the copy runs */
        {2, 64, SIFT_F16, 1000, 16, true, 2, 300, 0, 0, 0, 2},
        {4, 128, SIFT_F16, 500, 16, true, 4, 40, 0, 24, 16, 2},
        {4, 128, SIFT_F16, 500, 16, true, 4, 40, 0, 24, 16, 1},
        {2, 64, SIFT_F32, 300, 0, false, 2, 80, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        char name[128], layout[32];
        if (gs[i].page) snprintf(layout, sizeof layout, "P=%lld pools=%d", (long long)gs[i].page, gs[i].two_pools ? 2 : 1);
        else snprintf(layout, sizeof layout, "flat");
        snprintf(name, sizeof name, "kv_gather H=%d D=%d %s N=%lld %s L=%d n=%lld +%zu%s", gs[i].hkv, gs[i].d,
                 sift_dtype_name(gs[i].dt), (long long)gs[i].n, layout, gs[i].lists, (long long)gs[i].count, gs[i].out_off,
                 gs[i].pred == 2 ? " skipped" : gs[i].pred == 1 ? " pred-clear" : "");
        if (gs[i].col0 || gs[i].extra) {
            char at[48];
            snprintf(at, sizeof at, " col0=%lld of %lld", (long long)gs[i].col0, (long long)gather_out_count(&gs[i]));
            strncat(name, at, sizeof name - strlen(name) - 1);
        }
        registry_add("ops", name, kv_gather_check, NULL, &gs[i], sizeof gs[i]);
    }
}

void cases_ops(const suite_options *o)
{
    const int64_t max_n = o->max_n;
    const int64_t ns_all[] = {1, 7, 255, 4096, 33000, 131072, 1048576};
    const int heads[][2] = {{8, 8}, {32, 8}, {28, 4}, {8, 1}};
    const int dims[] = {64, 128};
    const sift_dtype kvs[] = {SIFT_F16, SIFT_F32};
    const int64_t budgets[] = {0, 16, 2048, -1 /* >= N */};
    const int64_t sinks[] = {0, 4, 128};
    const int64_t windows[] = {0, 64, 512};
    add_handmade();
    add_warm_select_cases(max_n);
    add_butler_cases();
    add_smax_cases();
    add_kv_gather_cases();

    /* head dimensions other than the tuned 64 and 128 (any multiple of 8 up to 128): score and the
     * attention ops, f16 and f32, MHA and GQA, short and longer contexts; 16 is TokenButler's keys */
    const int odd_dims[] = {8, 16, 24, 40, 72, 96, 120};
    for (int di = 0; di < 7; di++)
        for (int ki = 0; ki < 2; ki++) {
            const int64_t n = (di + ki) % 2 ? 255 : 4096;
            const int hi = (di + ki) % 3 == 0 ? 0 : (di + ki) % 3 == 1 ? 2 : 3;
            test_case c = {.hq = heads[hi][0], .hkv = heads[hi][1], .d = odd_dims[di], .kv = kvs[ki], .lists = 1};
            c.sel = (sift_select_params){.n_ctx = n, .sink = 4, .window = 64, .budget = 16};
            c.op = OP_SCORE;
            add_case(&c);
            c.op = OP_SCORE_MAX;
            add_case(&c);
            c.op = OP_GATHER;
            c.lists = ki ? c.hkv : 1;
            add_case(&c);
            c.lists = 1;
            c.op = OP_DENSE;
            add_case(&c);
            c.op = OP_GRAPH;
            add_case(&c);
        }

    int combo = 0;
    for (size_t ni = 0; ni < sizeof ns_all / sizeof ns_all[0]; ni++) {
        const int64_t n = ns_all[ni];
        if (n > max_n) continue;
        const bool huge = n > 33000; /* large contexts: the standard shape only, to bound CPU time */
        for (int hi = 0; hi < 4; hi++) {
            if (huge && hi != 1) continue;
            for (int di = 0; di < 2; di++) {
                if (huge && dims[di] != 128) continue;
                for (int ki = 0; ki < 2; ki++) {
                    test_case base = {.hq = heads[hi][0], .hkv = heads[hi][1], .d = dims[di], .kv = kvs[ki], .lists = 1};
                    /* (k, S, W) cycles through all 36 combinations across the matrix */
                    const int64_t kk = budgets[combo % 4], ss = sinks[(combo / 4) % 3], ww = windows[(combo / 12) % 3];
                    combo++;
                    base.sel = (sift_select_params){.n_ctx = n, .sink = ss, .window = ww, .budget = kk < 0 ? n : kk};

                    test_case c = base;
                    c.op = OP_SCORE;
                    add_case(&c);
                    c.op = OP_SCORE_MAX;
                    add_case(&c);
                    if (ki == 0 && (di == 0 || huge)) { /* vote and select depend on neither D nor the KV type */
                        c.op = OP_VOTE_SUM;
                        add_case(&c);
                        c.op = OP_VOTE_MAX;
                        add_case(&c);
                        for (int ties = 0; ties < 2; ties++) {
                            c.op = OP_SELECT;
                            c.ties = ties;
                            c.lists = ties ? c.hkv : 1;
                            add_case(&c);
                        }
                        c.ties = false;
                    }
                    c.op = OP_GATHER;
                    c.lists = (combo % 2) ? c.hkv : 1;
                    add_case(&c);
                    c.lists = 1;
                    c.op = OP_DENSE;
                    add_case(&c);
                    c.op = OP_GRAPH;
                    c.vote = (combo % 3 == 2) ? SIFT_VOTE_KVHEAD_MAX : SIFT_VOTE_SOFTMAX_SUM;
                    c.lists = c.vote == SIFT_VOTE_KVHEAD_MAX ? c.hkv : 1;
                    add_case(&c);
                    /* the standard serving configuration at every context */
                    if (!huge || ki == 0) {
                        c.sel = (sift_select_params){.n_ctx = n, .sink = 128, .window = 512, .budget = 2048};
                        c.vote = SIFT_VOTE_SOFTMAX_SUM;
                        c.lists = 1;
                        if (hi == 1 && di == 1) add_case(&c);
                    }
                    /* property: S + W + k >= N keeps every token, and equals dense */
                    if (n <= 33000 && hi % 2 == di) {
                        c.sel = (sift_select_params){.n_ctx = n, .sink = ss, .window = ww, .budget = n};
                        c.vote = (combo % 2) ? SIFT_VOTE_KVHEAD_MAX : SIFT_VOTE_SOFTMAX_SUM;
                        c.lists = c.vote == SIFT_VOTE_KVHEAD_MAX ? c.hkv : 1;
                        add_property(&c);
                    }
                }
            }
        }
    }

    add_edge_cases();
}
