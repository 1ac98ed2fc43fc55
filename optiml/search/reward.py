"""The reward the search maximises, versioned so stored runs can be re-scored without a GPU.

Why this shape:

* **Speedup over the root, on a log scale.** ``log(root_ms / median_ms)`` is 0 for the user's
  kernel, positive when faster, negative when slower, and symmetric (2x faster and 2x slower are
  equally far from 0), so averages over a subtree (the MCTS value) are not dominated by one outlier.
  The root is timed in the same run, so the figure does not depend on another day's clocks.
* **Small profiler terms** (each at most 0.05; together they move the reward by at most 0.2, the
  log-speedup of about 20 %) break ties
  between kernels of about the same runtime in favour of the one with more headroom: higher achieved
  occupancy, fewer shared-memory load bank conflicts, more tensor-pipe use, a larger fraction of the
  speed of light (the larger of SM and memory throughput). They steer, they never decide.
* **Regression guardrail.** A child slower than its parent by more than twice the parent's timing
  spread (the relative IQR) pays :data:`REGRESSION_PENALTY`, so a branch whose edits make things
  worse is visited less even when it is still faster than the root.
* **Failures are never rewarded.** A candidate whose status is not ``ok`` (it did not build, crashed,
  timed out or computed a wrong answer) gets a fixed non-positive reward whatever its runtime, and
  :meth:`optiml.search.mcts.MCTS.best` only ever picks ``ok`` nodes: a fast but wrong kernel can
  never win. Build-time failures cost less than runtime ones: they are cheap to find and say less
  about the branch. A candidate whose machine was lost (``worker_lost``, :data:`optiml.status.UNSCORED`)
  is neither: its reward is 0 and it is not backed up (it counts against the budget, not its branch).

Everything the function reads is stored with the candidate (status, median, spread, metrics), so a
run can be re-scored with a later :data:`REWARD_VERSION`.
"""
from __future__ import annotations

import math
from typing import Mapping

from ..status import UNSCORED, Category, category
from .result import Result

REWARD_VERSION = 1

BUILD_FAILURE_REWARD = -0.5
RUNTIME_FAILURE_REWARD = -1.0     # wrong, crashed, hung, infrastructure or anything unknown
REGRESSION_PENALTY = 0.1
METRIC_WEIGHT = 0.05


def _fraction(value, scale: float = 1.0) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return min(max(float(value) / scale, 0.0), 1.0)


def metric_terms(metrics: dict | None) -> float:
    """The profiler part of the reward, in [-0.05, +0.15]; missing metrics contribute nothing."""
    m = metrics or {}
    total = 0.0
    occ = _fraction(m.get("achieved_occupancy_pct"), 100.0)
    if occ is not None:
        total += METRIC_WEIGHT * occ
    conflicts = _fraction(m.get("smem_ld_conflict_ratio"))
    if conflicts is not None:
        total -= METRIC_WEIGHT * conflicts
    sol = [f for f in (_fraction(m.get(k), 100.0) for k in ("sm_throughput_pct", "memory_throughput_pct"))
           if f is not None]
    if sol:
        total += METRIC_WEIGHT * max(sol)
    tensor = _fraction(m.get("tensor_pipe_active_pct"), 100.0)
    if tensor is not None:
        total += METRIC_WEIGHT * tensor
    return total


def reward(ev: Result | Mapping, root_ms: float, parent_ms: float | None, parent_spread: float = 0.02) -> float:
    """Reward (version :data:`REWARD_VERSION`) of a :class:`Result` (or a dict with its fields).

    ``root_ms`` is the root kernel's median in this run, ``parent_ms``/``parent_spread`` the
    parent's median and relative timing spread (None for the root itself).
    """
    ev = Result.of(ev)
    kind = category(ev.status)
    if ev.status in UNSCORED:
        return 0.0        # its machine was lost: nothing is known of the candidate (and it is not backed up)
    if kind is not Category.OK:
        # a proposal that did not apply costs what a build failure costs
        cheap = kind in (Category.BUILD_FAILURE, Category.NOT_EVALUATED)
        return BUILD_FAILURE_REWARD if cheap else RUNTIME_FAILURE_REWARD
    median = ev.median_ms
    if not median or median <= 0 or not root_ms or root_ms <= 0:
        return 0.0        # verified but not timed: nothing to reward
    r = math.log(root_ms / median) + metric_terms(ev.metrics)
    if parent_ms and median > parent_ms * (1.0 + 2.0 * max(parent_spread or 0.0, 0.0)):
        r -= REGRESSION_PENALTY
    return r
