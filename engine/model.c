/* Llama-family models from GGUF (llama, qwen2, mistral): loading the weights onto the device,
 * the model's facts, and its tokenizer. Sessions (session.c) run them. */
#include "model.h"
#include "quant.h"
#include "session.h" /* the session's rules, for sift_model_estimate */
#include "tokenizer.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sift_status dtype_of(const sift_gguf_tensor *t, sift_dtype *out)
{
    switch (t->type) {
    case SIFT_GGUF_TENSOR_F32: *out = SIFT_F32; return SIFT_OK;
    case SIFT_GGUF_TENSOR_F16: *out = SIFT_F16; return SIFT_OK;
    case SIFT_GGUF_TENSOR_BF16: *out = SIFT_BF16; return SIFT_OK;
    case SIFT_GGUF_TENSOR_Q8_0: *out = SIFT_Q8_0; return SIFT_OK;
    case SIFT_GGUF_TENSOR_Q4_0: *out = SIFT_Q4_0; return SIFT_OK;
    case SIFT_GGUF_TENSOR_Q4_K: *out = SIFT_Q4_K; return SIFT_OK;
    case SIFT_GGUF_TENSOR_Q5_K: *out = SIFT_Q5_K; return SIFT_OK;
    case SIFT_GGUF_TENSOR_Q6_K: *out = SIFT_Q6_K; return SIFT_OK;
    }
    return sift_set_error(SIFT_E_DTYPE, "tensor '%.*s' has type %u, which sift does not run", (int)t->name.len,
                          t->name.ptr, (unsigned)t->type);
}

/* Counts bytes of the file's tensors as uploaded, and asks the progress callback whether to go on. */
static sift_status loaded(sift_model *m, uint64_t bytes)
{
    m->load_done += bytes;
    if (!m->load.progress || !m->load.progress(m->load.progress_user, m->load_done, m->load_total)) return SIFT_OK;
    return sift_set_error(SIFT_E_CANCELLED, "sift_model_load: stopped by the progress callback after %llu of %llu bytes",
                          (unsigned long long)m->load_done, (unsigned long long)m->load_total);
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
    if (m->dry_run) { /* sift_model_estimate: the bytes it would take */
        size_t bytes = (size_t)cols * sizeof(float);
        if (!vector) TRY(sift_shape_bytes(dt, 2, (int64_t[]){(int64_t)rows, (int64_t)cols}, &bytes));
        m->weight_bytes += bytes;
        return SIFT_OK;
    }
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
    return loaded(m, t->nbytes);
}

/* Matrices name[0 .. n) of layer l ([rows[i]][cols] each) as one [sum rows][cols] tensor *fused,
 * each part a view of its rows (parts[i]), where all are present, 2-D, of those shapes and of one
 * type. Otherwise nothing is made (*fused NULL) and upload_tensor loads the parts, with its checks
 * and messages. */
