"""Drafted tolerances: from the output's dtype, the reduction length behind each output element and the
reference's magnitude at the sizes, each with the reason written beside it (``optiml init``).

The rule (docs/spec.md, "Verification"):
- ``rtol`` and ``rel_rms``: the dtype's defaults, raised for a long reduction to what its rounding
  can reach (``4 u sqrt(K)``, ``u`` the unit roundoff of the accumulation: float32's for the half types);
- ``atol``: the default, lowered to ``10 rtol`` times the reference's RMS at the timing size where the
  outputs are that small (a long softmax row, a mean), so that the elementwise check means something
  there too (the factor 10 leaves room for an RMS extrapolated low, where an output near zero carries the
  rounding of its larger terms); the relative check holds at every size whatever atol says.
"""
from __future__ import annotations

import math

from .. import dtypes as _dt

# unit roundoff of the arithmetic a kernel of that output dtype accumulates in
_U_ACC = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -24}


def _down(x: float) -> float:
    """``x`` rounded down to one significant digit (1e-4, 3e-9)."""
    if x <= 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(x))
    if 10.0 ** e == 0.0:          # a subnormal past 1e-323: its power of ten underflows, it stays as it is
        return x
    return math.floor(x / 10 ** e) * 10 ** e


def _up(x: float) -> float:
    e = math.floor(math.log10(x))
    return math.ceil(round(x / 10 ** e, 9)) * 10 ** e


def extrapolate_rms(points: list[tuple[float, float]], at: float) -> float | None:
    """The RMS at the problem size ``at`` from (size, RMS) points at smaller sizes, by a power law in
    the size (the product of the task's sizes); None where no point has a non-zero RMS. The fitted
    exponent is kept within [-2, 2]: a size moves a typical output's magnitude by far less."""
    pts = [(p, r) for p, r in points if p > 0 and r > 0 and math.isfinite(r)]
    if not pts:
        return None
    (p1, r1) = max(pts)
    lower = [(p, r) for p, r in pts if p < p1]
    if not lower:
        return r1
    p0, r0 = max(lower)
    alpha = max(-2.0, min(2.0, math.log(r1 / r0) / math.log(p1 / p0)))
    return r1 * (at / p1) ** alpha


def draft_tolerance(dtype: str, reduction: float | None = None, rms: float | None = None,
                    rms_said: str = "") -> tuple[str, str] | None:
    """(the TOML value, the reason) for one output dtype; None for integers and bool (compared
    exactly). ``reduction``: the terms summed into one output element, where known; ``rms``: the
    reference's RMS at the timing size, where known (``rms_said`` says how it was found)."""
    if dtype not in _dt.DEFAULT_REL_RMS:
        return None
    atol, rtol = _dt.DEFAULT_TOLERANCES[dtype]
    rel = _dt.DEFAULT_REL_RMS[dtype]
    why = []
    if reduction and reduction > 1:
        grown = 4 * _U_ACC[dtype] * math.sqrt(reduction)
        if grown > rtol:
            rtol = _up(grown)
            why.append(f"rtol {rtol:g} for sums of {reduction:.3g} terms (4 u sqrt(K))")
        if grown > rel:
            rel = _up(grown)
            why.append(f"rel_rms {rel:g} likewise")
    if not why:
        why.append(f"rtol {rtol:g} and rel_rms {rel:g}: the {dtype} defaults" +
                   (f" (sums of {reduction:.3g} terms fit them)" if reduction and reduction > 1 else ""))
    if rms is not None and rms > 0 and 10 * rtol * rms < atol:
        atol = _down(10 * rtol * rms)
        why.append(f"atol {atol:g} = 10 rtol x the reference's RMS at the timing size ({rms:.3g}{rms_said}), "
                   f"where the default {_dt.DEFAULT_TOLERANCES[dtype][0]:g} would pass any output that small")
    elif rms is not None and rms > 0:
        why.append(f"atol {atol:g}: the default, under the reference's RMS at the timing size ({rms:.3g}{rms_said})")
    else:
        why.append(f"atol {atol:g}: the default; if the outputs are smaller than it at some size (a long softmax "
                   "row, a mean), lower it: the relative check holds there regardless")
    return f"{{ atol = {atol:g}, rtol = {rtol:g}, rel_rms = {rel:g} }}", "; ".join(why)


def tolerance_lines(entries: dict[str, tuple[float | None, float | None, str]]) -> list[str]:
    """The ``[tolerance]`` table for output dtypes: ``{dtype: (reduction, rms, rms_said)}``, a comment
    line with the reason before each entry; nothing when no output is floating point."""
    lines = []
    for dtype, (reduction, rms, said) in entries.items():
        drafted = draft_tolerance(dtype, reduction, rms, said)
        if drafted is not None:
            lines.append(f"# {dtype}: {drafted[1]}")
            lines.append(f"{dtype} = {drafted[0]}")
    if not lines:
        return []
    return ["[tolerance]  # |out - ref| <= atol + rtol |ref| elementwise, and ||out - ref|| <= rel_rms ||ref|| "
            "(docs/spec.md, Verification)", *lines]
