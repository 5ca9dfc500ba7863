/* Checks of the CUDA backend's transformer ops beyond the conformance registry's (tests/cases_model.c),
 * run on the emulator by run-tests.sh (and usable on a GPU: only the public API, "cuda" against "cpu"):
 *   - every head dimension the engine accepts in score / gather / dense / causal attention, not
 *     only the tuned 64 and 128 (D = 8 .. 120, zero-padded rows in the kernels);
 *   - causal attention for T = 1, 7, 70 queries, pos0 > 0, odd head groups, unaligned views;
 *   - matmul on both kernels (matrix-vector for T = 1, tiled for T > 1 and for unaligned operands),
 *     every weight type, K = 172 and other awkward sizes, N that picks 8, 4, 2 and 1 rows per
 *     block, q8_0/q4_0 weights at even but not 16-byte aligned addresses, and the K-quants (q4_k,
 *     q5_k, q6_k) over a tile of super-blocks and its tail, unaligned, decode and prefill;
 *   - kv_write bit for bit on specials (NaN, infinities, subnormals, rounding ties, overflow);
 *   - get_rows with ids outside the table, rope at large positions, rmsnorm, add, swiglu;
 *   - one graph computed several times (direct launches, then its CUDA-graph recording). */
#include "sift.h"
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t rnext(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float urand(void) /* [-1, 1) */
{
    return (float)((rnext() >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        sift_status s_ = (x);                                                                                          \
        if (s_ != SIFT_OK) {                                                                                           \
            fail(running_case, "cuda", #x);                                                                            \
            test_note("cuda", "%s", sift_last_error());                                                                \
            exit(test_summary("extra-model", "cuda"));                                                                 \
        }                                                                                                              \
    } while (0)

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
    if (!finite) fail(what, "cuda", "NaN or Inf in the output");
    else report(what, "cuda", "nmse", nmse, bound, nmse <= bound);
}

static void check_bits(const char *what, const void *ref, const void *got, size_t bytes)
{
    const unsigned char *a = ref, *b = got;
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++) bad += a[i] != b[i];
    report(what, "cuda", "bytes off", (double)bad, 0.0, bad == 0);
}

typedef struct {
    sift_tensor *parent, *view;
} placed;

/* A tensor of `bytes` bytes at byte offset `off` inside a larger one (off = 0: a plain tensor). */
static placed place(sift_context *ctx, sift_dtype dt, int nd, const int64_t *shape, size_t off, const void *data,
                    size_t bytes)
{
    placed p = {0};
    size_t need = sift_dtype_row_bytes(dt, shape[nd - 1]);
    for (int i = 0; i < nd - 1; i++) need *= (size_t)shape[i];
    if (off) {
        const int64_t total = (int64_t)(need + off + 64);
        TRY(sift_tensor_create(ctx, SIFT_I32 == dt ? SIFT_I32 : SIFT_F32, 1, (int64_t[]){(total + 3) / 4}, &p.parent));
        TRY(sift_tensor_view(p.parent, dt, nd, shape, off, &p.view));
    } else {
        TRY(sift_tensor_create(ctx, dt, nd, shape, &p.view));
    }
    if (data && bytes) TRY(sift_tensor_write(p.view, 0, data, bytes));
    return p;
}
static void unplace(placed *p)
{
    sift_tensor_destroy(p->view);
    sift_tensor_destroy(p->parent);
    p->view = p->parent = NULL;
}

/* n random values stored as dt (f32 or f16; f16 values exactly representable) */
static void *rand_data(sift_dtype dt, size_t n, float scale)
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++) f[i] = urand() * scale;
    if (dt == SIFT_F32) return f;
    uint16_t *h = malloc((n ? n : 1) * 2);
    sift_f32_to_f16(h, f, n);
    free(f);
    return h;
}

