/* `sift bench-decode`: a model's decode steps timed at long contexts, dense vs selected attention. */
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
            cli_json_fixed(cli_ratio(rows[i].us, sum_us), 4);
            printf(", \"gbps\": ");
            cli_json_fixed(cli_ratio(rows[i].bytes, rows[i].us * 1e3), 1);
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
        const double bw = cli_ratio(rows[i].bytes, rows[i].us * 1e3);
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
        const double t0 = cli_wall_s();
        for (int i = 0; i < GRAPHS && s == SIFT_OK; i++) s = sift_graph_compute(g[i]);
        if (r >= 0) t[r] = cli_wall_s() - t0;
    }
    if (s == SIFT_OK) *bps = (double)READ * (double)E * 2 / cli_median(t, RUNS);
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

static const cli_command bench_decode_command = {
    "bench-decode", CLI_BENCH_DECODE, "-m MODEL.gguf [options]",
    "Decode speed at long contexts, dense vs selected attention. The KV cache of each sequence\n"
    "is first filled with N pseudo-random tokens (no prefill: the text generated is meaningless;\n"
    "the work per step is that of a real step at context N); then STEPS decode steps are timed\n"
    "one by one (wall clock, the step's submission and read-back of the logits included). Prints\n"
    "the median step time and tokens/s (B tokens per step with --batch B).\n",
    NULL};

/* What every context and mode's run shares. */
/* A step's host times when running ahead (sift_ahead_times), as the JSON names them: its submit,
 * the next step's build while it runs (of it, the engine's graph and the backend's plan and
 * recording), and the wait for the device. */
enum { AHEAD_PARTS = 5 };
static const char *const ahead_names[AHEAD_PARTS] = {"ahead_submit_us", "ahead_build_us", "ahead_wait_us",
                                                     "ahead_graph_us", "ahead_prepare_us"};
static void ahead_parts(const sift_ahead_times *t, double v[AHEAD_PARTS])
{
    const double parts[AHEAD_PARTS] = {t->submit_us, t->build_us, t->wait_us, t->graph_us, t->prepare_us};
    memcpy(v, parts, sizeof parts);
}

typedef struct decode_bench {
    const cli_params *p;
    sift_context *ctx;
    sift_model *model;
    sift_predictor *predictor;
    sift_model_info info;
    int n_seq;
    float *logits;
    double *times;
    double *ahead_us; /* [AHEAD_PARTS][steps]: each part of each timed step that ran ahead */
    int *seqs;
    int32_t *toks;
    sift_stage_time *prof;
} decode_bench;

/* The host link beside the figures, with --kv-offload: a line (or a JSON object) first. */
static void print_link(const decode_bench *b)
{
    const cli_params *p = b->p;
    const bool v_only = p->session.kv_offload_v_only;
    const bool host_is_device = sift_context_backend(b->ctx) == SIFT_BACKEND_CPU || sift_context_is_emulated(b->ctx);
    double host_bps = NAN, device_bps = NAN, scattered_bps = NAN;
    if (!host_is_device && link_bandwidth(b->ctx, &host_bps, &device_bps, &scattered_bps) != SIFT_OK) /* the decode figures still come */
        fprintf(stderr, "sift bench-decode: the host link was not measured: %s\n", sift_last_error());
    if (p->json) {
        printf("{\"host_link_gbps\": ");
        cli_json_fixed(host_bps / 1e9, 2);
        printf(", \"device_read_gbps\": ");
        cli_json_fixed(device_bps / 1e9, 2);
        printf(", \"host_scattered_gbps\": ");
        cli_json_fixed(scattered_bps / 1e9, 2);
        printf(", \"kv_offload\": ");
        cli_json_string(p->offload);
        printf(", \"v_only\": %s}\n", v_only ? "true" : "false");
    } else if (host_is_device) {
        printf("KV offload %s%s: host link not measured (this device's memory is the host's)\n", p->offload,
               v_only ? " (V only)" : "");
    } else {
        printf("KV offload %s%s; host link: %.1f GB/s (get_rows reading 1 GiB of host memory in place; of device "
               "memory: %.1f GB/s); rows of 256 bytes scattered over 8 GiB of host memory: %.1f GB/s\n",
               p->offload, v_only ? " (V only)" : "", host_bps / 1e9, device_bps / 1e9, scattered_bps / 1e9);
    }
}

