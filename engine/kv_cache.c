/* The paged KV cache (kv_cache.h): its pools and free lists, each sequence's page table and views,
 * the moves of offload, and the host's reads and writes of its rows. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_seq {
    int64_t len;         /* rows written: positions [0, len) */
    int32_t *page_of;    /* the page table on the host [seq_pages], -1 where none */
    sift_tensor *pages;  /* the same on the device */
    int64_t n_pages;     /* pages held (the first n_pages entries) */
    int64_t dev_cursor;  /* offload: logical pages past the pinned ones and below this are on the host */
    sift_tensor **views; /* [n_layer][KV_FAMILIES]: the pools through this page table (NULL: no such family) */
} kv_seq;

struct kv_cache {
    sift_context *ctx;
    kv_cache_config cfg;
    int64_t seq_pages;  /* logical pages of a sequence */
    int64_t pool_pages; /* physical pages: [0, dev_pages) on the device, [dev_pages, pool_pages) in host memory */
    int64_t dev_pages;
    int32_t *free_dev;  /* a stack of free device pages; the lowest pop first */
    int64_t n_free_dev;
    int32_t *free_host; /* a stack of free host pages */
    int64_t n_free_host;
    int64_t pages_moved; /* device -> host moves so far */
    double move_us;      /* the host time they took, summed */
    double move_bytes;   /* the bytes they copied, summed */
    /* Each move's copies, one a KV head of each family of each layer ([n_layer][KV_FAMILIES][Hkv]
     * at most), made at creation; through_host: copied through host memory even where the backend
     * copies on the device (SIFT_KV_MOVE_THROUGH_HOST=1, to compare the two) */
    sift_copy_region *move_regions;
    bool move_through_host;
    /* [n_layer][KV_FAMILIES]: the device pool (every page where the family is resident), and the
     * host pool of pages [dev_pages, pool_pages) where it moves (else NULL) */
    sift_tensor **pool, **host;
    kv_seq *seqs;
};

static bool offloaded(const kv_cache *c) { return c->dev_pages < c->pool_pages; }

static int64_t pages_of(const kv_cache *c, int64_t tokens) { return (tokens + c->cfg.page_size - 1) / c->cfg.page_size; }

/* The index of layer l's family f in the [n_layer][KV_FAMILIES] arrays. */
static size_t slot(uint32_t l, int f) { return (size_t)l * KV_FAMILIES + (size_t)f; }

/* The bytes of a row of family f. */
static size_t row_bytes(const kv_cache *c, kv_family f)
{
    if (f == KV_KP) return sift_key_row_bytes(c->cfg.key_type, c->cfg.key_dim);
    return (size_t)c->cfg.head_dim * sift_dtype_size(c->cfg.kv_type);
}

bool sift_kv_cache_moves(const kv_cache_config *cfg, uint32_t l, kv_family f)
{
    if (f == KV_KP || l < cfg->resident_layers) return false;
    return f == KV_V || !cfg->offload_v_only;
}

/* ---- creation ----------------------------------------------------------------------------------- */

static sift_status check_config(const kv_cache_config *g)
{
    const char *fn = "sift_kv_cache_create";
    if (g->n_layer < 1 || g->n_kv_heads < 1 || g->head_dim < 1 || g->n_seq < 1 || g->seq_tokens < 1 || g->pool_tokens < 1 ||
        g->device_tokens < 0 || g->pinned_tokens < 0 || g->key_dim < 0 || g->resident_layers > g->n_layer)
        return sift_set_error(SIFT_E_INVALID,
                              "%s: %u layers, %lld KV heads of %lld, %d sequences of %lld tokens, a pool of %lld (%lld on the "
                              "device), %lld pinned, projected keys of %lld, %u resident layers",
                              fn, g->n_layer, (long long)g->n_kv_heads, (long long)g->head_dim, g->n_seq,
                              (long long)g->seq_tokens, (long long)g->pool_tokens, (long long)g->device_tokens,
                              (long long)g->pinned_tokens, (long long)g->key_dim, g->resident_layers);
    if (g->page_size < 1 || (g->page_size & (g->page_size - 1)) != 0 || g->page_size > (1 << 20))
        return sift_set_error(SIFT_E_INVALID, "%s: page size %lld is not a power of two up to 2^20", fn, (long long)g->page_size);
    if (g->seq_tokens > INT32_MAX || g->pool_tokens > INT32_MAX)
        return sift_set_error(SIFT_E_INVALID, "%s: %lld tokens a sequence and a pool of %lld exceed 2^31", fn,
                              (long long)g->seq_tokens, (long long)g->pool_tokens);
    if (g->kv_type != SIFT_F16 && g->kv_type != SIFT_F32)
        return sift_set_error(SIFT_E_INVALID, "%s: K/V of type %s (f16 or f32)", fn, sift_dtype_name(g->kv_type));
    if (g->key_dim > 0 && g->key_type != SIFT_F16 && g->key_type != SIFT_F32 && g->key_type != SIFT_I8)
        return sift_set_error(SIFT_E_INVALID, "%s: projected keys of type %s (f16, f32 or i8)", fn, sift_dtype_name(g->key_type));
    return SIFT_OK;
}

