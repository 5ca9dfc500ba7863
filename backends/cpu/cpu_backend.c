/* The CPU backend: the plain reference of every op and the oracle of every test.
 * Straight loops, f32 accumulation, softmax with the running max subtracted (SPEC §3). */
#include "cpu_ops.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the thread pool (cpu_ops.h) ----------------------------------------------------------- */

struct cpu_backend;

typedef struct cpu_worker {
    struct cpu_backend *be;
    int index; /* 1 .. n_threads - 1 */
    /* The generation when the worker was started: a job posted before the thread first takes
     * the lock is still new to it (reading the generation in the thread would miss that job,
     * and the caller would wait for it forever). */
    unsigned started_at;
    pthread_t thread;
} cpu_worker;

struct cpu_backend {
    int n_threads;          /* threads that run a parallel op, the calling thread included */
    cpu_worker *workers;    /* n_threads - 1 */
    float **scratch;        /* n_threads buffers of scratch_len floats */
    size_t scratch_len;
    /* The scratch array of the pool of one thread: it needs nothing allocated, so a pool that could
     * not start falls back to it and the backend still computes and is destroyed as before. */
    float *scratch_one[1];
    /* The current job, published under lock with a new generation; the workers take its items
     * from `next`. The calling thread waits until `busy` (workers still in the job) is 0. */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    unsigned generation;
    int busy;
    bool quit;
    cpu_task task;
    void *arg;
    int64_t n_items;
    atomic_llong next;
};

/* Takes items of the current job until none is left. */
static void run_items(cpu_backend *be, cpu_task task, void *arg, int64_t n_items, int thread)
{
    for (;;) {
        const int64_t i = atomic_fetch_add(&be->next, 1);
        if (i >= n_items) return;
        task(arg, i, thread);
    }
}

static void *worker_main(void *p)
{
    const cpu_worker *w = p;
    cpu_backend *be = w->be;
    pthread_mutex_lock(&be->lock);
    unsigned seen = w->started_at;
    for (;;) {
        while (!be->quit && be->generation == seen) pthread_cond_wait(&be->wake, &be->lock);
        if (be->quit) break;
        seen = be->generation;
        const cpu_task task = be->task;
        void *arg = be->arg;
        const int64_t n_items = be->n_items;
        pthread_mutex_unlock(&be->lock);
        run_items(be, task, arg, n_items, w->index);
        pthread_mutex_lock(&be->lock);
        if (--be->busy == 0) pthread_cond_signal(&be->done);
    }
    pthread_mutex_unlock(&be->lock);
    return NULL;
}

