"""A declared tuning space (the spec's ``[tune]`` table, Kernel Tuner's ``tune_params`` and
``restrictions``) and where its names live in a kernel source.

A name is one quantity of the kernel: a ``#define NAME 16``, a file-scope ``constexpr``/``const``
integer, or an integer template parameter of the function the entry instantiates
(``matrixMul<16, size_t>(...)`` inside the entry, or ``template __global__ void k<16>(...)``).
Every place that spells the value is a :class:`Site`; setting a name rewrites all of them, so the
source stays ordinary CUDA. The launch, the shapes and the restrictions may use the names: a
template argument's value joins the source's constants (:func:`tune_constants`).
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from .. import expr as _expr
from ..errors import ExprError, SpecError
from ..expr import show
from ..source import Site, _walk, parse_tree, template_sites  # noqa: F401 (re-exported)

RESERVED = ("restrictions",)
# names that usually are a tunable quantity (a tile, a block dimension, work per thread)
TUNABLE_NAME = re.compile(
    r"(^|_)(BLOCK|BLOCKS|TILE|THREADS|TPB|WARPS|UNROLL|ITEMS|VEC|WPT|COARSEN|BM|BN|BK|TM|TN|"
    r"SIZE|DIM|X|Y|Z)(_|$|\d)")


@dataclass(frozen=True)
class TuneSpace:
    """Each name's values in the order given, and the restrictions (expressions over the names,
    the sizes and the source's constants) that every point must satisfy at every size set."""
    params: tuple[tuple[str, tuple[int, ...]], ...]
    restrictions: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.params)

    def values(self, name: str) -> tuple[int, ...]:
        return dict(self.params)[name]

    def __bool__(self) -> bool:
        return bool(self.params)

    def points(self) -> Iterable[dict[str, int]]:
        """Every combination of values (restrictions not applied), the first name varying slowest."""
        for combo in itertools.product(*(v for _, v in self.params)):
            yield dict(zip(self.names, combo))

    @property
    def cardinality(self) -> int:
        return math.prod(len(v) for _, v in self.params)

    def violated(self, point: Mapping[str, int], size_sets: Iterable[Mapping[str, int]],
                 constants: Mapping = {}) -> str | None:
        """The first restriction ``point`` breaks at some size set (with the sizes), else None. A
        restriction that cannot be evaluated counts as broken."""
        for sizes in size_sets:
            env = {**constants, **point, **sizes}
            for r in self.restrictions:
                try:
                    ok = _expr.evaluate(r, env, where="tune.restrictions")
                except ExprError as e:
                    return str(e)
                if not ok:
                    at = f" at sizes {dict(sizes)}" if sizes else ""
                    return f"the restriction {r!r} does not hold{at}"
        return None


def parse_tune(table, where: str) -> TuneSpace:
    """The ``[tune]`` table: ``name = [values]`` (integers, distinct) and ``restrictions = [...]``."""
    if not isinstance(table, dict):
        raise SpecError(f"{where}: tune must be a table of names with their lists of values.")
    params, restrictions = [], ()
    for key, value in table.items():
        field = f"{where}: tune.{key if isinstance(key, str) and key.isidentifier() else show(key)}"
        if key == "restrictions":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
                raise SpecError(f"{field} must be a list of expressions (strings), e.g. [\"BX * BY <= 1024\"].")
            for r in value:
                try:                # the syntax, with every name it uses standing for 1
                    _expr.evaluate(r, {n: 1 for n in _expr.names_in(r)}, where=field)
                except ExprError as e:
                    if "division by zero" not in str(e):
                        raise SpecError(str(e)) from None
            restrictions = tuple(value)
            continue
        if not isinstance(key, str) or not key.isidentifier():
            raise SpecError(f"{field}: a tunable is named like a C identifier.")
        if not isinstance(value, list) or not value:
            raise SpecError(f"{field} must be a non-empty list of integer values, e.g. [8, 16, 32].")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise SpecError(f"{field} must list integers only (found {show(value)}).")
        if len(set(value)) != len(value):
            raise SpecError(f"{field} lists a value twice ({show(value)}).")
        params.append((key, tuple(value)))
    if not params:
        raise SpecError(f"{where}: tune names no tunable (give each name its list of values).")
    names = {n for n, _ in params}
    for r in restrictions:
        if not _expr.names_in(r) & names:
            raise SpecError(f"{where}: tune.restrictions: {r!r} names none of the tunables ({', '.join(sorted(names))}).")
    return TuneSpace(tuple(params), restrictions)


# ----------------------------------------------------------------------------- the sites
def _t(node) -> str:
    return node.text.decode("utf-8", "replace")


