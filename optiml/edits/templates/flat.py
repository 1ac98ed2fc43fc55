"""Flat operations (issue 26): elementwise and broadcast maps, and full reductions into one value,
recognised from a kernel that handles one element ``i`` of ``[0, n)`` at a time and run by a tuned
template behind the user's own entry signature.

The kernel's shape is one of the forms a first kernel has:

- ``int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { BODY }`` (or ``if (i >= n) return;``
  then BODY, or ``if (i < n) STATEMENT;``);
- ``for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) { BODY }``;

with, before it, statements over the kernel's scalars (kept) and the kernel's own indexing (dropped).
BODY is the *per-element program*: any code over scalars, the element ``i`` and arrays, where

- an array read at ``[i]`` is an element (the template loads VEC of them as one vector);
- an array written at ``[i]`` (``y[i] = E``, ``y[i] += E``) is an output (stored as vectors); an
  output read at ``[i]`` or written only on some paths is loaded first, so what BODY leaves keeps its value;
- any other read (``b[i % C]``, ``w[0]``, ``x[i + 1]``) is a gather, kept as it is;
- ``atomicAdd(out, E)`` (or atomicMax/atomicMin, on ``out`` or ``&out[0]``) makes it a full
  reduction: the template accumulates E in a register over a grid-stride loop, combines a block's
  values by shuffles and shared memory, and adds once a block.

Refused with the reason: threads that cooperate (shared memory, barriers, shuffles, ``threadIdx`` in
BODY), writes or output reads at another index, ``return``/``break`` that leave BODY, pointer
arithmetic, an atomic whose result is used, a map and an atomic together. Like every template, the
recognition is a hypothesis: each candidate is verified against the user's reference.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from ...source import _walk
from ..cutree import _entry_def, _flat, _params, _splice, _t, _tree
from .common import Spaced, place

_SIZE = {"float": 4, "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "double": 8, "int": 4,
         "unsigned": 4, "unsigned int": 4, "char": 1, "signed char": 1, "unsigned char": 1, "short": 2,
         "long long": 8, "unsigned long long": 8, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "int32_t": 4,
         "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "bool": 1, "float2": 8, "float4": 16, "double2": 16}
_COOPERATE = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim|warpSize|__syncthreads\w*|__syncwarp|__shfl\w*|"
                        r"__threadfence\w*|__reduce_\w+_sync|__ballot\w*|__any_sync|__all_sync|__activemask|"
                        r"cooperative_groups|cg|__shared__|clock\w*|__nanosleep)\b")
_ATOMICS = {"atomicAdd": "+", "atomicMax": "max", "atomicMin": "min"}
_CAST = r"(?:\(\s*(?:size_t|int|long long|long|int64_t|unsigned(?: int)?|uint32_t|uint64_t)\s*\)\s*)?"


@dataclass(frozen=True)
class FlatOp:
    """A flat kernel: its per-element program (``body``, over the kernel's own index ``index``), the
    arrays it reads (``elems``) and writes (``outs``) at the index, with their element types, the
    outputs loaded before BODY (``loaded``), the kernel's statements kept before the loop
    (``prelude``), the element count as the kernel writes it (``n``) and as the spec's sizes do
    (``n_size``, for the launch); a reduction's atomic, its target and value type."""
    entry: str
    kind: str                       # "map" | "reduce"
    index: str                      # the kernel's names of the element ("i", or "r and c" of a matrix)
    index_decl: str                 # the template's declaration of them from its flat index optiml_i
    n: str
    n_size: str
    body: str
    elems: tuple = ()               # ((array, element type), ...)
    outs: tuple = ()
    loaded: tuple = ()              # names of outs read (or written on some paths only)
    prelude: tuple = ()
    atomic: str = ""                # reduce: atomicAdd | atomicMax | atomicMin
    target: str = ""                # reduce: the pointer the atomic adds to
    acc_type: str = ""              # reduce: the target's element type
    n_timing: int = 0

    @property
    def op(self) -> str:
        return _ATOMICS.get(self.atomic, "")

    def describe(self) -> str:
        ins = ", ".join(a for a, _ in self.elems) or "no arrays"
        if self.kind == "reduce":
            what = {"+": "sum", "max": "max", "min": "min"}[self.op]
            return f"full reduction ({what}) over {self.n} elements of {ins} into {self.target}"
        return f"elementwise map over {self.n} elements: {ins} -> {', '.join(a for a, _ in self.outs)}"

    @property
    def widest(self) -> int:
        return max([_SIZE.get(t, 4) for _, t in self.elems + self.outs] or [4])


@dataclass(frozen=True)
class FlatTemplate(Spaced):
    name: str
    kind: str
    space: dict
    restrictions: tuple
    what: str
    hint: float
    grid: str                       # over {n} (the spec's element count)
    threads: str = "OPTIML_THREADS"
    flags: tuple = ()

    def start_for(self, op: FlatOp) -> dict:
        """16-byte loads where the types allow; a map's block does 2 vectors a thread where the
        timing size leaves at least 4 blocks an SM of a large GPU, a reduction's 4 in flight."""
        vec = max(1, min(8, 16 // max(1, op.widest)))
        per_block = 256 * vec
        if self.kind == "map":
            items = 2 if op.n_timing >= 132 * 4 * 2 * per_block else 1
            return {"OPTIML_THREADS": 256, "OPTIML_VEC": vec, "OPTIML_ITEMS": items}
        return {"OPTIML_THREADS": 256, "OPTIML_VEC": vec, "OPTIML_ITEMS": 4, "OPTIML_BLOCKS": 1024}


FLAT_TEMPLATES = (
    FlatTemplate("elementwise", "map",
                 {"OPTIML_THREADS": [64, 128, 256, 512, 1024], "OPTIML_VEC": [1, 2, 4, 8], "OPTIML_ITEMS": [1, 2, 4, 8]},
                 ("OPTIML_VEC * OPTIML_ITEMS <= 32",),
                 "each thread ITEMS vectors of VEC elements (all loads issued before any is used), every array "
                 "read or written at the element moved as one vector when aligned, the rest element by element", 1.1,
                 grid="cdiv({n}, OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS)"),
    FlatTemplate("reduce_all", "reduce",
                 {"OPTIML_THREADS": [128, 256, 512, 1024], "OPTIML_VEC": [1, 2, 4, 8], "OPTIML_ITEMS": [1, 2, 4, 8],
                  "OPTIML_BLOCKS": [256, 512, 1024, 2048]},
                 ("OPTIML_VEC * OPTIML_ITEMS <= 32",),
                 "a grid-stride loop accumulating in a register (ITEMS vectors of VEC elements loaded before any "
                 "is used), the block's values combined by warp shuffles and shared memory, one atomic a block "
                 "(at most BLOCKS blocks)", 1.3,
                 grid="min(cdiv({n}, OPTIML_THREADS * OPTIML_VEC * OPTIML_ITEMS), OPTIML_BLOCKS)"),
)


class _Refuse(Exception):
    pass


def _short(t: str) -> str:
    t = re.sub(r"\s+", " ", t).strip()
    return t if len(t) <= 60 else t[:57] + "..."


def _strip(text: str) -> str:
    """``text`` without spaces, outer parentheses or integer casts."""
    t = re.sub(r"\s+", "", text)
    t = re.sub(r"\((?:size_t|int|longlong|long|int64_t|unsigned|unsignedint|uint32_t|uint64_t)\)", "", t)
    while t.startswith("(") and t.endswith(")") and t.count("(") == 1:
        t = t[1:-1]
    return t


def _one_item(value: str, block, axis: str = "x") -> bool:
    """``value`` is the first element of a thread along ``axis``: ``blockIdx.x * blockDim.x +
    threadIdx.x`` (either order of terms and factors, casts allowed; the launch's literal block for
    ``blockDim.x``)."""
    t = _strip(value)
    dims = {f"blockDim.{axis}"} | ({str(block)} if block is not None else set())
    parts = t.split("+")
    if len(parts) != 2 or f"threadIdx.{axis}" not in parts:
        return False
    prod = parts[1 - parts.index(f"threadIdx.{axis}")].strip("()")
    f = prod.split("*")
    return len(f) == 2 and f"blockIdx.{axis}" in f and f[1 - f.index(f"blockIdx.{axis}")].strip("()") in dims


@dataclass(frozen=True)
class _Index:
    """The kernel's own index of an element: its names, the template's declaration of them from the
    flat index ``optiml_i``, and the subscripts (stripped) that name the element."""
    names: tuple
    decl: str
    forms: frozenset

    @staticmethod
    def one(name: str, ty: str) -> "_Index":
        return _Index((name,), f"const {ty} {name} = ({ty})optiml_i; (void){name};", frozenset({name}))

    @staticmethod
    def two(r: str, rty: str, c: str, cty: str, cols: str) -> "_Index":
        """Row ``r`` and column ``c`` of a row-major matrix of ``cols`` columns: the element is
        ``r * cols + c``."""
        w = _strip(cols)
        forms = {f"{r}*{w}+{c}", f"{w}*{r}+{c}", f"{c}+{r}*{w}", f"{c}+{w}*{r}"}
        decl = (f"const {rty} {r} = ({rty})(optiml_i / ({cols})); const {cty} {c} = ({cty})(optiml_i % ({cols})); "
                f"(void){r}; (void){c};")
        return _Index((r, c), decl, frozenset(forms))

    @property
    def label(self) -> str:
        return " and ".join(self.names)


def _declaration(s):
    """(name, type text, value text) of a declaration of one initialised scalar, else None."""
    if s.type != "declaration":
        return None
    ds = [c for c in s.named_children if c.type == "init_declarator"]
    if len(ds) != 1 or len([c for c in s.named_children if c.type in ("init_declarator", "identifier")]) != 1:
        return None
    d, v = ds[0].child_by_field_name("declarator"), ds[0].child_by_field_name("value")
    if d is None or d.type != "identifier" or v is None:
        return None
    ty = s.child_by_field_name("type")
    return _t(d), (_t(ty) if ty is not None else "int"), _t(v)


_SIZES = re.compile(r"[\w\s()*+\-]+")


def _bound2(cond_text: str, r: str, c: str, negated: bool) -> tuple[str, str] | None:
    """(ROWS, COLS) of ``r < ROWS && c < COLS`` (either order), or with ``negated`` of ``r >= ROWS ||
    c >= COLS``, else None."""
    t = _flat(cond_text).strip()
    while t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    parts = [p.strip() for p in t.split("||" if negated else "&&")]
    if len(parts) != 2:
        return None
    found = {}
    for p in parts:
        while p.startswith("(") and p.endswith(")"):
            p = p[1:-1].strip()
        for v in (r, c):
            m = (re.fullmatch(rf"{_CAST}{re.escape(v)}\s*>=\s*(.+)", p) or re.fullmatch(rf"(.+?)\s*<=\s*{_CAST}{re.escape(v)}", p)
                 if negated else
                 re.fullmatch(rf"{_CAST}{re.escape(v)}\s*<\s*(.+)", p) or re.fullmatch(rf"(.+?)\s*>\s*{_CAST}{re.escape(v)}", p))
            if m and _SIZES.fullmatch(m.group(1)):
                found[v] = m.group(1).strip()
    return (found[r], found[c]) if set(found) == {r, c} else None


def _bound(cond_text: str, index: str) -> str | None:
    """BOUND of ``index < BOUND`` (or ``BOUND > index``), else None."""
    t = _flat(cond_text).strip()
    while t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    m = re.fullmatch(rf"{_CAST}{re.escape(index)}\s*<\s*(.+)", t) or re.fullmatch(rf"(.+?)\s*>\s*{_CAST}{re.escape(index)}", t)
    if not m or not _SIZES.fullmatch(m.group(1)):
        return None
    return m.group(1).strip()


def recognize_flat(source: str, entry: str, spec) -> tuple[FlatOp | None, str | None]:
    """The flat operation behind ``entry`` (see the module), or (None, why not); ``why`` is None
    where nothing looked like one element a thread."""
    root = _tree(source)
    fn, fdecl = _entry_def(root, entry)
    if fn is None or spec is None:
        return None, None
    if fn.parent is not None and fn.parent.type == "template_declaration":
        return None, "not templated: the entry is a C++ template"
    params = {}
    for name, _, ptr, p in _params(fdecl):
        ty = p.child_by_field_name("type")
        params[name] = (_t(ty) if ty is not None else "", ptr is not None)
    pointers = {n for n, (_, is_ptr) in params.items() if is_ptr}
    launch = getattr(spec, "launch", None)
    block = tuple(getattr(launch, "block", ()) or ()) if launch is not None else ()
    try:
        shape = _Shape(fn, block[0] if block else None, pointers, block[1] if len(block) > 1 else None).read()
    except _Refuse as e:
        return None, str(e)
    if shape is None:
        return None, None
    index, bound, prelude, stmts, dropped = shape
    try:
        from ...source import _constants
        n_size = _spec_count(bound, params, spec, set(_constants(root)))
        prog = _Body(stmts, index, pointers, params, dropped, _cooperating_helpers(root, fn)).read()
    except _Refuse as e:
        return None, str(e)
    kind = "reduce" if prog["atomic"] else "map"
    if kind == "map" and not prog["outs"]:
        return None, None
    from ...expr import evaluate
    try:
        n_timing = int(evaluate(n_size, dict(getattr(spec, "timing_sizes", {}) or {})))
    except Exception:
        n_timing = 0
    typed = lambda names: tuple((a, params[a][0]) for a in sorted(names))      # noqa: E731
    return FlatOp(entry=entry, kind=kind, index=index.label, index_decl=index.decl, n=bound, n_size=n_size,
                  body=prog["body"], elems=typed(prog["elems"]), outs=typed(prog["outs"]),
                  loaded=tuple(sorted(prog["loaded"])), prelude=tuple(prelude), atomic=prog["atomic"],
                  target=prog["target"], acc_type=params[prog["target"]][0] if prog["target"] else "",
                  n_timing=n_timing), None


def _spec_count(bound: str, params: dict, spec, constants: set = frozenset()) -> str:
    """The spec's expression of the kernel's element count ``bound`` (its scalar arguments replaced
    by the spec's values; the source's integer constants, which launch expressions read, kept)."""
    values = {a.name: str(a.value) for a in spec.args if a.role == "scalar"}
    out = _strip(bound)
    if not re.fullmatch(r"[\w()*+\- ]+", out):
        raise _Refuse(f"not templated: the element count {bound} is not a product of the kernel's sizes")
    def sub(m):
        name = m.group(0)
        if re.fullmatch(r"\d+", name) or (name in constants and name not in params):
            return name
        if name not in values:
            raise _Refuse(f"not templated: the element count uses {name}, which is not a scalar of the spec")
        return f"({values[name]})"
    return re.sub(r"\b\w+\b", sub, out)


def _cooperating_helpers(root, fn) -> set[str]:
    """Device functions whose code has threads cooperate or read their own coordinates."""
    out = set()
    for d in _walk(root):
        if d.type == "function_definition" and d is not fn and _COOPERATE.search(_t(d.child_by_field_name("body") or d)):
            decl = d.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            if decl is not None:
                out.add(_t(decl.child_by_field_name("declarator")))
    return out


class _Shape:
    """Reads the kernel's form (see the module): its index, bound, kept prelude and BODY."""

    def __init__(self, fn, block, pointers, block_y=None):
        self.fn, self.block, self.pointers, self.block_y = fn, block, pointers, block_y

    def read(self):
        body = self.fn.child_by_field_name("body")
        stmts = [c for c in body.named_children if c.type != "comment"]
        index = index_type = row = None
        prelude, dropped = [], set()
        def result(idx, bound, inner):
            if row is not None and row[0] not in idx.names:
                dropped.add(row[0])
            return idx, bound, prelude, inner, dropped
        for k, s in enumerate(stmts):
            t = _t(s)
            if s.type.startswith("preproc"):
                if t.lstrip().startswith("#pragma"):
                    continue
                raise _Refuse(f"not templated: a preprocessor line inside the kernel: {_short(t)}")
            d = _declaration(s)
            if index is None and d is not None and _one_item(d[2], self.block):
                index, index_type = d[0], re.sub(r"\bconst\b\s*", "", d[1]).strip() or "int"
                continue
            if row is None and d is not None and _one_item(d[2], self.block_y, "y"):
                row = (d[0], re.sub(r"\bconst\b\s*", "", d[1]).strip() or "int")
                continue
            if s.type == "for_statement":
                got = self._grid_stride(s, index, dropped)
                if got is None:
                    return None
                if any(c.type != "comment" for c in stmts[k + 1:]):
                    raise _Refuse("not templated: statements after the per-element loop")
                idx, ity, bound, inner = got
                return result(_Index.one(idx, ity), bound, inner)
            if index is not None and s.type == "if_statement":
                cond = _t(s.child_by_field_name("condition"))
                cons, alt = s.child_by_field_name("consequence"), s.child_by_field_name("alternative")
                rest = any(c.type != "comment" for c in stmts[k + 1:])
                returns = re.fullmatch(r"\{?\s*return\s*;\s*\}?", _t(cons).strip()) is not None
                if row is not None and alt is None:            # a matrix: (row, column) of a row-major layout
                    sizes = _bound2(cond, row[0], index, returns)
                    if sizes is not None:
                        idx = _Index.two(row[0], row[1], index, index_type, sizes[1])
                        bound = f"({sizes[0]}) * ({sizes[1]})"
                        if returns:
                            return result(idx, bound, stmts[k + 1:])
                        if rest:
                            raise _Refuse("not templated: statements after the guarded per-element code")
                        return result(idx, bound, _statements(cons))
                bound = _bound(cond, index)
                if bound is not None and alt is None:
                    if rest:
                        raise _Refuse("not templated: statements after the guarded per-element code")
                    return result(_Index.one(index, index_type), bound, _statements(cons))
                early = re.fullmatch(rf"\(\s*{_CAST}{re.escape(index)}\s*>=\s*(.+)\)|\(\s*(.+?)\s*<=\s*{_CAST}{re.escape(index)}\s*\)",
                                     _flat(cond))
                if early and alt is None and returns and _SIZES.fullmatch(early.group(1) or early.group(2)):
                    return result(_Index.one(index, index_type), (early.group(1) or early.group(2)).strip(), stmts[k + 1:])
                if re.search(rf"\b{re.escape(index)}\b", cond):
                    raise _Refuse(f"not templated: the guard {_short(cond)} is more than {index} < a count")
                return None
            if _COOPERATE.search(t):
                if s.type == "declaration" and _declaration(s) is not None:
                    dropped.add(_declaration(s)[0])           # the kernel's own indexing: gone in the template
                    continue
                raise _Refuse(f"not templated: threads cooperate outside the per-element code: {_short(t)}")
            if s.type == "declaration" and not any(n.type in ("pointer_declarator", "array_declarator", "reference_declarator")
                                                   for n in _walk(s)) and not self._touches_memory(s):
                if any(v is not None and re.search(rf"\b{re.escape(v)}\b", t) for v in (index, row and row[0])):
                    return None
                prelude.append(_flat(t))
                continue
            return None
        return None

    def _touches_memory(self, s) -> bool:
        return any(n.type == "call_expression" and re.match(r"atomic", _t(n)) for n in _walk(s)) or \
            any(n.type == "assignment_expression" and n.child_by_field_name("left").type != "identifier" for n in _walk(s))

    def _grid_stride(self, loop, index, dropped):
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        if init is None or cond is None or upd is None:
            return None
        d = _declaration(init) if init.type == "declaration" else None
        if d is not None and _one_item(d[2], self.block):
            idx, ity = d[0], re.sub(r"\bconst\b\s*", "", d[1]).strip() or "int"
        elif d is not None and index is not None and _strip(d[2]) == index:      # for (int j = i; ...)
            idx, ity = d[0], re.sub(r"\bconst\b\s*", "", d[1]).strip() or "int"
            dropped.add(index)
        elif index is not None and re.fullmatch(rf"{re.escape(index)}\s*=\s*{re.escape(index)}\s*;?|;?", _flat(_t(init))):
            idx, ity = index, None
        else:
            return None
        bound = _bound(_t(cond), idx)
        step = re.fullmatch(rf"{re.escape(idx)}\s*\+=\s*(.+)", _flat(_t(upd)))
        if bound is None or step is None:
            return None
        st = step.group(1)
        if not (re.search(r"\bgridDim\.x\b", st) or _strip(st) in dropped):
            return None
        return idx, ity or "int", bound, _statements(loop.child_by_field_name("body"))


def _statements(node) -> list:
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


class _Body:
    """Reads BODY: its elements, outputs, gathers and atomic, and writes it over the template's names."""

    def __init__(self, stmts, index, pointers, params, dropped, helpers):
        self.stmts, self.index, self.pointers, self.params = stmts, index, pointers, params
        self.dropped, self.helpers = dropped, helpers

    def _refuse_cooperation(self, text: str):
        m = _COOPERATE.search(text)
        if m:
            raise _Refuse(f"not templated: the per-element code uses {m.group(0)} (threads that cooperate)")
        for h in self.helpers:
            if re.search(rf"\b{re.escape(h)}\s*\(", text):
                raise _Refuse(f"not templated: the per-element code calls {h}, whose threads cooperate")
        for d in sorted(self.dropped):
            if re.search(rf"\b{re.escape(d)}\b", text):
                raise _Refuse(f"not templated: the per-element code uses {d}, the kernel's own indexing")

    def read(self) -> dict:
        if not self.stmts:
            raise _Refuse("not templated: the per-element code is empty")
        whole = self.stmts[0].parent
        start, end = self.stmts[0].start_byte, self.stmts[-1].end_byte
        body_text = whole.text[start - whole.start_byte:end - whole.start_byte].decode("utf-8")
        self._refuse_cooperation(body_text)
        nodes = [n for s in self.stmts for n in _walk(s)]
        for n in nodes:
            if n.type in ("return_statement", "goto_statement") or \
                    (n.type in ("break_statement", "continue_statement") and not self._in_inner(n)):
                raise _Refuse(f"not templated: the per-element code leaves early: {_short(_t(n))}")
            if n.type == "declaration" and any(c.type in ("pointer_declarator", "reference_declarator") for c in _walk(n)):
                raise _Refuse(f"not templated: a pointer inside the per-element code: {_short(_t(n))}")
        # the atomic (a full reduction): its calls become updates of the template's accumulator
        atomics, atomic, target = [], "", ""
        for n in nodes:
            if n.type != "call_expression" or not _t(n.child_by_field_name("function")).startswith("atomic"):
                continue
            f = _t(n.child_by_field_name("function"))
            if f not in _ATOMICS:
                raise _Refuse(f"not templated: {f} (a full reduction takes atomicAdd, atomicMax or atomicMin)")
            if n.parent is None or n.parent.type != "expression_statement":
                raise _Refuse(f"not templated: the result of {f} is used")
            args = [c for c in n.child_by_field_name("arguments").named_children if c.type != "comment"]
            tgt = self._target(args[0]) if len(args) == 2 else None
            if tgt is None:
                raise _Refuse(f"not templated: {f} on {_short(_t(args[0]) if args else '')} (a reduction adds to one "
                              "value: out or &out[0])")
            if atomic and (tgt != target or f != atomic):
                raise _Refuse("not templated: more than one atomic target or operation")
            atomic, target = f, tgt
            atomics.append((n, args[0], args[1]))
        # every use of a pointer argument: an element, an output, a gather, or the atomic's target
        at_index, gathers, outs, loaded = {}, set(), set(), set()
        for n in nodes:
            if n.type != "identifier" or _t(n) not in self.pointers:
                continue
            name, p = _t(n), n.parent
            if any(t.start_byte <= n.start_byte and n.end_byte <= t.end_byte for _, t, _ in atomics):
                continue
            if p is None or p.type != "subscript_expression" or p.child_by_field_name("argument") != n:
                raise _Refuse(f"not templated: {name} is used as a pointer in the per-element code")
            if name == target:
                raise _Refuse(f"not templated: {name}, the atomic's target, is also read or written")
            write = self._written(p)
            if not self._at_index(p):
                if write:
                    raise _Refuse(f"not templated: a write of {name} at another index than the element's: {_short(_t(p))}")
                gathers.add(name)
                continue
            at_index.setdefault(name, []).append(p)
            if write:
                outs.add(name)
            if write == "compound":
                loaded.add(name)
        if gathers & outs:
            name = sorted(gathers & outs)[0]
            raise _Refuse(f"not templated: {name} is written at the element and read at another index")
        if atomic and outs:
            raise _Refuse("not templated: the kernel both writes elements and adds them up atomically")
        top_stores = set()
        for s in self.stmts:
            e = s.named_children[0] if s.type == "expression_statement" and s.named_children else None
            if e is not None and e.type == "assignment_expression" and _t(e.child_by_field_name("operator")) == "=":
                left = e.child_by_field_name("left")
                if left.type == "subscript_expression" and self._at_index(left) and \
                        not any(r.start_byte < left.start_byte for r in at_index.get(_t(left.child_by_field_name("argument")), [])):
                    top_stores.add(_t(left.child_by_field_name("argument")))
        edits = []
        for name, subs in at_index.items():
            for p in subs:
                if name in outs and not self._written(p):
                    loaded.add(name)
                edits.append((p.start_byte, p.end_byte, f"optiml_{'o' if name in outs else 'e'}_{name}"))
        loaded |= outs - top_stores
        spliced = []
        for call, _, value in atomics:
            inside = [(a - value.start_byte, b - value.start_byte, r) for a, b, r in edits
                      if value.start_byte <= a and b <= value.end_byte]
            v = _splice(_t(value), inside)
            spliced.append((call.start_byte, call.end_byte, f"optiml_acc = optiml_acc + (OPTIML_ACC)({v})" if atomic == "atomicAdd"
                            else f"optiml_acc = {_ATOMICS[atomic]}(optiml_acc, (OPTIML_ACC)({v}))"))
        spliced += [e for e in edits if not any(c.start_byte <= e[0] and e[1] <= c.end_byte for c, _, _ in atomics)]
        body = _splice(body_text, [(a - start, b - start, r) for a, b, r in spliced])
        col = self.stmts[0].start_point[1]             # the body's lines without the kernel's indentation
        body = "\n".join([ln[min(col, len(ln) - len(ln.lstrip(" "))):] for ln in body.split("\n")])
        elems = {name for name in at_index if name not in outs}
        return dict(body=body, elems=elems, outs=outs, loaded=loaded, atomic=atomic, target=target)

    def _in_inner(self, n) -> bool:
        p = n.parent
        while p is not None and p is not self.stmts[0].parent:
            if p.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
                return True
            p = p.parent
        return False

    def _at_index(self, sub) -> bool:
        idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
        if idx is None:
            return False
        return _strip(_t(idx).strip()[1:-1] if _t(idx).strip().startswith("[") else _t(idx)) in self.index.forms

    def _written(self, sub) -> str:
        p = sub.parent
        while p is not None and p.type == "parenthesized_expression":
            sub, p = p, p.parent
        if p is None:
            return ""
        if p.type == "assignment_expression" and p.child_by_field_name("left") == sub:
            return "plain" if _t(p.child_by_field_name("operator")) == "=" else "compound"
        if p.type == "update_expression":
            return "compound"
        if p.type == "pointer_expression" or (p.type == "unary_expression" and _t(p).startswith("&")):
            raise _Refuse(f"not templated: the address of {_short(_t(sub))} is taken")
        return ""

    def _target(self, node) -> str | None:
        t = _strip(_t(node))
        m = re.fullmatch(r"(\w+)|&(\w+)\[0\]|&\((\w+)\[0\]\)|(\w+)\+0", t)
        if not m:
            return None
        name = next(g for g in m.groups() if g)
        return name if name in self.pointers else None


def instantiate_flat(source: str, op: FlatOp, values: dict | None = None, template: str | None = None) -> str:
    """``source`` with its entry replaced by the flat template (``template``, else the one for the op's
    kind) behind the same signature, its constants ``values`` (else the start) and its launch line."""
    import jinja2
    t = next(x for x in FLAT_TEMPLATES if (x.name == template if template else x.kind == op.kind))
    root = _tree(source)
    fn, fdecl = _entry_def(root, op.entry)
    vals = dict(t.start_for(op), **(values or {}))
    env = jinja2.Environment(loader=jinja2.FunctionLoader(lambda name: resources.files(__package__).joinpath(name).read_text()),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True)
    types = {ty for _, ty in op.elems + op.outs} | ({op.acc_type} if op.acc_type else set())
    text = env.get_template(f"{t.name}.cu.j2").render(
        op=op, values=vals, signature=f"{op.entry}{_t(fdecl.child_by_field_name('parameters'))}",
        half=bool(types & {"__half", "half", "__half2", "half2"}),
        bf16=bool(types & {"__nv_bfloat16", "nv_bfloat16", "__nv_bfloat162"}),
        identity={"+": "(OPTIML_ACC)0", "max": "::cuda::std::numeric_limits<OPTIML_ACC>::lowest()",
                  "min": "::cuda::std::numeric_limits<OPTIML_ACC>::max()"}.get(op.op, ""),
        combine={"+": "optiml_a + optiml_b", "max": "max(optiml_a, optiml_b)", "min": "min(optiml_a, optiml_b)"}.get(op.op, ""))
    launch = (f'// optiml:launch {{grid = ["{t.grid.format(n=op.n_size)}"], block = ["{t.threads}"], shared_mem = "0"}}')
    head = f"// the entry {op.entry} as optiml's {t.name} template: {op.describe()}\n{launch}\n"
    includes = "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("#include") and ln not in source)
    text = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#include")) + "\n"
    cut = text.index("__global__ void")
    return place(source, fn, includes + head + text[:cut], text[cut:])
