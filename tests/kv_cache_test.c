/* The KV cache alone (engine/kv_cache.h), on every available backend: rows written through its
 * views by kv_write and read back from the pools where the page tables say they are (an address
 * worked out here, not with the engine's helpers), and through sift_kv_cache_read_rows:
 *  - paging: two sequences taking the lowest free pages in turn, page tables, lengths, bytes;
 *  - rewind and several sequences: pages given back and taken by the other sequence, the rows
 *    kept intact and the rows written again read back, a full pool refused without taking a page;
 *  - host pools (KV offload): the pinned page stays, the oldest device page past it moves to a host
 *    page when the device pages run out (rows and int8 projected keys moved with it), resident
 *    layers and families, the pools' figures, and a rewind then growth that moves nothing unwritten;
 *  - synthetic rows: every int8 projected key row ends in the scale 1.0, a fill past the sequence
 *    refused;
 *  - bad configurations and reads refused with a status;
 *  - copies between tensors (sift_tensors_copy, what a page move is): a batch between a device
 *    tensor and a host-memory one both ways and within the device one, f32 and f16, on the
 *    backend's copy and through host memory, every byte read back against the same copies made on
 *    mirrors here; on Vulkan also with tensors split into chunks (of 4096 bytes with f16 stored as
 *    f32, and the small profile's 2^27), each copy crossing chunk boundaries at other places on its
 *    two sides; batches refused whole (overlaps, ranges, types, part elements), copying nothing;
 *    a page move's time and bytes counted.
 *
 *   sift-kv-cache-test */
#include "kv_cache.h"
#undef TRY /* testutil.h's, for straight-line cases */

#include "backend_filter.h"
#include "testutil.h"

enum { P = 4, HKV = 2, D = 8, DK = 8 };

static sift_context *ctx;
static kv_cache *cache; /* the running case's, destroyed by the runner after a failed call too */

static void new_cache(const kv_cache_config *cfg)
{
    sift_kv_cache_destroy(cache);
    cache = NULL;
    TRY(sift_kv_cache_create(ctx, cfg, &cache));
}

/* The value written at element i of row j of KV head h, family f, layer l of sequence seq; gen
 * tells a row written again apart. Integers in [-127, 127]: exact in f16, and in an int8 key row
 * whose element 0 is 127 (its scale then 127, each q[i] the value itself). */
static float value(int gen, int seq, uint32_t l, kv_family f, int64_t h, int64_t j, int64_t i)
{
    if (f == KV_KP && i == 0) return 127.0f;
    return (float)((gen * 41 + seq * 37 + (int64_t)l * 19 + (int64_t)f * 7 + h * 13 + j * 5 + i * 3) % 255 - 127);
}

static int64_t width(kv_family f) { return f == KV_KP ? DK : D; }

/* Writes rows [pos0, pos0 + n) of every layer and family of seq (gen's values) through the views
 * by kv_write, then counts them written (sift_kv_cache_advance). */
static void write_rows(int gen, int seq, int64_t pos0, int64_t n, uint32_t n_layer)
{
    for (uint32_t l = 0; l < n_layer; l++)
        for (int f = 0; f < KV_FAMILIES; f++) {
            sift_tensor *view = sift_kv_cache_view(cache, seq, l, (kv_family)f);
            if (!view) continue;
            const int64_t w = width((kv_family)f), shape[3] = {n, HKV, w};
            float *src = malloc((size_t)(n * HKV * w) * sizeof *src);
            for (int64_t t = 0; t < n; t++)
                for (int64_t h = 0; h < HKV; h++)
                    for (int64_t i = 0; i < w; i++) src[(t * HKV + h) * w + i] = value(gen, seq, l, (kv_family)f, h, pos0 + t, i);
            sift_tensor *in = NULL;
            sift_graph *g = NULL;
            sift_status st = sift_tensor_create(ctx, SIFT_F32, 3, shape, &in);
            if (st == SIFT_OK) st = sift_tensor_write(in, 0, src, (size_t)(n * HKV * w) * sizeof *src);
            if (st == SIFT_OK) st = sift_graph_create(ctx, &g);
            if (st == SIFT_OK) st = sift_op_kv_write(g, in, pos0, view);
            if (st == SIFT_OK) st = compute_checked(g);
            sift_graph_destroy(g);
            sift_tensor_destroy(in);
            free(src);
            TRY(st);
        }
    sift_kv_cache_advance(cache, seq, n);
}

