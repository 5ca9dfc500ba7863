#version 460
// fill_range (include/sift.h): indices[l][col0 + i] = start + i for i in [0, n - col0). Grid (tiles
// of 256 columns, grid-stride; list l0 + y).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_fill_range {
    TRef out_;       // i32 [L][n]
    uint n;          // columns per list
    uint col0;
    uint width;      // n - col0
    uint start;      // the value of column col0
    uint l0;         // the first list of this dispatch
} pc;

void main()
{
    const uint64_t row = uint64_t(pc.l0 + gl_WorkGroupID.y) * pc.n + pc.col0;
    for (uint i = gl_WorkGroupID.x * 256u + gl_LocalInvocationIndex; i < pc.width; i += gl_NumWorkGroups.x * 256u)
        st_u32(pc.out_, row + i, pc.start + i);
}
