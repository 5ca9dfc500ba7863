/* The "model" suite: the transformer ops (get_rows, rmsnorm, matmul, rope, swiglu, add, kv_write,
 * causal_attend), each alone against the CPU reference, with guard regions around every output. */
#include "registry.h"

/* A weight [rows][cols] of type t: random values, stored as the backend will read them. */
static host_tensor make_weight(sift_dtype t, int64_t rows, int64_t cols)
{
    host_tensor h = host_random(t == SIFT_F16 ? SIFT_F16 : SIFT_F32, 2, (int64_t[]){rows, cols}, 0.5f);
    if (t == SIFT_F32 || t == SIFT_F16) return h;
    h.dtype = t;
    h.raw_bytes = (size_t)rows * sift_dtype_row_bytes(t, cols);
    h.raw = calloc(1, h.raw_bytes);
    if (!h.raw) exit(2);
    uint8_t *p = h.raw;
    if (t == SIFT_BF16) {
        for (size_t i = 0; i < h.n; i++) {
            uint32_t bits;
            memcpy(&bits, &h.f[i], 4);
            p[2 * i] = (uint8_t)(bits >> 16);
            p[2 * i + 1] = (uint8_t)(bits >> 24);
        }
        return h;
    }
    if (t == SIFT_Q4_K || t == SIFT_Q5_K || t == SIFT_Q6_K) {
        /* random bytes under small f16 super-block scales (Q6_K: d at byte 208; Q4_K, Q5_K: d and
         * dmin at 0 and 2), so that values stay within about +-1 */
        const int64_t blocks = (int64_t)h.n / 256, block_bytes = (int64_t)sift_dtype_row_bytes(t, 256);
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t *blk = p + b * block_bytes;
            for (int64_t i = 0; i < block_bytes; i++) blk[i] = (uint8_t)(rng_next() >> 32);
            const int n_scales = t == SIFT_Q6_K ? 1 : 2;
            for (int k = 0; k < n_scales; k++) {
                float scale = t == SIFT_Q6_K ? 1e-4f + 3e-4f * rng_uniform() : 5e-4f + 1.5e-3f * rng_uniform();
                uint16_t hs;
                sift_f32_to_f16(&hs, &scale, 1);
                uint8_t *at = blk + (t == SIFT_Q6_K ? 208 : 2 * k);
                at[0] = (uint8_t)hs;
                at[1] = (uint8_t)(hs >> 8);
            }
        }
        return h;
    }
    const int64_t blocks = (int64_t)h.n / 32, block_bytes = t == SIFT_Q8_0 ? 34 : 18;
    for (int64_t b = 0; b < blocks; b++) {
        uint8_t *blk = p + b * block_bytes;
        float scale = 0.01f + 0.04f * rng_uniform();
        uint16_t hs;
        sift_f32_to_f16(&hs, &scale, 1);
        blk[0] = (uint8_t)hs;
        blk[1] = (uint8_t)(hs >> 8);
        for (int i = 2; i < block_bytes; i++) blk[i] = (uint8_t)(rng_next() >> 32);
    }
    return h;
}

typedef enum { M_GET_ROWS, M_RMSNORM, M_MATMUL, M_ROPE, M_SWIGLU, M_ADD, M_KV_WRITE, M_CAUSAL, M_LAYERNORM, M_SILU } mop;

/* A case: its recipe (op, sizes, weight type, variant), from which make_inputs draws the inputs. */
typedef struct {
    mop op;
    int64_t t, k, n; /* the op's sizes (see make_inputs) */
    sift_dtype wt;
    int variant;
    int hq, hkv; /* causal */
    const char *name;
    int n_in;
    host_tensor in[4];          /* inputs in the op's argument order (NULL ones left empty) */
    bool has[4];
    sift_dtype out_dtype;
    int out_ndim;
    int64_t out_shape[3];
    host_tensor out_init;       /* kv_write: the cache's contents before the op */
    double bound;               /* NMSE bound; < 0: bit-exact */
    float eps, scale;
    int64_t pos0;
    sift_rope_params rope;
} mcase;

