// matmul: out[t][j] = dot(x[t], w[j]) (+ bias[j]), x f32 [T][K], w [N][K] in f32, f16, bf16, q8_0 or
// q4_0 (weights.cuh; q8_0 rows stored planar), f32 activations and f32 accumulation (the q8_0 decode
// takes x as two int8 digits, exact to 2^-14 of each block's largest value, the q4_0 decode as
// three, to 2^-21; no tensor cores): every backend must agree with the CPU reference to NMSE 1e-6
// per layer.
//
// Four kernels:
//
// mvd_kernel<W, R> (f32, f16, bf16) and mvq_kernel<R, U> (q8_0), T = 1 (decode) with rows 16-byte
// aligned and x fitting in shared memory: matrix-vector products that read the weights straight
// from global memory into registers, 16 bytes a lane, several 512-byte chunks of each row in
// flight per warp (their comments have the details).
//
// q4_0 of one token with K % 256 == 0 runs the K-quants' direct kernel (matmul_kquant.cu).
//
// mv_kernel<W>, T = 1 otherwise (q4_0, and f32/f16/bf16 with x too wide for shared memory): a
// matrix-vector product that stages the weights through shared memory. One block of 16 warps per
// multiprocessor (one wave, no tail) takes row groups of R
// consecutive rows (R = 8, 4, 2 or 1, fewer where N is small, so that every multiprocessor has
// one), block b the groups b, b + grid, ...; its warps split K, each holding its slice of x in
// shared memory (copied once) and streaming its slice of every row group through its own 3-stage
// cp.async pipeline, which runs on across row groups: the next row group's weights are in flight
// while a row group's sums are combined (one block barrier per row group). A stage holds, for
// each of the R rows, a span of U * 32 / R weight groups as raw bytes (16-byte copies of whole
// aligned chunks, whatever the block layout's alignment); x is padded by 4 floats every 32 so that
// the lanes' 16-byte reads of different groups fall in different banks.
// Groups: f32 4 values (16 bytes), f16 and bf16 8 values (16 bytes), q4_0 one block of 32
// (18 bytes at even addresses: read as 32-bit words and realigned with funnel shifts). For
// q4_0 each warp first writes its slice of x as three int8 digits per value (XDigits), so
// that a block's products are exact integer sums (dp4a), scaled once per block. Each lane keeps one
// f32 sum; at the end of a row group the sums are reduced
// over the lanes of a row by shuffles and over the warps in shared memory, in a fixed order. Lane l decodes group (l / R) + i * 32 / R
// of row l % R: the R lanes of a group read its x values at the same addresses (one broadcast), so
// x is read from shared memory once per R rows.
//
// gemm_kernel, T > 1 (prefill) and every case the others do not take (unaligned rows or x, q8_0
// rows of K not a multiple of 256): a
// 64 x 64 output tile per block (64 tokens x 64 rows of w), K in steps of 32 through double-buffered
// shared memory, 4 x 4 outputs per thread with f32 FMAs. Weights are dequantized to f32 as the
// tile is stored, so each weight is read once per 64 tokens; consecutive blocks take consecutive
// token tiles of the same rows, which then come from L2.
#include "common.cuh"
#include "matmul_kquant.cuh"
#include "weights.cuh"
#include "xdigits.cuh"


