/* KV offload (sift_session_config.kv_device_tokens), on every available backend, for each model
 * given: a session whose device pool holds 3 pages of 16 tokens, so that most pages live in host
 * memory and pages move there while the prompt is read and while decoding, gives exactly the
 * tokens and logits (bit for bit) of the same session with every page on the device:
 *   - dense, TokenSelect, TokenSelect with only V offloaded, TokenButler (a random predictor) and
 *     H2O (a host policy: its mirrors are read from both pools): a prompt of 90 tokens in chunks
 *     of 64, then 8 greedy decode steps (each step's token is the last step's argmax);
 *   - a rewind into host pages, then the same tokens again;
 *   - synthetic contexts (sift_session_fill_synthetic, what bench-decode fills) and decode steps;
 *   - TokenButler reusing its lists: a fixed interval of 4 (staged rows: the selections' rows
 *     copied to the device, the reusing steps reading that copy), of 6 with a window of 4 (the
 *     window's ring of staged rows turns over), and butler:auto (the device decides: staged rows
 *     too, the lists' copy predicated on the device's check);
 * and each offloaded run really used the host pool: host pages in use and pages moved > 0. The
 * staged runs are counted in a profiled run of the same steps (equal again): under the fixed
 * interval kv_gather copies K and V of each staged layer on each selecting step and on no other,
 * and kv_write adds each reusing step's row to them; under butler:auto every step has the lists'
 * copy (K and V, predicated: the device skips it where it reuses) and the window's copy (K and V),
 * and no kv_write; a run that stages nothing (resident) has neither. Also: a
 * tensor in host memory reads back what was written, and get_rows reads it as device memory. Every
 * scenario runs on the first model; the others (other head sizes, so other kernels) run the
 * policies over a prompt.
 * Usage: sift-offload-test MODEL.gguf... (a missing model file is skipped with a message). */
#include "sift.h"
#include "sift_testing.h" /* sift_session_fill_synthetic */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_filter.h"
#include "report.h"

/* A check of a model on a backend, with the value it measured. */
#define check(ok, model, backend, what, value) test_check_value((ok), (backend), (value), "%s: %s", (model), (what))

enum { PROMPT = 90, STEPS = 8, DEVICE_TOKENS = 48 };

typedef struct {
    sift_model *m;
    sift_model_info info;
    const char *name, *bname;
    sift_predictor *pred;
    int32_t prompt[PROMPT];
} model_run;

/* What a run produced: every decode step's token and the logits of every step. */
typedef struct {
    int32_t toks[STEPS + 1];
    float *logits; /* [STEPS + 1][n_vocab] */
    sift_kv_pool_info pools;
    int64_t reused; /* TokenButler: the layers' decode steps that reused their lists (sift_session_sel_cache_stats) */
} outcome;

typedef enum { SCEN_PROMPT, SCEN_REWIND, SCEN_SYNTHETIC } scenario;

/* How TokenButler reuses its lists: a fixed interval (1: never), or the device deciding by q'
 * (reuse: the threshold, > 1 for none); and the window (0: the default). */
typedef struct {
    int interval;
    float reuse;
    int64_t window;
} butler_reuse;

static const butler_reuse NO_REUSE = {.interval = 1, .reuse = SIFT_SEL_CACHE_OFF};

/* What a profiled run counted (sift_session_profile_stages): the attention's kv_gather nodes (the
 * staging copies) and kv_write nodes (a reusing step's row added to them). */
typedef struct {
    int64_t gathers, writes;
} staging_count;

static int32_t argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static sift_session_config config(const model_run *t, sift_policy policy, int offload, bool v_only, const butler_reuse *br)
{
    sift_session_config c = sift_session_config_default();
    c.n_ctx = 256;
    c.chunk = 64;
    c.page_size = 16;
    c.sink = 4, c.window = 16, c.budget = 24;
    c.sel_cache = SIFT_SEL_CACHE_OFF;
    c.policy = policy;
    if (policy == SIFT_POLICY_BUTLER) c.predictor = t->pred;
    if (offload) c.kv_device_tokens = DEVICE_TOKENS;
    c.kv_offload_v_only = offload && v_only;
    c.predict_interval = br->interval;
    if (br->window) c.window = br->window;
    return c;
}

/* Turns profiling on (count) and butler:auto's threshold. */
static sift_status prepare(sift_session *s, const butler_reuse *br, bool count)
{
    sift_status st = br->reuse <= 1.0f ? sift_session_set_butler_reuse(s, br->reuse) : SIFT_OK;
    if (st == SIFT_OK && count) st = sift_session_set_profiling(s, 1);
    return st;
}

