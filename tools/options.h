/* The command line's options: every option declared once (tools/options.c), with its help text
 * and the commands that take it, parsed into cli_params and from there into the configs the
 * library takes. Each command's --help is generated from the same table, its defaults from
 * cli_params_default. */
#ifndef SIFT_CLI_OPTIONS_H
#define SIFT_CLI_OPTIONS_H

#include "sift.h"

#include <stdbool.h>
#include <stdint.h>

/* The commands, one bit each: an option names those that take it. */
enum {
    CLI_RUN = 1u << 0,
    CLI_LOGITS = 1u << 1,
    CLI_CHAT = 1u << 2,
    CLI_EVAL = 1u << 3,
    CLI_DEMO = 1u << 4,
    CLI_BENCH_ATTN = 1u << 5,
    CLI_BENCH_DECODE = 1u << 6,
    CLI_TOKENIZE = 1u << 7,
    CLI_DEVICES = 1u << 8,
};

/* A command as its --help shows it. */
typedef struct cli_command {
    const char *name;     /* "run" */
    unsigned bit;         /* CLI_RUN */
    const char *usage;    /* what follows "usage: sift NAME " */
    const char *about;    /* the paragraph before the options (ends in a newline) */
    const char *epilogue; /* after the options, or NULL */
} cli_command;

/* butler's interval decided by the query (--predict-interval auto, butler:auto): its default
 * threshold on q' and longest interval (docs/policies.md says how they were chosen). */
#define CLI_PREDICT_THRESHOLD 0.85f
#define CLI_MAX_INTERVAL 16

/* The most contexts --ctx lists, and the most policies --policies lists. */
enum { CLI_MAX_CTXS = 64, CLI_MAX_POLICIES = 32, CLI_MAX_OPTIONS = 96 };

/* eval's --policies: each policy with its variant (tokenselect+x, butler:i4:nf:int8, butler:auto:t0.9). */
typedef struct cli_policy_list {
    sift_policy policy[CLI_MAX_POLICIES];
    bool extrapolated[CLI_MAX_POLICIES]; /* the policy runs with keys cached before RoPE */
    int interval[CLI_MAX_POLICIES];      /* butler: its prediction interval (0: not given) */
    bool by_query[CLI_MAX_POLICIES];     /* butler:auto: the interval decided by the query, at most `interval` */
    float threshold[CLI_MAX_POLICIES];   /* butler:auto's threshold on q' (> 1: not given) */
    bool neighbors[CLI_MAX_POLICIES];    /* butler: with neighbour fetch */
    bool int8_keys[CLI_MAX_POLICIES];    /* butler: int8 projected keys (a session of its own) */
    int n;
} cli_policy_list;

/* Everything the options set. The session's options write into `session` (a library config);
 * flags are int so that one kind of option sets them all. */
typedef struct cli_params {
    unsigned command;                 /* the command's bit */
    char who[32];                     /* "sift run", the start of every message */
    unsigned char given[CLI_MAX_OPTIONS]; /* which options of the table were given */
    /* model and device */
    const char *model, *backend;
    int64_t threads; /* 0: one per core */
    /* the text */
    const char *prompt, *prompt_file, *chat_template;
    int64_t n_predict, keep;
    int context_shift, no_warmup, conversation, no_bos, special;
    /* the session: n_ctx (the first of ctxs), policy, S, W, k, cache, TokenButler's settings */
    sift_session_config session;
    int64_t ctxs[CLI_MAX_CTXS];
    int n_ctxs;
    const char *predictor; /* --predictor FILE, or "random" */
    /* butler: --predict-interval auto, its --predict-threshold and --max-interval */
    int predict_by_query, max_interval;
    float predict_threshold;
    const char *offload;   /* --kv-offload's value as given (NULL: no offload) */
    int64_t offload_tokens, offload_bytes; /* its value in tokens, or in bytes */
    /* sampling */
    double temp, top_p;
    int64_t top_k, seed; /* seed -1: a random one */
    /* eval and demo */
    const char *text, *retrieval;
    cli_policy_list policies;
    int64_t *budgets; /* n_budgets values (malloc'd: cli_params_free) */
    int n_budgets;
    int64_t prefix, max_tokens, samples, skip, length;
    /* output */
    int json;
    int verbose;  /* -v: the library's INFO messages too (WARN and ERROR always) */
    int profiles; /* devices --profiles */
    const char *plot;
    /* the benchmarks */
    int64_t steps, batch, repeat, q_heads, kv_heads, dim, key_dim;
    int profile;
    unsigned attn_modes; /* bench-decode --attn: a bit per mode (0: all that apply) */
    sift_vote_mode vote;
} cli_params;

/* bench-decode's modes, in the order they run (--attn names them). */
extern const char *const cli_attn_mode_names[4];

/* The defaults of the command with bit `command`. */
cli_params cli_params_default(const cli_command *cmd);
void cli_params_free(cli_params *p);
/* Parses argv into p (its defaults set): true to go on; false after printing --help (*exit_code
 * 0) or what is wrong (*exit_code 2). */
bool cli_parse(const cli_command *cmd, int argc, char **argv, cli_params *p, int *exit_code);
/* eval's --policies LIST into l: false when it names no policy or a bad variant. */
bool cli_parse_policy_list(const char *s, cli_policy_list *l);
/* Whether the option named `name` ("--sink") was given. */
bool cli_given(const cli_params *p, const char *name);
/* S, W and k as a session takes them (0 .. 2^31 - 1): 0, or 2 after a message. */
int cli_check_selection(const cli_params *p);

/* The session config p asks for, for model m with predictor pred (NULL: none): its context, S, W
 * and k where its policy selects (those not given scaled down, with a warning, where the defaults
 * cover the whole context), the KV offload in tokens; 0, or 1 after a message. */
int cli_session_config(const cli_params *p, const sift_model *m, const sift_predictor *pred, sift_session_config *cfg);
/* Sets cfg's kv_device_tokens from --kv-offload for model m (bytes become tokens through the K/V
 * bytes per token of cfg->kv_type); 0, or 1 after printing why it does not fit. */
int cli_apply_offload(const cli_params *p, const sift_model *m, sift_session_config *cfg);
/* The sampler p asks for (a random seed for --seed -1, printed to stderr). */
sift_sampler_config cli_sampler_config(const cli_params *p);
/* After sift_session_create: the butler policy's interval decided by the query, where p asks for
 * it (--predict-interval auto); 0, or 1 after a message. */
int cli_apply_butler_reuse(const cli_params *p, sift_session *s);
/* The projected keys' type p asks for. */
static inline sift_dtype cli_butler_keys(const cli_params *p) { return p->session.predictor_keys; }

#endif
