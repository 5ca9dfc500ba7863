/* The paged KV cache of a session: per layer a K and a V pool of pages (P tokens each) shared by
 * the sequences; each sequence has a page table and paged views of the pools, so a sequence grows
 * by taking pages from a free list, never by copying. With KV offload (kv_device_tokens) the
 * physical pages are of two kinds: [0, dev_pages) on the device, [dev_pages, pool_pages) in host
 * memory the device reads in place; an offloaded family of pools (K and V, or V only) is a device
 * pool and a host pool viewed as one (sift_tensor_paged_view_pools), a resident one (K under
 * kv_offload_v_only, TokenButler's dense layer 0, the projected keys always) one device pool of
 * every page. When the device pages run out, a sequence's oldest device page past the sink is
 * copied to a host page and its device page reused. Host mirrors of a sequence's cache (for the host policies and eval_mode)
 * are copied from the pools here too. */
#include "session.h"

#include <stdlib.h>
#include <string.h>

static bool offloaded(const sift_session *s) { return s->dev_pages < s->pool_pages; }

sift_status sift_kv_create_pools(sift_session *s)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const sift_session_config *c = &s->cfg;
    s->dev_pages = s->pool_pages;
    if (c->kv_device_tokens > 0) {
        const int64_t dev = (c->kv_device_tokens + c->page_size - 1) / c->page_size;
        if (dev < s->pool_pages) s->dev_pages = dev;
    }
    const int64_t host_pages = s->pool_pages - s->dev_pages;
    s->kpool = calloc(hp->n_layer, sizeof *s->kpool);
    s->vpool = calloc(hp->n_layer, sizeof *s->vpool);
    s->khost = calloc(hp->n_layer, sizeof *s->khost);
    s->vhost = calloc(hp->n_layer, sizeof *s->vhost);
    s->free_pages = malloc((size_t)s->dev_pages * sizeof *s->free_pages);
    s->free_host = malloc((size_t)(host_pages ? host_pages : 1) * sizeof *s->free_host);
    if (!s->kpool || !s->vpool || !s->khost || !s->vhost || !s->free_pages || !s->free_host)
        return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    /* free pages pop from the end: the lowest pages are handed out first */
    for (int64_t p = 0; p < s->dev_pages; p++) s->free_pages[p] = (int32_t)(s->dev_pages - 1 - p);
    s->n_free = s->dev_pages;
    for (int64_t p = 0; p < host_pages; p++) s->free_host[p] = (int32_t)(s->pool_pages - 1 - p);
    s->n_free_host = host_pages;
    const int64_t P = c->page_size;
    const int64_t all[3] = {hp->n_head_kv, s->pool_pages * P, hp->head_dim}; /* [Hkv][R][D] */
    const int64_t dev[3] = {hp->n_head_kv, s->dev_pages * P, hp->head_dim};
    const int64_t host[3] = {hp->n_head_kv, host_pages * P, hp->head_dim};
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        /* TokenButler's layer 0 is dense: it reads every row every step, so under offload its K
         * and V stay whole on the device (1/n_layer of the cache) rather than cross the link */
        const bool whole = c->policy == SIFT_POLICY_BUTLER && l == 0;
        const bool k_moves = offloaded(s) && !c->kv_offload_v_only && !whole, v_moves = offloaded(s) && !whole;
        TRY(sift_tensor_create(s->m->ctx, c->kv_type, 3, k_moves ? dev : all, &s->kpool[l]));
        TRY(sift_tensor_create(s->m->ctx, c->kv_type, 3, v_moves ? dev : all, &s->vpool[l]));
        if (k_moves) TRY(sift_tensor_create_host(s->m->ctx, c->kv_type, 3, host, &s->khost[l]));
        if (v_moves) TRY(sift_tensor_create_host(s->m->ctx, c->kv_type, 3, host, &s->vhost[l]));
    }
    if (!c->predictor) return SIFT_OK;
    /* TokenButler's projected keys [Hkv][R][d'] (i8: [Hkv][R][d' + 4], each row's scale after it),
     * on the same pages as K and V (layer 0 is dense), all on the device: scoring reads them all */
    s->kppool = calloc(hp->n_layer, sizeof *s->kppool);
    if (!s->kppool) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    const int64_t kp_shape[3] = {hp->n_head_kv, s->pool_pages * P,
                                 c->predictor->key_dim + sift_key_row_extra(c->predictor_keys)};
    for (uint32_t l = 1; l < hp->n_layer; l++) TRY(sift_tensor_create(s->m->ctx, c->predictor_keys, 3, kp_shape, &s->kppool[l]));
    return SIFT_OK;
}

