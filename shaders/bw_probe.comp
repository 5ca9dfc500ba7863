#version 460
// sift-vk-bwprobe's kernel (backends/vulkan/bw_probe.c): streams a buffer of 16-byte words and sums
// them, to measure the device's read bandwidth by how the buffer is allocated and bound. Not one of
// the engine's kernels: it is compiled three ways into the probe alone (backends/vulkan/meson.build).
//
//   (default)  reads through storage-buffer descriptors: binding 0 is an array of NB descriptors
//              ("pieces"), each 2^shift words; word j is bufs[j >> shift].w[j & mask]
//   -DBDA      reads through buffer device addresses, as the engine's kernels do (common.glsl's
//              U4Ref): word j is at table[j >> shift] + (j & mask) * 16, or at the push constants'
//              base address where NB is 1
//   -DFILL     writes the pattern into descriptor pc.piece: its word i is global word first + i
//
// Reads: a grid-stride loop, UNROLL loads in flight per invocation, coalesced (invocation i of a
// workgroup reads word base + i); each invocation sums the four components of every word it reads
// (mod 2^32), the workgroup adds its invocations' sums and writes one partial sum per workgroup to
// out[slot * groups + workgroup]; the host adds them and compares with its own sum of the pattern.
// pc.passes > 1 reads the whole buffer that many times in one dispatch.
//
// A workgroup's 256 consecutive words never straddle two pieces (the host makes every piece a
// multiple of 4 KiB), so the descriptor index is uniform over the workgroup, as Vulkan requires of
// an index into a descriptor array without the non-uniform qualifier.
#extension GL_EXT_control_flow_attributes : require
#ifdef BDA
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_buffer_reference : require
#endif

layout(local_size_x = 256) in;

layout(constant_id = 0) const uint NB = 1;      // descriptors in binding 0 (BDA: entries of the table)
layout(constant_id = 1) const uint UNROLL = 4;  // loads issued before their words are summed

layout(push_constant) uniform push_bw {
    uint words;     // 16-byte words per pass (FILL: words of this piece)
    uint shift;     // log2 of the words per piece (NB > 1)
    uint passes;    // passes over the buffer
    uint slot;      // where this dispatch's partial sums go: out[slot * groups + workgroup]
    uint piece;     // FILL: the descriptor written
    uint first;     // FILL: the global index of the piece's first word
    uint base_lo;   // BDA, NB = 1: the buffer's device address
    uint base_hi;
} pc;

// the pattern: word w's uint c (of 4) is pat(4 w + c); bw_probe.c computes the same
uint pat(uint i)
{
    i ^= 0x9e3779b9u;
    i *= 0x85ebca6bu;
    i ^= i >> 13;
    i *= 0xc2b2ae35u;
    i ^= i >> 16;
    return i;
}

#ifdef FILL
layout(set = 0, binding = 0, std430) writeonly buffer Words { uvec4 w[]; } bufs[NB];

void main()
{
    const uint stride = gl_NumWorkGroups.x * 256u;
    for (uint i = gl_GlobalInvocationID.x; i < pc.words; i += stride) {
        const uint g = (pc.first + i) * 4u;
        bufs[pc.piece].w[i] = uvec4(pat(g), pat(g + 1u), pat(g + 2u), pat(g + 3u));
    }
}
#else
layout(set = 0, binding = 1, std430) writeonly buffer Partials { uint o[]; } outp;

#ifdef BDA
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer U4Ref { uvec4 v; };
layout(set = 0, binding = 2, std430) readonly buffer Table { uint64_t a[]; } table;

uvec4 load(uint j, uint mask)
{
    if (NB == 1u) return U4Ref((uint64_t(pc.base_hi) << 32 | uint64_t(pc.base_lo)) + uint64_t(j) * 16ul).v;
    return U4Ref(table.a[j >> pc.shift] + uint64_t(j & mask) * 16ul).v;
}
#else
layout(set = 0, binding = 0, std430) readonly restrict buffer Words { uvec4 w[]; } bufs[NB];

uvec4 load(uint j, uint mask)
{
    if (NB == 1u) return bufs[0].w[j];
    return bufs[j >> pc.shift].w[j & mask];
}
#endif

shared uint sh[256];

void main()
{
    const uint lid = gl_LocalInvocationID.x;
    const uint stride = gl_NumWorkGroups.x * 256u;
    const uint mask = (1u << (pc.shift & 31u)) - 1u;
    uint acc = 0u;
    for (uint p = 0u; p < pc.passes; p++) {
        for (uint i = gl_WorkGroupID.x * 256u + lid; i < pc.words; i += stride * UNROLL) {
            uvec4 v[UNROLL];
            [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
                const uint j = i + u * stride;
                v[u] = uvec4(0u);
                if (j < pc.words) v[u] = load(j, mask);
            }
            [[unroll]] for (uint u = 0u; u < UNROLL; u++) acc += v[u].x + v[u].y + v[u].z + v[u].w;
        }
    }
    sh[lid] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier();
    }
    if (lid == 0u) outp.o[pc.slot * gl_NumWorkGroups.x + gl_WorkGroupID.x] = sh[0];
}
#endif
