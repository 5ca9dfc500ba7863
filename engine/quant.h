/* Dequantization of GGUF tensor rows to f32: the CPU reference for the matmuls that will read
 * these formats on the GPU. Block layouts are ggml's, little-endian, packed:
 *
 *   Q8_0: 32 values in 34 bytes: f16 scale d, then 32 int8 q;     value i = q[i] * d
 *   Q4_0: 32 values in 18 bytes: f16 scale d, then 16 bytes;      value i = (nibble_i - 8) * d,
 *         where byte j holds element j in its low nibble and element j + 16 in its high nibble
 *   F16 (IEEE half) and BF16 (the top 16 bits of an f32) one value per 2 bytes. */
#ifndef SIFT_QUANT_H
#define SIFT_QUANT_H

#include "gguf.h"

#include <stddef.h>
#include <stdint.h>

#define SIFT_QK8_0 32
#define SIFT_QK4_0 32
#define SIFT_Q8_0_BLOCK_BYTES 34
#define SIFT_Q4_0_BLOCK_BYTES 18

float sift_bf16_to_float(uint16_t h);

/* Each converts n values starting at src (which need not be aligned); for the block formats n is
 * a multiple of 32 and src points at a block. */
void sift_dequant_f16(const void *src, float *dst, size_t n);
void sift_dequant_bf16(const void *src, float *dst, size_t n);
void sift_dequant_q8_0(const void *src, float *dst, size_t n);
void sift_dequant_q4_0(const void *src, float *dst, size_t n);

/* Converts row `row` of a 2-or-more-dimensional tensor (rows of t->dims[0] elements; the higher
 * dimensions flattened) into dst[t->dims[0]]. SIFT_E_INVALID for a row past the end. */
sift_status sift_dequant_row(const sift_gguf_tensor *t, uint64_t row, float *dst);

#endif
