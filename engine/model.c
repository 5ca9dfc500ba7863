/* Llama-family models from GGUF (llama, qwen2, mistral) as one graph per step: embedding, per layer
 * RMSNorm -> Q/K/V -> RoPE -> KV-cache write -> attention -> output projection -> residual ->
 * RMSNorm -> SwiGLU MLP -> residual, then the final norm and the logits of the last token.
 * Prefill runs chunks of tokens with causal attention; a decode step runs dense attention or the
 * selection pipeline (score -> vote -> select -> gather_attend) over the cache. */
#include "engine.h"
#include "gguf.h"
#include "quant.h"
#include "tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_weights {
    sift_tensor *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv;
    sift_tensor *ffn_norm, *w_gate, *w_up, *w_down;
} layer_weights;

struct sift_model {
    sift_context *ctx;
    sift_gguf *file;
    sift_gguf_hparams hp;
    sift_tokenizer *tok;
    sift_tensor *tok_embd, *output_norm, *output; /* output == tok_embd when tied */
    sift_tensor *rope_factors;                    /* NULL: no frequency scaling */
    layer_weights *layers;
    size_t weight_bytes;
    sift_rope_mode rope_mode;
};

static sift_status dtype_of(const sift_gguf_tensor *t, sift_dtype *out)
{
    switch (t->type) {
    case SIFT_GGUF_TENSOR_F32: *out = SIFT_F32; return SIFT_OK;
    case SIFT_GGUF_TENSOR_F16: *out = SIFT_F16; return SIFT_OK;
    case SIFT_GGUF_TENSOR_BF16: *out = SIFT_BF16; return SIFT_OK;
    case SIFT_GGUF_TENSOR_Q8_0: *out = SIFT_Q8_0; return SIFT_OK;
    case SIFT_GGUF_TENSOR_Q4_0: *out = SIFT_Q4_0; return SIFT_OK;
    }
    return sift_set_error(SIFT_E_DTYPE, "tensor '%.*s' has type %u, which sift does not run", (int)t->name.len,
                          t->name.ptr, (unsigned)t->type);
}

/* Uploads one GGUF tensor. Matrices keep their type, shaped [rows][row length]; vectors (norms,
 * biases) become f32, which the ops that read them expect. want_rows/want_cols check the shape
 * (want_cols 0: a vector of want_rows values). */
static sift_status upload_tensor(sift_model *m, const char *name, int64_t want_rows, int64_t want_cols, bool optional,
                                 sift_tensor **out)
{
    *out = NULL;
    const sift_gguf_tensor *t = sift_gguf_find_tensor(m->file, name);
    if (!t) {
        if (optional) return SIFT_OK;
        return sift_set_error(SIFT_E_INVALID, "%s: tensor '%s' is missing", sift_gguf_label(m->file), name);
    }
    const bool vector = want_cols == 0;
    const uint64_t rows = vector ? 1 : t->dims[1], cols = t->dims[0];
    const bool shape_ok = vector ? (t->n_dims == 1 && cols == (uint64_t)want_rows)
                                 : (t->n_dims == 2 && rows == (uint64_t)want_rows && cols == (uint64_t)want_cols);
    if (!shape_ok)
        return sift_set_error(SIFT_E_SHAPE, "%s: tensor '%s' has dims [%llu, %llu], expected [%lld, %lld] (row length first)",
                              sift_gguf_label(m->file), name, (unsigned long long)t->dims[0],
                              (unsigned long long)(t->n_dims > 1 ? t->dims[1] : 1), (long long)(vector ? want_rows : want_cols),
                              (long long)(vector ? 1 : want_rows));
    sift_dtype dt = SIFT_F32;
    TRY(dtype_of(t, &dt));
    sift_status s;
    if (vector) {
        float *f = malloc((size_t)cols * sizeof *f);
        if (!f) return sift_set_error(SIFT_E_NOMEM, "model: out of memory");
        sift_row_to_f32(dt, t->data, f, (int64_t)cols);
        s = sift_tensor_create(m->ctx, SIFT_F32, 1, (int64_t[]){(int64_t)cols}, out);
        if (s == SIFT_OK) s = sift_tensor_write(*out, 0, f, (size_t)cols * sizeof *f);
        free(f);
    } else {
        s = sift_tensor_create(m->ctx, dt, 2, (int64_t[]){(int64_t)rows, (int64_t)cols}, out);
        if (s == SIFT_OK) s = sift_tensor_write(*out, 0, t->data, (size_t)t->nbytes);
    }
    if (s != SIFT_OK) {
        sift_tensor_destroy(*out);
        *out = NULL;
        return s;
    }
    sift_tensor_set_name(*out, name);
    m->weight_bytes += sift_tensor_nbytes(*out);
    return SIFT_OK;
}

