/* sift-vk-bwprobe: how fast a Vulkan device streams a buffer, by how the buffer is allocated and
 * bound. A probe of the driver, not of sift's engine: it uses volk and Vulkan directly and its own
 * kernel (shaders/bw_probe.comp, compiled three ways by backends/vulkan/meson.build: descriptor
 * reads, device-address reads, the fill).
 *
 * Why: on an NVIDIA H100/H200, sift's Vulkan kernels read large buffers at a third of the bandwidth
 * small ones get, and CUDA on the same GPU does not (docs/benchmarks.md). Each suspect is one
 * column of the rows this prints: the buffer's size (rows of doubling sizes), how it is allocated
 * (one allocation and buffer; one allocation with several buffers bound at offsets; several
 * descriptors over one buffer; separate allocations of a chunk size; a dedicated allocation), the
 * memory type (every DEVICE_LOCAL type), the descriptor range bound (or device addresses, as the
 * engine reads), the workgroup count, and the span of memory read (one pass over a large buffer
 * against many passes over a small one: the same bytes, a smaller span: TLB reach).
 *
 * Every dispatch's partial sums are checked against the host's sum of the same words; a mismatch is
 * exit status 3. usage(): the options and the rest of the exit statuses.
 */
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <volk.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* SPIR-V of shaders/bw_probe.comp, from glslangValidator --vn (meson.build) */
#include "bw_probe_bda.spv.h"
#include "bw_probe_fill.spv.h"
#include "bw_probe_read.spv.h"
#include "vk_names.h"

#define PROG "sift-vk-bwprobe"
#define WGS 256u                   /* the kernel's workgroup size */
#define MIB ((uint64_t)1 << 20)
#define GRAIN ((uint64_t)64 << 10) /* every size is a power of two of at least this */
#define MAX_LIST 16

enum { EXIT_OK = 0, EXIT_ERR = 1, EXIT_USAGE = 2, EXIT_MISMATCH = 3, EXIT_NODEVICE = 77 };
enum { L_ONE, L_DEDICATED, L_RANGES, L_BUFS, L_ALLOCS, L_COUNT };
enum { A_DESC, A_DESC_DA, A_BDA, A_COUNT };
enum { K_READ, K_BDA, K_FILL, K_COUNT };

static const char *const layout_names[L_COUNT] = {"one", "dedicated", "ranges", "bufs", "allocs"};
static const char *const access_names[A_COUNT] = {"desc", "desc-da", "bda"};

/* the push constants of bw_probe.comp (push_bw) */
typedef struct {
    uint32_t words, shift, passes, slot, piece, first, base_lo, base_hi;
} push_bw;

/* ---- options ---- */

typedef struct {
    int device; /* -1: the first discrete GPU, else integrated, virtual, other, CPU */
    uint64_t max_bytes, min_bytes, scrub;
    uint64_t chunks[MAX_LIST];
    int n_chunks;
    uint32_t groups[MAX_LIST];
    int n_groups;
    int access[A_COUNT];
    int n_access;
    bool layout_on[L_COUNT];
    int types[MAX_LIST]; /* memory type indices; n_types 0: every DEVICE_LOCAL type */
    int n_types;
    uint64_t tlb_small[MAX_LIST];
    int n_tlb;
    uint32_t repeat, warmup, unroll, realloc, spin_ms;
    bool host_timing, inject, validation, json;
} options;

static void usage(FILE *f)
{
    fputs("usage: " PROG " [options]\n"
            "\n"
            "Measures how fast a Vulkan device reads a buffer, one suspect at a time: a compute shader\n"
            "(shaders/bw_probe.comp) streams the buffer as 16-byte words (coalesced, grid-stride loop,\n"
            "workgroups of 256) and writes one partial sum per workgroup; each dispatch is timed with GPU\n"
            "timestamps (bottom of pipe before and after it) and a row gives the median of --repeat\n"
            "dispatches after --warmup more. Every dispatch's sums (warm-up ones too) are checked against\n"
            "the host's sum of the same words (the buffers are filled with a known pattern by a fill\n"
            "shader).\n"
            "\n"
            "", f);
    fputs("Sections of the output:\n"
            "  control  one configuration measured first (after --spin-ms of the same work) and last:\n"
            "           a change between the two is drift (clocks, heat), not a suspect\n"
            "  sweep    every size from --min-bytes to --max-bytes (doubling) x layout x memory type x\n"
            "           access x workgroup count\n"
            "  tlb      the same bytes read as one pass over the largest buffer, as many passes (in one\n"
            "           dispatch) over a small buffer, and as one pass over the small buffer while the\n"
            "           large one is allocated: separates the span of memory touched (TLB reach, page\n"
            "           size) from the bytes read and from the memory the process holds\n"
            "  realloc  the largest buffer allocated, measured and freed --realloc times: does the same\n"
            "           buffer run fast in one allocation and slow in another?\n"
            "\n"
            "", f);
    fputs("Layouts (the 'layout' column; CHUNK is each of --chunks below the size):\n"
            "  one           one VkDeviceMemory, one VkBuffer, one descriptor of the whole buffer\n"
            "  dedicated     the same, allocated with VkMemoryDedicatedAllocateInfo\n"
            "  ranges/CHUNK  one allocation, one buffer, size/CHUNK descriptors bound at offsets k*CHUNK\n"
            "  bufs/CHUNK    one allocation, size/CHUNK buffers bound to it at offsets, one descriptor each\n"
            "  allocs/CHUNK  size/CHUNK allocations of CHUNK, one buffer and descriptor each\n"
            "Access (the 'access' column):\n"
            "  desc      storage-buffer descriptors (memory allocated without the device-address flag)\n"
            "  desc-da   the same descriptors over memory allocated as the engine does (with\n"
            "            VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT, buffers with SHADER_DEVICE_ADDRESS)\n"
            "  bda       buffer device addresses, as the engine's kernels read (a table of addresses per\n"
            "            piece; 'range' is then '-')\n"
            "A buffer larger than maxStorageBufferRange is never bound as one descriptor: that row is\n"
            "skipped with the reason (the ranges/CHUNK rows bind it as several). Rows a limit rules out\n"
            "(allocation size, heap size, descriptor counts, workgroup count, missing features) are\n"
            "printed as skipped, with the limit.\n"
            "\n"
            "", f);
    fputs("Options (SIZE: bytes, or with K, M, G suffixes, binary: 16M, 16MiB, 1G; sizes and chunks are\n"
            "powers of two of at least 64K):\n"
            "  --device N         device N of vkEnumeratePhysicalDevices (default: the first discrete GPU,\n"
            "                     else integrated, virtual, other, CPU)\n"
            "  --max-bytes SIZE   the largest buffer (default: the smaller of 2G and half the largest\n"
            "                     device-local heap, rounded down to a power of two)\n"
            "  --min-bytes SIZE   the smallest buffer (default 16M, or --max-bytes where that is smaller)\n"
            "  --chunks LIST      chunk sizes of the ranges, bufs and allocs layouts (default 16M,256M;\n"
            "                     'whole' is the one layout)\n"
            "  --groups LIST      workgroup counts (default 1024,8192)\n"
            "  --access LIST      desc, desc-da, bda (default all three)\n"
            "  --layouts LIST     one, dedicated, ranges, bufs, allocs (default all)\n"
            "  --types LIST       memory type indices (default every DEVICE_LOCAL type the buffers allow)\n"
            "  --repeat N         timed dispatches per row, median reported (default 20)\n"
            "  --warmup N         untimed dispatches before them (default 3)\n"
            "  --unroll N         loads in flight per invocation: 1, 2, 4 or 8 (default 4)\n"
            "", f);
    fputs("  --scrub SIZE       before every dispatch, read another buffer of SIZE (untimed; at most\n"
            "                     maxStorageBufferRange) so that the last dispatch's words are out of the\n"
            "                     caches (default 128M: above the 50 MB L2 of an H100/H200; 0: none).\n"
            "                     Buffers that fit in the L2 are still served from it within one\n"
            "                     dispatch's passes (the tlb rows)\n"
            "  --tlb-small LIST   the small buffers of the tlb section (default 16M,128M; each below the\n"
            "                     largest size; 16M fits in an H100's L2, so its repeated passes measure\n"
            "                     the L2, 128M does not)\n"
            "  --realloc N        rows of the realloc section (default 4; 0: none)\n"
            "  --spin-ms N        milliseconds of the control row's work before the first measurement,\n"
            "                     to raise the clocks (default 500)\n"
            "  --host-timing      time dispatches on the host (one submission each, submission and\n"
            "                     wait included) even where there are GPU timestamps\n"
            "  --inject-error     after filling each buffer, change one word without telling the check:\n"
            "                     every row must then fail verification (exit 3): a test of the check\n"
            "  --validation       load VK_LAYER_KHRONOS_validation; any message it reports is exit 1\n"
            "  --json             one JSON object per row on stdout (the device and notes go to stderr)\n"
            "  --help             this text\n"
            "\n"
            "", f);
    fputs("Timing: GPU timestamps where the queue family has timestampValidBits > 0 (a device whose\n"
            "timestampComputeAndGraphics is false may still have them on its compute family; the header\n"
            "says which); otherwise each dispatch is timed on the host, and the rows say 'host'.\n"
            "GB/s is 10^9 bytes per second: bytes read by the dispatch / its median time; 'best' uses\n"
            "the fastest dispatch.\n"
            "\n"
            "Environment: the Vulkan loader's own (VK_DRIVER_FILES, VK_ICD_FILENAMES, ...).\n"
            "Exit status: 0 every row verified; 1 a Vulkan error, an allocation the driver refused, or a\n"
            "validation message; 2 bad options; 3 a dispatch's sum differed from the host's; 77 no\n"
            "Vulkan loader or no Vulkan device.\n", f);
}

static bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

static unsigned log2u(uint64_t v)
{
    unsigned s = 0;
    while (((uint64_t)1 << (s + 1)) <= v && s < 63) s++;
    return s;
}

