// vote (docs/kernels.md).
//
// SOFTMAX_SUM, two kernels:
//   1. vote_partial, grid (blocks of 4096 positions, head): per block and head the max m and the
//      sum l of exp(s - m) over the block's positions (each thread loads its 16 scores, takes
//      their max, sums the exps: one exp per score), merged across the block. The head's last
//      block (is_last: a ticket per head, zeroed state) merges the blocks' (m, l) into the head's
//      (m_h, l_h) and stores them as vote_sum uses them: (m_h log2 e, 1 / l_h).
//   2. vote_sum, one thread per position: v[j] = sum over h, in head order, of
//      exp(s[h][j] - m_h) / l_h. A thread loads VSH heads' scores before it uses any; the block
//      stages the heads' stats in shared memory once (read from global memory in the inner loop,
//      they cost 2 us at 32K and 8 us at 1M on the H200).
// The exps of the two passes over the scores are the SFU's ex2 of (s - m) log2(e), one FMA and
// one MUFU each, and vote_sum multiplies by 1 / l_h: with expf and a division per score,
// vote_sum was bound by its arithmetic, not its loads (cuda/bench/vote.cu on the H200:
// 15.5 -> 4.5 us for 32 heads of 128K scores, 152 -> 36 us for 1M; the votes' largest relative
// error against a double-precision reference 4.7e-7 before, 4.9e-7 after).
// KVHEAD_MAX, one kernel, grid (blocks of positions, g): u[g][j] = max over g's query heads of
// s[h][j] (fmaxf in head order, as the CPU reference).
// Predicated (sift_graph_skip_if): every kernel returns at once when the node's flag is set.
#include "common.cuh"

namespace sift_cuda {

constexpr int VPT = 16;        // scores per thread in vote_partial
constexpr int VCH = NT * VPT;  // positions per block in vote_partial
constexpr int VSH = 16;        // heads whose scores a vote_sum thread loads at once
constexpr int VHQ = 128;       // heads whose (m log2 e, 1 / l) vote_sum stages in shared memory per pass
constexpr float LOG2E = 1.4426950408889634f;

// 2^x by the SFU (ex2.approx: 2 ulp, denormals flushed); 2^-inf = 0. The emulator: exp2f.
__device__ __forceinline__ float ex2(float x)
{
#ifdef SIFT_CUDA_EMU
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

// Merges one (m, l) per thread over the block; the result is valid in thread 0.
__device__ __forceinline__ float2 block_ml_merge(float2 x)
{
    __shared__ float2 part[NT / 32];
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float2 y;
        y.x = __shfl_xor_sync(FULL, x.x, o);
        y.y = __shfl_xor_sync(FULL, x.y, o);
        x = ml_merge(x, y);
    }
    if (lane == 0) part[warp] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        x = part[0];
        for (int w = 1; w < NT / 32; w++) x = ml_merge(x, part[w]);
    }
    return x;
}

__global__ void __launch_bounds__(NT) vote_partial(const float *scores, int64_t m, float2 *part, uint32_t *tickets,
                                                   float2 *stats, const float *skip)
{
    grid_dep_enter();
    if (skipped(skip)) return;
    const int h = (int)blockIdx.y, b = (int)blockIdx.x, tid = (int)threadIdx.x, blocks = (int)gridDim.x;
    const float *row = scores + (int64_t)h * m;
    const int64_t j0 = (int64_t)b * VCH;
    const float ninf = neg_inf();
    float x[VPT];
    float mx = ninf;
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int64_t j = j0 + i * NT + tid;
        x[i] = j < m ? row[j] : ninf;
        mx = fmaxf(mx, x[i]);
    }
    float l = 0.0f;
    if (mx != ninf) {
        const float mx2 = mx * LOG2E;
#pragma unroll
        for (int i = 0; i < VPT; i++) l += ex2(fmaf(x[i], LOG2E, -mx2)); // exp(-inf) = 0 past the end
    }
    const float2 r = block_ml_merge(make_float2(mx, l));
    if (tid == 0) part[(int64_t)h * blocks + b] = r;
    if (!is_last(tickets + h)) return;
    float2 t = make_float2(ninf, 0.0f); // the head's (m_h, l_h), merged in block order per thread
    for (int i = tid; i < blocks; i += NT) t = ml_merge(t, __ldcg(part + (int64_t)h * blocks + i));
    t = block_ml_merge(t);
    if (tid == 0) stats[h] = make_float2(t.x * LOG2E, 1.0f / t.y);
}

