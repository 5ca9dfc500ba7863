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

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* Before the model loads: whether it and a session of p's context fit the device
 * (sift_model_estimate); 0 to go on (also where the estimate cannot tell, or fails: the load and the
 * session then report what is wrong), 1 after saying what does not fit. The session config is p's as
 * far as it is known without the model: --kv-offload in bytes becomes tokens only through the loaded
 * model's shape, so the estimate is made without it (an upper bound: offload only moves KV off the
 * device), and a random predictor (--predictor random) has no file to count. */
static int check_fits(const cli_params *p, sift_context *ctx)
{
    sift_session_config c = p->session;
    if (c.policy == SIFT_POLICY_DENSE) { /* S, W, k as cli_session_config leaves them */
        const sift_session_config lib = sift_session_config_default();
        c.sink = lib.sink, c.window = lib.window, c.budget = lib.budget;
    }
    c.kv_device_tokens = p->offload_tokens;
    if (p->offload_bytes || !p->offload) c.kv_offload_v_only = 0, c.kv_device_tokens = 0;
    const char *predictor = p->predictor && strcmp(p->predictor, "random") != 0 ? p->predictor : NULL;
    sift_memory_estimate e;
    if (sift_model_estimate(ctx, p->model, predictor, &c, &e) != SIFT_OK || e.fits != 0) return 0;
    if (p->offload_bytes) return 0; /* it may fit with the device pool --kv-offload asks for */
    sift_device_info dev;
    const char *device = sift_device_get_info(sift_context_backend(ctx), sift_context_device(ctx), &dev) == SIFT_OK
                             ? dev.name
                             : sift_context_device_name(ctx);
    char context[64];
    if (c.n_ctx) snprintf(context, sizeof context, "a context of %lld tokens", (long long)c.n_ctx);
    else snprintf(context, sizeof context, "the model's training context");
    fprintf(stderr, "%s: %s needs %.0f MiB on %s (weights %.0f, KV %.0f, scratch %.0f, predictor %.0f); the device has %.0f MiB free",
            p->who, context, mib(e.device_total), device, mib(e.weights), mib(e.kv), mib(e.scratch),
            mib(e.predictor), mib(e.device_free));
    sift_memory_estimate o;
    c.kv_device_tokens = e.kv_device_tokens;
    if (e.kv_device_tokens > 0 && sift_model_estimate(ctx, p->model, predictor, &c, &o) == SIFT_OK)
        fprintf(stderr, "; --kv-offload %lld fits (%.0f MiB on the device, %.0f MiB of KV in host memory)\n",
                (long long)e.kv_device_tokens, mib(o.device_total), mib(o.kv_host));
    else
        fprintf(stderr, "; use a smaller --ctx\n");
    return 1;
}

int cli_open(const cli_params *p, cli_session *s)
{
    memset(s, 0, sizeof *s);
    sift_status st = cli_open_backend(p->backend, p->threads, p->verbose != 0, &s->ctx);
    if (st == SIFT_OK && check_fits(p, s->ctx) != 0) return 1;
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
    if (sift_session_create(s->model, &s->cfg, &s->session) == SIFT_OK) return cli_apply_butler_reuse(p, s->session);
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
