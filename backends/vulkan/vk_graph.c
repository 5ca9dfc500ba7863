/* The Vulkan backend's graphs: one compute pipeline per kernel and specialization, a plan of
 * dispatches per node (docs/kernels.md), the whole graph recorded into one command buffer (cached
 * in g->backend_cache until the graph changes), submitted once per compute.
 *
 * Per-dispatch parameters travel as push constants (<= 128 bytes): tensors as vk_tref (address +
 * chunk shift + view offset, shaders/common.glsl), scratch as raw device addresses. Scratch (vote
 * partials, radix histograms and block counts, attention partials) is one buffer owned by the
 * graph's recording.
 */
#include "vk_internal.h"

#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/attend_merge_spv.h"
#include "backends/vulkan/attend_spv.h"
#include "backends/vulkan/score_max_spv.h"
#include "backends/vulkan/score_spv.h"
#include "backends/vulkan/select_compact_spv.h"
#include "backends/vulkan/select_count_spv.h"
#include "backends/vulkan/select_hist_spv.h"
#include "backends/vulkan/select_warm_collect_spv.h"
#include "backends/vulkan/select_warm_tail_spv.h"
#include "backends/vulkan/vote_max_spv.h"
#include "backends/vulkan/vote_merge_spv.h"
#include "backends/vulkan/vote_stats_spv.h"
#include "backends/vulkan/vote_sum_spv.h"
#include "backends/vulkan/eltwise_spv.h"
#include "backends/vulkan/get_rows_spv.h"
#include "backends/vulkan/kv_write_spv.h"
#include "backends/vulkan/matmul_spv.h"
#include "backends/vulkan/matvec_spv.h"
#include "backends/vulkan/rmsnorm_spv.h"
#include "backends/vulkan/rope_spv.h"
#include "backends/vulkan/fill_range_spv.h"
#include "backends/vulkan/mean_rows_spv.h"
#include "backends/vulkan/neighbor_fetch_spv.h"
#include "backends/vulkan/sel_cache_spv.h"

/* local: the kernel's workgroup size, 0 where specialization constant 0 (WGS) gives it */
static const struct {
    const uint32_t *code;
    size_t size;
    const char *name;
    uint32_t local;
} spirv[VK_K_COUNT] = {
    [VK_K_SCORE] = {sift_spv_score, sizeof sift_spv_score, "score", 0},
    [VK_K_ATTEND] = {sift_spv_attend, sizeof sift_spv_attend, "attend", 0},
    [VK_K_ATTEND_MERGE] = {sift_spv_attend_merge, sizeof sift_spv_attend_merge, "attend_merge", 256},
    [VK_K_VOTE_STATS] = {sift_spv_vote_stats, sizeof sift_spv_vote_stats, "vote_stats", 256},
    [VK_K_VOTE_MERGE] = {sift_spv_vote_merge, sizeof sift_spv_vote_merge, "vote_merge", 256},
    [VK_K_VOTE_SUM] = {sift_spv_vote_sum, sizeof sift_spv_vote_sum, "vote_sum", 256},
    [VK_K_VOTE_MAX] = {sift_spv_vote_max, sizeof sift_spv_vote_max, "vote_max", 256},
    [VK_K_SELECT_HIST] = {sift_spv_select_hist, sizeof sift_spv_select_hist, "select_hist", 256},
    [VK_K_SELECT_COUNT] = {sift_spv_select_count, sizeof sift_spv_select_count, "select_count", 256},
    [VK_K_SELECT_COMPACT] = {sift_spv_select_compact, sizeof sift_spv_select_compact, "select_compact", 256},
    [VK_K_GET_ROWS] = {sift_spv_get_rows, sizeof sift_spv_get_rows, "get_rows", 64},
    [VK_K_RMSNORM] = {sift_spv_rmsnorm, sizeof sift_spv_rmsnorm, "rmsnorm", 256},
    [VK_K_MATVEC] = {sift_spv_matvec, sizeof sift_spv_matvec, "matvec", 0},
    [VK_K_MATMUL] = {sift_spv_matmul, sizeof sift_spv_matmul, "matmul", 256},
    [VK_K_ROPE] = {sift_spv_rope, sizeof sift_spv_rope, "rope", 256},
    [VK_K_ELTWISE] = {sift_spv_eltwise, sizeof sift_spv_eltwise, "eltwise", 256},
    [VK_K_KV_WRITE] = {sift_spv_kv_write, sizeof sift_spv_kv_write, "kv_write", 256},
    [VK_K_SEL_CACHE] = {sift_spv_sel_cache, sizeof sift_spv_sel_cache, "sel_cache", 256},
    [VK_K_FILL_RANGE] = {sift_spv_fill_range, sizeof sift_spv_fill_range, "fill_range", 256},
    [VK_K_MEAN_ROWS] = {sift_spv_mean_rows, sizeof sift_spv_mean_rows, "mean_rows", 256},
    [VK_K_NEIGHBOR_FETCH] = {sift_spv_neighbor_fetch, sizeof sift_spv_neighbor_fetch, "neighbor_fetch", 256},
    [VK_K_SCORE_MAX] = {sift_spv_score_max, sizeof sift_spv_score_max, "score_max", 0},
    [VK_K_SELECT_WARM_COLLECT] = {sift_spv_select_warm_collect, sizeof sift_spv_select_warm_collect, "select_warm_collect", 256},
    [VK_K_SELECT_WARM_TAIL] = {sift_spv_select_warm_tail, sizeof sift_spv_select_warm_tail, "select_warm_tail", 256},
};

/* ---- push constants: the C images of the shaders' push_constant blocks ---- */

typedef struct {
    vk_tref q, s;
    vk_kvref k;
    uint64_t skip;
    uint32_t begin, m, group, tiles;
    float scale;
} push_score;

typedef struct {
    vk_tref q, idx;
    uint64_t prm, ml, po;
    uint32_t n, nlist, start, group, nsplit, cs, lists;
    float scale;
    uint32_t lim0, hq, nq, pass0;
} push_attend;

/* attend.comp AttendParams: per node, written into the scratch by the command buffer */
typedef struct {
    vk_kvref k, v;
    uint32_t same, n_rot, pad0, pad1;
    float freq[SIFT_MAX_HEAD_DIM / 2];
} attend_params;

typedef struct {
    vk_tref out;
    uint64_t ml, po;
    uint32_t nsplit, row0;
} push_attend_merge;

typedef struct {
    vk_tref s;
    uint64_t part, skip;
    uint32_t m, items, nblocks;
} push_vote_stats;

typedef struct {
    uint64_t part, stats, skip;
    uint32_t nblocks;
} push_vote_merge;

