#version 460
// matmul for a few tokens (decode): out[t][n] = dot(x[t], w[n]) (+ bias[n]) for T <= NT tokens, w in
// any weight type (weights.glsl), activations and sums in f32.
//
// Grid: one workgroup per R rows of w. Its invocations stride over the rows' units of 8 values:
// invocation i takes units i, i + WGS, ... (U of them per trip, all loads issued before the
// arithmetic), so that consecutive invocations read consecutive 16-byte vectors of a float row, or
// consecutive quarters of q8_0 / q4_0 blocks; the x values of a unit are read once for all R rows.
// Each invocation keeps R x NT sums; block types sum q * x per unit and scale by d once (q4_k and
// q5_k then subtract their min times the sum of the unit's x). The sums
// are reduced over the subgroup, then over the workgroup's subgroups in a fixed order.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "weights.glsl"

layout(constant_id = 0) const uint WGS = 128;   // workgroup size
layout(constant_id = 2) const uint NT = 1;      // tokens (T <= NT; the host sets NT = T)
layout(constant_id = 3) const uint R = 1;       // rows per workgroup (R * NT <= 16)
layout(constant_id = 5) const bool XALIGN = true; // x rows 16-byte aligned (K % 4 == 0)
layout(constant_id = 6) const uint U = 2;       // units per invocation per trip

layout(local_size_x_id = 0) in;

layout(push_constant) uniform push_matvec {
    TRef x;          // f32 [T][K]
    TRef w;          // [N][K]
    TRef bias;       // f32 [N] (has_bias)
    TRef out_;       // f32 [T][N]
    uint K;
    uint N;
    uint T;
    uint has_bias;
    uint group0;     // the first workgroup of this dispatch
} pc;

shared float sh_sum[R * NT * WGS]; // [sum][subgroup]: room for subgroups of any size

vec4 x4(uint t, uint k)
{
    const uint64_t e = uint64_t(t) * pc.K + k;
    if (XALIGN) return V4Ref(taddr(pc.x, e * 4ul)).v;
    return vec4(ld_f32(pc.x, e), ld_f32(pc.x, e + 1ul), ld_f32(pc.x, e + 2ul), ld_f32(pc.x, e + 3ul));
}

void main()
{
    const uint tid = gl_LocalInvocationIndex;
    const uint n0 = (pc.group0 + gl_WorkGroupID.x) * R;
    const uint nunits = pc.K / 8u;
    const uint64_t rbytes = w_row_bytes(pc.K), wbase = pc.w.meta & META_OFFSET_MASK;
    uint64_t rb[R];
    [[unroll]] for (uint r = 0u; r < R; r++) rb[r] = wbase + uint64_t(min(n0 + r, pc.N - 1u)) * rbytes;

    float acc[R * NT];
    [[unroll]] for (uint i = 0u; i < R * NT; i++) acc[i] = 0.0;

    for (uint u0 = tid; u0 < nunits; u0 += WGS * U) {
        WUnit wu[U * R];
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint u = u0 + j * WGS;
            if (u < nunits)
                [[unroll]] for (uint r = 0u; r < R; r++) wu[j * R + r] = w_load(pc.w, rb[r], u, pc.K);
        }
        [[unroll]] for (uint j = 0u; j < U; j++) {
            const uint u = u0 + j * WGS;
            if (u < nunits) {
                vec4 xl[NT], xh[NT];
                [[unroll]] for (uint t = 0u; t < NT; t++) {
                    const uint tt = min(t, pc.T - 1u);
                    xl[t] = x4(tt, u * 8u);
                    xh[t] = x4(tt, u * 8u + 4u);
                }
                [[unroll]] for (uint r = 0u; r < R; r++) {
                    vec4 lo, hi;
                    const float d = w_decode(wu[j * R + r], lo, hi);
                    const float mn = w_min(wu[j * R + r]);
                    [[unroll]] for (uint t = 0u; t < NT; t++) {
                        float s = dot(lo, xl[t]) + dot(hi, xh[t]);
                        if (WQUANT) s *= d;
                        if (WMIN) s -= mn * (dot(xl[t], vec4(1.0)) + dot(xh[t], vec4(1.0)));
                        acc[r * NT + t] += s;
                    }
                }
            }
        }
    }
    // the last K % 8 values (float types only)
    if (!WQUANT && tid < pc.K - nunits * 8u) {
        const uint k = nunits * 8u + tid;
        [[unroll]] for (uint r = 0u; r < R; r++) {
            const float wv = w_elem(pc.w, rb[r], k);
            [[unroll]] for (uint t = 0u; t < NT; t++)
                acc[r * NT + t] += wv * ld_f32(pc.x, uint64_t(min(t, pc.T - 1u)) * pc.K + k);
        }
    }

    [[unroll]] for (uint i = 0u; i < R * NT; i++) {
        const float s = subgroupAdd(acc[i]);
        if (subgroupElect()) sh_sum[i * WGS + gl_SubgroupID] = s;
    }
    barrier();
    if (tid < R * NT) {
        const uint r = tid / NT, t = tid % NT, n = n0 + r;
        float s = 0.0;
        for (uint g = 0u; g < gl_NumSubgroups; g++) s += sh_sum[tid * WGS + g];
        if (n < pc.N && t < pc.T) {
            if (pc.has_bias != 0u) s += ld_f32(pc.bias, n);
            st_f32(pc.out_, uint64_t(t) * pc.N + n, s);
        }
    }
}
