/* The planners of the Vulkan backend's attention ops (include/sift.h; the kernels in shaders/;
 * entries of vk_graph.c's table by op): score and score_max, vote, select, the attention of
 * gather_attend, dense_attend, causal_attend and causal_attend_sparse, and the selection's helpers
 * neighbor_fetch, sel_cache_check, fill_range and mean_rows, and kv_gather, which copies a
 * selection's K or V rows out of the cache. Their push constants are in
 * vk_push.h; the transformer ops' planners are in vk_model.c. */
#include "vk_push.h"

#include <string.h>

/* ---- score and attention: the row machinery of shaders/rows.glsl ---- */

typedef struct rowcfg {
    uint32_t wgs, lanes, gh, passes, rows, vp, ncl;
} rowcfg;

/* queries: how many queries share each K/V row (G for the decode ops; T * G for causal_attend).
 * rope: attend.comp rotating keys (rows.glsl partial_dots_rope) holds a second set of query values.
 * max_lanes: at most this many lanes per row (16; score_max: SIFT_VULKAN_TUNE=smax_lanes). */
static void row_config(const vkb *be, uint32_t d, bool f16, uint32_t queries, bool attend, bool rope, uint32_t max_lanes,
                       rowcfg *c)
{
    /* a row is vec 16-byte vectors (D a multiple of 8); lanes: a power of two up to 16 and the subgroup
     * size; when it does not divide vec, lanes past the row's end idle in the last slot: the most
     * lanes that keep 3/4 of them busy (16 for D = 120 in f16, 4 for D = 72) */
    const uint32_t vec = d * (f16 ? 2u : 4u) / 16u;
    uint32_t lanes = 1;
    for (uint32_t l = 2; l <= max_lanes && l <= be->caps.subgroup && l <= vec; l *= 2) {
        const uint32_t per = (vec + l - 1) / l;
        if (4 * vec >= 3 * l * per) lanes = l;
    }
    c->lanes = lanes;
    const uint32_t per = (vec + lanes - 1) / lanes, dpl = per * (f16 ? 8u : 4u);
    /* queries per pass: at most 8, and at most 64 query values per lane in registers (32 when keys are
     * rotated: the partners' values, g_qp, double them) */
    const uint32_t cap = min_u32(8, max_u32(1, (rope ? 32 : 64) / dpl));
    c->passes = (queries + cap - 1) / cap;
    c->gh = (queries + c->passes - 1) / c->passes;
    const vk_tune *t = &be->tune;
    if (attend)
        c->rows = t->attn_rows ? t->attn_rows : c->gh >= 8 ? 1 : c->gh >= 4 ? 2 : 4;
    else
        c->rows = t->score_rows ? t->score_rows : min_u32(8, max_u32(1, 16 / c->gh));
    c->rows = min_u32(c->rows, max_u32(1, 16 / per)); /* K (and V) vectors held per lane */
    c->vp = 1;
    while (c->vp < c->gh * c->rows) c->vp *= 2;
    /* The shapes measured on the H200 at full clocks (docs/benchmarks.md): 256 invocations for score;
     * 128 for attention, whose attend.comp holds about twice score.comp's registers, so that more
     * groups stay resident per multiprocessor (dense attention 17% faster at 32K than with 256) */
    c->wgs = attend ? (t->attn_wgs ? t->attn_wgs : 128) : (t->score_wgs ? t->score_wgs : 256);
    c->wgs = min_u32(c->wgs, be->caps.max_invocations); /* a power of two, as max_invocations is >= 256 */
    if (c->wgs < be->caps.subgroup) c->wgs = be->caps.subgroup;
    if (c->wgs < lanes) c->wgs = lanes;
    /* attend.comp's shared memory: NCL * D floats + 2 * NCL floats */
    while (attend && c->wgs > be->caps.subgroup && c->wgs > lanes &&
           (uint64_t)(c->wgs / lanes) * (d + 2) * 4 > be->caps.max_shared)
        c->wgs /= 2;
    c->ncl = c->wgs / lanes;
}

