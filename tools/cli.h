/* Helpers the sift command line's files share (tools/cli.c), and its commands, one file each. */
#ifndef SIFT_CLI_H
#define SIFT_CLI_H

#include "sift.h"
#include "sift_testing.h" /* the benchmarks: synthetic contexts, node bytes, attention quality */
#include "options.h"

#include <stdbool.h>
#include <stdio.h>

/* The demo's files, relative to the repository root. */
#define CLI_DEMO_MODEL "tools/retrieval/model/retrieval.gguf"
#define CLI_DEMO_SAMPLES "tools/retrieval/model/retrieval_test.txt"
#define CLI_DEMO_PREDICTOR "tools/butler/predictors/retrieval.butler.gguf"

/* A whole decimal integer. */
bool cli_parse_i64(const char *s, int64_t *out);
/* The named backend, or the automatic choice when name is NULL (CUDA, else a Vulkan GPU, else the
 * CPU); threads > 0 sets the CPU backend's threads (0: one per core; other backends ignore it).
 * The context's messages go to stderr as "sift: LEVEL: message": warnings and errors, and INFO
 * too when verbose (-v). */
sift_status cli_open_backend(const char *name, int64_t threads, bool verbose, sift_context **ctx);
/* Loads a model, showing the load's progress where stderr is a terminal. */
sift_status cli_load_model(const char *who, sift_context *ctx, const char *path, sift_model **m);
/* cli_open_backend, then the model at path on it; 0, or 1 after printing "who: the error". */
int cli_open_model(const char *who, const char *backend, int64_t threads, bool verbose, const char *path,
                   sift_context **ctx, sift_model **m);
/* TokenButler's predictor at path for m ("random": a random one, d' = 16; NULL: none, *out NULL);
 * 0, or 1 after printing the error. */
int cli_load_predictor(const char *who, sift_model *m, const char *path, sift_predictor **out);
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
/* One line on f of the session's KV pools: device and host bytes, pages, pages moved (nothing
 * without offload). */
void cli_print_kv_pools(FILE *f, const char *who, const sift_session *s);
/* "KV offload: device pool ... moved to the host" of pools p, a line on f. */
void cli_print_pools(FILE *f, const sift_kv_pool_info *p);
/* The median of v[n] (sorts v). */
double cli_median(double *v, int n);
/* a / b, where a figure exists: NAN (null in JSON, '-' in tables) when b is not positive. */
double cli_ratio(double a, double b);
/* Seconds on the monotonic clock. */
double cli_wall_s(void);
/* Where NVIDIA's driver may clock a Vulkan-only process down, a note on stderr (the benches). */
void cli_note_vulkan_clocks(const char *who, sift_context *ctx);

/* A backend, a model, its predictor and a session, as run, logits and chat open them. */
typedef struct cli_session {
    sift_context *ctx;
    sift_model *model;
    sift_predictor *predictor;
    sift_session *session;
    sift_model_info info;
    int64_t n_ctx;           /* the session's context */
    sift_session_config cfg; /* what cli_start creates the session with */
} cli_session;
/* The model, the prompt and S, W, k as run, logits and chat need them: 0, or 2 after a message. */
int cli_check_generation(const cli_params *p);
/* The prompt of -p or -f (read into *buf, freed by the caller): 0, or 1 after a message. */
int cli_read_prompt(const cli_params *p, char **buf, const char **text, size_t *len);
/* Opens p's backend, model and predictor, and sets s->cfg from the options: 0, or 1 after a
 * message (cli_close frees what was opened). */
int cli_open(const cli_params *p, cli_session *s);
/* Creates s->session from s->cfg: 0, or 1 after a message. */
int cli_start(const cli_params *p, cli_session *s);
void cli_close(cli_session *s);
/* The prompt's tokens (BOS first where the model has one) into a new array with room for `room`
 * more: 0, or 1 after a message (no tokens, more than the context, out of memory). */
int cli_tokenize_prompt(const cli_params *p, const cli_session *s, const char *text, size_t len, size_t room, int32_t **ids,
                        size_t *n);

/* The commands: each takes its arguments after the command's name; 0, 1 (a failure) or 2 (bad
 * arguments). */
int cli_run(int argc, char **argv);          /* tools/run.c */
int cli_logits(int argc, char **argv);       /* tools/logits.c */
int cli_chat(int argc, char **argv);         /* tools/chat.c; `sift run -cnv` too */
int cli_eval(int argc, char **argv);         /* tools/eval.c */
int cli_demo(int argc, char **argv);         /* tools/demo.c */
int cli_bench_attn(int argc, char **argv);   /* tools/bench_attn.c */
int cli_bench_decode(int argc, char **argv); /* tools/bench_decode.c */
int cli_devices(int argc, char **argv);      /* tools/devices.c */
int cli_tokenize(int argc, char **argv);     /* tools/tokenize.c */

#endif
