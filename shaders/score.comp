#version 460
// score: s[h][j] = scale * dot(q[h], K[g(h)][begin + j]) (docs/kernels.md).
// Grid (workgroups over position tiles, KV head g, pass over the group's heads). Each K row is read
// once per pass and dotted with the pass's GH queries (GH = G, one pass, for G <= 8). K may be
// paged (common.glsl kv_row); an absent row scores 0, as the CPU reference's zero row does. A
// predicated node (skip non-zero at run time) does nothing.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "trig.glsl"
#include "rows.glsl"

layout(push_constant) uniform PC {
    TRef q;      // f32 [Hq][D]
    TRef s;      // f32 [Hq][m]
    KVRef k;     // [Hkv][Ncap][D]
    uint64_t skip; // the predicate's address (0: none)
    uint begin;  // first position
    uint m;      // positions
    uint group;  // G = Hq / Hkv
    uint tiles;  // ceil(m / (NCL * ROWS))
    float scale;
} pc;

void main()
{
    if (skipped(pc.skip)) return;
    const uint lane = cl_lane(), cl = cl_index();
    const uint g = gl_WorkGroupID.y;
    const uint h0 = g * pc.group + gl_WorkGroupID.z * GH;
    const uint nh = min(GH, pc.group - gl_WorkGroupID.z * GH);

    load_q(pc.q, g, gl_WorkGroupID.z * GH, nh, pc.group, 0u, lane);

    for (uint tile = gl_WorkGroupID.x; tile < pc.tiles; tile += gl_NumWorkGroups.x) {
        const uint j0 = (tile * NCL + cl) * ROWS;
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            uint j = min(j0 + r, pc.m - 1u);
            uint64_t off;
            const bool present = kv_row(pc.k, g, pc.begin + j, ROWB, off);
            load_row(pc.k.t, pc.k.t, false, off, off, present, lane, r);
        }
        partial_dots();
        xreduce(lane);
        [[unroll]] for (uint c = 0u; c < VC; c++) {
            uint v = VP >= LANES ? lane * VC + c : lane / (LANES / VP);
            bool mine = VP >= LANES || (lane % (LANES / VP)) == 0u;
            uint hh = v / ROWS, r = v % ROWS;
            if (mine && v < NV && hh < nh && j0 + r < pc.m)
                st_f32(pc.s, uint64_t(h0 + hh) * pc.m + (j0 + r), pc.scale * g_vals[c]);
        }
    }
}
