"""How the llm prompt (optiml/edits/prompt.py) writes a profile's values: a yes/no value as True or
False (not as the integer 1 or 0 that a bool also is), None as None, numbers with separators; and
a tried child's speedup as faster or slower."""
from optiml.edits.prompt import fmt, history, profile
from optiml.edits.types import Attempt, NodeView


def test_booleans_and_none_are_written_as_words_not_numbers():
    assert fmt(True) == "True" and fmt(False) == "False" and fmt(None) == "None"
    assert fmt(1234567) == "1,234,567" and fmt(0.123456) == "0.1235"
    # a count from 10^12 on in scientific form (thirteen digits and separators say less)
    assert fmt(999_999_999_999) == "999,999,999,999" and fmt(10 ** 12) == "1.000e+12" and fmt(-10 ** 12) == "-1.000e+12"


def test_a_boolean_in_the_profile_reads_true_or_false():
    view = NodeView(source="__global__ void k() {}", flags=(), entry="k",
                    resources={"registers": 38, "barriers": True},
                    metrics={"occupancy_limiters": False, "registers_per_thread": 38})
    lines = profile(view)
    assert "ptxas: registers 38, barriers True" in lines
    assert "- occupancy_limiters: False" in lines and "- registers_per_thread: 38" in lines


def test_a_tried_childs_speedup_reads_faster_from_1_00x_and_slower_under_it():
    lines = history([Attempt("pad", "ok", speedup=1.0), Attempt("unroll", "ok", speedup=0.97),
                     Attempt("vec", "ok", speedup=1.3)])
    assert [ln for ln in lines if ln[:1].isdigit()] == ['1. "pad" -> ok, 1.00x faster', '2. "unroll" -> ok, 0.97x (slower)',
                                                        '3. "vec" -> ok, 1.30x faster']


def test_a_long_message_is_one_line_of_300_characters_at_most():
    """A compile log as an attempt's message: its whitespace made single spaces, cut to 300 with '...'."""
    log = "kernel.cu(12): error: identifier \"tile\" is undefined\n\n" + "x" * 400
    (line,) = [ln for ln in history([Attempt("tile it", "compile_error", message=log)]) if ln[:1].isdigit()]
    shown = line.split(" -> compile_error: ", 1)[1]
    assert len(shown) == 300 and shown.endswith("...") and "\n" not in shown
    assert shown.startswith('kernel.cu(12): error: identifier "tile" is undefined xxx')
    short = [ln for ln in history([Attempt("tile it", "compile_error", message="x" * 300)]) if ln[:1].isdigit()]
    assert short == ['1. "tile it" -> compile_error: ' + "x" * 300]