typedef struct {
    vk_tref s, v;
    uint64_t stats, skip;
    uint32_t m, hq, tiles;
} push_vote_sum;

typedef struct {
    vk_tref s, u;
    uint64_t skip;
    uint32_t m, group, tiles;
} push_vote_max;

typedef struct {
    vk_tref votes, out, warm;
    uint64_t hist, state, counts, skip, wbuf;
    uint32_t cand, chosen, items, nblocks, sink, first, win_begin, win_count, pass, mode;
} push_select;

typedef struct {
    vk_tref q, st;
    uint32_t qn;
    float theta;
    uint32_t full;
} push_sel_cache;

typedef struct {
    vk_tref out;
    uint32_t n, col0, width, start, l0;
} push_fill_range;

typedef struct {
    vk_tref x, out;
    uint32_t rows, e;
} push_mean_rows;

typedef struct {
    vk_tref in, out;
    uint32_t sink, chosen, count, l0;
    int64_t cand_end;
} push_neighbor_fetch;

_Static_assert(sizeof(push_score) <= VK_PUSH_MAX && sizeof(push_attend) <= VK_PUSH_MAX &&
                   sizeof(push_select) <= VK_PUSH_MAX && sizeof(push_vote_sum) <= VK_PUSH_MAX,
               "push constants exceed 128 bytes");
_Static_assert(sizeof(vk_tref) == 16, "vk_tref must match common.glsl TRef");
_Static_assert(sizeof(vk_kvref) == 48, "vk_kvref must match common.glsl KVRef");
_Static_assert(sizeof(attend_params) == 368, "attend_params must match attend.comp AttendParams");

/* ---- pipelines ---- */

sift_status vk_pipelines_init(vkb *be)
{
    VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = VK_PUSH_MAX};
    VkPipelineLayoutCreateInfo lci = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .pushConstantRangeCount = 1, .pPushConstantRanges = &range};
    VkResult r = be->vk.vkCreatePipelineLayout(be->dev, &lci, NULL, &be->layout);
    if (r != VK_SUCCESS) {
        be->layout = VK_NULL_HANDLE;
        return vk_fail(r, "vkCreatePipelineLayout");
    }
    for (int k = 0; k < VK_K_COUNT; k++) {
        VkShaderModuleCreateInfo mci = {
            .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = spirv[k].size, .pCode = spirv[k].code};
        r = be->vk.vkCreateShaderModule(be->dev, &mci, NULL, &be->modules[k]);
        if (r != VK_SUCCESS) {
            be->modules[k] = VK_NULL_HANDLE;
            return vk_fail(r, "vkCreateShaderModule");
        }
    }
    return SIFT_OK;
}

void vk_pipelines_destroy(vkb *be)
{
    for (int i = 0; i < be->n_pipes; i++) be->vk.vkDestroyPipeline(be->dev, be->pipes[i].pipeline, NULL);
    free(be->pipes);
    be->pipes = NULL;
    be->n_pipes = be->cap_pipes = 0;
    for (int k = 0; k < VK_K_COUNT; k++)
        if (be->modules[k]) be->vk.vkDestroyShaderModule(be->dev, be->modules[k], NULL);
    if (be->layout) be->vk.vkDestroyPipelineLayout(be->dev, be->layout, NULL);
    be->layout = VK_NULL_HANDLE;
}

static sift_status get_pipeline(vkb *be, vk_kernel kernel, const uint32_t spec[VK_NSPEC], VkPipeline *out)
{
    for (int i = 0; i < be->n_pipes; i++)
        if (be->pipes[i].kernel == kernel && memcmp(be->pipes[i].spec, spec, sizeof be->pipes[i].spec) == 0) {
            *out = be->pipes[i].pipeline;
            return SIFT_OK;
        }
    if (be->n_pipes == be->cap_pipes) {
        int cap = be->cap_pipes ? 2 * be->cap_pipes : 16;
        vk_pipe *p = realloc(be->pipes, (size_t)cap * sizeof *p);
        if (!p) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
        be->pipes = p;
        be->cap_pipes = cap;
    }
    VkSpecializationMapEntry entries[VK_NSPEC];
    for (uint32_t i = 0; i < VK_NSPEC; i++) entries[i] = (VkSpecializationMapEntry){i, i * 4u, 4u};
    VkSpecializationInfo si = {.mapEntryCount = VK_NSPEC, .pMapEntries = entries, .dataSize = VK_NSPEC * 4u, .pData = spec};
    /* The subgroup size the planners assumed (vk_caps.subgroup) is the pipeline's: the device's
     * default, or required where a profile chose another. Full subgroups where the workgroup is a
     * whole number of the largest subgroups the pipeline may get (get_rows' 64 is not on a device
     * of 128; it uses no subgroup operation). */
    const uint32_t local = spirv[kernel].local ? spirv[kernel].local : spec[0];
    const vk_caps *caps = &be->caps;
    const VkPipelineShaderStageRequiredSubgroupSizeCreateInfo required = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO,
        .requiredSubgroupSize = caps->subgroup};
    const bool full = caps->full_subgroups && local % (caps->require_subgroup ? caps->subgroup : caps->subgroup_max) == 0;
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .pNext = caps->require_subgroup ? &required : NULL,
                  .flags = full ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = be->modules[kernel],
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = be->layout,
    };
    VkPipeline p;
    VkResult r = be->vk.vkCreateComputePipelines(be->dev, VK_NULL_HANDLE, 1, &ci, NULL, &p);
    if (r != VK_SUCCESS) {
        sift_status s = vk_fail(r, "vkCreateComputePipelines");
        return sift_set_error(s, "vulkan: vkCreateComputePipelines (%s) failed: %s", spirv[kernel].name, vk_result_name(r));
    }
    vk_pipe *e = &be->pipes[be->n_pipes++];
    e->kernel = kernel;
    memcpy(e->spec, spec, sizeof e->spec);
    e->pipeline = p;
    *out = p;
    return SIFT_OK;
}


/* ---- a graph's recording ---- */

typedef enum { STEP_DISPATCH, STEP_UPDATE } step_kind;

typedef struct vk_step {
    step_kind kind;
    VkPipeline pipeline;
    uint32_t groups[3];
    uint32_t push_size;
    unsigned char push[VK_PUSH_MAX];
    VkDeviceSize upd_off, upd_size; /* STEP_UPDATE: writes this range of the scratch from gc->blob at blob_off */
    size_t blob_off;
} vk_step;

/* The recordings of a graph: untimed; a timestamp between nodes (sift_graph_compute_timed); a
 * timestamp at the two ends only (sift_graph_compute_span, barriers as untimed). */
typedef enum { REC_PLAIN, REC_NODES, REC_SPAN, REC_KINDS } rec_kind;

