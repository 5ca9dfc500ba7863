// matmul with K-quant weights: out[t][j] = dot(x[t], w[j]) (+ bias[j]), x f32 [T][K], w [N][K] in
// q4_k, q5_k or q6_k (super-blocks of 256 values in 144, 176 and 210 bytes: engine/quant.h), f32
// activations and sums.
//
// kqd_kernel<W, U, R>, T = 1 (decode) with 16-byte aligned rows: the direct design, described
// above the kernel below; it takes q4_0 too (units of 8 blocks of 32 values, a lane one block).
//
// kq_mv_kernel<W, R>, T = 1 (decode) otherwise: each warp takes R consecutive rows at a time and walks them
// in tiles of 8 super-blocks (2048 values). A tile of each row is copied into the warp's shared
// memory with 16-byte loads of the aligned chunks that cover it (the lanes take consecutive
// chunks: coalesced, whatever the super-block's alignment, which for q6_k's 210 bytes is only
// 2), all R rows' loads issued before any is used. Lane l then decodes a quarter (64 values) of
// super-block l / 4 of every row from shared memory as 32-bit words, four 16-value parts under
// one sub-block scale each; the x values of a part (four 16-byte loads) serve the R rows. A part
// adds scale * sum(q * x) (- min * sum(x) for q4_k and q5_k) to the lane's f32 sum of its row;
// the lanes' sums are added by shuffles in a fixed order. Integer quants become floats through
// the 2^23 bit trick (byte_as_float), exactly.
//
// kq_gemm_kernel<W>, T > 1 (prefill), and T = 1 when x is not 16-byte aligned: 64 tokens x 64
// rows per block of 256 threads, K in steps of 32 (one sub-block) staged in shared memory,
// weights dequantized as they are stored (weights.cuh kquant_at, the CPU's values), 4 x 4 outputs
// per thread. Plain, not tuned: each weight is read once per 64 tokens.
#include "common.cuh"
#include "matmul_kquant.cuh"
#include "weights.cuh"
#include "xdigits.cuh"