/* "16M", "16MiB", "1G", "65536": bytes; false where it is not a size */
static bool parse_size(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (*s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i') end++;
    if (*end == 'B') end++;
    if (*end || v > (UINT64_MAX >> shift)) return false;
    *out = (uint64_t)v << shift;
    return true;
}

static bool parse_u32(const char *s, uint32_t *out)
{
    char *end = NULL;
    if (*s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

/* "512 MiB", "2 GiB", "64 KiB" */
static const char *fmt_size(uint64_t b, char *buf, size_t n)
{
    if (b >= ((uint64_t)1 << 30) && b % ((uint64_t)1 << 30) == 0) snprintf(buf, n, "%" PRIu64 " GiB", b >> 30);
    else if (b >= MIB && b % MIB == 0) snprintf(buf, n, "%" PRIu64 " MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(buf, n, "%" PRIu64 " KiB", b >> 10);
    else snprintf(buf, n, "%" PRIu64 " B", b);
    return buf;
}

/* "16M", "1G": for layout names */
static const char *fmt_short(uint64_t b, char *buf, size_t n)
{
    if (b >= ((uint64_t)1 << 30) && b % ((uint64_t)1 << 30) == 0) snprintf(buf, n, "%" PRIu64 "G", b >> 30);
    else if (b >= MIB && b % MIB == 0) snprintf(buf, n, "%" PRIu64 "M", b >> 20);
    else snprintf(buf, n, "%" PRIu64 "K", b >> 10);
    return buf;
}

static int bad_option(const char *opt, const char *val, const char *what)
{
    fprintf(stderr, PROG ": %s '%s': %s (--help lists the options)\n", opt, val ? val : "", what);
    return EXIT_USAGE;
}

/* a comma-separated list into items, each through parse; 0 or EXIT_USAGE */
static int parse_sizes(const char *opt, const char *val, uint64_t *items, int *n, bool allow_whole)
{
    char buf[512];
    if (strlen(val) >= sizeof buf) return bad_option(opt, val, "too long");
    strcpy(buf, val);
    *n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (allow_whole && strcmp(t, "whole") == 0) continue;
        uint64_t v;
        if (!parse_size(t, &v) || !is_pow2(v) || v < GRAIN) return bad_option(opt, t, "not a power of two of at least 64K");
        if (*n == MAX_LIST) return bad_option(opt, val, "at most 16 entries");
        items[(*n)++] = v;
    }
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->device = -1;
    o->min_bytes = 16 * MIB;
    o->scrub = 128 * MIB;
    o->chunks[0] = 16 * MIB;
    o->chunks[1] = 256 * MIB;
    o->n_chunks = 2;
    o->groups[0] = 1024;
    o->groups[1] = 8192;
    o->n_groups = 2;
    for (int a = 0; a < A_COUNT; a++) o->access[a] = a;
    o->n_access = A_COUNT;
    for (int l = 0; l < L_COUNT; l++) o->layout_on[l] = true;
    o->tlb_small[0] = 16 * MIB;
    o->tlb_small[1] = 128 * MIB;
    o->n_tlb = 2;
    o->repeat = 20;
    o->warmup = 3;
    o->unroll = 4;
    o->realloc = 4;
    o->spin_ms = 500;
    bool min_given = false;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            exit(EXIT_OK);
        }
        if (!strcmp(opt, "--host-timing")) { o->host_timing = true; continue; }
        if (!strcmp(opt, "--inject-error")) { o->inject = true; continue; }
        if (!strcmp(opt, "--validation")) { o->validation = true; continue; }
        if (!strcmp(opt, "--json")) { o->json = true; continue; }
        static const char *const valued[] = {"--device", "--max-bytes", "--min-bytes", "--scrub", "--chunks", "--tlb-small",
                                             "--groups", "--access", "--layouts", "--types", "--repeat", "--warmup",
                                             "--unroll", "--realloc", "--spin-ms"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(opt, valued[k]);
        if (!known) return bad_option("option", opt, "unknown");
        if (i + 1 >= argc) return bad_option(opt, NULL, "needs a value");
        const char *val = argv[++i];
        uint32_t u;
        int rc = 0;
        if (!strcmp(opt, "--device")) {
            if (!parse_u32(val, &u) || u > 1000) return bad_option(opt, val, "not a device index");
            o->device = (int)u;
        } else if (!strcmp(opt, "--max-bytes") || !strcmp(opt, "--min-bytes")) {
            uint64_t v;
            if (!parse_size(val, &v) || !is_pow2(v) || v < GRAIN) return bad_option(opt, val, "not a power of two of at least 64K");
            if (v > ((uint64_t)16 << 30)) return bad_option(opt, val, "at most 16G");
            if (opt[3] == 'a') o->max_bytes = v;
            else o->min_bytes = v, min_given = true;
        } else if (!strcmp(opt, "--scrub")) {
            uint64_t v;
            if (!parse_size(val, &v) || (v && (!is_pow2(v) || v < GRAIN)))
                return bad_option(opt, val, "not 0 or a power of two of at least 64K");
            o->scrub = v;
        } else if (!strcmp(opt, "--chunks")) {
            rc = parse_sizes(opt, val, o->chunks, &o->n_chunks, true);
        } else if (!strcmp(opt, "--tlb-small")) {
            rc = parse_sizes(opt, val, o->tlb_small, &o->n_tlb, false);
        } else if (!strcmp(opt, "--groups")) {
            char buf[256];
            if (strlen(val) >= sizeof buf) return bad_option(opt, val, "too long");
            strcpy(buf, val);
            o->n_groups = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (!parse_u32(t, &u) || u == 0 || u > (1u << 24)) return bad_option(opt, t, "not a workgroup count");
                if (o->n_groups == MAX_LIST) return bad_option(opt, val, "at most 16 entries");
                o->groups[o->n_groups++] = u;
            }
            if (!o->n_groups) return bad_option(opt, val, "empty");
        } else if (!strcmp(opt, "--access")) {
            char buf[256];
            if (strlen(val) >= sizeof buf) return bad_option(opt, val, "too long");
            strcpy(buf, val);
            bool seen[A_COUNT] = {false};
            o->n_access = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int k = 0;
                while (k < A_COUNT && strcmp(t, access_names[k])) k++;
                if (k == A_COUNT) return bad_option(opt, t, "not desc, desc-da or bda");
                if (!seen[k]) o->access[o->n_access++] = k;
                seen[k] = true;
            }
            if (!o->n_access) return bad_option(opt, val, "empty");
        } else if (!strcmp(opt, "--layouts")) {
            char buf[256];
            if (strlen(val) >= sizeof buf) return bad_option(opt, val, "too long");
            strcpy(buf, val);
            memset(o->layout_on, 0, sizeof o->layout_on);
            bool any = false;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int k = 0;
                while (k < L_COUNT && strcmp(t, layout_names[k])) k++;
                if (k == L_COUNT) return bad_option(opt, t, "not one, dedicated, ranges, bufs or allocs");
                o->layout_on[k] = any = true;
            }
            if (!any) return bad_option(opt, val, "empty");
        } else if (!strcmp(opt, "--types")) {
            char buf[256];
            if (strlen(val) >= sizeof buf) return bad_option(opt, val, "too long");
            strcpy(buf, val);
            o->n_types = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (!parse_u32(t, &u) || u >= VK_MAX_MEMORY_TYPES) return bad_option(opt, t, "not a memory type index");
                if (o->n_types == MAX_LIST) return bad_option(opt, val, "at most 16 entries");
                o->types[o->n_types++] = (int)u;
            }
        } else if (!strcmp(opt, "--repeat")) {
            if (!parse_u32(val, &u) || u < 1 || u > 1000) return bad_option(opt, val, "not 1..1000");
            o->repeat = u;
        } else if (!strcmp(opt, "--warmup")) {
            if (!parse_u32(val, &u) || u > 1000) return bad_option(opt, val, "not 0..1000");
            o->warmup = u;
        } else if (!strcmp(opt, "--unroll")) {
            if (!parse_u32(val, &u) || (u != 1 && u != 2 && u != 4 && u != 8)) return bad_option(opt, val, "not 1, 2, 4 or 8");
            o->unroll = u;
        } else if (!strcmp(opt, "--realloc")) {
            if (!parse_u32(val, &u) || u > 1000) return bad_option(opt, val, "not 0..1000");
            o->realloc = u;
        } else if (!strcmp(opt, "--spin-ms")) {
            if (!parse_u32(val, &u) || u > 600000) return bad_option(opt, val, "not 0..600000");
            o->spin_ms = u;
        }
        if (rc) return rc;
    }
    if (o->max_bytes && o->max_bytes < o->min_bytes) {
        if (min_given) return bad_option("--max-bytes", NULL, "below --min-bytes");
        o->min_bytes = o->max_bytes; /* the default 16M lowered to a smaller --max-bytes */
    }
    return 0;
}

/* ---- the pattern and the host's sums ---- */

/* bw_probe.comp's pat(): uint i of the buffer holds pat(i) */
static uint32_t pat(uint32_t i)
{
    i ^= 0x9e3779b9u;
    i *= 0x85ebca6bu;
    i ^= i >> 13;
    i *= 0xc2b2ae35u;
    i ^= i >> 16;
    return i;
}

/* prefix[k]: the sum (mod 2^32) of pat over the first k * GRAIN bytes, filled as far as needed */
static uint32_t *prefix;
static uint64_t prefix_n; /* entries filled */

static uint32_t host_sum(uint64_t bytes)
{
    const uint64_t k = bytes / GRAIN;
    if (k >= prefix_n) {
        uint32_t *p = realloc(prefix, (size_t)(k + 1) * sizeof *p);
        if (!p) {
            fprintf(stderr, PROG ": out of host memory\n");
            exit(EXIT_ERR);
        }
        prefix = p;
        if (prefix_n == 0) prefix[prefix_n++] = 0;
        for (; prefix_n <= k; prefix_n++) {
            uint32_t s = prefix[prefix_n - 1];
            const uint32_t first = (uint32_t)((prefix_n - 1) * (GRAIN / 4));
            for (uint32_t i = 0; i < GRAIN / 4; i++) s += pat(first + i);
            prefix[prefix_n] = s;
        }
    }
    return prefix[k];
}

/* ---- Vulkan ---- */

typedef struct {
    uint32_t nb; /* descriptors in binding 0 (the spec constant NB) */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout pl;
    VkPipeline pipe[K_COUNT];
} kern;

typedef struct {
    VkInstance inst;
    VkDebugUtilsMessengerEXT msgr;
    VkPhysicalDevice phys;
    int index, n_devices;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    char driver[VK_MAX_DRIVER_INFO_SIZE + VK_MAX_DRIVER_NAME_SIZE + 4];
    uint64_t max_alloc, max_buffer;
    uint32_t max_range, max_desc, max_allocs;
    bool bda, dyn_index, ts;
    uint32_t ts_bits;
    char timer_why[320];
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    VkQueryPool qp;
    uint32_t slots;      /* dispatches per row: warmup + repeat (the scrub writes slot `slots`) */
    uint32_t max_groups; /* the largest workgroup count of a dispatch */
    VkBuffer out_buf;       /* the partial sums, device-local (the kernels write them) */
    VkDeviceMemory out_mem;
    VkBuffer host_buf;      /* their copy, host-visible, read after each row */
    VkDeviceMemory host_mem;
    uint32_t *out;
    bool out_coherent;
    uint32_t dev_type;      /* the engine's memory type: the partial sums, the address tables, the scrub */
    uint32_t host_type; /* host-visible memory type for the output and the address tables */
    VkShaderModule mod[K_COUNT];
    kern kerns[64];
    int n_kerns;
} ctx;

