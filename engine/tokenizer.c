/* Tokenizers from GGUF metadata: see tokenizer.h for what each kind does.
 *
 * Both kinds merge adjacent symbols with the same machinery: a doubly linked list of symbols over
 * a byte buffer, and a binary heap of candidate pairs ordered by (key, left position), where the
 * key is -score (SentencePiece) or the merge rank (BPE). A pair popped after one of its symbols
 * changed is stale and skipped: merges only grow symbols, so a changed symbol has a different
 * length (or none), and the pair's recorded total length no longer matches. */
#include "tokenizer.h"

#include "backend.h"
#include "strmap.h"
#include "unicode_tables.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct token_text {
    const char *ptr; /* into the tokenizer's text pool */
    size_t len;
} token_text;

struct sift_tokenizer {
    sift_tokenizer_kind kind;
    sift_bpe_pre pre;
    int32_t n_vocab;
    char *pool;          /* every token string, then (BPE) every merge string */
    token_text *tokens;  /* n_vocab */
    float *scores;       /* n_vocab (SentencePiece; zeros when the file has none) */
    uint8_t *types;      /* n_vocab sift_token_type values */
    sift_strmap pieces;  /* text -> id, for the tokens text can turn into (no control, unknown, byte) */
    sift_strmap merges;  /* "left right" -> rank (BPE) */
    token_text *merge_strs;
    int32_t byte_token[256]; /* SentencePiece: the <0xXX> token; BPE: the token of the byte's symbol; -1: none */
    uint16_t byte_cp[256];   /* BPE: GPT-2's symbol of each byte */
    int16_t cp_byte[324];    /* BPE: the byte of each symbol (code points 0..323), -1 for none */
    int32_t bos, eos, unk;
    bool add_bos;
    bool add_space_prefix;
};

/* GPT-2's byte -> code point map: printable Latin-1 bytes stand for themselves, the others are
 * shifted to 256 + n in byte order, so that every byte has a visible, non-space symbol. */
static void gpt2_byte_map(uint16_t byte_cp[256], int16_t cp_byte[324])
{
    for (int cp = 0; cp < 324; cp++) cp_byte[cp] = -1;
    int shifted = 0;
    for (int b = 0; b < 256; b++) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        byte_cp[b] = (uint16_t)(printable ? b : 256 + shifted++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

#define CP_INVALID 0xffffffffu

/* Decodes the code point at s[i] (n bytes in all): its length, and CP_INVALID with length 1 for a
 * byte that does not start a well-formed UTF-8 sequence (which then stays a byte of its own). */
static size_t utf8_decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp)
{
    const uint8_t c = s[i];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        *cp = CP_INVALID;
        return 1;
    }
    if (len > n - i) {
        *cp = CP_INVALID;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xc0) != 0x80) {
            *cp = CP_INVALID;
            return 1;
        }
        v = (v << 6) | (s[i + k] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        *cp = CP_INVALID;
        return 1;
    }
    *cp = v;
    return len;
}

/* ---- the merge machinery -------------------------------------------------------------------- */

typedef struct symbol {
    size_t start, len; /* bytes in the working buffer */
    int64_t prev, next; /* -1: none */
} symbol;

typedef struct bigram {
    double key; /* smaller merges first */
    int64_t left, right;
    size_t size; /* left.len + right.len when queued */
} bigram;

typedef struct heap {
    bigram *items;
    size_t n, cap;
} heap;

static bool comes_before(const bigram *a, const bigram *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static void heap_push(heap *h, bigram b)
{
    if (h->n == h->cap) return; /* cannot happen: sized for every pair a merge run can queue */
    size_t i = h->n++;
    while (i > 0 && comes_before(&b, &h->items[(i - 1) / 2])) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = b;
}

static bigram heap_pop(heap *h)
{
    bigram top = h->items[0], last = h->items[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && comes_before(&h->items[c + 1], &h->items[c])) c++;
        if (!comes_before(&h->items[c], &last)) break;
        h->items[i] = h->items[c];
        i = c;
    }
    if (h->n > 0) h->items[i] = last;
    return top;
}

/* One run of merges over buf. pair_key returns false when the pair does not merge. */
typedef bool (*pair_key_fn)(const sift_tokenizer *t, const char *buf, const symbol *l, const symbol *r, char *scratch,
                            double *key);

