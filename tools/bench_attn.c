/* `sift bench-attn`: one layer's decode attention timed on random data, dense vs selection. */
#include "plot.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const cli_command bench_attn_command = {
    "bench-attn", CLI_BENCH_ATTN, "[options]",
    "Times one layer's decode attention on random data with device timestamps (Vulkan timestamp\n"
    "queries, CUDA events; wall clock on the CPU): dense attention, and score -> vote -> select ->\n"
    "gather_attend. Prints the median over repeats of each stage in microseconds and its effective\n"
    "bandwidth (the bytes the stage must move at least, over its time), each graph's total (its\n"
    "stages' times added, each stage timed on its own) and its span (the graph timed at its two\n"
    "ends only, its stages overlapping and skipping as they do in a decode step).\n",
    "With the soft vote and more candidates than k, a third graph times a Selection Cache hit: the\n"
    "cosine check, score/vote/select skipped on the device, the window moved, gather_attend.\n"
    "A last graph times TokenButler's step: random d'-dimensional f16 queries and keys scored\n"
    "with the max over each KV head's group (score_max), the top k per KV head, gather_attend.\n"
    "select and butler are given a warm state for their top-k, as a session's decode steps are\n"
    "(CUDA starts TokenButler's lists from it, Vulkan with SIFT_VULKAN_TUNE=select_warm=1; the\n"
    "votes do not change between runs here, so the warm start always holds: its best case);\n"
    "select_cold and butler_cold run the same graphs with the full top-k every time.\n"};

/* Fills a tensor with pseudo-random values in [-1, 1) in slabs, so a 4 GB cache needs no 4 GB host copy. */
static sift_status fill_random(sift_tensor *t, uint64_t seed)
{
    const size_t total = sift_tensor_nbytes(t), slab = (size_t)16 << 20;
    const bool half = sift_tensor_dtype(t) == SIFT_F16;
    unsigned char *buf = malloc(slab);
    if (!buf) return SIFT_E_NOMEM;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    sift_status s = SIFT_OK;
    for (size_t off = 0; off < total && s == SIFT_OK; off += slab) {
        const size_t bytes = total - off < slab ? total - off : slab;
        for (size_t i = 0; i < bytes / 4; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            float a = (float)(int32_t)(x >> 32) * (1.0f / 2147483648.0f);
            if (half) {
                float pair[2] = {a, (float)(int32_t)x * (1.0f / 2147483648.0f)};
                sift_f32_to_f16((uint16_t *)buf + 2 * i, pair, 2);
            } else {
                memcpy(buf + 4 * i, &a, 4);
            }
        }
        s = sift_tensor_write(t, off, buf, bytes);
    }
    free(buf);
    return s;
}

typedef struct {
    const char *graph;
    int n_nodes;
    const char *names[8];
    double us[8], bytes[8];
    double total_us; /* the stages' times added: each node timed on its own */
    double span_us;  /* the graph timed at its two ends, its nodes overlapping as in a decode step */
} bench_result;

static sift_status time_graph(sift_graph *g, int repeat, bench_result *r)
{
    const int n = sift_graph_node_count(g);
    if (n > 8) return SIFT_E_INVALID; /* the attention graphs have at most four nodes */
    r->n_nodes = n;
    double *samples = calloc((size_t)repeat * (size_t)(n + 2), sizeof *samples), node_us[8];
    if (!samples) return SIFT_E_NOMEM;
    sift_status s = SIFT_OK;
    for (int w = 0; w < 3 && s == SIFT_OK; w++) s = sift_graph_compute_timed(g, node_us);
    for (int w = 0; w < 3 && s == SIFT_OK; w++) s = sift_graph_compute_span(g, node_us);
    /* the two timings alternate, so that both see the same machine */
    for (int rep = 0; rep < repeat && s == SIFT_OK; rep++) {
        s = sift_graph_compute_timed(g, node_us);
        double total = 0.0;
        for (int i = 0; i < n; i++) {
            samples[i * repeat + rep] = node_us[i];
            total += node_us[i];
        }
        samples[n * repeat + rep] = total;
        if (s == SIFT_OK) s = sift_graph_compute_span(g, &samples[(n + 1) * repeat + rep]);
    }
    if (s == SIFT_OK) {
        for (int i = 0; i < n; i++) {
            r->names[i] = sift_graph_node_op_name(g, i);
            r->us[i] = cli_median(samples + i * repeat, repeat);
            r->bytes[i] = sift_graph_node_bytes(g, i);
        }
        r->total_us = cli_median(samples + n * repeat, repeat);
        r->span_us = cli_median(samples + (n + 1) * repeat, repeat);
    }
    free(samples);
    return s;
}

