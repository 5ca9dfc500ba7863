/* The planar row layout of q8_0 and q4_0 on the GPU backends (backend.h): conversion from and to
 * ggml's blocks, and the transfers that convert on the way. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

bool sift_dtype_is_planar(sift_dtype t) { return t == SIFT_Q8_0 || t == SIFT_Q4_0; }

/* The quant bytes of one block (q8_0: 32 int8, q4_0: 16 bytes of nibbles). */
static size_t quant_bytes(sift_dtype t) { return t == SIFT_Q8_0 ? 32 : 16; }

/* n rows of nblk ggml blocks (src) to planar rows (dst). */
static void to_planar(const unsigned char *src, unsigned char *dst, size_t n, size_t nblk, size_t qb)
{
    const size_t rb = nblk * (qb + 2);
    for (size_t r = 0; r < n; r++)
        for (size_t b = 0; b < nblk; b++) {
            const unsigned char *blk = src + r * rb + b * (qb + 2);
            memcpy(dst + r * rb + b * qb, blk + 2, qb);
            memcpy(dst + r * rb + nblk * qb + 2 * b, blk, 2);
        }
}

/* n planar rows (src) back to ggml blocks (dst). */
static void from_planar(const unsigned char *src, unsigned char *dst, size_t n, size_t nblk, size_t qb)
{
    const size_t rb = nblk * (qb + 2);
    for (size_t r = 0; r < n; r++)
        for (size_t b = 0; b < nblk; b++) {
            unsigned char *blk = dst + r * rb + b * (qb + 2);
            memcpy(blk + 2, src + r * rb + b * qb, qb);
            memcpy(blk, src + r * rb + nblk * qb + 2 * b, 2);
        }
}

sift_status sift_planar_xfer(sift_dtype t, int64_t row_values, size_t offset, const void *src, void *dst, size_t bytes,
                             size_t chunk_bytes, sift_stored_io io, void *ctx)
{
    if (bytes == 0) return SIFT_OK;
    if (row_values <= 0 || row_values % 32 != 0)
        return sift_set_error(SIFT_E_SHAPE, "a planar %s tensor needs rows of a positive multiple of 32 values, not %lld",
                              sift_dtype_name(t), (long long)row_values);
    const size_t nblk = (size_t)row_values / 32, qb = quant_bytes(t), rb = nblk * (qb + 2);
    const size_t r_first = offset / rb, r_end = (offset + bytes + rb - 1) / rb, chunk_rows = chunk_bytes / rb;
    if (chunk_rows == 0)
        return sift_set_error(SIFT_E_LIMIT, "a %s row of %lld values (%zu bytes) exceeds the %zu-byte transfer buffer",
                              sift_dtype_name(t), (long long)row_values, rb, chunk_bytes);
    /* rows converted at a time: a chunk's worth, or fewer where the transfer covers fewer */
    const size_t per = r_end - r_first < chunk_rows ? r_end - r_first : chunk_rows;
    unsigned char *rows = malloc(per * rb), *stored = malloc(per * rb);
    sift_status s = rows && stored ? SIFT_OK : sift_set_error(SIFT_E_NOMEM, "out of host memory converting planar rows");
    const unsigned char *in = src;
    unsigned char *out = dst;
    for (size_t r0 = r_first; r0 < r_end && s == SIFT_OK; r0 += per) {
        const size_t n = r_end - r0 < per ? r_end - r0 : per, b0 = r0 * rb, b1 = b0 + n * rb;
        const size_t lo = offset > b0 ? offset : b0, hi = offset + bytes < b1 ? offset + bytes : b1;
        if (!in || lo > b0 || hi < b1) { /* a read, or a write of part of a row: the rows as they are */
            s = io(ctx, b0, stored, n * rb, false);
            if (s != SIFT_OK) break;
            from_planar(stored, rows, n, nblk, qb);
        }
        if (!in) {
            memcpy(out + (lo - offset), rows + (lo - b0), hi - lo);
            continue;
        }
        memcpy(rows + (lo - b0), in + (lo - offset), hi - lo);
        to_planar(rows, stored, n, nblk, qb);
        s = io(ctx, b0, stored, n * rb, true);
    }
    free(rows);
    free(stored);
    return s;
}
