/* The C images of the shaders' push_constant blocks (and of attend.comp's attend_params), each named
 * as its block is in the shader. A field is named as the shader's member, less a trailing
 * underscore (in and out are GLSL keywords). The build checks every field's offset and type against
 * the compiled shaders (gen_kernels.py writes vk_push_check.c): a field added, moved or retyped on
 * one side only fails to compile. */
#ifndef SIFT_VK_PUSH_H
#define SIFT_VK_PUSH_H

#include "vk_internal.h"

/* ---- attention (vk_attention.c) ---- */

/* score.comp and score_max.comp */
typedef struct {
    vk_tref q, s;
    vk_kvref k;
    uint64_t skip;
    uint32_t begin, m, group, tiles;
    float scale;
} push_score;

/* attend.comp */
typedef struct {
    vk_tref q, idx;
    uint64_t prm, ml, po;
    uint32_t n, nlist, start, group, nsplit, cs, lists;
    float scale;
    uint32_t lim0, hq, nq, pass0;
} push_attend;

/* attend.comp's parameters per node, in the scratch (push_attend.prm), written by the command buffer */
typedef struct {
    vk_kvref k, v;
    uint32_t same, n_rot, pad0, pad1;
    float freq[SIFT_MAX_HEAD_DIM / 2];
} attend_params;

/* attend_merge.comp */
typedef struct {
    vk_tref out;
    uint64_t ml, po;
    uint32_t nsplit, row0;
} push_attend_merge;

/* vote_stats.comp */
typedef struct {
    vk_tref s;
    uint64_t part, skip;
    uint32_t m, items, nblocks;
} push_vote_stats;

/* vote_merge.comp */
typedef struct {
    uint64_t part, stats, skip;
    uint32_t nblocks;
} push_vote_merge;

/* vote_sum.comp */
typedef struct {
    vk_tref s, v;
    uint64_t stats, skip;
    uint32_t m, hq, tiles;
} push_vote_sum;

/* vote_max.comp */
typedef struct {
    vk_tref s, u;
    uint64_t skip;
    uint32_t m, group, tiles;
} push_vote_max;

/* select.glsl: select_hist, select_count, select_compact, select_warm_collect, select_warm_tail */
typedef struct {
    vk_tref votes, out, warm;
    uint64_t hist, state, counts, skip, wbuf;
    uint32_t cand, chosen, items, nblocks, sink, first, win_begin, win_count, pass, mode;
} push_select;

/* neighbor_fetch.comp */
typedef struct {
    vk_tref in, out;
    uint32_t sink, chosen, count, l0;
    int64_t cand_end;
} push_neighbor_fetch;

/* kv_gather.comp */
typedef struct {
    vk_tref idx, out;
    vk_kvref kv;
    uint64_t skip;
    uint32_t count, units, lists, g0, ocount, col0;
} push_kv_gather;

/* sel_cache.comp */
typedef struct {
    vk_tref q, st;
    uint32_t qn;
    float theta;
    uint32_t full;
} push_sel_cache;

/* fill_range.comp */
typedef struct {
    vk_tref out;
    uint32_t n, col0, width, start, l0;
} push_fill_range;

/* mean_rows.comp */
typedef struct {
    vk_tref x, out;
    uint32_t rows, e;
} push_mean_rows;

/* ---- the transformer's ops (vk_model.c) ---- */

/* get_rows.comp */
typedef struct {
    vk_tref table, ids, out;
    uint32_t V, E, t0;
} push_get_rows;

/* rmsnorm.comp (rmsnorm and layernorm) */
typedef struct {
    vk_tref x, w, b, out;
    uint32_t E;
    float eps;
    uint32_t t0, has_bias;
} push_norm;

/* matvec.comp */
typedef struct {
    vk_tref x, w, bias, out;
    uint32_t K, N, T, has_bias, group0;
} push_matvec;

/* matmul.comp */
typedef struct {
    vk_tref x, w, bias, out;
    uint32_t K, N, T, has_bias;
} push_matmul;

/* rope.comp */
typedef struct {
    vk_tref x, out, factors;
    uint64_t freq, n;
    uint32_t HD, D, n_rot, pos0, neox, has_factors;
} push_rope;

/* eltwise.comp (add, swiglu, silu) */
typedef struct {
    vk_tref a, b, out;
    uint64_t n;
} push_eltwise;

/* kv_write.comp */
typedef struct {
    vk_tref src;
    vk_kvref cache;
    uint64_t n;
    uint32_t H, D, pos0;
} push_kv_write;

#endif