static void row_spec(const rowcfg *c, uint32_t d, bool f16, bool aligned, bool dense, uint32_t rope, uint32_t spec[VK_NSPEC])
{
    for (int i = 0; i < VK_NSPEC; i++) spec[i] = 0; /* the constants this kernel leaves alone: part of the pipeline key */
    spec[VK_SC_ROPE] = rope;
    spec[VK_SC_WGS] = c->wgs;
    spec[VK_SC_D] = d;
    spec[VK_SC_F16] = f16;
    spec[VK_SC_LANES] = c->lanes;
    spec[VK_SC_GH] = c->gh;
    spec[VK_SC_ROWS] = c->rows;
    spec[VK_SC_VP] = c->vp;
    spec[VK_SC_ALIGNED] = aligned;
    spec[VK_SC_DENSE] = dense;
}

/* Target number of workgroups for the streaming kernels (score_max's tiles, attention's splits):
 * fewer splits write and merge fewer partials. On the H200 at full clocks, with 128-invocation
 * attention groups, 512 took dense attention at 32K tokens from 83.1 us (1024) to 77.7 and the
 * TokenButler step at 128K from 113.8 to 104.8; 2048 was slower than both (sift bench-attn,
 * SIFT_VULKAN_TUNE=groups=N). */
static uint32_t target_groups(const vkb *be) { return be->tune.groups ? be->tune.groups : 512u; }

/* The device address of a predicated node's flag (sift_graph_skip_if), 0 for none: every dispatch of
 * score, vote, select and kv_gather reads it first and returns when it is non-zero (common.glsl skipped). */
static sift_status skip_flag(const sift_node *n, uint64_t *out)
{
    *out = 0;
    return n->skip ? vk_tensor_addr(n->skip, (uint64_t)n->skip_elem * 4u, out) : SIFT_OK;
}

/* score_max on short rows (D <= 32 by default: TokenButler's d' = 16 keys), score_max.comp: one
 * invocation per K row, the group's G queries staged once per workgroup in shared memory (G * D
 * floats), workgroups of 256 consecutive positions of one KV head, grid (position tiles, KV heads).
 * Each invocation moves its row (D * 2 or D * 4 bytes: 32 at d' = 16 in f16; an int8 cache D + 4:
 * 20) and writes 4 bytes. One tile per workgroup unless the grid limit (or SIFT_VULKAN_TUNE=groups)
 * caps the tiles; the workgroups then stride over them. Returns false (nothing planned) where the
 * kernel does not fit: D above the limit, or the queries beyond a quarter of the shared memory (a
 * huge group). An int8 cache (rows [Hkv][Ncap][D + 4], sift_dtype_size(SIFT_I8) = 1) runs here at
 * every D and ignores smax_stream (score.comp has no int8 rows); its queries may fill the shared
 * memory, and past that the node is refused. */
static bool plan_score_max_stream(plan *pl, const sift_node *n, sift_status *st)
{
    vkb *be = vk_plan_backend(pl);
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const uint32_t hq = (uint32_t)q->shape[0], hkv = (uint32_t)k->shape[0], d = (uint32_t)q->shape[1];
    const uint32_t group = hq / hkv, m = (uint32_t)(n->p.end - n->p.begin);
    const uint32_t dmax = be->tune.smax_stream ? be->tune.smax_stream : 32u;
    const bool i8 = k->dtype == SIFT_I8;
    if (i8) {
        if ((uint64_t)group * d * 4 > be->caps.max_shared) {
            *st = sift_set_error(SIFT_E_UNSUPPORTED,
                                 "vulkan: score_max: %u queries of %u values per KV head exceed the shared memory "
                                 "(%u bytes) of the int8 kernel",
                                 group, d, be->caps.max_shared);
            return true;
        }
    } else if (d > dmax || (uint64_t)group * d * 4 > be->caps.max_shared / 4) {
        return false;
    }
    const bool f16 = vk_tensor_is_f16(k);
    const uint32_t wgs = max_u32(min_u32(be->tune.score_wgs ? be->tune.score_wgs : 256u, be->caps.max_invocations),
                                 be->caps.subgroup);
    push_score ps = {.begin = (uint32_t)n->p.begin, .m = m, .group = group, .tiles = ceil_div(m, wgs), .scale = n->p.scale};
    uint32_t spec[VK_NSPEC] = {0};
    spec[VK_SC_WGS] = wgs;
    spec[VK_SC_D] = d;
    spec[VK_SC_F16] = f16;
    spec[VK_SC_GH] = group;
    spec[VK_SC_ALIGNED] = !i8 && vk_rows_aligned(k);
    spec[VK_SC_I8] = i8;
    uint32_t gx = min_u32(ps.tiles, be->caps.max_groups[0]);
    if (be->tune.groups) gx = min_u32(gx, max_u32(1, be->tune.groups / hkv));
    if ((*st = vk_tensor_ref(q, &ps.q)) != SIFT_OK || (*st = vk_kv_ref(be, k, &ps.k)) != SIFT_OK ||
        (*st = vk_tensor_ref(n->dst, &ps.s)) != SIFT_OK || (*st = skip_flag(n, &ps.skip)) != SIFT_OK)
        return true;
    if (i8 && (ps.k.t.meta & 3u) != 0) { /* rows are read as 32-bit words */
        *st = sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: score_max: the i8 cache '%s' does not start on a 4-byte boundary",
                             k->name);
        return true;
    }
    *st = vk_dispatch(pl, VK_K_SCORE_MAX, spec, &ps, sizeof ps, gx, hkv, 1);
    return true;
}

