/* Host-side selection policies, the baselines of SPEC §8 (oracle, Quest, SnapKV, H2O), over a host
 * mirror of one sequence's cache, and the attention-level quality measure. The contracts are in
 * policy.h; the choices the SPEC leaves open are written here where they are made.
 *
 * Every list has the layout [0, S) ∪ chosen ∪ [N - W, N), ascending, where chosen ⊆ C = [S, N - W)
 * holds exactly min(k, |C|) positions (all of C when |C| <= k), so that every policy attends the
 * same number of tokens as sift_select_count. Ties in a ranking always go to the lower position
 * (H2O's eviction is the one stated exception: among equal accumulated attention the lower position
 * is evicted). Numerics: f32 dot products, softmax subtracting the max, sums and probabilities in
 * double. Rankings compare the total-order key of a double (sift_order_key's rule on 64 bits), so a
 * NaN cannot break a selection. */
#include "policy.h"

#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- policy names ------------------------------------------------------------------------------ */

const char *sift_policy_name(sift_policy p)
{
    switch (p) {
    case SIFT_POLICY_DENSE: return "dense";
    case SIFT_POLICY_TOKENSELECT: return "tokenselect";
    case SIFT_POLICY_STREAMING: return "streaming";
    case SIFT_POLICY_H2O: return "h2o";
    case SIFT_POLICY_SNAPKV: return "snapkv";
    case SIFT_POLICY_QUEST: return "quest";
    case SIFT_POLICY_ORACLE: return "oracle";
    case SIFT_POLICY_BUTLER: return "butler";
    default: return "unknown";
    }
}

sift_status sift_policy_parse(const char *name, sift_policy *out)
{
    if (!name || !out) return sift_set_error(SIFT_E_INVALID, "sift_policy_parse: null argument");
    for (int p = 0; p < SIFT_POLICY_COUNT; p++) {
        if (strcmp(name, sift_policy_name((sift_policy)p)) == 0) {
            *out = (sift_policy)p;
            return SIFT_OK;
        }
    }
    return sift_set_error(SIFT_E_INVALID,
                          "unknown policy '%s' (expected dense, tokenselect, streaming, h2o, snapkv, quest, oracle or butler)",
                          name);
}

/* ---- small helpers ----------------------------------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* calloc of count elements of elem bytes, NULL when count is negative or the size overflows
 * (count 0 allocates one element, so NULL always means failure). */
static void *alloc_zeroed(int64_t count, size_t elem)
{
    if (count < 0 || (uint64_t)count > SIZE_MAX / elem) return NULL;
    return calloc(count > 0 ? (size_t)count : 1, elem);
}

/* a * b * c for non-negative factors, or -1 when the product does not fit in int64_t. */
static int64_t mul3(int64_t a, int64_t b, int64_t c)
{
    if (a < 0 || b < 0 || c < 0) return -1;
    if (b != 0 && a > INT64_MAX / b) return -1;
    const int64_t ab = a * b;
    if (c != 0 && ab > INT64_MAX / c) return -1;
    return ab * c;
}

/* Softmax weights w[i] = exp(s[i] - max s) for i < n, in double; returns their sum (the softmax
 * is w[i] / sum). */
static double softmax_weights(const float *s, int64_t n, double *w)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (s[i] > mx) mx = s[i];
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        w[i] = exp((double)s[i] - mx);
        sum += w[i];
    }
    return sum;
}

/* A double's position in a total order: larger key = larger value; -0 equals +0. */
static uint64_t order_key(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7fffffffffffffffull) == 0) bits = 0;
    return (bits & 0x8000000000000000ull) ? ~bits : (bits | 0x8000000000000000ull);
}

/* ---- ranking: the k best of n entries ---------------------------------------------------------- */

typedef struct ranked {
    uint64_t key; /* order_key of the value: larger is better */
    int64_t pos;  /* the position (or page) it belongs to; ties go to the lower one */
} ranked;

/* true when a ranks before b: larger key; on equal keys the lower position, or the higher one when
 * high_pos_wins (H2O's eviction order). Positions are distinct, so this is a strict total order. */
static bool ranks_before(const ranked *a, const ranked *b, bool high_pos_wins)
{
    if (a->key != b->key) return a->key > b->key;
    return high_pos_wins ? a->pos > b->pos : a->pos < b->pos;
}

static void swap_ranked(ranked *a, ranked *b)
{
    ranked t = *a;
    *a = *b;
    *b = t;
}

/* Reorders a[0, n) so that a[0, k) holds the k entries that rank first (in no particular order):
 * quickselect with a median-of-three pivot, O(n) on average. */
static void select_best(ranked *a, int64_t n, int64_t k, bool high_pos_wins)
{
    int64_t lo = 0, hi = n; /* the boundary k lies in [lo, hi); a[0, lo) ranks before all of a[lo, n) */
    while (hi - lo > 1 && k > lo && k < hi) {
        /* median of three to a[hi - 1] */
        const int64_t mid = lo + (hi - lo) / 2;
        if (ranks_before(&a[mid], &a[lo], high_pos_wins)) swap_ranked(&a[mid], &a[lo]);
        if (ranks_before(&a[hi - 1], &a[lo], high_pos_wins)) swap_ranked(&a[hi - 1], &a[lo]);
        if (ranks_before(&a[mid], &a[hi - 1], high_pos_wins)) swap_ranked(&a[mid], &a[hi - 1]);
        /* now a[lo] ranks first, a[mid] last and the pivot a[hi - 1] between them */
        int64_t store = lo;
        for (int64_t i = lo; i < hi - 1; i++) {
            if (ranks_before(&a[i], &a[hi - 1], high_pos_wins)) swap_ranked(&a[i], &a[store++]);
        }
        swap_ranked(&a[store], &a[hi - 1]);
        /* a[lo, store) ranks before the pivot a[store], a[store + 1, hi) after it */
        if (k <= store) {
            hi = store;
        } else {
            lo = store + 1;
        }
    }
}

