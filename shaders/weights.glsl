// Weight rows of every type (engine/quant.h: ggml's block layouts), shared by get_rows.comp,
// matvec.comp and matmul.comp.
//
// A row is read in units of 8 consecutive values starting at a multiple of 8: one 16-byte vector
// of f16 or bf16, two of f32, or a quarter of a q8_0 / q4_0 block (8 bytes of quants plus the
// block's f16 scale). The Vulkan backend stores q8_0 and q4_0 rows planar (backends/vulkan/
// vk_memory.c): all the row's quants (32 or 16 bytes per block), then all its scales, so the 8
// bytes are one aligned 8-byte load where the row is 16-byte aligned (WALIGN), else two or three
// 32-bit words. A K-quant unit (q4_k, q5_k, q6_k: super-blocks
// of 256 values) is 8 values of one sub-block, all under one scale (and min): 8 bytes of 4-bit
// quants (plus 8 bytes of high bits for q5_k and q6_k) and the super-block's scales, from which the
// unit's scale d * sc (and min dmin * m) are formed at load; every product there is exact in f32. Consecutive invocations taking consecutive
// units read consecutive bytes. Every address goes through saddr() (common.glsl), so chunked
// tensors work: a 16-byte vector at a 16-byte aligned storage offset, or a 32-bit word, never
// straddles a chunk.
//
// WT: 0 f32 (and f16 tensors stored as f32 on devices without 16-bit storage), 1 f16, 2 bf16,
// 3 q8_0, 4 q4_0, 5 q4_k, 6 q5_k, 7 q6_k. WALIGN (float types, q8_0, q4_0): every row starts 16-byte
// aligned (the row length in bytes and the tensor's offset are multiples of 16); otherwise float
// units are read value by value and quants as 32-bit words. For q4_k and q5_k, WALIGN says that
// every super-block starts 16-byte aligned (matvec.comp's slots read it as vectors).

layout(constant_id = 1) const uint WT = 0;
layout(constant_id = 4) const bool WALIGN = true;

