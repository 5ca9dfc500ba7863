// The transformer ops around attention and matmul (include/sift.h; the CPU reference is
// backends/cpu/cpu_model_ops.c): get_rows, rmsnorm, layernorm, rope, add, swiglu, silu, kv_write; the
// small ops of "saving work between steps" (SPEC §4, §7): sel_cache_check, fill_range, mean_rows; and
// TokenButler's neighbor_fetch and kv_gather, a selection's K or V rows copied out of the cache
// (backends/cpu/cpu_backend.c: cpu_neighbor_fetch, cpu_kv_gather). All are memory
// bound and small next to the matmuls (a decode step moves a few KiB through each), so each is one
// plain kernel with coalesced accesses; the point is one launch per op and the reference's
// arithmetic (IEEE division and square root, accurate sin/cos/exp, no fast math).
#include "common.cuh"
#include "weights.cuh"

namespace sift_cuda {

// The kernels' parameters (passed by value), built from the node by the launches.

// get_rows: out[t] = row ids[t] of table [rows][e] as f32 (zeros for an id outside [0, rows)).
struct GetRowsArgs {
    const void *table;
    int wtype;          // the table's sift_dtype
    int64_t rows, e;
    size_t row_bytes;
    const int32_t *ids; // [t]
    int64_t t;
    float *out;         // [t][e]
};

// rmsnorm: out[t] = x[t] * (1 / sqrt(mean(x[t]^2) + eps)) * w.
struct RmsnormArgs {
    const float *x, *w;
    float *out;
    int64_t rows, e;
    float eps;
};

// layernorm: out[t] = (x[t] - mean) * (1 / sqrt(var + eps)) * w + b, var the biased variance of
// x[t] - mean (the mean comes out first: rows with a large common offset keep their precision).
struct LayernormArgs {
    const float *x, *w, *b; // b: NULL without a bias
    float *out;
    int64_t rows, e;
    float eps;
};

// rope of x [t][h][d] into out; pair i of the first n_rot elements turns by
// theta = (pos0 + t) * freq[i] / factors[i], freq the node's rope_freq.
struct RopeKernelArgs {
    const float *x;
    const float *factors; // [n_rot / 2] or NULL
    float *out;
    int64_t t;
    int h, d, n_rot, neox;
    int64_t pos0;
    float freq[SIFT_MAX_HEAD_DIM / 2];
};

// add: out = a + b; swiglu: out = a / (1 + exp(-a)) * b; silu: out = a / (1 + exp(-a)) (no b); n elements.
enum { ELT_ADD, ELT_SWIGLU, ELT_SILU };
struct EltwiseArgs {
    const float *a, *b;
    float *out;
    int64_t n;
    int op; // ELT_*
};

// kv_write: cache[h][pos0 + t] = src[t][h] (src f32 [t][h][d]; cache f16, rounded to nearest even
// as sift_float_to_half rounds, or f32, or i8: rows of d int8 and their f32 max |x|, d + 4 bytes);
// rows without a page are not written.
struct KvWriteArgs {
    const float *src;
    RowMap cache;  // base is writable
    int64_t ncap;  // logical rows of the cache
    int f16, i8;
    int64_t t;
    int h, d;
    int64_t pos0;
};

// sel_cache_check (include/sift.h): one block; state f32 [qn + 4] = q_ref, then REUSE, HITS,
// STEPS, VALID (the SIFT_SEL_CACHE_* order).
struct SelCacheArgs {
    const float *q; // [qn]
    float *state;
    int64_t qn;
    float theta;
    int full;
    int vec;        // q and state 16-byte aligned and qn a multiple of 4: vector loads
};

// fill_range: idx[l][col0 + i] = start + i for i < len - col0, every list l < lists.
struct FillRangeArgs {
    int32_t *idx;
    int64_t lists, len, col0, start;
};

// mean_rows: out[i] = (sum over t in order of x[t][i]) / rows, as the CPU reference sums.
struct MeanRowsArgs {
    const float *x;
    float *out;
    int64_t rows, e;
};

// neighbor_fetch (include/sift.h): per list, in i32 [lists][count] laid out as select's output
// (sink | chosen | window) becomes out [lists][count + chosen]: sink and chosen entries, then for
// chosen entry i (value c) c + 1, or -1 when that is chosen already (the next chosen entry: lists
// ascend) or past the candidates [first, cand_end), then the window.
struct NeighborArgs {
    const int32_t *in;
    int32_t *out;
    int64_t lists, sink, chosen, win_count, cand_end;
};

// kv_gather (include/sift.h): out[g][col0 + i] = row idx[l][i] of KV head g of the cache (l = 0
// for a shared list, else g), copied in units of U (16, 4 or 2 bytes: what the rows' alignment
// allows); zeros where the row is absent (kv_locate: outside [0, ncap), or on a page outside the
// pools). out's other columns are not touched; a set predicate (skip) leaves out as it was.
struct KvGatherArgs {
    RowMap kv;          // the cache (a host pool's rows read in place, across the host link)
    int64_t ncap;       // logical rows of the cache
    int f16;            // 2-byte elements (else 4): kv_at's strides are in elements
    const int32_t *idx; // [lists][count]
    void *out;          // [hkv][ocount][d]
    const float *skip;  // the predicate (sift_graph_skip_if), or NULL
    int64_t count, lists, units; // units per row
    int64_t ocount, col0;        // out's rows per KV head; the row of entry 0 (col0 + count <= ocount)
};

// ---- get_rows: one block per (token, slice of NT * 8 elements) ---------------------------------

constexpr int GR_PER_THREAD = 8;

__global__ void __launch_bounds__(NT) get_rows_kernel(const GetRowsArgs a)
{
    grid_dep_enter();
    const int64_t t = blockIdx.y;
    const int64_t e0 = (int64_t)blockIdx.x * NT * GR_PER_THREAD;
    const int32_t id = __ldg(a.ids + t);
    const bool ok = id >= 0 && (int64_t)id < a.rows;
    const unsigned char *row = static_cast<const unsigned char *>(a.table) + (ok ? (size_t)id * a.row_bytes : 0);
    float *out = a.out + t * a.e;
#pragma unroll
    for (int i = 0; i < GR_PER_THREAD; i++) {
        const int64_t k = e0 + i * NT + (int64_t)threadIdx.x;
        if (k < a.e) out[k] = ok ? weight_at(row, a.wtype, k, a.e) : 0.0f;
    }
}

// ---- rmsnorm: one block per row -----------------------------------------------------------------

__device__ __forceinline__ float block_sum(float x)
{
    __shared__ float part[NT / 32];
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    x = warp_sum(x);
    if (lane == 0) part[warp] = x;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) s += part[w];
    return s; // every thread
}