/* score and score_max (score.comp, GMAX): the same rows and dot products; score_max keeps each row's
 * max over the group's heads in registers (its workgroups run every pass, grid z = 1) and writes
 * [Hkv][m]. Short rows of score_max go to score_max.comp instead (plan_score_max_stream).
 * SIFT_VULKAN_TUNE=smax_lanes=n caps the lanes per row of score_max here (a comparison on real GPUs;
 * smax_stream=1 sends every D here). */
sift_status vk_plan_score(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const uint32_t hq = (uint32_t)q->shape[0], hkv = (uint32_t)k->shape[0], d = (uint32_t)q->shape[1];
    const uint32_t m = (uint32_t)(n->p.end - n->p.begin);
    if (m == 0) return SIFT_OK;
    const bool f16 = vk_tensor_is_f16(k), gmax = n->op == SIFT_OP_SCORE_MAX;
    sift_status st;
    if (gmax && plan_score_max_stream(pl, n, &st)) return st;
    rowcfg c;
    const uint32_t smax_lanes = be->tune.smax_lanes ? be->tune.smax_lanes : 16u;
    row_config(be, d, f16, hq / hkv, false, false, gmax ? smax_lanes : 16u, &c);
    push_score ps = {.begin = (uint32_t)n->p.begin,
                     .m = m,
                     .group = hq / hkv,
                     .tiles = ceil_div(m, (uint64_t)c.ncl * c.rows),
                     .scale = n->p.scale};
    TRY(vk_tensor_ref(q, &ps.q));
    TRY(vk_kv_ref(be, k, &ps.k));
    TRY(vk_tensor_ref(n->dst, &ps.s));
    TRY(skip_flag(n, &ps.skip));
    uint32_t spec[VK_NSPEC];
    row_spec(&c, d, f16, vk_rows_aligned(k), false, 0, spec);
    spec[VK_SC_GMAX] = gmax;
    const uint32_t gz = gmax ? 1 : c.passes;
    const uint32_t gx = min_u32(min_u32(ps.tiles, max_u32(1, 2 * target_groups(be) / (hkv * gz))), be->caps.max_groups[0]);
    return vk_dispatch(pl, VK_K_SCORE, spec, &ps, sizeof ps, gx, hkv, gz);
}

/* gather_attend (with rotated keys or not), dense_attend, causal_attend and causal_attend_sparse: one
 * split-K kernel (attend.comp) and its merge. Causal attention is dense attention for T * G queries
 * per KV head, the query of token t over positions [0, pos0 + t]; sparse causal attention walks the
 * list, then positions pos0, pos0 + 1, ..., the query of token t over the list and [pos0, pos0 + t].
 * K and V (paged or not) travel in a parameter block in the scratch (their KVRefs exceed the push
 * constants), written by the command buffer at the start of every run. */
