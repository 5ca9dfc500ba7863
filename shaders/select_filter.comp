#version 460
// select: per block the keys whose bin is above b0 (all of them taken, stored as the block's count
// of keys > T), the positions of the keys in bin b0 appended to the list's buffer (when they fit),
// and the histogram of their top 11 bits; the last workgroup of each list picks that digit. Grid
// (block, list).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define SELECT_HISTOGRAM
#include "select.glsl"

void main()
{
    if (skipped(pc.skip)) return;
    const uint l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    load_batch(l, blk, 0u);
    hist_clear();
    const uint b0 = state_get(l, ST_B0), lowest = state_get(l, ST_LOWEST), shift = state_get(l, ST_SHIFT);
    const bool buffered = state_get(l, ST_BUFFERED) != 0u;
    const uint64_t buf = pc.buf + uint64_t(l) * pc.cap * 4ul;
    barrier(); // the clear before any atomic
    uint above = 0u;
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) {
            if (i0 + i >= pc.items) break; // uniform
            const uint bin = bin_of(lowest, shift, g_key[i]);
            const bool mine = g_in[i] && bin == b0;
            above += g_in[i] && bin > b0 ? 1u : 0u;
            hist_add(mine ? g_key[i] >> 21 : NO_BIN);
            if (buffered) {
                const uvec4 bal = subgroupBallot(mine);
                const uint n = subgroupBallotBitCount(bal);
                uint base = 0u;
                if (n != 0u && subgroupElect()) base = atomicAdd(U32Ref(nbuf_addr(l)).v, n);
                base = subgroupBroadcastFirst(base);
                uint j;
                elem(blk, i0 + i, j);
                if (mine) U32Ref(buf + uint64_t(base + subgroupBallotExclusiveBitCount(bal)) * 4ul).v = j;
            }
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    above = wg_sum(above);
    if (rank_() == 0u) {
        const uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + blk) * 8ul;
        U32Ref(a).v = above;
        U32Ref(a + 4ul).v = 0u;
    }
    if (!flush_is_last(l, 1u)) return;
    uint bin, rem, count;
    pick_bin(l, 1u, state_get(l, ST_REM0), bin, rem, count);
    if (rank_() == 0u) {
        state_set(l, ST_PREFIX, bin << 21);
        state_set(l, ST_REM1, rem);
    }
}