namespace sift_cuda {

enum { KQ_NONE = 0, KQ_VEC, KQ_TILED, KQ_DIRECT }; // sift_cuda_plan.path

struct KqArgs {
    const float *x;
    const unsigned char *w;
    const float *bias; // NULL: none
    float *out;
    int64_t t, k, n;
    size_t row_bytes;
    const XDigits2 *xd; // kqd_kernel: x's digits [K / 32] (x_digits_kernel)
};

// ---- matrix-vector ------------------------------------------------------------------------------

constexpr int KQ_WARPS = 4;   // warps per block
constexpr int KQ_TILE_SB = 8; // super-blocks per tile and row
// Bytes of a row's tile in shared memory: 8 super-blocks, the up to 15 bytes before the first one
// in its aligned chunk, and room for the word reads past the last byte; a multiple of 16.
constexpr int KQ_SLOT = (KQ_TILE_SB * 210 + 15 + 4 + 15) / 16 * 16;

// Byte i of w minus bias as a float, without the slow integer-to-float conversion: 2^23 + byte as
// a float's bits, minus 2^23 + bias (exact: every value is an integer below 2^24).
__device__ __forceinline__ float byte_as_float(unsigned w, int i, float bias)
{
    return __uint_as_float(__byte_perm(w, 0x4b000000u, 0x7440u | (unsigned)i)) - (8388608.0f + bias);
}

// The 32-bit little-endian word at byte p of shared memory, any alignment (the aligned words
// around it, funnel-shifted).
__device__ __forceinline__ unsigned smem_word(const unsigned char *p)
{
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const unsigned *w = reinterpret_cast<const unsigned *>(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3) * 8u;
    return sh ? __funnelshift_rc(w[0], w[1], sh) : w[0];
}

// The first value, within its super-block, of part p (16 consecutive values) of quarter qd.
template <int W> __device__ __forceinline__ int kq_first(int qd, int p)
{
    if (W == SIFT_Q6_K) return 128 * (qd >> 1) + 32 * p + 16 * (qd & 1);
    return 64 * qd + 32 * (p >> 1) + 16 * (p & 1);
}

// Part p (16 values) of quarter qd of super-block blk: its 16 quants (4 per word, as bytes q + bias
// where bias is what byte_as_float subtracts), its scale and min. hdr: Q4_K/Q5_K: the block's
// first 16 bytes as words (d | dmin, scale bytes 0-11); Q6_K: the quarter's four scales in hdr[1]
// (group g's in byte g).
struct KqPart {
    unsigned q[4];
    float scale, min;
};

template <int W>
__device__ __forceinline__ KqPart kq_part(const unsigned char *blk, const unsigned (&hdr)[4], float d, float dmin,
                                             int qd, int p)
{
    KqPart r;
    if (W == SIFT_Q6_K) {
        const int h = qd >> 1, lh = qd & 1, g = p;
        const unsigned char *ql = blk + 64 * h + 32 * (g & 1) + 16 * lh, *qh = blk + 128 + 32 * h + 16 * lh;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned lo = (smem_word(ql + 4 * i) >> (4 * (g >> 1))) & 0x0f0f0f0fu;
            const unsigned hi = (smem_word(qh + 4 * i) >> (2 * g)) & 0x03030303u;
            r.q[i] = lo | (hi << 4);
        }
        r.scale = d * (float)(signed char)((hdr[1] >> (8 * g)) & 0xffu);
        r.min = 0.0f;
    } else {
        const int c = qd, half = p & 1, high = p >> 1, j = 2 * c + high;
        const unsigned char *qs = blk + (W == SIFT_Q5_K ? 48 : 16) + 32 * c + 16 * half;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            r.q[i] = (smem_word(qs + 4 * i) >> (4 * high)) & 0x0f0f0f0fu;
            if (W == SIFT_Q5_K) r.q[i] |= ((smem_word(blk + 16 + 16 * half + 4 * i) >> j) & 0x01010101u) << 4;
        }
        // scale byte i by shifts and a select (an index into hdr would put it in local memory)
        const unsigned long long s07 = (unsigned long long)hdr[1] | ((unsigned long long)hdr[2] << 32);
        const unsigned s811 = hdr[3];
        int sc, m;
        kquant_scale_min([s07, s811](int i) { return (int)((i < 8 ? (unsigned)(s07 >> (8 * i)) : s811 >> (8 * (i - 8))) & 0xffu); },
                         j, sc, m);
        r.scale = d * (float)sc;
        r.min = dmin * (float)m;
    }
    return r;
}

