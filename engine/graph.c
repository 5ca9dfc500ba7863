/* The dispatch graph: nodes appended by op constructors that check shapes and types, a
 * connectivity check before running, and the bytes each op must move. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

const char *sift_op_name(sift_op op)
{
    static const char *const names[SIFT_OP_COUNT] = {"score", "vote", "select", "gather_attend", "dense_attend"};
    return (op >= 0 && op < SIFT_OP_COUNT) ? names[op] : "unknown";
}

sift_status sift_graph_create(sift_context *ctx, sift_graph **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_graph_create: out is NULL");
    *out = NULL;
    if (!ctx) return sift_set_error(SIFT_E_INVALID, "sift_graph_create: context is NULL");
    sift_graph *g = calloc(1, sizeof *g);
    if (!g) return sift_set_error(SIFT_E_NOMEM, "sift_graph_create: out of memory");
    g->ctx = ctx;
    *out = g;
    return SIFT_OK;
}

void sift_graph_destroy(sift_graph *g)
{
    if (!g) return;
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
    if (g->backend_cache) vt->graph_release(be, g);
    for (int i = 0; i < g->n_owned; i++) sift_tensor_destroy(g->owned[i]);
    free(g->owned);
    free(g->nodes);
    free(g);
}

static void graph_changed(sift_graph *g)
{
    g->version++;
    if (g->backend_cache) {
        void *be;
        const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
        vt->graph_release(be, g);
        g->backend_cache = NULL;
    }
}

sift_status sift_graph_new_tensor(sift_graph *g, sift_dtype dtype, int ndim, const int64_t *shape, const char *name,
                                  sift_tensor **out)
{
    if (!g || !out) return sift_set_error(SIFT_E_INVALID, "sift_graph_new_tensor: null argument");
    if (g->n_owned == g->cap_owned) {
        int cap = g->cap_owned ? 2 * g->cap_owned : 8;
        sift_tensor **p = realloc(g->owned, (size_t)cap * sizeof *p);
        if (!p) return sift_set_error(SIFT_E_NOMEM, "sift_graph_new_tensor: out of memory");
        g->owned = p;
        g->cap_owned = cap;
    }
    sift_status s = sift_tensor_create(g->ctx, dtype, ndim, shape, out);
    if (s != SIFT_OK) return s;
    (*out)->owner = g;
    if (name) sift_tensor_set_name(*out, name);
    g->owned[g->n_owned++] = *out;
    return SIFT_OK;
}

/* ---- validation helpers -------------------------------------------------------------------- */

static sift_status need_tensor(const sift_graph *g, const sift_tensor *t, const char *op, const char *role)
{
    if (!g) return sift_set_error(SIFT_E_INVALID, "%s: graph is NULL", op);
    if (!t) return sift_set_error(SIFT_E_INVALID, "%s: %s tensor is NULL", op, role);
    if (t->ctx != g->ctx)
        return sift_set_error(SIFT_E_GRAPH, "%s: %s tensor '%s' belongs to another context", op, role, t->name);
    return SIFT_OK;
}

static sift_status need_dtype(const sift_tensor *t, sift_dtype want, const char *op, const char *role)
{
    if (t->dtype != want)
        return sift_set_error(SIFT_E_DTYPE, "%s: %s tensor '%s' is %s, expected %s", op, role, t->name,
                              sift_dtype_name(t->dtype), sift_dtype_name(want));
    return SIFT_OK;
}

static sift_status need_rank(const sift_tensor *t, int ndim, const char *op, const char *role)
{
    if (t->ndim != ndim)
        return sift_set_error(SIFT_E_SHAPE, "%s: %s tensor '%s' has rank %d, expected %d", op, role, t->name, t->ndim,
                              ndim);
    return SIFT_OK;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        sift_status s_ = (x);                                                                                          \
        if (s_ != SIFT_OK) return s_;                                                                                  \
    } while (0)

