"""``optiml init``: a draft task spec from a kernel's signature and what its code reads and writes.

Everything that cannot be inferred from the source is marked ``# TODO`` in the draft, which
still loads, so a user edits a working file instead of starting from a blank page.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import SpecError
from ..source import Access, IndexFacts, Kernel, SourceInfo, dtype_of_c_type, index_facts, parse_source, pointer_access
from ..spec.space import detected, suggested_values
from .tolerance import tolerance_lines

_BLOCK_HINTS = ("BLOCK", "BLOCK_SIZE", "TILE", "THREADS", "NUM_THREADS", "BLOCK_DIM", "BS", "TB")


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def draft_spec(source: str, kernel_path: Path, entry: str | None = None) -> str:
    info = parse_source(source)
    if not info.kernels:
        raise SpecError(f"{kernel_path}: no __global__ function found, so there is nothing to draft a spec for.")
    if entry is None:
        kern = info.kernels[0]
    else:
        kern = info.kernel(entry)
        if kern is None:
            raise SpecError(f"{kernel_path}: --entry {entry!r} is not a __global__ function here (found: {', '.join(k.name for k in info.kernels)}).")
    return _render(kern, info, kernel_path, source) + _tune_block(source, kern.name, kernel_path)


def _render(kern: Kernel, info: SourceInfo, kernel_path: Path, source: str = "") -> str:
    lines: list[str] = []
    w = lines.append
    w(f"# Draft task spec for {kernel_path.name}, written by `optiml init`: see docs/spec.md.")
    w("# Every line marked TODO is a guess; check it before trusting a result.")
    others = [k.name for k in info.kernels if k.name != kern.name]
    if others:
        w(f"# Other __global__ functions in the file: {', '.join(others)} (choose with `optiml init --entry NAME`).")
    w("")
    w("[kernel]")
    w(f"entry = {_q(kern.name)}")
    w('nvcc_flags = ["-O3"]')
    w("")

    size_params = [p for p in kern.params if not p.is_pointer and (dtype_of_c_type(p.base_type) or "").startswith(("int", "uint"))]
    sizes = [p.name for p in size_params if p.name.isidentifier()]
    facts = index_facts(source, kern.name) if source else IndexFacts()
    access = pointer_access(source, kern.name) if source else {}
    geo = _Geometry(sizes, facts, info.constants, detected(source, kern.name) if source else {})
    shapes = {p.name: geo.shape(p.name) for p in kern.params if p.is_pointer}
    launch = geo.launch()
    sizes = geo.sizes or ["N"]
    if not geo.sizes:
        size_note = "  # TODO: no integer parameter was found; N is a placeholder size"
    else:
        size_note = "  # TODO: pick a size that fills the GPU"
    if geo.placeholders:
        size_note += f"; {geo.placeholders[0]}: nothing in the kernel bounds it, so its use is a guess"
    w("[sizes]")
    w("timing = { " + ", ".join(f"{s} = 4096" for s in sizes) + " }" + size_note)
    w("verify = [  # TODO: sizes used only for verification; keep some that are not multiples of the block size")
    w("    { " + ", ".join(f"{s} = 1000" for s in sizes) + " },")
    w("    { " + ", ".join(f"{s} = 77" for s in sizes) + " },")
    w("]")
    w("")

    n = sizes[0]
    for p in kern.params:
        dtype = dtype_of_c_type(p.base_type)
        w("[[args]]")
        w(f"name = {_q(p.name or 'arg')}")
        if dtype is None:
            w(f'dtype = "float32"  # TODO: could not map the C type {p.type_text!r}')
        else:
            w(f"dtype = {_q(dtype)}")
        if p.is_pointer:
            role, why = _role(p.is_const, access.get(p.name))
            w(f"role = {_q(role)}" + (f"  # TODO: {why}" if why else ""))
            shape, sure = shapes[p.name]
            w(f"shape = [{', '.join(map(_q, shape))}]  # TODO: " +
              ("from how the kernel indexes it; check" if sure else "element count as an expression over the sizes"))
            if role != "output" and dtype and dtype.startswith("float"):
                w('init = { dist = "normal", mean = 0.0, std = 1.0 }')
        else:
            w('role = "scalar"')
            if p.name in sizes:
                w(f"value = {_q(p.name)}")
            else:
                w("value = 1  # TODO: the value to pass")
        w("")

    block = next((c for c in _BLOCK_HINTS if c in info.constants), None)
    w("[launch]")
    if launch:
        grid, blk, why = launch
        w(f"grid = [{', '.join(map(_q, grid))}]  # TODO: {why}; check")
        w(f"block = [{', '.join(map(_q, blk))}]  # TODO")
    elif block:
        w(f"grid = [\"cdiv({n}, {block})\"]  # TODO: check against how the kernel indexes")
        w(f"block = [{_q(block)}]  # TODO: the source defines {block} = {info.constants[block]}")
    else:
        w(f"grid = [\"cdiv({n}, 256)\"]  # TODO: check against how the kernel indexes")
        w("block = [256]  # TODO")
    w("shared_mem = 0  # TODO: bytes of dynamic shared memory, if the kernel uses extern __shared__")
    w("")
    w("[reference]")
    w('kind = "seed"  # the outputs of this kernel as written are the reference')
    w("")
    outputs = {dtype_of_c_type(p.base_type): None for p in kern.params
               if p.is_pointer and _role(p.is_const, access.get(p.name))[0] in ("output", "inout")}
    tol = tolerance_lines({d: (None, None, "") for d in outputs if d})
    if tol:
        lines.extend(tol)
        w("")
    w("# [counts]  # optional: for GFLOP/s, GB/s and speed of light")
    w(f'# flops = "{n}"')
    w(f'# bytes = "4 * {n}"')
    return "\n".join(lines) + "\n"


def _tune_block(source: str, entry: str, kernel_path: Path) -> str:
    """A commented ``[tune]`` table for what looks tunable, for the user to check and uncomment."""
    found = detected(source, entry)
    if not found:
        return ""
    lines = ["", "# A tuning space for the search (docs/spec.md, [tune]): uncomment what is one tunable quantity,",
             "# use the names in [launch] where the launch depends on them, and say which combinations cannot run.",
             "# [tune]"]
    where = {"define": "a #define", "constexpr": "a constexpr", "template": f"a template argument {entry} passes"}
    for name, (value, kind) in found.items():
        values = ", ".join(map(str, suggested_values(value)))
        lines.append(f"# {name} = [{values}]  # TODO: {where[kind]}, {value} in {kernel_path.name}")
    lines.append('# restrictions = []  # TODO: e.g. "BLOCK_X * BLOCK_Y <= 1024", "N % TILE == 0"')
    return "\n".join(lines) + "\n"


def _role(is_const: bool, acc: Access | None) -> tuple[str, str]:
    """The role from what the kernel does with a pointer, and a note when that is a guess."""
    if acc is None or acc.unsure:
        if is_const:
            return "input", ""
        why = "passed where optiml cannot follow it" if acc is not None else "not analysed"
        return "output", f'{why}; "inout" if the kernel also reads it, "input" if it only reads it'
    if acc.read and acc.write:
        return "inout", ""
    if acc.write:
        return "output", ""
    if acc.read:
        return "input", ""
    return ("input" if is_const else "output"), "the kernel neither reads nor writes it"


_TERM_PRODUCT = re.compile(r"^\(?(.+?)\)?\s*\*\s*([A-Za-z_]\w*)$")
_IDENT = re.compile(r"[A-Za-z_]\w*")


class _Geometry:
    """Shapes and a launch proposed from bounds checks and index expressions."""

    def __init__(self, sizes: list[str], facts: IndexFacts, constants: dict, template: dict):
        self.sizes, self.facts, self.constants, self.template = list(sizes), facts, constants, template
        self.placeholders: list[str] = []

    def _placeholder(self) -> str:
        if not self.placeholders:
            used = " ".join([*self.facts.bounds.values(), *(i for v in self.facts.subscripts.values() for i in v)])
            unused = [s for s in self.sizes if s not in _IDENT.findall(used)]
            if unused:      # a size parameter nothing bounds or indexes with: the rows of a one-block-per-row kernel
                self.placeholders.append(unused[0])
                return unused[0]
            name = next(c for c in ("M", "ROWS", "M_", "ROWS_") if c not in self.sizes and c not in self.constants)
            self.placeholders.append(name)
            self.sizes.append(name)
        return self.placeholders[0]

    def _extent(self, var: str) -> str | None:
        bound = self.facts.bounds.get(var)
        if bound in self.sizes:
            return bound
        if var in self.facts.thread_index or var in self.facts.block_index:
            return self._placeholder()
        return None

    def _dim(self, text: str) -> str | None:
        for ident in _IDENT.findall(text):
            if ident in self.sizes and ident not in self.placeholders:
                return ident
            ext = self._extent(ident)
            if ext is not None:
                return ext
        return None

    def shape(self, pointer: str) -> tuple[list[str], bool]:
        for index in self.facts.subscripts.get(pointer, []):
            terms = [t.strip() for t in re.split(r"\s\+\s(?![^(]*\))", index)]
            for t in terms:
                m = _TERM_PRODUCT.match(t)
                if m and m.group(2) in self.sizes:
                    for other in terms:     # col in row * N + col stays below N
                        if other != t and other in self.facts.thread_index:
                            self.facts.bounds.setdefault(other, m.group(2))
                    first = self._dim(m.group(1))
                    if first is not None:
                        return [first, m.group(2)], True
            dim = self._dim(index)
            if dim is not None:
                return [dim], True
        return [self.sizes[0] if self.sizes else self._placeholder()], False

    def _block(self, text: str, default: int) -> str:
        if text in self.constants or text.isdigit():
            return text
        if text in self.template:
            return str(self.template[text][0])
        return str(default)

    def launch(self) -> tuple[list[str], list[str], str] | None:
        axes: dict[str, tuple[str, str]] = {}
        for var, (axis, block) in self.facts.thread_index.items():
            if axis not in axes or self.facts.bounds.get(var) in self.sizes:
                axes[axis] = (var, block)
        if axes:
            order = [a for a in "xyz" if a in axes]
            if order != list("xyz"[:len(order)]):
                return None
            default = 256 if len(order) == 1 else 16
            grid, block = [], []
            for a in order:
                var, b = axes[a]
                blk = self._block(b, default)
                grid.append(f"cdiv({self._extent(var)}, {blk})")
                block.append(blk)
            return grid, block, "one thread per element, from " + ", ".join(
                f"{axes[a][0]} = blockIdx.{a} * {axes[a][1]} + threadIdx.{a}" for a in order)
        rows = [(v, a) for v, a in self.facts.block_index.items() if a == "x"]
        if rows and "y" not in self.facts.block_index.values():
            block = next((c for c in _BLOCK_HINTS if c in self.constants), "256")
            return [self._extent(rows[0][0])], [block], f"one block per {rows[0][0]} (= blockIdx.x)"
        return None
