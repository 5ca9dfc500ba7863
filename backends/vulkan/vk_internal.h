/* The Vulkan backend's private declarations (device, memory, graphs). Not part of the engine. */
#ifndef SIFT_VK_INTERNAL_H
#define SIFT_VK_INTERNAL_H

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include "backend.h"

#include <stdatomic.h>
#include <volk.h>

#include "vk_names.h" /* vk_result_name, sift_vk_type_rank, sift_vk_type_text */

/* The planners' shared helpers: return a failed status at once; sizes in workgroups. */
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        sift_status s_ = (x);                                                                                          \
        if (s_ != SIFT_OK) return s_;                                                                                  \
    } while (0)

static inline uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }
static inline uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static inline uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

/* The compute kernels, one pipeline (per specialization) each: shaders/<name>.comp. The shader list
 * of backends/vulkan/meson.build is the only list of them: gen_kernels.py makes the enum vk_kernel
 * from it (VK_K_<NAME> per shader, in the list's order, and VK_K_COUNT) and the table below. */
#include "backends/vulkan/vk_kernels.h"

/* A kernel's SPIR-V, its name, and the workgroup size it declares (0: specialization constant 0,
 * WGS, gives it), indexed by vk_kernel (generated: vk_kernels.c). */
typedef struct vk_kernel_code {
    const uint32_t *code;
    size_t size;
    const char *name;
    uint32_t local;
} vk_kernel_code;
extern const vk_kernel_code vk_kernel_table[VK_K_COUNT];

/* Specialization constant ids (shaders/rows.glsl, attend.comp, score.comp; score_max.comp uses WGS, D, F16,
 * GH (its group G), ALIGNED and I8). */
enum {
    VK_SC_WGS = 0, VK_SC_D, VK_SC_F16, VK_SC_LANES, VK_SC_GH, VK_SC_ROWS, VK_SC_VP, VK_SC_ALIGNED, VK_SC_DENSE, VK_SC_ROPE,
    VK_SC_GMAX, /* score.comp: score_max */
    VK_SC_I8,   /* score_max.comp: an int8 K cache (rows of D + 4 bytes) */
    VK_NSPEC
};
/* ... and of the model kernels (shaders/weights.glsl, matvec.comp, matmul.comp, eltwise.comp, kv_write.comp,
 * rmsnorm.comp) */
enum { VK_SC_M_WGS = 0, VK_SC_M_WT, VK_SC_M_NT, VK_SC_M_R, VK_SC_M_WALIGN, VK_SC_M_XALIGN, VK_SC_M_U, VK_SC_M_MODE };

#define VK_PUSH_MAX 128u
/* Scratch buffers the backend keeps from released graphs (vk_graph.c scratch_get). */
#define VK_SCRATCH_KEPT 4

typedef struct vk_pipe {
    vk_kernel kernel;
    uint32_t spec[VK_NSPEC];
    VkPipeline pipeline;
} vk_pipe;

/* One VkBuffer with its own memory and device address (and host mapping for staging). */
typedef struct vk_buf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceAddress addr;
    VkDeviceSize size;
    VkDeviceSize mem_bytes; /* device memory counted in vkb.used_bytes */
    void *map;
} vk_buf;

/* The chunk table of a paged view of two pools (vk_kv_ref): the device pool's chunk addresses, then
 * the host pool's, so that one TRef reaches both (common.glsl kv_row). Kept by the host pool. */
typedef struct vk_joint_table {
    vk_buf buf;
    uint64_t *addrs; /* the entries, to recognise the device pool they were made for */
    uint32_t n, first_host;
} vk_joint_table;

/* A tensor's storage: chunks of 2^shift bytes (the last one shorter). One chunk: shift = 0 and no
 * table; otherwise table holds the chunks' device addresses for the shaders (common.glsl). */