/* A paged view of a family's pools: one pool, or the device pool and the host pool. */
static sift_status family_view(sift_session *s, sift_tensor *pool, sift_tensor *host, const sift_tensor *pages, sift_tensor **out)
{
    return host ? sift_tensor_paged_view_pools(pool, host, pages, s->cfg.page_size, out)
                : sift_tensor_paged_view(pool, pages, s->cfg.page_size, out);
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
        TRY(family_view(s, s->kpool[l], s->khost[l], q->pages, &sl->kview));
        TRY(family_view(s, s->vpool[l], s->vhost[l], q->pages, &sl->vview));
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
    for (uint32_t l = 0; s->khost && s->vhost && l < n_layer; l++) {
        sift_tensor_destroy(s->khost[l]);
        sift_tensor_destroy(s->vhost[l]);
    }
    for (uint32_t l = 0; s->kppool && l < n_layer; l++) sift_tensor_destroy(s->kppool[l]);
    free(s->kppool);
    free(s->kpool);
    free(s->vpool);
    free(s->khost);
    free(s->vhost);
    free(s->free_pages);
    free(s->free_host);
}

/* ---- where a page's rows live ------------------------------------------------------------------ */

/* The storage of physical page `page` of a family of pools (pool, and host: NULL where the family
 * is resident) in KV head h, rows of row_bytes bytes: the tensor holding it, and the byte offset of
 * the page's first row there. The host side of sift_kv_phys_row and sift_kv_pool_row. */
static sift_tensor *page_at(const sift_session *s, sift_tensor *pool, sift_tensor *host, int64_t h, int64_t page,
                            size_t row_bytes, size_t *offset)
{
    const int64_t P = s->cfg.page_size;
    if (host && page >= s->dev_pages) {
        *offset = (size_t)(h * host->shape[1] + (page - s->dev_pages) * P) * row_bytes;
        return host;
    }
    *offset = (size_t)(h * pool->shape[1] + page * P) * row_bytes;
    return pool;
}

/* Rows [j, end) of KV head h of sequence q in a family of pools: the tensor holding row j and its
 * byte offset, and how many of the rows from j on lie in j's page (a contiguous run). */
static int64_t pool_run_rows(const sift_session *s, const sequence *q, sift_tensor *pool, sift_tensor *host, int64_t h,
                             int64_t j, int64_t end, size_t row_bytes, sift_tensor **where, size_t *offset)
{
    const int64_t P = s->cfg.page_size;
    *where = page_at(s, pool, host, h, q->page_of[j / P], row_bytes, offset);
    *offset += (size_t)(j % P) * row_bytes;
    return P - j % P < end - j ? P - j % P : end - j;
}

/* pool_run_rows's run, continued over the following pages while they lie next to it in the same
 * tensor (a fresh sequence's pages do), up to max_rows rows: one transfer in place of one a page. */
static int64_t pool_span_rows(const sift_session *s, const sequence *q, sift_tensor *pool, sift_tensor *host, int64_t h,
                              int64_t j, int64_t end, size_t row_bytes, int64_t max_rows, sift_tensor **where,
                              size_t *offset)
{
    int64_t run = pool_run_rows(s, q, pool, host, h, j, end, row_bytes, where, offset);
    while (j + run < end) {
        size_t next_off;
        sift_tensor *next;
        const int64_t more = pool_run_rows(s, q, pool, host, h, j + run, end, row_bytes, &next, &next_off);
        if (next != *where || next_off != *offset + (size_t)run * row_bytes || run + more > max_rows) break;
        run += more;
    }
    return run;
}