typedef struct merger {
    const sift_tokenizer *t;
    const char *buf;
    symbol *syms;
    heap h;
    char *scratch; /* room for two symbols and a space (BPE's merge key) */
    pair_key_fn pair_key;
} merger;

static void try_pair(merger *m, int64_t l, int64_t r)
{
    if (l < 0 || r < 0) return;
    double key;
    if (!m->pair_key(m->t, m->buf, &m->syms[l], &m->syms[r], m->scratch, &key)) return;
    heap_push(&m->h, (bigram){key, l, r, m->syms[l].len + m->syms[r].len});
}

static void run_merges(merger *m, size_t n_syms)
{
    for (size_t i = 0; i + 1 < n_syms; i++) try_pair(m, (int64_t)i, (int64_t)i + 1);
    while (m->h.n > 0) {
        bigram b = heap_pop(&m->h);
        symbol *l = &m->syms[b.left], *r = &m->syms[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) m->syms[r->next].prev = b.left;
        try_pair(m, l->prev, b.left);
        try_pair(m, b.left, l->next);
    }
}

/* Working memory for one merge run over len bytes in n_syms initial symbols. */
static sift_status merger_init(merger *m, const sift_tokenizer *t, const char *buf, size_t len, size_t n_syms,
                               pair_key_fn pair_key)
{
    memset(m, 0, sizeof *m);
    m->t = t;
    m->buf = buf;
    m->pair_key = pair_key;
    /* n - 1 initial pairs and at most two new ones per merge (n - 1 merges). */
    if (n_syms > SIZE_MAX / 3 / sizeof(bigram) || len > SIZE_MAX / 2 - 2)
        return sift_set_error(SIFT_E_NOMEM, "tokenizer: text of %zu bytes is too long", len);
    m->h.cap = 3 * n_syms + 1;
    m->syms = malloc((n_syms ? n_syms : 1) * sizeof *m->syms);
    m->h.items = malloc(m->h.cap * sizeof *m->h.items);
    m->scratch = malloc(len + 2);
    if (!m->syms || !m->h.items || !m->scratch) {
        free(m->syms);
        free(m->h.items);
        free(m->scratch);
        return sift_set_error(SIFT_E_NOMEM, "tokenizer: out of memory for a text of %zu bytes", len);
    }
    return SIFT_OK;
}

static void merger_free(merger *m)
{
    free(m->syms);
    free(m->h.items);
    free(m->scratch);
}

/* ---- output ------------------------------------------------------------------------------------ */

typedef struct id_out {
    int32_t *ids;
    size_t n, cap;
} id_out;

static sift_status emit(id_out *o, int32_t id)
{
    if (o->n == o->cap)
        return sift_set_error(SIFT_E_INVALID, "tokenizer: output of %zu ids is too small (sift_tokenizer_max_tokens gives "
                              "a sufficient size)", o->cap);
    o->ids[o->n++] = id;
    return SIFT_OK;
}

/* A symbol without a token of its own: its bytes' tokens, else <unk>. */
static sift_status emit_bytes(const sift_tokenizer *t, id_out *o, const uint8_t *bytes, size_t len)
{
    if (t->kind == SIFT_TOKENIZER_SPM && t->unk >= 0) {
        /* SentencePiece without (complete) byte fallback: one <unk> for the whole character. */
        for (size_t i = 0; i < len; i++)
            if (t->byte_token[bytes[i]] < 0) return emit(o, t->unk);
    }
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_token[bytes[i]];
        if (id < 0) id = t->unk;
        if (id < 0)
            return sift_set_error(SIFT_E_INVALID, "tokenizer: byte 0x%02x has no token and the vocabulary has no <unk>",
                                  bytes[i]);
        sift_status s = emit(o, id);
        if (s != SIFT_OK) return s;
    }
    return SIFT_OK;
}

/* ---- SentencePiece ------------------------------------------------------------------------------ */

static bool spm_pair_key(const sift_tokenizer *t, const char *buf, const symbol *l, const symbol *r, char *scratch,
                         double *key)
{
    (void)scratch; /* adjacent symbols are contiguous in the buffer */
    int32_t id = sift_strmap_get(&t->pieces, buf + l->start, l->len + r->len);
    if (id < 0) return false;
    *key = -(double)t->scores[id];
    return true;
}

