/* The command line's options table: each option once, with the commands that take it, its help
 * text and how its value is read; the parser and the --help that both come from it; each
 * command's defaults; and the library configs the options become (llama.cpp's common/arg.cpp is
 * the model). */
#include "options.h"
#include "cli.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- values ------------------------------------------------------------------------------------- */

/* How an option's value is read: a flag (an int set to 1), a string kept as given, a whole number
 * in [min, max] (int64_t or int), a number that is not NaN (double), or a function. */
typedef enum { OPT_FLAG, OPT_STR, OPT_I64, OPT_INT, OPT_F64, OPT_FN } opt_kind;

typedef struct cli_option cli_option;
/* Reads val (NULL when the option ended the line) into p: false after printing why not. */
typedef bool (*opt_set_fn)(cli_params *p, const cli_option *o, const char *name, const char *val);
/* The option's value in p, for "(default %D)". */
typedef void (*opt_show_fn)(const cli_params *p, char *buf, size_t len);

/* Help text for the commands in `cmds` (0: every other command); arg replaces the option's. */
typedef struct opt_help {
    unsigned cmds;
    const char *text;
    const char *arg;
} opt_help;

struct cli_option {
    const char *names; /* "-t, --threads": each name a command line may use */
    const char *arg;   /* the value's placeholder ("N"); NULL: a flag */
    unsigned cmds;     /* the commands that take and list it */
    unsigned quiet;    /* commands that take it without listing it */
    opt_kind kind;
    size_t field;      /* offsetof(cli_params, ...) for all kinds but OPT_FN */
    int64_t min, max;  /* OPT_I64, OPT_INT */
    const char *need;  /* what a valid value is, for messages (NULL: "a valid value") */
    opt_set_fn set;    /* OPT_FN */
    opt_show_fn show;  /* OPT_FN's default, where a help text shows it */
    opt_help help[4];  /* "%D" in a text: the default */
};

/* "sift run: -n needs a whole number >= 0, not 'x'" (or "needs a value" when there is none). */
static bool bad_value(const cli_params *p, const char *name, const char *val, const char *need)
{
    if (!val) fprintf(stderr, "%s: %s needs a value%s%s\n", p->who, name, need ? ": " : "", need ? need : "");
    else fprintf(stderr, "%s: %s needs %s, not '%s'\n", p->who, name, need ? need : "a valid value", val);
    return false;
}

#define FIELD(p, o, type) ((type *)((char *)(p) + (o)->field))

static bool parse_double(const char *s, double *out)
{
    char *end = NULL;
    const double x = s ? strtod(s, &end) : 0.0;
    if (!s || !end || *end || end == s || x != x) return false;
    *out = x;
    return true;
}

static bool set_value(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    int64_t v = 0;
    switch (o->kind) {
    case OPT_FLAG: *FIELD(p, o, int) = 1; return true;
    case OPT_STR:
        if (!val) return bad_value(p, name, val, o->need);
        *FIELD(p, o, const char *) = val;
        return true;
    case OPT_I64:
    case OPT_INT:
        if (!cli_parse_i64(val, &v) || v < o->min || v > o->max) return bad_value(p, name, val, o->need);
        if (o->kind == OPT_INT) *FIELD(p, o, int) = (int)v;
        else *FIELD(p, o, int64_t) = v;
        return true;
    case OPT_F64: return parse_double(val, FIELD(p, o, double)) || bad_value(p, name, val, o->need);
    case OPT_FN: return o->set(p, o, name, val);
    }
    return false;
}

/* ---- the options that a function reads ---------------------------------------------------------- */

/* --ctx N[,N...] of the benchmarks: up to CLI_MAX_CTXS contexts; false after a message. */
static bool parse_ctx_list(const char *who, const char *list, int64_t *ctxs, int *n_ctxs)
{
    *n_ctxs = 0;
    for (const char *p = list; p && *p;) {
        char *end;
        errno = 0;
        const long long n = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || errno || n < 1 || n > INT32_MAX || *n_ctxs == CLI_MAX_CTXS) {
            fprintf(stderr, "%s: --ctx needs up to %d comma-separated contexts in tokens (1 .. 2^31 - 1), not '%s'\n", who,
                    CLI_MAX_CTXS, list);
            return false;
        }
        ctxs[(*n_ctxs)++] = n;
        p = *end ? end + 1 : end;
    }
    if (*n_ctxs == 0) fprintf(stderr, "%s: --ctx needs a context in tokens\n", who);
    return *n_ctxs > 0;
}

/* "off" or a threshold in [-1, 1]. */
static bool parse_sel_cache(const char *val, float *out)
{
    if (!val) return false;
    if (!strcmp(val, "off")) {
        *out = SIFT_SEL_CACHE_OFF;
        return true;
    }
    char *end = NULL;
    const double x = strtod(val, &end);
    if (!end || *end || !(x >= -1.0 && x <= 1.0)) return false;
    *out = (float)x;
    return true;
}

/* "dense, tokenselect (or select), streaming, ..." for messages. */
static void policy_choices(char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int p = 0; p < SIFT_POLICY_COUNT && at < len; p++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s%s", p ? ", " : "", sift_policy_name((sift_policy)p),
                               p == SIFT_POLICY_TOKENSELECT ? " (or select)" : "");
}

static bool set_policy(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    (void)o;
    if (val && !strcmp(val, "select")) val = "tokenselect";
    if (val && sift_policy_parse(val, &p->session.policy) == SIFT_OK) return true;
    char choices[256];
    policy_choices(choices, sizeof choices);
    fprintf(stderr, "%s: %s needs one of %s%s%s%s\n", p->who, name, choices, val ? "; not '" : "", val ? val : "", val ? "'" : "");
    return false;
}
static void show_policy(const cli_params *p, char *buf, size_t len) { snprintf(buf, len, "%s", sift_policy_name(p->session.policy)); }

/* -n: chat's -1 is "until the end of the turn" */
static bool set_n_predict(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    const int64_t min = p->command == CLI_CHAT ? -1 : 0;
    if (cli_parse_i64(val, &p->n_predict) && p->n_predict >= min) return true;
    return bad_value(p, name, val, min < 0 ? "a whole number >= 0, or -1" : o->need);
}
static void show_n_predict(const cli_params *p, char *buf, size_t len) { snprintf(buf, len, "%lld", (long long)p->n_predict); }