/* qsort order: best first, ties to the lower position. */
static int by_rank(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (ranks_before(a, b, false)) return -1;
    if (ranks_before(b, a, false)) return 1;
    return 0;
}

/* ---- the host mirror --------------------------------------------------------------------------- */

static int64_t mirror_pages(const sift_kv_mirror *m) { return m->cap / SIFT_QUEST_PAGE + 1; }

sift_status sift_kv_mirror_init(sift_kv_mirror *m, int64_t n_kv_heads, int64_t head_dim, int64_t cap, bool keep_v)
{
    if (!m) return sift_set_error(SIFT_E_INVALID, "sift_kv_mirror_init: null mirror");
    memset(m, 0, sizeof *m);
    if (n_kv_heads < 1 || head_dim < 1 || cap < 1)
        return sift_set_error(SIFT_E_INVALID, "sift_kv_mirror_init: %lld KV heads of size %lld, capacity %lld",
                              (long long)n_kv_heads, (long long)head_dim, (long long)cap);
    const int64_t rows = mul3(n_kv_heads, cap, head_dim);
    const int64_t meta = mul3(n_kv_heads, cap / SIFT_QUEST_PAGE + 1, head_dim);
    if (rows < 0 || meta < 0)
        return sift_set_error(SIFT_E_NOMEM, "sift_kv_mirror_init: %lld x %lld x %lld floats do not fit in memory",
                              (long long)n_kv_heads, (long long)cap, (long long)head_dim);
    m->k = alloc_zeroed(rows, sizeof(float));
    m->v = keep_v ? alloc_zeroed(rows, sizeof(float)) : NULL;
    m->kmin = alloc_zeroed(meta, sizeof(float));
    m->kmax = alloc_zeroed(meta, sizeof(float));
    if (!m->k || (keep_v && !m->v) || !m->kmin || !m->kmax) {
        sift_kv_mirror_free(m);
        return sift_set_error(SIFT_E_NOMEM, "sift_kv_mirror_init: out of memory for %lld KV heads x %lld rows",
                              (long long)n_kv_heads, (long long)cap);
    }
    m->n_kv_heads = n_kv_heads;
    m->head_dim = head_dim;
    m->cap = cap;
    m->n = 0;
    return SIFT_OK;
}

void sift_kv_mirror_free(sift_kv_mirror *m)
{
    if (!m) return;
    free(m->k);
    free(m->v);
    free(m->kmin);
    free(m->kmax);
    memset(m, 0, sizeof *m);
}

/* Recomputes page p's per-dimension min and max of K over its valid rows [16p, min(16p + 16, n)).
 * A page without valid rows gets empty bounds (+inf, -inf); no policy reads such a page. */
static void mirror_page_bounds(sift_kv_mirror *m, int64_t g, int64_t p)
{
    const int64_t d = m->head_dim;
    float *lo = m->kmin + (g * mirror_pages(m) + p) * d;
    float *hi = m->kmax + (g * mirror_pages(m) + p) * d;
    for (int64_t i = 0; i < d; i++) {
        lo[i] = INFINITY;
        hi[i] = -INFINITY;
    }
    const int64_t begin = p * SIFT_QUEST_PAGE, end = min64(begin + SIFT_QUEST_PAGE, m->n);
    for (int64_t j = begin; j < end; j++) {
        const float *row = m->k + (g * m->cap + j) * d;
        for (int64_t i = 0; i < d; i++) {
            if (row[i] < lo[i]) lo[i] = row[i];
            if (row[i] > hi[i]) hi[i] = row[i];
        }
    }
}

void sift_kv_mirror_update(sift_kv_mirror *m, int64_t pos0, int64_t t)
{
    if (!m || !m->k || !m->kmin || !m->kmax) return;
    pos0 = min64(max64(pos0, 0), m->cap);
    t = min64(max64(t, 0), m->cap - pos0);
    m->n = pos0 + t;
    /* The pages holding a written row, and the page cut by a rewind (its rows from pos0 on are
     * forgotten): pages [pos0 / 16, ceil(n / 16)). Pages before pos0 / 16 are unchanged. */
    const int64_t first = pos0 / SIFT_QUEST_PAGE;
    const int64_t end = (m->n + SIFT_QUEST_PAGE - 1) / SIFT_QUEST_PAGE;
    for (int64_t g = 0; g < m->n_kv_heads; g++) {
        for (int64_t p = first; p < end; p++) mirror_page_bounds(m, g, p);
    }
}

/* ---- policy state ------------------------------------------------------------------------------ */

enum { H2O_OUT = 0, H2O_HEAVY = 1, H2O_EVICTED = 2 };

struct sift_policy_state {
    sift_policy policy;
    int n_layers, hq, hkv, d, group; /* group = Hq / Hkv */
    int64_t cap;

