/* A Vulkan device type's rank and name, shared by the backend's device choice (vk_device.c) and the
 * bandwidth probe (bw_probe.c), so that both prefer the same device. Needs Vulkan's types only. */
#ifndef SIFT_VK_DEVICE_TYPE_H
#define SIFT_VK_DEVICE_TYPE_H

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
