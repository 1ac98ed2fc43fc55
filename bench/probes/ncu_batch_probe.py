"""Probe: what one ncu process costs for K kernels selected by NVTX ranges (a design input of the
parallel pipeline's profile batches).

    python3 bench/probes/ncu_batch_probe.py            # K = 1, 4, 16 on the transpose example
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
from common import ROOT  # noqa: E402


def child(cubin: str, symbol: str, k: int) -> None:
    import numpy as np
    import nvtx
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as drv

    mod = drv.module_from_file(cubin)
    fn = mod.get_function(symbol)
    n = 8192
    a = drv.mem_alloc(n * n * 4)
    b = drv.mem_alloc(n * n * 4)
    drv.memcpy_htod(a, np.random.default_rng(0).standard_normal(n * n, dtype=np.float32))
    grid, block = (n // 32, n // 8, 1), (32, 8, 1)
    fn(b, a, np.int32(n), np.int32(n), grid=grid, block=block)   # warm-up (arg order irrelevant for cost)
    drv.Context.synchronize()
    for i in range(k):
        with nvtx.annotate(f"optiml.profile.t{i}", domain="optiml"):
            fn(b, a, np.int32(n), np.int32(n), grid=grid, block=block)
            drv.Context.synchronize()


def main() -> int:
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print("usage: python3 " + Path(__file__).name + " (no arguments; needs a GPU and ncu)\n" + (__doc__ or ""))
        return 0
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    from optiml.build import NvccBuilder, detect_arch
    from optiml.profiler.ncu import NcuProfiler, find_ncu
    from optiml.profiler.ncu_csv import parse_raw_csv

    src = (ROOT / "examples/transpose_naive/transpose_naive.cu").read_text()
    b = NvccBuilder(detect_arch()).build(src, ("-O3",))
    sym = next(iter(b.symbols.values()))
    from optiml.gpus import gpu_facts

    ncu = find_ncu()
    prof = NcuProfiler()
    name = gpu_facts()[0] or ""
    metrics, _ = prof.metric_list(name)
    print(f"{len(metrics)} metrics", flush=True)
    for k in (1, 4, 16):
        with tempfile.TemporaryDirectory() as tmp:
            rep = Path(tmp) / "rep"
            cmd = [ncu, "--nvtx"]
            for i in range(k):
                cmd += ["--nvtx-include", f"optiml@optiml.profile.t{i}/"]
            cmd += ["--metrics", ",".join(metrics), "--clock-control", "base", "--cache-control", "all",
                    "-o", str(rep), "-f", sys.executable, __file__, "child", b.cubin_path, sym, str(k)]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            t1 = time.perf_counter()
            q = subprocess.run([ncu, "-i", str(rep) + ".ncu-rep", "--csv", "--page", "raw", "--print-units", "base"],
                               capture_output=True, text=True)
            t2 = time.perf_counter()
            try:
                launches = parse_raw_csv(q.stdout).launches
            except ValueError:
                launches = []
            print(f"K={k}: ncu {t1 - t0:.2f} s, import {t2 - t1:.2f} s, launches profiled {len(launches)}, "
                  f"nvtx {[l.nvtx_names for l in launches][:3]} rc {p.returncode}", flush=True)
            if p.returncode:
                print(p.stdout[-2000:], p.stderr[-2000:])
    # the python child alone, without ncu
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "child", b.cubin_path, sym, "1"], check=True)
    print(f"child alone (python + CUDA init + 256 MB upload): {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
