/* The runs `sift eval` and `sift demo` share: policies decoded over a range of tokens from one
 * prefill, and the retrieval test sets they read. */
#include "eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The KV pools of the first session with offload, once (stderr). */
void eval_show_pools_once(const sift_session *s)
{
    static bool shown = false;
    if (shown || !s) return;
    sift_kv_pool_info p;
    if (sift_session_kv_pools(s, &p) != SIFT_OK || p.host_pages == 0) return;
    cli_print_kv_pools(stderr, "sift eval", s);
    shown = true;
}

sift_session_config eval_session_config(const eval_options *o, int64_t n_ctx, bool extrapolate)
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
    cfg.predictor_keys = o->predictor_keys;
    cfg.kv_device_tokens = o->kv_device_tokens;
    cfg.kv_offload_v_only = o->kv_device_tokens > 0 && o->v_only;
    return cfg;
}

/* The session a policy runs in: the shared one (prefilled densely once), or a session of its own
 * prefilled to `from` (replacing the previous one in *own): for an extrapolated policy, keys
 * cached before RoPE and prefilled token by token; for butler with int8 keys, its projected keys
 * cached in int8. */
sift_status eval_session_for(const eval_options *o, int pi, int64_t k, sift_model *m, sift_session *shared,
                             const int32_t *ids, int64_t n_ctx, int64_t from, sift_session **own, sift_session **out)
{
    *out = shared;
    if (!o->pl.extrapolated[pi] && !o->pl.int8_keys[pi]) return SIFT_OK;
    sift_session_destroy(*own);
    *own = NULL;
    sift_session_config xc = eval_session_config(o, n_ctx, o->pl.extrapolated[pi]);
    if (o->pl.int8_keys[pi]) xc.predictor_keys = SIFT_I8;
    xc.policy = o->pl.policy[pi];
    xc.budget = k;
    sift_status st = sift_session_create(m, &xc, own);
    if (st == SIFT_OK) eval_show_pools_once(*own);
    if (st == SIFT_OK) st = sift_session_eval(*own, ids, (size_t)from, NULL);
    *out = *own;
    return st;
}

/* Runs policy p (budget k) from position `from` of a session prefilled to `from`. */
sift_status eval_run_policy(sift_session *s, const eval_options *o, sift_policy p, int64_t k, const int32_t *ids,
                            int64_t from, int64_t n, int n_vocab, const int32_t *dense_top1, int32_t *top1_out,
                            const bool *is_answer, bool measure, run_result *r)
{
    memset(r, 0, sizeof *r);
    sift_status st = sift_session_rewind(s, 0, from);
    if (st == SIFT_OK) st = sift_session_set_policy(s, p, o->sink, o->window, k);
    double rec0 = 0, err0 = 0;
    int64_t qn0 = 0;
    if (st == SIFT_OK) st = sift_session_set_attention_quality(s, measure);
    if (st == SIFT_OK && measure) st = sift_session_attention_quality(s, &rec0, &err0, &qn0);
    const double t0 = cli_wall_s();
    if (st == SIFT_OK) st = decode_range(s, ids, from, n, n_vocab, dense_top1, top1_out, is_answer, r);
    r->decode_s = cli_wall_s() - t0;
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

void eval_free_samples(sample *v, int n)
{
    for (int i = 0; i < n; i++) {
        free(v[i].ids);
        free(v[i].is_answer);
    }
    free(v);
}

int eval_load_samples(const char *who, const char *path, sift_model *m, const sift_model_info *info, sample **out, int *n_out)
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
        eval_free_samples(v, n);
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
