/* The Vulkan backend's graphs: one compute pipeline per kernel and specialization (the kernels:
 * vk_kernel_table, generated from the shader list of meson.build), a plan of dispatches per node
 * (docs/kernels.md) by the op's planner (the table below; the planners in vk_attention.c and
 * vk_model.c), the barriers between nodes, and the whole graph recorded into one command buffer
 * (cached in g->backend_cache until the graph changes), submitted once per compute.
 *
 * Per-dispatch parameters travel as push constants (<= 128 bytes, vk_push.h): tensors as vk_tref
 * (address + chunk shift + view offset, shaders/common.glsl), scratch as raw device addresses.
 * Scratch (vote partials, radix histograms and block counts, attention partials) is one buffer
 * owned by the graph's recording.
 */
#include "vk_internal.h"

#include <stdlib.h>
#include <string.h>

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
        /* matvec_idot declares the integer dot product's capabilities, which a device without the
         * feature may not be given a module with; vk_plan_matmul never picks it there */
        if (k == VK_K_MATVEC_IDOT && !be->caps.int_dot_feature) continue;
        VkShaderModuleCreateInfo mci = {
            .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = vk_kernel_table[k].size, .pCode = vk_kernel_table[k].code};
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
     * default, or required where a profile chose another. (That holds for SPIR-V 1.5, the shaders'
     * --target-env vulkan1.2: from SPIR-V 1.6 on, a pipeline without a required size may run any
     * size the device allows.) Full subgroups where the workgroup is a whole number of the largest
     * subgroups the pipeline may get (get_rows' 64 is not on a device of 128; it uses no subgroup
     * operation): the kernels number invocations by subgroup (backends/vulkan/README.md). */
    const uint32_t local = vk_kernel_table[kernel].local ? vk_kernel_table[kernel].local : spec[0];
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
        return sift_set_error(s, "vulkan: vkCreateComputePipelines (%s) failed: %s", vk_kernel_table[kernel].name, vk_result_name(r));
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

vkb *vk_plan_backend(const plan *pl) { return pl->be; }

VkDeviceSize vk_scratch_take(plan *pl, VkDeviceSize bytes)
{
    VkDeviceSize off = pl->used;
    pl->used += (bytes + 255) & ~(VkDeviceSize)255;
    return off;
}

uint64_t vk_scratch_addr(const plan *pl, VkDeviceSize off) { return pl->emit ? pl->gc->scratch.addr + off : 0; }

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

sift_status vk_dispatch(plan *pl, vk_kernel kernel, const uint32_t spec[VK_NSPEC], const void *push, size_t push_size,
                        uint32_t gx, uint32_t gy, uint32_t gz)
{
    if (!pl->emit || gx == 0 || gy == 0 || gz == 0) return SIFT_OK;
    const vkb *be = pl->be;
    if (gx > be->caps.max_groups[0] || gy > be->caps.max_groups[1] || gz > be->caps.max_groups[2])
        return sift_set_error(SIFT_E_LIMIT, "vulkan: %s needs %u x %u x %u workgroups; the device allows %u x %u x %u",
                              vk_kernel_table[kernel].name, gx, gy, gz, be->caps.max_groups[0], be->caps.max_groups[1], be->caps.max_groups[2]);
    vk_step st = {.kind = STEP_DISPATCH, .groups = {gx, gy, gz}, .push_size = (uint32_t)((push_size + 3) & ~(size_t)3)};
    memcpy(st.push, push, push_size);
    sift_status s = get_pipeline(pl->be, kernel, spec, &st.pipeline);
    if (s != SIFT_OK) return s;
    return add_step(pl, &st);
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

/* ---- the planner of every op the backend runs ---- */

/* Indexed by op, expanded from the op table (vk_internal.h declares each). */
static const vk_planner planners[SIFT_OP_COUNT] = {
#define SIFT_OP(id, name, min_src, max_src, flags) [SIFT_OP_##id] = vk_plan_##name,
#include "ops.def"
#undef SIFT_OP
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
