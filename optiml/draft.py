"""``optiml init``: a draft task spec from a kernel's signature.

Everything that cannot be inferred from the source is marked ``# TODO`` in the draft, which
still loads, so a user edits a working file instead of starting from a blank page.
"""
from __future__ import annotations

from pathlib import Path

from .errors import SpecError
import re

from .source import Access, IndexFacts, Kernel, SourceInfo, dtype_of_c_type, index_facts, parse_source, pointer_access
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


# ------------------------------------------------------------------ optiml init --kernelbench
# A KernelBench-format task (a module with `class Model(nn.Module)`, `get_inputs()` and
# `get_init_inputs()`, its sizes module-level integers) run at two reduced sizes on the CPU:
# which size each dimension is comes from how it moves between them.

_REF_NAME = "reference"


def _import_torch():
    try:
        import torch
    except ImportError:
        raise SpecError("optiml init --kernelbench runs the task with PyTorch, which is not installed: "
                        "pip install torch") from None
    return torch


def _load_task(task_path: Path):
    import importlib.util
    import sys

    if not task_path.is_file():
        raise SpecError(f"{task_path}: no such task file.")
    spec = importlib.util.spec_from_file_location(f"optiml_kernelbench_{abs(hash(task_path))}", task_path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(task_path.parent))
    try:
        spec.loader.exec_module(mod)
    except Exception as e:      # the user's module: any error is theirs to fix
        raise SpecError(f"{task_path}: importing it failed ({type(e).__name__}: {e}).") from None
    finally:
        sys.path.remove(str(task_path.parent))
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise SpecError(f"{task_path}: a KernelBench task defines Model, get_inputs and get_init_inputs; "
                        f"this one has no {', '.join(missing)}.")
    return mod


def _probe(torch, mod, sizes: dict[str, int]):
    """Run the task at ``sizes``: (inputs, the Model's parameters and buffers, outputs)."""
    saved = {k: getattr(mod, k) for k in sizes}
    try:
        for k, v in sizes.items():
            setattr(mod, k, v)
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs())
        inputs = list(mod.get_inputs())
        with torch.no_grad():
            out = model(*inputs)
    finally:
        for k, v in saved.items():
            setattr(mod, k, v)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return model, inputs, dict(model.state_dict()), outs


def _reduced(sizes: dict[str, int], scale: int, odd: bool) -> dict[str, int]:
    """Sizes of 16 or more divided down to under ``scale`` (distinct, odd if asked); small ones kept."""
    out, k = {}, 0
    for name, v in sizes.items():
        if v < 16:
            out[name] = v
            continue
        while v >= scale:
            v //= 2
        v = v + 2 * k
        out[name] = (v | 1) if odd else v
        k += 1
    return out


def _dim_name(a: int, b: int, sa: dict, sb: dict) -> str | None:
    """The expression over the sizes that is ``a`` at the sizes ``sa`` and ``b`` at ``sb``."""
    names = [n for n in sa if sa[n] == a and sb[n] == b]
    if names:
        return names[0]
    for n in sa:
        for m in sa:
            if sa[n] * sa[m] == a and sb[n] * sb[m] == b and n <= m:
                return f"{n} * {m}"
    return str(a) if a == b else None


def _init_of(t) -> str:
    x = t.detach().double()
    if not t.is_floating_point():
        return f'{{ dist = "integers", low = {int(x.min())}, high = {int(x.max()) + 1} }}'
    lo, hi, mean, std = float(x.min()), float(x.max()), float(x.mean()), float(x.std()) if x.numel() > 1 else 0.0
    if lo >= 0.0 and hi <= 1.0:
        return '{ dist = "uniform", low = 0.0, high = 1.0 }'
    if x.numel() >= 16 and abs(std - (hi - lo) / 12 ** 0.5) < 0.1 * (hi - lo) / 12 ** 0.5:     # flat: uniform
        return f'{{ dist = "uniform", low = {lo:.2g}, high = {hi:.2g} }}  # from the values the task draws'
    if abs(mean) < 0.05 and abs(std - 1.0) < 0.05:
        return '{ dist = "normal", mean = 0.0, std = 1.0 }'
    return f'{{ dist = "normal", mean = {mean:.2g}, std = {max(std, 1e-3):.2g} }}  # from the values the task draws'