__global__ void __launch_bounds__(NT) vote_sum(const float *scores, int64_t m, int hq, const float2 *stats, float *votes,
                                               const float *skip)
{
    grid_dep_enter();
    if (skipped(skip)) return;
    __shared__ float2 k[VHQ]; // per head (m_h log2 e, 1 / l_h), as vote_partial stored them
    const int64_t j = (int64_t)blockIdx.x * NT + threadIdx.x;
    float v = 0.0f;
    for (int p0 = 0; p0 < hq; p0 += VHQ) {
        const int ph = min(VHQ, hq - p0);
        if (p0) __syncthreads(); // every thread is done with the previous pass's stats
        for (int i = (int)threadIdx.x; i < ph; i += NT) k[i] = stats[p0 + i];
        __syncthreads();
        if (j >= m) continue; // (not return: the block's threads all reach the barriers)
        for (int h0 = 0; h0 < ph; h0 += VSH) {
            float x[VSH];
#pragma unroll
            for (int i = 0; i < VSH; i++) x[i] = h0 + i < ph ? scores[(int64_t)(p0 + h0 + i) * m + j] : 0.0f;
#pragma unroll
            for (int i = 0; i < VSH; i++)
                if (h0 + i < ph) v = fmaf(ex2(fmaf(x[i], LOG2E, -k[h0 + i].x)), k[h0 + i].y, v);
        }
    }
    if (j < m) votes[j] = v;
}

__global__ void __launch_bounds__(NT) vote_kvmax(const float *scores, int64_t m, int group, float *votes,
                                                 const float *skip)
{
    grid_dep_enter();
    if (skipped(skip)) return;
    const int64_t g = blockIdx.y, j = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (j >= m) return;
    float mx = neg_inf();
    for (int64_t h = g * group; h < (g + 1) * group; h++) mx = fmaxf(mx, scores[h * m + j]);
    votes[g * m + j] = mx;
}

} // namespace sift_cuda

using namespace sift_cuda;

// blocks (SOFTMAX_SUM: of the partial pass, per head), scratch_bytes and zeroed_bytes.
extern "C" cudaError_t sift_cuda_vote_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    const int64_t hq = n->src[0]->shape[0], m = n->src[0]->shape[1];
    if (m <= 0) return cudaSuccess;
    if (n->p.vote == SIFT_VOTE_KVHEAD_MAX) {
        if (n->dst->shape[0] > 65535) return beyond_limit(plan, "KVHEAD_MAX votes over more than 65535 KV heads");
        return cudaSuccess;
    }
    const int64_t blocks = (m + VCH - 1) / VCH;
    if (blocks > INT32_MAX || hq > 65535)
        return beyond_limit(plan, "SOFTMAX_SUM votes over more than 65535 heads or 2^31 blocks per head");
    plan->blocks = (int)blocks;
    plan->scratch_bytes = ((size_t)hq * (size_t)blocks + (size_t)hq) * sizeof(float2);
    plan->zeroed_bytes = (size_t)hq * sizeof(uint32_t); // the heads' tickets
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_vote_launch(const sift_cuda_device *dev, const sift_node *n,
                                             const sift_cuda_plan *plan, void *scratch, void *zeroed, cudaStream_t st)
{
    (void)dev;
    const float *scores = dev_ptr<const float>(n->src[0]), *skip = skip_flag(n);
    float *votes = dev_ptr<float>(n->dst);
    const int hq = (int)n->src[0]->shape[0];
    const int64_t m = n->src[0]->shape[1];
    if (m <= 0) return cudaSuccess;
    if (n->p.vote == SIFT_VOTE_KVHEAD_MAX) {
        const int hkv = (int)n->dst->shape[0];
        const int64_t blocks = (m + NT - 1) / NT;
        return launch(vote_kvmax, dim3((unsigned)blocks, (unsigned)hkv), dim3(NT), 0, st, scores, m, hq / hkv, votes,
                      skip);
    }
    float2 *part = static_cast<float2 *>(scratch);
    float2 *stats = part + (size_t)hq * (size_t)plan->blocks;
    cudaError_t e = launch(vote_partial, dim3((unsigned)plan->blocks, (unsigned)hq), dim3(NT), 0, st, scores, m, part,
                           static_cast<uint32_t *>(zeroed), stats, skip);
    if (e != cudaSuccess) return e;
    const int64_t blocks = (m + NT - 1) / NT;
    return launch(vote_sum, dim3((unsigned)blocks), dim3(NT), 0, st, scores, m, hq, stats, votes, skip);
}
