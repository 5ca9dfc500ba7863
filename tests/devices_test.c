/* What sift_device_get_info says of the Vulkan devices, and the device profiles
 * (SIFT_VULKAN_PROFILE, sift_vulkan_profile_get): the default device is usable and its figures are
 * consistent; each profile narrows them to its table (backends/vulkan/README.md) and a context
 * opened under it says so; an unknown profile, or one whose subgroup sizes the device cannot run,
 * is refused with the reason; a tensor of twice the small profile's buffer range (so split into
 * chunks) holds what was written across the chunks' boundary. Skips (77) where no Vulkan device
 * opens, unless SIFT_EXPECT_BACKENDS lists vulkan.
 * With LP_NATIVE_VECTOR_WIDTH above 512 in the environment (a test of its own), it checks instead
 * that llvmpipe, whose subgroups are then part-filled, is refused with the reason. */
#include <sift.h>

#include "report.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A check of the Vulkan devices, with the figures it read. */
static void check(bool ok, const char *what, const char *detail)
{
    test_check(ok, "vulkan", "%s%s%s", what, detail && *detail ? ": " : "", detail ? detail : "");
}

static int pow2(uint32_t x) { return x && (x & (x - 1)) == 0; }

static sift_status vulkan_info(int i, sift_vulkan_device_info *v)
{
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    return sift_vulkan_device_get_info(i, v);
}

/* What sift would use of the default device under the profile in the environment. */
static sift_status default_info(sift_vulkan_device_info *v, int *index)
{
    int n = 0;
    sift_device_info info;
    sift_status s = sift_device_count(SIFT_BACKEND_VULKAN, &n);
    for (int i = 0; s == SIFT_OK && i < n; i++) {
        s = sift_device_get_info(SIFT_BACKEND_VULKAN, i, &info);
        if (s == SIFT_OK && info.is_default) {
            *index = i;
            return vulkan_info(i, v);
        }
    }
    return s == SIFT_OK ? SIFT_E_UNAVAILABLE : s;
}

static void check_devices(void)
{
    int n = 0, defaults = 0;
    check(sift_device_count(SIFT_BACKEND_VULKAN, &n) == SIFT_OK && n >= 1, "devices: at least one", NULL);
    for (int i = 0; i < n; i++) {
        sift_device_info info;
        sift_vulkan_device_info d;
        char what[128], detail[512];
        snprintf(what, sizeof what, "device %d: described", i);
        check(sift_device_get_info(SIFT_BACKEND_VULKAN, i, &info) == SIFT_OK && vulkan_info(i, &d) == SIFT_OK && info.name[0],
              what, info.name);
        defaults += info.is_default;
        if (d.unusable) {
            snprintf(what, sizeof what, "device %d: unusable, with the reason", i);
            check(!info.is_default && d.why_not[0], what, d.why_not);
            continue;
        }
        snprintf(detail, sizeof detail, "subgroup %u in %u..%u, %u bytes shared, workgroups of %u, range %llu, why not '%s'",
                 d.subgroup_size, d.subgroup_min, d.subgroup_max, d.shared_memory_bytes, d.max_workgroup_size,
                 (unsigned long long)d.max_buffer_range, d.why_not);
        snprintf(what, sizeof what, "device %d: figures consistent", i);
        check(pow2(d.subgroup_size) && pow2(d.subgroup_min) && pow2(d.subgroup_max) && d.subgroup_min >= 4 &&
                  d.subgroup_max <= 128 && d.subgroup_min <= d.subgroup_size && d.subgroup_size <= d.subgroup_max &&
                  d.shared_memory_bytes >= 32768 && d.max_workgroup_size >= 256 && d.max_buffer_range > 0 &&
                  d.profile[0] == 0 && (info.is_default ? d.why_not[0] == 0 : d.why_not[0] != 0),
              what, detail);
    }
    check(defaults == 1, "devices: exactly one default", NULL);
    sift_vulkan_device_info v = {.struct_size = 0};
    check(sift_vulkan_device_get_info(0, &v) == SIFT_E_INVALID, "struct_size 0: refused", sift_last_error());
    v.struct_size = sizeof v + 8;
    check(sift_vulkan_device_get_info(0, &v) == SIFT_E_INVALID, "struct_size past the library's: refused", NULL);
    /* an older, shorter struct gets its own fields and nothing past them */
    struct {
        sift_vulkan_device_info v;
        unsigned char guard[8];
    } shorter;
    memset(&shorter, 0xA5, sizeof shorter);
    shorter.v.struct_size = offsetof(sift_vulkan_device_info, subgroup_size);
    const sift_status s = sift_vulkan_device_get_info(0, &shorter.v);
    const unsigned char *past = (const unsigned char *)&shorter.v + shorter.v.struct_size;
    int kept = 1;
    for (size_t b = 0; b < sizeof shorter - offsetof(sift_vulkan_device_info, subgroup_size); b++) kept &= past[b] == 0xA5;
    check(s == SIFT_OK && kept, "a shorter struct: filled up to its struct_size only", NULL);
    check(sift_vulkan_device_get_info(n, &v) != SIFT_OK, "a device past the last: refused", NULL);
}

