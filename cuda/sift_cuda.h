/* The CUDA kernels' C interface: what backends/cuda/cuda_backend.c (C) calls in the .cu files of cuda/ (CUDA C++).
 *
 * Each op has a plan (launch geometry and scratch size, computed once per graph version and kept
 * in the graph's backend cache) and a launch (enqueues the op's kernels on a stream, returns the
 * first launch error). Pointers are device pointers to the first element of each operand (views
 * already resolved); strides are in elements. The algorithms are the ones in docs/kernels.md. */
#ifndef SIFT_CUDA_H
#define SIFT_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the plans need to know of the device; filled by sift_cuda_init. */
typedef struct sift_cuda_device {
    int sm_count;
    int stages;          /* depth of the cp.async pipeline of the score and attention kernels: 2 or 3 */
    size_t smem_per_sm;  /* shared memory per multiprocessor, bytes */
    size_t smem_optin;   /* the most dynamic shared memory one block may use, bytes */
} sift_cuda_device;

/* Picks the pipeline depth for the device and raises the kernels' dynamic shared memory limits.
 * Returns cudaErrorNotSupported (with nothing changed) when the device cannot hold a 2-stage tile. */
cudaError_t sift_cuda_init(int device, sift_cuda_device *dev);

/* Where the rows of one K or V tensor live: THE address map of the kernels (common.cuh: kv_locate
 * turns a logical position into a physical row, kv_at a physical row into an address; every kernel
 * that reads or writes K/V goes through them). Logical row j of KV head g is the element
 * base + g * stride0 + row(j) * stride1, where row(j) = j without a page table, and with one
 * (sift_tensor_paged_view, engine/backend.h: sift_kv_phys_row) row(j) = (pages[j >> page_shift] <<
 * page_shift) | (j & (P - 1)), absent when the page number is outside [0, pool_pages). The table is
 * a device pointer read at run time: the host may rewrite it between computes, and a recorded CUDA
 * graph stays valid. */
typedef struct sift_cuda_rows {
    const void *base;         /* element 0 of the tensor (a paged view: of its pool) */
    int64_t stride0, stride1; /* elements between KV heads, between (physical) rows */
    const int32_t *pages;     /* page table [logical rows >> page_shift], or NULL: not paged */
    int page_shift;           /* log2 P */
    int pool_pages;           /* pages in the pool; its rows (pool_pages << page_shift) are below 2^31 */
} sift_cuda_rows;

/* K and V of one layer: logically [Hkv][ncap][D], f16 or f32 (both the same type). */
typedef struct sift_cuda_kv {
    sift_cuda_rows k, v;     /* v.base may be NULL (score) */
    int64_t ncap;            /* logical positions in the cache (index bound) */
    int hkv, d, f16;
    int v_own_map;           /* V's rows are not at K's physical rows (another page table, page size or
                              * pool, or only one of them paged): looked up separately */
} sift_cuda_kv;

/* ---- score: scores[h][j] = scale * dot(q[h], K[g(h)][begin + j]), j < m ---------------------- */
typedef struct sift_cuda_score {
    const float *q;          /* [hq][d] */
    sift_cuda_kv kv;
    int hq;
    int64_t begin, m;
    float scale;
    float *scores;           /* [hq][m] */
    const float *skip;       /* predicate (sift_graph_skip_if): nothing happens when *skip != 0; NULL: none */
    /* plan */
    int chunks;              /* head chunks per KV head (G split into groups of <= 8) */
    int splits;              /* blocks along the positions */
    int64_t split_len;       /* positions per block, a multiple of the tile */
    int aligned;             /* K rows 16-byte aligned: cp.async; else element copies */
} sift_cuda_score;
cudaError_t sift_cuda_score_plan(const sift_cuda_device *dev, sift_cuda_score *a);
cudaError_t sift_cuda_score_launch(const sift_cuda_device *dev, const sift_cuda_score *a, cudaStream_t st);

/* ---- vote --------------------------------------------------------------------------------- */
typedef struct sift_cuda_vote {
    const float *scores;     /* [hq][m] */
    int hq, hkv;             /* hkv: lists of KVHEAD_MAX (rows of votes) */
    int64_t m;
    int kvhead_max;          /* 0: SOFTMAX_SUM, votes [1][m]; 1: KVHEAD_MAX, votes [hkv][m] */
    float *votes;
    const float *skip;       /* predicate, as in sift_cuda_score */
    /* plan */
    int blocks;              /* SOFTMAX_SUM: blocks per head of the partial pass */
    size_t scratch_bytes;
} sift_cuda_vote;
cudaError_t sift_cuda_vote_plan(const sift_cuda_device *dev, sift_cuda_vote *a);
cudaError_t sift_cuda_vote_launch(const sift_cuda_vote *a, void *scratch, cudaStream_t st);

