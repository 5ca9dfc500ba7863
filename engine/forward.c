/* One step's forward pass, as graphs: the embedding, then per layer RMSNorm -> Q/K/V -> RoPE ->
 * KV-cache write -> attention -> output projection -> residual -> RMSNorm -> SwiGLU MLP ->
 * residual, then the final norm and the logits. A prefill step feeds a chunk of one sequence; a
 * decode step one token of each of several sequences, the matmuls shared over all rows and RoPE,
 * the cache write and attention per sequence (a segment of rows).
 *
 * The step is one graph. Where the host takes part between layers (host policies write a layer's
 * lists after its cache write; prefill observations; eval_mode's quality measure), the graph is cut
 * after each layer's cache write (host_turn): the host runs, and a new graph goes on.
 *
 * Each group of nodes is labelled with its stage (sift_graph_set_stage: "qkv", "attention", ...),
 * so that a profiled step's device time adds up per stage (sift_session_profile_stages).
 *
 * A decode step without the host's part runs ahead: while its graph runs on the device, the host
 * builds and records the next step's graph, as this step predicts it (the same sequences, each one
 * position on); the next step runs that graph where it is the step predicted, and else builds its
 * own. A graph is a function of its step alone (positions, sequences, TokenButler's choice; the
 * session's tensors and configuration do not change), so a graph built ahead is the graph the
 * step would build. Building, planning and recording thus leave the path from one token to the
 * next: what they cost shows only where they take longer than the device's step. */
#include "session.h"

#include <math.h>
#include <stdlib.h>

typedef struct pass {
    sift_session *s;
    step *st;
    sift_graph *g;
    bool host;    /* the host takes part after each layer's cache write */
    bool measure; /* eval_mode's quality measure after each layer's attention */
} pass;

/* Rows [row0, row0 + t) of an activation of `width` values per row, as [t][width]. */
static sift_status rows2(pass *f, const sift_tensor *act, int64_t row0, int64_t t, int64_t width, sift_tensor **out)
{
    return sift_graph_view(f->g, act, SIFT_F32, 2, (int64_t[]){t, width}, (size_t)(row0 * width) * sizeof(float), out);
}

/* The same rows as [t][heads][d]. */
static sift_status rows3(pass *f, const sift_tensor *act, int64_t row0, int64_t t, int64_t heads, int64_t d,
                         sift_tensor **out)
{
    return sift_graph_view(f->g, act, SIFT_F32, 3, (int64_t[]){t, heads, d}, (size_t)(row0 * heads * d) * sizeof(float),
                           out);
}

static bool qkv_fused(const pass *f, uint32_t l) { return sift_qkv_fused(f->s, f->st, l); }

/* Layer l's queries (keys: false) after RoPE from row0 on, viewed as `shape` (session.h: sift_roped). */
static sift_status roped(pass *f, uint32_t l, bool queries, int64_t row0, int ndim, const int64_t *shape, sift_tensor **out)
{
    size_t off;
    sift_tensor *t = sift_roped(f->s, f->st, l, queries, row0, &off);
    return sift_graph_view(f->g, t, SIFT_F32, ndim, shape, off, out);
}

/* The same for `rows` rows, as [rows][heads][D]. */
static sift_status roped3(pass *f, uint32_t l, bool queries, int64_t row0, int64_t rows, sift_tensor **out)
{
    const sift_gguf_hparams *hp = &f->s->m->hp;
    return roped(f, l, queries, row0, 3, (int64_t[]){rows, queries ? hp->n_head : hp->n_head_kv, hp->head_dim}, out);
}

/* A one-row step's part `which` (0 q, 1 k, 2 v) of the fused q/k/v product, as [1][heads][D]. */
static sift_status qkv_part(pass *f, int which, sift_tensor **out)
{
    const sift_gguf_hparams *hp = &f->s->m->hp;
    const int64_t hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim;
    const int64_t heads = which == 0 ? hq : hkv, first = which == 0 ? 0 : which == 1 ? hq : hq + hkv;
    return sift_graph_view(f->g, f->s->qkv_row, SIFT_F32, 3, (int64_t[]){1, heads, d}, (size_t)(first * d) * sizeof(float),
                           out);
}

