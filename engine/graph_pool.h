/* graph_pool.c: the context's reusable storage for graphs' own tensors (engine-private). */
#ifndef SIFT_GRAPH_POOL_H
#define SIFT_GRAPH_POOL_H

#include "engine.h"

typedef struct sift_graph_pool sift_graph_pool;

sift_status sift_graph_pool_create(sift_graph_pool **out);
/* Frees the pool and its buffers; every graph of the context is gone by then. */
void sift_graph_pool_destroy(sift_context *ctx, sift_graph_pool *p);
/* A buffer (an i32 tensor) of at least `bytes`, for one graph tensor, until given back. */
sift_status sift_graph_pool_take(sift_context *ctx, sift_graph_pool *p, size_t bytes, sift_tensor **buffer);
/* Gives back the n buffers of one graph at once (one giveback of the eviction's count). */
void sift_graph_pool_give(sift_context *ctx, sift_graph_pool *p, sift_tensor *const *buffers, int n);

#endif
