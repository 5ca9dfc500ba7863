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

static const cli_command chat_command = {
    "chat", CLI_CHAT, "-m MODEL.gguf [options]",
    "Chats with an instruction-tuned model: reads one message per line from standard input (a\n"
    "terminal or a pipe; empty lines are skipped; a line holds at most 4 MiB), writes the\n"
    "conversation in the model's chat template and streams each reply to standard output, one\n"
    "line per reply. The conversation stays in the KV cache: a turn evaluates only its new\n"
    "tokens. A reply ends at the model's end-of-turn token or after -n tokens; the chat ends at\n"
    "the end of input, or when the context is full (with a message). After each reply, stderr\n"
    "gets a line with the turn's token counts. On a terminal, Ctrl-C stops the reply being\n"
    "written (the chat goes on), and at the prompt ends the chat.\n"
    "Special tokens written in a message (<|im_end|>, ...) are read as those tokens, as in\n"
    "llama.cpp's conversation mode.\n",
    "`sift run -cnv` (or --conversation) is `sift chat` with the same options.\n"};

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

/* The user's message in line as the tokens the cache lacks (*ids grown to hold them): 0, 1 after a
 * message of a failure, or -1 when they do not fit the context (the chat ends, with a message). */
static int turn_tokens(const cli_params *p, const cli_session *s, const char *tmpl, conversation *conv, const char *line,
                       int turn, int32_t **ids, size_t *n_ids)
{
    const char *delta = NULL;
    size_t delta_len = 0;
    if (!push_message(conv, "user", line)) {
        fprintf(stderr, "sift chat: out of memory\n");
        return 1;
    }
    if (!render_turn(tmpl, conv, &delta, &delta_len)) return 1;
    int32_t *grown = realloc(*ids, (4 * delta_len + 8) * sizeof *grown);
    if (!grown) {
        fprintf(stderr, "sift chat: out of memory\n");
        return 1;
    }
    *ids = grown;
    if (sift_model_tokenize_special(s->model, delta, delta_len, turn == 1 && s->info.add_bos, 1, *ids, 4 * delta_len + 8,
                                    n_ids) != SIFT_OK) {
        fprintf(stderr, "%s: %s\n", p->who, sift_last_error());
        return 1;
    }
    if (sift_session_pos(s->session) + (int64_t)*n_ids > s->n_ctx) {
        fprintf(stderr, "sift chat: context full: turn %d's %zu tokens do not fit after %lld of %lld; the chat ends "
                        "(raise it with -c/--ctx)\n", turn, *n_ids, (long long)sift_session_pos(s->session), (long long)s->n_ctx);
        return -1;
    }
    return 0;
}

/* A reply as it is written. */
typedef struct reply {
    int64_t written;  /* its tokens on stdout, every one of them in the cache */
    bool declined;    /* a token sampled after Ctrl-C: not written, and not fed (the step is stopped) */
} reply;

static int on_reply_token(void *user, int32_t token, const char *piece, size_t len)
{
    reply *r = user;
    (void)token;
    if (interrupted) {
        r->declined = true;
        return 1;
    }
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    r->written++;
    return 0;
}

typedef enum { TURN_DONE, TURN_FULL, TURN_STOPPED, TURN_FAILED } turn_end;

/* Feeds a turn's tokens ids[n_ids] and writes the reply to them, through sift_session_generate_tokens
 * (with the chat's one sampler, so that the replies are those of one sampling loop); the turn's
 * line on stderr. */
static turn_end reply_to(const cli_params *p, cli_session *s, sift_sampler *sampler, const int32_t *ids, size_t n_ids, int turn)
{
    reply r = {0};
    const char *why = "-n";
    int64_t n = 0;
    sift_status st = SIFT_OK;
    interrupted = 0;
    if (p->n_predict == 0) {
        st = sift_session_eval(s->session, ids, n_ids, NULL);
    } else {
        sift_generate_config gc = sift_generate_config_default();
        gc.max_tokens = p->n_predict < 0 ? INT64_MAX : p->n_predict;
        gc.stop_at_eos = SIFT_STOP_AT_EOG;
        gc.on_token = on_reply_token;
        gc.user = &r;
        sift_stop_reason stop = SIFT_STOP_MAX_TOKENS;
        st = sift_session_generate_tokens(s->session, ids, n_ids, &gc, sampler, &n, &stop);
        why = stop == SIFT_STOP_EOS ? "end of turn" : stop == SIFT_STOP_CONTEXT ? "context full" : "-n";
    }
    if (st == SIFT_E_CANCELLED && n == 0) { /* the message is in the cache in part: the conversation cannot go on */
        fprintf(stderr, "\nsift chat: stopped while reading the message (Ctrl-C); the chat ends\n");
        return TURN_STOPPED;
    }
    if (r.declined) why = "stopped with Ctrl-C";
    else if (st == SIFT_E_CANCELLED) why = "stopped with Ctrl-C; its last token is not in the context";
    if (st == SIFT_E_CANCELLED) st = SIFT_OK;
    interrupted = 0;
    fputc('\n', stdout);
    fflush(stdout);
    if (st != SIFT_OK) {
        fprintf(stderr, "sift chat: %s\n", sift_last_error());
        return TURN_FAILED;
    }
    fprintf(stderr, "sift chat: turn %d: %zu new tokens evaluated, %lld generated (%s); %lld of %lld in the context\n", turn,
            n_ids, (long long)r.written, why, (long long)sift_session_pos(s->session), (long long)s->n_ctx);
    return !strcmp(why, "context full") ? TURN_FULL : TURN_DONE;
}

