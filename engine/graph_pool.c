/* The storage of graphs' own tensors (sift_graph_new_tensor), kept by the context from one graph to
 * the next. A decode step builds and destroys a graph per token; allocating its intermediates (the
 * scores, votes and index lists of every layer) anew each time, zeroed, and on a GPU with a
 * synchronization each, cost milliseconds a step. A graph tensor is instead a view of a buffer
 * taken from the pool: the smallest free one of at least its bytes and at most a quarter more
 * (a context that grows by a token a step reuses its buffers for many steps), else a new one of
 * about an eighth more. A graph's buffers go back together when it is destroyed, or when the next
 * graph is built while it runs (sift_graph_lend_storage): one giveback. A buffer no graph has taken
 * for EVICT_AFTER givebacks is freed, as are all with the context. Givebacks are counted per graph,
 * not per buffer: counted per buffer, a graph of more buffers than the limit (a batch of 16 on 32
 * layers) evicted its own first buffers as it gave back its last, every step.
 *
 * A buffer lent while its graph runs is still viewed by that graph's tensors: eviction drops the
 * pool's reference only, and the last view frees it (free_buffer).
 *
 * A taken buffer is not zeroed: a graph's tensors are written by the nodes that produce them before
 * any node reads them (sift_graph_compute refuses a graph where that is not so).
 *
 * The buffers do not hold a reference to their context (the pool belongs to it): the pool creates
 * them as tensors, gives the reference back at once, and frees them through the backend. */
#include "graph_pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { EVICT_AFTER = 8 };

typedef struct pool_buffer {
    sift_tensor *t; /* an i32 tensor of cap bytes */
    size_t cap;
    bool busy;
    uint64_t last_use; /* the giveback count when it was last given back */
} pool_buffer;

struct sift_graph_pool {
    pthread_mutex_t lock; /* graphs of several sessions on one context are built on several threads */
    pool_buffer *buf;     /* sorted by capacity */
    int n, cap;
    uint64_t givebacks;
};

sift_status sift_graph_pool_create(sift_graph_pool **out)
{
    sift_graph_pool *p = calloc(1, sizeof *p);
    if (!p) return sift_set_error(SIFT_E_NOMEM, "graph pool: out of memory");
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return sift_set_error(SIFT_E_NOMEM, "graph pool: no mutex");
    }
    *out = p;
    return SIFT_OK;
}

/* Drops the pool's reference to a buffer (its tensor holds no context reference) and frees it,
 * unless a graph's tensors still view it: then the last of them frees it (sift_tensor_destroy), and
 * releases the context reference that a tensor owning storage holds, taken here for it. */
static void free_buffer(sift_context *ctx, sift_tensor *t)
{
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(ctx, &be);
    sift_context_lock(ctx);
    const bool last = --t->refs == 0;
    if (last)
        vt->tensor_free(be, t);
    else
        sift_context_retain(ctx);
    sift_context_unlock(ctx);
    if (last) free(t);
}

