// score, gather_attend, dense_attend, causal_attend and causal_attend_sparse: the host side, the
// merge kernel and the instances of the fast kernels of attend.cuh (attend_general.cu has the
// general ones). See attend.cuh for the algorithms.
#include "attend.cuh"

namespace sift_cuda {

// out[h] = sum_s o_s * exp(m_s - M) / sum_s l_s * exp(m_s - M), M = max_s m_s; 0 if nothing was valid.
// One block per query row h (a head; for causal attention, a (token, head) pair), hq rows.
__global__ void __launch_bounds__(128) attend_merge(const float *part_o, const float2 *part_ml, int splits, int hq,
                                                    int d, float *out)
{
    const int h = (int)blockIdx.x;
    const float ninf = neg_inf();
    float mx = ninf;
    for (int s = 0; s < splits; s++) mx = fmaxf(mx, part_ml[(int64_t)s * hq + h].x);
    for (int e = (int)threadIdx.x; e < d; e += (int)blockDim.x) {
        float l = 0.0f, acc = 0.0f;
        if (mx != ninf) {
            for (int s = 0; s < splits; s++) {
                const float2 ml = part_ml[(int64_t)s * hq + h];
                const float w = ml.x == ninf ? 0.0f : expf(ml.x - mx);
                l += ml.y * w;
                acc += part_o[((int64_t)s * hq + h) * d + e] * w;
            }
        }
        out[(int64_t)h * d + e] = mx == ninf ? 0.0f : acc * (1.0f / l);
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

static bool rows_aligned(const sift_cuda_rows &r, size_t es)
{
    return r.base == nullptr || (((uintptr_t)r.base % 16) == 0 && ((size_t)r.stride0 * es) % 16 == 0 &&
                                 ((size_t)r.stride1 * es) % 16 == 0);
}
static bool kv_aligned(const sift_cuda_kv &kv)
{
    const size_t es = kv.f16 ? 2 : 4;
    return rows_aligned(kv.k, es) && rows_aligned(kv.v, es);
}

// Splits `len` entries into blocks of whole tiles: about two waves of resident blocks in all.
static cudaError_t plan_splits(const sift_cuda_device *dev, const KernelInfo &k, int units, int64_t len, int *splits,
                               int64_t *split_len)
{
    int occ = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k.fn, NT, smem_for(k, dev->stages));
    if (e != cudaSuccess) return e;
    if (occ < 1) occ = 1;
    const int64_t tiles = (len + k.tile_rows - 1) / k.tile_rows;
    const int64_t target = 2 * (int64_t)dev->sm_count * occ;
    int64_t n = (target + units - 1) / units;
    if (n > tiles) n = tiles;
    if (n < 1) n = 1;
    const int64_t per = (tiles + n - 1) / n;
    *split_len = per * k.tile_rows;
    *splits = (int)((tiles + per - 1) / per);
    return cudaSuccess;
}

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
    dev->sm_count = sms;
    dev->stages = stages;
    dev->smem_per_sm = (size_t)per_sm;
    dev->smem_optin = (size_t)optin;
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_score_plan(const sift_cuda_device *dev, sift_cuda_score *a)
{
    const int G = a->hq / a->kv.hkv, gc = heads_per_block(G);
    a->chunks = (G + gc - 1) / gc;
    a->aligned = kv_aligned(a->kv);
    a->splits = 0;
    a->split_len = 0;
    if (a->m <= 0) return cudaSuccess;
    const KernelInfo k = kernel_info(false, a->kv.f16, a->kv.d, gc);
    return plan_splits(dev, k, a->kv.hkv * a->chunks, a->m, &a->splits, &a->split_len);
}

extern "C" cudaError_t sift_cuda_score_launch(const sift_cuda_device *dev, const sift_cuda_score *a, cudaStream_t st)
{
    if (a->m <= 0 || a->splits <= 0) return cudaSuccess;
    const KernelInfo k = kernel_info(false, a->kv.f16, a->kv.d, heads_per_block(a->hq / a->kv.hkv));
    const dim3 grid((unsigned)a->splits, (unsigned)a->kv.hkv, (unsigned)a->chunks);
    return launch(k.score, grid, dim3(NT), smem_for(k, dev->stages), st, *a, dev->stages);
}

extern "C" cudaError_t sift_cuda_attend_plan(const sift_cuda_device *dev, sift_cuda_attend *a)
{
    const bool general = a->rope_tab != nullptr || a->kv.v_own_map;
    const int G = a->hq / a->kv.hkv, gc = heads_per_block(G, general);
    a->chunks = (G + gc - 1) / gc;
    a->aligned = kv_aligned(a->kv);
    a->splits = 0;
    a->split_len = 0;
    a->scratch_bytes = 0;
    if (a->n <= 0 || a->tokens <= 0) return cudaSuccess;
    const KernelInfo k = kernel_info(true, a->kv.f16, a->kv.d, gc, general);
    cudaError_t e = plan_splits(dev, k, a->kv.hkv * a->chunks * a->tokens, a->n, &a->splits, &a->split_len);
    if (e != cudaSuccess) return e;
    if ((int64_t)a->splits * a->tokens > INT32_MAX) return cudaErrorInvalidConfiguration;
    const size_t rows = (size_t)a->splits * (size_t)a->tokens * (size_t)a->hq;
    a->scratch_bytes = rows * (size_t)a->kv.d * sizeof(float) + rows * sizeof(float2);
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_attend_launch(const sift_cuda_device *dev, const sift_cuda_attend *a, void *scratch,
                                               cudaStream_t st)
{
    const int d = a->kv.d;
    const int rows = a->tokens * a->hq; // query rows (the backend keeps T * Hq below 2^30)
    if (rows <= 0) return cudaSuccess;
    if (a->n <= 0 || a->splits <= 0) // an empty list attends to nothing: zeros
        return cudaMemsetAsync(a->out, 0, (size_t)rows * (size_t)d * sizeof(float), st);
    const bool general = a->rope_tab != nullptr || a->kv.v_own_map;
    const KernelInfo k = kernel_info(true, a->kv.f16, d, heads_per_block(a->hq / a->kv.hkv, general), general);
    const size_t parts = (size_t)a->splits * (size_t)rows;
    float *part_o = static_cast<float *>(scratch);
    float2 *part_ml = reinterpret_cast<float2 *>(part_o + parts * (size_t)d);
    const dim3 grid((unsigned)a->splits * (unsigned)a->tokens, (unsigned)a->kv.hkv, (unsigned)a->chunks);
    cudaError_t e = launch(k.attend, grid, dim3(NT), smem_for(k, dev->stages), st, *a, dev->stages, part_o, part_ml);
    if (e != cudaSuccess) return e;
    return launch(attend_merge, dim3((unsigned)rows), dim3(128), 0, st, part_o, part_ml, a->splits, rows, d, a->out);
}
