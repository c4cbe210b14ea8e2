#!/usr/bin/env python3
"""Lists the GPU code an executable or object embeds, and checks it against TANDEM_CUDA_ARCHS.

nvcc puts one fat binary container per CUDA translation unit into the ELF section `.nv_fatbin`
(fatbinary_section.h in the CUDA toolkit names the section); a linked program holds them one after
the other. A container is a 16-byte header (magic 0xBA55ED50, version 1, header size 16, u64 size of
what follows) and entries, each a header (u16 kind: 1 PTX, 2 ELF/SASS; u32 header size at byte 4;
u64 payload size at byte 8; u32 architecture at byte 28, e.g. 90 for sm_90 or compute_90) and its
payload. This layout is not documented by NVIDIA: it is what cuobjdump --list-elf / --list-ptx
reads (scripts/gpu-check.sh's `archs` stage prints both side by side on the device machine, where
the toolkit has cuobjdump; this machine's has none).

  fatbin_archs.py FILE                     prints each container's SASS and PTX architectures
  fatbin_archs.py FILE --expect "80-real;86-real;89-real;90-real;100-real;120"
      exit 0 when every container holds SASS for exactly the real architectures (NN-real or NN)
      and PTX for exactly the virtual ones (NN-virtual or NN), else 1 naming the difference;
      2 for a file that is not a 64-bit little-endian ELF or has no .nv_fatbin section.
Only the Python standard library.
"""
import argparse
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2


def nv_fatbin_sections(data):
    """The bytes of every section named .nv_fatbin of an ELF64 little-endian file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shnum == 0:
        raise ValueError("the ELF file has no section headers")

    def section(i):
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size
        name, typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, typ, off, size

    _, _, str_off, str_size = section(shstrndx)
    names = data[str_off:str_off + str_size]
    out = []
    for i in range(shnum):
        name, typ, off, size = section(i)
        end = names.index(b"\0", name)
        if names[name:end] == b".nv_fatbin" and typ != 8:  # 8: SHT_NOBITS
            out.append(data[off:off + size])
    return out


def containers(blob):
    """[(offset, [(kind, arch), ...])] for every fat binary container in a .nv_fatbin section."""
    out = []
    pos = 0
    while pos + 16 <= len(blob):
        magic, version, hsize, size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # the linker pads containers to 8 bytes
            continue
        if version != 1 or hsize != 16 or pos + hsize + size > len(blob):
            raise ValueError(f"container at {pos:#x}: version {version}, header {hsize}, size {size} "
                             f"(section of {len(blob)} bytes)")
        entries = []
        at, end = pos + hsize, pos + hsize + size
        while at + 32 <= end:
            kind, _ver, ehsize, payload = struct.unpack_from("<HHIQ", blob, at)
            arch, = struct.unpack_from("<I", blob, at + 28)
            if ehsize < 32 or at + ehsize + payload > end:
                raise ValueError(f"entry at {at:#x}: header {ehsize}, payload {payload}")
            entries.append((kind, arch))
            at += ehsize + payload
        out.append((pos, entries))
        pos = end
    return out


def parse_expect(spec):
    real, virtual = set(), set()
    for item in filter(None, spec.replace(",", ";").split(";")):
        base, _, suffix = item.partition("-")
        num = int(base.rstrip("af"))
        if suffix in ("", "real"):
            real.add(num)
        if suffix in ("", "virtual"):
            virtual.add(num)
        if suffix not in ("", "real", "virtual"):
            raise ValueError(f"bad architecture {item!r}")
    return real, virtual


def fmt(archs, prefix):
    return ",".join(f"{prefix}{a}" for a in sorted(archs)) or "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--expect", help="TANDEM_CUDA_ARCHS, e.g. '80-real;90-real;120'")
    ap.add_argument("--quiet", action="store_true", help="only the verdict")
    args = ap.parse_args()
    try:
        data = open(args.file, "rb").read()
        sections = nv_fatbin_sections(data)
        if not sections:
            raise ValueError("no .nv_fatbin section (no CUDA device code)")
        found = [c for s in sections for c in containers(s)]
    except (OSError, ValueError, struct.error) as e:
        print(f"fatbin_archs: {args.file}: {e}", file=sys.stderr)
        return 2
    if not found:
        print(f"fatbin_archs: {args.file}: .nv_fatbin holds no fat binary container", file=sys.stderr)
        return 2
    want = parse_expect(args.expect) if args.expect else None
    bad = 0
    sass_all, ptx_all = set(), set()
    for i, (off, entries) in enumerate(found):
        sass = {a for k, a in entries if k == KIND_ELF}
        ptx = {a for k, a in entries if k == KIND_PTX}
        sass_all |= sass
        ptx_all |= ptx
        verdict = ""
        if want is not None and (sass, ptx) != want:
            bad += 1
            verdict = (f"  MISMATCH: want SASS {fmt(want[0], 'sm_')} PTX {fmt(want[1], 'compute_')}")
        if not args.quiet or verdict:
            print(f"container {i:3d} at {off:#9x}: SASS {fmt(sass, 'sm_'):40s} PTX "
                  f"{fmt(ptx, 'compute_')}{verdict}")
    print(f"{args.file}: {len(found)} containers; SASS {fmt(sass_all, 'sm_')}; PTX {fmt(ptx_all, 'compute_')}")
    if want is not None:
        if bad:
            print(f"FAIL: {bad} of {len(found)} containers differ from TANDEM_CUDA_ARCHS={args.expect}")
            return 1
        print(f"ok: every container matches TANDEM_CUDA_ARCHS={args.expect}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
