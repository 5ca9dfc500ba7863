/* The sift command line. Uses only the public API (sift.h). */
#include "sift.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fputs("usage: sift <command> [options]\n"
          "\n"
          "commands:\n"
          "  bench-attn   time one layer's decode attention, dense vs the selection pipeline, per stage\n"
          "  devices      list the backends and the device each one would use\n"
          "  help         this text; 'sift <command> --help' for a command's options\n",
          f);
}

static void usage_bench(FILE *f)
{
    fputs("usage: sift bench-attn [options]\n"
          "\n"
          "Times one layer's decode attention on random data with device timestamps (Vulkan timestamp\n"
          "queries, CUDA events; wall clock on the CPU): dense attention, and score -> vote -> select ->\n"
          "gather_attend. Prints the median over repeats of each stage in microseconds and its effective\n"
          "bandwidth (the bytes the stage must move at least, over its time).\n"
          "\n"
          "options:\n"
          "  --backend B     cpu, vulkan or cuda (default: cuda if present, else vulkan, else cpu)\n"
          "  --ctx N         tokens in the KV cache (default 32768)\n"
          "  --budget k      tokens chosen by selection (default 2048)\n"
          "  --sink S        first tokens always kept (default 128)\n"
          "  --window W      last tokens always kept (default 512)\n"
          "  --heads Hq/Hkv  query and KV heads (default 32/8)\n"
          "  --dim D         head dimension, 64 or 128 (default 128)\n"
          "  --kv f16|f32    K/V element type (default f16)\n"
          "  --vote sum|max  head soft vote (TokenSelect) or per-KV-head max (default sum)\n"
          "  --repeat R      timed repeats (default 20, after 3 warm-ups)\n"
          "  --json          print one JSON object instead of the table\n",
          f);
}

static bool parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static sift_status open_backend(const char *name, sift_context **ctx)
{
    if (name) {
        sift_backend_kind kind;
        sift_status s = sift_backend_kind_parse(name, &kind);
        if (s != SIFT_OK) return s;
        return sift_context_create(kind, ctx);
    }
    const sift_backend_kind order[] = {SIFT_BACKEND_CUDA, SIFT_BACKEND_VULKAN, SIFT_BACKEND_CPU};
    sift_status s = SIFT_E_UNAVAILABLE;
    for (int i = 0; i < 3 && s != SIFT_OK; i++) s = sift_context_create(order[i], ctx);
    return s;
}

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
    double us[8], bytes[8], total_us;
} bench_result;

static sift_status time_graph(sift_graph *g, int repeat, bench_result *r)
{
    const int n = sift_graph_node_count(g);
    if (n > 8) return SIFT_E_INVALID; /* the attention graphs have at most four nodes */
    r->n_nodes = n;
    double *samples = calloc((size_t)repeat * (size_t)(n + 1), sizeof *samples), node_us[8];
    if (!samples) return SIFT_E_NOMEM;
    sift_status s = SIFT_OK;
    for (int w = 0; w < 3 && s == SIFT_OK; w++) s = sift_graph_compute_timed(g, node_us);
    for (int rep = 0; rep < repeat && s == SIFT_OK; rep++) {
        s = sift_graph_compute_timed(g, node_us);
        double total = 0.0;
        for (int i = 0; i < n; i++) {
            samples[i * repeat + rep] = node_us[i];
            total += node_us[i];
        }
        samples[n * repeat + rep] = total;
    }
    if (s == SIFT_OK) {
        for (int i = 0; i < n; i++) {
            r->names[i] = sift_graph_node_op_name(g, i);
            r->us[i] = median(samples + i * repeat, repeat);
            r->bytes[i] = sift_graph_node_bytes(g, i);
        }
        r->total_us = median(samples + n * repeat, repeat);
    }
    free(samples);
    return s;
}

