/* The host-side baseline policies (engine/policy.c, SPEC §8) on hand-made cases whose answers are
 * written here, plus properties over pseudo-random runs:
 *  - oracle: keys aligned with the query at known positions; a tie; the softmax over all of [0, N)
 *    (a window key that drowns one head); one list per KV head;
 *  - quest: pages with known bounds (one reached through kmin and a negative query), the last page
 *    cut to its lowest positions, tied pages; the page metadata after single-row writes, a batch
 *    write and a rewind, and the choice after the rewind;
 *  - snapkv: only the last SIFT_POLICY_OBS prompt queries count, 7-wide pooling with ties to the
 *    lower position, the set kept over later steps, chosen again after a second prefill, the
 *    streaming fill when C outgrows the set;
 *  - h2o: a token evicted for a newcomer whose accumulated attention is larger, never returning
 *    although the oracle wants it; ties evict the lower position;
 *  - every policy: lists ascending, exactly sift_select_count long, sink and window included, all of
 *    C when |C| <= k; oracle and quest equal to a brute-force sort on data full of ties;
 *  - sift_attention_quality: recall 1 and error 0 for the full list, known values for a partial one.
 *
 *   sift-policy-test */
#include "policy.h"
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A check of host code; what is a printf format. */
#define check(ok, ...) test_check((ok), "host", __VA_ARGS__)

/* ---- helpers ----------------------------------------------------------------------------------- */

static float *key_row(sift_kv_mirror *m, int g, int64_t j) { return m->k + ((int64_t)g * m->cap + j) * m->head_dim; }
static float *val_row(sift_kv_mirror *m, int g, int64_t j) { return m->v + ((int64_t)g * m->cap + j) * m->head_dim; }

static void set4(float *dst, float a, float b, float c, float d)
{
    dst[0] = a;
    dst[1] = b;
    dst[2] = c;
    dst[3] = d;
}

static sift_select_params params(int64_t n, int64_t s, int64_t w, int64_t k)
{
    return (sift_select_params){.n_ctx = n, .sink = s, .window = w, .budget = k};
}

/* "a,b,c" of a list (for messages), truncated. */
static const char *fmt_list(const int32_t *l, int64_t n)
{
    static char buf[4][512];
    static int which;
    char *b = buf[which++ % 4];
    size_t o = 0;
    b[0] = 0;
    for (int64_t i = 0; i < n && o + 16 < sizeof buf[0]; i++)
        o += (size_t)snprintf(b + o, sizeof buf[0] - o, "%s%d", i ? "," : "", (int)l[i]);
    return b;
}

/* The list [0, s) ∪ mid ∪ [n - w, n) (mid ascending, inside C). */
static int64_t make_expected(int32_t *out, int64_t n, int64_t s, int64_t w, const int32_t *mid, int64_t n_mid)
{
    int64_t o = 0;
    for (int64_t j = 0; j < s && j < n; j++) out[o++] = (int32_t)j;
    for (int64_t i = 0; i < n_mid; i++) out[o++] = mid[i];
    for (int64_t j = n - w > s ? n - w : s; j < n; j++) out[o++] = (int32_t)j;
    return o;
}

/* Compares a list with [0, s) ∪ mid ∪ [n - w, n). */
static void expect_list(const char *what, const int32_t *got, const sift_select_params *sel, const int32_t *mid,
                        int64_t n_mid)
{
    int32_t want[1024];
    const int64_t n_want = make_expected(want, sel->n_ctx, sel->sink, sel->window, mid, n_mid);
    const int64_t count = sift_select_count(sel);
    bool ok = n_want == count && memcmp(got, want, (size_t)count * sizeof *got) == 0;
    check(ok, "%s: [%s]%s%s", what, fmt_list(got, count), ok ? "" : " expected ", ok ? "" : fmt_list(want, n_want));
}

static bool contains(const int32_t *l, int64_t n, int32_t x)
{
    for (int64_t i = 0; i < n; i++) {
        if (l[i] == x) return true;
    }
    return false;
}

/* Whether a list is well formed: ascending without repeats, sink and window in it, the rest in C,
 * and exactly min(k, |C|) from C. Returns a reason or NULL. */
