"""Reading LLM answers into edits and applying them (optiml.edits.blocks)."""
from optiml.edits.blocks import Edit, apply_edit, apply_edits, fallback_title, parse_answer

from .conftest import EXAMPLES

SGEMM = (EXAMPLES / "sgemm_tiled_conflicts" / "sgemm_tiled_conflicts.cu").read_text()
PAD = """<<<<<<< SEARCH
    __shared__ float Bs[TILE][TILE];
=======
    __shared__ float Bs[TILE][TILE + 1];
>>>>>>> REPLACE"""

SRC = """int a = 1;
int b = 2;
for (;;) {
    x += 1;
}
for (;;) {
    x += 1;
}
"""


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"


def test_title_rationale_and_a_fenced_block():
    a = parse_answer(f"EDIT: pad Bs by one column\nWHY: the transposed reads hit one bank;\n"
                     f"padding spreads them.\n\n```cuda\n{PAD}\n```\n")
    assert a.title == "pad Bs by one column"
    assert a.rationale == "the transposed reads hit one bank; padding spreads them."
    assert a.error is None and len(a.edits) == 1
    r = apply_edits(SGEMM, a.edits)
    assert r.ok
    assert "    __shared__ float Bs[TILE][TILE + 1];\n" in r.source
    assert "    __shared__ float As[TILE][TILE];\n" in r.source
    changed = [(o, n) for o, n in zip(SGEMM.split("\n"), r.source.split("\n")) if o != n]
    assert changed == [("    __shared__ float Bs[TILE][TILE];", "    __shared__ float Bs[TILE][TILE + 1];")]
    assert r.source.count("\n") == SGEMM.count("\n")


def test_unfenced_block_and_markdown_headings_are_the_same():
    fenced = parse_answer(f"**EDIT:** pad\n**WHY:** fewer conflicts\n```\n{PAD}\n```")
    bare = parse_answer(f"# EDIT: pad\nWHY: fewer conflicts\n{PAD}")
    assert fenced.title == bare.title == "pad"
    assert fenced.rationale == bare.rationale == "fewer conflicts"
    assert apply_edits(SGEMM, fenced.edits).source == apply_edits(SGEMM, bare.edits).source != SGEMM


def test_several_blocks_apply_in_order_each_to_the_result_of_the_last():
    a = parse_answer("EDIT: two\n" + block("int a = 1;", "int a = 10;") + "\n\ntext between\n"
                     + block("int a = 10;\nint b = 2;", "int a = 10;\nint b = 20;"))
    assert [e.index for e in a.edits] == [1, 2]
    r = apply_edits(SRC, a.edits)
    assert r.ok and r.source.startswith("int a = 10;\nint b = 20;\nfor")


def test_a_block_that_matches_nothing_is_named():
    a = parse_answer(block("int a = 1;", "int a = 3;") + "\n" + block("int c = 3;", "int c = 4;"))
    r = apply_edits(SRC, a.edits)
    assert not r.ok and r.source == SRC
    assert r.error.startswith("SEARCH block 2 (starting 'int c = 3;') matches nothing in the source")


def test_an_ambiguous_block_asks_for_more_context():
    r = apply_edits(SRC, parse_answer(block("    x += 1;", "    x += 2;")).edits)
    assert r.error == ("SEARCH block 1 (starting 'x += 1;') matches 2 places in the source; "
                       "include more context lines to make it unique")
    r = apply_edits(SRC, parse_answer(block("int b = 2;\nfor (;;) {\n    x += 1;", "int b = 2;\nfor (;;) {\n    x += 2;")).edits)
    assert r.ok and r.source.count("x += 2;") == 1 and r.source.index("x += 2;") < r.source.index("x += 1;")


def test_a_search_must_match_whole_lines_not_fragments():
    assert not apply_edit(SRC, Edit(search="a = 1", replace="a = 2", index=1)).ok


