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

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
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

// a * b = p + e exactly (Dekker's product: plain multiplies and adds, none contracted)
void two_prod(float a, float b, out float p, out float e)
{
    precise float t = 4097.0 * a;
    precise float ah = t - (t - a);
    precise float al = a - ah;
    precise float u = 4097.0 * b;
    precise float bh = u - (u - b);
    precise float bl = b - bh;
    precise float pp = a * b;
    precise float ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
    p = pp;
    e = ee;
}

void sincos_accurate(float theta, out float s, out float c)
{
    precise float k = roundEven(theta * 0.636619772367581343);
    float p, e;
    two_prod(k, 1.57079637050628662109375, p, e); // pi/2 = this + -4.371139e-8 + -1.715125e-15
    precise float r = (theta - p) - e;
    r = r - k * -4.37113882867379300296e-8;
    r = r - k * -1.71512451000588190e-15;
    precise float z = r * r;
    precise float sr = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    precise float cr = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    const uint q = uint(int(k)) & 3u;
    s = q == 0u ? sr : q == 1u ? cr : q == 2u ? -sr : -cr;
    c = q == 0u ? cr : q == 1u ? -sr : q == 2u ? -cr : sr;
}

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
