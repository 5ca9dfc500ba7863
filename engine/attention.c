/* The attention of one layer, built in one place: dense, TokenSelect (with the Selection Cache of
 * SPEC §4 and the length extrapolation of SPEC §6), streaming, the host policies' lists, and the
 * sparse prefill of SPEC §7. The session, the benchmarks and the conformance tests all build their
 * attention here, so they run the same graphs. */
#include "engine.h"
#include "session.h" /* sift_attn_staging: the session's staged rows of TokenButler's lists */

#include <math.h>

/* What the builder knows of one call: the config, the operands, and the derived sizes. */
typedef struct attn {
    sift_graph *g;
    const sift_attn_config *c;
    const sift_tensor *q, *k, *v;
    sift_tensor *out;
    int64_t hq, d;
    float scale;
    const sift_attn_staging *stage; /* decode under BUTLER: attend the staged rows (NULL: the cache) */
} attn;

/* t [rows][cols] f32 seen as [shape...] (a view the graph owns). */
static sift_status as_shape(const attn *a, const sift_tensor *t, int ndim, const int64_t *shape, sift_tensor **out)
{
    return sift_graph_view(a->g, t, SIFT_F32, ndim, shape, 0, out);
}

/* ---- scorers: votes [lists][|C|] of the candidates [S, S + |C|) ----------------------------------
 * The exact scorer is TokenSelect's: the query against the cached keys. TokenButler's is a learned
 * predictor's queries against low-dimensional keys. Everything after the votes (select, the
 * Selection Cache or the prediction interval, gather) is the same for both. */
/* votes [lists][|C|] from the scorer. Exact: score, then the head vote. Butler: the predictor's
 * queries against the projected keys, scaled by 1/sqrt(d'), the max over each group (score_max). */
static sift_status vote_candidates(const attn *a, const sift_tensor *q_score, const sift_select_params *sel,
                                   sift_vote_mode vote, sift_tensor *votes)
{
    const int64_t cand = sift_select_candidates(sel);
    if (a->c->scorer == SIFT_SCORER_BUTLER) {
        const sift_tensor *qp = a->c->score_q, *kp = a->c->score_k;
        return sift_op_score_max(a->g, qp, kp, sel->sink, sel->sink + cand, 1.0f / sqrtf((float)qp->shape[1]), votes);
    }
    sift_tensor *scores;
    TRY(sift_graph_new_tensor(a->g, SIFT_F32, 2, (int64_t[]){a->hq, cand}, "scores", &scores));
    TRY(sift_op_score(a->g, q_score, a->k, sel->sink, sel->sink + cand, a->scale, scores));
    return sift_op_vote(a->g, vote, scores, votes);
}

/* ---- decode ------------------------------------------------------------------------------------ */

/* TokenButler's lists: score_max -> select (-> neighbor_fetch), kept in sel_indices when given; a
 * reused step (the prediction interval) only moves the window of the kept lists. With sel_state,
 * the Selection Cache's check on the predictor's queries q' decides on the device whether the step
 * reuses: score_max and select are predicated on it, and the window moves either way. */
/* The element of sel_state that says the check on q' reused (SIFT_SEL_CACHE_REUSE after q_ref
 * [Hq * d']): the predicate of select and of the staged copy of the lists. */
static int64_t butler_reuse_elem(const sift_attn_config *c)
{
    return c->score_q->shape[0] * c->score_q->shape[1] + SIFT_SEL_CACHE_REUSE;
}

