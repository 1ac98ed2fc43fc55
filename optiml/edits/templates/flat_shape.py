"""Reading a kernel that handles one element at a time (:mod:`.flat`): its form (the index, the
count, the statements kept before the element's code) and the names the element's code may use."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...source import _walk, function_declarator
from ..cutree import _flat, _short, _t

_SIZE = {"float": 4, "__half": 2, "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "double": 8, "int": 4,
         "unsigned": 4, "unsigned int": 4, "char": 1, "signed char": 1, "unsigned char": 1, "short": 2,
         "long long": 8, "unsigned long long": 8, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "int32_t": 4,
         "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "bool": 1, "float2": 8, "float4": 16, "double2": 16}
_COOPERATE = re.compile(r"\b(threadIdx|blockIdx|blockDim|gridDim|warpSize|__syncthreads\w*|__syncwarp|__shfl\w*|"
                        r"__threadfence\w*|__reduce_\w+_sync|__ballot\w*|__any_sync|__all_sync|__activemask|"
                        r"cooperative_groups|__shared__|__nanosleep)\b|\bcg::|\bclock\w*\s*\(")
_ATOMICS = {"atomicAdd": "+", "atomicMax": "max", "atomicMin": "min"}
_WIDE = {"int", "unsigned", "unsigned int", "long", "long long", "unsigned long", "unsigned long long", "size_t",
         "int64_t", "uint64_t", "int32_t", "uint32_t", "ptrdiff_t", "auto"}
_ASM = re.compile(r"\b(asm|__asm__|__asm)\b")
_CAST = r"(?:\(\s*(?:size_t|int|long long|long|int64_t|unsigned(?: int)?|uint32_t|uint64_t)\s*\)\s*)?"


def _same(a, b) -> bool:
    return a is not None and b is not None and a.start_byte == b.start_byte and a.end_byte == b.end_byte and a.type == b.type


def _no_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


class _Refuse(Exception):
    pass


def _strip(text: str) -> str:
    """``text`` without spaces, integer casts (C-style or ``static_cast``), parentheses around one
    name, or outer parentheses."""
    t = re.sub(r"\s+", "", text)
    ints = r"(?:size_t|int|longlong|long|int64_t|unsigned|unsignedint|uint32_t|uint64_t|longint|unsignedlong|unsignedlonglong)"
    t = re.sub(rf"\({ints}\)", "", t)
    t = re.sub(rf"static_cast<{ints}>(?=\()", "", t)
    before = None
    while before != t:
        before = t
        t = re.sub(r"\((\w+|\w+\.\w+)\)", r"\1", t)
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
    aliases: tuple = ()           # names BODY's top level declares for the element (idx = r * cols + c)
    setup: str = ""               # once a vector (from its first element optiml_i0), before decl

    @staticmethod
    def one(name: str, ty: str) -> "_Index":
        return _Index((name,), f"const {ty} {name} = ({ty})optiml_i; (void){name};", frozenset({name}))

    @staticmethod
    def two(r: str, rty: str, c: str, cty: str, cols: str) -> "_Index":
        """Row ``r`` and column ``c`` of a row-major matrix of ``cols`` columns: the element is
        ``r * cols + c``."""
        w = _strip(cols)
        w = w if re.fullmatch(r"\w+", w) else f"({w})"            # r * (cols + 1) + c, never r * cols + 1 + c
        forms = {f"{r}*{w}+{c}", f"{w}*{r}+{c}", f"{c}+{r}*{w}", f"{c}+{w}*{r}"}
        # one 64-bit division a vector; its elements step the column, wrapping to the next rows
        setup = (f"const long long optiml_w = (long long)({cols}); const long long optiml_r0 = optiml_i0 / optiml_w, "
                 f"optiml_c0 = optiml_i0 - optiml_r0 * optiml_w;")
        decl = (f"long long optiml_cc = optiml_c0 + optiml_q, optiml_rr = optiml_r0; while (optiml_cc >= optiml_w) "
                f"{{ optiml_cc -= optiml_w; optiml_rr++; }} const {rty} {r} = ({rty})optiml_rr; "
                f"const {cty} {c} = ({cty})optiml_cc; (void){r}; (void){c};")
        return _Index((r, c), decl, frozenset(forms), setup=setup)

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


def _cooperating_helpers(root, fn) -> set[str]:
    """Device functions whose code has threads cooperate or read their own coordinates, directly,
    through a macro or through another such function (or asm, which may read any register); their
    whole definitions, as a default argument or a constructor's initializer runs with the call."""
    bodies = {name: _no_comments(_t(d)) for name, d, _ in _functions(root)
              if not _same(d, fn)}
    macros = {name: body for name, (_, body) in _macros(root).items()}
    bad = {m for m, v in macros.items() if _COOPERATE.search(v) or _ASM.search(v)}
    out = {name for name, body in bodies.items() if _COOPERATE.search(body) or _ASM.search(body)}
    while True:
        calls = out | bad
        more = {name for name, body in bodies.items() if name not in out and
                any(re.search(rf"\b{re.escape(c)}\b", body) for c in calls)}
        more |= {m for m, v in macros.items() if m not in bad and any(re.search(rf"\b{re.escape(c)}\b", v) for c in calls)}
        if not more:
            return out | bad
        out |= {m for m in more if m in bodies}
        bad |= {m for m in more if m in macros}