/* Element i of stored row `raw` of family type t as f32 (an int8 row: q[i] * scale / 127). */
static float stored_value(sift_dtype t, const unsigned char *raw, int64_t i, int64_t w)
{
    if (t == SIFT_F32) return ((const float *)raw)[i];
    if (t == SIFT_F16) return sift_half_to_float(((const uint16_t *)raw)[i]);
    float scale;
    memcpy(&scale, raw + w, sizeof scale);
    return (float)((const int8_t *)raw)[i] * scale / 127.0f;
}

/* Reads row j of KV head h of a paged view from its pools, addressed here: logical page j / P is
 * physical page pg of the page table; pages below the parent's count are the parent's, the rest
 * the host pool's, numbered from its start. */
static void read_stored(const sift_tensor *view, const int32_t *pages, int64_t h, int64_t j, unsigned char *raw)
{
    const int64_t pg = pages[j / P], parent_pages = view->parent->shape[1] / P;
    const sift_tensor *pool = view->host_pool && pg >= parent_pages ? view->host_pool : view->parent;
    const int64_t row = (pool == view->parent ? pg : pg - parent_pages) * P + j % P;
    const size_t row_bytes = (size_t)view->shape[2] * sift_dtype_size(view->dtype);
    TRY(sift_tensor_read(pool, (size_t)(h * pool->shape[1] + row) * row_bytes, raw, row_bytes));
}

/* Rows [j0, j1) of every layer and family of seq hold gen's values: in the pools, and (K, V) through
 * sift_kv_cache_read_rows. */
static void expect_rows(const char *cname, const char *bname, int gen, int seq, int64_t j0, int64_t j1, uint32_t n_layer)
{
    int64_t n_pages, bad = 0, bad_read = 0;
    const int32_t *pages = sift_kv_cache_pages(cache, seq, &n_pages);
    float *mirror = malloc((size_t)(HKV * j1 * D) * sizeof *mirror);
    for (uint32_t l = 0; l < n_layer; l++)
        for (int f = 0; f < KV_FAMILIES; f++) {
            const sift_tensor *view = sift_kv_cache_view(cache, seq, l, (kv_family)f);
            if (!view) continue;
            const int64_t w = width((kv_family)f);
            unsigned char raw[DK * 4 + 4];
            for (int64_t h = 0; h < HKV; h++)
                for (int64_t j = j0; j < j1; j++) {
                    read_stored(view, pages, h, j, raw);
                    for (int64_t i = 0; i < w; i++) bad += stored_value(view->dtype, raw, i, w) != value(gen, seq, l, (kv_family)f, h, j, i);
                }
            if (f == KV_KP) continue;
            TRY(sift_kv_cache_read_rows(cache, seq, l, (kv_family)f, j0, j1 - j0, mirror, j1));
            for (int64_t h = 0; h < HKV; h++)
                for (int64_t j = j0; j < j1; j++)
                    for (int64_t i = 0; i < D; i++) bad_read += mirror[(h * j1 + j) * D + i] != value(gen, seq, l, (kv_family)f, h, j, i);
        }
    free(mirror);
    char what[96];
    snprintf(what, sizeof what, "%s: sequence %d rows %lld..%lld, gen %d", cname, seq, (long long)j0, (long long)j1, gen);
    report(what, bname, "stored", (double)bad, 0, bad == 0);
    report(what, bname, "read", (double)bad_read, 0, bad_read == 0);
}

/* Sequence seq's page table is want[0 .. n). */
static void expect_pages(const char *cname, const char *bname, int seq, const int32_t *want, int64_t n)
{
    int64_t n_pages;
    const int32_t *pages = sift_kv_cache_pages(cache, seq, &n_pages);
    int64_t bad = n_pages != n;
    for (int64_t p = 0; p < n && p < n_pages; p++) bad += pages[p] != want[p];
    char what[160];
    int len = snprintf(what, sizeof what, "%s: sequence %d pages", cname, seq);
    for (int64_t p = 0; p < n && len < 150; p++) len += snprintf(what + len, sizeof what - (size_t)len, " %d", want[p]);
    report(what, bname, "wrong", (double)bad, 0, bad == 0);
}

static void expect_int(const char *cname, const char *bname, const char *what, int64_t got, int64_t want)
{
    char line[160];
    snprintf(line, sizeof line, "%s: %s = %lld", cname, what, (long long)want);
    report(line, bname, "got", (double)got, (double)want, got == want);
}

static void expect_status(const char *cname, const char *bname, const char *what, sift_status got, sift_status want)
{
    char line[160];
    snprintf(line, sizeof line, "%s: %s: %s", cname, what, sift_status_name(want));
    report(line, bname, "status", (double)got, (double)want, got == want);
}

