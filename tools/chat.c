/* `sift chat`: a conversation with a chat model, one user message per line of standard input.
 *
 * The conversation lives in the session's KV cache: each turn evaluates only the text that the
 * model's chat template adds for it (the end of the previous reply, the user's message, the start
 * of the next reply). That text is the difference between the template applied to the
 * conversation with and without the new message; the replies already generated are in the cache
 * as tokens, so the history holds a one-byte stand-in for each (no template trims or changes it),
 * and the difference starts right after it. */
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* On a terminal, Ctrl-C while the model replies stops the reply (the session's should_stop, asked
 * before each step) and the chat goes on; at the prompt it ends the chat, as the end of input does
 * (the read is interrupted: no SA_RESTART). */
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}
static int stop_requested(void *user)
{
    (void)user;
    return interrupted;
}

/* Stands for a reply in the history the template is applied to. */
static const char reply_stand_in[] = "\x01";

static void usage_chat(FILE *f)
{
    fputs("usage: sift chat -m MODEL.gguf [options]\n"
          "\n"
          "Chats with an instruction-tuned model: reads one message per line from standard input (a\n"
          "terminal or a pipe; empty lines are skipped; a line holds at most 4 MiB), writes the\n"
          "conversation in the model's chat template and streams each reply to standard output, one\n"
          "line per reply. The conversation stays in the KV cache: a turn evaluates only its new\n"
          "tokens. A reply ends at the model's end-of-turn token or after -n tokens; the chat ends at\n"
          "the end of input, or when the context is full (with a message). After each reply, stderr\n"
          "gets a line with the turn's token counts. On a terminal, Ctrl-C stops the reply being\n"
          "written (the chat goes on), and at the prompt ends the chat.\n"
          "Special tokens written in a message (<|im_end|>, ...) are read as those tokens, as in\n"
          "llama.cpp's conversation mode.\n"
          "\n"
          "options:\n"
          "  -m, --model PATH   GGUF model (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K weights)\n"
          "  --chat-template T  chatml, llama3, llama2, llama2-sys, llama2-sys-bos or llama2-sys-strip\n"
          "                     (default: recognised from the model's tokenizer.chat_template by its\n"
          "                     markers; sift runs no Jinja)\n"
          "  -sys, --system TEXT  system prompt (-p, --prompt: the same, as in llama.cpp's -cnv)\n"
          "  -n, --n-predict N  the most tokens per reply (default -1: until the end of the turn)\n"
          "  -c, --ctx N        tokens in the conversation (default: the model's training context)\n"
          "  --backend B        cpu, vulkan or cuda (default: cuda, else a Vulkan GPU, else cpu)\n"
          "  -t, --threads N    the CPU backend's threads (default: one per core)\n"
          "  --policy P         decode attention, as in sift run but for butler (default dense)\n"
          "  --budget k  --sink S  --window W   the selection policies' sizes, as in sift run\n"
          "  --kv f16|f32       KV cache type (default f16)\n"
          CLI_OFFLOAD_HELP
          "  --temp T           temperature; 0 is greedy (default 0.8)\n"
          "  --top-k K          sample from the K most likely tokens (default 40; 0: off)\n"
          "  --top-p P          sample from the smallest set of probability P (default 0.95; 1: off)\n"
          "  -s, --seed S       sampling seed (default 1)\n"
          "\n"
          "`sift run -cnv` (or --conversation) is `sift chat` with the same options.\n",
          f);
}

typedef struct chat_options {
    const char *model, *tmpl, *system, *backend;
    int64_t n_predict, ctx, threads, budget, sink, window, top_k, seed;
    double temp, top_p;
    sift_policy policy;
    sift_dtype kv;
    cli_offload offload;
} chat_options;

