/* The dispatch graph: nodes appended by op constructors that check shapes and types, a
 * connectivity check before running, and the bytes each op must move. */
#include "graph_pool.h"
#include "engine.h"

#include <stdlib.h>
#include <string.h>

/* The op table (engine/ops.def): one row per op, in the order of the enum. */
static const sift_op_info op_table[] = {
#define SIFT_OP(id, name, min_src, max_src, flags) {#name, min_src, max_src, flags, sift_bytes_##name},
#include "ops.def"
#undef SIFT_OP
};
_Static_assert(sizeof op_table / sizeof op_table[0] == SIFT_OP_COUNT, "the op table and enum sift_op disagree");

const sift_op_info *sift_op_info_of(sift_op op)
{
    static const sift_op_info unknown = {"unknown", 0, 0, 0, NULL};
    return (op >= 0 && op < SIFT_OP_COUNT) ? &op_table[op] : &unknown;
}

const char *sift_op_name(sift_op op) { return sift_op_info_of(op)->name; }

sift_status sift_graph_create(sift_context *ctx, sift_graph **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_graph_create: out is NULL");
    *out = NULL;
    if (!ctx) return sift_set_error(SIFT_E_INVALID, "sift_graph_create: context is NULL");
    sift_graph *g = calloc(1, sizeof *g);
    if (!g) return sift_set_error(SIFT_E_NOMEM, "sift_graph_create: out of memory");
    g->ctx = ctx;
    sift_context_retain(ctx);
    *out = g;
    return SIFT_OK;
}

void sift_graph_destroy(sift_graph *g)
{
    if (!g) return;
    (void)sift_graph_wait(g); /* a run still in flight ends before its recording and storage go */
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
    if (g->backend_cache) {
        sift_context_lock(g->ctx);
        vt->graph_release(be, g);
        sift_context_unlock(g->ctx);
    }
    for (int i = g->n_owned - 1; i >= 0; i--) sift_tensor_destroy(g->owned[i]); /* views before their parents */
    sift_graph_pool_give(g->ctx, sift_context_graph_pool(g->ctx), g->pooled, g->n_pooled);
    free(g->pooled);
    free(g->owned);
    free(g->nodes);
    sift_context_release(g->ctx);
    free(g);
}

static void graph_changed(sift_graph *g)
{
    (void)sift_graph_wait(g);
    g->version++;
    if (g->backend_cache) {
        void *be;
        const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
        sift_context_lock(g->ctx);
        vt->graph_release(be, g);
        sift_context_unlock(g->ctx);
        g->backend_cache = NULL;
    }
}

/* Room for one more tensor the graph owns. */
static sift_status reserve_owned(sift_graph *g)
{
    if (g->n_owned < g->cap_owned) return SIFT_OK;
    int cap = g->cap_owned ? 2 * g->cap_owned : 8;
    sift_tensor **p = realloc(g->owned, (size_t)cap * sizeof *p);
    if (!p) return sift_set_error(SIFT_E_NOMEM, "graph: out of memory");
    g->owned = p;
    sift_tensor **q = realloc(g->pooled, (size_t)cap * sizeof *q);
    if (!q) return sift_set_error(SIFT_E_NOMEM, "graph: out of memory");
    g->pooled = q;
    g->cap_owned = cap;
    return SIFT_OK;
}

sift_status sift_graph_view(sift_graph *g, const sift_tensor *parent, sift_dtype dtype, int ndim, const int64_t *shape,
                            size_t byte_offset, sift_tensor **out)
{
    if (!g || !out) return sift_set_error(SIFT_E_INVALID, "sift_graph_view: null argument");
    TRY(reserve_owned(g));
    TRY(sift_tensor_view((sift_tensor *)parent, dtype, ndim, shape, byte_offset, out));
    g->owned[g->n_owned++] = *out;
    return SIFT_OK;
}