// Rows are walked in batches: each thread issues NORM_BATCH loads (elements i, i + NT, ...) before
// it uses any, where a loop of one load and one add per trip waited out every load in turn.
constexpr int NORM_BATCH = 8;

// The row's sum of (x - shift)^2 (square) or of x, in every thread.
__device__ __forceinline__ float row_sum(const float *x, int64_t e, float shift, bool square)
{
    float acc = 0.0f;
    for (int64_t i0 = threadIdx.x; i0 < e; i0 += (int64_t)NT * NORM_BATCH) {
        float v[NORM_BATCH];
#pragma unroll
        for (int j = 0; j < NORM_BATCH; j++) v[j] = i0 + j * NT < e ? x[i0 + j * NT] : 0.0f;
#pragma unroll
        for (int j = 0; j < NORM_BATCH; j++) {
            const float d = __fsub_rn(v[j], shift);
            if (i0 + j * NT < e) acc = square ? fmaf(d, d, acc) : acc + v[j];
        }
    }
    return block_sum(acc);
}

// A row of at most NT * PT values: each thread loads its PT values of x and of w at once and keeps
// them in registers, so the row costs one round of loads in place of three (the sum, then x and w
// again). The general kernel below walks longer rows.
template <int PT> __global__ void __launch_bounds__(NT) rmsnorm_regs_kernel(const RmsnormArgs a)
{
    grid_dep_enter();
    const float *x = a.x + (int64_t)blockIdx.x * a.e;
    float *out = a.out + (int64_t)blockIdx.x * a.e;
    float v[PT], w[PT], acc = 0.0f;
#pragma unroll
    for (int j = 0; j < PT; j++) {
        const int64_t i = (int64_t)threadIdx.x + j * NT;
        v[j] = i < a.e ? x[i] : 0.0f;
        w[j] = i < a.e ? __ldg(a.w + i) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < PT; j++) acc = fmaf(v[j], v[j], acc);
    const float inv = 1.0f / sqrtf(block_sum(acc) / (float)a.e + a.eps);
#pragma unroll
    for (int j = 0; j < PT; j++) {
        const int64_t i = (int64_t)threadIdx.x + j * NT;
        if (i < a.e) out[i] = __fmul_rn(__fmul_rn(v[j], inv), w[j]);
    }
}

__global__ void __launch_bounds__(NT) rmsnorm_kernel(const RmsnormArgs a)
{
    grid_dep_enter();
    const float *x = a.x + (int64_t)blockIdx.x * a.e;
    float *out = a.out + (int64_t)blockIdx.x * a.e;
    const float inv = 1.0f / sqrtf(row_sum(x, a.e, 0.0f, true) / (float)a.e + a.eps);
    for (int64_t i0 = threadIdx.x; i0 < a.e; i0 += (int64_t)NT * NORM_BATCH) {
        float v[NORM_BATCH], w[NORM_BATCH];
#pragma unroll
        for (int j = 0; j < NORM_BATCH; j++) {
            const int64_t i = i0 + j * NT;
            v[j] = i < a.e ? x[i] : 0.0f;
            w[j] = i < a.e ? __ldg(a.w + i) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NORM_BATCH; j++)
            if (i0 + j * NT < a.e) out[i0 + j * NT] = __fmul_rn(__fmul_rn(v[j], inv), w[j]);
    }
}