/* Every layer's pools: each family one device pool of every page where it stays resident, else a
 * device pool of dev_pages and a host pool of the rest. */
static sift_status create_pools(kv_cache *c)
{
    const kv_cache_config *g = &c->cfg;
    const int64_t P = g->page_size, host_pages = c->pool_pages - c->dev_pages;
    for (uint32_t l = 0; l < g->n_layer; l++)
        for (int f = 0; f < KV_FAMILIES; f++) {
            if (f == KV_KP && (g->key_dim == 0 || l == 0)) continue;
            const sift_dtype type = f == KV_KP ? g->key_type : g->kv_type;
            const int64_t width = f == KV_KP ? g->key_dim + sift_key_row_extra(type) : g->head_dim;
            const bool moves = offloaded(c) && sift_kv_cache_moves(g, l, (kv_family)f);
            const int64_t shape[3] = {g->n_kv_heads, (moves ? c->dev_pages : c->pool_pages) * P, width}; /* [Hkv][R][D] */
            TRY(sift_tensor_create(c->ctx, type, 3, shape, &c->pool[slot(l, f)]));
            if (moves)
                TRY(sift_tensor_create_host(c->ctx, type, 3, (int64_t[]){g->n_kv_heads, host_pages * P, width},
                                            &c->host[slot(l, f)]));
        }
    return SIFT_OK;
}

/* A sequence's page table (no pages yet) and its paged views of every pool. */
static sift_status create_sequence(kv_cache *c, kv_seq *q)
{
    const kv_cache_config *g = &c->cfg;
    q->page_of = malloc((size_t)c->seq_pages * sizeof *q->page_of);
    q->views = calloc((size_t)g->n_layer * KV_FAMILIES, sizeof *q->views);
    if (!q->page_of || !q->views) return sift_set_error(SIFT_E_NOMEM, "sift_kv_cache_create: out of memory");
    for (int64_t p = 0; p < c->seq_pages; p++) q->page_of[p] = -1;
    TRY(sift_tensor_create(c->ctx, SIFT_I32, 1, &c->seq_pages, &q->pages));
    TRY(sift_tensor_write(q->pages, 0, q->page_of, (size_t)c->seq_pages * sizeof(int32_t)));
    for (size_t i = 0; i < (size_t)g->n_layer * KV_FAMILIES; i++) {
        if (!c->pool[i]) continue;
        if (c->host[i]) TRY(sift_tensor_paged_view_pools(c->pool[i], c->host[i], q->pages, g->page_size, &q->views[i]));
        else TRY(sift_tensor_paged_view(c->pool[i], q->pages, g->page_size, &q->views[i]));
    }
    return SIFT_OK;
}

