/* CPU reference of the transformer ops around attention (include/sift.h says what each computes).
 * Plain loops, f32 accumulation. */
#include "cpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

sift_status cpu_get_rows(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_tensor *table = n->src[0], *ids = n->src[1];
    const int64_t rows = table->shape[0], e = table->shape[1], t_count = ids->shape[0];
    const size_t row_bytes = sift_dtype_row_bytes(table->dtype, e);
    const int32_t *id = cpu_data(ids);
    float *out = cpu_data(n->dst);
    for (int64_t t = 0; t < t_count; t++) {
        if (id[t] < 0 || id[t] >= rows) {
            memset(out + t * e, 0, (size_t)e * sizeof(float));
            continue;
        }
        sift_row_to_f32(table->dtype, (const char *)cpu_data(table) + (size_t)id[t] * row_bytes, out + t * e, e);
    }
    return SIFT_OK;
}

sift_status cpu_rmsnorm(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_tensor *x = n->src[0];
    const int64_t rows = x->shape[0], e = x->shape[1];
    const float *w = cpu_data(n->src[1]);
    for (int64_t t = 0; t < rows; t++) {
        const float *xr = (const float *)cpu_data(x) + t * e;
        float *o = (float *)cpu_data(n->dst) + t * e;
        float ss = 0.0f;
        for (int64_t i = 0; i < e; i++) ss += xr[i] * xr[i];
        const float inv = 1.0f / sqrtf(ss / (float)e + n->p.eps);
        for (int64_t i = 0; i < e; i++) o[i] = xr[i] * inv * w[i];
    }
    return SIFT_OK;
}

