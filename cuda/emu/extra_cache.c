/* Checks of the CUDA backend's "saving work between steps" features (SPEC §4, §6, §7; commit
 * 4414319) against the CPU reference, run on the emulator by run-tests.sh (mode `cache`) and usable
 * on a GPU (public API only, "cuda" against "cpu"):
 *   - paged K/V (sift_tensor_paged_view) in score, gather, dense, causal, causal_attend_sparse and
 *     kv_write: shuffled page tables, absent pages (-1 and past the pool), page sizes 1 .. 64, K and
 *     V through one table, through two tables, and only K paged; unmapped pool rows hold NaN, so a
 *     read of an absent row shows; the table rewritten between computes of one graph (CUDA-graph
 *     replay must follow it);
 *   - the Selection Cache over several steps of one graph, as the engine's attention builder
 *     (sift_attn_graph) makes it: score, vote and select predicated on sel_cache_check, fill_range
 *     refreshing the window of a reused list;
 *   - sel_cache_check alone (thresholds 0.9, 1, -1; full and not; a zero query);
 *   - gather_attend_rope (adjacent and neox, n_rot = D and < D, head dimensions 40 .. 128, GQA,
 *     entries outside the cache), mean_rows and fill_range bit for bit;
 *   - score_max on both of its kernels (rows of 16-64 bytes; everything else): every row length
 *     of the row kernel, groups of 1 .. 8 heads and above 8 (chunks), K views at odd offsets, paged
 *     K with absent pages, a predicate that keeps the votes, and equality with score + vote. */
#include "sift.h"
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float urand(void) { return (float)((next() >> 40) * (1.0 / 8388608.0)) - 1.0f; } /* [-1, 1) */
static int64_t irand(int64_t n) { return (int64_t)(next() % (uint64_t)n); }

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        sift_status s_ = (x);                                                                                          \
        if (s_ != SIFT_OK) {                                                                                           \
            fail(running_case, "cuda", #x);                                                                            \
            test_note("cuda", "%s", sift_last_error());                                                                \
            exit(test_summary("extra-cache", "cuda"));                                                                 \
        }                                                                                                              \
    } while (0)

static void check(const char *what, const float *ref, const float *got, size_t n, double bound)
{
    double num = 0, den = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) != isfinite(got[i])) finite = 0;
        if (!isfinite(ref[i])) continue;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    const double nmse = den > 0 ? num / den : num;
    if (!finite) fail(what, "cuda", "finite where the CPU's is not, or not where it is");
    else report(what, "cuda", "nmse", nmse, bound, nmse <= bound);
}

static void check_bits(const char *what, const void *ref, const void *got, size_t bytes)
{
    const unsigned char *a = ref, *b = got;
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += a[i] != b[i];
    report(what, "cuda", "bytes off", (double)bad, 0.0, bad == 0);
}

static sift_tensor *make(sift_context *ctx, sift_dtype dt, int nd, const int64_t *shape, const void *data)
{
    sift_tensor *t;
    TRY(sift_tensor_create(ctx, dt, nd, shape, &t));
    if (data) TRY(sift_tensor_write(t, 0, data, sift_tensor_nbytes(t)));
    return t;
}

static void read_all(const sift_tensor *t, void *dst) { TRY(sift_tensor_read(t, 0, dst, sift_tensor_nbytes(t))); }

/* n values in dtype dt (f16 or f32) from floats. */
static void *as_dtype(sift_dtype dt, const float *f, size_t n)
{
    if (dt == SIFT_F32) {
        float *o = malloc(n * 4);
        memcpy(o, f, n * 4);
        return o;
    }
    uint16_t *h = malloc(n * 2);
    sift_f32_to_f16(h, f, n);
    return h;
}

