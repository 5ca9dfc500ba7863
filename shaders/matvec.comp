#version 460
// matmul for a few tokens (decode): out[t][n] = dot(x[t], w[n]) (+ bias[n]) for T <= NT tokens, w in
// any weight type (weights.glsl), activations and sums in f32.
//
// Grid: one workgroup per R rows of w. Float types and q8_0: its invocations stride over the rows'
// units of 8 values: invocation i takes units i, i + WGS, ... (U of them per trip, all loads issued
// before the arithmetic), so that consecutive invocations read consecutive 16-byte vectors of a
// float row, or consecutive quarters of q8_0 blocks; the x values of a unit are read once for all R
// rows. Each invocation keeps R x NT sums; q8_0 sums q * x per unit and scales by d once. The sums
// are reduced over the subgroup, then over the workgroup's subgroups in a fixed order.
//
// The K-quants (q4_k, q5_k, q6_k) and q4_0 stride over slots of 16 values instead, 16 slots a
// super-block, 2 a q4_0 block (kq_load, kq_decode): a unit of 8 would re-read the super-block's
// scales for every 8 values and read each 4-bit quant byte twice (its two nibbles belong to two
// units). A slot reads its quants with one 8-byte load (q4_k, q5_k: 4 groups of 4 values in two
// sub-blocks; q6_k: 4 groups in four; q4_0: 4 groups in one block), the super-block's scales with
// one 16-byte load that its 16 lanes share, and consecutive lanes read consecutive quant bytes.
//
// x as digits (XMODE 1, block types only): x_digits.comp has written every block of 32 values of x
// as two int8 digits per value and a scale s, x = s (d0 + d1 / 2^7), before this dispatch (pc.x
// then addresses those digits: its layout is in x_digits.comp). A unit or slot multiplies its
// quants, as int8 packed four to a word (q4_0's q - 8 and q6_k's q - 32 sign-extended in place),
// with the digits in 32-bit integer sums, 4 products a step: dot4, which is the device's OpSDot
// where this file is compiled with MATVEC_INTEGER_DOT (the matvec_idot kernel, for devices with
// shaderIntegerDotProduct), plain integer multiply-adds otherwise (the matvec kernel). The sum
// 128 sum(q d0) + sum(q d1) of the values under one scale (a q8_0 unit's 8, |q| <= 128: below 2^23
// + 2^16; 8 of 4- to 6-bit quants: far less) is below 2^24, so its conversion to f32 is exact; it
// is scaled by the weights' scale times s / 2^7. The K-quants' mins multiply the f32 sum
// of x over their sub-block (one x block), taken once per sub-block by the slots with s % 4 = 0.
#ifdef MATVEC_INTEGER_DOT
#extension GL_EXT_spirv_intrinsics : require
#endif
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "weights.glsl"

layout(constant_id = 0) const uint WGS = 128;   // workgroup size
layout(constant_id = 2) const uint NT = 1;      // tokens (T <= NT; the host sets NT = T)
layout(constant_id = 3) const uint R = 1;       // rows per workgroup (R * NT <= 16)
layout(constant_id = 5) const bool XALIGN = true; // x rows 16-byte aligned (K % 4 == 0)
layout(constant_id = 6) const uint U = 2;       // units per invocation per trip
layout(constant_id = 7) const uint XMODE = 0;   // 0: x f32 [T][K]; 1: x's digits (block types)

layout(local_size_x_id = 0) in;

layout(push_constant) uniform push_matvec {
    TRef x;          // f32 [T][K]; XMODE 1: the digits of x (scratch, x_digits.comp's layout)
    TRef w;          // [N][K]
    TRef bias;       // f32 [N] (has_bias)
    TRef out_;       // f32 [T][N]
    uint K;
    uint N;
    uint T;
    uint has_bias;
    uint group0;     // the first workgroup of this dispatch
} pc;

