"""Timing statistics, free of CUDA: a launch's samples to a :class:`TimingResult`, when to
stop repeating (the median is precise enough), and for kernels timed interleaved (a final
speedup) the plan of their blocks and the interval of their ratio."""
from __future__ import annotations

import math
from dataclasses import dataclass

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


def timing_stats(samples: list[float], warmup: int, input_sets: int, flushed: bool,
                 blocks: list[list[float]] | None = None) -> TimingResult:
    """The statistics of one kernel's samples; ``blocks``: its samples block by block (an
    interleaved timing), whose medians are kept in order (``TimingResult.blocks_ms``)."""
    a = np.asarray(samples, dtype=np.float64)
    q10, q25, q50, q75, q90 = np.percentile(a, [10, 25, 50, 75, 90])
    return TimingResult(median_ms=float(q50), mean_ms=float(a.mean()), min_ms=float(a.min()), max_ms=float(a.max()),
                        p10_ms=float(q10), p90_ms=float(q90), iqr_ms=float(q75 - q25), reps=int(a.size),
                        warmup_launches=warmup, input_sets=input_sets, flushed_l2=flushed,
                        samples_ms=[round(float(x), 6) for x in a], median_ci_rel=_finite(median_ci_rel(a)),
                        blocks_ms=[round(float(np.median(b)), 6) for b in blocks or () if len(b)])


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


# -- interleaved timing in blocks (a final speedup) ---------------------------------------------------
ROUNDS = 10          # blocks per kernel: the speedup's interval is over 10 per-round ratios (x_(2)..x_(9))
MIN_ROUNDS = 5       # fewer only when the plan would run longer than PLAN_MS (very slow kernels)
BLOCK_MS = 25.0      # a block is at least this much of its kernel's own time (when max_reps allows)
MIN_BLOCK_REPS = 2   # and at least this many repetitions (a slow kernel's block)
WARM_MS = 1.0        # untimed launches at the start of a block: about this long ...
MAX_WARM = 20        # ... at most this many, and none for a kernel of BLOCK_MS or longer
PLAN_MS = 30_000.0   # the planned GPU time of all blocks together, rounds allowing


@dataclass(frozen=True)
class BlockPlan:
    """How several kernels are timed interleaved: ``rounds`` rounds, each running one block of
    every kernel (the order rotating by one every round); kernel k's block is ``warmup[k]``
    untimed launches, then ``reps[k]`` timed ones."""
    rounds: int
    reps: tuple[int, ...]
    warmup: tuple[int, ...]

    def own_ms(self, est_ms) -> float:
        """The plan's kernel time (warm-ups included) at the estimated times ``est_ms``."""
        return self.rounds * sum((r + w) * e for r, w, e in zip(self.reps, self.warmup, est_ms))


def block_plan(est_ms, min_reps: int = 10, max_reps: int = 300, target_ms: float = 400.0) -> BlockPlan:
    """The blocks of an interleaved timing, from each kernel's OWN time estimate ``est_ms`` (a
    warm-up launch each) and the spec's timing settings.

    Launching each kernel once per round, with repetitions sized from the slowest, gave a
    0.12 ms kernel beside a 33 ms seed 12 samples, each right after the long kernel, and 1 %
    to 21 % above its time alone. Instead, each kernel runs blocks of consecutive repetitions:

    * ``ROUNDS`` (10) rounds, one block of each kernel per round, so the speedup has 10
      per-round ratios of block medians for its interval (:func:`ratio_interval`);
    * a block is about ``max(BLOCK_MS, target_ms / rounds)`` of the kernel's own time (40 ms
      with the spec defaults, so each kernel gets about ``target_ms`` in all): far longer than
      a clock's or a cache's recovery after a long neighbour, so those land in few samples and
      the block's median does not see them. At least ``MIN_BLOCK_REPS`` repetitions and
      ``min_reps`` over all rounds; at most ``max_reps`` in one block (the spec's bound on
      consecutive repetitions: 300 of a 0.12 ms kernel are 37 ms; a tiny kernel's block is
      still many milliseconds long with its L2 flush and output reset before each launch);
    * a block starts with ``ceil(WARM_MS / est)`` untimed launches (1 to ``MAX_WARM``) so that
      the previous kernel's after-effects do not fall in its first timed sample; a kernel of
      ``BLOCK_MS`` or longer has none (a neighbour's after-effects are a negligible share of it);
    * rounds drop towards ``MIN_ROUNDS`` while the whole plan would take more than ``PLAN_MS``
      of GPU time (seconds-long kernels), to stay well inside a GPU job's timeout.

    For the 33 ms / 0.12 ms pair: 10 rounds of 2 launches of the slow kernel (66 ms) and 9
    warm-ups then 300 timed launches of the fast one (about 1.2 s in all)."""
    est = [max(float(e), 1e-4) for e in est_ms]
    rounds = ROUNDS
    while True:
        aim = max(BLOCK_MS, target_ms / rounds)
        least = max(MIN_BLOCK_REPS, math.ceil(min_reps / rounds))
        reps = tuple(int(min(max(least, math.ceil(aim / e)), max(max_reps, least))) for e in est)
        warm = tuple(0 if e >= BLOCK_MS else int(min(MAX_WARM, max(1, math.ceil(WARM_MS / e)))) for e in est)
        plan = BlockPlan(rounds, reps, warm)
        if rounds <= MIN_ROUNDS or plan.own_ms(est) <= PLAN_MS:
            return plan
        rounds -= 1


def block_order(round_index: int, n_kernels: int) -> list[int]:
    """The kernels' order in round ``round_index``: rotated by one every round (two kernels:
    A B, B A, A B, ...), so that each follows each as often and a drift over the timing
    falls on both alike."""
    return [(round_index + j) % n_kernels for j in range(n_kernels)]


def ratio_interval(num_blocks, den_blocks) -> tuple[float, float, float] | None:
    """The ratio ``num / den`` (a speedup: the seed's time over the candidate's) from two kernels'
    per-block medians, paired by round (blocks of one round ran next to each other): the median
    of the per-round ratios and its distribution-free 95 % interval (:func:`median_ci`, order
    statistics). None without a pair of blocks."""
    pairs = [(float(n), float(d)) for n, d in zip([] if num_blocks is None else num_blocks,
                                                  [] if den_blocks is None else den_blocks)
             if n is not None and d is not None and n > 0 and d > 0]
    if not pairs:
        return None
    ratios = [n / d for n, d in pairs]
    lo, hi = median_ci(ratios)
    return float(np.median(ratios)), lo, hi
