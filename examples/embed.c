/* The smallest program that embeds sift: load a GGUF model, feed a prompt, and stream the
 * generated text, with TokenSelect choosing the tokens each decode step attends.
 *
 *   embed MODEL.gguf [PROMPT] [N] [BACKEND]      (defaults: "Once upon a time", 32 tokens, cpu)
 *
 * Build it against an installed sift:
 *   cc embed.c $(pkg-config --cflags --libs sift) -o embed
 * Every call returns a status; sift_last_error() says what went wrong. */
#include <sift.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "embed: %s: %s\n", what, sift_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: embed MODEL.gguf [PROMPT] [N] [BACKEND]\n");
        return 2;
    }
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
    const int n_new = argc > 3 ? atoi(argv[3]) : 32;
    sift_backend_kind kind = SIFT_BACKEND_CPU;
    if (argc > 4 && sift_backend_kind_parse(argv[4], &kind) != SIFT_OK) return fail("backend");

    sift_context *ctx = NULL;
    sift_model *model = NULL;
    sift_session *session = NULL;
    sift_sampler *sampler = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    int rc = 1;
    if (sift_context_create(kind, &ctx) != SIFT_OK) return fail("context");
    if (sift_model_load(ctx, argv[1], &model) != SIFT_OK) {
        rc = fail("model");
        goto done;
    }
    sift_model_info info;
    sift_model_get_info(model, &info);

    /* TokenSelect: every decode step attends the 4 first tokens, the 32 last and the 64 best */
    sift_session_config cfg = sift_session_config_default();
    cfg.n_ctx = info.n_ctx_train < 512 ? info.n_ctx_train : 512;
    cfg.policy = SIFT_POLICY_TOKENSELECT;
    cfg.sink = 4;
    cfg.window = 32;
    cfg.budget = 64;
    sift_sampler_config scfg = sift_sampler_config_default();
    scfg.temperature = 0.0f; /* greedy */
    const size_t cap = strlen(prompt) + 8;
    size_t n_prompt = 0;
    ids = malloc(cap * sizeof *ids);
    logits = malloc((size_t)info.n_vocab * sizeof *logits);
    if (!ids || !logits) {
        fprintf(stderr, "embed: out of memory\n");
        goto done;
    }
    if (sift_session_create(model, &cfg, &session) != SIFT_OK || sift_sampler_create(&scfg, &sampler) != SIFT_OK ||
        sift_model_tokenize(model, prompt, strlen(prompt), info.bos >= 0, ids, cap, &n_prompt) != SIFT_OK ||
        sift_session_eval(session, ids, n_prompt, logits) != SIFT_OK) {
        rc = fail("prompt");
        goto done;
    }
    printf("%s", prompt);
    for (int i = 0; i < n_new && sift_session_pos(session) < cfg.n_ctx; i++) {
        int32_t next = sift_sampler_sample(sampler, logits, info.n_vocab);
        if (next == info.eos) break;
        char piece[256];
        size_t len = 0;
        if (sift_model_token_piece(model, next, piece, sizeof piece, &len) != SIFT_OK) {
            rc = fail("token piece");
            goto done;
        }
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        if (sift_session_eval(session, &next, 1, logits) != SIFT_OK) {
            rc = fail("decode");
            goto done;
        }
    }
    printf("\n");
    rc = 0;
done:
    free(ids);
    free(logits);
    sift_sampler_destroy(sampler);
    sift_session_destroy(session);
    sift_model_destroy(model);
    sift_context_destroy(ctx);
    return rc;
}