shared float sh_sum[R * NT * WGS]; // [sum][subgroup]: room for subgroups of any size

vec4 x4(uint t, uint k)
{
    const uint64_t e = uint64_t(t) * pc.K + k;
    if (XALIGN) return V4Ref(taddr(pc.x, e * 4ul)).v;
    return vec4(ld_f32(pc.x, e), ld_f32(pc.x, e + 1ul), ld_f32(pc.x, e + 2ul), ld_f32(pc.x, e + 3ul));
}

// ---- x's digits (XMODE 1) ----

#ifdef MATVEC_INTEGER_DOT
// OpSDot (SPV_KHR_integer_dot_product; core in SPIR-V 1.6), opcode 4450, on two words of 4 packed
// int8 (PackedVectorFormat4x8Bit, 0), with the capabilities DotProduct (6019) and
// DotProductInput4x8BitPacked (6018): glslang 12 has no GL_EXT_integer_dot_product, so the
// instruction is declared through GL_EXT_spirv_intrinsics.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_packed(int a, int b, spirv_literal int packed_vector_format);
int dot4(uint a, uint b) { return sdot_packed(int(a), int(b), 0); }
#else
int dot4(uint a, uint b)
{
    const ivec4 p = ivec4(bitfieldExtract(int(a), 0, 8), bitfieldExtract(int(a), 8, 8), bitfieldExtract(int(a), 16, 8),
                          bitfieldExtract(int(a), 24, 8));
    const ivec4 q = ivec4(bitfieldExtract(int(b), 0, 8), bitfieldExtract(int(b), 8, 8), bitfieldExtract(int(b), 16, 8),
                          bitfieldExtract(int(b), 24, 8));
    return p.x * q.x + p.y * q.y + p.z * q.z + p.w * q.w;
}
#endif

// 128 sum(w d0) + sum(w d1) over 4 values: w packed int8, xd = (d0 word, d1 word) of their digits
int dot_digits(uint w, uvec2 xd) { return 128 * dot4(w, xd.x) + dot4(w, xd.y); }

// Bytes per token of the digits, and token t's group g of 8 values: (d0 of values 0-3, d0 of 4-7,
// d1 of 0-3, d1 of 4-7); block b's s / 2^7 and its sum of x (x_digits.comp).
uint64_t xd_stride() { return (uint64_t(2u * pc.K + pc.K / 4u) + 15ul) & ~15ul; }
uvec4 xd_group(uint t, uint g) { return U4Ref(taddr(pc.x, uint64_t(t) * xd_stride() + uint64_t(16u * g))).v; }
float xd_scale(uint t, uint b)
{
    return uintBitsToFloat(U32Ref(taddr(pc.x, uint64_t(t) * xd_stride() + uint64_t(2u * pc.K + 4u * b))).v) * (1.0 / 128.0);
}
float xd_sum(uint t, uint b)
{
    return uintBitsToFloat(U32Ref(taddr(pc.x, uint64_t(t) * xd_stride() + uint64_t(2u * pc.K + pc.K / 8u + 4u * b))).v);
}

// Four 4-bit (q4_0) or 6-bit (q6_k) values, one a byte, as int8 less 8 or 32: flipping the top bit
// gives the difference in that many bits, whose sign is then copied into the byte's upper bits.
uint less_8(uint n)
{
    const uint t = n ^ 0x08080808u;
    return t | ((t & 0x08080808u) * 0x1eu);
}
uint less_32(uint n)
{
    const uint t = n ^ 0x20202020u;
    return t | ((t & 0x20202020u) * 0x06u);
}

// Each invocation's sums, [row][token] (a function's array parameter sized by specialization
// constants would not be one array with the caller's).
float acc[R * NT];

// ---- slots of 16 values: the K-quants and q4_0 ----

const bool WSLOT = WKQUANT || WT == WT_Q4_0;

