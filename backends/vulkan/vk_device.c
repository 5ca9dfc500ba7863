/* The Vulkan backend: loader, instance, device choice, validation messages, the vtable.
 *
 * The library never links libvulkan: volk loads libvulkan.so.1 at run time, so the same binary
 * starts on machines without a Vulkan loader or driver (the backend then says it is unavailable).
 * Environment:
 *   SIFT_VULKAN_DEVICE=<index>     use device <index> of vkEnumeratePhysicalDevices (default: the
 *                                  first discrete GPU, else the first device)
 *   SIFT_VULKAN_VALIDATION=1       load VK_LAYER_KHRONOS_validation; every warning and error it
 *                                  reports is counted and sent to the context's log (its
 *                                  sift_context_config.log; without one, stderr)
 *   SIFT_VULKAN_CHUNK_BYTES=<2^n>  split tensors into chunks of at most this many bytes (>= 4096;
 *                                  for testing the split-tensor path on small devices)
 *   SIFT_VULKAN_F16_AS_F32=1       store f16 tensors as f32, as on a device without 16-bit storage
 *   SIFT_VULKAN_ALL_BARRIERS=1     a barrier before every step of a graph, not only where one node
 *                                  depends on another (vk_graph.c node_barriers)
 *   SIFT_VULKAN_TUNE=k=v,...       kernel shapes for tuning runs: score_rows, score_wgs, attn_rows,
 *                                  attn_wgs (rows per cluster step 1..8; workgroup sizes 64..1024,
 *                                  powers of two), smax_stream (the largest D that score_max runs on
 *                                  its streaming kernel, default 32; 1: never), smax_lanes (score_max's
 *                                  lanes per row above that, 1..16, powers of two), select_groups
 *                                  (select's workgroups over all lists, default 1024), groups (target
 *                                  workgroups of the streaming kernels, default 1024), matvec_x
 *                                  (decode products' x: 0 automatic, 1 f32, 2 int8 digits with
 *                                  integer dot products, 3 digits with plain integer arithmetic;
 *                                  vk_model.c vk_matvec_x)
 */
#include "vk_internal.h"
#include "vk_profile.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sift_status vk_fail(VkResult r, const char *call)
{
    sift_status s = SIFT_E_BACKEND;
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY) s = SIFT_E_DEVICE_NOMEM;
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY) s = SIFT_E_NOMEM;
    return sift_set_error(s, "vulkan: %s failed: %s (%d)", call, vk_result_name(r), (int)r);
}

/* ---- the loader, once per process ---- */

static pthread_once_t loader_once = PTHREAD_ONCE_INIT;
static VkResult loader_result = VK_ERROR_INITIALIZATION_FAILED;
static void load_loader(void) { loader_result = volkInitialize(); }

/* ---- validation messages ---- */

/* The validation layer calls back on the thread of the Vulkan call it checks, and every such call
 * runs inside a call the engine makes under the context's lock (or while it opens or closes the
 * context): sift_log finds that context there. A message from a thread that is calling no context
 * (a driver's own thread) goes where sift_log sends it then, the default: stderr. */
static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
    (void)types;
    vkb *be = user;
    atomic_fetch_add(&be->validation_count, 1);
    const bool error = severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    sift_log(error ? SIFT_LOG_ERROR : SIFT_LOG_WARN, "vulkan validation: %s: %s", error ? "error" : "warning",
             data && data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
}

static bool env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static bool has_layer(const char *name, bool *ok_out)
{
    uint32_t n = 0;
    *ok_out = vkEnumerateInstanceLayerProperties(&n, NULL) == VK_SUCCESS;
    if (!*ok_out || n == 0) return false;
    VkLayerProperties *p = calloc(n, sizeof *p);
    if (!p) return false;
    bool found = false;
    VkResult r = vkEnumerateInstanceLayerProperties(&n, p);
    if (r == VK_SUCCESS || r == VK_INCOMPLETE)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(p[i].layerName, name) == 0;
    free(p);
    return found;
}