/* The conversation, a line of stdin a message, until the end of input or a full context. */
static int converse(const cli_params *p, cli_session *s, sift_sampler *sampler, const char *tmpl, conversation *conv)
{
    char *line = NULL;
    size_t line_cap = 0, n_ids = 0;
    int32_t *ids = NULL;
    int rc = 0;
    const bool interactive = isatty(STDIN_FILENO);
    for (int turn = 1;; turn++) {
        if (interactive) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        const int got = read_line(&line, &line_cap);
        if (got < 0) rc = 1;
        if (got <= 0) break;
        if (!*line) {
            turn--;
            continue;
        }
        const int ready = turn_tokens(p, s, tmpl, conv, line, turn, &ids, &n_ids);
        if (ready != 0) {
            rc = ready > 0;
            break;
        }
        const turn_end end = reply_to(p, s, sampler, ids, n_ids, turn);
        if (end == TURN_FAILED) rc = 1;
        if (end == TURN_FAILED || end == TURN_STOPPED) break;
        if (!push_message(conv, "assistant", reply_stand_in)) {
            fprintf(stderr, "sift chat: out of memory\n");
            rc = 1;
            break;
        }
        if (end == TURN_FULL) {
            fprintf(stderr, "sift chat: context full (%lld tokens): the chat ends (raise it with -c/--ctx)\n", (long long)s->n_ctx);
            break;
        }
    }
    free(line);
    free(ids);
    return rc;
}

/* The chat template to use, and its format's name: 0, or 1 or 2 (a bad --chat-template) after a
 * message. */
static int find_template(const cli_params *p, const sift_model *m, const char **tmpl, const char **name)
{
    *tmpl = p->chat_template ? p->chat_template : sift_model_chat_template(m);
    *name = *tmpl ? sift_chat_template_name(*tmpl) : NULL;
    if (!*tmpl) {
        fprintf(stderr, "sift chat: %s has no chat template (tokenizer.chat_template); name its format with "
                        "--chat-template (chatml, llama3, llama2, ...)\n", p->model);
        return 1;
    }
    if (*name) return 0;
    if (p->chat_template)
        fprintf(stderr, "sift chat: --chat-template '%s' is no format sift knows (chatml, llama3, llama2, "
                        "llama2-sys, llama2-sys-bos, llama2-sys-strip)\n", p->chat_template);
    else
        fprintf(stderr, "sift chat: the chat template of %s is none that sift recognises (it knows chatml, llama3 "
                        "and llama2's by their markers; it runs no Jinja); name its format with --chat-template\n",
                p->model);
    return p->chat_template ? 2 : 1;
}

static int chat(const cli_params *p)
{
    cli_session s;
    sift_sampler *sampler = NULL;
    conversation conv = {0};
    const char *tmpl = NULL, *tmpl_name = NULL;
    int rc = cli_open(p, &s);
    if (rc == 0) rc = find_template(p, s.model, &tmpl, &tmpl_name);
    if (rc == 0 && isatty(STDIN_FILENO)) {
        struct sigaction sa = {.sa_handler = on_interrupt};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        s.cfg.should_stop = stop_requested;
    }
    if (rc == 0) rc = cli_start(p, &s);
    if (rc == 0) {
        const sift_sampler_config scfg = cli_sampler_config(p);
        if (sift_sampler_create(&scfg, &sampler) != SIFT_OK) {
            fprintf(stderr, "sift chat: %s\n", sift_last_error());
            rc = 1;
        }
    }
    if (rc == 0 && p->prompt && !push_message(&conv, "system", p->prompt)) {
        fprintf(stderr, "sift chat: out of memory\n");
        rc = 1;
    }
    if (rc == 0) {
        fprintf(stderr, "sift chat: %s on %s: template %s (%s), context %lld tokens, policy %s; one message per line\n",
                p->model, sift_context_device_name(s.ctx), tmpl_name, p->chat_template ? "--chat-template" : "from the model",
                (long long)s.n_ctx, sift_policy_name(s.cfg.policy));
        rc = converse(p, &s, sampler, tmpl, &conv);
        cli_print_kv_pools(stderr, "sift chat", s.session); /* with --kv-offload: the pools after the chat */
    }
    free_conversation(&conv);
    sift_sampler_destroy(sampler);
    cli_close(&s);
    return rc;
}

int cli_chat(int argc, char **argv)
{
    cli_params p = cli_params_default(&chat_command);
    int rc = 0;
    if (!cli_parse(&chat_command, argc, argv, &p, &rc)) return rc;
    if (p.session.policy == SIFT_POLICY_BUTLER) {
        fprintf(stderr, "sift chat: the butler policy needs a predictor, which sift chat does not load (use sift run)\n");
        return 2;
    }
    if ((rc = cli_check_generation(&p)) == 0) rc = chat(&p);
    cli_params_free(&p);
    return rc;
}
