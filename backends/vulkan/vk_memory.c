/* The Vulkan backend's memory: buffers with device addresses, tensors split into chunks, and host
 * transfers through one staging buffer.
 *
 * A tensor larger than one allocation (K of 1M tokens x 8 KV heads x D 128 in f32 is 4 GiB, over
 * NVIDIA's 4094 MiB limit) is a list of chunks of 2^chunk_shift bytes, each a VkBuffer with its own
 * memory; the shaders reach byte o at table[o >> shift] + (o & (2^shift - 1)) (shaders/common.glsl).
 * The kernels resolve every 16-byte vector on its own, so rows may straddle chunks.
 *
 * f16 on devices without storageBuffer16BitAccess: such tensors are kept as f32 on the device
 * ("widened") and converted on write and read; the kernels then run their f32 variant (a
 * specialization constant). The shaders read halves through 32-bit words and unpackHalf2x16, so this
 * is a conservative choice rather than a necessity; SIFT_VULKAN_F16_AS_F32=1 forces it for tests.
 *
 * q8_0 and q4_0 rows are stored planar: a row's quants (32 or 16 bytes per block) first, then its
 * blocks' f16 scales. A row keeps its size and its place, but its quants are whole aligned vectors
 * where ggml's 34- and 18-byte blocks allow only 16-bit alignment, so weights.glsl reads them with
 * one vector load in place of three words and a funnel shift. Rows are converted on write and read.
 */
#include "vk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t memory_type(const vkb *be, uint32_t bits, vk_mem_kind kind)
{
    const uint32_t pref = kind == VK_MEM_STAGING ? be->mem_host : kind == VK_MEM_OFFLOAD ? be->mem_offload : be->mem_device;
    if (bits & (1u << pref)) return pref;
    const VkMemoryPropertyFlags want = be->memprops.memoryTypes[pref].propertyFlags;
    for (uint32_t i = 0; i < be->memprops.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (be->memprops.memoryTypes[i].propertyFlags & want) == want) return i;
    return UINT32_MAX;
}

