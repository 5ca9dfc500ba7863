// A standalone prototype of the decode matrix-vector product, to measure a design before it goes
// into cuda/matmul.cu (it is not built by Meson and not part of libsift):
//
//     nvcc -std=c++17 -O3 -arch=sm_90 cuda/bench/mv_direct.cu -o mv_direct && ./mv_direct
//
// Two kernels, both reading the weights straight from global memory into registers (16-byte
// loads, U chunks of 512 bytes per row in flight per warp, R rows per warp sharing x), with no
// shared-memory staging of the weights:
// - mv_q8p: q8_0 rows stored *planar* (a row's K int8 quants, then its K/32 f16 scales, as the
//   Vulkan backend stores them), x as two int8 digits per value (x = s (d0 + d1 / 2^7), to 2^-14
//   of each block's largest value), so that 16 quants cost 8 dp4a;
// - mv_f16: f16 rows, x as f32 in shared memory.
// Each variant is timed over 200 back-to-back launches (median of 5), rotating over copies of the
// matrix that together exceed the L2 cache; it prints us, GB/s of weights and the NMSE against a
// double-precision reference on the host.
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1);} } while (0)
#define FULL 0xffffffffu

struct XD2 { uint4 d0[2]; uint4 d1[2]; float s; float pad[7]; }; // 96 bytes: conflict-free lds.128 by lane pairs
static_assert(sizeof(XD2) == 96, "");

__device__ __forceinline__ void digitize(float v, int lane, XD2 *xd)
{
    const unsigned m = __reduce_max_sync(FULL, __float_as_uint(v) & 0x7fffffffu);
    const int e = (int)(m >> 23);
    const float v0 = e < 5 ? v * 0x1p64f * __uint_as_float((unsigned)(195 - e) << 23) : v * __uint_as_float((unsigned)(259 - e) << 23);
    const float d0 = rintf(v0), d1 = rintf((v0 - d0) * 128.0f);
    reinterpret_cast<signed char *>(xd->d0)[lane] = (signed char)(int)d0;
    reinterpret_cast<signed char *>(xd->d1)[lane] = (signed char)(int)d1;
    if (lane == 0)
        xd->s = e == 255 ? __uint_as_float(0x7fc00000u) : e < 6 ? 0x1p-126f * __uint_as_float((unsigned)(e + 121) << 23) : __uint_as_float((unsigned)(e - 5) << 23);
}

__device__ __forceinline__ uint4 ldg_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// planar q8_0: row r = K int8 quants, then K/32 f16 scales; row bytes K*34/32 (multiple of 16 when K % 256 == 0)
// L: how the quants are loaded: 0 ld.global.nc.L1::no_allocate, 1 __ldg (ld.global.nc), 2 __ldcs (evict-first)
template <int L> __device__ __forceinline__ uint4 ld_quants(const void *p)
{
    if constexpr (L == 0) return ldg_stream(p);
    else if constexpr (L == 1) return __ldg(static_cast<const uint4 *>(p));
    else return __ldcs(static_cast<const uint4 *>(p));
}

