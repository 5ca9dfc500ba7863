/* Sessions: running a model over a paged KV cache shared by several sequences.
 *
 * A step is one graph (or, where the host takes part, one graph per layer): embedding, per layer
 * RMSNorm -> Q/K/V -> RoPE -> KV-cache write -> attention -> output projection -> residual ->
 * RMSNorm -> SwiGLU MLP -> residual, then the final norm and the logits. Prefill feeds chunks of
 * one sequence with causal (or sparse, SPEC §7) attention; a decode step feeds one token of each
 * of several sequences, with the matmuls shared and attention per sequence under its policy:
 * dense, TokenSelect (score -> vote -> select -> gather, with the Selection Cache of SPEC §4 and
 * the length extrapolation of SPEC §6), streaming, or a host-side baseline (policy.c) whose lists
 * the host writes between the layers' graphs.
 *
 * The cache: per layer a K and a V pool of pages (P tokens each); each sequence has a page table
 * and paged views of the pools, so a sequence grows by taking pages, never by copying. */
#include "model.h"
#include "policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Activations for up to `chunk` rows; a step of T rows uses views of their first T rows. A_QS is a
 * second query buffer: the scoring query of extrapolation, the chunk mean of sparse prefill. */
enum { A_X0, A_X1, A_XN, A_Q, A_K, A_V, A_QR, A_KR, A_QS, A_ATT, A_O, A_GATE, A_UP, A_ACT, A_DOWN, A_COUNT };

typedef struct seq_layer {
    sift_tensor *kview, *vview; /* the pools, through this sequence's page table */
    sift_tensor *sel_state;     /* Selection Cache state (sift_op_sel_cache_check), made on first use */
    sift_tensor *sel_idx;       /* the cached index set [1][S + k + W] */
    sift_kv_mirror mirror;      /* host copy of the cache (host policies, eval_mode) */
    float *obs_q;               /* the last SIFT_POLICY_OBS prompt queries [OBS][Hq][D] and positions */
    int64_t obs_pos[SIFT_POLICY_OBS];
    int n_obs;
} seq_layer;

typedef struct sequence {
    int64_t pos;
    int32_t *page_of;     /* page table on the host: [max_pages], -1 where none */
    sift_tensor *pages;   /* the same on the device */
    int64_t n_pages;      /* pages held (the first n_pages entries) */
    seq_layer *layers;
    sift_tensor *host_idx;        /* lists written by host policies [Hkv * (S + k + W)] */
    sift_policy_state *pstate;    /* host policies */
} sequence;

/* The part of a step that belongs to one sequence: rows [row0, row0 + t) at positions pos0 ... */
typedef struct segment {
    int seq;
    int64_t row0, t, pos0;
    sift_tensor *attn_idx; /* decode: the index list its attention used (NULL: dense) */
    float *q_host;         /* decode under eval_mode: the layer's query, for the quality measure */
    int32_t *lists_host;   /* decode, host policies: the lists written, [Hkv][count] */
    int64_t count;
} segment;

typedef struct step {
    segment *seg;
    int n_seg;
    int64_t rows;
    bool prefill;
} step;

struct sift_session {
    sift_model *m;
    sift_session_config cfg;
    int64_t max_pages, pool_pages;
    int32_t *free_pages; /* a stack of free pool pages */
    int64_t n_free;
    sift_tensor **kpool, **vpool;
    sequence *seqs;
    sift_tensor *act[A_COUNT];
    sift_tensor *ids, *xlast_norm, *logits;
    sift_tensor **layer_out; /* keep_layer_outputs: each layer's output [chunk][n_embd] */
    int64_t last_t;          /* rows of the last step */
    int64_t last_row;        /* the row whose layer outputs sift_session_layer_output reads */
    sift_tensor **views;     /* views made for the step being built, freed after it runs */
    int n_views, cap_views;
    double quality_recall, quality_err;
    int64_t quality_n;
};

static bool host_policy(sift_policy p)
{
    return p == SIFT_POLICY_H2O || p == SIFT_POLICY_SNAPKV || p == SIFT_POLICY_QUEST || p == SIFT_POLICY_ORACLE;
}

static bool keeps_mirror(const sift_session *s) { return s->cfg.eval_mode || host_policy(s->cfg.policy); }

static int64_t max_count(const sift_session_config *c) { return c->sink + c->window + c->budget; }

sift_session_config sift_session_config_default(void)
{
    sift_session_config c = {.n_ctx = 0, .kv_type = SIFT_F16, .policy = SIFT_POLICY_DENSE, .sink = 128, .window = 512,
                             .budget = 2048, .chunk = 512, .n_seq = 1, .page_size = 256, .sel_cache = 0.9f};
    return c;
}

/* ---- views ------------------------------------------------------------------------------------- */

static sift_status view_of(sift_session *s, sift_tensor *parent, sift_dtype dtype, size_t byte_offset, int ndim,
                           const int64_t *shape, sift_tensor **out)
{
    if (s->n_views == s->cap_views) {
        int cap = s->cap_views ? 2 * s->cap_views : 64;
        sift_tensor **p = realloc(s->views, (size_t)cap * sizeof *p);
        if (!p) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
        s->views = p;
        s->cap_views = cap;
    }
    TRY(sift_tensor_view(parent, dtype, ndim, shape, byte_offset, out));
    s->views[s->n_views++] = *out;
    return SIFT_OK;
}

/* Rows [row0, row0 + t) of an f32 activation of `width` values per row, as [t][width]. */
static sift_status rows2(sift_session *s, sift_tensor *act, int64_t row0, int64_t t, int64_t width, sift_tensor **out)
{
    return view_of(s, act, SIFT_F32, (size_t)(row0 * width) * sizeof(float), 2, (int64_t[]){t, width}, out);
}

/* The same rows as [t][heads][d]. */
static sift_status rows3(sift_session *s, sift_tensor *act, int64_t row0, int64_t t, int64_t heads, int64_t d,
                         sift_tensor **out)
{
    return view_of(s, act, SIFT_F32, (size_t)(row0 * heads * d) * sizeof(float), 3, (int64_t[]){t, heads, d}, out);
}

/* One row as [heads][d] (a decode query or output). */
static sift_status row_heads(sift_session *s, sift_tensor *act, int64_t row, int64_t heads, int64_t d, sift_tensor **out)
{
    return view_of(s, act, SIFT_F32, (size_t)(row * heads * d) * sizeof(float), 2, (int64_t[]){heads, d}, out);
}

static void drop_views(sift_session *s)
{
    for (int i = 0; i < s->n_views; i++) sift_tensor_destroy(s->views[i]);
    s->n_views = 0;
}

/* ---- pages ------------------------------------------------------------------------------------- */

/* Gives sequence q the pages that positions [0, end) need, taking them from the pool. */
static sift_status ensure_pages(sift_session *s, sequence *q, int64_t end)
{
    const int64_t want = (end + s->cfg.page_size - 1) / s->cfg.page_size, first = q->n_pages;
    if (want <= first) return SIFT_OK;
    if (want - first > s->n_free)
        return sift_set_error(SIFT_E_LIMIT, "session: the KV pool is full (%lld pages of %lld tokens, %lld free, %lld needed)",
                              (long long)s->pool_pages, (long long)s->cfg.page_size, (long long)s->n_free,
                              (long long)(want - first));
    for (int64_t p = first; p < want; p++) q->page_of[p] = s->free_pages[--s->n_free];
    q->n_pages = want;
    return sift_tensor_write(q->pages, (size_t)first * sizeof(int32_t), q->page_of + first,
                             (size_t)(want - first) * sizeof(int32_t));
}