/* A weight matrix [rows][cols] of type t as raw bytes. */
static void *make_weight(sift_dtype t, int64_t rows, int64_t cols, size_t *bytes)
{
    *bytes = (size_t)rows * sift_dtype_row_bytes(t, cols);
    unsigned char *p = malloc(*bytes + 1);
    const size_t n = (size_t)(rows * cols);
    if (t == SIFT_F32 || t == SIFT_F16) {
        void *d = rand_data(t, n, 0.5f);
        memcpy(p, d, *bytes);
        free(d);
    } else if (t == SIFT_BF16) {
        for (size_t i = 0; i < n; i++) {
            const float f = urand() * 0.5f;
            uint32_t u;
            memcpy(&u, &f, 4);
            p[2 * i] = (unsigned char)(u >> 16), p[2 * i + 1] = (unsigned char)(u >> 24);
        }
    } else if (t == SIFT_Q4_K || t == SIFT_Q5_K || t == SIFT_Q6_K) {
        /* random bytes under small f16 super-block scales (q6_k: d at byte 208; else d, dmin at 0, 2) */
        const size_t bb = sift_dtype_row_bytes(t, 256);
        for (size_t b = 0; b < n / 256; b++) {
            for (size_t i = 0; i < bb; i++) p[b * bb + i] = (unsigned char)(rnext() >> 32);
            for (int k = 0; k < (t == SIFT_Q6_K ? 1 : 2); k++) {
                const float s = (t == SIFT_Q6_K ? 2e-4f : 1e-3f) * (1.5f + urand());
                uint16_t h;
                sift_f32_to_f16(&h, &s, 1);
                const size_t at = b * bb + (t == SIFT_Q6_K ? 208 : 2 * (size_t)k);
                p[at] = (unsigned char)h, p[at + 1] = (unsigned char)(h >> 8);
            }
        }
    } else {
        const size_t bb = t == SIFT_Q8_0 ? 34 : 18;
        for (size_t b = 0; b < n / 32; b++) {
            const float s = 0.01f + 0.04f * (urand() + 1.0f) / 2.0f;
            uint16_t h;
            sift_f32_to_f16(&h, &s, 1);
            p[b * bb] = (unsigned char)h, p[b * bb + 1] = (unsigned char)(h >> 8);
            for (size_t i = 2; i < bb; i++) p[b * bb + i] = (unsigned char)(rnext() >> 32);
        }
    }
    return p;
}

/* ---- attention over every head dimension ------------------------------------------------------ */

static void attn_case(sift_context *ctx[2], int hq, int hkv, int d, sift_dtype dt, int64_t n, size_t kv_off)
{
    test_case_begin("attention, every head dimension", "cuda");
    const int64_t ncap = n + 5;
    const size_t nkv = (size_t)hkv * (size_t)ncap * (size_t)d, es = dt == SIFT_F16 ? 2 : 4;
    float *q = rand_data(SIFT_F32, (size_t)hq * d, 1.0f);
    void *k = rand_data(dt, nkv, 1.0f), *v = rand_data(dt, nkv, 1.0f);
    const int64_t len = n + n / 3;
    int32_t *idx = malloc((size_t)len * sizeof *idx);
    for (int64_t i = 0; i < len; i++) idx[i] = (int32_t)(rnext() % (uint64_t)n);
    const size_t ns = (size_t)hq * (size_t)(n - 1), no = (size_t)hq * d;
    float *res[2][3];
    for (int c = 0; c < 2; c++) {
        const int64_t qs[2] = {hq, d}, kvs[3] = {hkv, ncap, d}, ss[2] = {hq, n - 1}, is[1] = {len};
        placed pq = place(ctx[c], SIFT_F32, 2, qs, 0, q, no * 4), pk = place(ctx[c], dt, 3, kvs, kv_off, k, nkv * es),
               pv = place(ctx[c], dt, 3, kvs, kv_off, v, nkv * es), pi = place(ctx[c], SIFT_I32, 2, (int64_t[]){1, len}, 0, idx, (size_t)len * 4),
               ps = place(ctx[c], SIFT_F32, 2, ss, 0, NULL, 0), pg = place(ctx[c], SIFT_F32, 2, qs, 0, NULL, 0),
               pd = place(ctx[c], SIFT_F32, 2, qs, 0, NULL, 0);
        (void)is;
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        const float scale = 1.0f / sqrtf((float)d);
        TRY(sift_op_score(g, pq.view, pk.view, 1, n, scale, ps.view));
        TRY(sift_op_gather_attend(g, pq.view, pk.view, pv.view, pi.view, scale, pg.view));
        TRY(sift_op_dense_attend(g, pq.view, pk.view, pv.view, n, scale, pd.view));
        TRY(sift_graph_compute(g));
        res[c][0] = malloc(ns * 4), res[c][1] = malloc(no * 4), res[c][2] = malloc(no * 4);
        TRY(sift_tensor_read(ps.view, 0, res[c][0], ns * 4));
        TRY(sift_tensor_read(pg.view, 0, res[c][1], no * 4));
        TRY(sift_tensor_read(pd.view, 0, res[c][2], no * 4));
        sift_graph_destroy(g);
        placed *all[] = {&pq, &pk, &pv, &pi, &ps, &pg, &pd};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) unplace(all[i]);
    }
    char name[200];
    const char *what[3] = {"score ", "gather", "dense "};
    const size_t cnt[3] = {ns, no, no};
    for (int w = 0; w < 3; w++) {
        snprintf(name, sizeof name, "%s H=%d/%d D=%d %s N=%lld kv_off=%zu", what[w], hq, hkv, d, sift_dtype_name(dt),
                 (long long)n, kv_off);
        check(name, res[0][w], res[1][w], cnt[w], 1e-9);
        free(res[0][w]), free(res[1][w]);
    }
    free(q), free(k), free(v), free(idx);
}

