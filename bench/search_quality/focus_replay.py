"""The search's focus (SearchConfig.focus) on and off, replayed over the recorded tuning spaces
(tests/data/spaces/*.json) with the same seeds, on a CPU: for each space, budget and evaluations in
flight, the mean of the best found over the optimum (1.00 is the optimum) and the share of the
evaluations after the best was found that went to points more than twice as slow as it.

    python3 bench/search_quality/focus_replay.py [--seeds 10] [--budget 25 --budget 50] [--parallel 1 --parallel 4]

Every evaluation is answered from the recording (a replay evaluator: a fake with behaviour, not a
GPU result).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import space_replay  # noqa: E402
from allocation import after_best  # noqa: E402

SPACES = Path(__file__).resolve().parents[2] / "tests" / "data" / "spaces"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, action="append")
    ap.add_argument("--parallel", type=int, action="append")
    ap.add_argument("--focus", type=float, default=space_replay.SearchConfig.focus, help="the focus compared with none")
    a = ap.parse_args()
    budgets, parallels = a.budget or [25, 50], a.parallel or [1, 4]
    print("| space | budget | in flight | best / optimum, focus off | on | after the best, below half its speed: off | on |")
    print("|:--|--:|--:|--:|--:|--:|--:|")
    for path in sorted(SPACES.glob("*.json")):
        space = json.loads(path.read_text())
        optimum = min(p[-1] for p in space["points"] if p[-1] is not None)
        for budget in budgets:
            for parallel in parallels:
                cells = {}
                for focus in (0.0, a.focus):
                    ratios, shares = [], []
                    for seed in range(a.seeds):
                        trace = space_replay.optiml_trace(space, seed, budget, focus=focus, parallel=parallel)
                        ok = [t for t in trace if t is not None]
                        ratios.append(min(ok) / optimum)
                        after = after_best(trace)
                        if after is not None:
                            shares.append(after["share_below_half"])
                    cells[focus] = (statistics.mean(ratios), statistics.mean(shares) if shares else 0.0)
                print(f"| {path.stem} | {budget} | {parallel} | {cells[0.0][0]:.3f} | {cells[a.focus][0]:.3f} | "
                      f"{100 * cells[0.0][1]:.1f} % | {100 * cells[a.focus][1]:.1f} % |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
