/* The helpers the command line's files share: backends, models, files, JSON, numbers. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

bool cli_parse_i64(const char *s, int64_t *out)
{
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The library's messages on stderr as "sift: LEVEL: message", from *user (the least level shown) up. */
static void print_log(void *user, sift_log_level level, const char *message)
{
    if (level >= *(const sift_log_level *)user) fprintf(stderr, "sift: %s: %s\n", sift_log_level_name(level), message);
}

static sift_status create_context(sift_backend_kind kind, bool verbose, sift_context **ctx)
{
    static const sift_log_level shown[2] = {SIFT_LOG_WARN, SIFT_LOG_INFO};
    sift_context_config c = sift_context_config_default();
    c.backend = kind;
    c.log = print_log;
    c.log_user = (void *)&shown[verbose];
    return sift_context_create_with(&c, ctx);
}

static sift_status open_backend(const char *name, bool verbose, sift_context **ctx)
{
    if (name) {
        sift_backend_kind kind;
        sift_status s = sift_backend_kind_parse(name, &kind);
        if (s != SIFT_OK) return s;
        return create_context(kind, verbose, ctx);
    }
    /* the automatic choice: a GPU, never a CPU emulation of one (lavapipe is far slower than the
     * CPU backend), else the CPU */
    const sift_backend_kind order[] = {SIFT_BACKEND_CUDA, SIFT_BACKEND_VULKAN, SIFT_BACKEND_CPU};
    sift_status s = SIFT_E_UNAVAILABLE;
    for (int i = 0; i < 3 && s != SIFT_OK; i++) {
        s = create_context(order[i], verbose, ctx);
        if (s == SIFT_OK && order[i] != SIFT_BACKEND_CPU && sift_context_is_emulated(*ctx)) {
            sift_context_destroy(*ctx);
            *ctx = NULL;
            s = SIFT_E_UNAVAILABLE;
        }
    }
    return s;
}

/* NVIDIA's driver gives a process that uses the GPU through Vulkan alone adaptive clocks: on an
 * H200 the SM clock stayed at 345-1000 MHz under these benches, and at 1980 MHz while any process
 * held a CUDA context open, which made Vulkan's figures 2-4x slower and vary from run to run
 * (docs/benchmarks.md). The benches say so, where it changes what their figures mean. */
void cli_note_vulkan_clocks(const char *who, sift_context *ctx)
{
    if (sift_context_backend(ctx) == SIFT_BACKEND_VULKAN && strstr(sift_context_device_name(ctx), "NVIDIA"))
        fprintf(stderr,
                "%s: note: NVIDIA's driver clocks a process that uses the GPU through Vulkan alone\n"
                "  adaptively, often far below the maximum; a CUDA context kept open on the GPU meanwhile (any\n"
                "  process) holds the clocks up (docs/benchmarks.md)\n",
                who);
}

sift_status cli_open_backend(const char *name, int64_t threads, bool verbose, sift_context **ctx)
{
    sift_status s = open_backend(name, verbose, ctx);
    if (s == SIFT_OK && threads > 0 && (s = sift_context_set_threads(*ctx, (int)threads)) != SIFT_OK) {
        sift_context_destroy(*ctx);
        *ctx = NULL;
    }
    return s;
}

/* The load's progress on a terminal: a percentage on stderr, rewritten in place, cleared at the end. */
typedef struct load_progress {
    const char *who;
    int shown; /* the percentage shown, -1: none yet */
} load_progress;

static int show_load_progress(void *user, uint64_t done, uint64_t total)
{
    load_progress *p = user;
    const int pct = total ? (int)(done * 100 / total) : 100;
    if (pct != p->shown) fprintf(stderr, "\r%s: loading the model: %3d%%", p->who, pct);
    if (done >= total) fputs("\r\033[K", stderr);
    p->shown = pct;
    return 0;
}

sift_status cli_load_model(const char *who, sift_context *ctx, const char *path, sift_model **m)
{
    load_progress p = {.who = who, .shown = -1};
    sift_model_load_config c = sift_model_load_config_default();
    if (isatty(STDERR_FILENO)) {
        c.progress = show_load_progress;
        c.progress_user = &p;
    }
    return sift_model_load_with(ctx, path, &c, m);
}