def draft_kernelbench(task_path: Path, source: str, kernel_path: Path, entry: str | None = None,
                      spec_path: Path | None = None) -> tuple[str, str]:
    """A task spec and its Python reference (the Model's forward) for a KernelBench-format task;
    the kernel's entry signature says which argument is which (pointers: inputs, then the Model's
    parameters and buffers, then outputs; integers by the name of a size)."""
    torch = _import_torch()
    mod = _load_task(task_path)
    info = parse_source(source)
    kern = info.kernel(entry) if entry else (info.kernels[0] if info.kernels else None)
    if kern is None:
        raise SpecError(f"{kernel_path}: no __global__ function {entry or ''} found to match the task's arguments to.")
    sizes = {k: v for k, v in vars(mod).items() if type(v) is int and not k.startswith("_") and v > 0}
    probes = None
    for odd in (True, False):
        sa, sb = _reduced(sizes, 128, odd), _reduced(sizes, 32, odd)
        try:
            probes = (sa, sb, _probe(torch, mod, sa), _probe(torch, mod, sb))
            break
        except Exception as e:      # the task may not allow these sizes: try even ones, then give up
            why = f"{type(e).__name__}: {e}"
    if probes is None:
        raise SpecError(f"{task_path}: the task does not run at reduced sizes ({why}), so optiml cannot tell "
                        "its dimensions apart; write the spec by hand (docs/spec.md).")
    sa, sb, (model, ins_a, params_a, outs_a), (_, ins_b, params_b, outs_b) = probes
    if not all(isinstance(t, torch.Tensor) for t in ins_a):
        raise SpecError(f"{task_path}: get_inputs() returns something other than tensors; only tensors are supported.")

    arrays = []         # (role, where, tensor at sa, dims)
    for i, (ta, tb) in enumerate(zip(ins_a, ins_b)):
        arrays.append(("input", i, ta, tb))
    for key in params_a:
        arrays.append(("param", key, params_a[key], params_b[key]))
    for i, (ta, tb) in enumerate(zip(outs_a, outs_b)):
        arrays.append(("output", i, ta, tb))
    used: set[str] = set()
    dims_of = []
    for _, _, ta, tb in arrays:
        dims = [_dim_name(a, b, sa, sb) for a, b in zip(ta.shape, tb.shape)] if ta.dim() == tb.dim() else []
        dims = [d if d is not None else str(a) for d, a in zip(dims, ta.shape)] or [str(n) for n in ta.shape] or ["1"]
        used.update(n for d in dims for n in _IDENT.findall(d))
        dims_of.append(dims)
    named = [n for n in sizes if n in used]
    pointers = [p for p in kern.params if p.is_pointer]
    ints = [p for p in kern.params if not p.is_pointer]
    ref_args: dict = {"INPUTS": [], "PARAMS": {}, "OUTPUTS": [], "DIMS": {}, "DTYPES": {}}

    lines: list[str] = []
    w = lines.append
    w(f"# Task spec for {kernel_path.name} from the KernelBench-format task {task_path.name}, written by")
    w("# `optiml init --kernelbench`: see docs/spec.md. Every line marked TODO is a guess; check it.")
    w("")
    w("[kernel]")
    w(f"entry = {_q(kern.name)}")
    w('nvcc_flags = ["-O3"]')
    w("")
    w("[sizes]")
    w("timing = { " + ", ".join(f"{n} = {sizes[n]}" for n in named) + " }  # the task's own sizes")
    w("verify = [  # the task's sizes scaled down, odd where it allows (not multiples of any block)")
    for s in (sa, sb):
        w("    { " + ", ".join(f"{n} = {s[n]}" for n in named) + " },")
    w("]")
    w("")
    for i, p in enumerate(pointers):
        w("[[args]]")
        w(f"name = {_q(p.name)}")
        if i >= len(arrays):
            w(f'dtype = "float32"  # TODO: the task has {len(arrays)} arrays; what is this pointer?')
            w('role = "input"  # TODO')
            w("shape = [1]  # TODO")
            w("")
            continue
        role, where, ta, _ = arrays[i]
        dtype = str(ta.dtype).removeprefix("torch.")
        want = dtype_of_c_type(p.base_type)
        note = f"  # TODO: the kernel's {p.base_type} is not the task's {dtype}" if want and want != dtype else ""
        w(f"dtype = {_q(dtype)}{note}")
        w(f"role = {_q('output' if role == 'output' else 'input')}" +
          ("" if role != "param" else f"  # the Model's {where}"))
        w(f"shape = [{', '.join(map(_q, dims_of[i]))}]")
        if role != "output":
            w(f"init = {_init_of(ta)}")
        w("")
        ref_args["DIMS"][p.name] = dims_of[i]
        ref_args["DTYPES"][p.name] = dtype
        if role == "input":
            ref_args["INPUTS"].append(p.name)
        elif role == "param":
            ref_args["PARAMS"][p.name] = where
        else:
            ref_args["OUTPUTS"].append(p.name)
    if len(pointers) < len(arrays):
        w(f"# TODO: the task has {len(arrays)} arrays (inputs, the Model's parameters, outputs) and the kernel "
          f"{len(pointers)} pointers; the last ones are not matched")
    lookup = {n.lower(): n for n in sizes}
    rename = {}
    for p in ints:
        dtype = dtype_of_c_type(p.base_type) or "float32"
        w("[[args]]")
        w(f"name = {_q(p.name)}")
        w(f"dtype = {_q(dtype)}")
        w('role = "scalar"')
        size = lookup.get(p.name.lower())
        attr = getattr(model, p.name, None)
        if dtype.startswith(("int", "uint")) and size is not None:
            w(f"value = {_q(size)}")
            rename[p.name] = size
        elif isinstance(attr, (int, float)) and not isinstance(attr, bool):
            w(f"value = {attr!r}  # the Model's {p.name}")
        else:
            w("value = 1  # TODO: no size or Model attribute has this name")
        w("")
    geo = _Geometry([p.name for p in ints], index_facts(source, kern.name), info.constants, detected(source, kern.name))
    for p in pointers:
        geo.shape(p.name)
    launch = geo.launch()
    sub = (lambda e: _IDENT.sub(lambda m: rename.get(m.group(0), m.group(0)), e))
    w("[launch]")
    if launch and not [n for n in geo.placeholders if n not in rename]:
        w(f"grid = [{', '.join(_q(sub(g)) for g in launch[0])}]  # TODO: {launch[2]}; check")
        w(f"block = [{', '.join(_q(sub(b)) for b in launch[1])}]  # TODO")
    else:
        first = named[0] if named else "1"
        w(f'grid = ["cdiv({first}, 256)"]  # TODO: how the kernel maps work to blocks')
        w("block = [256]  # TODO")
    w("shared_mem = 0  # TODO: bytes of dynamic shared memory, if the kernel uses extern __shared__")
    w("")
    ref_file = (kernel_path.stem + "_ref.py")
    w("[reference]")
    w(f"python = {_q(ref_file + ':' + _REF_NAME)}  # the Model's forward (written beside this spec)")
    w("")
    w("[tolerance]  # TODO: loosen for long reductions (a matmul's K) or half precision")
    w("float32 = { atol = 1e-4, rtol = 1e-4 }")
    text = "\n".join(lines) + "\n"
    return text, _reference_text(task_path, spec_path or kernel_path.with_suffix(".toml"), ref_args)


