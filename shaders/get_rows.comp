#version 460
// get_rows: out[t] = row ids[t] of the table (any weight type, weights.glsl), as f32; an id outside
// [0, V) gives zeros. Values are exactly the CPU reference's: float types are copied bit for bit,
// block types give q * d (q4_k, q5_k: q * d - min).
// Grid (units of 8 values / 64, tokens); invocation i of workgroup x writes unit x * 64 + i.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "weights.glsl"

layout(local_size_x = 64) in;

layout(push_constant) uniform push_get_rows {
    TRef table;      // [V][E]
    TRef ids;        // i32 [T]
    TRef out_;       // f32 [T][E]
    uint V;
    uint E;
    uint t0;         // the first token of this dispatch
} pc;

void main()
{
    const uint t = pc.t0 + gl_WorkGroupID.y, u = gl_WorkGroupID.x * 64u + gl_LocalInvocationIndex;
    if (u * 8u >= pc.E) return;
    const int id = int(ld_u32(pc.ids, t));
    const uint64_t o = uint64_t(t) * pc.E + u * 8u;
    const uint n = min(8u, pc.E - u * 8u);
    if (id < 0 || uint(id) >= pc.V) {
        for (uint i = 0u; i < n; i++) st_u32(pc.out_, o + i, 0u);
        return;
    }
    const uint64_t rb = (pc.table.meta & META_OFFSET_MASK) + uint64_t(id) * w_row_bytes(pc.E);
    vec4 lo, hi;
    const WUnit wu = w_load(pc.table, rb, u, pc.E);
    const float d = w_decode(wu, lo, hi), mn = w_min(wu);
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        if (i >= n) break;
        float v = i < 4u ? lo[i] : hi[i - 4u];
        if (WQUANT) v *= d;
        if (WMIN) v -= mn; // q * d is exact, so one rounding, as the CPU's
        st_u32(pc.out_, o + i, floatBitsToUint(v));
    }
}