/* A mode's figures at one context. */
typedef struct mode_result {
    double med;                                   /* the median step, seconds */
    double first;                                 /* the first step after the fill (a warm-up), seconds */
    int64_t hits, n_steps, warm_hits, warm_misses; /* the Selection Cache's, the top-k warm start's */
    /* each part (ahead_names) of the timed steps that ran ahead, µs, median over those steps (a
     * one-off, such as a new recording, moves a mean by milliseconds in a run of few steps, and
     * not the median, which is what ms_per_step is too) */
    double ahead[AHEAD_PARTS];
    int n_prof;
    int64_t prof_steps;
    sift_kv_pool_info pools;
    sift_kv_move_times moves; /* the page moves of the session, filling included */
} mode_result;

/* The next tokens of the batch: arbitrary, different from step to step. */
static void next_tokens(decode_bench *b)
{
    for (int q = 0; q < b->n_seq; q++) b->toks[q] = (int32_t)((b->toks[q] + 7919) % b->info.n_vocab);
}

/* Times the steps of a session filled to n_ctx (2 warm-ups, then --steps), then profiles more with
 * --profile. */
static sift_status time_steps(decode_bench *b, sift_session *ss, mode_result *r)
{
    const cli_params *p = b->p;
    sift_status s = SIFT_OK;
    int n_ahead = 0;
    for (int64_t i = 0; s == SIFT_OK && i < p->steps + 2; i++) {
        sift_ahead_times before, after;
        sift_session_ahead_times(ss, &before);
        const double t0 = cli_wall_s();
        s = sift_session_decode_batch(ss, b->n_seq, b->seqs, b->toks, b->logits);
        if (i == 0) r->first = cli_wall_s() - t0;
        if (i >= 2) b->times[i - 2] = cli_wall_s() - t0;
        sift_session_ahead_times(ss, &after);
        if (i >= 2 && after.steps > before.steps) {
            double v0[AHEAD_PARTS], v1[AHEAD_PARTS];
            ahead_parts(&before, v0);
            ahead_parts(&after, v1);
            for (int k = 0; k < AHEAD_PARTS; k++) b->ahead_us[k * p->steps + n_ahead] = v1[k] - v0[k];
            n_ahead++;
        }
        next_tokens(b);
    }
    for (int k = 0; k < AHEAD_PARTS; k++) r->ahead[k] = n_ahead ? cli_median(b->ahead_us + k * p->steps, n_ahead) : 0.0;
    if (s == SIFT_OK) {
        r->med = cli_median(b->times, (int)p->steps);
        s = sift_session_sel_cache_stats(ss, -1, &r->hits, &r->n_steps);
    }
    if (s == SIFT_OK) s = sift_session_select_warm_stats(ss, -1, &r->warm_hits, &r->warm_misses);
    if (s == SIFT_OK && p->profile) { /* after the timed steps, so that timing costs them nothing */
        s = sift_session_set_profiling(ss, 1);
        for (int i = 0; s == SIFT_OK && i < PROFILE_STEPS; i++) {
            s = sift_session_decode_batch(ss, b->n_seq, b->seqs, b->toks, b->logits);
            next_tokens(b);
        }
        if (s == SIFT_OK) s = sift_session_set_profiling(ss, 0);
        if (s == SIFT_OK) s = sift_session_profile_stages(ss, b->prof, PROFILE_MAX_ROWS, &r->n_prof, &r->prof_steps);
        if (r->n_prof > PROFILE_MAX_ROWS) r->n_prof = PROFILE_MAX_ROWS;
    }
    if (s == SIFT_OK) s = sift_session_kv_pools(ss, &r->pools);
    sift_session_kv_move_times(ss, &r->moves);
    return s;
}

/* Whether the session's page moves copy through host memory rather than on the device: the
 * engine's switch for comparing the two (kv_cache.h), read as the engine reads it. */
static bool moves_through_host(void)
{
    const char *v = getenv("SIFT_KV_MOVE_THROUGH_HOST");
    return v && strcmp(v, "1") == 0;
}