typedef struct vk_cache {
    unsigned version;
    int n_nodes;
    vk_step *steps;
    int n_steps, cap_steps;
    int *node_first;           /* node i runs steps [node_first[i], node_first[i + 1]) */
    bool *node_barrier;        /* node i must wait for the nodes before it (see node_barriers) */
    vk_buf scratch;
    bool scratch_dirty;        /* not zeroed yet: the first run zeroes it first (vk_graph_compute) */
    unsigned char *blob;       /* the data of STEP_UPDATE steps */
    size_t blob_used, blob_cap;
    VkCommandBuffer cb[REC_KINDS]; /* one recording per kind of timing */
    bool recorded[REC_KINDS];
    VkQueryPool queries;
} vk_cache;

/* Planning runs twice: once to size the scratch (emit false), once to emit the steps. */
struct plan {
    vkb *be;
    vk_cache *gc;
    bool emit;
    VkDeviceSize used;
};

static VkDeviceSize scratch_take(plan *pl, VkDeviceSize bytes)
{
    VkDeviceSize off = pl->used;
    pl->used += (bytes + 255) & ~(VkDeviceSize)255;
    return off;
}

static uint64_t scratch_addr(const plan *pl, VkDeviceSize off) { return pl->emit ? pl->gc->scratch.addr + off : 0; }

static sift_status add_step(plan *pl, const vk_step *st)
{
    vk_cache *gc = pl->gc;
    if (gc->n_steps == gc->cap_steps) {
        int cap = gc->cap_steps ? 2 * gc->cap_steps : 16;
        vk_step *p = realloc(gc->steps, (size_t)cap * sizeof *p);
        if (!p) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
        gc->steps = p;
        gc->cap_steps = cap;
    }
    gc->steps[gc->n_steps++] = *st;
    return SIFT_OK;
}

static sift_status dispatch(plan *pl, vk_kernel kernel, const uint32_t spec[VK_NSPEC], const void *push, size_t push_size,
                            uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (!pl->emit || gx == 0 || gy == 0 || gz == 0) return SIFT_OK;
    const vkb *be = pl->be;
    if (gx > be->caps.max_groups[0] || gy > be->caps.max_groups[1] || gz > be->caps.max_groups[2])
        return sift_set_error(SIFT_E_LIMIT, "vulkan: %s needs %u x %u x %u workgroups; the device allows %u x %u x %u",
                              spirv[kernel].name, gx, gy, gz, be->caps.max_groups[0], be->caps.max_groups[1], be->caps.max_groups[2]);
    vk_step st = {.kind = STEP_DISPATCH, .groups = {gx, gy, gz}, .push_size = (uint32_t)((push_size + 3) & ~(size_t)3)};
    memcpy(st.push, push, push_size);
    sift_status s = get_pipeline(pl->be, kernel, spec, &st.pipeline);
    if (s != SIFT_OK) return s;
    return add_step(pl, &st);
}

/* ---- for vk_model.c ---- */

vkb *vk_plan_backend(const plan *pl) { return pl->be; }
VkDeviceSize vk_scratch_take(plan *pl, VkDeviceSize bytes) { return scratch_take(pl, bytes); }
uint64_t vk_scratch_addr(const plan *pl, VkDeviceSize off) { return scratch_addr(pl, off); }

sift_status vk_dispatch(plan *pl, vk_kernel kernel, const uint32_t spec[VK_NSPEC], const void *push, size_t push_size,
                        uint32_t gx, uint32_t gy, uint32_t gz)
{
    return dispatch(pl, kernel, spec, push, push_size, gx, gy, gz);
}

sift_status vk_scratch_update(plan *pl, VkDeviceSize off, const void *data, size_t size)
{
    if (!pl->emit || size == 0) return SIFT_OK;
    if (size % 4 != 0 || size > 65536 || off % 4 != 0)
        return sift_set_error(SIFT_E_INVALID, "vulkan: a scratch update of %zu bytes at %llu", size, (unsigned long long)off);
    vk_cache *gc = pl->gc;
    if (gc->blob_used + size > gc->blob_cap) {
        size_t cap = gc->blob_cap ? 2 * gc->blob_cap : 4096;
        while (cap < gc->blob_used + size) cap *= 2;
        unsigned char *p = realloc(gc->blob, cap);
        if (!p) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
        gc->blob = p;
        gc->blob_cap = cap;
    }
    memcpy(gc->blob + gc->blob_used, data, size);
    vk_step st = {.kind = STEP_UPDATE, .upd_off = off, .upd_size = size, .blob_off = gc->blob_used};
    gc->blob_used += size;
    return add_step(pl, &st);
}

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
 * score, vote and select reads it first and returns when it is non-zero (common.glsl skipped). */
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
    const vkb *be = pl->be;
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
    if ((*st = vk_tensor_ref(q, &ps.q)) != SIFT_OK || (*st = vk_kv_ref(pl->be, k, &ps.k)) != SIFT_OK ||
        (*st = vk_tensor_ref(n->dst, &ps.s)) != SIFT_OK || (*st = skip_flag(n, &ps.skip)) != SIFT_OK)
        return true;
    if (i8 && (ps.k.t.meta & 3u) != 0) { /* rows are read as 32-bit words */
        *st = sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: score_max: the i8 cache '%s' does not start on a 4-byte boundary",
                             k->name);
        return true;
    }
    *st = dispatch(pl, VK_K_SCORE_MAX, spec, &ps, sizeof ps, gx, hkv, 1);
    return true;
}

/* score and score_max (score.comp, GMAX): the same rows and dot products; score_max keeps each row's
 * max over the group's heads in registers (its workgroups run every pass, grid z = 1) and writes
 * [Hkv][m]. Short rows of score_max go to score_max.comp instead (plan_score_max_stream).
 * SIFT_VULKAN_TUNE=smax_lanes=n caps the lanes per row of score_max here (a comparison on real GPUs;
 * smax_stream=1 sends every D here). */
