/* The sift command line. Uses only the public API (sift.h). */
#include "sift.h"
#include "sift_testing.h"
#include "cli.h"
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef SIFT_VERSION_STRING
#define SIFT_VERSION_STRING "unknown"
#endif

static void usage(FILE *f)
{
    fputs("usage: sift <command> [options]\n"
          "\n"
          "commands:\n"
          "  demo         the retrieval model the repository ships, on 4K-token prompts: answers,\n"
          "               accuracy, KV bytes read per step and speed of dense, tokenselect, quest and\n"
          "               streaming attention (run it from the repository root)\n"
          "  run          generate text from a GGUF model (llama, qwen2, mistral)\n"
          "  chat         chat with a model in its chat template, one message per line of stdin\n"
          "               (sift run -cnv is the same)\n"
          "  logits       write a model's per-step logits as JSON lines (for tests)\n"
          "  tokenize     print the token ids of a text file, one line of decimal ids (the predictor\n"
          "               trainer reads text through it)\n"
          "  eval         quality of every selection policy at given budgets: perplexity and agreement\n"
          "               with dense on a text, retrieval accuracy, attention recall and error\n"
          "  bench-attn   time one layer's decode attention, dense vs the selection pipeline, per stage\n"
          "  bench-decode time a model's decode steps at long contexts, dense vs selected attention\n"
          "  devices      list the backends, their devices, the one each would use, and the automatic choice\n"
          "               (--json: as JSON)\n"
          "  help         this text; 'sift <command> --help' for a command's options\n"
          "  --version    print the version\n",
          f);
}

static void usage_bench(FILE *f)
{
    fputs("usage: sift bench-attn [options]\n"
          "\n"
          "Times one layer's decode attention on random data with device timestamps (Vulkan timestamp\n"
          "queries, CUDA events; wall clock on the CPU): dense attention, and score -> vote -> select ->\n"
          "gather_attend. Prints the median over repeats of each stage in microseconds and its effective\n"
          "bandwidth (the bytes the stage must move at least, over its time), each graph's total (its\n"
          "stages' times added, each stage timed on its own) and its span (the graph timed at its two\n"
          "ends only, its stages overlapping and skipping as they do in a decode step).\n"
          "\n"
          "options:\n"
          "  --backend B     cpu, vulkan or cuda (default: cuda, else a Vulkan GPU, else cpu;\n                  `sift devices` shows the choice)\n"
          "  -t, --threads N the CPU backend's threads (default: one per core)\n"
          "  --ctx N[,N...]  tokens in the KV cache, one run per context (default 32768)\n"
          "  --budget k      tokens chosen by selection (default 2048)\n"
          "  --sink S        first tokens always kept (default 128)\n"
          "  --window W      last tokens always kept (default 512)\n"
          "  --heads Hq/Hkv  query and KV heads (default 32/8)\n"
          "  --dim D         head dimension, 64 or 128 (default 128)\n"
          "  --kv f16|f32    K/V element type (default f16)\n"
          "  --vote sum|max  head soft vote (TokenSelect) or per-KV-head max (default sum)\n"
          "  --key-dim d'    TokenButler's key dimension, a multiple of 8 (default 16; 0: no butler graph)\n"
          "  --repeat R      timed repeats (default 20, after 3 warm-ups)\n"
          "  --json          print one JSON object per context, one a line, instead of the tables; a\n"
          "                  figure that does not exist is null (gbps of a stage timed at 0 us; the\n"
          "                  table prints - there)\n"
          "  --plot FILE.svg also draw microseconds against the context: each stage of the selection\n"
          "                  step and each graph's total, one line each (log scales; stages at 0 us\n"
          "                  left out)\n"
          "\n"
          "With the soft vote and more candidates than k, a third graph times a Selection Cache hit: the\n"
          "cosine check, score/vote/select skipped on the device, the window moved, gather_attend.\n"
          "A last graph times TokenButler's step: random d'-dimensional f16 queries and keys scored\n"
          "with the max over each KV head's group (score_max), the top k per KV head, gather_attend.\n"
          "select and butler are given a warm state for their top-k, as a session's decode steps are\n"
          "(CUDA starts TokenButler's lists from it, Vulkan with SIFT_VULKAN_TUNE=select_warm=1; the\n"
          "votes do not change between runs here, so the warm start always holds: its best case);\n"
          "select_cold and butler_cold run the same graphs with the full top-k every time.\n",
          f);
}

bool cli_parse_i64(const char *s, int64_t *out)
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
    /* the automatic choice: a GPU, never a CPU emulation of one (lavapipe is far slower than the
     * CPU backend), else the CPU */
    const sift_backend_kind order[] = {SIFT_BACKEND_CUDA, SIFT_BACKEND_VULKAN, SIFT_BACKEND_CPU};
    sift_status s = SIFT_E_UNAVAILABLE;
    for (int i = 0; i < 3 && s != SIFT_OK; i++) {
        s = sift_context_create(order[i], ctx);
        if (s == SIFT_OK && order[i] != SIFT_BACKEND_CPU && sift_context_is_emulated(*ctx)) {
            sift_context_destroy(*ctx);
            *ctx = NULL;
            s = SIFT_E_UNAVAILABLE;
        }
    }
    return s;
}

/* NVIDIA's driver gives a process that uses the GPU through Vulkan alone adaptive clocks: on an
 * H200 the SM clock stayed at 345-1000 MHz under these benches, and at 1980 MHz while any process
 * held a CUDA context open, which made Vulkan's figures 2-4x slower and vary from run to run
 * (docs/benchmarks.md). The benches say so, where it changes what their figures mean. */
static void note_vulkan_clocks(const char *who, sift_context *ctx)
{
    if (sift_context_backend(ctx) == SIFT_BACKEND_VULKAN && strstr(sift_context_device_name(ctx), "NVIDIA"))
        fprintf(stderr,
                "%s: note: NVIDIA's driver clocks a process that uses the GPU through Vulkan alone\n"
                "  adaptively, often far below the maximum; a CUDA context kept open on the GPU meanwhile (any\n"
                "  process) holds the clocks up (docs/benchmarks.md)\n",
                who);
}

sift_status cli_open_backend(const char *name, int64_t threads, sift_context **ctx)
{
    sift_status s = open_backend(name, ctx);
    if (s == SIFT_OK && threads > 0 && (s = sift_context_set_threads(*ctx, (int)threads)) != SIFT_OK) {
        sift_context_destroy(*ctx);
        *ctx = NULL;
    }
    return s;
}

/* The load's progress on a terminal: a percentage on stderr, rewritten in place, cleared at the end. */
typedef struct load_progress {
    const char *who;
    int shown; /* the percentage shown, -1: none yet */
} load_progress;

static int show_load_progress(void *user, uint64_t done, uint64_t total)
{
    load_progress *p = user;
    const int pct = total ? (int)(done * 100 / total) : 100;
    if (pct != p->shown) fprintf(stderr, "\r%s: loading the model: %3d%%", p->who, pct);
    if (done >= total) fputs("\r\033[K", stderr);
    p->shown = pct;
    return 0;
}

sift_status cli_load_model(const char *who, sift_context *ctx, const char *path, sift_model **m)
{
    load_progress p = {.who = who, .shown = -1};
    sift_model_load_config c = sift_model_load_config_default();
    if (isatty(STDERR_FILENO)) {
        c.progress = show_load_progress;
        c.progress_user = &p;
    }
    return sift_model_load_with(ctx, path, &c, m);
}

int cli_open_model(const char *who, const char *backend, int64_t threads, const char *path, sift_context **ctx,
                   sift_model **m)
{
    *ctx = NULL;
    *m = NULL;
    sift_status s = cli_open_backend(backend, threads, ctx);
    if (s == SIFT_OK) s = cli_load_model(who, *ctx, path, m);
    if (s == SIFT_OK) return 0;
    fprintf(stderr, "%s: %s\n", who, sift_last_error());
    sift_context_destroy(*ctx);
    *ctx = NULL;
    return 1;
}

int cli_parse_butler(const char *who, int argc, char **argv, int *i, cli_butler *b)
{
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--neighbor-fetch")) {
        b->neighbor_fetch = true;
        return 1;
    }
    if (strcmp(a, "--predictor") != 0 && strcmp(a, "--predict-interval") != 0 && strcmp(a, "--butler-keys") != 0) return 0;
    if (!val) {
        fprintf(stderr, "%s: %s needs a value\n", who, a);
        return -1;
    }
    if (!strcmp(a, "--predictor")) {
        b->predictor = val;
    } else if (!strcmp(a, "--butler-keys")) {
        if (strcmp(val, "f16") != 0 && strcmp(val, "int8") != 0) {
            fprintf(stderr, "%s: --butler-keys needs f16 or int8, not '%s'\n", who, val);
            return -1;
        }
        b->keys = !strcmp(val, "int8") ? SIFT_I8 : SIFT_F16;
    } else if (!cli_parse_i64(val, &b->interval) || b->interval < 1 || b->interval > 1024) {
        fprintf(stderr, "%s: --predict-interval needs a number of steps in 1 .. 1024 (1, 2, 4, 8, 16 are usual), not '%s'\n",
                who, val);
        return -1;
    }
    (*i)++;
    return 1;
}

int cli_parse_offload(const char *who, int argc, char **argv, int *i, cli_offload *o)
{
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--kv-offload-v-only")) {
        o->v_only = true;
        return 1;
    }
    if (strcmp(a, "--kv-offload") != 0) return 0;
    if (!val) {
        fprintf(stderr, "%s: --kv-offload needs the device pool's size: tokens (65536) or bytes (512M, 24G)\n", who);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    const long long n = strtoll(val, &end, 10);
    int shift = -1; /* -1: tokens; else bytes of 2^shift */
    bool ok = !errno && end != val && n >= 1;
    if (ok && *end) {
        const char u = (char)(*end | 0x20);
        shift = u == 'k' ? 10 : u == 'm' ? 20 : u == 'g' ? 30 : u == 't' ? 40 : -1;
        end++;
        ok = shift > 0 && (!*end || !strcmp(end, "B") || !strcmp(end, "iB")) && n <= (INT64_MAX >> shift);
    }
    if (!ok) {
        fprintf(stderr, "%s: --kv-offload needs tokens (65536) or bytes with K, M, G or T (512M, 24G), not '%s'\n", who, val);
        return -1;
    }
    o->size = val;
    o->tokens = shift < 0 ? n : 0;
    o->bytes = shift < 0 ? 0 : (int64_t)n << shift;
    (*i)++;
    return 1;
}

int cli_offload_apply(const char *who, const cli_offload *o, const sift_model *m, sift_session_config *cfg)
{
    if (!o->size) {
        if (!o->v_only) return 0;
        fprintf(stderr, "%s: --kv-offload-v-only needs --kv-offload SIZE\n", who);
        return 1;
    }
    int64_t tokens = o->tokens;
    if (o->bytes) {
        sift_model_info info;
        sift_model_get_info(m, &info);
        const int64_t per_token = (int64_t)info.n_layers * (o->v_only ? 1 : 2) * info.n_kv_heads * info.head_dim *
                                  (int64_t)sift_dtype_size(cfg->kv_type);
        tokens = per_token > 0 ? o->bytes / per_token : 0;
        if (tokens < 1) {
            fprintf(stderr, "%s: --kv-offload %s holds no token of this model's K/V (%lld bytes a token)\n", who, o->size,
                    (long long)per_token);
            return 1;
        }
    }
    cfg->kv_device_tokens = tokens;
    cfg->kv_offload_v_only = o->v_only;
    return 0;
}

