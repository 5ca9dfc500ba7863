/* GGUF v2/v3 reader: see gguf.h for the format and the error conventions.
 *
 * Every read goes through a cursor that checks the bytes exist first, and every count read from
 * the file is bounded by the bytes left before anything is allocated for it (each element of the
 * thing counted occupies at least a known number of bytes), so memory use stays proportional to
 * the file's size whatever its counts claim. */
#include "gguf.h"

#include "backend.h"
#include "strmap.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct sift_gguf {
    const uint8_t *base;
    uint64_t size;
    void *map; /* the mmap'ed region (NULL for memory buffers) */
    size_t map_size;
    char label[256];
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    sift_gguf_kv *kvs;
    uint64_t n_tensors;
    sift_gguf_tensor *tensors;
    uint64_t data_offset;
    sift_strmap key_map;    /* key -> index into kvs */
    sift_strmap tensor_map; /* name -> index into tensors */
};

/* A file's string as messages show it (printed with %s): see sift_gguf_str_shown. The buffer is
 * a compound literal, alive until the end of the enclosing block, so past the fail() call. */
#define SHOWN_BUF 100
#define SHOW(s) sift_gguf_str_shown((s), (char[SHOWN_BUF]){0}, SHOWN_BUF)

/* Records "<label>: <message>" and returns s. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static sift_status fail(const sift_gguf *g, sift_status s, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sift_set_error(s, "%s: %s", g->label, msg);
}

const char *sift_gguf_str_shown(sift_gguf_str s, char *buf, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    if (cap == 0) return "";
    for (uint64_t i = 0; i < s.len; i++) {
        const unsigned char c = (unsigned char)s.ptr[i];
        const size_t need = (c < 0x20 || c >= 0x7f || c == '\\') ? 4 : 1;
        if (n + need + 4 > cap) { /* room for "..." and the NUL */
            memcpy(buf + n, "...", 3);
            n += 3;
            break;
        }
        if (need == 4) {
            buf[n++] = '\\', buf[n++] = 'x', buf[n++] = hex[c >> 4], buf[n++] = hex[c & 15];
        } else {
            buf[n++] = (char)c;
        }
    }
    buf[n] = 0;
    return buf;
}

