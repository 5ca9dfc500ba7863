/* Cross-backend conformance (SPEC §10): runs the registry's cases (tests/cases_*.c) on one backend
 * against the CPU reference, or times them (--perf). Prints one line per check; a failure names
 * its case and backend.
 *
 *   sift-conformance [--backend cpu|vulkan|vulkan:PROFILE|cuda] [--suite ops|model|cache|attn|all] [--list]
 *   sift-conformance --perf [--backend B] [--suite perf|ops|model|all] [--shape 8b|small] [--prefill T] [--repeat R]
 *
 * Exit status: 0 all passed, 1 a failure, 77 the backend cannot be opened here (Meson's skip).
 * A case whose graph the backend does not run (sift_graph_check_supported) is reported as not
 * supported and counted apart; it is not a failure.
 *
 * Environment:
 *   SIFT_EXPECT_BACKENDS=cpu,vulkan  a listed backend that cannot be opened fails instead of skipping
 *   SIFT_TEST_BACKENDS=cpu,vulkan    only the listed backends are tested; the others skip (exit 77)
 *   SIFT_CONFORMANCE_MAX_N=n         largest context of the attention matrix (default: 33000, or
 *                                    1048576 where the backend is a real GPU)
 *   SIFT_CONFORMANCE_MAX_ROWS=n      largest paged cache (default 70000; the CUDA emulator cuts it)
 *   SIFT_VULKAN_VALIDATION           set to 1 here unless given: any validation message fails
 */
#include "registry.h"
#include "backend_filter.h"

#include <time.h>

static conf_case *cases;
static int n_registered, cap_cases;

void registry_add(const char *suite, const char *name, case_check_fn check, case_build_fn build, const void *params,
                  size_t size)
{
    if (n_registered == cap_cases) {
        cap_cases = cap_cases ? 2 * cap_cases : 256;
        cases = realloc(cases, (size_t)cap_cases * sizeof *cases);
        if (!cases) exit(2);
    }
    conf_case *c = &cases[n_registered++];
    memset(c, 0, sizeof *c);
    c->suite = suite;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->check = check;
    c->build = build;
    c->params = malloc(size ? size : 1);
    if (!c->params) exit(2);
    if (size) memcpy(c->params, params, size);
}

void registry_add_span_timed(const char *suite, const char *name, case_build_fn build, const void *params, size_t size,
                             int span_nodes)
{
    registry_add(suite, name, NULL, build, params, size);
    cases[n_registered - 1].span_nodes = span_nodes;
}

void built_graph_free(built_graph *b)
{
    sift_graph_destroy(b->g);
    for (int i = 0; i < b->n_tensors; i++) sift_tensor_destroy(b->tensors[i]);
    memset(b, 0, sizeof *b);
}

void check_reference_finite(const char *cname, const float *ref, size_t n)
{
    size_t bad = 0;
    for (size_t j = 0; j < n; j++) bad += !isfinite(ref[j]);
    report(cname, "cpu", "non-finite", (double)bad, 0.0, bad == 0);
}