static sift_status butler_lists(const attn *a, const sift_select_params *sel, sift_tensor **idx_out)
{
    const sift_attn_config *c = a->c;
    sift_graph *g = a->g;
    const sift_select_layout l = sift_select_layout_of(sel);
    const int64_t lists = c->n_kv_heads, count = sift_butler_list_len(&l, c->neighbor_fetch);
    const bool full = l.cand > sel->budget, check = c->sel_state && c->sel_cache <= 1.0f && full;
    const sift_tensor *kept = c->sel_indices;
    if (kept && (kept->dtype != SIFT_I32 || kept->ndim != 2 || kept->shape[0] != lists || kept->shape[1] != count))
        return sift_set_error(SIFT_E_SHAPE, "attention: the kept lists must be i32 [%lld][%lld]", (long long)lists,
                              (long long)count);
    if ((c->reuse || check) && !kept)
        return sift_set_error(SIFT_E_INVALID, "attention: reuse needs the kept lists (sel_indices)");
    if (c->reuse && full) { /* the chosen part stands; the window moves with the sequence */
        *idx_out = c->sel_indices;
        return sift_op_fill_range(g, count - l.win_count, l.win_begin, c->sel_indices);
    }
    sift_tensor *votes, *chosen, *idx = c->sel_indices;
    if (!idx) TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){lists, count}, "indices", &idx));
    *idx_out = idx;
    chosen = idx;
    if (c->neighbor_fetch) TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){lists, l.count}, "chosen", &chosen));
    TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){lists, l.cand}, "votes", &votes));
    if (check) { /* score_max and select do nothing on a hit */
        TRY(sift_op_sel_cache_check(g, c->score_q, c->sel_cache, full, c->sel_state));
        TRY(sift_graph_skip_if(g, c->sel_state, butler_reuse_elem(c)));
    }
    if (l.cand > 0) TRY(vote_candidates(a, NULL, sel, SIFT_VOTE_KVHEAD_MAX, votes));
    TRY(sift_op_select_warm(g, votes, c->sel_warm, sel, chosen));
    if (check) {
        TRY(sift_graph_skip_if(g, NULL, 0));
        return sift_op_fill_range(g, count - l.win_count, l.win_begin, idx);
    }
    return c->neighbor_fetch ? sift_op_neighbor_fetch(g, chosen, sel, idx) : SIFT_OK;
}

/* The index lists of a decode step under SELECT (TokenSelect, the Selection Cache) or STREAMING. */
static sift_status decode_lists(const attn *a, const sift_tensor *q_score, const sift_select_params *sel,
                                sift_tensor **idx_out)
{
    const sift_attn_config *c = a->c;
    sift_graph *g = a->g;
    const bool streaming = c->mode == SIFT_ATTN_STREAMING;
    if (!streaming && c->scorer == SIFT_SCORER_BUTLER) return butler_lists(a, sel, idx_out);
    const int64_t lists = !streaming && c->vote == SIFT_VOTE_KVHEAD_MAX ? c->n_kv_heads : 1;
    const int64_t cand = sift_select_candidates(sel), count = sift_select_count(sel), n = sel->n_ctx;
    /* the cache acts between full selections only: while every candidate is kept there is nothing to save */
    const bool full = cand > sel->budget, cache = !streaming && c->sel_state && c->sel_cache <= 1.0f && full;
    sift_tensor *idx;
    if (cache) {
        const sift_tensor *kept = c->sel_indices;
        if (!kept || kept->dtype != SIFT_I32 || kept->ndim != 2 || kept->shape[0] != lists || kept->shape[1] != count)
            return sift_set_error(SIFT_E_SHAPE, "attention: the Selection Cache's indices must be i32 [%lld][%lld]",
                                  (long long)lists, (long long)count);
        idx = c->sel_indices;
    } else {
        TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){lists, count}, "indices", &idx));
    }
    *idx_out = idx;
    if (streaming) { /* the sink and the newest W + k positions (sel's window), or everything while it fits */
        TRY(sift_op_fill_range(g, 0, 0, idx));
        return cand > 0 ? sift_op_fill_range(g, sel->sink, n - sel->window, idx) : SIFT_OK;
    }
    sift_tensor *votes;
    TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){lists, cand}, "votes", &votes));
    if (cand > 0) {
        if (cache) { /* score, vote and select do nothing on a hit */
            TRY(sift_op_sel_cache_check(g, q_score, c->sel_cache, full, c->sel_state));
            TRY(sift_graph_skip_if(g, c->sel_state, a->hq * a->d + SIFT_SEL_CACHE_REUSE));
        }
        TRY(vote_candidates(a, q_score, sel, c->vote, votes));
    }
    TRY(sift_op_select_warm(g, votes, c->sel_warm, sel, idx));
    TRY(sift_graph_skip_if(g, NULL, 0));
    /* a reused set keeps its top k; the window moves with the sequence */
    return cache ? sift_op_fill_range(g, sel->sink + sel->budget, n - sel->window, idx) : SIFT_OK;
}