// ---- layernorm: one block per row ------------------------------------------------------------------

// Three passes over the row (it stays in L1/L2): the sum, then the sum of squares of x - mean, then
// the output with the reference's operations in its order (no contraction into FMAs).
__global__ void __launch_bounds__(NT) layernorm_kernel(const LayernormArgs a)
{
    grid_dep_enter();
    const float *x = a.x + (int64_t)blockIdx.x * a.e;
    float *out = a.out + (int64_t)blockIdx.x * a.e;
    const float mean = row_sum(x, a.e, 0.0f, false) / (float)a.e;
    __syncthreads(); // block_sum's partials are reused: everyone has read them
    const float inv = 1.0f / sqrtf(row_sum(x, a.e, mean, true) / (float)a.e + a.eps);
    for (int64_t i0 = threadIdx.x; i0 < a.e; i0 += (int64_t)NT * NORM_BATCH) {
        float v[NORM_BATCH], w[NORM_BATCH], b[NORM_BATCH];
#pragma unroll
        for (int j = 0; j < NORM_BATCH; j++) {
            const int64_t i = i0 + j * NT;
            v[j] = i < a.e ? x[i] : 0.0f;
            w[j] = i < a.e ? __ldg(a.w + i) : 0.0f;
            b[j] = i < a.e && a.b ? __ldg(a.b + i) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NORM_BATCH; j++) {
            const float y = __fmul_rn(__fmul_rn(__fsub_rn(v[j], mean), inv), w[j]);
            if (i0 + j * NT < a.e) out[i0 + j * NT] = __fadd_rn(y, b[j]);
        }
    }
}

// ---- rope: one thread per pair of elements ------------------------------------------------------

// sin and cos of a float angle as sinpi/cospi of theta / pi in double, rounded to float: within an
// ulp or so of the correctly rounded values (the CPU reference's sinf/cosf) for every angle a
// position up to 2^31 can give, and without the Payne-Hanek reduction of sinf/cosf for large
// arguments, which needs local memory.
__device__ __forceinline__ void rope_sincos(float theta, float &s, float &c)
{
    const double u = (double)theta / 3.141592653589793;
    double sd, cd;
#ifdef SIFT_CUDA_EMU
    const long double pi = 3.14159265358979323846264338327950288L;
    sd = (double)sinl((long double)u * pi);
    cd = (double)cosl((long double)u * pi);
#else
    sincospi(u, &sd, &cd);
#endif
    s = (float)sd;
    c = (float)cd;
}

// Pair j < n_rot/2 of a row is rotated (adjacent: elements 2j, 2j+1; neox: j, j + n_rot/2); pairs
// j >= n_rot/2 are elements 2j, 2j+1 (the last one alone when D is odd) of the part that passes
// through.

__global__ void __launch_bounds__(NT) rope_kernel(const __grid_constant__ RopeKernelArgs a)
{
    grid_dep_enter();
    const int half = (a.d + 1) / 2, rh = a.n_rot / 2;
    const int64_t total = a.t * a.h * half;
    const int64_t p = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (p >= total) return;
    const int j = (int)(p % half);
    const int64_t row = p / half, t = row / a.h;
    const float *xi = a.x + row * a.d;
    float *o = a.out + row * a.d;
    if (j >= rh) {
        o[2 * j] = xi[2 * j];
        if (2 * j + 1 < a.d) o[2 * j + 1] = xi[2 * j + 1];
        return;
    }
    const float pos = (float)(a.pos0 + t);
    float theta = __fmul_rn(pos, a.freq[j]);
    if (a.factors) theta = __fdiv_rn(theta, __ldg(a.factors + j));
    float c, s;
    rope_sincos(theta, s, c);
    const int ia = a.neox ? j : 2 * j, ib = a.neox ? j + rh : 2 * j + 1;
    const float xa = xi[ia], xb = xi[ib];
    o[ia] = __fsub_rn(__fmul_rn(xa, c), __fmul_rn(xb, s));
    o[ib] = __fadd_rn(__fmul_rn(xa, s), __fmul_rn(xb, c));
}

// ---- add, swiglu, silu ----------------------------------------------------------------------------

__global__ void __launch_bounds__(NT) eltwise_kernel(const EltwiseArgs a)
{
    grid_dep_enter();
    const int64_t stride = (int64_t)gridDim.x * NT;
    for (int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x; i < a.n; i += stride) {
        const float x = a.a[i];
        if (a.op == ELT_ADD) a.out[i] = __fadd_rn(x, a.b[i]);
        else {
            const float s = __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); // silu(x)
            a.out[i] = a.op == ELT_SWIGLU ? __fmul_rn(s, a.b[i]) : s;
        }
    }
}

