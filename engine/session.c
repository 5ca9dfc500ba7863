/* Sessions: running a model over a paged KV cache shared by several sequences (engine/session.h
 * says which file does what). This file creates a session, sets its policy, and takes the public
 * calls: a prompt is fed in chunks of prefill, a decode step feeds one token of each of several
 * sequences, and a rewind gives pages back. */
#include "session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sift_session_config sift_session_config_default(void)
{
    sift_session_config c = {.struct_size = sizeof c, .n_ctx = 0, .kv_type = SIFT_F16, .policy = SIFT_POLICY_DENSE, .sink = 128, .window = 512,
                             .budget = 2048, .chunk = 512, .n_seq = 1, .page_size = 256, .sel_cache = 0.9f,
                             .predictor_keys = SIFT_F16};
    return c;
}

/* ---- creation ----------------------------------------------------------------------------------- */

static void free_sequence_state(sift_session *s, sequence *q)
{
    /* the graph built ahead for the next step reads this state and the policy it was built under */
    sift_graph_destroy(s->ahead);
    s->ahead = NULL;
    for (uint32_t l = 0; q->layers && l < s->m->hp.n_layer; l++) {
        seq_layer *sl = &q->layers[l];
        sift_tensor_destroy(sl->sel_state);
        sift_tensor_destroy(sl->sel_idx);
        sift_tensor_destroy(sl->sel_warm);
        sift_tensor_destroy(sl->stage_k);
        sift_tensor_destroy(sl->stage_v);
        sl->sel_state = sl->sel_idx = sl->sel_warm = sl->stage_k = sl->stage_v = NULL;
        sl->butler_steps = sl->butler_reused = 0;
    }
    sift_tensor_destroy(q->host_idx);
    q->host_idx = NULL;
    sift_policy_state_destroy(q->pstate);
    q->pstate = NULL;
}

void sift_session_destroy(sift_session *s)
{
    if (!s) return;
    sift_graph_destroy(s->ahead); /* its views first */
    s->ahead = NULL;
    free(s->ahead_seg);
    const uint32_t n_layer = s->m->hp.n_layer;
    for (int i = 0; s->seqs && i < s->cfg.n_seq; i++) {
        sequence *q = &s->seqs[i];
        free_sequence_state(s, q);
        for (uint32_t l = 0; q->layers && l < n_layer; l++) {
            free(q->layers[l].obs_q);
            sift_kv_mirror_free(&q->layers[l].mirror);
        }
        free(q->layers);
    }
    free(s->seqs);
    sift_kv_cache_destroy(s->kv);
    for (uint32_t l = 0; s->layer_out && l < n_layer; l++) sift_tensor_destroy(s->layer_out[l]);
    free(s->layer_out);
    for (int i = 0; i < A_COUNT; i++) sift_tensor_destroy(s->act[i]);
    sift_tensor_destroy(s->qkv_row);
    sift_tensor_destroy(s->gate_up_row);
    sift_tensor_destroy(s->qk_row);
    sift_tensor *butler_act[5] = {s->b_kp, s->b_norm, s->b_fc1, s->b_act, s->b_q};
    for (int i = 0; i < 5; i++) sift_tensor_destroy(butler_act[i]);
    sift_tensor_destroy(s->ids);
    sift_tensor_destroy(s->xlast_norm);
    sift_tensor_destroy(s->logits);
    if (s->cfg.predictor) sift_predictor_release((sift_predictor *)s->cfg.predictor);
    sift_model_release(s->m);
    free(s);
}

static sift_status check_policy(const sift_session_config *c, const char *fn)
{
    if ((int)c->policy < 0 || c->policy >= SIFT_POLICY_COUNT)
        return sift_set_error(SIFT_E_INVALID, "%s: unknown policy %d", fn, (int)c->policy);
    if (c->sink < 0 || c->window < 0 || c->budget < 0)
        return sift_set_error(SIFT_E_SHAPE, "%s: sink, window and budget must not be negative", fn);
    if (c->sink > INT32_MAX || c->window > INT32_MAX || c->budget > INT32_MAX || sift_max_count(c) > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: sink + window + budget exceeds 2^31", fn);
    if (c->extrapolate && c->policy != SIFT_POLICY_TOKENSELECT && c->policy != SIFT_POLICY_STREAMING)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: length extrapolation runs with the tokenselect or streaming policy, not %s",
                              fn, sift_policy_name(c->policy));
    if (c->policy == SIFT_POLICY_BUTLER && !c->predictor)
        return sift_set_error(SIFT_E_INVALID, "%s: the butler policy needs a predictor (sift_predictor_load; --predictor FILE)", fn);
    if (c->predict_interval < 1 || c->predict_interval > 1024)
        return sift_set_error(SIFT_E_INVALID, "%s: prediction interval %d (1 .. 1024)", fn, c->predict_interval);
    if (c->sparse_prefill && c->policy != SIFT_POLICY_TOKENSELECT)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: sparse prefill runs with the tokenselect policy, not %s", fn,
                              sift_policy_name(c->policy));
    return SIFT_OK;
}

/* A Selection Cache's state of `qn` query values (zeros: nothing cached) for layers first .. n_layer - 1. */
static sift_status make_sel_states(sift_session *s, sequence *q, uint32_t first, int64_t qn)
{
    const int64_t sn = qn + SIFT_SEL_CACHE_EXTRA;
    float *zeros = calloc((size_t)sn, sizeof *zeros);
    if (!zeros) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
    sift_status st = SIFT_OK;
    for (uint32_t l = first; st == SIFT_OK && l < s->m->hp.n_layer; l++) {
        seq_layer *sl = &q->layers[l];
        st = sift_tensor_create(s->m->ctx, SIFT_F32, 1, &sn, &sl->sel_state);
        if (st == SIFT_OK) st = sift_tensor_write(sl->sel_state, 0, zeros, (size_t)sn * sizeof *zeros);
    }
    free(zeros);
    return st;
}

