#version 460
// select, radix pass pc.pass: histogram of byte (3 - pass) of the keys whose higher bytes match the
// prefix found by the earlier passes. Grid (block, list). Pass 0 also clears the histograms of
// passes 1..3 (nobody touches them during pass 0).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

shared uint sh_hist[256];

void main()
{
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    if (skipped(pc.skip) || warm_answered(l)) return;
    sh_hist[rk] = 0u;
    if (pc.pass == 0u && blk == 0u)
        for (uint p = 1u; p < 4u; p++) U32Ref(hist_addr(l, p, rk)).v = 0u;
    load_batch(l, blk, 0u);
    uint prefix, rem;
    advance(l, pc.pass, prefix, rem);
    barrier(); // the sh_hist clear before any atomic
    const uint mask = pc.pass == 0u ? 0u : 0xffffffffu << (32u - 8u * pc.pass);
    const uint shift = 24u - 8u * pc.pass;
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) {
            if (i0 + i >= pc.items) break; // uniform: blocks of fewer items skip the subgroup votes
            const uint b = g_in[i] && (g_key[i] & mask) == prefix ? (g_key[i] >> shift) & 255u : 256u;
            if (subgroupAllEqual(b)) { // common in the top passes: one atomic for the subgroup
                const uint n = subgroupBallotBitCount(subgroupBallot(true));
                if (b < 256u && subgroupElect()) atomicAdd(sh_hist[b], n);
            } else if (b < 256u) {
                atomicAdd(sh_hist[b], 1u);
            }
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    barrier();
    const uint c = sh_hist[rk];
    if (c != 0u) atomicAdd(U32Ref(hist_addr(l, pc.pass, rk)).v, c);
}