static float *rand_floats(size_t n, float amp)
{
    float *f = malloc(n * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = roundf(urand() * amp * 256.0f) / 256.0f;
    return f;
}

/* ---- paged K/V --------------------------------------------------------------------------------- */

/* A pool [hkv][pool_pages * P][d] with NaN everywhere, and a page table of n_pages entries: logical
 * page p -> a distinct pool page, or absent (-1, or pool_pages) with probability 1/absent_in. The
 * mapped rows get the logical data of `logical` [hkv][n_pages * P][d]. */
typedef struct {
    int64_t n_pages, pool_pages, P;
    int32_t *table;
    float *pool; /* f32 copy of the pool contents */
} paging;

static paging make_paging(int hkv, int d, int64_t P, int64_t n_pages, int64_t pool_pages, int absent_in, const float *logical)
{
    paging pg = {n_pages, pool_pages, P, malloc((size_t)n_pages * 4), NULL};
    int64_t *perm = malloc((size_t)pool_pages * sizeof *perm);
    for (int64_t i = 0; i < pool_pages; i++) perm[i] = i;
    for (int64_t i = pool_pages - 1; i > 0; i--) {
        const int64_t j = irand(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t p = 0; p < n_pages; p++) {
        pg.table[p] = (int32_t)perm[p % pool_pages];
        if (absent_in && irand(absent_in) == 0) pg.table[p] = irand(2) ? -1 : (int32_t)pool_pages;
    }
    free(perm);
    const int64_t rows = pool_pages * P, lrows = n_pages * P;
    pg.pool = malloc((size_t)(hkv * rows * d) * sizeof(float));
    for (int64_t i = 0; i < hkv * rows * d; i++) pg.pool[i] = NAN;
    for (int g = 0; g < hkv; g++)
        for (int64_t j = 0; j < lrows; j++) {
            const int32_t page = pg.table[j / P];
            if (page < 0 || page >= pool_pages) continue;
            memcpy(pg.pool + ((size_t)g * rows + (size_t)page * P + j % P) * d, logical + ((size_t)g * lrows + j) * d,
                   (size_t)d * 4);
        }
    return pg;
}

typedef enum { SHARED_TABLE, TWO_TABLES, K_ONLY } paged_mode;
static const char *mode_name(paged_mode m) { return m == SHARED_TABLE ? "shared" : m == TWO_TABLES ? "two-tables" : "k-only"; }

/* score, gather, dense, causal, sparse and kv_write over paged K/V on both backends; the table is
 * then rewritten (another permutation) and the same graph computed twice more. */
static void paged_case(sift_context *cpu, sift_context *cuda, int hq, int hkv, int d, sift_dtype dt, int64_t P,
                       int64_t n_pages, int64_t pool_pages, paged_mode mode, int absent_in)
{
    test_case_begin("paged K/V", "cuda");
    const int64_t N = n_pages * P, T = 5, pos0 = N - T - 2, L = pos0 / 2 + 1, glen = N + 3;
    const size_t nkv = (size_t)hkv * (size_t)N * (size_t)d;
    float *kl = rand_floats(nkv, 1.0f), *vl = rand_floats(nkv, 1.0f);
    float *q1 = rand_floats((size_t)hq * d, 1.0f), *qt = rand_floats((size_t)T * hq * d, 1.0f);
    float *src = rand_floats((size_t)T * hkv * d, 1.0f);
    int32_t *gidx = malloc((size_t)glen * 4), *sidx = malloc((size_t)(hkv * L) * 4);
    for (int64_t i = 0; i < glen; i++) gidx[i] = (int32_t)irand(N);
    gidx[0] = -1, gidx[1] = (int32_t)N; /* outside the cache: never read */
    for (int64_t i = 0; i < hkv * L; i++) sidx[i] = (int32_t)irand(pos0);
    paging pk = make_paging(hkv, d, P, n_pages, pool_pages, absent_in, kl);
    paging pv = mode == TWO_TABLES ? make_paging(hkv, d, P, n_pages, pool_pages + 3, absent_in, vl)
                                   : make_paging(hkv, d, P, n_pages, pool_pages, 0, vl);
    if (mode == SHARED_TABLE) { /* V through K's table */
        free(pv.pool), free(pv.table);
        pv = pk;
        pv.pool = malloc((size_t)(hkv * pool_pages * P * d) * 4);
        for (int64_t i = 0; i < hkv * pool_pages * P * d; i++) pv.pool[i] = NAN;
        for (int g = 0; g < hkv; g++)
            for (int64_t j = 0; j < N; j++) {
                const int32_t page = pk.table[j / P];
                if (page < 0 || page >= pool_pages) continue;
                memcpy(pv.pool + ((size_t)g * pool_pages * P + (size_t)page * P + j % P) * d, vl + ((size_t)g * N + j) * d,
                       (size_t)d * 4);
            }
    }
    /* a second table for the rewrite: K's pages shuffled again (the pool keeps its contents) */
    int32_t *table2 = malloc((size_t)n_pages * 4);
    for (int64_t p = 0; p < n_pages; p++) table2[p] = pk.table[(p * 7 + 3) % n_pages];

    const float scale = 1.0f / sqrtf((float)d);
    const size_t ns = (size_t)hq * (size_t)(N - 1), no = (size_t)hq * d, nto = (size_t)T * hq * d;
    float *res[2][6];
    void *pools[2][2];
    const size_t pool_k_bytes = (size_t)(hkv * pool_pages * P * d) * sift_dtype_size(dt);
    const int64_t v_rows = (mode == TWO_TABLES ? pool_pages + 3 : mode == K_ONLY ? n_pages : pool_pages) * P;
    const size_t pool_v_bytes = (size_t)(hkv * v_rows * d) * sift_dtype_size(dt);
    float *rerun[2][3];
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        sift_context *ctx = ctxs[c];
        const int64_t qs[2] = {hq, d}, qts[3] = {T, hq, d}, ss[2] = {hq, N - 1}, gis[2] = {1, glen}, sis[2] = {hkv, L};
        const int64_t srcs[3] = {T, hkv, d}, kps[3] = {hkv, pool_pages * P, d},
                      vps[3] = {hkv, v_rows, d};
        const int64_t nps[1] = {n_pages};
        void *kpool = as_dtype(dt, pk.pool, (size_t)(hkv * pool_pages * P * d));
        void *vdata = mode == K_ONLY ? as_dtype(dt, vl, nkv) : as_dtype(dt, pv.pool, (size_t)(vps[0] * vps[1] * d));
        sift_tensor *q = make(ctx, SIFT_F32, 2, qs, q1), *qq = make(ctx, SIFT_F32, 3, qts, qt);
        sift_tensor *kp = make(ctx, dt, 3, kps, kpool), *vp = make(ctx, dt, 3, vps, vdata);
        sift_tensor *tk = make(ctx, SIFT_I32, 1, nps, pk.table);
        sift_tensor *tv = mode == TWO_TABLES ? make(ctx, SIFT_I32, 1, nps, pv.table) : tk;
        sift_tensor *k, *v;
        TRY(sift_tensor_paged_view(kp, tk, P, &k));
        if (mode == K_ONLY) v = vp;
        else TRY(sift_tensor_paged_view(vp, tv, P, &v));
        sift_tensor *gi = make(ctx, SIFT_I32, 2, gis, gidx), *si = make(ctx, SIFT_I32, 2, sis, sidx);
        sift_tensor *sc = make(ctx, SIFT_F32, 2, ss, NULL), *og = make(ctx, SIFT_F32, 2, qs, NULL),
                    *od = make(ctx, SIFT_F32, 2, qs, NULL), *oc = make(ctx, SIFT_F32, 3, qts, NULL),
                    *osp = make(ctx, SIFT_F32, 3, qts, NULL), *sr = make(ctx, SIFT_F32, 3, srcs, src);
        sift_graph *g;
        TRY(sift_graph_create(ctx, &g));
        TRY(sift_op_score(g, q, k, 1, N, scale, sc));
        TRY(sift_op_gather_attend(g, q, k, v, gi, scale, og));
        TRY(sift_op_dense_attend(g, q, k, v, N, scale, od));
        TRY(sift_op_causal_attend(g, qq, k, v, pos0, scale, oc));
        TRY(sift_op_causal_attend_sparse(g, qq, k, v, si, pos0, scale, osp));
        TRY(sift_graph_compute(g));
        for (int r = 0; r < 5; r++) res[c][r] = malloc(r == 0 ? ns * 4 : r < 3 ? no * 4 : nto * 4);
        read_all(sc, res[c][0]), read_all(og, res[c][1]), read_all(od, res[c][2]), read_all(oc, res[c][3]);
        read_all(osp, res[c][4]);
        /* kv_write into the paged caches at pos0 (rows without a page are skipped) */
        sift_graph *w;
        TRY(sift_graph_create(ctx, &w));
        TRY(sift_op_kv_write(w, sr, pos0, k));
        TRY(sift_op_kv_write(w, sr, pos0 - 1, v));
        TRY(sift_graph_compute(w));
        sift_graph_destroy(w);
        pools[c][0] = malloc(pool_k_bytes);
        pools[c][1] = malloc(pool_v_bytes);
        read_all(kp, pools[c][0]);
        read_all(vp, pools[c][1]);
        /* the table rewritten between computes: the second compute replays a CUDA graph */
        TRY(sift_tensor_write(tk, 0, table2, (size_t)n_pages * 4));
        for (int r = 0; r < 2; r++) TRY(sift_graph_compute(g));
        rerun[c][0] = malloc(ns * 4), rerun[c][1] = malloc(no * 4), rerun[c][2] = malloc(nto * 4);
        read_all(sc, rerun[c][0]), read_all(od, rerun[c][1]), read_all(osp, rerun[c][2]);
        sift_graph_destroy(g);
        if (v != vp) sift_tensor_destroy(v);
        sift_tensor_destroy(k);
        sift_tensor *all[] = {q, qq, kp, vp, gi, si, sc, og, od, oc, osp, sr};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) sift_tensor_destroy(all[i]);
        if (tv != tk) sift_tensor_destroy(tv);
        sift_tensor_destroy(tk);
        free(kpool), free(vdata);
    }
    char name[200];
    const double b = dt == SIFT_F16 ? 5e-4 : 1e-7;
    const char *what[5] = {"score", "gather", "dense", "causal", "sparse"};
    const size_t counts[5] = {ns, no, no, nto, nto};
    for (int r = 0; r < 5; r++) {
        snprintf(name, sizeof name, "paged %-6s H=%d/%d D=%d %s P=%lld pages=%lld/%lld %s", what[r], hq, hkv, d,
                 sift_dtype_name(dt), (long long)P, (long long)n_pages, (long long)pool_pages, mode_name(mode));
        check(name, res[0][r], res[1][r], counts[r], r == 0 ? 1e-7 : b);
    }
    snprintf(name, sizeof name, "paged kv_write K pool H=%d D=%d %s P=%lld %s", hkv, d, sift_dtype_name(dt), (long long)P,
             mode_name(mode));
    check_bits(name, pools[0][0], pools[1][0], pool_k_bytes);
    snprintf(name, sizeof name, "paged kv_write V %s H=%d D=%d %s P=%lld %s", mode == K_ONLY ? "plain" : "pool", hkv, d,
             sift_dtype_name(dt), (long long)P, mode_name(mode));
    check_bits(name, pools[0][1], pools[1][1], pool_v_bytes);
    const char *rw[3] = {"score", "dense", "sparse"};
    const size_t rc[3] = {ns, no, nto};
    for (int r = 0; r < 3; r++) {
        snprintf(name, sizeof name, "paged table rewritten, replay: %-6s H=%d/%d D=%d %s P=%lld %s", rw[r], hq, hkv, d,
                 sift_dtype_name(dt), (long long)P, mode_name(mode));
        check(name, rerun[0][r], rerun[1][r], rc[r], r == 0 ? 1e-7 : b);
    }
    for (int c = 0; c < 2; c++) {
        for (int r = 0; r < 5; r++) free(res[c][r]);
        for (int r = 0; r < 3; r++) free(rerun[c][r]);
        free(pools[c][0]), free(pools[c][1]);
    }
    free(kl), free(vl), free(q1), free(qt), free(src), free(gidx), free(sidx), free(table2);
    free(pk.table), free(pk.pool);
    if (mode == TWO_TABLES || mode == K_ONLY) free(pv.table);
    free(pv.pool);
}

