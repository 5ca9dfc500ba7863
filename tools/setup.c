/* What run, logits and chat do alike before they generate: the prompt read, the backend, model,
 * predictor and session opened as the options ask, the prompt tokenized. */
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_check_generation(const cli_params *p)
{
    if (!p->model) {
        fprintf(stderr, "%s: no model given (-m MODEL.gguf; see --help)\n", p->who);
        return 2;
    }
    if (p->session.policy == SIFT_POLICY_BUTLER && !p->predictor) {
        fprintf(stderr, "%s: the butler policy needs --predictor FILE (tools/butler/train.py makes one)\n", p->who);
        return 2;
    }
    if (p->prompt && p->prompt_file) {
        fprintf(stderr, "%s: give the prompt with -p or -f, not both\n", p->who);
        return 2;
    }
    return p->session.policy != SIFT_POLICY_DENSE ? cli_check_selection(p) : 0;
}

int cli_read_prompt(const cli_params *p, char **buf, const char **text, size_t *len)
{
    *buf = NULL;
    *text = p->prompt ? p->prompt : "";
    *len = strlen(*text);
    if (!p->prompt_file) return 0;
    if (!(*buf = cli_read_file(p->prompt_file, len))) {
        fprintf(stderr, "%s: cannot read the prompt file %s: %s\n", p->who, p->prompt_file, cli_read_error(errno));
        return 1;
    }
    if (strlen(*buf) != *len) {
        fprintf(stderr, "%s: the prompt file %s contains a NUL byte (not text)\n", p->who, p->prompt_file);
        free(*buf);
        *buf = NULL;
        return 1;
    }
    *text = *buf;
    return 0;
}

int cli_open(const cli_params *p, cli_session *s)
{
    memset(s, 0, sizeof *s);
    sift_status st = cli_open_backend(p->backend, p->threads, &s->ctx);
    if (st == SIFT_OK) st = cli_load_model(p->who, s->ctx, p->model, &s->model);
    if (st != SIFT_OK) {
        const char *e = sift_last_error();
        fprintf(stderr, "%s: %s\n", p->who, e && *e ? e : sift_status_name(st));
        return 1;
    }
    if (cli_load_predictor(p->who, s->model, p->predictor, &s->predictor) != 0) return 1;
    sift_model_get_info(s->model, &s->info);
    s->n_ctx = p->session.n_ctx ? p->session.n_ctx : s->info.n_ctx_train;
    return cli_session_config(p, s->model, s->predictor, &s->cfg);
}

int cli_start(const cli_params *p, cli_session *s)
{
    if (sift_session_create(s->model, &s->cfg, &s->session) == SIFT_OK) return 0;
    fprintf(stderr, "%s: %s\n", p->who, sift_last_error());
    return 1;
}

void cli_close(cli_session *s)
{
    sift_session_destroy(s->session);
    sift_predictor_destroy(s->predictor);
    sift_model_destroy(s->model);
    sift_context_destroy(s->ctx);
    memset(s, 0, sizeof *s);
}

int cli_tokenize_prompt(const cli_params *p, const cli_session *s, const char *text, size_t len, size_t room, int32_t **ids,
                        size_t *n)
{
    *n = 0;
    const size_t max_ids = len < SIZE_MAX / 8 ? sift_tokenizer_max_tokens(len) : SIZE_MAX; /* what tokenize can give */
    *ids = max_ids < SIZE_MAX / 8 - room ? malloc((max_ids + room) * sizeof **ids) : NULL;
    if (!*ids) {
        fprintf(stderr, "%s: out of host memory for a prompt of %zu bytes\n", p->who, len);
        return 1;
    }
    if (sift_model_tokenize(s->model, text, len, s->info.bos >= 0, *ids, max_ids, n) != SIFT_OK) {
        fprintf(stderr, "%s: %s\n", p->who, sift_last_error());
        return 1;
    }
    if (*n == 0) { /* no token to condition the first one on: there would be no logits to sample */
        fprintf(stderr, "%s: the prompt has no tokens (it is empty and the model's vocabulary has no BOS token to "
                        "start from); give a prompt with -p or -f\n", p->who);
        return 1;
    }
    if ((int64_t)*n > s->n_ctx) {
        fprintf(stderr, "%s: the prompt is %zu tokens, more than the context of %lld tokens; raise it with -c/--ctx\n",
                p->who, *n, (long long)s->n_ctx);
        return 1;
    }
    return 0;
}
