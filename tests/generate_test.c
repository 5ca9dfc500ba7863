/* sift_session_generate on every backend present, against the loop it stands for (tokenize,
 * sift_session_eval, a greedy sampler, sift_model_token_piece):
 *   - the tokens and the text passed to the callback equal the loop's, and a count stop gives
 *     exactly max_tokens of them;
 *   - a stop string taken from the loop's text stops at the token that completes it;
 *   - a callback returning non-zero stops after that token;
 *   - the session holds the prompt and the tokens passed, so a second call continues it;
 *   - a model and a context destroyed before the session keep working until the session goes
 *     (sift.h: ownership; the sanitizer job runs this under AddressSanitizer);
 *   - bad configs are refused;
 *   - a model loaded from memory and from a region of an open file (after other bytes) computes
 *     the logits of the one loaded from its path, to the bit; bad sources are refused;
 *   - loading reports its progress (bytes done, never less than before, ending at the total) and
 *     stops with SIFT_E_CANCELLED, holding nothing, when the callback asks;
 *   - sift_session_generate_tokens: the prompt's tokens give the tokens of sift_session_generate on
 *     its text (sampled); one sampler passed to two calls, the second fed the first's last token
 *     again, gives the tokens of one call of the combined length (and a fresh sampler for the second
 *     does not: the check can tell);
 *   - stop_at_eos = SIFT_STOP_AT_EOG on a chat model (CHAT_MODEL, made by sift-gen-model --chat
 *     llama3: EOS <|end_of_text|>, end of turn <|eot_id|>): a sampled run whose first
 *     end-of-generation token is the end of turn stops there with SIFT_STOP_EOS and that token not
 *     passed, where stop_at_eos = 1 (EOS only) passes it on.
 * Usage: sift-generate-test MODEL.gguf [CHAT_MODEL.gguf] (a missing model file is skipped with a
 * message; without CHAT_MODEL the end-of-generation checks are skipped). */
#include "backend_filter.h"
#include "report.h"
#include "sift.h"
#include "test_files.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_GEN = 40 };

static const char *const prompt = "Once upon a time";
static const char *bname; /* the backend under test */

#define check(ok, what) test_check((ok), bname, "%s", (what))

/* What the callback saw. */
typedef struct {
    int32_t tokens[N_GEN + 8];
    char text[4096];
    size_t text_len;
    int n, stop_after; /* stop_after > 0: return 1 at that many tokens */
} seen;

static int on_token(void *user, int32_t token, const char *piece, size_t len)
{
    seen *s = user;
    if (s->n < N_GEN + 8) s->tokens[s->n] = token;
    s->n++;
    if (s->text_len + len < sizeof s->text) {
        memcpy(s->text + s->text_len, piece, len);
        s->text_len += len;
        s->text[s->text_len] = 0;
    }
    return s->stop_after > 0 && s->n >= s->stop_after;
}

/* The low-level loop: N_GEN greedy tokens after the prompt (EOS ends it early); their text, and
 * its length after each token (ends). */
static int reference(sift_model *m, int32_t *tokens, char *text, size_t cap, size_t *ends, size_t *n_prompt_out)
{
    sift_model_info info;
    sift_model_get_info(m, &info);
    sift_session *s = NULL;
    sift_sampler *smp = NULL;
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    const size_t id_cap = sift_tokenizer_max_tokens(strlen(prompt));
    int32_t *ids = malloc(id_cap * sizeof *ids);
    size_t n_prompt = 0, used = 0;
    int n = 0;
    text[0] = 0;
    bool ok = logits && ids && sift_model_tokenize(m, prompt, strlen(prompt), 1, ids, id_cap, &n_prompt) == SIFT_OK &&
              sift_session_create(m, NULL, &s) == SIFT_OK && sift_sampler_create(NULL, &smp) == SIFT_OK &&
              sift_session_eval(s, ids, n_prompt, logits) == SIFT_OK;
    while (ok && n < N_GEN) {
        const int32_t tok = sift_sampler_sample(smp, logits, info.n_vocab);
        if (tok == info.eos) break;
        char piece[256];
        size_t len = 0;
        ok = sift_model_token_piece(m, tok, piece, sizeof piece, &len) == SIFT_OK && used + len < cap;
        if (!ok) break;
        memcpy(text + used, piece, len);
        used += len;
        text[used] = 0;
        ends[n] = used;
        tokens[n++] = tok;
        ok = sift_session_eval(s, &tok, 1, logits) == SIFT_OK;
    }
    if (!ok) test_note(bname, "reference loop failed: %s", sift_last_error());
    *n_prompt_out = n_prompt;
    sift_sampler_destroy(smp);
    sift_session_destroy(s);
    free(ids);
    free(logits);
    return ok ? n : -1;
}