/* ---- the Selection Cache: sel_cache_check, predicated score/vote/select, fill_range ---------- */

/* The engine's attention builder with the Selection Cache (sift_attn_graph), one graph computed
 * `steps` times: each step's q is the previous one plus noise (or a new random q every 3rd step),
 * so that some steps reuse the cached list and skip score, vote and select. The cache's state, the
 * lists and the output are compared with the CPU's. */
static void selcache_case(sift_context *cpu, sift_context *cuda, int hq, int hkv, int d, int64_t N, int64_t S, int64_t W,
                          int64_t K, sift_vote_mode vote, float theta, int steps)
{
    test_case_begin("selection cache", "cuda");
    const sift_select_params sp = {N, S, W, K};
    const int64_t cnt = sift_select_count(&sp);
    const int64_t lists = vote == SIFT_VOTE_KVHEAD_MAX ? hkv : 1, qn = (int64_t)hq * d;
    const size_t nkv = (size_t)hkv * (size_t)N * (size_t)d;
    float *kf = rand_floats(nkv, 1.0f), *vf = rand_floats(nkv, 1.0f);
    float **qs = malloc((size_t)steps * sizeof *qs);
    for (int s = 0; s < steps; s++) {
        qs[s] = rand_floats((size_t)qn, 1.0f);
        if (s > 0 && s % 3 != 0)
            for (int64_t i = 0; i < qn; i++) qs[s][i] = qs[s - 1][i] + 0.05f * qs[s][i];
    }
    float *res[2][3];
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        sift_context *ctx = ctxs[c];
        const int64_t qsh[2] = {hq, d}, kvs[3] = {hkv, N, d}, sts[1] = {qn + SIFT_SEL_CACHE_EXTRA}, ixs[2] = {lists, cnt};
        void *kd = as_dtype(SIFT_F16, kf, nkv), *vd = as_dtype(SIFT_F16, vf, nkv);
        float *zeros = calloc((size_t)(qn + SIFT_SEL_CACHE_EXTRA), 4);
        sift_tensor *q = make(ctx, SIFT_F32, 2, qsh, qs[0]), *k = make(ctx, SIFT_F16, 3, kvs, kd),
                    *v = make(ctx, SIFT_F16, 3, kvs, vd), *st = make(ctx, SIFT_F32, 1, sts, zeros),
                    *ix = make(ctx, SIFT_I32, 2, ixs, NULL), *o = make(ctx, SIFT_F32, 2, qsh, NULL);
        sift_attn_config cfg = sift_attn_config_default();
        cfg.n_q_heads = hq, cfg.n_kv_heads = hkv, cfg.head_dim = d;
        cfg.sel = sp;
        cfg.vote = vote;
        cfg.mode = SIFT_ATTN_SELECT;
        cfg.sel_cache = theta;
        cfg.sel_state = st;
        cfg.sel_indices = ix;
        sift_graph *g;
        TRY(sift_attn_graph(ctx, &cfg, q, k, v, o, &g, NULL));
        res[c][0] = malloc((size_t)steps * (size_t)(qn + SIFT_SEL_CACHE_EXTRA) * 4);
        res[c][1] = malloc((size_t)steps * (size_t)(lists * cnt) * 4);
        res[c][2] = malloc((size_t)steps * (size_t)qn * 4);
        for (int s = 0; s < steps; s++) {
            TRY(sift_tensor_write(q, 0, qs[s], (size_t)qn * 4));
            if (s % 4 == 3) {
                double *us = malloc(((size_t)sift_graph_node_count(g) + 1) * sizeof *us);
                TRY(sift_graph_compute_timed(g, us));
                free(us);
            } else {
                TRY(sift_graph_compute(g));
            }
            read_all(st, res[c][0] + (size_t)s * (qn + SIFT_SEL_CACHE_EXTRA));
            read_all(ix, (int32_t *)res[c][1] + (size_t)s * lists * cnt);
            read_all(o, res[c][2] + (size_t)s * qn);
        }
        sift_graph_destroy(g);
        sift_tensor *all[] = {q, k, v, st, ix, o};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) sift_tensor_destroy(all[i]);
        free(kd), free(vd), free(zeros);
    }
    int hits = 0;
    for (int s = 0; s < steps; s++) hits += res[0][0][(size_t)s * (qn + SIFT_SEL_CACHE_EXTRA) + qn + SIFT_SEL_CACHE_REUSE] != 0.0f;
    char name[200];
    snprintf(name, sizeof name, "selcache state, %d steps (%d reused) H=%d/%d N=%lld theta=%g %s", steps, hits, hq, hkv,
             (long long)N, (double)theta, vote == SIFT_VOTE_KVHEAD_MAX ? "kvhead-max" : "softmax-sum");
    check_bits(name, res[0][0], res[1][0], (size_t)steps * (qn + SIFT_SEL_CACHE_EXTRA) * 4);
    snprintf(name, sizeof name, "selcache indices H=%d/%d N=%lld theta=%g", hq, hkv, (long long)N, (double)theta);
    check_bits(name, res[0][1], res[1][1], (size_t)steps * lists * cnt * 4);
    snprintf(name, sizeof name, "selcache output H=%d/%d N=%lld theta=%g", hq, hkv, (long long)N, (double)theta);
    check(name, res[0][2], res[1][2], (size_t)steps * qn, 5e-4);
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < 3; r++) free(res[c][r]);
    for (int s = 0; s < steps; s++) free(qs[s]);
    free(qs), free(kf), free(vf);
}

