/* The CUDA backend: device memory through the CUDA runtime (linked statically), one stream, the
 * kernels in the .cu files of cuda/ (docs/kernels.md), reached through one table indexed by op
 * (cuda_ops: each op's plan and launch, expanded from the op table engine/ops.def).
 *
 * Tensors are plain cudaMalloc allocations, zeroed like the CPU backend's; a tensor in host memory
 * (sift_tensor_create_host: KV offload's host pools) is mapped pinned memory that the kernels
 * read in place. A graph's launch geometry and its nodes' places in the backend's two arenas (scratch:
 * vote and attention partials, radix buffers; zeroed state: tickets, radix histograms) are planned
 * once per graph version and cached in g->backend_cache. The arenas grow to the largest graph's
 * need, so a decode step (a new graph each token) allocates nothing. Untimed runs replay the node sequence as a CUDA
 * graph recorded on the second run (SIFT_CUDA_GRAPH=0 launches the kernels one by one instead), timed
 * runs launch directly with an event pair around each node. Every run ends with a stream
 * synchronization; every CUDA error becomes SIFT_E_BACKEND naming the call. */
#include "backend.h"

#include "cuda/sift_cuda.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The (cos, sin) table of gather_attend_rope (SPEC §6): row r, pair p turns by theta = r * freq[p],
 * freq the node's rope_freq, computed on the host with the CPU reference's cosf and sinf (the same
 * angles to the bit). One per frequency set, grown as longer lists come; a grown-out table stays
 * allocated until the backend closes, since plans of older graphs may still point at it. */
typedef struct cuda_rope_table {
    int half; /* pairs per row: n_rot / 2 */
    float freq[SIFT_MAX_HEAD_DIM / 2];
    int64_t rows;
    void *dev; /* float2 [rows][half] */
} cuda_rope_table;

typedef struct cuda_backend {
    int device;
    cudaStream_t stream;
    cudaStream_t capture; /* where graph_prepare records and uploads (never runs a kernel), made on first use */
    cudaEvent_t uploaded; /* recorded on it after each upload: the next run waits for it */
    /* The recording of the last graph destroyed, idle since, for the next recording to update in
     * place of instantiating one anew (record): a decode step's graph is the last one's with other
     * parameters. spare_gen: the arenas' generation it was made for. */
    cudaGraphExec_t spare;
    unsigned spare_gen;
    sift_cuda_device dev;
    cudaEvent_t *events; /* timing pool, 2 per node of the largest timed graph so far */
    int n_events;
    int use_graphs;
    cuda_rope_table *ropes;
    int n_ropes;
    /* The arenas every graph uses, since graphs run one at a time on the one stream: scratch, and
     * zeroed state (sift_cuda.h: zero between runs, so graphs share it freely). A failed run
     * leaves the zeroed arena dirty, to be zeroed before the next; a recording made before an
     * arena moved is made again (arena_gen). */
    void *scratch, *zeroed;
    size_t scratch_bytes, zeroed_bytes;
    unsigned arena_gen;
    bool zeroed_dirty;
} cuda_backend;

/* Every op's plan and launch, indexed by op and expanded from the op table (sift_cuda.h declares
 * each: sift_cuda_<name>_plan and sift_cuda_<name>_launch, or the functions an op shares). */
typedef struct cuda_op {
    sift_cuda_plan_fn *plan;
    sift_cuda_launch_fn *launch;
} cuda_op;

/* The plan of an op with nothing to decide. */
cudaError_t sift_cuda_no_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev, (void)n, (void)plan;
    return cudaSuccess;
}

static const cuda_op cuda_ops[SIFT_OP_COUNT] = {
#define SIFT_OP(id, name, min_src, max_src, flags) [SIFT_OP_##id] = {sift_cuda_##name##_plan, sift_cuda_##name##_launch},
#include "ops.def"
#undef SIFT_OP
};

typedef struct cuda_plan {
    sift_cuda_plan k;
    size_t scratch_off, zeroed_off; /* in the backend's arenas */
} cuda_plan;

typedef struct cuda_cache {
    unsigned version;
    int n;
    cuda_plan *plans;
    size_t scratch_bytes, zeroed_bytes; /* of the backend's arenas */
    int runs;              /* completed runs: the first launches directly, later ones replay a recording */
    bool uploading;        /* exec's upload was queued on the capture stream (graph_prepare) */
    cudaGraphExec_t exec;  /* the recorded node sequence, or NULL */
    unsigned exec_gen;     /* the arenas' generation when exec was recorded */
} cuda_cache;