// ---- kv_write ------------------------------------------------------------------------------------

// sift_float_to_half (engine/core.c), bit for bit: round to nearest even, NaN -> sign | 0x7e00.
__device__ __forceinline__ uint16_t float_to_half_bits(float f)
{
    const uint32_t x = __float_as_uint(f);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { // subnormal half: value / 2^-24 rounded to nearest even (exact scaling)
        const float m = rintf(__uint_as_float(ax) * 16777216.0f);
        return (uint16_t)(sign | (uint32_t)m);
    }
    const uint32_t exp = (ax >> 23) - 127 + 15, man = ax & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    const uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

// Rows are located through kv_locate / kv_at (common.cuh), the address map every K/V kernel uses:
// a paged cache's row without a page is not written.
__global__ void __launch_bounds__(NT) kv_write_kernel(const KvWriteArgs a)
{
    grid_dep_enter();
    const int64_t total = a.t * a.h * a.d;
    const int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (i >= total) return;
    const int c = (int)(i % a.d);
    const int64_t row = i / a.d, t = row / a.h;
    const int h = (int)(row % a.h);
    const int32_t r = kv_locate(a.cache, a.ncap, a.pos0 + t);
    if (r < 0) return;
    const float v = a.src[i];
    if (a.f16) kv_at<uint16_t>(a.cache, h, r)[c] = float_to_half_bits(v);
    else kv_at<float>(a.cache, h, r)[c] = v;
}

// An i8 cache (include/sift.h; CPU: cpu_quantize_row in backends/cpu/cpu_model_ops.c): one warp per
// row of src, 8 rows a block; lane l takes values l, l + 32, ... (coalesced loads, byte stores, so any
// d and any byte alignment of the cache). m = max |x[i]| (a max: exact in any order), then
// q[i] = x[i] * 127 / m with IEEE multiplication and division, roundf (half away from zero) and the
// reference's clamp to [-127, 127] (NaN becomes -127, as fmaxf makes it there); 0 where m = 0. The
// row's last 4 bytes are m's bits, written by lane 0. Rows without a page are not written.
__global__ void __launch_bounds__(NT) kv_write_i8_kernel(const KvWriteArgs a)
{
    grid_dep_enter();
    const int lane = (int)threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (NT / 32) + (threadIdx.x >> 5); // row of src: t * h + head
    if (row >= a.t * a.h) return; // the whole warp
    const float *s = a.src + row * a.d;
    float m = 0.0f;
    for (int i = lane; i < a.d; i += 32) m = fmaxf(m, fabsf(s[i]));
    m = warp_max(m);
    const int32_t r = kv_locate(a.cache, a.ncap, a.pos0 + row / a.h);
    if (r < 0) return;
    unsigned char *dst = kv_at<unsigned char>(a.cache, (int)(row % a.h), r);
    for (int i = lane; i < a.d; i += 32) {
        const float q = m > 0.0f ? roundf(__fdiv_rn(__fmul_rn(s[i], 127.0f), m)) : 0.0f;
        dst[i] = (unsigned char)(int)fminf(fmaxf(q, -127.0f), 127.0f);
    }
    if (lane < 4) dst[a.d + lane] = (unsigned char)(__float_as_uint(m) >> (8 * lane)); // little-endian, as the host's
}

// ---- sel_cache_check: one block -----------------------------------------------------------------

// The Selection Cache decision (SPEC §4; backends/cpu/cpu_backend.c: cpu_sel_cache_check): cos(q,
// q_ref) from sums in double (each product of two floats is exact in double; only the order of the
// additions differs from the reference), the rule applied by thread 0, then q copied into q_ref on
// a miss once every thread has read q_ref. One block has to keep many loads in flight to read 2 x
// 64 KiB quickly: each thread issues SC_U loads (16-byte ones where q and q_ref allow) before it
// uses any.
constexpr int SC_NT = 512;
constexpr int SC_U = 8;

__device__ __forceinline__ void sc_acc(float x, float y, double &dot, double &nq, double &nr)
{
    const double a = (double)x, b = (double)y;
    dot += a * b;
    nq += a * a;
    nr += b * b;
}

__device__ __forceinline__ double warp_sum_d(double x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL, x, o);
    return x;
}

