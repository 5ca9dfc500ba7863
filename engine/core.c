/* Errors, contexts, tensors and half-float conversion: the engine's bookkeeping. */
#include "engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[512];

sift_status sift_set_error(sift_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

const char *sift_last_error(void) { return last_error; }

const char *sift_version(void) { return SIFT_VERSION_STRING; }

const char *sift_status_name(sift_status s)
{
    switch (s) {
    case SIFT_OK: return "ok";
    case SIFT_E_INVALID: return "invalid argument";
    case SIFT_E_SHAPE: return "bad shape";
    case SIFT_E_DTYPE: return "bad element type";
    case SIFT_E_GRAPH: return "graph does not connect";
    case SIFT_E_NOMEM: return "out of host memory";
    case SIFT_E_DEVICE_NOMEM: return "out of device memory";
    case SIFT_E_LIMIT: return "device limit exceeded";
    case SIFT_E_UNAVAILABLE: return "backend unavailable";
    case SIFT_E_UNSUPPORTED: return "unsupported by device";
    case SIFT_E_BACKEND: return "backend error";
    }
    return "unknown status";
}

const char *sift_backend_kind_name(sift_backend_kind kind)
{
    switch (kind) {
    case SIFT_BACKEND_CPU: return "cpu";
    case SIFT_BACKEND_VULKAN: return "vulkan";
    case SIFT_BACKEND_CUDA: return "cuda";
    default: return "unknown";
    }
}

sift_status sift_backend_kind_parse(const char *name, sift_backend_kind *out)
{
    if (!name || !out) return sift_set_error(SIFT_E_INVALID, "sift_backend_kind_parse: null argument");
    for (int k = 0; k < SIFT_BACKEND_COUNT; k++) {
        if (strcmp(name, sift_backend_kind_name((sift_backend_kind)k)) == 0) {
            *out = (sift_backend_kind)k;
            return SIFT_OK;
        }
    }
    return sift_set_error(SIFT_E_INVALID, "unknown backend '%s' (expected cpu, vulkan or cuda)", name);
}

const char *sift_dtype_name(sift_dtype t)
{
    switch (t) {
    case SIFT_F32: return "f32";
    case SIFT_F16: return "f16";
    case SIFT_I32: return "i32";
    case SIFT_BF16: return "bf16";
    case SIFT_Q8_0: return "q8_0";
    case SIFT_Q4_0: return "q4_0";
    case SIFT_I8: return "i8";
    case SIFT_Q4_K: return "q4_k";
    case SIFT_Q5_K: return "q5_k";
    case SIFT_Q6_K: return "q6_k";
    default: return "unknown";
    }
}

size_t sift_dtype_size(sift_dtype t)
{
    switch (t) {
    case SIFT_F32: return 4;
    case SIFT_F16: return 2;
    case SIFT_I32: return 4;
    case SIFT_BF16: return 2;
    case SIFT_I8: return 1;
    default: return 0; /* block-quantized: see sift_dtype_row_bytes */
    }
}

int64_t sift_dtype_block(sift_dtype t)
{
    if (t == SIFT_Q8_0 || t == SIFT_Q4_0) return 32;
    if (t == SIFT_Q4_K || t == SIFT_Q5_K || t == SIFT_Q6_K) return 256;
    return 1;
}

size_t sift_dtype_row_bytes(sift_dtype t, int64_t n)
{
    if (n < 0) return 0;
    switch (t) {
    case SIFT_Q8_0: return (size_t)(n / 32) * 34; /* f16 scale + 32 int8 */
    case SIFT_Q4_0: return (size_t)(n / 32) * 18; /* f16 scale + 16 bytes of nibbles */
    case SIFT_Q4_K: return (size_t)(n / 256) * 144; /* quant.h has the super-block layouts */
    case SIFT_Q5_K: return (size_t)(n / 256) * 176;
    case SIFT_Q6_K: return (size_t)(n / 256) * 210;
    default: return (size_t)n * sift_dtype_size(t);
    }
}

/* ---- contexts ------------------------------------------------------------------------------ */

struct sift_context {
    sift_backend_kind kind;
    void *be;
    const sift_backend_vtable *vt;
    char device_name[256];
};

const sift_backend_vtable *sift_context_vtable(const sift_context *ctx, void **be)
{
    *be = ctx->be;
    return ctx->vt;
}

sift_status sift_context_create(sift_backend_kind kind, sift_context **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_context_create: out is NULL");
    *out = NULL;
    sift_backend_open_fn open = NULL;
    switch (kind) {
    case SIFT_BACKEND_CPU: open = sift_backend_cpu_open; break;
    case SIFT_BACKEND_VULKAN: open = sift_backend_vulkan_open; break;
    case SIFT_BACKEND_CUDA: open = sift_backend_cuda_open; break;
    default: return sift_set_error(SIFT_E_INVALID, "sift_context_create: unknown backend kind %d", (int)kind);
    }
    sift_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return sift_set_error(SIFT_E_NOMEM, "sift_context_create: out of memory");
    ctx->kind = kind;
    sift_status s = open(&ctx->be, &ctx->vt, ctx->device_name, sizeof ctx->device_name);
    if (s != SIFT_OK) {
        free(ctx);
        return s;
    }
    *out = ctx;
    return SIFT_OK;
}

void sift_context_destroy(sift_context *ctx)
{
    if (!ctx) return;
    ctx->vt->destroy(ctx->be);
    free(ctx);
}

sift_backend_kind sift_context_backend(const sift_context *ctx) { return ctx ? ctx->kind : SIFT_BACKEND_COUNT; }
const char *sift_context_device_name(const sift_context *ctx) { return ctx ? ctx->device_name : ""; }

int sift_context_is_emulated(const sift_context *ctx)
{
    return ctx && ctx->vt->is_emulated && ctx->vt->is_emulated(ctx->be);
}

int64_t sift_context_validation_messages(const sift_context *ctx)
{
    if (!ctx || !ctx->vt->validation_messages) return 0;
    return ctx->vt->validation_messages(ctx->be);
}

sift_status sift_context_set_threads(sift_context *ctx, int n)
{
    if (!ctx) return sift_set_error(SIFT_E_INVALID, "sift_context_set_threads: context is NULL");
    if (n < 1) return sift_set_error(SIFT_E_INVALID, "sift_context_set_threads: %d threads (must be >= 1)", n);
    if (!ctx->vt->set_threads) return SIFT_OK; /* a GPU backend: its host side is one thread */
    return ctx->vt->set_threads(ctx->be, n);
}

/* ---- tensors ------------------------------------------------------------------------------- */

/* Checks a shape and computes its element count, refusing negative dims and overflow. */
static sift_status shape_bytes(sift_dtype dtype, int ndim, const int64_t *shape, size_t *nbytes)
{
    if (ndim < 1 || ndim > SIFT_MAX_DIMS)
        return sift_set_error(SIFT_E_SHAPE, "tensor rank %d outside 1..%d", ndim, SIFT_MAX_DIMS);
    if (!shape) return sift_set_error(SIFT_E_INVALID, "tensor shape is NULL");
    const int64_t block = sift_dtype_block(dtype), row = shape[ndim - 1];
    if (row % block != 0)
        return sift_set_error(SIFT_E_SHAPE, "%s rows of %lld values: not a multiple of its block of %lld",
                              sift_dtype_name(dtype), (long long)row, (long long)block);
    uint64_t n = row >= 0 ? (uint64_t)sift_dtype_row_bytes(dtype, row) : 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return sift_set_error(SIFT_E_SHAPE, "tensor dimension %d is negative (%lld)", i, (long long)shape[i]);
        if (i == ndim - 1) break;
        if (shape[i] != 0 && n > (UINT64_MAX >> 2) / (uint64_t)shape[i])
            return sift_set_error(SIFT_E_SHAPE, "tensor size overflows (dimension %d = %lld)", i, (long long)shape[i]);
        n *= (uint64_t)shape[i];
    }
    if (n > (uint64_t)SIZE_MAX / 2) return sift_set_error(SIFT_E_SHAPE, "tensor of %llu bytes is too large", (unsigned long long)n);
    *nbytes = (size_t)n;
    return SIFT_OK;
}

