#version 460
// select: writes list l = sink [0, S), then the chosen candidates in position order, then the
// window [max(S, N - W), N). A candidate is kept if its key > T, or key == T and it is among the
// first rem keys equal to T by position (ties to the lower position). Output ascending, no sort.
// Grid (block, list); mode 2 (nothing chosen) runs one block per list. Block 0 of each list clears
// the pass-0 histogram for the next run (nothing reads it any more in this one).
#extension GL_GOOGLE_include_directive : require
#define SELECT_SCAN4
#include "common.glsl"
#include "select.glsl"

void main()
{
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    if (skipped(pc.skip) || warm_answered(l)) return;
    const uint64_t out0 = uint64_t(l) * count_();
    if (blk == 0u) {
        for (uint i = rk; i < pc.sink; i += 256u) st_u32(pc.out_, out0 + i, i);
        for (uint i = rk; i < pc.win_count; i += 256u) st_u32(pc.out_, out0 + pc.sink + pc.chosen + i, pc.win_begin + i);
    }
    if (pc.mode == 1u) {
        for (uint i = 0u; i < pc.items; i++) {
            uint j;
            if (elem(blk, i, j)) st_u32(pc.out_, out0 + pc.sink + j, pc.first + j);
        }
        return;
    }
    if (pc.mode != 0u) return;

    load_batch(l, blk, 0u);
    if (blk == 0u) U32Ref(hist_addr(l, 0u, rk)).v = 0u;
    const uint64_t sa = state_addr(l, 3u); // after pass 3: (T, rem), stored by select_count
    const uint t = U32Ref(sa).v, rem = U32Ref(sa + 4ul).v;
    uint gt_before = 0u, eq_before = 0u;
    for (uint b = rk; b < blk; b += 256u) {
        uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + b) * 8ul;
        gt_before += U32Ref(a).v;
        eq_before += U32Ref(a + 4ul).v;
    }
    gt_before = wg_sum(gt_before);
    eq_before = wg_sum(eq_before);
    for (uint i0 = 0u;;) {
        // per item: bits 0..15 keys > T, 16..31 keys == T (at most 256 each per item and block);
        // items in position order: item i's elements all come before item i + 1's
        [[unroll]] for (uint h = 0u; h < BATCH; h += 4u) {
            if (i0 + h >= pc.items) break; // uniform: blocks of fewer items skip the empty half
            uvec4 x;
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                const uint i = h + c;
                x[c] = (g_in[i] && g_key[i] > t ? 1u : 0u) | (g_in[i] && g_key[i] == t ? 0x10000u : 0u);
            }
            uvec4 total;
            const uvec4 ex = wg_exscan4(x, total);
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                uint j;
                elem(blk, i0 + h + c, j);
                const uint eq_ord = eq_before + (ex[c] >> 16);
                if ((x[c] & 1u) != 0u || ((x[c] >> 16) != 0u && eq_ord < rem))
                    st_u32(pc.out_, out0 + pc.sink + gt_before + (ex[c] & 0xffffu) + min(eq_ord, rem), pc.first + j);
                gt_before += total[c] & 0xffffu;
                eq_before += total[c] >> 16;
            }
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
}
