// A standalone prototype of the SOFTMAX_SUM vote's kernels (cuda/vote.cu), to find what holds
// vote_sum at about 1 TB/s before changing the real one (not built by Meson, not in libsift):
//
//     nvcc -std=c++17 -O3 -arch=sm_90 cuda/bench/vote.cu -o vote_bench && ./vote_bench
//
// Scores are [32 heads][M] f32, as the score stage writes them. Each variant is timed over 200
// back-to-back launches (median of 5), twice: on one buffer (it stays in L2 when it fits, as the
// scores do right after the score kernel wrote them) and rotating over copies that together
// exceed L2. It prints µs, GB/s of scores read and the largest relative error of the votes
// against a double-precision reference on the host.
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                                            \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define FULL 0xffffffffu
constexpr int NT = 256, HQ = 32;
constexpr float LOG2E = 1.4426950408889634f;

__device__ __forceinline__ float ninf() { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ float ex2(float x) // 2^x, the SFU's approximation (2 ulp); ex2(-inf) = 0
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float2 ml_merge(float2 a, float2 b)
{
    const float m = fmaxf(a.x, b.x);
    const float la = a.x == ninf() ? 0.0f : a.y * expf(a.x - m);
    const float lb = b.x == ninf() ? 0.0f : b.y * expf(b.x - m);
    return make_float2(m, la + lb);
}
__device__ float2 block_ml_merge(float2 x)
{
    __shared__ float2 part[NT / 32];
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float2 y;
        y.x = __shfl_xor_sync(FULL, x.x, o);
        y.y = __shfl_xor_sync(FULL, x.y, o);
        x = ml_merge(x, y);
    }
    if (lane == 0) part[warp] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        x = part[0];
        for (int w = 1; w < NT / 32; w++) x = ml_merge(x, part[w]);
    }
    return x;
}

// ---- pass 1: per (block, head) max and sum of exp ----------------------------------------------
constexpr int VPT = 16, VCH = NT * VPT;
__global__ void __launch_bounds__(NT) partial_v0(const float *s, int64_t m, int blocks, float2 *part)
{
    const int h = blockIdx.y, b = blockIdx.x, tid = threadIdx.x;
    const float *row = s + (int64_t)h * m;
    const int64_t j0 = (int64_t)b * VCH;
    float x[VPT], mx = ninf();
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int64_t j = j0 + i * NT + tid;
        x[i] = j < m ? row[j] : ninf();
        mx = fmaxf(mx, x[i]);
    }
    float l = 0.0f;
    if (mx != ninf())
#pragma unroll
        for (int i = 0; i < VPT; i++) l += expf(x[i] - mx);
    const float2 r = block_ml_merge(make_float2(mx, l));
    if (tid == 0) part[(int64_t)h * blocks + b] = r;
}
// float4 loads (M a multiple of 4), exp as ex2 of a pre-scaled difference
__global__ void __launch_bounds__(NT) partial_v1(const float *s, int64_t m, int blocks, float2 *part)
{
    const int h = blockIdx.y, b = blockIdx.x, tid = threadIdx.x;
    const float4 *row = reinterpret_cast<const float4 *>(s + (int64_t)h * m);
    const int64_t q0 = (int64_t)b * (VCH / 4), mq = m / 4;
    float4 x[VPT / 4];
    float mx = ninf();
#pragma unroll
    for (int i = 0; i < VPT / 4; i++) {
        const int64_t q = q0 + i * NT + tid;
        x[i] = q < mq ? row[q] : make_float4(ninf(), ninf(), ninf(), ninf());
        mx = fmaxf(mx, fmaxf(fmaxf(x[i].x, x[i].y), fmaxf(x[i].z, x[i].w)));
    }
    float l = 0.0f;
    if (mx != ninf()) {
        const float mm = mx * LOG2E;
#pragma unroll
        for (int i = 0; i < VPT / 4; i++)
            l += ex2(fmaf(x[i].x, LOG2E, -mm)) + ex2(fmaf(x[i].y, LOG2E, -mm)) + ex2(fmaf(x[i].z, LOG2E, -mm)) +
                 ex2(fmaf(x[i].w, LOG2E, -mm));
    }
    const float2 r = block_ml_merge(make_float2(mx, l));
    if (tid == 0) part[(int64_t)h * blocks + b] = r;
}
__global__ void __launch_bounds__(NT) stats_k(const float2 *part, int blocks, float2 *stats)
{
    const int h = blockIdx.x;
    float2 x = make_float2(ninf(), 0.0f);
    for (int b = threadIdx.x; b < blocks; b += NT) x = ml_merge(x, part[(int64_t)h * blocks + b]);
    x = block_ml_merge(x);
    if (threadIdx.x == 0) stats[h] = x;
}

