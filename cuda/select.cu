// select (docs/kernels.md): per list, the k largest votes over the candidates, ties to the lower
// position, joined with sink and window, ascending.
//
// Radix select over the order key (sift_order_key: larger float, larger key; -0 = +0). Only the
// first pass reads every candidate to count, into 2048 bins spread over the keys' range (votes
// are often concentrated in a fraction of an octave, where the top bits of the keys barely
// differ); the keys in the k-th largest's bin are copied out (their positions), and the exact
// key is found over that copy in three digits of 11, 11 and 10 bits. Six kernels:
//   select_range   one block per list: the range of the keys of 4096 evenly spread candidates;
//                  bin(key) = (key - lowest) >> shift, with shift such that the range spans at
//                  most 2048 bins (keys outside it fall in the first or the last bin).
//   select_top     grid (blocks of 4096 candidates, list): histogram of the bins.
//   select_filter  same grid: per block the keys whose bin is above the chosen bin b0 (all of
//                  them taken), and the positions of those in bin b0 appended to the list's
//                  buffer with their top 11 bits counted.
//   select_refine  grid (blocks over the buffer, list), twice: the next 11, then the last 10 bits
//                  of the keys that match the prefix so far; the k-th largest key T is then known,
//                  and rem = how many keys equal to T to take.
//   select_count   the same grid over the buffer: per block of candidates, the buffered keys
//                  > T and == T, added to the count select_filter stored.
//   select_compact the first grid: writes, in position order, every key > T and the first rem
//                  keys == T, at sink + #(kept before it), so the result is ascending without a
//                  sort (each block sums the counts of the blocks before it).
// Each histogram kernel's last block to finish (a ticket per list) picks the digit, stores the
// state for the next kernel and clears the histogram, so no kernel re-derives the earlier digits
// and no launch is spent on the scan. When bin b0 holds more keys than the buffer (cap, below)
// the buffer is not written and select_refine and select_count read every candidate, filtered by
// the prefix: slower, the same result.
// Between runs the histograms, the tickets and the buffer counts are zero (sift_cuda_select_reset
// zeroes them once, and after a failed run; each run's last user clears them again).
// The selection layout (sink, first candidate, chosen, window) is the node's (n->p.layout).
//
// Predicated (sift_graph_skip_if): every kernel returns at once when the node's flag is set, so a
// skipped run leaves the output, and the zeroed state, as they were.
#include "common.cuh"

