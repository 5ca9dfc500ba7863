// Helpers shared by the CUDA kernels: K/V row addressing, 16-byte loads of f16/f32 rows, cp.async,
// warp reductions, the float order key of select; on the host, the node's operands (device
// pointers, the K/V address maps) and kernel launches.
#pragma once

#ifdef SIFT_CUDA_EMU
#include "emu/emu.h" // the CPU emulator of cuda/emu: the same code, run without a GPU
#else
#include <cuda_fp16.h>
#endif
#include <stdint.h>
#include <string.h>

#include "sift_cuda.h"

// The dynamic shared memory of a kernel, 16-byte aligned.
#ifdef SIFT_CUDA_EMU
#define SIFT_DYNAMIC_SMEM(name) unsigned char *const name = sift_emu::dynamic_smem()
#else
#define SIFT_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace sift_cuda {

constexpr unsigned FULL = 0xffffffffu;
constexpr int NT = 256; // threads per block, every kernel

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// ---- where a K/V row lives (engine/backend.h: sift_kv_phys_row) ---------------------------------
// THE address map of the kernels: every kernel that reads or writes K/V goes through kv_locate
// (logical position -> physical row) and kv_at (physical row -> address). Logical row j of KV
// head g is the element base + g * stride0 + row(j) * stride1, where row(j) = j without a page
// table, and with one (sift_tensor_paged_view) row(j) = (pages[j >> page_shift] << page_shift) |
// (j & (P - 1)), absent when the page number is outside [0, pool_pages). The table is a device
// pointer read at run time: the host may rewrite it between computes, and a recorded CUDA graph
// stays valid.
// A paged view of two pools (sift_tensor_paged_view_pools; KV offload) numbers the host pool's rows
// after the device pool's: physical rows >= dev_rows are row - dev_rows of the host pool, mapped
// pinned memory the kernels read and write in place (zero-copy, across the host link).
struct RowMap {
    const void *base;         // element 0 of the tensor (a paged view: of its pool)
    int64_t stride0, stride1; // elements between KV heads, between (physical) rows
    const int32_t *pages;     // page table [logical rows >> page_shift], or NULL: not paged
    int page_shift;           // log2 P
    int pool_pages;           // pages in the pool(s); their rows (pool_pages << page_shift) are below 2^31
    const void *host_base;    // two pools: element 0 of the host pool (its device address), else NULL
    int64_t host_stride0;     // elements between KV heads in the host pool (rows: stride1, as the device pool's)
    int32_t dev_rows;         // two pools: the device pool's rows per KV head; else INT32_MAX
};

// K and V of one layer: logically [Hkv][ncap][D], f16 or f32 (both the same type).
struct KvMap {
    RowMap k, v;    // v.base may be NULL (score)
    int64_t ncap;   // logical positions in the cache (index bound)
    int hkv, d, f16;
    int v_own_map;  // V's rows are not at K's physical rows (another page table, page size or pool size, or
                    // only one of them paged): looked up separately
};

// kv_locate: logical position -> physical row, or -1 where the position is outside [0, ncap) or its
// page names no page of the pool (such rows are never read nor written). Without a page table
// (one uniform, predictable branch) it is the identity. The page table is read here, on the device,
// at run time. Shifts and masks only: no division per row.
__device__ __forceinline__ int32_t kv_locate(const RowMap &r, int64_t ncap, int64_t pos)
{
    if (pos < 0 || pos >= ncap) return -1;
    const int32_t p = (int32_t)pos; // ncap <= INT32_MAX
    if (r.pages == nullptr) return p;
    const int32_t page = __ldg(r.pages + (p >> r.page_shift));
    if (page < 0 || page >= r.pool_pages) return -1;
    return (page << r.page_shift) | (p & ((1 << r.page_shift) - 1));
}
// locate_run: the first physical row of positions p0 .. p0 + count - 1 when they are consecutive rows
// of one page (or of a plain tensor) inside [0, ncap), -1 when that page is absent; -2 when the run
// is not of one page (the caller then locates row by row). A tile of consecutive positions costs one
// lookup instead of one a row.
__device__ __forceinline__ int32_t locate_run(const RowMap &r, int64_t ncap, int64_t p0, int count)
{
    if (p0 < 0 || p0 + count > ncap) return -2;
    if (r.pages != nullptr && ((p0 ^ (p0 + count - 1)) >> r.page_shift) != 0) return -2;
    return kv_locate(r, ncap, p0);
}
// kv_at: physical row -> address of its first element in KV head g.
// (Rows of the host pool, past dev_rows, are in host_base; one uniform branch without a host pool.)
template <typename T> __device__ __forceinline__ T *kv_at(const RowMap &r, int g, int32_t row)
{
    if (row >= r.dev_rows)
        return static_cast<T *>(const_cast<void *>(r.host_base)) + (int64_t)g * r.host_stride0 +
               (int64_t)(row - r.dev_rows) * r.stride1;
    return static_cast<T *>(const_cast<void *>(r.base)) + (int64_t)g * r.stride0 + (int64_t)row * r.stride1;
}

