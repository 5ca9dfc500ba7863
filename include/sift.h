/* sift — public C API.
 *
 * One header, opaque handles, status codes. Every function that can fail returns a sift_status;
 * on failure sift_last_error() gives a message naming the problem (per thread, valid until the
 * next failing call on that thread). Nothing in the library aborts on bad input.
 *
 * The header leads with what applications use: a context on a device, a model loaded into it,
 * sessions that run it (sift_session_generate streams tokens from a prompt; sift_session_eval
 * and a sampler are the step-by-step loop under it). After them comes the graph API the engine
 * is built on: tensors, a graph of ops over them, computed as often as needed, and the builder of
 * one layer's attention. The meaning of every op is in the comments there; docs/policies.md and
 * docs/kernels.md say how the decode-attention pipeline uses them and how the GPUs run them.
 * Calls for the library's own tests and benchmarks are in sift_testing.h (not installed).
 *
 * Configuration structs (sift_context_config, sift_session_config, sift_sampler_config,
 * sift_generate_config, sift_attn_config) can grow without breaking programs compiled against
 * an older header: each starts with `size_t struct_size`, which its _default() function sets to
 * the struct's size in the header the program was compiled with. Start every config from its
 * _default() and change the fields you need. The library reads the first struct_size bytes and
 * takes the defaults for fields beyond them (fields are only ever added at the end). A config
 * whose struct_size is 0 (zero-initialised instead of made by _default()) is refused with
 * SIFT_E_INVALID, as is one larger than the library knows (a newer header than the library).
 * Where a create call takes a config pointer, NULL means the defaults. The small parameter
 * structs of the graph API (sift_select_params, sift_rope_params) and the info structs the
 * library fills (sift_model_info, sift_predictor_info, sift_device_info) are fixed; they change
 * only with the major version.
 *
 * Threads. A context and a model may be shared by several threads: each thread creates and uses
 * its own sessions (and samplers, graphs and tensors) on them. What may run at the same time on
 * different threads: calls on different sessions of one model, calls on different graphs and
 * tensors of one context, model tokenize/token_piece/get_info, and anything on different
 * contexts. What must not: two calls on the same session, graph, sampler or tensor at once, and
 * destroying a context, model or predictor while another thread still calls it. Each context
 * runs the device work of its sessions one graph at a time (a lock around every call into its
 * backend), so sessions on one context share the device in turns; their host-side work (the host
 * policies, sampling, tokenizing) runs in parallel. sift_last_error() is per thread.
 *
 * Ownership. Destroying a handle drops the caller's reference; what still uses it keeps it
 * alive: a session keeps its model and predictor, a predictor its model, a model, graph or tensor
 * its context, and a view (sift_tensor_view, sift_tensor_paged_view) the storage of its parent
 * (and of its page table). So destroying a model before its sessions, or a tensor before its
 * views, is safe: the memory is freed when the last user is destroyed. Every handle must still be
 * destroyed exactly once, and is not to be used after its own destroy call.
 */
#ifndef SIFT_H
#define SIFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported symbols. On Windows a program using the DLL needs nothing defined (imports are the
 * default); one linking the static library defines SIFT_STATIC. The library's own build defines
 * SIFT_BUILD_SHARED for the DLL and SIFT_STATIC for the static library. */
#if defined(_WIN32)
#if defined(SIFT_BUILD_SHARED)
#define SIFT_API __declspec(dllexport)
#elif defined(SIFT_STATIC)
#define SIFT_API
#else
#define SIFT_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define SIFT_API __attribute__((visibility("default")))
#else
#define SIFT_API
#endif

/* The version of this header. sift_version() gives the library's: the two differ when a program
 * runs against another build of the shared library than it was compiled with (the soname changes
 * with the major version). */
#define SIFT_VERSION_MAJOR 0
#define SIFT_VERSION_MINOR 2
#define SIFT_VERSION_PATCH 0
#define SIFT_VERSION_STRING "0.2.0"
SIFT_API const char *sift_version(void);

typedef enum sift_status {
    SIFT_OK = 0,
    SIFT_E_INVALID,       /* a null or otherwise unusable argument */
    SIFT_E_SHAPE,         /* shapes that do not fit the op */
    SIFT_E_DTYPE,         /* a tensor of the wrong element type */
    SIFT_E_GRAPH,         /* a graph that does not connect (reads data nobody produced) */
    SIFT_E_NOMEM,         /* host allocation failed */
    SIFT_E_DEVICE_NOMEM,  /* device allocation failed */
    SIFT_E_LIMIT,         /* larger than a device limit allows */
    SIFT_E_UNAVAILABLE,   /* backend not built, or no device/driver present */
    SIFT_E_UNSUPPORTED,   /* the device lacks a feature the op needs */
    SIFT_E_BACKEND,       /* the driver/runtime reported an error */
    SIFT_E_CANCELLED      /* the caller's should_stop callback asked to stop (sift_session_config) */
} sift_status;

SIFT_API const char *sift_status_name(sift_status s);
/* Message of the last failing call on this thread ("" if none). */
SIFT_API const char *sift_last_error(void);

typedef enum sift_backend_kind {
    SIFT_BACKEND_CPU = 0,
    SIFT_BACKEND_VULKAN,
    SIFT_BACKEND_CUDA,
    SIFT_BACKEND_COUNT
} sift_backend_kind;

SIFT_API const char *sift_backend_kind_name(sift_backend_kind kind);
/* Parses "cpu", "vulkan", "cuda"; returns SIFT_E_INVALID on anything else. */
SIFT_API sift_status sift_backend_kind_parse(const char *name, sift_backend_kind *out);


/* ---- logs ---------------------------------------------------------------------------------- */

/* What the library has to say beside the status of a call: INFO when a context opens and a model
 * loads (what, where, how large), WARN and ERROR for what a driver reports (Vulkan's validation
 * layer) and the library works around. A failing call's error is its status and sift_last_error(),
 * not a log message. */
typedef enum sift_log_level {
    SIFT_LOG_DEBUG = 0,
    SIFT_LOG_INFO,
    SIFT_LOG_WARN,
    SIFT_LOG_ERROR
} sift_log_level;

/* A context's log (sift_context_config.log): one message a call, without a trailing newline. The
 * calls for one context never overlap (the library serialises them) and may come from any thread
 * that uses the context; message is valid during the call only. The callback may run while the
 * context is busy on that thread: it must not call the library with the same context (a program
 * that wants to act on a message queues it). */
typedef void (*sift_log_fn)(void *user, sift_log_level level, const char *message);

/* "debug", "info", "warn", "error". */
SIFT_API const char *sift_log_level_name(sift_log_level level);

/* ---- devices and contexts ------------------------------------------------------------------- */

typedef enum sift_device_type {
    SIFT_DEVICE_OTHER = 0,
    SIFT_DEVICE_CPU,            /* the host's cores (the CPU backend) */
    SIFT_DEVICE_DISCRETE_GPU,
    SIFT_DEVICE_INTEGRATED_GPU,
    SIFT_DEVICE_VIRTUAL_GPU,
    SIFT_DEVICE_EMULATED        /* a CPU emulation of a GPU API (Vulkan on lavapipe, llvmpipe) */
} sift_device_type;

typedef struct sift_device_info {
    char name[256];         /* e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)" */
    sift_device_type type;
    int is_default;         /* 1 for the device a context of this backend opens with device -1 */
    uint64_t memory_bytes;  /* device-local memory (host memory for the CPU; 0 where unknown) */
} sift_device_info;

/* The Vulkan backend's device profiles: SIFT_VULKAN_PROFILE=<name> narrows what the device reports
 * to the limits and features of a device class (backends/vulkan/README.md has the table), so that
 * the kernels and plans that class gets run, and are tested, on any device. Profile `index`
 * (0, 1, ...; SIFT_E_INVALID past the last), whether or not this build has the Vulkan backend. */
typedef struct sift_device_profile {
    char name[32];         /* SIFT_VULKAN_PROFILE=name */
    char describes[160];   /* the devices it stands for */
    char limits[256];      /* what it narrows, e.g. "subgroup 32 or 64; 64 KiB shared memory" */
} sift_device_profile;
SIFT_API sift_status sift_vulkan_profile_get(int index, sift_device_profile *out);

/* What the Vulkan backend would use of its device `index` (as numbered by sift_device_count), under
 * the profile in the environment: whether it can open it and, where it does not by default, why
 * (sift_device_info.is_default: a discrete GPU over an integrated one over a CPU emulation, then
 * the most memory). Set out->struct_size = sizeof *out first: the library fills that many bytes
 * (fields are only added at the end). SIFT_E_UNAVAILABLE without the backend or a driver. */