def _defined(root) -> set[str]:
    """The names of the functions the source defines."""
    return {name for name, _, _ in _functions(root)}


def _functions(root):
    """(short name, definition, function declarator) of each function the source defines."""
    for d in _walk(root):
        decl = function_declarator(d) if d.type == "function_definition" else None
        if decl is not None:
            yield _short_name(_t(decl.child_by_field_name("declarator"))), d, decl


def _short_name(name: str) -> str:
    """``ops::relu_ip`` and ``clampi<float>`` as ``relu_ip`` and ``clampi``."""
    return re.sub(r"<.*$", "", name.split("::")[-1]).strip()


def _macros(root) -> dict[str, tuple[tuple, str]]:
    """name -> (parameters, replacement text) of every ``#define`` in the source."""
    out = {}
    for n in _walk(root):
        if n.type in ("preproc_def", "preproc_function_def"):
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            ps = n.child_by_field_name("parameters")
            params = tuple(_t(c) for c in ps.named_children if c.type == "identifier") if ps is not None else ()
            if name is not None:
                out[_t(name)] = (params, _t(value) if value is not None else "")
    return out


def _by_reference(root, fn) -> set[str]:
    """The source's functions with a parameter taken by reference (an element passed to one may be written)."""
    return {name for name, d, decl in _functions(root)
            if not _same(d, fn) and "&" in _t(decl.child_by_field_name("parameters") or decl)}


def _aliases(index: _Index, stmts) -> _Index:
    """``index`` with the names BODY's top level declares for the element (``int idx = r * cols +
    c;``) among the subscripts that name it."""
    forms = set(index.forms)
    for s in stmts:
        if s.type != "declaration":
            continue
        for d in (c for c in s.named_children if c.type == "init_declarator"):
            name, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            ty = re.sub(r"\bconst\b\s*", "", _t(s.child_by_field_name("type") or s)).strip()
            if ty not in _WIDE:
                continue                                  # unsigned short j = i: not the element past 65535
            if name is not None and name.type == "identifier" and value is not None and _strip(_t(value)) in forms:
                forms.add(_t(name))
    return _Index(index.names, index.decl, frozenset(forms), tuple(sorted(forms - set(index.forms))), index.setup)