/* ---- little-endian reads (byte by byte: file data is unaligned, and the host may not be LE) --- */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32); }
static float lef32(const uint8_t *p)
{
    uint32_t u = le32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double lef64(const uint8_t *p)
{
    uint64_t u = le64(p);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

typedef struct cursor {
    const sift_gguf *g;
    uint64_t pos;
} cursor;

static uint64_t left(const cursor *c) { return c->g->size - c->pos; }

static sift_status need(cursor *c, uint64_t n, const char *what)
{
    if (n > left(c))
        return fail(c->g, SIFT_E_INVALID, "truncated: %s needs %llu bytes at offset %llu, but the file ends at %llu",
                    what, (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)c->g->size);
    return SIFT_OK;
}

static sift_status read_u32(cursor *c, uint32_t *v, const char *what)
{
    sift_status s = need(c, 4, what);
    if (s != SIFT_OK) return s;
    *v = le32(c->g->base + c->pos);
    c->pos += 4;
    return SIFT_OK;
}

static sift_status read_u64(cursor *c, uint64_t *v, const char *what)
{
    sift_status s = need(c, 8, what);
    if (s != SIFT_OK) return s;
    *v = le64(c->g->base + c->pos);
    c->pos += 8;
    return SIFT_OK;
}

static sift_status read_str(cursor *c, sift_gguf_str *str, const char *what)
{
    uint64_t len;
    sift_status s = read_u64(c, &len, what);
    if (s != SIFT_OK) return s;
    if (len > left(c))
        return fail(c->g, SIFT_E_INVALID, "%s: string of %llu bytes at offset %llu runs past the end of the file (%llu)",
                    what, (unsigned long long)len, (unsigned long long)c->pos, (unsigned long long)c->g->size);
    str->ptr = (const char *)c->g->base + c->pos;
    str->len = len;
    c->pos += len;
    return SIFT_OK;
}

/* ---- types ------------------------------------------------------------------------------------ */

static size_t scalar_size(sift_gguf_value_type t)
{
    switch (t) {
    case SIFT_GGUF_U8: case SIFT_GGUF_I8: case SIFT_GGUF_BOOL: return 1;
    case SIFT_GGUF_U16: case SIFT_GGUF_I16: return 2;
    case SIFT_GGUF_U32: case SIFT_GGUF_I32: case SIFT_GGUF_F32: return 4;
    case SIFT_GGUF_U64: case SIFT_GGUF_I64: case SIFT_GGUF_F64: return 8;
    default: return 0; /* STRING, ARRAY: variable */
    }
}

const char *sift_gguf_value_type_name(sift_gguf_value_type t)
{
    static const char *const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < SIFT_GGUF_VALUE_TYPE_COUNT ? names[t] : "unknown";
}

/* ggml's type names by id, so that a refusal can say which type a file uses. */
static const char *const ggml_type_names[] = {
    "F32", "F16", "Q4_0", "Q4_1", "Q4_2 (removed)", "Q4_3 (removed)", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
    "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
    "BF16", "Q4_0_4_4 (removed)", "Q4_0_4_8 (removed)", "Q4_0_8_8 (removed)", "TQ1_0", "TQ2_0",
    "IQ4_NL_4_4 (removed)", "IQ4_NL_4_8 (removed)", "IQ4_NL_8_8 (removed)", "MXFP4"};

const char *sift_gguf_tensor_type_name(uint32_t type)
{
    return type < sizeof ggml_type_names / sizeof ggml_type_names[0] ? ggml_type_names[type] : "unknown";
}

bool sift_gguf_tensor_type_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes)
{
    uint32_t e, b;
    switch (type) {
    case SIFT_GGUF_TENSOR_F32: e = 1, b = 4; break;
    case SIFT_GGUF_TENSOR_F16: e = 1, b = 2; break;
    case SIFT_GGUF_TENSOR_BF16: e = 1, b = 2; break;
    case SIFT_GGUF_TENSOR_Q8_0: e = 32, b = 2 + 32; break;  /* f16 scale + 32 int8 */
    case SIFT_GGUF_TENSOR_Q4_0: e = 32, b = 2 + 16; break;  /* f16 scale + 32 nibbles */
    case SIFT_GGUF_TENSOR_Q4_K: e = 256, b = 144; break;    /* quant.h has the K-quant layouts */
    case SIFT_GGUF_TENSOR_Q5_K: e = 256, b = 176; break;
    case SIFT_GGUF_TENSOR_Q6_K: e = 256, b = 210; break;
    default: return false;
    }
    if (block_elems) *block_elems = e;
    if (block_bytes) *block_bytes = b;
    return true;
}

/* ---- parsing ---------------------------------------------------------------------------------- */

static sift_status parse_kv(cursor *c, sift_gguf *g, uint64_t i)
{
    sift_gguf_kv *kv = &g->kvs[i];
    char what[64];
    snprintf(what, sizeof what, "metadata key #%llu", (unsigned long long)i);
    sift_status s = read_str(c, &kv->key, what);
    if (s != SIFT_OK) return s;
    int32_t first = -1;
    int put = sift_strmap_put(&g->key_map, kv->key.ptr, (size_t)kv->key.len, (int32_t)i, &first);
    if (put == 0)
        return fail(g, SIFT_E_INVALID, "metadata key '%s' appears twice (#%d and #%llu)", SHOW(kv->key), (int)first,
                    (unsigned long long)i);
    if (put < 0) return fail(g, SIFT_E_INVALID, "internal: metadata key map full");

    uint32_t type;
    s = read_u32(c, &type, "metadata value type");
    if (s != SIFT_OK) return s;
    if (type >= SIFT_GGUF_VALUE_TYPE_COUNT)
        return fail(g, SIFT_E_INVALID, "metadata '%s' has unknown value type %u", SHOW(kv->key), type);
    kv->type = (sift_gguf_value_type)type;
    kv->data = g->base + c->pos;

    if (type == SIFT_GGUF_STRING) return read_str(c, &kv->str, "metadata string value");
    if (type != SIFT_GGUF_ARRAY) {
        s = need(c, scalar_size(kv->type), "metadata value");
        if (s == SIFT_OK) c->pos += scalar_size(kv->type);
        return s;
    }

    uint32_t elem;
    s = read_u32(c, &elem, "array element type");
    if (s != SIFT_OK) return s;
    if (elem == SIFT_GGUF_ARRAY)
        return fail(g, SIFT_E_INVALID, "metadata '%s' is an array of arrays, which sift does not read", SHOW(kv->key));
    if (elem >= SIFT_GGUF_VALUE_TYPE_COUNT)
        return fail(g, SIFT_E_INVALID, "metadata array '%s' has unknown element type %u", SHOW(kv->key), elem);
    kv->elem_type = (sift_gguf_value_type)elem;
    s = read_u64(c, &kv->count, "array length");
    if (s != SIFT_OK) return s;
    kv->data = g->base + c->pos;
    /* Each element takes at least its scalar size, or the 8-byte length of a string. */
    const uint64_t min_elem = elem == SIFT_GGUF_STRING ? 8 : scalar_size(kv->elem_type);
    if (kv->count > left(c) / min_elem)
        return fail(g, SIFT_E_INVALID,
                    "metadata array '%s' claims %llu elements of %s, more than the %llu bytes left in the file hold",
                    SHOW(kv->key), (unsigned long long)kv->count, sift_gguf_value_type_name(kv->elem_type),
                    (unsigned long long)left(c));
    if (elem != SIFT_GGUF_STRING) {
        c->pos += kv->count * min_elem;
        return SIFT_OK;
    }
    if (kv->count > SIZE_MAX / sizeof(sift_gguf_str))
        return fail(g, SIFT_E_NOMEM, "%llu strings do not fit the address space", (unsigned long long)kv->count);
    sift_gguf_str *strs = malloc((size_t)(kv->count ? kv->count : 1) * sizeof *strs);
    if (!strs) return fail(g, SIFT_E_NOMEM, "out of memory for %llu strings", (unsigned long long)kv->count);
    kv->strs = strs;
    for (uint64_t j = 0; j < kv->count; j++) {
        s = read_str(c, &strs[j], "string array element");
        if (s != SIFT_OK) return s;
    }
    return SIFT_OK;
}

static sift_status parse_tensor_info(cursor *c, sift_gguf *g, uint64_t i)
{
    sift_gguf_tensor *t = &g->tensors[i];
    char what[64];
    snprintf(what, sizeof what, "tensor #%llu name", (unsigned long long)i);
    sift_status s = read_str(c, &t->name, what);
    if (s != SIFT_OK) return s;
    int32_t first = -1;
    int put = sift_strmap_put(&g->tensor_map, t->name.ptr, (size_t)t->name.len, (int32_t)i, &first);
    if (put == 0)
        return fail(g, SIFT_E_INVALID, "tensor name '%s' appears twice (#%d and #%llu)", SHOW(t->name), (int)first,
                    (unsigned long long)i);
    if (put < 0) return fail(g, SIFT_E_INVALID, "internal: tensor map full");

    s = read_u32(c, &t->n_dims, "tensor dimension count");
    if (s != SIFT_OK) return s;
    if (t->n_dims > SIFT_GGUF_MAX_DIMS)
        return fail(g, SIFT_E_INVALID, "tensor '%s' has %u dimensions (at most %d)", SHOW(t->name), t->n_dims,
                    SIFT_GGUF_MAX_DIMS);
    /* ggml holds dimensions and element counts in int64. The bound is on the product of the
     * nonzero dimensions (span), not only on the count: a zero dimension makes the count 0, but a
     * reader still multiplies the other dimensions into strides, and those must fit too. */
    uint64_t span = 1;
    bool empty = false;
    for (int d = 0; d < SIFT_GGUF_MAX_DIMS; d++) t->dims[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        s = read_u64(c, &t->dims[d], "tensor dimension");
        if (s != SIFT_OK) return s;
        if (t->dims[d] > (uint64_t)INT64_MAX || (t->dims[d] != 0 && span > (uint64_t)INT64_MAX / t->dims[d]))
            return fail(g, SIFT_E_INVALID, "tensor '%s': element count overflows at dimension %u (%llu)", SHOW(t->name),
                        d, (unsigned long long)t->dims[d]);
        if (t->dims[d] == 0) empty = true;
        else span *= t->dims[d];
    }
    t->n_elements = empty ? 0 : span;

    uint32_t type;
    s = read_u32(c, &type, "tensor type");
    if (s != SIFT_OK) return s;
    uint32_t block_elems, block_bytes;
    if (!sift_gguf_tensor_type_block(type, &block_elems, &block_bytes))
        return fail(g, SIFT_E_DTYPE, "tensor '%s' has type %s (id %u), which sift does not read (it reads F32, F16, "
                    "BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)", SHOW(t->name), sift_gguf_tensor_type_name(type), type);
    t->type = (sift_gguf_tensor_type)type;
    if (t->dims[0] % block_elems != 0)
        return fail(g, SIFT_E_INVALID, "tensor '%s': rows of %llu elements are not whole %s blocks of %u", SHOW(t->name),
                    (unsigned long long)t->dims[0], sift_gguf_tensor_type_name(type), block_elems);
    /* The byte size is not bounded by the element count: F32 takes 4 bytes an element, so 2^62
     * elements would wrap to 0 bytes in u64 and pass the fits-in-file check. So each byte product
     * is checked as it is formed, a row first, then the rows of each further dimension, against
     * INT64_MAX (ggml's size type, and an offset any pointer into the mapping can take); zero
     * dimensions are skipped as above so that an empty tensor's strides fit as well. */
    if (t->dims[0] / block_elems > (uint64_t)INT64_MAX / block_bytes)
        return fail(g, SIFT_E_INVALID, "tensor '%s': byte size overflows: a row of %llu %s elements takes more than "
                    "2^63 bytes", SHOW(t->name), (unsigned long long)t->dims[0], sift_gguf_tensor_type_name(type));
    uint64_t span_bytes = t->dims[0] / block_elems * block_bytes;
    /* Rows of 0 bytes make every stride 0: only the element count, checked above, bounds them. */
    for (uint32_t d = 1; d < t->n_dims && span_bytes != 0; d++) {
        if (t->dims[d] == 0) continue;
        if (span_bytes > (uint64_t)INT64_MAX / t->dims[d])
            return fail(g, SIFT_E_INVALID, "tensor '%s': byte size overflows at dimension %u (%llu x %llu bytes of %s)",
                        SHOW(t->name), d, (unsigned long long)t->dims[d], (unsigned long long)span_bytes,
                        sift_gguf_tensor_type_name(type));
        span_bytes *= t->dims[d];
    }
    t->nbytes = empty ? 0 : span_bytes;

    s = read_u64(c, &t->offset, "tensor offset");
    if (s != SIFT_OK) return s;
    if (t->offset % g->alignment != 0)
        return fail(g, SIFT_E_INVALID, "tensor '%s': offset %llu is not a multiple of the alignment %u", SHOW(t->name),
                    (unsigned long long)t->offset, g->alignment);
    return SIFT_OK;
}

typedef struct extent {
    uint64_t offset, nbytes, index;
} extent;

static int extent_cmp(const void *a, const void *b)
{
    const extent *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Places each tensor in the data section and refuses data past the end or shared by two tensors. */
static sift_status place_tensors(sift_gguf *g)
{
    const uint64_t data_size = g->size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sift_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return fail(g, SIFT_E_INVALID,
                        "tensor '%s': %llu bytes at data offset %llu run past the end of the file (data section "
                        "of %llu bytes at file offset %llu)",
                        SHOW(t->name), (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                        (unsigned long long)data_size, (unsigned long long)g->data_offset);
        t->data = g->base + g->data_offset + t->offset;
    }
    if (g->n_tensors < 2) return SIFT_OK;
    extent *ex = malloc((size_t)g->n_tensors * sizeof *ex);
    if (!ex) return fail(g, SIFT_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++) ex[i] = (extent){g->tensors[i].offset, g->tensors[i].nbytes, i};
    qsort(ex, (size_t)g->n_tensors, sizeof *ex, extent_cmp);
    sift_status s = SIFT_OK;
    uint64_t end = 0, last = 0; /* the furthest end so far, and the tensor it belongs to */
    for (uint64_t i = 0; i < g->n_tensors && s == SIFT_OK; i++) {
        if (ex[i].nbytes == 0) continue; /* an empty tensor shares no bytes */
        if (ex[i].offset < end)
            s = fail(g, SIFT_E_INVALID, "tensors '%s' and '%s' overlap in the data section", SHOW(g->tensors[last].name),
                     SHOW(g->tensors[ex[i].index].name));
        /* offset + nbytes <= data_size, checked in the loop above without forming the sum. */
        if (ex[i].offset + ex[i].nbytes > end) {
            end = ex[i].offset + ex[i].nbytes;
            last = ex[i].index;
        }
    }
    free(ex);
    return s;
}

static sift_status parse(sift_gguf *g)
{
    cursor c = {g, 0};
    uint32_t magic;
    sift_status s = read_u32(&c, &magic, "magic");
    if (s != SIFT_OK) return s;
    if (memcmp(g->base, "GGUF", 4) != 0)
        return fail(g, SIFT_E_INVALID, "not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")", g->base[0],
                    g->base[1], g->base[2], g->base[3]);
    s = read_u32(&c, &g->version, "version");
    if (s != SIFT_OK) return s;
    /* Version 2 moved counts and lengths from 32 to 64 bits; version 3 added big-endian files
     * (whose version reads byte-swapped here) and changed nothing else, so 2 and 3 parse alike. */
    if (g->version < SIFT_GGUF_MIN_VERSION || g->version > SIFT_GGUF_VERSION) {
        if ((g->version & 0xffffu) == 0 && g->version != 0)
            return fail(g, SIFT_E_INVALID, "version field %u looks byte-swapped: a big-endian GGUF, which sift does not read",
                        g->version);
        if (g->version == 1)
            return fail(g, SIFT_E_INVALID, "GGUF version 1 (32-bit counts and lengths), sift reads versions %d and %d: "
                        "convert the file again with a current llama.cpp", SIFT_GGUF_MIN_VERSION, SIFT_GGUF_VERSION);
        return fail(g, SIFT_E_INVALID, "GGUF version %u, sift reads versions %d and %d", g->version,
                    SIFT_GGUF_MIN_VERSION, SIFT_GGUF_VERSION);
    }
    uint64_t n_tensors, n_kv;
    s = read_u64(&c, &n_tensors, "tensor count");
    if (s == SIFT_OK) s = read_u64(&c, &n_kv, "metadata count");
    if (s != SIFT_OK) return s;

    /* A key/value pair takes at least 13 bytes (8 key length, 4 type, a 1-byte value); the
     * index maps hold int32 positions. */
    if (n_kv > left(&c) / 13 || n_kv > (uint64_t)INT32_MAX)
        return fail(g, SIFT_E_INVALID, "claims %llu metadata entries, more than the %llu bytes left in the file hold",
                    (unsigned long long)n_kv, (unsigned long long)left(&c));
    g->kvs = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->kvs);
    if (!g->kvs) return fail(g, SIFT_E_NOMEM, "out of memory for %llu metadata entries", (unsigned long long)n_kv);
    s = sift_strmap_init(&g->key_map, (size_t)n_kv);
    if (s != SIFT_OK) return s;
    for (uint64_t i = 0; i < n_kv; i++) {
        s = parse_kv(&c, g, i);
        g->n_kv = i + 1; /* the entries close must free, the failing one included */
        if (s != SIFT_OK) return s;
    }

    g->alignment = SIFT_GGUF_DEFAULT_ALIGNMENT;
    if (sift_gguf_has(g, "general.alignment")) {
        s = sift_gguf_get_u32(g, "general.alignment", &g->alignment);
        if (s != SIFT_OK) return s;
        if (g->alignment == 0 || (g->alignment & (g->alignment - 1)) != 0)
            return fail(g, SIFT_E_INVALID, "general.alignment = %u is not a power of two", g->alignment);
    }

    /* A tensor info takes at least 24 bytes (8 name length, 4 dims count, 4 type, 8 offset). */
    if (n_tensors > left(&c) / 24 || n_tensors > (uint64_t)INT32_MAX)
        return fail(g, SIFT_E_INVALID, "claims %llu tensors, more than the %llu bytes left in the file hold",
                    (unsigned long long)n_tensors, (unsigned long long)left(&c));
    g->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *g->tensors);
    if (!g->tensors) return fail(g, SIFT_E_NOMEM, "out of memory for %llu tensors", (unsigned long long)n_tensors);
    s = sift_strmap_init(&g->tensor_map, (size_t)n_tensors);
    if (s != SIFT_OK) return s;
    g->n_tensors = n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++) {
        s = parse_tensor_info(&c, g, i);
        if (s != SIFT_OK) return s;
    }

    /* c.pos <= size <= INT64_MAX (both opens refuse larger) and alignment <= 2^31: no overflow. */
    g->data_offset = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->data_offset > g->size) {
        /* A file without tensors may end without the padding. */
        if (n_tensors > 0)
            return fail(g, SIFT_E_INVALID, "truncated: the data section would start at %llu, past the end of the file (%llu)",
                        (unsigned long long)g->data_offset, (unsigned long long)g->size);
        g->data_offset = g->size;
    }
    return place_tensors(g);
}