namespace sift_cuda {

constexpr int SCH = 4096;           // candidates per block of the full passes
constexpr int SRD = SCH / NT;       // rounds of NT candidates per block
constexpr int BINS = 2048;          // 11-bit digits: key bits 31..21, 20..10, 9..0
constexpr int BPT = BINS / NT;      // bins per thread in the digit scan
constexpr int RANGE_SAMPLES = 4096; // candidates select_range looks at
constexpr uint32_t NO_BIN = BINS;   // a key that counts in no bin

// Per list, written by the last block of each histogram kernel.
struct SelState {
    uint32_t lowest, shift; // bin(key) = (key - lowest) >> shift, clamped to [0, BINS)
    uint32_t b0, rem0;      // T's bin; keys of bin b0 still to take
    uint32_t prefix, rem1;  // select_filter: T's top 11 bits; select_refine 1: its top 22 bits (the rest 0)
    uint32_t t, rem;        // T; keys == T to take
    uint32_t buffered;      // bin b0 fitted in the buffer
    uint32_t pad[3];
};

__device__ __forceinline__ uint32_t bin_of(const SelState &st, uint32_t key)
{
    if (key <= st.lowest) return 0;
    const uint32_t b = (key - st.lowest) >> st.shift;
    return b < (uint32_t)BINS ? b : (uint32_t)BINS - 1;
}

struct SelScratch {
    uint32_t *hist;   // [4][lists][BINS]: select_top, select_filter, select_refine 1 and 2
    uint32_t *done;   // [4][lists]: tickets of the histogram kernels
    uint32_t *nbuf;   // [lists]: positions in the buffer
    SelState *state;  // [lists]
    uint2 *counts;    // [lists][blocks]: keys > T, keys == T
    uint32_t *buf;    // [lists][cap]: candidate indices of bin b0
    int64_t cap;
    int blocks;
};

// Buffer capacity per list: every candidate up to 128K, then an eighth of them (at least 128K). Bin
// b0 is a quarter of an octave of the votes, so it holds a few percent of a list in practice.
__host__ __device__ inline int64_t select_cap(int64_t cand)
{
    return cand <= 131072 ? cand : (cand / 8 > 131072 ? cand / 8 : 131072);
}

// Adds one to bin `bin` (NO_BIN: nothing) of the shared histogram h, one atomic per distinct bin
// of the warp. The whole warp calls it.
__device__ __forceinline__ void hist_add(uint32_t *h, uint32_t bin)
{
    const unsigned peers = __match_any_sync(FULL, bin);
    if (bin < NO_BIN && ((int)threadIdx.x & 31) == __ffs((int)peers) - 1) atomicAdd(&h[bin], (uint32_t)__popc((int)peers));
}

__device__ __forceinline__ void hist_clear(uint32_t *h)
{
    for (int i = (int)threadIdx.x; i < BINS; i += NT) h[i] = 0;
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

// Whole block, its shared histogram h complete: adds h to the list's histogram g; true in the
// block that finished last, which then sees every block's counts (and resets the ticket).
__device__ bool flush_is_last(const uint32_t *h, uint32_t *g, uint32_t *ticket)
{
    __shared__ int s_last;
    __syncthreads();
    for (int i = (int)threadIdx.x; i < BINS; i += NT)
        if (h[i]) atomicAdd(&g[i], h[i]);
    __threadfence(); // this block's counts before its ticket
    __syncthreads();
    if (threadIdx.x == 0) {
        s_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
        if (s_last) *ticket = 0; // every block has taken its ticket
    }
    __syncthreads();
    if (s_last) __threadfence(); // the others' counts, after their tickets
    return s_last != 0;
}

// Whole block: in histogram g (read through L2, then cleared for the next run) the bin holding the
// rem-th largest key, the keys of that bin still to take, and the bin's count. Bins are scanned
// from the top: thread t holds bins BINS-1-BPT*t .. BINS-BPT*(t+1).
__device__ void pick_bin(uint32_t *g, uint32_t rem, uint32_t &bin, uint32_t &bin_rem, uint32_t &bin_count)
{
    __shared__ uint32_t red[NT / 32];
    __shared__ uint32_t s_bin, s_rem, s_count;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t c[BPT], sum = 0;
#pragma unroll
    for (int i = 0; i < BPT; i++) {
        c[i] = __ldcg(&g[BINS - 1 - tid * BPT - i]);
        sum += c[i];
    }
#pragma unroll
    for (int i = 0; i < BPT; i++) g[BINS - 1 - tid * BPT - i] = 0;
    uint32_t incl = sum; // counts fit: |C| < 2^31
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(FULL, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) red[warp] = incl;
    __syncthreads();
    uint32_t before = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++)
        if (w < warp) before += red[w];
    const uint32_t excl = before + incl - sum;
    if (excl < rem && excl + sum >= rem) { // the one thread whose bins hold the rem-th largest key
        uint32_t cum = excl;
#pragma unroll
        for (int i = 0; i < BPT; i++) {
            if (cum < rem && cum + c[i] >= rem) {
                s_bin = (uint32_t)(BINS - 1 - tid * BPT - i);
                s_rem = rem - cum;
                s_count = c[i];
            }
            cum += c[i];
        }
    }
    __syncthreads();
    bin = s_bin;
    bin_rem = s_rem;
    bin_count = s_count;
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

__global__ void __launch_bounds__(NT) select_range(const float *votes, int64_t cand, SelScratch s, const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t lo[NT / 32], hi[NT / 32];
    const int l = (int)blockIdx.x, tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float *row = votes + (int64_t)l * cand;
    const int64_t n = cand < RANGE_SAMPLES ? cand : RANGE_SAMPLES;
    uint32_t mn = 0xffffffffu, mx = 0;
    for (int64_t i = tid; i < n; i += NT) {
        const uint32_t key = order_key(row[i * cand / n]);
        mn = min(mn, key);
        mx = max(mx, key);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        mn = min(mn, __shfl_xor_sync(FULL, mn, o));
        mx = max(mx, __shfl_xor_sync(FULL, mx, o));
    }
    if (lane == 0) {
        lo[warp] = mn;
        hi[warp] = mx;
    }
    __syncthreads();
    if (tid == 0) {
        for (int w = 0; w < NT / 32; w++) {
            mn = min(mn, lo[w]);
            mx = max(mx, hi[w]);
        }
        uint32_t shift = 0; // the smallest with (mx - mn) >> shift < BINS
        while (((mx - mn) >> shift) >= (uint32_t)BINS) shift++;
        s.state[l].lowest = mn;
        s.state[l].shift = shift;
    }
}

__global__ void __launch_bounds__(NT) select_top(const float *votes, int64_t cand, uint32_t k, SelScratch s,
                                                 const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t h[BINS];
    const int l = (int)blockIdx.y, b = (int)blockIdx.x;
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(votes + (int64_t)l * cand, cand, b, key, in);
    hist_clear(h);
    const SelState st = s.state[l];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break; // the same for the whole block
        hist_add(h, in[i] ? bin_of(st, key[i]) : NO_BIN);
    }
    uint32_t *g = s.hist + (size_t)l * BINS;
    if (!flush_is_last(h, g, s.done + l)) return;
    uint32_t bin, rem, count;
    pick_bin(g, k, bin, rem, count);
    if (threadIdx.x == 0) {
        SelState &st = s.state[l];
        st.b0 = bin;
        st.rem0 = rem;
        st.buffered = count <= s.cap;
    }
}

__global__ void __launch_bounds__(NT) select_filter(const float *votes, int64_t cand, SelScratch s, const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t h[BINS];
    __shared__ uint32_t red[NT / 32];
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, lists = (int)gridDim.y, lane = (int)threadIdx.x & 31;
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(votes + (int64_t)l * cand, cand, b, key, in);
    hist_clear(h);
    const SelState st = s.state[l];
    const uint32_t b0 = st.b0;
    const bool buffered = st.buffered != 0;
    uint32_t *buf = s.buf + (int64_t)l * s.cap;
    __syncthreads();
    uint32_t above = 0;
    const unsigned lt = (1u << lane) - 1u;
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break; // the same for the whole block
        const uint32_t bin = bin_of(st, key[i]);
        const bool mine = in[i] && bin == b0;
        above += in[i] && bin > b0;
        hist_add(h, mine ? key[i] >> 21 : NO_BIN);
        if (buffered) {
            const unsigned bal = __ballot_sync(FULL, mine);
            uint32_t base = 0;
            if (bal && lane == 0) base = atomicAdd(s.nbuf + l, (uint32_t)__popc((int)bal));
            base = __shfl_sync(FULL, base, 0);
            if (mine) buf[base + (uint32_t)__popc((int)(bal & lt))] = (uint32_t)((int64_t)b * SCH + i * NT + threadIdx.x);
        }
    }
    above = block_sum_u32(above, red);
    if (threadIdx.x == 0) s.counts[(int64_t)l * s.blocks + b] = make_uint2(above, 0);
    uint32_t *g = s.hist + ((size_t)lists + l) * BINS;
    if (!flush_is_last(h, g, s.done + lists + l)) return;
    uint32_t bin, rem, count;
    pick_bin(g, st.rem0, bin, rem, count);
    if (threadIdx.x == 0) {
        s.state[l].prefix = bin << 21;
        s.state[l].rem1 = rem;
    }
}