// The prefill tiles' epilogue (matmul.cu, matmul_kquant.cu): a thread's 4 x 4 sums, tokens t0 .. t0 + 3
// and rows n0 .. n0 + 3 of out [t][n], plus bias[n] where there is one; past T or N nothing.
__device__ __forceinline__ void store_tile_sums(const float (&acc)[4][4], float *out, const float *bias, int64_t T,
                                                int64_t N, int64_t t0, int64_t n0)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t t = t0 + i;
        if (t >= T) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = n0 + j;
            if (n < N) out[t * N + n] = bias ? acc[i][j] + bias[n] : acc[i][j];
        }
    }
}

// Predicated nodes (sift_graph_skip_if): true when the node must do nothing, i.e. f32 `flag` (NULL:
// no predicate) is non-zero. Read on the device when the kernel runs, so a recorded CUDA graph
// follows the flag; every kernel of a predicated op returns at once (before any barrier) when set.
__device__ __forceinline__ bool skipped(const float *flag) { return flag != nullptr && *flag != 0.0f; }

// The first statement of every kernel. A kernel launched programmatically (launch) may start while
// the kernel before it in the stream is still running; griddepcontrol.wait holds it until that
// kernel has completed and its memory is visible, so nothing is read or written early, and since
// every kernel waits, the order is transitive (a kernel that returns at once, skipped, has waited
// too). launch_dependents then lets the next kernel be set up while this one runs. Before sm_90,
// and in the emulator, both are nothing (and launches are not programmatic there).
__device__ __forceinline__ void grid_dep_enter()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(SIFT_CUDA_EMU)
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whole block, after its results are stored (with atomics or plain stores): true in the block
// that took the last of the grid row's gridDim.x tickets, which then sees every block's results
// (and resets the ticket for the next run: a ticket is zeroed state, sift_cuda.h).
__device__ __forceinline__ bool is_last(uint32_t *ticket)
{
    __shared__ int s_last;
    __threadfence(); // this block's results before its ticket
    __syncthreads();
    if (threadIdx.x == 0) {
        s_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
        if (s_last) *ticket = 0; // every block has taken its ticket
    }
    __syncthreads();
    if (s_last) __threadfence(); // the others' results, after their tickets
    return s_last != 0;
}

// ---- lane layouts of one row --------------------------------------------------------------------
// QK: a row is split over LPR = D / 8 lanes; lane r holds 8 elements, read with 16-byte loads:
//   f16: elements r*8 .. r*8+7 (one 16-byte load)
//   f32: elements r*4 .. r*4+3 and D/2 + r*4 .. D/2 + r*4+3 (two 16-byte loads)
// so that each load instruction of a row group reads one contiguous run of the row. q is loaded
// into registers with the same layout. Element i of a lane is at qk_elem<T, D>(r, i).
template <typename T, int D> __device__ __forceinline__ int qk_elem(int r, int i);
template <> __device__ __forceinline__ int qk_elem<__half, 64>(int r, int i) { return r * 8 + i; }
template <> __device__ __forceinline__ int qk_elem<__half, 128>(int r, int i) { return r * 8 + i; }
template <> __device__ __forceinline__ int qk_elem<float, 64>(int r, int i) { return i < 4 ? r * 4 + i : 32 + r * 4 + i - 4; }
template <> __device__ __forceinline__ int qk_elem<float, 128>(int r, int i) { return i < 4 ? r * 4 + i : 64 + r * 4 + i - 4; }

