#version 460
// select: the threshold T (the chosen-th largest key) and rem from the last pass's histogram (block 0
// stores them for select_compact), then per block how many keys are greater than T and how many
// equal it. Grid (block, list).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

void main()
{
    if (skipped(pc.skip)) return;
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    load_batch(l, blk, 0u);
    uint t, rem;
    advance(l, 4u, t, rem);
    uint gt = 0u, eq = 0u;
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) {
            gt += g_in[i] && g_key[i] > t ? 1u : 0u;
            eq += g_in[i] && g_key[i] == t ? 1u : 0u;
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    gt = wg_sum(gt);
    eq = wg_sum(eq);
    if (rk == 0u) {
        uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + blk) * 8ul;
        U32Ref(a).v = gt;
        U32Ref(a + 4ul).v = eq;
    }
}