typedef struct vk_tensor {
    int n_chunks;
    vk_buf *chunks;
    vk_buf table;
    unsigned shift;
    VkDeviceSize chunk_bytes;  /* 2^shift for split tensors, the one chunk's size otherwise */
    VkDeviceSize dev_bytes;    /* bytes of storage on the device */
    bool widened;              /* an f16 tensor stored as f32 (device without 16-bit storage) */
    bool unaligned;            /* a chunk address not 16-byte aligned (never seen; forces the slow loads) */
    uint32_t planar_k;          /* q8_0 / q4_0: the values per row, each row stored planar (vk_memory.c); else 0 */
    bool host;                 /* chunks in host-visible memory (sift_tensor_create_host), mapped */
    sift_dtype dtype;          /* the owning tensor's element type */
    vk_joint_table *joints;    /* a host pool's tables with the device pools it is viewed with */
    int n_joints;
} vk_tensor;

/* What the shaders get for a tensor (common.glsl TRef). */
typedef struct vk_tref {
    uint64_t addr;
    uint64_t meta; /* shift << 56 | byte offset of the first element in the storage */
} vk_tref;

/* What the shaders get for a K/V tensor, paged or not (common.glsl KVRef and kv_row). */
typedef struct vk_kvref {
    vk_tref t;       /* the rows' storage (a paged view: its pool) */
    vk_tref pages;   /* the page table i32 [n_pages]; addr 0 when not paged */
    uint32_t rows;   /* logical rows per KV head */
    uint32_t prow;   /* physical rows per KV head */
    uint32_t pshift; /* bits 0..7: log2 of the page size; bits 8..31: with two pools, the chunk of
                      * t's table where the host pool's begin (0: one pool) */
    uint32_t npages; /* pages of the pool (of both pools: the host pool's rows follow prow) */
} vk_kvref;

/* Kernel shape choices; 0 = automatic. Set from SIFT_VULKAN_TUNE="key=value,..." (vk_device.c). */
typedef struct vk_tune {
    uint32_t score_rows, score_wgs; /* rows per cluster step, workgroup size of score.comp */
    uint32_t attn_rows, attn_wgs;   /* the same for attend.comp */
    uint32_t smax_lanes;            /* score_max on score.comp (D above smax_stream): the most lanes per K row */
    uint32_t smax_stream;           /* score_max: the largest D for score_max.comp (0: 32; below 8: never) */
    uint32_t select_groups;         /* select: target workgroups over all lists (0: 1024) */
    uint32_t select_warm;           /* select: 1 starts a node given a warm state warm (sift_op_select_warm);
                                     * 0, the default, selects in full (on an H100 the warm start's two
                                     * dispatches and the six skipped ones cost more than it saved) */
    uint32_t groups;                /* target workgroups of the streaming kernels (splits, tiles) */
    uint32_t matvec_x;              /* matvec's x: 0 automatic (VK_MATVEC_X_DOT where the device has
                                     * integer dot products, else VK_MATVEC_X_FLOAT), else a vk_matvec_x
                                     * (vk_model.c), for timing the paths side by side */
} vk_tune;

/* What the planners and pipelines may use of the device, filled once at open (vk_caps_query in
 * vk_device.c): what the device reports, narrowed by a profile (SIFT_VULKAN_PROFILE, vk_profile.h)
 * and by the environment's test switches. Nothing else in the backend reads the device's limits. */
typedef struct vk_caps {
    VkPhysicalDeviceProperties props;
    char driver[256];               /* driverInfo, else driverName */
    const char *profile;            /* the profile's name, or NULL for the device as it is */
    uint32_t subgroup;              /* the subgroup size of every pipeline */
    uint32_t subgroup_min, subgroup_max; /* the sizes the device runs compute at (size control) */
    bool size_control;              /* subgroupSizeControl, with compute in requiredSubgroupSizeStages */
    bool require_subgroup;          /* subgroup is not the device's default: every pipeline requires it */
    bool full_subgroups;            /* VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT usable */
    uint32_t max_shared;            /* bytes of shared memory per workgroup */
    uint32_t max_invocations;       /* per workgroup */
    uint32_t max_groups[3];
    uint32_t max_allocs;
    VkDeviceSize storage_range;     /* maxStorageBufferRange */
    VkDeviceSize heap_bytes;        /* the device-local heap */
    VkDeviceSize max_alloc;         /* one allocation (maxMemoryAllocationSize) */
    unsigned chunk_shift;           /* tensors split into chunks of 2^chunk_shift bytes */
    bool f16_storage;               /* f16 tensors kept as halves (else widened to f32) */
    bool int_dot_feature;           /* shaderIntegerDotProduct (Vulkan 1.3), enabled on the device whatever
                                     * the profile, so that the matvec_idot kernel's module is valid */
    bool int_dot;                   /* ... and not turned off by the profile: matvec's integer dot products */
    uint32_t qfamily;               /* the compute queue family */
    uint32_t ts_bits;               /* timestampValidBits of that family (0: no timestamps) */
    float ts_period;                /* ns per tick */
} vk_caps;