sift_status sift_kv_cache_create(sift_context *ctx, const kv_cache_config *cfg, kv_cache **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_kv_cache_create: out is NULL");
    *out = NULL;
    if (!ctx || !cfg) return sift_set_error(SIFT_E_INVALID, "sift_kv_cache_create: null argument");
    TRY(check_config(cfg));
    kv_cache *c = calloc(1, sizeof *c);
    if (!c) return sift_set_error(SIFT_E_NOMEM, "sift_kv_cache_create: out of memory");
    c->ctx = ctx;
    c->cfg = *cfg;
    c->seq_pages = pages_of(c, cfg->seq_tokens);
    c->pool_pages = pages_of(c, cfg->pool_tokens);
    c->dev_pages = c->pool_pages;
    if (cfg->device_tokens > 0 && pages_of(c, cfg->device_tokens) < c->pool_pages) c->dev_pages = pages_of(c, cfg->device_tokens);
    const int64_t host_pages = c->pool_pages - c->dev_pages;
    const size_t n_pools = (size_t)cfg->n_layer * KV_FAMILIES;
    c->pool = calloc(n_pools, sizeof *c->pool);
    c->host = calloc(n_pools, sizeof *c->host);
    c->free_dev = malloc((size_t)c->dev_pages * sizeof *c->free_dev);
    c->free_host = malloc((size_t)(host_pages ? host_pages : 1) * sizeof *c->free_host);
    c->seqs = calloc((size_t)cfg->n_seq, sizeof *c->seqs);
    c->move_regions = malloc(n_pools * (size_t)cfg->n_kv_heads * sizeof *c->move_regions);
    const char *through_host = getenv("SIFT_KV_MOVE_THROUGH_HOST");
    c->move_through_host = through_host && strcmp(through_host, "1") == 0;
    sift_status st = SIFT_OK;
    if (!c->pool || !c->host || !c->free_dev || !c->free_host || !c->seqs || !c->move_regions)
        st = sift_set_error(SIFT_E_NOMEM, "sift_kv_cache_create: out of memory");
    if (st == SIFT_OK) {
        /* free pages pop from the end: the lowest pages are handed out first */
        for (int64_t p = 0; p < c->dev_pages; p++) c->free_dev[p] = (int32_t)(c->dev_pages - 1 - p);
        c->n_free_dev = c->dev_pages;
        for (int64_t p = 0; p < host_pages; p++) c->free_host[p] = (int32_t)(c->pool_pages - 1 - p);
        c->n_free_host = host_pages;
        st = create_pools(c);
    }
    for (int i = 0; st == SIFT_OK && i < cfg->n_seq; i++) st = create_sequence(c, &c->seqs[i]);
    if (st != SIFT_OK) {
        sift_kv_cache_destroy(c);
        return st;
    }
    *out = c;
    return SIFT_OK;
}

void sift_kv_cache_destroy(kv_cache *c)
{
    if (!c) return;
    const size_t n_pools = (size_t)c->cfg.n_layer * KV_FAMILIES;
    for (int i = 0; c->seqs && i < c->cfg.n_seq; i++) {
        kv_seq *q = &c->seqs[i];
        for (size_t v = 0; q->views && v < n_pools; v++) sift_tensor_destroy(q->views[v]);
        free(q->views);
        sift_tensor_destroy(q->pages);
        free(q->page_of);
    }
    for (size_t i = 0; c->pool && c->host && i < n_pools; i++) {
        sift_tensor_destroy(c->pool[i]);
        sift_tensor_destroy(c->host[i]);
    }
    free(c->pool);
    free(c->host);
    free(c->seqs);
    free(c->free_dev);
    free(c->free_host);
    free(c->move_regions);
    free(c);
}

void sift_kv_cache_set_pinned(kv_cache *c, int64_t tokens) { c->cfg.pinned_tokens = tokens; }

int64_t sift_kv_cache_len(const kv_cache *c, int seq) { return c->seqs[seq].len; }

sift_tensor *sift_kv_cache_view(const kv_cache *c, int seq, uint32_t l, kv_family f) { return c->seqs[seq].views[slot(l, f)]; }

const int32_t *sift_kv_cache_pages(const kv_cache *c, int seq, int64_t *n_pages)
{
    *n_pages = c->seqs[seq].n_pages;
    return c->seqs[seq].page_of;
}

/* ---- where rows live ----------------------------------------------------------------------------- */

/* Layer l's family f through some page table: every sequence's view numbers the physical rows
 * alike (they share the pools), so any one addresses physical pages. */
static const sift_tensor *family(const kv_cache *c, uint32_t l, kv_family f) { return c->seqs[0].views[slot(l, f)]; }

/* Rows [j, end) of KV head h of sequence q in a view of its: the tensor holding row j and its byte
 * offset there, and how many of the rows from j on lie in j's page (a contiguous run). */
static int64_t run_rows(const kv_cache *c, const kv_seq *q, const sift_tensor *view, int64_t h, int64_t j, int64_t end,
                        const sift_tensor **where, size_t *offset)
{
    const int64_t P = c->cfg.page_size;
    *where = sift_kv_row_storage(view, h, sift_kv_phys_row(view, q->page_of, j), offset);
    return P - j % P < end - j ? P - j % P : end - j;
}

/* run_rows's run, continued over the following pages while they lie next to it in the same tensor
 * (a fresh sequence's pages do), up to max_rows rows: one transfer in place of one a page. */
static int64_t span_rows(const kv_cache *c, const kv_seq *q, const sift_tensor *view, int64_t h, int64_t j, int64_t end,
                         size_t bytes_per_row, int64_t max_rows, const sift_tensor **where, size_t *offset)
{
    int64_t run = run_rows(c, q, view, h, j, end, where, offset);
    while (j + run < end) {
        size_t next_off;
        const sift_tensor *next;
        const int64_t more = run_rows(c, q, view, h, j + run, end, &next, &next_off);
        if (next != *where || next_off != *offset + (size_t)run * bytes_per_row || run + more > max_rows) break;
        run += more;
    }
    return run;
}