static sift_status spm_encode(const sift_tokenizer *t, const char *text, size_t len, id_out *o)
{
    if (len == 0) return SIFT_OK;
    if (len > (SIZE_MAX - 3) / 3) return sift_set_error(SIFT_E_NOMEM, "tokenizer: text of %zu bytes is too long", len);
    /* Normalize: the prefix "▁", and every space as "▁" (U+2581, 3 bytes). */
    char *buf = malloc(3 * len + 3);
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "tokenizer: out of memory for a text of %zu bytes", len);
    static const char lower_block[] = "\xe2\x96\x81";
    size_t n = 0;
    if (t->add_space_prefix) {
        memcpy(buf, lower_block, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, lower_block, 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    merger m;
    sift_status s = merger_init(&m, t, buf, n, n, spm_pair_key);
    if (s != SIFT_OK) {
        free(buf);
        return s;
    }
    /* UTF-8 characters; a byte that is not part of a well-formed one is a symbol of its own (so
     * that it falls back to its byte token and a stray continuation byte never swallows a "▁"). */
    size_t n_syms = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const size_t k = utf8_decode((const uint8_t *)buf, n, i, &cp);
        m.syms[n_syms] = (symbol){i, k, (int64_t)n_syms - 1, (int64_t)n_syms + 1};
        n_syms++;
        i += k;
    }
    m.syms[n_syms - 1].next = -1;
    run_merges(&m, n_syms);
    for (int64_t i = 0; i >= 0 && s == SIFT_OK; i = m.syms[i].next) {
        const symbol *sym = &m.syms[i];
        int32_t id = sift_strmap_get(&t->pieces, buf + sym->start, sym->len);
        s = id >= 0 ? emit(o, id) : emit_bytes(t, o, (const uint8_t *)buf + sym->start, sym->len);
    }
    merger_free(&m);
    free(buf);
    return s;
}

/* ---- GPT-2 byte-level BPE ----------------------------------------------------------------------- */

static bool in_ranges(const sift_unicode_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].first) hi = mid;
        else if (cp > r[mid].last) lo = mid + 1;
        else return true;
    }
    return false;
}

static bool is_letter(uint32_t cp)
{
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return cp != CP_INVALID &&
           in_ranges(sift_unicode_letters, sizeof sift_unicode_letters / sizeof sift_unicode_letters[0], cp);
}

static bool is_number(uint32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return cp != CP_INVALID &&
           in_ranges(sift_unicode_numbers, sizeof sift_unicode_numbers / sizeof sift_unicode_numbers[0], cp);
}

/* \s: the White_Space property. */
static bool is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

static bool is_cr_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
/* [^\s\p{L}\p{N}] */
static bool is_other(uint32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }
static uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

/* The length in code points of the pre-tokenizer's match at p (always >= 1): Llama 3's pattern
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
 *   |\s*[\r\n]+|\s+(?!\S)|\s+
 * with \p{N}{1,max_digits} (Qwen2: single digits), alternatives tried in order as a regex does. */