static sift_status plan_score(plan *pl, const sift_node *n)
{
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const uint32_t hq = (uint32_t)q->shape[0], hkv = (uint32_t)k->shape[0], d = (uint32_t)q->shape[1];
    const uint32_t m = (uint32_t)(n->p.end - n->p.begin);
    if (m == 0) return SIFT_OK;
    const bool f16 = vk_tensor_is_f16(k), gmax = n->op == SIFT_OP_SCORE_MAX;
    sift_status st;
    if (gmax && plan_score_max_stream(pl, n, &st)) return st;
    rowcfg c;
    const uint32_t smax_lanes = pl->be->tune.smax_lanes ? pl->be->tune.smax_lanes : 16u;
    row_config(pl->be, d, f16, hq / hkv, false, false, gmax ? smax_lanes : 16u, &c);
    push_score ps = {.begin = (uint32_t)n->p.begin,
                     .m = m,
                     .group = hq / hkv,
                     .tiles = ceil_div(m, (uint64_t)c.ncl * c.rows),
                     .scale = n->p.scale};
    TRY(vk_tensor_ref(q, &ps.q));
    TRY(vk_kv_ref(pl->be, k, &ps.k));
    TRY(vk_tensor_ref(n->dst, &ps.s));
    TRY(skip_flag(n, &ps.skip));
    uint32_t spec[VK_NSPEC];
    row_spec(&c, d, f16, vk_rows_aligned(k), false, 0, spec);
    spec[VK_SC_GMAX] = gmax;
    const uint32_t gz = gmax ? 1 : c.passes;
    const uint32_t gx = min_u32(min_u32(ps.tiles, max_u32(1, 2 * target_groups(pl->be) / (hkv * gz))), pl->be->caps.max_groups[0]);
    return dispatch(pl, VK_K_SCORE, spec, &ps, sizeof ps, gx, hkv, gz);
}

/* gather_attend (with rotated keys or not), dense_attend, causal_attend and causal_attend_sparse: one
 * split-K kernel (attend.comp) and its merge. Causal attention is dense attention for T * G queries
 * per KV head, the query of token t over positions [0, pos0 + t]; sparse causal attention walks the
 * list, then positions pos0, pos0 + 1, ..., the query of token t over the list and [pos0, pos0 + t].
 * K and V (paged or not) travel in a parameter block in the scratch (their KVRefs exceed the push
 * constants), written by the command buffer at the start of every run. */