/* The same in layer l's K (which 0) or V (1) pools, rows of D values of the cache's type. */
static int64_t pool_run(const sift_session *s, const sequence *q, uint32_t l, int which, int64_t h, int64_t j, int64_t end,
                        sift_tensor **where, size_t *offset)
{
    return pool_run_rows(s, q, which ? s->vpool[l] : s->kpool[l], which ? s->vhost[l] : s->khost[l], h, j, end,
                         (size_t)s->m->hp.head_dim * sift_dtype_size(s->cfg.kv_type), where, offset);
}

/* Copies the rows of physical page `from` to page `to` in a family of pools, every KV head, through
 * buf (a page of rows). */
static sift_status copy_page(sift_session *s, sift_tensor *pool, sift_tensor *host, size_t row_bytes, int64_t from, int64_t to,
                             unsigned char *buf)
{
    const size_t bytes = (size_t)s->cfg.page_size * row_bytes;
    for (int64_t h = 0; h < s->m->hp.n_head_kv; h++) {
        size_t src_off, dst_off;
        sift_tensor *src = page_at(s, pool, host, h, from, row_bytes, &src_off);
        sift_tensor *dst = page_at(s, pool, host, h, to, row_bytes, &dst_off);
        TRY(sift_tensor_read(src, src_off, buf, bytes));
        TRY(sift_tensor_write(dst, dst_off, buf, bytes));
    }
    return SIFT_OK;
}

/* Moves the rows of physical page `from` (on the device) to page `to` (a host page) in every
 * family of every layer: K and V, and the projected keys (which stay on the device, in their
 * pool's page `to`). */
static sift_status move_page(sift_session *s, int64_t from, int64_t to)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const size_t kv_row = (size_t)hp->head_dim * sift_dtype_size(s->cfg.kv_type);
    size_t kp_row = 0;
    if (s->kppool) {
        const sift_tensor *kp = s->kppool[hp->n_layer > 1 ? 1 : 0];
        if (kp) kp_row = (size_t)kp->shape[2] * sift_dtype_size(kp->dtype);
    }
    unsigned char *buf = malloc((size_t)s->cfg.page_size * (kv_row > kp_row ? kv_row : kp_row));
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "session: out of memory for a page move");
    sift_status st = SIFT_OK;
    for (uint32_t l = 0; l < hp->n_layer && st == SIFT_OK; l++) {
        st = copy_page(s, s->kpool[l], s->khost[l], kv_row, from, to, buf);
        if (st == SIFT_OK) st = copy_page(s, s->vpool[l], s->vhost[l], kv_row, from, to, buf);
        if (st == SIFT_OK && s->kppool && s->kppool[l]) st = copy_page(s, s->kppool[l], NULL, kp_row, from, to, buf);
    }
    free(buf);
    if (st == SIFT_OK) s->pages_moved++;
    return st;
}

/* ---- pages ------------------------------------------------------------------------------------- */

/* Pages at the start of a sequence that stay on the device under offload: the sink's. */
static int64_t pinned_pages(const sift_session *s) { return (s->cfg.sink + s->cfg.page_size - 1) / s->cfg.page_size; }

/* A physical page for logical page p of sequence q (whose pages [0, p) are held; rows [0, q->pos)
 * written): a free device page; under offload, when there is none, the device page of q's oldest
 * logical page past the sink, whose rows (those written) move to a host page first; else a host
 * page. *lo gets the lowest logical page whose entry changed. */
static sift_status take_page(sift_session *s, sequence *q, int64_t p, int64_t *lo)
{
    if (s->n_free > 0) {
        q->page_of[p] = s->free_pages[--s->n_free];
        return SIFT_OK;
    }
    const int64_t P = s->cfg.page_size, pinned = pinned_pages(s);
    int64_t v = q->dev_cursor > pinned ? q->dev_cursor : pinned;
    while (v < p && q->page_of[v] >= s->dev_pages) v++;
    q->dev_cursor = v;
    const int32_t host = s->free_host[--s->n_free_host];
    if (v >= p) { /* every older page past the sink is on the host already, or none is q's */
        q->page_of[p] = host;
        return SIFT_OK;
    }
    const int32_t dev = q->page_of[v];
    if (v * P < q->pos) {
        const sift_status st = move_page(s, dev, host);
        if (st != SIFT_OK) {
            s->free_host[s->n_free_host++] = host;
            return st;
        }
    }
    q->page_of[v] = host;
    q->page_of[p] = dev;
    q->dev_cursor = v + 1;
    if (v < *lo) *lo = v;
    return SIFT_OK;
}

