// score_max (include/sift.h; CPU reference: op_score_max in backends/cpu/cpu_backend.c):
// votes[g][j] = max over the G = Hq / Hkv query heads h of KV head g of scale * dot(q[h], K[g][begin + j]),
// score and the KVHEAD_MAX vote in one pass, without the [Hq][M] scores in memory. Absent K rows
// (a paged view's rows without a page) count as zero rows, so their vote is 0, as in the reference.
// Predicated (sift_graph_skip_if): every kernel returns at once when the flag is set.
//
// Two kernels:
//
// - score_max_rows<T, TPR, GC>, for rows of 16, 32 or 64 bytes (f16 D = 8, 16, 32; f32 D = 8, 16),
//   16-byte aligned, and groups of at most 8 heads: TokenButler's scorer (D = 16 f16 keys, 32 bytes
//   a row, G = 4, up to a million positions), which must stream K at memory bandwidth. K goes
//   straight from global memory into registers, no shared memory: a row is spread over TPR = row
//   bytes / 16 lanes, one 16-byte chunk (8 f16 or 4 f32 elements) each, so one load instruction
//   of a warp reads 32 / TPR consecutive rows, 512 contiguous bytes. Each lane holds the group's q
//   for its chunk's elements in registers (GC x 8 or GC x 4 floats), computes GC partial dots, and
//   a reduce-scatter over the row's lanes (common.cuh) leaves each lane GC / TPR complete dots;
//   it scales them, takes their max (absent heads of a group padded to GC excluded) and a
//   max-all-reduce over the TPR lanes finishes the row. A warp step is 32 rows (TPR loads per
//   lane), and each lane issues the loads of 4 / TPR steps before it uses any: 64 bytes in flight
//   per lane. After a step a shuffle hands lane l the vote of row l, so the 32 votes of a step are
//   one coalesced 128-byte store. Warps walk the positions of KV head blockIdx.y grid-stride, the
//   grid one wave of resident blocks over the device (no tail wave).
//
// - score_max_tiles<T, D, GC>, everything else (any D multiple of 8 up to 128, any group, rows at
//   any element alignment): the score kernel's cp.async pipeline of 16 KiB K tiles and its QK
//   (attend.cuh), then the max over the group's heads per row in shared memory instead of the
//   scores' store. Groups above 8 heads run their chunks of 8 one after another on the tile in
//   shared memory, a running max per row between them: K is read from memory once.
//
// K may also be an i8 cache (kv_write's quantized rows, include/sift.h): a row of D int8 q[i] and then
// the row's f32 m, D + 4 bytes; the dot is (m / 127) * sum_i q'[h][i] * q[i], taken here as
// max_h (sum_i q'[h][i] * q[i]) * (m * scale / 127) (the factor is >= 0: the max commutes with it).
// The int8 become floats exactly (the 2^23 trick: byte + 128 in the low byte of 2^23's mantissa,
// minus 2^23 + 128), the sums are f32 FMAs. Two kernels:
//
// - score_max_i8_d16<GC>, D = 16 (20-byte rows, TokenButler's projected keys), rows 4-byte aligned
//   with every 4th row 16-byte aligned (base and KV head stride multiples of 16; a paged view's pages
//   of at least 4 rows), G <= 8: a warp takes windows of 128 positions aligned to multiples of 128
//   (2560 bytes: 32 groups of 4 rows, each 80 contiguous, 16-byte aligned bytes). Lane l loads
//   chunks l + 32 k (k < 5) of the window with 16-byte evict-first loads, so each load instruction
//   of the warp reads 512 bytes (contiguous within a page), 80 bytes per lane, and stages them in
//   its warp's 2.5 KiB of shared memory, issuing the next window's loads before it computes this one.
//   Lane l then reads its 4 consecutive rows back (5 conflict-free 16-byte reads) and computes them
//   alone: q' of up to 4 heads at all 16 elements in registers (64 floats), 16 FMAs per head and row,
//   no shuffles; groups of 5-8 heads give each row to a lane pair, 4 heads each, and one shuffle takes
//   the pair's max. The 128 votes go through shared memory once more so that each store instruction
//   writes 32 consecutive votes.
// - score_max_i8_rows<L, GC>, any other D (multiples of 8 up to 128), rows at any byte alignment,
//   pages of any size, any group: L = D / 8 rounded up to a power of two lanes per row, lane c holding
//   words c and c + L of the row (values 4c .. 4c + 3 and 4(c + L) ..; each load instruction reads
//   L consecutive words of 32 / L consecutive rows), the row's m read by all of them; partial dots,
//   ReduceScatter and max as score_max_rows does; groups above 8 heads run their chunks of 8 one after
//   another (q' reloaded per chunk, from L1).
#include "attend.cuh"

