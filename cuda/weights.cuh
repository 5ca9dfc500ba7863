// Weight formats on the device: the one place (besides engine/quant.c on the host) that knows the
// layouts. Q8_0 is stored planar (backend.h): a row of K values is its K int8 quants, then its K / 32
// f16 scales; value k = q[k] * d[k / 32]. Q4_0 keeps ggml's blocks: 32 values in 18 bytes, d then 16
// bytes; byte j holds element j in its low nibble and element j + 16 in its high nibble, value =
// (nibble - 8) * d. Q4_K, Q5_K, Q6_K: super-blocks of 256 values in 144, 176 and 210 bytes
// (engine/quant.h). F16, BF16: 2 bytes per value. Rows start at even addresses (a q8_0 row's 34 K /
// 32 bytes are even; sift_tensor_view keeps views of block types 2-byte aligned), f32 rows at
// multiples of 4.
#pragma once

#include "common.cuh"

namespace sift_cuda {

__device__ __forceinline__ float half_bits_to_float(unsigned h)
{
    return __half2float(__ushort_as_half((unsigned short)h));
}
__device__ __forceinline__ float bf16_bits_to_float(unsigned h) { return __uint_as_float(h << 16); }

// ---- K-quants (engine/quant.h has the layouts): super-blocks of 256 values ----------------------

__host__ __device__ constexpr bool is_kquant(int w) { return w == SIFT_Q4_K || w == SIFT_Q5_K || w == SIFT_Q6_K; }
__host__ __device__ constexpr int kquant_block_bytes(int w) { return w == SIFT_Q4_K ? 144 : w == SIFT_Q5_K ? 176 : 210; }

// Sub-block j's (0..7) 6-bit scale and min of a Q4_K / Q5_K super-block's 12 scale bytes s.
template <typename Byte>
__device__ __forceinline__ void kquant_scale_min(Byte byte_of, int j, int &sc, int &m)
{
    if (j < 4) {
        sc = byte_of(j) & 63;
        m = byte_of(j + 4) & 63;
    } else {
        sc = (byte_of(j + 4) & 15) | ((byte_of(j - 4) >> 6) << 4);
        m = (byte_of(j + 4) >> 4) | ((byte_of(j) >> 6) << 4);
    }
}

// Value k of a K-quant row, byte loads. d * sc * q is exact in f32, so value = that - dmin * m
// rounds once, as the CPU's.
__device__ __forceinline__ float kquant_at(const unsigned char *row, int wtype, int64_t k)
{
    const unsigned char *b = row + (k >> 8) * kquant_block_bytes(wtype);
    const int e = (int)(k & 255); // value within the super-block
    if (wtype == SIFT_Q6_K) {
        const int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
        const float d = half_bits_to_float(__ldg(b + 208) | (__ldg(b + 209) << 8));
        const float scale = d * (float)(signed char)__ldg(b + 192 + 8 * h + 2 * g + l / 16);
        const int q = ((__ldg(b + 64 * h + 32 * (g & 1) + l) >> (4 * (g >> 1))) & 15) |
                      (((__ldg(b + 128 + 32 * h + l) >> (2 * g)) & 3) << 4);
        return scale * (float)(q - 32);
    }
    const bool five = wtype == SIFT_Q5_K;
    const int j = e >> 5, l = e & 31;
    int sc, m;
    kquant_scale_min([b](int i) { return (int)__ldg(b + 4 + i); }, j, sc, m);
    const float scale = half_bits_to_float(__ldg(b) | (__ldg(b + 1) << 8)) * (float)sc;
    const float mn = half_bits_to_float(__ldg(b + 2) | (__ldg(b + 3) << 8)) * (float)m;
    int q = (__ldg(b + (five ? 48 : 16) + 32 * (j >> 1) + l) >> (4 * (j & 1))) & 15;
    if (five) q += 16 * ((__ldg(b + 16 + l) >> j) & 1);
    return scale * (float)q - mn;
}

// Element k of a row of kn values (any type), scalar loads.
__device__ __forceinline__ float weight_at(const unsigned char *row, int wtype, int64_t k, int64_t kn)
{
    switch (wtype) {
    case SIFT_Q4_K:
    case SIFT_Q5_K:
    case SIFT_Q6_K: return kquant_at(row, wtype, k);
    case SIFT_F32: return __ldg(reinterpret_cast<const float *>(row) + k);
    case SIFT_F16: return half_bits_to_float(__ldg(reinterpret_cast<const unsigned short *>(row) + k));
    case SIFT_BF16: return bf16_bits_to_float(__ldg(reinterpret_cast<const unsigned short *>(row) + k));
    case SIFT_Q8_0: {
        const float d = half_bits_to_float(__ldg(reinterpret_cast<const unsigned short *>(row + kn) + (k >> 5)));
        return (float)(signed char)__ldg(row + k) * d;
    }
    default: { // Q4_0
        const unsigned char *b = row + (k >> 5) * 18;
        const float d = half_bits_to_float(__ldg(reinterpret_cast<const unsigned short *>(b)));
        const int j = (int)(k & 31);
        const unsigned q = __ldg(b + 2 + (j & 15));
        return (float)((int)(j < 16 ? q & 15u : q >> 4) - 8) * d;
    }
    }
}

// Elements k0 .. k0+7 of a row (k0 a multiple of 8) into v; those at or past k (the row length)
// are 0. vec: the row start is 16-byte aligned and the row a whole number of 16-byte chunks (f32,
// f16, bf16 then use 16-byte loads). Quantized rows have k a multiple of 32.
__device__ __forceinline__ void weight_load8(const unsigned char *row, int wtype, int64_t k0, int64_t k, bool vec,
                                             float (&v)[8])
{
    if (k0 >= k) {
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = 0.0f;
        return;
    }
    if (wtype == SIFT_Q8_0) { // planar: 8 quants from k0 (an even address), the scale after the row's quants
        const float d = half_bits_to_float(__ldg(reinterpret_cast<const unsigned short *>(row + k) + (k0 >> 5)));
        const unsigned short *qs = reinterpret_cast<const unsigned short *>(row + k0);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned w = __ldg(qs + i);
            v[2 * i] = (float)(signed char)(w & 0xffu) * d;
            v[2 * i + 1] = (float)(signed char)(w >> 8) * d;
        }
        return;
    }
    if (wtype == SIFT_Q4_0) {
        const unsigned char *b = row + (k0 >> 5) * 18;
        const float d = half_bits_to_float(__ldg(reinterpret_cast<const unsigned short *>(b)));
        const int j = (int)(k0 & 31), sh = j < 16 ? 0 : 4;
        const unsigned short *qs = reinterpret_cast<const unsigned short *>(b + 2);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned w = __ldg(qs + (j & 15) / 2 + i);
            v[2 * i] = (float)((int)((w >> sh) & 15u) - 8) * d;
            v[2 * i + 1] = (float)((int)((w >> (8 + sh)) & 15u) - 8) * d;
        }
        return;
    }
    if (vec && k0 + 8 <= k) {
        if (wtype == SIFT_F32) {
            const float4 a = __ldg(reinterpret_cast<const float4 *>(row) + k0 / 4);
            const float4 b = __ldg(reinterpret_cast<const float4 *>(row) + k0 / 4 + 1);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
            const uint4 u = __ldg(reinterpret_cast<const uint4 *>(row) + k0 / 8);
            const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (wtype == SIFT_F16) {
                    v[2 * i] = half_bits_to_float(w[i] & 0xffffu);
                    v[2 * i + 1] = half_bits_to_float(w[i] >> 16);
                } else {
                    v[2 * i] = bf16_bits_to_float(w[i] & 0xffffu);
                    v[2 * i + 1] = bf16_bits_to_float(w[i] >> 16);
                }
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = k0 + i < k ? weight_at(row, wtype, k0 + i, k) : 0.0f;
}

} // namespace sift_cuda