sift_status vk_buf_create(vkb *be, VkDeviceSize size, vk_mem_kind kind, vk_buf *b, const char *what)
{
    const bool host = kind == VK_MEM_STAGING;       /* transfers only, no device address */
    const bool mapped = kind != VK_MEM_DEVICE;      /* host-visible: mapped */
    const bool counted = kind == VK_MEM_DEVICE || (kind == VK_MEM_OFFLOAD && !be->offload_separate); /* device heap */
    memset(b, 0, sizeof *b);
    if (size < 16) size = 16;
    size = (size + 15) & ~(VkDeviceSize)15;
    if (size > be->caps.max_alloc)
        return sift_set_error(SIFT_E_LIMIT, "vulkan: %s needs an allocation of %llu bytes; the device allows at most %llu",
                              what, (unsigned long long)size, (unsigned long long)be->caps.max_alloc);
    if (be->caps.max_allocs && be->n_allocs >= be->caps.max_allocs)
        return sift_set_error(SIFT_E_LIMIT, "vulkan: %s: the device allows at most %u memory allocations", what,
                              be->caps.max_allocs);
    VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = size,
        .usage = host ? (VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT)
                      : (VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                         VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT),
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = be->vk.vkCreateBuffer(be->dev, &bi, NULL, &b->buf);
    if (r != VK_SUCCESS) {
        b->buf = VK_NULL_HANDLE;
        sift_status s = vk_fail(r, "vkCreateBuffer");
        return r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                   ? sift_set_error(s, "vulkan: vkCreateBuffer for %s (%llu bytes) failed: %s", what,
                                    (unsigned long long)size, vk_result_name(r))
                   : s;
    }
    VkMemoryRequirements req;
    be->vk.vkGetBufferMemoryRequirements(be->dev, b->buf, &req);
    const uint32_t type = memory_type(be, req.memoryTypeBits, kind);
    if (type == UINT32_MAX) {
        be->vk.vkDestroyBuffer(be->dev, b->buf, NULL);
        b->buf = VK_NULL_HANDLE;
        return sift_set_error(SIFT_E_BACKEND, "vulkan: no memory type fits %s", what);
    }
    if (counted && req.size > be->caps.heap_bytes - be->used_bytes) {
        be->vk.vkDestroyBuffer(be->dev, b->buf, NULL);
        b->buf = VK_NULL_HANDLE;
        return sift_set_error(SIFT_E_DEVICE_NOMEM,
                              "vulkan: cannot allocate %llu bytes for %s: this context already holds %llu of the device "
                              "heap's %llu bytes",
                              (unsigned long long)req.size, what, (unsigned long long)be->used_bytes,
                              (unsigned long long)be->caps.heap_bytes);
    }
    VkMemoryAllocateFlagsInfo fl = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                    .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .pNext = host ? NULL : &fl,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    r = be->vk.vkAllocateMemory(be->dev, &ai, NULL, &b->mem);
    if (r != VK_SUCCESS) {
        be->vk.vkDestroyBuffer(be->dev, b->buf, NULL);
        b->buf = VK_NULL_HANDLE;
        b->mem = VK_NULL_HANDLE;
        if (kind == VK_MEM_OFFLOAD && (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY))
            return sift_set_error(SIFT_E_DEVICE_NOMEM,
                                  "vulkan: cannot allocate %llu bytes of host memory the device reads for %s (memory type "
                                  "%u, heap of %llu bytes): vkAllocateMemory returned %s",
                                  (unsigned long long)req.size, what, type,
                                  (unsigned long long)be->memprops.memoryHeaps[be->memprops.memoryTypes[type].heapIndex].size,
                                  vk_result_name(r));
        if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
            return sift_set_error(SIFT_E_DEVICE_NOMEM,
                                  "vulkan: cannot allocate %llu bytes for %s (device heap %llu bytes, one allocation at "
                                  "most %llu): vkAllocateMemory returned %s",
                                  (unsigned long long)req.size, what, (unsigned long long)be->caps.heap_bytes,
                                  (unsigned long long)be->caps.max_alloc, vk_result_name(r));
        return vk_fail(r, "vkAllocateMemory");
    }
    be->n_allocs++;
    if (counted) be->used_bytes += req.size;
    b->mem_bytes = counted ? req.size : 0;
    r = be->vk.vkBindBufferMemory(be->dev, b->buf, b->mem, 0);
    if (r != VK_SUCCESS) {
        vk_buf_destroy(be, b);
        return vk_fail(r, "vkBindBufferMemory");
    }
    if (mapped) {
        r = be->vk.vkMapMemory(be->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
        if (r != VK_SUCCESS) {
            vk_buf_destroy(be, b);
            return vk_fail(r, "vkMapMemory");
        }
    }
    if (!host) {
        VkBufferDeviceAddressInfo di = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b->buf};
        b->addr = be->vk.vkGetBufferDeviceAddress(be->dev, &di);
    }
    b->size = size;
    return SIFT_OK;
}

void vk_buf_destroy(vkb *be, vk_buf *b)
{
    if (b->map) be->vk.vkUnmapMemory(be->dev, b->mem);
    if (b->buf) be->vk.vkDestroyBuffer(be->dev, b->buf, NULL);
    if (b->mem) {
        be->vk.vkFreeMemory(be->dev, b->mem, NULL);
        be->n_allocs--;
        be->used_bytes -= b->mem_bytes;
    }
    memset(b, 0, sizeof *b);
}

/* ---- command submission ---- */

/* Waits for the graph run submitted without waiting (vk_graph_submit), if one is in flight: every
 * use of the queue, of the transfer command buffer and of tensor memory comes after it. */
sift_status vk_sync(void *p)
{
    vkb *be = p;
    if (!be->pending) return SIFT_OK;
    be->pending = false;
    VkResult r = be->vk.vkWaitForFences(be->dev, 1, &be->fence, VK_TRUE, UINT64_MAX);
    VkResult r2 = be->vk.vkResetFences(be->dev, 1, &be->fence);
    if (r != VK_SUCCESS) return vk_fail(r, "vkWaitForFences (a submitted graph)");
    if (r2 != VK_SUCCESS) return vk_fail(r2, "vkResetFences");
    return SIFT_OK;
}

sift_status vk_begin(vkb *be, VkCommandBuffer cb)
{
    const sift_status s = vk_sync(be); /* the command buffer may be part of the run in flight */
    if (s != SIFT_OK) return s;
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = be->vk.vkBeginCommandBuffer(cb, &bi);
    return r == VK_SUCCESS ? SIFT_OK : vk_fail(r, "vkBeginCommandBuffer");
}