/* ---- errors ---------------------------------------------------------------------------------- */

static sift_status fail(cudaError_t e, const char *call)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so the context stays usable */
    return sift_set_error(SIFT_E_BACKEND, "cuda: %s failed: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) return fail(e_, #call);                                                                 \
    } while (0)

static sift_status set_device(const cuda_backend *b)
{
    CU(cudaSetDevice(b->device));
    return SIFT_OK;
}

static sift_status no_device_memory(size_t bytes, const char *what)
{
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    return sift_set_error(SIFT_E_DEVICE_NOMEM, "cuda: cannot allocate %zu bytes (%.1f MiB) for %s: %.1f MiB free of %.1f MiB",
                          bytes, (double)bytes / 1048576.0, what, (double)free_b / 1048576.0,
                          (double)total_b / 1048576.0);
}

/* ---- tensors --------------------------------------------------------------------------------- */

static void cuda_destroy(void *p)
{
    cuda_backend *b = p;
    if (!b) return;
    if (cudaSetDevice(b->device) == cudaSuccess) {
        for (int i = 0; i < b->n_events; i++) cudaEventDestroy(b->events[i]);
        for (int i = 0; i < b->n_ropes; i++) cudaFree(b->ropes[i].dev);
        if (b->scratch) cudaFree(b->scratch);
        if (b->zeroed) cudaFree(b->zeroed);
        if (b->stream) cudaStreamDestroy(b->stream);
        if (b->capture) cudaStreamDestroy(b->capture);
        if (b->uploaded) cudaEventDestroy(b->uploaded);
        if (b->spare) cudaGraphExecDestroy(b->spare);
    }
    (void)cudaGetLastError();
    free(b->ropes);
    free(b->events);
    free(b);
}

/* A tensor in host memory (sift_tensor_create_host): pinned, mapped into the device's address
 * space, zeroed; the kernels read and write it in place. With unified addressing (every 64-bit
 * platform CUDA supports) its device address is its host address, which impl holds. */
static sift_status host_tensor_alloc(cuda_backend *b, sift_tensor *t)
{
    void *h = NULL, *d = NULL;
    cudaError_t e = cudaHostAlloc(&h, t->nbytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return sift_set_error(SIFT_E_DEVICE_NOMEM,
                              "cuda: cannot allocate %zu bytes of pinned host memory for a %s tensor (cudaHostAlloc)",
                              t->nbytes, sift_dtype_name(t->dtype));
    }
    if (e != cudaSuccess) return fail(e, "cudaHostAlloc");
    e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess || d != h) {
        cudaFreeHost(h);
        if (e != cudaSuccess) return fail(e, "cudaHostGetDevicePointer");
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: device %d maps host memory at another address (no unified addressing)",
                              b->device);
    }
    memset(h, 0, t->nbytes);
    t->impl = h;
    return SIFT_OK;
}

static sift_status cuda_tensor_alloc(void *p, sift_tensor *t)
{
    cuda_backend *b = p;
    t->impl = NULL;
    if (t->nbytes == 0) return SIFT_OK;
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    if (t->host_memory) return host_tensor_alloc(b, t);
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, t->nbytes);
    if (e == cudaErrorMemoryAllocation) {
        char what[96];
        snprintf(what, sizeof what, "a %s tensor of %d dimensions", sift_dtype_name(t->dtype), t->ndim);
        return no_device_memory(t->nbytes, what);
    }
    if (e != cudaSuccess) return fail(e, "cudaMalloc");
    e = cudaMemsetAsync(d, 0, t->nbytes, b->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) {
        s = fail(e, "cudaMemsetAsync (zeroing a new tensor)");
        cudaFree(d);
        return s;
    }
    t->impl = d;
    return SIFT_OK;
}

static void cuda_tensor_free(void *p, sift_tensor *t)
{
    cuda_backend *b = p;
    if (t->impl && cudaSetDevice(b->device) == cudaSuccess) {
        if (t->host_memory) cudaFreeHost(t->impl);
        else cudaFree(t->impl);
    }
    (void)cudaGetLastError();
    t->impl = NULL;
}

/* Bytes [offset, offset + bytes) of t's storage as stored, written from buf or read into it. */
static sift_status stored_io(cuda_backend *b, const sift_tensor *t, size_t offset, void *buf, size_t bytes, bool write)
{
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    char *p = (char *)t->impl + offset;
    if (t->host_memory) { /* pinned host memory: copied by the CPU once the device's work is done */
        CU(cudaStreamSynchronize(b->stream));
        if (write) memcpy(p, buf, bytes);
        else memcpy(buf, p, bytes);
        return SIFT_OK;
    }
    if (write) CU(cudaMemcpyAsync(p, buf, bytes, cudaMemcpyHostToDevice, b->stream));
    else CU(cudaMemcpyAsync(buf, p, bytes, cudaMemcpyDeviceToHost, b->stream));
    CU(cudaStreamSynchronize(b->stream));
    return SIFT_OK;
}