void cpu_parallel_for(cpu_backend *be, int64_t n_items, double work, cpu_task task, void *arg)
{
    if (be->n_threads == 1 || n_items < 2 || work < CPU_MIN_PARALLEL_WORK) {
        for (int64_t i = 0; i < n_items; i++) task(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&be->lock);
    be->task = task;
    be->arg = arg;
    be->n_items = n_items;
    atomic_store(&be->next, 0);
    be->busy = be->n_threads - 1;
    be->generation++;
    pthread_cond_broadcast(&be->wake);
    pthread_mutex_unlock(&be->lock);
    run_items(be, task, arg, n_items, 0);
    pthread_mutex_lock(&be->lock);
    while (be->busy > 0) pthread_cond_wait(&be->done, &be->lock);
    pthread_mutex_unlock(&be->lock);
}

sift_status cpu_reserve(cpu_backend *be, size_t floats)
{
    if (floats <= be->scratch_len) return SIFT_OK;
    for (int i = 0; i < be->n_threads; i++) {
        float *p = realloc(be->scratch[i], floats * sizeof(float));
        if (!p) return sift_set_error(SIFT_E_NOMEM, "cpu: out of memory for %zu scratch floats", floats);
        be->scratch[i] = p;
    }
    be->scratch_len = floats;
    return SIFT_OK;
}

float *cpu_scratch(cpu_backend *be, int thread) { return be->scratch[thread]; }

/* Joins the workers and frees the scratch buffers: the pool of one thread, nothing allocated. */
static void pool_stop(cpu_backend *be)
{
    pthread_mutex_lock(&be->lock);
    be->quit = true;
    pthread_cond_broadcast(&be->wake);
    pthread_mutex_unlock(&be->lock);
    for (int i = 0; i < be->n_threads - 1; i++) pthread_join(be->workers[i].thread, NULL);
    for (int i = 0; i < be->n_threads; i++) free(be->scratch[i]);
    if (be->scratch != be->scratch_one) free(be->scratch);
    free(be->workers);
    be->workers = NULL;
    be->scratch_one[0] = NULL;
    be->scratch = be->scratch_one;
    be->scratch_len = 0;
    be->n_threads = 1;
    be->quit = false;
}

/* Replaces the pool with one of n threads. The arrays are allocated before the pool stops, so where
 * they cannot be the pool stays as it was; where a thread cannot start the pool is left one thread.
 * Either way the backend computes and is destroyed as before. */
static sift_status pool_start(cpu_backend *be, int n)
{
    float **scratch = NULL;
    cpu_worker *workers = NULL;
    if (n > 1) {
        scratch = calloc((size_t)n, sizeof *scratch);
        workers = calloc((size_t)n - 1, sizeof *workers);
        if (!scratch || !workers) {
            free(scratch);
            free(workers);
            return sift_set_error(SIFT_E_NOMEM, "cpu: out of memory for %d threads (still computing with %d)", n, be->n_threads);
        }
    }
    pool_stop(be);
    if (n == 1) return SIFT_OK;
    be->scratch = scratch;
    be->workers = workers;
    for (int i = 0; i < n - 1; i++) {
        be->workers[i] = (cpu_worker){.be = be, .index = i + 1, .started_at = be->generation};
        if (pthread_create(&be->workers[i].thread, NULL, worker_main, &be->workers[i]) != 0) {
            pool_stop(be);
            return sift_set_error(SIFT_E_UNAVAILABLE, "cpu: cannot start thread %d of %d (computing with 1 now)", i + 2, n);
        }
        be->n_threads = i + 2; /* pool_stop joins the workers started so far */
    }
    return SIFT_OK;
}

/* The address of logical row `pos` of KV head `g` (paged or not), or NULL where the row is absent:
 * the one place that knows where a K/V row lives. */
void *cpu_kv_row_addr(const sift_tensor *t, int64_t g, int64_t pos)
{
    if (pos < 0 || pos >= t->shape[1]) return NULL;
    int64_t row = sift_kv_phys_row(t, t->pages ? cpu_data(t->pages) : NULL, pos);
    if (row < 0) return NULL;
    size_t off;
    const sift_tensor *storage = sift_kv_row_storage(t, g, row, &off);
    return (char *)cpu_data(storage) + off;
}

/* Reads row `pos` of KV head `g` as f32; false (and zeros) where the row is absent. A row of an
 * i8 cache is D - 4 values: q[i] * m / 127, with m in its last 4 bytes. */
static bool kv_row(const sift_tensor *t, int64_t g, int64_t pos, float *dst)
{
    const int64_t d = t->shape[2] - sift_key_row_extra(t->dtype);
    const void *src = cpu_kv_row_addr(t, g, pos);
    if (!src) {
        memset(dst, 0, (size_t)d * sizeof(float));
        return false;
    }
    if (t->dtype == SIFT_I8) {
        const int8_t *qv = src;
        float m;
        memcpy(&m, qv + d, sizeof m);
        for (int64_t i = 0; i < d; i++) dst[i] = (float)qv[i] * (m / 127.0f);
    } else if (t->dtype == SIFT_F32) {
        memcpy(dst, src, (size_t)d * sizeof(float));
    } else {
        const uint16_t *h = src;
        for (int64_t i = 0; i < d; i++) dst[i] = sift_half_to_float(h[i]);
    }
    return true;
}

/* Candidate positions per item of score. */
enum { SCORE_POSITIONS = 256 };

/* s[h][j] = scale * sift_dot_f32(q[h], K[g(h)][begin + j]) for KV head g = item % hkv and the
 * block item / hkv of positions; each K row is read once for its group of heads. score writes
 * every head's score; score_max only their max, u[g][j]. */
CPU_HOT_LOOP static void score_block(void *arg, int64_t item, int thread)
{
    (void)thread;
    const node_job *job = arg;
    const sift_node *n = job->n;
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const int64_t hq = q->shape[0], hkv = k->shape[0], d = q->shape[1], m = n->p.end - n->p.begin;
    const int64_t group = hq / hkv, g = item % hkv, j0 = item / hkv * SCORE_POSITIONS;
    const int64_t j1 = j0 + SCORE_POSITIONS < m ? j0 + SCORE_POSITIONS : m;
    const bool max_only = n->op == SIFT_OP_SCORE_MAX;
    float *s = cpu_data(n->dst);
    float row[SIFT_MAX_HEAD_DIM];
    for (int64_t j = j0; j < j1; j++) {
        kv_row(k, g, n->p.begin + j, row);
        float mx = -INFINITY;
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
            const float sc = n->p.scale * sift_dot_f32((const float *)cpu_data(q) + h * d, row, d);
            if (max_only) mx = fmaxf(mx, sc);
            else s[h * m + j] = sc;
        }
        if (max_only) s[g * m + j] = mx;
    }
}

/* score and score_max. */
static sift_status cpu_score(cpu_backend *be, const sift_node *n)
{
    const int64_t hq = n->src[0]->shape[0], hkv = n->src[1]->shape[0], d = n->src[0]->shape[1];
    const int64_t m = n->p.end - n->p.begin;
    node_job job = {.be = be, .n = n, .blocks = (m + SCORE_POSITIONS - 1) / SCORE_POSITIONS};
    cpu_parallel_for(be, hkv * job.blocks, (double)hq * (double)m * (double)d, score_block, &job);
    return SIFT_OK;
}

