// score, gather_attend, dense_attend, causal_attend and causal_attend_sparse: the host side, the
// merge kernel and the instances of the fast kernels of attend.cuh (attend_general.cu has the
// general ones). See attend.cuh for the algorithms.
#include "attend.cuh"

#include <atomic>
#include <stdlib.h>
#include <string.h>

namespace sift_cuda {

// out[h] = sum_s o_s * exp(m_s - M) / sum_s l_s * exp(m_s - M), M = max_s m_s; 0 if nothing was valid.
// One block per query row h (a head; for causal attention, a (token, head) pair), hq rows. The
// splits' weights exp(m_s - M) are computed once per block into shared memory (MERGE_CHUNK at a
// time), l summed on the way. The block's threads are groups of D/4 (D <= 128, a multiple of 8: the
// engine), each thread 4 elements of o (16-byte loads): group g sums splits g, g + groups, ... and
// the groups' sums are added in shared memory at the end. Why: with every thread walking all the
// splits of its 1-2 elements, four loads at a time, the merge of 33 splits took 5.9 us under Nsight
// Compute on the H200; here a thread has a few splits, whose loads go out together (dense attention
// at 32K, merge included: 45.7 -> 44.4 us).
constexpr int MERGE_THREADS = 256, MERGE_CHUNK = 1024;

__device__ __forceinline__ float block_reduce(float v, bool is_max, float *red)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float y = __shfl_xor_sync(FULL, v, o);
        v = is_max ? fmaxf(v, y) : v + y;
    }
    __syncthreads(); // red is free (an earlier reduction's readers are done)
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < MERGE_THREADS / 32; w++) v = is_max ? fmaxf(v, red[w]) : v + red[w];
    return v;
}

__global__ void __launch_bounds__(MERGE_THREADS) attend_merge(const float *part_o, const float2 *part_ml, int splits, int hq,
                                                              int d, float *out)
{
    grid_dep_enter();
    __shared__ float wt[MERGE_CHUNK], red[MERGE_THREADS / 32];
    __shared__ float4 sums[MERGE_THREADS];
    const int h = (int)blockIdx.x, tid = (int)threadIdx.x;
    const int cols = d / 4, groups = MERGE_THREADS / cols, col = tid % cols, grp = tid / cols; // grp >= groups: idle
    const int64_t stride = (int64_t)hq * cols; // float4s from one split's o to the next
    const float ninf = neg_inf();
    float mx = ninf;
    for (int s = tid; s < splits; s += MERGE_THREADS) mx = fmaxf(mx, part_ml[(int64_t)s * hq + h].x);
    mx = block_reduce(mx, true, red);
    float l = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < splits; s0 += MERGE_CHUNK) {
        const int n = min(MERGE_CHUNK, splits - s0);
        __syncthreads(); // the previous chunk's weights are read
        for (int s = tid; s < n; s += MERGE_THREADS) {
            const float2 ml = part_ml[(int64_t)(s0 + s) * hq + h];
            const float w = ml.x == ninf ? 0.0f : expf(ml.x - mx);
            wt[s] = w;
            l += ml.y * w;
        }
        __syncthreads();
        const float4 *po = reinterpret_cast<const float4 *>(part_o + ((int64_t)s0 * hq + h) * d) + col;
        if (grp < groups) {
#pragma unroll 4
            for (int s = grp; s < n; s += groups) {
                const float4 v = po[(int64_t)s * stride];
                const float w = wt[s];
                acc.x += v.x * w, acc.y += v.y * w, acc.z += v.z * w, acc.w += v.w * w;
            }
        }
    }
    l = block_reduce(l, false, red);
    sums[tid] = acc;
    __syncthreads();
    if (grp == 0) {
        float4 t = sums[col];
        for (int g = 1; g < groups; g++) {
            const float4 u = sums[g * cols + col];
            t.x += u.x, t.y += u.y, t.z += u.z, t.w += u.w;
        }
        const float inv = mx == ninf ? 0.0f : 1.0f / l;
        float *o = out + (int64_t)h * d + 4 * col;
        o[0] = t.x * inv, o[1] = t.y * inv, o[2] = t.z * inv, o[3] = t.w * inv;
    }
}

// ---- host side: kernel tables, plans, launches ---------------------------------------------------

