/* The decode-attention ops (docs/algorithms.md): score, score_max, vote, select, neighbor_fetch,
 * gather_attend, dense_attend, and kv_gather (a selection's K or V rows copied out of the cache). */
#include "engine.h"

/* score (out [Hq][M]) and score_max (out [Hkv][M]): the same operands, checked once. score_max
 * also reads an i8 cache of quantized rows, D int8 and their scale. */
static sift_status score_node(sift_graph *g, sift_op opcode, const sift_tensor *q, const sift_tensor *k, int64_t begin,
                              int64_t end, float scale, sift_tensor *out)
{
    const char *op = sift_op_name(opcode);
    if (opcode == SIFT_OP_SCORE_MAX && k && k->dtype == SIFT_I8 && k->ndim == 3) {
        sift_tensor as_f16 = *k;
        as_f16.dtype = SIFT_F16;
        as_f16.shape[2] -= 4;
        TRY(sift_check_qkv(g, q, &as_f16, NULL, op));
    } else {
        TRY(sift_check_qkv(g, q, k, NULL, op));
    }
    TRY(sift_check_scale(scale, op));
    if (begin < 0 || end < begin || end > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "%s: positions [%lld, %lld) outside the cache of %lld", op, (long long)begin,
                              (long long)end, (long long)k->shape[1]);
    const int64_t rows = opcode == SIFT_OP_SCORE ? q->shape[0] : k->shape[0];
    TRY(sift_check_out(g, out, SIFT_F32, rows, end - begin, op, opcode == SIFT_OP_SCORE ? "scores" : "votes"));
    sift_node n = {.op = opcode, .n_src = 2, .src = {q, k}, .dst = out};
    n.p.begin = begin;
    n.p.end = end;
    n.p.scale = scale;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_score(sift_graph *g, const sift_tensor *q, const sift_tensor *k, int64_t begin, int64_t end,
                          float scale, sift_tensor *scores)
{
    return score_node(g, SIFT_OP_SCORE, q, k, begin, end, scale, scores);
}

sift_status sift_op_score_max(sift_graph *g, const sift_tensor *q, const sift_tensor *k, int64_t begin, int64_t end,
                              float scale, sift_tensor *votes)
{
    return score_node(g, SIFT_OP_SCORE_MAX, q, k, begin, end, scale, votes);
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

/* N, S, W and k are each at most INT32_MAX, so that the layout's sums and differences (N - S - W,
 * S + k + W and the like) stay far inside int64 and every position they give fits the kernels' i32
 * indices. S, W and k beyond N are allowed (a sink or window covering the context, a budget keeping
 * every candidate). */
static bool select_params_in_range(const sift_select_params *p)
{
    return p->n_ctx >= 1 && p->n_ctx <= INT32_MAX && p->sink >= 0 && p->sink <= INT32_MAX && p->window >= 0 &&
           p->window <= INT32_MAX && p->budget >= 0 && p->budget <= INT32_MAX;
}

static sift_status check_select_params(const sift_select_params *p)
{
    if (!p) return sift_set_error(SIFT_E_INVALID, "select: params are NULL");
    if (p->n_ctx < 1) return sift_set_error(SIFT_E_SHAPE, "select: context N = %lld, need N >= 1", (long long)p->n_ctx);
    if (p->n_ctx > INT32_MAX) return sift_set_error(SIFT_E_SHAPE, "select: context N = %lld is too large", (long long)p->n_ctx);
    if (p->sink < 0 || p->window < 0 || p->budget < 0)
        return sift_set_error(SIFT_E_SHAPE, "select: sink %lld, window %lld and budget %lld must not be negative",
                              (long long)p->sink, (long long)p->window, (long long)p->budget);
    if (!select_params_in_range(p))
        return sift_set_error(SIFT_E_SHAPE, "select: sink %lld, window %lld and budget %lld must each be at most %d",
                              (long long)p->sink, (long long)p->window, (long long)p->budget, INT32_MAX);
    return SIFT_OK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* These three are public and called before any op checks p: out-of-range params lay out nothing
 * (the op that takes them then says why) rather than overflow. */
sift_select_layout sift_select_layout_of(const sift_select_params *p)
{
    sift_select_layout l = {0};
    if (!p || !select_params_in_range(p)) return l;
    l.sink = min64(p->sink, p->n_ctx);
    l.first = p->sink;
    l.cand = max64(0, p->n_ctx - p->sink - p->window);
    l.chosen = min64(p->budget, l.cand);
    l.win_begin = max64(l.sink, p->n_ctx - p->window);
    l.win_count = p->n_ctx - l.win_begin;
    l.count = l.sink + l.chosen + l.win_count;
    return l;
}

int64_t sift_select_candidates(const sift_select_params *p)
{
    if (!p || !select_params_in_range(p)) return 0;
    return max64(0, p->n_ctx - p->sink - p->window);
}

int64_t sift_select_count(const sift_select_params *p) { return sift_select_layout_of(p).count; }

sift_status sift_op_select(sift_graph *g, const sift_tensor *votes, const sift_select_params *p, sift_tensor *indices)
{
    return sift_op_select_warm(g, votes, NULL, p, indices);
}

/* warm may be NULL (sift_op_select): the node then has one input. */
sift_status sift_op_select_warm(sift_graph *g, const sift_tensor *votes, sift_tensor *warm, const sift_select_params *p,
                                sift_tensor *indices)
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
    if (warm) TRY(sift_check_out(g, warm, SIFT_I32, lists, SIFT_SELECT_WARM_WORDS, op, "warm"));
    sift_node n = {.op = SIFT_OP_SELECT, .n_src = warm ? 2 : 1, .src = {votes, warm}, .dst = indices};
    n.p.sel = *p;
    n.p.layout = sift_select_layout_of(p);
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_neighbor_fetch(sift_graph *g, const sift_tensor *indices, const sift_select_params *p,
                                   sift_tensor *out)
{
    const char *op = "neighbor_fetch";
    TRY(sift_need_tensor(g, indices, op, "indices"));
    TRY(check_select_params(p));
    TRY(sift_need_dtype(indices, SIFT_I32, op, "indices"));
    TRY(sift_need_rank(indices, 2, op, "indices"));
    const sift_select_layout l = sift_select_layout_of(p);
    if (indices->shape[0] < 1 || indices->shape[1] != l.count)
        return sift_set_error(SIFT_E_SHAPE, "neighbor_fetch: indices have %lld entries per list, select lays out %lld",
                              (long long)indices->shape[1], (long long)l.count);
    TRY(sift_check_out(g, out, SIFT_I32, indices->shape[0], sift_butler_list_len(&l, true), op, "out"));
    sift_node n = {.op = SIFT_OP_NEIGHBOR_FETCH, .n_src = 1, .src = {indices}, .dst = out};
    n.p.sel = *p;
    n.p.layout = l;
    return sift_graph_push_node(g, &n);
}

/* gather_attend, with its keys rotated by rank when rope is not NULL (gather_attend_rope). */
static sift_status gather_node(sift_graph *g, const char *op, const sift_tensor *q, const sift_tensor *k,
                               const sift_tensor *v, const sift_tensor *indices, float scale, const sift_rope_params *rope,
                               sift_tensor *out)
{
    TRY(sift_check_qkv(g, q, k, v, op));
    TRY(sift_check_scale(scale, op));
    TRY(sift_need_tensor(g, indices, op, "indices"));
    TRY(sift_need_dtype(indices, SIFT_I32, op, "indices"));
    TRY(sift_need_rank(indices, 2, op, "indices"));
    if (indices->shape[0] != 1 && indices->shape[0] != k->shape[0])
        return sift_set_error(SIFT_E_SHAPE, "%s: %lld index lists, expected 1 or Hkv = %lld", op,
                              (long long)indices->shape[0], (long long)k->shape[0]);
    TRY(sift_check_out(g, out, SIFT_F32, q->shape[0], q->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_GATHER_ATTEND, .n_src = 4, .src = {q, k, v, indices}, .dst = out};
    n.p.scale = scale;
    n.p.walk = (sift_attend_walk){.tokens = 1, .list_len = indices->shape[1], .n = indices->shape[1]};
    if (rope) {
        TRY(sift_check_rope(rope, q->shape[1], op));
        n.p.rope = *rope;
        n.p.rope_keys = true;
        sift_rope_freqs(rope, n.p.rope_freq);
    }
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_gather_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                  const sift_tensor *indices, float scale, sift_tensor *out)
{
    return gather_node(g, "gather_attend", q, k, v, indices, scale, NULL, out);
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
    n.p.walk = (sift_attend_walk){.tokens = 1, .n = n_ctx};
    n.p.scale = scale;
    return sift_graph_push_node(g, &n);
}


/* ---- saving work between steps (SPEC §4, §6, §7) ------------------------------------------- */

sift_status sift_op_sel_cache_check(sift_graph *g, const sift_tensor *q, float theta, int full, sift_tensor *state)
{
    const char *op = "sel_cache_check";
    TRY(sift_need_tensor(g, q, op, "q"));
    TRY(sift_need_tensor(g, state, op, "state"));
    TRY(sift_need_dtype(q, SIFT_F32, op, "q"));
    TRY(sift_need_dtype(state, SIFT_F32, op, "state"));
    TRY(sift_need_rank(q, 2, op, "q"));
    TRY(sift_need_rank(state, 1, op, "state"));
    const int64_t qn = q->shape[0] * q->shape[1];
    if (qn < 1 || state->shape[0] != qn + SIFT_SEL_CACHE_EXTRA)
        return sift_set_error(SIFT_E_SHAPE, "sel_cache_check: state has %lld values, expected Hq * D + %d = %lld",
                              (long long)state->shape[0], SIFT_SEL_CACHE_EXTRA, (long long)(qn + SIFT_SEL_CACHE_EXTRA));
    if (!(theta >= -1.0f && theta <= 1.0f) )
        return sift_set_error(SIFT_E_INVALID, "sel_cache_check: threshold %g outside [-1, 1]", (double)theta);
    if (!state->has_data && !(state->parent && state->parent->has_data))
        return sift_set_error(SIFT_E_GRAPH, "sel_cache_check: state '%s' was never written (write zeros to start)",
                              state->name);
    sift_node n = {.op = SIFT_OP_SEL_CACHE_CHECK, .n_src = 1, .src = {q}, .dst = state};
    n.p.theta = theta;
    n.p.full = full != 0;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_fill_range(sift_graph *g, int64_t col0, int64_t start, sift_tensor *indices)
{
    const char *op = "fill_range";
    TRY(sift_need_tensor(g, indices, op, "indices"));
    TRY(sift_need_dtype(indices, SIFT_I32, op, "indices"));
    TRY(sift_need_rank(indices, 2, op, "indices"));
    if (col0 < 0 || col0 > indices->shape[1] || start < 0 || start + (indices->shape[1] - col0) > (int64_t)INT32_MAX + 1)
        return sift_set_error(SIFT_E_SHAPE, "fill_range: columns from %lld of %lld, positions from %lld", (long long)col0,
                              (long long)indices->shape[1], (long long)start);
    sift_node n = {.op = SIFT_OP_FILL_RANGE, .n_src = 0, .dst = indices};
    n.p.col0 = col0;
    n.p.start = start;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_gather_attend_rope(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                       const sift_tensor *indices, float scale, const sift_rope_params *p, sift_tensor *out)
{
    if (!p) return sift_set_error(SIFT_E_INVALID, "gather_attend_rope: rope params are NULL");
    return gather_node(g, "gather_attend_rope", q, k, v, indices, scale, p, out);
}

sift_status sift_op_causal_attend_sparse(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                         const sift_tensor *indices, int64_t pos0, float scale, sift_tensor *out)
{
    const char *op = "causal_attend_sparse";
    TRY(sift_need_tensor(g, q, op, "q"));
    TRY(sift_need_dtype(q, SIFT_F32, op, "q"));
    TRY(sift_need_rank(q, 3, op, "q"));
    TRY(sift_need_tensor(g, k, op, "k"));
    TRY(sift_need_rank(k, 3, op, "k"));
    /* the checks of one query row, then T rows */
    const sift_tensor q1 = {.ctx = q->ctx, .dtype = SIFT_F32, .ndim = 2, .shape = {q->shape[1], q->shape[2]}, .has_data = true};
    TRY(sift_check_qkv(g, &q1, k, v, op));
    TRY(sift_check_scale(scale, op));
    TRY(sift_need_tensor(g, indices, op, "indices"));
    TRY(sift_need_dtype(indices, SIFT_I32, op, "indices"));
    TRY(sift_need_rank(indices, 2, op, "indices"));
    if (indices->shape[0] != 1 && indices->shape[0] != k->shape[0])
        return sift_set_error(SIFT_E_SHAPE, "%s: %lld index lists, expected 1 or Hkv = %lld", op,
                              (long long)indices->shape[0], (long long)k->shape[0]);
    const int64_t t = q->shape[0];
    if (pos0 < 0 || t < 1 || pos0 + t > k->shape[1] || indices->shape[1] > pos0)
        return sift_set_error(SIFT_E_SHAPE, "%s: %lld queries at %lld with %lld listed positions in a cache of %lld", op,
                              (long long)t, (long long)pos0, (long long)indices->shape[1], (long long)k->shape[1]);
    TRY(sift_need_tensor(g, out, op, "out"));
    TRY(sift_need_dtype(out, SIFT_F32, op, "out"));
    TRY(sift_need_rank(out, 3, op, "out"));
    for (int i = 0; i < 3; i++)
        if (out->shape[i] != q->shape[i]) return sift_set_error(SIFT_E_SHAPE, "%s: out differs from q in shape", op);
    sift_node n = {.op = SIFT_OP_CAUSAL_ATTEND_SPARSE, .n_src = 4, .src = {q, k, v, indices}, .dst = out};
    n.p.pos0 = pos0;
    n.p.walk = (sift_attend_walk){.tokens = t, .list_len = indices->shape[1], .range0 = pos0, .n = indices->shape[1] + t};
    n.p.scale = scale;
    return sift_graph_push_node(g, &n);
}

/* The node's inputs are {indices, kv}: the op table lets inputs 1 and 2 of a PAGED_KV op be paged
 * views, and the cache is input 1 here as in the attention ops (input 0 is their q). */
/* exact: out has the lists' n columns (sift_op_kv_gather), else at least col0 + n. */
static sift_status kv_gather(sift_graph *g, const sift_tensor *kv, const sift_tensor *indices, int64_t col0, bool exact,
                             sift_tensor *out)
{
    const char *op = "kv_gather";
    TRY(sift_need_tensor(g, kv, op, "kv"));
    TRY(sift_need_rank(kv, 3, op, "kv"));
    if (kv->dtype == SIFT_I8)
        return sift_set_error(SIFT_E_UNSUPPORTED,
                              "kv_gather: kv '%s' is an i8 cache of quantized keys (only score_max reads those); "
                              "f16 and f32 caches are gathered",
                              kv->name);
    if (kv->dtype != SIFT_F16 && kv->dtype != SIFT_F32)
        return sift_set_error(SIFT_E_DTYPE, "kv_gather: kv '%s' is %s, expected f16 or f32", kv->name,
                              sift_dtype_name(kv->dtype));
    const int64_t hkv = kv->shape[0], d = kv->shape[2];
    if (hkv < 1) return sift_set_error(SIFT_E_SHAPE, "kv_gather: kv '%s' has no KV heads", kv->name);
    if (d < 8 || d > SIFT_MAX_HEAD_DIM || d % 8 != 0)
        return sift_set_error(SIFT_E_SHAPE, "kv_gather: head dimension D = %lld is unsupported (a multiple of 8 up to %d)",
                              (long long)d, SIFT_MAX_HEAD_DIM);
    if (kv->shape[1] > INT32_MAX) return sift_set_error(SIFT_E_SHAPE, "kv_gather: kv '%s' has too many positions", kv->name);
    TRY(sift_need_tensor(g, indices, op, "indices"));
    TRY(sift_need_dtype(indices, SIFT_I32, op, "indices"));
    TRY(sift_need_rank(indices, 2, op, "indices"));
    if (indices->shape[0] != 1 && indices->shape[0] != hkv)
        return sift_set_error(SIFT_E_SHAPE, "kv_gather: %lld index lists, expected 1 or Hkv = %lld",
                              (long long)indices->shape[0], (long long)hkv);
    const int64_t count = indices->shape[1];
    if (count > INT32_MAX) return sift_set_error(SIFT_E_SHAPE, "kv_gather: lists of %lld entries", (long long)count);
    TRY(sift_need_tensor(g, out, op, "out"));
    TRY(sift_need_dtype(out, kv->dtype, op, "out"));
    TRY(sift_need_rank(out, 3, op, "out"));
    if (col0 < 0 || col0 > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "kv_gather: column offset %lld (0 .. %d)", (long long)col0, INT32_MAX);
    if (out->shape[0] != hkv || out->shape[2] != d || (exact && out->shape[1] != count))
        return sift_set_error(SIFT_E_SHAPE, "kv_gather: out tensor '%s' is [%lld][%lld][%lld], expected [%lld][%lld][%lld]",
                              out->name, (long long)out->shape[0], (long long)out->shape[1], (long long)out->shape[2],
                              (long long)hkv, (long long)count, (long long)d);
    if (out->shape[1] < col0 + count || out->shape[1] > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "kv_gather: out tensor '%s' has %lld columns, expected at least col0 %lld + %lld "
                              "entries (and fewer than 2^31)",
                              out->name, (long long)out->shape[1], (long long)col0, (long long)count);
    sift_node n = {.op = SIFT_OP_KV_GATHER, .n_src = 2, .src = {indices, kv}, .dst = out};
    n.p.col0 = col0;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_kv_gather(sift_graph *g, const sift_tensor *kv, const sift_tensor *indices, sift_tensor *out)
{
    return kv_gather(g, kv, indices, 0, true, out);
}

sift_status sift_op_kv_gather_at(sift_graph *g, const sift_tensor *kv, const sift_tensor *indices, int64_t col0,
                                 sift_tensor *out)
{
    return kv_gather(g, kv, indices, col0, false, out);
}

sift_status sift_op_mean_rows(sift_graph *g, const sift_tensor *x, sift_tensor *out)
{
    const char *op = "mean_rows";
    TRY(sift_need_tensor(g, x, op, "x"));
    TRY(sift_need_dtype(x, SIFT_F32, op, "x"));
    TRY(sift_need_rank(x, 2, op, "x"));
    if (x->shape[0] < 1) return sift_set_error(SIFT_E_SHAPE, "mean_rows: x has no rows");
    TRY(sift_check_out(g, out, SIFT_F32, 1, x->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_MEAN_ROWS, .n_src = 1, .src = {x}, .dst = out};
    return sift_graph_push_node(g, &n);
}

/* ---- the bytes each op must move (the op table's bytes column) ------------------------------ */

/* Bytes of one K/V row. */
static double kv_row_bytes(const sift_tensor *k) { return (double)k->shape[2] * (double)sift_dtype_size(k->dtype); }

double sift_bytes_score(const sift_node *n)
{
    const sift_tensor *k = n->src[1];
    const double rows = (double)k->shape[0] * (double)(n->p.end - n->p.begin);
    return (double)n->src[0]->nbytes + rows * kv_row_bytes(k) + (double)n->dst->nbytes;
}

double sift_bytes_score_max(const sift_node *n) { return sift_bytes_score(n); }

double sift_bytes_vote(const sift_node *n) { return (double)n->src[0]->nbytes + (double)n->dst->nbytes; }

double sift_bytes_select(const sift_node *n) { return (double)n->src[0]->nbytes + (double)n->dst->nbytes; }

/* K and V rows of every list: a shared list is read for every KV head. */
double sift_bytes_gather_attend(const sift_node *n)
{
    const sift_tensor *k = n->src[1], *idx = n->src[3];
    const double lists = (double)idx->shape[0], len = (double)idx->shape[1];
    const double rows_per_list = lists == 1 ? (double)k->shape[0] : 1.0;
    return (double)n->src[0]->nbytes + (double)idx->nbytes + 2.0 * lists * len * rows_per_list * kv_row_bytes(k) +
           (double)n->dst->nbytes;
}

double sift_bytes_dense_attend(const sift_node *n)
{
    const sift_tensor *k = n->src[1];
    return (double)n->src[0]->nbytes + 2.0 * (double)k->shape[0] * (double)n->p.n_ctx * kv_row_bytes(k) +
           (double)n->dst->nbytes;
}

double sift_bytes_sel_cache_check(const sift_node *n) { return (double)n->src[0]->nbytes + 2.0 * (double)n->dst->nbytes; }

double sift_bytes_fill_range(const sift_node *n)
{
    return (double)n->dst->shape[0] * (double)(n->dst->shape[1] - n->p.col0) * 4.0;
}

double sift_bytes_neighbor_fetch(const sift_node *n) { return (double)n->src[0]->nbytes + (double)n->dst->nbytes; }

double sift_bytes_mean_rows(const sift_node *n) { return (double)n->src[0]->nbytes + (double)n->dst->nbytes; }

/* The rows it copies, each read and written once, and the lists (a skipped entry's row is
 * written, not read: counted as read, as gather_attend counts its entries). Only the n columns it
 * writes of out count (a longer out's other columns are not touched). */
double sift_bytes_kv_gather(const sift_node *n)
{
    const sift_tensor *idx = n->src[0], *kv = n->src[1];
    return (double)idx->nbytes + 2.0 * (double)kv->shape[0] * (double)idx->shape[1] * kv_row_bytes(kv);
}

double sift_bytes_causal_attend_sparse(const sift_node *n)
{
    const sift_tensor *k = n->src[1], *idx = n->src[3];
    const double rows = (double)k->shape[0] * ((double)idx->shape[1] + (double)n->src[0]->shape[0]);
    return 2.0 * (double)n->src[0]->nbytes + (double)idx->nbytes + 2.0 * rows * kv_row_bytes(k);
}