__global__ void __launch_bounds__(SC_NT) sel_cache_kernel(const SelCacheArgs a)
{
    grid_dep_enter();
    __shared__ double part[3][SC_NT / 32];
    __shared__ int s_copy;
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *ref = a.state;
    double dot = 0.0, nq = 0.0, nr = 0.0;
    if (a.vec) { // q and q_ref 16-byte aligned, qn a multiple of 4
        const float4 *q4 = reinterpret_cast<const float4 *>(a.q), *r4 = reinterpret_cast<const float4 *>(ref);
        const int64_t n4 = a.qn / 4;
        for (int64_t base = tid; base < n4; base += (int64_t)SC_NT * SC_U) {
            float4 x[SC_U], y[SC_U];
#pragma unroll
            for (int u = 0; u < SC_U; u++) {
                const int64_t i = base + (int64_t)u * SC_NT;
                x[u] = i < n4 ? q4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                y[u] = i < n4 ? r4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int u = 0; u < SC_U; u++) {
                sc_acc(x[u].x, y[u].x, dot, nq, nr);
                sc_acc(x[u].y, y[u].y, dot, nq, nr);
                sc_acc(x[u].z, y[u].z, dot, nq, nr);
                sc_acc(x[u].w, y[u].w, dot, nq, nr);
            }
        }
    } else {
        for (int64_t base = tid; base < a.qn; base += (int64_t)SC_NT * SC_U) {
            float x[SC_U], y[SC_U];
#pragma unroll
            for (int u = 0; u < SC_U; u++) {
                const int64_t i = base + (int64_t)u * SC_NT;
                x[u] = i < a.qn ? a.q[i] : 0.0f;
                y[u] = i < a.qn ? ref[i] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < SC_U; u++) sc_acc(x[u], y[u], dot, nq, nr);
        }
    }
    dot = warp_sum_d(dot);
    nq = warp_sum_d(nq);
    nr = warp_sum_d(nr);
    if (lane == 0) {
        part[0][warp] = dot;
        part[1][warp] = nq;
        part[2][warp] = nr;
    }
    __syncthreads(); // every thread has read q_ref
    if (tid == 0) {
        dot = nq = nr = 0.0;
        for (int w = 0; w < SC_NT / 32; w++) {
            dot += part[0][w];
            nq += part[1][w];
            nr += part[2][w];
        }
        const double cosine = nq > 0.0 && nr > 0.0 ? dot / sqrt(nq * nr) : 0.0;
        float *extra = ref + a.qn; // SIFT_SEL_CACHE_REUSE, HITS, STEPS, VALID
        const bool reuse = a.full && extra[3] != 0.0f && a.theta < 1.0f && cosine >= (double)a.theta;
        extra[0] = reuse ? 1.0f : 0.0f;
        if (a.full) extra[2] += 1.0f;
        if (reuse) extra[1] += 1.0f;
        else extra[3] = a.full ? 1.0f : 0.0f;
        s_copy = !reuse;
    }
    __syncthreads();
    if (s_copy)
        for (int64_t i = tid; i < a.qn; i += SC_NT) ref[i] = a.q[i];
}

// ---- fill_range: grid (column blocks, lists) -------------------------------------------------------

__global__ void __launch_bounds__(NT) fill_range_kernel(const FillRangeArgs a)
{
    grid_dep_enter();
    const int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (a.col0 + i >= a.len) return;
    a.idx[(int64_t)blockIdx.y * a.len + a.col0 + i] = (int32_t)(a.start + i);
}

// ---- mean_rows: one thread per column, the rows summed in order as the CPU reference sums them ------

__global__ void __launch_bounds__(NT) mean_rows_kernel(const MeanRowsArgs a)
{
    grid_dep_enter();
    const int64_t i = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (i >= a.e) return;
    float sum = 0.0f;
    for (int64_t t = 0; t < a.rows; t++) sum = __fadd_rn(sum, a.x[t * a.e + i]);
    a.out[i] = __fdiv_rn(sum, (float)a.rows);
}

// ---- neighbor_fetch: one thread per output entry, grid-stride ---------------------------------------

__global__ void __launch_bounds__(NT) neighbor_fetch_kernel(const NeighborArgs a)
{
    grid_dep_enter();
    const int64_t in_len = a.sink + a.chosen + a.win_count, out_len = in_len + a.chosen;
    const int64_t total = a.lists * out_len, stride = (int64_t)gridDim.x * NT;
    for (int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x; e < total; e += stride) {
        const int64_t l = e / out_len, i = e % out_len;
        const int32_t *in = a.in + l * in_len;
        const int64_t kept = a.sink + a.chosen; // sink and chosen entries, as they are
        int32_t v;
        if (i < kept) v = in[i];
        else if (i < kept + a.chosen) {
            const int64_t c = i - kept, next = (int64_t)in[a.sink + c] + 1;
            const bool taken = c + 1 < a.chosen ? (int64_t)in[a.sink + c + 1] == next : next >= a.cand_end;
            v = taken ? -1 : (int32_t)next;
        } else v = in[i - a.chosen]; // the window
        a.out[e] = v;
    }
}

// ---- kv_gather: one thread per unit of an output row, grid (blocks, KV head), grid-stride -------------
// Consecutive threads take consecutive units of a row, then the next entry's: loads and stores are
// contiguous within a row, and each row's page is looked up by its units (the table is cached).