static sift_status upload_fused(sift_model *m, uint32_t l, int n, const char *const *suffix, const int64_t *rows,
                                int64_t cols, sift_tensor **fused, sift_tensor **const *parts)
{
    *fused = NULL;
    if (m->dry_run) return SIFT_OK; /* the parts take the bytes the fused matrix would */
    const sift_gguf_tensor *gt[3];
    char name[3][96];
    int64_t total = 0;
    sift_dtype dt = SIFT_F32;
    for (int i = 0; i < n; i++) {
        snprintf(name[i], sizeof name[i], "blk.%u.%s", l, suffix[i]);
        gt[i] = sift_gguf_find_tensor(m->file, name[i]);
        sift_dtype di = SIFT_F32;
        if (!gt[i] || gt[i]->n_dims != 2 || gt[i]->dims[0] != (uint64_t)cols || gt[i]->dims[1] != (uint64_t)rows[i] ||
            dtype_of(gt[i], &di) != SIFT_OK || (i > 0 && di != dt))
            return SIFT_OK; /* (an unsupported type: upload_tensor says so) */
        dt = di;
        total += rows[i];
    }
    TRY(sift_tensor_create(m->ctx, dt, 2, (int64_t[]){total, cols}, fused));
    char fused_name[96];
    snprintf(fused_name, sizeof fused_name, "blk.%u.%s", l, n == 3 ? "attn_qkv" : "ffn_gate_up");
    sift_tensor_set_name(*fused, fused_name);
    sift_status s = SIFT_OK;
    size_t off = 0;
    for (int i = 0; i < n && s == SIFT_OK; i++) {
        s = sift_tensor_view(*fused, dt, 2, (int64_t[]){rows[i], cols}, off, parts[i]);
        if (s == SIFT_OK) s = sift_tensor_write(*parts[i], 0, gt[i]->data, (size_t)gt[i]->nbytes);
        if (s == SIFT_OK) sift_tensor_set_name(*parts[i], name[i]);
        if (s == SIFT_OK) off += sift_tensor_nbytes(*parts[i]);
        if (s == SIFT_OK) s = loaded(m, gt[i]->nbytes);
    }
    if (s == SIFT_OK) m->weight_bytes += sift_tensor_nbytes(*fused);
    return s;
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
    if (half < 1 || half > SIFT_MAX_HEAD_DIM / 2)
        return sift_set_error(SIFT_E_UNSUPPORTED, "model: rope over %u dimensions", hp->rope_dim);
    float *f = malloc((size_t)half * sizeof *f), freq[SIFT_MAX_HEAD_DIM / 2];
    if (!f) return sift_set_error(SIFT_E_NOMEM, "model: out of memory");
    sift_rope_freqs(&(sift_rope_params){.n_rot = (int)hp->rope_dim, .base = hp->rope_freq_base}, freq);
    for (int i = 0; i < half; i++) {
        f[i] = hp->rope_scaling_factor;
        if (hp->rope_scaling == SIFT_GGUF_ROPE_SCALING_LLAMA3 && hp->rope_original_ctx > 0) {
            const float wavelen = 6.28318531f / freq[i], orig = (float)hp->rope_original_ctx;
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
    m->weight_bytes += (size_t)half * sizeof *f;
    sift_status s = SIFT_OK;
    if (!m->dry_run) s = sift_tensor_create(m->ctx, SIFT_F32, 1, (int64_t[]){half}, &m->rope_factors);
    if (s == SIFT_OK && !m->dry_run) s = sift_tensor_write(m->rope_factors, 0, f, (size_t)half * sizeof *f);
    free(f);
    return s;
}

static void model_free(sift_model *m)
{
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
    if (m->ctx) sift_context_release(m->ctx);
    free(m->chat_template);
    free(m);
}

void sift_model_retain(sift_model *m) { atomic_fetch_add(&m->refs, 1); }

void sift_model_release(sift_model *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1) model_free(m);
}

void sift_model_destroy(sift_model *m) { sift_model_release(m); }

/* tokenizer.chat_template as a C string (a template with a NUL byte in it is no template sift
 * can recognise: left out). */
static sift_status copy_chat_template(sift_model *m)
{
    const char *key = "tokenizer.chat_template";
    if (!sift_gguf_has(m->file, key)) return SIFT_OK;
    sift_gguf_str tmpl;
    sift_status s = sift_gguf_get_string(m->file, key, &tmpl);
    if (s != SIFT_OK) return s;
    if (memchr(tmpl.ptr, 0, (size_t)tmpl.len)) return SIFT_OK;
    m->chat_template = malloc((size_t)tmpl.len + 1);
    if (!m->chat_template) return sift_set_error(SIFT_E_NOMEM, "sift_model_load: out of memory for the chat template");
    memcpy(m->chat_template, tmpl.ptr, (size_t)tmpl.len);
    m->chat_template[tmpl.len] = 0;
    return SIFT_OK;
}

sift_model_load_config sift_model_load_config_default(void)
{
    return (sift_model_load_config){.struct_size = sizeof(sift_model_load_config)};
}

/* Where a model's GGUF comes from: a path, a caller's buffer, or a region of an open file. */
typedef struct model_source {
    const char *path;                   /* a path, or NULL */
    const void *data;                   /* else a buffer of size bytes (data NULL: a file descriptor) */
    size_t size;
    int fd;                             /* else size bytes of fd from offset on (0: to the end) */
    uint64_t offset;
} model_source;

static sift_status open_source(const model_source *src, sift_gguf **out)
{
    if (src->path) return sift_gguf_open_file(src->path, out);
    if (src->data) return sift_gguf_open_memory(src->data, src->size, NULL, out);
    return sift_gguf_open_fd(src->fd, src->offset, src->size, NULL, out);
}

static sift_status load_model(sift_context *ctx, const model_source *src, const sift_model_load_config *cfg, bool dry_run,
                              sift_model **out);

sift_status sift_model_load(sift_context *ctx, const char *path, sift_model **out)
{
    return sift_model_load_with(ctx, path, NULL, out);
}

sift_status sift_model_load_with(sift_context *ctx, const char *path, const sift_model_load_config *cfg, sift_model **out)
{
    if (!path && out) *out = NULL;
    if (!path) return sift_set_error(SIFT_E_INVALID, "sift_model_load: path is NULL");
    return load_model(ctx, &(model_source){.path = path}, cfg, false, out);
}

sift_status sift_model_load_memory(sift_context *ctx, const void *data, size_t size, const sift_model_load_config *cfg,
                                   sift_model **out)
{
    if (!data && out) *out = NULL;
    if (!data) return sift_set_error(SIFT_E_INVALID, "sift_model_load_memory: data is NULL");
    return load_model(ctx, &(model_source){.data = data, .size = size}, cfg, false, out);
}

sift_status sift_model_load_fd(sift_context *ctx, int fd, uint64_t offset, uint64_t size, const sift_model_load_config *cfg,
                               sift_model **out)
{
    if (size > SIZE_MAX) {
        if (out) *out = NULL;
        return sift_set_error(SIFT_E_INVALID, "sift_model_load_fd: %llu bytes", (unsigned long long)size);
    }
    return load_model(ctx, &(model_source){.fd = fd, .offset = offset, .size = (size_t)size}, cfg, false, out);
}

/* dry_run: everything but the device's part (sift_model_estimate): the file read and checked, the
 * tokenizer made, and weight_bytes counted without a tensor created. */
static sift_status load_model(sift_context *ctx, const model_source *src, const sift_model_load_config *cfg, bool dry_run,
                              sift_model **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_model_load: out is NULL");
    *out = NULL;
    if (!ctx) return sift_set_error(SIFT_E_INVALID, "sift_model_load: context is NULL");
    sift_model_load_config load = sift_model_load_config_default();
    if (cfg) TRY(sift_config_read(cfg, &load, sizeof load, sizeof load, "sift_model_load_with"));
    sift_model *m = calloc(1, sizeof *m);
    if (!m) return sift_set_error(SIFT_E_NOMEM, "sift_model_load: out of memory");
    atomic_init(&m->refs, 1);
    m->ctx = ctx;
    m->load = load;
    m->dry_run = dry_run;
    sift_context_retain(ctx);
    sift_status s = open_source(src, &m->file);
    for (uint64_t i = 0; s == SIFT_OK && i < sift_gguf_tensor_count(m->file); i++)
        m->load_total += sift_gguf_tensor_at(m->file, i)->nbytes;
    if (s == SIFT_OK) s = sift_gguf_read_hparams(m->file, &m->hp);
    if (s == SIFT_OK) s = sift_tokenizer_create(m->file, &m->tok);
    if (s == SIFT_OK) s = copy_chat_template(m);
    const sift_gguf_hparams *hp = &m->hp;
    if (s == SIFT_OK && (hp->head_dim % 8 != 0 || hp->head_dim > SIFT_MAX_HEAD_DIM))
        s = sift_set_error(SIFT_E_UNSUPPORTED, "%s: head dimension %u is not supported (a multiple of 8, at most %d)",
                           sift_gguf_label(m->file), hp->head_dim, SIFT_MAX_HEAD_DIM);
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
        LOAD(bq, "attn_q.bias", qd, 0, true)
        LOAD(bk, "attn_k.bias", kvd, 0, true)
        LOAD(bv, "attn_v.bias", kvd, 0, true)
        if (s == SIFT_OK && !w->bq && !w->bk && !w->bv)
            s = upload_fused(m, l, 3, (const char *[]){"attn_q.weight", "attn_k.weight", "attn_v.weight"},
                             (int64_t[]){qd, kvd, kvd}, e, &w->wqkv, (sift_tensor **[]){&w->wq, &w->wk, &w->wv});
        if (!w->wqkv) {
            LOAD(wq, "attn_q.weight", qd, e, false)
            LOAD(wk, "attn_k.weight", kvd, e, false)
            LOAD(wv, "attn_v.weight", kvd, e, false)
        }
        LOAD(wo, "attn_output.weight", e, qd, false)
        LOAD(ffn_norm, "ffn_norm.weight", e, 0, false)
        if (s == SIFT_OK)
            s = upload_fused(m, l, 2, (const char *[]){"ffn_gate.weight", "ffn_up.weight"}, (int64_t[]){hp->n_ff, hp->n_ff},
                             e, &w->w_gate_up, (sift_tensor **[]){&w->w_gate, &w->w_up});
        if (!w->w_gate_up) {
            LOAD(w_gate, "ffn_gate.weight", hp->n_ff, e, false)
            LOAD(w_up, "ffn_up.weight", hp->n_ff, e, false)
        }
        LOAD(w_down, "ffn_down.weight", e, hp->n_ff, false)
#undef LOAD
    }
    if (s == SIFT_OK) s = loaded(m, m->load_total - m->load_done); /* done = total (with the tensors sift does not read) */
    m->load.progress = NULL; /* the load is over */
    if (s != SIFT_OK) {
        sift_model_destroy(m);
        return s;
    }
    if (!dry_run)
        sift_log_to(ctx, SIFT_LOG_INFO, "model %s: %s, %u layers, %u heads (%u KV) of %u, vocabulary %u, %.1f MiB of weights on %s",
                    sift_gguf_label(m->file), hp->arch_name, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_vocab,
                    (double)m->weight_bytes / (1024.0 * 1024.0), sift_context_device_name(ctx));
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
    out->add_bos = sift_tokenizer_adds_bos(m->tok) && out->bos >= 0;
}

