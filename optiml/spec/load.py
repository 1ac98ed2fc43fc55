"""Reading ``kernel.toml``: every field checked, each problem one sentence naming the file and field."""
from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

from loguru import logger

from .. import dtypes as _dt
from ..errors import ExprError, SpecError, UserError
from ..expr import show
from .checks import check_against_source, check_expressions
from .space import check_space, parse_tune
from .model import (DISTS, MAX_SIZE, MIN_TRIALS, PYTHON_KINDS, ROLES, ArgSpec, Baseline, Init, LaunchSpec, Reference, TaskSpec, TimingConfig,
                    Tolerance, VerifyConfig, _fmt, _name)


def find_spec(kernel_path: Path, spec_path: Path | None = None) -> Path:
    """``--spec`` if given, else ``kernel.toml`` beside ``kernel.cu``."""
    if spec_path is not None:
        if not spec_path.is_file():
            raise SpecError(f"{spec_path}: spec file not found.")
        return spec_path
    candidate = kernel_path.with_suffix(".toml")
    if not candidate.is_file():
        raise SpecError(
            f"{kernel_path}: no task spec found (looked for {candidate.name}); "
            f"write one with `optiml init {kernel_path}` or pass --spec PATH."
        )
    return candidate


class _Reader:
    """Typed access to a TOML table with field paths in error messages."""

    def __init__(self, fname: str, data: dict, prefix: str = ""):
        self.fname, self.data, self.prefix = fname, data, prefix

    def where(self, key: str) -> str:
        return f"{self.fname}: {self.prefix}{key}"

    def err(self, key: str, msg: str) -> SpecError:
        return SpecError(f"{self.where(key)} {msg}")

    def check_keys(self, allowed: set[str]) -> None:
        unknown = sorted(set(self.data) - allowed)
        if unknown:
            what = self.prefix.rstrip(".") or "the top level"
            raise SpecError(f"{self.fname}: unknown key {show(unknown[0])} in {what} (allowed: {', '.join(sorted(allowed))}).")

    def get(self, key, types, default=..., what="") -> Any:
        if key not in self.data:
            if default is ...:
                raise self.err(key, f"is missing{what}.")
            return default
        v = self.data[key]
        if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise self.err(key, f"must be {_type_names(types)}, not a boolean.")
        if not isinstance(v, types):
            raise self.err(key, f"must be {_type_names(types)}, not {type(v).__name__} ({show(v)}).")
        return v

    def table(self, key, required: bool = False) -> "_Reader":
        v = self.get(key, dict, default=... if required else {})
        return _Reader(self.fname, v, f"{self.prefix}{key}.")

    def number(self, key, default=...) -> int | float:
        """An integer or a finite float (not NaN or infinity), as written."""
        v = self.get(key, (int, float), default=default)
        if isinstance(v, float) and not math.isfinite(v):
            raise self.err(key, f"must be a finite number, not {v}.")
        if isinstance(v, int) and abs(v) > 2**1000:
            raise self.err(key, f"is too large ({show(v)}).")
        return v


def _type_names(types) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table", bool: "true or false"}
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(names.get(t, t.__name__) for t in types)


def load_spec(spec_path: Path, kernel_path: Path | None = None, kernel_source: str | None = None) -> TaskSpec:
    """Read and validate a spec. With the kernel's source, also check it against the kernel."""
    spec_path = Path(spec_path)
    try:
        text = spec_path.read_text()
    except FileNotFoundError:
        raise SpecError(f"{spec_path}: spec file not found.") from None
    except UnicodeDecodeError:
        raise SpecError(f"{spec_path}: not a text file.") from None
    except (OSError, ValueError) as e:      # a directory, no permission, a NUL in the path
        raise SpecError(f"{spec_path}: cannot read the spec ({getattr(e, 'strerror', None) or e}).") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{spec_path}: not valid TOML ({' '.join(str(e).split())}).") from None
    except (RecursionError, MemoryError):
        raise SpecError(f"{spec_path}: cannot read the spec (arrays or tables nested too deeply).") from None
    except (ValueError, OverflowError):     # tomllib lets Python's own through: an integer of over 4300 digits
        raise SpecError(f"{spec_path}: cannot read the spec (a number in it is too long).") from None
    spec = parse_spec(data, spec_path)
    if kernel_source is None and kernel_path is not None:
        try:
            kernel_source = Path(kernel_path).read_text()
        except FileNotFoundError:
            raise SpecError(f"{kernel_path}: kernel file not found.") from None
        except UnicodeDecodeError:
            raise SpecError(f"{kernel_path}: not a text file.") from None
        except (OSError, ValueError) as e:
            raise SpecError(f"{kernel_path}: cannot read the kernel ({getattr(e, 'strerror', None) or e}).") from None
    if kernel_source is not None:
        if spec.tune:
            check_space(spec.tune, kernel_source, spec.entry, spec_path, kernel_path or "the kernel")
        check_against_source(spec, spec.source_info(kernel_source), kernel_path or "kernel")
    warn_todos(spec_path, text)         # a spec that loads, but still holds guesses
    return spec