static ctx C;
static options O;
static int status = EXIT_OK;  /* the exit status so far: errors that let the run go on */
static int validation_msgs;

/* a Vulkan call that must succeed: otherwise the message and exit 1 */
static void check(VkResult r, const char *call)
{
    if (r == VK_SUCCESS) return;
    fprintf(stderr, PROG ": %s failed: %s (%d)\n", call, vk_result_name(r), (int)r);
    exit(EXIT_ERR);
}

static FILE *info_out(void) { return O.json ? stderr : stdout; }

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
    (void)types;
    (void)user;
    validation_msgs++;
    fprintf(stderr, PROG ": validation %s: %s\n", severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning",
            data && data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
}

static bool has_instance_ext(const char *layer, const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS || !n) return false;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    bool found = false;
    if (p && vkEnumerateInstanceExtensionProperties(layer, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

/* "DEVICE_LOCAL|HOST_VISIBLE|..." */
static const char *flags_text(VkMemoryPropertyFlags f, char *buf, size_t n)
{
    static const struct {
        VkMemoryPropertyFlags bit;
        const char *name;
    } names[] = {
        {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "DEVICE_LOCAL"}, {VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "HOST_VISIBLE"},
        {VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "HOST_COHERENT"}, {VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "HOST_CACHED"},
        {VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT, "LAZILY_ALLOCATED"}, {VK_MEMORY_PROPERTY_PROTECTED_BIT, "PROTECTED"},
    };
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (f & names[i].bit) used += (size_t)snprintf(buf + used, used < n ? n - used : 0, "%s%s", used ? "|" : "", names[i].name);
    if (f & ~(VkMemoryPropertyFlags)0x3f && used < n) snprintf(buf + used, n - used, "%s0x%x", used ? "|" : "", (unsigned)(f & ~0x3fu));
    if (!buf[0]) snprintf(buf, n, "0");
    return buf;
}

/* short form for the table: DL, HV, HC, HCa */
static const char *flags_short(VkMemoryPropertyFlags f, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s%s", f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? "DL" : "",
             f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT ? "|HV" : "", f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT ? "|HC" : "",
             f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? "|HCa" : "", f & ~(VkMemoryPropertyFlags)0xf ? "|+" : "");
    return buf;
}

static int open_device(void)
{
    if (volkInitialize() != VK_SUCCESS) {
        fprintf(stderr, PROG ": no Vulkan loader (libvulkan.so.1) found\n");
        return EXIT_NODEVICE;
    }
    const char *layers[1] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[2];
    uint32_t n_exts = 0;
    VkInstanceCreateFlags iflags = 0;
    if (O.validation) {
        uint32_t n = 0;
        bool found = false;
        if (vkEnumerateInstanceLayerProperties(&n, NULL) == VK_SUCCESS && n) {
            VkLayerProperties *lp = calloc(n, sizeof *lp);
            if (lp && vkEnumerateInstanceLayerProperties(&n, lp) == VK_SUCCESS)
                for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(lp[i].layerName, layers[0]);
            free(lp);
        }
        if (!found) {
            fprintf(stderr, PROG ": --validation: the layer VK_LAYER_KHRONOS_validation is not installed\n");
            return EXIT_ERR;
        }
        if (!has_instance_ext(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) && !has_instance_ext(layers[0], VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
            fprintf(stderr, PROG ": --validation: " VK_EXT_DEBUG_UTILS_EXTENSION_NAME " is missing\n");
            return EXIT_ERR;
        }
        exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    }
    if (has_instance_ext(NULL, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        exts[n_exts++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        iflags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    const uint32_t loader = volkGetInstanceVersion();
    if (loader < VK_API_VERSION_1_1) {
        fprintf(stderr, PROG ": the Vulkan loader is version %u.%u; the probe needs 1.1\n", VK_API_VERSION_MAJOR(loader),
                VK_API_VERSION_MINOR(loader));
        return EXIT_NODEVICE;
    }
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
        .pfnUserCallback = on_message,
    };
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = PROG,
                                   .apiVersion = loader >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : loader};
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pNext = O.validation ? &mci : NULL,
                                      .flags = iflags, .pApplicationInfo = &app,
                                      .enabledLayerCount = O.validation ? 1u : 0u, .ppEnabledLayerNames = layers,
                                      .enabledExtensionCount = n_exts, .ppEnabledExtensionNames = exts};
    VkResult r = vkCreateInstance(&ici, NULL, &C.inst);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
        fprintf(stderr, PROG ": no Vulkan device (the Vulkan loader found no driver)\n");
        return EXIT_NODEVICE;
    }
    check(r, "vkCreateInstance");
    volkLoadInstance(C.inst);
    if (O.validation) check(vkCreateDebugUtilsMessengerEXT(C.inst, &mci, NULL, &C.msgr), "vkCreateDebugUtilsMessengerEXT");

    uint32_t n = 0;
    r = vkEnumeratePhysicalDevices(C.inst, &n, NULL);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) check(r, "vkEnumeratePhysicalDevices");
    if (n == 0) {
        fprintf(stderr, PROG ": no Vulkan device\n");
        return EXIT_NODEVICE;
    }
    VkPhysicalDevice *devs = calloc(n, sizeof *devs);
    if (!devs) return EXIT_ERR;
    r = vkEnumeratePhysicalDevices(C.inst, &n, devs);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) check(r, "vkEnumeratePhysicalDevices");
    C.n_devices = (int)n;
    if (O.device >= (int)n) {
        fprintf(stderr, PROG ": --device %d, but there %s %u Vulkan device%s:", O.device, n == 1 ? "is" : "are", n, n == 1 ? "" : "s");
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(devs[i], &p);
            fprintf(stderr, "%s %u: %s", i ? "," : "", i, p.deviceName);
        }
        fprintf(stderr, "\n");
        free(devs);
        return EXIT_USAGE;
    }
    C.index = O.device;
    if (C.index < 0) {
        int best = -1;
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(devs[i], &p);
            if (sift_vk_type_rank(p.deviceType) > best) {
                best = sift_vk_type_rank(p.deviceType);
                C.index = (int)i;
            }
        }
    }
    C.phys = devs[C.index];
    free(devs);

    vkGetPhysicalDeviceProperties(C.phys, &C.props);
    const uint32_t api = C.props.apiVersion;
    if (api < VK_API_VERSION_1_1) {
        fprintf(stderr, PROG ": %s supports Vulkan %u.%u; the probe needs 1.1\n", C.props.deviceName, VK_API_VERSION_MAJOR(api),
                VK_API_VERSION_MINOR(api));
        return EXIT_ERR;
    }
    vkGetPhysicalDeviceMemoryProperties(C.phys, &C.mem);
    VkPhysicalDeviceMaintenance4Properties m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES,
                                            .pNext = api >= VK_API_VERSION_1_3 ? &m4 : NULL};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                                 .pNext = api >= VK_API_VERSION_1_2 ? &drv : NULL};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vkGetPhysicalDeviceProperties2(C.phys, &p2);
    if (api >= VK_API_VERSION_1_2)
        snprintf(C.driver, sizeof C.driver, "%s %s", drv.driverName, drv.driverInfo);
    else
        snprintf(C.driver, sizeof C.driver, "driver version 0x%x", C.props.driverVersion);
    C.max_alloc = m3.maxMemoryAllocationSize;
    C.max_buffer = api >= VK_API_VERSION_1_3 && m4.maxBufferSize ? m4.maxBufferSize : UINT64_MAX;
    C.max_range = C.props.limits.maxStorageBufferRange;
    C.max_desc = C.props.limits.maxPerStageDescriptorStorageBuffers;
    if (C.props.limits.maxDescriptorSetStorageBuffers < C.max_desc) C.max_desc = C.props.limits.maxDescriptorSetStorageBuffers;
    if (C.props.limits.maxPerStageResources < C.max_desc) C.max_desc = C.props.limits.maxPerStageResources;
    C.max_allocs = C.props.limits.maxMemoryAllocationCount;

    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = api >= VK_API_VERSION_1_2 ? &f12 : NULL};
    vkGetPhysicalDeviceFeatures2(C.phys, &f2);
    C.bda = api >= VK_API_VERSION_1_2 && f12.bufferDeviceAddress && f2.features.shaderInt64;
    C.dyn_index = f2.features.shaderStorageBufferArrayDynamicIndexing;

    /* a compute queue, preferably one with timestamps */
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(C.phys, &nq, NULL);
    VkQueueFamilyProperties *qf = calloc(nq ? nq : 1, sizeof *qf);
    if (!qf) return EXIT_ERR;
    vkGetPhysicalDeviceQueueFamilyProperties(C.phys, &nq, qf);
    C.qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq; i++) {
        if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || !qf[i].queueCount) continue;
        if (C.qfam == UINT32_MAX || (!qf[C.qfam].timestampValidBits && qf[i].timestampValidBits)) C.qfam = i;
    }
    if (C.qfam == UINT32_MAX) {
        free(qf);
        fprintf(stderr, PROG ": %s has no compute queue\n", C.props.deviceName);
        return EXIT_ERR;
    }
    C.ts_bits = qf[C.qfam].timestampValidBits;
    free(qf);
    C.ts = C.ts_bits > 0 && C.props.limits.timestampPeriod > 0 && !O.host_timing;
    if (O.host_timing)
        snprintf(C.timer_why, sizeof C.timer_why, "host: --host-timing");
    else if (!C.ts)
        snprintf(C.timer_why, sizeof C.timer_why,
                 "host: the device has no timestamps on its compute queue (timestampValidBits %u, "
                 "timestampComputeAndGraphics %u); figures are host-timed, submission and wait included",
                 C.ts_bits, (unsigned)C.props.limits.timestampComputeAndGraphics);
    else
        snprintf(C.timer_why, sizeof C.timer_why, "gpu: timestamps (period %g ns, %u valid bits, queue family %u%s)",
                 (double)C.props.limits.timestampPeriod, C.ts_bits, C.qfam,
                 C.props.limits.timestampComputeAndGraphics ? "" : "; timestampComputeAndGraphics is false, this family has them");

    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = C.qfam,
                                         .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .bufferDeviceAddress = C.bda};
    VkPhysicalDeviceFeatures2 e2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = api >= VK_API_VERSION_1_2 ? &e12 : NULL};
    e2.features.shaderInt64 = C.bda;
    e2.features.shaderStorageBufferArrayDynamicIndexing = C.dyn_index;
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &e2, .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci};
    check(vkCreateDevice(C.phys, &dci, NULL, &C.dev), "vkCreateDevice");
    volkLoadDevice(C.dev);
    vkGetDeviceQueue(C.dev, C.qfam, 0, &C.queue);

    const VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = C.qfam};
    check(vkCreateCommandPool(C.dev, &pci, NULL, &C.pool), "vkCreateCommandPool");
    const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = C.pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    check(vkAllocateCommandBuffers(C.dev, &cai, &C.cb), "vkAllocateCommandBuffers");
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    check(vkCreateFence(C.dev, &fci, NULL, &C.fence), "vkCreateFence");
    return EXIT_OK;
}