/* An empty prompt on a vocabulary without BOS (the model's file with its BOS key renamed) has no
 * token to start from: refused with the default add_bos, where sampling would read logits that were
 * never written; a prompt with text still generates. */
static void empty_prompt_without_bos(sift_backend_kind kind, const char *path)
{
    static const char key[] = "tokenizer.ggml.bos_token_id";
    size_t size = 0;
    char *buf = (char *)test_read_file(path, &size);
    char *at = NULL;
    for (size_t i = 0; buf && i + sizeof key - 1 <= size && !at; i++)
        if (!memcmp(buf + i, key, sizeof key - 1)) at = buf + i;
    char tmp[] = "/tmp/sift-generate-no-bos-XXXXXX";
    const int fd = at ? mkstemp(tmp) : -1;
    if (at) memcpy(at + sizeof key - 3, "no", 2); /* same length: the file stays valid */
    const bool written = fd >= 0 && write(fd, buf, size) == (ssize_t)size;
    if (fd >= 0) close(fd);
    free(buf);
    check(written, "a copy of the model without BOS written");
    sift_context *ctx = written ? test_context_open(kind, "", false) : NULL;
    sift_model *m = NULL;
    sift_session *s = NULL;
    if (ctx && sift_model_load(ctx, tmp, &m) == SIFT_OK && sift_session_create(m, NULL, &s) == SIFT_OK) {
        sift_model_info info;
        sift_model_get_info(m, &info);
        check(info.bos < 0, "  the copy's vocabulary has no BOS");
        sift_generate_config gc = sift_generate_config_default();
        gc.max_tokens = 3;
        int64_t n = -1;
        sift_stop_reason why = SIFT_STOP_EOS;
        const sift_status st = sift_session_generate(s, "", 0, &gc, &n, &why);
        check(st == SIFT_E_INVALID && n == 0 && strstr(sift_last_error(), "no tokens") && sift_session_pos(s) == 0,
              "  an empty prompt with add_bos is refused: no token to start from");
        check(sift_session_generate(s, "Once", 4, &gc, &n, &why) == SIFT_OK && n >= 1, "  a prompt with text generates");
    } else if (written) {
        check(false, sift_last_error());
    }
    sift_session_destroy(s);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    if (fd >= 0) unlink(tmp);
}

/* What the load's progress callback saw. */
typedef struct {
    int calls, stop_at; /* stop_at > 0: answer "stop" at that call */
    uint64_t last_done, total;
    bool backwards, total_changed;
} load_seen;
static int on_load(void *user, uint64_t done, uint64_t total)
{
    load_seen *l = user;
    l->backwards |= done < l->last_done;
    l->total_changed |= l->calls > 0 && total != l->total;
    l->last_done = done;
    l->total = total;
    return ++l->calls == l->stop_at;
}