typedef struct sift_vulkan_device_info {
    size_t struct_size;
    int unusable;                  /* 1: the backend cannot open it (why_not says what it lacks) */
    char why_not[256];             /* why a context does not open it by default ("" for the default) */
    uint32_t subgroup_size;        /* the subgroup (wave, warp) size sift's kernels run with */
    uint32_t subgroup_min, subgroup_max; /* the sizes the device can run compute at */
    uint32_t shared_memory_bytes;  /* per workgroup */
    uint32_t max_workgroup_size;   /* invocations per workgroup */
    uint64_t max_buffer_range;     /* bytes one storage buffer spans; larger tensors are split at it */
    uint32_t features;             /* SIFT_VULKAN_FEATURE_*: what it has of what sift uses */
    char profile[32];              /* the profile the figures are narrowed to (SIFT_VULKAN_PROFILE), or "" */
} sift_vulkan_device_info;
#define SIFT_VULKAN_FEATURE_F16_STORAGE 1u           /* f16 tensors kept as halves (else stored as f32) */
#define SIFT_VULKAN_FEATURE_TIMESTAMPS 2u            /* per-node timings (sift_graph_compute_timed) */
#define SIFT_VULKAN_FEATURE_SUBGROUP_SIZE_CONTROL 4u /* a subgroup size required per pipeline */
#define SIFT_VULKAN_FEATURE_FULL_SUBGROUPS 8u        /* workgroups made of whole subgroups */
SIFT_API sift_status sift_vulkan_device_get_info(int index, sift_vulkan_device_info *out);

/* The devices a backend can open, numbered 0 .. *n - 1 in the order of its API (Vulkan's
 * vkEnumeratePhysicalDevices, CUDA's device ordinals; the CPU backend has one). A backend not
 * built, or without a driver, gives SIFT_E_UNAVAILABLE with the reason (and *n = 0). */
SIFT_API sift_status sift_device_count(sift_backend_kind kind, int *n);
SIFT_API sift_status sift_device_get_info(sift_backend_kind kind, int index, sift_device_info *out);

typedef struct sift_context sift_context;

typedef struct sift_context_config {
    size_t struct_size;       /* sizeof(sift_context_config): set by sift_context_config_default */
    sift_backend_kind backend;
    /* Which device of the backend (sift_device_count); -1: the default, which the environment
     * may set (SIFT_VULKAN_DEVICE=<index>, SIFT_CUDA_DEVICE=<index>), else Vulkan's first
     * discrete GPU (or its first device) and CUDA's device 0. An index given here wins over the
     * environment. */
    int device;
    /* The CPU backend's threads (0: SIFT_THREADS=<n> from the environment, else one per online
     * core); ignored by the GPU backends. */
    int threads;
    /* Where the context's messages go, from its opening to its destruction (sift_log_fn), with
     * log_user as the callback's first argument. NULL: WARN and ERROR are written to stderr as
     * "sift: message", INFO and DEBUG are dropped. Messages that belong to no context (listing
     * devices) go there too. */
    sift_log_fn log;
    void *log_user;
} sift_context_config;

/* Defaults: the CPU backend, device -1, threads 0, no log callback. */
SIFT_API sift_context_config sift_context_config_default(void);
/* Opens a device of a backend. Returns SIFT_E_UNAVAILABLE (with the reason) where the backend was
 * not built or no usable device/driver exists, SIFT_E_INVALID for a device index out of range. */
SIFT_API sift_status sift_context_create_with(const sift_context_config *cfg, sift_context **out);
/* The same with the defaults for the backend `kind`. */
SIFT_API sift_status sift_context_create(sift_backend_kind kind, sift_context **out);
SIFT_API void sift_context_destroy(sift_context *ctx);
SIFT_API sift_backend_kind sift_context_backend(const sift_context *ctx);
/* Human-readable device description, e.g. "NVIDIA H200 (Vulkan 1.3, f16 storage)". */
SIFT_API const char *sift_context_device_name(const sift_context *ctx);
/* The index of the context's device (sift_device_get_info). */
SIFT_API int sift_context_device(const sift_context *ctx);
/* 1 when the context's device is a CPU emulation of a GPU API (Vulkan on lavapipe or llvmpipe,
 * VK_PHYSICAL_DEVICE_TYPE_CPU): it runs, but slower than the CPU backend. 0 otherwise. */
SIFT_API int sift_context_is_emulated(const sift_context *ctx);
/* The threads the CPU backend computes with (n >= 1, else SIFT_E_INVALID); results are the same
 * for every n. Where they cannot be had the context still computes: SIFT_E_NOMEM keeps the threads
 * it had, SIFT_E_UNAVAILABLE (a thread that cannot start) leaves it one thread. A no-op returning
 * SIFT_OK on the GPU backends. */
SIFT_API sift_status sift_context_set_threads(sift_context *ctx, int n);

/* Element types. BF16, Q8_0 and Q4_0 are weight types (ggml's block layouts: Q8_0 is 32 values as
 * an f16 scale and 32 int8; Q4_0 is 32 values as an f16 scale and 16 bytes of nibbles, value =
 * (nibble - 8) * scale, low nibbles first); their rows hold a multiple of 32 values. I8 (bytes)
 * holds quantized key rows (sift_op_kv_write): a row of D values is D int8 q[i] and then, in its
 * last 4 bytes, the f32 m = max |x[i]|; value i is q[i] * m / 127. Q4_K, Q5_K and Q6_K are ggml's
 * K-quant weight types: super-blocks of 256 values (144, 176 and 210 bytes) in sub-blocks with
 * 6-bit (Q4_K, Q5_K: scale and min) or 8-bit (Q6_K: scale) sub-scales; their rows hold a multiple
 * of 256 values. */
typedef enum sift_dtype {
    SIFT_F32 = 0, SIFT_F16, SIFT_I32, SIFT_BF16, SIFT_Q8_0, SIFT_Q4_0, SIFT_I8,
    SIFT_Q4_K, SIFT_Q5_K, SIFT_Q6_K,
    SIFT_DTYPE_COUNT
} sift_dtype;

SIFT_API const char *sift_dtype_name(sift_dtype t);
/* Bytes per element; 0 for the block-quantized types. */
SIFT_API size_t sift_dtype_size(sift_dtype t);
/* Elements per block: 32 for Q8_0 and Q4_0, 256 for Q4_K, Q5_K and Q6_K, else 1. */
SIFT_API int64_t sift_dtype_block(sift_dtype t);
/* Bytes of n consecutive values of a row (n a multiple of the block). */
SIFT_API size_t sift_dtype_row_bytes(sift_dtype t, int64_t n);

/* ---- models (GGUF: llama, qwen2, mistral) -------------------------------------------------- */

typedef struct sift_model sift_model;

/* Maps the GGUF file, checks it, and uploads its weights to the context's device in their own
 * types (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K). */
SIFT_API sift_status sift_model_load(sift_context *ctx, const char *path, sift_model **out);

/* How sift_model_load_with loads. progress (NULL: none) is called after each weight reaches the
 * device, with the bytes of the file's tensors uploaded so far and in all, and once more with
 * done = total at the end; a non-zero answer stops the load with SIFT_E_CANCELLED and frees what
 * it had uploaded (a progress bar's cancel button). Called on the loading thread. */
typedef struct sift_model_load_config {
    size_t struct_size; /* sizeof(sift_model_load_config): set by sift_model_load_config_default */
    int (*progress)(void *user, uint64_t done, uint64_t total);
    void *progress_user;
} sift_model_load_config;
SIFT_API sift_model_load_config sift_model_load_config_default(void);
/* sift_model_load with a config (NULL: the defaults, as sift_model_load). */
SIFT_API sift_status sift_model_load_with(sift_context *ctx, const char *path, const sift_model_load_config *cfg,
                                          sift_model **out);
/* The same from a GGUF held in memory (an application's bundle): read in place, not copied, so
 * data must stay valid and unchanged until the model is destroyed. */
SIFT_API sift_status sift_model_load_memory(sift_context *ctx, const void *data, size_t size,
                                            const sift_model_load_config *cfg, sift_model **out);
/* The same from size bytes of the regular file fd from offset on (size 0: to its end): a GGUF
 * inside a larger file. The file is mapped, not read into memory; fd may be closed after the
 * call. */
SIFT_API sift_status sift_model_load_fd(sift_context *ctx, int fd, uint64_t offset, uint64_t size,
                                        const sift_model_load_config *cfg, sift_model **out);
SIFT_API void sift_model_destroy(sift_model *m);

typedef struct sift_model_info {
    char arch[16];
    int n_layers, n_embd, n_ff, n_heads, n_kv_heads, head_dim, n_vocab;
    int64_t n_ctx_train;
    size_t weight_bytes;  /* on the device */
    int32_t bos, eos;     /* -1 when the vocabulary has none */
    int add_bos;          /* whether the model's prompts start with BOS (tokenizer.ggml.add_bos_token) */
} sift_model_info;

