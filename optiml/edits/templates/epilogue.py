"""A GEMM's epilogue written through local scalars: the statements after the loop over k folded into
one expression of the accumulator.

First kernels often finish an output in steps::

    float v = acc * multiplier;
    if (v < 0.f) v *= negative_slope;
    C[row * N + col] = v;

:func:`folded_store` reads the statements that follow the loop in its block, in order, keeping
each local's value (the accumulator's too) as an expression (declarations, ``=`` and compound assignments), an ``if``
(with or without ``else``) as ``?:`` on the locals its branches change, and returns the one store
into an array whose value then mentions the accumulator: ``C[row * N + col] =
((acc * multiplier) < 0.f) ? ((acc * multiplier) * negative_slope) : (acc * multiplier)``. Anything
else there (a loop, a call statement, a second store, a store inside a branch, a pointer local) is
not folded: the caller then refuses the kernel with its reason.
"""
from __future__ import annotations

import re

from ..cutree import _t

_COMPOUND = {"+=": "+", "-=": "-", "*=": "*", "/=": "/"}


class _NotFolded(Exception):
    pass


def _subst(text: str, env: dict[str, str]) -> str:
    if not env:
        return text
    names = sorted(env, key=len, reverse=True)
    pat = re.compile(r"(?<![\w.>])(" + "|".join(map(re.escape, names)) + r")(?![\w\[(])")
    return pat.sub(lambda m: m.group(1) if env[m.group(1)] == m.group(1) else f"({env[m.group(1)]})", text)


def _statements(node):
    if node is None:
        return []
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


def _run(stmts, env: dict[str, str], pointers: set[str], stores: list, in_branch: bool) -> None:
    for st in stmts:
        if st.type == "comment":
            continue
        if st.type == "compound_statement":
            _run(_statements(st), env, pointers, stores, in_branch)
        elif st.type == "declaration":
            for d in st.children_by_field_name("declarator"):
                if d.type != "init_declarator":
                    raise _NotFolded("a declaration without a value")
                name, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                if name is None or name.type != "identifier" or value is None:
                    raise _NotFolded("a declaration of something other than a scalar")
                env[_t(name)] = _subst(_t(value), env)
        elif st.type == "expression_statement":
            expr = st.named_children[0] if st.named_children else None
            if expr is None or expr.type != "assignment_expression":
                raise _NotFolded("a statement other than an assignment")
            left, op = expr.child_by_field_name("left"), _t(expr.child_by_field_name("operator"))
            right = _subst(_t(expr.child_by_field_name("right")), env)
            if left.type == "identifier" and _t(left) in env:
                name = _t(left)
                env[name] = right if op == "=" else (f"({env[name]}) {_COMPOUND[op]} ({right})"
                                                    if op in _COMPOUND else _fail(op))
            elif left.type == "subscript_expression" and _t(left.child_by_field_name("argument")) in pointers \
                    and op == "=" and not in_branch:
                stores.append((_t(left.child_by_field_name("argument")),
                               _subst(_t(left.child_by_field_name("indices")).strip()[1:-1], env), right))
            else:
                raise _NotFolded(f"an assignment to {_t(left)}")
        elif st.type == "if_statement":
            cond = _t(st.child_by_field_name("condition")).strip()
            cond = _subst(cond[1:-1] if cond.startswith("(") and cond.endswith(")") else cond, env)
            then_env, else_env = dict(env), dict(env)
            _run(_statements(st.child_by_field_name("consequence")), then_env, pointers, stores, True)
            alt = st.child_by_field_name("alternative")
            if alt is not None:
                body = alt.named_children[0] if alt.type == "else_clause" and alt.named_children else alt
                _run(_statements(body), else_env, pointers, stores, True)
            for name in env:
                if then_env[name] != else_env[name]:
                    env[name] = f"({cond}) ? ({then_env[name]}) : ({else_env[name]})"
        else:
            raise _NotFolded(f"a {st.type.replace('_', ' ')}")


def _fail(op: str):
    raise _NotFolded(f"the operator {op}")


def folded_store(loop, pointers: set[str], acc_re: str, acc: str | None = None) -> tuple[str, str, str] | None:
    """(array, index, value) of the one store after ``loop`` (a for statement) in its block whose
    value, the locals written as their expressions, uses the accumulator; None where the statements
    there are not all foldable or no such store is found. The accumulator ``acc`` itself is one of
    those locals: ``sum += bias[col];`` after the loop is part of the epilogue."""
    parent = loop.parent
    if parent is None or parent.type != "compound_statement":
        return None
    after = [c for c in parent.named_children if c.start_byte >= loop.end_byte]
    env: dict[str, str] = {acc: acc} if acc else {}
    stores: list = []
    try:
        _run(after, env, pointers, stores, False)
    except _NotFolded:
        return None
    found = [s for s in stores if re.search(acc_re, s[2])]
    return found[0] if len(found) == 1 and len(stores) == 1 else None