sift_status sift_graph_new_tensor(sift_graph *g, sift_dtype dtype, int ndim, const int64_t *shape, const char *name,
                                  sift_tensor **out)
{
    if (!g || !out) return sift_set_error(SIFT_E_INVALID, "sift_graph_new_tensor: null argument");
    *out = NULL;
    TRY(reserve_owned(g));
    /* a view of a pool buffer (graph_pool.c); an empty tensor, or an unknown dtype (which
     * sift_tensor_create reports), is a tensor of its own */
    size_t bytes = 0;
    if ((int)dtype >= 0 && dtype < SIFT_DTYPE_COUNT) TRY(sift_shape_bytes(dtype, ndim, shape, &bytes));
    sift_status s;
    if (bytes) {
        sift_tensor *buf = NULL;
        TRY(sift_graph_pool_take(g->ctx, sift_context_graph_pool(g->ctx), bytes, &buf));
        s = sift_tensor_view(buf, dtype, ndim, shape, 0, out);
        if (s != SIFT_OK) {
            sift_graph_pool_give(g->ctx, sift_context_graph_pool(g->ctx), &buf, 1);
            return s;
        }
        g->pooled[g->n_pooled++] = buf;
    } else {
        s = sift_tensor_create(g->ctx, dtype, ndim, shape, out);
        if (s != SIFT_OK) return s;
    }
    (*out)->owner = g;
    if (name) sift_tensor_set_name(*out, name);
    g->owned[g->n_owned++] = *out;
    return SIFT_OK;
}

/* The tensor that owns a view's storage (a tensor owns its own). */
static const sift_tensor *storage(const sift_tensor *t) { return t->parent ? t->parent : t; }

/* What the op table says of a node's operands: how many inputs, and which may be paged views. */
static sift_status check_operands(const sift_node *n)
{
    const sift_op_info *op = sift_op_info_of(n->op);
    if (n->n_src < op->min_src || n->n_src > op->max_src || n->n_src > SIFT_NODE_MAX_SRC)
        return sift_set_error(SIFT_E_GRAPH, "%s: %d inputs (the op takes %d to %d)", op->name, n->n_src, op->min_src,
                              op->max_src);
    for (int i = 0; i < n->n_src; i++) {
        if (!n->src[i]) return sift_set_error(SIFT_E_INVALID, "%s: input %d is NULL", op->name, i);
        if (n->src[i]->pages && !((op->flags & SIFT_OPF_PAGED_KV) && (i == 1 || i == 2)))
            return sift_set_error(SIFT_E_INVALID, "%s: input %d '%s' is a paged view (paged views are the K/V operands "
                                                  "of attention ops and of kv_gather, and kv_write's cache)",
                                  op->name, i, n->src[i]->name);
    }
    if (n->dst->pages && !(op->flags & SIFT_OPF_PAGED_DST))
        return sift_set_error(SIFT_E_INVALID, "%s: writes the paged view '%s' (only kv_write writes one)", op->name,
                              n->dst->name);
    return SIFT_OK;
}

sift_status sift_graph_push_node(sift_graph *g, const sift_node *n)
{
    TRY(check_operands(n));
    for (int i = 0; i < n->n_src; i++)
        if (n->src[i] == n->dst)
            return sift_set_error(SIFT_E_GRAPH, "%s: output '%s' is also an input", sift_op_name(n->op), n->dst->name);
    for (int i = 0; i < n->n_src; i++)
        if (n->src[i]->owner && n->src[i]->owner != g)
            return sift_set_error(SIFT_E_GRAPH, "%s: input '%s' is an intermediate of another graph", sift_op_name(n->op),
                                  n->src[i]->name);
    sift_node node = *n;
    if (g->skip) {
        if (!(sift_op_info_of(n->op)->flags & SIFT_OPF_SKIPPABLE))
            return sift_set_error(SIFT_E_UNSUPPORTED, "%s: only score, score_max, vote, select and kv_gather take a predicate (sift_graph_skip_if)",
                                  sift_op_name(n->op));
        const sift_tensor *f = g->skip, *d = n->dst;
        if (storage(f) == storage(d) && f->offset < d->offset + d->nbytes && d->offset < f->offset + f->nbytes)
            return sift_set_error(SIFT_E_GRAPH, "%s: writes '%s', the tensor of its own predicate", sift_op_name(n->op),
                                  d->name);
        node.skip = g->skip;
        node.skip_elem = g->skip_elem;
    }
    node.stage = g->stage;
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

void sift_graph_set_stage(sift_graph *g, const char *stage)
{
    if (g) g->stage = stage;
}

/* ---- running ------------------------------------------------------------------------------- */

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

sift_status sift_graph_check_supported(const sift_graph *g)
{
    if (!g) return sift_set_error(SIFT_E_INVALID, "sift_graph_check_supported: graph is NULL");
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
    if (!vt->supports_op) return SIFT_OK;
    for (int i = 0; i < g->n_nodes; i++)
        if (!vt->supports_op(be, &g->nodes[i]))
            return sift_set_error(SIFT_E_UNSUPPORTED, "node %d: op '%s' is not supported by the %s backend", i,
                                  sift_op_name(g->nodes[i].op), vt->name);
    return SIFT_OK;
}

/* The checks before a run, once per version of the graph (a prepared graph has passed them before
 * its run: they read every node's inputs against every earlier node's output). */
static sift_status check_run(sift_graph *g)
{
    if (g->checked == g->version + 1) return SIFT_OK;
    TRY(check_connected(g));
    TRY(sift_graph_check_supported(g));
    g->checked = g->version + 1;
    return SIFT_OK;
}

static void mark_produced(sift_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        g->nodes[i].dst->has_data = true;
        if (g->nodes[i].dst->parent) g->nodes[i].dst->parent->has_data = true;
    }
}