/* The copies of the rows of physical page `from` to page `to` in layer l's family f, one a KV head,
 * appended at regions[*n]. */
static void page_regions(const kv_cache *c, uint32_t l, kv_family f, int64_t from, int64_t to, sift_copy_region *regions,
                         size_t *n)
{
    const sift_tensor *view = family(c, l, f);
    const int64_t P = c->cfg.page_size;
    const size_t bytes = (size_t)P * row_bytes(c, f);
    for (int64_t h = 0; h < c->cfg.n_kv_heads; h++) {
        sift_copy_region *r = &regions[(*n)++];
        r->src = sift_kv_row_storage(view, h, from * P, &r->src_offset);
        r->dst = (sift_tensor *)sift_kv_row_storage(view, h, to * P, &r->dst_offset); /* a pool of the cache's own */
        r->bytes = bytes;
    }
}

/* Moves the rows of physical page `from` (on the device) to page `to` (a host page) in every
 * family of every layer: K and V, and the projected keys (which stay on the device, in their
 * pool's page `to`). One batch of copies, which the backend makes on the device where it can
 * (tensor_copy), waited for once. Called while no graph runs (a step reserves its pages after the
 * step before it was waited for and before its own graph runs; one built ahead reads the page
 * table only when it runs), and the copies wait for a run still in flight anyway: so every row
 * written to the page is there, and nothing reads the host page before it is. */
static sift_status move_page(kv_cache *c, int64_t from, int64_t to)
{
    const double t0 = sift_now_us();
    size_t n = 0;
    for (uint32_t l = 0; l < c->cfg.n_layer; l++)
        for (int f = 0; f < KV_FAMILIES; f++)
            if (family(c, l, (kv_family)f)) page_regions(c, l, (kv_family)f, from, to, c->move_regions, &n);
    TRY(sift_tensors_copy(c->ctx, c->move_regions, n, c->move_through_host));
    c->move_us += sift_now_us() - t0;
    for (size_t i = 0; i < n; i++) c->move_bytes += (double)c->move_regions[i].bytes;
    c->pages_moved++;
    return SIFT_OK;
}

/* ---- pages ------------------------------------------------------------------------------------- */

/* A physical page for logical page p of sequence q (whose pages [0, p) are held; rows [0, q->len)
 * written): a free device page; under offload, when there is none, the device page of q's oldest
 * logical page past the pinned ones, whose rows (those written) move to a host page first; else a
 * host page. *lo gets the lowest logical page whose entry changed. */
static sift_status take_page(kv_cache *c, kv_seq *q, int64_t p, int64_t *lo)
{
    if (c->n_free_dev > 0) {
        q->page_of[p] = c->free_dev[--c->n_free_dev];
        return SIFT_OK;
    }
    const int64_t P = c->cfg.page_size, pinned = pages_of(c, c->cfg.pinned_tokens);
    int64_t v = q->dev_cursor > pinned ? q->dev_cursor : pinned;
    while (v < p && q->page_of[v] >= c->dev_pages) v++;
    q->dev_cursor = v;
    const int32_t host = c->free_host[--c->n_free_host];
    if (v >= p) { /* every older unpinned page is on the host already, or none is q's */
        q->page_of[p] = host;
        return SIFT_OK;
    }
    const int32_t dev = q->page_of[v];
    if (v * P < q->len) {
        const sift_status st = move_page(c, dev, host);
        if (st != SIFT_OK) {
            c->free_host[c->n_free_host++] = host;
            return st;
        }
    }
    q->page_of[v] = host;
    q->page_of[p] = dev;
    q->dev_cursor = v + 1;
    if (v < *lo) *lo = v;
    return SIFT_OK;
}

sift_status sift_kv_cache_reserve(kv_cache *c, int seq, int64_t end)
{
    kv_seq *q = &c->seqs[seq];
    if (end > c->cfg.seq_tokens)
        return sift_set_error(SIFT_E_LIMIT, "kv cache: position %lld past a sequence of %lld", (long long)end,
                              (long long)c->cfg.seq_tokens);
    const int64_t want = pages_of(c, end), first = q->n_pages;
    if (want <= first) return SIFT_OK;
    if (want - first > c->n_free_dev + c->n_free_host)
        return sift_set_error(SIFT_E_LIMIT, "session: the KV pool is full (%lld pages of %lld tokens, %lld free, %lld needed)",
                              (long long)c->pool_pages, (long long)c->cfg.page_size,
                              (long long)(c->n_free_dev + c->n_free_host), (long long)(want - first));
    int64_t lo = first;
    sift_status st = SIFT_OK;
    for (int64_t p = first; p < want && st == SIFT_OK; p++) {
        st = take_page(c, q, p, &lo);
        if (st == SIFT_OK) q->n_pages = p + 1;
    }
    const sift_status wst = sift_tensor_write(q->pages, (size_t)lo * sizeof(int32_t), q->page_of + lo,
                                              (size_t)(q->n_pages - lo) * sizeof(int32_t));
    return st != SIFT_OK ? st : wst;
}