// ---- pass 2: v[j] = sum_h exp(s[h][j] - m_h) / l_h ---------------------------------------------
// v0: as cuda/vote.cu today, 16 heads loaded before any is used
__global__ void __launch_bounds__(NT) sum_v0(const float *s, int64_t m, const float2 *st, float *v)
{
    const int64_t j = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (j >= m) return;
    float acc = 0.0f;
    for (int h0 = 0; h0 < HQ; h0 += 16) {
        float x[16];
        float2 t[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            x[i] = s[(int64_t)(h0 + i) * m + j];
            t[i] = st[h0 + i];
        }
#pragma unroll
        for (int i = 0; i < 16; i++) acc += expf(x[i] - t[i].x) / t[i].y;
    }
    v[j] = acc;
}
// Each head's (m log2 e, 1 / l) into shared memory, once a block.
__device__ __forceinline__ void stage_stats(const float2 *st, float2 *k)
{
    if (threadIdx.x < HQ) {
        const float2 t = st[threadIdx.x];
        k[threadIdx.x] = make_float2(t.x * LOG2E, 1.0f / t.y);
    }
    __syncthreads();
}
// v1: the same loads; each head's (m log2 e, 1 / l) staged in shared memory once a block; ex2
__global__ void __launch_bounds__(NT) sum_v1(const float *s, int64_t m, const float2 *st, float *v)
{
    __shared__ float2 k[HQ];
    stage_stats(st, k);
    const int64_t j = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (j >= m) return;
    float acc = 0.0f;
    for (int h0 = 0; h0 < HQ; h0 += 16) {
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; i++) x[i] = s[(int64_t)(h0 + i) * m + j];
#pragma unroll
        for (int i = 0; i < 16; i++) acc = fmaf(ex2(fmaf(x[i], LOG2E, -k[h0 + i].x)), k[h0 + i].y, acc);
    }
    v[j] = acc;
}
// v2: as v1, four positions a thread (float4 loads), 8 heads in flight
__global__ void __launch_bounds__(NT) sum_v2(const float *s, int64_t m, const float2 *st, float *v)
{
    __shared__ float2 k[HQ];
    stage_stats(st, k);
    const int64_t q = (int64_t)blockIdx.x * NT + threadIdx.x, mq = m / 4;
    if (q >= mq) return;
    const float4 *s4 = reinterpret_cast<const float4 *>(s);
    float4 acc = make_float4(0, 0, 0, 0);
    for (int h0 = 0; h0 < HQ; h0 += 8) {
        float4 x[8];
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = s4[(int64_t)(h0 + i) * mq + q];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float2 t = k[h0 + i];
            acc.x = fmaf(ex2(fmaf(x[i].x, LOG2E, -t.x)), t.y, acc.x);
            acc.y = fmaf(ex2(fmaf(x[i].y, LOG2E, -t.x)), t.y, acc.y);
            acc.z = fmaf(ex2(fmaf(x[i].z, LOG2E, -t.x)), t.y, acc.z);
            acc.w = fmaf(ex2(fmaf(x[i].w, LOG2E, -t.x)), t.y, acc.w);
        }
    }
    reinterpret_cast<float4 *>(v)[q] = acc;
}
// v3: v0's exact arithmetic (expf, division) with v2's float4 loads
__global__ void __launch_bounds__(NT) sum_v3(const float *s, int64_t m, const float2 *st, float *v)
{
    const int64_t q = (int64_t)blockIdx.x * NT + threadIdx.x, mq = m / 4;
    if (q >= mq) return;
    const float4 *s4 = reinterpret_cast<const float4 *>(s);
    float4 acc = make_float4(0, 0, 0, 0);
    for (int h0 = 0; h0 < HQ; h0 += 8) {
        float4 x[8];
        float2 t[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            x[i] = s4[(int64_t)(h0 + i) * mq + q];
            t[i] = st[h0 + i];
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            acc.x += expf(x[i].x - t[i].x) / t[i].y;
            acc.y += expf(x[i].y - t[i].x) / t[i].y;
            acc.z += expf(x[i].z - t[i].x) / t[i].y;
            acc.w += expf(x[i].w - t[i].x) / t[i].y;
        }
    }
    reinterpret_cast<float4 *>(v)[q] = acc;
}
// read-only floor: the same float4 loads, summed, no exp
__global__ void __launch_bounds__(NT) sum_floor(const float *s, int64_t m, const float2 *st, float *v)
{
    (void)st;
    const int64_t q = (int64_t)blockIdx.x * NT + threadIdx.x, mq = m / 4;
    if (q >= mq) return;
    const float4 *s4 = reinterpret_cast<const float4 *>(s);
    float4 acc = make_float4(0, 0, 0, 0);
    for (int h0 = 0; h0 < HQ; h0 += 8) {
        float4 x[8];
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = s4[(int64_t)(h0 + i) * mq + q];
#pragma unroll
        for (int i = 0; i < 8; i++) acc.x += x[i].x + x[i].y + x[i].z + x[i].w;
    }
    reinterpret_cast<float4 *>(v)[q] = acc;
}

