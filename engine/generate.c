/* Streaming generation (sift_session_generate, and sift_session_generate_tokens for a prompt of
 * tokens and a sampler that goes on from call to call): the tokenize / eval / sample / token_piece
 * loop an application would write, with its stop conditions, as one call. It uses only the public calls
 * of the session, the model and the sampler, so its tokens are those of that loop. */
#include "session.h"

#include <stdlib.h>
#include <string.h>

sift_generate_config sift_generate_config_default(void)
{
    sift_generate_config c = {.struct_size = sizeof c, .max_tokens = 256, .add_bos = 1, .stop_at_eos = 1,
                              .sampler = sift_sampler_config_default()};
    return c;
}

/* The last bytes of the generated text: enough to find a stop string that the newest piece
 * completes (the longest stop string less one byte, then the piece). */
typedef struct text_tail {
    char *bytes;
    size_t len, keep; /* keep: the longest stop string's length - 1 */
} text_tail;

static bool contains(const char *hay, size_t n, const char *needle, size_t m)
{
    for (size_t i = 0; m <= n && i <= n - m; i++)
        if (memcmp(hay + i, needle, m) == 0) return true;
    return false;
}

/* Appends piece and reports whether a stop string now appears in text that includes part of it. */
static bool tail_push(text_tail *t, const char *piece, size_t len, const char *const *stop, int n_stop)
{
    if (n_stop == 0) return false;
    if (t->len > t->keep) { /* keep only what a stop string ending in the new piece could start in */
        memmove(t->bytes, t->bytes + t->len - t->keep, t->keep);
        t->len = t->keep;
    }
    const size_t old = t->len;
    memcpy(t->bytes + t->len, piece, len);
    t->len += len;
    for (int i = 0; i < n_stop; i++) {
        const size_t m = strlen(stop[i]);
        /* occurrences that end inside the new piece: they start at most m - 1 bytes before it */
        const size_t from = old > m - 1 ? old - (m - 1) : 0;
        if (len > 0 && contains(t->bytes + from, t->len - from, stop[i], m)) return true;
    }
    return false;
}

#define PIECE_CAP 256 /* a token's bytes: every vocabulary's pieces are far shorter */

static sift_status check_config(const sift_generate_config *c, size_t *longest, const char *fn)
{
    if (c->max_tokens < 1) return sift_set_error(SIFT_E_INVALID, "%s: max_tokens %lld (must be >= 1)", fn, (long long)c->max_tokens);
    if (c->n_stop < 0 || (c->n_stop > 0 && !c->stop))
        return sift_set_error(SIFT_E_INVALID, "%s: %d stop strings at %p", fn, c->n_stop, (const void *)c->stop);
    *longest = 0;
    for (int i = 0; i < c->n_stop; i++) {
        if (!c->stop[i] || !c->stop[i][0]) return sift_set_error(SIFT_E_INVALID, "%s: stop string %d is NULL or empty", fn, i);
        const size_t m = strlen(c->stop[i]);
        if (m > 4096) return sift_set_error(SIFT_E_INVALID, "%s: stop string %d is %zu bytes (at most 4096)", fn, i, m);
        if (m > *longest) *longest = m;
    }
    return SIFT_OK;
}

/* The prompt: len bytes of text, or n tokens. */
typedef struct prompt_in {
    bool is_text;
    const char *text;
    size_t len;
    const int32_t *tokens;
    size_t n;
} prompt_in;

/* The prompt's tokens: the caller's, or the text's tokenized into a new array (*owned). */
static sift_status prompt_tokens(const sift_model *m, const sift_model_info *info, const prompt_in *p, int add_bos,
                                 const int32_t **ids, size_t *n, int32_t **owned, const char *fn)
{
    *owned = NULL;
    if (!p->is_text) {
        *ids = p->tokens;
        *n = p->n;
    } else {
        const size_t cap = sift_tokenizer_max_tokens(p->len);
        *owned = cap < SIZE_MAX / sizeof **owned ? malloc(cap * sizeof **owned) : NULL;
        if (!*owned) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
        TRY(sift_model_tokenize(m, p->text, p->len, add_bos && info->bos >= 0, *owned, cap, n));
        *ids = *owned;
    }
    return *n ? SIFT_OK : sift_set_error(SIFT_E_INVALID, "%s: the prompt has no tokens", fn);
}

