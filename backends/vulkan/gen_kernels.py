#!/usr/bin/env python3
"""The Vulkan backend's kernel table and push-constant checks, generated from the compiled shaders.

Run by Meson (backends/vulkan/meson.build; a build-time Python script, as Meson itself is Python)
with the SPIR-V of every shader of its list, in the list's order:

    gen_kernels.py OUTDIR name.spv...

and writes into OUTDIR:

  vk_kernels.h     the vk_kernel enum: VK_K_<NAME> per shader, in the list's order, and VK_K_COUNT
  vk_kernels.c     each shader's SPIR-V words and vk_kernel_table (vk_internal.h): the code, the
                   name, and the workgroup size the shader declares (0 where specialization
                   constant 0, WGS, gives it)
  vk_push_check.c  _Static_asserts that each C image in vk_push.h lays out every field as the
                   shader does: its byte offset and its type, one field at a time (nested structs
                   such as TRef down to their scalars), and that the C struct is no longer than the
                   block (rounded up to its alignment)

The blocks checked: each shader's push_constant block, and every other block whose name is in
lower case (attend.comp's attend_params); each is named after its C struct (push_score ...). A
GLSL member's trailing underscore is dropped to find its C field: in and out are GLSL keywords.
The SPIR-V, not the GLSL, is read: it holds every member of a block with the offset the driver
uses, whatever the shader reads.
"""
import os
import struct
import sys

# SPIR-V opcodes, decorations and enumerants used here (the SPIR-V specification, section 3)
OP_NAME, OP_MEMBER_NAME, OP_EXECUTION_MODE = 5, 6, 16
OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER = 21, 22, 28, 30, 32
OP_CONSTANT, OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_COMPOSITE, OP_VARIABLE = 43, 44, 51, 59
OP_DECORATE, OP_MEMBER_DECORATE = 71, 72
DEC_SPEC_ID, DEC_BLOCK, DEC_ARRAY_STRIDE, DEC_BUILTIN, DEC_OFFSET = 1, 2, 6, 11, 35
BUILTIN_WORKGROUP_SIZE = 25
MODE_LOCAL_SIZE = 17
STORAGE_PUSH_CONSTANT = 9

C_SCALARS = {('int', 32, 0): 'uint32_t', ('int', 32, 1): 'int32_t', ('int', 64, 0): 'uint64_t',
             ('int', 64, 1): 'int64_t', ('float', 32, 0): 'float'}


class Fail(Exception):
    pass


def string_at(words, i):
    raw = b''.join(struct.pack('<I', w) for w in words[i:])
    return raw[:raw.index(b'\0')].decode()