/* q f32 [Hq][D]; k (and v, if given) [Hkv][Ncap][D] f16/f32; D in {64, 128}; Hq % Hkv == 0. */
static sift_status check_qkv(const sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                             const char *op)
{
    TRY(need_tensor(g, q, op, "q"));
    TRY(need_tensor(g, k, op, "k"));
    TRY(need_dtype(q, SIFT_F32, op, "q"));
    TRY(need_rank(q, 2, op, "q"));
    TRY(need_rank(k, 3, op, "k"));
    if (k->dtype != SIFT_F16 && k->dtype != SIFT_F32)
        return sift_set_error(SIFT_E_DTYPE, "%s: k tensor '%s' is %s, expected f16 or f32", op, k->name,
                              sift_dtype_name(k->dtype));
    int64_t hq = q->shape[0], d = q->shape[1], hkv = k->shape[0];
    if (d != 64 && d != 128)
        return sift_set_error(SIFT_E_SHAPE, "%s: head dimension D = %lld is unsupported (64 or 128)", op, (long long)d);
    if (k->shape[2] != d)
        return sift_set_error(SIFT_E_SHAPE, "%s: k rows have %lld values but q has D = %lld", op,
                              (long long)k->shape[2], (long long)d);
    if (hq < 1 || hkv < 1)
        return sift_set_error(SIFT_E_SHAPE, "%s: need at least one head (Hq = %lld, Hkv = %lld)", op, (long long)hq,
                              (long long)hkv);
    if (hq % hkv != 0)
        return sift_set_error(SIFT_E_SHAPE, "%s: Hq = %lld query heads is not a multiple of Hkv = %lld KV heads", op,
                              (long long)hq, (long long)hkv);
    if (hq > 65535 || k->shape[1] > INT32_MAX)
        return sift_set_error(SIFT_E_SHAPE, "%s: too many heads or positions", op);
    if (v) {
        TRY(need_tensor(g, v, op, "v"));
        if (v->dtype != k->dtype)
            return sift_set_error(SIFT_E_DTYPE, "%s: v is %s but k is %s", op, sift_dtype_name(v->dtype),
                                  sift_dtype_name(k->dtype));
        TRY(need_rank(v, 3, op, "v"));
        for (int i = 0; i < 3; i++)
            if (v->shape[i] != k->shape[i])
                return sift_set_error(SIFT_E_SHAPE, "%s: v shape [%lld][%lld][%lld] differs from k [%lld][%lld][%lld]",
                                      op, (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2],
                                      (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2]);
    }
    return SIFT_OK;
}

static sift_status check_out(const sift_graph *g, const sift_tensor *t, sift_dtype dtype, int64_t d0, int64_t d1,
                             const char *op, const char *role)
{
    TRY(need_tensor(g, t, op, role));
    TRY(need_dtype(t, dtype, op, role));
    TRY(need_rank(t, 2, op, role));
    if (t->shape[0] != d0 || t->shape[1] != d1)
        return sift_set_error(SIFT_E_SHAPE, "%s: %s tensor '%s' is [%lld][%lld], expected [%lld][%lld]", op, role,
                              t->name, (long long)t->shape[0], (long long)t->shape[1], (long long)d0, (long long)d1);
    return SIFT_OK;
}

static sift_status check_scale(float scale, const char *op)
{
    if (!(scale > 0.0f) || scale > 1e30f) return sift_set_error(SIFT_E_INVALID, "%s: scale %g is not a positive finite number", op, (double)scale);
    return SIFT_OK;
}

static sift_status push_node(sift_graph *g, const sift_node *n)
{
    for (int i = 0; i < n->n_src; i++)
        if (n->src[i] == n->dst)
            return sift_set_error(SIFT_E_GRAPH, "%s: output '%s' is also an input", sift_op_name(n->op), n->dst->name);
    for (int i = 0; i < n->n_src; i++)
        if (n->src[i]->owner && n->src[i]->owner != g)
            return sift_set_error(SIFT_E_GRAPH, "%s: input '%s' is an intermediate of another graph", sift_op_name(n->op),
                                  n->src[i]->name);
    if (n->dst->owner && n->dst->owner != g)
        return sift_set_error(SIFT_E_GRAPH, "%s: output '%s' is an intermediate of another graph", sift_op_name(n->op),
                              n->dst->name);
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 8;
        sift_node *p = realloc(g->nodes, (size_t)cap * sizeof *p);
        if (!p) return sift_set_error(SIFT_E_NOMEM, "graph: out of memory adding a node");
        g->nodes = p;
        g->cap_nodes = cap;
    }
    g->nodes[g->n_nodes++] = *n;
    graph_changed(g);
    return SIFT_OK;
}

/* ---- ops ----------------------------------------------------------------------------------- */

sift_status sift_op_score(sift_graph *g, const sift_tensor *q, const sift_tensor *k, int64_t begin, int64_t end,
                          float scale, sift_tensor *scores)
{
    const char *op = "score";
    TRY(check_qkv(g, q, k, NULL, op));
    TRY(check_scale(scale, op));
    if (begin < 0 || end < begin || end > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "score: positions [%lld, %lld) outside the cache of %lld", (long long)begin,
                              (long long)end, (long long)k->shape[1]);
    TRY(check_out(g, scores, SIFT_F32, q->shape[0], end - begin, op, "scores"));
    sift_node n = {.op = SIFT_OP_SCORE, .n_src = 2, .src = {q, k}, .dst = scores};
    n.p.begin = begin;
    n.p.end = end;
    n.p.scale = scale;
    return push_node(g, &n);
}