/* A mode's row: a line of the table, or a JSON object. */
static void print_mode(const decode_bench *b, const sift_session *ss, int64_t n_ctx, int mode, const mode_result *r)
{
    const cli_params *p = b->p;
    const double kv_gb = (double)sift_session_kv_bytes(ss) / 1e9;
    const double hit_rate = r->n_steps ? (double)r->hits / (double)r->n_steps : 0.0;
    const double tokens_per_s = (double)b->n_seq / r->med;
    if (p->json) {
        printf("{\"model\": ");
        cli_json_string(p->model);
        printf(", \"device\": ");
        cli_json_string(sift_context_device_name(b->ctx));
        printf(", \"ctx\": %lld, \"attn\": \"%s\", \"batch\": %d, \"ms_per_step\": ", (long long)n_ctx,
               cli_attn_mode_names[mode], b->n_seq);
        cli_json_fixed(r->med * 1e3, 3);
        printf(", \"tokens_per_s\": ");
        cli_json_fixed(tokens_per_s, 2);
        printf(", \"first_step_ms\": ");
        cli_json_fixed(r->first * 1e3, 3);
        printf(", \"ms_per_token\": ");
        cli_json_fixed(1e3 / tokens_per_s, 3);
        printf(", \"kv_gb\": %.3f, \"sel_cache_hit_rate\": %.3f", kv_gb, hit_rate);
        printf(", \"warm_hits\": %lld, \"warm_misses\": %lld", (long long)r->warm_hits, (long long)r->warm_misses);
        printf(", \"steps_run_ahead\": %lld", (long long)sift_session_steps_run_ahead(ss));
        for (int k = 0; k < AHEAD_PARTS; k++) printf(", \"%s\": %.1f", ahead_names[k], r->ahead[k]);
        printf(", \"kv_device_bytes\": %llu, \"kv_host_bytes\": %llu, \"pages_moved\": %lld",
               (unsigned long long)r->pools.device_bytes, (unsigned long long)r->pools.host_bytes,
               (long long)r->pools.pages_moved);
        printf(", \"page_move_ms\": ");
        cli_json_fixed(r->moves.us / 1e3, 3);
        printf(", \"ms_per_page_move\": ");
        cli_json_fixed(cli_ratio(r->moves.us / 1e3, (double)r->moves.moves), 3);
        printf(", \"bytes_per_page_move\": ");
        cli_json_fixed(cli_ratio(r->moves.bytes, (double)r->moves.moves), 0);
        printf(", \"page_moves_through_host\": %s", moves_through_host() ? "true" : "false");
        if (p->profile) print_profile(b->prof, r->n_prof, r->prof_steps, r->med * 1e3, true);
        printf("}\n");
    } else {
        printf("%10lld %-7s %12.3f %10.2f %12.2f%s\n", (long long)n_ctx, cli_attn_mode_names[mode], r->med * 1e3, tokens_per_s,
               kv_gb, mode == 2 ? (hit_rate == 1.0 ? "  (every step reused)" : hit_rate > 0 ? "  (some steps reused)" : "  (no step reused)")
                      : mode == 3 ? "  (+ predictor keys)" : "");
        if (r->pools.host_pages > 0) {
            printf("%10s %-7s ", "", "");
            cli_print_pools(stdout, &r->pools);
        }
        if (r->moves.moves > 0) {
            const double per_ms = r->moves.us / 1e3 / (double)r->moves.moves, per_mb = r->moves.bytes / 1e6 / (double)r->moves.moves;
            printf("%10s %-7s page moves: %lld in %.3f ms of host time, %.3f ms a page of %.2f MB (%.2f GB/s)%s\n", "", "",
                   (long long)r->moves.moves, r->moves.us / 1e3, per_ms, per_mb, per_mb / per_ms,
                   moves_through_host() ? ", through host memory (SIFT_KV_MOVE_THROUGH_HOST=1)" : "");
        }
        if (p->profile) print_profile(b->prof, r->n_prof, r->prof_steps, r->med * 1e3, false);
    }
    fflush(stdout);
}

/* One mode at one context: a session of its own, filled, timed and printed; *reported when the
 * failure's message is printed already. */
static sift_status run_mode(decode_bench *b, int64_t n_ctx, int mode, bool *reported)
{
    const cli_params *p = b->p;
    sift_session_config cfg = p->session;
    /* room for the warm-ups, the timed and the profiled steps */
    cfg.n_ctx = n_ctx + p->steps + 4 + (p->profile ? PROFILE_STEPS : 0);
    cfg.n_seq = b->n_seq;
    cfg.policy = mode == 3 ? SIFT_POLICY_BUTLER : mode ? SIFT_POLICY_TOKENSELECT : SIFT_POLICY_DENSE;
    cfg.predictor = mode == 3 ? b->predictor : NULL;
    cfg.sel_cache = mode == 2 ? p->session.sel_cache : SIFT_SEL_CACHE_OFF;
    if (cli_apply_offload(p, b->model, &cfg) != 0) {
        *reported = true;
        return SIFT_E_INVALID;
    }
    sift_session *ss = NULL;
    sift_status s = sift_session_create(b->model, &cfg, &ss);
    if (s == SIFT_OK && mode == 3 && cli_apply_butler_reuse(p, ss) != 0) {
        *reported = true;
        s = SIFT_E_INVALID;
    }
    for (int q = 0; q < b->n_seq && s == SIFT_OK; q++) {
        s = sift_session_fill_synthetic_seq(ss, q, n_ctx, 7 + (uint64_t)q);
        b->seqs[q] = q;
        b->toks[q] = (int32_t)(((b->info.bos >= 0 ? b->info.bos : 0) + q) % b->info.n_vocab);
    }
    mode_result r = {0};
    if (s == SIFT_OK) s = time_steps(b, ss, &r);
    if (s == SIFT_OK) print_mode(b, ss, n_ctx, mode, &r);
    sift_session_destroy(ss);
    return s;
}

