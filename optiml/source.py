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


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


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
        fdecl = n.child_by_field_name("declarator")
        while fdecl is not None and fdecl.type != "function_declarator":
            fdecl = fdecl.child_by_field_name("declarator")
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
    return values


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


def parse_source(text: str) -> SourceInfo:
    """Kernels, integer constants and the launch comment of a CUDA source."""
    tree = _parser().parse(text.encode("utf-8"))
    return SourceInfo(kernels=_kernels(tree.root_node), constants=_constants(tree.root_node),
                      launch=_launch_comment(text))


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