sift_status sift_model_tokenize(const sift_model *m, const char *text, size_t len, int add_bos, int32_t *ids, size_t cap,
                                size_t *n)
{
    if (!m || (!text && len) || !n) return sift_set_error(SIFT_E_INVALID, "sift_model_tokenize: null argument");
    return sift_tokenizer_encode(m->tok, text ? text : "", len, add_bos != 0, ids, cap, n);
}

sift_status sift_model_tokenize_special(const sift_model *m, const char *text, size_t len, int add_bos, int parse_special,
                                        int32_t *ids, size_t cap, size_t *n)
{
    if (!m || (!text && len) || !n) return sift_set_error(SIFT_E_INVALID, "sift_model_tokenize_special: null argument");
    return sift_tokenizer_encode_special(m->tok, text ? text : "", len, add_bos != 0, parse_special != 0, ids, cap, n);
}

int sift_model_token_is_eog(const sift_model *m, int32_t id) { return m && sift_tokenizer_is_eog(m->tok, id); }

const char *sift_model_chat_template(const sift_model *m) { return m ? m->chat_template : NULL; }

sift_status sift_model_token_piece(const sift_model *m, int32_t id, char *buf, size_t cap, size_t *len)
{
    if (!m || !len) return sift_set_error(SIFT_E_INVALID, "sift_model_token_piece: null argument");
    return sift_tokenizer_token_bytes(m->tok, id, buf, cap, len);
}