static void causal_case(sift_context *ctx[2], int t, int hq, int hkv, int d, sift_dtype dt, int64_t pos0, size_t q_off)
{
    test_case_begin("causal attention", "cuda");
    const int64_t ncap = pos0 + t + 2;
    const size_t nkv = (size_t)hkv * (size_t)ncap * (size_t)d, es = dt == SIFT_F16 ? 2 : 4, nq = (size_t)t * hq * d;
    float *q = rand_data(SIFT_F32, nq, 1.0f);
    void *k = rand_data(dt, nkv, 1.0f), *v = rand_data(dt, nkv, 1.0f);
    float *res[2];
    for (int c = 0; c < 2; c++) {
        const int64_t qs[3] = {t, hq, d}, kvs[3] = {hkv, ncap, d};
        placed pq = place(ctx[c], SIFT_F32, 3, qs, q_off, q, nq * 4), pk = place(ctx[c], dt, 3, kvs, 0, k, nkv * es),
               pv = place(ctx[c], dt, 3, kvs, 0, v, nkv * es), po = place(ctx[c], SIFT_F32, 3, qs, q_off, NULL, 0);
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        TRY(sift_op_causal_attend(g, pq.view, pk.view, pv.view, pos0, 1.0f / sqrtf((float)d), po.view));
        TRY(sift_graph_compute(g));
        res[c] = malloc(nq * 4);
        TRY(sift_tensor_read(po.view, 0, res[c], nq * 4));
        sift_graph_destroy(g);
        unplace(&pq), unplace(&pk), unplace(&pv), unplace(&po);
    }
    char name[200];
    snprintf(name, sizeof name, "causal T=%d H=%d/%d D=%d %s pos0=%lld q_off=%zu", t, hq, hkv, d, sift_dtype_name(dt),
             (long long)pos0, q_off);
    check(name, res[0], res[1], nq, 1e-9);
    free(res[0]), free(res[1]), free(q), free(k), free(v);
}

/* ---- matmul ------------------------------------------------------------------------------------ */

