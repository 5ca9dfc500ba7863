/* TokenButler's predictor (docs/algorithms.md): loading it from its GGUF companion file, checked
 * against the base model, or making a random one for benchmarks. The session runs it
 * (forward.c): after each producer layer the residual stream goes through LayerNorm -> fc1 -> SiLU
 * -> fc2 into one d'-dimensional query per (consumer layer, query head), and each consumer
 * layer's keys are projected to d' dimensions when they are cached. */
#include "predictor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "sift-butler"

enum { FP_BLOCKS = 64, FP_BLOCK_BYTES = 64 }; /* sift_model_fingerprint_blocks: 4 KiB of each tensor */

/* FNV-1a 64 of n bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *data, uint64_t n)
{
    const uint8_t *b = data;
    for (uint64_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t sift_model_fingerprint(const sift_model *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < sift_gguf_tensor_count(m->file); i++) {
        const sift_gguf_tensor *t = sift_gguf_tensor_at(m->file, i);
        h = fnv1a(h, t->name.ptr, t->name.len);
        h = fnv1a(h, t->data, t->nbytes < 64 ? t->nbytes : 64);
    }
    return h;
}

uint64_t sift_model_fingerprint_blocks(const sift_model *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < sift_gguf_tensor_count(m->file); i++) {
        const sift_gguf_tensor *t = sift_gguf_tensor_at(m->file, i);
        const uint8_t *data = t->data;
        uint8_t size[8];
        for (int k = 0; k < 8; k++) size[k] = (uint8_t)(t->nbytes >> (8 * k));
        h = fnv1a(h, t->name.ptr, t->name.len);
        h = fnv1a(h, size, sizeof size);
        if (t->nbytes <= (uint64_t)FP_BLOCKS * FP_BLOCK_BYTES) {
            h = fnv1a(h, data, t->nbytes);
            continue;
        }
        /* block b starts at floor(b * span / (FP_BLOCKS - 1)): the first at 0, the last ending at
         * the tensor's end; computed as q * b + r * b / (FP_BLOCKS - 1) so that no product overflows */
        const uint64_t span = t->nbytes - FP_BLOCK_BYTES, q = span / (FP_BLOCKS - 1), r = span % (FP_BLOCKS - 1);
        for (uint64_t b = 0; b < FP_BLOCKS; b++) h = fnv1a(h, data + q * b + r * b / (FP_BLOCKS - 1), FP_BLOCK_BYTES);
    }
    return h;
}

static int64_t model_params(const sift_model *m)
{
    int64_t n = 0;
    for (uint64_t i = 0; i < sift_gguf_tensor_count(m->file); i++) n += (int64_t)sift_gguf_tensor_at(m->file, i)->n_elements;
    return n;
}

static void predictor_free(sift_predictor *p)
{
    for (int i = 0; p->prod && i < p->n_prod; i++) {
        sift_tensor_destroy(p->prod[i].norm_w);
        sift_tensor_destroy(p->prod[i].norm_b);
        sift_tensor_destroy(p->prod[i].fc1);
        sift_tensor_destroy(p->prod[i].fc2);
    }
    for (int l = 0; p->kproj && l < p->n_layers; l++) sift_tensor_destroy(p->kproj[l]);
    free(p->prod);
    free(p->kproj);
    sift_model_release(p->m);
    free(p);
}

void sift_predictor_retain(sift_predictor *p) { atomic_fetch_add(&p->refs, 1); }

void sift_predictor_release(sift_predictor *p)
{
    if (p && atomic_fetch_sub(&p->refs, 1) == 1) predictor_free(p);
}

void sift_predictor_destroy(sift_predictor *p) { sift_predictor_release(p); }

/* The parts every predictor has, sized from the model and (d', P, hidden). */
static sift_status predictor_new(sift_model *m, int key_dim, int stride, int hidden, sift_predictor **out)
{
    const sift_gguf_hparams *hp = &m->hp;
    *out = NULL;
    if (key_dim < 8 || key_dim % 8 != 0 || key_dim > SIFT_MAX_HEAD_DIM)
        return sift_set_error(SIFT_E_UNSUPPORTED, "predictor: key dimension %d (a multiple of 8 up to %d)", key_dim,
                              SIFT_MAX_HEAD_DIM);
    if (stride < 1 || stride > (int)hp->n_layer || hidden < 1 || hidden > (1 << 16))
        return sift_set_error(SIFT_E_INVALID, "predictor: producer stride %d, hidden width %d", stride, hidden);
    if (hp->n_layer < 2) return sift_set_error(SIFT_E_UNSUPPORTED, "predictor: a model of one layer has nothing to predict");
    sift_predictor *p = calloc(1, sizeof *p);
    if (!p) return sift_set_error(SIFT_E_NOMEM, "predictor: out of memory");
    atomic_init(&p->refs, 1);
    p->m = m;
    sift_model_retain(m);
    p->n_layers = (int)hp->n_layer;
    p->key_dim = key_dim;
    p->stride = stride;
    p->hidden = hidden;
    p->ln_eps = 1e-5f;
    p->n_prod = (p->n_layers - 2) / stride + 1; /* producers 0, P, 2P, ... while one has a consumer after it */
    p->prod = calloc((size_t)p->n_prod, sizeof *p->prod);
    p->kproj = calloc((size_t)p->n_layers, sizeof *p->kproj);
    if (!p->prod || !p->kproj) {
        sift_predictor_destroy(p);
        return sift_set_error(SIFT_E_NOMEM, "predictor: out of memory");
    }
    *out = p;
    return SIFT_OK;
}