/* Returns the pages past position end to the pool. */
static sift_status release_pages(sift_session *s, sequence *q, int64_t end)
{
    const int64_t keep = (end + s->cfg.page_size - 1) / s->cfg.page_size, had = q->n_pages;
    if (keep >= had) return SIFT_OK;
    for (int64_t p = keep; p < had; p++) {
        s->free_pages[s->n_free++] = q->page_of[p];
        q->page_of[p] = -1;
    }
    q->n_pages = keep;
    return sift_tensor_write(q->pages, (size_t)keep * sizeof(int32_t), q->page_of + keep, (size_t)(had - keep) * sizeof(int32_t));
}

/* ---- creation ----------------------------------------------------------------------------------- */

static void free_sequence_state(sift_session *s, sequence *q)
{
    for (uint32_t l = 0; q->layers && l < s->m->hp.n_layer; l++) {
        seq_layer *sl = &q->layers[l];
        sift_tensor_destroy(sl->sel_state);
        sift_tensor_destroy(sl->sel_idx);
        sl->sel_state = sl->sel_idx = NULL;
    }
    sift_tensor_destroy(q->host_idx);
    q->host_idx = NULL;
    sift_policy_state_destroy(q->pstate);
    q->pstate = NULL;
}

void sift_session_destroy(sift_session *s)
{
    if (!s) return;
    const uint32_t n_layer = s->m->hp.n_layer;
    for (int i = 0; s->seqs && i < s->cfg.n_seq; i++) {
        sequence *q = &s->seqs[i];
        free_sequence_state(s, q);
        for (uint32_t l = 0; q->layers && l < n_layer; l++) {
            sift_tensor_destroy(q->layers[l].kview);
            sift_tensor_destroy(q->layers[l].vview);
            sift_kv_mirror_free(&q->layers[l].mirror);
            free(q->layers[l].obs_q);
        }
        free(q->layers);
        sift_tensor_destroy(q->pages);
        free(q->page_of);
    }
    free(s->seqs);
    for (uint32_t l = 0; s->kpool && l < n_layer; l++) {
        sift_tensor_destroy(s->kpool[l]);
        sift_tensor_destroy(s->vpool[l]);
    }
    free(s->kpool);
    free(s->vpool);
    free(s->free_pages);
    for (uint32_t l = 0; s->layer_out && l < n_layer; l++) sift_tensor_destroy(s->layer_out[l]);
    free(s->layer_out);
    for (int i = 0; i < A_COUNT; i++) sift_tensor_destroy(s->act[i]);
    sift_tensor_destroy(s->ids);
    sift_tensor_destroy(s->xlast_norm);
    sift_tensor_destroy(s->logits);
    free(s->views);
    free(s);
}

static sift_status check_policy(const sift_session_config *c, const char *fn)
{
    if ((int)c->policy < 0 || c->policy >= SIFT_POLICY_COUNT)
        return sift_set_error(SIFT_E_INVALID, "%s: unknown policy %d", fn, (int)c->policy);
    if (c->sink < 0 || c->window < 0 || c->budget < 0)
        return sift_set_error(SIFT_E_SHAPE, "%s: sink, window and budget must not be negative", fn);
    if (c->sink > INT32_MAX || c->window > INT32_MAX || c->budget > INT32_MAX || max_count(c) > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: sink + window + budget exceeds 2^31", fn);
    if (c->extrapolate && c->policy != SIFT_POLICY_TOKENSELECT && c->policy != SIFT_POLICY_STREAMING)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: length extrapolation runs with the tokenselect or streaming policy, not %s",
                              fn, sift_policy_name(c->policy));
    if (c->sparse_prefill && c->policy != SIFT_POLICY_TOKENSELECT)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: sparse prefill runs with the tokenselect policy, not %s", fn,
                              sift_policy_name(c->policy));
    return SIFT_OK;
}

/* The per-sequence state a policy needs: host lists and the host policy's state (replaying the
 * prompt queries kept from prefill). */
static sift_status make_policy_state(sift_session *s, sequence *q)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    if (!host_policy(s->cfg.policy)) return SIFT_OK;
    TRY(sift_tensor_create(s->m->ctx, SIFT_I32, 1, (int64_t[]){(int64_t)hp->n_head_kv * max_count(&s->cfg)}, &q->host_idx));
    TRY(sift_policy_state_create(s->cfg.policy, (int)hp->n_layer, (int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim,
                                 s->cfg.n_ctx, &q->pstate));
    const int64_t qn = (int64_t)hp->n_head * hp->head_dim;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const seq_layer *sl = &q->layers[l];
        for (int i = 0; i < sl->n_obs; i++)
            if (sl->obs_pos[i] < q->pos) TRY(sift_policy_observe(q->pstate, (int)l, sl->obs_q + i * qn, sl->obs_pos[i], 1));
    }
    return SIFT_OK;
}

static sift_status create_sequences(sift_session *s)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const int64_t qn = (int64_t)hp->n_head * hp->head_dim;
    s->seqs = calloc((size_t)s->cfg.n_seq, sizeof *s->seqs);
    if (!s->seqs) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    for (int i = 0; i < s->cfg.n_seq; i++) {
        sequence *q = &s->seqs[i];
        q->page_of = malloc((size_t)s->max_pages * sizeof *q->page_of);
        q->layers = calloc(hp->n_layer, sizeof *q->layers);
        if (!q->page_of || !q->layers) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
        for (int64_t p = 0; p < s->max_pages; p++) q->page_of[p] = -1;
        TRY(sift_tensor_create(s->m->ctx, SIFT_I32, 1, &s->max_pages, &q->pages));
        TRY(sift_tensor_write(q->pages, 0, q->page_of, (size_t)s->max_pages * sizeof(int32_t)));
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            seq_layer *sl = &q->layers[l];
            TRY(sift_tensor_paged_view(s->kpool[l], q->pages, s->cfg.page_size, &sl->kview));
            TRY(sift_tensor_paged_view(s->vpool[l], q->pages, s->cfg.page_size, &sl->vview));
            if (keeps_mirror(s))
                TRY(sift_kv_mirror_init(&sl->mirror, hp->n_head_kv, hp->head_dim, s->cfg.n_ctx, s->cfg.eval_mode != 0));
            if (s->cfg.eval_mode || s->cfg.policy == SIFT_POLICY_H2O || s->cfg.policy == SIFT_POLICY_SNAPKV) {
                sl->obs_q = malloc((size_t)(SIFT_POLICY_OBS * qn) * sizeof(float));
                if (!sl->obs_q) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
            }
        }
        TRY(make_policy_state(s, q));
    }
    return SIFT_OK;
}