/* bench-attn's shapes: everything but the context, which --ctx lists. */
typedef struct {
    int64_t budget, sink, window, hq, hkv, dim, repeat, key_dim;
    sift_dtype kv;
    sift_vote_mode vote;
    bool json;
} bench_attn_opts;

/* --plot: each stage of the selection step, and each graph's total, against the context. */
static bool plot_bench(plot *pl, int64_t n_ctx, const bench_result *const *rr, int n_graphs)
{
    bool ok = true;
    char name[48];
    for (int r = 0; r < n_graphs; r++) {
        if (!strcmp(rr[r]->graph, "select"))
            for (int i = 0; i < rr[r]->n_nodes; i++) {
                snprintf(name, sizeof name, "select: %s", rr[r]->names[i]);
                ok = ok && plot_add(pl, name, (double)n_ctx, rr[r]->us[i]);
            }
        snprintf(name, sizeof name, "%s: total", rr[r]->graph);
        ok = ok && plot_add(pl, name, (double)n_ctx, rr[r]->total_us);
    }
    return ok;
}

/* A top-k warm start of `lists` lists, empty (sift_op_select_warm). */
static sift_status new_warm(sift_context *ctx, int64_t lists, sift_tensor **out)
{
    const size_t bytes = (size_t)lists * sizeof(int32_t) * SIFT_SELECT_WARM_WORDS;
    int32_t *zeros = calloc(1, bytes);
    if (!zeros) return SIFT_E_NOMEM;
    sift_status s = sift_tensor_create(ctx, SIFT_I32, 2, (int64_t[]){lists, SIFT_SELECT_WARM_WORDS}, out);
    if (s == SIFT_OK) s = sift_tensor_write(*out, 0, zeros, bytes);
    free(zeros);
    return s;
}

/* Prints one context's timed graphs (a table, or one JSON line). rr[0] is dense and rr[1] select;
 * cached and butler are NULL when those graphs did not run. */
