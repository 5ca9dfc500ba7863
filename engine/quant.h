/* Dequantization of GGUF tensor rows to f32: the CPU reference for the matmuls that will read
 * these formats on the GPU. Block layouts are ggml's, little-endian, packed:
 *
 *   Q8_0: 32 values in 34 bytes: f16 scale d, then 32 int8 q;     value i = q[i] * d
 *   Q4_0: 32 values in 18 bytes: f16 scale d, then 16 bytes;      value i = (nibble_i - 8) * d,
 *         where byte j holds element j in its low nibble and element j + 16 in its high nibble
 *   F16 (IEEE half) and BF16 (the top 16 bits of an f32) one value per 2 bytes.
 *
 * The K-quants hold 256 values in a super-block; f16 d (and dmin) scale the sub-blocks' integer
 * scales (and mins):
 *
 *   Q4_K: 144 bytes: f16 d, f16 dmin, 12 bytes of scales, 128 bytes qs. Eight sub-blocks of 32
 *         with 6-bit scale sc[j] and min m[j]; value = d * sc[j] * q - dmin * m[j], q a nibble.
 *         Scales: for j < 4, sc[j] = s[j] & 63 and m[j] = s[j + 4] & 63; for j >= 4, the low 4
 *         bits are s[j + 4] & 15 (sc) and s[j + 4] >> 4 (m), the high 2 bits the top bits of
 *         s[j - 4] (sc) and s[j] (m). Sub-blocks 2c and 2c + 1 share qs[32c .. 32c + 31]: the
 *         low nibbles are sub-block 2c, the high nibbles 2c + 1.
 *   Q5_K: 176 bytes: f16 d, f16 dmin, the same 12 bytes of scales, 32 bytes qh, 128 bytes qs:
 *         Q4_K's nibbles plus a fifth bit, 16 * bit j of qh[l] for value l of sub-block j.
 *   Q6_K: 210 bytes: 128 bytes ql, 64 bytes qh, 16 int8 scales, f16 d. Sixteen sub-blocks of 16,
 *         value = d * scale[sub-block] * (q - 32), q 6 bits. Each half h of 128 values uses
 *         ql[64h ..], qh[32h ..], scales[8h ..]; its value 32g + l (g < 4, l < 32) takes the low
 *         (g = 0, 1) or high (g = 2, 3) nibble of ql[64h + 32(g & 1) + l] and bits 2g, 2g + 1 of
 *         qh[32h + l] as its top two bits, with scale scales[8h + 2g + l / 16].
 *
 * Every integer product here is exact in f32 (an f16 times a 6-bit scale, times a 6-bit q), so
 * a backend computing d * sc * q - dmin * m in any grouping, fused or not, gets these values. */
#ifndef SIFT_QUANT_H
#define SIFT_QUANT_H

#include "gguf.h"

#include <stddef.h>
#include <stdint.h>

#define SIFT_QK8_0 32
#define SIFT_QK4_0 32
#define SIFT_Q8_0_BLOCK_BYTES 34
#define SIFT_Q4_0_BLOCK_BYTES 18
#define SIFT_QK_K 256
#define SIFT_Q4_K_BLOCK_BYTES 144
#define SIFT_Q5_K_BLOCK_BYTES 176
#define SIFT_Q6_K_BLOCK_BYTES 210

float sift_bf16_to_float(uint16_t h);

/* Each converts n values starting at src (which need not be aligned); for the block formats n is
 * a multiple of 32 and src points at a block. */
void sift_dequant_f16(const void *src, float *dst, size_t n);
void sift_dequant_bf16(const void *src, float *dst, size_t n);
void sift_dequant_q8_0(const void *src, float *dst, size_t n);
void sift_dequant_q4_0(const void *src, float *dst, size_t n);
/* n a multiple of 256. */
void sift_dequant_q4_k(const void *src, float *dst, size_t n);
void sift_dequant_q5_k(const void *src, float *dst, size_t n);
void sift_dequant_q6_k(const void *src, float *dst, size_t n);
/* Sub-block j's (0..7) 6-bit scale and min from the 12 scale bytes of a Q4_K or Q5_K block. */
void sift_kquant_scale_min(const uint8_t *scales, int j, int *sc, int *m);

/* Converts row `row` of a 2-or-more-dimensional tensor (rows of t->dims[0] elements; the higher
 * dimensions flattened) into dst[t->dims[0]]. SIFT_E_INVALID for a row past the end. */
sift_status sift_dequant_row(const sift_gguf_tensor *t, uint64_t row, float *dst);

#endif
