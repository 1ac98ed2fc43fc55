"""code_digest on a small ELF written here (no nvcc): which files it reads, and that what the
code holds decides the digest. The digests of real cubins are tested in test_build.py."""
import struct

from optiml.cubin import code_digest


def elf(constants: bytes, tail: bytes = b"") -> bytes:
    """An ELF64 with a section table, .shstrtab and one constant bank, the bank's data last in the
    file (then ``tail``)."""
    names = b"\0.shstrtab\0.nv.constant0.k\0"
    table_at, count = 64, 3
    strings_at = table_at + 64 * count
    data_at = strings_at + len(names)
    head = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    head += struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, table_at, 0, 64, 0, 0, 64, count, 1)

    def section(name, typ, off, size):
        return struct.pack("<IIQQQQIIQQ", name, typ, 0, 0, off, size, 0, 0, 1, 0)
    table = section(0, 0, 0, 0) + section(1, 3, strings_at, len(names)) + section(11, 1, data_at, len(constants))
    return head + table + names + constants + tail


def test_a_section_that_ends_the_file_is_read(tmp_path):
    p = tmp_path / "k.cubin"
    p.write_bytes(elf(b"\1\2\3\4\5\6\7\x08"))
    first = code_digest(str(p))
    assert first is not None
    p.write_bytes(elf(b"\1\2\3\4\5\6\7\x09"))               # another constant: another program
    assert code_digest(str(p)) not in (None, first)
    p.write_bytes(elf(b"\1\2\3\4\5\6\7\x08", tail=b"\0" * 16))   # padding after it changes nothing
    assert code_digest(str(p)) == first


def test_a_section_past_the_end_is_no_cubin(tmp_path):
    p = tmp_path / "cut.cubin"
    p.write_bytes(elf(b"\1\2\3\4\5\6\7\x08")[:-1])
    assert code_digest(str(p)) is None


def test_section_names_are_read_up_to_their_nul_the_null_sections_empty():
    from optiml.cubin import _Elf

    e = _Elf(elf(b"\1\2\3\4"))
    assert [s[0] for s in e.sections] == ["", ".shstrtab", ".nv.constant0.k"]
    assert e._string(0, 0, 0) == ""                   # an empty string table: nothing to read


def elf_of(sections) -> bytes:
    """An ELF64 of ``sections``: (name, type, data, link) after the null section and .shstrtab."""
    names, offs = b"\0.shstrtab\0", []
    for name, *_ in sections:
        offs.append(len(names))
        names += name.encode() + b"\0"
    count = 2 + len(sections)
    at = 64 + 64 * count
    head = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    head += struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, 64, 0, 64, 0, 0, 64, count, 1)

    def section(name, typ, off, size, link=0):
        return struct.pack("<IIQQQQIIQQ", name, typ, 0, 0, off, size, link, 0, 1, 24 if typ == 2 else 0)
    table, body = section(0, 0, 0, 0) + section(1, 3, at, len(names)), names
    for off, (_name, typ, data, link) in zip(offs, sections):
        table += section(off, typ, at + len(body), len(data), link)
        body += data
    return head + table + body


def two_kernels(order, regs) -> bytes:
    """Kernels k1 and k2 with the same code, the symbol table listing them in ``order``, and the
    global .nv.info giving each its register count by symbol index (``regs``: (name, count) pairs,
    in the records' order)."""
    strings = b"\0k1\0k2\0"
    text = {"k1": 4, "k2": 5}                     # section index of .text.k1 / .text.k2
    sym = lambda name: struct.pack("<IBBHQQ", strings.index(name.encode() + b"\0"), 0x12, 0, text[name], 0, 16)
    symtab = bytes(24) + b"".join(sym(n) for n in order)
    info = b"".join(bytes((0x04, 0x2F)) + struct.pack("<HII", 8, order.index(n) + 1, r) for n, r in regs)
    return elf_of([(".strtab", 3, strings, 0), (".symtab", 2, symtab, 2), (".text.k1", 1, b"\1" * 16, 0),
                   (".text.k2", 1, b"\1" * 16, 0), (".nv.info", 0x70000000, info, 0)])


def test_an_attribute_is_read_by_the_kernel_it_names_not_its_symbols_place(tmp_path):
    """The global .nv.info names functions by symbol index: the same program with its symbol table
    in another order has the same digest; the register counts of two kernels swapped is another."""
    def digest(order, regs):
        p = tmp_path / "k.cubin"
        p.write_bytes(two_kernels(order, regs))
        return code_digest(str(p))
    base = digest(("k1", "k2"), (("k1", 32), ("k2", 16)))
    assert base is not None
    assert digest(("k2", "k1"), (("k1", 32), ("k2", 16))) == base
    assert digest(("k1", "k2"), (("k2", 32), ("k1", 16))) != base         # the same records, of the other kernels
    assert digest(("k1", "k2"), (("k1", 32), ("k2", 24))) != base
