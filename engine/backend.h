/* The backend interface: the only thing the engine knows of a backend, and the only engine
 * header a backend includes. A backend maps each op of the graph to its kernels; the meaning of
 * every op lives in the engine (validation, shapes) and in the CPU reference. */
#ifndef SIFT_BACKEND_H
#define SIFT_BACKEND_H

#include "sift.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ops, from the op table (engine/ops.def). */
typedef enum sift_op {
#define SIFT_OP(id, name, min_src, max_src, flags) SIFT_OP_##id,
#include "ops.def"
#undef SIFT_OP
    SIFT_OP_COUNT
} sift_op;

enum {
    SIFT_OPF_SKIPPABLE = 1 << 0, /* a predicate (sift_graph_skip_if) may skip the node */
    SIFT_OPF_PAGED_KV = 1 << 1,  /* inputs 1 and 2 (K, V) may be paged views */
    SIFT_OPF_PAGED_DST = 1 << 2, /* the output may be a paged view */
    SIFT_OPF_STATE_SRC = 1 << 3, /* input max_src - 1, when given, is state the node reads and updates
                                  * (select's warm start): order it as an output too */
};

struct sift_node;

/* One op's description (the table of engine/ops.def, in graph.c). */
typedef struct sift_op_info {
    const char *name;
    int min_src, max_src;
    unsigned flags;                            /* SIFT_OPF_* */
    double (*bytes)(const struct sift_node *n); /* the bytes the node must read and write at least */
} sift_op_info;

/* The description of op (never NULL: an op outside the table gets a row named "unknown"). */
const sift_op_info *sift_op_info_of(sift_op op);

struct sift_tensor {
    sift_context *ctx;
    sift_graph *owner;          /* graph that created it, or NULL for a caller's tensor */
    sift_dtype dtype;
    int ndim;
    int64_t shape[SIFT_MAX_DIMS];
    int64_t stride[SIFT_MAX_DIMS]; /* in elements; row-major contiguous today */
    size_t nbytes;
    bool has_data;              /* written by the host, or produced by a computed graph */
    char name[48];
    void *impl;                 /* the backend's storage (a view shares its parent's) */
    size_t offset;              /* bytes from the start of impl's storage: non-zero only for views */
    struct sift_tensor *parent; /* the tensor owning the storage, for views; NULL otherwise */
    /* Paged views (sift_tensor_paged_view): the page table i32 [n_pages] and P, else NULL and 0.
     * shape[1] is the logical row count n_pages * P; parent->shape[1] the pool's physical rows;
     * strides are the pool's. Logical row j is physical row pages[j / P] * P + j % P. */
    const struct sift_tensor *pages;
    int64_t page_size;
    /* A paged view of two pools (sift_tensor_paged_view_pools): the second pool, in host memory
     * the device reads (host_memory), else NULL. Physical pages [0, parent's pages) are the
     * parent's, pages [parent's pages, parent's + host_pool's) are host_pool's, in order. */
    const struct sift_tensor *host_pool;
    /* Placement of a tensor owning storage, fixed at creation (sift_tensor_create_host): false,
     * device memory; true, host memory the device reads and writes in place (CPU: ordinary
     * memory; Vulkan: a host-visible heap; CUDA: mapped pinned memory). Views copy it. */
    bool host_memory;
    /* Of a tensor owning storage: its handle (1 until sift_tensor_destroy) plus its live views
     * (paged views count on their pool and on their page table); the storage is freed at 0.
     * Changed under the context's lock. 0 on views. */
    int refs;
};

/* The selection layout of select (SPEC §3.3), resolved once by sift_op_select: each list is
 * [0, sink) ++ the chosen top-k candidates (positions first + i of the votes' columns i) ++
 * [win_begin, win_begin + win_count). */
typedef struct sift_select_layout {
    int64_t sink;      /* min(S, N): positions kept at the start */
    int64_t first;     /* S: the position of candidate 0 */
    int64_t cand;      /* |C| = max(0, N - S - W) */
    int64_t chosen;    /* min(k, |C|) */
    int64_t win_begin; /* max(sink, N - W) */
    int64_t win_count; /* N - win_begin */
    int64_t count;     /* entries per list: sink + chosen + win_count */
} sift_select_layout;

/* The layout of p (p validated: N >= 1, S, W, k >= 0). */
sift_select_layout sift_select_layout_of(const sift_select_params *p);