static size_t pretokenize_match(const uint32_t *cp, size_t n, size_t p, size_t max_digits)
{
    const uint32_t c = cp[p];
    size_t q;
    /* contractions (ASCII case-insensitive, as llama.cpp writes them) */
    if (c == '\'' && p + 1 < n) {
        const uint32_t c1 = ascii_lower(cp[p + 1]);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
        if (p + 2 < n) {
            const uint32_t c2 = ascii_lower(cp[p + 2]);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    q = p;
    if (!is_cr_lf(c) && !is_letter(c) && !is_number(c) && p + 1 < n && is_letter(cp[p + 1])) q = p + 1;
    if (is_letter(cp[q])) {
        while (q < n && is_letter(cp[q])) q++;
        return q - p;
    }
    /* \p{N}{1,max_digits} */
    if (is_number(c)) {
        q = p + 1;
        while (q < n && q - p < max_digits && is_number(cp[q])) q++;
        return q - p;
    }
    /* ' '?[^\s\p{L}\p{N}]+[\r\n]* */
    q = p;
    if (c == ' ' && p + 1 < n && is_other(cp[p + 1])) q = p + 1;
    if (is_other(cp[q])) {
        while (q < n && is_other(cp[q])) q++;
        while (q < n && is_cr_lf(cp[q])) q++;
        return q - p;
    }
    /* c is whitespace now. The run of it is [p, e). */
    size_t e = p;
    while (e < n && is_space(cp[e])) e++;
    /* \s*[\r\n]+: the greedy \s* backs off to the last \r or \n of the run. */
    for (q = e; q > p; q--)
        if (is_cr_lf(cp[q - 1])) return q - p;
    /* \s+(?!\S): the run up to the end of text, or all of it but the space before the next word. */
    if (e == n) return e - p;
    if (e - p >= 2) return e - 1 - p;
    /* \s+ */
    return e - p;
}

static bool bpe_pair_key(const sift_tokenizer *t, const char *buf, const symbol *l, const symbol *r, char *scratch,
                         double *key)
{
    memcpy(scratch, buf + l->start, l->len);
    scratch[l->len] = ' ';
    memcpy(scratch + l->len + 1, buf + r->start, r->len);
    int32_t rank = sift_strmap_get(&t->merges, scratch, l->len + 1 + r->len);
    if (rank < 0) return false;
    *key = rank;
    return true;
}

/* Byte-level BPE of one pre-tokenized piece. */
static sift_status bpe_piece(const sift_tokenizer *t, const uint8_t *bytes, size_t len, id_out *o)
{
    /* Every byte becomes its symbol: 1 or 2 bytes of UTF-8 (the code points stay below 0x800). */
    char *buf = malloc(2 * len);
    size_t *origin = malloc(2 * len * sizeof *origin); /* buffer offset -> piece byte */
    if (!buf || !origin) {
        free(buf);
        free(origin);
        return sift_set_error(SIFT_E_NOMEM, "tokenizer: out of memory");
    }
    merger m;
    sift_status s = merger_init(&m, t, buf, 2 * len, len, bpe_pair_key);
    if (s != SIFT_OK) {
        free(buf);
        free(origin);
        return s;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        size_t k = utf8_encode(t->byte_cp[bytes[i]], buf + n);
        m.syms[i] = (symbol){n, k, (int64_t)i - 1, i + 1 < len ? (int64_t)i + 1 : -1};
        for (size_t j = 0; j < k; j++) origin[n + j] = i;
        n += k;
    }
    run_merges(&m, len);
    for (int64_t i = 0; i >= 0 && s == SIFT_OK; i = m.syms[i].next) {
        const symbol *sym = &m.syms[i];
        int32_t id = sift_strmap_get(&t->pieces, buf + sym->start, sym->len);
        if (id >= 0) {
            s = emit(o, id);
        } else {
            /* Without a token for the merged symbol (an incomplete vocabulary), its bytes one by one. */
            const size_t first = origin[sym->start], last = origin[sym->start + sym->len - 1];
            s = emit_bytes(t, o, bytes + first, last - first + 1);
        }
    }
    merger_free(&m);
    free(buf);
    free(origin);
    return s;
}

/* Calls piece(ctx, start, len) for each pre-tokenized piece of text, in order. */
typedef sift_status (*piece_fn)(void *ctx, size_t start, size_t len);

static sift_status pretokenize(sift_bpe_pre pre, const char *text, size_t len, piece_fn piece, void *ctx)
{
    if (len == 0) return SIFT_OK;
    if (len > SIZE_MAX / 2 / sizeof(size_t)) return sift_set_error(SIFT_E_NOMEM, "tokenizer: text too long");
    const uint8_t *s8 = (const uint8_t *)text;
    uint32_t *cps = malloc(len * sizeof *cps);
    size_t *offs = malloc((len + 1) * sizeof *offs); /* byte offset of each code point, and the end */
    if (!cps || !offs) {
        free(cps);
        free(offs);
        return sift_set_error(SIFT_E_NOMEM, "tokenizer: out of memory for a text of %zu bytes", len);
    }
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        offs[n] = i;
        i += utf8_decode(s8, len, i, &cps[n]);
    }
    offs[n] = len;
    const size_t max_digits = pre == SIFT_BPE_PRE_QWEN2 ? 1 : 3;
    sift_status s = SIFT_OK;
    for (size_t p = 0; p < n && s == SIFT_OK;) {
        size_t k = pretokenize_match(cps, n, p, max_digits);
        s = piece(ctx, offs[p], offs[p + k] - offs[p]);
        p += k;
    }
    free(cps);
    free(offs);
    return s;
}

typedef struct encode_ctx {
    const sift_tokenizer *t;
    const char *text;
    id_out *o;
} encode_ctx;

static sift_status encode_piece(void *ctx, size_t start, size_t len)
{
    encode_ctx *e = ctx;
    return bpe_piece(e->t, (const uint8_t *)e->text + start, len, e->o);
}

static sift_status bpe_encode(const sift_tokenizer *t, const char *text, size_t len, id_out *o)
{
    encode_ctx e = {t, text, o};
    return pretokenize(t->pre, text, len, encode_piece, &e);
}

typedef struct split_ctx {
    size_t *ends;
    size_t n, cap;
} split_ctx;

static sift_status split_piece(void *ctx, size_t start, size_t len)
{
    split_ctx *sp = ctx;
    if (sp->n == sp->cap) return sift_set_error(SIFT_E_INVALID, "sift_bpe_split: more than %zu pieces", sp->cap);
    sp->ends[sp->n++] = start + len;
    return SIFT_OK;
}

sift_status sift_bpe_split(sift_bpe_pre pre, const char *text, size_t len, size_t *ends, size_t cap, size_t *n)
{
    if ((!text && len) || (!ends && cap) || !n) return sift_set_error(SIFT_E_INVALID, "sift_bpe_split: null argument");
    if (pre != SIFT_BPE_PRE_LLAMA3 && pre != SIFT_BPE_PRE_QWEN2)
        return sift_set_error(SIFT_E_INVALID, "sift_bpe_split: unknown pre-tokenizer %d", (int)pre);
    *n = 0;
    split_ctx sp = {ends, 0, cap};
    sift_status s = pretokenize(pre, text, len, split_piece, &sp);
    if (s == SIFT_OK) *n = sp.n;
    return s;
}

/* ---- encode / decode ------------------------------------------------------------------------------ */

/* Every token covers at least one byte, plus BOS and SentencePiece's leading "▁". */
size_t sift_tokenizer_max_tokens(size_t len)
{
    /* A space becomes "▁", which without a piece of its own falls back to 3 byte tokens. */
    return len > (SIZE_MAX - 4) / 3 ? SIZE_MAX : 3 * len + 4;
}

sift_status sift_tokenizer_encode(const sift_tokenizer *t, const char *text, size_t len, bool add_bos, int32_t *ids,
                                  size_t cap, size_t *n)
{
    if (!t || (!text && len) || (!ids && cap) || !n) return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_encode: null argument");
    *n = 0;
    id_out o = {ids, 0, cap};
    if (add_bos) {
        if (t->bos < 0) return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_encode: the vocabulary has no BOS token");
        sift_status s = emit(&o, t->bos);
        if (s != SIFT_OK) return s;
    }
    sift_status s = t->kind == SIFT_TOKENIZER_SPM ? spm_encode(t, text, len, &o) : bpe_encode(t, text, len, &o);
    if (s == SIFT_OK) *n = o.n;
    return s;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte a "<0xXX>" string names, or -1. */
static int byte_token_value(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Where decoded bytes go: written while they fit, all counted; the first `skip` are dropped. */
typedef struct byte_sink {
    char *out;
    size_t cap, len, skip;
} byte_sink;

static void put(byte_sink *k, char c)
{
    if (k->skip) {
        k->skip--;
        return;
    }
    if (k->len < k->cap) k->out[k->len] = c;
    k->len++;
}

/* Appends a token's bytes to k. */
static void token_bytes(const sift_tokenizer *t, int32_t id, byte_sink *k)
{
    const token_text *tt = &t->tokens[id];
    const uint8_t type = t->types[id];
#define PUT(c) put(k, (char)(c))
    if (type == SIFT_TOKEN_CONTROL) return;
    if (t->kind == SIFT_TOKENIZER_SPM) {
        int b = type == SIFT_TOKEN_BYTE ? byte_token_value(tt->ptr, tt->len) : -1;
        if (b >= 0) {
            PUT(b);
            return;
        }
        for (size_t i = 0; i < tt->len; i++) {
            if (i + 3 <= tt->len && memcmp(tt->ptr + i, "\xe2\x96\x81", 3) == 0) {
                PUT(' ');
                i += 2;
            } else {
                PUT(tt->ptr[i]);
            }
        }
        return;
    }
    if (type == SIFT_TOKEN_USER_DEFINED) { /* written as plain text, not byte symbols */
        for (size_t i = 0; i < tt->len; i++) PUT(tt->ptr[i]);
        return;
    }
    for (size_t i = 0; i < tt->len;) {
        uint32_t cp;
        size_t n = utf8_decode((const uint8_t *)tt->ptr, tt->len, i, &cp);
        const int b = cp < 324 ? t->cp_byte[cp] : -1;
        if (b >= 0) {
            PUT(b);
        } else { /* not a byte symbol: the text as it is */
            for (size_t j = 0; j < n; j++) PUT(tt->ptr[i + j]);
        }
        i += n;
    }
#undef PUT
}

sift_status sift_tokenizer_token_bytes(const sift_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *len)
{
    if (!t || (!buf && cap) || !len) return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_token_bytes: null argument");
    *len = 0;
    if (id < 0 || id >= t->n_vocab)
        return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_token_bytes: id %d outside the vocabulary of %d", (int)id,
                              (int)t->n_vocab);
    byte_sink k = {buf, cap, 0, 0};
    token_bytes(t, id, &k);
    *len = k.len;
    if (*len > cap)
        return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_token_bytes: %zu bytes do not fit a buffer of %zu", *len, cap);
    return SIFT_OK;
}

sift_status sift_tokenizer_decode(const sift_tokenizer *t, const int32_t *ids, size_t n, char *buf, size_t cap,
                                  size_t *len)
{
    if (!t || (!ids && n) || (!buf && cap) || !len) return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_decode: null argument");
    *len = 0;
    byte_sink k = {buf, cap, 0, 0};
    bool at_start = t->add_space_prefix; /* no byte written yet, and a prefix space to remove */
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_decode: id %d (position %zu) outside the vocabulary of %d",
                                  (int)ids[i], i, (int)t->n_vocab);
        if (at_start) {
            char first;
            byte_sink probe = {&first, 1, 0, 0};
            token_bytes(t, ids[i], &probe);
            if (probe.len == 0) continue; /* BOS and other control tokens */
            at_start = false;
            k.skip = first == ' ';
        }
        token_bytes(t, ids[i], &k);
    }
    *len = k.len;
    if (*len > cap)
        return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_decode: %zu bytes do not fit a buffer of %zu", *len, cap);
    return SIFT_OK;
}