__device__ __forceinline__ float to_float(__half h) { return __half2float(h); }
__device__ __forceinline__ float to_float(float f) { return f; }

__device__ __forceinline__ void half2x4_to_float(const uint4 &u, float (&x)[8])
{
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __half2 h;
        memcpy(static_cast<void *>(&h), &w[i], 4);
        const float2 f = __half22float2(h);
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}

// The lane's 8 elements of a row in shared memory (16-byte aligned), as floats.
template <int D> __device__ __forceinline__ void load_qk(const __half *row, int r, float (&x)[8])
{
    half2x4_to_float(*reinterpret_cast<const uint4 *>(row + r * 8), x);
}
template <int D> __device__ __forceinline__ void load_qk(const float *row, int r, float (&x)[8])
{
    const float4 a = *reinterpret_cast<const float4 *>(row + r * 4);
    const float4 b = *reinterpret_cast<const float4 *>(row + D / 2 + r * 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
    x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// PV: a row is split over D / 4 lanes; lane c holds elements c*4 .. c*4+3.
__device__ __forceinline__ void load_pv(const __half *p, float (&x)[4])
{
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    __half2 a, b;
    memcpy(static_cast<void *>(&a), &u.x, 4);
    memcpy(static_cast<void *>(&b), &u.y, 4);
    const float2 fa = __half22float2(a), fb = __half22float2(b);
    x[0] = fa.x, x[1] = fa.y, x[2] = fb.x, x[3] = fb.y;
}
__device__ __forceinline__ void load_pv(const float *p, float (&x)[4])
{
    const float4 a = *reinterpret_cast<const float4 *>(p);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
}

// ---- cp.async (sm_80+) ----------------------------------------------------------------------
// Copies 16 bytes global -> shared asynchronously; with valid == false writes 16 zero bytes and
// reads nothing (src must still be a mapped address; callers pass a row of the tensor).
// cp_async16_n copies the first n (0..16) bytes of the chunk and zero-fills the rest (reads no
// byte past gmem + n); cp_async16_l1 is cp_async16 through L1 (.ca: for data many blocks of a
// multiprocessor read, such as the activations of a matrix-vector product).
#ifdef SIFT_CUDA_EMU
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) { sift_emu::cp_async16(smem, gmem, valid ? 16 : 0); }
__device__ __forceinline__ void cp_async16_n(void *smem, const void *gmem, int n) { sift_emu::cp_async16(smem, gmem, n); }
__device__ __forceinline__ void cp_async16_l1(void *smem, const void *gmem) { sift_emu::cp_async16(smem, gmem, 16); }
__device__ __forceinline__ void cp_async_commit() { sift_emu::cp_async_commit(); }
template <int N> __device__ __forceinline__ void cp_async_wait() { sift_emu::cp_async_wait(N); }
#else
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async16_n(void *smem, const void *gmem, int n)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async16_l1(void *smem, const void *gmem)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
#endif

// ---- tensor-core fragments (sm_80+: mma.sync m16n8k16, f16 inputs, f32 accumulation) -----------
// PTX's layouts, lane = 4 g + c (g = lane / 4, c = lane % 4), each register two f16 (low half
// first): A 16 x 16 row-major, a[0] = (row g, cols 2c, 2c+1), a[1] = (g + 8, 2c ..), a[2] = (g, 2c + 8 ..),
// a[3] = (g + 8, 2c + 8 ..); B 16 x 8 "col", b[0] = (rows 2c, 2c+1, col g), b[1] = (rows 2c + 8, 2c + 9,
// col g); D 16 x 8 f32, d[0..3] = (g, 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1).
// ldmatrix_x4: lane i gives the shared-memory address of row i % 8 (16 bytes: 8 f16) of 8 x 8
// matrix i / 8; r[j] receives matrix j as (row g, cols 2c, 2c+1); _trans receives its transpose,
// (rows 2c, 2c+1 of column g), so rows of V stored [key][d] become an A fragment of V^T.
#ifdef SIFT_CUDA_EMU
__device__ __forceinline__ float half_lo(unsigned w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu))); }
__device__ __forceinline__ float half_hi(unsigned w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    unsigned mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]}, all[32][6];
    sift_emu::warp_gather(mine, all, sizeof mine);
    const int lane = (int)(sift_emu::linear_tid() & 31), g = lane / 4, c = lane % 4;
    auto A = [&](int row, int col) { // element (row, col) of A: lane 4 (row % 8) + (col % 8) / 2
        const unsigned w = all[4 * (row % 8) + (col % 8) / 2][(row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0)];
        return col % 2 ? half_hi(w) : half_lo(w);
    };
    auto B = [&](int row, int col) {
        const unsigned w = all[4 * col + (row % 8) / 2][4 + (row >= 8 ? 1 : 0)];
        return row % 2 ? half_hi(w) : half_lo(w);
    };
    for (int i = 0; i < 4; i++) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * c + (i % 2);
        float acc = d[i];
        for (int k = 0; k < 16; k++) acc += A(row, k) * B(k, col); // products are exact in f32
        d[i] = acc;
    }
}
template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4_emu(unsigned (&r)[4], const void *row)
{
    const void *rows[32];
    sift_emu::warp_gather(&row, rows, sizeof row);
    const int lane = (int)(sift_emu::linear_tid() & 31), g = lane / 4, c = lane % 4;
    for (int j = 0; j < 4; j++) {
        unsigned short h[2];
        for (int e = 0; e < 2; e++) {
            const unsigned char *src = TRANS ? static_cast<const unsigned char *>(rows[8 * j + 2 * c + e]) + 2 * g
                                             : static_cast<const unsigned char *>(rows[8 * j + g]) + 2 * (2 * c + e);
            memcpy(&h[e], src, 2);
        }
        r[j] = (unsigned)h[0] | ((unsigned)h[1] << 16);
    }
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void *row) { ldmatrix_x4_emu<false>(r, row); }
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void *row) { ldmatrix_x4_emu<true>(r, row); }
#else
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void *row)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void *row)
{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s) : "memory");
}
#endif
// Two floats as one register of two f16 (a first, in the low half), rounded to nearest.
__device__ __forceinline__ unsigned pack_half2(float a, float b)
{
    return (unsigned)__half_as_ushort(__float2half_rn(a)) | ((unsigned)__half_as_ushort(__float2half_rn(b)) << 16);
}