namespace sift_cuda {

enum { MM_NONE = 0, MM_VEC, MM_DIRECT, MM_TILED }; // sift_cuda_plan.path

// The kernels' parameters (passed by value), built from the node and its plan by the launch.
struct MatmulArgs {
    const float *x;
    const void *w;
    const float *bias;   // NULL: none
    float *out;
    int64_t t, k, n;
    int wtype;           // w's sift_dtype
    size_t row_bytes;    // bytes of one row of w
    int rows_per_block;  // matrix-vector: rows of w per block (8, 4, 2 or 1)
    int mv_u;            // matrix-vector: weight groups per lane and pipeline stage
    const void *xd;      // q8_0, direct kernel: x's digits [T][K / 32] (XDigits2, x_digits_kernel)
};

// ---- matrix-vector ------------------------------------------------------------------------------

constexpr int MV_WARPS = 16, MV_THREADS = 32 * MV_WARPS; // one block of (at most) 16 warps per multiprocessor
constexpr int64_t MV_TOKENS = 16;     // products of up to this many tokens run the matrix-vector kernels
constexpr int MV_STAGES = 3;          // depth of each warp's cp.async ring
constexpr int XDIGIT_BYTES = 112;     // q4_0: one block of x as digits (XDigits)
constexpr int MV_STAGE_BUDGET = 2560; // bytes of weights per warp and stage, at most (more or deeper gained nothing on the H200)

__host__ __device__ constexpr int fmt_group(int w) // values per group
{
    return w == SIFT_F32 ? 4 : (w == SIFT_F16 || w == SIFT_BF16) ? 8 : 32;
}
__host__ __device__ constexpr int fmt_group_bytes(int w)
{
    return w == SIFT_Q4_0 ? 18 : 16;
}

// The shared-memory layout of one warp's stage: R rows of rs bytes (the row's span of sg groups,
// up to 15 bytes of misalignment before it and 4 bytes of over-read after it).
struct MvLayout {
    int sg;          // groups per row per stage: u * 32 / R
    int nch;         // 16-byte chunks copied per row (at most)
    int rs;          // row stride, bytes
    int stage_bytes; // R * rs
};

__host__ __device__ inline MvLayout mv_layout(int wtype, int R, int u)
{
    MvLayout L;
    const int gb = fmt_group_bytes(wtype);
    L.sg = u * 32 / R;
    const int span = L.sg * gb;
    const bool quant = wtype == SIFT_Q4_0;
    // f32/f16/bf16 spans start 16-byte aligned; q spans anywhere in their first chunk, and the
    // word reads of their last group pass its end by up to 2 bytes
    L.nch = quant ? (span + 15 + 15) / 16 : span / 16;
    int m = quant ? (L.nch * 16 + 4 + 15) / 16 : L.nch;
    // f32/f16/bf16: rows m * 16 bytes apart with m = 8 / R (mod 8), so that the 16-byte reads of a
    // quarter warp, (8 / R groups) x (R rows), fall in 8 different bank quads; q: m odd, which
    // spreads the 32-bit reads of the R rows over the banks
    if (quant) m |= 1;
    else
        while (m % 8 != (8 / R) % 8) m++;
    L.rs = m * 16;
    L.stage_bytes = R * L.rs;
    return L;
}

// A warp's slice of K, of nw warps: groups [ng * w / nw, ng * (w + 1) / nw); its x values are
// resident in shared memory: the floats one slice takes at most. f32/f16/bf16: x itself, padded by
// 4 floats every 32; q4_0: x's digits, XDIGIT_BYTES per block.
__host__ __device__ inline int mv_xslice_floats(int wtype, int64_t k, int nw)
{
    const int64_t ng = k / fmt_group(wtype), gw = (ng + nw - 1) / nw, xe = gw * fmt_group(wtype);
    if (wtype == SIFT_Q4_0) return (int)(gw * XDIGIT_BYTES / 4);
    return (int)(xe + 4 * ((xe + 31) / 32));
}

// x element e of a warp's slice (e counted from the slice's first value) in the padded layout
__device__ __forceinline__ int mv_xpos(int e) { return e + 4 * (e >> 5); }

// acc += dot of one group with its x values (x 16-byte aligned in shared memory; w at its byte
// address in shared memory: 16-byte aligned for f32/f16/bf16, even for q4_0).
template <int W> __device__ __forceinline__ float mv_dot(const unsigned char *w, const float *x, float acc);

template <> __device__ __forceinline__ float mv_dot<SIFT_F32>(const unsigned char *w, const float *x, float acc)
{
    const float4 a = *reinterpret_cast<const float4 *>(w), b = *reinterpret_cast<const float4 *>(x);
    return acc + (fmaf(a.x, b.x, a.y * b.y) + fmaf(a.z, b.z, a.w * b.w));
}

__device__ __forceinline__ float dot8_words(const uint4 &u, const float *x, float acc, bool bf16)
{
    const float4 x0 = *reinterpret_cast<const float4 *>(x), x1 = *reinterpret_cast<const float4 *>(x + 4);
    const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const unsigned wd[4] = {u.x, u.y, u.z, u.w};
    float part[2] = {0.0f, 0.0f}; // two independent chains: the FMA latency, not the issue rate, bounded one
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float lo, hi;
        if (bf16) {
            lo = __uint_as_float(wd[i] << 16);
            hi = __uint_as_float(wd[i] & 0xffff0000u);
        } else {
            __half2 h;
            memcpy(static_cast<void *>(&h), &wd[i], 4);
            const float2 f = __half22float2(h);
            lo = f.x, hi = f.y;
        }
        part[i & 1] = fmaf(lo, xs[2 * i], part[i & 1]);
        part[i & 1] = fmaf(hi, xs[2 * i + 1], part[i & 1]);
    }
    return acc + (part[0] + part[1]);
}
template <> __device__ __forceinline__ float mv_dot<SIFT_F16>(const unsigned char *w, const float *x, float acc)
{
    return dot8_words(*reinterpret_cast<const uint4 *>(w), x, acc, false);
}
template <> __device__ __forceinline__ float mv_dot<SIFT_BF16>(const unsigned char *w, const float *x, float acc)
{
    return dot8_words(*reinterpret_cast<const uint4 *>(w), x, acc, true);
}

// nw 32-bit words from the word holding byte address w; sh = 8 * (w & 3) (0 or 16: w is even).
template <int NW> __device__ __forceinline__ unsigned load_words(const unsigned char *w, unsigned (&v)[NW])
{
    const uintptr_t a = reinterpret_cast<uintptr_t>(w);
    const unsigned *p = reinterpret_cast<const unsigned *>(a & ~(uintptr_t)3);
#pragma unroll
    for (int i = 0; i < NW; i++) v[i] = p[i];
    return (unsigned)(a & 3) * 8;
}

// q4_0 (mv_kernel) against x as digits: x = s (d0 + d1 / 2^7 + d2 / 2^14) per block of 32 values, to
// 2^-21 of the block's largest |x| (f32 itself keeps 2^-24 of each value), with s a power of two and
// the digits integers in [-64, 64]. The integer sums of q * digit (dp4a: 4 products an instruction,
// exact) replace the byte-to-float conversions and FMAs: a third of the dot product's instructions.
struct XDigits {
    signed char d[3][32]; // the digits of the block's 32 values
    float scale;          // s (NaN where the block holds an inf or a NaN, so that its sums are NaN too)
    int sum[3];           // q4_0: the sums of each digit over the block (for its offset of 8)
};
static_assert(sizeof(XDigits) == XDIGIT_BYTES, "XDigits: 7 16-byte words");

// Whole warp: lane `lane`'s value v of one block into its three digits (SUMS: and their sums).
template <bool SUMS> __device__ __forceinline__ void x_digits(float v, int lane, XDigits *xd)
{
    float s;
    const float v0 = x_over_scale(v, &s);
    const float d0 = rintf(v0), r1 = (v0 - d0) * 128.0f, d1 = rintf(r1), d2 = rintf((r1 - d1) * 128.0f);
    const int di[3] = {(int)d0, (int)d1, (int)d2};
#pragma unroll
    for (int j = 0; j < 3; j++) {
        xd->d[j][lane] = (signed char)di[j];
        if constexpr (SUMS) {
            const int sum = __reduce_add_sync(FULL, di[j]);
            if (lane == 0) xd->sum[j] = sum;
        }
    }
    if (lane == 0) xd->scale = s;
}