/* ---- select ------------------------------------------------------------------------------- */
typedef struct sift_cuda_select {
    const float *votes;      /* [lists][cand] */
    int lists;
    int64_t cand;            /* |C| */
    int64_t n_ctx, sink, window, budget; /* N, S, W, k as given */
    int32_t *out;            /* [lists][count] */
    int64_t count;
    const float *skip;       /* predicate, as in sift_cuda_score */
    /* plan */
    int64_t sink_len;        /* min(S, N) */
    int64_t win_begin;       /* max(sink_len, N - W) */
    int64_t chosen;          /* min(k, |C|) */
    int radix;               /* 0 < chosen < |C|: radix select; otherwise all or none of C */
    int blocks;              /* blocks per list of the radix passes */
    size_t scratch_bytes;
} sift_cuda_select;
cudaError_t sift_cuda_select_plan(const sift_cuda_device *dev, sift_cuda_select *a);
/* Zeroes the histograms that carry over between runs; needed once after the scratch is allocated
 * and after any failed run (a run leaves them zeroed for the next). */
cudaError_t sift_cuda_select_reset(const sift_cuda_select *a, void *scratch, cudaStream_t st);
cudaError_t sift_cuda_select_launch(const sift_cuda_select *a, void *scratch, cudaStream_t st);

/* ---- gather_attend / dense_attend / causal_attend / causal_attend_sparse ---------------------
 * Query row (token t, head h) attends the entries e < n_t of a position sequence: entry e is
 * position idx[list][e] for e < list_len, else range0 + e. n_t = n, or for causal attention
 * min(n, tok_base + t + 1).
 *   gather: the list (list_len = n);            dense: [0, n) (no list, range0 = 0);
 *   causal: [0, pos0 + t] (tok_base = pos0);     sparse: the list, then [pos0, pos0 + t]
 *           (list_len = L, n = L + T, tok_base = L, range0 = pos0 - L).
 * rope_tab (gather only): the key of entry e is rotated to position e before its dot product
 * (SPEC §6): pair p < rope_half turns by (c, s) = rope_tab[e * rope_half + p]; pairs are elements
 * (2p, 2p + 1), or (p, p + rope_half) with rope_neox. Rotary keys, and V rows mapped apart from K's
 * (kv.v_own_map), run the general kernels (at most 4 query heads per block). */
typedef struct sift_cuda_attend {
    const float *q;          /* [tokens][hq][d] */
    sift_cuda_kv kv;
    const int32_t *idx;      /* [lists][list_len], or NULL */
    int idx_lists;           /* 1 (shared) or hkv */
    int64_t list_len;        /* entries per list (0 without one) */
    int64_t n;               /* entries of the longest sequence */
    int64_t range0;          /* entry e >= list_len is position range0 + e */
    int hq;
    int tokens;              /* queries per head: 1, or T for causal attention (may be 0) */
    int causal;              /* token t attends to the first tok_base + t + 1 entries only */
    int64_t tok_base;
    float scale;
    float *out;              /* [tokens][hq][d] */
    const float2 *rope_tab;  /* [>= n][rope_half] (cos, sin), or NULL: keys as stored */
    int rope_half, rope_neox; /* 0 without rope_tab */
    /* plan */
    int chunks, splits;
    int64_t split_len;
    int aligned;
    size_t scratch_bytes;
} sift_cuda_attend;
cudaError_t sift_cuda_attend_plan(const sift_cuda_device *dev, sift_cuda_attend *a);
cudaError_t sift_cuda_attend_launch(const sift_cuda_device *dev, const sift_cuda_attend *a, void *scratch,
                                    cudaStream_t st);

/* ---- transformer ops ------------------------------------------------------------------------ */

/* Weight element types (ggml block layouts for the quantized ones, see engine/quant.h). */
enum { SIFT_CUDA_W_F32 = 0, SIFT_CUDA_W_F16, SIFT_CUDA_W_BF16, SIFT_CUDA_W_Q8_0, SIFT_CUDA_W_Q4_0 };

/* get_rows: out[t] = row ids[t] of table [rows][e] as f32 (zeros for an id outside [0, rows)). */
typedef struct sift_cuda_get_rows {
    const void *table;
    int wtype;
    int64_t rows, e;
    size_t row_bytes;
    const int32_t *ids;      /* [t] */
    int64_t t;
    float *out;              /* [t][e] */
} sift_cuda_get_rows;
cudaError_t sift_cuda_get_rows_launch(const sift_cuda_get_rows *a, cudaStream_t st);

