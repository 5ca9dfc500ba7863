// select (docs/kernels.md): per list, the k largest votes over the candidates, ties to the lower
// position, joined with sink and window, ascending.
//
// Radix select over the order key (sift_order_key: larger float, larger key; -0 = +0), 8 bits at
// a time from the top, one histogram kernel per digit, grid (blocks of 4096 candidates, list):
//   pass p: every block first re-derives the prefix fixed by passes 0..p-1 from their (complete)
//   histograms — a warp-wide scan from the top digit down to the one holding the krem-th largest
//   key — then counts the p-th digit of the keys that match the prefix (warp-aggregated shared
//   atomics, one global atomic per bin and block).
// After 4 passes the prefix is the k-th largest key T, and krem = k - #(keys > T) keys equal to T
// are taken, the first ones by position. select_count counts per block the keys > T and == T;
// select_compact gives each block its offset (the sums over earlier blocks) and writes, in
// position order, every candidate with key > T or key == T and fewer than krem equal keys before
// it, at sink + #(kept before it) = sink + #(> T before) + min(#(== T before), krem). The result
// is ascending without a sort. select_fill writes the sink [0, S) and the window [max(S, N-W), N)
// (and all of C when k >= |C|).
//
// Histograms of pass 1..3 are zeroed by pass 0; the pass-0 histogram is zeroed by select_compact
// for the next run (and by sift_cuda_select_reset once, and after a failed run).
// The selection layout (sink, first candidate, chosen, window) is the node's (n->p.layout).
//
// Predicated (sift_graph_skip_if): every kernel returns at once when the node's flag is set, so a
// skipped run leaves the output and the histograms (zeroed for the next run) as they were.
#include "common.cuh"

namespace sift_cuda {

constexpr int SCH = 4096;     // candidates per block
constexpr int SRD = SCH / NT; // rounds of NT candidates per block

// Whole warp: the digit of hist[256] (counts of the keys that match the prefix so far) holding
// the krem-th largest such key, and how many keys with that digit are still to take.
__device__ __forceinline__ void pick_digit(const uint32_t *hist, uint32_t krem, uint32_t &digit, uint32_t &newk)
{
    const int lane = (int)threadIdx.x & 31;
    uint32_t c[8], sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) { // lane 0: digits 255..248, lane 31: 7..0
        c[i] = hist[255 - lane * 8 - i];
        sum += c[i];
    }
    uint32_t incl = sum; // keys with a digit >= this lane's lowest (counts fit: |C| < 2^31)
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(FULL, incl, o);
        if (lane >= o) incl += y;
    }
    const uint32_t excl = incl - sum;
    const unsigned bal = __ballot_sync(FULL, incl >= krem);
    const int first = bal ? __ffs((int)bal) - 1 : 31;
    uint32_t d = 0, nk = krem;
    if (lane == first) {
        uint32_t cum = excl;
        bool found = false;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            if (!found) {
                if (cum + c[i] >= krem) {
                    d = (uint32_t)(255 - lane * 8 - i);
                    nk = krem - cum;
                    found = true;
                } else {
                    cum += c[i];
                }
            }
        }
    }
    digit = __shfl_sync(FULL, d, first);
    newk = __shfl_sync(FULL, nk, first);
}

// Whole warp: the key prefix fixed by passes 0..passes-1 of list l, and the count still to take
// among the keys that have it.
__device__ __forceinline__ void derive(const uint32_t *hist, int lists, int l, uint32_t k, int passes,
                                       uint32_t &prefix, uint32_t &krem)
{
    prefix = 0;
    krem = k;
    for (int p = 0; p < passes; p++) {
        uint32_t d;
        pick_digit(hist + ((size_t)p * lists + l) * 256, krem, d, krem);
        prefix |= d << (24 - 8 * p);
    }
}

// The order keys of this thread's candidates of block b (j = b*SCH + i*NT + tid), all loaded
// before any is used so that the loads overlap; returns how many rounds hold candidates.
__device__ __forceinline__ int load_keys(const float *row, int64_t cand, int b, uint32_t (&key)[SRD], bool (&in)[SRD])
{
    const int64_t j0 = (int64_t)b * SCH + threadIdx.x;
    float v[SRD];
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        in[i] = j0 + (int64_t)i * NT < cand;
        v[i] = in[i] ? row[j0 + (int64_t)i * NT] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < SRD; i++) key[i] = order_key(v[i]);
    const int64_t left = cand - (int64_t)b * SCH; // > 0 for every launched block
    return left >= SCH ? SRD : (int)((left + NT - 1) / NT);
}

__device__ __forceinline__ uint32_t block_sum_u32(uint32_t x, uint32_t *red /* [NT/32] */)
{
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL, x, o);
    if (lane == 0) red[warp] = x;
    __syncthreads();
    uint32_t t = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) t += red[w];
    __syncthreads(); // red may be reused after this
    return t;
}