template <typename T, int D> KernelInfo pick_gc(bool attend, int gc)
{
    switch (gc) {
    case 1: return attend ? attend_info<T, D, 1, false>() : score_info<T, D, 1>();
    case 2: return attend ? attend_info<T, D, 2, false>() : score_info<T, D, 2>();
    case 4: return attend ? attend_info<T, D, 4, false>() : score_info<T, D, 4>();
    default: return attend ? attend_info<T, D, 8, false>() : score_info<T, D, 8>();
    }
}

// D <= 64 runs the 64 kernels, 64 < D <= 128 the 128 ones (rows zero-padded to the kernel's D).
// general: the general attention kernels (rotary keys, V rows mapped apart from K's).
static KernelInfo kernel_info(bool attend, int f16, int d, int gc, bool general = false)
{
    if (attend && general) return general_kernel_info(f16, d, gc);
    if (f16) return d <= 64 ? pick_gc<__half, 64>(attend, gc) : pick_gc<__half, 128>(attend, gc);
    return d <= 64 ? pick_gc<float, 64>(attend, gc) : pick_gc<float, 128>(attend, gc);
}

// Heads per block for a group of G query heads: 1, 2, 4 or 8 (G > 8 is split into chunks of 8).
// General kernels: at most 4 (G > 4 in chunks of 4, each reading the group's K/V rows again): 8
// heads' q and the rotation or the second row lookup do not fit in the registers without spilling.
static int heads_per_block(int G, bool general = false)
{
    if (general) return G >= 3 ? 4 : G;
    return G >= 5 ? 8 : G >= 3 ? 4 : G;
}

static size_t smem_for(const KernelInfo &k, int stages) { return stages >= 3 ? k.smem3 : k.smem2; }

static bool rows_aligned(const RowMap &r, size_t es)
{
    return r.base == nullptr || (((uintptr_t)r.base % 16) == 0 && ((size_t)r.stride0 * es) % 16 == 0 &&
                                 ((size_t)r.stride1 * es) % 16 == 0 && host_pool_aligned(r, es, 16));
}
static bool kv_aligned(const KvMap &kv)
{
    const size_t es = kv.f16 ? 2 : 4;
    return rows_aligned(kv.k, es) && rows_aligned(kv.v, es);
}

// Splits `len` entries into blocks of whole tiles of tile_rows: `waves` waves of resident blocks
// (of kernel fn, `threads` threads and smem bytes each) in all, over `units` blocks per split.
static cudaError_t plan_splits(const sift_cuda_device *dev, const void *fn, int threads, size_t smem, int tile_rows,
                               int waves, int units, int64_t len, int *splits, int64_t *split_len)
{
    int occ = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, threads, smem);
    if (e != cudaSuccess) return e;
    if (occ < 1) occ = 1;
    const int64_t tiles = (len + tile_rows - 1) / tile_rows;
    const int64_t target = (int64_t)waves * dev->sm_count * occ;
    int64_t n = (target + units - 1) / units;
    if (n > tiles) n = tiles;
    if (n < 1) n = 1;
    const int64_t per = (tiles + n - 1) / n;
    *split_len = per * tile_rows;
    *splits = (int)((tiles + per - 1) / per);
    return cudaSuccess;
}
static cudaError_t plan_splits(const sift_cuda_device *dev, const KernelInfo &k, int units, int64_t len, int *splits,
                               int64_t *split_len)
{
    return plan_splits(dev, k.fn, NT, smem_for(k, dev->stages), k.tile_rows, 2, units, len, splits, split_len);
}

#ifndef SIFT_CUDA_EMU
// Programmatic launches per device ordinal, set by sift_cuda_init (devices past PDL_DEVICES: never).
constexpr int PDL_DEVICES = 64;
static std::atomic<bool> pdl_allowed[PDL_DEVICES];

bool pdl_on_current_device()
{
    int d = -1;
    return cudaGetDevice(&d) == cudaSuccess && d >= 0 && d < PDL_DEVICES && pdl_allowed[d].load(std::memory_order_relaxed);
}
#endif

} // namespace sift_cuda

using namespace sift_cuda;

