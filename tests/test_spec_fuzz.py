"""Fuzzing the spec loader: whatever the file holds, ``load_spec`` returns a spec or raises
optiml's own error (a SpecError of one line naming the file), never anything else,
since anything else is a traceback at the command line.

Four generators: random bytes; random TOML documents; the valid spec of tests/test_spec.py
with one field replaced, deleted or added; and that spec with random expressions in every
expression field. ``FOUND_BUGS`` lists the minimal inputs found so far (by these generators
and by hand) that made the loader raise something else; each is now a regular test of the
one-line message that replaced the traceback, and the generators carry two as @examples.
"""
import json
import math
import time
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from optiml.errors import OptimlError, SpecError
from optiml.spec import TaskSpec, load_spec
from tests.test_spec import KERNEL, SPEC

FUZZ = settings(max_examples=200, deadline=None, report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def check_loads_or_says_why(path: Path, text: str | bytes, kernel_source: str | None = KERNEL) -> TaskSpec | None:
    """The property: a spec, or an OptimlError with one line naming the spec file."""
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    try:
        return load_spec(path, kernel_source=kernel_source)
    except OptimlError as e:
        msg = str(e)
        assert "\n" not in msg, msg
        assert str(path) in msg, msg
        return None


# --------------------------------------------------------------------------- a TOML writer

def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)   # a TOML basic string, except for a raw DEL (then not TOML: fine)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(doc: dict) -> str:
    return "\n".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}" for k, v in doc.items()) + "\n"


def test_the_writer_round_trips_the_valid_spec(tmp_path):
    data = tomllib.loads(SPEC)
    assert tomllib.loads(to_toml(data)) == data
    assert check_loads_or_says_why(tmp_path / "k.toml", to_toml(data)).entry == "scale"


# --------------------------------------------------------------------------- strategies

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
SPEC_WORDS = ["kernel", "entry", "nvcc_flags", "sizes", "timing", "verify", "args", "name", "dtype", "role", "shape",
              "init", "dist", "mean", "std", "low", "high", "value", "launch", "grid", "block", "shared_mem",
              "reference", "kind", "python", "tolerance", "atol", "rtol", "counts", "flops", "bytes", "trials",
              "timing_size", "seed", "warmup_ms", "min_reps", "max_reps", "target_ms", "flush_l2", "precision", "N", "M",
              "float32", "int32", "bfloat16", "bool", "input", "output", "inout", "scalar", "normal", "uniform",
              "integers", "constant"]
KEYS = st.sampled_from(SPEC_WORDS) | TEXT
NUMBERS = st.sampled_from([0, 1, -1, 2, 3, 77, 128, 1024, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 10**30]) | \
    st.integers(-10**6, 10**6) | st.floats(allow_nan=True, allow_infinity=True)
LEAVES = st.booleans() | NUMBERS | st.sampled_from(SPEC_WORDS) | TEXT
TOML_VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                           max_leaves=12)

NAMES = ["N", "BLOCK", "Q", "if", "x"]
FUNCS = ["cdiv", "ceil_div", "round_up", "min", "max", "abs", "int", "float", "sqrt", "log2", "pow", "eval"]
ATOMS = st.sampled_from(NAMES) | st.sampled_from(["0", "1", "-1", "2", "0.5", "-0.5", "1.5", "64", "65", "1024",
                                                  "1e308", "1e309", "2**31", "nan", "True", "'s'", "[1]"]) | \
    st.integers(-2**70, 2**70).map(str)
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "<", "<=", "==", "!=", ">", ">=", "and"]


