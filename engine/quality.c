/* Attention quality against dense under eval_mode: after each layer's attention, its recall of
 * dense attention's mass and its output error, from the host mirror (policy.c's
 * sift_attention_quality), summed over the session. */
#include "session.h"

#include <math.h>
#include <stdlib.h>

/* eval_mode, after layer l's attention ran: its quality against dense, from the mirror. */
sift_status sift_quality_measure_layer(sift_session *s, step *st, uint32_t l)
{
    const sift_gguf_hparams *hp = &s->m->hp;
    const float scale = 1.0f / sqrtf((float)hp->head_dim);
    for (int i = 0; i < st->n_seg; i++) {
        segment *sg = &st->seg[i];
        const sift_kv_mirror *mr = &s->seqs[sg->seq].layers[l].mirror;
        if (!sg->q_host || !mr->v) continue;
        int64_t n_lists = 1, count = sg->pos0 + 1;
        int32_t *lists = NULL;
        if (sg->attn_idx) {
            n_lists = sift_tensor_dim(sg->attn_idx, 0);
            count = sift_tensor_dim(sg->attn_idx, 1);
            lists = malloc((size_t)(n_lists * count + 1) * sizeof *lists);
            if (!lists) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
            sift_status e = sift_tensor_read(sg->attn_idx, 0, lists, (size_t)(n_lists * count) * sizeof *lists);
            if (e != SIFT_OK) {
                free(lists);
                return e;
            }
        } else {
            lists = malloc((size_t)count * sizeof *lists);
            if (!lists) return sift_set_error(SIFT_E_NOMEM, "session: out of memory");
            for (int64_t j = 0; j < count; j++) lists[j] = (int32_t)j;
        }
        sift_attention_quality(sg->q_host, (int)hp->n_head, mr, lists, n_lists, count, scale, &s->quality_recall,
                               &s->quality_err);
        s->quality_n += hp->n_head;
        free(lists);
    }
    return SIFT_OK;
}

sift_status sift_session_attention_quality(const sift_session *s, double *recall, double *rel_err, int64_t *n)
{
    if (!s || !recall || !rel_err || !n) return sift_set_error(SIFT_E_INVALID, "sift_session_attention_quality: null argument");
    if (!s->cfg.eval_mode) return sift_set_error(SIFT_E_INVALID, "sift_session_attention_quality: the session is not in eval_mode");
    *n = s->quality_n;
    *recall = s->quality_n ? s->quality_recall / (double)s->quality_n : 0.0;
    *rel_err = s->quality_n ? s->quality_err / (double)s->quality_n : 0.0;
    return SIFT_OK;
}

sift_status sift_session_set_attention_quality(sift_session *s, int on)
{
    if (!s) return sift_set_error(SIFT_E_INVALID, "sift_session_set_attention_quality: null session");
    if (on && !s->cfg.eval_mode)
        return sift_set_error(SIFT_E_INVALID, "sift_session_set_attention_quality: the session is not in eval_mode");
    if (s->quality_off == !on) return SIFT_OK;
    s->quality_off = !on;
    /* the graph built ahead for the next step has (or lacks) the measure's cuts */
    sift_graph_destroy(s->ahead);
    s->ahead = NULL;
    return SIFT_OK;
}