/* sel_cache_check alone over a sequence of (q, full) steps. */
static void selcheck_case(sift_context *cpu, sift_context *cuda, int hq, int d, float theta)
{
    test_case_begin("sel_cache_check", "cuda");
    const int steps = 9;
    const int64_t qn = (int64_t)hq * d, qsh[2] = {hq, d}, sts[1] = {qn + SIFT_SEL_CACHE_EXTRA};
    float *qs = malloc((size_t)(steps * qn) * 4);
    for (int s = 0; s < steps; s++)
        for (int64_t i = 0; i < qn; i++) {
            const float r = urand();
            qs[s * qn + i] = s == 4 ? 0.0f : s > 0 && s % 2 ? qs[(s - 1) * qn + i] + 0.3f * r : r;
        }
    float *res[2];
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        float *zeros = calloc((size_t)(qn + SIFT_SEL_CACHE_EXTRA), 4);
        sift_tensor *q = make(ctxs[c], SIFT_F32, 2, qsh, qs), *st = make(ctxs[c], SIFT_F32, 1, sts, zeros);
        sift_graph *g[2];
        for (int f = 0; f < 2; f++) {
            TRY(sift_graph_create(ctxs[c], &g[f]));
            TRY(sift_op_sel_cache_check(g[f], q, theta, f, st));
        }
        res[c] = malloc((size_t)(steps * (qn + SIFT_SEL_CACHE_EXTRA)) * 4);
        for (int s = 0; s < steps; s++) {
            TRY(sift_tensor_write(q, 0, qs + s * qn, (size_t)qn * 4));
            TRY(sift_graph_compute(g[s == 6 ? 0 : 1])); /* step 6: not a full selection */
            read_all(st, res[c] + (size_t)s * (qn + SIFT_SEL_CACHE_EXTRA));
        }
        sift_graph_destroy(g[0]), sift_graph_destroy(g[1]);
        sift_tensor_destroy(q), sift_tensor_destroy(st);
        free(zeros);
    }
    char name[200];
    const float *e = res[0] + (size_t)(steps - 1) * (qn + SIFT_SEL_CACHE_EXTRA) + qn;
    snprintf(name, sizeof name, "sel_cache_check Hq*D=%lld theta=%g (hits %g of %g)", (long long)qn, (double)theta,
             (double)e[SIFT_SEL_CACHE_HITS], (double)e[SIFT_SEL_CACHE_STEPS]);
    check_bits(name, res[0], res[1], (size_t)(steps * (qn + SIFT_SEL_CACHE_EXTRA)) * 4);
    free(res[0]), free(res[1]), free(qs);
}