/* Gives sequence q the pages that positions [0, end) need, taking them from the pool. */
sift_status sift_kv_ensure_pages(sift_session *s, sequence *q, int64_t end)
{
    const int64_t want = (end + s->cfg.page_size - 1) / s->cfg.page_size, first = q->n_pages;
    if (want <= first) return SIFT_OK;
    if (want - first > s->n_free + s->n_free_host)
        return sift_set_error(SIFT_E_LIMIT, "session: the KV pool is full (%lld pages of %lld tokens, %lld free, %lld needed)",
                              (long long)s->pool_pages, (long long)s->cfg.page_size, (long long)(s->n_free + s->n_free_host),
                              (long long)(want - first));
    int64_t lo = first;
    sift_status st = SIFT_OK;
    for (int64_t p = first; p < want && st == SIFT_OK; p++) {
        st = take_page(s, q, p, &lo);
        if (st == SIFT_OK) q->n_pages = p + 1;
    }
    const sift_status wst = sift_tensor_write(q->pages, (size_t)lo * sizeof(int32_t), q->page_of + lo,
                                              (size_t)(q->n_pages - lo) * sizeof(int32_t));
    return st != SIFT_OK ? st : wst;
}

/* Returns the pages past position end to the pool. */
sift_status sift_kv_release_pages(sift_session *s, sequence *q, int64_t end)
{
    const int64_t keep = (end + s->cfg.page_size - 1) / s->cfg.page_size, had = q->n_pages;
    if (keep >= had) return SIFT_OK;
    for (int64_t p = keep; p < had; p++) {
        if (q->page_of[p] >= s->dev_pages) s->free_host[s->n_free_host++] = q->page_of[p];
        else s->free_pages[s->n_free++] = q->page_of[p];
        q->page_of[p] = -1;
    }
    q->n_pages = keep;
    if (q->dev_cursor > keep) q->dev_cursor = keep;
    return sift_tensor_write(q->pages, (size_t)keep * sizeof(int32_t), q->page_of + keep, (size_t)(had - keep) * sizeof(int32_t));
}

