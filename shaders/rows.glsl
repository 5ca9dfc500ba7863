// K/V row machinery shared by score.comp and attend.comp (docs/kernels.md).
//
// A cluster of LANES consecutive invocations of one subgroup reads one K (or V) row of VEC 16-byte
// vectors: lane l loads vectors l, l + LANES, ... (coalesced; vectors past the row's end are zeros),
// so it owns DPL fixed dimensions of every row, and keeps the same dimensions of the GH queries of
// its pass in registers. Each cluster works on ROWS rows at a time (all loads issued before any
// arithmetic); the GH * ROWS partial dot products are summed across the cluster with xreduce().
// D is any multiple of 8 up to 128, so a row is a whole number of vectors; when LANES does not divide
// VEC, lanes whose slot lies past the row (vec_ok() false) load nothing and hold zeros.
//
// The queries of a pass are (token, head) pairs of one KV head's group (q_row()): the decode ops
// have one token, causal_attend T of them.

layout(constant_id = 0) const uint WGS = 256;     // workgroup size (a multiple of the subgroup size)
layout(constant_id = 1) const uint D = 128;       // head dimension
layout(constant_id = 2) const bool F16 = true;    // K/V stored as IEEE halves (else f32)
layout(constant_id = 3) const uint LANES = 16;    // invocations per row (a power of two <= subgroup size)
layout(constant_id = 4) const uint GH = 4;        // query heads per pass (<= G)
layout(constant_id = 5) const uint ROWS = 4;      // rows per cluster per step
layout(constant_id = 6) const uint VP = 16;       // GH * ROWS rounded up to a power of two
layout(constant_id = 7) const bool ALIGNED = true; // K/V rows 16-byte aligned and never split by a chunk
layout(constant_id = 9) const uint ROPE = 0;      // attend.comp: keys rotated on the fly (SPEC §6): 0 no, 1 adjacent pairs, 2 neox pairs

layout(local_size_x_id = 0) in;

const uint EPV = F16 ? 8u : 4u;       // elements per 16-byte vector
const uint ROWB = F16 ? D * 2u : D * 4u; // bytes per row
const uint VEC = ROWB / 16u;          // vectors per row
const uint PER = (VEC + LANES - 1u) / LANES; // vectors per lane per row (the last ones may lie past the row)
const uint DPL = PER * EPV;           // dimensions per lane
const uint NCL = WGS / LANES;         // clusters per workgroup
const uint NV = GH * ROWS;            // partial sums per lane per step
const uint VC = VP >= LANES ? VP / LANES : 1u; // values a lane owns after xreduce

// Per-invocation working arrays. Module-scope on purpose: glslang 12 miscompiles (and emits
// nondeterministic SPIR-V for) arrays sized by specialization constants passed as parameters.
float g_q[GH * DPL];       // the lane's dimensions of the pass's queries
uvec4 g_k[ROWS * PER];     // the lane's vectors of the step's K rows
uvec4 g_v[ROWS * PER];     // ... and V rows (attend.comp)
float g_vals[VP];          // partial dot products, then totals (xreduce)
// ROPE only (unused, and removed by the compiler, otherwise):
float g_qp[GH * DPL];      // sigma(d) * q[partner(d)] for the lane's dimensions d < n_rot, else 0
float g_fr[DPL];           // the frequency of the lane's dimensions' pairs (0 past n_rot)
float g_pos[ROWS];         // the position each of the step's keys is rotated to

uint cl_lane() { return gl_SubgroupInvocationID % LANES; }
uint cl_index() { return gl_SubgroupID * (gl_SubgroupSize / LANES) + gl_SubgroupInvocationID / LANES; }

// Whether vector slot i of the lane holds a vector of the row.
bool vec_ok(uint lane, uint i) { return (VEC % LANES) == 0u || lane + LANES * i < VEC; }

// The q row of query f of KV head g: the queries of a KV head are its group's heads of token 0, then
// of token 1, ... (decode ops have one token); q rows of token t start at t * hq.
uint q_row(uint g, uint f, uint group, uint hq) { return (f / group) * hq + g * group + f % group; }