static const char *list_problem(const int32_t *l, const sift_select_params *sel)
{
    const int64_t n = sel->n_ctx, count = sift_select_count(sel);
    const int64_t sink = sel->sink < n ? sel->sink : n;
    const int64_t ce = n - sel->window > sink ? n - sel->window : sink;
    const int64_t cand = ce - sink, want = sel->budget < cand ? sel->budget : cand;
    int64_t in_c = 0;
    for (int64_t i = 0; i < count; i++) {
        if (l[i] < 0 || l[i] >= n) return "position outside [0, N)";
        if (i > 0 && l[i] <= l[i - 1]) return "not strictly ascending";
        if (l[i] >= sink && l[i] < ce) in_c++;
    }
    for (int64_t j = 0; j < sink; j++) {
        if (!contains(l, count, (int32_t)j)) return "sink missing";
    }
    for (int64_t j = ce; j < n; j++) {
        if (!contains(l, count, (int32_t)j)) return "window missing";
    }
    if (in_c != want) return "not min(k, |C|) candidates";
    return NULL;
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
/* -1, 0 or 1 scaled: data full of exact ties */
static float rng_tri(void) { return (float)((int)(rng() % 3) - 1); }

/* ---- names ------------------------------------------------------------------------------------- */

static void test_names(void)
{
    bool ok = true;
    for (int p = 0; p < SIFT_POLICY_COUNT; p++) {
        sift_policy back = SIFT_POLICY_COUNT;
        ok = ok && sift_policy_parse(sift_policy_name((sift_policy)p), &back) == SIFT_OK && back == (sift_policy)p;
    }
    check(ok, "policy names: every name parses back to its policy");
    sift_policy out;
    check(sift_policy_parse("h2o", &out) == SIFT_OK && out == SIFT_POLICY_H2O &&
              sift_policy_parse("oracle", &out) == SIFT_OK && out == SIFT_POLICY_ORACLE,
          "policy names: 'h2o' and 'oracle'");
    check(sift_policy_parse("H2O-ish", &out) == SIFT_E_INVALID && sift_policy_parse(NULL, &out) == SIFT_E_INVALID,
          "policy names: unknown and null names refused");
    sift_policy_state *st = NULL;
    check(sift_policy_state_create(SIFT_POLICY_DENSE, 1, 2, 1, 4, 16, &st) == SIFT_E_INVALID && !st &&
              sift_policy_state_create(SIFT_POLICY_ORACLE, 1, 3, 2, 4, 16, &st) == SIFT_E_INVALID &&
              sift_policy_state_create(SIFT_POLICY_QUEST, 0, 2, 1, 4, 16, &st) == SIFT_E_INVALID,
          "state_create refuses a device policy, Hq not a multiple of Hkv, zero layers");
}

/* ---- oracle ------------------------------------------------------------------------------------ */

static void test_oracle(void)
{
    sift_kv_mirror m;
    sift_policy_state *st = NULL;
    int32_t lists[2 * 64];
    if (sift_kv_mirror_init(&m, 1, 4, 64, false) != SIFT_OK ||
        sift_policy_state_create(SIFT_POLICY_ORACLE, 1, 2, 1, 4, 64, &st) != SIFT_OK) {
        check(false, "oracle: setup: %s", sift_last_error());
        return;
    }
    /* N 24, S 2, W 4, k 4: C = [2, 20). scale 0.5; head 0 q = 4 e0, head 1 q = 4 e1.
     * Head 0 scores 6 at 5 and 9, 4 at 13 and 15 (a tie), 0 elsewhere; head 1 scores 6 at 7, 2 at 17.
     * Head 1's p(7) = e^6 / (e^6 + e^2 + 22) = 0.93 beats head 0's p(5) = p(9) = e^6 / (2e^6 + 2e^4 + 20)
     * = 0.44, then p(13) = p(15) = 0.06 (tie: 13) above head 1's p(17) = 0.017. */
    const float q[2 * 4] = {4, 0, 0, 0, 0, 4, 0, 0};
    set4(key_row(&m, 0, 5), 3, 0, 0, 0);
    set4(key_row(&m, 0, 9), 3, 0, 0, 0);
    set4(key_row(&m, 0, 13), 2, 0, 0, 0);
    set4(key_row(&m, 0, 15), 2, 0, 0, 0);
    set4(key_row(&m, 0, 7), 0, 3, 0, 0);
    set4(key_row(&m, 0, 17), 0, 1, 0, 0);
    sift_kv_mirror_update(&m, 0, 24);
    sift_select_params sel = params(24, 2, 4, 4);
    sift_status s = sift_policy_choose(st, 0, q, &m, &sel, 0.5f, lists);
    check(s == SIFT_OK, "oracle: choose returns OK");
    expect_list("oracle: max over the group of the softmax, tie 13/15 to 13", lists, &sel, (int32_t[]){5, 7, 9, 13}, 4);

    /* A window key at 22 scoring 20 for head 0 drowns head 0's candidates (p ~ 1e-6) under the
     * softmax over all of [0, N): head 1 decides: 7, 17, then its uniform 1 / Z ties, lowest first:
     * 2, 3. (A softmax over C alone would still pick 5 and 9.) */
    set4(key_row(&m, 0, 22), 10, 0, 0, 0);
    sift_kv_mirror_update(&m, 22, 2);
    s = sift_policy_choose(st, 0, q, &m, &sel, 0.5f, lists);
    expect_list("oracle: softmax over all of [0, N), a window key drowns head 0", lists, &sel,
                (int32_t[]){2, 3, 7, 17}, 4);
    sift_policy_state_destroy(st);
    sift_kv_mirror_free(&m);

    /* Two KV heads of one query head each: one list per KV head. */
    if (sift_kv_mirror_init(&m, 2, 4, 64, false) != SIFT_OK ||
        sift_policy_state_create(SIFT_POLICY_ORACLE, 1, 2, 2, 4, 64, &st) != SIFT_OK) {
        check(false, "oracle: setup: %s", sift_last_error());
        return;
    }
    const float q2[2 * 4] = {1, 0, 0, 0, 0, 0, 1, 0};
    for (int j = 0; j < 30; j++) set4(key_row(&m, 0, j), (float)(j % 5) * 0.1f, 0, 0, 0); /* head 0: 4, 9, 14 .. */
    set4(key_row(&m, 0, 11), 5, 0, 0, 0);
    set4(key_row(&m, 1, 3), 0, 0, 2, 0);
    set4(key_row(&m, 1, 12), 0, 0, 3, 0);
    set4(key_row(&m, 1, 21), 0, 0, 1, 0);
    set4(key_row(&m, 1, 25), 0, 0, 1, 0);
    sift_kv_mirror_update(&m, 0, 30);
    sel = params(30, 2, 4, 4); /* C = [2, 26) */
    s = sift_policy_choose(st, 0, q2, &m, &sel, 1.0f, lists);
    const int64_t count = sift_select_count(&sel);
    check(s == SIFT_OK && count == 10, "oracle: 2 KV heads, count %lld", (long long)count);
    expect_list("oracle: KV head 0 (11, then the 0.4 keys 4, 9, 14)", lists, &sel, (int32_t[]){4, 9, 11, 14}, 4);
    expect_list("oracle: KV head 1 (12, 3, then 21 and 25)", lists + count, &sel,
                (int32_t[]){3, 12, 21, 25}, 4);
    sift_policy_state_destroy(st);
    sift_kv_mirror_free(&m);
}

/* ---- quest ------------------------------------------------------------------------------------- */

/* Whether the mirror's page metadata equals the min and max over each page's valid rows. */
static bool quest_meta_exact(const sift_kv_mirror *m)
{
    const int64_t pages = m->cap / SIFT_QUEST_PAGE + 1, d = m->head_dim;
    for (int64_t g = 0; g < m->n_kv_heads; g++) {
        for (int64_t p = 0; p * SIFT_QUEST_PAGE < m->n; p++) {
            for (int64_t i = 0; i < d; i++) {
                float lo = INFINITY, hi = -INFINITY;
                for (int64_t j = p * SIFT_QUEST_PAGE; j < m->n && j < (p + 1) * SIFT_QUEST_PAGE; j++) {
                    const float x = m->k[(g * m->cap + j) * d + i];
                    if (x < lo) lo = x;
                    if (x > hi) hi = x;
                }
                if (m->kmin[(g * pages + p) * d + i] != lo || m->kmax[(g * pages + p) * d + i] != hi) return false;
            }
        }
    }
    return true;
}

static void quest_background(sift_kv_mirror *m, int g, int64_t j0, int64_t j1)
{
    for (int64_t j = j0; j < j1; j++) {
        for (int i = 0; i < 4; i++) key_row(m, g, j)[i] = 0.01f * (float)((int)((j * 7 + i * 3) % 11) - 5);
    }
}

static void test_quest(void)
{
    sift_kv_mirror m, m1;
    sift_policy_state *st = NULL;
    int32_t lists[2 * 64];
    if (sift_kv_mirror_init(&m, 1, 4, 64, false) != SIFT_OK || sift_kv_mirror_init(&m1, 1, 4, 64, false) != SIFT_OK ||
        sift_policy_state_create(SIFT_POLICY_QUEST, 1, 2, 1, 4, 64, &st) != SIFT_OK) {
        check(false, "quest: setup: %s", sift_last_error());
        return;
    }
    /* N 56 (pages 0..3, page 3 = [48, 56) partial), S 2, W 4, k 22: C = [2, 52). Background keys
     * within +-0.05. q0 = e0 reaches page 2 through K[40] = 5 e0 (bound 5); q1 = e1 - e3 reaches
     * page 1 through K[20] = 3 e1 (bound ~3.05) and page 3 through kmin: K[50] = -4 e3 (bound
     * ~4.05). Order 2, 3, 1, 0: page 2's 16 candidates, page 3's 4 (48..51), page 1 cut to 16, 17. */
    quest_background(&m, 0, 0, 56);
    set4(key_row(&m, 0, 40), 5, 0, 0, 0);
    set4(key_row(&m, 0, 20), 0, 3, 0, 0);
    set4(key_row(&m, 0, 50), 0, 0, 0, -4);
    memcpy(m1.k, m.k, (size_t)(64 * 4) * sizeof(float));
    sift_kv_mirror_update(&m, 0, 56);
    for (int64_t j = 0; j < 56; j++) sift_kv_mirror_update(&m1, j, 1);
    check(m.n == 56 && quest_meta_exact(&m), "quest mirror: one write of 56 rows, metadata = min/max of valid rows");
    check(m1.n == 56 && quest_meta_exact(&m1) &&
              memcmp(m.kmin, m1.kmin, (size_t)(5 * 4) * sizeof(float)) == 0 &&
              memcmp(m.kmax, m1.kmax, (size_t)(5 * 4) * sizeof(float)) == 0,
          "quest mirror: 56 single-row writes give the same metadata");
    const float q[2 * 4] = {1, 0, 0, 0, 0, 1, 0, -1};
    sift_select_params sel = params(56, 2, 4, 22);
    int32_t mid[32];
    int n_mid = 0;
    mid[n_mid++] = 16;
    mid[n_mid++] = 17;
    for (int j = 32; j < 52; j++) mid[n_mid++] = j;
    check(sift_policy_choose(st, 0, q, &m, &sel, 0.5f, lists) == SIFT_OK, "quest: choose returns OK");
    expect_list("quest: pages 2, 3 (kmin, negative q), then page 1 cut to its lowest 16, 17", lists, &sel, mid, n_mid);

    /* Rewind to 40: page 2 now holds rows 32..39 only, K[40] is forgotten. With k 4 and C = [2, 36)
     * page 1 (bound ~3.05) wins: 16..19 (with stale metadata page 2 would give 32..35). */
    sift_kv_mirror_update(&m, 40, 0);
    check(m.n == 40 && quest_meta_exact(&m) && m.kmax[2 * 4 + 0] < 0.06f,
          "quest mirror: rewind to 40, page 2's kmax[0] %.3f from rows 32..39 only", (double)m.kmax[2 * 4 + 0]);
    sel = params(40, 2, 4, 4);
    sift_policy_choose(st, 0, q, &m, &sel, 0.5f, lists);
    expect_list("quest: after the rewind page 1 wins", lists, &sel, (int32_t[]){16, 17, 18, 19}, 4);
    /* New rows 40..44 one at a time, K[42] = 6 e0: page 2 is back on top (C = [2, 41)): 32..35. */
    quest_background(&m, 0, 40, 45);
    set4(key_row(&m, 0, 42), 6, 0, 0, 0);
    for (int64_t j = 40; j < 45; j++) sift_kv_mirror_update(&m, j, 1);
    check(m.n == 45 && quest_meta_exact(&m) && m.kmax[2 * 4 + 0] == 6.0f,
          "quest mirror: rows 40..44 written one by one after the rewind, page 2's kmax[0] = 6");
    sel = params(45, 2, 4, 4);
    sift_policy_choose(st, 0, q, &m, &sel, 0.5f, lists);
    expect_list("quest: the new row brings page 2 back", lists, &sel, (int32_t[]){32, 33, 34, 35}, 4);
    sift_policy_state_destroy(st);
    sift_kv_mirror_free(&m);
    sift_kv_mirror_free(&m1);

    /* Ties: 2 KV heads. KV head 0: K[20] = K[36] = 2 e0, pages 1 and 2 tie: page 1, lowest four
     * 16..19. KV head 1: K[3] = K[40] = e1: pages 0 and 2 tie: page 0 from C's start: 2..5. */
    if (sift_kv_mirror_init(&m, 2, 4, 64, false) != SIFT_OK ||
        sift_policy_state_create(SIFT_POLICY_QUEST, 1, 2, 2, 4, 64, &st) != SIFT_OK) {
        check(false, "quest: setup: %s", sift_last_error());
        return;
    }
    set4(key_row(&m, 0, 20), 2, 0, 0, 0);
    set4(key_row(&m, 0, 36), 2, 0, 0, 0);
    set4(key_row(&m, 1, 3), 0, 1, 0, 0);
    set4(key_row(&m, 1, 40), 0, 1, 0, 0);
    sift_kv_mirror_update(&m, 0, 56);
    const float qt[2 * 4] = {1, 0, 0, 0, 0, 1, 0, 0};
    sel = params(56, 2, 4, 4);
    sift_policy_choose(st, 0, qt, &m, &sel, 0.5f, lists);
    expect_list("quest: KV head 0, tied pages 1 and 2: page 1", lists, &sel, (int32_t[]){16, 17, 18, 19}, 4);
    expect_list("quest: KV head 1, tied pages 0 and 2: page 0 inside C", lists + sift_select_count(&sel), &sel,
                (int32_t[]){2, 3, 4, 5}, 4);
    sift_policy_state_destroy(st);
    sift_kv_mirror_free(&m);
}

/* ---- snapkv ------------------------------------------------------------------------------------ */

/* Writes queries [t][2][4] for positions pos0.. with head 0 = a0 * e_i0, head 1 = a1 * e_i1. */
static void fill_queries(float *q, int64_t t, float a0, int i0, float a1, int i1)
{
    memset(q, 0, (size_t)(t * 8) * sizeof *q);
    for (int64_t r = 0; r < t; r++) {
        q[r * 8 + i0] = a0;
        q[r * 8 + 4 + i1] = a1;
    }
}

static void test_snapkv(void)
{
    sift_kv_mirror m;
    sift_policy_state *st = NULL;
    int32_t lists[64];
    float qs[64 * 8];
    if (sift_kv_mirror_init(&m, 1, 4, 128, false) != SIFT_OK ||
        sift_policy_state_create(SIFT_POLICY_SNAPKV, 1, 2, 1, 4, 128, &st) != SIFT_OK) {
        check(false, "snapkv: setup: %s", sift_last_error());
        return;
    }
    /* Prompt of 64, K[5] = 8 e0, K[20] = 8 e1, other keys 0; scale 0.5. Queries 0..31: both heads
     * 4 e0 (all their attention on 5 once they see it); queries 32..63: head 0 4 e1 (on 20), head 1
     * zero (uniform). Observed in chunks of 24, 24, 16: only 32..63 are kept, so a[20] ~ 32.7 leads
     * and a[5] ~ 0.7 (were 0..31 kept, a[5] ~ 54 would lead and 2..5 be chosen). Max-pooling over 7
     * gives 17..23 the value a[20]; k 4 takes the lowest of the tie: 17, 18, 19, 20. */
    set4(key_row(&m, 0, 5), 8, 0, 0, 0);
    set4(key_row(&m, 0, 20), 0, 8, 0, 0);
    sift_kv_mirror_update(&m, 0, 64);
    fill_queries(qs, 32, 4, 0, 4, 0);
    fill_queries(qs + 32 * 8, 32, 4, 1, 0, 0);
    bool ok = sift_policy_observe(st, 0, qs, 0, 24) == SIFT_OK && sift_policy_observe(st, 0, qs + 24 * 8, 24, 24) == SIFT_OK &&
              sift_policy_observe(st, 0, qs + 48 * 8, 48, 16) == SIFT_OK;
    check(ok, "snapkv: observe 64 prompt queries in chunks of 24, 24, 16");
    sift_kv_mirror_update(&m, 64, 1); /* the first decode token, key 0 */
    float qd[8];
    fill_queries(qd, 1, 4, 0, 4, 0); /* the decode query would want 5: SnapKV ignores it */
    sift_select_params sel = params(65, 2, 4, 4);
    check(sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists) == SIFT_OK, "snapkv: choose returns OK");
    expect_list("snapkv: last 32 observations, pooled over 7, ties low: 17..20", lists, &sel,
                (int32_t[]){17, 18, 19, 20}, 4);
    sel = params(66, 2, 4, 8);
    sift_kv_mirror_update(&m, 65, 1);
    fill_queries(qd, 1, 4, 1, 4, 1);
    /* k 8 at the next step: F (4 positions, chosen with k 4) plus the streaming fill 61, 60, 59, 58 */
    sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
    expect_list("snapkv: later step keeps F, budget grown: newest candidates fill", lists, &sel,
                (int32_t[]){17, 18, 19, 20, 58, 59, 60, 61}, 8);
    sel = params(67, 2, 4, 4);
    sift_kv_mirror_update(&m, 66, 1);
    sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
    expect_list("snapkv: a later step keeps F whatever the query", lists, &sel, (int32_t[]){17, 18, 19, 20}, 4);

    /* A second prefill, positions 67..98, K[70] = 8 e2, head 0 queries 4 e2, head 1 zero: the next
     * decode step chooses again from these 32: the pool around 70, lowest four: 67..70. */
    set4(key_row(&m, 0, 70), 0, 0, 8, 0);
    sift_kv_mirror_update(&m, 67, 32);
    fill_queries(qs, 32, 4, 2, 0, 0);
    check(sift_policy_observe(st, 0, qs, 67, 32) == SIFT_OK, "snapkv: observe a second prefill");
    sift_kv_mirror_update(&m, 99, 1);
    sel = params(100, 2, 4, 4);
    sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
    expect_list("snapkv: chosen again after the second prefill: 67..70", lists, &sel, (int32_t[]){67, 68, 69, 70}, 4);

    /* Reset, then a prompt of 8 (K[3] = 8 e0, queries on 3): at N 9, C = [2, 5) is all chosen (F =
     * 2, 3, 4). As C grows past k 4, F stays and the newest other candidate fills the last slot. */
    sift_policy_reset(st);
    memset(m.k, 0, (size_t)(128 * 4) * sizeof(float));
    set4(key_row(&m, 0, 3), 8, 0, 0, 0);
    sift_kv_mirror_update(&m, 0, 9);
    fill_queries(qs, 8, 4, 0, 4, 0);
    sift_policy_observe(st, 0, qs, 0, 8);
    sel = params(9, 2, 4, 4);
    sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
    expect_list("snapkv: |C| 3 <= k: all of C", lists, &sel, (int32_t[]){2, 3, 4}, 3);
    for (int64_t n = 10; n <= 12; n++) {
        sift_kv_mirror_update(&m, n - 1, 1);
        sel = params(n, 2, 4, 4);
        sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
        char what[96];
        snprintf(what, sizeof what, "snapkv: N %lld, F = 2, 3, 4 and the streaming fill %lld", (long long)n,
                 (long long)(n - 5));
        expect_list(what, lists, &sel, (int32_t[]){2, 3, 4, (int32_t)(n - 5)}, 4);
    }
    sift_policy_state_destroy(st);
    sift_kv_mirror_free(&m);
}