template <int W, int R> __global__ void __launch_bounds__(32 * KQ_WARPS) kq_mv_kernel(const KqArgs a)
{
    grid_dep_enter();
    __shared__ uint4 slots[KQ_WARPS][R][KQ_SLOT / 16];
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    constexpr int BB = kquant_block_bytes(W);
    constexpr float BIAS = W == SIFT_Q6_K ? 32.0f : 0.0f;
    const int64_t nb = a.k / 256, groups = (a.n + R - 1) / R;
    const int s = lane >> 2, qd = lane & 3; // the lane's super-block in the tile, and quarter of it
    for (int64_t grp = (int64_t)blockIdx.x * KQ_WARPS + warp; grp < groups; grp += (int64_t)gridDim.x * KQ_WARPS) {
        const int64_t r0 = grp * R;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.0f;
        for (int64_t sb0 = 0; sb0 < nb; sb0 += KQ_TILE_SB) {
            const int nsb = (int)(nb - sb0 < KQ_TILE_SB ? nb - sb0 : KQ_TILE_SB);
            int lead[R];
            __syncwarp(); // the previous tile's reads are done
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t row = r0 + r < a.n ? r0 + r : a.n - 1;
                const unsigned char *g0 = a.w + (size_t)row * a.row_bytes + (size_t)sb0 * BB;
                const uintptr_t ga = reinterpret_cast<uintptr_t>(g0) & ~(uintptr_t)15;
                lead[r] = (int)(reinterpret_cast<uintptr_t>(g0) - ga);
                const int chunks = (lead[r] + nsb * BB + 15) / 16;
                // the aligned chunk holding a tile's last byte lies inside the allocation's granule
                for (int c = lane; c < chunks; c += 32) slots[warp][r][c] = __ldg(reinterpret_cast<const uint4 *>(ga) + c);
            }
            __syncwarp();
            if (s >= nsb) continue;
            const float *xs = a.x + (sb0 + s) * 256;
            const unsigned char *blk[R];
            unsigned hdr[R][4];
            float d[R], dmin[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                blk[r] = reinterpret_cast<const unsigned char *>(slots[warp][r]) + lead[r] + s * BB;
                if (W == SIFT_Q6_K) {
                    const unsigned char *sc = blk[r] + 192 + 8 * (qd >> 1) + (qd & 1);
                    hdr[r][0] = 0;
                    hdr[r][1] = (smem_word(sc) & 0xffu) | ((smem_word(sc + 2) & 0xffu) << 8) |
                                ((smem_word(sc + 4) & 0xffu) << 16) | ((smem_word(sc + 6) & 0xffu) << 24);
                    hdr[r][2] = hdr[r][3] = 0;
                    d[r] = half_bits_to_float(smem_word(blk[r] + 208) & 0xffffu);
                    dmin[r] = 0.0f;
                } else {
#pragma unroll
                    for (int i = 0; i < 4; i++) hdr[r][i] = smem_word(blk[r] + 4 * i);
                    d[r] = half_bits_to_float(hdr[r][0] & 0xffffu);
                    dmin[r] = half_bits_to_float(hdr[r][0] >> 16);
                }
            }
#pragma unroll 1
            for (int p = 0; p < 4; p++) { // not unrolled: R rows of four parts' state would spill
                float xv[16];
                const int first = kq_first<W>(qd, p);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float4 v = __ldg(reinterpret_cast<const float4 *>(xs + first) + i);
                    xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
                }
                float xsum = 0.0f;
                if (W != SIFT_Q6_K)
#pragma unroll
                    for (int i = 0; i < 16; i++) xsum += xv[i];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const KqPart part = kq_part<W>(blk[r], hdr[r], d[r], dmin[r], qd, p);
                    float dot0 = 0.0f, dot1 = 0.0f; // two chains: the FMA latency, not memory, would bound one
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        dot0 = fmaf(byte_as_float(part.q[i], 0, BIAS), xv[4 * i], dot0);
                        dot1 = fmaf(byte_as_float(part.q[i], 1, BIAS), xv[4 * i + 1], dot1);
                        dot0 = fmaf(byte_as_float(part.q[i], 2, BIAS), xv[4 * i + 2], dot0);
                        dot1 = fmaf(byte_as_float(part.q[i], 3, BIAS), xv[4 * i + 3], dot1);
                    }
                    acc[r] += part.scale * (dot0 + dot1) - part.min * xsum;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float v = warp_sum(acc[r]);
            if (lane == 0 && r0 + r < a.n) a.out[r0 + r] = a.bias ? v + a.bias[r0 + r] : v;
        }
    }
}

// kqd_kernel<W, U, R>, T = 1 with K % 256 == 0 and 16-byte aligned rows: the direct design
// (matmul.cu's mvq_kernel) for the K-quants. x is taken as two int8 digits per value with each half
// block's sum (xdigits.cuh), made once per product by x_digits_kernel into scratch and read through L1
// (made by every block into its shared memory, they cost more than the weights' loads on an H100:
// docs/benchmarks.md); the blocks then take rows in turn, a warp R rows at a time (each x read
// serving them all), the loads of its next step in flight while it sums the current one. Lane l
// reads, straight into registers, the 16 quant bytes of chunk l % 8 of super-block l / 8 of each
// group of 4 (and the bytes that hold their scales and high bits), U groups of each row in flight
// before any is used. The 16 bytes hold two sets of 16 values, each set
// half an x block under one sub-block scale: its sum is scale * s (dp4a(q, d0) + dp4a(q, d1) / 2^7)
// - min * (x's half-block sum); q6_k's quants, stored + 32, become signed bytes first, so that their sums cancel no large term (x's digits keep 2^-14 of a block's largest
// value, which a min term would multiply by the offset). So a
// weight costs about one integer instruction, where kq_mv_kernel's staging and float conversions
// cost three or more. The lanes' sums reduce over the warp by shuffles.
//
// A lane's loads: q4_k: the super-block's first 16 bytes (d, dmin, the 12 scale bytes; shared by
// the 8 lanes of the super-block, one transaction) and quant chunk c; q5_k: those and the 16 high-bit
// bytes of its half; q6_k: its 16 low-bit and 16 high-bit bytes, 2 scale bytes and d. A q6_k
// super-block (210 bytes) is only 2-byte aligned: its 16-byte reads are five 4-byte ones, shifted.
constexpr int KQD_WARPS = 8, KQD_BLOCKS_PER_SM = 2; // blocks a multiprocessor (the launch makes no more; 128 registers a thread)

