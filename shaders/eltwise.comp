#version 460
// add (OP 0): out = a + b;  swiglu (OP 1): out = silu(a) * b = a / (1 + exp(-a)) * b;  silu (OP 2):
// out = a / (1 + exp(-a)) (b unused). Elementwise over n values; invocation i of the flattened grid
// takes element i.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 7) const uint OP = 0;

layout(local_size_x = 256) in;

layout(push_constant) uniform push_eltwise {
    TRef a;
    TRef b;          // unused by silu
    TRef out_;
    uint64_t n;
} pc;

void main()
{
    const uint64_t i = (uint64_t(gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 256ul + gl_LocalInvocationIndex;
    if (i >= pc.n) return;
    const float x = ld_f32(pc.a, i);
    if (OP == 2u) {
        st_f32(pc.out_, i, x / (1.0 + exp(-x)));
        return;
    }
    const float y = ld_f32(pc.b, i);
    st_f32(pc.out_, i, OP == 0u ? x + y : x / (1.0 + exp(-x)) * y);
}