sift_status vk_plan_attend(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const sift_attend_walk *w = &n->p.walk; /* the list, then a range (engine/backend.h) */
    const sift_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *idx = n->n_src > 3 ? n->src[3] : NULL;
    const uint32_t tokens = (uint32_t)w->tokens, nlist = (uint32_t)w->list_len, len = (uint32_t)w->n;
    const uint32_t hq = (uint32_t)q->shape[q->ndim - 2], d = (uint32_t)q->shape[q->ndim - 1];
    const uint32_t hkv = (uint32_t)k->shape[0], group = hq / hkv;
    if (tokens == 0) return SIFT_OK;
    const bool f16 = vk_tensor_is_f16(k); /* v is stored alike: the same type in one context */
    const bool rope = n->p.rope_keys;
    rowcfg c;
    row_config(be, d, f16, tokens * group, true, rope, 16, &c);
    const uint32_t per_step = c.ncl * c.rows, steps = ceil_div(len, per_step);
    uint32_t nsplit = min_u32(steps, min_u32(max_u32(1, target_groups(be) / max_u32(1, hkv * c.passes)),
                                             be->caps.max_groups[0]));
    uint32_t cs = 0;
    if (nsplit > 0) {
        cs = ceil_div(steps, nsplit) * per_step;
        nsplit = ceil_div(len, cs);
    }
    const uint64_t qrows = (uint64_t)tokens * hq;
    const VkDeviceSize ml = vk_scratch_take(pl, (VkDeviceSize)qrows * nsplit * 8);
    const VkDeviceSize po = vk_scratch_take(pl, (VkDeviceSize)qrows * nsplit * d * 4);
    const VkDeviceSize prm = vk_scratch_take(pl, sizeof(attend_params));

    attend_params ap;
    memset(&ap, 0, sizeof ap);
    TRY(vk_kv_ref(be, k, &ap.k));
    TRY(vk_kv_ref(be, v, &ap.v));
    /* one lookup per row when v's rows lie where k's do (the same rows, pool layout and page table) */
    ap.same = ap.k.rows == ap.v.rows && ap.k.prow == ap.v.prow && ap.k.pshift == ap.v.pshift &&
              ap.k.npages == ap.v.npages && ap.k.pages.addr == ap.v.pages.addr && ap.k.pages.meta == ap.v.pages.meta;
    if (rope) {
        ap.n_rot = (uint32_t)n->p.rope.n_rot;
        memcpy(ap.freq, n->p.rope_freq, (size_t)(n->p.rope.n_rot / 2) * sizeof *ap.freq);
    }
    TRY(vk_scratch_update(pl, prm, &ap, sizeof ap));

    push_attend pa = {.prm = vk_scratch_addr(pl, prm),
                      .ml = vk_scratch_addr(pl, ml),
                      .po = vk_scratch_addr(pl, po),
                      .n = len,
                      .nlist = nlist,
                      .start = (uint32_t)w->range0,
                      .group = group,
                      .nsplit = nsplit,
                      .cs = cs,
                      .lists = idx ? (uint32_t)idx->shape[0] : 1,
                      .scale = n->p.scale,
                      .lim0 = len - (tokens - 1u), /* the entries of query row 0 */
                      .hq = hq,
                      .nq = tokens * group};
    TRY(vk_tensor_ref(q, &pa.q));
    if (idx) TRY(vk_tensor_ref(idx, &pa.idx));
    uint32_t spec[VK_NSPEC];
    row_spec(&c, d, f16, vk_rows_aligned(k) && vk_rows_aligned(v), !idx,
             rope ? (n->p.rope.mode == SIFT_ROPE_NEOX ? 2u : 1u) : 0u, spec);
    /* passes beyond the device's grid z limit go in several dispatches */
    for (uint32_t p0 = 0; p0 < c.passes; p0 += be->caps.max_groups[2]) {
        pa.pass0 = p0;
        TRY(vk_dispatch(pl, VK_K_ATTEND, spec, &pa, sizeof pa, nsplit, hkv, min_u32(c.passes - p0, be->caps.max_groups[2])));
    }

    push_attend_merge pm = {.ml = pa.ml, .po = pa.po, .nsplit = nsplit};
    TRY(vk_tensor_ref(n->dst, &pm.out));
    uint32_t mspec[VK_NSPEC] = {0};
    mspec[VK_SC_D] = d;
    for (uint64_t r0 = 0; r0 < qrows; r0 += be->caps.max_groups[0]) {
        pm.row0 = (uint32_t)r0;
        const uint64_t left = qrows - r0;
        TRY(vk_dispatch(pl, VK_K_ATTEND_MERGE, mspec, &pm, sizeof pm,
                        (uint32_t)(left < be->caps.max_groups[0] ? left : be->caps.max_groups[0]), ceil_div(d, 32), 1));
    }
    return SIFT_OK;
}

/* ---- vote ---- */

