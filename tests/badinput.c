/* Bad input gets a status code and a message naming the problem, on every available backend, and
 * leaves the graph and the context usable: never a crash, never a silent wrong answer. */
#include "sift.h"
#include "backend_filter.h"
#include "sift_testing.h"
#include "report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *backend_name;

/* Checks that `got` is `want` and the message contains `needle`; the message follows the check. */
static void expect(const char *what, sift_status got, sift_status want, const char *needle)
{
    const char *msg = sift_last_error();
    test_check(got == want && (!needle || strstr(msg, needle)), backend_name, "%s: %s", what, sift_status_name(got));
    test_note(backend_name, "%s", msg);
}

static void expect_true(const char *what, int cond) { test_check(cond, backend_name, "%s", what); }

static sift_tensor *make(sift_context *ctx, sift_dtype t, int ndim, const int64_t *shape, int fill)
{
    sift_tensor *x = NULL;
    if (sift_tensor_create(ctx, t, ndim, shape, &x) != SIFT_OK) {
        printf("cannot create a %s tensor: %s\n", sift_dtype_name(t), sift_last_error());
        exit(1);
    }
    if (fill) {
        size_t n = sift_tensor_nbytes(x);
        unsigned char *z = calloc(1, n ? n : 1);
        if (!z || sift_tensor_write(x, 0, z, n) != SIFT_OK) exit(1);
        free(z);
    }
    return x;
}