// A 16-byte load of data read once (K rows streamed by score_max): ld.global.cs, evict-first in
// L1 and L2, so that a stream much larger than L2 does not push out what other kernels reuse. In
// the emulator the address must lie inside one allocation (the emulator checks only what it can).
#ifdef SIFT_CUDA_EMU
// The emulator's 16-byte global load: p must be 16-byte aligned inside one allocation.
inline uint4 emu_load16(const void *p)
{
    if (!sift_emu::readable(p, 16) || (uintptr_t)p % 16) __builtin_trap();
    uint4 u;
    memcpy(&u, p, 16);
    return u;
}
#endif

__device__ __forceinline__ uint4 ld_stream16(const void *p)
{
#ifdef SIFT_CUDA_EMU
    return emu_load16(p);
#else
    return __ldcs(static_cast<const uint4 *>(p));
#endif
}

// A 16-byte load of read-only data this kernel reads once (the matrix-vector products' weights):
// ld.global.nc.L1::no_allocate, which leaves L1 to the data that is reused (x's copy is in shared
// memory anyway). On the H200 it streamed q8_0 8-12% faster than __ldg and 0-4% faster than
// __ldcs (cuda/bench/mv_direct.cu, docs/benchmarks.md). The emulator checks it as ld_stream16.
__device__ __forceinline__ uint4 ld_once16(const void *p)
{
#ifdef SIFT_CUDA_EMU
    return emu_load16(p);
#else
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
#endif
}