/* --ctx: one context (0: the model's) for the commands that run a session, a list for the benches */
static bool set_ctx(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    (void)o;
    if (p->command & (CLI_BENCH_ATTN | CLI_BENCH_DECODE)) return parse_ctx_list(p->who, val, p->ctxs, &p->n_ctxs);
    if (!cli_parse_i64(val, &p->session.n_ctx) || p->session.n_ctx < 0)
        return bad_value(p, name, val, "a number of tokens >= 1 (0: the model's)");
    p->ctxs[0] = p->session.n_ctx;
    p->n_ctxs = 1;
    return true;
}
static void show_ctx(const cli_params *p, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < p->n_ctxs && at < len; i++) at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "," : "", (long long)p->ctxs[i]);
}

static bool set_kv(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    (void)o;
    if (!val || (strcmp(val, "f16") != 0 && strcmp(val, "f32") != 0)) return bad_value(p, name, val, "f16 or f32");
    p->session.kv_type = !strcmp(val, "f16") ? SIFT_F16 : SIFT_F32;
    return true;
}
static void show_kv(const cli_params *p, char *buf, size_t len) { snprintf(buf, len, "%s", sift_dtype_name(p->session.kv_type)); }

static bool set_page_size(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    int64_t v = 0;
    if (!cli_parse_i64(val, &v) || v < 1 || v > (1 << 20) || (v & (v - 1)) != 0) return bad_value(p, name, val, o->need);
    p->session.page_size = v;
    return true;
}
static void show_page_size(const cli_params *p, char *buf, size_t len) { snprintf(buf, len, "%lld", (long long)p->session.page_size); }

static bool set_sel_cache(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    return parse_sel_cache(val, &p->session.sel_cache) || bad_value(p, name, val, o->need);
}
static void show_sel_cache(const cli_params *p, char *buf, size_t len)
{
    if (p->session.sel_cache > 1.0f) snprintf(buf, len, "off");
    else snprintf(buf, len, "%g", (double)p->session.sel_cache);
}

static bool set_predict_interval(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    int64_t v = 0;
    p->predict_by_query = val && !strcmp(val, "auto");
    if (p->predict_by_query) return true;
    if (!cli_parse_i64(val, &v) || v < 1 || v > 1024) return bad_value(p, name, val, o->need);
    p->session.predict_interval = (int)v;
    return true;
}
static void show_predict_interval(const cli_params *p, char *buf, size_t len)
{
    if (p->predict_by_query) snprintf(buf, len, "auto");
    else snprintf(buf, len, "%d", p->session.predict_interval);
}

static bool set_predict_threshold(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    float t = 0.0f;
    if (!parse_sel_cache(val, &t) || t > 1.0f) return bad_value(p, name, val, o->need);
    p->predict_threshold = t;
    return true;
}
static void show_predict_threshold(const cli_params *p, char *buf, size_t len)
{
    snprintf(buf, len, "%g", (double)p->predict_threshold);
}

static bool set_butler_keys(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    (void)o;
    if (!val || (strcmp(val, "f16") != 0 && strcmp(val, "int8") != 0)) {
        if (!val) return bad_value(p, name, val, "f16 or int8");
        fprintf(stderr, "%s: %s needs f16 or int8, not '%s'\n", p->who, name, val);
        return false;
    }
    p->session.predictor_keys = !strcmp(val, "int8") ? SIFT_I8 : SIFT_F16;
    return true;
}

/* --kv-offload SIZE: tokens (65536) or bytes with K, M, G or T (512M, 24G) */
static bool set_offload(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    (void)o;
    if (!val) {
        fprintf(stderr, "%s: %s needs the device pool's size: tokens (65536) or bytes (512M, 24G)\n", p->who, name);
        return false;
    }
    char *end = NULL;
    errno = 0;
    const long long n = strtoll(val, &end, 10);
    int shift = -1; /* -1: tokens; else bytes of 2^shift */
    bool ok = !errno && end != val && n >= 1;
    if (ok && *end) {
        const char u = (char)(*end | 0x20);
        shift = u == 'k' ? 10 : u == 'm' ? 20 : u == 'g' ? 30 : u == 't' ? 40 : -1;
        end++;
        ok = shift > 0 && (!*end || !strcmp(end, "B") || !strcmp(end, "iB")) && n <= (INT64_MAX >> shift);
    }
    if (!ok) {
        fprintf(stderr, "%s: %s needs tokens (65536) or bytes with K, M, G or T (512M, 24G), not '%s'\n", p->who, name, val);
        return false;
    }
    p->offload = val;
    p->offload_tokens = shift < 0 ? n : 0;
    p->offload_bytes = shift < 0 ? 0 : (int64_t)n << shift;
    return true;
}

static bool set_seed(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    return (cli_parse_i64(val, &p->seed) && p->seed >= -1) || bad_value(p, name, val, o->need);
}
static void show_seed(const cli_params *p, char *buf, size_t len) { snprintf(buf, len, "%lld", (long long)p->seed); }

/* A comma-separated list of whole numbers >= 0, of any length, into a new array *out (replacing
 * the previous one on success). */
static bool parse_list_i64(const char *s, int64_t **out, int *n)
{
    if (!s || !*s) return false;
    size_t cap = 1;
    for (const char *c = s; *c; c++) cap += *c == ',';
    if (cap > 100000) return false;
    int64_t *v = malloc(cap * sizeof *v);
    if (!v) return false;
    int got = 0;
    while (*s) {
        char *end;
        errno = 0;
        const long long x = strtoll(s, &end, 10);
        if (end == s || x < 0 || errno || (*end && *end != ',') || (*end == ',' && !end[1])) {
            free(v);
            return false;
        }
        v[got++] = x;
        s = *end == ',' ? end + 1 : end;
    }
    free(*out);
    *out = v;
    *n = got;
    return true;
}

static bool set_budgets(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    return parse_list_i64(val, &p->budgets, &p->n_budgets) || bad_value(p, name, val, o->need);
}
static void show_budgets(const cli_params *p, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < p->n_budgets && at < len; i++) at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "," : "", (long long)p->budgets[i]);
}

/* butler's variants in eval's --policies: :iN (prediction interval; with :auto the longest), :auto
 * (the interval decided by the query), :tT (auto's threshold), :nf (neighbour fetch), :int8 */
