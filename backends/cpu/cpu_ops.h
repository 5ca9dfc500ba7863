/* The CPU reference backend's internal interface: its op functions and the helpers they share. */
#ifndef SIFT_CPU_OPS_H
#define SIFT_CPU_OPS_H

#include "backend.h"

/* The first element of a tensor's data (views start t->offset bytes into their parent's storage). */
static inline void *cpu_data(const sift_tensor *t) { return (char *)t->impl + t->offset; }

/* The element offset of logical row pos of KV head g in t's storage (paged or not), -1 if absent. */
int64_t cpu_kv_offset(const sift_tensor *t, int64_t g, int64_t pos);

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

/* Attention of the `group` query heads q[group][D] of KV head g over `len` positions (see
 * cpu_positions), written to o[group][D]. rope (or NULL): rotate the key at entry i to position i,
 * with the frequencies rope_freq. */
sift_status cpu_attend_group(const float *q, float *o, int64_t group, const sift_tensor *k, const sift_tensor *v,
                             int64_t g, const cpu_positions *at, int64_t len, float scale, const sift_rope_params *rope,
                             const float *rope_freq);

sift_status cpu_get_rows(const sift_node *n);
sift_status cpu_rmsnorm(const sift_node *n);
sift_status cpu_matmul(const sift_node *n);
sift_status cpu_rope(const sift_node *n);
sift_status cpu_elementwise(const sift_node *n); /* add, swiglu */
sift_status cpu_kv_write(const sift_node *n);

#endif
