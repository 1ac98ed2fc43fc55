"""What compute-sanitizer costs, on a GPU machine.

    python3 bench/sanitizer/sanitize_cost.py                        # budget 40, two examples, 2 rounds
    python3 bench/sanitizer/sanitize_cost.py --budget 20 --rounds 1 --example reduce_sum

1. ``optiml eval EXAMPLE --sanitize --no-time`` on every example: the sanitizer's own wall time
   per candidate (the four tools at once), median over the examples.
2. ``optiml optimize EXAMPLE --budget B --sanitize best`` and ``--sanitize off``, alternated in
   each round (best first in odd rounds, off first in even ones), each in a fresh trace store: the
   whole command's wall time, how many candidates were sanitized and each one's sanitizer wall
   time (read back from the store), and the best speedup written.

Prints a table and a JSON line for the record.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import ROOT, gpu_arch  # noqa: E402

EXAMPLES = ("transpose_naive", "reduce_sum")
ARCH = ["sm_90"]        # set from --arch or the GPU in main()


def kernel(example: str) -> Path:
    return ROOT / "examples" / example / f"{example}.cu"


def optiml(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "optiml", *args], capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - t0, p


def sanitize_eval(example: str) -> dict:
    wall, p = optiml("eval", str(kernel(example)), "--arch", ARCH[0], "--sanitize", "--no-time", "--json")
    if p.returncode != 0:
        return {"example": example, "error": (p.stderr or p.stdout).strip()[-300:]}
    out = json.loads(p.stdout)
    san = out.get("sanitize") or {}
    return {"example": example, "status": san.get("status"), "sanitize_s": san.get("wall_s"), "eval_s": wall}


def optimize(example: str, mode: str, budget: int, tmp: Path) -> dict:
    from optiml.traces.store import TraceStore

    db, out = tmp / f"{example}-{mode}-{time.time_ns()}.db", tmp / f"{example}-{mode}.cu"
    wall, p = optiml("-v", "optimize", str(kernel(example)), "--arch", ARCH[0], "--budget", str(budget), "--sanitize", mode,
                     "--db", str(db), "--output", str(out), "--seed", "0")
    row = {"example": example, "mode": mode, "wall_s": round(wall, 2), "rc": p.returncode}
    import re

    for key, pattern in (("settle_s", r"settled the later results in ([\d.]+) s"), ("final_s", r"final timing.* in ([\d.]+) s")):
        m = re.search(pattern, p.stderr)
        row[key] = float(m.group(1)) if m else None
    if p.returncode != 0:
        row["error"] = (p.stderr or p.stdout).strip()[-400:]
        return row
    with TraceStore(db, create=False) as store:
        run = store.runs()[-1]
        final = store.run(run["id"])["result"] or {}
        sanitized, gpu, stages = [], [], {}
        for n in store.nodes(run["id"]):
            e = store.evaluation(n.id) or {}
            res = e.get("result") or {}
            for k, v in (res.get("stage_s") or {}).items():
                stages.setdefault(k, []).append(v)
            if res.get("sanitize"):
                sanitized.append(round((res.get("stage_s") or {}).get("sanitize") or res["sanitize"].get("wall_s") or 0, 2))
                gpu.append(round(res["sanitize"].get("gpu_s") or 0, 2))
    row["stage_median_s"] = {k: round(statistics.median(v), 3) for k, v in sorted(stages.items()) if k != "sanitize"}
    row.update(sanitized=len(sanitized), sanitize_each_s=sanitized, sanitize_gpu_s=gpu, speedup=final.get("speedup"),
               final_sanitize=(final.get("sanitize") or {}).get("status"))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--example", action="append", help="an example under examples/ (default: %s)" % ", ".join(EXAMPLES))
    ap.add_argument("--no-eval", action="store_true", help="skip the per-example `optiml eval --sanitize`")
    ap.add_argument("--arch", help="nvcc architecture, e.g. sm_90 (default: the GPU's)")
    args = ap.parse_args()
    args.arch = ARCH[0] = gpu_arch("bench/sanitizer/sanitize_cost.py", args.arch)
    examples = args.example or list(EXAMPLES)
    record: dict = {"budget": args.budget}
    if not args.no_eval:
        evals = [sanitize_eval(p.name) for p in sorted((ROOT / "examples").iterdir()) if p.is_dir()]
        for e in evals:
            print(f"eval --sanitize {e['example']:24s} {e.get('status')} {e.get('sanitize_s')} s  {e.get('error', '')}")
        times = [e["sanitize_s"] for e in evals if e.get("sanitize_s")]
        record["eval"] = evals
        record["sanitize_median_s"] = statistics.median(times) if times else None
        print(f"sanitizer per candidate: median {record['sanitize_median_s']} s over {len(times)} examples")
    runs = []
    with tempfile.TemporaryDirectory(prefix="optiml-sanitize-cost-") as tmp:
        for r in range(args.rounds):
            for ex in examples:
                for mode in (("best", "off") if r % 2 == 0 else ("off", "best")):
                    row = optimize(ex, mode, args.budget, Path(tmp))
                    runs.append(row)
                    print(f"round {r} {ex:18s} {mode:4s} {row['wall_s']:7.1f} s  sanitized {row.get('sanitized')} "
                          f"{row.get('sanitize_each_s')}  speedup {row.get('speedup')}  final {row.get('final_sanitize')} "
                          f"settle {row.get('settle_s')} s final step {row.get('final_s')} s gpu held {row.get('sanitize_gpu_s')} "
                          f"stages {row.get('stage_median_s')} "
                          f"{row.get('error', '')}", flush=True)
    record["runs"] = runs
    for ex in examples:
        best = [x["wall_s"] for x in runs if x["example"] == ex and x["mode"] == "best" and x["rc"] == 0]
        off = [x["wall_s"] for x in runs if x["example"] == ex and x["mode"] == "off" and x["rc"] == 0]
        if best and off:
            b, o = statistics.median(best), statistics.median(off)
            record[f"{ex}_overhead_pct"] = round(100 * (b - o) / o, 1)
            print(f"{ex}: best {b:.1f} s vs off {o:.1f} s (median of {len(best)}): {100 * (b - o) / o:+.1f} %")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
