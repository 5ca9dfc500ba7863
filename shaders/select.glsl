// select (docs/kernels.md): radix select over the order key of the votes, 8 bits at a time from the
// top, then a stable compaction in position order. Shared by select_hist, select_count and
// select_compact. Workgroups of 256; an invocation's rank (its place in subgroup order) numbers the
// histogram buckets and the elements, so scans need no assumption on how invocations map to subgroups.

layout(local_size_x = 256) in;

layout(push_constant) uniform PC {
    TRef votes;       // f32 [lists][cand]
    TRef out_;        // i32 [lists][count]
    uint64_t hist;    // uint [lists][4][256]: pass p's histogram of the keys matching passes < p
    uint64_t counts;  // uvec2 [lists][nblocks]: per block, keys > T and keys == T
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
    uint pass;        // select_hist: which byte (0 = the top one)
    uint mode;        // select_compact: 0 radix, 1 take every candidate, 2 take none
} pc;

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

uint key_at(uint l, uint j) { return order_key(ld_u32(pc.votes, uint64_t(l) * pc.cand + j)); }

// Replays passes [0, passes) of list l's histograms: prefix = the top 8 * passes bits of the
// chosen-th largest key T; rem = how many of the keys with that prefix are still to be taken.
void derive(uint l, uint passes, out uint prefix, out uint rem)
{
    const uint rk = rank_();
    if (rk == 0u) { sh_prefix = 0u; sh_rem = pc.chosen; }
    barrier();
    for (uint p = 0u; p < passes; p++) {
        const uint b = 255u - rk; // rank order runs from the top bucket down: a prefix scan is a suffix sum
        const uint c = U32Ref(pc.hist + ((uint64_t(l) * 4u + p) * 256u + b) * 4ul).v;
        uint total;
        const uint excl = wg_exscan(c, total); // keys in buckets above b
        const uint r = sh_rem;
        barrier();
        if (excl < r && excl + c >= r) {
            sh_prefix |= b << (24u - 8u * p);
            sh_rem = r - excl;
        }
        barrier();
    }
    prefix = sh_prefix;
    rem = sh_rem;
    barrier();
}
