"""Reading CUDA sources: ``__global__`` kernels and their parameters, integer constants, and the
launch geometry a source may carry in a structured comment.

Parsing uses tree-sitter-cuda (a real CUDA grammar: templates, ``__launch_bounds__``,
``extern "C"`` and qualifiers like ``__restrict__`` are handled without hand-written regexes).
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache

from . import expr as _expr
from .errors import ExprError, SpecError

LAUNCH_TAG = "optiml:launch"


@dataclass(frozen=True)
class Param:
    name: str
    type_text: str          # the declaration without the name, e.g. "const float* __restrict__"
    base_type: str          # e.g. "float", "half", "__nv_bfloat16", "int", "unsigned char"
    is_pointer: bool
    is_const: bool          # the pointee (for pointers) or the value is const


@dataclass(frozen=True)
class Kernel:
    name: str
    params: tuple[Param, ...]
    extern_c: bool
    templated: bool
    line: int


@dataclass(frozen=True)
class LaunchOverride:
    grid: tuple | None = None
    block: tuple | None = None
    shared_mem: object = None
    line: int = 0

    def over(self, grid, block, shared_mem) -> tuple:
        """(grid, block, shared_mem): the fields this comment gives, the others from what it overrides."""
        return (grid if self.grid is None else self.grid, block if self.block is None else self.block,
                shared_mem if self.shared_mem is None else self.shared_mem)


@dataclass
class SourceInfo:
    kernels: list[Kernel] = field(default_factory=list)
    constants: dict[str, int | float] = field(default_factory=dict)
    launch: LaunchOverride | None = None

    def kernel(self, name: str) -> Kernel | None:
        return next((k for k in self.kernels if k.name == name), None)


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter as ts
    import tree_sitter_cuda as tsc

    return ts.Parser(ts.Language(tsc.language()))


# kernel attributes tree-sitter-cuda does not know (a thread-block cluster's shape, a register cap):
# parsed as a declaration that swallows the __global__ function after them
_UNKNOWN_ATTRIBUTES = re.compile(r"\b(?:__cluster_dims__|__maxnreg__)\s*\([^()]*\)")


def parse_tree(text: str):
    """The tree-sitter tree of a CUDA source. Attributes the grammar does not know are read as
    blanks of the same length, so that every byte offset is the source's own (a splice keeps them);
    a node's text shows them blank."""
    masked = _UNKNOWN_ATTRIBUTES.sub(lambda m: " " * len(m.group(0).encode("utf-8")), text)
    return _parser().parse(masked.encode("utf-8"))


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def function_declarator(node):
    """The ``function_declarator`` under a function definition or declaration (through pointer,
    reference and attributed declarators), or None."""
    d = node.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    return d


def _param(node) -> Param | None:
    if node.type == "variadic_parameter":
        return None
    decl = node.child_by_field_name("declarator")
    pointer = False
    name = ""
    d = decl
    while d is not None:
        if d.type in ("pointer_declarator", "reference_declarator", "abstract_pointer_declarator",
                      "abstract_reference_declarator"):
            pointer = pointer or d.type in ("pointer_declarator", "abstract_pointer_declarator")
            d = d.child_by_field_name("declarator") or next(
                (c for c in d.children if c.type in ("identifier", "pointer_declarator", "abstract_pointer_declarator")), None)
        elif d.type == "identifier":
            name = _text(d)
            break
        elif d.type in ("array_declarator", "abstract_array_declarator"):
            pointer = True
            d = d.child_by_field_name("declarator")
        else:
            break
    type_node = node.child_by_field_name("type")
    base = _text(type_node) if type_node is not None else ""
    quals_before = [_text(c) for c in node.children if c.type == "type_qualifier"]
    is_const = "const" in quals_before
    full = _text(node)
    type_text = full[: full.rfind(name)].strip() if name else full
    return Param(name=name, type_text=" ".join(type_text.split()), base_type=" ".join(base.split()),
                 is_pointer=pointer, is_const=is_const)


