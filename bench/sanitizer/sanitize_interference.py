"""Probe: does compute-sanitizer running beside ncu slow ncu down, and which part of it.

    python3 bench/sanitizer/sanitize_interference.py [--reps 3]

Times one ncu process profiling 8 launches of the transpose example (as a profile batch does)
while, in the background, one of these runs in a loop:

* ``none``: nothing;
* ``cuda``: a plain CUDA process (CuPy: context, a small kernel, exit), no tool;
* ``memcheck``: the same process under compute-sanitizer's memcheck alone;
* ``four``: the same process under the four tools at once (what optiml's Sanitizer does).

Conditions are alternated in each repetition; prints the median ncu wall time per condition.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import BENCH, ROOT, gpu_arch  # noqa: E402

SMALL = ("import cupy as cp; x = cp.arange(1 << 20, dtype=cp.float32); "
         "k = cp.ElementwiseKernel('float32 a', 'float32 b', 'b = a * 2', 'dbl'); y = k(x); cp.cuda.runtime.deviceSynchronize()")


def loop(cmds: list[list[str]], stop: threading.Event, count: list[int]) -> None:
    while not stop.is_set():
        procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]
        for p in procs:
            p.wait()
        count[0] += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--arch", help="nvcc architecture, e.g. sm_90 (default: the GPU's)")
    args = ap.parse_args()
    args.arch = gpu_arch("bench/sanitizer/sanitize_interference.py", args.arch)
    from optiml.build import NvccBuilder
    from optiml.gpus import gpu_facts
    from optiml.profiler.ncu import NcuProfiler, find_ncu
    from optiml.verify.sanitizer import TOOLS, find_sanitizer

    src = (ROOT / "examples/transpose_naive/transpose_naive.cu").read_text()
    b = NvccBuilder(args.arch).build(src, ("-O3",))
    sym = next(iter(b.symbols.values()))
    ncu, san = find_ncu(), find_sanitizer()
    metrics, _ = NcuProfiler().metric_list(gpu_facts()[0] or "")
    py = [sys.executable, "-c", SMALL]
    conditions = {"none": [], "cuda": [py], "memcheck": [[san, "--tool", "memcheck", *py]],
                  "four": [[san, "--tool", t, *py] for t in TOOLS]}
    times: dict[str, list[float]] = {c: [] for c in conditions}
    probe = str(BENCH / "probes" / "ncu_batch_probe.py")
    for rep in range(args.reps):
        for cond, cmds in conditions.items():
            stop, count = threading.Event(), [0]
            t = threading.Thread(target=loop, args=(cmds, stop, count), daemon=True) if cmds else None
            if t:
                t.start()
                time.sleep(1.0)                      # the loop under way
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [ncu, "--nvtx"]
                for i in range(8):
                    cmd += ["--nvtx-include", f"optiml@optiml.profile.t{i}/"]
                cmd += ["--metrics", ",".join(metrics), "--clock-control", "base", "--cache-control", "all",
                        "-o", str(Path(tmp) / "rep"), "-f", sys.executable, probe, "child", b.cubin_path, sym, "8"]
                t0 = time.perf_counter()
                p = subprocess.run(cmd, capture_output=True, text=True)
                wall = time.perf_counter() - t0
            if t:
                stop.set()
                t.join()
            times[cond].append(wall)
            print(f"rep {rep} {cond:9s} ncu {wall:.2f} s (rc {p.returncode}), background loops done {count[0]}",
                  flush=True)
    for cond in conditions:
        print(f"{cond:9s} median ncu {statistics.median(times[cond]):.2f} s  {['%.2f' % x for x in times[cond]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
