"""--gpus parsing: ordinals, "all", and one sentence for what cannot work."""
import pytest

from optiml.errors import UserError
from optiml.optimize import parse_gpus

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
