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

/* Each generated token's text, as it comes. */
static int print_piece(void *user, int32_t token, const char *piece, size_t len)
{
    (void)user, (void)token;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return 0; /* non-zero would stop here */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: embed MODEL.gguf [PROMPT] [N] [BACKEND]\n");
        return 2;
    }
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
    const int n_new = argc > 3 ? atoi(argv[3]) : 32;
    sift_context_config ccfg = sift_context_config_default(); /* every config starts from its _default() */
    if (argc > 4 && sift_backend_kind_parse(argv[4], &ccfg.backend) != SIFT_OK) return fail("backend");

    sift_context *ctx = NULL;
    sift_model *model = NULL;
    sift_session *session = NULL;
    int rc = 1;
    if (sift_context_create_with(&ccfg, &ctx) != SIFT_OK) return fail("context");
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
    if (sift_session_create(model, &cfg, &session) != SIFT_OK) {
        rc = fail("session");
        goto done;
    }
    /* greedy (the sampler's default), up to n_new tokens, stopping at EOS or at a blank line */
    sift_generate_config gen = sift_generate_config_default();
    gen.max_tokens = n_new > 0 ? n_new : 1;
    const char *const stop[] = {"\n\n"};
    gen.stop = stop;
    gen.n_stop = 1;
    gen.on_token = print_piece;
    printf("%s", prompt);
    int64_t n = 0;
    sift_stop_reason why;
    if (sift_session_generate(session, prompt, strlen(prompt), &gen, &n, &why) != SIFT_OK) {
        rc = fail("generate");
        goto done;
    }
    printf("\n");
    rc = 0;
done:
    sift_session_destroy(session);
    sift_model_destroy(model); /* in any order: the session kept the model alive */
    sift_context_destroy(ctx);
    return rc;
}