/* Submits cbs; wait: until they complete, else they stay in flight until vk_sync. */
static sift_status submit(vkb *be, uint32_t n, const VkCommandBuffer *cbs, bool wait)
{
    const sift_status s = vk_sync(be);
    if (s != SIFT_OK) return s;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = n, .pCommandBuffers = cbs};
    VkResult r = be->vk.vkQueueSubmit(be->queue, 1, &si, be->fence);
    if (r != VK_SUCCESS) return vk_fail(r, "vkQueueSubmit");
    if (!wait) {
        be->pending = true;
        return SIFT_OK;
    }
    r = be->vk.vkWaitForFences(be->dev, 1, &be->fence, VK_TRUE, UINT64_MAX);
    VkResult r2 = be->vk.vkResetFences(be->dev, 1, &be->fence);
    if (r != VK_SUCCESS) return vk_fail(r, "vkWaitForFences");
    if (r2 != VK_SUCCESS) return vk_fail(r2, "vkResetFences");
    return SIFT_OK;
}

sift_status vk_submit_wait(vkb *be, VkCommandBuffer cb)
{
    VkResult r = be->vk.vkEndCommandBuffer(cb);
    if (r != VK_SUCCESS) return vk_fail(r, "vkEndCommandBuffer");
    return submit(be, 1, &cb, true);
}

sift_status vk_submit_recorded(vkb *be, VkCommandBuffer first, VkCommandBuffer cb, bool wait)
{
    const VkCommandBuffer cbs[2] = {first, cb};
    return first ? submit(be, 2, cbs, wait) : submit(be, 1, &cb, wait);
}

void vk_barrier(vkb *be, VkCommandBuffer cb)
{
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                         VK_ACCESS_TRANSFER_WRITE_BIT,
    };
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    be->vk.vkCmdPipelineBarrier(cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

static void host_read_barrier(vkb *be, VkCommandBuffer cb)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    be->vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
                                NULL);
}

/* ---- tensors ---- */

static void tensor_release(vkb *be, vk_tensor *vt)
{
    if (!vt) return;
    for (int i = 0; i < vt->n_chunks; i++) vk_buf_destroy(be, &vt->chunks[i]);
    vk_buf_destroy(be, &vt->table);
    for (int i = 0; i < vt->n_joints; i++) {
        vk_buf_destroy(be, &vt->joints[i].buf);
        free(vt->joints[i].addrs);
    }
    free(vt->joints);
    free(vt->chunks);
    free(vt);
}

sift_status vk_tensor_alloc(void *p, sift_tensor *t)
{
    vkb *be = p;
    vk_tensor *vt = calloc(1, sizeof *vt);
    if (!vt) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    vt->dtype = t->dtype;
    vt->widened = t->dtype == SIFT_F16 && !be->caps.f16_storage;
    if (sift_dtype_is_planar(t->dtype) && t->ndim > 0) vt->planar_k = (uint32_t)t->shape[t->ndim - 1];
    vt->host = t->host_memory;
    const VkDeviceSize bytes = (VkDeviceSize)t->nbytes * (vt->widened ? 2u : 1u);
    vt->dev_bytes = vt->host ? 0 : bytes;
    const char *nm = t->name[0] ? t->name : "(unnamed)";
    if (!vt->host && bytes > be->caps.heap_bytes) {
        free(vt);
        return sift_set_error(SIFT_E_LIMIT, "vulkan: tensor '%s' needs %llu bytes; the device heap has %llu", nm,
                              (unsigned long long)bytes, (unsigned long long)be->caps.heap_bytes);
    }
    const VkDeviceSize chunk = (VkDeviceSize)1 << be->caps.chunk_shift;
    const VkDeviceSize n = bytes <= chunk ? 1 : (bytes + chunk - 1) / chunk;
    if (n > be->staging.size / 8 || n > INT32_MAX) {
        free(vt);
        return sift_set_error(SIFT_E_LIMIT, "vulkan: tensor '%s' of %llu bytes would need %llu chunks", nm,
                              (unsigned long long)bytes, (unsigned long long)n);
    }
    vt->chunks = calloc((size_t)n, sizeof *vt->chunks);
    if (!vt->chunks) {
        free(vt);
        return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    }
    char what[128];
    sift_status s = SIFT_OK;
    for (VkDeviceSize i = 0; i < n && s == SIFT_OK; i++) {
        const VkDeviceSize size = n == 1 ? bytes : (i + 1 < n ? chunk : bytes - i * chunk);
        if (n == 1)
            snprintf(what, sizeof what, "tensor '%s'", nm);
        else
            snprintf(what, sizeof what, "chunk %llu of %llu of tensor '%s' (%llu bytes in all)", (unsigned long long)i + 1,
                     (unsigned long long)n, nm, (unsigned long long)bytes);
        s = vk_buf_create(be, size, vt->host ? VK_MEM_OFFLOAD : VK_MEM_DEVICE, &vt->chunks[i], what);
        if (s == SIFT_OK) {
            vt->n_chunks = (int)i + 1;
            if (vt->chunks[i].addr % 16 != 0) vt->unaligned = true;
        }
    }
    if (s == SIFT_OK && n > 1) {
        snprintf(what, sizeof what, "the chunk table of tensor '%s'", nm);
        s = vk_buf_create(be, n * 8, VK_MEM_DEVICE, &vt->table, what);
    }
    if (s != SIFT_OK) {
        tensor_release(be, vt);
        return s;
    }
    vt->shift = n > 1 ? be->caps.chunk_shift : 0;
    vt->chunk_bytes = n > 1 ? chunk : vt->chunks[0].size;

    /* zero the storage (as the CPU backend's calloc) and upload the chunk table */
    VkCommandBuffer cb = be->xfer_cb;
    s = vk_begin(be, cb);
    if (s == SIFT_OK) {
        vk_barrier(be, cb);
        for (int i = 0; i < vt->n_chunks; i++) be->vk.vkCmdFillBuffer(cb, vt->chunks[i].buf, 0, VK_WHOLE_SIZE, 0);
        if (n > 1) {
            uint64_t *tab = be->staging.map;
            for (int i = 0; i < vt->n_chunks; i++) tab[i] = vt->chunks[i].addr;
            VkBufferCopy reg = {.srcOffset = 0, .dstOffset = 0, .size = n * 8};
            be->vk.vkCmdCopyBuffer(cb, be->staging.buf, vt->table.buf, 1, &reg);
        }
        vk_barrier(be, cb);
        s = vk_submit_wait(be, cb);
    }
    if (s != SIFT_OK) {
        tensor_release(be, vt);
        return s;
    }
    t->impl = vt;
    return SIFT_OK;
}