/* ---- h2o --------------------------------------------------------------------------------------- */

static void test_h2o(void)
{
    sift_kv_mirror m;
    sift_policy_state *st = NULL, *oracle = NULL;
    int32_t lists[64], olists[64];
    float qs[16 * 8], qd[8];
    if (sift_kv_mirror_init(&m, 1, 4, 64, false) != SIFT_OK ||
        sift_policy_state_create(SIFT_POLICY_H2O, 1, 2, 1, 4, 64, &st) != SIFT_OK ||
        sift_policy_state_create(SIFT_POLICY_ORACLE, 1, 2, 1, 4, 64, &oracle) != SIFT_OK) {
        check(false, "h2o: setup: %s", sift_last_error());
        return;
    }
    /* Prompt of 16: K[5] = 8 e0, K[8] = 8 e1, K[11] = 8 e2, K[13] = 8 e3, others 0; scale 0.5 (an
     * aligned query scores 16). Observed queries 12..15: head 0 on 5; head 1 on 8 (12..14) and on
     * 11 (15): acc ~ 5: 4, 8: 3, 11: 1. S 2, W 4, k 3. */
    set4(key_row(&m, 0, 5), 8, 0, 0, 0);
    set4(key_row(&m, 0, 8), 0, 8, 0, 0);
    set4(key_row(&m, 0, 11), 0, 0, 8, 0);
    set4(key_row(&m, 0, 13), 0, 0, 0, 8);
    sift_kv_mirror_update(&m, 0, 17);
    fill_queries(qs, 3, 4, 0, 4, 1);
    fill_queries(qs + 3 * 8, 1, 4, 0, 4, 2);
    check(sift_policy_observe(st, 0, qs, 12, 4) == SIFT_OK, "h2o: observe queries 12..15");

    /* Step 1, N 17, C = [2, 13): H = 5, 8, 11. The query (both heads 4 e3) pays ~2 to 13 (window). */
    sift_select_params sel = params(17, 2, 4, 3);
    fill_queries(qd, 1, 4, 3, 4, 3);
    check(sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists) == SIFT_OK, "h2o: choose returns OK");
    expect_list("h2o: step 1, H from the observations: 5, 8, 11", lists, &sel, (int32_t[]){5, 8, 11}, 3);

    /* Step 2, N 18: 13 leaves the window and joins with acc ~2 > acc[11] ~1: 11 is evicted. The query
     * now wants 11 (both heads 4 e2): the oracle takes it, H2O cannot. */
    sift_kv_mirror_update(&m, 17, 1);
    sel = params(18, 2, 4, 3);
    fill_queries(qd, 1, 4, 2, 4, 2);
    sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
    expect_list("h2o: step 2, 13 joins, 11 (smallest acc) evicted", lists, &sel, (int32_t[]){5, 8, 13}, 3);
    sift_policy_choose(oracle, 0, qd, &m, &sel, 0.5f, olists);
    check(contains(olists, sift_select_count(&sel), 11), "h2o: step 2, the oracle's list has 11: [%s]",
          fmt_list(olists, sift_select_count(&sel)));

    /* Steps 3..6: each newcomer (acc ~0.2 from uniform steps) is evicted in turn; 11 never returns. */
    bool never = true;
    for (int64_t n = 19; n <= 22; n++) {
        sift_kv_mirror_update(&m, n - 1, 1);
        sel = params(n, 2, 4, 3);
        sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
        sift_policy_choose(oracle, 0, qd, &m, &sel, 0.5f, olists);
        const int64_t count = sift_select_count(&sel);
        never = never && !contains(lists, count, 11) && contains(olists, count, 11);
        if (n == 22) expect_list("h2o: step 6, H = 5, 8, 13", lists, &sel, (int32_t[]){5, 8, 13}, 3);
    }
    check(never, "h2o: steps 3..6, 11 never returns though the oracle picks it every step");
    sift_policy_state_destroy(st);
    sift_policy_state_destroy(oracle);

    /* No observations, and a sink key scoring 800 so that every other token gets exactly zero
     * attention (exp(-800) = 0): H starts as the newest candidates and every eviction is a tie, which
     * evicts the lower position: H stays the newest k (evicting the higher would keep 5, 6, 7). */
    if (sift_policy_state_create(SIFT_POLICY_H2O, 1, 2, 1, 4, 64, &st) != SIFT_OK) {
        check(false, "h2o: setup: %s", sift_last_error());
        sift_kv_mirror_free(&m);
        return;
    }
    memset(m.k, 0, (size_t)(64 * 4) * sizeof(float));
    set4(key_row(&m, 0, 0), 400, 0, 0, 0);
    sift_kv_mirror_update(&m, 0, 12);
    fill_queries(qd, 1, 4, 0, 4, 0);
    sel = params(12, 2, 4, 3);
    sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
    expect_list("h2o: no observations, N 12: the newest candidates 5, 6, 7", lists, &sel, (int32_t[]){5, 6, 7}, 3);
    for (int64_t n = 13; n <= 16; n++) {
        sift_kv_mirror_update(&m, n - 1, 1);
        sel = params(n, 2, 4, 3);
        sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists);
    }
    expect_list("h2o: zero acc everywhere, ties evict the lower position: N 16 keeps 9, 10, 11", lists, &sel,
                (int32_t[]){9, 10, 11}, 3);
    sift_policy_state_destroy(st);
    sift_kv_mirror_free(&m);
}

