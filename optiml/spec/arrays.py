"""A task spec from Kernel Tuner-style arguments (the source, the entry, the arrays and scalars in
the kernel's argument order, which are outputs, the launch): a TOML-shaped dict, validated by
:func:`parse_spec` like a ``kernel.toml``, and written as one (:func:`to_toml`).

The arrays give each argument's dtype and shape; their dimensions become named sizes (``sizes=``
names them, the rest are ``N0``, ``N1``...). Their values are not the inputs: each verification
draws fresh ones, within the range of the given values (the dtype's default draws where they hold
one value, as np.zeros does). Without ``verify_sizes`` the kernel is
verified at the given shapes only (the file format's two verification size sets are that shape
twice, each with fresh inputs): a kernel wrong only at other sizes passes.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .. import dtypes as _dt
from ..errors import SpecError
from ..expr import show
from ..source import parse_source, dtype_of_c_type
from .checks import check_against_source
from .load import parse_spec
from .model import TaskSpec

LABEL = "the task from args="     # how messages name a spec built from arguments
DRAWN_MAX = 3.0e38          # the widest uniform range parse_spec accepts for float32 (float64 draws: wider)


def _described(value, where: str) -> tuple[str, Any, Any]:
    """("array", dtype, host values as a NumPy array) or ("scalar", dtype or None, value)."""
    module = type(value).__module__.split(".")[0]
    if module == "torch" and hasattr(value, "dtype") and hasattr(value, "shape"):
        dtype = str(value.dtype).removeprefix("torch.")
        if len(value.shape) == 0:
            return "scalar", dtype, value.item()
        _known(dtype, where)
        host = value.detach().cpu()
        return "array", dtype, (host.float() if dtype == "bfloat16" else host).numpy()
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return "scalar", np.asarray(value).dtype.name, np.asarray(value).item()
    if isinstance(value, (bool, int, float, str)):
        return "scalar", None, value
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.ndim == 0:
            return "scalar", arr.dtype.name, arr.item()
        return "array", arr.dtype.name, arr
    raise SpecError(f"{where} is a {type(value).__name__}; give a NumPy array, a torch tensor, a number or an "
                    f"expression string over the sizes.")


def _known(dtype: str, where: str) -> None:
    if dtype not in _dt.DTYPES:
        raise SpecError(f"{where} has dtype {dtype}, which is not supported (use one of {', '.join(_dt.DTYPES)}).")


def _init(values: np.ndarray, dtype: str) -> dict | None:
    """Draws within the range of the given values (None: the spec's default for the dtype, also
    for an array of one value, such as np.zeros: constant inputs would hide wrong kernels)."""
    kind = _dt.get(dtype).kind
    if kind == "bool" or values.size == 0:
        return None
    if kind == "int":
        low, high = int(values.min()), int(values.max()) + 1
        if high - low < 2:          # one value (np.zeros): no range to go by, and constant inputs hide bugs
            return None
        return {"dist": "integers", "low": max(low, -2**63), "high": min(high, 2**63)}
    finite = values[np.isfinite(values)].astype(np.float64)
    if finite.size == 0:
        return None
    low, high = float(finite.min()), float(finite.max())
    if low == high or high - low > (DRAWN_MAX if dtype != "float64" else 1e300):
        return None
    return {"dist": "uniform", "low": low, "high": high}


def spec_data_from_arrays(source: str, args: Sequence, *, entry: str | None = None,
                          outputs: Sequence[str | int] = (), inouts: Sequence[str | int] = (),
                          grid=None, block=None, shared_mem: int | str = 0,
                          sizes: Mapping[str, int] | None = None,
                          verify_sizes: Sequence[Mapping[str, int]] | None = None,
                          atol: float | None = None, rtol: float | None = None,
                          reference: str | None = None, nvcc_flags: Sequence[str] = ("-O3",),
                          flops: int | float | str | None = None, bytes: int | float | str | None = None,
                          trials: int | None = None, seed: int | None = None) -> dict:
    """The TOML-shaped dict of the task (see the module's docstring); ``reference``: None for the
    seed, or ``"path/to/file.py:function"`` (an absolute path). Raises SpecError, one sentence."""
    info = parse_source(source)
    if entry is None:
        if len(info.kernels) != 1:
            found = ", ".join(k.name for k in info.kernels) or "none"
            raise SpecError(f"the source has {len(info.kernels)} __global__ functions ({found}); give entry=.")
        entry = info.kernels[0].name
    kern = info.kernel(entry)
    if kern is None:
        found = ", ".join(k.name for k in info.kernels) or "none"
        raise SpecError(f"entry={entry!r} is not a __global__ function in the source (found: {found}).")
    params = kern.params
    args = list(args)
    if len(args) != len(params):
        raise SpecError(f"args= has {len(args)} values but {entry} takes {len(params)} parameters "
                        f"({', '.join(p.name for p in params)}).")
    names = [p.name for p in params]

    def index(which: str, item) -> int:
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < len(names):
            return item
        if isinstance(item, str) and item in names:
            return names.index(item)
        raise SpecError(f"{which}= names {show(item)}, which is not a parameter of {entry} "
                        f"({', '.join(names)}; or give its position, 0 to {len(names) - 1}).")

    out_ix = {index("outputs", o) for o in outputs}
    inout_ix = {index("inouts", o) for o in inouts}
    if not out_ix and not inout_ix:
        writable = [p.name for p in params if p.is_pointer and not p.is_const] or names
        raise SpecError(f"outputs= is missing: name the arrays {entry} writes (e.g. outputs=[{show(writable[-1])}]); "
                        f"without one there is nothing to verify.")
    both = out_ix & inout_ix
    if both:
        raise SpecError(f"{names[min(both)]} is in both outputs= and inouts=; an array is one or the other.")

    described = [_described(v, f"args[{i}] ({names[i]})") for i, v in enumerate(args)]
    for i, (what, dtype, _) in enumerate(described):
        if what == "scalar" and i in out_ix | inout_ix:
            raise SpecError(f"{names[i]} is in {'outputs' if i in out_ix else 'inouts'}= but args[{i}] is a scalar; "
                            f"only arrays are written by a kernel.")
        if dtype is not None:
            _known(dtype, f"args[{i}] ({names[i]})")

    # the sizes: the given ones name the dimensions equal to them, the others get N0, N1, ...
    named = dict(sizes or {})
    by_value: dict[int, str] = {}
    for name, v in named.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise SpecError(f"sizes[{show(name)}] must be a whole number, not {show(v)}.")
        by_value.setdefault(int(v), name)
    auto = 0
    shapes = []
    for what, _, values in described:
        if what != "array":
            shapes.append(None)
            continue
        dims = []
        for d in values.shape:
            if d not in by_value:
                while f"N{auto}" in named:
                    auto += 1
                by_value[d] = f"N{auto}"
                named[f"N{auto}"] = d
            dims.append(by_value[d])
        shapes.append(dims)
    timing = {k: int(v) for k, v in named.items()}

    table_args = []
    for i, ((what, dtype, value), p) in enumerate(zip(described, params)):
        a: dict[str, Any] = {"name": p.name}
        if what == "array":
            role = "output" if i in out_ix else "inout" if i in inout_ix else "input"
            a |= {"dtype": dtype, "role": role, "shape": shapes[i]}
            init = _init(value, dtype) if role != "output" else None
            if init is not None:
                a["init"] = init
        else:
            c_dtype = dtype_of_c_type(p.base_type)
            dtype = dtype or c_dtype or {bool: "bool", int: "int32", float: "float32"}.get(type(value))
            if dtype is None:
                raise SpecError(f"args[{i}] ({p.name}) is a string but {entry}'s parameter is {p.type_text}, "
                                f"whose dtype optiml does not know; give a NumPy scalar such as np.int32(...).")
            if isinstance(value, int) and not isinstance(value, bool) and value in by_value and \
                    _dt.get(dtype).kind == "int":
                value = by_value[value]         # follows the size in every size set
            elif isinstance(value, bool):
                value = int(value)
            a |= {"dtype": dtype, "role": "scalar", "value": value}
        table_args.append(a)

    def dims(v, what):
        if v is None:
            raise SpecError(f"{what}= is missing (an integer, an expression over the sizes such as "
                            f"\"cdiv(N, 256)\", or a list of up to three).")
        if isinstance(v, (list, tuple)):
            return [int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) else d for d in v]
        return [int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v]

    data: dict[str, Any] = {
        "kernel": {"entry": entry, "nvcc_flags": list(nvcc_flags)},
        "sizes": {"timing": timing,
                  "verify": [dict(v) for v in verify_sizes] if verify_sizes is not None else [dict(timing), dict(timing)]},
        "args": table_args,
        "launch": {"grid": dims(grid, "grid"), "block": dims(block, "block"), "shared_mem": shared_mem},
    }
    if reference is not None:
        data["reference"] = {"python": reference}
    if atol is not None or rtol is not None:
        out_dtypes = [a["dtype"] for a in table_args if a["role"] in ("output", "inout")]
        tol = {k: float(v) for k, v in (("atol", atol), ("rtol", rtol)) if v is not None}
        data["tolerance"] = {d: dict(tol) for d in dict.fromkeys(out_dtypes)}
    counts = {k: v for k, v in (("flops", flops), ("bytes", bytes)) if v is not None}
    if counts:
        data["counts"] = counts
    verify = {k: v for k, v in (("trials", trials), ("seed", seed)) if v is not None}
    if verify:
        data["verify"] = verify
    return data


def spec_from_data(data: Mapping, source: str, path: Path | str = LABEL) -> TaskSpec:
    """``data`` through :func:`parse_spec`, as a ``kernel.toml`` goes, then checked against the
    source; ``path``: what its messages call it."""
    spec = parse_spec(dict(data), Path(path))
    check_against_source(spec, spec.source_info(source), "the source")
    return spec


def spec_from_arrays(source: str, args: Sequence, *, path: Path | str = LABEL, **kw) -> TaskSpec:
    """The validated TaskSpec of :func:`spec_data_from_arrays`."""
    return spec_from_data(spec_data_from_arrays(source, args, **kw), source, path)


# ----------------------------------------------------------------------------------- writing

def to_toml(data: Mapping) -> str:
    """``data`` (a spec dict: tables of numbers, strings, booleans, lists and inline tables, and the
    ``args`` array of tables) as TOML that ``tomllib`` reads back to the same dict."""
    lines: list[str] = []
    for key, value in data.items():
        if key == "args":
            continue
        lines += [f"[{key}]", *(f"{_key(k)} = {_value(v)}" for k, v in value.items()), ""]
        if key == "kernel":       # [[args]] right after the kernel, as the examples have them
            for a in data.get("args", ()):
                lines += ["[[args]]", *(f"{_key(k)} = {_value(v)}" for k, v in a.items()), ""]
    return "\n".join(lines)


def _key(k: str) -> str:
    return k if k.replace("_", "a").isalnum() and k.isascii() else json.dumps(k)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            raise SpecError(f"{v} is not a finite number; a spec holds finite numbers only.")
        return repr(float(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise SpecError(f"{show(v)} ({type(v).__name__}) cannot be written into a spec.")