/* 0, 1 for --help, or 2 after printing what is wrong. */
static int parse_options(int argc, char **argv, chat_options *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage_chat(stdout);
            return 1;
        }
        if (!strcmp(a, "-cnv") || !strcmp(a, "--conversation")) continue; /* from `sift run -cnv` */
        const int offload_opt = cli_parse_offload("sift chat", argc, argv, &i, &o->offload);
        if (offload_opt < 0) return 2;
        if (offload_opt > 0) continue;
        bool ok = val != NULL;
        const char *need = NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = val;
        else if (!strcmp(a, "--chat-template")) o->tmpl = val;
        else if (!strcmp(a, "-sys") || !strcmp(a, "--system") || !strcmp(a, "-p") || !strcmp(a, "--prompt")) o->system = val;
        else if (!strcmp(a, "--backend")) o->backend = val;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            ok = cli_parse_threads(val, &o->threads), need = "a thread count in 1 .. 4096";
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            ok = cli_parse_i64(val, &o->n_predict) && o->n_predict >= -1, need = "a whole number >= 0, or -1";
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
            ok = cli_parse_i64(val, &o->ctx) && o->ctx >= 0, need = "a number of tokens (0: the model's)";
        else if (!strcmp(a, "--budget")) ok = cli_parse_i64(val, &o->budget) && o->budget >= 0, need = "tokens >= 0";
        else if (!strcmp(a, "--sink")) ok = cli_parse_i64(val, &o->sink) && o->sink >= 0, need = "tokens >= 0";
        else if (!strcmp(a, "--window")) ok = cli_parse_i64(val, &o->window) && o->window >= 0, need = "tokens >= 0";
        else if (!strcmp(a, "--top-k")) ok = cli_parse_i64(val, &o->top_k) && o->top_k >= 0, need = "a whole number >= 0";
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed"))
            ok = cli_parse_i64(val, &o->seed) && o->seed >= 0, need = "a whole number >= 0";
        else if (!strcmp(a, "--temp") || !strcmp(a, "--top-p")) {
            char *end = NULL;
            const double x = val ? strtod(val, &end) : 0.0;
            ok = val && end && !*end && x == x, need = "a number";
            if (ok) *(!strcmp(a, "--temp") ? &o->temp : &o->top_p) = x;
        } else if (!strcmp(a, "--policy")) {
            ok = val && (!strcmp(val, "select") ? (o->policy = SIFT_POLICY_TOKENSELECT, true)
                                                : sift_policy_parse(val, &o->policy) == SIFT_OK);
            need = "a policy sift run lists (dense, tokenselect, streaming, ...)";
        } else if (!strcmp(a, "--kv")) {
            ok = val && (!strcmp(val, "f16") || !strcmp(val, "f32")), need = "f16 or f32";
            if (ok) o->kv = !strcmp(val, "f16") ? SIFT_F16 : SIFT_F32;
        } else {
            fprintf(stderr, "sift chat: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            if (!val) fprintf(stderr, "sift chat: %s needs a value%s%s\n", a, need ? ": " : "", need ? need : "");
            else fprintf(stderr, "sift chat: %s needs %s, not '%s'\n", a, need ? need : "a valid value", val);
            return 2;
        }
        i++;
    }
    if (!o->model) {
        fprintf(stderr, "sift chat: no model given (-m MODEL.gguf; see --help)\n");
        return 2;
    }
    if (o->policy == SIFT_POLICY_BUTLER) {
        fprintf(stderr, "sift chat: the butler policy needs a predictor, which sift chat does not load (use sift run)\n");
        return 2;
    }
    return 0;
}

/* The conversation so far: messages (their texts owned) and the template's text up to the start
 * of the reply being written. */
typedef struct conversation {
    sift_chat_message *msgs;
    size_t n, cap;
    char *rendered; /* the template applied to msgs, with the assistant's turn opened */
    size_t rendered_len;
} conversation;