sift_status sift_op_vote(sift_graph *g, sift_vote_mode mode, const sift_tensor *scores, sift_tensor *votes)
{
    const char *op = "vote";
    TRY(need_tensor(g, scores, op, "scores"));
    TRY(need_tensor(g, votes, op, "votes"));
    TRY(need_dtype(scores, SIFT_F32, op, "scores"));
    TRY(need_rank(scores, 2, op, "scores"));
    int64_t hq = scores->shape[0], m = scores->shape[1];
    if (hq < 1) return sift_set_error(SIFT_E_SHAPE, "vote: scores have no heads");
    if (mode == SIFT_VOTE_SOFTMAX_SUM) {
        TRY(check_out(g, votes, SIFT_F32, 1, m, op, "votes"));
    } else if (mode == SIFT_VOTE_KVHEAD_MAX) {
        TRY(need_rank(votes, 2, op, "votes"));
        int64_t hkv = votes->shape[0];
        if (hkv < 1 || hq % hkv != 0)
            return sift_set_error(SIFT_E_SHAPE, "vote: %lld query heads do not split into %lld KV-head groups",
                                  (long long)hq, (long long)hkv);
        TRY(check_out(g, votes, SIFT_F32, hkv, m, op, "votes"));
    } else {
        return sift_set_error(SIFT_E_INVALID, "vote: unknown vote mode %d", (int)mode);
    }
    sift_node n = {.op = SIFT_OP_VOTE, .n_src = 1, .src = {scores}, .dst = votes};
    n.p.vote = mode;
    return push_node(g, &n);
}

static sift_status check_select_params(const sift_select_params *p)
{
    if (!p) return sift_set_error(SIFT_E_INVALID, "select: params are NULL");
    if (p->n_ctx < 1) return sift_set_error(SIFT_E_SHAPE, "select: context N = %lld, need N >= 1", (long long)p->n_ctx);
    if (p->n_ctx > INT32_MAX) return sift_set_error(SIFT_E_SHAPE, "select: context N = %lld is too large", (long long)p->n_ctx);
    if (p->sink < 0 || p->window < 0 || p->budget < 0)
        return sift_set_error(SIFT_E_SHAPE, "select: sink %lld, window %lld and budget %lld must not be negative",
                              (long long)p->sink, (long long)p->window, (long long)p->budget);
    return SIFT_OK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int64_t sift_select_candidates(const sift_select_params *p)
{
    if (!p) return 0;
    return max64(0, p->n_ctx - p->sink - p->window);
}

int64_t sift_select_count(const sift_select_params *p)
{
    if (!p || p->n_ctx < 1) return 0;
    int64_t sink = min64(p->sink, p->n_ctx);
    int64_t win = p->n_ctx - max64(sink, p->n_ctx - p->window);
    return sink + min64(p->budget, sift_select_candidates(p)) + win;
}

sift_status sift_op_select(sift_graph *g, const sift_tensor *votes, const sift_select_params *p, sift_tensor *indices)
{
    const char *op = "select";
    TRY(need_tensor(g, votes, op, "votes"));
    TRY(check_select_params(p));
    TRY(need_dtype(votes, SIFT_F32, op, "votes"));
    TRY(need_rank(votes, 2, op, "votes"));
    int64_t lists = votes->shape[0], cand = sift_select_candidates(p);
    if (lists < 1) return sift_set_error(SIFT_E_SHAPE, "select: votes have no lists");
    if (votes->shape[1] != cand)
        return sift_set_error(SIFT_E_SHAPE, "select: votes have %lld entries but N - S - W gives %lld candidates",
                              (long long)votes->shape[1], (long long)cand);
    TRY(check_out(g, indices, SIFT_I32, lists, sift_select_count(p), op, "indices"));
    sift_node n = {.op = SIFT_OP_SELECT, .n_src = 1, .src = {votes}, .dst = indices};
    n.p.sel = *p;
    return push_node(g, &n);
}

sift_status sift_op_gather_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                  const sift_tensor *indices, float scale, sift_tensor *out)
{
    const char *op = "gather_attend";
    TRY(check_qkv(g, q, k, v, op));
    TRY(check_scale(scale, op));
    TRY(need_tensor(g, indices, op, "indices"));
    TRY(need_dtype(indices, SIFT_I32, op, "indices"));
    TRY(need_rank(indices, 2, op, "indices"));
    if (indices->shape[0] != 1 && indices->shape[0] != k->shape[0])
        return sift_set_error(SIFT_E_SHAPE, "gather_attend: %lld index lists, expected 1 or Hkv = %lld",
                              (long long)indices->shape[0], (long long)k->shape[0]);
    TRY(check_out(g, out, SIFT_F32, q->shape[0], q->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_GATHER_ATTEND, .n_src = 4, .src = {q, k, v, indices}, .dst = out};
    n.p.scale = scale;
    return push_node(g, &n);
}

sift_status sift_op_dense_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                 int64_t n_ctx, float scale, sift_tensor *out)
{
    const char *op = "dense_attend";
    TRY(check_qkv(g, q, k, v, op));
    TRY(check_scale(scale, op));
    if (n_ctx < 1 || n_ctx > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "dense_attend: context N = %lld outside 1..%lld (the cache)", (long long)n_ctx,
                              (long long)k->shape[1]);
    TRY(check_out(g, out, SIFT_F32, q->shape[0], q->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_DENSE_ATTEND, .n_src = 3, .src = {q, k, v}, .dst = out};
    n.p.n_ctx = n_ctx;
    n.p.scale = scale;
    return push_node(g, &n);
}

/* ---- running ------------------------------------------------------------------------------- */

/* Every input must hold data: written by the host, or produced by an earlier node. */
static sift_status check_connected(const sift_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const sift_node *n = &g->nodes[i];
        for (int s = 0; s < n->n_src; s++) {
            const sift_tensor *t = n->src[s];
            if (t->nbytes == 0 || (t->has_data && t->owner == NULL)) continue; /* empty tensors hold nothing to read */
            bool produced = false;
            for (int j = 0; j < i && !produced; j++) produced = g->nodes[j].dst == t;
            if (!produced)
                return sift_set_error(SIFT_E_GRAPH,
                                      "node %d (%s) reads tensor '%s', which no earlier node produces and the host "
                                      "never wrote",
                                      i, sift_op_name(n->op), t->name[0] ? t->name : "(unnamed)");
        }
    }
    return SIFT_OK;
}