sift_status cpu_layernorm(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_tensor *x = n->src[0];
    const int64_t rows = x->shape[0], e = x->shape[1];
    const float *w = cpu_data(n->src[1]), *b = n->n_src > 2 ? cpu_data(n->src[2]) : NULL;
    for (int64_t t = 0; t < rows; t++) {
        const float *xr = (const float *)cpu_data(x) + t * e;
        float *o = (float *)cpu_data(n->dst) + t * e;
        float sum = 0.0f;
        for (int64_t i = 0; i < e; i++) sum += xr[i];
        const float mean = sum / (float)e;
        float ss = 0.0f;
        for (int64_t i = 0; i < e; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        const float inv = 1.0f / sqrtf(ss / (float)e + n->p.eps);
        for (int64_t i = 0; i < e; i++) o[i] = (xr[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
    }
    return SIFT_OK;
}

/* Weight rows per item of a matmul: converted once into the thread's scratch (16 rows of up to a
 * few thousand values stay in L1/L2), then each token's row of x meets all of them while it is in
 * cache, instead of all of x streaming past each weight row. */
enum { MATMUL_ROWS = 16 };

/* Output columns [j0, j0 + MATMUL_ROWS) of every token: out[t][j] = dot(x[t], w[j]) (+ bias[j]). */
CPU_HOT_LOOP static void matmul_rows(void *arg, int64_t item, int thread)
{
    const node_job *job = arg;
    const sift_tensor *x = job->n->src[0], *w = job->n->src[1];
    const sift_tensor *bias = job->n->n_src > 2 ? job->n->src[2] : NULL;
    const int64_t rows = x->shape[0], k = x->shape[1], outs = w->shape[0];
    const int64_t j0 = item * MATMUL_ROWS, j1 = j0 + MATMUL_ROWS < outs ? j0 + MATMUL_ROWS : outs;
    const size_t row_bytes = sift_dtype_row_bytes(w->dtype, k);
    float *wrows = cpu_scratch(job->be, thread), *out = cpu_data(job->n->dst);
    for (int64_t j = j0; j < j1; j++)
        sift_row_to_f32(w->dtype, (const char *)cpu_data(w) + (size_t)j * row_bytes, wrows + (j - j0) * k, k);
    for (int64_t t = 0; t < rows; t++) {
        const float *xt = (const float *)cpu_data(x) + t * k;
        for (int64_t j = j0; j < j1; j++) {
            const float b = bias ? ((const float *)cpu_data(bias))[j] : 0.0f;
            out[t * outs + j] = sift_dot_f32(xt, wrows + (j - j0) * k, k) + b;
        }
    }
}

/* out[t][j] = dot(x[t], w[j]) (+ bias[j]); each weight row is converted once for all tokens. The
 * items are blocks of output columns, so every element is the same sift_dot_f32 on any thread. */
sift_status cpu_matmul(cpu_backend *be, const sift_node *n)
{
    const int64_t rows = n->src[0]->shape[0], k = n->src[0]->shape[1], outs = n->src[1]->shape[0];
    const sift_status s = cpu_reserve(be, (size_t)(MATMUL_ROWS * k));
    if (s != SIFT_OK) return s;
    node_job job = {.be = be, .n = n};
    cpu_parallel_for(be, (outs + MATMUL_ROWS - 1) / MATMUL_ROWS, (double)rows * (double)outs * (double)k, matmul_rows, &job);
    return SIFT_OK;
}

/* Pair i of the first n_rot dims is rotated by theta = pos * freq[i] / factor[i]. */
void cpu_rope_row(float *x, float pos, const float *factors, const sift_rope_params *p, const float *freq)
{
    const int half = p->n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float theta = pos * freq[i] / (factors ? factors[i] : 1.0f);
        const float c = cosf(theta), s = sinf(theta);
        const int a = p->mode == SIFT_ROPE_ADJACENT ? 2 * i : i;
        const int b = p->mode == SIFT_ROPE_ADJACENT ? 2 * i + 1 : i + half;
        const float xa = x[a], xb = x[b];
        x[a] = xa * c - xb * s;
        x[b] = xa * s + xb * c;
    }
}

sift_status cpu_rope(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_tensor *x = n->src[0];
    const float *factors = n->n_src > 1 ? cpu_data(n->src[1]) : NULL;
    const int64_t rows = x->shape[0], heads = x->shape[1], d = x->shape[2];
    float *out = cpu_data(n->dst);
    memcpy(out, cpu_data(x), (size_t)(rows * heads * d) * sizeof(float));
    for (int64_t t = 0; t < rows; t++)
        for (int64_t h = 0; h < heads; h++) cpu_rope_row(out + (t * heads + h) * d, (float)(n->p.pos0 + t), factors, &n->p.rope, n->p.rope_freq);
    return SIFT_OK;
}

sift_status cpu_elementwise(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const float *a = cpu_data(n->src[0]), *b = cpu_data(n->src[1]);
    float *o = cpu_data(n->dst);
    const size_t count = n->dst->nbytes / sizeof(float);
    for (size_t i = 0; i < count; i++)
        o[i] = n->op == SIFT_OP_ADD ? a[i] + b[i] : a[i] / (1.0f + expf(-a[i])) * b[i];
    return SIFT_OK;
}

sift_status cpu_silu(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const float *x = cpu_data(n->src[0]);
    float *o = cpu_data(n->dst);
    const size_t count = n->dst->nbytes / sizeof(float);
    for (size_t i = 0; i < count; i++) o[i] = x[i] / (1.0f + expf(-x[i]));
    return SIFT_OK;
}

/* One key row quantized for an i8 cache: q[i] = x[i] * 127 / m rounded half away from zero,
 * m = max |x[i]| stored after them (f32). */
static void cpu_quantize_row(const float *x, int64_t d, int8_t *dst)
{
    float m = 0.0f;
    for (int64_t i = 0; i < d; i++) m = fmaxf(m, fabsf(x[i]));
    for (int64_t i = 0; i < d; i++) {
        const float r = m > 0.0f ? roundf(x[i] * 127.0f / m) : 0.0f;
        dst[i] = (int8_t)fminf(fmaxf(r, -127.0f), 127.0f);
    }
    memcpy(dst + d, &m, sizeof m);
}

sift_status cpu_kv_write(cpu_backend *be, const sift_node *n)
{
    (void)be;
    const sift_tensor *src = n->src[0], *cache = n->dst;
    const int64_t rows = src->shape[0], heads = src->shape[1], d = src->shape[2];
    for (int64_t t = 0; t < rows; t++)
        for (int64_t h = 0; h < heads; h++) {
            const float *s = (const float *)cpu_data(src) + (t * heads + h) * d;
            void *row = cpu_kv_row_addr(cache, h, n->p.pos0 + t);
            if (!row) continue; /* a row without a page is never written */
            if (cache->dtype == SIFT_I8) {
                cpu_quantize_row(s, d, row);
                continue;
            }
            if (cache->dtype == SIFT_F32)
                memcpy(row, s, (size_t)d * sizeof(float));
            else
                for (int64_t i = 0; i < d; i++) ((uint16_t *)row)[i] = sift_float_to_half(s[i]);
        }
    return SIFT_OK;
}
