/* The CUDA kernels' C interface: what backends/cuda/cuda_backend.c (C) calls in the .cu files of
 * cuda/ (CUDA C++).
 *
 * Every op has a plan and a launch, with the same signatures for all ops; both read the engine's
 * node (engine/backend.h): operands are its tensors (device pointers: impl + offset; shapes,
 * strides, page tables), parameters its n->p. The plan decides once per graph version what the
 * node's launches need (launch geometry, splits, which kernels, scratch bytes) into a
 * sift_cuda_plan, which the backend keeps in the graph's cache; the launch enqueues the node's
 * kernels on a stream and returns the first launch error. The algorithms are the ones in
 * docs/kernels.md. */
#ifndef SIFT_CUDA_H
#define SIFT_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "../engine/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the plans need to know of the device; filled by sift_cuda_init. */
typedef struct sift_cuda_device {
    int sm_count;
    int stages;          /* depth of the cp.async pipeline of the score and attention kernels: 2 or 3 */
    size_t smem_per_sm;  /* shared memory per multiprocessor, bytes */
    size_t smem_optin;   /* the most dynamic shared memory one block may use, bytes */
    int mma;             /* score and decode attention may use the tensor cores (SIFT_CUDA_MMA=0: never) */
    int select_warm;     /* select starts warm where it can (SIFT_CUDA_SELECT_WARM=1; off by default) */
} sift_cuda_device;

/* Picks the pipeline depth for the device and raises the kernels' dynamic shared memory limits.
 * Returns cudaErrorNotSupported (with nothing changed) when the device cannot hold a 2-stage tile. */
cudaError_t sift_cuda_init(int device, sift_cuda_device *dev);

/* What a plan decides; each op uses the fields its plan function names, the rest stay 0. */
typedef struct sift_cuda_plan {
    int path;             /* which kernels: select 1 = radix select; attention 1 = the general kernels, 2 = the
                           * tensor cores; score 1 = the tensor cores;
                           * matmul 1 = matrix-vector, 2 = tiled (0: nothing to do); score_max 0 = tiled,
                           * 1 = rows, 2 = i8 keys at D = 16, 3 = i8 keys, any D */
    int aligned;          /* operands 16-byte aligned, vector copies and loads (score, attention, sel_cache_check);
                           * score_max's i8 keys: rows 4-byte aligned, word loads */
    int chunks;           /* score, attention: query-head chunks per KV head */
    int blocks;           /* score, attention: splits of the positions; vote: partial blocks per head;
                           * select: radix blocks per list; neighbor_fetch: blocks of the grid */
    int64_t split_len;    /* score, attention: positions per split */
    int warps;            /* matmul, matrix-vector: warps per block */
    int rows_per_block;   /* matmul, matrix-vector: rows of w per row group */
    int groups_per_lane;  /* matmul, matrix-vector: weight groups per lane and pipeline stage */
    size_t smem;          /* matmul, matrix-vector: dynamic shared memory per block */
    size_t scratch_bytes; /* device scratch the launches need (vote partials, radix buffers, attention partials) */
    size_t zeroed_bytes;  /* device state that is zero before and after every run of the node (tickets, radix
                           * histograms): the kernels' last user of it clears it; the backend zeroes it once
                           * and again after a failed run */
    /* gather_attend with rotary keys: the plan asks for a (cos, sin) table of rope_rows rows (row r,
     * pair p: the angle r * n->p.rope_freq[p]); the backend puts it in rope_tab (float2 [rows][n_rot / 2]) */
    int64_t rope_rows;
    const void *rope_tab;
    const char *why;      /* a plan refused with cudaErrorInvalidConfiguration (a limit of the CUDA
                           * kernels: SIFT_E_LIMIT) or cudaErrorNotSupported (SIFT_E_UNSUPPORTED): which one */
} sift_cuda_plan;

/* The functions of every op have these types. A plan fills what its op needs (the comment above its
 * definition says which fields) into a zeroed plan; an op with nothing to decide has none. A launch
 * gets the plan, scratch_bytes of device scratch and zeroed_bytes of zeroed state. */
typedef cudaError_t sift_cuda_plan_fn(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan);
typedef cudaError_t sift_cuda_launch_fn(const sift_cuda_device *dev, const sift_node *n, const sift_cuda_plan *plan,
                                        void *scratch, void *zeroed, cudaStream_t st);

/* Every op's plan and launch: sift_cuda_<name>_plan and sift_cuda_<name>_launch for op <name> of
 * the op table (engine/ops.def), declared from it here and tabled from it in cuda_backend.c, so an
 * op without them does not build. An op that shares another's functions, or has nothing to plan
 * (sift_cuda_no_plan), is mapped to them by a #define here; a function so shared is declared
 * again, which is allowed. */
#define sift_cuda_gather_attend_plan sift_cuda_attend_plan
#define sift_cuda_gather_attend_launch sift_cuda_attend_launch
#define sift_cuda_dense_attend_plan sift_cuda_attend_plan
#define sift_cuda_dense_attend_launch sift_cuda_attend_launch
#define sift_cuda_causal_attend_plan sift_cuda_attend_plan
#define sift_cuda_causal_attend_launch sift_cuda_attend_launch
#define sift_cuda_causal_attend_sparse_plan sift_cuda_attend_plan
#define sift_cuda_causal_attend_sparse_launch sift_cuda_attend_launch
#define sift_cuda_layernorm_plan sift_cuda_rmsnorm_plan
#define sift_cuda_rope_plan sift_cuda_no_plan
#define sift_cuda_swiglu_plan sift_cuda_no_plan
#define sift_cuda_swiglu_launch sift_cuda_eltwise_launch
#define sift_cuda_add_plan sift_cuda_no_plan
#define sift_cuda_add_launch sift_cuda_eltwise_launch
#define sift_cuda_silu_plan sift_cuda_no_plan
#define sift_cuda_silu_launch sift_cuda_eltwise_launch
#define sift_cuda_mean_rows_plan sift_cuda_no_plan
#define SIFT_OP(id, name, min_src, max_src, flags) sift_cuda_plan_fn sift_cuda_##name##_plan; sift_cuda_launch_fn sift_cuda_##name##_launch;
#include "../engine/ops.def"
#undef SIFT_OP

#ifdef __cplusplus
}
#endif
#endif
