/* Errors, contexts, tensors and half-float conversion: the engine's bookkeeping. */
#include "graph_pool.h"
#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

sift_status sift_config_read(const void *given, void *dst, size_t min_size, size_t size, const char *fn)
{
    size_t given_size;
    memcpy(&given_size, given, sizeof given_size);
    if (given_size == 0)
        return sift_set_error(SIFT_E_INVALID, "%s: the config's struct_size is 0 (start it from its _default() function)", fn);
    if (given_size < min_size || given_size > size)
        return sift_set_error(SIFT_E_INVALID, "%s: the config's struct_size is %zu; this library takes %zu to %zu bytes%s", fn,
                              given_size, min_size, size, given_size > size ? " (a newer sift.h than the library)" : "");
    memcpy(dst, given, given_size);
    memcpy(dst, &size, sizeof size);
    return SIFT_OK;
}

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
    case SIFT_E_CANCELLED: return "cancelled";
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
    int device; /* the index of the backend's device list it opened */
    /* Every call into the backend holds it: sessions on several threads share one context, and
     * the backends' state (Vulkan's transfer command buffer and staging buffer, its queue, the CPU
     * backend's thread pool, CUDA's stream) serves one call at a time. Tensor reference counts
     * change under it too. */
    pthread_mutex_t lock;
    /* The caller's handle, each tensor, graph and model: the backend closes when the last goes. */
    atomic_int refs;
    sift_graph_pool *graph_pool; /* storage for graphs' intermediates, reused from graph to graph */
    /* vt is `counted`: the backend's table (backend_vt) with tensor_alloc and tensor_free wrapped
     * so that every allocation, the graph pool's included, adds to the bytes in use
     * (sift_context_memory_use); they change under the lock. */
    const sift_backend_vtable *backend_vt;
    sift_backend_vtable counted;
    uint64_t device_bytes, host_bytes, device_peak;
    /* The log (sift_context_config.log) and the lock that keeps its calls apart; lock_prev: the
     * context this thread was calling before it took this one's lock (see `calling`). */
    sift_log_fn log;
    void *log_user;
    pthread_mutex_t log_lock;
    struct sift_context *lock_prev;
};

sift_graph_pool *sift_context_graph_pool(sift_context *ctx) { return ctx->graph_pool; }

/* Contexts are created and destroyed one at a time: a backend's open sets process-wide state
 * (Vulkan's instance-level entry points through volk). */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- logs ----------------------------------------------------------------------------------- */

/* The context whose backend this thread is calling (the one whose lock it holds, or the one being
 * opened or closed): where a backend's sift_log goes. Backends know no context; their messages
 * come from calls the engine makes under a context's lock (a driver's callback such as Vulkan's
 * validation messages runs inside the call that causes it). */
static _Thread_local sift_context *calling;
/* Set while this thread runs a log callback: a message it causes goes to the default. */
static _Thread_local bool in_callback;

const char *sift_log_level_name(sift_log_level level)
{
    switch (level) {
    case SIFT_LOG_DEBUG: return "debug";
    case SIFT_LOG_INFO: return "info";
    case SIFT_LOG_WARN: return "warn";
    case SIFT_LOG_ERROR: return "error";
    }
    return "unknown";
}

static void log_message(sift_context *ctx, sift_log_level level, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (ctx && ctx->log && !in_callback) {
        pthread_mutex_lock(&ctx->log_lock);
        in_callback = true;
        ctx->log(ctx->log_user, level, msg);
        in_callback = false;
        pthread_mutex_unlock(&ctx->log_lock);
        return;
    }
    if (level >= SIFT_LOG_WARN) fprintf(stderr, "sift: %s\n", msg); /* what the library printed before logs */
}

void sift_log(sift_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_message(calling, level, fmt, ap);
    va_end(ap);
}

void sift_log_to(sift_context *ctx, sift_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_message(ctx, level, fmt, ap);
    va_end(ap);
}

void sift_context_lock(sift_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    ctx->lock_prev = calling;
    calling = ctx;
}

void sift_context_unlock(sift_context *ctx)
{
    calling = ctx->lock_prev;
    pthread_mutex_unlock(&ctx->lock);
}

void sift_context_retain(sift_context *ctx) { atomic_fetch_add(&ctx->refs, 1); }