namespace sift_cuda {

// The kernels' parameters (passed by value), built from the node and the plan by the launch.
struct ScoreMaxArgs {
    const float *q;    // [hq][d]
    KvMap kv;          // K only (kv.v unused)
    int hq;
    int64_t begin, m;  // positions begin .. begin + m - 1
    float scale;
    float *votes;      // [hkv][m]
    const float *skip; // predicate (sift_graph_skip_if): nothing happens when *skip != 0; NULL: none
    int chunks;        // tiled and i8 rows kernels: chunks of GC heads per group
    int64_t split_len; // tiled kernel: positions per block, a multiple of the tile
    int aligned;       // tiled kernel: K rows 16-byte aligned (cp.async), else element copies;
                       // i8 rows kernel: rows 4-byte aligned (word loads), else byte loads
    int i8;            // K is an i8 cache; kv.d is then its values per row (the rows have d + 4 bytes)
};

// One 16-byte chunk of a row as floats.
__device__ __forceinline__ void chunk_to_float(const uint4 &u, float (&x)[8]) { half2x4_to_float(u, x); }
__device__ __forceinline__ void chunk_to_float(const uint4 &u, float (&x)[4])
{
    x[0] = __uint_as_float(u.x), x[1] = __uint_as_float(u.y), x[2] = __uint_as_float(u.z), x[3] = __uint_as_float(u.w);
}

// ---- rows of 16-64 bytes: straight from global memory ------------------------------------------

// Up to 4 heads: at most 64 registers, 4 blocks (1024 threads, 64 KiB of loads in flight) per
// multiprocessor; 8 heads need their 64 q values in registers, more than that would leave.
template <typename T, int TPR, int GC>
// At 4 heads sm_86 and sm_89 need a few more than 64 registers (4 bytes spilled since the kernels
// read K from either pool of an offloaded cache), so 3 blocks per multiprocessor there.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890)
#define SMAX_ROWS_BLOCKS_G4 3
#else
#define SMAX_ROWS_BLOCKS_G4 4
#endif
__global__ void __launch_bounds__(NT, GC < 4 ? 4 : GC == 4 ? SMAX_ROWS_BLOCKS_G4 : 1) score_max_rows(const ScoreMaxArgs a)
{
    grid_dep_enter();
    if (skipped(a.skip)) return;
    constexpr int E = 16 / (int)sizeof(T);     // elements per lane: one 16-byte chunk
    constexpr int RPW = 32 / TPR;              // rows per load instruction of a warp
    constexpr int U = 4 / TPR;                 // warp steps (32 rows) per iteration: 4 loads in flight per lane
    constexpr int NH = GC >= TPR ? GC / TPR : 1; // complete dots per lane after the reduce-scatter
    constexpr int WARPS = NT / 32;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int g = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int c = lane % TPR;  // the lane's chunk of its row
    const int rl = lane / TPR; // the lane's row among the RPW of a load instruction
    // The heads whose dots this lane holds after ReduceScatter<GC, TPR / 2> (common.cuh): NH of them
    // from hl0, or, with fewer heads than lanes, one shared by TPR / GC lanes.
    const int hl0 = GC >= TPR ? c * NH : c / (TPR / GC);

    float qr[GC][E]; // q of the group's heads at this lane's elements; heads past G are 0
#pragma unroll
    for (int h = 0; h < GC; h++)
#pragma unroll
        for (int i = 0; i < E; i++) qr[h][i] = h < G ? __ldg(a.q + (int64_t)(g * G + h) * a.kv.d + c * E + i) : 0.0f;

    const int64_t steps = (a.m + 31) / 32;
    const int64_t stride = (int64_t)gridDim.x * WARPS * U;
    float *votes = a.votes + (int64_t)g * a.m;
    for (int64_t s0 = ((int64_t)blockIdx.x * WARPS + warp) * U; s0 < steps; s0 += stride) {
        // every load of the iteration first; rows past the end or without a page read as zeros
        uint4 raw[U][TPR];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int k = 0; k < TPR; k++) {
                const int64_t j = (s0 + u) * 32 + k * RPW + rl;
                const int32_t row = j < a.m ? kv_locate(a.kv.k, a.kv.ncap, a.begin + j) : -1;
                raw[u][k] = row >= 0 ? ld_stream16(kv_at<const T>(a.kv.k, g, row) + c * E) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float mk[TPR]; // the vote of row k * RPW + rl, the same in all TPR lanes of the row
#pragma unroll
            for (int k = 0; k < TPR; k++) {
                float x[E];
                chunk_to_float(raw[u][k], x);
                float acc[GC];
                head_dots(qr, x, acc);
                ReduceScatter<GC, TPR / 2>::run(acc, lane);
                float mx = neg_inf();
#pragma unroll
                for (int i = 0; i < NH; i++)
                    if (hl0 + i < G) mx = fmaxf(mx, acc[i] * a.scale);
#pragma unroll
                for (int o = 1; o < TPR; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, o));
                mk[k] = mx;
            }
            // Lane l stores row l of the step: row k * RPW + r sits in lanes r * TPR .. r * TPR + TPR - 1,
            // and the one of them at position k offers it (selects, not a dynamically indexed array).
            float offer = mk[0];
#pragma unroll
            for (int k = 1; k < TPR; k++)
                if (c == k) offer = mk[k];
            const float v = __shfl_sync(FULL, offer, (lane % RPW) * TPR + lane / RPW);
            const int64_t j = (s0 + u) * 32 + lane;
            if (j < a.m) votes[j] = v;
        }
    }
}