static bool push_message(conversation *c, const char *role, const char *content)
{
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 16;
        sift_chat_message *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return false;
        c->msgs = m, c->cap = cap;
    }
    char *copy = malloc(strlen(content) + 1);
    if (!copy) return false;
    strcpy(copy, content);
    c->msgs[c->n++] = (sift_chat_message){role, copy};
    return true;
}

static void free_conversation(conversation *c)
{
    for (size_t i = 0; i < c->n; i++) free((char *)c->msgs[i].content);
    free(c->msgs);
    free(c->rendered);
}

/* Applies the template to the conversation (its last message the user's new one) and sets *delta
 * to the text the cache lacks: all of it on the first turn, else what follows the last reply.
 * false after printing why not. */
static bool render_turn(const char *tmpl, conversation *c, const char **delta, size_t *delta_len)
{
    size_t len = 0;
    if (sift_chat_format(tmpl, c->msgs, c->n, 1, NULL, 0, &len) != SIFT_OK && len == 0) {
        fprintf(stderr, "sift chat: %s\n", sift_last_error());
        return false;
    }
    char *text = malloc(len + 1);
    if (!text || sift_chat_format(tmpl, c->msgs, c->n, 1, text, len + 1, &len) != SIFT_OK) {
        fprintf(stderr, "sift chat: %s\n", text ? sift_last_error() : "out of memory");
        free(text);
        return false;
    }
    size_t at = 0;
    if (c->rendered) { /* the earlier text and the reply's stand-in come first */
        const size_t keep = c->rendered_len + sizeof reply_stand_in - 1;
        if (len < keep || memcmp(text, c->rendered, c->rendered_len) != 0 ||
            memcmp(text + c->rendered_len, reply_stand_in, sizeof reply_stand_in - 1) != 0) {
            fprintf(stderr, "sift chat: the chat template rewrites earlier turns, so the conversation cannot be "
                            "extended in the cache\n");
            free(text);
            return false;
        }
        at = keep;
    }
    free(c->rendered);
    c->rendered = text;
    c->rendered_len = len;
    *delta = text + at;
    *delta_len = len - at;
    return true;
}

/* The longest message (line of input) chat reads: far more than a context holds, and a bound on the
 * memory an endless line (/dev/zero) can take. */
#define CHAT_MAX_LINE_BYTES ((size_t)4 << 20)

/* Reads a line without its end into *buf (grown as needed, NUL-terminated): 1, 0 at the end of
 * input, or -1 after a message when the line is longer than CHAT_MAX_LINE_BYTES or memory runs out. */
static int read_line(char **buf, size_t *cap)
{
    size_t len = 0;
    int c = EOF;
    while ((c = getc(stdin)) != EOF && c != '\n') {
        if (len == CHAT_MAX_LINE_BYTES) {
            fprintf(stderr, "sift chat: a message (line of input) longer than %zu MiB; the chat ends\n",
                    CHAT_MAX_LINE_BYTES >> 20);
            return -1;
        }
        if (len + 2 > *cap) { /* room for c and the NUL */
            const size_t next = *cap ? 2 * *cap : 256;
            char *p = realloc(*buf, next);
            if (!p) {
                fprintf(stderr, "sift chat: out of memory for a message of %zu bytes\n", len + 1);
                return -1;
            }
            *buf = p;
            *cap = next;
        }
        (*buf)[len++] = (char)c;
    }
    if (c == EOF && len == 0) return 0;
    while (len > 0 && (*buf)[len - 1] == '\r') len--;
    if (!*buf) { /* an empty line before any other */
        if (!(*buf = malloc(1))) {
            fprintf(stderr, "sift chat: out of memory\n");
            return -1;
        }
        *cap = 1;
    }
    (*buf)[len] = 0;
    return 1;
}

