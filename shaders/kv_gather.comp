#version 460
// kv_gather (include/sift.h): out[g][col0 + i] = row indices[l][i] of KV head g of the cache, its
// bits as they are (l = 0 for a shared list, else g); a zero row where the row is absent
// (common.glsl kv_row: an entry outside the cache, -1 included, or on a page outside the pools).
// out's other columns are not touched. Predicated (sift_graph_skip_if): every workgroup returns at
// once when the flag is set, leaving out as it was. The CPU reference: cpu_kv_gather.
//
// A copy, so each invocation moves one unit of one row: a 16-byte vector where every row is
// 16-byte aligned (ALIGNED), else a 32-bit word. Consecutive invocations take consecutive units
// of a row, then the next entry's, so a subgroup's loads and stores are contiguous within a row.
// Each unit resolves its row through kv_row (one page table read, cached; the rows of a host pool
// are read across the host link in place). Grid (tiles of 256 units, grid-stride; KV head g0 + y).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 7) const bool ALIGNED = false; // rows, cache and out 16-byte aligned: vector units

layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) writeonly buffer U4Out { uvec4 v; };

layout(push_constant) uniform push_kv_gather {
    TRef idx;      // i32 [L][count]
    TRef out_;     // [Hkv][ocount][D], the cache's type as stored
    KVRef kv;      // [Hkv][Ncap][D], paged or not
    uint64_t skip; // the predicate's address (0: none)
    uint count;    // entries per list
    uint units;    // units per row (16-byte vectors when ALIGNED, else 32-bit words)
    uint lists;    // 1 (shared) or Hkv
    uint g0;       // the first KV head of this dispatch
    uint ocount;   // out's rows per KV head (col0 + count <= ocount)
    uint col0;     // the out row of entry 0
} pc;

void main()
{
    if (skipped(pc.skip)) return;
    const uint g = pc.g0 + gl_WorkGroupID.y;
    const uint unit_bytes = ALIGNED ? 16u : 4u, row_bytes = pc.units * unit_bytes;
    const uint64_t list = uint64_t(pc.lists == 1u ? 0u : g) * pc.count;
    const uint total = pc.count * pc.units; // below 2^32 - 2^20 (the planner)
    for (uint e = gl_WorkGroupID.x * 256u + gl_LocalInvocationIndex; e < total; e += gl_NumWorkGroups.x * 256u) {
        const uint i = e / pc.units, u = e % pc.units;
        uint64_t off;
        const bool present = kv_row(pc.kv, g, ld_u32(pc.idx, list + i), row_bytes, off);
        off += uint64_t(u) * unit_bytes;
        const uint64_t dst = (uint64_t(g) * pc.ocount + pc.col0 + i) * row_bytes + uint64_t(u) * unit_bytes;
        if (ALIGNED) {
            U4Out(taddr(pc.out_, dst)).v = present ? ld_16(pc.kv.t, off, true) : uvec4(0u);
        } else {
            U32Ref(taddr(pc.out_, dst)).v = present ? U32Ref(taddr(pc.kv.t, off)).v : 0u;
        }
    }
}