def _kernels(root) -> list[Kernel]:
    out = []
    for n in _walk(root):
        if n.type != "function_definition":
            continue
        if not any(c.type == "__global__" for c in n.children):
            continue
        fdecl = function_declarator(n)
        if fdecl is None:
            continue
        name_node = fdecl.child_by_field_name("declarator")
        plist = fdecl.child_by_field_name("parameters")
        params = []
        for c in plist.children if plist is not None else []:
            if c.type in ("parameter_declaration", "optional_parameter_declaration"):
                p = _param(c)
                if p is not None:
                    # an unnamed parameter (`float*`) is called by its position, as a spec may name it
                    params.append(p if p.name else replace(p, name=f"arg{len(params)}"))
        parent = n.parent
        extern_c = False
        templated = False
        while parent is not None:
            if parent.type == "linkage_specification":
                extern_c = True
            if parent.type == "template_declaration":
                templated = True
            parent = parent.parent
        out.append(Kernel(name=_text(name_node), params=tuple(params), extern_c=extern_c,
                          templated=templated, line=n.start_point[0] + 1))
    return out


_INT_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)([uUlL]{1,3})\b")
_FLOAT_SUFFIX = re.compile(r"\b(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)[fF]\b")
_CAST = re.compile(r"\(\s*(?:unsigned\s+)?(?:int|long|size_t|short|unsigned|int32_t|int64_t|uint32_t)\s*\)")


def c_to_expr(text: str) -> str:
    """Turn a C constant expression (macro body, constexpr initialiser) into our expression syntax."""
    s = text.strip()
    s = _CAST.sub("", s)
    s = _INT_SUFFIX.sub(r"\1", s)
    s = _FLOAT_SUFFIX.sub(r"\1", s)
    return s


def _constants(root) -> dict[str, int | float]:
    raw: dict[str, str] = {}
    for n in _walk(root):
        if n.type == "preproc_def":
            name = n.child_by_field_name("name")
            value = n.child_by_field_name("value")
            if name is not None and value is not None:
                raw[_text(name)] = c_to_expr(_text(value).split("//")[0])
        elif n.type == "declaration":
            # file or namespace scope only: constexpr/const integers used as tunables
            p = n.parent
            if p is None or p.type not in ("translation_unit", "declaration_list"):
                continue
            quals = {_text(c) for c in n.children if c.type == "type_qualifier"}
            if not quals & {"constexpr", "const"}:
                continue
            for c in n.children:
                if c.type == "init_declarator":
                    d = c.child_by_field_name("declarator")
                    v = c.child_by_field_name("value")
                    if d is not None and d.type == "identifier" and v is not None:
                        raw[_text(d)] = c_to_expr(_text(v))
    values: dict[str, int | float] = {}
    pending = dict(raw)
    for _ in range(len(pending) + 1):  # resolve constants that refer to others
        progressed = False
        for name, body in list(pending.items()):
            try:
                values[name] = _expr.evaluate(body, values)
            except ExprError:
                continue
            del pending[name]
            progressed = True
        if not progressed:
            break
    # the integer template arguments the kernels give (`f<16, size_t>(...)` in a __global__ body, or
    # `template __global__ void k<16>(...);`), named as the template names them: a launch expression
    # may use them (cuda-samples' `block_size`), and a tuned one moves the launch with it; a name
    # given two values in the file is left out
    params = _template_params(root)
    given: dict[str, set] = {}
    for k in _kernels(root) if params else ():       # a file without templates: nothing to walk for
        for name, sites in template_sites(root, k.name, params).items():
            given.setdefault(name, set()).update(st.value for st in sites)
    for name, vals in given.items():
        if len(vals) == 1 and name not in values:
            values[name] = next(iter(vals))
    return values


@dataclass(frozen=True)
class Site:
    """Where a tunable's value is written: the bytes of one integer literal."""
    start: int
    end: int
    value: int
    kind: str                 # "define", "constexpr" or "template"


def _template_params(root) -> dict[str, list[tuple[str, int]]]:
    """Function name -> [(template parameter name, index)] for the integer (non-type) ones."""
    out: dict[str, list[tuple[str, int]]] = {}
    for n in _walk(root):
        if n.type != "template_declaration":
            continue
        plist = next((c for c in n.children if c.type == "template_parameter_list"), None)
        fn = next((c for c in n.children if c.type in ("function_definition", "declaration")), None)
        if plist is None or fn is None:
            continue
        d = function_declarator(fn)
        if d is None or d.child_by_field_name("declarator") is None:
            continue
        fname = _text(d.child_by_field_name("declarator"))
        params = [c for c in plist.named_children]
        for i, p in enumerate(params):
            if p.type in ("parameter_declaration", "optional_parameter_declaration"):
                ident = p.child_by_field_name("declarator")
                if ident is not None and ident.type == "identifier":
                    out.setdefault(fname, []).append((_text(ident), i))
    return out


