/* The transformer ops around attention: embedding rows, RMSNorm, matmul, RoPE, SwiGLU, residual
 * add, KV-cache write, causal (prefill) attention. Each constructor checks types and shapes. */
#include "engine.h"

#include <math.h>

void sift_rope_freqs(const sift_rope_params *p, float *freq)
{
    for (int i = 0; i < p->n_rot / 2; i++) freq[i] = powf(p->base, -2.0f * (float)i / (float)p->n_rot);
}


static bool is_weight_type(sift_dtype t)
{
    return t == SIFT_F32 || t == SIFT_F16 || t == SIFT_BF16 || t == SIFT_Q8_0 || t == SIFT_Q4_0 || t == SIFT_Q4_K ||
           t == SIFT_Q5_K || t == SIFT_Q6_K;
}

static sift_status need_same_shape(const sift_tensor *a, const sift_tensor *b, const char *op)
{
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    if (!same)
        return sift_set_error(SIFT_E_SHAPE, "%s: '%s' and '%s' differ in shape", op, a->name[0] ? a->name : "(a)",
                              b->name[0] ? b->name : "(b)");
    return SIFT_OK;
}

static sift_status need_f32(const sift_graph *g, const sift_tensor *t, const char *op, const char *role)
{
    TRY(sift_need_tensor(g, t, op, role));
    return sift_need_dtype(t, SIFT_F32, op, role);
}