// The bytes of a unit of 256 values: one K-quant super-block, or eight q4_0 blocks of 18 bytes.
template <int W> __host__ __device__ constexpr int kqd_unit_bytes() { return W == SIFT_Q4_0 ? 8 * 18 : kquant_block_bytes(W); }

struct KqdLoad {
    uint4 q;     // the chunk's 16 quant bytes (q6_k: low bits)
    uint4 h;     // q4_k, q5_k: the super-block's first 16 bytes; q6_k: the 16 high-bit bytes
    uint4 qh;    // q5_k: the 16 high-bit bytes of the chunk's half
    unsigned sd; // q6_k: the two scale bytes (bytes 0, 1) and d (bits 16-31); q4_0: d (bits 0-15)
};

// 16 bytes at p, 2-byte aligned (q6_k): five aligned words, funnel-shifted.
__device__ __forceinline__ uint4 ld16_align2(const unsigned char *p)
{
    const unsigned *w = reinterpret_cast<const unsigned *>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(reinterpret_cast<uintptr_t>(p) & 3) * 8u;
    unsigned v[5];
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = __ldg(w + i);
    v[4] = sh ? __ldg(w + 4) : 0u; // aligned: no word past the 16 bytes (it may lie past the tensor)
    return make_uint4(__funnelshift_rc(v[0], v[1], sh), __funnelshift_rc(v[1], v[2], sh), __funnelshift_rc(v[2], v[3], sh),
                      __funnelshift_rc(v[3], v[4], sh));
}

// Lane chunk c (0..7) of super-block b.
template <int W> __device__ __forceinline__ KqdLoad kqd_load(const unsigned char *b, int c)
{
    KqdLoad l = {};
    if constexpr (W == SIFT_Q4_0) { // block c: d, then 16 bytes of quants (2-byte aligned)
        l.q = ld16_align2(b + 18 * c + 2);
        l.sd = __ldg(reinterpret_cast<const unsigned short *>(b + 18 * c));
    } else if constexpr (W == SIFT_Q6_K) {
        const int h = c >> 2, part = c & 3;
        l.q = ld16_align2(b + 64 * h + 16 * part);
        l.h = ld16_align2(b + 128 + 32 * h + 16 * (part & 1));
        l.sd = (unsigned)__ldg(b + 192 + 8 * h + part) | (unsigned)__ldg(b + 196 + 8 * h + part) << 8 |
               (unsigned)__ldg(reinterpret_cast<const unsigned short *>(b + 208)) << 16;
    } else {
        l.h = __ldg(reinterpret_cast<const uint4 *>(b));
        l.q = ld_once16(b + (W == SIFT_Q5_K ? 48 : 16) + 16 * c);
        if constexpr (W == SIFT_Q5_K) l.qh = __ldg(reinterpret_cast<const uint4 *>(b + 16 + 16 * (c & 1)));
    }
    return l;
}

// One half x block's digits as words, its scale and its sum (the K-quants' minimums multiply it).
struct KqdX {
    unsigned d0[4], d1[4];
    float scale, sum;
};

__device__ __forceinline__ KqdX kqd_x(const XDigits2 &b, int h)
{
    const uint4 x0 = b.d[0][h], x1 = b.d[1][h];
    return KqdX{{x0.x, x0.y, x0.z, x0.w}, {x1.x, x1.y, x1.z, x1.w}, b.scale, b.hsum[h]};
}

