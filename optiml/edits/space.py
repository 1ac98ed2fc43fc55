"""Moves in a declared tuning space (the spec's ``[tune]``), ranked by what the whole search has
measured.

From a node's point, the moves are the points that differ in one or two names (any of their
values), satisfy the restrictions at every size set, and are not in the tree yet. Each is scored
by a small surrogate of the log runtime fitted to every candidate the search has measured
(:class:`~optiml.edits.types.Measured`): a kernel regression over the names' value indices (one
step of a list is one unit), shrunk towards the mean, minus a bonus for what is far from
anything measured (a lower confidence bound, as in Bayesian optimisation). A point that failed
counts as slower than anything measured, so its neighbours rank lower. The prior of a move falls
off with its score, ten per cent of predicted runtime at a time.

Everything is a function of the node and the tree as recorded, so a resumed search proposes the
same moves as the uninterrupted one.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable, Mapping

from ..spec.space import TuneSpace, apply_point, read_point
from .types import Measured, NodeView

LENGTH = 1.0          # kernel length scale, in steps of a value list
SHRINK = 0.5          # weight of the mean (the prior observation) in every prediction
EXPLORE = 1.0         # how many standard deviations of the measured log times the bonus is worth
TEMPERATURE = 0.1     # a move's prior: exp(-(score - best score) / TEMPERATURE)
FAILED_PENALTY = 1.0  # a failed point counts as this much slower (log) than the slowest measured one


class SpaceMoves:
    """The moves from a node in a declared space, with their scores; caches parsed points by source."""

    def __init__(self, space: TuneSpace, entry: str, size_sets: Iterable[Mapping[str, int]] = (),
                 constants: Mapping[str, int] | None = None, max_changed: int = 2):
        self.space, self.entry = space, entry
        self.size_sets = [dict(s) for s in size_sets] or [{}]
        self.constants = dict(constants or {})
        self.max_changed = max_changed
        self._index = {n: {v: i for i, v in enumerate(vals)} for n, vals in space.params}
        self._points: dict[str, tuple | None] = {}
        self._valid: dict[tuple, bool] = {}

    # -- points ---------------------------------------------------------------------------
    def point(self, source: str) -> tuple | None:
        """The source's values of the declared names, in order (None: some name is not readable)."""
        if source not in self._points:
            p = read_point(source, self.entry, self.space)
            self._points[source] = tuple(p[n] for n in self.space.names) if len(p) == len(self.space.names) else None
        return self._points[source]

    def valid(self, point: tuple) -> bool:
        if point not in self._valid:
            named = dict(zip(self.space.names, point))
            self._valid[point] = self.space.violated(named, self.size_sets, self.constants) is None
        return self._valid[point]

    def _coords(self, point: tuple) -> tuple[float, ...] | None:
        try:
            return tuple(float(self._index[n][v]) for n, v in zip(self.space.names, point))
        except KeyError:            # a value outside the lists (the seed's own, say)
            return None

    def neighbours(self, point: tuple) -> list[tuple]:
        """Valid points that differ from ``point`` in 1..max_changed names."""
        out = []
        dims = range(len(point))
        for k in range(1, self.max_changed + 1):
            for which in itertools.combinations(dims, k):
                choices = [[v for v in self.space.params[d][1] if v != point[d]] for d in which]
                for values in itertools.product(*choices):
                    q = list(point)
                    for d, v in zip(which, values):
                        q[d] = v
                    q = tuple(q)
                    if self.valid(q):
                        out.append(q)
        return out

    # -- the surrogate ----------------------------------------------------------------------
    def _data(self, measured: Iterable[Measured]) -> tuple[list, set]:
        """(coords, log time or None for a failure) of every finished point, and every point in the tree."""
        seen, data = set(), []
        for m in measured:
            p = self.point(m.source)
            if p is None:
                continue
            seen.add(p)
            c = self._coords(p)
            if c is None or m.status in ("pending", "running"):
                continue
            y = math.log(m.median_ms) if m.status == "ok" and m.median_ms and m.median_ms > 0 else None
            if m.status != "ok" or y is not None:
                data.append((c, y))
        return data, seen

    def scores(self, candidates: list[tuple], measured: Iterable[Measured]) -> list[float]:
        """The lower confidence bound of each candidate's log runtime (lower is better)."""
        data, _ = self._data(measured)
        ys = [y for _, y in data if y is not None]
        if not ys:
            return [0.0] * len(candidates)
        mean = sum(ys) / len(ys)
        sd = math.sqrt(sum((y - mean) ** 2 for y in ys) / len(ys)) if len(ys) > 1 else 0.0
        sd = max(sd, 0.05)
        worst = max(ys) + FAILED_PENALTY
        obs = [(c, worst if y is None else y) for c, y in data]
        out = []
        for cand in candidates:
            x = self._coords(cand)
            if x is None:
                out.append(mean)
                continue
            wsum, wy = SHRINK, SHRINK * mean
            for c, y in obs:
                d2 = sum((a - b) ** 2 for a, b in zip(x, c))
                w = math.exp(-d2 / (2 * LENGTH * LENGTH))
                wsum += w
                wy += w * y
            out.append(wy / wsum - EXPLORE * sd * math.sqrt(SHRINK / wsum))
        return out

    def moves(self, node: NodeView) -> list[tuple[dict, str, float]]:
        """(changes, edit, score) of each move from ``node`` to a point not in the tree yet."""
        here = self.point(node.source)
        if here is None:
            return []
        _, seen = self._data(node.measured)
        cands = [q for q in self.neighbours(here) if q not in seen]
        scores = self.scores(cands, node.measured) if cands else []
        out = []
        for q, s in zip(cands, scores):
            changes = {n: b for n, a, b in zip(self.space.names, here, q) if a != b}
            edit = ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(self.space.names, here, q) if a != b)
            out.append((changes, edit, s))
        return out

    def source(self, node: NodeView, changes: Mapping[str, int]) -> str:
        return apply_point(node.source, self.entry, changes)


def priors(scores: list[float]) -> list[float]:
    """A move's prior from its score: 1 for the best, falling by e for each TEMPERATURE above it."""
    best = min(scores, default=0.0)
    return [max(math.exp(-(s - best) / TEMPERATURE), 1e-6) for s in scores]
