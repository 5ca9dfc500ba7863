#version 460
// kv_write: cache[h][pos0 + t] = src[t][h] (src f32 [T][Hkv][D], cache [Hkv][Ncap][D]). MODE 0: f32
// cache, copied bit for bit; MODE 1: f16 cache, two values per 32-bit word (the cache's offset is a
// multiple of 4 bytes and D is even), rounded to nearest even exactly as sift_float_to_half; MODE 2:
// an f16 cache stored as f32 (devices without 16-bit storage): the same rounding, stored widened.
// Invocation e of the flattened grid writes element e (MODE 1: elements 2e and 2e + 1). MODE 3: an
// int8 cache [Hkv][Ncap][D + 4] (rows of D + 4 bytes, 4-byte aligned: D is a multiple of 8):
// invocation e quantizes source row e on its own, as the CPU's cpu_quantize_row: m = max |x[i]|,
// q[i] = x[i] * 127 / m rounded half away from zero, clamped to [-127, 127] (0 where m = 0), four
// int8 per 32-bit store, then m's bits in the row's last word. The cache may be paged (common.glsl
// kv_row): a row whose page is absent is not written.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 7) const uint MODE = 0;

layout(local_size_x = 256) in;

layout(push_constant) uniform push_kv_write {
    TRef src;        // f32 [T][Hkv][D]
    KVRef cache;     // [Hkv][Ncap][D]
    uint64_t n;      // elements to write (MODE 1: pairs; MODE 3: rows)
    uint H;          // Hkv
    uint D;          // values per row (MODE 1: pairs per row); a row is 4 * D bytes (MODE 3: D + 4)
    uint pos0;
} pc;

// backend.h sift_float_to_half, bit for bit.
uint half_bits(float f)
{
    const uint x = floatBitsToUint(f);
    const uint sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (ax >= 0x477ff000u) return sign | 0x7c00u;
    if (ax < 0x38800000u) { // subnormal half: round(|f| * 2^24) to nearest even, in integers
        const uint e = ax >> 23;
        if (e < 102u) return sign; // below 2^-25: rounds to zero
        const uint m = (ax & 0x7fffffu) | 0x800000u, sh = 126u - e; // |f| * 2^24 = m / 2^sh, sh in 14..24
        uint q = m >> sh;
        const uint rem = m & ((1u << sh) - 1u), halfway = 1u << (sh - 1u);
        if (rem > halfway || (rem == halfway && (q & 1u) != 0u)) q++;
        return sign | q;
    }
    uint h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
    const uint rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return sign | h;
}

// MODE 3: source row r = t * H + h into its cache row.
void quantize_row(uint64_t r)
{
    const uint h = uint(r % pc.H), t = uint(r / pc.H);
    uint64_t row;
    if (!kv_row(pc.cache, h, pc.pos0 + t, pc.D + 4u, row)) return;
    const uint64_t s0 = r * pc.D;
    float m = 0.0;
    for (uint i = 0u; i < pc.D; i++) m = max(m, abs(ld_f32(pc.src, s0 + i)));
    for (uint i = 0u; i < pc.D; i += 4u) {
        uint w = 0u;
        [[unroll]] for (uint b = 0u; b < 4u; b++) {
            precise float v = ld_f32(pc.src, s0 + i + b) * 127.0 / m; // as the CPU: x * 127, then / m
            const float q = m > 0.0 ? clamp(sign(v) * floor(abs(v) + 0.5), -127.0, 127.0) : 0.0;
            w |= (uint(int(q)) & 0xffu) << (8u * b);
        }
        U32Ref(taddr(pc.cache.t, row + uint64_t(i))).v = w;
    }
    U32Ref(taddr(pc.cache.t, row + uint64_t(pc.D))).v = floatBitsToUint(m);
}

void main()
{
    const uint64_t e = (uint64_t(gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256ul + gl_LocalInvocationIndex;
    if (e >= pc.n) return;
    if (MODE == 3u) {
        quantize_row(e);
        return;
    }
    const uint j = uint(e % pc.D);
    const uint64_t r = e / pc.D; // source row t * H + h
    const uint h = uint(r % pc.H), t = uint(r / pc.H);
    uint64_t row;
    if (!kv_row(pc.cache, h, pc.pos0 + t, pc.D * 4u, row)) return;
    const uint64_t dst = row + uint64_t(j) * 4ul; // bytes
    if (MODE == 1u) {
        const float a = ld_f32(pc.src, 2ul * e), b = ld_f32(pc.src, 2ul * e + 1ul);
        U32Ref(taddr(pc.cache.t, dst)).v = half_bits(a) | (half_bits(b) << 16);
    } else if (MODE == 2u) {
        F32Ref(taddr(pc.cache.t, dst)).v = unpackHalf2x16(half_bits(ld_f32(pc.src, e))).x;
    } else {
        U32Ref(taddr(pc.cache.t, dst)).v = ld_u32(pc.src, e);
    }
}