// ---- int8 rows ---------------------------------------------------------------------------------

// The 4 int8 of a word as floats, exactly: each byte + 128 (the xor) as the low mantissa byte of
// 2^23, minus 2^23 + 128.
__device__ __forceinline__ void i8x4_to_float(unsigned w, float *x)
{
    const unsigned u = w ^ 0x80808080u;
#pragma unroll
    for (int b = 0; b < 4; b++) x[b] = __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7440u | (unsigned)b)) - 8388736.0f;
}

constexpr int I8_WIN = 128;                  // positions of a warp's window (score_max_i8_d16)
constexpr int I8_WIN_CHUNKS = I8_WIN * 20 / 16; // its 16-byte chunks: 160, 5 per lane

// Window [p0, p0 + 128) of KV head g: raw[k] = chunk lane + 32 k, where chunk c is bytes 16 (c % 5) ..
// 16 (c % 5) + 15 of the 4 rows from position p0 + 4 (c / 5) (80 contiguous bytes: the 4 rows lie in
// one page, and their first physical row is a multiple of 4, so the chunk is 16-byte aligned). Groups
// of 4 outside [begin, begin + m) and rows without a page read as zeros (vote 0, as the reference's).
__device__ __forceinline__ void i8_load_window(const ScoreMaxArgs &a, int g, int64_t p0, int lane, uint4 (&raw)[5])
{
#pragma unroll
    for (int k = 0; k < 5; k++) {
        const int c = lane + 32 * k, grp = c / 5, sub = c - 5 * grp;
        const int64_t p = p0 + 4 * grp;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        const int32_t row = p + 4 > a.begin && p < a.begin + a.m ? kv_locate(a.kv.k, a.kv.ncap, p) : -1;
        if (row >= 0) {
            const unsigned char *src = kv_at<const unsigned char>(a.kv.k, g, row) + 16 * sub;
            if (p + 4 <= a.kv.ncap) {
                v = ld_stream16(src);
            } else { // the last 1-3 rows of a cache that is not paged: only the words inside it
                const int words = (int)(a.kv.ncap - p) * 5 - 4 * sub;
                if (words > 0) v.x = ld_stream4(src);
                if (words > 1) v.y = ld_stream4(src + 4);
                if (words > 2) v.z = ld_stream4(src + 8);
                if (words > 3) v.w = ld_stream4(src + 12);
            }
        }
        raw[k] = v;
    }
}

