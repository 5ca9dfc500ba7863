/* A model run compared across backends, layer by layer: every GPU backend against the CPU reference
 * on the same tokens, the output of every layer for the last token (NMSE), after a prefill and after
 * decode steps with dense and with selected attention.
 *
 * usage: sift-model-backends MODEL.gguf...   (a missing file is skipped with a message) */
#include "sift.h"
#include "backend_filter.h"
#include "sift_testing.h"
#include "report.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n_layers, n_embd, n_vocab;
    float *layers; /* [phase][layer][n_embd] */
    float *logits; /* [phase][n_vocab] */
} trace;

enum { PROMPT = 24, DECODE = 4, PHASES = 1 + 2 * DECODE };

/* Runs the prompt, then DECODE dense steps, then (on a second session) the prompt and DECODE
 * selected steps, recording each phase's layer outputs and logits. */
static sift_status run_trace(sift_context *ctx, const char *path, trace *tr)
{
    sift_model *m = NULL;
    sift_status s = sift_model_load(ctx, path, &m);
    if (s != SIFT_OK) return s;
    sift_model_info info;
    sift_model_get_info(m, &info);
    tr->n_layers = info.n_layers;
    tr->n_embd = info.n_embd;
    tr->n_vocab = info.n_vocab;
    tr->layers = calloc((size_t)PHASES * info.n_layers * info.n_embd, sizeof(float));
    tr->logits = calloc((size_t)PHASES * info.n_vocab, sizeof(float));
    int32_t toks[PROMPT + DECODE];
    for (int i = 0; i < PROMPT + DECODE; i++) toks[i] = i == 0 ? 1 : 3 + (int32_t)((i * 7919u) % (uint32_t)(info.n_vocab - 3));
    for (int pass = 0; pass < 2 && s == SIFT_OK; pass++) {
        sift_session_config cfg = sift_session_config_default();
        cfg.n_ctx = 64;
        cfg.chunk = 16; /* the prompt in two chunks */
        cfg.keep_layer_outputs = 1;
        cfg.policy = pass ? SIFT_POLICY_TOKENSELECT : SIFT_POLICY_DENSE;
        cfg.sink = 2, cfg.window = 4, cfg.budget = 8; /* fewer than the context: selection matters */
        cfg.sel_cache = SIFT_SEL_CACHE_OFF; /* a cosine near the threshold could decide differently per backend */
        sift_session *ss = NULL;
        s = sift_session_create(m, &cfg, &ss);
        for (int phase = pass ? 1 + DECODE : 0; s == SIFT_OK && phase < (pass ? PHASES : 1 + DECODE); phase++) {
            if (phase == 0) s = sift_session_eval(ss, toks, PROMPT, tr->logits);
            else if (phase == 1 + DECODE) { /* the second pass repeats the prompt first */
                s = sift_session_eval(ss, toks, PROMPT, NULL);
                if (s == SIFT_OK) s = sift_session_eval(ss, &toks[PROMPT], 1, tr->logits + (size_t)phase * info.n_vocab);
            } else {
                const int step = pass ? phase - DECODE : phase;
                s = sift_session_eval(ss, &toks[PROMPT - 1 + step], 1, tr->logits + (size_t)phase * info.n_vocab);
            }
            for (int l = 0; s == SIFT_OK && l < info.n_layers; l++)
                s = sift_session_layer_output(ss, l, tr->layers + ((size_t)phase * info.n_layers + l) * info.n_embd);
        }
        sift_session_destroy(ss);
    }
    sift_model_destroy(m);
    return s;
}

/* NMSE, infinite where the backend gave a value that is not finite. */
static double nmse_finite(const float *ref, const float *got, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num += ((double)ref[i] - got[i]) * ((double)ref[i] - got[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
}

static void compare_model(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        test_note("", "%s: skipped (absent)", path);
        return;
    }
    fclose(f);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    sift_context *cpu = NULL;
    trace ref = {0};
    if (sift_context_create(SIFT_BACKEND_CPU, &cpu) != SIFT_OK || run_trace(cpu, path, &ref) != SIFT_OK) {
        fail(name, "cpu", sift_last_error());
        sift_context_destroy(cpu);
        return;
    }
    /* quantized and f16 weights are exact in f32 on every backend: the differences are summation order */
    const double bound = 1e-6;
    for (int kind = 1; kind < SIFT_BACKEND_COUNT; kind++) {
        const char *bname = sift_backend_kind_name((sift_backend_kind)kind);
        sift_context *ctx = NULL;
        const char *excluded = test_backend_excluded((sift_backend_kind)kind);
        if (excluded || sift_context_create((sift_backend_kind)kind, &ctx) != SIFT_OK) {
            test_note(bname, "%s skipped: %s", name, excluded ? excluded : sift_last_error());
            continue;
        }
        test_case_begin(name, bname);
        trace got = {0};
        const sift_status s = run_trace(ctx, path, &got);
        if (s != SIFT_OK) {
            fail(name, bname, sift_last_error());
        } else {
            for (int phase = 0; phase < PHASES; phase++) {
                double worst = 0.0;
                int worst_layer = 0;
                for (int l = 0; l < ref.n_layers; l++) {
                    const size_t off = ((size_t)phase * ref.n_layers + l) * ref.n_embd;
                    const double e = nmse_finite(ref.layers + off, got.layers + off, (size_t)ref.n_embd);
                    if (!(e <= worst)) worst = e, worst_layer = l;
                }
                const double el = nmse_finite(ref.logits + (size_t)phase * ref.n_vocab, got.logits + (size_t)phase * ref.n_vocab,
                                       (size_t)ref.n_vocab);
                char what[160];
                snprintf(what, sizeof what, "%s: %s, worst layer (%d)", name,
                         phase == 0 ? "prefill" : phase <= DECODE ? "decode dense" : "decode select", worst_layer);
                report(what, bname, "nmse", worst, bound, worst <= bound);
                snprintf(what, sizeof what, "%s: %s, logits", name,
                         phase == 0 ? "prefill" : phase <= DECODE ? "decode dense" : "decode select");
                report(what, bname, "nmse", el, bound, el <= bound);
            }
        }
        free(got.layers);
        free(got.logits);
        test_context_done(ctx);
    }
    free(ref.layers);
    free(ref.logits);
    sift_context_destroy(cpu);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) compare_model(argv[i]);
    return test_summary("model-backends", NULL);
}
