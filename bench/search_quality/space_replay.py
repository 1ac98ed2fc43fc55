"""optiml's search replayed over a recorded tuning space (tests/data/spaces/*.json), on a CPU.

Every evaluation is answered from the recording (a replay evaluator: a fake with behaviour, not
a GPU result), so the search's choices can be compared with Kernel Tuner's strategies on the same
data (bench/search_quality/against_kernel_tuner.py). The search is the real MCTS with the real
rules proposer in its declared-space mode, limited to the space's moves (``space_only``: the
recording holds nothing else). The source it edits is the space's names as ``#define``s, which is
how the proposer sees any declared name; the points the recording lists are the valid ones.

    python3 bench/search_quality/space_replay.py tests/data/spaces/stencil2d.json --seed 0 --budget 50
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
import common  # noqa: E402,F401  (puts this checkout's optiml first on sys.path)
from optiml.edits.rules import RulesProposer  # noqa: E402
from optiml.search.mcts import MCTS, SearchConfig  # noqa: E402
from optiml.search.result import Result  # noqa: E402
from optiml.spec.space import TuneSpace, read_point  # noqa: E402

ENTRY = "replayed"


class ListedSpace(TuneSpace):
    """A declared space whose valid points are the ones a recording lists."""

    def __init__(self, params, listed: set):
        super().__init__(params, ())
        object.__setattr__(self, "_listed", listed)

    def violated(self, point, size_sets=(), constants={}):
        key = tuple(point[n] for n in self.names)
        return None if key in self._listed else "not in the recorded space"


def load_space(space: dict) -> tuple[ListedSpace, dict]:
    names = list(space["tune_params"])
    params = tuple((n, tuple(space["tune_params"][n])) for n in names)
    table = {tuple(p[:len(names)]): (p[len(names)], p[len(names) + 1]) for p in space["points"]}
    return ListedSpace(params, set(table)), table


def source_of(point: dict) -> str:
    return "".join(f"#define {n} {v}\n" for n, v in point.items()) + f"__global__ void {ENTRY}(float* x) {{}}\n"


class ReplayEvaluator:
    """Answers each candidate from the recording, and keeps the order of the answers."""

    def __init__(self, space: ListedSpace, table: dict):
        self.space, self.table = space, table
        self.trace: list[float | None] = []

    def evaluate(self, source: str, flags: tuple[str, ...]) -> Result:
        p = read_point(source, ENTRY, self.space)
        key = tuple(p.get(n) for n in self.space.names)
        status, median = self.table.get(key, ("launch_config_error", None))
        self.trace.append(median if status == "ok" else None)
        if status == "ok":
            return Result("ok", median_ms=float(median), spread=0.005)
        return Result(status, message="recorded failure")


class InFlight:
    """The replay evaluator taking the candidates the search keeps in flight and answering the oldest
    first, one a wait (as a GPU times one kernel at a time while others compile)."""

    def __init__(self, inner: ReplayEvaluator):
        self.inner, self.queue = inner, []

    def submit(self, token: int, source: str, flags: tuple[str, ...]) -> None:
        self.queue.append((token, source, flags))

    def wait(self):
        token, source, flags = self.queue.pop(0)
        return [(token, self.inner.evaluate(source, flags))]


def optiml_trace(space: dict, seed: int, budget: int, focus: float = SearchConfig.focus,
                 parallel: int = 1) -> list[float | None]:
    """The recorded medians of optiml's evaluations in order (None for a failure), the seed point
    first, at most ``budget`` in all; ``focus`` as :class:`SearchConfig`'s, ``parallel`` evaluations
    in flight (answered in order)."""
    tune, table = load_space(space)
    evaluator = ReplayEvaluator(tune, table) if parallel == 1 else InFlight(ReplayEvaluator(tune, table))
    proposer = RulesProposer(space=tune, space_only=True)
    search = MCTS(source_of(dict(space["seed_point"])), evaluator, proposer, entry=ENTRY,
                  config=SearchConfig(budget=max(budget - 1, 0), seed=seed, focus=focus, parallel=parallel))
    search.run()
    return (evaluator if parallel == 1 else evaluator.inner).trace[:budget]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("space", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=50)
    a = ap.parse_args()
    try:
        space = json.loads(a.space.read_text())
    except (OSError, ValueError) as e:
        print(f"{a.space}: cannot read the recorded space ({e}).", file=sys.stderr)
        return 1
    trace = optiml_trace(space, a.seed, a.budget)
    ok = [t for t in trace if t is not None]
    best = min(p[-1] for p in space["points"] if p[-1] is not None)
    print(f"{len(trace)} evaluations, best {min(ok):.4f} ms, optimum {best:.4f} ms")
    for i, t in enumerate(trace, 1):
        print(i, "failed" if t is None else f"{t:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
