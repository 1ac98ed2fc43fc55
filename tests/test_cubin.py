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