sift_status vk_plan_vote(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const sift_tensor *sc = n->src[0];
    const uint32_t hq = (uint32_t)sc->shape[0], m = (uint32_t)sc->shape[1];
    if (m == 0) return SIFT_OK;
    const uint32_t tiles = ceil_div(m, 256), gx = min_u32(tiles, be->caps.max_groups[0]);
    const uint32_t none[VK_NSPEC] = {0};
    uint64_t skip;
    TRY(skip_flag(n, &skip));
    if (n->p.vote == SIFT_VOTE_KVHEAD_MAX) {
        const uint32_t hkv = (uint32_t)n->dst->shape[0];
        push_vote_max pv = {.skip = skip, .m = m, .group = hq / hkv, .tiles = tiles};
        TRY(vk_tensor_ref(sc, &pv.s));
        TRY(vk_tensor_ref(n->dst, &pv.u));
        return vk_dispatch(pl, VK_K_VOTE_MAX, none, &pv, sizeof pv, gx, hkv, 1);
    }
    uint32_t items = 4;
    while (ceil_div(m, 256ull * items) > 4096) items *= 2;
    const uint32_t nblocks = ceil_div(m, 256ull * items);
    const VkDeviceSize part = vk_scratch_take(pl, (VkDeviceSize)hq * nblocks * 8);
    const VkDeviceSize stats = vk_scratch_take(pl, (VkDeviceSize)hq * 8);

    push_vote_stats p1 = {.part = vk_scratch_addr(pl, part), .skip = skip, .m = m, .items = items, .nblocks = nblocks};
    TRY(vk_tensor_ref(sc, &p1.s));
    TRY(vk_dispatch(pl, VK_K_VOTE_STATS, none, &p1, sizeof p1, nblocks, hq, 1));
    push_vote_merge p2 = {.part = p1.part, .stats = vk_scratch_addr(pl, stats), .skip = skip, .nblocks = nblocks};
    TRY(vk_dispatch(pl, VK_K_VOTE_MERGE, none, &p2, sizeof p2, hq, 1, 1));
    push_vote_sum p3 = {.stats = p2.stats, .skip = skip, .m = m, .hq = hq, .tiles = tiles};
    TRY(vk_tensor_ref(sc, &p3.s));
    TRY(vk_tensor_ref(n->dst, &p3.v));
    return vk_dispatch(pl, VK_K_VOTE_SUM, none, &p3, sizeof p3, gx, 1, 1);
}

/* ---- select ---- */

/* select (select.glsl): grid (block, list) for every kernel, per-list histograms and state, so the
 * lists of a node run side by side. The block size follows the lists: the smallest power of two of
 * items (candidates per invocation) that keeps lists x blocks within select_groups (1024 unless
 * SIFT_VULKAN_TUNE says otherwise: about one wave of 256-invocation workgroups on the H200). A
 * workgroup's fixed costs (its digit scan, the block prefix of the compaction, barriers, the
 * latency of its first loads) do not grow with its items, so 8 lists of |C| cost about what one
 * list of 8 |C| costs instead of 8 waves of them (1M candidates: 1024 blocks of 1024 for one list,
 * 128 blocks of 8192 per list for 8). Invocations load their items in batches of 8 before using
 * any. Steps: 4 x select_hist, select_count, select_compact; the histograms are zero when a run
 * starts (the scratch is zeroed when the recording is built; pass 0 clears passes 1..3, the
 * compaction pass 0), so no fill step either.
 *
 * With a warm start (sift_op_select_warm: the node's second input; select.glsl's header), when
 * SIFT_VULKAN_TUNE has select_warm=1 (off by default: on an H100, one list of 128K candidates took
 * 54.0 us warm against 38.5 selecting in full, 8 lists 58.3 against 57.7, every warm run a hit), and
 * 0 < chosen < |C| and chosen + chosen / 4 <= CAP / 2, select_warm_collect and select_warm_tail run
 * first, and the six radix dispatches run only for the lists the tail missed (each of their
 * workgroups reads its list's miss flag and returns when it is 0). Every step of a node is
 * followed by a barrier (vk_graph.c record()), so collect, tail and the fallback see each other's
 * writes to warm and the scratch in that order. Other nodes with warm run as without it and leave it alone. */

/* CAP: the entries a list's warm start holds (the keys at or above its threshold; more: a miss). */
#define SELECT_WARM_CAP 8192u
/* The most collect blocks per list (select_warm_tail.comp NBW). */
#define SELECT_WARM_BLOCKS 1024u
/* select_warm_tail's shared memory besides its keys: the block prefix and chunk starts
 * (2 x SELECT_WARM_BLOCKS uints), the radix histogram and select.glsl's scan (2 x 256 uints), a few
 * words; rounded up. */
