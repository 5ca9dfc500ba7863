#version 460
// matmul for many tokens (prefill): out[t][n] = dot(x[t], w[n]) (+ bias[n]), w in any weight type
// (weights.glsl), activations and sums in f32.
//
// Grid (tiles of BN rows of w, tiles of BM = 64 tokens); 256 invocations. BN is 64, or 32 or 16 when
// the grid would not fill the GPU otherwise (few tokens, few rows). K goes in steps of BK = 32 (one
// q8_0 / q4_0 block, or K-quant sub-block, per row): each step stages x [64][32] and w [BN][32]
// (dequantized, value = q * d (- min) as in the CPU reference) in shared memory, k-major, and every invocation accumulates 4 tokens x
// TN = BN / 16 consecutive rows over the step. The next step's tiles are loaded from memory into
// registers while the current one is computed, so each weight is read once per 64 tokens.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "weights.glsl"

layout(constant_id = 5) const bool XALIGN = true; // x rows 16-byte aligned (K % 4 == 0)
layout(constant_id = 3) const uint BN = 64;       // rows per tile: 64, 32 or 16

layout(local_size_x = 256) in;

const uint BM = 64u, BK = 32u, PAD = 4u, TN = BN / 16u;

layout(push_constant) uniform push_matmul {
    TRef x;          // f32 [T][K]
    TRef w;          // [N][K]
    TRef bias;       // f32 [N] (has_bias)
    TRef out_;       // f32 [T][N]
    uint K;
    uint N;
    uint T;
    uint has_bias;
} pc;

shared vec4 sh_x[BK][(BM + PAD) / 4u]; // sh_x[k][m / 4][m % 4] = x[m0 + m][k0 + k]
shared vec4 sh_w[BK][(BN + PAD) / 4u]; // sh_w[k][n / 4][n % 4] = w[n0 + n][k0 + k]

void main()
{
    const uint tid = gl_LocalInvocationIndex;
    const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    // loading: invocation tid stages 8 values (one unit) of token row lm and (tid < 4 * BN) of weight row ln
    const uint lm = tid / 4u, ln = tid / 4u, lu = tid % 4u;
    const bool wload = ln < BN;
    const uint xrow = min(m0 + lm, pc.T - 1u);
    const bool xok = m0 + lm < pc.T;
    const uint64_t rb = (pc.w.meta & META_OFFSET_MASK) + uint64_t(min(n0 + ln, pc.N - 1u)) * w_row_bytes(pc.K);
    // computing: tokens tm * 4 .. + 3 and rows tn * TN .. + TN - 1
    const uint tn = tid % 16u, tm = tid / 16u;

    const uint steps = (pc.K + BK - 1u) / BK;
    vec4 xl, xh;
    WUnit wu;
    float acc[4u * TN];
    [[unroll]] for (uint i = 0u; i < 4u * TN; i++) acc[i] = 0.0;

    // registers <- step s
    #define LOAD_STEP(s)                                                                                         \
    {                                                                                                            \
        const uint k = (s) * BK + lu * 8u;                                                                       \
        xl = vec4(0.0);                                                                                          \
        xh = vec4(0.0);                                                                                          \
        if (xok) {                                                                                               \
            const uint64_t e = uint64_t(xrow) * pc.K + k;                                                        \
            if (XALIGN && k + 8u <= pc.K) {                                                                      \
                xl = V4Ref(taddr(pc.x, e * 4ul)).v;                                                              \
                xh = V4Ref(taddr(pc.x, e * 4ul + 16ul)).v;                                                       \
            } else {                                                                                             \
                [[unroll]] for (uint i = 0u; i < 4u; i++) {                                                      \
                    if (k + i < pc.K) xl[i] = ld_f32(pc.x, e + i);                                               \
                    if (k + 4u + i < pc.K) xh[i] = ld_f32(pc.x, e + 4u + i);                                     \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
        wu.a = uvec4(0u);                                                                                        \
        wu.b = uvec4(0u);                                                                                        \
        if (wload && k < pc.K) wu = w_load(pc.w, rb, k / 8u, pc.K);                                              \
    }

    LOAD_STEP(0u)
    for (uint s = 0u; s < steps; s++) {
        barrier(); // the previous step's reads of shared memory are done
        {
            vec4 lo, hi;
            const float d = w_decode(wu, lo, hi);
            if (WQUANT) {
                lo *= d;
                hi *= d;
            }
            if (WMIN) {
                lo -= w_min(wu);
                hi -= w_min(wu);
            }
            // values past K (float types) were loaded as zeros; a quantized row has whole blocks
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                sh_x[lu * 8u + i][lm / 4u][lm % 4u] = xl[i];
                sh_x[lu * 8u + 4u + i][lm / 4u][lm % 4u] = xh[i];
            }
            if (wload)
                [[unroll]] for (uint i = 0u; i < 4u; i++) {
                    sh_w[lu * 8u + i][ln / 4u][ln % 4u] = lo[i];
                    sh_w[lu * 8u + 4u + i][ln / 4u][ln % 4u] = hi[i];
                }
        }
        barrier();
        if (s + 1u < steps) LOAD_STEP(s + 1u)
        [[unroll]] for (uint k = 0u; k < BK; k++) {
            const vec4 a = sh_x[k][tm];
            vec4 b;
            if (TN == 4u) {
                b = sh_w[k][tn];
            } else {
                [[unroll]] for (uint j = 0u; j < TN; j++) b[j] = sh_w[k][(tn * TN + j) / 4u][(tn * TN + j) % 4u];
            }
            [[unroll]] for (uint i = 0u; i < 4u; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++) acc[i * TN + j] += a[i] * b[j];
        }
    }

    [[unroll]] for (uint j = 0u; j < TN; j++) {
        const uint n = n0 + tn * TN + j;
        if (n >= pc.N) continue;
        float b = 0.0;
        if (pc.has_bias != 0u) b = ld_f32(pc.bias, n);
        [[unroll]] for (uint i = 0u; i < 4u; i++) {
            const uint t = m0 + tm * 4u + i;
            if (t < pc.T) st_f32(pc.out_, uint64_t(t) * pc.N + n, acc[i * TN + j] + b);
        }
    }
}