static void matmul_case(sift_context *ctx[2], sift_dtype wt, int64_t t, int64_t k, int64_t n, int bias, size_t x_off,
                        size_t w_off)
{
    test_case_begin("matmul", "cuda");
    size_t wbytes;
    void *w = make_weight(wt, n, k, &wbytes);
    float *x = rand_data(SIFT_F32, (size_t)(t * k), 1.0f), *b = rand_data(SIFT_F32, (size_t)n, 1.0f);
    float *res[2];
    char name[200];
    snprintf(name, sizeof name, "matmul [%lld][%lld] x %s [%lld]%s x_off=%zu w_off=%zu", (long long)t, (long long)k,
             sift_dtype_name(wt), (long long)n, bias ? " + bias" : "", x_off, w_off);
    if (wt == SIFT_Q8_0 && w_off) { /* q8_0 inside an f32 tensor: ggml's blocks, which CUDA refuses (it reads q8_0 planar) */
        placed px = place(ctx[1], SIFT_F32, 2, (int64_t[]){t, k}, x_off, x, (size_t)(t * k) * 4),
               pw = place(ctx[1], wt, 2, (int64_t[]){n, k}, w_off, w, wbytes),
               po = place(ctx[1], SIFT_F32, 2, (int64_t[]){t, n}, 4, NULL, 0);
        sift_graph *g;
        TRY(sift_graph_create(ctx[1], &g));
        TRY(sift_op_matmul(g, px.view, pw.view, NULL, po.view));
        const sift_status st = sift_graph_compute(g);
        test_check(st == SIFT_E_UNSUPPORTED, "cuda", "%s: refused", name);
        sift_graph_destroy(g);
        unplace(&px), unplace(&pw), unplace(&po);
        free(w), free(x), free(b);
        return;
    }
    for (int c = 0; c < 2; c++) {
        placed px = place(ctx[c], SIFT_F32, 2, (int64_t[]){t, k}, x_off, x, (size_t)(t * k) * 4),
               pw = place(ctx[c], wt, 2, (int64_t[]){n, k}, w_off, w, wbytes),
               pb = place(ctx[c], SIFT_F32, 1, (int64_t[]){n}, 0, b, (size_t)n * 4),
               po = place(ctx[c], SIFT_F32, 2, (int64_t[]){t, n}, 4, NULL, 0);
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        TRY(sift_op_matmul(g, px.view, pw.view, bias ? pb.view : NULL, po.view));
        TRY(sift_graph_compute(g));
        res[c] = malloc((size_t)(t * n) * 4);
        TRY(sift_tensor_read(po.view, 0, res[c], (size_t)(t * n) * 4));
        sift_graph_destroy(g);
        unplace(&px), unplace(&pw), unplace(&pb), unplace(&po);
    }
    /* q8_0, and the K-quants in a launch of up to 4 tokens: CUDA's direct kernels keep x as two
     * digits (2^-14 of each block's largest value) */
    const bool kquant = wt == SIFT_Q4_K || wt == SIFT_Q5_K || wt == SIFT_Q6_K;
    check(name, res[0], res[1], (size_t)(t * n), wt == SIFT_Q8_0 || (kquant && t <= 4) ? 1e-6 : 1e-9);
    free(res[0]), free(res[1]), free(w), free(x), free(b);
}

/* ---- the smaller ops --------------------------------------------------------------------------- */

static void rope_case(sift_context *ctx[2], int t, int h, int d, int n_rot, sift_rope_mode mode, float base,
                      int64_t pos0, int factors)
{
    test_case_begin("rope", "cuda");
    const size_t nx = (size_t)t * h * d;
    float *x = rand_data(SIFT_F32, nx, 1.0f), *f = malloc((size_t)n_rot / 2 * 4), *res[2];
    for (int i = 0; i < n_rot / 2; i++) f[i] = 1.0f + 7.0f * (urand() + 1.0f) / 2.0f;
    const sift_rope_params p = {n_rot, base, mode};
    for (int c = 0; c < 2; c++) {
        const int64_t s[3] = {t, h, d};
        placed px = place(ctx[c], SIFT_F32, 3, s, 0, x, nx * 4), po = place(ctx[c], SIFT_F32, 3, s, 8, NULL, 0),
               pf = place(ctx[c], SIFT_F32, 1, (int64_t[]){n_rot / 2}, 0, f, (size_t)n_rot / 2 * 4);
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        TRY(sift_op_rope(g, px.view, pos0, factors ? pf.view : NULL, &p, po.view));
        TRY(sift_graph_compute(g));
        res[c] = malloc(nx * 4);
        TRY(sift_tensor_read(po.view, 0, res[c], nx * 4));
        sift_graph_destroy(g);
        unplace(&px), unplace(&po), unplace(&pf);
    }
    char name[200];
    snprintf(name, sizeof name, "rope [%d][%d][%d] n_rot=%d %s pos0=%lld%s", t, h, d, n_rot,
             mode == SIFT_ROPE_NEOX ? "neox" : "adjacent", (long long)pos0, factors ? " factors" : "");
    check(name, res[0], res[1], nx, 1e-9);
    free(res[0]), free(res[1]), free(x), free(f);
}