/* ---- host mirrors -------------------------------------------------------------------------------- */

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
        for (int64_t h = 0; h < mr->n_kv_heads && st == SIFT_OK; h++)
            for (int64_t j = pos0; j < pos0 + t && st == SIFT_OK;) {
                size_t off;
                sift_tensor *pool;
                const int64_t run = pool_run(s, q, l, which, h, j, pos0 + t, &pool, &off);
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

/* The pages of rows of row_bytes bytes that fill_synthetic's buffer holds: as many as n rows from
 * a page's middle can span (one more than they fill), at most 8 MiB of them, at least one. */
static int64_t fill_span_pages(int64_t n, int64_t page_rows, size_t row_bytes)
{
    const int64_t need = (n + page_rows - 1) / page_rows + 1;
    const int64_t cap = (int64_t)(((size_t)8 << 20) / ((size_t)page_rows * row_bytes));
    return need < cap ? need : cap > 1 ? cap : 1;
}

/* Writes rows [q->pos, q->pos + n) of every KV head in a family of pools (pool, and host: NULL
 * where the family is resident) from buf, max_rows rows of row_bytes bytes: a write per run of
 * adjacent pages. */
static sift_status fill_family(const sift_session *s, const sequence *q, sift_tensor *pool, sift_tensor *host, int64_t n,
                               size_t row_bytes, const unsigned char *buf, int64_t max_rows)
{
    for (int64_t h = 0; h < s->m->hp.n_head_kv; h++)
        for (int64_t j = q->pos; j < q->pos + n;) {
            size_t off;
            sift_tensor *t;
            const int64_t run = pool_span_rows(s, q, pool, host, h, j, q->pos + n, row_bytes, max_rows, &t, &off);
            TRY(sift_tensor_write(t, off, buf, (size_t)run * row_bytes));
            j += run;
        }
    return SIFT_OK;
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
    /* one page of random rows, repeated over up to 8 MiB and written over and over: the values do
     * not matter, the upload does (in runs of adjacent pages: on a GPU each write is a round trip) */
    const int64_t d = s->m->hp.head_dim, p = s->cfg.page_size;
    const size_t elt = sift_dtype_size(s->cfg.kv_type), kv_row = (size_t)d * elt, page_bytes = (size_t)p * kv_row;
    const int64_t span_pages = fill_span_pages(n, p, kv_row);
    unsigned char *buf = malloc((size_t)span_pages * page_bytes);
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "sift_session_fill_synthetic: out of memory");
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < p * d; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const float v = (float)(int32_t)(x >> 32) * (1.0f / 2147483648.0f);
        if (elt == 2) ((uint16_t *)buf)[i] = sift_float_to_half(v);
        else ((float *)buf)[i] = v;
    }
    for (int64_t pg = 1; pg < span_pages; pg++) memcpy(buf + (size_t)pg * page_bytes, buf, page_bytes);
    sift_status st = SIFT_OK;
    for (uint32_t l = 0; st == SIFT_OK && l < s->m->hp.n_layer; l++) {
        st = fill_family(s, q, s->kpool[l], s->khost[l], n, kv_row, buf, span_pages * p);
        if (st == SIFT_OK) st = fill_family(s, q, s->vpool[l], s->vhost[l], n, kv_row, buf, span_pages * p);
    }
    free(buf);
    /* the projected keys, one random page the same way: f16 or f32 rows of d' values, or i8 rows of
     * d' values and the scale 1.0 */
    const sift_dtype kt = s->cfg.predictor_keys;
    const int64_t dk = s->cfg.predictor ? s->cfg.predictor->key_dim : 0, row_elems = dk + sift_key_row_extra(kt);
    const size_t row_bytes = (size_t)row_elems * sift_dtype_size(kt);
    const int64_t kp_pages = dk ? fill_span_pages(n, p, row_bytes) : 1;
    buf = st == SIFT_OK && dk ? malloc((size_t)(kp_pages * p) * row_bytes) : NULL;
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
    for (int64_t pg = 1; buf && pg < kp_pages; pg++) memcpy(buf + (size_t)(pg * p) * row_bytes, buf, (size_t)p * row_bytes);
    for (uint32_t l = 1; st == SIFT_OK && buf && l < s->m->hp.n_layer; l++)
        st = fill_family(s, q, s->kppool[l], NULL, n, row_bytes, buf, kp_pages * p);
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
        total += sift_tensor_nbytes(s->kpool[l]) + sift_tensor_nbytes(s->vpool[l]) + sift_tensor_nbytes(s->khost[l]) +
                 sift_tensor_nbytes(s->vhost[l]);
    return total;
}

size_t sift_session_kv_used_bytes(const sift_session *s)
{
    if (!s || s->pool_pages == 0) return 0;
    const int64_t used = s->pool_pages - s->n_free - s->n_free_host;
    return (size_t)((double)sift_session_kv_bytes(s) * (double)used / (double)s->pool_pages);
}

sift_status sift_session_kv_pools(const sift_session *s, sift_kv_pool_info *out)
{
    if (!s || !out) return sift_set_error(SIFT_E_INVALID, "sift_session_kv_pools: null argument");
    memset(out, 0, sizeof *out);
    for (uint32_t l = 0; l < s->m->hp.n_layer; l++) {
        out->device_bytes += sift_tensor_nbytes(s->kpool[l]) + sift_tensor_nbytes(s->vpool[l]);
        out->host_bytes += sift_tensor_nbytes(s->khost[l]) + sift_tensor_nbytes(s->vhost[l]);
    }
    out->device_pages = s->dev_pages;
    out->host_pages = s->pool_pages - s->dev_pages;
    out->device_used = s->dev_pages - s->n_free;
    out->host_used = out->host_pages - s->n_free_host;
    out->pages_moved = s->pages_moved;
    out->page_size = s->cfg.page_size;
    return SIFT_OK;
}