static void run_backend(sift_context *ctx, sift_context *other)
{
    /* a CPU emulation of a GPU API says so (the automatic backend choice passes it over) */
    const char *dev = sift_context_device_name(ctx);
    const int software = strstr(dev, "llvmpipe") || strstr(dev, "lavapipe") || strstr(dev, "SwiftShader");
    expect_true(software ? "the device reports itself a CPU emulation" : "the device is no CPU emulation",
                sift_context_is_emulated(ctx) == software);
    const int64_t n = 300;
    sift_tensor *q = make(ctx, SIFT_F32, 2, (int64_t[]){8, 64}, 1);
    sift_tensor *q6 = make(ctx, SIFT_F32, 2, (int64_t[]){6, 64}, 1);
    sift_tensor *q96 = make(ctx, SIFT_F32, 2, (int64_t[]){8, 100}, 1);
    sift_tensor *qh = make(ctx, SIFT_F16, 2, (int64_t[]){8, 64}, 1);
    sift_tensor *k = make(ctx, SIFT_F16, 3, (int64_t[]){4, n, 64}, 1);
    sift_tensor *v = make(ctx, SIFT_F16, 3, (int64_t[]){4, n, 64}, 1);
    sift_tensor *v32 = make(ctx, SIFT_F32, 3, (int64_t[]){4, n, 64}, 1);
    sift_tensor *k96 = make(ctx, SIFT_F16, 3, (int64_t[]){4, n, 100}, 1);
    sift_tensor *ki = make(ctx, SIFT_I32, 3, (int64_t[]){4, n, 64}, 1);
    sift_tensor *out = make(ctx, SIFT_F32, 2, (int64_t[]){8, 64}, 0);
    sift_tensor *scores = make(ctx, SIFT_F32, 2, (int64_t[]){8, n}, 0);
    sift_tensor *votes = make(ctx, SIFT_F32, 2, (int64_t[]){1, n}, 1);
    sift_tensor *idx_f = make(ctx, SIFT_F32, 2, (int64_t[]){1, 16}, 1);
    sift_tensor *unwritten = make(ctx, SIFT_I32, 2, (int64_t[]){1, 16}, 0);
    sift_tensor *foreign = make(other, SIFT_F32, 2, (int64_t[]){8, 64}, 1);
    sift_graph *g = NULL;
    if (sift_graph_create(ctx, &g) != SIFT_OK) exit(1);
    const float sc = 0.125f;

    /* impossible shapes */
    expect("Hq not a multiple of Hkv (6 over 4)", sift_op_dense_attend(g, q6, k, v, n, sc, out), SIFT_E_SHAPE, "multiple");
    expect("head dimension 100", sift_op_score(g, q96, k96, 0, n, sc, scores), SIFT_E_SHAPE, "D = 100");
    expect("k rows of 100 for q of 64", sift_op_score(g, q, k96, 0, n, sc, scores), SIFT_E_SHAPE, "100 values");
    sift_select_params p = {.n_ctx = n, .sink = 4, .window = 32, .budget = -1};
    expect("budget k < 0", sift_op_select(g, votes, &p, unwritten), SIFT_E_SHAPE, "negative");
    p = (sift_select_params){.n_ctx = 0, .sink = 4, .window = 32, .budget = 16};
    expect("context N = 0 (select)", sift_op_select(g, votes, &p, unwritten), SIFT_E_SHAPE, "N = 0");
    expect("context N = 0 (dense)", sift_op_dense_attend(g, q, k, v, 0, sc, out), SIFT_E_SHAPE, "N = 0");
    expect("context beyond the cache", sift_op_dense_attend(g, q, k, v, n + 1, sc, out), SIFT_E_SHAPE, "outside");
    expect("score range beyond the cache", sift_op_score(g, q, k, 10, n + 5, sc, scores), SIFT_E_SHAPE, "outside");
    p = (sift_select_params){.n_ctx = n, .sink = 4, .window = 32, .budget = 16};
    expect("votes not matching N - S - W", sift_op_select(g, votes, &p, unwritten), SIFT_E_SHAPE, "candidates");
    /* S, W and k up to INT32_MAX pass (these votes then match no candidates); beyond it they are
     * refused before any sum of them could overflow, and lay out nothing */
    p = (sift_select_params){.n_ctx = n, .sink = INT32_MAX, .window = INT32_MAX, .budget = INT32_MAX};
    expect("S, W and k of INT32_MAX", sift_op_select(g, votes, &p, unwritten), SIFT_E_SHAPE, "gives 0 candidates");
    expect_true("  (no candidates, a list of the N positions)",
                sift_select_candidates(&p) == 0 && sift_select_count(&p) == n);
    const sift_select_params too_large[] = {
        {.n_ctx = n, .sink = INT64_MAX, .window = 32, .budget = 16},
        {.n_ctx = n, .sink = 4, .window = INT64_MAX, .budget = 16},
        {.n_ctx = n, .sink = 4, .window = 32, .budget = INT64_MAX},
        {.n_ctx = n, .sink = (int64_t)INT32_MAX + 1, .window = 32, .budget = 16},
        {.n_ctx = n, .sink = INT64_MAX, .window = INT64_MAX, .budget = INT64_MAX},
    };
    for (size_t i = 0; i < sizeof too_large / sizeof too_large[0]; i++) {
        p = too_large[i];
        char what[96];
        snprintf(what, sizeof what, "S %lld, W %lld, k %lld (select)", (long long)p.sink, (long long)p.window,
                 (long long)p.budget);
        expect(what, sift_op_select(g, votes, &p, unwritten), SIFT_E_SHAPE, "at most 2147483647");
        snprintf(what, sizeof what, "S %lld, W %lld, k %lld (neighbor_fetch)", (long long)p.sink, (long long)p.window,
                 (long long)p.budget);
        expect(what, sift_op_neighbor_fetch(g, unwritten, &p, unwritten), SIFT_E_SHAPE, "at most 2147483647");
        expect_true("  (no candidates, an empty list)", sift_select_candidates(&p) == 0 && sift_select_count(&p) == 0);
    }
    expect("scale not finite", sift_op_dense_attend(g, q, k, v, n, 1.0f / 0.0f, out), SIFT_E_INVALID, "scale");

    /* null and wrongly-typed tensors */
    expect("null q", sift_op_score(g, NULL, k, 0, n, sc, scores), SIFT_E_INVALID, "q tensor is NULL");
    expect("null output", sift_op_dense_attend(g, q, k, v, n, sc, NULL), SIFT_E_INVALID, "out tensor is NULL");
    expect("null graph", sift_op_dense_attend(NULL, q, k, v, n, sc, out), SIFT_E_INVALID, "graph is NULL");
    expect("q in f16", sift_op_dense_attend(g, qh, k, v, n, sc, out), SIFT_E_DTYPE, "expected f32");
    expect("k in i32", sift_op_score(g, q, ki, 0, n, sc, scores), SIFT_E_DTYPE, "f16 or f32");
    expect("v f32 with k f16", sift_op_dense_attend(g, q, k, v32, n, sc, out), SIFT_E_DTYPE, "v is f32");
    expect("indices in f32", sift_op_gather_attend(g, q, k, v, idx_f, sc, out), SIFT_E_DTYPE, "expected i32");
    expect("output is also the input", sift_op_vote(g, SIFT_VOTE_SOFTMAX_SUM, votes, votes), SIFT_E_GRAPH, "also an input");
    expect("tensor of another context", sift_op_dense_attend(g, foreign, k, v, n, sc, out), SIFT_E_GRAPH,
           "another context");
    expect_true("no node was added by the failed calls", sift_graph_node_count(g) == 0);

    /* a graph that does not connect */
    expect("gather over indices nobody wrote (add)", sift_op_gather_attend(g, q, k, v, unwritten, sc, out), SIFT_OK, NULL);
    expect("gather over indices nobody wrote (compute)", sift_graph_compute(g), SIFT_E_GRAPH, "never wrote");
    sift_graph_destroy(g);
    g = NULL;
    if (sift_graph_create(ctx, &g) != SIFT_OK) exit(1);
    sift_tensor *mid = NULL;
    expect("graph intermediate", sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){1, 16}, "mid", &mid), SIFT_OK, NULL);
    expect("host write into an intermediate", sift_tensor_write(mid, 0, "0000", 4), SIFT_E_INVALID, "intermediate");
    sift_op_gather_attend(g, q, k, v, mid, sc, out);
    expect("gather over an intermediate never produced", sift_graph_compute(g), SIFT_E_GRAPH, "'mid'");

    /* allocation failures and absurd sizes */
    sift_tensor *huge = NULL;
    /* 2 EiB: beyond any address space, so it fails even where the host overcommits memory */
    sift_status s = sift_tensor_create(ctx, SIFT_F32, 1, (int64_t[]){(int64_t)1 << 59}, &huge);
    const int alloc_ok = (s == SIFT_E_NOMEM || s == SIFT_E_DEVICE_NOMEM || s == SIFT_E_LIMIT) && huge == NULL &&
                         strlen(sift_last_error()) > 0;
    test_check(alloc_ok, backend_name, "a 2 EiB tensor: %s", sift_status_name(s));
    test_note(backend_name, "%s", sift_last_error());
    sift_tensor_destroy(huge);
    expect("a shape whose size overflows", sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){(int64_t)1 << 40, (int64_t)1 << 40}, &huge),
           SIFT_E_SHAPE, "overflow");
    expect("a negative dimension", sift_tensor_create(ctx, SIFT_F32, 1, (int64_t[]){-3}, &huge), SIFT_E_SHAPE, "negative");
    expect("rank 5", sift_tensor_create(ctx, SIFT_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, &huge), SIFT_E_SHAPE, "rank");
    expect("unknown dtype", sift_tensor_create(ctx, SIFT_DTYPE_COUNT, 1, (int64_t[]){4}, &huge), SIFT_E_DTYPE, NULL);
    char buf[16];
    expect("read past the end", sift_tensor_read(out, sizeof buf * 200, buf, sizeof buf), SIFT_E_INVALID, "outside");
    expect("view past the end", sift_tensor_view(out, SIFT_F32, 1, (int64_t[]){600}, 0, &huge), SIFT_E_SHAPE, "do not fit");

    /* the context still works after all of this: a dense attention over zeros gives zeros */
    sift_graph_destroy(g);
    g = NULL;
    if (sift_graph_create(ctx, &g) != SIFT_OK) exit(1);
    expect("dense attention after the errors (add)", sift_op_dense_attend(g, q, k, v, n, sc, out), SIFT_OK, NULL);
    expect("dense attention after the errors (compute)", sift_graph_compute(g), SIFT_OK, NULL);
    float o[8 * 64];
    sift_tensor_read(out, 0, o, sizeof o);
    int zeros = 1;
    for (int i = 0; i < 8 * 64; i++) zeros = zeros && o[i] == 0.0f;
    expect_true("its output is the right answer (zeros)", zeros);

    /* the decode-attention helper checks its config against the tensors */
    sift_attn_config cfg = sift_attn_config_default();
    cfg.n_q_heads = 8;
    cfg.n_kv_heads = 2;
    cfg.head_dim = 64;
    cfg.sel = (sift_select_params){.n_ctx = n, .sink = 4, .window = 8, .budget = 16};
    cfg.mode = SIFT_ATTN_SELECT;
    sift_graph *ag = NULL;
    expect("attention config with the wrong Hkv", sift_attn_graph(ctx, &cfg, q, k, v, out, &ag, NULL), SIFT_E_SHAPE,
           "does not match");
    cfg.n_kv_heads = 4;
    cfg.sel.n_ctx = n * 2;
    expect("attention config with N beyond the cache", sift_attn_graph(ctx, &cfg, q, k, v, out, &ag, NULL),
           SIFT_E_SHAPE, "exceeds the cache");
    cfg.sel.n_ctx = n;
    cfg.sel.budget = 100 * n;
    expect("budget larger than the context (allowed: keeps all)", sift_attn_graph(ctx, &cfg, q, k, v, out, &ag, NULL),
           SIFT_OK, NULL);
    sift_graph_destroy(ag);
    /* select's bound reaches the attention graph (SELECT): no sum of these overflows on the way to it */
    const int64_t beyond[][3] = {{INT64_MAX, 8, 16}, {4, INT64_MAX, 16}, {4, 8, INT64_MAX}};
    for (int mode = SIFT_ATTN_SELECT; mode <= SIFT_ATTN_STREAMING; mode++)
        for (int i = 0; i < 3; i++) {
            cfg.mode = (sift_attn_mode)mode;
            cfg.sel = (sift_select_params){.n_ctx = n, .sink = beyond[i][0], .window = beyond[i][1], .budget = beyond[i][2]};
            sift_graph *bad = NULL;
            char what[112];
            snprintf(what, sizeof what, "attention (%s) with S %lld, W %lld, k %lld",
                     mode == SIFT_ATTN_SELECT ? "select" : "streaming", (long long)beyond[i][0], (long long)beyond[i][1],
                     (long long)beyond[i][2]);
            expect(what, sift_attn_graph(ctx, &cfg, q, k, v, out, &bad, NULL), SIFT_E_SHAPE, "at most 2147483647");
            expect_true("  (no graph)", bad == NULL);
        }
    cfg.mode = SIFT_ATTN_SELECT;
    cfg.sel = (sift_select_params){.n_ctx = n, .sink = 4, .window = 8, .budget = 16};

    /* paged views, predicates and the ops that save work between steps */
    sift_tensor *pages = make(ctx, SIFT_I32, 1, (int64_t[]){4}, 1), *pv = NULL;
    expect("page size not a power of two", sift_tensor_paged_view(k, pages, 3, &pv), SIFT_E_SHAPE, "power of two");
    expect("page size not dividing the pool", sift_tensor_paged_view(k, pages, 128, &pv), SIFT_E_SHAPE, "dividing");
    expect("a page table of floats", sift_tensor_paged_view(k, out, 4, &pv), SIFT_E_DTYPE, "i32");
    expect("a paged view (valid)", sift_tensor_paged_view(k, pages, 4, &pv), SIFT_OK, NULL);
    sift_tensor *pv2 = NULL;
    expect("a paged view of a paged view", sift_tensor_paged_view(pv, pages, 4, &pv2), SIFT_E_SHAPE, "not a view");
    expect("host write into a paged view", sift_tensor_write(pv, 0, buf, 4), SIFT_E_INVALID, "paged view");
    /* two pools (KV offload): the host pool must match the pool's type, heads and D, in whole pages */
    sift_tensor *hpool = NULL, *hhalf = NULL, *h32 = NULL, *hbad = NULL, *pv3 = NULL;
    expect("a host tensor", sift_tensor_create_host(ctx, SIFT_F16, 3, (int64_t[]){4, 8, 64}, &hpool), SIFT_OK, NULL);
    expect_true("  (in host memory)", sift_tensor_in_host_memory(hpool) && !sift_tensor_in_host_memory(k));
    expect("a host tensor of no context", sift_tensor_create_host(NULL, SIFT_F32, 1, (int64_t[]){4}, &hbad), SIFT_E_INVALID,
           "context is NULL");
    expect("two pools without the host pool", sift_tensor_paged_view_pools(k, NULL, pages, 4, &pv3), SIFT_E_INVALID,
           "host_pool is NULL");
    expect("two pools, the same tensor twice", sift_tensor_paged_view_pools(k, k, pages, 4, &pv3), SIFT_E_SHAPE,
           "another [Hkv][Rh][D]");
    expect("a host tensor of 6 rows", sift_tensor_create_host(ctx, SIFT_F16, 3, (int64_t[]){4, 6, 64}, &hhalf), SIFT_OK, NULL);
    expect("two pools, a host pool of 1.5 pages", sift_tensor_paged_view_pools(k, hhalf, pages, 4, &pv3), SIFT_E_SHAPE,
           "whole pages");
    expect("a host tensor of f32", sift_tensor_create_host(ctx, SIFT_F32, 3, (int64_t[]){4, 8, 64}, &h32), SIFT_OK, NULL);
    expect("two pools, a host pool of another type", sift_tensor_paged_view_pools(k, h32, pages, 4, &pv3), SIFT_E_SHAPE,
           "of the pool's type");
    expect("two pools (valid)", sift_tensor_paged_view_pools(k, hpool, pages, 4, &pv3), SIFT_OK, NULL);
    sift_tensor_destroy(hpool); /* the view keeps it */
    sift_tensor_destroy(pv3);
    sift_tensor_destroy(hhalf);
    sift_tensor_destroy(h32);
    /* the op table's rules, now the engine's: paged views are K/V operands only; a predicate never
     * lies in its own node's output */
    sift_graph_destroy(g); /* the dense attention's, with its recording */
    if (sift_graph_create(ctx, &g) != SIFT_OK) exit(1);
    sift_tensor *pq = NULL, *flag = make(ctx, SIFT_F32, 1, (int64_t[]){8 * 64}, 1);
    sift_tensor *kpool = make(ctx, SIFT_F32, 3, (int64_t[]){4, 16, 64}, 1), *x3 = make(ctx, SIFT_F32, 3, (int64_t[]){4, 16, 64}, 1);
    const sift_rope_params rp = {.n_rot = 64, .base = 1e4f};
    expect("a paged view (for the checks below)", sift_tensor_paged_view(kpool, pages, 4, &pq), SIFT_OK, NULL);
    expect("a paged view as rope's input", sift_op_rope(g, pq, 0, NULL, &rp, x3), SIFT_E_INVALID, "paged view");
    expect("a paged view as rope's output", sift_op_rope(g, x3, 0, NULL, &rp, pq), SIFT_E_INVALID, "paged view");
    sift_tensor *cache16 = make(ctx, SIFT_F32, 3, (int64_t[]){16, 8, 64}, 1), *rows = make(ctx, SIFT_F32, 3, (int64_t[]){2, 4, 64}, 1);
    expect("a paged view as kv_write's source", sift_op_kv_write(g, pq, 0, cache16), SIFT_E_INVALID, "paged view");
    expect("  (kv_write into it is fine)", sift_op_kv_write(g, rows, 0, pq), SIFT_OK, NULL);
    expect("a node under its own output's predicate", sift_graph_skip_if(g, scores, 0), SIFT_OK, NULL);
    expect("  (then a score writing that flag)", sift_op_score(g, q, k, 0, n, sc, scores), SIFT_E_GRAPH, "its own predicate");
    expect("  (a flag elsewhere is fine)", sift_graph_skip_if(g, flag, 0), SIFT_OK, NULL);
    expect("  (then the same score)", sift_op_score(g, q, k, 0, n, sc, scores), SIFT_OK, NULL);
    expect("every node of this backend's graph is supported", sift_graph_check_supported(g), SIFT_OK, NULL);
    expect("check_supported of no graph", sift_graph_check_supported(NULL), SIFT_E_INVALID, NULL);
    sift_graph_destroy(g);
    g = NULL;
    sift_tensor_destroy(pq);
    sift_tensor_destroy(kpool);
    sift_tensor_destroy(x3);
    sift_tensor_destroy(cache16);
    sift_tensor_destroy(rows);
    sift_tensor_destroy(flag);

    /* the attention builder's own checks */
    sift_attn_config ac = sift_attn_config_default();
    ac.n_q_heads = 8;
    ac.n_kv_heads = 4;
    ac.head_dim = 64;
    ac.sel = (sift_select_params){.n_ctx = n, .sink = 4, .window = 8, .budget = 16};
    ac.mode = SIFT_ATTN_LISTS;
    sift_graph *bg = NULL;
    expect("attention over lists without lists", sift_attn_graph(ctx, &ac, q, k, v, out, &bg, NULL), SIFT_E_INVALID, "lists");
    ac.mode = SIFT_ATTN_DENSE;
    ac.extrapolate = &(sift_rope_params){.n_rot = 64, .base = 1e4f};
    expect("extrapolation with dense attention", sift_attn_graph(ctx, &ac, q, k, v, out, &bg, NULL), SIFT_E_UNSUPPORTED,
           "extrapolation");
    ac.extrapolate = NULL;
    ac.mode = (sift_attn_mode)9;
    expect("an unknown attention mode", sift_attn_graph(ctx, &ac, q, k, v, out, &bg, NULL), SIFT_E_INVALID, "mode");
    ac.mode = SIFT_ATTN_SELECT;
    sift_tensor *st_ok = make(ctx, SIFT_F32, 1, (int64_t[]){8 * 64 + 4}, 1), *kept = make(ctx, SIFT_I32, 2, (int64_t[]){1, 5}, 1);
    ac.sel_state = st_ok;
    ac.sel_indices = kept;
    ac.sel_cache = 0.5f;
    expect("Selection Cache indices of the wrong length", sift_attn_graph(ctx, &ac, q, k, v, out, &bg, NULL), SIFT_E_SHAPE,
           "Selection Cache");
    expect("  (the graph is not returned)", bg == NULL ? SIFT_OK : SIFT_E_INVALID, SIFT_OK, NULL);
    ac.sel_cache = SIFT_SEL_CACHE_OFF; /* the cache left out: its state and list are not looked at */
    expect("Selection Cache off with a state given", sift_attn_graph(ctx, &ac, q, k, v, out, &bg, NULL), SIFT_OK, NULL);
    int checks_in_graph = 0;
    for (int i = 0; i < sift_graph_node_count(bg); i++) checks_in_graph += !strcmp(sift_graph_node_op_name(bg, i), "sel_cache_check");
    expect_true("  (its graph holds no sel_cache_check)", bg && checks_in_graph == 0);
    sift_graph_destroy(bg);
    bg = NULL;
    sift_tensor_destroy(st_ok);
    sift_tensor_destroy(kept);
    sift_tensor_destroy(pv);
    sift_tensor *state = make(ctx, SIFT_F32, 1, (int64_t[]){8 * 64 + 3}, 1), *fresh = make(ctx, SIFT_F32, 1, (int64_t[]){8 * 64 + 4}, 0);
    sift_tensor *state_ok = make(ctx, SIFT_F32, 1, (int64_t[]){8 * 64 + 4}, 1), *idx_i = make(ctx, SIFT_I32, 2, (int64_t[]){1, 16}, 1);
    if (sift_graph_create(ctx, &g) != SIFT_OK) exit(1);
    expect("Selection Cache state of the wrong size", sift_op_sel_cache_check(g, q, 0.9f, 1, state), SIFT_E_SHAPE, "expected");
    expect("Selection Cache state never written", sift_op_sel_cache_check(g, q, 0.9f, 1, fresh), SIFT_E_GRAPH, "zeros");
    expect("Selection Cache threshold 3", sift_op_sel_cache_check(g, q, 3.0f, 1, state_ok), SIFT_E_INVALID, "threshold");
    expect("fill_range past the positions", sift_op_fill_range(g, 0, (int64_t)1 << 40, idx_i), SIFT_E_SHAPE, "positions");
    expect("skip_if with an i32 flag", sift_graph_skip_if(g, idx_i, 0), SIFT_E_DTYPE, NULL);
    expect("skip_if past the flag's end", sift_graph_skip_if(g, out, 8 * 64), SIFT_E_SHAPE, "outside");
    expect("skip_if on an op without predicates", sift_graph_skip_if(g, out, 0), SIFT_OK, NULL);
    expect("  (then a dense attention under it)", sift_op_dense_attend(g, q, k, v, n, sc, out), SIFT_E_UNSUPPORTED, "predicate");
    sift_graph_destroy(g);
    g = NULL;
    sift_tensor_destroy(pages);
    sift_tensor_destroy(state);
    sift_tensor_destroy(fresh);
    sift_tensor_destroy(state_ok);
    sift_tensor_destroy(idx_i);

    sift_graph_destroy(g);
    sift_tensor *all[] = {q, q6, q96, qh, k, v, v32, k96, ki, out, scores, votes, idx_f, unwritten, foreign};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sift_tensor_destroy(all[i]);
}