static void check_profile_list(void)
{
    static const char *names[] = {"amd", "intel-xe", "small", "nvidia"};
    sift_device_profile p;
    for (int i = 0; i < 4; i++) {
        char what[96];
        snprintf(what, sizeof what, "profile %d: %s, described", i, names[i]);
        check(sift_vulkan_profile_get(i, &p) == SIFT_OK && !strcmp(p.name, names[i]) && p.describes[0] && p.limits[0], what,
              p.limits);
    }
    check(sift_vulkan_profile_get(2, &p) == SIFT_OK && strstr(p.limits, "128 MiB") && strstr(p.limits, "no timestamps"),
          "profile small: its limits named", p.limits);
    check(sift_vulkan_profile_get(4, &p) == SIFT_E_INVALID && p.name[0] == 0, "profile 4: none", sift_last_error());
    check(sift_vulkan_profile_get(-1, &p) == SIFT_E_INVALID, "profile -1: none", NULL);
    check(sift_vulkan_profile_get(0, NULL) == SIFT_E_INVALID, "profile into NULL: refused", NULL);
}

/* Under the small profile: the figures of its table, a context that says so, and a tensor larger
 * than the buffer range (two chunks) that reads back what was written across the boundary. */
static void check_small(sift_vulkan_device_info base)
{
    setenv("SIFT_VULKAN_PROFILE", "small", 1);
    sift_vulkan_device_info d;
    int index = -1;
    char detail[512];
    sift_status s = default_info(&d, &index);
    snprintf(detail, sizeof detail, "%u bytes shared, workgroups of %u, range %llu, features %#x, profile '%s'",
             d.shared_memory_bytes, d.max_workgroup_size, (unsigned long long)d.max_buffer_range, d.features, d.profile);
    check(s == SIFT_OK && d.shared_memory_bytes == (base.shared_memory_bytes < 32768 ? base.shared_memory_bytes : 32768) &&
              d.max_workgroup_size == 256 && d.max_buffer_range == (1ull << 27) &&
              !(d.features & (SIFT_VULKAN_FEATURE_F16_STORAGE | SIFT_VULKAN_FEATURE_TIMESTAMPS)) &&
              !strcmp(d.profile, "small") && d.subgroup_size == base.subgroup_size,
          "small: the device narrowed to the profile", detail);
    sift_context *ctx = NULL;
    s = sift_context_create(SIFT_BACKEND_VULKAN, &ctx);
    check(s == SIFT_OK && strstr(sift_context_device_name(ctx), "profile small") &&
              strstr(sift_context_device_name(ctx), "f16 stored as f32"),
          "small: a context opens under it", s == SIFT_OK ? sift_context_device_name(ctx) : sift_last_error());
    if (s == SIFT_OK) {
        /* 2^27 + 2^20 bytes of f32: two chunks; a pattern around the boundary reads back */
        const int64_t n = ((1ll << 27) + (1ll << 20)) / 4;
        sift_tensor *t = NULL;
        enum { SPAN = 1 << 16 };
        static float in[SPAN], out[SPAN];
        for (int i = 0; i < SPAN; i++) in[i] = (float)i * 0.5f - 7.0f;
        const size_t off = ((size_t)1 << 27) - SPAN * 2; /* half the span on each side of the boundary */
        s = sift_tensor_create(ctx, SIFT_F32, 1, &n, &t);
        if (s == SIFT_OK) s = sift_tensor_write(t, off, in, sizeof in);
        if (s == SIFT_OK) s = sift_tensor_read(t, off, out, sizeof out);
        check(s == SIFT_OK && memcmp(in, out, sizeof in) == 0, "small: a tensor over 2^27 bytes, split, reads back",
              s == SIFT_OK ? NULL : sift_last_error());
        sift_tensor_destroy(t);
        sift_context_destroy(ctx);
    }

    setenv("SIFT_VULKAN_PROFILE", "no-such-profile", 1);
    s = sift_context_create(SIFT_BACKEND_VULKAN, &ctx);
    check(s == SIFT_E_INVALID && strstr(sift_last_error(), "intel-xe"), "an unknown profile: refused, the profiles named",
          sift_last_error());
    int n = 0;
    check(sift_device_count(SIFT_BACKEND_VULKAN, &n) == SIFT_OK && vulkan_info(0, &d) == SIFT_OK && d.unusable &&
              strstr(d.why_not, "no-such-profile"),
          "an unknown profile: every device unusable, with the reason", d.why_not);

    /* a profile whose subgroup sizes the device cannot run: amd takes 32 or 64 */
    if (base.subgroup_max < 32) {
        setenv("SIFT_VULKAN_PROFILE", "amd", 1);
        s = sift_context_create(SIFT_BACKEND_VULKAN, &ctx);
        check(s == SIFT_E_UNSUPPORTED && strstr(sift_last_error(), "amd"), "amd on a device of narrower subgroups: refused",
              sift_last_error());
        if (s == SIFT_OK) sift_context_destroy(ctx);
    }
    unsetenv("SIFT_VULKAN_PROFILE");
}