    /* SnapKV and H2O: per layer the last SIFT_POLICY_OBS prompt queries, oldest first */
    float *obs_q;     /* [L][OBS][Hq][D] */
    int64_t *obs_pos; /* [L][OBS] their positions, ascending */
    int *obs_n;       /* [L] how many are kept */
    int *obs_fresh;   /* [L] the newest obs_fresh of them arrived after the layer's last decode step */

    /* SnapKV: per layer the chosen set F of each KV head, best first: snap_set[l][g * snap_n[l] + r] */
    int32_t **snap_set;
    int64_t *snap_n;

    /* H2O: per layer and KV head, accumulated attention and each position's membership */
    double *acc;      /* [L][Hkv][cap] */
    uint8_t *member;  /* [L][Hkv][cap]: H2O_OUT, H2O_HEAVY or H2O_EVICTED */
    bool *started;    /* [L] the heavy sets exist */
    int64_t *c_end;   /* [L] end of C at the layer's last step: later candidates joined since */
    int64_t *last_n;  /* [L] N at the layer's last step */

    /* scratch, reused by every call */
    float *scores;  /* [G][cap] */
    double *vals;   /* [cap] */
    double *pooled; /* [cap] */
    double *w;      /* [cap] softmax weights */
    ranked *rank;   /* [cap] */
    uint8_t *mark;  /* [cap]: chosen candidates of the list being built */
};

void sift_policy_state_destroy(sift_policy_state *st)
{
    if (!st) return;
    free(st->obs_q);
    free(st->obs_pos);
    free(st->obs_n);
    free(st->obs_fresh);
    if (st->snap_set) {
        for (int l = 0; l < st->n_layers; l++) free(st->snap_set[l]);
    }
    free(st->snap_set);
    free(st->snap_n);
    free(st->acc);
    free(st->member);
    free(st->started);
    free(st->c_end);
    free(st->last_n);
    free(st->scores);
    free(st->vals);
    free(st->pooled);
    free(st->w);
    free(st->rank);
    free(st->mark);
    free(st);
}

sift_status sift_policy_state_create(sift_policy p, int n_layers, int hq, int hkv, int d, int64_t cap,
                                     sift_policy_state **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_policy_state_create: null output");
    *out = NULL;
    if (p != SIFT_POLICY_H2O && p != SIFT_POLICY_SNAPKV && p != SIFT_POLICY_QUEST && p != SIFT_POLICY_ORACLE)
        return sift_set_error(SIFT_E_INVALID, "sift_policy_state_create: policy '%s' is not a host policy",
                              sift_policy_name(p));
    if (n_layers < 1 || hq < 1 || hkv < 1 || d < 1 || hq % hkv != 0 || cap < 1 || cap > INT32_MAX)
        return sift_set_error(SIFT_E_INVALID,
                              "sift_policy_state_create: %d layers, %d query heads, %d KV heads of size %d, "
                              "capacity %lld (need positive sizes, Hq a multiple of Hkv, capacity below 2^31)",
                              n_layers, hq, hkv, d, (long long)cap);
    sift_policy_state *st = calloc(1, sizeof *st);
    if (!st) return sift_set_error(SIFT_E_NOMEM, "sift_policy_state_create: out of memory");
    st->policy = p;
    st->n_layers = n_layers;
    st->hq = hq;
    st->hkv = hkv;
    st->d = d;
    st->group = hq / hkv;
    st->cap = cap;

    bool ok = true;
    const int64_t kv_cells = mul3(n_layers, hkv, cap);
    ok = ok && kv_cells >= 0;
    st->scores = alloc_zeroed(mul3(st->group, cap, 1), sizeof(float));
    st->vals = alloc_zeroed(cap, sizeof(double));
    st->pooled = alloc_zeroed(cap, sizeof(double));
    st->w = alloc_zeroed(cap, sizeof(double));
    st->rank = alloc_zeroed(cap, sizeof(ranked));
    st->mark = alloc_zeroed(cap, sizeof(uint8_t));
    ok = ok && st->scores && st->vals && st->pooled && st->w && st->rank && st->mark;
    if (p == SIFT_POLICY_SNAPKV || p == SIFT_POLICY_H2O) {
        st->obs_q = alloc_zeroed(mul3(n_layers, SIFT_POLICY_OBS, mul3(hq, d, 1)), sizeof(float));
        st->obs_pos = alloc_zeroed(mul3(n_layers, SIFT_POLICY_OBS, 1), sizeof(int64_t));
        st->obs_n = alloc_zeroed(n_layers, sizeof(int));
        st->obs_fresh = alloc_zeroed(n_layers, sizeof(int));
        ok = ok && st->obs_q && st->obs_pos && st->obs_n && st->obs_fresh;
    }
    if (p == SIFT_POLICY_SNAPKV) {
        st->snap_set = alloc_zeroed(n_layers, sizeof(int32_t *));
        st->snap_n = alloc_zeroed(n_layers, sizeof(int64_t));
        ok = ok && st->snap_set && st->snap_n;
    }
    if (p == SIFT_POLICY_H2O) {
        st->acc = alloc_zeroed(kv_cells, sizeof(double));
        st->member = alloc_zeroed(kv_cells, sizeof(uint8_t));
        st->started = alloc_zeroed(n_layers, sizeof(bool));
        st->c_end = alloc_zeroed(n_layers, sizeof(int64_t));
        st->last_n = alloc_zeroed(n_layers, sizeof(int64_t));
        ok = ok && st->acc && st->member && st->started && st->c_end && st->last_n;
    }
    if (!ok) {
        sift_policy_state_destroy(st);
        return sift_set_error(SIFT_E_NOMEM, "sift_policy_state_create: out of memory for %s over %d layers x %lld positions",
                              sift_policy_name(p), n_layers, (long long)cap);
    }
    *out = st;
    return SIFT_OK;
}

