/* Engine-private declarations shared by the engine's own files (never by backends). */
#ifndef SIFT_ENGINE_H
#define SIFT_ENGINE_H

#include "backend.h"
#include "sift_testing.h" /* the engine defines its calls too */

const sift_backend_vtable *sift_context_vtable(const sift_context *ctx, void **be);
/* The context's lock, held around every call into its backend (sift.h: threads). */
void sift_context_lock(sift_context *ctx);
void sift_context_unlock(sift_context *ctx);
/* A monotonic clock in microseconds, for the host times the engine reports. */
double sift_now_us(void);
/* A message for ctx's log (sift_log, with the context named). */
void sift_log_to(sift_context *ctx, sift_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The device memory free now (the backend's memory_free), 0 where the backend cannot tell. */
uint64_t sift_context_free_memory(sift_context *ctx);
/* References that keep a context open: each tensor, graph and model holds one. */
void sift_context_retain(sift_context *ctx);
void sift_context_release(sift_context *ctx);
/* The bytes of a dense tensor of this dtype and shape, or SIFT_E_SHAPE / SIFT_E_INVALID naming why
 * the shape is impossible (a rank outside 1..SIFT_MAX_DIMS, a negative or overflowing dimension,
 * rows that are not whole blocks). */
sift_status sift_shape_bytes(sift_dtype dtype, int ndim, const int64_t *shape, size_t *nbytes);
/* Its pool of storage for graphs' intermediates (graph_pool.h). */
struct sift_graph_pool *sift_context_graph_pool(sift_context *ctx);

/* A view of parent (sift_tensor_view) that the graph owns and frees with itself: the views a graph
 * builder makes of its caller's tensors and of its own intermediates. */
sift_status sift_graph_view(sift_graph *g, const sift_tensor *parent, sift_dtype dtype, int ndim, const int64_t *shape,
                            size_t byte_offset, sift_tensor **out);

/* Appends a validated node (refusing an output that is also an input) and invalidates recordings.
 * The node carries the graph's current stage (sift_graph_set_stage), whatever n->stage says. */
sift_status sift_graph_push_node(sift_graph *g, const sift_node *n);

/* A step recorded while the one before it runs. sift_graph_prepare checks g as a compute would
 * and lets the backend plan and record it, without running it. sift_graph_submit starts an
 * untimed run and returns without waiting for it where the backend can (else it runs to the end);
 * sift_graph_wait waits for it (SIFT_OK at once when nothing is in flight), and
 * sift_graph_destroy waits first. Until the wait, only the backend may touch what the graph
 * writes; the outputs count as produced from the submit on, for the graphs built meanwhile. */
sift_status sift_graph_prepare(sift_graph *g);
sift_status sift_graph_submit(sift_graph *g);
sift_status sift_graph_wait(sift_graph *g);
/* Gives the pool buffers under g's intermediates back while g may still be in flight, so that the
 * next graph built takes them: safe because a backend runs graphs one after the other (backend.h,
 * graph_submit) and waits for a run in flight before any other use of the device. g keeps its
 * views, and its destruction gives nothing back twice. */
void sift_graph_lend_storage(sift_graph *g);

/* Labels every node appended from now on with `stage` (a static string the graph does not copy,
 * e.g. "qkv"; NULL: none), until the next call. The session's profile adds up device time per
 * stage and op (sift_session_profile_stages); running the graph ignores it. */
void sift_graph_set_stage(sift_graph *g, const char *stage);

/* Reads a caller's config under sift.h's struct_size scheme: dst holds the defaults (its
 * struct_size = size, this library's); the first struct_size bytes of given replace them. Fails
 * with SIFT_E_INVALID, naming fn, for a struct_size of 0, below min_size (the first released
 * size) or above size. */
sift_status sift_config_read(const void *given, void *dst, size_t min_size, size_t size, const char *fn);

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        sift_status s_ = (x);                                                                                          \
        if (s_ != SIFT_OK) return s_;                                                                                  \
    } while (0)

/* validate.c: each returns SIFT_OK or an error naming the op (op), the tensor's role and the numbers. */
sift_status sift_need_tensor(const sift_graph *g, const sift_tensor *t, const char *op, const char *role);
sift_status sift_need_dtype(const sift_tensor *t, sift_dtype want, const char *op, const char *role);
sift_status sift_need_rank(const sift_tensor *t, int ndim, const char *op, const char *role);
/* RoPE's parameters for rows of d values (every op that rotates checks them so): n_rot even in
 * 2 .. min(d, SIFT_MAX_HEAD_DIM), base in (1, 1e12], a known mode. */
sift_status sift_check_rope(const sift_rope_params *p, int64_t d, const char *op);
/* q f32 [Hq][D]; k (and v, if given) [Hkv][Ncap][D] f16/f32; D a multiple of 8 up to SIFT_MAX_HEAD_DIM; Hq % Hkv == 0. */
sift_status sift_check_qkv(const sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                           const char *op);
/* A 2-D output of the given type and shape. */
sift_status sift_check_out(const sift_graph *g, const sift_tensor *t, sift_dtype dtype, int64_t d0, int64_t d1,
                           const char *op, const char *role);
sift_status sift_check_scale(float scale, const char *op);

/* The bytes each op must move (the op table's bytes column), defined beside each constructor. */
#define SIFT_OP(id, name, min_src, max_src, flags) double sift_bytes_##name(const sift_node *n);
#include "ops.def"
#undef SIFT_OP

#endif