sift_status sift_session_create(sift_model *m, const sift_session_config *cfg, sift_session **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_session_create: out is NULL");
    *out = NULL;
    if (!m) return sift_set_error(SIFT_E_INVALID, "sift_session_create: model is NULL");
    sift_session_config c = cfg ? *cfg : sift_session_config_default();
    const char *fn = "sift_session_create";
    if (c.n_ctx == 0) c.n_ctx = m->hp.n_ctx_train;
    if (c.chunk == 0) c.chunk = 512;
    if (c.n_seq == 0) c.n_seq = 1;
    if (c.page_size == 0) c.page_size = 256;
    if (c.n_ctx < 1 || c.n_ctx > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: context of %lld tokens", fn, (long long)c.n_ctx);
    if (c.chunk < 1 || c.chunk > 65536) return sift_set_error(SIFT_E_SHAPE, "%s: chunk %lld", fn, (long long)c.chunk);
    if (c.n_seq < 1 || c.n_seq > c.chunk)
        return sift_set_error(SIFT_E_SHAPE, "%s: %d sequences (1 .. chunk = %lld)", fn, c.n_seq, (long long)c.chunk);
    if (c.page_size < 1 || (c.page_size & (c.page_size - 1)) != 0 || c.page_size > (1 << 20))
        return sift_set_error(SIFT_E_SHAPE, "%s: page size %lld is not a power of two up to 2^20", fn, (long long)c.page_size);
    if (c.kv_type != SIFT_F16 && c.kv_type != SIFT_F32)
        return sift_set_error(SIFT_E_DTYPE, "%s: KV cache type %s (f16 or f32)", fn, sift_dtype_name(c.kv_type));
    if (!(c.sel_cache >= -1.0f)) return sift_set_error(SIFT_E_INVALID, "%s: Selection Cache threshold %g", fn, (double)c.sel_cache);
    TRY(check_policy(&c, fn));
    const int64_t pages_per_seq = (c.n_ctx + c.page_size - 1) / c.page_size;
    if (c.pool_tokens == 0) c.pool_tokens = pages_per_seq * c.page_size * c.n_seq;
    if (c.pool_tokens < 1 || c.pool_tokens > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: a KV pool of %lld tokens", fn, (long long)c.pool_tokens);

    sift_session *s = calloc(1, sizeof *s);
    if (!s) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    s->m = m;
    s->cfg = c;
    s->max_pages = pages_per_seq;
    s->pool_pages = (c.pool_tokens + c.page_size - 1) / c.page_size;
    const sift_gguf_hparams *hp = &m->hp;
    const int64_t t = c.chunk, e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, f = hp->n_ff;
    sift_status st = SIFT_OK;
    s->kpool = calloc(hp->n_layer, sizeof *s->kpool);
    s->vpool = calloc(hp->n_layer, sizeof *s->vpool);
    s->free_pages = malloc((size_t)s->pool_pages * sizeof *s->free_pages);
    if (!s->kpool || !s->vpool || !s->free_pages) st = sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    /* free pages pop from the end: the lowest pages are handed out first */
    for (int64_t p = 0; st == SIFT_OK && p < s->pool_pages; p++) s->free_pages[p] = (int32_t)(s->pool_pages - 1 - p);
    s->n_free = s->pool_pages;
    for (uint32_t l = 0; st == SIFT_OK && l < hp->n_layer; l++) {
        const int64_t shape[3] = {hkv, s->pool_pages * c.page_size, d};
        st = sift_tensor_create(m->ctx, c.kv_type, 3, shape, &s->kpool[l]);
        if (st == SIFT_OK) st = sift_tensor_create(m->ctx, c.kv_type, 3, shape, &s->vpool[l]);
    }
    const int64_t widths[A_COUNT] = {[A_X0] = e,      [A_X1] = e,      [A_XN] = e,       [A_Q] = hq * d,  [A_K] = hkv * d,
                                     [A_V] = hkv * d, [A_QR] = hq * d, [A_KR] = hkv * d, [A_QS] = hq * d, [A_ATT] = hq * d,
                                     [A_O] = e,       [A_GATE] = f,    [A_UP] = f,       [A_ACT] = f,     [A_DOWN] = e};
    for (int i = 0; st == SIFT_OK && i < A_COUNT; i++)
        st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){t, widths[i]}, &s->act[i]);
    if (st == SIFT_OK && c.keep_layer_outputs) {
        s->layer_out = calloc(hp->n_layer, sizeof *s->layer_out);
        if (!s->layer_out) st = sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
        for (uint32_t l = 0; st == SIFT_OK && l < hp->n_layer; l++)
            st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){t, e}, &s->layer_out[l]);
    }
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_I32, 1, (int64_t[]){t}, &s->ids);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){c.n_seq, e}, &s->xlast_norm);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){c.n_seq, hp->n_vocab}, &s->logits);
    if (st == SIFT_OK) st = create_sequences(s);
    if (st != SIFT_OK) {
        sift_session_destroy(s);
        return st;
    }
    *out = s;
    return SIFT_OK;
}

/* ---- building a step ------------------------------------------------------------------------------ */

/* The residual stream entering layer l, and leaving it. */
static sift_tensor *layer_in(sift_session *s, uint32_t l)
{
    return l == 0 || !s->layer_out ? s->act[A_X0] : s->layer_out[l - 1];
}
static sift_tensor *layer_res(sift_session *s, uint32_t l) { return s->layer_out ? s->layer_out[l] : s->act[A_X0]; }

static sift_status emit_embed(sift_session *s, sift_graph *g, const step *st)
{
    sift_tensor *ids, *x;
    TRY(view_of(s, s->ids, SIFT_I32, 0, 1, (int64_t[]){st->rows}, &ids));
    TRY(rows2(s, s->act[A_X0], 0, st->rows, s->m->hp.n_embd, &x));
    return sift_op_get_rows(g, s->m->tok_embd, ids, x);
}

static sift_rope_params rope_params(const sift_model *m)
{
    return (sift_rope_params){.n_rot = (int)m->hp.rope_dim, .base = m->hp.rope_freq_base, .mode = m->rope_mode};
}

/* Norm, Q/K/V, RoPE and the cache write of layer l. In extrapolation mode keys are cached before
 * RoPE and queries are rotated later, over the selected set. */