static bool parse_butler_variant(char *tok, cli_policy_list *l)
{
    for (char *opt = tok + 6; opt && *opt == ':';) {
        char *next = strchr(opt + 1, ':');
        if (next) *next = 0;
        long long iv = 0;
        double t = 0.0;
        char *end = NULL;
        if (!strcmp(opt + 1, "nf")) l->neighbors[l->n] = true;
        else if (!strcmp(opt + 1, "int8")) l->int8_keys[l->n] = true;
        else if (!strcmp(opt + 1, "auto")) l->by_query[l->n] = true;
        else if (opt[1] == 'i' && (iv = strtoll(opt + 2, &end, 10)) >= 1 && iv <= 1024 && end && !*end)
            l->interval[l->n] = (int)iv;
        else if (opt[1] == 't' && (t = strtod(opt + 2, &end)) >= -1.0 && t <= 1.0 && end != opt + 2 && !*end)
            l->threshold[l->n] = (float)t;
        else return false;
        if (next) *next = ':';
        opt = next;
    }
    tok[6] = 0;
    /* a threshold belongs to auto, which does not go with neighbour fetch (sift_session_set_butler_reuse) */
    return l->by_query[l->n] ? !l->neighbors[l->n] : l->threshold[l->n] > 1.0f;
}

bool cli_parse_policy_list(const char *s, cli_policy_list *l)
{
    l->n = 0;
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", s ? s : "") >= (int)sizeof buf) return false; /* never a truncated list */
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (l->n == CLI_MAX_POLICIES) return false;
        l->interval[l->n] = 0;
        l->by_query[l->n] = false;
        l->threshold[l->n] = SIFT_SEL_CACHE_OFF;
        l->neighbors[l->n] = false;
        l->int8_keys[l->n] = false;
        if (!strncmp(tok, "butler:", 7) && !parse_butler_variant(tok, l)) return false;
        const size_t len = strlen(tok);
        const bool x = len > 2 && !strcmp(tok + len - 2, "+x");
        if (x) tok[len - 2] = 0;
        sift_policy p;
        if (sift_policy_parse(tok, &p) != SIFT_OK) return false;
        if (x && p != SIFT_POLICY_TOKENSELECT && p != SIFT_POLICY_STREAMING) return false;
        l->policy[l->n] = p;
        l->extrapolated[l->n++] = x;
    }
    return l->n > 0;
}

static bool set_policies(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    return cli_parse_policy_list(val, &p->policies) || bad_value(p, name, val, o->need);
}

/* --samples: eval's 0 is "all"; the demo runs 1 .. 16 */
static bool set_samples(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    (void)o;
    const int64_t lo = p->command == CLI_DEMO ? 1 : 0, hi = p->command == CLI_DEMO ? 16 : INT64_MAX;
    return (cli_parse_i64(val, &p->samples) && p->samples >= lo && p->samples <= hi) || bad_value(p, name, val, NULL);
}
static void show_samples(const cli_params *p, char *buf, size_t len) { snprintf(buf, len, "%lld", (long long)p->samples); }

const char *const cli_attn_mode_names[4] = {"dense", "select", "cached", "butler"};

static bool set_attn(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    unsigned bits = 0;
    for (const char *s = val ? val : ""; *s;) {
        const size_t len = strcspn(s, ",");
        int mode = -1;
        for (int m = 0; m < 4; m++)
            if (strlen(cli_attn_mode_names[m]) == len && !strncmp(s, cli_attn_mode_names[m], len)) mode = m;
        if (mode < 0) return bad_value(p, name, val, o->need);
        bits |= 1u << mode;
        s += len;
        if (*s == ',') s++;
    }
    p->attn_modes = bits;
    return bits != 0 || bad_value(p, name, val, o->need);
}

static bool set_heads(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    const char *slash = val ? strchr(val, '/') : NULL;
    char first[32] = {0};
    int64_t hq = 0, hkv = 0;
    bool ok = slash && (size_t)(slash - val) < sizeof first;
    if (ok) {
        memcpy(first, val, (size_t)(slash - val));
        ok = cli_parse_i64(first, &hq) && cli_parse_i64(slash + 1, &hkv) && hq >= 1 && hkv >= 1 && hq <= 4096 && hkv <= 4096;
    }
    if (!ok) return bad_value(p, name, val, o->need);
    p->q_heads = hq;
    p->kv_heads = hkv;
    return true;
}
static void show_heads(const cli_params *p, char *buf, size_t len)
{
    snprintf(buf, len, "%lld/%lld", (long long)p->q_heads, (long long)p->kv_heads);
}

static bool set_vote(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    if (!val || (strcmp(val, "sum") != 0 && strcmp(val, "max") != 0)) return bad_value(p, name, val, o->need);
    p->vote = !strcmp(val, "sum") ? SIFT_VOTE_SOFTMAX_SUM : SIFT_VOTE_KVHEAD_MAX;
    return true;
}
static void show_vote(const cli_params *p, char *buf, size_t len) { snprintf(buf, len, "%s", p->vote == SIFT_VOTE_SOFTMAX_SUM ? "sum" : "max"); }

static bool set_key_dim(cli_params *p, const cli_option *o, const char *name, const char *val)
{
    return (cli_parse_i64(val, &p->key_dim) && p->key_dim >= 0 && p->key_dim <= 128 && p->key_dim % 8 == 0) ||
           bad_value(p, name, val, o->need);
}

/* ---- the table ---------------------------------------------------------------------------------- */

#define SESSION (CLI_RUN | CLI_LOGITS | CLI_CHAT)     /* the commands that run one session */
#define GENERATE (CLI_RUN | CLI_LOGITS)               /* ... with every session option */
#define BENCH (CLI_BENCH_ATTN | CLI_BENCH_DECODE)
#define MODEL (SESSION | CLI_EVAL | CLI_DEMO | CLI_BENCH_DECODE | CLI_TOKENIZE)
#define DEVICE (SESSION | CLI_EVAL | CLI_DEMO | BENCH) /* the commands that open a backend */
#define OFF(f) .field = offsetof(cli_params, f)
#define ANY .min = INT64_MIN, .max = INT64_MAX