extern "C" cudaError_t sift_cuda_init(int device, sift_cuda_device *dev)
{
    int sms = 0, per_sm = 0, optin = 0, reserved = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
    if (e != cudaSuccess) return e;
    // The largest kernel decides: 3 stages if two blocks of it still fit on a multiprocessor.
    size_t need2 = 0, need3 = 0;
    for (int rope = 0; rope < 2; rope++)
        for (int f16 = 0; f16 < 2; f16++)
            for (int d = 64; d <= 128; d += 64)
                for (int gc = 1; gc <= 8; gc *= 2) {
                    const KernelInfo k = kernel_info(true, f16, d, gc, rope != 0);
                    need2 = need2 > k.smem2 ? need2 : k.smem2;
                    need3 = need3 > k.smem3 ? need3 : k.smem3;
                }
    int stages;
    if (need3 <= (size_t)optin && 2 * (need3 + (size_t)reserved) <= (size_t)per_sm) stages = 3;
    else if (need2 <= (size_t)optin) stages = 2;
    else return cudaErrorNotSupported;
    for (int kind = 0; kind < 3; kind++) // score, attention, general attention
        for (int f16 = 0; f16 < 2; f16++)
            for (int d = 64; d <= 128; d += 64)
                for (int gc = 1; gc <= 8; gc *= 2) {
                    const KernelInfo k = kernel_info(kind > 0, f16, d, gc, kind == 2);
                    e = cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_for(k, stages));
                    if (e == cudaSuccess)
                        e = cudaFuncSetAttribute(k.fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                 (int)cudaSharedmemCarveoutMaxShared);
                    if (e != cudaSuccess) return e;
                }
    for (int d = 64; d <= 128; d += 64) {
        const auto k = mma_kernel_info(d);
        if (k.smem > (size_t)optin) return cudaErrorNotSupported;
        e = cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k.smem);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k.fn, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(score_mma_kernel_info(d).fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     (int)cudaSharedmemCarveoutMaxShared);
        if (e != cudaSuccess) return e;
    }
    // SIFT_CUDA_MMA=0 runs score and decode attention on score_kernel and attend_kernel instead
    // of the tensor cores (to compare the two); read once, here
    const char *mma = getenv("SIFT_CUDA_MMA");
    dev->mma = !(mma && !strcmp(mma, "0"));
    // SIFT_CUDA_SELECT_WARM=1 starts TokenButler's top-k warm (select.cu); off by default because a
    // miss costs far more than a hit saves: on an H100, 8B Q8_0 TokenButler decode at 128K (random
    // predictor, 45% of the lists hitting) ran at 123.6 tokens/s warm and 138.2 in full, its select
    // 85 us a layer against 51 (docs/benchmarks.md). The conformance turns it on.
    const char *warm = getenv("SIFT_CUDA_SELECT_WARM");
    dev->select_warm = warm && !strcmp(warm, "1");
#ifndef SIFT_CUDA_EMU
    // Kernels launch programmatically on sm_90 and later (common.cuh launch): on the H200 that took
    // 32K decode of the 8B-shaped model from 176 to 195 tokens/s. SIFT_CUDA_PDL=0 turns it off.
    int major = 0;
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess) return e;
    const char *pdl = getenv("SIFT_CUDA_PDL");
    if (device >= 0 && device < PDL_DEVICES) pdl_allowed[device] = major >= 9 && !(pdl && !strcmp(pdl, "0"));
#endif
    dev->sm_count = sms;
    dev->stages = stages;
    dev->smem_per_sm = (size_t)per_sm;
    dev->smem_optin = (size_t)optin;
    e = matmul_init(dev);
    if (e == cudaSuccess) e = select_init(dev);
    return e == cudaSuccess ? score_max_init(dev) : e;
}

// The tensor cores take score and one-query attention over f16 K (and V) rows of D = 64 or 128,
// 16-byte aligned, for groups of at most 4 query heads (unless SIFT_CUDA_MMA=0: dev->mma).
static bool mma_shape(const sift_cuda_device *dev, const KvMap &kv, int G, bool aligned)
{
    return dev->mma && kv.f16 && (kv.d == 64 || kv.d == 128) && G <= MMA_HEADS && aligned;
}

// ---- score --------------------------------------------------------------------------------------