/* "s" after a count other than one */
static const char *plural(int64_t n) { return n == 1 ? "" : "s"; }

/* "KV offload: device pool ... moved to the host" of pools p (GB or MB as their size asks). */
static void print_pools(FILE *f, const sift_kv_pool_info *p)
{
    const double dev = (double)p->device_bytes, host = (double)p->host_bytes;
    const bool gb = dev >= 1e9 || host >= 1e9;
    fprintf(f,
            "KV offload: device pool %.2f %s (%lld page%s of %lld tokens, %lld in use), host pool %.2f %s (%lld page%s, "
            "%lld in use); %lld page%s moved to the host\n",
            dev / (gb ? 1e9 : 1e6), gb ? "GB" : "MB", (long long)p->device_pages, plural(p->device_pages),
            (long long)p->page_size, (long long)p->device_used, host / (gb ? 1e9 : 1e6), gb ? "GB" : "MB",
            (long long)p->host_pages, plural(p->host_pages), (long long)p->host_used, (long long)p->pages_moved,
            plural(p->pages_moved));
}

void cli_print_kv_pools(FILE *f, const char *who, const sift_session *s)
{
    sift_kv_pool_info p;
    if (sift_session_kv_pools(s, &p) != SIFT_OK || p.host_pages == 0) return;
    fprintf(f, "%s: ", who);
    print_pools(f, &p);
}

int cli_load_predictor(const char *who, sift_model *m, const cli_butler *b, sift_predictor **out)
{
    *out = NULL;
    if (!b->predictor) return 0;
    const sift_status s = !strcmp(b->predictor, "random") ? sift_predictor_random(m, 16, 1, out)
                                                          : sift_predictor_load(m, b->predictor, out);
    if (s == SIFT_OK) return 0;
    fprintf(stderr, "%s: %s\n", who, sift_last_error());
    return 1;
}

bool cli_parse_threads(const char *s, int64_t *out) { return cli_parse_i64(s, out) && *out >= 1 && *out <= 4096; }

void cli_json_string(const char *str)
{
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
        if (*c == '"' || *c == '\\') printf("\\%c", *c);
        else if (*c < 0x20) printf("\\u%04x", *c);
        else putchar(*c);
    }
    putchar('"');
}

void cli_json_fixed(double v, int decimals)
{
    if (isfinite(v)) printf("%.*f", decimals, v);
    else fputs("null", stdout); /* JSON has no inf or nan */
}

/* a / b, where a figure exists: NAN (null in JSON, '-' in tables) when b is not positive */
static double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

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
            r->us[i] = median(samples + i * repeat, repeat);
            r->bytes[i] = sift_graph_node_bytes(g, i);
        }
        r->total_us = median(samples + n * repeat, repeat);
        r->span_us = median(samples + (n + 1) * repeat, repeat);
    }
    free(samples);
    return s;
}

enum { CLI_MAX_CTXS = 64 };

/* --ctx N[,N...] of the benchmarks: up to CLI_MAX_CTXS contexts; false after a message. */
static bool parse_ctx_list(const char *who, const char *list, int64_t *ctxs, int *n_ctxs)
{
    *n_ctxs = 0;
    for (const char *p = list; p && *p;) {
        char *end;
        errno = 0;
        const long long n = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || errno || n < 1 || n > INT32_MAX || *n_ctxs == CLI_MAX_CTXS) {
            fprintf(stderr, "%s: --ctx needs up to %d comma-separated contexts in tokens (1 .. 2^31 - 1), not '%s'\n", who,
                    CLI_MAX_CTXS, list);
            return false;
        }
        ctxs[(*n_ctxs)++] = n;
        p = *end ? end + 1 : end;
    }
    if (*n_ctxs == 0) fprintf(stderr, "%s: --ctx needs a context in tokens\n", who);
    return *n_ctxs > 0;
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
                cli_json_fixed(ratio(rr[r]->bytes[i], rr[r]->us[i] * 1e3), 1);
                printf("}");
            }
            printf("]}");
        }
        printf("], \"select_over_dense\": ");
        cli_json_fixed(ratio(rs->total_us, rd->total_us), 4);
        if (cached) {
            printf(", \"cached_over_dense\": ");
            cli_json_fixed(ratio(cached->total_us, rd->total_us), 4);
        }
        if (butler) {
            printf(", \"butler_over_dense\": ");
            cli_json_fixed(ratio(butler->total_us, rd->total_us), 4);
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

/* Times one context's graphs and prints them (a table, or one JSON line); adds them to pl. */
static sift_status bench_attn_ctx(sift_context *ctx, const bench_attn_opts *o, int64_t n_ctx, plot *pl)
{
    const int64_t budget = o->budget, sink = o->sink, window = o->window, hq = o->hq, hkv = o->hkv, dim = o->dim,
                  repeat = o->repeat, key_dim = o->key_dim;
    const sift_dtype kv = o->kv;
    const sift_vote_mode vote = o->vote;
    const bool json = o->json;
    sift_status s = SIFT_OK;
    bool reported = false; /* the failure's message is printed already */
    sift_tensor *q = NULL, *k = NULL, *v = NULL, *out = NULL, *state = NULL, *idx = NULL, *qp = NULL, *kp = NULL;
    sift_tensor *warm_sel = NULL, *warm_butler = NULL; /* the top-k's warm start of select and butler */
    sift_graph *dense = NULL, *sel = NULL, *cached = NULL, *butler = NULL, *sel_cold = NULL, *butler_cold = NULL;
    float *host = NULL;
    bench_result rd = {.graph = "dense"}, rs = {.graph = "select"}, rc = {.graph = "cached"}, rb = {.graph = "butler"};
    bench_result rsc = {.graph = "select_cold"}, rbc = {.graph = "butler_cold"};
    const double kv_bytes = 2.0 * (double)hkv * (double)n_ctx * (double)dim * (double)sift_dtype_size(kv);
    if (!json)
        fprintf(stderr, "sift bench-attn: %s; preparing %.1f MB of K/V...\n", sift_context_device_name(ctx), kv_bytes / 1e6);
    sift_attn_config cfg = sift_attn_config_default();
    cfg.n_q_heads = (int)hq;
    cfg.n_kv_heads = (int)hkv;
    cfg.head_dim = (int)dim;
    cfg.sel = (sift_select_params){.n_ctx = n_ctx, .sink = sink, .window = window, .budget = budget};
    cfg.vote = vote;
    if ((s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, dim}, &q)) != SIFT_OK ||
        (s = sift_tensor_create(ctx, kv, 3, (int64_t[]){hkv, n_ctx, dim}, &k)) != SIFT_OK ||
        (s = sift_tensor_create(ctx, kv, 3, (int64_t[]){hkv, n_ctx, dim}, &v)) != SIFT_OK ||
        (s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, dim}, &out)) != SIFT_OK || (s = fill_random(q, 1)) != SIFT_OK ||
        (s = fill_random(k, 2)) != SIFT_OK || (s = fill_random(v, 3)) != SIFT_OK)
        goto done;
    cfg.mode = SIFT_ATTN_DENSE;
    if ((s = sift_attn_graph(ctx, &cfg, q, k, v, out, &dense, NULL)) != SIFT_OK) goto done;
    /* select and butler are given a warm state for their top-k, as a session's steps are: the votes
     * do not change between runs here, so where a backend starts warm every timed run's warm start
     * holds (the best case); select_cold and butler_cold select in full every run (a warm start's
     * miss costs that and the collect) */
    cfg.mode = SIFT_ATTN_SELECT;
    if ((s = sift_attn_graph(ctx, &cfg, q, k, v, out, &sel_cold, NULL)) != SIFT_OK) goto done;
    if ((s = new_warm(ctx, vote == SIFT_VOTE_KVHEAD_MAX ? hkv : 1, &warm_sel)) != SIFT_OK) goto done;
    cfg.sel_warm = warm_sel;
    if ((s = sift_attn_graph(ctx, &cfg, q, k, v, out, &sel, NULL)) != SIFT_OK) goto done;
    cfg.sel_warm = NULL;
    if ((s = time_graph(dense, (int)repeat, &rd)) != SIFT_OK) goto done;
    if ((s = time_graph(sel, (int)repeat, &rs)) != SIFT_OK) goto done;
    if ((s = time_graph(sel_cold, (int)repeat, &rsc)) != SIFT_OK) goto done;
    /* the step of a Selection Cache hit: the check, the skipped stages, the window, the gather */
    if (vote == SIFT_VOTE_SOFTMAX_SUM && sift_select_candidates(&cfg.sel) > budget) {
        const int64_t qn = hq * dim, sn = qn + SIFT_SEL_CACHE_EXTRA, count = sift_select_count(&cfg.sel);
        /* the state starts empty: the first (warm-up) run misses, selects and keeps q as q_ref;
         * with theta -1 every later run, all the timed ones, reuses that set */
        host = calloc((size_t)sn, sizeof *host);
        if (!host) {
            s = SIFT_E_NOMEM;
            goto done;
        }
        if ((s = sift_tensor_create(ctx, SIFT_F32, 1, &sn, &state)) != SIFT_OK ||
            (s = sift_tensor_write(state, 0, host, (size_t)sn * sizeof *host)) != SIFT_OK ||
            (s = sift_tensor_create(ctx, SIFT_I32, 2, (int64_t[]){1, count}, &idx)) != SIFT_OK)
            goto done;
        cfg.sel_cache = -1.0f;
        cfg.sel_state = state;
        cfg.sel_indices = idx;
        if ((s = sift_attn_graph(ctx, &cfg, q, k, v, out, &cached, NULL)) != SIFT_OK ||
            (s = time_graph(cached, (int)repeat, &rc)) != SIFT_OK)
            goto done;
    }
    /* TokenButler's step: a predictor's queries against d'-dimensional f16 keys (score_max), the
     * top k per KV head, the gather */
    if (key_dim > 0) {
        sift_attn_config bc = cfg;
        if ((s = sift_tensor_create(ctx, SIFT_F32, 2, (int64_t[]){hq, key_dim}, &qp)) != SIFT_OK ||
            (s = sift_tensor_create(ctx, SIFT_F16, 3, (int64_t[]){hkv, n_ctx, key_dim}, &kp)) != SIFT_OK ||
            (s = fill_random(qp, 4)) != SIFT_OK || (s = fill_random(kp, 5)) != SIFT_OK)
            goto done;
        bc.mode = SIFT_ATTN_SELECT;
        bc.scorer = SIFT_SCORER_BUTLER;
        bc.score_q = qp;
        bc.score_k = kp;
        bc.sel_cache = SIFT_SEL_CACHE_OFF;
        bc.sel_state = NULL;
        bc.sel_indices = NULL;
        if ((s = sift_attn_graph(ctx, &bc, q, k, v, out, &butler_cold, NULL)) != SIFT_OK ||
            (s = new_warm(ctx, hkv, &warm_butler)) != SIFT_OK)
            goto done;
        bc.sel_warm = warm_butler;
        if ((s = sift_attn_graph(ctx, &bc, q, k, v, out, &butler, NULL)) != SIFT_OK ||
            (s = time_graph(butler, (int)repeat, &rb)) != SIFT_OK || (s = time_graph(butler_cold, (int)repeat, &rbc)) != SIFT_OK)
            goto done;
    }
    const bench_result *rr[6];
    int n_graphs = 0;
    rr[n_graphs++] = &rd;
    rr[n_graphs++] = &rs;
    rr[n_graphs++] = &rsc;
    if (cached) rr[n_graphs++] = &rc;
    if (butler) rr[n_graphs++] = &rb;
    if (butler) rr[n_graphs++] = &rbc;
    if (pl && !plot_bench(pl, n_ctx, rr, n_graphs)) {
        fprintf(stderr, "sift bench-attn: out of host memory for the plot\n");
        s = SIFT_E_NOMEM;
        reported = true;
        goto done;
    }

    print_bench_attn(ctx, o, n_ctx, rr, n_graphs, cached ? &rc : NULL, butler ? &rb : NULL);