class Module:
    """What the generator needs of one SPIR-V module."""

    def __init__(self, path):
        data = open(path, 'rb').read()
        if len(data) < 20 or len(data) % 4:
            raise Fail(f'{path}: not SPIR-V')
        order = '<' if struct.unpack('<I', data[:4])[0] == 0x07230203 else '>'
        words = struct.unpack(f'{order}{len(data) // 4}I', data)
        if words[0] != 0x07230203:
            raise Fail(f'{path}: not SPIR-V')
        self.words = words
        self.names, self.member_names = {}, {}
        self.types, self.constants, self.composites = {}, {}, {}
        self.decorations, self.member_offsets, self.strides = {}, {}, {}
        self.push_var_type = None
        self.local_size = None
        pointers, i = {}, 5
        while i < len(words):
            count, op = words[i] >> 16, words[i] & 0xffff
            if count == 0:
                raise Fail(f'{path}: malformed instruction')
            a = words[i + 1:i + count]
            if op == OP_NAME:
                self.names[a[0]] = string_at(words, i + 2)
            elif op == OP_MEMBER_NAME:
                self.member_names[(a[0], a[1])] = string_at(words, i + 3)
            elif op == OP_EXECUTION_MODE and a[1] == MODE_LOCAL_SIZE:
                self.local_size = a[2]
            elif op == OP_TYPE_INT:
                self.types[a[0]] = ('int', a[1], a[2])
            elif op == OP_TYPE_FLOAT:
                self.types[a[0]] = ('float', a[1], 0)
            elif op == OP_TYPE_ARRAY:
                self.types[a[0]] = ('array', a[1], a[2])
            elif op == OP_TYPE_STRUCT:
                self.types[a[0]] = ('struct', tuple(a[1:]))
            elif op == OP_TYPE_POINTER:
                pointers[a[0]] = (a[1], a[2])
            elif op == OP_CONSTANT:
                self.constants[a[1]] = a[2]
            elif op in (OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_COMPOSITE):
                self.composites[a[1]] = (op, tuple(a[2:]))
            elif op == OP_VARIABLE and a[2] == STORAGE_PUSH_CONSTANT:
                self.push_var_type = pointers[a[0]][1]
            elif op == OP_DECORATE:
                self.decorations.setdefault(a[0], []).append(tuple(a[1:]))
                if a[1] == DEC_ARRAY_STRIDE:
                    self.strides[a[0]] = a[2]
            elif op == OP_MEMBER_DECORATE and a[2] == DEC_OFFSET:
                self.member_offsets[(a[0], a[1])] = a[3]
            i += count

    def decorated(self, ident, decoration):
        return [d for d in self.decorations.get(ident, []) if d[0] == decoration]

    def workgroup_size(self, shader):
        """The workgroup's x size, or 0 where specialization constant 0 gives it."""
        for ident, decs in self.decorations.items():
            if (DEC_BUILTIN, BUILTIN_WORKGROUP_SIZE) in decs and ident in self.composites:
                op, parts = self.composites[ident]
                if op == OP_SPEC_CONSTANT_COMPOSITE and self.decorated(parts[0], DEC_SPEC_ID):
                    if self.decorated(parts[0], DEC_SPEC_ID)[0][1] != 0:
                        raise Fail(f'{shader}: the workgroup size must be specialization constant 0 (WGS)')
                    return 0
        if not self.local_size:
            raise Fail(f'{shader}: no workgroup size')
        return self.local_size

    def blocks(self):
        """The structs to check against C: the push-constant block, and blocks named in lower case."""
        out = []
        for ident, decs in self.decorations.items():
            name = self.names.get(ident, '')
            if (DEC_BLOCK,) in decs and ident != self.push_var_type and name[:1].islower():
                out.append(ident)
        out.sort(key=lambda t: self.names[t])
        if self.push_var_type is not None:
            out.insert(0, self.push_var_type)
        return out

    def fields(self, struct_id, base, path, shader):
        """(C path, byte offset, C type, element count or None) of every scalar of a struct."""
        for m, member_type in enumerate(self.types[struct_id][1]):
            glsl = self.member_names.get((struct_id, m), '')
            c_name = glsl[:-1] if glsl.endswith('_') else glsl
            if not c_name:
                raise Fail(f'{shader}: member {m} of {self.names.get(struct_id)} has no name')
            offset = base + self.member_offsets[(struct_id, m)]
            member = f'{path}.{c_name}' if path else c_name
            t = self.types[member_type]
            if t[0] == 'struct':
                yield from self.fields(member_type, offset, member, shader)
            elif t[0] == 'array':
                elem = self.types[t[1]]
                if elem[:3] not in C_SCALARS or self.strides.get(member_type) != elem[1] // 8:
                    raise Fail(f'{shader}: {member}: only arrays of packed scalars have a C image')
                yield member, offset, C_SCALARS[elem[:3]], self.constants[t[2]]
            elif t[:3] in C_SCALARS:
                yield member, offset, C_SCALARS[t[:3]], None
            else:
                raise Fail(f'{shader}: {member}: a type with no C image here (vectors and matrices: use scalars)')

    def size(self, type_id):
        t = self.types[type_id]
        if t[0] == 'struct':
            return max((self.member_offsets[(type_id, m)] + self.size(mt) for m, mt in enumerate(t[1])), default=0)
        if t[0] == 'array':
            return self.strides[type_id] * self.constants[t[2]]
        return t[1] // 8


