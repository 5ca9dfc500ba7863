/* The standard decode-attention graph of one layer (SPEC §3). */
#include "engine.h"

#include <math.h>

sift_status sift_decode_attn_append(sift_graph *g, const sift_attn_config *cfg, const sift_tensor *q,
                                    const sift_tensor *k, const sift_tensor *v, sift_tensor *out,
                                    sift_tensor **indices_out)
{
    if (indices_out) *indices_out = NULL;
    if (!g || !cfg) return sift_set_error(SIFT_E_INVALID, "sift_decode_attn_append: null argument");
    if (!q || !k || !v || !out) return sift_set_error(SIFT_E_INVALID, "sift_decode_attn_append: a tensor is NULL");
    if (cfg->head_dim <= 0) return sift_set_error(SIFT_E_SHAPE, "sift_decode_attn_append: head_dim %d", cfg->head_dim);
    if (cfg->n_q_heads != q->shape[0] || cfg->head_dim != q->shape[q->ndim - 1] || cfg->n_kv_heads != k->shape[0])
        return sift_set_error(SIFT_E_SHAPE, "sift_decode_attn_graph: config %d/%d heads, D = %d does not match the tensors",
                              cfg->n_q_heads, cfg->n_kv_heads, cfg->head_dim);
    if (cfg->mode != SIFT_ATTN_DENSE && cfg->mode != SIFT_ATTN_SELECT)
        return sift_set_error(SIFT_E_INVALID, "sift_decode_attn_append: unknown mode %d", (int)cfg->mode);
    const float scale = 1.0f / sqrtf((float)cfg->head_dim);
    if (cfg->mode == SIFT_ATTN_DENSE) return sift_op_dense_attend(g, q, k, v, cfg->sel.n_ctx, scale, out);

    const sift_select_params *p = &cfg->sel;
    if (p->n_ctx < 1) return sift_set_error(SIFT_E_SHAPE, "sift_decode_attn_graph: context N = %lld", (long long)p->n_ctx);
    if (p->n_ctx > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "sift_decode_attn_graph: context N = %lld exceeds the cache (%lld)",
                              (long long)p->n_ctx, (long long)k->shape[1]);
    const int64_t hq = cfg->n_q_heads, lists = cfg->vote == SIFT_VOTE_KVHEAD_MAX ? cfg->n_kv_heads : 1;
    const int64_t cand = sift_select_candidates(p);
    sift_tensor *scores = NULL, *votes = NULL, *idx = NULL;
    TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){lists, cand}, "votes", &votes));
    if (cand > 0) {
        TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){hq, cand}, "scores", &scores));
        TRY(sift_op_score(g, q, k, p->sink, p->sink + cand, scale, scores));
        TRY(sift_op_vote(g, cfg->vote, scores, votes));
    }
    TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){lists, sift_select_count(p)}, "indices", &idx));
    TRY(sift_op_select(g, votes, p, idx));
    TRY(sift_op_gather_attend(g, q, k, v, idx, scale, out));
    if (indices_out) *indices_out = idx;
    return SIFT_OK;
}

sift_status sift_decode_attn_graph(sift_context *ctx, const sift_attn_config *cfg, const sift_tensor *q,
                                   const sift_tensor *k, const sift_tensor *v, sift_tensor *out,
                                   sift_graph **graph_out, sift_tensor **indices_out)
{
    if (!graph_out) return sift_set_error(SIFT_E_INVALID, "sift_decode_attn_graph: graph_out is NULL");
    *graph_out = NULL;
    if (indices_out) *indices_out = NULL;
    if (!ctx || !cfg) return sift_set_error(SIFT_E_INVALID, "sift_decode_attn_graph: null argument");
    sift_graph *g;
    sift_status s = sift_graph_create(ctx, &g);
    if (s != SIFT_OK) return s;
    s = sift_decode_attn_append(g, cfg, q, k, v, out, indices_out);
    if (s != SIFT_OK) {
        sift_graph_destroy(g);
        if (indices_out) *indices_out = NULL;
        return s;
    }
    *graph_out = g;
    return SIFT_OK;
}