static void small_ops_case(sift_context *ctx[2], int64_t t, int64_t e, size_t off)
{
    test_case_begin("rmsnorm, add, swiglu", "cuda");
    const size_t n = (size_t)(t * e);
    float *a = rand_data(SIFT_F32, n, 3.0f), *b = rand_data(SIFT_F32, n, 1.0f), *w = rand_data(SIFT_F32, (size_t)e, 1.0f);
    float *res[2][3];
    for (int c = 0; c < 2; c++) {
        const int64_t s[2] = {t, e};
        placed pa = place(ctx[c], SIFT_F32, 2, s, off, a, n * 4), pb = place(ctx[c], SIFT_F32, 2, s, 0, b, n * 4),
               pw = place(ctx[c], SIFT_F32, 1, (int64_t[]){e}, off, w, (size_t)e * 4);
        placed po[3];
        for (int i = 0; i < 3; i++) po[i] = place(ctx[c], SIFT_F32, 2, s, i * 4, NULL, 0);
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        TRY(sift_op_rmsnorm(g, pa.view, pw.view, 1e-5f, po[0].view));
        TRY(sift_op_add(g, pa.view, pb.view, po[1].view));
        TRY(sift_op_swiglu(g, pa.view, pb.view, po[2].view));
        TRY(sift_graph_compute(g));
        for (int i = 0; i < 3; i++) {
            res[c][i] = malloc(n * 4);
            TRY(sift_tensor_read(po[i].view, 0, res[c][i], n * 4));
            unplace(&po[i]);
        }
        sift_graph_destroy(g);
        unplace(&pa), unplace(&pb), unplace(&pw);
    }
    const char *what[3] = {"rmsnorm", "add", "swiglu"};
    for (int i = 0; i < 3; i++) {
        char name[200];
        snprintf(name, sizeof name, "%s [%lld][%lld] off=%zu", what[i], (long long)t, (long long)e, off);
        check(name, res[0][i], res[1][i], n, i == 1 ? 0.0 : 1e-9);
        free(res[0][i]), free(res[1][i]);
    }
    free(a), free(b), free(w);
}

static void kv_write_case(sift_context *ctx[2], int t, int h, int d, sift_dtype dt, int64_t pos0, size_t off)
{
    test_case_begin("kv_write", "cuda");
    const int64_t ncap = pos0 + t + 3;
    const size_t ns = (size_t)t * h * d, nc = (size_t)h * (size_t)ncap * (size_t)d, es = dt == SIFT_F16 ? 2 : 4;
    float *src = rand_data(SIFT_F32, ns, 2.0f);
    /* specials: NaN, infinities, zeros, subnormal halves, rounding ties, the overflow edge */
    const uint32_t special[] = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u, 0x80000000u, 0x00000000u,
                                0x33800000u, 0x33000000u, 0x33c00000u, 0x387fe000u, 0x38800000u, 0x3f801000u,
                                0x3f803000u, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0xc77ff000u, 0x00000001u,
                                0x34000000u, 0x34400000u};
    for (size_t i = 0; i < sizeof special / sizeof *special && i < ns; i++) memcpy(&src[i * 7 % ns], &special[i], 4);
    void *init = rand_data(dt, nc, 1.0f);
    unsigned char *res[2];
    for (int c = 0; c < 2; c++) {
        placed ps = place(ctx[c], SIFT_F32, 3, (int64_t[]){t, h, d}, 0, src, ns * 4),
               pc = place(ctx[c], dt, 3, (int64_t[]){h, ncap, d}, off, init, nc * es);
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        TRY(sift_op_kv_write(g, ps.view, pos0, pc.view));
        TRY(sift_graph_compute(g));
        res[c] = malloc(nc * es);
        TRY(sift_tensor_read(pc.view, 0, res[c], nc * es));
        sift_graph_destroy(g);
        unplace(&ps), unplace(&pc);
    }
    char name[200];
    snprintf(name, sizeof name, "kv_write [%d][%d][%d] into %s [%d][%lld][%d] at %lld off=%zu (specials)", t, h, d,
             sift_dtype_name(dt), h, (long long)ncap, d, (long long)pos0, off);
    check_bits(name, res[0], res[1], nc * es);
    free(res[0]), free(res[1]), free(src), free(init);
}

