"""Compare a candidate's outputs with the reference's. Pure numpy: tested without a GPU.

Checks, in the order a failure is reported:
``unwritten``  elements still holding the poison written before the launch;
``nan``/``inf`` NaN or Inf where the reference has a finite value;
``input_modified`` an ``input`` argument changed by the kernel;
``tolerance``  |out - ref| > atol + rtol * |ref|.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .. import dtypes as _dt

CHECK_ORDER = ("unwritten", "nan", "inf", "input_modified", "tolerance")


@dataclass
class OutputCheck:
    name: str
    elements: int
    unwritten: int = 0
    nan: int = 0
    inf: int = 0
    mismatched: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    worst_index: list[int] | None = None
    worst_value: float | None = None
    worst_expected: float | None = None
    rel_l2_err: float = 0.0

    @property
    def failed_check(self) -> str | None:
        for check, count in (("unwritten", self.unwritten), ("nan", self.nan), ("inf", self.inf),
                             ("tolerance", self.mismatched)):
            if count:
                return check
        return None


@dataclass
class CaseCheck:
    """The verdict on one case: one size set, one input draw."""
    size_index: int
    sizes: dict[str, int]
    seed: int
    passed: bool
    failed_check: str | None = None
    message: str = ""
    outputs: list[OutputCheck] = field(default_factory=list)
    modified_inputs: list[str] = field(default_factory=list)

    @property
    def max_abs_err(self) -> float:
        return max((o.max_abs_err for o in self.outputs), default=0.0)

    @property
    def max_rel_err(self) -> float:
        return max((o.max_rel_err for o in self.outputs), default=0.0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["max_abs_err"], d["max_rel_err"] = self.max_abs_err, self.max_rel_err
        return d


def _bytes_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise bit equality for arrays of one storage type (``b`` may be a broadcast scalar)."""
    width = a.dtype.itemsize
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    if b.size and b.strides and all(st == 0 for st in b.strides):      # a broadcast pattern: compare to the scalar
        return np.ascontiguousarray(a).view(view) == np.ascontiguousarray(b.reshape(-1)[:1]).view(view)[0]
    return np.ascontiguousarray(a).view(view) == np.ascontiguousarray(b).view(view)


_FAST = {"float32": np.float32, "float16": np.float32, "bfloat16": np.float32}