void sift_graph_pool_destroy(sift_context *ctx, sift_graph_pool *p)
{
    if (!p) return;
    for (int i = 0; i < p->n; i++) free_buffer(ctx, p->buf[i].t); /* none is busy: every graph has gone */
    free(p->buf);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* The capacity a new buffer gets: bytes rounded up to an eighth of its power of two (at least 256). */
static size_t capacity_for(size_t bytes)
{
    size_t top = 256;
    while (top <= bytes / 2) top *= 2; /* top: the largest power of two <= bytes (or 256) */
    const size_t step = top / 8 > 256 ? top / 8 : 256;
    return (bytes + step - 1) / step * step;
}

/* The first of the pool's buffers (sorted by capacity) whose capacity is at least bytes. */
static int first_at_least(const sift_graph_pool *p, size_t bytes)
{
    int lo = 0, hi = p->n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (p->buf[mid].cap < bytes)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

sift_status sift_graph_pool_take(sift_context *ctx, sift_graph_pool *p, size_t bytes, sift_tensor **out)
{
    *out = NULL;
    pthread_mutex_lock(&p->lock);
    /* the smallest free buffer of at least bytes and at most a quarter more: the buffers are sorted
     * by capacity, so a take passes over only the busy ones of about its size (a step's layers take
     * several of each), not the whole pool (a thousand buffers for a batch's graph) */
    for (int i = first_at_least(p, bytes); i < p->n && p->buf[i].cap - bytes <= bytes / 4 + 4096; i++)
        if (!p->buf[i].busy) {
            p->buf[i].busy = true;
            *out = p->buf[i].t;
            break;
        }
    pthread_mutex_unlock(&p->lock);
    if (*out) return SIFT_OK;

    const size_t cap = capacity_for(bytes);
    if (cap / 4 > (size_t)INT64_MAX) return sift_set_error(SIFT_E_LIMIT, "graph pool: a tensor of %zu bytes", bytes);
    sift_tensor *t = NULL;
    TRY(sift_tensor_create(ctx, SIFT_I32, 1, (int64_t[]){(int64_t)(cap / 4)}, &t));
    sift_context_release(ctx); /* the pool's buffers do not keep their context open */
    pthread_mutex_lock(&p->lock);
    if (p->n == p->cap) {
        const int ncap = p->cap ? 2 * p->cap : 64;
        pool_buffer *nb = realloc(p->buf, (size_t)ncap * sizeof *nb);
        if (!nb) {
            pthread_mutex_unlock(&p->lock);
            free_buffer(ctx, t);
            return sift_set_error(SIFT_E_NOMEM, "graph pool: out of memory");
        }
        p->buf = nb;
        p->cap = ncap;
    }
    const int at = first_at_least(p, cap); /* kept sorted by capacity */
    memmove(&p->buf[at + 1], &p->buf[at], (size_t)(p->n - at) * sizeof *p->buf);
    p->buf[at] = (pool_buffer){.t = t, .cap = cap, .busy = true, .last_use = p->givebacks};
    p->n++;
    pthread_mutex_unlock(&p->lock);
    *out = t;
    return SIFT_OK;
}

static int compare_ptr(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)*(sift_tensor *const *)a, y = (uintptr_t)*(sift_tensor *const *)b;
    return (x > y) - (x < y);
}

/* Whether t is among the n sorted tensors ts. */
static bool among(sift_tensor *const *ts, int n, const sift_tensor *t)
{
    return bsearch(&t, ts, (size_t)n, sizeof *ts, compare_ptr) != NULL;
}

void sift_graph_pool_give(sift_context *ctx, sift_graph_pool *p, sift_tensor *const *ts, int n)
{
    sift_tensor *evict[8];
    int n_evict = 0;
    /* a batch's graph gives back about a thousand buffers to a pool of as many: sorted, each of the
     * pool's is looked up in log time, not by a scan of the given ones */
    sift_tensor **sorted = n > 1 ? malloc((size_t)n * sizeof *sorted) : NULL;
    if (sorted) {
        memcpy(sorted, ts, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, compare_ptr);
    }
    pthread_mutex_lock(&p->lock);
    const uint64_t now = ++p->givebacks;
    for (int i = 0; i < p->n; i++) {
        pool_buffer *b = &p->buf[i];
        bool given = false;
        if (sorted)
            given = among(sorted, n, b->t);
        else /* one buffer, or no memory to sort: a scan */
            for (int j = 0; j < n && !given; j++) given = ts[j] == b->t;
        if (given) {
            b->busy = false;
            b->last_use = now;
        }
    }
    for (int i = 0; i < p->n; i++) {
        pool_buffer *b = &p->buf[i];
        if (!b->busy && now - b->last_use > EVICT_AFTER && n_evict < 8) { /* removed in place: the order stays */
            evict[n_evict++] = b->t;
            memmove(b, b + 1, (size_t)(p->n - i - 1) * sizeof *b);
            p->n--;
            i--;
        }
    }
    pthread_mutex_unlock(&p->lock);
    free(sorted);
    for (int i = 0; i < n_evict; i++) free_buffer(ctx, evict[i]);
}
