"""The task text ``optiml generate`` sends the model (optiml/generate/prompt.py): the read-and-written
note names exactly the inout arguments, the reference is shown only when it is a Python function in a
file, and a kernel request lists the other strategies (not its own) when there are any."""
import dataclasses

from optiml.generate import kernel_messages, strategy_messages
from optiml.app.generate import load_generate_spec
from optiml.spec.model import Reference
from tests.test_generate import SPEC, spec_file

DESCRIPTION = "scale a float32 vector by alpha"
INOUT = SPEC.replace('name = "y"\ndtype = "float32"\nrole = "output"', 'name = "y"\ndtype = "float32"\nrole = "inout"')


def spec(tmp_path, text: str = SPEC):
    return load_generate_spec(spec_file(tmp_path, text))


def task_text(s, description: str) -> str:
    """The user message of the strategies request (the task text, then the question)."""
    [_, user] = strategy_messages(s, description, 3)
    return user["content"]


def test_the_read_and_written_note_names_only_the_inout_arguments(tmp_path):
    """An inout array is named in the note that it is read, written and reset before every launch;
    a task with no inout argument has no such note."""
    assert INOUT != SPEC
    inout = task_text(spec(tmp_path, INOUT), DESCRIPTION)
    assert "(y: read and written; reset from its init before every launch.)" in inout
    plain = task_text(spec(tmp_path), DESCRIPTION)
    assert "read and written" not in plain
    assert "- y: float32 output array of shape [N] (flat, row-major)" in plain


def test_the_reference_is_shown_only_when_it_is_a_python_function_in_a_file(tmp_path):
    """The Python reference's file is quoted; a seed reference, or a Python reference with no file
    to read, gives no reference section (and no failure)."""
    s = spec(tmp_path)
    assert "return alpha * x" in task_text(s, DESCRIPTION)
    ref = s.reference
    assert ref.is_python and ref.path is not None
    seed = dataclasses.replace(s, reference=Reference("seed", ref.path, ref.function))
    no_file = dataclasses.replace(s, reference=Reference("python", None, ref.function))
    for other in (seed, no_file):
        text = task_text(other, DESCRIPTION)
        assert "Reference:" not in text and "return alpha * x" not in text
        assert text.startswith("## Task\n" + DESCRIPTION)


def test_a_reference_too_long_to_show_is_named_instead(tmp_path):
    from optiml.generate.prompt import REFERENCE_CHARS

    s = spec(tmp_path)
    s.reference.path.write_text("def scale(x, n, alpha):\n    return alpha * x\n" + "# note\n" * REFERENCE_CHARS)
    text = task_text(s, DESCRIPTION)
    assert f"Reference: the Python function `scale` in {s.reference.path.name} (too long to show)." in text
    assert "return alpha * x" not in text


def test_a_kernel_request_lists_the_other_strategies_but_not_its_own(tmp_path):
    """Asked for strategy "grid stride" among three, the request names the two others, once; with no
    other strategy it has no such line."""
    s = spec(tmp_path)
    [_, user] = kernel_messages(s, DESCRIPTION, "grid stride", "stride over the array",
                                ["one per thread", "grid stride", "float4 loads"])
    assert "(The other strategies, written separately: one per thread; float4 loads.)" in user["content"]
    assert "## Strategy\ngrid stride: stride over the array" in user["content"]
    for others in ([], ["grid stride"]):
        [_, alone] = kernel_messages(s, DESCRIPTION, "grid stride", "", others)
        assert "other strategies" not in alone["content"]
        assert "## Strategy\ngrid stride\n" in alone["content"]


def test_a_failures_message_is_kept_whole_up_to_its_limit_and_cut_with_dots_past_it():
    from optiml.generate.prompt import MESSAGE_CHARS, _short

    whole = "e" * MESSAGE_CHARS
    assert _short(f"  {whole}\n") == whole
    assert _short(whole + "f") == "e" * (MESSAGE_CHARS - 3) + "..."