/* TokenSelect's Selection Cache of every layer: an empty state on q and the kept list. */
static sift_status make_sel_cache(sift_session *s, sequence *q)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    TRY(make_sel_states(s, q, 0, (int64_t)hp->n_head * hp->head_dim));
    for (uint32_t l = 0; l < hp->n_layer; l++)
        TRY(sift_tensor_create(s->m->ctx, SIFT_I32, 2, (int64_t[]){1, sift_max_count(&s->cfg)}, &q->layers[l].sel_idx));
    return SIFT_OK;
}

/* The lists BUTLER keeps per layer for the prediction interval: [Hkv][S + k (+ k) + W]; and the
 * state of the check on q' that decides their reuse under sift_session_set_butler_reuse (made
 * whatever the interval: a few values a layer, so that the memory estimate needs no more). */
static int64_t butler_count(const sift_session_config *c) { return sift_max_count(c) + (c->neighbor_fetch ? c->budget : 0); }

/* Which families of layer l move to host memory under offload: the cache's rule for the session's
 * config (create_kv_cache), whether or not the pools offload. */
static kv_cache_config kv_rules(const sift_session_config *c)
{
    return (kv_cache_config){.offload_v_only = c->kv_offload_v_only, .resident_layers = c->policy == SIFT_POLICY_BUTLER ? 1 : 0};
}

static bool layer_moves(const sift_session_config *c, uint32_t l)
{
    const kv_cache_config kc = kv_rules(c);
    return sift_kv_cache_moves(&kc, l, KV_K) || sift_kv_cache_moves(&kc, l, KV_V);
}

bool sift_butler_staging_on(const sift_session_config *c, bool offloaded)
{
    return c->policy == SIFT_POLICY_BUTLER && offloaded && c->predict_interval > 1 && !c->neighbor_fetch;
}

static bool offloaded(const sift_session *s)
{
    sift_kv_pool_info p;
    sift_kv_cache_pools(s->kv, &p);
    return p.host_pages > 0;
}

bool sift_butler_stages(const sift_session *s, uint32_t l)
{
    return l >= 1 && sift_butler_staging_on(&s->cfg, offloaded(s)) && layer_moves(&s->cfg, l);
}

size_t sift_butler_staging_bytes(const sift_session *s)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    size_t layers = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) layers += sift_butler_stages(s, l);
    return layers * 2 * (size_t)hp->n_head_kv * (size_t)sift_max_count(&s->cfg) * (size_t)hp->head_dim *
           sift_dtype_size(s->cfg.kv_type);
}

/* Each staged layer's K and V rows [Hkv][S + k + W][D] (sift_butler_stages). */
static sift_status make_butler_staging(sift_session *s, sequence *q)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const int64_t shape[3] = {hp->n_head_kv, sift_max_count(&s->cfg), hp->head_dim};
    for (uint32_t l = 1; l < hp->n_layer; l++) {
        if (!sift_butler_stages(s, l)) continue;
        seq_layer *sl = &q->layers[l];
        sift_status st = sift_tensor_create(s->m->ctx, s->cfg.kv_type, 3, shape, &sl->stage_k);
        if (st == SIFT_OK) st = sift_tensor_create(s->m->ctx, s->cfg.kv_type, 3, shape, &sl->stage_v);
        if (st != SIFT_OK) {
            char why[256]; /* the allocation's own message, copied before it is overwritten */
            snprintf(why, sizeof why, "%s", sift_last_error());
            return sift_set_error(st, "session: TokenButler's staged rows under KV offload (%zu bytes of device memory a "
                                      "sequence; an interval of 1 or neighbour fetch stages none) could not be allocated: %s",
                                  sift_butler_staging_bytes(s), why);
        }
    }
    return SIFT_OK;
}

static sift_status make_butler_lists(sift_session *s, sequence *q)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    q->lists_kept = false;
    for (uint32_t l = 1; l < hp->n_layer; l++)
        TRY(sift_tensor_create(s->m->ctx, SIFT_I32, 2, (int64_t[]){hp->n_head_kv, butler_count(&s->cfg)}, &q->layers[l].sel_idx));
    TRY(make_butler_staging(s, q));
    return make_sel_states(s, q, 1, (int64_t)hp->n_head * s->cfg.predictor->key_dim);
}

/* The warm start of each selecting layer's top-k (sift_op_select_warm): zeros, [lists][WORDS] with one
 * list (TokenSelect's head vote) or one per KV head (BUTLER, layers >= 1). */
static sift_status make_select_warm(sift_session *s, sequence *q)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const bool butler = s->cfg.policy == SIFT_POLICY_BUTLER;
    const int64_t lists = butler ? hp->n_head_kv : 1;
    int32_t *zeros = calloc((size_t)lists * SIFT_SELECT_WARM_WORDS, sizeof *zeros);
    if (!zeros) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
    sift_status st = SIFT_OK;
    for (uint32_t l = butler ? 1 : 0; st == SIFT_OK && l < hp->n_layer; l++) {
        seq_layer *sl = &q->layers[l];
        st = sift_tensor_create(s->m->ctx, SIFT_I32, 2, (int64_t[]){lists, SIFT_SELECT_WARM_WORDS}, &sl->sel_warm);
        if (st == SIFT_OK) st = sift_tensor_write(sl->sel_warm, 0, zeros, (size_t)lists * SIFT_SELECT_WARM_WORDS * sizeof *zeros);
    }
    free(zeros);
    return st;
}

/* The per-sequence state a policy needs: TokenSelect's Selection Cache; BUTLER's kept lists; for the host policies,
 * host lists and the policy's state (replaying the prompt queries kept from prefill). */