#define SELECT_WARM_SHARED_FIXED 12288u
sift_status vk_plan_select(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const sift_select_layout *l = &n->p.layout;
    const uint32_t lists = (uint32_t)n->dst->shape[0];
    if (l->count == 0) return SIFT_OK;
    const uint64_t cand = (uint64_t)l->cand;
    const uint32_t mode = l->chosen == 0 ? 2u : l->chosen == l->cand ? 1u : 0u;
    const uint64_t target = be->tune.select_groups ? be->tune.select_groups : 1024u;
    uint32_t items = 1;
    while (ceil_div(cand, 256ull * items) > 1 && (uint64_t)lists * ceil_div(cand, 256ull * items) > target) items *= 2;
    const uint32_t nblocks = max_u32(1, ceil_div(cand, 256ull * items));
    const uint32_t cap = SELECT_WARM_CAP;
    const bool warm = be->tune.select_warm && n->n_src > 1 && n->src[1] && mode == 0 &&
                      (uint64_t)l->chosen + (uint64_t)l->chosen / 4 <= cap / 2;
    const VkDeviceSize hist = mode == 0 ? vk_scratch_take(pl, (VkDeviceSize)lists * 4 * 256 * 4) : 0;
    const VkDeviceSize state = mode == 0 ? vk_scratch_take(pl, (VkDeviceSize)lists * 4 * 8) : 0;
    /* also the warm chunks (collect's blocks are never more than the radix ones) */
    const VkDeviceSize counts = mode == 0 ? vk_scratch_take(pl, (VkDeviceSize)lists * nblocks * 8) : 0;
    /* ctl uvec4 [lists] (miss flag, counter: zero in the zeroed scratch, reset by every tail), then
     * the entries uvec2 [lists][CAP] */
    const VkDeviceSize wbuf = warm ? vk_scratch_take(pl, (VkDeviceSize)lists * 16 + (VkDeviceSize)lists * cap * 8) : 0;

    push_select ps = {.hist = mode == 0 ? vk_scratch_addr(pl, hist) : 0,
                      .state = mode == 0 ? vk_scratch_addr(pl, state) : 0,
                      .counts = mode == 0 ? vk_scratch_addr(pl, counts) : 0,
                      .wbuf = warm ? vk_scratch_addr(pl, wbuf) : 0,
                      .cand = (uint32_t)l->cand,
                      .chosen = (uint32_t)l->chosen,
                      .items = items,
                      .nblocks = nblocks,
                      .sink = (uint32_t)l->sink,
                      .first = (uint32_t)l->first,
                      .win_begin = (uint32_t)l->win_begin,
                      .win_count = (uint32_t)l->win_count,
                      .mode = mode};
    if (cand > 0) TRY(vk_tensor_ref(n->src[0], &ps.votes));
    if (warm) TRY(vk_tensor_ref(n->src[1], &ps.warm));
    TRY(skip_flag(n, &ps.skip));
    TRY(vk_tensor_ref(n->dst, &ps.out));
    const uint32_t none[VK_NSPEC] = {0};
    if (warm) {
        /* collect's blocks: the radix ones, coarsened to at most SELECT_WARM_BLOCKS per list (the
         * tail holds a prefix over them in shared memory) */
        push_select pw = ps;
        while (pw.nblocks > SELECT_WARM_BLOCKS) {
            pw.items *= 2;
            pw.nblocks = ceil_div(cand, 256ull * pw.items);
        }
        /* select_warm_*.comp's CAP (constant_id 0), and select_warm_tail's SHK (1): CAP when CAP keys
         * fit the shared memory with the rest of the kernel's (48 KB: NVIDIA), else 1 (lavapipe's
         * 32 KB): the radix selects then read the keys from the entries */
        uint32_t wspec[VK_NSPEC] = {0};
        wspec[0] = cap;
        wspec[1] = (uint64_t)cap * 4 + SELECT_WARM_SHARED_FIXED <= be->caps.max_shared ? cap : 1;
        TRY(vk_dispatch(pl, VK_K_SELECT_WARM_COLLECT, wspec, &pw, sizeof pw, pw.nblocks, lists, 1));
        TRY(vk_dispatch(pl, VK_K_SELECT_WARM_TAIL, wspec, &pw, sizeof pw, 1, lists, 1));
    }
    if (mode == 0) {
        for (uint32_t pass = 0; pass < 4; pass++) {
            ps.pass = pass;
            TRY(vk_dispatch(pl, VK_K_SELECT_HIST, none, &ps, sizeof ps, nblocks, lists, 1));
        }
        TRY(vk_dispatch(pl, VK_K_SELECT_COUNT, none, &ps, sizeof ps, nblocks, lists, 1));
    }
    return vk_dispatch(pl, VK_K_SELECT_COMPACT, none, &ps, sizeof ps, mode == 2 ? 1 : nblocks, lists, 1);
}