/* ---- all policies: well-formed lists, brute force for oracle and quest ------------------------ */

static int by_value_then_pos(const void *pa, const void *pb)
{
    const double *a = pa, *b = pb; /* {value, position} */
    if (a[0] != b[0]) return a[0] > b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : a[1] > b[1];
}
static int ascending_i32(const void *pa, const void *pb)
{
    const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

/* The oracle's or Quest's list for KV head g, by a full sort. */
static void brute_force(sift_policy p, const float *q, int hq, const sift_kv_mirror *m, int g,
                        const sift_select_params *sel, float scale, int32_t *out)
{
    const int64_t n = sel->n_ctx, d = m->head_dim, group = hq / m->n_kv_heads;
    const int64_t sink = sel->sink < n ? sel->sink : n, ce = n - sel->window > sink ? n - sel->window : sink;
    const int64_t cand = ce - sink, want = sel->budget < cand ? sel->budget : cand;
    static double pairs[4096][2];
    static int32_t mid[4096];
    int64_t n_mid = 0;
    if (p == SIFT_POLICY_ORACLE) {
        for (int64_t j = sink; j < ce; j++) pairs[j - sink][0] = 0.0, pairs[j - sink][1] = (double)j;
        for (int64_t hh = 0; hh < group; hh++) {
            const float *qh = q + (g * group + hh) * d;
            float mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                float s = 0.0f;
                for (int64_t i = 0; i < d; i++) s += qh[i] * m->k[(g * m->cap + j) * d + i];
                s *= scale;
                if (s > mx) mx = s;
            }
            double sum = 0.0;
            for (int64_t j = 0; j < n; j++) {
                float s = 0.0f;
                for (int64_t i = 0; i < d; i++) s += qh[i] * m->k[(g * m->cap + j) * d + i];
                sum += exp((double)(s * scale) - mx);
            }
            for (int64_t j = sink; j < ce; j++) {
                float s = 0.0f;
                for (int64_t i = 0; i < d; i++) s += qh[i] * m->k[(g * m->cap + j) * d + i];
                const double pj = exp((double)(s * scale) - mx) / sum;
                if (pj > pairs[j - sink][0]) pairs[j - sink][0] = pj;
            }
        }
        qsort(pairs, (size_t)cand, sizeof pairs[0], by_value_then_pos);
        for (int64_t i = 0; i < want; i++) mid[n_mid++] = (int32_t)pairs[i][1];
    } else {
        const int64_t p0 = sink / SIFT_QUEST_PAGE, p1 = cand > 0 ? (ce - 1) / SIFT_QUEST_PAGE + 1 : p0;
        for (int64_t pg = p0; pg < p1; pg++) {
            float best = -INFINITY;
            for (int64_t hh = 0; hh < group; hh++) {
                const float *qh = q + (g * group + hh) * d;
                float b = 0.0f;
                for (int64_t i = 0; i < d; i++) {
                    float lo = INFINITY, hi = -INFINITY;
                    for (int64_t j = pg * SIFT_QUEST_PAGE; j < n && j < (pg + 1) * SIFT_QUEST_PAGE; j++) {
                        const float x = m->k[(g * m->cap + j) * d + i];
                        lo = x < lo ? x : lo;
                        hi = x > hi ? x : hi;
                    }
                    b += qh[i] * hi > qh[i] * lo ? qh[i] * hi : qh[i] * lo;
                }
                if (hh == 0 || b > best) best = b;
            }
            pairs[pg - p0][0] = best;
            pairs[pg - p0][1] = (double)pg;
        }
        qsort(pairs, (size_t)(p1 - p0), sizeof pairs[0], by_value_then_pos);
        for (int64_t i = 0; i < p1 - p0 && n_mid < want; i++) {
            const int64_t pg = (int64_t)pairs[i][1];
            for (int64_t j = pg * SIFT_QUEST_PAGE; j < (pg + 1) * SIFT_QUEST_PAGE && n_mid < want; j++) {
                if (j >= sink && j < ce) mid[n_mid++] = (int32_t)j;
            }
        }
    }
    qsort(mid, (size_t)n_mid, sizeof mid[0], ascending_i32);
    make_expected(out, n, sel->sink, sel->window, mid, n_mid);
}