def _reference_text(task_path: Path, spec_path: Path, args: dict) -> str:
    import os

    rel = os.path.relpath(task_path.resolve(), spec_path.resolve().parent)
    consts = "\n".join(f"{k} = {v!r}" for k, v in args.items())
    return f'''"""The reference for optiml: the forward of Model in {task_path.name} (a KernelBench-format task),
written by `optiml init --kernelbench`. Called with the spec's input arrays (NumPy) by keyword; it
sets the task's sizes from their shapes, builds the Model from get_init_inputs() (seeded), loads its
parameters from the arrays, and returns forward's outputs as NumPy arrays."""
import importlib.util
from pathlib import Path

import numpy as np
import torch

TASK = Path(__file__).parent / {rel!r}
{consts}
_task = None


def _module():
    global _task
    if _task is None:
        spec = importlib.util.spec_from_file_location("kernelbench_task", TASK)
        _task = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_task)
    return _task


def {_REF_NAME}(**arrays):
    task = _module()
    for name, dims in DIMS.items():
        if name in arrays:
            for size, n in zip(dims, np.shape(arrays[name])):
                if size.isidentifier():
                    setattr(task, size, int(n))
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def tensor(name):
        return torch.from_numpy(np.ascontiguousarray(arrays[name])).to(device, getattr(torch, DTYPES[name]))

    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).to(device)
    with torch.no_grad():
        state = model.state_dict()
        for name, key in PARAMS.items():
            state[key].copy_(tensor(name).reshape(state[key].shape))
        out = model(*[tensor(name) for name in INPUTS])
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(o.detach().cpu().float().numpy() if o.dtype == torch.bfloat16 else o.detach().cpu().numpy()
                 for o in outs)
'''