/* q8_0 rows are stored planar (backend.h): a row's 32-byte quant blocks, then its scales, so that
 * the matrix-vector kernel reads the quants of a row of 256 k values 16 bytes at a time. */
static bool stored_planar(const sift_tensor *t) { return t->dtype == SIFT_Q8_0 && t->ndim > 0; }

typedef struct {
    cuda_backend *b;
    const sift_tensor *t;
} planar_io_ctx;

static sift_status planar_io(void *ctx, size_t offset, void *buf, size_t bytes, bool write)
{
    const planar_io_ctx *c = ctx;
    return stored_io(c->b, c->t, offset, buf, bytes, write);
}

#define CUDA_PLANAR_CHUNK ((size_t)64 << 20) /* bytes converted per transfer */

static sift_status cuda_tensor_write(void *p, sift_tensor *t, size_t offset, const void *src, size_t bytes)
{
    if (stored_planar(t)) {
        planar_io_ctx c = {p, t};
        return sift_planar_xfer(t->dtype, t->shape[t->ndim - 1], offset, src, NULL, bytes, CUDA_PLANAR_CHUNK, planar_io, &c);
    }
    return stored_io(p, t, offset, (void *)src, bytes, true);
}

static sift_status cuda_tensor_read(void *p, const sift_tensor *t, size_t offset, void *dst, size_t bytes)
{
    if (stored_planar(t)) {
        planar_io_ctx c = {p, t};
        return sift_planar_xfer(t->dtype, t->shape[t->ndim - 1], offset, NULL, dst, bytes, CUDA_PLANAR_CHUNK, planar_io, &c);
    }
    return stored_io(p, t, offset, dst, bytes, false);
}

/* Every region an asynchronous copy on the stream, after whatever runs there (a graph in flight),
 * and one wait at the end. With unified addressing the runtime tells device memory from mapped
 * pinned host memory by the address (cudaMemcpyDefault), so a copy between the two goes through a
 * copy engine over the host link, not through the CPU. */
static sift_status cuda_tensor_copy(void *p, const sift_copy_region *regions, size_t n)
{
    cuda_backend *b = p;
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    for (size_t i = 0; i < n; i++) {
        const sift_copy_region *r = &regions[i];
        const cudaError_t e = cudaMemcpyAsync((char *)r->dst->impl + r->dst_offset, (const char *)r->src->impl + r->src_offset,
                                              r->bytes, cudaMemcpyDefault, b->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            if (cudaStreamSynchronize(b->stream) != cudaSuccess) (void)cudaGetLastError(); /* the copies queued before it */
            return sift_set_error(SIFT_E_BACKEND, "cuda: cudaMemcpyAsync of copy %zu of %zu between tensors (%zu bytes) failed: %s (%s)",
                                  i + 1, n, r->bytes, cudaGetErrorString(e), cudaGetErrorName(e));
        }
    }
    const cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) {
        b->zeroed_dirty = true; /* the error may be a graph's still in flight */
        return fail(e, "cudaStreamSynchronize (copies between tensors)");
    }
    return SIFT_OK;
}

/* Whether the kernels can read t as it is stored: a view of a planar tensor must be whole rows of
 * the same length and type (the kernels find a row's scales from its length), and a q8_0 view of
 * another type's storage, which holds ggml's blocks, is none the kernels read. */
static sift_status check_stored_layout(const sift_tensor *t, int i, const sift_node *n)
{
    const sift_tensor *root = t && t->parent ? t->parent : t;
    if (!root || root == t) return SIFT_OK;
    if (t->dtype == SIFT_Q8_0 && root->dtype != SIFT_Q8_0 && !t->pages)
        return sift_set_error(SIFT_E_UNSUPPORTED,
                              "cuda: node %d (%s): '%s' views a %s tensor as q8_0, but the CUDA kernels read q8_0 only from "
                              "q8_0 tensors (stored planar)",
                              i, sift_op_name(n->op), t->name[0] ? t->name : "(unnamed)", sift_dtype_name(root->dtype));
    if (!stored_planar(root)) return SIFT_OK;
    const int64_t k = root->shape[root->ndim - 1];
    const size_t rb = sift_dtype_row_bytes(root->dtype, k);
    if (t->dtype == root->dtype && t->ndim > 0 && t->shape[t->ndim - 1] == k && t->offset % rb == 0) return SIFT_OK;
    return sift_set_error(SIFT_E_UNSUPPORTED,
                          "cuda: node %d (%s): '%s' views the %s tensor '%s' as %s rows of %lld values at byte %zu, but its "
                          "rows of %lld values are stored planar: only whole rows can be viewed",
                          i, sift_op_name(n->op), t->name[0] ? t->name : "(unnamed)", sift_dtype_name(root->dtype),
                          root->name[0] ? root->name : "(unnamed)", sift_dtype_name(t->dtype),
                          (long long)(t->ndim > 0 ? t->shape[t->ndim - 1] : 0), t->offset, (long long)k);
}