/* The staged attention of a TokenButler step (session.h: sift_attn_staging) after its lists idx
 * [Hkv][count] were made or reused. The staging rows of list rank i hold rank i's row for the sink
 * and the chosen part. The fixed interval: the window's W rows are a ring: the selection copies
 * its window (positions N - W .. N - 1 at N of the selection) in order, and the reuse `shift`
 * steps on writes its own row, position N - 1, over slot (shift - 1) mod W, the position that left
 * the window. The window's positions in order are then slots shift mod W, ..., W - 1, 0, ...: two
 * fill_ranges. The interval decided by the query (the check on q' ran: butler_lists): the device
 * alone knows whether select ran, so the copy of the lists is predicated on the same flag, and
 * the window, whose rows are the newest and on the device (so cheap to read), is copied again
 * every step into its columns in position order, over what the copy of the lists put there on a
 * selecting step: the staging rows are then in list order, read with the identity ranks. */
static sift_status staged_attend(const attn *a, const sift_select_params *sel, const sift_tensor *idx)
{
    const sift_attn_staging *st = a->stage;
    sift_graph *g = a->g;
    const sift_select_layout l = sift_select_layout_of(sel);
    const int64_t lists = a->c->n_kv_heads, count = l.count, w = l.win_count, win0 = count - w;
    if (l.cand <= sel->budget || a->c->neighbor_fetch)
        return sift_set_error(SIFT_E_INVALID, "attention: staged rows hold full lists without neighbour fetch (%lld candidates, "
                              "budget %lld)", (long long)l.cand, (long long)sel->budget);
    for (int i = 0; i < 2; i++) {
        const sift_tensor *rows = i ? st->v : st->k, *kv = i ? a->v : a->k;
        if (!rows || rows->ndim != 3 || rows->shape[0] != lists || rows->shape[1] != count || rows->shape[2] != a->d ||
            rows->dtype != kv->dtype)
            return sift_set_error(SIFT_E_SHAPE, "attention: the staged %s rows must be %s [%lld][%lld][%lld]", i ? "value" : "key",
                                  sift_dtype_name(kv->dtype), (long long)lists, (long long)count, (long long)a->d);
    }
    const sift_attn_config *c = a->c;
    const bool by_query = c->sel_state && c->sel_cache <= 1.0f; /* butler_lists predicated select (full lists) */
    if (by_query) {
        TRY(sift_graph_skip_if(g, c->sel_state, butler_reuse_elem(c))); /* the lists' rows, as select: on a hit, nothing */
        TRY(sift_op_kv_gather(g, a->k, idx, st->k)); /* [Hkv][count][D] */
        TRY(sift_op_kv_gather(g, a->v, idx, st->v)); /* [Hkv][count][D] */
        TRY(sift_graph_skip_if(g, NULL, 0));
        if (w > 0) { /* the window's positions, the same for every KV head: columns [win0, count) */
            sift_tensor *win;
            TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){1, w}, "staged_window", &win)); /* [1][W] */
            TRY(sift_op_fill_range(g, 0, l.win_begin, win));
            TRY(sift_op_kv_gather_at(g, a->k, win, win0, st->k)); /* columns [win0, count) of [Hkv][count][D] */
            TRY(sift_op_kv_gather_at(g, a->v, win, win0, st->v));
        }
    } else if (st->gather) {
        TRY(sift_op_kv_gather(g, a->k, idx, st->k)); /* [Hkv][count][D] */
        TRY(sift_op_kv_gather(g, a->v, idx, st->v)); /* [Hkv][count][D] */
    } else if (w > 0) {
        if (st->shift < 1 || !st->new_k || !st->new_v)
            return sift_set_error(SIFT_E_INVALID, "attention: a staged reuse needs its shift (%lld) and the step's key and value",
                                  (long long)st->shift);
        const int64_t slot = win0 + (st->shift - 1) % w;
        TRY(sift_op_kv_write(g, st->new_k, slot, st->k));
        TRY(sift_op_kv_write(g, st->new_v, slot, st->v));
    }
    sift_tensor *ranks; /* [Hkv][count]: the staging row of each list entry */
    TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){lists, count}, "staged_ranks", &ranks));
    TRY(sift_op_fill_range(g, 0, 0, ranks));
    const int64_t turn = by_query || st->gather || w == 0 ? 0 : st->shift % w;
    if (turn > 0) {
        TRY(sift_op_fill_range(g, win0, win0 + turn, ranks));
        TRY(sift_op_fill_range(g, count - turn, win0, ranks));
    }
    return sift_op_gather_attend(g, a->q, st->k, st->v, ranks, a->scale, a->out);
}