static sift_status emit_pre(sift_session *s, sift_graph *g, const step *st, uint32_t l)
{
    const sift_model *m = s->m;
    const sift_gguf_hparams *hp = &m->hp;
    const layer_weights *w = &m->layers[l];
    const int64_t e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, r = st->rows;
    const sift_rope_params rope = rope_params(m);
    sift_tensor *x, *xn, *q, *k, *v;
    TRY(rows2(s, layer_in(s, l), 0, r, e, &x));
    TRY(rows2(s, s->act[A_XN], 0, r, e, &xn));
    TRY(rows2(s, s->act[A_Q], 0, r, hq * d, &q));
    TRY(rows2(s, s->act[A_K], 0, r, hkv * d, &k));
    TRY(rows2(s, s->act[A_V], 0, r, hkv * d, &v));
    TRY(sift_op_rmsnorm(g, x, w->attn_norm, hp->rms_eps, xn));
    TRY(sift_op_matmul(g, xn, w->wq, w->bq, q));
    TRY(sift_op_matmul(g, xn, w->wk, w->bk, k));
    TRY(sift_op_matmul(g, xn, w->wv, w->bv, v));
    for (int i = 0; i < st->n_seg; i++) {
        const segment *sg = &st->seg[i];
        const seq_layer *sl = &s->seqs[sg->seq].layers[l];
        sift_tensor *q3, *k3, *v3, *qr3, *kr3;
        TRY(rows3(s, s->act[A_Q], sg->row0, sg->t, hq, d, &q3));
        TRY(rows3(s, s->act[A_K], sg->row0, sg->t, hkv, d, &k3));
        TRY(rows3(s, s->act[A_V], sg->row0, sg->t, hkv, d, &v3));
        TRY(rows3(s, s->act[A_QR], sg->row0, sg->t, hq, d, &qr3));
        TRY(rows3(s, s->act[A_KR], sg->row0, sg->t, hkv, d, &kr3));
        if (s->cfg.extrapolate) {
            TRY(sift_op_kv_write(g, k3, sg->pos0, sl->kview));
        } else {
            TRY(sift_op_rope(g, q3, sg->pos0, m->rope_factors, &rope, qr3));
            TRY(sift_op_rope(g, k3, sg->pos0, m->rope_factors, &rope, kr3));
            TRY(sift_op_kv_write(g, kr3, sg->pos0, sl->kview));
        }
        TRY(sift_op_kv_write(g, v3, sg->pos0, sl->vview));
    }
    return SIFT_OK;
}

/* Decode attention under TOKENSELECT or STREAMING, all on the device. */
static sift_status emit_device_select(sift_session *s, sift_graph *g, segment *sg, uint32_t l)
{
    const sift_model *m = s->m;
    const int64_t hq = m->hp.n_head, d = m->hp.head_dim, n = sg->pos0 + 1;
    const float scale = 1.0f / sqrtf((float)d);
    const sift_session_config *c = &s->cfg;
    seq_layer *sl = &s->seqs[sg->seq].layers[l];
    const bool streaming = c->policy == SIFT_POLICY_STREAMING;
    const sift_select_params sel = streaming
                                       ? (sift_select_params){.n_ctx = n, .sink = c->sink, .window = c->window + c->budget, .budget = 0}
                                       : (sift_select_params){.n_ctx = n, .sink = c->sink, .window = c->window, .budget = c->budget};
    const int64_t cand = sift_select_candidates(&sel), count = sift_select_count(&sel);
    const bool cache = !streaming && c->sel_cache <= 1.0f, full = cand > sel.budget;
    sift_tensor *q2, *qs2, *o2, *idx;
    TRY(row_heads(s, s->act[A_QR], sg->row0, hq, d, &q2));
    TRY(row_heads(s, s->act[A_ATT], sg->row0, hq, d, &o2));
    qs2 = q2;
    if (c->extrapolate) { /* SPEC §6: the scoring query sits at position W over unrotated keys */
        sift_tensor *q3, *qs3;
        const sift_rope_params rope = rope_params(m);
        TRY(rows3(s, s->act[A_Q], sg->row0, 1, hq, d, &q3));
        TRY(rows3(s, s->act[A_QS], sg->row0, 1, hq, d, &qs3));
        TRY(row_heads(s, s->act[A_QS], sg->row0, hq, d, &qs2));
        if (!streaming) TRY(sift_op_rope(g, q3, sel.window, NULL, &rope, qs3));
        /* and the attention query at the position of its own key: the list's last rank. The
         * selected earlier tokens take 0 .. |I| - 1 and the new token |I| (SPEC §6), so with every
         * token selected this is exactly normal RoPE */
        sift_tensor *qr3;
        TRY(rows3(s, s->act[A_QR], sg->row0, 1, hq, d, &qr3));
        TRY(sift_op_rope(g, q3, count - 1, NULL, &rope, qr3));
    }
    if (cache && full) {
        if (!sl->sel_idx) TRY(sift_tensor_create(m->ctx, SIFT_I32, 2, (int64_t[]){1, count}, &sl->sel_idx));
        idx = sl->sel_idx;
    } else {
        TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){1, count}, "indices", &idx));
    }
    if (streaming) {
        TRY(sift_op_fill_range(g, 0, 0, idx));
        if (cand > 0) TRY(sift_op_fill_range(g, sel.sink, n - sel.window, idx));
    } else {
        sift_tensor *scores, *votes;
        TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){1, cand}, "votes", &votes));
        if (cand > 0) {
            if (cache) {
                const int64_t sn = hq * d + SIFT_SEL_CACHE_EXTRA;
                if (!sl->sel_state) {
                    float *zeros = calloc((size_t)sn, sizeof *zeros);
                    if (!zeros) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
                    sift_status st = sift_tensor_create(m->ctx, SIFT_F32, 1, &sn, &sl->sel_state);
                    if (st == SIFT_OK) st = sift_tensor_write(sl->sel_state, 0, zeros, (size_t)sn * sizeof *zeros);
                    free(zeros);
                    TRY(st);
                }
                TRY(sift_op_sel_cache_check(g, qs2, c->sel_cache, full, sl->sel_state));
                TRY(sift_graph_skip_if(g, sl->sel_state, hq * d + SIFT_SEL_CACHE_REUSE));
            }
            TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){hq, cand}, "scores", &scores));
            TRY(sift_op_score(g, qs2, sl->kview, sel.sink, sel.sink + cand, scale, scores));
            TRY(sift_op_vote(g, SIFT_VOTE_SOFTMAX_SUM, scores, votes));
        }
        TRY(sift_op_select(g, votes, &sel, idx));
        TRY(sift_graph_skip_if(g, NULL, 0));
        /* a reused set keeps its top-k; the window moves with the sequence */
        if (cache && full) TRY(sift_op_fill_range(g, sel.sink + sel.budget, n - sel.window, idx));
    }
    sg->attn_idx = idx;
    if (c->extrapolate) {
        const sift_rope_params rope = rope_params(m);
        return sift_op_gather_attend_rope(g, q2, sl->kview, sl->vview, idx, scale, &rope, o2);
    }
    return sift_op_gather_attend(g, q2, sl->kview, sl->vview, idx, scale, o2);
}

