/* Llama-family models from GGUF (llama, qwen2, mistral): loading the weights onto the device,
 * the model's facts, and its tokenizer. Sessions (session.c) run them. */
#include "model.h"
#include "quant.h"
#include "tokenizer.h"

#include <math.h>
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
    sift_status s = sift_tensor_create(m->ctx, SIFT_F32, 1, (int64_t[]){half}, &m->rope_factors);
    if (s == SIFT_OK) s = sift_tensor_write(m->rope_factors, 0, f, (size_t)half * sizeof *f);
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

static sift_status load_model(sift_context *ctx, const model_source *src, const sift_model_load_config *cfg,
                              sift_model **out);

sift_status sift_model_load(sift_context *ctx, const char *path, sift_model **out)
{
    return sift_model_load_with(ctx, path, NULL, out);
}

sift_status sift_model_load_with(sift_context *ctx, const char *path, const sift_model_load_config *cfg, sift_model **out)
{
    if (!path && out) *out = NULL;
    if (!path) return sift_set_error(SIFT_E_INVALID, "sift_model_load: path is NULL");
    return load_model(ctx, &(model_source){.path = path}, cfg, out);
}

sift_status sift_model_load_memory(sift_context *ctx, const void *data, size_t size, const sift_model_load_config *cfg,
                                   sift_model **out)
{
    if (!data && out) *out = NULL;
    if (!data) return sift_set_error(SIFT_E_INVALID, "sift_model_load_memory: data is NULL");
    return load_model(ctx, &(model_source){.data = data, .size = size}, cfg, out);
}

sift_status sift_model_load_fd(sift_context *ctx, int fd, uint64_t offset, uint64_t size, const sift_model_load_config *cfg,
                               sift_model **out)
{
    if (size > SIZE_MAX) {
        if (out) *out = NULL;
        return sift_set_error(SIFT_E_INVALID, "sift_model_load_fd: %llu bytes", (unsigned long long)size);
    }
    return load_model(ctx, &(model_source){.fd = fd, .offset = offset, .size = (size_t)size}, cfg, out);
}

static sift_status load_model(sift_context *ctx, const model_source *src, const sift_model_load_config *cfg,
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

