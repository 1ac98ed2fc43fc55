"""The task spec's types: sizes, arguments, launch geometry, reference, tolerances and timing."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .. import dtypes as _dt
from .. import expr as _expr
from ..errors import SpecError
from ..expr import show
from ..source import SourceInfo, parse_source
from .space import TuneSpace, tune_constants

ROLES = ("input", "output", "inout", "scalar")
DISTS = ("normal", "uniform", "integers", "constant")

MAX_SIZE = 2**63 - 1                    # a named size (an int64)
MAX_ARRAY_BYTES = 2**40                 # one array at the sizes the spec declares (1 TiB)
MAX_GRID = (2**31 - 1, 65535, 65535)    # CUDA's limits on gridDim x, y, z
MAX_BLOCK = (1024, 1024, 64)            # and on blockDim x, y, z (the product is checked by the pipeline)
MAX_SHARED_MEM = 2**32 - 1              # cuLaunchKernel's sharedMemBytes is an unsigned int
MIN_TRIALS = 2                          # see the message in parse_spec


def _name(key: str) -> str:
    """A name from the spec as it can appear in a one-line message: quoted if it has odd characters."""
    return key if isinstance(key, str) and key.isprintable() and len(key) <= 60 else show(key)


def _fmt(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True)
class Init:
    dist: str
    mean: float = 0.0
    std: float = 1.0
    low: float = 0.0
    high: float = 1.0
    value: float = 0.0


@dataclass(frozen=True)
class ArgSpec:
    name: str
    dtype: str
    role: str
    shape: tuple = ()
    init: Init | None = None
    value: Any = None          # scalars: a number or an expression over the sizes

    @property
    def is_array(self) -> bool:
        return self.role != "scalar"


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int


@dataclass(frozen=True)
class LaunchSpec:
    grid: tuple
    block: tuple
    shared_mem: Any = 0


@dataclass(frozen=True)
class Reference:
    kind: str = "seed"                 # "seed", "python" (NumPy arrays on the host), "torch" or "cupy" (GPU)
    path: Path | None = None           # python file
    function: str | None = None

    @property
    def is_python(self) -> bool:
        """A function in a Python file (on the host or the GPU), not the seed kernel."""
        return self.kind in PYTHON_KINDS

    @property
    def on_gpu(self) -> bool:
        """Called with the case's GPU buffers as torch tensors or CuPy arrays (no host copy)."""
        return self.kind in GPU_KINDS


GPU_KINDS = ("torch", "cupy")
PYTHON_KINDS = ("python",) + GPU_KINDS


@dataclass(frozen=True)
class Baseline:
    """``[baseline]``: a Python callable (e.g. one calling torch.matmul on GPU tensors) computing the
    same outputs from the same inputs, to compare the best kernel with (``name``: how reports call it)."""
    path: Path
    function: str
    name: str = ""
    framework: str = "torch"           # what its arguments are: "torch" tensors or "cupy" arrays on the GPU

    @property
    def label(self) -> str:
        return self.name or f"{self.path.name}:{self.function}"


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    rel_rms: float | None = None     # the relative check's bound (None: none, as for integer outputs)


@dataclass(frozen=True)
class VerifyConfig:
    trials: int = 3                    # fresh random input sets per verification size
    timing_size: bool = True           # also verify once at the timing size
    seed: int | None = None            # None: fresh seeds every evaluation (recorded)


@dataclass(frozen=True)
class TimingConfig:
    warmup_ms: float = 25.0
    min_reps: int = 10
    max_reps: int = 300
    target_ms: float = 400.0
    flush_l2: bool = True
    # stop before target_ms once the median is this precise: the 95% confidence interval of the
    # median (order statistics) within +-precision of it. 0: always repeat to target_ms.
    precision: float = 0.005