static void print_bench_attn(sift_context *ctx, const bench_attn_opts *o, int64_t n_ctx, const bench_result *const *rr,
                             int n_graphs, const bench_result *cached, const bench_result *butler)
{
    const int64_t budget = o->budget, sink = o->sink, window = o->window, hq = o->hq, hkv = o->hkv, dim = o->dim,
                  repeat = o->repeat, key_dim = o->key_dim;
    const sift_dtype kv = o->kv;
    const sift_vote_mode vote = o->vote;
    const bench_result *rd = rr[0], *rs = rr[1];
    if (o->json) {
        printf("{\"backend\": \"%s\", \"device\": ", sift_backend_kind_name(sift_context_backend(ctx)));
        cli_json_string(sift_context_device_name(ctx));
        printf(", \"ctx\": %lld, \"budget\": %lld, \"sink\": %lld, \"window\": %lld, \"q_heads\": %lld, \"kv_heads\": %lld, "
               "\"dim\": %lld, \"kv\": \"%s\", \"vote\": \"%s\", \"repeat\": %lld, \"graphs\": [",
               (long long)n_ctx, (long long)budget, (long long)sink, (long long)window, (long long)hq, (long long)hkv,
               (long long)dim, sift_dtype_name(kv), vote == SIFT_VOTE_SOFTMAX_SUM ? "sum" : "max", (long long)repeat);
        for (int r = 0; r < n_graphs; r++) {
            printf("%s{\"graph\": \"%s\", \"total_us\": ", r ? ", " : "", rr[r]->graph);
            cli_json_fixed(rr[r]->total_us, 3);
            printf(", \"span_us\": ");
            cli_json_fixed(rr[r]->span_us, 3);
            printf(", \"stages\": [");
            for (int i = 0; i < rr[r]->n_nodes; i++) {
                printf("%s{\"op\": \"%s\", \"us\": ", i ? ", " : "", rr[r]->names[i]);
                cli_json_fixed(rr[r]->us[i], 3);
                printf(", \"bytes\": ");
                cli_json_fixed(rr[r]->bytes[i], 0);
                printf(", \"gbps\": "); /* null for a stage timed at 0 us: it has no bandwidth */
                cli_json_fixed(cli_ratio(rr[r]->bytes[i], rr[r]->us[i] * 1e3), 1);
                printf("}");
            }
            printf("]}");
        }
        printf("], \"select_over_dense\": ");
        cli_json_fixed(cli_ratio(rs->total_us, rd->total_us), 4);
        if (cached) {
            printf(", \"cached_over_dense\": ");
            cli_json_fixed(cli_ratio(cached->total_us, rd->total_us), 4);
        }
        if (butler) {
            printf(", \"butler_over_dense\": ");
            cli_json_fixed(cli_ratio(butler->total_us, rd->total_us), 4);
        }
        printf("}\n");
    } else {
        printf("sift bench-attn  backend %s: %s\n", sift_backend_kind_name(sift_context_backend(ctx)),
               sift_context_device_name(ctx));
        printf("N=%lld  heads %lld/%lld  D=%lld  %s K/V  S=%lld W=%lld k=%lld  vote %s  median of %lld\n\n",
               (long long)n_ctx, (long long)hq, (long long)hkv, (long long)dim, sift_dtype_name(kv), (long long)sink,
               (long long)window, (long long)budget, vote == SIFT_VOTE_SOFTMAX_SUM ? "sum" : "max", (long long)repeat);
        printf("%-11s %-15s %12s %10s %12s\n", "graph", "stage", "us", "GB/s", "MB moved");
        for (int r = 0; r < n_graphs; r++) {
            for (int i = 0; i < rr[r]->n_nodes; i++) {
                char gbps[32] = "-";
                if (rr[r]->us[i] > 0) snprintf(gbps, sizeof gbps, "%.1f", rr[r]->bytes[i] / (rr[r]->us[i] * 1e3));
                printf("%-11s %-15s %12.1f %10s %12.2f\n", rr[r]->graph, rr[r]->names[i], rr[r]->us[i], gbps, rr[r]->bytes[i] / 1e6);
            }
            printf("%-11s %-15s %12.1f\n", rr[r]->graph, "total", rr[r]->total_us);
            printf("%-11s %-15s %12.1f\n", rr[r]->graph, "span", rr[r]->span_us);
        }
        if (rd->total_us > 0) {
            printf("\nselect / dense: %.3f\n", rs->total_us / rd->total_us);
            if (cached)
                printf("cached / dense: %.3f  (a Selection Cache hit: check, skipped stages, window, gather)\n", cached->total_us / rd->total_us);
            if (butler)
                printf("butler / dense: %.3f  (TokenButler: d' = %lld f16 keys, top k per KV head, gather)\n",
                       butler->total_us / rd->total_us, (long long)key_dim);
        } else {
            printf("\nselect / dense: -  (dense timed at 0 us)\n");
        }
    }
}

/* The step of a Selection Cache hit (the check, the skipped stages, the window, the gather), timed
 * into r with cfg's shapes; *ran is false where it does not apply (the max vote, or no more
 * candidates than k). */