void sift_kv_cache_advance(kv_cache *c, int seq, int64_t n) { c->seqs[seq].len += n; }

sift_status sift_kv_cache_rewind(kv_cache *c, int seq, int64_t pos)
{
    kv_seq *q = &c->seqs[seq];
    if (pos < 0 || pos > q->len)
        return sift_set_error(SIFT_E_INVALID, "kv cache: a rewind to %lld of %lld rows", (long long)pos, (long long)q->len);
    q->len = pos;
    const int64_t keep = pages_of(c, pos), had = q->n_pages;
    if (keep >= had) return SIFT_OK;
    for (int64_t p = keep; p < had; p++) {
        if (q->page_of[p] >= c->dev_pages) c->free_host[c->n_free_host++] = q->page_of[p];
        else c->free_dev[c->n_free_dev++] = q->page_of[p];
        q->page_of[p] = -1;
    }
    q->n_pages = keep;
    if (q->dev_cursor > keep) q->dev_cursor = keep;
    return sift_tensor_write(q->pages, (size_t)keep * sizeof(int32_t), q->page_of + keep, (size_t)(had - keep) * sizeof(int32_t));
}

/* ---- the host's reads and writes ------------------------------------------------------------------ */

sift_status sift_kv_cache_read_rows(const kv_cache *c, int seq, uint32_t l, kv_family f, int64_t pos0, int64_t n, float *dst,
                                    int64_t dst_rows)
{
    const kv_seq *q = &c->seqs[seq];
    const sift_tensor *view = f == KV_KP ? NULL : q->views[slot(l, f)];
    const int64_t held = q->n_pages * c->cfg.page_size;
    if (!view || pos0 < 0 || n < 0 || pos0 + n > held || pos0 + n > dst_rows)
        return sift_set_error(SIFT_E_INVALID, "sift_kv_cache_read_rows: rows [%lld, %lld) of the %lld on %lld pages held, into %lld rows",
                              (long long)pos0, (long long)(pos0 + n), (long long)held, (long long)q->n_pages, (long long)dst_rows);
    const int64_t d = c->cfg.head_dim;
    const size_t elt = sift_dtype_size(c->cfg.kv_type);
    unsigned char *buf = malloc((size_t)(c->cfg.page_size * d) * elt);
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "kv cache: out of memory");
    sift_status st = SIFT_OK;
    for (int64_t h = 0; h < c->cfg.n_kv_heads && st == SIFT_OK; h++)
        for (int64_t j = pos0; j < pos0 + n && st == SIFT_OK;) {
            size_t off;
            const sift_tensor *pool;
            const int64_t run = run_rows(c, q, view, h, j, pos0 + n, &pool, &off);
            st = sift_tensor_read(pool, off, buf, (size_t)(run * d) * elt);
            float *out = dst + (h * dst_rows + j) * d;
            if (elt == 2) sift_f16_to_f32(out, (const uint16_t *)buf, (size_t)(run * d));
            else memcpy(out, buf, (size_t)(run * d) * sizeof(float));
            j += run;
        }
    free(buf);
    return st;
}

/* The pages of rows of row_bytes bytes that fill_synthetic's buffer holds: as many as n rows from
 * a page's middle can span (one more than they fill), at most 8 MiB of them, at least one. */
static int64_t fill_span_pages(int64_t n, int64_t page_rows, size_t bytes_per_row)
{
    const int64_t need = (n + page_rows - 1) / page_rows + 1;
    const int64_t cap = (int64_t)(((size_t)8 << 20) / ((size_t)page_rows * bytes_per_row));
    return need < cap ? need : cap > 1 ? cap : 1;
}

/* Writes rows [q->len, q->len + n) of every KV head through view from buf, max_rows rows: a write
 * per run of adjacent pages. Position j gets buf's row j % max_rows, whatever the runs (which differ
 * with where the pages are: device or host). */