_TODO = re.compile(r"#\s*TODO\b")
_warned_todos: set[str] = set()


def warn_todos(spec_path: Path, text: str) -> None:
    """One warning (once a process for each spec) while the spec still has ``# TODO`` lines, as the
    draft `optiml init` writes does: those values are guesses the user must check."""
    lines = [i for i, line in enumerate(text.splitlines(), start=1) if _TODO.search(line)]
    key = str(Path(spec_path).resolve())
    if lines and key not in _warned_todos:
        _warned_todos.add(key)
        logger.warning("{}: {} line(s) still marked TODO (first: line {}); check those guessed values and remove "
                       "the TODO marks.", spec_path, len(lines), lines[0])


def parse_spec(data: dict, spec_path: Path) -> TaskSpec:
    r = _Reader(str(spec_path), data)
    r.check_keys({"kernel", "sizes", "args", "launch", "reference", "tolerance", "counts", "verify", "timing", "tune",
                  "baseline"})

    k = r.table("kernel", required=True)
    k.check_keys({"entry", "nvcc_flags"})
    entry = k.get("entry", str, what=" (the name of the __global__ function to run)")
    flags = k.get("nvcc_flags", list, default=["-O3"])
    if not all(isinstance(f, str) for f in flags):
        raise k.err("nvcc_flags", "must be a list of strings.")

    s = r.table("sizes", required=True)
    s.check_keys({"timing", "verify"})
    timing_sizes = _sizes(s, "timing", s.get("timing", dict, what=" (the sizes used for timing)"))
    verify_list = s.get("verify", list, what=" (a list of at least two size sets used only for verification)")
    verify_sizes = tuple(_sizes(s, f"verify[{i}]", v) for i, v in enumerate(verify_list))
    if len(verify_sizes) < 2:
        raise s.err("verify", f"needs at least two size sets (found {len(verify_sizes)}); include sizes that are not multiples of the block size.")
    for i, vs in enumerate(verify_sizes):
        if set(vs) != set(timing_sizes):
            raise s.err(f"verify[{i}]", f"must name the same sizes as sizes.timing ({', '.join(sorted(timing_sizes))}).")

    raw_args = r.get("args", list, what=" (one [[args]] table per kernel parameter)")
    if not raw_args:
        raise r.err("args", "must list at least one argument.")
    args = tuple(_arg(str(spec_path), i, a, set(timing_sizes)) for i, a in enumerate(raw_args))
    names = [a.name for a in args]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise SpecError(f"{spec_path}: args: the name {show(dup)} is used twice.")
    if not any(a.role in ("output", "inout") for a in args):
        raise SpecError(f"{spec_path}: args: no argument has role 'output' or 'inout', so there is nothing to verify.")

    lr = r.table("launch", required=True)
    lr.check_keys({"grid", "block", "shared_mem"})
    launch = LaunchSpec(grid=_dims(lr, "grid"), block=_dims(lr, "block"),
                        shared_mem=lr.get("shared_mem", (int, str), default=0))

    rr = r.table("reference")
    rr.check_keys({"kind", *PYTHON_KINDS})
    reference = Reference()
    given = [k for k in PYTHON_KINDS if k in rr.data]
    if len(given) > 1:
        raise rr.err(given[1], f"and {given[0]} both name a reference; keep one ({given[0]} = 'file.py:function' or "
                               f"{given[1]} = ...).")
    if given:
        reference = Reference(given[0], *_python_target(rr, given[0], spec_path))
    kind = rr.get("kind", str, default=reference.kind)
    if kind not in ("seed", *PYTHON_KINDS):
        raise rr.err("kind", f"must be 'seed', 'python', 'torch' or 'cupy', not {show(kind)}.")
    if kind != "seed" and reference.kind != kind:
        raise rr.err(kind, f"is missing (kind = '{kind}' needs {kind} = 'file.py:function').")
    if kind == "seed":
        reference = Reference()

    tr = r.table("tolerance")
    tolerances = {}
    for dname, val in tr.data.items():
        if dname not in _dt.DTYPES:
            raise tr.err(_name(dname), f"is not a known dtype ({', '.join(_dt.DTYPES)}).")
        t = tr.table(dname)
        t.check_keys({"atol", "rtol", "rel_rms"})
        default = _dt.DEFAULT_TOLERANCES.get(dname, (0.0, 0.0))
        atol = float(t.number("atol", default=default[0]))
        rtol = float(t.number("rtol", default=default[1]))
        if atol < 0 or rtol < 0:
            raise tr.err(dname, "tolerances must be finite and not negative.")
        rel_rms = _dt.DEFAULT_REL_RMS.get(dname)
        if "rel_rms" in t.data:
            if _dt.get(dname).kind != "float":
                raise tr.err(dname, "rel_rms applies to floating-point outputs only (integers are compared with atol).")
            rel_rms = float(t.number("rel_rms"))
            if not 0 < rel_rms < 1:
                raise tr.err(dname, f"rel_rms = {rel_rms:g} must be above 0 and below 1 (1 passes an output of zeros).")
        tolerances[dname] = Tolerance(atol, rtol, rel_rms)

    cr = r.table("counts")
    cr.check_keys({"flops", "bytes"})
    flops = cr.get("flops", (int, float, str), default=None)
    nbytes = cr.get("bytes", (int, float, str), default=None)

    vr = r.table("verify")
    vr.check_keys({"trials", "timing_size", "seed"})
    verify = VerifyConfig(trials=vr.get("trials", int, default=3),
                          timing_size=vr.get("timing_size", bool, default=True),
                          seed=vr.get("seed", int, default=None))
    if verify.trials == 1:
        raise vr.err("trials", f"must be at least {MIN_TRIALS}: with one set of inputs per verification size, a kernel "
                               "that caches its output per size (not per input) passes verification, since only a "
                               "second set of inputs at the same size shows the stale output.")
    if not MIN_TRIALS <= verify.trials <= 100:
        raise vr.err("trials", f"must be between {MIN_TRIALS} and 100, not {show(verify.trials)}.")

    tm = r.table("timing")
    tm.check_keys({"warmup_ms", "min_reps", "max_reps", "target_ms", "flush_l2", "precision"})
    timing = TimingConfig(
        warmup_ms=float(tm.number("warmup_ms", default=25.0)),
        min_reps=tm.get("min_reps", int, default=10),
        max_reps=tm.get("max_reps", int, default=300),
        target_ms=float(tm.number("target_ms", default=400.0)),
        flush_l2=tm.get("flush_l2", bool, default=True),
        precision=float(tm.number("precision", default=0.005)),
    )
    for key in ("warmup_ms", "target_ms"):
        if getattr(timing, key) < 0:
            raise tm.err(key, "must be zero or positive.")
    if not 0 <= timing.precision < 1:
        raise tm.err("precision", f"must be at least 0 and below 1 (0.005 is +-0.5 %), not {show(timing.precision)}.")
    if not 1 <= timing.min_reps <= timing.max_reps:
        raise tm.err("min_reps", "must be at least 1 and not above timing.max_reps.")

    tune = parse_tune(data["tune"], str(spec_path)) if "tune" in data else None
    clash = sorted(set(tune.names) & set(timing_sizes)) if tune else []
    if clash:
        raise SpecError(f"{spec_path}: tune.{clash[0]} is also a size; a tunable and a size need different names.")
    baseline = _baseline(r.table("baseline"), spec_path) if "baseline" in data else None

    spec = TaskSpec(path=spec_path, entry=entry, args=args, timing_sizes=timing_sizes,
                    verify_sizes=verify_sizes, launch=launch, reference=reference,
                    tolerances=tolerances, nvcc_flags=tuple(flags), flops=flops, bytes=nbytes,
                    verify=verify, timing=timing, tune=tune, baseline=baseline, raw=data)
    try:
        check_expressions(spec)
    except ExprError as e:          # the loader raises SpecError alone, as check_against_source does
        raise SpecError(str(e)) from None
    return spec


