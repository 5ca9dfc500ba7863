#version 460
// select's warm start, tail (select.glsl): per list, hit or miss on what select_warm_collect
// gathered; on a hit the exact select among the collected keys, the list, and the next threshold.
// Grid (1, list): one workgroup per list. The radix select (both ranks in one set of four passes)
// reads every key once per pass, and the compaction twice more: where the device's shared memory
// holds the CAP keys beside this kernel's other 12 KB (SHK == CAP; 44 KB at CAP = 8192, within the
// 48 KB of NVIDIA's Vulkan drivers) they are loaded there once, in position order; else (lavapipe's
// 32 KB) every read goes to the entries, which a GPU still holds in L2 from the collect. The
// positions j stay in the entries and are read back for the chosen only.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

layout(constant_id = 0) const uint CAP = 8192u;
layout(constant_id = 1) const uint SHK = 8192u; // CAP: keys in shared memory; 1: in the entries
const uint NBW = 1024u; // the most collect blocks per list (the planner's limit)

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer U2Ref { uvec2 v; };

shared uint sh_key[SHK];   // SHK == CAP: the collected keys in position order
shared uint sh_pre[NBW];   // per block: the collected keys of the blocks before it
shared uint sh_start[NBW]; // per block: where its chunk starts in the entries
shared uint sh_hist[256];
shared uint sh_total;

uint64_t g_ent; // the list's entries uvec2 [CAP] (key, j)

// The block whose chunk holds the entry of position-order index i (< total): the last block with
// sh_pre <= i (a block after an empty one shares its sh_pre and wins, so the block is not empty).
uint block_of(uint i)
{
    uint lo = 0u, hi = pc.nblocks - 1u;
    while (lo < hi) {
        const uint mid = (lo + hi + 1u) >> 1;
        if (sh_pre[mid] <= i) lo = mid;
        else hi = mid - 1u;
    }
    return lo;
}

// The slot in the entries of position-order index i.
uint slot_of(uint i)
{
    const uint b = block_of(i);
    return sh_start[b] + (i - sh_pre[b]);
}

// The key of position-order index i (< total).
uint key_pos(uint i)
{
    if (SHK == CAP) return sh_key[i];
    return U2Ref(g_ent + uint64_t(slot_of(i)) * 8ul).v.x;
}

// Key i (< total) in whatever order is cheapest: a histogram needs every key once, in any order, and
// the entries [0, total) are all written on a hit.
uint key_any(uint i)
{
    if (SHK == CAP) return sh_key[i];
    return U2Ref(g_ent + uint64_t(i) * 8ul).v.x;
}

// The ra-th and the rb-th largest keys (1 <= ra, rb <= total) among the total keys, ta and tb, and
// rem: how many of the keys equal to ta are among the ra largest. Radix select, 8 bits at a time from
// the top, as select_hist and advance() do over the votes, for both ranks in the same passes: a key
// counts in the low half of its bucket when it matches ta's prefix so far, in the high half when it
// matches tb's (both at most total <= 8192: no carry), so one atomic and one scan per pass serve
// both. Uniform: the whole workgroup calls it.
shared uint sh_prefix_b, sh_rem_b; // tb's, as select.glsl's sh_prefix and sh_rem are ta's
void select_ranks(uint total, uint ra, uint rb, out uint ta, out uint rem, out uint tb)
{
    const uint rk = rank_();
    uint pa = 0u, pb = 0u, rema = ra, remb = rb;
    for (uint p = 0u; p < 4u; p++) {
        sh_hist[rk] = 0u;
        barrier();
        const uint mask = p == 0u ? 0u : 0xffffffffu << (32u - 8u * p), shift = 24u - 8u * p;
        for (uint i0 = 0u; i0 < total; i0 += 256u) { // uniform trip count: subgroup votes inside
            const uint i = i0 + rk;
            uint k = 0u, add = 0u;
            if (i < total) {
                k = key_any(i);
                add = ((k & mask) == pa ? 1u : 0u) | ((k & mask) == pb ? 0x10000u : 0u);
            }
            const uint b = add != 0u ? (k >> shift) & 255u : 256u;
            if (subgroupAllEqual(b) && subgroupAllEqual(add)) { // ties, the top passes: one atomic
                const uint n = subgroupBallotBitCount(subgroupBallot(true));
                if (b < 256u && subgroupElect()) atomicAdd(sh_hist[b], add * n);
            } else if (b < 256u) {
                atomicAdd(sh_hist[b], add);
            }
        }
        barrier();
        const uint b = 255u - rk; // rank order from the top bucket down
        const uint c = sh_hist[b];
        uint sum;
        const uint excl = wg_exscan(c, sum); // keys in buckets above b, both halves
        const uint ea = excl & 0xffffu, ca = c & 0xffffu, eb = excl >> 16, cb = c >> 16;
        if (ea < rema && ea + ca >= rema) {
            sh_prefix = pa | (b << shift);
            sh_rem = rema - ea;
        }
        if (eb < remb && eb + cb >= remb) {
            sh_prefix_b = pb | (b << shift);
            sh_rem_b = remb - eb;
        }
        barrier();
        pa = sh_prefix;
        rema = sh_rem;
        pb = sh_prefix_b;
        remb = sh_rem_b;
        barrier(); // sh_hist and the winners' words are rewritten next
    }
    ta = pa;
    rem = rema;
    tb = pb;
}