/* The staging nodes of the profiled steps: the attention's kv_gather and kv_write. */
static sift_status count_staging(const sift_session *s, staging_count *out)
{
    sift_stage_time rows[160];
    int n = 0;
    *out = (staging_count){0};
    const sift_status st = sift_session_profile_stages(s, rows, 160, &n, NULL);
    if (st != SIFT_OK) return st;
    for (int i = 0; i < n && i < 160; i++) {
        if (strcmp(rows[i].stage, "attention") != 0) continue;
        if (strcmp(rows[i].op, "kv_gather") == 0) out->gathers += rows[i].nodes;
        if (strcmp(rows[i].op, "kv_write") == 0) out->writes += rows[i].nodes;
    }
    return SIFT_OK;
}

/* One run: the scenario's context, then STEPS greedy decode steps; profiled where count is not
 * NULL, which gets the staging nodes. */
static sift_status run(const model_run *t, const sift_session_config *cfg, const butler_reuse *br, scenario sc, outcome *o,
                       staging_count *count)
{
    const size_t nv = (size_t)t->info.n_vocab;
    sift_session *s = NULL;
    sift_status st = sift_session_create(t->m, cfg, &s);
    if (st == SIFT_OK) st = prepare(s, br, count != NULL);
    float *lg = o->logits;
    if (sc == SCEN_SYNTHETIC) {
        if (st == SIFT_OK) st = sift_session_fill_synthetic(s, 120, 5);
        if (st == SIFT_OK) st = sift_session_eval(s, t->prompt, 1, lg);
    } else {
        if (st == SIFT_OK) st = sift_session_eval(s, t->prompt, PROMPT, lg);
        if (sc == SCEN_REWIND) { /* back into pages that moved to the host, and the tail again */
            if (st == SIFT_OK) st = sift_session_rewind(s, 0, 37);
            if (st == SIFT_OK) st = sift_session_eval(s, t->prompt + 37, PROMPT - 37, lg);
        }
    }
    o->toks[0] = argmax(lg, (int)nv);
    for (int i = 1; i <= STEPS && st == SIFT_OK; i++) {
        float *out = lg + (size_t)i * nv;
        st = sift_session_eval(s, &o->toks[i - 1], 1, out);
        o->toks[i] = argmax(out, (int)nv);
    }
    if (st == SIFT_OK) st = sift_session_kv_pools(s, &o->pools);
    int64_t full_steps = 0;
    if (st == SIFT_OK) st = sift_session_sel_cache_stats(s, -1, &o->reused, &full_steps);
    if (st == SIFT_OK && count) st = count_staging(s, count);
    sift_session_destroy(s);
    return st;
}

/* The first of steps 0 .. STEPS whose token or logits differ between two runs; -1: none. */
static int first_difference(const outcome *a, const outcome *b, size_t nv)
{
    for (int i = 0; i <= STEPS; i++)
        if (a->toks[i] != b->toks[i] || memcmp(a->logits + i * nv, b->logits + i * nv, nv * sizeof(float)) != 0) return i;
    return -1;
}

/* The decode steps of a run (after a prompt STEPS, its last token read by the prefill; after a
 * synthetic context, which is no prefill, STEPS + 1): how many select under the fixed interval I
 * (session.c: the first two steps, then every I-th), and how many reuse. */
static void butler_steps(scenario sc, int interval, int *selecting, int *reusing)
{
    *selecting = *reusing = 0;
    const int steps = sc == SCEN_SYNTHETIC ? STEPS + 1 : STEPS;
    for (int d = 0; d < steps; d++) { /* d: decode steps since the prefill */
        const bool selects = d == 0 || (d - 1) % interval == 0;
        *selecting += selects;
        *reusing += !selects;
    }
}

/* The staging of an offloaded TokenButler run with reuse br, profiled (offloaded: its outcome b, as
 * the unprofiled run gave it): equal again, and its staging nodes those the interval implies on
 * every layer but the dense layer 0 (butler:auto: 4 kv_gather nodes a layer-step, counted whether
 * the device skipped the lists' copy or not), or none where nothing is staged (resident). */
