#version 460
// mean_rows (include/sift.h): out[i] = (sum over t of x[t][i]) / T, x f32 [T][E]. One invocation per
// column sums the rows in order, as the CPU reference does (the same f32 value), and divides with a
// correction step to the correctly rounded quotient (GPU division may be off by an ulp or two).
// Grid: flat over columns (x up to the device's limit, then y).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "trig.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_mean_rows {
    TRef x;          // f32 [T][E]
    TRef out_;       // f32 [1][E]
    uint rows;       // T
    uint e;          // E
} pc;

void main()
{
    const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256u + gl_LocalInvocationIndex;
    if (i >= pc.e) return;
    precise float sum = 0.0;
    for (uint t = 0u; t < pc.rows; t++) sum += ld_f32(pc.x, uint64_t(t) * pc.e + i);
    const float r = float(pc.rows);
    precise float q = sum / r;
    if (abs(q) < 1.0e30) { // finite and far from overflow in Dekker's split
        float p, err;
        two_prod(q, r, p, err);
        precise float rem = (sum - p) - err;
        q = q + rem / r;
    }
    st_f32(pc.out_, i, q);
}
