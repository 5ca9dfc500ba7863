#version 460
// The workgroup counts of a predicated node's dispatches (sift_graph_skip_if), written before
// them: each dispatch's counts as planned, or 0 x 0 x 0 when the node's flag is set. The node's
// dispatches are vkCmdDispatchIndirect on these counts (vk_graph.c), so a skipped node launches
// no workgroup at all, where a dispatch that reads the flag and returns still launches its grid.
// Entry i lies 32 bytes after entry i - 1: the planned counts (uvec3), then at +16 the counts
// the dispatch reads. One workgroup.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Counts { uint c[3]; };

layout(push_constant) uniform PC {
    uint64_t flag;    // the predicate's address
    uint64_t entries; // entry 0's address (the graph's scratch)
    uint n;           // entries
} pc;

void main()
{
    const bool skip = skipped(pc.flag);
    for (uint i = gl_LocalInvocationIndex; i < pc.n; i += 64u) {
        Counts planned = Counts(pc.entries + 32ul * i), args = Counts(pc.entries + 32ul * i + 16ul);
        [[unroll]] for (uint d = 0u; d < 3u; d++) args.c[d] = skip ? 0u : planned.c[d];
    }
}