/* The residual stream entering layer l, and leaving it. */
static sift_tensor *layer_in(const sift_session *s, uint32_t l)
{
    return l == 0 || !s->layer_out ? s->act[A_X0] : s->layer_out[l - 1];
}
static sift_tensor *layer_res(const sift_session *s, uint32_t l) { return s->layer_out ? s->layer_out[l] : s->act[A_X0]; }

static sift_rope_params rope_params(const sift_model *m)
{
    return (sift_rope_params){.n_rot = (int)m->hp.rope_dim, .base = m->hp.rope_freq_base, .mode = m->rope_mode};
}

/* Runs the pass's graph; while the session profiles, timed, each node's device time and bytes
 * added to the entry of its stage and op. */
static sift_status compute(pass *f)
{
    sift_session *s = f->s;
    if (!s->profiling) return sift_graph_compute(f->g);
    const int n = sift_graph_node_count(f->g);
    double *node_us = malloc((size_t)(n > 0 ? n : 1) * sizeof *node_us);
    if (!node_us) return sift_set_error(SIFT_E_NOMEM, "session: out of memory for the profile");
    const sift_status e = sift_graph_compute_timed(f->g, node_us);
    for (int i = 0; e == SIFT_OK && i < n; i++)
        sift_profile_add(s, f->g->nodes[i].stage, f->g->nodes[i].op, node_us[i], sift_graph_node_bytes(f->g, i));
    free(node_us);
    return e;
}

/* Computes the graph so far, and (the host's turn) lets the host work before layer l's attention:
 * the quality of layer l - 1's attention, then the mirrors, observations and lists of layer l. */
static sift_status host_turn(pass *f, uint32_t l)
{
    if (!f->host) return SIFT_OK;
    sift_status e = compute(f);
    if (e == SIFT_OK && f->measure && l > 0) e = sift_quality_measure_layer(f->s, f->st, l - 1); /* before its lists go */
    sift_graph_destroy(f->g);
    f->g = NULL;
    TRY(e);
    TRY(sift_host_after_kv_write(f->s, f->st, l));
    return sift_graph_create(f->s->m->ctx, &f->g);
}

/* The key (after RoPE) and value of segment sg's one decode row at layer l, as rope_and_cache
 * wrote them to the cache: f32 [1][Hkv][D] each, for the staged rows. */
static sift_status step_rows(pass *f, const segment *sg, uint32_t l, sift_attn_staging *out)
{
    const sift_gguf_hparams *hp = &f->s->m->hp;
    sift_tensor *k, *v;
    TRY(roped3(f, l, false, sg->row0, 1, &k)); /* [1][Hkv][D] */
    if (qkv_fused(f, l))
        TRY(qkv_part(f, 2, &v)); /* [1][Hkv][D] */
    else
        TRY(rows3(f, f->s->act[A_V], sg->row0, 1, hp->n_head_kv, hp->head_dim, &v)); /* [1][Hkv][D] */
    out->new_k = k;
    out->new_v = v;
    return SIFT_OK;
}