static sift_status decode(const attn *a, sift_tensor **indices_out)
{
    const sift_attn_config *c = a->c;
    sift_graph *g = a->g;
    if (c->mode == SIFT_ATTN_DENSE) return sift_op_dense_attend(g, a->q, a->k, a->v, c->sel.n_ctx, a->scale, a->out);
    if (c->mode == SIFT_ATTN_LISTS) {
        *indices_out = (sift_tensor *)c->lists;
        return sift_op_gather_attend(g, a->q, a->k, a->v, c->lists, a->scale, a->out);
    }
    const bool streaming = c->mode == SIFT_ATTN_STREAMING;
    const sift_select_params sel = streaming ? (sift_select_params){.n_ctx = c->sel.n_ctx, .sink = c->sel.sink,
                                                                    .window = c->sel.window + c->sel.budget, .budget = 0}
                                             : c->sel;
    const sift_tensor *q_score = a->q, *q_attend = a->q;
    if (c->extrapolate) {
        /* SPEC §6: the scoring query sits at position W over keys cached before RoPE; the attention
         * query at the position of its own key, the list's last rank. The selected earlier tokens
         * take 0 .. |I| - 1 and the new token |I|, so with every token selected this is exactly
         * normal RoPE. */
        sift_tensor *q3, *qs3, *qa3, *qs, *qa;
        const int64_t shape3[3] = {1, a->hq, a->d}, shape2[2] = {a->hq, a->d};
        TRY(as_shape(a, a->q, 3, shape3, &q3));
        if (!streaming) {
            TRY(sift_graph_new_tensor(g, SIFT_F32, 3, shape3, "q_score", &qs3));
            TRY(sift_op_rope(g, q3, sel.window, NULL, c->extrapolate, qs3));
            TRY(as_shape(a, qs3, 2, shape2, &qs));
            q_score = qs;
        }
        TRY(sift_graph_new_tensor(g, SIFT_F32, 3, shape3, "q_attend", &qa3));
        TRY(sift_op_rope(g, q3, sift_select_count(&sel) - 1, NULL, c->extrapolate, qa3));
        TRY(as_shape(a, qa3, 2, shape2, &qa));
        q_attend = qa;
    }
    sift_tensor *idx = NULL;
    TRY(decode_lists(a, q_score, &sel, &idx));
    *indices_out = idx;
    if (a->stage) return staged_attend(a, &sel, idx);
    if (c->extrapolate) return sift_op_gather_attend_rope(g, q_attend, a->k, a->v, idx, a->scale, c->extrapolate, a->out);
    return sift_op_gather_attend(g, q_attend, a->k, a->v, idx, a->scale, a->out);
}

/* ---- prefill ----------------------------------------------------------------------------------- */

/* A chunk of T queries at positions N .. N + T - 1. Sparse (SPEC §7): the chunk's mean query
 * chooses one set among [0, N) for the whole chunk, which then attends that set and itself
 * causally. */
static sift_status prefill(const attn *a, sift_tensor **indices_out)
{
    const sift_attn_config *c = a->c;
    sift_graph *g = a->g;
    const int64_t t = a->q->shape[0], pos0 = c->sel.n_ctx;
    const sift_select_params sel = {.n_ctx = pos0, .sink = c->sel.sink, .window = c->sel.window, .budget = c->sel.budget};
    const int64_t cand = pos0 > 0 ? sift_select_candidates(&sel) : 0;
    if (c->mode == SIFT_ATTN_DENSE || cand <= sel.budget) return sift_op_causal_attend(g, a->q, a->k, a->v, pos0, a->scale, a->out);
    sift_tensor *rows, *mean, *q_mean, *votes, *idx;
    TRY(as_shape(a, a->q, 2, (int64_t[]){t, a->hq * a->d}, &rows));
    TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){1, a->hq * a->d}, "q_mean", &mean));
    TRY(sift_op_mean_rows(g, rows, mean));
    TRY(as_shape(a, mean, 2, (int64_t[]){a->hq, a->d}, &q_mean));
    TRY(sift_graph_new_tensor(g, SIFT_F32, 2, (int64_t[]){1, cand}, "votes", &votes));
    TRY(vote_candidates(a, q_mean, &sel, SIFT_VOTE_SOFTMAX_SUM, votes));
    TRY(sift_graph_new_tensor(g, SIFT_I32, 2, (int64_t[]){1, sift_select_count(&sel)}, "indices", &idx));
    TRY(sift_op_select(g, votes, &sel, idx));
    *indices_out = idx;
    return sift_op_causal_attend_sparse(g, a->q, a->k, a->v, idx, pos0, a->scale, a->out);
}

