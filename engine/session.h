/* A session's state, shared by the files that run it (engine-private):
 *   session.c       creation, policies and the public calls;
 *   forward.c       one step's forward pass, layer by layer;
 *   session_host.c  the host's part of a step: mirrors, prompt observations, host policies' lists;
 *   quality.c       attention quality against dense (eval_mode).
 * The KV cache is a kv_cache (kv_cache.h) the session holds; the attention of each layer is built
 * by attention.c (sift_attn_append). */
#ifndef SIFT_SESSION_H
#define SIFT_SESSION_H

#include "kv_cache.h"
#include "model.h"
#include "policy.h"
#include "predictor.h"

/* Activations for up to `chunk` rows [chunk][width]; a step of T rows uses views of their first
 * T rows. */
enum {
    A_X0,   /* the residual stream [E] */
    A_X1,   /* the residual after attention [E] */
    A_XN,   /* a normed row [E] */
    A_Q,    /* queries [Hq * D] (before RoPE) */
    A_K,    /* keys [Hkv * D] (before RoPE) */
    A_V,    /* values [Hkv * D] */
    A_QR,   /* queries after RoPE [Hq * D] */
    A_KR,   /* keys after RoPE [Hkv * D] */
    A_ATT,  /* attention output [Hq * D] */
    A_O,    /* output projection [E] */
    A_GATE, /* [F] */
    A_UP,   /* [F] */
    A_ACT,  /* swiglu(gate, up) [F] */
    A_DOWN, /* [E] */
    A_COUNT
};

typedef struct seq_layer {
    sift_tensor *sel_state;     /* the Selection Cache's state (sift_attn_config): TokenSelect's on q, BUTLER's on q' */
    sift_tensor *sel_idx;       /* the index set it keeps [1][S + k + W]; BUTLER's lists [Hkv][S + k (+ k) + W] */
    sift_tensor *sel_warm;      /* the warm start of select's top-k, i32 [lists][SIFT_SELECT_WARM_WORDS] (TokenSelect, BUTLER) */
    int64_t butler_steps, butler_reused; /* BUTLER: full selections, and those the fixed interval reused */
    /* BUTLER under KV offload, the fixed interval (sift_butler_stages): the rows of the kept lists
     * copied to the device when they are chosen, K and V [Hkv][S + k + W][D] of the cache's type, so
     * that the steps reusing them read no host row (sift_attn_staging); NULL where not staged */
    sift_tensor *stage_k, *stage_v;
    sift_kv_mirror mirror;      /* host copy of the cache (host policies, eval_mode) */
    float *obs_q;               /* the last SIFT_POLICY_OBS prompt queries [OBS][Hq][D] and positions */
    int64_t obs_pos[SIFT_POLICY_OBS];
    int n_obs;
} seq_layer;

typedef struct sequence {
    seq_layer *layers;
    sift_tensor *host_idx;     /* lists written by host policies [Hkv * (S + k + W)] */
    sift_policy_state *pstate; /* host policies */
    int64_t decode_steps;      /* since the last prefill (BUTLER: steps 0, 1, 1 + I, ... select) */
    bool lists_kept;           /* BUTLER: sel_idx holds full lists the interval may reuse */
} sequence;

/* What a decode step does under BUTLER: select (the first step after prefill, and the interval's),
 * reuse the kept lists (the fixed interval's steps between selections), or check (the interval
 * decided by the query: the device compares each layer's q' with the one its lists were chosen
 * with, and selects or reuses). */
typedef enum { BUTLER_SELECT, BUTLER_REUSE, BUTLER_CHECK } butler_step;

/* The part of a step that belongs to one sequence: rows [row0, row0 + t) at positions pos0 ... */
typedef struct segment {
    int seq;
    butler_step butler;    /* decode under BUTLER */
    int64_t butler_shift;  /* BUTLER_REUSE: decode steps since the selection it reuses (1 ..); else 0 */
    int64_t row0, t, pos0;
    sift_tensor *attn_idx; /* decode: the index list its attention read (NULL: dense) */
    float *q_host;         /* decode under eval_mode: the layer's query, for the quality measure */
    int32_t *lists_host;   /* decode, host policies: the lists written, [Hkv][count] */
    int64_t count;
} segment;

typedef struct step {
    segment *seg;
    int n_seg;
    int64_t rows;
    bool prefill;
} step;