/* The block-diagonal [Hkv * d'][Hkv * D] matrix of layer l's per-KV-head projections w[Hkv][d'][D]
 * (f32): one matmul then projects all of a token's keys at once. The zeros cost Hkv times the
 * projection's arithmetic, which is nothing beside the rest of a layer. */
static sift_status upload_key_projection(sift_predictor *p, int l, const float *w)
{
    const sift_gguf_hparams *hp = &p->m->hp;
    const int64_t hkv = hp->n_head_kv, d = hp->head_dim, dk = p->key_dim, rows = hkv * dk, cols = hkv * d;
    float *bd = calloc((size_t)(rows * cols), sizeof *bd);
    if (!bd) return sift_set_error(SIFT_E_NOMEM, "predictor: out of memory");
    for (int64_t g = 0; g < hkv; g++)
        for (int64_t a = 0; a < dk; a++) memcpy(bd + (g * dk + a) * cols + g * d, w + (g * dk + a) * d, (size_t)d * sizeof *bd);
    sift_status s = sift_tensor_create(p->m->ctx, SIFT_F32, 2, (int64_t[]){rows, cols}, &p->kproj[l]);
    if (s == SIFT_OK) s = sift_tensor_write(p->kproj[l], 0, bd, (size_t)(rows * cols) * sizeof *bd);
    free(bd);
    p->bytes += (size_t)(rows * cols) * sizeof(float);
    p->n_params += hkv * dk * d;
    return s;
}

static sift_status upload_f32(sift_predictor *p, int ndim, const int64_t *shape, const float *data, sift_tensor **out)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    TRY(sift_tensor_create(p->m->ctx, SIFT_F32, ndim, shape, out));
    p->bytes += (size_t)n * sizeof(float);
    p->n_params += n;
    return sift_tensor_write(*out, 0, data, (size_t)n * sizeof(float));
}

/* The end of a load: the predictor handed out, or freed after a failure. */
static sift_status finish(const sift_model *m, sift_predictor *p, sift_status s, sift_predictor **out)
{
    if (s != SIFT_OK) {
        sift_predictor_destroy(p);
        return s;
    }
    p->overhead = (double)p->n_params / (double)model_params(m);
    *out = p;
    return SIFT_OK;
}

/* ---- from a file ------------------------------------------------------------------------------- */

static sift_status need_u32(const sift_gguf *f, const char *key, uint32_t *out)
{
    char full[96];
    snprintf(full, sizeof full, ARCH ".%s", key);
    if (sift_gguf_get_u32(f, full, out) != SIFT_OK)
        return sift_set_error(SIFT_E_INVALID, "%s: key '%s' is missing or not a count", sift_gguf_label(f), full);
    return SIFT_OK;
}

/* Tensor `name` of the file as f32, checked to hold shape[ndim] (row-major; the file lists dims
 * innermost first). */
static sift_status read_tensor(const sift_gguf *f, const char *name, int ndim, const int64_t *shape, float **out)
{
    *out = NULL;
    const sift_gguf_tensor *t = sift_gguf_find_tensor(f, name);
    if (!t) return sift_set_error(SIFT_E_INVALID, "%s: tensor '%s' is missing", sift_gguf_label(f), name);
    bool ok = (int)t->n_dims == ndim;
    int64_t n = 1;
    for (int i = 0; ok && i < ndim; i++) {
        ok = t->dims[i] == (uint64_t)shape[ndim - 1 - i];
        n *= shape[i];
    }
    if (!ok) {
        char want[96];
        int at = 0;
        for (int i = 0; i < ndim; i++) at += snprintf(want + at, sizeof want - (size_t)at, "%s%lld", i ? " x " : "", (long long)shape[i]);
        return sift_set_error(SIFT_E_SHAPE, "%s: tensor '%s' should be [%s] for this model", sift_gguf_label(f), name, want);
    }
    if (t->type != SIFT_GGUF_TENSOR_F32 && t->type != SIFT_GGUF_TENSOR_F16)
        return sift_set_error(SIFT_E_DTYPE, "%s: tensor '%s' is %s (F32 or F16 expected)", sift_gguf_label(f), name,
                              sift_gguf_tensor_type_name(t->type));
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return sift_set_error(SIFT_E_NOMEM, "predictor: out of memory");
    sift_row_to_f32(t->type == SIFT_GGUF_TENSOR_F32 ? SIFT_F32 : SIFT_F16, t->data, v, n);
    *out = v;
    return SIFT_OK;
}