def _python_target(r: _Reader, key: str, spec_path: Path) -> tuple[Path, str]:
    """``key = "file.py:function"``: the file (beside the spec) and the function's name."""
    target = r.get(key, str)
    if ":" not in target:
        raise r.err(key, f"must be 'file.py:function', not {show(target)}.")
    file, fn = target.rsplit(":", 1)
    try:
        path = (spec_path.parent / file).resolve()
        found = path.is_file()
    except (OSError, ValueError):       # a NUL character, a name too long
        found = False
    if not found:
        raise r.err(key, f"names {show(file)}, which does not exist beside the spec.")
    return path, fn


def _baseline(br: _Reader, spec_path: Path) -> Baseline:
    """``[baseline]``: torch = "file.py:function" (or cupy = ...; python = ... is torch's other name), and
    an optional name."""
    br.check_keys({"python", "torch", "cupy", "name"})
    given = [k for k in ("torch", "cupy", "python") if k in br.data]
    if not given:
        raise br.err("torch", "is missing ([baseline] needs torch = 'file.py:function', a function computing the "
                              "outputs from the inputs as GPU tensors, e.g. with torch.matmul; or cupy = ...).")
    if len(given) > 1:
        raise br.err(given[1], f"and {given[0]} both name a baseline; keep one.")
    key = given[0]
    path, fn = _python_target(br, key, spec_path)
    if not fn.isidentifier():
        raise br.err(key, f"must end in a Python function name after the colon, not {show(fn)}.")
    if path.suffix != ".py":
        raise br.err(key, f"names {show(path.name)}, which is not a .py file.")
    return Baseline(path, fn, br.get("name", str, default=""), framework="cupy" if key == "cupy" else "torch")