static const cli_option options[] = {
    {"-m, --model", "PATH", MODEL, 0, OPT_STR, OFF(model), .need = "a GGUF file",
     .help = {{CLI_DEMO, "the retrieval model (default " CLI_DEMO_MODEL ")"},
              {CLI_EVAL | CLI_BENCH_DECODE | CLI_TOKENIZE, "GGUF model"},
              {0, "GGUF model (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K weights)"}}},
    {"-p, --prompt", "TEXT", GENERATE, CLI_CHAT, OPT_STR, OFF(prompt), .help = {{0, "prompt (default: empty: generation starts from BOS)"}}},
    {"-sys, --system", "TEXT", CLI_CHAT, 0, OPT_STR, OFF(prompt),
     .help = {{0, "system prompt (-p, --prompt: the same, as in llama.cpp's -cnv)"}}},
    {"-f, --file", "FILE", GENERATE | CLI_TOKENIZE, 0, OPT_STR, OFF(prompt_file),
     .help = {{CLI_TOKENIZE, "the text to tokenize (at most 256 MiB)", "TEXT"},
              {0, "read the prompt from FILE (instead of -p; at most 256 MiB)"}}},
    {"--chat-template", "T", CLI_CHAT, 0, OPT_STR, OFF(chat_template),
     .help = {{0, "chatml, llama3, llama2, llama2-sys, llama2-sys-bos or llama2-sys-strip\n"
                  "(default: recognised from the model's tokenizer.chat_template by its\n"
                  "markers; sift runs no Jinja)"}}},
    {"-n, --n-predict", "N", SESSION, 0, OPT_FN, .need = "a whole number >= 0", .set = set_n_predict, .show = show_n_predict,
     .help = {{CLI_CHAT, "the most tokens per reply (default %D: until the end of the turn)"},
              {CLI_LOGITS, "greedy steps after the prompt (default %D); they stop early, with a\n"
                           "message, when the context is full"},
              {0, "tokens to generate (default %D); generation stops early, with a\n"
                  "message, when the context is full (unless --context-shift)"}}},
    {"--context-shift", NULL, CLI_RUN, 0, OPT_FLAG, OFF(context_shift),
     .help = {{0, "when the context is full, keep the first --keep tokens of the prompt,\n"
                  "drop half of the others (the oldest), re-evaluate what is kept and\n"
                  "go on generating"}}},
    {"--keep", "N", CLI_RUN, 0, OPT_I64, OFF(keep), .min = -1, .max = INT64_MAX,
     .need = "a number of tokens >= 0, or -1 for the whole prompt",
     .help = {{0, "tokens of the prompt a context shift keeps, BOS not counted (default\n"
                  "%D; -1: the whole prompt)"}}},
    {"--no-warmup", NULL, CLI_RUN, 0, OPT_FLAG, OFF(no_warmup),
     .help = {{0, "on a GPU backend, skip the warm-up steps (rewound) that let it compile\n"
                  "its kernels before prefill is timed"}}},
    {"-cnv, --conversation", NULL, CLI_RUN, CLI_CHAT, OPT_FLAG, OFF(conversation),
     .help = {{0, "chat instead: sift chat with these arguments (-p is the system\n"
                  "prompt; see sift chat --help)"}}},
    {"--backend", "B", DEVICE, 0, OPT_STR, OFF(backend), .need = "cpu, vulkan or cuda",
     .help = {{0, "cpu, vulkan or cuda (default: cuda, else a Vulkan GPU, else cpu;\n"
                  "`sift devices` shows the choice)"}}},
    {"-v, --verbose", NULL, DEVICE, 0, OPT_FLAG, OFF(verbose),
     .help = {{0, "also print the library's INFO messages (the device opened, the model\n"
                  "loaded); its warnings and errors are printed always"}}},
    {"-t, --threads", "N", DEVICE, 0, OPT_I64, OFF(threads), .min = 1, .max = 4096, .need = "a thread count in 1 .. 4096",
     .help = {{0, "the CPU backend's threads (default: one per core)"}}},
    {"--policy", "P", SESSION, 0, OPT_FN, .set = set_policy, .show = show_policy,
     .help = {{CLI_CHAT, "decode attention, as in sift run but for butler (default %D)"},
              {0, "decode attention: dense, tokenselect, streaming, h2o, snapkv, quest,\n"
                  "oracle or butler (default %D; see docs/policies.md); select =\n"
                  "tokenselect"}}},
    {"--budget", "k", SESSION | BENCH, 0, OPT_I64, OFF(session.budget), ANY,
     .help = {{0, "tokens chosen per step by selection (default %D)"}}},
    {"--sink", "S", SESSION | BENCH | CLI_EVAL, 0, OPT_I64, OFF(session.sink), ANY,
     .help = {{0, "first tokens always attended (default %D)"}}},
    {"--window", "W", SESSION | BENCH | CLI_EVAL, 0, OPT_I64, OFF(session.window), ANY,
     .help = {{SESSION, "last tokens always attended (default %D)\n"
                        "(S, W, k are used by the selection policies only; where the defaults\n"
                        "cover the whole context, those not given become ctx/64, ctx/16, ctx/4,\n"
                        "with a warning)"},
              {0, "last tokens always attended (default %D)"}}},
    {"--sel-cache", "T|off", GENERATE | CLI_EVAL | CLI_BENCH_DECODE, 0, OPT_FN, .need = "'off' or a threshold in [-1, 1]",
     .set = set_sel_cache, .show = show_sel_cache,
     .help = {{CLI_BENCH_DECODE, "the third mode: TokenSelect with the Selection Cache at threshold T\n"
                                 "(default %D: every step after the first reuses, the cache's best case\n"
                                 "on random data; 'off' leaves the mode out)"},
              {0, "TokenSelect's Selection Cache: reuse a layer's index set while the\n"
                  "query's cosine to the one that chose it is >= T (default %D)"}}},
    {"--extrapolate", NULL, GENERATE, 0, OPT_FLAG, OFF(session.extrapolate),
     .help = {{0, "length extrapolation: keys cached before RoPE, positions over the\n"
                  "selected set (tokenselect or streaming; prefill runs token by token)"}}},
    {"--sparse-prefill", NULL, GENERATE, 0, OPT_FLAG, OFF(session.sparse_prefill),
     .help = {{0, "prefill chunks attend the top-k chosen by the chunk's mean query"}}},
    {"--predictor", "FILE", GENERATE | CLI_EVAL | CLI_BENCH_DECODE, 0, OPT_STR, OFF(predictor),
     .help = {{CLI_EVAL, "TokenButler's predictor (GGUF, made by tools/butler/train.py; 'random':\n"
                         "a random one): adds butler to the default policies; in --policies,\n"
                         "butler:iN runs it with prediction interval N, butler:nf with\n"
                         "neighbour fetch (butler:i4:nf both) and butler:auto with the interval\n"
                         "decided by the query (--predict-threshold, --max-interval)"},
              {CLI_BENCH_DECODE, "TokenButler's predictor for this model (GGUF, made by\n"
                                 "tools/butler/train.py; 'random' makes a random one): a last mode\n"
                                 "times the butler policy"},
              {0, "TokenButler's predictor for this model (GGUF, made by tools/butler/train.py);\n"
                  "'random' makes a random one (for timing only); the butler policy needs it"}}},
    {"--predict-interval", "I|auto", GENERATE | CLI_BENCH_DECODE, 0, OPT_FN, .set = set_predict_interval,
     .show = show_predict_interval, .need = "a number of steps in 1 .. 1024 (1, 2, 4, 8, 16 are usual) or 'auto'",
     .help = {{0, "butler: recompute the index lists every I-th decode step (default %D);\n"
                  "auto: a layer recomputes its lists when its predicted query has moved\n"
                  "(--predict-threshold), and at least every --max-interval steps"}}},
    {"--predict-threshold", "T", GENERATE | CLI_EVAL | CLI_BENCH_DECODE, 0, OPT_FN, .set = set_predict_threshold,
     .show = show_predict_threshold, .need = "a threshold in [-1, 1]",
     .help = {{CLI_EVAL, "butler:auto: reuse a layer's lists while the cosine of its predicted query\n"
                         "to the one that chose them is >= T (default %D; butler:auto:tT sets it\n"
                         "for one entry of --policies)"},
              {0, "with --predict-interval auto: reuse a layer's lists while the cosine of\n"
                  "its predicted query to the one that chose them is >= T (default %D)"}}},
    {"--max-interval", "M", GENERATE | CLI_EVAL | CLI_BENCH_DECODE, 0, OPT_INT, OFF(max_interval), .min = 1, .max = 1024,
     .need = "a number of steps in 1 .. 1024",
     .help = {{CLI_EVAL, "butler:auto: recompute the lists at least every M steps (default %D;\n"
                         "butler:auto:iM sets it for one entry of --policies)"},
              {0, "with --predict-interval auto: recompute the lists at least every M steps\n"
                  "(default %D)"}}},
    {"--neighbor-fetch", NULL, GENERATE | CLI_BENCH_DECODE, 0, OPT_FLAG, OFF(session.neighbor_fetch),
     .help = {{0, "butler: also attend the token after each selected one"}}},
    {"--butler-keys", "f16|int8", GENERATE | CLI_EVAL | CLI_BENCH_DECODE, 0, OPT_FN, .set = set_butler_keys,
     .help = {{0, "butler: the projected keys' type (default f16; int8 keeps a scale per\n"
                  "token and KV head)"}}},
    {"-c, --ctx", "N", SESSION | BENCH, 0, OPT_FN, .set = set_ctx, .show = show_ctx,
     .help = {{CLI_BENCH_ATTN, "tokens in the KV cache, one run per context (default %D)", "N[,N...]"},
              {CLI_BENCH_DECODE, "contexts, each timed in every mode (default %D)", "N[,N...]"},
              {CLI_CHAT, "tokens in the conversation (default: the model's training context)"},
              {0, "tokens per sequence, prompt included (default: the model's training\ncontext)"}}},
    {"--kv", "f16|f32", SESSION | CLI_BENCH_ATTN, 0, OPT_FN, .set = set_kv, .show = show_kv,
     .help = {{CLI_BENCH_ATTN, "K/V element type (default %D)"}, {0, "KV cache type (default %D)"}}},
    {"--page-size", "P", GENERATE, 0, OPT_FN, .need = "a power of two from 1 to 1048576 (tokens per KV page)",
     .set = set_page_size, .show = show_page_size,
     .help = {{0, "KV cache page in tokens, a power of two from 1 to 2^20 (default %D)"}}},
    {"--kv-offload", "SIZE", SESSION | CLI_EVAL | CLI_BENCH_DECODE, 0, OPT_FN, .set = set_offload,
     .help = {{CLI_EVAL, "KV offload: SIZE of the KV pool on the device (tokens, or bytes with K,\n"
                         "M, G, T), the rest in host memory the device reads (sift run --help);\n"
                         "every figure equals the resident run's"},
              {0, "KV offload: keep SIZE of the KV pool on the device and the rest in host\n"
                  "memory the device reads in place (pinned on CUDA, a host-visible heap on\n"
                  "Vulkan); SIZE is tokens (65536) or bytes of device K/V pool (512M, 24G: KiB,\n"
                  "MiB, GiB, TiB). The sink's and the newest pages stay on the device; older\n"
                  "pages move to the host when it fills. The output does not change"}}},
    {"--kv-offload-v-only", NULL, SESSION | CLI_EVAL | CLI_BENCH_DECODE, 0, OPT_FLAG, OFF(session.kv_offload_v_only),
     .help = {{CLI_EVAL, "with --kv-offload: only V moves to the host"},
              {CLI_BENCH_DECODE, "with --kv-offload: only V moves to the host, K stays on the device whole\n"
                                 "(with --kv-offload every mode runs offloaded, each row of the table\n"
                                 "is followed by the pools' sizes, and the host link's bandwidth comes\n"
                                 "first: the device reading 1 GiB of host memory in place by get_rows,\n"
                                 "beside the same read of device memory)"},
              {0, "with --kv-offload: only V moves to the host, K stays on the device whole\n"
                  "(SIZE counts V alone; for tokenselect and dense, which read every key)"}}},
    {"--chunk", "N", GENERATE, 0, OPT_I64, OFF(session.chunk), ANY, .help = {{0, "prefill tokens per step (default %D)"}}},
    {"--temp", "T", SESSION, 0, OPT_F64, OFF(temp), .need = "a number", .help = {{0, "temperature; 0 is greedy (default %D)"}}},
    {"--top-k", "K", SESSION, 0, OPT_I64, OFF(top_k), .min = INT32_MIN, .max = INT32_MAX,
     .help = {{0, "sample from the K most likely tokens (default %D; 0: off)"}}},
    {"--top-p", "P", SESSION, 0, OPT_F64, OFF(top_p), .need = "a number",
     .help = {{0, "sample from the smallest set of probability P (default %D; 1: off)"}}},
    {"-s, --seed", "S", SESSION, 0, OPT_FN, .need = "a whole number >= 0, or -1 for a random seed", .set = set_seed,
     .show = show_seed, .help = {{0, "sampling seed (default %D; -1: a random seed, printed to stderr)"}}},
    {"--text", "FILE", CLI_EVAL, 0, OPT_STR, OFF(text),
     .help = {{0, "a text file (tokenized with the model's tokenizer, BOS first; at most\n256 MiB)"}}},
    {"--retrieval", "FILE", CLI_EVAL, 0, OPT_STR, OFF(retrieval), .help = {{0, "a retrieval test set (tools/retrieval/README.md)"}}},
    {"--policies", "LIST", CLI_EVAL, 0, OPT_FN, .set = set_policies,
     .help = {{0, "comma-separated (default dense,tokenselect,streaming,h2o,snapkv,quest,\n"
                  "oracle, and butler with --predictor); tokenselect+x and streaming+x\n"
                  "run with length extrapolation (SPEC 6) in a session of their own,\n"
                  "prefilled token by token"}}},
    {"--budgets", "LIST", CLI_EVAL, 0, OPT_FN, .set = set_budgets, .show = show_budgets,
     .help = {{0, "k values, any number of them (default %D; dense runs once)"}}},
    {"--prefix", "N", CLI_EVAL, 0, OPT_I64, OFF(prefix), .min = 1, .max = INT64_MAX,
     .help = {{0, "text: tokens prefilled before scoring starts (default %D)"}}},
    {"--max-tokens", "N", CLI_EVAL, 0, OPT_I64, OFF(max_tokens), .min = 2, .max = INT64_MAX,
     .help = {{0, "text: use at most N tokens of the file (default %D)"}}},
    {"--samples", "N", CLI_EVAL | CLI_DEMO, 0, OPT_FN, .set = set_samples, .show = show_samples,
     .help = {{CLI_DEMO, "samples to run, 1 .. 16 (default %D)"},
              {0, "retrieval: at most N samples of each length (default: all)"}}},
    {"--skip", "N", CLI_EVAL, 0, OPT_I64, OFF(skip), .min = 0, .max = INT64_MAX,
     .help = {{0, "retrieval: leave out the first N samples of each length (to split a run)"}}},
    {"--length", "N", CLI_EVAL, 0, OPT_I64, OFF(length), .min = 1, .max = INT64_MAX,
     .help = {{0, "retrieval: only the samples of N tokens, BOS included (a length\n"
                  "no sample has is an error that lists those present)"}}},
    {"--steps", "S", CLI_BENCH_DECODE, 0, OPT_I64, OFF(steps), .min = 1, .max = 10000,
     .help = {{0, "timed steps per context and mode (default %D, after 2 warm-ups)"}}},
    {"--batch", "B", CLI_BENCH_DECODE, 0, OPT_I64, OFF(batch), .min = 1, .max = 512,
     .help = {{0, "B sequences (1 .. 512, default %D), each at context N, decoded together:\n"
                  "one step gives a token to each (sift_session_decode_batch), so\n"
                  "tokens/s = B / the median step time"}}},
    {"--profile", NULL, CLI_BENCH_DECODE, 0, OPT_FLAG, OFF(profile),
     .help = {{0, "after the timed steps of each mode, 4 more with device timing: a table\n"
                  "of the step's stages, longest first, each with its nodes, us and\n"
                  "share per step and GB/s (the bytes its nodes must move at least, over\n"
                  "their time), then the summed device time beside the untimed step's\n"
                  "wall time. A row is a stage and one op, named 'stage: op' (qkv: matmul,\n"
                  "o: matmul, gate_up: matmul, down: matmul, logits: matmul, attn_norm and\n"
                  "ffn_norm and final_norm: rmsnorm, embed: get_rows, residual: add,\n"
                  "predictor_keys and predictor: TokenButler's), or the op alone where the\n"
                  "stage is named after it (rope, kv_write, swiglu); 'attention: OP' rows\n"
                  "split the attention into its ops (score or score_max, vote, select,\n"
                  "gather_attend or dense_attend, ...). Timed steps run differently (CUDA\n"
                  "launches the kernels one by one between events instead of one CUDA\n"
                  "graph), so the difference is an estimate of the host's work and the\n"
                  "launches"}}},
    {"--attn", "LIST", CLI_BENCH_DECODE, 0, OPT_FN, .set = set_attn,
     .help = {{0, "the modes to time, of dense, select, cached, butler (default: all\nthat apply)"}}},
    {"--heads", "Hq/Hkv", CLI_BENCH_ATTN, 0, OPT_FN, .need = "query and KV heads, each 1 .. 4096", .set = set_heads,
     .show = show_heads, .help = {{0, "query and KV heads (default %D)"}}},
    {"--dim", "D", CLI_BENCH_ATTN, 0, OPT_I64, OFF(dim), .min = 1, .max = 4096,
     .help = {{0, "head dimension, 64 or 128 (default %D)"}}},
    {"--vote", "sum|max", CLI_BENCH_ATTN, 0, OPT_FN, .set = set_vote, .show = show_vote,
     .help = {{0, "head soft vote (TokenSelect) or per-KV-head max (default %D)"}}},
    {"--key-dim", "d'", CLI_BENCH_ATTN, 0, OPT_FN, .need = "a multiple of 8 in 0 .. 128", .set = set_key_dim,
     .help = {{0, "TokenButler's key dimension, a multiple of 8 (default 16; 0: no butler\ngraph)"}}},
    {"--repeat", "R", CLI_BENCH_ATTN, 0, OPT_I64, OFF(repeat), .min = 1, .max = 100000,
     .help = {{0, "timed repeats (default %D, after 3 warm-ups)"}}},
    {"--json", NULL, CLI_EVAL | BENCH | CLI_DEVICES, 0, OPT_FLAG, OFF(json),
     .help = {{CLI_EVAL, "one JSON object per result line (with each policy's Selection Cache\n"
                         "hits and steps, and its top-k warm start's hits and misses)"},
              {CLI_BENCH_ATTN, "print one JSON object per context, one a line, instead of the tables; a\n"
                               "figure that does not exist is null (gbps of a stage timed at 0 us; the\n"
                               "table prints - there)"},
              {CLI_DEVICES, "the same as one JSON object"},
              {0, "one JSON object per context and mode, one a line: ctx, attn (dense,\n"
                  "select, cached, butler), batch, ms_per_step, tokens_per_s, first_step_ms\n"
                  "(the first step after the fill, a warm-up), ms_per_token\n"
                  "(1000 / tokens_per_s), kv_gb, sel_cache_hit_rate, warm_hits and\n"
                  "warm_misses (the top-k's warm start, every step so far),\n"
                  "steps_run_ahead (steps that ran the graph built for them while the\n"
                  "step before ran; SIFT_STEP_AHEAD=0 builds each on the path) and, per\n"
                  "timed step (median), ahead_submit_us, ahead_build_us (the next step's\n"
                  "graph, while this one runs; of it ahead_graph_us, the engine's graph,\n"
                  "and ahead_prepare_us, the backend's plan and recording) and\n"
                  "ahead_wait_us (for the device),\n"
                  "kv_device_bytes, kv_host_bytes, pages_moved (host figures 0 without\n"
                  "offload; with --kv-offload a first line: host_link_gbps,\n"
                  "device_read_gbps, host_scattered_gbps, kv_offload, v_only); with\n"
                  "--profile also profile_steps, profile_us_per_step and profile:\n"
                  "[{stage, op, nodes_per_step, us_per_step, share, gbps}], a row per\n"
                  "stage and op as in the table (null where a figure does not exist)"}}},
    {"--profiles", NULL, CLI_DEVICES, 0, OPT_FLAG, OFF(profiles),
     .help = {{0, "list the Vulkan device profiles instead (SIFT_VULKAN_PROFILE=NAME narrows\n"
                  "what a device reports to one): each one's name, the devices it stands\n"
                  "for and the limits it sets"}}},
    {"--plot", "FILE.svg", CLI_EVAL | CLI_BENCH_ATTN, 0, OPT_STR, OFF(plot),
     .help = {{CLI_EVAL, "also draw the results against the budget, one line per policy\n"
                         "(retrieval: accuracy on all lengths; text: top-1 agreement with\n"
                         "dense; dense, which has no budget, as a flat line)"},
              {0, "also draw microseconds against the context: each stage of the selection\n"
                  "step and each graph's total, one line each (log scales; stages at 0 us\n"
                  "left out)"}}},
    {"--no-bos", NULL, CLI_TOKENIZE, 0, OPT_FLAG, OFF(no_bos), .help = {{0, "no BOS token first"}}},
    {"--special", NULL, CLI_TOKENIZE, 0, OPT_FLAG, OFF(special),
     .help = {{0, "control tokens written in TEXT (<|eot_id|>, <s>) are their ids, not text"}}},
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };
_Static_assert((int)N_OPTIONS <= (int)CLI_MAX_OPTIONS, "cli_params.given has a flag per option");

