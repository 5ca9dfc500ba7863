#version 460
// sel_cache_check (SPEC §4, include/sift.h): the Selection Cache decision of one layer, in one
// workgroup. cos(q, q_ref) over the Hq * D values: the three sums in f32, per invocation in index
// order, then a fixed tree in shared memory (deterministic); cos = dot / (|q| |q_ref|), 0 when a
// norm is 0, clamped to [-1, 1] (theta = -1 reuses always, as the CPU's double sums do). Then
// exactly the CPU reference's rule: reuse iff full and VALID and theta < 1 and cos >= theta; REUSE
// = reuse; STEPS += full; HITS += reuse; without reuse q_ref = q and VALID = full.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_sel_cache {
    TRef q;          // f32 [Hq * D]
    TRef st;         // f32 [Hq * D + 4]: q_ref, then REUSE, HITS, STEPS, VALID
    uint qn;         // Hq * D
    float theta;
    uint full;
} pc;

shared float sh_dot[256], sh_nq[256], sh_nr[256];
shared uint sh_reuse;

void main()
{
    const uint tid = gl_LocalInvocationIndex;
    precise float dot_ = 0.0, nq = 0.0, nr = 0.0;
    for (uint i = tid; i < pc.qn; i += 256u) {
        const float a = ld_f32(pc.q, i), b = ld_f32(pc.st, i);
        dot_ += a * b;
        nq += a * a;
        nr += b * b;
    }
    sh_dot[tid] = dot_;
    sh_nq[tid] = nq;
    sh_nr[tid] = nr;
    barrier();
    [[unroll]] for (uint s = 128u; s > 0u; s >>= 1) {
        if (tid < s) {
            sh_dot[tid] += sh_dot[tid + s];
            sh_nq[tid] += sh_nq[tid + s];
            sh_nr[tid] += sh_nr[tid + s];
        }
        barrier();
    }
    if (tid == 0u) {
        const float d = sh_dot[0], a = sh_nq[0], b = sh_nr[0];
        float c = a > 0.0 && b > 0.0 ? d / (sqrt(a) * sqrt(b)) : 0.0;
        if (c > 1.0) c = 1.0; // comparisons, not clamp(): a NaN stays NaN and never reuses
        if (c < -1.0) c = -1.0;
        const uint64_t x = uint64_t(pc.qn);
        const bool valid = ld_f32(pc.st, x + 3ul) != 0.0;
        const bool reuse = pc.full != 0u && valid && pc.theta < 1.0 && c >= pc.theta;
        st_f32(pc.st, x, reuse ? 1.0 : 0.0);
        if (pc.full != 0u) st_f32(pc.st, x + 2ul, ld_f32(pc.st, x + 2ul) + 1.0);
        if (reuse) st_f32(pc.st, x + 1ul, ld_f32(pc.st, x + 1ul) + 1.0);
        else st_f32(pc.st, x + 3ul, pc.full != 0u ? 1.0 : 0.0);
        sh_reuse = reuse ? 1u : 0u;
    }
    barrier();
    if (sh_reuse == 0u)
        for (uint i = tid; i < pc.qn; i += 256u) st_u32(pc.st, i, ld_u32(pc.q, i));
}