static bool has_device_ext(VkPhysicalDevice phys, const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(phys, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    if (!p) return false;
    bool found = false;
    VkResult r = vkEnumerateDeviceExtensionProperties(phys, NULL, &n, p);
    if (r == VK_SUCCESS || r == VK_INCOMPLETE)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

static bool has_instance_ext(const char *layer, const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    if (!p) return false;
    bool found = false;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

/* SIFT_VULKAN_TUNE: "key=value,..."; unknown keys and bad values are errors, not silently ignored. */
static sift_status parse_tune(const char *env, vk_tune *t)
{
    static const struct {
        const char *key;
        size_t off;
        uint32_t lo, hi;
        bool pow2;
    } keys[] = {
        {"score_rows", offsetof(vk_tune, score_rows), 1, 8, false},
        {"score_wgs", offsetof(vk_tune, score_wgs), 64, 1024, true},
        {"attn_rows", offsetof(vk_tune, attn_rows), 1, 8, false},
        {"attn_wgs", offsetof(vk_tune, attn_wgs), 64, 1024, true},
        {"smax_lanes", offsetof(vk_tune, smax_lanes), 1, 16, true},
        {"smax_stream", offsetof(vk_tune, smax_stream), 1, SIFT_MAX_HEAD_DIM, false},
        {"select_groups", offsetof(vk_tune, select_groups), 1, 1u << 20, false},
        {"select_warm", offsetof(vk_tune, select_warm), 0, 1, false},
        {"groups", offsetof(vk_tune, groups), 1, 1u << 20, false},
        {"matvec_x", offsetof(vk_tune, matvec_x), 0, 3, false},
    };
    memset(t, 0, sizeof *t);
    if (!env) return SIFT_OK;
    const char *p = env;
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (!eq || eq > end)
            return sift_set_error(SIFT_E_INVALID, "vulkan: SIFT_VULKAN_TUNE='%s': expected key=value pairs", env);
        size_t klen = (size_t)(eq - p), i;
        for (i = 0; i < sizeof keys / sizeof keys[0]; i++)
            if (strlen(keys[i].key) == klen && strncmp(keys[i].key, p, klen) == 0) break;
        char *vend = NULL;
        unsigned long v = strtoul(eq + 1, &vend, 10);
        if (i == sizeof keys / sizeof keys[0] || vend != end || v < keys[i].lo || v > keys[i].hi ||
            (keys[i].pow2 && (v & (v - 1)) != 0))
            return sift_set_error(SIFT_E_INVALID,
                                  "vulkan: SIFT_VULKAN_TUNE='%s': bad entry '%.*s' (keys: score_rows, attn_rows 1..8; "
                                  "score_wgs, attn_wgs powers of two 64..1024; smax_lanes powers of two 1..16; smax_stream 1..%d; "
                                  "select_groups; select_warm 0..1; groups; matvec_x 0..3)",
                                  env, (int)(end - p), p, SIFT_MAX_HEAD_DIM);
        *(uint32_t *)((char *)t + keys[i].off) = (uint32_t)v;
        p = *end ? end + 1 : end;
    }
    return SIFT_OK;
}

/* ---- teardown (also the error path of open: every handle may be null) ---- */

static void vk_destroy(void *p)
{
    vkb *be = p;
    if (!be) return;
    if (be->dev) {
        be->vk.vkDeviceWaitIdle(be->dev);
        vk_pipelines_destroy(be);
        vk_scratch_kept_free(be);
        vk_buf_destroy(be, &be->staging);
        if (be->fence) be->vk.vkDestroyFence(be->dev, be->fence, NULL);
        if (be->pool) be->vk.vkDestroyCommandPool(be->dev, be->pool, NULL);
        be->vk.vkDestroyDevice(be->dev, NULL);
    }
    if (be->messenger) vkDestroyDebugUtilsMessengerEXT(be->instance, be->messenger, NULL);
    if (be->instance) vkDestroyInstance(be->instance, NULL);
    free(be);
}

static int64_t vk_validation_messages(void *p)
{
    vkb *be = p;
    return be ? (int64_t)atomic_load(&be->validation_count) : 0;
}

static bool vk_is_emulated(void *p)
{
    const vkb *be = p;
    return be->caps.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
}

/* VK_EXT_memory_budget's figures: over the device-local heaps, what the driver would still give this
 * process (heapBudget, which takes out what other processes use) less what it already holds
 * (heapUsage, this context's tensors included). */
static sift_status vk_memory_free(void *p, uint64_t *bytes)
{
    const vkb *be = p;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &budget};
    be->get_memory_budget(be->phys, &mp);
    uint64_t sum = 0;
    for (uint32_t h = 0; h < mp.memoryProperties.memoryHeapCount && h < VK_MAX_MEMORY_HEAPS; h++)
        if ((mp.memoryProperties.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            budget.heapBudget[h] > budget.heapUsage[h])
            sum += budget.heapBudget[h] - budget.heapUsage[h];
    *bytes = sum;
    return SIFT_OK;
}

/* Two tables, the same but for memory_free: a device without VK_EXT_memory_budget reports no free
 * memory (the estimate then says it cannot tell) rather than its heap's size, which other programs
 * share. */
#define VK_VTABLE_ENTRIES                                                                                              \
    .name = "vulkan", .destroy = vk_destroy, .supports_op = vk_supports_op, .tensor_alloc = vk_tensor_alloc,           \
    .tensor_free = vk_tensor_free, .tensor_write = vk_tensor_write, .tensor_read = vk_tensor_read,                     \
    .tensor_copy = vk_tensor_copy,                                                                                     \
    .graph_compute = vk_graph_compute, .graph_release = vk_graph_release, .graph_prepare = vk_graph_prepare,           \
    .graph_submit = vk_graph_submit, .sync = vk_sync, .validation_messages = vk_validation_messages,                   \
    .is_emulated = vk_is_emulated
static const sift_backend_vtable vk_vtable = {VK_VTABLE_ENTRIES};
static const sift_backend_vtable vk_vtable_budget = {VK_VTABLE_ENTRIES, .memory_free = vk_memory_free};
#undef VK_VTABLE_ENTRIES

/* ---- device choice ---- */

/* The physical devices of instance, in the API's order, into *devs (freed by the caller). */
static sift_status list_physical(VkInstance instance, VkPhysicalDevice **devs, uint32_t *n)
{
    *devs = NULL;
    *n = 0;
    VkResult r = vkEnumeratePhysicalDevices(instance, n, NULL);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return vk_fail(r, "vkEnumeratePhysicalDevices");
    if (*n == 0) return sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: no Vulkan device");
    *devs = calloc(*n, sizeof **devs);
    if (!*devs) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of memory");
    r = vkEnumeratePhysicalDevices(instance, n, *devs);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || *n == 0) {
        free(*devs);
        *devs = NULL;
        return r != VK_SUCCESS && r != VK_INCOMPLETE ? vk_fail(r, "vkEnumeratePhysicalDevices")
                                                     : sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: no Vulkan device");
    }
    return SIFT_OK;
}

/* "0: name, 1: name" for error messages. */
static void device_list_text(const VkPhysicalDevice *devs, uint32_t n, char *list, size_t cap)
{
    size_t used = 0;
    list[0] = 0;
    for (uint32_t i = 0; i < n && used < cap; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(devs[i], &p);
        int w = snprintf(list + used, cap - used, "%s%u: %s", i ? ", " : "", i, p.deviceName);
        if (w > 0) used += (size_t)w;
    }
}

/* The largest device-local heap (what a device is ranked by, and what sift_device_info reports). */
static VkDeviceSize device_memory(VkPhysicalDevice d)
{
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(d, &mp);
    VkDeviceSize best = 0;
    for (uint32_t h = 0; h < mp.memoryHeapCount; h++)
        if ((mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[h].size > best)
            best = mp.memoryHeaps[h].size;
    return best;
}

/* The device a context opens when given none: SIFT_VULKAN_DEVICE=<index> from the environment,
 * else, of the devices sift can use (vk_caps_query), the best type (sift_vk_type_rank), then the most
 * device-local memory, then the lowest index; device 0 where none is usable (opening it then says
 * why). */
static sift_status default_device(const VkPhysicalDevice *devs, uint32_t n, uint32_t *pick)
{
    *pick = 0;
    const char *env = getenv("SIFT_VULKAN_DEVICE");
    if (env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (*end != 0 || v < 0) return sift_set_error(SIFT_E_INVALID, "vulkan: SIFT_VULKAN_DEVICE='%s' is not a device index", env);
        if (v >= (long)n) {
            char list[512];
            device_list_text(devs, n, list, sizeof list);
            return sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: SIFT_VULKAN_DEVICE=%ld but there %s %u Vulkan device%s (%s)", v,
                                  n == 1 ? "is" : "are", n, n == 1 ? "" : "s", list);
        }
        *pick = (uint32_t)v;
        return SIFT_OK;
    }
    int best_rank = -1;
    VkDeviceSize best_mem = 0;
    sift_status why_not = SIFT_OK; /* the last device's reason, where none can be used */
    for (uint32_t i = 0; i < n; i++) {
        vk_caps caps;
        if ((why_not = vk_caps_query(devs[i], &caps)) != SIFT_OK) continue;
        const int rank = sift_vk_type_rank(caps.props.deviceType);
        const VkDeviceSize mem = device_memory(devs[i]);
        if (rank > best_rank || (rank == best_rank && mem > best_mem)) {
            best_rank = rank;
            best_mem = mem;
            *pick = i;
        }
    }
    return best_rank < 0 && n > 0 ? why_not : SIFT_OK; /* no usable device: none is the default */
}

/* Opens device `requested` (-1: the default), setting be->phys; *index gets its index. */
static sift_status pick_device(vkb *be, int requested, int *index)
{
    VkPhysicalDevice *devs;
    uint32_t n, pick = 0;
    sift_status s = list_physical(be->instance, &devs, &n);
    if (s != SIFT_OK) return s;
    if (requested >= (int64_t)n) {
        char list[512];
        device_list_text(devs, n, list, sizeof list);
        s = sift_set_error(SIFT_E_INVALID, "vulkan: device %d but there %s %u Vulkan device%s (%s)", requested,
                           n == 1 ? "is" : "are", n, n == 1 ? "" : "s", list);
    } else if (requested >= 0) {
        pick = (uint32_t)requested;
    } else {
        s = default_device(devs, n, &pick);
    }
    if (s == SIFT_OK) {
        be->phys = devs[pick];
        *index = (int)pick;
    }
    free(devs);
    return s;
}

static uint32_t find_memory(const VkPhysicalDeviceMemoryProperties *mp, VkMemoryPropertyFlags want,
                            VkMemoryPropertyFlags prefer)
{
    uint32_t found = UINT32_MAX;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
        if ((f & want) != want) continue;
        if ((f & prefer) == prefer) return i;
        if (found == UINT32_MAX) found = i;
    }
    return found;
}

