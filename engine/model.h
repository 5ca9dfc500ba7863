/* The loaded model, shared by model.c (loading) and session.c (running). Engine-private. */
#ifndef SIFT_MODEL_H
#define SIFT_MODEL_H

#include "engine.h"

#include <stdatomic.h>
#include "gguf.h"
#include "tokenizer.h"

typedef struct layer_weights {
    sift_tensor *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv;
    sift_tensor *ffn_norm, *w_gate, *w_up, *w_down;
    /* wq, wk, wv (and w_gate, w_up) stored as one matrix, the parts views of its rows, where they
     * share a type and have no biases: a decode step of one row then runs one matrix-vector product
     * in place of three (two), whose small products are bound by latency, not bandwidth. NULL: the
     * parts are separate tensors. */
    sift_tensor *wqkv, *w_gate_up;
} layer_weights;

struct sift_model {
    /* The caller's handle, each session and each predictor: the weights are freed at 0. */
    atomic_int refs;
    sift_context *ctx;
    sift_gguf *file;
    sift_gguf_hparams hp;
    sift_tokenizer *tok;
    sift_tensor *tok_embd, *output_norm, *output; /* output == tok_embd when tied */
    sift_tensor *rope_factors;                    /* NULL: no frequency scaling */
    layer_weights *layers;
    size_t weight_bytes;
    sift_rope_mode rope_mode;
    char *chat_template; /* tokenizer.chat_template, NUL-terminated; NULL when the file has none */
    /* While loading (sift_model_load_with): the progress callback, and the tensor bytes uploaded
     * so far and in the file */
    sift_model_load_config load;
    uint64_t load_done, load_total;
    bool dry_run; /* sift_model_estimate's load: no tensor is created, weight_bytes is counted */
};

/* References that keep a model alive (sift_model_destroy drops the caller's). */
void sift_model_retain(sift_model *m);
void sift_model_release(sift_model *m);

#endif
