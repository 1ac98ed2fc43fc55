"""Probe: is optimize's final speedup stable, and does it agree with each kernel timed alone?

    python3 bench/timing/final_timing.py KERNEL_A.cu KERNEL_B.cu [--rounds 3] [--spec SPEC] [--device 0]

A is the candidate (the optimized kernel), B the baseline (the seed); each has its spec beside it
(KERNEL.toml) or both take --spec, and the two specs must have the same arguments. Each round
times A and B alone by `optiml eval`'s path (a fresh GPU child each, the spec's timing), then A
interleaved with B by optimize's final-timing path (the candidate with B as its baseline, on a
persistent GPU worker, in blocks), and prints the medians, B/A (the speedup) with its interval,
and the GPU's SM clock. At the end: how far the interleaved medians stray from the medians alone
and the ratios from each other; the target is 2 % for both (exit 1 when it is missed).

The measured problem it checks: a 0.124 ms histogram kernel (0.1238/0.1245/0.1244 ms alone) came
out at 0.1248, 0.1328 and 0.1503 ms in three final timings beside its 33 ms seed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import gpu_arch  # noqa: E402


def load(kernel: Path, spec_path: Path | None):
    from optiml.spec import find_spec, load_spec

    source = kernel.read_text()
    return source, load_spec(find_spec(kernel, spec_path), kernel, kernel_source=source)


def signature(spec) -> list:
    return [(a.name, a.dtype, a.role) for a in spec.args]


def alone(spec, source: str, kernel: Path, builder, device: int):
    """One `optiml eval` of ``kernel``: its own runner, a fresh GPU child."""
    from optiml.runner import Candidate, Runner
    from optiml.verify.harness import SubprocessHarness

    with Runner.sequential(spec, source, builder, SubprocessHarness(), include_dir=kernel.resolve().parent,
                           device=device, kernel_name=kernel.name) as runner:
        return runner.evaluate(Candidate(source, name=kernel.name))


def fail(message: str) -> None:
    raise SystemExit(f"bench/timing/final_timing.py: {message}")


def clock_text(clocks: dict | None) -> str:
    if not clocks:
        return "SM clock: not read"
    start, end = clocks.get("start") or {}, clocks.get("end") or {}
    if not start.get("sm_mhz"):
        return "SM clock: no NVML"
    return (f"SM clock {start.get('sm_mhz')} -> {end.get('sm_mhz')} MHz (blocks {clocks.get('sm_mhz_min')}-"
            f"{clocks.get('sm_mhz_max')}), {start.get('temp_c')} -> {end.get('temp_c')} C, "
            f"limits {start.get('clock_limits')} -> {end.get('clock_limits')}")


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1 if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="A is the candidate, B the baseline.")
    ap.add_argument("kernel_a", type=Path, help="the candidate kernel (.cu)")
    ap.add_argument("kernel_b", type=Path, help="the baseline kernel, e.g. the seed (.cu)")
    ap.add_argument("--spec", type=Path, help="the spec of both (default: each kernel's KERNEL.toml)")
    ap.add_argument("--rounds", type=int, default=3, help="how many times to time everything (default 3)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--arch", help="nvcc architecture, e.g. sm_90 (default: the GPU's)")
    ap.add_argument("--target", type=float, default=0.02, help="the agreement asked for (default 0.02: 2 %%)")
    ap.add_argument("--json", type=Path, help="also write every figure to this file")
    a = ap.parse_args()
    arch = gpu_arch("bench/timing/final_timing.py", a.arch)
    from optiml.build import NvccBuilder
    from optiml.errors import UserError
    from optiml.runner import Candidate, Runner
    from optiml.verify.timing_stats import ratio_interval
    from optiml.verify.worker_client import WorkerHarness

    try:
        src_a, spec_a = load(a.kernel_a, a.spec)
        src_b, spec_b = load(a.kernel_b, a.spec)
    except (UserError, OSError) as e:
        fail(str(e).rstrip("."))
    if signature(spec_a) != signature(spec_b):
        fail(f"{a.kernel_a.name} and {a.kernel_b.name} do not take the same arguments, so they cannot be "
             f"timed on the same inputs")
    builder = NvccBuilder(arch)
    rows = []
    with Runner.sequential(spec_a, src_a, builder, WorkerHarness(a.device), include_dir=a.kernel_a.resolve().parent,
                           device=a.device, kernel_name=a.kernel_a.name) as together:
        for r in range(1, a.rounds + 1):
            ev_a = alone(spec_a, src_a, a.kernel_a, builder, a.device)
            ev_b = alone(spec_b, src_b, a.kernel_b, builder, a.device)
            ev = together.evaluate(Candidate(src_a, name=a.kernel_a.name), profile=False,
                                   baseline=Candidate(src_b, name=a.kernel_b.name))
            for name, e in (("A alone", ev_a), ("B alone", ev_b), ("A with B", ev)):
                if not e.ok or not e.median_ms:
                    fail(f"round {r}: {name} did not time ({e.status}: {' '.join(e.message.split())[:200]})")
            hr = ev.harness
            iv = ratio_interval(hr.baseline_timing.blocks_ms, hr.timing.blocks_ms)
            row = {"round": r, "a_alone_ms": ev_a.median_ms, "b_alone_ms": ev_b.median_ms,
                   "a_ms": ev.median_ms, "b_ms": ev.baseline_ms, "ratio": ev.baseline_ms / ev.median_ms,
                   "ratio_low": iv[1] if iv else None, "ratio_high": iv[2] if iv else None,
                   "a_reps": hr.timing.reps, "b_reps": hr.baseline_timing.reps,
                   "a_spread": hr.timing.spread, "b_spread": hr.baseline_timing.spread, "clocks": hr.clocks}
            rows.append(row)
            print(f"round {r}: alone A {ev_a.median_ms:.4f} ms, B {ev_b.median_ms:.4f} ms | interleaved "
                  f"A {ev.median_ms:.4f} ms ({hr.timing.reps} reps, IQR {100 * hr.timing.spread:.2f} %), "
                  f"B {ev.baseline_ms:.4f} ms ({hr.baseline_timing.reps} reps) | B/A {row['ratio']:.2f}x"
                  + (f" (95 % {iv[1]:.2f}-{iv[2]:.2f}x over {len(hr.timing.blocks_ms)} rounds)" if iv else "")
                  + f" | {clock_text(hr.clocks)}", flush=True)
    a_alone = statistics.median(x["a_alone_ms"] for x in rows)
    b_alone = statistics.median(x["b_alone_ms"] for x in rows)
    off_a = max(abs(x["a_ms"] / a_alone - 1) for x in rows)
    off_b = max(abs(x["b_ms"] / b_alone - 1) for x in rows)
    ratios = [x["ratio"] for x in rows]
    print(f"alone: A {a_alone:.4f} ms (spread {100 * spread([x['a_alone_ms'] for x in rows]):.2f} %), "
          f"B {b_alone:.4f} ms (spread {100 * spread([x['b_alone_ms'] for x in rows]):.2f} %); B/A alone "
          f"{b_alone / a_alone:.2f}x")
    print(f"interleaved: A within {100 * off_a:.2f} % of alone, B within {100 * off_b:.2f} %; ratios "
          f"{', '.join(f'{x:.2f}' for x in ratios)}x, spread {100 * spread(ratios):.2f} %")
    ok = off_a <= a.target and off_b <= a.target and spread(ratios) <= a.target
    print(f"{'stable' if ok else 'NOT stable'}: target {100 * a.target:g} % for the ratios' spread and for each "
          f"interleaved median against the kernel alone")
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "a_alone_ms": a_alone, "b_alone_ms": b_alone, "stable": ok},
                                     indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
