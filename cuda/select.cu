// select (docs/kernels.md): per list, the k largest votes over the candidates, ties to the lower
// position, joined with sink and window, ascending.
//
// Three kernels, two of them with a tail run by their last block (the block that takes the last
// ticket of its list, after every other block's results are in memory), and for a select of many
// blocks a fourth before them:
//   select_range   one block a list, where the lists have RANGE_KERNEL_BLOCKS blocks or more: the
//                  bins below, into the list's state (bins_of).
//   select_top     grid (blocks of 1024-4096 candidates, list). Every block derives the same 2048 bins
//                  (or reads select_range's) from the order keys (sift_order_key: larger float,
//                  larger key; -0 = +0) of 1024 evenly spread candidates (bins_of: from a floor below
//                  the k-th largest key to their largest), bin(key) = (key - lowest) >> shift, keys
//                  outside the range in the first or the last bin, and counts its keys into them.
//                  Bins spread over the range, not the keys' top bits: votes are often concentrated
//                  in a fraction of an octave, where the top bits barely differ.
//                  Tail: the bin b0 holding the k-th largest key, and rem0 = how many of it to take.
//   select_filter  same grid: per block, the keys above bin b0 (all taken) and those in it; the
//                  positions of those in b0 are appended to the list's buffer. Tail: the k-th
//                  largest key T among bin b0's keys (three digits of 11, 11 and 10 bits over the
//                  buffer, in shared memory when it fits; when b0 held more than the buffer, over
//                  every candidate, slowly; when b0's keys are all equal, T is that key), rem = how
//                  many keys equal to T to take, and each block's counts of keys > T and == T.
//   select_compact same grid: writes, in position order, every key > T and the first rem keys
//                  == T, at sink + #(kept before it), so the result is ascending without a sort
//                  (each block sums the counts of the blocks before it); block 0 writes the sink
//                  [0, S) and the window [max(S, N-W), N) too.
// The histogram, the tickets, the buffer counts and the b0 key range are the node's zeroed state
// (sift_cuda.h: zero between runs; each run's last user clears them again). The selection layout
// (sink, first candidate, chosen, window) is the node's (n->p.layout). When k >= |C| or k == 0, select_fill writes the whole list instead.
//
// Predicated (sift_graph_skip_if): every kernel returns at once when the node's flag is set, so a
// skipped run leaves the output, and the zeroed state, as they were.
//
// Warm start (sift_op_select_warm: the node's second input, warm i32 [lists][4], kept by the caller
// across decode steps): two kernels run first, and the three above only for the lists they miss.
//   select_collect grid (blocks, list), one pass over the votes: the keys >= the list's threshold
//                  (warm THRESHOLD; nothing while warm VALID is 0), each block's as one chunk in
//                  position order at a range of the list's entry buffer reserved with one atomic.
//   select_warm    one block a list: a hit when VALID and chosen <= collected <= WARM_CAP. It loads
//                  the entries in position order into shared memory (each finds its block's chunk by
//                  binary search over the chunks' prefix, so one full block costs what spread ones
//                  do), finds T and rem there exactly (range bins, smem_select_range), writes the
//                  list as select_compact does, and sets THRESHOLD to the lowest key of the bin
//                  holding rank r2 = min(collected, chosen + chosen / 4): the next step, whose votes
//                  differ a little, collects about r2 keys again. A miss sets
//                  the list's flag, and the radix select runs for it; its select_top tail then sets
//                  THRESHOLD to the lowest key of the bin holding rank r2 (every key at or above it
//                  is collected: at least r2) and VALID. HITS and MISSES count the runs.
#include "common.cuh"

#include <stdlib.h>