// The digits of one block as 8 words (values 4m .. 4m+3 in word m) per digit.
struct XWords {
    unsigned w[3][8];
};
__device__ __forceinline__ XWords x_words(const XDigits *xd)
{
    const uint4 *p = reinterpret_cast<const uint4 *>(xd);
    XWords x;
#pragma unroll
    for (int j = 0; j < 3; j++) {
        const uint4 a = p[2 * j], b = p[2 * j + 1];
        x.w[j][0] = a.x, x.w[j][1] = a.y, x.w[j][2] = a.z, x.w[j][3] = a.w;
        x.w[j][4] = b.x, x.w[j][5] = b.y, x.w[j][6] = b.z, x.w[j][7] = b.w;
    }
    return x;
}

// acc + d * s * (a0 + a1 / 2^7 + a2 / 2^14): |a0| <= 32 * 128 * 64 = 2^18, exact as a float.
__device__ __forceinline__ float digit_sum(float d, float s, int a0, int a1, int a2, float acc)
{
    const float f = fmaf((float)a2, 0x1p-14f, fmaf((float)a1, 0x1p-7f, (float)a0));
    return fmaf(d * s, f, acc);
}

// q4_0: the nibbles n as bytes (0 .. 15), sum (n - 8) x = sum n x - 8 sum x.
__device__ __forceinline__ float mv_dot_digits_q4_0(const unsigned char *w, const XDigits *xd, float acc)
{
    unsigned v[5];
    const unsigned sh = load_words<5>(w, v);
    const float d = half_bits_to_float(__funnelshift_rc(v[0], v[1], sh) & 0xffffu);
    const XWords x = x_words(xd);
    int a[3] = {0, 0, 0};
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const unsigned q = __funnelshift_rc(v[m], v[m + 1], sh + 16); // bytes 4m .. 4m+3
        const int lo = (int)(q & 0x0f0f0f0fu), hi = (int)((q >> 4) & 0x0f0f0f0fu); // values 4m .., 16 + 4m ..
#pragma unroll
        for (int j = 0; j < 3; j++) a[j] = __dp4a(hi, (int)x.w[j][4 + m], __dp4a(lo, (int)x.w[j][m], a[j]));
    }
    return digit_sum(d, xd->scale, a[0] - 8 * xd->sum[0], a[1] - 8 * xd->sum[1], a[2] - 8 * xd->sum[2], acc);
}