static sift_status build(sift_graph *g, const mcase *c, sift_tensor **in, sift_tensor *out)
{
    switch (c->op) {
    case M_GET_ROWS: return sift_op_get_rows(g, in[0], in[1], out);
    case M_RMSNORM: return sift_op_rmsnorm(g, in[0], in[1], c->eps, out);
    case M_MATMUL: return sift_op_matmul(g, in[0], in[1], in[2], out);
    case M_ROPE: return sift_op_rope(g, in[0], c->pos0, in[1], &c->rope, out);
    case M_SWIGLU: return sift_op_swiglu(g, in[0], in[1], out);
    case M_ADD: return sift_op_add(g, in[0], in[1], out);
    case M_KV_WRITE: return sift_op_kv_write(g, in[0], c->pos0, out);
    case M_CAUSAL: return sift_op_causal_attend(g, in[0], in[1], in[2], c->pos0, c->scale, out);
    case M_LAYERNORM: return sift_op_layernorm(g, in[0], in[1], in[2], c->eps, out);
    case M_SILU: return sift_op_silu(g, in[0], out);
    }
    return SIFT_E_INVALID;
}

/* Runs the case on one backend; returns the output (4-byte words) or NULL after reporting. */
static uint32_t *run_one(const backend *b, const mcase *c, size_t *n_out)
{
    const char *bname = sift_backend_kind_name(b->kind);
    sift_tensor *in[4] = {0};
    guarded out = {0};
    sift_graph *g = NULL;
    uint32_t *res = NULL;
    for (int i = 0; i < c->n_in; i++)
        if (c->has[i] && !(c->op == M_MATMUL && c->variant == 2 && i == 1)) CHECK_OK(upload(b->ctx, &c->in[i], &in[i]), c->name, bname);
    if (c->op == M_MATMUL && c->variant == 2) { /* f32 w: the first N rows of [N + 1][K], whose last row is +inf */
        const int64_t k = c->in[1].shape[1], n = c->in[1].shape[0], whole[2] = {n + 1, k};
        float *infs = malloc((size_t)k * sizeof *infs);
        if (!infs) exit(2);
        for (int64_t j = 0; j < k; j++) infs[j] = INFINITY;
        sift_status st = sift_tensor_create(b->ctx, SIFT_F32, 2, whole, &in[3]);
        if (st == SIFT_OK) st = sift_tensor_write(in[3], 0, c->in[1].f, (size_t)(n * k) * sizeof(float));
        if (st == SIFT_OK) st = sift_tensor_write(in[3], (size_t)(n * k) * sizeof(float), infs, (size_t)k * sizeof(float));
        free(infs);
        CHECK_OK(st, c->name, bname);
        CHECK_OK(sift_tensor_view(in[3], SIFT_F32, 2, c->in[1].shape, 0, &in[1]), c->name, bname);
    }
    CHECK_OK(guarded_new(b->ctx, c->out_dtype, c->out_ndim, c->out_shape, &out), c->name, bname);
    if (c->op == M_KV_WRITE) {
        const host_tensor *h = &c->out_init;
        CHECK_OK(sift_tensor_write(out.view, 0, h->dtype == SIFT_F16 ? (const void *)h->h : (const void *)h->f,
                                   sift_tensor_nbytes(out.view)),
                 c->name, bname);
    }
    CHECK_OK(sift_graph_create(b->ctx, &g), c->name, bname);
    CHECK_OK(build(g, c, in, out.view), c->name, bname);
    CHECK_OK(compute_checked(g), c->name, bname);
    {
        sift_status st = SIFT_OK;
        res = calloc(out.n ? out.n : 1, 4);
        if (!guarded_read(&out, res, &st)) {
            fail(c->name, bname, st == SIFT_OK ? "guard region around the output was overwritten" : "read failed");
            free(res);
            res = NULL;
        }
        *n_out = out.n;
    }
out:
    sift_graph_destroy(g);
    guarded_free(&out);
    for (int i = 0; i < 4; i++) sift_tensor_destroy(in[i]);
    return res;
}