void sift_policy_reset(sift_policy_state *st)
{
    if (!st) return;
    for (int l = 0; l < st->n_layers; l++) {
        if (st->obs_n) st->obs_n[l] = 0;
        if (st->obs_fresh) st->obs_fresh[l] = 0;
        if (st->snap_set) {
            free(st->snap_set[l]);
            st->snap_set[l] = NULL;
            st->snap_n[l] = 0;
        }
        if (st->started) {
            st->started[l] = false;
            st->c_end[l] = 0;
            st->last_n[l] = 0;
        }
    }
    if (st->acc) {
        const size_t cells = (size_t)st->n_layers * (size_t)st->hkv * (size_t)st->cap;
        memset(st->acc, 0, cells * sizeof *st->acc);
        memset(st->member, 0, cells * sizeof *st->member);
    }
}

/* ---- observation (prefill) --------------------------------------------------------------------- */

static float *obs_query(const sift_policy_state *st, int layer, int64_t slot)
{
    return st->obs_q + ((int64_t)layer * SIFT_POLICY_OBS + slot) * st->hq * st->d;
}

sift_status sift_policy_observe(sift_policy_state *st, int layer, const float *q, int64_t pos0, int64_t t)
{
    if (!st) return sift_set_error(SIFT_E_INVALID, "sift_policy_observe: null state");
    if (layer < 0 || layer >= st->n_layers)
        return sift_set_error(SIFT_E_INVALID, "sift_policy_observe: layer %d of %d", layer, st->n_layers);
    if (pos0 < 0 || t < 0 || pos0 > st->cap - t)
        return sift_set_error(SIFT_E_INVALID, "sift_policy_observe: positions %lld + %lld outside the capacity %lld",
                              (long long)pos0, (long long)t, (long long)st->cap);
    if (t > 0 && !q) return sift_set_error(SIFT_E_INVALID, "sift_policy_observe: null queries");
    if (!st->obs_q) return SIFT_OK; /* Quest and the oracle look at the decode query only */

    const int64_t row = (int64_t)st->hq * st->d;
    int64_t *pos = st->obs_pos + (int64_t)layer * SIFT_POLICY_OBS;
    int64_t kept = st->obs_n[layer], fresh = st->obs_fresh[layer];
    /* Observations at positions from pos0 on were overwritten (the sequence went back): drop them. */
    while (kept > 0 && pos[kept - 1] >= pos0) kept--;
    fresh = min64(fresh, kept);
    /* Keep the newest SIFT_POLICY_OBS of the old ones followed by the new ones. */
    const int64_t take = min64(t, SIFT_POLICY_OBS);
    const int64_t keep = min64(kept, SIFT_POLICY_OBS - take);
    const int64_t drop = kept - keep;
    if (keep > 0 && drop > 0) {
        memmove(obs_query(st, layer, 0), obs_query(st, layer, drop), (size_t)(keep * row) * sizeof(float));
        memmove(pos, pos + drop, (size_t)keep * sizeof *pos);
    }
    for (int64_t i = 0; i < take; i++) {
        const int64_t src = t - take + i;
        memcpy(obs_query(st, layer, keep + i), q + src * row, (size_t)row * sizeof(float));
        pos[keep + i] = pos0 + src;
    }
    st->obs_n[layer] = (int)(keep + take);
    st->obs_fresh[layer] = (int)(min64(fresh, keep) + take);
    return SIFT_OK;
}

/* a[j], j in [0, n): the attention the kept observations [first, obs_n) of the layer paid to
 * position j, summed over the queries and the heads of KV head g; each query's softmax is causal,
 * over [0, pos_t]. Observations at positions >= n (a future that was forgotten) are skipped. */
static void observed_attention(sift_policy_state *st, int layer, int64_t first, int g, const sift_kv_mirror *m,
                               int64_t n, float scale, double *a)
{
    const int64_t d = st->d;
    const int64_t *pos = st->obs_pos + (int64_t)layer * SIFT_POLICY_OBS;
    float *s = st->scores;
    for (int64_t j = 0; j < n; j++) a[j] = 0.0;
    for (int64_t t = first; t < st->obs_n[layer]; t++) {
        if (pos[t] >= n) continue;
        const int64_t len = pos[t] + 1;
        for (int hh = 0; hh < st->group; hh++) {
            const float *qh = obs_query(st, layer, t) + (int64_t)(g * st->group + hh) * d;
            for (int64_t j = 0; j < len; j++) s[j] = scale * sift_dot_f32(qh, m->k + ((int64_t)g * m->cap + j) * d, d);
            const double sum = softmax_weights(s, len, st->w);
            for (int64_t j = 0; j < len; j++) a[j] += st->w[j] / sum;
        }
    }
}

/* ---- the list of one decode step --------------------------------------------------------------- */

/* Where the parts of a list lie for N = sel->n_ctx. */
typedef struct span {
    int64_t n;      /* N */
    int64_t sink;   /* the sink is [0, sink): min(S, N) */
    int64_t cb, ce; /* candidates C = [cb, ce); the window is [ce, N) */
    int64_t cand;   /* |C| */
    int64_t want;   /* positions chosen from C: min(k, |C|) */
    int64_t count;  /* the list length, sift_select_count */
} span;

