"""Moves in a declared tuning space (the spec's ``[tune]``), ranked by what the whole search has
measured.

From a node's point, the moves are the points of the space (for a space of more than
:data:`WHOLE_SPACE` points, those that differ in one or two names) that satisfy the restrictions at
every size set and are not in the tree yet. Each is scored
by its lower confidence bound (GP-LCB: the predicted log runtime minus :data:`KAPPA` standard
deviations) under a Gaussian process of the log runtime fitted to every candidate the search has
measured (:class:`~optiml.edits.types.Measured`), over the names' value indices (Bayesian
optimisation's acquisition; the MCTS decides where to move from). A point that failed counts as
slower than anything measured, so its neighbours rank lower.

Everything is a function of the node and the tree as recorded, so a resumed search proposes the
same moves as the uninterrupted one.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable, Mapping

from ..spec.space import TuneSpace, apply_point, read_point
from .types import Measured, NodeView

LENGTHS = (0.15, 0.25, 0.4, 0.6, 1.0)   # candidate length scales (a value list spans 1), by marginal likelihood
NOISE = 1e-2          # the timing noise, relative to the measured spread of log runtimes
KAPPA = 2.0           # the lower confidence bound: the prediction minus this many standard deviations
CHUNK = 2048          # candidates scored at a time
WHOLE_SPACE = 20000   # points: a declared space up to this size is searched whole from every node
FAILED_PENALTY = 1.0  # a failed point counts as this much slower (log) than the slowest measured one


class SpaceMoves:
    """The moves from a node in a declared space, with their scores; caches parsed points by source."""

    def __init__(self, space: TuneSpace, entry: str, size_sets: Iterable[Mapping[str, int]] = (),
                 constants: Mapping[str, int] | None = None, max_changed: int | None = None):
        self.space, self.entry = space, entry
        self.size_sets = [dict(s) for s in size_sets] or [{}]
        self.constants = dict(constants or {})
        # a space small enough to enumerate is searched whole from any node; a larger one by
        # moves of at most two names at a time
        whole = space.cardinality <= WHOLE_SPACE
        self.max_changed = max_changed or (len(space.params) if whole else 2)
        self._all: list[tuple] | None = None
        self.names = space.names
        self._index = {n: {v: i for i, v in enumerate(vals)} for n, vals in space.params}
        self._coord_cache: dict[tuple, tuple | None] = {}
        self._scale = tuple(float(max(len(vals) - 1, 1)) for _, vals in space.params)
        self._points: dict[str, tuple | None] = {}
        self._valid: dict[tuple, bool] = {}

    # -- points ---------------------------------------------------------------------------
    def point(self, source: str) -> tuple | None:
        """The source's values of the declared names, in order (None: some name is not readable)."""
        if source not in self._points:
            p = read_point(source, self.entry, self.space)
            self._points[source] = tuple(p[n] for n in self.names) if len(p) == len(self.names) else None
        return self._points[source]

    def valid(self, point: tuple) -> bool:
        if point not in self._valid:
            named = dict(zip(self.names, point))
            self._valid[point] = self.space.violated(named, self.size_sets, self.constants) is None
        return self._valid[point]

    def _coords(self, point: tuple) -> tuple[float, ...] | None:
        if point not in self._coord_cache:
            try:
                c = tuple(float(self._index[n][v]) for n, v in zip(self.names, point))
            except KeyError:            # a value outside the lists (the seed's own, say)
                c = None
            self._coord_cache[point] = c
        return self._coord_cache[point]

    def neighbours(self, point: tuple) -> list[tuple]:
        """Valid points that differ from ``point`` in 1..max_changed names."""
        if self.max_changed >= len(point):
            if self._all is None:
                self._all = [q for q in (tuple(p.values()) for p in self.space.points()) if self.valid(q)]
            return [q for q in self._all if q != point]
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

    def scores(self, candidates: list[tuple], data: list) -> list[float]:
        """``data``: :meth:`_data`'s observations. Each candidate's lower confidence bound of its
        log runtime (standardised) less the best measured: negative where it may beat the best
        (lower is better), from a Gaussian process over the value indices (Matern 5/2, one length
        scale chosen by marginal likelihood). A failed point counts as slower than anything
        measured. (The bound explores more than expected improvement did: on the recorded spaces
        it needs as few evaluations or fewer on five of six; docs/notes.md.)"""
        import numpy as np

        ys = [y for _, y in data if y is not None]
        if not ys or not candidates:
            return [0.0] * len(candidates)
        worst = max(ys) + FAILED_PENALTY
        X = np.array([c for c, _ in data], dtype=float) / self._scale
        y = np.array([worst if v is None else v for _, v in data], dtype=float)
        mean, sd = float(y.mean()), float(y.std()) or 1.0
        z = (y - mean) / sd
        C = np.array([self._coords(q) or (0.0,) * len(self._scale) for q in candidates], dtype=float) / self._scale
        best_fit = None
        for length in LENGTHS:
            K = _matern(X, X, length) + NOISE * np.eye(len(X))
            try:
                L = np.linalg.cholesky(K)
            except np.linalg.LinAlgError:
                continue
            Linv = np.linalg.solve(L, np.eye(len(X)))
            alpha = Linv.T @ (Linv @ z)
            lml = -0.5 * float(z @ alpha) - float(np.log(np.diag(L)).sum())
            if best_fit is None or lml > best_fit[0]:
                best_fit = (lml, length, Linv, alpha)
        if best_fit is None:
            return [0.0] * len(candidates)
        _, length, Linv, alpha = best_fit
        best, out = float(z.min()), []
        for at in range(0, len(C), CHUNK):             # a bounded kernel matrix, however large the space
            Ks = _matern(C[at:at + CHUNK], X, length)
            mu = Ks @ alpha
            v = Ks @ Linv.T
            sigma = np.sqrt(np.clip(1.0 - (v * v).sum(axis=1), 1e-12, None))
            out += (mu - KAPPA * sigma - best).tolist()
        return out

    def moves(self, node: NodeView, limit: int = 256) -> list[tuple[dict, str, float]]:
        """(changes, edit, score) of the ``limit`` best-scored moves from ``node`` to points not in
        the tree yet, best first."""
        here = self.point(node.source)
        if here is None:
            return []
        data, seen = self._data(node.measured)
        cands = [q for q in self.neighbours(here) if q not in seen]
        scores = self.scores(cands, data) if cands else []
        ranked = sorted(range(len(cands)), key=lambda i: (scores[i], i))[:limit]
        out = []
        for i in ranked:
            q = cands[i]
            changes = {n: b for n, a, b in zip(self.names, here, q) if a != b}
            edit = ", ".join(f"{n} {a} -> {b}" for n, a, b in zip(self.names, here, q) if a != b)
            out.append((changes, edit, scores[i]))
        return out

    def source(self, node: NodeView, changes: Mapping[str, int]) -> str:
        return apply_point(node.source, self.entry, changes)


def priors(scores: list[float]) -> list[float]:
    """A move's prior from its score (its confidence bound less the best measured): its share of the best
    one's improvement, at least 1e-3 (so ties and rank survive when nothing improves)."""
    best = min(scores, default=0.0)
    if best >= 0:
        return [1.0] * len(scores)
    return [max(s / best, 1e-3) for s in scores]


def _matern(A, B, length: float):
    import numpy as np

    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    d = np.sqrt(np.clip(d2, 0, None)) / length
    r = math.sqrt(5.0) * d
    return (1.0 + r + r * r / 3.0) * np.exp(-r)