def c_words(words):
    lines = []
    for i in range(0, len(words), 8):
        lines.append('    ' + ', '.join(f'0x{w:08x}u' for w in words[i:i + 8]) + ',')
    return '\n'.join(lines)


def generate(outdir, spv_paths):
    header = '/* Generated by backends/vulkan/gen_kernels.py from the shader list of backends/vulkan/meson.build. */\n'
    names = [os.path.basename(p)[:-len('.spv')] for p in spv_paths]
    modules = [Module(p) for p in spv_paths]

    enum = [header, '#ifndef SIFT_VK_KERNELS_H\n#define SIFT_VK_KERNELS_H\n\n',
            '/* The compute kernels, one pipeline (per specialization) each: shaders/<name>.comp. */\n',
            'typedef enum vk_kernel {\n']
    enum += [f'    VK_K_{n.upper()},\n' for n in names]
    enum += ['    VK_K_COUNT\n} vk_kernel;\n\n#endif\n']

    table = [header, '#include "backends/vulkan/vk_internal.h"\n']
    for n, mod in zip(names, modules):
        table.append(f'\nstatic const uint32_t spv_{n}[] = {{\n{c_words(mod.words)}\n}};\n')
    table.append('\nconst vk_kernel_code vk_kernel_table[VK_K_COUNT] = {\n')
    for n, mod in zip(names, modules):
        local = mod.workgroup_size(n + '.comp')
        table.append(f'    [VK_K_{n.upper()}] = {{spv_{n}, sizeof spv_{n}, "{n}", {local}}},\n')
    table.append('};\n')

    check = [header, '#include "backends/vulkan/vk_push.h"\n\n#include <stddef.h>\n']
    for n, mod in zip(names, modules):
        shader = n + '.comp'
        for block in mod.blocks():
            c_struct = mod.names.get(block, '')
            if not c_struct[:1].islower():
                raise Fail(f'{shader}: name its push_constant block after its C struct in vk_push.h, not "{c_struct}"')
            check.append(f'\n/* {shader}: {c_struct} */\n')
            for member, offset, c_type, count in mod.fields(block, 0, '', shader):
                where = f'{shader}: {c_struct}.{member}'
                lvalue = f'(({c_struct} *)0)->{member}'
                check.append(f'_Static_assert(offsetof({c_struct}, {member}) == {offset}, "{where} is at byte {offset}");\n')
                if count is None:
                    check.append(f'_Static_assert(_Generic({lvalue}, {c_type}: 1, default: 0), "{where} has type {c_type}");\n')
                else:
                    check.append(f'_Static_assert(_Generic({lvalue}[0], {c_type}: 1, default: 0) && '
                                 f'sizeof {lvalue} == {count} * sizeof({c_type}), "{where} has type {c_type} [{count}]");\n')
            size = mod.size(block)
            check.append(f'_Static_assert(sizeof({c_struct}) == ({size} + _Alignof({c_struct}) - 1) / _Alignof({c_struct}) '
                         f'* _Alignof({c_struct}), "{shader}: {c_struct} has {size} bytes");\n')
            if block == mod.push_var_type:
                check.append(f'_Static_assert(sizeof({c_struct}) <= VK_PUSH_MAX, "{shader}: {c_struct} exceeds the push '
                             f'constants");\n')

    for fname, text in (('vk_kernels.h', enum), ('vk_kernels.c', table), ('vk_push_check.c', check)):
        with open(os.path.join(outdir, fname), 'w') as f:
            f.write(''.join(text))


if __name__ == '__main__':
    if len(sys.argv) < 3:
        sys.exit('usage: gen_kernels.py OUTDIR name.spv...')
    try:
        generate(sys.argv[1], sys.argv[2:])
    except Fail as e:
        sys.exit(f'gen_kernels.py: {e}')
    except KeyError as e:
        sys.exit(f'gen_kernels.py: SPIR-V this script does not read (no entry for id {e})')
