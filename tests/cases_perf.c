/* The "perf" suite (sift-conformance --perf only): each transformer op alone on random data at a
 * model's shapes, Llama-3.1-8B's (4096 wide, 14336 hidden, vocabulary 128256, 32/8 heads of 128)
 * or a small model's (512, 1536, 4096, 8/2 heads of 64): the matmuls of a layer and the logits for
 * every weight type (the K-quants beside Q4_0), for one token (decode) and a prefill chunk, and the other ops of a layer. */
#include "registry.h"

typedef enum { P_MATMUL, P_MATVEC_STREAM, P_GET_ROWS, P_RMSNORM, P_ROPE, P_SWIGLU, P_ADD, P_KV_WRITE, P_CAUSAL } perf_op;

typedef struct {
    perf_op op;
    int64_t t, k, n; /* matmul: [t][k] x [n][k]; others: t tokens of width k (n: rows of a table or cache) */
    int64_t hq, hkv, d;
    sift_dtype wt;
    int copies, nodes; /* P_MATVEC_STREAM: nodes products of one token, over copies of w taken in turn */
} perf_case;

/* A graph-owned tensor of pseudo-random values in [-1, 1), written in slabs so a 2 GB weight needs
 * no 2 GB host copy; block types get every scale a moderate f16 (random bits may be NaN). */
static sift_status new_tensor(built_graph *g, sift_context *ctx, sift_dtype t, int ndim, const int64_t *shape, sift_tensor **out)
{
    sift_status s = sift_tensor_create(ctx, t, ndim, shape, out);
    if (s == SIFT_OK) g->tensors[g->n_tensors++] = *out;
    return s;
}

static sift_status new_random(built_graph *g, sift_context *ctx, sift_dtype t, int ndim, const int64_t *shape, uint64_t seed,
                              sift_tensor **out)
{
    sift_status s = new_tensor(g, ctx, t, ndim, shape, out);
    if (s != SIFT_OK) return s;
    const size_t total = sift_tensor_nbytes(*out), slab = (size_t)16 << 20;
    const bool kquant = t == SIFT_Q4_K || t == SIFT_Q5_K || t == SIFT_Q6_K;
    const size_t bb = t == SIFT_Q8_0 ? 34 : t == SIFT_Q4_0 ? 18 : kquant ? sift_dtype_row_bytes(t, 256) : 0;
    const size_t slab_bytes = bb ? slab / bb * bb : slab;
    unsigned char *buf = malloc(slab_bytes);
    if (!buf) return SIFT_E_NOMEM;
    rng_state = seed;
    for (size_t off = 0; off < total && s == SIFT_OK; off += slab_bytes) {
        const size_t bytes = total - off < slab_bytes ? total - off : slab_bytes;
        if (t == SIFT_F16) {
            for (size_t i = 0; i < bytes / 2; i++) {
                const float a = 2.0f * rng_uniform() - 1.0f;
                sift_f32_to_f16((uint16_t *)buf + i, &a, 1);
            }
        } else if (t == SIFT_F32) {
            for (size_t i = 0; i < bytes / 4; i++) ((float *)buf)[i] = 2.0f * rng_uniform() - 1.0f;
        } else {
            for (size_t i = 0; i < bytes; i++) buf[i] = (unsigned char)(rng_next() >> 56);
            if (bb && !kquant)
                for (size_t b = 0; b < bytes; b += bb) memcpy(buf + b, &(uint16_t){0x2000}, 2); /* 2^-7 */
            /* K-quants: d and dmin (q4_k, q5_k: bytes 0-3; q6_k: d at byte 208) 2^-10 */
            for (size_t b = 0; kquant && b < bytes; b += bb) {
                const size_t at = t == SIFT_Q6_K ? 208 : 0;
                memcpy(buf + b + at, &(uint16_t){0x1400}, 2);
                if (t != SIFT_Q6_K) memcpy(buf + b + 2, &(uint16_t){0x1400}, 2);
            }
        }
        s = sift_tensor_write(*out, off, buf, bytes);
    }
    free(buf);
    return s;
}