/* SOFTMAX_SUM: v[j] = sum_h softmax_j(s[h][j]).  KVHEAD_MAX: u[g][j] = max over g's heads of s[h][j]. */
static sift_status cpu_vote(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_tensor *sc = n->src[0];
    const int64_t hq = sc->shape[0], m = sc->shape[1];
    const float *s = cpu_data(sc);
    float *v = cpu_data(n->dst);
    if (n->p.vote == SIFT_VOTE_SOFTMAX_SUM) {
        for (int64_t j = 0; j < m; j++) v[j] = 0.0f;
        for (int64_t h = 0; h < hq; h++) {
            const float *sh = s + h * m;
            float mx = -INFINITY;
            for (int64_t j = 0; j < m; j++) mx = fmaxf(mx, sh[j]);
            /* the denominator in double: a million f32 additions in a row drift by ~1e-3 (measured at
             * N = 1M against the GPUs' tree sums), the reference must not */
            double l = 0.0;
            for (int64_t j = 0; j < m; j++) l += (double)expf(sh[j] - mx);
            for (int64_t j = 0; j < m; j++) v[j] += (float)((double)expf(sh[j] - mx) / l);
        }
    } else {
        const int64_t hkv = n->dst->shape[0], group = hq / hkv;
        for (int64_t g = 0; g < hkv; g++)
            for (int64_t j = 0; j < m; j++) {
                float mx = -INFINITY;
                for (int64_t h = g * group; h < (g + 1) * group; h++) mx = fmaxf(mx, s[h * m + j]);
                v[g * m + j] = mx;
            }
    }
    return SIFT_OK;
}

/* Orders candidates by vote, larger first; equal votes by position, lower first (SPEC §3.3). */
static _Thread_local const float *sort_votes;
static int by_vote_then_position(const void *a, const void *b)
{
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    uint32_t bi, bj;
    memcpy(&bi, &sort_votes[i], 4);
    memcpy(&bj, &sort_votes[j], 4);
    const uint32_t ki = sift_order_key(bi), kj = sift_order_key(bj);
    if (ki != kj) return ki > kj ? -1 : 1;
    return (i > j) - (i < j);
}

static int ascending(const void *a, const void *b)
{
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return (i > j) - (i < j);
}

static sift_status cpu_select(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_select_layout *ly = &n->p.layout;
    const int64_t lists = n->dst->shape[0], count = ly->count, cand = ly->cand, chosen = ly->chosen;
    int32_t *order = malloc((size_t)(cand ? cand : 1) * sizeof *order);
    if (!order) return sift_set_error(SIFT_E_NOMEM, "cpu select: out of memory for %lld candidates", (long long)cand);
    for (int64_t l = 0; l < lists; l++) {
        int32_t *out = (int32_t *)cpu_data(n->dst) + l * count;
        int64_t o = 0;
        for (int64_t j = 0; j < ly->sink; j++) out[o++] = (int32_t)j;
        for (int64_t j = 0; j < cand; j++) order[j] = (int32_t)j;
        sort_votes = (const float *)cpu_data(n->src[0]) + l * cand;
        qsort(order, (size_t)cand, sizeof *order, by_vote_then_position);
        qsort(order, (size_t)chosen, sizeof *order, ascending);
        for (int64_t j = 0; j < chosen; j++) out[o++] = (int32_t)(ly->first + order[j]);
        for (int64_t j = 0; j < ly->win_count; j++) out[o++] = (int32_t)(ly->win_begin + j);
    }
    free(order);
    return SIFT_OK;
}

/* An attention in tiles (flash attention's order of work): an item is a block of ATTEND_ROWS query
 * rows of one KV head's query heads, and it reads the keys and values in tiles of ATTEND_KEYS
 * entries, each converted from the cache once for all the block's rows instead of once per row.
 * Every loop over a tile runs over contiguous floats with a result per element (or in LANES
 * separate sums), which the compiler vectorizes; an element's arithmetic is the same whatever
 * the vector width. */
enum { ATTEND_ROWS = 64, ATTEND_KEYS = 64, LANES = 8, PAIR_CHUNK = 64 };

/* Entries [e0, e0 + count) of a KV head's walk, as f32. */
typedef struct attend_tile {
    float *keys_t;             /* [D][ATTEND_KEYS]: the tile's key j is column j (zeros past count) */
    float *values;             /* [ATTEND_KEYS][D] */
    bool present[ATTEND_KEYS]; /* false: the entry's position is outside the cache (never read) */
    bool all_present;          /* all of [0, ATTEND_KEYS) (a tile of count ATTEND_KEYS without absent entries) */
    int64_t e0, count;
} attend_tile;