// A slot's raw bytes. q4_k, q5_k: h = the super-block's first 16 bytes (d, dmin, scales), q.xy = 8
// bytes of quants (values base + 0..7 of sub-block 2c in the low nibbles, of 2c + 1 in the high),
// q.zw (q5_k) the 8 bytes of high bits of the same positions. q6_k: h.xy = the 8 int8 scales of the
// slot's half, h.z = d's bits; q.x, q.y = the low-bit words of groups 0/2 and 1/3, q.z = the high
// bits' word. q4_0: q.xy = 8 bytes of quants (values 8h .. 8h + 7 of the block in the low nibbles,
// 16 + 8h .. in the high), h.x = the block's scale's bits.
struct KRaw {
    uvec4 h, q;
};

// The 32-bit word at storage byte o (o even).
uint word_at(TRef t, uint64_t o)
{
    const uint64_t a = o & ~3ul;
    const uint w0 = U32Ref(saddr(t, a)).v, w1 = U32Ref(saddr(t, a + ((o & 2ul) != 0ul ? 4ul : 0ul))).v;
    return (o & 2ul) != 0ul ? (w0 >> 16) | (w1 << 16) : w0;
}

// Slot s of the row at storage byte rb: super-block s / 16, slot s % 16 of it (q4_0: block s / 2,
// half s % 2, of a planar row: weights.glsl). WALIGN: the super-blocks (q4_0: the rows) are 16-byte
// aligned, so the loads are single vectors.
KRaw kq_load(TRef t, uint64_t rb, uint s)
{
    KRaw r;
    r.q = uvec4(0u);
    r.h = uvec4(0u);
    const uint j = s & 15u;
    if (WT == WT_Q4_0) {
        const uint64_t q = rb + uint64_t(s) * 8ul;
        r.q.xy = WALIGN ? U2Ref(saddr(t, q)).v : bytes8(t, q);
        r.h.x = half_at(t, rb + uint64_t(pc.K / 2u) + uint64_t(s >> 1) * 2ul);
        return r;
    }
    if (WT == WT_Q6_K) {
        const uint64_t o = rb + uint64_t(s >> 4) * 210ul;
        const uint h = j >> 3, l = (j & 7u) * 4u;
        r.q.x = word_at(t, o + uint64_t(64u * h + l));
        r.q.y = word_at(t, o + uint64_t(64u * h + 32u + l));
        r.q.z = word_at(t, o + uint64_t(128u + 32u * h + l));
        r.h.xy = bytes8(t, o + uint64_t(192u + 8u * h));
        r.h.z = half_at(t, o + 208ul);
        r.h.w = 0u;
        return r;
    }
    const uint64_t o = rb + uint64_t(s >> 4) * (WT == WT_Q4_K ? 144ul : 176ul);
    const uint64_t qo = o + (WT == WT_Q4_K ? 16ul : 48ul) + uint64_t(8u * j);
    if (WALIGN) {
        r.h = U4Ref(saddr(t, o)).v;
        r.q.xy = U2Ref(saddr(t, qo)).v;
        if (WT == WT_Q5_K) r.q.zw = U2Ref(saddr(t, o + 16ul + uint64_t(8u * (j & 3u)))).v;
    } else {
        r.h.xy = bytes8(t, o);
        r.h.zw = bytes8(t, o + 8ul);
        r.q.xy = bytes8(t, qo);
        if (WT == WT_Q5_K) r.q.zw = bytes8(t, o + 16ul + uint64_t(8u * (j & 3u)));
    }
    return r;
}

// The slot's 16 values as 4 groups of 4: group g is q[g] * d[g] - m[g] at x positions
// kq_base(s) + kq_off(g) .. + 3.
uint kq_off(uint g)
{
    if (WT == WT_Q6_K) return 32u * g;
    return 4u * (g & 1u) + (WT == WT_Q4_0 ? 16u : 32u) * (g >> 1);
}

