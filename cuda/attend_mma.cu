// Decode attention and scoring on the tensor cores: dense_attend and gather_attend of one query per head with
// f16 K/V at their own physical rows (plain, or K and V paged through one table), D = 64 or 128,
// at most 4 query heads per KV head, 16-byte aligned rows. Everything else runs attend_kernel
// (attend.cuh); the meaning is the same (AttendArgs). score_mma_kernel is its QK alone, for score
// (ScoreArgs) under the same conditions.
//
// Why: attend_kernel does QK and PV with f32 FMAs, 2 per byte of K/V read for a group of 4 heads,
// and its tiles pass through 4 block barriers; it streams at about 60% of the bandwidth. Here the
// FMAs go to the tensor cores and every warp works alone.
//
// Exactness: the tensor cores multiply f16 by f16 into f32. K and V are f16 already; q and p are
// f32, so each is split into two f16, x = hi + lo with hi = f16(x), lo = f16(x - hi), which carries
// 22 of f32's 24 bits; hi and lo are the 8 columns of one B fragment (4 heads x {hi, lo}), so the
// split costs no extra instruction, and the two halves of each score are added after the mma.
// q is first scaled by a power of two per head (exact) so that its largest element is near 1,
// far from f16's range limits.
//
// A block of 4 warps takes one split of the positions of one KV head, each warp a quarter of it,
// alone (no block barrier until the end, where the block combines its warps' results). A warp
// streams its positions through a 3-stage cp.async ring of TK keys (K and V rows,
// 4 KiB each; chunks XOR-swizzled by row so that ldmatrix reads are conflict-free). Per stage:
//   QK: S^T [TK keys][8] = K [TK][D] x Q^T [D][8] (A = K rows by ldmatrix, B = q in registers);
//       s = hi + lo column pairs (a shuffle), in log2 units (q carries scale * log2 e);
//   online softmax per head: the running max over the warp's keys (shuffles over the 8 key
//       rows of a fragment), p = exp2(s - m), the running sum per lane;
//   PV: O^T [D][8] += V^T [D][TK] x P^T [TK][8] (A = V rows by ldmatrix.trans, B = p split in hi
//       and lo, brought from the QK layout to the B layout through 4 x TK floats of shared memory).
// At the end the hi and lo columns of O are added, the 4 warps' (o, m, l) are combined in shared
// memory, and the split's go to the partials that attend_merge combines (m converted to
// natural-log units). score_mma_kernel is one warp per block: it has nothing to combine.
#include "attend.cuh"