/* a host-visible memory type among bits, coherent if there is one */
static uint32_t host_type(uint32_t bits, bool *coherent)
{
    uint32_t found = UINT32_MAX;
    for (uint32_t i = 0; i < C.mem.memoryTypeCount; i++) {
        const VkMemoryPropertyFlags f = C.mem.memoryTypes[i].propertyFlags;
        if (!(bits & (1u << i)) || !(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) continue;
        if (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) {
            *coherent = true;
            return i;
        }
        if (found == UINT32_MAX) found = i;
    }
    *coherent = false;
    return found;
}

/* a host-visible buffer (the partial sums, the address tables), mapped */
static void host_buffer(VkDeviceSize size, VkBuffer *buf, VkDeviceMemory *mem, void **map, bool *coherent)
{
    const VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                                   .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT, .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    check(vkCreateBuffer(C.dev, &bi, NULL, buf), "vkCreateBuffer (host-visible)");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(C.dev, *buf, &req);
    bool coh;
    const uint32_t type = host_type(req.memoryTypeBits, &coh);
    if (type == UINT32_MAX) {
        fprintf(stderr, PROG ": %s has no host-visible memory for a storage buffer\n", C.props.deviceName);
        exit(EXIT_ERR);
    }
    const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                                     .memoryTypeIndex = type};
    check(vkAllocateMemory(C.dev, &ai, NULL, mem), "vkAllocateMemory (host-visible)");
    check(vkBindBufferMemory(C.dev, *buf, *mem, 0), "vkBindBufferMemory (host-visible)");
    check(vkMapMemory(C.dev, *mem, 0, VK_WHOLE_SIZE, 0, map), "vkMapMemory");
    if (coherent) *coherent = coh;
}

/* a small device-local storage buffer (the partial sums, an address table) of the engine's memory type */
static void dev_buffer(VkDeviceSize size, VkBuffer *buf, VkDeviceMemory *mem)
{
    const VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                                   .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                            VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                   .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    check(vkCreateBuffer(C.dev, &bi, NULL, buf), "vkCreateBuffer (partial sums or address table)");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(C.dev, *buf, &req);
    uint32_t type = C.dev_type;
    for (uint32_t t = 0; t < C.mem.memoryTypeCount && !(req.memoryTypeBits & (1u << type)); t++) type = t;
    const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                                     .memoryTypeIndex = type};
    check(vkAllocateMemory(C.dev, &ai, NULL, mem), "vkAllocateMemory (partial sums or address table)");
    check(vkBindBufferMemory(C.dev, *buf, *mem, 0), "vkBindBufferMemory");
}

static void setup_run(void)
{
    C.slots = O.warmup + O.repeat;
    C.max_groups = 4096; /* the fill's */
    for (int g = 0; g < O.n_groups; g++)
        if (O.groups[g] > C.max_groups) C.max_groups = O.groups[g];
    void *map;
    dev_buffer((VkDeviceSize)(C.slots + 1) * C.max_groups * 4, &C.out_buf, &C.out_mem);
    host_buffer((VkDeviceSize)C.slots * C.max_groups * 4, &C.host_buf, &C.host_mem, &map, &C.out_coherent);
    C.out = map;
    if (C.ts) {
        const VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                           .queryCount = 2 * C.slots};
        check(vkCreateQueryPool(C.dev, &qci, NULL, &C.qp), "vkCreateQueryPool");
    }
    static const struct {
        const uint32_t *code;
        size_t size;
    } spv[K_COUNT] = {
        [K_READ] = {bw_probe_read_spv, sizeof bw_probe_read_spv},
        [K_BDA] = {bw_probe_bda_spv, sizeof bw_probe_bda_spv},
        [K_FILL] = {bw_probe_fill_spv, sizeof bw_probe_fill_spv},
    };
    for (int k = 0; k < K_COUNT; k++) {
        if (k == K_BDA && !C.bda) continue; /* its module needs bufferDeviceAddress and shaderInt64 */
        const VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = spv[k].size,
                                             .pCode = spv[k].code};
        check(vkCreateShaderModule(C.dev, &mi, NULL, &C.mod[k]), "vkCreateShaderModule");
    }
}

/* the layouts and pipelines of NB = nb (binding 0: nb descriptors; 1: the partial sums; 2: the
 * address table) */
static kern *get_kern(uint32_t nb)
{
    for (int i = 0; i < C.n_kerns; i++)
        if (C.kerns[i].nb == nb) return &C.kerns[i];
    if (C.n_kerns == (int)(sizeof C.kerns / sizeof C.kerns[0])) {
        fprintf(stderr, PROG ": too many descriptor counts\n");
        exit(EXIT_ERR);
    }
    kern *k = &C.kerns[C.n_kerns++];
    memset(k, 0, sizeof *k);
    k->nb = nb;
    const VkDescriptorSetLayoutBinding b[3] = {
        {.binding = 0, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = nb, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT},
        {.binding = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT},
        {.binding = 2, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 1, .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT},
    };
    const VkDescriptorSetLayoutCreateInfo dli = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = 3,
                                                 .pBindings = b};
    check(vkCreateDescriptorSetLayout(C.dev, &dli, NULL, &k->dsl), "vkCreateDescriptorSetLayout");
    const VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = sizeof(push_bw)};
    const VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                            .pSetLayouts = &k->dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    check(vkCreatePipelineLayout(C.dev, &pli, NULL, &k->pl), "vkCreatePipelineLayout");
    return k;
}

static VkPipeline get_pipe(kern *k, int which)
{
    if (k->pipe[which]) return k->pipe[which];
    const uint32_t spec[2] = {k->nb, O.unroll};
    const VkSpecializationMapEntry me[2] = {{0, 0, 4}, {1, 4, 4}};
    const VkSpecializationInfo si = {.mapEntryCount = 2, .pMapEntries = me, .dataSize = sizeof spec, .pData = spec};
    const VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = C.mod[which], .pName = "main", .pSpecializationInfo = &si},
        .layout = k->pl,
    };
    check(vkCreateComputePipelines(C.dev, VK_NULL_HANDLE, 1, &ci, NULL, &k->pipe[which]), "vkCreateComputePipelines");
    return k->pipe[which];
}

static void begin_cb(void)
{
    check(vkResetCommandBuffer(C.cb, 0), "vkResetCommandBuffer");
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    check(vkBeginCommandBuffer(C.cb, &bi), "vkBeginCommandBuffer");
}

static void submit_wait(void)
{
    check(vkEndCommandBuffer(C.cb), "vkEndCommandBuffer");
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &C.cb};
    check(vkQueueSubmit(C.queue, 1, &si, C.fence), "vkQueueSubmit");
    check(vkWaitForFences(C.dev, 1, &C.fence, VK_TRUE, (uint64_t)600 * 1000000000u), "vkWaitForFences");
    check(vkResetFences(C.dev, 1, &C.fence), "vkResetFences");
}