def constant_sites(root) -> dict[str, Site]:
    """``#define NAME 16`` and file-scope ``constexpr int NAME = 16;`` / ``const int``: the literal."""
    out = {}
    for n in _walk(root):
        if n.type == "preproc_def":
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            if name is None or value is None:
                continue
            m = re.match(r"\s*(\d+)\s*(?://.*|/\*.*)?$", _t(value), re.S)
            if m:
                start = value.start_byte + len(_t(value)[:m.start(1)].encode())
                out[_t(name)] = Site(start, start + len(m.group(1)), int(m.group(1)), "define")
        elif n.type == "declaration" and n.parent is not None and n.parent.type == "translation_unit":
            if not {_t(c) for c in n.children if c.type == "type_qualifier"} & {"constexpr", "const"}:
                continue
            for c in n.children:
                if c.type != "init_declarator":
                    continue
                d, lit = c.child_by_field_name("declarator"), c.child_by_field_name("value")
                if d is not None and d.type == "identifier" and lit is not None \
                        and lit.type == "number_literal" and re.fullmatch(r"\d+[uU]?", _t(lit)):
                    text = _t(lit).rstrip("uU")
                    out[_t(d)] = Site(lit.start_byte, lit.start_byte + len(text), int(text), "constexpr")
    return out


def detected(source: str, entry: str) -> dict[str, tuple[int, str]]:
    """Integers of ``source`` that look like tunables: macros and constexprs named like one, and
    the template arguments the entry passes: name -> (value, kind)."""
    root = parse_tree(source).root_node
    out = {n: (s.value, s.kind) for n, s in constant_sites(root).items() if TUNABLE_NAME.search(n) and s.value >= 1}
    for name, sites in template_sites(root, entry).items():
        if len({s.value for s in sites}) == 1 and sites[0].value >= 1:
            out.setdefault(name, (sites[0].value, "template"))
    return out


def suggested_values(value: int) -> list[int]:
    """Powers of two from a quarter to four times ``value`` (a power of two), else ``value`` and its
    neighbouring powers of two."""
    if value & (value - 1) == 0:
        return [v for v in (value // 4, value // 2, value, value * 2, value * 4) if v >= 1]
    lo = 1 << (value.bit_length() - 1)
    return sorted({lo, value, lo * 2})


def find_sites(source: str, entry: str, names: Iterable[str]) -> dict[str, list[Site]]:
    """For each name, the places its value is written (none: the name is not in the source)."""
    root = parse_tree(source).root_node
    consts, templ = constant_sites(root), template_sites(root, entry)
    out = {}
    for name in names:
        sites = ([consts[name]] if name in consts else []) + templ.get(name, [])
        out[name] = sites
    return out


def read_point(source: str, entry: str, space: TuneSpace) -> dict[str, int]:
    """The value each declared name has in ``source`` (a name whose sites disagree, or that is not
    there, is left out)."""
    out = {}
    for name, sites in find_sites(source, entry, space.names).items():
        values = {s.value for s in sites}
        if len(values) == 1:
            out[name] = values.pop()
    return out


def tune_constants(source: str, entry: str, space: TuneSpace | None) -> dict[str, int]:
    """The declared names' values in ``source`` (template arguments included), for expressions."""
    return read_point(source, entry, space) if space else {}


def apply_point(source: str, entry: str, point: Mapping[str, int]) -> str:
    """``source`` with each named value rewritten at every one of its sites."""
    sites = find_sites(source, entry, point)
    edits = [(s.start, s.end, str(int(point[name]))) for name, ss in sites.items() for s in ss]
    missing = [n for n, ss in sites.items() if not ss]
    if missing:
        raise SpecError(f"the tunable(s) {', '.join(missing)} are not in the source.")
    data = source.encode("utf-8")
    for start, end, text in sorted(edits, reverse=True):
        data = data[:start] + text.encode("utf-8") + data[end:]
    return data.decode("utf-8")


def check_space(space: TuneSpace, source: str, entry: str, spec_path, kernel_path) -> None:
    """Every declared name is written somewhere in the kernel, with one value."""
    for name, sites in find_sites(source, entry, space.names).items():
        if not sites:
            raise SpecError(f"{spec_path}: tune.{name}: {kernel_path} has no #define, constexpr or template argument "
                            f"of {entry} named {name!r} whose value is an integer literal.")
        values = sorted({s.value for s in sites})
        if len(values) > 1:
            raise SpecError(f"{spec_path}: tune.{name}: {kernel_path} gives it several values ({', '.join(map(str, values))}).")