/* ---- plans ----------------------------------------------------------------------------------- */

/* A rope table (cuda_rope_table) of n's frequencies with at least `entries` rows. */
#define CUDA_ROPE_TABLE_MAX ((int64_t)1 << 24) /* (cos, sin) pairs: 128 MiB */
static sift_status rope_table(cuda_backend *b, const sift_node *n, int64_t entries, int i, const void **out)
{
    const int half = n->p.rope.n_rot / 2; /* >= 1 (validated by the engine) */
    const float *freq = n->p.rope_freq;
    int64_t have = 0;
    for (int t = 0; t < b->n_ropes; t++) {
        const cuda_rope_table *r = &b->ropes[t];
        if (r->half != half || memcmp(r->freq, freq, (size_t)half * sizeof *freq) != 0) continue;
        if (r->rows >= entries) {
            *out = r->dev;
            return SIFT_OK;
        }
        if (r->rows > have) have = r->rows;
    }
    if (entries > CUDA_ROPE_TABLE_MAX / half)
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: gather_attend_rope over %lld entries with n_rot = %d: the "
                                                  "CUDA backend rotates lists of at most %lld entries at this n_rot",
                              i, (long long)entries, 2 * half, (long long)(CUDA_ROPE_TABLE_MAX / half));
    int64_t rows = 2 * have > entries ? 2 * have : entries; /* grow geometrically */
    if (rows < 256) rows = 256;
    if (rows > CUDA_ROPE_TABLE_MAX / half) rows = CUDA_ROPE_TABLE_MAX / half;
    cuda_rope_table *grown = realloc(b->ropes, (size_t)(b->n_ropes + 1) * sizeof *grown);
    if (!grown) return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory for a rope table");
    b->ropes = grown;
    const size_t bytes = (size_t)rows * (size_t)half * 2 * sizeof(float);
    float *h = malloc(bytes);
    if (!h) return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory for a rope table of %zu bytes", bytes);
    /* cpu_rope_row's expressions (backends/cpu/cpu_model_ops.c), at positions 0 .. rows-1 */
    for (int64_t r = 0; r < rows; r++)
        for (int p = 0; p < half; p++) {
            const float theta = (float)r * freq[p] / 1.0f;
            h[2 * (r * half + p)] = cosf(theta);
            h[2 * (r * half + p) + 1] = sinf(theta);
        }
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes);
    if (e == cudaErrorMemoryAllocation) {
        free(h);
        return no_device_memory(bytes, "a rope table");
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, b->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(b->stream);
    free(h);
    if (e != cudaSuccess) {
        if (d) cudaFree(d);
        return fail(e, "uploading a rope table");
    }
    cuda_rope_table *t = &b->ropes[b->n_ropes++];
    *t = (cuda_rope_table){.half = half, .rows = rows, .dev = d};
    memcpy(t->freq, freq, (size_t)half * sizeof *freq);
    *out = d;
    return SIFT_OK;
}

static sift_status node_failed(cudaError_t e, const char *doing, int i, const sift_node *n)
{
    (void)cudaGetLastError();
    return sift_set_error(SIFT_E_BACKEND, "cuda: %s node %d (%s) failed: %s (%s)", doing, i, sift_op_name(n->op),
                          cudaGetErrorString(e), cudaGetErrorName(e));
}