__global__ void __launch_bounds__(NT) select_hist(const float *votes, int64_t cand, int lists, uint32_t k, int pass,
                                                  uint32_t *hist, const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t h[256];
    __shared__ uint32_t s_prefix;
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, tid = (int)threadIdx.x, lane = tid & 31;
    h[tid] = 0;
    if (pass == 0 && b == 0) // nobody touches the later passes' histograms during pass 0
        for (int i = tid; i < 3 * 256; i += NT) hist[((size_t)(1 + i / 256) * lists + l) * 256 + i % 256] = 0;
    if (tid < 32) {
        uint32_t prefix, krem;
        derive(hist, lists, l, k, pass, prefix, krem);
        if (tid == 0) s_prefix = prefix;
    }
    __syncthreads();
    const uint32_t prefix = s_prefix;
    const int shift = 24 - 8 * pass;
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(votes + (int64_t)l * cand, cand, b, key, in);
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break; // the same for the whole block
        uint32_t dig = 256;     // none
        if (in[i] && (pass == 0 || (key[i] >> (shift + 8)) == (prefix >> (shift + 8)))) dig = (key[i] >> shift) & 255u;
        const unsigned peers = __match_any_sync(FULL, dig);
        if (dig < 256 && lane == __ffs((int)peers) - 1) atomicAdd(&h[dig], (uint32_t)__popc((int)peers));
    }
    __syncthreads();
    if (h[tid]) atomicAdd(&hist[((size_t)pass * lists + l) * 256 + tid], h[tid]);
}

__global__ void __launch_bounds__(NT) select_count(const float *votes, int64_t cand, int lists, uint32_t k,
                                                   const uint32_t *hist, int blocks, uint2 *counts, uint2 *state,
                                                   const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t s_t, s_krem;
    __shared__ uint32_t red[NT / 32];
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, tid = (int)threadIdx.x;
    if (tid < 32) {
        uint32_t t, krem;
        derive(hist, lists, l, k, 4, t, krem);
        if (tid == 0) {
            s_t = t;
            s_krem = krem;
        }
    }
    __syncthreads();
    const uint32_t T = s_t;
    uint32_t key[SRD];
    bool in[SRD];
    load_keys(votes + (int64_t)l * cand, cand, b, key, in);
    uint32_t gt = 0, eq = 0;
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        gt += in[i] && key[i] > T;
        eq += in[i] && key[i] == T;
    }
    gt = block_sum_u32(gt, red);
    eq = block_sum_u32(eq, red);
    if (tid == 0) {
        counts[(int64_t)l * blocks + b] = make_uint2(gt, eq);
        if (b == 0) state[l] = make_uint2(T, s_krem);
    }
}

__global__ void __launch_bounds__(NT) select_compact(const float *votes, int64_t cand, int blocks,
                                                     const uint2 *counts, const uint2 *state, uint32_t *hist,
                                                     int32_t *out, int64_t count, int64_t sink_len, int64_t first_pos,
                                                     const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t red[NT / 32];
    __shared__ uint32_t wg[NT / 32], we[NT / 32];
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint2 stt = state[l];
    const uint32_t T = stt.x, krem = stt.y;
    // Keys > T and == T in the list before this block.
    uint32_t gb = 0, eb = 0;
    for (int i = tid; i < b; i += NT) {
        const uint2 c = counts[(int64_t)l * blocks + i];
        gb += c.x;
        eb += c.y;
    }
    gb = block_sum_u32(gb, red);
    eb = block_sum_u32(eb, red);
    if (b == 0) hist[(size_t)l * 256 + tid] = 0; // pass-0 histogram, for the next run (nobody reads it now)

    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(votes + (int64_t)l * cand, cand, b, key, in);
    int32_t *o = out + (int64_t)l * count + sink_len;
    const int64_t j0 = (int64_t)b * SCH;
    const unsigned lt = (1u << lane) - 1u;
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break; // the same for the whole block
        const int64_t j = j0 + (int64_t)i * NT + tid;
        const bool gt = in[i] && key[i] > T, eq = in[i] && key[i] == T;
        const unsigned bg = __ballot_sync(FULL, gt), be = __ballot_sync(FULL, eq);
        if (lane == 0) {
            wg[warp] = (uint32_t)__popc((int)bg);
            we[warp] = (uint32_t)__popc((int)be);
        }
        __syncthreads();
        uint32_t og = 0, oe = 0, tg = 0, te = 0;
#pragma unroll
        for (int w = 0; w < NT / 32; w++) {
            if (w < warp) {
                og += wg[w];
                oe += we[w];
            }
            tg += wg[w];
            te += we[w];
        }
        const uint32_t g_before = gb + og + (uint32_t)__popc((int)(bg & lt));
        const uint32_t e_before = eb + oe + (uint32_t)__popc((int)(be & lt));
        if (gt || (eq && e_before < krem)) o[g_before + min(e_before, krem)] = (int32_t)(first_pos + j);
        gb += tg;
        eb += te;
        __syncthreads(); // wg/we are rewritten next round
    }
}

