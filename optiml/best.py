"""Which verified candidate is the best: one rule, shared by the search and the trace store.

The fastest verified candidate sets a noise band (its median times ``1 + max(2 * spread, 1 %)``,
the spread being its timing's interquartile range over its median; the 1 % floor is the
run-to-run difference a timing's own IQR does not show: the same kernel timed in two processes
on an H100 differed by up to 0.66 %); among the candidates inside that band,
the one with the fewest edits from the seed wins, then the faster, then the older. An extra edit
must earn its place with a gain larger than the timing noise.
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


def choose_best(candidates: Iterable[Ranked]) -> Ranked | None:
    """The best of verified candidates (all given ones must be verified and timed)."""
    ok = [c for c in candidates if c.median_ms and c.median_ms > 0]
    if not ok:
        return None
    fastest = min(ok, key=lambda c: (c.median_ms, c.order))
    spread = fastest.spread if isinstance(fastest.spread, (int, float)) else DEFAULT_SPREAD
    band = fastest.median_ms * (1 + max(2 * spread, MIN_BAND))
    return min((c for c in ok if c.median_ms <= band), key=lambda c: (c.edits, c.median_ms, c.order))
