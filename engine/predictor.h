/* TokenButler's predictor as the session runs it (engine-private; predictor.c loads it). */
#ifndef SIFT_PREDICTOR_H
#define SIFT_PREDICTOR_H

#include "model.h"

/* The predictor of producer layer i * stride: LayerNorm (norm_w, norm_b) -> fc1 [hidden][E] ->
 * SiLU -> fc2 [stride * Hq * d'][hidden]. Output (s * Hq + h) * d' + a is component a of query
 * head h's query for consumer layer i * stride + 1 + s. */
typedef struct butler_producer {
    sift_tensor *norm_w, *norm_b, *fc1, *fc2;
} butler_producer;

struct sift_predictor {
    /* The caller's handle and each session using it: freed at 0. It holds a reference on m. */
    atomic_int refs;
    sift_model *m;
    int n_layers, key_dim, stride, hidden, n_prod;
    float ln_eps;
    butler_producer *prod;
    sift_tensor **kproj; /* [n_layers]: layer l >= 1's key projections, block-diagonal f32 [Hkv * d'][Hkv * D] */
    int64_t n_params;
    double overhead;     /* n_params over the base model's parameters */
    size_t bytes;
};

/* FNV-1a 64 over each tensor of the model's file, in the file's order: its name, then the first
 * 64 bytes of its data (at most). A predictor file names the fingerprint of the model it was
 * trained for. */
uint64_t sift_model_fingerprint(const sift_model *m);
/* The same over blocks spread over the whole of each tensor, so that tensors that differ only past
 * their first 64 bytes differ here: FNV-1a 64 over each tensor, in the file's order, of its name,
 * its byte count (8 bytes, little-endian), then its data: all of it up to 4096 bytes, else 64
 * blocks of 64 bytes, block b at floor(b * (nbytes - 64) / 63). Predictor files written since it
 * exists name it too (sift-butler.base_fingerprint_blocks). */
uint64_t sift_model_fingerprint_blocks(const sift_model *m);

/* Consumer layer l's slot among the outputs of its producer, layer (l - 1) / stride * stride. */
static inline int butler_slot_of(const sift_predictor *p, int l) { return (l - 1) % p->stride; }

void sift_predictor_retain(sift_predictor *p);
void sift_predictor_release(sift_predictor *p);

#endif