static sift_status plan_node(cuda_backend *b, const sift_node *n, int i, cuda_plan *pl, size_t *scratch, size_t *zeroed)
{
    memset(pl, 0, sizeof *pl);
    for (int j = 0; j < n->n_src; j++) {
        const sift_status st = check_stored_layout(n->src[j], i, n);
        if (st != SIFT_OK) return st;
    }
    const sift_status st = check_stored_layout(n->dst, i, n);
    if (st != SIFT_OK) return st;
    const cuda_op *op = &cuda_ops[n->op];
    cudaError_t e = op->plan(&b->dev, n, &pl->k);
    if (e == cudaErrorInvalidConfiguration || e == cudaErrorNotSupported) {
        (void)cudaGetLastError();
        return sift_set_error(e == cudaErrorNotSupported ? SIFT_E_UNSUPPORTED : SIFT_E_LIMIT,
                              "cuda: node %d (%s): %s is beyond the CUDA kernels' limits", i, sift_op_name(n->op),
                              pl->k.why ? pl->k.why : cudaGetErrorString(e));
    }
    if (e != cudaSuccess) return node_failed(e, "planning", i, n);
    if (pl->k.rope_rows > 0) {
        sift_status st = rope_table(b, n, pl->k.rope_rows, i, &pl->k.rope_tab);
        if (st != SIFT_OK) return st;
    }
    pl->scratch_off = *scratch;
    *scratch += (pl->k.scratch_bytes + 255) & ~(size_t)255;
    pl->zeroed_off = *zeroed;
    *zeroed += (pl->k.zeroed_bytes + 255) & ~(size_t)255;
    return SIFT_OK;
}

static void cache_free(cuda_cache *c)
{
    if (!c) return;
    if (c->exec) cudaGraphExecDestroy(c->exec);
    (void)cudaGetLastError();
    free(c->plans);
    free(c);
}

static sift_status cache_build(cuda_backend *b, sift_graph *g, cuda_cache **out)
{
    *out = NULL;
    cuda_cache *c = calloc(1, sizeof *c);
    if (!c) return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory planning a graph");
    c->version = g->version;
    c->n = g->n_nodes;
    c->plans = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *c->plans);
    if (!c->plans) {
        free(c);
        return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory planning a graph of %d nodes", g->n_nodes);
    }
    size_t scratch = 0, zeroed = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        sift_status s = plan_node(b, &g->nodes[i], i, &c->plans[i], &scratch, &zeroed);
        if (s != SIFT_OK) {
            cache_free(c);
            return s;
        }
    }
    c->scratch_bytes = scratch;
    c->zeroed_bytes = zeroed;
    *out = c;
    return SIFT_OK;
}

/* ---- running --------------------------------------------------------------------------------- */

/* Arena *dev of at least `need` bytes (zeroed: cleared when allocated); a move ends the
 * recordings made with the old address (arena_gen). */
static sift_status grow_arena(cuda_backend *b, void **dev, size_t *have, size_t need, bool zeroed, const char *what)
{
    if (need <= *have) return SIFT_OK;
    const size_t bytes = need + need / 4; /* room for the next, slightly larger step */
    if (*dev) {
        CU(cudaStreamSynchronize(b->stream));
        cudaFree(*dev);
        *dev = NULL;
        *have = 0;
    }
    cudaError_t e = cudaMalloc(dev, bytes);
    if (e == cudaSuccess && zeroed) e = cudaMemsetAsync(*dev, 0, bytes, b->stream);
    if (e != cudaSuccess) {
        if (*dev) cudaFree(*dev);
        *dev = NULL;
        if (e == cudaErrorMemoryAllocation) return no_device_memory(bytes, what);
        return fail(e, "cudaMalloc (graph arena)");
    }
    *have = bytes;
    b->arena_gen++;
    return SIFT_OK;
}

/* The arenas, large enough for c and the zeroed one zero; c's recording if it is still valid. */
static sift_status take_arenas(cuda_backend *b, cuda_cache *c)
{
    sift_status s = grow_arena(b, &b->scratch, &b->scratch_bytes, c->scratch_bytes, false, "graph scratch (partials, buffers)");
    if (s == SIFT_OK) s = grow_arena(b, &b->zeroed, &b->zeroed_bytes, c->zeroed_bytes, true, "graph state (tickets, histograms)");
    if (s != SIFT_OK) return s;
    if (b->zeroed_dirty && b->zeroed_bytes) CU(cudaMemsetAsync(b->zeroed, 0, b->zeroed_bytes, b->stream));
    b->zeroed_dirty = false;
    if (c->exec && c->exec_gen != b->arena_gen) {
        cudaGraphExecDestroy(c->exec);
        c->exec = NULL;
    }
    return SIFT_OK;
}