uint kq_base(uint s)
{
    const uint j = s & 15u;
    if (WT == WT_Q4_0) return s * 8u + (s >> 1) * 16u; // block s / 2 at 32 (s / 2), half s % 2 at 8 (s % 2)
    if (WT == WT_Q6_K) return (s >> 4) * 256u + (j >> 3) * 128u + (j & 7u) * 4u;
    return (s >> 4) * 256u + (j >> 2) * 64u + (j & 3u) * 8u;
}

void kq_decode(KRaw r, uint s, out vec4 q[4], out vec4 d, out vec4 m)
{
    const uint j = s & 15u;
    if (WT == WT_Q4_0) {
        q[0] = bytes_bits(r.q.x, 0u, 4) - 8.0;
        q[1] = bytes_bits(r.q.y, 0u, 4) - 8.0;
        q[2] = bytes_bits(r.q.x, 4u, 4) - 8.0;
        q[3] = bytes_bits(r.q.y, 4u, 4) - 8.0;
        d = vec4(unpackHalf2x16(r.h.x).x);
        m = vec4(0.0);
        return;
    }
    if (WT == WT_Q6_K) {
        const uint hi = (j & 7u) >> 2; // the 16 positions of the half whose scales the slot uses
        const float dd = unpackHalf2x16(r.h.z).x;
        [[unroll]] for (uint g = 0u; g < 4u; g++) {
            q[g] = bytes_bits(g % 2u == 0u ? r.q.x : r.q.y, (g / 2u) * 4u, 4) + 16.0 * bytes_bits(r.q.z, 2u * g, 2) - 32.0;
            const uint b = hi + 2u * g; // scale byte of group g
            d[g] = dd * float(bitfieldExtract(int(b < 4u ? r.h.x : r.h.y), int(b & 3u) * 8, 8));
        }
        m = vec4(0.0);
        return;
    }
    const uint c = j >> 2; // sub-blocks 2c (low nibbles) and 2c + 1 (high)
    q[0] = bytes_bits(r.q.x, 0u, 4);
    q[1] = bytes_bits(r.q.y, 0u, 4);
    q[2] = bytes_bits(r.q.x, 4u, 4);
    q[3] = bytes_bits(r.q.y, 4u, 4);
    if (WT == WT_Q5_K) {
        q[0] += 16.0 * bytes_bits(r.q.z, 2u * c, 1);
        q[1] += 16.0 * bytes_bits(r.q.w, 2u * c, 1);
        q[2] += 16.0 * bytes_bits(r.q.z, 2u * c + 1u, 1);
        q[3] += 16.0 * bytes_bits(r.q.w, 2u * c + 1u, 1);
    }
    uint sc0, m0, sc1, m1;
    k_scale_min(r.h.xy, r.h.zw, 2u * c, sc0, m0);
    k_scale_min(r.h.xy, r.h.zw, 2u * c + 1u, sc1, m1);
    const vec2 dm = unpackHalf2x16(r.h.x);
    d = dm.x * vec4(float(sc0), float(sc0), float(sc1), float(sc1));
    m = dm.y * vec4(float(m0), float(m0), float(m1), float(m1));
}