namespace sift_cuda {

// Candidates per block: SCH = SRD * NT, SRD rounds of NT, a kernel template parameter. The plan
// takes the largest of 4096, 2048 and 1024 that still gives the node's lists SELECT_BLOCKS blocks
// in all, or 1024: on the H200, one list of 128K candidates took 30 us in 32 blocks of 4096 and 24
// in 128 of 1024, while 8 lists of 1M took 146 us in blocks of 4096 and 188 in blocks of 1024.
constexpr int SELECT_BLOCKS = 128;
constexpr int BINS = 2048;          // bins of select_top; 11-bit digits in select_filter's tail
constexpr int BPT = BINS / NT;      // bins per thread in a digit scan
constexpr int RANGE_SAMPLES = 1024; // candidates whose keys give the range of the bins
constexpr int BUF = 65536;          // buffer entries per list (at most |C|)
constexpr int SMEM_KEYS = 6144;     // buffered keys the tail holds in shared memory
constexpr uint32_t NO_BIN = BINS;   // a key that counts in no bin
// From this many blocks (all lists), select_range finds the bins once a list for select_top; below
// it, each select_top block finds them itself, which costs less than the launch. On an H100: 8
// lists of 1M (2,048 blocks) took 89.5 us with it, 109.6 without; one list of 1M (256 blocks) 38.7
// with it, 36.8 without; 8 of 128K (256) 39.0 and 38.6 (sift bench-attn).
constexpr int64_t RANGE_KERNEL_BLOCKS = 1024;
constexpr uint32_t RANGED = 0xffffffffu; // select_top's floor_rank when select_range ran

constexpr int WARM_CAP = 8192;        // entries the warm start selects among (shared memory: 8 bytes each)
constexpr int WARM_MAX_BLOCKS = 2048; // blocks a list's collect may have (their chunks' prefix is in shared memory)
constexpr size_t WARM_SMEM = (size_t)WARM_CAP * 8 + (2 * WARM_MAX_BLOCKS + 1) * 4;

// sift_op_select_warm's words (include/sift.h)
enum { W_THRESHOLD = SIFT_SELECT_WARM_THRESHOLD, W_VALID = SIFT_SELECT_WARM_VALID, W_HITS = SIFT_SELECT_WARM_HITS,
       W_MISSES = SIFT_SELECT_WARM_MISSES, W_WORDS = SIFT_SELECT_WARM_WORDS };

// The warm start's buffers; warm == NULL: none (the radix select runs for every list).
struct WarmScratch {
    int32_t *warm;     // [lists][W_WORDS]: the node's second input
    uint32_t *nent;    // [lists]: keys collected (zeroed state; select_warm clears it)
    uint2 *ent;        // [lists][WARM_CAP]: (key, candidate index)
    uint2 *chunk;      // [lists][blocks]: each block's (first entry, count)
    uint32_t *miss;    // [lists]: 1 when the radix select runs for the list this run
};

// The rank the warm start keeps its next threshold at: a quarter of k more than k.
__host__ __device__ inline uint32_t warm_rank(uint32_t chosen, uint64_t avail)
{
    const uint64_t r = (uint64_t)chosen + chosen / 4;
    return (uint32_t)(r < avail ? r : avail);
}

// Whether the radix kernels do nothing for list l this run: a warm start answered it.
__device__ __forceinline__ bool warm_hit(const WarmScratch &w, int l) { return w.warm && __ldcg(&w.miss[l]) == 0; }

// Per list, written by the tails (lowest and shift by block 0 of select_top).
struct SelState {
    uint32_t lowest, shift; // bin(key) = (key - lowest) >> shift, clamped to [0, BINS)
    uint32_t b0, rem0, n0;  // T's bin, keys of it still to take, keys in it
    uint32_t t, rem;        // T; keys == T to take
    uint32_t pad;
};

struct SelScratch {
    uint32_t *hist;  // [lists][BINS]: select_top's counts
    uint32_t *done;  // [2][lists]: tickets of select_top and select_filter
    uint32_t *nbuf;  // [lists]: positions in the buffer
    uint32_t *b0max; // [lists][2]: the largest key of bin b0, and the complement of the smallest
    SelState *state; // [lists]
    uint2 *counts;   // [lists][blocks]: keys > T, keys == T
    uint32_t *buf;   // [lists][cap]: candidate indices of bin b0
    int64_t cap;
    int blocks;
};

__device__ __forceinline__ uint32_t bin_of(uint32_t lowest, uint32_t shift, uint32_t key)
{
    if (key <= lowest) return 0;
    const uint32_t b = (key - lowest) >> shift;
    return b < (uint32_t)BINS ? b : (uint32_t)BINS - 1;
}

// The smallest shift that spreads keys [lowest, highest] over BINS bins: bin = (key - lowest) >> shift.
__device__ __forceinline__ uint32_t range_shift(uint32_t lowest, uint32_t highest)
{
    uint32_t shift = 0;
    while (((highest - lowest) >> shift) >= (uint32_t)BINS) shift++;
    return shift;
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

// Whole block: the sum (MAX false) or the max (MAX true) of x over the block's threads.
template <bool MAX> __device__ __forceinline__ uint32_t block_reduce_u32(uint32_t x, uint32_t *red /* [NT/32] */)
{
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t y = __shfl_xor_sync(FULL, x, o);
        x = MAX ? max(x, y) : x + y;
    }
    if (lane == 0) red[warp] = x;
    __syncthreads();
    uint32_t t = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) t = MAX ? max(t, red[w]) : t + red[w];
    __syncthreads(); // red may be reused after this
    return t;
}
__device__ __forceinline__ uint32_t block_sum_u32(uint32_t x, uint32_t *red) { return block_reduce_u32<false>(x, red); }
__device__ __forceinline__ uint32_t block_max_u32(uint32_t x, uint32_t *red) { return block_reduce_u32<true>(x, red); }

// Whole block: the exclusive prefix of x over the threads in thread order; *total the sum.
__device__ __forceinline__ uint32_t block_exscan_u32(uint32_t x, uint32_t *red /* [NT/32] */, uint32_t *total)
{
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    uint32_t incl = x;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(FULL, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) red[warp] = incl;
    __syncthreads();
    uint32_t before = 0, all = 0;
#pragma unroll
    for (int i = 0; i < NT / 32; i++) {
        if (i < warp) before += red[i];
        all += red[i];
    }
    __syncthreads(); // red may be reused after this
    *total = all;
    return before + incl - x;
}

// Whole block: in histogram h (global: read through L2 and cleared for the next run; or shared)
// the bin holding the rem-th largest key, the keys of that bin still to take, and its count. Bins
// are scanned from the top: thread t holds bins BINS-1-BPT*t .. BINS-BPT*(t+1).
template <bool GLOBAL> __device__ void pick_bin(uint32_t *h, uint32_t rem, uint32_t &bin, uint32_t &bin_rem, uint32_t &bin_count)
{
    __shared__ uint32_t red[NT / 32];
    __shared__ uint32_t s_bin, s_rem, s_count;
    const int tid = (int)threadIdx.x;
    uint32_t c[BPT], sum = 0;
#pragma unroll
    for (int i = 0; i < BPT; i++) {
        uint32_t *p = &h[BINS - 1 - tid * BPT - i];
        c[i] = GLOBAL ? __ldcg(p) : *p;
        if (GLOBAL) *p = 0;
        sum += c[i];
    }
    uint32_t total;
    const uint32_t excl = block_exscan_u32(sum, red, &total); // counts fit: |C| < 2^31
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
    __syncthreads(); // s_* and red may be reused after this
}

// Block b's candidates, SCH = SRD * NT of them, are SRD * 32 consecutive ones per warp: warp w
// holds b*SCH + w*SRD*32 + [0, SRD*32), round i of it the 32 at + i*32, one a lane. So position
// order within a block is warp, then round, then lane, and a warp orders its own keys without the
// block (select_collect and select_compact take one block barrier, not one a round).
template <int SRD> __device__ __forceinline__ int64_t cand_index(int b, int i)
{
    return (int64_t)b * (SRD * NT) + (int64_t)((int)threadIdx.x >> 5) * (SRD * 32) + i * 32 + ((int)threadIdx.x & 31);
}

