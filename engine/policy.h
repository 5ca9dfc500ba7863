/* Host-side selection policies, the baselines of SPEC §8 (H2O, SnapKV, Quest, oracle), and the
 * attention-level quality measure. They read a host mirror of one sequence's cache; the session
 * (engine/kv_cache.c, session_host.c) keeps the mirror current, calls sift_policy_observe during prefill and
 * sift_policy_choose at each decode step, and runs the attention on the device over the lists.
 * Conventions: GQA g(h) = h / (Hq / Hkv); scores s[h][j] = scale * dot(q[h], K[g(h)][j]);
 * candidates C = [S, N - W); every list is ascending, holds [0, S) and [N - W, N), and has
 * exactly sift_select_count(sel) entries (sift.h), the same for every KV head. */
#ifndef SIFT_POLICY_H
#define SIFT_POLICY_H

#include "sift.h"

#include <stdbool.h>

enum {
    SIFT_QUEST_PAGE = 16, /* Quest's page of tokens */
    SIFT_POLICY_OBS = 32, /* SnapKV's (and H2O's initial) observation window of prompt queries */
    SIFT_SNAPKV_POOL = 7  /* SnapKV's max-pool width */
};

/* A host copy of one layer's cache for one sequence: rows [0, n) valid. */
typedef struct sift_kv_mirror {
    int64_t n_kv_heads, head_dim, cap, n;
    float *k, *v;       /* [Hkv][cap][D] f32; v NULL when not kept */
    float *kmin, *kmax; /* Quest metadata [Hkv][cap / 16 + 1][D]: per page, each dimension's min and max */
} sift_kv_mirror;

sift_status sift_kv_mirror_init(sift_kv_mirror *m, int64_t n_kv_heads, int64_t head_dim, int64_t cap, bool keep_v);
void sift_kv_mirror_free(sift_kv_mirror *m);
/* Rows [pos0, pos0 + t) of k (and v) were written by the caller: update the page metadata and n
 * (n = pos0 + t; rows past n are forgotten, as after a rewind). */
void sift_kv_mirror_update(sift_kv_mirror *m, int64_t pos0, int64_t t);

typedef struct sift_policy_state sift_policy_state;

/* State of one sequence for policy p (H2O, SNAPKV, QUEST or ORACLE) over n_layers layers of
 * Hq / Hkv heads of size D, at most cap positions. */
sift_status sift_policy_state_create(sift_policy p, int n_layers, int hq, int hkv, int d, int64_t cap,
                                     sift_policy_state **out);
void sift_policy_state_destroy(sift_policy_state *st);
/* Forgets everything (the sequence was rewound or cleared). */
void sift_policy_reset(sift_policy_state *st);
/* Prefill: the post-RoPE queries q [t][Hq][D] of positions pos0 .. pos0 + t - 1 of one layer.
 * SnapKV and H2O keep the last SIFT_POLICY_OBS of them for their choice at the first decode step. */
sift_status sift_policy_observe(sift_policy_state *st, int layer, const float *q, int64_t pos0, int64_t t);
/* Decode: the index lists[Hkv][sift_select_count(sel)] of one layer for the query q [Hq][D] of
 * position sel->n_ctx - 1, over the mirror m (m->n == sel->n_ctx). H2O also accumulates this
 * step's attention over its kept set. */
sift_status sift_policy_choose(sift_policy_state *st, int layer, const float *q, const sift_kv_mirror *m,
                               const sift_select_params *sel, float scale, int32_t *lists);

/* Attention-level quality of index lists[n_lists][count] (n_lists 1 or Hkv) for the query
 * q [Hq][D] over the mirror (which keeps v): adds, for each query head, the dense attention mass
 * the list recalls (sum of softmax over [0, n) at the listed positions) to *recall_sum and the
 * relative error |o_sel - o_dense| / |o_dense| of the attention output to *err_sum. */
void sift_attention_quality(const float *q, int hq, const sift_kv_mirror *m, const int32_t *lists, int64_t n_lists,
                            int64_t count, float scale, double *recall_sum, double *err_sum);

#endif
