/* The CPU backend: the plain reference of every op and the oracle of every test.
 * Straight loops, f32 accumulation, softmax with the running max subtracted (SPEC §3). */
#include "cpu_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Reads row `pos` of KV head `g` as f32: the one place that knows where a K/V row lives. */
static void kv_row(const sift_tensor *t, int64_t g, int64_t pos, float *dst)
{
    const int64_t d = t->shape[2];
    const int64_t off = g * t->stride[0] + pos * t->stride[1];
    if (t->dtype == SIFT_F32) {
        memcpy(dst, (const float *)cpu_data(t) + off, (size_t)d * sizeof(float));
    } else {
        const uint16_t *h = (const uint16_t *)cpu_data(t) + off;
        for (int64_t i = 0; i < d; i++) dst[i] = sift_half_to_float(h[i]);
    }
}

/* f32 dot product with eight running sums: the same arithmetic as one sum, in an order the
 * compiler can vectorize without fast-math. */
float cpu_dot(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) acc[0] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* s[h][j] = scale * cpu_dot(q[h], K[g(h)][begin + j]); each K row is read once for its group of heads. */
static void op_score(const sift_node *n)
{
    const sift_tensor *q = n->src[0], *k = n->src[1];
    const int64_t hq = q->shape[0], hkv = k->shape[0], d = q->shape[1], m = n->p.end - n->p.begin;
    const int64_t group = hq / hkv;
    float *s = cpu_data(n->dst);
    float row[128];
    for (int64_t g = 0; g < hkv; g++) {
        for (int64_t j = 0; j < m; j++) {
            kv_row(k, g, n->p.begin + j, row);
            for (int64_t h = g * group; h < (g + 1) * group; h++)
                s[h * m + j] = n->p.scale * cpu_dot((const float *)cpu_data(q) + h * d, row, d);
        }
    }
}

/* SOFTMAX_SUM: v[j] = sum_h softmax_j(s[h][j]).  KVHEAD_MAX: u[g][j] = max over g's heads of s[h][j]. */
static void op_vote(const sift_node *n)
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
    const sift_select_params *p = &n->p.sel;
    const int64_t lists = n->dst->shape[0], count = n->dst->shape[1];
    const int64_t cand = sift_select_candidates(p);
    const int64_t sink = p->sink < p->n_ctx ? p->sink : p->n_ctx;
    const int64_t win_begin = p->n_ctx - p->window > sink ? p->n_ctx - p->window : sink;
    const int64_t chosen = p->budget < cand ? p->budget : cand;
    int32_t *order = malloc((size_t)(cand ? cand : 1) * sizeof *order);
    if (!order) return sift_set_error(SIFT_E_NOMEM, "cpu select: out of memory for %lld candidates", (long long)cand);
    for (int64_t l = 0; l < lists; l++) {
        int32_t *out = (int32_t *)cpu_data(n->dst) + l * count;
        int64_t o = 0;
        for (int64_t j = 0; j < sink; j++) out[o++] = (int32_t)j;
        for (int64_t j = 0; j < cand; j++) order[j] = (int32_t)j;
        sort_votes = (const float *)cpu_data(n->src[0]) + l * cand;
        qsort(order, (size_t)cand, sizeof *order, by_vote_then_position);
        qsort(order, (size_t)chosen, sizeof *order, ascending);
        for (int64_t j = 0; j < chosen; j++) out[o++] = (int32_t)(p->sink + order[j]);
        for (int64_t j = win_begin; j < p->n_ctx; j++) out[o++] = (int32_t)j;
    }
    free(order);
    return SIFT_OK;
}

/* o[h] = sum_t softmax_t(scale * q[h].K[g][t]) * V[g][t] for the group's heads, in one pass with a
 * running max per head (online softmax). Each K/V row is read once for the whole group. */
