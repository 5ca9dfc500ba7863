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

/* K and V of one layer: [Hkv][Ncap][D], f16 or f32 (both the same type). */
typedef struct sift_cuda_kv {
    const void *k, *v;       /* v may be NULL (score) */
    int64_t stride0, stride1; /* elements between KV heads, between positions */
    int64_t ncap;            /* positions in the cache (index bound) */
    int hkv, d, f16;
} sift_cuda_kv;

/* ---- score: scores[h][j] = scale * dot(q[h], K[g(h)][begin + j]), j < m ---------------------- */
typedef struct sift_cuda_score {
    const float *q;          /* [hq][d] */
    sift_cuda_kv kv;
    int hq;
    int64_t begin, m;
    float scale;
    float *scores;           /* [hq][m] */
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

/* ---- gather_attend / dense_attend / causal_attend -------------------------------------------- */
typedef struct sift_cuda_attend {
    const float *q;          /* [tokens][hq][d] */
    sift_cuda_kv kv;
    const int32_t *idx;      /* [lists][n], or NULL for dense: positions [0, n) */
    int idx_lists;           /* 1 (shared) or hkv */
    int64_t n;               /* list length (dense: n_ctx; causal: pos0 + tokens) */
    int hq;
    int tokens;              /* queries per head: 1, or T for causal attention (may be 0) */
    int causal;              /* token t attends to positions [0, pos0 + t] only */
    int64_t pos0;
    float scale;
    float *out;              /* [tokens][hq][d] */
    /* plan */
    int chunks, splits;
    int64_t split_len;
    int aligned;
    size_t scratch_bytes;
} sift_cuda_attend;
cudaError_t sift_cuda_attend_plan(const sift_cuda_device *dev, sift_cuda_attend *a);
cudaError_t sift_cuda_attend_launch(const sift_cuda_device *dev, const sift_cuda_attend *a, void *scratch,
                                    cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
