/* Checks of the CUDA backend beyond tests/conformance.c, run on the emulator by run-tests.sh (and
 * usable on a GPU: it only uses the public API and compares "cuda" with "cpu"):
 *   - K/V views at offsets that are not 16-byte aligned (the element-copy path of the loader);
 *   - query-head groups larger than 8 (several head chunks per KV head) and odd ones (5, 7);
 *   - a graph computed several times: CUDA-graph replay, the timed path, and the radix-select
 *     histograms that one run leaves zeroed for the next;
 *   - gather lists with repeated and unsorted positions;
 *   - select and vote over several blocks of candidates (more than 4096), with heavy ties and
 *     signed zeros, k at block boundaries. */
#include "sift.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;
static uint64_t rng = 88172645463325252ull;
static float urand(void) /* [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        sift_status s_ = (x);                                                                                          \
        if (s_ != SIFT_OK) {                                                                                           \
            printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, sift_last_error());                                  \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

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

static void check(const char *what, const float *ref, const float *got, size_t n, double bound)
{
    double num = 0, den = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) finite = 0;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    const double nmse = den > 0 ? num / den : num;
    const int ok = finite && nmse <= bound;
    checks++;
    if (!ok) failures++;
    printf("%-72s nmse %9.3g %s\n", what, nmse, ok ? "ok" : "FAIL");
}

static void check_idx(const char *what, const int32_t *ref, const int32_t *got, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += ref[i] != got[i];
    checks++;
    if (bad) failures++;
    printf("%-72s wrong %zu %s\n", what, bad, bad ? "FAIL" : "ok");
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
    for (size_t i = 0; i < n; i++) f[i] = roundf(urand() * 2.0f * 256.0f) / 256.0f;
    if (dt == SIFT_F32) return f;
    uint16_t *h = malloc(n * 2);
    sift_f32_to_f16(h, f, n);
    free(f);
    return h;
}

static layer make_layer(int hq, int hkv, int d, int64_t ncap, sift_dtype dt)
{
    layer L = {hq, hkv, d, ncap, dt, malloc((size_t)hq * d * sizeof(float)), NULL, NULL};
    for (int i = 0; i < hq * d; i++) L.q[i] = urand();
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
    TRY(sift_graph_compute(g));
    TRY(sift_tensor_read(sc.view, 0, scores, (size_t)L->hq * (size_t)(n_ctx - 3) * 4));
    TRY(sift_tensor_read(o1.view, 0, gathered, (size_t)L->hq * L->d * 4));
    TRY(sift_tensor_read(o2.view, 0, dense, (size_t)L->hq * L->d * 4));
    sift_graph_destroy(g);
    placed *all[] = {&q, &k, &v, &ix, &sc, &o1, &o2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) unplace(all[i]);
}

static void ops_case(sift_context *cpu, sift_context *cuda, int hq, int hkv, int d, sift_dtype dt, int64_t n,
                     size_t kv_off, int lists)
{
    layer L = make_layer(hq, hkv, d, n + 5, dt);
    const int64_t len = 3 * n / 2 + 1; /* repeats and any order */
    int32_t *idx = malloc((size_t)lists * (size_t)len * sizeof *idx);
    for (int64_t i = 0; i < lists * len; i++) idx[i] = (int32_t)(rng % (uint64_t)n), urand();
    const size_t ns = (size_t)hq * (size_t)(n - 3), no = (size_t)hq * d;
    float *s0 = malloc(ns * 4), *s1 = malloc(ns * 4), *g0 = malloc(no * 4), *g1 = malloc(no * 4), *d0 = malloc(no * 4),
          *d1 = malloc(no * 4);
    run_ops(cpu, &L, kv_off, idx, lists, len, n, s0, g0, d0);
    run_ops(cuda, &L, kv_off, idx, lists, len, n, s1, g1, d1);
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