done:
    if (s != SIFT_OK && !reported) fprintf(stderr, "sift bench-attn: %s\n", sift_last_error());
    sift_graph_destroy(dense);
    sift_graph_destroy(sel);
    sift_graph_destroy(cached);
    sift_graph_destroy(butler);
    sift_graph_destroy(sel_cold);
    sift_graph_destroy(butler_cold);
    sift_tensor_destroy(warm_sel);
    sift_tensor_destroy(warm_butler);
    sift_tensor_destroy(qp);
    sift_tensor_destroy(kp);
    sift_tensor_destroy(state);
    sift_tensor_destroy(idx);
    free(host);
    sift_tensor_destroy(q);
    sift_tensor_destroy(k);
    sift_tensor_destroy(v);
    sift_tensor_destroy(out);
    return s;
}
static int bench_attn(int argc, char **argv)
{
    const char *backend = NULL;
    int64_t threads = 0; /* -t: the CPU backend's threads, 0: one per core */
    const char *ctx_list = "32768", *plot_path = NULL;
    int64_t budget = 2048, sink = 128, window = 512, hq = 32, hkv = 8, dim = 128, repeat = 20, key_dim = 16;
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
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_parse_threads(val, &threads);
        else if (!strcmp(a, "--ctx")) ctx_list = val, ok = val != NULL;
        else if (!strcmp(a, "--plot")) plot_path = val, ok = val != NULL;
        else if (!strcmp(a, "--budget")) ok = cli_parse_i64(val, &budget);
        else if (!strcmp(a, "--sink")) ok = cli_parse_i64(val, &sink);
        else if (!strcmp(a, "--window")) ok = cli_parse_i64(val, &window);
        else if (!strcmp(a, "--dim")) ok = cli_parse_i64(val, &dim);
        else if (!strcmp(a, "--key-dim")) ok = cli_parse_i64(val, &key_dim) && key_dim >= 0 && key_dim <= 128 && key_dim % 8 == 0;
        else if (!strcmp(a, "--repeat")) ok = cli_parse_i64(val, &repeat) && repeat >= 1 && repeat <= 100000;
        else if (!strcmp(a, "--heads")) {
            const char *slash = val ? strchr(val, '/') : NULL;
            char first[32] = {0};
            ok = slash && (size_t)(slash - val) < sizeof first;
            if (ok) {
                memcpy(first, val, (size_t)(slash - val));
                ok = cli_parse_i64(first, &hq) && cli_parse_i64(slash + 1, &hkv);
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
    int64_t ctxs[CLI_MAX_CTXS];
    int n_ctxs = 0;
    if (!parse_ctx_list("sift bench-attn", ctx_list, ctxs, &n_ctxs)) return 2;

    sift_context *ctx = NULL;
    sift_status s = cli_open_backend(backend, threads, &ctx);
    if (s != SIFT_OK) {
        fprintf(stderr, "sift bench-attn: %s\n", sift_last_error());
        return 1;
    }
    if (!json) note_vulkan_clocks("sift bench-attn", ctx);
    bench_attn_opts o = {.budget = budget, .sink = sink, .window = window, .hq = hq, .hkv = hkv, .dim = dim,
                         .repeat = repeat, .key_dim = key_dim, .kv = kv, .vote = vote, .json = json};
    plot *pl = NULL;
    if (plot_path) {
        char title[160];
        snprintf(title, sizeof title, "sift bench-attn on %s: heads %lld/%lld, D=%lld, S=%lld W=%lld k=%lld",
                 sift_backend_kind_name(sift_context_backend(ctx)), (long long)hq, (long long)hkv, (long long)dim, (long long)sink,
                 (long long)window, (long long)budget);
        if (!(pl = plot_new(title, "context N (tokens)", "microseconds per decode step (median)", true, true))) s = SIFT_E_NOMEM;
    }
    for (int c = 0; c < n_ctxs && s == SIFT_OK; c++) {
        if (c > 0 && !json) printf("\n");
        s = bench_attn_ctx(ctx, &o, ctxs[c], pl);
    }
    int rc = s == SIFT_OK ? 0 : 1;
    if (s == SIFT_OK && pl) {
        if (!plot_write_svg(pl, plot_path)) {
            fprintf(stderr, "sift bench-attn: cannot write the plot %s: %s\n", plot_path, strerror(errno));
            rc = 1;
        } else if (!json)
            fprintf(stderr, "sift bench-attn: plot written to %s\n", plot_path);
    }
    plot_free(pl);
    sift_context_destroy(ctx);
    return rc;
}

static void usage_run(FILE *f, const char *cmd)
{
    fprintf(f,
            "usage: sift %s -m MODEL.gguf [-p PROMPT] [-n N] [options]\n"
            "\n"
            "%s"
            "\n"
            "options:\n"
            "  -m, --model PATH   GGUF model (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K weights)\n"
            "  -p, --prompt TEXT  prompt (default: empty: generation starts from BOS)\n"
            "  -f, --file FILE    read the prompt from FILE (instead of -p; at most 256 MiB)\n"
            "  -n, --n-predict N  tokens to generate (default 128); generation stops early, with a\n"
            "                     message, when the context is full (unless --context-shift)\n"
            "  --context-shift    when the context is full, keep the first --keep tokens of the prompt,\n"
            "                     drop half of the others (the oldest), re-evaluate what is kept and\n"
            "                     go on generating (run only)\n"
            "  --keep N           tokens of the prompt a context shift keeps, BOS not counted (default\n"
            "                     0; -1: the whole prompt; run only)\n"
            "  --no-warmup        on a GPU backend, skip the warm-up steps (rewound) that let it compile\n"
            "                     its kernels before prefill is timed (run only)\n"
            "  --backend B        cpu, vulkan or cuda (default: cuda, else a Vulkan GPU, else cpu;\n                     `sift devices` shows the choice)\n"
            "  -t, --threads N    the CPU backend's threads (default: one per core)\n"
            "  --policy P         decode attention: dense, tokenselect, streaming, h2o, snapkv, quest,\n"
            "                     oracle or butler (default dense; see docs/policies.md); select =\n"
            "                     tokenselect\n"
            "  --budget k         tokens chosen per step by selection (default 2048)\n"
            "  --sink S           first tokens always attended (default 128)\n"
            "  --window W         last tokens always attended (default 512)\n"
            "                     (S, W, k are used by the selection policies only; where the defaults\n"
            "                     cover the whole context, those not given become ctx/64, ctx/16, ctx/4,\n"
            "                     with a warning)\n"
            "  --sel-cache T|off  TokenSelect's Selection Cache: reuse a layer's index set while the\n"
            "                     query's cosine to the one that chose it is >= T (default 0.9)\n"
            "  --extrapolate      length extrapolation: keys cached before RoPE, positions over the\n"
            "                     selected set (tokenselect or streaming; prefill runs token by token)\n"
            "  --sparse-prefill   prefill chunks attend the top-k chosen by the chunk's mean query\n"
            CLI_BUTLER_HELP
            "  -c, --ctx N        tokens per sequence, prompt included (default: the model's training\n"
            "                     context)\n"
            "  --kv f16|f32       KV cache type (default f16)\n"
            "  --page-size P      KV cache page in tokens, a power of two from 1 to 2^20 (default 256)\n"
            CLI_OFFLOAD_HELP
            "  --chunk N          prefill tokens per step (default 512)\n"
            "  --temp T           temperature; 0 is greedy (default 0.8 for run, 0 for logits)\n"
            "  --top-k K          sample from the K most likely tokens (default 40; 0: off)\n"
            "  --top-p P          sample from the smallest set of probability P (default 0.95; 1: off)\n"
            "  -s, --seed S       sampling seed (default 1; -1: a random seed, printed to stderr)\n"
            "%s",
            cmd,
            strcmp(cmd, "run") == 0
                ? "Streams the generated text to stdout; prints the KV cache size, prefill progress and the\n"
                  "prefill and decode speeds (tokens/s) to stderr. Generation stops at EOS or after N tokens.\n"
                : "Runs the prompt (BOS first) token by token, then N greedy steps, and prints one JSON line per\n"
                  "forward pass: {\"pos\", \"token\", \"argmax\", \"logits\": [...]}.\n",
            strcmp(cmd, "run") == 0 ? "  -cnv, --conversation  chat instead: sift chat with these arguments (-p is the system\n"
                                      "                     prompt; see sift chat --help)\n"
                                    : "");
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void show_progress(void *user, int64_t done, int64_t total)
{
    (void)user;
    if (total >= 2048) fprintf(stderr, "\rprefill: %lld / %lld tokens", (long long)done, (long long)total);
    if (total >= 2048 && done == total) fputc('\n', stderr);
}

/* "off" or a threshold in [-1, 1]. */
bool cli_parse_sel_cache(const char *val, float *out)
{
    if (!val) return false;
    if (!strcmp(val, "off")) {
        *out = SIFT_SEL_CACHE_OFF;
        return true;
    }
    char *end = NULL;
    const double x = strtod(val, &end);
    if (!end || *end || !(x >= -1.0 && x <= 1.0)) return false;
    *out = (float)x;
    return true;
}

/* The Selection Cache's hit rate per layer and overall, where it ran (under butler: the steps
 * whose lists the prediction interval reused). */
static void print_sel_cache(const sift_session *session, int n_layers, const char *who, bool butler)
{
    int64_t hits = 0, steps = 0;
    if (sift_session_sel_cache_stats(session, -1, &hits, &steps) != SIFT_OK || steps == 0) return;
    fprintf(stderr, "%s: %s %lld of %lld layer-steps (%.1f%%); per layer:", who,
            butler ? "lists reused (prediction interval)" : "Selection Cache hits", (long long)hits, (long long)steps,
            100.0 * (double)hits / (double)steps);
    for (int l = 0; l < n_layers; l++) {
        int64_t h = 0, n = 0;
        if (sift_session_sel_cache_stats(session, l, &h, &n) == SIFT_OK && n > 0)
            fprintf(stderr, " %.0f%%", 100.0 * (double)h / (double)n);
    }
    fputc('\n', stderr);
}

/* "dense, tokenselect (or select), streaming, ..." for messages. */
static void policy_choices(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int p = 0; p < SIFT_POLICY_COUNT && at < len; p++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s%s", p ? ", " : "", sift_policy_name((sift_policy)p),
                               p == SIFT_POLICY_TOKENSELECT ? " (or select)" : "");
}

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 12, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (n > CLI_MAX_FILE_BYTES) { /* the buffer ends one byte past the limit: too large, or endless */
            free(buf);
            buf = NULL;
            errno = EFBIG;
            break;
        }
        const size_t next = 2 * cap < CLI_MAX_FILE_BYTES + 1 ? 2 * cap : CLI_MAX_FILE_BYTES + 1;
        char *p = realloc(buf, next + 1);
        if (!p) {
            free(buf);
            buf = NULL;
            errno = ENOMEM;
            break;
        }
        buf = p;
        cap = next;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

const char *cli_read_error(int err)
{
    if (err != EFBIG) return strerror(err);
    static char msg[64];
    snprintf(msg, sizeof msg, "larger than the %zu MiB sift reads", CLI_MAX_FILE_BYTES >> 20);
    return msg;
}

/* A seed that differs from run to run (for --seed -1). */
static uint64_t random_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33; /* mix */
    return x & 0x7fffffffffffffffull;                     /* printable and accepted back by --seed */
}

/* --context-shift, as llama.cpp does it: the cache holds hist[0, *n) and is full. Keeps
 * hist[0, keep), drops the oldest half of the rest, rewinds the session to keep and evaluates
 * the remaining tail and next as one batch (its keys are rotated for their new positions by the
 * forward pass itself: docs/policies.md). *n becomes the tokens cached; logits are next's. */
static sift_status shift_context(sift_session *session, int32_t *hist, int64_t *n, int64_t keep, int32_t next,
                                 float *logits, int64_t *evaluated)
{
    const int64_t discard = (*n - keep) / 2, tail = *n - keep - discard;
    memmove(hist + keep, hist + keep + discard, (size_t)tail * sizeof *hist);
    hist[keep + tail] = next;
    sift_status s = sift_session_rewind(session, 0, keep);
    if (s != SIFT_OK) return s;
    *n = keep + tail + 1;
    *evaluated += tail + 1;
    return sift_session_eval(session, hist + keep, (size_t)(tail + 1), logits);
}

/* Before the timed prefill, as llama.cpp warms up: a GPU backend compiles a kernel the first time
 * a step needs it in a configuration (shapes that depend on the tokens in a step among them), so
 * that compile time would count as prefill (seconds on lavapipe) and decode. The warm-up runs
 * steps of the sizes the prompt's prefill will run (a chunk, and the last partial chunk) and one
 * decode step, then rewinds the session to empty; *tokens gets the tokens it evaluated. */
static sift_status warm_up(sift_session *session, const int32_t *ids, int64_t n_prompt, int64_t chunk, bool extrapolate,
                           int64_t n_ctx, int64_t *tokens)
{
    if (chunk <= 0) chunk = 512;
    /* extrapolation prefills token by token: a decode step's kernels are all it runs */
    const int64_t sizes[2] = {extrapolate ? 0 : n_prompt < chunk ? n_prompt : chunk,
                              extrapolate || n_prompt <= chunk ? 0 : n_prompt % chunk};
    sift_status s = SIFT_OK;
    for (int i = 0; i < 2 && s == SIFT_OK; i++) {
        if (sizes[i] < 2) continue; /* one token is a decode step: done below */
        if ((s = sift_session_rewind(session, 0, 0)) == SIFT_OK) s = sift_session_eval(session, ids, (size_t)sizes[i], NULL);
        *tokens += sizes[i];
    }
    if (s == SIFT_OK && n_prompt > 0 && sift_session_pos(session) < n_ctx) {
        s = sift_session_eval(session, ids, 1, NULL);
        *tokens += 1;
    }
    return s == SIFT_OK ? sift_session_rewind(session, 0, 0) : s;
}

static int run_model(int argc, char **argv, bool logits_mode)
{
    const char *cmd = logits_mode ? "logits" : "run";
    const char *model_path = NULL, *prompt_arg = NULL, *prompt_file = NULL, *backend = NULL;
    int64_t threads = 0; /* -t: the CPU backend's threads, 0: one per core */
    int64_t n_predict = 128, budget = 2048, sink = 128, window = 512, ctx_len = 0, chunk = 512, top_k = 40, seed = 1;
    bool sink_set = false, window_set = false, budget_set = false;
    double temp = logits_mode ? 0.0 : 0.8, top_p = 0.95;
    sift_policy policy = SIFT_POLICY_DENSE;
    sift_dtype kv = SIFT_F16;
    int64_t page_size = 256;
    float sel_cache = 0.9f;
    cli_offload offload = {0};
    bool extrapolate = false, sparse_prefill = false, context_shift = false, warmup = true;
    int64_t keep = 0; /* --keep: prompt tokens a context shift keeps besides BOS; -1: all */
    cli_butler butler = {.interval = 1};
    char who[32];
    snprintf(who, sizeof who, "sift %s", cmd);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = val != NULL;
        const char *need = NULL; /* what a valid value is, for the message */
        const int butler_opt = cli_parse_butler(who, argc, argv, &i, &butler);
        if (butler_opt < 0) return 2;
        if (butler_opt > 0) continue;
        const int offload_opt = cli_parse_offload(who, argc, argv, &i, &offload);
        if (offload_opt < 0) return 2;
        if (offload_opt > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_run(stdout, cmd);
            return 0;
        } else if (!strcmp(a, "--extrapolate") || !strcmp(a, "--sparse-prefill")) {
            if (!strcmp(a, "--extrapolate")) extrapolate = true;
            else sparse_prefill = true;
            continue;
        } else if (!strcmp(a, "--context-shift") && !logits_mode) {
            context_shift = true;
            continue;
        } else if (!strcmp(a, "--no-warmup") && !logits_mode) {
            warmup = false;
            continue;
        } else if (!strcmp(a, "--keep") && !logits_mode) {
            ok = cli_parse_i64(val, &keep) && keep >= -1, need = "a number of tokens >= 0, or -1 for the whole prompt";
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = val;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt_arg = val;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) prompt_file = val;
        else if (!strcmp(a, "--backend")) backend = val;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            ok = cli_parse_threads(val, &threads), need = "a thread count in 1 .. 4096";
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            ok = cli_parse_i64(val, &n_predict) && n_predict >= 0, need = "a whole number >= 0";
        else if (!strcmp(a, "--budget")) ok = cli_parse_i64(val, &budget), budget_set = true;
        else if (!strcmp(a, "--sink")) ok = cli_parse_i64(val, &sink), sink_set = true;
        else if (!strcmp(a, "--window")) ok = cli_parse_i64(val, &window), window_set = true;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
            ok = cli_parse_i64(val, &ctx_len) && ctx_len >= 0, need = "a number of tokens >= 1 (0: the model's)";
        else if (!strcmp(a, "--chunk")) ok = cli_parse_i64(val, &chunk);
        else if (!strcmp(a, "--top-k")) ok = cli_parse_i64(val, &top_k);
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed"))
            ok = cli_parse_i64(val, &seed) && seed >= -1, need = "a whole number >= 0, or -1 for a random seed";
        else if (!strcmp(a, "--temp") || !strcmp(a, "--top-p")) {
            char *end = NULL;
            double x = val ? strtod(val, &end) : 0.0;
            ok = val && end && !*end && x == x;
            if (ok && !strcmp(a, "--temp")) temp = x;
            else if (ok) top_p = x;
        } else if (!strcmp(a, "--policy")) {
            ok = val && (!strcmp(val, "select") ? (policy = SIFT_POLICY_TOKENSELECT, true) : sift_policy_parse(val, &policy) == SIFT_OK);
            if (!ok) {
                char choices[256];
                policy_choices(choices, sizeof choices);
                fprintf(stderr, "sift %s: --policy needs one of %s%s%s%s\n", cmd, choices, val ? "; not '" : "", val ? val : "",
                        val ? "'" : "");
                return 2;
            }
        } else if (!strcmp(a, "--sel-cache")) {
            ok = cli_parse_sel_cache(val, &sel_cache), need = "'off' or a threshold in [-1, 1]";
        } else if (!strcmp(a, "--page-size")) {
            ok = cli_parse_i64(val, &page_size) && page_size >= 1 && page_size <= (1 << 20) && (page_size & (page_size - 1)) == 0;
            need = "a power of two from 1 to 1048576 (tokens per KV page)";
        } else if (!strcmp(a, "--kv")) {
            ok = val && (!strcmp(val, "f16") || !strcmp(val, "f32")), need = "f16 or f32";
            if (ok) kv = !strcmp(val, "f16") ? SIFT_F16 : SIFT_F32;
        } else {
            fprintf(stderr, "sift %s: unknown option '%s' (see --help)\n", cmd, a);
            return 2;
        }
        if (!ok) {
            if (!val) fprintf(stderr, "sift %s: %s needs a value%s%s\n", cmd, a, need ? ": " : "", need ? need : "");
            else if (need) fprintf(stderr, "sift %s: %s needs %s, not '%s'\n", cmd, a, need, val);
            else fprintf(stderr, "sift %s: %s needs a valid value, not '%s'\n", cmd, a, val);
            return 2;
        }
        i++;
    }
    if (!model_path) {
        fprintf(stderr, "sift %s: no model given (-m MODEL.gguf; see --help)\n", cmd);
        return 2;
    }
    if (policy == SIFT_POLICY_BUTLER && !butler.predictor) {
        fprintf(stderr, "sift %s: the butler policy needs --predictor FILE (tools/butler/train.py makes one)\n", cmd);
        return 2;
    }
    if (prompt_arg && prompt_file) {
        fprintf(stderr, "sift %s: give the prompt with -p or -f, not both\n", cmd);
        return 2;
    }
    /* S, W, k matter to the selection policies only; dense ignores them (the engine's defaults) */
    if (policy != SIFT_POLICY_DENSE) {
        const struct { const char *flag; int64_t v; } swk[3] = {{"--sink", sink}, {"--window", window}, {"--budget", budget}};
        for (int i = 0; i < 3; i++) {
            if (swk[i].v < 0) {
                fprintf(stderr, "sift %s: %s needs a number of tokens >= 0, not %lld\n", cmd, swk[i].flag, (long long)swk[i].v);
                return 2;
            }
            /* a session takes at most 2^31 - 1 (sift_session_create); checked here so that S + W + k below
             * cannot overflow */
            if (swk[i].v > INT32_MAX) {
                fprintf(stderr, "sift %s: %s needs a number of tokens <= %d, not %lld\n", cmd, swk[i].flag, INT32_MAX,
                        (long long)swk[i].v);
                return 2;
            }
        }
    }
    char *prompt_buf = NULL;
    size_t plen = 0;
    if (prompt_file) {
        prompt_buf = cli_read_file(prompt_file, &plen);
        if (!prompt_buf) {
            fprintf(stderr, "sift %s: cannot read the prompt file %s: %s\n", cmd, prompt_file, cli_read_error(errno));
            return 1;
        }
        if (strlen(prompt_buf) != plen) {
            fprintf(stderr, "sift %s: the prompt file %s contains a NUL byte (not text)\n", cmd, prompt_file);
            free(prompt_buf);
            return 1;
        }
    }
    const char *prompt = prompt_buf ? prompt_buf : prompt_arg ? prompt_arg : "";
    if (!prompt_buf) plen = strlen(prompt);
    if (seed == -1) {
        seed = (int64_t)random_seed();
        fprintf(stderr, "sift %s: seed %lld (random; --seed %lld repeats this run)\n", cmd, (long long)seed, (long long)seed);
    }

    sift_context *ctx = NULL;
    sift_model *model = NULL;
    sift_session *session = NULL;
    sift_sampler *sampler = NULL;
    int32_t *ids = NULL, *hist = NULL; /* hist: --context-shift's copy of the tokens in the cache */
    float *logits = NULL;
    bool reported = false; /* the failure's message is printed already */
    sift_predictor *predictor = NULL;
    sift_status s = cli_open_backend(backend, threads, &ctx);
    if (s == SIFT_OK) s = cli_load_model(who, ctx, model_path, &model);
    if (s != SIFT_OK) goto done;
    if (cli_load_predictor(who, model, &butler, &predictor) != 0) {
        s = SIFT_E_INVALID;
        reported = true;
        goto done;
    }
    sift_model_info info;
    sift_model_get_info(model, &info);
    const int64_t n_ctx = ctx_len ? ctx_len : info.n_ctx_train;
    sift_session_config cfg = sift_session_config_default();
    if (policy != SIFT_POLICY_DENSE && n_ctx > 0) {
        /* selection never runs where S + W + k covers the whole context: scale what was not given */
        if (sink + window + budget >= n_ctx && !(sink_set && window_set && budget_set)) {
            const int64_t s0 = sink, w0 = window, k0 = budget;
            if (!sink_set) sink = n_ctx / 64;
            if (!window_set) window = n_ctx / 16;
            if (!budget_set) budget = n_ctx / 4;
            fprintf(stderr,
                    "sift %s: warning: S=%lld W=%lld k=%lld cover the whole context of %lld tokens, so %s would select "
                    "nothing; using S=%lld W=%lld k=%lld (set --sink, --window, --budget to choose)\n",
                    cmd, (long long)s0, (long long)w0, (long long)k0, (long long)n_ctx, sift_policy_name(policy), (long long)sink,
                    (long long)window, (long long)budget);
        }
        if (sink + window + budget >= n_ctx)
            fprintf(stderr,
                    "sift %s: warning: S + W + k = %lld >= the context of %lld tokens: %s selects nothing and every step "
                    "attends every token (lower --sink, --window or --budget, or raise -c/--ctx)\n",
                    cmd, (long long)(sink + window + budget), (long long)n_ctx, sift_policy_name(policy));
        cfg.sink = sink;
        cfg.window = window;
        cfg.budget = budget;
    }
    cfg.n_ctx = ctx_len;
    cfg.kv_type = kv;
    cfg.policy = policy;
    cfg.chunk = chunk;
    if (cli_offload_apply(who, &offload, model, &cfg) != 0) {
        s = SIFT_E_INVALID;
        reported = true;
        goto done;
    }
    cfg.page_size = page_size;
    cfg.sel_cache = sel_cache;
    cfg.extrapolate = extrapolate;
    cfg.sparse_prefill = sparse_prefill;
    cfg.progress = logits_mode ? NULL : show_progress;
    cfg.predictor = predictor;
    cfg.predict_interval = (int)butler.interval;
    cfg.neighbor_fetch = butler.neighbor_fetch;
    cfg.predictor_keys = cli_butler_keys(&butler);
    if ((s = sift_session_create(model, &cfg, &session)) != SIFT_OK) goto done;
    /* the prompt's tokens, and in logits mode the greedy ones after them: never more than fit */
    const size_t room = (size_t)(n_predict < n_ctx ? n_predict : n_ctx);
    const size_t max_ids = plen < SIZE_MAX / 8 ? sift_tokenizer_max_tokens(plen) : SIZE_MAX; /* what tokenize can give */
    ids = max_ids < SIZE_MAX / 8 - room ? malloc((max_ids + room) * sizeof *ids) : NULL;
    logits = malloc((size_t)info.n_vocab * sizeof *logits);
    if (!ids || !logits) {
        fprintf(stderr, "sift %s: out of host memory for a prompt of %zu bytes\n", cmd, plen);
        s = SIFT_E_NOMEM;
        reported = true;
        goto done;
    }
    size_t n_prompt = 0;
    if ((s = sift_model_tokenize(model, prompt, plen, info.bos >= 0, ids, max_ids, &n_prompt)) != SIFT_OK) goto done;
    if (n_prompt == 0) { /* no token to condition the first one on: there would be no logits to sample */
        fprintf(stderr, "sift %s: the prompt has no tokens (it is empty and the model's vocabulary has no BOS token to "
                        "start from); give a prompt with -p or -f\n", cmd);
        s = SIFT_E_INVALID;
        reported = true;
        goto done;
    }
    if ((int64_t)n_prompt > n_ctx) {
        fprintf(stderr, "sift %s: the prompt is %zu tokens, more than the context of %lld tokens; raise it with -c/--ctx\n", cmd,
                n_prompt, (long long)n_ctx);
        s = SIFT_E_LIMIT;
        reported = true;
        goto done;
    }
    /* the tokens a context shift keeps: BOS, then --keep of the prompt (llama.cpp's --keep) */
    const int64_t n_keep = keep < 0 || keep + (info.bos >= 0) > (int64_t)n_prompt ? (int64_t)n_prompt : keep + (info.bos >= 0);
    if (context_shift && n_keep > n_ctx - 2) {
        fprintf(stderr, "sift %s: --context-shift keeps %lld tokens, which leaves nothing to drop in a context of %lld tokens; "
                        "lower --keep or raise -c/--ctx\n", cmd, (long long)n_keep, (long long)n_ctx);
        s = SIFT_E_INVALID;
        reported = true;
        goto done;
    }
    if (context_shift) {
        if (!(hist = malloc((size_t)n_ctx * sizeof *hist))) {
            fprintf(stderr, "sift %s: out of host memory for the %lld tokens --context-shift keeps\n", cmd, (long long)n_ctx);
            s = SIFT_E_NOMEM;
            reported = true;
            goto done;
        }
        memcpy(hist, ids, n_prompt * sizeof *hist);
    }
    sift_sampler_config scfg = sift_sampler_config_default();
    scfg.temperature = (float)temp;
    scfg.top_k = (int)top_k;
    scfg.top_p = (float)top_p;
    scfg.seed = (uint64_t)seed;
    if ((s = sift_sampler_create(&scfg, &sampler)) != SIFT_OK) goto done;
    if (!logits_mode) {
        char swk[96] = "";
        if (policy != SIFT_POLICY_DENSE)
            snprintf(swk, sizeof swk, " (S=%lld W=%lld k=%lld)", (long long)sink, (long long)window, (long long)budget);
        fprintf(stderr, "sift run: %s on %s: %s, %d layers, %d/%d heads of %d; KV cache %.1f MB (%lld tokens, %s, pages of %lld); policy %s%s%s\n",
                model_path, sift_context_device_name(ctx), info.arch, info.n_layers, info.n_heads, info.n_kv_heads,
                info.head_dim, (double)sift_session_kv_bytes(session) / 1e6, (long long)n_ctx, sift_dtype_name(kv),
                (long long)page_size, sift_policy_name(policy), swk, extrapolate ? ", extrapolation" : "");
        if (predictor) {
            sift_predictor_info pi;
            sift_predictor_get_info(predictor, &pi);
            fprintf(stderr, "sift run: predictor %s: d' = %d, producers every %d layers, %.2f M parameters (%.2f%% of the "
                            "model); its keys take %.1f MB (%s)%s\n",
                    butler.predictor, pi.key_dim, pi.producer_stride, (double)pi.n_params / 1e6, 100.0 * pi.overhead,
                    (double)sift_session_predictor_key_bytes(session) / 1e6,
                    cli_butler_keys(&butler) == SIFT_I8 ? "int8 with a scale per token" : "f16",
                    policy == SIFT_POLICY_BUTLER ? "" : " (loaded, but the policy is not butler)");
        }
        cli_print_kv_pools(stderr, who, session);
    }
    double t0 = wall_s(), t_prefill = 0.0;
    size_t n_ids = n_prompt;
    bool full = false; /* stopped because the context is full */
    if (logits_mode) { /* one forward pass per token, as a token-by-token oracle records them */
        for (size_t i = 0; i < n_ids && s == SIFT_OK; i++) {
            if ((s = sift_session_eval(session, &ids[i], 1, logits)) != SIFT_OK) break;
            int32_t best = sift_sampler_sample(sampler, logits, info.n_vocab);
            printf("{\"pos\": %zu, \"token\": %d, \"argmax\": %d, \"logits\": [", i, ids[i], best);
            for (int v = 0; v < info.n_vocab; v++) { /* null for a logit that is not finite: JSON has no inf or nan */
                if (isfinite(logits[v])) printf("%s%.6g", v ? ", " : "", (double)logits[v]);
                else printf("%snull", v ? ", " : "");
            }
            printf("]}\n");
            if (i + 1 == n_ids && (int64_t)(n_ids - n_prompt) < n_predict) {
                if ((int64_t)n_ids >= n_ctx) full = true;
                else ids[n_ids++] = best;
            }
        }
        if (s == SIFT_OK && full)
            fprintf(stderr, "sift logits: context full (%lld tokens): stopped after %zu greedy steps of %lld; raise it with -c/--ctx\n",
                    (long long)n_ctx, n_ids - n_prompt, (long long)n_predict);
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++) { /* echo the prompt */
        char piece[256];
        size_t len = 0;
        if (sift_model_token_piece(model, ids[i], piece, sizeof piece, &len) == SIFT_OK) fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
    double t_setup = 0.0;
    int64_t warmup_tokens = 0;
    if (warmup && sift_context_backend(ctx) != SIFT_BACKEND_CPU) {
        s = warm_up(session, ids, (int64_t)n_prompt, chunk, extrapolate, n_ctx, &warmup_tokens);
        t_setup = wall_s() - t0;
        t0 = wall_s();
    }
    if (s == SIFT_OK) s = sift_session_eval(session, ids, n_prompt, logits);
    t_prefill = wall_s() - t0;
    const double t1 = wall_s();
    int64_t generated = 0, n_hist = (int64_t)n_prompt, shifts = 0, reevaluated = 0;
    while (s == SIFT_OK && generated < n_predict) {
        const int32_t next = sift_sampler_sample(sampler, logits, info.n_vocab);
        if (next == info.eos) break;
        char piece[256];
        size_t len = 0;
        if (sift_model_token_piece(model, next, piece, sizeof piece, &len) == SIFT_OK) fwrite(piece, 1, len, stdout);
        fflush(stdout);
        generated++;
        if (generated == n_predict) break;
        if (sift_session_pos(session) >= n_ctx) { /* no room for this token's K/V: the next step cannot run */
            if (!context_shift) {
                full = true;
                break;
            }
            s = shift_context(session, hist, &n_hist, n_keep, next, logits, &reevaluated);
            shifts++;
            continue;
        }
        s = sift_session_eval(session, &next, 1, logits);
        if (hist) hist[n_hist++] = next;
    }
    const double t_decode = wall_s() - t1;
    printf("\n");
    if (s == SIFT_OK) {
        if (full)
            fprintf(stderr, "sift run: context full: stopped after %lld generated tokens of %lld (the context holds %lld tokens, "
                            "%zu of them the prompt); raise it with -c/--ctx, or let --context-shift drop old tokens\n",
                    (long long)generated, (long long)n_predict, (long long)n_ctx, n_prompt);
        if (warmup_tokens)
            fprintf(stderr, "sift run: setup %.3f s (a warm-up of %lld tokens, rewound, so that the backend compiled its "
                            "kernels before prefill and decode were timed; --no-warmup skips it)\n", t_setup, (long long)warmup_tokens);
        fprintf(stderr, "sift run: prefill %zu tokens in %.3f s (%.1f tokens/s); decode %lld tokens in %.3f s (%.1f tokens/s); KV cache in use %.2f MB\n",
                n_prompt, t_prefill, t_prefill > 0 ? (double)n_prompt / t_prefill : 0.0, (long long)generated, t_decode,
                t_decode > 0 ? (double)(generated > 0 ? generated - 1 : 0) / t_decode : 0.0,
                (double)sift_session_kv_used_bytes(session) / 1e6);
        cli_print_kv_pools(stderr, who, session);

        if (shifts)
            fprintf(stderr, "sift run: context shifted %lld times (kept the first %lld tokens, re-evaluated %lld; their time is "
                            "in the decode time)\n", (long long)shifts, (long long)n_keep, (long long)reevaluated);
        print_sel_cache(session, info.n_layers, "sift run", policy == SIFT_POLICY_BUTLER);
    }
done:
    if (s != SIFT_OK && !reported) {
        const char *e = sift_last_error();
        fprintf(stderr, "sift %s: %s\n", cmd, e && *e ? e : sift_status_name(s));
    }
    free(prompt_buf);
    free(ids);
    free(hist);
    free(logits);
    sift_sampler_destroy(sampler);
    sift_session_destroy(session);
    sift_predictor_destroy(predictor);
    sift_model_destroy(model);
    sift_context_destroy(ctx);
    return s == SIFT_OK ? 0 : 1;
}

/* Steps bench-decode --profile runs with device timing after the timed ones; room for the profile's
 * rows (a decode step's (stage, op) pairs are a few dozen). */
enum { PROFILE_STEPS = 4, PROFILE_MAX_ROWS = 128 };

/* A profile row's name in the text table: the stage, and its op where that is not the stage's name
 * ("qkv: matmul", "attention: score", but "rope"). */
static const char *stage_label(const sift_stage_time *r, char *buf, size_t size)
{
    if (!strcmp(r->stage, r->op)) return r->stage;
    snprintf(buf, size, "%s: %s", r->stage, r->op);
    return buf;
}

/* A mode's profile (--profile): each stage's nodes, device time and bandwidth per profiled step,
 * then the summed device time beside the untimed steps' median wall time. */
static void print_profile(const sift_stage_time *rows, int n, int64_t steps, double wall_ms, bool json)
{
    double sum_us = 0.0;
    for (int i = 0; i < n; i++) sum_us += rows[i].us;
    const double per_step = steps > 0 ? 1.0 / (double)steps : NAN;
    if (json) {
        printf(", \"profile_steps\": %lld, \"profile_us_per_step\": ", (long long)steps);
        cli_json_fixed(sum_us * per_step, 3);
        printf(", \"profile\": [");
        for (int i = 0; i < n; i++) {
            printf("%s{\"stage\": ", i ? ", " : "");
            cli_json_string(rows[i].stage);
            printf(", \"op\": ");
            cli_json_string(rows[i].op);
            printf(", \"nodes_per_step\": ");
            cli_json_fixed((double)rows[i].nodes * per_step, 2);
            printf(", \"us_per_step\": ");
            cli_json_fixed(rows[i].us * per_step, 3);
            printf(", \"share\": ");
            cli_json_fixed(ratio(rows[i].us, sum_us), 4);
            printf(", \"gbps\": ");
            cli_json_fixed(ratio(rows[i].bytes, rows[i].us * 1e3), 1);
            printf("}");
        }
        printf("]");
        return;
    }
    char title[80];
    snprintf(title, sizeof title, "stages of %lld steps, timed node by node:", (long long)steps);
    printf("           %-40s %12s %11s %8s %9s\n", title, "nodes/step", "us/step", "share", "GB/s");
    for (int i = 0; i < n; i++) {
        char gbps[32] = "-", label[80];
        const double bw = ratio(rows[i].bytes, rows[i].us * 1e3);
        if (isfinite(bw)) snprintf(gbps, sizeof gbps, "%.1f", bw);
        printf("             %-38s %12.1f %11.1f %7.1f%% %9s\n", stage_label(&rows[i], label, sizeof label),
               (double)rows[i].nodes * per_step, rows[i].us * per_step, 100.0 * (sum_us > 0 ? rows[i].us / sum_us : 0.0),
               gbps);
    }
    const double device_us = sum_us * per_step, wall_us = wall_ms * 1e3;
    printf("             %-38s %12s %11.1f\n"
           "             %-38s %12s %11.1f  (%+.1f: the host's work, launches, gaps between kernels)\n",
           "device time, summed", "", device_us, "untimed step, wall clock (median)", "", wall_us, wall_us - device_us);
}

/* bench-decode's modes, in the order they run. */
static const char *const mode_names[4] = {"dense", "select", "cached", "butler"};

/* --attn LIST: a bit per mode named (0 when a name is no mode). */
static unsigned attn_modes(const char *list)
{
    unsigned bits = 0;
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        int mode = -1;
        for (int m = 0; m < 4; m++)
            if (strlen(mode_names[m]) == len && !strncmp(p, mode_names[m], len)) mode = m;
        if (mode < 0) return 0;
        bits |= 1u << mode;
        p += len;
        if (*p == ',') p++;
    }
    return bits;
}