template <typename U> __global__ void __launch_bounds__(NT) kv_gather_kernel(const KvGatherArgs a)
{
    grid_dep_enter();
    if (skipped(a.skip)) return;
    const int g = (int)blockIdx.y;
    const int32_t *list = a.idx + (a.lists == 1 ? 0 : (int64_t)g * a.count);
    U *out = static_cast<U *>(a.out) + ((int64_t)g * a.ocount + a.col0) * a.units;
    const int64_t total = a.count * a.units, stride = (int64_t)gridDim.x * NT;
    for (int64_t e = (int64_t)blockIdx.x * NT + threadIdx.x; e < total; e += stride) {
        const int64_t i = e / a.units, u = e % a.units;
        const int32_t row = kv_locate(a.kv, a.ncap, __ldg(list + i));
        if (row < 0) {
            out[e] = U{};
            continue;
        }
        const void *src = a.f16 ? (const void *)kv_at<const uint16_t>(a.kv, g, row) : (const void *)kv_at<const float>(a.kv, g, row);
        out[e] = static_cast<const U *>(src)[u];
    }
}

static unsigned blocks_for(int64_t n, int64_t per_block)
{
    const int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b);
}

} // namespace sift_cuda

using namespace sift_cuda;

// The plans check the kernels' limits (sel_cache_check's also the alignment); the launches build
// the kernels' parameters from the node.

extern "C" cudaError_t sift_cuda_get_rows_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    // grid y: one row of blocks per id (the engine's chunks are far shorter)
    if (n->src[1]->shape[0] > 65535) return beyond_limit(plan, "get_rows of more than 65535 ids");
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_get_rows_launch(const sift_cuda_device *dev, const sift_node *n,
                                                 const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    const sift_tensor *table = n->src[0];
    GetRowsArgs a = {};
    a.table = dev_ptr<const void>(table);
    a.wtype = (int)table->dtype;
    a.rows = table->shape[0];
    a.e = table->shape[1];
    a.row_bytes = sift_dtype_row_bytes(table->dtype, table->shape[1]);
    a.ids = dev_ptr<const int32_t>(n->src[1]);
    a.t = n->src[1]->shape[0];
    a.out = dev_ptr<float>(n->dst);
    if (a.t <= 0 || a.e <= 0) return cudaSuccess;
    const dim3 grid(blocks_for(a.e, (int64_t)NT * GR_PER_THREAD), (unsigned)a.t);
    return launch(get_rows_kernel, grid, dim3(NT), 0, st, a);
}

extern "C" cudaError_t sift_cuda_rmsnorm_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    if (n->src[0]->shape[0] > INT32_MAX) return beyond_limit(plan, "2^31 rows or more"); // also layernorm's
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_rmsnorm_launch(const sift_cuda_device *dev, const sift_node *n,
                                                const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    RmsnormArgs a = {};
    a.x = dev_ptr<const float>(n->src[0]);
    a.w = dev_ptr<const float>(n->src[1]);
    a.out = dev_ptr<float>(n->dst);
    a.rows = n->src[0]->shape[0];
    a.e = n->src[0]->shape[1];
    a.eps = n->p.eps;
    if (a.rows <= 0 || a.e <= 0) return cudaSuccess;
    if (a.e <= NT * 16) return launch(rmsnorm_regs_kernel<16>, dim3((unsigned)a.rows), dim3(NT), 0, st, a);
    if (a.e <= NT * 32) return launch(rmsnorm_regs_kernel<32>, dim3((unsigned)a.rows), dim3(NT), 0, st, a);
    return launch(rmsnorm_kernel, dim3((unsigned)a.rows), dim3(NT), 0, st, a);
}

extern "C" cudaError_t sift_cuda_layernorm_launch(const sift_cuda_device *dev, const sift_node *n,
                                                  const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    LayernormArgs a = {};
    a.x = dev_ptr<const float>(n->src[0]);
    a.w = dev_ptr<const float>(n->src[1]);
    a.b = n->n_src > 2 ? dev_ptr<const float>(n->src[2]) : nullptr;
    a.out = dev_ptr<float>(n->dst);
    a.rows = n->src[0]->shape[0];
    a.e = n->src[0]->shape[1];
    a.eps = n->p.eps;
    if (a.rows <= 0 || a.e <= 0) return cudaSuccess;
    return launch(layernorm_kernel, dim3((unsigned)a.rows), dim3(NT), 0, st, a);
}

