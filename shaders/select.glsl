// select (docs/kernels.md; cuda/select.cu is the same algorithm): per list, the k largest votes,
// ties to the lower position, joined with sink and window, ascending. Three kernels:
//   select_top     every workgroup derives the same 2048 bins from the range of the order keys of
//                  1024 evenly spread candidates (bin(key) = (key - lowest) >> shift, keys outside
//                  the range in the first or the last bin; votes are often concentrated in a
//                  fraction of an octave, where the top bits of the keys barely differ) and counts
//                  its keys into them. Tail: the bin b0 holding the k-th largest key.
//   select_filter  per block, the keys above bin b0 (all taken) and those in it; the positions of
//                  those in b0 appended to the list's buffer. Tail: the k-th largest key T among
//                  bin b0's keys (three digits of 11, 11 and 10 bits over the buffer, in shared
//                  memory when it fits; over every candidate when b0 held more than the buffer; T
//                  at once when b0's keys are all equal), how many keys equal to T to take, and
//                  each block's counts of keys > T and == T.
//   select_compact a stable compaction in position order (and the sink and the window).
// A tail runs in the workgroup that takes the last ticket of its list, after every other
// workgroup's results are in memory. Grid (block, list) for all three: every list is its own row
// of workgroups with its own histogram and state, so the lists of one node (TokenButler's one per
// KV head) run side by side. The planner sizes the blocks from the lists: about pc.nblocks * lists
// ~ 1024 workgroups in all. Workgroups of 256; an invocation's rank (its place in subgroup order)
// numbers the histogram buckets and the elements, so scans need no assumption on how invocations
// map to subgroups.
//
// Scratch, per list:
//   zeroed part (pc.hist): hist [lists][2048], tickets [2][lists], nbuf [lists], b0 key range
//         [lists][2] (the largest key of bin b0, the complement of the smallest). Zero when a run
//         starts: the graph's scratch is zeroed once when it is made, and each run's last user
//         clears them again (select_top's tail the histogram, each tail its ticket,
//         select_filter's tail the key range, select_compact nbuf).
//   state [lists] (8 uints): lowest, shift (block 0 of select_top), b0, rem0, n0 (select_top's
//         tail: T's bin, keys of it still to take, keys in it), t, rem (select_filter's tail).
//   counts [lists][nblocks] uvec2: per block, keys > T and keys == T.
//   buf   [lists][cap]: candidate indices of bin b0.

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    TRef votes;       // f32 [lists][cand]
    TRef out_;        // i32 [lists][count]
    uint64_t hist;    // the zeroed part (above)
    uint64_t state;   // uint [lists][8] (above)
    uint64_t counts;  // uvec2 [lists][nblocks]
    uint64_t buf;     // uint [lists][cap]
    uint64_t skip;    // the predicate's address (0: none): every select kernel returns at once when set
    uint cand;        // |C|
    uint chosen;      // min(k, |C|)
    uint items;       // elements per invocation per block (a block is 256 * items candidates)
    uint nblocks;
    uint sink;        // min(S, N): positions [0, sink) lead every list
    uint first;       // S: candidate j is position S + j
    uint win_begin;   // max(S, N - W)
    uint win_count;   // N - win_begin
    uint count;       // entries per list: sink + chosen + win_count
    uint cap;         // buffer entries per list
    uint mode;        // select_compact: 0 radix, 1 take every candidate, 2 take none
} pc;

const uint BINS = 2048u;
const uint NO_BIN = BINS; // a key that counts in no bin

// Keys a block's invocation loads before it uses any (the loads overlap; a block of many items
// runs in batches of BATCH).
const uint BATCH = 8u;

shared uint sh_scan[256];

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

uint wg_max(uint x)
{
    x = subgroupMax(x);
    if (subgroupElect()) sh_scan[gl_SubgroupID] = x;
    barrier();
    for (uint i = 0u; i < gl_NumSubgroups; i++) x = max(x, sh_scan[i]);
    barrier();
    return x;
}