static span make_span(const sift_select_params *sel)
{
    const sift_select_layout l = sift_select_layout_of(sel);
    return (span){.n = sel->n_ctx, .sink = l.sink, .cb = l.sink, .ce = l.win_begin, .cand = l.cand, .want = l.chosen,
                  .count = l.count};
}

static void clear_marks(sift_policy_state *st, const span *r)
{
    if (r->cand > 0) memset(st->mark + r->cb, 0, (size_t)r->cand);
}

/* out[count]: the sink, the marked candidates ascending, the window. */
static void emit_list(const sift_policy_state *st, const span *r, int32_t *out)
{
    int64_t o = 0;
    for (int64_t j = 0; j < r->sink; j++) out[o++] = (int32_t)j;
    for (int64_t j = r->cb; j < r->ce; j++) {
        if (st->mark[j]) out[o++] = (int32_t)j;
    }
    for (int64_t j = r->ce; j < r->n; j++) out[o++] = (int32_t)j;
}

/* Marks the want best candidates by vals[j] (ties to the lower position). */
static void mark_top(sift_policy_state *st, const span *r, const double *vals)
{
    clear_marks(st, r);
    if (r->want == r->cand) {
        if (r->cand > 0) memset(st->mark + r->cb, 1, (size_t)r->cand);
        return;
    }
    for (int64_t i = 0; i < r->cand; i++) st->rank[i] = (ranked){order_key(vals[r->cb + i]), r->cb + i};
    select_best(st->rank, r->cand, r->want, false);
    for (int64_t i = 0; i < r->want; i++) st->mark[st->rank[i].pos] = 1;
}

/* Scores of the group's heads of KV head g over [0, n): st->scores[hh * cap + j]. */
static void group_scores(sift_policy_state *st, const float *q, const sift_kv_mirror *m, int g, int64_t n,
                         float scale)
{
    const int64_t d = st->d;
    for (int64_t j = 0; j < n; j++) {
        const float *krow = m->k + ((int64_t)g * m->cap + j) * d;
        for (int hh = 0; hh < st->group; hh++) {
            const float *qh = q + (int64_t)(g * st->group + hh) * d;
            st->scores[hh * st->cap + j] = scale * sift_dot_f32(qh, krow, d);
        }
    }
}

/* ---- oracle ------------------------------------------------------------------------------------ */

/* u[j] = max over the group's heads of the dense softmax (over all of [0, N)) at j; top-k over C. */
static void choose_oracle(sift_policy_state *st, const float *q, const sift_kv_mirror *m, const span *r,
                          float scale, int32_t *lists)
{
    for (int g = 0; g < st->hkv; g++) {
        int32_t *out = lists + (int64_t)g * r->count;
        if (r->want < r->cand) {
            group_scores(st, q, m, g, r->n, scale);
            for (int64_t j = r->cb; j < r->ce; j++) st->vals[j] = 0.0;
            for (int hh = 0; hh < st->group; hh++) {
                const double sum = softmax_weights(st->scores + hh * st->cap, r->n, st->w);
                for (int64_t j = r->cb; j < r->ce; j++) {
                    const double p = st->w[j] / sum;
                    if (p > st->vals[j]) st->vals[j] = p;
                }
            }
        }
        mark_top(st, r, st->vals);
        emit_list(st, r, out);
    }
}

/* ---- Quest ------------------------------------------------------------------------------------- */

/* Upper bound of q . k over the page's keys: sum_i max(q_i kmax_i, q_i kmin_i). */
static float page_bound(const float *q, const float *kmin, const float *kmax, int64_t d)
{
    float s = 0.0f;
    for (int64_t i = 0; i < d; i++) {
        const float hi = q[i] * kmax[i], lo = q[i] * kmin[i];
        s += hi > lo ? hi : lo;
    }
    return s;
}

/* Pages overlapping C by their bound (max over the group's heads), best first (ties: the lower
 * page); their candidates, page by page, until want are chosen (the last page cut to its lowest). */
static void choose_quest(sift_policy_state *st, const float *q, const sift_kv_mirror *m, const span *r,
                         int32_t *lists)
{
    const int64_t d = st->d, pages = mirror_pages(m);
    for (int g = 0; g < st->hkv; g++) {
        int32_t *out = lists + (int64_t)g * r->count;
        clear_marks(st, r);
        if (r->want == r->cand) {
            if (r->cand > 0) memset(st->mark + r->cb, 1, (size_t)r->cand);
        } else {
            const int64_t p0 = r->cb / SIFT_QUEST_PAGE, p1 = (r->ce - 1) / SIFT_QUEST_PAGE + 1;
            const int64_t np = p1 - p0;
            for (int64_t p = p0; p < p1; p++) {
                const float *kmin = m->kmin + ((int64_t)g * pages + p) * d;
                const float *kmax = m->kmax + ((int64_t)g * pages + p) * d;
                float best = -INFINITY;
                for (int hh = 0; hh < st->group; hh++) {
                    const float b = page_bound(q + (int64_t)(g * st->group + hh) * d, kmin, kmax, d);
                    if (b > best || hh == 0) best = b;
                }
                st->rank[p - p0] = (ranked){order_key(best), p};
            }
            /* want tokens need at most 2 + ceil((want - 2) / 16) <= want / 16 + 3 pages (the two
             * pages at C's ends may hold a single candidate each): select those, sort only them. */
            const int64_t need = min64(np, r->want / SIFT_QUEST_PAGE + 3);
            select_best(st->rank, np, need, false);
            qsort(st->rank, (size_t)need, sizeof *st->rank, by_rank);
            int64_t taken = 0;
            for (int64_t i = 0; i < need && taken < r->want; i++) {
                const int64_t p = st->rank[i].pos;
                const int64_t begin = max64(p * SIFT_QUEST_PAGE, r->cb);
                const int64_t end = min64(p * SIFT_QUEST_PAGE + SIFT_QUEST_PAGE, r->ce);
                for (int64_t j = begin; j < end && taken < r->want; j++) {
                    st->mark[j] = 1;
                    taken++;
                }
            }
        }
        emit_list(st, r, out);
    }
}