@dataclass(frozen=True)
class TaskSpec:
    path: Path
    entry: str
    args: tuple[ArgSpec, ...]
    timing_sizes: dict[str, int]
    verify_sizes: tuple[dict[str, int], ...]
    launch: LaunchSpec
    reference: Reference = Reference()
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    nvcc_flags: tuple[str, ...] = ("-O3",)
    flops: Any = None
    bytes: Any = None
    verify: VerifyConfig = VerifyConfig()
    timing: TimingConfig = TimingConfig()
    tune: TuneSpace | None = None      # the declared tuning space ([tune]), if any
    baseline: Baseline | None = None   # the vendor/library implementation to compare with ([baseline])
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    def tolerance(self, dtype: str) -> Tolerance:
        if dtype in self.tolerances:
            return self.tolerances[dtype]
        atol, rtol = _dt.DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return Tolerance(atol, rtol, _dt.DEFAULT_REL_RMS.get(dtype))

    def summary(self) -> str:
        """The task in a few lines, for a proposer: arguments, sizes, launch, tolerance, reference."""
        def fmt_sizes(d):
            return ", ".join(f"{k}={v}" for k, v in d.items())
        lines = [f"kernel {self.entry}: arguments in order:"]
        for a in self.args:
            shape = f" shape [{', '.join(map(str, a.shape))}]" if a.shape else ""
            value = f" = {a.value}" if a.role == "scalar" and a.value is not None else ""
            lines.append(f"  {a.name}: {a.dtype} {a.role}{shape}{value}")
        lines.append(f"timed at {fmt_sizes(self.timing_sizes)}; verified also at "
                     + "; ".join(fmt_sizes(v) for v in self.verify_sizes) + " (odd sizes: partial blocks must be handled)")
        L = self.launch
        lines.append(f"default launch: grid [{', '.join(map(str, L.grid))}], block [{', '.join(map(str, L.block))}], "
                     f"shared_mem {L.shared_mem} (expressions over the sizes and the kernel's #define/constexpr constants)")
        tols = {a.dtype: self.tolerance(a.dtype) for a in self.args if a.role in ("output", "inout")}
        lines.append("tolerance: " + ", ".join(f"{d} atol {t.atol:g} rtol {t.rtol:g}"
                                               + (f" rel_rms {t.rel_rms:g}" if t.rel_rms is not None else "")
                                               for d, t in tols.items()))
        lines.append("reference: " + ("the original kernel's outputs" if self.reference.kind == "seed"
                                       else "a Python reference implementation" if self.reference.kind == "python"
                                       else f"a Python reference on {self.reference.kind} GPU arrays"))
        return "\n".join(lines)

    def source_info(self, source: str) -> SourceInfo:
        """The source's kernels, constants and launch comment, with the values of the declared
        tunables that are template arguments among the constants (so expressions can use them), and
        the entry's own template arguments (:func:`~optiml.source.parse_source`)."""
        info = parse_source(source, self.entry)
        for name, value in tune_constants(source, self.entry, self.tune).items():
            info.constants.setdefault(name, value)
        return info

    def tune_problem(self, source: str, constants: Mapping | None = None) -> str | None:
        """Why ``source``'s point of the declared space breaks a restriction (None when it does not,
        or when there is no space)."""
        if not self.tune or not self.tune.restrictions:
            return None
        consts = self.source_info(source).constants if constants is None else constants
        point = {n: consts[n] for n in self.tune.names if n in consts}
        return self.tune.violated(point, self.all_size_sets, consts)

    @property
    def all_size_sets(self) -> list[dict[str, int]]:
        return [self.timing_sizes, *self.verify_sizes]

    def env(self, sizes: Mapping[str, int], constants: Mapping[str, int | float]) -> dict:
        """Names visible to expressions: the kernel's constants, then the sizes (sizes win)."""
        return {**constants, **sizes}

    def shape(self, arg: ArgSpec, sizes: Mapping[str, int], constants: Mapping = {}) -> tuple[int, ...]:
        env = self.env(sizes, constants)
        return tuple(_expr.evaluate_int(e, env, where=f"{self.path}: args.{_name(arg.name)}.shape[{i}]")
                     for i, e in enumerate(arg.shape))

    def scalar_value(self, arg: ArgSpec, sizes: Mapping[str, int], constants: Mapping = {}):
        """The scalar's value at ``sizes``: finite and within its dtype's range, else a SpecError."""
        where = f"{self.path}: args.{_name(arg.name)}.value"
        v = _expr.evaluate(arg.value, self.env(sizes, constants), where=where)
        kind = _dt.get(arg.dtype).kind
        lo, hi = _dt.value_range(arg.dtype)
        if kind != "bool" and not lo <= v <= hi:
            at = f" = {show(arg.value)} is {show(v)} at sizes {dict(sizes)}" if isinstance(arg.value, str) else f" is {show(v)}"
            raise SpecError(f"{where}{at}, outside the range of {arg.dtype} ({_fmt(lo)} to {_fmt(hi)}).")
        return float(v) if kind == "float" else int(v)      # finite and at most 2**126: both convert

    def count(self, which: str, sizes: Mapping[str, int], constants: Mapping = {}) -> float | None:
        e = self.flops if which == "flops" else self.bytes
        if e is None:
            return None
        return float(_expr.evaluate(e, self.env(sizes, constants), where=f"{self.path}: counts.{which}"))   # at most 2**126

    def resolve_launch(self, sizes: Mapping[str, int], source: SourceInfo | None = None) -> Launch:
        """Launch geometry for ``sizes`` using the candidate source's constants and its
        ``// optiml:launch`` comment (which overrides the spec field by field)."""
        constants = source.constants if source else {}
        env = self.env(sizes, constants)
        grid, block, smem = self.launch.grid, self.launch.block, self.launch.shared_mem
        origin = f"{self.path}: launch"
        if source is not None and source.launch is not None:
            grid, block, smem = source.launch.over(grid, block, smem)
            origin = f"kernel source line {source.launch.line} (// optiml:launch)"

        def dims(values, what, limits):
            if not 1 <= len(values) <= 3:
                raise SpecError(f"{origin}.{what}: give 1 to 3 dimensions, not {len(values)}.")
            out = [_expr.evaluate_int(v, env, where=f"{origin}.{what}[{i}]") for i, v in enumerate(values)]
            for i, v in enumerate(out):
                if v <= 0:
                    raise SpecError(f"{origin}.{what}[{i}] = {show(values[i])} evaluates to {v} at sizes {dict(sizes)}; it must be positive.")
                if v > limits[i]:
                    raise SpecError(f"{origin}.{what}[{i}] = {show(values[i])} evaluates to {v} at sizes {dict(sizes)}; "
                                    f"CUDA allows at most {limits[i]} in {what} dimension {'xyz'[i]}.")
            return tuple(out + [1] * (3 - len(out)))

        g = dims(grid, "grid", MAX_GRID)
        b = dims(block, "block", MAX_BLOCK)
        s = _expr.evaluate_int(smem, env, where=f"{origin}.shared_mem")
        if s < 0:
            raise SpecError(f"{origin}.shared_mem evaluates to {s}; it must be zero or positive.")
        if s > MAX_SHARED_MEM:
            raise SpecError(f"{origin}.shared_mem evaluates to {s} at sizes {dict(sizes)}; a launch takes at most {MAX_SHARED_MEM} bytes.")
        return Launch(g, b, s)


# ----------------------------------------------------------------------------------- loading