// acc[r * NT + t] += the slots' sums of rows rb[r] for token t: each invocation takes slots tid,
// tid + WGS, ..., U of them a trip, every row's loads issued before the arithmetic.
void kq_rows(uint tid, uint64_t rb[R])
{
    const uint nslots = pc.K / 16u;
    for (uint s0 = tid; s0 < nslots; s0 += WGS * U) {
        KRaw raw[U * R];
        [[unroll]] for (uint i = 0u; i < U; i++) {
            const uint s = s0 + i * WGS;
            if (s < nslots)
                [[unroll]] for (uint r = 0u; r < R; r++) raw[i * R + r] = kq_load(pc.w, rb[r], s);
        }
        [[unroll]] for (uint i = 0u; i < U; i++) {
            const uint s = s0 + i * WGS;
            if (s < nslots) {
                const uint base = kq_base(s);
                vec4 xg[NT][4];
                [[unroll]] for (uint t = 0u; t < NT; t++)
                    [[unroll]] for (uint g = 0u; g < 4u; g++) xg[t][g] = x4(min(t, pc.T - 1u), base + kq_off(g));
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    vec4 q[4], d, m;
                    kq_decode(raw[i * R + r], s, q, d, m);
                    [[unroll]] for (uint t = 0u; t < NT; t++) {
                        vec4 qx = vec4(dot(q[0], xg[t][0]), dot(q[1], xg[t][1]), dot(q[2], xg[t][2]), dot(q[3], xg[t][3]));
                        float sum = dot(d, qx);
                        if (WMIN) {
                            const vec4 one = vec4(1.0);
                            sum -= dot(m, vec4(dot(xg[t][0], one), dot(xg[t][1], one), dot(xg[t][2], one), dot(xg[t][3], one)));
                        }
                        acc[r * NT + t] += sum;
                    }
                }
            }
        }
    }
}

// The slot's 4 groups of 4 values (kq_decode's) as packed int8 quants qw[g], with the group's scale
// d[g] and min m[g] (q4_k, q5_k: the sub-block's dmin m, applied to its whole sub-block by kq_rows_digits).
void kq_ints(KRaw r, uint s, out uint qw[4], out vec4 d, out vec4 m)
{
    const uint j = s & 15u;
    const uint lo = 0x0f0f0f0fu;
    m = vec4(0.0);
    if (WT == WT_Q4_0) {
        qw[0] = less_8(r.q.x & lo);
        qw[1] = less_8(r.q.y & lo);
        qw[2] = less_8((r.q.x >> 4) & lo);
        qw[3] = less_8((r.q.y >> 4) & lo);
        d = vec4(unpackHalf2x16(r.h.x).x);
        return;
    }
    if (WT == WT_Q6_K) {
        const uint hi = (j & 7u) >> 2;
        const float dd = unpackHalf2x16(r.h.z).x;
        [[unroll]] for (uint g = 0u; g < 4u; g++) {
            const uint n = (((g % 2u == 0u ? r.q.x : r.q.y) >> ((g / 2u) * 4u)) & lo) | (((r.q.z >> (2u * g)) & 0x03030303u) << 4);
            qw[g] = less_32(n);
            const uint b = hi + 2u * g;
            d[g] = dd * float(bitfieldExtract(int(b < 4u ? r.h.x : r.h.y), int(b & 3u) * 8, 8));
        }
        return;
    }
    const uint c = j >> 2;
    qw[0] = r.q.x & lo;
    qw[1] = r.q.y & lo;
    qw[2] = (r.q.x >> 4) & lo;
    qw[3] = (r.q.y >> 4) & lo;
    if (WT == WT_Q5_K) {
        qw[0] |= ((r.q.z >> (2u * c)) & 0x01010101u) << 4;
        qw[1] |= ((r.q.w >> (2u * c)) & 0x01010101u) << 4;
        qw[2] |= ((r.q.z >> (2u * c + 1u)) & 0x01010101u) << 4;
        qw[3] |= ((r.q.w >> (2u * c + 1u)) & 0x01010101u) << 4;
    }
    uint sc0, m0, sc1, m1;
    k_scale_min(r.h.xy, r.h.zw, 2u * c, sc0, m0);
    k_scale_min(r.h.xy, r.h.zw, 2u * c + 1u, sc1, m1);
    const vec2 dm = unpackHalf2x16(r.h.x);
    d = dm.x * vec4(float(sc0), float(sc0), float(sc1), float(sc1));
    m = dm.y * vec4(float(m0), float(m0), float(m1), float(m1));
}