// Σ q x over one set of 16 values (4 words of quant bytes) against its half x block.
__device__ __forceinline__ float kqd_dot(const unsigned (&q)[4], const KqdX &x)
{
    int a0 = 0, a1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        a0 = __dp4a((int)q[i], (int)x.d0[i], a0);
        a1 = __dp4a((int)q[i], (int)x.d1[i], a1);
    }
    return x.scale * fmaf((float)a1, 0x1p-7f, (float)a0);
}

// Four quants stored + o (bytes below 128) as signed bytes q - o, for dp4a: each byte + 128 - o
// stays in its byte, and the top bit's flip takes 128 away again.
__device__ __forceinline__ unsigned signed_bytes(unsigned q, unsigned o)
{
    return ((q | 0x80808080u) - o * 0x01010101u) ^ 0x80808080u;
}

// Lane chunk c's two sets of 16 values: the x blocks of its unit they lie in (lo, hi) and the
// halves of those blocks.
template <int W> __device__ __forceinline__ void kqd_xblocks(int c, int &blo, int &hlo, int &bhi, int &hhi)
{
    if constexpr (W == SIFT_Q4_0) { // block c: its low nibbles are values 0-15, its high 16-31
        blo = bhi = c, hlo = 0, hhi = 1;
    } else if constexpr (W == SIFT_Q6_K) {
        blo = 4 * (c >> 2) + ((c & 3) >> 1), bhi = blo + 2, hlo = hhi = c & 1;
    } else {
        blo = 2 * (c >> 1), bhi = blo + 1, hlo = hhi = c & 1;
    }
}

// Lane chunk c of a loaded unit against its x half blocks xlo and xhi: the sum of its 32 products.
template <int W> __device__ __forceinline__ float kqd_chunk(const KqdLoad &l, int c, const KqdX &xlo, const KqdX &xhi)
{
    const unsigned qw[4] = {l.q.x, l.q.y, l.q.z, l.q.w};
    unsigned lo[4], hi[4];
    if constexpr (W == SIFT_Q4_0) { // quants stored + 8
#pragma unroll
        for (int i = 0; i < 4; i++) lo[i] = signed_bytes(qw[i] & 0x0f0f0f0fu, 8), hi[i] = signed_bytes((qw[i] >> 4) & 0x0f0f0f0fu, 8);
        return half_bits_to_float(l.sd & 0xffffu) * (kqd_dot(lo, xlo) + kqd_dot(hi, xhi));
    } else if constexpr (W == SIFT_Q6_K) {
        const int sh = 2 * ((c & 3) >> 1);
        const unsigned hw[4] = {l.h.x, l.h.y, l.h.z, l.h.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] = signed_bytes((qw[i] & 0x0f0f0f0fu) | ((hw[i] >> sh) & 0x03030303u) << 4, 32);
            hi[i] = signed_bytes(((qw[i] >> 4) & 0x0f0f0f0fu) | ((hw[i] >> (sh + 4)) & 0x03030303u) << 4, 32);
        }
        const float d = half_bits_to_float(l.sd >> 16);
        const float slo = d * (float)(signed char)(l.sd & 0xffu), shi = d * (float)(signed char)((l.sd >> 8) & 0xffu);
        return slo * kqd_dot(lo, xlo) + shi * kqd_dot(hi, xhi);
    } else {
        const int j = c >> 1;
#pragma unroll
        for (int i = 0; i < 4; i++) lo[i] = qw[i] & 0x0f0f0f0fu, hi[i] = (qw[i] >> 4) & 0x0f0f0f0fu;
        if constexpr (W == SIFT_Q5_K) {
            const unsigned hw[4] = {l.qh.x, l.qh.y, l.qh.z, l.qh.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                lo[i] |= ((hw[i] >> (2 * j)) & 0x01010101u) << 4;
                hi[i] |= ((hw[i] >> (2 * j + 1)) & 0x01010101u) << 4;
            }
        }
        const float d = half_bits_to_float(l.h.x & 0xffffu), dmin = half_bits_to_float(l.h.x >> 16);
        // sub-blocks 2j and 2j + 1's 6-bit scales and mins as byte pairs (kquant_scale_min's rule,
        // two at once): bytes 0-3 (l.h.y) and 4-7 (l.h.z) hold sub-blocks 0-3's, and the top two bits
        // of 4-7's, whose low four are in bytes 8-11 (l.h.w)
        const unsigned sh = 16u * (unsigned)(j & 1), s = l.h.y >> sh, m = l.h.z >> sh, q = l.h.w >> sh;
        const unsigned sc2 = j < 2 ? s & 0x3f3fu : (q & 0x0f0fu) | ((s >> 2) & 0x3030u);
        const unsigned mn2 = j < 2 ? m & 0x3f3fu : ((q >> 4) & 0x0f0fu) | ((m >> 2) & 0x3030u);
        const float slo = d * (float)(sc2 & 0xffu), shi = d * (float)(sc2 >> 8);
        const float mlo = dmin * (float)(mn2 & 0xffu), mhi = dmin * (float)(mn2 >> 8);
        return slo * kqd_dot(lo, xlo) - mlo * xlo.sum + shi * kqd_dot(hi, xhi) - mhi * xhi.sum;
    }
}