/* ---- defaults ----------------------------------------------------------------------------------- */

cli_params cli_params_default(const cli_command *cmd)
{
    cli_params p = {.command = cmd->bit, .session = sift_session_config_default(), .n_predict = 128, .temp = 0.8,
                    .top_p = 0.95, .top_k = 40, .seed = 1, .n_ctxs = 1, .prefix = 256, .max_tokens = 4096,
                    .steps = 16, .batch = 1, .repeat = 20, .q_heads = 32, .kv_heads = 8, .dim = 128, .key_dim = 16,
                    .vote = SIFT_VOTE_SOFTMAX_SUM};
    snprintf(p.who, sizeof p.who, "sift %s", cmd->name);
    p.session.predict_interval = 1;
    p.predict_threshold = CLI_PREDICT_THRESHOLD;
    p.max_interval = CLI_MAX_INTERVAL;
    switch (cmd->bit) {
    case CLI_LOGITS: p.temp = 0.0; break;
    case CLI_CHAT: p.n_predict = -1; break;
    case CLI_EVAL:
        p.session.sink = 4;
        p.session.window = 64;
        p.session.sel_cache = SIFT_SEL_CACHE_OFF;
        cli_parse_policy_list("dense,tokenselect,streaming,h2o,snapkv,quest,oracle", &p.policies);
        parse_list_i64("64,128,256", &p.budgets, &p.n_budgets); /* NULL where memory ran out: eval says so */
        break;
    case CLI_DEMO: p.samples = 3; break;
    case CLI_BENCH_ATTN: p.ctxs[0] = 32768; break;
    case CLI_BENCH_DECODE:
        p.ctxs[0] = 8192, p.ctxs[1] = 32768, p.ctxs[2] = 131072, p.n_ctxs = 3;
        p.session.sel_cache = -1.0f;
        break;
    default: break;
    }
    return p;
}