static sift_status open_common(sift_gguf *g, sift_gguf **out)
{
    sift_status s = parse(g);
    if (s != SIFT_OK) {
        sift_gguf_close(g);
        return s;
    }
    *out = g;
    return SIFT_OK;
}

sift_status sift_gguf_open_memory(const void *data, size_t size, const char *label, sift_gguf **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return sift_set_error(SIFT_E_INVALID, "sift_gguf_open_memory: data is NULL");
    if ((uint64_t)size > (uint64_t)INT64_MAX) return sift_set_error(SIFT_E_INVALID, "sift_gguf_open_memory: size too large");
    sift_gguf *g = calloc(1, sizeof *g);
    if (!g) return sift_set_error(SIFT_E_NOMEM, "sift_gguf_open_memory: out of memory");
    snprintf(g->label, sizeof g->label, "%s", label ? label : "<memory>");
    g->base = size ? data : (const uint8_t *)"";
    g->size = size;
    return open_common(g, out);
}

sift_status sift_gguf_open_fd(int fd, uint64_t offset, uint64_t size, const char *label, sift_gguf **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_gguf_open_fd: out is NULL");
    *out = NULL;
    if (!label) label = "<file descriptor>";
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return sift_set_error(SIFT_E_INVALID, "%s: cannot stat: %s", label, fd < 0 ? "no file descriptor" : strerror(errno));
    if (!S_ISREG(st.st_mode)) return sift_set_error(SIFT_E_INVALID, "%s: not a regular file", label);
    const uint64_t file_size = (uint64_t)st.st_size;
    if (offset > file_size || (size && size > file_size - offset))
        return sift_set_error(SIFT_E_INVALID, "%s: %llu bytes at offset %llu do not lie in its %llu bytes", label,
                              (unsigned long long)size, (unsigned long long)offset, (unsigned long long)file_size);
    if (!size) size = file_size - offset;
    if (size > (uint64_t)SIZE_MAX / 2)
        return sift_set_error(SIFT_E_INVALID, "%s: %llu bytes do not fit the address space", label, (unsigned long long)size);
    sift_gguf *g = calloc(1, sizeof *g);
    if (!g) return sift_set_error(SIFT_E_NOMEM, "sift_gguf_open_fd: out of memory");
    snprintf(g->label, sizeof g->label, "%s", label);
    g->size = size;
    if (g->size == 0) {
        /* mmap refuses length 0; the parse reports the empty file as truncated. */
        g->base = (const uint8_t *)"";
    } else {
        /* the mapping starts at the page holding offset (mmap's offset is page-aligned) */
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), lead = offset % page;
        void *m = mmap(NULL, (size_t)(lead + size), PROT_READ, MAP_PRIVATE, fd, (off_t)(offset - lead));
        if (m == MAP_FAILED) {
            const int e = errno;
            free(g);
            return sift_set_error(SIFT_E_INVALID, "%s: cannot map: %s", label, strerror(e));
        }
        g->map = m;
        g->map_size = (size_t)(lead + size);
        g->base = (const uint8_t *)m + lead;
    }
    return open_common(g, out); /* the mapping keeps the file: fd may be closed */
}

