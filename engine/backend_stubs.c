/* Open functions for backends this build left out: they say so instead of failing to link. */
#include "backend.h"

#ifndef SIFT_HAVE_VULKAN
static sift_status no_vulkan(void)
{
    return sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: this build of sift has no Vulkan backend (configured with "
                                              "-Dvulkan=disabled, or Vulkan headers, volk or glslangValidator missing)");
}

sift_status sift_backend_vulkan_open(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt,
                                     char *name, size_t name_len, int *device)
{
    (void)args, (void)be, (void)vt, (void)name, (void)name_len, (void)device;
    return no_vulkan();
}

sift_status sift_backend_vulkan_devices(int index, sift_device_info *info, int *n)
{
    (void)index, (void)info;
    *n = 0;
    return no_vulkan();
}
#endif

#ifndef SIFT_HAVE_CUDA
static sift_status no_cuda(void)
{
    return sift_set_error(SIFT_E_UNAVAILABLE, "cuda: this build of sift has no CUDA backend (configured with "
                                              "-Dcuda=disabled, or nvcc not found)");
}

sift_status sift_backend_cuda_open(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt, char *name,
                                   size_t name_len, int *device)
{
    (void)args, (void)be, (void)vt, (void)name, (void)name_len, (void)device;
    return no_cuda();
}

sift_status sift_backend_cuda_devices(int index, sift_device_info *info, int *n)
{
    (void)index, (void)info;
    *n = 0;
    return no_cuda();
}
#endif

/* ISO C forbids an empty translation unit. */
typedef int sift_backend_stubs_nonempty;