void vk_tensor_free(void *p, sift_tensor *t)
{
    (void)vk_sync(p); /* the run in flight may use it */
    tensor_release(p, t->impl);
    t->impl = NULL;
}

/* Where byte o of the storage lies: its chunk, the offset in that chunk, and how many of `want`
 * bytes from there lie in the chunk. */
static VkDeviceSize chunk_span(const vk_tensor *vt, VkDeviceSize o, VkDeviceSize want, VkDeviceSize *c, VkDeviceSize *in)
{
    *c = vt->shift ? o >> vt->shift : 0;
    *in = vt->shift ? o & (vt->chunk_bytes - 1) : o;
    return want < vt->chunks[*c].size - *in ? want : vt->chunks[*c].size - *in;
}

/* Copies bytes between the staging buffer (from its start) and the storage at byte off, split at
 * chunk boundaries, and waits. */
static sift_status xfer(vkb *be, const vk_tensor *vt, VkDeviceSize off, VkDeviceSize bytes, bool to_device)
{
    VkCommandBuffer cb = be->xfer_cb;
    sift_status s = vk_begin(be, cb);
    if (s != SIFT_OK) return s;
    vk_barrier(be, cb);
    for (VkDeviceSize done = 0; done < bytes;) {
        VkDeviceSize c, in;
        const VkDeviceSize n = chunk_span(vt, off + done, bytes - done, &c, &in);
        VkBufferCopy reg = {.srcOffset = to_device ? done : in, .dstOffset = to_device ? in : done, .size = n};
        if (to_device)
            be->vk.vkCmdCopyBuffer(cb, be->staging.buf, vt->chunks[c].buf, 1, &reg);
        else
            be->vk.vkCmdCopyBuffer(cb, vt->chunks[c].buf, be->staging.buf, 1, &reg);
        done += n;
    }
    if (to_device)
        vk_barrier(be, cb);
    else
        host_read_barrier(be, cb);
    return vk_submit_wait(be, cb);
}

/* A tensor in host memory: copies bytes between dst/src and its mapped chunks at byte off, split at
 * chunk boundaries (no device work: the caller's computes have finished). */