// ---- driver ------------------------------------------------------------------------------------
typedef void (*sum_fn)(const float *, int64_t, const float2 *, float *);
typedef void (*part_fn)(const float *, int64_t, int, float2 *);

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main()
{
    const int64_t Ms[] = {32768 - 640, 131072 - 640, 1048576 - 640};
    size_t l2 = 0;
    {
        int d = 0, b = 0;
        CK(cudaGetDevice(&d));
        CK(cudaDeviceGetAttribute(&b, cudaDevAttrL2CacheSize, d));
        l2 = (size_t)b;
        cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, d));
        printf("%s, L2 %zu MiB\n", p.name, l2 >> 20);
    }
    for (const int64_t M : Ms) {
        const size_t bytes = (size_t)HQ * M * 4;
        const int copies = (int)std::max<size_t>(2, 3 * l2 / bytes + 1);
        std::vector<float> h((size_t)HQ * M);
        srand(7);
        for (auto &x : h) x = ((float)rand() / RAND_MAX - 0.5f) * 8.0f; // |s| up to 4, as scaled scores
        // reference in double
        std::vector<double> ref(M, 0.0);
        std::vector<float2> hst(HQ);
        for (int hh = 0; hh < HQ; hh++) {
            double mx = -INFINITY, l = 0;
            for (int64_t j = 0; j < M; j++) mx = std::max(mx, (double)h[hh * M + j]);
            for (int64_t j = 0; j < M; j++) l += exp(h[hh * M + j] - mx);
            for (int64_t j = 0; j < M; j++) ref[j] += exp(h[hh * M + j] - mx) / l;
            hst[hh] = make_float2((float)mx, (float)l);
        }
        float *s;
        CK(cudaMalloc(&s, bytes * copies));
        for (int c = 0; c < copies; c++) CK(cudaMemcpy(s + (size_t)c * HQ * M, h.data(), bytes, cudaMemcpyHostToDevice));
        const int blocks = (int)((M + VCH - 1) / VCH);
        float2 *part, *st;
        float *v;
        CK(cudaMalloc(&part, sizeof(float2) * HQ * blocks));
        CK(cudaMalloc(&st, sizeof(float2) * HQ));
        CK(cudaMalloc(&v, 4 * M));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        printf("\nM = %lld (%.1f MB of scores, %d copies)\n", (long long)M, bytes / 1e6, copies);
        auto time = [&](auto launch, bool rotate) {
            std::vector<float> r;
            for (int rep = 0; rep < 5; rep++) {
                CK(cudaEventRecord(e0));
                for (int i = 0; i < 200; i++) launch(s + (rotate ? (size_t)(i % copies) * HQ * M : 0));
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                r.push_back(ms * 1000.0f / 200);
            }
            CK(cudaGetLastError());
            return median(r);
        };
        struct { const char *name; part_fn fn; } parts[] = {{"partial_v0 (today)", partial_v0}, {"partial_v1 (float4, ex2)", partial_v1}};
        for (auto &p : parts) {
            auto go = [&](const float *x) { p.fn<<<dim3(blocks, HQ), NT>>>(x, M, blocks, part); };
            const float hot = time(go, false), cold = time(go, true);
            stats_k<<<HQ, NT>>>(part, blocks, st);
            std::vector<float2> got(HQ);
            CK(cudaMemcpy(got.data(), st, sizeof(float2) * HQ, cudaMemcpyDeviceToHost));
            double err = 0;
            for (int hh = 0; hh < HQ; hh++) err = std::max(err, (double)fabsf(got[hh].y - hst[hh].y) / hst[hh].y + fabsf(got[hh].x - hst[hh].x));
            printf("  %-28s L2 %7.1f us %6.0f GB/s   DRAM %7.1f us %6.0f GB/s   stats err %.1e\n", p.name, hot, bytes / hot / 1e3, cold,
                   bytes / cold / 1e3, err);
        }
        {
            auto go = [&](const float *) { stats_k<<<HQ, NT>>>(part, blocks, st); };
            printf("  %-28s %7.1f us\n", "stats", time(go, false));
        }
        CK(cudaMemcpy(st, hst.data(), sizeof(float2) * HQ, cudaMemcpyHostToDevice));
        struct { const char *name; sum_fn fn; int per; } sums[] = {{"sum_v0 (today)", sum_v0, 1},
                                                                  {"sum_v1 (ex2, 1/l in smem)", sum_v1, 1},
                                                                  {"sum_v2 (v1, float4)", sum_v2, 4},
                                                                  {"sum_v3 (v0 math, float4)", sum_v3, 4},
                                                                  {"sum_floor (loads only)", sum_floor, 4}};
        for (auto &f : sums) {
            const int64_t g = (M / f.per + NT - 1) / NT;
            auto go = [&](const float *x) { f.fn<<<(unsigned)g, NT>>>(x, M, st, v); };
            const float hot = time(go, false), cold = time(go, true);
            go(s);
            std::vector<float> got(M);
            CK(cudaMemcpy(got.data(), v, 4 * M, cudaMemcpyDeviceToHost));
            double err = 0;
            for (int64_t j = 0; j < M; j++) err = std::max(err, fabs((double)got[j] - ref[j]) / ref[j]);
            printf("  %-28s L2 %7.1f us %6.0f GB/s   DRAM %7.1f us %6.0f GB/s   max rel err %.1e\n", f.name, hot,
                   bytes / hot / 1e3, cold, bytes / cold / 1e3, err);
        }
        CK(cudaFree(s));
        CK(cudaFree(part));
        CK(cudaFree(st));
        CK(cudaFree(v));
    }
    return 0;
}