namespace sift_cuda {

constexpr int MMA_STAGES = 3;
constexpr int MMA_WARPS = 4; // attention: warps per block, each on its own part of the block's split

// A warp's stages: TK keys of K and V rows (attention, WITH_V: 8 KiB), or of K alone (score:
// 4 KiB). Score's warps are blocks of their own, as many an SM as shared memory holds: at 4 KiB a
// stage 19, at 8 KiB 9. On the H200 the smaller stages took scoring 1M positions from 918 to
// 562 µs and 128K from 86 to 80 (sift bench-attn, docs/benchmarks.md).
template <int D, bool WITH_V> struct MmaTile {
    static constexpr int TK = 2048 / D;         // keys per stage: 16 (D = 128) or 32 (D = 64)
    static constexpr int RB = D * 2;            // bytes per row
    static constexpr int CPR = RB / 16;         // 16-byte chunks per row
    static constexpr int RPI = 32 / CPR;        // rows per warp copy instruction
    static constexpr int CPL = TK / RPI;        // copies per lane per stage, of K (and of V) each
    static constexpr int MT = TK / 16;          // QK m-tiles (= PV k-steps) per stage
    static constexpr int KS = D / 16;           // QK k-steps (= PV m-tiles)
    static constexpr int STAGE = (WITH_V ? 2 : 1) * TK * RB; // K (then V)
    static constexpr int PST = TK + 4;          // attention: P row stride in floats (banks of 2 heads apart)
    // a warp's shared memory (attention: the stages, P and MASK), rounded up so that the next
    // warp's stages stay 128-byte aligned
    static constexpr size_t SMEM =
        WITH_V ? ((size_t)MMA_STAGES * STAGE + (size_t)MMA_HEADS * PST * 4 + MMA_STAGES * 4 + 127) & ~(size_t)127
               : (size_t)MMA_STAGES * STAGE;
    static_assert(CPL * RPI == TK && MT >= 1, "tile shape");
};

// Byte offset of chunk ch of row r in a stage's K (or V) tile: chunks XOR-swizzled by row, so the
// 8 rows of an ldmatrix matrix, read at one chunk column, fall in 8 different bank groups.
template <int D> __device__ __forceinline__ int tile_off(int r, int ch)
{
    return r * D * 2 + ((ch ^ (r & 7)) << 4);
}

// One warp's cp.async ring of MMA_STAGES stages, one commit group per stage (empty past the
// end): ring_start enqueues the first MMA_STAGES - 1 stages; ring_next(t) waits for stage t and
// enqueues stage t + MMA_STAGES - 1 into the buffer stage t - 1 used.
template <typename Issue> __device__ __forceinline__ void ring_start(int ntiles, Issue &issue)
{
#pragma unroll
    for (int s = 0; s < MMA_STAGES - 1; s++) {
        if (s < ntiles) issue(s);
        cp_async_commit();
    }
}
template <typename Issue> __device__ __forceinline__ void ring_next(int t, int ntiles, Issue &issue)
{
    cp_async_wait<MMA_STAGES - 2>();
    __syncwarp(); // stage t landed for all lanes; all are done with stage t - 1 (and what it fed)
    if (t + MMA_STAGES - 1 < ntiles) issue(t + MMA_STAGES - 1);
    cp_async_commit();
}

// q as B fragments, for heads hbase .. hbase + hcount - 1 (hcount <= 4; the others 0), each
// element times `factor`: column n = g is head g & 3, part g >> 2 (0: hi, 1: lo); k-step kk holds
// elements 16 kk + 2c, +1 (qb[kk][0]) and 16 kk + 2c + 8, +9 (qb[kk][1]). Each head is scaled by
// 2^-e (exact) so that its largest element is below 1; returns e of this lane's head (column g).
template <int D>
__device__ __forceinline__ int load_q_fragments(const float *q, int d, int hbase, int hcount, float factor,
                                                unsigned (&qb)[D / 16][2])
{
    const int lane = (int)threadIdx.x & 31, g = lane >> 2, c = lane & 3, hn = g & 3, part = g >> 2;
    float qv[D / 16][4];
    float amax = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int e = 16 * kk + 2 * c + (i & 1) + (i >> 1) * 8;
            const float x = hn < hcount ? __ldg(q + (int64_t)(hbase + hn) * d + e) * factor : 0.0f;
            qv[kk][i] = x;
            amax = fmaxf(amax, fabsf(x));
        }
    amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, 1)); // the 4 lanes of a column hold its D elements
    amax = fmaxf(amax, __shfl_xor_sync(FULL, amax, 2));
    int qexp = 0;
    if (amax > 0.0f) (void)frexpf(amax, &qexp); // amax = f * 2^qexp, f in [0.5, 1)
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        float y[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float x = ldexpf(qv[kk][i], -qexp); // exact
            const float hi = __half2float(__float2half_rn(x));
            y[i] = part ? x - hi : x;
        }
        qb[kk][0] = pack_half2(y[0], y[1]);
        qb[kk][1] = pack_half2(y[2], y[3]);
    }
    return qexp;
}

// S^T fragment of 16 keys (rows r0 .. r0 + 15 of a K tile) x 8 columns: K by ldmatrix, q from
// qb; then hi + lo: acc[0], acc[1] = keys r0 + g, heads hA, hA + 1 (hA = 2 (c & 1)), acc[2], acc[3]
// = keys r0 + g + 8, in units of the q fragments (times 2^qexp of the head).
template <int D>
__device__ __forceinline__ void qk_fragment(const unsigned char *ks, int r0, const unsigned (&qb)[D / 16][2], float (&acc)[4])
{
    const int lane = (int)threadIdx.x & 31;
    // two accumulators (even and odd k-steps): two chains of dependent mma, each half as long
    float odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    const int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        unsigned af[4];
        ldmatrix_x4(af, ks + tile_off<D>(r, 2 * kk + (lane >> 4)));
        if (kk & 1) mma_16816(odd, af, qb[kk]);
        else mma_16816(acc, af, qb[kk]);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        acc[i] += odd[i];
        acc[i] += __shfl_xor_sync(FULL, acc[i], 2); // hi + lo
    }
}

