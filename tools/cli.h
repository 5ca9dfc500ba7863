/* Helpers the sift command line's files share (defined in sift.c). */
#ifndef SIFT_CLI_H
#define SIFT_CLI_H

#include "sift.h"
#include "sift_testing.h" /* the benchmarks: synthetic contexts, node bytes, attention quality */

#include <stdbool.h>
#include <stdio.h>

/* A whole decimal integer. */
bool cli_parse_i64(const char *s, int64_t *out);
/* "off" (SIFT_SEL_CACHE_OFF) or a Selection Cache threshold in [-1, 1]. */
bool cli_parse_sel_cache(const char *val, float *out);
/* The named backend, or the automatic choice when name is NULL (CUDA, else a Vulkan GPU, else the
 * CPU); threads > 0 sets the CPU backend's threads (0: one per core; other backends ignore it). */
sift_status cli_open_backend(const char *name, int64_t threads, sift_context **ctx);
/* cli_open_backend, then the model at path on it; 0, or 1 after printing "who: the error". */
/* Loads a model, showing the load's progress where stderr is a terminal. */
sift_status cli_load_model(const char *who, sift_context *ctx, const char *path, sift_model **m);
int cli_open_model(const char *who, const char *backend, int64_t threads, const char *path, sift_context **ctx,
                   sift_model **m);
/* -t/--threads: a thread count in 1 .. 4096. */
bool cli_parse_threads(const char *s, int64_t *out);
/* JSON output on stdout: a string with its quotes and escapes; a number with `decimals` digits
 * after the point, or null where it is not finite (JSON has no inf or nan). */
void cli_json_string(const char *str);
void cli_json_fixed(double v, int decimals);
/* The largest file cli_read_file reads (a prompt, a text to evaluate): far more text than any
 * context holds, and a bound on the memory an endless input such as /dev/zero can take. */
#define CLI_MAX_FILE_BYTES ((size_t)256 << 20)
/* A whole file into a new NUL-terminated buffer of *len bytes (NULL with errno set when it cannot
 * be read: EFBIG past CLI_MAX_FILE_BYTES). */
char *cli_read_file(const char *path, size_t *len);
/* Why cli_read_file failed with errno err, for a message. */
const char *cli_read_error(int err);
/* TokenButler's options, shared by run, logits, eval and bench-decode. */
typedef struct cli_butler {
    const char *predictor; /* --predictor FILE, or "random" (a random predictor, for timing) */
    int64_t interval;      /* --predict-interval I (default 1) */
    bool neighbor_fetch;   /* --neighbor-fetch */
    sift_dtype keys;       /* --butler-keys f16|int8 (0 = f32 is never chosen: see cli_butler_keys) */
} cli_butler;
/* The projected keys' type b asks for (f16 unless --butler-keys int8). */
static inline sift_dtype cli_butler_keys(const cli_butler *b) { return b->keys == SIFT_I8 ? SIFT_I8 : SIFT_F16; }
#define CLI_BUTLER_HELP                                                                                       \
    "  --predictor FILE   TokenButler's predictor for this model (GGUF, made by tools/butler/train.py);\n"    \
    "                     'random' makes a random one (for timing only); the butler policy needs it\n"      \
    "  --predict-interval I  butler: recompute the index lists every I-th decode step (default 1)\n"       \
    "  --neighbor-fetch   butler: also attend the token after each selected one\n"                           \
    "  --butler-keys f16|int8  butler: the projected keys' type (default f16; int8 keeps a scale per\n"     \
    "                     token and KV head)\n"
/* argv[*i] as one of TokenButler's options: 1 when it is one (*i then at its last word), 0 when it
 * is not, -1 after printing why its value is wrong. */
int cli_parse_butler(const char *who, int argc, char **argv, int *i, cli_butler *b);
/* The predictor b names for m (NULL in *out when none is named); 0, or 1 after printing the error.
 * A random one has d' = 16. */
int cli_load_predictor(const char *who, sift_model *m, const cli_butler *b, sift_predictor **out);
/* KV offload's options, shared by run, logits, eval and bench-decode: --kv-offload SIZE (the device
 * pool) and --kv-offload-v-only. */
typedef struct cli_offload {
    const char *size;   /* --kv-offload's value as given (NULL: no offload) */
    int64_t tokens;     /* a plain number: tokens */
    int64_t bytes;      /* a number with K, M, G or T (KiB ... TiB): bytes */
    bool v_only;        /* --kv-offload-v-only */
} cli_offload;
#define CLI_OFFLOAD_HELP                                                                                      \
    "  --kv-offload SIZE  KV offload: keep SIZE of the KV pool on the device and the rest in host\n"       \
    "                     memory the device reads in place (pinned on CUDA, a host-visible heap on\n"      \
    "                     Vulkan); SIZE is tokens (65536) or bytes of device K/V pool (512M, 24G: KiB,\n" \
    "                     MiB, GiB, TiB). The sink's and the newest pages stay on the device; older\n"    \
    "                     pages move to the host when it fills. The output does not change\n"      \
    "  --kv-offload-v-only  with --kv-offload: only V moves to the host, K stays on the device whole\n"  \
    "                     (SIZE counts V alone; for tokenselect and dense, which read every key)\n"
/* argv[*i] as one of the offload options: 1 when it is one (*i then at its last word), 0 when it is
 * not, -1 after printing why its value is wrong. */
int cli_parse_offload(const char *who, int argc, char **argv, int *i, cli_offload *o);
/* Sets cfg's kv_device_tokens and kv_offload_v_only from o for model m (bytes become tokens through
 * the K/V bytes per token of cfg->kv_type); 0, or 1 after printing why o does not fit. */
int cli_offload_apply(const char *who, const cli_offload *o, const sift_model *m, sift_session_config *cfg);
/* One line on f of the session's KV pools: device and host bytes, pages, pages moved (nothing
 * without offload). */
void cli_print_kv_pools(FILE *f, const char *who, const sift_session *s);
/* `sift eval` (tools/eval.c). */
int cli_eval(int argc, char **argv);
/* `sift demo` (tools/eval.c). */
int cli_demo(int argc, char **argv);
/* `sift chat`, and `sift run -cnv` (tools/chat.c). */
int cli_chat(int argc, char **argv);

#endif