template <int R, int U, int NW, int L = 0>
__global__ void __launch_bounds__(32 * NW) mv_q8p(const float *__restrict__ x, const unsigned char *__restrict__ w, float *__restrict__ out, int n, int k)
{
    extern __shared__ __align__(16) unsigned char smem[];
    XD2 *xd = reinterpret_cast<XD2 *>(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nb = k / 32, nch = k / 512; // chunks of 512 quants per row
    const size_t rb = (size_t)k * 34 / 32;
    const int row0 = (blockIdx.x * NW + warp) * R;
    // digitize x
    for (int b0 = warp; b0 < nb; b0 += NW * 8) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = b0 + j * NW < nb ? __ldg(x + (b0 + j * NW) * 32 + lane) : 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) if (b0 + j * NW < nb) digitize(v[j], lane, xd + b0 + j * NW);
    }
    __syncthreads();
    if (row0 >= n) return;
    const unsigned char *rows[R];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = w + (size_t)min(row0 + r, n - 1) * rb;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    const int h = lane & 1;
    for (int c0 = 0; c0 < nch; c0 += U) {
        uint4 q[U][R];
        unsigned short sc[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (c0 + u < nch) {
                    q[u][r] = ld_quants<L>(rows[r] + (size_t)(c0 + u) * 512 + 16 * lane);
                    sc[u][r] = __ldg(reinterpret_cast<const unsigned short *>(rows[r] + k) + (c0 + u) * 16 + (lane >> 1));
                }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (c0 + u >= nch) break;
            const XD2 *b = xd + (c0 + u) * 16 + (lane >> 1);
            const uint4 x0 = b->d0[h], x1 = b->d1[h];
            const float s = b->s;
#pragma unroll
            for (int r = 0; r < R; r++) {
                int a0 = 0, a1 = 0;
                a0 = __dp4a((int)q[u][r].x, (int)x0.x, a0); a1 = __dp4a((int)q[u][r].x, (int)x1.x, a1);
                a0 = __dp4a((int)q[u][r].y, (int)x0.y, a0); a1 = __dp4a((int)q[u][r].y, (int)x1.y, a1);
                a0 = __dp4a((int)q[u][r].z, (int)x0.z, a0); a1 = __dp4a((int)q[u][r].z, (int)x1.z, a1);
                a0 = __dp4a((int)q[u][r].w, (int)x0.w, a0); a1 = __dp4a((int)q[u][r].w, (int)x1.w, a1);
                const float d = __half2float(__ushort_as_half(sc[u][r]));
                acc[r] = fmaf(d * s, fmaf((float)a1, 0x1p-7f, (float)a0), acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        float v = acc[r];
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
        if (lane == 0 && row0 + r < n) out[row0 + r] = v;
    }
}

// f16: row = K halves; lane reads 16 bytes (8 values) per 512-byte chunk; x f32 in shared memory
template <int R, int U, int NW>
__global__ void __launch_bounds__(32 * NW) mv_f16(const float *__restrict__ x, const unsigned char *__restrict__ w, float *__restrict__ out, int n, int k)
{
    extern __shared__ __align__(16) unsigned char smem[];
    float *xs = reinterpret_cast<float *>(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < k / 4; i += 32 * NW) reinterpret_cast<float4 *>(xs)[i] = __ldg(reinterpret_cast<const float4 *>(x) + i);
    __syncthreads();
    const int row0 = (blockIdx.x * NW + warp) * R;
    if (row0 >= n) return;
    const int nch = k / 256;
    const size_t rb = (size_t)k * 2;
    const unsigned char *rows[R];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = w + (size_t)min(row0 + r, n - 1) * rb;
    float acc[R][2];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = 0.0f;
    for (int c0 = 0; c0 < nch; c0 += U) {
        uint4 q[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (c0 + u < nch) q[u][r] = ldg_stream(rows[r] + (size_t)(c0 + u) * 512 + 16 * lane);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (c0 + u >= nch) break;
            const float4 xa = reinterpret_cast<const float4 *>(xs)[((c0 + u) * 256 + 8 * lane) / 4];
            const float4 xb = reinterpret_cast<const float4 *>(xs)[((c0 + u) * 256 + 8 * lane) / 4 + 1];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const unsigned wd[4] = {q[u][r].x, q[u][r].y, q[u][r].z, q[u][r].w};
                float2 f[4];
#pragma unroll
                for (int i = 0; i < 4; i++) { __half2 hh; memcpy(&hh, &wd[i], 4); f[i] = __half22float2(hh); }
                acc[r][0] = fmaf(f[0].x, xa.x, acc[r][0]); acc[r][1] = fmaf(f[0].y, xa.y, acc[r][1]);
                acc[r][0] = fmaf(f[1].x, xa.z, acc[r][0]); acc[r][1] = fmaf(f[1].y, xa.w, acc[r][1]);
                acc[r][0] = fmaf(f[2].x, xb.x, acc[r][0]); acc[r][1] = fmaf(f[2].y, xb.y, acc[r][1]);
                acc[r][0] = fmaf(f[3].x, xb.z, acc[r][0]); acc[r][1] = fmaf(f[3].y, xb.w, acc[r][1]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        float v = acc[r][0] + acc[r][1];
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
        if (lane == 0 && row0 + r < n) out[row0 + r] = v;
    }
}

static float h2f(uint16_t h) { __half_raw r; r.x = h; return __half2float(__half(r)); }
static uint16_t f2h(float f) { __half hh = __float2half(f); return ((__half_raw)hh).x; }

typedef void (*kern_t)(const float *, const unsigned char *, float *, int, int);
struct Variant { const char *name; kern_t k; int r, nw; bool q8; };

int main()
{
    const int shapes[][2] = {{14336, 4096}, {4096, 14336}, {4096, 4096}, {1024, 4096}, {128256, 4096}};
    Variant vs[] = {
        {"q8p R1 U4 nc-na", mv_q8p<1, 4, 8, 0>, 1, 8, true}, {"q8p R1 U4 ldg", mv_q8p<1, 4, 8, 1>, 1, 8, true},
        {"q8p R1 U4 ldcs", mv_q8p<1, 4, 8, 2>, 1, 8, true},  {"q8p R2 U4 nc-na", mv_q8p<2, 4, 8, 0>, 2, 8, true},
        {"q8p R2 U4 ldg", mv_q8p<2, 4, 8, 1>, 2, 8, true},   {"q8p R2 U4 ldcs", mv_q8p<2, 4, 8, 2>, 2, 8, true},
        {"q8p R4 U2 nc-na", mv_q8p<4, 2, 8, 0>, 4, 8, true}, {"q8p R4 U2 ldg", mv_q8p<4, 2, 8, 1>, 4, 8, true},
        {"q8p R4 U2 ldcs", mv_q8p<4, 2, 8, 2>, 4, 8, true},  {"q8p R1 U8 nc-na", mv_q8p<1, 8, 8, 0>, 1, 8, true},
        {"q8p R2 U8 W4 nc-na", mv_q8p<2, 8, 4, 0>, 2, 4, true},
        {"f16 R2 U4 W8", mv_f16<2, 4, 8>, 2, 8, false},
    };
    for (auto &v : vs) CK(cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    // copy ceiling
    { size_t B = 1ull << 30; void *a, *b; CK(cudaMalloc(&a, B)); CK(cudaMalloc(&b, B));
      cudaMemcpy(b, a, B, cudaMemcpyDeviceToDevice); cudaEventRecord(e0);
      for (int i = 0; i < 5; i++) cudaMemcpy(b, a, B, cudaMemcpyDeviceToDevice);
      cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1);
      printf("d2d copy: %.0f GB/s (read+write)\n", 2.0 * B * 5 / ms / 1e6); cudaFree(a); cudaFree(b); }
    for (auto &sh : shapes) {
        const int n = sh[0], k = sh[1];
        for (int q8 = 1; q8 >= 0; q8--) {
            const size_t rb = q8 ? (size_t)k * 34 / 32 : (size_t)k * 2, mb = rb * n;
            const int copies = (int)std::max<size_t>(1, (400u << 20) / mb + 1);
            std::vector<unsigned char> hw(mb); std::vector<float> hx(k), ref(n);
            srand(1);
            for (int i = 0; i < k; i++) hx[i] = (float)rand() / RAND_MAX * 2 - 1;
            for (int r = 0; r < n; r++) {
                unsigned char *row = hw.data() + (size_t)r * rb; double acc = 0;
                if (q8) {
                    for (int b = 0; b < k / 32; b++) {
                        float d = ((float)rand() / RAND_MAX + 0.5f) / 127.0f; uint16_t dh = f2h(d); d = h2f(dh);
                        memcpy(row + k + 2 * b, &dh, 2);
                        for (int j = 0; j < 32; j++) { int qv = rand() % 255 - 127; row[b * 32 + j] = (unsigned char)(signed char)qv; acc += (double)qv * d * hx[b * 32 + j]; }
                    }
                } else {
                    for (int j = 0; j < k; j++) { uint16_t hh = f2h((float)rand() / RAND_MAX * 2 - 1); memcpy(row + 2 * j, &hh, 2); acc += (double)h2f(hh) * hx[j]; }
                }
                ref[r] = (float)acc;
            }
            unsigned char *dw; float *dx, *dout;
            CK(cudaMalloc(&dw, mb * copies)); CK(cudaMalloc(&dx, k * 4)); CK(cudaMalloc(&dout, n * 4));
            for (int c = 0; c < copies; c++) CK(cudaMemcpy(dw + mb * c, hw.data(), mb, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx, hx.data(), k * 4, cudaMemcpyHostToDevice));
            for (auto &v : vs) {
                if (v.q8 != (bool)q8) continue;
                const int rows_per_block = v.r * v.nw, grid = (n + rows_per_block - 1) / rows_per_block;
                const size_t sm = q8 ? (size_t)(k / 32) * 96 : (size_t)k * 4;
                v.k<<<grid, 32 * v.nw, sm>>>(dx, dw, dout, n, k);
                CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
                std::vector<float> o(n); CK(cudaMemcpy(o.data(), dout, n * 4, cudaMemcpyDeviceToHost));
                double num = 0, den = 0; for (int r = 0; r < n; r++) { num += (double)(o[r] - ref[r]) * (o[r] - ref[r]); den += (double)ref[r] * ref[r]; }
                const int iters = 200;
                std::vector<float> reps;
                for (int rep = 0; rep < 5; rep++) {
                    cudaEventRecord(e0);
                    for (int i = 0; i < iters; i++) v.k<<<grid, 32 * v.nw, sm>>>(dx, dw + mb * (i % copies), dout, n, k);
                    cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1);
                    reps.push_back(ms * 1000 / iters);
                }
                std::sort(reps.begin(), reps.end());
                const float us = reps[2];
                printf("%-6d x %-6d %-14s %8.2f us %7.0f GB/s  nmse %.2e\n", n, k, v.name, us, mb / us / 1e3, num / den);
            }
            cudaFree(dw); cudaFree(dx); cudaFree(dout);
        }
    }
    return 0;
}
