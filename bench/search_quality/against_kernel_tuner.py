"""How fast does each search find a recorded space's optimum? optiml's search against Kernel Tuner's
strategies, replayed on the same recorded tuning spaces (tests/data/spaces/*.json), on the CPU.

    python3 bench/search_quality/against_kernel_tuner.py          # every recorded space, 20 seeds
    python3 bench/search_quality/against_kernel_tuner.py tests/data/spaces/NAME.json --seeds 5 --budgets 10,30 --markdown

For each space and search, each seed's trace (the objective of every evaluation in order, failures
included) is taken once at the largest budget B, and the table gives over the seeds:

- "evals to 1%": the median number of evaluations until the best so far is within 1 % of the space's
  optimum (its fastest "ok" point); a seed that never gets there counts as infinite, and a median
  that is infinite reads ">B". "reached" is how many seeds got there within B.
- "best/opt @b": the median of (best found in the first b evaluations) / optimum; 1.000 is the optimum,
  "-" is a median run that found no working point.

optiml's trace comes from bench/search_quality/space_replay.py (its root, the space's seed point, is
evaluation 1); Kernel Tuner's from bench/search_quality/kt_replay.py (its simulation mode over the
space as a cache file).
"bayes_opt_skipfail" is Kernel Tuner's bayes_opt with failed points kept out of its Gaussian process:
kernel_tuner 1.5.0 fits a failure as a valid observation of sys.float_info.max, and on a space with
failures its plain bayes_opt then walks the space in a fixed order (see bench/search_quality/kt_replay.py).
Kernel Tuner is installed by ``pip install -e '.[bench]'``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import ROOT  # noqa: E402

SPACES = ROOT / "tests" / "data" / "spaces"
KT_STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt", "bayes_opt_skipfail")
TOLERANCE = 0.01

Trace = Sequence["float | None"]


# ----------------------------------------------------------------------------- the metrics
def optimum(space: dict) -> float:
    """The fastest working point's median (ms)."""
    ok = [p[-1] for p in space["points"] if p[-2] == "ok" and p[-1] is not None]
    if not ok:
        raise ValueError(f"space {space.get('name')!r} has no working point")
    return min(ok)


def evals_to_within(trace: Trace, best: float, tolerance: float = TOLERANCE) -> float:
    """The 1-based index of the first evaluation at or below (1 + tolerance) x best; inf if none."""
    for i, t in enumerate(trace, 1):
        if t is not None and t <= (1 + tolerance) * best:
            return i
    return math.inf


def best_ratio(trace: Trace, best: float, budget: int) -> float:
    """The best objective among the first ``budget`` evaluations over ``best``; inf if none worked."""
    found = [t for t in trace[:budget] if t is not None]
    return min(found) / best if found else math.inf


def summarize(traces: list[Trace], best: float, budgets: Sequence[int]) -> dict:
    """The medians over seeds' traces: evaluations to within 1 %, and best/optimum at each budget."""
    evals = [evals_to_within(t[:max(budgets)], best) for t in traces]
    return {"evals": statistics.median(evals), "reached": sum(e != math.inf for e in evals), "runs": len(traces),
            "ratio": {b: statistics.median(best_ratio(t, best, b) for t in traces) for b in budgets}}


# ----------------------------------------------------------------------------- the runs
def tracers(names: Sequence[str], note=print) -> dict[str, Callable[[dict, int, int], Trace]]:
    """The trace function of each search named ("optiml" or a Kernel Tuner strategy); optiml is left
    out, with a note, while bench/search_quality/space_replay.py cannot be imported."""
    from kt_replay import kernel_tuner_trace
    out = {}
    for name in names:
        if name == "optiml":
            try:
                from space_replay import optiml_trace
            except ImportError as e:
                note(f"optiml skipped: bench/search_quality/space_replay.py cannot be imported ({e}).")
                continue
            out[name] = optiml_trace
        else:
            out[name] = lambda space, seed, budget, _s=name: kernel_tuner_trace(space, _s, seed, budget)
    return out


def evaluate_space(space: dict, searches: dict, seeds: int, budgets: Sequence[int]) -> list[dict]:
    """One row per search: its summary over seeds 0..seeds-1 on ``space``, with the time it took."""
    best, rows = optimum(space), []
    for name, trace in searches.items():
        t0 = time.perf_counter()
        traces = [list(trace(space, seed, max(budgets)))[:max(budgets)] for seed in range(seeds)]
        rows.append({"space": space.get("name", "?"), "search": name, **summarize(traces, best, budgets),
                     "seconds": time.perf_counter() - t0})
    return rows


