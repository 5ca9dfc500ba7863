// select (docs/kernels.md): radix select over the order key of the votes, 8 bits at a time from the
// top, then a stable compaction in position order. Shared by select_hist, select_count,
// select_compact and the warm start's select_warm_collect and select_warm_tail (below). Grid
// (block, list): every list is its own row of workgroups with its own histograms and state, so the
// lists of one node (TokenButler's one per KV head) run side by side.
// The planner sizes the blocks from the lists: about pc.nblocks * lists ~ 1024 workgroups in all,
// so 8 lists take as many workgroups (each with 8 times the candidates) as one, and each
// workgroup's fixed costs (deriving its prefix, the scans) are paid ~1024 times, not 8192.
// Workgroups of 256; an invocation's rank (its place in subgroup order) numbers the histogram
// buckets and the elements, so scans need no assumption on how invocations map to subgroups.
//
// State between the dispatches, per list, in the scratch:
//   hist  [lists][4][256]: pass p's histogram of byte 3 - p of the keys that match the prefix of
//         passes < p. Zero when a run starts: the graph's scratch is zeroed once when it is made,
//         pass 0 clears passes 1..3, and select_compact clears pass 0 for the next run.
//   state [lists][4] uvec2: (prefix, rem) after passes 0 .. p, written by block 0 of the dispatch
//         after pass p (hist pass p + 1, or select_count after pass 3): prefix = the top 8 (p + 1)
//         bits of the chosen-th largest key T, rem = how many of the keys with that prefix are
//         still to be taken. Each dispatch thus picks one digit (one scan) instead of replaying
//         every earlier pass, and select_compact reads (T, rem) with one load.
//
// Warm start (sift_op_select_warm: the node's second input warm i32 [lists][4] = THRESHOLD, VALID,
// HITS, MISSES, kept by the caller across decode steps; pc.wbuf != 0). Consecutive steps select
// mostly the same tokens, so the keys at or above a threshold an earlier run left are usually a few
// more than chosen, and an exact select among them spares the four radix passes over every
// candidate. Two dispatches run before the radix ones:
//   select_warm_collect, grid (block, list; the radix blocks, coarsened to at most 1024 per list),
//     one pass over the votes: each workgroup compacts, in position order, the (key, j) with
//     key >= THRESHOLD (nothing while VALID is 0), reserves a range of its list's entries with one
//     atomicAdd on the list's counter (the entries are thus per-workgroup chunks, each in position
//     order, chunks in any order), writes them there if the range ends within CAP (else nothing,
//     but the counter still counts), and records its chunk's (start, count) in `counts` (free
//     until select_count);
//   select_warm_tail, one workgroup per list: total = the counter (reset to 0 for the next run). A
//     hit iff VALID and chosen <= total <= CAP: the keys are taken in position order (a prefix of
//     the chunk counts in block order, a binary search per entry; into shared memory where they
//     fit), T and rem found exactly by a radix select among them, the list written as
//     select_compact writes it (each chosen entry's j read back from its chunk), THRESHOLD set to
//     the key of rank r2 = min(total, chosen + chosen / 4) among the entries (a second radix
//     select; they are the total largest keys, so that is the r2-th largest of all) and HITS + 1.
//     A miss: MISSES + 1.
//   The tail leaves a miss flag per list (1: missed), and every radix kernel returns at once for a
//   list whose flag is 0, as for a skipped node. On that fallback, block 0 of select_count also
//   leaves the next THRESHOLD (its rule is there) and VALID = 1.
// A hit reads the votes once and a little over chosen keys more; it needs chosen + chosen / 4 <= CAP
// / 2 (the planner sends other nodes down the radix path alone, warm untouched). A skipped node
// (pc.skip set) leaves warm untouched: every dispatch returns before reading it.
//   wbuf: ctl uvec4 [lists] = (miss flag, counter, -, -), then entries uvec2 [lists][CAP] = (key, j).
// CAP (entries per list, constant_id 0 of the warm kernels): 8192 (vk_attention.c SELECT_WARM_CAP). The
// tail keeps the keys in shared memory where CAP of them fit beside its other arrays, else it reads
// them from the entries (select_warm_tail.comp's SHK).

layout(local_size_x = 256) in;

layout(push_constant) uniform push_select {
    TRef votes;       // f32 [lists][cand]
    TRef out_;        // i32 [lists][sink + chosen + win_count] (count_())
    TRef warm;        // i32 [lists][4] (THRESHOLD, VALID, HITS, MISSES); only read when wbuf != 0
    uint64_t hist;    // uint [lists][4][256] (above)
    uint64_t state;   // uvec2 [lists][4] (above)
    uint64_t counts;  // uvec2 [lists][nblocks]: per block, keys > T and keys == T; the warm chunks
    uint64_t skip;    // the predicate's address (0: none): every select kernel returns at once when set
    uint64_t wbuf;    // the warm start's ctl and entries (above); 0: no warm start
    uint cand;        // |C|
    uint chosen;      // min(k, |C|)
    uint items;       // elements per invocation per block (a block is 256 * items candidates)
    uint nblocks;
    uint sink;        // min(S, N): positions [0, sink) lead every list
    uint first;       // S: candidate j is position S + j
    uint win_begin;   // max(S, N - W)
    uint win_count;   // N - win_begin
    uint pass;        // select_hist: which byte (0 = the top one)
    uint mode;        // select_compact: 0 radix, 1 take every candidate, 2 take none
} pc;

