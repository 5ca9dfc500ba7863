/* Helpers the sift command line's files share (defined in sift.c). */
#ifndef SIFT_CLI_H
#define SIFT_CLI_H

#include "sift.h"
#include "sift_testing.h" /* the benchmarks: synthetic contexts, node bytes, attention quality */

#include <stdbool.h>

/* A whole decimal integer. */
bool cli_parse_i64(const char *s, int64_t *out);
/* "off" (SIFT_SEL_CACHE_OFF) or a Selection Cache threshold in [-1, 1]. */
bool cli_parse_sel_cache(const char *val, float *out);
/* The named backend, or the automatic choice when name is NULL (CUDA, else a Vulkan GPU, else the
 * CPU); threads > 0 sets the CPU backend's threads (0: one per core; other backends ignore it). */
sift_status cli_open_backend(const char *name, int64_t threads, sift_context **ctx);
/* cli_open_backend, then the model at path on it; 0, or 1 after printing "who: the error". */
int cli_open_model(const char *who, const char *backend, int64_t threads, const char *path, sift_context **ctx,
                   sift_model **m);
/* -t/--threads: a thread count in 1 .. 4096. */
bool cli_parse_threads(const char *s, int64_t *out);
/* JSON output on stdout: a string with its quotes and escapes; a number with `decimals` digits
 * after the point, or null where it is not finite (JSON has no inf or nan). */
void cli_json_string(const char *str);
void cli_json_fixed(double v, int decimals);
/* A whole file into a new NUL-terminated buffer of *len bytes (NULL with errno set when it cannot
 * be read). */
char *cli_read_file(const char *path, size_t *len);
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
/* `sift eval` (tools/eval.c). */
int cli_eval(int argc, char **argv);
/* `sift demo` (tools/eval.c). */
int cli_demo(int argc, char **argv);

#endif