// Up to 4 heads per lane: 64 floats of q' in registers, 2 blocks (512 threads, 40 KiB of loads in
// flight) per multiprocessor at least.
template <int GC>
__global__ void __launch_bounds__(NT, 2) score_max_i8_d16(const ScoreMaxArgs a)
{
    grid_dep_enter();
    if (skipped(a.skip)) return;
    constexpr int D = 16;
    constexpr int HPL = GC < 4 ? GC : 4; // heads per lane
    constexpr int LPR = GC / HPL;        // lanes per row: 1, or 2 for groups of 5-8 heads
    constexpr int WARPS = NT / 32;
    __shared__ uint4 stage[WARPS][I8_WIN_CHUNKS];  // each warp's window
    __shared__ float4 vbuf[WARPS][I8_WIN / 4];     // and its votes
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int g = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int hb = LPR == 2 ? (lane & 1) * HPL : 0; // the lane's first head (always one of the group)
    const int grp = lane / LPR;                     // its 4 rows in a pass: 4 grp .. 4 grp + 3

    float qr[HPL][D];
#pragma unroll
    for (int h = 0; h < HPL; h++)
#pragma unroll
        for (int i = 0; i < D; i++) qr[h][i] = hb + h < G ? __ldg(a.q + (int64_t)(g * G + hb + h) * D + i) : 0.0f;
    const float f = a.scale / 127.0f;
    float *votes = a.votes + (int64_t)g * a.m;

    const int64_t w0 = a.begin / I8_WIN, nwin = (a.begin + a.m + I8_WIN - 1) / I8_WIN - w0;
    const int64_t stride = (int64_t)gridDim.x * WARPS;
    int64_t wi = (int64_t)blockIdx.x * WARPS + warp;
    uint4 raw[5];
    if (wi < nwin) i8_load_window(a, g, (w0 + wi) * I8_WIN, lane, raw);
    for (; wi < nwin; wi += stride) {
#pragma unroll
        for (int k = 0; k < 5; k++) stage[warp][lane + 32 * k] = raw[k];
        if (wi + stride < nwin) i8_load_window(a, g, (w0 + wi + stride) * I8_WIN, lane, raw); // in flight meanwhile
        __syncwarp();
#pragma unroll
        for (int pass = 0; pass < LPR; pass++) {
            const uint4 *rows = &stage[warp][pass * (I8_WIN_CHUNKS / LPR) + 5 * grp];
            unsigned w[20]; // 4 rows of 5 words: 4 of values, then m
#pragma unroll
            for (int k = 0; k < 5; k++) {
                const uint4 c = rows[k];
                w[4 * k] = c.x, w[4 * k + 1] = c.y, w[4 * k + 2] = c.z, w[4 * k + 3] = c.w;
            }
            float v[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float acc[HPL];
#pragma unroll
                for (int h = 0; h < HPL; h++) acc[h] = 0.0f;
#pragma unroll
                for (int wd = 0; wd < 4; wd++) {
                    float x[4];
                    i8x4_to_float(w[5 * r + wd], x);
#pragma unroll
                    for (int h = 0; h < HPL; h++)
#pragma unroll
                        for (int b = 0; b < 4; b++) acc[h] = fmaf(qr[h][4 * wd + b], x[b], acc[h]);
                }
                float mx = acc[0];
#pragma unroll
                for (int h = 1; h < HPL; h++)
                    if (hb + h < G) mx = fmaxf(mx, acc[h]);
                if (LPR == 2) mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 1));
                v[r] = mx * (__uint_as_float(w[5 * r + 4]) * f);
            }
            if (lane % LPR == 0) vbuf[warp][pass * (32 / LPR) + grp] = make_float4(v[0], v[1], v[2], v[3]);
        }
        __syncwarp();
        const float *vb = reinterpret_cast<const float *>(vbuf[warp]);
        const int64_t j0 = (w0 + wi) * I8_WIN - a.begin;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int64_t j = j0 + 32 * k + lane;
            if (j >= 0 && j < a.m) votes[j] = vb[32 * k + lane];
        }
    }
}

// A word of an i8 row: one 4-byte load, or 4 byte loads where the rows are not 4-byte aligned.
__device__ __forceinline__ unsigned i8_word(const unsigned char *p, bool aligned)
{
    if (aligned) return ld_stream4(p);
    return (unsigned)__ldg(p) | (unsigned)__ldg(p + 1) << 8 | (unsigned)__ldg(p + 2) << 16 | (unsigned)__ldg(p + 3) << 24;
}

// q' of heads h0 .. h0 + hn - 1 at the values of lane c's words c and c + L (zeros past D and hn).
template <int L, int GC>
__device__ __forceinline__ void i8_load_q(const ScoreMaxArgs &a, int h0, int hn, int c, float (&qr)[GC][8])
{
    const int dw = a.kv.d / 4;
#pragma unroll
    for (int h = 0; h < GC; h++)
#pragma unroll
        for (int k = 0; k < 2; k++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int wd = c + L * k;
                qr[h][4 * k + b] = h < hn && wd < dw ? __ldg(a.q + (int64_t)(h0 + h) * a.kv.d + 4 * wd + b) : 0.0f;
            }
}

