#version 460
// vote SOFTMAX_SUM, step 3: v[j] = sum over h (in head order) of exp(s[h][j] - m_h) / l_h.
// Grid (tiles of 256 positions, grid-stride).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_vote_sum {
    TRef s;          // f32 [Hq][m]
    TRef v;          // f32 [1][m]
    uint64_t stats;  // vec2 (m, l) per head
    uint64_t skip;   // the predicate's address (0: none)
    uint m;
    uint hq;
    uint tiles;
} pc;

void main()
{
    if (skipped(pc.skip)) return;
    for (uint tile = gl_WorkGroupID.x; tile < pc.tiles; tile += gl_NumWorkGroups.x) {
        const uint j = tile * 256u + gl_LocalInvocationIndex;
        if (j >= pc.m) continue;
        float acc = 0.0;
        for (uint h = 0u; h < pc.hq; h++) {
            vec2 st = V2Ref(pc.stats + uint64_t(h) * 8ul).v;
            acc += exp(ld_f32(pc.s, uint64_t(h) * pc.m + j) - st.x) / st.y;
        }
        st_f32(pc.v, j, acc);
    }
}
