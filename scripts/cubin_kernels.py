#!/usr/bin/env python3
"""Compare the machine code of the kernels in two sets of cubins, kernel by kernel.

usage: cubin_kernels.py BASE_DIR NEW_DIR

Each DIR holds <name>.cubin files (nvcc -cubin). A kernel's code is its ELF section .text.<mangled name>; two
kernels are the same when those bytes are equal. Prints one line per cubin (and the kernels that differ or
appear in one set only) and a summary; exit status 0 when every kernel of every cubin is the same.
Reads the ELF headers itself (64-bit little-endian, as nvcc writes them): no CUDA tool beyond nvcc is needed.
"""
import os, struct, subprocess, sys


def kernel_code(path):
    data = open(path, 'rb').read()
    if data[:4] != b'\x7fELF' or data[4] != 2 or data[5] != 1:
        sys.exit(f'{path}: not a 64-bit little-endian ELF file')
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    sections = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]

    def name(off):
        end = data.index(b'\0', names_at + off)
        return data[names_at + off:end].decode()

    code = {}
    for sh_name, _, _, _, offset, size, *_ in sections:
        n = name(sh_name)
        if n.startswith('.text.'):
            code[n[len('.text.'):]] = data[offset:offset + size]
    return code


def demangle(names):
    try:
        out = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True, check=True)
        return out.stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return names


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    base_dir, new_dir = sys.argv[1:]
    files = sorted(set(f for d in (base_dir, new_dir) for f in os.listdir(d) if f.endswith('.cubin')))
    n_kernels = n_bad = 0
    for f in files:
        pa, pb = os.path.join(base_dir, f), os.path.join(new_dir, f)
        if not os.path.exists(pa) or not os.path.exists(pb):
            print(f'{f}: only in {base_dir if os.path.exists(pa) else new_dir}')
            n_bad += 1
            continue
        a, b = kernel_code(pa), kernel_code(pb)
        changed = sorted(k for k in a if k in b and a[k] != b[k])
        only = sorted(set(a) ^ set(b))
        n_kernels += len(set(a) | set(b))
        n_bad += len(changed) + len(only)
        if not changed and not only:
            print(f'{f}: {len(a)} kernels, same code')
            continue
        print(f'{f}: {len(changed)} kernels with other code, {len(only)} in one set only')
        for k, d in zip(changed, demangle(changed)):
            print(f'  other code ({len(a[k]) // 16} -> {len(b[k]) // 16} instructions): {d}')
        for k, d in zip(only, demangle(only)):
            print(f'  only in {base_dir if k in a else new_dir}: {d}')
    print(f'{n_kernels - n_bad} of {n_kernels} kernels have the same machine code' if n_bad else
          f'all {n_kernels} kernels have the same machine code')
    return 1 if n_bad else 0


if __name__ == '__main__':
    sys.exit(main())