static int chat(const chat_options *o)
{
    sift_context *ctx = NULL;
    sift_model *model = NULL;
    if (cli_open_model("sift chat", o->backend, o->threads, o->model, &ctx, &model) != 0) return 1;
    sift_session *session = NULL;
    sift_sampler *sampler = NULL;
    float *logits = NULL;
    int32_t *ids = NULL;
    char *line_buf = NULL;
    size_t line_cap = 0;
    conversation conv = {0};
    int rc = 1;

    const char *tmpl = o->tmpl ? o->tmpl : sift_model_chat_template(model);
    const char *tmpl_name = tmpl ? sift_chat_template_name(tmpl) : NULL;
    if (!tmpl) {
        fprintf(stderr, "sift chat: %s has no chat template (tokenizer.chat_template); name its format with "
                        "--chat-template (chatml, llama3, llama2, ...)\n", o->model);
        goto done;
    }
    if (!tmpl_name) {
        rc = o->tmpl ? 2 : 1;
        if (o->tmpl)
            fprintf(stderr, "sift chat: --chat-template '%s' is no format sift knows (chatml, llama3, llama2, "
                            "llama2-sys, llama2-sys-bos, llama2-sys-strip)\n", o->tmpl);
        else
            fprintf(stderr, "sift chat: the chat template of %s is none that sift recognises (it knows chatml, llama3 "
                            "and llama2's by their markers; it runs no Jinja); name its format with --chat-template\n",
                    o->model);
        goto done;
    }
    sift_model_info info;
    sift_model_get_info(model, &info);
    sift_session_config cfg = sift_session_config_default();
    cfg.n_ctx = o->ctx;
    cfg.kv_type = o->kv;
    cfg.policy = o->policy;
    if (o->policy != SIFT_POLICY_DENSE) cfg.sink = o->sink, cfg.window = o->window, cfg.budget = o->budget;
    sift_sampler_config scfg = sift_sampler_config_default();
    scfg.temperature = (float)o->temp;
    scfg.top_k = (int)o->top_k;
    scfg.top_p = (float)o->top_p;
    scfg.seed = (uint64_t)o->seed;
    if (cli_offload_apply("sift chat", &o->offload, model, &cfg) != 0) goto done;
    const bool interactive = isatty(STDIN_FILENO);
    if (interactive) {
        struct sigaction sa = {.sa_handler = on_interrupt};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        cfg.should_stop = stop_requested;
    }
    if (sift_session_create(model, &cfg, &session) != SIFT_OK || sift_sampler_create(&scfg, &sampler) != SIFT_OK) {
        fprintf(stderr, "sift chat: %s\n", sift_last_error());
        goto done;
    }
    const int64_t n_ctx = o->ctx ? o->ctx : info.n_ctx_train;
    logits = malloc((size_t)info.n_vocab * sizeof *logits);
    if (!logits || (o->system && !push_message(&conv, "system", o->system))) {
        fprintf(stderr, "sift chat: out of memory\n");
        goto done;
    }
    fprintf(stderr, "sift chat: %s on %s: template %s (%s), context %lld tokens, policy %s; one message per line\n",
            o->model, sift_context_device_name(ctx), tmpl_name, o->tmpl ? "--chat-template" : "from the model",
            (long long)n_ctx, sift_policy_name(o->policy));
    rc = 0;
    for (int turn = 1;; turn++) {
        if (interactive) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        const int got = read_line(&line_buf, &line_cap);
        if (got < 0) rc = 1;
        if (got <= 0) break;
        const char *line = line_buf;
        if (!*line) {
            turn--;
            continue;
        }
        const char *delta = NULL;
        size_t delta_len = 0, n_ids = 0;
        if (!push_message(&conv, "user", line)) {
            fprintf(stderr, "sift chat: out of memory\n");
            rc = 1;
            break;
        }
        if (!render_turn(tmpl, &conv, &delta, &delta_len)) {
            rc = 1;
            break;
        }
        int32_t *grown = realloc(ids, (4 * delta_len + 8) * sizeof *ids);
        if (!grown) {
            fprintf(stderr, "sift chat: out of memory\n");
            rc = 1;
            break;
        }
        ids = grown;
        sift_status s = sift_model_tokenize_special(model, delta, delta_len, turn == 1 && info.add_bos, 1, ids,
                                                    4 * delta_len + 8, &n_ids);
        if (s != SIFT_OK) {
            fprintf(stderr, "sift chat: %s\n", sift_last_error());
            rc = 1;
            break;
        }
        if (sift_session_pos(session) + (int64_t)n_ids > n_ctx) {
            fprintf(stderr, "sift chat: context full: turn %d's %zu tokens do not fit after %lld of %lld; the chat ends "
                            "(raise it with -c/--ctx)\n", turn, n_ids, (long long)sift_session_pos(session), (long long)n_ctx);
            break;
        }
        interrupted = 0;
        if ((s = sift_session_eval(session, ids, n_ids, logits)) != SIFT_OK) {
            if (s == SIFT_E_CANCELLED) { /* the message is in the cache in part: the conversation cannot go on */
                fprintf(stderr, "\nsift chat: stopped while reading the message (Ctrl-C); the chat ends\n");
                break;
            }
            fprintf(stderr, "sift chat: %s\n", sift_last_error());
            rc = 1;
            break;
        }
        int64_t generated = 0;
        const char *why = "-n";
        for (;;) {
            if (o->n_predict >= 0 && generated >= o->n_predict) break;
            if (interrupted) { /* every token printed is in the cache */
                why = "stopped with Ctrl-C";
                break;
            }
            const int32_t next = sift_sampler_sample(sampler, logits, info.n_vocab);
            if (sift_model_token_is_eog(model, next)) {
                why = "end of turn";
                break;
            }
            char piece[256];
            size_t len = 0;
            if (sift_model_token_piece(model, next, piece, sizeof piece, &len) == SIFT_OK) fwrite(piece, 1, len, stdout);
            fflush(stdout);
            generated++;
            if (sift_session_pos(session) >= n_ctx) {
                why = "context full";
                break;
            }
            if ((s = sift_session_eval(session, &next, 1, logits)) == SIFT_E_CANCELLED) {
                why = "stopped with Ctrl-C; its last token is not in the context"; /* Ctrl-C after the check above */
                s = SIFT_OK;
                break;
            }
            if (s != SIFT_OK) break;
        }
        interrupted = 0;
        fputc('\n', stdout);
        fflush(stdout);
        if (s != SIFT_OK) {
            fprintf(stderr, "sift chat: %s\n", sift_last_error());
            rc = 1;
            break;
        }
        fprintf(stderr, "sift chat: turn %d: %zu new tokens evaluated, %lld generated (%s); %lld of %lld in the context\n",
                turn, n_ids, (long long)generated, why, (long long)sift_session_pos(session), (long long)n_ctx);
        if (!push_message(&conv, "assistant", reply_stand_in)) {
            fprintf(stderr, "sift chat: out of memory\n");
            rc = 1;
            break;
        }
        if (!strcmp(why, "context full")) {
            fprintf(stderr, "sift chat: context full (%lld tokens): the chat ends (raise it with -c/--ctx)\n", (long long)n_ctx);
            break;
        }
    }
    cli_print_kv_pools(stderr, "sift chat", session); /* with --kv-offload: the pools after the chat */
done:
    free(line_buf);
    free(ids);
    free(logits);
    free_conversation(&conv);
    sift_sampler_destroy(sampler);
    sift_session_destroy(session);
    sift_model_destroy(model);
    sift_context_destroy(ctx);
    return rc;
}

int cli_chat(int argc, char **argv)
{
    chat_options o = {.n_predict = -1, .budget = 2048, .sink = 128, .window = 512, .top_k = 40, .seed = 1, .temp = 0.8,
                      .top_p = 0.95, .policy = SIFT_POLICY_DENSE, .kv = SIFT_F16};
    const int r = parse_options(argc, argv, &o);
    if (r) return r == 1 ? 0 : 2;
    return chat(&o);
}