/* ---- the public calls -------------------------------------------------------------------------- */

static sift_status check_config(const sift_attn_config *c, const sift_tensor *q, const sift_tensor *k, bool is_prefill)
{
    const char *fn = "sift_attn_append";
    if (c->head_dim <= 0) return sift_set_error(SIFT_E_SHAPE, "%s: head_dim %d", fn, c->head_dim);
    if (c->n_q_heads != q->shape[is_prefill ? 1 : 0] || c->head_dim != q->shape[q->ndim - 1] || k->ndim != 3 ||
        c->n_kv_heads != k->shape[0])
        return sift_set_error(SIFT_E_SHAPE, "%s: config %d/%d heads, D = %d does not match the tensors", fn, c->n_q_heads,
                              c->n_kv_heads, c->head_dim);
    if ((int)c->mode < 0 || c->mode > SIFT_ATTN_LISTS) return sift_set_error(SIFT_E_INVALID, "%s: unknown mode %d", fn, (int)c->mode);
    if (c->sel.n_ctx < (is_prefill ? 0 : 1))
        return sift_set_error(SIFT_E_SHAPE, "%s: context N = %lld", fn, (long long)c->sel.n_ctx);
    if (c->sel.n_ctx > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "%s: context N = %lld exceeds the cache (%lld)", fn, (long long)c->sel.n_ctx,
                              (long long)k->shape[1]);
    /* select's own bound, said before any mode sums them (streaming keeps W + k positions) */
    if (c->sel.sink < 0 || c->sel.window < 0 || c->sel.budget < 0 || c->sel.sink > INT32_MAX ||
        c->sel.window > INT32_MAX || c->sel.budget > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: sink %lld, window %lld and budget %lld must each be at most %d", fn,
                              (long long)c->sel.sink, (long long)c->sel.window, (long long)c->sel.budget, INT32_MAX);
    if (is_prefill && c->mode != SIFT_ATTN_DENSE && c->mode != SIFT_ATTN_SELECT)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: a prefill chunk attends densely or selects (SPEC §7), not by mode %d",
                              fn, (int)c->mode);
    if (c->mode == SIFT_ATTN_LISTS && !c->lists) return sift_set_error(SIFT_E_INVALID, "%s: LISTS without lists", fn);
    if (c->extrapolate && (is_prefill || (c->mode != SIFT_ATTN_SELECT && c->mode != SIFT_ATTN_STREAMING)))
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: length extrapolation decodes under SELECT or STREAMING", fn);
    if ((int)c->scorer < 0 || c->scorer > SIFT_SCORER_BUTLER)
        return sift_set_error(SIFT_E_INVALID, "%s: unknown scorer %d", fn, (int)c->scorer);
    if (c->mode == SIFT_ATTN_SELECT && c->scorer == SIFT_SCORER_BUTLER) {
        if (is_prefill || c->extrapolate)
            return sift_set_error(SIFT_E_UNSUPPORTED, "%s: the butler scorer selects decode steps, without extrapolation", fn);
        const bool checked = c->sel_state && c->sel_cache <= 1.0f;
        if (checked && (c->reuse || c->neighbor_fetch))
            return sift_set_error(SIFT_E_UNSUPPORTED,
                                  "%s: the butler scorer's Selection Cache on q' goes with neither reuse nor neighbour fetch", fn);
        const sift_tensor *qp = c->score_q, *kp = c->score_k;
        if (!qp || !kp) return sift_set_error(SIFT_E_INVALID, "%s: the butler scorer needs score_q and score_k", fn);
        const int64_t row_extra = sift_key_row_extra(kp->dtype);
        if (qp->ndim != 2 || qp->shape[0] != c->n_q_heads || kp->ndim != 3 || kp->shape[0] != c->n_kv_heads ||
            kp->shape[2] != qp->shape[1] + row_extra || kp->shape[1] < c->sel.n_ctx)
            return sift_set_error(SIFT_E_SHAPE,
                                  "%s: butler queries [%d][d'] and keys [%d][>= N][d'] do not match the config", fn,
                                  c->n_q_heads, c->n_kv_heads);
    }
    return SIFT_OK;
}