sift_status sift_graph_compute_timed(sift_graph *g, double *node_us)
{
    if (!g) return sift_set_error(SIFT_E_INVALID, "sift_graph_compute: graph is NULL");
    TRY(check_connected(g));
    if (g->n_nodes == 0) return SIFT_OK;
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
    TRY(vt->graph_compute(be, g, node_us));
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].dst->has_data = true;
    return SIFT_OK;
}

sift_status sift_graph_compute(sift_graph *g) { return sift_graph_compute_timed(g, NULL); }

int sift_graph_node_count(const sift_graph *g) { return g ? g->n_nodes : 0; }

const char *sift_graph_node_op_name(const sift_graph *g, int node)
{
    if (!g || node < 0 || node >= g->n_nodes) return "";
    return sift_op_name(g->nodes[node].op);
}

double sift_graph_node_bytes(const sift_graph *g, int node)
{
    if (!g || node < 0 || node >= g->n_nodes) return 0.0;
    const sift_node *n = &g->nodes[node];
    double in0 = (double)n->src[0]->nbytes, out = (double)n->dst->nbytes;
    switch (n->op) {
    case SIFT_OP_SCORE: {
        const sift_tensor *k = n->src[1];
        double rows = (double)k->shape[0] * (double)(n->p.end - n->p.begin);
        return in0 + rows * (double)k->shape[2] * (double)sift_dtype_size(k->dtype) + out;
    }
    case SIFT_OP_VOTE:
    case SIFT_OP_SELECT: return in0 + out;
    case SIFT_OP_GATHER_ATTEND: {
        const sift_tensor *k = n->src[1], *idx = n->src[3];
        double lists = (double)idx->shape[0], len = (double)idx->shape[1];
        double rows_per_list = lists == 1 ? (double)k->shape[0] : 1.0;
        double row = (double)k->shape[2] * (double)sift_dtype_size(k->dtype);
        return in0 + (double)idx->nbytes + 2.0 * lists * len * rows_per_list * row + out;
    }
    case SIFT_OP_DENSE_ATTEND: {
        const sift_tensor *k = n->src[1];
        double row = (double)k->shape[2] * (double)sift_dtype_size(k->dtype);
        return in0 + 2.0 * (double)k->shape[0] * (double)n->p.n_ctx * row + out;
    }
    default: return 0.0;
    }
}
