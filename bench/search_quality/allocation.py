"""Where a recorded search spent its evaluations once it had found its best: for each run of each
trajectory database, the evaluations after the first one within 5 % of the run's best time, and how
many of those were candidates more than twice as slow as the best (below half its speed) or failed;
and of the slow ones, how many were moves of a parent itself below half the best's speed (spent
away from the best's neighbourhood, which the search's focus is meant to hold back; the others
are moves of near nodes that turned out slow).

    python3 bench/search_quality/allocation.py RUN.db [RUN.db ...] [--json OUT.json]

No GPU: it reads the stored evaluations (their order is the order they were stored in).
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path


def after_best(trace: list, parents: list | None = None) -> dict | None:
    """For evaluations in order (each a median in ms, None for a failed one): the best, where the first
    within 5 % of it came (1-based), and after it how many there were, how many more than twice as
    slow as the best (below half its speed) and how many failed; None where none verified. With
    ``parents`` (each evaluation's parent's median, None where unknown), also how many of the slow
    ones were moves of a parent below half the best's speed (``from_slow_parents``)."""
    ok = [ms for ms in trace if ms]
    if not ok:
        return None
    best = min(ok)
    found = next(i for i, ms in enumerate(trace) if ms and ms <= best * 1.05)
    after = trace[found + 1:]
    slow = sum(1 for ms in after if ms and ms > 2 * best)
    row = dict(best_ms=best, found_at=found + 1, after=len(after), below_half=slow,
               failed=sum(1 for ms in after if not ms), share_below_half=slow / len(after) if after else 0.0)
    if parents is not None:
        row["from_slow_parents"] = sum(1 for ms, pms in zip(after, parents[found + 1:])
                                       if ms and ms > 2 * best and pms and pms > 2 * best)
    return row


def allocation(db: Path) -> list[dict]:
    """One row per run of ``db``: evaluations, the evaluation that found the best, and after it the
    count of candidates below half the best's speed, failed, and the rest."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = []
    for (run_id,) in con.execute("SELECT id FROM runs ORDER BY id"):
        evals = con.execute(
            "SELECT e.status, e.median_ms, pe.status, pe.median_ms FROM evaluations e JOIN nodes n ON n.id = e.node_id "
            "LEFT JOIN evaluations pe ON pe.node_id = n.parent_id WHERE n.run_id = ? ORDER BY e.id", (run_id,)).fetchall()
        row = after_best([ms if status == "ok" else None for status, ms, _, _ in evals],
                         [pms if pstatus == "ok" else None for _, _, pstatus, pms in evals])
        if row is not None:
            rows.append(dict(db=db.name, run=run_id, evaluations=len(evals), **row))
    con.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dbs", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.dbs if not p.is_file()]
    if missing:
        print(f"allocation.py: no such database: {', '.join(missing)}.", file=sys.stderr)
        return 2
    rows = [r for db in args.dbs for r in allocation(db)]
    print("| run | evaluations | best ms | best found at | after it | below half its speed | of those, from slow parents | failed |")
    print("|:--|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(f"| {r['db']} #{r['run']} | {r['evaluations']} | {r['best_ms']:.4g} | {r['found_at']} | {r['after']} | "
              f"{r['below_half']} ({100 * r['share_below_half']:.0f} %) | {r['from_slow_parents']} | {r['failed']} |")
    total_after = sum(r["after"] for r in rows)
    total_slow = sum(r["below_half"] for r in rows)
    total_far = sum(r["from_slow_parents"] for r in rows)
    if total_after:
        print(f"\nall runs: {total_slow} of {total_after} evaluations after the best was found were below half its "
              f"speed ({100 * total_slow / total_after:.1f} %), {total_far} of them ({100 * total_far / total_after:.1f} %) "
              f"moves of a parent below half its speed")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