static ScoreArgs score_args(const sift_node *n, const sift_cuda_plan *plan)
{
    ScoreArgs a = {};
    a.q = dev_ptr<const float>(n->src[0]);
    a.kv = kv_map(n->src[1], nullptr);
    a.hq = (int)n->src[0]->shape[0];
    a.begin = n->p.begin;
    a.m = n->p.end - n->p.begin;
    a.scale = n->p.scale;
    a.scores = dev_ptr<float>(n->dst);
    a.skip = skip_flag(n);
    if (plan) {
        a.chunks = plan->chunks;
        a.splits = plan->blocks;
        a.split_len = plan->split_len;
        a.aligned = plan->aligned;
    }
    return a;
}

// path (1: the tensor cores), chunks, aligned; blocks (splits) and split_len when there are positions.
extern "C" cudaError_t sift_cuda_score_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    if (!rows_addressable(n->src[1])) return beyond_limit(plan, "a K pool of 2^31 rows or more per KV head");
    const ScoreArgs a = score_args(n, nullptr);
    const int G = a.hq / a.kv.hkv, gc = heads_per_block(G);
    plan->aligned = kv_aligned(a.kv);
    plan->path = mma_shape(dev, a.kv, G, plan->aligned);
    plan->chunks = plan->path ? 1 : (G + gc - 1) / gc;
    if (a.m <= 0) return cudaSuccess;
    if (plan->path) { // one wave of warps
        const auto k = score_mma_kernel_info(a.kv.d);
        return plan_splits(dev, k.fn, k.threads, k.smem, k.tile_rows, 1, a.kv.hkv, a.m, &plan->blocks, &plan->split_len);
    }
    const KernelInfo k = kernel_info(false, a.kv.f16, a.kv.d, gc);
    return plan_splits(dev, k, a.kv.hkv * plan->chunks, a.m, &plan->blocks, &plan->split_len);
}

extern "C" cudaError_t sift_cuda_score_launch(const sift_cuda_device *dev, const sift_node *n,
                                              const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)scratch;
    const ScoreArgs a = score_args(n, plan);
    if (a.m <= 0 || a.splits <= 0) return cudaSuccess;
    const dim3 grid((unsigned)a.splits, (unsigned)a.kv.hkv, (unsigned)a.chunks);
    if (plan->path) {
        const auto k = score_mma_kernel_info(a.kv.d);
        return launch(k.kernel, grid, dim3(k.threads), k.smem, st, a);
    }
    const KernelInfo k = kernel_info(false, a.kv.f16, a.kv.d, heads_per_block(a.hq / a.kv.hkv));
    return launch(k.score, grid, dim3(NT), smem_for(k, dev->stages), st, a, dev->stages);
}

// ---- gather_attend, dense_attend, causal_attend, causal_attend_sparse -----------------------------

// The sequence each query row attends: the node's walk (engine/backend.h), in AttendArgs' terms
// (entry e >= list_len is position range0 + e; row t attends min(n, tok_base + t + 1) entries).
static AttendArgs attend_args(const sift_node *n, const sift_cuda_plan *plan)
{
    const sift_attend_walk *w = &n->p.walk;
    const bool causal = n->op == SIFT_OP_CAUSAL_ATTEND || n->op == SIFT_OP_CAUSAL_ATTEND_SPARSE;
    const sift_tensor *q = n->src[0], *idx = n->n_src > 3 ? n->src[3] : nullptr;
    AttendArgs a = {};
    a.q = dev_ptr<const float>(q);
    a.kv = kv_map(n->src[1], n->src[2]);
    a.idx = dev_ptr<const int32_t>(idx);
    a.idx_lists = idx ? (int)idx->shape[0] : 1;
    a.list_len = w->list_len;
    a.tokens = (int)w->tokens;
    a.hq = (int)q->shape[q->ndim - 2];
    a.causal = causal;
    a.n = w->n;
    a.tok_base = causal ? w->n - w->tokens : 0;
    a.range0 = w->range0 - w->list_len;
    a.scale = n->p.scale;
    a.out = dev_ptr<float>(n->dst);
    if (plan) {
        if (plan->rope_tab) {
            a.rope_tab = static_cast<const float2 *>(plan->rope_tab);
            a.rope_half = n->p.rope.n_rot / 2;
            a.rope_neox = n->p.rope.mode == SIFT_ROPE_NEOX;
        }
        a.chunks = plan->chunks;
        a.splits = plan->blocks;
        a.split_len = plan->split_len;
        a.aligned = plan->aligned;
    }
    return a;
}