static void barrier(VkPipelineStageFlags src, VkAccessFlags src_access, VkPipelineStageFlags dst, VkAccessFlags dst_access)
{
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = src_access, .dstAccessMask = dst_access};
    vkCmdPipelineBarrier(C.cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* ---- regions: a buffer of `bytes` allocated and bound one way ---- */

typedef struct {
    VkBuffer buf;
    VkDeviceSize off, bytes;
    VkDeviceAddress addr;
} piece;

typedef struct {
    int layout, access;
    uint32_t type;
    uint64_t bytes, chunk, piece_bytes;
    uint32_t n_mem, n_buf, n_pieces, n_segs;
    VkDeviceMemory *mem;
    VkBuffer *bufs;
    piece *pieces, *segs; /* read through; filled through (each at most maxStorageBufferRange) */
    VkDeviceSize alignment;
    bool prefers_dedicated;
    VkBuffer tbl;
    VkDeviceMemory tbl_mem;
    VkDescriptorPool dpool;
    VkDescriptorSet read_set, fill_set;
    kern *kread, *kfill;
} region;

static void region_free(region *r)
{
    if (r->dpool) vkDestroyDescriptorPool(C.dev, r->dpool, NULL);
    if (r->tbl) vkDestroyBuffer(C.dev, r->tbl, NULL);
    if (r->tbl_mem) vkFreeMemory(C.dev, r->tbl_mem, NULL);
    for (uint32_t i = 0; r->bufs && i < r->n_buf; i++)
        if (r->bufs[i]) vkDestroyBuffer(C.dev, r->bufs[i], NULL);
    for (uint32_t i = 0; r->mem && i < r->n_mem; i++)
        if (r->mem[i]) vkFreeMemory(C.dev, r->mem[i], NULL);
    free(r->mem);
    free(r->bufs);
    free(r->pieces);
    free(r->segs);
    memset(r, 0, sizeof *r);
}

static bool device_local_type(uint32_t t) { return C.mem.memoryTypes[t].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT; }

/* The memory types measured: --types, else every DEVICE_LOCAL type a storage buffer may use. */
static int measured_types(uint32_t *types)
{
    const VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = GRAIN,
                                   .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                   .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer b;
    check(vkCreateBuffer(C.dev, &bi, NULL, &b), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(C.dev, b, &req);
    vkDestroyBuffer(C.dev, b, NULL);
    int n = 0;
    if (O.n_types) {
        for (int i = 0; i < O.n_types; i++) types[n++] = (uint32_t)O.types[i];
        return n;
    }
    for (uint32_t t = 0; t < C.mem.memoryTypeCount; t++)
        if (device_local_type(t) && (req.memoryTypeBits & (1u << t))) types[n++] = t;
    if (!n) /* no DEVICE_LOCAL type at all: the first a buffer may use */
        for (uint32_t t = 0; t < C.mem.memoryTypeCount && !n; t++)
            if (req.memoryTypeBits & (1u << t)) types[n++] = t;
    return n;
}

enum { R_OK = 0, R_SKIP = 1, R_ALLOC_FAILED = 2 };

/* Allocates, binds and fills region r. R_SKIP: a limit or a missing feature rules it out (why says
 * which); R_ALLOC_FAILED: the driver refused (why says what); any other Vulkan error ends the run. */
static int region_make(region *r, int layout, int access, uint32_t type, uint64_t bytes, uint64_t chunk, char *why, size_t whyn)
{
    char s1[32], s2[32];
    memset(r, 0, sizeof *r);
    r->layout = layout;
    r->access = access;
    r->type = type;
    r->bytes = bytes;
    r->chunk = layout == L_ONE || layout == L_DEDICATED ? bytes : chunk;
    r->piece_bytes = r->chunk;
    r->n_pieces = (uint32_t)(bytes / r->chunk);
    const bool da = access != A_DESC;
    const bool desc = access != A_BDA;
    if (type >= C.mem.memoryTypeCount)
        return snprintf(why, whyn, "the device has %u memory types", C.mem.memoryTypeCount), R_SKIP;
    const uint64_t heap = C.mem.memoryHeaps[C.mem.memoryTypes[type].heapIndex].size;
    if (da && !C.bda)
        return snprintf(why, whyn, "no bufferDeviceAddress or shaderInt64 (Vulkan 1.2 features)"), R_SKIP;
    if (desc && r->piece_bytes > C.max_range)
        return snprintf(why, whyn, "a descriptor of %s exceeds maxStorageBufferRange (%u bytes): the ranges rows bind it as several",
                        fmt_size(r->piece_bytes, s1, sizeof s1), C.max_range), R_SKIP;
    if (desc && r->n_pieces > 1 && !C.dyn_index)
        return snprintf(why, whyn, "no shaderStorageBufferArrayDynamicIndexing: one descriptor per buffer only"), R_SKIP;
    if (bytes > heap / 2)
        return snprintf(why, whyn, "more than half of memory type %u's heap (%s)", type, fmt_size(heap, s1, sizeof s1)), R_SKIP;
    const uint64_t alloc_bytes = layout == L_ALLOCS ? chunk : bytes;
    if (alloc_bytes > C.max_alloc)
        return snprintf(why, whyn, "an allocation of %s exceeds maxMemoryAllocationSize (%s)", fmt_size(alloc_bytes, s1, sizeof s1),
                        fmt_size(C.max_alloc, s2, sizeof s2)), R_SKIP;
    const uint64_t buf_bytes = layout == L_BUFS || layout == L_ALLOCS ? chunk : bytes;
    if (buf_bytes > C.max_buffer)
        return snprintf(why, whyn, "a buffer of %s exceeds maxBufferSize (%s)", fmt_size(buf_bytes, s1, sizeof s1),
                        fmt_size(C.max_buffer, s2, sizeof s2)), R_SKIP;
    /* the fill writes through descriptors of at most maxStorageBufferRange, within one piece */
    uint64_t seg = r->piece_bytes;
    while (seg > C.max_range) seg /= 2;
    if (seg < GRAIN) return snprintf(why, whyn, "maxStorageBufferRange (%u bytes) is below 64 KiB", C.max_range), R_SKIP;
    r->n_segs = (uint32_t)(bytes / seg);
    if (r->n_segs > 1 && !C.dyn_index)
        return snprintf(why, whyn, "no shaderStorageBufferArrayDynamicIndexing: the fill needs %u descriptors", r->n_segs), R_SKIP;
    const uint32_t most = r->n_segs > r->n_pieces ? r->n_segs : r->n_pieces;
    if (most + 2 > C.max_desc)
        return snprintf(why, whyn, "%u storage-buffer descriptors exceed the device's %u per stage", most + 2, C.max_desc), R_SKIP;
    r->n_buf = layout == L_BUFS || layout == L_ALLOCS ? r->n_pieces : 1;
    r->n_mem = layout == L_ALLOCS ? r->n_pieces : 1;
    if (r->n_mem + 4 > C.max_allocs)
        return snprintf(why, whyn, "%u allocations exceed maxMemoryAllocationCount (%u)", r->n_mem, C.max_allocs), R_SKIP;

    r->mem = calloc(r->n_mem, sizeof *r->mem);
    r->bufs = calloc(r->n_buf, sizeof *r->bufs);
    r->pieces = calloc(r->n_pieces, sizeof *r->pieces);
    r->segs = calloc(r->n_segs, sizeof *r->segs);
    if (!r->mem || !r->bufs || !r->pieces || !r->segs) {
        fprintf(stderr, PROG ": out of host memory\n");
        exit(EXIT_ERR);
    }
    const VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = buf_bytes,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                 (da ? VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT : 0u),
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    for (uint32_t i = 0; i < r->n_buf; i++) {
        const VkResult res = vkCreateBuffer(C.dev, &bi, NULL, &r->bufs[i]);
        if (res == VK_ERROR_OUT_OF_DEVICE_MEMORY || res == VK_ERROR_OUT_OF_HOST_MEMORY) {
            r->bufs[i] = VK_NULL_HANDLE;
            snprintf(why, whyn, "vkCreateBuffer of %s failed: %s", fmt_size(buf_bytes, s1, sizeof s1), vk_result_name(res));
            region_free(r);
            return R_ALLOC_FAILED;
        }
        check(res, "vkCreateBuffer");
    }
    VkMemoryDedicatedRequirements dreq = {.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS};
    VkMemoryRequirements2 req2 = {.sType = VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2, .pNext = &dreq};
    const VkBufferMemoryRequirementsInfo2 rqi = {.sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_REQUIREMENTS_INFO_2, .buffer = r->bufs[0]};
    vkGetBufferMemoryRequirements2(C.dev, &rqi, &req2);
    const VkMemoryRequirements req = req2.memoryRequirements;
    r->alignment = req.alignment;
    r->prefers_dedicated = dreq.prefersDedicatedAllocation || dreq.requiresDedicatedAllocation;
    if (!(req.memoryTypeBits & (1u << type))) {
        snprintf(why, whyn, "the buffer may not use memory type %u (memoryTypeBits 0x%x)", type, req.memoryTypeBits);
        region_free(r);
        return R_SKIP;
    }
    if (dreq.requiresDedicatedAllocation && layout != L_DEDICATED && layout != L_ALLOCS) {
        snprintf(why, whyn, "the driver requires a dedicated allocation for this buffer");
        region_free(r);
        return R_SKIP;
    }
    const VkDeviceSize stride = (req.size + req.alignment - 1) / req.alignment * req.alignment;
    const VkDeviceSize mem_bytes = layout == L_BUFS ? stride * r->n_buf : req.size;
    if (mem_bytes > C.max_alloc) {
        snprintf(why, whyn, "an allocation of %" PRIu64 " bytes exceeds maxMemoryAllocationSize", (uint64_t)mem_bytes);
        region_free(r);
        return R_SKIP;
    }
    VkMemoryDedicatedAllocateInfo ded = {.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO};
    VkMemoryAllocateFlagsInfo fl = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                    .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    for (uint32_t i = 0; i < r->n_mem; i++) {
        VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = mem_bytes, .memoryTypeIndex = type};
        const void **tail = &ai.pNext;
        if (da) {
            *tail = &fl;
            tail = &fl.pNext;
        }
        if (layout == L_DEDICATED || (layout == L_ALLOCS && dreq.requiresDedicatedAllocation)) {
            ded.buffer = r->bufs[i];
            *tail = &ded;
        }
        const VkResult res = vkAllocateMemory(C.dev, &ai, NULL, &r->mem[i]);
        if (res == VK_ERROR_OUT_OF_DEVICE_MEMORY || res == VK_ERROR_OUT_OF_HOST_MEMORY) {
            r->mem[i] = VK_NULL_HANDLE;
            snprintf(why, whyn, "vkAllocateMemory of %s (memory type %u, allocation %u of %u) failed: %s",
                     fmt_size(mem_bytes, s1, sizeof s1), type, i + 1, r->n_mem, vk_result_name(res));
            region_free(r);
            return R_ALLOC_FAILED;
        }
        check(res, "vkAllocateMemory");
    }
    for (uint32_t i = 0; i < r->n_buf; i++)
        check(vkBindBufferMemory(C.dev, r->bufs[i], r->mem[layout == L_ALLOCS ? i : 0], layout == L_BUFS ? stride * i : 0),
              "vkBindBufferMemory");
    for (uint32_t i = 0; i < r->n_pieces; i++) {
        piece *p = &r->pieces[i];
        p->buf = r->bufs[r->n_buf > 1 ? i : 0];
        p->off = r->n_buf > 1 ? 0 : (VkDeviceSize)i * r->piece_bytes;
        p->bytes = r->piece_bytes;
        if (da) {
            const VkBufferDeviceAddressInfo di = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = p->buf};
            p->addr = vkGetBufferDeviceAddress(C.dev, &di) + p->off;
        }
    }
    for (uint32_t i = 0; i < r->n_segs; i++) {
        const uint32_t per = (uint32_t)(r->piece_bytes / seg);
        r->segs[i] = r->pieces[i / per];
        r->segs[i].off += (VkDeviceSize)(i % per) * seg;
        r->segs[i].bytes = seg;
    }

    /* the address table (bda over several pieces), device-local; written with the fill below */
    if (access == A_BDA && r->n_pieces > 1) dev_buffer((VkDeviceSize)r->n_pieces * 8, &r->tbl, &r->tbl_mem);

    /* descriptor sets: the fill's (segments) and the read's (pieces; bda: none in binding 0) */
    r->kfill = get_kern(r->n_segs);
    r->kread = get_kern(access == A_BDA ? (r->n_pieces > 1 ? 2u : 1u) : r->n_pieces);
    const VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = r->kfill->nb + r->kread->nb + 4};
    const VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 2,
                                            .poolSizeCount = 1, .pPoolSizes = &ps};
    check(vkCreateDescriptorPool(C.dev, &dpi, NULL, &r->dpool), "vkCreateDescriptorPool");
    const VkDescriptorSetLayout layouts[2] = {r->kfill->dsl, r->kread->dsl};
    VkDescriptorSet sets[2];
    const VkDescriptorSetAllocateInfo dai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = r->dpool,
                                             .descriptorSetCount = 2, .pSetLayouts = layouts};
    check(vkAllocateDescriptorSets(C.dev, &dai, sets), "vkAllocateDescriptorSets");
    r->fill_set = sets[0];
    r->read_set = sets[1];
    const uint32_t nb_max = r->n_segs > r->n_pieces ? r->n_segs : r->n_pieces;
    VkDescriptorBufferInfo *dbi = calloc(nb_max + 2, sizeof *dbi);
    if (!dbi) exit(EXIT_ERR);
    const VkDescriptorBufferInfo out_info = {C.out_buf, 0, VK_WHOLE_SIZE};
    const VkDescriptorBufferInfo tbl_info = {r->tbl ? r->tbl : C.out_buf, 0, VK_WHOLE_SIZE};
    for (int s = 0; s < 2; s++) {
        const bool fill = s == 0;
        const piece *src = fill ? r->segs : r->pieces;
        const uint32_t n = fill ? r->n_segs : r->n_pieces;
        for (uint32_t i = 0; i < n; i++) dbi[i] = (VkDescriptorBufferInfo){src[i].buf, src[i].off, src[i].bytes};
        VkWriteDescriptorSet w[3] = {
            {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = sets[s], .dstBinding = 0, .descriptorCount = n,
             .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = dbi},
            {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = sets[s], .dstBinding = 1, .descriptorCount = 1,
             .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &out_info},
            {.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = sets[s], .dstBinding = 2, .descriptorCount = 1,
             .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &tbl_info},
        };
        /* bda reads use no descriptor of the buffer itself: binding 0 stays unwritten there */
        const bool skip0 = !fill && access == A_BDA;
        vkUpdateDescriptorSets(C.dev, skip0 ? 2 : 3, skip0 ? w + 1 : w, 0, NULL);
    }
    free(dbi);

    /* the fill, the address table, and the injected error */
    begin_cb();
    if (r->tbl) {
        uint64_t part[8192]; /* vkCmdUpdateBuffer takes 64 KiB at most */
        for (uint32_t i = 0; i < r->n_pieces; i += 8192) {
            const uint32_t n = r->n_pieces - i < 8192 ? r->n_pieces - i : 8192;
            for (uint32_t k = 0; k < n; k++) part[k] = r->pieces[i + k].addr;
            vkCmdUpdateBuffer(C.cb, r->tbl, (VkDeviceSize)i * 8, (VkDeviceSize)n * 8, part);
        }
        barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                VK_ACCESS_SHADER_READ_BIT);
    }
    vkCmdBindPipeline(C.cb, VK_PIPELINE_BIND_POINT_COMPUTE, get_pipe(r->kfill, K_FILL));
    vkCmdBindDescriptorSets(C.cb, VK_PIPELINE_BIND_POINT_COMPUTE, r->kfill->pl, 0, 1, &r->fill_set, 0, NULL);
    for (uint32_t i = 0; i < r->n_segs; i++) {
        const uint32_t words = (uint32_t)(seg / 16);
        const push_bw pc = {.words = words, .piece = i, .first = (uint32_t)(i * (seg / 16))};
        vkCmdPushConstants(C.cb, r->kfill->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, &pc);
        vkCmdDispatch(C.cb, words / WGS < 4096 ? words / WGS : 4096, 1, 1);
    }
    if (O.inject) {
        barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_TRANSFER_WRITE_BIT);
        const piece *last = &r->segs[r->n_segs - 1];
        const uint32_t v = pat((uint32_t)(bytes / 4 - 1)) ^ 1u; /* the last uint, one bit changed */
        vkCmdUpdateBuffer(C.cb, last->buf, last->off + last->bytes - 4, 4, &v);
        barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                VK_ACCESS_SHADER_READ_BIT);
    }
    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT);
    submit_wait();
    return R_OK;
}

