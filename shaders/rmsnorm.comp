#version 460
// rmsnorm: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight. One workgroup per row (x: rows in y
// beyond the device's x limit are in further dispatches).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    TRef x;          // f32 [T][E]
    TRef w;          // f32 [E]
    TRef out_;       // f32 [T][E]
    uint E;
    float eps;
    uint t0;         // the first row of this dispatch
} pc;

shared float sh_red[256];

void main()
{
    const uint tid = gl_LocalInvocationIndex, t = pc.t0 + gl_WorkGroupID.x;
    const uint64_t base = uint64_t(t) * pc.E;
    float ss = 0.0;
    for (uint i = tid; i < pc.E; i += 256u) {
        const float v = ld_f32(pc.x, base + i);
        ss += v * v;
    }
    ss = subgroupAdd(ss);
    if (subgroupElect()) sh_red[gl_SubgroupID] = ss;
    barrier();
    float total = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; g++) total += sh_red[g];
    const float inv = 1.0 / sqrt(total / float(pc.E) + pc.eps);
    for (uint i = tid; i < pc.E; i += 256u) st_f32(pc.out_, base + i, ld_f32(pc.x, base + i) * inv * ld_f32(pc.w, i));
}