static void set_out(mcase *c, sift_dtype t, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    c->out_dtype = t;
    c->out_ndim = ndim;
    c->out_shape[0] = d0;
    c->out_shape[1] = d1;
    c->out_shape[2] = d2;
}

/* Draws the inputs of a case from its recipe (rng_state seeded from its name). */
static void make_inputs(mcase *c)
{
    switch (c->op) {
    case M_GET_ROWS: /* ids include the first and last rows */
        c->in[0] = make_weight(c->wt, 300, 256);
        c->in[1] = host_new(SIFT_I32, 1, (int64_t[]){7});
        for (int i = 0; i < 7; i++) c->in[1].i[i] = i == 0 ? 0 : i == 6 ? 299 : (int32_t)(rng_next() % 300);
        set_out(c, SIFT_F32, 2, 7, 256, 0);
        break;
    case M_RMSNORM:
        c->in[0] = host_random(SIFT_F32, 2, (int64_t[]){c->t, c->k}, 2.0f);
        c->in[1] = host_random(SIFT_F32, 1, (int64_t[]){c->k}, 1.0f);
        set_out(c, SIFT_F32, 2, c->t, c->k, 0);
        break;
    case M_MATMUL:
        c->in[0] = host_random(SIFT_F32, 2, (int64_t[]){c->t, c->k}, 1.0f);
        if (c->variant == 1) /* blocks of 32 values 2^-24 .. 2^24 apart in size, every 7th zero: each of
                              * its own scale where a backend scales x per block (CUDA's q decode) */
            for (size_t i = 0; i < c->in[0].n; i++) {
                const size_t b = i / 32;
                c->in[0].f[i] = b % 7 == 3 ? 0.0f : ldexpf(c->in[0].f[i], (int)(b * 5 % 49) - 24);
            }
        c->in[1] = make_weight(c->wt, c->n, c->k);
        if (c->has[2]) c->in[2] = host_random(SIFT_F32, 1, (int64_t[]){c->n}, 1.0f);
        set_out(c, SIFT_F32, 2, c->t, c->n, 0);
        break;
    case M_ROPE:
        c->in[0] = host_random(SIFT_F32, 3, (int64_t[]){c->t, 4, c->k}, 1.0f);
        if (c->has[1]) {
            c->in[1] = host_new(SIFT_F32, 1, (int64_t[]){c->rope.n_rot / 2});
            for (int i = 0; i < c->rope.n_rot / 2; i++) c->in[1].f[i] = 1.0f + 7.0f * rng_uniform();
        }
        set_out(c, SIFT_F32, 3, c->t, 4, c->k);
        break;
    case M_LAYERNORM: /* rows with a large common offset: the mean must come out before the variance */
        c->in[0] = host_random(SIFT_F32, 2, (int64_t[]){c->t, c->k}, 2.0f);
        for (size_t i = 0; i < c->in[0].n; i++) c->in[0].f[i] += 30.0f;
        c->in[1] = host_random(SIFT_F32, 1, (int64_t[]){c->k}, 1.0f);
        if (c->has[2]) c->in[2] = host_random(SIFT_F32, 1, (int64_t[]){c->k}, 1.0f);
        set_out(c, SIFT_F32, 2, c->t, c->k, 0);
        break;
    case M_SILU:
        c->in[0] = host_random(SIFT_F32, 2, (int64_t[]){7, 1001}, 12.0f);
        set_out(c, SIFT_F32, 2, 7, 1001, 0);
        break;
    case M_SWIGLU:
    case M_ADD:
        c->in[0] = host_random(SIFT_F32, 2, (int64_t[]){7, 1001}, 3.0f);
        c->in[1] = host_random(SIFT_F32, 2, (int64_t[]){7, 1001}, 1.0f);
        set_out(c, SIFT_F32, 2, 7, 1001, 0);
        break;
    case M_KV_WRITE: /* variants 2, 3: values at the edges of f16 rounding (ties, subnormals, overflow, inf, NaN) */
        c->in[0] = host_random(SIFT_F32, 3, (int64_t[]){c->t, 4, c->k}, 1.0f);
        if (c->variant >= 2) {
            const float edge[] = {0.0f, -0.0f, 1.0f + 0x1p-11f, 1.0f + 0x3p-11f, -(2.0f + 0x1p-10f), 0x1p-24f, 0x1p-25f,
                                  0x1.8p-25f, 0x1p-26f, 0x1.8p-24f, 0x1.4p-23f, 6.1e-5f, -3.0e-5f, 65504.0f, 65519.0f,
                                  65520.0f, -1e6f, INFINITY, -INFINITY, NAN, 1e-40f, 0x1.ffep-15f, 0x1.fffp-15f};
            const size_t ne = sizeof edge / sizeof edge[0];
            for (size_t i = 0; i < c->in[0].n; i++)
                c->in[0].f[i] = i < ne ? edge[i] : c->in[0].f[i] * (float)(1 << (i % 24)) * 0x1p-20f;
        }
        c->out_init = host_random(c->wt, 3, (int64_t[]){4, 64, c->k}, 1.0f);
        set_out(c, c->wt, 3, 4, 64, c->k);
        break;
    case M_CAUSAL: { /* k: D, n: cache rows */
        const int hq = c->hq, hkv = c->hkv;
        c->in[0] = host_random(SIFT_F32, 3, (int64_t[]){c->t, hq, c->k}, 1.0f);
        c->in[1] = host_random(c->wt, 3, (int64_t[]){hkv, c->n, c->k}, 1.0f);
        c->in[2] = host_random(c->wt, 3, (int64_t[]){hkv, c->n, c->k}, 1.0f);
        set_out(c, SIFT_F32, 3, c->t, hq, c->k);
        break;
    }
    }
}

