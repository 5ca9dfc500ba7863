/* The context's pool of storage for graphs' intermediates (engine/graph_pool.c), on every available
 * backend, through what a decode step does with it: a step's graph lends its buffers to the next
 * step's while it runs (sift_graph_lend_storage), then is destroyed.
 *   - lent whole: a graph of more intermediates than one step of a small model (LENT_MANY, as a
 *     batch of 16 sequences on 32 layers has) lends them all, and a graph of the same shapes built
 *     next takes exactly those buffers, none new (counted per buffer, the pool's age of a buffer
 *     once evicted a big graph's first buffers while it gave back its last);
 *   - mixed sizes: intermediates of several sizes, taken again in another order, each find a
 *     lent buffer that fits (the pool's buffers sorted by capacity);
 *   - kept while viewed: a lent buffer that no later graph takes is evicted after many graphs, but
 *     the graph that lent it still reads what it wrote there, and its destruction frees it (a
 *     freed buffer read here is what the address sanitizer run catches; it once crashed the batched
 *     decode of an 8B-shaped model on every backend). */
#include "engine.h"
#undef TRY /* testutil.h's, for straight-line cases */

#include "backend_filter.h"
#include "testutil.h"

enum {
    LENT_MANY = 700,      /* intermediates of the big graph */
    ROUNDS = 100,         /* graphs built and destroyed after a lend: more than graph_pool.c's EVICT_AFTER */
    KEPT_FLOATS = 1000,   /* the lent intermediate that is evicted */
    OTHER_FLOATS = 50000, /* the later graphs' intermediate: far from KEPT_FLOATS, so never its buffer */
};

static sift_graph *graph_a, *graph_b;

static void lent_whole(sift_context *ctx, const char *b)
{
    static sift_tensor *parent_a[LENT_MANY];
    TRY(sift_graph_create(ctx, &graph_a));
    for (int i = 0; i < LENT_MANY; i++) {
        sift_tensor *t = NULL;
        TRY(sift_graph_new_tensor(graph_a, SIFT_F32, 1, (int64_t[]){256}, "a", &t));
        parent_a[i] = t->parent;
    }
    sift_graph_lend_storage(graph_a);
    TRY(sift_graph_create(ctx, &graph_b));
    int taken_from_a = 0;
    for (int i = 0; i < LENT_MANY; i++) {
        sift_tensor *t = NULL;
        TRY(sift_graph_new_tensor(graph_b, SIFT_F32, 1, (int64_t[]){256}, "b", &t));
        bool found = false;
        for (int j = 0; j < LENT_MANY && !found; j++) found = parent_a[j] == t->parent;
        taken_from_a += found;
    }
    test_check(taken_from_a == LENT_MANY, b, "a graph of %d intermediates lends them all: the next graph takes %d of them",
               LENT_MANY, taken_from_a);
}

static void kept_while_viewed(sift_context *ctx, const char *b)
{
    float want[KEPT_FLOATS], got[KEPT_FLOATS];
    for (int i = 0; i < KEPT_FLOATS; i++) want[i] = (float)i * 0.5f - 7.0f;
    sift_tensor *kept = NULL;
    TRY(sift_graph_create(ctx, &graph_a));
    TRY(sift_graph_new_tensor(graph_a, SIFT_F32, 1, (int64_t[]){KEPT_FLOATS}, "kept", &kept));
    sift_tensor *buffer = kept->parent; /* the pool's buffer under it (a graph's own tensor takes no writes) */
    TRY(sift_tensor_write(buffer, 0, want, sizeof want));
    sift_graph_lend_storage(graph_a);
    for (int r = 0; r < ROUNDS; r++) {
        sift_tensor *t = NULL;
        TRY(sift_graph_create(ctx, &graph_b));
        TRY(sift_graph_new_tensor(graph_b, SIFT_F32, 1, (int64_t[]){OTHER_FLOATS}, "other", &t));
        sift_graph_destroy(graph_b);
        graph_b = NULL;
    }
    TRY(sift_tensor_read(buffer, 0, got, sizeof got));
    test_check(memcmp(want, got, sizeof want) == 0, b,
               "a lent intermediate no graph took in %d graphs still holds what its graph wrote", ROUNDS);
    sift_tensor *again = NULL; /* evicted: a graph of its size now gets another buffer */
    TRY(sift_graph_create(ctx, &graph_b));
    TRY(sift_graph_new_tensor(graph_b, SIFT_F32, 1, (int64_t[]){KEPT_FLOATS}, "again", &again));
    test_check(again->parent != buffer, b, "after %d graphs the pool no longer holds it", ROUNDS);
    sift_graph_destroy(graph_a); /* frees the evicted buffer */
    graph_a = NULL;
}

/* Intermediates of mixed sizes, taken in one order and again in another: each finds a buffer the
 * first graph lent, of at least its bytes and at most a quarter more (graph_pool.c's rule; the
 * pool keeps its buffers sorted by capacity and takes the smallest that fits), none twice. */
static void mixed_sizes(sift_context *ctx, const char *b)
{
    static const int64_t floats[] = {256, 40000, 300, 1000, 256, 1200, 5000, 300, 70000, 1000, 64, 9000};
    enum { N = (int)(sizeof floats / sizeof floats[0]) };
    sift_tensor *lent[N], *taken[N];
    TRY(sift_graph_create(ctx, &graph_a));
    for (int i = 0; i < N; i++) {
        sift_tensor *t = NULL;
        TRY(sift_graph_new_tensor(graph_a, SIFT_F32, 1, (int64_t[]){floats[i]}, "a", &t));
        lent[i] = t->parent;
    }
    sift_graph_lend_storage(graph_a);
    TRY(sift_graph_create(ctx, &graph_b));
    int reused = 0, fitting = 0, twice = 0;
    for (int i = N - 1; i >= 0; i--) { /* the other order */
        sift_tensor *t = NULL;
        TRY(sift_graph_new_tensor(graph_b, SIFT_F32, 1, (int64_t[]){floats[i]}, "b", &t));
        taken[i] = t->parent;
        const int64_t bytes = floats[i] * 4, cap = t->parent->shape[0] * 4;
        for (int j = 0; j < N; j++) reused += lent[j] == taken[i];
        fitting += cap >= bytes && cap - bytes <= bytes / 4 + 4096;
        for (int j = i + 1; j < N; j++) twice += taken[j] == taken[i];
    }
    test_check(reused == N && fitting == N && twice == 0, b,
               "%d intermediates of mixed sizes, in another order: %d take a lent buffer, %d one that fits, %d one taken already",
               N, reused, fitting, twice);
}

static void run_case(void (*fn)(sift_context *, const char *), const char *name, sift_context *ctx, const char *b)
{
    test_case_begin(name, b);
    if (!setjmp(case_end)) fn(ctx, b);
    sift_graph_destroy(graph_b);
    sift_graph_destroy(graph_a);
    graph_a = graph_b = NULL;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("SIFT_VULKAN_VALIDATION", "1", 0);
    for (int kind = 0; kind < SIFT_BACKEND_COUNT; kind++) {
        sift_context *ctx = test_context_open((sift_backend_kind)kind, "graph-pool", false);
        if (!ctx) continue;
        const char *b = sift_backend_kind_name((sift_backend_kind)kind);
        run_case(lent_whole, "lent whole", ctx, b);
        run_case(kept_while_viewed, "kept while viewed", ctx, b);
        run_case(mixed_sizes, "mixed sizes", ctx, b);
        test_context_done(ctx);
    }
    return test_summary("graph-pool", NULL);
}