template <int W> __global__ void __launch_bounds__(MV_THREADS, 1) mv_kernel(const MatmulArgs a)
{
    grid_dep_enter();
    constexpr int G = fmt_group(W), GB = fmt_group_bytes(W);
    SIFT_DYNAMIC_SMEM(smem);
    __shared__ float red[2][MV_WARPS][8]; // the warps' row sums, by row group parity

    const int R = a.rows_per_block, U = a.mv_u;
    const MvLayout L = mv_layout(W, R, U);
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5, nw = (int)blockDim.x >> 5;
    const int r = lane & (R - 1), gl = lane / R, gstep = 32 / R;
    const int64_t ng = a.k / G;                                     // groups per row
    const int64_t gw0 = ng * warp / nw, gw1 = ng * (warp + 1) / nw; // this warp's slice
    const int nst = (int)((gw1 - gw0 + L.sg - 1) / L.sg);           // its stages per row group
    const int64_t n_groups = (a.n + R - 1) / R;                      // row groups of R rows
    const int64_t my_groups = (int64_t)blockIdx.x < n_groups ? (n_groups - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    const int64_t items = my_groups * nst;
    const int xsf = mv_xslice_floats(W, a.k, nw);
    float *xs = reinterpret_cast<float *>(smem) + (size_t)warp * xsf; // this warp's x slice
    unsigned char *wbuf = smem + (size_t)nw * xsf * sizeof(float) + (size_t)warp * MV_STAGES * L.stage_bytes;
    const unsigned char *wb = static_cast<const unsigned char *>(a.w);
    const uintptr_t wend = reinterpret_cast<uintptr_t>(wb) + (size_t)a.n * a.row_bytes;

    // x's slice, once (the first cp.async group; q4_0 digitizes it below instead)
    constexpr bool XD = W == SIFT_Q4_0;
    const int nx = XD ? 0 : (int)(gw1 - gw0) * G / 4;
    for (int j = lane; j < nx; j += 32) cp_async16_l1(xs + 4 * j + 4 * (j >> 3), a.x + gw0 * G + 4 * j);
    cp_async_commit();

    // Enqueues the next work item (stage in_s of this warp's slice of row group in_rg) into ring
    // slot in_slot. The copies: 32 / R lanes per row, lane `sub` of a row its chunks sub,
    // sub + 32 / R, ... (each warp instruction reads 512 / R consecutive bytes of each of the R
    // rows). Addresses advance by whole stages, so that a stage costs a few instructions beside
    // its copies (64-bit products and ring indices once per row group).
    const int lpr = 32 / R, crow = lane / lpr, sub = lane % lpr;
    const uintptr_t wbase = reinterpret_cast<uintptr_t>(wb);
    const size_t slice0 = (size_t)gw0 * GB;               // the warp's slice within a row, bytes
    const int slice_bytes = (int)((gw1 - gw0) * GB), stage_span = L.sg * GB;
    auto slice_of = [&](int64_t rg) -> uintptr_t { // this lane's copy row's slice in row group rg (0: none)
        const int64_t row = rg * R + crow;
        return rg < n_groups && row < a.n ? wbase + (size_t)row * a.row_bytes + slice0 : 0;
    };
    int64_t in_rg = blockIdx.x;
    uintptr_t in_row = slice_of(in_rg);
    int in_s = 0, in_slot = 0;
    auto issue = [&]() {
        unsigned char *buf = wbuf + in_slot * L.stage_bytes + crow * L.rs;
        if (in_row) {
            const int off = in_s * stage_span;
            const uintptr_t s1 = in_row + (uintptr_t)min(off + stage_span, slice_bytes);
            const uintptr_t base = (in_row + (uintptr_t)off) & ~(uintptr_t)15;
            const int nch = (int)((s1 - base + 15) >> 4);
            const bool tail = s1 + 16 > wend; // the last rows: a chunk may pass the end of w
            for (int c = sub; c < nch; c += lpr) {
                const uintptr_t src = base + 16 * (unsigned)c;
                const int nb = tail && wend - src < 16 ? (int)(wend - src) : 16;
                cp_async16_n(buf + 16 * c, reinterpret_cast<const void *>(src), nb);
            }
        }
        if (++in_slot == MV_STAGES) in_slot = 0;
        if (++in_s == nst) in_s = 0, in_rg += gridDim.x, in_row = slice_of(in_rg);
    };

#pragma unroll
    for (int s = 0; s < MV_STAGES - 1; s++) {
        if (s < items) issue();
        cp_async_commit();
    }
    // q4_0: x's slice as digits, while the first stages' weights are in flight
    XDigits *xd = reinterpret_cast<XDigits *>(xs);
    if constexpr (XD) {
        // 16 blocks' loads at a time, so that their latencies overlap
        const int nb = (int)(gw1 - gw0);
        const float *xg = a.x + gw0 * 32 + lane;
        for (int b0 = 0; b0 < nb; b0 += 16) {
            float v[16];
#pragma unroll
            for (int j = 0; j < 16; j++) v[j] = b0 + j < nb ? __ldg(xg + (b0 + j) * 32) : 0.0f;
#pragma unroll
            for (int j = 0; j < 16; j++)
                if (b0 + j < nb) x_digits<W == SIFT_Q4_0>(v[j], lane, xd + b0 + j);
        }
        __syncwarp();
    }
    int64_t i = 0;
    int slot = 0; // ring slot of item i
    for (int64_t k = 0; k < my_groups; k++) {
        const int64_t n0 = (blockIdx.x + k * gridDim.x) * R;
        const int nrows = (int)min((int64_t)R, a.n - n0);
        const uintptr_t myrow = wbase + (size_t)(n0 + min(r, nrows - 1)) * a.row_bytes + slice0; // this lane's slice
        float acc = 0.0f;
        for (int st = 0; st < nst; st++, i++) {
            cp_async_wait<MV_STAGES - 2>();
            __syncwarp(); // item i (and x) landed for every lane; every lane is done with item i - 1's buffer
            if (i + MV_STAGES - 1 < items) issue();
            cp_async_commit();
            const unsigned char *buf = wbuf + slot * L.stage_bytes;
            if (++slot == MV_STAGES) slot = 0;
            const int gn = min(L.sg, (int)(gw1 - gw0) - st * L.sg);
            if (r < nrows) {
                // the misalignment of this lane's row span within its first chunk (q blocks: it
                // changes from stage to stage)
                const int mis = (int)((myrow + (uintptr_t)(st * stage_span)) & 15);
                const unsigned char *wrow = buf + r * L.rs + mis;
                for (int u = 0; u < U; u++) {
                    const int gi = u * gstep + gl;
                    if (gi >= gn) continue;
                    const int xb = st * L.sg + gi; // the group's index in this warp's slice
                    if constexpr (W == SIFT_Q4_0) acc = mv_dot_digits_q4_0(wrow + gi * GB, xd + xb, acc);
                    else acc = mv_dot<W>(wrow + gi * GB, xs + mv_xpos(xb * G), acc);
                }
            }
        }
        // the row group is complete: each row's lanes by shuffles, then the warps in a fixed order
        for (int o = 16; o >= R; o >>= 1) acc += __shfl_xor_sync(FULL, acc, o);
        if (lane < R) red[k & 1][warp][lane] = acc;
        __syncthreads(); // (the other parity's sums were read before the previous barrier was passed)
        if ((int)threadIdx.x < nrows) {
            float sum = 0.0f;
            for (int w = 0; w < nw; w++) sum += red[k & 1][w][threadIdx.x];
            a.out[n0 + threadIdx.x] = a.bias ? sum + a.bias[n0 + threadIdx.x] : sum;
        }
    }
    cp_async_wait<0>();
}

// The direct kernels' (mvd_kernel, mvq_kernel) R rows from row0 (past the last row of w, the last
// row again: its sums are not stored), and their sums for TOK tokens, zeroed.
template <int R, int TOK>
__device__ __forceinline__ void direct_rows(const MatmulArgs &a, int64_t row0, const unsigned char *(&rows)[R], float (&acc)[TOK][R])
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        rows[r] = static_cast<const unsigned char *>(a.w) + (size_t)min(row0 + r, a.n - 1) * a.row_bytes;
#pragma unroll
        for (int t = 0; t < TOK; t++) acc[t][r] = 0.0f;
    }
}

// Each row's lane sums, for each of the TOK tokens, reduced over the warp by shuffles, stored (+ bias)
// by lane 0 (token t's outputs at out + t N).
template <int R, int TOK>
__device__ __forceinline__ void direct_store(const MatmulArgs &a, int64_t row0, int lane, const float (&acc)[TOK][R])
{
#pragma unroll
    for (int t = 0; t < TOK; t++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float v = acc[t][r];
            for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
            if (lane == 0 && row0 + r < a.n) a.out[t * a.n + row0 + r] = a.bias ? v + a.bias[row0 + r] : v;
        }
}

// mvd_kernel<W, R, TOK>, TOK = 1, 2 or 4 tokens (a decode step of one sequence, or of a batch, TOK
// rows at a time) with f32, f16 or bf16 rows 16-byte aligned: the weights go straight from global
// memory into registers, with no staging, and each weight read serves all TOK tokens. Each warp
// takes R consecutive rows (one block: 8 warps, 8 R rows); lane l reads 16 bytes at 512 c + 16 l of
// each row for chunks c, MVD_U chunks of every row in flight before any is used, and the R rows
// share each x value read. One token's x is copied into shared memory once per block; the TOK rows
// of several are read where they are, through L1, which every block on a multiprocessor shares
// (a copy of TOK x rows in every block made x, not the weights, the larger traffic: on the H200, 4
// tokens of f16 took 2.5x one token's time for q/o, against 1.8x read through L1). A lane keeps one
// sum per row and token; the end reduces them over the warp by shuffles. A standalone prototype of the same design
// (cuda/bench/mv_direct.cu) streamed f16 at 3.7-4.5 TB/s on the H200, where mv_kernel's staging
// through shared memory reached 2.6-3.2 (docs/benchmarks.md).
constexpr int MVD_WARPS = 8, MVD_U = 4;
constexpr int MV_NT_MAX = 4; // tokens a direct kernel takes at once (more: several launches)