sift_attn_config sift_attn_config_default(void)
{
    sift_attn_config c = {.struct_size = sizeof c, .vote = SIFT_VOTE_SOFTMAX_SUM, .mode = SIFT_ATTN_DENSE,
                          .scorer = SIFT_SCORER_EXACT, .sel_cache = SIFT_SEL_CACHE_OFF};
    return c;
}

static sift_status append(sift_graph *g, const sift_attn_config *given, const sift_attn_staging *staging, const sift_tensor *q,
                          const sift_tensor *k, const sift_tensor *v, sift_tensor *out, sift_tensor **indices_out)
{
    if (indices_out) *indices_out = NULL;
    if (!g || !given) return sift_set_error(SIFT_E_INVALID, "sift_attn_append: null argument");
    sift_attn_config full = sift_attn_config_default();
    TRY(sift_config_read(given, &full, sizeof full, sizeof full, "sift_attn_append"));
    const sift_attn_config *cfg = &full;
    if (!q || !k || !v || !out) return sift_set_error(SIFT_E_INVALID, "sift_attn_append: a tensor is NULL");
    if (q->ndim != 2 && q->ndim != 3)
        return sift_set_error(SIFT_E_SHAPE, "sift_attn_append: q has rank %d ([Hq][D] or [T][Hq][D])", q->ndim);
    const bool is_prefill = q->ndim == 3;
    TRY(check_config(cfg, q, k, is_prefill));
    if (staging && (is_prefill || cfg->mode != SIFT_ATTN_SELECT || cfg->scorer != SIFT_SCORER_BUTLER))
        return sift_set_error(SIFT_E_UNSUPPORTED, "sift_attn_append: staged rows serve TokenButler's decode steps only");
    const attn a = {.g = g, .c = cfg, .q = q, .k = k, .v = v, .out = out, .hq = cfg->n_q_heads, .d = cfg->head_dim,
                    .scale = 1.0f / sqrtf((float)cfg->head_dim), .stage = staging};
    sift_tensor *idx = NULL;
    TRY(is_prefill ? prefill(&a, &idx) : decode(&a, &idx));
    if (indices_out) *indices_out = idx;
    return SIFT_OK;
}

sift_status sift_attn_append(sift_graph *g, const sift_attn_config *cfg, const sift_tensor *q, const sift_tensor *k,
                             const sift_tensor *v, sift_tensor *out, sift_tensor **indices_out)
{
    return append(g, cfg, NULL, q, k, v, out, indices_out);
}

sift_status sift_attn_append_staged(sift_graph *g, const sift_attn_config *cfg, const sift_attn_staging *staging,
                                    const sift_tensor *q, const sift_tensor *k, const sift_tensor *v, sift_tensor *out,
                                    sift_tensor **indices_out)
{
    if (!staging) return sift_set_error(SIFT_E_INVALID, "sift_attn_append_staged: staging is NULL");
    return append(g, cfg, staging, q, k, v, out, indices_out);
}

sift_status sift_attn_graph(sift_context *ctx, const sift_attn_config *cfg, const sift_tensor *q, const sift_tensor *k,
                            const sift_tensor *v, sift_tensor *out, sift_graph **graph_out, sift_tensor **indices_out)
{
    if (!graph_out) return sift_set_error(SIFT_E_INVALID, "sift_attn_graph: graph_out is NULL");
    *graph_out = NULL;
    if (indices_out) *indices_out = NULL;
    if (!ctx || !cfg) return sift_set_error(SIFT_E_INVALID, "sift_attn_graph: null argument");
    sift_graph *g;
    TRY(sift_graph_create(ctx, &g));
    const sift_status s = sift_attn_append(g, cfg, q, k, v, out, indices_out);
    if (s != SIFT_OK) {
        sift_graph_destroy(g);
        if (indices_out) *indices_out = NULL;
        return s;
    }
    *graph_out = g;
    return SIFT_OK;
}