static void host_copy(const vk_tensor *vt, VkDeviceSize off, unsigned char *dst, const unsigned char *src, VkDeviceSize bytes)
{
    for (VkDeviceSize done = 0; done < bytes;) {
        VkDeviceSize c, in;
        const VkDeviceSize n = chunk_span(vt, off + done, bytes - done, &c, &in);
        unsigned char *map = (unsigned char *)vt->chunks[c].map + in;
        if (dst) memcpy(dst + done, map, (size_t)n);
        else memcpy(map, src + done, (size_t)n);
        done += n;
    }
}

static sift_status write_raw(vkb *be, const vk_tensor *vt, VkDeviceSize off, const unsigned char *src, VkDeviceSize bytes)
{
    if (vt->host) {
        host_copy(vt, off, NULL, src, bytes);
        return SIFT_OK;
    }
    for (VkDeviceSize done = 0; done < bytes;) {
        VkDeviceSize n = bytes - done < be->staging.size ? bytes - done : be->staging.size;
        memcpy(be->staging.map, src + done, (size_t)n);
        sift_status s = xfer(be, vt, off + done, n, true);
        if (s != SIFT_OK) return s;
        done += n;
    }
    return SIFT_OK;
}

static sift_status read_raw(vkb *be, const vk_tensor *vt, VkDeviceSize off, unsigned char *dst, VkDeviceSize bytes)
{
    if (vt->host) {
        host_copy(vt, off, dst, NULL, bytes);
        return SIFT_OK;
    }
    for (VkDeviceSize done = 0; done < bytes;) {
        VkDeviceSize n = bytes - done < be->staging.size ? bytes - done : be->staging.size;
        sift_status s = xfer(be, vt, off + done, n, false);
        if (s != SIFT_OK) return s;
        memcpy(dst + done, be->staging.map, (size_t)n);
        done += n;
    }
    return SIFT_OK;
}

/* Half number e of a widened tensor, read back from its f32 storage. */
static sift_status widened_half(vkb *be, const vk_tensor *vt, VkDeviceSize e, uint16_t *h)
{
    float f;
    sift_status s = read_raw(be, vt, e * 4, (unsigned char *)&f, 4);
    if (s == SIFT_OK) *h = sift_float_to_half(f);
    return s;
}

/* A planar tensor's stored bytes, for sift_planar_xfer (which converts them from and to ggml's
 * layout). */
typedef struct {
    vkb *be;
    const vk_tensor *vt;
} planar_io_ctx;

static sift_status planar_io(void *ctx, size_t offset, void *buf, size_t bytes, bool write)
{
    const planar_io_ctx *c = ctx;
    return write ? write_raw(c->be, c->vt, offset, buf, bytes) : read_raw(c->be, c->vt, offset, buf, bytes);
}

static sift_status planar_xfer(vkb *be, const vk_tensor *vt, size_t offset, const void *src, void *dst, size_t bytes)
{
    planar_io_ctx c = {be, vt};
    return sift_planar_xfer(vt->dtype, vt->planar_k, offset, src, dst, bytes, (size_t)be->staging.size, planar_io, &c);
}

sift_status vk_tensor_write(void *p, sift_tensor *t, size_t offset, const void *src, size_t bytes)
{
    vkb *be = p;
    const sift_status synced = vk_sync(be); /* host-visible tensors are written in place */
    if (synced != SIFT_OK) return synced;
    const vk_tensor *vt = t->impl;
    if (vt->planar_k) return planar_xfer(be, vt, offset, src, NULL, bytes);
    if (!vt->widened) return write_raw(be, vt, offset, src, bytes);
    /* widened f16: halves [e0, e1) as f32, keeping the other byte of a half written in part */
    const VkDeviceSize e0 = offset / 2, e1 = (offset + bytes + 1) / 2, per = be->staging.size / 4;
    uint16_t *h = malloc((size_t)per * 2);
    if (!h) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    sift_status s = SIFT_OK;
    for (VkDeviceSize a = e0; a < e1 && s == SIFT_OK; a += per) {
        const VkDeviceSize b = a + per < e1 ? a + per : e1;
        const VkDeviceSize lo = 2 * a > offset ? 2 * a : offset, hi = 2 * b < offset + bytes ? 2 * b : offset + bytes;
        if (lo > 2 * a) s = widened_half(be, vt, a, &h[0]);
        if (s == SIFT_OK && hi < 2 * b) s = widened_half(be, vt, b - 1, &h[b - 1 - a]);
        if (s != SIFT_OK) break;
        memcpy((unsigned char *)h + (lo - 2 * a), (const unsigned char *)src + (lo - offset), (size_t)(hi - lo));
        float *f = be->staging.map;
        for (VkDeviceSize i = 0; i < b - a; i++) f[i] = sift_half_to_float(h[i]);
        s = xfer(be, vt, a * 4, (b - a) * 4, true);
    }
    free(h);
    return s;
}

