/* What `sift eval` and `sift demo` share (tools/eval_runs.c): the options a run of policies
 * takes, a policy's run over a range of tokens with its figures, and the retrieval test sets. */
#ifndef SIFT_CLI_EVAL_H
#define SIFT_CLI_EVAL_H

#include "cli.h"

typedef struct eval_options {
    const char *model_path, *text_path, *retrieval_path, *plot_path;
    cli_policy_list pl;        /* the policies and their variants */
    sift_dtype predictor_keys; /* --butler-keys */
    int64_t kv_device_tokens;  /* --kv-offload's device pool in tokens (0: no offload) */
    bool v_only;               /* --kv-offload-v-only */
    sift_predictor *predictor;
    const int64_t *budgets;
    int n_budgets;
    int64_t sink, window, prefix, max_tokens, samples, skip, length;
    float sel_cache;
    float predict_threshold; /* butler:auto's threshold and longest interval where its entry sets none */
    int max_interval;
    bool json;
} eval_options;

/* One policy's run over tokens [from, n): each token fed, the next one scored. */
typedef struct {
    double nll_sum;
    int64_t scored, agree, correct, answers;
    double recall, err;
    int64_t quality_n, sc_hits, sc_steps;
    int64_t warm_hits, warm_misses; /* selections the top-k's warm start answered, and its fallbacks */
    double decode_s; /* wall time of the decode steps */
} run_result;

/* A retrieval sample: its text's tokens (BOS first) and which positions are answers. */
typedef struct {
    int32_t *ids;
    bool *is_answer;
    int64_t n, first_answer;
} sample;

/* The KV pools of the first session with offload, once (stderr). */
void eval_show_pools_once(const sift_session *s);
/* The session every policy runs in (dense prefill; eval mode), or one for an extrapolated policy. */
sift_session_config eval_session_config(const eval_options *o, int64_t n_ctx, bool extrapolate);
/* The session a policy runs in: the shared one (prefilled densely once), or a session of its own
 * prefilled to `from` (replacing the previous one in *own): for an extrapolated policy, keys
 * cached before RoPE and prefilled token by token; for butler with int8 keys, its projected keys
 * cached in int8. */
sift_status eval_session_for(const eval_options *o, int pi, int64_t k, sift_model *m, sift_session *shared,
                             const int32_t *ids, int64_t n_ctx, int64_t from, sift_session **own, sift_session **out);
/* Runs policy p (budget k) from position `from` of a session prefilled to `from`. */
sift_status eval_run_policy(sift_session *s, const eval_options *o, sift_policy p, int64_t k, const int32_t *ids,
                            int64_t from, int64_t n, int n_vocab, const int32_t *dense_top1, int32_t *top1_out,
                            const bool *is_answer, bool measure, run_result *r);
/* The samples of a retrieval test set at path (tools/retrieval/README.md): 0, or 1 after a message. */
int eval_load_samples(const char *who, const char *path, sift_model *m, const sift_model_info *info, sample **out, int *n_out);
void eval_free_samples(sample *v, int n);

#endif