SIFT_API void sift_model_get_info(const sift_model *m, sift_model_info *out);
/* Encodes text (BOS first when add_bos) into ids[cap]; *n gets the count. SIFT_E_INVALID when
 * cap is too small: sift_tokenizer_max_tokens(len) always suffices. Control tokens spelled in the
 * text stay text (sift_model_tokenize_special parses them). */
SIFT_API sift_status sift_model_tokenize(const sift_model *m, const char *text, size_t len, int add_bos, int32_t *ids,
                                         size_t cap, size_t *n);
/* A cap for sift_model_tokenize (and sift_model_tokenize_special) that always suffices for len
 * bytes of text. */
SIFT_API size_t sift_tokenizer_max_tokens(size_t len);
/* The bytes one token adds to running text (control tokens: none). */
SIFT_API sift_status sift_model_token_piece(const sift_model *m, int32_t id, char *buf, size_t cap, size_t *len);
/* sift_model_tokenize, and with parse_special the control tokens spelled in the text
 * ("<|eot_id|>", "<|im_start|>", "<s>") become their ids; without it they stay text, so that user
 * text cannot inject them (user-defined tokens are ids either way). */
SIFT_API sift_status sift_model_tokenize_special(const sift_model *m, const char *text, size_t len, int add_bos,
                                                 int parse_special, int32_t *ids, size_t cap, size_t *n);
/* Whether generating token id ends a reply: EOS, or an end-of-turn token (<|eot_id|>, <|im_end|>...). */
SIFT_API int sift_model_token_is_eog(const sift_model *m, int32_t id);

/* ---- chat templates (engine/chat.c) -------------------------------------------------------- */

typedef struct sift_chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content;
} sift_chat_message;

/* The model file's tokenizer.chat_template (Jinja source, NUL-terminated, owned by the model), or
 * NULL when it has none. */
SIFT_API const char *sift_model_chat_template(const sift_model *m);
/* The format tmpl names or is written for: "chatml", "llama3", "llama2", "llama2-sys",
 * "llama2-sys-bos" or "llama2-sys-strip", recognised by name or by the markers in a template's
 * source (it is never run as Jinja); NULL when sift does not know it. */
SIFT_API const char *sift_chat_template_name(const char *tmpl);
/* Writes n messages as the prompt text tmpl's format gives them (special tokens spelled out, for
 * sift_model_tokenize_special with parse_special; BOS not written: tokenize with add_bos as the
 * model's info says), and the start of the assistant's reply when add_assistant. *len gets the
 * length; buf[cap] gets the text and a NUL (SIFT_E_INVALID when len + 1 > cap: call with cap 0 to
 * size it, or when tmpl is unknown). */
SIFT_API sift_status sift_chat_format(const char *tmpl, const sift_chat_message *msgs, size_t n, int add_assistant,
                                      char *buf, size_t cap, size_t *len);

/* ---- TokenButler's predictor (docs/algorithms.md) ------------------------------------------ */

typedef struct sift_predictor sift_predictor;

/* Loads a predictor from its GGUF file (general.architecture "sift-butler") onto the model's
 * device. The file is checked against m (layers, widths, heads, and the fingerprint of the model
 * it was trained for): a predictor for another model is an error naming the mismatch. It keeps
 * the model alive, and the sessions that use it keep it alive. */
SIFT_API sift_status sift_predictor_load(sift_model *m, const char *path, sift_predictor **out);
/* A predictor of random weights for m (d' = key_dim, a multiple of 8; producers every 4 layers,
 * 512 hidden): for benchmarks, where what it selects does not matter. */
SIFT_API sift_status sift_predictor_random(sift_model *m, int key_dim, uint64_t seed, sift_predictor **out);
SIFT_API void sift_predictor_destroy(sift_predictor *p);

typedef struct sift_predictor_info {
    int key_dim;         /* d' */
    int producer_stride; /* P: producers at layers 0, P, 2P, ... */
    int hidden;          /* fc1's width */
    int n_producers;
    int64_t n_params;    /* the predictor's and the key projections' */
    double overhead;     /* n_params over the model's parameters */
    size_t bytes;        /* on the device */
} sift_predictor_info;
SIFT_API void sift_predictor_get_info(const sift_predictor *p, sift_predictor_info *out);

/* Decode selection policies (docs/algorithms.md), each attending at most S + k + W tokens:
 *   DENSE        every token;
 *   TOKENSELECT  exact scores, head soft vote, top-k, shared by the layer (on the device);
 *   STREAMING    sink S and the last W + k tokens (on the device);
 *   H2O          per KV head, a heavy-hitter set of k tokens updated by accumulated attention;
 *                a token evicted never returns;
 *   SNAPKV       per KV head, k tokens chosen once at the end of prefill from the last 32 prompt
 *                queries' attention (max-pooled over 7 positions);
 *   QUEST        per KV head, pages of 16 tokens scored by sum_i max(q_i kmax_i, q_i kmin_i) with
 *                min/max metadata kept beside the cache; the best pages until k tokens;
 *   ORACLE       per KV head, the true top-k of the attention (max over the group's heads);
 *   BUTLER       TokenButler: per KV head, the top-k of a learned predictor's scores against
 *                low-dimensional keys (sift_session_config.predictor; on the device). Layer 0 is
 *                dense; the first decode step after a prefill selects too.
 * H2O, SNAPKV, QUEST and ORACLE are comparison baselines computed on the host from a mirror of
 * the cache (each decode step then runs one graph per layer); their attention runs on the device. */
typedef enum sift_policy {
    SIFT_POLICY_DENSE = 0,
    SIFT_POLICY_TOKENSELECT,
    SIFT_POLICY_STREAMING,
    SIFT_POLICY_H2O,
    SIFT_POLICY_SNAPKV,
    SIFT_POLICY_QUEST,
    SIFT_POLICY_ORACLE,
    SIFT_POLICY_BUTLER,
    SIFT_POLICY_COUNT
} sift_policy;

/* "dense", "tokenselect", "streaming", "h2o", "snapkv", "quest", "oracle", "butler". */
SIFT_API const char *sift_policy_name(sift_policy p);
SIFT_API sift_status sift_policy_parse(const char *name, sift_policy *out);

typedef struct sift_session sift_session;

/* Selection Cache threshold meaning "off" (sift_session_config.sel_cache). */
#define SIFT_SEL_CACHE_OFF 2.0f

typedef struct sift_session_config {
    size_t struct_size;     /* sizeof(sift_session_config): set by sift_session_config_default */
    int64_t n_ctx;          /* tokens per sequence (0: the model's training context) */
    sift_dtype kv_type;     /* SIFT_F16 or SIFT_F32 */
    sift_policy policy;     /* decode attention (docs/algorithms.md) */
    int64_t sink, window, budget; /* S, W, k of the selection policies */
    int64_t chunk;          /* prefill tokens per graph (0: 512); also the most sequences in one batch */
    /* Keep every layer's output of the last eval for sift_session_layer_output (sift_testing.h:
     * tests compare backends layer by layer); costs a [chunk][n_embd] f32 buffer per layer. */
    int keep_layer_outputs;
    /* Called after each prefill chunk with the tokens done and the total (may be NULL). */
    void (*progress)(void *user, int64_t done, int64_t total);
    void *progress_user;
    int n_seq;              /* sequences sharing the KV pool (0: 1) */
    int64_t page_size;      /* tokens per KV page, a power of two (0: 256) */
    int64_t pool_tokens;    /* KV pool capacity over all sequences (0: n_seq * n_ctx, rounded up to pages) */
    /* Selection Cache threshold theta (docs/algorithms.md) of the TOKENSELECT policy: a decode step reuses a
     * layer's index set while cos(q, q_ref) >= theta. SIFT_SEL_CACHE_OFF (or any value > 1) turns
     * it off; 1 runs the check but never reuses. */
    float sel_cache;
    /* Length extrapolation (docs/algorithms.md, TOKENSELECT or STREAMING): keys cached before RoPE, positions
     * assigned over the selected set. Prefill then runs token by token. */
    int extrapolate;
    /* Sparse prefill (docs/algorithms.md, TOKENSELECT): each chunk attends sink, window and the top-k chosen
     * by the chunk's mean query instead of every earlier token. */
    int sparse_prefill;
    /* Evaluation: keep a host mirror of the cache and the last 32 prompt queries of each layer, so
     * that any policy can run after sift_session_rewind, and measure each decode step's attention
     * quality (sift_session_attention_quality, sift_testing.h). Costs host memory and, while the measure
     * is on (sift_session_set_attention_quality), a graph per layer. */
    int eval_mode;
    /* TokenButler (docs/algorithms.md): the predictor (loaded for the same model; NULL: none). With
     * one, every layer's keys are also cached projected to d' dimensions, so the BUTLER policy can
     * run (from the start, or after sift_session_set_policy). predict_interval I (0: 1) recomputes
     * the index lists every I-th decode step and reuses them in between; neighbor_fetch also
     * attends the position after each selected one. predictor_keys is the projected keys' type:
     * SIFT_F16 (the default), SIFT_F32, or SIFT_I8 (int8 with a scale per token and KV head). */
    const sift_predictor *predictor;
    int predict_interval;
    int neighbor_fetch;
    sift_dtype predictor_keys;
    /* KV offload (docs/policies.md): the pool's tokens kept on the device; the rest of the pool
     * (pool_tokens in all) lives in host memory that the device reads in place
     * (sift_tensor_create_host). 0: off, every page on the device. Rounded up to whole pages. The
     * sink's pages and the newest pages stay on the device; when it is full, a sequence's oldest
     * device page past the sink moves to the host. Under the butler policy its projected keys and
     * its dense layer 0's K and V stay whole on the device. Tokens and logits are those of the
     * same session without offload. */
    int64_t kv_device_tokens;
    /* With kv_device_tokens: only V pages move to the host; K stays on the device whole (a pool of
     * pool_tokens), for policies that score every key (TOKENSELECT, dense). */
    int kv_offload_v_only;
    /* Cancellation (a UI's stop button): asked before every graph the session runs for a call,
     * that is before each prefill chunk (chunk tokens) and each decode step, on every backend. A
     * non-zero answer ends the call with SIFT_E_CANCELLED: the chunks and steps done before stay
     * in the cache and count in the position, nothing else changes, and the session goes on from
     * there (feed the rest of the prompt to finish it). sift_session_generate asks it too, through
     * the session's evals. NULL: never asked. Called on the thread that makes the call. */
    int (*should_stop)(void *user);
    void *should_stop_user;
} sift_session_config;