static void test_all_policies(void)
{
    enum { L = 2, HQ = 4, HKV = 2, D = 8, CAP = 400, PROMPT = 150, STEPS = 60 };
    const sift_policy pols[4] = {SIFT_POLICY_ORACLE, SIFT_POLICY_QUEST, SIFT_POLICY_SNAPKV, SIFT_POLICY_H2O};
    const int64_t shapes[5][3] = {{2, 4, 4}, {16, 32, 20}, {0, 8, 37}, {4, 0, 9}, {3, 5, 0}}; /* S, W, k */
    static int32_t lists[HKV * CAP], want[CAP];
    static float qs[PROMPT * HQ * D], qd[HQ * D];
    for (int pi = 0; pi < 4; pi++) {
        const sift_policy p = pols[pi];
        for (int sh = 0; sh < 5; sh++) {
            sift_kv_mirror m[L];
            sift_policy_state *st = NULL;
            bool setup = sift_policy_state_create(p, L, HQ, HKV, D, CAP, &st) == SIFT_OK;
            for (int l = 0; l < L; l++) setup = sift_kv_mirror_init(&m[l], HKV, D, CAP, false) == SIFT_OK && setup;
            if (!setup) {
                check(false, "%s: setup: %s", sift_policy_name(p), sift_last_error());
                return;
            }
            const int64_t S = shapes[sh][0], W = shapes[sh][1], K = shapes[sh][2];
            for (int l = 0; l < L; l++) {
                for (int64_t i = 0; i < (int64_t)HKV * CAP * D; i++) m[l].k[i] = rng_tri();
                sift_kv_mirror_update(&m[l], 0, PROMPT);
                for (int64_t i = 0; i < (int64_t)PROMPT * HQ * D; i++) qs[i] = rng_tri();
                sift_policy_observe(st, l, qs, 0, PROMPT / 2);
                sift_policy_observe(st, l, qs + (PROMPT / 2) * HQ * D, PROMPT / 2, PROMPT - PROMPT / 2);
            }
            int n_lists = 0, n_brute = 0, n_bad = 0, n_brute_bad = 0, n_returned = 0, n_lost = 0;
            const char *problem = NULL;
            static uint8_t gone[L][HKV][CAP], first_set[L][HKV][CAP];
            memset(gone, 0, sizeof gone);
            memset(first_set, 0, sizeof first_set);
            for (int step = 0; step < STEPS; step++) {
                const int64_t n = PROMPT + 1 + step;
                const sift_select_params sel = params(n, S, W, K);
                const int64_t count = sift_select_count(&sel);
                const int64_t sink = S < n ? S : n, ce = n - W > sink ? n - W : sink;
                for (int l = 0; l < L; l++) {
                    sift_kv_mirror_update(&m[l], n - 1, 1);
                    for (int i = 0; i < HQ * D; i++) qd[i] = rng_tri();
                    if (sift_policy_choose(st, l, qd, &m[l], &sel, 0.5f, lists) != SIFT_OK) {
                        n_bad++;
                        problem = sift_last_error();
                        continue;
                    }
                    for (int g = 0; g < HKV; g++) {
                        const int32_t *list = lists + g * count;
                        const char *why = list_problem(list, &sel);
                        n_lists++;
                        if (why) n_bad++, problem = why;
                        if (p == SIFT_POLICY_ORACLE || p == SIFT_POLICY_QUEST) {
                            brute_force(p, qd, HQ, &m[l], g, &sel, 0.5f, want);
                            n_brute++;
                            if (memcmp(list, want, (size_t)count * sizeof *list) != 0) n_brute_bad++;
                        }
                        for (int64_t j = sink; j < ce; j++) {
                            const bool in = contains(list, count, (int32_t)j);
                            if (p == SIFT_POLICY_H2O) {
                                /* evicted: a candidate once left out never comes back */
                                if (in && gone[l][g][j]) n_returned++;
                                if (!in) gone[l][g][j] = 1;
                            }
                            if (p == SIFT_POLICY_SNAPKV) {
                                /* F stays: the first step's choice is in every later list */
                                if (step == 0 && in) first_set[l][g][j] = 1;
                                if (first_set[l][g][j] && !in) n_lost++;
                            }
                        }
                    }
                }
            }
            char what[64];
            snprintf(what, sizeof what, "%s S %lld W %lld k %lld", sift_policy_name(p), (long long)S, (long long)W,
                     (long long)K);
            check(n_bad == 0, "%s: %d lists ascending, exact length, sink and window, min(k, |C|) from C%s%s", what,
                  n_lists, problem ? ": " : "", problem ? problem : "");
            if (p == SIFT_POLICY_ORACLE || p == SIFT_POLICY_QUEST)
                check(n_brute_bad == 0, "%s: %d lists equal to a brute-force full sort (data of -1/0/1: many ties), %d differ",
                      what, n_brute, n_brute_bad);
            if (p == SIFT_POLICY_H2O)
                check(n_returned == 0, "%s: no candidate left out of H ever returns (%d did)", what, n_returned);
            if (p == SIFT_POLICY_SNAPKV)
                check(n_lost == 0, "%s: the first step's set stays in every later list (%d misses)", what, n_lost);
            sift_policy_state_destroy(st);
            for (int l = 0; l < L; l++) sift_kv_mirror_free(&m[l]);
        }

        /* Small N: N < S, N <= S + W, |C| <= k: the list is all of [0, N). */
        sift_kv_mirror m;
        sift_policy_state *st = NULL;
        if (sift_policy_state_create(p, 1, HQ, HKV, D, 64, &st) != SIFT_OK || sift_kv_mirror_init(&m, HKV, D, 64, false) != SIFT_OK) {
            check(false, "%s: setup: %s", sift_policy_name(p), sift_last_error());
            return;
        }
        for (int64_t i = 0; i < HKV * 64 * D; i++) m.k[i] = rng_tri();
        bool all = true;
        for (int64_t n = 1; n <= 10; n++) {
            sift_kv_mirror_update(&m, n - 1, 1);
            const sift_select_params sel = params(n, 2, 4, 4); /* |C| = N - 6 <= 4 */
            const int64_t count = sift_select_count(&sel);
            all = all && count == n && sift_policy_choose(st, 0, qd, &m, &sel, 0.5f, lists) == SIFT_OK;
            for (int g = 0; g < HKV && all; g++) {
                for (int64_t j = 0; j < n; j++) all = all && lists[g * count + j] == (int32_t)j;
            }
        }
        check(all, "%s: N 1..10 with S 2, W 4, k 4 (N < S, N <= S + W, |C| <= k): every list is [0, N)",
              sift_policy_name(p));
        sift_select_params bad = params(11, 2, 4, 4);
        check(sift_policy_choose(st, 0, qd, &m, &bad, 0.5f, lists) == SIFT_E_SHAPE,
              "%s: N different from the mirror's rows refused", sift_policy_name(p));
        sift_policy_state_destroy(st);
        sift_kv_mirror_free(&m);
    }
}