sift_status vk_tensor_read(void *p, const sift_tensor *t, size_t offset, void *dst, size_t bytes)
{
    vkb *be = p;
    const sift_status synced = vk_sync(be);
    if (synced != SIFT_OK) return synced;
    const vk_tensor *vt = t->impl;
    if (vt->planar_k) return planar_xfer(be, vt, offset, NULL, dst, bytes);
    if (!vt->widened) return read_raw(be, vt, offset, dst, bytes);
    const VkDeviceSize e0 = offset / 2, e1 = (offset + bytes + 1) / 2, per = be->staging.size / 4;
    uint16_t *h = malloc((size_t)per * 2);
    if (!h) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    sift_status s = SIFT_OK;
    for (VkDeviceSize a = e0; a < e1 && s == SIFT_OK; a += per) {
        const VkDeviceSize b = a + per < e1 ? a + per : e1;
        s = xfer(be, vt, a * 4, (b - a) * 4, false);
        if (s != SIFT_OK) break;
        const float *f = be->staging.map;
        for (VkDeviceSize i = 0; i < b - a; i++) h[i] = sift_float_to_half(f[i]);
        const VkDeviceSize lo = 2 * a > offset ? 2 * a : offset, hi = 2 * b < offset + bytes ? 2 * b : offset + bytes;
        memcpy((unsigned char *)dst + (lo - offset), (const unsigned char *)h + (lo - 2 * a), (size_t)(hi - lo));
    }
    free(h);
    return s;
}

/* ---- copies between tensors ---- */

/* The VkBufferCopy regions of one vkCmdCopyBuffer: those between one pair of buffers, gathered
 * while consecutive pieces share the pair. */
typedef struct {
    VkBuffer src, dst;
    uint32_t n;
    VkBufferCopy reg[64];
} copy_batch;

static void copy_flush(vkb *be, VkCommandBuffer cb, copy_batch *batch)
{
    if (batch->n) be->vk.vkCmdCopyBuffer(cb, batch->src, batch->dst, batch->n, batch->reg);
    batch->n = 0;
}

/* Records the copy of `bytes` stored bytes from byte so of src's storage to byte dof of dst's, in
 * pieces that each lie in one chunk of either (a tensor past maxStorageBufferRange is split into
 * chunks, and a region may cross from one to the next on either side at different places). */
static void record_copy(vkb *be, VkCommandBuffer cb, copy_batch *batch, const vk_tensor *src, VkDeviceSize so,
                        const vk_tensor *dst, VkDeviceSize dof, VkDeviceSize bytes)
{
    for (VkDeviceSize done = 0; done < bytes;) {
        VkDeviceSize sc, s_in, dc, d_in;
        VkDeviceSize n = chunk_span(src, so + done, bytes - done, &sc, &s_in);
        const VkDeviceSize dn = chunk_span(dst, dof + done, bytes - done, &dc, &d_in);
        if (dn < n) n = dn;
        const VkBuffer sb = src->chunks[sc].buf, db = dst->chunks[dc].buf;
        if (batch->n == sizeof batch->reg / sizeof *batch->reg || sb != batch->src || db != batch->dst) {
            copy_flush(be, cb, batch);
            batch->src = sb, batch->dst = db;
        }
        batch->reg[batch->n++] = (VkBufferCopy){.srcOffset = s_in, .dstOffset = d_in, .size = n};
        done += n;
    }
}

/* Every region recorded into the transfer command buffer as buffer copies (device and host-visible
 * chunks alike: a host pool's chunks are transfer sources and destinations too), one submission and
 * one fence wait. The barriers around them order the copies after earlier device work and make
 * their bytes visible to later shaders, transfers and host reads of host-visible memory. */