/* Defaults: n_ctx 0, f16 cache, DENSE, S 128, W 512, k 2048, chunk 512, one sequence, pages of
 * 256 tokens, Selection Cache theta 0.9, no extrapolation, dense prefill, no predictor (f16
 * projected keys when one is given). */
SIFT_API sift_session_config sift_session_config_default(void);
/* A session of m (cfg NULL: the defaults). */
SIFT_API sift_status sift_session_create(sift_model *m, const sift_session_config *cfg, sift_session **out);
SIFT_API void sift_session_destroy(sift_session *s);
/* Feeds n tokens to sequence 0 at its current position. n > 1 is prefill (chunked, causal
 * attention over the cache); n = 1 is a decode step with the configured policy. Writes the logits
 * of the last token to logits[n_vocab] when logits is not NULL (n = 0 feeds nothing and writes no
 * logits). SIFT_E_LIMIT when the sequence or the KV pool would overflow. */
SIFT_API sift_status sift_session_eval(sift_session *s, const int32_t *tokens, size_t n, float *logits);
/* The same for sequence seq (0 .. n_seq - 1). */
SIFT_API sift_status sift_session_eval_seq(sift_session *s, int seq, const int32_t *tokens, size_t n, float *logits);
/* One decode step of n sequences at once (distinct seqs[i], each with at least one token): token
 * tokens[i] for sequence seqs[i]; logits[n][n_vocab] when not NULL. Weights are read once for all. */
SIFT_API sift_status sift_session_decode_batch(sift_session *s, int n, const int *seqs, const int32_t *tokens,
                                               float *logits);
/* Position (tokens cached) of sequence 0, or of sequence seq. */
SIFT_API int64_t sift_session_pos(const sift_session *s);
SIFT_API int64_t sift_session_seq_pos(const sift_session *s, int seq);
/* Drops the tokens of sequence seq from position pos on (pos <= its position); their pages return
 * to the pool. Policy state is rebuilt from what remains. */
SIFT_API sift_status sift_session_rewind(sift_session *s, int seq, int64_t pos);
/* Changes the decode policy and S, W, k of the following steps (every sequence). Host policies
 * other than after a fresh session need eval_mode. */
SIFT_API sift_status sift_session_set_policy(sift_session *s, sift_policy policy, int64_t sink, int64_t window,
                                             int64_t budget);
/* Changes the prediction interval and neighbour fetch of the BUTLER policy for the following
 * steps (the kept lists start over). */
SIFT_API sift_status sift_session_set_butler(sift_session *s, int predict_interval, int neighbor_fetch);
/* The BUTLER policy's interval decided by the query (docs/policies.md), for the following steps
 * (the kept lists start over). With threshold in [-1, 1] the predictor runs every step, and each
 * layer scores and selects again only when its predicted query q' has moved: a step reuses the
 * layer's lists while cos(q', q'_ref) >= threshold, q'_ref being the q' they were chosen with
 * (TokenSelect's Selection Cache test, decided on the device), and selects anew at least every
 * predict_interval steps, which is then the longest a selection lasts. SIFT_SEL_CACHE_OFF (or any
 * value > 1; a new session's setting): the fixed interval. Not with neighbour fetch
 * (SIFT_E_UNSUPPORTED). sift_session_sel_cache_stats counts the layer-steps that reused. */
SIFT_API sift_status sift_session_set_butler_reuse(sift_session *s, float threshold);
/* Bytes of the projected keys (TokenButler) the session holds on the device (0 without a predictor). */
SIFT_API size_t sift_session_predictor_key_bytes(const sift_session *s);
/* Bytes of KV pool the session holds (on the device and in host memory together), and the bytes
 * of the pages in use. */
SIFT_API size_t sift_session_kv_bytes(const sift_session *s);
SIFT_API size_t sift_session_kv_used_bytes(const sift_session *s);
/* The KV pools' memory and pages (sift_session_config.kv_device_tokens). Without offload all of
 * it is on the device and the host figures are 0. */
typedef struct sift_kv_pool_info {
    size_t device_bytes;     /* K/V pool bytes in device memory (projected keys not included) */
    size_t host_bytes;       /* K/V pool bytes in host memory */
    int64_t device_pages;    /* pages whose offloaded rows (K and V, or V only) are on the device */
    int64_t host_pages;      /* pages whose offloaded rows are in host memory */
    int64_t device_used;     /* of them, pages held by sequences now */
    int64_t host_used;
    int64_t pages_moved;     /* pages moved from the device to the host since the session began */
    int64_t page_size;       /* tokens per page */
} sift_kv_pool_info;
SIFT_API sift_status sift_session_kv_pools(const sift_session *s, sift_kv_pool_info *out);
/* Selection Cache counters of a layer (layer -1: all layers), summed over sequences: decode steps
 * with a full selection, and those that reused the cached index set. Under BUTLER the same for
 * the prediction interval, fixed or decided by the query: steps with a full selection, and those
 * that reused the lists. */
SIFT_API sift_status sift_session_sel_cache_stats(const sift_session *s, int layer, int64_t *hits, int64_t *steps);
/* The top-k's warm start (sift_op_select_warm) of a layer (-1: all layers), summed over sequences
 * and lists: selections the warm start answered, and those that fell back to the full select. Both
 * stay 0 where the backend selects in full every step: the CPU, and CUDA and Vulkan unless
 * SIFT_CUDA_SELECT_WARM=1 or SIFT_VULKAN_TUNE=select_warm=1 turns their warm start on. */
SIFT_API sift_status sift_session_select_warm_stats(const sift_session *s, int layer, int64_t *hits, int64_t *misses);

/* One op's share of the profiled steps (sift_session_profile): the nodes of that op that ran, their
 * summed device time in microseconds, and the bytes they must move at least (sift_graph_node_bytes,
 * sift_testing.h;
 * bytes / us / 1e3 is an effective bandwidth in GB/s). op is a static string
 * (sift_graph_node_op_name's). */
typedef struct sift_op_time {
    const char *op;
    int64_t nodes;
    double us;
    double bytes;
} sift_op_time;
/* Per-op profile of a session's steps. on != 0 clears the profile and runs every following step's
 * graphs (prefill chunks and decode steps alike) with sift_graph_compute_timed, adding each node's
 * device time and bytes to its op's entry; on = 0 stops, keeping the profile for reading until
 * profiling is turned on again. Timed runs are not the runs of an untimed step: CUDA then launches
 * the kernels one by one between events instead of replaying one CUDA graph, and Vulkan writes a
 * timestamp between nodes; so the summed device time of a profiled step is not an untimed step's
 * wall time, which also holds the host's work and the launches. The CPU backend times each node
 * with the wall clock. A device that cannot time (a Vulkan queue without timestamps) fails the
 * profiled step with SIFT_E_UNSUPPORTED. */