/* The file's facts against the model's: a predictor trained for another model is refused. */
static sift_status check_against_model(const sift_gguf *f, const sift_model *m)
{
    const sift_gguf_hparams *hp = &m->hp;
    const char *label = sift_gguf_label(f);
    if (!sift_gguf_string_is(f, "general.architecture", ARCH))
        return sift_set_error(SIFT_E_INVALID, "%s: not a TokenButler predictor (general.architecture is not '" ARCH "')", label);
    const struct { const char *key; uint32_t model; } facts[] = {
        {"block_count", hp->n_layer},        {"embedding_length", hp->n_embd},
        {"attention.head_count", hp->n_head}, {"attention.head_count_kv", hp->n_head_kv},
        {"attention.key_length", hp->head_dim},
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        uint32_t v;
        TRY(need_u32(f, facts[i].key, &v));
        if (v != facts[i].model)
            return sift_set_error(SIFT_E_SHAPE, "%s: the predictor was trained for a model with %s = %u, this model has %u",
                                  label, facts[i].key, v, facts[i].model);
    }
    sift_gguf_str fp;
    if (sift_gguf_get_string(f, ARCH ".base_fingerprint", &fp) != SIFT_OK)
        return sift_set_error(SIFT_E_INVALID, "%s: key '" ARCH ".base_fingerprint' is missing", label);
    char mine[17];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)sift_model_fingerprint(m));
    char shown[40];
    if (fp.len != 16 || memcmp(fp.ptr, mine, 16) != 0)
        return sift_set_error(SIFT_E_INVALID,
                              "%s: the predictor was trained for another model (fingerprint %s, this model's is %s)", label,
                              sift_gguf_str_shown(fp, shown, sizeof shown), mine);
    /* The fingerprint above reads the first 64 bytes of each tensor only; this one reads blocks over
     * the whole of each. Files written before it existed lack it and are checked by the first. */
    if (!sift_gguf_has(f, ARCH ".base_fingerprint_blocks")) return SIFT_OK;
    if (sift_gguf_get_string(f, ARCH ".base_fingerprint_blocks", &fp) != SIFT_OK)
        return sift_set_error(SIFT_E_INVALID, "%s: key '" ARCH ".base_fingerprint_blocks' is not a string", label);
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)sift_model_fingerprint_blocks(m));
    if (fp.len != 16 || memcmp(fp.ptr, mine, 16) != 0)
        return sift_set_error(SIFT_E_INVALID,
                              "%s: the predictor was trained for another model (its tensors differ past their first 64 "
                              "bytes: fingerprint over blocks %s, this model's is %s)", label,
                              sift_gguf_str_shown(fp, shown, sizeof shown), mine);
    return SIFT_OK;
}

