/* The CUDA backend: device memory through the CUDA runtime (linked statically), one stream, the
 * kernels in the .cu files of cuda/ (docs/kernels.md).
 *
 * Tensors are plain cudaMalloc allocations, zeroed like the CPU backend's. A graph's launch
 * geometry and scratch (vote partials, radix histograms, attention partials) are planned once per
 * graph version and cached in g->backend_cache; untimed runs replay the node sequence as a CUDA
 * graph recorded on first use (SIFT_CUDA_GRAPH=0 launches the kernels one by one instead), timed
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
 * computed on the host with the CPU reference's powf, cosf and sinf (the same angles to the bit).
 * One per (n_rot, base), grown as longer lists come; a grown-out table stays allocated until the
 * backend closes, since plans of older graphs may still point at it. */
typedef struct cuda_rope_table {
    int n_rot;
    float base;
    int64_t rows;
    void *dev; /* float2 [rows][n_rot / 2] */
} cuda_rope_table;

typedef struct cuda_backend {
    int device;
    cudaStream_t stream;
    sift_cuda_device dev;
    cudaEvent_t *events; /* timing pool, 2 per node of the largest timed graph so far */
    int n_events;
    int use_graphs;
    cuda_rope_table *ropes;
    int n_ropes;
} cuda_backend;

typedef struct cuda_plan {
    union {
        sift_cuda_score score;
        sift_cuda_vote vote;
        sift_cuda_select select;
        sift_cuda_attend attend;
        sift_cuda_get_rows get_rows;
        sift_cuda_rmsnorm rmsnorm;
        sift_cuda_matmul matmul;
        sift_cuda_rope rope;
        sift_cuda_eltwise eltwise;
        sift_cuda_kv_write kv_write;
        sift_cuda_sel_cache sel_cache;
        sift_cuda_fill_range fill_range;
        sift_cuda_mean_rows mean_rows;
    } u;
    size_t scratch_off;
} cuda_plan;

