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

/* Each backend's devices (sift_device_count, sift_device_get_info), the one a context opens by
 * default and whether that one opens (or why not), and the automatic choice with its reason;
 * --json: the same as one JSON object. */
static const cli_command devices_command = {
    "devices", CLI_DEVICES, "[--json]",
    "Lists the backends, their devices, the one each would use, and the automatic choice.\n", NULL};

int cli_devices(int argc, char **argv)
{
    cli_params p = cli_params_default(&devices_command);
    int rc = 0;
    if (!cli_parse(&devices_command, argc, argv, &p, &rc)) return rc;
    const bool json = p.json;
    char device[SIFT_BACKEND_COUNT][256], reason[SIFT_BACKEND_COUNT][512];
    bool available[SIFT_BACKEND_COUNT], emulated[SIFT_BACKEND_COUNT];
    int n_dev[SIFT_BACKEND_COUNT];
    int choice = SIFT_BACKEND_CPU;
    for (int b = SIFT_BACKEND_COUNT - 1; b >= 0; b--) { /* CUDA first, then Vulkan, then the CPU */
        if (sift_device_count((sift_backend_kind)b, &n_dev[b]) != SIFT_OK) n_dev[b] = 0;
        sift_context *ctx = NULL;
        available[b] = sift_context_create((sift_backend_kind)b, &ctx) == SIFT_OK;
        emulated[b] = available[b] && sift_context_is_emulated(ctx);
        snprintf(device[b], sizeof device[b], "%s", available[b] ? sift_context_device_name(ctx) : "");
        snprintf(reason[b], sizeof reason[b], "%s", available[b] ? "" : sift_last_error());
        sift_context_destroy(ctx);
    }
    /* the choice is cli_open_backend's; the reason follows from what was found */
    sift_context *chosen = NULL;
    if (cli_open_backend(NULL, 0, &chosen) == SIFT_OK) choice = (int)sift_context_backend(chosen);
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
                printf(", \"type\": \"%s\", \"default\": %s, \"memory_bytes\": %llu}", device_type_name(info.type),
                       info.is_default ? "true" : "false", (unsigned long long)info.memory_bytes);
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
        }
    }
    printf("automatic choice: %s (%s)\n", sift_backend_kind_name((sift_backend_kind)choice), why);
    return 0;
}