// The candidates of bin b0 for select_refine and select_count: the buffer, or (not buffered) every
// candidate, and whether candidate j (the i-th of them) is in bin b0. Blocks of the whole grid run
// the same number of rounds, so warp collectives see whole warps.
struct Bin0 {
    const float *row;
    const uint32_t *buf;
    int64_t n;
    SelState st;
    bool buffered;
};

__device__ __forceinline__ Bin0 bin0_of(const float *votes, int64_t cand, const SelScratch &s, int l)
{
    Bin0 z;
    z.row = votes + (int64_t)l * cand;
    z.buf = s.buf + (int64_t)l * s.cap;
    z.buffered = s.state[l].buffered != 0;
    z.n = z.buffered ? (int64_t)s.nbuf[l] : cand;
    z.st = s.state[l];
    return z;
}

// Candidate i of bin b0's list (i < z.n): its index j and key; false when it is not in bin b0.
__device__ __forceinline__ bool bin0_at(const Bin0 &z, int64_t i, uint32_t &j, uint32_t &key)
{
    j = z.buffered ? z.buf[i] : (uint32_t)i;
    key = order_key(z.row[j]);
    return z.buffered || bin_of(z.st, key) == z.st.b0;
}

// pass 1: bits 20..10 of the keys with T's top 11 bits; pass 2: bits 9..0 of those with its top 22.
__global__ void __launch_bounds__(NT) select_refine(const float *votes, int64_t cand, SelScratch s, int pass,
                                                    const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t h[BINS];
    const int l = (int)blockIdx.y, lists = (int)gridDim.y;
    hist_clear(h);
    const Bin0 z = bin0_of(votes, cand, s, l);
    const uint32_t prefix = z.st.prefix, rem_in = pass == 1 ? z.st.rem1 : z.st.rem;
    const int shift = pass == 1 ? 21 : 10, low = pass == 1 ? 10 : 0;
    const uint32_t mask = pass == 1 ? 2047u : 1023u;
    __syncthreads();
    for (int64_t base = (int64_t)blockIdx.x * NT; base < z.n; base += (int64_t)gridDim.x * NT) {
        const int64_t i = base + threadIdx.x;
        uint32_t j, key, bin = NO_BIN;
        if (i < z.n && bin0_at(z, i, j, key) && (key >> shift) == (prefix >> shift)) bin = (key >> low) & mask;
        hist_add(h, bin);
    }
    uint32_t *g = s.hist + ((size_t)(1 + pass) * lists + l) * BINS;
    if (!flush_is_last(h, g, s.done + (1 + pass) * lists + l)) return;
    uint32_t bin, rem, count;
    pick_bin(g, rem_in, bin, rem, count);
    if (threadIdx.x == 0) {
        if (pass == 1) s.state[l].prefix = prefix | (bin << 10);
        else s.state[l].t = prefix | bin;
        s.state[l].rem = rem;
    }
}