/* The attention of layer l for one segment, under the session's policy. */
static sift_status attend(pass *f, segment *sg, uint32_t l)
{
    const sift_session *s = f->s;
    const sift_session_config *c = &s->cfg;
    const sift_gguf_hparams *hp = &s->m->hp;
    const int64_t hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim;
    const bool prefill = f->st->prefill;
    seq_layer *sl = &s->seqs[sg->seq].layers[l];
    sift_tensor *k = sift_kv_cache_view(s->kv, sg->seq, l, KV_K), *v = sift_kv_cache_view(s->kv, sg->seq, l, KV_V);
    const sift_rope_params rope = rope_params(s->m);
    /* a prefill chunk's N is the positions before it; a decode step's includes its token */
    sift_attn_config a = sift_attn_config_default();
    a.n_q_heads = (int)hq;
    a.n_kv_heads = (int)hkv;
    a.head_dim = (int)d;
    a.sel = (sift_select_params){.n_ctx = prefill ? sg->pos0 : sg->pos0 + 1, .sink = c->sink, .window = c->window, .budget = c->budget};
    a.vote = SIFT_VOTE_SOFTMAX_SUM;
    a.mode = SIFT_ATTN_DENSE;
    a.scorer = SIFT_SCORER_EXACT;
    sift_tensor *q, *out;
    if (prefill) {
        if (c->sparse_prefill) a.mode = SIFT_ATTN_SELECT;
        TRY(roped3(f, l, true, sg->row0, sg->t, &q));              /* [t][Hq][D] */
        TRY(rows3(f, s->act[A_ATT], sg->row0, sg->t, hq, d, &out)); /* [t][Hq][D] */
        return sift_attn_append(f->g, &a, q, k, v, out, &sg->attn_idx);
    }
    sift_attn_staging staging = {0};
    bool staged = false;
    switch (c->policy) {
    case SIFT_POLICY_DENSE: a.mode = SIFT_ATTN_DENSE; break;
    case SIFT_POLICY_BUTLER: { /* layer 0, which no producer serves, is dense */
        if (l == 0) break;
        const sift_predictor *pr = c->predictor;
        const int64_t dk = pr->key_dim, per_row = (int64_t)pr->stride * hq * dk;
        const int slot = butler_slot_of(pr, (int)l);
        sift_tensor *qp, *kept;
        /* this layer's queries [Hq][d']: slot `slot` of this sequence's row of the latest producer's */
        TRY(sift_graph_view(f->g, s->b_q, SIFT_F32, 2, (int64_t[]){hq, dk},
                            (size_t)(sg->row0 * per_row + slot * hq * dk) * sizeof(float), &qp));
        const sift_select_params *sel = &a.sel;
        const sift_select_layout lay = sift_select_layout_of(sel);
        const int64_t count = sift_butler_list_len(&lay, c->neighbor_fetch);
        TRY(sift_graph_view(f->g, sl->sel_idx, SIFT_I32, 2, (int64_t[]){hkv, count}, 0, &kept)); /* [Hkv][count] */
        a.mode = SIFT_ATTN_SELECT;
        a.scorer = SIFT_SCORER_BUTLER;
        a.score_q = qp;
        a.score_k = sift_kv_cache_view(s->kv, sg->seq, l, KV_KP);
        a.neighbor_fetch = c->neighbor_fetch;
        a.sel_indices = kept;
        a.sel_warm = sl->sel_warm;
        a.reuse = sg->butler == BUTLER_REUSE;
        if (sift_butler_by_query(s)) { /* the device decides on q'; a selection the interval forces checks at 1 */
            a.sel_state = sl->sel_state;
            a.sel_cache = sg->butler == BUTLER_CHECK ? s->butler_reuse : 1.0f;
        }
        /* under offload, full lists' rows are staged when chosen and read from there until the next
         * selection (session.h: sift_butler_stages); a step whose lists are not full (every
         * candidate kept) is never reused, and reads the cache. Every step stages (a check on q'
         * copies the lists where select ran, on the device's decision: attention.c) */
        staged = sl->stage_k && lay.cand > sel->budget;
        if (staged) {
            staging = (sift_attn_staging){.k = sl->stage_k, .v = sl->stage_v, .gather = sg->butler == BUTLER_SELECT,
                                          .shift = sg->butler_shift};
            if (sg->butler == BUTLER_REUSE) TRY(step_rows(f, sg, l, &staging)); /* the row the reuse adds to the window */
        }
        break;
    }
    case SIFT_POLICY_TOKENSELECT:
        a.mode = SIFT_ATTN_SELECT;
        a.sel_cache = c->sel_cache;
        a.sel_state = sl->sel_state;
        a.sel_indices = sl->sel_idx;
        a.sel_warm = sl->sel_warm;
        break;
    case SIFT_POLICY_STREAMING: a.mode = SIFT_ATTN_STREAMING; break;
    default: { /* the host policies: the lists the host wrote after this layer's cache write */
        sift_tensor *lists;
        TRY(sift_graph_view(f->g, s->seqs[sg->seq].host_idx, SIFT_I32, 2, (int64_t[]){hkv, sg->count}, 0, &lists));
        a.mode = SIFT_ATTN_LISTS;
        a.lists = lists;
    }
    }
    if (c->extrapolate) a.extrapolate = &rope; /* the query before RoPE: the builder places it */
    if (c->extrapolate && qkv_fused(f, l))
        TRY(sift_graph_view(f->g, s->qkv_row, SIFT_F32, 2, (int64_t[]){hq, d}, 0, &q)); /* [Hq][D] */
    else if (c->extrapolate)
        TRY(rows2(f, s->act[A_Q], sg->row0 * hq, hq, d, &q)); /* [Hq][D] */
    else
        TRY(roped(f, l, true, sg->row0, 2, (int64_t[]){hq, d}, &q)); /* [Hq][D] */
    TRY(rows2(f, s->act[A_ATT], sg->row0 * hq, hq, d, &out));                     /* [Hq][D] */
    if (staged) return sift_attn_append_staged(f->g, &a, &staging, q, k, v, out, &sg->attn_idx);
    return sift_attn_append(f->g, &a, q, k, v, out, &sg->attn_idx);
}