/* The model on the backend, its predictor, and the buffers of the steps: 0, or 1 after a message. */
static int open_bench(const cli_params *p, decode_bench *b)
{
    sift_status s = cli_open_backend(p->backend, p->threads, p->verbose != 0, &b->ctx);
    if (s == SIFT_OK) {
        if (!p->json) fprintf(stderr, "sift bench-decode: loading %s on %s...\n", p->model, sift_context_device_name(b->ctx));
        if (!p->json) cli_note_vulkan_clocks("sift bench-decode", b->ctx);
        s = sift_model_load(b->ctx, p->model, &b->model);
    }
    if (s != SIFT_OK) {
        fprintf(stderr, "sift bench-decode: %s\n", sift_last_error());
        return 1;
    }
    if (cli_load_predictor(p->who, b->model, p->predictor, &b->predictor) != 0) return 1;
    sift_model_get_info(b->model, &b->info);
    b->n_seq = (int)p->batch;
    b->logits = malloc((size_t)b->n_seq * (size_t)b->info.n_vocab * sizeof *b->logits);
    b->times = malloc((size_t)p->steps * sizeof *b->times);
    b->ahead_us = malloc(AHEAD_PARTS * (size_t)p->steps * sizeof *b->ahead_us);
    b->seqs = malloc((size_t)b->n_seq * sizeof *b->seqs);
    b->toks = malloc((size_t)b->n_seq * sizeof *b->toks);
    b->prof = malloc(PROFILE_MAX_ROWS * sizeof *b->prof);
    if (b->logits && b->times && b->ahead_us && b->seqs && b->toks && b->prof) return 0;
    fprintf(stderr, "sift bench-decode: out of host memory\n");
    return 1;
}

static void close_bench(decode_bench *b)
{
    free(b->logits);
    free(b->times);
    free(b->ahead_us);
    free(b->seqs);
    free(b->toks);
    free(b->prof);
    sift_predictor_destroy(b->predictor);
    sift_model_destroy(b->model);
    sift_context_destroy(b->ctx);
}

static int bench_decode(const cli_params *p)
{
    decode_bench b = {.p = p};
    if (open_bench(p, &b) != 0) {
        close_bench(&b);
        return 1;
    }
    if (!p->json) {
        const sift_model_info *info = &b.info;
        printf("sift bench-decode  %s  on %s\n%s, %d layers, %d/%d heads of %d, weights %.2f GB; S=%lld W=%lld k=%lld; ",
               p->model, sift_context_device_name(b.ctx), info->arch, info->n_layers, info->n_heads, info->n_kv_heads,
               info->head_dim, (double)info->weight_bytes / 1e9, (long long)p->session.sink, (long long)p->session.window,
               (long long)p->session.budget);
        if (p->batch > 1) printf("batch %lld (tokens/s = %lld / step time); ", (long long)p->batch, (long long)p->batch);
        printf("median of %lld steps\n", (long long)p->steps);
    }
    if (p->offload) print_link(&b);
    if (!p->json) printf("\n%10s %-7s %12s %10s %12s\n", "context", "attn", "ms/step", "tokens/s", "KV GB");
    sift_status s = SIFT_OK;
    bool reported = false; /* the failure's message is printed already */
    for (int c = 0; c < p->n_ctxs && s == SIFT_OK; c++)
        for (int mode = 0; mode < 4 && s == SIFT_OK; mode++) {
            if ((mode == 2 && p->session.sel_cache > 1.0f) || (mode == 3 && !b.predictor)) continue;
            if (p->attn_modes && !(p->attn_modes & (1u << mode))) continue;
            s = run_mode(&b, p->ctxs[c], mode, &reported);
        }
    if (s != SIFT_OK && !reported) fprintf(stderr, "sift bench-decode: %s\n", sift_last_error());
    close_bench(&b);
    return s == SIFT_OK ? 0 : 1;
}

int cli_bench_decode(int argc, char **argv)
{
    cli_params p = cli_params_default(&bench_decode_command);
    int rc = 0;
    if (!cli_parse(&bench_decode_command, argc, argv, &p, &rc)) return rc;
    if (!p.model) {
        fprintf(stderr, "sift bench-decode: no model given (-m MODEL.gguf)\n");
        return 2;
    }
    return bench_decode(&p);
}