const uint WT_F32 = 0u, WT_F16 = 1u, WT_BF16 = 2u, WT_Q8_0 = 3u, WT_Q4_0 = 4u, WT_Q4_K = 5u, WT_Q5_K = 6u, WT_Q6_K = 7u;
const bool WKQUANT = WT == WT_Q4_K || WT == WT_Q5_K || WT == WT_Q6_K;
const bool WQUANT = WT == WT_Q8_0 || WT == WT_Q4_0 || WKQUANT;
// value = q * d - min (w_min) for q4_k and q5_k
const bool WMIN = WT == WT_Q4_K || WT == WT_Q5_K;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4Ref { vec4 v; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer U2Ref { uvec2 v; };

// Bytes of a row of K values.
uint64_t w_row_bytes(uint K)
{
    if (WT == WT_F32) return uint64_t(K) * 4ul;
    if (WT == WT_F16 || WT == WT_BF16) return uint64_t(K) * 2ul;
    if (WT == WT_Q8_0) return uint64_t(K / 32u) * 34ul;
    if (WT == WT_Q4_K) return uint64_t(K / 256u) * 144ul;
    if (WT == WT_Q5_K) return uint64_t(K / 256u) * 176ul;
    if (WT == WT_Q6_K) return uint64_t(K / 256u) * 210ul;
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
// 8 bytes, a.z the scale's bits and a.w which nibbles (q4_0: 0 low, 1 high; q4_k, q5_k: the
// sub-block j, whose parity picks the nibble and which picks q5_k's high bit; q6_k: the group g of
// 32 within its half, which picks the nibble (g / 2) and the pair of high bits (2g)); K-quants keep
// the min's bits in b.x and the high bits' 8 bytes in b.yz.
struct WUnit {
    uvec4 a, b;
};

// The scale and min of sub-block j of a q4_k / q5_k super-block, from its first 16 bytes: h0 =
// (d | dmin << 16, scales 0-3), h1 = (scales 4-7, scales 8-11) (engine/quant.h has the packing).
void k_scale_min(uvec2 h0, uvec2 h1, uint j, out uint sc, out uint m)
{
    const uint sh = (j & 3u) * 8u;
    if (j < 4u) {
        sc = (h0.y >> sh) & 63u;
        m = (h1.x >> sh) & 63u;
    } else {
        sc = ((h1.y >> sh) & 15u) | (((h0.y >> (sh + 6u)) & 3u) << 4);
        m = ((h1.y >> (sh + 4u)) & 15u) | (((h1.x >> (sh + 6u)) & 3u) << 4);
    }
}

// Loads unit u (values 8u .. 8u + 7) of the row starting at storage byte rb. For float types, values
// at or past K read as zero (the tail of a row whose length is not a multiple of 8: its last unit is
// read value by value even where rows are aligned, since whole-unit loads would take the next row's
// values, or bytes past the tensor, which matmul.comp then multiplies by x's zeros: NaN where they
// held an inf or a NaN).
WUnit w_load(TRef t, uint64_t rb, uint u, uint K)
{
    WUnit r;
    r.a = uvec4(0u);
    r.b = uvec4(0u);
    if (WT == WT_Q4_K || WT == WT_Q5_K) {
        const uint j = (u >> 2) & 7u, qq = u & 3u;
        const uint64_t o = rb + uint64_t(u >> 5) * (WT == WT_Q4_K ? 144ul : 176ul);
        r.a.xy = bytes8(t, o + (WT == WT_Q4_K ? 16ul : 48ul) + uint64_t(32u * (j >> 1) + 8u * qq));
        if (WT == WT_Q5_K) r.b.yz = bytes8(t, o + 16ul + uint64_t(8u * qq));
        const uvec2 h0 = bytes8(t, o), h1 = bytes8(t, o + 8ul);
        uint sc, m;
        k_scale_min(h0, h1, j, sc, m);
        const vec2 dm = unpackHalf2x16(h0.x);
        r.a.z = floatBitsToUint(dm.x * float(sc));
        r.b.x = floatBitsToUint(dm.y * float(m));
        r.a.w = j;
    } else if (WT == WT_Q6_K) {
        const uint v = u & 31u, h = v >> 4, g = (v >> 2) & 3u, qq = v & 3u;
        const uint64_t o = rb + uint64_t(u >> 5) * 210ul;
        r.a.xy = bytes8(t, o + uint64_t(64u * h + 32u * (g & 1u) + 8u * qq));
        r.b.yz = bytes8(t, o + 128ul + uint64_t(32u * h + 8u * qq));
        const uint64_t so = o + 192ul + uint64_t(8u * h + 2u * g + (qq >> 1));
        const int sc = bitfieldExtract(int(sword(t, so)), int(so & 3ul) * 8, 8);
        r.a.z = floatBitsToUint(unpackHalf2x16(half_at(t, o + 208ul)).x * float(sc));
        r.a.w = g;
    } else if (WT == WT_Q8_0 || WT == WT_Q4_0) {
        // planar rows: the quants of every block (32 or 16 bytes each), then the blocks' scales
        const uint blk = u >> 2, qq = u & 3u;
        const uint64_t q = rb + uint64_t(WT == WT_Q8_0 ? u * 8u : blk * 16u + (qq & 1u) * 8u);
        r.a.xy = WALIGN ? U2Ref(saddr(t, q)).v : bytes8(t, q);
        r.a.z = half_at(t, rb + uint64_t(WT == WT_Q8_0 ? K : K / 2u) + uint64_t(blk) * 2ul);
        r.a.w = qq >> 1;
    } else if (WALIGN && u * 8u + 8u <= K) {
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

// The four bytes of x each reduced to its bits [s, s + n), as a vector.
vec4 bytes_bits(uint x, uint s, int n)
{
    return vec4(bitfieldExtract(x >> s, 0, n), bitfieldExtract(x >> s, 8, n), bitfieldExtract(x >> s, 16, n),
                bitfieldExtract(x >> s, 24, n));
}

// The unit's values: lo = values 0..3, hi = 4..7; block types give the integers q (q4_0: nibble - 8;
// q6_k: 6 bits - 32) and return the unit's scale d (value = q * d, less w_min for q4_k and q5_k);
// float types return 1.
float w_decode(WUnit r, out vec4 lo, out vec4 hi)
{
    if (WT == WT_Q4_K || WT == WT_Q5_K) {
        const uint s = (r.a.w & 1u) * 4u;
        lo = bytes_bits(r.a.x, s, 4);
        hi = bytes_bits(r.a.y, s, 4);
        if (WT == WT_Q5_K) {
            lo += 16.0 * bytes_bits(r.b.y, r.a.w, 1);
            hi += 16.0 * bytes_bits(r.b.z, r.a.w, 1);
        }
        return uintBitsToFloat(r.a.z);
    }
    if (WT == WT_Q6_K) {
        const uint s = (r.a.w >> 1) * 4u, hs = r.a.w * 2u;
        lo = bytes_bits(r.a.x, s, 4) + 16.0 * bytes_bits(r.b.y, hs, 2) - 32.0;
        hi = bytes_bits(r.a.y, s, 4) + 16.0 * bytes_bits(r.b.z, hs, 2) - 32.0;
        return uintBitsToFloat(r.a.z);
    }
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

// What q4_k and q5_k subtract from every value q * d of the unit (0 for the other types).
float w_min(WUnit r) { return WMIN ? uintBitsToFloat(r.b.x) : 0.0; }