sift_status sift_op_get_rows(sift_graph *g, const sift_tensor *table, const sift_tensor *ids, sift_tensor *out)
{
    const char *op = "get_rows";
    TRY(sift_need_tensor(g, table, op, "table"));
    TRY(sift_need_tensor(g, ids, op, "ids"));
    TRY(sift_need_rank(table, 2, op, "table"));
    if (!is_weight_type(table->dtype))
        return sift_set_error(SIFT_E_DTYPE, "get_rows: table is %s, expected a float or quantized type",
                              sift_dtype_name(table->dtype));
    TRY(sift_need_dtype(ids, SIFT_I32, op, "ids"));
    TRY(sift_need_rank(ids, 1, op, "ids"));
    TRY(sift_check_out(g, out, SIFT_F32, ids->shape[0], table->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_GET_ROWS, .n_src = 2, .src = {table, ids}, .dst = out};
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_rmsnorm(sift_graph *g, const sift_tensor *x, const sift_tensor *weight, float eps, sift_tensor *out)
{
    const char *op = "rmsnorm";
    TRY(need_f32(g, x, op, "x"));
    TRY(need_f32(g, weight, op, "weight"));
    TRY(sift_need_rank(x, 2, op, "x"));
    TRY(sift_need_rank(weight, 1, op, "weight"));
    if (weight->shape[0] != x->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "rmsnorm: weight has %lld values for rows of %lld", (long long)weight->shape[0],
                              (long long)x->shape[1]);
    if (!(eps >= 0.0f) || eps > 1.0f) return sift_set_error(SIFT_E_INVALID, "rmsnorm: eps %g outside [0, 1]", (double)eps);
    TRY(sift_check_out(g, out, SIFT_F32, x->shape[0], x->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_RMSNORM, .n_src = 2, .src = {x, weight}, .dst = out};
    n.p.eps = eps;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_layernorm(sift_graph *g, const sift_tensor *x, const sift_tensor *weight, const sift_tensor *bias,
                              float eps, sift_tensor *out)
{
    const char *op = "layernorm";
    TRY(need_f32(g, x, op, "x"));
    TRY(need_f32(g, weight, op, "weight"));
    TRY(sift_need_rank(x, 2, op, "x"));
    TRY(sift_need_rank(weight, 1, op, "weight"));
    if (weight->shape[0] != x->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "layernorm: weight has %lld values for rows of %lld", (long long)weight->shape[0],
                              (long long)x->shape[1]);
    if (bias) {
        TRY(need_f32(g, bias, op, "bias"));
        TRY(sift_need_rank(bias, 1, op, "bias"));
        if (bias->shape[0] != x->shape[1])
            return sift_set_error(SIFT_E_SHAPE, "layernorm: bias has %lld values for rows of %lld",
                                  (long long)bias->shape[0], (long long)x->shape[1]);
    }
    if (!(eps >= 0.0f) || eps > 1.0f) return sift_set_error(SIFT_E_INVALID, "layernorm: eps %g outside [0, 1]", (double)eps);
    TRY(sift_check_out(g, out, SIFT_F32, x->shape[0], x->shape[1], op, "out"));
    sift_node n = {.op = SIFT_OP_LAYERNORM, .n_src = bias ? 3 : 2, .src = {x, weight, bias}, .dst = out};
    n.p.eps = eps;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_matmul(sift_graph *g, const sift_tensor *x, const sift_tensor *w, const sift_tensor *bias,
                           sift_tensor *out)
{
    const char *op = "matmul";
    TRY(need_f32(g, x, op, "x"));
    TRY(sift_need_tensor(g, w, op, "w"));
    TRY(sift_need_rank(x, 2, op, "x"));
    TRY(sift_need_rank(w, 2, op, "w"));
    if (!is_weight_type(w->dtype))
        return sift_set_error(SIFT_E_DTYPE, "matmul: w is %s, expected a float or quantized type", sift_dtype_name(w->dtype));
    if (w->shape[1] != x->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "matmul: x rows have %lld values but w rows have %lld", (long long)x->shape[1],
                              (long long)w->shape[1]);
    if (bias) {
        TRY(need_f32(g, bias, op, "bias"));
        TRY(sift_need_rank(bias, 1, op, "bias"));
        if (bias->shape[0] != w->shape[0])
            return sift_set_error(SIFT_E_SHAPE, "matmul: bias has %lld values for %lld outputs", (long long)bias->shape[0],
                                  (long long)w->shape[0]);
    }
    TRY(sift_check_out(g, out, SIFT_F32, x->shape[0], w->shape[0], op, "out"));
    sift_node n = {.op = SIFT_OP_MATMUL, .n_src = bias ? 3 : 2, .src = {x, w, bias}, .dst = out};
    return sift_graph_push_node(g, &n);
}

/* [T][H][D] f32 */
static sift_status need_thd(const sift_graph *g, const sift_tensor *t, const char *op, const char *role)
{
    TRY(need_f32(g, t, op, role));
    return sift_need_rank(t, 3, op, role);
}

sift_status sift_op_rope(sift_graph *g, const sift_tensor *x, int64_t pos0, const sift_tensor *factors,
                         const sift_rope_params *p, sift_tensor *out)
{
    const char *op = "rope";
    TRY(need_thd(g, x, op, "x"));
    TRY(sift_check_rope(p, x->shape[2], op));
    if (pos0 < 0 || pos0 > INT32_MAX) return sift_set_error(SIFT_E_SHAPE, "rope: position %lld", (long long)pos0);
    if (factors) {
        TRY(need_f32(g, factors, op, "factors"));
        if (factors->ndim != 1 || factors->shape[0] != p->n_rot / 2)
            return sift_set_error(SIFT_E_SHAPE, "rope: factors must be [n_rot/2 = %d]", p->n_rot / 2);
    }
    TRY(need_thd(g, out, op, "out"));
    TRY(need_same_shape(x, out, op));
    sift_node n = {.op = SIFT_OP_ROPE, .n_src = factors ? 2 : 1, .src = {x, factors}, .dst = out};
    n.p.pos0 = pos0;
    n.p.rope = *p;
    sift_rope_freqs(p, n.p.rope_freq);
    return sift_graph_push_node(g, &n);
}

static sift_status elementwise(sift_graph *g, sift_op opcode, const sift_tensor *a, const sift_tensor *b,
                               sift_tensor *out)
{
    const char *op = sift_op_name(opcode);
    TRY(need_f32(g, a, op, "first input"));
    TRY(need_f32(g, b, op, "second input"));
    TRY(need_f32(g, out, op, "out"));
    TRY(need_same_shape(a, b, op));
    TRY(need_same_shape(a, out, op));
    sift_node n = {.op = opcode, .n_src = 2, .src = {a, b}, .dst = out};
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_swiglu(sift_graph *g, const sift_tensor *gate, const sift_tensor *up, sift_tensor *out)
{
    return elementwise(g, SIFT_OP_SWIGLU, gate, up, out);
}

sift_status sift_op_silu(sift_graph *g, const sift_tensor *x, sift_tensor *out)
{
    const char *op = "silu";
    TRY(need_f32(g, x, op, "x"));
    TRY(need_f32(g, out, op, "out"));
    TRY(need_same_shape(x, out, op));
    sift_node n = {.op = SIFT_OP_SILU, .n_src = 1, .src = {x}, .dst = out};
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_add(sift_graph *g, const sift_tensor *a, const sift_tensor *b, sift_tensor *out)
{
    return elementwise(g, SIFT_OP_ADD, a, b, out);
}

sift_status sift_op_kv_write(sift_graph *g, const sift_tensor *src, int64_t pos0, sift_tensor *cache)
{
    const char *op = "kv_write";
    TRY(need_thd(g, src, op, "src"));
    TRY(sift_need_tensor(g, cache, op, "cache"));
    TRY(sift_need_rank(cache, 3, op, "cache"));
    if (cache->dtype != SIFT_F16 && cache->dtype != SIFT_F32 && cache->dtype != SIFT_I8)
        return sift_set_error(SIFT_E_DTYPE, "kv_write: cache is %s, expected f16, f32 or i8", sift_dtype_name(cache->dtype));
    const int64_t row_extra = sift_key_row_extra(cache->dtype);
    if (src->shape[1] != cache->shape[0] || src->shape[2] + row_extra != cache->shape[2])
        return sift_set_error(SIFT_E_SHAPE, "kv_write: rows [%lld][%lld] do not fit a cache of [%lld][.][%lld]",
                              (long long)src->shape[1], (long long)src->shape[2], (long long)cache->shape[0],
                              (long long)cache->shape[2]);
    if (pos0 < 0 || pos0 + src->shape[0] > cache->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "kv_write: positions [%lld, %lld) outside the cache of %lld", (long long)pos0,
                              (long long)(pos0 + src->shape[0]), (long long)cache->shape[1]);
    sift_node n = {.op = SIFT_OP_KV_WRITE, .n_src = 1, .src = {src}, .dst = cache};
    n.p.pos0 = pos0;
    return sift_graph_push_node(g, &n);
}

sift_status sift_op_causal_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                                  int64_t pos0, float scale, sift_tensor *out)
{
    const char *op = "causal_attend";
    TRY(need_thd(g, q, op, "q"));
    /* the per-token checks of the decode ops, on one token's [Hq][D] */
    sift_tensor one = *q;
    one.ndim = 2;
    one.shape[0] = q->shape[1];
    one.shape[1] = q->shape[2];
    TRY(sift_check_qkv(g, &one, k, v, op));
    TRY(sift_check_scale(scale, op));
    if (pos0 < 0 || pos0 + q->shape[0] > k->shape[1])
        return sift_set_error(SIFT_E_SHAPE, "causal_attend: positions [%lld, %lld) outside the cache of %lld",
                              (long long)pos0, (long long)(pos0 + q->shape[0]), (long long)k->shape[1]);
    TRY(need_thd(g, out, op, "out"));
    TRY(need_same_shape(q, out, op));
    sift_node n = {.op = SIFT_OP_CAUSAL_ATTEND, .n_src = 3, .src = {q, k, v}, .dst = out};
    n.p.pos0 = pos0;
    n.p.walk = (sift_attend_walk){.tokens = q->shape[0], .n = pos0 + q->shape[0]};
    n.p.scale = scale;
    return sift_graph_push_node(g, &n);
}

/* ---- the bytes each op must move (the op table's bytes column) ------------------------------ */

double sift_bytes_get_rows(const sift_node *n)
{
    const sift_tensor *table = n->src[0];
    return (double)n->src[1]->nbytes + (double)n->src[1]->shape[0] * (double)sift_dtype_row_bytes(table->dtype, table->shape[1]) +
           (double)n->dst->nbytes;
}

double sift_bytes_matmul(const sift_node *n)
{
    return (double)n->src[0]->nbytes + (double)n->src[1]->nbytes + (n->n_src > 2 ? (double)n->src[2]->nbytes : 0.0) +
           (double)n->dst->nbytes;
}

/* the two inputs and the output of an elementwise op (rmsnorm: x, weight, out) */
static double two_in_one_out(const sift_node *n)
{
    return (double)n->src[0]->nbytes + (double)n->src[1]->nbytes + (double)n->dst->nbytes;
}
double sift_bytes_rmsnorm(const sift_node *n) { return two_in_one_out(n); }
double sift_bytes_swiglu(const sift_node *n) { return two_in_one_out(n); }
double sift_bytes_add(const sift_node *n) { return two_in_one_out(n); }

double sift_bytes_layernorm(const sift_node *n)
{
    return two_in_one_out(n) + (n->n_src > 2 ? (double)n->src[2]->nbytes : 0.0);
}
double sift_bytes_silu(const sift_node *n) { return (double)n->src[0]->nbytes + (double)n->dst->nbytes; }

double sift_bytes_rope(const sift_node *n) { return 2.0 * (double)n->src[0]->nbytes; }

double sift_bytes_kv_write(const sift_node *n)
{
    const sift_tensor *c = n->dst;
    return (double)n->src[0]->nbytes +
           (double)n->src[0]->shape[0] * (double)c->shape[0] * (double)c->shape[2] * (double)sift_dtype_size(c->dtype);
}

double sift_bytes_causal_attend(const sift_node *n)
{
    const sift_tensor *k = n->src[1];
    const double row = (double)k->shape[2] * (double)sift_dtype_size(k->dtype);
    return 2.0 * (double)n->src[0]->nbytes + 2.0 * (double)k->shape[0] * (double)(n->p.pos0 + n->src[0]->shape[0]) * row;
}
