/* The paged KV cache (engine-private), a type of its own that a session holds: per layer a K and a
 * V pool of pages (P tokens each) shared by the sequences, and TokenButler's projected keys on the
 * same pages; each sequence has a page table and paged views of the pools, so a sequence grows by
 * taking pages from a free list, never by copying, and a rewind gives its pages back.
 *
 * KV offload (device_tokens): the physical pages are of two kinds, [0, device pages) on the device
 * and the rest in host memory the device reads in place. A family that moves (K and V, or V only)
 * is a device pool and a host pool viewed as one (sift_tensor_paged_view_pools); a resident one (K
 * under offload_v_only, the resident layers, the projected keys always) is one device pool of every
 * page. When the device pages run out, a sequence's oldest device page past the pinned ones is
 * copied to a host page and its device page reused: every layer's and family's rows of the page in
 * one batch of copies on the device (sift_tensors_copy), or through host memory where the backend
 * has no such copy or SIFT_KV_MOVE_THROUGH_HOST=1 was set when the cache was created.
 *
 * Rows are addressed as every backend addresses them: sift_kv_phys_row, then sift_kv_row_storage
 * (backend.h); nothing here computes where a row lives on its own. */
#ifndef SIFT_KV_CACHE_H
#define SIFT_KV_CACHE_H

#include "engine.h"

/* The families of rows a layer caches. */
typedef enum kv_family {
    KV_K,        /* keys [Hkv][R][D] */
    KV_V,        /* values [Hkv][R][D] */
    KV_KP,       /* TokenButler's projected keys [Hkv][R][d' + sift_key_row_extra] (layers >= 1) */
    KV_FAMILIES
} kv_family;

typedef struct kv_cache_config {
    uint32_t n_layer;
    int64_t n_kv_heads, head_dim;
    sift_dtype kv_type;       /* K and V: f16 or f32 */
    int64_t page_size;        /* P: tokens per page, a power of two up to 2^20 */
    int n_seq;                /* sequences, each with its own page table */
    int64_t seq_tokens;       /* positions per sequence (the context) */
    int64_t pool_tokens;      /* tokens of the pool, all sequences together (whole pages: rounded up) */
    int64_t device_tokens;    /* KV offload: tokens of the pool on the device (rounded up to pages); 0, or
                               * at least the pool: no offload */
    bool offload_v_only;      /* under offload only V moves; K stays on the device whole */
    uint32_t resident_layers; /* under offload layers [0, n) stay on the device whole (TokenButler's dense
                               * layer 0, which reads every row every step) */
    int64_t pinned_tokens;    /* under offload the pages of positions [0, n) never move (the sink) */
    int64_t key_dim;          /* d' of the projected keys of layers >= 1 (TokenButler's layer 0 scores
                               * nothing); 0: none */
    sift_dtype key_type;      /* their type: f16, f32 or i8 (each row's scale after it) */
} kv_cache_config;

typedef struct kv_cache kv_cache;

/* The cache of cfg on ctx: every pool allocated, every sequence empty. SIFT_E_INVALID (or the
 * allocation's error) naming what is wrong; *out is NULL then. */
sift_status sift_kv_cache_create(sift_context *ctx, const kv_cache_config *cfg, kv_cache **out);
void sift_kv_cache_destroy(kv_cache *c);

/* Whether layer l's family f has a host pool under offload (whether or not cfg offloads): V and,
 * unless offload_v_only, K of the layers past the resident ones; never the projected keys, which
 * scoring reads whole every step. */
bool sift_kv_cache_moves(const kv_cache_config *cfg, uint32_t l, kv_family f);

/* The pages of positions [0, tokens) are pinned from now on (the policy's sink changed). */
void sift_kv_cache_set_pinned(kv_cache *c, int64_t tokens);

/* The rows sequence seq holds: positions [0, len) written. */
int64_t sift_kv_cache_len(const kv_cache *c, int seq);

/* Gives sequence seq the pages positions [0, end) need, from the free device pages, then (offload)
 * by moving its oldest unpinned device page to the host, then from the host pages. SIFT_E_LIMIT
 * past seq_tokens, or where the pool has too few pages free, taking none. */
sift_status sift_kv_cache_reserve(kv_cache *c, int seq, int64_t end);

/* Rows [len, len + n) of seq were written (their pages reserved): they count from now on. */
void sift_kv_cache_advance(kv_cache *c, int seq, int64_t n);

/* Forgets the rows of seq from pos on (0 <= pos <= len) and gives back the pages past pos. */
sift_status sift_kv_cache_rewind(kv_cache *c, int seq, int64_t pos);

/* Layer l's family f of sequence seq through its page table: a paged view of seq_tokens rows
 * (rounded up to pages) per KV head, which kv_write writes and attention reads. NULL where there
 * is none (the projected keys without key_dim, or of layer 0). */
sift_tensor *sift_kv_cache_view(const kv_cache *c, int seq, uint32_t l, kv_family f);

/* Sequence seq's page table: the physical page of each of its *n_pages logical pages (pages
 * [0, device pages) are on the device, the others in host memory). */
const int32_t *sift_kv_cache_pages(const kv_cache *c, int seq, int64_t *n_pages);

/* Rows [pos0, pos0 + n) of layer l's K (f = KV_K) or V (KV_V) of sequence seq, every KV head, as
 * f32 into dst [Hkv][dst_rows][D] at rows pos0 .. pos0 + n - 1: the host's copy of the cache (a
 * policy's mirror). The rows lie in the pages held (reserved), written or not: a step's rows are
 * read after its graph wrote them and before they count (sift_kv_cache_advance). */
sift_status sift_kv_cache_read_rows(const kv_cache *c, int seq, uint32_t l, kv_family f, int64_t pos0, int64_t n, float *dst,
                                    int64_t dst_rows);

/* Appends n rows of pseudo-random values (from seed) to sequence seq in every layer and family,
 * written a run of adjacent pages at a time, as a prefill would leave them but without computing
 * them (sift_session_fill_synthetic). */
sift_status sift_kv_cache_fill_synthetic(kv_cache *c, int seq, int64_t n, uint64_t seed);

/* K and V pool bytes on the device and in host memory together; of them, those of the pages in
 * use (the share of pages held); the projected keys' bytes; and the pools' figures. */
size_t sift_kv_cache_bytes(const kv_cache *c);
size_t sift_kv_cache_used_bytes(const kv_cache *c);
size_t sift_kv_cache_key_bytes(const kv_cache *c);
void sift_kv_cache_pools(const kv_cache *c, sift_kv_pool_info *out);
/* The page moves so far, their host time and the bytes they copied (sift_session_kv_move_times). */
void sift_kv_cache_move_times(const kv_cache *c, sift_kv_move_times *out);

/* Copies n regions between tensors' storage (backend.h sift_copy_region; here src and dst may be
 * views, offsets counting from the view's start), as one batch: the backend's tensor_copy, on the
 * device and waited for once, where it has one and through_host is false; else a read and a write
 * a region through host memory. Every region is checked before anything is copied: the tensors of
 * ctx, no paged view, the destination no graph intermediate, one element type with an element size
 * (not block-quantized), whole elements, in range, and no destination overlapping another region's
 * source or destination; SIFT_E_INVALID naming the region otherwise, nothing copied. A failed copy
 * leaves every source as it was. Regions of 0 bytes are skipped. The KV cache's page moves are its
 * only caller, hence its place. */
sift_status sift_tensors_copy(sift_context *ctx, const sift_copy_region *regions, size_t n, bool through_host);

#endif