// kq_rows against x's digits: the same slots and loads; per token, the digits of the slot's groups
// (xd[t][g]: d0 and d1 words of values kq_base(s) + kq_off(g) .. + 3) and their blocks' s / 2^7. q4_0's
// 4 groups lie in one block, q4_k's and q5_k's in two (groups 0-1, 2-3), q6_k's in four.
void kq_rows_digits(uint tid, uint64_t rb[R])
{
    const uint nslots = pc.K / 16u;
    for (uint s0 = tid; s0 < nslots; s0 += WGS * U) {
        KRaw raw[U * R];
        [[unroll]] for (uint i = 0u; i < U; i++) {
            const uint s = s0 + i * WGS;
            if (s < nslots)
                [[unroll]] for (uint r = 0u; r < R; r++) raw[i * R + r] = kq_load(pc.w, rb[r], s);
        }
        [[unroll]] for (uint i = 0u; i < U; i++) {
            const uint s = s0 + i * WGS;
            if (s < nslots) {
                const uint base = kq_base(s), b0 = base / 32u;
                const bool min_here = WMIN && (s & 3u) == 0u; // the slot that takes its sub-blocks' mins
                uvec2 xd[NT][4];
                vec4 xs[NT];
                vec2 xsum[NT];
                [[unroll]] for (uint t = 0u; t < NT; t++) {
                    const uint tt = min(t, pc.T - 1u);
                    if (WT == WT_Q6_K) {
                        [[unroll]] for (uint g = 0u; g < 4u; g++) {
                            const uint p = base + kq_off(g);
                            const uvec4 v = xd_group(tt, p / 8u);
                            xd[t][g] = ((p >> 2) & 1u) == 0u ? v.xz : v.yw;
                            xs[t][g] = xd_scale(tt, p / 32u);
                        }
                    } else {
                        const uvec4 a = xd_group(tt, base / 8u), c = xd_group(tt, (base + kq_off(2u)) / 8u);
                        xd[t][0] = a.xz;
                        xd[t][1] = a.yw;
                        xd[t][2] = c.xz;
                        xd[t][3] = c.yw;
                        xs[t] = vec4(xd_scale(tt, b0));
                        if (WT != WT_Q4_0) xs[t].zw = vec2(xd_scale(tt, b0 + 1u));
                    }
                    xsum[t] = vec2(0.0);
                    if (min_here) xsum[t] = vec2(xd_sum(tt, b0), xd_sum(tt, b0 + 1u));
                }
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    uint qw[4];
                    vec4 d, m;
                    kq_ints(raw[i * R + r], s, qw, d, m);
                    [[unroll]] for (uint t = 0u; t < NT; t++) {
                        float sum;
                        if (WT == WT_Q6_K) {
                            const vec4 n = vec4(dot_digits(qw[0], xd[t][0]), dot_digits(qw[1], xd[t][1]),
                                                dot_digits(qw[2], xd[t][2]), dot_digits(qw[3], xd[t][3]));
                            sum = dot(d * xs[t], n);
                        } else { // groups 0-1 and 2-3 share their scales
                            const int n01 = dot_digits(qw[0], xd[t][0]) + dot_digits(qw[1], xd[t][1]);
                            const int n23 = dot_digits(qw[2], xd[t][2]) + dot_digits(qw[3], xd[t][3]);
                            sum = float(n01) * (d.x * xs[t].x) + float(n23) * (d.z * xs[t].z);
                        }
                        if (min_here) sum -= m.x * xsum[t].x + m.z * xsum[t].y;
                        acc[r * NT + t] += sum;
                    }
                }
            }
        }
    }
}