static void free_context(sift_context *ctx)
{
    pthread_mutex_destroy(&ctx->log_lock);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

void sift_context_release(sift_context *ctx)
{
    if (!ctx || atomic_fetch_sub(&ctx->refs, 1) != 1) return;
    sift_graph_pool_destroy(ctx, ctx->graph_pool);
    pthread_mutex_lock(&open_lock);
    sift_context *was = calling;
    calling = ctx;
    ctx->vt->destroy(ctx->be);
    calling = was;
    pthread_mutex_unlock(&open_lock);
    free_context(ctx);
}

/* ---- memory in use -------------------------------------------------------------------------- */

static sift_status counted_alloc(void *be, sift_tensor *t)
{
    sift_context *ctx = t->ctx;
    const sift_status s = ctx->backend_vt->tensor_alloc(be, t);
    if (s != SIFT_OK) return s;
    if (t->host_memory) {
        ctx->host_bytes += t->nbytes;
    } else {
        ctx->device_bytes += t->nbytes;
        if (ctx->device_bytes > ctx->device_peak) ctx->device_peak = ctx->device_bytes;
    }
    return SIFT_OK;
}

static void counted_free(void *be, sift_tensor *t)
{
    sift_context *ctx = t->ctx;
    ctx->backend_vt->tensor_free(be, t);
    if (t->host_memory) ctx->host_bytes -= t->nbytes;
    else ctx->device_bytes -= t->nbytes;
}

sift_status sift_context_memory_use(sift_context *ctx, sift_memory_use *out)
{
    if (!ctx || !out) return sift_set_error(SIFT_E_INVALID, "sift_context_memory_use: null argument");
    sift_context_lock(ctx);
    *out = (sift_memory_use){.device_bytes = ctx->device_bytes, .host_bytes = ctx->host_bytes,
                             .device_peak_bytes = ctx->device_peak};
    sift_context_unlock(ctx);
    return SIFT_OK;
}

uint64_t sift_context_free_memory(sift_context *ctx)
{
    uint64_t bytes = 0;
    if (!ctx->backend_vt->memory_free) return 0;
    sift_context_lock(ctx);
    if (ctx->backend_vt->memory_free(ctx->be, &bytes) != SIFT_OK) bytes = 0;
    sift_context_unlock(ctx);
    return bytes;
}

const sift_backend_vtable *sift_context_vtable(const sift_context *ctx, void **be)
{
    *be = ctx->be;
    return ctx->vt;
}

sift_context_config sift_context_config_default(void)
{
    sift_context_config c = {.struct_size = sizeof c, .backend = SIFT_BACKEND_CPU, .device = -1, .threads = 0, .log = NULL};
    return c;
}

static sift_status backend_fns(sift_backend_kind kind, sift_backend_open_fn *open, sift_backend_devices_fn *devices,
                               const char *fn)
{
    switch (kind) {
    case SIFT_BACKEND_CPU: *open = sift_backend_cpu_open, *devices = sift_backend_cpu_devices; return SIFT_OK;
    case SIFT_BACKEND_VULKAN: *open = sift_backend_vulkan_open, *devices = sift_backend_vulkan_devices; return SIFT_OK;
    case SIFT_BACKEND_CUDA: *open = sift_backend_cuda_open, *devices = sift_backend_cuda_devices; return SIFT_OK;
    default: return sift_set_error(SIFT_E_INVALID, "%s: unknown backend kind %d", fn, (int)kind);
    }
}

static sift_status list_devices(sift_backend_kind kind, int index, sift_device_info *info, int *n, const char *fn)
{
    sift_backend_open_fn open = NULL;
    sift_backend_devices_fn devices = NULL;
    TRY(backend_fns(kind, &open, &devices, fn));
    pthread_mutex_lock(&open_lock);
    const sift_status s = devices(index, info, n);
    pthread_mutex_unlock(&open_lock);
    return s;
}

sift_status sift_device_count(sift_backend_kind kind, int *n)
{
    if (!n) return sift_set_error(SIFT_E_INVALID, "sift_device_count: n is NULL");
    *n = 0;
    return list_devices(kind, 0, NULL, n, "sift_device_count");
}

sift_status sift_device_get_info(sift_backend_kind kind, int index, sift_device_info *out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_device_get_info: out is NULL");
    memset(out, 0, sizeof *out);
    int n = 0;
    return list_devices(kind, index, out, &n, "sift_device_get_info");
}

sift_status sift_context_create_with(const sift_context_config *cfg, sift_context **out)
{
    const char *fn = "sift_context_create_with";
    if (!out) return sift_set_error(SIFT_E_INVALID, "%s: out is NULL", fn);
    *out = NULL;
    sift_context_config c = sift_context_config_default();
    /* configs of the first released size (without the log) are read too */
    if (cfg) TRY(sift_config_read(cfg, &c, offsetof(sift_context_config, log), sizeof c, fn));
    sift_backend_open_fn open = NULL;
    sift_backend_devices_fn devices = NULL;
    TRY(backend_fns(c.backend, &open, &devices, fn));
    if (c.device < -1) return sift_set_error(SIFT_E_INVALID, "%s: device %d (an index, or -1 for the default)", fn, c.device);
    if (c.threads < 0 || c.threads > 1024)
        return sift_set_error(SIFT_E_INVALID, "%s: %d threads (1..1024, or 0 for the default)", fn, c.threads);
    sift_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
        free(ctx);
        return sift_set_error(SIFT_E_NOMEM, "%s: no mutex", fn);
    }
    if (pthread_mutex_init(&ctx->log_lock, NULL) != 0) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
        return sift_set_error(SIFT_E_NOMEM, "%s: no mutex", fn);
    }
    atomic_init(&ctx->refs, 1);
    if (sift_graph_pool_create(&ctx->graph_pool) != SIFT_OK) {
        free_context(ctx);
        return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    }
    ctx->kind = c.backend;
    ctx->log = c.log;
    ctx->log_user = c.log_user;
    const sift_backend_open_args args = {.device = c.device, .threads = c.threads};
    pthread_mutex_lock(&open_lock);
    sift_context *was = calling;
    calling = ctx; /* what the backend logs while it opens */
    sift_status s = open(&args, &ctx->be, &ctx->backend_vt, ctx->device_name, sizeof ctx->device_name, &ctx->device);
    calling = was;
    pthread_mutex_unlock(&open_lock);
    if (s != SIFT_OK) {
        sift_graph_pool_destroy(ctx, ctx->graph_pool);
        free_context(ctx);
        return s;
    }
    ctx->counted = *ctx->backend_vt;
    ctx->counted.tensor_alloc = counted_alloc;
    ctx->counted.tensor_free = counted_free;
    ctx->vt = &ctx->counted;
    sift_log_to(ctx, SIFT_LOG_INFO, "context: %s backend, device %d: %s", sift_backend_kind_name(ctx->kind), ctx->device,
                ctx->device_name);
    *out = ctx;
    return SIFT_OK;
}