def expressions(depth: int = 3):
    if depth == 0:
        return ATOMS
    sub = expressions(depth - 1)
    return st.one_of(
        ATOMS,
        st.tuples(sub, st.sampled_from(BINOPS), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda e: f"-{e}"),
        st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(st.sampled_from(FUNCS), st.lists(sub, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
    )


EXPRESSION = expressions() | st.text(alphabet="NBLOCK0123456789 +-*/%()<>&|^.,e_", max_size=30)


def paths(node, prefix=()):
    """Every (path, value) in a parsed TOML document, tables and lists included."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


def replaced(doc, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: replaced(doc[head], rest, value)}
    out = list(doc)
    out[head] = replaced(doc[head], rest, value)
    return out


def deleted(doc, path):
    head, rest = path[0], path[1:]
    if rest:
        return replaced(doc, (head,), deleted(doc[head], rest))
    if isinstance(doc, dict):
        return {k: v for k, v in doc.items() if k != head}
    return [v for i, v in enumerate(doc) if i != head]


BASE = tomllib.loads(SPEC)
# the fields that take expressions: shapes, a scalar's value, launch geometry and counts
EXPRESSION_PATHS = [p for p, v in paths(BASE) if p and (p[-1] in ("value", "flops", "bytes", "shared_mem") or
                    (len(p) >= 2 and p[-2] in ("shape", "grid", "block")))] + [("launch", "shared_mem")]


@st.composite
def mutated_specs(draw):
    doc = BASE
    for _ in range(draw(st.integers(1, 3))):
        valid = [p for p, _ in paths(doc) if p]
        path = draw(st.sampled_from(valid))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            doc = replaced(doc, path, draw(TOML_VALUES))
        elif action == "delete":
            doc = deleted(doc, path)
        else:
            parent = path[:-1]
            target = doc
            for k in parent:
                target = target[k]
            if isinstance(target, dict):
                doc = replaced(doc, parent, {**target, draw(KEYS): draw(TOML_VALUES)})
            else:
                doc = replaced(doc, parent, [*target, draw(TOML_VALUES)])
    return to_toml(doc)


@st.composite
def specs_with_expressions(draw):
    doc = BASE
    for path in draw(st.lists(st.sampled_from(EXPRESSION_PATHS), min_size=1, max_size=3, unique=True)):
        if path == ("launch", "shared_mem") and "shared_mem" not in doc["launch"]:
            doc = replaced(doc, ("launch",), {**doc["launch"], "shared_mem": 0})
        doc = replaced(doc, path, draw(EXPRESSION))
    return to_toml(doc)


# --------------------------------------------------------------------------- the properties

@FUZZ
@given(st.binary(max_size=600))
@example(b"\xff\xfe\x00")
@example(b"")
def test_random_bytes(tmp_path, data):
    check_loads_or_says_why(tmp_path / "kernel.toml", data)


@FUZZ
@given(st.dictionaries(KEYS, TOML_VALUES, max_size=6))
def test_random_toml_documents(tmp_path, doc):
    check_loads_or_says_why(tmp_path / "kernel.toml", to_toml(doc))


@FUZZ
@given(mutated_specs())
@example(to_toml(replaced(BASE, ("args", 2, "value"), float("nan"))))
def test_one_field_replaced_deleted_or_added(tmp_path, text):
    check_loads_or_says_why(tmp_path / "kernel.toml", text)
    check_loads_or_says_why(tmp_path / "kernel.toml", text, kernel_source=None)   # checks less, says why as well


@FUZZ
@given(specs_with_expressions())
@example(to_toml(replaced(BASE, ("args", 0, "shape", 0), "(-1) ** 0.5")))
def test_random_expressions_in_expression_fields(tmp_path, text):
    check_loads_or_says_why(tmp_path / "kernel.toml", text)


# --------------------------------------------------------------------------- the bugs found

def _spec(old: str, new: str) -> str:
    assert old in SPEC, old
    return SPEC.replace(old, new, 1)


# (id, spec text, what went wrong before the fix, a fragment of the one-line message now);
# each is one field of the valid spec of tests/test_spec.py
FOUND_BUGS = [
    ("int-scalar-nan", _spec('value = "N"', "value = nan"),
     "spec.scalar_value called int() on a NaN value: ValueError", "args.n.value is nan; it must be a finite number"),
    ("int-scalar-inf", _spec('value = "N"', "value = inf"),
     "spec.scalar_value called int() on an infinite value: OverflowError", "args.n.value is inf; it must be a finite number"),
    ("int-scalar-1e309", _spec('value = "N"', 'value = "1e309"'),
     "an expression evaluating to inf for an integer scalar: OverflowError", "args.n.value: '1e309' is too large"),
    ("float-scalar-huge-int", _spec("value = 0.5", 'value = "1 << 1100"'),
     "spec.scalar_value called float() on an integer beyond float range: OverflowError",
     "args.alpha.value: shift count too large in '1 << 1100'"),
    ("float-scalar-huge-product", _spec("value = 0.5", 'value = "2**64 * 2**64"'),
     "(a new check, not a crash) an integer beyond 2**126 made by a product", "args.alpha.value: '2**64 * 2**64' is too large"),
    ("shape-complex", _spec('shape = ["N"]\ninit', 'shape = ["(-1) ** 0.5"]\ninit'),
     "** of a negative base and a fractional exponent is complex; evaluate_int let it through: TypeError",
     "args.x.shape[0]: '(-1) ** 0.5' is a complex number"),
    ("grid-complex", _spec('grid = ["cdiv(N, BLOCK)"]', 'grid = ["(-1) ** 0.5"]'),
     "the same complex result in the launch geometry: TypeError", "launch.grid[0]: '(-1) ** 0.5' is a complex number"),
    ("counts-complex", _spec('bytes = "8 * N"', 'bytes = "(-1) ** 0.5"'),
     "spec.count called float() on a complex result: TypeError", "counts.bytes: '(-1) ** 0.5' is a complex number"),
    ("counts-huge-int", _spec('bytes = "8 * N"', 'bytes = "1 << 1100"'),
     "spec.count called float() on an integer beyond float range: OverflowError",
     "counts.bytes: shift count too large in '1 << 1100' (at most 126)"),
    ("shift-huge", _spec('bytes = "8 * N"', 'bytes = "1 << (1 << 40)"'),
     "<< had no bound (** has one: 64): MemoryError, and 1 << (1 << 33) allocated a GiB",
     "counts.bytes: shift count too large in '1 << (1 << 40)'"),
    ("power-nested", _spec('bytes = "8 * N"', 'bytes = "((((2**64)**64)**64)**64)**64"'),
     "nested ** was uncapped: 17 s of CPU, then OverflowError", "counts.bytes: '((((2**64)**64)**64)**64)**64' is too large"),
    ("deep-expression", _spec('bytes = "8 * N"', 'bytes = "' + "-" * 3000 + 'N"'),
     "ast.parse of a deeply nested expression raised RecursionError, which expr.evaluate did not catch",
     "counts.bytes: the expression is 3001 characters long; at most 1000 are allowed"),
    ("deep-short-expression", _spec('bytes = "8 * N"', 'bytes = "' + "-" * 999 + 'N"'),
     "(found while fixing these) at the length limit, 999 minus signs made the evaluator recurse: RecursionError",
     "counts.bytes: expression '----"),
    ("deep-toml-array", SPEC + "\nx = " + "[" * 1000 + "]" * 1000 + "\n",
     "tomllib raised RecursionError on deeply nested arrays; load_spec caught only TOMLDecodeError",
     "cannot read the spec (arrays or tables nested too deeply)"),
    ("toml-int-5000-digits", SPEC + "\nx = " + "1" * 5000 + "\n",
     "tomllib raised ValueError (Python's int digit limit) on a 5000-digit integer",
     "cannot read the spec (a number in it is too long)"),
    ("newline-in-a-size-name", _spec("timing = { N = 1048576 }", 'timing = { N = 1048576, "A\\nB" = 0 }'),
     "a quoted key with a newline was printed raw in the field path: a SpecError of two lines",
     "sizes.timing.'A\\nB' is not a valid size name"),
    ("newline-in-a-tolerance-key", SPEC + '\n[tolerance]\n"f\\nloat32" = { atol = 1 }\n',
     "the same raw newline in a tolerance key", "tolerance.'f\\nloat32' is not a known dtype"),
    ("newline-in-an-arg-name", _spec('name = "x"\ndtype = "float32"\nrole = "input"\nshape = ["N"]',
                                     'name = "x\\ny"\ndtype = "float32"\nrole = "input"\nshape = ["Q"]'),
     "the same raw newline in an argument's name", "args.'x\\ny'.shape[0]: unknown name 'Q'"),
    ("message-with-huge-int", _spec('shape = ["N"]\ninit', 'shape = ["-((10**64)**64)**2"]\ninit'),
     "the error message formatted a negative 8193-digit shape with str(), over Python's 4300-digit limit: ValueError",
     "args.x.shape[0]: '-((10**64)**64)**2' is too large"),
    ("reference-with-a-nul", SPEC + '\n[reference]\npython = "a\\u0000b.py:f"\n',
     "(found while fixing these) Path.resolve raised ValueError on the NUL", "reference.python names 'a\\x00b.py', which does not exist"),
    ("timing-warmup-inf", SPEC + "\n[timing]\nwarmup_ms = inf\n",
     "(found while fixing these) an infinite warm-up loaded, and the timer would warm up forever",
     "timing.warmup_ms must be a finite number, not inf"),
]


@pytest.mark.parametrize("text,message", [pytest.param(t, m, id=i) for i, t, why, m in FOUND_BUGS])
def test_found_bug_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "kernel.toml"
    path.write_text(text)
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as e:
        load_spec(path, kernel_source=KERNEL)
    assert time.perf_counter() - t0 < 1.0                      # no expression costs real time
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    assert message in msg, msg