/* ---- memory planning (sift_model_estimate) ------------------------------------------------------
 * What sift_model_load, sift_predictor_load and sift_session_create will allocate, worked out from
 * the files' headers and the session's config without creating a tensor: the weights by a dry run
 * of the loader itself, the rest by the rules session.c, kv_cache.c, attention.c and graph_pool.c
 * allocate by. The estimate test holds the figures to what a real load and session allocate. */

static uint64_t mul_sat(uint64_t a, uint64_t b) { return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t mul4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) { return mul_sat(mul_sat(a, b), mul_sat(c, d)); }

/* What the context's graph pool allocates for a graph intermediate of `bytes` (graph_pool.c: rounded
 * up to an eighth of its power of two, at least 256; an empty tensor takes nothing). */
static uint64_t pool_bytes(uint64_t bytes)
{
    if (bytes == 0) return 0;
    uint64_t top = 256;
    while (top <= bytes / 2) top *= 2;
    const uint64_t step = top / 8 > 256 ? top / 8 : 256;
    return (bytes + step - 1) / step * step;
}

/* The facts of a predictor that size a session: from the loaded one the config names, else from a
 * predictor file's header (its weights as predictor.c uploads them: f32, the key projections made
 * block-diagonal). */
typedef struct predictor_size {
    bool present;
    int64_t key_dim, stride, hidden;
    uint64_t bytes;
} predictor_size;