/* Attention of layer l for every segment. */
static sift_status emit_attn(sift_session *s, sift_graph *g, step *st, uint32_t l)
{
    const sift_model *m = s->m;
    const int64_t hq = m->hp.n_head, hkv = m->hp.n_head_kv, d = m->hp.head_dim;
    const float scale = 1.0f / sqrtf((float)d);
    const sift_session_config *c = &s->cfg;
    for (int i = 0; i < st->n_seg; i++) {
        segment *sg = &st->seg[i];
        const seq_layer *sl = &s->seqs[sg->seq].layers[l];
        sg->attn_idx = NULL;
        if (st->prefill) {
            sift_tensor *q3, *o3;
            TRY(rows3(s, s->act[A_QR], sg->row0, sg->t, hq, d, &q3));
            TRY(rows3(s, s->act[A_ATT], sg->row0, sg->t, hq, d, &o3));
            const sift_select_params sel = {.n_ctx = sg->pos0, .sink = c->sink, .window = c->window, .budget = c->budget};
            const int64_t cand = sg->pos0 > 0 ? sift_select_candidates(&sel) : 0;
            if (!c->sparse_prefill || cand <= c->budget) {
                TRY(sift_op_causal_attend(g, q3, sl->kview, sl->vview, sg->pos0, scale, o3));
                continue;
            }
            /* SPEC §7: the chunk's mean query chooses one set for the whole chunk */
            sift_tensor *qflat, *qm, *qm2, *scores, *votes, *idx;
            TRY(rows2(s, s->act[A_QR], sg->row0, sg->t, hq * d, &qflat));
            TRY(rows2(s, s->act[A_QS], 0, 1, hq * d, &qm));
            TRY(row_heads(s, s->act[A_QS], 0, hq, d, &qm2));
            TRY(sift_op_mean_rows(g, qflat, qm));
            TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){hq, cand}, "scores", &scores));
            TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){1, cand}, "votes", &votes));
            TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){1, sift_select_count(&sel)}, "indices", &idx));
            TRY(sift_op_score(g, qm2, sl->kview, sel.sink, sel.sink + cand, scale, scores));
            TRY(sift_op_vote(g, SIFT_VOTE_SOFTMAX_SUM, scores, votes));
            TRY(sift_op_select(g, votes, &sel, idx));
            TRY(sift_op_causal_attend_sparse(g, q3, sl->kview, sl->vview, idx, sg->pos0, scale, o3));
            continue;
        }
        sift_tensor *q2, *o2;
        TRY(row_heads(s, s->act[A_QR], sg->row0, hq, d, &q2));
        TRY(row_heads(s, s->act[A_ATT], sg->row0, hq, d, &o2));
        if (c->policy == SIFT_POLICY_DENSE) {
            TRY(sift_op_dense_attend(g, q2, sl->kview, sl->vview, sg->pos0 + 1, scale, o2));
        } else if (host_policy(c->policy)) {
            sift_tensor *idx;
            TRY(view_of(s, s->seqs[sg->seq].host_idx, SIFT_I32, 0, 2, (int64_t[]){hkv, sg->count}, &idx));
            sg->attn_idx = idx;
            TRY(sift_op_gather_attend(g, q2, sl->kview, sl->vview, idx, scale, o2));
        } else {
            TRY(emit_device_select(s, g, sg, l));
        }
    }
    return SIFT_OK;
}

/* Output projection, residual, MLP, residual of layer l over all rows. */
static sift_status emit_post(sift_session *s, sift_graph *g, const step *st, uint32_t l)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const layer_weights *w = &s->m->layers[l];
    const int64_t e = hp->n_embd, f = hp->n_ff, r = st->rows, qd = (int64_t)hp->n_head * hp->head_dim;
    sift_tensor *x, *att, *o, *mid, *xn, *gate, *up, *act, *down, *x_out;
    TRY(rows2(s, layer_in(s, l), 0, r, e, &x));
    TRY(rows2(s, s->act[A_ATT], 0, r, qd, &att));
    TRY(rows2(s, s->act[A_O], 0, r, e, &o));
    TRY(rows2(s, s->act[A_X1], 0, r, e, &mid));
    TRY(rows2(s, s->act[A_XN], 0, r, e, &xn));
    TRY(rows2(s, s->act[A_GATE], 0, r, f, &gate));
    TRY(rows2(s, s->act[A_UP], 0, r, f, &up));
    TRY(rows2(s, s->act[A_ACT], 0, r, f, &act));
    TRY(rows2(s, s->act[A_DOWN], 0, r, e, &down));
    TRY(rows2(s, layer_res(s, l), 0, r, e, &x_out));
    TRY(sift_op_matmul(g, att, w->wo, NULL, o));
    TRY(sift_op_add(g, x, o, mid));
    TRY(sift_op_rmsnorm(g, mid, w->ffn_norm, hp->rms_eps, xn));
    TRY(sift_op_matmul(g, xn, w->w_gate, NULL, gate));
    TRY(sift_op_matmul(g, xn, w->w_up, NULL, up));
    TRY(sift_op_swiglu(g, gate, up, act));
    TRY(sift_op_matmul(g, act, w->w_down, NULL, down));
    return sift_op_add(g, mid, down, x_out);
}

/* The final norm and the logits: of the last row in prefill, of every row in decode. */
static sift_status emit_final(sift_session *s, sift_graph *g, const step *st)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const int64_t e = hp->n_embd, rows = st->prefill ? 1 : st->rows, first = st->prefill ? st->rows - 1 : 0;
    sift_tensor *x, *xn, *lg;
    TRY(rows2(s, layer_res(s, hp->n_layer - 1), first, rows, e, &x));
    TRY(rows2(s, s->xlast_norm, 0, rows, e, &xn));
    TRY(rows2(s, s->logits, 0, rows, hp->n_vocab, &lg));
    TRY(sift_op_rmsnorm(g, x, s->m->output_norm, hp->rms_eps, xn));
    return sift_op_matmul(g, xn, s->m->output, NULL, lg);
}

/* ---- the host's part: mirrors, host policies, measurements ------------------------------------------ */

/* Rows [j, end) of KV head h of sequence q in a pool: the byte offset of row j, and how many of
 * the rows from j on lie in j's page (a contiguous run). The host side of sift_kv_phys_row. */
static int64_t pool_run(const sift_session *s, const sequence *q, int64_t h, int64_t j, int64_t end, size_t *offset)
{
    const int64_t p = s->cfg.page_size, d = s->m->hp.head_dim;
    const int64_t phys = (int64_t)q->page_of[j / p] * p + j % p;
    *offset = (size_t)((h * s->pool_pages * p + phys) * d) * sift_dtype_size(s->cfg.kv_type);
    return p - j % p < end - j ? p - j % p : end - j;
}

/* Copies rows [pos0, pos0 + t) of layer l of sequence q from the pools into its mirror. */
static sift_status mirror_rows(sift_session *s, sequence *q, uint32_t l, int64_t pos0, int64_t t)
{
    seq_layer *sl = &q->layers[l];
    sift_kv_mirror *mr = &sl->mirror;
    const int64_t d = mr->head_dim, p = s->cfg.page_size;
    const size_t elt = sift_dtype_size(s->cfg.kv_type);
    unsigned char *buf = malloc((size_t)(p * d) * elt);
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
    sift_status st = SIFT_OK;
    for (int which = 0; which < 2 && st == SIFT_OK; which++) {
        float *dst = which ? mr->v : mr->k;
        if (!dst) continue;
        const sift_tensor *pool = which ? s->vpool[l] : s->kpool[l];
        for (int64_t h = 0; h < mr->n_kv_heads && st == SIFT_OK; h++)
            for (int64_t j = pos0; j < pos0 + t && st == SIFT_OK;) {
                size_t off;
                const int64_t run = pool_run(s, q, h, j, pos0 + t, &off);
                st = sift_tensor_read(pool, off, buf, (size_t)(run * d) * elt);
                float *out = dst + (h * mr->cap + j) * d;
                if (elt == 2) sift_f16_to_f32(out, (const uint16_t *)buf, (size_t)(run * d));
                else memcpy(out, buf, (size_t)(run * d) * sizeof(float));
                j += run;
            }
    }
    free(buf);
    if (st == SIFT_OK) sift_kv_mirror_update(mr, pos0, t);
    return st;
}

