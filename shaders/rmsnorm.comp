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

layout(push_constant) uniform push_norm {
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

// A row is walked in batches: each invocation issues BATCH loads (values tid, tid + 256, ...) before
// it uses any. A loop of one load and one add per trip waited out every load in turn: in a decode
// step's profile on the H200 a 4096-wide rmsnorm took 16-19 us, for 32 KB read.
const uint BATCH = 8u;

// x[i] of row `base`, 0 past the row's end.
float x_at(uint64_t base, uint i) { return i < pc.E ? ld_f32(pc.x, base + i) : 0.0; }

// The row's sum of (x - shift)^2, or of x when square is false.
float row_sum(uint64_t base, float shift, bool square)
{
    const uint tid = gl_LocalInvocationIndex;
    float acc = 0.0;
    for (uint i0 = tid; i0 < pc.E; i0 += 256u * BATCH) {
        float v[BATCH];
        [[unroll]] for (uint j = 0u; j < BATCH; j++) v[j] = x_at(base, i0 + j * 256u);
        [[unroll]] for (uint j = 0u; j < BATCH; j++) {
            const bool in_row = i0 + j * 256u < pc.E;
            const float d = v[j] - shift;
            acc += !in_row ? 0.0 : square ? d * d : v[j];
        }
    }
    return wg_sum(acc);
}

void main()
{
    const uint tid = gl_LocalInvocationIndex, t = pc.t0 + gl_WorkGroupID.x;
    const uint64_t base = uint64_t(t) * pc.E;
    const float mean = MODE == 0u ? 0.0 : row_sum(base, 0.0, false) / float(pc.E);
    const float inv = 1.0 / sqrt(row_sum(base, mean, true) / float(pc.E) + pc.eps);
    for (uint i0 = tid; i0 < pc.E; i0 += 256u * BATCH) {
        float v[BATCH], w[BATCH];
        [[unroll]] for (uint j = 0u; j < BATCH; j++) {
            const uint i = i0 + j * 256u;
            v[j] = x_at(base, i);
            w[j] = i < pc.E ? ld_f32(pc.w, i) : 0.0;
        }
        [[unroll]] for (uint j = 0u; j < BATCH; j++) {
            const uint i = i0 + j * 256u;
            if (i >= pc.E) break;
            const float y = MODE == 0u ? v[j] * inv * w[j] : (v[j] - mean) * inv * w[j];
            st_f32(pc.out_, base + i, MODE == 1u && pc.has_bias != 0u ? y + ld_f32(pc.b, i) : y);
        }
    }
}
