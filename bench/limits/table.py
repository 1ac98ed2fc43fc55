"""The limits table from the trace databases of `bench/limits/optimize_examples.sh` (and of the
templates' optimize scripts): per example, the seed's and the best's time (the final interleaved
timing), the best's fraction of speed of light (which bound, measured or datasheet peaks) and its
ratio to the spec's baseline, with the calibration beside them.

    python3 bench/limits/table.py OUT/*.db [--calibration OUT/calibration.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
import common  # noqa: E402,F401  (puts this checkout's optiml first on sys.path)


def row(db: Path) -> str:
    from optiml.traces.limits import baseline_ratio
    from optiml.traces.store import TraceStore

    with TraceStore(db, read_only=True) as store:
        runs = store.runs()
        if not runs:
            return f"| {db.stem} | no run | | | | | |"
        run = store.run(runs[-1]["id"])
        n = len(store.nodes(run["id"])) - 1
    f = run.get("result") or {}
    sol = f.get("speed_of_light") or {}
    base = f.get("baseline") or {}
    ratio = baseline_ratio(f)
    ms = lambda v: f"{v:.4g}" if isinstance(v, (int, float)) else "-"       # noqa: E731
    sol_s = (f"{100 * sol['fraction']:.1f} % ({sol.get('bound')}, {sol.get('source')})" if sol.get("fraction")
             else "-")
    base_s = (f"{ms(base.get('median_ms'))} ms {base.get('label')}: {ratio:.2f}x" if ratio
              else (f"{base.get('label')}: {base.get('status')}" if base else "none"))
    speed = f"{f['speedup']:.2f}x" if isinstance(f.get("speedup"), (int, float)) else f.get("status", "-")
    return f"| {db.stem} | {n} | {ms(f.get('seed_ms'))} | {ms(f.get('best_ms'))} | {speed} | {sol_s} | {base_s} |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dbs", nargs="+", type=Path)
    ap.add_argument("--calibration", type=Path, help="what `optiml calibrate --json` printed")
    args = ap.parse_args(argv)
    if args.calibration and args.calibration.is_file():
        cal = json.loads(args.calibration.read_text())
        figs = cal.get("figures") or {}
        print(f"calibration: {cal.get('gpu')}, driver {cal.get('driver')}, {cal.get('clocks')}: "
              + ", ".join(f"{k} {v:.4g}" for k, v in figs.items() if isinstance(v, (int, float))))
    print("| example | candidates | seed ms | best ms | speedup | speed of light | baseline: best is |")
    print("|:--|--:|--:|--:|--:|:--|:--|")
    for db in args.dbs:
        print(row(db))
    return 0


if __name__ == "__main__":
    sys.exit(main())
