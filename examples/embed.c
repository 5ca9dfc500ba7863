/* The smallest program that embeds sift: load a GGUF model, feed a prompt, and stream the
 * generated text, with TokenSelect choosing the tokens each decode step attends. On the way, what
 * a desktop application wires to its UI: the library's messages into its own log, a check that
 * the model and the context fit before loading, a progress bar while the model loads, and a stop
 * button (here Ctrl-C) that ends the generation, keeping what was generated.
 *
 *   embed MODEL.gguf [PROMPT] [N] [BACKEND]      (defaults: "Once upon a time", 32 tokens, cpu)
 *
 * Build it against an installed sift:
 *   cc embed.c $(pkg-config --cflags --libs sift) -o embed
 * Every call returns a status; sift_last_error() says what went wrong. */
#include <sift.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "embed: %s: %s\n", what, sift_last_error());
    return 1;
}

/* The library's messages, into the application's log (here stderr). The library never calls two
 * of them at once for one context, from whichever thread. */
static void on_log(void *user, sift_log_level level, const char *message)
{
    (void)user;
    fprintf(stderr, "[sift %s] %s\n", sift_log_level_name(level), message);
}

/* The load's progress bar: a quarter at a time. A non-zero answer would cancel the load. */
static int on_load_progress(void *user, uint64_t done, uint64_t total)
{
    int *quarters = user;
    while (total > 0 && *quarters < 4 && done * 4 >= total * (uint64_t)(*quarters + 1))
        fprintf(stderr, "loading: %d%%\n", 25 * ++*quarters);
    return 0;
}

/* The stop button: Ctrl-C asks the session to stop at its next chunk or step. */
static volatile sig_atomic_t stop_requested;
static void on_interrupt(int sig) { (void)sig, stop_requested = 1; }
static int should_stop(void *user) { return (void)user, stop_requested; }

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
    ccfg.log = on_log;

    sift_context *ctx = NULL;
    sift_model *model = NULL;
    sift_session *session = NULL;
    int rc = 1;
    if (sift_context_create_with(&ccfg, &ctx) != SIFT_OK) return fail("context");

    /* TokenSelect: every decode step attends the 4 first tokens, the 32 last and the 64 best, over
     * a context of 512 tokens (n_ctx is set once the model's own is known) */
    sift_session_config cfg = sift_session_config_default();
    cfg.n_ctx = 512;
    cfg.policy = SIFT_POLICY_TOKENSELECT;
    cfg.sink = 4;
    cfg.window = 32;
    cfg.budget = 64;
    cfg.should_stop = should_stop;

    /* Before anything is allocated: will the weights, the KV cache and the rest fit the device? */
    sift_memory_estimate est;
    if (sift_model_estimate(ctx, argv[1], NULL, &cfg, &est) != SIFT_OK) {
        rc = fail("estimate");
        goto done;
    }
    fprintf(stderr, "memory: %.1f MiB (weights %.1f, KV %.1f, scratch %.1f) of %.0f MiB free\n",
            (double)est.device_total / 1048576.0, (double)est.weights / 1048576.0, (double)est.kv / 1048576.0,
            (double)est.scratch / 1048576.0, (double)est.device_free / 1048576.0);
    if (est.fits == 0) {
        fprintf(stderr, "embed: the model and a context of %lld tokens do not fit this device\n", (long long)cfg.n_ctx);
        goto done;
    }

    int quarters = 0;
    sift_model_load_config lcfg = sift_model_load_config_default();
    lcfg.progress = on_load_progress;
    lcfg.progress_user = &quarters;
    if (sift_model_load_with(ctx, argv[1], &lcfg, &model) != SIFT_OK) {
        rc = fail("model");
        goto done;
    }
    sift_model_info info;
    sift_model_get_info(model, &info);
    if (info.n_ctx_train < cfg.n_ctx) cfg.n_ctx = info.n_ctx_train;
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
    signal(SIGINT, on_interrupt);
    int64_t n = 0;
    sift_stop_reason why;
    const sift_status st = sift_session_generate(session, prompt, strlen(prompt), &gen, &n, &why);
    if (st == SIFT_E_CANCELLED) {
        printf(" [stopped]"); /* the session keeps what it generated, and could go on */
    } else if (st != SIFT_OK) {
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