// The same for one 4-byte word (score_max's int8 rows of other lengths); p 4-byte aligned.
__device__ __forceinline__ unsigned ld_stream4(const void *p)
{
#ifdef SIFT_CUDA_EMU
    if (!sift_emu::readable(p, 4) || (uintptr_t)p % 4) __builtin_trap();
    unsigned u;
    memcpy(&u, p, 4);
    return u;
#else
    return __ldcs(static_cast<const unsigned *>(p));
#endif
}

// The fallback for rows that are not 16-byte aligned (views at odd offsets): the same 16 bytes
// copied with element loads, synchronously. Slow, but correct for any element-aligned address.
template <typename T> __device__ __forceinline__ void copy16_elements(void *smem, const T *gmem, bool valid)
{
    constexpr int E = 16 / sizeof(T);
    T v[E];
#pragma unroll
    for (int i = 0; i < E; i++) v[i] = valid ? gmem[i] : T(0.0f);
    uint4 u;
    memcpy(&u, v, 16);
    *reinterpret_cast<uint4 *>(smem) = u;
}

// ---- warp reductions ---------------------------------------------------------------------------
__device__ __forceinline__ float warp_max(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(FULL, x, o));
    return x;
}
__device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL, x, o);
    return x;
}

// acc[h] = q[h] . x over this lane's E elements of a row, for each of GC heads: the lane's parts of
// GC dot products, which ReduceScatter then sums over the lanes of the row.
template <int GC, int E>
__device__ __forceinline__ void head_dots(const float (&q)[GC][E], const float (&x)[E], float (&acc)[GC])
{
#pragma unroll
    for (int h = 0; h < GC; h++) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < E; i++) s = fmaf(q[h][i], x[i], s);
        acc[h] = s;
    }
}

// Reduce-scatter (recursive halving) of N values over aligned groups of W lanes (N <= W, both
// powers of two): afterwards v[0] of every lane holds the sum over its W-lane group of value
// number (lane % W) / (W / N); the W / N consecutive lanes sharing a number hold the same sum.
// Costs about N shuffles per lane instead of N * log2(W) for N separate all-reductions.
template <int N, int O> struct ReduceScatter {
    static __device__ __forceinline__ void run(float *v, int lane)
    {
        if constexpr (O > 0) {
            if constexpr (N > 1) {
                constexpr int H = N / 2;
                const bool up = (lane & O) != 0; // this lane keeps the upper half
#pragma unroll
                for (int i = 0; i < H; i++) {
                    const float send = up ? v[i] : v[i + H];
                    const float keep = up ? v[i + H] : v[i];
                    v[i] = keep + __shfl_xor_sync(FULL, send, O);
                }
                ReduceScatter<H, O / 2>::run(v, lane);
            } else {
                v[0] += __shfl_xor_sync(FULL, v[0], O);
                ReduceScatter<1, O / 2>::run(v, lane);
            }
        }
    }
};

// (m, l) of a softmax over a set: max and sum of exp(x - m). Empty: (-inf, 0).
__device__ __forceinline__ float2 ml_merge(float2 a, float2 b)
{
    const float m = fmaxf(a.x, b.x);
    const float ninf = neg_inf();
    const float la = a.x == ninf ? 0.0f : a.y * expf(a.x - m);
    const float lb = b.x == ninf ? 0.0f : b.y * expf(b.x - m);
    return make_float2(m, la + lb);
}

// sift_order_key (engine/backend.h): larger float, larger key; -0 == +0.
__device__ __forceinline__ uint32_t order_key(float f)
{
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) == 0) bits = 0;
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// ---- host: the node's operands ----------------------------------------------------------------

// The device address of a tensor's first element (views start t->offset bytes into their
// parent's storage), or NULL for no tensor.
template <typename T = void> static inline T *dev_ptr(const sift_tensor *t)
{
    return t && t->impl ? reinterpret_cast<T *>(static_cast<char *>(t->impl) + t->offset) : nullptr;
}

// A predicated node's flag (sift_graph_skip_if), or NULL.
static inline const float *skip_flag(const sift_node *n)
{
    return n->skip ? dev_ptr<const float>(n->skip) + n->skip_elem : nullptr;
}