def _int_literal(node) -> int | None:
    if node is not None and node.type == "number_literal" and re.fullmatch(r"\d+[uUlL]*", _text(node)):
        return int(_text(node).rstrip("uUlL"))
    return None


def _template_args(node) -> list:
    args = next((c for c in node.children if c.type == "template_argument_list"), None)
    return [] if args is None else [c for c in args.named_children]


def _entry(root, entry: str):
    for n in _walk(root):
        if n.type == "function_definition" and any(c.type == "__global__" for c in n.children):
            d = function_declarator(n)
            if d is not None and _text(d.child_by_field_name("declarator")) == entry:
                return n
    return None


def template_sites(root, entry: str, params: dict | None = None) -> dict[str, list[Site]]:
    """Integer template arguments the entry gives: in calls ``f<16, ...>(...)`` in its body, and in
    an explicit instantiation ``template __global__ void entry<16>(...)``; named by the template's
    parameter names (``params``: :func:`_template_params` of ``root``, where the caller has it)."""
    params = _template_params(root) if params is None else params
    out: dict[str, list[Site]] = {}

    def take(fname: str, holder) -> None:
        for pname, i in params.get(fname, []):
            args = _template_args(holder)
            if i < len(args) and (v := _int_literal(args[i])) is not None:
                lit = args[i]
                out.setdefault(pname, []).append(Site(lit.start_byte, lit.start_byte + len(_text(lit).rstrip("uUlL")), v, "template"))

    fn = _entry(root, entry)
    if fn is not None:
        for n in _walk(fn.child_by_field_name("body")):
            if n.type == "template_function" and n.child_by_field_name("name") is not None:
                take(_text(n.child_by_field_name("name")), n)
    for n in _walk(root):                 # template __global__ void entry<16>(...);
        if n.type == "template_instantiation" or (n.type == "declaration" and n.parent is not None
                                                   and n.parent.type == "template_instantiation"):
            for t in _walk(n):
                if t.type == "template_function" and t.child_by_field_name("name") is not None \
                        and _text(t.child_by_field_name("name")) == entry:
                    take(entry, t)
    return out


def _launch_comment(text: str) -> LaunchOverride | None:
    found = None
    for i, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped.startswith("//"):
            continue
        body = stripped[2:].strip()
        if not body.startswith(LAUNCH_TAG):
            continue
        if found is not None:
            raise SpecError(f"line {i}: a source may carry only one '// {LAUNCH_TAG}' comment (another is on line {found.line}).")
        table = body[len(LAUNCH_TAG):].strip()
        try:
            data = tomllib.loads("launch = " + table)["launch"]
        except (tomllib.TOMLDecodeError, RecursionError, ValueError) as e:
            why = e if isinstance(e, tomllib.TOMLDecodeError) else "nested too deeply or a number too long"
            raise SpecError(
                f"line {i}: cannot read the '// {LAUNCH_TAG}' comment ({why}); write it as "
                f"// {LAUNCH_TAG} {{grid = [\"cdiv(N, 16)\", \"cdiv(M, 16)\"], block = [16, 16], shared_mem = 0}}"
            ) from None
        if not isinstance(data, dict):
            raise SpecError(f"line {i}: the '// {LAUNCH_TAG}' comment must hold an inline table {{grid = [...], block = [...]}}.")
        unknown = set(data) - {"grid", "block", "shared_mem"}
        if unknown:
            raise SpecError(f"line {i}: unknown key(s) {', '.join(sorted(unknown))} in the '// {LAUNCH_TAG}' comment (allowed: grid, block, shared_mem).")

        def dims(v):
            if v is None:
                return None
            return tuple(v) if isinstance(v, list) else (v,)

        found = LaunchOverride(grid=dims(data.get("grid")), block=dims(data.get("block")),
                               shared_mem=data.get("shared_mem"), line=i)
    return found