static sift_status plan_attend(plan *pl, const sift_node *n)
{
    const sift_attend_walk *w = &n->p.walk; /* the list, then a range (engine/backend.h) */
    const sift_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *idx = n->n_src > 3 ? n->src[3] : NULL;
    const uint32_t tokens = (uint32_t)w->tokens, nlist = (uint32_t)w->list_len, len = (uint32_t)w->n;
    const uint32_t hq = (uint32_t)q->shape[q->ndim - 2], d = (uint32_t)q->shape[q->ndim - 1];
    const uint32_t hkv = (uint32_t)k->shape[0], group = hq / hkv;
    if (tokens == 0) return SIFT_OK;
    const bool f16 = vk_tensor_is_f16(k); /* v is stored alike: the same type in one context */
    const bool rope = n->p.rope_keys;
    rowcfg c;
    row_config(pl->be, d, f16, tokens * group, true, rope, 16, &c);
    const uint32_t per_step = c.ncl * c.rows, steps = ceil_div(len, per_step);
    uint32_t nsplit = min_u32(steps, min_u32(max_u32(1, target_groups(pl->be) / max_u32(1, hkv * c.passes)),
                                             pl->be->caps.max_groups[0]));
    uint32_t cs = 0;
    if (nsplit > 0) {
        cs = ceil_div(steps, nsplit) * per_step;
        nsplit = ceil_div(len, cs);
    }
    const uint64_t qrows = (uint64_t)tokens * hq;
    const VkDeviceSize ml = scratch_take(pl, (VkDeviceSize)qrows * nsplit * 8);
    const VkDeviceSize po = scratch_take(pl, (VkDeviceSize)qrows * nsplit * d * 4);
    const VkDeviceSize prm = scratch_take(pl, sizeof(attend_params));

    attend_params ap;
    memset(&ap, 0, sizeof ap);
    TRY(vk_kv_ref(pl->be, k, &ap.k));
    TRY(vk_kv_ref(pl->be, v, &ap.v));
    /* one lookup per row when v's rows lie where k's do (the same rows, pool layout and page table) */
    ap.same = ap.k.rows == ap.v.rows && ap.k.prow == ap.v.prow && ap.k.pshift == ap.v.pshift &&
              ap.k.npages == ap.v.npages && ap.k.pages.addr == ap.v.pages.addr && ap.k.pages.meta == ap.v.pages.meta;
    if (rope) {
        ap.n_rot = (uint32_t)n->p.rope.n_rot;
        memcpy(ap.freq, n->p.rope_freq, (size_t)(n->p.rope.n_rot / 2) * sizeof *ap.freq);
    }
    TRY(vk_scratch_update(pl, prm, &ap, sizeof ap));

    push_attend pa = {.prm = scratch_addr(pl, prm),
                      .ml = scratch_addr(pl, ml),
                      .po = scratch_addr(pl, po),
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
    for (uint32_t p0 = 0; p0 < c.passes; p0 += pl->be->caps.max_groups[2]) {
        pa.pass0 = p0;
        TRY(dispatch(pl, VK_K_ATTEND, spec, &pa, sizeof pa, nsplit, hkv, min_u32(c.passes - p0, pl->be->caps.max_groups[2])));
    }

    push_attend_merge pm = {.ml = pa.ml, .po = pa.po, .nsplit = nsplit};
    TRY(vk_tensor_ref(n->dst, &pm.out));
    uint32_t mspec[VK_NSPEC] = {0};
    mspec[VK_SC_D] = d;
    for (uint64_t r0 = 0; r0 < qrows; r0 += pl->be->caps.max_groups[0]) {
        pm.row0 = (uint32_t)r0;
        const uint64_t left = qrows - r0;
        TRY(dispatch(pl, VK_K_ATTEND_MERGE, mspec, &pm, sizeof pm,
                     (uint32_t)(left < pl->be->caps.max_groups[0] ? left : pl->be->caps.max_groups[0]), ceil_div(d, 32), 1));
    }
    return SIFT_OK;
}

/* ---- vote ---- */

static sift_status plan_vote(plan *pl, const sift_node *n)
{
    const sift_tensor *sc = n->src[0];
    const uint32_t hq = (uint32_t)sc->shape[0], m = (uint32_t)sc->shape[1];
    if (m == 0) return SIFT_OK;
    const uint32_t tiles = ceil_div(m, 256), gx = min_u32(tiles, pl->be->caps.max_groups[0]);
    const uint32_t none[VK_NSPEC] = {0};
    uint64_t skip;
    TRY(skip_flag(n, &skip));
    if (n->p.vote == SIFT_VOTE_KVHEAD_MAX) {
        const uint32_t hkv = (uint32_t)n->dst->shape[0];
        push_vote_max pv = {.skip = skip, .m = m, .group = hq / hkv, .tiles = tiles};
        TRY(vk_tensor_ref(sc, &pv.s));
        TRY(vk_tensor_ref(n->dst, &pv.u));
        return dispatch(pl, VK_K_VOTE_MAX, none, &pv, sizeof pv, gx, hkv, 1);
    }
    uint32_t items = 4;
    while (ceil_div(m, 256ull * items) > 4096) items *= 2;
    const uint32_t nblocks = ceil_div(m, 256ull * items);
    const VkDeviceSize part = scratch_take(pl, (VkDeviceSize)hq * nblocks * 8);
    const VkDeviceSize stats = scratch_take(pl, (VkDeviceSize)hq * 8);

    push_vote_stats p1 = {.part = scratch_addr(pl, part), .skip = skip, .m = m, .items = items, .nblocks = nblocks};
    TRY(vk_tensor_ref(sc, &p1.s));
    TRY(dispatch(pl, VK_K_VOTE_STATS, none, &p1, sizeof p1, nblocks, hq, 1));
    push_vote_merge p2 = {.part = p1.part, .stats = scratch_addr(pl, stats), .skip = skip, .nblocks = nblocks};
    TRY(dispatch(pl, VK_K_VOTE_MERGE, none, &p2, sizeof p2, hq, 1, 1));
    push_vote_sum p3 = {.stats = p2.stats, .skip = skip, .m = m, .hq = hq, .tiles = tiles};
    TRY(vk_tensor_ref(sc, &p3.s));
    TRY(vk_tensor_ref(n->dst, &p3.v));
    return dispatch(pl, VK_K_VOTE_SUM, none, &p3, sizeof p3, gx, 1, 1);
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
 * followed by a barrier (record()), so collect, tail and the fallback see each other's writes to
 * warm and the scratch in that order. Other nodes with warm run as without it and leave it alone. */

/* CAP: the entries a list's warm start holds (the keys at or above its threshold; more: a miss). */
#define SELECT_WARM_CAP 8192u
/* The most collect blocks per list (select_warm_tail.comp NBW). */
#define SELECT_WARM_BLOCKS 1024u
/* select_warm_tail's shared memory besides its keys: the block prefix and chunk starts
 * (2 x SELECT_WARM_BLOCKS uints), the radix histogram and select.glsl's scan (2 x 256 uints), a few
 * words; rounded up. */
#define SELECT_WARM_SHARED_FIXED 12288u
static sift_status plan_select(plan *pl, const sift_node *n)
{
    const sift_select_layout *l = &n->p.layout;
    const uint32_t lists = (uint32_t)n->dst->shape[0];
    if (l->count == 0) return SIFT_OK;
    const uint64_t cand = (uint64_t)l->cand;
    const uint32_t mode = l->chosen == 0 ? 2u : l->chosen == l->cand ? 1u : 0u;
    const uint64_t target = pl->be->tune.select_groups ? pl->be->tune.select_groups : 1024u;
    uint32_t items = 1;
    while (ceil_div(cand, 256ull * items) > 1 && (uint64_t)lists * ceil_div(cand, 256ull * items) > target) items *= 2;
    const uint32_t nblocks = max_u32(1, ceil_div(cand, 256ull * items));
    const uint32_t cap = SELECT_WARM_CAP;
    const bool warm = pl->be->tune.select_warm && n->n_src > 1 && n->src[1] && mode == 0 &&
                      (uint64_t)l->chosen + (uint64_t)l->chosen / 4 <= cap / 2;
    const VkDeviceSize hist = mode == 0 ? scratch_take(pl, (VkDeviceSize)lists * 4 * 256 * 4) : 0;
    const VkDeviceSize state = mode == 0 ? scratch_take(pl, (VkDeviceSize)lists * 4 * 8) : 0;
    /* also the warm chunks (collect's blocks are never more than the radix ones) */
    const VkDeviceSize counts = mode == 0 ? scratch_take(pl, (VkDeviceSize)lists * nblocks * 8) : 0;
    /* ctl uvec4 [lists] (miss flag, counter: zero in the zeroed scratch, reset by every tail), then
     * the entries uvec2 [lists][CAP] */
    const VkDeviceSize wbuf = warm ? scratch_take(pl, (VkDeviceSize)lists * 16 + (VkDeviceSize)lists * cap * 8) : 0;

    push_select ps = {.hist = mode == 0 ? scratch_addr(pl, hist) : 0,
                      .state = mode == 0 ? scratch_addr(pl, state) : 0,
                      .counts = mode == 0 ? scratch_addr(pl, counts) : 0,
                      .wbuf = warm ? scratch_addr(pl, wbuf) : 0,
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
        wspec[1] = (uint64_t)cap * 4 + SELECT_WARM_SHARED_FIXED <= pl->be->caps.max_shared ? cap : 1;
        TRY(dispatch(pl, VK_K_SELECT_WARM_COLLECT, wspec, &pw, sizeof pw, pw.nblocks, lists, 1));
        TRY(dispatch(pl, VK_K_SELECT_WARM_TAIL, wspec, &pw, sizeof pw, 1, lists, 1));
    }
    if (mode == 0) {
        for (uint32_t pass = 0; pass < 4; pass++) {
            ps.pass = pass;
            TRY(dispatch(pl, VK_K_SELECT_HIST, none, &ps, sizeof ps, nblocks, lists, 1));
        }
        TRY(dispatch(pl, VK_K_SELECT_COUNT, none, &ps, sizeof ps, nblocks, lists, 1));
    }
    return dispatch(pl, VK_K_SELECT_COMPACT, none, &ps, sizeof ps, mode == 2 ? 1 : nblocks, lists, 1);
}

/* TokenButler's neighbour fetch: one invocation per output entry (neighbor_fetch.comp). */
static sift_status plan_neighbor_fetch(plan *pl, const sift_node *n)
{
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
    const uint32_t none[VK_NSPEC] = {0};
    const uint32_t gx = min_u32(ceil_div((uint64_t)len, 256), min_u32(1024, pl->be->caps.max_groups[0]));
    for (int64_t l0 = 0; l0 < lists; l0 += pl->be->caps.max_groups[1]) {
        p.l0 = (uint32_t)l0;
        const int64_t left = lists - l0;
        TRY(dispatch(pl, VK_K_NEIGHBOR_FETCH, none, &p, sizeof p, gx,
                     (uint32_t)(left < pl->be->caps.max_groups[1] ? left : pl->be->caps.max_groups[1]), 1));
    }
    return SIFT_OK;
}

/* ---- saving work between steps (SPEC §4, §7) ---- */

static sift_status plan_sel_cache(plan *pl, const sift_node *n)
{
    const sift_tensor *q = n->src[0];
    const uint64_t qn = (uint64_t)q->shape[0] * (uint64_t)q->shape[1];
    if (qn > UINT32_MAX - SIFT_SEL_CACHE_EXTRA)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: sel_cache_check over %llu query values", (unsigned long long)qn);
    push_sel_cache p = {.qn = (uint32_t)qn, .theta = n->p.theta, .full = n->p.full != 0};
    TRY(vk_tensor_ref(q, &p.q));
    TRY(vk_tensor_ref(n->dst, &p.st));
    const uint32_t none[VK_NSPEC] = {0};
    return dispatch(pl, VK_K_SEL_CACHE, none, &p, sizeof p, 1, 1, 1);
}

static sift_status plan_fill_range(plan *pl, const sift_node *n)
{
    const int64_t lists = n->dst->shape[0], len = n->dst->shape[1];
    if (lists == 0 || len - n->p.col0 <= 0) return SIFT_OK;
    push_fill_range p = {.n = (uint32_t)len,
                         .col0 = (uint32_t)n->p.col0,
                         .width = (uint32_t)(len - n->p.col0),
                         .start = (uint32_t)n->p.start};
    TRY(vk_tensor_ref(n->dst, &p.out));
    const uint32_t none[VK_NSPEC] = {0};
    const uint32_t gx = min_u32(ceil_div(p.width, 256), min_u32(1024, pl->be->caps.max_groups[0]));
    for (int64_t l0 = 0; l0 < lists; l0 += pl->be->caps.max_groups[1]) {
        p.l0 = (uint32_t)l0;
        const int64_t left = lists - l0;
        TRY(dispatch(pl, VK_K_FILL_RANGE, none, &p, sizeof p, gx,
                     (uint32_t)(left < pl->be->caps.max_groups[1] ? left : pl->be->caps.max_groups[1]), 1));
    }
    return SIFT_OK;
}

static sift_status plan_mean_rows(plan *pl, const sift_node *n)
{
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
    const uint32_t gx = (uint32_t)(groups < pl->be->caps.max_groups[0] ? groups : pl->be->caps.max_groups[0]);
    const uint64_t gy = (groups + gx - 1) / gx;
    if (gy > pl->be->caps.max_groups[1]) return sift_set_error(SIFT_E_LIMIT, "vulkan: mean_rows over %llu columns", (unsigned long long)e);
    return dispatch(pl, VK_K_MEAN_ROWS, none, &p, sizeof p, gx, (uint32_t)gy, 1);
}

/* ---- the planner of every op the backend runs ---- */

/* Indexed by op; NULL: not supported (vk_supports_op), so the engine refuses the graph before any
 * planning. */
static const vk_planner planners[SIFT_OP_COUNT] = {
    [SIFT_OP_SCORE] = plan_score,
    [SIFT_OP_VOTE] = plan_vote,
    [SIFT_OP_SELECT] = plan_select,
    [SIFT_OP_GATHER_ATTEND] = plan_attend,
    [SIFT_OP_DENSE_ATTEND] = plan_attend,
    [SIFT_OP_GET_ROWS] = vk_plan_get_rows,
    [SIFT_OP_RMSNORM] = vk_plan_norm,
    [SIFT_OP_MATMUL] = vk_plan_matmul,
    [SIFT_OP_ROPE] = vk_plan_rope,
    [SIFT_OP_SWIGLU] = vk_plan_eltwise,
    [SIFT_OP_ADD] = vk_plan_eltwise,
    [SIFT_OP_KV_WRITE] = vk_plan_kv_write,
    [SIFT_OP_CAUSAL_ATTEND] = plan_attend,
    [SIFT_OP_SEL_CACHE_CHECK] = plan_sel_cache,
    [SIFT_OP_FILL_RANGE] = plan_fill_range,
    [SIFT_OP_MEAN_ROWS] = plan_mean_rows,
    [SIFT_OP_CAUSAL_ATTEND_SPARSE] = plan_attend,
    [SIFT_OP_LAYERNORM] = vk_plan_norm,
    [SIFT_OP_SILU] = vk_plan_eltwise,
    [SIFT_OP_NEIGHBOR_FETCH] = plan_neighbor_fetch,
    [SIFT_OP_SCORE_MAX] = plan_score,
};

/* An int8 cache the shaders can address: its storage and its rows (D + 4 bytes) on 4-byte
 * boundaries, as they read and write whole 32-bit words. */
static bool i8_aligned(const sift_tensor *t)
{
    const sift_tensor *storage = t->pages ? t->parent : t;
    return storage->offset % 4 == 0 && t->shape[t->ndim - 1] % 4 == 0;
}

/* int8 tensors (quantized key rows, SIFT_I8) only where the engine takes them: kv_write's cache and
 * score_max's k, 4-byte aligned (other layouts are reported as not supported). */
static bool i8_where_allowed(const sift_node *n)
{
    for (int i = 0; i < n->n_src; i++)
        if (n->src[i] && n->src[i]->dtype == SIFT_I8 && (!(n->op == SIFT_OP_SCORE_MAX && i == 1) || !i8_aligned(n->src[i])))
            return false;
    return !n->dst || n->dst->dtype != SIFT_I8 || (n->op == SIFT_OP_KV_WRITE && i8_aligned(n->dst));
}

bool vk_supports_op(void *be, const sift_node *n)
{
    (void)be;
    return planners[n->op] != NULL && i8_where_allowed(n);
}

/* ---- building, recording, running ---- */

/* ---- scratch buffers, kept across graphs ---- */

/* A decode step is a new graph every token, and creating and freeing its scratch buffer cost 1.1
 * to 4.5 ms and 0.7 to 2 ms per step on the H200 (vkAllocateMemory and vkFreeMemory; the dense
 * attention's partials are the large one). So released graphs give their buffer back to the
 * backend, which keeps up to VK_SCRATCH_KEPT of them and hands out the smallest that fits. */
static sift_status scratch_get(vkb *be, VkDeviceSize bytes, vk_buf *out)
{
    int best = -1;
    for (int i = 0; i < be->n_scratch_kept; i++)
        if (be->scratch_kept[i].size >= bytes && (best < 0 || be->scratch_kept[i].size < be->scratch_kept[best].size))
            best = i;
    if (best < 0) return vk_buf_create(be, bytes + bytes / 8, VK_MEM_DEVICE, out, "the scratch buffer of a graph");
    *out = be->scratch_kept[best];
    be->scratch_kept[best] = be->scratch_kept[--be->n_scratch_kept];
    return SIFT_OK;
}

/* Gives a graph's scratch buffer back: kept, in place of the smallest kept one when all places are
 * taken and it is larger, else freed. */
static void scratch_put(vkb *be, vk_buf *b)
{
    if (!b->buf) return;
    int slot = be->n_scratch_kept < VK_SCRATCH_KEPT ? be->n_scratch_kept++ : -1;
    if (slot < 0) {
        slot = 0;
        for (int i = 1; i < VK_SCRATCH_KEPT; i++)
            if (be->scratch_kept[i].size < be->scratch_kept[slot].size) slot = i;
        if (be->scratch_kept[slot].size >= b->size) {
            vk_buf_destroy(be, b);
            return;
        }
        vk_buf_destroy(be, &be->scratch_kept[slot]);
    }
    be->scratch_kept[slot] = *b;
    memset(b, 0, sizeof *b);
}

void vk_scratch_kept_free(vkb *be)
{
    for (int i = 0; i < be->n_scratch_kept; i++) vk_buf_destroy(be, &be->scratch_kept[i]);
    be->n_scratch_kept = 0;
}

void vk_graph_release(void *p, sift_graph *g)
{
    vkb *be = p;
    vk_cache *gc = g->backend_cache;
    if (!gc) return;
    for (int i = 0; i < REC_KINDS; i++)
        if (gc->cb[i]) be->vk.vkFreeCommandBuffers(be->dev, be->pool, 1, &gc->cb[i]);
    if (gc->queries) be->vk.vkDestroyQueryPool(be->dev, gc->queries, NULL);
    scratch_put(be, &gc->scratch);
    free(gc->blob);
    free(gc->steps);
    free(gc->node_first);
    free(gc->node_barrier);
    free(gc);
    g->backend_cache = NULL;
}

/* Which nodes need a barrier before their first step. Untimed recordings put one only where a node
 * touches memory that a node since the last barrier wrote, or writes memory that one read or wrote
 * (storage ranges, views included, compared conservatively; a paged view is its whole pool); a
 * node's own steps are always separated, and each node's scratch is its own. So the Q, K and V
 * projections of a layer run together, as do gate and up, and the two RoPEs. A node reads its
 * inputs, the page tables of its paged inputs and output, and its predicate (sift_graph_skip_if),
 * so a predicated node waits for the sel_cache_check that sets its flag; it writes its output, so
 * two writers of one tensor (select, then fill_range into the same indices) are ordered too. A
 * barrier due before a node without steps is carried to the next step recorded (record()).
 * SIFT_VULKAN_ALL_BARRIERS=1 puts a barrier before every step. (Neither lavapipe, which runs
 * dispatches in order, nor synchronization validation, which does not see buffer-device-address
 * accesses, can catch a missing barrier: the analysis must be right.) */
typedef struct access {
    const void *storage;
    size_t begin, end;
    bool write;
} access;

static bool overlaps(const access *a, const sift_tensor *t)
{
    return a->storage == t->impl && a->begin < t->offset + t->nbytes && t->offset < a->end;
}

static sift_status node_barriers(const sift_graph *g, bool *need)
{
    const char *env = getenv("SIFT_VULKAN_ALL_BARRIERS");
    const bool all = env && *env && strcmp(env, "0") != 0;
    enum { MAX_READS = 2 * SIFT_NODE_MAX_SRC + 2 };
    access *pend = malloc(((size_t)g->n_nodes * (MAX_READS + 2) + 1) * sizeof *pend);
    if (!pend) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    int np = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const sift_node *n = &g->nodes[i];
        const sift_tensor *reads[MAX_READS];
        int nr = 0;
        for (int j = 0; j < n->n_src; j++)
            if (n->src[j]) {
                reads[nr++] = n->src[j];
                if (n->src[j]->pages) reads[nr++] = n->src[j]->pages;
            }
        if (n->dst->pages) reads[nr++] = n->dst->pages;
        if (n->skip) reads[nr++] = n->skip;
        /* the outputs: dst, and the state an op updates (its last input, ops.def's STATE_SRC) */
        const sift_op_info *info = sift_op_info_of(n->op);
        const sift_tensor *writes[2] = {n->dst, NULL};
        const int nw = (info->flags & SIFT_OPF_STATE_SRC) && n->n_src == info->max_src ? 2 : 1;
        if (nw == 2) writes[1] = n->src[n->n_src - 1];
        bool hazard = i == 0;
        for (int a = 0; a < np && !hazard; a++) {
            for (int j = 0; j < nw && !hazard; j++)
                if (overlaps(&pend[a], writes[j])) hazard = true; /* write after read or write */
            for (int j = 0; j < nr && !hazard; j++)
                if (pend[a].write && overlaps(&pend[a], reads[j])) hazard = true; /* read after write */
        }
        need[i] = hazard || all;
        if (hazard) np = 0;
        for (int j = 0; j < nr; j++)
            pend[np++] = (access){reads[j]->impl, reads[j]->offset, reads[j]->offset + reads[j]->nbytes, false};
        for (int j = 0; j < nw; j++)
            pend[np++] = (access){writes[j]->impl, writes[j]->offset, writes[j]->offset + writes[j]->nbytes, true};
    }
    free(pend);
    return SIFT_OK;
}

/* Records the zeroing of a graph's scratch into the transfer command buffer, submitted with the
 * graph's first run: kernels that keep state in the scratch between runs (select's histograms,
 * cleared by the runs themselves for the next one) start from zeros, at no extra round trip. */
static sift_status record_zero_scratch(vkb *be, const vk_buf *b)
{
    VkCommandBuffer cb = be->xfer_cb;
    TRY(vk_begin(be, cb));
    vk_barrier(be, cb);
    be->vk.vkCmdFillBuffer(cb, b->buf, 0, VK_WHOLE_SIZE, 0);
    vk_barrier(be, cb);
    VkResult r = be->vk.vkEndCommandBuffer(cb);
    return r == VK_SUCCESS ? SIFT_OK : vk_fail(r, "vkEndCommandBuffer");
}

static sift_status build(vkb *be, sift_graph *g, vk_cache *gc)
{
    gc->version = g->version;
    gc->n_nodes = g->n_nodes;
    gc->node_first = calloc((size_t)g->n_nodes + 1, sizeof *gc->node_first);
    gc->node_barrier = calloc((size_t)g->n_nodes + 1, sizeof *gc->node_barrier);
    if (!gc->node_first || !gc->node_barrier) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    TRY(node_barriers(g, gc->node_barrier));
    plan pl = {.be = be, .gc = gc, .emit = false};
    for (int i = 0; i < g->n_nodes; i++) TRY(planners[g->nodes[i].op](&pl, &g->nodes[i]));
    TRY(scratch_get(be, pl.used, &gc->scratch));
    gc->scratch_dirty = true;
    pl.emit = true;
    pl.used = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        gc->node_first[i] = gc->n_steps;
        TRY(planners[g->nodes[i].op](&pl, &g->nodes[i]));
    }
    gc->node_first[g->n_nodes] = gc->n_steps;
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = be->pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    for (int i = 0; i < REC_KINDS; i++) {
        VkResult r = be->vk.vkAllocateCommandBuffers(be->dev, &cai, &gc->cb[i]);
        if (r != VK_SUCCESS) {
            gc->cb[i] = VK_NULL_HANDLE;
            return vk_fail(r, "vkAllocateCommandBuffers");
        }
    }
    return SIFT_OK;
}