/* ---- attention quality ------------------------------------------------------------------------- */

static void test_quality(void)
{
    sift_kv_mirror m;
    if (sift_kv_mirror_init(&m, 2, 4, 16, true) != SIFT_OK) {
        check(false, "quality: setup: %s", sift_last_error());
        return;
    }
    /* Both KV heads: N 8, q = e0, scale 1, K[j] = ln(w_j) e0 with w = 1 except w_2 = 3: the dense
     * softmax is 0.3 at 2 and 0.1 elsewhere. V[2] = e0, other V = e1: o_dense = (0.3, 0.7). The list
     * {2, 5} recalls 0.4 and gives o_sel = (0.75, 0.25): error |(0.45, -0.45)| / |(0.3, 0.7)|. */
    for (int g = 0; g < 2; g++) {
        for (int j = 0; j < 8; j++) {
            set4(key_row(&m, g, j), j == 2 ? logf(3.0f) : 0.0f, 0, 0, 0);
            set4(val_row(&m, g, j), j == 2 ? 1.0f : 0.0f, j == 2 ? 0.0f : 1.0f, 0, 0);
        }
    }
    sift_kv_mirror_update(&m, 0, 8);
    const float q[2 * 4] = {1, 0, 0, 0, 1, 0, 0, 0};
    int32_t full[8], lists[2 * 8];
    for (int j = 0; j < 8; j++) full[j] = j;
    double recall = 0.0, err = 0.0;
    sift_attention_quality(q, 2, &m, full, 1, 8, 1.0f, &recall, &err);
    check(fabs(recall - 2.0) < 1e-9 && err < 1e-7, "quality: full list, 2 heads: recall sum %.9f (2), error sum %.2e (0)",
          recall, err);
    const double want_err = sqrt(2 * 0.45 * 0.45) / sqrt(0.3 * 0.3 + 0.7 * 0.7);
    recall = err = 0.0;
    const int32_t part[2] = {2, 5};
    sift_attention_quality(q, 2, &m, part, 1, 2, 1.0f, &recall, &err);
    check(fabs(recall - 0.8) < 1e-6 && fabs(err - 2 * want_err) < 1e-6,
          "quality: list {2, 5} for 2 heads: recall sum %.6f (0.8), error sum %.6f (2 x %.6f)", recall, err, want_err);
    /* one list per KV head, {0, 1} for KV head 0 and {2, 5} for KV head 1: recalls 0.2 and 0.4 */
    lists[0] = 0, lists[1] = 1, lists[2] = 2, lists[3] = 5;
    recall = err = 0.0;
    sift_attention_quality(q, 2, &m, lists, 2, 2, 1.0f, &recall, &err);
    check(fabs(recall - 0.6) < 1e-6, "quality: one list per KV head ({0, 1} and {2, 5}): recall sum %.6f (0.6)", recall);
    /* adding accumulates */
    sift_attention_quality(q, 2, &m, part, 1, 2, 1.0f, &recall, &err);
    check(fabs(recall - 1.4) < 1e-6, "quality: sums accumulate across calls: %.6f (1.4)", recall);
    /* Hq not a multiple of Hkv: nothing is added */
    sift_attention_quality(q, 1, &m, part, 1, 2, 1.0f, &recall, &err);
    check(fabs(recall - 1.4) < 1e-6, "quality: Hq 1 over 2 KV heads adds nothing: %.6f (1.4)", recall);
    sift_kv_mirror_free(&m);
}

int main(void)
{
    test_case_begin("names", "host");
    test_names();
    test_case_begin("oracle", "host");
    test_oracle();
    test_case_begin("quest", "host");
    test_quest();
    test_case_begin("snapkv", "host");
    test_snapkv();
    test_case_begin("h2o", "host");
    test_h2o();
    test_case_begin("all_policies", "host");
    test_all_policies();
    test_case_begin("quality", "host");
    test_quality();
    return test_summary("policy", "host");
}
