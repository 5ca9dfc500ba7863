// Weight rows of every type (engine/quant.h: ggml's block layouts), shared by get_rows.comp,
// matvec.comp and matmul.comp.
//
// A row is read in units of 8 consecutive values starting at a multiple of 8: one 16-byte vector
// of f16 or bf16, two of f32, or a quarter of a q8_0 / q4_0 block (8 bytes at an even address, read
// as three 32-bit words, plus the block's f16 scale). Consecutive invocations taking consecutive
// units read consecutive bytes. Every address goes through saddr() (common.glsl), so chunked
// tensors work: a 16-byte vector at a 16-byte aligned storage offset, or a 32-bit word, never
// straddles a chunk.
//
// WT: 0 f32 (and f16 tensors stored as f32 on devices without 16-bit storage), 1 f16, 2 bf16,
// 3 q8_0, 4 q4_0. WALIGN (float types): every unit starts 16-byte aligned (the row length in bytes
// and the tensor's offset are multiples of 16); otherwise units are read value by value.

layout(constant_id = 1) const uint WT = 0;
layout(constant_id = 4) const bool WALIGN = true;

const uint WT_F32 = 0u, WT_F16 = 1u, WT_BF16 = 2u, WT_Q8_0 = 3u, WT_Q4_0 = 4u;
const bool WQUANT = WT == WT_Q8_0 || WT == WT_Q4_0;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4Ref { vec4 v; };

// Bytes of a row of K values.
uint64_t w_row_bytes(uint K)
{
    if (WT == WT_F32) return uint64_t(K) * 4ul;
    if (WT == WT_F16 || WT == WT_BF16) return uint64_t(K) * 2ul;
    if (WT == WT_Q8_0) return uint64_t(K / 32u) * 34ul;
    return uint64_t(K / 32u) * 18ul;
}

// The 32-bit word of the storage holding byte o (o counts from the storage's start).
uint sword(TRef t, uint64_t o) { return U32Ref(saddr(t, o & ~3ul)).v; }

// The 8 bytes at storage byte o (o even), without branches: three words when o is 2 mod 4 (the third
// is re-read as the second otherwise, so that nothing past the 8 bytes' word is touched).
uvec2 bytes8(TRef t, uint64_t o)
{
    const uint64_t a = o & ~3ul;
    const bool odd = (o & 2ul) != 0ul;
    const uint w0 = U32Ref(saddr(t, a)).v, w1 = U32Ref(saddr(t, a + 4ul)).v;
    const uint w2 = U32Ref(saddr(t, a + (odd ? 8ul : 4ul))).v;
    return odd ? uvec2((w0 >> 16) | (w1 << 16), (w1 >> 16) | (w2 << 16)) : uvec2(w0, w1);
}

// The f16 at storage byte o (o even), as its bits.
uint half_at(TRef t, uint64_t o)
{
    const uint w = sword(t, o);
    return (o & 2ul) != 0ul ? w >> 16 : w & 0xffffu;
}

// One value of a float row starting at storage byte rb (value k).
float w_elem(TRef t, uint64_t rb, uint k)
{
    if (WT == WT_F32) return uintBitsToFloat(U32Ref(saddr(t, rb + uint64_t(k) * 4ul)).v);
    const uint h = half_at(t, rb + uint64_t(k) * 2ul);
    if (WT == WT_BF16) return uintBitsToFloat(h << 16);
    return unpackHalf2x16(h).x;
}

// A unit's raw contents: a and b hold the value bits of float types; for block types a.xy holds the
// 8 bytes, a.z the scale's bits and a.w which nibbles (q4_0: 0 low, 1 high).
struct WUnit {
    uvec4 a, b;
};

// Loads unit u (values 8u .. 8u + 7) of the row starting at storage byte rb. For float types when
// !WALIGN, values at or past K read as zero (the tail of a row whose length is not a multiple of 8).
WUnit w_load(TRef t, uint64_t rb, uint u, uint K)
{
    WUnit r;
    r.a = uvec4(0u);
    r.b = uvec4(0u);
    if (WT == WT_Q8_0 || WT == WT_Q4_0) {
        const uint blk = u >> 2, qq = u & 3u;
        const uint64_t o = rb + uint64_t(blk) * (WT == WT_Q8_0 ? 34ul : 18ul);
        r.a.xy = bytes8(t, o + 2ul + uint64_t(WT == WT_Q8_0 ? qq * 8u : (qq & 1u) * 8u));
        r.a.z = half_at(t, o);
        r.a.w = qq >> 1;
    } else if (WALIGN) {
        if (WT == WT_F32) {
            r.a = U4Ref(saddr(t, rb + uint64_t(u) * 32ul)).v;
            r.b = U4Ref(saddr(t, rb + uint64_t(u) * 32ul + 16ul)).v;
        } else {
            r.a = U4Ref(saddr(t, rb + uint64_t(u) * 16ul)).v;
        }
    } else {
        [[unroll]] for (uint i = 0u; i < 8u; i++) {
            const uint k = u * 8u + i;
            float f = 0.0;
            if (k < K) f = w_elem(t, rb, k);
            if (i < 4u) r.a[i] = floatBitsToUint(f);
            else r.b[i - 4u] = floatBitsToUint(f);
        }
    }
    return r;
}

// The unit's values: lo = values 0..3, hi = 4..7; block types give the integers q (q4_0: nibble - 8)
// and return the block's scale d (value = q * d); float types return 1.
float w_decode(WUnit r, out vec4 lo, out vec4 hi)
{
    if (WT == WT_Q8_0) {
        const int x = int(r.a.x), y = int(r.a.y);
        lo = vec4(bitfieldExtract(x, 0, 8), bitfieldExtract(x, 8, 8), bitfieldExtract(x, 16, 8), bitfieldExtract(x, 24, 8));
        hi = vec4(bitfieldExtract(y, 0, 8), bitfieldExtract(y, 8, 8), bitfieldExtract(y, 16, 8), bitfieldExtract(y, 24, 8));
        return unpackHalf2x16(r.a.z).x;
    }
    if (WT == WT_Q4_0) {
        const int s = int(r.a.w) * 4;
        const uint x = r.a.x >> s, y = r.a.y >> s;
        lo = vec4(ivec4(bitfieldExtract(x, 0, 4), bitfieldExtract(x, 8, 4), bitfieldExtract(x, 16, 4), bitfieldExtract(x, 24, 4)) - 8);
        hi = vec4(ivec4(bitfieldExtract(y, 0, 4), bitfieldExtract(y, 8, 4), bitfieldExtract(y, 16, 4), bitfieldExtract(y, 24, 4)) - 8);
        return unpackHalf2x16(r.a.z).x;
    }
    if (WT == WT_F32 || !WALIGN) {
        lo = uintBitsToFloat(r.a);
        hi = uintBitsToFloat(r.b);
    } else if (WT == WT_F16) {
        lo = vec4(unpackHalf2x16(r.a.x), unpackHalf2x16(r.a.y));
        hi = vec4(unpackHalf2x16(r.a.z), unpackHalf2x16(r.a.w));
    } else {
        lo = uintBitsToFloat(uvec4(r.a.x << 16, r.a.x & 0xffff0000u, r.a.y << 16, r.a.y & 0xffff0000u));
        hi = uintBitsToFloat(uvec4(r.a.z << 16, r.a.z & 0xffff0000u, r.a.w << 16, r.a.w & 0xffff0000u));
    }
    return 1.0;
}