static sift_status time_cached(sift_context *ctx, sift_attn_config cfg, const bench_attn_opts *o, sift_tensor *const io[4],
                               bench_result *r, bool *ran)
{
    *ran = false;
    if (!(o->vote == SIFT_VOTE_SOFTMAX_SUM && sift_select_candidates(&cfg.sel) > o->budget)) return SIFT_OK;
    const int64_t sn = o->hq * o->dim + SIFT_SEL_CACHE_EXTRA, count = sift_select_count(&cfg.sel);
    /* the state starts empty: the first (warm-up) run misses, selects and keeps q as q_ref; with
     * theta -1 every later run, all the timed ones, reuses that set */
    float *host = calloc((size_t)sn, sizeof *host);
    sift_tensor *state = NULL, *idx = NULL;
    sift_graph *g = NULL;
    sift_status s = host ? SIFT_OK : SIFT_E_NOMEM;
    if (s == SIFT_OK && (s = sift_tensor_create(ctx, SIFT_F32, 1, &sn, &state)) == SIFT_OK &&
        (s = sift_tensor_write(state, 0, host, (size_t)sn * sizeof *host)) == SIFT_OK)
        s = sift_tensor_create(ctx, SIFT_I32, 2, (int64_t[]){1, count}, &idx);
    cfg.mode = SIFT_ATTN_SELECT;
    cfg.sel_cache = -1.0f;
    cfg.sel_state = state;
    cfg.sel_indices = idx;
    if (s == SIFT_OK) s = sift_attn_graph(ctx, &cfg, io[0], io[1], io[2], io[3], &g, NULL);
    if (s == SIFT_OK) s = time_graph(g, (int)o->repeat, r);
    *ran = s == SIFT_OK;
    sift_graph_destroy(g);
    sift_tensor_destroy(state);
    sift_tensor_destroy(idx);
    free(host);
    return s;
}

/* TokenButler's step (a predictor's queries against d'-dimensional f16 keys with score_max, the
 * top k per KV head, the gather) timed with a warm top-k into warm and without into cold; *ran is
 * false with --key-dim 0. */
static sift_status time_butler(sift_context *ctx, sift_attn_config cfg, const bench_attn_opts *o, int64_t n_ctx,
                               sift_tensor *const io[4], bench_result *warm, bench_result *cold, bool *ran)
{
    *ran = false;
    if (o->key_dim == 0) return SIFT_OK;
    sift_tensor *qp = NULL, *kp = NULL, *warm_state = NULL;
    sift_graph *g = NULL, *g_cold = NULL;
    sift_status s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){o->hq, o->key_dim}, &qp);
    if (s == SIFT_OK) s = sift_tensor_create(ctx, SIFT_F16, 3, (int64_t[]){o->hkv, n_ctx, o->key_dim}, &kp);
    if (s == SIFT_OK) s = fill_random(qp, 4);
    if (s == SIFT_OK) s = fill_random(kp, 5);
    cfg.mode = SIFT_ATTN_SELECT;
    cfg.scorer = SIFT_SCORER_BUTLER;
    cfg.score_q = qp;
    cfg.score_k = kp;
    cfg.sel_cache = SIFT_SEL_CACHE_OFF;
    if (s == SIFT_OK) s = sift_attn_graph(ctx, &cfg, io[0], io[1], io[2], io[3], &g_cold, NULL);
    if (s == SIFT_OK) s = new_warm(ctx, o->hkv, &warm_state);
    cfg.sel_warm = warm_state;
    if (s == SIFT_OK) s = sift_attn_graph(ctx, &cfg, io[0], io[1], io[2], io[3], &g, NULL);
    if (s == SIFT_OK) s = time_graph(g, (int)o->repeat, warm);
    if (s == SIFT_OK) s = time_graph(g_cold, (int)o->repeat, cold);
    *ran = s == SIFT_OK;
    sift_graph_destroy(g);
    sift_graph_destroy(g_cold);
    sift_tensor_destroy(warm_state);
    sift_tensor_destroy(qp);
    sift_tensor_destroy(kp);
    return s;
}