static kv_cache_config base_config(void)
{
    return (kv_cache_config){.n_layer = 2, .n_kv_heads = HKV, .head_dim = D, .kv_type = SIFT_F16, .page_size = P, .n_seq = 2,
                             .seq_tokens = 32, .pool_tokens = 64, .key_type = SIFT_F16};
}

/* ---- the cases ----------------------------------------------------------------------------------- */

static void paging(const char *b)
{
    const char *cn = "paging";
    const kv_cache_config cfg = base_config();
    new_cache(&cfg);
    TRY(sift_kv_cache_reserve(cache, 0, 10));
    TRY(sift_kv_cache_reserve(cache, 1, 5));
    TRY(sift_kv_cache_reserve(cache, 0, 14));
    expect_pages(cn, b, 0, (const int32_t[]){0, 1, 2, 5}, 4);
    expect_pages(cn, b, 1, (const int32_t[]){3, 4}, 2);
    write_rows(0, 0, 0, 10, cfg.n_layer);
    write_rows(0, 1, 0, 5, cfg.n_layer);
    write_rows(0, 0, 10, 4, cfg.n_layer);
    expect_int(cn, b, "sequence 0's length", sift_kv_cache_len(cache, 0), 14);
    expect_int(cn, b, "sequence 1's length", sift_kv_cache_len(cache, 1), 5);
    expect_rows(cn, b, 0, 0, 0, 14, cfg.n_layer);
    expect_rows(cn, b, 0, 1, 0, 5, cfg.n_layer);
    /* 2 layers x K, V x 2 heads x 64 rows x 8 f16 */
    expect_int(cn, b, "pool bytes", (int64_t)sift_kv_cache_bytes(cache), 2 * 2 * HKV * 64 * D * 2);
    expect_int(cn, b, "bytes of the 6 pages in use", (int64_t)sift_kv_cache_used_bytes(cache), 2 * 2 * HKV * 64 * D * 2 * 6 / 16);
    expect_int(cn, b, "projected key bytes", (int64_t)sift_kv_cache_key_bytes(cache), 0);
    sift_kv_pool_info info;
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "device pages", info.device_pages, 16);
    expect_int(cn, b, "host pages", info.host_pages, 0);
    expect_int(cn, b, "device pages in use", info.device_used, 6);
    expect_int(cn, b, "host bytes", (int64_t)info.host_bytes, 0);
    const sift_tensor *k = sift_kv_cache_view(cache, 1, 1, KV_K);
    expect_int(cn, b, "rows of a view", k->shape[1], 32);
    expect_int(cn, b, "projected keys' view", sift_kv_cache_view(cache, 0, 1, KV_KP) != NULL, 0);
}

static void rewind_sequences(const char *b)
{
    const char *cn = "rewind";
    kv_cache_config cfg = base_config();
    cfg.pool_tokens = 60; /* 15 pages: short of two whole sequences */
    new_cache(&cfg);
    TRY(sift_kv_cache_reserve(cache, 0, 14));
    write_rows(0, 0, 0, 14, cfg.n_layer);
    TRY(sift_kv_cache_reserve(cache, 1, 5));
    write_rows(0, 1, 0, 5, cfg.n_layer);
    expect_pages(cn, b, 0, (const int32_t[]){0, 1, 2, 3}, 4);
    expect_pages(cn, b, 1, (const int32_t[]){4, 5}, 2);
    /* rows from 6 on forgotten: pages 2 and 3 go back, 3 on top */
    TRY(sift_kv_cache_rewind(cache, 0, 6));
    expect_int(cn, b, "sequence 0's length after the rewind", sift_kv_cache_len(cache, 0), 6);
    expect_pages(cn, b, 0, (const int32_t[]){0, 1}, 2);
    TRY(sift_kv_cache_reserve(cache, 1, 12));
    expect_pages(cn, b, 1, (const int32_t[]){4, 5, 3}, 3);
    write_rows(0, 1, 5, 7, cfg.n_layer);
    TRY(sift_kv_cache_reserve(cache, 0, 9));
    expect_pages(cn, b, 0, (const int32_t[]){0, 1, 2}, 3);
    write_rows(1, 0, 6, 3, cfg.n_layer);
    expect_rows(cn, b, 0, 0, 0, 6, cfg.n_layer);
    expect_rows(cn, b, 1, 0, 6, 9, cfg.n_layer);
    expect_rows(cn, b, 0, 1, 0, 12, cfg.n_layer);
    /* a rewind inside a page keeps it; to 0 gives every page back */
    TRY(sift_kv_cache_rewind(cache, 1, 9));
    expect_pages(cn, b, 1, (const int32_t[]){4, 5, 3}, 3);
    TRY(sift_kv_cache_rewind(cache, 1, 0));
    expect_pages(cn, b, 1, NULL, 0);
    expect_int(cn, b, "sequence 1's length", sift_kv_cache_len(cache, 1), 0);
    sift_kv_pool_info info;
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "device pages in use", info.device_used, 3);
    /* 12 pages free: sequence 1 takes 8 (its 32 positions), sequence 0 may then take 4 more, not 5 */
    TRY(sift_kv_cache_reserve(cache, 1, 32));
    expect_status(cn, b, "a reservation past the pool's pages", sift_kv_cache_reserve(cache, 0, 32), SIFT_E_LIMIT);
    expect_status(cn, b, "a reservation past the sequence", sift_kv_cache_reserve(cache, 0, 33), SIFT_E_LIMIT);
    int64_t n_pages;
    sift_kv_cache_pages(cache, 0, &n_pages);
    expect_int(cn, b, "sequence 0's pages after the refusal", n_pages, 3);
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "device pages in use after the refusal", info.device_used, 11);
    TRY(sift_kv_cache_reserve(cache, 0, 28));
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "device pages in use, the pool full", info.device_used, 15);
    expect_rows(cn, b, 0, 0, 0, 6, cfg.n_layer);
}