/* ---- measuring ---- */

typedef struct {
    double med_us, best_us;
    uint32_t bad; /* dispatches whose sum differed */
} result;

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static region scrub; /* read before every dispatch (--scrub); scrub.bytes 0: none */

static void record_read(const region *r, uint32_t groups, uint32_t passes, uint32_t slot)
{
    const bool bda = r->access == A_BDA;
    vkCmdBindPipeline(C.cb, VK_PIPELINE_BIND_POINT_COMPUTE, get_pipe(r->kread, bda ? K_BDA : K_READ));
    vkCmdBindDescriptorSets(C.cb, VK_PIPELINE_BIND_POINT_COMPUTE, r->kread->pl, 0, 1, &r->read_set, 0, NULL);
    const push_bw pc = {.words = (uint32_t)(r->bytes / 16), .shift = r->n_pieces > 1 ? log2u(r->piece_bytes / 16) : 31u,
                        .passes = passes, .slot = slot, .base_lo = (uint32_t)r->pieces[0].addr,
                        .base_hi = (uint32_t)(r->pieces[0].addr >> 32)};
    vkCmdPushConstants(C.cb, r->kread->pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, &pc);
    vkCmdDispatch(C.cb, groups, 1, 1);
}

static void record_scrub(uint32_t groups)
{
    if (!scrub.bytes) return;
    record_read(&scrub, groups, 1, C.slots);
    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_WRITE_BIT);
}