void main()
{
    const uint rk = rank_(), l = gl_WorkGroupID.y;
    if (skipped(pc.skip)) return;
    const uint64_t w = uint64_t(l) * 4u;
    const bool valid = ld_u32(pc.warm, w + 1u) != 0u;
    if (rk == 0u) {
        const uint64_t counter = ctl_addr(l) + 4ul;
        sh_total = U32Ref(counter).v;
        U32Ref(counter).v = 0u; // for the next run's collect
    }
    barrier();
    const uint total = sh_total;
    const bool hit = valid && pc.chosen <= total && total <= CAP;
    if (rk == 0u) {
        U32Ref(ctl_addr(l)).v = hit ? 0u : 1u; // the radix kernels run for this list iff 1
        if (!hit) st_u32(pc.warm, w + 3u, ld_u32(pc.warm, w + 3u) + 1u);
    }
    if (!hit) return;

    // the chunks in block order: each invocation takes up to 4 consecutive blocks (NBW / 256)
    const uint per = (pc.nblocks + 255u) / 256u, b0 = rk * per;
    uint cnt[NBW / 256u], start[NBW / 256u], s = 0u;
    [[unroll]] for (uint q = 0u; q < NBW / 256u; q++) {
        cnt[q] = 0u;
        start[q] = 0u;
        if (q < per && b0 + q < pc.nblocks) {
            const uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + b0 + q) * 8ul;
            start[q] = U32Ref(a).v;
            cnt[q] = U32Ref(a + 4ul).v;
        }
        s += cnt[q];
    }
    uint sum;
    uint before = wg_exscan(s, sum);
    [[unroll]] for (uint q = 0u; q < NBW / 256u; q++) {
        if (q < per && b0 + q < pc.nblocks) {
            sh_pre[b0 + q] = before;
            sh_start[b0 + q] = start[q];
        }
        before += cnt[q];
    }
    barrier();

    // the keys in position order (consecutive i of one chunk: consecutive entries, coalesced)
    g_ent = pc.wbuf + uint64_t(gl_NumWorkGroups.y) * 16ul + (uint64_t(l) * CAP) * 8ul;
    if (SHK == CAP) {
        for (uint i = rk; i < total; i += 256u) sh_key[i] = U2Ref(g_ent + uint64_t(slot_of(i)) * 8ul).v.x;
        barrier();
    }

    // T and rem; and the next threshold, the key of rank r2 among the entries: they are the total
    // largest keys, so it is the r2-th largest of all
    const uint r2 = min(total, pc.chosen + pc.chosen / 4u);
    uint t, rem, next;
    select_ranks(total, pc.chosen, r2, t, rem, next);

    // the list, as select_compact writes it: sink, the chosen in position order, the window
    const uint64_t out0 = uint64_t(l) * count_();
    for (uint i = rk; i < pc.sink; i += 256u) st_u32(pc.out_, out0 + i, i);
    for (uint i = rk; i < pc.win_count; i += 256u) st_u32(pc.out_, out0 + pc.sink + pc.chosen + i, pc.win_begin + i);
    // each invocation a run of consecutive entries, so one scan orders them all: keys > T in bits
    // 0..15, keys == T in 16..31 (total <= CAP <= 8192 each)
    const uint run = (total + 255u) / 256u, i0 = min(total, rk * run), i1 = min(total, i0 + run);
    uint x = 0u;
    for (uint i = i0; i < i1; i++) {
        const uint k = key_pos(i);
        x += k > t ? 1u : k == t ? 0x10000u : 0u;
    }
    uint ex = wg_exscan(x, sum);
    for (uint i = i0; i < i1; i++) {
        const uint k = key_pos(i), gt = ex & 0xffffu, eq = ex >> 16;
        if (k > t || (k == t && eq < rem)) {
            const uint j = U2Ref(g_ent + uint64_t(slot_of(i)) * 8ul).v.y;
            st_u32(pc.out_, out0 + pc.sink + gt + min(eq, rem), pc.first + j);
        }
        ex += k > t ? 1u : k == t ? 0x10000u : 0u;
    }

    if (rk == 0u) {
        st_u32(pc.warm, w, next);
        st_u32(pc.warm, w + 2u, ld_u32(pc.warm, w + 2u) + 1u);
    }
}