template <int W, int R, int TOK> __global__ void __launch_bounds__(32 * MVD_WARPS) mvd_kernel(const MatmulArgs a)
{
    grid_dep_enter();
    constexpr int VPL = W == SIFT_F32 ? 4 : 8, VPC = 32 * VPL; // values per lane and per chunk
    const float *xs = a.x; // [TOK][K]
    if constexpr (TOK == 1) {
        SIFT_DYNAMIC_SMEM(smem);
        float *xc = reinterpret_cast<float *>(smem);
        for (int64_t i = threadIdx.x; i < a.k / 4; i += blockDim.x)
            reinterpret_cast<float4 *>(xc)[i] = __ldg(reinterpret_cast<const float4 *>(a.x) + i);
        __syncthreads();
        xs = xc;
    }
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int64_t row0 = ((int64_t)blockIdx.x * MVD_WARPS + warp) * R;
    if (row0 >= a.n) return;
    const unsigned char *rows[R];
    float acc[TOK][R];
    direct_rows(a, row0, rows, acc);
    const int64_t nch = (a.k + VPC - 1) / VPC;
    for (int64_t c0 = 0; c0 < nch; c0 += MVD_U) {
        uint4 q[MVD_U][R];
#pragma unroll
        for (int u = 0; u < MVD_U; u++) {
            const int64_t e = (c0 + u) * VPC + (int64_t)lane * VPL; // this lane's first value
#pragma unroll
            for (int r = 0; r < R; r++)
                q[u][r] = e < a.k ? ld_once16(rows[r] + (size_t)e * (W == SIFT_F32 ? 4 : 2)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < MVD_U; u++) {
            const int64_t e = (c0 + u) * VPC + (int64_t)lane * VPL;
            if (e >= a.k) continue;
#pragma unroll
            for (int t = 0; t < TOK; t++)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float *x = xs + t * a.k + e;
                    if constexpr (W == SIFT_F32) acc[t][r] = mv_dot<SIFT_F32>(reinterpret_cast<const unsigned char *>(&q[u][r]), x, acc[t][r]);
                    else acc[t][r] = dot8_words(q[u][r], x, acc[t][r], W == SIFT_BF16);
                }
        }
    }
    direct_store(a, row0, lane, acc);
}

// mvq_kernel<R, U, TOK>, TOK = 1, 2 or 4 tokens with q8_0 rows of K a multiple of 256 (planar: a
// row is K int8 quants, then K / 32 f16 scales, 34 K / 32 bytes, so every row and its quants start
// 16-byte aligned): the direct design for q8_0. x is taken as two int8 digits per value, x = s (d0 +
// d1 / 2^7) per block of 32 (XDigits2), made once by x_digits_kernel into scratch, and the blocks read the
// digits through L1 (digitized by every block into its shared memory, on an H100 gate/up took 27.1
// us against 24.3 and down 28.6 against 26.3: docs/benchmarks.md). Each warp takes R consecutive rows; lane l reads the 16 quants at 512 c + 16 l
// of each row (and their block's scale) for chunks c, U chunks of every row in flight before any is
// used; 16 quants cost 8 dp4a and one FMA per token, and each weight read serves all TOK tokens. The
// sums reduce over the warp by shuffles. Two digits rather than mv_kernel's three cut the integer
// work by a third; the prototype (cuda/bench/mv_direct.cu) measured NMSE 3.6e-9 against f64, far
// inside the conformance bound. XDigits2 and the digitizing: xdigits.cuh.
constexpr int MVQ_WARPS = 8;

template <int R, int U, int TOK> __global__ void __launch_bounds__(32 * MVQ_WARPS) mvq_kernel(const MatmulArgs a)
{
    grid_dep_enter();
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int64_t nb = a.k / 32, nch = (a.k + 511) / 512; // blocks of 32 and chunks of 512 quants per row
    const XDigits2 *xd = static_cast<const XDigits2 *>(a.xd); // [TOK][K / 32]
    const int64_t row0 = ((int64_t)blockIdx.x * MVQ_WARPS + warp) * R;
    if (row0 >= a.n) return;
    const unsigned char *rows[R];
    float acc[TOK][R];
    direct_rows(a, row0, rows, acc);
    const int h = lane & 1;
    for (int64_t c0 = 0; c0 < nch; c0 += U) {
        uint4 q[U][R];
        unsigned short sc[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t e = (c0 + u) * 512 + 16 * lane; // this lane's first quant
#pragma unroll
            for (int r = 0; r < R; r++) {
                q[u][r] = e < a.k ? ld_once16(rows[r] + e) : make_uint4(0, 0, 0, 0);
                sc[u][r] = e < a.k ? __ldg(reinterpret_cast<const unsigned short *>(rows[r] + a.k) + e / 32) : 0;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t e = (c0 + u) * 512 + 16 * lane;
            if (e >= a.k) continue;
#pragma unroll
            for (int t = 0; t < TOK; t++) {
                const XDigits2 *b = xd + t * nb + e / 32;
                const uint4 x0 = __ldg(&b->d[0][h]), x1 = __ldg(&b->d[1][h]);
                const float s = __ldg(&b->scale);
                const unsigned xw0[4] = {x0.x, x0.y, x0.z, x0.w}, xw1[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const unsigned qw[4] = {q[u][r].x, q[u][r].y, q[u][r].z, q[u][r].w};
                    int a0 = 0, a1 = 0;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        a0 = __dp4a((int)qw[i], (int)xw0[i], a0);
                        a1 = __dp4a((int)qw[i], (int)xw1[i], a1);
                    }
                    acc[t][r] = fmaf(half_bits_to_float(sc[u][r]) * s, fmaf((float)a1, 0x1p-7f, (float)a0), acc[t][r]);
                }
            }
        }
    }
    direct_store(a, row0, lane, acc);
}

