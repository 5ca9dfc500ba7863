#version 460
// vote SOFTMAX_SUM, step 2: per head, merges the blocks: m = max m_i, l = sum l_i exp(m_i - m).
// Grid (head h).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_vote_merge {
    uint64_t part;   // vec2 (m, l) per (head, block)
    uint64_t stats;  // vec2 (m, l) per head
    uint64_t skip;   // the predicate's address (0: none)
    uint nblocks;
} pc;

shared float sh_red[256];

void main()
{
    if (skipped(pc.skip)) return;
    const uint tid = gl_LocalInvocationIndex, h = gl_WorkGroupID.x;
    const uint64_t base = uint64_t(h) * pc.nblocks;
    float mx = -3.0e38;
    for (uint b = tid; b < pc.nblocks; b += 256u) mx = max(mx, V2Ref(pc.part + (base + b) * 8ul).v.x);
    mx = subgroupMax(mx);
    if (subgroupElect()) sh_red[gl_SubgroupID] = mx;
    barrier();
    mx = sh_red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) mx = max(mx, sh_red[i]);
    barrier();
    float l = 0.0;
    for (uint b = tid; b < pc.nblocks; b += 256u) {
        vec2 p = V2Ref(pc.part + (base + b) * 8ul).v;
        l += p.y * exp(p.x - mx);
    }
    l = subgroupAdd(l);
    if (subgroupElect()) sh_red[gl_SubgroupID] = l;
    barrier();
    if (tid == 0u) {
        float t = 0.0;
        for (uint i = 0u; i < gl_NumSubgroups; i++) t += sh_red[i];
        V2Ref(pc.stats + uint64_t(h) * 8ul).v = vec2(mx, t);
    }
}
