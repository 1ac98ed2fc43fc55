"""``optiml init --kernelbench``: a draft spec and a reference from a KernelBench-format task."""
from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

from .. import dtypes as _dt
from ..errors import SpecError
from ..source import dtype_of_c_type, index_facts, parse_source, pointer_access
from ..spec.space import detected
from .kbtask import load_task, task_sizes
from . import trial as _trial
from .signature import _IDENT, _Geometry, _q

# ------------------------------------------------------------------ optiml init --kernelbench
# A KernelBench-format task (a module with `class Model(nn.Module)`, `get_inputs()` and
# `get_init_inputs()`, its sizes module-level integers) run at two reduced sizes on the CPU:
# which size each dimension is comes from how it moves between them.

_REF_NAME = "reference"
# an integer argument named as a count of elements (n, numel, size, total_elements, ...): the first
# array's element count when no size or Model attribute has its name
_COUNT = re.compile(r"(?i)n|num|numel|size|total|count|len|length|(n|num|total)_?(elem|element)s?|n_?items")
_BASELINE = "baseline"


def _import_torch():
    try:
        import torch
    except ImportError:
        raise SpecError("optiml init --kernelbench runs the task with PyTorch, which is not installed: "
                        "pip install torch") from None
    return torch


def _load_task(task_path: Path):
    """The task module as written (its own sizes); one sentence for a file that is not a task."""
    if not task_path.is_file():
        raise SpecError(f"{task_path}: no such task file.")
    try:
        mod = load_task(task_path)
    except Exception as e:      # the user's module: any error is theirs to fix
        raise SpecError(f"{task_path}: importing it failed ({type(e).__name__}: {e}).") from None
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise SpecError(f"{task_path}: a KernelBench task defines Model, get_inputs and get_init_inputs; "
                        f"this one has no {', '.join(missing)}.")
    return mod


def _probe(torch, task_path: Path, sizes: dict[str, int], forward: bool = True):
    """Run the task at ``sizes`` (the module executed anew with them, so that what it derives from
    them follows): (the Model, inputs, its parameters and buffers, outputs; no outputs and no
    forward without ``forward``)."""
    mod = load_task(task_path, sizes)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    inputs = list(mod.get_inputs())
    if not forward:
        return model, inputs, dict(model.state_dict()), []
    with torch.no_grad():
        out = model(*inputs)
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