static void load_progress(sift_context *ctx, const char *path)
{
    load_seen l = {0};
    sift_model_load_config c = sift_model_load_config_default();
    c.progress = on_load;
    c.progress_user = &l;
    sift_model *m = NULL;
    sift_status st = sift_model_load_with(ctx, path, &c, &m);
    sift_model_info info = {0};
    if (m) sift_model_get_info(m, &info);
    check(st == SIFT_OK && l.calls > info.n_layers && !l.backwards && !l.total_changed && l.total > 0 &&
              l.last_done == l.total,
          "load progress: a call a weight and more, bytes never going back, ending at the total");
    sift_model_destroy(m);
    m = NULL;
    l = (load_seen){.stop_at = 3};
    st = sift_model_load_with(ctx, path, &c, &m);
    check(st == SIFT_E_CANCELLED && !m && l.calls == 3, "load stopped by its progress callback: SIFT_E_CANCELLED, no model");
    sift_model_load_config zero = {0};
    check(sift_model_load_with(ctx, path, &zero, &m) == SIFT_E_INVALID && !m, "a load config of struct_size 0 is refused");
}

/* The logits of the tokens 1 .. 6 fed to a fresh session of m, into out[n_vocab]; false on error. */
static bool first_logits(sift_model *m, float *out)
{
    sift_session *s = NULL;
    const int32_t toks[6] = {1, 2, 3, 4, 5, 6};
    const bool ok = sift_session_create(m, NULL, &s) == SIFT_OK && sift_session_eval(s, toks, 6, out) == SIFT_OK;
    sift_session_destroy(s);
    return ok;
}

static void load_sources(sift_context *ctx, const char *path)
{
    size_t size = 0;
    uint8_t *bytes = test_read_file(path, &size);
    sift_model *by_path = NULL, *by_memory = NULL, *by_fd = NULL;
    float *a = NULL, *b = NULL, *c = NULL;
    char tmp[] = "/tmp/sift-load-fd-XXXXXX";
    const int fd = size > 0 && bytes ? mkstemp(tmp) : -1;
    check(fd >= 0, "load sources: the model read, a temporary file made");
    if (fd < 0) goto out;
    unlink(tmp);
    const size_t lead = 5000; /* not a multiple of a page: the mapping starts before the GGUF */
    unsigned char *junk = calloc(lead, 1);
    const bool written = junk && write(fd, junk, lead) == (ssize_t)lead && write(fd, bytes, size) == (ssize_t)size;
    free(junk);
    sift_model_info info;
    const bool loaded = written && sift_model_load(ctx, path, &by_path) == SIFT_OK &&
                        sift_model_load_memory(ctx, bytes, size, NULL, &by_memory) == SIFT_OK &&
                        sift_model_load_fd(ctx, fd, lead, (uint64_t)size, NULL, &by_fd) == SIFT_OK;
    close(fd); /* the mapping keeps the file */
    check(loaded, "a model loads from its path, from memory and from a file region");
    if (!loaded) goto out;
    sift_model_get_info(by_path, &info);
    a = malloc(3 * (size_t)info.n_vocab * sizeof *a);
    b = a + info.n_vocab;
    c = b + info.n_vocab;
    check(first_logits(by_path, a) && first_logits(by_memory, b) && first_logits(by_fd, c) &&
              !memcmp(a, b, (size_t)info.n_vocab * sizeof *a) && !memcmp(a, c, (size_t)info.n_vocab * sizeof *a),
          "loaded from memory and from a file region: the logits of the path's model, to the bit");
    sift_model *none = NULL;
    check(sift_model_load_fd(ctx, -1, 0, 0, NULL, &none) == SIFT_E_INVALID && !none &&
              sift_model_load_fd(ctx, STDIN_FILENO, (uint64_t)size * 4, 0, NULL, &none) == SIFT_E_INVALID && !none &&
              sift_model_load_memory(ctx, NULL, 10, NULL, &none) == SIFT_E_INVALID && !none &&
              sift_model_load_memory(ctx, bytes, 100, NULL, &none) != SIFT_OK && !none,
          "bad sources refused: no descriptor, an offset past the end, no buffer, a truncated one");
out:
    free(a);
    sift_model_destroy(by_path);
    sift_model_destroy(by_memory); /* before the buffer it reads */
    sift_model_destroy(by_fd);
    free(bytes);
}

