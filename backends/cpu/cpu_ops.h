/* The CPU reference backend's internal interface: its op functions and the helpers they share. */
#ifndef SIFT_CPU_OPS_H
#define SIFT_CPU_OPS_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The heavy loops are also compiled for AVX2 and picked at run time where the CPU has it. The
 * arithmetic is the same: sift_dot_f32's eight sums are eight lanes whatever the vector width,
 * C11 mode keeps the compiler from contracting a * b + c into FMAs, so results stay bit-identical;
 * only more of each loop runs per instruction. Not in sanitizer builds: the run-time pick (an
 * ifunc resolver) runs before the sanitizer's runtime starts, and crashes under it.
 * (GCC names the sanitizers with __SANITIZE_*__, clang with __has_feature.) */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define CPU_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CPU_SANITIZED 1
#endif
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(CPU_SANITIZED)
#define CPU_HOT_LOOP __attribute__((target_clones("avx2", "default")))
/* The attention's loops also for AVX-512: 25% faster than their AVX2 build on the Zen 5 where
 * this was measured. The matrix products built so ran 3x slower than at AVX2, so they stay there. */
#define CPU_HOT_LOOP_AVX512 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_HOT_LOOP
#define CPU_HOT_LOOP_AVX512
#endif

/* y[i] = e^x[i] for n floats, within 0.504 ulp of the exact value (tests/cpu_test.c checks a sweep
 * of the range against exp() in double): libm's expf is as accurate, but one call per value (390
 * million of them, some 2.5 ns each, in a 4,031-token prefill of tools/retrieval's model) was a
 * fifth of the prefill, and this loop vectorizes.
 * In double: x = k ln2 + r with k the integer nearest x / ln2 (added to 1.5 * 2^52, k lands in the
 * low bits of the sum), |r| <= ln2 / 2 + tiny; e^r by its Taylor polynomial of degree 8, whose first
 * term left out, r^9 / 9!, is below 2^-31 of e^r; 2^k put straight into a double's exponent field.
 * The only rounding of note is the last one, to float. x is clamped to [-110, 89] first (e^-110
 * rounds to 0, e^89 overflows to inf; k then stays far inside a double's exponent range), NaN
 * passing through; the clamp compares x's bits, because float comparisons may raise the invalid
 * exception and the compiler then keeps them as branches, which stops the loop vectorizing. */
static inline void cpu_exp(const float *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        const bool nan = (b & 0x7fffffffu) > 0x7f800000u;
        b = !nan && b > 0xc2dc0000u ? 0xc2dc0000u : b;                     /* below -110 (bits of -110.0f) */
        b = !nan && b < 0x80000000u && b > 0x42b20000u ? 0x42b20000u : b; /* above 89 (bits of 89.0f) */
        float xc;
        memcpy(&xc, &b, sizeof xc);
        const double v = xc, shifted = v * 0x1.71547652b82fep0 + 0x1.8p52; /* v / ln2 + 1.5 * 2^52 */
        const double k = shifted - 0x1.8p52, r = v - k * 0x1.62e42fefa39efp-1;
        double p = 1.0 / 40320;
        p = p * r + 1.0 / 5040;
        p = p * r + 1.0 / 720;
        p = p * r + 1.0 / 120;
        p = p * r + 1.0 / 24;
        p = p * r + 1.0 / 6;
        p = p * r + 0.5;
        p = p * r + 1.0;
        p = p * r + 1.0;
        uint64_t bits; /* 2^k: the low bits of `shifted` are k (two's complement), plus the bias */
        memcpy(&bits, &shifted, sizeof bits);
        bits = (bits + 1023) << 52;
        double two_k;
        memcpy(&two_k, &bits, sizeof two_k);
        y[i] = (float)(p * two_k);
    }
}

/* The first element of a tensor's data (views start t->offset bytes into their parent's storage). */
static inline void *cpu_data(const sift_tensor *t) { return (char *)t->impl + t->offset; }

/* ---- the thread pool ----------------------------------------------------------------------
 * The backend owns n_threads - 1 worker threads (created at open and by set_threads, joined at
 * destroy); the calling thread is thread 0. A parallel op hands out items [0, n_items) one at a
 * time, in order, to whichever thread is free; each item writes its own output elements with the
 * same arithmetic as a single thread would, so results do not depend on the thread count. */
typedef struct cpu_backend cpu_backend;

/* One item of a parallel op, run on thread `thread` (0 .. n_threads - 1). Items cannot fail:
 * whatever they allocate is reserved beforehand (cpu_reserve). */
typedef void (*cpu_task)(void *arg, int64_t item, int thread);

/* Runs task(arg, i, .) for every i in [0, n_items) and returns when all have run. Work below
 * `work` = min_work (an op's estimate, in multiply-adds) runs on the calling thread alone: waking
 * the workers costs more than it saves. */
void cpu_parallel_for(cpu_backend *be, int64_t n_items, double work, cpu_task task, void *arg);
enum { CPU_MIN_PARALLEL_WORK = 1 << 16 };

/* What the items of a parallel op read: the backend (for the threads' scratch), the node, and
 * where an op splits each KV head's work into blocks, the blocks per KV head. */
typedef struct node_job {
    cpu_backend *be;
    const sift_node *n;
    int64_t blocks;
} node_job;

/* Makes each thread's scratch buffer at least `floats` floats (kept across ops). */
sift_status cpu_reserve(cpu_backend *be, size_t floats);
/* Thread `thread`'s scratch buffer (cpu_reserve). */
float *cpu_scratch(cpu_backend *be, int thread);

/* The address of logical row pos of KV head g of t (paged or not, in either pool of a paged view
 * of two), NULL if absent. */
void *cpu_kv_row_addr(const sift_tensor *t, int64_t g, int64_t pos);

/* The positions an attention visits: entry i is list[i] for i < list_len, then
 * range_start + (i - list_len) (without a list: range_start + i, range_start 0). */
typedef struct cpu_positions {
    const int32_t *list;
    int64_t list_len, range_start;
} cpu_positions;

static inline int64_t cpu_position(const cpu_positions *at, int64_t i)
{
    return i < at->list_len ? at->list[i] : at->range_start + (i - at->list_len);
}

/* Rotates one row of D values to position pos (rope params p, their frequencies freq [n_rot/2]
 * (sift_node_params.rope_freq); factors f32 [n_rot/2] or NULL). */
void cpu_rope_row(float *x, float pos, const float *factors, const sift_rope_params *p, const float *freq);

sift_status cpu_get_rows(cpu_backend *be, const sift_node *n);
sift_status cpu_rmsnorm(cpu_backend *be, const sift_node *n);
sift_status cpu_matmul(cpu_backend *be, const sift_node *n);
sift_status cpu_rope(cpu_backend *be, const sift_node *n);
sift_status cpu_elementwise(cpu_backend *be, const sift_node *n); /* add, swiglu */
sift_status cpu_layernorm(cpu_backend *be, const sift_node *n);
sift_status cpu_silu(cpu_backend *be, const sift_node *n);
sift_status cpu_kv_write(cpu_backend *be, const sift_node *n);

#endif