def _reduced_divisible(sizes: dict[str, int], scale: int) -> dict[str, int]:
    """Reduced sizes, distinct, that keep every divisibility among the task's sizes (a GroupNorm's
    channels a multiple of its groups): each size of 16 or more, smallest first, near its halved value
    and a multiple of the reduced sizes that divide it in the task."""
    import math

    out: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (sizes[n], n)):
        v = sizes[name]
        if v < 16:
            out[name] = v
            continue
        target = v
        while target >= scale:
            target //= 2
        step = 1
        for d, dv in out.items():
            if sizes[d] > 1 and v % sizes[d] == 0:
                step = math.lcm(step, dv)
        cand = max(step, (target // step) * step)
        while cand in out.values():
            cand += step
        out[name] = cand
    return {n: out[n] for n in sizes}


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


def _spread(t) -> float | None:
    """A floating tensor's standard deviation (None for integers, constants and fewer than 8 values)."""
    if not t.is_floating_point() or t.numel() < 8:
        return None
    s = float(t.detach().double().std())
    return s if s > 0 and s == s else None


_SAME_SPREAD = 1.15         # spreads within this ratio of each other are one spread (sampling noise)


def spread_scaling(probe, sizes: dict, sa: dict, sb: dict, tensors_a: dict, tensors_b: dict) -> dict:
    """For each tensor the task draws (inputs and the Model's parameters, keyed as in ``tensors_a``)
    whose spread differs between the reduced sizes ``sa`` and ``sb`` (an nn.Linear's weight is
    drawn within 1/sqrt(in_features)): (the factor from its spread at ``sa`` to its spread at the
    task's ``sizes``, the reason). Each size is varied alone (``probe(sizes)`` -> tensors keyed
    alike) to find the power of it the spread follows; a tensor the powers found do not explain is
    left out, as is everything where a probe fails. Drafting at the reduced size's spread would give
    the spec's inputs at the timing size far larger values than the task's (20 times for a 32768-wide
    Linear), and the tolerance drafted from the task's outputs would not fit them."""
    import math

    varying = {}
    for key, ta in tensors_a.items():
        s_a, s_b = _spread(ta), _spread(tensors_b[key]) if key in tensors_b else None
        if s_a and s_b and abs(math.log(s_a / s_b)) > math.log(_SAME_SPREAD):
            varying[key] = (s_a, s_b)
    if not varying:
        return {}
    powers: dict = {key: {} for key in varying}
    for name in (n for n in sa if sa[n] != sb.get(n, sa[n])):
        try:
            alone = probe(dict(sa, **{name: sb[name]}))
        except Exception:                     # noqa: BLE001 - a size the task does not take alone: no scaling
            return {}
        for key, (s_a, _) in varying.items():
            s_n = _spread(alone[key]) if key in alone else None
            if s_n and abs(math.log(s_a / s_n)) > math.log(_SAME_SPREAD):
                a = max(-2.0, min(2.0, math.log(s_a / s_n) / math.log(sa[name] / sb[name])))
                half = round(a * 2) / 2               # a fan-in's -0.5 seen through sampling noise
                powers[key][name] = half if abs(a - half) < 0.1 else a
    out = {}
    for key, (s_a, s_b) in varying.items():
        pw = powers[key]
        predicted = s_a * math.prod((sb[n] / sa[n]) ** a for n, a in pw.items())
        if not pw or abs(math.log(predicted / s_b)) > math.log(_SAME_SPREAD):
            continue                          # not explained by the sizes one at a time
        factor = math.prod((sizes[n] / sa[n]) ** a for n, a in pw.items())
        said = " x ".join(f"{n}^{a:.2g}" for n, a in pw.items())
        out[key] = (factor, f"the task's spread at its own sizes: it follows {said}")
    return out


def _init_of(t, small=None, scaling: tuple | None = None) -> str:
    """The spec's init of an input drawn as the task draws ``t``; integers within the range they take
    at the smaller size too (``small``: class indices below that size's count of classes); a float
    tensor's values times ``scaling``'s factor, where its spread follows the sizes (:func:`spread_scaling`)."""
    if scaling is not None and t.is_floating_point():
        f, said = scaling
        return _drawn_like(t.detach().double() * f, said)
    x = t.detach().double()
    if not t.is_floating_point():
        high = int(x.max()) + 1
        if small is not None and small.numel() and not small.is_floating_point() and int(small.max()) + 1 < high:
            return (f'{{ dist = "integers", low = {int(x.min())}, high = {int(small.max()) + 1} }}  '
                    "# within the range the task draws at the smaller verify size too (indices)")
        return f'{{ dist = "integers", low = {int(x.min())}, high = {high} }}'
    lo, hi, mean, std = float(x.min()), float(x.max()), float(x.mean()), float(x.std()) if x.numel() > 1 else 0.0
    if lo >= 0.0 and hi <= 1.0:
        return '{ dist = "uniform", low = 0.0, high = 1.0 }'
    if abs(mean) < 0.05 and abs(std - 1.0) < 0.05 and not _flat(x):
        return '{ dist = "normal", mean = 0.0, std = 1.0 }'
    return _drawn_like(x, "from the values the task draws", least_std=1e-3)


def _flat(x) -> bool:
    """Values spread evenly over their range (a uniform draw): their deviation is the range's / sqrt(12)."""
    lo, hi, std = float(x.min()), float(x.max()), float(x.std()) if x.numel() > 1 else 0.0
    return x.numel() >= 16 and abs(std - (hi - lo) / 12 ** 0.5) < 0.1 * (hi - lo) / 12 ** 0.5


def _drawn_like(x, said: str, least_std: float = 0.0) -> str:
    """A float init drawing like the values ``x`` (fp64): uniform over their range where they are
    flat, else normal with their mean and deviation (at least ``least_std``); ``said`` the comment."""
    if _flat(x):
        return f'{{ dist = "uniform", low = {float(x.min()):.2g}, high = {float(x.max()):.2g} }}  # {said}'
    std = float(x.std()) if x.numel() > 1 else 0.0
    return f'{{ dist = "normal", mean = {float(x.mean()):.2g}, std = {max(std, least_std):.2g} }}  # {said}'


def draft_kernelbench(task_path: Path, source: str, kernel_path: Path, entry: str | None = None,
                      spec_path: Path | None = None, test: bool = True, test_seconds: float = 60.0) -> tuple[str, str]:
    """A task spec and its Python reference (the Model's forward) for a KernelBench-format task;
    the kernel's entry signature says which argument is which (pointers: inputs, then the Model's
    parameters and buffers, then outputs; integers by the name of a size). With ``test``, the
    drafted scalars and launch are run on the CPU emulation against the task, and where they do not
    verify, the alternatives until one does (:mod:`optiml.draft.trial`), for ``test_seconds`` at most."""
    torch = _import_torch()
    mod = _load_task(task_path)
    info = parse_source(source)
    kern = info.kernel(entry) if entry else (info.kernels[0] if info.kernels else None)
    if kern is None:
        raise SpecError(f"{kernel_path}: no __global__ function{' ' + entry if entry else ''} found to match the task's "
                        "arguments to.")
    sizes = task_sizes(task_path)         # literal integers only: a name computed from others is derived
    probes = None
    tries = [(_reduced(sizes, 128, odd), _reduced(sizes, 32, odd)) for odd in (True, False)]
    tries.append((_reduced_divisible(sizes, 128), _reduced_divisible(sizes, 32)))
    for family, (sa, sb) in enumerate(tries):
        try:
            probes = (sa, sb, _probe(torch, task_path, sa), _probe(torch, task_path, sb))
            break
        except Exception as e:      # the task may not allow these sizes: try even ones, then give up
            why = f"{type(e).__name__}: {e}"
    if probes is None:
        raise SpecError(f"{task_path}: the task does not run at reduced sizes ({why}), so optiml cannot tell "
                        "its dimensions apart; write the spec by hand (docs/spec.md).")
    sa, sb, (model, ins_a, params_a, outs_a), (_, ins_b, params_b, outs_b) = probes
    # a number among the inputs (a scalar forward multiplies by) is a scalar argument of the kernel
    given = [(i, v) for i, v in enumerate(ins_a) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not all(isinstance(t, torch.Tensor) for i, t in enumerate(ins_a) if i not in dict(given)):
        raise SpecError(f"{task_path}: get_inputs() returns something other than tensors and numbers; only those are supported.")
    ins_a = [t for t in ins_a if isinstance(t, torch.Tensor)]
    ins_b = [t for t in ins_b if isinstance(t, torch.Tensor)]

    def keyed(ins, params) -> dict:             # the task's tensors as the arrays below name them
        return {**{("input", i): t for i, t in enumerate(t for t in ins if isinstance(t, torch.Tensor))},
                **{("param", k): t for k, t in params.items()}}
    scaling = spread_scaling(lambda at: keyed(*_probe(torch, task_path, at, forward=False)[1:3]), sizes, sa, sb,
                             keyed(ins_a, params_a), keyed(ins_b, params_b))

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
    geo, kernel_shapes = _kernel_shapes(source, kern.name, info, pointers, ints)
    access = pointer_access(source, kern.name)
    matched = _matched_pointers(pointers, arrays, access)
    arrays, dims_of = _match_params(arrays, dims_of, matched, kernel_shapes)
    aligned = _aligned_sizes(matched, ints, kernel_shapes, arrays, dims_of)
    # a size only an integer argument names (a GroupNorm's num_groups) is a size of the spec too
    by_name = {n.lower(): n for n in sizes}
    named += [by_name[p.name.lower()] for p in ints
              if p.name.lower() in by_name and by_name[p.name.lower()] not in named]
    lookup = {n.lower(): n for n in sizes}
    out_dims = next((d for (role, *_), d in zip(arrays, dims_of) if role == "output"), dims_of[0] if dims_of else [])
    alternatives = _size_choices(named + [n for n in sizes if n not in named], out_dims)
    choices: dict[str, list] = {}           # {scalar: [(value, the comment), ...]}, the reading's first
    sure: set[str] = set()
    # the task's number inputs, in turn, to the kernel's scalars no size or Model attribute names
    # (floats for floats), each at its place among forward's arguments
    free = [p for p in ints if lookup.get(p.name.lower()) is None and _attribute(model, p.name) is None]
    number_args: list[tuple[int, str]] = []
    for i, v in given:
        want_float = isinstance(v, float)
        p = next((q for q in free if (dtype_of_c_type(q.base_type) or "float32").startswith("float") == want_float), None)
        if p is None:
            raise SpecError(f"{task_path}: get_inputs() passes the number {v!r} to forward (its input {i}), and the "
                            f"kernel has no {'float' if want_float else 'integer'} argument left to take it.")
        free.remove(p)
        choices[p.name] = [(v, f"the task's input {i} (a number get_inputs() passes to forward)")]
        sure.add(p.name)
        number_args.append((i, p.name))
    for p in ints:
        if p.name in choices:
            continue
        dtype = dtype_of_c_type(p.base_type) or "float32"
        size = lookup.get(p.name.lower())
        attr = _attribute(model, p.name)
        if dtype.startswith(("int", "uint")) and size is not None:
            choices[p.name] = [(size, "")]
            sure.add(p.name)
        elif attr is not None:
            choices[p.name] = [(attr[1], f"the Model's {attr[0]}")]
            sure.add(p.name)
        elif dtype.startswith(("int", "uint")):
            if p.name in aligned:
                expr, via = aligned[p.name]
                first = (expr, f"from how the kernel indexes {via}")
            elif _COUNT.fullmatch(p.name) and dims_of:
                first = (" * ".join(dims_of[0]), f"TODO: read as the element count of "
                         f"{matched[0].name if matched else 'the first array'}; check")
            else:
                first = (1, "TODO: no size or Model attribute has this name, and no matched array's indexing "
                         f"says which size it is (the task's: {', '.join(named) or 'none'})")
            rest = alternatives
            if _COUNT.fullmatch(p.name):         # a count: products first
                rest = [a for a in alternatives if "*" in a] + [a for a in alternatives if "*" not in a]
            choices[p.name] = [first] + [(a, "") for a in rest if a != first[0]]
        else:
            numbers = _numbers(model)
            choices[p.name] = [(1, "TODO: no size or Model attribute has this name")] + \
                [(v, f"the Model's {where}") for where, v in numbers if v != 1]
    launch = geo.launch()               # every pointer's shape was read already (_kernel_shapes)
    if launch and not [n for n in geo.placeholders if n not in [p.name for p in ints]]:
        drafted = _trial.Launch(tuple(launch[0]), tuple(launch[1]), "0", launch[2])
    else:
        first = named[0] if named else "1"
        drafted = _trial.Launch((f"cdiv({first}, 256)",), ("256",), "0", "")
    def larger(spread=(289, 593, 881, 1201)):
        """A third size set for the test: the smaller verify sizes with as many sizes as the largest
        array allows (2M elements) spread to ``spread``, smallest first as in the task (so a grid of
        cdiv(one size, block) where another was meant shows at any block up to 256, as it would at the
        task's sizes); None where the task does not run."""
        from ..expr import evaluate
        s = dict(sb)
        spread = iter(spread)
        target = next(spread)
        for n in sorted((n for n in sizes if sizes[n] >= 16), key=lambda n: sizes[n]):    # the task's order kept
            if family == 2 and any(m != n and sizes[m] > 1 and (sizes[n] % sizes[m] == 0 or sizes[m] % sizes[n] == 0)
                                   for m in sizes):
                continue                      # a size others divide (or that divides them) keeps its value
            t = {**s, n: target}
            try:
                if max(math.prod(int(evaluate(d, t)) for d in dims) for dims in dims_of) > 2 ** 21:
                    continue
            except Exception:       # noqa: BLE001 - a dimension this cannot evaluate: leave the size
                continue
            s, target = t, next(spread, None)
            if target is None:
                break
        if s == sb:
            return None
        try:
            _, ins, params, outs = _probe(torch, task_path, s)
        except Exception:           # noqa: BLE001 - the test then runs at the two verify sizes only
            return None
        got = {"input": ins, "param": params, "output": outs}
        return s, [got[role][where] for role, where, *_ in arrays]
    sets = [(sa, [a[2] for a in arrays]), (sb, [a[3] for a in arrays])]
    tested = _trial.Outcome(False) if not test else \
        _test_drafts(source, kern, info, arrays, pointers, sets, larger, choices, drafted, named, out_dims,
                          {p.name for p in ints} - sure, source_added=_added(source, matched, arrays), sizes=sizes,
                          seconds=test_seconds)
    for p in ints:                      # a size a scalar takes is a size of the spec too
        v = tested.scalars.get(p.name) if tested.verified else None
        if isinstance(v, str):
            named += [n for n in _IDENT.findall(v) if n in sizes and n not in named]
    ref_args: dict = {"INPUTS": [], "PARAMS": {}, "OUTPUTS": [], "DIMS": {}, "DTYPES": {}, "SIZES": {}}

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
    args_at = len(lines)
    for p in pointers:
        w("[[args]]")
        w(f"name = {_q(p.name)}")
        i = next((j for j, q in enumerate(matched) if q is p), len(arrays))
        if i >= len(arrays):
            w(f'dtype = "float32"  # TODO: the task has {len(arrays)} arrays; what is this pointer?')
            w('role = "input"  # TODO')
            w("shape = [1]  # TODO")
            w("")
            continue
        role, where, ta, tb = arrays[i]
        dtype = str(ta.dtype).removeprefix("torch.")
        want = dtype_of_c_type(p.base_type)
        note = f"  # TODO: the kernel's {p.base_type} is not the task's {dtype}" if want and want != dtype else ""
        w(f"dtype = {_q(dtype)}{note}")
        added = role == "output" and _adds_into(source, p.name)
        if added:                   # the kernel adds into it: zero before every launch, not poisoned
            w('role = "inout"  # the kernel adds into it with atomicAdd: it starts at 0 before each launch')
        else:
            w(f"role = {_q('output' if role == 'output' else 'input')}" +
              ("" if role != "param" else f"  # the Model's {where}"))
        w(f"shape = [{', '.join(map(_q, dims_of[i]))}]")
        if added:
            w('init = { dist = "constant", value = 0.0 }')
        elif role != "output":
            w(f"init = {_init_of(ta, tb, scaling.get((role, where)))}")
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
        left = [f"its output {where}" if role == "output" else f"the Model's {where}" if role == "param" else
                f"its input {where}" for role, where, *_ in arrays[len(pointers):]]
        written = [p.name for p, a in zip(pointers, arrays) if a[0] != "output" and (acc := access.get(p.name)) is not None
                   and not acc.unsure and acc.write]
        w(f"# TODO: the task has {len(arrays)} arrays (inputs, the Model's parameters, outputs) and the kernel "
          f"{len(pointers)} pointers; no pointer is matched to {', '.join(left)}" +
          (f". The kernel writes {' and '.join(written)}: if it computes the task's output there, in place, make it "
           'role = "inout" (filled with the input, compared with the output)'
           if written and any(a[0] == "output" for a in arrays[len(pointers):]) else ""))
    rename = {}
    for p in ints:
        dtype = dtype_of_c_type(p.base_type) or "float32"
        w("[[args]]")
        w(f"name = {_q(p.name)}")
        w(f"dtype = {_q(dtype)}")
        w('role = "scalar"')
        value, note = choices[p.name][0]
        if p.name in sure and isinstance(value, str) and value in sizes and not note:
            ref_args["SIZES"][p.name] = value         # the reference reads the size from the argument
        if tested.verified and p.name not in sure:
            value = tested.scalars[p.name]
            if isinstance(value, str) and value in sizes and value not in ref_args["SIZES"].values() and \
                    not any(value in d for d in dims_of):
                ref_args["SIZES"][p.name] = value     # a size no array's shape says (a GroupNorm's groups)
            note = dict(choices[p.name]).get(value) or ""
            note = (note.split("TODO")[0].rstrip("; ") if "TODO" in note else note)
            note = (note + "; " if note else "") + ("verified on the CPU emulation" if tested.drafted_ok else
                                                    f"chosen by testing on the CPU emulation ({tested.tried} drafts tried)")
        elif p.name not in sure and tested.tried:
            note = (note if "TODO" in note else "TODO: " + note) + f"; {tested.said}"
        text_value = _q(value) if isinstance(value, str) else repr(value)
        w(f"value = {text_value}" + (f"  # {note}" if note else ""))
        if isinstance(value, str) and dtype.startswith(("int", "uint")) and value != p.name:
            rename[p.name] = f"({value})" if "*" in value else value
        w("")
    _in_kernel_order(lines, args_at, [p.name for p in kern.params])
    for i, name in number_args:                 # forward's arguments in the task's order
        ref_args["INPUTS"].insert(i, name)
    sub = (lambda e: _IDENT.sub(lambda m: rename.get(m.group(0), m.group(0)), e))
    chosen = tested.launch if tested.verified else drafted
    w("[launch]")
    if tested.verified:
        how = (f"{chosen.note}; verified on the CPU emulation at the verify sizes" if tested.drafted_ok and chosen.note else
               "verified on the CPU emulation at the verify sizes" if tested.drafted_ok else
               f"chosen by testing on the CPU emulation at the verify sizes ({tested.tried} drafts tried)")
        w(f"grid = [{', '.join(_q(sub(g)) for g in chosen.grid)}]  # {how}")
        w(f"block = [{', '.join(_q(sub(b)) for b in chosen.block)}]")
        w(f"shared_mem = {_q(sub(chosen.shared)) if chosen.shared != '0' else 0}" +
          ("  # bytes of dynamic shared memory (extern __shared__)" if chosen.shared != "0" else ""))
    else:
        said = f" ({tested.said})" if tested.said else ""
        if chosen.note:
            w(f"grid = [{', '.join(_q(sub(g)) for g in chosen.grid)}]  # TODO: {chosen.note}; check{said}")
        else:
            w(f"grid = [{', '.join(_q(sub(g)) for g in chosen.grid)}]  # TODO: how the kernel maps work to blocks{said}")
        w(f"block = [{', '.join(_q(sub(b)) for b in chosen.block)}]  # TODO")
        w("shared_mem = 0  # TODO: bytes of dynamic shared memory, if the kernel uses extern __shared__")
    w("")
    ref_file = (kernel_path.stem + "_ref.py")
    w("[reference]")
    w(f"torch = {_q(ref_file + ':' + _REF_NAME)}  # the Model's forward on the GPU's tensors (written beside this spec)")
    w("")
    w("[baseline]  # what KernelBench compares with: the same forward in eager PyTorch (cuBLAS for a matmul, TF32 off)")
    w(f"torch = {_q(ref_file + ':' + _BASELINE)}")
    w('name = "PyTorch eager (the Model\'s forward)"')
    w(f"# or the same forward through torch.compile: torch = {_q(ref_file + ':' + _BASELINE + '_compiled')}, "
      'name = "torch.compile(Model)"')
    w("")
    terms = []
    for name, dims in ref_args["DIMS"].items():
        dt = _dt.DTYPES.get(ref_args["DTYPES"][name])
        size = dt.itemsize if dt is not None else 4          # a dtype optiml does not know: the spec says so
        terms.append(" * ".join([str(size), *dims]) if dims else str(size))
    flops = _gemm_flops(source, kern.name, matched, arrays, dims_of, ints, rename)
    if terms:
        w("[counts]  # TODO: the least traffic, each array once (speed of light; add flops for a compute-bound task)")
        if flops:
            w(f"flops = {_q(flops)}  # the kernel reads as a GEMM: 2 M N K")
        w(f"bytes = {_q(' + '.join(terms))}")
        w("")
    for line in _tolerances(arrays, dims_of, sizes, sa, sb, flops):
        w(line)
    text = "\n".join(lines) + "\n"
    return text, _reference_text(task_path, spec_path or kernel_path.with_suffix(".toml"), ref_args)


def _in_kernel_order(lines: list[str], start: int, order: list[str]) -> None:
    """The [[args]] blocks of ``lines`` from ``start`` on put in the kernel's parameter order (a scalar
    between pointers, ``(const float* A, float s, float* C, int n)``, where it stands); other lines
    there (a TODO about unmatched arrays) after them."""
    blocks, rest, cur = {}, [], None
    for line in lines[start:]:
        if line == "[[args]]":
            cur = []
        if cur is None:
            rest.append(line)
            continue
        cur.append(line)
        if line.startswith("name = "):
            blocks[tomllib.loads(line)["name"]] = cur
        if line == "":
            cur = None
    ordered = [line for name in order if name in blocks for line in blocks[name]]
    ordered += [line for name, b in blocks.items() if name not in order for line in b]
    lines[start:] = ordered + rest


def _adds_into(source: str, pointer: str) -> bool:
    """Whether the kernel adds into ``pointer`` with atomicAdd (so it starts at 0 before each launch)."""
    return bool(re.search(rf"\batomicAdd\s*\(\s*&?\s*\(?\s*{re.escape(pointer)}\b", source))


def _added(source, pointers, arrays) -> set[str]:
    return {p.name for p, a in zip(pointers, arrays) if a[0] == "output" and _adds_into(source, p.name)}


def _attribute(model, name: str):
    """(where, value) of a number the Model keeps under ``name``: its own attribute, else one of its
    submodules' (``nn.LeakyReLU(negative_slope)``, ``nn.LayerNorm``'s ``eps``); None where none has it."""
    v = getattr(model, name, None)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return name, v
    for where, m in model.named_modules():
        v = vars(m).get(name)
        if where and isinstance(v, (int, float)) and not isinstance(v, bool):
            return f"{where}.{name}", v
    return None


def _numbers(model) -> list[tuple[str, float]]:
    """Every float the Model or one of its submodules keeps as an attribute, as (where, value)."""
    out = []
    for where, m in model.named_modules():
        for k, v in vars(m).items():
            if isinstance(v, float) and not k.startswith("_"):
                out.append((f"{where}.{k}" if where else k, v))
    return out


def _size_choices(named: list[str], out_dims: list[str]) -> list[str]:
    return _trial.size_exprs(named, [d for d in out_dims if d in named])


def _threads_at(sizes: dict, constants: dict, source: str):
    """A launch's cost for choosing among launches that verify: its block's place among the blocks
    worth trying (the kernel's own constant first: a smaller block verifies at small sizes where the
    kernel strides by its constant), then its threads at the task's own sizes (the least that covers
    the work), or at the sizes ``at``, except where the kernel strides over the grid (``gridDim``):
    any grid verifies there, and the launch the reading drafted or the earlier is kept."""
    from ..expr import evaluate, evaluate_int
    if re.search(r"\bgridDim\b", source):
        return None
    env = {**{k: v for k, v in constants.items() if isinstance(v, (int, float))}, **sizes}

    def cost(scalars, launch, at=None):
        try:
            base = {**env, **at} if at else env
            e = {**base, **{n: evaluate(v, base) if isinstance(v, str) else v for n, v in scalars.items()}}
            return (launch.prefer,
                    math.prod(evaluate_int(g, e) for g in launch.grid) * math.prod(evaluate_int(b, e) for b in launch.block))
        except Exception:                       # noqa: BLE001 - a launch the task's sizes do not evaluate
            return (launch.prefer, math.inf)
    return cost


def _test_drafts(source, kern, info, arrays, pointers, sets, larger, choices, drafted, named, out_dims, unsure,
                 source_added, sizes=None, seconds: float = 60.0) -> "_trial.Outcome":
    """The drafted scalars and launch run on the CPU emulation at the two reduced sizes against the
    task's outputs there; where they do not verify, the other choices (``choices``' alternatives for
    the ``unsure`` scalars, launches the kernel's indexing allows) until one does. The Outcome's
    ``said`` tells what was tried; a kernel the emulation cannot run is not tested, and says why."""
    import numpy as np

    from .emulate import HostKernel, params_of, unsupported

    def untested(why):
        return _trial.Outcome(False, said=f"not tested: {why}")      # its scalars and launch: the draft's
    why = unsupported(source)
    params = params_of(kern)
    if why or params is None:
        return untested(why or "a parameter type the CPU emulation does not model")
    if len(pointers) != len(arrays):
        return untested("the kernel's pointers and the task's arrays differ in number")
    def case(s, tensors):
        before, after = {}, {}
        for p, ep, a, tensor in zip(pointers, [q for q in params if q.pointer], arrays, tensors):
            t = tensor.detach().cpu().numpy()
            if a[0] == "output":
                before[p.name] = np.zeros(t.shape, ep.dtype) if p.name in source_added else \
                    np.full(t.shape, np.nan if np.issubdtype(np.dtype(ep.dtype), np.floating) else -12345, ep.dtype)
                after[p.name] = t
            else:
                before[p.name] = t.astype(ep.dtype)
        return _trial.Case(dict(s), before, after)
    cases = [case(s, t) for s, t in sets]
    try:
        host = HostKernel(source, kern.name, params)
    except RuntimeError as e:
        return untested(str(e)[:300])
    try:
        test = _trial.Trial(host, cases, info.constants,
                            lambda *spread: case(*big) if (big := larger(*spread)) else None)
        pick = {n: [v for v, _ in c] if n in unsure else [c[0][0]] for n, c in choices.items()}
        int_args = [q.name for q in params if not q.pointer and not q.dtype.startswith("float")]
        tries = _trial.launches(source, info.constants, named, [d for d in out_dims if d in named], drafted,
                                int_args)
        out = test.search(pick, tries, cost=_threads_at(sizes, info.constants, source), seconds=seconds)
    finally:
        host.close()
    if out.verified:
        out.said = "verified on the CPU emulation" if out.drafted_ok else f"chosen by testing ({out.tried} tried)"
    else:
        out.said = (f"on the CPU emulation the draft fails ({out.why}), and so did the {out.tried - 1} other "
                    f"values and launches tried")
    return out


# the names people give a Model's parameters in a kernel, by the parameter's own name
_PARAM_NAMES = {
    "weight": {"w", "weight", "weights", "wt", "gamma", "g", "scale", "kernel", "mat", "matrix"},
    "bias": {"b", "bias", "biases", "beta", "shift", "offset"},
    "running_mean": {"mean", "mu", "running", "rm", "avg"},
    "running_var": {"var", "variance", "rv", "sigma", "std"},
}


def _kernel_shapes(source, entry, info, pointers, ints) -> tuple[_Geometry, dict[str, list[str]]]:
    """The kernel's geometry, every pointer's shape read through it (as its launch needs), and each
    pointer's shape in the kernel's own integer arguments where its indexing says it
    (``w[col * K + k]``: [the extent of col, K]); pointers it says nothing sure of are left out."""
    geo = _Geometry([p.name for p in ints], index_facts(source, entry), info.constants, detected(source, entry))
    out = {}
    for p in pointers:
        shape, sure = geo.shape(p.name)
        if sure:
            out[p.name] = shape
    return geo, out


def _name_tokens(name: str) -> set[str]:
    """The lower-case words of a C name (``gammaWeight2`` -> gamma, weight; ``w_qkv`` -> w, qkv)."""
    return {t for t in re.split(r"[_\d]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()) if t}


def _name_score(pointer: str, key: str) -> int:
    """How well a kernel's pointer name fits a Model parameter's key (``gemm.weight``)."""
    tokens = _name_tokens(pointer)
    parts = key.lower().split(".")
    score = 0
    if tokens & _PARAM_NAMES.get(parts[-1], {parts[-1]}) or parts[-1] in tokens:
        score += 3
    if tokens & set(parts[:-1]):
        score += 1
    prefix = " ".join(parts[:-1])
    if tokens & {"gamma", "beta", "g"} and any(m in prefix for m in ("norm", "gn", "ln", "bn")) or tokens & {"w", "weight", "b", "bias"} and \
            any(m in prefix for m in ("gemm", "linear", "fc", "matmul", "proj", "dense")):
        score += 1                   # a norm's gamma and beta, a linear layer's w and b
    return score


# the names people give a kernel's output pointer
_OUT_NAMES = {"out", "output", "outputs", "y", "res", "result", "dst", "dest", "c", "o", "ret"}


def _matched_pointers(pointers, arrays, access: dict) -> list:
    """The kernel's pointers the task's arrays (inputs, parameters, then outputs) go to, in order. Where
    there are as many pointers as arrays or fewer, the first ones. Where there are more (a scratch
    buffer the task has no array for), the arrays keep their order over the pointers, and of the ways
    to leave pointers out the one that fits best: an output never on a ``const`` pointer nor on one
    the kernel never writes, an input or parameter not on one it only writes; then an output on a
    pointer named like one (``out``, ``y``, ``dst``...) or only written, an input on one only read or
    ``const`` (what the kernel does with a pointer it passes to code outside the file is not known),
    a parameter on one named like it (``w`` for a weight); at a tie, the first pointers."""
    import itertools

    if len(pointers) <= len(arrays) or math.comb(len(pointers), len(arrays)) > 20000:
        return list(pointers[:len(arrays)])

    def fit(p, array) -> int:
        role, key = array[0], array[1]
        acc = access.get(p.name)
        known = acc is not None and not acc.unsure
        if role == "output":
            if p.is_const or (known and not acc.write):
                return -100
            return (2 if _name_tokens(p.name) & _OUT_NAMES else 0) + (1 if known and not acc.read else 0)
        score = (-5 if acc.write and not acc.read else 1 if acc.read and not acc.write else 0) if known else 0
        return score + (1 if p.is_const else 0) + (_name_score(p.name, key) if role == "param" else 0)

    best, best_score = None, None
    for slots in itertools.combinations(range(len(pointers)), len(arrays)):
        score = sum(fit(pointers[i], a) for i, a in zip(slots, arrays))
        if best_score is None or score > best_score:
            best, best_score = slots, score
    return [pointers[i] for i in best]


def _match_params(arrays, dims_of, pointers, kernel_shapes):
    """The task's arrays reordered so that the Model's parameters line up with the kernel's pointers
    (state_dict order is the default: a kernel's ``w, b`` against ``bias, gemm.weight``): the order
    whose pointer names fit the parameters' names best and whose ranks agree with how the kernel
    indexes them, where that is strictly better than the default; inputs and outputs keep theirs."""
    import itertools

    first = next((i for i, a in enumerate(arrays) if a[0] == "param"), None)
    if first is None:
        return arrays, dims_of
    last = max(i for i, a in enumerate(arrays) if a[0] == "param") + 1
    block = list(range(first, last))
    if len(block) < 2 or len(block) > 6 or last > len(pointers):
        return arrays, dims_of

    def score(order):
        total = 0
        for slot, j in zip(block, order):
            name, (_, key, ta, _) = pointers[slot].name, arrays[j]
            total += _name_score(name, key)
            if len(kernel_shapes.get(name, ())) >= 2:       # a 2-D reading (row * K + k) is evidence of rank
                total += 2 if len(kernel_shapes[name]) == ta.dim() else -3
        return total

    best, best_score = tuple(block), score(block)
    for order in itertools.permutations(block):
        if score(order) > best_score:
            best, best_score = order, score(order)
    if best == tuple(block):
        return arrays, dims_of
    arrays, dims_of = list(arrays), list(dims_of)
    arrays[first:last] = [arrays[j] for j in best]
    dims_of[first:last] = [dims_of[j] for j in best]
    return arrays, dims_of


def _aligned_sizes(pointers, ints, kernel_shapes, arrays, dims_of) -> dict[str, tuple[str, str]]:
    """{kernel integer: (the task's size expression, the pointer that says so)}: where the kernel
    indexes a pointer as [rows, cols] in its own arguments and the task's array there is
    [batch_size, dim], rows is batch_size and cols is dim (the first pointer that says wins)."""
    names = {p.name for p in ints}
    out: dict = {}
    for i, p in enumerate(pointers[:len(arrays)]):
        shape = kernel_shapes.get(p.name)
        if not shape or len(shape) != len(dims_of[i]):
            continue
        for k, d in zip(shape, dims_of[i]):
            if k in names and k not in out and not d.isdigit():
                out[k] = (d, p.name)
    return out


def _tolerances(arrays, dims_of, sizes: dict, sa: dict, sb: dict, flops: str | None) -> list[str]:
    """The ``[tolerance]`` lines for the task's outputs: each dtype's reduction length at the task's
    sizes (a GEMM's K, else the largest input's elements per output element) and the reference's RMS
    at the task's sizes, extrapolated from the two reduced runs (a power law in the sizes' product)."""
    import math

    from ..expr import evaluate
    from .tolerance import extrapolate_rms, tolerance_lines

    def numel(dims) -> float:
        try:
            return float(math.prod(float(evaluate(d, sizes)) for d in dims))
        except Exception:                         # noqa: BLE001 - a draft's estimate, never a failure
            return 0.0

    prod = (lambda s: float(math.prod(s.values())) if s else 1.0)
    biggest_in = max((numel(d) for (role, *_), d in zip(arrays, dims_of) if role != "output"), default=0.0)
    entries: dict = {}
    for (role, _, ta, tb), dims in zip(arrays, dims_of):
        if role != "output" or not ta.is_floating_point():
            continue
        dtype = str(ta.dtype).removeprefix("torch.")
        n_out = numel(dims)
        k = None
        if flops and n_out:
            try:
                k = float(evaluate(flops, sizes)) / (2 * n_out)
            except Exception:                     # noqa: BLE001
                k = None
        if k is None and n_out and biggest_in > n_out:
            k = biggest_in / n_out
        rms = [(prod(s), float(t.double().pow(2).mean().sqrt())) for s, t in ((sa, ta), (sb, tb)) if t.numel()]
        at = extrapolate_rms(rms, prod(sizes))
        said = (", extrapolated from " + " and ".join(f"{r:.3g}" for _, r in rms) + " at the verify sizes") if rms else ""
        prev = entries.get(dtype)
        if prev is None or (at or math.inf) < (prev[1] or math.inf):
            entries[dtype] = (max(k or 0.0, (prev or (0.0,))[0] or 0.0) or None, at, said)
    return tolerance_lines(entries)


def _gemm_flops(source, entry, pointers, arrays, dims_of, ints, rename) -> str | None:
    """``2 * M * N * K`` in the task's sizes where the kernel reads as a GEMM over the drafted arrays
    (so its speed of light is the compute bound, not the bytes'), else None; a draft never fails on it."""
    from types import SimpleNamespace as NS
    try:
        from ..edits.templates import recognize_gemm
        args = []
        for i, p in enumerate(pointers[:len(arrays)]):     # the reading takes arrays' roles from the code
            args.append(NS(name=p.name, role="array", shape=tuple(dims_of[i]),
                           dtype=str(arrays[i][2].dtype).removeprefix("torch."), value=None))
        for p in ints:
            args.append(NS(name=p.name, role="scalar", shape=(), dtype="int32", value=rename.get(p.name, p.name)))
        g, _ = recognize_gemm(source, entry, NS(args=args))
        if g is None:
            return None
        k_size = next((a.value for a in args if a.role == "scalar" and a.name == g.k), None)
        return f"2 * {g.m_size} * {g.n_size} * {k_size}" if k_size else None
    except Exception:                               # noqa: BLE001 - a guess for a draft, never a failure
        return None


def _reference_text(task_path: Path, spec_path: Path, args: dict) -> str:
    import os

    rel = os.path.relpath(task_path.resolve(), spec_path.resolve().parent)
    consts = "\n".join(f"{k} = {v!r}" for k, v in args.items())
    return f'''"""The reference for optiml: the forward of Model in {task_path.name} (a KernelBench-format task),
written by `optiml init --kernelbench`. The spec names it as `torch = ...`: optiml calls it with the
case's arrays as torch tensors on the GPU (aliasing its own buffers: no copy to the host) by
keyword; it sets the task's sizes from their shapes, builds the Model from get_init_inputs()
(seeded), loads its parameters from the tensors, and returns forward's outputs as tensors."""
from pathlib import Path

import torch

from optiml.draft.kbtask import load_task

TASK = Path(__file__).parent / {rel!r}
{consts}


def _sized(tensors):
    """The task module executed at the sizes the tensors' shapes say (what it derives from them
    recomputed), and the tensors' device."""
    sizes = {{size: int(tensors[arg]) for arg, size in SIZES.items() if arg in tensors}}
    for name, dims in DIMS.items():
        if name in tensors:
            for size, n in zip(dims, tensors[name].shape):
                if size.isidentifier():
                    sizes[size] = int(n)
    arrays = [t for t in tensors.values() if isinstance(t, torch.Tensor)]
    return load_task(TASK, sizes), arrays[0].device


def _tensor(tensors, name, device):
    if name not in DTYPES:          # a number the task passes to forward: the kernel's scalar argument
        return tensors[name]
    return tensors[name].to(device, getattr(torch, DTYPES[name]))


def {_REF_NAME}(**tensors):
    task, device = _sized(tensors)
    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).to(device)
    with torch.no_grad():
        state = model.state_dict()
        for name, key in PARAMS.items():
            state[key].copy_(_tensor(tensors, name, device).reshape(state[key].shape))
        out = model(*[_tensor(tensors, name, device) for name in INPUTS])
    return tuple(out) if isinstance(out, (tuple, list)) else out


# The baseline: the same forward as a user of PyTorch would run it. The Model is built once per
# shapes, dtypes, devices and numbers (the task module executed then, never in a timed call); at each
# call its parameters ARE the case's tensors (torch.func.functional_call, no copy), so a timed call is
# the forward alone.
_models = {{}}


def _prepared(tensors):
    key = tuple(sorted((n, tuple(t.shape), str(t.dtype), str(t.device)) if isinstance(t, torch.Tensor) else (n, repr(t))
                       for n, t in tensors.items()))
    if key not in _models:
        task, device = _sized(tensors)
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs()).to(device)
        _models[key] = (model, {{k: tuple(v.shape) for k, v in model.state_dict().items()}}, {{}}, device)
    model, shapes, compiled, device = _models[key]
    params = {{key: _tensor(tensors, name, device).reshape(shapes[key]) for name, key in PARAMS.items()}}
    return model, params, tuple(_tensor(tensors, name, device) for name in INPUTS), compiled


def _outputs(out):
    return tuple(out) if isinstance(out, (tuple, list)) else out


def {_BASELINE}(**tensors):
    model, params, inputs, _ = _prepared(tensors)
    with torch.no_grad():
        return _outputs(torch.func.functional_call(model, params, inputs))


def {_BASELINE}_compiled(**tensors):
    model, params, inputs, compiled = _prepared(tensors)
    if "fn" not in compiled:        # dynamic=False: optiml verifies at other sizes first (docs/spec.md)
        compiled["fn"] = torch.compile(lambda p, i: torch.func.functional_call(model, p, i), dynamic=False)
    with torch.no_grad():
        return _outputs(compiled["fn"](params, inputs))
'''