/* Entries of a TokenButler list: select's, and with neighbour fetch one more per chosen position
 * (sift_op_neighbor_fetch). */
static inline int64_t sift_butler_list_len(const sift_select_layout *l, bool neighbor_fetch)
{
    return l->count + (neighbor_fetch ? l->chosen : 0);
}

/* The positions the queries of an attention node (gather_attend, dense_attend, causal_attend,
 * causal_attend_sparse) visit, resolved by its constructor. Entry e of a query's walk is position
 * list[e] for e < list_len (list: the node's indices, its KV head's or the shared one), else
 * range0 + (e - list_len). Query row t of `tokens` visits the first n - (tokens - 1 - t) entries:
 *   gather: the list (n = L);          dense: [0, N) (n = N);
 *   causal: [0, pos0 + t] (n = pos0 + T);  sparse: the list, then [pos0, pos0 + t] (n = L + T). */
typedef struct sift_attend_walk {
    int64_t tokens;   /* query rows per head: 1 for the decode ops, T for the causal ones */
    int64_t list_len; /* entries taken from the list (0 without one) */
    int64_t range0;   /* entry e >= list_len is position range0 + (e - list_len) */
    int64_t n;        /* entries of the last query row */
} sift_attend_walk;

/* Every parameter an op can take; each op reads the fields its comment in sift.h names. The op
 * constructors fill them, derived values included; backends only read them. */
typedef struct sift_node_params {
    int64_t begin, end;         /* score: candidate positions [begin, end) */
    sift_select_params sel;     /* select, neighbor_fetch: as given */
    sift_select_layout layout;  /* select, neighbor_fetch: derived from sel */
    int64_t n_ctx;              /* dense_attend */
    sift_attend_walk walk;      /* the attention ops: derived from their shapes and positions */
    float scale;                /* score, gather_attend, dense_attend, causal_attend(_sparse) */
    sift_vote_mode vote;        /* vote */
    float eps;                  /* rmsnorm, layernorm */
    int64_t pos0;               /* rope, kv_write, causal_attend(_sparse): position of row 0 */
    sift_rope_params rope;      /* rope; gather_attend when rope_keys */
    /* rope, gather_attend with rope_keys: pair i of the first n_rot dims turns by
     * position * rope_freq[i] (/ factor[i] for rope with factors), rope_freq[i] = base^(-2i / n_rot) */
    float rope_freq[SIFT_MAX_HEAD_DIM / 2];
    bool rope_keys;             /* gather_attend: rotate the key at list rank i to position i (SPEC §6) */
    float theta;                /* sel_cache_check */
    int full;                   /* sel_cache_check */
    int64_t col0, start;        /* fill_range; col0: kv_gather's first output column */
} sift_node_params;

#define SIFT_NODE_MAX_SRC 4

typedef struct sift_node {
    sift_op op;
    int n_src;
    const sift_tensor *src[SIFT_NODE_MAX_SRC];
    sift_tensor *dst;
    sift_node_params p;
    /* Predicate (sift_graph_skip_if): when skip is not NULL and f32 element skip_elem of it is
     * non-zero at run time, the node does nothing. Backends count skip as an input. */
    const sift_tensor *skip;
    int64_t skip_elem;
    /* The stage of the step that appended the node (sift_graph_set_stage: a static string such as
     * "qkv"), for the session's profile; NULL: none given. Backends ignore it. */
    const char *stage;
} sift_node;

struct sift_graph {
    sift_context *ctx;
    sift_node *nodes;
    int n_nodes, cap_nodes;
    sift_tensor **owned;        /* intermediates created by the graph */
    int n_owned, cap_owned;
    sift_tensor **pooled;       /* the context's pool buffers its intermediates are views of (graph_pool.c) */
    int n_pooled;               /* (at most n_owned) */
    unsigned version;           /* bumped on every change, so backends can cache recordings */
    void *backend_cache;        /* a backend's recording of this graph (freed through the vtable) */
    const sift_tensor *skip;    /* the predicate given to nodes appended now (sift_graph_skip_if) */
    int64_t skip_elem;
    const char *stage;          /* the stage given to nodes appended now (sift_graph_set_stage) */
    unsigned checked;           /* version + 1 when the checks before a run passed (0: not since a change) */
    bool in_flight;             /* submitted (sift_graph_submit) and not waited for yet */
};