sift_status sift_context_create(sift_backend_kind kind, sift_context **out)
{
    sift_context_config c = sift_context_config_default();
    c.backend = kind;
    return sift_context_create_with(&c, out);
}

void sift_context_destroy(sift_context *ctx) { sift_context_release(ctx); }

sift_backend_kind sift_context_backend(const sift_context *ctx) { return ctx ? ctx->kind : SIFT_BACKEND_COUNT; }
const char *sift_context_device_name(const sift_context *ctx) { return ctx ? ctx->device_name : ""; }
int sift_context_device(const sift_context *ctx) { return ctx ? ctx->device : -1; }

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
    sift_context_lock(ctx);
    sift_status s = ctx->vt->set_threads(ctx->be, n);
    sift_context_unlock(ctx);
    return s;
}

/* ---- tensors ------------------------------------------------------------------------------- */

/* Checks a shape and computes its element count, refusing negative dims and overflow. */
sift_status sift_shape_bytes(sift_dtype dtype, int ndim, const int64_t *shape, size_t *nbytes)
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

/* sift_tensor_create and sift_tensor_create_host: the storage in device memory, or in host memory
 * the device reads (host). */
static sift_status tensor_create(sift_context *ctx, sift_dtype dtype, int ndim, const int64_t *shape, bool host,
                                 sift_tensor **out, const char *fn)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "%s: out is NULL", fn);
    *out = NULL;
    if (!ctx) return sift_set_error(SIFT_E_INVALID, "%s: context is NULL", fn);
    if ((int)dtype < 0 || dtype >= SIFT_DTYPE_COUNT) return sift_set_error(SIFT_E_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    size_t nbytes = 0;
    sift_status s = sift_shape_bytes(dtype, ndim, shape, &nbytes);
    if (s != SIFT_OK) return s;
    sift_tensor *t = calloc(1, sizeof *t);
    if (!t) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    t->ctx = ctx;
    t->dtype = dtype;
    t->nbytes = nbytes;
    t->refs = 1;
    t->host_memory = host;
    set_contiguous(t, ndim, shape);
    sift_context_lock(ctx);
    s = ctx->vt->tensor_alloc(ctx->be, t);
    sift_context_unlock(ctx);
    if (s != SIFT_OK) {
        free(t);
        return s;
    }
    sift_context_retain(ctx);
    *out = t;
    return SIFT_OK;
}