/* The memory type of tensors: the first device-local one, else type 0. */
static uint32_t device_memory_type(const VkPhysicalDeviceMemoryProperties *mp)
{
    const uint32_t t = find_memory(mp, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    return t != UINT32_MAX ? t : find_memory(mp, 0, 0);
}

/* The profile's subgroup size on a device that runs [lo, hi] (powers of two) with `def` its default:
 * the default where the profile allows it, else the largest size both allow (required per pipeline);
 * 0 where there is none. */
static uint32_t profile_subgroup(uint32_t mask, uint32_t lo, uint32_t hi, uint32_t def, bool *required)
{
    *required = false;
    if (!mask || (mask & def)) return def;
    for (uint32_t sz = hi; sz >= lo && sz > 0; sz /= 2)
        if (mask & sz) {
            *required = true;
            return sz;
        }
    return 0;
}

sift_status vk_caps_query(VkPhysicalDevice phys, vk_caps *c)
{
    memset(c, 0, sizeof *c);
    vkGetPhysicalDeviceProperties(phys, &c->props);
    const VkPhysicalDeviceProperties *pp = &c->props;
    if (pp->apiVersion < VK_API_VERSION_1_2)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s supports Vulkan %u.%u; sift needs 1.2", pp->deviceName,
                              VK_API_VERSION_MAJOR(pp->apiVersion), VK_API_VERSION_MINOR(pp->apiVersion));
    const bool v13 = pp->apiVersion >= VK_API_VERSION_1_3;

    VkPhysicalDeviceVulkan13Properties p13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_PROPERTIES};
    VkPhysicalDeviceVulkan12Properties p12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES,
                                              .pNext = v13 ? &p13 : NULL};
    VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES, .pNext = &p12};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p11};
    vkGetPhysicalDeviceProperties2(phys, &p2);

    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = v13 ? &f13 : NULL};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(phys, &f2);
    snprintf(c->driver, sizeof c->driver, "%s", p12.driverInfo[0] ? p12.driverInfo : p12.driverName);

    if (!f12.bufferDeviceAddress)
        return sift_set_error(SIFT_E_UNSUPPORTED,
                              "vulkan: %s lacks bufferDeviceAddress, which sift's shaders use to reach every tensor",
                              pp->deviceName);
    if (!f2.features.shaderInt64)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s lacks shaderInt64 (64-bit addresses in shaders)", pp->deviceName);
    const VkSubgroupFeatureFlags need_sg = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT |
                                           VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_BALLOT_BIT |
                                           VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
    /* the kernels take any power of two from 4 to 128 (rows.glsl's clusters need 4 lanes at most of a
     * subgroup; docs/kernels.md) */
    const uint32_t def = p11.subgroupSize;
    if (!(p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) || (p11.subgroupSupportedOperations & need_sg) != need_sg)
        return sift_set_error(SIFT_E_UNSUPPORTED,
                              "vulkan: %s lacks subgroup basic/vote/arithmetic/ballot/shuffle operations in compute shaders",
                              pp->deviceName);
    if (def < 4 || def > 128 || (def & (def - 1)) != 0)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s has subgroups of %u; sift's kernels take powers of two 4..128",
                              pp->deviceName, def);
    /* llvmpipe reports subgroups of a 32nd of its vector width (LP_NATIVE_VECTOR_WIDTH) but compiles
     * compute shaders to vectors of at most 16 lanes (Mesa's lp_state_cs.c), so above 512 bits its
     * subgroups are part-filled whatever it says of full subgroups, and every kernel that numbers
     * invocations gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID indexes shared memory
     * past its arrays, which llvmpipe keeps on the heap (backends/vulkan/README.md, "Device
     * profiles") */
    if (p12.driverID == VK_DRIVER_ID_MESA_LLVMPIPE && def > 16)
        return sift_set_error(SIFT_E_UNSUPPORTED,
                              "vulkan: %s reports subgroups of %u but fills 16 lanes of each (llvmpipe's compute "
                              "vectors stop at 512 bits); set LP_NATIVE_VECTOR_WIDTH to 512 or less",
                              pp->deviceName, def);
    c->size_control = v13 && f13.subgroupSizeControl && (p13.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                      p13.minSubgroupSize >= 4 && p13.maxSubgroupSize <= 128 && p13.minSubgroupSize <= def &&
                      def <= p13.maxSubgroupSize;
    c->subgroup_min = c->size_control ? p13.minSubgroupSize : def;
    c->subgroup_max = c->size_control ? p13.maxSubgroupSize : def;
    c->full_subgroups = v13 && f13.subgroupSizeControl && f13.computeFullSubgroups;
    c->f16_storage = f11.storageBuffer16BitAccess && !env_flag("SIFT_VULKAN_F16_AS_F32");
    /* OpSDot on packed 4 x int8 (matvec's x digits); the SPIR-V extension needs no device extension
     * on 1.3, where the feature is core (1.2 devices run the float path) */
    c->int_dot_feature = v13 && f13.shaderIntegerDotProduct;
    c->int_dot = c->int_dot_feature;
    c->max_shared = pp->limits.maxComputeSharedMemorySize;
    c->max_invocations = pp->limits.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++) c->max_groups[i] = pp->limits.maxComputeWorkGroupCount[i];
    c->max_allocs = pp->limits.maxMemoryAllocationCount;
    c->storage_range = pp->limits.maxStorageBufferRange;
    c->ts_period = pp->limits.timestampPeriod;
    /* most kernels run workgroups of 256 and matvec's sums fill 32 KiB at 8 tokens; Vulkan's minima
     * are 128 and 16 KiB, real devices have at least these */
    if (c->max_invocations < 256 || c->max_shared < 32768)
        return sift_set_error(SIFT_E_UNSUPPORTED,
                              "vulkan: %s runs workgroups of %u invocations and %u bytes of shared memory; sift needs "
                              "256 and 32768",
                              pp->deviceName, c->max_invocations, c->max_shared);

    /* queue: a compute family, preferably with timestamps */
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, NULL);
    VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
    if (!qf) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of memory");
    vkGetPhysicalDeviceQueueFamilyProperties(phys, &nq, qf);
    uint32_t fam = UINT32_MAX;
    for (uint32_t i = 0; i < nq; i++) {
        if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || qf[i].queueCount == 0) continue;
        if (fam == UINT32_MAX || (qf[fam].timestampValidBits == 0 && qf[i].timestampValidBits > 0)) fam = i;
    }
    if (fam != UINT32_MAX) c->ts_bits = qf[fam].timestampValidBits;
    free(qf);
    if (fam == UINT32_MAX) return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s has no compute queue", pp->deviceName);
    c->qfamily = fam;

    /* the profile narrows what the device reports */
    const char *pname = getenv("SIFT_VULKAN_PROFILE");
    c->subgroup = def;
    if (pname && *pname) {
        const vk_profile *pr = vk_profile_find(pname);
        if (!pr) {
            char names[128];
            vk_profile_names(names, sizeof names);
            return sift_set_error(SIFT_E_INVALID, "vulkan: SIFT_VULKAN_PROFILE='%s' is not a profile (%s)", pname, names);
        }
        c->profile = pr->name;
        c->subgroup = profile_subgroup(pr->subgroups, c->subgroup_min, c->subgroup_max, def, &c->require_subgroup);
        if (c->subgroup == 0)
            return sift_set_error(SIFT_E_UNSUPPORTED,
                                  "vulkan: profile %s runs subgroups of other sizes than %s's %u..%u (on lavapipe, "
                                  "LP_NATIVE_VECTOR_WIDTH=<32 x size> sets its size, 4 to 16)",
                                  pr->name, pp->deviceName, c->subgroup_min, c->subgroup_max);
        if (pr->subgroups) { /* the sizes both allow */
            while (!(pr->subgroups & c->subgroup_min)) c->subgroup_min *= 2;
            while (!(pr->subgroups & c->subgroup_max)) c->subgroup_max /= 2;
        }
        if (pr->max_shared && pr->max_shared < c->max_shared) c->max_shared = pr->max_shared;
        if (pr->max_invocations && pr->max_invocations < c->max_invocations) c->max_invocations = pr->max_invocations;
        if (pr->storage_range && pr->storage_range < c->storage_range) c->storage_range = pr->storage_range;
        if (pr->no_f16_storage) c->f16_storage = false;
        if (pr->no_timestamps) c->ts_bits = 0;
        if (pr->no_int_dot) c->int_dot = false;
        /* no_f16_arith, no_int8_storage, no_int64_atomics: the backend enables none of these */
    }
    if (c->require_subgroup && c->subgroup * p13.maxComputeWorkgroupSubgroups < c->max_invocations)
        c->max_invocations = c->subgroup * p13.maxComputeWorkgroupSubgroups;

    /* chunks: the largest power of two within one allocation, one buffer, one storage buffer's
     * range and the heap (a device reporting a narrow range gets tensors split at it, which every
     * kernel reads through the chunk table: common.glsl saddr) */
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(phys, &mp);
    c->heap_bytes = mp.memoryHeaps[mp.memoryTypes[device_memory_type(&mp)].heapIndex].size;
    c->max_alloc = p11.maxMemoryAllocationSize;
    VkDeviceSize limit = c->max_alloc;
    if (v13 && p13.maxBufferSize && p13.maxBufferSize < limit) limit = p13.maxBufferSize;
    if (c->storage_range < limit) limit = c->storage_range;
    if (c->heap_bytes < limit) limit = c->heap_bytes;
    unsigned shift = 12;
    while (shift < 62 && ((VkDeviceSize)1 << (shift + 1)) <= limit) shift++;
    const char *cb = getenv("SIFT_VULKAN_CHUNK_BYTES");
    if (cb && *cb) {
        char *end = NULL;
        unsigned long long v = strtoull(cb, &end, 10);
        if (*end != 0 || v < 4096 || (v & (v - 1)) != 0)
            return sift_set_error(SIFT_E_INVALID, "vulkan: SIFT_VULKAN_CHUNK_BYTES='%s' is not a power of two >= 4096", cb);
        unsigned want = 0;
        while (((unsigned long long)1 << want) < v) want++;
        if (want < shift) shift = want;
    }
    c->chunk_shift = shift;
    return SIFT_OK;
}

