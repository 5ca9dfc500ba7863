#version 460
// rope: rotary embedding of x [T][H][D] (include/sift.h). Pair i of the first n_rot dimensions of the
// rows of token t (adjacent: dimensions 2i, 2i + 1; neox: i, i + n_rot / 2) is rotated by
// theta = (pos0 + t) * freq[i] / factor[i]; the other dimensions are copied. Invocation e of the
// flattened grid writes element e.
//
// The angle is the CPU reference's to the last bit: freq[i] = powf(base, -2i / n_rot) comes from the
// host (a table in scratch memory), the product is one f32 multiply and the division is correctly
// rounded. sin and cos are computed here, not by the GPU's sin/cos (whose error grows with the
// argument): theta - k * pi/2 is formed with an error-free product (Dekker's: fma is not fused on
// every driver, lavapipe's included), then minimax polynomials on [-pi/4, pi/4] give about 1 ulp
// (checked against glibc up to theta = 1e6).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "trig.glsl"

layout(local_size_x = 256) in;

layout(push_constant) uniform push_rope {
    TRef x;          // f32 [T][H][D]
    TRef out_;       // f32 [T][H][D]
    TRef factors;    // f32 [n_rot / 2] (has_factors)
    uint64_t freq;   // float [n_rot / 2]
    uint64_t n;      // T * H * D
    uint HD;         // H * D
    uint D;
    uint n_rot;
    uint pos0;
    uint neox;
    uint has_factors;
} pc;

void main()
{
    const uint64_t e = (uint64_t(gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256ul + gl_LocalInvocationIndex;
    if (e >= pc.n) return;
    const uint dd = uint(e % pc.D), t = uint(e / pc.HD);
    const uint64_t row = e - dd;
    if (dd >= pc.n_rot) {
        st_u32(pc.out_, e, ld_u32(pc.x, e));
        return;
    }
    const uint half_ = pc.n_rot / 2u;
    uint i, a, b;
    if (pc.neox != 0u) {
        i = dd < half_ ? dd : dd - half_;
        a = i;
        b = i + half_;
    } else {
        i = dd / 2u;
        a = 2u * i;
        b = a + 1u;
    }
    precise float theta = float(pc.pos0 + t) * F32Ref(pc.freq + uint64_t(i) * 4ul).v;
    if (pc.has_factors != 0u) {
        const float f = ld_f32(pc.factors, i);
        precise float qt = theta / f; // GPUs may divide to a few ulp: one correction step
        float p, e;
        two_prod(qt, f, p, e);
        precise float rem = (theta - p) - e;
        theta = qt + rem / f;
    }
    float s, c;
    sincos_accurate(theta, s, c);
    const float xa = ld_f32(pc.x, row + a), xb = ld_f32(pc.x, row + b);
    precise float o = dd == a ? xa * c - xb * s : xa * s + xb * c;
    st_f32(pc.out_, e, o);
}