/* TokenButler's predictor at producer layer l (decode under BUTLER): the stream leaving the
 * layer -> LayerNorm -> fc1 -> SiLU -> fc2, the queries of the P layers after it. (The stream
 * entering layer 0 is the bare token embedding, which knows nothing of the context.) */
static sift_status predict(pass *f, uint32_t l)
{
    sift_session *s = f->s;
    const sift_predictor *pr = s->cfg.predictor;
    const butler_producer *bp = &pr->prod[l / (uint32_t)pr->stride];
    const int64_t e = s->m->hp.n_embd, t = f->st->rows, hid = pr->hidden;
    const int64_t out_w = (int64_t)pr->stride * s->m->hp.n_head * pr->key_dim;
    sift_tensor *x, *xn, *h, *ha, *qp;
    TRY(rows2(f, layer_res(s, l), 0, t, e, &x));    /* x [T][E]: the stream leaving layer l */
    TRY(rows2(f, s->b_norm, 0, t, e, &xn));          /* xn [T][E] */
    TRY(rows2(f, s->b_fc1, 0, t, hid, &h));          /* h [T][hidden] */
    TRY(rows2(f, s->b_act, 0, t, hid, &ha));         /* ha [T][hidden] = silu(h) */
    TRY(rows2(f, s->b_q, 0, t, out_w, &qp));         /* qp [T][P * Hq * d'] */
    sift_graph_set_stage(f->g, "predictor");
    TRY(sift_op_layernorm(f->g, x, bp->norm_w, bp->norm_b, pr->ln_eps, xn));
    TRY(sift_op_matmul(f->g, xn, bp->fc1, NULL, h));
    TRY(sift_op_silu(f->g, h, ha));
    return sift_op_matmul(f->g, ha, bp->fc2, NULL, qp);
}

/* Layer l's keys and queries rotated (RoPE) and its keys and values written to the cache, for each
 * sequence's rows at its positions; under TokenButler also the projected keys. */