/* One copy of tensor_copy: `bytes` bytes from byte src_offset of src's storage to byte dst_offset
 * of dst's. src and dst own their storage (never views: offsets count from the storage's start),
 * as sift_tensor_read and sift_tensor_write see it (an f16 tensor's bytes are halves whatever the
 * backend stores). */
typedef struct sift_copy_region {
    const sift_tensor *src;
    size_t src_offset;
    sift_tensor *dst;
    size_t dst_offset;
    size_t bytes;
} sift_copy_region;

typedef struct sift_backend_vtable {
    const char *name;
    void (*destroy)(void *be);
    /* Whether this backend runs node n (its op, and where it matters its types and parameters).
     * The engine asks before every compute, and refuses a graph with a node that is not supported,
     * naming the node, the op and the backend. NULL: every node. */
    bool (*supports_op)(void *be, const struct sift_node *n);
    /* Allocates storage for t (t->nbytes may be 0) and sets t->impl. Never called for views: an op
     * operand's data starts t->offset bytes into t->impl; tensor_write/read get the owning tensor. */
    sift_status (*tensor_alloc)(void *be, sift_tensor *t);
    void (*tensor_free)(void *be, sift_tensor *t);
    sift_status (*tensor_write)(void *be, sift_tensor *t, size_t offset, const void *src, size_t bytes);
    sift_status (*tensor_read)(void *be, const sift_tensor *t, size_t offset, void *dst, size_t bytes);
    /* Runs all nodes in order. At most one of node_us and span_us is not NULL: node_us has
     * g->n_nodes entries to fill with each node's device time (a timestamp between nodes, which
     * keeps them apart); *span_us gets the device time of the whole run, timed at its two ends
     * only, the nodes running as they do untimed. */
    sift_status (*graph_compute)(void *be, sift_graph *g, double *node_us, double *span_us);
    /* A decode step recorded while the one before it runs (sift_graph_prepare). Both may be NULL:
     * graph_prepare plans and records g for an untimed run without running it or touching the
     * device memory a running graph uses; graph_submit queues an untimed run of g and returns
     * without waiting for it (NULL: graph_compute), and sync waits for it (NULL: nothing is ever
     * left running). A backend runs what is submitted in order, one graph after the other, and any
     * other call that uses the device (a tensor read or write, a compute) first waits for a run
     * still in flight: so a graph's storage may be handed to the next graph built while it runs. */
    sift_status (*graph_prepare)(void *be, sift_graph *g);
    sift_status (*graph_submit)(void *be, sift_graph *g);
    sift_status (*sync)(void *be);
    /* Copies n regions between tensors' storage without passing through the caller's memory
     * (device memory and host memory the device reads, host_memory, either way), as one submission
     * waited for once: when it returns every byte is in place, and the host may read a host-memory
     * destination. Like a read or a write it first waits for a run still in flight. The engine has
     * checked every region (sift_tensors_copy, kv_cache.h): in range, src and dst of one element
     * type that has an element size (no block-quantized or planar storage), whole elements, and no
     * destination overlapping another region's source or destination, so the regions may be copied
     * in any order. On failure some destinations may be written in part; sources never change.
     * NULL: the engine copies through host memory (a read, then a write, per region). */
    sift_status (*tensor_copy)(void *be, const sift_copy_region *regions, size_t n);
    /* Frees g->backend_cache (may be NULL). */
    void (*graph_release)(void *be, sift_graph *g);
    /* Validation-layer messages seen so far (NULL where the backend has none). */
    int64_t (*validation_messages)(void *be);
    /* Whether the device is a CPU emulation of the backend's API (lavapipe, llvmpipe, SwiftShader):
     * slower than the CPU backend, so never chosen on its own. NULL: a real device. */
    bool (*is_emulated)(void *be);
    /* Sets the host threads the backend computes with (n >= 1, checked by the engine); results
     * must not depend on it. NULL: the backend has no such setting, and the call is ignored. */
    sift_status (*set_threads)(void *be, int n);
    /* The device memory free now, in bytes, for sift_model_estimate (the CPU backend: the host's
     * available memory). NULL, or a status other than SIFT_OK: the backend cannot tell. */
    sift_status (*memory_free)(void *be, uint64_t *bytes);
} sift_backend_vtable;

