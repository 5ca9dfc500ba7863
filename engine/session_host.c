/* The host's part of a step: the mirrors of the cache, the prompt queries the host policies
 * observe, and the lists they write before a layer's attention runs. */
#include "session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Copies rows [pos0, pos0 + t) of layer l of sequence seq from the cache into its mirror. */
static sift_status mirror_rows(sift_session *s, int seq, uint32_t l, int64_t pos0, int64_t t)
{
    sift_kv_mirror *mr = &s->seqs[seq].layers[l].mirror;
    if (mr->k) TRY(sift_kv_cache_read_rows(s->kv, seq, l, KV_K, pos0, t, mr->k, mr->cap));
    if (mr->v) TRY(sift_kv_cache_read_rows(s->kv, seq, l, KV_V, pos0, t, mr->v, mr->cap));
    sift_kv_mirror_update(mr, pos0, t);
    return SIFT_OK;
}

/* Keeps the last SIFT_POLICY_OBS prompt queries of a layer (for policies chosen after a rewind). */
static void keep_observations(seq_layer *sl, const float *q, int64_t pos0, int64_t t, int64_t qn)
{
    if (!sl->obs_q) return;
    for (int64_t i = t > SIFT_POLICY_OBS ? t - SIFT_POLICY_OBS : 0; i < t; i++) {
        if (sl->n_obs == SIFT_POLICY_OBS) { /* drop the oldest */
            memmove(sl->obs_q, sl->obs_q + qn, (size_t)((SIFT_POLICY_OBS - 1) * qn) * sizeof(float));
            memmove(sl->obs_pos, sl->obs_pos + 1, (SIFT_POLICY_OBS - 1) * sizeof(int64_t));
            sl->n_obs--;
        }
        memcpy(sl->obs_q + sl->n_obs * qn, q + i * qn, (size_t)qn * sizeof(float));
        sl->obs_pos[sl->n_obs++] = pos0 + i;
    }
}

/* After layer l's cache write: mirror the new rows; in prefill, observe the queries; in decode,
 * let a host policy write its lists, and under eval_mode keep the query for the quality measure. */
sift_status sift_host_after_kv_write(sift_session *s, step *st, uint32_t l)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const int64_t hq = hp->n_head, hkv = hp->n_head_kv, d = hp->head_dim, qn = hq * d;
    for (int i = 0; i < st->n_seg; i++) {
        segment *sg = &st->seg[i];
        sequence *q = &s->seqs[sg->seq];
        seq_layer *sl = &q->layers[l];
        if (sift_keeps_mirror(s)) TRY(mirror_rows(s, sg->seq, l, sg->pos0, sg->t));
        const bool want_q = st->prefill ? sl->obs_q != NULL || q->pstate != NULL : (q->pstate != NULL || sift_measures_quality(s));
        if (!want_q) continue;
        float *qh = malloc((size_t)(sg->t * qn) * sizeof *qh);
        if (!qh) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
        size_t q_off;
        const sift_tensor *qr = sift_roped(s, st, l, true, sg->row0, &q_off);
        sift_status e = sift_tensor_read(qr, q_off, qh, (size_t)(sg->t * qn) * sizeof(float));
        if (e == SIFT_OK && st->prefill) {
            keep_observations(sl, qh, sg->pos0, sg->t, qn);
            if (q->pstate) e = sift_policy_observe(q->pstate, (int)l, qh, sg->pos0, sg->t);
        } else if (e == SIFT_OK && q->pstate) {
            const sift_select_params sel = {.n_ctx = sg->pos0 + 1, .sink = s->cfg.sink, .window = s->cfg.window,
                                            .budget = s->cfg.budget};
            sg->count = sift_select_count(&sel);
            e = sift_policy_choose(q->pstate, (int)l, qh, &sl->mirror, &sel, 1.0f / sqrtf((float)d), sg->lists_host);
            if (e == SIFT_OK)
                e = sift_tensor_write(q->host_idx, 0, sg->lists_host, (size_t)(hkv * sg->count) * sizeof(int32_t));
        }
        if (e == SIFT_OK && !st->prefill && sift_measures_quality(s)) {
            free(sg->q_host);
            sg->q_host = qh;
            qh = NULL;
        }
        free(qh);
        TRY(e);
    }
    return SIFT_OK;
}

/* After a step that ran as one graph: bring the mirrors up to date. */
sift_status sift_host_after_step(sift_session *s, const step *st)
{
    for (int i = 0; i < st->n_seg && sift_keeps_mirror(s); i++)
        for (uint32_t l = 0; l < s->m->hp.n_layer; l++)
            TRY(mirror_rows(s, st->seg[i].seq, l, st->seg[i].pos0, st->seg[i].t));
    return SIFT_OK;
}
