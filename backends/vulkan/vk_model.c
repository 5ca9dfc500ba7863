/* The planners of the Vulkan backend's transformer ops (include/sift.h; the kernels in shaders/;
 * entries of vk_graph.c's table by op): get_rows, rmsnorm and layernorm, matmul (matvec.comp for a few
 * tokens, matmul.comp's tiles for more), rope, swiglu, add, silu, kv_write. Their push constants are
 * in vk_push.h. causal_attend is attention (vk_attention.c vk_plan_attend). Every kernel reads tensors through
 * common.glsl's addressing, so views and chunked tensors work everywhere. */
#include "vk_push.h"

#include <stdlib.h>
#include <string.h>

/* Tokens per dispatch of matvec.comp, and the most a product may have to run on it (a batched decode
 * step's few rows, in dispatches of up to VK_MATVEC_MAX_T); more go to matmul.comp's tiles. On the
 * H200 (8B Q8_0 shapes) two dispatches of 8 tokens took 0.3-0.8x the time of the tiles of 16. */
#define VK_MATVEC_MAX_T 8u
#define VK_MATVEC_TOKENS 16u
/* matmul.comp's tiles shrink (64, 32, 16 rows) while its grid would have fewer workgroups than this
 * (two per SM of a large GPU). */
#define VK_MATMUL_GROUPS 256u

/* How matvec.comp takes x (SIFT_VULKAN_TUNE matvec_x; 0 picks VK_MATVEC_X_DOT for the block types
 * but q8_0 where the device has integer dot products under its profile, else VK_MATVEC_X_FLOAT).
 * The digits (block types only): x_digits.comp writes x once per product as two int8 digits per
 * value and a scale per block of 32 into the graph's scratch, then matvec multiplies the quants
 * with them in integer sums. */
typedef enum vk_matvec_x {
    VK_MATVEC_X_FLOAT = 1, /* x read as f32, the weights converted to float */
    VK_MATVEC_X_DOT = 2,   /* digits, integer dot products (OpSDot: the matvec_idot kernel) */
    VK_MATVEC_X_INT = 3,   /* digits, plain 32-bit integer multiply-adds (any device) */
} vk_matvec_x;

/* ---- weights ---- */

/* weights.glsl WT of a tensor as stored on the device (an f16 tensor widened to f32 reads as f32). */
static uint32_t weight_type(const sift_tensor *t)
{
    switch (t->dtype) {
    case SIFT_F16: return vk_tensor_is_f16(t) ? 1u : 0u;
    case SIFT_BF16: return 2u;
    case SIFT_Q8_0: return 3u;
    case SIFT_Q4_0: return 4u;
    case SIFT_Q4_K: return 5u;
    case SIFT_Q5_K: return 6u;
    case SIFT_Q6_K: return 7u;
    default: return 0u;
    }
}

static uint64_t stored_row_bytes(uint32_t wt, uint64_t k)
{
    switch (wt) {
    case 0: return k * 4;
    case 1:
    case 2: return k * 2;
    case 3: return k / 32 * 34;
    case 5: return k / 256 * 144;
    case 6: return k / 256 * 176;
    case 7: return k / 256 * 210;
    default: return k / 32 * 18;
    }
}

/* The weights.glsl constants of a weight tensor with rows of k values: WT and WALIGN. Block types
 * need an even storage offset (their words are read 2-byte aligned). */