/* Every token the callback saw, up to a cap (the end-of-generation runs); stop_at >= 0: return 1
 * after a token that is stop_at, or any end-of-generation token of m for stop_at = -2. */
typedef struct {
    int32_t tokens[1024];
    int n;
    int32_t stop_at;
    const sift_model *m;
} collected;

static int collect(void *user, int32_t token, const char *piece, size_t len)
{
    (void)piece, (void)len;
    collected *c = user;
    if (c->n < (int)(sizeof c->tokens / sizeof c->tokens[0])) c->tokens[c->n] = token;
    c->n++;
    return c->stop_at == -2 ? sift_model_token_is_eog(c->m, token) : c->stop_at >= 0 && token == c->stop_at;
}

/* sift_session_generate_tokens against sift_session_generate, and a sampler across two calls. */
static void generate_tokens(sift_backend_kind kind, const char *path)
{
    sift_context *ctx = test_context_open(kind, "", false);
    sift_model *m = NULL;
    sift_session *s = NULL;
    sift_sampler *smp = NULL;
    int32_t *ids = NULL;
    if (!ctx) return;
    if (sift_model_load(ctx, path, &m) != SIFT_OK || sift_session_create(m, NULL, &s) != SIFT_OK) {
        check(false, sift_last_error());
        goto out;
    }
    sift_model_info info;
    sift_model_get_info(m, &info);
    const size_t cap = sift_tokenizer_max_tokens(strlen(prompt));
    size_t n_ids = 0;
    ids = malloc(cap * sizeof *ids);
    check(ids && sift_model_tokenize(m, prompt, strlen(prompt), 1, ids, cap, &n_ids) == SIFT_OK && n_ids > 1,
          "generate_tokens: the prompt tokenized (BOS first)");
    if (!ids || n_ids <= 1) goto out;
    /* sampled, so that the sampler's state matters; EOS does not stop the runs compared */
    enum { LEN = 24, FIRST = 10 };
    sift_generate_config gc = sift_generate_config_default();
    gc.max_tokens = LEN;
    gc.stop_at_eos = 0;
    gc.sampler.temperature = 0.9f;
    gc.sampler.top_k = 40;
    gc.sampler.seed = 5;
    gc.on_token = collect;
    collected text = {.stop_at = -1}, toks = {.stop_at = -1};
    int64_t n_text = -1, n_toks = -1;
    sift_stop_reason why_text = SIFT_STOP_EOS, why_toks = SIFT_STOP_EOS;
    gc.user = &text;
    const sift_status st_text = sift_session_generate(s, prompt, strlen(prompt), &gc, &n_text, &why_text);
    const int64_t pos_text = sift_session_pos(s);
    sift_session_rewind(s, 0, 0);
    gc.user = &toks;
    const sift_status st_toks = sift_session_generate_tokens(s, ids, n_ids, &gc, NULL, &n_toks, &why_toks);
    check(st_text == SIFT_OK && st_toks == SIFT_OK && n_text == LEN && n_toks == LEN && why_toks == SIFT_STOP_MAX_TOKENS &&
              text.n == LEN && toks.n == LEN && !memcmp(text.tokens, toks.tokens, LEN * sizeof *toks.tokens) &&
              sift_session_pos(s) == pos_text,
          "generate_tokens: the prompt's tokens give generate's 24 sampled tokens on its text");

    /* one sampler, two calls: FIRST tokens, then the rest after the last one is fed again */
    collected parts = {.stop_at = -1};
    gc.user = &parts;
    int64_t n1 = -1, n2 = -1;
    sift_status st = sift_sampler_create(&gc.sampler, &smp);
    sift_session_rewind(s, 0, 0);
    gc.max_tokens = FIRST;
    if (st == SIFT_OK) st = sift_session_generate_tokens(s, ids, n_ids, &gc, smp, &n1, NULL);
    /* the session holds the last token: the second call's prompt is that token, fed again */
    const int32_t last = parts.tokens[FIRST - 1];
    if (st == SIFT_OK) st = sift_session_rewind(s, 0, sift_session_pos(s) - 1);
    gc.max_tokens = LEN - FIRST;
    if (st == SIFT_OK) st = sift_session_generate_tokens(s, &last, 1, &gc, smp, &n2, NULL);
    check(st == SIFT_OK && n1 == FIRST && n2 == LEN - FIRST && parts.n == LEN &&
              !memcmp(parts.tokens, text.tokens, LEN * sizeof *text.tokens),
          "generate_tokens: one sampler over two calls (10 + 14) gives one call's 24 tokens");
    /* the same two calls with a fresh sampler for the second: its draws start over, so the tokens
     * differ from the single call's (what the check above would see if the state were lost) */
    collected fresh = {.stop_at = -1};
    gc.user = &fresh;
    sift_session_rewind(s, 0, 0);
    gc.max_tokens = FIRST;
    st = sift_session_generate_tokens(s, ids, n_ids, &gc, NULL, &n1, NULL);
    if (st == SIFT_OK) st = sift_session_rewind(s, 0, sift_session_pos(s) - 1);
    gc.max_tokens = LEN - FIRST;
    if (st == SIFT_OK) st = sift_session_generate_tokens(s, &last, 1, &gc, NULL, &n2, NULL);
    check(st == SIFT_OK && fresh.n == LEN && !memcmp(fresh.tokens, text.tokens, FIRST * sizeof *text.tokens) &&
              memcmp(fresh.tokens + FIRST, text.tokens + FIRST, (LEN - FIRST) * sizeof *text.tokens) != 0,
          "  a fresh sampler for the second call gives other tokens after the first 10");
    check(sift_session_generate_tokens(s, ids, 0, &gc, smp, &n1, NULL) == SIFT_E_INVALID,
          "generate_tokens: a prompt of no tokens is refused");
out:
    free(ids);
    sift_sampler_destroy(smp);
    sift_session_destroy(s);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
}