/* KV offload: 10 pages, 3 on the device, the sink's page pinned; layer 0 resident; int8
 * projected keys (layer 1), all on the device. Rows written a decode step at a time. */
static void host_pools(const char *b)
{
    const char *cn = "host pools";
    kv_cache_config cfg = base_config();
    cfg.kv_type = SIFT_F32;
    cfg.n_seq = 1;
    cfg.seq_tokens = cfg.pool_tokens = 40;
    cfg.device_tokens = 12;
    cfg.pinned_tokens = 3;
    cfg.resident_layers = 1;
    cfg.key_dim = DK;
    cfg.key_type = SIFT_I8;
    new_cache(&cfg);
    expect_int(cn, b, "layer 0's K has a host pool", sift_kv_cache_view(cache, 0, 0, KV_K)->host_pool != NULL, 0);
    expect_int(cn, b, "layer 1's K has a host pool", sift_kv_cache_view(cache, 0, 1, KV_K)->host_pool != NULL, 1);
    expect_int(cn, b, "layer 1's V has a host pool", sift_kv_cache_view(cache, 0, 1, KV_V)->host_pool != NULL, 1);
    expect_int(cn, b, "layer 1's projected keys have a host pool", sift_kv_cache_view(cache, 0, 1, KV_KP)->host_pool != NULL, 0);
    expect_int(cn, b, "layer 0's projected keys", sift_kv_cache_view(cache, 0, 0, KV_KP) != NULL, 0);
    for (int64_t j = 0; j < 23; j++) {
        TRY(sift_kv_cache_reserve(cache, 0, j + 1));
        write_rows(0, 0, j, 1, cfg.n_layer);
    }
    /* logical page 3 took page 1 (moved to host page 3), page 4 took page 2 (to host page 4), page 5
     * took page 1 again (logical page 3's, to host page 5) */
    expect_pages(cn, b, 0, (const int32_t[]){0, 3, 4, 5, 2, 1}, 6);
    sift_kv_pool_info info;
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "pages moved", info.pages_moved, 3);
    expect_int(cn, b, "device pages", info.device_pages, 3);
    expect_int(cn, b, "host pages in use", info.host_used, 3);
    /* a page of f32 K or V: 2 heads x 4 rows x 8 values x 4 bytes = 256; layer 0 holds 10 pages of
     * each on the device, layer 1 3 of each there and 7 in host memory */
    expect_int(cn, b, "device bytes", (int64_t)info.device_bytes, 256 * (10 + 10 + 3 + 3));
    expect_int(cn, b, "host bytes", (int64_t)info.host_bytes, 256 * (7 + 7));
    /* int8 key rows of 8 values and the scale: 12 bytes, 2 heads x 40 rows, layer 1 */
    expect_int(cn, b, "projected key bytes", (int64_t)sift_kv_cache_key_bytes(cache), 12 * HKV * 40);
    expect_rows(cn, b, 0, 0, 0, 23, cfg.n_layer);
    /* back to 10 rows: logical pages 3.. return; growing again moves page 3's device page to a host
     * page without copying (none of its rows is written) */
    TRY(sift_kv_cache_rewind(cache, 0, 10));
    expect_pages(cn, b, 0, (const int32_t[]){0, 3, 4}, 3);
    TRY(sift_kv_cache_reserve(cache, 0, 24));
    expect_pages(cn, b, 0, (const int32_t[]){0, 3, 4, 5, 2, 1}, 6);
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "pages moved after the rewind", info.pages_moved, 3);
    write_rows(1, 0, 10, 14, cfg.n_layer);
    expect_rows(cn, b, 0, 0, 0, 10, cfg.n_layer);
    expect_rows(cn, b, 1, 0, 10, 24, cfg.n_layer);

    /* V only: K stays on the device whole in every layer */
    cfg.offload_v_only = true;
    cfg.resident_layers = 0;
    new_cache(&cfg);
    expect_int(cn, b, "v only: layer 1's K has a host pool", sift_kv_cache_view(cache, 0, 1, KV_K)->host_pool != NULL, 0);
    expect_int(cn, b, "v only: layer 0's V has a host pool", sift_kv_cache_view(cache, 0, 0, KV_V)->host_pool != NULL, 1);
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "v only: host bytes", (int64_t)info.host_bytes, 256 * (7 + 7));
    for (int64_t j = 0; j < 20; j += 5) {
        TRY(sift_kv_cache_reserve(cache, 0, j + 5));
        write_rows(0, 0, j, 5, cfg.n_layer);
    }
    sift_kv_cache_pools(cache, &info);
    expect_int(cn, b, "v only: pages moved", info.pages_moved, 2);
    expect_rows(cn, b, 0, 0, 0, 20, cfg.n_layer);
    /* which families move, by the rule alone */
    const kv_cache_config rule = {.resident_layers = 1, .offload_v_only = false};
    expect_int(cn, b, "K of a resident layer moves", sift_kv_cache_moves(&rule, 0, KV_K), 0);
    expect_int(cn, b, "K of layer 1 moves", sift_kv_cache_moves(&rule, 1, KV_K), 1);
    expect_int(cn, b, "projected keys move", sift_kv_cache_moves(&rule, 1, KV_KP), 0);
}

