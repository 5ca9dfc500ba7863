#version 460
// score: s[h][j] = scale * dot(q[h], K[g(h)][begin + j]) (docs/kernels.md).
// score_max (GMAX): u[g][j] = max over the G heads h of KV head g of that score, [Hkv][m].
// Grid (workgroups over position tiles, KV head g, pass over the group's heads). Each K row is read
// once per pass and dotted with the pass's GH queries (GH = G, one pass, for G <= 8). score_max
// has no grid passes: its workgroups run every pass over the rows they hold (the query values
// reloaded per pass when there are several), so a row's max over all G heads stays in registers
// and is written once. K may be paged (common.glsl kv_row); an absent row scores 0, as the CPU
// reference's zero row does. A predicated node (skip non-zero at run time) does nothing.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "trig.glsl"
#include "rows.glsl"

layout(constant_id = 10) const bool GMAX = false; // score_max: the max over the group's heads

layout(push_constant) uniform push_score {
    TRef q;      // f32 [Hq][D]
    TRef s;      // f32 [Hq][m] (score_max: [Hkv][m])
    KVRef k;     // [Hkv][Ncap][D]
    uint64_t skip; // the predicate's address (0: none)
    uint begin;  // first position
    uint m;      // positions
    uint group;  // G = Hq / Hkv
    uint tiles;  // ceil(m / (NCL * ROWS))
    float scale;
} pc;

float g_best[ROWS]; // score_max: the running max of each of the step's rows (module scope: rows.glsl)

// The position (from begin) of row r of cluster cl in a tile. score: a cluster's ROWS rows are
// consecutive, so that after xreduce neighbouring lanes hold neighbouring positions of one head
// (contiguous stores). score_max: row slot r of the tile's clusters is consecutive rows, so that one
// slot's loads across a subgroup are contiguous and its maxima are stored contiguously.
uint tile_row(uint tile, uint cl, uint r) { return GMAX ? (tile * ROWS + r) * NCL + cl : (tile * NCL + cl) * ROWS + r; }

// score_max: folds the pass's scores (after xreduce) into g_best. Every lane of the cluster fetches
// each total from the lane that holds it (with one lane per row, LANES = 1, it holds them all).
void fold_max(uint nh, uint lane)
{
    const uint base = gl_SubgroupInvocationID - lane; // the cluster's first invocation
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        [[unroll]] for (uint hh = 0u; hh < GH; hh++) {
            const uint v = hh * ROWS + r;
            const float t = LANES == 1u ? g_vals[v] : subgroupShuffle(g_vals[owner_slot(v)], base + owner_lane(v));
            if (hh < nh) g_best[r] = max(g_best[r], pc.scale * t);
        }
    }
}

void main()
{
    if (skipped(pc.skip)) return;
    const uint lane = cl_lane(), cl = cl_index();
    const uint g = gl_WorkGroupID.y;
    // score: this workgroup's one pass, grid z; score_max: every pass, in turn
    const uint z0 = GMAX ? 0u : gl_WorkGroupID.z;
    const uint passes = GMAX ? (pc.group + GH - 1u) / GH : 1u;
    if (passes == 1u) load_q(pc.q, g, z0 * GH, min(GH, pc.group - z0 * GH), pc.group, 0u, lane);

    for (uint tile = gl_WorkGroupID.x; tile < pc.tiles; tile += gl_NumWorkGroups.x) {
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            uint j = min(tile_row(tile, cl, r), pc.m - 1u);
            uint64_t off;
            const bool present = kv_row(pc.k, g, pc.begin + j, ROWB, off);
            load_row(pc.k.t, pc.k.t, false, off, off, present, lane, r);
        }
        [[unroll]] for (uint r = 0u; r < ROWS; r++) g_best[r] = uintBitsToFloat(0xff800000u); // -inf
        for (uint p = 0u; p < passes; p++) {
            const uint z = z0 + p, h0 = g * pc.group + z * GH, nh = min(GH, pc.group - z * GH);
            if (passes > 1u) load_q(pc.q, g, z * GH, nh, pc.group, 0u, lane);
            partial_dots();
            xreduce(lane);
            if (GMAX) {
                fold_max(nh, lane);
                continue;
            }
            [[unroll]] for (uint c = 0u; c < VC; c++) {
                uint v = VP >= LANES ? lane * VC + c : lane / (LANES / VP);
                bool mine = VP >= LANES || (lane % (LANES / VP)) == 0u;
                uint hh = v / ROWS, r = v % ROWS;
                const uint j = tile_row(tile, cl, r);
                if (mine && v < NV && hh < nh && j < pc.m) st_f32(pc.s, uint64_t(h0 + hh) * pc.m + j, pc.scale * g_vals[c]);
            }
        }
        if (GMAX) {
            // lane r % LANES stores row r's max (every lane of the cluster holds it)
            [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                const uint j = tile_row(tile, cl, r);
                if (r % LANES == lane && j < pc.m) st_f32(pc.s, uint64_t(g) * pc.m + j, g_best[r]);
            }
        }
    }
}
