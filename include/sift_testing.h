/* sift — calls for the library's own tests and benchmarks.
 *
 * Not part of the stable API: these may change or go in any release, and this header is not
 * installed. They reach inside a session or a graph (a layer's output, the bytes a node moves,
 * attention quality against dense), fill a cache with values no model computed, or count
 * validation-layer messages, which programs embedding the library have no use for.
 */
#ifndef SIFT_TESTING_H
#define SIFT_TESTING_H

#include "sift.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Vulkan with SIFT_VULKAN_VALIDATION=1 in the environment loads the Khronos validation layer
 * (context creation fails if it is not installed), prints each message it reports to stderr and
 * counts them here. 0 on other backends. */
SIFT_API int64_t sift_context_validation_messages(const sift_context *ctx);

/* The bytes a node must read and write at least: the basis of effective bandwidth figures. */
SIFT_API double sift_graph_node_bytes(const sift_graph *g, int node);

/* For benchmarks of decode at long context without its prefill: advances sequence 0 by n tokens
 * whose cached K/V rows are pseudo-random values (what the model then computes is meaningless). */
SIFT_API sift_status sift_session_fill_synthetic(sift_session *s, int64_t n, uint64_t seed);
/* The same for sequence seq (0 .. n_seq - 1), to time batched decode (sift_session_decode_batch) at
 * long context. */
SIFT_API sift_status sift_session_fill_synthetic_seq(sift_session *s, int seq, int64_t n, uint64_t seed);

/* The decode steps that ran the graph built for them while the step before them ran (running
 * ahead: the session builds the next step's graph as it predicts it, one position on; a step
 * other than predicted builds its own). 0 where SIFT_STEP_AHEAD=0 was set when s was created. */
SIFT_API int64_t sift_session_steps_run_ahead(const sift_session *s);
/* Where the host's time went in the decode steps that ran ahead so far (each step counts, whether
 * its own graph was built ahead or not), in microseconds summed over `steps`: submitting the step,
 * building and recording the next one meanwhile, and waiting for the device after that. Of
 * build_us, graph_us is the engine's building of the next step's graph and prepare_us the
 * backend's planning and recording of it (sift_graph_prepare); the rest is the graph's creation
 * and its storage lent from the running one. */
typedef struct sift_ahead_times {
    int64_t steps;
    double submit_us, build_us, wait_us;
    double graph_us, prepare_us;
} sift_ahead_times;
SIFT_API void sift_session_ahead_times(const sift_session *s, sift_ahead_times *out);

/* KV offload's page moves since the session began (sift_kv_pool_info.pages_moved counts them
 * too): each a page's rows of every layer and family copied from the device pool to a host page,
 * timed on the host from the start of the copies to their end, and the bytes copied. */
typedef struct sift_kv_move_times {
    int64_t moves;
    double us;
    double bytes;
} sift_kv_move_times;
SIFT_API void sift_session_kv_move_times(const sift_session *s, sift_kv_move_times *out);

/* The output (residual stream) of layer `layer` for the last token of the last eval, into
 * out[n_embd]. Needs sift_session_config.keep_layer_outputs. */
SIFT_API sift_status sift_session_layer_output(const sift_session *s, int layer, float *out);

/* sift_session_config.eval_mode: the mean, over decode steps, layers and query heads since the
 * session began, of the dense attention mass recalled by the attended set and of
 * |o - o_dense| / |o_dense|; *n counts the (step, layer, head) triples. */
SIFT_API sift_status sift_session_attention_quality(const sift_session *s, double *recall, double *rel_err, int64_t *n);
/* Under eval_mode, whether the following decode steps measure their attention quality (on when the
 * session is created). The measure cuts each step's graph after every layer and reads the layer's
 * query and lists back, so a caller that needs only the tokens (retrieval accuracy) turns it off:
 * then a step whose policy runs on the device is one graph, as without eval_mode. Turning it on
 * outside eval_mode is an error; turning it off there does nothing. */
SIFT_API sift_status sift_session_set_attention_quality(sift_session *s, int on);

/* One stage of the profiled steps (sift_session_set_profiling, sift.h), per op: the nodes of op
 * that the code building the step appended under stage, their summed device time in microseconds
 * and the bytes they must move at least (bytes / us / 1e3: GB/s). Stages name the parts of a step
 * (engine/forward.c): "embed", "attn_norm", "qkv", "rope", "kv_write", "predictor_keys",
 * "attention" (every node of the attention builder: score, vote, select, gather_attend, ...), "o",
 * "residual", "ffn_norm", "gate_up", "swiglu", "down", "predictor", "final_norm", "logits"; a node
 * of no stage counts under the stage named as its op. stage and op are static strings. */
typedef struct sift_stage_time {
    const char *stage;
    const char *op;
    int64_t nodes;
    double us;
    double bytes;
} sift_stage_time;
/* The profile per (stage, op), as sift_session_profile gives it per op (which adds up these rows
 * by op): up to max rows into out (NULL when max is 0), longest time first (equal times by stage,
 * then op); *n gets how many there are, which may exceed max; *steps (when not NULL) the steps
 * profiled. */
SIFT_API sift_status sift_session_profile_stages(const sift_session *s, sift_stage_time *out, int max, int *n,
                                                 int64_t *steps);

#ifdef __cplusplus
}
#endif
#endif