/* ---- gather_attend_rope --------------------------------------------------------------------- */

static void rope_case(sift_context *cpu, sift_context *cuda, int hq, int hkv, int d, sift_dtype dt, int n_rot,
                      sift_rope_mode mode, float base, int64_t N, int64_t len, int lists, int64_t P)
{
    test_case_begin("gather_attend_rope", "cuda");
    const size_t nkv = (size_t)hkv * (size_t)N * (size_t)d, no = (size_t)hq * d;
    float *kf = rand_floats(nkv, 1.0f), *vf = rand_floats(nkv, 1.0f), *qf = rand_floats(no, 1.0f);
    int32_t *idx = malloc((size_t)(lists * len) * 4);
    for (int64_t i = 0; i < lists * len; i++) idx[i] = (int32_t)irand(N);
    if (len > 3) idx[1] = -3, idx[len - 2] = (int32_t)N; /* outside: skipped, but their ranks count */
    const sift_rope_params rp = {n_rot, base, mode};
    float *res[2];
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        const int64_t qs[2] = {hq, d}, kvs[3] = {hkv, N, d}, is[2] = {lists, len}, nps[1] = {N / (P ? P : 1)};
        void *kd = as_dtype(dt, kf, nkv), *vd = as_dtype(dt, vf, nkv);
        sift_tensor *q = make(ctxs[c], SIFT_F32, 2, qs, qf), *kp = make(ctxs[c], dt, 3, kvs, kd),
                    *vp = make(ctxs[c], dt, 3, kvs, vd), *ix = make(ctxs[c], SIFT_I32, 2, is, idx),
                    *o = make(ctxs[c], SIFT_F32, 2, qs, NULL), *tab = NULL, *k = kp, *v = vp;
        if (P) { /* identity page table: the same data, through the paged path */
            int32_t *t = malloc((size_t)nps[0] * 4);
            for (int64_t p = 0; p < nps[0]; p++) t[p] = (int32_t)p;
            tab = make(ctxs[c], SIFT_I32, 1, nps, t);
            free(t);
            TRY(sift_tensor_paged_view(kp, tab, P, &k));
            TRY(sift_tensor_paged_view(vp, tab, P, &v));
        }
        sift_graph *g;
        TRY(sift_graph_create(ctxs[c], &g));
        TRY(sift_op_gather_attend_rope(g, q, k, v, ix, 1.0f / sqrtf((float)d), &rp, o));
        TRY(sift_graph_compute(g));
        TRY(sift_graph_compute(g));
        res[c] = malloc(no * 4);
        read_all(o, res[c]);
        sift_graph_destroy(g);
        if (P) sift_tensor_destroy(k), sift_tensor_destroy(v), sift_tensor_destroy(tab);
        sift_tensor_destroy(q), sift_tensor_destroy(kp), sift_tensor_destroy(vp), sift_tensor_destroy(ix),
            sift_tensor_destroy(o);
        free(kd), free(vd);
    }
    char name[200];
    snprintf(name, sizeof name, "gather_rope %s n_rot=%d H=%d/%d D=%d %s N=%lld len=%lld lists=%d%s",
             mode == SIFT_ROPE_NEOX ? "neox" : "adjacent", n_rot, hq, hkv, d, sift_dtype_name(dt), (long long)N,
             (long long)len, lists, P ? " paged" : "");
    check(name, res[0], res[1], no, dt == SIFT_F16 ? 5e-4 : 1e-7);
    free(res[0]), free(res[1]), free(kf), free(vf), free(qf), free(idx);
}