// ---- tiled --------------------------------------------------------------------------------------

constexpr int GT = 64, GN = 64, GK = 32, GPAD = 4;

__global__ void __launch_bounds__(NT) gemm_kernel(const MatmulArgs a, const int wvec, const int xvec)
{
    grid_dep_enter();
    __shared__ __align__(16) float Xs[2][GK][GT + GPAD];
    __shared__ __align__(16) float Ws[2][GK][GN + GPAD];
    const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t t0 = (int64_t)blockIdx.x * GT, n0 = (int64_t)blockIdx.y * GN;
    // loader: row (and token) lr of the tile, values 8 * lp .. 8 * lp + 7 of the K step
    const int lr = tid / 4, lp = tid % 4;
    const bool wrow_ok = n0 + lr < a.n, xrow_ok = t0 + lr < a.t;
    const unsigned char *wrow = static_cast<const unsigned char *>(a.w) + (wrow_ok ? (size_t)(n0 + lr) * a.row_bytes : 0);
    const float *xrow = a.x + (xrow_ok ? (t0 + lr) * a.k : 0);
    const int nk = (int)((a.k + GK - 1) / GK);

    float wv[8], xv[8];
    auto load = [&](int kt) {
        const int64_t k0 = (int64_t)kt * GK + 8 * lp;
        if (wrow_ok) {
            weight_load8(wrow, a.wtype, k0, a.k, wvec != 0, wv);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) wv[i] = 0.0f;
        }
        if (xrow_ok && xvec && k0 + 8 <= a.k) {
            const float4 p = __ldg(reinterpret_cast<const float4 *>(xrow + k0));
            const float4 q = __ldg(reinterpret_cast<const float4 *>(xrow + k0 + 4));
            xv[0] = p.x, xv[1] = p.y, xv[2] = p.z, xv[3] = p.w, xv[4] = q.x, xv[5] = q.y, xv[6] = q.z, xv[7] = q.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) xv[i] = xrow_ok && k0 + i < a.k ? __ldg(xrow + k0 + i) : 0.0f;
        }
    };
    auto store = [&](int b) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            Ws[b][8 * lp + i][lr] = wv[i];
            Xs[b][8 * lp + i][lr] = xv[i];
        }
    };

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    load(0);
    store(0);
    __syncthreads();
    for (int kt = 0; kt < nk; kt++) {
        const int b = kt & 1;
        if (kt + 1 < nk) load(kt + 1);
#pragma unroll 8
        for (int kk = 0; kk < GK; kk++) {
            const float4 xa = *reinterpret_cast<const float4 *>(&Xs[b][kk][ty * 4]);
            const float4 wa = *reinterpret_cast<const float4 *>(&Ws[b][kk][tx * 4]);
            const float xr[4] = {xa.x, xa.y, xa.z, xa.w}, wr[4] = {wa.x, wa.y, wa.z, wa.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(xr[i], wr[j], acc[i][j]);
        }
        if (kt + 1 < nk) store(b ^ 1); // the other buffer: everyone finished reading it last step
        __syncthreads();
    }
    store_tile_sums(acc, a.out, a.bias, a.t, a.n, t0 + ty * 4, n0 + tx * 4);
}

// ---- host -----------------------------------------------------------------------------------------

using MvKernel = void (*)(MatmulArgs);

static MvKernel mv_kernel_for(int wtype)
{
    switch (wtype) {
    case SIFT_F32: return &mv_kernel<SIFT_F32>;
    case SIFT_F16: return &mv_kernel<SIFT_F16>;
    case SIFT_BF16: return &mv_kernel<SIFT_BF16>;
    default: return &mv_kernel<SIFT_Q4_0>;
    }
}

// The direct matrix-vector kernels for R rows per warp (1 or 2; q8_0 always 2) and nt tokens (1, 2 or 4); q8_0 with
// U = 4 chunks in flight.
template <int W, int R> static MvKernel mvd_for_tokens(int nt)
{
    if constexpr (R == 1) return nt == 1 ? &mvd_kernel<W, 1, 1> : nt == 2 ? &mvd_kernel<W, 1, 2> : &mvd_kernel<W, 1, 4>;
    else return &mvd_kernel<W, R, 1>; // several tokens: one row a warp (matvec_launch)
}
template <int R> static MvKernel mvq_for_tokens(int nt)
{
    return nt == 1 ? &mvq_kernel<R, 4, 1> : nt == 2 ? &mvq_kernel<R, 4, 2> : &mvq_kernel<R, 4, 4>;
}
static MvKernel direct_kernel_for(int wtype, int R, int nt)
{
    switch (wtype) {
    case SIFT_Q8_0: return mvq_for_tokens<2>(nt); // two rows a warp at every shape (sift_cuda_matmul_plan)
    case SIFT_F32: return R == 1 ? mvd_for_tokens<SIFT_F32, 1>(nt) : mvd_for_tokens<SIFT_F32, 2>(nt);
    case SIFT_F16: return R == 1 ? mvd_for_tokens<SIFT_F16, 1>(nt) : mvd_for_tokens<SIFT_F16, 2>(nt);
    default: return R == 1 ? mvd_for_tokens<SIFT_BF16, 1>(nt) : mvd_for_tokens<SIFT_BF16, 2>(nt);
    }
}

// The shared memory mvd_kernel of one token needs for x.
static size_t direct_x_bytes(int64_t k) { return (size_t)k * sizeof(float); }

// Tokens a direct kernel takes at once for a product of t tokens: the most of 4, 2, 1 up to t.
static int direct_tokens(int64_t t)
{
    int nt = MV_NT_MAX;
    while (nt > t) nt /= 2;
    return nt;
}

// Dynamic shared memory of a plan of nw warps: their x slices, then their rings.
static size_t mv_smem(int wtype, int64_t k, int R, int u, int nw)
{
    return (size_t)nw * ((size_t)mv_xslice_floats(wtype, k, nw) * sizeof(float) +
                         (size_t)MV_STAGES * (size_t)mv_layout(wtype, R, u).stage_bytes);
}