/* Ownership (sift.h): a view keeps its parent's storage, a paged view its pool's and page table's,
 * and a tensor its context, so destroying them in any order reads no freed memory (AddressSanitizer
 * checks that in the sanitizer job) and the views still read the parent's values. */
static void ownership(sift_backend_kind kind)
{
    sift_context *ctx = NULL;
    if (sift_context_create(kind, &ctx) != SIFT_OK) return;
    float vals[64], got[16] = {0};
    for (int i = 0; i < 64; i++) vals[i] = (float)i * 0.5f;
    sift_tensor *parent = make(ctx, SIFT_F32, 1, (int64_t[]){64}, 0), *view = NULL, *view2 = NULL;
    expect("ownership: write the parent", sift_tensor_write(parent, 0, vals, sizeof vals), SIFT_OK, NULL);
    expect("ownership: a view of 16 values at 32", sift_tensor_view(parent, SIFT_F32, 1, (int64_t[]){16}, 32 * 4, &view),
           SIFT_OK, NULL);
    expect("ownership: a view of that view", sift_tensor_view(view, SIFT_F32, 1, (int64_t[]){8}, 8 * 4, &view2), SIFT_OK, NULL);
    sift_tensor_destroy(parent); /* before its views */
    expect("ownership: read the view after its parent's destroy", sift_tensor_read(view, 0, got, 16 * 4), SIFT_OK, NULL);
    expect_true("  (the parent's values, 32 .. 47)", got[0] == vals[32] && got[15] == vals[47]);
    sift_tensor_destroy(view);
    expect("ownership: read the view's view", sift_tensor_read(view2, 0, got, 8 * 4), SIFT_OK, NULL);
    expect_true("  (values 40 .. 47)", got[0] == vals[40] && got[7] == vals[47]);

    sift_tensor *pool = make(ctx, SIFT_F16, 3, (int64_t[]){1, 32, 8}, 1), *pages = make(ctx, SIFT_I32, 1, (int64_t[]){2}, 0);
    const int32_t table[2] = {1, 0};
    sift_tensor *paged = NULL;
    expect("ownership: write a page table", sift_tensor_write(pages, 0, table, sizeof table), SIFT_OK, NULL);
    expect("ownership: a paged view", sift_tensor_paged_view(pool, pages, 16, &paged), SIFT_OK, NULL);
    sift_tensor_destroy(pool);
    sift_tensor_destroy(pages);
    sift_context_destroy(ctx); /* before its tensors: they keep it open */
    expect("ownership: read the view after its context's destroy", sift_tensor_read(view2, 0, got, 8 * 4), SIFT_OK, NULL);
    expect_true("  (values 40 .. 47)", got[0] == vals[40] && got[7] == vals[47]);
    sift_tensor_destroy(paged);
    sift_tensor_destroy(view2); /* the last: the context closes here */
}