static void synthetic(const char *b)
{
    const char *cn = "synthetic";
    kv_cache_config cfg = base_config();
    cfg.key_dim = DK;
    cfg.key_type = SIFT_I8;
    new_cache(&cfg);
    TRY(sift_kv_cache_fill_synthetic(cache, 1, 9, 7));
    expect_int(cn, b, "sequence 1's length", sift_kv_cache_len(cache, 1), 9);
    expect_pages(cn, b, 1, (const int32_t[]){0, 1, 2}, 3);
    const sift_tensor *kp = sift_kv_cache_view(cache, 1, 1, KV_KP);
    int64_t n_pages, bad_scale = 0, bad_kv = 0;
    const int32_t *pages = sift_kv_cache_pages(cache, 1, &n_pages);
    for (int64_t h = 0; h < HKV; h++)
        for (int64_t j = 0; j < 9; j++) {
            unsigned char raw[DK + 4];
            read_stored(kp, pages, h, j, raw);
            float scale;
            memcpy(&scale, raw + DK, sizeof scale);
            bad_scale += scale != 1.0f;
        }
    report("synthetic: int8 key rows end in the scale 1.0", b, "wrong", (double)bad_scale, 0, bad_scale == 0);
    float rows[HKV * 16 * D];
    TRY(sift_kv_cache_read_rows(cache, 1, 0, KV_V, 0, 9, rows, 9));
    for (int i = 0; i < HKV * 9 * D; i++) bad_kv += !(rows[i] >= -1.0f && rows[i] <= 1.0f); /* f16 rounds up to 1 */
    report("synthetic: values in [-1, 1]", b, "outside", (double)bad_kv, 0, bad_kv == 0);
    expect_status(cn, b, "a fill past the sequence", sift_kv_cache_fill_synthetic(cache, 1, 24, 7), SIFT_E_LIMIT);
    expect_int(cn, b, "sequence 1's length after the refusal", sift_kv_cache_len(cache, 1), 9);
    expect_status(cn, b, "a fill of sequence 2 of 2", sift_kv_cache_fill_synthetic(cache, 2, 1, 7), SIFT_E_INVALID);
    expect_status(cn, b, "a read past the pages held", sift_kv_cache_read_rows(cache, 1, 0, KV_K, 8, 5, rows, 13), SIFT_E_INVALID);
}

