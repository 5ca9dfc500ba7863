/* The conformance registry: every case of every suite, each able to run itself on the backend
 * under test against the CPU reference. tests/conformance.c runs them; tests/cases_*.c define them. */
#ifndef SIFT_REGISTRY_H
#define SIFT_REGISTRY_H

#include "testutil.h"

typedef struct conf_case conf_case;

/* Runs the case on the backend under test (dut) and on the reference (ref), and reports every
 * comparison. dut == ref when the CPU itself is under test: then a case checks what the CPU can
 * check alone (its output is finite, guard regions hold, paged == flat, known answers). */
typedef void (*case_check_fn)(const conf_case *c, const backend *ref, const backend *dut);
/* A case's graph on one context and the tensors it reads and writes. */
typedef struct {
    sift_graph *g;
    sift_tensor *tensors[16];
    int n_tensors;
} built_graph;
void built_graph_free(built_graph *b);
/* Builds the case's inputs and graph on ctx (perf mode times it); on failure b holds what to free. */
typedef sift_status (*case_build_fn)(const conf_case *c, sift_context *ctx, built_graph *b);

struct conf_case {
    const char *suite;
    char name[160];
    case_check_fn check; /* NULL: a perf-only case */
    case_build_fn build; /* NULL: not timed */
    void *params;        /* the suite's own description of the case */
    int span_nodes;      /* perf: > 0 times the graph's span (its nodes overlapping as in a step), per node */
};

/* Adds a case; params (size bytes) are copied. */
void registry_add(const char *suite, const char *name, case_check_fn check, case_build_fn build, const void *params,
                  size_t size);

/* A perf case timed by its span, over its span_nodes nodes of one kind (tests/cases_perf.c). */
void registry_add_span_timed(const char *suite, const char *name, case_build_fn build, const void *params, size_t size,
                             int span_nodes);
#define MATVEC_STREAM_MAX_COPIES 12 /* with x, w and out: the 16 tensors a built_graph holds */

/* What the suites are registered with. */
typedef struct {
    int64_t max_n;   /* largest context of the attention matrix */
    int64_t max_rows; /* largest paged cache (the CUDA emulator cuts it) */
    bool big;        /* perf: Llama-3.1-8B shapes, else a small model's */
    int64_t prefill; /* perf: tokens of the prefill cases */
} suite_options;

void cases_ops(const suite_options *o);
void cases_model(const suite_options *o);
void cases_cache(const suite_options *o);
void cases_attn(const suite_options *o);
void cases_perf(const suite_options *o);

/* When the CPU is under test alone, a comparison against the reference has nothing to compare:
 * the reference output must then at least be finite. */
void check_reference_finite(const char *cname, const float *ref, size_t n);

#endif