typedef struct cuda_cache {
    unsigned version;
    int n;
    cuda_plan *plans;
    void *scratch;
    size_t scratch_bytes;
    int reset;             /* select histograms must be zeroed before the next run */
    int runs;              /* completed runs: the first launches directly, later ones replay a recording */
    cudaGraphExec_t exec;  /* the recorded node sequence, or NULL */
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

/* The first element of a tensor's data (views start t->offset bytes into their parent's storage). */
static void *data(const sift_tensor *t) { return t->impl ? (char *)t->impl + t->offset : NULL; }

/* ---- tensors --------------------------------------------------------------------------------- */

static void cuda_destroy(void *p)
{
    cuda_backend *b = p;
    if (!b) return;
    if (cudaSetDevice(b->device) == cudaSuccess) {
        for (int i = 0; i < b->n_events; i++) cudaEventDestroy(b->events[i]);
        for (int i = 0; i < b->n_ropes; i++) cudaFree(b->ropes[i].dev);
        if (b->stream) cudaStreamDestroy(b->stream);
    }
    (void)cudaGetLastError();
    free(b->ropes);
    free(b->events);
    free(b);
}

static sift_status cuda_tensor_alloc(void *p, sift_tensor *t)
{
    cuda_backend *b = p;
    t->impl = NULL;
    if (t->nbytes == 0) return SIFT_OK;
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
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
    if (t->impl && cudaSetDevice(b->device) == cudaSuccess) cudaFree(t->impl);
    (void)cudaGetLastError();
    t->impl = NULL;
}

static sift_status cuda_tensor_write(void *p, sift_tensor *t, size_t offset, const void *src, size_t bytes)
{
    cuda_backend *b = p;
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    CU(cudaMemcpyAsync((char *)t->impl + offset, src, bytes, cudaMemcpyHostToDevice, b->stream));
    CU(cudaStreamSynchronize(b->stream));
    return SIFT_OK;
}

static sift_status cuda_tensor_read(void *p, const sift_tensor *t, size_t offset, void *dst, size_t bytes)
{
    cuda_backend *b = p;
    sift_status s = set_device(b);
    if (s != SIFT_OK) return s;
    CU(cudaMemcpyAsync(dst, (const char *)t->impl + offset, bytes, cudaMemcpyDeviceToHost, b->stream));
    CU(cudaStreamSynchronize(b->stream));
    return SIFT_OK;
}

/* ---- plans ----------------------------------------------------------------------------------- */

/* The address map of a K/V operand (sift_cuda_rows): its storage and strides, and for a paged view
 * (engine/backend.h) its pool, page table (a device pointer: read by the kernels at run time) and
 * page size. */
static sift_status rows_of(const sift_tensor *t, sift_cuda_rows *r, int i)
{
    memset(r, 0, sizeof *r);
    if (!t) return SIFT_OK;
    r->base = data(t);
    r->stride0 = t->stride[0];
    r->stride1 = t->stride[1];
    if (!t->pages) return SIFT_OK;
    const int64_t pool_rows = t->parent->shape[1], p = t->page_size;
    int shift = 0;
    while (((int64_t)1 << shift) < p) shift++;
    if (((int64_t)1 << shift) != p || pool_rows % p != 0)
        return sift_set_error(SIFT_E_INVALID, "cuda: node %d: '%s' has pages of %lld rows over a pool of %lld", i, t->name,
                              (long long)p, (long long)pool_rows);
    if (pool_rows > INT32_MAX)
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: the pool of '%s' has %lld rows per KV head (the CUDA "
                                                  "kernels address at most 2^31 - 1)",
                              i, t->name, (long long)pool_rows);
    r->pages = data(t->pages);
    r->page_shift = shift;
    r->pool_pages = (int)(pool_rows / p);
    if (!r->pages) /* an empty page table: every row absent (never dereferenced: ncap is 0) */
        r->pool_pages = 0;
    return SIFT_OK;
}

static int same_map(const sift_cuda_rows *a, const sift_cuda_rows *b)
{
    return a->pages == b->pages && (!a->pages || (a->page_shift == b->page_shift && a->pool_pages == b->pool_pages));
}

static sift_status kv_of(const sift_tensor *k, const sift_tensor *v, int i, sift_cuda_kv *kv)
{
    memset(kv, 0, sizeof *kv);
    sift_status s = rows_of(k, &kv->k, i);
    if (s == SIFT_OK) s = rows_of(v, &kv->v, i);
    if (s != SIFT_OK) return s;
    kv->ncap = k->shape[1];
    kv->hkv = (int)k->shape[0];
    kv->d = (int)k->shape[2];
    kv->f16 = k->dtype == SIFT_F16;
    kv->v_own_map = v && !same_map(&kv->k, &kv->v);
    return SIFT_OK;
}

/* The rope table of (n_rot, base) with at least `entries` rows (cuda_rope_table). */
#define CUDA_ROPE_TABLE_MAX ((int64_t)1 << 24) /* (cos, sin) pairs: 128 MiB */
static sift_status rope_table(cuda_backend *b, const sift_rope_params *rp, int64_t entries, int i, const void **out)
{
    const int half = rp->n_rot / 2;
    int64_t have = 0;
    for (int t = 0; t < b->n_ropes; t++) {
        const cuda_rope_table *r = &b->ropes[t];
        if (r->n_rot != rp->n_rot || memcmp(&r->base, &rp->base, sizeof r->base) != 0) continue;
        if (r->rows >= entries) {
            *out = r->dev;
            return SIFT_OK;
        }
        if (r->rows > have) have = r->rows;
    }
    if (half < 1 || entries > CUDA_ROPE_TABLE_MAX / half)
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: gather_attend_rope over %lld entries with n_rot = %d: the "
                                                  "CUDA backend rotates lists of at most %lld entries at this n_rot",
                              i, (long long)entries, rp->n_rot, (long long)(CUDA_ROPE_TABLE_MAX / (half > 0 ? half : 1)));
    int64_t rows = 2 * have > entries ? 2 * have : entries; /* grow geometrically */
    if (rows < 256) rows = 256;
    if (rows > CUDA_ROPE_TABLE_MAX / half) rows = CUDA_ROPE_TABLE_MAX / half;
    cuda_rope_table *grown = realloc(b->ropes, (size_t)(b->n_ropes + 1) * sizeof *grown);
    if (!grown) return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory for a rope table");
    b->ropes = grown;
    const size_t bytes = (size_t)rows * (size_t)half * 2 * sizeof(float);
    float *h = malloc(bytes), *freq = malloc((size_t)half * sizeof *freq);
    if (!h || !freq) {
        free(h);
        free(freq);
        return sift_set_error(SIFT_E_NOMEM, "cuda: out of memory for a rope table of %zu bytes", bytes);
    }
    /* cpu_rope_row's expressions (backends/cpu/cpu_model_ops.c), at positions 0 .. rows-1 */
    for (int p = 0; p < half; p++) freq[p] = powf(rp->base, -2.0f * (float)p / (float)rp->n_rot);
    for (int64_t r = 0; r < rows; r++)
        for (int p = 0; p < half; p++) {
            const float theta = (float)r * freq[p] / 1.0f;
            h[2 * (r * half + p)] = cosf(theta);
            h[2 * (r * half + p) + 1] = sinf(theta);
        }
    free(freq);
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
    b->ropes[b->n_ropes++] = (cuda_rope_table){.n_rot = rp->n_rot, .base = rp->base, .rows = rows, .dev = d};
    *out = d;
    return SIFT_OK;
}

