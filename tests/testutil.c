#include "testutil.h"

#include <stdarg.h>


/* ---- a tiny deterministic RNG ---------------------------------------------------------------- */

uint64_t rng_state;
uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
float rng_uniform(void) { return (float)((rng_next() >> 40) * (1.0 / 16777216.0)); } /* [0, 1) */
/* Roughly normal with unit variance (a sum of four uniforms): cheap, and inputs need no more. */
float rng_normal(void)
{
    const uint64_t r = rng_next();
    float s = 0.0f;
    for (int i = 0; i < 4; i++) s += (float)((r >> (16 * i)) & 0xffff) * (1.0f / 65536.0f);
    return (s - 2.0f) * 1.7320508f;
}

/* ---- bookkeeping ------------------------------------------------------------------------------ */


int n_cases, n_checks, n_failures, n_unsupported;
int64_t n_validation_messages;
static char backends_seen[128]; /* ",cpu,vulkan," */
static bool host_checked;        /* a check under a name that is no backend ("host") */

/* Only backends are listed in the summary: a check's label that names none is host code. */
static void note_backend(const char *backend)
{
    bool is_backend = false;
    for (int k = 0; k < SIFT_BACKEND_COUNT; k++)
        is_backend = is_backend || !strcmp(backend, sift_backend_kind_name((sift_backend_kind)k));
    if (!is_backend) {
        host_checked = true;
        return;
    }
    char key[40];
    snprintf(key, sizeof key, ",%s,", backend);
    if (strstr(backends_seen, key)) return;
    const size_t used = strlen(backends_seen);
    snprintf(backends_seen + used, sizeof backends_seen - used, "%s%s,", used ? "" : ",", backend);
}

static void count_check(const char *backend, bool ok)
{
    n_checks++;
    if (!ok) n_failures++;
    note_backend(backend);
}

void report(const char *case_name, const char *backend_name, const char *metric, double value, double bound,
                   bool ok)
{
    count_check(backend_name, ok);
    printf("%-58s %-7s %-9s %10.3g  (bound %8.2g)  %s\n", case_name, backend_name, metric, value, bound,
           ok ? "ok" : "FAIL");
}

void fail(const char *case_name, const char *backend_name, const char *what)
{
    count_check(backend_name, false);
    printf("%-58s %-7s FAIL: %s\n", case_name, backend_name, what);
}

/* One check's line: what was checked (formatted), the backend, the value where there is one. */
static bool check_line(bool ok, const char *backend, const double *value, const char *what, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, what, ap);
    count_check(backend, ok);
    if (value) printf("%-58s %-7s %-9s %10.4g  %s\n", text, backend, "value", *value, ok ? "ok" : "FAIL");
    else printf("%-58s %-7s %s\n", text, backend, ok ? "ok" : "FAIL");
    return ok;
}

bool test_check(bool ok, const char *backend, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    ok = check_line(ok, backend, NULL, what, ap);
    va_end(ap);
    return ok;
}

bool test_check_value(bool ok, const char *backend, double value, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    ok = check_line(ok, backend, &value, what, ap);
    va_end(ap);
    return ok;
}

bool test_require(bool ok, const char *backend, const char *what, ...)
{
    count_check(backend, ok);
    if (ok) return true;
    char text[1024];
    va_list ap;
    va_start(ap, what);
    vsnprintf(text, sizeof text, what, ap);
    va_end(ap);
    printf("%-58s %-7s FAIL: %s\n", running_case, backend, text);
    return false;
}

void test_note(const char *backend, const char *what, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(text, sizeof text, what, ap);
    va_end(ap);
    printf("%-58s %-7s %s\n", "", backend, text);
}

void test_case_begin(const char *name, const char *backend)
{
    n_cases++;
    running_case = name;
    running_backend = backend;
}

void test_context_done(sift_context *ctx)
{
    if (!ctx) return;
    n_validation_messages += sift_context_validation_messages(ctx);
    sift_context_destroy(ctx);
}

int test_summary(const char *suite, const char *backend)
{
    char seen[sizeof backends_seen];
    const size_t len = strlen(backends_seen);
    snprintf(seen, sizeof seen, "%.*s", len > 2 ? (int)len - 2 : 0, backends_seen + 1);
    printf("\nsummary: suite %s, backend %s: %d cases, %d checks, %d failures, %d not supported; "
           "validation messages: %lld\n",
           suite, backend ? backend : len > 2 ? seen : host_checked ? "host" : "none", n_cases, n_checks, n_failures, n_unsupported,
           (long long)n_validation_messages);
    return n_failures || n_validation_messages ? 1 : 0;
}

bool case_unsupported;
jmp_buf case_end;
const char *running_case = "", *running_backend = "";

void call_failed(const char *call, sift_status s, const char *case_name, const char *backend_name)
{
    if (s == SIFT_E_UNSUPPORTED) {
        case_unsupported = true;
        printf("%-58s %-7s not supported: %s\n", case_name, backend_name, sift_last_error());
        return;
    }
    char msg[700];
    snprintf(msg, sizeof msg, "%s: %s (%s)", call, sift_status_name(s), sift_last_error());
    fail(case_name, backend_name, msg);
}