void cli_params_free(cli_params *p)
{
    free(p->budgets);
    p->budgets = NULL;
}

/* ---- parsing and --help ------------------------------------------------------------------------- */

/* Whether `name` is one of o's names ("-t" of "-t, --threads"). */
static bool has_name(const cli_option *o, const char *name)
{
    const size_t len = strlen(name);
    for (const char *s = o->names; *s;) {
        const size_t n = strcspn(s, ",");
        if (n == len && !strncmp(s, name, n)) return true;
        s += n;
        while (*s == ',' || *s == ' ') s++;
    }
    return false;
}

static const opt_help *help_for(const cli_option *o, unsigned command)
{
    for (int i = 0; i < 4 && o->help[i].text; i++)
        if (!o->help[i].cmds || (o->help[i].cmds & command)) return &o->help[i];
    return NULL;
}

/* An option's default as its help shows it. */
static void show_default(const cli_params *p, const cli_option *o, char *buf, size_t len)
{
    buf[0] = 0;
    const char *at = (const char *)p + o->field;
    switch (o->kind) {
    case OPT_I64: snprintf(buf, len, "%lld", (long long)*(const int64_t *)(const void *)at); break;
    case OPT_INT: snprintf(buf, len, "%d", *(const int *)(const void *)at); break;
    case OPT_F64: snprintf(buf, len, "%g", *(const double *)(const void *)at); break;
    case OPT_FN:
        if (o->show) o->show(p, buf, len);
        break;
    default: break;
    }
}