/* Keeps the last SIFT_POLICY_OBS prompt queries of a layer (for policies chosen after a rewind). */
static void keep_observations(seq_layer *sl, const float *q, int64_t pos0, int64_t t, int64_t qn)
{
    if (!sl->obs_q) return;
    for (int64_t i = t > SIFT_POLICY_OBS ? t - SIFT_POLICY_OBS : 0; i < t; i++) {
        if (sl->n_obs == SIFT_POLICY_OBS) { /* drop the oldest */
            memmove(sl->obs_q, sl->obs_q + qn, (size_t)((SIFT_POLICY_OBS - 1) * qn) * sizeof(float));
            memmove(sl->obs_pos, sl->obs_pos + 1, (SIFT_POLICY_OBS - 1) * sizeof(int64_t));
            sl->n_obs--;
        }
        memcpy(sl->obs_q + sl->n_obs * qn, q + i * qn, (size_t)qn * sizeof(float));
        sl->obs_pos[sl->n_obs++] = pos0 + i;
    }
}

/* After layer l's cache write: mirror the new rows; in prefill, observe the queries; in decode,
 * let a host policy write its lists. */
static sift_status host_after_pre(sift_session *s, step *st, uint32_t l)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const int64_t hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, qn = hq * d;
    for (int i = 0; i < st->n_seg; i++) {
        segment *sg = &st->seg[i];
        sequence *q = &s->seqs[sg->seq];
        seq_layer *sl = &q->layers[l];
        if (keeps_mirror(s)) TRY(mirror_rows(s, q, l, sg->pos0, sg->t));
        const bool want_q = st->prefill ? sl->obs_q != NULL || q->pstate != NULL : (q->pstate != NULL || s->cfg.eval_mode);
        if (!want_q) continue;
        float *qh = malloc((size_t)(sg->t * qn) * sizeof *qh);
        if (!qh) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
        sift_status e = sift_tensor_read(s->act[A_QR], (size_t)(sg->row0 * qn) * sizeof(float), qh, (size_t)(sg->t * qn) * sizeof(float));
        if (e == SIFT_OK && st->prefill) {
            keep_observations(sl, qh, sg->pos0, sg->t, qn);
            if (q->pstate) e = sift_policy_observe(q->pstate, (int)l, qh, sg->pos0, sg->t);
        } else if (e == SIFT_OK && q->pstate) {
            const sift_select_params sel = {.n_ctx = sg->pos0 + 1, .sink = s->cfg.sink, .window = s->cfg.window,
                                            .budget = s->cfg.budget};
            sg->count = sift_select_count(&sel);
            e = sift_policy_choose(q->pstate, (int)l, qh, &sl->mirror, &sel, 1.0f / sqrtf((float)d), sg->lists_host);
            if (e == SIFT_OK)
                e = sift_tensor_write(q->host_idx, 0, sg->lists_host, (size_t)(hkv * sg->count) * sizeof(int32_t));
        }
        if (e == SIFT_OK && !st->prefill && s->cfg.eval_mode) {
            free(sg->q_host);
            sg->q_host = qh;
            qh = NULL;
        }
        free(qh);
        TRY(e);
    }
    return SIFT_OK;
}

/* eval_mode, after layer l's attention ran: its quality against dense, from the mirror. */
static sift_status measure_layer(sift_session *s, step *st, uint32_t l)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const float scale = 1.0f / sqrtf((float)hp->head_dim);
    for (int i = 0; i < st->n_seg; i++) {
        segment *sg = &st->seg[i];
        const sift_kv_mirror *mr = &s->seqs[sg->seq].layers[l].mirror;
        if (!sg->q_host || !mr->v) continue;
        int64_t n_lists = 1, count = sg->pos0 + 1;
        int32_t *lists = NULL;
        if (sg->attn_idx) {
            n_lists = sift_tensor_dim(sg->attn_idx, 0);
            count = sift_tensor_dim(sg->attn_idx, 1);
            lists = malloc((size_t)(n_lists * count + 1) * sizeof *lists);
            if (!lists) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
            sift_status e = sift_tensor_read(sg->attn_idx, 0, lists, (size_t)(n_lists * count) * sizeof *lists);
            if (e != SIFT_OK) {
                free(lists);
                return e;
            }
        } else {
            lists = malloc((size_t)count * sizeof *lists);
            if (!lists) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
            for (int64_t j = 0; j < count; j++) lists[j] = (int32_t)j;
        }
        sift_attention_quality(sg->q_host, (int)hp->n_head, mr, lists, n_lists, count, scale, &s->quality_recall,
                               &s->quality_err);
        s->quality_n += hp->n_head;
        free(lists);
    }
    return SIFT_OK;
}

/* ---- running a step ------------------------------------------------------------------------------ */

/* Computes and frees g (and the step's views). */
static sift_status run_graph(sift_session *s, sift_graph *g)
{
    sift_status e = sift_graph_compute(g);
    sift_graph_destroy(g);
    drop_views(s);
    return e;
}

/* One graph per step; or, where the host takes part between layers (host policies' lists,
 * prompt observations, quality measures), one graph per layer: embedding and layer 0's cache
 * write, then layer l's attention and MLP with layer l + 1's cache write, and so on. */
static sift_status run_graphs(sift_session *s, step *st)
{
    const uint32_t n_layer = s->m->hp.n_layer;
    const bool host_lists = !st->prefill && host_policy(s->cfg.policy);
    const bool observe = st->prefill && s->seqs[st->seg[0].seq].layers[0].obs_q;
    const bool measure = !st->prefill && s->cfg.eval_mode && !s->cfg.extrapolate;
    sift_graph *g = NULL;
    TRY(sift_graph_create(s->m->ctx, &g));
    sift_status e = emit_embed(s, g, st);
    if (e == SIFT_OK) e = emit_pre(s, g, st, 0);
    if (!(host_lists || observe || measure)) {
        for (uint32_t l = 0; e == SIFT_OK && l < n_layer; l++) {
            e = emit_attn(s, g, st, l);
            if (e == SIFT_OK) e = emit_post(s, g, st, l);
            if (e == SIFT_OK && l + 1 < n_layer) e = emit_pre(s, g, st, l + 1);
        }
        if (e == SIFT_OK) e = emit_final(s, g, st);
        if (e != SIFT_OK) {
            sift_graph_destroy(g);
            drop_views(s);
            return e;
        }
        TRY(run_graph(s, g));
        for (int i = 0; i < st->n_seg && keeps_mirror(s); i++)
            for (uint32_t l = 0; l < n_layer; l++) TRY(mirror_rows(s, &s->seqs[st->seg[i].seq], l, st->seg[i].pos0, st->seg[i].t));
        return SIFT_OK;
    }
    if (e != SIFT_OK) {
        sift_graph_destroy(g);
        drop_views(s);
        return e;
    }
    TRY(run_graph(s, g));
    TRY(host_after_pre(s, st, 0));
    for (uint32_t l = 0; l < n_layer; l++) {
        TRY(sift_graph_create(s->m->ctx, &g));
        e = emit_attn(s, g, st, l);
        if (e == SIFT_OK) e = emit_post(s, g, st, l);
        if (e == SIFT_OK) e = l + 1 < n_layer ? emit_pre(s, g, st, l + 1) : emit_final(s, g, st);
        if (e == SIFT_OK) e = sift_graph_compute(g);
        if (e == SIFT_OK && measure) e = measure_layer(s, st, l); /* before the graph's lists go */
        sift_graph_destroy(g);
        drop_views(s);
        TRY(e);
        if (l + 1 < n_layer) TRY(host_after_pre(s, st, l + 1));
    }
    return SIFT_OK;
}

