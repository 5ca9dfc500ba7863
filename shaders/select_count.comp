#version 460
// select: the threshold T (the chosen-th largest key) and rem from the last pass's histogram (block 0
// stores them for select_compact), then per block how many keys are greater than T and how many
// equal it. Grid (block, list). With a warm start (pc.wbuf != 0) only the lists the warm tail missed
// run, and block 0 leaves each its next threshold (warm_threshold).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "select.glsl"

shared uint sh_bucket, sh_above;

// The warm start's next threshold for list l after a fallback (select.glsl), from the four
// histograms still in the scratch (hist pass p counts byte 3 - p of the keys that share T's top
// 8p bits). The aim is a key K <= T with about r2 = min(|C|, chosen + chosen / 4) keys >= K: a
// quarter of chosen to spare, so that the next step's votes, which move a little, still leave at
// least chosen keys above it, and few enough past r2 to fit CAP. Descend T's buckets from the top
// byte: while rank r2 lies in T's own bucket of pass p (and p < 3), go down to pass p + 1 (the
// keys of that bucket); at the first pass where it lies in a lower bucket b, K = T's higher bytes,
// then b, then zeros: all keys of b's bucket and above, at least r2 and at most r2 plus that
// bucket. If rank r2 shares all four bytes with T, K = T. K <= T since r2 >= chosen. (Stopping
// after pass 1, at a 16-bit prefix, would be the cheaper rule; the lower passes cost nothing more
// here and matter for concentrated votes: within 1% above 1.0 every key shares its top 16 bits, so
// a 16-bit threshold would collect most of the list, past CAP, and every step would miss.)
// Uniform: the whole workgroup calls it.
uint warm_threshold(uint l, uint t)
{
    const uint rk = rank_(), r2 = min(pc.cand, pc.chosen + pc.chosen / 4u);
    uint above = 0u; // keys in buckets above T's at the passes before p
    for (uint p = 0u; p < 4u; p++) {
        const uint shift = 24u - 8u * p, tb = (t >> shift) & 255u;
        const uint b = 255u - rk; // rank order from the top bucket down, as advance()
        const uint c = U32Ref(hist_addr(l, p, b)).v;
        uint total;
        const uint excl = above + wg_exscan(c, total); // keys above bucket b
        if (excl < r2 && excl + c >= r2) sh_bucket = b;
        if (b == tb) sh_above = excl;
        barrier();
        const uint rb = sh_bucket;
        above = sh_above;
        barrier(); // before the next pass writes them
        if (rb != tb || p == 3u) {
            const uint high = p == 0u ? 0u : t & (0xffffffffu << (32u - 8u * p));
            return high | (rb << shift);
        }
    }
    return t; // not reached
}

void main()
{
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    if (skipped(pc.skip) || warm_answered(l)) return;
    load_batch(l, blk, 0u);
    uint t, rem;
    advance(l, 4u, t, rem);
    uint gt = 0u, eq = 0u;
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) {
            gt += g_in[i] && g_key[i] > t ? 1u : 0u;
            eq += g_in[i] && g_key[i] == t ? 1u : 0u;
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    gt = wg_sum(gt);
    eq = wg_sum(eq);
    if (rk == 0u) {
        uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + blk) * 8ul;
        U32Ref(a).v = gt;
        U32Ref(a + 4ul).v = eq;
    }
    if (pc.wbuf != 0ul && blk == 0u) {
        const uint k = warm_threshold(l, t);
        if (rk == 0u) {
            st_u32(pc.warm, uint64_t(l) * 4u, k);
            st_u32(pc.warm, uint64_t(l) * 4u + 1u, 1u);
        }
    }
}
