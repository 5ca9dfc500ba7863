/* What an application plans and hears with: a context's log, and the memory estimate.
 *
 *   sift-logs-memory-test logs MODEL.gguf
 *     a context's log callback gets the library's messages with their levels (the context's and a
 *     model's INFO, a backend's WARN routed to the context whose call is running); without one,
 *     INFO is dropped and WARN goes to stderr as before; under threads loading models on one
 *     context the callback's calls never overlap and none is lost.
 *   sift-logs-memory-test memory MODEL.gguf PREDICTOR.gguf
 *     sift_model_estimate against what a real load, predictor and session allocate, on every
 *     backend present (sift_context_memory_use): the weights, the predictor and the host pool to
 *     the byte, the peak of a session run to its full context within 10% under the estimate and
 *     never over it; nothing allocated by the estimate itself; a context too large does not fit.
 */
#include "backend_filter.h"
#include "report.h"
#include "engine.h" /* sift_context_lock and sift_log: a backend's message, as a backend sends it */
#include "sift.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define check(ok, backend, what) test_check((ok), (backend), "%s", (what))

/* ---- logs ---------------------------------------------------------------------------------- */

enum { MAX_MESSAGES = 256 };

typedef struct log_record {
    atomic_int inside;  /* 1 while a call runs: a second call meanwhile is an overlap */
    int overlaps;
    int n;
    sift_log_level level[MAX_MESSAGES];
    char text[MAX_MESSAGES][160];
    bool slow;          /* sleep in the callback, to give overlapping calls their chance */
} log_record;

static void record_log(void *user, sift_log_level level, const char *message)
{
    log_record *r = user;
    if (atomic_exchange(&r->inside, 1)) r->overlaps++;
    if (r->slow) nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
    if (r->n < MAX_MESSAGES) {
        r->level[r->n] = level;
        snprintf(r->text[r->n], sizeof r->text[r->n], "%s", message);
    }
    r->n++;
    atomic_store(&r->inside, 0);
}

/* The index of the first message at `level` starting with `prefix`, or -1. */
static int find_message(const log_record *r, sift_log_level level, const char *prefix)
{
    for (int i = 0; i < r->n && i < MAX_MESSAGES; i++)
        if (r->level[i] == level && strncmp(r->text[i], prefix, strlen(prefix)) == 0) return i;
    return -1;
}

static int count_messages(const log_record *r, const char *prefix)
{
    int n = 0;
    for (int i = 0; i < r->n && i < MAX_MESSAGES; i++) n += strncmp(r->text[i], prefix, strlen(prefix)) == 0;
    return n;
}

static sift_context *open_logged(sift_backend_kind kind, log_record *r)
{
    sift_context_config cc = sift_context_config_default();
    cc.backend = kind;
    cc.log = r ? record_log : NULL;
    cc.log_user = r;
    sift_context *ctx = NULL;
    return sift_context_create_with(&cc, &ctx) == SIFT_OK ? ctx : NULL;
}

/* stderr into a file while fn runs; what was written there in buf. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t cap)
{
    char path[] = "/tmp/sift-logs-XXXXXX";
    const int fd = mkstemp(path);
    buf[0] = 0;
    if (fd < 0) return;
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    fn(arg);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    const ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
}

typedef struct default_run {
    sift_backend_kind kind;
    const char *model;
    bool opened, loaded;
} default_run;

/* A context without a callback: it opens, loads a model (INFO: dropped) and hears a backend's
 * warning (written to stderr). */
static void run_without_callback(void *arg)
{
    default_run *d = arg;
    sift_context *ctx = open_logged(d->kind, NULL);
    d->opened = ctx != NULL;
    sift_model *m = NULL;
    d->loaded = ctx && sift_model_load(ctx, d->model, &m) == SIFT_OK;
    if (ctx) {
        sift_context_lock(ctx);
        sift_log(SIFT_LOG_WARN, "a backend's warning %d", 7);
        sift_context_unlock(ctx);
    }
    sift_model_destroy(m);
    sift_context_destroy(ctx);
}

typedef struct loader {
    sift_context *ctx;
    const void *data;
    size_t size;
    int loads;
} loader;

enum { N_LOG_THREADS = 3, N_LOADS = 4 };

static void *load_repeatedly(void *arg)
{
    loader *l = arg;
    for (int i = 0; i < N_LOADS; i++) {
        sift_model *m = NULL;
        if (sift_model_load_memory(l->ctx, l->data, l->size, NULL, &m) == SIFT_OK) l->loads++;
        sift_model_destroy(m);
    }
    return NULL;
}