// A warp's U units at step u0 of its R rows from row0 (units past a row's end, rows past w's: none).
template <int W, int U, int R>
__device__ __forceinline__ void kqd_load_step(const KqArgs &a, int64_t row0, int64_t u0, int64_t units, int ul, int c,
                                              KqdLoad (&l)[R][U])
{
    constexpr int STEP = 4, BB = kqd_unit_bytes<W>();
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (row0 + r >= a.n) continue;
        const unsigned char *w = a.w + (size_t)(row0 + r) * a.row_bytes;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t unit = u0 + STEP * u + ul;
            if (unit < units) l[r][u] = kqd_load<W>(w + unit * BB, c);
        }
    }
}

template <int W, int U, int R> __global__ void __launch_bounds__(32 * KQD_WARPS, KQD_BLOCKS_PER_SM) kqd_kernel(const KqArgs a)
{
    grid_dep_enter();
    const XDigits2 *xs = a.xd; // [K / 32]
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    // units: super-blocks of 256 values, a lane taking chunk c of one of 4 (1024 values a warp step)
    constexpr int STEP = 4, XB = 8;
    const int64_t units = a.k / 256, stride = (int64_t)gridDim.x * KQD_WARPS * R;
    const int c = lane & 7, ul = lane >> 3; // the lane's chunk, and super-block of each step
    int blo, hlo, bhi, hhi;
    kqd_xblocks<W>(c, blo, hlo, bhi, hhi);
    // The warp walks (R rows, step) pairs, the next pair's loads in flight while the current one is
    // summed.
    int64_t row = ((int64_t)blockIdx.x * KQD_WARPS + warp) * R, u0 = 0;
    KqdLoad cur[R][U];
    if (row < a.n) kqd_load_step<W, U, R>(a, row, 0, units, ul, c, cur);
    float acc[R] = {};
    while (row < a.n) {
        int64_t next_row = row, next_u0 = u0 + STEP * U;
        if (next_u0 >= units) next_u0 = 0, next_row += stride;
        KqdLoad next[R][U];
        if (next_row < a.n) kqd_load_step<W, U, R>(a, next_row, next_u0, units, ul, c, next);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t unit = u0 + STEP * u + ul;
            if (unit >= units) continue;
            const KqdX xlo = kqd_x(xs[unit * XB + blo], hlo), xhi = kqd_x(xs[unit * XB + bhi], hhi); // shared by the R rows
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] += kqd_chunk<W>(cur[r][u], c, xlo, xhi);
        }
        if (next_u0 == 0) { // the rows' last step
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float v = warp_sum(acc[r]);
                if (lane == 0 && row + r < a.n) a.out[row + r] = a.bias ? v + a.bias[row + r] : v;
                acc[r] = 0.0f;
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int u = 0; u < U; u++) cur[r][u] = next[r][u];
        row = next_row, u0 = next_u0;
    }
}