/* ---- copies between tensors ----------------------------------------------------------------------- */

/* The chunk size, in the API's bytes of an f32 and of an f16 tensor, where the running context
 * splits tensors (copy_batch builds copies across it); 0: the context at hand does not split them,
 * and 4096 stands in. split_tag names the context's variant in the reports. */
static size_t chunk_f32, chunk_f16;
static const char *split_tag = "";

/* Pseudo-random element bits of type t (f32 or f16), never infinity or NaN (which a device storing
 * f16 as f32 need not keep bit for bit). */
static void fill_bits(sift_dtype t, unsigned char *p, size_t n_elts, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n_elts; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (t == SIFT_F16) {
            uint16_t h = (uint16_t)(x >> 40);
            if ((h & 0x7c00u) == 0x7c00u) h &= 0xbfffu;
            memcpy(p + 2 * i, &h, 2);
        } else {
            uint32_t f = (uint32_t)(x >> 20);
            if ((f & 0x7f800000u) == 0x7f800000u) f &= 0xbfffffffu;
            memcpy(p + 4 * i, &f, 4);
        }
    }
}

/* The elements of a and b (n_elts of elt bytes) that differ. */
static int64_t elements_differing(const unsigned char *a, const unsigned char *b, size_t n_elts, size_t elt)
{
    int64_t bad = 0;
    for (size_t i = 0; i < n_elts; i++) bad += memcmp(a + i * elt, b + i * elt, elt) != 0;
    return bad;
}

/* A device tensor and a host-memory one of `bytes` bytes of type t, with fresh random contents, and
 * their mirrors here. */
typedef struct {
    sift_tensor *dev, *host;
    unsigned char *dev_mirror, *host_mirror, *readback;
    size_t bytes;
} copy_pair;

static void pair_free(copy_pair *p)
{
    sift_tensor_destroy(p->dev);
    sift_tensor_destroy(p->host);
    free(p->dev_mirror);
    free(p->host_mirror);
    free(p->readback);
    memset(p, 0, sizeof *p);
}

static void pair_fill(copy_pair *p, sift_dtype t, uint64_t seed)
{
    const size_t elt = sift_dtype_size(t);
    fill_bits(t, p->dev_mirror, p->bytes / elt, seed);
    fill_bits(t, p->host_mirror, p->bytes / elt, seed + 1);
    TRY(sift_tensor_write(p->dev, 0, p->dev_mirror, p->bytes));
    TRY(sift_tensor_write(p->host, 0, p->host_mirror, p->bytes));
}

/* Both tensors read back equal their mirrors, else a failure naming what. */
static void pair_expect(copy_pair *p, sift_dtype t, const char *what, const char *b)
{
    const size_t elt = sift_dtype_size(t);
    TRY(sift_tensor_read(p->dev, 0, p->readback, p->bytes));
    int64_t bad = elements_differing(p->readback, p->dev_mirror, p->bytes / elt, elt);
    TRY(sift_tensor_read(p->host, 0, p->readback, p->bytes));
    bad += elements_differing(p->readback, p->host_mirror, p->bytes / elt, elt);
    report(what, b, "elements wrong", (double)bad, 0, bad == 0);
}

/* The batch of copy_case on pair p, for a chunk of B bytes and elements of e bytes (offsets in
 * bytes; the tensors hold 3B + 4096). Device: 1's source crosses B, 2's destination 2B, 3 copies
 * within the tensor, 4's source crosses 3B; host memory: 1's destination crosses 2B, 2's source B,
 * 4's destination 3B at another place. No destination overlaps another copy's bytes. */
static size_t copy_batch(copy_pair *p, size_t B, size_t e, sift_copy_region *r)
{
    const size_t L = B + 64 * e; /* copy 4: more than a chunk */
    r[0] = (sift_copy_region){p->dev, B - 6 * e, p->host, 2 * B - 9 * e, 20 * e};
    r[1] = (sift_copy_region){p->host, B - 20 * e, p->dev, 2 * B - 17 * e, 40 * e};
    r[2] = (sift_copy_region){p->dev, 0, p->dev, B - 40 * e, 32 * e};
    r[3] = (sift_copy_region){p->dev, 2 * B + 40 * e, p->host, 2 * B + 20 * e, L};
    r[4] = (sift_copy_region){p->dev, 64 * e, p->host, 0, 0}; /* nothing */
    return 5;
}