static void test_logs(sift_backend_kind kind, const char *model)
{
    const char *bn = sift_backend_kind_name(kind);
    const char *excluded = test_backend_excluded(kind);
    log_record *r = calloc(1, sizeof *r);
    sift_context *ctx = excluded ? NULL : open_logged(kind, r);
    if (!ctx) {
        test_note(bn, "skipped: %s", excluded ? excluded : sift_last_error());
        free(r);
        return;
    }
    char want[96];
    snprintf(want, sizeof want, "context: %s backend", bn);
    check(find_message(r, SIFT_LOG_INFO, want) >= 0, bn, "opening: an INFO message naming the backend");
    sift_model *m = NULL;
    const int before = r->n;
    check(sift_model_load(ctx, model, &m) == SIFT_OK, bn, "a model loads");
    const int at = find_message(r, SIFT_LOG_INFO, "model ");
    check(r->n == before + 1 && at >= 0 && strstr(r->text[at], "layers") && strstr(r->text[at], "MiB of weights"), bn,
          "loading: one INFO message with the layers and the weights' size");
    sift_model_destroy(m);
    m = NULL;
    const int before_fail = r->n;
    check(sift_model_load(ctx, "/nonexistent/model.gguf", &m) != SIFT_OK && r->n == before_fail, bn,
          "a failed load: its error is the status, not a message");
    /* a backend's message (Vulkan's validation layer sends them so) reaches the context whose call runs */
    sift_context_lock(ctx);
    sift_log(SIFT_LOG_WARN, "a backend's warning %d", 7);
    sift_context_unlock(ctx);
    const int warn = find_message(r, SIFT_LOG_WARN, "a backend's warning 7");
    check(warn >= 0 && warn == r->n - 1, bn, "a backend's WARN during a call reaches the context's callback");

    /* without a callback: INFO dropped, WARN to stderr as "sift: ..." */
    char err[4096];
    default_run d = {.kind = kind, .model = model};
    capture_stderr(run_without_callback, &d, err, sizeof err);
    check(d.opened && d.loaded && strstr(err, "model ") == NULL && strstr(err, "context:") == NULL, bn,
          "without a callback: the INFO messages are not written");
    check(strstr(err, "sift: a backend's warning 7\n") != NULL, bn, "without a callback: a WARN is written to stderr");

    /* threads loading models on the one context: every message arrives whole, never two at once */
    FILE *f = fopen(model, "rb");
    char *data = NULL;
    long size = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        data = malloc((size_t)size);
        if (data && fread(data, 1, (size_t)size, f) != (size_t)size) size = 0;
    }
    if (f) fclose(f);
    r->slow = true;
    const int models_before = count_messages(r, "model ");
    pthread_t th[N_LOG_THREADS];
    loader ld[N_LOG_THREADS];
    for (int i = 0; i < N_LOG_THREADS; i++) {
        ld[i] = (loader){.ctx = ctx, .data = data, .size = (size_t)size};
        pthread_create(&th[i], NULL, load_repeatedly, &ld[i]);
    }
    int loads = 0;
    for (int i = 0; i < N_LOG_THREADS; i++) {
        pthread_join(th[i], NULL);
        loads += ld[i].loads;
    }
    char what[128];
    snprintf(what, sizeof what, "%d threads x %d loads on one context: %d messages, %d overlapping calls", N_LOG_THREADS,
             N_LOADS, count_messages(r, "model ") - models_before, r->overlaps);
    check(data && loads == N_LOG_THREADS * N_LOADS && count_messages(r, "model ") - models_before == loads &&
              r->overlaps == 0,
          bn, what);
    free(data);
    sift_context_destroy(ctx);
    free(r);
}

/* ---- memory -------------------------------------------------------------------------------- */

static sift_memory_use use_of(sift_context *ctx)
{
    sift_memory_use u = {0};
    sift_context_memory_use(ctx, &u);
    return u;
}

/* Feeds tokens until the sequence holds n_ctx: a prefill to n_ctx - 32, then decode steps (whose
 * intermediates grow past a pool buffer's capacity on the way). */
static sift_status fill(sift_session *s, int64_t n_ctx, int32_t token)
{
    const int64_t prefill = n_ctx - 32;
    int32_t *ids = malloc((size_t)prefill * sizeof *ids);
    if (!ids) return SIFT_E_NOMEM;
    for (int64_t i = 0; i < prefill; i++) ids[i] = token + (int32_t)(i % 7);
    sift_status st = sift_session_eval(s, ids, (size_t)prefill, NULL);
    for (int64_t i = prefill; st == SIFT_OK && i < n_ctx; i++) st = sift_session_eval(s, &token, 1, NULL);
    free(ids);
    return st;
}