static sift_status rope_and_cache(pass *f, uint32_t l)
{
    sift_session *s = f->s;
    const sift_model *m = s->m;
    const step *st = f->st;
    const int64_t hq = m->hp.n_head, hkv = m->hp.n_head_kv, d = m->hp.head_dim;
    const sift_rope_params rope = rope_params(m);
    const sift_predictor *pr = s->cfg.predictor;
    for (int i = 0; i < st->n_seg; i++) {
        const segment *sg = &st->seg[i];
        sift_tensor *kc = sift_kv_cache_view(s->kv, sg->seq, l, KV_K), *vc = sift_kv_cache_view(s->kv, sg->seq, l, KV_V);
        sift_tensor *kpc = sift_kv_cache_view(s->kv, sg->seq, l, KV_KP);
        sift_tensor *q3, *k3, *v3, *qr3, *kr3;
        if (qkv_fused(f, l)) { /* the one row's parts of qkv */
            TRY(qkv_part(f, 0, &q3)); /* [1][Hq][D] */
            TRY(qkv_part(f, 1, &k3)); /* [1][Hkv][D] */
            TRY(qkv_part(f, 2, &v3)); /* [1][Hkv][D] */
        } else {
            TRY(rows3(f, s->act[A_Q], sg->row0, sg->t, hq, d, &q3));  /* [t][Hq][D] */
            TRY(rows3(f, s->act[A_K], sg->row0, sg->t, hkv, d, &k3)); /* [t][Hkv][D] */
            TRY(rows3(f, s->act[A_V], sg->row0, sg->t, hkv, d, &v3)); /* [t][Hkv][D] */
        }
        TRY(roped3(f, l, false, sg->row0, sg->t, &kr3)); /* [t][Hkv][D] */
        if (s->cfg.extrapolate) { /* SPEC §6: keys cached before RoPE; the attention places the query */
            sift_graph_set_stage(f->g, "kv_write");
            TRY(sift_op_kv_write(f->g, k3, sg->pos0, kc));
        } else {
            sift_graph_set_stage(f->g, "rope");
            if (qkv_fused(f, l)) { /* q and k are adjacent in qkv_row and in qk_row: one rotation */
                sift_tensor *qk, *qkr;
                TRY(sift_graph_view(f->g, s->qkv_row, SIFT_F32, 3, (int64_t[]){1, hq + hkv, d}, 0, &qk)); /* [1][Hq + Hkv][D] */
                TRY(sift_graph_view(f->g, s->qk_row, SIFT_F32, 3, (int64_t[]){1, hq + hkv, d}, 0, &qkr)); /* [1][Hq + Hkv][D] */
                TRY(sift_op_rope(f->g, qk, sg->pos0, m->rope_factors, &rope, qkr));
            } else {
                TRY(roped3(f, l, true, sg->row0, sg->t, &qr3)); /* [t][Hq][D] */
                TRY(sift_op_rope(f->g, q3, sg->pos0, m->rope_factors, &rope, qr3));
                TRY(sift_op_rope(f->g, k3, sg->pos0, m->rope_factors, &rope, kr3));
            }
            sift_graph_set_stage(f->g, "kv_write");
            TRY(sift_op_kv_write(f->g, kr3, sg->pos0, kc));
        }
        if (kpc) { /* TokenButler: the same keys projected to d', cached beside them */
            const int64_t dk = pr->key_dim;
            sift_tensor *kr2, *kp2, *kp3;
            TRY(roped(f, l, false, sg->row0, 2, (int64_t[]){sg->t, hkv * d}, &kr2)); /* [t][Hkv * D] */
            TRY(rows2(f, s->b_kp, sg->row0, sg->t, hkv * dk, &kp2));       /* [t][Hkv * d'] */
            TRY(rows3(f, s->b_kp, sg->row0, sg->t, hkv, dk, &kp3));        /* [t][Hkv][d'] */
            sift_graph_set_stage(f->g, "predictor_keys");
            TRY(sift_op_matmul(f->g, kr2, pr->kproj[l], NULL, kp2));
            TRY(sift_op_kv_write(f->g, kp3, sg->pos0, kpc));
            sift_graph_set_stage(f->g, "kv_write");
        }
        TRY(sift_op_kv_write(f->g, v3, sg->pos0, vc)); /* K/V [Hkv][pos0 .. pos0 + t)[D] */
    }
    return SIFT_OK;
}