/* Dispatches kernel once for every max_groups[1] of `lists` lists (grid y: a list each), *l0 (a
 * field of the push constants at push) set to each dispatch's first list. */
static sift_status dispatch_lists(plan *pl, vk_kernel kernel, void *push, size_t push_size, uint32_t *l0, uint32_t gx,
                                  int64_t lists)
{
    const uint32_t most = vk_plan_backend(pl)->caps.max_groups[1], none[VK_NSPEC] = {0};
    for (int64_t first = 0; first < lists; first += most) {
        *l0 = (uint32_t)first;
        const int64_t left = lists - first;
        TRY(vk_dispatch(pl, kernel, none, push, push_size, gx, (uint32_t)(left < most ? left : most), 1));
    }
    return SIFT_OK;
}

/* TokenButler's neighbour fetch: one invocation per output entry (neighbor_fetch.comp). */
sift_status vk_plan_neighbor_fetch(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const sift_select_layout *l = &n->p.layout;
    const int64_t lists = n->dst->shape[0], len = n->dst->shape[1];
    if (lists == 0 || len == 0) return SIFT_OK;
    if (len > UINT32_MAX - 256)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: neighbor_fetch over lists of %lld entries", (long long)len);
    push_neighbor_fetch p = {.sink = (uint32_t)l->sink,
                             .chosen = (uint32_t)l->chosen,
                             .count = (uint32_t)l->count,
                             .cand_end = l->first + l->cand};
    TRY(vk_tensor_ref(n->src[0], &p.in));
    TRY(vk_tensor_ref(n->dst, &p.out));
    const uint32_t gx = min_u32(ceil_div((uint64_t)len, 256), min_u32(1024, be->caps.max_groups[0]));
    return dispatch_lists(pl, VK_K_NEIGHBOR_FETCH, &p, sizeof p, &p.l0, gx, lists);
}

/* kv_gather (kv_gather.comp): one invocation per unit of an output row, grid (tiles, KV heads). The
 * units are 16-byte vectors where every row of the cache (both pools) and of out starts 16-byte
 * aligned, else 32-bit words: every stored row is a multiple of 4 bytes (D a multiple of 8), but a
 * view that starts 2 bytes in leaves no whole word, and is refused. The rows go to out's columns
 * [col0, col0 + count); a predicated node's dispatches read the flag first (skip_flag). */
sift_status vk_plan_kv_gather(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const sift_tensor *idx = n->src[0], *kv = n->src[1];
    const int64_t hkv = kv->shape[0], count = idx->shape[1];
    if (count == 0) return SIFT_OK;
    /* as stored: f16 widened to f32 where the device has no 16-bit storage (out alike: the same type) */
    const uint32_t elem = kv->dtype == SIFT_F16 && !vk_tensor_is_f16(kv) ? 4u : (uint32_t)sift_dtype_size(kv->dtype);
    const uint32_t row_bytes = (uint32_t)kv->shape[2] * elem;
    const bool aligned = row_bytes % 16 == 0 && vk_rows_aligned(kv) && vk_rows_aligned(n->dst);
    push_kv_gather p = {.count = (uint32_t)count,
                        .units = row_bytes / (aligned ? 16u : 4u),
                        .lists = (uint32_t)idx->shape[0],
                        .ocount = (uint32_t)n->dst->shape[1], /* below 2^31 (sift_op_kv_gather_at) */
                        .col0 = (uint32_t)n->p.col0};
    TRY(skip_flag(n, &p.skip));
    if ((uint64_t)count * p.units > UINT32_MAX - (1u << 20))
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: kv_gather of %lld rows of %u bytes", (long long)count, row_bytes);
    TRY(vk_tensor_ref(idx, &p.idx));
    TRY(vk_tensor_ref(n->dst, &p.out));
    TRY(vk_kv_ref(be, kv, &p.kv));
    const sift_tensor *ends[2] = {kv, n->dst}; /* whole words: neither may start 2 bytes into a word */
    const uint64_t starts[2] = {p.kv.t.meta & 3u, p.out.meta & 3u};
    for (int i = 0; i < 2; i++)
        if (starts[i] != 0)
            return sift_set_error(SIFT_E_UNSUPPORTED,
                                  "vulkan: kv_gather: %s '%s' does not start on a 4-byte boundary (the kernel copies 32-bit words)",
                                  i ? "out" : "kv", ends[i]->name[0] ? ends[i]->name : "(unnamed)");
    uint32_t spec[VK_NSPEC] = {0};
    spec[VK_SC_ALIGNED] = aligned;
    const uint32_t gx = min_u32(ceil_div((uint64_t)count * p.units, 256), min_u32(1024, be->caps.max_groups[0]));
    const uint32_t most = be->caps.max_groups[1]; /* grid y: a KV head each, several dispatches beyond the limit */
    for (int64_t g0 = 0; g0 < hkv; g0 += most) {
        p.g0 = (uint32_t)g0;
        TRY(vk_dispatch(pl, VK_K_KV_GATHER, spec, &p, sizeof p, gx, (uint32_t)(hkv - g0 < most ? hkv - g0 : most), 1));
    }
    return SIFT_OK;
}