// Loads the lane's dimensions of queries f0 .. f0 + GH - 1 of KV head g (past nh repeat the last).
void load_q(TRef q, uint g, uint f0, uint nh, uint group, uint hq, uint lane)
{
    [[unroll]] for (uint hh = 0u; hh < GH; hh++) {
        uint h = q_row(g, f0 + min(hh, nh - 1u), group, hq);
        [[unroll]] for (uint i = 0u; i < PER; i++) {
            uint d0 = (lane + LANES * i) * EPV;
            [[unroll]] for (uint e = 0u; e < EPV; e++) {
                g_q[hh * DPL + i * EPV + e] = 0.0;
                if (vec_ok(lane, i)) g_q[hh * DPL + i * EPV + e] = ld_f32(q, uint64_t(h) * D + d0 + e);
            }
        }
    }
}

// The lane's vectors of row r (K, and V when with_v) of the step: K's row starts at byte koff of k,
// V's at voff of v. An absent row (present false) is not read: its vectors are zeros.
void load_row(TRef k, TRef v, bool with_v, uint64_t koff, uint64_t voff, bool present, uint lane, uint r)
{
    [[unroll]] for (uint i = 0u; i < PER; i++) {
        uint64_t o = uint64_t(lane + LANES * i) * 16ul;
        g_k[r * PER + i] = uvec4(0u);
        if (with_v) g_v[r * PER + i] = uvec4(0u);
        if (present && vec_ok(lane, i)) {
            g_k[r * PER + i] = ld_16(k, koff + o, ALIGNED);
            if (with_v) g_v[r * PER + i] = ld_16(v, voff + o, ALIGNED);
        }
    }
}

// ROPE: the rotated key's dot product without rotating the key. With pair (a, b) of the first n_rot
// dimensions at angle theta (cpu_rope_row: k'a = ka c - kb s, k'b = ka s + kb c),
//   q . k' = sum over d of (k_d c) q_d + (k_d s) sigma(d) q_partner(d),  sigma(a) = 1, sigma(b) = -1,
// so each lane needs its own dimensions of k only (no exchange between lanes for neox pairs): the
// partners' query values are loaded once (g_qp) with each dimension's frequency (g_fr).
void load_q_rope(TRef q, uint g, uint f0, uint nh, uint group, uint hq, uint lane, uint n_rot, uint64_t freq)
{
    const uint half_ = n_rot / 2u;
    [[unroll]] for (uint i = 0u; i < PER; i++) {
        [[unroll]] for (uint e = 0u; e < EPV; e++) {
            const uint d = (lane + LANES * i) * EPV + e;
            uint p = 0u, partner = 0u;
            float sigma = 0.0;
            if (vec_ok(lane, i) && d < n_rot) {
                if (ROPE == 1u) { p = d >> 1; partner = d ^ 1u; sigma = (d & 1u) == 0u ? 1.0 : -1.0; }
                else if (d < half_) { p = d; partner = d + half_; sigma = 1.0; }
                else { p = d - half_; partner = d - half_; sigma = -1.0; }
            }
            g_fr[i * EPV + e] = sigma != 0.0 ? F32Ref(freq + uint64_t(p) * 4ul).v : 0.0;
            [[unroll]] for (uint hh = 0u; hh < GH; hh++) {
                const uint h = q_row(g, f0 + min(hh, nh - 1u), group, hq);
                g_qp[hh * DPL + i * EPV + e] = sigma != 0.0 ? sigma * ld_f32(q, uint64_t(h) * D + partner) : 0.0;
            }
        }
    }
}

