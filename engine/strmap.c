/* String hash map: see strmap.h. */
#include "strmap.h"

#include "backend.h"

#include <stdlib.h>
#include <string.h>

uint64_t sift_strmap_hash(const char *key, size_t len)
{
    /* FNV-1a: simple, and good enough for identifiers and token strings. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

sift_status sift_strmap_init(sift_strmap *m, size_t expected)
{
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
    size_t cap = 16;
    while (cap / 2 < expected) {
        if (cap > SIZE_MAX / 2 / sizeof(sift_strmap_slot))
            return sift_set_error(SIFT_E_NOMEM, "string map for %zu keys is too large", expected);
        cap *= 2;
    }
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return sift_set_error(SIFT_E_NOMEM, "out of memory for a string map of %zu keys", expected);
    m->mask = cap - 1;
    return SIFT_OK;
}

void sift_strmap_free(sift_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
}

static bool slot_matches(const sift_strmap_slot *s, const char *key, size_t len, uint64_t hash)
{
    return s->hash == hash && s->len == len && (len == 0 || memcmp(s->key, key, len) == 0);
}

int sift_strmap_put(sift_strmap *m, const char *key, size_t len, int32_t value, int32_t *existing)
{
    if (!m->slots || m->count >= m->mask) return -1; /* keep one empty slot so probes end */
    const uint64_t h = sift_strmap_hash(key, len);
    /* An empty key must still mark its slot as used: point it at a static byte. */
    const char *stored = len ? key : "";
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        sift_strmap_slot *s = &m->slots[i];
        if (!s->key) {
            s->key = stored;
            s->len = len;
            s->hash = h;
            s->value = value;
            m->count++;
            return 1;
        }
        if (slot_matches(s, key, len, h)) {
            if (existing) *existing = s->value;
            return 0;
        }
    }
}

int32_t sift_strmap_get(const sift_strmap *m, const char *key, size_t len)
{
    if (!m->slots) return -1;
    const uint64_t h = sift_strmap_hash(key, len);
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        const sift_strmap_slot *s = &m->slots[i];
        if (!s->key) return -1;
        if (slot_matches(s, key, len, h)) return s->value;
    }
}