/* Under LP_NATIVE_VECTOR_WIDTH above 512, llvmpipe reports subgroups of more than 16 but fills 16
 * lanes of each (backends/vulkan/README.md): every llvmpipe device is unusable, saying why, and
 * where it is the only device a context does not open. Skips (77) where there is no llvmpipe. */
static int check_wide_llvmpipe(void)
{
    test_case_begin("llvmpipe beyond 512 bits", "vulkan");
    int n = 0, wide = 0, usable = 0;
    if (sift_device_count(SIFT_BACKEND_VULKAN, &n) != SIFT_OK) n = 0;
    for (int i = 0; i < n; i++) {
        sift_device_info info;
        sift_vulkan_device_info d;
        if (sift_device_get_info(SIFT_BACKEND_VULKAN, i, &info) != SIFT_OK || vulkan_info(i, &d) != SIFT_OK) continue;
        if (!strstr(info.name, "llvmpipe")) {
            usable += !d.unusable;
            continue;
        }
        wide++;
        char what[96];
        snprintf(what, sizeof what, "device %d, llvmpipe: unusable, LP_NATIVE_VECTOR_WIDTH named", i);
        check(d.unusable && strstr(d.why_not, "fills 16 lanes") && strstr(d.why_not, "LP_NATIVE_VECTOR_WIDTH"), what,
              d.why_not);
    }
    if (wide == 0) {
        test_note("vulkan", "no llvmpipe device: nothing to check");
        return 77;
    }
    if (usable == 0) {
        sift_context *ctx = NULL;
        const sift_status s = sift_context_create(SIFT_BACKEND_VULKAN, &ctx);
        check(s != SIFT_OK && strstr(sift_last_error(), "LP_NATIVE_VECTOR_WIDTH"), "a context: not opened, the reason given",
              s == SIFT_OK ? sift_context_device_name(ctx) : sift_last_error());
        if (s == SIFT_OK) sift_context_destroy(ctx);
    }
    return test_summary("devices", "vulkan");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsetenv("SIFT_VULKAN_PROFILE");
    const char *lp_width = getenv("LP_NATIVE_VECTOR_WIDTH");
    if (lp_width && atoi(lp_width) > 512) return check_wide_llvmpipe();
    test_case_begin("profile list", "vulkan");
    check_profile_list();
    sift_vulkan_device_info base;
    int index = -1;
    if (default_info(&base, &index) != SIFT_OK || base.unusable) {
        const char *expect = getenv("SIFT_EXPECT_BACKENDS");
        const int expected = expect && strstr(expect, "vulkan");
        test_note("vulkan", "no usable Vulkan device: %s%s", sift_last_error(),
                  expected ? " (expected by SIFT_EXPECT_BACKENDS)" : "");
        if (!expected) return 77;
        test_check(false, "vulkan", "a usable Vulkan device");
        return test_summary("devices", "vulkan");
    }
    test_note("vulkan", "default device %d: subgroup %u", index, base.subgroup_size);
    test_case_begin("devices", "vulkan");
    check_devices();
    test_case_begin("small profile", "vulkan");
    check_small(base);
    return test_summary("devices", "vulkan");
}