/* Paged views are K/V operands only: k (src 1) and v (src 2) of the attention ops, kv_write's cache. */
static sift_status check_paged(const sift_node *n, int i)
{
    const bool kv_op = n->op == SIFT_OP_SCORE || n->op == SIFT_OP_GATHER_ATTEND || n->op == SIFT_OP_DENSE_ATTEND ||
                       n->op == SIFT_OP_CAUSAL_ATTEND || n->op == SIFT_OP_CAUSAL_ATTEND_SPARSE;
    for (int s = 0; s < n->n_src; s++)
        if (n->src[s] && n->src[s]->pages && !(kv_op && (s == 1 || s == 2)))
            return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: %s takes the paged view '%s' as input %d (paged views "
                                                      "are K/V operands only)",
                                  i, sift_op_name(n->op), n->src[s]->name, s);
    if (n->dst->pages && n->op != SIFT_OP_KV_WRITE)
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: %s writes the paged view '%s' (only kv_write writes one)",
                              i, sift_op_name(n->op), n->dst->name);
    return SIFT_OK;
}

/* A predicated node's flag (sift_graph_skip_if), or NULL. */
static const float *skip_flag(const sift_node *n)
{
    return n->skip ? (const float *)data(n->skip) + n->skip_elem : NULL;
}

static int weight_type(sift_dtype t)
{
    switch (t) {
    case SIFT_F16: return SIFT_CUDA_W_F16;
    case SIFT_BF16: return SIFT_CUDA_W_BF16;
    case SIFT_Q8_0: return SIFT_CUDA_W_Q8_0;
    case SIFT_Q4_0: return SIFT_CUDA_W_Q4_0;
    default: return SIFT_CUDA_W_F32;
    }
}