#define HELP_COLUMN 21 /* where help texts start */

static void print_option(FILE *f, const cli_params *p, const cli_option *o)
{
    const opt_help *h = help_for(o, p->command);
    if (!h) return;
    const char *arg = h->arg ? h->arg : o->arg;
    char left[64], def[96];
    snprintf(left, sizeof left, "  %s%s%s", o->names, arg ? " " : "", arg ? arg : "");
    fputs(left, f);
    int col = (int)strlen(left);
    fprintf(f, "%*s", col <= HELP_COLUMN - 1 ? HELP_COLUMN - col : 2, "");
    show_default(p, o, def, sizeof def);
    for (const char *s = h->text; *s; s++) {
        if (s[0] == '%' && s[1] == 'D') {
            fputs(def, f);
            s++;
        } else {
            fputc(*s, f);
            if (*s == '\n') fprintf(f, "%*s", HELP_COLUMN, "");
        }
    }
    fputc('\n', f);
}

static void print_help(FILE *f, const cli_command *cmd, const cli_params *defaults)
{
    fprintf(f, "usage: sift %s %s\n\n%s\noptions:\n", cmd->name, cmd->usage, cmd->about);
    for (int i = 0; i < N_OPTIONS; i++)
        if (options[i].cmds & cmd->bit) print_option(f, defaults, &options[i]);
    if (cmd->epilogue) fprintf(f, "\n%s", cmd->epilogue);
}