SIFT_API sift_status sift_session_set_profiling(sift_session *s, int on);
/* The profile: up to max entries into out (out may be NULL when max is 0), sorted by time,
 * descending (equal times by op name); *n gets how many entries there are (ops that ran at least
 * once), which may exceed max; *steps (when not NULL) the steps profiled. */
SIFT_API sift_status sift_session_profile(const sift_session *s, sift_op_time *out, int max, int *n, int64_t *steps);

/* ---- memory: what a context holds, and what a model and a session will take ----------------- */

/* The bytes of a context's tensors (weights, KV pools, a session's buffers, graphs' intermediates)
 * as the library asked its backend for them. */
typedef struct sift_memory_use {
    uint64_t device_bytes;      /* in device memory now (the CPU backend: host memory) */
    uint64_t host_bytes;        /* in host memory the device reads (KV offload's host pages) */
    uint64_t device_peak_bytes; /* the most device_bytes has been since the context opened */
} sift_memory_use;
SIFT_API sift_status sift_context_memory_use(sift_context *ctx, sift_memory_use *out);

/* What loading a model (and a predictor) on a context and creating one session of it would take,
 * worked out before anything is allocated. */
typedef struct sift_memory_estimate {
    uint64_t weights;      /* the model's weights on the device (sift_model_info.weight_bytes) */
    uint64_t predictor;    /* TokenButler's predictor (sift_predictor_info.bytes); 0 without one */
    uint64_t kv;           /* the KV pools on the device, with a predictor's projected keys */
    uint64_t kv_host;      /* with kv_device_tokens: the pools' pages in host memory */
    uint64_t scratch;      /* the session's other buffers, and the most one step's graph takes
                            * for its intermediates (at the full context) */
    uint64_t device_total; /* weights + predictor + kv + scratch */
    uint64_t device_free;  /* the device's free memory now; 0 where the backend cannot tell (the CPU
                            * backend: the host's available memory, which kv_host shares) */
    int fits;              /* 1: the total fits the free memory; 0: it does not; -1: unknown */
    /* When it does not fit on a GPU: the largest kv_device_tokens (whole pages, the sink's and two
     * more at least) with which it would; 0 where KV offload cannot make it fit (or it fits). */
    int64_t kv_device_tokens;
} sift_memory_estimate;

/* The estimate for the model file model_path on ctx's device, with the predictor file
 * predictor_path (NULL: cfg's predictor, or none) and one session of config cfg (NULL: the
 * defaults; n_ctx 0 is the model's training context). The files are read, not loaded; the same
 * config errors as sift_session_create. The figures are what the library asks its backend for: the
 * estimate test holds them to a real load and session on the CPU and Vulkan backends (the peak
 * within 10% under the estimate, never over it). Host memory the library keeps for itself (the
 * tokenizer, eval_mode's and the host policies' mirrors of the cache) is not counted. */
SIFT_API sift_status sift_model_estimate(sift_context *ctx, const char *model_path, const char *predictor_path,
                                         const sift_session_config *cfg, sift_memory_estimate *out);

/* ---- sampling (on the host) ----------------------------------------------------------------- */

typedef struct sift_sampler_config {
    size_t struct_size; /* sizeof(sift_sampler_config): set by sift_sampler_config_default */
    float temperature;  /* <= 0: greedy (argmax, ties to the lower id) */
    int top_k;          /* <= 0: off */
    float top_p;        /* >= 1: off */
    uint64_t seed;
} sift_sampler_config;

/* Defaults: greedy (temperature 0), top-k and top-p off, seed 0. */
SIFT_API sift_sampler_config sift_sampler_config_default(void);

typedef struct sift_sampler sift_sampler;
/* A sampler (cfg NULL: the defaults). */
SIFT_API sift_status sift_sampler_create(const sift_sampler_config *cfg, sift_sampler **out);
SIFT_API void sift_sampler_destroy(sift_sampler *s);
/* Picks a token from logits[n] (may reorder nothing: logits are read only). */
SIFT_API int32_t sift_sampler_sample(sift_sampler *s, const float *logits, int32_t n);

/* ---- generating text ------------------------------------------------------------------------ */

/* Why sift_session_generate stopped. */
typedef enum sift_stop_reason {
    SIFT_STOP_EOS = 0,     /* the model produced its end-of-sequence token */
    SIFT_STOP_MAX_TOKENS,  /* max_tokens tokens were generated */
    SIFT_STOP_STRING,      /* the text generated holds one of the stop strings */
    SIFT_STOP_CALLBACK,    /* on_token returned non-zero */
    SIFT_STOP_CONTEXT      /* the sequence's context is full */
} sift_stop_reason;

/* Called once per generated token, in order, with the bytes it adds to the text (piece, len: not
 * NUL-terminated; control tokens add none). Returning non-zero stops generation after it. */
typedef int (*sift_token_fn)(void *user, int32_t token, const char *piece, size_t len);

typedef struct sift_generate_config {
    size_t struct_size;     /* sizeof(sift_generate_config): set by sift_generate_config_default */
    int64_t max_tokens;     /* the most tokens to generate (> 0) */
    int add_bos;            /* put BOS before the prompt (where the vocabulary has one) */
    int stop_at_eos;        /* stop at the model's EOS token (it is not passed to on_token) */
    /* Stop once the generated text holds one of these n_stop strings (non-empty, up to 4096
     * bytes; NULL: none). The token that completes a stop string is passed to on_token, its whole
     * piece included (so the text passed ends with the stop string or runs a little past it);
     * the prompt's text is not searched. */
    const char *const *stop;
    int n_stop;
    sift_sampler_config sampler; /* how each token is picked (its struct_size set too) */
    sift_token_fn on_token;      /* may be NULL */
    void *user;
} sift_generate_config;

/* Defaults: 256 tokens, BOS on, stop at EOS, no stop strings, greedy sampling, no callback. */
SIFT_API sift_generate_config sift_generate_config_default(void);
/* Feeds the prompt (len bytes of text, tokenized with the model's tokenizer) to sequence 0 at its
 * current position, then generates: sample a token from the last logits, pass it to on_token,
 * check the stop conditions, feed it back; until one of them holds. The same tokens as that loop
 * written with sift_model_tokenize, sift_session_eval, sift_sampler_sample and
 * sift_model_token_piece. A prompt of no tokens (empty text without BOS) is SIFT_E_INVALID.
 * *n_tokens (when not NULL) gets the tokens generated and *reason (when not NULL) why it stopped.
 * The session then holds the prompt and every token passed to on_token (the last fed with one
 * more step; except at SIFT_STOP_CONTEXT, where the last one no longer fits), so a later call
 * continues the text. SIFT_E_LIMIT when the prompt does not fit the
 * context; a context that fills up while generating stops with SIFT_STOP_CONTEXT instead. An
 * error leaves the session holding what it had fed until then. */
SIFT_API sift_status sift_session_generate(sift_session *s, const char *prompt, size_t len,
                                           const sift_generate_config *cfg, int64_t *n_tokens,
                                           sift_stop_reason *reason);
/* stop_at_eos = SIFT_STOP_AT_EOG: stop at any of the model's end-of-generation tokens
 * (sift_model_token_is_eog: EOS, a chat model's end of turn) with SIFT_STOP_EOS, not at EOS alone. */
#define SIFT_STOP_AT_EOG 2
/* sift_session_generate with the prompt as tokens: tokens[n] are fed as they are (special tokens,
 * a chat template's turn, the kept tail of a context shift; cfg->add_bos is not read), and where
 * sampler is not NULL it picks the tokens instead of one made from cfg->sampler, its random state
 * going on from call to call (a chat's turns, or a generation continued after a context shift,
 * then give the tokens of one sampling loop). */
SIFT_API sift_status sift_session_generate_tokens(sift_session *s, const int32_t *tokens, size_t n,
                                                  const sift_generate_config *cfg, sift_sampler *sampler,
                                                  int64_t *n_tokens, sift_stop_reason *reason);

/* ==== the graph API: tensors, graphs and ops ================================================== */

#define SIFT_MAX_DIMS 4
/* The largest head size D of the attention ops (and n_rot of RoPE). */
#define SIFT_MAX_HEAD_DIM 128

typedef struct sift_tensor sift_tensor;

/* A dense, row-major tensor on the context's device (shape[0] outermost). Dimensions may be 0. */
SIFT_API sift_status sift_tensor_create(sift_context *ctx, sift_dtype dtype, int ndim,
                                        const int64_t *shape, sift_tensor **out);