sift_status compute_checked(sift_graph *g)
{
    sift_status s = sift_graph_check_supported(g);
    return s == SIFT_OK ? sift_graph_compute(g) : s;
}

void rng_seed_from(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    rng_state = h;
}



size_t count_of(int ndim, const int64_t *shape)
{
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

host_tensor host_new(sift_dtype dtype, int ndim, const int64_t *shape)
{
    host_tensor h = {.dtype = dtype, .ndim = ndim};
    for (int d = 0; d < ndim; d++) h.shape[d] = shape[d];
    h.n = count_of(ndim, shape);
    if (dtype == SIFT_I32)
        h.i = calloc(h.n ? h.n : 1, sizeof(int32_t));
    else
        h.f = calloc(h.n ? h.n : 1, sizeof(float));
    if ((dtype == SIFT_I32 && !h.i) || (dtype != SIFT_I32 && !h.f)) {
        fprintf(stderr, "conformance: out of host memory (%zu elements)\n", h.n);
        exit(2);
    }
    return h;
}

void host_free(host_tensor *h)
{
    free(h->f);
    free(h->i);
    free(h->h);
    free(h->raw);
    h->raw = NULL;
    h->f = NULL;
    h->i = NULL;
    h->h = NULL;
}

host_tensor host_random(sift_dtype dtype, int ndim, const int64_t *shape, float sigma)
{
    host_tensor h = host_new(dtype, ndim, shape);
    for (size_t j = 0; j < h.n; j++) h.f[j] = sigma * rng_normal();
    if (dtype == SIFT_F16) {
        /* multiples of 1/256 below 8 in magnitude have at most 11 significant bits: exact in f16 */
        h.h = malloc((h.n ? h.n : 1) * 2);
        if (!h.h) exit(2);
        for (size_t j = 0; j < h.n; j++) h.f[j] = fminf(fmaxf(roundf(h.f[j] * 256.0f), -2047.0f), 2047.0f) / 256.0f;
        sift_f32_to_f16(h.h, h.f, h.n);
    }
    return h;
}

sift_status upload(sift_context *ctx, const host_tensor *h, sift_tensor **out)
{
    sift_status s = sift_tensor_create(ctx, h->dtype, h->ndim, h->shape, out);
    if (s != SIFT_OK) return s;
    if (h->raw) {
        s = sift_tensor_write(*out, 0, h->raw, h->raw_bytes);
    } else if (h->dtype == SIFT_F16) {
        s = sift_tensor_write(*out, 0, h->h, h->n * 2);
    } else {
        s = sift_tensor_write(*out, 0, h->dtype == SIFT_I32 ? (const void *)h->i : (const void *)h->f, h->n * 4);
    }
    return s;
}


sift_status guarded_new(sift_context *ctx, sift_dtype dtype, int ndim, const int64_t *shape, guarded *g)
{
    memset(g, 0, sizeof *g);
    g->n = (count_of(ndim, shape) * sift_dtype_size(dtype) + 3) / 4; /* in 4-byte words */
    const int64_t total = (int64_t)(g->n + 2 * GUARD);
    sift_status s = sift_tensor_create(ctx, SIFT_I32, 1, &total, &g->parent);
    if (s != SIFT_OK) return s;
    uint32_t *fill = malloc((size_t)total * 4);
    if (!fill) return SIFT_E_NOMEM;
    for (int64_t j = 0; j < total; j++) fill[j] = GUARD_WORD;
    s = sift_tensor_write(g->parent, 0, fill, (size_t)total * 4);
    free(fill);
    if (s != SIFT_OK) return s;
    return sift_tensor_view(g->parent, dtype, ndim, shape, GUARD * 4, &g->view);
}

bool guarded_read(const guarded *g, void *dst, sift_status *st)
{
    const size_t total = g->n + 2 * GUARD;
    uint32_t *all = malloc(total * 4);
    if (!all) {
        *st = SIFT_E_NOMEM;
        return false;
    }
    *st = sift_tensor_read(g->parent, 0, all, total * 4);
    bool intact = true;
    for (size_t j = 0; j < GUARD; j++) intact = intact && all[j] == GUARD_WORD && all[GUARD + g->n + j] == GUARD_WORD;
    memcpy(dst, all + GUARD, g->n * 4);
    free(all);
    return intact;
}

void guarded_free(guarded *g)
{
    sift_tensor_destroy(g->view);
    sift_tensor_destroy(g->parent);
    memset(g, 0, sizeof *g);
}

/* ---- comparisons ------------------------------------------------------------------------------ */

bool all_finite(const float *a, size_t n)
{
    for (size_t j = 0; j < n; j++)
        if (!isfinite(a[j])) return false;
    return true;
}

double nmse(const float *ref, const float *got, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t j = 0; j < n; j++) {
        double d = (double)ref[j] - (double)got[j];
        num += d * d;
        den += (double)ref[j] * (double)ref[j];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return num / den;
}

void compare_floats(const char *cname, const char *bname, const float *ref, const float *got, size_t n,
                           double bound)
{
    if (!all_finite(got, n)) {
        fail(cname, bname, "NaN or Inf in the output");
        return;
    }
    double e = nmse(ref, got, n);
    report(cname, bname, "nmse", e, bound, e <= bound);
}