static sift_status perf_build(const conf_case *cc, sift_context *ctx, built_graph *bg)
{
    const perf_case *c = cc->params;
    sift_tensor *a = NULL, *b = NULL, *v = NULL, *out = NULL;
    sift_status s = sift_graph_create(ctx, &bg->g);
    sift_graph *g = bg->g;
    const int64_t t = c->t, k = c->k, n = c->n;
    switch (c->op) {
    case P_MATMUL:
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 2, (int64_t[]){t, k}, 1, &a);
        if (s == SIFT_OK) s = new_random(bg, ctx, c->wt, 2, (int64_t[]){n, k}, 2, &b);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F32, 2, (int64_t[]){t, n}, &out);
        if (s == SIFT_OK) s = sift_op_matmul(g, a, b, NULL, out);
        break;
    case P_MATVEC_STREAM: {
        /* The products of a decode step follow one another, each reading weights that are not in
         * the L2 cache: nodes products, in turn over copies of w that together exceed it. */
        sift_tensor *all = NULL;
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 2, (int64_t[]){1, k}, 1, &a);
        if (s == SIFT_OK) s = new_random(bg, ctx, c->wt, 2, (int64_t[]){c->copies * n, k}, 2, &all);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F32, 2, (int64_t[]){1, n}, &out);
        const size_t copy_bytes = (size_t)n * sift_dtype_row_bytes(c->wt, k);
        for (int i = 0; s == SIFT_OK && i < c->copies; i++) {
            sift_tensor *w = NULL;
            s = sift_tensor_view(all, c->wt, 2, (int64_t[]){n, k}, (size_t)i * copy_bytes, &w);
            if (s == SIFT_OK) bg->tensors[bg->n_tensors++] = w;
        }
        for (int i = 0; s == SIFT_OK && i < c->nodes; i++)
            s = sift_op_matmul(g, a, bg->tensors[3 + i % c->copies], NULL, out);
        break;
    }
    case P_GET_ROWS:
        if (s == SIFT_OK) s = new_random(bg, ctx, c->wt, 2, (int64_t[]){n, k}, 3, &a);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_I32, 1, (int64_t[]){t}, &b);
        for (int64_t i = 0; s == SIFT_OK && i < t; i++) {
            const int32_t id = (int32_t)((i * 7919) % n);
            s = sift_tensor_write(b, (size_t)i * 4, &id, 4);
        }
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F32, 2, (int64_t[]){t, k}, &out);
        if (s == SIFT_OK) s = sift_op_get_rows(g, a, b, out);
        break;
    case P_RMSNORM:
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 2, (int64_t[]){t, k}, 4, &a);
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 1, (int64_t[]){k}, 5, &b);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F32, 2, (int64_t[]){t, k}, &out);
        if (s == SIFT_OK) s = sift_op_rmsnorm(g, a, b, 1e-5f, out);
        break;
    case P_ROPE: {
        const sift_rope_params rp = {.n_rot = (int)c->d, .base = 500000.0f, .mode = SIFT_ROPE_ADJACENT};
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 3, (int64_t[]){t, c->hq, c->d}, 6, &a);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F32, 3, (int64_t[]){t, c->hq, c->d}, &out);
        if (s == SIFT_OK) s = sift_op_rope(g, a, 8, NULL, &rp, out);
        break;
    }
    case P_SWIGLU:
    case P_ADD:
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 2, (int64_t[]){t, k}, 7, &a);
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 2, (int64_t[]){t, k}, 8, &b);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F32, 2, (int64_t[]){t, k}, &out);
        if (s == SIFT_OK) s = c->op == P_SWIGLU ? sift_op_swiglu(g, a, b, out) : sift_op_add(g, a, b, out);
        break;
    case P_KV_WRITE:
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 3, (int64_t[]){t, c->hkv, c->d}, 9, &a);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F16, 3, (int64_t[]){c->hkv, n, c->d}, &out);
        if (s == SIFT_OK) s = sift_op_kv_write(g, a, 8, out);
        break;
    case P_CAUSAL:
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F32, 3, (int64_t[]){t, c->hq, c->d}, 10, &a);
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F16, 3, (int64_t[]){c->hkv, n, c->d}, 11, &b);
        if (s == SIFT_OK) s = new_random(bg, ctx, SIFT_F16, 3, (int64_t[]){c->hkv, n, c->d}, 12, &v);
        if (s == SIFT_OK) s = new_tensor(bg, ctx, SIFT_F32, 3, (int64_t[]){t, c->hq, c->d}, &out);
        if (s == SIFT_OK) s = sift_op_causal_attend(g, a, b, v, 0, 1.0f / sqrtf((float)c->d), out);
        break;
    }
    return s;
}

static void add(const perf_case *c, const char *name) { registry_add("perf", name, NULL, perf_build, c, sizeof *c); }

/* Decode's matrix-vector products as a decode step runs them, one after another from weights in
 * device memory (not the L2 cache), timed as one span: the 8B layer's shapes and the logits for
 * every weight type, each case's figure the span over its products. */