/* The decode graph computed `runs` times (untimed and timed alternately): same output each time. */
static void repeat_case(sift_context *cpu, sift_context *cuda, int hq, int hkv, int64_t n, sift_vote_mode vote, int runs)
{
    const int d = 128;
    layer L = make_layer(hq, hkv, d, n, SIFT_F16);
    sift_attn_config cfg = {hq, hkv, d, {n, 4, 16, 37}, vote, SIFT_ATTN_SELECT};
    const int64_t lists = vote == SIFT_VOTE_KVHEAD_MAX ? hkv : 1, cnt = sift_select_count(&cfg.sel);
    float *ref = malloc((size_t)hq * d * 4), *got = malloc((size_t)hq * d * 4);
    int32_t *iref = malloc((size_t)(lists * cnt) * 4), *igot = malloc((size_t)(lists * cnt) * 4);
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        const int64_t qs[2] = {hq, d}, kvs[3] = {hkv, n, d};
        placed q = place(ctxs[c], SIFT_F32, 2, qs, 0, L.q), k = place(ctxs[c], L.dt, 3, kvs, 0, L.k),
               v = place(ctxs[c], L.dt, 3, kvs, 0, L.v), o = place(ctxs[c], SIFT_F32, 2, qs, 0, NULL);
        sift_graph *g;
        sift_tensor *idx;
        TRY(sift_attn_graph(ctxs[c], &cfg, q.view, k.view, v.view, o.view, &g, &idx));
        for (int r = 0; r < (c ? runs : 1); r++) {
            double us[8];
            if (r % 2) TRY(sift_graph_compute_timed(g, us));
            else TRY(sift_graph_compute(g));
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

/* select alone on given votes: lists x cand, values drawn from few levels (ties), -0 among +0. */
static void select_case(sift_context *cpu, sift_context *cuda, int lists, int64_t cand, int64_t S, int64_t W,
                        int64_t k, int levels)
{
    const sift_select_params p = {cand + S + W, S, W, k};
    const int64_t cnt = sift_select_count(&p), vs[2] = {lists, cand}, is[2] = {lists, cnt};
    float *v = malloc((size_t)(lists * cand) * 4);
    for (int64_t i = 0; i < lists * cand; i++) {
        const int lv = (int)(rng % (uint64_t)levels);
        urand();
        v[i] = lv == 0 ? ((rng & 1) ? -0.0f : 0.0f) : (float)(lv - levels / 2) * 0.125f;
    }
    int32_t *r[2];
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        r[c] = malloc((size_t)(lists * cnt + 1) * 4);
        placed vt = place(ctxs[c], SIFT_F32, 2, vs, 0, v), ix = place(ctxs[c], SIFT_I32, 2, is, 4, NULL);
        sift_graph *g;
        TRY(sift_graph_create(ctxs[c], &g));
        TRY(sift_op_select(g, vt.view, &p, ix.view));
        TRY(sift_graph_compute(g));
        TRY(sift_graph_compute(g)); /* twice: the histograms carried between runs */
        if (lists * cnt) TRY(sift_tensor_read(ix.view, 0, r[c], (size_t)(lists * cnt) * 4));
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
static void vote_case(sift_context *cpu, sift_context *cuda, int hq, int hkv, int64_t m, sift_vote_mode mode)
{
    const int64_t ss[2] = {hq, m}, lists = mode == SIFT_VOTE_KVHEAD_MAX ? hkv : 1, vs[2] = {lists, m};
    float *s = malloc((size_t)(hq * m) * 4), *r[2];
    for (int64_t i = 0; i < hq * m; i++) s[i] = 4.0f * urand();
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        r[c] = malloc((size_t)(lists * m) * 4);
        placed st = place(ctxs[c], SIFT_F32, 2, ss, 0, s), vt = place(ctxs[c], SIFT_F32, 2, vs, 8, NULL);
        sift_graph *g;
        TRY(sift_graph_create(ctxs[c], &g));
        TRY(sift_op_vote(g, mode, st.view, vt.view));
        TRY(sift_graph_compute(g));
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

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    sift_context *cpu, *cuda;
    TRY(sift_context_create(SIFT_BACKEND_CPU, &cpu));
    TRY(sift_context_create(SIFT_BACKEND_CUDA, &cuda));
    printf("cuda: %s\n", sift_context_device_name(cuda));
    /* unaligned K/V views (2 and 4 bytes off), both dtypes and both D */
    ops_case(cpu, cuda, 8, 2, 128, SIFT_F16, 300, 2, 1);
    ops_case(cpu, cuda, 8, 2, 64, SIFT_F16, 131, 6, 2);
    ops_case(cpu, cuda, 4, 4, 128, SIFT_F32, 97, 4, 4);
    ops_case(cpu, cuda, 6, 3, 64, SIFT_F32, 70, 12, 1);
    /* head groups: 12 (8 + 4), 18 (8 + 8 + 2), 5 and 7 (padded to 8), 3 (padded to 4), 2, 1 */
    ops_case(cpu, cuda, 24, 2, 128, SIFT_F16, 200, 0, 2);
    ops_case(cpu, cuda, 18, 1, 64, SIFT_F32, 77, 0, 1);
    ops_case(cpu, cuda, 5, 1, 128, SIFT_F16, 150, 0, 1);
    ops_case(cpu, cuda, 14, 2, 64, SIFT_F16, 90, 0, 2);
    ops_case(cpu, cuda, 3, 1, 128, SIFT_F32, 66, 0, 1);
    ops_case(cpu, cuda, 4, 2, 64, SIFT_F16, 40, 0, 2);
    /* repeated runs of one graph, radix path (|C| > k) */
    repeat_case(cpu, cuda, 8, 2, 600, SIFT_VOTE_SOFTMAX_SUM, 4);
    repeat_case(cpu, cuda, 8, 2, 600, SIFT_VOTE_KVHEAD_MAX, 4);
    /* select and vote over several blocks of 4096 candidates */
    select_case(cpu, cuda, 1, 4096 * 2 + 1, 3, 5, 4096, 7);
    select_case(cpu, cuda, 3, 9000, 0, 0, 4095, 3);
    select_case(cpu, cuda, 2, 12289, 128, 512, 12288, 50);
    select_case(cpu, cuda, 2, 10000, 1, 1, 1, 2);
    select_case(cpu, cuda, 1, 10000, 0, 7, 5000, 1);   /* all equal: the first k by position */
    select_case(cpu, cuda, 1, 20000, 4, 0, 2048, 1000);
    vote_case(cpu, cuda, 8, 2, 9001, SIFT_VOTE_SOFTMAX_SUM);
    vote_case(cpu, cuda, 4, 4, 4097, SIFT_VOTE_KVHEAD_MAX);
    vote_case(cpu, cuda, 28, 4, 12000, SIFT_VOTE_SOFTMAX_SUM);
    printf("extra: %d checks, %d failures\n", checks, failures);
    sift_context_destroy(cuda);
    sift_context_destroy(cpu);
    return failures ? 1 : 0;
}
