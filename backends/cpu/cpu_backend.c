/* The CPU backend: the plain reference of every op and the oracle of every test.
 * Straight loops, f32 accumulation, softmax with the running max subtracted (SPEC §3). */
#include "cpu_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The element offset of logical row `pos` of KV head `g` (paged or not), or -1 where the row is
 * absent: the one place that knows where a K/V row lives. */
int64_t cpu_kv_offset(const sift_tensor *t, int64_t g, int64_t pos)
{
    if (pos < 0 || pos >= t->shape[1]) return -1;
    const int64_t row = sift_kv_phys_row(t, t->pages ? cpu_data(t->pages) : NULL, pos);
    return row < 0 ? -1 : g * t->stride[0] + row * t->stride[1];
}

/* Reads row `pos` of KV head `g` as f32; false (and zeros) where the row is absent. */
static bool kv_row(const sift_tensor *t, int64_t g, int64_t pos, float *dst)
{
    const int64_t d = t->shape[2];
    const int64_t off = cpu_kv_offset(t, g, pos);
    if (off < 0) {
        memset(dst, 0, (size_t)d * sizeof(float));
        return false;
    }
    if (t->dtype == SIFT_F32) {
        memcpy(dst, (const float *)cpu_data(t) + off, (size_t)d * sizeof(float));
    } else {
        const uint16_t *h = (const uint16_t *)cpu_data(t) + off;
        for (int64_t i = 0; i < d; i++) dst[i] = sift_half_to_float(h[i]);
    }
    return true;
}

/* s[h][j] = scale * sift_dot_f32(q[h], K[g(h)][begin + j]); each K row is read once for its group of heads. */
static sift_status op_score(const sift_node *n)
{
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const int64_t hq = q->shape[0], hkv = k->shape[0], d = q->shape[1], m = n->p.end - n->p.begin;
    const int64_t group = hq / hkv;
    float *s = cpu_data(n->dst);
    float row[SIFT_MAX_HEAD_DIM];
    for (int64_t g = 0; g < hkv; g++) {
        for (int64_t j = 0; j < m; j++) {
            kv_row(k, g, n->p.begin + j, row);
            for (int64_t h = g * group; h < (g + 1) * group; h++)
                s[h * m + j] = n->p.scale * sift_dot_f32((const float *)cpu_data(q) + h * d, row, d);
        }
    }
    return SIFT_OK;
}

