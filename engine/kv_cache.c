/* The paged KV cache of a session: per layer a K and a V pool of pages (P tokens each) shared by
 * the sequences; each sequence has a page table and paged views of the pools, so a sequence grows
 * by taking pages from a free list, never by copying. Host mirrors of a sequence's cache (for the
 * host policies and eval_mode) are copied from the pools here too. */
#include "session.h"

#include <stdlib.h>
#include <string.h>

sift_status sift_kv_create_pools(sift_session *s)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const sift_session_config *c = &s->cfg;
    s->kpool = calloc(hp->n_layer, sizeof *s->kpool);
    s->vpool = calloc(hp->n_layer, sizeof *s->vpool);
    s->free_pages = malloc((size_t)s->pool_pages * sizeof *s->free_pages);
    if (!s->kpool || !s->vpool || !s->free_pages) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    /* free pages pop from the end: the lowest pages are handed out first */
    for (int64_t p = 0; p < s->pool_pages; p++) s->free_pages[p] = (int32_t)(s->pool_pages - 1 - p);
    s->n_free = s->pool_pages;
    const int64_t shape[3] = {hp->n_head_kv, s->pool_pages * c->page_size, hp->head_dim}; /* [Hkv][R][D] */
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        TRY(sift_tensor_create(s->m->ctx, c->kv_type, 3, shape, &s->kpool[l]));
        TRY(sift_tensor_create(s->m->ctx, c->kv_type, 3, shape, &s->vpool[l]));
    }
    if (!c->predictor) return SIFT_OK;
    /* TokenButler's projected keys [Hkv][R][d'] (i8: [Hkv][R][d' + 4], each row's scale after it),
     * on the same pages as K and V (layer 0 is dense) */
    s->kppool = calloc(hp->n_layer, sizeof *s->kppool);
    if (!s->kppool) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    const int64_t kp_shape[3] = {hp->n_head_kv, s->pool_pages * c->page_size,
                                 c->predictor->key_dim + (c->predictor_keys == SIFT_I8 ? 4 : 0)};
    for (uint32_t l = 1; l < hp->n_layer; l++) TRY(sift_tensor_create(s->m->ctx, c->predictor_keys, 3, kp_shape, &s->kppool[l]));
    return SIFT_OK;
}

/* A sequence's page table (no pages yet), its paged views of every layer's pools, and its mirrors. */
sift_status sift_kv_create_sequence(sift_session *s, sequence *q)
{
    const sift_gguf_hparams *hp = &s->m->hp;
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
        if (s->kppool && s->kppool[l]) TRY(sift_tensor_paged_view(s->kppool[l], q->pages, s->cfg.page_size, &sl->kpview));
        if (sift_keeps_mirror(s))
            TRY(sift_kv_mirror_init(&sl->mirror, hp->n_head_kv, hp->head_dim, s->cfg.n_ctx, s->cfg.eval_mode != 0));
    }
    return SIFT_OK;
}

/* Frees every sequence's page table, views and mirrors, and the pools. */
void sift_kv_destroy(sift_session *s)
{
    const uint32_t n_layer = s->m->hp.n_layer;
    for (int i = 0; s->seqs && i < s->cfg.n_seq; i++) {
        sequence *q = &s->seqs[i];
        for (uint32_t l = 0; q->layers && l < n_layer; l++) {
            sift_tensor_destroy(q->layers[l].kview);
            sift_tensor_destroy(q->layers[l].vview);
            sift_tensor_destroy(q->layers[l].kpview);
            sift_kv_mirror_free(&q->layers[l].mirror);
        }
        sift_tensor_destroy(q->pages);
        free(q->page_of);
    }
    for (uint32_t l = 0; s->kpool && l < n_layer; l++) {
        sift_tensor_destroy(s->kpool[l]);
        sift_tensor_destroy(s->vpool[l]);
    }
    for (uint32_t l = 0; s->kppool && l < n_layer; l++) sift_tensor_destroy(s->kppool[l]);
    free(s->kppool);
    free(s->kpool);
    free(s->vpool);
    free(s->free_pages);
}

/* ---- pages ------------------------------------------------------------------------------------- */

/* Gives sequence q the pages that positions [0, end) need, taking them from the pool. */
sift_status sift_kv_ensure_pages(sift_session *s, sequence *q, int64_t end)
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
sift_status sift_kv_release_pages(sift_session *s, sequence *q, int64_t end)
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

/* ---- host mirrors -------------------------------------------------------------------------------- */

