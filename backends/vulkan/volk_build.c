/* volk (the Vulkan meta-loader) compiled into libsift: libvulkan.so.1 is opened at run time, never
 * linked, so the library loads on machines without Vulkan. The path of volk.c comes from the
 * meson option volk_source. volk.c converts dlsym's object pointer to a function pointer, which
 * ISO C (-Wpedantic) flags; that conversion is what dlsym is for on POSIX. */
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include SIFT_VOLK_C
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