/* Layer l over the step's T rows (E = n_embd, F = n_ff). */
static sift_status layer(pass *f, uint32_t l)
{
    sift_session *s = f->s;
    const sift_model *m = s->m;
    const sift_gguf_hparams *hp = &m->hp;
    const layer_weights *w = &m->layers[l];
    const step *st = f->st;
    const int64_t e = hp->n_embd, ff = hp->n_ff, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, t = st->rows;
    sift_tensor *x, *xn;
    TRY(rows2(f, layer_in(s, l), 0, t, e, &x));      /* x [T][E]: the residual stream entering the layer */
    TRY(rows2(f, s->act[A_XN], 0, t, e, &xn));        /* xn [T][E] */
    const sift_predictor *pr = s->cfg.predictor;
    sift_graph_set_stage(f->g, "attn_norm");
    TRY(sift_op_rmsnorm(f->g, x, w->attn_norm, hp->rms_eps, xn));
    sift_graph_set_stage(f->g, "qkv");
    if (qkv_fused(f, l)) {
        sift_tensor *qkv;
        TRY(rows2(f, s->qkv_row, 0, 1, (hq + 2 * hkv) * d, &qkv)); /* qkv [1][(Hq + 2 Hkv) * D] */
        TRY(sift_op_matmul(f->g, xn, w->wqkv, NULL, qkv));
    } else {
        sift_tensor *q, *k, *v;
        TRY(rows2(f, s->act[A_Q], 0, t, hq * d, &q));  /* q [T][Hq * D] */
        TRY(rows2(f, s->act[A_K], 0, t, hkv * d, &k)); /* k [T][Hkv * D] */
        TRY(rows2(f, s->act[A_V], 0, t, hkv * d, &v)); /* v [T][Hkv * D] */
        TRY(sift_op_matmul(f->g, xn, w->wq, w->bq, q));
        TRY(sift_op_matmul(f->g, xn, w->wk, w->bk, k));
        TRY(sift_op_matmul(f->g, xn, w->wv, w->bv, v));
    }
    TRY(rope_and_cache(f, l));
    TRY(host_turn(f, l)); /* may start a new graph: the views above were the old one's */
    /* one stage for all the attention builder appends; the profile tells its ops apart */
    sift_graph_set_stage(f->g, "attention");
    for (int i = 0; i < st->n_seg; i++) TRY(attend(f, &st->seg[i], l)); /* att [T][Hq * D] */
    sift_tensor *att, *o, *mid, *gate, *up, *act, *down, *x_out;
    TRY(rows2(f, layer_in(s, l), 0, t, e, &x));      /* x [T][E] */
    TRY(rows2(f, s->act[A_XN], 0, t, e, &xn));        /* xn [T][E] */
    TRY(rows2(f, s->act[A_ATT], 0, t, hq * d, &att)); /* att [T][Hq * D] */
    TRY(rows2(f, s->act[A_O], 0, t, e, &o));          /* o [T][E] */
    TRY(rows2(f, s->act[A_X1], 0, t, e, &mid));       /* mid [T][E] = x + o */
    sift_tensor *gate_up = NULL; /* a one-row step with fused weights: gate and up as one product */
    if (t == 1 && w->w_gate_up) {
        TRY(rows2(f, s->gate_up_row, 0, 1, 2 * ff, &gate_up)); /* gate_up [1][2F] */
        TRY(rows2(f, s->gate_up_row, 0, 1, ff, &gate));        /* gate [1][F]: its first half */
        TRY(rows2(f, s->gate_up_row, 1, 1, ff, &up));          /* up [1][F]: its second half */
    } else {
        TRY(rows2(f, s->act[A_GATE], 0, t, ff, &gate)); /* gate [T][F] */
        TRY(rows2(f, s->act[A_UP], 0, t, ff, &up));     /* up [T][F] */
    }
    TRY(rows2(f, s->act[A_ACT], 0, t, ff, &act));     /* act [T][F] = swiglu(gate, up) */
    TRY(rows2(f, s->act[A_DOWN], 0, t, e, &down));    /* down [T][E] */
    TRY(rows2(f, layer_res(s, l), 0, t, e, &x_out));  /* x_out [T][E] = mid + down: the stream leaving */
    /* One row: the residual is the product's bias (o + x, the sum the add would make), and o and
     * down are not written. */
    sift_tensor *x_bias = NULL, *mid_bias = NULL;
    sift_graph_set_stage(f->g, "o");
    if (t == 1) {
        TRY(sift_graph_view(f->g, x, SIFT_F32, 1, (int64_t[]){e}, 0, &x_bias));     /* [E] */
        TRY(sift_graph_view(f->g, mid, SIFT_F32, 1, (int64_t[]){e}, 0, &mid_bias)); /* [E] */
        TRY(sift_op_matmul(f->g, att, w->wo, x_bias, mid));
    } else {
        TRY(sift_op_matmul(f->g, att, w->wo, NULL, o));
        sift_graph_set_stage(f->g, "residual");
        TRY(sift_op_add(f->g, x, o, mid));
    }
    sift_graph_set_stage(f->g, "ffn_norm");
    TRY(sift_op_rmsnorm(f->g, mid, w->ffn_norm, hp->rms_eps, xn));
    sift_graph_set_stage(f->g, "gate_up");
    if (gate_up) {
        TRY(sift_op_matmul(f->g, xn, w->w_gate_up, NULL, gate_up));
    } else {
        TRY(sift_op_matmul(f->g, xn, w->w_gate, NULL, gate));
        TRY(sift_op_matmul(f->g, xn, w->w_up, NULL, up));
    }
    sift_graph_set_stage(f->g, "swiglu");
    TRY(sift_op_swiglu(f->g, gate, up, act));
    sift_graph_set_stage(f->g, "down");
    if (t == 1) {
        TRY(sift_op_matmul(f->g, act, w->w_down, mid_bias, x_out));
    } else {
        TRY(sift_op_matmul(f->g, act, w->w_down, NULL, down));
        sift_graph_set_stage(f->g, "residual");
        TRY(sift_op_add(f->g, mid, down, x_out));
    }
    if (pr && !st->prefill && s->cfg.policy == SIFT_POLICY_BUTLER && l % (uint32_t)pr->stride == 0 && l + 1 < hp->n_layer)
        TRY(predict(f, l)); /* the queries of layers l + 1 .. l + P; the last of them has run before the next producer */
    return SIFT_OK;
}