static void check_staging(const model_run *t, const sift_session_config *cfg, const butler_reuse *br, scenario sc,
                          const outcome *b, bool offloaded, const char *label)
{
    const size_t nv = (size_t)t->info.n_vocab;
    outcome p = {.logits = calloc((STEPS + 1) * nv, sizeof(float))};
    staging_count n = {0};
    char what[200];
    const sift_status st = p.logits ? run(t, cfg, br, sc, &p, &n) : SIFT_E_NOMEM;
    if (st != SIFT_OK) {
        snprintf(what, sizeof what, "%s, profiled: %s", label, sift_last_error());
        check(false, t->name, t->bname, what, (double)st);
        free(p.logits);
        return;
    }
    snprintf(what, sizeof what, "%s, profiled (%s): tokens and logits equal the unprofiled run's (first step differing)", label,
             offloaded ? "offloaded" : "resident");
    const int diff = first_difference(b, &p, nv);
    check(diff < 0, t->name, t->bname, what, diff);
    const bool staged = offloaded && br->interval > 1, by_query = br->reuse <= 1.0f;
    int selecting, reusing;
    butler_steps(sc, br->interval, &selecting, &reusing);
    const int64_t layers = t->info.n_layers - 1; /* layer 0 attends densely */
    int64_t gathers = staged ? 2 * layers * selecting : 0, writes = staged ? 2 * layers * reusing : 0;
    if (staged && by_query) gathers = 4 * layers * (selecting + reusing), writes = 0;
    snprintf(what, sizeof what, "%s (%s): staging copies %lld K/V gathers, %lld K/V row writes (expected %lld, %lld)", label,
             offloaded ? "offloaded" : "resident", (long long)n.gathers, (long long)n.writes, (long long)gathers,
             (long long)writes);
    check(n.gathers == gathers && n.writes == writes && (!staged || (gathers > 0 && (writes > 0 || by_query))), t->name, t->bname, what,
          (double)n.gathers);
    free(p.logits);
}

/* The offloaded run of a policy against the resident one; TokenButler reusing its lists as br says,
 * its staging counted in profiled runs of both. */
static void compare_reusing(const model_run *t, sift_policy policy, bool v_only, scenario sc, const butler_reuse *br,
                            const char *label)
{
    const size_t nv = (size_t)t->info.n_vocab;
    outcome a = {.logits = calloc((STEPS + 1) * nv, sizeof(float))}, b = {.logits = calloc((STEPS + 1) * nv, sizeof(float))};
    char what[160];
    if (!a.logits || !b.logits) {
        check(false, t->name, t->bname, "out of memory", 0);
        goto out;
    }
    const sift_session_config resident = config(t, policy, 0, false, br), off = config(t, policy, 1, v_only, br);
    sift_status st = run(t, &resident, br, sc, &a, NULL);
    if (st == SIFT_OK) st = run(t, &off, br, sc, &b, NULL);
    if (st != SIFT_OK) {
        snprintf(what, sizeof what, "%s: %s", label, sift_last_error());
        check(false, t->name, t->bname, what, (double)st);
        goto out;
    }
    const int first_diff = first_difference(&a, &b, nv);
    snprintf(what, sizeof what, "%s: tokens and logits equal resident (first step differing)", label);
    check(first_diff < 0, t->name, t->bname, what, first_diff);
    snprintf(what, sizeof what, "%s: host pages in use, of %lld", label, (long long)b.pools.host_pages);
    check(b.pools.host_used > 0 && b.pools.host_bytes > 0 && a.pools.host_bytes == 0 && a.pools.host_used == 0, t->name,
          t->bname, what, (double)b.pools.host_used);
    snprintf(what, sizeof what, "%s: pages moved device -> host", label);
    check(b.pools.pages_moved > 0, t->name, t->bname, what, (double)b.pools.pages_moved);
    if (policy == SIFT_POLICY_BUTLER && (br->interval > 1 || br->reuse <= 1.0f)) {
        snprintf(what, sizeof what, "%s: the lists were reused (layer steps, as resident)", label);
        check(b.reused > 0 && b.reused == a.reused, t->name, t->bname, what, (double)b.reused);
        check_staging(t, &resident, br, sc, &a, false, label);
        check_staging(t, &off, br, sc, &b, true, label);
    }
out:
    free(a.logits);
    free(b.logits);
}

static void compare(const model_run *t, sift_policy policy, bool v_only, scenario sc, const char *label)
{
    compare_reusing(t, policy, v_only, sc, &NO_REUSE, label);
}

/* The pools of a session made with config c, destroyed again; false after a failed check naming
 * the error. */
static bool pools_of(const model_run *t, const sift_session_config *c, sift_kv_pool_info *p)
{
    sift_session *s = NULL;
    const bool ok = sift_session_create(t->m, c, &s) == SIFT_OK && sift_session_kv_pools(s, p) == SIFT_OK;
    if (!ok) check(false, t->name, t->bname, sift_last_error(), 0);
    sift_session_destroy(s);
    return ok;
}