static sift_status make_policy_state(sift_session *s, int seq)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    sequence *q = &s->seqs[seq];
    if (s->cfg.policy == SIFT_POLICY_TOKENSELECT || s->cfg.policy == SIFT_POLICY_BUTLER) TRY(make_select_warm(s, q));
    if (s->cfg.policy == SIFT_POLICY_TOKENSELECT && s->cfg.sel_cache <= 1.0f) return make_sel_cache(s, q);
    if (s->cfg.policy == SIFT_POLICY_BUTLER) return make_butler_lists(s, q);
    if (!sift_host_policy(s->cfg.policy)) return SIFT_OK;
    TRY(sift_tensor_create(s->m->ctx, SIFT_I32, 1, (int64_t[]){(int64_t)hp->n_head_kv * sift_max_count(&s->cfg)}, &q->host_idx));
    TRY(sift_policy_state_create(s->cfg.policy, (int)hp->n_layer, (int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim,
                                 s->cfg.n_ctx, &q->pstate));
    const int64_t qn = (int64_t)hp->n_head * hp->head_dim;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const seq_layer *sl = &q->layers[l];
        for (int i = 0; i < sl->n_obs; i++)
            if (sl->obs_pos[i] < sift_kv_cache_len(s->kv, seq)) TRY(sift_policy_observe(q->pstate, (int)l, sl->obs_q + i * qn, sl->obs_pos[i], 1));
    }
    return SIFT_OK;
}

/* Each sequence's layers: its mirrors of the cache, the prompt queries kept, its policy's state. */
static sift_status create_sequences(sift_session *s)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const int64_t qn = (int64_t)hp->n_head * hp->head_dim;
    s->seqs = calloc((size_t)s->cfg.n_seq, sizeof *s->seqs);
    if (!s->seqs) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
    for (int i = 0; i < s->cfg.n_seq; i++) {
        sequence *q = &s->seqs[i];
        q->layers = calloc(hp->n_layer, sizeof *q->layers);
        if (!q->layers) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            if (sift_keeps_mirror(s))
                TRY(sift_kv_mirror_init(&q->layers[l].mirror, hp->n_head_kv, hp->head_dim, s->cfg.n_ctx, s->cfg.eval_mode != 0));
            if (s->cfg.eval_mode || s->cfg.policy == SIFT_POLICY_H2O || s->cfg.policy == SIFT_POLICY_SNAPKV) {
                q->layers[l].obs_q = malloc((size_t)(SIFT_POLICY_OBS * qn) * sizeof(float));
                if (!q->layers[l].obs_q) return sift_set_error(SIFT_E_NOMEM, "sift_session_create: out of memory");
            }
        }
        TRY(make_policy_state(s, i));
    }
    return SIFT_OK;
}

/* The session's KV cache: a sequence's pages per n_ctx, the pool and its device part as the
 * config says; TokenButler's dense layer 0 stays on the device under offload, the sink's pages
 * never leave it. */
static sift_status create_kv_cache(sift_session *s)
{
    const sift_session_config *c = &s->cfg;
    const sift_gguf_hparams *hp = &s->m->hp;
    kv_cache_config kc = kv_rules(c); /* offload_v_only, resident_layers */
    kc.n_layer = hp->n_layer;
    kc.n_kv_heads = hp->n_head_kv;
    kc.head_dim = hp->head_dim;
    kc.kv_type = c->kv_type;
    kc.page_size = c->page_size;
    kc.n_seq = c->n_seq;
    kc.seq_tokens = c->n_ctx;
    kc.pool_tokens = c->pool_tokens;
    kc.device_tokens = c->kv_device_tokens;
    kc.pinned_tokens = c->sink;
    kc.key_dim = c->predictor ? c->predictor->key_dim : 0;
    kc.key_type = c->predictor_keys;
    return sift_kv_cache_create(s->m->ctx, &kc, &s->kv);
}

