#version 460
// gather_attend / dense_attend / causal_attend / causal_attend_sparse, split-K part (docs/kernels.md,
// SPEC §3.4).
// Grid (split s, KV head g, pass over the KV head's queries). The queries of KV head g are its group's
// heads of token 0, then of token 1, ... (T tokens for causal_attend, one otherwise), GH per pass.
// Split s attends the pass's queries over entries [s * cs, (s + 1) * cs) of the KV head's index list
// (dense and causal: of positions 0, 1, ...), the query of token t only over entries
// < min(n, lim0 + t) (causal: lim0 = pos0 + 1; gather and dense: lim0 = n), keeping a running max m,
// sum l and unnormalised o[D] per query in f32, and writes (m, l) and o per (query, split) for
// attend_merge.comp. Dense and causal are this kernel with the index list replaced by the identity
// (DENSE). A split past a query's range leaves (m, l) = (NEG, 0) and o = 0, which the merge ignores.
// Entry t is at position idx[t] for t < nlist, then start + (t - nlist) (causal_attend_sparse: the
// list, then [pos0, pos0 + T); gather: nlist = n). K and V may be paged (common.glsl kv_row, their
// KVRefs in a parameter block): an absent row (or a position outside the cache) is never read and
// takes no part in the softmax. ROPE: the key of entry t is rotated to position t (SPEC §6,
// rows.glsl partial_dots_rope).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "trig.glsl"
#include "rows.glsl"

layout(constant_id = 8) const bool DENSE = false;

// Per node, fixed when the graph is planned (written into the graph's scratch by the command buffer).
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer attend_params {
    KVRef k;         // [Hkv][Ncap][D]
    KVRef v;         // [Hkv][Ncap][D]
    uint same;       // v's rows lie where k's do (same rows, layout and page table): one lookup per row
    uint n_rot;      // ROPE: rotated dimensions
    uint pad0, pad1;
    float freq[64];  // ROPE: powf(base, -2i / n_rot), computed as the CPU computes it
};

layout(push_constant) uniform push_attend {
    TRef q;          // f32 [T][Hq][D]
    TRef idx;        // i32 [lists][nlist] (unused when DENSE)
    uint64_t prm;    // attend_params
    uint64_t ml;     // scratch: vec2 (m, l) per (query row, split)
    uint64_t po;     // scratch: float o[D] per (query row, split)
    uint n;          // entries (dense: N; causal: pos0 + T; gather: the list's; sparse: the list's + T)
    uint nlist;      // entries taken from the index list
    uint start;      // the position of entry nlist (sparse: pos0)
    uint group;      // G
    uint nsplit;     // splits
    uint cs;         // list entries per split (a multiple of NCL * ROWS)
    uint lists;      // 1 (shared list) or Hkv
    float scale;
    uint lim0;       // the query of token t sees entries < min(n, lim0 + t)
    uint hq;         // Hq: q rows of token t start at t * hq
    uint nq;         // queries per KV head: T * G
    uint pass0;      // the first pass of this dispatch (grids beyond the device's z limit)
} pc;

const float NEG = -3.0e38; // "no row yet": exp(NEG - m) is 0 for any real m, and NEG - NEG is 0

shared float sh_o[NCL * D];
shared float sh_m[NCL];
shared float sh_l[NCL];