def parse_source(text: str, entry: str = "") -> SourceInfo:
    """Kernels, integer constants and the launch comment of a CUDA source. With ``entry``, the
    integer template arguments that kernel gives are constants too where the file gives the name
    several values (cuda-samples' matrixMul: ``matrixMul<8, ...>``, ``<16, ...>`` and ``<32, ...>``
    in three entries, the launch's ``block_size`` that of the one launched)."""
    tree = parse_tree(text)
    constants = _constants(tree.root_node)
    if entry and "template" in text:
        for name, sites in template_sites(tree.root_node, entry).items():
            if name not in constants and len({st.value for st in sites}) == 1:
                constants[name] = sites[0].value
    return SourceInfo(kernels=_kernels(tree.root_node), constants=constants, launch=_launch_comment(text))


# C types of kernel parameters -> our dtypes
C_TYPES = {
    "float": "float32", "double": "float64", "half": "float16", "__half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16",
    "int": "int32", "int32_t": "int32", "signed int": "int32",
    "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32",
    "long long": "int64", "long long int": "int64", "int64_t": "int64", "long": "int64",
    "unsigned long long": "uint64", "uint64_t": "uint64", "size_t": "uint64",
    "unsigned char": "uint8", "uint8_t": "uint8", "char": "int8", "int8_t": "int8", "signed char": "int8",
    "short": "int16", "int16_t": "int16", "unsigned short": "uint16", "uint16_t": "uint16",
    "bool": "bool",
}


def dtype_of_c_type(base_type: str) -> str | None:
    return C_TYPES.get(" ".join(base_type.replace("const", " ").split()))


# ------------------------------------------------------------------ what a kernel reads and writes
# `optiml init` decides each pointer's role from its uses in the entry and in the functions of the
# same file that it calls (templates included), following each argument to its parameter.

@dataclass(frozen=True)
class Access:
    read: bool = False
    write: bool = False
    unsure: bool = False    # passed to a function outside the file, or used in a way not followed

    def __or__(self, other: "Access") -> "Access":
        return Access(self.read or other.read, self.write or other.write, self.unsure or other.unsure)


@dataclass(frozen=True)
class _Fn:
    name: str
    params: tuple[str, ...]
    pointers: frozenset
    body: object


_READ_ONLY_CALLS = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv", "sizeof"}
_CASTS = {"reinterpret_cast", "static_cast", "const_cast", "__builtin_assume_aligned"}


def _functions(root) -> dict[str, _Fn]:
    out: dict[str, _Fn] = {}
    for n in _walk(root):
        if n.type != "function_definition" or n.child_by_field_name("body") is None:
            continue
        fdecl = function_declarator(n)
        if fdecl is None or fdecl.child_by_field_name("declarator") is None:
            continue
        plist = fdecl.child_by_field_name("parameters")
        params = [_param(c) for c in (plist.children if plist is not None else [])
                  if c.type in ("parameter_declaration", "optional_parameter_declaration")]
        params = [p for p in params if p is not None]
        name = _text(fdecl.child_by_field_name("declarator")).split("::")[-1]
        out.setdefault(name, _Fn(name, tuple(p.name for p in params),
                                 frozenset(p.name for p in params if p.is_pointer), n.child_by_field_name("body")))
    return out


def _callee(call) -> str:
    f = call.child_by_field_name("function")
    if f is not None and f.type == "template_function":
        f = f.child_by_field_name("name")
    return _text(f).split("::")[-1] if f is not None else ""


def _arg_index(call, node) -> int:
    args = [c for c in call.child_by_field_name("arguments").children if c.is_named and c.type != "comment"]
    return next((i for i, a in enumerate(args) if a.id == node.id), -1)