typedef struct memory_case {
    const char *name;
    sift_policy policy;
    int64_t n_ctx, device_tokens;
    int sparse_prefill, neighbor_fetch, v_only, n_seq;
    float sel_cache;
    bool predictor;
    int predict_interval; /* TokenButler's; 0: the default */
} memory_case;

static void test_memory_case(sift_backend_kind kind, const char *model_path, const char *predictor_path, const memory_case *mc)
{
    const char *bn = sift_backend_kind_name(kind);
    sift_context *ctx = test_context_open(kind, mc->name, false);
    if (!ctx) return;
    sift_session_config sc = sift_session_config_default();
    sc.n_ctx = mc->n_ctx;
    sc.policy = mc->policy;
    sc.sink = 4;
    sc.window = 32;
    sc.budget = 64;
    sc.chunk = 256;
    sc.sparse_prefill = mc->sparse_prefill;
    sc.neighbor_fetch = mc->neighbor_fetch;
    sc.kv_device_tokens = mc->device_tokens;
    sc.kv_offload_v_only = mc->v_only;
    sc.n_seq = mc->n_seq;
    sc.sel_cache = mc->sel_cache;
    if (mc->predict_interval) sc.predict_interval = mc->predict_interval;
    const char *pred = mc->predictor ? predictor_path : NULL;
    sift_memory_estimate est;
    char what[160];
    const sift_status es = sift_model_estimate(ctx, model_path, pred, &sc, &est);
    snprintf(what, sizeof what, "%s: estimated (%s)", mc->name, es == SIFT_OK ? "ok" : sift_last_error());
    check(es == SIFT_OK, bn, what);
    check(use_of(ctx).device_peak_bytes == 0, bn, "the estimate allocates nothing on the device");
    sift_model *m = NULL;
    sift_predictor *p = NULL;
    sift_session *s = NULL;
    sift_status st = sift_model_load(ctx, model_path, &m);
    snprintf(what, sizeof what, "%s: weights %llu bytes, estimated %llu", mc->name, (unsigned long long)use_of(ctx).device_bytes,
             (unsigned long long)est.weights);
    check(st == SIFT_OK && use_of(ctx).device_bytes == est.weights, bn, what);
    if (st == SIFT_OK && pred) {
        const uint64_t before = use_of(ctx).device_bytes;
        st = sift_predictor_load(m, pred, &p);
        snprintf(what, sizeof what, "%s: predictor %llu bytes, estimated %llu", mc->name,
                 (unsigned long long)(use_of(ctx).device_bytes - before), (unsigned long long)est.predictor);
        check(st == SIFT_OK && use_of(ctx).device_bytes - before == est.predictor, bn, what);
        sc.predictor = p;
    }
    if (st == SIFT_OK) st = sift_session_create(m, &sc, &s);
    snprintf(what, sizeof what, "%s: host pool %llu bytes, estimated %llu", mc->name, (unsigned long long)use_of(ctx).host_bytes,
             (unsigned long long)est.kv_host);
    check(st == SIFT_OK && use_of(ctx).host_bytes == est.kv_host, bn, what);
    sift_model_info info;
    sift_model_get_info(m, &info);
    /* sequence 0 to the full context (with several, its last step in a batch with the others) */
    const int32_t token = info.bos >= 0 && info.bos + 10 < info.n_vocab ? info.bos + 10 : 10;
    if (st == SIFT_OK) st = fill(s, mc->n_ctx - (mc->n_seq > 1), token);
    for (int q = 1; st == SIFT_OK && q < mc->n_seq; q++) st = sift_session_eval_seq(s, q, (int32_t[]){5, 6, 7}, 3, NULL);
    if (st == SIFT_OK && mc->n_seq > 1) {
        int seqs[8];
        int32_t toks[8];
        for (int q = 0; q < mc->n_seq; q++) seqs[q] = q, toks[q] = 9;
        st = sift_session_decode_batch(s, mc->n_seq, seqs, toks, NULL);
    }
    const uint64_t peak = use_of(ctx).device_peak_bytes;
    snprintf(what, sizeof what, "%s: peak %.3f MiB, estimated %.3f MiB (%+.1f%%)%s%s", mc->name, (double)peak / 1048576.0,
             (double)est.device_total / 1048576.0, 100.0 * ((double)peak / (double)est.device_total - 1.0),
             st == SIFT_OK ? "" : ": ", st == SIFT_OK ? "" : sift_last_error());
    check(st == SIFT_OK && peak <= est.device_total && (double)peak >= 0.9 * (double)est.device_total, bn, what);
    sift_session_destroy(s);
    sift_predictor_destroy(p);
    sift_model_destroy(m);
    check(use_of(ctx).device_bytes <= use_of(ctx).device_peak_bytes, bn, "after the session: the peak stands");
    sift_context_destroy(ctx);
}

