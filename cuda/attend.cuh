// The score and attention kernels (docs/kernels.md), as templates: score_attend.cu instantiates
// them (and holds the host side), attend_general.cu the general attention kernels (GENERAL = true:
// rotary keys, SPEC §6, and V rows mapped apart from K's; at most 4 heads per block, so that they
// fit in the registers), so that the two halves compile in parallel. The fast kernels (GENERAL =
// false) take V at K's physical rows: plain K/V, or both paged through the same table.
//
// Both kernels stream K (and V) rows through shared memory in tiles of 16 KiB per tensor with a
// 2- or 3-stage cp.async pipeline, one block per (split of positions, KV head g, chunk of <= 8 of
// g's query heads): each K/V row is read from memory once per KV-head group and used by all the
// group's query heads.
//
// QK (both kernels): a row is spread over D/8 lanes, each holding 8 of its elements and the same
// 8 elements of every query head of the chunk in registers; the partial dots are combined with a
// reduce-scatter across the row's lanes and s = scale * q.k lands in shared memory.
// Attention then keeps, per head, the running max m and sum l of the softmax over the block's
// slice: per tile, new max, rescale factor, p = exp(s - m) (warp h handles head h), and o[h] +=
// p * V with o spread over the block as (up to 4 heads) x (4 elements of D) x (row subset) per
// thread. At the end the row subsets are summed and (o, m, l) of the split is written; a merge
// kernel combines the splits with the log-sum-exp rule. Dense attention is the same kernel with
// the identity index list; causal attention (prefill) too, with T queries per head, query t over
// positions [0, pos0 + t]: grid x covers (token, split), a block's range is cut at its token's end.
// Sparse prefill (causal_attend_sparse) is causal attention over the sequence "the list, then
// [pos0, pos0 + t]" (AttendArgs).
//
// Rows are located through kv_locate / kv_at (common.cuh), the one address map: paged K/V (a page
// table read on the device) and plain K/V alike; absent rows are never read (zero-filled, masked).
//
// Head dimensions: the kernels are built for D = 64 and 128; any other multiple of 8 (up to 128)
// runs the next one up with each row zero-padded in shared memory (q, K and V alike: the padding
// adds nothing to a dot product and its outputs are not written). Global memory is read only for
// the real D elements.
#pragma once

#include "common.cuh"