/* What a context asks of its backend (sift_context_config). */
typedef struct sift_backend_open_args {
    int device;  /* an index of the backend's device list, or -1: its default (its environment
                  * variable where set, else its own choice) */
    int threads; /* the CPU backend's threads; 0: its default (SIFT_THREADS, else the cores) */
} sift_backend_open_args;

/* Each backend exports one open function. It fills *be and *vt, writes a device description into
 * name (size name_len) and the index of the device it opened into *device, or returns
 * SIFT_E_UNAVAILABLE with a reason via sift_set_error (SIFT_E_INVALID for a device index out of
 * range). The engine never runs two open, destroy or device-list calls at once. */
typedef sift_status (*sift_backend_open_fn)(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt,
                                            char *name, size_t name_len, int *device);
sift_status sift_backend_cpu_open(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt, char *name,
                                  size_t name_len, int *device);
sift_status sift_backend_vulkan_open(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt,
                                     char *name, size_t name_len, int *device);
sift_status sift_backend_cuda_open(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt, char *name,
                                   size_t name_len, int *device);

/* And one device-list function, which needs no open context: *n gets the number of devices and,
 * when info is not NULL, *info the description of device index (0 <= index < *n, else
 * SIFT_E_INVALID). SIFT_E_UNAVAILABLE (and *n = 0) where the backend has no driver or device. */
typedef sift_status (*sift_backend_devices_fn)(int index, sift_device_info *info, int *n);
sift_status sift_backend_cpu_devices(int index, sift_device_info *info, int *n);
sift_status sift_backend_vulkan_devices(int index, sift_device_info *info, int *n);
sift_status sift_backend_cuda_devices(int index, sift_device_info *info, int *n);

