#version 460
// select, pass 1: histogram of bits 20..10 of bin b0's keys with T's top 11 bits; pass 2: bits 9..0
// of those with its top 22. The last workgroup of each list picks the digit; after pass 2 that is
// T, and how many keys equal to T to take. Grid (workgroups over the buffer, list).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define SELECT_HISTOGRAM
#include "select.glsl"

void main()
{
    if (skipped(pc.skip)) return;
    const uint l = gl_WorkGroupID.y;
    hist_clear();
    const uint n = bin0_size(l), prefix = state_get(l, ST_PREFIX);
    const uint shift = pc.pass == 1u ? 21u : 10u, low = pc.pass == 1u ? 10u : 0u, mask = pc.pass == 1u ? 2047u : 1023u;
    barrier(); // the clear before any atomic
    for (uint base = gl_WorkGroupID.x * 256u; base < n; base += gl_NumWorkGroups.x * 256u) { // uniform
        const uint i = base + rank_();
        uint j, key, b = NO_BIN;
        if (i < n && bin0_at(l, i, j, key) && (key >> shift) == (prefix >> shift)) b = (key >> low) & mask;
        hist_add(b);
    }
    if (!flush_is_last(l, 1u + pc.pass)) return;
    uint bin, rem, count;
    pick_bin(l, 1u + pc.pass, state_get(l, pc.pass == 1u ? ST_REM1 : ST_REM), bin, rem, count);
    if (rank_() == 0u) {
        if (pc.pass == 1u) state_set(l, ST_PREFIX, prefix | (bin << 10));
        else state_set(l, ST_T, prefix | bin);
        state_set(l, ST_REM, rem);
    }
}