static void get_rows_case(sift_context *ctx[2], sift_dtype wt, int64_t rows, int64_t e, int t)
{
    test_case_begin("get_rows", "cuda");
    size_t bytes;
    void *w = make_weight(wt, rows, e, &bytes);
    int32_t *ids = malloc((size_t)t * 4);
    for (int i = 0; i < t; i++)
        ids[i] = i == 0 ? 0 : i == 1 ? (int32_t)rows - 1 : i == 2 ? -1 : i == 3 ? (int32_t)rows : (int32_t)(rnext() % (uint64_t)rows);
    float *res[2];
    for (int c = 0; c < 2; c++) {
        placed pw = place(ctx[c], wt, 2, (int64_t[]){rows, e}, 0, w, bytes),
               pi = place(ctx[c], SIFT_I32, 1, (int64_t[]){t}, 0, ids, (size_t)t * 4),
               po = place(ctx[c], SIFT_F32, 2, (int64_t[]){t, e}, 4, NULL, 0);
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        TRY(sift_op_get_rows(g, pw.view, pi.view, po.view));
        TRY(sift_graph_compute(g));
        res[c] = malloc((size_t)(t * e) * 4);
        TRY(sift_tensor_read(po.view, 0, res[c], (size_t)(t * e) * 4));
        sift_graph_destroy(g);
        unplace(&pw), unplace(&pi), unplace(&po);
    }
    char name[200];
    snprintf(name, sizeof name, "get_rows %s [%lld][%lld], %d ids (two outside)", sift_dtype_name(wt), (long long)rows,
             (long long)e, t);
    check_bits(name, res[0], res[1], (size_t)(t * e) * 4);
    free(res[0]), free(res[1]), free(w), free(ids);
}