/* Records the message for sift_last_error() and returns s. printf-style. */
sift_status sift_set_error(sift_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A message for the log of the context whose call is running on this thread (sift_log_fn; the
 * default, stderr for WARN and ERROR, where none is). printf-style, no trailing newline. */
void sift_log(sift_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- facts every backend shares ------------------------------------------------------------ */

/* The elements a key row of type t holds past its d values: an int8 row (SIFT_I8, TokenButler's
 * quantized keys) ends in its f32 scale, 4 bytes; other types hold d values only. */
static inline int64_t sift_key_row_extra(sift_dtype t) { return t == SIFT_I8 ? 4 : 0; }

const char *sift_op_name(sift_op op);

/* base^(-2i / n_rot) for the n_rot / 2 pairs of p: the one definition of RoPE's frequencies, which
 * the op constructors store in the node (rope_freq) and the host code (model.c) uses. */
void sift_rope_freqs(const sift_rope_params *p, float *freq);

/* The KV head of query head h: g(h) = h / (Hq / Hkv) (SPEC §2). */
static inline int sift_kv_head(int h, int n_q_heads, int n_kv_heads)
{
    return h / (n_q_heads / n_kv_heads);
}

/* A float's position in the total order used by select: larger key = larger value; -0 equals +0.
 * GPU kernels compute the same mapping (docs/kernels.md). */
static inline uint32_t sift_order_key(uint32_t bits)
{
    if ((bits & 0x7fffffffu) == 0) bits = 0;
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

/* The bytes of a key row of d values of type t: the values, and an int8 row's scale after them. */
static inline size_t sift_key_row_bytes(sift_dtype t, int64_t d)
{
    return (size_t)(d + sift_key_row_extra(t)) * sift_dtype_size(t);
}

/* Paging (sift_tensor_paged_view): logical row j of a paged K/V view lies in logical page j / P at
 * row j % P, and its page table names the physical page. P is a power of two, so GPU kernels
 * shift and mask: this is the shift. */
static inline int sift_kv_page_shift(int64_t page_size)
{
    int shift = 0;
    while (((int64_t)1 << shift) < page_size) shift++;
    return shift;
}

/* The physical pages of a paged view's pools: its parent's and, with two pools, its host pool's,
 * numbered in that order. A page table entry outside [0, this) names no page. */
static inline int64_t sift_kv_pool_pages(const sift_tensor *t)
{
    int64_t pool_rows = t->parent->shape[1];
    if (t->host_pool) pool_rows += t->host_pool->shape[1];
    return pool_rows / t->page_size;
}

/* The physical row of logical row j of a K/V tensor (paged or not) given its page table's data,
 * or -1 where the page table names no page of the pool: the one definition of paging, which
 * every backend's address function follows. A view of two pools numbers their rows on: rows
 * [0, R) are the parent's (R its rows per KV head), rows [R, R + Rh) the host pool's
 * (sift_kv_pool_row). */
static inline int64_t sift_kv_phys_row(const sift_tensor *t, const int32_t *pages, int64_t j)
{
    if (j < 0 || j >= t->shape[1]) return -1; /* a skipped list entry (-1), or past the cache */
    if (!t->pages) return j;
    const int64_t page = pages[j / t->page_size];
    if (page < 0 || page >= sift_kv_pool_pages(t)) return -1;
    return page * t->page_size + j % t->page_size;
}

/* The tensor holding physical row *row (>= 0, from sift_kv_phys_row) of t, and the row in it:
 * t itself where t has one pool; else its parent, or its host pool for rows past the parent's
 * (*row then counts from the host pool's first row). */
static inline const sift_tensor *sift_kv_pool_row(const sift_tensor *t, int64_t *row)
{
    if (!t->host_pool || *row < t->parent->shape[1]) return t;
    *row -= t->parent->shape[1];
    return t->host_pool;
}

/* Where physical row `row` (>= 0, from sift_kv_phys_row) of KV head h of t is stored: the tensor
 * that owns the storage (never a view: a pool, or the host pool) and the row's byte offset in it.
 * How the host reaches a row, through a pointer (the CPU backend) or through sift_tensor_read and
 * sift_tensor_write (the engine's KV cache, which reads and writes pools). */
static inline const sift_tensor *sift_kv_row_storage(const sift_tensor *t, int64_t h, int64_t row, size_t *offset)
{
    const sift_tensor *pool = sift_kv_pool_row(t, &row);
    *offset = pool->offset + (size_t)(h * pool->stride[0] + row * pool->stride[1]) * sift_dtype_size(pool->dtype);
    return pool->parent ? pool->parent : pool;
}

/* f32 dot product with eight running sums: the same arithmetic as one sum, in an order the
 * compiler can vectorize without fast-math. The CPU reference and the host policies (policy.c)
 * both use it, so their scores agree bit for bit. */
static inline float sift_dot_f32(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) acc[0] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* IEEE half -> float, exact, without branches (inline: the CPU reference converts every K/V
 * element it reads, and this form vectorizes). The magnitude bits shifted into float position are
 * the value times 2^-112, subnormals included; a multiply by 2^112 restores it. */
static inline float sift_half_to_float(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } x, special;
    x.u = (uint32_t)(h & 0x7fffu) << 13;
    special.u = x.u | 0x7f800000u; /* exponent 31: infinity or NaN */
    x.f *= 0x1p112f;
    x.u = ((h & 0x7c00u) == 0x7c00u ? special.u : x.u) | ((uint32_t)(h & 0x8000u) << 16);
    return x.f;
}
uint16_t sift_float_to_half(float f);

/* n values of a row of type t (float or quantized; n a multiple of the block) to f32: the one
 * definition of the weight formats (engine/quant.c). */
void sift_row_to_f32(sift_dtype t, const void *src, float *dst, int64_t n);

/* The GPU backends store q8_0 and q4_0 rows *planar*: a row's quants (32 or 16 bytes per block)
 * first, then its f16 scales, so that the quants of a row with a multiple of 256 values start
 * 16-byte aligned and load 16 bytes at a time. A row takes as many bytes as in ggml's layout, so
 * whole-row offsets are the same in both; the API (sift_tensor_write / read) always speaks ggml's.
 * sift_planar_xfer moves bytes [offset, offset + bytes) of such a tensor (rows of row_values
 * values) between the caller's ggml-layout memory and the backend's planar storage: it writes from
 * src, or (src NULL) reads into dst. It converts whole rows, at most chunk_bytes of them at a time,
 * through io (which reads or writes raw stored bytes); a write that covers a row in part reads the
 * row first. */
typedef sift_status (*sift_stored_io)(void *ctx, size_t offset, void *buf, size_t bytes, bool write);
bool sift_dtype_is_planar(sift_dtype t);
sift_status sift_planar_xfer(sift_dtype t, int64_t row_values, size_t offset, const void *src, void *dst, size_t bytes,
                             size_t chunk_bytes, sift_stored_io io, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