static int bench_attn(int argc, char **argv)
{
    const char *backend = NULL;
    int64_t n_ctx = 32768, budget = 2048, sink = 128, window = 512, hq = 32, hkv = 8, dim = 128, repeat = 20;
    sift_dtype kv = SIFT_F16;
    sift_vote_mode vote = SIFT_VOTE_SOFTMAX_SUM;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_bench(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            takes = false;
        } else if (!strcmp(a, "--backend")) backend = val, ok = val != NULL;
        else if (!strcmp(a, "--ctx")) ok = parse_i64(val, &n_ctx);
        else if (!strcmp(a, "--budget")) ok = parse_i64(val, &budget);
        else if (!strcmp(a, "--sink")) ok = parse_i64(val, &sink);
        else if (!strcmp(a, "--window")) ok = parse_i64(val, &window);
        else if (!strcmp(a, "--dim")) ok = parse_i64(val, &dim);
        else if (!strcmp(a, "--repeat")) ok = parse_i64(val, &repeat) && repeat >= 1 && repeat <= 100000;
        else if (!strcmp(a, "--heads")) {
            const char *slash = val ? strchr(val, '/') : NULL;
            char first[32] = {0};
            ok = slash && (size_t)(slash - val) < sizeof first;
            if (ok) {
                memcpy(first, val, (size_t)(slash - val));
                ok = parse_i64(first, &hq) && parse_i64(slash + 1, &hkv);
            }
        } else if (!strcmp(a, "--kv")) {
            ok = val && (!strcmp(val, "f16") || !strcmp(val, "f32"));
            if (ok) kv = !strcmp(val, "f16") ? SIFT_F16 : SIFT_F32;
        } else if (!strcmp(a, "--vote")) {
            ok = val && (!strcmp(val, "sum") || !strcmp(val, "max"));
            if (ok) vote = !strcmp(val, "sum") ? SIFT_VOTE_SOFTMAX_SUM : SIFT_VOTE_KVHEAD_MAX;
        } else {
            fprintf(stderr, "sift bench-attn: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "sift bench-attn: %s needs a valid value%s%s\n", a, val ? ", not " : "", val ? val : "");
            return 2;
        }
        if (takes) i++;
    }
    if (hq < 1 || hkv < 1 || hq > 4096 || hkv > 4096 || dim < 1 || dim > 4096) {
        fprintf(stderr, "sift bench-attn: heads %lld/%lld or dimension %lld out of range\n", (long long)hq,
                (long long)hkv, (long long)dim);
        return 2;
    }

    sift_context *ctx = NULL;
    sift_status s = open_backend(backend, &ctx);
    if (s != SIFT_OK) {
        fprintf(stderr, "sift bench-attn: %s\n", sift_last_error());
        return 1;
    }
    sift_tensor *q = NULL, *k = NULL, *v = NULL, *out = NULL;
    sift_graph *dense = NULL, *sel = NULL;
    bench_result rd = {.graph = "dense"}, rs = {.graph = "select"};
    const double kv_bytes = 2.0 * (double)hkv * (double)n_ctx * (double)dim * (double)sift_dtype_size(kv);
    if (!json)
        fprintf(stderr, "sift bench-attn: %s; preparing %.1f MB of K/V...\n", sift_context_device_name(ctx), kv_bytes / 1e6);
    sift_attn_config cfg = {.n_q_heads = (int)hq, .n_kv_heads = (int)hkv, .head_dim = (int)dim,
                            .sel = {.n_ctx = n_ctx, .sink = sink, .window = window, .budget = budget}, .vote = vote};
    if ((s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, dim}, &q)) != SIFT_OK ||
        (s = sift_tensor_create(ctx, kv, 3, (int64_t[]){hkv, n_ctx, dim}, &k)) != SIFT_OK ||
        (s = sift_tensor_create(ctx, kv, 3, (int64_t[]){hkv, n_ctx, dim}, &v)) != SIFT_OK ||
        (s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, dim}, &out)) != SIFT_OK || (s = fill_random(q, 1)) != SIFT_OK ||
        (s = fill_random(k, 2)) != SIFT_OK || (s = fill_random(v, 3)) != SIFT_OK)
        goto done;
    cfg.mode = SIFT_ATTN_DENSE;
    if ((s = sift_decode_attn_graph(ctx, &cfg, q, k, v, out, &dense, NULL)) != SIFT_OK) goto done;
    cfg.mode = SIFT_ATTN_SELECT;
    if ((s = sift_decode_attn_graph(ctx, &cfg, q, k, v, out, &sel, NULL)) != SIFT_OK) goto done;
    if ((s = time_graph(dense, (int)repeat, &rd)) != SIFT_OK) goto done;
    if ((s = time_graph(sel, (int)repeat, &rs)) != SIFT_OK) goto done;

    if (json) {
        printf("{\"backend\": \"%s\", \"device\": \"%s\", \"ctx\": %lld, \"budget\": %lld, \"sink\": %lld, "
               "\"window\": %lld, \"q_heads\": %lld, \"kv_heads\": %lld, \"dim\": %lld, \"kv\": \"%s\", \"vote\": \"%s\", "
               "\"repeat\": %lld, \"graphs\": [",
               sift_backend_kind_name(sift_context_backend(ctx)), sift_context_device_name(ctx), (long long)n_ctx,
               (long long)budget, (long long)sink, (long long)window, (long long)hq, (long long)hkv, (long long)dim,
               sift_dtype_name(kv), vote == SIFT_VOTE_SOFTMAX_SUM ? "sum" : "max", (long long)repeat);
        const bench_result *rr[2] = {&rd, &rs};
        for (int r = 0; r < 2; r++) {
            printf("%s{\"graph\": \"%s\", \"total_us\": %.3f, \"stages\": [", r ? ", " : "", rr[r]->graph, rr[r]->total_us);
            for (int i = 0; i < rr[r]->n_nodes; i++)
                printf("%s{\"op\": \"%s\", \"us\": %.3f, \"bytes\": %.0f, \"gbps\": %.1f}", i ? ", " : "", rr[r]->names[i],
                       rr[r]->us[i], rr[r]->bytes[i], rr[r]->bytes[i] / (rr[r]->us[i] * 1e3));
            printf("]}");
        }
        printf("], \"select_over_dense\": %.4f}\n", rs.total_us / rd.total_us);
    } else {
        printf("sift bench-attn  backend %s: %s\n", sift_backend_kind_name(sift_context_backend(ctx)),
               sift_context_device_name(ctx));
        printf("N=%lld  heads %lld/%lld  D=%lld  %s K/V  S=%lld W=%lld k=%lld  vote %s  median of %lld\n\n",
               (long long)n_ctx, (long long)hq, (long long)hkv, (long long)dim, sift_dtype_name(kv), (long long)sink,
               (long long)window, (long long)budget, vote == SIFT_VOTE_SOFTMAX_SUM ? "sum" : "max", (long long)repeat);
        printf("%-8s %-15s %12s %10s %12s\n", "graph", "stage", "us", "GB/s", "MB moved");
        const bench_result *rr[2] = {&rd, &rs};
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < rr[r]->n_nodes; i++)
                printf("%-8s %-15s %12.1f %10.1f %12.2f\n", rr[r]->graph, rr[r]->names[i], rr[r]->us[i],
                       rr[r]->bytes[i] / (rr[r]->us[i] * 1e3), rr[r]->bytes[i] / 1e6);
            printf("%-8s %-15s %12.1f\n", rr[r]->graph, "total", rr[r]->total_us);
        }
        printf("\nselect / dense: %.3f\n", rs.total_us / rd.total_us);
    }
done:
    if (s != SIFT_OK) fprintf(stderr, "sift bench-attn: %s\n", sift_last_error());
    sift_graph_destroy(dense);
    sift_graph_destroy(sel);
    sift_tensor_destroy(q);
    sift_tensor_destroy(k);
    sift_tensor_destroy(v);
    sift_tensor_destroy(out);
    sift_context_destroy(ctx);
    return s == SIFT_OK ? 0 : 1;
}

static int devices(void)
{
    for (int b = 0; b < SIFT_BACKEND_COUNT; b++) {
        sift_context *ctx = NULL;
        const char *name = sift_backend_kind_name((sift_backend_kind)b);
        if (sift_context_create((sift_backend_kind)b, &ctx) == SIFT_OK) {
            printf("%-7s %s\n", name, sift_context_device_name(ctx));
            sift_context_destroy(ctx);
        } else {
            printf("%-7s unavailable: %s\n", name, sift_last_error());
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "bench-attn")) return bench_attn(argc - 2, argv + 2);
    if (!strcmp(cmd, "devices")) return devices();
    fprintf(stderr, "sift: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
