#version 460
// score_max for short rows (D <= 32; TokenButler's scorer: d' = 16 f16 keys, 32 bytes a row) and
// for int8 keys at every D (below):
// u[g][j] = max over the G heads h of KV head g of scale * dot(q[h], K[g][begin + j]).
//
// A plain streaming kernel, because at 32 bytes a row the work per byte is tiny and anything that
// holds rows or queries in registers (score.comp's GMAX path) costs occupancy, and with it the
// loads in flight that the memory bandwidth needs. One invocation per K row: it loads the row as
// VEC 16-byte vectors (2 for D = 16 f16), computes the G dot products against the group's queries,
// staged once per workgroup in shared memory (every invocation reads the same q value at a time: a
// broadcast), keeps their max in a register and writes it once. A workgroup covers WGS consecutive
// positions of one KV head (grid: position tiles x KV heads), so a subgroup's loads cover
// consecutive rows (one contiguous range, whole sectors after the VEC loads) and its stores are
// contiguous. K may be paged (common.glsl kv_row; a page's rows are consecutive, so the loads stay
// contiguous within a page); an absent row is a zero row, so its value is max over h of scale * 0,
// as in the CPU reference. A predicated node (skip non-zero at run time) does nothing.
//
// I8: K is an int8 cache of quantized rows (sift_op_kv_write): a row is D int8 q[i], then the f32
// m = max |x[i]| in its last 4 bytes, D + 4 bytes in all (20 at D = 16). Rows are only 4-byte
// aligned, so the invocation loads its row as WORDS = D / 4 + 1 32-bit words (5 at D = 16; each
// resolved through the chunk table on its own, so a row may straddle a chunk), converts the int8
// exactly to float and computes dot = (m / 127) * sum_i q[h][i] * q_k[i] per head. Any D (a
// multiple of 8 up to 128) runs here: score.comp has no int8 rows.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 0) const uint WGS = 256;      // workgroup size
layout(constant_id = 1) const uint D = 16;         // head dimension (a multiple of 8)
layout(constant_id = 2) const bool F16 = true;     // K stored as IEEE halves (else f32)
layout(constant_id = 4) const uint G = 4;          // the group: query heads per KV head
layout(constant_id = 7) const bool ALIGNED = true; // K rows 16-byte aligned and never split by a chunk
layout(constant_id = 11) const bool I8 = false;    // K is an int8 cache (rows of D + 4 bytes; F16 false)

layout(local_size_x_id = 0) in;

const uint ROWB = I8 ? D + 4u : F16 ? D * 2u : D * 4u; // bytes per row
const uint VEC = I8 ? 1u : ROWB / 16u;                  // 16-byte vectors per row (not I8)
const uint WORDS = I8 ? D / 4u + 1u : 1u;               // I8: 32-bit words per row, m last
const uint D4 = D / 4u;                                 // vec4s per query

// score.comp's push constants (the planner fills one struct for both kernels)
layout(push_constant) uniform push_score {
    TRef q;      // f32 [Hq][D]
    TRef s;      // f32 [Hkv][m]
    KVRef k;     // [Hkv][Ncap][D]
    uint64_t skip; // the predicate's address (0: none)
    uint begin;  // first position
    uint m;      // positions
    uint group;  // G (also the specialization constant)
    uint tiles;  // ceil(m / WGS)
    float scale;
} pc;

shared vec4 sh_q[G * D4]; // the group's queries, head-major

uvec4 g_row[VEC];  // the invocation's K row
uint g_w[WORDS];   // ... I8: as words (4 int8 each, little-endian, then m's bits)

// Loads the K row of position j (from begin) of KV head g; an absent row, or j past the range, is zeros.
void load_row(uint g, uint j)
{
    uint64_t off;
    const bool present = j < pc.m && kv_row(pc.k, g, pc.begin + j, ROWB, off);
    if (I8) {
        [[unroll]] for (uint w = 0u; w < WORDS; w++) g_w[w] = present ? U32Ref(taddr(pc.k.t, off + uint64_t(w) * 4ul)).v : 0u;
        return;
    }
    [[unroll]] for (uint v = 0u; v < VEC; v++) g_row[v] = present ? ld_16(pc.k.t, off + uint64_t(v) * 16ul, ALIGNED) : uvec4(0u);
}

// Elements 4c .. 4c + 3 of the row.
vec4 row_vec4(uint c)
{
    if (I8) { // the int8 q_k themselves (exact in f32); the scale m / 127 comes after the sum
        const int w = int(g_w[c]);
        return vec4(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8), bitfieldExtract(w, 16, 8), bitfieldExtract(w, 24, 8));
    }
    if (F16) {
        const uvec4 x = g_row[c / 2u];
        const uint w0 = (c & 1u) == 0u ? x.x : x.z, w1 = (c & 1u) == 0u ? x.y : x.w;
        return vec4(unpackHalf2x16(w0), unpackHalf2x16(w1));
    }
    return uintBitsToFloat(g_row[c]);
}

void main()
{
    if (skipped(pc.skip)) return;
    const uint g = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    uint tile = gl_WorkGroupID.x;
    // the first row's loads go out before the queries are staged, so that both latencies overlap
    load_row(g, tile * WGS + t);
    for (uint i = t; i < G * D4; i += WGS) {
        const uint64_t e = (uint64_t(g) * G + i / D4) * D + (i % D4) * 4u;
        sh_q[i] = vec4(ld_f32(pc.q, e), ld_f32(pc.q, e + 1ul), ld_f32(pc.q, e + 2ul), ld_f32(pc.q, e + 3ul));
    }
    barrier();
    for (; tile < pc.tiles; tile += gl_NumWorkGroups.x) {
        const uint j = tile * WGS + t;
        vec4 k4[D4];
        [[unroll]] for (uint c = 0u; c < D4; c++) k4[c] = row_vec4(c);
        const float kscale = I8 ? uintBitsToFloat(g_w[WORDS - 1u]) / 127.0 : 1.0; // an absent row: 0
        float best = uintBitsToFloat(0xff800000u); // -inf
        [[unroll]] for (uint h = 0u; h < G; h++) {
            float acc = 0.0;
            [[unroll]] for (uint c = 0u; c < D4; c++) acc += dot(sh_q[h * D4 + c], k4[c]);
            best = max(best, pc.scale * (I8 ? kscale * acc : acc));
        }
        if (j < pc.m) st_f32(pc.s, uint64_t(g) * pc.m + j, best);
        if (tile + gl_NumWorkGroups.x < pc.tiles) load_row(g, (tile + gl_NumWorkGroups.x) * WGS + t);
    }
}