/* Bytes per second of get_rows reading 2^18 f16 rows of E values from a table of `rows` rows, in
 * place from host memory (sift_tensor_create_host: across the host link, zero-copy) or from device
 * memory, the median of 5 runs: with E = 2048 every row of a 1 GiB table in order, the host link's
 * bandwidth; with E = 128 (one KV head's K or V row of D = 128) 2^18 rows scattered over a larger
 * table, ascending, as a selection's lists are: what a gather-then-copy of the selected rows would
 * reach in its copy (the rows it would then attend to on the device). */
static sift_status read_rate(sift_context *ctx, bool host, int64_t rows, int64_t E, bool scattered, double *bps)
{
    /* graphs of 2^15 rows: CUDA's get_rows takes at most 65535 ids */
    enum { READ = 1 << 18, PER_GRAPH = 1 << 15, GRAPHS = READ / PER_GRAPH, RUNS = 5, CHUNK = 1 << 20 };
    sift_tensor *tab = NULL, *ids[GRAPHS] = {NULL}, *out = NULL;
    sift_graph *g[GRAPHS] = {NULL};
    const int64_t tshape[2] = {rows, E}, oshape[2] = {PER_GRAPH, E}, n_ids = PER_GRAPH;
    int32_t *idv = malloc(PER_GRAPH * sizeof *idv);
    uint16_t *zeros = calloc(CHUNK, sizeof *zeros); /* written once, so that the table holds data */
    sift_status s = idv && zeros ? SIFT_OK : SIFT_E_NOMEM;
    if (s == SIFT_OK) s = (host ? sift_tensor_create_host : sift_tensor_create)(ctx, SIFT_F16, 2, tshape, &tab);
    if (s == SIFT_OK) s = sift_tensor_create(ctx, SIFT_F32, 2, oshape, &out);
    const size_t bytes = (size_t)rows * (size_t)E * 2;
    for (size_t o = 0; o < bytes && s == SIFT_OK; o += CHUNK * 2)
        s = sift_tensor_write(tab, o, zeros, bytes - o < CHUNK * 2 ? bytes - o : CHUNK * 2);
    uint64_t lcg = 0x9E3779B97F4A7C15u;
    for (int i = 0; i < GRAPHS && s == SIFT_OK; i++) {
        /* scattered: one id in each of PER_GRAPH equal runs of the table, at a random place in it */
        const int64_t run = rows / PER_GRAPH;
        for (int j = 0; j < PER_GRAPH; j++) {
            lcg = lcg * 6364136223846793005u + 1442695040888963407u;
            idv[j] = (int32_t)(scattered ? j * run + (int64_t)((lcg >> 33) % (uint64_t)run) : (int64_t)i * PER_GRAPH + j);
        }
        s = sift_tensor_create(ctx, SIFT_I32, 1, &n_ids, &ids[i]);
        if (s == SIFT_OK) s = sift_tensor_write(ids[i], 0, idv, PER_GRAPH * sizeof *idv);
        if (s == SIFT_OK) s = sift_graph_create(ctx, &g[i]);
        if (s == SIFT_OK) s = sift_op_get_rows(g[i], tab, ids[i], out);
    }
    double t[RUNS];
    for (int r = -1; r < RUNS && s == SIFT_OK; r++) { /* run -1: the warm-up */
        const double t0 = wall_s();
        for (int i = 0; i < GRAPHS && s == SIFT_OK; i++) s = sift_graph_compute(g[i]);
        if (r >= 0) t[r] = wall_s() - t0;
    }
    if (s == SIFT_OK) *bps = (double)READ * (double)E * 2 / median(t, RUNS);
    for (int i = 0; i < GRAPHS; i++) {
        sift_graph_destroy(g[i]);
        sift_tensor_destroy(ids[i]);
    }
    sift_tensor_destroy(tab);
    sift_tensor_destroy(out);
    free(idv);
    free(zeros);
    return s;
}