/* The scratch of an item (attend_block's layout): the tile, one row's scores and weights, and for
 * each of the block's (row, head) pairs its running max, sum and correction, its weights of the
 * tile and its output. */
static size_t attend_scratch_floats(int64_t d, int64_t group)
{
    return (size_t)(2 * d * ATTEND_KEYS + 2 * ATTEND_KEYS + ATTEND_ROWS * group * (3 + ATTEND_KEYS + d));
}

static void load_tile(const sift_node *n, const cpu_positions *at, int64_t g, attend_tile *tile)
{
    const sift_tensor *k = n->src[1], *v = n->src[2];
    const int64_t d = k->shape[2];
    float krow[SIFT_MAX_HEAD_DIM];
    tile->all_present = tile->count == ATTEND_KEYS;
    for (int64_t j = 0; j < ATTEND_KEYS; j++) {
        const int64_t e = tile->e0 + j;
        float *vrow = tile->values + j * d;
        const bool present = j < tile->count && kv_row(k, g, cpu_position(at, e), krow);
        if (present) {
            kv_row(v, g, cpu_position(at, e), vrow);
            if (n->p.rope_keys) cpu_rope_row(krow, (float)e, NULL, &n->p.rope, n->p.rope_freq); /* SPEC §6: the key at list rank e sits at position e */
        } else {
            memset(krow, 0, (size_t)d * sizeof *krow);
            memset(vrow, 0, (size_t)d * sizeof *vrow);
        }
        tile->present[j] = present;
        tile->all_present &= present;
        for (int64_t c = 0; c < d; c++) tile->keys_t[c * ATTEND_KEYS + j] = krow[c];
    }
}

/* One query row q of one head over the first `visible` entries of a tile: its scores, and the
 * online-softmax step: the running max *m and sum *l updated, w[j] = e^(score j - new max) (0 for
 * the entries the row does not visit), and the factor e^(old max - new max) that the row's output
 * must be multiplied by before the tile's weighted values are added (returned). The loops run
 * over all ATTEND_KEYS columns, a constant trip count the compiler unrolls; s: ATTEND_KEYS floats. */
static inline float softmax_step(const float *restrict q, const attend_tile *tile, int64_t visible, int64_t d,
                                 float scale, float *restrict s, float *restrict w, float *m, float *l)
{
    for (int j = 0; j < ATTEND_KEYS; j++) s[j] = 0.0f;
    for (int64_t c = 0; c < d; c++) {
        const float qc = q[c], *restrict kc = tile->keys_t + c * ATTEND_KEYS;
        for (int j = 0; j < ATTEND_KEYS; j++) s[j] += qc * kc[j];
    }
    if (visible == ATTEND_KEYS && tile->all_present)
        for (int j = 0; j < ATTEND_KEYS; j++) s[j] *= scale;
    else
        for (int j = 0; j < ATTEND_KEYS; j++) s[j] = j < visible && tile->present[j] ? scale * s[j] : -INFINITY;
    float lane_max[LANES]; /* LANES running maxima, not one: one chain of dependent steps is slow */
    for (int i = 0; i < LANES; i++) lane_max[i] = *m;
    for (int j = 0; j < ATTEND_KEYS; j += LANES)
        for (int i = 0; i < LANES; i++) lane_max[i] = s[j + i] > lane_max[i] ? s[j + i] : lane_max[i];
    float m_new = lane_max[0];
    for (int i = 1; i < LANES; i++) m_new = lane_max[i] > m_new ? lane_max[i] : m_new;
    /* NaN scores are passed over by the max, and poison the sum below */
    if (m_new == -INFINITY) { /* nothing present so far: no weight yet */
        for (int j = 0; j < ATTEND_KEYS; j++) w[j] = 0.0f;
        return 1.0f;
    }
    for (int j = 0; j < ATTEND_KEYS; j++) s[j] -= m_new; /* an infinite max gives inf - inf = NaN, as it should */
    cpu_exp(s, w, ATTEND_KEYS);
    float lane_sum[LANES] = {0};
    for (int j = 0; j < ATTEND_KEYS; j += LANES)
        for (int i = 0; i < LANES; i++) lane_sum[i] += w[j + i];
    const float sum = ((lane_sum[0] + lane_sum[1]) + (lane_sum[2] + lane_sum[3])) +
                      ((lane_sum[4] + lane_sum[5]) + (lane_sum[6] + lane_sum[7]));
    const float correction = expf(*m - m_new);
    *l = *l * correction + sum;
    *m = m_new;
    return correction;
}

/* o[i] += v[j * v_stride] * w[j * w_stride + i] for entries j in [0, n), in order, for the
 * PAIR_CHUNK pairs i: with a constant trip count over i, o stays in registers across the entries. */
