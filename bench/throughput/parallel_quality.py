"""Does keeping candidates in flight cost search quality? (the aim: results identical in quality to
the sequential search at the same budget; on fakes this is tests/test_search_parallel.py.)

    python3 bench/throughput/parallel_quality.py                       # budget 100, seeds 0-2, --parallel 1 vs 16, no ncu
    python3 bench/throughput/parallel_quality.py --profile --seeds 0   # with ncu (slow: about a minute a run)

Runs bench/throughput/candidates_per_minute.py's real search (rules proposer, the real pipeline and
GPU) for each example, seed and parallelism, and prints the best verified speedup each found and the mean per setting.
The speedups are measured, so two runs of the same setting differ by the timing noise too: compare
the means, and the spread between seeds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from candidates_per_minute import EXAMPLES, run_example  # noqa: E402
from common import gpu_arch  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--parallel", default="1,16", help="settings to compare, e.g. 1,16")
    ap.add_argument("--example", action="append")
    ap.add_argument("--profile", action="store_true", help="profile every candidate with ncu (default: not)")
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--arch", help="GPU architecture to build for, e.g. sm_90 (default: the GPU's)")
    a = ap.parse_args(argv)
    arch = gpu_arch("bench/throughput/parallel_quality.py", a.arch)
    from loguru import logger
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    logger.enable("optiml")
    gpus = [int(g) for g in a.gpus.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    settings = [int(p) for p in a.parallel.split(",")]
    for name in a.example or EXAMPLES:
        best: dict[int, list[float]] = {p: [] for p in settings}
        for seed in seeds:
            for p in settings:
                r = run_example(name, a.budget, seed, a.profile, gpus, p, False, arch)
                best[p].append(r["best_speedup"] or 0.0)
                print("JSON " + json.dumps({"example": name, "seed": seed, "parallel": p, "budget": a.budget,
                                            "best_speedup": r["best_speedup"], "best_path": r["best_path"],
                                            "per_minute": r["per_minute"], "statuses": r["statuses"]}), flush=True)
        for p in settings:
            print(f"{name}: --parallel {p:>2}: best speedups {', '.join(f'{b:.2f}x' for b in best[p])} "
                  f"(mean {statistics.mean(best[p]):.2f}x) over seeds {seeds}, budget {a.budget}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