static sift_status weight_spec(const sift_tensor *w, uint64_t k, const vk_tref *ref, const char *op, uint32_t spec[VK_NSPEC])
{
    const uint32_t wt = weight_type(w);
    spec[VK_SC_M_WT] = wt;
    if (wt == 3 || wt == 4) { /* planar rows (vk_memory.c): a view must start at a row of the same length */
        const vk_tensor *vt = w->impl;
        const uint64_t rb = stored_row_bytes(wt, k);
        if (vt->planar_k != k || (ref->meta & ((UINT64_C(1) << 56) - 1)) % rb != 0)
            return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s: the %s tensor '%s' is not whole rows of %llu values", op,
                                  sift_dtype_name(w->dtype), w->name, (unsigned long long)k);
        spec[VK_SC_M_WALIGN] = rb % 16 == 0 && vk_rows_aligned(w);
    } else if (wt >= 3) {
        if ((ref->meta & 1u) != 0)
            return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: %s: the %s tensor '%s' starts at an odd byte offset", op,
                                  sift_dtype_name(w->dtype), w->name);
        /* K-quants: the super-blocks are 16-byte aligned (q4_k's 144 and q5_k's 176 bytes are whole
         * vectors; q6_k's 210 never are, and its reads do not ask) */
        spec[VK_SC_M_WALIGN] = stored_row_bytes(wt, k) % 16 == 0 && vk_rows_aligned(w);
    } else {
        const uint64_t rb = stored_row_bytes(wt, k);
        spec[VK_SC_M_WALIGN] = rb % 16 == 0 && vk_rows_aligned(w);
    }
    return SIFT_OK;
}

/* ---- dispatch shapes ---- */

/* A flat grid of `groups` workgroups: x up to the device limit, the rest in y (shaders flatten
 * with gl_NumWorkGroups.x). */
static sift_status dispatch_flat(plan *pl, vk_kernel kernel, const uint32_t spec[VK_NSPEC], const void *push,
                                 size_t size, uint64_t groups, const char *op)
{
    if (groups == 0) return SIFT_OK;
    const vkb *be = vk_plan_backend(pl);
    const uint32_t gx = (uint32_t)(groups < be->caps.max_groups[0] ? groups : be->caps.max_groups[0]);
    const uint64_t gy = (groups + gx - 1) / gx;
    if (gy > be->caps.max_groups[1])
        return sift_set_error(SIFT_E_LIMIT, "vulkan: %s over %llu workgroups exceeds the device's grid", op,
                              (unsigned long long)groups);
    return vk_dispatch(pl, kernel, spec, push, size, gx, (uint32_t)gy, 1);
}

/* ---- the ops ---- */

sift_status vk_plan_get_rows(plan *pl, const sift_node *n)
{
    const sift_tensor *table = n->src[0], *ids = n->src[1];
    const uint32_t t = (uint32_t)ids->shape[0], e = (uint32_t)table->shape[1];
    if (t == 0 || e == 0) return SIFT_OK;
    push_get_rows p = {.V = (uint32_t)table->shape[0], .E = e};
    TRY(vk_tensor_ref(table, &p.table));
    TRY(vk_tensor_ref(ids, &p.ids));
    TRY(vk_tensor_ref(n->dst, &p.out));
    uint32_t spec[VK_NSPEC] = {0};
    TRY(weight_spec(table, e, &p.table, "get_rows", spec));
    const vkb *be = vk_plan_backend(pl);
    const uint32_t gx = ceil_div(ceil_div(e, 8), 64);
    for (uint32_t t0 = 0; t0 < t; t0 += be->caps.max_groups[1]) {
        p.t0 = t0;
        TRY(vk_dispatch(pl, VK_K_GET_ROWS, spec, &p, sizeof p, gx, min_u32(t - t0, be->caps.max_groups[1]), 1));
    }
    return SIFT_OK;
}

/* rmsnorm and layernorm (rmsnorm.comp MODE 0 and 1): one workgroup per row. */
sift_status vk_plan_norm(plan *pl, const sift_node *n)
{
    const sift_tensor *x = n->src[0], *bias = n->n_src > 2 ? n->src[2] : NULL;
    const uint32_t t = (uint32_t)x->shape[0];
    if (t == 0 || x->shape[1] == 0) return SIFT_OK;
    push_norm p = {.E = (uint32_t)x->shape[1], .eps = n->p.eps, .has_bias = bias != NULL};
    TRY(vk_tensor_ref(x, &p.x));
    TRY(vk_tensor_ref(n->src[1], &p.w));
    if (bias) TRY(vk_tensor_ref(bias, &p.b));
    TRY(vk_tensor_ref(n->dst, &p.out));
    uint32_t spec[VK_NSPEC] = {0};
    spec[VK_SC_M_MODE] = n->op == SIFT_OP_LAYERNORM;
    const vkb *be = vk_plan_backend(pl);
    for (uint32_t t0 = 0; t0 < t; t0 += be->caps.max_groups[0]) {
        p.t0 = t0;
        TRY(vk_dispatch(pl, VK_K_RMSNORM, spec, &p, sizeof p, min_u32(t - t0, be->caps.max_groups[0]), 1, 1));
    }
    return SIFT_OK;
}