static inline void add_values(float *restrict o, const float *restrict w, int64_t w_stride, const float *restrict v,
                              int64_t v_stride, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        const float vj = v[j * v_stride], *restrict wj = w + j * w_stride;
        for (int i = 0; i < PAIR_CHUNK; i++) o[i] += wj[i] * vj;
    }
}

/* Query rows [t0, t0 + ATTEND_ROWS) of the heads of KV head g, g and the block from the item; each
 * row t over its walk (sift_attend_walk): the first first_len + t entries of the list (its KV
 * head's, or the shared one), then the range. For each query head:
 *   o[h] = sum_e softmax_e(scale * q[h].K[g][pos(e)]) * V[g][pos(e)]
 * A row's arithmetic depends only on the row and the tiles, which start at entry 0 whatever the
 * block: so results do not depend on the blocks, the items' order or the thread count. */
CPU_HOT_LOOP_AVX512 static void attend_block(void *arg, int64_t item, int thread)
{
    const node_job *job = arg;
    const sift_node *n = job->n;
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const sift_attend_walk *w = &n->p.walk;
    const int64_t hkv = k->shape[0], d = k->shape[2], hq = q->shape[q->ndim - 2], group = hq / hkv;
    /* the last rows of a causal walk are the longest: their items come first, so that no thread
     * is left alone with a long one at the end */
    const int64_t g = item % hkv, t0 = (job->blocks - 1 - item / hkv) * ATTEND_ROWS;
    const int64_t t1 = t0 + ATTEND_ROWS < w->tokens ? t0 + ATTEND_ROWS : w->tokens;
    const int64_t first_len = w->n - (w->tokens - 1); /* entries of row 0 */
    const sift_tensor *idx = w->list_len > 0 ? n->src[3] : NULL;
    const int64_t list = idx && idx->shape[0] > 1 ? g : 0;
    const cpu_positions at = {.list = idx ? (const int32_t *)cpu_data(idx) + list * idx->shape[1] : NULL,
                              .list_len = w->list_len, .range_start = w->range0};
    /* the scratch: pair r = (t - t0) * group + h of the block's rows and heads. Weights and outputs
     * are kept transposed, [entry][pair] and [dim][pair], so that adding a value row to the pairs
     * that visit it is a loop over contiguous pairs */
    const int64_t pairs = (t1 - t0) * group, stride = ATTEND_ROWS * group;
    const int64_t whole = pairs / PAIR_CHUNK * PAIR_CHUNK; /* pairs in whole chunks (add_values) */
    attend_tile tile = {.keys_t = cpu_scratch(job->be, thread)};
    tile.values = tile.keys_t + d * ATTEND_KEYS;
    float *scores = tile.values + ATTEND_KEYS * d, *row_weights = scores + ATTEND_KEYS;
    float *mx = row_weights + ATTEND_KEYS, *l = mx + stride, *corr = l + stride;
    float *weights_t = corr + stride, *out_t = weights_t + ATTEND_KEYS * stride;
    for (int64_t r = 0; r < pairs; r++) {
        mx[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int64_t c = 0; c < d; c++)
        for (int64_t r = 0; r < pairs; r++) out_t[c * stride + r] = 0.0f;
    /* pair r's query row (and output row in dst): its head's D values of row t */
    const float *qd = (const float *)cpu_data(q) + (t0 * hq + g * group) * d;
    float *od = (float *)cpu_data(n->dst) + (t0 * hq + g * group) * d;
    const int64_t entries = first_len + t1 - 1; /* the block's last row visits them all */
    for (tile.e0 = 0; tile.e0 < entries; tile.e0 += ATTEND_KEYS) {
        tile.count = entries - tile.e0 < ATTEND_KEYS ? entries - tile.e0 : ATTEND_KEYS;
        load_tile(n, &at, g, &tile);
        /* row t visits entries e < first_len + t: the tile's first entry from row t_first on */
        const int64_t t_first = tile.e0 - first_len + 1 > t0 ? tile.e0 - first_len + 1 : t0, r_first = (t_first - t0) * group;
        for (int64_t r = r_first; r < pairs; r++) {
            const int64_t t = t0 + r / group, h = r % group, visible = first_len + t - tile.e0;
            corr[r] = softmax_step(qd + ((t - t0) * hq + h) * d, &tile, visible, d, n->p.scale, scores, row_weights, &mx[r],
                                   &l[r]);
            for (int64_t j = 0; j < ATTEND_KEYS; j++) weights_t[j * stride + r] = row_weights[j];
        }
        for (int64_t c = 0; c < d; c++) {
            float *oc = out_t + c * stride;
            for (int64_t r = r_first; r < pairs; r++) oc[r] *= corr[r];
            for (int64_t r0 = 0; r0 < whole; r0 += PAIR_CHUNK) {
                /* the chunk's first row visits the tile's first `shared` entries, and so do the
                 * rest of its rows; each later entry is added to the rows that visit it alone */
                const int64_t first_visible = first_len + t0 + r0 / group - tile.e0;
                const int64_t shared = first_visible < 0 ? 0 : first_visible < tile.count ? first_visible : tile.count;
                add_values(oc + r0, weights_t + r0, stride, tile.values + c, d, shared);
                for (int64_t j = shared; j < tile.count; j++) {
                    const int64_t t_visits = tile.e0 + j - first_len + 1, r_visits = (t_visits - t0) * group;
                    const float vjc = tile.values[j * d + c], *wj = weights_t + j * stride;
                    for (int64_t r = r_visits > r0 ? r_visits : r0; r < r0 + PAIR_CHUNK; r++) oc[r] += wj[r] * vjc;
                }
            }
        }
        /* the pairs past the whole chunks (a block's last rows, decode's few heads): entry by entry */
        for (int64_t j = 0; j < tile.count && whole < pairs; j++) {
            if (!tile.present[j]) continue;
            const int64_t t_visits = tile.e0 + j - first_len + 1, r_visits = (t_visits - t0) * group;
            for (int64_t r = r_visits > whole ? r_visits : whole; r < pairs; r++) {
                const float wjr = weights_t[j * stride + r];
                for (int64_t c = 0; c < d; c++) out_t[c * stride + r] += wjr * tile.values[j * d + c];
            }
        }
    }
    for (int64_t r = 0; r < pairs; r++) {
        const int64_t t = t0 + r / group, h = r % group;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* nothing attended (an empty list, or no row present): zeros */
        for (int64_t c = 0; c < d; c++) od[((t - t0) * hq + h) * d + c] = out_t[c * stride + r] * inv;
    }
}

/* Every attention op: items are (KV head, block of query rows); decode has one row, so its items
 * are the KV heads. */
static sift_status cpu_attend(cpu_backend *be, const sift_node *n)
{
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const sift_attend_walk *w = &n->p.walk;
    const int64_t hkv = k->shape[0], d = k->shape[2], hq = q->shape[q->ndim - 2], group = hq / hkv;
    const sift_status s = cpu_reserve(be, attend_scratch_floats(d, group));
    if (s != SIFT_OK) return s;
    node_job job = {.be = be, .n = n, .blocks = (w->tokens + ATTEND_ROWS - 1) / ATTEND_ROWS};
    cpu_parallel_for(be, hkv * job.blocks, (double)w->tokens * (double)w->n * (double)hq * (double)d, attend_block, &job);
    return SIFT_OK;
}

/* SPEC §4: reuse the last index set while the query stays close to the one that chose it. */
static sift_status cpu_sel_cache_check(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const float *q = cpu_data(n->src[0]);
    float *st = cpu_data(n->dst);
    const int64_t qn = n->src[0]->shape[0] * n->src[0]->shape[1];
    float *extra = st + qn;
    double dot = 0.0, nq = 0.0, nr = 0.0;
    for (int64_t i = 0; i < qn; i++) {
        dot += (double)q[i] * st[i];
        nq += (double)q[i] * q[i];
        nr += (double)st[i] * st[i];
    }
    const double cosine = nq > 0.0 && nr > 0.0 ? dot / sqrt(nq * nr) : 0.0;
    const bool reuse = n->p.full && extra[SIFT_SEL_CACHE_VALID] != 0.0f && n->p.theta < 1.0f && cosine >= n->p.theta;
    extra[SIFT_SEL_CACHE_REUSE] = reuse ? 1.0f : 0.0f;
    if (n->p.full) extra[SIFT_SEL_CACHE_STEPS] += 1.0f;
    if (reuse) {
        extra[SIFT_SEL_CACHE_HITS] += 1.0f;
    } else {
        memcpy(st, q, (size_t)qn * sizeof *q);
        extra[SIFT_SEL_CACHE_VALID] = n->p.full ? 1.0f : 0.0f;
    }
    return SIFT_OK;
}

static sift_status cpu_fill_range(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const int64_t lists = n->dst->shape[0], len = n->dst->shape[1];
    int32_t *idx = cpu_data(n->dst);
    for (int64_t l = 0; l < lists; l++)
        for (int64_t i = n->p.col0; i < len; i++) idx[l * len + i] = (int32_t)(n->p.start + (i - n->p.col0));
    return SIFT_OK;
}

/* TokenButler's neighbour fetch: after the chosen positions, j + 1 for each chosen j where that
 * is a candidate not chosen already, else -1. The lists are ascending, so "chosen already" is
 * "the next chosen entry". */
static sift_status cpu_neighbor_fetch(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_select_layout *l = &n->p.layout;
    const int64_t lists = n->dst->shape[0], in_len = l->count, out_len = l->count + l->chosen;
    const int64_t cand_end = l->first + l->cand; /* candidates are [first, cand_end) */
    for (int64_t li = 0; li < lists; li++) {
        const int32_t *in = (const int32_t *)cpu_data(n->src[0]) + li * in_len;
        int32_t *out = (int32_t *)cpu_data(n->dst) + li * out_len;
        const int32_t *chosen = in + l->sink;
        memcpy(out, in, (size_t)(l->sink + l->chosen) * sizeof(int32_t));
        for (int64_t i = 0; i < l->chosen; i++) {
            const int64_t next = (int64_t)chosen[i] + 1;
            const bool taken = i + 1 < l->chosen ? chosen[i + 1] == next : next >= cand_end;
            out[l->sink + l->chosen + i] = taken ? -1 : (int32_t)next;
        }
        memcpy(out + l->sink + 2 * l->chosen, in + l->sink + l->chosen, (size_t)l->win_count * sizeof(int32_t));
    }
    return SIFT_OK;
}

static sift_status cpu_mean_rows(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const int64_t rows = n->src[0]->shape[0], e = n->src[0]->shape[1];
    const float *x = cpu_data(n->src[0]);
    float *out = cpu_data(n->dst);
    for (int64_t i = 0; i < e; i++) {
        float sum = 0.0f;
        for (int64_t t = 0; t < rows; t++) sum += x[t * e + i];
        out[i] = sum / (float)rows;
    }
    return SIFT_OK;
}

/* out[g][col0 + i] = row indices[l][i] of KV head g of the cache, its bytes as they are; zeros
 * where the row is absent (an entry outside the cache, or on a page outside the pools). l = 0 for
 * a shared list, else g. out's other columns are left as they are. */
static sift_status cpu_kv_gather(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_tensor *idx = n->src[0], *kv = n->src[1];
    const int64_t hkv = kv->shape[0], count = idx->shape[1], out_count = n->dst->shape[1], col0 = n->p.col0;
    const size_t row_bytes = (size_t)kv->shape[2] * sift_dtype_size(kv->dtype);
    for (int64_t g = 0; g < hkv; g++) {
        const int32_t *list = (const int32_t *)cpu_data(idx) + (idx->shape[0] == 1 ? 0 : g) * count;
        for (int64_t i = 0; i < count; i++) {
            char *dst = (char *)cpu_data(n->dst) + (size_t)(g * out_count + col0 + i) * row_bytes;
            const void *src = cpu_kv_row_addr(kv, g, list[i]);
            if (src) memcpy(dst, src, row_bytes);
            else memset(dst, 0, row_bytes);
        }
    }
    return SIFT_OK;
}

/* ---- the backend ---------------------------------------------------------------------------- */

/* The CPU reference of every op, indexed by op and expanded from the op table (engine/ops.def):
 * op <name> runs cpu_<name>, so an op without a CPU reference does not build ("'cpu_<name>'
 * undeclared"). An op that shares another op's kernel is mapped to it by a #define here. */
#define cpu_gather_attend cpu_attend
#define cpu_dense_attend cpu_attend
#define cpu_causal_attend cpu_attend
#define cpu_causal_attend_sparse cpu_attend
#define cpu_score_max cpu_score
#define cpu_add cpu_elementwise
#define cpu_swiglu cpu_elementwise
typedef sift_status (*cpu_kernel)(cpu_backend *be, const sift_node *n);
static const cpu_kernel cpu_kernels[SIFT_OP_COUNT] = {
#define SIFT_OP(id, name, min_src, max_src, flags) [SIFT_OP_##id] = cpu_##name,
#include "ops.def"
#undef SIFT_OP
};

static bool cpu_supports_op(void *be, const sift_node *n)
{
    (void)be;
    return (unsigned)n->op < SIFT_OP_COUNT;
}

static void cpu_destroy(void *be)
{
    cpu_backend *cb = be;
    pool_stop(cb);
    pthread_mutex_destroy(&cb->lock);
    pthread_cond_destroy(&cb->wake);
    pthread_cond_destroy(&cb->done);
    free(cb);
}

static sift_status cpu_set_threads(void *be, int n)
{
    cpu_backend *cb = be;
    if (n == cb->n_threads) return SIFT_OK;
    return pool_start(cb, n);
}

static sift_status cpu_tensor_alloc(void *be, sift_tensor *t)
{
    (void)be;
    t->impl = calloc(1, t->nbytes ? t->nbytes : 1);
    if (!t->impl) return sift_set_error(SIFT_E_NOMEM, "cpu: cannot allocate %zu bytes", t->nbytes);
    return SIFT_OK;
}

static void cpu_tensor_free(void *be, sift_tensor *t)
{
    (void)be;
    free(t->impl);
    t->impl = NULL;
}

static sift_status cpu_tensor_write(void *be, sift_tensor *t, size_t offset, const void *src, size_t bytes)
{
    (void)be;
    memcpy((char *)t->impl + offset, src, bytes);
    return SIFT_OK;
}

static sift_status cpu_tensor_read(void *be, const sift_tensor *t, size_t offset, void *dst, size_t bytes)
{
    (void)be;
    memcpy(dst, (const char *)t->impl + offset, bytes);
    return SIFT_OK;
}

/* Host memory either way: a memcpy per region (the engine has checked that none overlaps). */
static sift_status cpu_tensor_copy(void *be, const sift_copy_region *regions, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++) {
        const sift_copy_region *r = &regions[i];
        memcpy((char *)r->dst->impl + r->dst_offset, (const char *)r->src->impl + r->src_offset, r->bytes);
    }
    return SIFT_OK;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static sift_status cpu_graph_compute(void *be, sift_graph *g, double *node_us, double *span_us)
{
    const double start = now_us();
    for (int i = 0; i < g->n_nodes; i++) {
        const sift_node *n = &g->nodes[i];
        const double t0 = now_us();
        if (n->skip && ((const float *)cpu_data(n->skip))[n->skip_elem] != 0.0f) {
            if (node_us) node_us[i] = 0.0;
            continue;
        }
        const sift_status s = cpu_kernels[n->op](be, n);
        if (s != SIFT_OK) return s;
        if (node_us) node_us[i] = now_us() - t0;
    }
    if (span_us) *span_us = now_us() - start;
    return SIFT_OK;
}

static void cpu_graph_release(void *be, sift_graph *g) { (void)be; (void)g; }

/* The host's available memory (Linux: MemAvailable of /proc/meminfo, what can be allocated without
 * swapping); elsewhere the backend cannot tell. */
static sift_status cpu_memory_free(void *be, uint64_t *bytes)
{
    (void)be;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return sift_set_error(SIFT_E_UNAVAILABLE, "cpu: no /proc/meminfo");
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    if (!found) return sift_set_error(SIFT_E_UNAVAILABLE, "cpu: /proc/meminfo has no MemAvailable");
    *bytes = (uint64_t)kib * 1024;
    return SIFT_OK;
}

static const sift_backend_vtable cpu_vtable = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .supports_op = cpu_supports_op,
    .tensor_alloc = cpu_tensor_alloc,
    .tensor_free = cpu_tensor_free,
    .tensor_write = cpu_tensor_write,
    .tensor_read = cpu_tensor_read,
    .tensor_copy = cpu_tensor_copy,
    .graph_compute = cpu_graph_compute,
    .graph_release = cpu_graph_release,
    .set_threads = cpu_set_threads,
    .memory_free = cpu_memory_free,
};