/* ---- saving work between steps (SPEC §4, §7) ---- */

sift_status vk_plan_sel_cache(plan *pl, const sift_node *n)
{
    const sift_tensor *q = n->src[0];
    const uint64_t qn = (uint64_t)q->shape[0] * (uint64_t)q->shape[1];
    if (qn > UINT32_MAX - SIFT_SEL_CACHE_EXTRA)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: sel_cache_check over %llu query values", (unsigned long long)qn);
    push_sel_cache p = {.qn = (uint32_t)qn, .theta = n->p.theta, .full = n->p.full != 0};
    TRY(vk_tensor_ref(q, &p.q));
    TRY(vk_tensor_ref(n->dst, &p.st));
    const uint32_t none[VK_NSPEC] = {0};
    return vk_dispatch(pl, VK_K_SEL_CACHE, none, &p, sizeof p, 1, 1, 1);
}

sift_status vk_plan_fill_range(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const int64_t lists = n->dst->shape[0], len = n->dst->shape[1];
    if (lists == 0 || len - n->p.col0 <= 0) return SIFT_OK;
    push_fill_range p = {.n = (uint32_t)len,
                         .col0 = (uint32_t)n->p.col0,
                         .width = (uint32_t)(len - n->p.col0),
                         .start = (uint32_t)n->p.start};
    TRY(vk_tensor_ref(n->dst, &p.out));
    const uint32_t gx = min_u32(ceil_div(p.width, 256), min_u32(1024, be->caps.max_groups[0]));
    return dispatch_lists(pl, VK_K_FILL_RANGE, &p, sizeof p, &p.l0, gx, lists);
}

sift_status vk_plan_mean_rows(plan *pl, const sift_node *n)
{
    vkb *be = vk_plan_backend(pl);
    const sift_tensor *x = n->src[0];
    const uint64_t e = (uint64_t)x->shape[1];
    if (e == 0) return SIFT_OK;
    if (e > UINT32_MAX - 256 || (uint64_t)x->shape[0] > UINT32_MAX)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: mean_rows of %lld x %llu values", (long long)x->shape[0],
                              (unsigned long long)e);
    push_mean_rows p = {.rows = (uint32_t)x->shape[0], .e = (uint32_t)e};
    TRY(vk_tensor_ref(x, &p.x));
    TRY(vk_tensor_ref(n->dst, &p.out));
    const uint32_t none[VK_NSPEC] = {0};
    const uint64_t groups = (e + 255) / 256;
    const uint32_t gx = (uint32_t)(groups < be->caps.max_groups[0] ? groups : be->caps.max_groups[0]);
    const uint64_t gy = (groups + gx - 1) / gx;
    if (gy > be->caps.max_groups[1]) return sift_set_error(SIFT_E_LIMIT, "vulkan: mean_rows over %llu columns", (unsigned long long)e);
    return vk_dispatch(pl, VK_K_MEAN_ROWS, none, &p, sizeof p, gx, (uint32_t)gy, 1);
}