static sift_status plan_node(cuda_backend *b, const sift_node *n, int i, cuda_plan *pl, size_t *scratch)
{
    cudaError_t e = cudaSuccess;
    size_t need = 0;
    memset(pl, 0, sizeof *pl);
    sift_status st = check_paged(n, i);
    if (st != SIFT_OK) return st;
    switch (n->op) {
    case SIFT_OP_SCORE: {
        sift_cuda_score *a = &pl->u.score;
        a->q = data(n->src[0]);
        st = kv_of(n->src[1], NULL, i, &a->kv);
        if (st != SIFT_OK) return st;
        a->hq = (int)n->src[0]->shape[0];
        a->begin = n->p.begin;
        a->m = n->p.end - n->p.begin;
        a->scale = n->p.scale;
        a->scores = data(n->dst);
        a->skip = skip_flag(n);
        e = sift_cuda_score_plan(&b->dev, a);
        break;
    }
    case SIFT_OP_VOTE: {
        sift_cuda_vote *a = &pl->u.vote;
        a->scores = data(n->src[0]);
        a->hq = (int)n->src[0]->shape[0];
        a->m = n->src[0]->shape[1];
        a->kvhead_max = n->p.vote == SIFT_VOTE_KVHEAD_MAX;
        a->hkv = (int)n->dst->shape[0];
        a->votes = data(n->dst);
        a->skip = skip_flag(n);
        e = sift_cuda_vote_plan(&b->dev, a);
        need = a->scratch_bytes;
        break;
    }
    case SIFT_OP_SELECT: {
        sift_cuda_select *a = &pl->u.select;
        a->votes = data(n->src[0]);
        a->lists = (int)n->src[0]->shape[0];
        a->cand = n->src[0]->shape[1];
        a->n_ctx = n->p.sel.n_ctx;
        a->sink = n->p.sel.sink;
        a->window = n->p.sel.window;
        a->budget = n->p.sel.budget;
        a->out = data(n->dst);
        a->count = n->dst->shape[1];
        a->skip = skip_flag(n);
        e = sift_cuda_select_plan(&b->dev, a);
        need = a->scratch_bytes;
        break;
    }
    case SIFT_OP_GATHER_ATTEND:
    case SIFT_OP_DENSE_ATTEND:
    case SIFT_OP_CAUSAL_ATTEND:
    case SIFT_OP_CAUSAL_ATTEND_SPARSE: {
        /* The sequence each query row attends (sift_cuda_attend): gather, the list; dense, [0, N);
         * causal, [0, pos0 + t]; sparse, the list then [pos0, pos0 + t]. */
        sift_cuda_attend *a = &pl->u.attend;
        const bool list = n->op == SIFT_OP_GATHER_ATTEND || n->op == SIFT_OP_CAUSAL_ATTEND_SPARSE;
        const bool causal = n->op == SIFT_OP_CAUSAL_ATTEND || n->op == SIFT_OP_CAUSAL_ATTEND_SPARSE;
        const sift_tensor *q = n->src[0], *idx = list ? n->src[3] : NULL;
        a->q = data(q);
        st = kv_of(n->src[1], n->src[2], i, &a->kv);
        if (st != SIFT_OK) return st;
        a->idx = list ? data(idx) : NULL;
        a->idx_lists = list ? (int)idx->shape[0] : 1;
        a->list_len = list ? idx->shape[1] : 0;
        a->tokens = causal ? (int)q->shape[0] : 1;
        a->hq = (int)q->shape[causal ? 1 : 0];
        a->causal = causal;
        switch (n->op) {
        case SIFT_OP_GATHER_ATTEND: a->n = a->list_len; break;
        case SIFT_OP_DENSE_ATTEND: a->n = n->p.n_ctx; break;
        case SIFT_OP_CAUSAL_ATTEND:
            a->n = n->p.pos0 + q->shape[0];
            a->tok_base = n->p.pos0;
            break;
        default: /* sparse */
            a->n = a->list_len + q->shape[0];
            a->tok_base = a->list_len;
            a->range0 = n->p.pos0 - a->list_len;
            break;
        }
        a->scale = n->p.scale;
        a->out = data(n->dst);
        if (causal && q->shape[0] * q->shape[1] > INT32_MAX / 2)
            return sift_set_error(SIFT_E_LIMIT, "cuda: node %d: %s of %lld tokens x %lld heads is too large", i,
                                  sift_op_name(n->op), (long long)q->shape[0], (long long)q->shape[1]);
        if (n->p.rope_keys) {
            if (n->op != SIFT_OP_GATHER_ATTEND)
                return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: rotary keys on %s (only gather_attend takes "
                                                          "them)",
                                      i, sift_op_name(n->op));
            const sift_rope_params *rp = &n->p.rope;
            if ((rp->mode != SIFT_ROPE_ADJACENT && rp->mode != SIFT_ROPE_NEOX) || rp->n_rot < 2 || rp->n_rot % 2 != 0 ||
                rp->n_rot > a->kv.d)
                return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: gather_attend_rope with n_rot = %d, mode %d, "
                                                          "D = %d",
                                      i, rp->n_rot, (int)rp->mode, a->kv.d);
            if (a->n > 0) {
                const void *tab = NULL;
                st = rope_table(b, rp, a->n, i, &tab);
                if (st != SIFT_OK) return st;
                a->rope_tab = tab;
                a->rope_half = rp->n_rot / 2;
                a->rope_neox = rp->mode == SIFT_ROPE_NEOX;
            }
        }
        e = sift_cuda_attend_plan(&b->dev, a);
        need = a->scratch_bytes;
        break;
    }
    case SIFT_OP_GET_ROWS: {
        sift_cuda_get_rows *a = &pl->u.get_rows;
        const sift_tensor *table = n->src[0];
        a->table = data(table);
        a->wtype = weight_type(table->dtype);
        a->rows = table->shape[0];
        a->e = table->shape[1];
        a->row_bytes = sift_dtype_row_bytes(table->dtype, table->shape[1]);
        a->ids = data(n->src[1]);
        a->t = n->src[1]->shape[0];
        a->out = data(n->dst);
        if (a->t > 65535)
            return sift_set_error(SIFT_E_LIMIT, "cuda: node %d: get_rows of %lld ids (at most 65535 per node)", i,
                                  (long long)a->t);
        break;
    }
    case SIFT_OP_RMSNORM: {
        sift_cuda_rmsnorm *a = &pl->u.rmsnorm;
        a->x = data(n->src[0]);
        a->w = data(n->src[1]);
        a->out = data(n->dst);
        a->rows = n->src[0]->shape[0];
        a->e = n->src[0]->shape[1];
        a->eps = n->p.eps;
        if (a->rows > INT32_MAX)
            return sift_set_error(SIFT_E_LIMIT, "cuda: node %d: rmsnorm of %lld rows", i, (long long)a->rows);
        break;
    }
    case SIFT_OP_MATMUL: {
        sift_cuda_matmul *a = &pl->u.matmul;
        const sift_tensor *w = n->src[1];
        a->x = data(n->src[0]);
        a->w = data(w);
        a->bias = n->n_src > 2 && n->src[2] ? data(n->src[2]) : NULL;
        a->out = data(n->dst);
        a->t = n->src[0]->shape[0];
        a->k = n->src[0]->shape[1];
        a->n = w->shape[0];
        a->wtype = weight_type(w->dtype);
        a->row_bytes = sift_dtype_row_bytes(w->dtype, w->shape[1]);
        e = sift_cuda_matmul_plan(&b->dev, a);
        if (e == cudaErrorInvalidConfiguration)
            return sift_set_error(SIFT_E_LIMIT, "cuda: node %d: matmul [%lld][%lld] x [%lld][%lld] exceeds the launch limits",
                                  i, (long long)a->t, (long long)a->k, (long long)a->n, (long long)a->k);
        break;
    }
    case SIFT_OP_ROPE: {
        sift_cuda_rope *a = &pl->u.rope;
        const sift_tensor *x = n->src[0];
        a->x = data(x);
        a->factors = n->n_src > 1 && n->src[1] ? data(n->src[1]) : NULL;
        a->out = data(n->dst);
        a->t = x->shape[0];
        a->h = (int)x->shape[1];
        a->d = (int)x->shape[2];
        a->n_rot = n->p.rope.n_rot;
        a->neox = n->p.rope.mode == SIFT_ROPE_NEOX;
        a->pos0 = n->p.pos0;
        if (a->n_rot / 2 > SIFT_CUDA_ROPE_MAX_PAIRS)
            return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: rope with n_rot = %d (the CUDA kernel takes n_rot "
                                                      "up to %d)",
                                  i, a->n_rot, 2 * SIFT_CUDA_ROPE_MAX_PAIRS);
        /* the CPU reference's expression, so that both backends turn by the same angles */
        for (int j = 0; j < a->n_rot / 2; j++) a->freq[j] = powf(n->p.rope.base, -2.0f * (float)j / (float)a->n_rot);
        break;
    }
    case SIFT_OP_SWIGLU:
    case SIFT_OP_ADD: {
        sift_cuda_eltwise *a = &pl->u.eltwise;
        a->a = data(n->src[0]);
        a->b = data(n->src[1]);
        a->out = data(n->dst);
        a->n = (int64_t)(n->dst->nbytes / sizeof(float));
        a->swiglu = n->op == SIFT_OP_SWIGLU;
        break;
    }
    case SIFT_OP_KV_WRITE: {
        sift_cuda_kv_write *a = &pl->u.kv_write;
        const sift_tensor *src = n->src[0], *cache = n->dst;
        a->src = data(src);
        st = rows_of(cache, &a->cache, i);
        if (st != SIFT_OK) return st;
        a->ncap = cache->shape[1];
        a->f16 = cache->dtype == SIFT_F16;
        a->t = src->shape[0];
        a->h = (int)src->shape[1];
        a->d = (int)src->shape[2];
        a->pos0 = n->p.pos0;
        if (a->ncap > INT32_MAX)
            return sift_set_error(SIFT_E_LIMIT, "cuda: node %d: kv_write into a cache of %lld rows (at most 2^31 - 1)", i,
                                  (long long)a->ncap);
        break;
    }
    case SIFT_OP_SEL_CACHE_CHECK: {
        sift_cuda_sel_cache *a = &pl->u.sel_cache;
        a->q = data(n->src[0]);
        a->state = data(n->dst);
        a->qn = n->src[0]->shape[0] * n->src[0]->shape[1];
        a->theta = n->p.theta;
        a->full = n->p.full != 0;
        a->vec = ((uintptr_t)a->q % 16) == 0 && ((uintptr_t)a->state % 16) == 0 && a->qn % 4 == 0;
        break;
    }
    case SIFT_OP_FILL_RANGE: {
        sift_cuda_fill_range *a = &pl->u.fill_range;
        a->idx = data(n->dst);
        a->lists = n->dst->shape[0];
        a->len = n->dst->shape[1];
        a->col0 = n->p.col0;
        a->start = n->p.start;
        if (a->lists > 65535)
            return sift_set_error(SIFT_E_LIMIT, "cuda: node %d: fill_range over %lld lists (at most 65535)", i,
                                  (long long)a->lists);
        break;
    }
    case SIFT_OP_MEAN_ROWS: {
        sift_cuda_mean_rows *a = &pl->u.mean_rows;
        a->x = data(n->src[0]);
        a->out = data(n->dst);
        a->rows = n->src[0]->shape[0];
        a->e = n->src[0]->shape[1];
        break;
    }
    default:
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: op '%s' is not implemented by the CUDA backend", i,
                              sift_op_name(n->op));
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return sift_set_error(SIFT_E_BACKEND, "cuda: planning node %d (%s) failed: %s (%s)", i, sift_op_name(n->op),
                              cudaGetErrorString(e), cudaGetErrorName(e));
    }
    pl->scratch_off = *scratch;
    *scratch += (need + 255) & ~(size_t)255;
    return SIFT_OK;
}