/* The host link as KV offload's kernels see it: in order (1 GiB of host memory, and the same read
 * of device memory) and scattered (selected rows of 256 bytes over 8 GiB of host memory). */
static sift_status link_bandwidth(sift_context *ctx, double *host_bps, double *device_bps, double *scattered_bps)
{
    sift_status s = read_rate(ctx, true, 1 << 18, 2048, false, host_bps);
    if (s == SIFT_OK) s = read_rate(ctx, false, 1 << 18, 2048, false, device_bps);
    if (s == SIFT_OK) s = read_rate(ctx, true, (int64_t)1 << 25, 128, true, scattered_bps);
    return s;
}

static int bench_decode(int argc, char **argv)
{
    const char *model_path = NULL, *backend = NULL, *ctx_list = "8192,32768,131072";
    int64_t threads = 0; /* -t: the CPU backend's threads, 0: one per core */
    int64_t steps = 16, budget = 2048, sink = 128, window = 512, batch = 1;
    float sel_cache = -1.0f;
    bool json = false, profile = false;
    cli_butler butler = {.interval = 1};
    cli_offload offload = {0};
    const char *attn_list = NULL; /* --attn: the modes to run (NULL: all that apply) */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = val != NULL, takes = true;
        const int butler_opt = cli_parse_butler("sift bench-decode", argc, argv, &i, &butler);
        if (butler_opt < 0) return 2;
        if (butler_opt > 0) continue;
        const int offload_opt = cli_parse_offload("sift bench-decode", argc, argv, &i, &offload);
        if (offload_opt < 0) return 2;
        if (offload_opt > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: sift bench-decode -m MODEL.gguf [options]\n"
                   "\n"
                   "Decode speed at long contexts, dense vs selected attention. The KV cache of each sequence\n"
                   "is first filled with N pseudo-random tokens (no prefill: the text generated is meaningless;\n"
                   "the work per step is that of a real step at context N); then STEPS decode steps are timed\n"
                   "one by one (wall clock, the step's submission and read-back of the logits included). Prints\n"
                   "the median step time and tokens/s (B tokens per step with --batch B).\n"
                   "\n"
                   "options:\n"
                   "  -m, --model PATH   GGUF model\n"
                   "  --ctx N[,N...]     contexts (default 8192,32768,131072)\n"
                   "  --steps S          timed steps per context and mode (default 16, after 2 warm-ups)\n"
                   "  --batch B          B sequences (1 .. 512, default 1), each at context N, decoded together:\n"
                   "                     one step gives a token to each (sift_session_decode_batch), so\n"
                   "                     tokens/s = B / the median step time\n"
                   "  --profile          after the timed steps of each mode, 4 more with device timing: a table\n"
                   "                     of the step's stages, longest first, each with its nodes, us and\n"
                   "                     share per step and GB/s (the bytes its nodes must move at least, over\n"
                   "                     their time), then the summed device time beside the untimed step's\n"
                   "                     wall time. A row is a stage and one op, named 'stage: op' (qkv: matmul,\n"
                   "                     o: matmul, gate_up: matmul, down: matmul, logits: matmul, attn_norm and\n"
                   "                     ffn_norm and final_norm: rmsnorm, embed: get_rows, residual: add,\n"
                   "                     predictor_keys and predictor: TokenButler's), or the op alone where the\n"
                   "                     stage is named after it (rope, kv_write, swiglu); 'attention: OP' rows\n"
                   "                     split the attention into its ops (score or score_max, vote, select,\n"
                   "                     gather_attend or dense_attend, ...). Timed steps run differently (CUDA\n"
                   "                     launches the kernels one by one between events instead of one CUDA\n"
                   "                     graph), so the difference is an estimate of the host's work and the\n"
                   "                     launches\n"
                   "  --backend B        cpu, vulkan or cuda (default: cuda, else a Vulkan GPU, else cpu;\n"
                   "                     `sift devices` shows the choice)\n"
                   "  -t, --threads N    the CPU backend's threads (default: one per core)\n"
                   "  --budget k --sink S --window W   selection (defaults 2048, 128, 512)\n"
                   "  --sel-cache T      the third mode: TokenSelect with the Selection Cache at threshold T\n"
                   "                     (default -1: every step after the first reuses, the cache's best case\n"
                   "                     on random data; 'off' leaves the mode out)\n"
                   CLI_BUTLER_HELP
                   "                     (with --predictor, a last mode times the butler policy)\n");
            printf("  --attn LIST        the modes to time, of dense, select, cached, butler (default: all\n"
                   "                     that apply)\n"
                   CLI_OFFLOAD_HELP
                   "                     (with --kv-offload every mode runs offloaded, each row of the table\n"
                   "                     is followed by the pools' sizes, and the host link's bandwidth comes\n"
                   "                     first: the device reading 1 GiB of host memory in place by get_rows,\n"
                   "                     beside the same read of device memory)\n"
                   "  --json             one JSON object per context and mode, one a line: ctx, attn (dense,\n"
                   "                     select, cached, butler), batch, ms_per_step, tokens_per_s, ms_per_token\n"
                   "                     (1000 / tokens_per_s), kv_gb, sel_cache_hit_rate, warm_hits and\n"
                   "                     warm_misses (the top-k's warm start, every step so far),\n"
                   "                     steps_run_ahead (steps that ran the graph built for them while the\n"
                   "                     step before ran; SIFT_STEP_AHEAD=0 builds each on the path) and, per\n"
                   "                     timed step, ahead_submit_us, ahead_build_us (the next step's graph,\n"
                   "                     while this one runs) and ahead_wait_us (for the device), kv_device_bytes,\n"
                   "                     kv_host_bytes, pages_moved (host figures 0 without offload; with\n"
                   "                     --kv-offload a first line: host_link_gbps, device_read_gbps,\n"
                   "                     host_scattered_gbps, kv_offload, v_only); with --profile also\n"
                   "                     profile_steps, profile_us_per_step and profile: [{stage, op,\n"
                   "                     nodes_per_step, us_per_step, share, gbps}], a row per stage and op as\n"
                   "                     in the table (null where a figure does not exist)\n");
            return 0;
        } else if (!strcmp(a, "--json")) json = true, takes = false, ok = true;
        else if (!strcmp(a, "--profile")) profile = true, takes = false, ok = true;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = val;
        else if (!strcmp(a, "--backend")) backend = val;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_parse_threads(val, &threads);
        else if (!strcmp(a, "--ctx")) ctx_list = val;
        else if (!strcmp(a, "--steps")) ok = cli_parse_i64(val, &steps) && steps >= 1 && steps <= 10000;
        else if (!strcmp(a, "--batch")) ok = cli_parse_i64(val, &batch) && batch >= 1 && batch <= 512;
        else if (!strcmp(a, "--budget")) ok = cli_parse_i64(val, &budget);
        else if (!strcmp(a, "--sink")) ok = cli_parse_i64(val, &sink);
        else if (!strcmp(a, "--window")) ok = cli_parse_i64(val, &window);
        else if (!strcmp(a, "--sel-cache")) ok = cli_parse_sel_cache(val, &sel_cache);
        else if (!strcmp(a, "--attn")) ok = (attn_list = val) != NULL && attn_modes(val) != 0;
        else {
            fprintf(stderr, "sift bench-decode: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "sift bench-decode: %s needs a valid value%s%s%s\n", a, val && takes ? ", not '" : "",
                    val && takes ? val : "", val && takes ? "'" : "");
            return 2;
        }
        if (takes) i++;
    }
    if (!model_path) {
        fprintf(stderr, "sift bench-decode: no model given (-m MODEL.gguf)\n");
        return 2;
    }
    int64_t ctxs[CLI_MAX_CTXS];
    int n_ctxs = 0;
    if (!parse_ctx_list("sift bench-decode", ctx_list, ctxs, &n_ctxs)) return 2; /* before the model loads */
    sift_context *ctx = NULL;
    sift_model *model = NULL;
    sift_status s = cli_open_backend(backend, threads, &ctx);
    if (s == SIFT_OK) {
        if (!json) fprintf(stderr, "sift bench-decode: loading %s on %s...\n", model_path, sift_context_device_name(ctx));
        if (!json) note_vulkan_clocks("sift bench-decode", ctx);
        s = sift_model_load(ctx, model_path, &model);
    }
    if (s != SIFT_OK) {
        fprintf(stderr, "sift bench-decode: %s\n", sift_last_error());
        sift_context_destroy(ctx);
        return 1;
    }
    sift_predictor *predictor = NULL;
    if (cli_load_predictor("sift bench-decode", model, &butler, &predictor) != 0) {
        sift_model_destroy(model);
        sift_context_destroy(ctx);
        return 1;
    }
    sift_model_info info;
    sift_model_get_info(model, &info);
    const int n_seq = (int)batch;
    float *logits = malloc((size_t)n_seq * (size_t)info.n_vocab * sizeof *logits);
    double *times = malloc((size_t)steps * sizeof *times);
    int *seqs = malloc((size_t)n_seq * sizeof *seqs);
    int32_t *toks = malloc((size_t)n_seq * sizeof *toks);
    sift_stage_time *prof = malloc(PROFILE_MAX_ROWS * sizeof *prof);
    bool reported = false; /* the failure's message is printed already */
    if (!logits || !times || !seqs || !toks || !prof) {
        fprintf(stderr, "sift bench-decode: out of host memory\n");
        s = SIFT_E_NOMEM;
        reported = true;
    }
    if (s == SIFT_OK && !json) {
        printf("sift bench-decode  %s  on %s\n%s, %d layers, %d/%d heads of %d, weights %.2f GB; S=%lld W=%lld k=%lld; ",
               model_path, sift_context_device_name(ctx), info.arch, info.n_layers, info.n_heads, info.n_kv_heads,
               info.head_dim, (double)info.weight_bytes / 1e9, (long long)sink, (long long)window, (long long)budget);
        if (batch > 1) printf("batch %lld (tokens/s = %lld / step time); ", (long long)batch, (long long)batch);
        printf("median of %lld steps\n", (long long)steps);
    }
    if (s == SIFT_OK && offload.size) { /* the host link beside the figures */
        const bool host_is_device = sift_context_backend(ctx) == SIFT_BACKEND_CPU || sift_context_is_emulated(ctx);
        double host_bps = NAN, device_bps = NAN, scattered_bps = NAN;
        if (!host_is_device && link_bandwidth(ctx, &host_bps, &device_bps, &scattered_bps) != SIFT_OK) /* the decode figures still come */
            fprintf(stderr, "sift bench-decode: the host link was not measured: %s\n", sift_last_error());
        if (json) {
            printf("{\"host_link_gbps\": ");
            cli_json_fixed(host_bps / 1e9, 2);
            printf(", \"device_read_gbps\": ");
            cli_json_fixed(device_bps / 1e9, 2);
            printf(", \"host_scattered_gbps\": ");
            cli_json_fixed(scattered_bps / 1e9, 2);
            printf(", \"kv_offload\": ");
            cli_json_string(offload.size);
            printf(", \"v_only\": %s}\n", offload.v_only ? "true" : "false");
        } else if (host_is_device) {
            printf("KV offload %s%s: host link not measured (this device's memory is the host's)\n", offload.size,
                   offload.v_only ? " (V only)" : "");
        } else {
            printf("KV offload %s%s; host link: %.1f GB/s (get_rows reading 1 GiB of host memory in place; of device "
                   "memory: %.1f GB/s); rows of 256 bytes scattered over 8 GiB of host memory: %.1f GB/s\n",
                   offload.size, offload.v_only ? " (V only)" : "", host_bps / 1e9, device_bps / 1e9, scattered_bps / 1e9);
        }
    }
    if (s == SIFT_OK && !json)
        printf("\n%10s %-7s %12s %10s %12s\n", "context", "attn", "ms/step", "tokens/s", "KV GB");
    for (int c = 0; c < n_ctxs && s == SIFT_OK; c++) {
        const int64_t n_ctx = ctxs[c];
        for (int mode = 0; mode < 4 && s == SIFT_OK; mode++) {
            if ((mode == 2 && sel_cache > 1.0f) || (mode == 3 && !predictor)) continue;
            if (attn_list && !(attn_modes(attn_list) & (1u << mode))) continue;
            sift_session_config cfg = sift_session_config_default();
            /* room for the warm-ups, the timed and the profiled steps */
            cfg.n_ctx = n_ctx + steps + 4 + (profile ? PROFILE_STEPS : 0);
            cfg.n_seq = n_seq;
            cfg.policy = mode == 3 ? SIFT_POLICY_BUTLER : mode ? SIFT_POLICY_TOKENSELECT : SIFT_POLICY_DENSE;
            cfg.predictor = mode == 3 ? predictor : NULL;
            cfg.predict_interval = (int)butler.interval;
            cfg.neighbor_fetch = butler.neighbor_fetch;
            cfg.predictor_keys = cli_butler_keys(&butler);
            cfg.sink = sink;
            cfg.window = window;
            cfg.budget = budget;
            cfg.sel_cache = mode == 2 ? sel_cache : SIFT_SEL_CACHE_OFF;
            sift_session *ss = NULL;
            if (cli_offload_apply("sift bench-decode", &offload, model, &cfg) != 0) {
                s = SIFT_E_INVALID;
                reported = true;
                break;
            }
            s = sift_session_create(model, &cfg, &ss);
            for (int q = 0; q < n_seq && s == SIFT_OK; q++) {
                s = sift_session_fill_synthetic_seq(ss, q, n_ctx, 7 + (uint64_t)q);
                seqs[q] = q;
                toks[q] = (int32_t)(((info.bos >= 0 ? info.bos : 0) + q) % info.n_vocab);
            }
            sift_ahead_times ahead0 = {0}, ahead1 = {0};
            for (int64_t i = 0; s == SIFT_OK && i < steps + 2; i++) {
                if (i == 2) sift_session_ahead_times(ss, &ahead0);
                const double t0 = wall_s();
                s = sift_session_decode_batch(ss, n_seq, seqs, toks, logits);
                if (i >= 2) times[i - 2] = wall_s() - t0;
                for (int q = 0; q < n_seq; q++) toks[q] = (int32_t)((toks[q] + 7919) % info.n_vocab);
            }
            sift_session_ahead_times(ss, &ahead1);
            const double ahead_steps = ahead1.steps > ahead0.steps ? (double)(ahead1.steps - ahead0.steps) : 1.0;
            double med = 0.0;
            int64_t hits = 0, n_steps = 0, warm_hits = 0, warm_misses = 0;
            if (s == SIFT_OK) {
                med = median(times, (int)steps);
                s = sift_session_sel_cache_stats(ss, -1, &hits, &n_steps);
            }
            if (s == SIFT_OK) s = sift_session_select_warm_stats(ss, -1, &warm_hits, &warm_misses);
            int n_prof = 0;
            int64_t prof_steps = 0;
            if (s == SIFT_OK && profile) { /* after the timed steps, so that timing costs them nothing */
                s = sift_session_set_profiling(ss, 1);
                for (int i = 0; s == SIFT_OK && i < PROFILE_STEPS; i++) {
                    s = sift_session_decode_batch(ss, n_seq, seqs, toks, logits);
                    for (int q = 0; q < n_seq; q++) toks[q] = (int32_t)((toks[q] + 7919) % info.n_vocab);
                }
                if (s == SIFT_OK) s = sift_session_set_profiling(ss, 0);
                if (s == SIFT_OK) s = sift_session_profile_stages(ss, prof, PROFILE_MAX_ROWS, &n_prof, &prof_steps);
                if (n_prof > PROFILE_MAX_ROWS) n_prof = PROFILE_MAX_ROWS;
            }
            sift_kv_pool_info pools = {0};
            if (s == SIFT_OK) s = sift_session_kv_pools(ss, &pools);
            if (s == SIFT_OK) {
                const double kv_gb = (double)sift_session_kv_bytes(ss) / 1e9;
                const double hit_rate = n_steps ? (double)hits / (double)n_steps : 0.0;
                const double tokens_per_s = (double)n_seq / med;
                if (json) {
                    printf("{\"model\": ");
                    cli_json_string(model_path);
                    printf(", \"device\": ");
                    cli_json_string(sift_context_device_name(ctx));
                    printf(", \"ctx\": %lld, \"attn\": \"%s\", \"batch\": %d, \"ms_per_step\": ", (long long)n_ctx,
                           mode_names[mode], n_seq);
                    cli_json_fixed(med * 1e3, 3);
                    printf(", \"tokens_per_s\": ");
                    cli_json_fixed(tokens_per_s, 2);
                    printf(", \"ms_per_token\": ");
                    cli_json_fixed(1e3 / tokens_per_s, 3);
                    printf(", \"kv_gb\": %.3f, \"sel_cache_hit_rate\": %.3f", kv_gb, hit_rate);
                    printf(", \"warm_hits\": %lld, \"warm_misses\": %lld", (long long)warm_hits, (long long)warm_misses);
                    printf(", \"steps_run_ahead\": %lld, \"ahead_submit_us\": %.1f, \"ahead_build_us\": %.1f, "
                           "\"ahead_wait_us\": %.1f",
                           (long long)sift_session_steps_run_ahead(ss), (ahead1.submit_us - ahead0.submit_us) / ahead_steps,
                           (ahead1.build_us - ahead0.build_us) / ahead_steps, (ahead1.wait_us - ahead0.wait_us) / ahead_steps);
                    printf(", \"kv_device_bytes\": %llu, \"kv_host_bytes\": %llu, \"pages_moved\": %lld",
                           (unsigned long long)pools.device_bytes, (unsigned long long)pools.host_bytes,
                           (long long)pools.pages_moved);
                    if (profile) print_profile(prof, n_prof, prof_steps, med * 1e3, true);
                    printf("}\n");
                } else {
                    printf("%10lld %-7s %12.3f %10.2f %12.2f%s\n", (long long)n_ctx, mode_names[mode], med * 1e3, tokens_per_s,
                           kv_gb, mode == 2 ? (hit_rate == 1.0 ? "  (every step reused)" : hit_rate > 0 ? "  (some steps reused)" : "  (no step reused)")
                                  : mode == 3 ? "  (+ predictor keys)" : "");
                    if (pools.host_pages > 0) {
                        printf("%10s %-7s ", "", "");
                        print_pools(stdout, &pools);
                    }
                    if (profile) print_profile(prof, n_prof, prof_steps, med * 1e3, false);
                }
                fflush(stdout);
            }
            sift_session_destroy(ss);
        }
    }
    if (s != SIFT_OK && !reported) fprintf(stderr, "sift bench-decode: %s\n", sift_last_error());
    free(logits);
    free(times);
    free(seqs);
    free(toks);
    free(prof);
    sift_predictor_destroy(predictor);
    sift_model_destroy(model);
    sift_context_destroy(ctx);
    return s == SIFT_OK ? 0 : 1;
}