static sift_status predictor_size_of(const sift_model *m, const sift_session_config *c, const char *path,
                                     predictor_size *out)
{
    *out = (predictor_size){0};
    if (c->predictor) {
        const sift_predictor *p = c->predictor;
        *out = (predictor_size){true, p->key_dim, p->stride, p->hidden, p->bytes};
        return SIFT_OK;
    }
    if (!path) return SIFT_OK;
    sift_gguf *f = NULL;
    TRY(sift_gguf_open_file(path, &f));
    uint32_t v[3] = {0};
    const char *keys[3] = {"sift-butler.key_dim", "sift-butler.producer_stride", "sift-butler.hidden_length"};
    sift_status s = SIFT_OK;
    if (!sift_gguf_string_is(f, "general.architecture", "sift-butler"))
        s = sift_set_error(SIFT_E_INVALID, "%s: not a TokenButler predictor", sift_gguf_label(f));
    for (int i = 0; s == SIFT_OK && i < 3; i++)
        if (sift_gguf_get_u32(f, keys[i], &v[i]) != SIFT_OK)
            s = sift_set_error(SIFT_E_INVALID, "%s: key '%s' is missing or not a count", sift_gguf_label(f), keys[i]);
    const sift_gguf_hparams *hp = &m->hp;
    if (s == SIFT_OK && (v[0] < 8 || v[0] % 8 || v[0] > SIFT_MAX_HEAD_DIM || v[1] < 1 || v[1] > hp->n_layer || v[2] < 1 ||
                         v[2] > (1u << 16) || hp->n_layer < 2))
        s = sift_set_error(SIFT_E_INVALID, "%s: key dimension %u, producer stride %u, hidden width %u for %u layers",
                           sift_gguf_label(f), v[0], v[1], v[2], hp->n_layer);
    sift_gguf_close(f);
    TRY(s);
    const uint64_t e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, dk = v[0], stride = v[1],
                   hidden = v[2], n_prod = (hp->n_layer - 2) / stride + 1;
    /* each producer: LayerNorm's weight and bias, fc1 [hidden][E], fc2 [stride Hq d'][hidden];
     * each layer >= 1: its key projection [Hkv d'][Hkv D] */
    const uint64_t producer = add_sat(add_sat(2 * e, mul_sat(hidden, e)), mul4(stride, hq, dk, hidden));
    const uint64_t floats = add_sat(mul_sat(n_prod, producer), mul4(hp->n_layer - 1, hkv * dk, hkv, d));
    *out = (predictor_size){true, dk, stride, hidden, mul_sat(floats, sizeof(float))};
    return SIFT_OK;
}