sift_status sift_session_create(sift_model *m, const sift_session_config *cfg, sift_session **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_session_create: out is NULL");
    *out = NULL;
    if (!m) return sift_set_error(SIFT_E_INVALID, "sift_session_create: model is NULL");
    const char *fn = "sift_session_create";
    sift_session_config c = sift_session_config_default();
    /* configs of the first released size (without should_stop) are read too */
    if (cfg) TRY(sift_config_read(cfg, &c, offsetof(sift_session_config, should_stop), sizeof c, fn));
    if (c.n_ctx == 0) c.n_ctx = m->hp.n_ctx_train;
    if (c.chunk == 0) c.chunk = 512;
    if (c.n_seq == 0) c.n_seq = 1;
    if (c.page_size == 0) c.page_size = 256;
    if (c.predict_interval == 0) c.predict_interval = 1;
    if (c.predictor && c.predictor->m != m)
        return sift_set_error(SIFT_E_INVALID, "%s: the predictor was loaded for another model", fn);
    if (c.predictor && c.predictor_keys != SIFT_F16 && c.predictor_keys != SIFT_F32 && c.predictor_keys != SIFT_I8)
        return sift_set_error(SIFT_E_DTYPE, "%s: projected keys of type %s (f16, f32 or i8)", fn, sift_dtype_name(c.predictor_keys));
    if (c.predictor && c.extrapolate)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: a predictor projects keys after RoPE; length extrapolation caches them before", fn);
    if (c.n_ctx < 1 || c.n_ctx > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: context of %lld tokens", fn, (long long)c.n_ctx);
    if (c.chunk < 1 || c.chunk > 65536) return sift_set_error(SIFT_E_SHAPE, "%s: chunk %lld", fn, (long long)c.chunk);
    if (c.n_seq < 1 || c.n_seq > c.chunk)
        return sift_set_error(SIFT_E_SHAPE, "%s: %d sequences (1 .. chunk = %lld)", fn, c.n_seq, (long long)c.chunk);
    if (c.page_size < 1 || (c.page_size & (c.page_size - 1)) != 0 || c.page_size > (1 << 20))
        return sift_set_error(SIFT_E_SHAPE, "%s: page size %lld is not a power of two up to 2^20", fn, (long long)c.page_size);
    if (c.kv_type != SIFT_F16 && c.kv_type != SIFT_F32)
        return sift_set_error(SIFT_E_DTYPE, "%s: KV cache type %s (f16 or f32)", fn, sift_dtype_name(c.kv_type));
    if (!(c.sel_cache >= -1.0f)) return sift_set_error(SIFT_E_INVALID, "%s: Selection Cache threshold %g", fn, (double)c.sel_cache);
    TRY(check_policy(&c, fn));
    const int64_t pages_per_seq = (c.n_ctx + c.page_size - 1) / c.page_size;
    if (c.pool_tokens == 0) c.pool_tokens = pages_per_seq * c.page_size * c.n_seq;
    if (c.pool_tokens < 1 || c.pool_tokens > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: a KV pool of %lld tokens", fn, (long long)c.pool_tokens);
    if (c.kv_device_tokens < 0)
        return sift_set_error(SIFT_E_INVALID, "%s: KV offload with a device pool of %lld tokens", fn, (long long)c.kv_device_tokens);
    if (c.kv_offload_v_only && c.kv_device_tokens == 0)
        return sift_set_error(SIFT_E_INVALID, "%s: kv_offload_v_only without kv_device_tokens (the device pool's size)", fn);

    sift_session *s = calloc(1, sizeof *s);
    if (!s) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    s->m = m;
    s->cfg = c;
    s->butler_reuse = SIFT_SEL_CACHE_OFF;
    sift_model_retain(m); /* the session keeps its model (and predictor) alive: sift.h, ownership */
    if (c.predictor) sift_predictor_retain((sift_predictor *)c.predictor);
    const char *ahead_env = getenv("SIFT_STEP_AHEAD"); /* 0: every step built on the path (measurement) */
    s->run_ahead = !(ahead_env && strcmp(ahead_env, "0") == 0);
    s->ahead_seg = calloc((size_t)c.n_seq, sizeof *s->ahead_seg);
    const sift_gguf_hparams *hp = &m->hp;
    const int64_t t = c.chunk, e = hp->n_embd, hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, f = hp->n_ff;
    sift_status st = create_kv_cache(s);
    const int64_t widths[A_COUNT] = {[A_X0] = e,      [A_X1] = e,      [A_XN] = e,       [A_Q] = hq * d,   [A_K] = hkv * d,
                                     [A_V] = hkv * d, [A_QR] = hq * d, [A_KR] = hkv * d, [A_ATT] = hq * d, [A_O] = e,
                                     [A_GATE] = f,    [A_UP] = f,      [A_ACT] = f,      [A_DOWN] = e};
    for (int i = 0; st == SIFT_OK && i < A_COUNT; i++)
        st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){t, widths[i]}, &s->act[i]);
    if (st == SIFT_OK && c.keep_layer_outputs) {
        s->layer_out = calloc(hp->n_layer, sizeof *s->layer_out);
        if (!s->layer_out) st = sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
        for (uint32_t l = 0; st == SIFT_OK && l < hp->n_layer; l++)
            st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){t, e}, &s->layer_out[l]);
    }
    if (st == SIFT_OK && c.predictor) {
        const sift_predictor *pr = c.predictor;
        const int64_t widths_b[5] = {hkv * pr->key_dim, e, pr->hidden, pr->hidden, (int64_t)pr->stride * hq * pr->key_dim};
        sift_tensor **dst[5] = {&s->b_kp, &s->b_norm, &s->b_fc1, &s->b_act, &s->b_q};
        for (int i = 0; st == SIFT_OK && i < 5; i++)
            st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){t, widths_b[i]}, dst[i]);
    }
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_I32, 1, (int64_t[]){t}, &s->ids);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){1, (hq + 2 * hkv) * d}, &s->qkv_row);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){1, 2 * f}, &s->gate_up_row);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){1, (hq + hkv) * d}, &s->qk_row);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){c.n_seq, e}, &s->xlast_norm);
    if (st == SIFT_OK) st = sift_tensor_create(m->ctx, SIFT_F32, 2, (int64_t[]){c.n_seq, hp->n_vocab}, &s->logits);
    if (st == SIFT_OK && !s->ahead_seg) st = sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    if (st == SIFT_OK) st = create_sequences(s);
    if (st != SIFT_OK) {
        sift_session_destroy(s);
        return st;
    }
    *out = s;
    return SIFT_OK;
}

/* ---- running a step ------------------------------------------------------------------------------ */

/* Whether a decode step at pos0 has more candidates than the budget: a selection there keeps
 * full lists that BUTLER's interval may reuse. */
static bool lists_full(const sift_session *s, int64_t pos0)
{
    const sift_select_params sel = {.n_ctx = pos0 + 1, .sink = s->cfg.sink, .window = s->cfg.window, .budget = s->cfg.budget};
    return sift_select_candidates(&sel) > sel.budget;
}

/* What a decode step does under BUTLER, for a sequence of decode_steps steps since its prefill
 * whose lists are kept (or not): a selection at the first step, and at the steps 1, 1 + I,
 * 1 + 2I, ... of the interval I; in between, the kept lists are reused (the fixed interval) or the
 * device checks q' (decided by the query, the interval then the longest a selection lasts). The
 * first step selects from the predictor's scores against the projected keys the prefill wrote,
 * where the method attends densely: a dense step reads every row of the cache, every host page
 * under KV offload. The interval still counts from step 1, as it did after the dense step, so the
 * steps a fixed interval selects on stay where they were (docs/policies.md: moving them moved
 * retrieval accuracy; the first step's selection did not). */
static butler_step butler_mode(const sift_session *s, int64_t decode_steps, bool lists_kept)
{
    if (!lists_kept || decode_steps == 0 || (decode_steps - 1) % s->cfg.predict_interval == 0) return BUTLER_SELECT;
    return sift_butler_by_query(s) ? BUTLER_CHECK : BUTLER_REUSE;
}

/* Whether sg's sequence keeps full lists after the decode step sg: a BUTLER selection keeps them
 * where the step had more candidates than the budget; other steps leave the flag as it was. */
static bool lists_kept_after(const sift_session *s, const segment *sg)
{
    if (s->cfg.policy == SIFT_POLICY_BUTLER && sg->butler == BUTLER_SELECT) return lists_full(s, sg->pos0);
    return s->seqs[sg->seq].lists_kept;
}