uint lists_() { return gl_NumWorkGroups.y; }
uint64_t hist_addr(uint l) { return pc.hist + uint64_t(l) * BINS * 4ul; }
uint64_t ticket_addr(uint l, uint p) { return pc.hist + (uint64_t(BINS) * lists_() + p * lists_() + l) * 4ul; }
uint64_t nbuf_addr(uint l) { return pc.hist + (uint64_t(BINS + 2u) * lists_() + l) * 4ul; }
uint64_t b0range_addr(uint l, uint i) { return pc.hist + (uint64_t(BINS + 3u) * lists_() + 2u * l + i) * 4ul; }
const uint ST_LOWEST = 0u, ST_SHIFT = 1u, ST_B0 = 2u, ST_REM0 = 3u, ST_N0 = 4u, ST_T = 5u, ST_REM = 6u;
uint64_t state_addr(uint l, uint field) { return pc.state + (uint64_t(l) * 8u + field) * 4ul; }
uint state_get(uint l, uint field) { return U32Ref(state_addr(l, field)).v; }
void state_set(uint l, uint field, uint v) { U32Ref(state_addr(l, field)).v = v; }
uint64_t counts_addr(uint l, uint blk) { return pc.counts + (uint64_t(l) * pc.nblocks + blk) * 8ul; }

uint bin_of(uint lowest, uint shift, uint key)
{
    if (key <= lowest) return 0u;
    return min((key - lowest) >> shift, BINS - 1u);
}

// Element i (0 .. items - 1) of this invocation in block blk: position j of the list's candidates,
// false past them. Consecutive invocations take consecutive positions (coalesced loads).
bool elem(uint blk, uint i, out uint j)
{
    j = (blk * pc.items + i) * 256u + rank_();
    return i < pc.items && j < pc.cand;
}

uint key_at(uint l, uint j) { return order_key(ld_u32(pc.votes, uint64_t(l) * pc.cand + j)); }

// The keys of items i0 .. i0 + BATCH - 1 of this invocation in block blk of list l, all loads issued
// before any key is used (g_in false past the candidates). Module scope, as rows.glsl's arrays.
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

#ifdef SELECT_TAIL // select_top and select_filter
shared uint sh_hist[BINS];
shared uint sh_bin, sh_rem, sh_count;
shared bool sh_last;

void hist_clear()
{
    for (uint i = rank_(); i < BINS; i += 256u) sh_hist[i] = 0u;
}

// The whole workgroup, after its results are stored: true in the workgroup that took the last of
// its list's tickets p, which then sees every workgroup's results (and resets the ticket).
bool is_last(uint l, uint p)
{
    memoryBarrier(); // this workgroup's results before its ticket
    barrier();
    if (rank_() == 0u) {
        sh_last = atomicAdd(U32Ref(ticket_addr(l, p)).v, 1u) == gl_NumWorkGroups.x - 1u;
        if (sh_last) U32Ref(ticket_addr(l, p)).v = 0u;
    }
    barrier();
    memoryBarrier();
    return sh_last;
}

// The whole workgroup: in the counts c of its 8 buckets (invocation r: buckets BINS-1-8r ..
// BINS-8-8r, so that a prefix scan in rank order is a suffix sum) the bucket holding the rem-th
// largest key, the keys of that bucket still to take, and its count.
void pick_bin(uint c[8], uint rem, out uint bin, out uint bin_rem, out uint bin_count)
{
    const uint rk = rank_();
    uint sum = 0u;
    [[unroll]] for (uint i = 0u; i < 8u; i++) sum += c[i];
    uint total;
    const uint excl = wg_exscan(sum, total); // keys in buckets above this invocation's
    if (excl < rem && excl + sum >= rem) {   // the one invocation holding the rem-th largest key
        uint cum = excl;
        [[unroll]] for (uint i = 0u; i < 8u; i++) {
            if (cum < rem && cum + c[i] >= rem) {
                sh_bin = BINS - 1u - rk * 8u - i;
                sh_rem = rem - cum;
                sh_count = c[i];
            }
            cum += c[i];
        }
    }
    barrier();
    bin = sh_bin;
    bin_rem = sh_rem;
    bin_count = sh_count;
    barrier(); // sh_bin .. may be reused after this
}
#endif
