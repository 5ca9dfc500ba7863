#version 460
// neighbor_fetch (include/sift.h, TokenButler): out i32 [L][count + chosen] from select's lists
// in i32 [L][count] (sink | chosen | window): out = sink | chosen | neighbours | window, where the
// neighbour of chosen entry i (value c) is c + 1, or -1 when c + 1 is chosen too (the lists are
// ascending, so that is chosen entry i + 1) or lies past the candidates. One invocation per output
// entry; grid (tiles of 256 entries, grid-stride; list l0 + y). The CPU reference: op_neighbor_fetch.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_neighbor_fetch {
    TRef in_;        // i32 [L][count]
    TRef out_;       // i32 [L][count + chosen]
    uint sink;       // entries of the sink
    uint chosen;     // chosen candidates
    uint count;      // entries per input list: sink + chosen + window
    uint l0;         // the first list of this dispatch
    int64_t cand_end; // one past the last candidate position (first + |C|)
} pc;

void main()
{
    const uint l = pc.l0 + gl_WorkGroupID.y, len = pc.count + pc.chosen;
    const uint64_t src = uint64_t(l) * pc.count, dst = uint64_t(l) * len;
    const uint kept = pc.sink + pc.chosen; // entries copied as they are before the neighbours
    for (uint e = gl_WorkGroupID.x * 256u + gl_LocalInvocationIndex; e < len; e += gl_NumWorkGroups.x * 256u) {
        uint v;
        if (e < kept) {
            v = ld_u32(pc.in_, src + e);
        } else if (e < kept + pc.chosen) {
            const uint i = e - kept;
            // in 64 bits, as the CPU reference: the position after INT32_MAX is past every candidate
            const int64_t next = int64_t(int(ld_u32(pc.in_, src + pc.sink + i))) + 1l;
            const bool taken = i + 1u < pc.chosen ? int64_t(int(ld_u32(pc.in_, src + pc.sink + i + 1u))) == next
                                                  : next >= pc.cand_end;
            v = taken ? 0xffffffffu : uint(next);
        } else {
            v = ld_u32(pc.in_, src + (e - pc.chosen)); // the window
        }
        st_u32(pc.out_, dst + e, v);
    }
}