/* ---- construction ------------------------------------------------------------------------------ */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static sift_status fail(const sift_gguf *g, sift_status s, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sift_set_error(s, "%s: tokenizer: %s", sift_gguf_label(g), msg);
}

/* A special token id: absent, negative, or 0xFFFFFFFF (how converters write "none") give -1. */
static sift_status special_id(const sift_gguf *g, const char *key, int32_t n_vocab, int32_t *id)
{
    *id = -1;
    const sift_gguf_kv *kv = sift_gguf_find(g, key);
    if (!kv) return SIFT_OK;
    uint32_t u;
    int32_t i;
    if (sift_gguf_get_u32(g, key, &u) == SIFT_OK) {
        if (u == UINT32_MAX) return SIFT_OK;
        if (u >= (uint32_t)n_vocab) return fail(g, SIFT_E_INVALID, "%s = %u outside the vocabulary of %d", key, u, (int)n_vocab);
        *id = (int32_t)u;
        return SIFT_OK;
    }
    if (sift_gguf_get_i32(g, key, &i) == SIFT_OK && i < 0) return SIFT_OK;
    return sift_gguf_get_u32(g, key, &u); /* the error, once more */
}

static sift_status optional_bool(const sift_gguf *g, const char *key, bool fallback, bool *out)
{
    *out = fallback;
    return sift_gguf_has(g, key) ? sift_gguf_get_bool(g, key, out) : SIFT_OK;
}

