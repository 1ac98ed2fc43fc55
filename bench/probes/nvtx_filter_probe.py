"""Probe: which ncu NVTX filters select a launch inside nested push/pop ranges (design input for
pre-started ncu processes, whose filter must be fixed before the candidates are known).

    python3 bench/probes/nvtx_filter_probe.py
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # bench/: common.py
import common  # noqa: E402,F401  (puts this checkout's optiml first on sys.path)

KERNEL = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] += 1.0f; }'


def child(cubin: str) -> None:
    import nvtx
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as drv

    fn = drv.module_from_file(cubin).get_function("k")
    x = drv.mem_alloc(4 * 32)
    for tag in ("t1", "t2"):
        with nvtx.annotate("optiml.profile.W", domain="optiml"):
            with nvtx.annotate(f"optiml.profile.{tag}", domain="optiml"):
                fn(x, grid=(1, 1, 1), block=(32, 1, 1))
                drv.Context.synchronize()


def main() -> int:
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print("usage: python3 " + Path(__file__).name + " (no arguments; needs a GPU and ncu)\n" + (__doc__ or ""))
        return 0
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2])
        return 0
    from optiml.build import NvccBuilder, detect_arch
    from optiml.profiler.ncu import find_ncu
    from optiml.profiler.ncu_csv import parse_raw_csv

    b = NvccBuilder(detect_arch()).build(KERNEL, ("-O3",))
    ncu = find_ncu()
    for flt in ("optiml@optiml.profile.W/", "optiml@optiml.profile.W/*/", "optiml@optiml.profile.W/*",
                "regex:optiml@optiml\\.profile\\.W/", "optiml@optiml.profile.t1/"):
        with tempfile.TemporaryDirectory() as tmp:
            rep = Path(tmp) / "rep"
            p = subprocess.run([ncu, "--nvtx", "--nvtx-include", flt, "--metrics", "gpu__time_duration.sum", "-o", str(rep),
                                "-f", sys.executable, __file__, "child", b.cubin_path], capture_output=True, text=True)
            q = subprocess.run([ncu, "-i", str(rep) + ".ncu-rep", "--csv", "--page", "raw"], capture_output=True, text=True)
            try:
                launches = parse_raw_csv(q.stdout).launches
            except ValueError:
                launches = []
            print(f"filter {flt!r}: rc {p.returncode}, {len(launches)} launches profiled, nvtx "
                  f"{[lc.nvtx_names for lc in launches]}", flush=True)
            if p.returncode:
                print(p.stdout[-600:], p.stderr[-600:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