static void add_matvec_streams(void)
{
    const int64_t shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {4096, 128256}}; /* (K, N) */
    const sift_dtype types[] = {SIFT_Q8_0, SIFT_Q4_0, SIFT_Q4_K, SIFT_Q5_K, SIFT_Q6_K, SIFT_F16, SIFT_BF16};
    char name[160];
    for (int ti = 0; ti < 7; ti++)
        for (int si = 0; si < 4; si++) {
            const int64_t k = shapes[si][0], n = shapes[si][1];
            const double bytes = (double)n * (double)sift_dtype_row_bytes(types[ti], k);
            int copies = (int)(160e6 / bytes) + 1; /* at least 160 MB of weights: the H100's and H200's L2 is 50 MB */
            if (copies > MATVEC_STREAM_MAX_COPIES) copies = MATVEC_STREAM_MAX_COPIES;
            if (copies < 2) copies = 2;
            const perf_case c = {.op = P_MATVEC_STREAM, .t = 1, .k = k, .n = n, .wt = types[ti], .copies = copies,
                                 .nodes = n > 100000 ? 8 : 32};
            snprintf(name, sizeof name, "matvec stream %-5s [1][%lld] x [%lld]^T, %d products over %d copies",
                     sift_dtype_name(c.wt), (long long)k, (long long)n, c.nodes, copies);
            registry_add_span_timed("perf", name, perf_build, &c, sizeof c, c.nodes);
        }
}

void cases_perf(const suite_options *o)
{
    const bool big = o->big;
    const int64_t e = big ? 4096 : 512, ff = big ? 14336 : 1536, vocab = big ? 128256 : 4096;
    const int64_t hq = big ? 32 : 8, hkv = big ? 8 : 2, d = big ? 128 : 64, prefill = o->prefill;
    const sift_dtype wtypes[] = {SIFT_F16, SIFT_Q8_0, SIFT_Q4_0, SIFT_Q4_K, SIFT_Q5_K, SIFT_Q6_K, SIFT_BF16, SIFT_F32};
    /* (K, N) of the layer's matmuls and the logits */
    const int64_t mm[][2] = {{e, e}, {e, e / 4}, {e, ff}, {ff, e}, {e, vocab}};
    const char *mm_names[] = {"q/o", "k/v", "gate/up", "down", "logits"};
    char name[160];
    for (int phase = 0; phase < 2; phase++) {
        const int64_t t = phase ? prefill : 1;
        for (int wi = 0; wi < (phase ? 6 : 8); wi++) /* prefill: f16, q8_0, q4_0 and the K-quants */
            for (int mi = 0; mi < 5; mi++) {
                if (wtypes[wi] == SIFT_F32 && mi == 4 && big) continue; /* 2 GB */
                const perf_case c = {.op = P_MATMUL, .t = t, .k = mm[mi][0], .n = mm[mi][1], .wt = wtypes[wi]};
                snprintf(name, sizeof name, "matmul %-7s %-5s [%lld][%lld] x [%lld]^T", mm_names[mi],
                         sift_dtype_name(c.wt), (long long)t, (long long)c.k, (long long)c.n);
                add(&c, name);
            }
    }
    if (big) add_matvec_streams();
    /* the other ops of a layer, decode and prefill */
    for (int phase = 0; phase < 2; phase++) {
        const int64_t t = phase ? prefill : 1, cap = prefill + 16;
        const perf_case cs[] = {
            {.op = P_GET_ROWS, .t = t, .k = e, .n = vocab, .wt = SIFT_Q8_0},
            {.op = P_RMSNORM, .t = t, .k = e},
            {.op = P_ROPE, .t = t, .hq = hq, .d = d},
            {.op = P_SWIGLU, .t = t, .k = ff},
            {.op = P_ADD, .t = t, .k = e},
            {.op = P_KV_WRITE, .t = t, .n = cap, .hkv = hkv, .d = d},
            {.op = P_CAUSAL, .t = t, .n = cap, .hq = hq, .hkv = hkv, .d = d},
        };
        for (int i = 0; i < 7; i++) {
            const perf_case *c = &cs[i];
            switch (c->op) {
            case P_GET_ROWS:
                snprintf(name, sizeof name, "get_rows q8_0 [%lld] of [%lld][%lld]", (long long)t, (long long)vocab, (long long)e);
                break;
            case P_RMSNORM: snprintf(name, sizeof name, "rmsnorm [%lld][%lld]", (long long)t, (long long)e); break;
            case P_ROPE: snprintf(name, sizeof name, "rope [%lld][%lld][%lld]", (long long)t, (long long)hq, (long long)d); break;
            case P_SWIGLU:
            case P_ADD:
                snprintf(name, sizeof name, "%s [%lld][%lld]", c->op == P_SWIGLU ? "swiglu" : "add", (long long)t,
                         (long long)c->k);
                break;
            case P_KV_WRITE:
                snprintf(name, sizeof name, "kv_write [%lld][%lld][%lld] f16", (long long)t, (long long)hkv, (long long)d);
                break;
            default:
                snprintf(name, sizeof name, "causal_attend T=%lld at 0, %lld/%lld heads f16", (long long)t, (long long)hq,
                         (long long)hkv);
                break;
            }
            add(c, name);
        }
    }
}