void main()
{
    const uint lane = cl_lane(), cl = cl_index(), tid = gl_LocalInvocationIndex;
    const uint split = gl_WorkGroupID.x, g = gl_WorkGroupID.y;
    const uint f0 = (pc.pass0 + gl_WorkGroupID.z) * GH;
    const uint nh = min(GH, pc.nq - f0);
    // each query's end (queries past nh repeat the last); tokens rise with the query index, so the
    // last query's end is the pass's
    uint qend[GH];
    [[unroll]] for (uint hh = 0u; hh < GH; hh++) qend[hh] = min(pc.n, pc.lim0 + (f0 + min(hh, nh - 1u)) / pc.group);
    const uint t_begin = split * pc.cs, t_end = min(qend[GH - 1u], t_begin + pc.cs);
    [[unroll]] for (uint hh = 0u; hh < GH; hh++) qend[hh] = min(qend[hh], t_end);
    const uint64_t list_base = uint64_t(pc.lists == 1u ? 0u : g) * pc.nlist;
    const uint cbase = (gl_SubgroupInvocationID / LANES) * LANES;
    const KVRef kk = attend_params(pc.prm).k, vv = attend_params(pc.prm).v;
    const bool same = attend_params(pc.prm).same != 0u;

    load_q(pc.q, g, f0, nh, pc.group, pc.hq, lane);
    if (ROPE != 0u) load_q_rope(pc.q, g, f0, nh, pc.group, pc.hq, lane, attend_params(pc.prm).n_rot, pc.prm + 112ul);

    float mr[GH], lr[GH], o[GH * DPL];
    [[unroll]] for (uint hh = 0u; hh < GH; hh++) { mr[hh] = NEG; lr[hh] = 0.0; }
    [[unroll]] for (uint e = 0u; e < GH * DPL; e++) o[e] = 0.0;

    // Uniform trip count for the whole workgroup (rows past t_end are masked).
    const uint steps = t_end > t_begin ? (t_end - t_begin + NCL * ROWS - 1u) / (NCL * ROWS) : 0u;
    for (uint st = 0u; st < steps; st++) {
        const uint t0 = t_begin + (st * NCL + cl) * ROWS;
        uint okm = 0u; // the step's rows that are present
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            uint t = min(t0 + r, t_end - 1u);
            uint pos = DENSE ? t : t < pc.nlist ? ld_u32(pc.idx, list_base + t) : pc.start + (t - pc.nlist);
            uint64_t koff, voff;
            bool ok = kv_row(kk, g, pos, ROWB, koff);
            voff = koff;
            if (!same) ok = kv_row(vv, g, pos, ROWB, voff) && ok;
            okm |= ok ? 1u << r : 0u;
            if (ROPE != 0u) g_pos[r] = float(t);
            load_row(kk.t, vv.t, true, koff, voff, ok, lane, r);
        }
        if (ROPE != 0u) partial_dots_rope(); else partial_dots();
        xreduce(lane);
        float sc[NV];
        [[unroll]] for (uint x = 0u; x < NV; x++) sc[x] = pc.scale * subgroupShuffle(g_vals[owner_slot(x)], cbase + owner_lane(x));

        // Online softmax over this step's rows, one rescale per head.
        float p[NV], corr[GH];
        [[unroll]] for (uint hh = 0u; hh < GH; hh++) {
            float bm = NEG;
            [[unroll]] for (uint r = 0u; r < ROWS; r++) if (t0 + r < qend[hh] && (okm & (1u << r)) != 0u) bm = max(bm, sc[hh * ROWS + r]);
            float mn = max(mr[hh], bm);
            corr[hh] = exp(mr[hh] - mn);
            float ls = 0.0;
            [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                p[hh * ROWS + r] = t0 + r < qend[hh] && (okm & (1u << r)) != 0u ? exp(sc[hh * ROWS + r] - mn) : 0.0;
                ls += p[hh * ROWS + r];
            }
            lr[hh] = lr[hh] * corr[hh] + ls;
            mr[hh] = mn;
        }
        [[unroll]] for (uint hh = 0u; hh < GH; hh++)
            [[unroll]] for (uint e = 0u; e < DPL; e++) o[hh * DPL + e] *= corr[hh];
        [[unroll]] for (uint r = 0u; r < ROWS; r++) {
            [[unroll]] for (uint i = 0u; i < PER; i++) {
                uvec4 xv = g_v[r * PER + i];
                [[unroll]] for (uint c = 0u; c < 4u; c++) {
                    if (F16) {
                        vec2 f = unpackHalf2x16(xv[c]);
                        [[unroll]] for (uint hh = 0u; hh < GH; hh++) {
                            o[hh * DPL + i * 8u + 2u * c] += p[hh * ROWS + r] * f.x;
                            o[hh * DPL + i * 8u + 2u * c + 1u] += p[hh * ROWS + r] * f.y;
                        }
                    } else {
                        float f = uintBitsToFloat(xv[c]);
                        [[unroll]] for (uint hh = 0u; hh < GH; hh++) o[hh * DPL + i * 4u + c] += p[hh * ROWS + r] * f;
                    }
                }
            }
        }
    }

    // Merge the clusters' states head by head (log-sum-exp rule) and write this split's partial.
    [[unroll]] for (uint hh = 0u; hh < GH; hh++) {
        if (lane == 0u) { sh_m[cl] = mr[hh]; sh_l[cl] = lr[hh]; }
        barrier();
        float mx = NEG;
        for (uint c = 0u; c < NCL; c++) mx = max(mx, sh_m[c]);
        const float w = exp(mr[hh] - mx);
        [[unroll]] for (uint i = 0u; i < PER; i++)
            if (vec_ok(lane, i))
                [[unroll]] for (uint e = 0u; e < EPV; e++) sh_o[cl * D + (lane + LANES * i) * EPV + e] = o[hh * DPL + i * EPV + e] * w;
        barrier();
        if (hh < nh) {
            const uint64_t slot = uint64_t(q_row(g, f0 + hh, pc.group, pc.hq)) * pc.nsplit + split;
            for (uint d = tid; d < D; d += WGS) {
                float acc = 0.0;
                for (uint c = 0u; c < NCL; c++) acc += sh_o[c * D + d];
                F32Ref(pc.po + (slot * D + d) * 4ul).v = acc;
            }
            if (tid == 0u) {
                float l = 0.0;
                for (uint c = 0u; c < NCL; c++) l += sh_l[c] * exp(sh_m[c] - mx);
                V2Ref(pc.ml + slot * 8ul).v = vec2(mx, l);
            }
        }
        barrier();
    }
}