static const char *device_type_name(sift_device_type t)
{
    switch (t) {
    case SIFT_DEVICE_CPU: return "cpu";
    case SIFT_DEVICE_DISCRETE_GPU: return "discrete gpu";
    case SIFT_DEVICE_INTEGRATED_GPU: return "integrated gpu";
    case SIFT_DEVICE_VIRTUAL_GPU: return "virtual gpu";
    case SIFT_DEVICE_EMULATED: return "cpu emulation";
    default: return "other";
    }
}

/* Each backend's devices (sift_device_count, sift_device_get_info), the one a context opens by
 * default and whether that one opens (or why not), and the automatic choice with its reason;
 * --json: the same as one JSON object. */
static int devices(int argc, char **argv)
{
    const bool json = argc > 0 && !strcmp(argv[0], "--json");
    if (argc > (json ? 1 : 0)) {
        fprintf(stderr, "usage: sift devices [--json]\n");
        return 2;
    }
    char device[SIFT_BACKEND_COUNT][256], reason[SIFT_BACKEND_COUNT][512];
    bool available[SIFT_BACKEND_COUNT], emulated[SIFT_BACKEND_COUNT];
    int n_dev[SIFT_BACKEND_COUNT];
    int choice = SIFT_BACKEND_CPU;
    for (int b = SIFT_BACKEND_COUNT - 1; b >= 0; b--) { /* CUDA first, then Vulkan, then the CPU */
        if (sift_device_count((sift_backend_kind)b, &n_dev[b]) != SIFT_OK) n_dev[b] = 0;
        sift_context *ctx = NULL;
        available[b] = sift_context_create((sift_backend_kind)b, &ctx) == SIFT_OK;
        emulated[b] = available[b] && sift_context_is_emulated(ctx);
        snprintf(device[b], sizeof device[b], "%s", available[b] ? sift_context_device_name(ctx) : "");
        snprintf(reason[b], sizeof reason[b], "%s", available[b] ? "" : sift_last_error());
        sift_context_destroy(ctx);
    }
    /* the choice is cli_open_backend's; the reason follows from what was found */
    sift_context *chosen = NULL;
    if (cli_open_backend(NULL, 0, &chosen) == SIFT_OK) choice = (int)sift_context_backend(chosen);
    sift_context_destroy(chosen);
    const char *why = choice == SIFT_BACKEND_CUDA     ? "a CUDA device is present"
                      : choice == SIFT_BACKEND_VULKAN ? "a Vulkan GPU is present and CUDA is not"
                      : emulated[SIFT_BACKEND_VULKAN] ? "the only Vulkan device is a CPU emulation, slower than the CPU backend"
                                                      : "no GPU backend has a usable device";
    if (json) {
        printf("{\"backends\": [");
        for (int b = 0; b < SIFT_BACKEND_COUNT; b++) {
            printf("%s{\"backend\": \"%s\", \"available\": %s, ", b ? ", " : "", sift_backend_kind_name((sift_backend_kind)b),
                   available[b] ? "true" : "false");
            if (available[b]) {
                printf("\"device\": ");
                cli_json_string(device[b]);
                printf(", \"emulated\": %s, ", emulated[b] ? "true" : "false");
            } else {
                printf("\"reason\": ");
                cli_json_string(reason[b]);
                printf(", ");
            }
            printf("\"devices\": [");
            for (int i = 0; i < n_dev[b]; i++) {
                sift_device_info info;
                if (sift_device_get_info((sift_backend_kind)b, i, &info) != SIFT_OK) continue;
                printf("%s{\"index\": %d, \"name\": ", i ? ", " : "", i);
                cli_json_string(info.name);
                printf(", \"type\": \"%s\", \"default\": %s, \"memory_bytes\": %llu}", device_type_name(info.type),
                       info.is_default ? "true" : "false", (unsigned long long)info.memory_bytes);
            }
            printf("]}");
        }
        printf("], \"choice\": \"%s\", \"why\": ", sift_backend_kind_name((sift_backend_kind)choice));
        cli_json_string(why);
        printf("}\n");
        return 0;
    }
    for (int b = 0; b < SIFT_BACKEND_COUNT; b++) {
        const char *name = sift_backend_kind_name((sift_backend_kind)b);
        if (available[b]) printf("%-7s %s%s\n", name, device[b], emulated[b] ? "  (a CPU emulation)" : "");
        else printf("%-7s unavailable: %s\n", name, reason[b]);
        for (int i = 0; i < n_dev[b]; i++) {
            sift_device_info info;
            if (sift_device_get_info((sift_backend_kind)b, i, &info) != SIFT_OK) continue;
            printf("        device %d: %s (%s, %.1f GiB)%s\n", i, info.name, device_type_name(info.type),
                   (double)info.memory_bytes / (1024.0 * 1024.0 * 1024.0), info.is_default ? "  default" : "");
        }
    }
    printf("automatic choice: %s (%s)\n", sift_backend_kind_name((sift_backend_kind)choice), why);
    return 0;
}