/* ---- open ---- */

static sift_status check_loader(void)
{
    pthread_once(&loader_once, load_loader);
    if (loader_result != VK_SUCCESS)
        return sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: no Vulkan loader (libvulkan.so.1) found");
    if (volkGetInstanceVersion() < VK_API_VERSION_1_2)
        return sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: the Vulkan loader is version %u.%u; sift needs 1.2",
                              VK_API_VERSION_MAJOR(volkGetInstanceVersion()), VK_API_VERSION_MINOR(volkGetInstanceVersion()));
    return SIFT_OK;
}

static sift_device_type device_type(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return SIFT_DEVICE_DISCRETE_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return SIFT_DEVICE_INTEGRATED_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return SIFT_DEVICE_VIRTUAL_GPU;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return SIFT_DEVICE_EMULATED;
    default: return SIFT_DEVICE_OTHER;
    }
}

/* What sift would use of device `index`, whether it can, and why a context does not open it by
 * default (sift_vulkan_device_info, filled whole). */
static void describe_use(const VkPhysicalDevice *devs, uint32_t n, uint32_t index, sift_vulkan_device_info *out)
{
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    vk_caps caps;
    if (vk_caps_query(devs[index], &caps) != SIFT_OK) {
        out->unusable = 1;
        snprintf(out->why_not, sizeof out->why_not, "%s", sift_last_error());
        return;
    }
    out->subgroup_size = caps.subgroup;
    out->subgroup_min = caps.subgroup_min;
    out->subgroup_max = caps.subgroup_max;
    out->shared_memory_bytes = caps.max_shared;
    out->max_workgroup_size = caps.max_invocations;
    out->max_buffer_range = caps.storage_range;
    out->features = (caps.f16_storage ? SIFT_VULKAN_FEATURE_F16_STORAGE : 0u) |
                    (caps.ts_bits ? SIFT_VULKAN_FEATURE_TIMESTAMPS : 0u) |
                    (caps.size_control ? SIFT_VULKAN_FEATURE_SUBGROUP_SIZE_CONTROL : 0u) |
                    (caps.full_subgroups ? SIFT_VULKAN_FEATURE_FULL_SUBGROUPS : 0u);
    if (caps.profile) snprintf(out->profile, sizeof out->profile, "%s", caps.profile);
    uint32_t pick = 0;
    if (default_device(devs, n, &pick) != SIFT_OK) {
        snprintf(out->why_not, sizeof out->why_not, "%s", sift_last_error());
    } else if (pick == index) {
        out->why_not[0] = 0;
    } else if (getenv("SIFT_VULKAN_DEVICE") && *getenv("SIFT_VULKAN_DEVICE")) {
        snprintf(out->why_not, sizeof out->why_not, "SIFT_VULKAN_DEVICE chooses device %u", pick);
    } else {
        VkPhysicalDeviceProperties p, q;
        vkGetPhysicalDeviceProperties(devs[index], &p);
        vkGetPhysicalDeviceProperties(devs[pick], &q);
        const bool by_type = sift_vk_type_rank(q.deviceType) != sift_vk_type_rank(p.deviceType);
        snprintf(out->why_not, sizeof out->why_not, "device %u (%.120s, %s) comes first: %s", pick, q.deviceName,
                 sift_vk_type_text(q.deviceType),
                 by_type ? "its type ranks higher (discrete, integrated, virtual GPU, other, CPU emulation)"
                         : device_memory(devs[pick]) != device_memory(devs[index]) ? "more memory" : "a lower index");
    }
}

