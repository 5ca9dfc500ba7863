/* `sift devices`: the backends, their devices and the automatic choice. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *device_type_name(sift_device_type t)
{
    switch (t) {
    case SIFT_DEVICE_CPU: return "cpu";
    case SIFT_DEVICE_DISCRETE_GPU: return "discrete gpu";
    case SIFT_DEVICE_INTEGRATED_GPU: return "integrated gpu";
    case SIFT_DEVICE_VIRTUAL_GPU: return "virtual gpu";
    case SIFT_DEVICE_EMULATED: return "cpu emulation";
    default: return "other";
    }
}

/* "128 MiB", "32 KiB", or the bytes where no unit divides them ("4294967295 bytes"). */
static void format_bytes(uint64_t b, char *buf, size_t len)
{
    static const char *const units[] = {"GiB", "MiB", "KiB"};
    for (int u = 0; u < 3; u++) {
        const uint64_t unit = (uint64_t)1 << (10 * (3 - u));
        if (b >= unit && b % unit == 0) {
            snprintf(buf, len, "%llu %s", (unsigned long long)(b / unit), units[u]);
            return;
        }
    }
    snprintf(buf, len, "%llu bytes", (unsigned long long)b);
}

/* The features sift uses that a Vulkan device has or lacks, in words. */
static const struct {
    uint32_t bit;
    const char *has, *lacks, *json;
} vulkan_features[] = {
    {SIFT_VULKAN_FEATURE_F16_STORAGE, "f16 storage", "f16 stored as f32", "f16_storage"},
    {SIFT_VULKAN_FEATURE_TIMESTAMPS, "timestamps", "no timestamps", "timestamps"},
    {SIFT_VULKAN_FEATURE_SUBGROUP_SIZE_CONTROL, "subgroup size control", "no subgroup size control", "subgroup_size_control"},
    {SIFT_VULKAN_FEATURE_FULL_SUBGROUPS, "full subgroups", "no full subgroups", "full_subgroups"},
};
enum { N_VULKAN_FEATURES = sizeof vulkan_features / sizeof vulkan_features[0] };

static sift_status vulkan_info(int index, sift_vulkan_device_info *v)
{
    memset(v, 0, sizeof *v);
    v->struct_size = sizeof *v;
    return sift_vulkan_device_get_info(index, v);
}

/* What sift uses of Vulkan device `index`, as lines under its device line. */
static void print_vulkan_device(int index)
{
    sift_vulkan_device_info v;
    if (vulkan_info(index, &v) != SIFT_OK) {
        printf("          (what sift would use of it is unknown: %s)\n", sift_last_error());
        return;
    }
    if (v.unusable) {
        printf("          unusable: %s\n", v.why_not);
        return;
    }
    char shared[32], range[32];
    format_bytes(v.shared_memory_bytes, shared, sizeof shared);
    format_bytes(v.max_buffer_range, range, sizeof range);
    printf("          subgroup %u (the device runs %u .. %u), %s shared memory, workgroups of up to %u, buffer range %s\n",
           v.subgroup_size, v.subgroup_min, v.subgroup_max, shared, v.max_workgroup_size, range);
    printf("          ");
    for (int f = 0; f < N_VULKAN_FEATURES; f++)
        printf("%s%s", f ? ", " : "", v.features & vulkan_features[f].bit ? vulkan_features[f].has : vulkan_features[f].lacks);
    if (v.profile[0]) printf("; profile %s (SIFT_VULKAN_PROFILE)", v.profile);
    printf("\n");
    if (v.why_not[0]) printf("          not the default: %s\n", v.why_not);
}

/* The same as JSON fields of the device's object (after its last field). */
static void print_vulkan_device_json(int index)
{
    sift_vulkan_device_info v;
    if (vulkan_info(index, &v) != SIFT_OK) {
        printf(", \"error\": ");
        cli_json_string(sift_last_error());
        return;
    }
    printf(", \"usable\": %s, \"why_not\": ", v.unusable ? "false" : "true");
    cli_json_string(v.why_not);
    printf(", \"subgroup_size\": %u, \"subgroup_min\": %u, \"subgroup_max\": %u, \"shared_memory_bytes\": %u, "
           "\"max_workgroup_size\": %u, \"max_buffer_range\": %llu, \"profile\": ",
           v.subgroup_size, v.subgroup_min, v.subgroup_max, v.shared_memory_bytes, v.max_workgroup_size,
           (unsigned long long)v.max_buffer_range);
    cli_json_string(v.profile);
    printf(", \"features\": {");
    for (int f = 0; f < N_VULKAN_FEATURES; f++)
        printf("%s\"%s\": %s", f ? ", " : "", vulkan_features[f].json, v.features & vulkan_features[f].bit ? "true" : "false");
    printf("}");
}

/* --profiles: the Vulkan device profiles (sift_vulkan_profile_get), as text or JSON. */
static int print_profiles(bool json)
{
    sift_device_profile pr;
    if (json) printf("{\"profiles\": [");
    for (int i = 0; sift_vulkan_profile_get(i, &pr) == SIFT_OK; i++) {
        if (json) {
            printf("%s{\"name\": ", i ? ", " : "");
            cli_json_string(pr.name);
            printf(", \"describes\": ");
            cli_json_string(pr.describes);
            printf(", \"limits\": ");
            cli_json_string(pr.limits);
            printf("}");
        } else {
            printf("%s\n  stands for: %s\n  limits:     %s\n", pr.name, pr.describes, pr.limits);
        }
    }
    if (json) printf("]}\n");
    else printf("SIFT_VULKAN_PROFILE=NAME narrows what the Vulkan devices report to the profile's (backends/vulkan/README.md)\n");
    return 0;
}