def _all_close(res: OutputCheck, out: np.ndarray, ref: np.ndarray, dtype: str, atol: float, rtol: float) -> bool:
    """The common case, in few passes and in float32 for 32-bit and narrower floats: every
    element finite in the reference and within tolerance. Fills the error figures of ``res``
    and returns True; False sends the caller to the full element-by-element accounting."""
    work = _FAST.get(dtype, np.float64)
    o = _dt.to_values(out, dtype).astype(work, copy=False)
    r = _dt.to_values(ref, dtype).astype(work, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(o - r)
        ar = np.abs(r)
        if not np.isfinite(ar).all() or not (diff <= atol + rtol * ar).all():
            return False              # NaN/Inf somewhere or out of tolerance: count it properly
    if diff.size == 0:
        return True
    i = int(np.argmax(diff))
    res.max_abs_err = float(diff[i])
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / ar              # x/0 is inf (a real relative error), 0/0 NaN (none): fmax skips NaN
    res.max_rel_err = float(np.fmax.reduce(rel)) if not np.isnan(rel).all() else 0.0
    denom, err = float(np.linalg.norm(r)), float(np.linalg.norm(diff))
    res.rel_l2_err = err / denom if denom > 0 else err
    res.worst_index, res.worst_value, res.worst_expected = [i], float(o[i]), float(r[i])
    return True


def check_output(name: str, out: np.ndarray, ref: np.ndarray, dtype: str, atol: float, rtol: float,
                 poisonable: bool = True) -> OutputCheck:
    """Compare one output buffer with its reference buffer (both in storage layout)."""
    out = np.ascontiguousarray(out).reshape(-1)
    ref = np.ascontiguousarray(ref).reshape(-1)
    res = OutputCheck(name=name, elements=int(out.size))
    if out.shape != ref.shape:
        res.mismatched = int(max(out.size, ref.size))
        return res
    if poisonable:
        poison = _dt.poison_pattern(dtype)
        unwritten = _bytes_equal(out, np.broadcast_to(poison, out.shape)) & ~_bytes_equal(ref, np.broadcast_to(poison, ref.shape))
        res.unwritten = int(unwritten.sum())
    else:
        unwritten = np.zeros(out.shape, bool)
    if not res.unwritten and _all_close(res, out, ref, dtype, atol, rtol):
        return res
    o = _dt.to_values(out, dtype).astype(np.float64)
    r = _dt.to_values(ref, dtype).astype(np.float64)
    o_nan, r_nan = np.isnan(o), np.isnan(r)
    o_inf, r_inf = np.isinf(o), np.isinf(r)
    res.nan = int((o_nan & ~r_nan & ~unwritten).sum())
    res.inf = int((o_inf & ~(r_inf & (np.sign(o) == np.sign(r)))).sum())
    both_finite = np.isfinite(o) & np.isfinite(r)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(both_finite, np.abs(o - r), 0.0)
        bound = atol + rtol * np.abs(r)
        # a NaN or Inf in the reference must be matched exactly
        special_ok = (r_nan & o_nan) | (r_inf & o_inf & (np.sign(o) == np.sign(r)))
        ok = np.where(both_finite, diff <= bound, special_ok)
    ok |= unwritten  # counted above, not twice
    res.mismatched = int((~ok & ~(o_nan & ~r_nan) & ~(o_inf & ~r_inf)).sum())
    if both_finite.any():
        res.max_abs_err = float(diff.max())
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            rel = diff / np.maximum(np.abs(r), np.finfo(np.float64).tiny)
        rel = np.where(both_finite & (np.abs(r) > 0), rel, np.where(diff > 0, np.inf, 0.0))
        res.max_rel_err = float(rel.max())
        denom = float(np.linalg.norm(r[both_finite]))
        res.rel_l2_err = float(np.linalg.norm(diff[both_finite]) / denom) if denom > 0 else float(np.linalg.norm(diff[both_finite]))
    bad = ~ok | (o_nan & ~r_nan) | (o_inf & ~r_inf) | unwritten
    if bad.any():
        i = int(np.argmax(bad))
    elif both_finite.any():
        i = int(np.argmax(diff))
    else:
        i = None
    if i is not None:
        res.worst_index = [i]
        res.worst_value = float(o[i]) if not unwritten[i] else None
        res.worst_expected = float(r[i])
    return res


def summarize(size_index: int, sizes: dict, seed: int, outputs: list[OutputCheck], modified_inputs: list[str]) -> CaseCheck:
    failed = None
    for check in CHECK_ORDER:
        if check == "input_modified":
            if modified_inputs:
                failed = check
                break
            continue
        if any(o.failed_check == check for o in outputs):
            failed = check
            break
    msg = ""
    if failed == "input_modified":
        msg = f"the kernel changed input(s) {', '.join(modified_inputs)}, which it may only read"
    elif failed:
        o = next(o for o in outputs if o.failed_check == failed)
        count = {"unwritten": o.unwritten, "nan": o.nan, "inf": o.inf, "tolerance": o.mismatched}[failed]
        what = {"unwritten": "left unwritten", "nan": "NaN where the reference is finite",
                "inf": "Inf where the reference is finite", "tolerance": "outside tolerance"}[failed]
        where = f" (first at flat index {o.worst_index[0]}: got {o.worst_value}, expected {o.worst_expected})" if o.worst_index else ""
        msg = f"{o.name}: {count} of {o.elements} elements {what} at sizes {sizes}{where}; max abs err {o.max_abs_err:.3g}, max rel err {o.max_rel_err:.3g}"
    return CaseCheck(size_index=size_index, sizes=dict(sizes), seed=seed, passed=failed is None,
                     failed_check=failed, message=msg, outputs=outputs, modified_inputs=modified_inputs)