// Whether the kernels can address t's rows: a paged view's pool has fewer than 2^31 rows per KV head
// (the logical rows of every K/V operand are, by the engine's checks).
static inline bool rows_addressable(const sift_tensor *t)
{
    return !t || !t->pages || t->parent->shape[1] + (t->host_pool ? t->host_pool->shape[1] : 0) <= INT32_MAX;
}

// Whether the host pool of r (if any) is aligned as its device pool must be for a kernel that
// needs `align`-byte rows: its address and KV head stride (es: bytes per element).
static inline bool host_pool_aligned(const RowMap &r, size_t es, size_t align)
{
    return r.host_base == nullptr || ((uintptr_t)r.host_base % align == 0 && ((size_t)r.host_stride0 * es) % align == 0);
}

// The address map of a K/V operand (NULL: none): its storage and strides, and for a paged view
// (engine/backend.h; its page size a power of two dividing the pool's rows) its pool, page table
// (a device pointer: read by the kernels at run time) and page size.
static inline RowMap row_map(const sift_tensor *t)
{
    RowMap r = {};
    r.dev_rows = INT32_MAX;
    if (!t) return r;
    r.base = dev_ptr(t);
    r.stride0 = t->stride[0];
    r.stride1 = t->stride[1];
    if (!t->pages) return r;
    r.pages = dev_ptr<const int32_t>(t->pages);
    r.page_shift = sift_kv_page_shift(t->page_size);
    r.pool_pages = r.pages ? (int)sift_kv_pool_pages(t) : 0; // an empty table: every row absent
    if (t->host_pool) {
        r.host_base = dev_ptr(t->host_pool);
        r.host_stride0 = t->host_pool->stride[0];
        r.dev_rows = (int32_t)t->parent->shape[1];
    }
    return r;
}

static inline KvMap kv_map(const sift_tensor *k, const sift_tensor *v)
{
    KvMap kv = {};
    kv.k = row_map(k);
    kv.v = row_map(v);
    kv.ncap = k->shape[1];
    kv.hkv = (int)k->shape[0];
    kv.d = (int)k->shape[2];
    kv.f16 = k->dtype == SIFT_F16;
    // (the physical rows, not where they live: with V offloaded alone, V's rows are at K's and kv_at
    // finds each in V's device or host pool through V's own map)
    const bool same = kv.k.pages == kv.v.pages &&
                      (!kv.k.pages || (kv.k.page_shift == kv.v.page_shift && kv.k.pool_pages == kv.v.pool_pages));
    kv.v_own_map = v && !same;
    return kv;
}

// A plan refused for a limit of the kernels (SIFT_E_LIMIT in the backend), saying which.
static inline cudaError_t beyond_limit(sift_cuda_plan *plan, const char *why)
{
    plan->why = why;
    return cudaErrorInvalidConfiguration;
}

// Raise the matrix-vector kernels' (matmul.cu) and score_max's tiled kernels' (score_max.cu) dynamic
// shared memory limits; part of sift_cuda_init, after the pipeline depth is known.
cudaError_t matmul_init(const sift_cuda_device *dev);
cudaError_t score_max_init(const sift_cuda_device *dev);
// select_warm's shared memory (select.cu).
cudaError_t select_init(const sift_cuda_device *dev);

// Whether kernels launched on the current device may overlap their launch with the kernel before
// them (programmatic dependent launch: compute capability 9.0 and later, unless SIFT_CUDA_PDL=0);
// set by sift_cuda_init for its device.
bool pdl_on_current_device();

// Host: launches kernel k on stream st and returns the launch error (in the emulator: runs it).
// Where the device allows it, the launch is programmatic (see grid_dep_enter): the GPU may set the
// kernel up while the one before it still runs, which hides most of the launch latency of a step's
// hundreds of short kernels. Inside a CUDA graph capture the same attribute becomes a programmatic
// edge.
template <typename... P, typename... A>
static inline cudaError_t launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args)
{
#ifdef SIFT_CUDA_EMU
    return sift_emu::launch(k, grid, block, smem, st, static_cast<P>(args)...);
#else
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_on_current_device() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
#endif
}

} // namespace sift_cuda