/* warmup + repeat dispatches of `passes` passes over r, each checked; the median of the timed ones */
static void measure(const region *r, uint32_t groups, uint32_t passes, result *res)
{
    const uint32_t n = C.slots;
    double *us = calloc(n, sizeof *us);
    if (!us) exit(EXIT_ERR);
    const VkPipelineStageFlags cs = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, xfer = VK_PIPELINE_STAGE_TRANSFER_BIT;
    const VkDeviceSize out_bytes = (VkDeviceSize)n * groups * 4;
    begin_cb(); /* the partial sums zeroed: a dispatch that wrote nothing fails its check */
    vkCmdFillBuffer(C.cb, C.out_buf, 0, out_bytes, 0);
    barrier(xfer, VK_ACCESS_TRANSFER_WRITE_BIT, cs, VK_ACCESS_SHADER_WRITE_BIT);
    if (!C.ts) submit_wait();
    if (C.ts) {
        vkCmdResetQueryPool(C.cb, C.qp, 0, 2 * n);
        for (uint32_t s = 0; s < n; s++) {
            record_scrub(groups);
            vkCmdWriteTimestamp(C.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, C.qp, 2 * s);
            record_read(r, groups, passes, s);
            vkCmdWriteTimestamp(C.cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, C.qp, 2 * s + 1);
            barrier(cs, VK_ACCESS_SHADER_WRITE_BIT, cs, VK_ACCESS_SHADER_WRITE_BIT);
        }
        barrier(cs, VK_ACCESS_SHADER_WRITE_BIT, xfer, VK_ACCESS_TRANSFER_READ_BIT);
        const VkBufferCopy bc = {.size = out_bytes};
        vkCmdCopyBuffer(C.cb, C.out_buf, C.host_buf, 1, &bc);
        barrier(xfer, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        submit_wait();
        uint64_t *ts = calloc(2 * n, sizeof *ts);
        if (!ts) exit(EXIT_ERR);
        check(vkGetQueryPoolResults(C.dev, C.qp, 0, 2 * n, 2 * n * sizeof *ts, ts, sizeof *ts,
                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults");
        const uint64_t mask = C.ts_bits >= 64 ? UINT64_MAX : ((uint64_t)1 << C.ts_bits) - 1;
        for (uint32_t s = 0; s < n; s++)
            us[s] = (double)((ts[2 * s + 1] - ts[2 * s]) & mask) * (double)C.props.limits.timestampPeriod * 1e-3;
        free(ts);
    } else {
        for (uint32_t s = 0; s < n; s++) {
            if (scrub.bytes) {
                begin_cb();
                record_scrub(groups);
                submit_wait();
            }
            begin_cb();
            record_read(r, groups, passes, s);
            check(vkEndCommandBuffer(C.cb), "vkEndCommandBuffer");
            const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &C.cb};
            const double t0 = now_us();
            check(vkQueueSubmit(C.queue, 1, &si, C.fence), "vkQueueSubmit");
            check(vkWaitForFences(C.dev, 1, &C.fence, VK_TRUE, (uint64_t)600 * 1000000000u), "vkWaitForFences");
            us[s] = now_us() - t0;
            check(vkResetFences(C.dev, 1, &C.fence), "vkResetFences");
        }
        begin_cb(); /* the partial sums to the host */
        barrier(cs, VK_ACCESS_SHADER_WRITE_BIT, xfer, VK_ACCESS_TRANSFER_READ_BIT);
        const VkBufferCopy bc = {.size = out_bytes};
        vkCmdCopyBuffer(C.cb, C.out_buf, C.host_buf, 1, &bc);
        barrier(xfer, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        submit_wait();
    }
    if (!C.out_coherent) {
        const VkMappedMemoryRange mr = {.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, .memory = C.host_mem, .size = VK_WHOLE_SIZE};
        check(vkInvalidateMappedMemoryRanges(C.dev, 1, &mr), "vkInvalidateMappedMemoryRanges");
    }
    const uint32_t want = host_sum(r->bytes) * passes;
    res->bad = 0;
    for (uint32_t s = 0; s < n; s++) {
        uint32_t sum = 0;
        for (uint32_t g = 0; g < groups; g++) sum += C.out[(size_t)s * groups + g];
        res->bad += sum != want;
    }
    double *timed = us + O.warmup;
    qsort(timed, O.repeat, sizeof *timed, cmp_double);
    res->best_us = timed[0];
    res->med_us = O.repeat % 2 ? timed[O.repeat / 2] : 0.5 * (timed[O.repeat / 2 - 1] + timed[O.repeat / 2]);
    free(us);
}

/* ---- rows ---- */

typedef struct {
    const char *section;
    char layout[48];
    uint64_t bytes;   /* read per dispatch */
    uint64_t buffer;  /* the buffer's size */
    uint32_t passes, pieces, allocs;
    uint32_t type;
    int access;
    uint64_t range;   /* bytes per descriptor; 0: device addresses */
    uint32_t groups;
    uint64_t alignment;
    bool prefers_dedicated;
    char note[64];
    char skip[256];   /* non-empty: not measured, and why */
    bool failed;      /* the skip is an allocation the driver refused */
    result res;
} row;

static row *sweep_rows;
static size_t n_sweep_rows, cap_sweep_rows;
static uint32_t rows_ok, rows_bad, rows_skipped, rows_failed;

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned)*s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void print_header_row(void)
{
    if (O.json) return;
    printf("%-8s %-13s %9s %6s %6s %4s %-12s %-7s %-9s %6s %5s %10s %9s %9s  %-8s %s\n", "section", "layout", "bytes",
           "pieces", "allocs", "type", "flags", "access", "range", "groups", "timer", "median_us", "GB/s", "best_GB/s", "check",
           "note");
}

static void print_row(const row *w)
{
    char b1[32], b2[32], fl[128];
    const VkMemoryPropertyFlags f = w->type < C.mem.memoryTypeCount ? C.mem.memoryTypes[w->type].propertyFlags : 0;
    const double bytes = (double)w->bytes * w->passes;
    if (O.json) {
        printf("{\"section\":\"%s\",\"device\":", w->section);
        json_str(stdout, C.props.deviceName);
        printf(",\"bytes\":%" PRIu64 ",\"buffer_bytes\":%" PRIu64 ",\"passes\":%u,\"layout\":\"%s\",\"pieces\":%u,"
               "\"allocations\":%u,\"memory_type\":%u,\"memory_flags\":\"%s\",\"heap\":%u,\"access\":\"%s\","
               "\"descriptor_range\":%" PRIu64 ",\"groups\":%u,\"workgroup_size\":%u,\"unroll\":%u,\"alignment\":%" PRIu64
               ",\"prefers_dedicated\":%s,\"note\":",
               (uint64_t)bytes, w->buffer, w->passes, w->layout, w->pieces, w->allocs, w->type, flags_text(f, fl, sizeof fl),
               w->type < C.mem.memoryTypeCount ? C.mem.memoryTypes[w->type].heapIndex : 0u, access_names[w->access], w->range,
               w->groups, WGS, O.unroll, w->alignment, w->prefers_dedicated ? "true" : "false");
        json_str(stdout, w->note);
        if (w->skip[0]) {
            printf(",\"skipped\":");
            json_str(stdout, w->skip);
            printf(",\"allocation_failed\":%s}\n", w->failed ? "true" : "false");
        } else {
            printf(",\"timer\":\"%s\",\"median_us\":%.3f,\"best_us\":%.3f,\"gbps\":%.2f,\"best_gbps\":%.2f,\"repeat\":%u,"
                   "\"warmup\":%u,\"check\":\"%s\",\"bad_dispatches\":%u}\n",
                   C.ts ? "gpu" : "host", w->res.med_us, w->res.best_us, bytes / (w->res.med_us * 1e3),
                   bytes / (w->res.best_us * 1e3), O.repeat, O.warmup, w->res.bad ? "mismatch" : "ok", w->res.bad);
        }
    } else {
        char range[32] = "-";
        if (w->range) fmt_size(w->range, range, sizeof range);
        printf("%-8s %-13s %9s %6u %6u %4u %-12s %-7s %-9s %6u ", w->section, w->layout, fmt_size((uint64_t)bytes, b1, sizeof b1),
               w->pieces, w->allocs, w->type, flags_short(f, fl, sizeof fl), access_names[w->access], range, w->groups);
        if (w->skip[0])
            printf("%s: %s%s%s\n", w->failed ? "ALLOCATION FAILED" : "skipped", w->skip, w->note[0] ? "; " : "", w->note);
        else
            printf("%5s %10.1f %9.1f %9.1f  %-8s %s\n", C.ts ? "gpu" : "host", w->res.med_us, bytes / (w->res.med_us * 1e3),
                   bytes / (w->res.best_us * 1e3), w->res.bad ? "MISMATCH" : "ok", w->note);
    }
    fflush(stdout);
    if (w->failed) {
        rows_failed++;
        fprintf(stderr, PROG ": %s %s %s: %s\n", w->section, w->layout, fmt_size(w->buffer, b2, sizeof b2), w->skip);
        if (status == EXIT_OK) status = EXIT_ERR;
    } else if (w->skip[0]) {
        rows_skipped++;
    } else if (w->res.bad) {
        rows_bad++;
        if (!O.json)
            fprintf(stderr, PROG ": MISMATCH: %u of %u dispatches summed differently from the host (%s %s, %s)\n", w->res.bad,
                    C.slots, w->section, w->layout, fmt_size(w->buffer, b2, sizeof b2));
        status = EXIT_MISMATCH;
    } else {
        rows_ok++;
    }
}

static void row_init(row *w, const char *section, const region *r, int layout, int access, uint32_t type, uint64_t bytes,
                     uint64_t chunk, uint32_t groups, uint32_t passes)
{
    char c[32];
    memset(w, 0, sizeof *w);
    w->section = section;
    if (layout == L_ONE || layout == L_DEDICATED) snprintf(w->layout, sizeof w->layout, "%s", layout_names[layout]);
    else snprintf(w->layout, sizeof w->layout, "%s/%s", layout_names[layout], fmt_short(chunk, c, sizeof c));
    w->bytes = bytes;
    w->buffer = bytes;
    w->passes = passes;
    w->type = type;
    w->access = access;
    w->groups = groups;
    const uint64_t piece = layout == L_ONE || layout == L_DEDICATED ? bytes : chunk;
    w->pieces = (uint32_t)(bytes / piece);
    w->allocs = layout == L_ALLOCS ? w->pieces : 1;
    w->range = access == A_BDA ? 0 : piece;
    if (r) {
        w->alignment = r->alignment;
        w->prefers_dedicated = r->prefers_dedicated;
    }
}

static bool groups_ok(row *w)
{
    if (w->groups <= C.props.limits.maxComputeWorkGroupCount[0]) return true;
    snprintf(w->skip, sizeof w->skip, "%u workgroups exceed maxComputeWorkGroupCount[0] (%u)", w->groups,
             C.props.limits.maxComputeWorkGroupCount[0]);
    return false;
}

/* one region made and measured at every workgroup count; sweep rows are kept for the summary */
static void run_region(const char *section, int layout, int access, uint32_t type, uint64_t bytes, uint64_t chunk,
                       uint32_t passes, const char *note)
{
    region r;
    char why[256] = "";
    const int made = region_make(&r, layout, access, type, bytes, chunk, why, sizeof why);
    for (int g = 0; g < O.n_groups; g++) {
        row w;
        row_init(&w, section, made == R_OK ? &r : NULL, layout, access, type, bytes, chunk, O.groups[g], passes);
        snprintf(w.note, sizeof w.note, "%s", note ? note : "");
        if (made != R_OK) {
            snprintf(w.skip, sizeof w.skip, "%s", why);
            w.failed = made == R_ALLOC_FAILED;
        } else if (groups_ok(&w)) {
            measure(&r, O.groups[g], passes, &w.res);
        }
        print_row(&w);
        if (!strcmp(section, "sweep")) {
            if (n_sweep_rows == cap_sweep_rows) {
                cap_sweep_rows = cap_sweep_rows ? 2 * cap_sweep_rows : 256;
                row *p = realloc(sweep_rows, cap_sweep_rows * sizeof *p);
                if (!p) exit(EXIT_ERR);
                sweep_rows = p;
            }
            sweep_rows[n_sweep_rows++] = w;
        }
        if (made == R_ALLOC_FAILED) break; /* one message per region */
    }
    if (made == R_OK) region_free(&r);
}

/* ---- the summary: GB/s by size, one line per configuration ---- */

static void print_summary(uint64_t *sizes, int n_sizes)
{
    if (O.json || !n_sweep_rows) return;
    char b[32];
    printf("\nsummary (sweep, median GB/s by buffer size%s; '-' not measured, '!' verification failed; last/first: the\n"
           "largest size's GB/s over the smallest's):\n", C.ts ? "" : ", host-timed");
    printf("%4s %-13s %-7s %6s", "type", "layout", "access", "groups");
    for (int i = 0; i < n_sizes; i++) printf(" %8s", fmt_short(sizes[i], b, sizeof b));
    printf("  %s\n", "last/first");
    bool *done = calloc(n_sweep_rows, sizeof *done);
    if (!done) return;
    for (size_t i = 0; i < n_sweep_rows; i++) {
        if (done[i]) continue;
        const row *k = &sweep_rows[i];
        bool any = false;
        for (size_t j = i; j < n_sweep_rows && !any; j++) {
            const row *w = &sweep_rows[j];
            any = w->type == k->type && !strcmp(w->layout, k->layout) && w->access == k->access && w->groups == k->groups &&
                  !w->skip[0];
        }
        if (!any) continue; /* every row of it skipped: the table says why */
        printf("%4u %-13s %-7s %6u", k->type, k->layout, access_names[k->access], k->groups);
        double first = 0, last = 0;
        int measured = 0;
        for (int s = 0; s < n_sizes; s++) {
            const row *hit = NULL;
            for (size_t j = i; j < n_sweep_rows; j++) {
                const row *w = &sweep_rows[j];
                if (w->type == k->type && !strcmp(w->layout, k->layout) && w->access == k->access && w->groups == k->groups) {
                    done[j] = true;
                    if (w->bytes == sizes[s]) hit = w;
                }
            }
            if (!hit || hit->skip[0]) {
                printf(" %8s", "-");
                continue;
            }
            const double gbps = (double)hit->bytes * hit->passes / (hit->res.med_us * 1e3);
            printf(" %7.1f%s", gbps, hit->res.bad ? "!" : " ");
            if (first == 0) first = gbps;
            last = gbps;
            measured++;
        }
        if (measured > 1) printf("  %.2f", last / first);
        printf("\n");
    }
    free(done);
}

/* ---- main ---- */

static void cleanup(void)
{
    if (!C.dev) {
        if (C.msgr) vkDestroyDebugUtilsMessengerEXT(C.inst, C.msgr, NULL);
        if (C.inst) vkDestroyInstance(C.inst, NULL);
        return;
    }
    vkDeviceWaitIdle(C.dev);
    if (scrub.bytes) region_free(&scrub);
    for (int i = 0; i < C.n_kerns; i++) {
        for (int k = 0; k < K_COUNT; k++)
            if (C.kerns[i].pipe[k]) vkDestroyPipeline(C.dev, C.kerns[i].pipe[k], NULL);
        vkDestroyPipelineLayout(C.dev, C.kerns[i].pl, NULL);
        vkDestroyDescriptorSetLayout(C.dev, C.kerns[i].dsl, NULL);
    }
    for (int k = 0; k < K_COUNT; k++)
        if (C.mod[k]) vkDestroyShaderModule(C.dev, C.mod[k], NULL);
    if (C.qp) vkDestroyQueryPool(C.dev, C.qp, NULL);
    if (C.out_buf) vkDestroyBuffer(C.dev, C.out_buf, NULL);
    if (C.out_mem) vkFreeMemory(C.dev, C.out_mem, NULL);
    if (C.host_buf) vkDestroyBuffer(C.dev, C.host_buf, NULL);
    if (C.host_mem) vkFreeMemory(C.dev, C.host_mem, NULL);
    vkDestroyFence(C.dev, C.fence, NULL);
    vkDestroyCommandPool(C.dev, C.pool, NULL);
    vkDestroyDevice(C.dev, NULL);
    if (C.msgr) vkDestroyDebugUtilsMessengerEXT(C.inst, C.msgr, NULL);
    vkDestroyInstance(C.inst, NULL);
}

static void print_device(const uint32_t *types, int n_types, uint64_t max_bytes)
{
    FILE *f = info_out();
    char b1[32], b2[32], fl[128];
    const uint32_t api = C.props.apiVersion;
    fprintf(f, "%s: %s (%s, Vulkan %u.%u.%u, %s), device %d of %d\n", PROG, C.props.deviceName, sift_vk_type_text(C.props.deviceType),
            VK_API_VERSION_MAJOR(api), VK_API_VERSION_MINOR(api), VK_API_VERSION_PATCH(api), C.driver, C.index, C.n_devices);
    fprintf(f, "limits: maxStorageBufferRange %u, maxMemoryAllocationSize %s, maxBufferSize %s, storage descriptors per stage %u, "
               "maxMemoryAllocationCount %u, maxComputeWorkGroupCount[0] %u, minStorageBufferOffsetAlignment %" PRIu64 "\n",
            C.max_range, fmt_size(C.max_alloc, b1, sizeof b1), C.max_buffer == UINT64_MAX ? "(not reported)" : fmt_size(C.max_buffer, b2, sizeof b2),
            C.max_desc, C.max_allocs, C.props.limits.maxComputeWorkGroupCount[0],
            (uint64_t)C.props.limits.minStorageBufferOffsetAlignment);
    fprintf(f, "features: bufferDeviceAddress+shaderInt64 %s, shaderStorageBufferArrayDynamicIndexing %s\n", C.bda ? "yes" : "no",
            C.dyn_index ? "yes" : "no");
    for (uint32_t h = 0; h < C.mem.memoryHeapCount; h++)
        fprintf(f, "memory heap %u: %s%s\n", h, fmt_size(C.mem.memoryHeaps[h].size, b1, sizeof b1),
                C.mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT ? ", DEVICE_LOCAL" : "");
    bool first_dl = true;
    for (uint32_t t = 0; t < C.mem.memoryTypeCount; t++) {
        bool measured = false;
        for (int i = 0; i < n_types; i++) measured |= types[i] == t;
        const bool engine = first_dl && device_local_type(t);
        if (device_local_type(t)) first_dl = false;
        fprintf(f, "memory type %u: heap %u, %s%s%s\n", t, C.mem.memoryTypes[t].heapIndex,
                flags_text(C.mem.memoryTypes[t].propertyFlags, fl, sizeof fl), measured ? " (measured)" : "",
                engine ? " (the engine's tensors)" : "");
    }
    fprintf(f, "timer: %s\n", C.timer_why);
    char b3[32];
    fprintf(f, "kernel: workgroups of %u, %u loads in flight per invocation, median of %u dispatches after %u warm-up; "
               "sizes %s to %s; before each dispatch %s%s\n",
            WGS, O.unroll, O.repeat, O.warmup, fmt_size(O.min_bytes, b1, sizeof b1), fmt_size(max_bytes, b2, sizeof b2),
            scrub.bytes ? fmt_size(scrub.bytes, b3, sizeof b3) : "nothing", scrub.bytes ? " of another buffer read (--scrub)" : " else read");
    if (O.inject) fprintf(f, "--inject-error: one word of every buffer is changed after the fill; every row must fail its check\n");
    fprintf(f, "flags: DL DEVICE_LOCAL, HV HOST_VISIBLE, HC HOST_COHERENT, HCa HOST_CACHED; range: bytes per descriptor "
               "('-': device addresses); bytes: read per dispatch\n\n");
}

int main(int argc, char **argv)
{
    int rc = parse_options(argc, argv, &O);
    if (rc) return rc;
    rc = open_device();
    if (rc) {
        cleanup();
        return rc;
    }
    for (int i = 0; i < O.n_types; i++)
        if ((uint32_t)O.types[i] >= C.mem.memoryTypeCount) {
            fprintf(stderr, PROG ": --types %d: %s has memory types 0..%u\n", O.types[i], C.props.deviceName,
                    C.mem.memoryTypeCount - 1);
            cleanup();
            return EXIT_USAGE;
        }
    uint32_t types[VK_MAX_MEMORY_TYPES + MAX_LIST];
    const int n_types = measured_types(types);
    uint32_t default_type = types[0];
    for (uint32_t t = 0; t < C.mem.memoryTypeCount; t++) /* the engine's: the first DEVICE_LOCAL type */
        if (device_local_type(t)) {
            default_type = t;
            break;
        }

    /* the largest size: --max-bytes, else min(2 GiB, half the largest DEVICE_LOCAL heap) */
    uint64_t max_bytes = O.max_bytes;
    if (!max_bytes) {
        uint64_t heap = 0;
        for (uint32_t h = 0; h < C.mem.memoryHeapCount; h++)
            if ((C.mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && C.mem.memoryHeaps[h].size > heap)
                heap = C.mem.memoryHeaps[h].size;
        if (!heap) heap = C.mem.memoryHeaps[C.mem.memoryTypes[default_type].heapIndex].size;
        max_bytes = (uint64_t)2 << 30;
        while (max_bytes > heap / 2 && max_bytes > GRAIN) max_bytes /= 2;
        if (max_bytes < O.min_bytes) {
            fprintf(stderr, PROG ": the device-local heap (%" PRIu64 " bytes) is too small for --min-bytes\n", heap);
            cleanup();
            return EXIT_USAGE;
        }
    }
    C.dev_type = default_type;
    uint64_t sizes[40];
    int n_sizes = 0;
    for (uint64_t s = O.min_bytes; s <= max_bytes; s *= 2) sizes[n_sizes++] = s;
    setup_run();

    /* the scrub buffer: one allocation of the engine's memory type, read through one descriptor */
    if (O.scrub) {
        char why[256];
        uint64_t sb = O.scrub;
        while (sb > C.max_range && sb > GRAIN) sb /= 2;
        const int made = region_make(&scrub, L_ONE, A_DESC, default_type, sb, sb, why, sizeof why);
        if (made != R_OK) {
            fprintf(stderr, PROG ": the scrub buffer (%" PRIu64 " bytes): %s\n", sb, why);
            cleanup();
            return EXIT_ERR;
        }
    }
    print_device(types, n_types, max_bytes);
    (void)host_sum(max_bytes); /* the host's sums, once */

    /* control: the largest buffer, one allocation, the engine's memory type, first access and groups */
    int ctl_access = O.access[0]; /* the first access that can read the largest buffer in one piece */
    for (int a = O.n_access - 1; a >= 0; a--)
        if (O.access[a] == A_BDA ? C.bda : max_bytes <= C.max_range && (O.access[a] == A_DESC || C.bda)) ctl_access = O.access[a];
    print_header_row();
    {
        region r;
        char why[256];
        if (region_make(&r, L_ONE, ctl_access, default_type, max_bytes, max_bytes, why, sizeof why) == R_OK) {
            const double t0 = now_us();
            result res;
            while (now_us() - t0 < O.spin_ms * 1e3) measure(&r, O.groups[0], 1, &res);
            region_free(&r);
        }
        run_region("control", L_ONE, ctl_access, default_type, max_bytes, max_bytes, 1, "first");
    }

    /* sweep */
    for (int ti = 0; ti < n_types; ti++)
        for (int l = 0; l < L_COUNT; l++) {
            if (!O.layout_on[l]) continue;
            const bool chunked = l == L_RANGES || l == L_BUFS || l == L_ALLOCS;
            for (int c = 0; c < (chunked ? O.n_chunks : 1); c++)
                for (int a = 0; a < O.n_access; a++)
                    for (int s = 0; s < n_sizes; s++) {
                        if (chunked && O.chunks[c] >= sizes[s]) continue; /* that is the one layout */
                        run_region("sweep", l, O.access[a], types[ti], sizes[s], chunked ? O.chunks[c] : sizes[s], 1, NULL);
                    }
        }

    /* tlb: the bytes of one pass over the largest buffer, read from a small one */
    for (int i = 0; i < O.n_tlb; i++) {
        const uint64_t small = O.tlb_small[i];
        char note[64], b1[32], b2[32];
        if (small >= max_bytes) {
            fprintf(info_out(), "tlb      (--tlb-small %s skipped: not below the largest size, %s)\n", fmt_size(small, b1, sizeof b1),
                       fmt_size(max_bytes, b2, sizeof b2));
            continue;
        }
        const uint32_t passes = (uint32_t)(max_bytes / small);
        for (int a = 0; a < O.n_access; a++) {
            run_region("tlb", L_ONE, O.access[a], default_type, max_bytes, max_bytes, 1, "one pass, large buffer");
            snprintf(note, sizeof note, "%u passes over %s in one dispatch", passes, fmt_size(small, b1, sizeof b1));
            run_region("tlb", L_ONE, O.access[a], default_type, small, small, passes, note);
            run_region("tlb", L_ONE, O.access[a], default_type, small, small, 1, "one pass, small buffer");
            /* the small buffer again, while the large one is held */
            region big;
            char why[256];
            const int made = region_make(&big, L_ONE, O.access[a], default_type, max_bytes, max_bytes, why, sizeof why);
            snprintf(note, sizeof note, "one pass, %s held", fmt_size(max_bytes, b1, sizeof b1));
            if (made == R_OK) {
                run_region("tlb", L_ONE, O.access[a], default_type, small, small, 1, note);
                region_free(&big);
            } else {
                fprintf(info_out(), "tlb      (%s: %s)\n", note, why);
                if (made == R_ALLOC_FAILED && status == EXIT_OK) status = EXIT_ERR;
            }
        }
    }

    /* realloc: the largest buffer, allocated anew each time */
    for (uint32_t k = 0; k < O.realloc; k++)
        for (int a = 0; a < O.n_access; a++) {
            char note[32];
            snprintf(note, sizeof note, "allocation %u of %u", k + 1, O.realloc);
            run_region("realloc", L_ONE, O.access[a], default_type, max_bytes, max_bytes, 1, note);
        }

    run_region("control", L_ONE, ctl_access, default_type, max_bytes, max_bytes, 1, "last");
    print_summary(sizes, n_sizes);

    FILE *f = info_out();
    fprintf(f, "\n%u rows verified, %u mismatched, %u skipped, %u allocations refused%s\n", rows_ok, rows_bad, rows_skipped,
            rows_failed, C.ts ? "" : " (host-timed)");
    cleanup();
    if (O.validation && validation_msgs) {
        fprintf(stderr, PROG ": %d validation message%s\n", validation_msgs, validation_msgs == 1 ? "" : "s");
        if (status == EXIT_OK) status = EXIT_ERR;
    }
    free(prefix);
    free(sweep_rows);
    return status;
}