/* Shape and row-major strides (in elements) of a dense tensor. */
static void set_contiguous(sift_tensor *t, int ndim, const int64_t *shape)
{
    for (int i = 0; i < SIFT_MAX_DIMS; i++) t->shape[i] = t->stride[i] = 0;
    t->ndim = ndim;
    int64_t st = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->stride[i] = st;
        st *= shape[i] ? shape[i] : 1;
    }
}

sift_status sift_tensor_create(sift_context *ctx, sift_dtype dtype, int ndim, const int64_t *shape, sift_tensor **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_tensor_create: out is NULL");
    *out = NULL;
    if (!ctx) return sift_set_error(SIFT_E_INVALID, "sift_tensor_create: context is NULL");
    if ((int)dtype < 0 || dtype >= SIFT_DTYPE_COUNT) return sift_set_error(SIFT_E_DTYPE, "sift_tensor_create: unknown dtype %d", (int)dtype);
    size_t nbytes = 0;
    sift_status s = shape_bytes(dtype, ndim, shape, &nbytes);
    if (s != SIFT_OK) return s;
    sift_tensor *t = calloc(1, sizeof *t);
    if (!t) return sift_set_error(SIFT_E_NOMEM, "sift_tensor_create: out of memory");
    t->ctx = ctx;
    t->dtype = dtype;
    t->nbytes = nbytes;
    set_contiguous(t, ndim, shape);
    s = ctx->vt->tensor_alloc(ctx->be, t);
    if (s != SIFT_OK) {
        free(t);
        return s;
    }
    *out = t;
    return SIFT_OK;
}