static void free_inputs(mcase *c)
{
    for (int i = 0; i < 4; i++) host_free(&c->in[i]);
    host_free(&c->out_init);
}

/* The CPU alone on causal_attend: its output (got) against the definition summed in double (the
 * tiled loops must neither lose nor repeat an entry at the edges of their tiles), and the same
 * words from contexts of 1 and of 3 threads as from the reference's own count. */
static void check_causal_alone(const mcase *c, const float *got, size_t n)
{
    const int64_t t_rows = c->t, hq = c->hq, group = c->hq / c->hkv, d = c->k, cache = c->n;
    float *exact = malloc(n * sizeof *exact);
    double *s = malloc((size_t)cache * sizeof *s);
    if (!exact || !s) {
        fail(c->name, "cpu", "out of memory for the double-precision reference");
        free(exact);
        free(s);
        return;
    }
    const float *q = c->in[0].f, *k = c->in[1].f, *v = c->in[2].f;
    for (int64_t t = 0; t < t_rows; t++)
        for (int64_t h = 0; h < hq; h++) {
            const int64_t g = h / group, visible = c->pos0 + t + 1;
            const float *qr = q + (t * hq + h) * d;
            double mx = -INFINITY, sum = 0.0;
            for (int64_t p = 0; p < visible; p++) {
                double dot = 0.0;
                for (int64_t i = 0; i < d; i++) dot += (double)qr[i] * k[(g * cache + p) * d + i];
                s[p] = (double)c->scale * dot;
                mx = fmax(mx, s[p]);
            }
            for (int64_t p = 0; p < visible; p++) sum += exp(s[p] - mx);
            for (int64_t i = 0; i < d; i++) {
                double o = 0.0;
                for (int64_t p = 0; p < visible; p++) o += exp(s[p] - mx) * v[(g * cache + p) * d + i];
                exact[(t * hq + h) * d + i] = (float)(o / sum);
            }
        }
    const double e = nmse(exact, got, n);
    report(c->name, "cpu", "nmse-vs-double", e, 1e-11, e <= 1e-11);
    free(exact);
    free(s);
    for (int threads = 1; threads <= 3; threads += 2) {
        sift_context_config cfg = sift_context_config_default();
        cfg.threads = threads;
        backend b = {SIFT_BACKEND_CPU, NULL};
        if (sift_context_create_with(&cfg, &b.ctx) != SIFT_OK) {
            fail(c->name, "cpu", "a CPU context of 1 or 3 threads cannot be created");
            return;
        }
        size_t n_t = 0;
        uint32_t *words = run_one(&b, c, &n_t);
        size_t differ = words && n_t == n ? 0 : n;
        for (size_t j = 0; words && n_t == n && j < n; j++) differ += words[j] != ((const uint32_t *)got)[j];
        char metric[32];
        snprintf(metric, sizeof metric, "words-diff-%d-threads", threads);
        report(c->name, "cpu", metric, (double)differ, 0, differ == 0);
        free(words);
        sift_context_destroy(b.ctx);
    }
}

