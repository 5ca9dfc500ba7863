/* `sift eval`: the quality of every selection policy at given budgets, against dense attention.
 *
 * Text mode (--text FILE): the first --prefix tokens are prefilled with dense attention, then
 * every later token is fed one decode step at a time under each policy; reported per policy and
 * budget: perplexity of those tokens, top-1 agreement with dense, and the attention-level
 * measures (dense attention mass recalled by the attended set, relative error of the attention
 * output) over the real queries and keys of the run.
 *
 * Retrieval mode (--retrieval FILE, the test set written by tools/retrieval/train.py): each sample
 * is prefilled up to its first query, then decoded one step at a time under each policy; reported:
 * the fraction of answer characters predicted (greedy) correctly, per sample length.
 *
 * Every policy runs in one session after sift_session_rewind, so all see the same prefill. Uses
 * only the public API. */
#include "cli.h"
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *model_path, *backend, *text_path, *retrieval_path;
    int64_t threads; /* -t: the CPU backend's threads, 0: one per core */
    sift_policy policies[32];
    bool extrapolated[32]; /* the policy runs with keys cached before RoPE */
    int interval[32];      /* butler: its prediction interval */
    bool neighbors[32];    /* butler: with neighbour fetch */
    bool int8_keys[32];    /* butler: int8 projected keys (a session of its own) */
    int n_policies;
    cli_butler butler;
    cli_offload offload;       /* --kv-offload, --kv-offload-v-only */
    int64_t kv_device_tokens;  /* their device pool in tokens (0: no offload) */
    sift_predictor *predictor;
    int64_t *budgets; /* n_budgets values (malloc'd) */
    int n_budgets;
    int64_t sink, window, prefix, max_tokens, samples, skip, length;
    float sel_cache;
    bool json;
    const char *plot_path; /* --plot FILE.svg */
} eval_options;

static void usage(FILE *f)
{
    fputs("usage: sift eval -m MODEL.gguf (--text FILE | --retrieval FILE) [options]\n"
          "\n"
          "Runs the same tokens under every policy and budget and prints, against dense attention:\n"
          "  --text: perplexity of the tokens after the prefix, top-1 agreement with dense, the dense\n"
          "          attention mass recalled by the attended set and the relative error of the\n"
          "          attention output (means over decode steps, layers and heads);\n"
          "  --retrieval: accuracy on the answer characters of a retrieval test set, per length.\n"
          "\n"
          "options:\n"
          "  -m, --model PATH     GGUF model\n"
          "  --text FILE          a text file (tokenized with the model's tokenizer, BOS first; at most\n"
          "                       256 MiB)\n"
          "  --retrieval FILE     a retrieval test set (tools/retrieval/README.md)\n"
          "  --policies LIST      comma-separated (default dense,tokenselect,streaming,h2o,snapkv,quest,oracle,\n"
          "                       and butler with --predictor);\n"
          "                       tokenselect+x and streaming+x run with length extrapolation (SPEC 6) in a\n"
          "                       session of their own, prefilled token by token\n"
          "  --budgets LIST       k values, any number of them (default 64,128,256; dense runs once)\n"
          "  --sink S             (default 4)\n"
          "  --window W           (default 64)\n"
          "  --prefix N           text: tokens prefilled before scoring starts (default 256)\n"
          "  --max-tokens N       text: use at most N tokens of the file (default 4096)\n"
          "  --samples N          retrieval: at most N samples of each length (default: all)\n"
          "  --skip N             retrieval: leave out the first N samples of each length (to split a run)\n"
          "  --length N           retrieval: only the samples of N tokens, BOS included (a length\n"
          "                       no sample has is an error that lists those present)\n"
          "  --sel-cache T|off    TokenSelect's Selection Cache threshold (default off: selection alone)\n"
          "  --predictor FILE     TokenButler's predictor: adds butler to the default policies; in\n"
          "                       --policies, butler:iN runs it with prediction interval N and\n"
          "                       butler:nf with neighbour fetch (butler:i4:nf both)\n"
          "  --kv-offload SIZE    KV offload: SIZE of the KV pool on the device (tokens, or bytes with K,\n"
          "                       M, G, T), the rest in host memory the device reads (sift run --help);\n"
          "                       every figure equals the resident run's\n"
          "  --kv-offload-v-only  with --kv-offload: only V moves to the host\n"
          "  --backend B          cpu, vulkan or cuda (default: cuda, else a Vulkan GPU, else cpu;\n                       `sift devices` shows the choice)\n"
          "  -t, --threads N      the CPU backend's threads (default: one per core)\n"
          "  --json               one JSON object per result line (with each policy's Selection Cache\n"
          "                       hits and steps, and its top-k warm start's hits and misses)\n"
          "  --plot FILE.svg      also draw the results against the budget, one line per policy\n"
          "                       (retrieval: accuracy on all lengths; text: top-1 agreement with\n"
          "                       dense; dense, which has no budget, as a flat line)\n",
          f);
}

/* A comma-separated list of whole numbers >= 0, of any length, into a new array *out (replacing
 * the previous one on success). */
static bool parse_list_i64(const char *s, int64_t **out, int *n)
{
    if (!s || !*s) return false;
    size_t cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    if (cap > 100000) return false;
    int64_t *v = malloc(cap * sizeof *v);
    if (!v) return false;
    int got = 0;
    while (*s) {
        char *end;
        errno = 0;
        const long long x = strtoll(s, &end, 10);
        if (end == s || x < 0 || errno || (*end && *end != ',') || (*end == ',' && !end[1])) {
            free(v);
            return false;
        }
        v[got++] = x;
        s = *end == ',' ? end + 1 : end;
    }
    free(*out);
    *out = v;
    *n = got;
    return true;
}

/* Rows of a policy: dense ignores the budget and runs once. */
static int budgets_of(const eval_options *o, int pi) { return o->policies[pi] == SIFT_POLICY_DENSE ? 1 : o->n_budgets; }