/* The embedding of the step's tokens, the layers, the final norm and the logits (of the last row
 * in prefill, of every row in decode); computed (the host's turns) up to the last layer's end. */
static sift_status build(pass *f)
{
    sift_session *s = f->s;
    const sift_gguf_hparams *hp = &s->m->hp;
    const step *st = f->st;
    const int64_t e = hp->n_embd, rows = st->prefill ? 1 : st->rows, last = st->prefill ? st->rows - 1 : 0;
    sift_tensor *ids, *x0, *x, *xn, *logits;
    TRY(sift_graph_view(f->g, s->ids, SIFT_I32, 1, (int64_t[]){st->rows}, 0, &ids)); /* ids [T] */
    TRY(rows2(f, s->act[A_X0], 0, st->rows, e, &x0));                                /* x0 [T][E] */
    sift_graph_set_stage(f->g, "embed");
    TRY(sift_op_get_rows(f->g, s->m->tok_embd, ids, x0));
    for (uint32_t l = 0; l < hp->n_layer; l++) TRY(layer(f, l));
    TRY(rows2(f, layer_res(s, hp->n_layer - 1), last, rows, e, &x)); /* x [rows][E] */
    TRY(rows2(f, s->xlast_norm, 0, rows, e, &xn));                   /* xn [rows][E] */
    TRY(rows2(f, s->logits, 0, rows, hp->n_vocab, &logits));         /* logits [rows][vocab] */
    sift_graph_set_stage(f->g, "final_norm");
    TRY(sift_op_rmsnorm(f->g, x, s->m->output_norm, hp->rms_eps, xn));
    sift_graph_set_stage(f->g, "logits");
    return sift_op_matmul(f->g, xn, s->m->output, NULL, logits);
}

/* ---- running ahead ------------------------------------------------------------------------------ */

static bool same_segments(const step *a, const step *b)
{
    if (a->n_seg != b->n_seg || a->rows != b->rows || a->prefill != b->prefill) return false;
    for (int i = 0; i < a->n_seg; i++) {
        const segment *x = &a->seg[i], *y = &b->seg[i];
        if (x->seq != y->seq || x->butler != y->butler || x->butler_shift != y->butler_shift || x->row0 != y->row0 ||
            x->t != y->t || x->pos0 != y->pos0)
            return false;
    }
    return true;
}