/* The pools' sizes: the device pool is kv_device_tokens rounded up to pages, the host pool the rest
 * (K and V, or V only; under butler all of layer 0 on the device), and a config error is named. */
static void sizes(const model_run *t)
{
    sift_session_config c = config(t, SIFT_POLICY_DENSE, 1, false, &NO_REUSE);
    c.kv_device_tokens = 40; /* 2.5 pages: 3 */
    sift_kv_pool_info p = {0};
    const size_t row = (size_t)t->info.n_kv_heads * (size_t)t->info.head_dim * 2; /* f16, one K or V token, all heads */
    const size_t layers = (size_t)t->info.n_layers;
    if (pools_of(t, &c, &p))
        check(p.device_pages == 3 && p.host_pages == 13 && p.device_bytes == layers * 2 * 48 * row &&
                  p.host_bytes == layers * 2 * 208 * row && p.page_size == 16,
              t->name, t->bname, "40 device tokens: 3 device pages, 13 host pages, K+V bytes of each", (double)p.host_bytes);
    c.kv_offload_v_only = 1;
    if (pools_of(t, &c, &p))
        check(p.device_bytes == layers * (256 + 48) * row && p.host_bytes == layers * 208 * row, t->name, t->bname,
              "V only: K whole on the device, V split", (double)p.device_bytes);
    sift_session_config b = config(t, SIFT_POLICY_BUTLER, 1, false, &NO_REUSE);
    b.kv_device_tokens = 40;
    if (pools_of(t, &b, &p))
        check(p.device_bytes == 2 * 256 * row + (layers - 1) * 2 * 48 * row && p.host_bytes == (layers - 1) * 2 * 208 * row,
              t->name, t->bname, "butler: layer 0 (dense) whole on the device, the others split", (double)p.host_bytes);
    sift_session *s = NULL;
    c.kv_device_tokens = 0;
    const sift_status bad = sift_session_create(t->m, &c, &s);
    check(bad == SIFT_E_INVALID && !s, t->name, t->bname, "V only without a device pool size: SIFT_E_INVALID", (double)bad);
    sift_session_destroy(s);
}

/* A tensor in host memory (sift_tensor_create_host) reads back what was written, and an op reads it
 * in place as it reads device memory: get_rows (what bench-decode times the host link with) over a
 * host table equals the same over a device table, bit for bit. */
