/* `sift run`: text generated from a prompt, streamed to stdout, through sift_session_generate_tokens;
 * the prefill and decode speeds on stderr. */
#include "cli.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_command run_command = {
    "run", CLI_RUN, "-m MODEL.gguf [-p PROMPT] [-n N] [options]",
    "Streams the generated text to stdout; prints the KV cache size, prefill progress and the\n"
    "prefill and decode speeds (tokens/s) to stderr. Generation stops at EOS or after N tokens.\n",
    NULL};

static void show_progress(void *user, int64_t done, int64_t total)
{
    (void)user;
    if (total >= 2048) fprintf(stderr, "\rprefill: %lld / %lld tokens", (long long)done, (long long)total);
    if (total >= 2048 && done == total) fputc('\n', stderr);
}

/* The Selection Cache's hit rate per layer and overall, where it ran (under butler: the steps
 * whose lists the prediction interval, fixed or decided by the query, reused). */
static void print_sel_cache(const sift_session *session, int n_layers, const char *who, bool butler, bool by_query)
{
    int64_t hits = 0, steps = 0;
    if (sift_session_sel_cache_stats(session, -1, &hits, &steps) != SIFT_OK || steps == 0) return;
    fprintf(stderr, "%s: %s %lld of %lld layer-steps (%.1f%%); per layer:", who,
            !butler ? "Selection Cache hits" : by_query ? "lists reused (decided by the query)" : "lists reused (prediction interval)", (long long)hits, (long long)steps,
            100.0 * (double)hits / (double)steps);
    for (int l = 0; l < n_layers; l++) {
        int64_t h = 0, n = 0;
        if (sift_session_sel_cache_stats(session, l, &h, &n) == SIFT_OK && n > 0)
            fprintf(stderr, " %.0f%%", 100.0 * (double)h / (double)n);
    }
    fputc('\n', stderr);
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


/* What a run keeps while it generates. */
typedef struct run_state {
    int32_t *hist;  /* --context-shift: the tokens in the cache, then the newest one generated */
    int64_t n_hist; /* (room for the context and one more) */
    int64_t n_keep; /* the tokens a context shift keeps: BOS and --keep of the prompt */
    int64_t generated, shifts, reevaluated;
    double t_first; /* when the first token came: the end of the prefill */
} run_state;

static int on_token(void *user, int32_t token, const char *piece, size_t len)
{
    run_state *r = user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    if (r->generated++ == 0) r->t_first = cli_wall_s();
    if (r->hist) r->hist[r->n_hist++] = token;
    return 0;
}

/* --context-shift, as llama.cpp does it: the cache holds hist[0, n_hist - 1) and is full, and
 * hist's last token is the newest one generated. Keeps hist[0, keep), drops the oldest half of the
 * rest and rewinds the session to keep; the remaining tail and the newest token become the next
 * generate call's prompt, evaluated as one batch (its keys are rotated for their new positions by
 * the forward pass itself: docs/policies.md). */
static sift_status shift_context(sift_session *session, run_state *r, const int32_t **prompt, size_t *n)
{
    const int64_t cached = r->n_hist - 1, keep = r->n_keep;
    const int64_t discard = (cached - keep) / 2, tail = cached - keep - discard;
    const int32_t newest = r->hist[cached];
    memmove(r->hist + keep, r->hist + keep + discard, (size_t)tail * sizeof *r->hist);
    r->hist[keep + tail] = newest;
    r->n_hist = keep + tail + 1;
    r->shifts++;
    r->reevaluated += tail + 1;
    *prompt = r->hist + keep;
    *n = (size_t)(tail + 1);
    return sift_session_rewind(session, 0, keep);
}

/* Feeds the prompt ids[n_prompt] and generates up to -n tokens after it, shifting the context
 * where --context-shift asks; *full: stopped because the context is full. */
static sift_status generate(const cli_params *p, cli_session *s, sift_sampler *sampler, const int32_t *ids, size_t n_prompt,
                            run_state *r, bool *full)
{
    *full = false;
    if (p->n_predict == 0) return sift_session_eval(s->session, ids, n_prompt, NULL);
    sift_generate_config gc = sift_generate_config_default();
    gc.on_token = on_token;
    gc.user = r;
    const int32_t *prompt = ids;
    size_t n = n_prompt;
    for (;;) {
        gc.max_tokens = p->n_predict - r->generated;
        sift_stop_reason why = SIFT_STOP_EOS;
        sift_status st = sift_session_generate_tokens(s->session, prompt, n, &gc, sampler, NULL, &why);
        if (st != SIFT_OK || why != SIFT_STOP_CONTEXT || r->generated == p->n_predict) return st;
        if (!p->context_shift) {
            *full = true;
            return SIFT_OK;
        }
        if ((st = shift_context(s->session, r, &prompt, &n)) != SIFT_OK) return st;
    }
}

/* The context shift's kept tokens and its copy of the cache's tokens; 0, or 1 after a message. */
static int prepare_shift(const cli_params *p, const cli_session *s, const int32_t *ids, size_t n_prompt, run_state *r)
{
    const int64_t bos = s->info.bos >= 0; /* BOS, then --keep of the prompt (llama.cpp's --keep) */
    r->n_keep = p->keep < 0 || p->keep + bos > (int64_t)n_prompt ? (int64_t)n_prompt : p->keep + bos;
    if (!p->context_shift) return 0;
    if (r->n_keep > s->n_ctx - 2) {
        fprintf(stderr, "%s: --context-shift keeps %lld tokens, which leaves nothing to drop in a context of %lld tokens; "
                        "lower --keep or raise -c/--ctx\n", p->who, (long long)r->n_keep, (long long)s->n_ctx);
        return 1;
    }
    if (!(r->hist = malloc((size_t)(s->n_ctx + 1) * sizeof *r->hist))) {
        fprintf(stderr, "%s: out of host memory for the %lld tokens --context-shift keeps\n", p->who, (long long)s->n_ctx);
        return 1;
    }
    memcpy(r->hist, ids, n_prompt * sizeof *r->hist);
    r->n_hist = (int64_t)n_prompt;
    return 0;
}

/* The model, the device, the cache and the policy, on stderr. */
static void print_banner(const cli_params *p, const cli_session *s)
{
    const sift_session_config *c = &s->cfg;
    char swk[96] = "";
    if (c->policy != SIFT_POLICY_DENSE)
        snprintf(swk, sizeof swk, " (S=%lld W=%lld k=%lld)", (long long)c->sink, (long long)c->window, (long long)c->budget);
    fprintf(stderr, "%s: %s on %s: %s, %d layers, %d/%d heads of %d; KV cache %.1f MB (%lld tokens, %s, pages of %lld); policy %s%s%s\n",
            p->who, p->model, sift_context_device_name(s->ctx), s->info.arch, s->info.n_layers, s->info.n_heads,
            s->info.n_kv_heads, s->info.head_dim, (double)sift_session_kv_bytes(s->session) / 1e6, (long long)s->n_ctx,
            sift_dtype_name(c->kv_type), (long long)c->page_size, sift_policy_name(c->policy), swk,
            c->extrapolate ? ", extrapolation" : "");
    if (s->predictor) {
        sift_predictor_info pi;
        sift_predictor_get_info(s->predictor, &pi);
        fprintf(stderr, "%s: predictor %s: d' = %d, producers every %d layers, %.2f M parameters (%.2f%% of the "
                        "model); its keys take %.1f MB (%s)%s\n",
                p->who, p->predictor, pi.key_dim, pi.producer_stride, (double)pi.n_params / 1e6, 100.0 * pi.overhead,
                (double)sift_session_predictor_key_bytes(s->session) / 1e6,
                c->predictor_keys == SIFT_I8 ? "int8 with a scale per token" : "f16",
                c->policy == SIFT_POLICY_BUTLER ? "" : " (loaded, but the policy is not butler)");
    }
    cli_print_kv_pools(stderr, p->who, s->session);
}

/* After the text: why it stopped early, the warm-up, the speeds, the pools, the shifts, the hits. */
static void print_report(const cli_params *p, const cli_session *s, const run_state *r, size_t n_prompt, bool full,
                         int64_t warmup_tokens, double t_setup, double t_prefill, double t_decode)
{
    if (full)
        fprintf(stderr, "%s: context full: stopped after %lld generated tokens of %lld (the context holds %lld tokens, "
                        "%zu of them the prompt); raise it with -c/--ctx, or let --context-shift drop old tokens\n",
                p->who, (long long)r->generated, (long long)p->n_predict, (long long)s->n_ctx, n_prompt);
    if (warmup_tokens)
        fprintf(stderr, "%s: setup %.3f s (a warm-up of %lld tokens, rewound, so that the backend compiled its "
                        "kernels before prefill and decode were timed; --no-warmup skips it)\n",
                p->who, t_setup, (long long)warmup_tokens);
    const int64_t steps = r->generated - (full ? 1 : 0); /* the decode steps after the first token: all fed but the one that did not fit */
    fprintf(stderr, "%s: prefill %zu token%s in %.3f s (%.1f tokens/s); decode %lld token%s in %.3f s (%.1f tokens/s); KV cache in use %.2f MB\n",
            p->who, n_prompt, n_prompt == 1 ? "" : "s", t_prefill, t_prefill > 0 ? (double)n_prompt / t_prefill : 0.0,
            (long long)r->generated, r->generated == 1 ? "" : "s", t_decode, t_decode > 0 ? (double)steps / t_decode : 0.0,
            (double)sift_session_kv_used_bytes(s->session) / 1e6);
    cli_print_kv_pools(stderr, p->who, s->session);
    if (r->shifts)
        fprintf(stderr, "%s: context shifted %lld times (kept the first %lld tokens, re-evaluated %lld; their time is "
                        "in the decode time)\n", p->who, (long long)r->shifts, (long long)r->n_keep, (long long)r->reevaluated);
    print_sel_cache(s->session, s->info.n_layers, p->who, s->cfg.policy == SIFT_POLICY_BUTLER, p->predict_by_query != 0);
}

/* Echoes the prompt, warms the backend up, generates and reports; 0, or 1 after a message. */
static int generate_timed(const cli_params *p, cli_session *s, sift_sampler *sampler, const int32_t *ids, size_t n_prompt,
                          run_state *r)
{
    for (size_t i = 0; i < n_prompt; i++) {
        char piece[256];
        size_t len = 0;
        if (sift_model_token_piece(s->model, ids[i], piece, sizeof piece, &len) == SIFT_OK) fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
    double t0 = cli_wall_s(), t_setup = 0.0;
    int64_t warmup_tokens = 0;
    sift_status st = SIFT_OK;
    if (!p->no_warmup && sift_context_backend(s->ctx) != SIFT_BACKEND_CPU) {
        st = warm_up(s->session, ids, (int64_t)n_prompt, s->cfg.chunk, s->cfg.extrapolate, s->n_ctx, &warmup_tokens);
        t_setup = cli_wall_s() - t0;
        t0 = cli_wall_s();
    }
    bool full = false;
    if (st == SIFT_OK) st = generate(p, s, sampler, ids, n_prompt, r, &full);
    const double t_end = cli_wall_s(), t_first = r->generated ? r->t_first : t_end;
    printf("\n");
    if (st != SIFT_OK) {
        const char *e = sift_last_error();
        fprintf(stderr, "%s: %s\n", p->who, e && *e ? e : sift_status_name(st));
        return 1;
    }
    print_report(p, s, r, n_prompt, full, warmup_tokens, t_setup, t_first - t0, t_end - t_first);
    return 0;
}

static int run(const cli_params *p)
{
    char *buf = NULL;
    const char *text = NULL;
    size_t len = 0;
    if (cli_read_prompt(p, &buf, &text, &len) != 0) return 1;
    const sift_sampler_config scfg = cli_sampler_config(p); /* a random seed is printed first */
    cli_session s;
    sift_sampler *sampler = NULL;
    int32_t *ids = NULL;
    size_t n_prompt = 0;
    run_state r = {0};
    int rc = cli_open(p, &s);
    if (rc == 0) {
        s.cfg.progress = show_progress;
        rc = cli_start(p, &s);
    }
    if (rc == 0) rc = cli_tokenize_prompt(p, &s, text, len, 0, &ids, &n_prompt);
    if (rc == 0) rc = prepare_shift(p, &s, ids, n_prompt, &r);
    if (rc == 0 && sift_sampler_create(&scfg, &sampler) != SIFT_OK) {
        fprintf(stderr, "%s: %s\n", p->who, sift_last_error());
        rc = 1;
    }
    if (rc == 0) {
        print_banner(p, &s);
        rc = generate_timed(p, &s, sampler, ids, n_prompt, &r);
    }
    sift_sampler_destroy(sampler);
    free(r.hist);
    free(ids);
    free(buf);
    cli_close(&s);
    return rc;
}

int cli_run(int argc, char **argv)
{
    cli_params p = cli_params_default(&run_command);
    int rc = 0;
    if (cli_parse(&run_command, argc, argv, &p, &rc) && (rc = cli_check_generation(&p)) == 0) rc = run(&p);
    cli_params_free(&p);
    return rc;
}
