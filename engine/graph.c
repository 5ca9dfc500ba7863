/* The dispatch graph: nodes appended by op constructors that check shapes and types, a
 * connectivity check before running, and the bytes each op must move. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

const char *sift_op_name(sift_op op)
{
    static const char *const names[SIFT_OP_COUNT] = {"score",   "vote",   "select", "gather_attend", "dense_attend",
                                                     "get_rows", "rmsnorm", "matmul", "rope",          "swiglu",
                                                     "add",     "kv_write", "causal_attend", "sel_cache_check", "fill_range",
                                                     "mean_rows", "causal_attend_sparse"};
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

sift_status sift_graph_push_node(sift_graph *g, const sift_node *n)
{
    for (int i = 0; i < n->n_src; i++)
        if (n->src[i] == n->dst)
            return sift_set_error(SIFT_E_GRAPH, "%s: output '%s' is also an input", sift_op_name(n->op), n->dst->name);
    for (int i = 0; i < n->n_src; i++)
        if (n->src[i]->owner && n->src[i]->owner != g)
            return sift_set_error(SIFT_E_GRAPH, "%s: input '%s' is an intermediate of another graph", sift_op_name(n->op),
                                  n->src[i]->name);
    sift_node node = *n;
    if (g->skip) {
        if (n->op != SIFT_OP_SCORE && n->op != SIFT_OP_VOTE && n->op != SIFT_OP_SELECT)
            return sift_set_error(SIFT_E_UNSUPPORTED, "%s: only score, vote and select take a predicate (sift_graph_skip_if)",
                                  sift_op_name(n->op));
        node.skip = g->skip;
        node.skip_elem = g->skip_elem;
    }
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
    g->nodes[g->n_nodes++] = node;
    graph_changed(g);
    return SIFT_OK;
}

sift_status sift_graph_skip_if(sift_graph *g, const sift_tensor *flag, int64_t element)
{
    if (!g) return sift_set_error(SIFT_E_INVALID, "sift_graph_skip_if: graph is NULL");
    if (flag) {
        TRY(sift_need_tensor(g, flag, "skip_if", "flag"));
        TRY(sift_need_dtype(flag, SIFT_F32, "skip_if", "flag"));
        if (flag->pages) return sift_set_error(SIFT_E_INVALID, "skip_if: the flag is a paged view");
        if (element < 0 || (size_t)element >= flag->nbytes / sizeof(float))
            return sift_set_error(SIFT_E_SHAPE, "skip_if: element %lld outside '%s' of %zu values", (long long)element,
                                  flag->name, flag->nbytes / sizeof(float));
    }
    g->skip = flag;
    g->skip_elem = flag ? element : 0;
    return SIFT_OK;
}

/* ---- running ------------------------------------------------------------------------------- */

/* The tensor that owns a view's storage (a tensor owns its own). */
static const sift_tensor *storage(const sift_tensor *t) { return t->parent ? t->parent : t; }

/* Every input must hold data: written by the host, or produced by an earlier node (into the same
 * storage: a view of a node's output counts as produced). */
static sift_status check_connected(const sift_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const sift_node *n = &g->nodes[i];
        /* the node's inputs, the page tables of its paged inputs and output, and its predicate */
        const sift_tensor *reads[2 * SIFT_NODE_MAX_SRC + 2];
        int n_reads = 0;
        for (int s = 0; s < n->n_src; s++) {
            reads[n_reads++] = n->src[s];
            if (n->src[s]->pages) reads[n_reads++] = n->src[s]->pages;
        }
        if (n->dst->pages) reads[n_reads++] = n->dst->pages;
        if (n->skip) reads[n_reads++] = n->skip;
        for (int s = 0; s < n_reads; s++) {
            const sift_tensor *t = reads[s], *root = storage(t);
            if (t->nbytes == 0) continue; /* empty tensors hold nothing to read */
            if ((t->has_data || root->has_data) && t->owner == NULL) continue;
            bool produced = false;
            for (int j = 0; j < i && !produced; j++) produced = storage(g->nodes[j].dst) == root;
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
    for (int i = 0; i < g->n_nodes; i++) {
        g->nodes[i].dst->has_data = true;
        if (g->nodes[i].dst->parent) g->nodes[i].dst->parent->has_data = true;
    }
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
    double in0 = n->n_src ? (double)n->src[0]->nbytes : 0.0, out = (double)n->dst->nbytes;
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
    case SIFT_OP_GET_ROWS: {
        const sift_tensor *table = n->src[0];
        return (double)n->src[1]->nbytes + (double)n->src[1]->shape[0] * (double)sift_dtype_row_bytes(table->dtype, table->shape[1]) + out;
    }
    case SIFT_OP_MATMUL: return in0 + (double)n->src[1]->nbytes + (n->n_src > 2 ? (double)n->src[2]->nbytes : 0.0) + out;
    case SIFT_OP_RMSNORM:
    case SIFT_OP_SWIGLU:
    case SIFT_OP_ADD: return in0 + (double)n->src[1]->nbytes + out;
    case SIFT_OP_ROPE: return 2.0 * in0;
    case SIFT_OP_KV_WRITE: {
        const sift_tensor *c = n->dst;
        return in0 + (double)n->src[0]->shape[0] * (double)c->shape[0] * (double)c->shape[2] * (double)sift_dtype_size(c->dtype);
    }
    case SIFT_OP_CAUSAL_ATTEND: {
        const sift_tensor *k = n->src[1];
        double row = (double)k->shape[2] * (double)sift_dtype_size(k->dtype);
        return 2.0 * in0 + 2.0 * (double)k->shape[0] * (double)(n->p.pos0 + n->src[0]->shape[0]) * row;
    }
    case SIFT_OP_CAUSAL_SPARSE: {
        const sift_tensor *k = n->src[1], *idx = n->src[3];
        double row = (double)k->shape[2] * (double)sift_dtype_size(k->dtype);
        double rows = (double)k->shape[0] * ((double)idx->shape[1] + (double)n->src[0]->shape[0]);
        return 2.0 * in0 + (double)idx->nbytes + 2.0 * rows * row;
    }
    case SIFT_OP_SEL_CACHE_CHECK: return in0 + 2.0 * out;
    case SIFT_OP_FILL_RANGE: return (double)n->dst->shape[0] * (double)(n->dst->shape[1] - n->p.col0) * 4.0;
    case SIFT_OP_MEAN_ROWS: return in0 + out;
    default: return 0.0;
    }
}