template <int D>
__global__ void __launch_bounds__(32 * MMA_WARPS) attend_mma_kernel(const AttendArgs a, float *part_o, float2 *part_ml)
{
    grid_dep_enter();
    using C = MmaTile<D, true>;
    SIFT_DYNAMIC_SMEM(smem_block);
    const int warp = (int)threadIdx.x >> 5;
    unsigned char *smem = smem_block + (size_t)warp * C::SMEM; // this warp's stages, P and MASK
    float *P = reinterpret_cast<float *>(smem + (size_t)MMA_STAGES * C::STAGE); // [4][PST]: p per head and key
    unsigned *MASK = reinterpret_cast<unsigned *>(P + MMA_HEADS * C::PST);    // [stages]: keys present

    const int lane = (int)threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int kvh = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int hbase = kvh * G, hcount = G; // G <= 4 (the plan)
    // the block's split, a multiple of MMA_WARPS tiles long, in equal parts for its warps
    const int64_t sub = a.split_len / MMA_WARPS;
    const int64_t beg = (int64_t)blockIdx.x * a.split_len + warp * sub;
    const int64_t end = min(min(a.n, (int64_t)(blockIdx.x + 1) * a.split_len), beg + sub);
    const int ntiles = end > beg ? (int)((end - beg + C::TK - 1) / C::TK) : 0;
    const int32_t *idx = a.idx ? a.idx + (a.idx_lists == 1 ? (int64_t)0 : (int64_t)kvh * a.list_len) : nullptr;

    const int hn = g & 3, part = g >> 2;
    unsigned qb[C::KS][2];
    const int qexp = load_q_fragments<D>(a.q, a.kv.d, hbase, hcount, a.scale * 1.44269504088896341f, qb);
    // The D fragments of QK: lane c holds columns 2c, 2c+1: heads hA = 2 (c & 1), hA + 1, part c >> 1.
    const int hA = 2 * (c & 1);
    const float scA = ldexpf(1.0f, __shfl_sync(FULL, qexp, 4 * hA)), scB = ldexpf(1.0f, __shfl_sync(FULL, qexp, 4 * (hA + 1)));

    // Enqueues stage `tile`'s K and V rows (entries tb .. tb + TK - 1 of the walk); absent ones are
    // zero-filled and left out of MASK.
    auto issue = [&](int tile) {
        unsigned char *ks = smem + (size_t)(tile % MMA_STAGES) * C::STAGE, *vs = ks + C::TK * C::RB;
        const int64_t tb = beg + (int64_t)tile * C::TK;
        const int ch = lane % C::CPR;
        // entries past the list are consecutive positions: one lookup a tile where they share a page
        const int count = (int)min((int64_t)C::TK, end - tb);
        const int32_t run = idx && tb < a.list_len ? -2 : locate_run(a.kv.k, a.kv.ncap, a.range0 + tb, count);
        if (run != -2) {
            const bool ok = run >= 0;
            const __half *kp = kv_at<const __half>(a.kv.k, kvh, ok ? run : 0) + ch * 8;
            const __half *vp = kv_at<const __half>(a.kv.v, kvh, ok ? run : 0) + ch * 8;
#pragma unroll
            for (int i = 0; i < C::CPL; i++) {
                const int r = lane / C::CPR + C::RPI * i;
                const int64_t at = (int64_t)(r < count ? r : 0) * a.kv.k.stride1; // a row of the run even where r is past it
                cp_async16(ks + tile_off<D>(r, ch), kp + at, ok && r < count);
                cp_async16(vs + tile_off<D>(r, ch), vp + at, ok && r < count);
            }
            if (lane == 0) MASK[tile % MMA_STAGES] = ok ? (count >= 32 ? ~0u : (1u << count) - 1u) : 0u;
            return;
        }
        unsigned mask = 0;
#pragma unroll
        for (int i = 0; i < C::CPL; i++) {
            const int r = lane / C::CPR + C::RPI * i;
            const int64_t e = tb + r;
            int32_t pos = -1;
            if (e < end) pos = idx && e < a.list_len ? __ldg(idx + e) : (int32_t)(a.range0 + e);
            const int32_t pr = kv_locate(a.kv.k, a.kv.ncap, pos);
            const bool ok = pr >= 0;
            const __half *kp = kv_at<const __half>(a.kv.k, kvh, ok ? pr : 0) + ch * 8;
            const __half *vp = kv_at<const __half>(a.kv.v, kvh, ok ? pr : 0) + ch * 8;
            cp_async16(ks + tile_off<D>(r, ch), kp, ok);
            cp_async16(vs + tile_off<D>(r, ch), vp, ok);
            const unsigned b = __ballot_sync(FULL, ok);
#pragma unroll
            for (int j = 0; j < C::RPI; j++) mask |= ((b >> (j * C::CPR)) & 1u) << (j + C::RPI * i);
        }
        if (lane == 0) MASK[tile % MMA_STAGES] = mask;
    };

    float o[C::KS][4]; // O^T fragments: d rows 16 mt + g (o[mt][0..1]) and + 8 (o[mt][2..3]), heads hA, hA + 1
#pragma unroll
    for (int mt = 0; mt < C::KS; mt++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[mt][i] = 0.0f;
    float mA = neg_inf(), mB = neg_inf(), lA = 0.0f, lB = 0.0f; // running max (warp-wide), sums (this lane's keys)

    ring_start(ntiles, issue);
    for (int t = 0; t < ntiles; t++) {
        ring_next(t, ntiles, issue); // (and all are done with P)
        const unsigned char *ks = smem + (size_t)(t % MMA_STAGES) * C::STAGE, *vs = ks + C::TK * C::RB;
        const unsigned mask = MASK[t % MMA_STAGES];

        // QK: s[m] = scores of keys 16 m + g ([0], [1]: heads hA, hA + 1) and 16 m + g + 8 ([2], [3])
        float s[C::MT][4];
#pragma unroll
        for (int m = 0; m < C::MT; m++) {
            float acc[4];
            qk_fragment<D>(ks, 16 * m, qb, acc);
            const bool k0 = (mask >> (16 * m + g)) & 1u, k1 = (mask >> (16 * m + g + 8)) & 1u;
            s[m][0] = k0 ? acc[0] * scA : neg_inf();
            s[m][1] = k0 ? acc[1] * scB : neg_inf();
            s[m][2] = k1 ? acc[2] * scA : neg_inf();
            s[m][3] = k1 ? acc[3] * scB : neg_inf();
        }
        // online softmax, per head: the tile's max over all its keys (the 8 rows g of each fragment)
        float tA = neg_inf(), tB = neg_inf();
#pragma unroll
        for (int m = 0; m < C::MT; m++) {
            tA = fmaxf(tA, fmaxf(s[m][0], s[m][2]));
            tB = fmaxf(tB, fmaxf(s[m][1], s[m][3]));
        }
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
            tA = fmaxf(tA, __shfl_xor_sync(FULL, tA, off));
            tB = fmaxf(tB, __shfl_xor_sync(FULL, tB, off));
        }
        const float nA = fmaxf(mA, tA), nB = fmaxf(mB, tB);
        // nothing present yet for a head: its o and l stay 0 (corr 1, p 0)
        const float cA = nA == neg_inf() ? 1.0f : exp2f(mA - nA), cB = nB == neg_inf() ? 1.0f : exp2f(mB - nB);
        mA = nA, mB = nB;
        float pA = 0.0f, pB = 0.0f;
#pragma unroll
        for (int m = 0; m < C::MT; m++) {
            s[m][0] = nA == neg_inf() ? 0.0f : exp2f(s[m][0] - nA); // 0 for absent keys
            s[m][2] = nA == neg_inf() ? 0.0f : exp2f(s[m][2] - nA);
            s[m][1] = nB == neg_inf() ? 0.0f : exp2f(s[m][1] - nB);
            s[m][3] = nB == neg_inf() ? 0.0f : exp2f(s[m][3] - nB);
            pA += s[m][0] + s[m][2];
            pB += s[m][1] + s[m][3];
        }
        lA = lA * cA + pA;
        lB = lB * cB + pB;
        // the running max rarely moves once a few tiles are in: rescale only when it did, for some head
        if (__ballot_sync(FULL, cA != 1.0f || cB != 1.0f) != 0u) {
#pragma unroll
            for (int mt = 0; mt < C::KS; mt++) {
                o[mt][0] *= cA, o[mt][2] *= cA;
                o[mt][1] *= cB, o[mt][3] *= cB;
            }
        }
        // p to the B layout: P[head][key], written by the lanes of part 0 (parts 1 hold the same)
        if (c < 2) {
#pragma unroll
            for (int m = 0; m < C::MT; m++) {
                P[hA * C::PST + 16 * m + g] = s[m][0];
                P[(hA + 1) * C::PST + 16 * m + g] = s[m][1];
                P[hA * C::PST + 16 * m + g + 8] = s[m][2];
                P[(hA + 1) * C::PST + 16 * m + g + 8] = s[m][3];
            }
        }
        __syncwarp();
        // PV, k-step j (keys 16 j ..): B column n = g is head hn, part `part` of p
#pragma unroll
        for (int j = 0; j < C::MT; j++) {
            const float2 p0 = *reinterpret_cast<const float2 *>(P + hn * C::PST + 16 * j + 2 * c);
            const float2 p1 = *reinterpret_cast<const float2 *>(P + hn * C::PST + 16 * j + 2 * c + 8);
            float y[4] = {p0.x, p0.y, p1.x, p1.y};
            if (part) {
#pragma unroll
                for (int i = 0; i < 4; i++) y[i] -= __half2float(__float2half_rn(y[i]));
            }
            const unsigned pb[2] = {pack_half2(y[0], y[1]), pack_half2(y[2], y[3])};
            const int r = 16 * j + (lane & 7) + (lane >> 4) * 8; // matrices: (d lo, keys lo), (d hi, keys lo), (d lo, keys hi), (d hi, keys hi)
#pragma unroll
            for (int mt = 0; mt < C::KS; mt++) {
                unsigned af[4];
                ldmatrix_x4_trans(af, vs + tile_off<D>(r, 2 * mt + ((lane >> 3) & 1)));
                mma_16816(o[mt], af, pb);
            }
        }
    }
    cp_async_wait<0>();

    // the split's partial: o = hi + lo columns, l summed over the lanes' keys
#pragma unroll
    for (int mt = 0; mt < C::KS; mt++)
#pragma unroll
        for (int i = 0; i < 4; i++) o[mt][i] += __shfl_xor_sync(FULL, o[mt][i], 2);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        lA += __shfl_xor_sync(FULL, lA, off);
        lB += __shfl_xor_sync(FULL, lB, off);
    }
    // the warps' (o, m, l) side by side in their own shared memory (free now), then the block's
    // partial: the log-sum-exp combination of its warps
    float *wo = reinterpret_cast<float *>(smem); // [4][D] o, then m[4], l[4]
    if (c < 2) {
#pragma unroll
        for (int mt = 0; mt < C::KS; mt++) {
            wo[hA * D + 16 * mt + g] = o[mt][0];
            wo[hA * D + 16 * mt + g + 8] = o[mt][2];
            wo[(hA + 1) * D + 16 * mt + g] = o[mt][1];
            wo[(hA + 1) * D + 16 * mt + g + 8] = o[mt][3];
        }
        if (g == 0) {
            wo[MMA_HEADS * D + hA] = mA, wo[MMA_HEADS * D + hA + 1] = mB;
            wo[MMA_HEADS * D + 4 + hA] = lA, wo[MMA_HEADS * D + 4 + hA + 1] = lB;
        }
    }
    __syncthreads();
    const int d = a.kv.d;
    const int64_t prow = (int64_t)blockIdx.x * a.hq + hbase; // [split][hq], one token
    for (int e = (int)threadIdx.x; e < hcount * d; e += 32 * MMA_WARPS) {
        const int h = e / d, col = e - h * d;
        float mx = neg_inf();
#pragma unroll
        for (int w = 0; w < MMA_WARPS; w++) mx = fmaxf(mx, reinterpret_cast<const float *>(smem_block + (size_t)w * C::SMEM)[MMA_HEADS * D + h]);
        float acc = 0.0f, l = 0.0f;
#pragma unroll
        for (int w = 0; w < MMA_WARPS; w++) {
            const float *x = reinterpret_cast<const float *>(smem_block + (size_t)w * C::SMEM);
            const float mw = x[MMA_HEADS * D + h];
            const float wt = mw == neg_inf() ? 0.0f : exp2f(mw - mx);
            acc += x[h * D + col] * wt;
            l += x[MMA_HEADS * D + 4 + h] * wt;
        }
        part_o[(prow + h) * d + col] = acc;
        if (col == 0) part_ml[prow + h] = make_float2(mx == neg_inf() ? mx : mx * 0.693147180559945309f, l);
    }
}

