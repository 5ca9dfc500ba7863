/* Names of Vulkan values, shared by the backend and the bandwidth probe (bw_probe.c, which does not
 * link the backend): a VkResult's name, and a device type's rank and name, so that both prefer the
 * same device. Needs Vulkan's types only. */
#ifndef SIFT_VK_NAMES_H
#define SIFT_VK_NAMES_H

static inline const char *vk_result_name(VkResult r)
{
    switch (r) {
#define C(x) case x: return #x;
        C(VK_SUCCESS) C(VK_NOT_READY) C(VK_TIMEOUT) C(VK_INCOMPLETE) C(VK_ERROR_OUT_OF_HOST_MEMORY)
        C(VK_ERROR_OUT_OF_DEVICE_MEMORY) C(VK_ERROR_INITIALIZATION_FAILED) C(VK_ERROR_DEVICE_LOST)
        C(VK_ERROR_MEMORY_MAP_FAILED) C(VK_ERROR_LAYER_NOT_PRESENT) C(VK_ERROR_EXTENSION_NOT_PRESENT)
        C(VK_ERROR_FEATURE_NOT_PRESENT) C(VK_ERROR_INCOMPATIBLE_DRIVER) C(VK_ERROR_TOO_MANY_OBJECTS)
        C(VK_ERROR_FORMAT_NOT_SUPPORTED) C(VK_ERROR_FRAGMENTED_POOL) C(VK_ERROR_UNKNOWN)
        C(VK_ERROR_OUT_OF_POOL_MEMORY) C(VK_ERROR_FRAGMENTATION) C(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
        C(VK_ERROR_INVALID_SHADER_NV)
#undef C
    default: return "VkResult (unknown)";
    }
}

/* The order of preference among device types: a discrete GPU, then an integrated one, a virtual
 * one, anything else, and a CPU emulation (lavapipe) last. */
static inline int sift_vk_type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 4;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 3;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 0;
    default: return 1;
    }
}

static inline const char *sift_vk_type_text(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "a discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "an integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "a virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "a CPU emulation";
    default: return "a device of another type";
    }
}

#endif