def _sizes(r: _Reader, key: str, table) -> dict[str, int]:
    if not isinstance(table, dict) or not table:
        raise r.err(key, "must be a non-empty table of named sizes, e.g. {N = 4096}.")
    out = {}
    for name, v in table.items():
        field = f"{key}.{_name(name)}"
        if not name.isidentifier():
            raise r.err(field, "is not a valid size name (letters, digits and _).")
        if isinstance(v, bool) or not isinstance(v, int):
            raise r.err(field, f"must be a whole number, not {show(v)}.")
        if v <= 0:
            raise r.err(field, f"must be positive, not {show(v)}.")
        if v > MAX_SIZE:
            raise r.err(field, f"must be at most 2**63 - 1, not {show(v)}.")
        out[name] = v
    return out


def _dims(r: _Reader, key: str) -> tuple:
    v = r.get(key, (list, int, str))
    v = v if isinstance(v, list) else [v]
    if not 1 <= len(v) <= 3:
        raise r.err(key, f"needs 1 to 3 dimensions, not {len(v)}.")
    for i, d in enumerate(v):
        if isinstance(d, bool) or not isinstance(d, (int, str)):
            raise r.err(f"{key}[{i}]", f"must be an integer or an expression string, not {show(d)}.")
    return tuple(v)


def _arg(fname: str, i: int, data, size_names: set[str]) -> ArgSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{fname}: args[{i}] must be a table ([[args]]).")
    a = _Reader(fname, data, f"args[{i}].")
    a.check_keys({"name", "dtype", "role", "shape", "init", "value"})
    name = a.get("name", str)
    a.prefix = f"args.{_name(name)}."
    dtype = a.get("dtype", str)
    if dtype not in _dt.DTYPES:
        raise a.err("dtype", f"{show(dtype)} is not supported (use one of {', '.join(_dt.DTYPES)}).")
    role = a.get("role", str, what=f" ({', '.join(ROLES)})")
    if role not in ROLES:
        raise a.err("role", f"must be one of {', '.join(ROLES)}, not {show(role)}.")
    if role == "scalar":
        if "shape" in data or "init" in data:
            raise a.err("shape", "is not allowed on a scalar; give value = <number or expression>.")
        value = a.get("value", (int, float, str), what=" (a scalar needs value = <number or expression over the sizes>)")
        return ArgSpec(name, dtype, role, (), None, value)
    if "value" in data:
        raise a.err("value", f"is only for scalars; an {role} array takes shape and init.")
    shape = a.get("shape", (list, int, str), what=" (a list of expressions over the sizes, e.g. [\"M\", \"K\"])")
    shape = tuple(shape if isinstance(shape, list) else [shape])
    if not shape:
        raise a.err("shape", "must have at least one dimension.")
    for j, d in enumerate(shape):
        if isinstance(d, bool) or not isinstance(d, (int, str)):
            raise a.err(f"shape[{j}]", f"must be an integer or an expression string, not {show(d)}.")
    init = None
    if role in ("input", "inout"):
        init = _init(a, data.get("init"), dtype)
    elif "init" in data:
        raise a.err("init", "is not used for outputs (they are poisoned before every launch).")
    return ArgSpec(name, dtype, role, shape, init, None)