/* Fills caps for phys (instance functions loaded). SIFT_E_UNSUPPORTED naming what the device
 * lacks (or what the profile needs that it lacks); SIFT_E_INVALID for a bad SIFT_VULKAN_PROFILE or
 * SIFT_VULKAN_CHUNK_BYTES. */
sift_status vk_caps_query(VkPhysicalDevice phys, vk_caps *caps);

typedef struct vkb {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkDevice dev;
    struct VolkDeviceTable vk;
    VkQueue queue;
    vk_caps caps;

    VkPhysicalDeviceMemoryProperties memprops;
    /* vkGetPhysicalDeviceMemoryProperties2 of this instance where the device has VK_EXT_memory_budget
     * (vk_memory_free), else NULL */
    PFN_vkGetPhysicalDeviceMemoryProperties2 get_memory_budget;
    uint32_t mem_device, mem_host;  /* memory type indices */
    /* host memory the shaders read in place (sift_tensor_create_host): host-visible and coherent,
     * in a heap that is not device-local where there is one (offload_separate) */
    uint32_t mem_offload;
    bool offload_separate;
    uint32_t n_allocs;
    VkDeviceSize used_bytes;        /* device memory this context holds */
    vk_tune tune;

    VkCommandPool pool;
    VkCommandBuffer xfer_cb;
    VkFence fence;
    bool pending;                   /* a graph run submitted without waiting is in flight (vk_sync) */
    vk_buf staging;
    VkPipelineLayout layout;
    VkShaderModule modules[VK_K_COUNT];
    vk_pipe *pipes;
    int n_pipes, cap_pipes;
    vk_buf scratch_kept[VK_SCRATCH_KEPT]; /* released graphs' scratch buffers, for the next graphs (vk_graph.c) */
    int n_scratch_kept;
    atomic_llong validation_count;
} vkb;

/* ---- helpers shared by the backend's files ---- */

/* Turns a failed VkResult into a sift status and message naming the call. */
sift_status vk_fail(VkResult r, const char *call);

/* What a buffer is for: device storage (shaders, transfers), the staging buffer (host-visible,
 * transfers only), or storage in host memory that the shaders read (host-visible, mapped). */
typedef enum { VK_MEM_DEVICE, VK_MEM_STAGING, VK_MEM_OFFLOAD } vk_mem_kind;
sift_status vk_buf_create(vkb *be, VkDeviceSize size, vk_mem_kind kind, vk_buf *b, const char *what);
void vk_buf_destroy(vkb *be, vk_buf *b);

/* Starts be->xfer_cb; vk_submit_wait ends, submits and waits for it. */
sift_status vk_begin(vkb *be, VkCommandBuffer cb);
sift_status vk_submit_wait(vkb *be, VkCommandBuffer cb);
/* Submits already ended command buffers in order (first may be VK_NULL_HANDLE: none) and waits
 * for them; without wait they stay in flight until vk_sync (which every later use of the queue,
 * the transfer command buffer or tensor memory calls first). */
sift_status vk_submit_recorded(vkb *be, VkCommandBuffer first, VkCommandBuffer cb, bool wait);
sift_status vk_sync(void *be);
/* The one barrier used between every two steps: compute/transfer writes before compute/transfer
 * reads and writes. */
void vk_barrier(vkb *be, VkCommandBuffer cb);

sift_status vk_tensor_alloc(void *be, sift_tensor *t);
void vk_tensor_free(void *be, sift_tensor *t);
sift_status vk_tensor_write(void *be, sift_tensor *t, size_t offset, const void *src, size_t bytes);
sift_status vk_tensor_read(void *be, const sift_tensor *t, size_t offset, void *dst, size_t bytes);
/* The vtable's tensor_copy: buffer copies, split at chunk boundaries, one submission. */
sift_status vk_tensor_copy(void *be, const sift_copy_region *regions, size_t n);
/* The shader view of an op operand (views included). Fails for a view that reinterprets a widened
 * f16 tensor as another type. */