sift_status sift_tensor_view(sift_tensor *parent, sift_dtype dtype, int ndim, const int64_t *shape, size_t byte_offset,
                             sift_tensor **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_tensor_view: out is NULL");
    *out = NULL;
    if (!parent) return sift_set_error(SIFT_E_INVALID, "sift_tensor_view: parent is NULL");
    if (parent->pages) return sift_set_error(SIFT_E_INVALID, "sift_tensor_view: '%s' is a paged view", parent->name);
    if ((int)dtype < 0 || dtype >= SIFT_DTYPE_COUNT) return sift_set_error(SIFT_E_DTYPE, "sift_tensor_view: unknown dtype %d", (int)dtype);
    size_t nbytes = 0;
    sift_status s = shape_bytes(dtype, ndim, shape, &nbytes);
    if (s != SIFT_OK) return s;
    sift_tensor *root = parent->parent ? parent->parent : parent;
    const size_t start = parent->offset + byte_offset;
    const size_t align = sift_dtype_size(dtype) ? sift_dtype_size(dtype) : 2; /* blocks start with an f16 scale */
    if (byte_offset % align != 0)
        return sift_set_error(SIFT_E_INVALID, "sift_tensor_view: offset %zu is not a multiple of the %s size", byte_offset,
                              sift_dtype_name(dtype));
    if (byte_offset > parent->nbytes || nbytes > parent->nbytes - byte_offset)
        return sift_set_error(SIFT_E_SHAPE, "sift_tensor_view: %zu bytes at offset %zu do not fit in '%s' (%zu bytes)",
                              nbytes, byte_offset, parent->name, parent->nbytes);
    sift_tensor *t = calloc(1, sizeof *t);
    if (!t) return sift_set_error(SIFT_E_NOMEM, "sift_tensor_view: out of memory");
    *t = *root;
    t->dtype = dtype;
    t->nbytes = nbytes;
    t->offset = start;
    t->parent = root;
    t->owner = NULL;
    t->name[0] = 0;
    set_contiguous(t, ndim, shape);
    *out = t;
    return SIFT_OK;
}

sift_status sift_tensor_paged_view(sift_tensor *pool, const sift_tensor *pages, int64_t page_size, sift_tensor **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_tensor_paged_view: out is NULL");
    *out = NULL;
    if (!pool || !pages) return sift_set_error(SIFT_E_INVALID, "sift_tensor_paged_view: null argument");
    if (pool->parent || pool->ndim != 3 || (pool->dtype != SIFT_F16 && pool->dtype != SIFT_F32 && pool->dtype != SIFT_I8))
        return sift_set_error(SIFT_E_SHAPE, "sift_tensor_paged_view: the pool must be a [Hkv][R][D] f16/f32 tensor, not a view");
    if (pages->ctx != pool->ctx) return sift_set_error(SIFT_E_INVALID, "sift_tensor_paged_view: pages belong to another context");
    if (pages->dtype != SIFT_I32 || pages->ndim != 1 || pages->pages)
        return sift_set_error(SIFT_E_DTYPE, "sift_tensor_paged_view: the page table must be an i32 vector");
    if (page_size < 1 || (page_size & (page_size - 1)) != 0 || page_size > (1 << 20) || pool->shape[1] % page_size != 0)
        return sift_set_error(SIFT_E_SHAPE, "sift_tensor_paged_view: page size %lld is not a power of two dividing the pool's %lld rows",
                              (long long)page_size, (long long)pool->shape[1]);
    if (pages->shape[0] > INT32_MAX / page_size)
        return sift_set_error(SIFT_E_SHAPE, "sift_tensor_paged_view: %lld pages of %lld rows exceed 2^31 positions",
                              (long long)pages->shape[0], (long long)page_size);
    sift_tensor *t = calloc(1, sizeof *t);
    if (!t) return sift_set_error(SIFT_E_NOMEM, "sift_tensor_paged_view: out of memory");
    *t = *pool;
    t->parent = pool;
    t->owner = NULL;
    t->offset = 0;
    t->shape[1] = pages->shape[0] * page_size; /* logical rows; strides stay the pool's */
    t->pages = pages;
    t->page_size = page_size;
    snprintf(t->name, sizeof t->name, "%.40s/paged", pool->name);
    *out = t;
    return SIFT_OK;
}