static bool parse_policies(const char *s, eval_options *o)
{
    o->n_policies = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s ? s : "");
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (o->n_policies == (int)(sizeof o->policies / sizeof o->policies[0])) return false;
        o->interval[o->n_policies] = 1;
        o->neighbors[o->n_policies] = false;
        o->int8_keys[o->n_policies] = false;
        if (!strncmp(tok, "butler:", 7)) { /* butler's variants: :iN, :nf */
            for (char *opt = tok + 6; opt && *opt == ':';) {
                char *next = strchr(opt + 1, ':');
                if (next) *next = 0;
                long long iv = 0;
                char *end = NULL;
                if (!strcmp(opt + 1, "nf")) o->neighbors[o->n_policies] = true;
                else if (!strcmp(opt + 1, "int8")) o->int8_keys[o->n_policies] = true;
                else if (opt[1] == 'i' && (iv = strtoll(opt + 2, &end, 10)) >= 1 && iv <= 1024 && end && !*end)
                    o->interval[o->n_policies] = (int)iv;
                else return false;
                if (next) *next = ':';
                opt = next;
            }
            tok[6] = 0;
        }
        const size_t len = strlen(tok);
        const bool x = len > 2 && !strcmp(tok + len - 2, "+x");
        if (x) tok[len - 2] = 0;
        sift_policy p;
        if (sift_policy_parse(tok, &p) != SIFT_OK) return false;
        if (x && p != SIFT_POLICY_TOKENSELECT && p != SIFT_POLICY_STREAMING) return false;
        o->policies[o->n_policies] = p;
        o->extrapolated[o->n_policies++] = x;
    }
    return o->n_policies > 0;
}

/* -log softmax(logits)[token], in double. */
static double nll(const float *logits, int n_vocab, int32_t token)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n_vocab; i++) mx = fmax(mx, (double)logits[i]);
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) + mx - (double)logits[token];
}