static const char *chat_model; /* argv[2]: a llama3 chat model, or NULL */

/* SIFT_STOP_AT_EOG on the chat model: nearly uniform sampling (temperature 100 over 512 tokens)
 * until an end-of-generation token, over seeds until the first one is the end of turn, not EOS. */
static void stop_at_eog(sift_backend_kind kind)
{
    if (!chat_model) {
        test_note(bname, "skipped: no chat model given: SIFT_STOP_AT_EOG is not checked");
        return;
    }
    sift_context *ctx = test_context_open(kind, "", false);
    sift_model *m = NULL;
    sift_session *s = NULL;
    if (!ctx) return;
    sift_session_config sc = sift_session_config_default();
    sc.n_ctx = 1024;
    if (sift_model_load(ctx, chat_model, &m) != SIFT_OK || sift_session_create(m, &sc, &s) != SIFT_OK) {
        check(false, sift_last_error());
        goto out;
    }
    sift_model_info info;
    sift_model_get_info(m, &info);
    int32_t eot = -1;
    for (int32_t t = 0; t < info.n_vocab && eot < 0; t++)
        if (t != info.eos && sift_model_token_is_eog(m, t)) eot = t;
    check(info.eos >= 0 && eot >= 0 && sift_model_token_is_eog(m, info.eos), "chat model: EOS and an end of turn both end a generation");
    if (eot < 0 || info.bos < 0) goto out;
    const int32_t start = info.bos;
    sift_generate_config gc = sift_generate_config_default();
    gc.max_tokens = 1000;
    gc.stop_at_eos = 0;
    gc.sampler.temperature = 100.0f;
    gc.on_token = collect;
    collected ref = {.stop_at = -2, .m = m};
    int j = -1;
    for (uint64_t seed = 1; seed <= 32 && j < 0; seed++) {
        ref = (collected){.stop_at = -2, .m = m};
        gc.sampler.seed = seed;
        gc.user = &ref;
        sift_session_rewind(s, 0, 0);
        if (sift_session_generate_tokens(s, &start, 1, &gc, NULL, NULL, NULL) != SIFT_OK) break;
        if (ref.n <= 1000 && ref.n >= 2 && ref.tokens[ref.n - 1] == eot) j = ref.n - 1;
    }
    test_note(bname, "seed %llu: the first end-of-generation token, %d, after %d tokens",
           (unsigned long long)gc.sampler.seed, j >= 0 ? (int)ref.tokens[j] : -1, j);
    check(j >= 1, "a seed whose first end-of-generation token is the end of turn (within 32 seeds of 1000 tokens)");
    if (j < 1) goto out;
    collected eog = {.stop_at = -1};
    gc.user = &eog;
    gc.stop_at_eos = SIFT_STOP_AT_EOG;
    int64_t n = -1;
    sift_stop_reason why = SIFT_STOP_MAX_TOKENS;
    sift_session_rewind(s, 0, 0);
    sift_status st = sift_session_generate_tokens(s, &start, 1, &gc, NULL, &n, &why);
    check(st == SIFT_OK && why == SIFT_STOP_EOS && n == j && eog.n == j && !memcmp(eog.tokens, ref.tokens, (size_t)j * sizeof *ref.tokens),
          "SIFT_STOP_AT_EOG stops at the end of turn (SIFT_STOP_EOS), which is not passed");
    collected eos_only = {.stop_at = eot};
    gc.user = &eos_only;
    gc.stop_at_eos = 1;
    sift_session_rewind(s, 0, 0);
    st = sift_session_generate_tokens(s, &start, 1, &gc, NULL, &n, &why);
    check(st == SIFT_OK && why == SIFT_STOP_CALLBACK && n == j + 1 && eos_only.tokens[j] == eot,
          "stop_at_eos = 1 (EOS only) passes the end of turn on");
out:
    sift_session_destroy(s);
    sift_model_destroy(m);
    sift_context_destroy(ctx);
}

