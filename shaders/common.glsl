// Shared by every sift compute shader: tensor addressing through buffer device addresses, the
// K/V row function, the select order key and workgroup reductions.
//
// A tensor is a list of chunks (each its own VkBuffer + VkDeviceMemory, at most 2^shift bytes). The
// host passes a TRef per tensor:
//   addr: shift == 0: the address of the one chunk; shift > 0: the address of a table of chunk
//         addresses (uint64 each);
//   meta: bits 56..63 shift, bits 0..55 the byte offset of the tensor's first element in that
//         storage (non-zero for views).
// Byte offset o of the storage lives at table[o >> shift] + (o & (2^shift - 1)). Every access goes
// through saddr(), so no tensor is limited by maxStorageBufferRange or by one allocation.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_KHR_shader_subgroup_vote : require

struct TRef {
    uint64_t addr;
    uint64_t meta;
};

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ChunkTable { uint64_t a[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32Ref { float v; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32Ref { uint v; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer V2Ref { vec2 v; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4Ref { uvec4 v; };

const uint64_t META_OFFSET_MASK = 0x00FFFFFFFFFFFFFFul;

// Device address of byte o of the tensor's storage (o counts from the storage's start).
uint64_t saddr(TRef t, uint64_t o)
{
    uint shift = uint(t.meta >> 56);
    if (shift == 0u) return t.addr + o;
    return ChunkTable(t.addr).a[uint(o >> shift)] + (o & ((uint64_t(1) << shift) - 1ul));
}

// Device address of byte `off` of the tensor (off counts from its first element).
uint64_t taddr(TRef t, uint64_t off) { return saddr(t, (t.meta & META_OFFSET_MASK) + off); }

float ld_f32(TRef t, uint64_t i) { return F32Ref(taddr(t, i * 4ul)).v; }
uint ld_u32(TRef t, uint64_t i) { return U32Ref(taddr(t, i * 4ul)).v; }
void st_f32(TRef t, uint64_t i, float x) { F32Ref(taddr(t, i * 4ul)).v = x; }
void st_u32(TRef t, uint64_t i, uint x) { U32Ref(taddr(t, i * 4ul)).v = x; }

// 16 bytes at byte `off` of the tensor. aligned: the caller knows the address is 16-byte aligned and
// the 16 bytes lie in one chunk (one vector load). Otherwise: five 32-bit loads, each resolved on
// its own, and a funnel shift (views may start at any 2-byte offset).
uvec4 ld_16(TRef t, uint64_t off, bool aligned)
{
    if (aligned) return U4Ref(taddr(t, off)).v;
    uint64_t o = (t.meta & META_OFFSET_MASK) + off;
    uint64_t a = o & ~3ul;
    uint w0 = U32Ref(saddr(t, a)).v, w1 = U32Ref(saddr(t, a + 4ul)).v;
    uint w2 = U32Ref(saddr(t, a + 8ul)).v, w3 = U32Ref(saddr(t, a + 12ul)).v;
    if ((o & 3ul) == 0ul) return uvec4(w0, w1, w2, w3);
    uint w4 = U32Ref(saddr(t, a + 16ul)).v;
    return uvec4((w0 >> 16) | (w1 << 16), (w1 >> 16) | (w2 << 16), (w2 >> 16) | (w3 << 16), (w3 >> 16) | (w4 << 16));
}

// A K/V tensor [Hkv][rows][D], paged or not (backend.h sift_kv_phys_row, vk_memory.c vk_kv_ref).
//   t:      the storage of the rows (a paged view: its pool [Hkv][prow][D]; a paged view of two pools:
//           a chunk table of the device pool's chunks, then the host pool's [Hkv][hrow][D]);
//   pages:  the page table i32 [n_pages] of a paged view (addr 0: not paged);
//   rows:   logical rows per KV head (positions >= rows are absent);
//   prow:   physical rows per KV head of the (device) pool (the stride between KV heads, in rows);
//   pshift: bits 0..7 log2 of the page size P; bits 8..31, two pools: the chunk of t's table where
//           the host pool begins;
//   npages: the pages of the pool(s): (prow + hrow) >> P's log2.
struct KVRef {
    TRef t;
    TRef pages;
    uint rows;
    uint prow;
    uint pshift;
    uint npages;
};

// The byte offset (from kv.t's first element) of logical row `pos` of KV head `g`, rows of
// row_bytes bytes; false where the row is absent: outside the tensor, or on a page the table maps
// outside the pool (a negative i32 reads as a huge uint). The one place that knows where a K/V row
// lives: paging (and batching) change this function only. The page table is read here, at run time.
// Physical rows past prow are the host pool's (sift_kv_pool_row): they lie after the device pool's
// chunks in kv.t's table, so every load through taddr() reaches either pool.
bool kv_row(KVRef kv, uint g, uint pos, uint row_bytes, out uint64_t off)
{
    off = 0ul;
    if (pos >= kv.rows) return false;
    uint row = pos;
    const uint ps = kv.pshift & 255u;
    if (kv.pages.addr != 0ul) {
        const uint page = ld_u32(kv.pages, uint64_t(pos >> ps));
        if (page >= kv.npages) return false;
        row = (page << ps) | (pos & ((1u << ps) - 1u));
    }
    if (row >= kv.prow) { // only with two pools: the host pool's row row - prow
        const uint hrow = (kv.npages << ps) - kv.prow;
        off = (uint64_t(kv.pshift >> 8u) << uint(kv.t.meta >> 56)) + (uint64_t(g) * hrow + (row - kv.prow)) * uint64_t(row_bytes);
        return true;
    }
    off = (uint64_t(g) * kv.prow + row) * uint64_t(row_bytes);
    return true;
}

// Predicated nodes (sift_graph_skip_if): flag is the device address of the f32 predicate (0: none);
// every dispatch of a predicated node returns at once, uniformly, when it is non-zero.
bool skipped(uint64_t flag) { return flag != 0ul && F32Ref(flag).v != 0.0; }

// backend.h sift_order_key: larger float, larger key; -0 equals +0.
uint order_key(uint bits)
{
    if ((bits & 0x7fffffffu) == 0u) bits = 0u;
    return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}
