/* Sessions on several threads sharing one context and one model (sift.h: threads), on every
 * backend present: three threads each create their own session, prefill their own prompt and
 * decode greedily, for several rounds (sessions created, run and destroyed while the others run).
 * Every thread's tokens must equal those of the same prompt run alone on one thread before.
 * Usage: sift-threads-test MODEL.gguf (a missing model file is skipped with a message). */
#include "backend_filter.h"
#include "report.h"
#include "sift.h"
#include "sift_testing.h" /* validation messages */

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_THREADS = 3, N_ROUNDS = 4, N_GEN = 24, MAX_PROMPT = 64 };

static const char *const prompts[N_THREADS] = {"Once upon a time", "The little dog", "Lily and Ben went to the park"};

#define check(ok, backend, what) test_check((ok), (backend), "%s", (what))

typedef struct {
    sift_model *m;
    int prompt;
    int32_t tokens[N_ROUNDS][N_GEN];
    sift_status status;
    char error[256];
} worker;

/* Prompt `which` prefilled, then N_GEN greedy tokens into out; the session is this call's own. */
static sift_status generate(sift_model *m, int which, int32_t *out)
{
    sift_model_info info;
    sift_model_get_info(m, &info);
    sift_session_config sc = sift_session_config_default();
    sc.n_ctx = 256;
    sift_session *s = NULL;
    sift_sampler *smp = NULL;
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    int32_t ids[MAX_PROMPT];
    size_t n = 0;
    sift_status st = logits ? SIFT_OK : SIFT_E_NOMEM;
    if (st == SIFT_OK) st = sift_model_tokenize(m, prompts[which], strlen(prompts[which]), 1, ids, MAX_PROMPT, &n);
    if (st == SIFT_OK) st = sift_session_create(m, &sc, &s);
    sift_sampler_config gc = sift_sampler_config_default(); /* greedy */
    if (st == SIFT_OK) st = sift_sampler_create(&gc, &smp);
    if (st == SIFT_OK) st = sift_session_eval(s, ids, n, logits);
    for (int i = 0; st == SIFT_OK && i < N_GEN; i++) {
        out[i] = sift_sampler_sample(smp, logits, info.n_vocab);
        st = sift_session_eval(s, &out[i], 1, logits);
    }
    sift_sampler_destroy(smp);
    sift_session_destroy(s);
    free(logits);
    return st;
}

static void *worker_main(void *p)
{
    worker *w = p;
    for (int r = 0; r < N_ROUNDS && w->status == SIFT_OK; r++) {
        w->status = generate(w->m, w->prompt, w->tokens[r]);
        if (w->status != SIFT_OK) snprintf(w->error, sizeof w->error, "%s", sift_last_error());
    }
    return NULL;
}

static void run_backend(sift_backend_kind kind, const char *path)
{
    const char *bname = sift_backend_kind_name(kind);
    sift_context *ctx = test_context_open(kind, "", false);
    if (!ctx) return;
    sift_model *m = NULL;
    if (sift_model_load(ctx, path, &m) != SIFT_OK) {
        check(false, bname, sift_last_error());
        sift_context_destroy(ctx);
        return;
    }
    int32_t ref[N_THREADS][N_GEN];
    bool ref_ok = true;
    for (int t = 0; t < N_THREADS; t++) {
        if (generate(m, t, ref[t]) != SIFT_OK) {
            check(false, bname, sift_last_error());
            ref_ok = false;
        }
    }
    /* a reference that did not depend on the prompt would make the comparison below say little */
    check(ref_ok && memcmp(ref[0], ref[1], sizeof ref[0]) != 0, bname, "one thread: prompts 0 and 1 generate different tokens");
    worker w[N_THREADS];
    pthread_t th[N_THREADS];
    bool started[N_THREADS] = {false};
    for (int t = 0; t < N_THREADS; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].m = m;
        w[t].prompt = t;
        started[t] = pthread_create(&th[t], NULL, worker_main, &w[t]) == 0;
        if (!started[t]) check(false, bname, "pthread_create");
    }
    for (int t = 0; t < N_THREADS; t++) {
        if (!started[t]) continue;
        pthread_join(th[t], NULL);
        char what[320]; /* room for the worker's error[256] */
        snprintf(what, sizeof what, "thread %d: %d rounds ran%s%s", t, N_ROUNDS, w[t].status ? ": " : "", w[t].error);
        check(w[t].status == SIFT_OK, bname, what);
        for (int r = 0; w[t].status == SIFT_OK && r < N_ROUNDS; r++) {
            int first_diff = -1;
            for (int i = 0; i < N_GEN && first_diff < 0; i++)
                if (w[t].tokens[r][i] != ref[t][i]) first_diff = i;
            snprintf(what, sizeof what, "thread %d round %d: %d tokens equal one thread's (first difference: %d)", t, r,
                     N_GEN, first_diff);
            check(ref_ok && first_diff < 0, bname, what);
        }
    }
    check(sift_context_validation_messages(ctx) == 0, bname, "no validation-layer messages");
    sift_model_destroy(m);
    sift_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("SIFT_VULKAN_VALIDATION", "1", 0);
    return test_main_one_model(argc, argv, "threads", run_backend);
}
