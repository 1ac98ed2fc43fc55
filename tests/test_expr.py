import pytest

from optiml.errors import ExprError
from optiml.expr import evaluate, evaluate_int, names_in
from optiml.source import parse_source


def test_arithmetic_follows_c_for_integers():
    env = {"N": 1000, "BLOCK": 256}
    assert evaluate("cdiv(N, BLOCK)", env) == 4
    assert evaluate("N / BLOCK", env) == 3          # truncates like C
    assert evaluate("-7 / 2", {}) == -3             # toward zero, not floor
    assert evaluate("-7 // 2", {}) == -4
    assert evaluate("round_up(N, BLOCK) * 4", env) == 4096
    assert evaluate("max(N, 2 * BLOCK) if N > 0 else 1", env) == 1000
    assert evaluate("N / 8.0", env) == 125.0


def test_unknown_name_names_field_and_known_names():
    with pytest.raises(ExprError) as e:
        evaluate("cdiv(N, TILE)", {"N": 4, "BLOCK": 2}, where="k.toml: launch.grid[0]")
    msg = str(e.value)
    assert "k.toml: launch.grid[0]" in msg and "'TILE'" in msg and "BLOCK" in msg


@pytest.mark.parametrize("bad", ["__import__('os')", "N.real", "[1, 2]", "'a'", "lambda: 1", "open('x')"])
def test_rejects_anything_but_arithmetic(bad):
    with pytest.raises(ExprError):
        evaluate(bad, {"N": 1})


def test_division_by_zero_and_non_integer_are_errors():
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("N / 0", {"N": 1})
    with pytest.raises(ExprError, match="not a whole number"):
        evaluate_int("N / 3.0", {"N": 4})


def test_names_in():
    assert names_in("cdiv(N, BLOCK) * M") == {"N", "BLOCK", "M"}
    assert names_in(4) == set()


def test_macros_and_constexpr_become_constants():
    src = """
#define BLOCK 16
#define TILE (BLOCK * 2)   // derived
#define ROWS_PER_THREAD 4u
#define NAME "not a number"
constexpr int WARPS = TILE / 8;
static constexpr unsigned int PAD = 1U;
const int HALF = BLOCK >> 1;
__global__ void k(float* x) { constexpr int LOCAL = 3; x[0] = LOCAL; }
"""
    c = parse_source(src).constants
    assert c == {"BLOCK": 16, "TILE": 32, "ROWS_PER_THREAD": 4, "WARPS": 4, "PAD": 1, "HALF": 8}