/* Dense attention of 8 heads over 300 positions whose values are all 1 (enough work for the CPU
 * backend's threads): 1 if it computes and gives ones. */
static int attend_ones(sift_context *ctx)
{
    const int64_t n = 300;
    sift_tensor *q = make(ctx, SIFT_F32, 2, (int64_t[]){8, 64}, 1), *k = make(ctx, SIFT_F16, 3, (int64_t[]){4, n, 64}, 1);
    sift_tensor *v = make(ctx, SIFT_F16, 3, (int64_t[]){4, n, 64}, 0), *out = make(ctx, SIFT_F32, 2, (int64_t[]){8, 64}, 0);
    uint16_t *ones = malloc((size_t)(4 * n * 64) * sizeof *ones);
    if (!ones) exit(1);
    for (int64_t i = 0; i < 4 * n * 64; i++) ones[i] = 0x3C00; /* 1.0 in IEEE half */
    sift_graph *g = NULL;
    float o[8 * 64] = {0};
    int ok = sift_tensor_write(v, 0, ones, (size_t)(4 * n * 64) * sizeof *ones) == SIFT_OK &&
             sift_graph_create(ctx, &g) == SIFT_OK && sift_op_dense_attend(g, q, k, v, n, 0.125f, out) == SIFT_OK &&
             sift_graph_compute(g) == SIFT_OK && sift_tensor_read(out, 0, o, sizeof o) == SIFT_OK;
    for (int i = 0; i < 8 * 64; i++) ok = ok && o[i] == 1.0f;
    free(ones);
    sift_graph_destroy(g);
    sift_tensor *all[] = {q, k, v, out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sift_tensor_destroy(all[i]);
    return ok;
}

/* A thread count whose pool cannot be made fails with a status and leaves the CPU context computing
 * (with the threads it had, or one) and destroyable. The address space is limited to what the
 * process maps now plus a little, so the arrays of 2^30 threads and the stacks of 256 cannot be
 * had on any machine. */
static void threads_that_cannot_start(void)
{
    backend_name = "cpu";
    if (test_backend_excluded(SIFT_BACKEND_CPU)) return;
    test_case_begin("threads that cannot start", backend_name);
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    const int have_statm = f && fscanf(f, "%ld", &pages) == 1;
    if (f) fclose(f);
    struct rlimit old;
    sift_context *ctx = NULL;
    if (!have_statm || getrlimit(RLIMIT_AS, &old) != 0 || sift_context_create(SIFT_BACKEND_CPU, &ctx) != SIFT_OK) {
        test_note(backend_name, "threads past the memory left: skipped (no /proc/self/statm or RLIMIT_AS)");
        return;
    }
    expect("set_threads: 2 threads", sift_context_set_threads(ctx, 2), SIFT_OK, NULL);
    expect_true("  (2 threads compute)", attend_ones(ctx));
    struct rlimit tight = old;
    tight.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)64 << 20);
    if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < tight.rlim_cur) tight.rlim_cur = old.rlim_cur;
    if (setrlimit(RLIMIT_AS, &tight) != 0) {
        test_note(backend_name, "threads past the memory left: skipped (setrlimit failed)");
        sift_context_destroy(ctx);
        return;
    }
    expect("set_threads: 2^30 threads past the memory left", sift_context_set_threads(ctx, 1 << 30), SIFT_E_NOMEM,
           "out of memory");
    expect_true("  (the 2 threads still compute)", attend_ones(ctx));
    expect("set_threads: 256 threads whose stacks do not fit", sift_context_set_threads(ctx, 256), SIFT_E_UNAVAILABLE,
           "cannot start thread");
    expect_true("  (one thread computes)", attend_ones(ctx));
    setrlimit(RLIMIT_AS, &old);
    expect("set_threads: 3 threads with the memory back", sift_context_set_threads(ctx, 3), SIFT_OK, NULL);
    expect_true("  (3 threads compute)", attend_ones(ctx));
    expect("set_threads: 2^30 threads past the memory left, again", (setrlimit(RLIMIT_AS, &tight),
           sift_context_set_threads(ctx, 1 << 30)), SIFT_E_NOMEM, "out of memory");
    setrlimit(RLIMIT_AS, &old);
    sift_context_destroy(ctx); /* after a failed set_threads: no crash */
}