def _init(a: _Reader, data, dtype: str) -> Init:
    kind = _dt.get(dtype).kind
    if data is None:
        if kind == "float":
            return Init("normal", mean=0.0, std=1.0)
        if kind == "bool":
            return Init("integers", low=0, high=2)
        info_hi = 256 if dtype.endswith("int8") else 100
        return Init("integers", low=0, high=info_hi)
    ir = _Reader(a.fname, data if isinstance(data, dict) else {}, a.prefix + "init.")
    if not isinstance(data, dict):
        raise a.err("init", "must be a table such as {dist = \"normal\", mean = 0, std = 1}.")
    dist = ir.get("dist", str, what=f" ({', '.join(DISTS)})")
    allowed = {"normal": {"mean", "std"}, "uniform": {"low", "high"}, "integers": {"low", "high"},
               "constant": {"value"}}
    if dist not in allowed:
        raise ir.err("dist", f"must be one of {', '.join(DISTS)}, not {show(dist)}.")
    ir.check_keys(allowed[dist] | {"dist"})
    # values are drawn in float32 (float64 for float64 arrays) or int64, then stored as the dtype
    lo, hi = _dt.value_range(dtype) if kind != "bool" else _dt.value_range("int64")
    drawn_max = _dt.value_range("float64" if dtype == "float64" else "float32")[1]

    def within(key, v):
        if not lo <= v <= hi:
            raise ir.err(key, f"must lie between {_fmt(lo)} and {_fmt(hi)} for {dtype}, not {show(v)}.")

    if dist == "normal":
        mean, std = float(ir.number("mean", default=0.0)), float(ir.number("std", default=1.0))
        if std <= 0:
            raise ir.err("std", "must be positive.")
        within("mean", mean)
        within("std", std)
        return Init(dist, mean=mean, std=std)
    if dist in ("uniform", "integers"):
        low = ir.number("low", default=0 if dist == "integers" else -1.0)
        high = ir.number("high", default=100 if dist == "integers" else 1.0)
        if not low < high:
            raise ir.err("high", f"must be greater than low ({show(low)}).")
        if dist == "integers":
            if not float(low).is_integer() or not float(high).is_integer():
                raise ir.err("low", "integers needs whole-number bounds.")
            if low < -2**63 or high > 2**63:
                raise ir.err("low" if low < -2**63 else "high", "must lie between -2**63 and 2**63 (int64).")
        else:
            within("low", low)
            within("high", high)
            if high - low > drawn_max:
                raise ir.err("high", f"is too far from low: high - low must be at most {drawn_max:g}.")
        return Init(dist, low=low, high=high)
    value = ir.number("value", default=...)
    within("value", value)
    return Init(dist, value=value)


def read_kernel(path: Path) -> str:
    """A kernel file's text, or a UserError naming it."""
    try:
        if path.is_dir():
            raise UserError(f"{path}: is a folder; give the kernel's .cu file.")
        if not path.is_file():
            raise UserError(f"{path}: kernel file not found.")
        return path.read_text()
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file.") from None
    except (OSError, ValueError) as e:      # no permission, a name too long, a NUL in the path
        raise UserError(f"{path}: cannot read the kernel ({getattr(e, 'strerror', None) or e}).") from None


def load_task(kernel: Path, spec_path: Path | None = None) -> tuple[str, TaskSpec]:
    """The kernel's source and its task spec (``spec_path``, or kernel.toml beside it)."""
    source = read_kernel(kernel)
    return source, load_spec(find_spec(kernel, spec_path), kernel, kernel_source=source)
