/* The decode-attention ops (SPEC §3): score, vote, select, gather_attend, dense_attend. */
#include "engine.h"

sift_status sift_op_score(sift_graph *g, const sift_tensor *q, const sift_tensor *k, int64_t begin, int64_t end,
                          float scale, sift_tensor *scores)
{
    const char *op = "score";
    TRY(sift_check_qkv(g, q, k, NULL, op));
    TRY(sift_check_scale(scale, op));
    if (begin < 0 || end < begin || end > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "score: positions [%lld, %lld) outside the cache of %lld", (long long)begin,
                              (long long)end, (long long)k->shape[1]);
    TRY(sift_check_out(g, scores, SIFT_F32, q->shape[0], end - begin, op, "scores"));
    sift_node n = {.op = SIFT_OP_SCORE, .n_src = 2, .src = {q, k}, .dst = scores};
    n.p.begin = begin;
    n.p.end = end;
    n.p.scale = scale;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_vote(sift_graph *g, sift_vote_mode mode, const sift_tensor *scores, sift_tensor *votes)
{
    const char *op = "vote";
    TRY(sift_need_tensor(g, scores, op, "scores"));
    TRY(sift_need_tensor(g, votes, op, "votes"));
    TRY(sift_need_dtype(scores, SIFT_F32, op, "scores"));
    TRY(sift_need_rank(scores, 2, op, "scores"));
    int64_t hq = scores->shape[0], m = scores->shape[1];
    if (hq < 1) return sift_set_error(SIFT_E_SHAPE, "vote: scores have no heads");
    if (mode == SIFT_VOTE_SOFTMAX_SUM) {
        TRY(sift_check_out(g, votes, SIFT_F32, 1, m, op, "votes"));
    } else if (mode == SIFT_VOTE_KVHEAD_MAX) {
        TRY(sift_need_rank(votes, 2, op, "votes"));
        int64_t hkv = votes->shape[0];
        if (hkv < 1 || hq % hkv != 0)
            return sift_set_error(SIFT_E_SHAPE, "vote: %lld query heads do not split into %lld KV-head groups",
                                  (long long)hq, (long long)hkv);
        TRY(sift_check_out(g, votes, SIFT_F32, hkv, m, op, "votes"));
    } else {
        return sift_set_error(SIFT_E_INVALID, "vote: unknown vote mode %d", (int)mode);
    }
    sift_node n = {.op = SIFT_OP_VOTE, .n_src = 1, .src = {scores}, .dst = votes};
    n.p.vote = mode;
    return sift_graph_push_node(g, &n);
}

static sift_status check_select_params(const sift_select_params *p)
{
    if (!p) return sift_set_error(SIFT_E_INVALID, "select: params are NULL");
    if (p->n_ctx < 1) return sift_set_error(SIFT_E_SHAPE, "select: context N = %lld, need N >= 1", (long long)p->n_ctx);
    if (p->n_ctx > INT32_MAX) return sift_set_error(SIFT_E_SHAPE, "select: context N = %lld is too large", (long long)p->n_ctx);
    if (p->sink < 0 || p->window < 0 || p->budget < 0)
        return sift_set_error(SIFT_E_SHAPE, "select: sink %lld, window %lld and budget %lld must not be negative",
                              (long long)p->sink, (long long)p->window, (long long)p->budget);
    return SIFT_OK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t sift_select_candidates(const sift_select_params *p)
{
    if (!p) return 0;
    return max64(0, p->n_ctx - p->sink - p->window);
}

int64_t sift_select_count(const sift_select_params *p)
{
    if (!p || p->n_ctx < 1) return 0;
    int64_t sink = min64(p->sink, p->n_ctx);
    int64_t win = p->n_ctx - max64(sink, p->n_ctx - p->window);
    return sink + min64(p->budget, sift_select_candidates(p)) + win;
}

sift_status sift_op_select(sift_graph *g, const sift_tensor *votes, const sift_select_params *p, sift_tensor *indices)
{
    const char *op = "select";
    TRY(sift_need_tensor(g, votes, op, "votes"));
    TRY(check_select_params(p));
    TRY(sift_need_dtype(votes, SIFT_F32, op, "votes"));
    TRY(sift_need_rank(votes, 2, op, "votes"));
    int64_t lists = votes->shape[0], cand = sift_select_candidates(p);
    if (lists < 1) return sift_set_error(SIFT_E_SHAPE, "select: votes have no lists");
    if (votes->shape[1] != cand)
        return sift_set_error(SIFT_E_SHAPE, "select: votes have %lld entries but N - S - W gives %lld candidates",
                              (long long)votes->shape[1], (long long)cand);
    TRY(sift_check_out(g, indices, SIFT_I32, lists, sift_select_count(p), op, "indices"));
    sift_node n = {.op = SIFT_OP_SELECT, .n_src = 1, .src = {votes}, .dst = indices};
    n.p.sel = *p;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_gather_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                  const sift_tensor *indices, float scale, sift_tensor *out)
{
    const char *op = "gather_attend";
    TRY(sift_check_qkv(g, q, k, v, op));
    TRY(sift_check_scale(scale, op));
    TRY(sift_need_tensor(g, indices, op, "indices"));
    TRY(sift_need_dtype(indices, SIFT_I32, op, "indices"));
    TRY(sift_need_rank(indices, 2, op, "indices"));
    if (indices->shape[0] != 1 && indices->shape[0] != k->shape[0])
        return sift_set_error(SIFT_E_SHAPE, "gather_attend: %lld index lists, expected 1 or Hkv = %lld",
                              (long long)indices->shape[0], (long long)k->shape[0]);
    TRY(sift_check_out(g, out, SIFT_F32, q->shape[0], q->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_GATHER_ATTEND, .n_src = 4, .src = {q, k, v, indices}, .dst = out};
    n.p.scale = scale;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_dense_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                 int64_t n_ctx, float scale, sift_tensor *out)
{
    const char *op = "dense_attend";
    TRY(sift_check_qkv(g, q, k, v, op));
    TRY(sift_check_scale(scale, op));
    if (n_ctx < 1 || n_ctx > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "dense_attend: context N = %lld outside 1..%lld (the cache)", (long long)n_ctx,
                              (long long)k->shape[1]);
    TRY(sift_check_out(g, out, SIFT_F32, q->shape[0], q->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_DENSE_ATTEND, .n_src = 3, .src = {q, k, v}, .dst = out};
    n.p.n_ctx = n_ctx;
    n.p.scale = scale;
    return sift_graph_push_node(g, &n);
}

