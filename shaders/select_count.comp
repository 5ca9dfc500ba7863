#version 460
// select: per block, how many keys are greater than the threshold T and how many equal it.
// Grid (block, list).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

void main()
{
    if (skipped(pc.skip)) return;
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    uint t, rem;
    derive(l, 4u, t, rem);
    const uint j0 = blk * 256u * pc.items;
    uint gt = 0u, eq = 0u;
    for (uint i = 0u; i < pc.items; i++) {
        const uint j = j0 + i * 256u + rk;
        if (j < pc.cand) {
            uint key = key_at(l, j);
            gt += key > t ? 1u : 0u;
            eq += key == t ? 1u : 0u;
        }
    }
    gt = wg_sum(gt);
    eq = wg_sum(eq);
    if (rk == 0u) {
        uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + blk) * 8ul;
        U32Ref(a).v = gt;
        U32Ref(a + 4ul).v = eq;
    }
}