/* The session config as sift_session_create completes and checks it. */
static sift_status complete_session_config(const sift_model *m, const sift_session_config *cfg, const predictor_size *pr,
                                           sift_session_config *c, const char *fn)
{
    *c = sift_session_config_default();
    if (cfg) TRY(sift_config_read(cfg, c, offsetof(sift_session_config, should_stop), sizeof *c, fn));
    if (c->n_ctx == 0) c->n_ctx = m->hp.n_ctx_train;
    if (c->chunk == 0) c->chunk = 512;
    if (c->n_seq == 0) c->n_seq = 1;
    if (c->page_size == 0) c->page_size = 256;
    if (c->n_ctx < 1 || c->n_ctx > INT32_MAX) return sift_set_error(SIFT_E_SHAPE, "%s: context of %lld tokens", fn, (long long)c->n_ctx);
    if (c->chunk < 1 || c->chunk > 65536) return sift_set_error(SIFT_E_SHAPE, "%s: chunk %lld", fn, (long long)c->chunk);
    if (c->n_seq < 1 || c->n_seq > c->chunk)
        return sift_set_error(SIFT_E_SHAPE, "%s: %d sequences (1 .. chunk = %lld)", fn, c->n_seq, (long long)c->chunk);
    if (c->page_size < 1 || (c->page_size & (c->page_size - 1)) != 0 || c->page_size > (1 << 20))
        return sift_set_error(SIFT_E_SHAPE, "%s: page size %lld is not a power of two up to 2^20", fn, (long long)c->page_size);
    if (c->kv_type != SIFT_F16 && c->kv_type != SIFT_F32)
        return sift_set_error(SIFT_E_DTYPE, "%s: KV cache type %s (f16 or f32)", fn, sift_dtype_name(c->kv_type));
    if ((int)c->policy < 0 || c->policy >= SIFT_POLICY_COUNT)
        return sift_set_error(SIFT_E_INVALID, "%s: unknown policy %d", fn, (int)c->policy);
    if (c->sink < 0 || c->window < 0 || c->budget < 0 || c->sink > INT32_MAX || c->window > INT32_MAX ||
        c->budget > INT32_MAX || c->sink + c->window + c->budget > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: sink, window and budget must be in 0 .. 2^31 - 1, and their sum", fn);
    if (c->policy == SIFT_POLICY_BUTLER && !pr->present)
        return sift_set_error(SIFT_E_INVALID, "%s: the butler policy needs a predictor (its file, or the config's)", fn);
    if (pr->present && c->predictor_keys != SIFT_F16 && c->predictor_keys != SIFT_F32 && c->predictor_keys != SIFT_I8)
        return sift_set_error(SIFT_E_DTYPE, "%s: projected keys of type %s (f16, f32 or i8)", fn, sift_dtype_name(c->predictor_keys));
    const int64_t pages_per_seq = (c->n_ctx + c->page_size - 1) / c->page_size;
    if (c->pool_tokens == 0) c->pool_tokens = pages_per_seq * c->page_size * c->n_seq;
    if (c->pool_tokens < 1 || c->pool_tokens > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: a KV pool of %lld tokens", fn, (long long)c->pool_tokens);
    if (c->kv_device_tokens < 0)
        return sift_set_error(SIFT_E_INVALID, "%s: KV offload with a device pool of %lld tokens", fn, (long long)c->kv_device_tokens);
    return SIFT_OK;
}

/* The KV pools (kv_cache.c) with dev_pages of pool_pages on the device: the bytes on the device,
 * those in host memory, and those that move with the device's pages (K and V of every layer that
 * offloads: not K under kv_offload_v_only, not TokenButler's dense layer 0). */
typedef struct kv_bytes {
    uint64_t device, host, per_device_page;
} kv_bytes;

static kv_bytes kv_pools(const sift_model *m, const sift_session_config *c, const predictor_size *pr, int64_t pool_pages,
                         int64_t dev_pages)
{
    const sift_gguf_hparams *hp = &m->hp;
    const uint64_t page = mul4(hp->n_head_kv, (uint64_t)c->page_size, hp->head_dim, sift_dtype_size(c->kv_type));
    const bool offloaded = dev_pages < pool_pages;
    kv_bytes b = {0};
    const kv_cache_config kc = {.resident_layers = c->policy == SIFT_POLICY_BUTLER, .offload_v_only = c->kv_offload_v_only};
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const int movable = sift_kv_cache_moves(&kc, l, KV_K) + sift_kv_cache_moves(&kc, l, KV_V);
        const int moves = offloaded ? movable : 0;
        b.device = add_sat(b.device, mul_sat(page, (uint64_t)(moves * dev_pages + (2 - moves) * pool_pages)));
        b.host = add_sat(b.host, mul_sat(page, (uint64_t)(moves * (pool_pages - dev_pages))));
        b.per_device_page = add_sat(b.per_device_page, mul_sat(page, (uint64_t)movable));
    }
    if (pr->present) { /* projected keys of layers >= 1, every page on the device */
        const uint64_t row = sift_key_row_bytes(c->predictor_keys, pr->key_dim);
        b.device = add_sat(b.device, mul4(hp->n_layer - 1, hp->n_head_kv, mul_sat((uint64_t)pool_pages, (uint64_t)c->page_size), row));
    }
    return b;
}

/* The intermediates one sequence's attention takes from the graph pool in one layer of a step at
 * context n (attention.c): decode under the policy, or a sparse prefill chunk after n positions. */
static uint64_t attention_intermediates(const sift_model *m, const sift_session_config *c, uint32_t l, int64_t n,
                                        bool prefill, bool offloaded)
{
    const uint64_t hq = m->hp.n_head, hkv = m->hp.n_head_kv, q_bytes = hq * m->hp.head_dim * sizeof(float);
    const sift_select_params sel = {.n_ctx = n, .sink = c->sink, .window = c->window, .budget = c->budget};
    const uint64_t cand = (uint64_t)sift_select_candidates(&sel), count = (uint64_t)sift_select_count(&sel);
    const uint64_t f32 = sizeof(float), extrapolated = c->extrapolate ? pool_bytes(q_bytes) : 0;
    if (prefill) /* the chunk's mean query, its votes and scores, the chosen set */
        return c->sparse_prefill && cand > (uint64_t)c->budget
                   ? pool_bytes(q_bytes) + pool_bytes(cand * f32) + pool_bytes(hq * cand * f32) + pool_bytes(count * f32)
                   : 0;
    switch (c->policy) {
    case SIFT_POLICY_TOKENSELECT: { /* scores, votes, and the indices unless the Selection Cache keeps them */
        const bool kept = c->sel_cache <= 1.0f && cand > (uint64_t)c->budget;
        return (kept ? 0 : pool_bytes(count * f32)) + pool_bytes(cand * f32) + pool_bytes(hq * cand * f32) + 2 * extrapolated;
    }
    case SIFT_POLICY_STREAMING: {
        const sift_select_params st = {.n_ctx = n, .sink = c->sink, .window = c->window + c->budget, .budget = 0};
        return pool_bytes((uint64_t)sift_select_count(&st) * f32) + extrapolated;
    }
    case SIFT_POLICY_BUTLER: { /* layers >= 1: the votes, the chosen lists before the neighbours, the staged rows' ranks
                                * and, where the query decides the reuse, the window's positions [1][W] */
        if (l == 0) return 0;
        const sift_select_layout lay = sift_select_layout_of(&sel);
        const uint64_t lists = hkv * (uint64_t)lay.count * f32;
        const bool staged = sift_butler_staging_on(c, offloaded);
        return pool_bytes(hkv * cand * f32) + (c->neighbor_fetch ? pool_bytes(lists) : 0) +
               (staged ? pool_bytes(lists) + pool_bytes((uint64_t)lay.win_count * f32) : 0);
    }
    default: return 0; /* dense attends the cache; the host policies' lists live in the session */
    }
}

/* What the graph pool holds at most for one sequence's steps. A step's graph takes its
 * intermediates from the pool; buffers a longer context has outgrown stay there until
 * POOL_EVICT_AFTER more buffers have been given back (graph_pool.c's EVICT_AFTER). So decode holds
 * the full context's intermediates and the generation before them, and sparse prefill those of its
 * last chunks, as many as are given back within that window. */
enum { POOL_EVICT_AFTER = 512 };

static uint64_t pool_peak(const sift_model *m, const sift_session_config *c, bool offloaded)
{
    uint64_t decode = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        decode = add_sat(decode, attention_intermediates(m, c, l, c->n_ctx, false, offloaded));
    uint64_t prefill = 0;
    if (c->sparse_prefill) {
        const int64_t per_chunk = 4 * (int64_t)m->hp.n_layer; /* the mean query, votes, scores, indices */
        const int64_t chunks = (c->n_ctx + c->chunk - 1) / c->chunk, kept = 1 + POOL_EVICT_AFTER / per_chunk;
        for (int64_t i = 0; i < chunks && i < kept; i++)
            for (uint32_t l = 0; l < m->hp.n_layer; l++)
                prefill = add_sat(prefill, attention_intermediates(m, c, l, c->n_ctx - 1 - i * c->chunk, true, offloaded));
    }
    return add_sat(mul_sat(2, decode), prefill);
}

/* The session's tensors beside the KV pools (session.c), and what the graph pool holds for its
 * sequences' steps; offloaded: some of the pool's pages are in host memory. */
static uint64_t session_scratch(const sift_model *m, const sift_session_config *c, const predictor_size *pr, bool offloaded)
{
    const sift_gguf_hparams *hp = &m->hp;
    const uint64_t t = (uint64_t)c->chunk, e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim,
                   f = hp->n_ff, f32 = sizeof(float), layers = hp->n_layer, seqs = (uint64_t)c->n_seq;
    /* activations [chunk][width]: five of E, three each of Hq D, Hkv D and F */
    uint64_t b = mul4(t, 5 * e + 3 * hq * d + 3 * hkv * d + 3 * f, f32, 1);
    if (c->keep_layer_outputs) b = add_sat(b, mul4(layers, t, e, f32));
    if (pr->present) /* the key projection, the normed stream, fc1, SiLU, the producer's queries */
        b = add_sat(b, mul4(t, hkv * (uint64_t)pr->key_dim + e + 2 * (uint64_t)pr->hidden + (uint64_t)(pr->stride * pr->key_dim) * hq, f32, 1));
    /* ids, the one-row fused products, the last rows normed, the logits */
    b = add_sat(b, (t + (hq + 2 * hkv) * d + 2 * f + (hq + hkv) * d + seqs * e + seqs * hp->n_vocab) * f32);
    /* each sequence: its page table and its policy's state */
    const uint64_t max_count = (uint64_t)(c->sink + c->window + c->budget);
    uint64_t seq = (uint64_t)((c->n_ctx + c->page_size - 1) / c->page_size) * f32;
    if (c->policy == SIFT_POLICY_TOKENSELECT) {
        seq += layers * SIFT_SELECT_WARM_WORDS * f32;
        if (c->sel_cache <= 1.0f) seq += layers * ((hq * d + SIFT_SEL_CACHE_EXTRA) + max_count) * f32;
    } else if (c->policy == SIFT_POLICY_BUTLER) {
        const uint64_t lists = max_count + (c->neighbor_fetch ? (uint64_t)c->budget : 0);
        seq += (layers - 1) * hkv * (SIFT_SELECT_WARM_WORDS + lists) * f32;
        seq += (layers - 1) * (hq * (uint64_t)pr->key_dim + SIFT_SEL_CACHE_EXTRA) * f32; /* the check on q' */
        /* the staged K and V rows of the kept lists [Hkv][S + k + W][D] (session.c), the same
         * whether the interval is fixed or decided by the query (set on the session later) */
        if (sift_butler_staging_on(c, offloaded))
            seq += (layers - 1) * 2 * hkv * max_count * d * sift_dtype_size(c->kv_type);
    } else if (sift_host_policy(c->policy)) {
        seq += hkv * max_count * f32;
    }
    b = add_sat(b, mul_sat(seqs, seq));
    return add_sat(b, mul_sat(seqs, pool_peak(m, c, offloaded)));
}

sift_status sift_model_estimate(sift_context *ctx, const char *model_path, const char *predictor_path,
                                const sift_session_config *cfg, sift_memory_estimate *out)
{
    const char *fn = "sift_model_estimate";
    if (!out) return sift_set_error(SIFT_E_INVALID, "%s: out is NULL", fn);
    memset(out, 0, sizeof *out);
    if (!ctx || !model_path) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    sift_model *m = NULL;
    TRY(load_model(ctx, &(model_source){.path = model_path}, NULL, true, &m));
    predictor_size pr;
    sift_session_config c;
    sift_status s = predictor_size_of(m, cfg ? cfg : &(sift_session_config){0}, predictor_path, &pr);
    if (s == SIFT_OK) s = complete_session_config(m, cfg, &pr, &c, fn);
    if (s != SIFT_OK) {
        sift_model_destroy(m);
        return s;
    }
    const int64_t pool_pages = (c.pool_tokens + c.page_size - 1) / c.page_size;
    int64_t dev_pages = pool_pages;
    if (c.kv_device_tokens > 0 && (c.kv_device_tokens + c.page_size - 1) / c.page_size < pool_pages)
        dev_pages = (c.kv_device_tokens + c.page_size - 1) / c.page_size;
    const kv_bytes kv = kv_pools(m, &c, &pr, pool_pages, dev_pages);
    out->weights = m->weight_bytes;
    out->predictor = pr.bytes;
    out->kv = kv.device;
    out->kv_host = kv.host;
    out->scratch = session_scratch(m, &c, &pr, dev_pages < pool_pages);
    out->device_total = add_sat(add_sat(out->weights, out->predictor), add_sat(out->kv, out->scratch));
    out->device_free = sift_context_free_memory(ctx);
    /* on the CPU backend the host pool is in the same memory as the rest */
    const bool host_is_device = sift_context_backend(ctx) == SIFT_BACKEND_CPU;
    const uint64_t need = add_sat(out->device_total, host_is_device ? out->kv_host : 0);
    out->fits = out->device_free == 0 ? -1 : need <= out->device_free;
    if (out->fits == 0 && !host_is_device && kv.per_device_page > 0) {
        /* the device pages that fit beside what does not move, at least the sink's and two more */
        const uint64_t fixed = need - mul_sat(kv.per_device_page, (uint64_t)dev_pages);
        const int64_t min_pages = (c.sink + c.page_size - 1) / c.page_size + 2;
        const uint64_t room = out->device_free > fixed ? (out->device_free - fixed) / kv.per_device_page : 0;
        const int64_t fit_pages = room < (uint64_t)pool_pages ? (int64_t)room : pool_pages - 1;
        if (fit_pages >= min_pages) out->kv_device_tokens = fit_pages * c.page_size;
    }
    sift_model_destroy(m);
    return SIFT_OK;
}