sift_status cpu_attend_group(const float *q, float *o, int64_t group, const sift_tensor *k, const sift_tensor *v,
                             int64_t g, const int32_t *idx, int64_t len, float scale)
{
    const int64_t d = k->shape[2];
    float *mx = malloc(2 * (size_t)group * sizeof *mx), *l = mx + group;
    float krow[128], vrow[128];
    if (!mx) return sift_set_error(SIFT_E_NOMEM, "cpu attention: out of memory");
    for (int64_t h = 0; h < group; h++) {
        mx[h] = -INFINITY;
        l[h] = 0.0f;
        for (int64_t i = 0; i < d; i++) o[h * d + i] = 0.0f;
    }
    for (int64_t t = 0; t < len; t++) {
        const int64_t pos = idx ? idx[t] : t;
        if (pos < 0 || pos >= k->shape[1]) continue; /* an index outside the cache is never read */
        kv_row(k, g, pos, krow);
        kv_row(v, g, pos, vrow);
        for (int64_t h = 0; h < group; h++) {
            const float s = scale * cpu_dot(q + h * d, krow, d);
            const float m_new = fmaxf(mx[h], s);
            const float corr = expf(mx[h] - m_new), w = expf(s - m_new);
            l[h] = l[h] * corr + w;
            for (int64_t i = 0; i < d; i++) o[h * d + i] = o[h * d + i] * corr + w * vrow[i];
            mx[h] = m_new;
        }
    }
    for (int64_t h = 0; h < group; h++) {
        const float inv = len > 0 ? 1.0f / l[h] : 0.0f;
        for (int64_t i = 0; i < d; i++) o[h * d + i] *= inv;
    }
    free(mx);
    return SIFT_OK;
}

/* gather_attend: each KV head over its list (or the shared one); dense_attend: over [0, N);
 * causal_attend: token t over [0, pos0 + t]. */
static sift_status op_attend(const sift_node *n)
{
    const sift_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    const int64_t hkv = k->shape[0], d = k->shape[2];
    const bool causal = n->op == SIFT_OP_CAUSAL_ATTEND;
    const int64_t tokens = causal ? q->shape[0] : 1, hq = causal ? q->shape[1] : q->shape[0], group = hq / hkv;
    const sift_tensor *idx = n->op == SIFT_OP_GATHER_ATTEND ? n->src[3] : NULL;
    sift_status s = SIFT_OK;
    for (int64_t t = 0; t < tokens; t++) {
        for (int64_t g = 0; g < hkv && s == SIFT_OK; g++) {
            const float *qg = (const float *)cpu_data(q) + (t * hq + g * group) * d;
            float *og = (float *)cpu_data(n->dst) + (t * hq + g * group) * d;
            if (idx) {
                const int64_t len = idx->shape[1], list = idx->shape[0] == 1 ? 0 : g;
                s = cpu_attend_group(qg, og, group, k, v, g, (const int32_t *)cpu_data(idx) + list * len, len, n->p.scale);
            } else {
                const int64_t len = causal ? n->p.pos0 + t + 1 : n->p.n_ctx;
                s = cpu_attend_group(qg, og, group, k, v, g, NULL, len, n->p.scale);
            }
        }
    }
    return s;
}

/* ---- the backend ---------------------------------------------------------------------------- */

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
        sift_status s = SIFT_OK;
        switch (n->op) {
        case SIFT_OP_SCORE: op_score(n); break;
        case SIFT_OP_VOTE: op_vote(n); break;
        case SIFT_OP_SELECT: s = op_select(n); break;
        case SIFT_OP_GATHER_ATTEND:
        case SIFT_OP_DENSE_ATTEND:
        case SIFT_OP_CAUSAL_ATTEND: s = op_attend(n); break;
        case SIFT_OP_GET_ROWS: s = cpu_get_rows(n); break;
        case SIFT_OP_RMSNORM: s = cpu_rmsnorm(n); break;
        case SIFT_OP_MATMUL: s = cpu_matmul(n); break;
        case SIFT_OP_ROPE: s = cpu_rope(n); break;
        case SIFT_OP_SWIGLU:
        case SIFT_OP_ADD: s = cpu_elementwise(n); break;
        case SIFT_OP_KV_WRITE: s = cpu_kv_write(n); break;
        default: s = sift_set_error(SIFT_E_INVALID, "cpu: unknown op %d", (int)n->op);
        }
        if (s != SIFT_OK) return s;
        if (node_us) node_us[i] = now_us() - t0;
    }
    return SIFT_OK;
}

static void cpu_graph_release(void *be, sift_graph *g) { (void)be; (void)g; }

static const sift_backend_vtable cpu_vtable = {
    .name = "cpu",
    .destroy = cpu_destroy,
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