// Whole block: a range of the block's entries reserved at *counter with one atomic (not one a warp
// and round: all of a list's blocks add on one address), the warps' parts in warp order; returns
// this warp's first entry. warp_n: the warp's count (the same in all its lanes). chunks, where
// given, gets the block's (first entry, count) at [blockIdx.y][blockIdx.x] (indexed here, from the
// kernel's parameter: a pointer the caller computed would hold two registers across the block).
__device__ __forceinline__ uint32_t reserve_warp_ranges(uint32_t *counter, uint32_t warp_n, uint2 *chunks)
{
    __shared__ uint32_t base[NT / 32];
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    if (lane == 0) base[warp] = warp_n;
    __syncthreads();
    if (warp == 0) { // lane v: warp v's count, then its first entry
        const uint32_t c = lane < NT / 32 ? base[lane] : 0u;
        uint32_t incl = c;
#pragma unroll
        for (int o = 1; o < NT / 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(FULL, incl, o);
            if (lane >= o) incl += y;
        }
        const uint32_t total = __shfl_sync(FULL, incl, NT / 32 - 1);
        uint32_t at = 0;
        if (lane == 0 && total) at = atomicAdd(counter, total);
        at = __shfl_sync(FULL, at, 0);
        if (lane == 0 && chunks) chunks[(int64_t)blockIdx.y * gridDim.x + blockIdx.x] = make_uint2(at, total);
        if (lane < NT / 32) base[lane] = at + incl - c;
    }
    __syncthreads();
    return base[warp];
}

// The order keys of this thread's candidates of block b (cand_index), all loaded before any is
// used so that the loads overlap; returns how many rounds of this warp hold candidates (the same
// for the whole warp; 0 for a warp past the end).
template <int SRD>
__device__ __forceinline__ int load_keys(const float *row, int64_t cand, int b, uint32_t (&key)[SRD], bool (&in)[SRD])
{
    float v[SRD];
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        const int64_t j = cand_index<SRD>(b, i);
        in[i] = j < cand;
        v[i] = in[i] ? row[j] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < SRD; i++) key[i] = order_key(v[i]);
    const int64_t left = cand - cand_index<SRD>(b, 0) + ((int)threadIdx.x & 31); // from the warp's first
    return left >= SRD * 32 ? SRD : left <= 0 ? 0 : (int)((left + 31) / 32);
}

// Whole block: the bins of list `row` (every block finds the same), from the keys of up to
// RANGE_SAMPLES evenly spread candidates: their range, or with floor_rank > 0 the range from the
// lowest key of the bin (of their range) holding the floor_rank-th largest of them. The plan sets
// floor_rank to about four times the samples expected among the k largest keys, so the floor lies
// below the k-th largest key but for a vanishing chance (then bin b0 is bin 0, every key below the
// floor, and the select still comes out exact, through select_filter's slow path); every key below
// it counts in bin 0, so a block adds to few of the list's bins (one atomic each), where bins over
// the whole range took hundreds a block, and the bins are finer where the k-th key is.
__device__ void bins_of(const float *row, int64_t cand, uint32_t floor_rank, uint32_t *h, uint32_t &lowest, uint32_t &shift)
{
    constexpr int SPT = RANGE_SAMPLES / NT; // samples per thread
    __shared__ uint32_t red[NT / 32];
    const int64_t n = cand < RANGE_SAMPLES ? cand : RANGE_SAMPLES;
    uint32_t sk[SPT], mx = 0, mnc = 0; // the samples; the largest key, the complement of the smallest
#pragma unroll
    for (int i = 0; i < SPT; i++) {
        const int64_t at = (int64_t)threadIdx.x + i * NT;
        sk[i] = at < n ? order_key(row[at * cand / n]) : 0u;
        if (at < n) {
            mx = max(mx, sk[i]);
            mnc = max(mnc, ~sk[i]);
        }
    }
    mx = block_max_u32(mx, red);
    lowest = ~block_max_u32(mnc, red);
    shift = range_shift(lowest, mx);
    if (floor_rank == 0 || floor_rank >= (uint32_t)n) return;
    hist_clear(h);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < SPT; i++) hist_add(h, (int64_t)threadIdx.x + i * NT < n ? bin_of(lowest, shift, sk[i]) : NO_BIN);
    __syncthreads();
    uint32_t bin, rem, count;
    pick_bin<false>(h, floor_rank, bin, rem, count); // ends with a barrier: h may be cleared after it
    lowest += bin << shift;
    shift = range_shift(lowest, mx);
}

// One block a list: the bins of select_top (bins_of) into the list's state, for a select of many
// blocks (RANGE_KERNEL_BLOCKS), where each select_top block deriving them itself costs more than a
// launch: at 8 lists of 1M, 2,048 blocks each read 1,024 scattered samples (a sector each, twice
// the sectors of its own keys) and ranked them through a histogram.
__global__ void __launch_bounds__(NT) select_range(const float *votes, int64_t cand, uint32_t floor_rank, SelScratch s,
                                                   WarmScratch w, const float *skip)
{
    grid_dep_enter();
    const int l = (int)blockIdx.x;
    if (skipped(skip) || warm_hit(w, l)) return;
    __shared__ uint32_t h[BINS];
    uint32_t lowest, shift;
    bins_of(votes + (int64_t)l * cand, cand, floor_rank, h, lowest, shift);
    if (threadIdx.x == 0) {
        s.state[l].lowest = lowest;
        s.state[l].shift = shift;
    }
}