static sift_status launch_node(cuda_backend *b, cuda_cache *c, const sift_graph *g, int i, cudaStream_t st)
{
    const sift_node *n = &g->nodes[i];
    const cuda_plan *pl = &c->plans[i];
    void *scratch = pl->k.scratch_bytes ? (char *)b->scratch + pl->scratch_off : NULL;
    void *zeroed = pl->k.zeroed_bytes ? (char *)b->zeroed + pl->zeroed_off : NULL;
    cudaError_t e = cuda_ops[n->op].launch(&b->dev, n, &pl->k, scratch, zeroed, st);
    return e == cudaSuccess ? SIFT_OK : node_failed(e, "launching", i, n);
}

static sift_status launch_all(cuda_backend *b, cuda_cache *c, const sift_graph *g, cudaStream_t st)
{
    for (int i = 0; i < g->n_nodes; i++) {
        sift_status s = launch_node(b, c, g, i, st);
        if (s != SIFT_OK) return s;
    }
    return SIFT_OK;
}

static sift_status ensure_events(cuda_backend *b, int n)
{
    if (n <= b->n_events) return SIFT_OK;
    cudaEvent_t *ev = realloc(b->events, (size_t)n * sizeof *ev);
    if (!ev) return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory for %d timing events", n);
    b->events = ev;
    while (b->n_events < n) {
        CU(cudaEventCreate(&b->events[b->n_events]));
        b->n_events++;
    }
    return SIFT_OK;
}

/* Records the node sequence into a CUDA graph (once per graph version), capturing on st: the
 * stream the graphs run on, or (graph_prepare, while another graph runs there) the capture stream. */
static sift_status record(cuda_backend *b, cuda_cache *c, const sift_graph *g, cudaStream_t st)
{
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    sift_status s = launch_all(b, c, g, st);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(st, &graph);
    if (s != SIFT_OK) {
        if (graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        return s;
    }
    if (e != cudaSuccess) return fail(e, "cudaStreamEndCapture");
    if (b->spare && b->spare_gen == b->arena_gen) { /* the same nodes with other parameters: an update */
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(b->spare, graph, &info) == cudaSuccess) {
            c->exec = b->spare;
            b->spare = NULL;
            cudaGraphDestroy(graph);
            c->exec_gen = b->arena_gen;
            return SIFT_OK;
        }
        (void)cudaGetLastError(); /* another shape: instantiate */
    }
    if (b->spare) cudaGraphExecDestroy(b->spare);
    b->spare = NULL;
    e = cudaGraphInstantiate(&c->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        c->exec = NULL;
        return fail(e, "cudaGraphInstantiate");
    }
    c->exec_gen = b->arena_gen;
    return SIFT_OK;
}

/* Runs g on the stream (wait: to the end; else graph_submit's run, waited for by cuda_sync). */
static sift_status run(cuda_backend *b, cuda_cache *c, const sift_graph *g, double *node_us, double *span_us, bool wait)
{
    sift_status s = take_arenas(b, c);
    if (s != SIFT_OK) return s;
    if (span_us) {
        s = ensure_events(b, 2);
        if (s != SIFT_OK) return s;
        CU(cudaEventRecord(b->events[0], b->stream));
    }
    if (node_us) {
        s = ensure_events(b, 2 * g->n_nodes);
        if (s != SIFT_OK) return s;
        for (int i = 0; i < g->n_nodes; i++) {
            CU(cudaEventRecord(b->events[2 * i], b->stream));
            s = launch_node(b, c, g, i, b->stream);
            if (s != SIFT_OK) return s;
            CU(cudaEventRecord(b->events[2 * i + 1], b->stream));
        }
    } else if (c->exec || (b->use_graphs && c->runs > 0)) {
        /* Recorded on the second run, or ahead (graph_prepare): a graph computed once and not
         * prepared costs no capture and instantiation, one computed again replays its recording. */
        if (!c->exec) {
            s = record(b, c, g, b->stream);
            if (s != SIFT_OK) return s;
        }
        if (c->uploading) CU(cudaStreamWaitEvent(b->stream, b->uploaded, 0));
        c->uploading = false;
        CU(cudaGraphLaunch(c->exec, b->stream));
    } else {
        s = launch_all(b, c, g, b->stream);
        if (s != SIFT_OK) return s;
    }
    if (span_us) CU(cudaEventRecord(b->events[1], b->stream));
    c->runs++;
    if (!wait) return SIFT_OK;
    CU(cudaStreamSynchronize(b->stream));
    if (span_us) {
        float ms = 0.0f;
        CU(cudaEventElapsedTime(&ms, b->events[0], b->events[1]));
        *span_us = (double)ms * 1000.0;
    }
    if (node_us) {
        for (int i = 0; i < g->n_nodes; i++) {
            float ms = 0.0f;
            CU(cudaEventElapsedTime(&ms, b->events[2 * i], b->events[2 * i + 1]));
            node_us[i] = (double)ms * 1000.0;
        }
    }
    return SIFT_OK;
}