/* Dense attention, and the selection step with a warm top-k and without, timed into r[0 .. 2].
 * Select is given a warm state for its top-k, as a session's steps are: the votes do not change
 * between runs here, so where a backend starts warm every timed run's warm start holds (the best
 * case); select_cold selects in full every run (a warm start's miss costs that and the collect). */
static sift_status time_dense_select(sift_context *ctx, sift_attn_config cfg, const bench_attn_opts *o, sift_tensor *const io[4],
                                     bench_result r[3])
{
    sift_graph *dense = NULL, *sel = NULL, *sel_cold = NULL;
    sift_tensor *warm = NULL;
    cfg.mode = SIFT_ATTN_DENSE;
    sift_status s = sift_attn_graph(ctx, &cfg, io[0], io[1], io[2], io[3], &dense, NULL);
    cfg.mode = SIFT_ATTN_SELECT;
    if (s == SIFT_OK) s = sift_attn_graph(ctx, &cfg, io[0], io[1], io[2], io[3], &sel_cold, NULL);
    if (s == SIFT_OK) s = new_warm(ctx, o->vote == SIFT_VOTE_KVHEAD_MAX ? o->hkv : 1, &warm);
    cfg.sel_warm = warm;
    if (s == SIFT_OK) s = sift_attn_graph(ctx, &cfg, io[0], io[1], io[2], io[3], &sel, NULL);
    if (s == SIFT_OK) s = time_graph(dense, (int)o->repeat, &r[0]);
    if (s == SIFT_OK) s = time_graph(sel, (int)o->repeat, &r[1]);
    if (s == SIFT_OK) s = time_graph(sel_cold, (int)o->repeat, &r[2]);
    sift_graph_destroy(dense);
    sift_graph_destroy(sel);
    sift_graph_destroy(sel_cold);
    sift_tensor_destroy(warm);
    return s;
}

/* Times one context's graphs and prints them (a table, or one JSON line); adds them to pl. */
static sift_status bench_attn_ctx(sift_context *ctx, const bench_attn_opts *o, int64_t n_ctx, plot *pl)
{
    const int64_t hq = o->hq, hkv = o->hkv, dim = o->dim;
    const double kv_bytes = 2.0 * (double)hkv * (double)n_ctx * (double)dim * (double)sift_dtype_size(o->kv);
    if (!o->json)
        fprintf(stderr, "sift bench-attn: %s; preparing %.1f MB of K/V...\n", sift_context_device_name(ctx), kv_bytes / 1e6);
    sift_attn_config cfg = sift_attn_config_default();
    cfg.n_q_heads = (int)hq;
    cfg.n_kv_heads = (int)hkv;
    cfg.head_dim = (int)dim;
    cfg.sel = (sift_select_params){.n_ctx = n_ctx, .sink = o->sink, .window = o->window, .budget = o->budget};
    cfg.vote = o->vote;
    sift_tensor *io[4] = {NULL}; /* q, k, v, out */
    sift_status s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, dim}, &io[0]);
    if (s == SIFT_OK) s = sift_tensor_create(ctx, o->kv, 3, (int64_t[]){hkv, n_ctx, dim}, &io[1]);
    if (s == SIFT_OK) s = sift_tensor_create(ctx, o->kv, 3, (int64_t[]){hkv, n_ctx, dim}, &io[2]);
    if (s == SIFT_OK) s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, dim}, &io[3]);
    for (int i = 0; i < 3 && s == SIFT_OK; i++) s = fill_random(io[i], (uint64_t)i + 1);
    bench_result r[6] = {{.graph = "dense"}, {.graph = "select"}, {.graph = "select_cold"}, {.graph = "cached"},
                         {.graph = "butler"}, {.graph = "butler_cold"}};
    bool cached = false, butler = false;
    if (s == SIFT_OK) s = time_dense_select(ctx, cfg, o, io, r);
    if (s == SIFT_OK) s = time_cached(ctx, cfg, o, io, &r[3], &cached);
    if (s == SIFT_OK) s = time_butler(ctx, cfg, o, n_ctx, io, &r[4], &r[5], &butler);
    for (int i = 0; i < 4; i++) sift_tensor_destroy(io[i]);
    if (s != SIFT_OK) {
        fprintf(stderr, "sift bench-attn: %s\n", sift_last_error());
        return s;
    }
    const bench_result *rr[6] = {&r[0], &r[1], &r[2]};
    int n_graphs = 3;
    if (cached) rr[n_graphs++] = &r[3];
    if (butler) rr[n_graphs++] = &r[4], rr[n_graphs++] = &r[5];
    if (pl && !plot_bench(pl, n_ctx, rr, n_graphs)) {
        fprintf(stderr, "sift bench-attn: out of host memory for the plot\n");
        return SIFT_E_NOMEM;
    }
    print_bench_attn(ctx, o, n_ctx, rr, n_graphs, cached ? &r[3] : NULL, butler ? &r[4] : NULL);
    return SIFT_OK;
}

