/* A small GGUF writer for tests: builds files in memory, field by field, so that a test can make
 * exactly the file it needs (valid, or with one thing wrong). Header-only; every function is
 * static inline (unused ones draw no warning). Allocation failure aborts the test (it is not what these tests are about). */
#ifndef SIFT_GGUF_BUILDER_H
#define SIFT_GGUF_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gguf_builder {
    uint8_t *data;
    size_t len, cap;
} gguf_builder;

enum { GB_U8 = 0, GB_I8, GB_U16, GB_I16, GB_U32, GB_I32, GB_F32, GB_BOOL, GB_STRING, GB_ARRAY, GB_U64, GB_I64, GB_F64 };

static inline void gb_bytes(gguf_builder *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            fprintf(stderr, "gguf_builder: out of memory\n");
            exit(2);
        }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

static inline void gb_le(gguf_builder *b, uint64_t v, int size)
{
    uint8_t le[8];
    for (int i = 0; i < size; i++) le[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, le, (size_t)size);
}

static inline void gb_u32(gguf_builder *b, uint32_t v) { gb_le(b, v, 4); }
static inline void gb_u64(gguf_builder *b, uint64_t v) { gb_le(b, v, 8); }
static inline void gb_f32(gguf_builder *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    gb_u32(b, u);
}
static inline void gb_strn(gguf_builder *b, const char *s, size_t n)
{
    gb_u64(b, n);
    gb_bytes(b, s, n);
}
static inline void gb_str(gguf_builder *b, const char *s) { gb_strn(b, s, strlen(s)); }

/* Versions 2 and 3 share this layout (64-bit counts and lengths). */
static inline void gb_header_version(gguf_builder *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
static inline void gb_header(gguf_builder *b, uint64_t n_tensors, uint64_t n_kv) { gb_header_version(b, 3, n_tensors, n_kv); }

/* A key and its type; the caller writes the value. */
static inline void gb_key(gguf_builder *b, const char *key, uint32_t type)
{
    gb_str(b, key);
    gb_u32(b, type);
}

static inline void gb_kv_u32(gguf_builder *b, const char *key, uint32_t v)
{
    gb_key(b, key, GB_U32);
    gb_u32(b, v);
}
static inline void gb_kv_f32(gguf_builder *b, const char *key, float v)
{
    gb_key(b, key, GB_F32);
    gb_f32(b, v);
}
static inline void gb_kv_bool(gguf_builder *b, const char *key, int v)
{
    gb_key(b, key, GB_BOOL);
    gb_le(b, v ? 1 : 0, 1);
}
static inline void gb_kv_str(gguf_builder *b, const char *key, const char *v)
{
    gb_key(b, key, GB_STRING);
    gb_str(b, v);
}
static inline void gb_kv_strs(gguf_builder *b, const char *key, const char *const *v, size_t n)
{
    gb_key(b, key, GB_ARRAY);
    gb_u32(b, GB_STRING);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++) gb_str(b, v[i]);
}
static inline void gb_kv_i32s(gguf_builder *b, const char *key, const int32_t *v, size_t n)
{
    gb_key(b, key, GB_ARRAY);
    gb_u32(b, GB_I32);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++) gb_u32(b, (uint32_t)v[i]);
}
static inline void gb_kv_f32s(gguf_builder *b, const char *key, const float *v, size_t n)
{
    gb_key(b, key, GB_ARRAY);
    gb_u32(b, GB_F32);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++) gb_f32(b, v[i]);
}

static inline void gb_tensor_info(gguf_builder *b, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
                           uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, dims[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

static inline void gb_align(gguf_builder *b, size_t alignment)
{
    static const uint8_t zero[256] = {0};
    while (b->len % alignment) gb_bytes(b, zero, alignment - b->len % alignment > 256 ? 256 : alignment - b->len % alignment);
}

static inline void gb_free(gguf_builder *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

#endif