/* Copies n strings into the pool at *used (sized by the caller). */
static void copy_strings(char *pool, size_t *used, const sift_gguf_str *src, token_text *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (src[i].len) memcpy(pool + *used, src[i].ptr, (size_t)src[i].len);
        dst[i] = (token_text){pool + *used, (size_t)src[i].len};
        *used += (size_t)src[i].len;
    }
}

static sift_status create(const sift_gguf *g, sift_tokenizer *t)
{
    char shown[80];
    sift_gguf_str model;
    sift_status s = sift_gguf_get_string(g, "tokenizer.ggml.model", &model);
    if (s != SIFT_OK) return s;
    if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0) {
        t->kind = SIFT_TOKENIZER_SPM;
        t->pre = SIFT_BPE_PRE_NONE;
    } else if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0) {
        t->kind = SIFT_TOKENIZER_BPE;
        sift_gguf_str pre = {"", 0};
        if (sift_gguf_has(g, "tokenizer.ggml.pre") && (s = sift_gguf_get_string(g, "tokenizer.ggml.pre", &pre))) return s;
        static const struct {
            const char *name;
            sift_bpe_pre pre;
        } pres[] = {{"llama-bpe", SIFT_BPE_PRE_LLAMA3},
                    {"llama3", SIFT_BPE_PRE_LLAMA3},
                    {"llama-v3", SIFT_BPE_PRE_LLAMA3},
                    {"qwen2", SIFT_BPE_PRE_QWEN2}};
        for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++)
            if (pre.len == strlen(pres[i].name) && memcmp(pre.ptr, pres[i].name, pre.len) == 0) t->pre = pres[i].pre;
        if (t->pre == SIFT_BPE_PRE_NONE)
            return fail(g, SIFT_E_INVALID, "tokenizer.ggml.pre '%s' is not a pre-tokenizer sift knows (llama-bpe, "
                        "llama3, llama-v3, qwen2)", sift_gguf_str_shown(pre, shown, sizeof shown));
    } else {
        return fail(g, SIFT_E_INVALID, "tokenizer.ggml.model '%s' is not one sift reads (llama, gpt2)",
                    sift_gguf_str_shown(model, shown, sizeof shown));
    }

    const sift_gguf_str *strs;
    uint64_t n_vocab;
    if ((s = sift_gguf_get_string_array(g, "tokenizer.ggml.tokens", &strs, &n_vocab))) return s;
    if (n_vocab == 0 || n_vocab > (uint64_t)INT32_MAX)
        return fail(g, SIFT_E_INVALID, "a vocabulary of %llu tokens", (unsigned long long)n_vocab);
    t->n_vocab = (int32_t)n_vocab;
    const size_t nv = (size_t)n_vocab;

    const sift_gguf_str *merge_strs = NULL;
    uint64_t n_merges = 0;
    if (t->kind == SIFT_TOKENIZER_BPE) {
        if ((s = sift_gguf_get_string_array(g, "tokenizer.ggml.merges", &merge_strs, &n_merges))) return s;
        if (n_merges > (uint64_t)INT32_MAX)
            return fail(g, SIFT_E_INVALID, "%llu merges", (unsigned long long)n_merges);
    }

    /* Strings all lie inside the file, so their total fits in memory's address range. */
    uint64_t pool_size = 1;
    for (size_t i = 0; i < nv; i++) pool_size += strs[i].len;
    for (uint64_t i = 0; i < n_merges; i++) pool_size += merge_strs[i].len;
    if (pool_size > SIZE_MAX) return fail(g, SIFT_E_NOMEM, "strings too large");
    t->pool = malloc((size_t)pool_size);
    t->tokens = malloc(nv * sizeof *t->tokens);
    t->scores = calloc(nv, sizeof *t->scores);
    t->types = malloc(nv);
    t->merge_strs = malloc((size_t)(n_merges ? n_merges : 1) * sizeof *t->merge_strs);
    if (!t->pool || !t->tokens || !t->scores || !t->types || !t->merge_strs)
        return fail(g, SIFT_E_NOMEM, "out of memory for %zu tokens", nv);
    size_t used = 0;
    copy_strings(t->pool, &used, strs, t->tokens, nv);
    copy_strings(t->pool, &used, merge_strs, t->merge_strs, (size_t)n_merges);

    if (sift_gguf_has(g, "tokenizer.ggml.scores") &&
        (s = sift_gguf_copy_f32_array(g, "tokenizer.ggml.scores", t->scores, n_vocab)))
        return s;
    memset(t->types, SIFT_TOKEN_NORMAL, nv);
    const bool has_types = sift_gguf_has(g, "tokenizer.ggml.token_type");
    if (has_types) {
        int32_t *types = malloc(nv * sizeof *types);
        if (!types) return fail(g, SIFT_E_NOMEM, "out of memory");
        s = sift_gguf_copy_i32_array(g, "tokenizer.ggml.token_type", types, n_vocab);
        for (size_t i = 0; i < nv && s == SIFT_OK; i++) {
            if (types[i] < SIFT_TOKEN_UNDEFINED || types[i] > SIFT_TOKEN_BYTE)
                s = fail(g, SIFT_E_INVALID, "token %zu has type %d (types are 0..6)", i, (int)types[i]);
            else t->types[i] = (uint8_t)types[i];
        }
        free(types);
        if (s != SIFT_OK) return s;
    }

    if ((s = sift_strmap_init(&t->pieces, nv))) return s;
    for (size_t i = 0; i < nv; i++) {
        const uint8_t type = t->types[i];
        if (type == SIFT_TOKEN_CONTROL || type == SIFT_TOKEN_UNKNOWN || type == SIFT_TOKEN_BYTE) continue;
        /* A piece spelled twice keeps its first id. */
        sift_strmap_put(&t->pieces, t->tokens[i].ptr, t->tokens[i].len, (int32_t)i, NULL);
    }
    for (int b = 0; b < 256; b++) t->byte_token[b] = -1;
    if (t->kind == SIFT_TOKENIZER_SPM) {
        for (size_t i = 0; i < nv; i++) {
            int b = byte_token_value(t->tokens[i].ptr, t->tokens[i].len);
            if (b >= 0 && t->byte_token[b] < 0 && (!has_types || t->types[i] == SIFT_TOKEN_BYTE))
                t->byte_token[b] = (int32_t)i;
        }
    } else {
        gpt2_byte_map(t->byte_cp, t->cp_byte);
        for (int b = 0; b < 256; b++) {
            char sym[4];
            size_t k = utf8_encode(t->byte_cp[b], sym);
            t->byte_token[b] = sift_strmap_get(&t->pieces, sym, k);
        }
        if ((s = sift_strmap_init(&t->merges, (size_t)n_merges))) return s;
        for (uint64_t i = 0; i < n_merges; i++)
            sift_strmap_put(&t->merges, t->merge_strs[i].ptr, t->merge_strs[i].len, (int32_t)i, NULL);
    }

    if ((s = special_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos)) ||
        (s = special_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos)) ||
        (s = special_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk)) ||
        (s = optional_bool(g, "tokenizer.ggml.add_bos_token", t->kind == SIFT_TOKENIZER_SPM, &t->add_bos)) ||
        (s = optional_bool(g, "tokenizer.ggml.add_space_prefix", t->kind == SIFT_TOKENIZER_SPM, &t->add_space_prefix)))
        return s;
    if (t->kind == SIFT_TOKENIZER_BPE) t->add_space_prefix = false; /* byte-level BPE writes its spaces */
    return SIFT_OK;
}