/* out [T][N] = x [T][K] w [N][K]^T (+ bias). T <= VK_MATVEC_TOKENS: matvec.comp, up to
 * VK_MATVEC_MAX_T tokens a dispatch, R rows per workgroup, the workgroup's invocations over K (decode:
 * the weights streamed once per dispatch, at bandwidth), block types against x's digits (x_digits.comp,
 * one dispatch before them) unless vk_matvec_x says f32; otherwise matmul.comp's 64 x 64 tiles (each
 * weight read once per 64 tokens). */
sift_status vk_plan_matmul(plan *pl, const sift_node *n)
{
    const sift_tensor *x = n->src[0], *w = n->src[1], *bias = n->n_src > 2 ? n->src[2] : NULL;
    const uint32_t t = (uint32_t)x->shape[0], k = (uint32_t)x->shape[1], nout = (uint32_t)w->shape[0];
    if (t == 0 || nout == 0) return SIFT_OK;
    const vkb *be = vk_plan_backend(pl);
    vk_tref xr, wr, br = {0}, outr;
    TRY(vk_tensor_ref(x, &xr));
    TRY(vk_tensor_ref(w, &wr));
    if (bias) TRY(vk_tensor_ref(bias, &br));
    TRY(vk_tensor_ref(n->dst, &outr));
    uint32_t spec[VK_NSPEC] = {0};
    TRY(weight_spec(w, k, &wr, "matmul", spec));
    spec[VK_SC_M_XALIGN] = k % 4 == 0 && vk_rows_aligned(x);
    const bool quant = spec[VK_SC_M_WT] >= 3;

    if (t > VK_MATVEC_TOKENS) {
        push_matmul p = {.x = xr, .w = wr, .bias = br, .out = outr, .K = k, .N = nout, .T = t, .has_bias = bias != NULL};
        /* tiles of 64 rows, or 32 or 16 while the grid would have fewer than VK_MATMUL_GROUPS workgroups */
        uint32_t bn = 64;
        while (bn > 16 && (uint64_t)ceil_div(nout, bn) * ceil_div(t, 64) < VK_MATMUL_GROUPS) bn /= 2;
        spec[VK_SC_M_R] = bn;
        return vk_dispatch(pl, VK_K_MATMUL, spec, &p, sizeof p, ceil_div(nout, bn), ceil_div(t, 64), 1);
    }
    /* x as digits for the block types (every one has K a multiple of 32), made here once for all
     * the product's tokens; the matvec dispatches below then read them in place of x */
    vk_matvec_x xmode = VK_MATVEC_X_FLOAT;
    if (quant) {
        /* q8_0 stays on floats by default: on an H100 its digits' products took 15.1 / 33.4 / 35.2 /
         * 219.4 us at the 8B shapes against 12.2 / 31.0 / 31.7 / 217.2 (8-bit weights already read
         * at 2-2.6 TB/s; the digits' dispatch and barrier cost more than the integer sums save),
         * while q4_0 and q4_k gained (docs/benchmarks.md) */
        const bool digits_pay = be->caps.int_dot && w->dtype != SIFT_Q8_0;
        xmode = be->tune.matvec_x ? (vk_matvec_x)be->tune.matvec_x : digits_pay ? VK_MATVEC_X_DOT : VK_MATVEC_X_FLOAT;
        if (xmode == VK_MATVEC_X_DOT && !be->caps.int_dot)
            return sift_set_error(SIFT_E_UNSUPPORTED,
                                  "vulkan: matmul: SIFT_VULKAN_TUNE matvec_x=2 asks for integer dot products, which %s "
                                  "lacks%s (shaderIntegerDotProduct)",
                                  be->caps.props.deviceName, be->caps.profile ? " under its profile" : "");
    }
    const vk_kernel matvec = xmode == VK_MATVEC_X_DOT ? VK_K_MATVEC_IDOT : VK_K_MATVEC;
    uint64_t xd_stride = 0;
    if (xmode != VK_MATVEC_X_FLOAT) {
        /* per token: 16 bytes a group of 8 values (d0, d1), then an f32 scale and an f32 sum a block
         * of 32, rounded to 16 bytes (x_digits.comp's layout) */
        xd_stride = ((uint64_t)2 * k + k / 4 + 15) & ~(uint64_t)15;
        const VkDeviceSize off = vk_scratch_take(pl, (VkDeviceSize)(t * xd_stride));
        const vk_tref digits = {.addr = vk_scratch_addr(pl, off), .meta = 0};
        push_matvec p = {.x = xr, .out = digits, .K = k, .T = t};
        uint32_t xspec[VK_NSPEC] = {0};
        xspec[VK_SC_M_XALIGN] = spec[VK_SC_M_XALIGN];
        TRY(dispatch_flat(pl, VK_K_X_DIGITS, xspec, &p, sizeof p, ceil_div((uint64_t)t * (k / 8), 256), "matmul"));
        xr = digits;
    }
    spec[VK_SC_M_MODE] = xmode != VK_MATVEC_X_FLOAT;

    /* invocations per workgroup: about two units each or more (8 values; q4_0's and the K-quants'
     * slots, 16) */
    const uint32_t units = spec[VK_SC_M_WT] >= 4 ? k / 16 : k / 8;
    uint32_t wgs = units >= 1024 ? 256 : units >= 256 ? 128 : 64;
    if (wgs < be->caps.subgroup) wgs = be->caps.subgroup;
    spec[VK_SC_M_WGS] = wgs;
    spec[VK_SC_M_U] = 2;
    for (uint32_t t0 = 0; t0 < t; t0 += VK_MATVEC_MAX_T) {
        const uint32_t nt = min_u32(t - t0, VK_MATVEC_MAX_T);
        /* rows per workgroup: more rows share each x load (most useful for the block types, whose
         * units are small), but keep >= 1024 workgroups; R * NT <= 16 sums per invocation. q6_k
         * takes 2: its slots' ten word loads make 4 rows' loads in flight cost more than the x
         * reads they share (8B shapes on an H100: 69.8 against 85.5 µs for gate/up; q4_k at 2
         * lost, 34.7 against 32.6) */
        uint32_t r = spec[VK_SC_M_WT] == 7 ? 2 : quant ? 4 : 2;
        while (r > 1 && r * nt > 16) r /= 2;
        while (r > 1 && ceil_div(nout, r) < 1024) r /= 2;
        spec[VK_SC_M_NT] = nt;
        spec[VK_SC_M_R] = r;
        /* tokens t0 .. t0 + nt - 1: x's and out's rows from t0 on (byte offsets in the references) */
        vk_tref xc = xr, outc = outr;
        xc.meta += (uint64_t)t0 * (xd_stride ? xd_stride : k * sizeof(float));
        outc.meta += (uint64_t)t0 * nout * sizeof(float);
        push_matvec p = {.x = xc, .w = wr, .bias = br, .out = outc, .K = k, .N = nout, .T = nt, .has_bias = bias != NULL};
        const uint32_t groups = ceil_div(nout, r);
        for (uint32_t g0 = 0; g0 < groups; g0 += be->caps.max_groups[0]) {
            p.group0 = g0;
            TRY(vk_dispatch(pl, matvec, spec, &p, sizeof p, min_u32(groups - g0, be->caps.max_groups[0]), 1, 1));
        }
    }
    return SIFT_OK;
}