static sift_status record(vkb *be, vk_cache *gc, rec_kind kind)
{
    VkCommandBuffer cb = gc->cb[kind];
    const bool timed = kind == REC_NODES;
    if (kind != REC_PLAIN && !gc->queries) {
        VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                     .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                     .queryCount = (uint32_t)gc->n_nodes + 1};
        VkResult r = be->vk.vkCreateQueryPool(be->dev, &qci, NULL, &gc->queries);
        if (r != VK_SUCCESS) {
            gc->queries = VK_NULL_HANDLE;
            return vk_fail(r, "vkCreateQueryPool");
        }
    }
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    VkResult r = be->vk.vkBeginCommandBuffer(cb, &bi);
    if (r != VK_SUCCESS) return vk_fail(r, "vkBeginCommandBuffer");
    /* the scratch updates first: their data is fixed, and the first node's barrier covers them */
    for (int s = 0; s < gc->n_steps; s++)
        if (gc->steps[s].kind == STEP_UPDATE)
            be->vk.vkCmdUpdateBuffer(cb, gc->scratch.buf, gc->steps[s].upd_off, gc->steps[s].upd_size,
                                     gc->blob + gc->steps[s].blob_off);
    if (kind != REC_PLAIN) {
        be->vk.vkCmdResetQueryPool(cb, gc->queries, 0, (uint32_t)gc->n_nodes + 1);
        be->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, gc->queries, 0);
    }
    VkPipeline bound = VK_NULL_HANDLE;
    bool due = false; /* a barrier owed by a node without steps goes before the next step */
    for (int i = 0; i < gc->n_nodes; i++) {
        bool first = true;
        due = due || gc->node_barrier[i];
        for (int s = gc->node_first[i]; s < gc->node_first[i + 1]; s++) {
            const vk_step *st = &gc->steps[s];
            if (st->kind == STEP_UPDATE) continue; /* recorded above */
            /* timed recordings keep every barrier, so that each node's time is its own */
            if (timed || !first || due) vk_barrier(be, cb);
            first = false;
            due = false;
            if (st->pipeline != bound) {
                be->vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, st->pipeline);
                bound = st->pipeline;
            }
            be->vk.vkCmdPushConstants(cb, be->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, st->push_size, st->push);
            be->vk.vkCmdDispatch(cb, st->groups[0], st->groups[1], st->groups[2]);
        }
        if (timed) be->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, gc->queries, (uint32_t)i + 1);
    }
    if (kind == REC_SPAN) be->vk.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, gc->queries, 1);
    vk_barrier(be, cb);
    r = be->vk.vkEndCommandBuffer(cb);
    if (r != VK_SUCCESS) return vk_fail(r, "vkEndCommandBuffer");
    return SIFT_OK;
}

