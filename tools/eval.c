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
#include "eval.h"
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a policy: dense ignores the budget and runs once. */
static int budgets_of(const eval_options *o, int pi) { return o->pl.policy[pi] == SIFT_POLICY_DENSE ? 1 : o->n_budgets; }

static const char *policy_label(const eval_options *o, int i, char *buf, size_t len)
{
    char iv[16] = "", th[16] = "";
    if (o->pl.interval[i] > 1 || (o->pl.by_query[i] && o->pl.interval[i])) snprintf(iv, sizeof iv, ":i%d", o->pl.interval[i]);
    if (o->pl.threshold[i] <= 1.0f) snprintf(th, sizeof th, ":t%g", (double)o->pl.threshold[i]);
    snprintf(buf, len, "%s%s%s%s%s%s%s", sift_policy_name(o->pl.policy[i]), o->pl.extrapolated[i] ? "+x" : "",
             o->pl.by_query[i] ? ":auto" : "", th, iv, o->pl.neighbors[i] ? ":nf" : "", o->pl.int8_keys[i] ? ":int8" : "");
    return buf;
}

/* Policy pi's TokenButler settings on the session (a no-op for the other policies): the fixed
 * interval, or the one decided by the query (each set after the other is undone, since the
 * query's does not go with neighbour fetch). */
static sift_status set_variant(sift_session *s, const eval_options *o, int pi)
{
    if (o->pl.policy[pi] != SIFT_POLICY_BUTLER) return SIFT_OK;
    const int iv = o->pl.interval[pi];
    if (!o->pl.by_query[pi]) {
        const sift_status st = sift_session_set_butler_reuse(s, SIFT_SEL_CACHE_OFF);
        return st != SIFT_OK ? st : sift_session_set_butler(s, iv ? iv : 1, o->pl.neighbors[pi]);
    }
    const float t = o->pl.threshold[pi] <= 1.0f ? o->pl.threshold[pi] : o->predict_threshold;
    const sift_status st = sift_session_set_butler(s, iv ? iv : o->max_interval, 0);
    return st != SIFT_OK ? st : sift_session_set_butler_reuse(s, t);
}