// ---- score ------------------------------------------------------------------------------------

// score: the QK of attend_mma_kernel alone, K only: the same keys per stage, half the bytes.
template <int D> __global__ void __launch_bounds__(32) score_mma_kernel(const ScoreArgs a)
{
    grid_dep_enter();
    if (skipped(a.skip)) return;
    using C = MmaTile<D, false>;
    SIFT_DYNAMIC_SMEM(smem);
    const int lane = (int)threadIdx.x, g = lane >> 2, c = lane & 3;
    const int kvh = (int)blockIdx.y, G = a.hq / a.kv.hkv;
    const int hbase = kvh * G, hcount = G; // G <= 4 (the plan)
    const int64_t beg = (int64_t)blockIdx.x * a.split_len, end = min(a.m, beg + a.split_len);
    const int ntiles = end > beg ? (int)((end - beg + C::TK - 1) / C::TK) : 0;

    unsigned qb[D / 16][2];
    const int qexp = load_q_fragments<D>(a.q, a.kv.d, hbase, hcount, a.scale, qb);
    const int hA = 2 * (c & 1);
    const float scA = ldexpf(1.0f, __shfl_sync(FULL, qexp, 4 * hA)), scB = ldexpf(1.0f, __shfl_sync(FULL, qexp, 4 * (hA + 1)));
    float *outA = a.scores + (int64_t)(hbase + hA) * a.m, *outB = outA + a.m;

    // rows of positions begin + j, j in [tb, tb + TK) (absent ones zero-filled: score 0, as the reference)
    auto issue = [&](int tile) {
        unsigned char *ks = smem + (size_t)(tile % MMA_STAGES) * C::STAGE;
        const int64_t tb = beg + (int64_t)tile * C::TK;
        const int ch = lane % C::CPR;
        const int count = (int)min((int64_t)C::TK, end - tb);
        const int32_t run = locate_run(a.kv.k, a.kv.ncap, a.begin + tb, count); // one lookup a tile where it can
        if (run != -2) {
            const __half *kp = kv_at<const __half>(a.kv.k, kvh, run >= 0 ? run : 0) + ch * 8;
#pragma unroll
            for (int i = 0; i < C::CPL; i++) {
                const int r = lane / C::CPR + C::RPI * i;
                cp_async16(ks + tile_off<D>(r, ch), kp + (int64_t)(r < count ? r : 0) * a.kv.k.stride1, run >= 0 && r < count);
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < C::CPL; i++) {
            const int r = lane / C::CPR + C::RPI * i;
            const int32_t pr = tb + r < end ? kv_locate(a.kv.k, a.kv.ncap, a.begin + tb + r) : -1;
            const __half *kp = kv_at<const __half>(a.kv.k, kvh, pr >= 0 ? pr : 0) + ch * 8;
            cp_async16(ks + tile_off<D>(r, ch), kp, pr >= 0);
        }
    };
    ring_start(ntiles, issue);
    for (int t = 0; t < ntiles; t++) {
        ring_next(t, ntiles, issue);
        const unsigned char *ks = smem + (size_t)(t % MMA_STAGES) * C::STAGE;
        const int64_t tb = beg + (int64_t)t * C::TK;
#pragma unroll
        for (int m = 0; m < C::MT; m++) {
            float acc[4];
            qk_fragment<D>(ks, 16 * m, qb, acc);
            const int64_t j = tb + 16 * m + g;
            if (c < 2) { // lanes c and c + 2 hold the same sums
                if (hA < hcount && j < end) outA[j] = acc[0] * scA;
                if (hA < hcount && j + 8 < end) outA[j + 8] = acc[2] * scA;
                if (hA + 1 < hcount && j < end) outB[j] = acc[1] * scB;
                if (hA + 1 < hcount && j + 8 < end) outB[j + 8] = acc[3] * scB;
            }
        }
    }
    cp_async_wait<0>();
}

// The block geometry of each: attention 4 warps of MmaTile<D, true>, score 1 warp of MmaTile<D, false>.
template <int D> MmaKernelInfo<AttendMmaKernel> attend_mma_info()
{
    const AttendMmaKernel k = &attend_mma_kernel<D>;
    using C = MmaTile<D, true>;
    return {k, reinterpret_cast<const void *>(k), 32 * MMA_WARPS, MMA_WARPS * C::SMEM, MMA_WARPS * C::TK};
}
template <int D> MmaKernelInfo<ScoreMmaKernel> score_mma_info()
{
    const ScoreMmaKernel k = &score_mma_kernel<D>;
    using C = MmaTile<D, false>;
    return {k, reinterpret_cast<const void *>(k), 32, C::SMEM, C::TK};
}
MmaKernelInfo<AttendMmaKernel> mma_kernel_info(int d) { return d == 64 ? attend_mma_info<64>() : attend_mma_info<128>(); }
MmaKernelInfo<ScoreMmaKernel> score_mma_kernel_info(int d) { return d == 64 ? score_mma_info<64>() : score_mma_info<128>(); }

} // namespace sift_cuda