namespace sift_cuda {

constexpr int TILE_BYTES = 16384; // one tile of K (or of V) in shared memory

// The kernels' parameters (passed by value), built from the node and its plan by the launches.

// score: scores[h][j] = scale * dot(q[h], K[g(h)][begin + j]), j < m.
struct ScoreArgs {
    const float *q;    // [hq][d]
    KvMap kv;
    int hq;
    int64_t begin, m;
    float scale;
    float *scores;     // [hq][m]
    const float *skip; // predicate (sift_graph_skip_if): nothing happens when *skip != 0; NULL: none
    int chunks;        // head chunks per KV head (G split into groups of <= 8)
    int splits;        // blocks along the positions
    int64_t split_len; // positions per block, a multiple of the tile
    int aligned;       // K rows 16-byte aligned: cp.async; else element copies
};

// gather_attend / dense_attend / causal_attend / causal_attend_sparse: query row (token t, head h)
// attends the entries e < n_t of a position sequence: entry e is position idx[list][e] for
// e < list_len, else range0 + e. n_t = n, or for causal attention min(n, tok_base + t + 1).
//   gather: the list (list_len = n);            dense: [0, n) (no list, range0 = 0);
//   causal: [0, pos0 + t] (tok_base = pos0);     sparse: the list, then [pos0, pos0 + t]
//           (list_len = L, n = L + T, tok_base = L, range0 = pos0 - L).
// rope_tab (gather only): the key of entry e is rotated to position e before its dot product
// (SPEC §6): pair p < rope_half turns by (c, s) = rope_tab[e * rope_half + p]; pairs are elements
// (2p, 2p + 1), or (p, p + rope_half) with rope_neox. Rotary keys, and V rows mapped apart from K's
// (kv.v_own_map), run the general kernels (at most 4 query heads per block).
struct AttendArgs {
    const float *q;          // [tokens][hq][d]
    KvMap kv;
    const int32_t *idx;      // [lists][list_len], or NULL
    int idx_lists;           // 1 (shared) or hkv
    int64_t list_len;        // entries per list (0 without one)
    int64_t n;               // entries of the longest sequence
    int64_t range0;          // entry e >= list_len is position range0 + e
    int hq;
    int tokens;              // queries per head: 1, or T for causal attention (may be 0)
    int causal;              // token t attends to the first tok_base + t + 1 entries only
    int64_t tok_base;
    float scale;
    float *out;              // [tokens][hq][d]
    const float2 *rope_tab;  // [>= n][rope_half] (cos, sin), or NULL: keys as stored
    int rope_half, rope_neox; // 0 without rope_tab
    int chunks, splits;
    int64_t split_len;
    int aligned;
};

template <typename T, int D> struct Tile {
    static constexpr int RB = D * (int)sizeof(T); // bytes per row
    static constexpr int TR = TILE_BYTES / RB;    // rows per tile: 32 (f32, 128) .. 128 (f16, 64)
    static constexpr int CPR = RB / 16;           // 16-byte chunks per row
    static constexpr int CPT = TR * CPR / NT;     // chunks each thread copies per tile (4)
    static constexpr int LPR = D / 8;             // QK: lanes per row
    static constexpr int RPW = 32 / LPR;          // QK: rows per warp step
    static constexpr int RPB = NT / LPR;          // QK: rows per block step
    static constexpr int LV = D / 4;              // PV: lanes per row
    static_assert(TR % RPB == 0 && TR % 32 == 0 && (TR * CPR) % NT == 0, "tile shape");
};

template <typename T, int D, int GC> constexpr size_t score_smem(int stages)
{
    return (size_t)stages * TILE_BYTES + (size_t)GC * (Tile<T, D>::TR + 1) * sizeof(float);
}
template <typename T, int D, int GC> constexpr size_t attend_smem(int stages)
{
    using C = Tile<T, D>;
    return (size_t)stages * 2 * TILE_BYTES + (size_t)C::TR * GC * sizeof(float) + 8 * sizeof(float) +
           (size_t)stages * C::TR * sizeof(int);
}

// Rotary keys (SPEC §6, AttendArgs.rope_*): which pairs turn, and by which angles.
struct RopeArgs {
    const float2 *tab; // [entries][half] (cos, sin) of entry e's angles
    int half, neox;
    int64_t last;      // the last entry with a table row (rows past a block's end are clamped to it)
};

// The element of a row that QK slot i of lane r holds. Plain kernels: qk_elem (16-byte loads).
// ROPE (the rotary layout): pair p = 4r + i/2 sits in slots (i & ~1, i | 1) of lane r, i.e.
// elements (2p, 2p + 1), or (p, p + half) in neox mode for p < half; every lane rotates its own
// pairs, no shuffles. q is loaded in the same layout (a dot product does not care how its terms
// are spread over lanes). With half = 0 it is the identity layout and nothing turns.
template <typename T, int D, bool ROPE> __device__ __forceinline__ int slot_elem(int r, int i, int half, int neox)
{
    if constexpr (!ROPE) {
        (void)half, (void)neox;
        return qk_elem<T, D>(r, i);
    } else {
        const int p = 4 * r + (i >> 1);
        if (neox && p < half) return (i & 1) ? p + half : p;
        return 8 * r + i;
    }
}

// q rows hbase .. hbase+GC-1 (those < hcount) in the QK lane layout; absent heads and the padding
// past the real row length d are 0. Staged through `buf` (GC * D floats of shared memory that
// nothing else uses yet): coalesced scalar loads (q may be a view at any 4-byte offset), then each
// lane's elements at fixed offsets. Every thread of the block calls it.
template <typename T, int D, int GC, bool ROPE>
__device__ __forceinline__ void load_q(const float *q, int d, int hbase, int hcount, int r, float (&qr)[GC][8],
                                       float *buf, int half, int neox)
{
    for (int e = (int)threadIdx.x; e < GC * D; e += NT) {
        const int h = e / D, c = e % D;
        buf[e] = h < hcount && c < d ? __ldg(q + (int64_t)(hbase + h) * d + c) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < GC; h++)
#pragma unroll
        for (int i = 0; i < 8; i++) qr[h][i] = buf[h * D + slot_elem<T, D, ROPE>(r, i, half, neox)];
    __syncthreads(); // buf is reused
}

// The logical positions behind the rows this thread copies in one tile: entries tb .. tb+TR-1 of
// the block's sequence; entry e is position idx[e] for e < list_len, else range0 + e; -1 past `end`.
// Loaded one tile ahead of use, so that the index loads do not stall the pipeline (positions are
// located, i.e. bounds-checked and paged, when the copies are issued).
template <typename T, int D>
__device__ __forceinline__ void load_positions(int32_t (&pos)[Tile<T, D>::CPT], const int32_t *idx, int64_t list_len,
                                               int64_t range0, int64_t tb, int64_t end)
{
    using C = Tile<T, D>;
#pragma unroll
    for (int i = 0; i < C::CPT; i++) {
        const int64_t e = tb + ((int)threadIdx.x + i * NT) / C::CPR;
        int32_t v = -1;
        if (e < end) v = e < list_len ? __ldg(idx + e) : (int32_t)(range0 + e); // positions < ncap <= INT32_MAX
        pos[i] = v;
    }
}

// Enqueues the copies of one tile of K (and V) rows of KV head g into ks (vs), the rows at the
// positions from load_positions. Rows past the end, outside [0, ncap) or without a page are
// zero-filled (never read) and flagged 0 in spos (if given); a V row absent where K's is present
// (V paged differently) is zero-filled, as the CPU reference reads it. Chunks past the real row
// length (kv.d elements, a whole number of chunks) of a row padded to D are never written:
// zero_padding zeroed them in K once, and in V they only reach outputs that are not written. Each
// thread copies CPT chunks of 16 bytes; consecutive threads, consecutive chunks of a row (the same
// column in every tile).
template <typename T, int D, bool WITH_V, bool OWN_V>
__device__ __forceinline__ void issue_tile(unsigned char *ks, unsigned char *vs, int *spos, const KvMap &kv, int g,
                                           const int32_t (&pos)[Tile<T, D>::CPT], bool aligned)
{
    using C = Tile<T, D>;
    constexpr int E = 16 / (int)sizeof(T);
    static_assert(NT % C::CPR == 0, "a thread copies the same column of every row it copies");
    const int col = (int)threadIdx.x % C::CPR;
    const int row0 = (int)threadIdx.x / C::CPR;
    if (col * E >= kv.d) return; // padding: not copied (column 0, which flags the rows, never is)
#pragma unroll
    for (int i = 0; i < C::CPT; i++) {
        const int row = row0 + i * (NT / C::CPR);
        const int32_t kr = kv_locate(kv.k, kv.ncap, pos[i]);
        const bool ok = kr >= 0;
        const T *ksrc = kv_at<const T>(kv.k, g, ok ? kr : 0) + col * E;
        unsigned char *kd = ks + row * C::RB + col * 16;
        if (aligned) cp_async16(kd, ksrc, ok);
        else copy16_elements(kd, ksrc, ok);
        if constexpr (WITH_V) {
            int32_t vr = kr; // V at K's rows, unless (general kernels only) V has a map of its own
            if constexpr (OWN_V)
                if (kv.v_own_map) vr = kv_locate(kv.v, kv.ncap, pos[i]);
            const bool vok = ok && vr >= 0;
            const T *vsrc = kv_at<const T>(kv.v, g, vok ? vr : 0) + col * E;
            unsigned char *vd = vs + row * C::RB + col * 16;
            if (aligned) cp_async16(vd, vsrc, vok);
            else copy16_elements(vd, vsrc, vok);
        }
        if (spos && col == 0) spos[row] = ok ? 1 : 0;
    }
}

// Zeroes the padding columns (elements d .. D-1) of every row of the K tiles of all stages, once
// before the pipeline starts: issue_tile never writes them, so they stay 0 (and q is 0 there too).
template <typename T, int D>
__device__ __forceinline__ void zero_padding(unsigned char *smem, int stages, size_t stage_stride, int d)
{
    using C = Tile<T, D>;
    constexpr int E = 16 / (int)sizeof(T);
    const int c0 = d / E; // first padding chunk of a row
    if (c0 >= C::CPR) return;
    const int per_row = C::CPR - c0, total = stages * C::TR * per_row;
    for (int i = (int)threadIdx.x; i < total; i += NT) {
        const int s = i / (C::TR * per_row), r = i % (C::TR * per_row);
        *reinterpret_cast<uint4 *>(smem + (size_t)s * stage_stride + (r / per_row) * C::RB + (c0 + r % per_row) * 16) =
            make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ void wait_stage(int stages)
{
    // Groups are committed one per tile (empty ones past the end); tile t's group is complete
    // when at most stages - 2 newer groups are pending.
    if (stages >= 3) cp_async_wait<1>();
    else cp_async_wait<0>();
}

// s = scale * q[h] . K[row] for every row of the tile in Ks and every head of the chunk:
// S[row * s_row + h * s_head]. ROPE: the key of tile row `row` (entry rank0 + row) is first
// rotated to position rank0 + row, in f32 with the CPU reference's operations (cpu_rope_row).
template <typename T, int D, int GC, int UNROLL, bool ROPE>
__device__ __forceinline__ void qk_tile(const T *Ks, const float (&qr)[GC][8], float scale, float *S, int s_row,
                                        int s_head, const RopeArgs &rope, int64_t rank0)
{
    using C = Tile<T, D>;
    constexpr int F = C::LPR / GC; // lanes holding the same head after the reduce-scatter
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int r = lane % C::LPR;
    const int rg = warp * C::RPW + lane / C::LPR;
#pragma unroll UNROLL
    for (int i = 0; i < C::TR / C::RPB; i++) {
        const int row = rg + i * C::RPB;
        float x[8];
        if constexpr (ROPE) {
            const int64_t rank = min(rank0 + row, rope.last); // rows past the end are masked later
            const float2 *cs = rope.tab + rank * rope.half;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int p = 4 * r + j;
                const bool turn = p < rope.half;
                const int ea = rope.neox && turn ? p : 2 * p, eb = rope.neox && turn ? p + rope.half : 2 * p + 1;
                float xa = to_float(Ks[row * D + ea]), xb = to_float(Ks[row * D + eb]);
                if (turn) {
                    const float2 t = __ldg(cs + p);
                    const float na = __fsub_rn(__fmul_rn(xa, t.x), __fmul_rn(xb, t.y));
                    const float nb = __fadd_rn(__fmul_rn(xa, t.y), __fmul_rn(xb, t.x));
                    xa = na;
                    xb = nb;
                }
                x[2 * j] = xa;
                x[2 * j + 1] = xb;
            }
        } else {
            (void)rope, (void)rank0;
            load_qk<D>(Ks + row * D, r, x);
        }
        float acc[GC];
        head_dots(qr, x, acc);
        ReduceScatter<GC, C::LPR / 2>::run(acc, lane);
        if (lane % F == 0) S[row * s_row + (r / F) * s_head] = acc[0] * scale;
    }
}

// ---- score ------------------------------------------------------------------------------------

template <typename T, int D, int GC>
__global__ void __launch_bounds__(NT, 2) score_kernel(const ScoreArgs a, const int stages)
{
    grid_dep_enter();
    if (skipped(a.skip)) return;
    using C = Tile<T, D>;
    constexpr int SST = C::TR + 1; // S is [GC][TR + 1]: conflict-free column writes and row reads
    SIFT_DYNAMIC_SMEM(smem);
    float *S = reinterpret_cast<float *>(smem + (size_t)stages * TILE_BYTES);

    const int tid = (int)threadIdx.x, lane = tid & 31;
    const int g = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int hbase = g * G + (int)blockIdx.z * GC, hcount = min(GC, G - (int)blockIdx.z * GC);
    const int64_t beg = (int64_t)blockIdx.x * a.split_len, end = min(a.m, beg + a.split_len);
    const int ntiles = (int)((end - beg + C::TR - 1) / C::TR);
    const bool aligned = a.aligned != 0;
    const RopeArgs no_rope = {nullptr, 0, 0, 0};

    float qr[GC][8];
    load_q<T, D, GC, false>(a.q, a.kv.d, hbase, hcount, lane % C::LPR, qr, reinterpret_cast<float *>(smem), 0, 0);
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
        qk_tile<T, D, GC, C::TR / C::RPB, false>(Ks, qr, a.scale, S, 1, SST, no_rope, 0);
        __syncthreads();
        const int64_t tb = beg + (int64_t)t * C::TR;
        for (int e = tid; e < GC * C::TR; e += NT) {
            const int h = e / C::TR, row = e % C::TR;
            if (h < hcount && tb + row < end) a.scores[(int64_t)(hbase + h) * a.m + tb + row] = S[h * SST + row];
        }
    }
    cp_async_wait<0>();
}

// ---- attention ----------------------------------------------------------------------------------

// Groups of 8 heads need about 150 registers since the kernels read K/V from either pool of an
// offloaded cache: one block per multiprocessor for them (at 2 blocks, 128 registers, they spilled).
template <typename T, int D, int GC, bool GENERAL>
__global__ void __launch_bounds__(NT, GC > 4 ? 1 : 2) attend_kernel(const AttendArgs a, const int stages, float *part_o,
                                                       float2 *part_ml)
{
    grid_dep_enter();
    using C = Tile<T, D>;
    SIFT_DYNAMIC_SMEM(smem);
    float *S = reinterpret_cast<float *>(smem + (size_t)stages * 2 * TILE_BYTES); // [TR][GC]: s, then p
    float *CORR = S + C::TR * GC;                                                 // [GC] rescale of o
    int *SPOS = reinterpret_cast<int *>(CORR + 8);                                // [stages][TR] row valid

    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int hbase = g * G + (int)blockIdx.z * GC, hcount = min(GC, G - (int)blockIdx.z * GC);
    // blockIdx.x = token * splits + split; one token except for causal attention, whose token t
    // attends to the first tok_base + t + 1 entries
    const int tok = (int)blockIdx.x / a.splits;
    const int64_t n_tok = a.causal ? min(a.n, a.tok_base + tok + 1) : a.n;
    const int64_t beg = (int64_t)((int)blockIdx.x - tok * a.splits) * a.split_len, end = min(n_tok, beg + a.split_len);
    const int ntiles = end > beg ? (int)((end - beg + C::TR - 1) / C::TR) : 0;
    const int32_t *idx = a.idx ? a.idx + (a.idx_lists == 1 ? (int64_t)0 : (int64_t)g * a.list_len) : nullptr;
    const bool aligned = a.aligned != 0;
    const RopeArgs rope = {a.rope_tab, a.rope_half, a.rope_neox, a.n - 1};

    float qr[GC][8];
    load_q<T, D, GC, GENERAL>(a.q + (int64_t)tok * a.hq * a.kv.d, a.kv.d, hbase, hcount, lane % C::LPR, qr,
                           reinterpret_cast<float *>(smem), a.rope_half, a.rope_neox);
    zero_padding<T, D>(smem, stages, 2 * TILE_BYTES, a.kv.d);
    // PV: thread owns heads hp0 .. hp0+HP-1 and elements lv*4 .. lv*4+3 of rows sub + i*NSP.
    constexpr int HP = GC < 4 ? GC : 4;         // heads per thread
    constexpr int HG = GC / HP;                 // head groups (the block is split between them)
    constexpr int NSP = NT / HG / C::LV;        // row subsets per head group
    static_assert(C::TR % NSP == 0, "PV rows");
    static_assert((size_t)NSP * GC * D * sizeof(float) <= 2 * 2 * TILE_BYTES, "the final sum fits in 2 stages");
    const int hp0 = (tid / (NT / HG)) * HP, t2 = tid % (NT / HG);
    const int lv = t2 % C::LV, sub = t2 / C::LV;
    float o[HP][4];
#pragma unroll
    for (int h = 0; h < HP; h++)
#pragma unroll
        for (int j = 0; j < 4; j++) o[h][j] = 0.0f;
    float m_run = neg_inf(), l_run = 0.0f; // of head `warp`, in warps < GC

    int32_t pos[C::CPT];
    for (int s = 0; s < stages - 1; s++) {
        if (s < ntiles) {
            unsigned char *ks = smem + (size_t)s * 2 * TILE_BYTES;
            load_positions<T, D>(pos, idx, a.list_len, a.range0, beg + (int64_t)s * C::TR, end);
            issue_tile<T, D, true, GENERAL>(ks, ks + TILE_BYTES, SPOS + s * C::TR, a.kv, g, pos, aligned);
        }
        cp_async_commit();
    }
    if (stages - 1 < ntiles) load_positions<T, D>(pos, idx, a.list_len, a.range0, beg + (int64_t)(stages - 1) * C::TR, end);
    for (int t = 0; t < ntiles; t++) {
        wait_stage(stages);
        __syncthreads(); // tile t visible; everyone done with tile t-1, S/p and CORR
        const int nt = t + stages - 1;
        if (nt < ntiles) {
            const int ns = nt % stages;
            unsigned char *ks = smem + (size_t)ns * 2 * TILE_BYTES;
            issue_tile<T, D, true, GENERAL>(ks, ks + TILE_BYTES, SPOS + ns * C::TR, a.kv, g, pos, aligned);
            if (nt + 1 < ntiles) load_positions<T, D>(pos, idx, a.list_len, a.range0, beg + (int64_t)(nt + 1) * C::TR, end);
        }
        cp_async_commit();

        const int st = t % stages;
        const T *Ks = reinterpret_cast<const T *>(smem + (size_t)st * 2 * TILE_BYTES);
        const T *Vs = reinterpret_cast<const T *>(smem + (size_t)st * 2 * TILE_BYTES + TILE_BYTES);
        // (general kernels: the rotary layout, rope_half = 0 when no key turns; rows one at a time,
        // the rotation's table loads and pairs would not fit in the registers otherwise)
        qk_tile<T, D, GC, GENERAL ? 1 : C::TR / C::RPB, GENERAL>(Ks, qr, a.scale, S, GC, 1, rope, beg + (int64_t)t * C::TR);
        __syncthreads();

        // Online softmax over the tile, head `warp`: p = exp(s - m_new), l and m updated.
        if (warp < GC) {
            constexpr int PL = C::TR / 32;
            const int *ok = SPOS + st * C::TR;
            float sv[PL];
            float mt = neg_inf();
#pragma unroll
            for (int i = 0; i < PL; i++) {
                const int row = lane + 32 * i;
                sv[i] = ok[row] ? S[row * GC + warp] : neg_inf();
                mt = fmaxf(mt, sv[i]);
            }
            mt = warp_max(mt);
            const float m_new = fmaxf(m_run, mt);
            float corr = 1.0f, ls = 0.0f;
            if (m_new == neg_inf()) { // nothing valid yet: o and l stay 0
#pragma unroll
                for (int i = 0; i < PL; i++) sv[i] = 0.0f;
            } else {
                corr = expf(m_run - m_new); // 0 when m_run is -inf
#pragma unroll
                for (int i = 0; i < PL; i++) {
                    sv[i] = expf(sv[i] - m_new); // 0 for masked rows
                    ls += sv[i];
                }
            }
            ls = warp_sum(ls);
            l_run = l_run * corr + ls;
            m_run = m_new;
#pragma unroll
            for (int i = 0; i < PL; i++) S[(lane + 32 * i) * GC + warp] = sv[i];
            if (lane == 0) CORR[warp] = corr;
        }
        __syncthreads();

        // o = o * corr + sum over the tile's rows of this subset of p * V.
#pragma unroll
        for (int h = 0; h < HP; h++) {
            const float c = CORR[hp0 + h];
#pragma unroll
            for (int j = 0; j < 4; j++) o[h][j] *= c;
        }
#pragma unroll 2
        for (int i = 0; i < C::TR / NSP; i++) {
            const int row = sub + i * NSP;
            float v[4];
            load_pv(Vs + row * D + lv * 4, v);
            float ph[HP];
            if constexpr (HP == 4) {
                const float4 p4 = *reinterpret_cast<const float4 *>(S + row * GC + hp0);
                ph[0] = p4.x, ph[1] = p4.y, ph[2] = p4.z, ph[3] = p4.w;
            } else {
#pragma unroll
                for (int h = 0; h < HP; h++) ph[h] = S[row * GC + hp0 + h];
            }
#pragma unroll
            for (int h = 0; h < HP; h++)
#pragma unroll
                for (int j = 0; j < 4; j++) o[h][j] = fmaf(ph[h], v[j], o[h][j]);
        }
    }

    // Sum the row subsets' o in shared memory (the tiles are free now) and write the split's partial.
    cp_async_wait<0>();
    __syncthreads();
    float *RED = reinterpret_cast<float *>(smem); // [NSP][GC][D]
#pragma unroll
    for (int h = 0; h < HP; h++)
#pragma unroll
        for (int j = 0; j < 4; j++) RED[(sub * GC + hp0 + h) * D + lv * 4 + j] = o[h][j];
    __syncthreads();
    // partials of query row (token, head), [split][tokens * hq]
    const int d = a.kv.d, tk = (int)blockIdx.x / a.splits;
    const int64_t prow = ((int64_t)((int)blockIdx.x - tk * a.splits) * a.tokens + tk) * a.hq + hbase;
    for (int e = tid; e < GC * D; e += NT) {
        const int h = e / D, c = e % D;
        float sum = 0.0f;
#pragma unroll 4
        for (int s = 0; s < NSP; s++) sum += RED[(s * GC + h) * D + c];
        if (h < hcount && c < d) part_o[(prow + h) * d + c] = sum;
    }
    if (warp < hcount && lane == 0) part_ml[prow + warp] = make_float2(m_run, l_run);
}

// ---- host side shared by score_attend.cu and attend_rope.cu ---------------------------------------

using ScoreKernel = void (*)(ScoreArgs, int);
using AttendKernel = void (*)(AttendArgs, int, float *, float2 *);

struct KernelInfo {
    ScoreKernel score;   // one of these two
    AttendKernel attend;
    const void *fn;      // the same, for the runtime's attribute and occupancy calls
    size_t smem2, smem3; // dynamic shared memory with 2 and 3 stages
    int tile_rows;
};

template <typename T, int D, int GC> KernelInfo score_info()
{
    const ScoreKernel k = &score_kernel<T, D, GC>;
    return {k, nullptr, reinterpret_cast<const void *>(k), score_smem<T, D, GC>(2), score_smem<T, D, GC>(3),
            Tile<T, D>::TR};
}
template <typename T, int D, int GC, bool GENERAL> KernelInfo attend_info()
{
    const AttendKernel k = &attend_kernel<T, D, GC, GENERAL>;
    return {nullptr, k, reinterpret_cast<const void *>(k), attend_smem<T, D, GC>(2), attend_smem<T, D, GC>(3),
            Tile<T, D>::TR};
}

// The general attention kernels (attend_general.cu), as kernel_info picks the others.
KernelInfo general_kernel_info(int f16, int d, int gc);

// The tensor-core decode kernels (attend_mma.cu): one warp per block, D = 64 or 128, f16 K/V,
// at most 4 query heads per KV head, one query per head, V at K's rows.
constexpr int MMA_HEADS = 4; // query heads per block (B's 8 columns: 4 heads x {hi, lo})
using AttendMmaKernel = void (*)(AttendArgs, float *, float2 *);
using ScoreMmaKernel = void (*)(ScoreArgs);
template <typename K> struct MmaKernelInfo {
    K kernel;
    const void *fn;
    int threads;   // per block
    size_t smem;   // dynamic shared memory per block
    int tile_rows; // keys per stage of all the block's warps: splits are multiples of it
};
MmaKernelInfo<AttendMmaKernel> mma_kernel_info(int d);
MmaKernelInfo<ScoreMmaKernel> score_mma_kernel_info(int d);

} // namespace sift_cuda