/* Device `index` of a listing instance: its sift_device_info (info) and what sift would use of it
 * (use); either may be NULL, both NULL: only *n, the count. */
static sift_status list_devices(int index, sift_device_info *info, sift_vulkan_device_info *use, int *n)
{
    *n = 0;
    sift_status s = check_loader();
    if (s != SIFT_OK) return s;
    VkInstanceCreateFlags iflags = 0;
    const char *exts[1];
    uint32_t n_exts = 0;
    if (has_instance_ext(NULL, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        exts[n_exts++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        iflags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "sift",
                                   .pEngineName = "sift", .apiVersion = VK_API_VERSION_1_3};
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .flags = iflags,
                                      .pApplicationInfo = &app, .enabledExtensionCount = n_exts,
                                      .ppEnabledExtensionNames = exts};
    VkInstance instance = VK_NULL_HANDLE;
    VkResult r = vkCreateInstance(&ici, NULL, &instance);
    if (r != VK_SUCCESS) {
        s = r == VK_ERROR_INCOMPATIBLE_DRIVER ? sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: no Vulkan device (the Vulkan loader found no driver)")
                                              : vk_fail(r, "vkCreateInstance");
        return s == SIFT_E_BACKEND ? SIFT_E_UNAVAILABLE : s;
    }
    volkLoadInstanceOnly(instance);
    VkPhysicalDevice *devs = NULL;
    uint32_t count = 0;
    s = list_physical(instance, &devs, &count);
    if (s == SIFT_OK) *n = (int)count;
    if (s == SIFT_OK && (info || use) && (index < 0 || index >= (int)count))
        s = sift_set_error(SIFT_E_INVALID, "vulkan: device %d (there %s %u)", index, count == 1 ? "is" : "are", count);
    if (s == SIFT_OK && info) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(devs[index], &p);
        memset(info, 0, sizeof *info);
        snprintf(info->name, sizeof info->name, "%s", p.deviceName);
        info->type = device_type(p.deviceType);
        info->memory_bytes = device_memory(devs[index]);
        /* a bad SIFT_VULKAN_DEVICE makes no device the default; opening with -1 then says why */
        uint32_t pick = 0;
        info->is_default = default_device(devs, count, &pick) == SIFT_OK && pick == (uint32_t)index;
    }
    if (s == SIFT_OK && use) describe_use(devs, count, (uint32_t)index, use);
    free(devs);
    vkDestroyInstance(instance, NULL);
    return s;
}