class _Shape:
    """Reads the kernel's form (see the module): its index, bound, kept prelude and BODY."""

    def __init__(self, fn, block, pointers, block_y=None):
        self.fn, self.block, self.pointers, self.block_y = fn, block, pointers, block_y
        self.values: dict[str, str] = {}          # the kernel's indexing names dropped -> their values

    def read(self):
        body = self.fn.child_by_field_name("body")
        stmts = [c for c in body.named_children if c.type != "comment"]
        index = index_type = row = None
        prelude, dropped, names = [], set(), set()

        def result(idx, bound, inner):
            if row is not None and row[0] not in idx.names:
                dropped.add(row[0])
            return idx, bound, prelude, inner, dropped, names
        for k, s in enumerate(stmts):
            t = _t(s)
            if s.type.startswith("preproc"):
                if t.lstrip().startswith("#pragma"):
                    continue
                raise _Refuse(f"not templated: a preprocessor line inside the kernel: {_short(t)}")
            decls = _declarators(s)
            if decls and any(_COOPERATE.search(_no_comments(v)) for _, _, v in decls):
                for name, ty, value in decls:               # the kernel's own indexing: gone in the template
                    if index is None and _one_item(value, self.block):
                        index, index_type = name, _index_type(ty, value)
                    elif row is None and _one_item(value, self.block_y, "y"):
                        row = (name, _index_type(ty, value))
                    else:
                        dropped.add(name)
                        self.values[name] = value
                continue
            if s.type == "for_statement":
                got = self._grid_stride(s, index, index_type, dropped)
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
                        bound = f"(long long)({sizes[0]}) * ({sizes[1]})"
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
            if _COOPERATE.search(_no_comments(t)):
                raise _Refuse(f"not templated: threads cooperate outside the per-element code: {_short(t)}")
            if s.type == "declaration" and not any(n.type in ("pointer_declarator", "array_declarator", "reference_declarator")
                                                   for n in _walk(s)) and not self._touches_memory(s):
                if any(v is not None and re.search(rf"\b{re.escape(v)}\b", t) for v in (index, row and row[0])):
                    return None
                declared = {name for name, _, _ in decls} or {_t(c) for c in s.named_children if c.type == "identifier"}
                if any(re.search(rf"\b{re.escape(d)}\b", _no_comments(t)) for d in dropped):
                    dropped.update(declared)                 # computed from the kernel's indexing
                    continue
                prelude.append(t.strip())
                names.update(declared)
                continue
            return None
        return None

    def _touches_memory(self, s) -> bool:
        return any(n.type == "call_expression" and re.match(r"atomic", _t(n)) for n in _walk(s)) or \
            any(n.type == "assignment_expression" and n.child_by_field_name("left").type != "identifier" for n in _walk(s))

    def _plain(self, text: str) -> str:
        """``text`` with the names the kernel gave its thread index (``int tid = threadIdx.x;``) and
        object-like macros of a number (``#define BLOCK 256``) written as what they stand for."""
        root = self.fn
        while root.parent is not None:
            root = root.parent
        simple = {k: v.strip() for k, v in self.values.items() if re.fullmatch(r"\s*(?:threadIdx|blockIdx|blockDim|gridDim)\.[xyz]\s*", v)}
        simple.update({k: v.strip() for k, (ps, v) in _macros(root).items() if not ps and re.fullmatch(r"\s*\d+[uU]?\s*", v)})
        if not simple:
            return text
        return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: simple.get(m.group(0), m.group(0)), text)

    def _grid_stride(self, loop, index, index_type, dropped):
        init = loop.child_by_field_name("initializer")
        cond = loop.child_by_field_name("condition")
        upd = loop.child_by_field_name("update")
        if cond is None or upd is None:
            return None
        d = _declaration(init) if init is not None and init.type == "declaration" else None
        block = self._plain(str(self.block)) if self.block is not None else None
        if d is not None:                       # tid for threadIdx.x, BLOCK for the launch's block: their values
            d = (d[0], d[1], self._plain(d[2]))
        if d is not None and (_one_item(d[2], self.block) or _one_item(d[2], block)):
            idx, ity = d[0], _index_type(d[1], d[2])
        elif d is not None and index is not None and _strip(d[2]) == index:      # for (int j = i; ...)
            idx, ity = d[0], _index_type(d[1], index)
            dropped.add(index)
        elif index is not None and (init is None or re.fullmatch(rf"{re.escape(index)}\s*=\s*{re.escape(index)}\s*;?|;?",
                                                                 _flat(_t(init)))):
            idx, ity = index, index_type                                      # for (; i < n; ...)
        else:
            return None
        bound = _bound(_t(cond), idx)
        step = re.fullmatch(rf"{re.escape(idx)}\s*\+=\s*(.+)", _flat(_t(upd)))
        if bound is None or step is None:
            return None
        st = _strip(self._plain(step.group(1)))
        st = _strip(self.values.get(st, st))
        dims = {"blockDim.x"} | ({str(self.block), block} if self.block is not None else set())
        if st not in {f"{d}*gridDim.x" for d in dims} | {f"gridDim.x*{d}" for d in dims}:
            raise _Refuse(f"not templated: the loop steps by {step.group(1)}, not by the grid's threads "
                          "(blockDim.x * gridDim.x)")
        return idx, ity or "int", bound, _statements(loop.child_by_field_name("body"))


def _declarators(s) -> list[tuple[str, str, str]]:
    """(name, type, value) of each initialised scalar a declaration declares."""
    if s.type != "declaration":
        return []
    ty = s.child_by_field_name("type")
    out = []
    for c in s.named_children:
        if c.type == "init_declarator":
            d, v = c.child_by_field_name("declarator"), c.child_by_field_name("value")
            if d is not None and d.type == "identifier" and v is not None:
                out.append((_t(d), _t(ty) if ty is not None else "int", _t(v)))
    return out


def _index_type(ty: str, value: str) -> str:
    """The type the template declares the kernel's index with: the kernel's own, ``auto`` resolved."""
    ty = re.sub(r"\bconst\b\s*", "", ty).strip() or "int"
    if ty != "auto":
        return ty
    m = re.search(r"\(\s*(size_t|long long|unsigned long long|int64_t|uint64_t|long)\s*\)", value)
    return m.group(1) if m else "unsigned int"        # blockIdx.x * blockDim.x + threadIdx.x is unsigned


def _statements(node) -> list:
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]
