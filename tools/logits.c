/* `sift logits`: a model's logits at each step of a prompt and of the greedy steps after it, as
 * JSON lines (the oracle tests compare against). */
#include "cli.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const cli_command logits_command = {
    "logits", CLI_LOGITS, "-m MODEL.gguf [-p PROMPT] [-n N] [options]",
    "Runs the prompt (BOS first) token by token, then N greedy steps, and prints one JSON line per\n"
    "forward pass: {\"pos\", \"token\", \"argmax\", \"logits\": [...]}.\n",
    NULL};

/* One forward pass per token, as a token-by-token oracle records them: the prompt's n_prompt
 * tokens, then up to -n more, each the argmax (the sampler's pick) of the step before; ids has
 * room for them. */
static sift_status write_logits(const cli_params *p, const cli_session *s, sift_sampler *sampler, int32_t *ids, size_t n_prompt,
                                float *logits)
{
    sift_status st = SIFT_OK;
    size_t n_ids = n_prompt;
    bool full = false; /* stopped because the context is full */
    for (size_t i = 0; i < n_ids && st == SIFT_OK; i++) {
        if ((st = sift_session_eval(s->session, &ids[i], 1, logits)) != SIFT_OK) break;
        const int32_t best = sift_sampler_sample(sampler, logits, s->info.n_vocab);
        printf("{\"pos\": %zu, \"token\": %d, \"argmax\": %d, \"logits\": [", i, ids[i], best);
        for (int v = 0; v < s->info.n_vocab; v++) { /* null for a logit that is not finite: JSON has no inf or nan */
            if (isfinite(logits[v])) printf("%s%.6g", v ? ", " : "", (double)logits[v]);
            else printf("%snull", v ? ", " : "");
        }
        printf("]}\n");
        if (i + 1 == n_ids && (int64_t)(n_ids - n_prompt) < p->n_predict) {
            if ((int64_t)n_ids >= s->n_ctx) full = true;
            else ids[n_ids++] = best;
        }
    }
    if (st == SIFT_OK && full)
        fprintf(stderr, "%s: context full (%lld tokens): stopped after %zu greedy steps of %lld; raise it with -c/--ctx\n",
                p->who, (long long)s->n_ctx, n_ids - n_prompt, (long long)p->n_predict);
    return st;
}

static int logits_run(const cli_params *p)
{
    char *buf = NULL;
    const char *text = NULL;
    size_t len = 0;
    if (cli_read_prompt(p, &buf, &text, &len) != 0) return 1;
    const sift_sampler_config scfg = cli_sampler_config(p);
    cli_session s;
    sift_sampler *sampler = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    size_t n_prompt = 0;
    int rc = cli_open(p, &s);
    if (rc == 0) rc = cli_start(p, &s);
    /* the prompt's tokens and the greedy ones after them: never more than fit */
    const size_t room = (size_t)(p->n_predict < s.n_ctx ? p->n_predict : s.n_ctx);
    if (rc == 0) rc = cli_tokenize_prompt(p, &s, text, len, room, &ids, &n_prompt);
    if (rc == 0 && !(logits = malloc((size_t)s.info.n_vocab * sizeof *logits))) {
        fprintf(stderr, "%s: out of host memory\n", p->who);
        rc = 1;
    }
    sift_status st = SIFT_OK;
    if (rc == 0 && ((st = sift_sampler_create(&scfg, &sampler)) != SIFT_OK ||
                    (st = write_logits(p, &s, sampler, ids, n_prompt, logits)) != SIFT_OK)) {
        const char *e = sift_last_error();
        fprintf(stderr, "%s: %s\n", p->who, e && *e ? e : sift_status_name(st));
        rc = 1;
    }
    sift_sampler_destroy(sampler);
    free(logits);
    free(ids);
    free(buf);
    cli_close(&s);
    return rc;
}

int cli_logits(int argc, char **argv)
{
    cli_params p = cli_params_default(&logits_command);
    int rc = 0;
    if (cli_parse(&logits_command, argc, argv, &p, &rc) && (rc = cli_check_generation(&p)) == 0) rc = logits_run(&p);
    cli_params_free(&p);
    return rc;
}
