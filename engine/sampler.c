/* Sampling on the host: greedy, or temperature with top-k and top-p, from a seeded generator. */
#include "engine.h"

#include <math.h>
#include <stdlib.h>

struct sift_sampler {
    sift_sampler_config cfg;
    uint64_t state;
    int32_t *order; /* candidate ids, reused between calls */
    float *prob;
    int32_t cap;
};

sift_sampler_config sift_sampler_config_default(void)
{
    sift_sampler_config c = {.struct_size = sizeof c, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    return c;
}

sift_status sift_sampler_create(const sift_sampler_config *cfg, sift_sampler **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_sampler_create: out is NULL");
    *out = NULL;
    sift_sampler_config c = sift_sampler_config_default();
    if (cfg) TRY(sift_config_read(cfg, &c, sizeof c, sizeof c, "sift_sampler_create"));
    if (!(c.temperature == c.temperature) || !(c.top_p == c.top_p))
        return sift_set_error(SIFT_E_INVALID, "sift_sampler_create: temperature or top_p is NaN");
    sift_sampler *s = calloc(1, sizeof *s);
    if (!s) return sift_set_error(SIFT_E_NOMEM, "sift_sampler_create: out of memory");
    s->cfg = c;
    s->state = c.seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    *out = s;
    return SIFT_OK;
}

void sift_sampler_destroy(sift_sampler *s)
{
    if (!s) return;
    free(s->order);
    free(s->prob);
    free(s);
}

static double next_uniform(sift_sampler *s) /* [0, 1) */
{
    uint64_t z = (s->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}

static int32_t argmax(const float *logits, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static _Thread_local const float *sort_logits;
static int by_logit_desc(const void *a, const void *b)
{
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_logits[i] != sort_logits[j]) return sort_logits[i] > sort_logits[j] ? -1 : 1;
    return (i > j) - (i < j);
}

int32_t sift_sampler_sample(sift_sampler *s, const float *logits, int32_t n)
{
    if (!s || !logits || n <= 0) return -1;
    if (s->cfg.temperature <= 0.0f) return argmax(logits, n);
    if (n > s->cap) {
        int32_t *o = realloc(s->order, (size_t)n * sizeof *o);
        if (o) s->order = o;
        float *p = o ? realloc(s->prob, (size_t)n * sizeof *p) : NULL;
        if (p) s->prob = p;
        if (!o || !p) return argmax(logits, n); /* out of memory: the most likely token rather than none */
        s->cap = n;
    }
    for (int32_t i = 0; i < n; i++) s->order[i] = i;
    sort_logits = logits;
    qsort(s->order, (size_t)n, sizeof *s->order, by_logit_desc);
    int32_t keep = s->cfg.top_k > 0 && s->cfg.top_k < n ? s->cfg.top_k : n;
    const float mx = logits[s->order[0]];
    double total = 0.0;
    for (int32_t i = 0; i < keep; i++) total += s->prob[i] = expf((logits[s->order[i]] - mx) / s->cfg.temperature);
    if (s->cfg.top_p < 1.0f) { /* the smallest prefix whose probability reaches top_p */
        double run = 0.0;
        for (int32_t i = 0; i < keep; i++) {
            run += s->prob[i] / total;
            if (run >= s->cfg.top_p) {
                keep = i + 1;
                total = run * total;
                break;
            }
        }
    }
    double r = next_uniform(s) * total;
    for (int32_t i = 0; i < keep; i++) {
        r -= s->prob[i];
        if (r < 0.0) return s->order[i];
    }
    return s->order[keep - 1];
}