// floor_rank: bins_of's, or RANGED when select_range has put the bins in the list's state.
// At least one block a multiprocessor, said outright: with __launch_bounds__(NT) alone, ptxas for
// sm_86 and sm_89 held select_top<4> to 40 registers (the 1,536 threads those multiprocessors run)
// and spilled 8 bytes; so told, it takes 47 there and no spill (sm_90: 54 and 64 for 4096 a block,
// 4 blocks a multiprocessor as at 62).
template <int SRD>
__global__ void __launch_bounds__(NT, 1) select_top(const float *votes, int64_t cand, uint32_t k, uint32_t floor_rank,
                                                 SelScratch s, WarmScratch w, const float *skip)
{
    grid_dep_enter();
    if (skipped(skip) || warm_hit(w, (int)blockIdx.y)) return;
    __shared__ uint32_t h[BINS];
    const int l = (int)blockIdx.y;
    const float *row = votes + (int64_t)l * cand;
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(row, cand, (int)blockIdx.x, key, in);
    uint32_t lowest, shift;
    if (floor_rank == RANGED) {
        lowest = s.state[l].lowest;
        shift = s.state[l].shift;
    } else {
        bins_of(row, cand, floor_rank, h, lowest, shift);
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            s.state[l].lowest = lowest;
            s.state[l].shift = shift;
        }
    }
    hist_clear(h);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break; // the same for the whole warp
        hist_add(h, in[i] ? bin_of(lowest, shift, key[i]) : NO_BIN);
    }
    __syncthreads();
    uint32_t *g = s.hist + (size_t)l * BINS;
    for (int i = (int)threadIdx.x; i < BINS; i += NT)
        if (h[i]) atomicAdd(&g[i], h[i]);
    if (!is_last(s.done + l)) return;
    uint32_t bin, rem, count;
    if (w.warm) { // the next step's threshold: the lowest key of the bin of rank r2 (bin 0: every key)
        for (int i = (int)threadIdx.x; i < BINS; i += NT) h[i] = __ldcg(&g[i]);
        __syncthreads();
        pick_bin<false>(h, warm_rank(k, (uint64_t)cand), bin, rem, count);
        if (threadIdx.x == 0) {
            w.warm[l * W_WORDS + W_THRESHOLD] = (int32_t)(bin == 0 ? 0u : lowest + (bin << shift));
            w.warm[l * W_WORDS + W_VALID] = 1;
        }
    }
    pick_bin<true>(g, k, bin, rem, count);
    if (threadIdx.x == 0) {
        s.state[l].b0 = bin;
        s.state[l].rem0 = rem;
        s.state[l].n0 = count;
    }
}

// select_filter's tail: bin b0's candidate i (of n: the buffer's, or, when it overflowed, every
// candidate, false for those outside b0), its index j and key.
struct Bin0 {
    const float *row;
    const uint32_t *buf;
    const uint32_t *keys; // shared copy of the buffer's keys, or NULL
    int64_t n;
    uint32_t lowest, shift, b0;
    bool buffered;
};

__device__ __forceinline__ bool bin0_at(const Bin0 &z, int64_t i, uint32_t &j, uint32_t &key)
{
    j = z.buffered ? z.buf[i] : (uint32_t)i;
    key = z.keys ? z.keys[i] : order_key(z.row[j]);
    return z.buffered || bin_of(z.lowest, z.shift, key) == z.b0;
}

// Whole (last) block of select_filter for list l: T and rem from bin b0's keys, then every block's
// counts corrected from (keys above b0, keys in b0) to (keys > T, keys == T).
template <int SCH> __device__ void resolve(const float *row, int64_t cand, const SelScratch &s, int l, uint32_t *h)
{
    __shared__ uint32_t keys[SMEM_KEYS];
    const SelState st = s.state[l];
    Bin0 z;
    z.row = row;
    z.buf = s.buf + (int64_t)l * s.cap;
    z.buffered = st.n0 <= s.cap;
    z.n = z.buffered ? (int64_t)st.n0 : cand;
    z.lowest = st.lowest;
    z.shift = st.shift;
    z.b0 = st.b0;
    z.keys = nullptr;
    const uint32_t kmax = __ldcg(&s.b0max[2 * l]), kmin = ~__ldcg(&s.b0max[2 * l + 1]);
    uint32_t T = kmax, rem = st.rem0;
    if (kmin != kmax) { // else every key of b0 is T
        if (z.buffered && z.n <= SMEM_KEYS) {
            for (int64_t i = threadIdx.x; i < z.n; i += NT) keys[i] = order_key(row[__ldcg(&z.buf[i])]);
            z.keys = keys;
        }
        uint32_t prefix = 0;
        for (int d = 0; d < 3; d++) { // bits 31..21, 20..10, 9..0
            const int known = 11 * d, low = d < 2 ? 21 - 11 * d : 0;
            const uint32_t mask = d < 2 ? 2047u : 1023u;
            hist_clear(h);
            __syncthreads();
            for (int64_t i = threadIdx.x; i < z.n; i += NT) {
                uint32_t j, key;
                if (bin0_at(z, i, j, key) && (known == 0 || (key >> (32 - known)) == (prefix >> (32 - known))))
                    atomicAdd(&h[(key >> low) & mask], 1u);
            }
            __syncthreads();
            uint32_t dig, cnt;
            pick_bin<false>(h, rem, dig, rem, cnt);
            prefix |= dig << low;
        }
        T = prefix;
        // counts[b] = (above b0, in b0): add b0's keys > T, take out b0's keys != T
        uint2 *counts = s.counts + (int64_t)l * s.blocks;
        for (int64_t i = threadIdx.x; i < z.n; i += NT) {
            uint32_t j, key;
            if (!bin0_at(z, i, j, key)) continue;
            if (key > T) atomicAdd(&counts[j / SCH].x, 1u);
            if (key != T) atomicAdd(&counts[j / SCH].y, 0xffffffffu);
        }
    }
    __syncthreads(); // every thread has read b0max
    if (threadIdx.x == 0) {
        s.state[l].t = T;
        s.state[l].rem = rem;
        s.b0max[2 * l] = 0;
        s.b0max[2 * l + 1] = 0;
    }
}

