#version 460
// select, digit 2: histogram of the low 10 bits of bucket b0's keys that match the 22-bit prefix;
// the last workgroup of each list picks the digit: T, and how many keys equal to T to take. Grid
// (up to 32 workgroups, list) over the buffer.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define SELECT_HISTOGRAM
#include "select.glsl"

void main()
{
    if (skipped(pc.skip)) return;
    const uint l = gl_WorkGroupID.y;
    hist_clear();
    const uint n = bin0_size(l), p22 = state_get(l, ST_P22);
    barrier(); // the clear before any atomic
    for (uint base = gl_WorkGroupID.x * 256u; base < n; base += gl_NumWorkGroups.x * 256u) { // uniform
        const uint i = base + rank_();
        uint j, key, b = NO_BIN;
        if (i < n && bin0_at(l, i, j, key) && (key >> 10) == (p22 >> 10)) b = key & 1023u;
        hist_add(b);
    }
    if (!flush_is_last(l, 2u)) return;
    uint bin, rem, count;
    pick_bin(l, 2u, state_get(l, ST_REM1), bin, rem, count);
    if (rank_() == 0u) {
        state_set(l, ST_T, p22 | bin);
        state_set(l, ST_REM, rem);
    }
}