/* The copies of r[0 .. n) made on the mirrors (none overlaps another's destination: any order). */
static void mirror_copies(copy_pair *p, const sift_copy_region *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char *src = r[i].src == p->dev ? p->dev_mirror : p->host_mirror;
        unsigned char *dst = r[i].dst == p->dev ? p->dev_mirror : p->host_mirror;
        memmove(dst + r[i].dst_offset, src + r[i].src_offset, r[i].bytes);
    }
}

/* copy_batch's copies on tensors of type t, on the backend's copy and through host memory, and
 * the refusals (tag names the context's variant in the reports). */
static void copy_type(const char *b, const char *tag, sift_dtype t, size_t chunk)
{
    const size_t e = sift_dtype_size(t), B = chunk ? chunk : 4096;
    copy_pair p = {.bytes = 3 * B + 4096};
    const int64_t shape = (int64_t)(p.bytes / e);
    p.dev_mirror = malloc(p.bytes), p.host_mirror = malloc(p.bytes), p.readback = malloc(p.bytes);
    sift_status st = p.dev_mirror && p.host_mirror && p.readback ? SIFT_OK : SIFT_E_NOMEM;
    if (st == SIFT_OK) st = sift_tensor_create(ctx, t, 1, &shape, &p.dev);
    if (st == SIFT_OK) st = sift_tensor_create_host(ctx, t, 1, &shape, &p.host);
    if (st != SIFT_OK) pair_free(&p);
    TRY(st);
    sift_copy_region r[8];
    char what[160];
    for (int through_host = 0; through_host < 2; through_host++) {
        pair_fill(&p, t, (uint64_t)(10 + through_host));
        const size_t n = copy_batch(&p, B, e, r);
        st = sift_tensors_copy(ctx, r, n, through_host);
        if (st != SIFT_OK) pair_free(&p);
        TRY(st);
        mirror_copies(&p, r, n);
        snprintf(what, sizeof what, "copies%s: %s %s, device <-> host memory, around byte %zu x 1, 2, 3", tag,
                 sift_dtype_name(t), through_host ? "through host memory" : "on the device", B);
        pair_expect(&p, t, what, b);
    }
    /* refused batches: a good copy first, which must not happen either */
    sift_tensor *other = NULL;
    st = sift_tensor_create(ctx, t == SIFT_F32 ? SIFT_F16 : SIFT_F32, 1, &shape, &other);
    if (st != SIFT_OK) pair_free(&p);
    TRY(st);
    struct {
        const char *what;
        sift_copy_region bad;
    } refused[] = {
        {"a destination overlapping another's", {p.dev, 0, p.host, 2 * B - 9 * e + 3 * e, 4 * e}},
        {"a destination overlapping a source", {p.host, 0, p.dev, B - 8 * e, 4 * e}},
        {"a copy within its own bytes", {p.dev, 4 * B / 2, p.dev, 4 * B / 2 + e, 8 * e}},
        {"a range past the source", {p.dev, p.bytes - 4 * e, p.host, 0, 8 * e}},
        {"a range past the destination", {p.dev, 0, p.host, p.bytes, e}},
        {"another element type", {other, 0, p.host, 0, 8 * e}},
        {"part of an element", {p.dev, 1, p.host, 64 * e, 2 * e}},
        {"no source", {NULL, 0, p.host, 0, e}},
    };
    pair_fill(&p, t, 20);
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        sift_copy_region batch[2] = {{p.dev, B - 6 * e, p.host, 2 * B - 9 * e, 20 * e}, refused[i].bad};
        const sift_status got = sift_tensors_copy(ctx, batch, 2, false);
        snprintf(what, sizeof what, "copies%s: %s: %s refused: %s", tag, sift_dtype_name(t), refused[i].what,
                 sift_status_name(SIFT_E_INVALID));
        report(what, b, "status", (double)got, (double)SIFT_E_INVALID, got == SIFT_E_INVALID);
    }
    snprintf(what, sizeof what, "copies%s: %s: nothing copied by the refused batches", tag, sift_dtype_name(t));
    pair_expect(&p, t, what, b);
    sift_tensor_destroy(other);
    pair_free(&p);
}