int cli_open_model(const char *who, const char *backend, int64_t threads, bool verbose, const char *path,
                   sift_context **ctx, sift_model **m)
{
    *ctx = NULL;
    *m = NULL;
    sift_status s = cli_open_backend(backend, threads, verbose, ctx);
    if (s == SIFT_OK) s = cli_load_model(who, *ctx, path, m);
    if (s == SIFT_OK) return 0;
    fprintf(stderr, "%s: %s\n", who, sift_last_error());
    sift_context_destroy(*ctx);
    *ctx = NULL;
    return 1;
}


/* "s" after a count other than one */
static const char *plural(int64_t n) { return n == 1 ? "" : "s"; }

/* "KV offload: device pool ... moved to the host" of pools p (GB or MB as their size asks). */
void cli_print_pools(FILE *f, const sift_kv_pool_info *p)
{
    const double dev = (double)p->device_bytes, host = (double)p->host_bytes;
    const bool gb = dev >= 1e9 || host >= 1e9;
    fprintf(f,
            "KV offload: device pool %.2f %s (%lld page%s of %lld tokens, %lld in use), host pool %.2f %s (%lld page%s, "
            "%lld in use); %lld page%s moved to the host\n",
            dev / (gb ? 1e9 : 1e6), gb ? "GB" : "MB", (long long)p->device_pages, plural(p->device_pages),
            (long long)p->page_size, (long long)p->device_used, host / (gb ? 1e9 : 1e6), gb ? "GB" : "MB",
            (long long)p->host_pages, plural(p->host_pages), (long long)p->host_used, (long long)p->pages_moved,
            plural(p->pages_moved));
}

void cli_print_kv_pools(FILE *f, const char *who, const sift_session *s)
{
    sift_kv_pool_info p;
    if (sift_session_kv_pools(s, &p) != SIFT_OK || p.host_pages == 0) return;
    fprintf(f, "%s: ", who);
    cli_print_pools(f, &p);
}

int cli_load_predictor(const char *who, sift_model *m, const char *path, sift_predictor **out)
{
    *out = NULL;
    if (!path) return 0;
    const sift_status s = !strcmp(path, "random") ? sift_predictor_random(m, 16, 1, out) : sift_predictor_load(m, path, out);
    if (s == SIFT_OK) return 0;
    fprintf(stderr, "%s: %s\n", who, sift_last_error());
    return 1;
}

void cli_json_string(const char *str)
{
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)str; *c; c++) {
        if (*c == '"' || *c == '\\') printf("\\%c", *c);
        else if (*c < 0x20) printf("\\u%04x", *c);
        else putchar(*c);
    }
    putchar('"');
}

void cli_json_fixed(double v, int decimals)
{
    if (isfinite(v)) printf("%.*f", decimals, v);
    else fputs("null", stdout); /* JSON has no inf or nan */
}

/* a / b, where a figure exists: NAN (null in JSON, '-' in tables) when b is not positive */
double cli_ratio(double a, double b) { return b > 0 ? a / b : NAN; }


double cli_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *cli_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 12, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (n > CLI_MAX_FILE_BYTES) { /* the buffer ends one byte past the limit: too large, or endless */
            free(buf);
            buf = NULL;
            errno = EFBIG;
            break;
        }
        const size_t next = 2 * cap < CLI_MAX_FILE_BYTES + 1 ? 2 * cap : CLI_MAX_FILE_BYTES + 1;
        char *p = realloc(buf, next + 1);
        if (!p) {
            free(buf);
            buf = NULL;
            errno = ENOMEM;
            break;
        }
        buf = p;
        cap = next;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

const char *cli_read_error(int err)
{
    if (err != EFBIG) return strerror(err);
    static char msg[64];
    snprintf(msg, sizeof msg, "larger than the %zu MiB sift reads", CLI_MAX_FILE_BYTES >> 20);
    return msg;
}