/* Times each context's graphs on the backend; 0, or 1 after a message. */
static int bench_attn(const bench_attn_opts *o, const char *backend, int64_t threads, bool verbose, const int64_t *ctxs, int n_ctxs,
                      const char *plot_path)
{
    sift_context *ctx = NULL;
    sift_status s = cli_open_backend(backend, threads, verbose, &ctx);
    if (s != SIFT_OK) {
        fprintf(stderr, "sift bench-attn: %s\n", sift_last_error());
        return 1;
    }
    if (!o->json) cli_note_vulkan_clocks("sift bench-attn", ctx);
    plot *pl = NULL;
    if (plot_path) {
        char title[160];
        snprintf(title, sizeof title, "sift bench-attn on %s: heads %lld/%lld, D=%lld, S=%lld W=%lld k=%lld",
                 sift_backend_kind_name(sift_context_backend(ctx)), (long long)o->hq, (long long)o->hkv, (long long)o->dim,
                 (long long)o->sink, (long long)o->window, (long long)o->budget);
        if (!(pl = plot_new(title, "context N (tokens)", "microseconds per decode step (median)", true, true))) s = SIFT_E_NOMEM;
    }
    for (int c = 0; c < n_ctxs && s == SIFT_OK; c++) {
        if (c > 0 && !o->json) printf("\n");
        s = bench_attn_ctx(ctx, o, ctxs[c], pl);
    }
    int rc = s == SIFT_OK ? 0 : 1;
    if (s == SIFT_OK && pl) {
        if (!plot_write_svg(pl, plot_path)) {
            fprintf(stderr, "sift bench-attn: cannot write the plot %s: %s\n", plot_path, strerror(errno));
            rc = 1;
        } else if (!o->json)
            fprintf(stderr, "sift bench-attn: plot written to %s\n", plot_path);
    }
    plot_free(pl);
    sift_context_destroy(ctx);
    return rc;
}

int cli_bench_attn(int argc, char **argv)
{
    cli_params p = cli_params_default(&bench_attn_command);
    int rc = 0;
    if (!cli_parse(&bench_attn_command, argc, argv, &p, &rc)) return rc;
    const bench_attn_opts o = {.budget = p.session.budget, .sink = p.session.sink, .window = p.session.window,
                               .hq = p.q_heads, .hkv = p.kv_heads, .dim = p.dim, .repeat = p.repeat, .key_dim = p.key_dim,
                               .kv = p.session.kv_type, .vote = p.vote, .json = p.json};
    return bench_attn(&o, p.backend, p.threads, p.verbose != 0, p.ctxs, p.n_ctxs, p.plot);
}
