#version 460
// gather_attend / dense_attend, merge part: combines the splits of each head with the log-sum-exp
// rule (SPEC §3.4): m = max m_s; l = sum l_s exp(m_s - m); o = sum o_s exp(m_s - m) / l, where o_s
// is a split's unnormalised sum. No splits (an empty index list), or no row present in any (every
// entry absent from a paged cache), gives zeros.
// Grid (query row h, block of 32 dimensions); 256 invocations = 32 dimensions x 8 groups of splits
// (a split of the workgroup by invocation index, not by subgroup: the max goes through subgroups of
// any size, a shared slot per subgroup).
// A query row is a head of the decode ops, or head h of token t (row t * Hq + h) of causal_attend.
// D is a multiple of 8 up to 128: invocations past D read dimension D - 1 and write nothing.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint D = 128;

layout(push_constant) uniform push_attend_merge {
    TRef out_;       // f32 [rows][D] (causal: [T][Hq][D])
    uint64_t ml;     // vec2 (m, l) per (head, split)
    uint64_t po;     // float o[D] per (head, split)
    uint nsplit;
    uint row0;       // the first row of this dispatch
} pc;

shared float sh_red[256];
shared float sh_acc[8][32];
shared float sh_l[8];

void main()
{
    const uint tid = gl_LocalInvocationIndex, h = pc.row0 + gl_WorkGroupID.x;
    const uint d_out = gl_WorkGroupID.y * 32u + (tid & 31u), grp = tid >> 5;
    const uint d = min(d_out, D - 1u);
    const uint64_t base = uint64_t(h) * pc.nsplit;

    float mx = -3.0e38;
    for (uint s = tid; s < pc.nsplit; s += 256u) mx = max(mx, V2Ref(pc.ml + (base + s) * 8ul).v.x);
    mx = subgroupMax(mx);
    if (subgroupElect()) sh_red[gl_SubgroupID] = mx;
    barrier();
    mx = sh_red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) mx = max(mx, sh_red[i]);

    float acc = 0.0, l = 0.0;
    uint s = grp;
    for (; s + 24u < pc.nsplit; s += 32u) { // four splits per trip: independent loads in flight
        vec2 a = V2Ref(pc.ml + (base + s) * 8ul).v, b = V2Ref(pc.ml + (base + s + 8u) * 8ul).v;
        vec2 c = V2Ref(pc.ml + (base + s + 16u) * 8ul).v, e = V2Ref(pc.ml + (base + s + 24u) * 8ul).v;
        float oa = F32Ref(pc.po + ((base + s) * D + d) * 4ul).v, ob = F32Ref(pc.po + ((base + s + 8u) * D + d) * 4ul).v;
        float oc = F32Ref(pc.po + ((base + s + 16u) * D + d) * 4ul).v, oe = F32Ref(pc.po + ((base + s + 24u) * D + d) * 4ul).v;
        float wa = exp(a.x - mx), wb = exp(b.x - mx), wc = exp(c.x - mx), we = exp(e.x - mx);
        acc += wa * oa + wb * ob + wc * oc + we * oe;
        l += wa * a.y + wb * b.y + wc * c.y + we * e.y;
    }
    for (; s < pc.nsplit; s += 8u) {
        vec2 a = V2Ref(pc.ml + (base + s) * 8ul).v;
        float w = exp(a.x - mx);
        acc += w * F32Ref(pc.po + ((base + s) * D + d) * 4ul).v;
        l += w * a.y;
    }
    sh_acc[grp][tid & 31u] = acc;
    if ((tid & 31u) == 0u) sh_l[grp] = l;
    barrier();
    if (grp == 0u && d_out < D) {
        float a = 0.0, lt = 0.0;
        for (uint i = 0u; i < 8u; i++) { a += sh_acc[i][tid]; lt += sh_l[i]; }
        st_f32(pc.out_, uint64_t(h) * D + d, pc.nsplit == 0u || lt == 0.0 ? 0.0 : a / lt);
    }
}