/* The same in host memory that the device reads and writes in place (zero-copy): ordinary memory on
 * the CPU backend, a host-visible memory heap on Vulkan, mapped pinned memory on CUDA. Kernels read
 * it across the host link, so it suits data read sparsely: the offloaded pages of a KV cache
 * (sift_tensor_paged_view_pools). SIFT_E_DEVICE_NOMEM (or SIFT_E_NOMEM) when the host memory
 * cannot be had. */
SIFT_API sift_status sift_tensor_create_host(sift_context *ctx, sift_dtype dtype, int ndim,
                                             const int64_t *shape, sift_tensor **out);
/* 1 for a tensor in host memory (sift_tensor_create_host, or a view of one), else 0. */
SIFT_API int sift_tensor_in_host_memory(const sift_tensor *t);
/* A contiguous view of part of parent's storage, byte_offset bytes in (a multiple of the element
 * size), with its own dtype and shape. It keeps the parent's storage alive, so the parent may be
 * destroyed first. */
SIFT_API sift_status sift_tensor_view(sift_tensor *parent, sift_dtype dtype, int ndim, const int64_t *shape,
                                      size_t byte_offset, sift_tensor **out);
/* A paged view of a KV pool (docs/algorithms.md: pages of P tokens and a page table per sequence).
 * pool [Hkv][R][D] f16/f32 holds R physical rows per KV head; pages i32 [n_pages] maps logical page
 * p to physical page pages[p]; P = page_size, a power of two dividing R. The view has the shape
 * [Hkv][n_pages * P][D]: logical row j lives in physical row pages[j / P] * P + j % P. Every op that
 * takes k or v (and kv_write's cache) accepts a paged view; the page table is read at run time, so
 * the host may rewrite it between computes. A page number outside [0, R / P) marks rows that are
 * never read or written (their result is unspecified). The view keeps pool and pages alive. */
SIFT_API sift_status sift_tensor_paged_view(sift_tensor *pool, const sift_tensor *pages, int64_t page_size,
                                            sift_tensor **out);
/* A paged view of two pools: pool [Hkv][R][D] (on the device) and host_pool [Hkv][Rh][D] of the same
 * type, KV heads and D (usually in host memory: sift_tensor_create_host), Rh a multiple of P.
 * Physical pages [0, R / P) are pool's, pages [R / P, (R + Rh) / P) are host_pool's (page
 * R / P + i is its page i); otherwise as sift_tensor_paged_view. A page table entry thus says
 * which pool its page lives in, and the ops read (and kv_write writes) either pool in place. The
 * view keeps both pools and pages alive. */
SIFT_API sift_status sift_tensor_paged_view_pools(sift_tensor *pool, sift_tensor *host_pool, const sift_tensor *pages,
                                                  int64_t page_size, sift_tensor **out);
SIFT_API void sift_tensor_destroy(sift_tensor *t);
SIFT_API sift_status sift_tensor_set_name(sift_tensor *t, const char *name);
SIFT_API const char *sift_tensor_name(const sift_tensor *t);
SIFT_API sift_dtype sift_tensor_dtype(const sift_tensor *t);
SIFT_API int sift_tensor_ndim(const sift_tensor *t);
SIFT_API int64_t sift_tensor_dim(const sift_tensor *t, int axis);
SIFT_API size_t sift_tensor_nbytes(const sift_tensor *t);
/* Copies bytes in the tensor's own element type (f16 as IEEE half bits) at a byte offset. */
SIFT_API sift_status sift_tensor_write(sift_tensor *t, size_t offset, const void *src, size_t bytes);
SIFT_API sift_status sift_tensor_read(const sift_tensor *t, size_t offset, void *dst, size_t bytes);

/* IEEE half conversions (round to nearest even), for callers that prepare f16 data. */
SIFT_API void sift_f32_to_f16(uint16_t *dst, const float *src, size_t n);
SIFT_API void sift_f16_to_f32(float *dst, const uint16_t *src, size_t n);

/* ---- graphs ------------------------------------------------------------------------------ */

/* A graph does not keep the caller's tensors its nodes read and write: they must outlive every
 * compute of the graph (its own intermediates live as long as it does). */
typedef struct sift_graph sift_graph;

SIFT_API sift_status sift_graph_create(sift_context *ctx, sift_graph **out);
/* Frees the graph and every tensor it created with sift_graph_new_tensor. */
SIFT_API void sift_graph_destroy(sift_graph *g);
/* A tensor owned by the graph: an intermediate that a node must produce before another reads it. */
SIFT_API sift_status sift_graph_new_tensor(sift_graph *g, sift_dtype dtype, int ndim,
                                           const int64_t *shape, const char *name, sift_tensor **out);

typedef enum sift_vote_mode {
    SIFT_VOTE_SOFTMAX_SUM = 0, /* TokenSelect: v[j] = sum_h softmax_j(s[h][j]); one list */
    SIFT_VOTE_KVHEAD_MAX       /* u[g][j] = max over the group's heads of s[h][j]; one list per KV head */
} sift_vote_mode;

/* Ops append a node to the graph; each checks shapes and types now and names what is wrong.
 * Shapes: q f32 [Hq][D]; k, v [Hkv][Ncap][D] in f16 or f32 (the same for both); D a multiple of 8
 * up to SIFT_MAX_HEAD_DIM (64 and 128 are the tuned sizes);
 * Hq a multiple of Hkv; g(h) = h / (Hq / Hkv). */

/* scores f32 [Hq][end - begin]: s[h][j] = scale * dot(q[h], k[g(h)][begin + j]). */
SIFT_API sift_status sift_op_score(sift_graph *g, const sift_tensor *q, const sift_tensor *k,
                                   int64_t begin, int64_t end, float scale, sift_tensor *scores);
/* score and the KVHEAD_MAX vote in one pass (TokenButler's scoring, docs/algorithms.md): votes f32
 * [Hkv][end - begin], u[g][j] = max over the heads h of group g of scale * dot(q[h], k[g][begin + j]).
 * k may also be an i8 cache of quantized rows [Hkv][Ncap][D + 4] (sift_op_kv_write): the dot
 * product is then (m / 127) * sum_i q[h][i] * q_k[i].
 * Equal to sift_op_score then sift_op_vote(KVHEAD_MAX), without the [Hq][M] scores in memory. */
SIFT_API sift_status sift_op_score_max(sift_graph *g, const sift_tensor *q, const sift_tensor *k,
                                       int64_t begin, int64_t end, float scale, sift_tensor *votes);
/* votes f32 [1][M] (SOFTMAX_SUM) or [Hkv][M] (KVHEAD_MAX) from scores f32 [Hq][M]. */
SIFT_API sift_status sift_op_vote(sift_graph *g, sift_vote_mode mode, const sift_tensor *scores,
                                  sift_tensor *votes);

/* Selection window, docs/algorithms.md: sink S, local window W, budget k over candidates C = [S, N - W). */
typedef struct sift_select_params {
    int64_t n_ctx;  /* N */
    int64_t sink;   /* S */
    int64_t window; /* W */
    int64_t budget; /* k */
} sift_select_params;

/* Candidates: |C| = max(0, N - S - W); and the length of each selected list. */
SIFT_API int64_t sift_select_candidates(const sift_select_params *p);
SIFT_API int64_t sift_select_count(const sift_select_params *p);

/* indices i32 [L][sift_select_count] from votes f32 [L][|C|] (vote j is position S + j): the k
 * largest (ties to the lower position), joined with [0, S) and [N - W, N), ascending. */
SIFT_API sift_status sift_op_select(sift_graph *g, const sift_tensor *votes,
                                    const sift_select_params *p, sift_tensor *indices);
/* The same, started warm: warm i32 [L][SIFT_SELECT_WARM_WORDS] (write zeros to start) is kept by the
 * caller across the decode steps of one list set (a layer of one sequence). Consecutive steps select
 * mostly the same tokens, so a GPU backend first collects, in one pass, the candidates at or above
 * the threshold an earlier run left in warm, selects exactly among them, and runs the full select
 * only when that misses (fewer than k collected, or more than it can hold). The indices are those of
 * sift_op_select whatever warm holds; the CPU reference leaves warm as it is. */
enum {
    SIFT_SELECT_WARM_THRESHOLD = 0, /* the order key to collect from (backend-defined) */
    SIFT_SELECT_WARM_VALID,         /* non-zero once a run has left a threshold */
    SIFT_SELECT_WARM_HITS,          /* runs the warm start answered */
    SIFT_SELECT_WARM_MISSES,        /* runs that fell back to the full select (the first included) */
    SIFT_SELECT_WARM_WORDS
};
SIFT_API sift_status sift_op_select_warm(sift_graph *g, const sift_tensor *votes, sift_tensor *warm,
                                         const sift_select_params *p, sift_tensor *indices);
