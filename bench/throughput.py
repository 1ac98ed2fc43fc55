"""Candidates fully evaluated per minute, and where the time goes (issue 7's benchmark).

    python3 bench/throughput.py                          # budget 100, seed 0, two small examples
    python3 bench/throughput.py --budget 20 --example transpose_naive

Runs the real search (rules proposer, fixed seed) with the real pipeline (nvcc, the GPU harness,
ncu) and a real trace store in a temporary directory, wrapping each stage's entry point with a
timer: propose (the proposer), build (nvcc, cache misses), GPU child (verify + time: one worker
process per candidate today), profile (ncu), store (SQLite writes), and the rest (the search
itself, parsing, launching processes). The floor is what the hardware and the vendor tools cost:
nvcc wall time, ncu wall time and the GPU's own kernel time (every timed sample plus the
verification launches, estimated as the timing samples' sum times 1.5). optiml's overhead is
the total minus that floor. Prints one table per example and a JSON line for the record.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXAMPLES = ("transpose_naive", "reduce_sum")


class Timed:
    """Wraps one method of an object, adding its wall time to ``self.total``."""

    def __init__(self, obj, method: str):
        self.total, self.calls = 0.0, 0
        inner = getattr(obj, method)

        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                self.total += time.perf_counter() - t0
                self.calls += 1
        setattr(obj, method, wrapper)


def run_example(name: str, budget: int, seed: int, profile: bool) -> dict:
    from optiml.build import NvccBuilder, detect_arch
    from optiml.edits.rules import RulesProposer
    from optiml.pipeline import Evaluator
    from optiml.profiler.ncu import NcuProfiler
    from optiml.search.mcts import MCTS, SearchConfig
    from optiml.search.run import PipelineEvaluator, StoreObserver
    from optiml.spec import find_spec, load_spec
    from optiml.traces.store import TraceStore
    from optiml.verify.harness import SubprocessHarness

    kernel = ROOT / "examples" / name / f"{name}.cu"
    source = kernel.read_text()
    spec = load_spec(find_spec(kernel), kernel, kernel_source=source)
    with tempfile.TemporaryDirectory(prefix="optiml-bench-") as tmp:
        builder = NvccBuilder(detect_arch(), cache_dir=Path(tmp) / "cache")
        harness = SubprocessHarness()
        profiler = NcuProfiler() if profile else None
        pipeline = Evaluator(spec, source, builder, harness, include_dir=kernel.parent, kernel_name=kernel.name,
                             profiler=profiler)
        store = TraceStore(Path(tmp) / "bench.db")
        run_id = store.start_run(spec.entry, spec_toml=spec.path.read_text(), kernel_source=source)
        proposer = RulesProposer()
        t_prop, t_build, t_gpu = Timed(proposer, "propose"), Timed(builder, "build"), Timed(harness, "run")
        t_prof = Timed(profiler, "profile") if profiler else None
        adapter = PipelineEvaluator(pipeline)
        observer = StoreObserver(store, run_id, adapter)
        t_store = [Timed(observer, m) for m in ("on_node_added", "on_node_started", "on_node_evaluated", "on_attempt")]
        samples_ms = []
        nvcc_s = 0.0

        def on_done(ev, result):
            nonlocal nvcc_s
            print(f"  [{name}] {ev.status} {ev.median_ms or 0:.4f} ms, wall {ev.wall_s:.2f} s, "
                  + ", ".join(f"{k} {v:.2f}" for k, v in ev.stage_s.items()), file=sys.stderr, flush=True)
            if ev.harness is not None and ev.harness.timing is not None:
                samples_ms.extend(ev.harness.timing.samples_ms)
            if ev.build is not None and not ev.build.cached:
                nvcc_s += ev.build.wall_s
        adapter.on_done = on_done
        search = MCTS(source, adapter, proposer, config=SearchConfig(budget=budget, seed=seed), observer=observer,
                      task=spec.summary(), entry=spec.entry)
        t0 = time.perf_counter()
        best = search.run()
        total = time.perf_counter() - t0
        store.close()
    evaluated = search.evaluations + 1           # the root is fully evaluated too
    gpu_kernel_s = 1.5 * sum(samples_ms) / 1e3
    ncu_s = t_prof.total if t_prof else 0.0
    floor = nvcc_s + ncu_s + gpu_kernel_s
    stages = {"propose": t_prop.total, "build": t_build.total, "gpu child": t_gpu.total, "profile": ncu_s,
              "store": sum(t.total for t in t_store)}
    stages["other"] = total - sum(stages.values())
    return {"example": name, "budget": budget, "seed": seed, "profile": profile, "evaluated": evaluated,
            "total_s": total, "per_minute": 60 * evaluated / total, "stages_s": stages,
            "floor_s": {"nvcc": nvcc_s, "ncu": ncu_s, "gpu kernels": gpu_kernel_s, "total": floor},
            "overhead_pct": 100 * (total - floor) / total,
            "best_speedup": (search.root.median_ms / best.median_ms) if best and best.median_ms else None}


def table(r: dict) -> str:
    lines = [f"{r['example']}: {r['evaluated']} candidates fully evaluated in {r['total_s']:.1f} s = "
             f"{r['per_minute']:.1f} per minute (budget {r['budget']}, seed {r['seed']}, "
             f"{'with' if r['profile'] else 'without'} ncu); best {r['best_speedup'] or 0:.2f}x"]
    for k, v in r["stages_s"].items():
        lines.append(f"  {k:<10} {v:8.1f} s  {100 * v / r['total_s']:5.1f} %")
    f = r["floor_s"]
    lines.append(f"  floor: nvcc {f['nvcc']:.1f} s + ncu {f['ncu']:.1f} s + GPU kernels {f['gpu kernels']:.1f} s = "
                 f"{f['total']:.1f} s; optiml's overhead {r['overhead_pct']:.0f} % of the total")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--example", action="append", choices=sorted(p.name for p in (ROOT / "examples").iterdir()
                                                                 if p.is_dir()))
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args(argv)
    from loguru import logger
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    logger.enable("optiml")
    for name in args.example or EXAMPLES:
        r = run_example(name, args.budget, args.seed, not args.no_profile)
        print(table(r), flush=True)
        print("JSON " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