// Registers: select_filter of 4096 a block is held to 4 blocks a multiprocessor (64 registers, no
// spill), where ptxas's own choice (80) allowed 3, and the 8 lists of 1M ran 5.2 waves of it on an
// H100 (ncu); of 1024 or 2048 a block, min 1 block an SM (select_compact too): else ptxas held
// them to few registers and spilled at sm_90 with -lineinfo. select_compact of 4096 a block keeps
// ptxas's own choice (48 registers).
template <int SRD>
__global__ void __launch_bounds__(NT, SRD >= 16 ? 4 : 1) select_filter(const float *votes, int64_t cand, SelScratch s, WarmScratch w,
                                                       const float *skip)
{
    grid_dep_enter();
    constexpr int SCH = SRD * NT;
    if (skipped(skip) || warm_hit(w, (int)blockIdx.y)) return;
    __shared__ uint32_t h[BINS];
    __shared__ uint32_t red[NT / 32];
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, lane = (int)threadIdx.x & 31;
    const float *row = votes + (int64_t)l * cand;
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(row, cand, b, key, in);
    const SelState st = s.state[l];
    const bool buffered = st.n0 <= s.cap;
    uint32_t *buf = s.buf + (int64_t)l * s.cap;
    uint32_t above = 0, mine_n = 0, kmax = 0, kminc = 0, warp_n = 0;
    // round i's key is in b0 (asked again where the positions are written: ballots kept from the
    // first loop cost registers enough to hold the kernel to fewer blocks a multiprocessor)
    auto in_b0 = [&](int i) { return in[i] && bin_of(st.lowest, st.shift, key[i]) == st.b0; };
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) continue; // the same for the whole warp
        const uint32_t bin = bin_of(st.lowest, st.shift, key[i]);
        const bool mine = in[i] && bin == st.b0;
        above += in[i] && bin > st.b0;
        mine_n += mine;
        if (mine) {
            kmax = max(kmax, key[i]);
            kminc = max(kminc, ~key[i]);
        }
        warp_n += (uint32_t)__popc((int)__ballot_sync(FULL, mine));
    }
    // the block's b0 positions go to the buffer at one reserved range
    if (buffered) {
        uint32_t at = reserve_warp_ranges(s.nbuf + l, warp_n, nullptr);
        const unsigned lt = (1u << lane) - 1u;
#pragma unroll
        for (int i = 0; i < SRD; i++) {
            if (i >= rounds) break;
            const unsigned bal = __ballot_sync(FULL, in_b0(i));
            if ((bal >> lane) & 1u) buf[at + (uint32_t)__popc((int)(bal & lt))] = (uint32_t)cand_index<SRD>(b, i);
            at += (uint32_t)__popc((int)bal);
        }
    }
    above = block_sum_u32(above, red);
    mine_n = block_sum_u32(mine_n, red);
    kmax = block_max_u32(kmax, red);
    kminc = block_max_u32(kminc, red);
    if (threadIdx.x == 0) {
        s.counts[(int64_t)l * s.blocks + b] = make_uint2(above, mine_n);
        if (mine_n) {
            atomicMax(&s.b0max[2 * l], kmax);
            atomicMax(&s.b0max[2 * l + 1], kminc);
        }
    }
    if (!is_last(s.done + gridDim.y + l)) return;
    resolve<SCH>(row, cand, s, l, h);
}

// Whole block: a list's sink [0, sink_len) and window (from win_begin) around its chosen entries.
__device__ __forceinline__ void write_sink_window(int32_t *o, int64_t count, int64_t sink_len, int64_t chosen,
                                                  int64_t win_begin)
{
    for (int64_t i = threadIdx.x; i < sink_len; i += NT) o[i] = (int32_t)i;
    for (int64_t i = sink_len + chosen + threadIdx.x; i < count; i += NT) o[i] = (int32_t)(win_begin + (i - sink_len - chosen));
}

template <int SRD>
__global__ void __launch_bounds__(NT, SRD >= 16 ? 0 : 1) select_compact(const float *votes, int64_t cand, SelScratch s, int32_t *out,
                                                     int64_t count, int64_t sink_len, int64_t first_pos,
                                                     int64_t chosen, int64_t win_begin, WarmScratch w,
                                                     const float *skip)
{
    grid_dep_enter();
    if (skipped(skip) || warm_hit(w, (int)blockIdx.y)) return;
    __shared__ uint32_t red[NT / 32];
    __shared__ uint32_t wg[NT / 32], we[NT / 32];
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t T = s.state[l].t, krem = s.state[l].rem;
    int32_t *o = out + (int64_t)l * count;
    if (b == 0) {
        write_sink_window(o, count, sink_len, chosen, win_begin);
        if (tid == 0) s.nbuf[l] = 0; // for the next run (nobody reads it any more in this one)
    }
    // Keys > T and == T in the list before this block, and in it (select_filter's counts as its
    // tail corrected them).
    const uint2 *counts = s.counts + (int64_t)l * s.blocks;
    uint32_t gb = 0, eb = 0;
    for (int i = tid; i < b; i += NT) {
        const uint2 c = counts[i];
        gb += c.x;
        eb += c.y;
    }
    gb = block_sum_u32(gb, red);
    eb = block_sum_u32(eb, red);
    const uint2 here = counts[b];
    if (here.x == 0 && (here.y == 0 || eb >= krem)) return; // none of its keys is chosen: most blocks of a long list
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(votes + (int64_t)l * cand, cand, b, key, in);
    // each warp's keys > T and == T; then the warps before it give its start
    uint32_t ng = 0, ne = 0;
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break; // the same for the whole warp
        ng += (uint32_t)__popc((int)__ballot_sync(FULL, in[i] && key[i] > T));
        ne += (uint32_t)__popc((int)__ballot_sync(FULL, in[i] && key[i] == T));
    }
    if (lane == 0) {
        wg[warp] = ng;
        we[warp] = ne;
    }
    __syncthreads();
    uint32_t g_before = gb, e_before = eb;
    for (int v = 0; v < warp; v++) {
        g_before += wg[v];
        e_before += we[v];
    }
    o += sink_len;
    const unsigned lt = (1u << lane) - 1u;
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break;
        const bool gt = in[i] && key[i] > T, eq = in[i] && key[i] == T;
        const unsigned bg = __ballot_sync(FULL, gt), be = __ballot_sync(FULL, eq);
        const uint32_t gi = g_before + (uint32_t)__popc((int)(bg & lt)), ei = e_before + (uint32_t)__popc((int)(be & lt));
        if (gt || (eq && ei < krem)) o[gi + min(ei, krem)] = (int32_t)(first_pos + cand_index<SRD>(b, i));
        g_before += (uint32_t)__popc((int)bg);
        e_before += (uint32_t)__popc((int)be);
    }
}

// ---- the warm start ----------------------------------------------------------------------------