/* The graph built ahead for st, if st is the step it was built for; any other is destroyed. */
static sift_graph *take_ahead(sift_session *s, step *st)
{
    sift_graph *g = s->ahead;
    s->ahead = NULL;
    if (!g) return NULL;
    const step built_for = {.seg = s->ahead_seg, .n_seg = s->ahead_n_seg, .rows = st->rows, .prefill = false};
    if (!same_segments(st, &built_for)) {
        sift_graph_destroy(g);
        return NULL;
    }
    for (int i = 0; i < st->n_seg; i++) st->seg[i].attn_idx = s->ahead_seg[i].attn_idx;
    return g;
}

/* Builds and records the step after st (running on the device in `running`) as st predicts it:
 * each sequence one position on, TokenButler's choice as run_step will make it (sift_butler_next).
 * A failure leaves no graph ahead and is not the step's: the next step builds its own. */
static void build_ahead(sift_session *s, const step *st, sift_graph *running)
{
    for (int i = 0; i < st->n_seg; i++)
        if (st->seg[i].pos0 + 1 >= s->cfg.n_ctx) return; /* the sequence is full */
    for (int i = 0; i < st->n_seg; i++) {
        const segment *sg = &st->seg[i];
        s->ahead_seg[i] = (segment){.seq = sg->seq, .row0 = sg->row0, .t = 1, .pos0 = sg->pos0 + 1,
                                    .butler = sift_butler_next(s, sg), .butler_shift = sift_butler_shift(s, sg, true)};
    }
    s->ahead_n_seg = st->n_seg;
    step next = {.seg = s->ahead_seg, .n_seg = st->n_seg, .rows = st->rows, .prefill = false};
    sift_graph_lend_storage(running); /* the next graph's intermediates take the running one's buffers */
    pass f = {.s = s, .st = &next};
    if (sift_graph_create(s->m->ctx, &f.g) != SIFT_OK) return;
    const double t0 = sift_now_us();
    sift_status e = build(&f);
    const double t1 = sift_now_us();
    if (e == SIFT_OK) e = sift_graph_prepare(f.g);
    s->ahead_times.graph_us += t1 - t0;
    s->ahead_times.prepare_us += sift_now_us() - t1;
    if (e != SIFT_OK) {
        sift_graph_destroy(f.g);
        return;
    }
    s->ahead = f.g;
}

sift_status sift_forward(sift_session *s, step *st)
{
    const bool host_lists = !st->prefill && sift_host_policy(s->cfg.policy);
    const bool observe = st->prefill && s->seqs[st->seg[0].seq].layers[0].obs_q;
    pass f = {.s = s, .st = st, .measure = !st->prefill && sift_measures_quality(s)};
    f.host = host_lists || observe || f.measure;
    const bool ahead = s->run_ahead && !st->prefill && !f.host && !s->profiling;
    f.g = take_ahead(s, st);
    s->steps_run_ahead += f.g != NULL;
    sift_status e = SIFT_OK;
    if (!f.g) {
        TRY(sift_graph_create(s->m->ctx, &f.g));
        e = build(&f);
    }
    if (e == SIFT_OK && ahead) {
        sift_ahead_times *at = &s->ahead_times;
        const double t0 = sift_now_us();
        e = sift_graph_submit(f.g);
        const double t1 = sift_now_us();
        if (e == SIFT_OK) build_ahead(s, st, f.g);
        const double t2 = sift_now_us();
        if (e == SIFT_OK) e = sift_graph_wait(f.g);
        at->steps++;
        at->submit_us += t1 - t0;
        at->build_us += t2 - t1;
        at->wait_us += sift_now_us() - t2;
    } else if (e == SIFT_OK) {
        e = compute(&f);
    }
    if (e == SIFT_OK && f.measure) e = sift_quality_measure_layer(s, st, s->m->hp.n_layer - 1);
    if (e == SIFT_OK && !f.host) e = sift_host_after_step(s, st);
    sift_graph_destroy(f.g);
    if (e == SIFT_OK && s->profiling) s->prof_steps++;
    return e;
}