sift_status sift_gguf_open_file(const char *path, sift_gguf **out)
{
    if (!out) return sift_set_error(SIFT_E_INVALID, "sift_gguf_open_file: out is NULL");
    *out = NULL;
    if (!path) return sift_set_error(SIFT_E_INVALID, "sift_gguf_open_file: path is NULL");
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sift_set_error(SIFT_E_INVALID, "%s: cannot open: %s", path, strerror(errno));
    const sift_status s = sift_gguf_open_fd(fd, 0, 0, path, out);
    close(fd);
    return s;
}

void sift_gguf_close(sift_gguf *g)
{
    if (!g) return;
    if (g->kvs)
        for (uint64_t i = 0; i < g->n_kv; i++) free((void *)g->kvs[i].strs);
    free(g->kvs);
    free(g->tensors);
    sift_strmap_free(&g->key_map);
    sift_strmap_free(&g->tensor_map);
    if (g->map) munmap(g->map, g->map_size);
    free(g);
}

uint32_t sift_gguf_version(const sift_gguf *g) { return g->version; }
uint32_t sift_gguf_alignment(const sift_gguf *g) { return g->alignment; }
uint64_t sift_gguf_file_size(const sift_gguf *g) { return g->size; }
uint64_t sift_gguf_data_offset(const sift_gguf *g) { return g->data_offset; }
const char *sift_gguf_label(const sift_gguf *g) { return g->label; }

