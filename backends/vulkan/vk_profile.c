/* The Vulkan device profiles (vk_profile.h) and their public list (sift_vulkan_profile_get). Built
 * with or without the Vulkan backend: the list is the same either way. */
#include "vk_profile.h"

#include "backend.h"

#include <stdio.h>
#include <string.h>

/* Where each figure comes from is in backends/vulkan/README.md ("Device profiles"). */
static const vk_profile profiles[] = {
    {.name = "amd",
     .describes = "AMD GPUs: GCN and CDNA (wave64), RDNA (wave64, or wave32 with subgroup size control)",
     .subgroups = 32u | 64u,
     .max_shared = 65536},
    {.name = "intel-xe",
     .describes = "Intel Xe GPUs (integrated Xe-LP, Arc): SIMD8, 16 or 32, chosen per pipeline by the driver",
     .subgroups = 8u | 16u | 32u,
     .max_shared = 65536,
     .no_int64_atomics = true},
    {.name = "small",
     .describes = "small GPUs (Arm Mali, older mobile and embedded parts): narrow buffers, little shared memory",
     .max_shared = 32768,
     .max_invocations = 256,
     .storage_range = (uint64_t)1 << 27,
     .no_f16_storage = true,
     .no_f16_arith = true,
     .no_int8_storage = true,
     .no_timestamps = true,
     .no_int_dot = true},
    {.name = "nvidia",
     .describes = "NVIDIA GPUs (the H100 and H200 sift is measured on)",
     .subgroups = 32u,
     .max_shared = 49152,
     .max_invocations = 1024,
     .storage_range = 0xFFFFFFFFull},
};
enum { N_PROFILES = (int)(sizeof profiles / sizeof profiles[0]) };

const vk_profile *vk_profile_find(const char *name)
{
    for (int i = 0; i < N_PROFILES; i++)
        if (strcmp(profiles[i].name, name) == 0) return &profiles[i];
    return NULL;
}

void vk_profile_names(char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < N_PROFILES && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", profiles[i].name);
        if (w > 0) used += (size_t)w;
    }
}

/* "subgroup 32 or 64; 64 KiB shared memory; ..." */
static void limits_text(const vk_profile *p, char *buf, size_t cap)
{
    size_t used = 0;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        int w_ = snprintf(buf + used, cap - used, __VA_ARGS__);                                                        \
        if (w_ > 0) used = used + (size_t)w_ < cap ? used + (size_t)w_ : cap - 1;                                      \
    } while (0)
    buf[0] = 0;
    if (p->subgroups) {
        ADD("subgroup");
        const char *sep = " ";
        for (uint32_t s = 1; s <= 128; s *= 2)
            if (p->subgroups & s) {
                const uint32_t rest = p->subgroups & ~(2 * s - 1);
                ADD("%s%u", sep, s);
                sep = (rest & (rest - 1)) == 0 ? " or " : ", ";
            }
    } else {
        ADD("subgroup: the device's");
    }
    if (p->max_shared) ADD("; %u KiB shared memory", p->max_shared / 1024);
    if (p->max_invocations) ADD("; workgroups of at most %u", p->max_invocations);
    if (p->storage_range) {
        if (p->storage_range & (p->storage_range - 1))
            ADD("; buffer range 2^32 - 1");
        else
            ADD("; buffer range %llu MiB", (unsigned long long)(p->storage_range >> 20));
    }
    if (p->no_f16_storage) ADD("; no 16-bit storage");
    if (p->no_f16_arith) ADD("; no f16 arithmetic");
    if (p->no_int8_storage) ADD("; no 8-bit storage");
    if (p->no_int64_atomics) ADD("; no 64-bit atomics");
    if (p->no_timestamps) ADD("; no timestamps");
    if (p->no_int_dot) ADD("; no integer dot products");
#undef ADD
}

sift_status sift_vulkan_profile_get(int index, sift_device_profile *out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_vulkan_profile_get: out is NULL");
    memset(out, 0, sizeof *out);
    if (index < 0 || index >= N_PROFILES)
    {
        char names[128];
        vk_profile_names(names, sizeof names);
        return sift_set_error(SIFT_E_INVALID, "sift_vulkan_profile_get: profile %d (there are %d: %s)", index, N_PROFILES,
                              names);
    }
    const vk_profile *p = &profiles[index];
    snprintf(out->name, sizeof out->name, "%s", p->name);
    snprintf(out->describes, sizeof out->describes, "%s", p->describes);
    limits_text(p, out->limits, sizeof out->limits);
    return SIFT_OK;
}

#ifndef SIFT_HAVE_VULKAN
/* A build without the Vulkan backend: the same answer as its device listing (engine/backend_stubs.c). */
sift_status sift_vulkan_device_get_info(int index, sift_vulkan_device_info *out)
{
    (void)index;
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_vulkan_device_get_info: out is NULL");
    int n = 0;
    return sift_backend_vulkan_devices(0, NULL, &n);
}
#endif