static void cuda_graph_release(void *p, sift_graph *g)
{
    cuda_backend *b = p;
    cuda_cache *c = g->backend_cache;
    if (!c) return;
    if (cudaSetDevice(b->device) != cudaSuccess) (void)cudaGetLastError();
    if (c->exec) { /* idle: the engine waits for a graph in flight before releasing it */
        if (b->spare) cudaGraphExecDestroy(b->spare);
        b->spare = c->exec;
        b->spare_gen = c->exec_gen;
        c->exec = NULL;
    }
    cache_free(c);
    g->backend_cache = NULL;
}

/* g's plan, made now where g changed since. */
static sift_status planned(cuda_backend *b, sift_graph *g, cuda_cache **out)
{
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    cuda_cache *c = g->backend_cache;
    if (c && c->version != g->version) {
        cuda_graph_release(b, g);
        c = NULL;
    }
    if (!c) {
        s = cache_build(b, g, &c);
        if (s != SIFT_OK) return s;
        g->backend_cache = c;
    }
    *out = c;
    return SIFT_OK;
}

/* Work may have stopped half-way: finish what was queued, zero the zeroed state next time. */
static sift_status failed_run(cuda_backend *b, sift_status s)
{
    if (cudaStreamSynchronize(b->stream) != cudaSuccess) (void)cudaGetLastError();
    b->zeroed_dirty = true;
    return s;
}

/* g planned and run (wait: to the end, else left for cuda_sync). */
static sift_status plan_and_run(cuda_backend *b, sift_graph *g, double *node_us, double *span_us, bool wait)
{
    cuda_cache *c;
    sift_status s = planned(b, g, &c);
    if (s == SIFT_OK) s = run(b, c, g, node_us, span_us, wait);
    return s == SIFT_OK ? SIFT_OK : failed_run(b, s);
}

static sift_status cuda_graph_compute(void *p, sift_graph *g, double *node_us, double *span_us)
{
    return plan_and_run(p, g, node_us, span_us, true);
}

/* Plans g and records it on the capture stream, while the graph before it may still run on the
 * stream: the arenas only grow here (after waiting for the stream), and the recording reads no
 * device memory. With SIFT_CUDA_GRAPH=0, the plan only. */
static sift_status cuda_graph_prepare(void *p, sift_graph *g)
{
    cuda_backend *b = p;
    cuda_cache *c;
    sift_status s = planned(b, g, &c);
    if (s == SIFT_OK) s = take_arenas(b, c);
    if (s != SIFT_OK || !b->use_graphs || c->exec) return s;
    if (!b->capture) CU(cudaStreamCreateWithFlags(&b->capture, cudaStreamNonBlocking));
    if (!b->uploaded) CU(cudaEventCreateWithFlags(&b->uploaded, cudaEventDisableTiming));
    s = record(b, c, g, b->capture);
    if (s != SIFT_OK) return s;
    /* its upload to the device too, which the first launch would otherwise do on the path */
    CU(cudaGraphUpload(c->exec, b->capture));
    CU(cudaEventRecord(b->uploaded, b->capture));
    c->uploading = true;
    return SIFT_OK;
}

static sift_status cuda_graph_submit(void *p, sift_graph *g) { return plan_and_run(p, g, NULL, NULL, false); }

static sift_status cuda_sync(void *p)
{
    cuda_backend *b = p;
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    const cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e == cudaSuccess) return SIFT_OK;
    b->zeroed_dirty = true;
    return fail(e, "cudaStreamSynchronize (a submitted graph)");
}

static bool cuda_supports_op(void *p, const sift_node *n)
{
    (void)p;
    return (unsigned)n->op < SIFT_OP_COUNT && cuda_ops[n->op].launch;
}

/* cudaMemGetInfo's free bytes on the context's device: what the driver could still give this process
 * (other processes' and this context's allocations taken out). */
static sift_status cuda_memory_free(void *p, uint64_t *bytes)
{
    const cuda_backend *b = p;
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    size_t free_b = 0, total_b = 0;
    CU(cudaMemGetInfo(&free_b, &total_b));
    *bytes = free_b;
    return SIFT_OK;
}