/* out f32 [Hq][D]: exact attention of each head over its KV head's index list. indices i32 [L][n]
 * with L = 1 (shared by all heads) or L = Hkv. An index outside [0, Ncap), -1 for instance, is
 * skipped: it is never read and adds nothing (neighbor_fetch marks the neighbours it leaves out
 * so). n = 0, or only skipped entries, gives zeros. */
SIFT_API sift_status sift_op_gather_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k,
                                           const sift_tensor *v, const sift_tensor *indices,
                                           float scale, sift_tensor *out);
/* out f32 [Hq][D]: exact attention over positions [0, n_ctx). */
SIFT_API sift_status sift_op_dense_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k,
                                          const sift_tensor *v, int64_t n_ctx, float scale,
                                          sift_tensor *out);

/* ---- transformer ops (f32 activations; T rows = tokens) ------------------------------------- */

/* out f32 [T][E] = rows ids[t] of table [V][E] (any float or quantized type); ids i32 [T], each
 * in [0, V) (a row outside gives zeros). */
SIFT_API sift_status sift_op_get_rows(sift_graph *g, const sift_tensor *table, const sift_tensor *ids,
                                      sift_tensor *out);
/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight; x, out f32 [T][E], weight f32 [E]. */
SIFT_API sift_status sift_op_rmsnorm(sift_graph *g, const sift_tensor *x, const sift_tensor *weight, float eps,
                                     sift_tensor *out);
/* out f32 [T][N] = x f32 [T][K] times w [N][K] transposed (w in any float or quantized type),
 * plus bias f32 [N] when bias is not NULL. */
SIFT_API sift_status sift_op_matmul(sift_graph *g, const sift_tensor *x, const sift_tensor *w,
                                    const sift_tensor *bias, sift_tensor *out);

typedef enum sift_rope_mode {
    SIFT_ROPE_ADJACENT = 0, /* pairs (2i, 2i+1): llama, mistral (GGUF's permuted Q/K) */
    SIFT_ROPE_NEOX          /* pairs (i, i + n_rot/2): qwen2 */
} sift_rope_mode;

typedef struct sift_rope_params {
    int n_rot;     /* rotated dimensions (even, <= D); the rest pass through */
    float base;    /* theta = pos * base^(-2i / n_rot) / factor[i] */
    sift_rope_mode mode;
} sift_rope_params;

/* Rotary embedding of x f32 [T][H][D]; row t is at position pos0 + t. factors f32 [n_rot/2]
 * (Llama-3 frequency scaling) or NULL for none. out has x's shape. */
SIFT_API sift_status sift_op_rope(sift_graph *g, const sift_tensor *x, int64_t pos0, const sift_tensor *factors,
                                  const sift_rope_params *p, sift_tensor *out);
/* out[t] = (x[t] - mean(x[t])) / sqrt(var(x[t]) + eps) * weight + bias (the biased variance, as
 * PyTorch's LayerNorm); x, out f32 [T][E], weight f32 [E], bias f32 [E] or NULL for none. */
SIFT_API sift_status sift_op_layernorm(sift_graph *g, const sift_tensor *x, const sift_tensor *weight,
                                       const sift_tensor *bias, float eps, sift_tensor *out);
/* out = silu(x) = x / (1 + exp(-x)), elementwise; f32, equal shapes. */
SIFT_API sift_status sift_op_silu(sift_graph *g, const sift_tensor *x, sift_tensor *out);
/* out = silu(gate) * up, elementwise; f32, equal shapes. */
SIFT_API sift_status sift_op_swiglu(sift_graph *g, const sift_tensor *gate, const sift_tensor *up, sift_tensor *out);
/* out = a + b, elementwise; f32, equal shapes. */
SIFT_API sift_status sift_op_add(sift_graph *g, const sift_tensor *a, const sift_tensor *b, sift_tensor *out);
/* cache[h][pos0 + t] = src[t][h]: src f32 [T][Hkv][D], cache [Hkv][Ncap][D] f16 or f32 (converted),
 * or i8 [Hkv][Ncap][D + 4], each row quantized on its own: m = max |x[i]| (kept as the row's last
 * 4 bytes, f32), q[i] = x[i] * 127 / m rounded half away from zero (0 where m = 0). The cache is
 * the node's output: later nodes read it. */
SIFT_API sift_status sift_op_kv_write(sift_graph *g, const sift_tensor *src, int64_t pos0, sift_tensor *cache);
/* Causal attention for T queries at positions pos0 .. pos0 + T - 1: q f32 [T][Hq][D], query t over
 * cache positions [0, pos0 + t]; out f32 [T][Hq][D]. */
SIFT_API sift_status sift_op_causal_attend(sift_graph *g, const sift_tensor *q, const sift_tensor *k,
                                           const sift_tensor *v, int64_t pos0, float scale, sift_tensor *out);

/* ---- saving work between steps (docs/algorithms.md) ------------------------------------------- */

/* Nodes appended after this call, until it is called again with flag NULL, do nothing at run time
 * when element `element` of the f32 tensor flag is non-zero (their outputs keep what they held).
 * Only score, score_max, vote, select and kv_gather take a predicate. The Selection Cache skips its stages this way. */
SIFT_API sift_status sift_graph_skip_if(sift_graph *g, const sift_tensor *flag, int64_t element);

/* Elements of a Selection Cache state after the reference query q_ref [Hq * D]. */
enum {
    SIFT_SEL_CACHE_REUSE = 0, /* 1 when this step reuses the cached index set, else 0 */
    SIFT_SEL_CACHE_HITS,      /* steps that reused */
    SIFT_SEL_CACHE_STEPS,     /* steps counted (full selections only) */
    SIFT_SEL_CACHE_VALID,     /* 1 when q_ref belongs to a full selection that may be reused */
    SIFT_SEL_CACHE_EXTRA
};
/* The Selection Cache decision of one layer (docs/algorithms.md). state f32 [Hq * D + SIFT_SEL_CACHE_EXTRA]
 * (write zeros to start) holds q_ref and the counters above; q f32 [Hq][D] is this step's query.
 * full != 0 when this step's selection is a real top-k (N > S + W + k). Then the step reuses iff
 * VALID and theta < 1 and cos(q, q_ref) >= theta (cos = 0 when a norm is 0); HITS counts reuses
 * and STEPS counts full steps. Without reuse, q_ref = q and VALID = full. theta >= 1 never reuses;
 * theta = -1 always reuses after the first full step. */
SIFT_API sift_status sift_op_sel_cache_check(sift_graph *g, const sift_tensor *q, float theta, int full,
                                             sift_tensor *state);
/* Neighbour fetch (docs/algorithms.md, TokenButler): out i32 [L][count + chosen] from select's
 * indices i32 [L][count] for the same p (count = sift_select_count(p), chosen = min(k, |C|)):
 * each list's sink and chosen entries, then one entry per chosen position j: j + 1 when that is a
 * candidate that is not chosen, else -1 (skipped by gather_attend), then the window. */
SIFT_API sift_status sift_op_neighbor_fetch(sift_graph *g, const sift_tensor *indices, const sift_select_params *p,
                                            sift_tensor *out);
/* indices i32 [L][n]: indices[l][col0 + i] = start + i for i in [0, n - col0) (the local window
 * of a reused index set; positions may not exceed INT32_MAX). */
SIFT_API sift_status sift_op_fill_range(sift_graph *g, int64_t col0, int64_t start, sift_tensor *indices);
/* A selection's rows copied out of the cache, so that later steps read a dense copy instead of
 * the cache (whose pages may lie in host memory): out [Hkv][n][D] of kv's type, out[g][i] =
 * kv[g][indices[l][i]] bit for bit, with kv [Hkv][Ncap][D] f16 or f32 (a paged view of one pool or
 * two included) and indices i32 [L][n], L = 1 (shared by the KV heads, l = 0) or Hkv (l = g). An
 * entry gather_attend skips (outside [0, Ncap), -1 for instance, or on a page the table maps
 * outside the pools) gives a row of zeros, which is a key of score 0, not an absent row. An i8
 * cache (quantized keys, which only score_max reads) is SIFT_E_UNSUPPORTED. */
SIFT_API sift_status sift_op_kv_gather(sift_graph *g, const sift_tensor *kv, const sift_tensor *indices,
                                       sift_tensor *out);
/* sift_op_kv_gather into columns [col0, col0 + n) of a longer out [Hkv][count][D] (col0 >= 0,
 * col0 + n <= count): out[g][col0 + i] = kv[g][indices[l][i]]; the other columns keep what they
 * held. TokenButler's staged rows under the interval decided by the query gather the window's rows
 * after the kept chosen ones this way. kv_gather takes a predicate (sift_graph_skip_if). */
SIFT_API sift_status sift_op_kv_gather_at(sift_graph *g, const sift_tensor *kv, const sift_tensor *indices, int64_t col0,
                                          sift_tensor *out);