sift_status vk_plan_rope(plan *pl, const sift_node *n)
{
    const sift_tensor *x = n->src[0], *factors = n->n_src > 1 ? n->src[1] : NULL;
    const uint64_t count = (uint64_t)x->shape[0] * (uint64_t)x->shape[1] * (uint64_t)x->shape[2];
    if (count == 0) return SIFT_OK;
    const int n_rot = n->p.rope.n_rot, half = n_rot / 2;
    const VkDeviceSize off = vk_scratch_take(pl, (VkDeviceSize)half * 4);
    TRY(vk_scratch_update(pl, off, n->p.rope_freq, (size_t)half * 4));
    push_rope p = {.freq = vk_scratch_addr(pl, off),
                   .n = count,
                   .HD = (uint32_t)(x->shape[1] * x->shape[2]),
                   .D = (uint32_t)x->shape[2],
                   .n_rot = (uint32_t)n_rot,
                   .pos0 = (uint32_t)n->p.pos0,
                   .neox = n->p.rope.mode == SIFT_ROPE_NEOX,
                   .has_factors = factors != NULL};
    TRY(vk_tensor_ref(x, &p.x));
    TRY(vk_tensor_ref(n->dst, &p.out));
    if (factors) TRY(vk_tensor_ref(factors, &p.factors));
    const uint32_t spec[VK_NSPEC] = {0};
    return dispatch_flat(pl, VK_K_ROPE, spec, &p, sizeof p, (count + 255) / 256, "rope");
}