static sift_status run_step(sift_session *s, step *st, const int32_t *tokens, float *logits)
{
    for (int i = 0; i < st->n_seg; i++) {
        segment *sg = &st->seg[i];
        TRY(ensure_pages(s, &s->seqs[sg->seq], sg->pos0 + sg->t));
        if (!st->prefill && host_policy(s->cfg.policy)) {
            sg->lists_host = malloc((size_t)(s->m->hp.n_head_kv * max_count(&s->cfg) + 1) * sizeof(int32_t));
            if (!sg->lists_host) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
        }
    }
    TRY(sift_tensor_write(s->ids, 0, tokens, (size_t)st->rows * sizeof *tokens));
    sift_status e = run_graphs(s, st);
    for (int i = 0; i < st->n_seg; i++) {
        free(st->seg[i].q_host);
        free(st->seg[i].lists_host);
        st->seg[i].q_host = NULL;
        st->seg[i].lists_host = NULL;
    }
    if (e == SIFT_OK && logits) {
        const int64_t rows = st->prefill ? 1 : st->rows;
        e = sift_tensor_read(s->logits, 0, logits, (size_t)(rows * s->m->hp.n_vocab) * sizeof *logits);
    }
    if (e != SIFT_OK) return e;
    for (int i = 0; i < st->n_seg; i++) s->seqs[st->seg[i].seq].pos += st->seg[i].t;
    s->last_t = st->rows;
    s->last_row = st->prefill ? st->rows - 1 : 0;
    return SIFT_OK;
}

/* ---- the public calls ----------------------------------------------------------------------------- */

static sift_status check_tokens(const sift_session *s, const int32_t *tokens, size_t n, const char *fn)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= (int32_t)s->m->hp.n_vocab)
            return sift_set_error(SIFT_E_INVALID, "%s: token %d outside the vocabulary of %u", fn, tokens[i], s->m->hp.n_vocab);
    return SIFT_OK;
}

sift_status sift_session_eval_seq(sift_session *s, int seq, const int32_t *tokens, size_t n, float *logits)
{
    const char *fn = "sift_session_eval";
    if (!s || (!tokens && n)) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    if (seq < 0 || seq >= s->cfg.n_seq) return sift_set_error(SIFT_E_INVALID, "%s: no sequence %d of %d", fn, seq, s->cfg.n_seq);
    if (n == 0) return SIFT_OK;
    sequence *q = &s->seqs[seq];
    if ((int64_t)n > s->cfg.n_ctx - q->pos)
        return sift_set_error(SIFT_E_LIMIT, "%s: %zu more tokens do not fit: %lld of %lld positions used", fn, n,
                              (long long)q->pos, (long long)s->cfg.n_ctx);
    TRY(check_tokens(s, tokens, n, fn));
    segment sg = {.seq = seq, .row0 = 0, .t = 1};
    step st = {.seg = &sg, .n_seg = 1, .rows = 1, .prefill = false};
    /* decode steps: one token, or every token when keys are cached before RoPE (SPEC §6) */
    if (n == 1 || s->cfg.extrapolate) {
        for (size_t i = 0; i < n; i++) {
            sg.pos0 = q->pos;
            TRY(run_step(s, &st, tokens + i, i + 1 == n ? logits : NULL));
            if (n > 1 && s->cfg.progress && ((i + 1) % 256 == 0 || i + 1 == n))
                s->cfg.progress(s->cfg.progress_user, (int64_t)(i + 1), (int64_t)n);
        }
        return SIFT_OK;
    }
    st.prefill = true;
    for (size_t done = 0; done < n;) {
        const int64_t t = (int64_t)(n - done) < s->cfg.chunk ? (int64_t)(n - done) : s->cfg.chunk;
        sg.pos0 = q->pos;
        sg.t = t;
        st.rows = t;
        TRY(run_step(s, &st, tokens + done, done + (size_t)t == n ? logits : NULL));
        done += (size_t)t;
        if (s->cfg.progress) s->cfg.progress(s->cfg.progress_user, (int64_t)done, (int64_t)n);
    }
    return SIFT_OK;
}

sift_status sift_session_eval(sift_session *s, const int32_t *tokens, size_t n, float *logits)
{
    return sift_session_eval_seq(s, 0, tokens, n, logits);
}

sift_status sift_session_decode_batch(sift_session *s, int n, const int *seqs, const int32_t *tokens, float *logits)
{
    const char *fn = "sift_session_decode_batch";
    if (!s || !seqs || !tokens) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    if (n < 1 || n > s->cfg.n_seq) return sift_set_error(SIFT_E_INVALID, "%s: %d sequences (1 .. %d)", fn, n, s->cfg.n_seq);
    if (s->cfg.extrapolate && n > 1) /* the attention queries of extrapolation live in one scratch row per step */
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: length extrapolation decodes one sequence at a time", fn);
    TRY(check_tokens(s, tokens, (size_t)n, fn));
    segment *sg = calloc((size_t)n, sizeof *sg);
    if (!sg) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    sift_status e = SIFT_OK;
    for (int i = 0; i < n && e == SIFT_OK; i++) {
        if (seqs[i] < 0 || seqs[i] >= s->cfg.n_seq) e = sift_set_error(SIFT_E_INVALID, "%s: no sequence %d", fn, seqs[i]);
        for (int j = 0; j < i && e == SIFT_OK; j++)
            if (seqs[j] == seqs[i]) e = sift_set_error(SIFT_E_INVALID, "%s: sequence %d listed twice", fn, seqs[i]);
        if (e == SIFT_OK && s->seqs[seqs[i]].pos >= s->cfg.n_ctx)
            e = sift_set_error(SIFT_E_LIMIT, "%s: sequence %d is full (%lld tokens)", fn, seqs[i], (long long)s->cfg.n_ctx);
        if (e == SIFT_OK) sg[i] = (segment){.seq = seqs[i], .row0 = i, .t = 1, .pos0 = s->seqs[seqs[i]].pos};
    }
    step st = {.seg = sg, .n_seg = n, .rows = n, .prefill = false};
    if (e == SIFT_OK) e = run_step(s, &st, tokens, logits);
    free(sg);
    return e;
}

int64_t sift_session_pos(const sift_session *s) { return s ? s->seqs[0].pos : 0; }

int64_t sift_session_seq_pos(const sift_session *s, int seq)
{
    return s && seq >= 0 && seq < s->cfg.n_seq ? s->seqs[seq].pos : 0;
}