sift_status sift_tensor_create(sift_context *ctx, sift_dtype dtype, int ndim, const int64_t *shape, sift_tensor **out)
{
    return tensor_create(ctx, dtype, ndim, shape, false, out, "sift_tensor_create");
}

sift_status sift_tensor_create_host(sift_context *ctx, sift_dtype dtype, int ndim, const int64_t *shape, sift_tensor **out)
{
    return tensor_create(ctx, dtype, ndim, shape, true, out, "sift_tensor_create_host");
}

int sift_tensor_in_host_memory(const sift_tensor *t) { return t && t->host_memory; }

sift_status sift_tensor_view(sift_tensor *parent, sift_dtype dtype, int ndim, const int64_t *shape, size_t byte_offset,
                             sift_tensor **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_tensor_view: out is NULL");
    *out = NULL;
    if (!parent) return sift_set_error(SIFT_E_INVALID, "sift_tensor_view: parent is NULL");
    if (parent->pages) return sift_set_error(SIFT_E_INVALID, "sift_tensor_view: '%s' is a paged view", parent->name);
    if ((int)dtype < 0 || dtype >= SIFT_DTYPE_COUNT) return sift_set_error(SIFT_E_DTYPE, "sift_tensor_view: unknown dtype %d", (int)dtype);
    size_t nbytes = 0;
    sift_status s = sift_shape_bytes(dtype, ndim, shape, &nbytes);
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
    t->refs = 0;
    set_contiguous(t, ndim, shape);
    sift_context_lock(root->ctx);
    root->refs++;
    sift_context_unlock(root->ctx);
    *out = t;
    return SIFT_OK;
}

/* sift_tensor_paged_view and sift_tensor_paged_view_pools (host_pool NULL: one pool). */
static sift_status paged_view(sift_tensor *pool, sift_tensor *host_pool, const sift_tensor *pages, int64_t page_size,
                              sift_tensor **out, const char *fn)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "%s: out is NULL", fn);
    *out = NULL;
    if (!pool || !pages) return sift_set_error(SIFT_E_INVALID, "%s: null argument", fn);
    if (pool->parent || pool->ndim != 3 || (pool->dtype != SIFT_F16 && pool->dtype != SIFT_F32 && pool->dtype != SIFT_I8))
        return sift_set_error(SIFT_E_SHAPE, "%s: the pool must be a [Hkv][R][D] f16/f32 tensor, not a view", fn);
    if (pages->ctx != pool->ctx) return sift_set_error(SIFT_E_INVALID, "%s: pages belong to another context", fn);
    if (pages->dtype != SIFT_I32 || pages->ndim != 1 || pages->pages)
        return sift_set_error(SIFT_E_DTYPE, "%s: the page table must be an i32 vector", fn);
    if (page_size < 1 || (page_size & (page_size - 1)) != 0 || page_size > (1 << 20) || pool->shape[1] % page_size != 0)
        return sift_set_error(SIFT_E_SHAPE, "%s: page size %lld is not a power of two dividing the pool's %lld rows", fn,
                              (long long)page_size, (long long)pool->shape[1]);
    if (pages->shape[0] > INT32_MAX / page_size)
        return sift_set_error(SIFT_E_SHAPE, "%s: %lld pages of %lld rows exceed 2^31 positions", fn,
                              (long long)pages->shape[0], (long long)page_size);
    if (host_pool) {
        if (host_pool->ctx != pool->ctx) return sift_set_error(SIFT_E_INVALID, "%s: the host pool belongs to another context", fn);
        if (host_pool->parent || host_pool == pool || host_pool->dtype != pool->dtype || host_pool->ndim != 3 ||
            host_pool->shape[0] != pool->shape[0] || host_pool->shape[2] != pool->shape[2] ||
            host_pool->shape[1] % page_size != 0)
            return sift_set_error(SIFT_E_SHAPE,
                                  "%s: the host pool must be another [Hkv][Rh][D] tensor of the pool's type, KV heads and "
                                  "D, with whole pages, not a view",
                                  fn);
        if (pool->shape[1] + host_pool->shape[1] > INT32_MAX)
            return sift_set_error(SIFT_E_SHAPE, "%s: the two pools' %lld rows per KV head exceed 2^31", fn,
                                  (long long)(pool->shape[1] + host_pool->shape[1]));
    }
    sift_tensor *t = calloc(1, sizeof *t);
    if (!t) return sift_set_error(SIFT_E_NOMEM, "%s: out of memory", fn);
    *t = *pool;
    t->parent = pool;
    t->owner = NULL;
    t->offset = 0;
    t->shape[1] = pages->shape[0] * page_size; /* logical rows; strides stay the pool's */
    t->pages = pages;
    t->page_size = page_size;
    t->host_pool = host_pool;
    t->refs = 0;
    snprintf(t->name, sizeof t->name, "%.40s/paged", pool->name);
    sift_tensor *pages_root = pages->parent ? pages->parent : (sift_tensor *)pages;
    sift_context_lock(pool->ctx);
    pool->refs++;
    pages_root->refs++;
    if (host_pool) host_pool->refs++;
    sift_context_unlock(pool->ctx);
    *out = t;
    return SIFT_OK;
}

