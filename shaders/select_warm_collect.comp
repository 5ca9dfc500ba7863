#version 460
// select's warm start, collect (select.glsl): the (key, j) of this block with key >= THRESHOLD, in
// position order, appended to the list's entries as one chunk (one atomicAdd per workgroup), and
// the chunk's (start, count) recorded for select_warm_tail. Grid (block, list): the planner's blocks,
// at most 1024 per list (select_warm_tail's shared prefix).
#extension GL_GOOGLE_include_directive : require
#define SELECT_SCAN4
#include "common.glsl"
#include "select.glsl"

layout(constant_id = 0) const uint CAP = 8192u;

layout(buffer_reference, std430, buffer_reference_align = 8) writeonly buffer U2Ref { uvec2 v; };

shared uint sh_start;

void main()
{
    const uint rk = rank_(), l = gl_WorkGroupID.y, blk = gl_WorkGroupID.x;
    if (skipped(pc.skip)) return;
    load_batch(l, blk, 0u); // the first keys' loads overlap the threshold's
    const uint thr = ld_u32(pc.warm, uint64_t(l) * 4u), valid = ld_u32(pc.warm, uint64_t(l) * 4u + 1u);
    if (valid == 0u) return; // a cold list collects nothing: the tail misses without reading a chunk
    uint n = 0u;
    for (uint i0 = 0u;;) {
        [[unroll]] for (uint i = 0u; i < BATCH; i++) n += g_in[i] && g_key[i] >= thr ? 1u : 0u;
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
    const uint cnt = wg_sum(n);
    if (rk == 0u) {
        const uint start = cnt != 0u ? atomicAdd(U32Ref(ctl_addr(l) + 4ul).v, cnt) : 0u;
        const uint64_t a = pc.counts + (uint64_t(l) * pc.nblocks + blk) * 8ul;
        U32Ref(a).v = start;
        U32Ref(a + 4ul).v = cnt;
        sh_start = start;
    }
    barrier();
    const uint start = sh_start;
    // nothing to write, or past CAP: the counter tells the tail (a miss), the entries stay as they are
    if (cnt == 0u || start >= CAP || cnt > CAP - start) return;
    if (pc.items > BATCH) load_batch(l, blk, 0u); // else the one batch is still in registers
    const uint64_t base = pc.wbuf + uint64_t(gl_NumWorkGroups.y) * 16ul + (uint64_t(l) * CAP) * 8ul;
    uint at = start; // the entry of this batch's first collected key
    for (uint i0 = 0u;;) {
        // a batch's 8 items in one scan: component c holds item 2c (bits 0..15) and item 2c + 1
        // (bits 16..31), at most 256 each; items in position order, as select_compact's
        uvec4 x;
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            const uint a = 2u * c, b = a + 1u;
            x[c] = (g_in[a] && g_key[a] >= thr ? 1u : 0u) | (g_in[b] && g_key[b] >= thr ? 0x10000u : 0u);
        }
        uvec4 total;
        const uvec4 ex = wg_exscan4(x, total);
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            [[unroll]] for (uint h = 0u; h < 2u; h++) {
                const uint i = 2u * c + h, sh = 16u * h;
                uint j;
                if (((x[c] >> sh) & 1u) != 0u && elem(blk, i0 + i, j))
                    U2Ref(base + uint64_t(at + ((ex[c] >> sh) & 0xffffu)) * 8ul).v = uvec2(g_key[i], j);
                at += (total[c] >> sh) & 0xffffu;
            }
        }
        i0 += BATCH;
        if (i0 >= pc.items) break;
        load_batch(l, blk, i0);
    }
}