/* --plot: a policy's figure at budget index bi; dense, run once, is drawn flat over every budget. */
static bool plot_result(plot *pl, const eval_options *o, int pi, int bi, const char *label, double y)
{
    if (!pl) return true;
    if (o->pl.policy[pi] != SIFT_POLICY_DENSE) return plot_add(pl, label, (double)o->budgets[bi], y);
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
    sift_session_config cfg = eval_session_config(o, n, false);
    if (st == SIFT_OK) st = sift_session_create(m, &cfg, &s);
    if (st == SIFT_OK) eval_show_pools_once(s);
    if (st == SIFT_OK) st = sift_session_eval(s, ids, (size_t)o->prefix, NULL);
    run_result dense;
    if (st == SIFT_OK)
        st = eval_run_policy(s, o, SIFT_POLICY_DENSE, o->budgets[0], ids, o->prefix, n, info->n_vocab, NULL, dense_top1, NULL, true,
                        &dense);
    if (st == SIFT_OK && !o->json)
        printf("sift eval  %s  on %s\n%lld tokens of %s: prefix %lld prefilled, %lld scored; S=%lld W=%lld\n\n"
               "%-21s %7s %10s %9s %9s %10s %9s\n",
               o->model_path, sift_context_device_name(ctx), (long long)n, o->text_path, (long long)o->prefix,
               (long long)dense.scored, (long long)o->sink, (long long)o->window, "policy", "budget", "perplexity",
               "top1=dense", "recall", "out error", "reused");
    for (int pi = 0; pi < o->pl.n && st == SIFT_OK; pi++) {
        const sift_policy p = o->pl.policy[pi];
        for (int bi = 0; bi < budgets_of(o, pi) && st == SIFT_OK; bi++) {
            const int64_t k = o->budgets[bi];
            run_result r = {0};
            sift_session *run_in = NULL;
            st = eval_session_for(o, pi, k, m, s, ids, n, o->prefix, &sx, &run_in);
            if (st == SIFT_OK) st = set_variant(run_in, o, pi);
            if (st == SIFT_OK)
                st = eval_run_policy(run_in, o, p, k, ids, o->prefix, n, info->n_vocab, dense_top1, NULL, NULL, !o->pl.extrapolated[pi], &r);
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
                printf("%-21s %7lld %10.4f %8.1f%% %9.4f %10.4f %9s\n", label, p == SIFT_POLICY_DENSE ? 0LL : (long long)k, ppl,
                       100.0 * agree, r.recall, r.err, sc);
            else
                printf("%-21s %7lld %10.4f %8.1f%% %9s %10s %9s\n", label, p == SIFT_POLICY_DENSE ? 0LL : (long long)k, ppl,
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

/* A retrieval run's figures: the sample lengths present, the samples chosen, and per row (policy
 * and budget) and length the answers scored and right. */
typedef struct retrieval_tally {
    int64_t *lengths; /* ascending */
    int n_len, n_chosen, rows;
    int *used, *seen_of; /* per length: samples run, samples seen */
    bool *chosen;        /* per sample */
    int64_t *correct, *answers;                        /* [row][length] */
    int64_t *sc_hits, *sc_steps, *warm_hits, *warm_misses; /* [row] */
} retrieval_tally;

static void tally_free(retrieval_tally *t)
{
    free(t->lengths);
    free(t->used);
    free(t->seen_of);
    free(t->chosen);
    free(t->correct);
    free(t->answers);
    free(t->sc_hits);
    free(t->sc_steps);
    free(t->warm_hits);
    free(t->warm_misses);
}

/* The lengths present (ascending) and room for the figures: false when memory runs out. */
static bool tally_new(const eval_options *o, const sample *smp, int n_smp, retrieval_tally *t)
{
    const size_t n = (size_t)n_smp, rows = (size_t)(o->pl.n * o->n_budgets);
    *t = (retrieval_tally){.lengths = malloc(n * sizeof *t->lengths), .used = calloc(n, sizeof *t->used),
                           .seen_of = calloc(n, sizeof *t->seen_of), .chosen = calloc(n, sizeof *t->chosen),
                           .correct = calloc(rows * n, sizeof *t->correct), .answers = calloc(rows * n, sizeof *t->answers),
                           .sc_hits = calloc(rows, sizeof *t->sc_hits), .sc_steps = calloc(rows, sizeof *t->sc_steps),
                           .warm_hits = calloc(rows, sizeof *t->warm_hits), .warm_misses = calloc(rows, sizeof *t->warm_misses),
                           .rows = (int)rows};
    if (!t->lengths || !t->used || !t->seen_of || !t->chosen || !t->correct || !t->answers || !t->sc_hits || !t->sc_steps ||
        !t->warm_hits || !t->warm_misses)
        return false;
    for (int i = 0; i < n_smp; i++) {
        bool seen = false;
        for (int j = 0; j < t->n_len; j++) seen = seen || t->lengths[j] == smp[i].n;
        if (!seen) t->lengths[t->n_len++] = smp[i].n;
    }
    for (int i = 1; i < t->n_len; i++)
        for (int j = i; j > 0 && t->lengths[j] < t->lengths[j - 1]; j--) {
            const int64_t x = t->lengths[j];
            t->lengths[j] = t->lengths[j - 1];
            t->lengths[j - 1] = x;
        }
    return true;
}

static int length_index(const retrieval_tally *t, int64_t n)
{
    int li = 0;
    while (t->lengths[li] != n) li++;
    return li;
}

/* The samples that run: --length, then --skip, then --samples, per length; false after a message
 * when none is left. */
static bool choose_samples(const eval_options *o, const sample *smp, int n_smp, retrieval_tally *t)
{
    for (int i = 0; i < n_smp; i++) {
        const int li = length_index(t, smp[i].n);
        if (o->length > 0 && smp[i].n != o->length) continue;
        if (t->seen_of[li]++ < o->skip) continue;
        if (o->samples > 0 && t->used[li] >= o->samples) continue;
        t->used[li]++;
        t->chosen[i] = true;
        t->n_chosen++;
    }
    if (t->n_chosen > 0) return true;
    fprintf(stderr, "sift eval: no samples to run in %s", o->retrieval_path);
    if (o->length > 0) fprintf(stderr, " of length %lld", (long long)o->length);
    if (o->skip > 0) fprintf(stderr, " after --skip %lld", (long long)o->skip);
    fprintf(stderr, " (sample lengths present, in tokens with BOS:");
    for (int li = 0; li < t->n_len; li++) fprintf(stderr, " %lld", (long long)t->lengths[li]);
    fprintf(stderr, ")\n");
    return false;
}

/* One sample under every policy and budget, prefilled once; its figures added to t. */
static sift_status run_sample(const eval_options *o, sift_model *m, const sift_model_info *info, const sample *sp,
                              retrieval_tally *t)
{
    const int li = length_index(t, sp->n);
    /* prefill up to a little before the first answer: the query's own tokens run under the policy */
    const int64_t from = sp->first_answer > 16 ? sp->first_answer - 16 : 1;
    sift_session *s = NULL, *sx = NULL;
    sift_session_config cfg = eval_session_config(o, sp->n, false);
    sift_status st = sift_session_create(m, &cfg, &s);
    if (st == SIFT_OK) eval_show_pools_once(s);
    if (st == SIFT_OK) st = sift_session_eval(s, sp->ids, (size_t)from, NULL);
    for (int pi = 0; pi < o->pl.n && st == SIFT_OK; pi++)
        for (int bi = 0; bi < budgets_of(o, pi) && st == SIFT_OK; bi++) {
            run_result r = {0};
            sift_session *run_in = NULL;
            st = eval_session_for(o, pi, o->budgets[bi], m, s, sp->ids, sp->n, from, &sx, &run_in);
            if (st == SIFT_OK) st = set_variant(run_in, o, pi);
            if (st == SIFT_OK)
                st = eval_run_policy(run_in, o, o->pl.policy[pi], o->budgets[bi], sp->ids, from, sp->n, info->n_vocab, NULL,
                                     NULL, sp->is_answer, false, &r);
            const int row = pi * o->n_budgets + bi;
            t->correct[row * t->n_len + li] += r.correct;
            t->answers[row * t->n_len + li] += r.answers;
            t->sc_hits[row] += r.sc_hits;
            t->sc_steps[row] += r.sc_steps;
            t->warm_hits[row] += r.warm_hits;
            t->warm_misses[row] += r.warm_misses;
        }
    sift_session_destroy(s);
    sift_session_destroy(sx);
    return st;
}

/* Row `row` (policy pi, budget bi) of the accuracy table, or its JSON lines; *acc gets its
 * accuracy on all lengths (NAN: no answer). */
static void print_retrieval_row(const eval_options *o, const retrieval_tally *t, int pi, int bi, const char *label, double *acc)
{
    const int row = pi * o->n_budgets + bi;
    const long long k = o->pl.policy[pi] == SIFT_POLICY_DENSE ? 0LL : (long long)o->budgets[bi];
    int64_t c_all = 0, a_all = 0;
    if (!o->json) printf("%-21s %7lld", label, k);
    for (int li = 0; li < t->n_len; li++) {
        if (!t->used[li]) continue;
        const int64_t c = t->correct[row * t->n_len + li], a = t->answers[row * t->n_len + li];
        c_all += c;
        a_all += a;
        if (o->json) {
            printf("{\"mode\": \"retrieval\", \"policy\": \"%s\", \"budget\": %lld, \"length\": %lld, \"samples\": %d, "
                   "\"answers\": %lld, \"accuracy\": ",
                   label, k, (long long)t->lengths[li], t->used[li], (long long)a);
            cli_json_fixed(a ? (double)c / (double)a : NAN, 4); /* null: no answer to score */
            printf(", \"sel_cache_hits\": %lld, \"sel_cache_steps\": %lld, \"warm_hits\": %lld, \"warm_misses\": %lld}\n",
                   (long long)t->sc_hits[row], (long long)t->sc_steps[row], (long long)t->warm_hits[row],
                   (long long)t->warm_misses[row]);
        } else
            printf(" %8.1f%%", a ? 100.0 * (double)c / (double)a : 0.0);
    }
    *acc = a_all ? 100.0 * (double)c_all / (double)a_all : NAN;
    if (!o->json && t->sc_steps[row])
        printf(" %8.1f%%  (%s %.1f%%)\n", a_all ? *acc : 0.0,
               o->pl.policy[pi] == SIFT_POLICY_BUTLER ? "steps reusing lists" : "Selection Cache hits",
               100.0 * (double)t->sc_hits[row] / (double)t->sc_steps[row]);
    else if (!o->json)
        printf(" %8.1f%%\n", a_all ? *acc : 0.0);
}

/* The accuracy table (or JSON lines) and the plot: 0, or 1 after a message. */
static int print_retrieval(const eval_options *o, const retrieval_tally *t)
{
    plot *pl = plot_for(o, "accuracy on the answers (%)");
    bool plotted = true;
    if (!o->json) {
        printf("sift eval  %s  retrieval accuracy (answer characters, greedy); S=%lld W=%lld\n\n%-21s %7s", o->model_path,
               (long long)o->sink, (long long)o->window, "policy", "budget");
        for (int li = 0; li < t->n_len; li++)
            if (t->used[li]) printf(" %9lld", (long long)t->lengths[li]);
        printf(" %9s\n", "all");
    }
    for (int pi = 0; pi < o->pl.n; pi++)
        for (int bi = 0; bi < budgets_of(o, pi); bi++) {
            char label[32];
            double acc = NAN;
            policy_label(o, pi, label, sizeof label);
            print_retrieval_row(o, t, pi, bi, label, &acc);
            plotted = plotted && plot_result(pl, o, pi, bi, label, acc);
        }
    return plot_finish(o, pl, plotted);
}

static int eval_retrieval(const eval_options *o, sift_context *ctx, sift_model *m, const sift_model_info *info)
{
    sample *smp = NULL;
    int n_smp = 0;
    if (eval_load_samples("sift eval", o->retrieval_path, m, info, &smp, &n_smp) != 0) return 1;
    retrieval_tally t;
    int rc = 0;
    if (!tally_new(o, smp, n_smp, &t)) {
        fprintf(stderr, "sift eval: out of host memory for %d samples\n", n_smp);
        rc = 1;
    } else if (!choose_samples(o, smp, n_smp, &t)) {
        rc = 1;
    }
    if (!o->json) fprintf(stderr, "sift eval: %d samples from %s on %s\n", n_smp, o->retrieval_path, sift_context_device_name(ctx));
    sift_status st = SIFT_OK;
    for (int i = 0, done_n = 0; i < n_smp && rc == 0 && st == SIFT_OK; i++) {
        if (!t.chosen[i]) continue;
        st = run_sample(o, m, info, &smp[i], &t);
        if (!o->json) fprintf(stderr, "\rsift eval: sample %d of %d done", ++done_n, t.n_chosen);
    }
    if (!o->json && rc == 0 && t.n_chosen > 0) fputc('\n', stderr);
    if (rc == 0 && st != SIFT_OK) {
        fprintf(stderr, "sift eval: %s\n", sift_last_error());
        rc = 1;
    }
    if (rc == 0) rc = print_retrieval(o, &t);
    eval_free_samples(smp, n_smp);
    tally_free(&t);
    return rc;
}

static const cli_command eval_command = {
    "eval", CLI_EVAL, "-m MODEL.gguf (--text FILE | --retrieval FILE) [options]",
    "Runs the same tokens under every policy and budget and prints, against dense attention:\n"
    "  --text: perplexity of the tokens after the prefix, top-1 agreement with dense, the dense\n"
    "          attention mass recalled by the attended set and the relative error of the\n"
    "          attention output (means over decode steps, layers and heads);\n"
    "  --retrieval: accuracy on the answer characters of a retrieval test set, per length.\n",
    NULL};

/* The options of one eval, from p (the predictor and the offload's tokens set once the model is
 * loaded). */
static eval_options options_from(const cli_params *p)
{
    eval_options o = {.model_path = p->model, .text_path = p->text, .retrieval_path = p->retrieval, .plot_path = p->plot,
                      .pl = p->policies, .predictor_keys = p->session.predictor_keys, .v_only = p->session.kv_offload_v_only,
                      .budgets = p->budgets, .n_budgets = p->n_budgets, .sink = p->session.sink, .window = p->session.window,
                      .prefix = p->prefix, .max_tokens = p->max_tokens, .samples = p->samples, .skip = p->skip,
                      .length = p->length, .sel_cache = p->session.sel_cache, .predict_threshold = p->predict_threshold,
                      .max_interval = p->max_interval, .json = p->json};
    /* butler joins the default policies where a predictor is given */
    if (!cli_given(p, "--policies") && p->predictor)
        cli_parse_policy_list("dense,tokenselect,streaming,h2o,snapkv,quest,oracle,butler", &o.pl);
    return o;
}

/* Runs the eval on the loaded model: 0, or 1 or 2 after a message. */
static int eval_loaded(const cli_params *p, eval_options *o, sift_context *ctx, sift_model *m)
{
    if (cli_load_predictor(p->who, m, p->predictor, &o->predictor) != 0) return 1;
    sift_session_config cfg = sift_session_config_default(); /* eval's cache: f16 */
    int rc = cli_apply_offload(p, m, &cfg) != 0 ? 2 : 0;    /* the offload's device pool in tokens */
    o->kv_device_tokens = cfg.kv_device_tokens;
    bool has_butler = false;
    for (int pi = 0; pi < o->pl.n; pi++) has_butler |= o->pl.policy[pi] == SIFT_POLICY_BUTLER;
    if (rc == 0 && has_butler && !o->predictor) {
        fprintf(stderr, "sift eval: the butler policy needs --predictor FILE\n");
        rc = 2;
    }
    sift_model_info info;
    sift_model_get_info(m, &info);
    if (rc == 0) rc = o->text_path ? eval_text(o, ctx, m, &info) : eval_retrieval(o, ctx, m, &info);
    sift_predictor_destroy(o->predictor);
    return rc;
}

int cli_eval(int argc, char **argv)
{
    cli_params p = cli_params_default(&eval_command);
    int rc = 0;
    if (!cli_parse(&eval_command, argc, argv, &p, &rc)) {
        cli_params_free(&p);
        return rc;
    }
    if (!p.budgets) {
        fprintf(stderr, "sift eval: out of host memory\n");
        rc = 1;
    } else if (!p.model || (!p.text == !p.retrieval)) {
        fprintf(stderr, "sift eval: give a model (-m) and one of --text or --retrieval (see --help)\n");
        rc = 2;
    } else if ((rc = cli_check_selection(&p)) == 0) {
        eval_options o = options_from(&p);
        sift_context *ctx = NULL;
        sift_model *m = NULL;
        rc = cli_open_model(p.who, p.backend, p.threads, p.verbose != 0, p.model, &ctx, &m);
        if (rc == 0) rc = eval_loaded(&p, &o, ctx, m);
        sift_model_destroy(m);
        sift_context_destroy(ctx);
    }
    cli_params_free(&p);
    return rc;
}