static void model_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    mcase c = *(const mcase *)cc->params;
    c.name = cc->name;
    make_inputs(&c);
    size_t n_ref = 0;
    uint32_t *want = run_one(ref, &c, &n_ref);
    if (want && dut == ref) {
        if (c.op == M_CAUSAL) check_causal_alone(&c, (const float *)want, n_ref);
        if (c.bound >= 0) check_reference_finite(c.name, (const float *)want, n_ref);
        else { /* kv_write: every row outside the written ones keeps the cache's words */
            const size_t row = sift_dtype_size(c.wt) * (size_t)c.k / 4, per_head = 64 * row;
            const uint32_t *init = c.wt == SIFT_F16 ? (const uint32_t *)c.out_init.h : (const uint32_t *)c.out_init.f;
            size_t differ = 0;
            for (size_t j = 0; j < n_ref; j++) {
                const int64_t r = (int64_t)((j % per_head) / row);
                if (r < c.pos0 || r >= c.pos0 + c.t) differ += want[j] != init[j];
            }
            report(c.name, "cpu", "untouched", (double)differ, 0, differ == 0);
        }
    } else if (want) {
        if (c.bound >= 0 && !all_finite((const float *)want, n_ref)) fail(c.name, "cpu", "NaN or Inf in the reference");
        size_t n = 0;
        uint32_t *got = run_one(dut, &c, &n);
        const char *bname = sift_backend_kind_name(dut->kind);
        if (got) {
            if (c.bound < 0) {
                size_t differ = 0;
                for (size_t j = 0; j < n; j++) differ += got[j] != want[j];
                report(c.name, bname, "words-diff", (double)differ, 0, differ == 0);
            } else {
                compare_floats(c.name, bname, (const float *)want, (const float *)got, n, c.bound);
            }
        }
        free(got);
    }
    free(want);
    free_inputs(&c);
}

/* A weight [37][256] written in pieces that split blocks and rows, one piece written again, then
 * read back in other pieces: the storage must give back ggml's bytes whatever layout a backend
 * keeps (Vulkan stores q8_0 and q4_0 rows planar). Random bytes: nothing is computed. */
static void pieces_check(const conf_case *cc, const backend *ref, const backend *dut)
{
    (void)ref;
    const sift_dtype t = *(const sift_dtype *)cc->params;
    const char *bname = sift_backend_kind_name(dut->kind);
    rng_seed_from(cc->name);
    const int64_t shape[2] = {37, 256};
    const size_t n = (size_t)shape[0] * sift_dtype_row_bytes(t, shape[1]);
    unsigned char *want = malloc(n), *got = malloc(n);
    sift_tensor *w = NULL;
    if (!want || !got) exit(2);
    for (size_t i = 0; i < n; i++) want[i] = (unsigned char)(rng_next() >> 32);
    CHECK_OK(sift_tensor_create(dut->ctx, t, 2, shape, &w), cc->name, bname);
    const size_t wcut[] = {0, 3, 17, n / 3 + 1, n - 5, n};
    for (int i = 0; i + 1 < 6; i++)
        CHECK_OK(sift_tensor_write(w, wcut[i], want + wcut[i], wcut[i + 1] - wcut[i]), cc->name, bname);
    const size_t a = n / 2 - 7, b = n / 2 + 29;
    for (size_t i = a; i < b; i++) want[i] = (unsigned char)(rng_next() >> 32);
    CHECK_OK(sift_tensor_write(w, a, want + a, b - a), cc->name, bname);
    const size_t rcut[] = {0, 1, n / 2 + 3, n};
    for (int i = 0; i + 1 < 4; i++)
        CHECK_OK(sift_tensor_read(w, rcut[i], got + rcut[i], rcut[i + 1] - rcut[i]), cc->name, bname);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += got[i] != want[i];
    report(cc->name, bname, "bytes-diff", (double)differ, 0, differ == 0);
out:
    sift_tensor_destroy(w);
    free(want);
    free(got);
}

