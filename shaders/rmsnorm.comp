#version 460
// rmsnorm (MODE 0): out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight;
// layernorm (MODE 1): out[t] = (x[t] - mean) / sqrt(var + eps) * weight (+ bias), the biased
// variance of x[t] - mean taken in a second pass over the row (rows may share a large offset, which
// E[x^2] - mean^2 would cancel away). One workgroup per row (x: rows in y beyond the device's x
// limit are in further dispatches).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 7) const uint MODE = 0;

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    TRef x;          // f32 [T][E]
    TRef w;          // f32 [E]
    TRef b;          // f32 [E] (layernorm with a bias)
    TRef out_;       // f32 [T][E]
    uint E;
    float eps;
    uint t0;         // the first row of this dispatch
    uint has_bias;
} pc;

shared float sh_red[256];

// The sum of v over the workgroup, returned to every invocation. The first barrier keeps a
// previous call's readers of sh_red ahead of this call's writers.
float wg_sum(float v)
{
    v = subgroupAdd(v);
    barrier();
    if (subgroupElect()) sh_red[gl_SubgroupID] = v;
    barrier();
    float total = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; g++) total += sh_red[g];
    return total;
}

void main()
{
    const uint tid = gl_LocalInvocationIndex, t = pc.t0 + gl_WorkGroupID.x;
    const uint64_t base = uint64_t(t) * pc.E;
    if (MODE == 0u) {
        float ss = 0.0;
        for (uint i = tid; i < pc.E; i += 256u) {
            const float v = ld_f32(pc.x, base + i);
            ss += v * v;
        }
        const float inv = 1.0 / sqrt(wg_sum(ss) / float(pc.E) + pc.eps);
        for (uint i = tid; i < pc.E; i += 256u) st_f32(pc.out_, base + i, ld_f32(pc.x, base + i) * inv * ld_f32(pc.w, i));
        return;
    }
    float sum = 0.0;
    for (uint i = tid; i < pc.E; i += 256u) sum += ld_f32(pc.x, base + i);
    const float mean = wg_sum(sum) / float(pc.E);
    float ss = 0.0;
    for (uint i = tid; i < pc.E; i += 256u) {
        const float v = ld_f32(pc.x, base + i) - mean;
        ss += v * v;
    }
    const float inv = 1.0 / sqrt(wg_sum(ss) / float(pc.E) + pc.eps);
    for (uint i = tid; i < pc.E; i += 256u) {
        const float y = (ld_f32(pc.x, base + i) - mean) * inv * ld_f32(pc.w, i);
        st_f32(pc.out_, base + i, pc.has_bias != 0u ? y + ld_f32(pc.b, i) : y);
    }
}