template <int L, int GC>
__global__ void __launch_bounds__(NT) score_max_i8_rows(const ScoreMaxArgs a)
{
    grid_dep_enter();
    if (skipped(a.skip)) return;
    constexpr int RPW = 32 / L;                // rows per warp step
    constexpr int U = 2;                       // warp steps per iteration, loaded before any is used
    constexpr int NH = GC >= L ? GC / L : 1;   // complete dots per lane after the reduce-scatter
    constexpr int WARPS = NT / 32;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int g = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int c = lane % L, rl = lane / L;
    const int hl0 = GC >= L ? c * NH : c / (L / GC); // as in score_max_rows
    const int dw = a.kv.d / 4;
    const bool aligned = a.aligned != 0;

    float qr[GC][8];
    if (a.chunks == 1) i8_load_q<L, GC>(a, g * G, G, c, qr);
    const float f = a.scale / 127.0f;
    float *votes = a.votes + (int64_t)g * a.m;
    const int64_t steps = (a.m + RPW - 1) / RPW;
    for (int64_t s0 = ((int64_t)blockIdx.x * WARPS + warp) * U; s0 < steps; s0 += (int64_t)gridDim.x * WARPS * U) {
        unsigned w[U][2];
        float ms[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t j = (s0 + u) * RPW + rl;
            const int32_t row = j < a.m ? kv_locate(a.kv.k, a.kv.ncap, a.begin + j) : -1;
            const unsigned char *p = row >= 0 ? kv_at<const unsigned char>(a.kv.k, g, row) : nullptr;
#pragma unroll
            for (int k = 0; k < 2; k++) w[u][k] = p && c + L * k < dw ? i8_word(p + 4 * (c + L * k), aligned) : 0u;
            ms[u] = p ? __uint_as_float(i8_word(p + 4 * dw, aligned)) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float x[8];
            i8x4_to_float(w[u][0], x);
            i8x4_to_float(w[u][1], x + 4);
            float mx = neg_inf();
            for (int ch = 0; ch < a.chunks; ch++) {
                if (a.chunks > 1) i8_load_q<L, GC>(a, g * G + ch * GC, min(GC, G - ch * GC), c, qr);
                float acc[GC];
                head_dots(qr, x, acc);
                ReduceScatter<GC, L / 2>::run(acc, lane);
#pragma unroll
                for (int i = 0; i < NH; i++)
                    if (ch * GC + hl0 + i < G) mx = fmaxf(mx, acc[i]);
            }
#pragma unroll
            for (int o = 1; o < L; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, o));
            const int64_t j = (s0 + u) * RPW + rl;
            if (c == 0 && j < a.m) votes[j] = mx * (ms[u] * f);
        }
    }
}

// ---- everything else: K tiles through shared memory ----------------------------------------------

template <typename T, int D, int GC> constexpr size_t tiles_smem(int stages)
{
    using C = Tile<T, D>;
    // K tiles; S [GC][TR + 1] (the score kernel's); q staging [GC][D]; running max [TR]
    return (size_t)stages * TILE_BYTES + (size_t)GC * (C::TR + 1) * sizeof(float) + (size_t)GC * D * sizeof(float) +
           (size_t)C::TR * sizeof(float);
}

template <typename T, int D, int GC>
__global__ void __launch_bounds__(NT, 2) score_max_tiles(const ScoreMaxArgs a, const int stages)
{
    grid_dep_enter();
    if (skipped(a.skip)) return;
    using C = Tile<T, D>;
    constexpr int SST = C::TR + 1;
    static_assert(C::TR <= NT, "a thread per row of the tile takes the max");
    SIFT_DYNAMIC_SMEM(smem);
    float *S = reinterpret_cast<float *>(smem + (size_t)stages * TILE_BYTES);
    float *QB = S + GC * SST; // load_q's staging
    float *MX = QB + GC * D;  // running max of row tid over the chunks done (groups above GC heads)

    const int tid = (int)threadIdx.x, lane = tid & 31;
    const int g = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int64_t beg = (int64_t)blockIdx.x * a.split_len, end = min(a.m, beg + a.split_len);
    const int ntiles = (int)((end - beg + C::TR - 1) / C::TR);
    const bool aligned = a.aligned != 0;
    const RopeArgs no_rope = {nullptr, 0, 0, 0};
    const int r = lane % C::LPR;

    float qr[GC][8];
    if (a.chunks == 1) load_q<T, D, GC, false>(a.q, a.kv.d, g * G, G, r, qr, QB, 0, 0);
    zero_padding<T, D>(smem, stages, TILE_BYTES, a.kv.d);

    int32_t pos[C::CPT];
    for (int s = 0; s < stages - 1; s++) {
        if (s < ntiles) {
            load_positions<T, D>(pos, nullptr, 0, a.begin, beg + (int64_t)s * C::TR, end);
            issue_tile<T, D, false, false>(smem + (size_t)s * TILE_BYTES, nullptr, nullptr, a.kv, g, pos, aligned);
        }
        cp_async_commit();
    }
    if (stages - 1 < ntiles) load_positions<T, D>(pos, nullptr, 0, a.begin, beg + (int64_t)(stages - 1) * C::TR, end);
    for (int t = 0; t < ntiles; t++) {
        wait_stage(stages);
        __syncthreads(); // tile t visible to all; everyone done with tile t-1 and its S
        const int nt = t + stages - 1;
        if (nt < ntiles) {
            issue_tile<T, D, false, false>(smem + (size_t)(nt % stages) * TILE_BYTES, nullptr, nullptr, a.kv, g, pos, aligned);
            if (nt + 1 < ntiles) load_positions<T, D>(pos, nullptr, 0, a.begin, beg + (int64_t)(nt + 1) * C::TR, end);
        }
        cp_async_commit();

        const T *Ks = reinterpret_cast<const T *>(smem + (size_t)(t % stages) * TILE_BYTES);
        const int64_t tb = beg + (int64_t)t * C::TR;
        for (int ch = 0; ch < a.chunks; ch++) {
            const int h0 = ch * GC, hn = min(GC, G - h0);
            if (a.chunks > 1) load_q<T, D, GC, false>(a.q, a.kv.d, g * G + h0, hn, r, qr, QB, 0, 0);
            qk_tile<T, D, GC, C::TR / C::RPB, false>(Ks, qr, a.scale, S, 1, SST, no_rope, 0);
            __syncthreads();
            if (tid < C::TR) {
                float mx = ch == 0 ? neg_inf() : MX[tid];
                for (int h = 0; h < hn; h++) mx = fmaxf(mx, S[h * SST + tid]);
                if (ch + 1 < a.chunks) MX[tid] = mx;
                else if (tb + tid < end) a.votes[(int64_t)g * a.m + tb + tid] = mx;
            }
            if (ch + 1 < a.chunks) __syncthreads(); // the next chunk rewrites S
        }
    }
    cp_async_wait<0>();
}