/* add, swiglu and silu (eltwise.comp OP 0, 1, 2; silu has no second operand). */
sift_status vk_plan_eltwise(plan *pl, const sift_node *n)
{
    push_eltwise p = {.n = n->dst->nbytes / 4};
    TRY(vk_tensor_ref(n->src[0], &p.a));
    if (n->op != SIFT_OP_SILU) TRY(vk_tensor_ref(n->src[1], &p.b));
    TRY(vk_tensor_ref(n->dst, &p.out));
    uint32_t spec[VK_NSPEC] = {0};
    spec[VK_SC_M_MODE] = n->op == SIFT_OP_ADD ? 0u : n->op == SIFT_OP_SWIGLU ? 1u : 2u;
    return dispatch_flat(pl, VK_K_ELTWISE, spec, &p, sizeof p, (p.n + 255) / 256, sift_op_name(n->op));
}

sift_status vk_plan_kv_write(plan *pl, const sift_node *n)
{
    const sift_tensor *src = n->src[0], *cache = n->dst;
    const uint64_t count = (uint64_t)src->shape[0] * (uint64_t)src->shape[1] * (uint64_t)src->shape[2];
    if (count == 0) return SIFT_OK;
    push_kv_write p = {.H = (uint32_t)src->shape[1], .D = (uint32_t)src->shape[2], .pos0 = (uint32_t)n->p.pos0};
    TRY(vk_tensor_ref(src, &p.src));
    TRY(vk_kv_ref(vk_plan_backend(pl), cache, &p.cache)); /* paged or not: shaders/common.glsl kv_row */
    uint32_t spec[VK_NSPEC] = {0};
    uint32_t mode = cache->dtype == SIFT_I8 ? 3u : cache->dtype == SIFT_F32 ? 0u : vk_tensor_is_f16(cache) ? 1u : 2u;
    if (mode == 3) {
        /* an int8 cache: rows of D + 4 bytes (sift_dtype_size(SIFT_I8) = 1), one invocation per row,
         * whole 32-bit stores: the cache must start on a 4-byte boundary (D is a multiple of 8) */
        if ((p.cache.t.meta & 3u) != 0)
            return sift_set_error(SIFT_E_UNSUPPORTED,
                                  "vulkan: kv_write: the i8 cache '%s' does not start on a 4-byte boundary "
                                  "(the kernel writes 32-bit words)",
                                  cache->name);
        p.n = count / p.D; /* rows T * Hkv */
    } else if (mode == 1) {
        if ((p.cache.t.meta & 3u) != 0)
            return sift_set_error(SIFT_E_UNSUPPORTED,
                                  "vulkan: kv_write: the f16 cache '%s' starts 2 bytes past a 4-byte boundary "
                                  "(the kernel writes pairs of halves as 32-bit words)",
                                  cache->name);
        p.D /= 2; /* pairs per row (D is a multiple of 8) */
        p.n = count / 2;
    } else {
        p.n = count;
    }
    spec[VK_SC_M_MODE] = mode;
    return dispatch_flat(pl, VK_K_KV_WRITE, spec, &p, sizeof p, (p.n + 255) / 256, "kv_write");
}