def _use(ident, fns, seen) -> tuple[Access, str | None]:
    """How one occurrence of a pointer is used; the second value names a local alias to follow."""
    node, deref = ident, False
    while True:
        up = node.parent
        if up is None:
            break
        t = up.type
        if t in ("parenthesized_expression", "cast_expression"):
            node = up
        elif t == "binary_expression" and not deref and _text(up.child_by_field_name("operator")) in "+-":
            node = up
        elif t == "update_expression" and not deref:        # p++ is p: *p++ = v writes through it
            node = up
        elif t == "subscript_expression" and up.child_by_field_name("argument") == node and not deref:
            node, deref = up, True
        elif t == "pointer_expression" and _text(up.child_by_field_name("operator")) == "*" and not deref:
            node, deref = up, True
        elif t == "pointer_expression" and _text(up.child_by_field_name("operator")) == "&" and deref:
            node, deref = up, False
        elif t == "field_expression" and up.child_by_field_name("argument") == node and (
                deref or _text(up.child_by_field_name("operator")) == "->"):
            node, deref = up, True
        elif t == "argument_list" and up.parent is not None and _callee(up.parent) in _CASTS:
            node = up.parent
        else:
            break
    up = node.parent
    if up is None:
        return Access(unsure=True), None
    if node is ident and (up.type in ("pointer_declarator", "array_declarator", "reference_declarator",
                                      "parameter_declaration", "declaration") or
                          (up.type == "init_declarator" and up.child_by_field_name("declarator") == node)):
        return Access(), None       # the name being declared
    if up.type == "argument_list" and up.parent is not None and up.parent.type == "call_expression":
        call = up.parent
        name = _callee(call)
        if name.startswith("atomic") and _arg_index(call, node) == 0 and not deref:
            return Access(read=True, write=True), None
        if deref or name in _READ_ONLY_CALLS:
            return Access(read=True), None
        fn = fns.get(name)
        i = _arg_index(call, node)
        if fn is None or not 0 <= i < len(fn.params):
            return Access(unsure=True), None
        return _access(fn, fn.params[i], fns, seen), None
    if deref:
        if up.type == "assignment_expression" and up.child_by_field_name("left") == node:
            op = _text(up.child_by_field_name("operator"))
            return (Access(write=True) if op == "=" else Access(read=True, write=True)), None
        if up.type == "update_expression":
            return Access(read=True, write=True), None
        return Access(read=True), None
    if up.type == "init_declarator" and up.child_by_field_name("value") == node:
        d = up.child_by_field_name("declarator")
        while d is not None and d.type != "identifier":
            d = d.child_by_field_name("declarator")
        return Access(), _text(d) if d is not None else None
    if up.type == "assignment_expression" and up.child_by_field_name("right") == node:
        left = up.child_by_field_name("left")
        return (Access(), _text(left)) if left.type == "identifier" else (Access(unsure=True), None)
    if up.type in ("binary_expression", "condition_clause", "unary_expression"):
        return Access(), None       # compared with another pointer or with null
    if (up.type == "assignment_expression" and up.child_by_field_name("left") == node and
            _text(up.child_by_field_name("operator")) in ("=", "+=", "-=")) or (
            node.type == "update_expression" and not deref and
            up.type in ("expression_statement", "for_statement", "comma_expression")):
        return Access(), None       # the pointer itself moved (p = q, p += n, p++): no memory touched
    return Access(unsure=True), None


def _access(fn: _Fn, name: str, fns: dict, seen: frozenset = frozenset()) -> Access:
    key = (fn.name, name)
    if key in seen or len(seen) > 32:
        return Access()
    seen = seen | {key}
    total, names, done = Access(), [name], set()
    while names:
        nm = names.pop()
        if nm in done:
            continue
        done.add(nm)
        for n in _walk(fn.body):
            if n.type == "identifier" and _text(n) == nm:
                acc, alias = _use(n, fns, seen)
                total = total | acc
                if alias:
                    names.append(alias)
    return total


def pointer_access(text: str, entry: str) -> dict[str, Access]:
    """For each pointer parameter of ``entry``: whether the kernel reads it, writes it, or both,
    following it into the functions of this source that it is passed to."""
    fns = _functions(parse_tree(text).root_node)
    fn = fns.get(entry)
    if fn is None:
        return {}
    return {p: _access(fn, p, fns) for p in fn.params if p in fn.pointers}


@dataclass
class IndexFacts:
    """What the entry and the functions it calls say about its geometry, in the entry's names."""
    thread_index: dict[str, tuple[str, str]] = field(default_factory=dict)  # var -> (axis, block size text)
    block_index: dict[str, str] = field(default_factory=dict)               # var -> axis (var = blockIdx.a)
    bounds: dict[str, str] = field(default_factory=dict)                    # var -> what it stays below
    subscripts: dict[str, list[str]] = field(default_factory=dict)          # pointer -> its index expressions


