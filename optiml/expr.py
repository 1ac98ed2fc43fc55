"""Safe integer/float expressions over named sizes and kernel constants.

Spec fields such as shapes, launch geometry and FLOP counts are expressions like
``"ceil_div(N, TILE) * 2"``.  They are parsed with :mod:`ast` and evaluated over a
whitelist of operators and functions, never with ``eval``.  Arithmetic follows C for
integers: ``/`` between two integers divides and truncates toward zero (as in the kernel
source), ``//`` floors, ``%`` is the remainder.
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Mapping

from .errors import ExprError

Number = int | float


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
    """The free names an expression refers to (functions excluded)."""
    if not isinstance(expr, str):
        return set()
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        return set()
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(expr: str | Number, env: Mapping[str, Number], *, where: str = "expression") -> Number:
    """Evaluate ``expr`` with the names in ``env``.

    ``where`` names the spec field for error messages (e.g. ``"kernel.toml: launch.grid[0]"``).
    Raises :class:`ExprError` with one sentence on an unknown name, bad syntax or arithmetic error.
    """
    if isinstance(expr, bool):
        raise ExprError(f"{where}: expected a number or an expression, got a boolean.")
    if isinstance(expr, (int, float)):
        return expr
    if not isinstance(expr, str):
        raise ExprError(f"{where}: expected a number or an expression string, got {type(expr).__name__}.")
    text = expr.strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ExprError(f"{where}: cannot parse expression {expr!r}.") from None
    try:
        return _eval(tree.body, env, where, text)
    except ZeroDivisionError:
        raise ExprError(f"{where}: division by zero in {expr!r}.") from None
    except (OverflowError, ValueError, TypeError) as e:
        raise ExprError(f"{where}: cannot evaluate {expr!r} ({e}).") from None


def _eval(node: ast.AST, env: Mapping[str, Number], where: str, text: str) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExprError(f"{where}: only numbers are allowed in {text!r}, not {node.value!r}.")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        known = ", ".join(sorted(env)) or "none"
        raise ExprError(f"{where}: unknown name {node.id!r} in {text!r} (known sizes and constants: {known}).")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a = _eval(node.left, env, where, text)
        b = _eval(node.right, env, where, text)
        if isinstance(node.op, ast.Pow) and abs(b) > 64:
            raise ExprError(f"{where}: exponent too large in {text!r}.")
        return _BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, env, where, text))
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        a = _eval(node.left, env, where, text)
        b = _eval(node.comparators[0], env, where, text)
        return int(_CMP[type(node.ops[0])](a, b))
    if isinstance(node, ast.IfExp):
        cond = _eval(node.test, env, where, text)
        return _eval(node.body if cond else node.orelse, env, where, text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = FUNCTIONS.get(node.func.id)
        if fn is None:
            raise ExprError(
                f"{where}: unknown function {node.func.id!r} in {text!r} "
                f"(available: {', '.join(sorted(FUNCTIONS))})."
            )
        return fn(*[_eval(a, env, where, text) for a in node.args])
    raise ExprError(f"{where}: unsupported syntax in {text!r}.")


def evaluate_int(expr: str | Number, env: Mapping[str, Number], *, where: str = "expression") -> int:
    """Evaluate and require a whole number (shapes, launch geometry)."""
    value = evaluate(expr, env, where=where)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"{where}: {expr!r} evaluates to {value}, which is not a whole number.")
        value = int(value)
    return value