static void copies(const char *b)
{
    copy_type(b, split_tag, SIFT_F32, chunk_f32);
    copy_type(b, split_tag, SIFT_F16, chunk_f16);
    if (chunk_f32) return; /* the page move's figures once is enough */
    /* a page move: every layer's K, V (f32 rows of 32 bytes) and layer 1's int8 projected keys
     * (12 bytes) of 2 heads x 4 rows, timed */
    const char *cn = "copies: a page move";
    kv_cache_config cfg = base_config();
    cfg.kv_type = SIFT_F32;
    cfg.n_seq = 1;
    cfg.seq_tokens = cfg.pool_tokens = 40;
    cfg.device_tokens = 8;
    cfg.key_dim = DK;
    cfg.key_type = SIFT_I8;
    new_cache(&cfg);
    TRY(sift_kv_cache_reserve(cache, 0, 8));
    write_rows(0, 0, 0, 8, cfg.n_layer);
    TRY(sift_kv_cache_reserve(cache, 0, 9));
    sift_kv_move_times mt;
    sift_kv_cache_move_times(cache, &mt);
    expect_int(cn, b, "moves", mt.moves, 1);
    expect_int(cn, b, "bytes", (int64_t)mt.bytes, 2 * 2 * HKV * P * 32 + HKV * P * 12);
    report("copies: a page move took time", b, "us", mt.us, 0, mt.us > 0);
    expect_pages(cn, b, 0, (const int32_t[]){2, 1, 0}, 3);
    expect_rows(cn, b, 0, 0, 0, 8, cfg.n_layer);
}

static void bad_configs(const char *b)
{
    const char *cn = "bad config";
    struct {
        const char *what;
        kv_cache_config cfg;
    } bad[4];
    for (int i = 0; i < 4; i++) bad[i].cfg = base_config();
    bad[0].what = "page size 3", bad[0].cfg.page_size = 3;
    bad[1].what = "K/V of int8", bad[1].cfg.kv_type = SIFT_I8;
    bad[2].what = "3 resident layers of 2", bad[2].cfg.resident_layers = 3;
    bad[3].what = "no sequence", bad[3].cfg.n_seq = 0;
    for (int i = 0; i < 4; i++) {
        kv_cache *c = NULL;
        const sift_status st = sift_kv_cache_create(ctx, &bad[i].cfg, &c);
        char what[96];
        snprintf(what, sizeof what, "refused %s", bad[i].what);
        expect_status(cn, b, what, st, SIFT_E_INVALID);
        sift_kv_cache_destroy(c);
    }
}

/* Runs one case; a failed call inside it (TRY) ends it here. */
static void run_case(void (*fn)(const char *), const char *name, const char *b)
{
    test_case_begin(name, b);
    if (!setjmp(case_end)) fn(b);
    sift_kv_cache_destroy(cache);
    cache = NULL;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("SIFT_VULKAN_VALIDATION", "1", 0);
    void (*cases[])(const char *) = {paging, rewind_sequences, host_pools, synthetic, copies, bad_configs};
    const char *names[] = {"paging", "rewind", "host pools", "synthetic", "copies", "bad config"};
    for (int kind = 0; kind < SIFT_BACKEND_COUNT; kind++) {
        ctx = test_context_open((sift_backend_kind)kind, "kv-cache", false);
        if (!ctx) continue;
        const char *b = sift_backend_kind_name((sift_backend_kind)kind);
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(cases[i], names[i], b);
        test_context_done(ctx);
    }
    /* Vulkan with its tensors split into chunks (vk_memory.c), each a buffer of its own: chunks of
     * 4096 bytes with f16 stored as f32 (each half then 4 bytes, a chunk 2048 halves); and the small
     * profile, whose buffers reach 2^27 bytes (f16 stored as f32 there too). The environment is
     * read when a context opens. */
    const struct {
        const char *var, *value, *tag;
        size_t chunk_f32, chunk_f16;
    } split[] = {{"SIFT_VULKAN_CHUNK_BYTES", "4096", " (chunks of 4096 bytes, f16 as f32)", 4096, 2048},
                 {"SIFT_VULKAN_PROFILE", "small", " (small profile: chunks of 2^27 bytes, f16 as f32)", 1u << 27, 1u << 26}};
    for (size_t v = 0; v < sizeof split / sizeof *split; v++) {
        const bool f16_as_f32 = v == 0;
        setenv(split[v].var, split[v].value, 1);
        if (f16_as_f32) setenv("SIFT_VULKAN_F16_AS_F32", "1", 1);
        ctx = test_context_open(SIFT_BACKEND_VULKAN, "kv-cache", false);
        unsetenv(split[v].var);
        if (f16_as_f32) unsetenv("SIFT_VULKAN_F16_AS_F32");
        if (!ctx) continue;
        chunk_f32 = split[v].chunk_f32, chunk_f16 = split[v].chunk_f16, split_tag = split[v].tag;
        run_case(copies, "copies", "vulkan");
        test_context_done(ctx);
    }
    return test_summary("kv-cache", NULL);
}