static void cache_free(cuda_cache *c)
{
    if (!c) return;
    if (c->exec) cudaGraphExecDestroy(c->exec);
    if (c->scratch) cudaFree(c->scratch); /* synchronizes with any work still using it */
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
    size_t scratch = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        sift_status s = plan_node(b, &g->nodes[i], i, &c->plans[i], &scratch);
        if (s != SIFT_OK) {
            cache_free(c);
            return s;
        }
    }
    if (scratch) {
        cudaError_t e = cudaMalloc(&c->scratch, scratch);
        if (e != cudaSuccess) {
            c->scratch = NULL;
            cache_free(c);
            if (e == cudaErrorMemoryAllocation) return no_device_memory(scratch, "graph scratch (partials, histograms)");
            return fail(e, "cudaMalloc (graph scratch)");
        }
    }
    c->scratch_bytes = scratch;
    c->reset = 1;
    *out = c;
    return SIFT_OK;
}

/* ---- running --------------------------------------------------------------------------------- */

static sift_status launch_node(cuda_backend *b, cuda_cache *c, const sift_graph *g, int i)
{
    const sift_node *n = &g->nodes[i];
    cuda_plan *pl = &c->plans[i];
    void *scratch = c->scratch ? (char *)c->scratch + pl->scratch_off : NULL;
    cudaError_t e = cudaSuccess;
    switch (n->op) {
    case SIFT_OP_SCORE: e = sift_cuda_score_launch(&b->dev, &pl->u.score, b->stream); break;
    case SIFT_OP_VOTE: e = sift_cuda_vote_launch(&pl->u.vote, scratch, b->stream); break;
    case SIFT_OP_SELECT: e = sift_cuda_select_launch(&pl->u.select, scratch, b->stream); break;
    case SIFT_OP_GATHER_ATTEND:
    case SIFT_OP_DENSE_ATTEND:
    case SIFT_OP_CAUSAL_ATTEND:
    case SIFT_OP_CAUSAL_ATTEND_SPARSE: e = sift_cuda_attend_launch(&b->dev, &pl->u.attend, scratch, b->stream); break;
    case SIFT_OP_SEL_CACHE_CHECK: e = sift_cuda_sel_cache_launch(&pl->u.sel_cache, b->stream); break;
    case SIFT_OP_FILL_RANGE: e = sift_cuda_fill_range_launch(&pl->u.fill_range, b->stream); break;
    case SIFT_OP_MEAN_ROWS: e = sift_cuda_mean_rows_launch(&pl->u.mean_rows, b->stream); break;
    case SIFT_OP_GET_ROWS: e = sift_cuda_get_rows_launch(&pl->u.get_rows, b->stream); break;
    case SIFT_OP_RMSNORM: e = sift_cuda_rmsnorm_launch(&pl->u.rmsnorm, b->stream); break;
    case SIFT_OP_MATMUL: e = sift_cuda_matmul_launch(&pl->u.matmul, b->stream); break;
    case SIFT_OP_ROPE: e = sift_cuda_rope_launch(&pl->u.rope, b->stream); break;
    case SIFT_OP_SWIGLU:
    case SIFT_OP_ADD: e = sift_cuda_eltwise_launch(&pl->u.eltwise, b->stream); break;
    case SIFT_OP_KV_WRITE: e = sift_cuda_kv_write_launch(&pl->u.kv_write, b->stream); break;
    default:
        return sift_set_error(SIFT_E_UNSUPPORTED, "cuda: node %d: op '%s' is not implemented by the CUDA backend", i,
                              sift_op_name(n->op));
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return sift_set_error(SIFT_E_BACKEND, "cuda: launching node %d (%s) failed: %s (%s)", i, sift_op_name(n->op),
                              cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return SIFT_OK;
}

static sift_status launch_all(cuda_backend *b, cuda_cache *c, const sift_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        sift_status s = launch_node(b, c, g, i);
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

/* Records the node sequence into a CUDA graph (once per graph version). */
static sift_status record(cuda_backend *b, cuda_cache *c, const sift_graph *g)
{
    CU(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    sift_status s = launch_all(b, c, g);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(b->stream, &graph);
    if (s != SIFT_OK) {
        if (graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        return s;
    }
    if (e != cudaSuccess) return fail(e, "cudaStreamEndCapture");
    e = cudaGraphInstantiate(&c->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        c->exec = NULL;
        return fail(e, "cudaGraphInstantiate");
    }
    return SIFT_OK;
}

static sift_status run(cuda_backend *b, cuda_cache *c, const sift_graph *g, double *node_us)
{
    if (c->reset) {
        for (int i = 0; i < c->n; i++)
            if (g->nodes[i].op == SIFT_OP_SELECT && c->plans[i].u.select.radix)
                CU(sift_cuda_select_reset(&c->plans[i].u.select, (char *)c->scratch + c->plans[i].scratch_off,
                                          b->stream));
        c->reset = 0;
    }
    sift_status s;
    if (node_us) {
        s = ensure_events(b, 2 * g->n_nodes);
        if (s != SIFT_OK) return s;
        for (int i = 0; i < g->n_nodes; i++) {
            CU(cudaEventRecord(b->events[2 * i], b->stream));
            s = launch_node(b, c, g, i);
            if (s != SIFT_OK) return s;
            CU(cudaEventRecord(b->events[2 * i + 1], b->stream));
        }
    } else if (b->use_graphs && c->runs > 0) {
        /* Recorded on the second run: a graph computed once (a model step) costs no capture and
         * instantiation, one computed again replays its recording. */
        if (!c->exec) {
            s = record(b, c, g);
            if (s != SIFT_OK) return s;
        }
        CU(cudaGraphLaunch(c->exec, b->stream));
    } else {
        s = launch_all(b, c, g);
        if (s != SIFT_OK) return s;
    }
    CU(cudaStreamSynchronize(b->stream));
    c->runs++;
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
    if (!g->backend_cache) return;
    if (cudaSetDevice(b->device) != cudaSuccess) (void)cudaGetLastError();
    cache_free(g->backend_cache);
    g->backend_cache = NULL;
}

static sift_status cuda_graph_compute(void *p, sift_graph *g, double *node_us)
{
    cuda_backend *b = p;
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
    s = run(b, c, g, node_us);
    if (s != SIFT_OK) {
        /* Work may have stopped half-way: finish what was queued, zero the histograms next time. */
        if (cudaStreamSynchronize(b->stream) != cudaSuccess) (void)cudaGetLastError();
        c->reset = 1;
    }
    return s;
}

static const sift_backend_vtable cuda_vtable = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .tensor_alloc = cuda_tensor_alloc,
    .tensor_free = cuda_tensor_free,
    .tensor_write = cuda_tensor_write,
    .tensor_read = cuda_tensor_read,
    .graph_compute = cuda_graph_compute,
    .graph_release = cuda_graph_release,
    .validation_messages = NULL,
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

sift_status sift_backend_cuda_open(void **be, const sift_backend_vtable **vt, char *name, size_t name_len)
{
    *be = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return sift_set_error(SIFT_E_UNAVAILABLE, "no CUDA device: cudaGetDeviceCount failed: %s (%s)%s",
                              cudaGetErrorString(e), cudaGetErrorName(e), no_device_hint(e));
    }
    if (count < 1) return sift_set_error(SIFT_E_UNAVAILABLE, "no CUDA device: the driver reports 0 devices");

    int device = 0;
    const char *env = getenv("SIFT_CUDA_DEVICE");
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

    e = cudaSetDevice(device);
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
    if (e == cudaSuccess) e = sift_cuda_matmul_init(&b->dev);
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
    *be = b;
    *vt = &cuda_vtable;
    return SIFT_OK;
}
