/* Dequantization of GGUF rows: see quant.h for the block layouts. */
#include "quant.h"

#include "backend.h"

#include <stdbool.h>
#include <string.h>

/* Bytes are assembled explicitly: blocks sit at any byte offset, and the files are little-endian. */
static uint16_t load_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

float sift_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void sift_dequant_f16(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) dst[i] = sift_half_to_float(load_le16(p + 2 * i));
}

void sift_dequant_bf16(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) dst[i] = sift_bf16_to_float(load_le16(p + 2 * i));
}

void sift_dequant_q8_0(const void *src, float *dst, size_t n)
{
    const uint8_t *block = src;
    for (size_t b = 0; b < n / SIFT_QK8_0; b++, block += SIFT_Q8_0_BLOCK_BYTES) {
        const float d = sift_half_to_float(load_le16(block));
        const int8_t *q = (const int8_t *)(block + 2);
        for (int i = 0; i < SIFT_QK8_0; i++) dst[b * SIFT_QK8_0 + (size_t)i] = (float)q[i] * d;
    }
}

void sift_dequant_q4_0(const void *src, float *dst, size_t n)
{
    const uint8_t *block = src;
    for (size_t b = 0; b < n / SIFT_QK4_0; b++, block += SIFT_Q4_0_BLOCK_BYTES) {
        const float d = sift_half_to_float(load_le16(block));
        const uint8_t *qs = block + 2;
        float *out = dst + b * SIFT_QK4_0;
        for (int j = 0; j < SIFT_QK4_0 / 2; j++) {
            out[j] = (float)((qs[j] & 0x0f) - 8) * d;
            out[j + SIFT_QK4_0 / 2] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

void sift_kquant_scale_min(const uint8_t *scales, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
        *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

/* Q4_K, and Q5_K (five_bits) which adds the qh bits and moves qs by their 32 bytes. */
static void dequant_q45_k(const void *src, float *dst, size_t n, bool five_bits)
{
    const size_t block_bytes = five_bits ? SIFT_Q5_K_BLOCK_BYTES : SIFT_Q4_K_BLOCK_BYTES;
    const uint8_t *block = src;
    for (size_t b = 0; b < n / SIFT_QK_K; b++, block += block_bytes) {
        const float d = sift_half_to_float(load_le16(block)), dmin = sift_half_to_float(load_le16(block + 2));
        const uint8_t *scales = block + 4;
        const uint8_t *qh = five_bits ? block + 16 : NULL;
        const uint8_t *qs = block + (five_bits ? 48 : 16);
        float *out = dst + b * SIFT_QK_K;
        for (int j = 0; j < 8; j++) { /* sub-block j: values 32j .. 32j + 31 */
            int sc, m;
            sift_kquant_scale_min(scales, j, &sc, &m);
            const float scale = d * (float)sc, min = dmin * (float)m;
            const uint8_t *bytes = qs + 32 * (j / 2);
            const int shift = 4 * (j & 1);
            for (int l = 0; l < 32; l++) {
                int q = (bytes[l] >> shift) & 15;
                if (qh && ((qh[l] >> j) & 1)) q += 16;
                out[32 * j + l] = scale * (float)q - min;
            }
        }
    }
}

void sift_dequant_q4_k(const void *src, float *dst, size_t n) { dequant_q45_k(src, dst, n, false); }
void sift_dequant_q5_k(const void *src, float *dst, size_t n) { dequant_q45_k(src, dst, n, true); }

void sift_dequant_q6_k(const void *src, float *dst, size_t n)
{
    const uint8_t *block = src;
    for (size_t b = 0; b < n / SIFT_QK_K; b++, block += SIFT_Q6_K_BLOCK_BYTES) {
        const float d = sift_half_to_float(load_le16(block + 208));
        float *out = dst + b * SIFT_QK_K;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = block + 64 * h, *qh = block + 128 + 32 * h;
            const int8_t *scales = (const int8_t *)(block + 192 + 8 * h);
            for (int g = 0; g < 4; g++)
                for (int l = 0; l < 32; l++) {
                    const int low = (ql[32 * (g & 1) + l] >> (4 * (g >> 1))) & 15;
                    const int high = (qh[l] >> (2 * g)) & 3;
                    const float scale = d * (float)scales[2 * g + l / 16];
                    out[128 * h + 32 * g + l] = scale * (float)((low | (high << 4)) - 32);
                }
        }
    }
}

sift_status sift_dequant_row(const sift_gguf_tensor *t, uint64_t row, float *dst)
{
    if (!t || !dst) return sift_set_error(SIFT_E_INVALID, "sift_dequant_row: null argument");
    const uint64_t row_elems = t->dims[0];
    const uint64_t n_rows = row_elems ? t->n_elements / row_elems : 0;
    if (row >= n_rows) {
        char shown[100];
        return sift_set_error(SIFT_E_INVALID, "sift_dequant_row: row %llu of tensor '%s' with %llu rows",
                              (unsigned long long)row, sift_gguf_str_shown(t->name, shown, sizeof shown),
                              (unsigned long long)n_rows);
    }
    uint32_t block_elems, block_bytes;
    if (!sift_gguf_tensor_type_block(t->type, &block_elems, &block_bytes))
        return sift_set_error(SIFT_E_DTYPE, "sift_dequant_row: tensor type %u", (unsigned)t->type);
    /* The open checked that rows are whole blocks and that the tensor fits the file. */
    const uint64_t row_bytes = row_elems / block_elems * block_bytes;
    const uint8_t *src = (const uint8_t *)t->data + row * row_bytes;
    const size_t n = (size_t)row_elems;
    switch (t->type) {
    case SIFT_GGUF_TENSOR_F32:
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)src[4 * i] | ((uint32_t)src[4 * i + 1] << 8) | ((uint32_t)src[4 * i + 2] << 16) |
                         ((uint32_t)src[4 * i + 3] << 24);
            memcpy(&dst[i], &u, 4);
        }
        break;
    case SIFT_GGUF_TENSOR_F16: sift_dequant_f16(src, dst, n); break;
    case SIFT_GGUF_TENSOR_BF16: sift_dequant_bf16(src, dst, n); break;
    case SIFT_GGUF_TENSOR_Q8_0: sift_dequant_q8_0(src, dst, n); break;
    case SIFT_GGUF_TENSOR_Q4_0: sift_dequant_q4_0(src, dst, n); break;
    case SIFT_GGUF_TENSOR_Q4_K: sift_dequant_q4_k(src, dst, n); break;
    case SIFT_GGUF_TENSOR_Q5_K: sift_dequant_q5_k(src, dst, n); break;
    case SIFT_GGUF_TENSOR_Q6_K: sift_dequant_q6_k(src, dst, n); break;
    }
    return SIFT_OK;
}

void sift_row_to_f32(sift_dtype t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case SIFT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case SIFT_F16: sift_dequant_f16(src, dst, (size_t)n); break;
    case SIFT_BF16: sift_dequant_bf16(src, dst, (size_t)n); break;
    case SIFT_Q8_0: sift_dequant_q8_0(src, dst, (size_t)n); break;
    case SIFT_Q4_0: sift_dequant_q4_0(src, dst, (size_t)n); break;
    case SIFT_Q4_K: sift_dequant_q4_k(src, dst, (size_t)n); break;
    case SIFT_Q5_K: sift_dequant_q5_k(src, dst, (size_t)n); break;
    case SIFT_Q6_K: sift_dequant_q6_k(src, dst, (size_t)n); break;
    default: memset(dst, 0, (size_t)n * sizeof(float)); break;
    }
}