bool cli_parse(const cli_command *cmd, int argc, char **argv, cli_params *p, int *exit_code)
{
    *exit_code = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            const cli_params defaults = cli_params_default(cmd);
            print_help(stdout, cmd, &defaults);
            cli_params_free((cli_params *)&defaults);
            *exit_code = 0;
            return false;
        }
        int k = 0;
        while (k < N_OPTIONS && !(((options[k].cmds | options[k].quiet) & cmd->bit) && has_name(&options[k], a))) k++;
        if (k == N_OPTIONS) {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p->who, a);
            return false;
        }
        const bool takes = options[k].arg != NULL;
        if (!set_value(p, &options[k], a, takes && i + 1 < argc ? argv[i + 1] : NULL)) return false;
        p->given[k] = 1;
        if (takes) i++;
    }
    *exit_code = 0;
    return true;
}

bool cli_given(const cli_params *p, const char *name)
{
    for (int k = 0; k < N_OPTIONS; k++)
        if (has_name(&options[k], name)) return p->given[k] != 0;
    return false;
}

/* ---- the library's configs ---------------------------------------------------------------------- */

int cli_check_selection(const cli_params *p)
{
    const struct { const char *flag; int64_t v; } swk[3] = {
        {"--sink", p->session.sink}, {"--window", p->session.window}, {"--budget", p->session.budget}};
    for (int i = 0; i < 3; i++) {
        if (swk[i].v < 0) {
            fprintf(stderr, "%s: %s needs a number of tokens >= 0, not %lld\n", p->who, swk[i].flag, (long long)swk[i].v);
            return 2;
        }
        /* a session takes at most 2^31 - 1 (sift_session_create); checked here so that S + W + k
         * cannot overflow */
        if (swk[i].v > INT32_MAX) {
            fprintf(stderr, "%s: %s needs a number of tokens <= %d, not %lld\n", p->who, swk[i].flag, INT32_MAX, (long long)swk[i].v);
            return 2;
        }
    }
    return 0;
}

/* Sets cfg's kv_device_tokens from --kv-offload for model m (bytes become tokens through the K/V
 * bytes per token of cfg->kv_type); 0, or 1 after printing why it does not fit. */
int cli_apply_offload(const cli_params *p, const sift_model *m, sift_session_config *cfg)
{
    cfg->kv_device_tokens = 0;
    if (!p->offload) {
        cfg->kv_offload_v_only = 0;
        if (!p->session.kv_offload_v_only) return 0;
        fprintf(stderr, "%s: --kv-offload-v-only needs --kv-offload SIZE\n", p->who);
        return 1;
    }
    int64_t tokens = p->offload_tokens;
    if (p->offload_bytes) {
        sift_model_info info;
        sift_model_get_info(m, &info);
        const int64_t per_token = (int64_t)info.n_layers * (p->session.kv_offload_v_only ? 1 : 2) * info.n_kv_heads *
                                  info.head_dim * (int64_t)sift_dtype_size(cfg->kv_type);
        tokens = per_token > 0 ? p->offload_bytes / per_token : 0;
        if (tokens < 1) {
            fprintf(stderr, "%s: --kv-offload %s holds no token of this model's K/V (%lld bytes a token)\n", p->who,
                    p->offload, (long long)per_token);
            return 1;
        }
    }
    cfg->kv_device_tokens = tokens;
    return 0;
}

/* Selection never runs where S + W + k covers the whole context: those not given are scaled. */
static void scale_selection(const cli_params *p, int64_t n_ctx, sift_session_config *cfg)
{
    const bool sink_set = cli_given(p, "--sink"), window_set = cli_given(p, "--window"), budget_set = cli_given(p, "--budget");
    if (cfg->sink + cfg->window + cfg->budget >= n_ctx && !(sink_set && window_set && budget_set)) {
        const int64_t s0 = cfg->sink, w0 = cfg->window, k0 = cfg->budget;
        if (!sink_set) cfg->sink = n_ctx / 64;
        if (!window_set) cfg->window = n_ctx / 16;
        if (!budget_set) cfg->budget = n_ctx / 4;
        fprintf(stderr,
                "%s: warning: S=%lld W=%lld k=%lld cover the whole context of %lld tokens, so %s would select "
                "nothing; using S=%lld W=%lld k=%lld (set --sink, --window, --budget to choose)\n",
                p->who, (long long)s0, (long long)w0, (long long)k0, (long long)n_ctx, sift_policy_name(cfg->policy),
                (long long)cfg->sink, (long long)cfg->window, (long long)cfg->budget);
    }
    if (cfg->sink + cfg->window + cfg->budget >= n_ctx)
        fprintf(stderr,
                "%s: warning: S + W + k = %lld >= the context of %lld tokens: %s selects nothing and every step "
                "attends every token (lower --sink, --window or --budget, or raise -c/--ctx)\n",
                p->who, (long long)(cfg->sink + cfg->window + cfg->budget), (long long)n_ctx, sift_policy_name(cfg->policy));
}

int cli_session_config(const cli_params *p, const sift_model *m, const sift_predictor *pred, sift_session_config *cfg)
{
    *cfg = p->session;
    const sift_session_config lib = sift_session_config_default();
    sift_model_info info;
    sift_model_get_info(m, &info);
    const int64_t n_ctx = cfg->n_ctx ? cfg->n_ctx : info.n_ctx_train;
    if (cfg->policy == SIFT_POLICY_DENSE) { /* S, W, k matter to the selection policies only */
        cfg->sink = lib.sink;
        cfg->window = lib.window;
        cfg->budget = lib.budget;
    } else if (n_ctx > 0) {
        scale_selection(p, n_ctx, cfg);
    }
    cfg->predictor = pred;
    if (p->predict_by_query) cfg->predict_interval = p->max_interval; /* auto: the longest a selection lasts */
    return cli_apply_offload(p, m, cfg);
}

int cli_apply_butler_reuse(const cli_params *p, sift_session *s)
{
    if (!p->predict_by_query || sift_session_set_butler_reuse(s, p->predict_threshold) == SIFT_OK) return 0;
    fprintf(stderr, "%s: %s\n", p->who, sift_last_error());
    return 1;
}

/* A seed that differs from run to run (for --seed -1). */
static uint64_t random_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33; /* mix */
    return x & 0x7fffffffffffffffull;                     /* printable and accepted back by --seed */
}

sift_sampler_config cli_sampler_config(const cli_params *p)
{
    sift_sampler_config c = sift_sampler_config_default();
    c.temperature = (float)p->temp;
    c.top_k = (int)p->top_k;
    c.top_p = (float)p->top_p;
    c.seed = (uint64_t)p->seed;
    if (p->seed == -1) {
        c.seed = random_seed();
        fprintf(stderr, "%s: seed %llu (random; --seed %llu repeats this run)\n", p->who, (unsigned long long)c.seed,
                (unsigned long long)c.seed);
    }
    return c;
}