/* rmsnorm: out[t] = x[t] * (1 / sqrt(mean(x[t]^2) + eps)) * w. */
typedef struct sift_cuda_rmsnorm {
    const float *x, *w;
    float *out;
    int64_t rows, e;
    float eps;
} sift_cuda_rmsnorm;
cudaError_t sift_cuda_rmsnorm_launch(const sift_cuda_rmsnorm *a, cudaStream_t st);

/* matmul: out[t][j] = dot(x[t], w[j]) (+ bias[j]); x f32 [t][k], w [n][k] of wtype. */
typedef struct sift_cuda_matmul {
    const float *x;
    const void *w;
    const float *bias;       /* NULL: none */
    float *out;
    int64_t t, k, n;
    int wtype;
    size_t row_bytes;        /* bytes of one row of w */
    /* plan */
    int path;                /* SIFT_CUDA_MM_*: nothing to do, matrix-vector (T = 1), tiled */
    int rows_per_block;      /* matrix-vector: rows of w per block (8, 4, 2 or 1) */
    int mv_u;                /* matrix-vector: weight groups per lane and pipeline stage */
    size_t smem;             /* matrix-vector: dynamic shared memory per block */
} sift_cuda_matmul;
enum { SIFT_CUDA_MM_NONE = 0, SIFT_CUDA_MM_VEC, SIFT_CUDA_MM_TILED };
/* Raises the matrix-vector kernels' dynamic shared memory limit (once, after sift_cuda_init). */
cudaError_t sift_cuda_matmul_init(const sift_cuda_device *dev);
cudaError_t sift_cuda_matmul_plan(const sift_cuda_device *dev, sift_cuda_matmul *a);
cudaError_t sift_cuda_matmul_launch(const sift_cuda_matmul *a, cudaStream_t st);

/* rope of x [t][h][d] into out; pair i of the first n_rot elements turns by
 * theta = (pos0 + t) * freq[i] / factors[i]. freq[i] = base^(-2i / n_rot) comes from the host (the
 * CPU reference's powf, so both backends turn by the same angles). */
#define SIFT_CUDA_ROPE_MAX_PAIRS 64
typedef struct sift_cuda_rope {
    const float *x;
    const float *factors;    /* [n_rot / 2] or NULL */
    float *out;
    int64_t t;
    int h, d, n_rot, neox;
    int64_t pos0;
    float freq[SIFT_CUDA_ROPE_MAX_PAIRS];
} sift_cuda_rope;
cudaError_t sift_cuda_rope_launch(const sift_cuda_rope *a, cudaStream_t st);

/* add: out = a + b; swiglu: out = a / (1 + exp(-a)) * b; n elements. */
typedef struct sift_cuda_eltwise {
    const float *a, *b;
    float *out;
    int64_t n;
    int swiglu;
} sift_cuda_eltwise;
cudaError_t sift_cuda_eltwise_launch(const sift_cuda_eltwise *a, cudaStream_t st);

/* kv_write: cache[h][pos0 + t] = src[t][h] (src f32 [t][h][d]; cache f16, rounded to nearest
 * even as sift_float_to_half rounds, or f32); rows without a page are not written. */
typedef struct sift_cuda_kv_write {
    const float *src;
    sift_cuda_rows cache;    /* base is writable */
    int64_t ncap;            /* logical rows of the cache */
    int f16;
    int64_t t;
    int h, d;
    int64_t pos0;
} sift_cuda_kv_write;
cudaError_t sift_cuda_kv_write_launch(const sift_cuda_kv_write *a, cudaStream_t st);

/* ---- saving work between steps (SPEC §4, §6, §7) ------------------------------------------- */

/* sel_cache_check (include/sift.h): one block; state f32 [qn + 4] = q_ref, then REUSE, HITS,
 * STEPS, VALID (the SIFT_SEL_CACHE_* order). */
typedef struct sift_cuda_sel_cache {
    const float *q;          /* [qn] */
    float *state;
    int64_t qn;
    float theta;
    int full;
    int vec;                 /* q and state 16-byte aligned and qn a multiple of 4: vector loads */
} sift_cuda_sel_cache;
cudaError_t sift_cuda_sel_cache_launch(const sift_cuda_sel_cache *a, cudaStream_t st);

/* fill_range: idx[l][col0 + i] = start + i for i < len - col0, every list l < lists. */
typedef struct sift_cuda_fill_range {
    int32_t *idx;
    int64_t lists, len, col0, start;
} sift_cuda_fill_range;
cudaError_t sift_cuda_fill_range_launch(const sift_cuda_fill_range *a, cudaStream_t st);

/* mean_rows: out[i] = (sum over t in order of x[t][i]) / rows, as the CPU reference sums. */
typedef struct sift_cuda_mean_rows {
    const float *x;
    float *out;
    int64_t rows, e;
} sift_cuda_mean_rows;
cudaError_t sift_cuda_mean_rows_launch(const sift_cuda_mean_rows *a, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
