#version 460
// select: every candidate's bin counted (select.glsl); the tail picks the bin b0 holding the
// chosen-th largest key. Grid (block, list).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define SELECT_TAIL
#include "select.glsl"

// Adds one to bucket b (NO_BIN: nothing) of the shared histogram. The whole subgroup calls it.
void hist_add(uint b)
{
    if (subgroupAllEqual(b)) { // one atomic for the subgroup
        const uint n = subgroupBallotBitCount(subgroupBallot(true));
        if (b < NO_BIN && subgroupElect()) atomicAdd(sh_hist[b], n);
    } else if (b < NO_BIN) {
        atomicAdd(sh_hist[b], 1u);
    }
}

void main()
{
    if (skipped(pc.skip)) return;
    const uint l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x, rk = rank_();
    load_batch(l, blk, 0u);
    hist_clear();
    // the bins: the range of the keys of up to 1024 evenly spread candidates (the same in every
    // workgroup)
    const uint ns = min(pc.cand, 1024u);
    uint hi = 0u, lo_c = 0u;
    for (uint i = rk; i < ns; i += 256u) {
        const uint key = key_at(l, uint(uint64_t(i) * pc.cand / ns));
        hi = max(hi, key);
        lo_c = max(lo_c, ~key);
    }
    hi = wg_max(hi);
    const uint lowest = ~wg_max(lo_c); // wg_max's barriers order the clear before the atomics
    uint shift = 0u;
    while (((hi - lowest) >> shift) >= BINS) shift++;
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) {
            if (i0 + i >= pc.items) break; // uniform
            hist_add(g_in[i] ? bin_of(lowest, shift, g_key[i]) : NO_BIN);
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    barrier();
    const uint64_t g = hist_addr(l);
    for (uint i = rk; i < BINS; i += 256u) {
        const uint c = sh_hist[i];
        if (c != 0u) atomicAdd(U32Ref(g + i * 4ul).v, c);
    }
    if (blk == 0u && rk == 0u) {
        state_set(l, ST_LOWEST, lowest);
        state_set(l, ST_SHIFT, shift);
    }
    if (!is_last(l, 0u)) return;
    // the tail: the histogram read and cleared with atomics (which see every workgroup's additions)
    uint c[8];
    [[unroll]] for (uint i = 0u; i < 8u; i++) c[i] = atomicExchange(U32Ref(g + (BINS - 1u - rk * 8u - i) * 4ul).v, 0u);
    uint bin, rem, count;
    pick_bin(c, pc.chosen, bin, rem, count);
    if (rk == 0u) {
        state_set(l, ST_B0, bin);
        state_set(l, ST_REM0, rem);
        state_set(l, ST_N0, count);
    }
}
