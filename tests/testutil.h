/* Shared by the conformance cases: a deterministic RNG, host-side tensors, outputs with guard
 * regions, NMSE comparison; and the reporting of every test program (report.h, made here in
 * testutil.c). */
#ifndef SIFT_TESTUTIL_H
#define SIFT_TESTUTIL_H

#include "sift.h"
#include "sift_testing.h" /* validation messages, node bytes */
#include "report.h"

#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64               /* elements of guard on each side of every output */
#define GUARD_WORD 0x7fc0dead  /* a NaN pattern no op writes */

/* A call that fails ends the case's run on that backend (goto out); SIFT_E_UNSUPPORTED from
 * compute_checked marks the case "not supported" there instead of failing it. */
#define CHECK_OK(call, case_name, bname)                                                                               \
    do {                                                                                                               \
        sift_status s_ = (call);                                                                                       \
        if (s_ != SIFT_OK) {                                                                                           \
            call_failed(#call, s_, case_name, bname);                                                                  \
            goto out;                                                                                                  \
        }                                                                                                              \
    } while (0)

typedef struct {
    sift_backend_kind kind;
    sift_context *ctx;
} backend;

/* Host-side tensor: data kept as f32 (or i32); uploaded in the requested dtype. */
typedef struct {
    sift_dtype dtype;
    int ndim;
    int64_t shape[3];
    size_t n;
    float *f;     /* f32 values (f16 tensors: values exactly representable in f16) */
    int32_t *i;   /* i32 values */
    uint16_t *h;  /* f16 tensors: the same values as half bits, made once for every upload */
    void *raw;    /* bf16 and block-quantized tensors: their bytes, uploaded as they are */
    size_t raw_bytes;
} host_tensor;

/* An output with guard regions: a view into a larger tensor whose ends hold GUARD_WORD; n counts
 * the view's 4-byte words. */
typedef struct {
    sift_tensor *parent, *view;
    size_t n;
} guarded;

extern uint64_t rng_state;

/* For cases written as straight-line code: a failed call reports under the running case and
 * backend and ends the case (longjmp to the runner). */
#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        sift_status s_ = (call);                                                                                       \
        if (s_ != SIFT_OK) {                                                                                           \
            call_failed(#call, s_, running_case, running_backend);                                                     \
            longjmp(case_end, 1);                                                                                      \
        }                                                                                                              \
    } while (0)
extern jmp_buf case_end;

/* Set when a graph of the current case is not supported by the backend it was built on. */
extern bool case_unsupported;

uint64_t rng_next(void);
float rng_uniform(void);
float rng_normal(void);
void call_failed(const char *call, sift_status s, const char *case_name, const char *backend_name);
/* sift_graph_check_supported, then sift_graph_compute. */
sift_status compute_checked(sift_graph *g);
/* Seeds rng_state from a string (a case's name), so a case's inputs do not depend on which cases
 * ran before it. */
void rng_seed_from(const char *s);
size_t count_of(int ndim, const int64_t *shape);
host_tensor host_new(sift_dtype dtype, int ndim, const int64_t *shape);
void host_free(host_tensor *h);
host_tensor host_random(sift_dtype dtype, int ndim, const int64_t *shape, float sigma);
sift_status upload(sift_context *ctx, const host_tensor *h, sift_tensor **out);
sift_status guarded_new(sift_context *ctx, sift_dtype dtype, int ndim, const int64_t *shape, guarded *g);
bool guarded_read(const guarded *g, void *dst, sift_status *st);
void guarded_free(guarded *g);
bool all_finite(const float *a, size_t n);
double nmse(const float *ref, const float *got, size_t n);
void compare_floats(const char *cname, const char *bname, const float *ref, const float *got, size_t n, double bound);

#endif