/* ---- metadata accessors ------------------------------------------------------------------------ */

uint64_t sift_gguf_kv_count(const sift_gguf *g) { return g->n_kv; }
const sift_gguf_kv *sift_gguf_kv_at(const sift_gguf *g, uint64_t index)
{
    return index < g->n_kv ? &g->kvs[index] : NULL;
}

const sift_gguf_kv *sift_gguf_find(const sift_gguf *g, const char *key)
{
    if (!g || !key) return NULL;
    int32_t i = sift_strmap_get(&g->key_map, key, strlen(key));
    return i < 0 ? NULL : &g->kvs[i];
}

bool sift_gguf_has(const sift_gguf *g, const char *key) { return sift_gguf_find(g, key) != NULL; }

/* A key's entry, or an error naming the missing key. */
static sift_status lookup(const sift_gguf *g, const char *key, const sift_gguf_kv **kv)
{
    if (!g || !key) return sift_set_error(SIFT_E_INVALID, "gguf: null argument");
    *kv = sift_gguf_find(g, key);
    if (!*kv) return fail(g, SIFT_E_INVALID, "metadata key '%s' is missing", key);
    return SIFT_OK;
}

static sift_status wrong_type(const sift_gguf *g, const char *key, const sift_gguf_kv *kv, const char *wanted)
{
    if (kv->type == SIFT_GGUF_ARRAY)
        return fail(g, SIFT_E_DTYPE, "metadata '%s' is an array of %s, expected %s", key,
                    sift_gguf_value_type_name(kv->elem_type), wanted);
    return fail(g, SIFT_E_DTYPE, "metadata '%s' is %s, expected %s", key, sift_gguf_value_type_name(kv->type), wanted);
}

static bool is_integer_type(sift_gguf_value_type t)
{
    return t == SIFT_GGUF_U8 || t == SIFT_GGUF_I8 || t == SIFT_GGUF_U16 || t == SIFT_GGUF_I16 || t == SIFT_GGUF_U32 ||
           t == SIFT_GGUF_I32 || t == SIFT_GGUF_U64 || t == SIFT_GGUF_I64;
}

/* An integer of any width as sign + magnitude, so range checks need no wider type. */
typedef struct integer {
    bool negative;
    uint64_t magnitude;
} integer;

static bool read_integer(const uint8_t *p, sift_gguf_value_type t, integer *v)
{
    int64_t sv;
    switch (t) {
    case SIFT_GGUF_U8: *v = (integer){false, p[0]}; return true;
    case SIFT_GGUF_U16: *v = (integer){false, le16(p)}; return true;
    case SIFT_GGUF_U32: *v = (integer){false, le32(p)}; return true;
    case SIFT_GGUF_U64: *v = (integer){false, le64(p)}; return true;
    case SIFT_GGUF_I8: sv = (int8_t)p[0]; break;
    case SIFT_GGUF_I16: sv = (int16_t)le16(p); break;
    case SIFT_GGUF_I32: sv = (int32_t)le32(p); break;
    case SIFT_GGUF_I64: sv = (int64_t)le64(p); break;
    default: return false;
    }
    /* The magnitude of INT64_MIN is 2^63: computed in unsigned arithmetic. */
    *v = sv < 0 ? (integer){true, 0u - (uint64_t)sv} : (integer){false, (uint64_t)sv};
    return true;
}

