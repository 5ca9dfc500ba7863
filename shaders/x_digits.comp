#version 460
// x's digits for matvec.comp's integer path (XMODE 1), made once per product: every block of 32
// values of x [T][K] (K a multiple of 32) as two int8 digits per value,
//
//     x = s (d0 + d1 / 2^7),   s = 2^(e - 132) for the block's largest |x| of exponent field e,
//
// so |x| / s < 64 and the digits are integers in [-64, 64]: x is kept to 2^-8 s, 2^-13 of the
// block's largest value (CUDA's XDigits2, cuda/xdigits.cuh, the same digits). A block holding an inf
// or a NaN gets s = NaN, so that every sum over it is NaN, as the CPU's.
//
// Layout of token t's digits, at byte t * xd_stride(K) of the scratch (the same in matvec.comp):
//   byte 16 g:            group g of 8 values (values 8g .. 8g + 7): their 8 digits d0 (one byte
//                         each, in order), then their 8 digits d1: one 16-byte vector per group, so
//                         that a matvec unit of 8 values reads x with one load;
//   byte 2K + 4 b:        block b's s (f32);
//   byte 2K + K/8 + 4 b:  block b's sum of x itself (f32; the K-quants' mins multiply it).
//
// Grid: one invocation per group, 4 consecutive invocations (of one subgroup: subgroups have at
// least 4) per block, which find its largest |x| and its sum by shuffles.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 5) const bool XALIGN = true; // x rows 16-byte aligned

// The product's own push constants (vk_push.h push_matvec; this is its first dispatch): x, out_ =
// where the digits go (scratch: T rows of xd_stride(K) bytes), K and T; the rest unused.
layout(push_constant) uniform push_matvec {
    TRef x;        // f32 [T][K]
    TRef w;
    TRef bias;
    TRef out_;     // the digits
    uint K;
    uint N;
    uint T;
    uint has_bias;
    uint group0;
} pc;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer XIn4 { vec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 16) writeonly buffer XGroupOut { uvec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer XF32Out { float v; };

uint64_t xd_stride(uint K) { return (uint64_t(2u * K + K / 4u) + 15ul) & ~15ul; }

void main()
{
    // invocations numbered by subgroup (backends/vulkan/README.md), so a block's 4 are in one
    const uint local = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + local;
    const bool live = i < pc.T * (pc.K / 8u); // whole blocks: a block's invocations agree
    const uint gpr = pc.K / 8u, t = i / gpr, g = i % gpr;

    float v[8];
    [[unroll]] for (uint j = 0u; j < 8u; j++) v[j] = 0.0;
    if (live) {
        const uint64_t e0 = uint64_t(t) * pc.K + g * 8u;
        if (XALIGN) {
            const vec4 a = XIn4(taddr(pc.x, e0 * 4ul)).v, b = XIn4(taddr(pc.x, e0 * 4ul + 16ul)).v;
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
            v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        } else {
            [[unroll]] for (uint j = 0u; j < 8u; j++) v[j] = ld_f32(pc.x, e0 + j);
        }
    }
    // the block's largest |x| as bits (NaN's bits exceed inf's, so either gives e = 255) and its sum
    // (the pairs added in the same order on all 4 invocations)
    uint m = 0u;
    float sum = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; j++) {
        m = max(m, floatBitsToUint(v[j]) & 0x7fffffffu);
        sum += v[j];
    }
    m = max(m, subgroupShuffleXor(m, 1u));
    m = max(m, subgroupShuffleXor(m, 2u));
    sum += subgroupShuffleXor(sum, 1u);
    sum += subgroupShuffleXor(sum, 2u);
    if (!live) return;

    // s = 2^(e - 132) and x / s, the powers of two built from their bits (tiny blocks in two factors)
    const uint e = m >> 23;
    const float s = e == 255u ? uintBitsToFloat(0x7fc00000u)
                  : e < 6u    ? uintBitsToFloat(0x00800000u) * uintBitsToFloat((e + 121u) << 23) // 2^-126 2^(e - 6)
                              : uintBitsToFloat((e - 5u) << 23);
    const float inv = e < 5u ? uintBitsToFloat(0x5f800000u) * uintBitsToFloat((195u - e) << 23) // 2^64 2^(68 - e)
                             : uintBitsToFloat((259u - e) << 23);
    uvec4 q = uvec4(0u);
    [[unroll]] for (uint j = 0u; j < 8u; j++) {
        const float v0 = v[j] * inv;
        const float d0 = roundEven(v0), d1 = roundEven((v0 - d0) * 128.0);
        const uint sh = (j & 3u) * 8u;
        // e = 255: the digits are whatever the conversion gives; s = NaN makes them not matter
        q[j >> 2] |= (uint(int(d0)) & 255u) << sh;
        q[2u + (j >> 2)] |= (uint(int(d1)) & 255u) << sh;
    }
    const uint64_t row = taddr(pc.out_, uint64_t(t) * xd_stride(pc.K));
    XGroupOut(row + uint64_t(16u * g)).v = q;
    if ((g & 3u) == 0u) {
        const uint b = g >> 2;
        XF32Out(row + uint64_t(2u * pc.K + 4u * b)).v = s;
        XF32Out(row + uint64_t(2u * pc.K + pc.K / 8u + 4u * b)).v = sum;
    }
}
