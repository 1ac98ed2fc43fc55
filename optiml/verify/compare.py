"""Compare a candidate's outputs with the reference's. Pure numpy: tested without a GPU.

Checks, in the order a failure is reported:
``unwritten``  elements still holding the poison written before the launch;
``nan``/``inf`` NaN or Inf where the reference has a finite value;
``input_modified`` an ``input`` argument changed by the kernel;
``tolerance``  |out - ref| > atol + rtol * |ref|;
``relative``   the scale-free check, for floating-point outputs whose reference is not all zero:
               the relative RMS error ``||out - ref|| / ||ref||`` (over pairs finite on both sides)
               above the dtype's ``rel_rms``, or an element off by more than half of its reference
               value where that value is at least a tenth of the reference's RMS (a *gross* element).

The elementwise test alone is vacuous wherever ``atol`` exceeds the outputs' magnitude (a long
softmax row, a mean over many elements): zeros, a constant or a stale buffer pass it. The
relative check cannot be passed by an unrelated answer at any size, since it is measured against
the reference's own magnitude at that size (docs/spec.md, "Verification").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .. import dtypes as _dt

CHECK_ORDER = ("unwritten", "nan", "inf", "input_modified", "tolerance", "relative")

GROSS_REL = 0.5          # an element off by more than half its reference value is grossly wrong ...
SIGNIFICANT = 0.1        # ... where that value is at least this fraction of the reference's RMS


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
    ref_rms: float = 0.0               # the reference's RMS over pairs finite on both sides
    gross_ref: float = 0.0             # the largest |ref| among elements off by more than GROSS_REL |ref|
    rel_rms_bound: float | None = None # the relative check's bound (None: no relative check, as for integers)
    atol: float = 0.0                  # the elementwise check's atol (to say where it is vacuous)

    @property
    def relative_failed(self) -> bool:
        """The scale-free check: fails where the relative RMS error exceeds its bound or an element
        whose reference is significant (>= SIGNIFICANT x the RMS) is off by more than half."""
        if self.rel_rms_bound is None or not self.ref_rms > 0:
            return False
        return self.rel_l2_err > self.rel_rms_bound or self.gross_ref >= SIGNIFICANT * self.ref_rms

    @property
    def atol_vacuous(self) -> bool:
        """Whether atol exceeds the reference's typical magnitude (its RMS) here: the elementwise
        check then passes small wrong outputs, and the relative check decides."""
        return self.ref_rms > 0 and self.atol > self.ref_rms

    @property
    def failed_check(self) -> str | None:
        for check, count in (("unwritten", self.unwritten), ("nan", self.nan), ("inf", self.inf),
                             ("tolerance", self.mismatched), ("relative", int(self.relative_failed))):
            if count:
                return check
        return None

    def relative_sentence(self) -> str:
        """Why the relative check failed, in one clause."""
        if self.rel_l2_err > (self.rel_rms_bound or 0.0):
            what = f"relative RMS error {self.rel_l2_err:.3g} over its bound {self.rel_rms_bound:.3g}"
        else:
            what = (f"an element off by more than {GROSS_REL:.0%} where the reference is {self.gross_ref:.3g} "
                    f"(at least {SIGNIFICANT:g} of its RMS)")
        return f"{what}; the reference's RMS is {self.ref_rms:.3g}"


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

    def vacuous_note(self, o: OutputCheck) -> str:
        """The note on output ``o`` of this case whose atol exceeds the reference's RMS."""
        return (f"{o.name}: atol {o.atol:g} exceeds the reference's RMS {o.ref_rms:.3g} at sizes {self.sizes}; "
                f"there the elementwise check passes any small output, and the relative check decides")

    @property
    def notes(self) -> list[str]:
        """What the user should know though the case passed: an atol above the outputs' magnitude."""
        return [self.vacuous_note(o) for o in self.outputs if o.atol_vacuous]

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


def _scale(res: OutputCheck, o: np.ndarray, r: np.ndarray, diff: np.ndarray, finite: np.ndarray | None) -> None:
    """The relative check's figures (float64 sums over pairs finite on both sides)."""
    if finite is not None:
        o, r, diff = o[finite], r[finite], diff[finite]
    if r.size == 0:
        return
    r64, d64 = r.astype(np.float64), diff.astype(np.float64)
    ss_ref, ss_diff = float(np.dot(r64, r64)), float(np.dot(d64, d64))
    res.ref_rms = float(np.sqrt(ss_ref / r.size))
    res.rel_l2_err = float(np.sqrt(ss_diff / ss_ref)) if ss_ref > 0 else float(np.sqrt(ss_diff))
    ar = np.abs(r64)
    gross = d64 > GROSS_REL * ar
    res.gross_ref = float(ar[gross].max()) if gross.any() else 0.0


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
    _scale(res, o, r, np.abs(o.astype(np.float64) - r.astype(np.float64)), None)
    res.worst_index, res.worst_value, res.worst_expected = [i], float(o[i]), float(r[i])
    return True


def check_output(name: str, out: np.ndarray, ref: np.ndarray, dtype: str, atol: float, rtol: float,
                 poisonable: bool = True, rel_rms: float | None = None) -> OutputCheck:
    """Compare one output buffer with its reference buffer (both in storage layout); ``rel_rms``
    the relative check's bound (None: elementwise only, as for integer outputs)."""
    out = np.ascontiguousarray(out).reshape(-1)
    ref = np.ascontiguousarray(ref).reshape(-1)
    res = OutputCheck(name=name, elements=int(out.size), atol=float(atol),
                      rel_rms_bound=None if rel_rms is None or _dt.get(dtype).kind != "float" else float(rel_rms))
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
        _scale(res, o, r, diff, both_finite)
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
        if failed == "relative":
            msg = (f"{o.name}: wrong at sizes {sizes} though every element is within atol {o.atol:g} + rtol |ref|: "
                   f"{o.relative_sentence()}; max abs err {o.max_abs_err:.3g}, max rel err {o.max_rel_err:.3g}")
        else:
            count = {"unwritten": o.unwritten, "nan": o.nan, "inf": o.inf, "tolerance": o.mismatched}[failed]
            what = {"unwritten": "left unwritten", "nan": "NaN where the reference is finite",
                    "inf": "Inf where the reference is finite", "tolerance": "outside tolerance"}[failed]
            where = f" (first at flat index {o.worst_index[0]}: got {o.worst_value}, expected {o.worst_expected})" if o.worst_index else ""
            msg = f"{o.name}: {count} of {o.elements} elements {what} at sizes {sizes}{where}; max abs err {o.max_abs_err:.3g}, max rel err {o.max_rel_err:.3g}"
    return CaseCheck(size_index=size_index, sizes=dict(sizes), seed=seed, passed=failed is None,
                     failed_check=failed, message=msg, outputs=outputs, modified_inputs=modified_inputs)