static sift_status fill_family(const kv_cache *c, const kv_seq *q, const sift_tensor *view, int64_t n, size_t bytes_per_row,
                               const unsigned char *buf, int64_t max_rows)
{
    for (int64_t h = 0; h < c->cfg.n_kv_heads; h++)
        for (int64_t j = q->len; j < q->len + n;) {
            size_t off;
            const sift_tensor *t;
            const int64_t from = j % max_rows;
            const int64_t run = span_rows(c, q, view, h, j, q->len + n, bytes_per_row, max_rows - from, &t, &off);
            TRY(sift_tensor_write((sift_tensor *)t, off, buf + (size_t)from * bytes_per_row, (size_t)run * bytes_per_row));
            j += run;
        }
    return SIFT_OK;
}

/* The next value in [-1, 1) of fill_synthetic's xorshift stream. */
static float next_value(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return (float)(int32_t)(*x >> 32) * (1.0f / 2147483648.0f);
}

sift_status sift_kv_cache_fill_synthetic(kv_cache *c, int seq, int64_t n, uint64_t seed)
{
    if (seq < 0 || seq >= c->cfg.n_seq)
        return sift_set_error(SIFT_E_INVALID, "sift_session_fill_synthetic: no sequence %d of %d", seq, c->cfg.n_seq);
    kv_seq *q = &c->seqs[seq];
    if (n < 0 || n > c->cfg.seq_tokens - q->len)
        return sift_set_error(SIFT_E_LIMIT, "sift_session_fill_synthetic: %lld tokens do not fit after %lld of %lld",
                              (long long)n, (long long)q->len, (long long)c->cfg.seq_tokens);
    TRY(sift_kv_cache_reserve(c, seq, q->len + n));
    /* up to 8 MiB of random rows, written over and over (in runs of adjacent pages: on a GPU each
     * write is a round trip). The values matter where they are scored: a single page repeated
     * gave every vote of a list P copies, a top-k over ties no real context has; rows now repeat
     * only every 8 MiB (32K rows of K for D = 128 in f16) */
    const int64_t d = c->cfg.head_dim, p = c->cfg.page_size;
    const size_t elt = sift_dtype_size(c->cfg.kv_type), kv_row = row_bytes(c, KV_K), page_bytes = (size_t)p * kv_row;
    const int64_t span_pages = fill_span_pages(n, p, kv_row);
    unsigned char *buf = malloc((size_t)span_pages * page_bytes);
    if (!buf) return sift_set_error(SIFT_E_NOMEM, "sift_session_fill_synthetic: out of memory");
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < span_pages * p * d; i++) {
        const float v = next_value(&x);
        if (elt == 2) ((uint16_t *)buf)[i] = sift_float_to_half(v);
        else ((float *)buf)[i] = v;
    }
    sift_status st = SIFT_OK;
    for (uint32_t l = 0; st == SIFT_OK && l < c->cfg.n_layer; l++) {
        st = fill_family(c, q, q->views[slot(l, KV_K)], n, kv_row, buf, span_pages * p);
        if (st == SIFT_OK) st = fill_family(c, q, q->views[slot(l, KV_V)], n, kv_row, buf, span_pages * p);
    }
    free(buf);
    /* the projected keys the same way: f16 or f32 rows of d' values, or i8 rows of d' values and the
     * scale 1.0 */
    const sift_dtype kt = c->cfg.key_type;
    const int64_t dk = c->cfg.key_dim;
    const size_t kp_row = dk ? row_bytes(c, KV_KP) : 0;
    const int64_t kp_pages = dk ? fill_span_pages(n, p, kp_row) : 1;
    buf = st == SIFT_OK && dk ? malloc((size_t)(kp_pages * p) * kp_row) : NULL;
    if (st == SIFT_OK && dk && !buf) st = sift_set_error(SIFT_E_NOMEM, "sift_session_fill_synthetic: out of memory");
    for (int64_t r = 0; buf && r < kp_pages * p; r++)
        for (int64_t i = 0; i < dk; i++) {
            const float v = next_value(&x);
            unsigned char *row = buf + (size_t)r * kp_row;
            if (kt == SIFT_I8) {
                ((int8_t *)row)[i] = (int8_t)(v * 127.0f);
                if (i == 0) memcpy(row + dk, &(float){1.0f}, sizeof(float));
            } else if (kt == SIFT_F16) {
                ((uint16_t *)row)[i] = sift_float_to_half(v);
            } else {
                ((float *)row)[i] = v;
            }
        }
    for (uint32_t l = 1; st == SIFT_OK && buf && l < c->cfg.n_layer; l++)
        st = fill_family(c, q, q->views[slot(l, KV_KP)], n, kp_row, buf, kp_pages * p);
    free(buf);
    if (st == SIFT_OK) q->len += n;
    return st;
}