/* Configs (sift.h: struct_size) and devices chosen through the API. */
static void configs_and_devices(void)
{
    backend_name = "host";
    test_case_begin("configs and devices", backend_name);
    sift_sampler *smp = NULL;
    sift_sampler_config zero_sampler;
    memset(&zero_sampler, 0, sizeof zero_sampler);
    expect("a zero-initialised sampler config", sift_sampler_create(&zero_sampler, &smp), SIFT_E_INVALID, "_default()");
    sift_sampler_config big = sift_sampler_config_default();
    big.struct_size = sizeof big + 8;
    expect("a sampler config from a newer header", sift_sampler_create(&big, &smp), SIFT_E_INVALID, "newer sift.h");
    expect("a NULL sampler config: the defaults", sift_sampler_create(NULL, &smp), SIFT_OK, NULL);
    const float logits[4] = {0.5f, 3.0f, 3.0f, -1.0f};
    expect_true("  (greedy: the first largest logit)", smp && sift_sampler_sample(smp, logits, 4) == 1);
    sift_sampler_destroy(smp);
    sift_context *ctx = NULL;
    sift_context_config cc;
    memset(&cc, 0, sizeof cc);
    expect("a zero-initialised context config", sift_context_create_with(&cc, &ctx), SIFT_E_INVALID, "struct_size is 0");
    cc = sift_context_config_default();
    cc.threads = -1;
    expect("a context config with -1 threads", sift_context_create_with(&cc, &ctx), SIFT_E_INVALID, "threads");
    cc = sift_context_config_default();
    cc.device = -2;
    expect("a context config with device -2", sift_context_create_with(&cc, &ctx), SIFT_E_INVALID, "device");

    int n = -1;
    expect("device count of the CPU backend", sift_device_count(SIFT_BACKEND_CPU, &n), SIFT_OK, NULL);
    expect_true("  (one device)", n == 1);
    sift_device_info info;
    expect("device 0 of the CPU backend", sift_device_get_info(SIFT_BACKEND_CPU, 0, &info), SIFT_OK, NULL);
    expect_true("  (a CPU, the default, with memory)", info.type == SIFT_DEVICE_CPU && info.is_default && info.memory_bytes > 0);
    expect("device 1 of the CPU backend", sift_device_get_info(SIFT_BACKEND_CPU, 1, &info), SIFT_E_INVALID, "device 1");
    expect("device count: null n", sift_device_count(SIFT_BACKEND_CPU, NULL), SIFT_E_INVALID, NULL);
    expect("device count of an unknown backend", sift_device_count((sift_backend_kind)42, &n), SIFT_E_INVALID, NULL);
    for (int b = 0; b < SIFT_BACKEND_COUNT; b++) {
        backend_name = sift_backend_kind_name((sift_backend_kind)b);
        if (test_backend_excluded((sift_backend_kind)b)) continue; /* the main loop says it is skipped */
        if (sift_device_count((sift_backend_kind)b, &n) != SIFT_OK) {
            test_note(backend_name, "devices skipped: %s", sift_last_error());
            continue;
        }
        int defaults = 0;
        for (int i = 0; i < n; i++)
            defaults += sift_device_get_info((sift_backend_kind)b, i, &info) == SIFT_OK && info.is_default;
        expect_true("one default device", defaults == 1);
        cc = sift_context_config_default();
        cc.backend = (sift_backend_kind)b;
        cc.device = n;
        expect("a context on the device past the last", sift_context_create_with(&cc, &ctx), SIFT_E_INVALID, "device");
        cc.device = n - 1;
        if (sift_context_create_with(&cc, &ctx) == SIFT_OK) {
            expect_true("a context on the last device reports its index", sift_context_device(ctx) == n - 1);
            sift_context_destroy(ctx);
        }
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    sift_backend_kind kind;
    /* checks of the API itself, not of a backend: "host" (report.h) */
    backend_name = "host";
    test_case_begin("backend names", backend_name);
    expect("unknown backend name", sift_backend_kind_parse("metal", &kind), SIFT_E_INVALID, "metal");
    sift_context *bad = NULL;
    expect("unknown backend kind", sift_context_create((sift_backend_kind)42, &bad), SIFT_E_INVALID, NULL);
    expect("null out pointer", sift_context_create(SIFT_BACKEND_CPU, NULL), SIFT_E_INVALID, NULL);
    expect("set_threads: null context", sift_context_set_threads(NULL, 2), SIFT_E_INVALID, "NULL");

    configs_and_devices();
    threads_that_cannot_start();
    for (int b = 0; b < SIFT_BACKEND_COUNT; b++) {
        sift_context *ctx = NULL, *other = NULL;
        backend_name = sift_backend_kind_name((sift_backend_kind)b);
        const char *excluded = test_backend_excluded((sift_backend_kind)b);
        if (excluded || sift_context_create((sift_backend_kind)b, &ctx) != SIFT_OK) {
            test_note(backend_name, "skipped: %s", excluded ? excluded : sift_last_error());
            continue;
        }
        if (sift_context_create(SIFT_BACKEND_CPU, &other) != SIFT_OK) return 1;
        test_case_begin("bad input", backend_name);
        expect("set_threads: 0 threads", sift_context_set_threads(ctx, 0), SIFT_E_INVALID, "0 threads");
        expect("set_threads: -3 threads", sift_context_set_threads(ctx, -3), SIFT_E_INVALID, "-3");
        expect("set_threads: 3 threads (a no-op on the GPUs)", sift_context_set_threads(ctx, 3), SIFT_OK, NULL);
        run_backend(ctx, other); /* with 3 threads on the CPU: more than the cores here */
        ownership((sift_backend_kind)b);
        sift_context_destroy(other);
        test_context_done(ctx);
    }
    return test_summary("badinput", NULL);
}