/* Each backend's devices (sift_device_count, sift_device_get_info; for Vulkan's also what sift would
 * use of each, sift_vulkan_device_get_info), the one a context opens by default and whether that one
 * opens (or why not), and the automatic choice with its reason; --json: the same as one JSON
 * object; --profiles: the Vulkan device profiles instead. */
static const cli_command devices_command = {
    "devices", CLI_DEVICES, "[--json] [--profiles]",
    "Lists the backends, their devices, the one each would use, and the automatic choice. For each\n"
    "Vulkan device also what sift would use of it under the profile in the environment\n"
    "(SIFT_VULKAN_PROFILE): whether it can open it (or why not), the subgroup size its kernels run\n"
    "with and the sizes the device runs, shared memory per workgroup, the largest workgroup, the\n"
    "bytes one buffer spans, the features it has or lacks (f16 storage, else f16 stored as f32;\n"
    "timestamps; subgroup size control; full subgroups), the profile, and why it is not the default.\n",
    NULL};

int cli_devices(int argc, char **argv)
{
    cli_params p = cli_params_default(&devices_command);
    int rc = 0;
    if (!cli_parse(&devices_command, argc, argv, &p, &rc)) return rc;
    const bool json = p.json;
    if (p.profiles) return print_profiles(json);
    char device[SIFT_BACKEND_COUNT][256], reason[SIFT_BACKEND_COUNT][512];
    bool available[SIFT_BACKEND_COUNT], emulated[SIFT_BACKEND_COUNT];
    int n_dev[SIFT_BACKEND_COUNT];
    int choice = SIFT_BACKEND_CPU;
    for (int b = SIFT_BACKEND_COUNT - 1; b >= 0; b--) { /* CUDA first, then Vulkan, then the CPU */
        if (sift_device_count((sift_backend_kind)b, &n_dev[b]) != SIFT_OK) n_dev[b] = 0;
        sift_context *ctx = NULL;
        available[b] = cli_open_backend(sift_backend_kind_name((sift_backend_kind)b), 0, false, &ctx) == SIFT_OK;
        emulated[b] = available[b] && sift_context_is_emulated(ctx);
        snprintf(device[b], sizeof device[b], "%s", available[b] ? sift_context_device_name(ctx) : "");
        snprintf(reason[b], sizeof reason[b], "%s", available[b] ? "" : sift_last_error());
        sift_context_destroy(ctx);
    }
    /* the choice is cli_open_backend's; the reason follows from what was found */
    sift_context *chosen = NULL;
    if (cli_open_backend(NULL, 0, false, &chosen) == SIFT_OK) choice = (int)sift_context_backend(chosen);
    sift_context_destroy(chosen);
    const char *why = choice == SIFT_BACKEND_CUDA     ? "a CUDA device is present"
                      : choice == SIFT_BACKEND_VULKAN ? "a Vulkan GPU is present and CUDA is not"
                      : emulated[SIFT_BACKEND_VULKAN] ? "the only Vulkan device is a CPU emulation, slower than the CPU backend"
                                                      : "no GPU backend has a usable device";
    if (json) {
        printf("{\"backends\": [");
        for (int b = 0; b < SIFT_BACKEND_COUNT; b++) {
            printf("%s{\"backend\": \"%s\", \"available\": %s, ", b ? ", " : "", sift_backend_kind_name((sift_backend_kind)b),
                   available[b] ? "true" : "false");
            if (available[b]) {
                printf("\"device\": ");
                cli_json_string(device[b]);
                printf(", \"emulated\": %s, ", emulated[b] ? "true" : "false");
            } else {
                printf("\"reason\": ");
                cli_json_string(reason[b]);
                printf(", ");
            }
            printf("\"devices\": [");
            for (int i = 0; i < n_dev[b]; i++) {
                sift_device_info info;
                if (sift_device_get_info((sift_backend_kind)b, i, &info) != SIFT_OK) continue;
                printf("%s{\"index\": %d, \"name\": ", i ? ", " : "", i);
                cli_json_string(info.name);
                printf(", \"type\": \"%s\", \"default\": %s, \"memory_bytes\": %llu", device_type_name(info.type),
                       info.is_default ? "true" : "false", (unsigned long long)info.memory_bytes);
                if (b == SIFT_BACKEND_VULKAN) print_vulkan_device_json(i);
                printf("}");
            }
            printf("]}");
        }
        printf("], \"choice\": \"%s\", \"why\": ", sift_backend_kind_name((sift_backend_kind)choice));
        cli_json_string(why);
        printf("}\n");
        return 0;
    }
    for (int b = 0; b < SIFT_BACKEND_COUNT; b++) {
        const char *name = sift_backend_kind_name((sift_backend_kind)b);
        if (available[b]) printf("%-7s %s%s\n", name, device[b], emulated[b] ? "  (a CPU emulation)" : "");
        else printf("%-7s unavailable: %s\n", name, reason[b]);
        for (int i = 0; i < n_dev[b]; i++) {
            sift_device_info info;
            if (sift_device_get_info((sift_backend_kind)b, i, &info) != SIFT_OK) continue;
            printf("        device %d: %s (%s, %.1f GiB)%s\n", i, info.name, device_type_name(info.type),
                   (double)info.memory_bytes / (1024.0 * 1024.0 * 1024.0), info.is_default ? "  default" : "");
            if (b == SIFT_BACKEND_VULKAN) print_vulkan_device(i);
        }
    }
    printf("automatic choice: %s (%s)\n", sift_backend_kind_name((sift_backend_kind)choice), why);
    return 0;
}