static const sift_backend_vtable cuda_vtable = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .supports_op = cuda_supports_op,
    .tensor_alloc = cuda_tensor_alloc,
    .tensor_free = cuda_tensor_free,
    .tensor_write = cuda_tensor_write,
    .tensor_read = cuda_tensor_read,
    .tensor_copy = cuda_tensor_copy,
    .graph_compute = cuda_graph_compute,
    .graph_release = cuda_graph_release,
    .graph_prepare = cuda_graph_prepare,
    .graph_submit = cuda_graph_submit,
    .sync = cuda_sync,
    .validation_messages = NULL,
    .memory_free = cuda_memory_free,
};

/* ---- opening --------------------------------------------------------------------------------- */

static const char *no_device_hint(cudaError_t e)
{
    switch (e) {
    case cudaErrorInsufficientDriver: return " (no NVIDIA driver is loaded, or it is older than this CUDA runtime needs)";
    case cudaErrorNoDevice: return " (the driver sees no CUDA-capable GPU)";
    default: return "";
    }
}

static sift_status device_count(int *count)
{
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *count = 0;
        return sift_set_error(SIFT_E_UNAVAILABLE, "no CUDA device: cudaGetDeviceCount failed: %s (%s)%s",
                              cudaGetErrorString(e), cudaGetErrorName(e), no_device_hint(e));
    }
    if (*count < 1) return sift_set_error(SIFT_E_UNAVAILABLE, "no CUDA device: the driver reports 0 devices");
    return SIFT_OK;
}

sift_status sift_backend_cuda_devices(int index, sift_device_info *info, int *n)
{
    sift_status s = device_count(n);
    if (s != SIFT_OK || !info) return s;
    if (index < 0 || index >= *n)
        return sift_set_error(SIFT_E_INVALID, "cuda: device %d (this machine has %d CUDA device%s)", index, *n, *n == 1 ? "" : "s");
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess) return fail(e, "cudaGetDeviceProperties");
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%s", prop.name);
    info->type = prop.integrated ? SIFT_DEVICE_INTEGRATED_GPU : SIFT_DEVICE_DISCRETE_GPU;
    info->memory_bytes = (uint64_t)prop.totalGlobalMem;
    const char *env = getenv("SIFT_CUDA_DEVICE");
    info->is_default = env && *env ? atoi(env) == index : index == 0;
    return SIFT_OK;
}

sift_status sift_backend_cuda_open(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt, char *name,
                                   size_t name_len, int *device_out)
{
    *be = NULL;
    int count = 0;
    sift_status st = device_count(&count);
    if (st != SIFT_OK) return st;
    if (args->device >= count)
        return sift_set_error(SIFT_E_INVALID, "cuda: device %d but this machine has %d CUDA device%s (0..%d)", args->device,
                              count, count == 1 ? "" : "s", count - 1);

    int device = args->device >= 0 ? args->device : 0; /* an index given through the API wins over the environment */
    const char *env = args->device >= 0 ? NULL : getenv("SIFT_CUDA_DEVICE");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno || end == env || *end || v < 0 || v >= count)
            return sift_set_error(SIFT_E_INVALID, "cuda: SIFT_CUDA_DEVICE='%s' is not a device index: this machine has %d "
                                                  "CUDA device%s (0..%d)",
                                  env, count, count == 1 ? "" : "s", count - 1);
        device = (int)v;
    }

    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return fail(e, "cudaSetDevice");
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return fail(e, "cudaGetDeviceProperties");
    if (prop.major < 8)
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: device %d (%s) is sm_%d%d; the CUDA kernels need sm_80 or newer",
                              device, prop.name, prop.major, prop.minor);
    int runtime = 0;
    e = cudaRuntimeGetVersion(&runtime);
    if (e != cudaSuccess) return fail(e, "cudaRuntimeGetVersion");

    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory");
    b->device = device;
    const char *graphs = getenv("SIFT_CUDA_GRAPH");
    b->use_graphs = !(graphs && strcmp(graphs, "0") == 0);
    e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        b->stream = NULL;
        cuda_destroy(b);
        return fail(e, "cudaStreamCreateWithFlags");
    }
    e = sift_cuda_init(device, &b->dev);
    if (e != cudaSuccess) {
        cuda_destroy(b);
        if (e == cudaErrorNotSupported)
            return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: device %d (%s) has too little shared memory per block for "
                                                      "the attention and matmul kernels",
                                  device, prop.name);
        return fail(e, "sift_cuda_init (kernel attributes)");
    }
    snprintf(name, name_len, "%s (CUDA %d.%d, sm_%d%d, %d SMs)", prop.name, runtime / 1000, (runtime % 1000) / 10,
             prop.major, prop.minor, prop.multiProcessorCount);
    *device_out = device;
    *be = b;
    *vt = &cuda_vtable;
    return SIFT_OK;
}
