/* `sift demo`: the retrieval model the repository ships under each policy. */
#include "eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- sift demo ----------------------------------------------------------------------------------
 * The retrieval model on a few of its shortest test samples under dense, TokenSelect, Quest and
 * streaming at one budget: the answers, the accuracy, the KV bytes one decode step reads per layer,
 * and the decode speed. The model and its test set are looked for relative to the current
 * directory, then to the source tree. */

#ifndef SIFT_SOURCE_ROOT
#define SIFT_SOURCE_ROOT "."
#endif

#define DEMO_MODEL CLI_DEMO_MODEL
#define DEMO_SAMPLES CLI_DEMO_SAMPLES
#define DEMO_PREDICTOR CLI_DEMO_PREDICTOR

static const cli_command demo_command = {
    "demo", CLI_DEMO, "[options]",
    "Runs the retrieval model the repository ships (" DEMO_MODEL ") on the\n"
    "shortest samples of its test set (" DEMO_SAMPLES ", 4096 tokens each):\n"
    "each sample is prefilled once, then its queries are decoded under dense, tokenselect, butler\n"
    "(with the predictor " DEMO_PREDICTOR "),\n"
    "quest and streaming attention (k = 256, S = 4, W = 64). Prints, per policy, the answers of the\n"
    "first sample (expected and produced), the accuracy on all answer characters, the K/V bytes\n"
    "one decode step reads per layer (computed from the model's shape, f16 K/V) and the decode\n"
    "speed. The files are looked for in the current directory, then in the source tree.\n",
    NULL};

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
                    const char *backend, int64_t threads, bool verbose)
{
    static const sift_policy all[] = {SIFT_POLICY_DENSE, SIFT_POLICY_TOKENSELECT, SIFT_POLICY_BUTLER, SIFT_POLICY_QUEST,
                                      SIFT_POLICY_STREAMING};
    enum { NP_MAX = sizeof all / sizeof all[0] };
    sift_policy policies[NP_MAX];
    int NP = 0;
    int64_t budget = 256;
    eval_options o = {.sink = 4, .window = 64, .budgets = &budget, .n_budgets = 1, .sel_cache = SIFT_SEL_CACHE_OFF,
                      .predictor_keys = SIFT_F16};
    sift_context *ctx = NULL;
    sift_model *m = NULL;
    if (cli_open_model("sift demo", backend, threads, verbose, model_path, &ctx, &m) != 0) return 1;
    if (cli_load_predictor("sift demo", m, predictor_path, &o.predictor) != 0) {
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
    if (eval_load_samples("sift demo", samples_path, m, &info, &smp, &n_smp) != 0) {
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
        sift_session_config cfg = eval_session_config(&o, len, false);
        st = sift_session_create(m, &cfg, &s);
        const double t0 = cli_wall_s();
        if (st == SIFT_OK) st = sift_session_eval(s, smp[i].ids, (size_t)from, NULL);
        prefill_s += cli_wall_s() - t0;
        for (int pi = 0; pi < NP && st == SIFT_OK; pi++) {
            run_result r;
            st = eval_run_policy(s, &o, policies[pi], budget, smp[i].ids, from, len, info.n_vocab, NULL, top1, smp[i].is_answer,
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
    eval_free_samples(smp, n_smp);
    sift_predictor_destroy(o.predictor);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    return st == SIFT_OK ? 0 : 1;
}

int cli_demo(int argc, char **argv)
{
    cli_params p = cli_params_default(&demo_command);
    int rc = 0;
    if (!cli_parse(&demo_command, argc, argv, &p, &rc)) return rc;
    char mbuf[4096], sbuf[4096], pbuf[4096];
    const char *model = p.model ? p.model : demo_find(DEMO_MODEL, mbuf, sizeof mbuf);
    const char *samples_path = demo_find(DEMO_SAMPLES, sbuf, sizeof sbuf);
    /* the committed predictor belongs to the committed model only */
    const char *predictor = p.model ? NULL : demo_find(DEMO_PREDICTOR, pbuf, sizeof pbuf);
    if (!model || !samples_path) {
        fprintf(stderr, "sift demo: cannot find %s in the current directory or in %s (run it from the repository root)\n",
                !model ? DEMO_MODEL : DEMO_SAMPLES, SIFT_SOURCE_ROOT);
        return 1;
    }
    return demo_run(model, samples_path, predictor, p.samples, p.backend, p.threads, p.verbose != 0);
}
