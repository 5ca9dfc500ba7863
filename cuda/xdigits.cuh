// x as two int8 digits per value, for the direct matrix-vector kernels of q8_0 (matmul.cu) and the
// K-quants (matmul_kquant.cu): x = s (d0 + d1 / 2^7) per block of 32 values, to 2^-14 of the
// block's largest |x|, s a power of two and the digits integers in [-64, 64], so that the products
// with integer quants are dp4a's (4 exact products an instruction). The K-quants' minimums and q6_k's
// offset of 32 multiply a sum of x itself: each half block's, in f32, beside the digits.
#pragma once

#include "common.cuh"

namespace sift_cuda {

// Whole warp: lane `lane`'s value v of one block of 32, divided by the block's digit scale s, which
// *s receives. m = max |x| = f 2^(e - 126) with f in [0.5, 1) (e: m's exponent field); s =
// 2^(e - 132), so |x| / s < 64 and the digits' remainders lose no bits. m = 0: the result is 0.
// The powers of two are built from their bits (e < 5 and e < 6: tiny m, in two factors; e = 255:
// inf or NaN, s NaN, so that the block's sums are NaN too).
__device__ __forceinline__ float x_over_scale(float v, float *s)
{
    const unsigned m = __reduce_max_sync(FULL, __float_as_uint(v) & 0x7fffffffu);
    const int e = (int)(m >> 23);
    *s = e == 255 ? __uint_as_float(0x7fc00000u)
         : e < 6  ? 0x1p-126f * __uint_as_float((unsigned)(e + 121) << 23)
                  : __uint_as_float((unsigned)(e - 5) << 23);
    return e < 5 ? v * 0x1p64f * __uint_as_float((unsigned)(195 - e) << 23) : v * __uint_as_float((unsigned)(259 - e) << 23);
}

struct XDigits2 {
    uint4 d[2][2];  // digit j of values 16 h .. 16 h + 15 in d[j][h]
    float scale;    // s (NaN where the block holds an inf or a NaN, so that its sums are NaN too)
    float hsum[2];  // the K-quants: the sum of x over values 16 h .. 16 h + 15 (digitize_block<true>)
    float pad[5];   // 96 bytes: 16-byte aligned, so that each digit word is one 16-byte read
};
static_assert(sizeof(XDigits2) == 96, "XDigits2: 6 16-byte words");

// Whole warp: one block of 32 values of x (v: this lane's) into its digits (HSUMS: and its halves' sums).
template <bool HSUMS = false> __device__ __forceinline__ void digitize_block(float v, int lane, XDigits2 *b)
{
    float sc;
    const float v0 = x_over_scale(v, &sc);
    const float d0 = rintf(v0), d1 = rintf((v0 - d0) * 128.0f);
    reinterpret_cast<signed char *>(b->d[0])[lane] = (signed char)(int)d0;
    reinterpret_cast<signed char *>(b->d[1])[lane] = (signed char)(int)d1;
    if (lane == 0) b->scale = sc;
    if constexpr (HSUMS) {
        float h = v;
        for (int o = 8; o; o >>= 1) h += __shfl_xor_sync(FULL, h, o);
        if ((lane & 15) == 0) b->hsum[lane >> 4] = h;
    }
}

// x's digits for the direct kernels, once per product: nb blocks of 32 values (several tokens' rows
// one after another), one warp each; HSUMS: with each half block's sum (the K-quants).
template <bool HSUMS> __global__ void __launch_bounds__(NT) x_digits_kernel(const float *x, int64_t nb, XDigits2 *xd)
{
    grid_dep_enter();
    const int64_t warp = ((int64_t)blockIdx.x * NT + threadIdx.x) >> 5;
    if (warp < nb) digitize_block<HSUMS>(__ldg(x + warp * 32 + ((int)threadIdx.x & 31)), (int)threadIdx.x & 31, xd + warp);
}

// Launches x_digits_kernel for nb blocks of x.
template <bool HSUMS> inline cudaError_t launch_x_digits(const float *x, int64_t nb, XDigits2 *xd, cudaStream_t st)
{
    return launch(x_digits_kernel<HSUMS>, dim3((unsigned)((nb + NT / 32 - 1) / (NT / 32))), dim3(NT), 0, st, x, nb, xd);
}

} // namespace sift_cuda