static int32_t argmax(const float *logits, int n_vocab)
{
    int32_t best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* One policy's run over tokens [from, n): feeds each token, scores the next one. */
typedef struct {
    double nll_sum;
    int64_t scored, agree, correct, answers;
    double recall, err;
    int64_t quality_n, sc_hits, sc_steps;
    int64_t warm_hits, warm_misses; /* selections the top-k's warm start answered, and its fallbacks */
    double decode_s; /* wall time of the decode steps */
} run_result;

static sift_status decode_range(sift_session *s, const int32_t *ids, int64_t from, int64_t n, int n_vocab,
                                const int32_t *dense_top1, int32_t *top1_out, const bool *is_answer, run_result *r)
{
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits) return SIFT_E_NOMEM;
    sift_status st = SIFT_OK;
    for (int64_t i = from; i + 1 < n && st == SIFT_OK; i++) {
        st = sift_session_eval(s, &ids[i], 1, logits);
        if (st != SIFT_OK) break;
        const int32_t best = argmax(logits, n_vocab);
        r->nll_sum += nll(logits, n_vocab, ids[i + 1]);
        r->scored++;
        if (dense_top1) r->agree += best == dense_top1[i + 1];
        if (top1_out) top1_out[i + 1] = best;
        if (is_answer && is_answer[i + 1]) {
            r->answers++;
            r->correct += best == ids[i + 1];
        }
    }
    free(logits);
    return st;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The KV pools of the first session with offload, once (stderr). */
static void show_pools_once(const sift_session *s)
{
    static bool shown = false;
    if (shown || !s) return;
    sift_kv_pool_info p;
    if (sift_session_kv_pools(s, &p) != SIFT_OK || p.host_pages == 0) return;
    cli_print_kv_pools(stderr, "sift eval", s);
    shown = true;
}

static sift_session_config session_config(const eval_options *o, int64_t n_ctx, bool extrapolate)
{
    sift_session_config cfg = sift_session_config_default();
    cfg.n_ctx = n_ctx;
    cfg.sink = o->sink;
    cfg.window = o->window;
    cfg.budget = o->budgets[0];
    cfg.sel_cache = o->sel_cache;
    cfg.eval_mode = !extrapolate;
    cfg.extrapolate = extrapolate;
    cfg.policy = extrapolate ? SIFT_POLICY_TOKENSELECT : SIFT_POLICY_DENSE;
    cfg.predictor = extrapolate ? NULL : o->predictor;
    cfg.predictor_keys = cli_butler_keys(&o->butler);
    cfg.kv_device_tokens = o->kv_device_tokens;
    cfg.kv_offload_v_only = o->kv_device_tokens > 0 && o->offload.v_only;
    return cfg;
}

/* The session a policy runs in: the shared one (prefilled densely once), or a session of its own
 * prefilled to `from` (replacing the previous one in *own): for an extrapolated policy, keys
 * cached before RoPE and prefilled token by token; for butler with int8 keys, its projected keys
 * cached in int8. */
static sift_status session_for(const eval_options *o, int pi, int64_t k, sift_model *m, sift_session *shared,
                               const int32_t *ids, int64_t n_ctx, int64_t from, sift_session **own, sift_session **out)
{
    *out = shared;
    if (!o->extrapolated[pi] && !o->int8_keys[pi]) return SIFT_OK;
    sift_session_destroy(*own);
    *own = NULL;
    sift_session_config xc = session_config(o, n_ctx, o->extrapolated[pi]);
    if (o->int8_keys[pi]) xc.predictor_keys = SIFT_I8;
    xc.policy = o->policies[pi];
    xc.budget = k;
    sift_status st = sift_session_create(m, &xc, own);
    if (st == SIFT_OK) show_pools_once(*own);
    if (st == SIFT_OK) st = sift_session_eval(*own, ids, (size_t)from, NULL);
    *out = *own;
    return st;
}

/* Runs policy p (budget k) from position `from` of a session prefilled to `from`. */
static sift_status run_policy(sift_session *s, const eval_options *o, sift_policy p, int64_t k, const int32_t *ids,
                              int64_t from, int64_t n, int n_vocab, const int32_t *dense_top1, int32_t *top1_out,
                              const bool *is_answer, bool measure, run_result *r)
{
    memset(r, 0, sizeof *r);
    sift_status st = sift_session_rewind(s, 0, from);
    if (st == SIFT_OK) st = sift_session_set_policy(s, p, o->sink, o->window, k);
    double rec0 = 0, err0 = 0;
    int64_t qn0 = 0;
    if (st == SIFT_OK && measure) st = sift_session_attention_quality(s, &rec0, &err0, &qn0);
    const double t0 = now_s();
    if (st == SIFT_OK) st = decode_range(s, ids, from, n, n_vocab, dense_top1, top1_out, is_answer, r);
    r->decode_s = now_s() - t0;
    if (st == SIFT_OK && measure) {
        double rec1, err1;
        int64_t qn1;
        st = sift_session_attention_quality(s, &rec1, &err1, &qn1);
        r->quality_n = qn1 - qn0;
        if (r->quality_n > 0) {
            r->recall = (rec1 * (double)qn1 - rec0 * (double)qn0) / (double)r->quality_n;
            r->err = (err1 * (double)qn1 - err0 * (double)qn0) / (double)r->quality_n;
        }
    }
    if (st == SIFT_OK) st = sift_session_sel_cache_stats(s, -1, &r->sc_hits, &r->sc_steps);
    if (st == SIFT_OK) st = sift_session_select_warm_stats(s, -1, &r->warm_hits, &r->warm_misses);
    return st;
}

static const char *policy_label(const eval_options *o, int i, char *buf, size_t len)
{
    char iv[16] = "";
    if (o->interval[i] > 1) snprintf(iv, sizeof iv, ":i%d", o->interval[i]);
    snprintf(buf, len, "%s%s%s%s%s", sift_policy_name(o->policies[i]), o->extrapolated[i] ? "+x" : "", iv,
             o->neighbors[i] ? ":nf" : "", o->int8_keys[i] ? ":int8" : "");
    return buf;
}

/* Policy pi's TokenButler settings on the session (a no-op for the other policies). */
static sift_status set_variant(sift_session *s, const eval_options *o, int pi)
{
    if (o->policies[pi] != SIFT_POLICY_BUTLER) return SIFT_OK;
    return sift_session_set_butler(s, o->interval[pi], o->neighbors[pi]);
}

/* --plot: a policy's figure at budget index bi; dense, run once, is drawn flat over every budget. */
static bool plot_result(plot *pl, const eval_options *o, int pi, int bi, const char *label, double y)
{
    if (!pl) return true;
    if (o->policies[pi] != SIFT_POLICY_DENSE) return plot_add(pl, label, (double)o->budgets[bi], y);
    for (int b = 0; b < o->n_budgets; b++)
        if (!plot_add(pl, label, (double)o->budgets[b], y)) return false;
    return true;
}

/* --plot: a chart of the results against the budget (log scale where every budget is > 0). */
static plot *plot_for(const eval_options *o, const char *what)
{
    if (!o->plot_path) return NULL;
    bool log_x = true;
    for (int b = 0; b < o->n_budgets; b++) log_x = log_x && o->budgets[b] > 0;
    char title[160];
    snprintf(title, sizeof title, "sift eval: %s vs budget k (S=%lld, W=%lld)", what, (long long)o->sink, (long long)o->window);
    return plot_new(title, "budget k (tokens chosen per step)", what, log_x, false);
}

/* Writes the chart (when --plot asked for one); 0, or 1 with a message. */
static int plot_finish(const eval_options *o, plot *pl, bool complete)
{
    if (!o->plot_path) return 0;
    int rc = 0;
    if (!pl || !complete) {
        fprintf(stderr, "sift eval: out of host memory for the plot\n");
        rc = 1;
    } else if (!plot_write_svg(pl, o->plot_path)) {
        fprintf(stderr, "sift eval: cannot write the plot %s: %s\n", o->plot_path, strerror(errno));
        rc = 1;
    } else if (!o->json)
        fprintf(stderr, "sift eval: plot written to %s\n", o->plot_path);
    plot_free(pl);
    return rc;
}

static int eval_text(const eval_options *o, sift_context *ctx, sift_model *m, const sift_model_info *info)
{
    size_t len = 0;
    char *text = cli_read_file(o->text_path, &len);
    if (!text) {
        fprintf(stderr, "sift eval: cannot read %s: %s\n", o->text_path, cli_read_error(errno));
        return 1;
    }
    int32_t *ids = malloc((len + 8) * sizeof *ids);
    size_t n_ids = 0;
    sift_status st = ids ? sift_model_tokenize(m, text, len, info->bos >= 0, ids, len + 8, &n_ids) : SIFT_E_NOMEM;
    free(text);
    const int64_t n = (int64_t)n_ids < o->max_tokens ? (int64_t)n_ids : o->max_tokens;
    if (st == SIFT_OK && n <= o->prefix + 1) {
        fprintf(stderr, "sift eval: %lld tokens: need more than --prefix %lld\n", (long long)n, (long long)o->prefix);
        free(ids);
        return 1;
    }
    int32_t *dense_top1 = calloc((size_t)n, sizeof *dense_top1);
    plot *pl = plot_for(o, "top-1 agreement with dense (%)");
    bool plotted = true;
    sift_session *s = NULL, *sx = NULL;
    sift_session_config cfg = session_config(o, n, false);
    if (st == SIFT_OK) st = sift_session_create(m, &cfg, &s);
    if (st == SIFT_OK) show_pools_once(s);
    if (st == SIFT_OK) st = sift_session_eval(s, ids, (size_t)o->prefix, NULL);
    run_result dense;
    if (st == SIFT_OK)
        st = run_policy(s, o, SIFT_POLICY_DENSE, o->budgets[0], ids, o->prefix, n, info->n_vocab, NULL, dense_top1, NULL, true,
                        &dense);
    if (st == SIFT_OK && !o->json)
        printf("sift eval  %s  on %s\n%lld tokens of %s: prefix %lld prefilled, %lld scored; S=%lld W=%lld\n\n"
               "%-14s %7s %10s %9s %9s %10s %9s\n",
               o->model_path, sift_context_device_name(ctx), (long long)n, o->text_path, (long long)o->prefix,
               (long long)dense.scored, (long long)o->sink, (long long)o->window, "policy", "budget", "perplexity",
               "top1=dense", "recall", "out error", "sel-cache");
    for (int pi = 0; pi < o->n_policies && st == SIFT_OK; pi++) {
        const sift_policy p = o->policies[pi];
        for (int bi = 0; bi < budgets_of(o, pi) && st == SIFT_OK; bi++) {
            const int64_t k = o->budgets[bi];
            run_result r = {0};
            sift_session *run_in = NULL;
            st = session_for(o, pi, k, m, s, ids, n, o->prefix, &sx, &run_in);
            if (st == SIFT_OK) st = set_variant(run_in, o, pi);
            if (st == SIFT_OK)
                st = run_policy(run_in, o, p, k, ids, o->prefix, n, info->n_vocab, dense_top1, NULL, NULL, !o->extrapolated[pi], &r);
            if (st != SIFT_OK) break;
            char label[32], sc[32] = "-";
            policy_label(o, pi, label, sizeof label);
            if (r.sc_steps) snprintf(sc, sizeof sc, "%.1f%%", 100.0 * (double)r.sc_hits / (double)r.sc_steps);
            const double ppl = exp(r.nll_sum / (double)r.scored), agree = (double)r.agree / (double)r.scored;
            plotted = plotted && plot_result(pl, o, pi, bi, label, 100.0 * agree);
            if (o->json) { /* null where a figure does not exist: no quality measured, nothing scored */
                printf("{\"mode\": \"text\", \"policy\": \"%s\", \"budget\": %lld, \"sink\": %lld, \"window\": %lld, \"tokens\": %lld, "
                       "\"perplexity\": ",
                       label, p == SIFT_POLICY_DENSE ? 0LL : (long long)k, (long long)o->sink, (long long)o->window,
                       (long long)r.scored);
                cli_json_fixed(ppl, 4);
                printf(", \"top1_agreement\": ");
                cli_json_fixed(agree, 4);
                printf(", \"recall\": ");
                cli_json_fixed(r.quality_n ? r.recall : NAN, 4);
                printf(", \"rel_error\": ");
                cli_json_fixed(r.quality_n ? r.err : NAN, 4);
                printf(", \"sel_cache_hits\": %lld, \"sel_cache_steps\": %lld, \"warm_hits\": %lld, \"warm_misses\": %lld}\n",
                       (long long)r.sc_hits, (long long)r.sc_steps, (long long)r.warm_hits, (long long)r.warm_misses);
            } else if (r.quality_n)
                printf("%-14s %7lld %10.4f %8.1f%% %9.4f %10.4f %9s\n", label, p == SIFT_POLICY_DENSE ? 0LL : (long long)k, ppl,
                       100.0 * agree, r.recall, r.err, sc);
            else
                printf("%-14s %7lld %10.4f %8.1f%% %9s %10s %9s\n", label, p == SIFT_POLICY_DENSE ? 0LL : (long long)k, ppl,
                       100.0 * agree, "-", "-", sc);
            fflush(stdout);
        }
    }
    if (st != SIFT_OK) fprintf(stderr, "sift eval: %s\n", sift_last_error());
    const int plot_rc = st == SIFT_OK ? plot_finish(o, pl, plotted) : (plot_free(pl), 0);
    sift_session_destroy(s);
    sift_session_destroy(sx);
    free(ids);
    free(dense_top1);
    return st == SIFT_OK ? plot_rc : 1;
}

/* A retrieval sample: its text's tokens (BOS first) and which positions are answers. */
typedef struct {
    int32_t *ids;
    bool *is_answer;
    int64_t n, first_answer;
} sample;

static void free_samples(sample *v, int n)
{
    for (int i = 0; i < n; i++) {
        free(v[i].ids);
        free(v[i].is_answer);
    }
    free(v);
}

static int load_samples(const char *who, const char *path, sift_model *m, const sift_model_info *info, sample **out, int *n_out)
{
    size_t len = 0;
    char *buf = cli_read_file(path, &len);
    if (!buf) {
        fprintf(stderr, "%s: cannot read %s: %s\n", who, path, cli_read_error(errno));
        return 1;
    }
    int cap = 0, n = 0;
    sample *v = NULL;
    char *line = buf, *text = NULL;
    int rc = 0;
    while (line && *line && rc == 0) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (line[0] == '#' && line[1] == ' ') { /* a comment ("# ..."); a text may start with a record "#KEY" */
        } else if (!text) {
            text = line;
        } else { /* the offsets line of `text` */
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                sample *p = realloc(v, (size_t)cap * sizeof *p);
                if (!p) {
                    rc = 1;
                    break;
                }
                v = p;
            }
            sample *sp = &v[n];
            const size_t tl = strlen(text);
            sp->ids = malloc((tl + 8) * sizeof *sp->ids);
            sp->is_answer = calloc(tl + 8, sizeof *sp->is_answer);
            size_t got = 0;
            if (!sp->ids || !sp->is_answer || sift_model_tokenize(m, text, tl, info->bos >= 0, sp->ids, tl + 8, &got) != SIFT_OK ||
                got != tl + (info->bos >= 0)) {
                fprintf(stderr, "%s: sample %d of %s does not tokenize to one token per character (%zu tokens, %zu chars)\n",
                        who, n + 1, path, got, tl);
                free(sp->ids);
                free(sp->is_answer);
                rc = 1;
                break;
            }
            sp->n = (int64_t)got;
            sp->first_answer = -1;
            const int64_t shift = info->bos >= 0;
            for (char *p = line; *p;) {
                char *end;
                const long long off = strtoll(p, &end, 10);
                if (end == p) break;
                if (off >= 0 && off + shift < sp->n) {
                    sp->is_answer[off + shift] = true;
                    if (sp->first_answer < 0 || off + shift < sp->first_answer) sp->first_answer = off + shift;
                }
                p = end;
            }
            if (sp->first_answer < 1) {
                fprintf(stderr, "%s: sample %d of %s has no answer offsets\n", who, n + 1, path);
                free(sp->ids);
                free(sp->is_answer);
                rc = 1;
                break;
            }
            n++;
            text = NULL;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
    if (rc != 0) {
        free_samples(v, n);
        v = NULL;
        n = 0;
    }
    *out = v;
    *n_out = n;
    if (rc == 0 && n == 0) {
        fprintf(stderr, "%s: no samples in %s\n", who, path);
        rc = 1;
    }
    return rc;
}

static int eval_retrieval(const eval_options *o, sift_context *ctx, sift_model *m, const sift_model_info *info)
{
    sample *smp = NULL;
    int n_smp = 0;
    if (load_samples("sift eval", o->retrieval_path, m, info, &smp, &n_smp) != 0) return 1;
    /* lengths present, ascending (as many as there are samples) */
    int64_t *lengths = malloc((size_t)n_smp * sizeof *lengths);
    int *used = calloc((size_t)n_smp, sizeof *used), *seen_of = calloc((size_t)n_smp, sizeof *seen_of);
    bool *chosen = calloc((size_t)n_smp, sizeof *chosen);
    int n_len = 0, n_chosen = 0;
    for (int i = 0; lengths && i < n_smp; i++) {
        bool seen = false;
        for (int j = 0; j < n_len; j++) seen = seen || lengths[j] == smp[i].n;
        if (!seen) lengths[n_len++] = smp[i].n;
    }
    for (int i = 1; i < n_len; i++)
        for (int j = i; j > 0 && lengths[j] < lengths[j - 1]; j--) {
            const int64_t t = lengths[j];
            lengths[j] = lengths[j - 1];
            lengths[j - 1] = t;
        }
    const int rows = o->n_policies * o->n_budgets;
    int64_t *correct = calloc((size_t)rows * (size_t)n_smp, sizeof *correct),
            *answers = calloc((size_t)rows * (size_t)n_smp, sizeof *answers);
    int64_t *sc_hits = calloc((size_t)rows, sizeof *sc_hits), *sc_steps = calloc((size_t)rows, sizeof *sc_steps);
    int64_t *warm_hits = calloc((size_t)rows, sizeof *warm_hits), *warm_misses = calloc((size_t)rows, sizeof *warm_misses);
    sift_status st = lengths && used && seen_of && chosen && correct && answers && sc_hits && sc_steps && warm_hits && warm_misses
                         ? SIFT_OK
                         : SIFT_E_NOMEM;
    int rc = st == SIFT_OK ? 0 : 1;
    if (st != SIFT_OK) fprintf(stderr, "sift eval: out of host memory for %d samples\n", n_smp);
    /* the samples that run: --length, then --skip, then --samples, per length */
    for (int i = 0; i < n_smp && st == SIFT_OK; i++) {
        int li = 0;
        while (lengths[li] != smp[i].n) li++;
        if (o->length > 0 && smp[i].n != o->length) continue;
        if (seen_of[li]++ < o->skip) continue;
        if (o->samples > 0 && used[li] >= o->samples) continue;
        used[li]++;
        chosen[i] = true;
        n_chosen++;
    }
    if (st == SIFT_OK && n_chosen == 0) {
        fprintf(stderr, "sift eval: no samples to run in %s", o->retrieval_path);
        if (o->length > 0) fprintf(stderr, " of length %lld", (long long)o->length);
        if (o->skip > 0) fprintf(stderr, " after --skip %lld", (long long)o->skip);
        fprintf(stderr, " (sample lengths present, in tokens with BOS:");
        for (int li = 0; li < n_len; li++) fprintf(stderr, " %lld", (long long)lengths[li]);
        fprintf(stderr, ")\n");
        rc = 1;
        st = SIFT_E_INVALID;
    }
    if (!o->json) fprintf(stderr, "sift eval: %d samples from %s on %s\n", n_smp, o->retrieval_path, sift_context_device_name(ctx));
    int done_n = 0;
    for (int i = 0; i < n_smp && st == SIFT_OK; i++) {
        if (!chosen[i]) continue;
        int li = 0;
        while (lengths[li] != smp[i].n) li++;
        /* prefill up to a little before the first answer: the query's own tokens run under the policy */
        const int64_t from = smp[i].first_answer > 16 ? smp[i].first_answer - 16 : 1;
        sift_session *s = NULL, *sx = NULL;
        sift_session_config cfg = session_config(o, smp[i].n, false);
        st = sift_session_create(m, &cfg, &s);
        if (st == SIFT_OK) show_pools_once(s);
        if (st == SIFT_OK) st = sift_session_eval(s, smp[i].ids, (size_t)from, NULL);
        for (int pi = 0; pi < o->n_policies && st == SIFT_OK; pi++)
            for (int bi = 0; bi < budgets_of(o, pi) && st == SIFT_OK; bi++) {
                run_result r = {0};
                sift_session *run_in = NULL;
                st = session_for(o, pi, o->budgets[bi], m, s, smp[i].ids, smp[i].n, from, &sx, &run_in);
                if (st == SIFT_OK) st = set_variant(run_in, o, pi);
                if (st == SIFT_OK)
                    st = run_policy(run_in, o, o->policies[pi], o->budgets[bi], smp[i].ids, from, smp[i].n, info->n_vocab, NULL,
                                    NULL, smp[i].is_answer, false, &r);
                correct[(pi * o->n_budgets + bi) * n_len + li] += r.correct;
                answers[(pi * o->n_budgets + bi) * n_len + li] += r.answers;
                sc_hits[pi * o->n_budgets + bi] += r.sc_hits;
                sc_steps[pi * o->n_budgets + bi] += r.sc_steps;
                warm_hits[pi * o->n_budgets + bi] += r.warm_hits;
                warm_misses[pi * o->n_budgets + bi] += r.warm_misses;
            }
        sift_session_destroy(s);
        sift_session_destroy(sx);
        if (!o->json) fprintf(stderr, "\rsift eval: sample %d of %d done", ++done_n, n_chosen);
    }
    if (!o->json && n_chosen > 0) fputc('\n', stderr);
    plot *pl = st == SIFT_OK ? plot_for(o, "accuracy on the answers (%)") : NULL;
    bool plotted = true;
    if (st == SIFT_OK) {
        if (!o->json) {
            printf("sift eval  %s  retrieval accuracy (answer characters, greedy); S=%lld W=%lld\n\n%-14s %7s", o->model_path,
                   (long long)o->sink, (long long)o->window, "policy", "budget");
            for (int li = 0; li < n_len; li++)
                if (used[li]) printf(" %9lld", (long long)lengths[li]);
            printf(" %9s\n", "all");
        }
        for (int pi = 0; pi < o->n_policies; pi++)
            for (int bi = 0; bi < budgets_of(o, pi); bi++) {
                char label[32];
                policy_label(o, pi, label, sizeof label);
                int64_t c_all = 0, a_all = 0;
                const int row = pi * o->n_budgets + bi;
                if (!o->json) printf("%-14s %7lld", label, o->policies[pi] == SIFT_POLICY_DENSE ? 0LL : (long long)o->budgets[bi]);
                for (int li = 0; li < n_len; li++) {
                    if (!used[li]) continue;
                    const int64_t c = correct[row * n_len + li], a = answers[row * n_len + li];
                    c_all += c;
                    a_all += a;
                    if (o->json) {
                        printf("{\"mode\": \"retrieval\", \"policy\": \"%s\", \"budget\": %lld, \"length\": %lld, \"samples\": %d, "
                               "\"answers\": %lld, \"accuracy\": ",
                               label, o->policies[pi] == SIFT_POLICY_DENSE ? 0LL : (long long)o->budgets[bi],
                               (long long)lengths[li], used[li], (long long)a);
                        cli_json_fixed(a ? (double)c / (double)a : NAN, 4); /* null: no answer to score */
                        printf(", \"sel_cache_hits\": %lld, \"sel_cache_steps\": %lld, \"warm_hits\": %lld, \"warm_misses\": %lld}\n",
                               (long long)sc_hits[row], (long long)sc_steps[row], (long long)warm_hits[row],
                               (long long)warm_misses[row]);
                    } else
                        printf(" %8.1f%%", a ? 100.0 * (double)c / (double)a : 0.0);
                }
                plotted = plotted && plot_result(pl, o, pi, bi, label, a_all ? 100.0 * (double)c_all / (double)a_all : NAN);
                if (!o->json && sc_steps[row])
                    printf(" %8.1f%%  (%s %.1f%%)\n", a_all ? 100.0 * (double)c_all / (double)a_all : 0.0,
                           o->policies[pi] == SIFT_POLICY_BUTLER ? "steps reusing lists" : "Selection Cache hits",
                           100.0 * (double)sc_hits[row] / (double)sc_steps[row]);
                else if (!o->json)
                    printf(" %8.1f%%\n", a_all ? 100.0 * (double)c_all / (double)a_all : 0.0);
            }
    } else if (rc == 0) {
        fprintf(stderr, "sift eval: %s\n", sift_last_error());
    }
    const int plot_rc = st == SIFT_OK ? plot_finish(o, pl, plotted) : (plot_free(pl), 0);
    free_samples(smp, n_smp);
    free(correct);
    free(answers);
    free(sc_hits);
    free(sc_steps);
    free(warm_hits);
    free(warm_misses);
    free(lengths);
    free(used);
    free(seen_of);
    free(chosen);
    return st == SIFT_OK ? plot_rc : 1;
}

static int eval_main(int argc, char **argv, eval_options *o)
{
    parse_policies("dense,tokenselect,streaming,h2o,snapkv,quest,oracle", o);
    bool policies_given = false;
    if (!parse_list_i64("64,128,256", &o->budgets, &o->n_budgets)) {
        fprintf(stderr, "sift eval: out of host memory\n");
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = val != NULL, takes = true;
        int butler_opt = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) o->json = true, takes = false, ok = true;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_path = val;
        else if (!strcmp(a, "--backend")) o->backend = val;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_parse_threads(val, &o->threads);
        else if (!strcmp(a, "--text")) o->text_path = val;
        else if (!strcmp(a, "--retrieval")) o->retrieval_path = val;
        else if (!strcmp(a, "--policies")) ok = parse_policies(val, o), policies_given = true;
        else if (!strcmp(a, "--budgets")) ok = parse_list_i64(val, &o->budgets, &o->n_budgets);
        else if (!strcmp(a, "--sink")) ok = cli_parse_i64(val, &o->sink) && o->sink >= 0;
        else if (!strcmp(a, "--window")) ok = cli_parse_i64(val, &o->window) && o->window >= 0;
        else if (!strcmp(a, "--prefix")) ok = cli_parse_i64(val, &o->prefix) && o->prefix >= 1;
        else if (!strcmp(a, "--max-tokens")) ok = cli_parse_i64(val, &o->max_tokens) && o->max_tokens >= 2;
        else if (!strcmp(a, "--samples")) ok = cli_parse_i64(val, &o->samples) && o->samples >= 0;
        else if (!strcmp(a, "--skip")) ok = cli_parse_i64(val, &o->skip) && o->skip >= 0;
        else if (!strcmp(a, "--length")) ok = cli_parse_i64(val, &o->length) && o->length >= 1;
        else if (!strcmp(a, "--sel-cache")) ok = cli_parse_sel_cache(val, &o->sel_cache);
        else if (!strcmp(a, "--plot")) o->plot_path = val;
        else if ((butler_opt = cli_parse_butler("sift eval", argc, argv, &i, &o->butler)) != 0) {
            if (butler_opt < 0) return 2;
            continue;
        } else if ((butler_opt = cli_parse_offload("sift eval", argc, argv, &i, &o->offload)) != 0) {
            if (butler_opt < 0) return 2;
            continue;
        } else {
            fprintf(stderr, "sift eval: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "sift eval: %s needs a valid value%s%s\n", a, val ? ", not " : "", val ? val : "");
            return 2;
        }
        if (takes) i++;
    }
    if (!policies_given && o->butler.predictor) parse_policies("dense,tokenselect,streaming,h2o,snapkv,quest,oracle,butler", o);
    if (!o->model_path || (!o->text_path == !o->retrieval_path)) {
        fprintf(stderr, "sift eval: give a model (-m) and one of --text or --retrieval (see --help)\n");
        return 2;
    }
    sift_context *ctx = NULL;
    sift_model *m = NULL;
    if (cli_open_model("sift eval", o->backend, o->threads, o->model_path, &ctx, &m) != 0) return 1;
    if (cli_load_predictor("sift eval", m, &o->butler, &o->predictor) != 0) {
        sift_model_destroy(m);
        sift_context_destroy(ctx);
        return 1;
    }
    sift_session_config offload_cfg = sift_session_config_default(); /* eval's cache: f16 */
    if (cli_offload_apply("sift eval", &o->offload, m, &offload_cfg) != 0) {
        sift_predictor_destroy(o->predictor);
        sift_model_destroy(m);
        sift_context_destroy(ctx);
        return 2;
    }
    o->kv_device_tokens = offload_cfg.kv_device_tokens;
    bool has_butler = false;
    for (int pi = 0; pi < o->n_policies; pi++) has_butler |= o->policies[pi] == SIFT_POLICY_BUTLER;
    if (has_butler && !o->predictor) {
        fprintf(stderr, "sift eval: the butler policy needs --predictor FILE\n");
        sift_model_destroy(m);
        sift_context_destroy(ctx);
        return 2;
    }
    sift_model_info info;
    sift_model_get_info(m, &info);
    const int rc = o->text_path ? eval_text(o, ctx, m, &info) : eval_retrieval(o, ctx, m, &info);
    sift_predictor_destroy(o->predictor);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    return rc;
}

int cli_eval(int argc, char **argv)
{
    eval_options o = {.sink = 4, .window = 64, .prefix = 256, .max_tokens = 4096, .sel_cache = SIFT_SEL_CACHE_OFF};
    const int rc = eval_main(argc, argv, &o);
    free(o.budgets);
    return rc;
}

/* ---- sift demo ----------------------------------------------------------------------------------
 * The retrieval model on a few of its shortest test samples under dense, TokenSelect, Quest and
 * streaming at one budget: the answers, the accuracy, the KV bytes one decode step reads per layer,
 * and the decode speed. The model and its test set are looked for relative to the current
 * directory, then to the source tree. */

#ifndef SIFT_SOURCE_ROOT
#define SIFT_SOURCE_ROOT "."
#endif

#define DEMO_MODEL "tools/retrieval/model/retrieval.gguf"
#define DEMO_SAMPLES "tools/retrieval/model/retrieval_test.txt"
#define DEMO_PREDICTOR "tools/butler/predictors/retrieval.butler.gguf"

static void usage_demo(FILE *f)
{
    fputs("usage: sift demo [options]\n"
          "\n"
          "Runs the retrieval model the repository ships (" DEMO_MODEL ") on the\n"
          "shortest samples of its test set (" DEMO_SAMPLES ", 4096 tokens each):\n"
          "each sample is prefilled once, then its queries are decoded under dense, tokenselect, butler\n"
          "(with the predictor " DEMO_PREDICTOR "),\n"
          "quest and streaming attention (k = 256, S = 4, W = 64). Prints, per policy, the answers of the\n"
          "first sample (expected and produced), the accuracy on all answer characters, the K/V bytes\n"
          "one decode step reads per layer (computed from the model's shape, f16 K/V) and the decode\n"
          "speed. The files are looked for in the current directory, then in the source tree.\n"
          "\n"
          "options:\n"
          "  -m, --model PATH     the retrieval model (default " DEMO_MODEL ")\n"
          "  --samples N          samples to run, 1 .. 16 (default 3)\n"
          "  --backend B          cpu, vulkan or cuda (default: cuda, else a Vulkan GPU, else cpu;\n"
          "                       `sift devices` shows the choice)\n"
          "  -t, --threads N      the CPU backend's threads (default: one per core)\n",
          f);
}

/* rel relative to the current directory if it is there, else to the source tree, into buf. */
static const char *demo_find(const char *rel, char *buf, size_t len)
{
    if (access(rel, R_OK) == 0) return rel;
    snprintf(buf, len, "%s/%s", SIFT_SOURCE_ROOT, rel);
    return access(buf, R_OK) == 0 ? buf : NULL;
}

/* The answer characters of a sample as text, runs separated by spaces: the expected tokens
 * (top1 NULL) or those predicted. Characters that are not one byte print as '?'. */
static void demo_answers(const sift_model *m, const sample *sp, const int32_t *top1, char *buf, size_t len)
{
    size_t at = 0;
    for (int64_t i = 0; i < sp->n && at + 2 < len; i++) {
        if (!sp->is_answer[i]) continue;
        if (at > 0 && !sp->is_answer[i - 1]) buf[at++] = ' ';
        char piece[16];
        size_t pl = 0;
        const int32_t id = top1 ? top1[i] : sp->ids[i];
        if (sift_model_token_piece(m, id, piece, sizeof piece, &pl) != SIFT_OK || pl != 1 || piece[0] < 0x21 || piece[0] > 0x7e)
            piece[0] = '?';
        buf[at++] = piece[0];
    }
    buf[at] = 0;
}

static int demo_run(const char *model_path, const char *samples_path, const char *predictor_path, int64_t n_want,
                    const char *backend, int64_t threads)
{
    static const sift_policy all[] = {SIFT_POLICY_DENSE, SIFT_POLICY_TOKENSELECT, SIFT_POLICY_BUTLER, SIFT_POLICY_QUEST,
                                      SIFT_POLICY_STREAMING};
    enum { NP_MAX = sizeof all / sizeof all[0] };
    sift_policy policies[NP_MAX];
    int NP = 0;
    int64_t budget = 256;
    eval_options o = {.sink = 4, .window = 64, .budgets = &budget, .n_budgets = 1, .sel_cache = SIFT_SEL_CACHE_OFF};
    sift_context *ctx = NULL;
    sift_model *m = NULL;
    if (cli_open_model("sift demo", backend, threads, model_path, &ctx, &m) != 0) return 1;
    o.butler.predictor = predictor_path;
    if (cli_load_predictor("sift demo", m, &o.butler, &o.predictor) != 0) {
        sift_model_destroy(m);
        sift_context_destroy(ctx);
        return 1;
    }
    for (int pi = 0; pi < NP_MAX; pi++)
        if (all[pi] != SIFT_POLICY_BUTLER || o.predictor) policies[NP++] = all[pi];
    sift_model_info info;
    sift_model_get_info(m, &info);
    sample *smp = NULL;
    int n_smp = 0;
    if (load_samples("sift demo", samples_path, m, &info, &smp, &n_smp) != 0) {
        sift_model_destroy(m);
        sift_context_destroy(ctx);
        return 1;
    }
    int64_t len = smp[0].n;
    for (int i = 1; i < n_smp; i++) len = smp[i].n < len ? smp[i].n : len;
    int32_t *top1 = calloc((size_t)len, sizeof *top1);
    char expected[128] = "", produced[NP_MAX][128];
    int64_t correct[NP_MAX] = {0}, answers[NP_MAX] = {0}, decoded[NP_MAX] = {0};
    double decode_s[NP_MAX] = {0}, prefill_s = 0;
    int ran = 0;
    sift_status st = top1 ? SIFT_OK : SIFT_E_NOMEM;
    fprintf(stderr, "sift demo: running on %s\n", sift_context_device_name(ctx));
    for (int i = 0; i < n_smp && ran < n_want && st == SIFT_OK; i++) {
        if (smp[i].n != len) continue;
        const int64_t from = smp[i].first_answer > 16 ? smp[i].first_answer - 16 : 1;
        sift_session *s = NULL;
        sift_session_config cfg = session_config(&o, len, false);
        st = sift_session_create(m, &cfg, &s);
        const double t0 = now_s();
        if (st == SIFT_OK) st = sift_session_eval(s, smp[i].ids, (size_t)from, NULL);
        prefill_s += now_s() - t0;
        for (int pi = 0; pi < NP && st == SIFT_OK; pi++) {
            run_result r;
            st = run_policy(s, &o, policies[pi], budget, smp[i].ids, from, len, info.n_vocab, NULL, top1, smp[i].is_answer,
                            false, &r);
            if (st != SIFT_OK) break;
            correct[pi] += r.correct;
            answers[pi] += r.answers;
            decoded[pi] += r.scored;
            decode_s[pi] += r.decode_s;
            if (ran == 0) demo_answers(m, &smp[i], top1, produced[pi], sizeof produced[pi]);
        }
        if (st == SIFT_OK && ran == 0) demo_answers(m, &smp[i], NULL, expected, sizeof expected);
        sift_session_destroy(s);
        if (st == SIFT_OK) fprintf(stderr, "\rsift demo: sample %d of %lld done", ++ran, (long long)n_want);
    }
    if (ran > 0) fputc('\n', stderr);
    if (st != SIFT_OK) {
        fprintf(stderr, "sift demo: %s\n", sift_last_error());
    } else {
        /* bytes one decode step reads per layer at the full context N = len: a row is one token's
         * K (or V) over the KV heads, f16 */
        const double row = (double)info.n_kv_heads * (double)info.head_dim * 2.0, n = (double)len;
        const double kept = (double)(o.sink + budget + o.window);
        const double pages = ceil(n / 16.0);
        sift_predictor_info pk;
        sift_predictor_get_info(o.predictor, &pk);
        printf("sift demo: a %d-layer retrieval model (%d KV heads x %d dims, f16 K/V) on %s\n", info.n_layers,
               info.n_kv_heads, info.head_dim, sift_context_device_name(ctx));
        printf("%d sample%s of %lld tokens, each prefilled once (%.1f s in all), then its queries decoded\n"
               "under each policy: k = %lld, S = %lld, W = %lld (S + k + W = %.0f of %lld tokens)\n\n",
               ran, ran == 1 ? "" : "s", (long long)len, prefill_s, (long long)budget, (long long)o.sink,
               (long long)o.window, kept, (long long)len);
        printf("expected answers, sample 1: %s\n\n", expected);
        printf("%-12s %-28s %9s %14s %9s\n", "policy", "answers, sample 1", "accuracy", "KV read/layer", "decode");
        for (int pi = 0; pi < NP; pi++) {
            double bytes = 2.0 * kept * row;
            if (policies[pi] == SIFT_POLICY_DENSE) bytes = 2.0 * n * row;
            if (policies[pi] == SIFT_POLICY_TOKENSELECT) bytes += (n - (double)(o.sink + o.window)) * row;
            if (policies[pi] == SIFT_POLICY_BUTLER) /* the projected keys it scores: d' f16 values per KV head */
                bytes += (n - (double)(o.sink + o.window)) * (double)info.n_kv_heads * (double)pk.key_dim * 2.0;
            if (policies[pi] == SIFT_POLICY_QUEST) bytes += 2.0 * pages * row;
            printf("%-12s %-28s %8.1f%% %10.1f KiB %6.1f t/s\n", sift_policy_name(policies[pi]), produced[pi],
                   answers[pi] ? 100.0 * (double)correct[pi] / (double)answers[pi] : 0.0, bytes / 1024.0,
                   decode_s[pi] > 0 ? (double)decoded[pi] / decode_s[pi] : 0.0);
        }
        printf("\naccuracy: answer characters predicted right (greedy), %lld per policy\n", (long long)answers[0]);
        printf("KV read per decode step and layer, at N = %lld: dense reads K and V of all N tokens;\n"
               "the others read K and V of the S + k + W tokens they attend, plus, for tokenselect, the K of\n"
               "the N - S - W tokens it scores, for butler their %d-dimensional projected keys, and for\n"
               "quest a min and a max key per 16-token page (counted as f16; sift keeps them on the host)\n",
               (long long)len, pk.key_dim);
        if (!o.predictor) printf("(butler left out: no predictor found at " DEMO_PREDICTOR ")\n");
        printf("decode: every policy runs in evaluation mode (a host mirror of the cache, so that all run\n"
               "after one prefill), which costs time: compare the policies, not with `sift run`\n");
    }
    free(top1);
    free_samples(smp, n_smp);
    sift_predictor_destroy(o.predictor);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    return st == SIFT_OK ? 0 : 1;
}

int cli_demo(int argc, char **argv)
{
    const char *model = NULL, *backend = NULL;
    int64_t samples = 3, threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = val != NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_demo(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = val;
        else if (!strcmp(a, "--backend")) backend = val;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = cli_parse_threads(val, &threads);
        else if (!strcmp(a, "--samples")) ok = cli_parse_i64(val, &samples) && samples >= 1 && samples <= 16;
        else {
            fprintf(stderr, "sift demo: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "sift demo: %s needs a valid value%s%s\n", a, val ? ", not " : "", val ? val : "");
            return 2;
        }
        i++;
    }
    char mbuf[4096], sbuf[4096], pbuf[4096];
    const bool own_model = model == NULL;
    if (!model) model = demo_find(DEMO_MODEL, mbuf, sizeof mbuf);
    const char *samples_path = demo_find(DEMO_SAMPLES, sbuf, sizeof sbuf);
    /* the committed predictor belongs to the committed model only */
    const char *predictor = own_model ? demo_find(DEMO_PREDICTOR, pbuf, sizeof pbuf) : NULL;
    if (!model || !samples_path) {
        fprintf(stderr, "sift demo: cannot find %s in the current directory or in %s (run it from the repository root)\n",
                !model ? DEMO_MODEL : DEMO_SAMPLES, SIFT_SOURCE_ROOT);
        return 1;
    }
    return demo_run(model, samples_path, predictor, samples, backend, threads);
}