butler_step sift_butler_next(const sift_session *s, const segment *sg)
{
    return butler_mode(s, s->seqs[sg->seq].decode_steps + 1, lists_kept_after(s, sg));
}

/* A reuse at decode step d (butler_mode) follows the selection at the step d' <= d with
 * (d' - 1) % I == 0: (d - 1) % I steps before. */
int64_t sift_butler_shift(const sift_session *s, const segment *sg, bool next)
{
    const int64_t d = s->seqs[sg->seq].decode_steps + (next ? 1 : 0);
    const butler_step mode = next ? sift_butler_next(s, sg) : sg->butler;
    return mode == BUTLER_REUSE ? (d - 1) % s->cfg.predict_interval : 0;
}

static sift_status run_step(sift_session *s, step *st, const int32_t *tokens, float *logits)
{
    if (s->cfg.should_stop && s->cfg.should_stop(s->cfg.should_stop_user))
        return sift_set_error(SIFT_E_CANCELLED, "session: stopped by should_stop before the %s at position %lld",
                              st->prefill ? "prefill chunk" : "decode step", (long long)st->seg[0].pos0);
    for (int i = 0; i < st->n_seg; i++) {
        segment *sg = &st->seg[i];
        TRY(sift_kv_cache_reserve(s->kv, sg->seq, sg->pos0 + sg->t));
        if (!st->prefill && sift_host_policy(s->cfg.policy)) {
            sg->lists_host = malloc((size_t)(s->m->hp.n_head_kv * sift_max_count(&s->cfg) + 1) * sizeof(int32_t));
            if (!sg->lists_host) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
        }
    }
    for (int i = 0; i < st->n_seg; i++) {
        const sequence *q = &s->seqs[st->seg[i].seq];
        st->seg[i].butler = butler_mode(s, q->decode_steps, q->lists_kept);
        st->seg[i].butler_shift = sift_butler_shift(s, &st->seg[i], false);
    }
    TRY(sift_tensor_write(s->ids, 0, tokens, (size_t)st->rows * sizeof *tokens));
    sift_status e = sift_forward(s, st);
    for (int i = 0; i < st->n_seg; i++) {
        free(st->seg[i].q_host);
        free(st->seg[i].lists_host);
        st->seg[i].q_host = NULL;
        st->seg[i].lists_host = NULL;
    }
    if (e == SIFT_OK && logits) {
        const int64_t rows = st->prefill ? 1 : st->rows;
        e = sift_tensor_read(s->logits, 0, logits, (size_t)(rows * s->m->hp.n_vocab) * sizeof *logits);
    }
    if (e != SIFT_OK) return e;
    for (int i = 0; i < st->n_seg; i++) {
        sequence *q = &s->seqs[st->seg[i].seq];
        const segment *sg = &st->seg[i];
        sift_kv_cache_advance(s->kv, sg->seq, sg->t);
        if (st->prefill) {
            q->decode_steps = 0;
            q->lists_kept = false;
            continue;
        }
        /* the fixed interval's counts; the device counts the reuse it decides (sel_state) */
        const bool full = lists_full(s, sg->pos0);
        if (s->cfg.policy == SIFT_POLICY_BUTLER && !sift_butler_by_query(s) && full)
            for (uint32_t l = 1; l < s->m->hp.n_layer; l++) {
                q->layers[l].butler_steps++;
                q->layers[l].butler_reused += sg->butler == BUTLER_REUSE;
            }
        q->lists_kept = lists_kept_after(s, sg);
        q->decode_steps++;
    }
    s->last_t = st->rows;
    s->last_row = st->prefill ? st->rows - 1 : 0;
    return SIFT_OK;
}

/* ---- the public calls ----------------------------------------------------------------------------- */

static sift_status check_tokens(const sift_session *s, const int32_t *tokens, size_t n, const char *fn)
{
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= (int32_t)s->m->hp.n_vocab)
            return sift_set_error(SIFT_E_INVALID, "%s: token %d outside the vocabulary of %u", fn, tokens[i], s->m->hp.n_vocab);
    return SIFT_OK;
}

sift_status sift_session_eval_seq(sift_session *s, int seq, const int32_t *tokens, size_t n, float *logits)
{
    const char *fn = "sift_session_eval";
    if (!s || (!tokens && n)) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    if (seq < 0 || seq >= s->cfg.n_seq) return sift_set_error(SIFT_E_INVALID, "%s: no sequence %d of %d", fn, seq, s->cfg.n_seq);
    if (n == 0) return SIFT_OK;
    const int64_t len = sift_kv_cache_len(s->kv, seq);
    /* compared unsigned: n >= 2^63 (a caller's len - 1 with len 0) would pass as a negative int64_t
     * and check_tokens would read past the caller's array */
    if ((uint64_t)n > (uint64_t)(s->cfg.n_ctx - len))
        return sift_set_error(SIFT_E_LIMIT, "%s: %zu more tokens do not fit: %lld of %lld positions used", fn, n,
                              (long long)len, (long long)s->cfg.n_ctx);
    TRY(check_tokens(s, tokens, n, fn));
    segment sg = {.seq = seq, .row0 = 0, .t = 1};
    step st = {.seg = &sg, .n_seg = 1, .rows = 1, .prefill = false};
    /* decode steps: one token, or every token when keys are cached before RoPE (SPEC §6) */
    if (n == 1 || s->cfg.extrapolate) {
        for (size_t i = 0; i < n; i++) {
            sg.pos0 = sift_kv_cache_len(s->kv, seq);
            TRY(run_step(s, &st, tokens + i, i + 1 == n ? logits : NULL));
            if (n > 1 && s->cfg.progress && ((i + 1) % 256 == 0 || i + 1 == n))
                s->cfg.progress(s->cfg.progress_user, (int64_t)(i + 1), (int64_t)n);
        }
        return SIFT_OK;
    }
    st.prefill = true;
    for (size_t done = 0; done < n;) {
        const int64_t t = (int64_t)(n - done) < s->cfg.chunk ? (int64_t)(n - done) : s->cfg.chunk;
        sg.pos0 = sift_kv_cache_len(s->kv, seq);
        sg.t = t;
        st.rows = t;
        TRY(run_step(s, &st, tokens + done, done + (size_t)t == n ? logits : NULL));
        done += (size_t)t;
        if (s->cfg.progress) s->cfg.progress(s->cfg.progress_user, (int64_t)done, (int64_t)n);
    }
    return SIFT_OK;
}