// Whole block: t1, the r1-th largest of keys[0, n), and rem1, how many keys equal to t1 are among
// the r1 largest; and t2, a key with at least r2 keys at or above it (1 <= r1, r2 <= n). Range bins,
// as select_top's: the first pass spreads [min, max] of the keys over BINS bins and takes t2 as the
// lowest key of the bin holding rank r2; each pass then spreads the bin holding rank r1 again,
// until that bin holds one key value (or one key: the largest in it). The collected keys are a
// little more than r1, spread over a range, so one or two passes usually do it, where three passes
// of radix digits, each with two histograms, did before.
__device__ __forceinline__ void smem_select_range(const uint32_t *keys, uint32_t n, uint32_t r1, uint32_t r2, uint32_t *h,
                                                  uint32_t &t1, uint32_t &rem1, uint32_t &t2)
{
    __shared__ uint32_t red[NT / 32];
    uint32_t mx = 0, mnc = 0; // the largest key, the complement of the smallest
    for (uint32_t i = threadIdx.x; i < n; i += NT) {
        mx = max(mx, keys[i]);
        mnc = max(mnc, ~keys[i]);
    }
    uint32_t hi = block_max_u32(mx, red), lo = ~block_max_u32(mnc, red), rem = r1, cnt = n;
    t2 = lo; // every key is at or above it (no pass runs when the keys are one value)
    for (bool first = true; lo != hi && cnt > 1; first = false) { // the keys in [lo, hi] hold rank rem
        const uint32_t shift = range_shift(lo, hi);
        hist_clear(h);
        __syncthreads();
        for (uint32_t base = 0; base < n; base += NT) { // the same trips for the whole block
            const uint32_t i = base + threadIdx.x, key = i < n ? keys[i] : 0u;
            hist_add(h, i < n && key >= lo && key <= hi ? (key - lo) >> shift : NO_BIN);
        }
        __syncthreads();
        uint32_t bin, unused;
        if (first) {
            pick_bin<false>(h, r2, bin, unused, cnt);
            t2 = lo + (bin << shift);
        }
        pick_bin<false>(h, rem, bin, rem, cnt);
        const uint32_t width = (1u << shift) - 1u; // shift < 32: hi - lo < 2^32 <= BINS << shift
        lo += bin << shift;
        hi = hi - lo > width ? lo + width : hi;
    }
    if (cnt == 1 && lo != hi) { // the one key in [lo, hi]
        uint32_t k = 0;
        for (uint32_t i = threadIdx.x; i < n; i += NT)
            if (keys[i] >= lo && keys[i] <= hi) k = keys[i];
        lo = block_max_u32(k, red);
    }
    t1 = lo;
    rem1 = rem;
}

// 4 blocks a multiprocessor at least (64 registers; ptxas's choice of 78 allows 3).
template <int SRD>
__global__ void __launch_bounds__(NT, 4) select_collect(const float *votes, int64_t cand, WarmScratch w, const float *skip)
{
    grid_dep_enter();
    if (skipped(skip)) return;
    const int l = (int)blockIdx.y, b = (int)blockIdx.x, lane = (int)threadIdx.x & 31;
    if (w.warm[l * W_WORDS + W_VALID] == 0) return; // cold: select_warm misses without reading the chunks
    const uint32_t thr = (uint32_t)w.warm[l * W_WORDS + W_THRESHOLD];
    uint32_t key[SRD];
    bool in[SRD];
    const int rounds = load_keys(votes + (int64_t)l * cand, cand, b, key, in);
    uint32_t n = 0; // the warp's keys >= thr
#pragma unroll
    for (int i = 0; i < SRD; i++)
        if (i < rounds) n += (uint32_t)__popc((int)__ballot_sync(FULL, in[i] && key[i] >= thr));
    uint32_t e = reserve_warp_ranges(&w.nent[l], n, w.chunk); // the block's chunk
    uint2 *ent = w.ent + (int64_t)l * WARM_CAP;
    const unsigned lt = (1u << lane) - 1u;
#pragma unroll
    for (int i = 0; i < SRD; i++) {
        if (i >= rounds) break; // the same for the whole warp
        const unsigned bal = __ballot_sync(FULL, in[i] && key[i] >= thr);
        const uint32_t at = e + (uint32_t)__popc((int)(bal & lt));
        if (((bal >> lane) & 1u) && at < (uint32_t)WARM_CAP) // past it: select_warm misses
            ent[at] = make_uint2(key[i], (uint32_t)cand_index<SRD>(b, i));
        e += (uint32_t)__popc((int)bal);
    }
}