/* g's plan and command buffers, made now where g changed since. */
static sift_status built(vkb *be, sift_graph *g, vk_cache **out)
{
    vk_cache *gc = g->backend_cache;
    if (gc && gc->version != g->version) {
        vk_graph_release(be, g);
        gc = NULL;
    }
    if (!gc) {
        gc = calloc(1, sizeof *gc);
        if (!gc) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
        g->backend_cache = gc;
        sift_status s = build(be, g, gc);
        if (s != SIFT_OK) {
            vk_graph_release(be, g);
            return s;
        }
    }
    *out = gc;
    return SIFT_OK;
}

/* g's plan and its recording of `kind`, made now where missing. Touches neither the queue nor the
 * transfer command buffer, so it may run while another graph runs. */
static sift_status recorded(vkb *be, sift_graph *g, rec_kind kind, vk_cache **out)
{
    TRY(built(be, g, out));
    if (!(*out)->recorded[kind]) {
        TRY(record(be, *out, kind));
        (*out)->recorded[kind] = true;
    }
    return SIFT_OK;
}

/* Builds and records g's untimed run, while another graph may run (the scratch is zeroed at the
 * first submit). */
sift_status vk_graph_prepare(void *p, sift_graph *g)
{
    vk_cache *gc = NULL;
    return recorded(p, g, REC_PLAIN, &gc);
}