/* Per-pair frequency divisors for Llama 3.1's rope scaling (or a linear factor), NULL for none. */
static sift_status make_rope_factors(sift_model *m)
{
    const sift_gguf_hparams *hp = &m->hp;
    const int half = (int)hp->rope_dim / 2;
    if (hp->has_rope_freqs) return upload_tensor(m, "rope_freqs.weight", half, 0, false, &m->rope_factors);
    if (hp->rope_scaling == SIFT_GGUF_ROPE_SCALING_NONE) return SIFT_OK;
    if (hp->rope_scaling == SIFT_GGUF_ROPE_SCALING_YARN)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: YaRN rope scaling is not supported", sift_gguf_label(m->file));
    float *f = malloc((size_t)half * sizeof *f);
    if (!f) return sift_set_error(SIFT_E_NOMEM, "model: out of memory");
    for (int i = 0; i < half; i++) {
        f[i] = hp->rope_scaling_factor;
        if (hp->rope_scaling == SIFT_GGUF_ROPE_SCALING_LLAMA3 && hp->rope_original_ctx > 0) {
            const float freq = powf(hp->rope_freq_base, -2.0f * (float)i / (float)hp->rope_dim);
            const float wavelen = 6.28318531f / freq, orig = (float)hp->rope_original_ctx;
            const float low_wavelen = orig / hp->rope_low_freq_factor, high_wavelen = orig / hp->rope_high_freq_factor;
            if (wavelen < high_wavelen) {
                f[i] = 1.0f;
            } else if (wavelen <= low_wavelen) {
                const float smooth = (orig / wavelen - hp->rope_low_freq_factor) /
                                     (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                f[i] = 1.0f / ((1.0f - smooth) / hp->rope_scaling_factor + smooth);
            }
        }
    }
    sift_status s = sift_tensor_create(m->ctx, SIFT_F32, 1, (int64_t[]){half}, &m->rope_factors);
    if (s == SIFT_OK) s = sift_tensor_write(m->rope_factors, 0, f, (size_t)half * sizeof *f);
    free(f);
    return s;
}

void sift_model_destroy(sift_model *m)
{
    if (!m) return;
    if (m->layers) {
        for (uint32_t l = 0; l < m->hp.n_layer; l++) {
            sift_tensor **w = (sift_tensor **)&m->layers[l];
            for (size_t i = 0; i < sizeof(layer_weights) / sizeof(sift_tensor *); i++) sift_tensor_destroy(w[i]);
        }
        free(m->layers);
    }
    if (m->output != m->tok_embd) sift_tensor_destroy(m->output);
    sift_tensor_destroy(m->tok_embd);
    sift_tensor_destroy(m->output_norm);
    sift_tensor_destroy(m->rope_factors);
    sift_tokenizer_destroy(m->tok);
    sift_gguf_close(m->file);
    free(m);
}

sift_status sift_model_load(sift_context *ctx, const char *path, sift_model **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_model_load: out is NULL");
    *out = NULL;
    if (!ctx || !path) return sift_set_error(SIFT_E_INVALID, "sift_model_load: null argument");
    sift_model *m = calloc(1, sizeof *m);
    if (!m) return sift_set_error(SIFT_E_NOMEM, "sift_model_load: out of memory");
    m->ctx = ctx;
    sift_status s = sift_gguf_open_file(path, &m->file);
    if (s == SIFT_OK) s = sift_gguf_read_hparams(m->file, &m->hp);
    if (s == SIFT_OK) s = sift_tokenizer_create(m->file, &m->tok);
    const sift_gguf_hparams *hp = &m->hp;
    if (s == SIFT_OK && (hp->head_dim % 8 != 0 || hp->head_dim > 128))
        s = sift_set_error(SIFT_E_UNSUPPORTED, "%s: head dimension %u is not supported (a multiple of 8, at most 128)",
                           path, hp->head_dim);
    if (s != SIFT_OK) {
        sift_model_destroy(m);
        return s;
    }
    m->rope_mode = hp->arch == SIFT_GGUF_ARCH_QWEN2 ? SIFT_ROPE_NEOX : SIFT_ROPE_ADJACENT;
    const int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    s = upload_tensor(m, "token_embd.weight", hp->n_vocab, e, false, &m->tok_embd);
    if (s == SIFT_OK) s = upload_tensor(m, "output_norm.weight", e, 0, false, &m->output_norm);
    if (s == SIFT_OK) s = upload_tensor(m, "output.weight", hp->n_vocab, e, true, &m->output);
    if (s == SIFT_OK && !m->output) m->output = m->tok_embd;
    if (s == SIFT_OK) s = make_rope_factors(m);
    if (s == SIFT_OK) {
        m->layers = calloc(hp->n_layer, sizeof *m->layers);
        if (!m->layers) s = sift_set_error(SIFT_E_NOMEM, "sift_model_load: out of memory");
    }
    for (uint32_t l = 0; s == SIFT_OK && l < hp->n_layer; l++) {
        layer_weights *w = &m->layers[l];
        char name[96];
#define LOAD(field, suffix, rows, cols, optional)                                                                      \
    if (s == SIFT_OK) {                                                                                                \
        snprintf(name, sizeof name, "blk.%u.%s", l, suffix);                                                           \
        s = upload_tensor(m, name, rows, cols, optional, &w->field);                                                   \
    }
        LOAD(attn_norm, "attn_norm.weight", e, 0, false)
        LOAD(wq, "attn_q.weight", qd, e, false)
        LOAD(wk, "attn_k.weight", kvd, e, false)
        LOAD(wv, "attn_v.weight", kvd, e, false)
        LOAD(wo, "attn_output.weight", e, qd, false)
        LOAD(bq, "attn_q.bias", qd, 0, true)
        LOAD(bk, "attn_k.bias", kvd, 0, true)
        LOAD(bv, "attn_v.bias", kvd, 0, true)
        LOAD(ffn_norm, "ffn_norm.weight", e, 0, false)
        LOAD(w_gate, "ffn_gate.weight", hp->n_ff, e, false)
        LOAD(w_up, "ffn_up.weight", hp->n_ff, e, false)
        LOAD(w_down, "ffn_down.weight", e, hp->n_ff, false)
#undef LOAD
    }
    if (s != SIFT_OK) {
        sift_model_destroy(m);
        return s;
    }
    *out = m;
    return SIFT_OK;
}

void sift_model_get_info(const sift_model *m, sift_model_info *out)
{
    if (!m || !out) return;
    memset(out, 0, sizeof *out);
    snprintf(out->arch, sizeof out->arch, "%s", m->hp.arch_name);
    out->n_layers = (int)m->hp.n_layer;
    out->n_embd = (int)m->hp.n_embd;
    out->n_ff = (int)m->hp.n_ff;
    out->n_heads = (int)m->hp.n_head;
    out->n_kv_heads = (int)m->hp.n_head_kv;
    out->head_dim = (int)m->hp.head_dim;
    out->n_vocab = (int)m->hp.n_vocab;
    out->n_ctx_train = m->hp.n_ctx_train;
    out->weight_bytes = m->weight_bytes;
    out->bos = sift_tokenizer_bos(m->tok);
    out->eos = sift_tokenizer_eos(m->tok);
}

sift_status sift_model_tokenize(const sift_model *m, const char *text, size_t len, int add_bos, int32_t *ids, size_t cap,
                                size_t *n)
{
    if (!m || (!text && len) || !n) return sift_set_error(SIFT_E_INVALID, "sift_model_tokenize: null argument");
    return sift_tokenizer_encode(m->tok, text ? text : "", len, add_bos != 0, ids, cap, n);
}

sift_status sift_model_token_piece(const sift_model *m, int32_t id, char *buf, size_t cap, size_t *len)
{
    if (!m || !len) return sift_set_error(SIFT_E_INVALID, "sift_model_token_piece: null argument");
    return sift_tokenizer_token_bytes(m->tok, id, buf, cap, len);
}

/* ---- sessions ------------------------------------------------------------------------------- */

/* Activations for up to `chunk` tokens; a step of T tokens uses views of their first T rows. */
enum { A_X0, A_X1, A_XN, A_Q, A_K, A_V, A_QR, A_KR, A_ATT, A_O, A_GATE, A_UP, A_ACT, A_DOWN, A_COUNT };

struct sift_session {
    sift_model *m;
    sift_session_config cfg;
    int64_t pos;
    sift_tensor **kcache, **vcache;
    sift_tensor *act[A_COUNT];
    sift_tensor *ids, *xlast_norm, *logits;
    sift_tensor **layer_out; /* keep_layer_outputs: each layer's output [chunk][n_embd] */
    int64_t last_t;          /* tokens of the last step */
    /* views made for the step being built, freed after it runs */
    sift_tensor **views;
    int n_views, cap_views;
};

sift_session_config sift_session_config_default(void)
{
    sift_session_config c = {.n_ctx = 0, .kv_type = SIFT_F16, .attn = SIFT_ATTN_DENSE, .sink = 128, .window = 512,
                             .budget = 2048, .chunk = 512};
    return c;
}

void sift_session_destroy(sift_session *s)
{
    if (!s) return;
    for (uint32_t l = 0; s->kcache && l < s->m->hp.n_layer; l++) {
        sift_tensor_destroy(s->kcache[l]);
        sift_tensor_destroy(s->vcache[l]);
    }
    free(s->kcache);
    free(s->vcache);
    for (uint32_t l = 0; s->layer_out && l < s->m->hp.n_layer; l++) sift_tensor_destroy(s->layer_out[l]);
    free(s->layer_out);
    for (int i = 0; i < A_COUNT; i++) sift_tensor_destroy(s->act[i]);
    sift_tensor_destroy(s->ids);
    sift_tensor_destroy(s->xlast_norm);
    sift_tensor_destroy(s->logits);
    free(s->views);
    free(s);
}

sift_status sift_session_create(sift_model *m, const sift_session_config *cfg, sift_session **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_session_create: out is NULL");
    *out = NULL;
    if (!m) return sift_set_error(SIFT_E_INVALID, "sift_session_create: model is NULL");
    sift_session_config c = cfg ? *cfg : sift_session_config_default();
    if (c.n_ctx == 0) c.n_ctx = m->hp.n_ctx_train;
    if (c.chunk == 0) c.chunk = 512;
    if (c.n_ctx < 1 || c.n_ctx > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "sift_session_create: context of %lld tokens", (long long)c.n_ctx);
    if (c.chunk < 1 || c.chunk > 65536) return sift_set_error(SIFT_E_SHAPE, "sift_session_create: chunk %lld", (long long)c.chunk);
    if (c.kv_type != SIFT_F16 && c.kv_type != SIFT_F32)
        return sift_set_error(SIFT_E_DTYPE, "sift_session_create: KV cache type %s (f16 or f32)", sift_dtype_name(c.kv_type));
    if (c.attn != SIFT_ATTN_DENSE && c.attn != SIFT_ATTN_SELECT)
        return sift_set_error(SIFT_E_INVALID, "sift_session_create: unknown attention mode %d", (int)c.attn);
    if (c.sink < 0 || c.window < 0 || c.budget < 0)
        return sift_set_error(SIFT_E_SHAPE, "sift_session_create: sink, window and budget must not be negative");
    sift_session *s = calloc(1, sizeof *s);
    if (!s) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    s->m = m;
    s->cfg = c;
    const sift_gguf_hparams *hp = &m->hp;
    const int64_t t = c.chunk, e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, f = hp->n_ff;
    sift_status st = SIFT_OK;
    s->kcache = calloc(hp->n_layer, sizeof *s->kcache);
    s->vcache = calloc(hp->n_layer, sizeof *s->vcache);
    if (!s->kcache || !s->vcache) st = sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    for (uint32_t l = 0; st == SIFT_OK && l < hp->n_layer; l++) {
        const int64_t shape[3] = {hkv, c.n_ctx, d};
        st = sift_tensor_create(m->ctx, c.kv_type, 3, shape, &s->kcache[l]);
        if (st == SIFT_OK) st = sift_tensor_create(m->ctx, c.kv_type, 3, shape, &s->vcache[l]);
    }
    const int64_t widths[A_COUNT] = {[A_X0] = e,       [A_X1] = e,      [A_XN] = e,      [A_Q] = hq * d, [A_K] = hkv * d,
                                     [A_V] = hkv * d,  [A_QR] = hq * d, [A_KR] = hkv * d, [A_ATT] = hq * d, [A_O] = e,
                                     [A_GATE] = f,     [A_UP] = f,      [A_ACT] = f,     [A_DOWN] = e};
    for (int i = 0; st == SIFT_OK && i < A_COUNT; i++)
        st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){t, widths[i]}, &s->act[i]);
    if (st == SIFT_OK && c.keep_layer_outputs) {
        s->layer_out = calloc(hp->n_layer, sizeof *s->layer_out);
        if (!s->layer_out) st = sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
        for (uint32_t l = 0; st == SIFT_OK && l < hp->n_layer; l++)
            st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){t, e}, &s->layer_out[l]);
    }
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_I32, 1, (int64_t[]){t}, &s->ids);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){1, e}, &s->xlast_norm);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){1, hp->n_vocab}, &s->logits);
    if (st != SIFT_OK) {
        sift_session_destroy(s);
        return st;
    }
    *out = s;
    return SIFT_OK;
}

