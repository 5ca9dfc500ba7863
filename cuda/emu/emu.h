// A CPU emulator of the CUDA features sift's kernels use, so that the kernels in cuda/ (the very
// same source) and the CUDA backend can be run and tested on a machine without a GPU.
// Built only by cuda/emu/run-tests.sh (never by Meson); compiled with -DSIFT_CUDA_EMU.
//
// Each block runs as NT cooperative threads (ucontext coroutines) on one OS thread; blocks run one
// after another. __syncthreads and every warp collective (shuffles, ballot, match) are real
// barriers: a collective that not all lanes of a warp reach is reported as a deadlock. Between
// barriers threads run in a random order (SIFT_EMU_SEED). cp.async copies are deferred until a
// cp.async.wait_group makes them due (SIFT_EMU_CPASYNC=late, the default) or done at once (=early),
// so a missing wait or a stage overwritten too soon changes the results. Dynamic shared memory
// and cudaMalloc'd memory start as NaN bytes, with canaries checked after every block.
#pragma once

#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>

#undef __shared__
#define __shared__ static /* blocks run one at a time: a static is the block's shared variable */
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#undef __grid_constant__
#define __grid_constant__

namespace sift_emu {

struct Ctx {
    uint3 tid, bid;
    dim3 bdim, gdim;
};
Ctx &cur();
unsigned linear_tid();
unsigned char *dynamic_smem();
void syncthreads();
uint64_t warp_exchange(uint64_t mine, int src_lane); // every lane of the warp calls; returns src's value
uint32_t warp_ballot(bool p);
void warp_gather(const void *mine, void *all, size_t bytes); // every lane: all[l] = lane l's bytes (<= 64)
uint32_t warp_match_any(uint64_t v);
void cp_async16(void *dst, const void *src, int n); // n bytes of src, zeros after
bool readable(const void *p, size_t n);             // inside one cudaMalloc'd block
void cp_async_commit();
void cp_async_wait(int n);
cudaError_t launch_impl(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                        std::function<void()> body);

template <typename... P, typename... A>
cudaError_t launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, A... args)
{
    std::tuple<P...> t(static_cast<P>(args)...);
    return launch_impl(reinterpret_cast<const void *>(k), grid, block, smem, st, [k, t]() { std::apply(k, t); });
}

template <typename T> uint64_t to_bits(T v)
{
    static_assert(sizeof(T) <= 8, "shuffle of a wide type");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> T from_bits(uint64_t b)
{
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}

} // namespace sift_emu

#define threadIdx (sift_emu::cur().tid)
#define blockIdx (sift_emu::cur().bid)
#define blockDim (sift_emu::cur().bdim)
#define gridDim (sift_emu::cur().gdim)

inline void __syncthreads() { sift_emu::syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { (void)sift_emu::warp_ballot(true); } // a barrier of the whole warp
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int o)
{
    const int lane = (int)(sift_emu::linear_tid() & 31);
    return sift_emu::from_bits<T>(sift_emu::warp_exchange(sift_emu::to_bits(v), lane ^ o));
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, unsigned d)
{
    const int lane = (int)(sift_emu::linear_tid() & 31);
    const int src = lane - (int)d;
    const T r = sift_emu::from_bits<T>(sift_emu::warp_exchange(sift_emu::to_bits(v), src < 0 ? lane : src));
    return r;
}
template <typename T> inline T __shfl_sync(unsigned, T v, int src)
{
    return sift_emu::from_bits<T>(sift_emu::warp_exchange(sift_emu::to_bits(v), src & 31));
}
inline unsigned __ballot_sync(unsigned, int p) { return sift_emu::warp_ballot(p != 0); }
template <typename T> inline unsigned __match_any_sync(unsigned, T v) { return sift_emu::warp_match_any(sift_emu::to_bits(v)); }
inline int __popc(int x) { return __builtin_popcount((unsigned)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __float_as_uint(float f) { return sift_emu::to_bits(f) & 0xffffffffu; }
inline float __uint_as_float(unsigned u) { return sift_emu::from_bits<float>((uint64_t)u); }
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned sh)
{
    const uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)(v >> (sh > 32 ? 32 : sh));
}
inline int __dp4a(int a, int b, int c) // c + the sum of the products of a's and b's signed bytes
{
    for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
inline unsigned __reduce_max_sync(unsigned, unsigned v)
{
    const int lane = (int)(sift_emu::linear_tid() & 31);
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned w = (unsigned)sift_emu::warp_exchange(v, lane ^ o);
        v = w > v ? w : v;
    }
    return v;
}
inline int __reduce_add_sync(unsigned, int v)
{
    const int lane = (int)(sift_emu::linear_tid() & 31);
    for (int o = 16; o > 0; o >>= 1) v += (int)(unsigned)sift_emu::warp_exchange((uint64_t)(uint32_t)v, lane ^ o);
    return v;
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
// IEEE single operations without contraction (the host compiler does not contract across calls)
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __int_as_float(int i) { return sift_emu::from_bits<float>((uint64_t)(uint32_t)i); }
template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcg(const T *p) { return *p; }
inline void __threadfence() {} // blocks run one after another: every earlier block's writes are seen
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    const unsigned old = *p;
    *p = old + v;
    return old;
}
inline unsigned atomicMax(unsigned *p, unsigned v)
{
    const unsigned old = *p;
    if (v > old) *p = v;
    return old;
}
template <typename T> inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> inline T max(T a, T b) { return a < b ? b : a; }
