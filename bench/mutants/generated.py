"""Mutants made from a module's own code, for the modules the hand-written list does not reach.

Each is one small change the AST says is well formed: a comparison turned (``<`` and ``<=``, ``==``
and ``!=``, ``in`` and ``not in``, ``is`` and ``is not``), ``and`` for ``or`` and back, a ``not``
dropped, ``+`` for ``-`` and back, an integer one larger, an ``if``'s condition negated, a returned
value replaced by None. The snippet is the changed line, widened upwards until it occurs once in the
file; a change that cannot be told apart that way is left out. A module gets at most ``per_module``
of them, drawn with a fixed seed from all it has, one function's worth at a time, so they spread
over its functions. Its tests are the test files that import it (by its dotted name, or by its name
from its package) and, for a subpackage's module, those that import its subpackage (a module is
often reached through it: the judge through the runner).

    python3 bench/mutants/mutants.py --module optiml/edits/hygiene.py     # these modules' mutants
    python3 bench/mutants/mutants.py --changed main~5                      # the modules changed since a revision

Some generated mutants do not change behaviour (an integer that only names a width, a return value
nobody reads): a survivor is a line to read, not always a missing test.
"""
from __future__ import annotations

import ast
import random
import re
import subprocess
from pathlib import Path

_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add}


def _changes(tree: ast.AST):
    """(node, its replacement node) for every change this module makes, with the function it is in."""
    out = []

    def visit(node, fn):
        fn = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            out.append((fn, node, ast.Compare(node.left, [_COMPARE[type(node.ops[0])]()], node.comparators)))
        elif isinstance(node, ast.BoolOp):
            other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            out.append((fn, node, ast.BoolOp(other, node.values)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((fn, node, node.operand))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP and not _is_text(node):
            out.append((fn, node, ast.BinOp(node.left, _BINOP[type(node.op)](), node.right)))
        elif isinstance(node, ast.Constant) and type(node.value) is int and fn is not None:
            out.append((fn, node, ast.Constant(node.value + 1)))
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)):
            out.append((fn, node.test, ast.UnaryOp(ast.Not(), node.test)))
        elif isinstance(node, ast.Return) and node.value is not None and \
                not (isinstance(node.value, ast.Constant) and node.value.value is None):
            out.append((fn, node.value, ast.Constant(None)))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.JoinedStr) or _docstring_like(child):
                continue             # f-strings: their inner positions are not reliable before Python 3.12
            visit(child, fn)

    visit(tree, None)
    return out


def _is_text(node: ast.BinOp) -> bool:
    """A string concatenation (``+`` of text), which ``-`` would only break at import."""
    return any(isinstance(s, ast.JoinedStr) or (isinstance(s, ast.Constant) and isinstance(s.value, str))
               for s in (node.left, node.right))


def _docstring_like(node) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _snippet(text: str, lines: list[str], node, new: str) -> tuple[str, str] | None:
    """(old, new) snippets: the node's lines with the node's text replaced, widened upwards until
    the old one occurs once in ``text``; None if the node spans lines differently or never gets unique."""
    if node.lineno != node.end_lineno:
        return None
    row = lines[node.lineno - 1]
    start, end = _col(row, node.col_offset), _col(row, node.end_col_offset)
    changed = row[:start] + new + row[end:]
    if changed == row:
        return None
    first = node.lineno - 1
    while first >= 0:
        old = "\n".join(lines[first:node.lineno - 1] + [row]) + "\n"
        if text.count(old) == 1:
            return old, "\n".join(lines[first:node.lineno - 1] + [changed]) + "\n"
        first -= 1
        if node.lineno - first > 4:
            return None
    return None


def _col(row: str, byte_offset: int) -> int:
    """The character index of a UTF-8 byte offset into ``row`` (ast gives bytes)."""
    return len(row.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def tests_of(module: Path, repo: Path) -> tuple[str, ...]:
    """The test files that import ``module`` (its dotted name, or its name from its package),
    then (for a subpackage's module, or where none does) those that import its package; in each
    group those named after the module, then after its package, first: the closest tests run
    first, as pytest -x stops at the first failure."""
    rel = module.relative_to(repo).with_suffix("")
    dotted = ".".join(rel.parts)
    pkg, name = ".".join(rel.parts[:-1]), rel.parts[-1]
    own = re.compile(rf"\b{re.escape(dotted)}\b|from {re.escape(pkg)} import [^\n]*\b{re.escape(name)}\b")
    package = re.compile(rf"\b{re.escape(pkg)}\b")
    files = sorted((repo / "tests").glob("test_*.py"))
    close = lambda f: _closeness(f.name, rel)       # noqa: E731
    mine = sorted((f for f in files if own.search(f.read_text(errors="ignore"))), key=close)
    if not mine or pkg != "optiml":    # a subpackage's module is often reached through the subpackage
        mine += sorted((f for f in files if f not in mine and package.search(f.read_text(errors="ignore"))), key=close)
    return tuple(str(f.relative_to(repo)) for f in mine)


def _closeness(test_file: str, rel: Path) -> tuple[int, str]:
    """Test files named after the module first (test_store*.py), then after its package
    (test_traces*.py), then the rest, each group by name."""
    name, stage = rel.parts[-1], rel.parts[-2] if len(rel.parts) > 2 else rel.parts[-1]
    return (0 if name in test_file else 1 if stage in test_file else 2), test_file


def named_after(test_file: str, module: str) -> bool:
    """Whether a test file is named after the module (relative path) or its package: its own tests."""
    return _closeness(Path(test_file).name, Path(module).with_suffix(""))[0] <= 1


def _draw(by_fn: dict[str, list], name: str, per_module: int, seed: int, exclude: set) -> list[tuple[str, str]]:
    """Up to ``per_module`` (old, new) not in ``exclude``, one function's pool at a time in turn."""
    rng = random.Random(f"{seed}:{name}")
    pools = [rng.sample(v, len(v)) for _, v in sorted(by_fn.items())]
    rng.shuffle(pools)
    picked, seen = [], set(exclude)
    while len(picked) < per_module and any(pools):
        for pool in pools:
            while pool and len(picked) < per_module:
                old, new = pool.pop()
                if (old, new) not in seen:
                    seen.add((old, new))
                    picked.append((old, new))
                    break
    return picked


def generate(module: Path, repo: Path, per_module: int = 8, seed: int = 0) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """Up to ``per_module`` (file, old, new, tests) for ``module``, spread over its functions. Seed 0 is
    the standing set; another seed draws mutants the standing set does not hold (fresh ones, which the
    tests were not written against)."""
    text = module.read_text()
    lines = text.split("\n")
    tree = ast.parse(text)
    by_fn: dict[str, list] = {}
    for fn, node, repl in _changes(tree):
        snip = _snippet(text, lines, node, ast.unparse(repl))
        if snip is not None and snip[0] != snip[1]:
            by_fn.setdefault(fn or "", []).append(snip)
    exclude = set(_draw(by_fn, module.name, per_module, 0, set())) if seed else set()
    picked = _draw(by_fn, module.name, per_module, seed, exclude)
    tests = tests_of(module, repo)
    rel = str(module.relative_to(repo))
    return [(rel, old, new, tests) for old, new in picked]


def changed_modules(repo: Path, rev: str) -> list[Path]:
    """The package's Python modules changed since ``rev`` (and still there)."""
    out = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", rev, "--", "optiml"],
                         check=True, capture_output=True, text=True).stdout.split()
    return [repo / p for p in out if p.endswith(".py") and (repo / p).is_file()]