/* The profile's rows: the nodes of one op appended under one stage (sift_graph_set_stage; a node
 * without one counts under the stage named as its op), and their summed device time and bytes. A
 * step's stages make a few dozen (stage, op) pairs; past SIFT_PROF_ROWS - SIFT_OP_COUNT rows a
 * node of a new pair counts under its op's name, for which the last SIFT_OP_COUNT rows keep room. */
enum { SIFT_PROF_ROWS = 96 + SIFT_OP_COUNT };
typedef struct prof_entry {
    const char *stage; /* never NULL */
    sift_op op;
    int64_t nodes;
    double us, bytes;
} prof_entry;

struct sift_session {
    sift_model *m;
    sift_session_config cfg;
    /* BUTLER's threshold on q' (sift_session_set_butler_reuse): in [-1, 1] the device decides each
     * layer's reuse, cfg.predict_interval the longest a selection lasts; > 1: the fixed interval */
    float butler_reuse;
    kv_cache *kv;   /* every sequence's K and V, and TokenButler's projected keys */
    sequence *seqs;
    sift_tensor *act[A_COUNT];
    /* A one-row step's fused products (model.h: wqkv, w_gate_up): q, k, v before RoPE
     * [1][(Hq + 2 Hkv) * D], gate, up [1][2 F], and q, k after RoPE [1][(Hq + Hkv) * D] (one rope
     * node rotates both: they are adjacent in qkv_row) */
    sift_tensor *qkv_row, *gate_up_row, *qk_row;
    sift_tensor *ids, *xlast_norm, *logits;
    sift_tensor **layer_out; /* keep_layer_outputs: each layer's output [chunk][n_embd] */
    /* TokenButler (a predictor given): the activations [chunk][width] of the key projection (Hkv * d') and of the predictor: the
     * normed stream (E), fc1 (hidden), SiLU (hidden) and the latest producer's queries
     * (P * Hq * d'; the next producer runs after the last layer these serve). */
    sift_tensor *b_kp, *b_norm, *b_fc1, *b_act, *b_q;
    int64_t last_t;          /* rows of the last step */
    int64_t last_row;        /* the row whose layer outputs sift_session_layer_output reads */
    bool quality_off; /* sift_session_set_attention_quality(s, 0): eval_mode's decode steps measure nothing */
    double quality_recall, quality_err;
    int64_t quality_n;
    /* sift_session_set_profiling: while on, every graph runs timed and its nodes add to the entry
     * of their (stage, op) (sift_profile_add); prof_steps counts the steps that completed */
    bool profiling;
    int64_t prof_steps;
    int n_prof;
    prof_entry prof[SIFT_PROF_ROWS];
    /* The next decode step's graph, built and recorded while this step ran (forward.c: running
     * ahead), and the step it was built for: its segments [n_seq] (ahead_n_seg of them). run_ahead:
     * on unless SIFT_STEP_AHEAD=0. */
    bool run_ahead;
    int64_t steps_run_ahead; /* steps that ran the graph built ahead for them */
    sift_ahead_times ahead_times;
    sift_graph *ahead;
    segment *ahead_seg;
    int ahead_n_seg;
};

static inline bool sift_host_policy(sift_policy p)
{
    return p == SIFT_POLICY_H2O || p == SIFT_POLICY_SNAPKV || p == SIFT_POLICY_QUEST || p == SIFT_POLICY_ORACLE;
}

static inline bool sift_keeps_mirror(const sift_session *s) { return s->cfg.eval_mode || sift_host_policy(s->cfg.policy); }
/* Whether decode steps measure their attention quality against dense (eval_mode; engine/quality.c). */
static inline bool sift_measures_quality(const sift_session *s)
{
    return s->cfg.eval_mode && !s->cfg.extrapolate && !s->quality_off;
}

/* Whether a step runs layer l's q/k/v as one product: one row, and the weights fused (model.h). */
static inline bool sift_qkv_fused(const sift_session *s, const step *st, uint32_t l)
{
    return st->rows == 1 && s->m->layers[l].wqkv;
}

/* Where layer l's queries (keys: false) after RoPE start, for the step's rows from row0 on:
 * [t][Hq * D] (keys [t][Hkv * D]) at *byte_off in the tensor returned. A one-row step with fused
 * q/k/v keeps them in qk_row, q then k; other steps in act[A_QR] and act[A_KR]. */