/* ---- sizes --------------------------------------------------------------------------------------- */

size_t sift_kv_cache_bytes(const kv_cache *c)
{
    size_t total = 0;
    for (uint32_t l = 0; l < c->cfg.n_layer; l++)
        for (int f = KV_K; f <= KV_V; f++)
            total += sift_tensor_nbytes(c->pool[slot(l, f)]) + sift_tensor_nbytes(c->host[slot(l, f)]);
    return total;
}

size_t sift_kv_cache_used_bytes(const kv_cache *c)
{
    const int64_t used = c->pool_pages - c->n_free_dev - c->n_free_host;
    return (size_t)((double)sift_kv_cache_bytes(c) * (double)used / (double)c->pool_pages);
}

size_t sift_kv_cache_key_bytes(const kv_cache *c)
{
    size_t total = 0;
    for (uint32_t l = 0; l < c->cfg.n_layer; l++) total += sift_tensor_nbytes(c->pool[slot(l, KV_KP)]);
    return total;
}

void sift_kv_cache_pools(const kv_cache *c, sift_kv_pool_info *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t l = 0; l < c->cfg.n_layer; l++)
        for (int f = KV_K; f <= KV_V; f++) {
            out->device_bytes += sift_tensor_nbytes(c->pool[slot(l, f)]);
            out->host_bytes += sift_tensor_nbytes(c->host[slot(l, f)]);
        }
    out->device_pages = c->dev_pages;
    out->host_pages = c->pool_pages - c->dev_pages;
    out->device_used = c->dev_pages - c->n_free_dev;
    out->host_used = out->host_pages - c->n_free_host;
    out->pages_moved = c->pages_moved;
    out->page_size = c->cfg.page_size;
}

void sift_kv_cache_move_times(const kv_cache *c, sift_kv_move_times *out)
{
    *out = (sift_kv_move_times){.moves = c->pages_moved, .us = c->move_us, .bytes = c->move_bytes};
}

/* ---- copies between tensors ------------------------------------------------------------------------ */

/* One end of a region, for the overlap check: a byte range of a storage, and whether it is written. */
typedef struct copy_span {
    const sift_tensor *root;
    size_t begin, end;
    bool written;
} copy_span;

static int span_order(const void *pa, const void *pb)
{
    const copy_span *a = pa, *b = pb;
    if (a->root != b->root) return (uintptr_t)a->root < (uintptr_t)b->root ? -1 : 1;
    return a->begin < b->begin ? -1 : a->begin > b->begin;
}

/* Whether a destination range overlaps any other range of spans[0 .. n) (sorted here): after the
 * sort by storage and start, a range overlaps an earlier one of its storage exactly when it starts
 * before the furthest end among them (any range's, for a destination; a destination's, for a
 * source: sources may share bytes). */
static bool spans_overlap(copy_span *spans, size_t n)
{
    qsort(spans, n, sizeof *spans, span_order);
    size_t end_any = 0, end_written = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || spans[i].root != spans[i - 1].root) end_any = end_written = 0;
        if (spans[i].begin < (spans[i].written ? end_any : end_written)) return true;
        if (spans[i].end > end_any) end_any = spans[i].end;
        if (spans[i].written && spans[i].end > end_written) end_written = spans[i].end;
    }
    return false;
}