def _renamed(node, rename: dict[str, str]) -> str:
    base, data = node.start_byte, bytearray(node.text)
    for n in sorted((n for n in _walk(node) if n.type == "identifier" and _text(n) in rename),
                    key=lambda n: -n.start_byte):
        data[n.start_byte - base:n.end_byte - base] = rename[_text(n)].encode()
    return " ".join(data.decode("utf-8", "replace").split())


_THREAD_INDEX = re.compile(r"^\(?\s*(?:blockIdx\.([xyz])\s*\*\s*(\w+(?:\.[xyz])?)|(\w+(?:\.[xyz])?)\s*\*\s*blockIdx\.([xyz]))"
                           r"\s*\)?\s*\+\s*threadIdx\.([xyz])$")


def _index_var(var: str, value: str, facts: IndexFacts) -> None:
    value = re.sub(r"\(\s*(?:unsigned\s+)?(?:int|long|size_t|long long|int64_t)\s*\)", "", value).strip()
    m = _THREAD_INDEX.match(value) or _THREAD_INDEX.match(" + ".join(reversed(value.split(" + ", 1))))
    if m:
        axis, block = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        if axis == m.group(5):
            facts.thread_index.setdefault(var, (axis, block))
    elif re.fullmatch(r"blockIdx\.([xyz])", value):
        facts.block_index.setdefault(var, value[-1])


def _facts_of(fn: _Fn, fns: dict, rename: dict[str, str], facts: IndexFacts, depth: int) -> None:
    for n in _walk(fn.body):
        if n.type == "init_declarator" and n.child_by_field_name("value") is not None:
            d = n.child_by_field_name("declarator")
            value = n.child_by_field_name("value")
            if d is not None and d.type == "identifier":
                _index_var(_renamed(d, rename), _renamed(value, rename), facts)
            elif (d is not None and d.type == "pointer_declarator" and value.type == "binary_expression"
                  and value.child_by_field_name("left").type == "identifier"
                  and _text(value.child_by_field_name("left")) in fn.pointers):
                # float* row_ptr = x + row * COLS: the offset is an index into x
                facts.subscripts.setdefault(_renamed(value.child_by_field_name("left"), rename), []).append(
                    _renamed(value.child_by_field_name("right"), rename))
        elif n.type == "assignment_expression" and _text(n.child_by_field_name("operator")) == "=":
            left = n.child_by_field_name("left")
            if left.type == "identifier":
                _index_var(_renamed(left, rename), _renamed(n.child_by_field_name("right"), rename), facts)
        elif n.type == "binary_expression" and _text(n.child_by_field_name("operator")) in ("<", ">"):
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if _text(n.child_by_field_name("operator")) == ">":
                left, right = right, left
            if left.type == "identifier":
                facts.bounds.setdefault(_renamed(left, rename), _renamed(right, rename))
        elif n.type == "subscript_expression":
            arg = n.child_by_field_name("argument")
            if arg.type == "identifier" and _text(arg) in fn.pointers:
                idx = n.child_by_field_name("indices")
                facts.subscripts.setdefault(_renamed(arg, rename), []).append(
                    _renamed(idx, rename).strip("[] ") if idx is not None else "")
        elif n.type == "call_expression" and depth < 8:
            callee = fns.get(_callee(n))
            if callee is None or callee.name == fn.name:
                continue
            args = [c for c in n.child_by_field_name("arguments").children if c.is_named and c.type != "comment"]
            inner = {p: _renamed(a, rename) for p, a in zip(callee.params, args) if a.type == "identifier"}
            _facts_of(callee, fns, inner, facts, depth + 1)


def index_facts(text: str, entry: str) -> IndexFacts:
    """Thread indices (``blockIdx.x * BLOCK + threadIdx.x``), bounds (``i < n``, loop limits) and
    the pointers' index expressions of ``entry`` and what it calls in this source."""
    fns = _functions(parse_tree(text).root_node)
    facts = IndexFacts()
    fn = fns.get(entry)
    if fn is not None:
        _facts_of(fn, fns, {}, facts, 0)
    return facts