void sift_tensor_destroy(sift_tensor *t)
{
    if (!t) return;
    if (!t->parent) t->ctx->vt->tensor_free(t->ctx->be, t);
    free(t);
}

sift_status sift_tensor_set_name(sift_tensor *t, const char *name)
{
    if (!t || !name) return sift_set_error(SIFT_E_INVALID, "sift_tensor_set_name: null argument");
    snprintf(t->name, sizeof t->name, "%s", name);
    return SIFT_OK;
}

const char *sift_tensor_name(const sift_tensor *t) { return t ? t->name : ""; }
sift_dtype sift_tensor_dtype(const sift_tensor *t) { return t ? t->dtype : SIFT_DTYPE_COUNT; }
int sift_tensor_ndim(const sift_tensor *t) { return t ? t->ndim : 0; }
int64_t sift_tensor_dim(const sift_tensor *t, int axis)
{
    return (t && axis >= 0 && axis < t->ndim) ? t->shape[axis] : 0;
}
size_t sift_tensor_nbytes(const sift_tensor *t) { return t ? t->nbytes : 0; }

static sift_status check_range(const sift_tensor *t, size_t offset, const void *p, size_t bytes, const char *what)
{
    if (!t) return sift_set_error(SIFT_E_INVALID, "%s: tensor is NULL", what);
    if (t->pages) return sift_set_error(SIFT_E_INVALID, "%s: '%s' is a paged view: access its pool", what, t->name);
    if (!p && bytes) return sift_set_error(SIFT_E_INVALID, "%s: buffer is NULL", what);
    if (offset > t->nbytes || bytes > t->nbytes - offset)
        return sift_set_error(SIFT_E_INVALID, "%s: range [%zu, +%zu) outside tensor '%s' of %zu bytes", what, offset,
                              bytes, t->name, t->nbytes);
    return SIFT_OK;
}

sift_status sift_tensor_write(sift_tensor *t, size_t offset, const void *src, size_t bytes)
{
    sift_status s = check_range(t, offset, src, bytes, "sift_tensor_write");
    if (s != SIFT_OK) return s;
    if (t->owner) return sift_set_error(SIFT_E_INVALID, "sift_tensor_write: '%s' is a graph intermediate", t->name);
    if (bytes == 0) return SIFT_OK;
    sift_tensor *root = t->parent ? t->parent : t;
    s = t->ctx->vt->tensor_write(t->ctx->be, root, t->offset + offset, src, bytes);
    if (s == SIFT_OK) t->has_data = root->has_data = true;
    return s;
}

sift_status sift_tensor_read(const sift_tensor *t, size_t offset, void *dst, size_t bytes)
{
    sift_status s = check_range(t, offset, dst, bytes, "sift_tensor_read");
    if (s != SIFT_OK || bytes == 0) return s;
    const sift_tensor *root = t->parent ? t->parent : t;
    return t->ctx->vt->tensor_read(t->ctx->be, root, t->offset + offset, dst, bytes);
}

/* ---- half floats --------------------------------------------------------------------------- */

uint16_t sift_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
    if (ax < 0x38800000u) {                                   /* below the smallest normal half */
        float a;
        memcpy(&a, &ax, 4);
        /* subnormal: value / 2^-24, rounded to nearest even by the FPU */
        float m = nearbyintf(ldexpf(a, 24));
        return (uint16_t)(sign | (uint16_t)m);
    }
    uint32_t exp = (ax >> 23) - 127 + 15;
    uint32_t man = ax & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carries into the exponent correctly */
    return (uint16_t)(sign | h);
}

void sift_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = sift_float_to_half(src[i]);
}

void sift_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = sift_half_to_float(src[i]);
}