sift_status sift_session_eval(sift_session *s, const int32_t *tokens, size_t n, float *logits)
{
    return sift_session_eval_seq(s, 0, tokens, n, logits);
}

sift_status sift_session_decode_batch(sift_session *s, int n, const int *seqs, const int32_t *tokens, float *logits)
{
    const char *fn = "sift_session_decode_batch";
    if (!s || !seqs || !tokens) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    if (n < 1 || n > s->cfg.n_seq) return sift_set_error(SIFT_E_INVALID, "%s: %d sequences (1 .. %d)", fn, n, s->cfg.n_seq);
    if (s->cfg.extrapolate && n > 1) /* the attention queries of extrapolation live in one scratch row per step */
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: length extrapolation decodes one sequence at a time", fn);
    TRY(check_tokens(s, tokens, (size_t)n, fn));
    segment *sg = calloc((size_t)n, sizeof *sg);
    if (!sg) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    sift_status e = SIFT_OK;
    for (int i = 0; i < n && e == SIFT_OK; i++) {
        if (seqs[i] < 0 || seqs[i] >= s->cfg.n_seq) e = sift_set_error(SIFT_E_INVALID, "%s: no sequence %d", fn, seqs[i]);
        for (int j = 0; j < i && e == SIFT_OK; j++)
            if (seqs[j] == seqs[i]) e = sift_set_error(SIFT_E_INVALID, "%s: sequence %d listed twice", fn, seqs[i]);
        if (e == SIFT_OK && sift_kv_cache_len(s->kv, seqs[i]) >= s->cfg.n_ctx)
            e = sift_set_error(SIFT_E_LIMIT, "%s: sequence %d is full (%lld tokens)", fn, seqs[i], (long long)s->cfg.n_ctx);
        if (e == SIFT_OK) sg[i] = (segment){.seq = seqs[i], .row0 = i, .t = 1, .pos0 = sift_kv_cache_len(s->kv, seqs[i])};
    }
    step st = {.seg = sg, .n_seg = n, .rows = n, .prefill = false};
    if (e == SIFT_OK) e = run_step(s, &st, tokens, logits);
    free(sg);
    return e;
}

int64_t sift_session_pos(const sift_session *s) { return s ? sift_kv_cache_len(s->kv, 0) : 0; }

int64_t sift_session_seq_pos(const sift_session *s, int seq)
{
    return s && seq >= 0 && seq < s->cfg.n_seq ? sift_kv_cache_len(s->kv, seq) : 0;
}

sift_status sift_session_rewind(sift_session *s, int seq, int64_t pos)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_rewind: session is NULL");
    if (seq < 0 || seq >= s->cfg.n_seq) return sift_set_error(SIFT_E_INVALID, "sift_session_rewind: no sequence %d", seq);
    sequence *q = &s->seqs[seq];
    const int64_t len = sift_kv_cache_len(s->kv, seq);
    if (pos < 0 || pos > len)
        return sift_set_error(SIFT_E_INVALID, "sift_session_rewind: position %lld outside 0 .. %lld", (long long)pos,
                              (long long)len);
    q->decode_steps = 0;
    TRY(sift_kv_cache_rewind(s->kv, seq, pos));
    for (uint32_t l = 0; l < s->m->hp.n_layer; l++) {
        seq_layer *sl = &q->layers[l];
        if (sl->mirror.k) sift_kv_mirror_update(&sl->mirror, pos, 0);
        int kept = 0;
        const int64_t qn = (int64_t)s->m->hp.n_head * s->m->hp.head_dim;
        for (int i = 0; i < sl->n_obs; i++)
            if (sl->obs_pos[i] < pos) {
                memmove(sl->obs_q + kept * qn, sl->obs_q + i * qn, (size_t)qn * sizeof(float));
                sl->obs_pos[kept++] = sl->obs_pos[i];
            }
        sl->n_obs = kept;
    }
    free_sequence_state(s, q);
    return make_policy_state(s, seq);
}

sift_status sift_session_set_policy(sift_session *s, sift_policy policy, int64_t sink, int64_t window, int64_t budget)
{
    const char *fn = "sift_session_set_policy";
    if (!s) return sift_set_error(SIFT_E_INVALID, "%s: session is NULL", fn);
    sift_session_config c = s->cfg;
    c.policy = policy;
    c.sink = sink;
    c.window = window;
    c.budget = budget;
    TRY(check_policy(&c, fn));
    for (int i = 0; i < s->cfg.n_seq; i++)
        if (sift_host_policy(policy) && sift_kv_cache_len(s->kv, i) > 0 && !s->seqs[i].layers[0].mirror.k)
            return sift_set_error(SIFT_E_INVALID, "%s: %s needs a mirror of the cache built since the start: create the session "
                                  "with eval_mode or this policy", fn, sift_policy_name(policy));
    for (int i = 0; i < s->cfg.n_seq; i++) free_sequence_state(s, &s->seqs[i]);
    s->cfg = c;
    sift_kv_cache_set_pinned(s->kv, sink);
    for (int i = 0; i < s->cfg.n_seq; i++) {
        sequence *q = &s->seqs[i];
        for (uint32_t l = 0; l < s->m->hp.n_layer && sift_host_policy(policy); l++)
            if (!q->layers[l].mirror.k)
                TRY(sift_kv_mirror_init(&q->layers[l].mirror, s->m->hp.n_head_kv, s->m->hp.head_dim, s->cfg.n_ctx, false));
        TRY(make_policy_state(s, i));
    }
    return SIFT_OK;
}

/* The reuse decided by q' keeps select's lists as they are; neighbour fetch's come from a list
 * made after select, which a skipped select would leave stale (docs/policies.md). */