/* rmsnorm -> matmul -> swiglu chain computed `runs` times: identical each time (direct, then replay). */
static void repeat_case(sift_context *ctx[2], int runs)
{
    test_case_begin("repeated runs", "cuda");
    const int64_t k = 256, n = 96;
    size_t wb;
    void *w = make_weight(SIFT_Q8_0, n, k, &wb);
    float *x = rand_data(SIFT_F32, (size_t)k, 1.0f), *nw = rand_data(SIFT_F32, (size_t)k, 1.0f);
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    for (int c = 0; c < 2; c++) {
        placed px = place(ctx[c], SIFT_F32, 2, (int64_t[]){1, k}, 0, x, (size_t)k * 4),
               pn = place(ctx[c], SIFT_F32, 1, (int64_t[]){k}, 0, nw, (size_t)k * 4),
               pw = place(ctx[c], SIFT_Q8_0, 2, (int64_t[]){n, k}, 0, w, wb),
               pxn = place(ctx[c], SIFT_F32, 2, (int64_t[]){1, k}, 0, NULL, 0),
               pm = place(ctx[c], SIFT_F32, 2, (int64_t[]){1, n}, 0, NULL, 0),
               po = place(ctx[c], SIFT_F32, 2, (int64_t[]){1, n}, 0, NULL, 0);
        sift_graph *g;
        TRY(sift_graph_create(ctx[c], &g));
        TRY(sift_op_rmsnorm(g, px.view, pn.view, 1e-6f, pxn.view));
        TRY(sift_op_matmul(g, pxn.view, pw.view, NULL, pm.view));
        TRY(sift_op_swiglu(g, pm.view, pm.view, po.view));
        for (int r = 0; r < (c ? runs : 1); r++) {
            double us[3];
            if (r == runs - 1) TRY(sift_graph_compute_timed(g, us));
            else TRY(sift_graph_compute(g));
            TRY(sift_tensor_read(po.view, 0, c ? got : ref, (size_t)n * 4));
            if (c) {
                char name[100];
                snprintf(name, sizeof name, "repeat run %d of rmsnorm -> matmul q8_0 -> swiglu", r);
                check(name, ref, got, (size_t)n, 1e-6); /* q8_0: x as two digits on CUDA's decode kernel */
            }
        }
        sift_graph_destroy(g);
        unplace(&px), unplace(&pn), unplace(&pw), unplace(&pxn), unplace(&pm), unplace(&po);
    }
    free(w), free(x), free(nw), free(ref), free(got);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    sift_context *ctx[2];
    TRY(sift_context_create(SIFT_BACKEND_CPU, &ctx[0]));
    if (sift_context_create(SIFT_BACKEND_CUDA, &ctx[1]) != SIFT_OK) {
        test_note("cuda", "skipped: %s", sift_last_error());
        sift_context_destroy(ctx[0]);
        return 77;
    }
    test_note("cuda", "%s", sift_context_device_name(ctx[1]));

    /* head dimensions: every kernel size (64, 128) and padded ones below and between */
    const int dims[] = {8, 16, 24, 40, 56, 64, 72, 96, 120, 128};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        const int d = dims[i];
        attn_case(ctx, 8, 4, d, SIFT_F16, 150, 0);
        attn_case(ctx, 6, 2, d, SIFT_F32, 77, 0);
    }
    attn_case(ctx, 4, 2, 24, SIFT_F16, 70, 6);  /* unaligned K/V view: element copies */
    attn_case(ctx, 5, 1, 8, SIFT_F32, 40, 4);
    attn_case(ctx, 12, 1, 40, SIFT_F16, 260, 0); /* a group of 12: two head chunks */

    /* causal: T = 1, 7, 70; pos0 0 and > 0; D 8 .. 128; groups 1, 2, 3, 4, 6 */
    causal_case(ctx, 1, 8, 4, 8, SIFT_F32, 0, 0);
    causal_case(ctx, 1, 8, 4, 8, SIFT_F16, 37, 0);
    causal_case(ctx, 7, 8, 4, 8, SIFT_F32, 0, 0);
    causal_case(ctx, 7, 8, 4, 8, SIFT_F16, 5, 4);
    causal_case(ctx, 70, 8, 4, 8, SIFT_F32, 0, 0);
    causal_case(ctx, 70, 8, 4, 8, SIFT_F16, 130, 0);
    causal_case(ctx, 7, 8, 8, 32, SIFT_F16, 0, 0);
    causal_case(ctx, 70, 6, 2, 64, SIFT_F16, 11, 0);
    causal_case(ctx, 7, 12, 4, 96, SIFT_F32, 200, 0);
    causal_case(ctx, 7, 6, 1, 128, SIFT_F16, 300, 8);
    causal_case(ctx, 70, 4, 4, 24, SIFT_F16, 0, 0);
    causal_case(ctx, 1, 4, 1, 128, SIFT_F32, 1000, 0);
    causal_case(ctx, 15, 1, 1, 128, SIFT_F32, 20, 0); /* two splits; the second is empty for early tokens */
    causal_case(ctx, 3, 2, 1, 128, SIFT_F32, 600, 0);  /* several splits for every token */

    /* matmul: matrix-vector (T = 1) with R = 8, 4, 2, 1 rows per block (N = 1000, 60, 40, 20 on
     * the emulator's 4 multiprocessors), tiled for T > 1 and for unaligned operands */
    const sift_dtype wts[] = {SIFT_F32, SIFT_F16, SIFT_BF16, SIFT_Q8_0, SIFT_Q4_0};
    for (int wi = 0; wi < 5; wi++) {
        const sift_dtype wt = wts[wi];
        const int quant = wt == SIFT_Q8_0 || wt == SIFT_Q4_0;
        const int64_t ks[] = {quant ? 32 : 172, quant ? 256 : 8, quant ? 4096 : 4096, quant ? 96 : 4};
        for (int ki = 0; ki < 4; ki++) {
            if (quick && ks[ki] == 4096) continue;
            const int64_t ns[] = {1, 20, 40, 60, ks[ki] == 4096 ? 300 : 1000};
            for (int ni = 0; ni < 5; ni++) matmul_case(ctx, wt, 1, ks[ki], ns[ni], (ni + ki) % 2, 0, 0);
            matmul_case(ctx, wt, 7, ks[ki], 33, ki % 2, 0, 0);
            if (ks[ki] != 4096 || !quick) matmul_case(ctx, wt, 70, ks[ki], 130, 1, 0, 0);
        }
        /* unaligned: x at 4 bytes (tiled path), w at 2 bytes (q: still matrix-vector; others tiled) */
        matmul_case(ctx, wt, 1, quant ? 64 : 40, 50, 1, 4, 0);
        matmul_case(ctx, wt, 1, quant ? 64 : 40, 50, 0, 0, quant ? 2 : (wt == SIFT_F32 ? 4 : 2));
        matmul_case(ctx, wt, 1, quant ? 64 : 40, 9, 0, 0, quant ? 18 : 8);
        matmul_case(ctx, wt, 3, quant ? 64 : 40, 50, 1, 0, quant ? 6 : 4);
    }
    /* K-quants: rows of 1, 3 and 9 super-blocks (a tile of 8 and a tail), N picking 4, 2 and 1 rows
     * per warp, weights at 2, 6 and 18 bytes past 16-byte alignment, x unaligned (tiled), T > 1 */
    const sift_dtype kqs[] = {SIFT_Q4_K, SIFT_Q5_K, SIFT_Q6_K};
    for (int qi = 0; qi < 3; qi++) {
        const int64_t kk[] = {256, 768, 2304};
        for (int ki = 0; ki < 3; ki++) {
            const int64_t ns[] = {1, 20, 100, 1000};
            for (int ni = 0; ni < 4; ni++) matmul_case(ctx, kqs[qi], 1, kk[ki], ns[ni], (ni + ki) % 2, 0, 0);
            matmul_case(ctx, kqs[qi], 70, kk[ki], 130, ki % 2, 0, 0);
        }
        matmul_case(ctx, kqs[qi], 1, 512, 50, 0, 0, 2);
        matmul_case(ctx, kqs[qi], 1, 512, 9, 1, 0, 6);
        matmul_case(ctx, kqs[qi], 1, 2304, 9, 0, 0, 18);
        matmul_case(ctx, kqs[qi], 1, 512, 50, 1, 4, 0);
        matmul_case(ctx, kqs[qi], 3, 512, 50, 1, 0, 6);
        get_rows_case(ctx, kqs[qi], 37, 512, 9);
    }
    matmul_case(ctx, SIFT_F16, 1, 172, 90, 1, 0, 0); /* f16 rows of 344 bytes: tiled */
    matmul_case(ctx, SIFT_F32, 2, 1, 7, 1, 0, 0);    /* K = 1 */
    matmul_case(ctx, SIFT_F32, 1, 1, 7, 0, 0, 0);

    /* rope, rmsnorm, add, swiglu, kv_write, get_rows */
    rope_case(ctx, 1, 4, 8, 8, SIFT_ROPE_ADJACENT, 10000.0f, 0, 0);
    rope_case(ctx, 7, 4, 8, 8, SIFT_ROPE_NEOX, 10000.0f, 3, 1);
    rope_case(ctx, 70, 2, 96, 64, SIFT_ROPE_NEOX, 1000000.0f, 100000, 1);
    rope_case(ctx, 7, 3, 128, 128, SIFT_ROPE_ADJACENT, 500000.0f, 5000, 1);
    rope_case(ctx, 1, 32, 128, 128, SIFT_ROPE_ADJACENT, 500000.0f, 131000, 0);
    rope_case(ctx, 3, 2, 40, 6, SIFT_ROPE_ADJACENT, 10000.0f, 9, 0);
    small_ops_case(ctx, 1, 64, 0);
    small_ops_case(ctx, 70, 172, 4);
    small_ops_case(ctx, 3, 5, 0);
    small_ops_case(ctx, 1, 4096, 12);
    kv_write_case(ctx, 1, 4, 8, SIFT_F16, 0, 0);
    kv_write_case(ctx, 7, 4, 8, SIFT_F16, 20, 2);
    kv_write_case(ctx, 70, 2, 64, SIFT_F16, 5, 0);
    kv_write_case(ctx, 7, 3, 24, SIFT_F32, 9, 4);
    for (int wi = 0; wi < 5; wi++) {
        const int quant = wts[wi] == SIFT_Q8_0 || wts[wi] == SIFT_Q4_0;
        get_rows_case(ctx, wts[wi], 37, quant ? 96 : 172, 9);
        get_rows_case(ctx, wts[wi], 512, 64, 70);
    }
    repeat_case(ctx, 4);

    sift_context_destroy(ctx[1]);
    sift_context_destroy(ctx[0]);
    return test_summary("extra-model", "cuda");
}