/* ---- SnapKV ------------------------------------------------------------------------------------ */

/* F for every KV head from the kept observations: the causal attention a[j] over C, max-pooled over
 * SIFT_SNAPKV_POOL positions centred on j (clipped at C's ends); the want best, stored best first. */
static sift_status snapkv_compute(sift_policy_state *st, int layer, const sift_kv_mirror *m, const span *r,
                                  float scale)
{
    const int64_t n_set = r->want;
    int32_t *set = alloc_zeroed(mul3(st->hkv, n_set, 1), sizeof(int32_t));
    if (!set) return sift_set_error(SIFT_E_NOMEM, "snapkv: out of memory for %lld chosen positions", (long long)n_set);
    const int64_t half = SIFT_SNAPKV_POOL / 2;
    for (int g = 0; g < st->hkv && n_set > 0; g++) {
        observed_attention(st, layer, 0, g, m, r->n, scale, st->vals);
        for (int64_t j = r->cb; j < r->ce; j++) {
            double best = st->vals[j];
            for (int64_t i = max64(r->cb, j - half); i <= min64(r->ce - 1, j + half); i++) {
                if (st->vals[i] > best) best = st->vals[i];
            }
            st->pooled[j] = best;
        }
        for (int64_t i = 0; i < r->cand; i++) st->rank[i] = (ranked){order_key(st->pooled[r->cb + i]), r->cb + i};
        select_best(st->rank, r->cand, n_set, false);
        qsort(st->rank, (size_t)n_set, sizeof *st->rank, by_rank);
        for (int64_t i = 0; i < n_set; i++) set[(int64_t)g * n_set + i] = (int32_t)st->rank[i].pos;
    }
    free(st->snap_set[layer]);
    st->snap_set[layer] = set;
    st->snap_n[layer] = n_set;
    st->obs_fresh[layer] = 0;
    return SIFT_OK;
}

/* F is chosen at the first decode step after a prefill, or whenever it is empty while observations
 * exist. Each step's list takes F ∩ C (best first, at most min(k, |C|) of it: only fewer when the
 * budget shrank since) and, when that is short of min(k, |C|) because C grew since F was chosen,
 * fills the rest with the newest candidates not in F: the tokens that left the window since, most
 * recent first (a streaming fill), so that every policy attends the same number of tokens. With no
 * observations at all (decode from the start) the list is that streaming fill alone. */
static sift_status choose_snapkv(sift_policy_state *st, int layer, const sift_kv_mirror *m, const span *r,
                                 float scale, int32_t *lists)
{
    const bool have_obs = st->obs_n[layer] > 0;
    if (st->obs_fresh[layer] > 0 || (st->snap_n[layer] == 0 && have_obs && r->want > 0))
        TRY(snapkv_compute(st, layer, m, r, scale));
    const int64_t n_set = st->snap_n[layer];
    for (int g = 0; g < st->hkv; g++) {
        int32_t *out = lists + (int64_t)g * r->count;
        const int32_t *set = st->snap_set[layer] ? st->snap_set[layer] + (int64_t)g * n_set : NULL;
        clear_marks(st, r);
        int64_t taken = 0;
        for (int64_t i = 0; i < n_set && taken < r->want; i++) {
            const int64_t j = set[i];
            if (j >= r->cb && j < r->ce && !st->mark[j]) {
                st->mark[j] = 1;
                taken++;
            }
        }
        for (int64_t j = r->ce - 1; j >= r->cb && taken < r->want; j--) {
            if (!st->mark[j]) {
                st->mark[j] = 1;
                taken++;
            }
        }
        emit_list(st, r, out);
    }
    return SIFT_OK;
}

/* ---- H2O --------------------------------------------------------------------------------------- */

/* acc[j] += the softmax over the list of the group's heads' scores, summed over the heads: the
 * attention this step actually paid. */
static void h2o_accumulate(sift_policy_state *st, const float *q, const sift_kv_mirror *m, int g,
                           const int32_t *list, int64_t count, float scale, double *acc)
{
    const int64_t d = st->d;
    float *s = st->scores;
    for (int hh = 0; hh < st->group; hh++) {
        const float *qh = q + (int64_t)(g * st->group + hh) * d;
        for (int64_t i = 0; i < count; i++) s[i] = scale * sift_dot_f32(qh, m->k + ((int64_t)g * m->cap + list[i]) * d, d);
        const double sum = softmax_weights(s, count, st->w);
        for (int64_t i = 0; i < count; i++) acc[list[i]] += st->w[i] / sum;
    }
}

/* The first step of a layer: acc = the observations' attention (as SnapKV's a[j], not pooled) and
 * H = its top min(k, |C|) over C; without observations H = the newest min(k, |C|) candidates. The
 * other candidates are dropped by this first compression: evicted. */