extern "C" cudaError_t sift_cuda_rope_launch(const sift_cuda_device *dev, const sift_node *n,
                                             const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    const sift_tensor *x = n->src[0];
    RopeKernelArgs a = {};
    a.x = dev_ptr<const float>(x);
    a.factors = n->n_src > 1 ? dev_ptr<const float>(n->src[1]) : nullptr;
    a.out = dev_ptr<float>(n->dst);
    a.t = x->shape[0];
    a.h = (int)x->shape[1];
    a.d = (int)x->shape[2];
    a.n_rot = n->p.rope.n_rot;
    a.neox = n->p.rope.mode == SIFT_ROPE_NEOX;
    a.pos0 = n->p.pos0;
    memcpy(a.freq, n->p.rope_freq, (size_t)(a.n_rot / 2) * sizeof a.freq[0]); // n_rot <= SIFT_MAX_HEAD_DIM
    const int64_t total = a.t * a.h * ((a.d + 1) / 2);
    if (total <= 0) return cudaSuccess;
    return launch(rope_kernel, dim3(blocks_for(total, NT)), dim3(NT), 0, st, a);
}

extern "C" cudaError_t sift_cuda_eltwise_launch(const sift_cuda_device *dev, const sift_node *n,
                                                const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    EltwiseArgs a = {};
    a.a = dev_ptr<const float>(n->src[0]);
    a.b = n->n_src > 1 ? dev_ptr<const float>(n->src[1]) : nullptr;
    a.out = dev_ptr<float>(n->dst);
    a.n = (int64_t)(n->dst->nbytes / sizeof(float));
    a.op = n->op == SIFT_OP_SWIGLU ? ELT_SWIGLU : n->op == SIFT_OP_SILU ? ELT_SILU : ELT_ADD;
    if (a.n <= 0) return cudaSuccess;
    int64_t blocks = (a.n + NT - 1) / NT;
    if (blocks > 65536) blocks = 65536; // grid-stride beyond
    return launch(eltwise_kernel, dim3((unsigned)blocks), dim3(NT), 0, st, a);
}

extern "C" cudaError_t sift_cuda_kv_write_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    if (n->dst->shape[1] > INT32_MAX || !rows_addressable(n->dst))
        return beyond_limit(plan, "kv_write into a cache of 2^31 rows or more per KV head");
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_kv_write_launch(const sift_cuda_device *dev, const sift_node *n,
                                                 const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    const sift_tensor *src = n->src[0], *cache = n->dst;
    KvWriteArgs a = {};
    a.src = dev_ptr<const float>(src);
    a.cache = row_map(cache);
    a.ncap = cache->shape[1];
    a.f16 = cache->dtype == SIFT_F16;
    a.i8 = cache->dtype == SIFT_I8;
    a.t = src->shape[0];
    a.h = (int)src->shape[1];
    a.d = (int)src->shape[2];
    a.pos0 = n->p.pos0;
    const int64_t total = a.t * a.h * a.d;
    if (total <= 0) return cudaSuccess;
    if (a.i8) return launch(kv_write_i8_kernel, dim3(blocks_for(a.t * a.h, NT / 32)), dim3(NT), 0, st, a);
    return launch(kv_write_kernel, dim3(blocks_for(total, NT)), dim3(NT), 0, st, a);
}

// aligned: q and the state 16-byte aligned and their length a multiple of 4 (vector loads).
extern "C" cudaError_t sift_cuda_sel_cache_check_plan(const sift_cuda_device *dev, const sift_node *n,
                                                      sift_cuda_plan *plan)
{
    (void)dev;
    const uintptr_t q = reinterpret_cast<uintptr_t>(dev_ptr(n->src[0]));
    const uintptr_t state = reinterpret_cast<uintptr_t>(dev_ptr(n->dst));
    plan->aligned = q % 16 == 0 && state % 16 == 0 && (n->src[0]->shape[0] * n->src[0]->shape[1]) % 4 == 0;
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_sel_cache_check_launch(const sift_cuda_device *dev, const sift_node *n,
                                                        const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)scratch;
    SelCacheArgs a = {};
    a.q = dev_ptr<const float>(n->src[0]);
    a.state = dev_ptr<float>(n->dst);
    a.qn = n->src[0]->shape[0] * n->src[0]->shape[1];
    a.theta = n->p.theta;
    a.full = n->p.full != 0;
    a.vec = plan->aligned;
    if (a.qn <= 0) return cudaSuccess;
    return launch(sel_cache_kernel, dim3(1), dim3(SC_NT), 0, st, a);
}

extern "C" cudaError_t sift_cuda_fill_range_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    if (n->dst->shape[0] > 65535) return beyond_limit(plan, "fill_range over more than 65535 lists");
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_fill_range_launch(const sift_cuda_device *dev, const sift_node *n,
                                                   const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    FillRangeArgs a = {};
    a.idx = dev_ptr<int32_t>(n->dst);
    a.lists = n->dst->shape[0];
    a.len = n->dst->shape[1];
    a.col0 = n->p.col0;
    a.start = n->p.start;
    const int64_t w = a.len - a.col0;
    if (a.lists <= 0 || w <= 0) return cudaSuccess;
    return launch(fill_range_kernel, dim3(blocks_for(w, NT), (unsigned)a.lists), dim3(NT), 0, st, a);
}

