/* The CPU reference backend's internal interface: its op functions and the helpers they share. */
#ifndef SIFT_CPU_OPS_H
#define SIFT_CPU_OPS_H

#include "backend.h"

/* The first element of a tensor's data (views start t->offset bytes into their parent's storage). */
static inline void *cpu_data(const sift_tensor *t) { return (char *)t->impl + t->offset; }

float cpu_dot(const float *a, const float *b, int64_t n);

/* Attention of the `group` query heads q[group][D] of KV head g over `len` positions (idx, or
 * 0..len-1 when NULL), written to o[group][D]. */
sift_status cpu_attend_group(const float *q, float *o, int64_t group, const sift_tensor *k, const sift_tensor *v,
                             int64_t g, const int32_t *idx, int64_t len, float scale);

sift_status cpu_get_rows(const sift_node *n);
sift_status cpu_rmsnorm(const sift_node *n);
sift_status cpu_matmul(const sift_node *n);
sift_status cpu_rope(const sift_node *n);
sift_status cpu_elementwise(const sift_node *n); /* add, swiglu */
sift_status cpu_kv_write(const sift_node *n);

#endif