/* Region r (number i of n, from the caller) checked and resolved to the tensors owning the storage. */
static sift_status resolve_region(sift_context *ctx, const sift_copy_region *r, size_t i, size_t n, sift_copy_region *out)
{
    const char *fn = "sift_tensors_copy";
    if (!r->src || !r->dst) return sift_set_error(SIFT_E_INVALID, "%s: copy %zu of %zu: a tensor is NULL", fn, i + 1, n);
    const sift_tensor *src = r->src->parent ? r->src->parent : r->src;
    sift_tensor *dst = r->dst->parent ? r->dst->parent : r->dst;
    if (r->src->ctx != ctx || r->dst->ctx != ctx)
        return sift_set_error(SIFT_E_INVALID, "%s: copy %zu of %zu: '%s' or '%s' belongs to another context", fn, i + 1, n,
                              r->src->name, r->dst->name);
    if (r->src->pages || r->dst->pages)
        return sift_set_error(SIFT_E_INVALID, "%s: copy %zu of %zu: '%s' is a paged view: copy its pool", fn, i + 1, n,
                              (r->src->pages ? r->src : r->dst)->name);
    if (r->dst->owner)
        return sift_set_error(SIFT_E_INVALID, "%s: copy %zu of %zu: '%s' is a graph intermediate", fn, i + 1, n, r->dst->name);
    const size_t elt = sift_dtype_size(src->dtype);
    if (src->dtype != dst->dtype || elt == 0)
        return sift_set_error(SIFT_E_INVALID, "%s: copy %zu of %zu: from %s storage to %s (one type with an element size)", fn,
                              i + 1, n, sift_dtype_name(src->dtype), sift_dtype_name(dst->dtype));
    if (r->src_offset > r->src->nbytes || r->bytes > r->src->nbytes - r->src_offset || r->dst_offset > r->dst->nbytes ||
        r->bytes > r->dst->nbytes - r->dst_offset)
        return sift_set_error(SIFT_E_INVALID, "%s: copy %zu of %zu: %zu bytes from %zu of '%s' (%zu bytes) to %zu of '%s' (%zu)",
                              fn, i + 1, n, r->bytes, r->src_offset, r->src->name, r->src->nbytes, r->dst_offset, r->dst->name,
                              r->dst->nbytes);
    *out = (sift_copy_region){.src = src, .src_offset = r->src->offset + r->src_offset, .dst = dst,
                              .dst_offset = r->dst->offset + r->dst_offset, .bytes = r->bytes};
    if (out->src_offset % elt || out->dst_offset % elt || out->bytes % elt)
        return sift_set_error(SIFT_E_INVALID, "%s: copy %zu of %zu: %zu bytes from byte %zu to byte %zu are not whole %s elements",
                              fn, i + 1, n, out->bytes, out->src_offset, out->dst_offset, sift_dtype_name(src->dtype));
    return SIFT_OK;
}

/* The regions through host memory, in order: a read and a write each, through buf (cap bytes). */
static sift_status copy_through_host(const sift_copy_region *regions, size_t n, unsigned char *buf, size_t cap)
{
    for (size_t i = 0; i < n; i++)
        for (size_t done = 0; done < regions[i].bytes;) {
            const size_t part = regions[i].bytes - done < cap ? regions[i].bytes - done : cap;
            TRY(sift_tensor_read(regions[i].src, regions[i].src_offset + done, buf, part));
            TRY(sift_tensor_write(regions[i].dst, regions[i].dst_offset + done, buf, part));
            done += part;
        }
    return SIFT_OK;
}

sift_status sift_tensors_copy(sift_context *ctx, const sift_copy_region *regions, size_t n, bool through_host)
{
    if (!ctx || (!regions && n)) return sift_set_error(SIFT_E_INVALID, "sift_tensors_copy: null argument");
    sift_copy_region *resolved = malloc((n ? n : 1) * sizeof *resolved);
    copy_span *spans = malloc((n ? 2 * n : 1) * sizeof *spans);
    sift_status st = resolved && spans ? SIFT_OK : sift_set_error(SIFT_E_NOMEM, "sift_tensors_copy: out of memory");
    size_t m = 0, largest = 0;
    for (size_t i = 0; i < n && st == SIFT_OK; i++) {
        st = resolve_region(ctx, &regions[i], i, n, &resolved[m]);
        if (st != SIFT_OK || resolved[m].bytes == 0) continue;
        const sift_copy_region *r = &resolved[m++];
        spans[2 * m - 2] = (copy_span){r->src, r->src_offset, r->src_offset + r->bytes, false};
        spans[2 * m - 1] = (copy_span){r->dst, r->dst_offset, r->dst_offset + r->bytes, true};
        if (r->bytes > largest) largest = r->bytes;
    }
    if (st == SIFT_OK && spans_overlap(spans, 2 * m))
        st = sift_set_error(SIFT_E_INVALID, "sift_tensors_copy: a destination overlaps another copy's source or destination");
    free(spans);
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(ctx, &be);
    if (st == SIFT_OK && m > 0 && vt->tensor_copy && !through_host) {
        sift_context_lock(ctx);
        st = vt->tensor_copy(be, resolved, m);
        sift_context_unlock(ctx);
    } else if (st == SIFT_OK && m > 0) {
        const size_t cap = largest < ((size_t)8 << 20) ? largest : (size_t)8 << 20;
        unsigned char *buf = malloc(cap);
        st = buf ? copy_through_host(resolved, m, buf, cap) : sift_set_error(SIFT_E_NOMEM, "sift_tensors_copy: out of memory");
        free(buf);
    }
    for (size_t i = 0; st == SIFT_OK && i < m; i++) resolved[i].dst->has_data = true;
    for (size_t i = 0; st == SIFT_OK && i < n; i++) regions[i].dst->has_data = true;
    free(resolved);
    return st;
}