int64_t sift_session_pos(const sift_session *s) { return s ? s->pos : 0; }

size_t sift_session_kv_bytes(const sift_session *s)
{
    size_t total = 0;
    for (uint32_t l = 0; s && l < s->m->hp.n_layer; l++)
        total += sift_tensor_nbytes(s->kcache[l]) + sift_tensor_nbytes(s->vcache[l]);
    return total;
}

/* A view of an activation with the given shape (kept until the step ends). */
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

static sift_status view(sift_session *s, sift_tensor *parent, size_t byte_offset, int ndim, const int64_t *shape,
                        sift_tensor **out)
{
    return view_of(s, parent, SIFT_F32, byte_offset, ndim, shape, out);
}

static void drop_views(sift_session *s)
{
    for (int i = 0; i < s->n_views; i++) sift_tensor_destroy(s->views[i]);
    s->n_views = 0;
}

/* The graph of one step: T tokens at positions pos .. pos + T - 1. prefill: causal attention;
 * otherwise (T = 1) the configured decode attention. */
static sift_status build_step(sift_session *s, sift_graph *g, int64_t t, bool prefill)
{
    const sift_model *m = s->m;
    const sift_gguf_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, f = hp->n_ff;
    const float scale = 1.0f / sqrtf((float)d);
    sift_tensor *a[A_COUNT], *q3, *k3, *v3, *qr3, *kr3, *att3;
#define V2(i, w) TRY(view(s, s->act[i], 0, 2, (int64_t[]){t, w}, &a[i]))
    V2(A_X0, e);
    V2(A_X1, e);
    V2(A_XN, e);
    V2(A_Q, hq * d);
    V2(A_K, hkv * d);
    V2(A_V, hkv * d);
    V2(A_ATT, hq * d);
    V2(A_O, e);
    V2(A_GATE, f);
    V2(A_UP, f);
    V2(A_ACT, f);
    V2(A_DOWN, e);
#undef V2
    TRY(view(s, s->act[A_Q], 0, 3, (int64_t[]){t, hq, d}, &q3));
    TRY(view(s, s->act[A_K], 0, 3, (int64_t[]){t, hkv, d}, &k3));
    TRY(view(s, s->act[A_V], 0, 3, (int64_t[]){t, hkv, d}, &v3));
    TRY(view(s, s->act[A_QR], 0, 3, (int64_t[]){t, hq, d}, &qr3));
    TRY(view(s, s->act[A_KR], 0, 3, (int64_t[]){t, hkv, d}, &kr3));
    TRY(view(s, s->act[A_ATT], 0, 3, (int64_t[]){t, hq, d}, &att3));
    sift_tensor *ids;
    TRY(view_of(s, s->ids, SIFT_I32, 0, 1, (int64_t[]){t}, &ids));

    const sift_rope_params rope = {.n_rot = (int)hp->rope_dim, .base = hp->rope_freq_base, .mode = m->rope_mode};
    sift_tensor *x = a[A_X0], *x_mid = a[A_X1]; /* the residual stream; x_mid after attention */
    TRY(sift_op_get_rows(g, m->tok_embd, ids, x));
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const layer_weights *w = &m->layers[l];
        TRY(sift_op_rmsnorm(g, x, w->attn_norm, hp->rms_eps, a[A_XN]));
        TRY(sift_op_matmul(g, a[A_XN], w->wq, w->bq, a[A_Q]));
        TRY(sift_op_matmul(g, a[A_XN], w->wk, w->bk, a[A_K]));
        TRY(sift_op_matmul(g, a[A_XN], w->wv, w->bv, a[A_V]));
        TRY(sift_op_rope(g, q3, s->pos, m->rope_factors, &rope, qr3));
        TRY(sift_op_rope(g, k3, s->pos, m->rope_factors, &rope, kr3));
        TRY(sift_op_kv_write(g, kr3, s->pos, s->kcache[l]));
        TRY(sift_op_kv_write(g, v3, s->pos, s->vcache[l]));
        if (prefill) {
            TRY(sift_op_causal_attend(g, qr3, s->kcache[l], s->vcache[l], s->pos, scale, att3));
        } else {
            sift_tensor *q2, *o2;
            TRY(view(s, s->act[A_QR], 0, 2, (int64_t[]){hq, d}, &q2));
            TRY(view(s, s->act[A_ATT], 0, 2, (int64_t[]){hq, d}, &o2));
            sift_attn_config ac = {.n_q_heads = (int)hq, .n_kv_heads = (int)hkv, .head_dim = (int)d,
                                   .sel = {.n_ctx = s->pos + 1, .sink = s->cfg.sink, .window = s->cfg.window,
                                           .budget = s->cfg.budget},
                                   .vote = SIFT_VOTE_SOFTMAX_SUM, .mode = s->cfg.attn};
            TRY(sift_decode_attn_append(g, &ac, q2, s->kcache[l], s->vcache[l], o2, NULL));
        }
        TRY(sift_op_matmul(g, a[A_ATT], w->wo, NULL, a[A_O]));
        TRY(sift_op_add(g, x, a[A_O], x_mid));
        TRY(sift_op_rmsnorm(g, x_mid, w->ffn_norm, hp->rms_eps, a[A_XN]));
        TRY(sift_op_matmul(g, a[A_XN], w->w_gate, NULL, a[A_GATE]));
        TRY(sift_op_matmul(g, a[A_XN], w->w_up, NULL, a[A_UP]));
        TRY(sift_op_swiglu(g, a[A_GATE], a[A_UP], a[A_ACT]));
        TRY(sift_op_matmul(g, a[A_ACT], w->w_down, NULL, a[A_DOWN]));
        sift_tensor *x_out = x;
        if (s->layer_out) TRY(view(s, s->layer_out[l], 0, 2, (int64_t[]){t, e}, &x_out));
        TRY(sift_op_add(g, x_mid, a[A_DOWN], x_out));
        x = x_out;
    }
    sift_tensor *xlast;
    TRY(view(s, s->layer_out ? s->layer_out[hp->n_layer - 1] : s->act[A_X0], (size_t)((t - 1) * e) * sizeof(float), 2,
             (int64_t[]){1, e}, &xlast));
    TRY(sift_op_rmsnorm(g, xlast, m->output_norm, hp->rms_eps, s->xlast_norm));
    return sift_op_matmul(g, s->xlast_norm, m->output, NULL, s->logits);
}