__global__ void __launch_bounds__(NT) select_count(const float *votes, int64_t cand, SelScratch s, const float *skip)
{
    if (skipped(skip)) return;
    const int l = (int)blockIdx.y;
    const Bin0 z = bin0_of(votes, cand, s, l);
    const uint32_t T = s.state[l].t;
    uint2 *counts = s.counts + (int64_t)l * s.blocks;
    for (int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x; i < z.n; i += (int64_t)gridDim.x * NT) {
        uint32_t j, key;
        if (!bin0_at(z, i, j, key)) continue;
        if (key > T) atomicAdd(&counts[j / SCH].x, 1u);
        else if (key == T) atomicAdd(&counts[j / SCH].y, 1u);
    }
}

__global__ void __launch_bounds__(NT) select_compact(const float *votes, int64_t cand, SelScratch s, int32_t *out,
                                                     int64_t count, int64_t sink_len, int64_t first_pos,
                                                     const float *skip)
{
    if (skipped(skip)) return;
    __shared__ uint32_t red[NT / 32];
    __shared__ uint32_t wg[NT / 32], we[NT / 32];
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(votes + (int64_t)l * cand, cand, b, key, in);
    const uint32_t T = s.state[l].t, krem = s.state[l].rem;
    // Keys > T and == T in the list before this block.
    uint32_t gb = 0, eb = 0;
    for (int i = tid; i < b; i += NT) {
        const uint2 c = s.counts[(int64_t)l * s.blocks + i];
        gb += c.x;
        eb += c.y;
    }
    gb = block_sum_u32(gb, red);
    eb = block_sum_u32(eb, red);
    if (b == 0 && tid == 0) s.nbuf[l] = 0; // for the next run (nobody reads it any more in this one)

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

// The zeroed part (histograms, tickets, buffer counts) first, then the state, counts and buffer.
static size_t zeroed_bytes(int64_t lists) { return ((size_t)4 * lists * BINS + (size_t)4 * lists + (size_t)lists) * 4; }

static SelScratch select_scratch(int64_t lists, int64_t cand, int blocks, void *scratch)
{
    SelScratch s;
    s.hist = static_cast<uint32_t *>(scratch);
    s.done = s.hist + (size_t)4 * lists * BINS;
    s.nbuf = s.done + (size_t)4 * lists;
    char *p = reinterpret_cast<char *>(scratch) + ((zeroed_bytes(lists) + 15) & ~(size_t)15);
    s.state = reinterpret_cast<SelState *>(p);
    p += (size_t)lists * sizeof(SelState);
    s.counts = reinterpret_cast<uint2 *>(p);
    p += (size_t)lists * blocks * sizeof(uint2);
    s.buf = reinterpret_cast<uint32_t *>(p);
    s.cap = select_cap(cand);
    s.blocks = blocks;
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
        plan->scratch_bytes = ((zeroed_bytes(lists) + 15) & ~(size_t)15) + (size_t)lists * sizeof(SelState) +
                              (size_t)lists * plan->blocks * sizeof(uint2) + (size_t)lists * select_cap(cand) * 4;
    }
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_select_reset(const sift_cuda_device *dev, const sift_node *n,
                                              const sift_cuda_plan *plan, void *scratch, cudaStream_t st)
{
    (void)dev;
    if (!plan->path) return cudaSuccess;
    return cudaMemsetAsync(scratch, 0, zeroed_bytes(n->src[0]->shape[0]), st);
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
    const SelScratch s = select_scratch(lists, cand, plan->blocks, scratch);
    const dim3 grid((unsigned)plan->blocks, (unsigned)lists);
    // over the buffer: 8 entries a thread when it is full (it seldom is: blocks past its count return)
    const int64_t few_blocks = (s.cap + 8 * NT - 1) / (8 * NT);
    const dim3 few((unsigned)(few_blocks < 64 ? few_blocks : 64), (unsigned)lists);
    cudaError_t e = launch(select_range, dim3((unsigned)lists), dim3(NT), 0, st, votes, cand, s, skip);
    if (e == cudaSuccess) e = launch(select_top, grid, dim3(NT), 0, st, votes, cand, (uint32_t)l->chosen, s, skip);
    if (e == cudaSuccess) e = launch(select_filter, grid, dim3(NT), 0, st, votes, cand, s, skip);
    if (e == cudaSuccess) e = launch(select_refine, few, dim3(NT), 0, st, votes, cand, s, 1, skip);
    if (e == cudaSuccess) e = launch(select_refine, few, dim3(NT), 0, st, votes, cand, s, 2, skip);
    if (e == cudaSuccess) e = launch(select_count, few, dim3(NT), 0, st, votes, cand, s, skip);
    if (e != cudaSuccess) return e;
    return launch(select_compact, grid, dim3(NT), 0, st, votes, cand, s, out, l->count, l->sink, l->first, skip);
}