// One block a list (the layout as select_compact's). Dynamic shared memory: WARM_SMEM.
__global__ void __launch_bounds__(NT) select_warm(WarmScratch w, int blocks, int32_t *out, int64_t count, int64_t sink_len,
                                                  int64_t first_pos, int64_t chosen, int64_t win_begin, const float *skip)
{
    grid_dep_enter();
    if (skipped(skip)) return;
    SIFT_DYNAMIC_SMEM(smem);
    uint32_t *keys = reinterpret_cast<uint32_t *>(smem), *pos = keys + WARM_CAP, *pre = pos + WARM_CAP;
    uint32_t *start = pre + WARM_MAX_BLOCKS + 1; // each chunk's first entry
    __shared__ uint32_t h[BINS];
    __shared__ uint32_t red[NT / 32];
    const int l = (int)blockIdx.x, tid = (int)threadIdx.x;
    int32_t *wl = w.warm + l * W_WORDS;
    const uint32_t n = __ldcg(&w.nent[l]);
    const bool hit = wl[W_VALID] != 0 && n >= (uint32_t)chosen && n <= (uint32_t)WARM_CAP;
    __syncthreads(); // every thread has read nent
    if (tid == 0) {
        w.nent[l] = 0; // for the next run
        w.miss[l] = hit ? 0u : 1u;
        if (!hit) wl[W_MISSES]++;
    }
    if (!hit) return;
    // the chunks' prefix in block (position) order: thread t sums blocks [t * per, (t + 1) * per)
    const uint2 *chunk = w.chunk + (int64_t)l * blocks;
    const int per = (blocks + NT - 1) / NT, c0 = min(blocks, tid * per), c1 = min(blocks, c0 + per);
    uint32_t mine = 0, total;
    for (int c = c0; c < c1; c++) {
        const uint2 ch = __ldcg(&chunk[c]);
        start[c] = ch.x;
        pre[c] = ch.y;
        mine += ch.y;
    }
    uint32_t at = block_exscan_u32(mine, red, &total);
    for (int c = c0; c < c1; c++) {
        const uint32_t len = pre[c];
        pre[c] = at;
        at += len;
    }
    if (tid == 0) pre[blocks] = total;
    __syncthreads();
    const uint2 *ent = w.ent + (int64_t)l * WARM_CAP;
    constexpr int BATCH = 8; // loads in flight a thread: each waits on L2 once a batch, not once an entry
    for (uint32_t i0 = 0; i0 < n; i0 += BATCH * NT) {
        uint2 e[BATCH];
#pragma unroll
        for (int m = 0; m < BATCH; m++) {
            const uint32_t i = i0 + (uint32_t)(m * NT + tid);
            if (i >= n) continue;
            int lo = 0, hi = blocks - 1; // the block c with pre[c] <= i < pre[c + 1]
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (pre[mid] <= i) lo = mid;
                else hi = mid - 1;
            }
            e[m] = __ldcg(&ent[start[lo] + (i - pre[lo])]);
        }
#pragma unroll
        for (int m = 0; m < BATCH; m++) {
            const uint32_t i = i0 + (uint32_t)(m * NT + tid);
            if (i >= n) continue;
            keys[i] = e[m].x;
            pos[i] = e[m].y;
        }
    }
    __syncthreads();
    uint32_t t, rem, t2;
    smem_select_range(keys, n, (uint32_t)chosen, warm_rank((uint32_t)chosen, n), h, t, rem, t2);
    int32_t *o = out + (int64_t)l * count;
    write_sink_window(o, count, sink_len, chosen, win_begin);
    // the chosen in position order: thread t takes entries [t * per_e, (t + 1) * per_e)
    const uint32_t per_e = (n + NT - 1) / NT, e0 = min(n, tid * per_e), e1 = min(n, e0 + per_e);
    uint32_t gt = 0, eq = 0, tg, te;
    for (uint32_t i = e0; i < e1; i++) {
        gt += keys[i] > t;
        eq += keys[i] == t;
    }
    uint32_t g_before = block_exscan_u32(gt, red, &tg), e_before = block_exscan_u32(eq, red, &te);
    o += sink_len;
    for (uint32_t i = e0; i < e1; i++) {
        const bool is_gt = keys[i] > t, is_eq = keys[i] == t;
        if (is_gt || (is_eq && e_before < rem)) o[g_before + min(e_before, rem)] = (int32_t)(first_pos + pos[i]);
        g_before += is_gt;
        e_before += is_eq;
    }
    if (tid == 0) {
        wl[W_THRESHOLD] = (int32_t)t2;
        wl[W_HITS]++;
    }
}

// k >= |C| (take_all) or k == 0: the sink, every candidate or none, the window.
__global__ void __launch_bounds__(NT) select_fill(int32_t *out, int64_t total, int64_t count, int64_t sink_len,
                                                  int64_t chosen, int take_all, int64_t first_pos, int64_t win_begin,
                                                  const float *skip)
{
    grid_dep_enter();
    if (skipped(skip)) return;
    for (int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x; e < total; e += (int64_t)gridDim.x * NT) {
        const int64_t i = e % count;
        if (i < sink_len) out[e] = (int32_t)i;
        else if (i < sink_len + chosen) {
            if (take_all) out[e] = (int32_t)(first_pos + (i - sink_len));
        } else out[e] = (int32_t)(win_begin + (i - sink_len - chosen));
    }
}

// The zeroed state (histograms, tickets, buffer counts, b0 key ranges; with the warm start, the
// collected counts); the scratch holds the state, the counts, the warm start's entries and chunks,
// the buffer and the warm start's miss flags.
static size_t zeroed_bytes(int64_t lists, bool warm) { return (size_t)lists * (BINS + 2 + 1 + 2 + (warm ? 1 : 0)) * 4; }
static int64_t buffer_cap(int64_t cand) { return cand < BUF ? cand : BUF; }
static size_t scratch_bytes(int64_t lists, int64_t cand, int blocks, bool warm)
{
    size_t b = (size_t)lists * sizeof(SelState) + (size_t)lists * blocks * sizeof(uint2) + (size_t)lists * buffer_cap(cand) * 4;
    if (warm) b += (size_t)lists * WARM_CAP * sizeof(uint2) + (size_t)lists * blocks * sizeof(uint2) + (size_t)lists * 4;
    return b;
}

static SelScratch select_scratch(int64_t lists, int64_t cand, int blocks, bool warm_on, void *scratch, void *zeroed,
                                 int32_t *warm, WarmScratch *w)
{
    SelScratch s;
    s.hist = static_cast<uint32_t *>(zeroed);
    s.done = s.hist + (size_t)lists * BINS;
    s.nbuf = s.done + (size_t)2 * lists;
    s.b0max = s.nbuf + (size_t)lists;
    char *p = reinterpret_cast<char *>(scratch);
    s.state = reinterpret_cast<SelState *>(p);
    p += (size_t)lists * sizeof(SelState);
    s.counts = reinterpret_cast<uint2 *>(p);
    p += (size_t)lists * blocks * sizeof(uint2);
    *w = WarmScratch{};
    if (warm_on) { // 8-byte entries first, so that they stay aligned
        w->warm = warm;
        w->nent = s.b0max + (size_t)2 * lists;
        w->ent = reinterpret_cast<uint2 *>(p);
        p += (size_t)lists * WARM_CAP * sizeof(uint2);
        w->chunk = reinterpret_cast<uint2 *>(p);
        p += (size_t)lists * blocks * sizeof(uint2);
    }
    s.buf = reinterpret_cast<uint32_t *>(p);
    s.cap = buffer_cap(cand);
    p += (size_t)lists * s.cap * 4;
    if (warm_on) w->miss = reinterpret_cast<uint32_t *>(p);
    s.blocks = blocks;
    return s;
}

