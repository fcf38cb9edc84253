"""The manylinux platform tag a Linux x86_64 executable honestly carries, read from its ELF
headers with the standard library only (no objdump on the user's machine needed).

A glibc-linked executable runs on a system whose glibc provides every symbol version it
requires (`GLIBC_2.N` in its version references): PEP 600 names that `manylinux_2_N`. The tag
is the highest such N, at least 17 (manylinux2014's floor), and the executable may link only
libraries every manylinux system has (the PEP 600 set, which auditwheel checks too).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

# Libraries a manylinux system provides (auditwheel's policy list, minus the graphics ones a
# broker has no use for).
MANYLINUX_LIBRARIES = frozenset({
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libutil.so.1",
    "libresolv.so.2", "libnsl.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libcrypt.so.1",
    "ld-linux-x86-64.so.2",
})
# The newest libgcc_s symbol version every manylinux_2_17+ policy allows.
NEWEST_GCC = (4, 8, 0)
MANYLINUX_FLOOR = 17

EM_X86_64 = 62
PT_INTERP = 3
SHT_DYNAMIC = 6
SHT_GNU_VERNEED = 0x6FFFFFFE
DT_NEEDED = 1


class NotManylinux(Exception):
    """The file is not an executable a manylinux wheel may carry; the message says why."""


@dataclass
class ElfLinkage:
    interpreter: str
    needed: list[str]
    # Symbol versions required, by library: {"libc.so.6": ["GLIBC_2.2.5", ...]}.
    versions: dict[str, list[str]]


def read_linkage(path: Path) -> ElfLinkage:
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        raise NotManylinux(f"{path} is not an ELF executable")
    if data[4] != 2 or data[5] != 1:
        raise NotManylinux(f"{path} is not a 64-bit little-endian ELF file")
    (machine,) = struct.unpack_from("<H", data, 18)
    if machine != EM_X86_64:
        raise NotManylinux(f"{path} is not an x86_64 executable (e_machine {machine})")
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)

    interpreter = ""
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == PT_INTERP:
            interpreter = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()

    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def string_at(strtab_index: int, offset: int) -> str:
        start = sections[strtab_index][4] + offset
        return data[start:data.index(b"\0", start)].decode()

    needed: list[str] = []
    versions: dict[str, list[str]] = {}
    for _, sh_type, _, _, offset, size, link, info, _, entsize in sections:
        if sh_type == SHT_DYNAMIC:
            for at in range(offset, offset + size, entsize):
                tag, value = struct.unpack_from("<qQ", data, at)
                if tag == DT_NEEDED:
                    needed.append(string_at(link, value))
        elif sh_type == SHT_GNU_VERNEED:
            # `info` Verneed entries (one per library), each with a chain of Vernaux names.
            at = offset
            for _ in range(info):
                _, count, file_name, aux, next_need = struct.unpack_from("<HHIII", data, at)
                names = []
                aux_at = at + aux
                for _ in range(count):
                    _, _, _, name, next_aux = struct.unpack_from("<IHHII", data, aux_at)
                    names.append(string_at(link, name))
                    aux_at += next_aux
                versions[string_at(link, file_name)] = names
                at += next_need
    return ElfLinkage(interpreter, needed, versions)


def _version(text: str, prefix: str) -> tuple[int, ...]:
    match = re.fullmatch(re.escape(prefix) + r"(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def manylinux_tag(path: Path) -> str:
    """`manylinux_2_N_x86_64` for the executable at `path`, or NotManylinux saying why not."""
    linkage = read_linkage(path)
    if not linkage.interpreter.startswith("/lib64/ld-linux-x86-64.so"):
        raise NotManylinux(
            f"{path} is not linked against glibc (interpreter {linkage.interpreter or 'none'}): "
            "only a glibc x86_64 build makes a manylinux wheel"
        )
    foreign = sorted(set(linkage.needed) - MANYLINUX_LIBRARIES)
    if foreign:
        raise NotManylinux(f"{path} links libraries a manylinux system may not have: {foreign}")
    glibc_minor = MANYLINUX_FLOOR
    for library, names in linkage.versions.items():
        for name in names:
            glibc = _version(name, "GLIBC_")
            if glibc:
                if glibc[0] != 2:
                    raise NotManylinux(f"{path} needs {name}")
                glibc_minor = max(glibc_minor, glibc[1] if len(glibc) > 1 else 0)
            gcc = _version(name, "GCC_")
            if gcc and gcc > NEWEST_GCC:
                raise NotManylinux(f"{path} needs {name} from {library}, newer than manylinux allows")
    return f"manylinux_2_{glibc_minor}_x86_64"
