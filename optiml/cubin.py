"""What a cubin runs, read from its ELF sections (no CUDA tools needed).

:func:`code_digest` is how the runner tells that two candidates are one program: an added
``const``, a comment or a flag that changed nothing compile to the same code, and tinygrad's kernel
search de-duplicates the same way (by what runs, not by what was written).
"""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path

# The sections that make up what runs: code, constant banks, initialised globals, shared-memory
# sizes and the per-kernel attributes (registers, parameter bank, launch bounds).
_KEPT = (".text.", ".nv.constant", ".nv.global", ".nv.shared.", ".nv.info")
_SHT_SYMTAB, _SHT_RELA, _SHT_REL, _SHT_NOBITS = 2, 4, 9, 8
_STT_SECTION = 3
# .nv.info attributes (format 0x04, a sized value) whose first four bytes are a symbol index:
# in the global .nv.info all of them (registers, frame and stack sizes per function); in a
# kernel's own .nv.info.<name>, EIATTR_PARAM_CBANK (0x0a).
_PARAM_CBANK = 0x0A


class _Elf:
    def __init__(self, data: bytes):
        self.data = data
        self.end = "<" if data[5] == 1 else ">"
        shoff, = struct.unpack_from(self.end + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(self.end + "HHH", data, 0x3A)
        if shoff <= 0 or shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
            raise ValueError("bad section table")
        self.sections = []
        for i in range(shnum):
            name, typ, _fl, _addr, off, size, link, info = struct.unpack_from(
                self.end + "IIQQQQII", data, shoff + i * shentsize)
            if typ != _SHT_NOBITS and off + size > len(data):
                raise ValueError("section past the end")
            self.sections.append([name, typ, off, size, link, info])
        strtab = self.sections[shstrndx]
        for s in self.sections:
            s[0] = self._string(strtab[2], strtab[3], s[0])
        self.symbols = self._symbols()

    def _string(self, off: int, size: int, at: int) -> str:
        blob = self.data[off:off + size]
        end = blob.find(b"\0", at)
        return blob[at:end if end >= 0 else len(blob)].decode(errors="replace")

    def _symbols(self) -> list[tuple]:
        """(name, info, section name, value, size) per symbol; a section symbol is named by its section."""
        out = []
        for name, typ, off, size, link, _info in self.sections:
            if typ != _SHT_SYMTAB:
                continue
            stroff, strsize = self.sections[link][2], self.sections[link][3]
            for at in range(off, off + size - 23, 24):
                st_name, st_info, _other, shndx, value, sz = struct.unpack_from(self.end + "IBBHQQ", self.data, at)
                sec = self.sections[shndx][0] if 0 < shndx < len(self.sections) else str(shndx)
                sym = sec if (st_info & 0xF) == _STT_SECTION else self._string(stroff, strsize, st_name)
                out.append((sym, st_info, sec, value, sz))
        return out

    def symbol(self, index: int) -> str:
        return self.symbols[index][0] if 0 <= index < len(self.symbols) else f"#{index}"

    def info_records(self, name: str, blob: bytes) -> bytes:
        """An .nv.info section with the symbol indices in it replaced by the symbols' names."""
        out, at, whole = [], 0, name == ".nv.info"
        while at + 2 <= len(blob):
            fmt, attr = blob[at], blob[at + 1]
            if fmt == 0x04 and at + 4 <= len(blob):
                size, = struct.unpack_from(self.end + "H", blob, at + 2)
                value = blob[at + 4:at + 4 + size]
                if (whole or attr == _PARAM_CBANK) and size >= 4:
                    index, = struct.unpack_from(self.end + "I", value, 0)
                    value = self.symbol(index).encode() + b"\0" + value[4:]
                out.append(bytes((fmt, attr)) + value)
                at += 4 + size
            else:
                width = {0x01: 0, 0x02: 1, 0x03: 2}.get(fmt)
                if width is None:                       # a format not known: keep the rest as it is
                    out.append(blob[at:])
                    break
                out.append(blob[at:at + 2 + width])
                at += 2 + width
        return b"\1".join(out)


def code_digest(cubin_path: str) -> str | None:
    """A digest of what a cubin runs: code, constant banks, initialised globals, shared-memory sizes,
    per-kernel attributes, the relocations into them and the symbols they define, with symbol
    indices resolved to names; not notes, debug line tables or the order of the symbol table. Two
    builds with equal digests run the same code. None when the file is not an ELF64 cubin."""
    try:
        data = Path(cubin_path).read_bytes()
    except OSError:
        return None
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    try:
        elf = _Elf(data)
    except (ValueError, struct.error, IndexError):
        return None
    kept = lambda name: name.startswith(_KEPT)
    h = hashlib.sha256()
    for name, typ, off, size, _link, info in elf.sections:
        if typ in (_SHT_RELA, _SHT_REL):
            target = elf.sections[info][0] if 0 <= info < len(elf.sections) else ""
            if not kept(target):
                continue
            width = 24 if typ == _SHT_RELA else 16
            h.update(b"rel\0" + target.encode() + b"\0")
            for at in range(off, off + size - width + 1, width):
                r_off, r_info = struct.unpack_from(elf.end + "QQ", data, at)
                addend = struct.unpack_from(elf.end + "q", data, at + 16)[0] if width == 24 else 0
                h.update(f"{r_off}:{r_info & 0xFFFFFFFF}:{elf.symbol(r_info >> 32)}:{addend};".encode())
            continue
        if not kept(name):
            continue
        h.update(name.encode() + b"\0" + str(size).encode() + b"\0")
        if typ == _SHT_NOBITS:                          # shared memory: its size is all
            continue
        blob = data[off:off + size]
        h.update(elf.info_records(name, blob) if name.startswith(".nv.info") else blob)
    for sym in sorted(s for s in elf.symbols if kept(s[2])):
        h.update(repr(sym).encode())
    return h.hexdigest()
