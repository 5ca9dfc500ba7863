#version 460
// vote SOFTMAX_SUM, step 1: per head and block of scores, the max m and l = sum exp(s - m).
// Grid (block, head h); a block is 256 * items consecutive scores of one head.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_vote_stats {
    TRef s;          // f32 [Hq][m]
    uint64_t part;   // vec2 (m, l) per (head, block)
    uint64_t skip;   // the predicate's address (0: none)
    uint m;
    uint items;
    uint nblocks;
} pc;

shared float sh_red[256];

float wg_max(float x)
{
    x = subgroupMax(x);
    if (subgroupElect()) sh_red[gl_SubgroupID] = x;
    barrier();
    float r = sh_red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r = max(r, sh_red[i]);
    barrier();
    return r;
}

float wg_sum(float x)
{
    x = subgroupAdd(x);
    if (subgroupElect()) sh_red[gl_SubgroupID] = x;
    barrier();
    float r = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) r += sh_red[i];
    barrier();
    return r;
}

void main()
{
    if (skipped(pc.skip)) return;
    const uint tid = gl_LocalInvocationIndex, h = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    const uint64_t row = uint64_t(h) * pc.m;
    const uint j0 = blk * 256u * pc.items;
    float mx = -3.0e38;
    for (uint i = 0u; i < pc.items; i++) {
        uint j = j0 + i * 256u + tid;
        if (j < pc.m) mx = max(mx, ld_f32(pc.s, row + j));
    }
    mx = wg_max(mx);
    float l = 0.0;
    for (uint i = 0u; i < pc.items; i++) {
        uint j = j0 + i * 256u + tid;
        if (j < pc.m) l += exp(ld_f32(pc.s, row + j) - mx);
    }
    l = wg_sum(l);
    if (tid == 0u) V2Ref(pc.part + (uint64_t(h) * pc.nblocks + blk) * 8ul).v = vec2(mx, l);
}