sift_status vk_tensor_copy(void *p, const sift_copy_region *regions, size_t n)
{
    vkb *be = p;
    for (size_t i = 0; i < n; i++) {
        const vk_tensor *src = regions[i].src->impl, *dst = regions[i].dst->impl;
        if (!src || !dst)
            return sift_set_error(SIFT_E_INVALID, "vulkan: copy %zu of %zu: tensor '%s' has no storage", i + 1, n,
                                  (!src ? regions[i].src : regions[i].dst)->name);
        if (src->widened != dst->widened || src->planar_k || dst->planar_k)
            return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: copy %zu of %zu: '%s' and '%s' are stored differently", i + 1, n,
                                  regions[i].src->name, regions[i].dst->name);
    }
    VkCommandBuffer cb = be->xfer_cb;
    sift_status s = vk_begin(be, cb); /* waits for a run in flight */
    if (s != SIFT_OK) return s;
    vk_barrier(be, cb);
    copy_batch batch = {.n = 0};
    for (size_t i = 0; i < n; i++) {
        const sift_copy_region *r = &regions[i];
        const vk_tensor *src = r->src->impl, *dst = r->dst->impl;
        const VkDeviceSize scale = src->widened ? 2u : 1u; /* an f16 tensor stored as f32: two stored bytes a byte */
        record_copy(be, cb, &batch, src, r->src_offset * scale, dst, r->dst_offset * scale, r->bytes * scale);
    }
    copy_flush(be, cb, &batch);
    vk_barrier(be, cb);
    host_read_barrier(be, cb);
    return vk_submit_wait(be, cb);
}

/* ---- what the shaders see ---- */

static VkDeviceSize storage_offset(const sift_tensor *t)
{
    const vk_tensor *vt = t->impl;
    return (VkDeviceSize)t->offset * (vt->widened ? 2u : 1u);
}

sift_status vk_tensor_ref(const sift_tensor *t, vk_tref *out)
{
    const vk_tensor *vt = t->impl;
    if (!vt) return sift_set_error(SIFT_E_INVALID, "vulkan: tensor '%s' has no storage", t->name);
    if (vt->widened && t->dtype != SIFT_F16)
        return sift_set_error(SIFT_E_UNSUPPORTED,
                              "vulkan: '%s' views an f16 tensor as %s, but this device stores f16 tensors as f32",
                              t->name[0] ? t->name : "(unnamed)", sift_dtype_name(t->dtype));
    if (vt->planar_k && t->dtype != vt->dtype)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: '%s' views a %s tensor as %s, but its rows are stored planar",
                              t->name[0] ? t->name : "(unnamed)", sift_dtype_name(vt->dtype), sift_dtype_name(t->dtype));
    out->addr = vt->shift ? vt->table.addr : vt->chunks[0].addr;
    out->meta = ((uint64_t)vt->shift << 56) | (uint64_t)storage_offset(t);
    return SIFT_OK;
}

/* The chunk table that reaches the device pool `dev` and then the host pool `host` (their chunks of
 * 2^chunk_shift bytes, or one chunk of at most that), made on first use and kept by the host pool
 * for as long as it lives (recorded graphs hold its address). A pool's chunks are fixed, so a table
 * whose device entries match is the one. */
static sift_status joint_table(vkb *be, const vk_tensor *dev, vk_tensor *host, const vk_joint_table **out)
{
    const uint32_t n = (uint32_t)(dev->n_chunks + host->n_chunks);
    for (int i = 0; i < host->n_joints; i++) {
        const vk_joint_table *j = &host->joints[i];
        bool same = j->first_host == (uint32_t)dev->n_chunks;
        for (int c = 0; same && c < dev->n_chunks; c++) same = j->addrs[c] == dev->chunks[c].addr;
        if (same) {
            *out = j;
            return SIFT_OK;
        }
    }
    if ((VkDeviceSize)n * 8 > be->staging.size)
        return sift_set_error(SIFT_E_LIMIT, "vulkan: a paged view of two pools needs %u chunks", n);
    vk_joint_table *grown = realloc(host->joints, (size_t)(host->n_joints + 1) * sizeof *grown);
    if (!grown) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    host->joints = grown;
    vk_joint_table *j = &host->joints[host->n_joints];
    memset(j, 0, sizeof *j);
    j->addrs = malloc((size_t)n * sizeof *j->addrs);
    if (!j->addrs) return sift_set_error(SIFT_E_NOMEM, "vulkan: out of host memory");
    for (int c = 0; c < dev->n_chunks; c++) j->addrs[c] = dev->chunks[c].addr;
    for (int c = 0; c < host->n_chunks; c++) j->addrs[dev->n_chunks + c] = host->chunks[c].addr;
    j->n = n;
    j->first_host = (uint32_t)dev->n_chunks;
    sift_status s = vk_buf_create(be, (VkDeviceSize)n * 8, VK_MEM_DEVICE, &j->buf, "the chunk table of two KV pools");
    VkCommandBuffer cb = be->xfer_cb;
    if (s == SIFT_OK) s = vk_begin(be, cb);
    if (s == SIFT_OK) {
        memcpy(be->staging.map, j->addrs, (size_t)n * 8);
        VkBufferCopy reg = {.srcOffset = 0, .dstOffset = 0, .size = (VkDeviceSize)n * 8};
        vk_barrier(be, cb);
        be->vk.vkCmdCopyBuffer(cb, be->staging.buf, j->buf.buf, 1, &reg);
        vk_barrier(be, cb);
        s = vk_submit_wait(be, cb);
    }
    if (s != SIFT_OK) {
        vk_buf_destroy(be, &j->buf);
        free(j->addrs);
        return s;
    }
    host->n_joints++;
    *out = j;
    return SIFT_OK;
}