// ---- matrix-matrix --------------------------------------------------------------------------------

constexpr int KG_T = 64, KG_N = 64, KG_K = 32;

template <int W> __global__ void __launch_bounds__(NT) kq_gemm_kernel(const KqArgs a)
{
    grid_dep_enter();
    __shared__ float xs[KG_K][KG_T + 4]; // xs[k][t] = x[t0 + t][k0 + k]
    __shared__ float ws[KG_K][KG_N + 4]; // ws[k][n] = w[n0 + n][k0 + k]
    const int tid = (int)threadIdx.x;
    const int64_t t0 = (int64_t)blockIdx.x * KG_T, n0 = (int64_t)blockIdx.y * KG_N;
    const int lr = tid / 4, lk = (tid % 4) * 8; // staging: row lr of each tile, values lk .. lk + 7
    const int ty = tid / 16, tx = tid % 16;     // computing: tokens ty * 4 .., rows tx * 4 ..
    const int64_t xt = t0 + lr, wn = n0 + lr;
    const unsigned char *wrow = a.w + (size_t)(wn < a.n ? wn : a.n - 1) * a.row_bytes;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < a.k; k0 += KG_K) {
#pragma unroll 2
        for (int i = 0; i < 8; i++) {
            xs[lk + i][lr] = xt < a.t ? __ldg(a.x + xt * a.k + k0 + lk + i) : 0.0f;
            ws[lk + i][lr] = wn < a.n ? kquant_at(wrow, W, k0 + lk + i) : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < KG_K; kk++) {
            float xv[4], wv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) xv[i] = xs[kk][ty * 4 + i], wv[i] = ws[kk][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
        }
        __syncthreads();
    }
    store_tile_sums(acc, a.out, a.bias, a.t, a.n, t0 + ty * 4, n0 + tx * 4);
}

// ---- host -----------------------------------------------------------------------------------------

using KqKernel = void (*)(KqArgs);

template <int W> static KqKernel kq_mv_for(int R)
{
    return R == 4 ? &kq_mv_kernel<W, 4> : R == 2 ? &kq_mv_kernel<W, 2> : &kq_mv_kernel<W, 1>;
}

static KqKernel kq_kernel_for(int wtype, int path, int R)
{
    switch (wtype) {
    case SIFT_Q4_K: return path == KQ_VEC ? kq_mv_for<SIFT_Q4_K>(R) : &kq_gemm_kernel<SIFT_Q4_K>;
    case SIFT_Q5_K: return path == KQ_VEC ? kq_mv_for<SIFT_Q5_K>(R) : &kq_gemm_kernel<SIFT_Q5_K>;
    default: return path == KQ_VEC ? kq_mv_for<SIFT_Q6_K>(R) : &kq_gemm_kernel<SIFT_Q6_K>;
    }
}

// R = 2 rows a warp, U = 2 groups of 4 super-blocks of each in flight per lane: on an H100, the
// same registers as one row and 4 groups, but each x read serves two rows (docs/benchmarks.md).
// q5_k's loads (its high bits too) take more registers: 1 group of each row in flight.
constexpr int KQD_U = 2, KQD_U_Q5_K = 1, KQD_R = 2;

static KqKernel kqd_kernel_for(int wtype)
{
    switch (wtype) {
    case SIFT_Q4_0: return &kqd_kernel<SIFT_Q4_0, KQD_U, KQD_R>;
    case SIFT_Q4_K: return &kqd_kernel<SIFT_Q4_K, KQD_U, KQD_R>;
    case SIFT_Q5_K: return &kqd_kernel<SIFT_Q5_K, KQD_U_Q5_K, KQD_R>;
    default: return &kqd_kernel<SIFT_Q6_K, KQD_U, KQD_R>;
    }
}