// select_top's floor_rank (bins_of): four times the samples expected among the k largest keys,
// and 16 more; 0 (no floor) where that is not below the samples' count. SIFT_CUDA_SELECT_FLOOR=0
// turns it off.
static uint32_t floor_rank(int64_t cand, int64_t k)
{
    static const int off = [] {
        const char *e = getenv("SIFT_CUDA_SELECT_FLOOR");
        return e && strcmp(e, "0") == 0;
    }();
    const int64_t n = cand < RANGE_SAMPLES ? cand : RANGE_SAMPLES;
    const int64_t r = 4 * ((k * n + cand - 1) / cand) + 16;
    return off || r >= n ? 0u : (uint32_t)r;
}

// The radix select's three launches, SRD * NT candidates a block; with the warm start, its two
// launches before them.
template <int SRD>
static cudaError_t launch_radix(dim3 grid, cudaStream_t st, const float *votes, int64_t cand, const sift_select_layout *l,
                                const SelScratch &s, const WarmScratch &w, int32_t *out, const float *skip)
{
    cudaError_t e = cudaSuccess;
    if (w.warm) {
        e = launch(select_collect<SRD>, grid, dim3(NT), 0, st, votes, cand, w, skip);
        if (e == cudaSuccess)
            e = launch(select_warm, dim3(grid.y), dim3(NT), WARM_SMEM, st, w, (int)grid.x, out, l->count, l->sink, l->first,
                       l->chosen, l->win_begin, skip);
    }
    uint32_t rank = floor_rank(cand, l->chosen);
    if (e == cudaSuccess && (int64_t)grid.x * grid.y >= RANGE_KERNEL_BLOCKS) {
        e = launch(select_range, dim3(grid.y), dim3(NT), 0, st, votes, cand, rank, s, w, skip);
        rank = RANGED;
    }
    if (e == cudaSuccess) e = launch(select_top<SRD>, grid, dim3(NT), 0, st, votes, cand, (uint32_t)l->chosen, rank, s, w, skip);
    if (e == cudaSuccess) e = launch(select_filter<SRD>, grid, dim3(NT), 0, st, votes, cand, s, w, skip);
    if (e != cudaSuccess) return e;
    return launch(select_compact<SRD>, grid, dim3(NT), 0, st, votes, cand, s, out, l->count, l->sink, l->first,
                  l->chosen, l->win_begin, w, skip);
}

} // namespace sift_cuda

using namespace sift_cuda;

// select_warm's shared memory; part of sift_cuda_init. A device that cannot give it selects cold.
cudaError_t sift_cuda::select_init(const sift_cuda_device *dev)
{
    if (dev->smem_optin < WARM_SMEM) return cudaSuccess;
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(select_warm), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)WARM_SMEM);
}

// path (1: radix select, when 0 < chosen < |C|; 2: the same started warm, when the node has warm
// and several lists, the warm start's r2 fits half its buffer and its blocks fit its prefix;
// otherwise all or none of C), and for the radix select split_len (candidates per block: 4096, 2048 or 1024), blocks
// (per list), scratch_bytes and zeroed_bytes.
// The layout is the node's (n->p.layout).
extern "C" cudaError_t sift_cuda_select_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    const sift_select_layout *l = &n->p.layout;
    const int64_t lists = n->src[0]->shape[0], cand = n->src[0]->shape[1];
    plan->path = l->chosen > 0 && l->chosen < cand;
    if (plan->path && lists > 65535) return beyond_limit(plan, "radix select over more than 65535 lists");
    if (plan->path) {
        int64_t sch = 4096;
        while (sch > 1024 && lists * ((cand + sch - 1) / sch) < SELECT_BLOCKS) sch /= 2;
        plan->split_len = sch;
        plan->blocks = (int)((cand + sch - 1) / sch);
        // with SIFT_CUDA_SELECT_WARM=1 only (dev->select_warm: a miss costs the collect pass and the
        // tail beside the radix select, and decode misses often), and several lists only
        // (TokenButler's, one per KV head): on an H100, 8 lists of 128K candidates took 36.1 us warm
        // against 46.5 in full and 8 of 1M 76.2 against 146.3, but one list of 128K took 34.5
        // against 23.4 (two launches more, each with its latency, to save part of the radix
        // select's passes over few candidates)
        const bool warm = dev->select_warm && n->n_src == 2 && lists >= 2 && dev->smem_optin >= WARM_SMEM &&
                          plan->blocks <= WARM_MAX_BLOCKS &&
                          warm_rank((uint32_t)l->chosen, (uint64_t)cand) <= WARM_CAP / 2;
        if (warm) plan->path = 2;
        plan->zeroed_bytes = zeroed_bytes(lists, warm);
        plan->scratch_bytes = scratch_bytes(lists, cand, plan->blocks, warm);
    }
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_select_launch(const sift_cuda_device *dev, const sift_node *n,
                                               const sift_cuda_plan *plan, void *scratch, void *zeroed, cudaStream_t st)
{
    (void)dev;
    const sift_select_layout *l = &n->p.layout;
    const float *votes = dev_ptr<const float>(n->src[0]), *skip = skip_flag(n);
    int32_t *out = dev_ptr<int32_t>(n->dst);
    const int lists = (int)n->src[0]->shape[0];
    const int64_t cand = n->src[0]->shape[1];
    const int64_t total = (int64_t)lists * l->count;
    if (total == 0) return cudaSuccess;
    if (!plan->path) {
        int64_t blocks = (total + NT - 1) / NT;
        if (blocks > 4096) blocks = 4096;
        return launch(select_fill, dim3((unsigned)blocks), dim3(NT), 0, st, out, total, l->count, l->sink, l->chosen,
                      l->chosen > 0, l->first, l->win_begin, skip);
    }
    WarmScratch w;
    const SelScratch s = select_scratch(lists, cand, plan->blocks, plan->path == 2, scratch, zeroed,
                                        plan->path == 2 ? dev_ptr<int32_t>(n->src[1]) : nullptr, &w);
    const dim3 grid((unsigned)plan->blocks, (unsigned)lists);
    switch (plan->split_len) {
    case 4096: return launch_radix<4096 / NT>(grid, st, votes, cand, l, s, w, out, skip);
    case 2048: return launch_radix<2048 / NT>(grid, st, votes, cand, l, s, w, out, skip);
    default: return launch_radix<1024 / NT>(grid, st, votes, cand, l, s, w, out, skip);
    }
}
