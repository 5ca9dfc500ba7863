#version 460
// select: the range of the keys of 4096 evenly spread candidates of list l, and the bins over it:
// bin(key) = (key - lowest) >> shift, shift the smallest with the range within 2048 bins. One
// workgroup per list (grid (list)).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

shared uint sh_lo[256], sh_hi[256];

void main()
{
    if (skipped(pc.skip)) return;
    const uint l = gl_WorkGroupID.x, rk = rank_();
    const uint n = min(pc.cand, 4096u);
    uint lo = 0xffffffffu, hi = 0u;
    for (uint i = rk; i < n; i += 256u) {
        const uint key = key_at(l, uint(uint64_t(i) * pc.cand / n));
        lo = min(lo, key);
        hi = max(hi, key);
    }
    lo = subgroupMin(lo);
    hi = subgroupMax(hi);
    if (subgroupElect()) {
        sh_lo[gl_SubgroupID] = lo;
        sh_hi[gl_SubgroupID] = hi;
    }
    barrier();
    if (rk == 0u) {
        for (uint i = 0u; i < gl_NumSubgroups; i++) {
            lo = min(lo, sh_lo[i]);
            hi = max(hi, sh_hi[i]);
        }
        uint shift = 0u;
        while (((hi - lo) >> shift) >= BINS) shift++;
        state_set(l, ST_LOWEST, lo);
        state_set(l, ST_SHIFT, shift);
    }
}