/* Whether tok ends the generation (stop_at_eos: 1 at EOS, SIFT_STOP_AT_EOG at any end-of-generation token). */
static bool ends(const sift_model *m, const sift_model_info *info, int stop_at_eos, int32_t tok)
{
    if (stop_at_eos == SIFT_STOP_AT_EOG) return sift_model_token_is_eog(m, tok) != 0;
    return stop_at_eos && tok == info->eos;
}

static sift_status generate(sift_session *s, const prompt_in *p, const sift_generate_config *cfg, sift_sampler *shared,
                            int64_t *n_tokens, sift_stop_reason *reason, const char *fn)
{
    if (n_tokens) *n_tokens = 0;
    if (reason) *reason = SIFT_STOP_MAX_TOKENS;
    if (!s || (p->is_text ? !p->text && p->len : !p->tokens && p->n))
        return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    sift_generate_config c = sift_generate_config_default();
    if (cfg) TRY(sift_config_read(cfg, &c, sizeof c, sizeof c, fn));
    size_t longest = 0;
    TRY(check_config(&c, &longest, fn));
    const sift_model *m = s->m;
    sift_model_info info;
    sift_model_get_info(m, &info);
    sift_sampler *own = NULL, *sampler = shared;
    if (!sampler) TRY(sift_sampler_create(&c.sampler, &own));
    if (!sampler) sampler = own;

    int32_t *owned = NULL;
    const int32_t *ids = NULL;
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    text_tail tail = {.bytes = malloc(longest + PIECE_CAP + 1), .keep = longest ? longest - 1 : 0};
    sift_status st = logits && tail.bytes ? SIFT_OK : sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    size_t n_prompt = 0;
    if (st == SIFT_OK) st = prompt_tokens(m, &info, p, c.add_bos, &ids, &n_prompt, &owned, fn);
    if (st == SIFT_OK) st = sift_session_eval(s, ids, n_prompt, logits);
    int64_t n = 0;
    sift_stop_reason why = SIFT_STOP_MAX_TOKENS;
    while (st == SIFT_OK) {
        const int32_t tok = sift_sampler_sample(sampler, logits, info.n_vocab);
        if (ends(m, &info, c.stop_at_eos, tok)) {
            why = SIFT_STOP_EOS;
            break;
        }
        char piece[PIECE_CAP];
        size_t plen = 0;
        st = sift_model_token_piece(m, tok, piece, sizeof piece, &plen);
        if (st != SIFT_OK) break;
        n++;
        const bool by_callback = c.on_token && c.on_token(c.user, tok, piece, plen) != 0;
        const bool by_string = tail_push(&tail, piece, plen, c.stop, c.n_stop);
        const bool done = by_string || by_callback || n == c.max_tokens;
        if (sift_session_pos(s) >= s->cfg.n_ctx) {
            why = SIFT_STOP_CONTEXT;
            break;
        }
        st = sift_session_eval(s, &tok, 1, done ? NULL : logits);
        if (st == SIFT_E_LIMIT) { /* the KV pool is full before the sequence's context */
            why = SIFT_STOP_CONTEXT;
            st = SIFT_OK;
            break;
        }
        if (done) {
            why = by_string ? SIFT_STOP_STRING : by_callback ? SIFT_STOP_CALLBACK : SIFT_STOP_MAX_TOKENS;
            break;
        }
    }
    if (n_tokens) *n_tokens = n;
    if (reason) *reason = why;
    free(tail.bytes);
    free(logits);
    free(owned);
    sift_sampler_destroy(own);
    return st;
}

sift_status sift_session_generate(sift_session *s, const char *prompt, size_t len, const sift_generate_config *cfg,
                                  int64_t *n_tokens, sift_stop_reason *reason)
{
    const prompt_in p = {.is_text = true, .text = prompt, .len = len};
    return generate(s, &p, cfg, NULL, n_tokens, reason, "sift_session_generate");
}

sift_status sift_session_generate_tokens(sift_session *s, const int32_t *tokens, size_t n, const sift_generate_config *cfg,
                                         sift_sampler *sampler, int64_t *n_tokens, sift_stop_reason *reason)
{
    const prompt_in p = {.tokens = tokens, .n = n};
    return generate(s, &p, cfg, sampler, n_tokens, reason, "sift_session_generate_tokens");
}
