/* A string -> int32 hash map over byte strings the caller keeps alive (GGUF keys, tensor names,
 * vocabularies, merges): it stores pointers, never copies, so building a map over a mapped file
 * costs one slot array. Open addressing with linear probing; the first value put for a key stays. */
#ifndef SIFT_STRMAP_H
#define SIFT_STRMAP_H

#include "sift.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sift_strmap_slot {
    const char *key; /* NULL: empty */
    size_t len;
    uint64_t hash;
    int32_t value;
} sift_strmap_slot;

typedef struct sift_strmap {
    sift_strmap_slot *slots;
    size_t mask; /* capacity - 1; capacity a power of two, at least twice the expected count */
    size_t count;
} sift_strmap;

uint64_t sift_strmap_hash(const char *key, size_t len);
/* Sizes the map for up to expected keys (it never grows: callers know their counts). */
sift_status sift_strmap_init(sift_strmap *m, size_t expected);
void sift_strmap_free(sift_strmap *m);
/* Inserts key -> value and returns 1. If the key is present, leaves the map unchanged, sets
 * *existing (if not NULL) to the value already there and returns 0. Returns -1 when the map is
 * full (more keys than it was sized for). */
int sift_strmap_put(sift_strmap *m, const char *key, size_t len, int32_t value, int32_t *existing);
/* The value of key, or -1 when absent. */
int32_t sift_strmap_get(const sift_strmap *m, const char *key, size_t len);

#endif