// g_vals[hh * ROWS + r] = partial dot of query hh with K row r over this lane's dimensions (head-major,
// so that after xreduce neighbouring lanes hold neighbouring positions of one head).
void partial_dots()
{
    [[unroll]] for (uint v = 0u; v < VP; v++) g_vals[v] = 0.0;
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        [[unroll]] for (uint i = 0u; i < PER; i++) {
            uvec4 x = g_k[r * PER + i];
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                if (F16) {
                    vec2 f = unpackHalf2x16(x[c]);
                    [[unroll]] for (uint hh = 0u; hh < GH; hh++) {
                        g_vals[hh * ROWS + r] += g_q[hh * DPL + i * 8u + 2u * c] * f.x + g_q[hh * DPL + i * 8u + 2u * c + 1u] * f.y;
                    }
                } else {
                    float f = uintBitsToFloat(x[c]);
                    [[unroll]] for (uint hh = 0u; hh < GH; hh++) g_vals[hh * ROWS + r] += g_q[hh * DPL + i * 4u + c] * f;
                }
            }
        }
    }
}

// partial_dots() for keys rotated to positions g_pos[r] (ROPE): theta = pos * freq, one f32 multiply
// as cpu_rope_row (no frequency factors), sin and cos from trig.glsl; one angle per adjacent pair,
// one per dimension for neox pairs. Dimensions past n_rot have frequency 0: c = 1, s = 0 exactly.
void partial_dots_rope()
{
    [[unroll]] for (uint v = 0u; v < VP; v++) g_vals[v] = 0.0;
    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
        const float pos = g_pos[r];
        [[unroll]] for (uint i = 0u; i < PER; i++) {
            uvec4 x = g_k[r * PER + i];
            [[unroll]] for (uint w = 0u; w < EPV / 2u; w++) {
                const vec2 kk = F16 ? unpackHalf2x16(x[w]) : vec2(uintBitsToFloat(x[2u * w]), uintBitsToFloat(x[2u * w + 1u]));
                const uint e = i * EPV + 2u * w;
                float s0, c0, s1, c1;
                precise float th0 = pos * g_fr[e];
                sincos_accurate(th0, s0, c0);
                if (ROPE == 2u) {
                    precise float th1 = pos * g_fr[e + 1u];
                    sincos_accurate(th1, s1, c1);
                } else {
                    s1 = s0;
                    c1 = c0;
                }
                const float kc0 = kk.x * c0, ks0 = kk.x * s0, kc1 = kk.y * c1, ks1 = kk.y * s1;
                [[unroll]] for (uint hh = 0u; hh < GH; hh++)
                    g_vals[hh * ROWS + r] += (kc0 * g_q[hh * DPL + e] + ks0 * g_qp[hh * DPL + e]) +
                                             (kc1 * g_q[hh * DPL + e + 1u] + ks1 * g_qp[hh * DPL + e + 1u]);
            }
        }
    }
}

// Sums g_vals across the LANES lanes of the cluster, halving the values each lane carries at every
// step (a transposing butterfly: about VP shuffles in all instead of VP * log2(LANES)). Afterwards
// lane l holds the totals of values l * VC .. l * VC + VC - 1 in g_vals[0 .. VC) when VP >= LANES;
// otherwise value l / (LANES / VP) in g_vals[0] (lanes of a group of LANES / VP hold the same total).
void xreduce(uint lane)
{
    uint cnt = VP;
    [[unroll]] for (uint m = LANES / 2u; m >= 1u; m >>= 1u) {
        if (cnt > 1u) {
            uint half_ = cnt / 2u;
            bool up = (lane & m) != 0u;
            [[unroll]] for (uint i = 0u; i < half_; i++) {
                float send = up ? g_vals[i] : g_vals[i + half_];
                float keep = up ? g_vals[i + half_] : g_vals[i];
                g_vals[i] = keep + subgroupShuffleXor(send, m);
            }
            cnt = half_;
        } else {
            g_vals[0] += subgroupShuffleXor(g_vals[0], m);
        }
    }
}

// After xreduce: the lane (within the cluster) holding total v, and its slot in g_vals.
uint owner_lane(uint v) { return VP >= LANES ? v / VC : v * (LANES / VP); }
uint owner_slot(uint v) { return VP >= LANES ? v % VC : 0u; }
