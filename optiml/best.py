"""Which verified candidate is the best: one rule, shared by the search and the trace store.

The fastest verified candidate sets a noise band (its median times ``1 + max(2 * spread, 1 %)``,
the spread being its timing's interquartile range over its median; the 1 % floor is the
run-to-run difference a timing's own IQR does not show: the same kernel timed in two processes
on an H100 differed by up to 0.66 %); among the candidates inside that band,
the one with the fewest edits from the seed wins, then the faster, then the older. An extra edit
must earn its place with a gain larger than the timing noise.

The search applies it to its own timings, each candidate timed in a job of its own; at the end
of ``optimize`` the candidates in the band (:func:`in_band`) are timed against each other in one
job, and the rule is applied again to that measurement (``optiml.app.optimize.final_timing``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable

DEFAULT_SPREAD = 0.02        # when a timing has no spread recorded
MIN_BAND = 0.01              # run-to-run timing differences below this are noise


@dataclass(frozen=True)
class Ranked:
    key: Hashable            # the caller's id for the candidate
    median_ms: float
    spread: float | None
    edits: int               # depth: edits from the seed
    order: int               # creation order, the last tie-break


def in_band(candidates: Iterable[Ranked]) -> list[Ranked]:
    """The timed candidates within the fastest one's noise band, fastest first (then older)."""
    ok = sorted((c for c in candidates if c.median_ms and c.median_ms > 0), key=lambda c: (c.median_ms, c.order))
    if not ok:
        return []
    fastest = ok[0]
    spread = fastest.spread if isinstance(fastest.spread, (int, float)) else DEFAULT_SPREAD
    band = fastest.median_ms * (1 + max(2 * spread, MIN_BAND))
    return [c for c in ok if c.median_ms <= band]


def choose_best(candidates: Iterable[Ranked]) -> Ranked | None:
    """The best of verified candidates (all given ones must be verified and timed)."""
    band = in_band(candidates)
    return min(band, key=lambda c: (c.edits, c.median_ms, c.order)) if band else None