sift_status vk_tensor_ref(const sift_tensor *t, vk_tref *out);
/* The shader view of a K/V tensor [Hkv][rows][D] (a paged view included): the one host-side place
 * that passes paging (page table address, page shift, pool rows) to the kernels. */
sift_status vk_kv_ref(vkb *be, const sift_tensor *t, vk_kvref *out);
/* The device address of byte `byte` of t (from its first element), resolved through its chunks: for
 * a scalar the kernels read directly (a predicate flag). The 4 bytes there lie in one chunk. */
sift_status vk_tensor_addr(const sift_tensor *t, uint64_t byte, uint64_t *out);
/* True when t's first element is 16-byte aligned on the device (the kernels' vector loads). */
bool vk_rows_aligned(const sift_tensor *t);
/* True when t is stored as halves on the device. */
bool vk_tensor_is_f16(const sift_tensor *t);

/* Planning a graph (vk_graph.c): the planners (vk_attention.c, vk_model.c) use these. Planning runs twice,
 * once to size the scratch buffer and once to emit the steps, so it must take the same scratch both
 * times. */
typedef struct plan plan;
vkb *vk_plan_backend(const plan *pl);
/* bytes of the graph's scratch buffer: an offset into it, and its device address (0 when sizing) */
VkDeviceSize vk_scratch_take(plan *pl, VkDeviceSize bytes);
uint64_t vk_scratch_addr(const plan *pl, VkDeviceSize off);
/* one dispatch of a kernel with its specialization and push constants */
sift_status vk_dispatch(plan *pl, vk_kernel kernel, const uint32_t spec[VK_NSPEC], const void *push, size_t push_size,
                        uint32_t gx, uint32_t gy, uint32_t gz);
/* writes size bytes (a multiple of 4, at most 65536) into the scratch buffer at off at the start of
 * every run (data fixed when the graph is planned) */
sift_status vk_scratch_update(plan *pl, VkDeviceSize off, const void *data, size_t size);
/* An op's planner: node n's dispatches, scratch and scratch updates; the attention ops' in
 * vk_attention.c, the transformer ops' in vk_model.c. */
typedef sift_status (*vk_planner)(plan *pl, const sift_node *n);
/* Every op's planner, vk_plan_<name> for op <name> of the op table (engine/ops.def), declared from
 * it here and tabled from it in vk_graph.c, so an op without one does not build. Ops that share a
 * planner are mapped to it by a #define. */
#define vk_plan_gather_attend vk_plan_attend
#define vk_plan_dense_attend vk_plan_attend
#define vk_plan_causal_attend vk_plan_attend
#define vk_plan_causal_attend_sparse vk_plan_attend
#define vk_plan_score_max vk_plan_score
#define vk_plan_sel_cache_check vk_plan_sel_cache
#define vk_plan_rmsnorm vk_plan_norm
#define vk_plan_layernorm vk_plan_norm
#define vk_plan_swiglu vk_plan_eltwise
#define vk_plan_add vk_plan_eltwise
#define vk_plan_silu vk_plan_eltwise
#define SIFT_OP(id, name, min_src, max_src, flags) sift_status vk_plan_##name(plan *pl, const sift_node *n);
#include "ops.def"
#undef SIFT_OP
/* Whether the planner table has an entry for n's op (the vtable's supports_op). */
bool vk_supports_op(void *be, const sift_node *n);

sift_status vk_graph_compute(void *be, sift_graph *g, double *node_us, double *span_us);
sift_status vk_graph_prepare(void *be, sift_graph *g);
sift_status vk_graph_submit(void *be, sift_graph *g);
void vk_graph_release(void *be, sift_graph *g);
sift_status vk_pipelines_init(vkb *be);
void vk_pipelines_destroy(vkb *be);
/* Frees the scratch buffers kept from released graphs. */
void vk_scratch_kept_free(vkb *be);

#endif