// ---- host side ------------------------------------------------------------------------------------

using RowsKernel = void (*)(ScoreMaxArgs);
using TilesKernel = void (*)(ScoreMaxArgs, int);

// Heads per block or lane group for a group of G: 1, 2, 4 or 8 (as the score kernel's).
static int heads_per_chunk(int G) { return G >= 5 ? 8 : G >= 3 ? 4 : G; }

template <typename T, int TPR> static RowsKernel rows_gc(int gc)
{
    switch (gc) {
    case 1: return &score_max_rows<T, TPR, 1>;
    case 2: return &score_max_rows<T, TPR, 2>;
    case 4: return &score_max_rows<T, TPR, 4>;
    default: return &score_max_rows<T, TPR, 8>;
    }
}

// The row kernel for rows of `lanes` 16-byte chunks (1, 2 or 4), or NULL for another row length.
static RowsKernel rows_kernel(int f16, int lanes, int gc)
{
    switch (lanes) {
    case 1: return f16 ? rows_gc<__half, 1>(gc) : nullptr; // f32 rows are at least 32 bytes
    case 2: return f16 ? rows_gc<__half, 2>(gc) : rows_gc<float, 2>(gc);
    case 4: return f16 ? rows_gc<__half, 4>(gc) : rows_gc<float, 4>(gc);
    default: return nullptr;
    }
}

static RowsKernel i8_d16_kernel(int gc)
{
    switch (gc) {
    case 1: return &score_max_i8_d16<1>;
    case 2: return &score_max_i8_d16<2>;
    case 4: return &score_max_i8_d16<4>;
    default: return &score_max_i8_d16<8>;
    }
}

template <int L> static RowsKernel i8_rows_gc(int gc)
{
    switch (gc) {
    case 1: return &score_max_i8_rows<L, 1>;
    case 2: return &score_max_i8_rows<L, 2>;
    case 4: return &score_max_i8_rows<L, 4>;
    default: return &score_max_i8_rows<L, 8>;
    }
}

// Lanes per row of score_max_i8_rows: D / 8 rounded up to a power of two (1 .. 16).
static int i8_lanes(int d)
{
    int l = 1;
    while (l * 8 < d) l <<= 1;
    return l;
}

static RowsKernel i8_rows_kernel(int d, int gc)
{
    switch (i8_lanes(d)) {
    case 1: return i8_rows_gc<1>(gc);
    case 2: return i8_rows_gc<2>(gc);
    case 4: return i8_rows_gc<4>(gc);
    case 8: return i8_rows_gc<8>(gc);
    default: return i8_rows_gc<16>(gc);
    }
}

// Whether score_max_i8_d16 reads this node's K: D = 16, contiguous 20-byte rows, every 4th row
// 16-byte aligned (the base and the KV head stride multiples of 16, pages of at least 4 rows), G <= 8.
// (With one KV head and no pages, a cache of any length: its last 1-3 rows are read by words.)
static bool i8_d16_applies(const KvMap &kv, int G)
{
    return kv.d == 16 && G <= 8 && (uintptr_t)kv.k.base % 16 == 0 && (kv.hkv == 1 || kv.k.stride0 % 16 == 0) && kv.k.stride1 == 20 &&
           (!kv.k.pages || kv.k.page_shift >= 2) && host_pool_aligned(kv.k, 1, 16);
}

