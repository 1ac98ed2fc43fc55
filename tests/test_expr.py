import pytest

from optiml.errors import ExprError
from optiml.expr import MAX_INT, MAX_TEXT, evaluate, evaluate_int, names_in, show
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


@pytest.mark.parametrize("text,message", [
    ("(-1) ** 0.5", "'(-1) ** 0.5' is a complex number, not a real one"),
    ("1e309", "'1e309' is too large (it overflows to infinity)"),
    ("1e308 * 10", "is too large (it overflows to infinity)"),
    ("2.0 ** 60 ** 1.0 * 1e300", "is too large"),
    ("2**64 * 2**64", "'2**64 * 2**64' is too large (beyond 2**126 in magnitude)"),
    ("-((10**64)**64)**2", "is too large (beyond 2**126 in magnitude)"),
    ("((((2**64)**64)**64)**64)**64", "is too large"),
    ("int(1e300)", "is too large"),
    ("1 << 127", "shift count too large in '1 << 127' (at most 126)"),
    ("1 << (1 << 40)", "shift count too large"),
    ("N >> 200", "shift count too large"),
    ("3 << 126", "is too large"),
    ("2 ** 65", "exponent too large"),
    ("-" * 999 + "N", "is nested more than 100 levels deep"),
    ("-" * 3000 + "N", "the expression is 3001 characters long; at most 1000 are allowed"),
    ("1" * 999, "is too large"),
    ("sqrt(-1)", "cannot evaluate 'sqrt(-1)' (math domain error)"),
    ("N\x00", "cannot parse expression 'N\\x00'"),
])
def test_values_stay_small_finite_and_real(text, message):
    with pytest.raises(ExprError) as e:
        evaluate(text, {"N": 4}, where="k.toml: counts.bytes")
    msg = str(e.value)
    assert msg.startswith("k.toml: counts.bytes") and message in msg and "\n" not in msg and len(msg) < 200, msg


def test_values_at_the_limits_evaluate():
    assert evaluate("1 << 126", {}) == MAX_INT == evaluate("-(2**63) * 2**63", {}) * -1
    assert evaluate("2 ** 64", {}) == 2**64 and evaluate("N >> 126", {"N": 4}) == 0
    assert evaluate("1e308", {}) == 1e308
    assert evaluate_int("2.0 ** 50 * 2.0 ** 50", {}) == 2**100
    assert evaluate("-" * 98 + "N", {"N": 4}) == 4
    assert evaluate(" " * 990 + "N", {"N": 4}) == 4


@pytest.mark.parametrize("value,message", [
    (float("nan"), "k.toml: args.n.value is nan; it must be a finite number."),
    (float("-inf"), "k.toml: args.n.value is -inf; it must be a finite number."),
    (10**40, "k.toml: args.n.value: 10000000000000000000000000000000000000000 is too large"),
    (10**4000, "k.toml: args.n.value: a 13288-bit integer is too large"),
])
def test_numbers_are_checked_like_expressions(value, message):
    with pytest.raises(ExprError) as e:
        evaluate(value, {}, where="k.toml: args.n.value")
    assert str(e.value).startswith(message)
    with pytest.raises(ExprError):
        evaluate("N", {"N": value})                  # a size or constant out of range as well


def test_show_is_one_short_line():
    assert show("a\nb") == "'a\\nb'"
    assert show(10**4000) == "a 13288-bit integer"
    assert len(show("x" * 500)) == 60 and show("x" * 500).endswith("...")
    nested = []
    for _ in range(5000):
        nested = [nested]
    assert show(nested) == "a list"                  # its repr recurses too deeply


def test_names_in():
    assert names_in("cdiv(N, BLOCK) * M") == {"N", "BLOCK", "M"}
    assert names_in(4) == set()
    assert names_in("-" * 3000 + "N") == set() and names_in("(" * 300 + "N" + ")" * 300) == set()


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


def test_the_limits_are_where_they_say():
    """An expression nested exactly 100 levels deep is evaluated, one more level is refused; a value
    whose repr has exactly ``limit`` characters is shown whole, one character more is cut with '...'."""
    assert evaluate("-" * 98 + "N", {"N": 1}) == 1          # Expression, 98 minus signs, Name, its Load
    with pytest.raises(ExprError, match="nested more than 100 levels deep"):
        evaluate("-" * 99 + "N", {"N": 1})
    assert show("x" * 58) == "'" + "x" * 58 + "'"                  # 60 characters with its quotes
    assert show("x" * 59) == "'" + "x" * 56 + "..."


@pytest.mark.parametrize("expr, env, said", [
    (True, {}, "k.toml: f: expected a number or an expression, got a boolean."),
    ([1], {}, "k.toml: f: expected a number or an expression string, got list."),
    ("cdiv(N, 0)", {"N": 3}, "k.toml: f: division by zero in 'cdiv(N, 0)'."),
    ("N", {"N": "x"}, "k.toml: f: 'N' is a str, not a number."),
    ("1e300 ** 2", {}, "k.toml: f: '1e300 ** 2' is too large."),
])
def test_what_is_no_number_is_said_with_its_field(expr, env, said):
    with pytest.raises(ExprError) as e:
        evaluate(expr, env, where="k.toml: f")
    assert str(e.value) == said


def test_not_and_a_bool_size_are_integers():
    assert evaluate("not N", {"N": 3}) == 0 and evaluate("not N", {"N": 0}) == 1
    assert evaluate("N + 1", {"N": True}) == 2 and type(evaluate("N", {"N": True})) is int


def test_an_expression_of_exactly_the_longest_length_evaluates():
    assert evaluate(" " * (MAX_TEXT - 1) + "N", {"N": 4}) == 4
    with pytest.raises(ExprError, match=f"is {MAX_TEXT + 1} characters long; at most {MAX_TEXT} are allowed"):
        evaluate(" " * MAX_TEXT + "N", {"N": 4})


def test_a_string_in_an_expression_is_said_as_only_numbers_allowed():
    with pytest.raises(ExprError) as e:
        evaluate("N * 'abc'", {"N": 2}, where="k.toml: f")
    assert str(e.value) == "k.toml: f: only numbers are allowed in \"N * 'abc'\", not 'abc'."