__global__ void __launch_bounds__(NT) select_fill(int32_t *out, int64_t total, int64_t count, int64_t sink_len,
                                                  int64_t chosen, int take_all, int64_t first_pos, int64_t win_begin,
                                                  const float *skip)
{
    if (skipped(skip)) return;
    for (int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x; e < total; e += (int64_t)gridDim.x * NT) {
        const int64_t i = e % count;
        if (i < sink_len) out[e] = (int32_t)i;
        else if (i < sink_len + chosen) {
            if (take_all) out[e] = (int32_t)(first_pos + (i - sink_len));
        } else out[e] = (int32_t)(win_begin + (i - sink_len - chosen));
    }
}

struct SelectScratch {
    uint32_t *hist; // [4][lists][256]
    uint2 *counts;  // [lists][blocks]
    uint2 *state;   // [lists]: T, krem
};

static SelectScratch select_scratch(int lists, int blocks, void *scratch)
{
    SelectScratch s;
    s.hist = static_cast<uint32_t *>(scratch);
    s.counts = reinterpret_cast<uint2 *>(s.hist + (size_t)4 * lists * 256);
    s.state = s.counts + (size_t)lists * blocks;
    return s;
}

} // namespace sift_cuda

using namespace sift_cuda;

// path (1: radix select, when 0 < chosen < |C|; otherwise all or none of C), and for the radix
// select blocks (per list) and scratch_bytes. The layout is the node's (n->p.layout).
extern "C" cudaError_t sift_cuda_select_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    const sift_select_layout *l = &n->p.layout;
    const int64_t lists = n->src[0]->shape[0], cand = n->src[0]->shape[1];
    plan->path = l->chosen > 0 && l->chosen < cand;
    if (plan->path && lists > 65535) return beyond_limit(plan, "radix select over more than 65535 lists");
    if (plan->path) {
        plan->blocks = (int)((cand + SCH - 1) / SCH);
        plan->scratch_bytes = (size_t)4 * lists * 256 * sizeof(uint32_t) +
                              ((size_t)lists * plan->blocks + (size_t)lists) * sizeof(uint2);
    }
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_select_reset(const sift_cuda_device *dev, const sift_node *n,
                                              const sift_cuda_plan *plan, void *scratch, cudaStream_t st)
{
    (void)dev;
    if (!plan->path) return cudaSuccess;
    return cudaMemsetAsync(scratch, 0, (size_t)4 * n->src[0]->shape[0] * 256 * sizeof(uint32_t), st);
}

extern "C" cudaError_t sift_cuda_select_launch(const sift_cuda_device *dev, const sift_node *n,
                                               const sift_cuda_plan *plan, void *scratch, cudaStream_t st)
{
    (void)dev;
    const sift_select_layout *l = &n->p.layout;
    const float *votes = dev_ptr<const float>(n->src[0]), *skip = skip_flag(n);
    int32_t *out = dev_ptr<int32_t>(n->dst);
    const int lists = (int)n->src[0]->shape[0];
    const int64_t cand = n->src[0]->shape[1];
    const bool radix = plan->path != 0;
    const int64_t total = (int64_t)lists * l->count;
    if (total == 0) return cudaSuccess;
    if (!radix || l->sink > 0 || l->win_count > 0) {
        int64_t blocks = (total + NT - 1) / NT;
        if (blocks > 4096) blocks = 4096;
        cudaError_t e = launch(select_fill, dim3((unsigned)blocks), dim3(NT), 0, st, out, total, l->count, l->sink,
                               l->chosen, !radix, l->first, l->win_begin, skip);
        if (e != cudaSuccess) return e;
    }
    if (!radix) return cudaSuccess;
    const SelectScratch s = select_scratch(lists, plan->blocks, scratch);
    const dim3 grid((unsigned)plan->blocks, (unsigned)lists);
    const uint32_t k = (uint32_t)l->chosen;
    for (int pass = 0; pass < 4; pass++) {
        cudaError_t e = launch(select_hist, grid, dim3(NT), 0, st, votes, cand, lists, k, pass, s.hist, skip);
        if (e != cudaSuccess) return e;
    }
    cudaError_t e = launch(select_count, grid, dim3(NT), 0, st, votes, cand, lists, k, s.hist, plan->blocks, s.counts,
                           s.state, skip);
    if (e != cudaSuccess) return e;
    return launch(select_compact, grid, dim3(NT), 0, st, votes, cand, plan->blocks, s.counts, s.state, s.hist, out,
                  l->count, l->sink, l->first, skip);
}