sift_status sift_tensor_paged_view(sift_tensor *pool, const sift_tensor *pages, int64_t page_size, sift_tensor **out)
{
    return paged_view(pool, NULL, pages, page_size, out, "sift_tensor_paged_view");
}

sift_status sift_tensor_paged_view_pools(sift_tensor *pool, sift_tensor *host_pool, const sift_tensor *pages,
                                         int64_t page_size, sift_tensor **out)
{
    if (!host_pool) return sift_set_error(SIFT_E_INVALID, "sift_tensor_paged_view_pools: host_pool is NULL");
    return paged_view(pool, host_pool, pages, page_size, out, "sift_tensor_paged_view_pools");
}

/* Drops one reference to a tensor that owns storage (its handle's, or a view's); the last one
 * frees the storage. Called with the context's lock held. */
static bool release_storage(sift_tensor *root)
{
    if (--root->refs > 0) return false;
    root->ctx->vt->tensor_free(root->ctx->be, root);
    return true;
}

void sift_tensor_destroy(sift_tensor *t)
{
    if (!t) return;
    sift_context *ctx = t->ctx;
    sift_tensor *roots[3] = {t->parent ? t->parent : t, NULL, (sift_tensor *)t->host_pool};
    if (t->pages) roots[1] = t->pages->parent ? t->pages->parent : (sift_tensor *)t->pages;
    bool freed[3] = {false, false, false};
    sift_context_lock(ctx);
    for (int i = 0; i < 3; i++) freed[i] = roots[i] && release_storage(roots[i]);
    sift_context_unlock(ctx);
    if (t->parent) free(t);
    for (int i = 0; i < 3; i++) {
        if (!freed[i]) continue;
        free(roots[i]);
        sift_context_release(ctx);
    }
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
    sift_context_lock(t->ctx);
    s = t->ctx->vt->tensor_write(t->ctx->be, root, t->offset + offset, src, bytes);
    sift_context_unlock(t->ctx);
    if (s == SIFT_OK) t->has_data = root->has_data = true;
    return s;
}

sift_status sift_tensor_read(const sift_tensor *t, size_t offset, void *dst, size_t bytes)
{
    sift_status s = check_range(t, offset, dst, bytes, "sift_tensor_read");
    if (s != SIFT_OK || bytes == 0) return s;
    const sift_tensor *root = t->parent ? t->parent : t;
    sift_context_lock(t->ctx);
    s = t->ctx->vt->tensor_read(t->ctx->be, root, t->offset + offset, dst, bytes);
    sift_context_unlock(t->ctx);
    return s;
}

/* ---- half floats --------------------------------------------------------------------------- */

uint16_t sift_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) { /* NaN: its payload's top 10 bits, so that a half's NaN comes back as it was */
        const uint16_t payload = (uint16_t)((ax >> 13) & 0x3ffu);
        return (uint16_t)(sign | 0x7c00u | (payload ? payload : 0x200u));
    }
    if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
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

double sift_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}
