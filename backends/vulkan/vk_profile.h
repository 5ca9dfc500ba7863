/* The Vulkan backend's device profiles (SIFT_VULKAN_PROFILE=NAME): the limits and features of a
 * device class, to which the backend narrows what the device reports (vk_device.c vk_caps_query),
 * so that the shader variants and planner branches that class takes run on any device, lavapipe
 * in CI included. Plain C, no Vulkan headers: vk_profile.c is built with or without the backend,
 * for sift_vulkan_profile_get. The table, with the devices each stands for and the source of each
 * figure, is in backends/vulkan/README.md. */
#ifndef SIFT_VK_PROFILE_H
#define SIFT_VK_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vk_profile {
    const char *name;
    const char *describes;     /* the devices it stands for */
    uint32_t subgroups;        /* the subgroup sizes the class runs (a mask of powers of two); 0: any */
    uint32_t max_shared;       /* maxComputeSharedMemorySize; 0: the device's */
    uint32_t max_invocations;  /* maxComputeWorkGroupInvocations; 0: the device's */
    uint64_t storage_range;    /* maxStorageBufferRange; 0: the device's */
    bool no_f16_storage;       /* storageBuffer16BitAccess off: f16 tensors stored as f32 */
    bool no_f16_arith;         /* shaderFloat16 off (sift's shaders use none: they unpack halves) */
    bool no_int8_storage;      /* storageBuffer8BitAccess off (sift's shaders use none: they unpack bytes) */
    bool no_int64_atomics;     /* shaderBufferInt64Atomics off (sift's shaders use none) */
    bool no_timestamps;        /* no timestamp queries: timed graph runs fail with SIFT_E_UNSUPPORTED */
    bool no_int_dot;           /* no integer dot products (shaderIntegerDotProduct): matvec's float path */
} vk_profile;

/* The profile named `name`, or NULL. */
const vk_profile *vk_profile_find(const char *name);
/* The names of every profile, ", "-separated, into buf (for messages). */
void vk_profile_names(char *buf, size_t cap);

#endif