/* Runs g: to the end (timed where node_us or span_us is given), or (submit) started and left in
 * flight where the backend can run it so. */
static sift_status graph_run(sift_graph *g, double *node_us, double *span_us, bool submit)
{
    TRY(sift_graph_wait(g));
    TRY(check_run(g));
    if (g->n_nodes == 0) return SIFT_OK;
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
    const bool in_flight = submit && vt->graph_submit && vt->sync;
    sift_context_lock(g->ctx);
    const sift_status s = in_flight ? vt->graph_submit(be, g) : vt->graph_compute(be, g, node_us, span_us);
    sift_context_unlock(g->ctx);
    TRY(s);
    g->in_flight = in_flight;
    mark_produced(g); /* in flight: for the graphs built meanwhile, what it writes is there when they run */
    return SIFT_OK;
}

static sift_status graph_compute(sift_graph *g, double *node_us, double *span_us)
{
    if (!g) return sift_set_error(SIFT_E_INVALID, "sift_graph_compute: graph is NULL");
    return graph_run(g, node_us, span_us, false);
}

sift_status sift_graph_prepare(sift_graph *g)
{
    TRY(check_run(g));
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
    if (g->n_nodes == 0 || !vt->graph_prepare) return SIFT_OK;
    sift_context_lock(g->ctx);
    const sift_status s = vt->graph_prepare(be, g);
    sift_context_unlock(g->ctx);
    return s;
}

sift_status sift_graph_submit(sift_graph *g) { return graph_run(g, NULL, NULL, true); }

sift_status sift_graph_wait(sift_graph *g)
{
    if (!g || !g->in_flight) return SIFT_OK;
    void *be;
    const sift_backend_vtable *vt = sift_context_vtable(g->ctx, &be);
    sift_context_lock(g->ctx);
    const sift_status s = vt->sync(be);
    sift_context_unlock(g->ctx);
    g->in_flight = false;
    return s;
}

void sift_graph_lend_storage(sift_graph *g)
{
    if (!g) return;
    sift_graph_pool_give(g->ctx, sift_context_graph_pool(g->ctx), g->pooled, g->n_pooled);
    g->n_pooled = 0;
}

sift_status sift_graph_compute(sift_graph *g) { return graph_compute(g, NULL, NULL); }
sift_status sift_graph_compute_timed(sift_graph *g, double *node_us) { return graph_compute(g, node_us, NULL); }

sift_status sift_graph_compute_span(sift_graph *g, double *us)
{
    if (!us) return sift_set_error(SIFT_E_INVALID, "sift_graph_compute_span: us is NULL");
    *us = 0.0; /* a graph without nodes takes no time */
    return graph_compute(g, NULL, us);
}

int sift_graph_node_count(const sift_graph *g) { return g ? g->n_nodes : 0; }

const char *sift_graph_node_op_name(const sift_graph *g, int node)
{
    if (!g || node < 0 || node >= g->n_nodes) return "";
    return sift_op_name(g->nodes[node].op);
}

double sift_graph_node_bytes(const sift_graph *g, int node)
{
    if (!g || node < 0 || node >= g->n_nodes) return 0.0;
    const sift_op_info *op = sift_op_info_of(g->nodes[node].op);
    return op->bytes ? op->bytes(&g->nodes[node]) : 0.0;
}