static void add_case(const mcase *c, const char *name)
{
    registry_add("model", name, model_check, NULL, c, sizeof *c);
}

static void add_edge_cases(void) {}

void cases_model(const suite_options *o)
{
    (void)o;
    const sift_dtype wtypes[] = {SIFT_F32, SIFT_F16, SIFT_BF16, SIFT_Q8_0, SIFT_Q4_0, SIFT_Q4_K, SIFT_Q5_K, SIFT_Q6_K};
    const int n_wtypes = (int)(sizeof wtypes / sizeof wtypes[0]);
    char name[160];

    for (int ti = 0; ti < n_wtypes; ti++) {
        snprintf(name, sizeof name, "write and read %s [37][256] in pieces", sift_dtype_name(wtypes[ti]));
        registry_add("model", name, pieces_check, NULL, &wtypes[ti], sizeof wtypes[ti]);
    }
    for (int ti = 0; ti < n_wtypes; ti++) {
        const mcase c = {.op = M_GET_ROWS, .wt = wtypes[ti], .n_in = 2, .has = {1, 1}, .bound = 0.0};
        snprintf(name, sizeof name, "get_rows %s table [300][256], 7 ids", sift_dtype_name(wtypes[ti]));
        add_case(&c, name);
    }
    /* 6000 and 9000: rows longer than one register-held pass (CUDA keeps up to 4096 values a row in
     * registers at once, then 8192, then walks the row) */
    const int64_t norm_shapes[][2] = {{1, 64}, {7, 4096}, {3, 5}, {2, 6000}, {1, 9000}};
    for (int si = 0; si < (int)(sizeof norm_shapes / sizeof norm_shapes[0]); si++) {
        const mcase c = {.op = M_RMSNORM, .t = norm_shapes[si][0], .k = norm_shapes[si][1], .n_in = 2, .has = {1, 1},
                         .bound = 1e-7, .eps = 1e-5f};
        snprintf(name, sizeof name, "rmsnorm [%lld][%lld]", (long long)c.t, (long long)c.k);
        add_case(&c, name);
    }
    /* [T][K] x [N]: 5 .. 7 cover the tiles of prefill matmuls (64, 32 and 16 rows on Vulkan); K = 172
     * and 20 (float types only) rows that are not whole vectors or blocks; 10 .. 12 decode matmuls of
     * several rows per workgroup (N not a multiple of them) and of long rows; 13 a decode matmul of
     * an 8B model's down projection's width (CUDA: x slices that crowd out shared memory); 15 and 16
     * the few tokens of a batched decode step, 17 and 18 in launches of 4, 2 and 1 tokens (CUDA:
     * the matrix-vector kernels, up to 4 tokens a launch) */
    const int64_t mm_shapes[][3] = {{1, 64, 172},    {7, 256, 1000},  {1, 4096, 1024}, {33, 512, 300}, {2, 32, 1},
                                    {130, 96, 20000}, {100, 256, 4096}, {70, 160, 300},  {70, 172, 300}, {3, 20, 9},
                                    {1, 256, 4099},   {5, 128, 8192},   {2, 8192, 64}, {1, 14336, 96},
                                    {4, 4096, 1000},  {16, 512, 300},   {3, 1024, 500}, {7, 2048, 260}};
    for (int si = 0; si < (int)(sizeof mm_shapes / sizeof mm_shapes[0]); si++)
        for (int ti = 0; ti < n_wtypes; ti++) {
            const int64_t t = mm_shapes[si][0], k = mm_shapes[si][1], n = mm_shapes[si][2];
            if (k % sift_dtype_block(wtypes[ti]) != 0) continue; /* rows of whole blocks (K-quants: 256 values) */
            const bool bias = (si + ti) % 2 == 1;
            const mcase c = {.op = M_MATMUL, .t = t, .k = k, .n = n, .wt = wtypes[ti], .n_in = 3, .has = {1, 1, bias},
                             .bound = wtypes[ti] == SIFT_F32 ? 1e-7 : 5e-4};
            snprintf(name, sizeof name, "matmul   [%lld][%lld] x %s [%lld][%lld]%s", (long long)t, (long long)k,
                     sift_dtype_name(wtypes[ti]), (long long)n, (long long)k, bias ? " + bias" : "");
            add_case(&c, name);
        }
    /* x's blocks across 48 binades; bound 1e-9: f32 accumulation everywhere, x kept to 2^-21 of each
     * block's largest value or better; the quantized types 1e-7: CUDA's decode kernels of q8_0, q4_0
     * and the K-quants keep x as two digits (2^-14 of each block's largest value; NMSE about 4e-9
     * on random x) */
    /* f32 rows of K % 8 != 0 followed by a row of +inf: a kernel that reads whole units of 8 values
     * past a row's end (zeros times inf) turns the last row's sums into NaN */
    for (int64_t t = 1; t <= 70; t += 69) {
        const mcase c = {.op = M_MATMUL, .t = t, .k = 172, .n = 300, .wt = SIFT_F32, .n_in = 3, .has = {1, 1, 0},
                         .bound = 1e-7, .variant = 2};
        snprintf(name, sizeof name, "matmul   [%lld][172] x f32 [300][172], a row of inf past w", (long long)t);
        add_case(&c, name);
    }
    for (int ti = 0; ti < n_wtypes; ti++) {
        const bool quantized = ti >= 3;
        const mcase c = {.op = M_MATMUL, .t = 1, .k = 4096, .n = 300, .wt = wtypes[ti], .n_in = 3, .has = {1, 1, 0},
                         .bound = quantized ? 1e-7 : 1e-9, .variant = 1};
        snprintf(name, sizeof name, "matmul   [1][4096] x %s [300][4096], x blocks across magnitudes",
                 sift_dtype_name(wtypes[ti]));
        add_case(&c, name);
    }
    for (int variant = 0; variant < 8; variant++) {
        const int64_t d = variant % 2 ? 128 : 64, t = variant < 4 ? 1 : 7;
        mcase c = {.op = M_ROPE, .t = t, .k = d, .n_in = 2, .has = {1, variant % 3 == 0}, .bound = 1e-6};
        c.rope = (sift_rope_params){.n_rot = (int)(variant % 4 == 3 ? d / 2 : d), .base = variant % 2 ? 500000.0f : 10000.0f,
                                    .mode = (variant / 2) % 2 ? SIFT_ROPE_NEOX : SIFT_ROPE_ADJACENT};
        c.pos0 = variant < 4 ? 0 : 5000;
        snprintf(name, sizeof name, "rope     [%lld][4][%lld] n_rot=%d %s pos0=%lld%s", (long long)t, (long long)d,
                 c.rope.n_rot, c.rope.mode == SIFT_ROPE_NEOX ? "neox" : "adjacent", (long long)c.pos0,
                 c.has[1] ? " factors" : "");
        add_case(&c, name);
    }
    const int64_t ln_shapes[][2] = {{1, 256}, {7, 4096}, {3, 5}, {16, 512}};
    for (int si = 0; si < 4; si++) {
        const mcase c = {.op = M_LAYERNORM, .t = ln_shapes[si][0], .k = ln_shapes[si][1], .n_in = 3,
                         .has = {1, 1, si != 2}, .bound = 1e-7, .eps = 1e-5f};
        snprintf(name, sizeof name, "layernorm [%lld][%lld]%s", (long long)c.t, (long long)c.k, c.has[2] ? " + bias" : "");
        add_case(&c, name);
    }
    {
        const mcase c = {.op = M_SILU, .n_in = 1, .has = {1}, .bound = 1e-7};
        add_case(&c, "silu     [7][1001]");
    }
    for (int which = 0; which < 2; which++) {
        const mcase c = {.op = which ? M_ADD : M_SWIGLU, .n_in = 2, .has = {1, 1}, .bound = 1e-7};
        snprintf(name, sizeof name, "%s [7][1001]", which ? "add     " : "swiglu  ");
        add_case(&c, name);
    }
    for (int ti = 0; ti < 4; ti++) {
        const sift_dtype kv = ti % 2 ? SIFT_F32 : SIFT_F16;
        const int64_t d = ti < 2 ? 64 : 8, t = ti < 2 ? 5 : 4, pos0 = ti < 2 ? 10 : 7;
        const mcase c = {.op = M_KV_WRITE, .t = t, .k = d, .wt = kv, .variant = ti, .n_in = 1, .has = {1}, .bound = -1.0,
                         .pos0 = pos0};
        snprintf(name, sizeof name, "kv_write [%lld][4][%lld] into %s cache [4][64][%lld] at %lld%s", (long long)t,
                 (long long)d, sift_dtype_name(kv), (long long)d, (long long)pos0, ti < 2 ? "" : ", edge values");
        add_case(&c, name);
    }
    const int heads[][2] = {{8, 8}, {32, 8}, {8, 1}, {28, 4}};
    for (int variant = 0; variant < 16; variant++) { /* 12 .. 15: head dimensions 8, 24, 40, 96 */
        const int hq = heads[variant % 4][0], hkv = heads[variant % 4][1];
        const int64_t odd_d[] = {8, 24, 40, 96};
        const int64_t d = variant >= 12 ? odd_d[variant - 12] : variant % 3 == 2 ? 128 : 64;
        const int64_t t = variant < 4 ? 1 : variant < 8 ? 7 : variant < 12 ? 70 : 5 + 11 * (variant - 12);
        const int64_t pos0 = variant % 2 ? 100 : 0;
        const sift_dtype kv = variant % 5 == 1 ? SIFT_F32 : SIFT_F16;
        const mcase c = {.op = M_CAUSAL, .t = t, .k = d, .n = pos0 + t + 3, .wt = kv, .hq = hq, .hkv = hkv, .n_in = 3,
                         .has = {1, 1, 1}, .bound = kv == SIFT_F32 ? 1e-7 : 5e-4, .pos0 = pos0,
                         .scale = 1.0f / sqrtf((float)d)};
        snprintf(name, sizeof name, "causal   T=%lld H=%d/%d D=%lld %s pos0=%lld", (long long)t, hq, hkv, (long long)d,
                 sift_dtype_name(kv), (long long)pos0);
        add_case(&c, name);
    }
    /* prefills of several blocks of query rows and tiles of keys, each with a tail (the CPU's
     * tiles are 64 rows and 64 keys) */
    const struct { int64_t t, pos0, d; int hq, hkv; sift_dtype kv; } long_causal[] = {
        {200, 37, 32, 8, 4, SIFT_F16}, {130, 0, 40, 28, 4, SIFT_F32}, {65, 63, 64, 8, 8, SIFT_F16}};
    for (int i = 0; i < 3; i++) {
        const mcase c = {.op = M_CAUSAL, .t = long_causal[i].t, .k = long_causal[i].d, .n = long_causal[i].pos0 + long_causal[i].t + 3,
                         .wt = long_causal[i].kv, .hq = long_causal[i].hq, .hkv = long_causal[i].hkv, .n_in = 3, .has = {1, 1, 1},
                         .bound = long_causal[i].kv == SIFT_F32 ? 1e-7 : 5e-4, .pos0 = long_causal[i].pos0,
                         .scale = 1.0f / sqrtf((float)long_causal[i].d)};
        snprintf(name, sizeof name, "causal   T=%lld H=%d/%d D=%lld %s pos0=%lld", (long long)c.t, c.hq, c.hkv, (long long)c.k,
                 sift_dtype_name(c.wt), (long long)c.pos0);
        add_case(&c, name);
    }
    add_edge_cases();
}