sift_status sift_session_rewind(sift_session *s, int seq, int64_t pos)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_rewind: session is NULL");
    if (seq < 0 || seq >= s->cfg.n_seq) return sift_set_error(SIFT_E_INVALID, "sift_session_rewind: no sequence %d", seq);
    sequence *q = &s->seqs[seq];
    if (pos < 0 || pos > q->pos)
        return sift_set_error(SIFT_E_INVALID, "sift_session_rewind: position %lld outside 0 .. %lld", (long long)pos,
                              (long long)q->pos);
    q->pos = pos;
    TRY(release_pages(s, q, pos));
    for (uint32_t l = 0; l < s->m->hp.n_layer; l++) {
        seq_layer *sl = &q->layers[l];
        if (sl->mirror.k) sift_kv_mirror_update(&sl->mirror, pos, 0);
        int kept = 0;
        const int64_t qn = (int64_t)s->m->hp.n_head * s->m->hp.head_dim;
        for (int i = 0; i < sl->n_obs; i++)
            if (sl->obs_pos[i] < pos) {
                memmove(sl->obs_q + kept * qn, sl->obs_q + i * qn, (size_t)qn * sizeof(float));
                sl->obs_pos[kept++] = sl->obs_pos[i];
            }
        sl->n_obs = kept;
    }
    free_sequence_state(s, q);
    return make_policy_state(s, q);
}

sift_status sift_session_set_policy(sift_session *s, sift_policy policy, int64_t sink, int64_t window, int64_t budget)
{
    const char *fn = "sift_session_set_policy";
    if (!s) return sift_set_error(SIFT_E_INVALID, "%s: session is NULL", fn);
    sift_session_config c = s->cfg;
    c.policy = policy;
    c.sink = sink;
    c.window = window;
    c.budget = budget;
    TRY(check_policy(&c, fn));
    for (int i = 0; i < s->cfg.n_seq; i++)
        if (host_policy(policy) && s->seqs[i].pos > 0 && !s->seqs[i].layers[0].mirror.k)
            return sift_set_error(SIFT_E_INVALID, "%s: %s needs a mirror of the cache built since the start: create the session "
                                  "with eval_mode or this policy", fn, sift_policy_name(policy));
    for (int i = 0; i < s->cfg.n_seq; i++) free_sequence_state(s, &s->seqs[i]);
    s->cfg = c;
    for (int i = 0; i < s->cfg.n_seq; i++) {
        sequence *q = &s->seqs[i];
        for (uint32_t l = 0; l < s->m->hp.n_layer && host_policy(policy); l++)
            if (!q->layers[l].mirror.k)
                TRY(sift_kv_mirror_init(&q->layers[l].mirror, s->m->hp.n_head_kv, s->m->hp.head_dim, s->cfg.n_ctx, false));
        TRY(make_policy_state(s, q));
    }
    return SIFT_OK;
}

sift_status sift_session_fill_synthetic(sift_session *s, int64_t n, uint64_t seed)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_fill_synthetic: session is NULL");
    sequence *q = &s->seqs[0];
    if (n < 0 || n > s->cfg.n_ctx - q->pos)
        return sift_set_error(SIFT_E_LIMIT, "sift_session_fill_synthetic: %lld tokens do not fit after %lld of %lld",
                              (long long)n, (long long)q->pos, (long long)s->cfg.n_ctx);
    TRY(ensure_pages(s, q, q->pos + n));
    /* one page of random rows, written over and over: the values do not matter, the upload does */
    const int64_t hkv = s->m->hp.n_head_kv, d = s->m->hp.head_dim, p = s->cfg.page_size;
    const size_t elt = sift_dtype_size(s->cfg.kv_type);
    unsigned char *buf = malloc((size_t)(p * d) * elt);
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "sift_session_fill_synthetic: out of memory");
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < p * d; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const float v = (float)(int32_t)(x >> 32) * (1.0f / 2147483648.0f);
        if (elt == 2) ((uint16_t *)buf)[i] = sift_float_to_half(v);
        else ((float *)buf)[i] = v;
    }
    sift_status st = SIFT_OK;
    for (uint32_t l = 0; st == SIFT_OK && l < s->m->hp.n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int64_t h = 0; st == SIFT_OK && h < hkv; h++)
                for (int64_t j = q->pos; st == SIFT_OK && j < q->pos + n;) {
                    size_t off;
                    const int64_t run = pool_run(s, q, h, j, q->pos + n, &off);
                    st = sift_tensor_write(kv ? s->vpool[l] : s->kpool[l], off, buf, (size_t)(run * d) * elt);
                    j += run;
                }
    free(buf);
    if (st == SIFT_OK) q->pos += n;
    return st;
}

sift_status sift_session_layer_output(const sift_session *s, int layer, float *out)
{
    if (!s || !out) return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: null argument");
    if (!s->layer_out) return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: the session keeps no layer outputs");
    if (layer < 0 || layer >= (int)s->m->hp.n_layer || s->last_t == 0)
        return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: no layer %d output", layer);
    const size_t e = s->m->hp.n_embd;
    return sift_tensor_read(s->layer_out[layer], (size_t)s->last_row * e * sizeof(float), out, e * sizeof(float));
}

size_t sift_session_kv_bytes(const sift_session *s)
{
    size_t total = 0;
    for (uint32_t l = 0; s && l < s->m->hp.n_layer; l++)
        total += sift_tensor_nbytes(s->kpool[l]) + sift_tensor_nbytes(s->vpool[l]);
    return total;
}

size_t sift_session_kv_used_bytes(const sift_session *s)
{
    if (!s || s->pool_pages == 0) return 0;
    return (size_t)((double)sift_session_kv_bytes(s) * (double)(s->pool_pages - s->n_free) / (double)s->pool_pages);
}

sift_status sift_session_sel_cache_stats(const sift_session *s, int layer, int64_t *hits, int64_t *steps)
{
    if (!s || !hits || !steps) return sift_set_error(SIFT_E_INVALID, "sift_session_sel_cache_stats: null argument");
    if (layer < -1 || layer >= (int)s->m->hp.n_layer)
        return sift_set_error(SIFT_E_INVALID, "sift_session_sel_cache_stats: no layer %d", layer);
    *hits = *steps = 0;
    const size_t qn = (size_t)s->m->hp.n_head * s->m->hp.head_dim;
    for (int i = 0; i < s->cfg.n_seq; i++)
        for (uint32_t l = 0; l < s->m->hp.n_layer; l++) {
            const sift_tensor *state = s->seqs[i].layers[l].sel_state;
            if ((layer >= 0 && (uint32_t)layer != l) || !state) continue;
            float extra[SIFT_SEL_CACHE_EXTRA];
            TRY(sift_tensor_read(state, qn * sizeof(float), extra, sizeof extra));
            *hits += (int64_t)extra[SIFT_SEL_CACHE_HITS];
            *steps += (int64_t)extra[SIFT_SEL_CACHE_STEPS];
        }
    return SIFT_OK;
}

sift_status sift_session_attention_quality(const sift_session *s, double *recall, double *rel_err, int64_t *n)
{
    if (!s || !recall || !rel_err || !n) return sift_set_error(SIFT_E_INVALID, "sift_session_attention_quality: null argument");
    if (!s->cfg.eval_mode) return sift_set_error(SIFT_E_INVALID, "sift_session_attention_quality: the session is not in eval_mode");
    *n = s->quality_n;
    *recall = s->quality_n ? s->quality_recall / (double)s->quality_n : 0.0;
    *rel_err = s->quality_n ? s->quality_err / (double)s->quality_n : 0.0;
    return SIFT_OK;
}