/* ---- score_max ---------------------------------------------------------------------------------- */

/* votes [hkv][end - begin] of score_max against the CPU's, over K stored plainly, as a view `off`
 * bytes into its storage (off not a multiple of 16: the element-copy path), or paged with page size
 * P (0: not paged; NaN in unmapped pool rows, absent pages with probability 1 / absent_in). The
 * graph runs twice (the second replays a CUDA graph) and then, with a new q, under a set predicate:
 * the votes keep what they held. On the CUDA backend the votes also equal score + vote(KVHEAD_MAX). */
static void score_max_case(sift_context *cpu, sift_context *cuda, int hq, int hkv, int d, sift_dtype dt, int64_t N,
                           int64_t begin, int64_t end, size_t off, int64_t P, int absent_in)
{
    test_case_begin("score_max", "cuda");
    const int64_t m = end - begin;
    const size_t nkv = (size_t)hkv * (size_t)N * (size_t)d, nq = (size_t)hq * d, nv = (size_t)hkv * (size_t)m;
    const size_t es = sift_dtype_size(dt);
    float *kl = rand_floats(nkv, 1.0f), *q1 = rand_floats(nq, 1.0f), *q2 = rand_floats(nq, 1.0f);
    paging pk = {0};
    if (P) pk = make_paging(hkv, d, P, N / P, N / P + 2, absent_in, kl);
    const int64_t pool_rows = P ? (N / P + 2) * P : N;
    const float scale = 1.0f / sqrtf((float)d);
    float *res[2], *kept = malloc(nv * 4), *pair = malloc(nv * 4);
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        sift_context *ctx = ctxs[c];
        const int64_t qs[2] = {hq, d}, ks[3] = {hkv, N, d}, ps[3] = {hkv, pool_rows, d}, us[2] = {hkv, m};
        const int64_t ss[2] = {hq, m}, fs[1] = {1}, nps[1] = {P ? N / P : 1};
        void *kd = as_dtype(dt, P ? pk.pool : kl, (size_t)(hkv * pool_rows * d));
        sift_tensor *store = NULL, *tab = NULL, *k = NULL;
        if (P) {
            store = make(ctx, dt, 3, ps, kd);
            tab = make(ctx, SIFT_I32, 1, nps, pk.table);
            TRY(sift_tensor_paged_view(store, tab, P, &k));
        } else if (off) {
            const int64_t total = (int64_t)((nkv * es + off) / es) + 1;
            store = make(ctx, dt, 1, &total, NULL);
            TRY(sift_tensor_view(store, dt, 3, ks, off, &k));
            TRY(sift_tensor_write(k, 0, kd, nkv * es));
        } else {
            k = make(ctx, dt, 3, ks, kd);
        }
        const float zero = 0.0f, one = 1.0f;
        sift_tensor *q = make(ctx, SIFT_F32, 2, qs, q1), *u = make(ctx, SIFT_F32, 2, us, NULL),
                    *flag = make(ctx, SIFT_F32, 1, fs, &zero);
        sift_graph *g;
        TRY(sift_graph_create(ctx, &g));
        TRY(sift_graph_skip_if(g, flag, 0));
        TRY(sift_op_score_max(g, q, k, begin, end, scale, u));
        TRY(sift_graph_skip_if(g, NULL, 0));
        TRY(sift_graph_compute(g));
        TRY(sift_graph_compute(g));
        res[c] = malloc(nv * 4);
        read_all(u, res[c]);
        if (c == 1) {
            /* a new q under a set flag: nothing runs, the votes stay */
            TRY(sift_tensor_write(flag, 0, &one, 4));
            TRY(sift_tensor_write(q, 0, q2, nq * 4));
            TRY(sift_graph_compute(g));
            read_all(u, kept);
            /* score then vote(KVHEAD_MAX) on this backend, with q as it was */
            TRY(sift_tensor_write(q, 0, q1, nq * 4));
            sift_tensor *sc = make(ctx, SIFT_F32, 2, ss, NULL), *u2 = make(ctx, SIFT_F32, 2, us, NULL);
            sift_graph *h;
            TRY(sift_graph_create(ctx, &h));
            TRY(sift_op_score(h, q, k, begin, end, scale, sc));
            TRY(sift_op_vote(h, SIFT_VOTE_KVHEAD_MAX, sc, u2));
            TRY(sift_graph_compute(h));
            read_all(u2, pair);
            sift_graph_destroy(h);
            sift_tensor_destroy(sc), sift_tensor_destroy(u2);
        }
        sift_graph_destroy(g);
        sift_tensor_destroy(q), sift_tensor_destroy(u), sift_tensor_destroy(flag);
        if (store) sift_tensor_destroy(k), sift_tensor_destroy(store);
        else sift_tensor_destroy(k);
        if (tab) sift_tensor_destroy(tab);
        free(kd);
    }
    char name[200];
    snprintf(name, sizeof name, "score_max H=%d/%d D=%d %s N=%lld [%lld, %lld) off=%zu P=%lld", hq, hkv, d,
             sift_dtype_name(dt), (long long)N, (long long)begin, (long long)end, off, (long long)P);
    check(name, res[0], res[1], nv, 1e-7);
    snprintf(name, sizeof name, "score_max H=%d/%d D=%d %s: kept under a set predicate", hq, hkv, d, sift_dtype_name(dt));
    check_bits(name, res[1], kept, nv * 4);
    snprintf(name, sizeof name, "score_max H=%d/%d D=%d %s: == score + vote(KVHEAD_MAX) on cuda", hq, hkv, d,
             sift_dtype_name(dt));
    check(name, pair, res[1], nv, 1e-7);
    free(res[0]), free(res[1]), free(kept), free(pair), free(kl), free(q1), free(q2);
    if (P) free(pk.table), free(pk.pool);
}

