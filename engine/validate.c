/* Checks shared by the op constructors: each names the op, the tensor and the numbers. */
#include "engine.h"

sift_status sift_need_tensor(const sift_graph *g, const sift_tensor *t, const char *op, const char *role)
{
    if (!g) return sift_set_error(SIFT_E_INVALID, "%s: graph is NULL", op);
    if (!t) return sift_set_error(SIFT_E_INVALID, "%s: %s tensor is NULL", op, role);
    if (t->ctx != g->ctx)
        return sift_set_error(SIFT_E_GRAPH, "%s: %s tensor '%s' belongs to another context", op, role, t->name);
    return SIFT_OK;
}

sift_status sift_need_dtype(const sift_tensor *t, sift_dtype want, const char *op, const char *role)
{
    if (t->dtype != want)
        return sift_set_error(SIFT_E_DTYPE, "%s: %s tensor '%s' is %s, expected %s", op, role, t->name,
                              sift_dtype_name(t->dtype), sift_dtype_name(want));
    return SIFT_OK;
}

sift_status sift_need_rank(const sift_tensor *t, int ndim, const char *op, const char *role)
{
    if (t->ndim != ndim)
        return sift_set_error(SIFT_E_SHAPE, "%s: %s tensor '%s' has rank %d, expected %d", op, role, t->name, t->ndim,
                              ndim);
    return SIFT_OK;
}


/* q f32 [Hq][D]; k (and v, if given) [Hkv][Ncap][D] f16/f32; D a multiple of 8 up to SIFT_MAX_HEAD_DIM;
 * Hq % Hkv == 0. */
sift_status sift_check_qkv(const sift_graph *g, const sift_tensor *q, const sift_tensor *k, const sift_tensor *v,
                             const char *op)
{
    TRY(sift_need_tensor(g, q, op, "q"));
    TRY(sift_need_tensor(g, k, op, "k"));
    TRY(sift_need_dtype(q, SIFT_F32, op, "q"));
    TRY(sift_need_rank(q, 2, op, "q"));
    TRY(sift_need_rank(k, 3, op, "k"));
    if (k->dtype != SIFT_F16 && k->dtype != SIFT_F32)
        return sift_set_error(SIFT_E_DTYPE, "%s: k tensor '%s' is %s, expected f16 or f32", op, k->name,
                              sift_dtype_name(k->dtype));
    int64_t hq = q->shape[0], d = q->shape[1], hkv = k->shape[0];
    if (d < 8 || d > SIFT_MAX_HEAD_DIM || d % 8 != 0)
        return sift_set_error(SIFT_E_SHAPE, "%s: head dimension D = %lld is unsupported (a multiple of 8 up to %d)", op,
                              (long long)d, SIFT_MAX_HEAD_DIM);
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
        TRY(sift_need_tensor(g, v, op, "v"));
        if (v->dtype != k->dtype)
            return sift_set_error(SIFT_E_DTYPE, "%s: v is %s but k is %s", op, sift_dtype_name(v->dtype),
                                  sift_dtype_name(k->dtype));
        TRY(sift_need_rank(v, 3, op, "v"));
        for (int i = 0; i < 3; i++)
            if (v->shape[i] != k->shape[i])
                return sift_set_error(SIFT_E_SHAPE, "%s: v shape [%lld][%lld][%lld] differs from k [%lld][%lld][%lld]",
                                      op, (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2],
                                      (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2]);
    }
    return SIFT_OK;
}

sift_status sift_check_out(const sift_graph *g, const sift_tensor *t, sift_dtype dtype, int64_t d0, int64_t d1,
                             const char *op, const char *role)
{
    TRY(sift_need_tensor(g, t, op, role));
    TRY(sift_need_dtype(t, dtype, op, role));
    TRY(sift_need_rank(t, 2, op, role));
    if (t->shape[0] != d0 || t->shape[1] != d1)
        return sift_set_error(SIFT_E_SHAPE, "%s: %s tensor '%s' is [%lld][%lld], expected [%lld][%lld]", op, role,
                              t->name, (long long)t->shape[0], (long long)t->shape[1], (long long)d0, (long long)d1);
    return SIFT_OK;
}

sift_status sift_check_scale(float scale, const char *op)
{
    if (!(scale > 0.0f) || scale > 1e30f) return sift_set_error(SIFT_E_INVALID, "%s: scale %g is not a positive finite number", op, (double)scale);
    return SIFT_OK;
}

sift_status sift_check_rope(const sift_rope_params *p, int64_t d, const char *op)
{
    if (!p) return sift_set_error(SIFT_E_INVALID, "%s: rope params are NULL", op);
    if (p->n_rot < 2 || p->n_rot % 2 || p->n_rot > d || p->n_rot > SIFT_MAX_HEAD_DIM)
        return sift_set_error(SIFT_E_SHAPE, "%s: n_rot = %d must be even and in 2..D = %lld (at most %d)", op, p->n_rot,
                              (long long)d, SIFT_MAX_HEAD_DIM);
    if (!(p->base > 1.0f) || p->base > 1e12f) return sift_set_error(SIFT_E_INVALID, "%s: rope base %g", op, (double)p->base);
    if (p->mode != SIFT_ROPE_ADJACENT && p->mode != SIFT_ROPE_NEOX)
        return sift_set_error(SIFT_E_INVALID, "%s: unknown rope mode %d", op, (int)p->mode);
    return SIFT_OK;
}
