/* Open functions for backends this build left out: they say so instead of failing to link. */
#include "backend.h"

#ifndef SIFT_HAVE_VULKAN
sift_status sift_backend_vulkan_open(void **be, const sift_backend_vtable **vt, char *name, size_t name_len)
{
    (void)be, (void)vt, (void)name, (void)name_len;
    return sift_set_error(SIFT_E_UNAVAILABLE, "vulkan: this build of sift has no Vulkan backend (configured with "
                                              "-Dvulkan=disabled, or Vulkan headers, volk or glslangValidator missing)");
}
#endif

#ifndef SIFT_HAVE_CUDA
sift_status sift_backend_cuda_open(void **be, const sift_backend_vtable **vt, char *name, size_t name_len)
{
    (void)be, (void)vt, (void)name, (void)name_len;
    return sift_set_error(SIFT_E_UNAVAILABLE, "cuda: this build of sift has no CUDA backend (configured with "
                                              "-Dcuda=disabled, or nvcc not found)");
}
#endif

/* ISO C forbids an empty translation unit. */
typedef int sift_backend_stubs_nonempty;