/* The thread count at open: SIFT_THREADS if set, else the online cores. */
static sift_status default_threads(int *n)
{
    const char *env = getenv("SIFT_THREADS");
    if (env && *env) {
        char *end = NULL;
        const long v = strtol(env, &end, 10);
        if (*end || v < 1 || v > 1024)
            return sift_set_error(SIFT_E_INVALID, "cpu: SIFT_THREADS=%s is not a thread count in 1..1024", env);
        *n = (int)v;
        return SIFT_OK;
    }
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *n = cores >= 1 ? (cores < 1024 ? (int)cores : 1024) : 1;
    return SIFT_OK;
}

static sift_status check_device(int device)
{
    if (device != -1 && device != 0)
        return sift_set_error(SIFT_E_INVALID, "cpu: device %d (the CPU backend has one device, 0)", device);
    return SIFT_OK;
}

sift_status sift_backend_cpu_devices(int index, sift_device_info *info, int *n)
{
    *n = 1;
    if (!info) return SIFT_OK;
    if (index != 0) return check_device(index);
    memset(info, 0, sizeof *info);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    snprintf(info->name, sizeof info->name, "CPU (%ld cores)", cores >= 1 ? cores : 1);
    info->type = SIFT_DEVICE_CPU;
    info->is_default = 1;
    info->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    return SIFT_OK;
}

sift_status sift_backend_cpu_open(const sift_backend_open_args *args, void **be, const sift_backend_vtable **vt, char *name,
                                  size_t name_len, int *device)
{
    *be = NULL;
    *vt = &cpu_vtable;
    sift_status s = check_device(args->device);
    if (s != SIFT_OK) return s;
    *device = 0;
    int n = args->threads;
    if (n < 1) s = default_threads(&n);
    if (s != SIFT_OK) return s;
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return sift_set_error(SIFT_E_NOMEM, "cpu: out of memory");
    pthread_mutex_init(&cb->lock, NULL);
    pthread_cond_init(&cb->wake, NULL);
    pthread_cond_init(&cb->done, NULL);
    atomic_init(&cb->next, 0);
    cb->n_threads = 1;
    cb->scratch = cb->scratch_one;
    s = pool_start(cb, n);
    if (s != SIFT_OK) {
        cpu_destroy(cb);
        return s;
    }
    *be = cb;
    snprintf(name, name_len, "CPU reference (plain C, f32 accumulation)");
    return SIFT_OK;
}
