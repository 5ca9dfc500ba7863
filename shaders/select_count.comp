#version 460
// select: bucket b0's keys > T and == T, added to the counts of their blocks (select_filter stored
// each block's keys above b0). Grid (up to 32 workgroups, list) over the buffer.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

void main()
{
    if (skipped(pc.skip)) return;
    const uint l = gl_WorkGroupID.y, block_len = 256u * pc.items;
    const uint n = bin0_size(l), t = state_get(l, ST_T);
    for (uint i = gl_WorkGroupID.x * 256u + rank_(); i < n; i += gl_NumWorkGroups.x * 256u) {
        uint j, key;
        if (!bin0_at(l, i, j, key)) continue;
        const uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + j / block_len) * 8ul;
        if (key > t) atomicAdd(U32Ref(a).v, 1u);
        else if (key == t) atomicAdd(U32Ref(a + 4ul).v, 1u);
    }
}
