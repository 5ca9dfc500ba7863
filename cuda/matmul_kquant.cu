// matmul with K-quant weights: out[t][j] = dot(x[t], w[j]) (+ bias[j]), x f32 [T][K], w [N][K] in
// q4_k, q5_k or q6_k (super-blocks of 256 values in 144, 176 and 210 bytes: engine/quant.h), f32
// activations and sums.
//
// kq_mv_kernel<W, R>, T = 1 (decode): each warp takes R consecutive rows at a time and walks them
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

namespace sift_cuda {

enum { KQ_NONE = 0, KQ_VEC, KQ_TILED }; // sift_cuda_plan.path

struct KqArgs {
    const float *x;
    const unsigned char *w;
    const float *bias; // NULL: none
    float *out;
    int64_t t, k, n;
    size_t row_bytes;
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

cudaError_t kquant_matmul_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    const KqArgs a = kq_args(n);
    if (a.t <= 0 || a.n <= 0 || a.k <= 0) return cudaSuccess;
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
                                 cudaStream_t st)
{
    const KqArgs a = kq_args(n);
    const KqKernel k = kq_kernel_for((int)n->src[1]->dtype, plan->path, plan->rows_per_block);
    switch (plan->path) {
    case KQ_VEC:
        return launch(k, dim3((unsigned)kq_mv_blocks(dev, a.n, plan->rows_per_block)), dim3(32 * KQ_WARPS), 0, st, a);
    case KQ_TILED:
        return launch(k, dim3((unsigned)((a.t + KG_T - 1) / KG_T), (unsigned)((a.n + KG_N - 1) / KG_N)), dim3(NT), 0,
                      st, a);
    default: return cudaSuccess;
    }
}

} // namespace sift_cuda
