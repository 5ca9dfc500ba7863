/* ggml's decode matrix-vector products at the 8B shapes, measured as sift's "matvec stream" perf
 * cases measure sift's (tests/cases_perf.c): per weight type and shape, a graph of one-token
 * products over copies of w that together exceed the L2 cache, on ggml's CUDA backend (or Vulkan,
 * built with -DGGML_MV_VULKAN); per product = (t(48) - t(16)) / 32 products (t: the median wall
 * clock of 15 synchronous graph computes), so a compute's fixed cost cancels. Output: one line per
 * product, "TYPE [1][K] x [N]^T us GB/s", which .ci/gpu-bench reads (SIFT_GGML_MV).
 *
 * Not part of sift's build: compiled on the GPU machine against a ggml checkout built there
 * (docs/benchmarks.md gives the configuration used), e.g.
 *   cc -O2 -I$GGML/include cuda/bench/ggml_mv.c -L$GGML_BUILD/bin -lggml -lggml-base -lggml-cuda
 * (where the build leaves the libraries outside bin/, as one configured with -DGGML_BUILD_TESTS=OFF
 * -DGGML_BUILD_EXAMPLES=OFF did, -L and -Wl,-rpath the folders that
 * `find $GGML_BUILD -name 'libggml*.so'` names) */
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#ifdef GGML_MV_VULKAN
#include "ggml-vulkan.h"
#else
#include "ggml-cuda.h"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

static double time_graph(ggml_backend_t be, int k, int n, enum ggml_type type, int copies, int nodes, const void *wdata, size_t wbytes)
{
    struct ggml_init_params ip = {ggml_tensor_overhead() * (copies + nodes + 4) + ggml_graph_overhead_custom(nodes + 8, false), NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *w[16], *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, 1);
    for (int i = 0; i < copies; i++) w[i] = ggml_new_tensor_2d(ctx, type, k, n);
    struct ggml_cgraph *g = ggml_new_graph_custom(ctx, nodes + 8, false);
    for (int i = 0; i < nodes; i++) ggml_build_forward_expand(g, ggml_mul_mat(ctx, w[i % copies], x));
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, be);
    if (!buf) { fprintf(stderr, "alloc failed\n"); exit(1); }
    for (int i = 0; i < copies; i++) ggml_backend_tensor_set(w[i], wdata, 0, wbytes);
    float *xv = malloc(sizeof(float) * k);
    for (int i = 0; i < k; i++) xv[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    ggml_backend_tensor_set(x, xv, 0, sizeof(float) * k);
    free(xv);
    double s[15];
    for (int r = 0; r < 5; r++) ggml_backend_graph_compute(be, g);
    for (int r = 0; r < 15; r++) {
        const double t0 = now_us();
        ggml_backend_graph_compute(be, g);
        ggml_backend_synchronize(be);
        s[r] = now_us() - t0;
    }
    qsort(s, 15, sizeof *s, cmpd);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return s[7];
}

int main(void)
{
#ifdef GGML_MV_VULKAN
    ggml_backend_t be = ggml_backend_vk_init(0);
#else
    ggml_backend_t be = ggml_backend_cuda_init(0);
#endif
    if (!be) { fprintf(stderr, "no backend\n"); return 1; }
    printf("ggml backend: %s\n", ggml_backend_name(be));
    const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_F16, GGML_TYPE_BF16};
    const int shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {4096, 128256}}; /* (K, N) */
    printf("%-6s %-22s %10s %10s\n", "type", "shape [1][K] x [N]^T", "us", "GB/s");
    for (int ti = 0; ti < 7; ti++)
        for (int si = 0; si < 4; si++) {
            const int k = shapes[si][0], n = shapes[si][1];
            const size_t row = ggml_row_size(types[ti], k), wbytes = row * (size_t)n;
            int copies = (int)(160e6 / (double)wbytes) + 1;
            if (copies > 12) copies = 12;
            if (copies < 2) copies = 2;
            /* 64 quantized rows of random values, repeated over the whole matrix */
            float *src = malloc(sizeof(float) * (size_t)k * 64);
            for (size_t i = 0; i < (size_t)k * 64; i++) src[i] = (float)((i * 2246822519u) % 20001) / 10000.0f - 1.0f;
            unsigned char *q = malloc(row * 64), *wdata = malloc(wbytes);
            ggml_quantize_chunk(types[ti], src, q, 0, 64, k, NULL);
            for (int r = 0; r < n; r += 64) memcpy(wdata + (size_t)r * row, q, row * (size_t)(n - r < 64 ? n - r : 64));
            const int n1 = n > 100000 ? 4 : 16, n2 = n > 100000 ? 12 : 48;
            const double t1 = time_graph(be, k, n, types[ti], copies, n1, wdata, wbytes);
            const double t2 = time_graph(be, k, n, types[ti], copies, n2, wdata, wbytes);
            const double us = (t2 - t1) / (n2 - n1);
            char shape[64];
            snprintf(shape, sizeof shape, "[1][%d] x [%d]^T", k, n);
            printf("%-6s %-22s %10.2f %10.1f\n", ggml_type_name(types[ti]), shape, us, (double)wbytes / (us * 1e3));
            fflush(stdout);
            free(src); free(q); free(wdata);
        }
    ggml_backend_free(be);
    return 0;
}