/* gather_attend for length extrapolation (docs/algorithms.md): k holds keys before RoPE; the key at list
 * rank i (0-based) is rotated to position i before its dot product (p as for sift_op_rope, no
 * frequency factors). The caller rotates q to position n (the list length). */
SIFT_API sift_status sift_op_gather_attend_rope(sift_graph *g, const sift_tensor *q, const sift_tensor *k,
                                                const sift_tensor *v, const sift_tensor *indices, float scale,
                                                const sift_rope_params *p, sift_tensor *out);
/* out f32 [1][E] = the mean of the T rows of x f32 [T][E] (sparse prefill's chunk query). */
SIFT_API sift_status sift_op_mean_rows(sift_graph *g, const sift_tensor *x, sift_tensor *out);
/* Sparse prefill attention (docs/algorithms.md): T queries q f32 [T][Hq][D] at positions pos0 .. pos0+T-1;
 * query t attends the positions of its KV head's list in indices i32 [L][n] (L = 1 or Hkv, every
 * entry < pos0) and then [pos0, pos0 + t]. out f32 [T][Hq][D]. */
SIFT_API sift_status sift_op_causal_attend_sparse(sift_graph *g, const sift_tensor *q, const sift_tensor *k,
                                                  const sift_tensor *v, const sift_tensor *indices, int64_t pos0,
                                                  float scale, sift_tensor *out);

/* Runs every node in order (on GPU backends: recorded once into one submission). */
SIFT_API sift_status sift_graph_compute(sift_graph *g);
/* As sift_graph_compute, and writes each node's device time in microseconds (GPU timestamps on
 * Vulkan, events on CUDA, wall clock on CPU) into node_us[sift_graph_node_count(g)]. */
SIFT_API sift_status sift_graph_compute_timed(sift_graph *g, double *node_us);
/* As sift_graph_compute, and writes the device time of the whole run in microseconds into *us,
 * timed at its two ends only (GPU timestamps on Vulkan, events on CUDA, wall clock on CPU): the
 * nodes overlap and skip as they do in an untimed run, where sift_graph_compute_timed's timestamps
 * between nodes keep each node apart. So a run's span is at most, and often less than, the sum
 * of its nodes' times. */
SIFT_API sift_status sift_graph_compute_span(sift_graph *g, double *us);
SIFT_API int sift_graph_node_count(const sift_graph *g);
/* The op of a node, as the sift_op_ function that made it is named without its prefix
 * ("score", "gather_attend", "kv_write", ...; gather_attend_rope's node is "gather_attend"). */
SIFT_API const char *sift_graph_node_op_name(const sift_graph *g, int node);
/* SIFT_OK if the context's backend runs every node of g; SIFT_E_UNSUPPORTED naming the first node
 * it does not run, its op and the backend otherwise. sift_graph_compute checks the same first. */
SIFT_API sift_status sift_graph_check_supported(const sift_graph *g);

/* ---- the attention of one layer: the one builder ------------------------------------------- */

/* How a layer's queries choose what they attend. */
typedef enum sift_attn_mode {
    SIFT_ATTN_DENSE = 0, /* every position */
    SIFT_ATTN_SELECT,    /* a scorer chooses the top k (TokenSelect), with the sink and the window */
    SIFT_ATTN_STREAMING, /* the sink and the last W + k positions */
    SIFT_ATTN_LISTS      /* index lists the caller wrote (the host policies) */
} sift_attn_mode;

/* What scores the candidates under SIFT_ATTN_SELECT. */
typedef enum sift_attn_scorer {
    SIFT_SCORER_EXACT = 0, /* TokenSelect: the real query against the cached keys, then the vote */
    SIFT_SCORER_BUTLER     /* TokenButler: a predictor's low-dimensional queries against the
                            * low-dimensional keys (score_q, score_k), the max over each group */
} sift_attn_scorer;

typedef struct sift_attn_config {
    size_t struct_size; /* sizeof(sift_attn_config): set by sift_attn_config_default */
    int n_q_heads;  /* Hq */
    int n_kv_heads; /* Hkv */
    int head_dim;   /* D */
    /* N, S, W, k. A decode step (q [Hq][D]) attends positions [0, N), the new token's included; a
     * prefill chunk (q [T][Hq][D]) sits at positions N .. N + T - 1 and attends causally. */
    sift_select_params sel;
    sift_vote_mode vote; /* SELECT: SOFTMAX_SUM (one list) or KVHEAD_MAX (one per KV head) */
    sift_attn_mode mode;
    sift_attn_scorer scorer;
    /* SELECT, decode: the Selection Cache (docs/algorithms.md) when sel_state is not NULL and
     * sel_cache, the threshold theta, is in [-1, 1] (SIFT_SEL_CACHE_OFF leaves it out). The caller
     * keeps sel_state f32 [Hq * D + SIFT_SEL_CACHE_EXTRA] (zeros to start) and sel_indices i32
     * [lists][count] (lists: 1, or Hkv with KVHEAD_MAX) across steps. The cache acts only while the
     * candidates outnumber k. */
    float sel_cache;
    sift_tensor *sel_state, *sel_indices;
    /* SELECT with the BUTLER scorer (docs/algorithms.md): score_q f32 [Hq][d'] are the predictor's
     * queries for this layer and score_k [Hkv][Ncap][d'] (f16 or f32, may be paged) the projected
     * keys; scores are scaled by 1/sqrt(d') and voted KVHEAD_MAX whatever `vote` says. With
     * neighbor_fetch each list also holds the position after each chosen one (sift_op_neighbor_fetch).
     * When sel_indices is given (i32 [Hkv][count], count with the neighbours) the lists are kept
     * there; with reuse set as well, and the candidates outnumbering k, the step reuses them (the
     * prediction interval): nothing is scored, only the window moves. With sel_state (f32
     * [Hq * d' + SIFT_SEL_CACHE_EXTRA], zeros to start) and sel_cache in [-1, 1] instead, the
     * Selection Cache's check on score_q decides on the device whether the kept lists are reused
     * (the interval decided by the query; not with reuse or neighbor_fetch). */
    const sift_tensor *score_q, *score_k;
    int neighbor_fetch, reuse;
    /* LISTS: i32 [1 or Hkv][count], count = sift_select_count(&sel). */
    const sift_tensor *lists;
    /* Decode under SELECT or STREAMING: length extrapolation (docs/algorithms.md) when not NULL. q is then the
     * query before RoPE and K holds keys before RoPE: the scoring query is rotated to position W,
     * the attention query to the last rank of the list, and the key at list rank i to position i. */
    const sift_rope_params *extrapolate;
    /* SELECT, decode: the warm start of each step's top-k (sift_op_select_warm) when not NULL: i32
     * [lists][SIFT_SELECT_WARM_WORDS], zeros to start, kept by the caller across steps. */
    sift_tensor *sel_warm;
} sift_attn_config;

/* Defaults: every count 0, SOFTMAX_SUM, DENSE, the EXACT scorer, the Selection Cache off
 * (SIFT_SEL_CACHE_OFF), no tensors, no extrapolation. */
SIFT_API sift_attn_config sift_attn_config_default(void);

/* Appends one layer's attention over caller-owned q, k, v and out to g (scale = 1/sqrt(D)),
 * intermediates owned by the graph:
 *   decode, q and out [Hq][D]: DENSE is dense_attend over [0, N); SELECT is score -> vote -> select
 *   -> gather_attend (with the Selection Cache: sel_cache_check first, the three stages predicated
 *   on it, and the window moved by fill_range); STREAMING fills the sink and window lists; LISTS
 *   gathers over the caller's lists. When the candidates are empty, score and vote are left out.
 *   prefill, q and out [T][Hq][D]: DENSE is causal_attend; SELECT (docs/algorithms.md) chooses one set among
 *   [0, N) from the chunk's mean query (mean_rows -> score -> vote -> select) and attends it and the
 *   chunk causally (causal_attend_sparse); it is dense while the candidates do not outnumber k.
 * If indices_out is not NULL it receives the index tensor the attention read (NULL when dense). */
SIFT_API sift_status sift_attn_append(sift_graph *g, const sift_attn_config *cfg, const sift_tensor *q,
                                      const sift_tensor *k, const sift_tensor *v, sift_tensor *out,
                                      sift_tensor **indices_out);

/* A new graph holding sift_attn_append's nodes. */
SIFT_API sift_status sift_attn_graph(sift_context *ctx, const sift_attn_config *cfg, const sift_tensor *q,
                                     const sift_tensor *k, const sift_tensor *v, sift_tensor *out,
                                     sift_graph **graph_out, sift_tensor **indices_out);

#ifdef __cplusplus
}
#endif
#endif