/* ---- mean_rows, fill_range ------------------------------------------------------------------ */

static void small_ops_case(sift_context *cpu, sift_context *cuda, int64_t T, int64_t E, int64_t lists, int64_t len,
                           int64_t col0, int64_t start)
{
    test_case_begin("mean_rows, fill_range", "cuda");
    float *x = rand_floats((size_t)(T * E), 3.0f);
    for (int64_t i = 0; i < T * E; i++) x[i] += urand() * 1e-3f; /* not exact in few bits: rounding shows */
    int32_t *init = malloc((size_t)(lists * len) * 4);
    for (int64_t i = 0; i < lists * len; i++) init[i] = (int32_t)(i * 3 + 1);
    float *m[2];
    int32_t *f[2];
    sift_context *ctxs[2] = {cpu, cuda};
    for (int c = 0; c < 2; c++) {
        const int64_t xs[2] = {T, E}, os[2] = {1, E}, is[2] = {lists, len};
        sift_tensor *xt = make(ctxs[c], SIFT_F32, 2, xs, x), *ot = make(ctxs[c], SIFT_F32, 2, os, NULL),
                    *it = make(ctxs[c], SIFT_I32, 2, is, init);
        sift_graph *g;
        TRY(sift_graph_create(ctxs[c], &g));
        TRY(sift_op_mean_rows(g, xt, ot));
        TRY(sift_op_fill_range(g, col0, start, it));
        TRY(sift_graph_compute(g));
        m[c] = malloc((size_t)E * 4), f[c] = malloc((size_t)(lists * len) * 4);
        read_all(ot, m[c]), read_all(it, f[c]);
        sift_graph_destroy(g);
        sift_tensor_destroy(xt), sift_tensor_destroy(ot), sift_tensor_destroy(it);
    }
    char name[200];
    snprintf(name, sizeof name, "mean_rows T=%lld E=%lld", (long long)T, (long long)E);
    check_bits(name, m[0], m[1], (size_t)E * 4);
    snprintf(name, sizeof name, "fill_range lists=%lld len=%lld col0=%lld start=%lld", (long long)lists, (long long)len,
             (long long)col0, (long long)start);
    check_bits(name, f[0], f[1], (size_t)(lists * len) * 4);
    free(m[0]), free(m[1]), free(f[0]), free(f[1]), free(x), free(init);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    sift_context *cpu, *cuda;
    TRY(sift_context_create(SIFT_BACKEND_CPU, &cpu));
    if (sift_context_create(SIFT_BACKEND_CUDA, &cuda) != SIFT_OK) {
        test_note("cuda", "skipped: %s", sift_last_error());
        sift_context_destroy(cpu);
        return 77;
    }
    test_note("cuda", "%s", sift_context_device_name(cuda));
    small_ops_case(cpu, cuda, 7, 300, 2, 50, 20, 1000);
    small_ops_case(cpu, cuda, 1, 17, 1, 8, 0, 0);
    small_ops_case(cpu, cuda, 70, 1, 8, 700, 699, 5);
    small_ops_case(cpu, cuda, 3, 5000, 3, 10, 10, 7); /* col0 = len: nothing to fill */
    selcheck_case(cpu, cuda, 8, 64, 0.9f);
    selcheck_case(cpu, cuda, 32, 128, 0.5f);
    selcheck_case(cpu, cuda, 1, 8, 1.0f);
    selcheck_case(cpu, cuda, 3, 40, -1.0f);
    selcheck_case(cpu, cuda, 3, 13, 0.7f);    /* Hq * D not a multiple of 4: scalar loads */
    selcheck_case(cpu, cuda, 40, 512, 0.9f);  /* more than one round of loads per thread */
    /* paged K/V: page sizes, absent pages, both dtypes, D 64 / 128 / 40 / 96, GQA 1..8 */
    paged_case(cpu, cuda, 8, 2, 64, SIFT_F16, 16, 12, 15, SHARED_TABLE, 5);
    paged_case(cpu, cuda, 4, 4, 128, SIFT_F32, 4, 30, 32, SHARED_TABLE, 0);
    paged_case(cpu, cuda, 8, 1, 128, SIFT_F16, 64, 3, 4, SHARED_TABLE, 0);
    paged_case(cpu, cuda, 6, 2, 40, SIFT_F16, 1, 90, 100, SHARED_TABLE, 7);
    paged_case(cpu, cuda, 8, 2, 64, SIFT_F16, 8, 20, 24, TWO_TABLES, 6);
    paged_case(cpu, cuda, 12, 2, 96, SIFT_F32, 16, 8, 9, TWO_TABLES, 0);
    paged_case(cpu, cuda, 4, 2, 64, SIFT_F16, 32, 5, 7, K_ONLY, 0);
    /* the Selection Cache over steps of one graph: radix selects, reuse and misses */
    selcache_case(cpu, cuda, 8, 2, 64, 700, 4, 16, 37, SIFT_VOTE_SOFTMAX_SUM, 0.9f, 7);
    selcache_case(cpu, cuda, 8, 2, 128, 500, 8, 32, 50, SIFT_VOTE_KVHEAD_MAX, 0.95f, 6);
    selcache_case(cpu, cuda, 4, 4, 64, 300, 4, 8, 400, SIFT_VOTE_SOFTMAX_SUM, 0.5f, 4); /* never full */
    /* score_max: the row kernel (f16 D = 8, 16, 32; f32 D = 8, 16; groups 1 .. 8), then the tiled
     * kernel (odd offsets, groups above 8, other D), plain and paged */
    score_max_case(cpu, cuda, 32, 8, 16, SIFT_F16, 5000, 128, 4488, 0, 0, 0); /* TokenButler's shape */
    score_max_case(cpu, cuda, 32, 8, 16, SIFT_F16, 4096, 100, 3584, 0, 64, 5);
    score_max_case(cpu, cuda, 8, 2, 16, SIFT_F16, 300, 0, 300, 0, 1, 4);
    score_max_case(cpu, cuda, 4, 1, 16, SIFT_F16, 20000, 3, 19999, 0, 0, 0); /* several blocks per KV head */
    score_max_case(cpu, cuda, 6, 2, 8, SIFT_F16, 700, 5, 650, 0, 0, 0);       /* 3 heads of 4 */
    score_max_case(cpu, cuda, 10, 2, 32, SIFT_F16, 912, 1, 911, 0, 16, 3);    /* 5 heads of 8 */
    score_max_case(cpu, cuda, 4, 2, 8, SIFT_F32, 333, 0, 333, 0, 0, 0);
    score_max_case(cpu, cuda, 4, 4, 16, SIFT_F32, 500, 7, 421, 0, 0, 0);      /* 1 head, 4 lanes a row */
    score_max_case(cpu, cuda, 16, 2, 16, SIFT_F32, 400, 0, 399, 0, 8, 6);
    score_max_case(cpu, cuda, 4, 2, 16, SIFT_F16, 600, 10, 590, 0, 0, 0);
    score_max_case(cpu, cuda, 14, 2, 32, SIFT_F16, 300, 0, 300, 0, 0, 0);
    score_max_case(cpu, cuda, 32, 8, 16, SIFT_F16, 700, 4, 600, 2, 0, 0);    /* odd offsets: tiled */
    score_max_case(cpu, cuda, 8, 2, 16, SIFT_F32, 500, 0, 500, 4, 0, 0);
    score_max_case(cpu, cuda, 24, 2, 16, SIFT_F16, 800, 0, 777, 0, 0, 0);    /* 12 heads: chunks 8 + 4 */
    score_max_case(cpu, cuda, 18, 1, 64, SIFT_F32, 300, 2, 300, 0, 0, 0);    /* 8 + 8 + 2 */
    score_max_case(cpu, cuda, 12, 1, 128, SIFT_F16, 512, 0, 512, 0, 16, 4);
    score_max_case(cpu, cuda, 6, 2, 40, SIFT_F16, 640, 3, 600, 0, 32, 5);
    score_max_case(cpu, cuda, 8, 8, 128, SIFT_F32, 300, 0, 257, 0, 0, 0);
    score_max_case(cpu, cuda, 8, 2, 64, SIFT_F16, 1000, 0, 1000, 6, 0, 0);
    /* gather_attend_rope */
    rope_case(cpu, cuda, 8, 2, 128, SIFT_F16, 128, SIFT_ROPE_NEOX, 10000.0f, 400, 300, 1, 0);
    rope_case(cpu, cuda, 8, 2, 128, SIFT_F32, 128, SIFT_ROPE_ADJACENT, 10000.0f, 400, 300, 2, 0);
    rope_case(cpu, cuda, 4, 4, 64, SIFT_F16, 32, SIFT_ROPE_NEOX, 500000.0f, 200, 150, 4, 0);
    rope_case(cpu, cuda, 4, 1, 64, SIFT_F32, 64, SIFT_ROPE_NEOX, 10000.0f, 192, 129, 1, 16);
    rope_case(cpu, cuda, 6, 2, 40, SIFT_F16, 24, SIFT_ROPE_ADJACENT, 10000.0f, 100, 77, 2, 0);
    rope_case(cpu, cuda, 12, 1, 96, SIFT_F32, 96, SIFT_ROPE_NEOX, 1000000.0f, 150, 140, 1, 0);
    rope_case(cpu, cuda, 8, 8, 128, SIFT_F16, 2, SIFT_ROPE_ADJACENT, 10000.0f, 80, 70, 8, 0);
    sift_context_destroy(cuda);
    sift_context_destroy(cpu);
    return test_summary("extra-cache", "cuda");
}