static void h2o_start(sift_policy_state *st, int layer, const sift_kv_mirror *m, const span *r, float scale)
{
    const bool have_obs = st->obs_n[layer] > 0;
    for (int g = 0; g < st->hkv; g++) {
        const int64_t base = ((int64_t)layer * st->hkv + g) * st->cap;
        double *acc = st->acc + base;
        uint8_t *member = st->member + base;
        memset(acc, 0, (size_t)st->cap * sizeof *acc);
        memset(member, H2O_OUT, (size_t)st->cap);
        if (have_obs) {
            observed_attention(st, layer, 0, g, m, r->n, scale, acc);
            mark_top(st, r, acc);
        } else {
            clear_marks(st, r);
            for (int64_t j = r->ce - 1; j >= r->ce - r->want; j--) st->mark[j] = 1;
        }
        for (int64_t j = r->cb; j < r->ce; j++) member[j] = st->mark[j] ? H2O_HEAVY : H2O_EVICTED;
    }
    st->started[layer] = true;
    st->c_end[layer] = r->ce;
    st->obs_fresh[layer] = 0;
}

/* Each step: candidates that entered C since the last step (they left the window) join H; while
 * |H| > k the member with the smallest acc is evicted (ties: the lower position), never to return;
 * the list is [0, S) ∪ H ∪ [N - W, N); then acc gains this step's attention over the list.
 * When |H| < min(k, |C|) the newest candidates that were never evicted fill it (only decode from the
 * start, before C reaches k, needs this). Should the budget grow after evictions so that even those
 * run out, the newest evicted ones come back: the list must hold sift_select_count positions.
 * A prefill after decode started adds its observed queries' attention to acc; its tokens then join
 * H like any others as they leave the window. A rewind without sift_policy_reset forgets the state
 * of the positions past N. */
static void choose_h2o(sift_policy_state *st, int layer, const float *q, const sift_kv_mirror *m, const span *r,
                       float scale, int32_t *lists)
{
    if (!st->started[layer]) h2o_start(st, layer, m, r, scale);
    const int64_t old_n = st->last_n[layer];
    for (int g = 0; g < st->hkv; g++) {
        const int64_t base = ((int64_t)layer * st->hkv + g) * st->cap;
        double *acc = st->acc + base;
        uint8_t *member = st->member + base;
        int32_t *out = lists + (int64_t)g * r->count;
        /* a rewind without reset: positions past N are new tokens */
        for (int64_t j = r->n; j < old_n; j++) {
            acc[j] = 0.0;
            member[j] = H2O_OUT;
        }
        /* a prefill since the last step: its observed queries' attention */
        if (st->obs_fresh[layer] > 0) {
            observed_attention(st, layer, st->obs_n[layer] - st->obs_fresh[layer], g, m, r->n, scale, st->vals);
            for (int64_t j = 0; j < r->n; j++) acc[j] += st->vals[j];
        }
        /* the candidates that left the window since the last step join H */
        for (int64_t j = max64(r->cb, min64(st->c_end[layer], r->ce)); j < r->ce; j++) {
            if (member[j] == H2O_OUT) member[j] = H2O_HEAVY;
        }
        /* evict down to k: keep the k with the largest acc, ties kept by the higher position */
        int64_t heavy = 0;
        for (int64_t j = r->cb; j < r->ce; j++) {
            if (member[j] == H2O_HEAVY) st->rank[heavy++] = (ranked){order_key(acc[j]), j};
        }
        if (heavy > r->want) {
            select_best(st->rank, heavy, r->want, true);
            for (int64_t i = r->want; i < heavy; i++) member[st->rank[i].pos] = H2O_EVICTED;
            heavy = r->want;
        }
        /* fill a short H: the newest never-evicted candidates, then (budget grew) the newest evicted */
        for (int64_t j = r->ce - 1; j >= r->cb && heavy < r->want; j--) {
            if (member[j] == H2O_OUT) {
                member[j] = H2O_HEAVY;
                heavy++;
            }
        }
        for (int64_t j = r->ce - 1; j >= r->cb && heavy < r->want; j--) {
            if (member[j] == H2O_EVICTED) {
                member[j] = H2O_HEAVY;
                heavy++;
            }
        }
        for (int64_t j = r->cb; j < r->ce; j++) st->mark[j] = member[j] == H2O_HEAVY;
        emit_list(st, r, out);
        h2o_accumulate(st, q, m, g, out, r->count, scale, acc);
    }
    st->obs_fresh[layer] = 0;
    st->c_end[layer] = r->ce;
    st->last_n[layer] = r->n;
}

/* ---- decode ------------------------------------------------------------------------------------ */