static void host_tensor_reads(sift_context *ctx, const char *bname)
{
    enum { ROWS = 64, E = 40, T = 24 };
    uint16_t tab[ROWS * E], back[ROWS * E];
    int32_t ids[T];
    float out[2][T * E];
    for (int i = 0; i < ROWS * E; i++) tab[i] = (uint16_t)(0x3c00 + (i * 37) % 997); /* halves in [1, 2) */
    for (int t = 0; t < T; t++) ids[t] = (t * 11) % ROWS;
    sift_tensor *table[2] = {NULL, NULL}, *idt = NULL, *o = NULL;
    sift_graph *g = NULL;
    const int64_t shape[2] = {ROWS, E}, oshape[2] = {T, E}, n = T;
    sift_status st = sift_tensor_create_host(ctx, SIFT_F16, 2, shape, &table[0]);
    if (st == SIFT_OK) st = sift_tensor_create(ctx, SIFT_F16, 2, shape, &table[1]);
    if (st == SIFT_OK) st = sift_tensor_create(ctx, SIFT_I32, 1, &n, &idt);
    if (st == SIFT_OK) st = sift_tensor_create(ctx, SIFT_F32, 2, oshape, &o);
    if (st == SIFT_OK) st = sift_tensor_write(idt, 0, ids, sizeof ids);
    for (int w = 0; w < 2 && st == SIFT_OK; w++) {
        st = sift_tensor_write(table[w], 0, tab, sizeof tab);
        if (st == SIFT_OK) st = sift_graph_create(ctx, &g);
        if (st == SIFT_OK) st = sift_op_get_rows(g, table[w], idt, o);
        if (st == SIFT_OK) st = sift_graph_compute(g);
        if (st == SIFT_OK) st = sift_tensor_read(o, 0, out[w], sizeof out[w]);
        sift_graph_destroy(g);
        g = NULL;
    }
    if (st == SIFT_OK) st = sift_tensor_read(table[0], 0, back, sizeof back);
    if (st != SIFT_OK) {
        check(false, "-", bname, sift_last_error(), (double)st);
    } else {
        check(sift_tensor_in_host_memory(table[0]) && memcmp(back, tab, sizeof tab) == 0, "-", bname,
              "a host tensor reads back what was written", 0);
        check(memcmp(out[0], out[1], sizeof out[0]) == 0 && out[0][0] >= 1.0f, "-", bname,
              "get_rows over a host table equals it over a device table", (double)out[0][0]);
    }
    sift_tensor_destroy(table[0]);
    sift_tensor_destroy(table[1]);
    sift_tensor_destroy(idt);
    sift_tensor_destroy(o);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("SIFT_VULKAN_VALIDATION", "1", 0);
    int models = 0;
    for (int a = 1; a < argc; a++) {
        if (!test_model_exists(argv[a])) continue;
        models++;
        const char *name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        for (int kind = 0; kind < SIFT_BACKEND_COUNT; kind++) {
            sift_context *ctx = test_context_open((sift_backend_kind)kind, name, false);
            if (!ctx) continue;
            model_run t = {.name = name, .bname = sift_backend_kind_name((sift_backend_kind)kind)};
            test_case_begin(name, t.bname);
            if (sift_model_load(ctx, argv[a], &t.m) != SIFT_OK || sift_predictor_random(t.m, 16, 3, &t.pred) != SIFT_OK) {
                check(false, name, t.bname, sift_last_error(), 0);
                sift_model_destroy(t.m);
                test_context_done(ctx);
                continue;
            }
            sift_model_get_info(t.m, &t.info);
            for (int i = 0; i < PROMPT; i++)
                t.prompt[i] = i == 0 && t.info.bos >= 0 ? t.info.bos : 3 + (int32_t)((i * 7919u) % (uint32_t)(t.info.n_vocab - 3));
            /* every scenario on the first model; on the others (other head sizes: other kernels) the
             * policies, each reading the pools its own way */
            const bool first = models == 1;
            if (first) sizes(&t);
            if (first) host_tensor_reads(ctx, t.bname);
            compare(&t, SIFT_POLICY_DENSE, false, SCEN_PROMPT, "dense");
            if (first) compare(&t, SIFT_POLICY_TOKENSELECT, false, SCEN_PROMPT, "tokenselect");
            compare(&t, SIFT_POLICY_TOKENSELECT, true, SCEN_PROMPT, "tokenselect, V offloaded only");
            compare(&t, SIFT_POLICY_BUTLER, false, SCEN_PROMPT, "butler");
            compare_reusing(&t, SIFT_POLICY_BUTLER, false, SCEN_PROMPT, &(butler_reuse){.interval = 4, .reuse = SIFT_SEL_CACHE_OFF},
                            "butler, interval 4 (staged)");
            if (first) {
                compare_reusing(&t, SIFT_POLICY_BUTLER, false, SCEN_PROMPT,
                                &(butler_reuse){.interval = 6, .reuse = SIFT_SEL_CACHE_OFF, .window = 4},
                                "butler, interval 6, window 4 (the staged window's ring turns over)");
                compare_reusing(&t, SIFT_POLICY_BUTLER, true, SCEN_PROMPT, &(butler_reuse){.interval = 4, .reuse = SIFT_SEL_CACHE_OFF},
                                "butler, interval 4, V offloaded only (staged)");
                compare_reusing(&t, SIFT_POLICY_BUTLER, false, SCEN_SYNTHETIC,
                                &(butler_reuse){.interval = 3, .reuse = SIFT_SEL_CACHE_OFF}, "butler, interval 3, 120 synthetic tokens");
                compare_reusing(&t, SIFT_POLICY_BUTLER, false, SCEN_PROMPT, &(butler_reuse){.interval = 4, .reuse = -1.0f},
                                "butler:auto (threshold -1: reuse up to 4 steps; staged rows)");
                compare(&t, SIFT_POLICY_H2O, false, SCEN_PROMPT, "h2o (host mirrors)");
                compare(&t, SIFT_POLICY_TOKENSELECT, false, SCEN_REWIND, "tokenselect, rewind to 37 and again");
                compare(&t, SIFT_POLICY_BUTLER, false, SCEN_SYNTHETIC, "butler, 120 synthetic tokens");
                compare(&t, SIFT_POLICY_DENSE, false, SCEN_SYNTHETIC, "dense, 120 synthetic tokens");
            }
            sift_predictor_destroy(t.pred);
            sift_model_destroy(t.m);
            test_context_done(ctx);
        }
    }
    if (models == 0) test_note("", "skipped: no model found");
    return test_summary("offload", NULL);
}