// The fewest rows per row group: q4_0 keeps 8 (its x values outweigh its weights: they must be
// shared by many rows), the others down to 1.
static int mv_rmin(int wtype) { return wtype == SIFT_Q4_0 ? 8 : 1; }

// U for R rows per row group and nw warps: as many groups per lane and stage as MV_STAGE_BUDGET
// bytes of weights allow, and the shared memory left beside the x slices (1 .. 8; 0: not even 1 fits).
static int mv_groups_per_lane(const sift_cuda_device *dev, int wtype, int64_t k, int R, int nw)
{
    for (int u = 8; u >= 1; u--)
        if ((u == 1 || 32 * u * fmt_group_bytes(wtype) <= MV_STAGE_BUDGET) && mv_smem(wtype, k, R, u, nw) + 2048 <= dev->smem_optin)
            return u;
    return 0;
}

} // namespace sift_cuda

using namespace sift_cuda;

static MatmulArgs matmul_args(const sift_node *n, const sift_cuda_plan *plan)
{
    const sift_tensor *w = n->src[1];
    MatmulArgs a = {};
    a.x = dev_ptr<const float>(n->src[0]);
    a.w = dev_ptr<const void>(w);
    a.bias = n->n_src > 2 ? dev_ptr<const float>(n->src[2]) : nullptr;
    a.out = dev_ptr<float>(n->dst);
    a.t = n->src[0]->shape[0];
    a.k = n->src[0]->shape[1];
    a.n = w->shape[0];
    a.wtype = (int)w->dtype;
    a.row_bytes = sift_dtype_row_bytes(w->dtype, w->shape[1]);
    if (plan) {
        a.rows_per_block = plan->rows_per_block;
        a.mv_u = plan->groups_per_lane;
    }
    return a;
}

cudaError_t sift_cuda::matmul_init(const sift_cuda_device *dev)
{
    // the plans size the shared memory per shape (x slices + rings), up to the device's limit
    for (const sift_dtype w : {SIFT_F32, SIFT_F16, SIFT_BF16, SIFT_Q4_0}) {
        const void *fn = reinterpret_cast<const void *>(mv_kernel_for(w));
        cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(dev->smem_optin - 1024));
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
        if (e != cudaSuccess) return e;
    }
    for (const sift_dtype w : {SIFT_F32, SIFT_F16, SIFT_BF16})
        for (int R = 1; R <= 2; R++)
            for (int nt = 1; nt <= MV_NT_MAX; nt *= 2) {
                const cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void *>(direct_kernel_for(w, R, nt)),
                                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(dev->smem_optin - 1024));
                if (e != cudaSuccess) return e;
            }
    return cudaSuccess;
}

// The nodes matmul_kquant.cu plans and launches: K-quant weights, and q4_0 of one token where its
// direct kernel takes them (on an H100 q/o 11.5 -> 8.5 us, gate/up 26.1 -> 24.7, down 24.5 -> 23.9,
// logits 184 -> 166 against mv_kernel: docs/benchmarks.md).
static bool kquant_takes(const sift_node *n)
{
    const int w = (int)n->src[1]->dtype;
    return is_kquant(w) || (w == SIFT_Q4_0 && kquant_direct_takes(n));
}

// path (MM_*); matrix-vector: warps, rows_per_block, groups_per_lane, smem; q8_0 direct:
// scratch_bytes (x's digits).
extern "C" cudaError_t sift_cuda_matmul_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    if (kquant_takes(n)) return kquant_matmul_plan(dev, n, plan);
    MatmulArgs a = matmul_args(n, nullptr);
    if (a.t <= 0 || a.n <= 0) return cudaSuccess;
    // A few tokens (a batched decode step: a row per sequence) run the matrix-vector kernels: the
    // direct ones take up to MV_NT_MAX tokens a launch (each weight read serves them all), mv_kernel
    // one (sift_cuda_matmul_launch). The tiled kernel, made for prefill's tiles of 64 tokens,
    // streams the weights far slower at these T. Each token's x row keeps x's alignment where K % 4 == 0.
    const int64_t tokens = a.t <= MV_TOKENS ? a.t : 1;
    if (a.t > 1 && a.t <= MV_TOKENS && a.k % 4 == 0) a.t = 1;
    const int w = a.wtype;
    const bool quant = w == SIFT_Q4_0;
    const uintptr_t wp = reinterpret_cast<uintptr_t>(a.w), xp = reinterpret_cast<uintptr_t>(a.x);
    // matrix-vector: one token, x 16-byte aligned, whole groups; f32/f16/bf16 rows 16-byte aligned
    // (q rows are even, which the funnel shifts need)
    const bool vec = a.t == 1 && a.k > 0 && xp % 16 == 0 && a.k % fmt_group(w) == 0 &&
                     (quant ? wp % 2 == 0 : wp % 16 == 0 && a.row_bytes % 16 == 0);
    // mvd_kernel: one token's x must fit in shared memory
    const bool direct_fits = a.t == 1 && direct_x_bytes(a.k) + 1024 <= dev->smem_optin;
    // q8_0 (planar rows): the direct kernel where rows are 16-byte aligned (K % 256 == 0), else the
    // tiled kernel. R = 2 rows a warp at every shape: the prototype's best for the down
    // projection's K = 14336 and the logits' 10^5 rows on the H200, and on an H100 (x's digits then
    // made in every block) q/o 13.2 -> 11.9 us, 32K dense decode 175.4 / 175.8 -> 178.4 / 177.7
    // tokens/s against 1 row for N < 65536 and K < 8192; 4 or 8 chunks in flight, 8 lost
    // (docs/benchmarks.md).
    if (w == SIFT_Q8_0) {
        if (a.t == 1 && a.k > 0 && a.k % 256 == 0 && wp % 16 == 0) {
            plan->rows_per_block = 2;
            if ((a.n + MVQ_WARPS * plan->rows_per_block - 1) / (MVQ_WARPS * plan->rows_per_block) > 2147483647)
                return beyond_limit(plan, "a matrix-vector product of more than 2^33 rows");
            plan->path = MM_DIRECT;
            plan->warps = MVQ_WARPS;
            plan->scratch_bytes = (size_t)tokens * (size_t)(a.k / 32) * sizeof(XDigits2); // x's digits
            return cudaSuccess;
        }
        if ((a.t + GT - 1) / GT > 2147483647 || (a.n + GN - 1) / GN > 65535)
            return beyond_limit(plan, "a tiled matmul of more than 2^37 tokens or 2^22 rows of w");
        plan->path = MM_TILED;
        return cudaSuccess;
    }
    // f32/f16/bf16 with x in shared memory: the direct kernel, 2 rows a warp where that still gives
    // every multiprocessor two blocks, else 1 (the k/v products' 1024 rows)
    if (vec && !quant && direct_fits) {
        if ((a.n + MVD_WARPS - 1) / MVD_WARPS > 2147483647) return beyond_limit(plan, "a matrix-vector product of more than 2^34 rows");
        plan->path = MM_DIRECT;
        plan->warps = MVD_WARPS;
        plan->rows_per_block = a.n >= (int64_t)2 * 2 * MVD_WARPS * dev->sm_count ? 2 : 1;
        plan->smem = direct_x_bytes(a.k);
        return cudaSuccess;
    }
    // R: 8 rows per row group unless that leaves a multiprocessor without one, where x's share of
    // the traffic allows fewer; U: groups per lane and stage (0 where not even one fits beside the
    // x slices: K of tens of thousands)
    const int rmin = mv_rmin(w);
    int R = 8;
    while (R > rmin && (a.n + R - 1) / R < (int64_t)dev->sm_count) R /= 2;
    // warps: 16, fewer where their rings and x do not fit (sm_86/89's 99 KiB, wide K)
    int nw = MV_WARPS, u = 0;
    while (vec && nw >= 4 && (u = mv_groups_per_lane(dev, w, a.k, R, nw)) == 0) nw /= 2;
    if (u == 0) {
        if ((a.t + GT - 1) / GT > 2147483647 || (a.n + GN - 1) / GN > 65535)
            return beyond_limit(plan, "a tiled matmul of more than 2^37 tokens or 2^22 rows of w");
        plan->path = MM_TILED;
        return cudaSuccess;
    }
    const size_t smem = mv_smem(w, a.k, R, u, nw);
    plan->path = MM_VEC;
    plan->warps = nw;
    plan->rows_per_block = R;
    plan->groups_per_lane = u;
    plan->smem = smem;
    return cudaSuccess;
}

