"""--gpus parsing: ordinals, "all", and one sentence for what cannot work."""
import pytest

from optiml.errors import UserError
from optiml.gpus import parse_gpus

TWO = [(0, "NVIDIA H200"), (1, "NVIDIA H200")]


def test_all_and_lists():
    assert parse_gpus("all", TWO) == [0, 1]
    assert parse_gpus("1,0", TWO) == [0, 1]
    assert parse_gpus("1", TWO) == [1]


@pytest.mark.parametrize("text, visible, words", [
    ("x", TWO, "GPU numbers"),
    ("2", TWO, "no GPU 2"),
    ("all", [], "lists no GPU"),
    ("0,1", [(0, "NVIDIA H100 80GB HBM3"), (1, "NVIDIA A100")], "mixes GPU models"),
])
def test_bad_choices_are_one_sentence(text, visible, words):
    with pytest.raises(UserError, match=words):
        parse_gpus(text, visible)


def test_help_says_profiling_does_not_scale_across_gpus_of_a_host():
    from click.testing import CliRunner

    from optiml.cli import main

    out = CliRunner().invoke(main, ["optimize", "--help"], terminal_width=200).output
    assert "--gpus" in out and "serialises" in out and "--no-profile" in out