static inline sift_tensor *sift_roped(const sift_session *s, const step *st, uint32_t l, bool queries, int64_t row0,
                                      size_t *byte_off)
{
    const int64_t hq = s->m->hp.n_head, hkv = s->m->hp.n_head_kv, d = s->m->hp.head_dim;
    if (sift_qkv_fused(s, st, l)) {
        *byte_off = queries ? 0 : (size_t)(hq * d) * sizeof(float);
        return s->qk_row;
    }
    *byte_off = (size_t)(row0 * (queries ? hq : hkv) * d) * sizeof(float);
    return s->act[queries ? A_QR : A_KR];
}

/* S + k + W: the longest list. */
static inline int64_t sift_max_count(const sift_session_config *c) { return c->sink + c->window + c->budget; }

/* session.c: adds a timed node of `op` appended under `stage` to the profile. */
void sift_profile_add(sift_session *s, const char *stage, sift_op op, double us, double bytes);

/* session.c: what the decode step after sg will do under BUTLER, from the sequence's state before
 * sg's step (the choice run_step will make once sg's step is done). */
butler_step sift_butler_next(const sift_session *s, const segment *sg);
/* Whether the device decides BUTLER's reuse by q' (sift_session_set_butler_reuse). */
static inline bool sift_butler_by_query(const sift_session *s) { return s->butler_reuse <= 1.0f; }
/* session.c: sg's butler_shift once its butler mode is set, from the sequence's decode steps
 * since its prefill (next: of the step after sg, as sift_butler_next). */
int64_t sift_butler_shift(const sift_session *s, const segment *sg, bool next);

/* Whether layer l's K/V rows of a BUTLER session's selections are staged on the device
 * (seq_layer.stage_k): the layer's K or V moves to host memory under KV offload, and the lists
 * may be reused: an interval > 1, fixed or the longest the query's decision lets a selection last
 * (without neighbour fetch, whose skipped entries a staged copy cannot tell from rows). */
bool sift_butler_stages(const sift_session *s, uint32_t l);
/* The same for a session of config c (sift_model_estimate's rule): staged or not, every layer
 * past the dense layer 0 alike (its V moves whatever kv_offload_v_only says), given whether the
 * pools offload. Who decides the reuse (sift_session_set_butler_reuse) does not matter, so a
 * session set to the query's decision later needs no more than the estimate said. */
bool sift_butler_staging_on(const sift_session_config *c, bool offloaded);

/* Device bytes of the staged rows of one sequence (every staged layer's K and V): layers x 2 x Hkv
 * x (S + k + W) x D x the K/V element size, 0 where nothing is staged (sift_butler_stages). */
size_t sift_butler_staging_bytes(const sift_session *s);

/* attention.c: a TokenButler layer's attention reading its staged rows (seq_layer.stage_k) instead
 * of the cache. The fixed interval: on a selection (gather), the lists' K and V rows are copied
 * into the staging rows in list order (kv_gather); on a reuse at `shift` steps after the
 * selection, only the step's own key and value (new_k, new_v f32 [1][Hkv][D], as written to the
 * cache) are written, into the window's slot of the oldest position, which has left the window:
 * the window's W rows are a ring. The interval decided by the query (the config's Selection
 * Cache check on q'), where the host knows neither whether a step reuses nor the ring's turn: the
 * copy of the lists is predicated on the check as select is, and the window's W rows, the newest
 * and on the device, are copied again every step into their columns [S + k, S + k + W) in order
 * (gather, shift, new_k and new_v unused). Then gather_attend reads the staging rows in the order
 * of the lists (sink, chosen, window by position), so that it sums what the paged attention sums,
 * in the same order. */
typedef struct sift_attn_staging {
    sift_tensor *k, *v;                 /* [Hkv][S + k + W][D], the cache's type */
    const sift_tensor *new_k, *new_v;   /* f32 [1][Hkv][D] */
    bool gather;                        /* the step selects: copy the lists' rows */
    int64_t shift;                      /* a reuse: steps since the selection (>= 1) */
} sift_attn_staging;
sift_status sift_attn_append_staged(sift_graph *g, const sift_attn_config *cfg, const sift_attn_staging *staging,
                                    const sift_tensor *q, const sift_tensor *k, const sift_tensor *v, sift_tensor *out,
                                    sift_tensor **indices_out);

/* forward.c: runs a step (its pages taken, its tokens in s->ids) and leaves the logits in s->logits. */
sift_status sift_forward(sift_session *s, step *st);

/* session_host.c */
sift_status sift_host_after_kv_write(sift_session *s, step *st, uint32_t l);
sift_status sift_host_after_step(sift_session *s, const step *st);

/* quality.c */
sift_status sift_quality_measure_layer(sift_session *s, step *st, uint32_t l);

#endif