def test_trailing_whitespace_is_tolerated_but_nothing_else():
    src = "int a = 1;   \n  int b = 2;\n"
    assert apply_edit(src, Edit("int a = 1;", "int a = 5;", 1)).source == "int a = 5;\n  int b = 2;\n"
    assert apply_edit("int a = 1;\n", Edit("int a = 1;  \t", "int a = 5;", 1)).source == "int a = 5;\n"
    assert not apply_edit(src, Edit("int b = 2;", "int b = 5;", 1)).ok           # leading space differs
    assert not apply_edit(src, Edit("int  a = 1;", "int a = 5;", 1)).ok          # inner space differs
    # an exact match wins over a tolerant one elsewhere
    assert apply_edit("x;  \nx;\n", Edit("x;", "y;", 1)).source == "x;  \ny;\n"


def test_crlf_sources_and_answers():
    crlf = SGEMM.replace("\n", "\r\n")
    for answer in (PAD, PAD.replace("\n", "\r\n")):
        r = apply_edits(crlf, parse_answer(answer).edits)
        assert r.ok
        assert "    __shared__ float Bs[TILE][TILE + 1];\r\n" in r.source
        assert r.source.count("\r\n") == crlf.count("\r\n") and "\n" not in r.source.replace("\r\n", "")


def test_replace_at_end_of_file_without_newline_and_deletion():
    assert apply_edit("a;\nb;", Edit("b;", "c;\nd;", 1)).source == "a;\nc;\nd;"
    assert apply_edit("a;\nb;\nc;\n", Edit("b;", "", 1)).source == "a;\nc;\n"


def test_unified_diff_hunks():
    a = parse_answer("EDIT: pad via diff\n```diff\n--- a/k.cu\n+++ b/k.cu\n@@ -19,3 +19,3 @@\n"
                     "     __shared__ float As[TILE][TILE];\n-    __shared__ float Bs[TILE][TILE];\n"
                     "+    __shared__ float Bs[TILE][TILE + 1];\n\n@@ -40,1 +40,1 @@\n"
                     "-            acc += As[ty][k] * Bs[tx][k];   // Bs[tx][k] == B[k0 + k][col]\n"
                     "+            acc = fmaf(As[ty][k], Bs[tx][k], acc);\n```\n")
    assert a.title == "pad via diff" and [e.kind for e in a.edits] == ["hunk", "hunk"]
    r = apply_edits(SGEMM, a.edits)
    assert r.ok, r.error
    assert "__shared__ float Bs[TILE][TILE + 1];" in r.source and "fmaf(As[ty][k]" in r.source
    bad = parse_answer("```diff\n@@ -1 +1 @@\n-int q = 0;\n+int q = 1;\n```")
    assert apply_edits(SRC, bad.edits).error.startswith("diff hunk 1 (starting 'int q = 0;') matches nothing")


def test_unreadable_answers_say_why():
    assert parse_answer("I think you should pad the array.").error.startswith("the answer holds no SEARCH/REPLACE block")
    assert parse_answer("<<<<<<< SEARCH\nint a = 1;\n>>>>>>> REPLACE").error == (
        "SEARCH block 1 has no '=======' line between its SEARCH and REPLACE parts")
    assert parse_answer("<<<<<<< SEARCH\nint a = 1;\n=======\nint a = 2;\n").error == (
        "SEARCH block 1 is not closed by a '>>>>>>> REPLACE' line")
    assert "is empty" in parse_answer(block("", "int z;")).error
    assert apply_edits(SRC, parse_answer(block("int a = 1;", "int a = 1;")).edits).error.startswith(
        "the edit leaves the source unchanged")


def test_fallback_title_is_the_first_changed_line():
    edits = parse_answer(block("int a = 1;\nint b = 2;", "int a = 1;\nint b = " + "9" * 200 + ";")).edits
    t = fallback_title(edits)
    assert t.startswith("llm: int b = 999") and len(t) == len("llm: ") + 80


def test_an_edit_that_matches_nothing_quotes_its_first_line_cut_to_60_characters():
    """The error a model reads back quotes the search block's first non-blank line, whole up to 60
    characters, else its first 57 and an ellipsis (60 in all)."""
    src = "int a = 1;\n"
    for first, quoted in (("x" * 60, "x" * 60), ("y" * 61, "y" * 57 + "..."), ("  \n  z = 1;  ", "z = 1;")):
        r = apply_edit(src, Edit(search=first + "\nmore", replace="int b;", index=1))
        assert r.error == (f"SEARCH block 1 (starting '{quoted}') matches nothing in the source; copy its lines "
                           f"exactly from the current source")