struct TilesInfo {
    TilesKernel fn;
    size_t smem2, smem3;
    int tile_rows;
};

template <typename T, int D> static TilesInfo tiles_gc(int gc)
{
    switch (gc) {
    case 1: return {&score_max_tiles<T, D, 1>, tiles_smem<T, D, 1>(2), tiles_smem<T, D, 1>(3), Tile<T, D>::TR};
    case 2: return {&score_max_tiles<T, D, 2>, tiles_smem<T, D, 2>(2), tiles_smem<T, D, 2>(3), Tile<T, D>::TR};
    case 4: return {&score_max_tiles<T, D, 4>, tiles_smem<T, D, 4>(2), tiles_smem<T, D, 4>(3), Tile<T, D>::TR};
    default: return {&score_max_tiles<T, D, 8>, tiles_smem<T, D, 8>(2), tiles_smem<T, D, 8>(3), Tile<T, D>::TR};
    }
}

// D <= 64 runs the 64 kernels, 64 < D <= 128 the 128 ones (rows zero-padded, as score's).
static TilesInfo tiles_kernel(int f16, int d, int gc)
{
    if (f16) return d <= 64 ? tiles_gc<__half, 64>(gc) : tiles_gc<__half, 128>(gc);
    return d <= 64 ? tiles_gc<float, 64>(gc) : tiles_gc<float, 128>(gc);
}

static size_t tiles_smem_for(const TilesInfo &k, int stages) { return stages >= 3 ? k.smem3 : k.smem2; }

static bool k_aligned(const KvMap &kv)
{
    const size_t es = kv.f16 ? 2 : 4;
    return ((uintptr_t)kv.k.base % 16) == 0 && ((size_t)kv.k.stride0 * es) % 16 == 0 &&
           ((size_t)kv.k.stride1 * es) % 16 == 0 && host_pool_aligned(kv.k, es, 16);
}

// The 16-byte chunks per lane group of the row kernel for this node's K, or 0 where it does not
// apply (rows of other lengths, rows not 16-byte aligned, groups above 8 heads).
static int rows_lanes(const KvMap &kv, int G, bool aligned)
{
    const int bytes = kv.d * (kv.f16 ? 2 : 4);
    if (!aligned || G > 8 || (bytes != 16 && bytes != 32 && bytes != 64)) return 0;
    return rows_kernel(kv.f16, bytes / 16, heads_per_chunk(G)) ? bytes / 16 : 0;
}

static ScoreMaxArgs score_max_args(const sift_node *n, const sift_cuda_plan *plan)
{
    ScoreMaxArgs a = {};
    a.q = dev_ptr<const float>(n->src[0]);
    a.kv = kv_map(n->src[1], nullptr);
    a.i8 = n->src[1]->dtype == SIFT_I8;
    if (a.i8) a.kv.d -= 4; // the row's m after its values
    a.hq = (int)n->src[0]->shape[0];
    a.begin = n->p.begin;
    a.m = n->p.end - n->p.begin;
    a.scale = n->p.scale;
    a.votes = dev_ptr<float>(n->dst);
    a.skip = skip_flag(n);
    if (plan) {
        a.chunks = plan->chunks;
        a.split_len = plan->split_len;
        a.aligned = plan->aligned;
    }
    return a;
}

} // namespace sift_cuda

using namespace sift_cuda;

cudaError_t sift_cuda::score_max_init(const sift_cuda_device *dev)
{
    for (int f16 = 0; f16 < 2; f16++)
        for (int d = 64; d <= 128; d += 64)
            for (int gc = 1; gc <= 8; gc *= 2) {
                const TilesInfo k = tiles_kernel(f16, d, gc);
                const void *fn = reinterpret_cast<const void *>(k.fn);
                cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)tiles_smem_for(k, dev->stages));
                if (e == cudaSuccess)
                    e = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             (int)cudaSharedmemCarveoutMaxShared);
                if (e != cudaSuccess) return e;
            }
    return cudaSuccess;
}

