"""Timing statistics, free of CUDA: a launch's samples to a :class:`TimingResult`, and when to
stop repeating (the median is precise enough)."""
from __future__ import annotations

import math

import numpy as np

from .harness import TimingResult


def median_ci(samples) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median: the order statistics
    ``x_(l)``, ``x_(u)`` with l, u = n/2 -+ 1.96 sqrt(n)/2 (the normal approximation of the
    binomial), widened to the whole sample when n is too small for that."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = x.size
    if n == 0:
        return math.nan, math.nan
    h = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - h))
    hi = min(n - 1, math.ceil(n / 2 + h) - 1)
    return float(x[lo]), float(x[hi])


def median_ci_rel(samples) -> float:
    """Half the width of :func:`median_ci` over the median (0.005: the median is known to +-0.5 %)."""
    lo, hi = median_ci(samples)
    med = float(np.median(np.asarray(samples, dtype=np.float64))) if len(samples) else math.nan
    if not med > 0:
        return math.inf
    return (hi - lo) / 2 / med


def timing_stats(samples: list[float], warmup: int, input_sets: int, flushed: bool) -> TimingResult:
    a = np.asarray(samples, dtype=np.float64)
    q10, q25, q50, q75, q90 = np.percentile(a, [10, 25, 50, 75, 90])
    return TimingResult(median_ms=float(q50), mean_ms=float(a.mean()), min_ms=float(a.min()), max_ms=float(a.max()),
                        p10_ms=float(q10), p90_ms=float(q90), iqr_ms=float(q75 - q25), reps=int(a.size),
                        warmup_launches=warmup, input_sets=input_sets, flushed_l2=flushed,
                        samples_ms=[round(float(x), 6) for x in a], median_ci_rel=_finite(median_ci_rel(a)))


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