# ----------------------------------------------------------------------------- the tables
def _cells(row: dict, budgets: Sequence[int]) -> list[str]:
    e = row["evals"]
    evals = f">{max(budgets)}" if e == math.inf else f"{e:g}"
    ratios = ["-" if row["ratio"][b] == math.inf else f"{row['ratio'][b]:.3f}" for b in budgets]
    return [row["space"], row["search"], evals, f"{row['reached']}/{row['runs']}", *ratios]


def _header(budgets: Sequence[int]) -> list[str]:
    return ["space", "search", "evals to 1%", "reached", *(f"best/opt @{b}" for b in budgets)]


def text_table(rows: list[dict], budgets: Sequence[int]) -> str:
    table = [_header(budgets)] + [_cells(r, budgets) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    fmt = lambda line: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
    return "\n".join([fmt(table[0]), "  ".join("-" * w for w in widths), *map(fmt, table[1:])])


def markdown_table(rows: list[dict], budgets: Sequence[int]) -> str:
    head = _header(budgets)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join([":--", ":--"] + ["--:"] * (len(head) - 2)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(_cells(r, budgets)) + " |" for r in rows])


def describe(space: dict, path: Path) -> str:
    ok = sum(p[-2] == "ok" for p in space["points"])
    return (f"{space.get('name', path.stem)}: {len(space['points'])} valid points ({ok} ok) of "
            f"{math.prod(len(v) for v in space['tune_params'].values())}, optimum {optimum(space):.4g} ms, "
            f"gpu {space.get('gpu', '?')} ({path})")


# ----------------------------------------------------------------------------- the command
def _ints(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Search efficiency on recorded tuning spaces: optiml against "
                                             "Kernel Tuner's strategies (simulation mode), no GPU.")
    ap.add_argument("spaces", nargs="*", type=Path,
                    help="recorded spaces (default: tests/data/spaces/*.json except synthetic_*)")
    ap.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 per search (default 20)")
    ap.add_argument("--budgets", type=_ints, default=[20, 50, 100], help="evaluation budgets (default 20,50,100)")
    ap.add_argument("--strategies", default=",".join(("optiml",) + KT_STRATEGIES),
                    help="searches to compare: optiml and Kernel Tuner strategies (default: %(default)s)")
    ap.add_argument("--markdown", action="store_true", help="also print the table in Markdown")
    a = ap.parse_args(argv)
    if a.seeds < 1:
        ap.error("--seeds must be at least 1")
    try:
        import kernel_tuner  # noqa: F401
    except ImportError:
        print("against_kernel_tuner.py needs Kernel Tuner, which is not installed: pip install -e '.[bench]'.",
              file=sys.stderr)
        return 1
    names = [s.strip() for s in a.strategies.split(",") if s.strip()]
    from kernel_tuner.interface import strategy_map
    known = ["optiml", *strategy_map, "bayes_opt_skipfail"]
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"--strategies: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    paths = a.spaces or sorted(p for p in SPACES.glob("*.json") if not p.name.startswith("synthetic_"))
    if not paths:
        print(f"against_kernel_tuner.py: no recorded space in {SPACES.relative_to(ROOT)} (synthetic_* aside): "
              "record one on a GPU or name a space file.", file=sys.stderr)
        return 1
    spaces = []
    for p in paths:
        try:
            space = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            print(f"against_kernel_tuner.py: cannot read the space {p}: {e}.", file=sys.stderr)
            return 1
        if space.get("format") != "optiml-space/1":
            print(f"against_kernel_tuner.py: {p} is not an optiml-space/1 file (format {space.get('format')!r}).",
                  file=sys.stderr)
            return 1
        spaces.append((p, space))
    searches = tracers(names, note=lambda m: print(m, file=sys.stderr))
    rows = []
    for p, space in spaces:
        print(describe(space, p), flush=True)
        rows += evaluate_space(space, searches, a.seeds, a.budgets)
    print(f"\n{a.seeds} seeds; evaluations count failed points too; the within-1% median is over seeds "
          f"(a seed that never gets there counts as infinite).\n")
    print(text_table(rows, a.budgets))
    if a.markdown:
        print("\n" + markdown_table(rows, a.budgets))
    print("\n" + ", ".join(f"{r['space']}/{r['search']} {r['seconds']:.1f}s" for r in rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
