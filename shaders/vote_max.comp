#version 460
// vote KVHEAD_MAX: u[g][j] = max over the heads h of KV head g of s[h][j]. Grid (tiles of 256
// positions, grid-stride; KV head g).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_vote_max {
    TRef s;          // f32 [Hq][m]
    TRef u;          // f32 [Hkv][m]
    uint64_t skip;   // the predicate's address (0: none)
    uint m;
    uint group;      // G
    uint tiles;
} pc;

void main()
{
    if (skipped(pc.skip)) return;
    const uint g = gl_WorkGroupID.y;
    for (uint tile = gl_WorkGroupID.x; tile < pc.tiles; tile += gl_NumWorkGroups.x) {
        const uint j = tile * 256u + gl_LocalInvocationIndex;
        if (j >= pc.m) continue;
        float mx = ld_f32(pc.s, uint64_t(g * pc.group) * pc.m + j);
        for (uint h = 1u; h < pc.group; h++) mx = max(mx, ld_f32(pc.s, uint64_t(g * pc.group + h) * pc.m + j));
        st_f32(pc.u, uint64_t(g) * pc.m + j, mx);
    }
}
