"""Candidates fully evaluated per minute, and where the time goes.

    python3 bench/throughput/candidates_per_minute.py                 # budget 100, seed 0, two small examples
    python3 bench/throughput/candidates_per_minute.py --budget 20 --example transpose_naive --gpus 0,1
    python3 bench/throughput/candidates_per_minute.py --sequential    # the one-at-a-time pipeline, for comparison

Runs the real search (rules proposer, fixed seed) on the real pipeline (nvcc, the persistent GPU
workers, ncu in batches) with a real trace store in a temporary directory, as `optiml optimize`
does (EvaluationPool, several candidates in flight). Every stage's entry point is wrapped with a
recorder of busy intervals: propose (the proposer), build (nvcc, cache misses), GPU worker
(verify + time, one persistent worker per GPU), profile (one ncu process per batch), store
(SQLite writes); inside the GPU worker, verify (of which the spec's Python reference on the
host, and the wait for the GPU it lent meanwhile) and time (the timed launches and their
check), as the worker reports them. The floor is what the hardware and the vendor tools cost: the wall time during
which nvcc, ncu or a GPU worker was running (the union of their intervals, since they overlap);
optiml's own overhead is the rest of the wall time (the search, the store, Python glue, waiting
on nothing). The GPU's own kernel time (timing samples x 1.5) is printed beside it. Prints one
table per example and a JSON line for the record.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import ROOT, gpu_arch  # noqa: E402

EXAMPLES = ("transpose_naive", "reduce_sum")


class Timed:
    """Wraps one method of an object, recording the (start, end) of every call (thread-safe)."""

    def __init__(self, obj, method: str):
        self.intervals: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        inner = getattr(obj, method)

        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                with self._lock:
                    self.intervals.append((t0, time.perf_counter()))
        setattr(obj, method, wrapper)

    @property
    def total(self) -> float:
        return sum(b - a for a, b in self.intervals)

    @property
    def calls(self) -> int:
        return len(self.intervals)


def union(intervals) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def run_example(name: str, budget: int, seed: int, profile: bool, gpus: list[int], parallel: int,
                sequential: bool, arch: str | None = None, spec_name: str | None = None) -> dict:
    from optiml.build import NvccBuilder, detect_arch
    from optiml.edits.rules import RulesProposer
    from optiml.profiler.ncu import NcuProfiler
    from optiml.runner import Preparer, Runner, standard_stages
    from optiml.search.mcts import MCTS, SearchConfig
    from optiml.app.evaluator import RunnerEvaluator
    from optiml.app.records import StoreObserver
    from optiml.spec import find_spec, load_spec
    from optiml.traces.store import TraceStore
    from optiml.verify.harness import SubprocessHarness
    from optiml.verify.worker_client import WorkerHarness

    kernel = ROOT / "examples" / name / f"{name}.cu"
    source = kernel.read_text()
    spec_path = kernel.with_name(spec_name) if spec_name else find_spec(kernel)
    spec = load_spec(spec_path, kernel, kernel_source=source)
    with tempfile.TemporaryDirectory(prefix="optiml-bench-") as tmp:
        builder = NvccBuilder(arch or detect_arch(), cache_dir=Path(tmp) / "cache")
        profiler = NcuProfiler() if profile else None
        t_build = Timed(builder, "build")
        t_prof = Timed(profiler, "profile_batch") if profiler else None
        gpu_timers = []
        pipeline = Preparer(spec, source, builder, include_dir=kernel.parent, kernel_name=kernel.name)
        if sequential:
            harness = SubprocessHarness()
            gpu_timers.append(Timed(harness, "run"))
            pool = Runner.one_slot(pipeline, harness, profiler=profiler)
        else:
            def factory(d):
                h = WorkerHarness(d)
                gpu_timers.append(Timed(h, "run"))
                return h
            pool = Runner(standard_stages(pipeline, profiler), gpus, harness_factory=factory)
        store = TraceStore(Path(tmp) / "bench.db")
        run_id = store.start_run(spec.entry, spec_toml=spec.path.read_text(), kernel_source=source)
        proposer = RulesProposer()
        t_prop = Timed(proposer, "propose")
        adapter = RunnerEvaluator(pool)
        observer = StoreObserver(store, run_id, adapter)
        t_store = [Timed(observer, m) for m in ("on_node_added", "on_node_started", "on_node_evaluated", "on_attempt")]
        samples_ms = []
        nvcc_s = [0.0]
        statuses: dict[str, int] = {}
        profiled = [0]
        phases: dict[str, float] = {}
        ncu_ratio: list[float] = []         # ncu's duration over the timed median, per candidate

        def on_done(ev, result):
            print(f"  [{name}] {ev.status} {ev.median_ms or 0:.4f} ms, wall {ev.wall_s:.2f} s, "
                  + ", ".join(f"{k} {v:.2f}" for k, v in ev.stage_s.items()), file=sys.stderr, flush=True)
            statuses[ev.status] = statuses.get(ev.status, 0) + 1
            if ev.profile is not None and ev.profile.ok:
                profiled[0] += 1
                dur = ev.profile.metrics.get("duration_ns")
                if dur and ev.median_ms:
                    ncu_ratio.append(dur / 1e6 / ev.median_ms)
            if ev.harness is not None and ev.harness.timing is not None:
                samples_ms.extend(ev.harness.timing.samples_ms)
            if ev.harness is not None:
                for k, v in ev.harness.phases.items():
                    phases[k] = phases.get(k, 0.0) + v
            if ev.build is not None and not ev.build.cached:
                nvcc_s[0] += ev.build.wall_s
        adapter.on_done = on_done
        # set-up, like the GPU workers' start above: the gpu_ops kernels are built once per machine
        # (then cached across runs); counted inside, a fresh machine's first run showed ~2.5 s of
        # nvcc as optiml's own overhead
        t_ops = time.perf_counter()
        pipeline.ops_cubin()
        ops_build_s = time.perf_counter() - t_ops
        config = SearchConfig(budget=budget, seed=seed, parallel=1 if sequential else parallel)
        search = MCTS(source, adapter, proposer, config=config, observer=observer, task=spec.summary(), entry=spec.entry)
        t0 = time.perf_counter()
        try:
            best = search.run()
            total = time.perf_counter() - t0
        finally:
            stats = pool.stats()
            pool.close()
        store.close()
    evaluated = search.evaluations + 1           # the root is fully evaluated too
    gpu_kernel_s = 1.5 * sum(samples_ms) / 1e3
    gpu_iv = [iv for t in gpu_timers for iv in t.intervals]
    ncu_iv = t_prof.intervals if t_prof else []
    busy = union(t_build.intervals + ncu_iv + gpu_iv)
    stages = {"propose": t_prop.total, "build": t_build.total, "gpu worker": sum(b - a for a, b in gpu_iv),
              " verify": phases.get("verify", 0.0), "  python ref": phases.get("python_reference", 0.0),
              "  gpu ref": phases.get("gpu_reference", 0.0),
              " time": phases.get("time", 0.0) + phases.get("check_timed", 0.0),
            " waiting for the GPU (lent)": phases.get("waiting_for_gpu", 0.0),
              "profile": t_prof.total if t_prof else 0.0, "store": sum(t.total for t in t_store)}
    return {"example": name, "spec": spec_path.name, "budget": budget, "seed": seed, "profile": profile, "gpus": gpus,
            "setup_gpu_ops_build_s": ops_build_s,
            "parallel": 1 if sequential else parallel, "sequential": sequential,
            "evaluated": evaluated, "statuses": statuses, "profiled": profiled[0],
            "total_s": total, "per_minute": 60 * evaluated / total, "stages_s": stages,
            "floor_s": {"nvcc (sum)": nvcc_s[0], "ncu (sum)": stages["profile"], "gpu worker (sum)": stages["gpu worker"],
                        "gpu kernels": gpu_kernel_s, "union of nvcc, ncu, gpu worker": busy},
            "gpu_held_s": {d: v["gpu_held_s"] for d, v in stats.items()},
            "profile_batches": {d: v["profile_batches"] for d, v in stats.items()},
            "worker_starts": {d: v["worker_starts"] for d, v in stats.items()},
            "overhead_pct": 100 * max(total - busy, 0.0) / total,
            "ncu_duration_over_timed_median": sorted(ncu_ratio)[len(ncu_ratio) // 2] if ncu_ratio else None,
            "best_speedup": (search.root.median_ms / best.median_ms) if best and best.median_ms else None,
            "best_path": list(best.path()) if best else None}


def table(r: dict) -> str:
    mode = "one at a time" if r["sequential"] else f"{r['parallel']} in flight on GPU(s) {r['gpus']}"
    lines = [f"{r['example']} ({r['spec']}): {r['evaluated']} candidates fully evaluated in {r['total_s']:.1f} s = "
             f"{r['per_minute']:.1f} per minute (budget {r['budget']}, seed {r['seed']}, "
             f"{'with' if r['profile'] else 'without'} ncu, {mode}); best {r['best_speedup'] or 0:.2f}x",
             f"  statuses {r['statuses']}; {r['profiled']} profiled (ncu's duration / timed median, median over "
             f"candidates: {r['ncu_duration_over_timed_median'] or 0:.3f})"]
    for k, v in r["stages_s"].items():
        lines.append(f"  {k:<12} {v:8.1f} s busy  ({100 * v / r['total_s']:5.1f} % of the wall time; stages overlap)")
    f = r["floor_s"]
    lines.append(f"  floor: nvcc, ncu or a GPU worker running {f['union of nvcc, ncu, gpu worker']:.1f} s of "
                 f"{r['total_s']:.1f} s (GPU kernels alone ~{f['gpu kernels']:.1f} s; GPU held "
                 + ", ".join(f"{v:.1f} s on GPU {d}" for d, v in r["gpu_held_s"].items()) + ")")
    lines.append(f"  optiml's own overhead: {r['overhead_pct']:.1f} % of the total; profile batches "
                 + "; ".join(f"GPU {d}: {v}" for d, v in r["profile_batches"].items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--example", action="append", choices=sorted(p.name for p in (ROOT / "examples").iterdir()
                                                                 if p.is_dir()))
    ap.add_argument("--spec", help="another spec beside the example's kernel, e.g. reduce_sum_torch.toml "
                                   "(its reference on the GPU)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--gpus", default="0", help="GPU ordinals, e.g. 0,1")
    ap.add_argument("--arch", help="GPU architecture to build for, e.g. sm_90 (default: the GPU's)")
    ap.add_argument("--parallel", type=int, help="candidates in flight (default 16 per GPU)")
    ap.add_argument("--sequential", action="store_true",
                    help="one candidate at a time, a new GPU child and ncu process per candidate (the old pipeline)")
    args = ap.parse_args(argv)
    arch = gpu_arch("bench/throughput/candidates_per_minute.py", args.arch)
    gpus = [int(g) for g in args.gpus.split(",")]
    from loguru import logger
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    logger.enable("optiml")
    for name in args.example or EXAMPLES:
        r = run_example(name, args.budget, args.seed, not args.no_profile, gpus, args.parallel or 16 * len(gpus),
                        args.sequential, arch, args.spec)
        print(table(r), flush=True)
        print("JSON " + json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