sift_status sift_policy_choose(sift_policy_state *st, int layer, const float *q, const sift_kv_mirror *m,
                               const sift_select_params *sel, float scale, int32_t *lists)
{
    if (!st || !q || !m || !sel || !lists) return sift_set_error(SIFT_E_INVALID, "sift_policy_choose: null argument");
    if (layer < 0 || layer >= st->n_layers)
        return sift_set_error(SIFT_E_INVALID, "sift_policy_choose: layer %d of %d", layer, st->n_layers);
    if (!m->k || m->n_kv_heads != st->hkv || m->head_dim != st->d)
        return sift_set_error(SIFT_E_SHAPE, "sift_policy_choose: mirror of %lld KV heads of size %lld, policy of %d x %d",
                              (long long)m->n_kv_heads, (long long)m->head_dim, st->hkv, st->d);
    if (sel->n_ctx < 1 || sel->n_ctx != m->n || sel->n_ctx > st->cap || sel->n_ctx > m->cap)
        return sift_set_error(SIFT_E_SHAPE, "sift_policy_choose: N = %lld with %lld mirrored rows, capacity %lld",
                              (long long)sel->n_ctx, (long long)m->n, (long long)st->cap);
    if (sel->sink < 0 || sel->window < 0 || sel->budget < 0)
        return sift_set_error(SIFT_E_INVALID, "sift_policy_choose: negative sink %lld, window %lld or budget %lld",
                              (long long)sel->sink, (long long)sel->window, (long long)sel->budget);
    if (!isfinite(scale)) return sift_set_error(SIFT_E_INVALID, "sift_policy_choose: scale is not finite");
    const span r = make_span(sel);
    if (r.count != sift_select_count(sel))
        return sift_set_error(SIFT_E_INVALID, "sift_policy_choose: list length %lld, sift_select_count %lld",
                              (long long)r.count, (long long)sift_select_count(sel));
    switch (st->policy) {
    case SIFT_POLICY_ORACLE: choose_oracle(st, q, m, &r, scale, lists); return SIFT_OK;
    case SIFT_POLICY_QUEST: choose_quest(st, q, m, &r, lists); return SIFT_OK;
    case SIFT_POLICY_SNAPKV: return choose_snapkv(st, layer, m, &r, scale, lists);
    case SIFT_POLICY_H2O: choose_h2o(st, layer, q, m, &r, scale, lists); return SIFT_OK;
    default: return sift_set_error(SIFT_E_INVALID, "sift_policy_choose: policy '%s'", sift_policy_name(st->policy));
    }
}

/* ---- quality ----------------------------------------------------------------------------------- */

/* For each query head: the dense softmax over [0, n) gives the recall (its mass at the listed
 * positions) and o_dense; the softmax over the list gives o_sel; the error is
 * |o_sel - o_dense| / |o_dense| (Euclidean; |o_sel - o_dense| itself where o_dense is zero).
 * Listed positions outside [0, n) are ignored. Without v in the mirror only the recall is added;
 * should the scratch (n floats and 2 D doubles) not be allocatable, nothing is added and the
 * failure is recorded for sift_last_error. */
void sift_attention_quality(const float *q, int hq, const sift_kv_mirror *m, const int32_t *lists, int64_t n_lists,
                            int64_t count, float scale, double *recall_sum, double *err_sum)
{
    if (!q || !m || !m->k || !lists || !recall_sum || !err_sum || hq < 1 || count < 0) return;
    if (m->n_kv_heads < 1 || hq % m->n_kv_heads != 0 || (n_lists != 1 && n_lists != m->n_kv_heads)) return;
    const int64_t n = m->n, d = m->head_dim, group = hq / m->n_kv_heads;
    float *s = alloc_zeroed(n, sizeof(float));
    double *o_dense = alloc_zeroed(2 * d, sizeof(double));
    if (!s || !o_dense) {
        free(s);
        free(o_dense);
        sift_set_error(SIFT_E_NOMEM, "sift_attention_quality: out of memory for %lld scores", (long long)n);
        return;
    }
    double *o_sel = o_dense + d;
    for (int h = 0; h < hq; h++) {
        const int64_t g = h / group;
        const float *qh = q + (int64_t)h * d;
        const float *kg = m->k + g * m->cap * d;
        const float *vg = m->v ? m->v + g * m->cap * d : NULL;
        const int32_t *list = lists + (n_lists == 1 ? 0 : g) * count;

        /* dense: scores, their max, the softmax's sum and o_dense (unnormalised) */
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            s[j] = scale * sift_dot_f32(qh, kg + j * d, d);
            if (s[j] > mx) mx = s[j];
        }
        double sum = 0.0;
        for (int64_t i = 0; i < d; i++) o_dense[i] = 0.0;
        for (int64_t j = 0; j < n; j++) {
            const double w = exp((double)s[j] - mx);
            sum += w;
            if (vg) {
                for (int64_t i = 0; i < d; i++) o_dense[i] += w * vg[j * d + i];
            }
        }
        /* the list: its dense mass, and its own softmax's max, sum and o_sel */
        double recall = 0.0;
        float mx_sel = -INFINITY;
        for (int64_t t = 0; t < count; t++) {
            const int64_t j = list[t];
            if (j < 0 || j >= n) continue;
            recall += exp((double)s[j] - mx) / sum;
            if (s[j] > mx_sel) mx_sel = s[j];
        }
        *recall_sum += recall;
        if (!vg) continue;
        double sum_sel = 0.0;
        for (int64_t i = 0; i < d; i++) o_sel[i] = 0.0;
        for (int64_t t = 0; t < count; t++) {
            const int64_t j = list[t];
            if (j < 0 || j >= n) continue;
            const double w = exp((double)s[j] - mx_sel);
            sum_sel += w;
            for (int64_t i = 0; i < d; i++) o_sel[i] += w * vg[j * d + i];
        }
        double diff2 = 0.0, dense2 = 0.0;
        for (int64_t i = 0; i < d; i++) {
            const double od = sum > 0.0 ? o_dense[i] / sum : 0.0;
            const double os = sum_sel > 0.0 ? o_sel[i] / sum_sel : 0.0;
            diff2 += (os - od) * (os - od);
            dense2 += od * od;
        }
        *err_sum += dense2 > 0.0 ? sqrt(diff2 / dense2) : sqrt(diff2);
    }
    free(s);
    free(o_dense);
}