static void test_memory(sift_backend_kind kind, const char *model, const char *predictor)
{
    static const memory_case cases[] = {
        {"dense", SIFT_POLICY_DENSE, 512, 0, 0, 0, 0, 1, 0.9f, false, 0},
        {"tokenselect", SIFT_POLICY_TOKENSELECT, 512, 0, 0, 0, 0, 1, 0.9f, false, 0},
        {"tokenselect, no Selection Cache, sparse prefill", SIFT_POLICY_TOKENSELECT, 512, 0, 1, 0, 0, 1, SIFT_SEL_CACHE_OFF, false, 0},
        {"streaming, 2 sequences", SIFT_POLICY_STREAMING, 512, 0, 0, 0, 0, 2, 0.9f, false, 0},
        {"h2o", SIFT_POLICY_H2O, 512, 0, 0, 0, 0, 1, 0.9f, false, 0},
        {"butler, neighbour fetch", SIFT_POLICY_BUTLER, 512, 0, 0, 1, 0, 1, 0.9f, true, 0},
        {"tokenselect, KV offload (256 tokens on the device)", SIFT_POLICY_TOKENSELECT, 512, 256, 0, 0, 0, 1, 0.9f, false, 0},
        {"butler, KV offload of V only", SIFT_POLICY_BUTLER, 512, 256, 0, 0, 1, 1, 0.9f, true, 0},
        /* a fixed interval under offload stages the kept lists' rows on the device */
        {"butler, interval 4, KV offload", SIFT_POLICY_BUTLER, 512, 256, 0, 0, 0, 1, 0.9f, true, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_memory_case(kind, model, predictor, &cases[i]);

    /* a context far beyond the host's memory does not fit; the device's free memory is known on the CPU */
    sift_context *ctx = test_context_open(kind, "too large", false);
    if (!ctx) return;
    sift_session_config sc = sift_session_config_default();
    sc.n_ctx = INT32_MAX;
    sc.kv_type = SIFT_F32;
    sc.n_seq = 64;
    sc.pool_tokens = INT32_MAX;
    sift_memory_estimate est;
    const sift_status s = sift_model_estimate(ctx, model, NULL, &sc, &est);
    if (kind == SIFT_BACKEND_CPU)
        check(s == SIFT_OK && est.device_free > 0 && est.fits == 0 && est.kv_device_tokens == 0, "cpu",
              "a KV pool of 2^31 f32 tokens: does not fit the host's available memory, nothing to offload to");
    else
        check(s == SIFT_OK && est.fits != 1 && (est.fits == -1) == (est.device_free == 0), sift_backend_kind_name(kind),
              "a KV pool of 2^31 f32 tokens: does not fit (or the device cannot tell)");
    sc = sift_session_config_default();
    sc.policy = SIFT_POLICY_BUTLER;
    check(sift_model_estimate(ctx, model, NULL, &sc, &est) == SIFT_E_INVALID, sift_backend_kind_name(kind),
          "the butler policy without a predictor is refused, as by sift_session_create");
    sift_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "logs") != 0 && strcmp(argv[1], "memory") != 0) ||
        (strcmp(argv[1], "memory") == 0 && argc < 4)) {
        fprintf(stderr, "usage: %s logs MODEL.gguf | memory MODEL.gguf PREDICTOR.gguf\n", argv[0]);
        return 2;
    }
    if (!test_model_exists(argv[2])) return 77;
    for (int kind = 0; kind < SIFT_BACKEND_COUNT; kind++) {
        const int checks_before = n_checks;
        test_case_begin(argv[1], sift_backend_kind_name((sift_backend_kind)kind));
        if (strcmp(argv[1], "logs") == 0) test_logs((sift_backend_kind)kind, argv[2]);
        else test_memory((sift_backend_kind)kind, argv[2], argv[3]);
        if (n_checks == checks_before) n_cases--; /* skipped: no case ran */
    }
    return test_summary(argv[1], NULL);
}
