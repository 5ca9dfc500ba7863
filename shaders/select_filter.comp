#version 460
// select: per block the keys whose bin is above b0 (all of them taken) and those in it, stored as
// the block's counts; the positions of the keys in bin b0 appended to the list's buffer (when they
// fit). The tail finds T among bin b0's keys and corrects the counts to keys > T and == T. Grid
// (block, list).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define SELECT_TAIL
#include "select.glsl"

// Buffered keys the tail holds in shared memory: 4096 (16 KB) where the device has 32 KB of shared
// memory or more (the histogram takes 8 KB), else 1 (vk_graph.c plan_select).
layout(constant_id = 0) const uint SMEM_KEYS = 4096u;
shared uint sh_keys[SMEM_KEYS];

// The tail's view of bin b0: candidate i of n (the buffer's; or every candidate, false outside b0).
bool g_buffered, g_in_smem;
uint g_lowest, g_shift, g_b0;
bool bin0_at(uint l, uint i, out uint j, out uint key)
{
    // the buffer written by the other workgroups of this dispatch: read with atomics, which see it
    j = g_buffered ? atomicAdd(U32Ref(pc.buf + (uint64_t(l) * pc.cap + i) * 4ul).v, 0u) : i;
    key = g_in_smem ? sh_keys[i] : key_at(l, j);
    return g_buffered || bin_of(g_lowest, g_shift, key) == g_b0;
}

// The tail (the last workgroup of list l): T and rem, and every block's counts corrected from
// (keys above b0, keys in b0) to (keys > T, keys == T).
void resolve(uint l)
{
    const uint rk = rank_(), n0 = state_get(l, ST_N0);
    g_buffered = n0 <= pc.cap;
    g_in_smem = false;
    const uint n = g_buffered ? n0 : pc.cand;
    if (rk == 0u) { // read (with atomics: they see the other workgroups' maxima) and cleared
        sh_bin = atomicExchange(U32Ref(b0range_addr(l, 0u)).v, 0u);
        sh_count = ~atomicExchange(U32Ref(b0range_addr(l, 1u)).v, 0u);
    }
    barrier();
    const uint kmax = sh_bin, kmin = sh_count;
    barrier(); // pick_bin reuses sh_bin and sh_count
    uint t = kmax, rem = state_get(l, ST_REM0);
    if (kmin != kmax) { // else every key of b0 is T
        if (g_buffered && n <= SMEM_KEYS) {
            for (uint i = rk; i < n; i += 256u)
                sh_keys[i] = key_at(l, atomicAdd(U32Ref(pc.buf + (uint64_t(l) * pc.cap + i) * 4ul).v, 0u));
            g_in_smem = true;
        }
        uint prefix = 0u;
        for (uint d = 0u; d < 3u; d++) { // bits 31..21, 20..10, 9..0
            const uint known = 11u * d, low = d < 2u ? 21u - 11u * d : 0u, mask = d < 2u ? 2047u : 1023u;
            hist_clear();
            barrier(); // the clear (and the shared keys) before any use
            for (uint i = rk; i < n; i += 256u) {
                uint j, key;
                if (bin0_at(l, i, j, key) && (known == 0u || (key >> (32u - known)) == (prefix >> (32u - known))))
                    atomicAdd(sh_hist[(key >> low) & mask], 1u);
            }
            barrier();
            uint c[8];
            [[unroll]] for (uint i = 0u; i < 8u; i++) c[i] = sh_hist[BINS - 1u - rk * 8u - i];
            uint dig, cnt;
            pick_bin(c, rem, dig, rem, cnt);
            prefix |= dig << low;
        }
        t = prefix;
        // counts[b] = (above b0, in b0): add b0's keys > T, take out b0's keys != T
        const uint block_len = 256u * pc.items;
        for (uint i = rk; i < n; i += 256u) {
            uint j, key;
            if (!bin0_at(l, i, j, key)) continue;
            const uint64_t a = counts_addr(l, j / block_len);
            if (key > t) atomicAdd(U32Ref(a).v, 1u);
            if (key != t) atomicAdd(U32Ref(a + 4ul).v, 0xffffffffu);
        }
    }
    if (rk == 0u) {
        state_set(l, ST_T, t);
        state_set(l, ST_REM, rem);
    }
}

void main()
{
    if (skipped(pc.skip)) return;
    const uint l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    load_batch(l, blk, 0u);
    g_lowest = state_get(l, ST_LOWEST);
    g_shift = state_get(l, ST_SHIFT);
    g_b0 = state_get(l, ST_B0);
    const bool buffered = state_get(l, ST_N0) <= pc.cap;
    const uint64_t buf = pc.buf + uint64_t(l) * pc.cap * 4ul;
    uint above = 0u, mine_n = 0u, kmax = 0u, kmin_c = 0u;
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) {
            if (i0 + i >= pc.items) break; // uniform
            const uint bin = bin_of(g_lowest, g_shift, g_key[i]);
            const bool mine = g_in[i] && bin == g_b0;
            above += g_in[i] && bin > g_b0 ? 1u : 0u;
            if (mine) {
                mine_n++;
                kmax = max(kmax, g_key[i]);
                kmin_c = max(kmin_c, ~g_key[i]);
            }
            if (buffered) {
                const uvec4 bal = subgroupBallot(mine);
                const uint nb = subgroupBallotBitCount(bal);
                uint base = 0u;
                if (nb != 0u && subgroupElect()) base = atomicAdd(U32Ref(nbuf_addr(l)).v, nb);
                base = subgroupBroadcastFirst(base);
                uint j;
                elem(blk, i0 + i, j);
                if (mine) U32Ref(buf + uint64_t(base + subgroupBallotExclusiveBitCount(bal)) * 4ul).v = j;
            }
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    above = wg_sum(above);
    mine_n = wg_sum(mine_n);
    kmax = wg_max(kmax);
    kmin_c = wg_max(kmin_c);
    if (rank_() == 0u) {
        const uint64_t a = counts_addr(l, blk);
        U32Ref(a).v = above;
        U32Ref(a + 4ul).v = mine_n;
        if (mine_n != 0u) {
            atomicMax(U32Ref(b0range_addr(l, 0u)).v, kmax);
            atomicMax(U32Ref(b0range_addr(l, 1u)).v, kmin_c);
        }
    }
    if (!is_last(l, 1u)) return;
    resolve(l);
}
