#version 460
// select: writes list l = sink [0, S), then the chosen candidates in position order, then the
// window [max(S, N - W), N). A candidate is kept if its key > T, or key == T and it is among the
// first rem keys equal to T by position (ties to the lower position). Output ascending, no sort.
// Grid (block, list); mode 2 (nothing chosen) runs one block per list.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

void main()
{
    if (skipped(pc.skip)) return;
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    const uint64_t out0 = uint64_t(l) * pc.count;
    if (blk == 0u) {
        for (uint i = rk; i < pc.sink; i += 256u) st_u32(pc.out_, out0 + i, i);
        for (uint i = rk; i < pc.win_count; i += 256u) st_u32(pc.out_, out0 + pc.sink + pc.chosen + i, pc.win_begin + i);
    }
    const uint j0 = blk * 256u * pc.items;
    if (pc.mode == 1u) {
        for (uint i = 0u; i < pc.items; i++) {
            const uint j = j0 + i * 256u + rk;
            if (j < pc.cand) st_u32(pc.out_, out0 + pc.sink + j, pc.first + j);
        }
        return;
    }
    if (pc.mode != 0u) return;

    uint t, rem;
    derive(l, 4u, t, rem);
    uint gt_before = 0u, eq_before = 0u;
    for (uint b = rk; b < blk; b += 256u) {
        uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + b) * 8ul;
        gt_before += U32Ref(a).v;
        eq_before += U32Ref(a + 4ul).v;
    }
    gt_before = wg_sum(gt_before);
    eq_before = wg_sum(eq_before);
    for (uint i = 0u; i < pc.items; i++) {
        const uint j = j0 + i * 256u + rk;
        uint key = j < pc.cand ? key_at(l, j) : 0u;
        const bool gt = j < pc.cand && key > t, eq = j < pc.cand && key == t;
        uint total;
        const uint ex = wg_exscan((gt ? 1u : 0u) | (eq ? 0x10000u : 0u), total);
        const uint eq_ord = eq_before + (ex >> 16);
        if (gt || (eq && eq_ord < rem))
            st_u32(pc.out_, out0 + pc.sink + gt_before + (ex & 0xffffu) + min(eq_ord, rem), pc.first + j);
        gt_before += total & 0xffffu;
        eq_before += total >> 16;
    }
}