// Entries per list (the push constants are full: derived, not passed).
uint count_() { return pc.sink + pc.chosen + pc.win_count; }

// Keys a block's invocation loads before it uses any (the loads overlap; a block of many items
// runs in batches of BATCH).
const uint BATCH = 8u;

shared uint sh_scan[256];
shared uint sh_prefix, sh_rem;

uint rank_() { return gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID; }

// Exclusive scan over the workgroup in rank order; total receives the sum.
uint wg_exscan(uint x, out uint total)
{
    uint incl = subgroupInclusiveAdd(x);
    if (gl_SubgroupInvocationID == gl_SubgroupSize - 1u) sh_scan[gl_SubgroupID] = incl;
    barrier();
    uint before = 0u, tot = 0u;
    for (uint i = 0u; i < gl_NumSubgroups; i++) {
        uint t = sh_scan[i];
        if (i < gl_SubgroupID) before += t;
        tot += t;
    }
    barrier();
    total = tot;
    return before + incl - x;
}

uint wg_sum(uint x)
{
    uint total;
    wg_exscan(x, total);
    return total;
}

#ifdef SELECT_SCAN4
shared uvec4 sh_scan4[256];

// wg_exscan over four counters at once (select_compact: four items; select_warm_collect: eight
// items, two 16-bit counters per component).
uvec4 wg_exscan4(uvec4 x, out uvec4 total)
{
    const uvec4 incl = subgroupInclusiveAdd(x);
    if (gl_SubgroupInvocationID == gl_SubgroupSize - 1u) sh_scan4[gl_SubgroupID] = incl;
    barrier();
    uvec4 before = uvec4(0u), tot = uvec4(0u);
    for (uint i = 0u; i < gl_NumSubgroups; i++) {
        const uvec4 t = sh_scan4[i];
        if (i < gl_SubgroupID) before += t;
        tot += t;
    }
    barrier();
    total = tot;
    return before + incl - x;
}
#endif

// The warm start's per-list control words: miss flag (this run's tail: 1 missed) and counter.
uint64_t ctl_addr(uint l) { return pc.wbuf + uint64_t(l) * 16ul; }

// True when the warm start answered list l this run: the radix kernels return at once.
bool warm_answered(uint l) { return pc.wbuf != 0ul && U32Ref(ctl_addr(l)).v == 0u; }

uint64_t hist_addr(uint l, uint p, uint b) { return pc.hist + ((uint64_t(l) * 4u + p) * 256u + b) * 4ul; }
uint64_t state_addr(uint l, uint p) { return pc.state + (uint64_t(l) * 4u + p) * 8ul; }

// Element i (0 .. items - 1) of this invocation in block blk: position j of the list's candidates,
// false past them. Consecutive invocations take consecutive positions (coalesced loads).
bool elem(uint blk, uint i, out uint j)
{
    j = (blk * pc.items + i) * 256u + rank_();
    return i < pc.items && j < pc.cand;
}

uint key_at(uint l, uint j) { return order_key(ld_u32(pc.votes, uint64_t(l) * pc.cand + j)); }

// The keys of items i0 .. i0 + BATCH - 1 of this invocation in block blk of list l, all loads issued
// before any key is used (g_in false past the candidates). The kernels load their first batch before
// they derive the threshold, so that the two latencies overlap. Module scope, as rows.glsl's arrays.
uint g_key[BATCH];
bool g_in[BATCH];
void load_batch(uint l, uint blk, uint i0)
{
    [[unroll]] for (uint i = 0u; i < BATCH; i++) {
        uint j;
        g_in[i] = elem(blk, i0 + i, j);
        g_key[i] = g_in[i] ? key_at(l, j) : 0u;
    }
}

// The (prefix, rem) of list l after passes 0 .. passes - 1 (passes 0: nothing fixed, all chosen to
// take): the state after passes - 1 passes, then the digit of pass passes - 1 from its histogram.
// Block 0 stores it for the next dispatch. The whole workgroup calls it.
void advance(uint l, uint passes, out uint prefix, out uint rem)
{
    prefix = 0u;
    rem = pc.chosen;
    if (passes == 0u) return;
    const uint p = passes - 1u, rk = rank_();
    if (p > 0u) {
        const uint64_t a = state_addr(l, p - 1u);
        prefix = U32Ref(a).v;
        rem = U32Ref(a + 4ul).v;
    }
    if (rk == 0u) { sh_prefix = prefix; sh_rem = rem; } // ordered before the winner's write by the scan's barriers
    const uint b = 255u - rk; // rank order runs from the top bucket down: a prefix scan is a suffix sum
    const uint c = U32Ref(hist_addr(l, p, b)).v;
    uint total;
    const uint excl = wg_exscan(c, total); // keys in buckets above b
    if (excl < rem && excl + c >= rem) {   // the one bucket holding the rem-th largest key
        sh_prefix = prefix | (b << (24u - 8u * p));
        sh_rem = rem - excl;
    }
    barrier();
    prefix = sh_prefix;
    rem = sh_rem;
    if (gl_WorkGroupID.x == 0u && rk == 0u) {
        const uint64_t a = state_addr(l, p);
        U32Ref(a).v = prefix;
        U32Ref(a + 4ul).v = rem;
    }
    barrier(); // sh_prefix and sh_rem may be reused after this
}