enum { ATTEND_FAST = 0, ATTEND_GENERAL, ATTEND_MMA }; // sift_cuda_plan.path

// path (ATTEND_*), chunks, aligned; with entries and tokens blocks (splits), split_len,
// scratch_bytes (the splits' partials) and, for rotary keys, rope_rows.
extern "C" cudaError_t sift_cuda_attend_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    if (!rows_addressable(n->src[1]) || !rows_addressable(n->src[2]))
        return beyond_limit(plan, "a K/V pool of 2^31 rows or more per KV head");
    const AttendArgs a = attend_args(n, nullptr);
    if (a.causal && (int64_t)a.tokens * a.hq > INT32_MAX / 2)
        return beyond_limit(plan, "causal attention over more than 2^30 (token, head) rows");
    const bool general = n->p.rope_keys || a.kv.v_own_map;
    const int G = a.hq / a.kv.hkv, gc = heads_per_block(G, general);
    plan->aligned = kv_aligned(a.kv);
    // one query per head, f16 K/V at K's rows, D = 64 or 128, groups of up to 4: the tensor cores
    const bool mma = !general && !a.causal && a.tokens == 1 && mma_shape(dev, a.kv, G, plan->aligned);
    plan->path = mma ? ATTEND_MMA : general ? ATTEND_GENERAL : ATTEND_FAST;
    plan->chunks = mma ? 1 : (G + gc - 1) / gc;
    if (a.n <= 0 || a.tokens <= 0) return cudaSuccess;
    if (n->p.rope_keys) plan->rope_rows = a.n;
    cudaError_t e;
    if (mma) { // one wave of warps
        const auto k = mma_kernel_info(a.kv.d);
        e = plan_splits(dev, k.fn, k.threads, k.smem, k.tile_rows, 1, a.kv.hkv, a.n, &plan->blocks, &plan->split_len);
    } else {
        const KernelInfo k = kernel_info(true, a.kv.f16, a.kv.d, gc, general);
        e = plan_splits(dev, k, a.kv.hkv * plan->chunks * a.tokens, a.n, &plan->blocks, &plan->split_len);
    }
    if (e != cudaSuccess) return e;
    if ((int64_t)plan->blocks * a.tokens > INT32_MAX)
        return beyond_limit(plan, "more than 2^31 - 1 blocks of tokens x splits");
    const size_t rows = (size_t)plan->blocks * (size_t)a.tokens * (size_t)a.hq;
    plan->scratch_bytes = rows * (size_t)a.kv.d * sizeof(float) + rows * sizeof(float2);
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_attend_launch(const sift_cuda_device *dev, const sift_node *n,
                                               const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    const AttendArgs a = attend_args(n, plan);
    const int d = a.kv.d;
    const int rows = a.tokens * a.hq; // query rows (the plan keeps T * Hq below 2^30)
    if (rows <= 0) return cudaSuccess;
    if (a.n <= 0 || a.splits <= 0) // an empty list attends to nothing: zeros
        return cudaMemsetAsync(a.out, 0, (size_t)rows * (size_t)d * sizeof(float), st);
    const size_t parts = (size_t)a.splits * (size_t)rows;
    float *part_o = static_cast<float *>(scratch);
    float2 *part_ml = reinterpret_cast<float2 *>(part_o + parts * (size_t)d);
    const dim3 grid((unsigned)a.splits * (unsigned)a.tokens, (unsigned)a.kv.hkv, (unsigned)a.chunks);
    cudaError_t e;
    if (plan->path == ATTEND_MMA) {
        const auto k = mma_kernel_info(d);
        e = launch(k.kernel, grid, dim3(k.threads), k.smem, st, a, part_o, part_ml);
    } else {
        const bool general = plan->path == ATTEND_GENERAL;
        const KernelInfo k = kernel_info(true, a.kv.f16, d, heads_per_block(a.hq / a.kv.hkv, general), general);
        e = launch(k.attend, grid, dim3(NT), smem_for(k, dev->stages), st, a, dev->stages, part_o, part_ml);
    }
    if (e != cudaSuccess) return e;
    return launch(attend_merge, dim3((unsigned)rows), dim3(MERGE_THREADS), 0, st, part_o, part_ml, a.splits, rows, d, a.out);
}