extern "C" cudaError_t sift_cuda_mean_rows_launch(const sift_cuda_device *dev, const sift_node *n,
                                                  const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)plan, (void)scratch;
    MeanRowsArgs a = {};
    a.x = dev_ptr<const float>(n->src[0]);
    a.out = dev_ptr<float>(n->dst);
    a.rows = n->src[0]->shape[0];
    a.e = n->src[0]->shape[1];
    if (a.rows <= 0 || a.e <= 0) return cudaSuccess;
    return launch(mean_rows_kernel, dim3(blocks_for(a.e, NT)), dim3(NT), 0, st, a);
}

// blocks: one thread per output entry, at most 65536 blocks (the kernel strides beyond).
extern "C" cudaError_t sift_cuda_neighbor_fetch_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    const sift_select_layout *l = &n->p.layout;
    const int64_t total = n->dst->shape[0] * (l->count + l->chosen);
    plan->blocks = total <= 0 ? 0 : (int)min(blocks_for(total, NT), 65536u);
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_neighbor_fetch_launch(const sift_cuda_device *dev, const sift_node *n,
                                                       const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)scratch;
    const sift_select_layout *l = &n->p.layout;
    NeighborArgs a = {};
    a.in = dev_ptr<const int32_t>(n->src[0]);
    a.out = dev_ptr<int32_t>(n->dst);
    a.lists = n->dst->shape[0];
    a.sink = l->sink;
    a.chosen = l->chosen;
    a.win_count = l->win_count;
    a.cand_end = l->first + l->cand;
    if (plan->blocks == 0) return cudaSuccess;
    return launch(neighbor_fetch_kernel, dim3((unsigned)plan->blocks), dim3(NT), 0, st, a);
}

// aligned: the unit in bytes, the widest of 16, 4 and 2 that divides the row and every row's start
// (the cache's base, strides and host pool, and out's base); blocks: one thread per unit, at most
// 65536 blocks per KV head (the kernel strides beyond).
extern "C" cudaError_t sift_cuda_kv_gather_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan)
{
    (void)dev;
    const sift_tensor *idx = n->src[0], *kv = n->src[1];
    if (kv->shape[0] > 65535) return beyond_limit(plan, "kv_gather over more than 65535 KV heads");
    if (!rows_addressable(kv)) return beyond_limit(plan, "kv_gather from a pool of 2^31 rows or more");
    const RowMap r = row_map(kv);
    const size_t es = sift_dtype_size(kv->dtype), row_bytes = (size_t)kv->shape[2] * es;
    size_t unit = 2;
    const size_t aligns[2] = {4, 16}; // the widest that fits wins
    for (const size_t al : aligns)
        if (row_bytes % al == 0 && (uintptr_t)r.base % al == 0 && ((size_t)r.stride0 * es) % al == 0 &&
            ((size_t)r.stride1 * es) % al == 0 && host_pool_aligned(r, es, al) && (uintptr_t)dev_ptr(n->dst) % al == 0)
            unit = al;
    plan->aligned = (int)unit;
    const int64_t total = idx->shape[1] * (int64_t)(row_bytes / (size_t)unit);
    plan->blocks = total <= 0 ? 0 : (int)min(blocks_for(total, NT), 65536u);
    return cudaSuccess;
}

extern "C" cudaError_t sift_cuda_kv_gather_launch(const sift_cuda_device *dev, const sift_node *n,
                                                  const sift_cuda_plan *plan, void *scratch, void * /* zeroed */, cudaStream_t st)
{
    (void)dev, (void)scratch;
    if (plan->blocks == 0) return cudaSuccess;
    const sift_tensor *idx = n->src[0], *kv = n->src[1];
    KvGatherArgs a = {};
    a.kv = row_map(kv);
    a.ncap = kv->shape[1];
    a.f16 = kv->dtype == SIFT_F16;
    a.idx = dev_ptr<const int32_t>(idx);
    a.out = dev_ptr(n->dst);
    a.skip = skip_flag(n);
    a.count = idx->shape[1];
    a.lists = idx->shape[0];
    a.ocount = n->dst->shape[1];
    a.col0 = n->p.col0;
    a.units = kv->shape[2] * (int64_t)sift_dtype_size(kv->dtype) / plan->aligned;
    const dim3 grid((unsigned)plan->blocks, (unsigned)kv->shape[0]);
    if (plan->aligned == 16) return launch(kv_gather_kernel<uint4>, grid, dim3(NT), 0, st, a);
    if (plan->aligned == 4) return launch(kv_gather_kernel<uint32_t>, grid, dim3(NT), 0, st, a);
    return launch(kv_gather_kernel<uint16_t>, grid, dim3(NT), 0, st, a);
}
