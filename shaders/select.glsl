// select (docs/kernels.md): radix select over the order key of the votes, then a stable compaction
// in position order. Shared by select_range, select_top, select_filter, select_refine, select_count
// and select_compact (cuda/select.cu is the same algorithm). Only the first pass reads every
// candidate to count, into 2048 bins spread over the keys' range (select_range: the range of 4096
// evenly spread candidates' keys; keys outside it fall in the first or the last bin), since votes
// are often concentrated in a fraction of an octave where the top bits of the keys barely differ.
// select_filter copies the positions of the keys in the chosen-th largest's bin to a per-list
// buffer, and the exact key is found over that copy in digits of 11, 11 and 10 bits. Every list is its own row of workgroups (grid (block, list)) with its
// own histograms and state, so the lists of one node (TokenButler's one per KV head) run side by
// side. The full passes size their blocks from the lists: about pc.nblocks * lists ~ 1024
// workgroups in all. select_refine and select_count run up to 32 workgroups per list over the
// buffer. Workgroups of 256; an invocation's rank (its place in subgroup order) numbers the
// histogram buckets and the elements, so scans need no assumption on how invocations map to
// subgroups.
//
// Scratch, per list:
//   zeroed part (pc.hist): hist [4][lists][2048], tickets [4][lists], nbuf [lists]. Zero when a run
//         starts: the graph's scratch is zeroed once when it is made, and each run's last user
//         clears them again (the last workgroup of each histogram kernel reads and clears its
//         histogram and ticket; select_compact clears nbuf).
//   state [lists] (12 uints): lowest, shift (select_range: bin(key) = (key - lowest) >> shift,
//         clamped), b0, rem0 (select_top: T's bin, keys of it still to take), prefix, rem1
//         (select_filter: T's top 11 bits, keys with them still to take; select_refine 1: its top
//         22), t, rem (select_refine 2: T, keys == T to take), buffered (bin b0 fitted in the
//         buffer).
//   counts [lists][nblocks] uvec2: per block of the full passes, keys > T and keys == T.
//   buf   [lists][cap]: candidate indices of bin b0 (not written when the bin holds more than cap:
//         select_refine and select_count then read every candidate, filtered by the prefix).

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
    uint items;       // elements per invocation per block of the full passes (256 * items candidates)
    uint nblocks;
    uint sink;        // min(S, N): positions [0, sink) lead every list
    uint first;       // S: candidate j is position S + j
    uint win_begin;   // max(S, N - W)
    uint win_count;   // N - win_begin
    uint count;       // entries per list: sink + chosen + win_count
    uint cap;         // buffer entries per list
    uint mode;        // select_compact: 0 radix, 1 take every candidate, 2 take none
    uint pass;        // select_refine: 1 (bits 20..10) or 2 (bits 9..0)
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

uint lists_() { return gl_NumWorkGroups.y; }
uint64_t hist_addr(uint l, uint p) { return pc.hist + (uint64_t(p) * lists_() + l) * BINS * 4ul; }
uint64_t ticket_addr(uint l, uint p) { return pc.hist + (uint64_t(4u * BINS) * lists_() + p * lists_() + l) * 4ul; }
uint64_t nbuf_addr(uint l) { return pc.hist + (uint64_t(4u * BINS + 4u) * lists_() + l) * 4ul; }
const uint ST_LOWEST = 0u, ST_SHIFT = 1u, ST_B0 = 2u, ST_REM0 = 3u, ST_PREFIX = 4u, ST_REM1 = 5u, ST_T = 6u, ST_REM = 7u,
           ST_BUFFERED = 8u, ST_UINTS = 12u;
uint64_t state_addr(uint l, uint field) { return pc.state + (uint64_t(l) * ST_UINTS + field) * 4ul; }
uint state_get(uint l, uint field) { return U32Ref(state_addr(l, field)).v; }
void state_set(uint l, uint field, uint v) { U32Ref(state_addr(l, field)).v = v; }

// The bin of a key in select_top and select_filter (lowest, shift: list l's from select_range).
uint bin_of(uint lowest, uint shift, uint key)
{
    if (key <= lowest) return 0u;
    return min((key - lowest) >> shift, BINS - 1u);
}

#ifdef SELECT_HISTOGRAM // the histogram kernels (select_top, select_filter, select_refine)
shared uint sh_hist[BINS];
shared uint sh_bin, sh_rem, sh_count;
shared bool sh_last;

void hist_clear()
{
    for (uint i = rank_(); i < BINS; i += 256u) sh_hist[i] = 0u;
}

// Adds one to bucket b (NO_BIN: nothing) of the shared histogram. The whole subgroup calls it.
void hist_add(uint b)
{
    if (subgroupAllEqual(b)) { // common in the top digit: one atomic for the subgroup
        const uint n = subgroupBallotBitCount(subgroupBallot(true));
        if (b < NO_BIN && subgroupElect()) atomicAdd(sh_hist[b], n);
    } else if (b < NO_BIN) {
        atomicAdd(sh_hist[b], 1u);
    }
}

// The whole workgroup, its shared histogram complete: adds it to histogram p of list l; true in
// the workgroup that finished last (of the dispatch's row l), which then sees every workgroup's
// counts. That one resets the ticket.
bool flush_is_last(uint l, uint p)
{
    barrier();
    const uint64_t g = hist_addr(l, p);
    for (uint i = rank_(); i < BINS; i += 256u) {
        const uint c = sh_hist[i];
        if (c != 0u) atomicAdd(U32Ref(g + i * 4ul).v, c);
    }
    memoryBarrier(); // this workgroup's counts before its ticket
    barrier();
    if (rank_() == 0u) {
        sh_last = atomicAdd(U32Ref(ticket_addr(l, p)).v, 1u) == gl_NumWorkGroups.x - 1u;
        if (sh_last) U32Ref(ticket_addr(l, p)).v = 0u;
    }
    barrier();
    memoryBarrier();
    return sh_last;
}

// The whole (last) workgroup: in histogram p of list l (read and cleared with atomics, which see
// every other workgroup's additions) the bucket holding the rem-th largest key, the keys of that
// bucket still to take, and its count. Rank order runs from the top bucket down: invocation r
// holds buckets BINS-1-8r .. BINS-8-8r, so a prefix scan is a suffix sum.
void pick_bin(uint l, uint p, uint rem, out uint bin, out uint bin_rem, out uint bin_count)
{
    const uint rk = rank_();
    const uint64_t g = hist_addr(l, p);
    uint c[8], sum = 0u;
    [[unroll]] for (uint i = 0u; i < 8u; i++) {
        c[i] = atomicExchange(U32Ref(g + (BINS - 1u - rk * 8u - i) * 4ul).v, 0u);
        sum += c[i];
    }
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
}
#endif

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

// select_refine and select_count: candidate i of list l's bin b0 (i < bin0_size), its index j and
// key; false when it is not in bin b0 (only when not buffered: then every candidate is visited).
uint bin0_size(uint l) { return state_get(l, ST_BUFFERED) != 0u ? U32Ref(nbuf_addr(l)).v : pc.cand; }
bool bin0_at(uint l, uint i, out uint j, out uint key)
{
    const bool buffered = state_get(l, ST_BUFFERED) != 0u;
    j = buffered ? U32Ref(pc.buf + (uint64_t(l) * pc.cap + i) * 4ul).v : i;
    key = key_at(l, j);
    return buffered || bin_of(state_get(l, ST_LOWEST), state_get(l, ST_SHIFT), key) == state_get(l, ST_B0);
}