// The matrix-vector product of nt tokens from a.x on the plan's path: MM_VEC one token, MM_DIRECT
// nt = 1, 2 or 4 (one token's x in shared memory, several through L1).
static cudaError_t matvec_launch(const sift_cuda_device *dev, const sift_cuda_plan *plan, const MatmulArgs &a, int nt,
                                 cudaStream_t st)
{
    if (plan->path == MM_VEC) {
        // one block per multiprocessor (fewer for fewer row groups); the warps stream row groups
        const int64_t groups = (a.n + a.rows_per_block - 1) / a.rows_per_block;
        const unsigned blocks = (unsigned)(groups < dev->sm_count ? groups : dev->sm_count);
        return launch(mv_kernel_for(a.wtype), dim3(blocks), dim3(32 * plan->warps), plan->smem, st, a);
    }
    // Several tokens: q8_0 two rows a warp, which halves the x digits read per weight (on the H200,
    // 4 and 16 tokens: 1 row 22.0 / 60.4 us for q/o, 2 rows 16.8 / 47.0, 4 rows 21.5 / 51.9; 2 rows
    // gave the fastest decode step, docs/benchmarks.md); f32/f16/bf16 one (with two, ptxas spilled
    // the x values it hoisted).
    const int R = nt == 1 ? a.rows_per_block : a.wtype == SIFT_Q8_0 ? 2 : 1;
    const int64_t per_block = (int64_t)plan->warps * R;
    return launch(direct_kernel_for(a.wtype, R, nt), dim3((unsigned)((a.n + per_block - 1) / per_block)),
                  dim3(32 * plan->warps), nt == 1 ? plan->smem : 0, st, a);
}

extern "C" cudaError_t sift_cuda_matmul_launch(const sift_cuda_device *dev, const sift_node *n,
                                               const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    if (kquant_takes(n)) return kquant_matmul_launch(dev, n, plan, scratch, st);
    MatmulArgs a = matmul_args(n, plan);
    switch (plan->path) {
    case MM_VEC:
    case MM_DIRECT: // up to MV_TOKENS tokens: MM_VEC one a launch, MM_DIRECT 4, 2, 1 (direct_tokens)
        if (plan->path == MM_DIRECT && a.wtype == SIFT_Q8_0) { // x's digits, once for all blocks
            const int64_t nb = a.t * (a.k / 32);
            const cudaError_t e = launch_x_digits<false>(a.x, nb, static_cast<XDigits2 *>(scratch), st);
            if (e != cudaSuccess) return e;
            a.xd = scratch;
        }
        for (int64_t t = 0; t < a.t;) {
            const int nt = plan->path == MM_DIRECT ? direct_tokens(a.t - t) : 1;
            MatmulArgs part = a;
            part.t = nt;
            part.x = a.x + t * a.k;
            part.out = a.out + t * a.n;
            if (a.xd) part.xd = static_cast<const XDigits2 *>(a.xd) + t * (a.k / 32);
            const cudaError_t e = matvec_launch(dev, plan, part, nt, st);
            if (e != cudaSuccess) return e;
            t += nt;
        }
        return cudaSuccess;
    case MM_TILED: {
        const bool wvec = reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.row_bytes % 16 == 0;
        const bool xvec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.k % 4 == 0;
        const dim3 grid((unsigned)((a.t + GT - 1) / GT), (unsigned)((a.n + GN - 1) / GN));
        return launch(gemm_kernel, grid, dim3(NT), 0, st, a, (int)wvec, (int)xvec);
    }
    default: return cudaSuccess;
    }
}
