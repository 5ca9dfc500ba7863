#version 460
// select: histogram of every candidate's bin (select_range's); the last workgroup of each list
// picks the bin b0 holding the chosen-th largest key. Grid (block, list).
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
    const uint lowest = state_get(l, ST_LOWEST), shift = state_get(l, ST_SHIFT);
    barrier(); // the clear before any atomic
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) {
            if (i0 + i >= pc.items) break; // uniform
            hist_add(g_in[i] ? bin_of(lowest, shift, g_key[i]) : NO_BIN);
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    if (!flush_is_last(l, 0u)) return;
    uint bin, rem, count;
    pick_bin(l, 0u, pc.chosen, bin, rem, count);
    if (rank_() == 0u) {
        state_set(l, ST_B0, bin);
        state_set(l, ST_REM0, rem);
        state_set(l, ST_BUFFERED, count <= pc.cap ? 1u : 0u);
    }
}