static sift_status check_butler_reuse(float threshold, int neighbor_fetch, const char *fn)
{
    if (!(threshold >= -1.0f)) return sift_set_error(SIFT_E_INVALID, "%s: threshold %g on q' (-1 .. 1, or > 1: off)", fn, (double)threshold);
    if (threshold <= 1.0f && neighbor_fetch)
        return sift_set_error(SIFT_E_UNSUPPORTED, "%s: neighbour fetch with the interval decided by the query", fn);
    return SIFT_OK;
}

/* BUTLER's state starts over: each sequence's kept lists and checks. */
static sift_status restart_butler(sift_session *s, const sift_session_config *c, float threshold)
{
    for (int i = 0; i < s->cfg.n_seq; i++) free_sequence_state(s, &s->seqs[i]);
    s->cfg = *c;
    s->butler_reuse = threshold;
    for (int i = 0; i < s->cfg.n_seq; i++) TRY(make_policy_state(s, i));
    return SIFT_OK;
}

sift_status sift_session_set_butler(sift_session *s, int predict_interval, int neighbor_fetch)
{
    const char *fn = "sift_session_set_butler";
    if (!s) return sift_set_error(SIFT_E_INVALID, "%s: session is NULL", fn);
    sift_session_config c = s->cfg;
    c.predict_interval = predict_interval == 0 ? 1 : predict_interval;
    c.neighbor_fetch = neighbor_fetch != 0;
    TRY(check_policy(&c, fn));
    TRY(check_butler_reuse(s->butler_reuse, c.neighbor_fetch, fn));
    return restart_butler(s, &c, s->butler_reuse);
}

sift_status sift_session_set_butler_reuse(sift_session *s, float threshold)
{
    const char *fn = "sift_session_set_butler_reuse";
    if (!s) return sift_set_error(SIFT_E_INVALID, "%s: session is NULL", fn);
    TRY(check_butler_reuse(threshold, s->cfg.neighbor_fetch, fn));
    return restart_butler(s, &s->cfg, threshold > 1.0f ? SIFT_SEL_CACHE_OFF : threshold);
}

sift_status sift_session_layer_output(const sift_session *s, int layer, float *out)
{
    if (!s || !out) return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: null argument");
    if (!s->layer_out) return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: the session keeps no layer outputs");
    if (layer < 0 || layer >= (int)s->m->hp.n_layer || s->last_t == 0)
        return sift_set_error(SIFT_E_INVALID, "sift_session_layer_output: no layer %d output", layer);
    const size_t e = s->m->hp.n_embd;
    return sift_tensor_read(s->layer_out[layer], (size_t)s->last_row * e * sizeof(float), out, e * sizeof(float));
}

/* ---- the KV cache's synthetic contexts and figures ------------------------------------------------ */

sift_status sift_session_fill_synthetic(sift_session *s, int64_t n, uint64_t seed)
{
    return sift_session_fill_synthetic_seq(s, 0, n, seed);
}

sift_status sift_session_fill_synthetic_seq(sift_session *s, int seq, int64_t n, uint64_t seed)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_fill_synthetic: session is NULL");
    TRY(sift_kv_cache_fill_synthetic(s->kv, seq, n, seed)); /* checks seq */
    /* as after a prefill: the next decode step selects, so that no kept list (nor TokenButler's
     * staged window, which takes one row a step) outlives rows added without a decode step */
    s->seqs[seq].decode_steps = 0;
    s->seqs[seq].lists_kept = false;
    return SIFT_OK;
}

size_t sift_session_predictor_key_bytes(const sift_session *s) { return s ? sift_kv_cache_key_bytes(s->kv) : 0; }

size_t sift_session_kv_bytes(const sift_session *s) { return s ? sift_kv_cache_bytes(s->kv) : 0; }

size_t sift_session_kv_used_bytes(const sift_session *s) { return s ? sift_kv_cache_used_bytes(s->kv) : 0; }

sift_status sift_session_kv_pools(const sift_session *s, sift_kv_pool_info *out)
{
    if (!s || !out) return sift_set_error(SIFT_E_INVALID, "sift_session_kv_pools: null argument");
    sift_kv_cache_pools(s->kv, out);
    return SIFT_OK;
}

void sift_session_kv_move_times(const sift_session *s, sift_kv_move_times *out)
{
    if (!out) return;
    if (!s) {
        *out = (sift_kv_move_times){0};
        return;
    }
    sift_kv_cache_move_times(s->kv, out);
}

int64_t sift_session_steps_run_ahead(const sift_session *s) { return s ? s->steps_run_ahead : 0; }

void sift_session_ahead_times(const sift_session *s, sift_ahead_times *out)
{
    if (out) *out = s ? s->ahead_times : (sift_ahead_times){0};
}

sift_status sift_session_select_warm_stats(const sift_session *s, int layer, int64_t *hits, int64_t *misses)
{
    const char *fn = "sift_session_select_warm_stats";
    if (!s || !hits || !misses) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    if (layer < -1 || layer >= (int)s->m->hp.n_layer) return sift_set_error(SIFT_E_INVALID, "%s: no layer %d", fn, layer);
    *hits = *misses = 0;
    for (int i = 0; i < s->cfg.n_seq; i++)
        for (uint32_t l = 0; l < s->m->hp.n_layer; l++) {
            const sift_tensor *warm = s->seqs[i].layers[l].sel_warm;
            if (!warm || (layer >= 0 && (uint32_t)layer != l)) continue;
            const int64_t lists = warm->shape[0];
            int32_t *w = malloc(warm->nbytes); /* every list's words in one read */
            if (!w) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
            const sift_status st = sift_tensor_read(warm, 0, w, warm->nbytes);
            for (int64_t j = 0; st == SIFT_OK && j < lists; j++) {
                *hits += w[j * SIFT_SELECT_WARM_WORDS + SIFT_SELECT_WARM_HITS];
                *misses += w[j * SIFT_SELECT_WARM_WORDS + SIFT_SELECT_WARM_MISSES];
            }
            free(w);
            TRY(st);
        }
    return SIFT_OK;
}