sift_status sift_predictor_load(sift_model *m, const char *path, sift_predictor **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_predictor_load: out is NULL");
    *out = NULL;
    if (!m || !path) return sift_set_error(SIFT_E_INVALID, "sift_predictor_load: null argument");
    sift_gguf *f;
    TRY(sift_gguf_open_file(path, &f));
    uint32_t key_dim = 0, stride = 0, hidden = 0;
    sift_predictor *p = NULL;
    float *buf[4] = {0};
    sift_status s = check_against_model(f, m);
    if (s == SIFT_OK) s = need_u32(f, "key_dim", &key_dim);
    if (s == SIFT_OK) s = need_u32(f, "producer_stride", &stride);
    if (s == SIFT_OK) s = need_u32(f, "hidden_length", &hidden);
    if (s == SIFT_OK && (key_dim > SIFT_MAX_HEAD_DIM || stride > m->hp.n_layer || hidden > (1u << 16)))
        s = sift_set_error(SIFT_E_INVALID, "%s: key dimension %u, producer stride %u, hidden width %u", path, key_dim, stride,
                           hidden);
    if (s == SIFT_OK) s = predictor_new(m, (int)key_dim, (int)stride, (int)hidden, &p);
    if (s == SIFT_OK && sift_gguf_has(f, ARCH ".layer_norm_epsilon")) s = sift_gguf_get_f32(f, ARCH ".layer_norm_epsilon", &p->ln_eps);
    const sift_gguf_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim;
    char name[96];
    for (int i = 0; s == SIFT_OK && p && i < p->n_prod; i++) {
        const int64_t out_dim = (int64_t)p->stride * hq * p->key_dim;
        const int64_t shapes[4][2] = {{e, 0}, {e, 0}, {p->hidden, e}, {out_dim, p->hidden}};
        const char *parts[4] = {"norm.weight", "norm.bias", "fc1.weight", "fc2.weight"};
        sift_tensor **dst[4] = {&p->prod[i].norm_w, &p->prod[i].norm_b, &p->prod[i].fc1, &p->prod[i].fc2};
        for (int k = 0; s == SIFT_OK && k < 4; k++) {
            const int nd = shapes[k][1] ? 2 : 1;
            snprintf(name, sizeof name, "butler.%d.%s", i, parts[k]);
            s = read_tensor(f, name, nd, shapes[k], &buf[k]);
            if (s == SIFT_OK) s = upload_f32(p, nd, shapes[k], buf[k], dst[k]);
            free(buf[k]);
            buf[k] = NULL;
        }
    }
    for (int l = 1; s == SIFT_OK && p && l < p->n_layers; l++) {
        snprintf(name, sizeof name, "butler.key.%d.weight", l);
        s = read_tensor(f, name, 3, (int64_t[]){hkv, p->key_dim, d}, &buf[0]);
        if (s == SIFT_OK) s = upload_key_projection(p, l, buf[0]);
        free(buf[0]);
        buf[0] = NULL;
    }
    sift_gguf_close(f);
    return finish(m, p, s, out);
}

/* ---- random (benchmarks) ----------------------------------------------------------------------- */

/* Values uniform in [-a, a) from a 64-bit LCG: the scale of a default initialisation. */
static void fill_uniform(float *v, int64_t n, float a, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = a * (2.0f * (float)(*state >> 40) / (float)(1ull << 24) - 1.0f);
    }
}

sift_status sift_predictor_random(sift_model *m, int key_dim, uint64_t seed, sift_predictor **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_predictor_random: out is NULL");
    *out = NULL;
    if (!m) return sift_set_error(SIFT_E_INVALID, "sift_predictor_random: model is NULL");
    sift_predictor *p;
    TRY(predictor_new(m, key_dim, 4 < (int)m->hp.n_layer ? 4 : (int)m->hp.n_layer, 512, &p));
    const sift_gguf_hparams *hp = &m->hp;
    const int64_t e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim;
    const int64_t out_dim = (int64_t)p->stride * hq * key_dim;
    int64_t most = p->hidden * e; /* the largest of the matrices */
    if (out_dim * p->hidden > most) most = out_dim * p->hidden;
    if (hkv * key_dim * d > most) most = hkv * key_dim * d;
    float *v = malloc((size_t)most * sizeof *v);
    uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
    sift_status s = v ? SIFT_OK : sift_set_error(SIFT_E_NOMEM, "predictor: out of memory");
    for (int i = 0; s == SIFT_OK && i < p->n_prod; i++) {
        for (int64_t j = 0; j < e; j++) v[j] = 1.0f;
        s = upload_f32(p, 1, (int64_t[]){e}, v, &p->prod[i].norm_w);
        memset(v, 0, (size_t)e * sizeof *v);
        if (s == SIFT_OK) s = upload_f32(p, 1, (int64_t[]){e}, v, &p->prod[i].norm_b);
        fill_uniform(v, p->hidden * e, 1.0f / sqrtf((float)e), &state);
        if (s == SIFT_OK) s = upload_f32(p, 2, (int64_t[]){p->hidden, e}, v, &p->prod[i].fc1);
        fill_uniform(v, out_dim * p->hidden, 1.0f / sqrtf((float)p->hidden), &state);
        if (s == SIFT_OK) s = upload_f32(p, 2, (int64_t[]){out_dim, p->hidden}, v, &p->prod[i].fc2);
    }
    for (int l = 1; s == SIFT_OK && l < p->n_layers; l++) {
        fill_uniform(v, hkv * key_dim * d, 1.0f / sqrtf((float)d), &state);
        s = upload_key_projection(p, l, v);
    }
    free(v);
    return finish(m, p, s, out);
}

void sift_predictor_get_info(const sift_predictor *p, sift_predictor_info *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!p) return;
    out->key_dim = p->key_dim;
    out->producer_stride = p->stride;
    out->hidden = p->hidden;
    out->n_producers = p->n_prod;
    out->n_params = p->n_params;
    out->overhead = p->overhead;
    out->bytes = p->bytes;
}
