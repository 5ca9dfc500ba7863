#version 460
// select, radix pass pc.pass: histogram of byte (3 - pass) of the keys whose higher bytes match the
// prefix found by the earlier passes. Grid (block, list).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

shared uint sh_hist[256];

void main()
{
    if (skipped(pc.skip)) return;
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    sh_hist[rk] = 0u;
    uint prefix, rem;
    derive(l, pc.pass, prefix, rem);
    const uint mask = pc.pass == 0u ? 0u : 0xffffffffu << (32u - 8u * pc.pass);
    const uint shift = 24u - 8u * pc.pass;
    const uint j0 = blk * 256u * pc.items;
    for (uint i = 0u; i < pc.items; i++) {
        const uint j = j0 + i * 256u + rk;
        uint b = 256u;
        if (j < pc.cand) {
            uint key = key_at(l, j);
            if ((key & mask) == prefix) b = (key >> shift) & 255u;
        }
        if (subgroupAllEqual(b)) { // common in the top passes: one atomic for the subgroup
            uint n = subgroupBallotBitCount(subgroupBallot(true));
            if (b < 256u && subgroupElect()) atomicAdd(sh_hist[b], n);
        } else if (b < 256u) {
            atomicAdd(sh_hist[b], 1u);
        }
    }
    barrier();
    const uint c = sh_hist[rk];
    if (c != 0u) atomicAdd(U32Ref(pc.hist + ((uint64_t(l) * 4u + pc.pass) * 256u + rk) * 4ul).v, c);
}