static sift_status run_step(sift_session *s, const int32_t *tokens, int64_t t, bool prefill, float *logits)
{
    TRY(sift_tensor_write(s->ids, 0, tokens, (size_t)t * sizeof *tokens));
    sift_graph *g = NULL;
    sift_status st = sift_graph_create(s->m->ctx, &g);
    if (st == SIFT_OK) st = build_step(s, g, t, prefill);
    if (st == SIFT_OK) st = sift_graph_compute(g);
    if (st == SIFT_OK && logits)
        st = sift_tensor_read(s->logits, 0, logits, (size_t)s->m->hp.n_vocab * sizeof *logits);
    sift_graph_destroy(g);
    drop_views(s);
    if (st == SIFT_OK) {
        s->pos += t;
        s->last_t = t;
    }
    return st;
}

sift_status sift_session_fill_synthetic(sift_session *s, int64_t n, uint64_t seed)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_fill_synthetic: session is NULL");
    if (n < 0 || n > s->cfg.n_ctx - s->pos)
        return sift_set_error(SIFT_E_LIMIT, "sift_session_fill_synthetic: %lld tokens do not fit after %lld of %lld",
                              (long long)n, (long long)s->pos, (long long)s->cfg.n_ctx);
    /* one slab of random rows, written over and over: the values do not matter, the upload does */
    const int64_t hkv = s->m->hp.n_head_kv, d = s->m->hp.head_dim, slab_rows = 4096;
    const size_t elt = sift_dtype_size(s->cfg.kv_type);
    unsigned char *buf = malloc((size_t)(slab_rows * d) * elt);
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "sift_session_fill_synthetic: out of memory");
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < slab_rows * d; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const float v = (float)(int32_t)(x >> 32) * (1.0f / 2147483648.0f);
        if (elt == 2) ((uint16_t *)buf)[i] = sift_float_to_half(v);
        else ((float *)buf)[i] = v;
    }
    sift_status st = SIFT_OK;
    for (uint32_t l = 0; st == SIFT_OK && l < s->m->hp.n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int64_t h = 0; st == SIFT_OK && h < hkv; h++)
                for (int64_t r = 0; st == SIFT_OK && r < n; r += slab_rows) {
                    const int64_t rows = n - r < slab_rows ? n - r : slab_rows;
                    sift_tensor *cache = kv ? s->vcache[l] : s->kcache[l];
                    const size_t off = (size_t)((h * s->cfg.n_ctx + s->pos + r) * d) * elt;
                    st = sift_tensor_write(cache, off, buf, (size_t)(rows * d) * elt);
                }
    free(buf);
    if (st == SIFT_OK) s->pos += n;
    return st;
}