/* g's recording of `kind`, submitted (wait: and waited for). */
static sift_status run(vkb *be, sift_graph *g, rec_kind kind, bool wait)
{
    vk_cache *gc = NULL;
    TRY(recorded(be, g, kind, &gc));
    VkCommandBuffer first = VK_NULL_HANDLE;
    if (gc->scratch_dirty) {
        TRY(record_zero_scratch(be, &gc->scratch));
        first = be->xfer_cb;
    }
    TRY(vk_submit_recorded(be, first, gc->cb[kind], wait));
    gc->scratch_dirty = false;
    return SIFT_OK;
}

sift_status vk_graph_submit(void *p, sift_graph *g) { return run(p, g, REC_PLAIN, false); }

sift_status vk_graph_compute(void *p, sift_graph *g, double *node_us, double *span_us)
{
    vkb *be = p;
    if ((node_us || span_us) && be->caps.ts_bits == 0)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s has no timestamps on its compute queue%s",
                              be->caps.props.deviceName, be->caps.profile ? " (under its profile)" : "");
    const rec_kind kind = node_us ? REC_NODES : span_us ? REC_SPAN : REC_PLAIN;
    TRY(run(be, g, kind, true));
    const vk_cache *gc = g->backend_cache;
    if (kind != REC_PLAIN) {
        const uint32_t n_ts = kind == REC_NODES ? (uint32_t)gc->n_nodes + 1 : 2;
        uint64_t *ts = calloc(n_ts, sizeof *ts);
        if (!ts) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
        VkResult r = be->vk.vkGetQueryPoolResults(be->dev, gc->queries, 0, n_ts, n_ts * sizeof *ts, ts, sizeof *ts,
                                                  VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
        if (r != VK_SUCCESS) {
            free(ts);
            return vk_fail(r, "vkGetQueryPoolResults");
        }
        const uint64_t mask = be->caps.ts_bits >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << be->caps.ts_bits) - 1);
        if (kind == REC_NODES)
            for (int i = 0; i < gc->n_nodes; i++)
                node_us[i] = (double)((ts[i + 1] - ts[i]) & mask) * (double)be->caps.ts_period * 1e-3;
        else
            *span_us = (double)((ts[1] - ts[0]) & mask) * (double)be->caps.ts_period * 1e-3;
        free(ts);
    }
    return SIFT_OK;
}