/* Rows [j, end) of KV head h of sequence q in a pool of rows of row_bytes bytes: the byte offset
 * of row j, and how many of the rows from j on lie in j's page (a contiguous run). The host side
 * of sift_kv_phys_row. */
static int64_t pool_run_rows(const sift_session *s, const sequence *q, int64_t h, int64_t j, int64_t end, size_t row_bytes,
                             size_t *offset)
{
    const int64_t p = s->cfg.page_size, phys = (int64_t)q->page_of[j / p] * p + j % p;
    *offset = (size_t)(h * s->pool_pages * p + phys) * row_bytes;
    return p - j % p < end - j ? p - j % p : end - j;
}

/* The same in a K or V pool, rows of D values of the cache's type. */
static int64_t pool_run(const sift_session *s, const sequence *q, int64_t h, int64_t j, int64_t end, size_t *offset)
{
    return pool_run_rows(s, q, h, j, end, (size_t)s->m->hp.head_dim * sift_dtype_size(s->cfg.kv_type), offset);
}

/* Copies rows [pos0, pos0 + t) of layer l of sequence q from the pools into its mirror. */
sift_status sift_kv_mirror_rows(sift_session *s, sequence *q, uint32_t l, int64_t pos0, int64_t t)
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

/* ---- synthetic contexts and sizes ---------------------------------------------------------------- */

sift_status sift_session_fill_synthetic(sift_session *s, int64_t n, uint64_t seed)
{
    return sift_session_fill_synthetic_seq(s, 0, n, seed);
}

sift_status sift_session_fill_synthetic_seq(sift_session *s, int seq, int64_t n, uint64_t seed)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_fill_synthetic: session is NULL");
    if (seq < 0 || seq >= s->cfg.n_seq)
        return sift_set_error(SIFT_E_INVALID, "sift_session_fill_synthetic: no sequence %d of %d", seq, s->cfg.n_seq);
    sequence *q = &s->seqs[seq];
    if (n < 0 || n > s->cfg.n_ctx - q->pos)
        return sift_set_error(SIFT_E_LIMIT, "sift_session_fill_synthetic: %lld tokens do not fit after %lld of %lld",
                              (long long)n, (long long)q->pos, (long long)s->cfg.n_ctx);
    TRY(sift_kv_ensure_pages(s, q, q->pos + n));
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
    /* the projected keys, one random page the same way: f16 or f32 rows of d' values, or i8 rows of
     * d' values and the scale 1.0 */
    const sift_dtype kt = s->cfg.predictor_keys;
    const int64_t dk = s->cfg.predictor ? s->cfg.predictor->key_dim : 0, row_elems = dk + (kt == SIFT_I8 ? 4 : 0);
    const size_t row_bytes = (size_t)row_elems * sift_dtype_size(kt);
    buf = st == SIFT_OK && dk ? malloc((size_t)p * row_bytes) : NULL;
    if (st == SIFT_OK && dk && !buf) st = sift_set_error(SIFT_E_NOMEM, "sift_session_fill_synthetic: out of memory");
    for (int64_t r = 0; buf && r < p; r++)
        for (int64_t i = 0; i < dk; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const float v = (float)(int32_t)(x >> 32) * (1.0f / 2147483648.0f);
            unsigned char *row = buf + (size_t)r * row_bytes;
            if (kt == SIFT_I8) {
                ((int8_t *)row)[i] = (int8_t)(v * 127.0f);
                if (i == 0) memcpy(row + dk, &(float){1.0f}, sizeof(float));
            } else if (kt == SIFT_F16) {
                ((uint16_t *)row)[i] = sift_float_to_half(v);
            } else {
                ((float *)row)[i] = v;
            }
        }
    for (uint32_t l = 1; st == SIFT_OK && buf && l < s->m->hp.n_layer; l++)
        for (int64_t h = 0; st == SIFT_OK && h < hkv; h++)
            for (int64_t j = q->pos; st == SIFT_OK && j < q->pos + n;) {
                size_t off;
                const int64_t run = pool_run_rows(s, q, h, j, q->pos + n, row_bytes, &off);
                st = sift_tensor_write(s->kppool[l], off, buf, (size_t)run * row_bytes);
                j += run;
            }
    free(buf);
    if (st == SIFT_OK) q->pos += n;
    return st;
}

size_t sift_session_predictor_key_bytes(const sift_session *s)
{
    size_t total = 0;
    for (uint32_t l = 0; s && s->kppool && l < s->m->hp.n_layer; l++)
        if (s->kppool[l]) total += sift_tensor_nbytes(s->kppool[l]);
    return total;
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