sift_status sift_session_sel_cache_stats(const sift_session *s, int layer, int64_t *hits, int64_t *steps)
{
    if (!s || !hits || !steps) return sift_set_error(SIFT_E_INVALID, "sift_session_sel_cache_stats: null argument");
    if (layer < -1 || layer >= (int)s->m->hp.n_layer)
        return sift_set_error(SIFT_E_INVALID, "sift_session_sel_cache_stats: no layer %d", layer);
    *hits = *steps = 0;
    for (int i = 0; i < s->cfg.n_seq; i++)
        for (uint32_t l = 0; l < s->m->hp.n_layer; l++) {
            const sift_tensor *state = s->seqs[i].layers[l].sel_state;
            if (layer >= 0 && (uint32_t)layer != l) continue;
            *hits += s->seqs[i].layers[l].butler_reused;
            *steps += s->seqs[i].layers[l].butler_steps;
            if (!state) continue;
            float extra[SIFT_SEL_CACHE_EXTRA]; /* after the reference query: q (TokenSelect) or q' (BUTLER) */
            TRY(sift_tensor_read(state, (size_t)(state->shape[0] - SIFT_SEL_CACHE_EXTRA) * sizeof(float), extra, sizeof extra));
            *hits += (int64_t)extra[SIFT_SEL_CACHE_HITS];
            *steps += (int64_t)extra[SIFT_SEL_CACHE_STEPS];
        }
    return SIFT_OK;
}

/* ---- profiling ------------------------------------------------------------------------------------ */

sift_status sift_session_set_profiling(sift_session *s, int on)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_set_profiling: session is NULL");
    if (on) { /* a new profile; turning it off keeps the one taken for reading */
        memset(s->prof, 0, sizeof s->prof);
        s->n_prof = 0;
        s->prof_steps = 0;
    }
    s->profiling = on != 0;
    return SIFT_OK;
}

static prof_entry *prof_find(sift_session *s, const char *stage, sift_op op)
{
    for (int i = 0; i < s->n_prof; i++) /* the stages are static strings: most compare equal as pointers */
        if (s->prof[i].op == op && (s->prof[i].stage == stage || !strcmp(s->prof[i].stage, stage))) return &s->prof[i];
    return NULL;
}

void sift_profile_add(sift_session *s, const char *stage, sift_op op, double us, double bytes)
{
    const char *op_name = sift_op_name(op);
    prof_entry *e = prof_find(s, stage ? stage : op_name, op);
    if (!e && s->n_prof >= SIFT_PROF_ROWS - SIFT_OP_COUNT) { /* full: under the op alone (session.h) */
        stage = NULL;
        e = prof_find(s, op_name, op);
    }
    if (!stage) stage = op_name; /* an unlabelled node is its op's own stage */
    if (!e) {
        e = &s->prof[s->n_prof++];
        *e = (prof_entry){.stage = stage, .op = op};
    }
    e->nodes++;
    e->us += us;
    e->bytes += bytes;
}

/* Longer time first; equal times in the order of the names, so that the order is the same each run. */
static int op_by_time_descending(const void *pa, const void *pb)
{
    const sift_op_time *a = pa, *b = pb;
    if (a->us != b->us) return a->us > b->us ? -1 : 1;
    return strcmp(a->op, b->op);
}

static int stage_by_time_descending(const void *pa, const void *pb)
{
    const sift_stage_time *a = pa, *b = pb;
    if (a->us != b->us) return a->us > b->us ? -1 : 1;
    const int by_stage = strcmp(a->stage, b->stage);
    return by_stage ? by_stage : strcmp(a->op, b->op);
}

static sift_status check_profile_args(const char *fn, const sift_session *s, const void *out, int max, const int *n)
{
    if (!s || !n) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    if (max < 0) return sift_set_error(SIFT_E_INVALID, "%s: room for %d entries (0 or more)", fn, max);
    if (max > 0 && !out) return sift_set_error(SIFT_E_INVALID, "%s: out is NULL with room for %d entries", fn, max);
    return SIFT_OK;
}

sift_status sift_session_profile(const sift_session *s, sift_op_time *out, int max, int *n, int64_t *steps)
{
    TRY(check_profile_args("sift_session_profile", s, out, max, n));
    sift_op_time by_op[SIFT_OP_COUNT] = {0};
    for (int i = 0; i < s->n_prof; i++) { /* each op's stages added up */
        const prof_entry *e = &s->prof[i];
        by_op[e->op].nodes += e->nodes;
        by_op[e->op].us += e->us;
        by_op[e->op].bytes += e->bytes;
    }
    sift_op_time all[SIFT_OP_COUNT];
    int count = 0;
    for (int op = 0; op < SIFT_OP_COUNT; op++)
        if (by_op[op].nodes > 0) {
            all[count] = by_op[op];
            all[count++].op = sift_op_name((sift_op)op);
        }
    qsort(all, (size_t)count, sizeof *all, op_by_time_descending);
    for (int i = 0; i < count && i < max; i++) out[i] = all[i];
    *n = count;
    if (steps) *steps = s->prof_steps;
    return SIFT_OK;
}

sift_status sift_session_profile_stages(const sift_session *s, sift_stage_time *out, int max, int *n, int64_t *steps)
{
    TRY(check_profile_args("sift_session_profile_stages", s, out, max, n));
    sift_stage_time all[SIFT_PROF_ROWS];
    for (int i = 0; i < s->n_prof; i++) {
        const prof_entry *e = &s->prof[i];
        all[i] = (sift_stage_time){.stage = e->stage, .op = sift_op_name(e->op), .nodes = e->nodes, .us = e->us, .bytes = e->bytes};
    }
    qsort(all, (size_t)s->n_prof, sizeof *all, stage_by_time_descending);
    for (int i = 0; i < s->n_prof && i < max; i++) out[i] = all[i];
    *n = s->n_prof;
    if (steps) *steps = s->prof_steps;
    return SIFT_OK;
}