/* SOFTMAX_SUM: v[j] = sum_h softmax_j(s[h][j]).  KVHEAD_MAX: u[g][j] = max over g's heads of s[h][j]. */
static sift_status op_vote(const sift_node *n)
{
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

static sift_status op_select(const sift_node *n)
{
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

/* o[h] = sum_t softmax_t(scale * q[h].K[g][t]) * V[g][t] for the group's heads, in one pass with a
 * running max per head (online softmax). Each K/V row is read once for the whole group. */
sift_status cpu_attend_group(const float *q, float *o, int64_t group, const sift_tensor *k, const sift_tensor *v,
                             int64_t g, const cpu_positions *at, int64_t len, float scale, const sift_rope_params *rope,
                             const float *rope_freq)
{
    const int64_t d = k->shape[2];
    float *mx = malloc(2 * (size_t)group * sizeof *mx), *l = mx + group;
    float krow[SIFT_MAX_HEAD_DIM], vrow[SIFT_MAX_HEAD_DIM];
    if (!mx) return sift_set_error(SIFT_E_NOMEM, "cpu attention: out of memory");
    for (int64_t h = 0; h < group; h++) {
        mx[h] = -INFINITY;
        l[h] = 0.0f;
        for (int64_t i = 0; i < d; i++) o[h * d + i] = 0.0f;
    }
    for (int64_t t = 0; t < len; t++) {
        const int64_t pos = cpu_position(at, t);
        if (!kv_row(k, g, pos, krow)) continue; /* a position outside the cache is never read */
        kv_row(v, g, pos, vrow);
        if (rope) cpu_rope_row(krow, (float)t, NULL, rope, rope_freq); /* SPEC §6: the key at list rank t sits at position t */
        for (int64_t h = 0; h < group; h++) {
            const float s = scale * sift_dot_f32(q + h * d, krow, d);
            const float m_new = fmaxf(mx[h], s);
            const float corr = expf(mx[h] - m_new), w = expf(s - m_new);
            l[h] = l[h] * corr + w;
            for (int64_t i = 0; i < d; i++) o[h * d + i] = o[h * d + i] * corr + w * vrow[i];
            mx[h] = m_new;
        }
    }
    for (int64_t h = 0; h < group; h++) {
        const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f; /* nothing attended (an empty list, or no row present): zeros */
        for (int64_t i = 0; i < d; i++) o[h * d + i] *= inv;
    }
    free(mx);
    return SIFT_OK;
}

/* Every attention op: each query row t and KV head g over its walk (sift_attend_walk): the list
 * (its KV head's, or the shared one), then a range of positions. */
static sift_status op_attend(const sift_node *n)
{
    const sift_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    const sift_attend_walk *w = &n->p.walk;
    const int64_t hkv = k->shape[0], d = k->shape[2], hq = q->shape[q->ndim - 2], group = hq / hkv;
    const sift_tensor *idx = w->list_len > 0 ? n->src[3] : NULL;
    sift_status s = SIFT_OK;
    for (int64_t t = 0; t < w->tokens; t++) {
        for (int64_t g = 0; g < hkv && s == SIFT_OK; g++) {
            const float *qg = (const float *)cpu_data(q) + (t * hq + g * group) * d;
            float *og = (float *)cpu_data(n->dst) + (t * hq + g * group) * d;
            const int64_t list = idx && idx->shape[0] > 1 ? g : 0;
            const cpu_positions at = {.list = idx ? (const int32_t *)cpu_data(idx) + list * idx->shape[1] : NULL,
                                      .list_len = w->list_len, .range_start = w->range0};
            s = cpu_attend_group(qg, og, group, k, v, g, &at, w->n - (w->tokens - 1 - t), n->p.scale,
                                 n->p.rope_keys ? &n->p.rope : NULL, n->p.rope_freq);
        }
    }
    return s;
}

/* SPEC §4: reuse the last index set while the query stays close to the one that chose it. */
static sift_status op_sel_cache_check(const sift_node *n)
{
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

static sift_status op_fill_range(const sift_node *n)
{
    const int64_t lists = n->dst->shape[0], len = n->dst->shape[1];
    int32_t *idx = cpu_data(n->dst);
    for (int64_t l = 0; l < lists; l++)
        for (int64_t i = n->p.col0; i < len; i++) idx[l * len + i] = (int32_t)(n->p.start + (i - n->p.col0));
    return SIFT_OK;
}

static sift_status op_mean_rows(const sift_node *n)
{
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

/* ---- the backend ---------------------------------------------------------------------------- */

/* The CPU reference of every op, indexed by op: the CPU runs every op of the table. */
typedef sift_status (*cpu_kernel)(const sift_node *n);
static const cpu_kernel cpu_kernels[SIFT_OP_COUNT] = {
    [SIFT_OP_SCORE] = op_score,
    [SIFT_OP_VOTE] = op_vote,
    [SIFT_OP_SELECT] = op_select,
    [SIFT_OP_GATHER_ATTEND] = op_attend,
    [SIFT_OP_DENSE_ATTEND] = op_attend,
    [SIFT_OP_GET_ROWS] = cpu_get_rows,
    [SIFT_OP_RMSNORM] = cpu_rmsnorm,
    [SIFT_OP_MATMUL] = cpu_matmul,
    [SIFT_OP_ROPE] = cpu_rope,
    [SIFT_OP_SWIGLU] = cpu_elementwise,
    [SIFT_OP_ADD] = cpu_elementwise,
    [SIFT_OP_KV_WRITE] = cpu_kv_write,
    [SIFT_OP_CAUSAL_ATTEND] = op_attend,
    [SIFT_OP_SEL_CACHE_CHECK] = op_sel_cache_check,
    [SIFT_OP_FILL_RANGE] = op_fill_range,
    [SIFT_OP_MEAN_ROWS] = op_mean_rows,
    [SIFT_OP_CAUSAL_ATTEND_SPARSE] = op_attend,
};

static bool cpu_supports_op(void *be, const sift_node *n)
{
    (void)be;
    return cpu_kernels[n->op] != NULL;
}

static void cpu_destroy(void *be) { (void)be; }

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

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static sift_status cpu_graph_compute(void *be, sift_graph *g, double *node_us)
{
    (void)be;
    for (int i = 0; i < g->n_nodes; i++) {
        const sift_node *n = &g->nodes[i];
        const double t0 = now_us();
        if (n->skip && ((const float *)cpu_data(n->skip))[n->skip_elem] != 0.0f) {
            if (node_us) node_us[i] = 0.0;
            continue;
        }
        const sift_status s = cpu_kernels[n->op](n);
        if (s != SIFT_OK) return s;
        if (node_us) node_us[i] = now_us() - t0;
    }
    return SIFT_OK;
}

static void cpu_graph_release(void *be, sift_graph *g) { (void)be; (void)g; }

static const sift_backend_vtable cpu_vtable = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .supports_op = cpu_supports_op,
    .tensor_alloc = cpu_tensor_alloc,
    .tensor_free = cpu_tensor_free,
    .tensor_write = cpu_tensor_write,
    .tensor_read = cpu_tensor_read,
    .graph_compute = cpu_graph_compute,
    .graph_release = cpu_graph_release,
};

sift_status sift_backend_cpu_open(void **be, const sift_backend_vtable **vt, char *name, size_t name_len)
{
    *be = NULL;
    *vt = &cpu_vtable;
    snprintf(name, name_len, "CPU reference (plain C, f32 accumulation)");
    return SIFT_OK;
}