sift_status sift_session_set_attention(sift_session *s, sift_attn_mode mode, int64_t sink, int64_t window, int64_t budget)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_set_attention: session is NULL");
    if (mode != SIFT_ATTN_DENSE && mode != SIFT_ATTN_SELECT)
        return sift_set_error(SIFT_E_INVALID, "sift_session_set_attention: unknown mode %d", (int)mode);
    if (sink < 0 || window < 0 || budget < 0)
        return sift_set_error(SIFT_E_SHAPE, "sift_session_set_attention: sink, window and budget must not be negative");
    s->cfg.attn = mode;
    s->cfg.sink = sink;
    s->cfg.window = window;
    s->cfg.budget = budget;
    return SIFT_OK;
}

sift_status sift_session_layer_output(const sift_session *s, int layer, float *out)
{
    if (!s || !out) return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: null argument");
    if (!s->layer_out) return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: the session keeps no layer outputs");
    if (layer < 0 || layer >= (int)s->m->hp.n_layer || s->last_t == 0)
        return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: no layer %d output", layer);
    const size_t e = s->m->hp.n_embd;
    return sift_tensor_read(s->layer_out[layer], (size_t)(s->last_t - 1) * e * sizeof(float), out, e * sizeof(float));
}

sift_status sift_session_eval(sift_session *s, const int32_t *tokens, size_t n, float *logits)
{
    if (!s || (!tokens && n)) return sift_set_error(SIFT_E_INVALID, "sift_session_eval: null argument");
    if (n == 0) return SIFT_OK;
    if ((int64_t)n > s->cfg.n_ctx - s->pos)
        return sift_set_error(SIFT_E_LIMIT, "sift_session_eval: %zu more tokens do not fit: %lld of %lld cache positions used",
                              n, (long long)s->pos, (long long)s->cfg.n_ctx);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= (int32_t)s->m->hp.n_vocab)
            return sift_set_error(SIFT_E_INVALID, "sift_session_eval: token %d outside the vocabulary of %u", tokens[i],
                                  s->m->hp.n_vocab);
    if (n == 1) return run_step(s, tokens, 1, false, logits);
    for (size_t done = 0; done < n;) {
        const int64_t t = (int64_t)(n - done) < s->cfg.chunk ? (int64_t)(n - done) : s->cfg.chunk;
        TRY(run_step(s, tokens + done, t, true, done + (size_t)t == n ? logits : NULL));
        done += (size_t)t;
        if (s->cfg.progress) s->cfg.progress(s->cfg.progress_user, (int64_t)done, (int64_t)n);
    }
    return SIFT_OK;
}