void main()
{
    const uint tid = gl_LocalInvocationIndex;
    const uint n0 = (pc.group0 + gl_WorkGroupID.x) * R;
    const uint nunits = pc.K / 8u;
    const uint64_t rbytes = w_row_bytes(pc.K), wbase = pc.w.meta & META_OFFSET_MASK;
    uint64_t rb[R];
    [[unroll]] for (uint r = 0u; r < R; r++) rb[r] = wbase + uint64_t(min(n0 + r, pc.N - 1u)) * rbytes;

    [[unroll]] for (uint i = 0u; i < R * NT; i++) acc[i] = 0.0;

    if (WSLOT && XMODE == 1u) kq_rows_digits(tid, rb);
    else if (WSLOT) kq_rows(tid, rb);
    else if (XMODE == 1u) for (uint u0 = tid; u0 < nunits; u0 += WGS * U) { // q8_0 against x's digits
        WUnit wu[U * R];
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint u = u0 + j * WGS;
            if (u < nunits)
                [[unroll]] for (uint r = 0u; r < R; r++) wu[j * R + r] = w_load(pc.w, rb[r], u, pc.K);
        }
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint u = u0 + j * WGS;
            if (u < nunits) {
                uvec4 xd[NT];
                float xs[NT];
                [[unroll]] for (uint t = 0u; t < NT; t++) {
                    const uint tt = min(t, pc.T - 1u);
                    xd[t] = xd_group(tt, u);
                    xs[t] = xd_scale(tt, u >> 2);
                }
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    const WUnit w = wu[j * R + r];
                    const float d = unpackHalf2x16(w.a.z).x;
                    [[unroll]] for (uint t = 0u; t < NT; t++) {
                        const int n = dot_digits(w.a.x, xd[t].xz) + dot_digits(w.a.y, xd[t].yw);
                        acc[r * NT + t] += float(n) * (d * xs[t]);
                    }
                }
            }
        }
    }
    else for (uint u0 = tid; u0 < nunits; u0 += WGS * U) {
        WUnit wu[U * R];
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint u = u0 + j * WGS;
            if (u < nunits)
                [[unroll]] for (uint r = 0u; r < R; r++) wu[j * R + r] = w_load(pc.w, rb[r], u, pc.K);
        }
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint u = u0 + j * WGS;
            if (u < nunits) {
                vec4 xl[NT], xh[NT];
                [[unroll]] for (uint t = 0u; t < NT; t++) {
                    const uint tt = min(t, pc.T - 1u);
                    xl[t] = x4(tt, u * 8u);
                    xh[t] = x4(tt, u * 8u + 4u);
                }
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    vec4 lo, hi;
                    const float d = w_decode(wu[j * R + r], lo, hi);
                    [[unroll]] for (uint t = 0u; t < NT; t++) {
                        float s = dot(lo, xl[t]) + dot(hi, xh[t]);
                        if (WQUANT) s *= d;
                        acc[r * NT + t] += s;
                    }
                }
            }
        }
    }
    // the last K % 8 values (float types only)
    if (!WQUANT && tid < pc.K - nunits * 8u) {
        const uint k = nunits * 8u + tid;
        [[unroll]] for (uint r = 0u; r < R; r++) {
            const float wv = w_elem(pc.w, rb[r], k);
            [[unroll]] for (uint t = 0u; t < NT; t++)
                acc[r * NT + t] += wv * ld_f32(pc.x, uint64_t(min(t, pc.T - 1u)) * pc.K + k);
        }
    }

    [[unroll]] for (uint i = 0u; i < R * NT; i++) {
        const float s = subgroupAdd(acc[i]);
        if (subgroupElect()) sh_sum[i * WGS + gl_SubgroupID] = s;
    }
    barrier();
    if (tid < R * NT) {
        const uint r = tid / NT, t = tid % NT, n = n0 + r;
        float s = 0.0;
        for (uint g = 0u; g < gl_NumSubgroups; g++) s += sh_sum[tid * WGS + g];
        if (n < pc.N && t < pc.T) {
            if (pc.has_bias != 0u) s += ld_f32(pc.bias, n);
            st_f32(pc.out_, uint64_t(t) * pc.N + n, s);
        }
    }
}