/* sift tokenize -m MODEL -f FILE [--no-bos]: the ids of the file's text on one line. */
static int tokenize_file(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    int add_bos = 1, parse_special = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: sift tokenize -m MODEL.gguf -f TEXT [--no-bos] [--special]\n"
                 "prints the token ids of TEXT (BOS first unless --no-bos), space-separated, on one line;\n"
                 "--special: control tokens written in TEXT (<|eot_id|>, <s>) are their ids, not text");
            return 0;
        }
        if (!strcmp(a, "--no-bos")) { add_bos = 0; continue; }
        if (!strcmp(a, "--special")) { parse_special = 1; continue; }
        if ((!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-f") || !strcmp(a, "--file")) && val) {
            if (a[1] == 'm' || a[2] == 'm') model = val;
            else file = val;
            i++;
            continue;
        }
        fprintf(stderr, "sift tokenize: unknown or incomplete option '%s' (see --help)\n", a);
        return 2;
    }
    if (!model || !file) {
        fprintf(stderr, "sift tokenize: needs -m MODEL and -f FILE\n");
        return 2;
    }
    size_t len = 0;
    char *text = cli_read_file(file, &len);
    if (!text) {
        fprintf(stderr, "sift tokenize: cannot read '%s': %s\n", file, cli_read_error(errno));
        return 1;
    }
    sift_context *ctx;
    sift_model *m;
    if (cli_open_model("sift tokenize", "cpu", 1, model, &ctx, &m) != 0) {
        free(text);
        return 1;
    }
    const size_t cap = 4 * len + 8; /* a byte may become several tokens (a space without a "▁" piece: three) */
    int32_t *ids = malloc(cap * sizeof *ids);
    size_t n = 0;
    const sift_status st = ids ? sift_model_tokenize_special(m, text, len, add_bos, parse_special, ids, cap, &n) : SIFT_E_NOMEM;
    if (st != SIFT_OK) fprintf(stderr, "sift tokenize: %s\n", sift_last_error());
    for (size_t i = 0; st == SIFT_OK && i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    if (st == SIFT_OK) printf("\n");
    free(ids);
    free(text);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    return st == SIFT_OK ? 0 : 1;
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
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("sift %s\n", sift_version());
        return 0;
    }
    if (!strcmp(cmd, "bench-attn")) return bench_attn(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat")) return cli_chat(argc - 2, argv + 2);
    for (int i = 2; !strcmp(cmd, "run") && i < argc; i++) /* llama.cpp's conversation mode */
        if (!strcmp(argv[i], "-cnv") || !strcmp(argv[i], "--conversation")) return cli_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "run")) return run_model(argc - 2, argv + 2, false);
    if (!strcmp(cmd, "bench-decode")) return bench_decode(argc - 2, argv + 2);
    if (!strcmp(cmd, "logits")) return run_model(argc - 2, argv + 2, true);
    if (!strcmp(cmd, "devices")) return devices(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return cli_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "demo")) return cli_demo(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return tokenize_file(argc - 2, argv + 2);
    fprintf(stderr, "sift: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