static bool expected_backend(const char *name)
{
    const char *expect = getenv("SIFT_EXPECT_BACKENDS");
    if (!expect) return false;
    char list[256], key[48];
    snprintf(list, sizeof list, ",%s,", expect);
    snprintf(key, sizeof key, ",%s,", name);
    return strstr(list, key) != NULL;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Wall-clock milliseconds (the warm-up's length). */
static double now_ms(void)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Times one case's graph: warm-up runs for at least 3 runs and 200 ms (a GPU left idle while the
 * host drew the case's inputs may still be at low clocks after a few runs of a short graph), then
 * the median over `repeat` runs of each node. */
/* Whether a timed run ended well; if not, says why (not supported, or a failure). */
static bool timed_run_ok(const conf_case *c, const backend *dut, sift_status s)
{
    const char *bname = sift_backend_kind_name(dut->kind);
    if (s == SIFT_E_UNSUPPORTED) {
        printf("%-58s %-7s not supported: %s\n", c->name, bname, sift_last_error());
    } else if (s != SIFT_OK) {
        char msg[700];
        snprintf(msg, sizeof msg, "%s (%s)", sift_status_name(s), sift_last_error());
        fail(c->name, bname, msg);
    }
    return s == SIFT_OK;
}

/* One timing line: the case (or blank), the node, its us and bytes over them (none for a node too
 * fast for the clock). */
static void print_timing(const char *name, const char *node, double us, double bytes, int decimals)
{
    char gbs[32] = "-";
    if (us > 0.0) snprintf(gbs, sizeof gbs, "%.1f", bytes / (us * 1e3));
    printf("%-58s %-16s %10.*f %10s\n", name, node, decimals, us, gbs);
}

/* A span-timed case: the median span over repeat runs, per node, and the bytes of a node over it. */
static void time_case_span(const conf_case *c, const backend *dut, int repeat)
{
    built_graph b = {0};
    double *spans = calloc((size_t)repeat + 1, sizeof *spans);
    sift_status s = spans ? c->build(c, dut->ctx, &b) : SIFT_E_NOMEM;
    if (s == SIFT_OK) s = sift_graph_check_supported(b.g);
    const double warm_from = now_ms();
    for (int w = 0; s == SIFT_OK && (w < 3 || now_ms() - warm_from < 200.0); w++) s = sift_graph_compute_span(b.g, &spans[0]);
    for (int r = 0; r < repeat && s == SIFT_OK; r++) s = sift_graph_compute_span(b.g, &spans[r]);
    if (timed_run_ok(c, dut, s)) {
        qsort(spans, (size_t)repeat, sizeof *spans, cmp_double);
        print_timing(c->name, "per node", spans[repeat / 2] / c->span_nodes, sift_graph_node_bytes(b.g, 0), 2);
    }
    free(spans);
    built_graph_free(&b);
}

static void time_case(const conf_case *c, const backend *dut, int repeat)
{
    if (c->span_nodes > 0) {
        time_case_span(c, dut, repeat);
        return;
    }
    built_graph b = {0};
    double *samples = NULL;
    sift_status s = c->build(c, dut->ctx, &b);
    sift_graph *g = b.g;
    if (s == SIFT_OK) s = sift_graph_check_supported(g);
    const int n = s == SIFT_OK ? sift_graph_node_count(g) : 0;
    if (s == SIFT_OK && !(samples = calloc((size_t)(repeat + 1) * (size_t)n + 1, sizeof *samples))) s = SIFT_E_NOMEM;
    double *node_us = samples ? samples + (size_t)repeat * (size_t)n : NULL; /* the latest run */
    const double warm_from = now_ms();
    for (int w = 0; s == SIFT_OK && (w < 3 || now_ms() - warm_from < 200.0); w++) s = sift_graph_compute_timed(g, node_us);
    for (int r = 0; r < repeat && s == SIFT_OK; r++) {
        s = sift_graph_compute_timed(g, node_us);
        for (int i = 0; i < n; i++) samples[i * repeat + r] = node_us[i];
    }
    if (timed_run_ok(c, dut, s))
        for (int i = 0; i < n; i++) {
            qsort(samples + i * repeat, (size_t)repeat, sizeof *samples, cmp_double);
            print_timing(i ? "" : c->name, sift_graph_node_op_name(g, i), samples[i * repeat + repeat / 2],
                         sift_graph_node_bytes(g, i), 1);
        }
    free(samples);
    built_graph_free(&b);
}

/* A check that ends early (TRY) comes back here. */
static void run_check(const conf_case *c, const backend *ref, const backend *dut)
{
    if (!setjmp(case_end)) c->check(c, ref, dut);
}

static int usage(FILE *f, int status)
{
    fputs("usage: sift-conformance [--backend cpu|vulkan|vulkan:PROFILE|cuda] [--suite ops|model|cache|attn|all] [--match S] [--skip S] [--list]\n"
          "       sift-conformance --perf [--backend B] [--suite perf|ops|model|all] [--shape 8b|small]\n"
          "                        [--prefill T] [--repeat R]\n"
          "\n"
          "Runs the conformance cases of a suite on one backend against the CPU reference (default:\n"
          "--backend cpu --suite all). --perf instead times each case's graph (default suite perf: the\n"
          "matmuls of a layer and the logits per weight type, decode and prefill, and the other ops, at\n"
          "Llama-3.1-8B's shapes or a small model's) and prints each node's median time in us and its\n"
          "effective bandwidth (the bytes it must move at least, over its time); at --shape 8b the\n"
          "\"matvec stream\" cases time a graph of like one-token products over weights larger than\n"
          "the L2 cache as one span, and print it per product. --match S keeps the cases whose name\n"
          "contains S, --skip S drops them. vulkan:PROFILE runs the Vulkan backend under a device\n"
          "profile (SIFT_VULKAN_PROFILE).\n",
          f);
    return status;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("SIFT_VULKAN_VALIDATION", "1", 0);
    const char *backend_name = "cpu", *suite = NULL, *shape = "8b", *match = NULL, *skip = NULL;
    bool perf = false, list = false;
    long long repeat = 20, prefill = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--perf")) perf = true;
        else if (!strcmp(a, "--list")) list = true;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout, 0);
        else if (val && !strcmp(a, "--backend")) backend_name = argv[++i];
        else if (val && !strcmp(a, "--suite")) suite = argv[++i];
        else if (val && !strcmp(a, "--match")) match = argv[++i];
        else if (val && !strcmp(a, "--skip")) skip = argv[++i];
        else if (val && !strcmp(a, "--shape") && (!strcmp(val, "8b") || !strcmp(val, "small"))) shape = argv[++i];
        else if (val && !strcmp(a, "--prefill") && (prefill = atoll(val)) >= 1 && prefill <= 65536) i++;
        else if (val && !strcmp(a, "--repeat") && (repeat = atoll(val)) >= 1 && repeat <= 100000) i++;
        else {
            fprintf(stderr, "sift-conformance: bad option '%s'%s%s\n", a, val ? " " : "", val ? val : "");
            return usage(stderr, 2);
        }
    }
    if (!suite) suite = perf ? "perf" : "all";
    /* vulkan:PROFILE: the Vulkan backend narrowed to a device profile (SIFT_VULKAN_PROFILE) */
    char kind_name[32];
    snprintf(kind_name, sizeof kind_name, "%s", backend_name);
    char *colon = strchr(kind_name, ':');
    if (colon) {
        *colon = 0;
        if (strcmp(kind_name, "vulkan") != 0) {
            fprintf(stderr, "sift-conformance: only the vulkan backend has profiles ('%s')\n", backend_name);
            return 2;
        }
        setenv("SIFT_VULKAN_PROFILE", colon + 1, 1);
    }
    sift_backend_kind kind;
    if (sift_backend_kind_parse(kind_name, &kind) != SIFT_OK) {
        fprintf(stderr, "sift-conformance: unknown backend '%s'\n", backend_name);
        return 2;
    }

    backend ref = {SIFT_BACKEND_CPU, NULL}, dut_own = {kind, NULL};
    const char *excluded = list ? NULL : test_backend_excluded(kind);
    if (excluded) {
        printf("backend %-7s skipped: %s\n", backend_name, excluded);
        return 77;
    }
    if (!list) {
        if (sift_context_create(SIFT_BACKEND_CPU, &ref.ctx) != SIFT_OK) {
            printf("FAIL: the CPU reference backend is not available: %s\n", sift_last_error());
            return 1;
        }
        if (kind != SIFT_BACKEND_CPU && sift_context_create(kind, &dut_own.ctx) != SIFT_OK) {
            const bool expected = expected_backend(kind_name);
            printf("backend %-7s %s: %s\n", backend_name,
                   expected ? "MISSING (expected by SIFT_EXPECT_BACKENDS)" : "skipped", sift_last_error());
            sift_context_destroy(ref.ctx);
            return expected ? 1 : 77;
        }
    }
    const backend *dut = kind == SIFT_BACKEND_CPU ? &ref : &dut_own;
    const char *device = dut->ctx ? sift_context_device_name(dut->ctx) : "";
    const bool real_gpu = kind == SIFT_BACKEND_CUDA || (kind == SIFT_BACKEND_VULKAN && !strstr(device, "llvmpipe"));

    suite_options o = {.max_n = real_gpu ? 1048576 : 33000, .max_rows = 70000, .big = !strcmp(shape, "8b"),
                       .prefill = prefill};
    if (getenv("SIFT_CONFORMANCE_MAX_N")) o.max_n = atoll(getenv("SIFT_CONFORMANCE_MAX_N"));
    if (getenv("SIFT_CONFORMANCE_MAX_ROWS")) o.max_rows = atoll(getenv("SIFT_CONFORMANCE_MAX_ROWS"));
    cases_ops(&o);
    cases_model(&o);
    cases_cache(&o);
    cases_attn(&o);
    if (perf || list) cases_perf(&o);

    int ran = 0;
    for (int i = 0; i < n_registered; i++) {
        const conf_case *c = &cases[i];
        if (strcmp(suite, "all") && strcmp(suite, c->suite)) continue;
        if (match && !strstr(c->name, match)) continue;
        if (skip && strstr(c->name, skip)) continue;
        if (list) {
            printf("%-6s %s\n", c->suite, c->name);
            continue;
        }
        if (perf ? !c->build : !c->check) continue;
        if (ran++ == 0) {
            printf("backend %s: %s; reference cpu; max N %lld\n", backend_name, device, (long long)o.max_n);
            if (perf) printf("\n%-58s %-16s %10s %10s\n", "case", "node", "us", "GB/s");
        }
        rng_seed_from(c->name);
        case_unsupported = false;
        test_case_begin(c->name, backend_name);
        if (perf) time_case(c, dut, (int)repeat);
        else run_check(c, &ref, dut);
        n_unsupported += case_unsupported;
    }
    if (list) return 0;
    if (ran == 0) {
        printf("FAIL: no case in suite '%s'\n", suite);
        n_failures++;
    }
    if (dut != &ref) test_context_done(dut_own.ctx);
    test_context_done(ref.ctx);
    const int status = test_summary(suite, backend_name);
    for (int i = 0; i < n_registered; i++) free(cases[i].params);
    free(cases);
    return status;
}