sift_status vk_kv_ref(vkb *be, const sift_tensor *t, vk_kvref *out)
{
    memset(out, 0, sizeof *out);
    sift_status s = vk_tensor_ref(t, &out->t);
    if (s != SIFT_OK) return s;
    const int64_t prow = t->stride[1] > 0 ? t->stride[0] / t->stride[1] : 0;
    const int64_t hrows = t->host_pool ? t->host_pool->shape[1] : 0;
    if (t->shape[1] > UINT32_MAX || prow + hrows > UINT32_MAX)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: K/V tensor '%s' has more than 2^32 rows per KV head", t->name);
    out->rows = (uint32_t)t->shape[1];
    out->prow = (uint32_t)prow;
    if (t->pages) {
        s = vk_tensor_ref(t->pages, &out->pages);
        if (s != SIFT_OK) return s;
        out->pshift = (uint32_t)sift_kv_page_shift(t->page_size);
        out->npages = (uint32_t)sift_kv_pool_pages(t);
    }
    if (t->host_pool) { /* two pools: one table over both (common.glsl kv_row) */
        vk_tensor *host = t->host_pool->impl;
        const vk_tensor *dev = t->impl;
        if (!host) return sift_set_error(SIFT_E_INVALID, "vulkan: tensor '%s' has no storage", t->host_pool->name);
        if (host->widened != dev->widened)
            return sift_set_error(SIFT_E_INVALID, "vulkan: the two pools of '%s' are stored alike", t->name);
        const vk_joint_table *j = NULL;
        s = joint_table(be, dev, host, &j);
        if (s != SIFT_OK) return s;
        if (j->first_host >= (1u << 24))
            return sift_set_error(SIFT_E_LIMIT, "vulkan: the device pool of '%s' has %u chunks (at most 2^24)", t->name,
                                  j->first_host);
        out->t.addr = j->buf.addr;
        out->t.meta = (uint64_t)be->caps.chunk_shift << 56; /* pools are not views: offset 0 */
        out->pshift |= j->first_host << 8;
    }
    return SIFT_OK;
}

sift_status vk_tensor_addr(const sift_tensor *t, uint64_t byte, uint64_t *out)
{
    const vk_tensor *vt = t->impl;
    if (!vt) return sift_set_error(SIFT_E_INVALID, "vulkan: tensor '%s' has no storage", t->name);
    if (vt->widened)
        return sift_set_error(SIFT_E_UNSUPPORTED, "vulkan: '%s' lies in an f16 tensor stored as f32", t->name);
    const uint64_t o = storage_offset(t) + byte;
    const uint64_t c = vt->shift ? o >> vt->shift : 0;
    if (c >= (uint64_t)vt->n_chunks) return sift_set_error(SIFT_E_INVALID, "vulkan: byte %llu outside '%s'", (unsigned long long)byte, t->name);
    *out = vt->chunks[c].addr + (vt->shift ? o & (vt->chunk_bytes - 1) : o);
    return SIFT_OK;
}

bool vk_rows_aligned(const sift_tensor *t)
{
    /* rows are whole 16-byte vectors; each vector is resolved through the chunk table on its own
     * and never straddles a chunk (2^shift >= 4096) once the storage offset is 16-byte aligned */
    const vk_tensor *vt = t->impl;
    const vk_tensor *host = t->host_pool ? t->host_pool->impl : NULL;
    return !vt->unaligned && (!host || !host->unaligned) && storage_offset(t) % 16 == 0;
}

bool vk_tensor_is_f16(const sift_tensor *t)
{
    const vk_tensor *vt = t->impl;
    return t->dtype == SIFT_F16 && !vt->widened;
}