sift_status sift_tokenizer_create(const sift_gguf *g, sift_tokenizer **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_create: out is NULL");
    *out = NULL;
    if (!g) return sift_set_error(SIFT_E_INVALID, "sift_tokenizer_create: file is NULL");
    sift_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return sift_set_error(SIFT_E_NOMEM, "sift_tokenizer_create: out of memory");
    sift_status s = create(g, t);
    if (s != SIFT_OK) {
        sift_tokenizer_destroy(t);
        return s;
    }
    *out = t;
    return SIFT_OK;
}

void sift_tokenizer_destroy(sift_tokenizer *t)
{
    if (!t) return;
    sift_strmap_free(&t->pieces);
    sift_strmap_free(&t->merges);
    free(t->pool);
    free(t->tokens);
    free(t->scores);
    free(t->types);
    free(t->merge_strs);
    free(t);
}

sift_tokenizer_kind sift_tokenizer_get_kind(const sift_tokenizer *t) { return t->kind; }
sift_bpe_pre sift_tokenizer_pre(const sift_tokenizer *t) { return t->pre; }
int32_t sift_tokenizer_vocab_size(const sift_tokenizer *t) { return t->n_vocab; }
int32_t sift_tokenizer_bos(const sift_tokenizer *t) { return t->bos; }
int32_t sift_tokenizer_eos(const sift_tokenizer *t) { return t->eos; }
int32_t sift_tokenizer_unk(const sift_tokenizer *t) { return t->unk; }
bool sift_tokenizer_adds_bos(const sift_tokenizer *t) { return t->add_bos; }

const char *sift_tokenizer_token_string(const sift_tokenizer *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->tokens[id].len;
    return t->tokens[id].ptr;
}

sift_token_type sift_tokenizer_token_type(const sift_tokenizer *t, int32_t id)
{
    return (t && id >= 0 && id < t->n_vocab) ? (sift_token_type)t->types[id] : SIFT_TOKEN_UNDEFINED;
}