static void run_backend(sift_backend_kind kind, const char *path)
{
    bname = sift_backend_kind_name(kind);
    sift_context *ctx = test_context_open(kind, "", false);
    if (!ctx) return;
    load_progress(ctx, path);
    load_sources(ctx, path);
    sift_model *m = NULL;
    if (sift_model_load(ctx, path, &m) != SIFT_OK) {
        check(false, sift_last_error());
        sift_context_destroy(ctx);
        return;
    }
    int32_t ref[N_GEN];
    char ref_text[4096];
    size_t ref_ends[N_GEN], n_prompt = 0;
    const int n_ref = reference(m, ref, ref_text, sizeof ref_text, ref_ends, &n_prompt);
    check(n_ref == N_GEN, "the low-level loop generates 40 tokens before any EOS");
    if (n_ref != N_GEN) goto out;

    sift_session *s = NULL;
    sift_session_config zero;
    memset(&zero, 0, sizeof zero);
    check(sift_session_create(m, &zero, &s) == SIFT_E_INVALID && strstr(sift_last_error(), "struct_size"),
          "a zero-initialised session config is refused");
    if (sift_session_create(m, NULL, &s) != SIFT_OK) {
        check(false, sift_last_error());
        goto out;
    }
    /* the count stop; then the model and the context lose their callers' handles */
    seen a = {.n = 0};
    sift_generate_config gc = sift_generate_config_default();
    gc.max_tokens = 10;
    gc.on_token = on_token;
    gc.user = &a;
    int64_t n = -1;
    sift_stop_reason why = SIFT_STOP_EOS;
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    m = NULL;
    ctx = NULL;
    sift_status st = sift_session_generate(s, prompt, strlen(prompt), &gc, &n, &why);
    check(st == SIFT_OK && n == 10 && why == SIFT_STOP_MAX_TOKENS && a.n == 10,
          "max_tokens 10: 10 tokens, stopped by the count (model and context destroyed)");
    check(a.n == 10 && memcmp(a.tokens, ref, 10 * sizeof *ref) == 0, "  the tokens are the low-level loop's first 10");
    check(sift_session_pos(s) == (int64_t)n_prompt + 10, "  the session holds the prompt and the 10 tokens");
    /* continuing: the same session and an empty prompt text without BOS has no tokens */
    gc.add_bos = 0;
    check(sift_session_generate(s, "", 0, &gc, &n, &why) == SIFT_E_INVALID, "an empty prompt without BOS is refused");
    sift_session_rewind(s, 0, 0);

    /* the whole run: tokens and text equal the loop's */
    seen b = {.n = 0};
    gc = sift_generate_config_default();
    gc.max_tokens = N_GEN;
    gc.on_token = on_token;
    gc.user = &b;
    st = sift_session_generate(s, prompt, strlen(prompt), &gc, &n, &why);
    check(st == SIFT_OK && n == N_GEN && b.n == N_GEN && memcmp(b.tokens, ref, sizeof ref) == 0,
          "40 tokens equal the low-level loop's");
    check(strcmp(b.text, ref_text) == 0, "  and so does their text");

    /* a stop string: 6 bytes from the middle of the loop's text; it stops at the first token
     * whose piece completes an occurrence */
    char stop[16];
    snprintf(stop, sizeof stop, "%.6s", ref_text + strlen(ref_text) / 2);
    int first = -1;
    for (int i = 0; i < N_GEN && first < 0; i++) {
        char prefix[4096];
        snprintf(prefix, sizeof prefix, "%.*s", (int)ref_ends[i], ref_text);
        if (strstr(prefix, stop)) first = i;
    }
    sift_session_rewind(s, 0, 0);
    seen c = {.n = 0};
    gc.on_token = on_token;
    gc.user = &c;
    const char *const stops[2] = {"no such text in the story \x01", stop};
    gc.stop = stops;
    gc.n_stop = 2;
    st = sift_session_generate(s, prompt, strlen(prompt), &gc, &n, &why);
    test_note(bname, "stop string \"%s\": %lld tokens, text \"%s\"", stop, (long long)n, c.text);
    check(st == SIFT_OK && why == SIFT_STOP_STRING && first >= 0 && n == first + 1,
          "a stop string stops at the token that completes it");
    check(n > 0 && n <= N_GEN && memcmp(c.tokens, ref, (size_t)n * sizeof *ref) == 0, "  its tokens are the loop's");

    /* the callback's stop */
    sift_session_rewind(s, 0, 0);
    seen d = {.stop_after = 3};
    gc = sift_generate_config_default();
    gc.on_token = on_token;
    gc.user = &d;
    st = sift_session_generate(s, prompt, strlen(prompt), &gc, &n, &why);
    check(st == SIFT_OK && n == 3 && why == SIFT_STOP_CALLBACK && memcmp(d.tokens, ref, 3 * sizeof *ref) == 0,
          "a callback returning 1 at the third token stops there");

    /* bad configs */
    gc = sift_generate_config_default();
    gc.max_tokens = 0;
    check(sift_session_generate(s, prompt, strlen(prompt), &gc, &n, &why) == SIFT_E_INVALID, "max_tokens 0 is refused");
    gc = sift_generate_config_default();
    const char *const empty[1] = {""};
    gc.stop = empty;
    gc.n_stop = 1;
    check(sift_session_generate(s, prompt, strlen(prompt), &gc, &n, &why) == SIFT_E_INVALID, "an empty stop string is refused");
    gc = sift_generate_config_default();
    gc.sampler.struct_size = 0;
    check(sift_session_generate(s, prompt, strlen(prompt), &gc, &n, &why) == SIFT_E_INVALID,
          "a zero-initialised sampler inside the config is refused");
    sift_session_destroy(s); /* the last user of the model and the context */
out:
    sift_model_destroy(m);
    sift_context_destroy(ctx);
    empty_prompt_without_bos(kind, path);
    generate_tokens(kind, path);
    stop_at_eog(kind);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("SIFT_VULKAN_VALIDATION", "1", 0);
    if (argc > 2 && test_model_exists(argv[2])) chat_model = argv[2];
    return test_main_one_model(argc, argv, "generate", run_backend);
}