static sift_status get_integer(const sift_gguf *g, const char *key, integer *v, const char *wanted)
{
    const sift_gguf_kv *kv;
    sift_status s = lookup(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (!read_integer(kv->data, kv->type, v)) return wrong_type(g, key, kv, wanted);
    return SIFT_OK;
}

static sift_status out_of_range(const sift_gguf *g, const char *key, integer v, const char *wanted)
{
    return fail(g, SIFT_E_INVALID, "metadata '%s' = %s%llu does not fit %s", key, v.negative ? "-" : "",
                (unsigned long long)v.magnitude, wanted);
}

sift_status sift_gguf_get_u32(const sift_gguf *g, const char *key, uint32_t *out)
{
    integer v;
    sift_status s = get_integer(g, key, &v, "an integer");
    if (s != SIFT_OK) return s;
    if (v.negative || v.magnitude > UINT32_MAX) return out_of_range(g, key, v, "u32");
    *out = (uint32_t)v.magnitude;
    return SIFT_OK;
}

sift_status sift_gguf_get_i32(const sift_gguf *g, const char *key, int32_t *out)
{
    integer v;
    sift_status s = get_integer(g, key, &v, "an integer");
    if (s != SIFT_OK) return s;
    if (v.magnitude > (v.negative ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX)) return out_of_range(g, key, v, "i32");
    *out = v.negative ? (int32_t)(-(int64_t)v.magnitude) : (int32_t)v.magnitude;
    return SIFT_OK;
}

sift_status sift_gguf_get_u64(const sift_gguf *g, const char *key, uint64_t *out)
{
    integer v;
    sift_status s = get_integer(g, key, &v, "an integer");
    if (s != SIFT_OK) return s;
    if (v.negative) return out_of_range(g, key, v, "u64");
    *out = v.magnitude;
    return SIFT_OK;
}

sift_status sift_gguf_get_f32(const sift_gguf *g, const char *key, float *out)
{
    const sift_gguf_kv *kv;
    sift_status s = lookup(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (kv->type == SIFT_GGUF_F32) *out = lef32(kv->data);
    else if (kv->type == SIFT_GGUF_F64) *out = (float)lef64(kv->data);
    else return wrong_type(g, key, kv, "f32");
    return SIFT_OK;
}

sift_status sift_gguf_get_bool(const sift_gguf *g, const char *key, bool *out)
{
    const sift_gguf_kv *kv;
    sift_status s = lookup(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (kv->type != SIFT_GGUF_BOOL) return wrong_type(g, key, kv, "bool");
    *out = kv->data[0] != 0;
    return SIFT_OK;
}

sift_status sift_gguf_get_string(const sift_gguf *g, const char *key, sift_gguf_str *out)
{
    const sift_gguf_kv *kv;
    sift_status s = lookup(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (kv->type != SIFT_GGUF_STRING) return wrong_type(g, key, kv, "string");
    *out = kv->str;
    return SIFT_OK;
}

bool sift_gguf_string_is(const sift_gguf *g, const char *key, const char *str)
{
    const sift_gguf_kv *kv = sift_gguf_find(g, key);
    if (!kv || kv->type != SIFT_GGUF_STRING || !str) return false;
    size_t n = strlen(str);
    return kv->str.len == n && memcmp(kv->str.ptr, str, n) == 0;
}

static sift_status get_array(const sift_gguf *g, const char *key, const sift_gguf_kv **kv)
{
    sift_status s = lookup(g, key, kv);
    if (s != SIFT_OK) return s;
    if ((*kv)->type != SIFT_GGUF_ARRAY)
        return fail(g, SIFT_E_DTYPE, "metadata '%s' is %s, expected an array", key, sift_gguf_value_type_name((*kv)->type));
    return SIFT_OK;
}

sift_status sift_gguf_get_array(const sift_gguf *g, const char *key, sift_gguf_value_type *elem_type, uint64_t *count)
{
    const sift_gguf_kv *kv;
    sift_status s = get_array(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (elem_type) *elem_type = kv->elem_type;
    if (count) *count = kv->count;
    return SIFT_OK;
}

sift_status sift_gguf_get_string_array(const sift_gguf *g, const char *key, const sift_gguf_str **strs, uint64_t *count)
{
    const sift_gguf_kv *kv;
    sift_status s = get_array(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (kv->elem_type != SIFT_GGUF_STRING) return wrong_type(g, key, kv, "an array of string");
    *strs = kv->strs;
    *count = kv->count;
    return SIFT_OK;
}

static sift_status check_count(const sift_gguf *g, const char *key, const sift_gguf_kv *kv, uint64_t count)
{
    if (kv->count != count)
        return fail(g, SIFT_E_SHAPE, "metadata array '%s' has %llu elements, expected %llu", key,
                    (unsigned long long)kv->count, (unsigned long long)count);
    return SIFT_OK;
}

sift_status sift_gguf_copy_f32_array(const sift_gguf *g, const char *key, float *dst, uint64_t count)
{
    const sift_gguf_kv *kv;
    sift_status s = get_array(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (kv->elem_type != SIFT_GGUF_F32 && kv->elem_type != SIFT_GGUF_F64)
        return wrong_type(g, key, kv, "an array of f32");
    s = check_count(g, key, kv, count);
    if (s != SIFT_OK) return s;
    for (uint64_t i = 0; i < count; i++)
        dst[i] = kv->elem_type == SIFT_GGUF_F32 ? lef32(kv->data + 4 * i) : (float)lef64(kv->data + 8 * i);
    return SIFT_OK;
}

sift_status sift_gguf_copy_i32_array(const sift_gguf *g, const char *key, int32_t *dst, uint64_t count)
{
    const sift_gguf_kv *kv;
    sift_status s = get_array(g, key, &kv);
    if (s != SIFT_OK) return s;
    if (!is_integer_type(kv->elem_type)) return wrong_type(g, key, kv, "an array of i32");
    s = check_count(g, key, kv, count);
    if (s != SIFT_OK) return s;
    const size_t size = scalar_size(kv->elem_type);
    for (uint64_t i = 0; i < count; i++) {
        integer v = {false, 0};
        read_integer(kv->data + size * i, kv->elem_type, &v);
        if (v.magnitude > (v.negative ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX))
            return fail(g, SIFT_E_INVALID, "metadata array '%s': element %llu = %s%llu does not fit i32", key,
                        (unsigned long long)i, v.negative ? "-" : "", (unsigned long long)v.magnitude);
        dst[i] = v.negative ? (int32_t)(-(int64_t)v.magnitude) : (int32_t)v.magnitude;
    }
    return SIFT_OK;
}

/* ---- tensors ------------------------------------------------------------------------------------ */

uint64_t sift_gguf_tensor_count(const sift_gguf *g) { return g->n_tensors; }
const sift_gguf_tensor *sift_gguf_tensor_at(const sift_gguf *g, uint64_t index)
{
    return index < g->n_tensors ? &g->tensors[index] : NULL;
}

const sift_gguf_tensor *sift_gguf_find_tensor(const sift_gguf *g, const char *name)
{
    if (!g || !name) return NULL;
    int32_t i = sift_strmap_get(&g->tensor_map, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- model hyper-parameters ------------------------------------------------------------------- */

typedef struct arch_keys {
    const sift_gguf *g;
    const char *arch;
    char buf[128];
} arch_keys;

/* "<arch>.<suffix>" (the buffer is reused by the next call). */
static const char *akey(arch_keys *k, const char *suffix)
{
    snprintf(k->buf, sizeof k->buf, "%s.%s", k->arch, suffix);
    return k->buf;
}

/* A u32 key that some converters store per layer: a scalar, or an array whose entries agree (sift
 * runs models whose layers share the value). */
static sift_status get_uniform_u32(const sift_gguf *g, const char *key, uint32_t *out)
{
    const sift_gguf_kv *kv = sift_gguf_find(g, key);
    if (!kv || kv->type != SIFT_GGUF_ARRAY) return sift_gguf_get_u32(g, key, out);
    if (!is_integer_type(kv->elem_type) || kv->count == 0)
        return fail(g, SIFT_E_DTYPE, "metadata '%s' is an array of %llu %s, expected an integer", key,
                    (unsigned long long)kv->count, sift_gguf_value_type_name(kv->elem_type));
    const size_t size = scalar_size(kv->elem_type);
    integer first = {false, 0}, v = {false, 0};
    read_integer(kv->data, kv->elem_type, &first);
    for (uint64_t i = 1; i < kv->count; i++) {
        read_integer(kv->data + size * i, kv->elem_type, &v);
        if (v.negative != first.negative || v.magnitude != first.magnitude)
            return fail(g, SIFT_E_INVALID, "metadata '%s' differs between layers (element %llu), which sift does not run",
                        key, (unsigned long long)i);
    }
    if (first.negative || first.magnitude > UINT32_MAX) return out_of_range(g, key, first, "u32");
    *out = (uint32_t)first.magnitude;
    return SIFT_OK;
}

static sift_status optional_u32(const sift_gguf *g, const char *key, uint32_t fallback, uint32_t *out)
{
    *out = fallback;
    return sift_gguf_has(g, key) ? get_uniform_u32(g, key, out) : SIFT_OK;
}

static sift_status optional_f32(const sift_gguf *g, const char *key, float fallback, float *out)
{
    *out = fallback;
    return sift_gguf_has(g, key) ? sift_gguf_get_f32(g, key, out) : SIFT_OK;
}

static sift_status positive(const sift_gguf *g, const char *key, uint32_t v)
{
    return v > 0 ? SIFT_OK : fail(g, SIFT_E_INVALID, "%s = 0", key);
}

static sift_status read_rope_scaling(arch_keys *k, sift_gguf_hparams *hp)
{
    const sift_gguf *g = k->g;
    sift_status s;
    hp->rope_scaling = SIFT_GGUF_ROPE_SCALING_NONE;
    hp->rope_scaling_factor = 1.0f;
    hp->rope_low_freq_factor = 1.0f;  /* Llama 3.1's values: the keys are often absent */
    hp->rope_high_freq_factor = 4.0f;
    hp->rope_original_ctx = 0;
    const char *type_key = akey(k, "rope.scaling.type");
    if (sift_gguf_has(g, type_key)) {
        sift_gguf_str t;
        s = sift_gguf_get_string(g, type_key, &t);
        if (s != SIFT_OK) return s;
        static const struct {
            const char *name;
            sift_gguf_rope_scaling kind;
        } kinds[] = {{"none", SIFT_GGUF_ROPE_SCALING_NONE},
                     {"linear", SIFT_GGUF_ROPE_SCALING_LINEAR},
                     {"yarn", SIFT_GGUF_ROPE_SCALING_YARN},
                     {"llama3", SIFT_GGUF_ROPE_SCALING_LLAMA3}};
        bool known = false;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            if (t.len == strlen(kinds[i].name) && memcmp(t.ptr, kinds[i].name, t.len) == 0) {
                hp->rope_scaling = kinds[i].kind;
                known = true;
            }
        }
        if (!known)
            return fail(g, SIFT_E_INVALID, "%s = '%s' is not a rope scaling sift knows (none, linear, yarn, llama3)",
                        type_key, SHOW(t));
    } else if (sift_gguf_has(g, akey(k, "rope.scale_linear"))) {
        /* The key older converters wrote for linear scaling. */
        s = sift_gguf_get_f32(g, k->buf, &hp->rope_scaling_factor);
        if (s != SIFT_OK) return s;
        hp->rope_scaling = SIFT_GGUF_ROPE_SCALING_LINEAR;
    }
    if ((s = optional_f32(g, akey(k, "rope.scaling.factor"), hp->rope_scaling_factor, &hp->rope_scaling_factor)) ||
        (s = optional_f32(g, akey(k, "rope.scaling.low_freq_factor"), hp->rope_low_freq_factor,
                          &hp->rope_low_freq_factor)) ||
        (s = optional_f32(g, akey(k, "rope.scaling.high_freq_factor"), hp->rope_high_freq_factor,
                          &hp->rope_high_freq_factor)) ||
        (s = optional_u32(g, akey(k, "rope.scaling.original_context_length"), 0, &hp->rope_original_ctx)))
        return s;
    if (hp->rope_scaling != SIFT_GGUF_ROPE_SCALING_NONE && !(hp->rope_scaling_factor > 0 && isfinite(hp->rope_scaling_factor)))
        return fail(g, SIFT_E_INVALID, "rope scaling factor %g is not a positive number", (double)hp->rope_scaling_factor);
    if (hp->rope_scaling == SIFT_GGUF_ROPE_SCALING_LLAMA3 &&
        !(hp->rope_low_freq_factor > 0 && hp->rope_high_freq_factor > hp->rope_low_freq_factor &&
          isfinite(hp->rope_high_freq_factor)))
        return fail(g, SIFT_E_INVALID, "llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor (got %g, %g)",
                    (double)hp->rope_low_freq_factor, (double)hp->rope_high_freq_factor);
    return SIFT_OK;
}

sift_status sift_gguf_read_hparams(const sift_gguf *g, sift_gguf_hparams *hp)
{
    if (!g || !hp) return sift_set_error(SIFT_E_INVALID, "sift_gguf_read_hparams: null argument");
    memset(hp, 0, sizeof *hp);
    sift_gguf_str arch;
    sift_status s = sift_gguf_get_string(g, "general.architecture", &arch);
    if (s != SIFT_OK) return s;
    static const struct {
        const char *name;
        sift_gguf_arch arch;
    } archs[] = {{"llama", SIFT_GGUF_ARCH_LLAMA}, {"qwen2", SIFT_GGUF_ARCH_QWEN2}, {"mistral", SIFT_GGUF_ARCH_MISTRAL}};
    bool known = false;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        if (arch.len == strlen(archs[i].name) && memcmp(arch.ptr, archs[i].name, arch.len) == 0) {
            hp->arch = archs[i].arch;
            snprintf(hp->arch_name, sizeof hp->arch_name, "%s", archs[i].name);
            known = true;
        }
    }
    if (!known)
        return fail(g, SIFT_E_INVALID, "architecture '%s' is not one sift runs (llama, qwen2, mistral)", SHOW(arch));

    arch_keys k = {g, hp->arch_name, {0}};
    if ((s = sift_gguf_get_u32(g, akey(&k, "embedding_length"), &hp->n_embd)) ||
        (s = positive(g, k.buf, hp->n_embd)) ||
        (s = sift_gguf_get_u32(g, akey(&k, "block_count"), &hp->n_layer)) ||
        (s = positive(g, k.buf, hp->n_layer)) ||
        (s = get_uniform_u32(g, akey(&k, "feed_forward_length"), &hp->n_ff)) ||
        (s = positive(g, k.buf, hp->n_ff)) ||
        (s = get_uniform_u32(g, akey(&k, "attention.head_count"), &hp->n_head)) ||
        (s = positive(g, k.buf, hp->n_head)) ||
        (s = optional_u32(g, akey(&k, "attention.head_count_kv"), hp->n_head, &hp->n_head_kv)) ||
        (s = positive(g, k.buf, hp->n_head_kv)) ||
        (s = sift_gguf_get_u32(g, akey(&k, "context_length"), &hp->n_ctx_train)) ||
        (s = positive(g, k.buf, hp->n_ctx_train)) ||
        (s = sift_gguf_get_f32(g, akey(&k, "attention.layer_norm_rms_epsilon"), &hp->rms_eps)) ||
        (s = optional_f32(g, akey(&k, "rope.freq_base"), 10000.0f, &hp->rope_freq_base)))
        return s;
    if (hp->n_head % hp->n_head_kv != 0)
        return fail(g, SIFT_E_INVALID, "%u attention heads are not a multiple of %u KV heads", hp->n_head, hp->n_head_kv);
    if (!(hp->rms_eps > 0 && isfinite(hp->rms_eps)))
        return fail(g, SIFT_E_INVALID, "RMSNorm epsilon %g is not a positive number", (double)hp->rms_eps);
    if (!(hp->rope_freq_base > 0 && isfinite(hp->rope_freq_base)))
        return fail(g, SIFT_E_INVALID, "rope freq_base %g is not a positive number", (double)hp->rope_freq_base);

    /* Without key_length the heads split the embedding evenly. */
    const char *key_length = akey(&k, "attention.key_length");
    if (sift_gguf_has(g, key_length)) {
        if ((s = sift_gguf_get_u32(g, key_length, &hp->head_dim)) || (s = positive(g, key_length, hp->head_dim))) return s;
    } else {
        if (hp->n_embd % hp->n_head != 0)
            return fail(g, SIFT_E_INVALID, "embedding length %u is not a multiple of %u heads, and %s is absent", hp->n_embd,
                        hp->n_head, key_length);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    uint32_t value_length;
    if ((s = optional_u32(g, akey(&k, "attention.value_length"), hp->head_dim, &value_length))) return s;
    if (value_length != hp->head_dim)
        return fail(g, SIFT_E_INVALID, "value heads of %u differ from key heads of %u, which sift does not run", value_length,
                    hp->head_dim);
    if ((s = optional_u32(g, akey(&k, "rope.dimension_count"), hp->head_dim, &hp->rope_dim))) return s;
    if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
        return fail(g, SIFT_E_INVALID, "rope dimension %u must be even and at most the head dimension %u", hp->rope_dim,
                    hp->head_dim);
    if ((s = read_rope_scaling(&k, hp))) return s;

    /* The vocabulary: the explicit key, else the tokenizer's list, else the embedding's rows. */
    const sift_gguf_tensor *embd = sift_gguf_find_tensor(g, "token_embd.weight");
    const char *vocab_key = akey(&k, "vocab_size");
    if (sift_gguf_has(g, vocab_key)) {
        if ((s = sift_gguf_get_u32(g, vocab_key, &hp->n_vocab))) return s;
    } else if (sift_gguf_has(g, "tokenizer.ggml.tokens")) {
        uint64_t n;
        if ((s = sift_gguf_get_array(g, "tokenizer.ggml.tokens", NULL, &n))) return s;
        if (n > UINT32_MAX) return fail(g, SIFT_E_INVALID, "%llu tokens", (unsigned long long)n);
        hp->n_vocab = (uint32_t)n;
    } else if (embd && embd->n_dims == 2 && embd->dims[1] <= UINT32_MAX) {
        hp->n_vocab = (uint32_t)embd->dims[1];
    }
    if ((s = positive(g, "vocabulary size", hp->n_vocab))) return s;
    if (!embd) return fail(g, SIFT_E_INVALID, "tensor 'token_embd.weight' is missing");
    if (embd->n_dims != 2 || embd->dims[0] != hp->n_embd || embd->dims[1] != hp->n_vocab)
        return fail(g, SIFT_E_SHAPE, "token_embd.weight is [%llu x %llu] (%u dims), expected [%u x %u]",
                    (unsigned long long)embd->dims[0], (unsigned long long)embd->dims[1], embd->n_dims, hp->n_embd,
                    hp->n_vocab);

    hp->tied_output = sift_gguf_find_tensor(g, "output.weight") == NULL;
    hp->has_rope_freqs = sift_gguf_find_tensor(g, "rope_freqs.weight") != NULL;
    hp->has_qkv_bias = sift_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    return SIFT_OK;
}
