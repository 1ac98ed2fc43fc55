"""``optiml init``: a draft task spec from a kernel's signature.

Everything that cannot be inferred from the source is marked ``# TODO`` in the draft, which
still loads, so a user edits a working file instead of starting from a blank page.
"""
from __future__ import annotations

from pathlib import Path

from .errors import SpecError
from .source import Kernel, SourceInfo, dtype_of_c_type, parse_source
from .spec.space import detected, suggested_values

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
    return _render(kern, info, kernel_path) + _tune_block(source, kern.name, kernel_path)


def _render(kern: Kernel, info: SourceInfo, kernel_path: Path) -> str:
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
    sizes = [p.name for p in size_params if p.name.isidentifier()] or ["N"]
    if sizes == ["N"] and not size_params:
        size_note = "  # TODO: no integer parameter was found; N is a placeholder size"
    else:
        size_note = "  # TODO: pick a size that fills the GPU"
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
            if p.is_const:
                w('role = "input"')
            else:
                w('role = "output"  # TODO: "inout" if the kernel also reads it')
            w(f"shape = [{_q(n)}]  # TODO: element count as an expression over the sizes")
            if p.is_const and dtype and dtype.startswith("float"):
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
    if block:
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