sift_status sift_backend_vulkan_devices(int index, sift_device_info *info, int *n)
{
    return list_devices(index, info, NULL, n);
}

sift_status sift_vulkan_device_get_info(int index, sift_vulkan_device_info *out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_vulkan_device_get_info: out is NULL");
    const size_t size = out->struct_size;
    if (size < offsetof(sift_vulkan_device_info, unusable) + sizeof out->unusable || size > sizeof *out)
        return sift_set_error(SIFT_E_INVALID, "sift_vulkan_device_get_info: struct_size %zu (set it to sizeof, %zu here)",
                              size, sizeof *out);
    sift_vulkan_device_info full;
    int n = 0;
    memset(out, 0, size);
    out->struct_size = size;
    sift_status s = list_devices(index, NULL, &full, &n);
    if (s != SIFT_OK) return s;
    memcpy(out, &full, size);
    out->struct_size = size;
    return SIFT_OK;
}

sift_status sift_backend_vulkan_open(const sift_backend_open_args *args, void **out, const sift_backend_vtable **vt,
                                     char *name, size_t name_len, int *device)
{
    *out = NULL;
    *vt = &vk_vtable;
    sift_status ls = check_loader();
    if (ls != SIFT_OK) return ls;

    vkb *be = calloc(1, sizeof *be);
    if (!be) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of memory");
    atomic_init(&be->validation_count, 0);
    sift_status s = parse_tune(getenv("SIFT_VULKAN_TUNE"), &be->tune);
    VkResult r;
    if (s != SIFT_OK) goto fail;

    /* instance */
    const bool validation = env_flag("SIFT_VULKAN_VALIDATION");
    const char *layers[1] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[2];
    uint32_t n_exts = 0;
    VkInstanceCreateFlags iflags = 0;
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_message,
        .pUserData = be,
    };
    if (validation) {
        bool enum_ok;
        if (!has_layer(layers[0], &enum_ok)) {
            s = sift_set_error(SIFT_E_UNAVAILABLE,
                               "vulkan: SIFT_VULKAN_VALIDATION is set but the validation layer VK_LAYER_KHRONOS_validation "
                               "is not installed%s",
                               enum_ok ? "" : " (vkEnumerateInstanceLayerProperties failed)");
            goto fail;
        }
        if (!has_instance_ext(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
            !has_instance_ext(layers[0], VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
            s = sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: SIFT_VULKAN_VALIDATION is set but %s is missing",
                               VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
            goto fail;
        }
        exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    }
    if (has_instance_ext(NULL, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        exts[n_exts++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        iflags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "sift",
        .pEngineName = "sift",
        .apiVersion = VK_API_VERSION_1_3,
    };
    VkInstanceCreateInfo ici = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = validation ? &mci : NULL,
        .flags = iflags,
        .pApplicationInfo = &app,
        .enabledLayerCount = validation ? 1u : 0u,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = n_exts,
        .ppEnabledExtensionNames = exts,
    };
    r = vkCreateInstance(&ici, NULL, &be->instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
        s = sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: no Vulkan device (the Vulkan loader found no driver)");
        goto fail;
    }
    if (r != VK_SUCCESS) {
        s = vk_fail(r, "vkCreateInstance");
        if (s == SIFT_E_BACKEND) s = SIFT_E_UNAVAILABLE;
        goto fail;
    }
    volkLoadInstanceOnly(be->instance);
    if (validation) {
        r = vkCreateDebugUtilsMessengerEXT(be->instance, &mci, NULL, &be->messenger);
        if (r != VK_SUCCESS) {
            s = vk_fail(r, "vkCreateDebugUtilsMessengerEXT");
            goto fail;
        }
    }

    /* device choice and what it offers */
    s = pick_device(be, args->device, device);
    if (s != SIFT_OK) goto fail;
    s = vk_caps_query(be->phys, &be->caps);
    if (s != SIFT_OK) goto fail;
    const vk_caps *caps = &be->caps;
    const uint32_t fam = caps->qfamily;

    /* memory */
    vkGetPhysicalDeviceMemoryProperties(be->phys, &be->memprops);
    const VkPhysicalDeviceMemoryProperties mp = be->memprops;
    be->mem_device = device_memory_type(&mp);
    be->mem_host = find_memory(&mp, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                               VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    /* the offload pools: host-visible, coherent, in system memory (a heap that is not device-local)
     * where the device has one; else (lavapipe, integrated GPUs: one heap) any host-visible type */
    be->mem_offload = UINT32_MAX;
    for (uint32_t i = 0; i < mp.memoryTypeCount && be->mem_offload == UINT32_MAX; i++) {
        const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags, want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                                                                 VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        if ((f & want) == want && !(mp.memoryHeaps[mp.memoryTypes[i].heapIndex].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT))
            be->mem_offload = i;
    }
    be->offload_separate = be->mem_offload != UINT32_MAX;
    if (!be->offload_separate) be->mem_offload = be->mem_host;
    if (be->mem_device == UINT32_MAX || be->mem_host == UINT32_MAX) {
        s = sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s has no usable %s memory", caps->props.deviceName,
                           be->mem_device == UINT32_MAX ? "device" : "host-visible coherent");
        goto fail;
    }

    /* device */
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = fam, .queueCount = 1, .pQueuePriorities = &prio};
    const bool size_control = caps->full_subgroups || caps->require_subgroup;
    VkPhysicalDeviceVulkan13Features e13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .subgroupSizeControl = size_control,
                                            .computeFullSubgroups = caps->full_subgroups,
                                            .shaderIntegerDotProduct = caps->int_dot_feature};
    VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = size_control || caps->int_dot_feature ? &e13 : NULL,
                                            .bufferDeviceAddress = VK_TRUE};
    VkPhysicalDeviceFeatures2 e2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &e12};
    e2.features.shaderInt64 = VK_TRUE;
    /* the free memory the estimate compares with (vk_memory_free), where the device tells it */
    const char *dev_exts[1];
    uint32_t n_dev_exts = 0;
    const bool memory_budget = has_device_ext(be->phys, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    if (memory_budget) dev_exts[n_dev_exts++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &e2,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = n_dev_exts,
                              .ppEnabledExtensionNames = n_dev_exts ? dev_exts : NULL};
    r = vkCreateDevice(be->phys, &dci, NULL, &be->dev);
    if (r != VK_SUCCESS) {
        s = vk_fail(r, "vkCreateDevice");
        goto fail;
    }
    /* this instance's entry point: volk's global one belongs to the context opened last */
    if (memory_budget)
        be->get_memory_budget = (PFN_vkGetPhysicalDeviceMemoryProperties2)vkGetInstanceProcAddr(
            be->instance, "vkGetPhysicalDeviceMemoryProperties2");
    volkLoadDeviceTable(&be->vk, be->dev);
    be->vk.vkGetDeviceQueue(be->dev, fam, 0, &be->queue);

    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = fam};
    r = be->vk.vkCreateCommandPool(be->dev, &pci, NULL, &be->pool);
    if (r != VK_SUCCESS) {
        s = vk_fail(r, "vkCreateCommandPool");
        goto fail;
    }
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = be->pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    r = be->vk.vkAllocateCommandBuffers(be->dev, &cai, &be->xfer_cb);
    if (r != VK_SUCCESS) {
        s = vk_fail(r, "vkAllocateCommandBuffers");
        goto fail;
    }
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    r = be->vk.vkCreateFence(be->dev, &fci, NULL, &be->fence);
    if (r != VK_SUCCESS) {
        s = vk_fail(r, "vkCreateFence");
        goto fail;
    }
    VkDeviceSize staging = (VkDeviceSize)16 << 20;
    if (staging > caps->max_alloc / 4) staging = caps->max_alloc / 4;
    s = vk_buf_create(be, staging, VK_MEM_STAGING, &be->staging, "the staging buffer");
    if (s != SIFT_OK) goto fail;
    s = vk_pipelines_init(be);
    if (s != SIFT_OK) goto fail;

    const VkPhysicalDeviceProperties *pp = &caps->props;
    char profile[64] = "";
    if (caps->profile) snprintf(profile, sizeof profile, ", profile %s", caps->profile);
    snprintf(name, name_len, "%s (Vulkan %u.%u, driver %s, %s%s, subgroup %u%s)", pp->deviceName,
             VK_API_VERSION_MAJOR(pp->apiVersion), VK_API_VERSION_MINOR(pp->apiVersion), caps->driver,
             caps->f16_storage ? "f16 storage" : "f16 stored as f32", caps->int_dot ? ", integer dot products" : "",
             caps->subgroup, profile);
    *out = be;
    *vt = be->get_memory_budget ? &vk_vtable_budget : &vk_vtable;
    return SIFT_OK;

fail:
    vk_destroy(be);
    return s;
}