// path (1: the row kernel, 0: the tiled one; i8 K: 2 score_max_i8_d16, 3 score_max_i8_rows), aligned;
// with positions, blocks (grid x: blocks per KV head) and for the tiled and i8 rows kernels chunks,
// for the tiled one split_len.
extern "C" cudaError_t sift_cuda_score_max_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    if (!rows_addressable(n->src[1])) return beyond_limit(plan, "a K pool of 2^31 rows or more per KV head");
    const ScoreMaxArgs a = score_max_args(n, nullptr);
    if (a.kv.hkv > 65535) return beyond_limit(plan, "score_max over more than 65535 KV heads");
    const int G = a.hq / a.kv.hkv, gc = heads_per_chunk(G);
    int occ = 0;
    cudaError_t e;
    if (a.i8) {
        plan->aligned = (uintptr_t)a.kv.k.base % 4 == 0 && a.kv.k.stride0 % 4 == 0 && a.kv.k.stride1 % 4 == 0 &&
                        host_pool_aligned(a.kv.k, 1, 4);
        if (a.m <= 0) return cudaSuccess;
        const bool d16 = i8_d16_applies(a.kv, G);
        plan->path = d16 ? 2 : 3;
        plan->chunks = (G + gc - 1) / gc;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &occ, reinterpret_cast<const void *>(d16 ? i8_d16_kernel(gc) : i8_rows_kernel(a.kv.d, gc)), NT, 0);
        if (e != cudaSuccess) return e;
        // one wave of resident blocks, as the row kernel; a block takes 8 windows of 128 positions
        // (d16) or 8 warps x 2 steps of 32 / L rows per iteration
        const int64_t nwin = (a.begin + a.m + I8_WIN - 1) / I8_WIN - a.begin / I8_WIN;
        const int64_t per_it = (int64_t)(NT / 32) * 2 * (32 / i8_lanes(a.kv.d));
        const int64_t need = d16 ? (nwin + NT / 32 - 1) / (NT / 32) : (a.m + per_it - 1) / per_it;
        int64_t blocks = (int64_t)dev->sm_count * (occ < 1 ? 1 : occ) / a.kv.hkv;
        if (blocks > need) blocks = need;
        plan->blocks = (int)(blocks < 1 ? 1 : blocks);
        return cudaSuccess;
    }
    plan->aligned = k_aligned(a.kv);
    if (a.m <= 0) return cudaSuccess;
    const int lanes = rows_lanes(a.kv, G, plan->aligned != 0);
    if (lanes) {
        // One wave of resident blocks over the device, as many per KV head as fit: the grid-stride
        // loop evens out the work, and no block waits for a second wave.
        plan->path = 1;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &occ, reinterpret_cast<const void *>(rows_kernel(a.kv.f16, lanes, gc)), NT, 0);
        if (e != cudaSuccess) return e;
        const int64_t per_block = (int64_t)(NT / 32) * 128 / lanes; // rows a block takes per iteration (U steps a warp)
        int64_t blocks = (int64_t)dev->sm_count * (occ < 1 ? 1 : occ) / a.kv.hkv;
        const int64_t need = (a.m + per_block - 1) / per_block;
        if (blocks > need) blocks = need;
        plan->blocks = (int)(blocks < 1 ? 1 : blocks);
        return cudaSuccess;
    }
    // The tiled kernel: whole tiles per block, about two waves of resident blocks (as score's).
    const TilesInfo k = tiles_kernel(a.kv.f16, a.kv.d, gc);
    plan->chunks = (G + gc - 1) / gc;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, reinterpret_cast<const void *>(k.fn), NT,
                                                      tiles_smem_for(k, dev->stages));
    if (e != cudaSuccess) return e;
    const int64_t tiles = (a.m + k.tile_rows - 1) / k.tile_rows;
    int64_t splits = (2 * (int64_t)dev->sm_count * (occ < 1 ? 1 : occ) + a.kv.hkv - 1) / a.kv.hkv;
    if (splits > tiles) splits = tiles;
    if (splits < 1) splits = 1;
    const int64_t per = (tiles + splits - 1) / splits;
    plan->split_len = per * k.tile_rows;
    plan->blocks = (int)((tiles + per - 1) / per);
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_score_max_launch(const sift_cuda_device *dev, const sift_node *n,
                                                  const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)scratch;
    const ScoreMaxArgs a = score_max_args(n, plan);
    if (a.m <= 0 || plan->blocks <= 0) return cudaSuccess;
    const int G = a.hq / a.kv.hkv, gc = heads_per_chunk(G);
    const dim3 grid((unsigned)plan->blocks, (unsigned)a.kv.hkv);
    if (plan->path == 1)
        return launch(rows_kernel(a.kv.f16, rows_lanes(a.kv, G, true), gc), grid, dim3(NT), 0, st, a);
    if (plan->path == 2) return launch(i8_d16_kernel(gc), grid, dim3(NT), 0, st, a);
    if (plan->path == 3) return launch(i8_rows_kernel(a.kv.d, gc), grid, dim3(NT), 0, st, a);
    const TilesInfo k = tiles_kernel(a.kv.f16, a.kv.d, gc);
    return launch(k.fn, grid, dim3(NT), tiles_smem_for(k, dev->stages), st, a, dev->stages);
}
