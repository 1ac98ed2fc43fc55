"""Safe integer/float expressions over named sizes and kernel constants.

Spec fields such as shapes, launch geometry and FLOP counts are expressions like
``"ceil_div(N, TILE) * 2"``.  They are parsed with :mod:`ast` and evaluated over a
whitelist of operators and functions, never with ``eval``.  Arithmetic follows C for
integers: ``/`` between two integers divides and truncates toward zero (as in the kernel
source), ``//`` floors, ``%`` is the remainder.

Every value stays small and real: the text is at most ``MAX_TEXT`` characters and
``MAX_DEPTH`` levels deep, and after each operation a complex result, a NaN or infinity, or an
integer beyond ``MAX_INT`` is an :class:`ExprError`. So no expression costs much time or
memory, and no message has to spell out a huge number.
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Mapping

from .errors import ExprError

Number = int | float

MAX_TEXT = 1000          # characters in one expression
MAX_DEPTH = 100          # nesting of the parsed expression
MAX_INT = 2**126         # far above any real size, count or launch dimension
MAX_SHIFT = 126          # the largest shift count of << and >>
MAX_POW = 64             # the largest exponent of **


def show(value, limit: int = 60) -> str:
    """``repr(value)`` for a message: one line, at most ``limit`` characters, no huge number spelled out."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() * 0.302 > limit - 5:
        return f"a {value.bit_length()}-bit integer"
    try:
        r = repr(value)
    except (RecursionError, ValueError, MemoryError):
        r = f"a {type(value).__name__}"
    return r if len(r) <= limit else r[:limit - 3] + "..."


def ceil_div(a: Number, b: Number) -> int:
    if b == 0:
        raise ZeroDivisionError("ceil_div by zero")
    return -(-int(a) // int(b))


def _c_div(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


FUNCTIONS = {
    "ceil_div": ceil_div,
    "cdiv": ceil_div,
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "sqrt": math.sqrt,
    "log2": math.log2,
    "round_up": lambda a, b: ceil_div(a, b) * int(b),
}

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _c_div,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CMP = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne,
}


def names_in(expr: str | Number) -> set[str]:
    """The free names an expression refers to (functions excluded); none if it does not parse."""
    if not isinstance(expr, str) or len(expr) > MAX_TEXT:
        return set()
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(expr: str | Number, env: Mapping[str, Number], *, where: str = "expression") -> Number:
    """Evaluate ``expr`` with the names in ``env``.

    ``where`` names the spec field for error messages (e.g. ``"kernel.toml: launch.grid[0]"``).
    Raises :class:`ExprError` with one sentence on an unknown name, bad syntax, an arithmetic
    error, or a value that is not a finite real number within ``MAX_INT``.
    """
    if isinstance(expr, bool):
        raise ExprError(f"{where}: expected a number or an expression, got a boolean.")
    if isinstance(expr, (int, float)):
        return _checked(expr, where, expr)
    if not isinstance(expr, str):
        raise ExprError(f"{where}: expected a number or an expression string, got {type(expr).__name__}.")
    if len(expr) > MAX_TEXT:
        raise ExprError(f"{where}: the expression is {len(expr)} characters long; at most {MAX_TEXT} are allowed.")
    text = expr.strip()
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):      # ValueError: a NUL character
        raise ExprError(f"{where}: cannot parse expression {show(expr)}.") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"{where}: expression {show(expr)} is nested too deeply.") from None
    if _depth(tree.body) > MAX_DEPTH:
        raise ExprError(f"{where}: expression {show(expr)} is nested more than {MAX_DEPTH} levels deep.")
    try:
        return _eval(tree.body, env, where, text)
    except ZeroDivisionError:
        raise ExprError(f"{where}: division by zero in {show(expr)}.") from None
    except OverflowError:
        raise ExprError(f"{where}: {show(expr)} is too large.") from None
    except (ValueError, TypeError) as e:
        reason = " ".join(str(e).split())[:80]
        raise ExprError(f"{where}: cannot evaluate {show(expr)} ({reason}).") from None


def _depth(node: ast.AST) -> int:
    """How deeply ``node`` nests, counted without recursion (the tree may be deep)."""
    deepest, stack = 0, [(node, 1)]
    while stack and deepest <= MAX_DEPTH:
        n, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(n))
    return deepest


def _checked(value, where: str, expr) -> Number:
    """``value`` if it is a finite real number within ``MAX_INT``, else an ExprError about ``expr``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if -MAX_INT <= value <= MAX_INT:
            return value
        raise ExprError(f"{where}: {show(expr)} is too large (beyond 2**126 in magnitude).")
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if not isinstance(expr, str):
            raise ExprError(f"{where} is {value}; it must be a finite number.")
        if math.isinf(value):
            raise ExprError(f"{where}: {show(expr)} is too large (it overflows to infinity).")
        raise ExprError(f"{where}: {show(expr)} is NaN, not a number.")
    if isinstance(value, complex):
        raise ExprError(f"{where}: {show(expr)} is a complex number, not a real one.")
    raise ExprError(f"{where}: {show(expr)} is a {type(value).__name__}, not a number.")


def _eval(node: ast.AST, env: Mapping[str, Number], where: str, text: str) -> Number:
    return _checked(_eval_node(node, env, where, text), where, text)


def _eval_node(node: ast.AST, env: Mapping[str, Number], where: str, text: str):
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"{where}: only numbers are allowed in {show(text)}, not {show(node.value)}.")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        known = ", ".join(sorted(env)) or "none"
        raise ExprError(f"{where}: unknown name {show(node.id)} in {show(text)} (known sizes and constants: {known}).")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a = _eval(node.left, env, where, text)
        b = _eval(node.right, env, where, text)
        if isinstance(node.op, ast.Pow) and abs(b) > MAX_POW:
            raise ExprError(f"{where}: exponent too large in {show(text)} (at most {MAX_POW}).")
        if isinstance(node.op, (ast.LShift, ast.RShift)) and abs(b) > MAX_SHIFT:
            raise ExprError(f"{where}: shift count too large in {show(text)} (at most {MAX_SHIFT}).")
        return _BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, env, where, text))
    if isinstance(node, ast.Compare) and all(type(op) in _CMP for op in node.ops):
        a = _eval(node.left, env, where, text)      # chained as in Python: a < b <= c
        for op, right in zip(node.ops, node.comparators):
            b = _eval(right, env, where, text)
            if not _CMP[type(op)](a, b):
                return 0
            a = b
        return 1
    if isinstance(node, ast.BoolOp):                # and / or, short-circuit, as 1 or 0
        want = isinstance(node.op, ast.Or)
        for v in node.values:
            if bool(_eval(v, env, where, text)) == want:
                return int(want)
        return int(not want)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return int(not _eval(node.operand, env, where, text))
    if isinstance(node, ast.IfExp):
        cond = _eval(node.test, env, where, text)
        return _eval(node.body if cond else node.orelse, env, where, text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = FUNCTIONS.get(node.func.id)
        if fn is None:
            raise ExprError(
                f"{where}: unknown function {node.func.id!r} in {show(text)} "
                f"(available: {', '.join(sorted(FUNCTIONS))})."
            )
        return fn(*[_eval(a, env, where, text) for a in node.args])
    raise ExprError(f"{where}: unsupported syntax in {show(text)}.")


def evaluate_int(expr: str | Number, env: Mapping[str, Number], *, where: str = "expression") -> int:
    """Evaluate and require a whole number (shapes, launch geometry)."""
    value = evaluate(expr, env, where=where)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"{where}: {show(expr)} evaluates to {value}, which is not a whole number.")
        value = _checked(int(value), where, expr)
    return value