static KqArgs kq_args(const sift_node *n)
{
    const sift_tensor *w = n->src[1];
    KqArgs a = {};
    a.x = dev_ptr<const float>(n->src[0]);
    a.w = dev_ptr<const unsigned char>(w);
    a.bias = n->n_src > 2 ? dev_ptr<const float>(n->src[2]) : nullptr;
    a.out = dev_ptr<float>(n->dst);
    a.t = n->src[0]->shape[0];
    a.k = n->src[0]->shape[1];
    a.n = w->shape[0];
    a.row_bytes = sift_dtype_row_bytes(w->dtype, w->shape[1]);
    return a;
}

// Matrix-vector blocks: one per KQ_WARPS row groups, at most 64 per multiprocessor (the warps then
// take further row groups in turn).
static int64_t kq_mv_blocks(const sift_cuda_device *dev, int64_t n, int R)
{
    const int64_t groups = (n + R - 1) / R, blocks = (groups + KQ_WARPS - 1) / KQ_WARPS, most = 64 * (int64_t)dev->sm_count;
    return blocks < most ? blocks : most;
}

// One token with rows 16-byte aligned (q6_k: K % 2048 == 0): the direct kernel, x's digits in
// scratch.
static bool direct_takes(const KqArgs &a)
{
    return a.t == 1 && a.k % 256 == 0 && a.row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
}

bool kquant_direct_takes(const sift_node *n) { return direct_takes(kq_args(n)); }

static bool kquant_direct_plan(const KqArgs &a, sift_cuda_plan *plan)
{
    if (!direct_takes(a)) return false;
    plan->path = KQ_DIRECT;
    plan->scratch_bytes = (size_t)(a.k / 32) * sizeof(XDigits2);
    return true;
}

cudaError_t kquant_matmul_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    const KqArgs a = kq_args(n);
    if (a.t <= 0 || a.n <= 0 || a.k <= 0) return cudaSuccess;
    if (kquant_direct_plan(a, plan)) return cudaSuccess;
    if (a.t == 1 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0) {
        // R rows per warp share each x load; fewer where that leaves multiprocessors idle
        int R = 4;
        while (R > 1 && kq_mv_blocks(dev, a.n, R) < 2 * (int64_t)dev->sm_count) R /= 2;
        plan->path = KQ_VEC;
        plan->rows_per_block = R;
        return cudaSuccess;
    }
    if ((a.t + KG_T - 1) / KG_T > 2147483647 || (a.n + KG_N - 1) / KG_N > 65535)
        return beyond_limit(plan, "a K-quant matmul of more than 2^37 tokens or 2^22 rows of w");
    plan->path = KQ_TILED;
    return cudaSuccess;
}

cudaError_t kquant_matmul_launch(const sift_cuda_device *dev, const sift_node *n, const sift_cuda_plan *plan,
                                 void *scratch, cudaStream_t st)
{
    KqArgs a = kq_args(n);
    const KqKernel k = kq_kernel_for((int)n->src[1]->dtype, plan->path, plan->rows_per_block);
    switch (plan->path) {
    case KQ_VEC:
        return launch(k, dim3((unsigned)kq_mv_blocks(dev, a.n, plan->rows_per_block)), dim3(32 * KQ_WARPS), 0, st, a);
    case KQ_DIRECT: { // x's digits once, then the rows
        const int64_t nb = a.k / 32;
        const cudaError_t e = launch_x_digits<true>(a.x, nb, static_cast<XDigits2 *>(scratch), st);
        if (e != cudaSuccess) return e;
        a.xd = static_cast<const XDigits2 *>(scratch);
        const int64_t blocks = (a.n + KQD_WARPS * KQD_R - 1) / (KQD_WARPS * KQD_R), most = KQD_BLOCKS_PER_SM * (int64_t)dev->sm_count;
        return launch(kqd_kernel_for((int)n->src[1]->dtype), dim3((unsigned)(blocks < most ? blocks : most)),
                      dim3(32 * KQD_WARPS), 0, st, a);
    }
    case KQ_TILED:
        return launch(k, dim3((unsigned)((a.t + KG_T - 1) / KG_T), (unsigned)((a.n + KG_N - 1) / KG_N)), dim3(NT), 0,
                      st, a);
    default: return cudaSuccess;
    }
}

} // namespace sift_cuda
